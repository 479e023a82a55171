"""Config fields: a dataclass field with the metadata common.cli turns into a flag (help,
flag name, choices, valid range, cli=False). Kept apart from the command line itself so
the modules the Kaggle bundle ships (the model's config among them) need nothing from
argparse.

Every number a user sets has its valid range beside its default (`at_least`, `above`,
`between`, ...): the command line and --config refuse a value outside it before any work
starts (common.cli), and tests/test_cli.py tries one beyond each bound of every field.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field


@dataclass(frozen=True)
class Range:
    """The values a number may take: low..high, each end included unless open (None: no
    bound on that side). Never NaN or infinite."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        """'>= 1', '> 0', 'in [0, 1)', 'in (0, 1)'."""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{self.low:g}, {self.high:g}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"{'<' if self.high_open else '<='} {self.high:g}"

    def outside(self) -> list[float]:
        """Values just beyond each bound (what a test tries)."""
        found = []
        if self.low is not None:
            found.append(self.low if self.low_open else self.low - 1)
        if self.high is not None:
            found.append(self.high if self.high_open else self.high + 1)
        return found


def at_least(low: float) -> Range:
    return Range(low=low)


def above(low: float) -> Range:
    return Range(low=low, low_open=True)


def between(low: float, high: float, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low, high, low_open, high_open)


def check_range(name: str, value: object, metadata) -> None:
    """Raise ValueError naming `name` (a flag or a config file's key) and the value when
    `value` lies outside the field's declared range; None passes where it is allowed."""
    valid = metadata.get("range")
    if valid is None or value is None:
        return
    values = value if isinstance(value, (tuple, list)) else [value]
    for item in values:
        if item not in valid:
            raise ValueError(f"{name} {item!r}: must be {valid.describe()}")


def option(default: object = MISSING, help: str = "", **metadata: object):
    """A dataclass field with command-line metadata: help, and optionally flag (the flag's
    name without dashes), choices, range (a Range: the valid values of a number),
    cli=False."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or a default_factory for a mutable default")
    valid = metadata.get("range")
    if valid is not None and default not in (MISSING, None):
        check_range("default", default, metadata)  # a declaration that contradicts itself
    return field(default=default, metadata={"help": help, **metadata})


def progress_option():
    """The `progress` field every stage's config has: --no-progress hides the bars."""
    return option(True, "show progress bars", flag="progress")
