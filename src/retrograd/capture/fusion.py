"""Fusion: chains of elementwise calls grouped into one kernel each."""

from __future__ import annotations

__all__ = ["fuse_calls"]


def fuse_calls(calls: list[tuple], meta: list, later: set, exact: bool) -> tuple[list, int]:
    return calls, 0
