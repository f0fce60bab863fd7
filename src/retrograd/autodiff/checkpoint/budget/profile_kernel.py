"""The plan's model of one step's memory, compiled: :func:`~.plan.profile` is called once per
trial eviction (hundreds of times per plan, each a pass over the whole trace), which in Python
was nearly all of a plan's time (1.1 s for a 32-layer masked transformer's 330 values at a
quarter of its peak). The kernel is the same loops over arrays that :class:`TraceArrays`
makes once per trace; its results are the Python loops' exactly (integers, and the seconds
summed in the same order).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

#: the first step of a value never needed: past every backward step
NEVER = 1 << 62


class TraceArrays(NamedTuple):
    """A :class:`~.plan.Trace` as the kernel reads it (made once per trace)."""

    sizes: np.ndarray
    costs: np.ndarray
    #: each value's parents: ``parent_index[parent_start[v]:parent_start[v + 1]]``
    parent_start: np.ndarray
    parent_index: np.ndarray
    #: the first and last backward step a rule reads each value (``NEVER`` and -1: none)
    read_first: np.ndarray
    read_last: np.ndarray
    owners: np.ndarray
    values: np.ndarray  # each value its own owner: the engine's count, views apart
    #: ``(bytes, first step, last step)`` rows of the trace's fixed spans, and with the
    #: gradients in flight
    fixed: np.ndarray
    fixed_and_gradients: np.ndarray


def trace_arrays(trace: Any) -> TraceArrays:
    n = len(trace.sizes)
    counts = np.fromiter((len(p) for p in trace.parents), np.int64, n)
    parent_start = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=parent_start[1:])
    parent_index = np.fromiter(
        (p for parents in trace.parents for p in parents), np.int64, int(parent_start[-1])
    )
    read_first = np.fromiter((r[0] if r else NEVER for r in trace.reads), np.int64, n)
    read_last = np.fromiter((r[-1] if r else -1 for r in trace.reads), np.int64, n)

    def spans(rows: list) -> np.ndarray:
        return np.array(rows, np.int64).reshape(len(rows), 3)

    return TraceArrays(
        np.array(trace.sizes, np.int64).reshape(n),
        np.array(trace.costs, np.float64).reshape(n),
        parent_start,
        parent_index,
        read_first,
        read_last,
        np.array(trace.owners, np.int64).reshape(n),
        np.arange(n, dtype=np.int64),
        spans(trace.fixed),
        spans(trace.fixed + trace.gradients),
    )


@functools.cache
def profile_kernel() -> Callable:
    """:func:`profile_steps` compiled by Numba, on the first plan: importing Numba costs a
    process half a second of CPU, which one that never plans a budget should not pay."""
    import numba

    from ....backend import numba_interrupts  # noqa: F401  (Ctrl-C held while it is made)

    return numba.njit(cache=True, nogil=True)(profile_steps)


def profile_steps(
    sizes, costs, parent_start, parent_index, read_first, read_last, owners, evicted, spans,
    horizon, budget
):  # fmt: skip
    """``(peak, at, first, last, excess, seconds)`` as :func:`~.plan.profile` defines them
    (the kernel's source: :func:`profile_kernel` compiles it)."""
    n = sizes.shape[0]
    first = np.full(n, NEVER, np.int64)
    last = np.full(n, -1, np.int64)
    # children come after their parents: one reverse pass settles every need
    for v in range(n - 1, -1, -1):
        if read_last[v] >= 0:
            if read_first[v] < first[v]:
                first[v] = read_first[v]
            if read_last[v] > last[v]:
                last[v] = read_last[v]
        if evicted[v] and last[v] >= 0:
            when = first[v]  # recomputed at its first need, reading its parents then
            for k in range(parent_start[v], parent_start[v + 1]):
                p = parent_index[k]
                if when < first[p]:
                    first[p] = when
                if when > last[p]:
                    last[p] = when
    seconds = 0.0
    # a buffer is held from the first start to the last end of the values holding it
    starts = np.full(n, NEVER, np.int64)
    ends = np.full(n, -1, np.int64)
    for v in range(n):
        if last[v] < 0:
            continue
        start = 0
        if evicted[v]:
            seconds += costs[v]
            start = first[v]
        owner = owners[v]
        if start < starts[owner]:
            starts[owner] = start
        if last[v] > ends[owner]:
            ends[owner] = last[v]
    delta = np.zeros(horizon + 2, np.int64)
    for owner in range(n):
        if ends[owner] >= 0:
            delta[starts[owner]] += sizes[owner]
            delta[ends[owner] + 1] -= sizes[owner]
    for k in range(spans.shape[0]):
        delta[spans[k, 1]] += spans[k, 0]
        delta[spans[k, 2] + 1] -= spans[k, 0]
    peak, at, held, excess = -1, 0, 0, 0
    for step in range(horizon + 1):
        held += delta[step]
        if held > peak:
            peak, at = held, step
        if held > budget:
            excess += held - budget
    return peak, at, first, last, excess, seconds


def profile_loops(trace: Any, evicted: Any, budget: int = 0, views: bool = True) -> tuple:
    """:func:`profile_kernel`'s specification: the same loops over the trace's own lists, as
    ``plan.profile`` ran them in Python before they were compiled (a step never needed has
    first need ``math.inf`` here, :data:`NEVER` there). ``tests/test_budget_profile_kernel.py``
    checks the kernel against it; ``benchmarks/bench_budget_plan.py`` times both."""
    sizes, parents, reads = trace.sizes, trace.parents, trace.reads
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
    horizon = trace.horizon
    seconds = 0.0
    costs = trace.costs
    # a buffer is held from the first start to the last end of the values holding it
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    owners = trace.owners if views else range(n)
    for v in range(n):
        if last[v] < 0:
            continue
        if evicted[v]:
            seconds += costs[v]
        start = first[v] if evicted[v] else 0
        owner = owners[v]
        if owner in starts:
            if start < starts[owner]:
                starts[owner] = start
            if last[v] > ends[owner]:
                ends[owner] = last[v]
        else:
            starts[owner], ends[owner] = start, last[v]
    delta = [0] * (horizon + 2)
    for owner, start in starts.items():
        delta[start] += sizes[owner]
        delta[ends[owner] + 1] -= sizes[owner]
    for nbytes, start, end in trace.fixed + trace.gradients if views else trace.fixed:
        delta[start] += nbytes
        delta[end + 1] -= nbytes
    peak, at, held, excess = -1, 0, 0, 0
    for step in range(horizon + 1):
        held += delta[step]
        if held > peak:
            peak, at = held, step
        if held > budget:
            excess += held - budget
    return peak, at, first, last, excess, seconds
