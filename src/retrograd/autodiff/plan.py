"""A checkpoint plan for a repeated training step under a memory budget.

A training loop records the same graph every step. :class:`~.checkpoint.BudgetCheckpointing`
runs the first step eagerly (evicting during forward after DTR) and, when its backward starts,
knows the whole step: every recorded value's size, the measured time of its op, its parents,
and the backward step at which each value is read. :func:`plan_evictions` decides from that
which values the next steps evict as soon as they are made, so that the bytes held over the
whole step (forward, then backward with its recomputations) stay under the budget while the
recomputation costs as little time as it can.

The model of backward it plans against is what :class:`~.checkpoint.Checkpointer` does: a
kept value is held from forward until its last read; an evicted value is recomputed at its
first read (or when an evicted descendant is recomputed, which reads it), from its parents,
and held until its last read. So every evicted op reruns once, and the bytes held at each
backward step are a sum of intervals. The plan is greedy (:func:`plan_evictions`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["PLAN_LIMIT", "plan_evictions", "profile"]

#: graphs of more recorded values than this are not planned (the greedy plan is quadratic in
#: the number of values); they run eagerly every step
PLAN_LIMIT = 3000
#: how many of the cheapest values per byte each round of the plan tries
CANDIDATES = 8


def profile(
    sizes: Sequence[int],
    parents: Sequence[Sequence[int]],
    reads: Sequence[Sequence[int]],
    evicted: Sequence[bool],
    fixed: Sequence[tuple[int, int]],
    horizon: int,
    budget: int = 0,
    costs: Sequence[float] | None = None,
) -> tuple[int, int, list, list[int], int, float]:
    """Bytes held per backward step under ``evicted``: ``(peak, step of the peak, first
    need, last need, excess, seconds)``, the needs per value (``math.inf`` / ``-1`` when it
    is never needed), the excess the sum over steps of the bytes held above ``budget``, and
    the seconds of recomputation (``costs`` of the evicted values that are needed).

    ``sizes``, ``parents`` (positions of the parents in the same trace, earlier ones),
    ``reads`` (ascending backward steps of the direct reads) are per value in recording
    order; ``fixed`` lists ``(bytes, last read)`` of values that are always held (untracked
    values a rule reads); ``horizon`` is the number of backward steps.
    """
    n = len(sizes)
    first: list = [math.inf] * n
    last = [-1] * n
    # children come after their parents: one reverse pass settles every need
    for v in range(n - 1, -1, -1):
        own = reads[v]
        if own:
            if own[0] < first[v]:
                first[v] = own[0]
            if own[-1] > last[v]:
                last[v] = own[-1]
        if evicted[v] and last[v] >= 0:
            when = first[v]  # recomputed at its first need, reading its parents then
            for p in parents[v]:
                if when < first[p]:
                    first[p] = when
                if when > last[p]:
                    last[p] = when
    delta = [0] * (horizon + 2)
    seconds = 0.0
    for v in range(n):
        if last[v] < 0:
            continue
        if evicted[v] and costs is not None:
            seconds += costs[v]
        if not sizes[v]:
            continue
        delta[first[v] if evicted[v] else 0] += sizes[v]
        delta[last[v] + 1] -= sizes[v]
    for nbytes, end in fixed:
        delta[0] += nbytes
        delta[end + 1] -= nbytes
    peak, at, held, excess = -1, 0, 0, 0
    for step in range(horizon + 1):
        held += delta[step]
        if held > peak:
            peak, at = held, step
        if held > budget:
            excess += held - budget
    return peak, at, first, last, excess, seconds


def plan_evictions(
    sizes: Sequence[int],
    costs: Sequence[float],
    parents: Sequence[Sequence[int]],
    recomputable: Sequence[bool],
    reads: Sequence[Sequence[int]],
    fixed: Sequence[tuple[int, int]],
    horizon: int,
    budget: int,
) -> tuple[list[bool], int]:
    """Which values to evict (per value, in recording order), and the planned peak.

    Greedy: while the peak passes ``budget``, take the :data:`CANDIDATES` values cheapest to
    recompute per byte among those held at the peak and first needed after it, and evict the
    one that removes the most excess (bytes above the budget, summed over backward's steps)
    per second of recomputation. Evicting a value whose ancestors are evicted makes them
    by-products of its recomputation, held from then until their own reads: the excess sees
    that where the peak alone would not. Stops when the peak fits or no candidate helps.
    """
    n = len(sizes)
    # What no backward step reads is needed only to recompute evicted values: evicted from
    # the start (it costs nothing unless a recomputation needs it; kept, it would be held
    # from forward on, which is rarely worth its bytes).
    evicted = [recomputable[v] and not reads[v] for v in range(n)]
    peak, at, first, last, excess, seconds = profile(
        sizes, parents, reads, evicted, fixed, horizon, budget, costs
    )
    while peak > budget:
        ranked = sorted(
            (costs[v] / sizes[v], v)
            for v in range(n)
            if not evicted[v]
            and recomputable[v]
            and sizes[v]
            and first[v] > at  # evicting a value read at or before the peak cannot lower it
            and last[v] >= at
        )
        best, best_score, best_profile = -1, math.inf, None
        for _price, v in ranked[:CANDIDATES]:
            evicted[v] = True
            trial = profile(sizes, parents, reads, evicted, fixed, horizon, budget, costs)
            evicted[v] = False
            saved = excess - trial[4]
            if saved > 0 and (trial[5] - seconds) / saved < best_score:
                best, best_score, best_profile = v, (trial[5] - seconds) / saved, trial
        if best < 0:
            break
        evicted[best] = True
        peak, at, first, last, excess, seconds = best_profile
    return evicted, peak
