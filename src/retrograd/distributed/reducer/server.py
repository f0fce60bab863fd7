"""The sync server: the rounds of a context's gradient sync and the thread that watches them,
as Burn's ``DistributedSyncServer`` (PyTorch's ``Reducer``).

What it decides with is elsewhere: the registration format and the members' agreement in
:mod:`.registration`, bucket plans in :mod:`.buckets` (pure functions), the state of a round
in :mod:`.rounds`, how a bucket is reduced in :mod:`.comm_hooks`, the fast path of a
registration agreed once in :mod:`.fast_path`, what a timeout says in :mod:`.diagnosis`, how
often to poll the transport in :mod:`..transport.pacing`.

Its handlers run under one lock, on the device thread that calls them: a message handed to a
server thread would cost a wake-up and a switch of the interpreter lock on the step's
critical path. The device thread also drives the transport between its backward's steps
(``poll``) and while it waits for its results (``drive_until``); the server thread keeps the
transport moving (heartbeats, collectives in flight) while no device thread does. For each
backward that involves distributed parameters, the server

1. *registers* the device's parameters (ids, sizes, dtypes, in the order their gradients are
   predicted to become final) and gathers every member's registration through the
   transport's ``exchange``; once all members are registered it checks they agree (same
   parameters, same shapes) and plans the buckets, from member 0's order, so every member
   fuses identical buckets (on transports that agree once, a later step that registers the
   same list reuses that plan without an exchange: :mod:`.fast_path`);
2. takes each gradient the moment the backward hook submits it (its last contribution has
   arrived) and launches a bucket's collective through the comm hook as soon as the bucket
   is full; on ``ordered`` transports the buckets launch in plan order;
3. hands the reduced gradients back when the device's backward ends.

All members' parts of one backward form a *round*: each device's n-th synced backward (its
own count), so that a device whose backward of a round raised and that began the next one is
never paired with another device's backward of an earlier step. A fault (a member that never
registers, stalls, or disagrees) fails the round on every device of this process with one
message naming who is missing and which parameters; the next backward starts a fresh round
(on transports that can recover, see ``Capabilities.recoverable``). A backward that raises (a
user's hook or Function) fails its round at once (``withdraw``), naming itself.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ...device import Device
from ...errors import DistributedError
from ..cache import remember
from ..config import DistributedConfig, ReduceOperation
from ..membership import IDLE, IN_BACKWARD, WAITING
from ..pending import Pending
from ..transport.base import Transport
from ..transport.pacing import Pacer
from .buckets import assign
from .comm_hooks import CommHook, CommState, GradBucket, default_hook
from .diagnosis import describe_op_stall, describe_raised, describe_stall
from .fast_path import HEADER, FastPath
from .registration import Verdict, agree
from .rounds import DeviceStep, Round

__all__ = ["SyncServer"]

_SERVER_REPLY_SECONDS = 10.0
#: how often the server thread polls while a device thread drives the transport itself
_BACKSTOP_SECONDS = 0.05
#: a server thread told to sleep longer than this is woken when a device thread starts work
_DOZE_SECONDS = 0.005
#: a transport asked to be polled again this soon is left to poll itself (``settle``), for
#: at most this long at a time (the server thread waits for the lock meanwhile)
_SETTLE_BELOW_SECONDS, _SETTLE_SECONDS = 0.0005, 0.005


class SyncServer:
    """The context's server thread. See the module docstring.

    ``comm_hook`` reduces each bucket (by default the transport's all-reduce with
    ``config.all_reduce_op``: :mod:`.comm_hooks`).
    """

    def __init__(
        self,
        transport: Transport,
        config: DistributedConfig,
        name: str,
        comm_hook: CommHook | None = None,
    ):
        self.transport = transport
        capabilities = transport.capabilities
        if config.overlap is False or (config.overlap is None and not capabilities.overlap_pays):
            config = config.without_overlap()
        #: the settings in force: with the overlap off, every gradient in one bucket
        self.config = config
        #: gradients are reduced during backward (else in one collective after it, which the
        #: waiting device thread drives itself)
        self.overlapping = config.overlap is not False
        self._comm_hook = comm_hook or default_hook(config.all_reduce_op)
        self._comm_state = CommState(transport, transport.members)
        #: the fast path of a registration agreed once, where the transport agrees once
        self._fast = (
            FastPath(
                len(transport.members),
                config.all_reduce_op,
                capabilities.in_place,
                self._start_bucket,
            )
            if capabilities.agrees_once
            else None
        )
        #: collectives of a step beside its buckets
        self._beside = self._fast.beside if self._fast is not None else 0
        #: the transport and every round's state, held by whichever thread drives them
        self._lock = threading.RLock()
        #: wakes the server thread (its poll interval may have changed)
        self._wake: queue.SimpleQueue = queue.SimpleQueue()
        #: device threads blocked in ``drive_until``
        self._drivers = 0
        #: the server thread sleeps past the transport's poll interval (nothing was in flight)
        self._dozing = False
        #: a device thread waits for results (at a backward's end, or on a user all_reduce,
        #: which is waited on right away): the transport is polled as fast as it allows
        self._urgent = False
        self._pacer = Pacer(capabilities.spins)
        self._round: Round | None = None
        self._round_number = 0
        #: synced backwards each device has begun: a round gathers each device's backward of
        #: one number (see ``_on_register``)
        self._begun: dict[Any, int] = {}
        #: the last round a fault failed (a member that never registered, a mismatch...): a
        #: device that never registered for it, or for one before it, skips to the next, so
        #: that after the fault every member's next backward syncs together
        self._resync_upto = 0
        #: why each of the last rounds that failed did, by number: a device that registers
        #: for one of them after it failed is told
        self._failures: dict[int, str] = {}
        self._op_links: dict[Pending, Pending] = {}
        self._waiting: set[DeviceStep] = set()
        self._verdicts: dict[tuple[bytes, ...], Verdict] = {}
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    # -- called from device threads -------------------------------------------------------
    # Device threads run the handlers themselves, under the lock (module docstring); the
    # server thread keeps the transport moving while no device thread waits on it.
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

    def withdraw(self, step: DeviceStep) -> None:
        """``step``'s backward raised (a hook or Function of the user's) before it ended: its
        round cannot finish, and fails now."""
        self._run_handler(self._on_withdraw, step)

    def submit_many(self, step: DeviceStep, items: list[tuple[int, np.ndarray]]) -> None:
        """Several final gradients (a bucket's) at once; launches what is complete."""
        self._run_handler(self._on_submit_many, step, items)

    def poll(self) -> None:
        """Advance collectives in flight, unless another thread is at it (backward calls
        this between its steps: MPI progresses only inside MPI calls)."""
        if self.transport.needs_progress() and self._lock.acquire(blocking=False):
            try:
                self._progress()
            finally:
                self._lock.release()

    def waiting(self, step: DeviceStep) -> None:
        self._run_handler(self._on_waiting, step)

    def drive_until(self, done: threading.Event | Pending, timeout: float) -> bool:
        """Block the calling device thread until ``done`` is set (or complete), driving the
        transport meanwhile; false after ``timeout`` seconds."""
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
                    # polled every so often with sleeps: the transport's own loop does it
                    # cheaply
                    with self._lock:
                        if self.transport.settle(min(_SETTLE_SECONDS, remaining)):
                            continue
                if delay is None or delay > 0.0:
                    done.wait(remaining if delay is None else min(delay, remaining))
            return True
        finally:
            with self._lock:
                self._drivers -= 1

    def header(self, step: DeviceStep) -> Pending | threading.Event:
        """What the device waits on to know its step's header arrived (where it travels
        apart): the header's collective, or an event already set where there is none."""
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
        self.collective(
            outer, lambda transport: transport.all_reduce(device, buffers, op, key, group)
        )

    def collective(self, outer: Pending, launch: Callable[[Transport], Pending]) -> None:
        """Start a user collective, ``launch(transport)`` (under the lock); ``outer``
        completes with it, and a timeout is diagnosed as for ``all_reduce``."""
        self._run_handler(self._on_op, outer, launch)

    def op_stalled(self, outer: Pending, what: str) -> None:
        self._run_handler(self._on_op_stalled, outer, what, patience=_SERVER_REPLY_SECONDS)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        # Closing a transport across processes waits up to ``timeout`` for its peers.
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
            # per step, not per bucket: it dozes off again only once all is done). Without
            # the overlap nothing is in flight during backward that a poll would help (the
            # device thread drives the one collective itself): no wake-up, whose handoff of
            # the interpreter lock would take a core from a busy machine's backward.
            wake = self._dozing and self.overlapping and self.transport.needs_progress()
            if wake:
                self._dozing = False
            self._lock.release()
        if wake:
            self._wake.put(None)

    def _progress(self) -> float | None:
        """Drive the transport once; how soon to drive it again (``None``: once woken)."""
        try:
            polled = self.transport.progress()
        except Exception:  # a transport bug must not leave devices waiting forever
            self._internal_error()
            return None
        return self._pacer.delay(polled, self._urgent, self.overlapping)

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
        # A round gathers the n-th synced backward of every device: numbered by the devices'
        # own counts, a device that runs ahead (its backward of the round raised, it began the
        # next) is never paired with another device's backward of an earlier step. Numbered by
        # arrival, after a backward raised on every rank the next backward of a rank that got
        # there first was paired with another rank's backward still running the raising one,
        # and from then on each rank's step N was averaged with another's step N - 1 or N + 1
        # (wrong gradients, no error), where torch's next steps sync as usual.
        number = max(self._begun.get(device, 0), self._resync_upto) + 1
        self._begun[device] = number
        current = self._round
        if current is not None and (device in current.steps or current.number < number):
            self._fail_round(
                current,
                (
                    f"{device} started a new backward before its backward step {current.number} "
                    "finished syncing (did that backward raise?)"
                ),
            )
            current = None
        elif current is None and number <= self._round_number:
            # this device's backward of a round already over (failed: another device's
            # backward of it raised)
            why = self._failures.get(number, "another member's backward of it raised")
            step.error = (
                f"backward step {number} on {device} failed before this backward began: {why}"
            )
            step.done.set()
            return
        elif current is not None and current.number > number:
            step.error = (
                f"backward step {number} on {device} began after the members had gone on to "
                f"step {current.number} (a backward of step {number} raised)"
            )
            step.done.set()
            return
        if current is None or current.failed or current.finished:
            self._round_number = number
            current = self._round = Round(number)
        current.steps[device] = step
        step.sync.round = current
        self.transport.set_state(current.number, IN_BACKWARD)
        if self._fast is None or not self._fast.attempt(step):
            self._exchange(step)

    def _on_withdraw(self, step: DeviceStep) -> None:
        current = step.sync.round
        if current is None or current.failed or current.finished:
            return
        # (not a fault to resynchronise after: the other members' backwards of this step
        # still register, each under this step's number, and fail at once)
        self._fail_round(current, describe_raised(step), resync=False)

    def _exchange(self, step: DeviceStep) -> None:
        """Gather every member's registration for ``step``'s round (``_on_agreed`` next)."""
        sync = step.sync
        sync.agreement = self.transport.exchange(
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
        # Gradients submitted while the members were still agreeing count now.
        sync.unsubmitted = [len(slots) for slots in sync.bucket_slots]
        for index in sync.submitted:
            sync.unsubmitted[sync.bucket_of[index]] -= 1
        sync.buckets_left = len(current.plan) + self._beside
        sync.launching = True
        if self._fast is not None:
            self._fast.agreed(step)
        self._launch_ready(step)

    def _verdict(self, gathered: list[np.ndarray]) -> Verdict:
        """The members' agreement on their registrations ``gathered``: worked out once per
        distinct set, which is normally the same at every step."""
        key = tuple(registration.tobytes() for registration in gathered)
        verdict = self._verdicts.get(key)
        if verdict is None:
            names = [self.transport.member_name(i) for i in range(len(gathered))]
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
        """Launch the buckets whose gradients are all in (in plan order where ordered)."""
        sync = step.sync
        if self.transport.capabilities.ordered:
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
        indices = sync.bucket_slots[bucket]
        buffers = [sync.submitted.pop(index) for index in indices]
        yours = self._fast is None or self._fast.prepare(step, bucket, indices, buffers)
        donated = None
        if yours and self.transport.capabilities.in_place:
            # nothing will need this step's own gradients again
            donated = [index in step.owned for index in indices]
        self._start_bucket(step, bucket, buffers, donated)

    def _start_bucket(
        self, step: DeviceStep, bucket: int, buffers: list, donated: list[bool] | None = None
    ) -> None:
        sync = step.sync
        key = ("grad", sync.round.number, bucket)
        pending = self._comm_hook(
            self._comm_state, GradBucket(bucket, step.device, key, buffers, donated)
        )
        sync.bucket_pendings[bucket] = pending
        pending.then(lambda done: self._on_reduced(step, bucket, done))

    def _on_reduced(self, step: DeviceStep, bucket: int, pending: Pending) -> None:
        if not self._settled(step, pending):
            return
        sync = step.sync
        current = sync.round
        results = pending.result
        if self._fast is not None:
            results, problem = self._fast.read(step, bucket, results)
            if problem is not None:
                self.transport.abandon(pending, problem)
                self._fail_round(current, problem)
                return
        if bucket != HEADER:
            if results is not None:
                for index, result in zip(sync.bucket_slots[bucket], results):
                    step.results[index] = result
            step.intervals.append((pending.launched_at, pending.finished_at))
        sync.buckets_left -= 1
        if sync.buckets_left == 0:
            if self._fast is not None and self._fast.voided(step):
                self._exchange(step)
                return
            step.done.set()
            self._waiting.discard(step)
            self._update_urgency()
            if all(s.done.is_set() for s in current.steps.values()) and len(current.steps) == len(
                self.transport.local
            ):
                current.finished = True
                self._end_round(current)

    def _on_waiting(self, step: DeviceStep) -> None:
        current = step.sync.round
        if current is not None and not current.failed and not step.done.is_set():
            self.transport.set_state(current.number, WAITING)
            self._waiting.add(step)
            self._update_urgency()

    def _update_urgency(self) -> None:
        # A device blocked in backward's end, or on a user all_reduce (those are waited on
        # right away), has nothing else to do: results are wanted as soon as possible.
        self._urgent = bool(self._waiting or self._op_links)

    def _fail_round(self, current: Round, message: str, resync: bool = True) -> None:
        if current.failed:
            return
        current.failed = message
        self._failures[current.number] = message
        while len(self._failures) > 8:
            del self._failures[next(iter(self._failures))]
        if resync:
            self._resync_upto = max(self._resync_upto, current.number)
        for step in current.steps.values():
            step.error = message
            pendings = [step.sync.agreement, *step.sync.bucket_pendings.values()]
            for pending in pendings:
                if pending is not None and not pending.done():
                    self.transport.abandon(pending, message)
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
        self.transport.set_state(current.number, IDLE)

    # -- diagnosis --------------------------------------------------------------------------
    def _on_stalled(self, step: DeviceStep) -> None:
        if step.done.is_set():
            return
        diagnosis = describe_stall(step, self.transport, self.config.timeout)
        self._fail_round(step.sync.round, diagnosis)

    # -- user collectives ---------------------------------------------------------------------
    def _on_op(self, outer: Pending, launch: Callable[[Transport], Pending]) -> None:
        if self._closed:
            outer.finish(error="the distributed context was closed")
            return
        inner = launch(self.transport)
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
        reason = describe_op_stall(inner, self.transport, what, self.config.timeout)
        self.transport.abandon(inner, reason)

    # -- closing ------------------------------------------------------------------------------
    def _on_close(self) -> None:
        if self._round is not None:
            self._fail_round(self._round, "the distributed context was closed")
        for outer in list(self._op_links):
            outer.finish(error="the distributed context was closed")
        self._op_links.clear()
        try:
            self.transport.close(self.config.timeout)
        finally:
            self._closed = True
