"""A schedule for a budget under the floor of the greedy plan: anchors kept from forward,
every other value recomputed from them once, segment by segment (Chen et al. 2016, *Training
Deep Nets with Sublinear Memory Cost*).

The greedy of :mod:`.plan` models a recomputation as holding, for the whole backward step
that needs it, every value it reruns. The checkpointer frees each by-product no backward rule
reads as soon as the recomputation has read it for the last time, so a recomputation of a
whole segment (the attention of a transformer block: the scores, their scaled and masked
copies, each as large as the softmax) holds much less than that. The floor the greedy finds
is then its model's floor, not the engine's: :func:`engine_profile` counts what the engine
holds during a recomputation, op by op.

:func:`anchored_evictions` keeps only *anchors*, a subset of the values that cut the recorded
step in two (:func:`cut_points`: in a residual network, the residual stream), and evicts every
other recomputable value. The first need of a segment recomputes it from its anchor; what
backward reads is held until its last read and the rest is dropped at once, so every evicted
value is recomputed once. :func:`anchored_plan` chooses how many cut points to keep (every
one, every second, ...) by :func:`engine_profile`: the schedule that fits the budget for the
least recomputation, else the one of the lowest peak; then keeps from forward what the
budget leaves room for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .plan import PLAN_EFFORT, Effort, Trace, profile

__all__ = [
    "AnchoredPlan",
    "anchored_evictions",
    "anchored_plan",
    "cut_points",
    "engine_profile",
    "side_anchors",
]

#: anchor strides tried: every cut point, every second one, ...
STRIDES = (1, 2, 3, 4)
#: values profiled at most by :func:`_keep_what_fits`, a quarter of a greedy plan's: its
#: model (:func:`engine_profile`) runs in Python, about 1 us a value, so that a deep trace
#: (a 1000-op chain differentiated with ``create_graph``, 2000 values) plans in about half a
#: second instead of seven; the transformers of ``benchmarks/bench_budget_loops.py`` spend
#: under a tenth of it
KEEP_EFFORT = PLAN_EFFORT // 4
#: a side anchor (:func:`side_anchors`) has a child more than this fraction of the step after
#: it, and is no larger than this fraction of the step's largest value
SIDE_SPAN = 0.25
SIDE_SIZE = 0.25


def cut_points(trace: Trace, sides: frozenset[int] = frozenset()) -> list[bool]:
    """Per value: whether it cuts the recorded step in two, no edge (parent -> child) of the
    trace passing over it in recording order, edges from ``sides`` aside (values kept for the
    whole step: :func:`side_anchors`). Kept, such a value bounds every recomputation: what
    comes after it is recomputed from it, from what follows it and from the sides alone. In a
    residual network these are the values of the residual stream.

    >>> chain = Trace([1] * 4, [0.0] * 4, [(), (0,), (1,), (2,)], [True] * 4, [[]] * 4,
    ...               [0, 1, 2, 3])
    >>> cut_points(chain)
    [True, True, True, True]
    >>> residual = Trace([1] * 4, [0.0] * 4, [(), (0,), (1,), (0, 2)], [True] * 4, [[]] * 4,
    ...                  [0, 1, 2, 3])
    >>> cut_points(residual)
    [True, False, False, True]
    >>> cut_points(residual, frozenset({0}))  # 0 kept throughout: its edge to 3 cuts nothing
    [True, True, True, True]
    """
    n = len(trace.sizes)
    furthest = _last_children(trace, sides)
    cuts, spanned = [], -1
    for v in range(n):
        cuts.append(spanned <= v)
        spanned = max(spanned, furthest[v])
    return cuts


def _last_children(trace: Trace, sides: frozenset[int] = frozenset()) -> list[int]:
    """Per value, its last child in recording order (itself when it has none); the edges of
    ``sides`` left out."""
    furthest = list(range(len(trace.sizes)))
    for child, parents in enumerate(trace.parents):
        for p in parents:
            if child > furthest[p] and p not in sides:
                furthest[p] = child
    return furthest


def side_anchors(trace: Trace) -> frozenset[int]:
    """Values read far apart (a child more than :data:`SIDE_SPAN` of the step after them) and
    small (at most :data:`SIDE_SIZE` of the largest value): kept from forward to the end, they
    stop cutting nothing. DiT's conditioning vector, read by every block's modulation, spans
    the whole step, so no value of its blocks was a cut point: the anchored schedule had one
    segment, the step, recomputed at once (1.03x NoCheckpointing's peak at a budget of 0.25x,
    6 December). A transformer's encoder memory (cross-attention) is the same, but as large as
    the values of the step: kept, it is a schedule :func:`anchored_plan` weighs beside the rest.

    >>> conditioned = Trace([1, 8, 8, 8, 8], [0.0] * 5, [(), (), (0, 1), (2,), (0, 3)],
    ...                     [True] * 5, [[]] * 5, list(range(5)))
    >>> sorted(side_anchors(conditioned))
    [0]
    """
    n = len(trace.sizes)
    if n < 4:
        return frozenset()
    largest = max(trace.sizes)
    furthest = _last_children(trace)
    return frozenset(
        v
        for v in range(n)
        if furthest[v] - v > SIDE_SPAN * n and trace.sizes[v] <= SIDE_SIZE * largest
    )


def anchored_evictions(
    trace: Trace, stride: int = 1, sides: frozenset[int] = frozenset()
) -> list[bool]:
    """Evict every recomputable value but the anchors: every ``stride``-th segment start, a
    segment start being a cut point (:func:`cut_points`, ``sides`` aside) with parents in the
    trace whose successor is no cut point (of a run of cut points, the last bounds the
    recomputation), and the ``sides``.

    >>> residual = Trace([1] * 7, [0.0] * 7, [(), (0,), (0, 1), (2,), (2, 3), (4,), (4, 5)],
    ...                  [True] * 7, [[]] * 7, list(range(7)))
    >>> anchored_evictions(residual)  # the segment starts 2, 4 and 6 kept
    [True, True, False, True, False, True, False]
    >>> anchored_evictions(residual, stride=2)  # 4 alone
    [True, True, True, True, False, True, True]
    """
    cuts = cut_points(trace, sides)
    n = len(cuts)
    starts = [
        v for v in range(n) if cuts[v] and trace.parents[v] and (v + 1 == n or not cuts[v + 1])
    ]
    anchors = set(starts[stride - 1 :: stride]) if stride > 1 else set(starts)
    anchors |= sides
    return [trace.recomputable[v] and v not in anchors for v in range(n)]


def engine_profile(trace: Trace, evicted: Sequence[bool]) -> tuple[int, float]:
    """The most bytes the engine holds (its count: views apart, no gradients) when each
    value ``evicted`` is recomputed once, at its first need, and kept to its last read, and the
    seconds of recomputation.

    As :func:`~.plan.profile`, except within a backward step: the values recomputed then are
    rerun in recording order, and one that is read neither at that step nor later is freed as
    soon as the last of them that reads it has run.
    """
    found = profile(trace, evicted, views=False)
    horizon = trace.horizon
    arrays = trace.arrays()
    sizes = arrays.sizes
    first, last = np.asarray(found.first, np.int64), np.asarray(found.last, np.int64)
    gone = np.array(evicted, dtype=np.bool_)
    needed = last >= 0
    kept, recomputed = needed & ~gone, needed & gone
    # Bytes held between steps, as a difference array: a kept value from the start to its
    # last read; a recomputed one from the step after its rerun to its last read (at its rerun
    # step it is counted by that step's rerun peak below).
    delta = np.zeros(horizon + 2, np.int64)
    delta[0] += int(sizes[kept].sum())
    np.add.at(delta, last[kept] + 1, -sizes[kept])
    held_on = recomputed & (last > first)
    np.add.at(delta, first[held_on] + 1, sizes[held_on])
    np.add.at(delta, last[held_on] + 1, -sizes[held_on])
    fixed = arrays.fixed
    np.add.at(delta, fixed[:, 1], fixed[:, 0])
    np.add.at(delta, fixed[:, 2] + 1, -fixed[:, 0])
    held = np.cumsum(delta[: horizon + 1])
    peak = max(0, int(held.max()))
    rerun_at: dict[int, list[int]] = {}
    for v in np.flatnonzero(recomputed).tolist():
        rerun_at.setdefault(int(first[v]), []).append(v)
    last_read = found.last
    for step, order in rerun_at.items():
        if step <= horizon:
            peak = max(peak, int(held[step]) + _rerun_peak(order, step, trace, last_read))
    return peak, found.seconds


def _rerun_peak(order: Sequence[int], step: int, trace: Trace, last: list[int]) -> int:
    """The most bytes the values recomputed at backward step ``step`` (``order``, parents
    first) hold at once while they are rerun: each is held from its rerun, and one needed
    only by this recomputation (no rule reads it at this step or later: its last need is
    this step) until the last of them that reads it has run."""
    sizes, parents, reads = trace.sizes, trace.parents, trace.reads
    rerun = set(order)
    uses: dict[int, int] = {}
    for v in order:
        for p in set(parents[v]):
            if p in rerun:
                uses[p] = uses.get(p, 0) + 1
    live = top = 0
    for v in order:
        live += sizes[v]
        top = max(top, live)
        for p in set(parents[v]):
            if p in rerun:
                uses[p] -= 1
                if uses[p] == 0 and last[p] == step and step not in reads[p]:
                    live -= sizes[p]
    return top


class AnchoredPlan(NamedTuple):
    """What :func:`anchored_plan` chooses."""

    evicted: list[bool]
    #: the engine's most bytes held (:func:`engine_profile`)
    peak: int
    seconds: float
    #: anchors kept: every ``stride``-th segment start
    stride: int


def anchored_plan(trace: Trace, budget: int) -> AnchoredPlan:
    """The anchored schedule (:func:`anchored_evictions`) of the stride in :data:`STRIDES`
    that fits ``budget`` for the least recomputation, else of the lowest peak; what it keeps
    from forward is searched until an :class:`~.plan.Effort` of its own is spent."""
    plans = []
    sides = side_anchors(trace)
    for kept in (frozenset(), sides) if sides else (frozenset(),):
        for stride in STRIDES:
            evicted = anchored_evictions(trace, stride, kept)
            plans.append(AnchoredPlan(evicted, *engine_profile(trace, evicted), stride))
    fitting = [plan for plan in plans if plan.peak <= budget]
    if fitting:
        best = min(fitting, key=lambda plan: plan.seconds)
    else:
        best = min(plans, key=lambda plan: (plan.peak, plan.seconds))
    return _keep_what_fits(trace, best, budget, Effort(KEEP_EFFORT))


def _keep_what_fits(trace: Trace, plan: AnchoredPlan, budget: int, effort: Effort) -> AnchoredPlan:
    """``plan``, with each evicted buffer that a rule reads kept from forward instead, the
    dearest to recompute per byte first, when the peak then stays within the budget (or where
    it is, over it) and the recomputation's seconds fall: a value read early in backward (the
    last block's) costs its bytes only while the rest of the step holds less."""
    evicted, peak, seconds = list(plan.evicted), plan.peak, plan.seconds
    cap = max(budget, peak)
    groups: dict[int, list[int]] = {}
    for v, e in enumerate(evicted):
        if e and trace.reads[v]:
            groups.setdefault(trace.owners[v], []).append(v)
    sizes, costs = trace.sizes, trace.costs
    dearest = sorted(
        groups.items(), key=lambda item: -sum(costs[v] for v in item[1]) / max(sizes[item[0]], 1)
    )
    for _owner, members in dearest:
        if effort.spent:
            break
        for v in members:
            evicted[v] = False
        effort.spend(len(evicted))
        trial_peak, trial_seconds = engine_profile(trace, evicted)
        if trial_peak <= cap and trial_seconds < seconds:
            peak, seconds = trial_peak, trial_seconds
        else:
            for v in members:
                evicted[v] = True
    return AnchoredPlan(evicted, peak, seconds, plan.stride)
