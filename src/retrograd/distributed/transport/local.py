"""The ``local`` transport: members are threads of one process, sharing its memory.

A collective is a rendezvous keyed by what it is (``("grad", step, bucket)``,
``("op", group, n)``, ...): each member's contribution is recorded by reference, and the
member that completes it has the result computed at once, reading every contribution in
place and writing one result array per buffer, which all members then share (read-only): no
copy is made beyond the result. Keys, not call order, match contributions, so members may
launch collectives in any order. What a buffer collective computes from the members' arrays
is one function of :data:`COMBINE`, by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from ...device import Device
from ..config import ReduceOperation
from ..pending import Pending
from .base import Capabilities, Transport

__all__ = ["COMBINE", "LocalTransport"]


class _Rendezvous:
    __slots__ = ("contributions", "group", "kind", "op", "pendings")

    def __init__(self, kind: str, group: tuple[Device, ...], op: ReduceOperation | None):
        self.kind = kind
        self.group = group
        self.op = op
        self.contributions: dict[Device, object] = {}
        self.pendings: dict[Device, Pending] = {}


class LocalTransport(Transport):
    """Collectives between the devices of this process (one thread each)."""

    name = "local"
    capabilities = Capabilities(ordered=False, recoverable=True)

    def __init__(self, devices: Sequence[Device]):
        super().__init__(devices, devices)
        self._open: dict[Hashable, _Rendezvous] = {}
        #: keys given up on, with why: a late contribution fails at once instead of waiting
        self._abandoned: dict[Hashable, str] = {}

    def all_reduce(self, device, buffers, op, key, group, donated=None) -> Pending:
        # never reduced in place (no ``in_place`` capability): ``donated`` is not read
        return self._join("all_reduce", device, list(buffers), op, key, tuple(group))

    def all_gather(self, device, buffers, key, group) -> Pending:
        return self._join("all_gather", device, list(buffers), None, key, tuple(group))

    def exchange(self, device: Device, values: np.ndarray, key: Hashable) -> Pending:
        return self._join("exchange", device, values, None, key, self.members)

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
            group = rendezvous.group
            contributions = [rendezvous.contributions[member] for member in group]
            result, error = _combine(kind, key, group, contributions, rendezvous.op)
            for member in group:
                rendezvous.pendings[member].finish(result, error)
        return pending

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


def _combine(kind: str, key, group, contributions, op) -> tuple[Any, str | None]:
    """A completed rendezvous' result (the same for every member), or why there is none."""
    if kind == "exchange":  # every member's array, in member order (lengths may differ)
        return contributions, None
    counts = {len(buffers) for buffers in contributions}
    if len(counts) != 1:
        return None, f"{kind} {key!r}: members gave different numbers of buffers"
    results = []
    for index in range(counts.pop()):
        arrays = [buffers[index] for buffers in contributions]
        first = arrays[0]
        if any(a.shape != first.shape or a.dtype != first.dtype for a in arrays):
            described = ", ".join(f"{d}: {list(a.shape)} {a.dtype}" for d, a in zip(group, arrays))
            return None, (
                f"{kind} {key!r}: the devices' tensors differ in shape or dtype ({described})"
            )
        results.append(COMBINE[kind](arrays, op))
    return results, None


def _reduce(arrays: list[np.ndarray], op: ReduceOperation) -> np.ndarray:
    """The sum (or mean) of the members' arrays, in member order."""
    first = arrays[0]
    if len(arrays) == 1:
        return first
    # The result is the only new memory: the first add writes into it, the rest reduce into
    # it in place.
    out = np.add(first, arrays[1], out=np.empty(first.shape, first.dtype))
    for array in arrays[2:]:
        np.add(out, array, out=out)
    if op is ReduceOperation.MEAN:
        np.divide(out, len(arrays), out=out)
    out.flags.writeable = False  # shared by every member
    return out


def _gather(arrays: list[np.ndarray], op: None) -> np.ndarray:
    """The members' arrays stacked, in member order."""
    out = np.stack(arrays)
    out.flags.writeable = False  # shared by every member
    return out


#: what each kind of buffer collective computes from the members' arrays of one buffer
COMBINE: dict[str, Callable[[list[np.ndarray], Any], np.ndarray]] = {
    "all_reduce": _reduce,
    "all_gather": _gather,
}
