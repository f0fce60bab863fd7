"""A checkpoint plan for a repeated training step under a memory budget.

A training loop records the same graph every step. :class:`~.strategy.BudgetCheckpointing`
runs the first step eagerly (evicting during forward after DTR) and, when its backward starts,
knows the whole step: every recorded value's size, the measured time of its op, its parents,
and the backward step at which each value is read. :func:`plan_evictions` decides from that
which values the next steps evict as soon as they are made, so that the bytes held over the
whole step (forward, then backward with its recomputations) stay under the budget while the
recomputation costs as little time as it can.

The model of backward it plans against is what :class:`~.backward.BudgetCheckpointer` does: a
kept value is held from forward until its last read; an evicted value is recomputed at its
first read (or when an evicted descendant is recomputed, which reads it), from its parents,
and held until its last read. So every evicted op reruns once, and the bytes held at each
backward step are a sum of intervals. The plan is greedy (:func:`plan_evictions`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from .profile_kernel import NEVER, TraceArrays, profile_kernel, trace_arrays

__all__ = [
    "PLAN_EFFORT",
    "PLAN_LIMIT",
    "Effort",
    "Profile",
    "Trace",
    "evict_the_unneeded",
    "plan_evictions",
    "profile",
    "recompute_floor",
]

#: graphs of more recorded values than this are not planned (the greedy plan is quadratic in
#: the number of values); they run eagerly every step
PLAN_LIMIT = 3000
#: how many of the cheapest values per byte each round of the plan tries
CANDIDATES = 8
#: values profiled at most by one plan (each trial profiles the whole trace: a plan that spends
#: all of it takes about 0.9 s, 2 s when the model ran in Python): the greedy's rounds are
#: quadratic in the values and its phase under the floor cubic, so that a chain of 300
#: residual layers (1200 values) took a minute to plan at a tenth of its peak; with this cap,
#: about a second. The transformers of
#: ``benchmarks/bench_budget_loops.py`` profile at most 0.2M values a plan.
PLAN_EFFORT = 2_000_000
#: visits one buffer costs when a greedy round ranks its candidates (:func:`_candidates`):
#: that loop is Python, about 2.5 us a buffer, where a trial's profile of a value is compiled
#: (about 0.3 us), so that the ranking of a long trace's rounds is paid at its price
RANKING_VISITS = 8


class Effort:
    """What is left of one plan's :data:`PLAN_EFFORT`: every trial spends the trace's length,
    and the greedy's rounds stop once it is spent, keeping the best plan found so far, so that
    the time a plan takes is bounded whatever the graph (the plan is then rougher: it may not
    fit where a longer search would, and the planner's fallbacks under the floor take over).

    >>> effort = Effort(10)
    >>> effort.spend(6), effort.spent
    (None, False)
    >>> effort.spend(6), effort.spent
    (None, True)
    """

    __slots__ = ("left",)

    def __init__(self, visits: int = PLAN_EFFORT):
        self.left = visits

    def spend(self, visits: int) -> None:
        self.left -= visits

    @property
    def spent(self) -> bool:
        return self.left <= 0


@dataclass
class Trace:
    """One recorded step, per value in recording order (see :func:`plan_evictions`)."""

    #: bytes of each value
    sizes: list[int]
    #: seconds its op took
    costs: list[float]
    #: positions of its parents in the trace (earlier values; values from outside omitted)
    parents: list[tuple[int, ...]]
    #: whether it can be recomputed from its parents
    recomputable: list[bool]
    #: ascending backward steps at which a rule reads it
    reads: list[list[int]]
    #: position of the value whose buffer it shares (a view of a parent), or its own
    owners: list[int]
    #: ``(bytes, first step, last step)`` held whatever the plan: the untracked values held
    #: (read by rules, or backed up) and the values of an earlier graph its backward reads
    #: (a gradient penalty's), which the engine counts
    fixed: list[tuple[int, int, int]] = field(default_factory=list)
    #: the same for the gradients in flight: real memory, but not activations (neither the
    #: engine's count nor the budget covers them)
    gradients: list[tuple[int, int, int]] = field(default_factory=list)
    #: number of backward steps
    horizon: int = 0
    #: the backward step at which each later walk of a retained graph starts (its steps
    #: follow the first walk's: see :meth:`~.recorder.RecordedStep.observe`); empty for a
    #: step of one backward
    walks: tuple[int, ...] = ()
    #: FLOPs of each value's op, counted from its shapes (:mod:`.flops`); empty when unknown
    flops: list[float] = field(default_factory=list)
    _arrays: Any = field(default=None, init=False, repr=False, compare=False)
    _walk_traces: Any = field(default=None, init=False, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # a field replaced (a test pricing the trace's ops its own way) invalidates the arrays
        object.__setattr__(self, name, value)
        if name not in ("_arrays", "_walk_traces"):
            object.__setattr__(self, "_arrays", None)
            object.__setattr__(self, "_walk_traces", None)

    def walk_traces(self) -> list[tuple[int, Trace]]:
        """Per walk of a retained graph (:attr:`walks`), the step it starts at and the trace
        of that walk alone: every value, with the reads of that walk (its steps from 0), the
        fixed values and gradients of its steps; made once."""
        if self._walk_traces is None:
            starts = (0, *self.walks)
            ends = (*self.walks, self.horizon)
            parts = []
            for start, end in zip(starts, ends):

                def within(spans: list, start: int = start, end: int = end) -> list:
                    return [
                        (nbytes, max(first, start) - start, min(last, end - 1) - start)
                        for nbytes, first, last in spans
                        if last >= start and first < end
                    ]

                part = Trace(
                    sizes=self.sizes,
                    costs=self.costs,
                    parents=self.parents,
                    recomputable=self.recomputable,
                    reads=[[r - start for r in read if start <= r < end] for read in self.reads],
                    owners=self.owners,
                    fixed=within(self.fixed),
                    gradients=within(self.gradients),
                    horizon=end - start,
                    flops=self.flops,
                )
                parts.append((start, part))
            object.__setattr__(self, "_walk_traces", parts)
        return self._walk_traces

    def with_costs(self, costs: list[float]) -> Trace:
        """This trace with its ops priced at ``costs`` instead (each value's, in order)."""
        return Trace(
            sizes=self.sizes,
            costs=list(costs),
            parents=self.parents,
            recomputable=self.recomputable,
            reads=self.reads,
            owners=self.owners,
            fixed=self.fixed,
            gradients=self.gradients,
            horizon=self.horizon,
            walks=self.walks,
            flops=self.flops,
        )

    def arrays(self) -> TraceArrays:
        """The trace as :func:`profile`'s kernel reads it, made at the first call after a
        field was set (the engine never changes a recorded trace; its lists are replaced, not
        changed in place, by anyone who does)."""
        if self._arrays is None:
            self._arrays = trace_arrays(self)
        return self._arrays


class Profile(NamedTuple):
    """What :func:`profile` finds."""

    peak: int
    #: the backward step of the peak
    at: int
    #: per value: the first and last step it is needed (:data:`~.profile_kernel.NEVER`, past
    #: every step, and -1: never)
    first: list
    last: list[int]
    #: bytes held above the budget, summed over the steps
    excess: int
    #: seconds of recomputation
    seconds: float


def profile(trace: Trace, evicted: Sequence[bool], budget: int = 0, views: bool = True) -> Profile:
    """Bytes held at each backward step when the values ``evicted`` are recomputed.

    ``views``: real memory, where a view and the value it views count once and the gradients
    in flight count too; ``views=False``: the engine's own count (``Gradients.peak_bytes``,
    what the budget bounds), which counts each view apart and no gradient. Step 0 stands for
    the end of forward too: every kept value is held from its making until its last read; an
    evicted one is recomputed at its first need (its first read, or the recomputation of an
    evicted child, which reads its parents then) and held until its last. The loops run
    compiled (:mod:`.profile_kernel`).
    """
    if trace.walks:
        return _walks_profile(trace, evicted, budget, views)
    arrays = trace.arrays()
    peak, at, first, last, excess, seconds = profile_kernel()(
        arrays.sizes,
        arrays.costs,
        arrays.parent_start,
        arrays.parent_index,
        arrays.read_first,
        arrays.read_last,
        arrays.owners if views else arrays.values,
        np.array(evicted, dtype=np.bool_),
        arrays.fixed_and_gradients if views else arrays.fixed,
        trace.horizon,
        min(budget, NEVER),
    )
    return Profile(int(peak), int(at), first.tolist(), last.tolist(), int(excess), float(seconds))


def _walks_profile(trace: Trace, evicted: Sequence[bool], budget: int, views: bool) -> Profile:
    """:func:`profile` of a step whose retained graph is walked more than once: each walk
    as the engine runs it, a backward of its own (an evicted value it needs recomputed at
    its first need in that walk and held to its last read there; a kept value counted from
    the walk's start to its last read in it), the peak the highest walk's. The first walk
    starts where forward ends, which holds too the kept values only a later walk reads
    (counted on top of that walk's peak: an upper bound). The recomputation's seconds and
    the excess are the walks' sums; a value's first and last need, the earliest and the
    latest of any walk (in the steps of the whole trace)."""
    parts = [(start, profile(part, evicted, budget, views)) for start, part in trace.walk_traces()]
    first_walk = trace.walk_traces()[0][1]
    later_only = sum(
        size
        for size, read, gone, evict in zip(trace.sizes, trace.reads, first_walk.reads, evicted)
        if read and not gone and not evict
    )
    peaks = [found.peak for _, found in parts]
    peaks[0] += later_only
    worst = max(range(len(parts)), key=peaks.__getitem__)
    n = len(trace.sizes)
    first, last = [NEVER] * n, [-1] * n
    for start, found in parts:
        for v in range(n):
            if found.last[v] >= 0:
                first[v] = min(first[v], found.first[v] + start)
                last[v] = max(last[v], found.last[v] + start)
    return Profile(
        peaks[worst],
        parts[worst][1].at + parts[worst][0],
        first,
        last,
        sum(found.excess for _, found in parts) + (later_only if peaks[0] > budget else 0),
        sum(found.seconds for _, found in parts),
    )


#: the targets tried, as fractions of the budget, until a plan fits (the greedy is not
#: monotonic: aiming lower can end lower than aiming at the budget did)
TARGETS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5)


def plan_evictions(
    trace: Trace, budget: int, effort: Effort | None = None
) -> tuple[list[bool], Profile, int]:
    """Which values to evict (per value, in recording order), the planned profile and its
    peak, both as the engine counts (views apart, no gradients: what the budget bounds).

    The greedy of :func:`greedy_evictions` aimed at the budget, then, while its plan does not
    fit, at lower targets (:data:`TARGETS`); the first plan that fits, else the lowest. The
    search stops where ``effort`` (:class:`Effort`, a new one by default) is spent.
    """
    effort = Effort() if effort is None else effort
    allowance = effort.left
    best = None
    for fraction in TARGETS:
        evicted, found, peak = greedy_evictions(trace, int(budget * fraction), effort)
        if best is None or peak < best[2]:
            best = (evicted, found, peak)
        if peak <= budget or effort.spent:
            break
    if best[2] > budget:
        best = _price_free_floor(trace, budget, best, allowance, effort)
    evicted = _keep_what_fits(trace, best[0], budget, effort)
    found = profile(trace, evicted, budget, views=False)
    return evicted, found, found.peak


def _price_free_floor(
    trace: Trace, budget: int, priced: tuple, allowance: int, effort: Effort
) -> tuple[list[bool], Profile, int]:
    """Under the floor: the evictions of the lowest peak the greedy reaches when every op
    costs the same (:func:`unit_priced`), so that the floor's held bytes follow from the
    graph and the sizes alone; the measured prices only choose among the plans that hold
    no more than it (the priced search aimed at that floor, when it reaches it; then
    :func:`_keep_what_fits`). A priced search that ended lower still is kept: the floor is
    never above the price-free one (none of 30 jittered pricings of the model below did).

    The greedy's path depends on its prices: which value each round evicts is a ratio of
    excess removed to seconds added, and its phase under the floor (:func:`_lower_peak`)
    is a local search from the lowest peak that path met, so a local minimum it cannot
    leave. On the masked transformer of ``tests/test_budget_plan.py`` at 0.15x the
    measured prices ended at 659,456 bytes (nine activations kept at the end of forward,
    among them the last block's ``x @ w`` feeding the value matrix) and equal prices at
    593,920 (eight), so a step's floor moved with the timing noise of the step it was
    planned from. Half the effort left when the plan began goes to this search, whatever
    the priced one spent, so it too is the same for any prices."""
    share = Effort(allowance // 2)
    floor = plan_evictions_at(unit_priced(trace), budget, share)
    effort.spend(allowance // 2 - share.left)
    evicted, found, peak = floor
    found = profile(trace, evicted, budget, views=False)  # (the seconds at the trace's prices)
    if priced[2] <= peak:
        return priced
    if not effort.spent:
        aimed = greedy_evictions(trace, peak, effort)
        if aimed[2] <= peak:
            return aimed
    return evicted, found, peak


def plan_evictions_at(trace: Trace, budget: int, effort: Effort) -> tuple[list[bool], Profile, int]:
    """The lowest peak of the greedy aimed at each of :data:`TARGETS` of ``budget`` in
    turn, stopping at the first that fits (:func:`plan_evictions` without its last pass)."""
    best = None
    for fraction in TARGETS:
        found = greedy_evictions(trace, int(budget * fraction), effort)
        if best is None or found[2] < best[2]:
            best = found
        if found[2] <= budget or effort.spent:
            break
    return best


def unit_priced(trace: Trace) -> Trace:
    """``trace`` with every op priced at one second: a plan's seconds are then the count
    of ops it reruns, and the greedy's choices a function of the graph and sizes alone."""
    return trace.with_costs([1.0] * len(trace.costs))


def evict_the_unneeded(trace: Trace, evicted: Sequence[bool]) -> list[bool]:
    """``evicted``, with every recomputable value that no backward step needs under it (no
    rule reads it, no recomputation reruns from it) evicted too.

    The model holds a kept value only while backward needs it, from forward to its last need;
    one never needed is never counted. The engine holds a kept value in forward as soon as a
    recomputable child backs it up, and lets it go only when backward starts: an anchored
    schedule's anchor that no rule reads (the residual sum ``h`` of ``h - h.mean_dim(1)``,
    which ``sub``'s output, the next anchor, makes needless) was held through forward, a
    value per layer the plan did not predict (the residual MLP of
    ``tests/test_budget_plan.py`` at 0.3x held 36,864 bytes a step where 28,672 were
    predicted). Evicted, it costs no recomputation, and both count it nowhere.

    >>> chain = Trace([4, 4, 4], [1.0] * 3, [(), (0,), (1,)], [True] * 3,
    ...               [[], [], [0]], [0, 1, 2], horizon=1)
    >>> evict_the_unneeded(chain, [False, False, False])  # c kept: a and b never needed
    [True, True, False]
    >>> evict_the_unneeded(chain, [False, True, True])  # c recomputed from a, kept
    [False, True, True]
    """
    last = profile(trace, evicted, views=False).last
    return [
        bool(evict) or (recomputable and need < 0)
        for evict, recomputable, need in zip(evicted, trace.recomputable, last)
    ]


def _keep_what_fits(trace: Trace, evicted: list[bool], budget: int, effort: Effort) -> list[bool]:
    """``evicted``, less the evictions the peak does not need: each buffer a recomputation
    reruns for a rule that reads it, the dearest first, is kept held instead when the peak
    then still fits the budget (or stays where it is, under the floor) and the
    recomputation's seconds fall.

    The greedy evicts by excess removed per second, aiming at lower targets when it misses;
    on the way it may evict what a later, larger eviction made needless. The plan is then as
    cheap as the budget allows, which is the price selective recompute pays."""
    evicted = list(evicted)
    current = profile(trace, evicted, budget, views=False)
    cap = max(budget, current.peak)
    groups: dict[int, list[int]] = {}
    for v in range(len(evicted)):
        # what no rule reads stays evicted (needed only to recompute from, see
        # greedy_evictions): kept, the engine holds it longer than this model counts
        if evicted[v] and current.last[v] >= 0 and trace.reads[v]:
            groups.setdefault(trace.owners[v], []).append(v)
    dearest = sorted(groups.values(), key=lambda vs: -sum(trace.costs[v] for v in vs))
    for members in dearest:
        if effort.spent:
            break
        trial = _trial(trace, evicted, members, budget, effort, evicts=False)
        if trial.peak <= cap and trial.seconds < current.seconds:
            for v in members:
                evicted[v] = False
            current = trial
    return evicted


def greedy_evictions(
    trace: Trace, budget: int, effort: Effort | None = None
) -> tuple[list[bool], Profile, int]:
    """Which values to evict to fit ``budget``, by the greedy below; as
    :func:`plan_evictions`.

    Greedy, in the price DTR and Megatron's selective recompute use (bytes freed per second of
    recomputation): while the peak passes ``budget``, take the :data:`CANDIDATES` values
    cheapest to recompute per byte among those held at the peak and first needed after it,
    and evict the one that removes the most excess (bytes above the budget, summed over
    backward's steps) per second of recomputation it adds. Evicting a value whose ancestors
    are evicted makes them by-products of its recomputation, held from then until their own
    reads: the excess sees that where the peak alone would not. Stops when the peak fits or no
    candidate helps. Where the budget is out of reach, the plan then lowers the peak itself
    from the lowest met on the way (:func:`_lower_peak`): the floor of a plan that recomputes
    each evicted value once. Both phases stop where ``effort`` is spent.
    """
    effort = Effort() if effort is None else effort
    n = len(trace.sizes)
    # What no backward step reads is needed only to recompute evicted values: evicted from
    # the start (it costs nothing unless a recomputation needs it; kept, it would be held
    # from forward on, which is rarely worth its bytes).
    evicted = [trace.recomputable[v] and not trace.reads[v] for v in range(n)]
    # A buffer is freed only when every value viewing it is: views go with their owner.
    groups: dict[int, list[int]] = {}
    for v in range(n):
        groups.setdefault(trace.owners[v], []).append(v)
    current = profile(trace, evicted, budget, views=False)
    # Evictions lower the excess summed over backward's steps, which may raise the peak on the
    # way: where the budget is out of reach, the lowest peak seen is the start of phase two.
    lowest = (list(evicted), current)
    while current.peak > budget and not effort.spent:
        best, best_score, best_profile = None, math.inf, None
        # the cheapest few per byte; further down the list only while none helps
        for index, members in enumerate(_candidates(trace, groups, evicted, current, effort)):
            if (index >= CANDIDATES or effort.spent) and best_profile is not None:
                break
            trial = _trial(trace, evicted, members, budget, effort)
            saved = current.excess - trial.excess
            score = (trial.seconds - current.seconds) / saved if saved > 0 else math.inf
            if score < best_score:
                best, best_score, best_profile = members, score, trial
        if best_profile is None:
            break
        for v in best:
            evicted[v] = True
        current = best_profile
        if current.peak < lowest[1].peak:
            lowest = (list(evicted), current)
    if current.peak > budget:
        evicted, current = _lower_peak(trace, groups, *lowest, budget, effort)
    return evicted, current, current.peak


def _candidates(
    trace: Trace, groups: dict, evicted: list[bool], current: Profile, effort: Effort
) -> list:
    """The kept members of each buffer whose eviction could lower ``current``'s peak (all
    recomputable, none read at or before the peak, one held at it), cheapest per byte
    first. Ranking them is paid from ``effort`` too: each buffer looked at and each value
    its price walks (a deep chain's evicted ancestors) is a visit, so that a round's ranking,
    which can cost more than its trials on a long trace, stays within the plan's bound."""
    sizes, recomputable = trace.sizes, trace.recomputable
    at, first, last = current.at, current.first, current.last
    ranked = []
    effort.spend(RANKING_VISITS * len(groups))
    for owner, members in groups.items():
        kept = [v for v in members if not evicted[v] and last[v] >= 0]
        if not kept or not sizes[owner]:
            continue
        if any(not recomputable[v] or first[v] <= at for v in kept):
            continue
        if all(last[v] < at for v in kept):
            continue
        price = _rerun_cost(trace, evicted, last, kept, effort)
        ranked.append((price / sizes[owner], owner, kept))
    ranked.sort()
    return [kept for _price, _owner, kept in ranked]


def _rerun_cost(
    trace: Trace,
    evicted: list[bool],
    last: list[int],
    members: list[int],
    effort: Effort | None = None,
) -> float:
    """Seconds to recompute ``members``: their own ops', plus those of the evicted ancestors
    no recomputation reruns yet (``last`` below 0), which theirs would rerun first (DTR's
    evicted neighbourhood). A view of a value no rule reads costs its viewed value's op too:
    ranked by its own op alone, every cheap view of a matmul's output would look free.

    >>> chain = Trace([4, 4, 4], [3.0, 0.5, 0.1], [(), (0,), (1,)], [True] * 3,
    ...               [[], [], [2]], [0, 1, 2])
    >>> _rerun_cost(chain, [True, True, False], [-1, -1, 2], [2])
    3.6
    >>> _rerun_cost(chain, [False, True, False], [1, -1, 2], [2])
    0.6
    """
    costs, parents = trace.costs, trace.parents
    seconds = 0.0
    seen: set[int] = set()
    stack = list(members)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        seconds += costs[v]
        stack.extend(p for p in parents[v] if evicted[p] and last[p] < 0 and p not in seen)
    if effort is not None:
        effort.spend(len(seen))
    return seconds


def _trial(
    trace: Trace,
    evicted: list[bool],
    members: list[int],
    budget: int,
    effort: Effort,
    evicts: bool = True,
) -> Profile:
    """The profile with ``members`` evicted too (``evicts``), or kept (``evicted`` itself
    unchanged), paid from ``effort``."""
    effort.spend(len(evicted))
    for v in members:
        evicted[v] = evicts
    trial = profile(trace, evicted, budget, views=False)
    for v in members:
        evicted[v] = not evicts
    return trial


def _lower_peak(
    trace: Trace, groups: dict, evicted: list[bool], current: Profile, budget: int, effort: Effort
) -> tuple[list[bool], Profile]:
    """Phase two, under the floor: one move at a time, the one that lowers the peak most, else
    the excess most (a peak held over several steps falls one step at a time), the cheaper on
    a tie, until none does. A move evicts a candidate (:func:`_candidates`), or
    keeps an evicted value that is held at the peak as a by-product of a recomputation:
    keeping it from forward on cuts the chain that recomputes it, so that its evicted
    ancestors need not be held then (a chain of recomputation is the floor's usual cause)."""
    evicted = list(evicted)
    while current.peak > budget and not effort.spent:
        best, best_profile, best_evicts = None, current, True
        ranked = _candidates(trace, groups, evicted, current, effort)
        moves = [(members, True) for members in ranked]
        moves.extend(([v], False) for v in _by_products_at_peak(trace, evicted, current))
        for members, evicts in moves:
            if effort.spent and best is not None:
                break
            trial = _trial(trace, evicted, members, budget, effort, evicts)
            # strictly better than the best so far, the current plan at first: a move that
            # leaves the peak and the excess where they are and costs more is none (it and
            # its reverse would alternate for ever)
            if (trial.peak, trial.excess, trial.seconds) < (
                best_profile.peak,
                best_profile.excess,
                best_profile.seconds,
            ):
                best, best_profile, best_evicts = members, trial, evicts
        if best is None:
            break
        for v in best:
            evicted[v] = best_evicts
        current = best_profile
    return evicted, current


def _by_products_at_peak(trace: Trace, evicted: list[bool], current: Profile) -> list[int]:
    """The evicted values held at the peak's step that a backward step reads (the others are
    only ever by-products: keeping them would hold them from forward on)."""
    at, first, last = current.at, current.first, current.last
    return [
        v
        for v in range(len(evicted))
        if evicted[v] and trace.reads[v] and first[v] <= at <= last[v]
    ]


def recompute_floor(trace: Trace, budget: int) -> float:
    """A lower bound on the seconds of recomputation per step of *any* schedule that keeps
    ``trace`` under ``budget`` (as the engine counts), once or many times over, at the
    trace's prices: what a plan can at best reach, against which its own seconds are judged.

    With only the values no rule reads evicted, the bytes held at any backward step above the
    budget must go; only a value held then, read after that step and not at it, can be
    absent then, and it is recomputed at least once. Each such buffer is priced at its
    members' ops plus a share of the unread ancestors they are recomputed from (an
    ancestor's seconds split evenly among its children, so that no set of evictions is
    priced above what it costs); the cheapest per byte fill the excess, the last one in part
    (a fractional knapsack, a lower bound of the whole one). Every step bounds the whole
    schedule: the bound is the highest of the steps'. (Until 6 December only the peak's step
    was counted, where the cheapest buffers, a transformer's GELU outputs, are all held: on
    the masked transformer at 0.5x that bound was 0.82 of the plan's seconds, and a later
    step, once the last block's GELU output is read, puts it at 0.90.)

    >>> chain = Trace([4, 4, 4], [1.0, 2.0, 8.0], [(), (0,), (1,)], [True] * 3,
    ...               [[3], [2], [1]], [0, 1, 2], horizon=4)
    >>> recompute_floor(chain, 8)  # 4 bytes must go at step 0: the cheapest is value 0
    1.0
    >>> recompute_floor(chain, 6)  # 6 bytes: value 0, and half of value 1
    2.0
    >>> recompute_floor(chain, 12)
    0.0
    """
    n = len(trace.sizes)
    costs, parents = trace.costs, trace.parents
    unread = [trace.recomputable[v] and not trace.reads[v] for v in range(n)]
    children = [0] * n
    for v in range(n):
        for p in set(parents[v]):
            children[p] += 1
    share = [0.0] * n  # a value's seconds, with its share of its unread ancestors'
    for v in range(n):
        share[v] = costs[v] + sum(share[p] / children[p] for p in set(parents[v]) if unread[p])
    start = profile(trace, unread, budget, views=False)
    if start.peak <= budget:
        return 0.0
    # bytes held at each step with only the unread values evicted, as the engine counts:
    # a kept value from forward to its last read, an untracked one over its own steps
    held = np.zeros(trace.horizon + 2, dtype=np.int64)
    for v in range(n):
        if not unread[v] and start.last[v] >= 0:
            held[0] += trace.sizes[v]
            held[start.last[v] + 1] -= trace.sizes[v]
    for nbytes, first, last in trace.fixed:
        held[first] += nbytes
        held[last + 1] -= nbytes
    held = np.cumsum(held)[: trace.horizon + 1]
    groups: dict[int, list[int]] = {}
    for v in range(n):
        if not unread[v] and start.last[v] >= 0:
            groups.setdefault(trace.owners[v], []).append(v)
    buffers = []  # (seconds per byte, bytes, held until, the steps that read it)
    for owner, members in groups.items():
        if trace.sizes[owner] and all(trace.recomputable[v] for v in members):
            buffers.append(
                (
                    sum(share[v] for v in members) / trace.sizes[owner],
                    trace.sizes[owner],
                    max(start.last[v] for v in members),
                    {step for v in members for step in trace.reads[v]},
                )
            )
    buffers.sort(key=lambda buffer: buffer[0])
    bound = 0.0
    for step in np.flatnonzero(held > budget).tolist():
        excess, seconds = int(held[step]) - budget, 0.0
        for price, nbytes, until, read_at in buffers:
            if excess <= 0:
                break
            if until > step and step not in read_at:  # held then, needed after it
                seconds += price * min(nbytes, excess)
                excess -= nbytes
        bound = max(bound, seconds)
    return bound
