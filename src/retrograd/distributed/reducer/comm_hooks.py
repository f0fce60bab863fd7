"""Communication hooks: how a gradient bucket is reduced, as PyTorch's DDP comm hooks.

A hook is a function ``hook(state, bucket) -> Pending`` whose result is one array per buffer
of ``bucket``, reduced over the members. The sync server calls it for every bucket of every
step (and for the fast path's header, which rides in or beside the first bucket), so what
the hook does to the buffers is the whole of what reduces gradients: a compression hook
(cast to float16, reduce, cast back) or a hook that reduces through another collective plugs
in here without touching the server. A hook must reduce every buffer of a bucket as the
configured ``all_reduce_op`` (sum or mean of the members' elements): the fast path's header
is read that way. The defaults, :func:`sum_hook` and :func:`mean_hook`, hand the bucket to
the transport's ``all_reduce``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

from ...device import Device
from ..config import ReduceOperation
from ..pending import Pending

__all__ = ["CommHook", "CommState", "GradBucket", "default_hook", "mean_hook", "sum_hook"]


class CommState(NamedTuple):
    """What the default hooks need: the transport and the members to reduce over."""

    transport: Any
    group: tuple[Device, ...]


class GradBucket(NamedTuple):
    """One collective of a step's gradient sync, as a hook sees it."""

    #: the bucket's number in the plan (``fast_path.HEADER`` for the header's own collective)
    index: int
    #: the device whose gradients these are
    device: Device
    #: the collective's name, the same on every member: ``("grad", step, bucket)``
    key: Hashable
    #: the gradients (1-d or shaped arrays of one dtype), then the header on the first bucket
    buffers: Sequence[Any]
    #: by position, whether a buffer is the hook's to reduce in place (``None``: none is)
    donated: Sequence[bool] | None = None


#: a communication hook
CommHook = Callable[[Any, GradBucket], Pending]


def sum_hook(state: CommState, bucket: GradBucket) -> Pending:
    """Each member's buffers summed over the members."""
    return state.transport.all_reduce(
        bucket.device, bucket.buffers, ReduceOperation.SUM, bucket.key, state.group, bucket.donated
    )


def mean_hook(state: CommState, bucket: GradBucket) -> Pending:
    """Each member's buffers averaged over the members (the transport divides while it packs,
    before the sum, so every transport rounds alike)."""
    return state.transport.all_reduce(
        bucket.device, bucket.buffers, ReduceOperation.MEAN, bucket.key, state.group, bucket.donated
    )


def default_hook(op: ReduceOperation) -> CommHook:
    """The hook that reduces as ``op`` says.

    >>> default_hook(ReduceOperation.MEAN).__name__
    'mean_hook'
    """
    return {ReduceOperation.SUM: sum_hook, ReduceOperation.MEAN: mean_hook}[op]
