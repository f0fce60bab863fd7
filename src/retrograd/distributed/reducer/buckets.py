"""Bucket planning: which gradients are fused into one all-reduce, as pure functions.

A plan is computed from parameters ``(id value, numel, dtype)`` in the order their gradients
become final. Members agree on one plan (member 0's, see :mod:`.registration`); each device
also plans for itself when backward starts (:func:`bucket_plan`), which is the agreed plan
whenever the members register the same parameters in the same order, so the backward hook can
hold a bucket's gradients back until the bucket is complete.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..cache import remember
from ..config import DistributedConfig

__all__ = ["ITEMSIZE", "Bucket", "assign", "bucket_plan", "nbytes", "plan_buckets"]

ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}

#: one parameter as plans see it: (id value, number of elements, dtype)
Entry = tuple[int, int, str]


def nbytes(numel: int, dtype: str) -> int:
    """The size of a gradient (8 bytes an element for a dtype not listed).

    >>> nbytes(10, "float32")
    40
    """
    return numel * ITEMSIZE.get(dtype, 8)


class Bucket:
    """Parameters (by id value) whose gradients are all-reduced as one."""

    __slots__ = ("dtype", "index", "nbytes", "values")

    def __init__(self, index: int, dtype: str):
        self.index = index
        self.dtype = dtype
        self.values: list[int] = []
        self.nbytes = 0

    def __repr__(self) -> str:
        return f"Bucket({self.index}, {self.dtype}, {self.values})"


def plan_buckets(entries: Sequence[Entry], config: DistributedConfig) -> list[Bucket]:
    """Fuse parameters ``(id value, numel, dtype)``, in the order given (the order their
    gradients become final), into buckets of about ``config.bucket_bytes``, one dtype each.
    The bucket that holds the gradient final last is split: its last
    ``config.last_bucket_bytes`` or so go to a bucket of their own, so the rest of it launches
    before backward ends, if that rest is the larger part (else it would gain little).

    >>> entries = [(1, 4, "float32"), (2, 8, "float32"), (3, 8, "float32"), (4, 2, "float32")]
    >>> config = DistributedConfig(bucket_bytes=80, first_bucket_bytes=16, last_bucket_bytes=0)
    >>> [b.values for b in plan_buckets(entries, config)]
    [[1], [2, 3, 4]]
    >>> config = DistributedConfig(bucket_bytes=80, first_bucket_bytes=16, last_bucket_bytes=8)
    >>> [b.values for b in plan_buckets(entries, config)]
    [[1], [2, 3], [4]]
    >>> config = DistributedConfig(bucket_bytes=80, first_bucket_bytes=16, last_bucket_bytes=40)
    >>> [b.values for b in plan_buckets(entries, config)]  # 72 bytes: not split
    [[1], [2, 3, 4]]
    """
    buckets: list[Bucket] = []
    open_by_dtype: dict[str, Bucket] = {}
    nbytes_of: dict[int, int] = {}
    for value, numel, dtype in entries:
        size = nbytes_of[value] = nbytes(numel, dtype)
        bucket = open_by_dtype.get(dtype)
        if bucket is None:
            bucket = Bucket(len(buckets), dtype)
            buckets.append(bucket)
            open_by_dtype[dtype] = bucket
        bucket.values.append(value)
        bucket.nbytes += size
        cap = config.bucket_bytes
        if bucket.index == 0 and config.first_bucket_bytes:
            cap = min(cap, config.first_bucket_bytes)
        if bucket.nbytes >= cap:  # full (with bucket_bytes=0, every parameter is its own)
            del open_by_dtype[dtype]
    cap = config.last_bucket_bytes
    if cap and buckets:
        last_value = entries[-1][0]
        last = next(b for b in buckets if b.values[-1] == last_value)
        split, tail_bytes = len(last.values), 0
        while split > 1 and tail_bytes < cap:
            split -= 1
            tail_bytes += nbytes_of[last.values[split]]
        if split < len(last.values) and last.nbytes - tail_bytes >= tail_bytes:
            tail = Bucket(len(buckets), last.dtype)
            tail.values, last.values = last.values[split:], last.values[:split]
            tail.nbytes, last.nbytes = tail_bytes, last.nbytes - tail_bytes
            buckets.append(tail)
    return buckets


def assign(
    buckets: Sequence[Bucket], index_of: dict[int, int]
) -> tuple[list[list[int]], list[int]]:
    """``(slot indices of each bucket, bucket of each slot)`` for a plan covering every slot;
    ``index_of`` maps a parameter's id value to its slot index (its place in one device's
    list of parameters).

    >>> config = DistributedConfig(bucket_bytes=8, first_bucket_bytes=0, last_bucket_bytes=0)
    >>> plan = plan_buckets([(7, 1, "float32"), (5, 1, "float32"), (9, 2, "float32")], config)
    >>> assign(plan, {5: 0, 7: 1, 9: 2})
    ([[1, 0], [2]], [0, 0, 1])
    """
    bucket_slots = [[index_of[value] for value in bucket.values] for bucket in buckets]
    bucket_of = [0] * len(index_of)
    for bucket, indices in enumerate(bucket_slots):
        for index in indices:
            bucket_of[index] = bucket
    return bucket_slots, bucket_of


_PLANS: dict[tuple, tuple[list[int], list[int]]] = {}


def bucket_plan(
    entries: tuple[Entry, ...], config: DistributedConfig
) -> tuple[list[int], list[int]]:
    """``(bucket of each entry, entries per bucket)`` of :func:`plan_buckets`, for a device
    whose parameters are ``entries`` (slot ``i`` is ``entries[i]``). Cached: the result is
    shared, not to be changed.

    >>> config = DistributedConfig(bucket_bytes=8, first_bucket_bytes=0, last_bucket_bytes=0)
    >>> bucket_plan(((7, 1, "float32"), (5, 1, "float32"), (9, 2, "float32")), config)
    ([0, 0, 1], [2, 1])
    """
    key = (config.bucket_bytes, config.first_bucket_bytes, config.last_bucket_bytes, entries)
    plan = _PLANS.get(key)
    if plan is None:
        buckets = plan_buckets(entries, config)
        index_of = {value: index for index, (value, _, _) in enumerate(entries)}
        bucket_slots, bucket_of = assign(buckets, index_of)
        plan = remember(_PLANS, key, (bucket_of, [len(b) for b in bucket_slots]))
    return plan
