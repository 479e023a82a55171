"""Config fields: a dataclass field with the metadata common.cli turns into a flag (help,
flag name, choices, cli=False). Kept apart from the command line itself so the modules the
Kaggle bundle ships (the model's config among them) need nothing from argparse."""

from __future__ import annotations

from dataclasses import MISSING, field


def option(default: object = MISSING, help: str = "", **metadata: object):
    """A dataclass field with command-line metadata: help, and optionally flag (the flag's
    name without dashes), choices, cli=False."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or a default_factory for a mutable default")
    return field(default=default, metadata={"help": help, **metadata})


def progress_option():
    """The `progress` field every stage's config has: --no-progress hides the bars."""
    return option(True, "hide the progress bars", flag="progress")
