"""The fast path of a registration agreed once, on transports whose capabilities say
``agrees_once`` (``mpi``): a step that registers what was agreed before reduces at once,
without exchanging registrations, and checks afterwards that every member did the same.

- At a device's first step its members exchange their registrations and agree on a bucket
  plan, as on every transport; the plan is kept with the registration it was agreed for
  (:class:`Agreed`).
- At a later step, a member whose registration is the one it agreed then reduces by that plan
  at once (a *fast* :class:`Attempt`). The first bucket carries a :func:`header`: a flag (1 if
  this member's registration changed, else 0) and the low bits of its step number. Every
  member compares only with its own last agreement; since those agreed with each other, all
  registrations agree iff no flag is raised. A fast step keeps its gradients until the header
  says so (``Attempt.kept``): it may have to reduce them again.
- A member whose registration changed (a *decoy*) joins the old plan's collectives with zeros
  and its flag raised, right when backward starts, so that no peer waits on it.
- Once a step's buckets are reduced, a flag sum above zero voids the results on every member;
  each then exchanges registrations and either fails the step with the usual mismatch message
  (the transport stays usable) or reduces again by the newly agreed plan, from the kept
  gradients (:meth:`FastPath.voided`). A bit of the step number whose sum is neither 0 nor
  every member's share means the members are at different steps: the round fails and the
  transport breaks.
- Where the transport reduces gradients in place, the header travels in a collective of its
  own (:data:`HEADER`) ahead of the buckets, so a fast step knows it holds before it gives up
  its gradients.

A timeout on a fast step names the members whose heartbeats say they never began it
(``Transport.behind``), as an exchange would name those that never registered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...device import Device
from ..config import ReduceOperation
from .buckets import Bucket
from .rounds import DeviceStep

__all__ = ["DECOY", "FAST", "HEADER", "Agreed", "Attempt", "FastPath", "header"]

#: ``Attempt.kind``: the step reduces by the plan agreed at an earlier step (its own
#: registration is the one agreed then), or it only joins that plan's collectives with zeros
#: (its registration changed) so that the round can redo the step with a full exchange
FAST, DECOY = "fast", "decoy"
#: the bucket number of the header's own collective (where it travels apart)
HEADER = -1
#: bits of the step number the header carries
_STEP_BITS = 8


def header(number: int, dtype: str, changed: bool) -> np.ndarray:
    """The header from this member: its flag (its registration changed since the members
    last agreed) and the low bits of its step number, one element each. Summed over the
    members, the flag is above zero iff one was raised, and each bit is 0 or every member's
    share iff their step numbers agree in it (a rank that ran an extra backward).

    >>> header(5, "float32", False).tolist()
    [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    values = np.empty(1 + _STEP_BITS, dtype)
    values[0] = 1.0 if changed else 0.0
    values[1:] = [(number >> bit) & 1 for bit in range(_STEP_BITS)]
    return values


def steps_differ(reduced: np.ndarray, full: float, members: int) -> bool:
    """Whether a reduced header's step bits say the members were at different steps: a bit
    neither 0 nor ``full`` (every member's share: 1 for a mean, ``members`` for a sum).

    >>> steps_differ(header(5, "float64", False) * 2, 2.0, 2)
    False
    >>> steps_differ(header(5, "float64", False) + header(6, "float64", False), 2.0, 2)
    True
    """
    bits = reduced[1:]
    off = np.minimum(np.abs(bits), np.abs(bits - full))
    return bool((off > full / (4 * members)).any())


class Agreed:
    """What a device's members last agreed on: its registration (``payload``) then, the bucket
    plan and labels, and the plan mapped onto that registration's slots. While the device
    registers the same list again, every member does (each compares with its own), so the
    plan holds without exchanging registrations."""

    __slots__ = ("bucket_of", "bucket_slots", "labels", "numels", "payload", "plan")

    def __init__(
        self,
        payload: np.ndarray,
        plan: list[Bucket],
        labels: dict[int, str],
        bucket_slots: list[list[int]],
        bucket_of: list[int],
        numels: list[list[int]],
    ):
        self.payload = payload
        self.plan = plan
        self.labels = labels
        self.bucket_slots = bucket_slots
        self.bucket_of = bucket_of
        #: each bucket's gradients' element counts, for a decoy's zeros: the same buffers as
        #: its members' (a transport may reduce each large one apart)
        self.numels = numels

    def matches(self, payload: np.ndarray) -> bool:
        return payload is self.payload or np.array_equal(payload, self.payload)


class Attempt:
    """A step's attempt at the plan agreed earlier (``step.sync.attempt``)."""

    __slots__ = ("kept", "kind", "void")

    def __init__(self, kind: str):
        self.kind = kind
        #: a fast attempt's launched gradients, by slot index, until the header says every
        #: member was on the fast path (else the step is redone from them)
        self.kept: dict[int, Any] | None = {} if kind == FAST else None
        #: a member was not on the fast path: the attempt's results are void
        self.void = False


#: the sync server's ``start_bucket(step, bucket, buffers)``: launches one collective
Launch = Callable[[DeviceStep, int, list], None]


class FastPath:
    """The sync server's part for transports that agree once. See the module docstring."""

    def __init__(self, members: int, op: ReduceOperation, header_apart: bool, launch: Launch):
        self._members = members
        #: a raised flag or step bit, reduced: every member's share of it
        self._full = 1.0 if op is ReduceOperation.MEAN else float(members)
        #: the header travels in a collective of its own, else after the first bucket's
        #: gradients
        self.header_apart = header_apart
        #: collectives of a step beside its buckets (the header's own)
        self.beside = int(header_apart)
        self._launch = launch
        #: per device, what its members last agreed on
        self._agreed: dict[Device, Agreed] = {}

    def attempt(self, step: DeviceStep) -> bool:
        """Start ``step`` by the plan its device's members agreed before, if there is one
        (false: the members exchange their registrations)."""
        agreed = self._agreed.get(step.device)
        if agreed is None:
            return False
        sync = step.sync
        current = sync.round
        current.plan, current.labels = agreed.plan, agreed.labels
        sync.buckets_left = len(agreed.plan) + self.beside
        if agreed.matches(step.payload):
            sync.attempt = Attempt(FAST)
            sync.bucket_slots, sync.bucket_of = agreed.bucket_slots, agreed.bucket_of
            sync.unsubmitted = [len(slots) for slots in agreed.bucket_slots]
            sync.launching = True
            if self.header_apart:
                self._launch_header(step, changed=False)
            return True
        # This device's parameters changed: it joins the agreed plan's collectives with zeros
        # and a raised flag, then redoes the step with its peers.
        sync.attempt = Attempt(DECOY)
        if self.header_apart:
            self._launch_header(step, changed=True)
        for bucket, (planned, numels) in enumerate(zip(agreed.plan, agreed.numels)):
            zeros = [np.zeros(numel, planned.dtype) for numel in numels]
            if bucket == 0 and not self.header_apart:
                zeros.append(header(current.number, planned.dtype, changed=True))
            self._launch(step, bucket, zeros)
        return True

    def agreed(self, step: DeviceStep) -> None:
        """The members exchanged their registrations for ``step`` and agreed (its buckets are
        assigned): keep the plan for the steps to come, and send the header where it travels
        apart (every step carries one, so a bucket's size does not change with the path)."""
        sync = step.sync
        current = sync.round
        numels = [[step.slots[i].numel for i in slots] for slots in sync.bucket_slots]
        self._agreed[step.device] = Agreed(
            step.payload, current.plan, current.labels, sync.bucket_slots, sync.bucket_of, numels
        )
        if self.header_apart:
            self._launch_header(step, changed=False)

    def _launch_header(self, step: DeviceStep, changed: bool) -> None:
        """The header in a collective of its own, ahead of the buckets: once it says that
        every member is on the fast path, the buckets launched after it may give up this
        step's gradients."""
        current = step.sync.round
        self._launch(step, HEADER, [header(current.number, current.plan[0].dtype, changed)])

    def prepare(self, step: DeviceStep, bucket: int, indices: list[int], buffers: list) -> bool:
        """Before bucket ``bucket`` of ``step`` launches with ``buffers`` (the gradients of
        slots ``indices``): a fast attempt keeps them until the header says it holds; the
        first bucket gets the header where it travels inside. Whether the gradients may be
        given up (donated) now."""
        sync = step.sync
        attempt = sync.attempt
        keeping = attempt is not None and attempt.kept is not None
        if keeping:
            attempt.kept.update(zip(indices, buffers))
        if bucket == 0 and not self.header_apart:
            buffers.append(header(sync.round.number, sync.round.plan[0].dtype, changed=False))
        return not keeping

    def read(self, step: DeviceStep, bucket: int, results: list) -> tuple[list | None, str | None]:
        """A collective of ``step`` completed with ``results``: ``(what its gradients reduced
        to, why the round fails)``. The results lose the header (read here); they are
        ``None`` for a decoy's (zeros, not this step's gradients)."""
        if bucket == HEADER or (bucket == 0 and not self.header_apart):
            reduced, results = results[-1].reshape(-1), results[:-1]
            if steps_differ(reduced, self._full, self._members):
                return None, (
                    f"backward step {step.sync.round.number} on {step.device}: the ranks ran "
                    "different numbers of distributed backward steps (their step numbers "
                    "differ), so their gradients were not of one step"
                )
            # The flags, summed (MEAN divides them too: still above zero if any was raised).
            attempt = step.sync.attempt
            if attempt is None:
                pass  # the members exchanged their registrations: they agree
            elif reduced[0] > 0:
                attempt.void = True
            else:
                attempt.kept = None  # the attempt holds: its gradients are no longer needed
        attempt = step.sync.attempt
        return (None if attempt is not None and attempt.kind == DECOY else results), None

    def voided(self, step: DeviceStep) -> bool:
        """After ``step``'s last collective: whether a member was not on the fast path. If
        so, every member drops the attempt's results and ``step`` is reset to sync again
        after a full exchange of registrations (the server's next move): the agreed plan is
        replaced, or the members' differences fail the round, as at any exchange."""
        sync = step.sync
        attempt = sync.attempt
        if attempt is None or not attempt.void:
            return False
        step.results.clear()
        if attempt.kept:
            sync.submitted.update(attempt.kept)
        sync.attempt, sync.launching = None, False
        sync.bucket_pendings = {}
        sync.next_bucket = 0
        sync.round.plan = None
        self._agreed.pop(step.device, None)
        return True
