"""Eviction during forward, after Dynamic Tensor Rematerialization (Kirisame et al., ICLR
2021): when the bytes held pass the limit, the held value cheapest to recompute per byte
freed goes, the least recently used first among values of about the same price.

A value's price is measured, not guessed: the time its op took, plus that of its evicted
ancestors, which a recomputation would rerun too (DTR's evicted neighbourhood).
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from typing import Any

from ..state import RECOMPUTE

__all__ = ["Evictor"]

#: how many evicted ancestors the price of an eviction walks at most
_NEIGHBOURHOOD = 64


class Evictor:
    """The held evictable slots by price tier (recompute seconds per byte, tiers a factor √2
    apart), least recently used first within a tier; :meth:`evict_until` evicts from them."""

    def __init__(self) -> None:
        #: price tier -> id(slot) -> weak reference
        self._tiers: dict[int, OrderedDict[int, weakref.ref]] = {}
        #: id(slot) -> its tier, for the held evictable slots
        self._tier_of: dict[int, int] = {}
        #: values evicted during forward, all time (for reports and tests)
        self.evictions = 0

    def enter(self, ident: int, ref: weakref.ref, slot: Any) -> None:
        """A held evictable slot: a candidate from now on."""
        self._place(ident, ref, _tier(slot.cost, slot.nbytes))

    def touch(self, slot: Any) -> None:
        """``slot`` was used again: it goes last among its tier."""
        tier = self._tier_of.get(id(slot))
        if tier is not None:
            self._tiers[tier].move_to_end(id(slot))

    def discard(self, ident: int) -> None:
        """The slot died: no longer a candidate."""
        tier = self._tier_of.pop(ident, None)
        if tier is not None:
            del self._tiers[tier][ident]

    def reprice(self, key: tuple, seconds: float) -> None:
        """An op of the timer's ``key`` ran in ``seconds``, faster than any run of it before:
        the held candidates priced at a slower run of it cost that now, and move to their
        tier. A pause at one of a step's first ops (its only run so far) otherwise priced its
        values dear for the whole step, and the step kept them over cheaper ones: the
        residual MLP of ``benchmarks/bench_budget_noise.py`` (op times jittered, σ 2) held 8
        values where 4 fit, and its plan could not know that a replay would hold less."""
        moved = []
        for ident, tier in self._tier_of.items():
            ref = self._tiers[tier][ident]
            slot = ref()
            if slot is not None and slot.priced_as == key and slot.cost > seconds:
                moved.append((ident, ref, slot, tier))
        for ident, ref, slot, tier in moved:
            slot.cost = seconds
            del self._tiers[tier][ident]
            self._place(ident, ref, _tier(seconds, slot.nbytes))

    def evict_until(self, pool: Any, limit: int) -> None:
        """Evict from ``pool`` until it holds at most ``limit`` bytes, or nothing is left.

        The first value of the cheapest tier is evicted, unless evictions since it entered
        made it dearer (its evicted ancestors would be recomputed with it): it then moves to
        its true tier and the search goes on. Each eviction is O(tiers).
        """
        tiers, tier_of = self._tiers, self._tier_of
        while pool.held_bytes > limit and tier_of:
            tier = min(t for t, members in tiers.items() if members)
            members = tiers[tier]
            ident, ref = next(iter(members.items()))
            slot = ref()
            if slot is None:  # dying: its callback removes it
                del members[ident]
                del tier_of[ident]
                continue
            true_tier = _tier(_neighbourhood_cost(slot), slot.nbytes)
            if true_tier > tier:
                del members[ident]
                self._place(ident, ref, true_tier)
                continue
            del members[ident]
            del tier_of[ident]
            pool.evict(ident, slot)
            self.evictions += 1

    def _place(self, ident: int, ref: weakref.ref, tier: int) -> None:
        members = self._tiers.get(tier)
        if members is None:
            members = self._tiers[tier] = OrderedDict()
        members[ident] = ref
        self._tier_of[ident] = tier


def _tier(seconds: float, nbytes: int) -> int:
    """The price tier of recomputing ``nbytes`` in ``seconds``: tiers a factor √2 apart."""
    return math.floor(2 * math.log2(max(seconds, 1e-12) / max(nbytes, 1)))


def _neighbourhood_cost(slot: Any) -> float:
    """Seconds to recompute ``slot``'s value: its own op's plus those of the evicted
    ancestors a recomputation would rerun first (DTR's evicted neighbourhood, walked up to
    :data:`_NEIGHBOURHOOD` slots)."""
    cost = slot.cost
    seen: set[int] = set()
    stack = [parent for parent in slot.parents if parent.value is RECOMPUTE]
    while stack and len(seen) < _NEIGHBOURHOOD:
        parent = stack.pop()
        if id(parent) in seen:
            continue
        seen.add(id(parent))
        cost += parent.cost
        stack.extend(grand for grand in parent.parents if grand.value is RECOMPUTE)
    return cost
