"""The numbered scripts' command line: flags generated from the config dataclasses, and one
error wrapper.

A field becomes `--field-name` (or the name in its metadata's "flag"), typed from its
annotation; its help (metadata "help") ends with the default. A bool becomes the pair
`--name` / `--no-name` (argparse's BooleanOptionalAction); its help says what True means,
and the command line writes the `--no-` wording itself. A nested config dataclass
(TrainConfig's `model`) contributes its fields' flags, behind its metadata's "prefix"
(`lstm`: --lstm-d-model); `cli=False` (filled from the data): no flag; tuples, lists: a
comma list.

`--config FILE` (every script built on `parse_config`, and 00_convert_kt_dataset.py through
`config_flag`) reads either form, flags given beside it overriding it:
- a recipe (configs/*.toml, common/recipe.py): one file of a whole pipeline's settings, a
  table per script ([train] for 03_train.py), field names and the script's own flags'
  names (output_dir, run) as keys;
- a JSON or YAML file of one script's fields, nested configs as nested mappings, such as
  the config.json a training run writes (its "recorded" section is ignored).
Unknown keys and values of the wrong type are refused, the file and the key named.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import types
import typing
from argparse import SUPPRESS
from collections.abc import Callable
from dataclasses import MISSING, Field, fields, is_dataclass
from pathlib import Path

from common import recipe
from common.errors import UserError
from common.files import no_new_empty_folders, os_error_line
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


def _flag_fields(cls: type, prefix: str = "", flag_prefix: str = ""):
    """(dotted path, flag name without dashes, field, annotation) of every field with a
    flag, nested configs flattened (behind their metadata's "prefix")."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.metadata.get("cli", True) is False:
            continue
        annotation = hints[f.name]
        if is_dataclass(annotation):
            nested = flag_prefix + f.metadata.get("prefix", "")
            yield from _flag_fields(annotation, f"{prefix}{f.name}.", nested)
        else:
            name = f.metadata.get("flag", f.name.replace("_", "-"))
            yield f"{prefix}{f.name}", flag_prefix + name, f, annotation


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
            # --name sets the field, --no-name clears it (and undoes a --config file's value);
            # the help says what the field's True means
            text = f"{text or f'{name} on'} (default: {'on' if default else 'off'})"
            switch = parser.add_argument(
                f"--{name}", action=argparse.BooleanOptionalAction, **options
            )
            switch.help = text.replace("%", "%%")  # without argparse's own "(default: True)"
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


def _file_fields(
    cls: type, values: dict, where: str, prefix: str = "", recorded: bool = True
) -> dict[str, object]:
    """dotted path -> value of a config file's mapping for `cls`; recorded: the fields
    filled from the data (cli=False) are skipped, as a run's config.json holds them (else
    refused: a recipe sets none)."""
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
            if recorded:  # filled from the data (ModelConfig.n_questions...)
                continue
            raise ValueError(f"{where}: {prefix}{key} is filled from the data, not set")
        if is_dataclass(annotation):
            if not isinstance(value, dict):
                table = where.rpartition("[")[2].rstrip("]") if where.endswith("]") else "<table>"
                hint = f"; {f.metadata['help']}" if "help" in f.metadata else ""
                raise ValueError(
                    f"{where}: {prefix}{key} = {value!r}: {prefix}{key} is not one value but "
                    f"the nested config {annotation.__name__}, a table of its fields ([{table}."
                    f"{prefix}{key}] in a recipe, a mapping in JSON or YAML){hint}"
                )
            found |= _file_fields(annotation, value, where, f"{prefix}{key}.", recorded)
        else:
            found[f"{prefix}{key}"] = _file_value(f"{where}: {prefix}{key}", value, f, annotation)
    return found


def read_config_file(path: str | Path, cls: type) -> dict[str, object]:
    """The fields a JSON or YAML config file sets for `cls` (dotted path -> value); its
    "recorded" section (what a run wrote beside its config) is ignored."""
    path = Path(path)
    text = recipe.read_text(path)
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
        raise ValueError(f"{path}: a config file is a recipe (.toml), or .json, .yaml or .yml")
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a config file holds a mapping of field names to values")
    values = {k: v for k, v in values.items() if k != "recorded"}
    return _file_fields(cls, values, str(path))


def _script_value(where: str, value: object, action: argparse.Action) -> object:
    """A recipe's value for one of the script's own flags (--output-dir, --run, ...), read
    as the flag reads its text: a switch takes true or false."""
    if action.nargs == 0:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: {value!r}, but the flag is a switch: true or false")
        return value
    listed = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    if listed != isinstance(value, list) or isinstance(value, dict | bool):
        kind = "a list" if listed else "one value"
        raise ValueError(f"{where}: {value!r}, but the flag takes {kind}")
    read = action.type or str
    found = []
    for item in value if listed else [value]:
        try:
            item = read(str(item))
        except (argparse.ArgumentTypeError, TypeError, ValueError) as error:
            raise ValueError(f"{where}: {item!r}: {error}") from None
        if action.choices is not None and item not in action.choices:
            raise ValueError(
                f"{where}: {item!r} is not one of {', '.join(map(str, action.choices))}"
            )
        found.append(item)
    return found if listed else found[0]


def _recipe_values(
    path: Path, stage: str, parser: argparse.ArgumentParser, cls: type | None
) -> dict[str, object]:
    """dest -> value of the recipe's [stage] table: `cls`'s fields checked as a config
    file's, the script's own flags read as each reads its text, and a fold list flag's
    value (3, "0-4", "all") as --fold reads it; any other key refused."""
    table, where = recipe.read_table(path, stage), f"{path} [{stage}]"
    names = {f.name for f in fields(cls)} if cls is not None else set()
    paths = {p for p, _, _, _ in _flag_fields(cls)} if cls is not None else set()
    actions = {a.dest: a for a in parser._actions if a.dest not in (SUPPRESS, "help", "config")}
    own = {dest: action for dest, action in actions.items() if dest not in paths}
    found: dict[str, object] = {}
    for key in list(table):
        if key not in names and key not in own:
            known = ", ".join(sorted(names | set(own)))
            raise ValueError(f"{where}: unknown key {key} (keys here: {known})")
        value = table[key]
        if key in own:
            found[key] = _script_value(f"{where}: {key}", table.pop(key), own[key])
        elif key in actions and actions[key].type is fold_spec and type(value) in (int, str):
            try:
                found[key] = fold_spec(str(table.pop(key)))
            except argparse.ArgumentTypeError as error:
                raise ValueError(f"{where}: {key} {error}") from None
    return found | (_file_fields(cls, table, where, recorded=False) if cls is not None else {})


def config_flag(
    parser: argparse.ArgumentParser,
    argv: list[str] | None,
    *,
    stage: str | None,
    cls: type | None = None,
    note: str = "",
) -> None:
    """Add --config FILE and, when it is given, read it into the parser's defaults, so
    that flags override it: a recipe (.toml, common.recipe: the script's [stage] table) or,
    for a script built on `cls`, a JSON or YAML file of its fields. A file the parser
    cannot read ends like a bad flag: usage, the message naming the file, exit 2."""
    forms = [f"a recipe (.toml, e.g. configs/demo.toml: its [{stage}] table)"] if stage else []
    if cls is not None:
        forms.append(f"a JSON or YAML file of this script's config fields{note}")
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"{' or '.join(forms)}; flags override it (default: none)",
    )
    files = flag_values(argv, "--config")
    if not files:
        return
    if len(files) > 1:  # argparse would read the last one only
        parser.error(f"--config given {len(files)} times ({', '.join(files)}): give one file")
    config = Path(files[0])
    try:
        if recipe.is_recipe(config) and stage is not None:
            values = _recipe_values(config, stage, parser, cls)
        elif cls is not None:
            values = read_config_file(config, cls)
        else:
            raise ValueError(f"{config}: this script reads a recipe (.toml)")
    except OSError as error:
        parser.error(f"--config: {error}")
    except ValueError as error:
        parser.error(str(error))
    for action in parser._actions:  # a required flag the file sets is given
        if action.dest in values:
            action.required = False
    parser.set_defaults(**values)


