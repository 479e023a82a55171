"""The one base class of the failures a user can fix (bad input, a checkpoint that does not
match, a memory budget): the numbered scripts print them as `error: ...` and exit 2."""

from __future__ import annotations


class UserError(Exception):
    """A failure whose message tells the user what to change; never a bug."""
