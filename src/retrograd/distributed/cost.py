"""A cost model of data-parallel training: the α–β time of an all-reduce, an all-gather and a
reduce-scatter, the step time and scaling efficiency they give, and the step time and memory
of ZeRO stages 1 and 2 against data parallel, as pure functions (no MPI, nothing measured).

Each message costs ``alpha`` seconds of latency plus ``beta`` seconds per byte (for an
all-reduce, ``beta`` also absorbs the arithmetic of the reduction, which is memory-bound too).
``docs/distributed.md`` ("Cost model") says how to fit ``alpha`` and ``beta`` to a machine or a
network; ``benchmarks/bench_ddp.py --predict`` evaluates the model at 2-256 ranks on a few
networks (``docs/benchmarks.md``, "Data parallel, cost model").

>>> round(1e3 * all_reduce_seconds(7_440_000, 2, alpha=1.6e-6, beta=0.5e-9), 2)  # ms
3.72
"""

from __future__ import annotations

import math
from typing import NamedTuple

from ..errors import InvalidArgumentError

__all__ = [
    "StepPrediction",
    "ZeroPrediction",
    "all_gather_seconds",
    "all_reduce_seconds",
    "predict_step",
    "predict_zero",
    "reduce_scatter_seconds",
]

ALGORITHMS = ("ring", "tree", "auto")


def all_reduce_seconds(
    nbytes: float, ranks: int, *, alpha: float, beta: float, algorithm: str = "auto"
) -> float:
    """Seconds one all-reduce of ``nbytes`` takes over ``ranks`` ranks, one core each.

    - ``ring`` (reduce-scatter then all-gather, bandwidth-optimal):
      ``2 (p-1) alpha + 2 (p-1)/p n beta``;
    - ``tree`` (reduce then broadcast on a binary tree, latency-optimal):
      ``2 ceil(log2 p) (alpha + n beta)``;
    - ``auto``: the cheaper of the two, as MPI libraries and NCCL choose by message size.

    >>> a, b = 2e-6, 1e-10
    >>> all_reduce_seconds(1e6, 1, alpha=a, beta=b)
    0.0
    >>> ring = all_reduce_seconds(4e7, 64, alpha=a, beta=b, algorithm="ring")
    >>> tree = all_reduce_seconds(4e7, 64, alpha=a, beta=b, algorithm="tree")
    >>> round(ring * 1e3, 3), round(tree * 1e3, 3)    # large: the ring wins
    (8.127, 48.024)
    >>> all_reduce_seconds(8, 64, alpha=a, beta=b) < all_reduce_seconds(
    ...     8, 64, alpha=a, beta=b, algorithm="ring")   # small: the tree (auto) wins
    True
    """
    if algorithm not in ALGORITHMS:
        raise InvalidArgumentError(
            f"all_reduce_seconds: algorithm must be one of {ALGORITHMS}, got {algorithm!r}"
        )
    p = ranks
    if p <= 1:
        return 0.0
    ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes * beta
    tree = 2 * math.ceil(math.log2(p)) * (alpha + nbytes * beta)
    if algorithm == "ring":
        return ring
    if algorithm == "tree":
        return tree
    return min(ring, tree)


def all_gather_seconds(nbytes: float, ranks: int, *, alpha: float, beta: float) -> float:
    """Seconds one ring all-gather takes whose result (every rank's part together) is
    ``nbytes``: ``(p-1) alpha + (p-1)/p n beta``, each rank sending and receiving every part
    but its own once. Half a ring all-reduce of the same bytes.

    >>> a, b = 2e-6, 1e-10
    >>> all_gather_seconds(4e7, 64, alpha=a, beta=b) * 2 == all_reduce_seconds(
    ...     4e7, 64, alpha=a, beta=b, algorithm="ring")
    True
    >>> all_gather_seconds(1e6, 1, alpha=a, beta=b)
    0.0
    """
    p = ranks
    if p <= 1:
        return 0.0
    return (p - 1) * alpha + (p - 1) / p * nbytes * beta


def reduce_scatter_seconds(nbytes: float, ranks: int, *, alpha: float, beta: float) -> float:
    """Seconds one ring reduce-scatter of ``nbytes`` per rank takes (each keeps ``1/p`` of the
    sum): the all-gather's traffic in reverse, ``(p-1) alpha + (p-1)/p n beta``.

    >>> reduce_scatter_seconds(8e6, 2, alpha=0.0, beta=1e-9)
    0.004
    """
    return all_gather_seconds(nbytes, ranks, alpha=alpha, beta=beta)


class StepPrediction(NamedTuple):
    """What :func:`predict_step` predicts for one training step."""

    #: seconds per step
    step_seconds: float
    #: communication no computation hid, seconds per step
    exposed_seconds: float
    #: compute / step time: the share of ``ranks`` times one rank's throughput reached
    efficiency: float


