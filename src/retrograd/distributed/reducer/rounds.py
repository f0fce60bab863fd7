"""What one backward's gradient sync is made of: a device's distributed parameters
(:class:`ParamSlot`), its part of a round (:class:`DeviceStep`), and every member's parts of
one backward (:class:`Round`).

Ownership is split by object, so each field has one writer: the backward hook makes the
``DeviceStep`` and its slots (and marks ``slot.sent``); the sync server writes the outcome
(``error``, ``results``, ``intervals``, then ``done``) and keeps its bookkeeping in
``step.sync`` (a :class:`StepSync`) and in the :class:`Round`, which the hook never reads.
What the fast path of a step agreed once adds is its own (``fast_path.Attempt``).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from ...autodiff.params import ParamId
from ...device import Device
from ..pending import Pending
from .buckets import Bucket, nbytes
from .registration import payload

__all__ = ["DeviceStep", "ParamSlot", "Round", "StepSync"]


class ParamSlot:
    """One distributed parameter in one device's backward (``index``: its place in the
    device's list, in the order its gradient becomes final)."""

    __slots__ = ("dtype", "index", "label", "node", "numel", "pid", "sent", "shape")

    def __init__(self, index: int, pid: ParamId, node: Any, shape: tuple[int, ...], dtype: str):
        self.index = index
        self.pid = pid
        self.label = pid.label
        self.node = node
        self.shape = shape
        self.dtype = dtype
        self.numel = math.prod(shape)
        #: the hook has handed its gradient over (or holds it until its bucket is complete)
        self.sent = False

    @property
    def nbytes(self) -> int:
        return nbytes(self.numel, self.dtype)


class StepSync:
    """The server's bookkeeping of one :class:`DeviceStep`, from registration on."""

    __slots__ = (
        "agreement",
        "attempt",
        "bucket_of",
        "bucket_pendings",
        "bucket_slots",
        "buckets_left",
        "launching",
        "next_bucket",
        "round",
        "submitted",
        "unsubmitted",
    )

    def __init__(self) -> None:
        self.round: Round | None = None
        #: the all-gather of the members' registrations
        self.agreement: Pending | None = None
        #: gradients submitted, by slot index, until their bucket launches
        self.submitted: dict[int, np.ndarray] = {}
        #: the agreed plan: slot indices of each bucket, bucket of each slot
        self.bucket_slots: list[list[int]] = []
        self.bucket_of: list[int] = []
        #: per bucket, gradients not yet submitted
        self.unsubmitted: list[int] = []
        self.bucket_pendings: dict[int, Pending] = {}
        #: the next bucket to launch, on ordered transports (they launch in plan order)
        self.next_bucket = 0
        self.buckets_left = 0
        #: the buckets launch as their gradients come in (the plan in force maps this step's
        #: slots): after the members agreed, or on a fast attempt
        self.launching = False
        #: ``None`` where the members exchanged their registrations for this step, else
        #: the step's attempt at the plan agreed earlier (``fast_path.Attempt``)
        self.attempt: Any = None


class DeviceStep:
    """One device's part of a round: made by the backward hook when backward starts. See the
    module docstring for who writes what."""

    def __init__(self, device: Device, slots: list[ParamSlot]):
        self.device = device
        self.slots = slots
        self.index_of = {slot.pid.value: slot.index for slot in slots}
        self.by_node = {slot.node.id: slot for slot in slots}
        self.payload = payload(
            tuple((slot.pid.value, slot.label, slot.shape, slot.dtype) for slot in slots)
        )
        # The outcome, written by the server; the hook reads it once ``done`` is set.
        self.done = threading.Event()
        self.error: str | None = None
        self.results: dict[int, np.ndarray] = {}
        #: slot indices whose submitted gradient the hook proved nothing else holds (it may be
        #: donated to the transport: ``Capabilities.in_place``)
        self.owned: set[int] = set()
        #: (launched, finished) of each bucket's all-reduce, ``time.perf_counter`` seconds
        self.intervals: list[tuple[float, float]] = []
        self.sync = StepSync()

    def comm_seconds(self) -> float:
        """Wall time during which at least one of this step's all-reduces was in flight."""
        total, end = 0.0, float("-inf")
        for start, finish in sorted(self.intervals):
            if finish <= end:
                continue
            total += finish - max(start, end)
            end = finish
        return total


class Round:
    """Every member's part of one backward step (the members this process hosts)."""

    def __init__(self, number: int):
        self.number = number
        self.steps: dict[Device, DeviceStep] = {}
        self.plan: list[Bucket] | None = None
        self.labels: dict[int, str] = {}
        self.failed: str | None = None
        self.finished = False
