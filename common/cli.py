"""The numbered scripts' command line: flags generated from the config dataclasses, and one
error wrapper.

A field becomes `--field-name` (or the name in its metadata's "flag"), typed from its
annotation; its help (metadata "help") ends with the default. A bool that defaults to False
is a switch `--name`, one that defaults to True is `--no-name`. A nested config dataclass
(TrainConfig's `model`) contributes its own fields' flags. Fields whose metadata says
`cli=False` (filled from the data) get no flag. Tuples and lists take a comma list.

`--config FILE` (every script built on `parse_config`) reads the same fields from a JSON or
YAML file, nested configs as nested mappings, the field names as keys; flags given beside
it override it, unknown keys and values of the wrong type are refused. The config.json a
training run writes is such a file (its "recorded" section is ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import types
import typing
from argparse import SUPPRESS
from collections.abc import Callable
from dataclasses import MISSING, Field, fields, is_dataclass
from pathlib import Path

from common.errors import UserError
from common.options import Range, check_range


def _plain_type(annotation: object) -> tuple[type, bool]:
    """(element type, is_sequence) of an annotation, None stripped from an optional."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return _plain_type(args[0])
    if origin in (tuple, list):
        return args[0], True
    return annotation, False  # type: ignore[return-value]


def _default(f: Field) -> object:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _flag_fields(cls: type, prefix: str = ""):
    """(dotted path, flag name without dashes, field, annotation) of every field with a
    flag, nested configs flattened."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.metadata.get("cli", True) is False:
            continue
        annotation = hints[f.name]
        if is_dataclass(annotation):
            yield from _flag_fields(annotation, f"{prefix}{f.name}.")
        else:
            name = f.metadata.get("flag", f.name.replace("_", "-"))
            yield f"{prefix}{f.name}", name, f, annotation


def _ranged(kind: type, f: Field) -> Callable[[str], object]:
    """The flag's type: `kind`, and for a number its declared range (common.options), so
    that argparse names the flag and the value of a number outside it."""
    return ranged(kind, f.metadata.get("range"))


def ranged(kind: type, valid: Range | None) -> Callable[[str], object]:
    """An argparse type: `kind` within `valid` (None: any), refused as argparse refuses a
    bad value (exit 2, the flag and the value named)."""

    def parse(text: str) -> object:
        value = kind(text)
        try:
            check_range("", value, {"range": valid})
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).strip()) from None
        return value

    parse.__name__ = kind.__name__  # what argparse calls it in "invalid float value"
    return parse


def _comma_list(kind: Callable[[str], object]) -> Callable[[str], tuple]:
    def parse(text: str) -> tuple:
        return tuple(kind(item) for item in text.split(",") if item.strip())

    parse.__name__ = f"comma list of {kind.__name__}"
    return parse


def add_config_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    defaults: dict[str, object] | None = None,
    only: typing.Iterable[str] | None = None,
) -> None:
    """Add a flag per field of `cls`. defaults: overrides (dotted path -> value), e.g. for
    a field the dataclass requires; only: restrict to these dotted paths."""
    defaults = defaults or {}
    for path, name, f, annotation in _flag_fields(cls):
        if only is not None and path not in only:
            continue
        default = defaults.get(path, _default(f))
        kind, sequence = _plain_type(annotation)
        text = f.metadata.get("help", "")
        options: dict = {"dest": path, "default": default}
        if kind is bool and not sequence:
            # the flag that changes the default is shown; its opposite (hidden) undoes a
            # --config file that set the field
            if default:
                text = f"{text or f'turn {name} off'} (default: {name} on)"
                parser.add_argument(
                    f"--no-{name}", action="store_false", help=text.replace("%", "%%"), **options
                )
                parser.add_argument(f"--{name}", action="store_true", dest=path, help=SUPPRESS)
            else:
                text = f"{text} (default: off)".lstrip()
                parser.add_argument(
                    f"--{name}", action="store_true", help=text.replace("%", "%%"), **options
                )
                parser.add_argument(f"--no-{name}", action="store_false", dest=path, help=SUPPRESS)
            continue
        if default is MISSING:
            options.pop("default")
            options["required"] = True
        shown = ",".join(map(str, default)) if isinstance(default, tuple | list) else default
        if default is not MISSING:
            valid = f.metadata.get("range")
            bound = f"; {valid.describe()}" if valid is not None else ""
            shown = f.metadata.get("shown_default", "none" if shown is None else shown)
            text = f"{text} (default: {shown}{bound})".lstrip()
        parse = _ranged(kind, f) if kind in (int, float) else kind
        options["type"] = _comma_list(parse) if sequence else parse
        if "choices" in f.metadata:  # argparse shows them in place of a metavar
            options["choices"] = f.metadata["choices"]
        else:
            options["metavar"] = f.metadata.get("metavar", name.upper().replace("-", "_"))
        parser.add_argument(f"--{name}", help=text.replace("%", "%%"), **options)


def add_shorthand(
    parser: argparse.ArgumentParser,
    flag: str,
    sets: Callable[[object], dict[str, object]],
    **options: object,
) -> None:
    """A flag that sets other flags' fields (dotted path -> value) when given; like any
    flag, a later one on the command line wins."""

    class Shorthand(argparse.Action):
        def __call__(self, parser, namespace, value, option_string=None) -> None:
            for path, field_value in sets(value).items():
                setattr(namespace, path, field_value)

    parser.add_argument(flag, action=Shorthand, dest=argparse.SUPPRESS, **options)


def to_argv(config: object, only: typing.Iterable[str] | None = None) -> list[str]:
    """The flags that set `config`'s fields (those in `only`, dotted paths; default all)
    to its values: parsing them back gives the same config (the inverse of
    config_from_args, for a script that launches another with a config)."""
    argv: list[str] = []
    for path, name, f, annotation in _flag_fields(type(config)):
        if only is not None and path not in only:
            continue
        value = config
        for part in path.split("."):
            value = getattr(value, part)
        kind, sequence = _plain_type(annotation)
        if kind is bool and not sequence:
            if value != _default(f):
                argv.append(f"--{name}" if value else f"--no-{name}")
        elif value is not None:
            shown = ",".join(map(str, value)) if sequence else str(value)
            argv += [f"--{name}", shown]
    return argv


def config_from_args(cls: type, args: argparse.Namespace, prefix: str = ""):
    """Build `cls` from the parsed flags (fields without a flag keep their defaults)."""
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields(cls):
        path = f"{prefix}{f.name}"
        if is_dataclass(hints[f.name]) and f.metadata.get("cli", True) is not False:
            values[f.name] = config_from_args(hints[f.name], args, f"{path}.")
        elif hasattr(args, path):
            value = getattr(args, path)
            if isinstance(value, tuple) and typing.get_origin(hints[f.name]) is list:
                value = list(value)
            values[f.name] = value
    return cls(**values)


def _file_value(where: str, value: object, f: Field, annotation: object) -> object:
    """A config file's value for field `f`, checked against its type and choices."""
    kind, sequence = _plain_type(annotation)
    optional = type(None) in typing.get_args(annotation)
    if value is None:
        if optional:
            return None
        raise ValueError(f"{where}: null, but the field takes a {kind.__name__}")
    items = value if sequence else [value]
    if sequence and not isinstance(value, list | tuple):
        raise ValueError(f"{where}: {value!r}, but the field takes a list")
    choices = f.metadata.get("choices")
    checked = []
    for item in items:
        # YAML 1.1 (PyYAML) reads 1e-3 as a string, and off / on as booleans
        if kind is float and isinstance(item, str):
            with contextlib.suppress(ValueError):
                item = float(item)
        if kind is str and isinstance(item, bool) and {"off", "on"} & set(choices or ()):
            item = "on" if item else "off"
        fits = {
            bool: isinstance(item, bool),
            int: isinstance(item, int) and not isinstance(item, bool),
            float: isinstance(item, int | float) and not isinstance(item, bool),
            str: isinstance(item, str),
        }.get(kind, True)
        if not fits:
            raise ValueError(f"{where}: {item!r}, but the field takes a {kind.__name__}")
        if choices is not None and item not in choices:
            raise ValueError(f"{where}: {item!r} is not one of {', '.join(map(str, choices))}")
        check_range(where, item, f.metadata)
        checked.append(kind(item) if kind in (int, float) else item)
    return tuple(checked) if sequence else checked[0]


