"""A cost model of data-parallel training: the α–β time of an all-reduce and the step time
and scaling efficiency it gives, as pure functions (no MPI, nothing measured here).

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

__all__ = ["StepPrediction", "all_reduce_seconds", "predict_step"]

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
