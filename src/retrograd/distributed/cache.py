"""Small bounded caches for what repeats from one step to the next.

Registration payloads, bucket plans and agreement verdicts are the same at every training
step (the same parameters, in the same order), so each is built once. Bounded, in case they
keep changing (a model whose graph differs each step).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CACHE_SIZE", "remember"]

CACHE_SIZE = 64


def remember(cache: dict, key: Any, value: Any) -> Any:
    """Store ``value`` under ``key`` and return it, first dropping the oldest entry if
    ``cache`` is full.

    >>> cache = {}
    >>> remember(cache, "a", 1)
    1
    >>> cache
    {'a': 1}
    """
    if len(cache) >= CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value
