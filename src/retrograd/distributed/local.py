"""The ``local`` engine: devices are threads of one process, reduced in shared memory.

A collective is a rendezvous keyed by what it is (``("grad", step, bucket)``,
``("op", group, n)``, ...): each member's contribution is recorded by reference, and the
member that completes it has the reduction computed at once, reading every contribution in
place and writing one result array per buffer, which all members then share (read-only): no
copy is made beyond the result. Keys, not call order, match contributions, so members may
launch collectives in any order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ..device import Device
from .config import ReduceOperation
from .engine import Collective, Pending

__all__ = ["LocalEngine"]


class _Rendezvous:
    __slots__ = ("contributions", "group", "kind", "op", "pendings")

    def __init__(self, kind: str, group: tuple[Device, ...], op: ReduceOperation | None):
        self.kind = kind
        self.group = group
        self.op = op
        self.contributions: dict[Device, object] = {}
        self.pendings: dict[Device, Pending] = {}


class LocalEngine(Collective):
    """Collectives between the devices of this process (one thread each)."""

    name = "local"
    ordered = False
    recoverable = True

    def __init__(self, devices: Sequence[Device]):
        super().__init__(devices, devices)
        self._open: dict[Hashable, _Rendezvous] = {}
        #: keys given up on, with why: a late contribution fails at once instead of waiting
        self._abandoned: dict[Hashable, str] = {}

    def all_reduce(
        self,
        device: Device,
        buffers: Sequence[np.ndarray],
        op: ReduceOperation,
        key: Hashable,
        group: tuple[Device, ...],
        donated: Sequence[bool] | None = None,  # never reduced in place (``donates``)
    ) -> Pending:
        return self._join("all_reduce", device, list(buffers), op, key, tuple(group))

    def all_gather(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        return self._join("all_gather", device, values, None, key, self.members)

    def _join(self, kind, device, contribution, op, key, group) -> Pending:
        pending = Pending(key)
        reason = self._abandoned.get(key)
        if reason is not None:
            pending.finish(error=reason)
            return pending
        rendezvous = self._open.get(key)
        if rendezvous is None:
            rendezvous = self._open[key] = _Rendezvous(kind, group, op)
        elif rendezvous.group != group or rendezvous.kind != kind or rendezvous.op != op:
            pending.finish(
                error=(
                    f"{kind} {key!r}: {device} joined with group {_names(group)} and op {op}, "
                    f"but the others with {rendezvous.kind} over {_names(rendezvous.group)} "
                    f"and op {rendezvous.op}"
                )
            )
            return pending
        if device in rendezvous.contributions:
            pending.finish(error=f"{kind} {key!r}: {device} joined twice")
            return pending
        rendezvous.contributions[device] = contribution
        rendezvous.pendings[device] = pending
        if len(rendezvous.contributions) == len(group):
            del self._open[key]
            self._complete(key, rendezvous)
        return pending

    def _complete(self, key: Hashable, rendezvous: _Rendezvous) -> None:
        group = rendezvous.group
        contributions = [rendezvous.contributions[device] for device in group]
        if rendezvous.kind == "all_gather":
            result, error = contributions, None
        else:
            result, error = _reduce(key, group, contributions, rendezvous.op)
        for device in group:
            rendezvous.pendings[device].finish(result, error)

    def missing(self, pending: Pending) -> list[int] | None:
        rendezvous = self._open.get(pending.key)
        if rendezvous is None:
            return []
        return [self.index[d] for d in rendezvous.group if d not in rendezvous.contributions]

    def abandon(self, pending: Pending, reason: str) -> None:
        """Fail every member's handle on this collective and forget its contributions."""
        self._abandoned[pending.key] = reason
        rendezvous = self._open.pop(pending.key, None)
        if rendezvous is not None:
            for member_pending in rendezvous.pendings.values():
                member_pending.finish(error=reason)
        pending.finish(error=reason)

    def close(self, timeout: float) -> None:
        for key, rendezvous in list(self._open.items()):
            for pending in rendezvous.pendings.values():
                pending.finish(error=f"collective {key!r}: the distributed context was closed")
        self._open.clear()


def _names(devices: Sequence[Device]) -> str:
    return "[" + ", ".join(str(d) for d in devices) + "]"


def _reduce(key, group, contributions, op):
    """One result per buffer index: the sum (or mean) over members, members in group order."""
    counts = {len(buffers) for buffers in contributions}
    if len(counts) != 1:
        return None, f"all_reduce {key!r}: members gave different numbers of buffers"
    results = []
    count = len(group)
    for index in range(counts.pop()):
        arrays = [buffers[index] for buffers in contributions]
        first = arrays[0]
        if any(a.shape != first.shape or a.dtype != first.dtype for a in arrays):
            described = ", ".join(f"{d}: {list(a.shape)} {a.dtype}" for d, a in zip(group, arrays))
            return None, (
                f"all_reduce {key!r}: the devices' tensors differ in shape or dtype ({described})"
            )
        if count == 1:
            results.append(first)
            continue
        # The result is the only new memory: the first add writes into it, the rest reduce
        # into it in place.
        out = np.add(first, arrays[1], out=np.empty(first.shape, first.dtype))
        for array in arrays[2:]:
            np.add(out, array, out=out)
        if op is ReduceOperation.MEAN:
            np.divide(out, count, out=out)
        out.flags.writeable = False  # shared by every member
        results.append(out)
    return results, None
