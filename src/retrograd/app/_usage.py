"""The error the command-line tools raise for settings a user can fix."""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(ValueError):
    """A bad setting (an option out of range, an unknown name): the CLI prints it in one line."""