def flag_values(argv: list[str] | None, flag: str) -> list[str]:
    """Each value `flag` is given in `argv` (None: sys.argv), read as argparse reads it
    (`--flag=V`, an abbreviation): whether a flag was given, not set by a --config file."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument(flag, dest="values", action="append", default=[])
    return early.parse_known_args(argv)[0].values


def parse_config(
    parser: argparse.ArgumentParser,
    cls: type,
    argv: list[str] | None,
    config_note: str = "",
    *,
    stage: str | None = None,
):
    """(config, args): `--config FILE` read (config_flag: a recipe's [stage] table, or a
    file of `cls`'s fields; without a stage, only the latter), the flags parsed over it,
    and `cls` built from them; a config the dataclass refuses (ValueError) ends like a bad
    flag: usage, the message, exit 2. config_note: added to --config's help."""
    config_flag(parser, argv, stage=stage, cls=cls, note=config_note)
    args = parser.parse_args(argv)
    try:
        return config_from_args(cls, args), args
    except ValueError as error:
        parser.error(str(error))


def recipe_config(
    path: str | Path, stage: str, cls: type, leave_out: typing.Iterable[str] = ()
) -> tuple[object, list[str]]:
    """(`cls` as the recipe's [stage] table sets it, the dotted paths of the fields it
    sets); its other keys (the script's own flags, such as output_dir) and the fields in
    `leave_out` are left aside. A benchmark launches a script with a recipe's settings
    (to_argv) in folders of its own."""
    table = recipe.read_table(path, stage)
    names = {f.name for f in fields(cls)} - set(leave_out)
    where = f"{path} [{stage}]"
    values = _file_fields(cls, {k: v for k, v in table.items() if k in names}, where, "", False)
    parser = argparse.ArgumentParser()
    add_config_flags(parser, cls)
    parser.set_defaults(**values)
    return config_from_args(cls, parser.parse_args([])), list(values)


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
TERMINATED = 128 + signal.SIGTERM  # ... and by SIGTERM (kill, a scheduler, torchrun)


class Terminated(BaseException):
    """SIGTERM, raised where the script is, so that its writers clean up as on Ctrl-C."""

    @classmethod
    def handler(cls, signum: int, frame: object) -> None:
        raise cls


def guarded(
    body: Callable[[], int | None], interrupted: str = "", output_dir: Path | None = None
) -> int:
    """Run a script's body; a failure the user can fix (an OSError such as a full disk:
    its path and what to do) prints `error: ...` and returns 2; Ctrl-C (SIGTERM) prints
    `interrupted: ` (`terminated: `), what was kept (every file whole) and how to go on,
    and returns 130 (143). The empty folders the body made under `output_dir` go."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, Terminated.handler) if main else None
    kept = interrupted or "every file written so far is whole; run the command again"
    try:
        with no_new_empty_folders(output_dir) if output_dir else contextlib.nullcontext():
            return body() or 0
    except (UserError, OSError) as error:
        plain = isinstance(error, UserError | FileNotFoundError | FileExistsError)
        line = str(error) if plain else os_error_line(error)
        if line is None:  # not the user's to fix
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninterrupted: {kept}", file=sys.stderr)
        return INTERRUPTED
    except Terminated:
        print(f"\nterminated: {kept}", file=sys.stderr)
        return TERMINATED
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