def _file_fields(cls: type, values: dict, where: str, prefix: str = "") -> dict[str, object]:
    """dotted path -> value of a config file's mapping for `cls`."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in fields(cls)}
    found: dict[str, object] = {}
    for key, value in values.items():
        f = by_name.get(key)
        if f is None:
            known = ", ".join(sorted(by_name))
            raise ValueError(f"{where}: unknown key {prefix}{key} (keys here: {known})")
        annotation = hints[key]
        if f.metadata.get("cli", True) is False and not is_dataclass(annotation):
            continue  # filled from the data (ModelConfig.n_questions...): config.json has them
        if is_dataclass(annotation):
            if not isinstance(value, dict):
                raise ValueError(f"{where}: {prefix}{key} must be a mapping of its fields")
            found |= _file_fields(annotation, value, where, f"{prefix}{key}.")
        else:
            found[f"{prefix}{key}"] = _file_value(f"{where}: {prefix}{key}", value, f, annotation)
    return found


def read_config_file(path: str | Path, cls: type) -> dict[str, object]:
    """The fields a JSON or YAML config file sets for `cls` (dotted path -> value); its
    "recorded" section (what a run wrote beside its config) is ignored."""
    path = Path(path)
    text = path.read_text()
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        try:
            values = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"{path}: not valid YAML ({error})") from None
    elif path.suffix.lower() == ".json":
        try:
            values = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not valid JSON ({error})") from None
    else:
        raise ValueError(f"{path}: a config file is .json, .yaml or .yml")
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a config file holds a mapping of field names to values")
    values = {k: v for k, v in values.items() if k != "recorded"}
    return _file_fields(cls, values, str(path))


def parse_config(
    parser: argparse.ArgumentParser, cls: type, argv: list[str] | None, config_note: str = ""
):
    """(config, args): `--config FILE` read (if given), the flags parsed over it, and
    `cls` built from them; a config file or a config the dataclass refuses (ValueError)
    ends like a bad flag: usage, the message, exit 2. config_note: added to --config's
    help."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"a JSON or YAML file of this script's config fields{config_note}; flags "
        "override it (default: none)",
    )
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--config", type=Path)
    given, _ = early.parse_known_args(argv)
    if given.config is not None:
        try:
            values = read_config_file(given.config, cls)
        except OSError as error:
            parser.error(f"--config: {error}")
        except ValueError as error:
            parser.error(str(error))
        for action in parser._actions:  # a required flag the file sets is given
            if action.dest in values:
                action.required = False
        parser.set_defaults(**values)
    args = parser.parse_args(argv)
    try:
        return config_from_args(cls, args), args
    except ValueError as error:
        parser.error(str(error))


