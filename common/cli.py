"""The numbered scripts' command line: flags generated from the config dataclasses, and one
error wrapper.

A field becomes `--field-name` (or the name in its metadata's "flag"), typed from its
annotation; its help (metadata "help") ends with the default. A bool that defaults to False
is a switch `--name`, one that defaults to True is `--no-name`. A nested config dataclass
(TrainConfig's `model`) contributes its own fields' flags. Fields whose metadata says
`cli=False` (filled from the data) get no flag. Tuples and lists take a comma list.
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, fields, is_dataclass
from pathlib import Path

from common.errors import UserError


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


def _comma_list(kind: type) -> Callable[[str], tuple]:
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
            if default:
                parser.add_argument(
                    f"--no-{name}", action="store_false", help=text or f"turn {name} off", **options
                )
            else:
                parser.add_argument(f"--{name}", action="store_true", help=text, **options)
            continue
        if default is MISSING:
            options.pop("default")
            options["required"] = True
        shown = ",".join(map(str, default)) if isinstance(default, tuple | list) else default
        if default is not MISSING:
            text = f"{text} (default: {'none' if shown is None else shown})".lstrip()
        options["type"] = _comma_list(kind) if sequence else kind
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


def parse_config(parser: argparse.ArgumentParser, cls: type, argv: list[str] | None):
    """(config, args): the flags parsed and `cls` built from them; a config the dataclass
    refuses (ValueError) ends like a bad flag: usage, the message, exit 2."""
    args = parser.parse_args(argv)
    try:
        return config_from_args(cls, args), args
    except ValueError as error:
        parser.error(str(error))


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
        "--output-dir", type=Path, default=Path(output), help=f"(default: {output})"
    )


def guarded(body: Callable[[], int | None]) -> int:
    """Run a script's body; a failure the user can fix prints `error: ...` and returns 2."""
    try:
        return body() or 0
    except (UserError, FileNotFoundError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
