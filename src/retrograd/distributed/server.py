"""The sync server: the rounds of a context's gradient sync and the thread that watches them,
as Burn's ``DistributedSyncServer``.

What it decides with is elsewhere, as pure functions: the registration format and the
members' agreement in :mod:`.registration`, bucket plans in :mod:`.buckets`, what a timeout
says in :mod:`.diagnosis`; the state of a round in :mod:`.rounds`.

Its handlers run under one lock, on the device thread that calls them: a message handed to a
server thread would cost a wake-up and a switch of the interpreter lock on the step's
critical path. The device thread also drives the engine between its backward's steps
(``poll``) and while it waits for its results (``drive_until``); the server thread keeps the
engine moving (heartbeats, collectives in flight) while no device thread does, and gives the
timeouts their diagnosis. For each backward that involves distributed parameters, the server

1. *registers* the device's parameters (ids, sizes, dtypes, in the order their gradients are
   predicted to become final) and gathers every member's registration through the engine;
   once all members are registered it checks they agree (same parameters, same shapes) and
   plans the buckets, from member 0's order, so every member fuses identical buckets; on
   engines that ``agrees_once`` (``mpi``), later steps that register the same list reuse
   that plan without gathering, checked by a header in the first bucket (a step a member
   changed is redone after a full exchange: ``_on_register``, ``_on_reduced``, ``_redo``);
2. takes each gradient the moment the backward hook submits it (its last contribution has
   arrived) and launches a bucket's all-reduce as soon as the bucket is full; engines whose
   collectives must be issued in one order on every member get the buckets in plan order;
3. hands the reduced gradients back when the device's backward ends (``sync_collective``).

All members' parts of one backward form a *round*. A fault (a member that never registers,
stalls, or disagrees) fails the round on every device of this process with one message naming
who is missing and which parameters; the next backward starts a fresh round (on engines that
can recover, see ``Collective.recoverable``).
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Hashable

import numpy as np

from ..device import Device
from ..errors import DistributedError
from .buckets import assign
from .buckets import plan_buckets as plan_buckets  # importable from here, as tests expect
from .cache import remember
from .config import DistributedConfig, ReduceOperation
from .diagnosis import describe_op_stall, describe_stall
from .engine import IDLE, IN_BACKWARD, WAITING, Collective, Pending
from .registration import Verdict, agree
from .rounds import DECOY, FAST, HEADER, Agreed, DeviceStep, Round

__all__ = ["SyncServer"]

_SERVER_REPLY_SECONDS = 10.0
#: how often the server thread polls while a device thread drives the engine itself
_BACKSTOP_SECONDS = 0.05
#: a server thread told to sleep longer than this is woken when a device thread starts work
_DOZE_SECONDS = 0.005
#: an engine that asks to be polled again this soon is left to poll itself (``settle``), for
#: at most this long at a time (the server thread waits for the lock meanwhile)
_SETTLE_BELOW_SECONDS, _SETTLE_SECONDS = 0.0005, 0.005


#: bits of the step number the first bucket carries (a header after its gradients)
_STEP_BITS = 8


def _header(number: int, dtype: str, changed: bool) -> np.ndarray:
    """The first bucket's header from this member: its flag (its registration changed since
    the members last agreed) and the low bits of its step number, one element each. Summed
    over the members, the flag is above zero iff one was raised, and each bit is 0 or every
    member's share iff their step numbers agree in it (a rank that ran an extra backward).

    >>> _header(5, "float32", False).tolist()
    [0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    """
    header = np.empty(1 + _STEP_BITS, dtype)
    header[0] = 1.0 if changed else 0.0
    header[1:] = [(number >> bit) & 1 for bit in range(_STEP_BITS)]
    return header


class SyncServer:
    """The context's server thread. See the module docstring."""

    def __init__(self, engine: Collective, config: DistributedConfig, name: str):
        self.engine = engine
        if config.overlap is False or (config.overlap is None and not engine.overlap_pays):
            config = config.without_overlap()
        #: the settings in force: with the overlap off, every gradient in one bucket
        self.config = config
        engine.overlapping = config.overlap is not False
        #: the header travels in a collective of its own (``Collective.donates``), else
        #: after the first bucket's gradients (engines that ``agrees_once``)
        self._header_apart = int(engine.donates and engine.agrees_once)
        self._header_in_first = engine.agrees_once and not self._header_apart
        #: the engine and every round's state, held by whichever thread drives them
        self._lock = threading.RLock()
        #: wakes the server thread (its poll interval may have changed)
        self._wake: queue.SimpleQueue = queue.SimpleQueue()
        #: device threads blocked in ``drive_until``
        self._drivers = 0
        #: the server thread sleeps past the engine's poll interval (nothing was in flight)
        self._dozing = False
        self._round: Round | None = None
        self._round_number = 0
        self._op_links: dict[Pending, Pending] = {}
        self._waiting: set[DeviceStep] = set()
        self._verdicts: dict[tuple[bytes, ...], Verdict] = {}
        #: per device, what its members last agreed on (engines that ``agrees_once``)
        self._agreed: dict[Device, Agreed] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- called from device threads -------------------------------------------------------
    # Device threads run the handlers themselves, under the lock: handing each message to the
    # server thread cost a wake-up and a switch of the interpreter lock on the step's critical
    # path (docs/benchmarks.md: a 1-rank context cost the deep MLP 2.8 ms per step so, 0.9 ms
    # now). The server thread keeps the engine moving while no device thread waits on it.
    def start(self) -> None:
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def native_id(self) -> int | None:
        """The server thread's id in the operating system (benchmarks read its CPU time)."""
        return self._thread.native_id

    def register(self, step: DeviceStep) -> None:
        self._run_handler(self._on_register, step)

    def submit_many(self, step: DeviceStep, items: list[tuple[int, np.ndarray]]) -> None:
        """Several final gradients (a bucket's) at once; launches what is complete."""
        self._run_handler(self._on_submit_many, step, items)

    def poll(self) -> None:
        """Advance collectives in flight, unless another thread is at it (backward calls
        this between its steps: MPI progresses only inside MPI calls)."""
        if self.engine.needs_progress() and self._lock.acquire(blocking=False):
            try:
                self._progress()
            finally:
                self._lock.release()

    def waiting(self, step: DeviceStep) -> None:
        self._run_handler(self._on_waiting, step)

    def drive_until(self, done: threading.Event | Pending, timeout: float) -> bool:
        """Block the calling device thread until ``done`` is set (or complete), driving the
        engine meanwhile; false after ``timeout`` seconds."""
        is_done = done.is_set if isinstance(done, threading.Event) else done.done
        deadline = time.monotonic() + timeout
        with self._lock:
            self._drivers += 1
        try:
            while not is_done():
                with self._lock:
                    delay = self._progress()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return is_done()
                if delay is not None and 0.0 < delay <= _SETTLE_BELOW_SECONDS:
                    # polled every so often with sleeps: the engine's own loop does it cheaply
                    with self._lock:
                        if self.engine.settle(min(_SETTLE_SECONDS, remaining)):
                            continue
                if delay is None or delay > 0.0:
                    done.wait(remaining if delay is None else min(delay, remaining))
            return True
        finally:
            with self._lock:
                self._drivers -= 1

    def header(self, step: DeviceStep) -> Pending | threading.Event:
        """What the device waits on to know its step's header arrived (``Collective.donates``):
        the header's collective, or an event already set where there is none."""
        pending = step.sync.bucket_pendings.get(HEADER)
        if pending is None:
            pending = threading.Event()
            pending.set()
        return pending

    def stalled(self, step: DeviceStep) -> None:
        """The device gave up waiting for ``step``: fail its round with a diagnosis."""
        self._run_handler(self._on_stalled, step, patience=_SERVER_REPLY_SECONDS)

    def all_reduce(
        self,
        outer: Pending,
        device: Device,
        buffers: list[np.ndarray],
        op: ReduceOperation,
        key: Hashable,
        group: tuple[Device, ...],
    ) -> None:
        """Start a user ``all_reduce`` (``context.start_all_reduce``); ``outer`` completes
        with it."""
        self._run_handler(self._on_op, outer, device, buffers, op, key, group)

    def op_stalled(self, outer: Pending, what: str) -> None:
        self._run_handler(self._on_op_stalled, outer, what, patience=_SERVER_REPLY_SECONDS)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        # Closing an engine across processes waits up to ``timeout`` for its peers.
        self._run_handler(self._on_close, patience=self.config.timeout + _SERVER_REPLY_SECONDS)
        self._wake.put(None)
        self._thread.join(_SERVER_REPLY_SECONDS)

    def _run_handler(self, handler, *args, patience: float | None = None) -> None:
        """Run ``handler`` under the lock, on the calling thread; an exception in it fails
        the round."""
        if not self._lock.acquire(timeout=-1 if patience is None else patience):
            raise DistributedError("the distributed sync server did not answer")
        try:
            handler(*args)
        except Exception:
            self._internal_error()
        finally:
            # If the handler started a collective: backward polls it only between its steps,
            # which can be far apart, so the server thread polls from now on too (a wake-up
            # per step, not per bucket: it dozes off again only once all is done).
            # Without the overlap nothing is in flight during backward that a poll would help
            # (the device thread drives the one collective itself): no wake-up, whose handoff
            # of the interpreter lock costs a rank of 8 on 2 cores milliseconds.
            wake = self._dozing and self.engine.overlapping and self.engine.needs_progress()
            if wake:
                self._dozing = False
            self._lock.release()
        if wake:
            self._wake.put(None)

    def _progress(self) -> float | None:
        try:
            return self.engine.progress()
        except Exception:  # an engine bug must not leave devices waiting forever
            self._internal_error()
            return None

    # -- the server thread ------------------------------------------------------------------
    def _run(self) -> None:
        wake = self._wake
        while not self._closed:
            with self._lock:
                if self._closed:
                    return
                delay = self._progress()
                if self._drivers:  # a device thread polls back to back: do not compete
                    delay = _BACKSTOP_SECONDS if delay is None else max(delay, _BACKSTOP_SECONDS)
                # Under the lock, so a handler that starts work after this sees it.
                self._dozing = delay is None or delay > _DOZE_SECONDS
            try:
                wake.get(timeout=0.5 if delay is None else delay)
                while True:  # one pass of progress answers every wake-up so far
                    wake.get_nowait()
            except queue.Empty:
                pass

    def _internal_error(self) -> None:
        text = traceback.format_exc(limit=6)
        if self._round is not None:
            self._fail_round(self._round, f"internal error in the distributed sync server:\n{text}")

    # -- rounds ---------------------------------------------------------------------------
    def _on_register(self, step: DeviceStep) -> None:
        if self._closed:
            step.error = "the distributed context was closed"
            step.done.set()
            return
        device = step.device
        current = self._round
        if current is not None and device in current.steps:
            self._fail_round(
                current,
                (
                    f"{device} started a new backward before its backward step {current.number} "
                    "finished syncing (did that backward raise?)"
                ),
            )
            current = None
        if current is None or current.failed or current.finished:
            self._round_number += 1
            current = self._round = Round(self._round_number)
        current.steps[device] = step
        sync = step.sync
        sync.round = current
        self.engine.set_state(current.number, IN_BACKWARD)
        agreed = self._agreed.get(device)
        if agreed is None:
            self._exchange(step)
            return
        # Agreed at an earlier step: no exchange. Every member compares its registration with
        # the one it agreed then, and the first bucket carries, summed, the members that
        # differ (a flag each): zero means the plan holds everywhere, else the step is redone
        # with a full exchange (docs/distributed.md, "Registration agreed once").
        current.plan, current.labels = agreed.plan, agreed.labels
        sync.buckets_left = len(agreed.plan) + self._header_apart
        if agreed.matches(step.payload):
            sync.attempt = FAST
            sync.kept = {}
            sync.bucket_slots, sync.bucket_of = agreed.bucket_slots, agreed.bucket_of
            sync.unsubmitted = [len(slots) for slots in agreed.bucket_slots]
            sync.launching = True
            if self._header_apart:
                self._launch_header(step, changed=False)
            return
        # This device's parameters changed: it joins the agreed plan's collectives with zeros
        # and a raised flag, then redoes the step with its peers.
        sync.attempt = DECOY
        if self._header_apart:
            self._launch_header(step, changed=True)
        for bucket, (planned, numels) in enumerate(zip(agreed.plan, agreed.numels)):
            zeros = [np.zeros(numel, planned.dtype) for numel in numels]
            if bucket == 0 and self._header_in_first:
                zeros.append(_header(current.number, planned.dtype, changed=True))
            self._start_bucket(step, bucket, zeros)

    def _exchange(self, step: DeviceStep) -> None:
        """Gather every member's registration for ``step``'s round (``_on_agreed`` next)."""
        sync = step.sync
        sync.agreement = self.engine.all_gather(
            step.device, step.payload, ("reg", sync.round.number)
        )
        sync.agreement.then(lambda pending: self._on_agreed(step, pending))

    def _settled(self, step: DeviceStep, pending: Pending) -> bool:
        """Whether ``pending`` (an operation of ``step``'s round) completed and its round goes
        on; an error fails the round."""
        current = step.sync.round
        if current.failed:
            return False
        if pending.error is not None:
            self._fail_round(current, pending.error)
            return False
        return True

    def _on_agreed(self, step: DeviceStep, pending: Pending) -> None:
        if not self._settled(step, pending):
            return
        sync = step.sync
        current = sync.round
        if current.plan is None:
            problem, labels, plan = self._verdict(pending.result)
            if problem is not None:
                self._fail_round(current, f"backward step {current.number}: {problem}")
                return
            current.labels, current.plan = labels, plan
        sync.bucket_slots, sync.bucket_of = assign(current.plan, step.index_of)
        if self.engine.agrees_once:
            numels = [[step.slots[i].numel for i in slots] for slots in sync.bucket_slots]
            self._agreed[step.device] = Agreed(
                step.payload,
                current.plan,
                current.labels,
                sync.bucket_slots,
                sync.bucket_of,
                numels,
            )
        # Gradients submitted while the members were still agreeing count now.
        sync.unsubmitted = [len(slots) for slots in sync.bucket_slots]
        for index in sync.submitted:
            sync.unsubmitted[sync.bucket_of[index]] -= 1
        sync.buckets_left = len(current.plan) + self._header_apart
        sync.launching = True
        if self._header_apart:
            self._launch_header(step, changed=False)
        self._launch_ready(step)

    def _verdict(self, gathered: list[np.ndarray]) -> Verdict:
        """The members' agreement on their registrations ``gathered``: worked out once per
        distinct set, which is normally the same at every step."""
        key = tuple(registration.tobytes() for registration in gathered)
        verdict = self._verdicts.get(key)
        if verdict is None:
            names = [self.engine.member_name(i) for i in range(len(gathered))]
            verdict = remember(self._verdicts, key, agree(gathered, names, self.config))
        return verdict

    def _on_submit_many(self, step: DeviceStep, items: list[tuple[int, np.ndarray]]) -> None:
        sync = step.sync
        current = sync.round
        if current is None or current.failed or step.error is not None:
            return
        sync.submitted.update(items)
        if sync.launching:
            unsubmitted, bucket_of = sync.unsubmitted, sync.bucket_of
            for slot_index, _ in items:
                unsubmitted[bucket_of[slot_index]] -= 1
            self._launch_ready(step)

    def _launch_ready(self, step: DeviceStep) -> None:
        """Launch the buckets whose gradients are all in (in plan order on ordered engines)."""
        sync = step.sync
        if self.engine.ordered:
            plan_size = len(sync.bucket_slots)
            while sync.next_bucket < plan_size and sync.unsubmitted[sync.next_bucket] == 0:
                self._launch(step, sync.next_bucket)
                sync.next_bucket += 1
        else:
            for bucket, left in enumerate(sync.unsubmitted):
                if left == 0 and bucket not in sync.bucket_pendings:
                    self._launch(step, bucket)

    def _launch(self, step: DeviceStep, bucket: int) -> None:
        sync = step.sync
        submitted = sync.submitted
        indices = sync.bucket_slots[bucket]
        buffers = [submitted.pop(index) for index in indices]
        donated = None
        if sync.kept is not None:  # a fast attempt, until the flags say it holds
            sync.kept.update(zip(indices, buffers))
        elif self.engine.donates:  # nothing will need this step's own gradients again
            donated = [index in step.owned for index in indices]
        if bucket == 0 and self._header_in_first:
            # Every step carries the header (its flag ignored after an exchange), so a
            # bucket's size does not change with the path.
            buffers.append(_header(sync.round.number, sync.round.plan[0].dtype, changed=False))
        self._start_bucket(step, bucket, buffers, donated)

    def _launch_header(self, step: DeviceStep, changed: bool) -> None:
        """The header in a collective of its own, ahead of the buckets (engines that
        ``donates``): once it says that every member is on the fast path, the buckets
        launched after it may give up this step's gradients."""
        sync = step.sync
        header = _header(sync.round.number, sync.round.plan[0].dtype, changed)
        self._start_bucket(step, HEADER, [header])

    def _start_bucket(
        self, step: DeviceStep, bucket: int, buffers: list, donated: list[bool] | None = None
    ) -> None:
        sync = step.sync
        pending = self.engine.all_reduce(
            step.device,
            buffers,
            self.config.all_reduce_op,
            ("grad", sync.round.number, bucket),
            self.engine.members,
            donated=donated,
        )
        sync.bucket_pendings[bucket] = pending
        pending.then(lambda done: self._on_reduced(step, bucket, done))

    def _on_reduced(self, step: DeviceStep, bucket: int, pending: Pending) -> None:
        if not self._settled(step, pending):
            return
        sync = step.sync
        current = sync.round
        results = pending.result
        if bucket == HEADER or (bucket == 0 and self._header_in_first):
            header, results = results[-1].reshape(-1), results[:-1]
            full = (
                1.0
                if self.config.all_reduce_op is ReduceOperation.MEAN
                else len(self.engine.members)
            )
            # Each bit of the step number, summed: 0 or every member's share iff all agree.
            off = np.minimum(np.abs(header[1:]), np.abs(header[1:] - full))
            if (off > full / (4 * len(self.engine.members))).any():
                message = (
                    f"backward step {current.number} on {step.device}: the ranks ran "
                    "different numbers of distributed backward steps (their step numbers "
                    "differ), so their gradients were not of one step"
                )
                self.engine.abandon(pending, message)
                self._fail_round(current, message)
                return
            # The flags, summed (MEAN divides them too: still above zero if any was raised).
            if sync.attempt is None:
                pass  # the members exchanged their registrations: they agree
            elif header[0] > 0:
                sync.void = True
            else:
                sync.kept = None  # the attempt holds: its gradients are no longer needed
        if bucket != HEADER:
            if sync.attempt is not DECOY:
                for index, result in zip(sync.bucket_slots[bucket], results):
                    step.results[index] = result
            step.intervals.append((pending.launched_at, pending.finished_at))
        sync.buckets_left -= 1
        if sync.buckets_left == 0:
            if sync.void:
                self._redo(step)
                return
            step.done.set()
            self._waiting.discard(step)
            self._update_urgency()
            if all(s.done.is_set() for s in current.steps.values()) and len(current.steps) == len(
                self.engine.local
            ):
                current.finished = True
                self._end_round(current)

    def _redo(self, step: DeviceStep) -> None:
        """A member was not on the fast path: every member drops the attempt's results and
        syncs the step again after a full exchange of registrations (the agreed plan is
        replaced, or the members' differences fail the round, as at any exchange)."""
        sync = step.sync
        step.results.clear()
        if sync.kept:
            sync.submitted.update(sync.kept)
        sync.kept, sync.attempt, sync.void, sync.launching = None, None, False, False
        sync.bucket_pendings = {}
        sync.next_bucket = 0
        sync.round.plan = None
        self._agreed.pop(step.device, None)
        self._exchange(step)

    def _on_waiting(self, step: DeviceStep) -> None:
        current = step.sync.round
        if current is not None and not current.failed and not step.done.is_set():
            self.engine.set_state(current.number, WAITING)
            self._waiting.add(step)
            self._update_urgency()

    def _update_urgency(self) -> None:
        # A device blocked in backward's end, or on a user all_reduce (those are waited on
        # right away), has nothing else to do: results are wanted as soon as possible.
        self.engine.urgent = bool(self._waiting or self._op_links)

    def _fail_round(self, current: Round, message: str) -> None:
        if current.failed:
            return
        current.failed = message
        for step in current.steps.values():
            step.error = message
            pendings = [step.sync.agreement, *step.sync.bucket_pendings.values()]
            for pending in pendings:
                if pending is not None and not pending.done():
                    self.engine.abandon(pending, message)
            step.done.set()
            self._waiting.discard(step)
        self._update_urgency()
        self._end_round(current)

    def _end_round(self, current: Round) -> None:
        """A round is over (finished or failed): the next backward starts a fresh one."""
        if self._round is current:
            self._round = None
        # Each step keeps its round (``step.sync.round``), so the round lets go of the steps:
        # without that cycle, a step (and the gradients it holds) is freed once its backward
        # returns, not steps later by the garbage collector.
        current.steps.clear()
        self.engine.set_state(current.number, IDLE)

    # -- diagnosis --------------------------------------------------------------------------
    def _on_stalled(self, step: DeviceStep) -> None:
        if step.done.is_set():
            return
        self._fail_round(step.sync.round, describe_stall(step, self.engine, self.config.timeout))

    # -- user collectives ---------------------------------------------------------------------
    def _on_op(self, outer: Pending, device, buffers, op, key, group) -> None:
        if self._closed:
            outer.finish(error="the distributed context was closed")
            return
        inner = self.engine.all_reduce(device, buffers, op, key, group)
        self._op_links[outer] = inner
        self._update_urgency()

        def forward(done: Pending) -> None:
            self._op_links.pop(outer, None)
            self._update_urgency()
            outer.finish(done.result, done.error)

        inner.then(forward)

    def _on_op_stalled(self, outer: Pending, what: str) -> None:
        inner = self._op_links.pop(outer, None)
        if inner is None or inner.done():
            return
        reason = describe_op_stall(inner, self.engine, what, self.config.timeout)
        self.engine.abandon(inner, reason)

    # -- closing ------------------------------------------------------------------------------
    def _on_close(self) -> None:
        if self._round is not None:
            self._fail_round(self._round, "the distributed context was closed")
        for outer in list(self._op_links):
            outer.finish(error="the distributed context was closed")
        self._op_links.clear()
        try:
            self.engine.close(self.config.timeout)
        finally:
            self._closed = True