def predict_step(
    ranks: int,
    compute_seconds: float,
    grad_bytes: float,
    *,
    alpha: float,
    beta: float,
    window_seconds: float = 0.0,
    last_bytes: float = 0.0,
    collectives: int = 1,
    overhead_seconds: float = 0.0,
    cores: int | None = None,
    algorithm: str = "auto",
) -> StepPrediction:
    """Step time of data-parallel training with a fixed batch per rank (weak scaling).

    - ``compute_seconds``: one rank's forward + backward + update, as it runs beside the
      others (measure it with every rank computing and none communicating: ``ideal``);
    - ``grad_bytes``: the gradients all-reduced per step, in ``collectives`` equal buckets;
    - ``window_seconds``: the backward still to run once the first bucket may launch, which
      the all-reduces can hide behind (0: no overlap, one all-reduce after backward);
      ``last_bytes`` of them become final only at the end of backward and never hide;
    - ``overhead_seconds``: the sync machinery's own time per step (hooks, bookkeeping);
    - ``cores``: cores for the ranks of one machine, if fewer than ``ranks``: then nothing
      is idle to hide communication behind, and moving the data takes the cores from
      compute: every all-reduce takes ``ranks / cores`` times as long.

    >>> # the 784-1024-1024-10 MLP (7.44 MB of gradients) on 2 ranks, no overlap
    >>> p = predict_step(2, 0.015, 7.44e6, alpha=1.6e-6, beta=0.5e-9)
    >>> round(1e3 * p.exposed_seconds, 2), round(p.efficiency, 3)
    (3.72, 0.801)
    >>> # overlapped: all but the last 3.2 MB hide behind 4 ms of backward
    >>> q = predict_step(2, 0.015, 7.44e6, alpha=1.6e-6, beta=0.5e-9, window_seconds=0.004,
    ...                  last_bytes=3.2e6, collectives=2)
    >>> round(1e3 * q.exposed_seconds, 2)
    1.6
    >>> # 8 ranks on 2 cores: each all-reduce costs 4 times its one-core-per-rank time
    >>> r = predict_step(8, 0.06, 7.44e6, alpha=1.6e-6, beta=0.5e-9, cores=2)
    >>> round(1e3 * r.exposed_seconds, 1)
    26.1
    """
    if ranks < 1 or compute_seconds <= 0 or collectives < 1:
        raise InvalidArgumentError(
            f"predict_step: ranks ({ranks}), compute_seconds ({compute_seconds}) and "
            f"collectives ({collectives}) must be positive"
        )
    share = 1.0 if cores is None or ranks <= cores else ranks / cores

    def reduce_time(nbytes: float, count: int) -> float:
        if count <= 0 or nbytes <= 0:
            return 0.0
        each = all_reduce_seconds(
            nbytes / count, ranks, alpha=alpha, beta=beta, algorithm=algorithm
        )
        return count * each * share

    if share > 1.0 or window_seconds <= 0.0 or collectives == 1:
        exposed = reduce_time(grad_bytes, collectives)
    else:
        last = min(last_bytes, grad_bytes)
        early = reduce_time(grad_bytes - last, collectives - 1)
        exposed = reduce_time(last, 1) + max(0.0, early - window_seconds)
    step = compute_seconds + overhead_seconds + exposed
    return StepPrediction(step, exposed, compute_seconds / step)


class ZeroPrediction(NamedTuple):
    """What :func:`predict_zero` predicts for one training step of one rank."""

    #: seconds per step
    step_seconds: float
    #: communication per step (none of it hidden)
    communication_seconds: float
    #: optimizer state held by one rank
    state_bytes: float
    #: parameters + gradients + optimizer state held by one rank
    memory_bytes: float


def predict_zero(
    stage: int,
    ranks: int,
    compute_seconds: float,
    param_bytes: float,
    *,
    state_bytes: float,
    update_seconds: float,
    alpha: float,
    beta: float,
) -> ZeroPrediction:
    """Step time and memory per rank of data parallel (``stage=0``) and of ZeRO stages 1 and 2
    (Rajbhandari et al., 2020), communication not overlapped (an upper bound on the step):

    - 0, data parallel: all-reduce the gradients (``param_bytes``), every rank updates every
      parameter (``update_seconds``) and holds the whole optimizer state;
    - 1, optimizer state sharded, as :class:`~retrograd.distributed.ZeroRedundancyOptimizer`
      runs it: the gradients' all-reduce as before, ``1/p`` of the update, then an all-gather
      of the parameters (1.5 times data parallel's traffic on a ring);
    - 2, gradients sharded too: a reduce-scatter of the gradients instead of the all-reduce,
      each rank keeping only its share (data parallel's traffic: reduce-scatter + all-gather
      is one ring all-reduce).

    ``compute_seconds``: forward and backward of one rank; ``state_bytes``: the whole
    optimizer state (Adam: twice ``param_bytes``).

    >>> kw = dict(state_bytes=2 * 4e8, update_seconds=0.02, alpha=5e-6, beta=1e-10)
    >>> ddp, one, two = (predict_zero(s, 64, 0.3, 4e8, **kw) for s in (0, 1, 2))
    >>> [round(p.step_seconds, 4) for p in (ddp, one, two)]
    [0.3994, 0.4194, 0.3797]
    >>> [round(p.memory_bytes / 1e9, 3) for p in (ddp, one, two)]   # GB per rank
    [1.6, 0.812, 0.419]
    """
    if stage not in (0, 1, 2):
        raise InvalidArgumentError(f"predict_zero: stage must be 0, 1 or 2, got {stage!r}")
    if ranks < 1 or compute_seconds <= 0:
        raise InvalidArgumentError(
            f"predict_zero: ranks ({ranks}) and compute_seconds ({compute_seconds}) must be "
            "positive"
        )
    p = ranks
    ring = {"alpha": alpha, "beta": beta}
    if stage == 0:
        comm = all_reduce_seconds(param_bytes, p, algorithm="ring", **ring)
        return ZeroPrediction(
            compute_seconds + comm + update_seconds,
            comm,
            state_bytes,
            2 * param_bytes + state_bytes,
        )
    gather = all_gather_seconds(param_bytes, p, **ring)
    if stage == 1:
        sync = all_reduce_seconds(param_bytes, p, algorithm="ring", **ring)
        grads = param_bytes
    else:
        sync = reduce_scatter_seconds(param_bytes, p, **ring)
        grads = param_bytes / p
    comm = sync + gather
    return ZeroPrediction(
        compute_seconds + comm + update_seconds / p,
        comm,
        state_bytes / p,
        param_bytes + grads + state_bytes / p,
    )
