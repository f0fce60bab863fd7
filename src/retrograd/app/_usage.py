"""The errors the command-line tools raise for what a user can fix, and the check that raises
the first.

``retrograd`` prints either as one line, ``retrograd COMMAND: what — what to do``: a
:class:`UsageError` (the command line itself is wrong: a value out of range, flags that
contradict each other or mean nothing together) exits with status 2, as argparse's own errors;
a :class:`CommandError` (a well-formed command that cannot be carried out here: a missing or
damaged file, an output folder in use or holding another run) with status 1.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["CommandError", "UsageError", "require"]


class UsageError(ValueError):
    """A bad setting (an option out of range, an unknown name): the CLI prints it in one line
    and exits with status 2."""


class CommandError(RuntimeError):
    """A command that cannot be carried out (a damaged file, an output folder in use): the CLI
    prints it in one line and exits with status 1."""


def require(checks: Iterable[tuple[bool, str]], command: str = "train") -> None:
    """Raise a :class:`UsageError` with the message of the first failed ``(ok, message)``."""
    for ok, message in checks:
        if not ok:
            raise UsageError(f"{command}: {message}")