def fold_spec(text: str) -> str | tuple[int, ...]:
    """--fold's value: one fold (3), a list (0,2), a range (0-4), or 'all'."""
    text = text.strip()
    if text == "all":
        return text
    folds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            folds += range(int(low), int(high or low) + 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: a fold (3), a list (0,2), a range (0-4) or all"
        ) from None
    if not folds or len(set(folds)) != len(folds):
        raise argparse.ArgumentTypeError(f"{text!r}: folds are distinct, from 0")
    return tuple(folds)


def fold_list_flag(parser: argparse.ArgumentParser) -> None:
    """Let the config's --fold take several folds (fold_spec): the field then holds the
    spec until `chosen_folds` expands it."""
    action = next(a for a in parser._actions if a.dest == "fold")
    action.type = fold_spec
    action.metavar = "FOLDS"
    action.help = f"{action.help}; several: 0,2 or 0-4 or all (every fold of folds/)"


def chosen_folds(spec: object, n_folds: int) -> list[int]:
    """The folds a --fold value names (an int from a config file, a fold_spec), each
    checked against the n_folds stage 2 made."""
    if spec == "all":
        return list(range(n_folds))
    folds = [spec] if isinstance(spec, int) else list(spec)  # type: ignore[arg-type]
    beyond = [k for k in folds if not 0 <= k < n_folds]
    if beyond:
        raise UserError(f"--fold {beyond[0]}: folds/ holds folds 0-{n_folds - 1}")
    return folds


def run_flag(parser: argparse.ArgumentParser, help: str) -> None:
    """--run NAME: which experiment under <output-dir>/runs/ a stage works on."""
    parser.add_argument("--run", metavar="NAME", help=help)


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser whose description is the script's docstring, kept as written."""
    return argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def path_flags(
    parser: argparse.ArgumentParser, *, input_help: str | None = None, output: str = "output"
) -> None:
    """--output-dir (and --input-dir, for the scripts that read the input folder)."""
    if input_help is not None:
        parser.add_argument(
            "--input-dir", type=Path, default=Path("input"), help=f"{input_help} (default: input)"
        )
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path(output),
        help=f"the pipeline's output folder: data/, folds/, runs/ (default: {output})",
    )


INTERRUPTED = 130  # a shell's status for a process stopped by Ctrl-C (128 + SIGINT)


def guarded(body: Callable[[], int | None], interrupted: str = "") -> int:
    """Run a script's body; a failure the user can fix prints `error: ...` and returns 2;
    Ctrl-C prints one line, `interrupted: ` and what was kept and how to go on (every file
    is written whole: a temp file, then a rename), and returns 130."""
    try:
        return body() or 0
    except (UserError, FileNotFoundError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        kept = interrupted or "every file written so far is whole; run the command again"
        print(f"\ninterrupted: {kept}", file=sys.stderr)
        return INTERRUPTED
