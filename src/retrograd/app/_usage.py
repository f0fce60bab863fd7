"""The error the command-line tools raise for settings a user can fix, and the check that
raises it."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["UsageError", "require"]


class UsageError(ValueError):
    """A bad setting (an option out of range, an unknown name): the CLI prints it in one line."""


def require(checks: Iterable[tuple[bool, str]], command: str = "train") -> None:
    """Raise a :class:`UsageError` with the message of the first failed ``(ok, message)``."""
    for ok, message in checks:
        if not ok:
            raise UsageError(f"{command}: {message}")
