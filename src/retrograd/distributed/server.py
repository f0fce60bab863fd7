"""The sync server: the state of a context's gradient sync and the thread that watches it, as
Burn's ``DistributedSyncServer``.

Its handlers run under one lock, on the device thread that calls them: a message handed to a
server thread would cost a wake-up and a switch of the interpreter lock on the step's
critical path. The device thread also drives the engine between its backward's steps
(``poll``) and while it waits for its results (``drive_until``); the server thread keeps the
engine moving (heartbeats, collectives in flight) while no device thread does, and gives the
timeouts their diagnosis. For each backward that involves distributed parameters, the server

1. *registers* the device's parameters (ids, sizes, dtypes, in the order their gradients are
   predicted to become final) and gathers every member's registration through the engine;
   once all members are registered it checks they agree (same parameters, same shapes) and
   plans the buckets, from member 0's order, so every member fuses identical buckets;
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

import hashlib
import math
import queue
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..device import Device
from ..errors import DistributedError
from .config import DistributedConfig
from .engine import Collective, Pending
from .params import ParamId

__all__ = ["DeviceStep", "ParamSlot", "SyncServer", "plan_buckets"]

# A member's progress, as peers see it in heartbeats.
IDLE, IN_BACKWARD, WAITING, CLOSING = 0, 1, 2, 3

DTYPE_CODES = {"float32": 1, "float64": 2, "float16": 3, "bfloat16": 4}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
_ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
# Registration payload: [count, label bytes, then per parameter: id, numel, dtype, shape digest]
_HEADER, _FIELDS = 2, 4
_SERVER_REPLY_SECONDS = 10.0
#: how often the server thread polls while a device thread drives the engine itself
_BACKSTOP_SECONDS = 0.05
#: a server thread told to sleep longer than this is woken when a device thread starts work
_DOZE_SECONDS = 0.005


def _shape_digest(shape: tuple[int, ...]) -> int:
    data = ",".join(str(n) for n in shape).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


class ParamSlot:
    """One distributed parameter in one device's backward."""

    __slots__ = ("dtype", "index", "label", "node", "numel", "pid", "sent", "shape")

    def __init__(self, index: int, pid: ParamId, node: Any, shape: tuple[int, ...], dtype: str):
        self.index = index
        self.pid = pid
        self.label = pid.label
        self.node = node
        self.shape = shape
        self.dtype = dtype
        self.numel = math.prod(shape)
        self.sent = False

    @property
    def nbytes(self) -> int:
        return self.numel * _ITEMSIZE.get(self.dtype, 8)


class Bucket:
    """Parameters (by id value) whose gradients are all-reduced as one."""

    __slots__ = ("dtype", "index", "nbytes", "values")

    def __init__(self, index: int, dtype: str):
        self.index = index
        self.dtype = dtype
        self.values: list[int] = []
        self.nbytes = 0


def plan_buckets(
    entries: Sequence[tuple[int, int, str]], config: DistributedConfig
) -> list[Bucket]:
    """Fuse parameters ``(id value, numel, dtype)``, in the order given (the order their
    gradients become final), into buckets of about ``config.bucket_bytes``, one dtype each.
    The bucket that holds the gradient final last is split: its last
    ``config.last_bucket_bytes`` or so go to a bucket of their own, so the rest of it launches
    before backward ends, if that rest is the larger part (else it would gain little).

    >>> from retrograd.distributed import DistributedConfig
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
        nbytes = nbytes_of[value] = numel * _ITEMSIZE.get(dtype, 8)
        bucket = open_by_dtype.get(dtype)
        if bucket is None:
            bucket = Bucket(len(buckets), dtype)
            buckets.append(bucket)
            open_by_dtype[dtype] = bucket
        bucket.values.append(value)
        bucket.nbytes += nbytes
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


class DeviceStep:
    """One device's part of a round: made by the backward hook when backward starts."""

    def __init__(self, device: Device, slots: list[ParamSlot]):
        self.device = device
        self.slots = slots
        self.index_of = {slot.pid.value: slot.index for slot in slots}
        self.by_node = {slot.node.id: slot for slot in slots}
        self.payload = _cached_payload(slots)
        self.done = threading.Event()
        self.error: str | None = None
        self.results: dict[int, np.ndarray] = {}
        # Owned by the server thread from here on.
        self.round: Round | None = None
        self.agreement: Pending | None = None
        self.submitted: dict[int, np.ndarray] = {}
        self.bucket_slots: list[list[int]] = []
        self.bucket_of: list[int] = []
        self.unsubmitted: list[int] = []
        self.bucket_pendings: dict[int, Pending] = {}
        self.next_bucket = 0
        self.buckets_left = 0
        self.intervals: list[tuple[float, float]] = []
        #: final gradients the backward hook holds until their bucket is complete
        self.unsent: list[list] = []

    def comm_seconds(self) -> float:
        """Wall time during which at least one of this step's all-reduces was in flight."""
        total, end = 0.0, float("-inf")
        for start, finish in sorted(self.intervals):
            if finish <= end:
                continue
            total += finish - max(start, end)
            end = finish
        return total


#: Registration payloads and agreement verdicts repeat from one step to the next (the same
#: parameters, in the same order): they are built once. Bounded, in case they keep changing.
_CACHE_SIZE = 64
_PAYLOADS: dict[tuple, np.ndarray] = {}


def _remember(cache: dict, key: Any, value: Any) -> Any:
    if len(cache) >= _CACHE_SIZE:
        cache.pop(next(iter(cache)))
    cache[key] = value
    return value


def _cached_payload(slots: list[ParamSlot]) -> np.ndarray:
    key = tuple((slot.pid.value, slot.label, slot.shape, slot.dtype) for slot in slots)
    payload = _PAYLOADS.get(key)
    if payload is None:
        payload = _remember(_PAYLOADS, key, _payload(slots))
        payload.flags.writeable = False  # shared by every step that registers the same list
    return payload


_LOCAL_PLANS: dict[tuple, tuple[list[int], list[int]]] = {}


def local_bucket_plan(
    slots: list[ParamSlot], config: DistributedConfig
) -> tuple[list[int], list[int]]:
    """``(bucket of each slot, slots per bucket)`` as this device would plan them: the plan
    the members agree on whenever they register the same parameters in the same order."""
    key = (config.bucket_bytes, config.first_bucket_bytes, config.last_bucket_bytes) + tuple(
        (slot.pid.value, slot.numel, slot.dtype) for slot in slots
    )
    plan = _LOCAL_PLANS.get(key)
    if plan is None:
        buckets = plan_buckets([(s.pid.value, s.numel, s.dtype) for s in slots], config)
        bucket_slots, bucket_of = _assign(buckets, {s.pid.value: s.index for s in slots})
        plan = _remember(_LOCAL_PLANS, key, (bucket_of, [len(b) for b in bucket_slots]))
    return plan


def _assign(buckets: list[Bucket], index_of: dict[int, int]) -> tuple[list[list[int]], list[int]]:
    """``(slot indices of each bucket, bucket of each slot)`` for a plan covering every slot;
    ``index_of`` maps a parameter's id value to its slot index."""
    bucket_slots = [[index_of[value] for value in bucket.values] for bucket in buckets]
    bucket_of = [0] * len(index_of)
    for bucket, indices in enumerate(bucket_slots):
        for index in indices:
            bucket_of[index] = bucket
    return bucket_slots, bucket_of


def _payload(slots: list[ParamSlot]) -> np.ndarray:
    labels = "\0".join(slot.label for slot in slots).encode("utf-8")
    padded = labels + b"\0" * (-len(labels) % 8)
    fields = np.empty(_HEADER + _FIELDS * len(slots), dtype=np.int64)
    fields[0] = len(slots)
    fields[1] = len(labels)
    for k, slot in enumerate(slots):
        base = _HEADER + _FIELDS * k
        fields[base] = slot.pid.value
        fields[base + 1] = slot.numel
        fields[base + 2] = DTYPE_CODES.get(slot.dtype, 0)
        fields[base + 3] = _shape_digest(slot.shape)
    return np.concatenate([fields, np.frombuffer(padded, dtype=np.int64)])


def _parse(payload: np.ndarray) -> list[tuple[int, int, str, int, str]]:
    """``[(id value, numel, dtype, shape digest, label)]`` from a registration payload."""
    count, label_bytes = int(payload[0]), int(payload[1])
    end = _HEADER + _FIELDS * count
    labels = payload[end:].tobytes()[:label_bytes].decode("utf-8").split("\0")
    entries = []
    for k in range(count):
        value, numel, dtype, digest = (int(v) for v in payload[_HEADER + _FIELDS * k :][:4])
        entries.append((value, numel, DTYPE_NAMES.get(dtype, "?"), digest, labels[k]))
    return entries


class Round:
    """Every member's part of one backward step."""

    def __init__(self, number: int):
        self.number = number
        self.steps: dict[Device, DeviceStep] = {}
        self.plan: list[Bucket] | None = None
        self.labels: dict[int, str] = {}
        self.failed: str | None = None
        self.finished = False


class SyncServer:
    """The context's server thread. See the module docstring."""

    def __init__(self, engine: Collective, config: DistributedConfig, name: str):
        self.engine = engine
        self.config = config
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
        self._verdicts: dict[tuple[bytes, ...], tuple] = {}
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
                if delay is None or delay > 0.0:
                    done.wait(remaining if delay is None else min(delay, remaining))
            return True
        finally:
            with self._lock:
                self._drivers -= 1

    def stalled(self, step: DeviceStep) -> None:
        """The device gave up waiting for ``step``: fail its round with a diagnosis."""
        self._run_handler(self._on_stalled, step, patience=_SERVER_REPLY_SECONDS)

    def all_reduce(self, outer: Pending, device, buffers, op, key, group) -> None:
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
            wake = self._dozing and self.engine.needs_progress()
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
            self._fail_round(current, (
                f"{device} started a new backward before its backward step {current.number} "
                "finished syncing (did that backward raise?)"
            ))  # fmt: skip
            current = None
        if current is None or current.failed or current.finished:
            self._round_number += 1
            current = self._round = Round(self._round_number)
        current.steps[device] = step
        step.round = current
        self.engine.set_state(current.number, IN_BACKWARD)
        step.agreement = self.engine.all_gather(device, step.payload, ("reg", current.number))
        step.agreement.then(lambda pending: self._on_agreed(step, pending))

    def _settled(self, step: DeviceStep, pending: Pending) -> bool:
        """Whether ``pending`` (an operation of ``step``'s round) completed and its round goes
        on; an error fails the round."""
        if step.round.failed:
            return False
        if pending.error is not None:
            self._fail_round(step.round, pending.error)
            return False
        return True

    def _on_agreed(self, step: DeviceStep, pending: Pending) -> None:
        if not self._settled(step, pending):
            return
        current = step.round
        if current.plan is None:
            gathered = pending.result
            key = tuple(payload.tobytes() for payload in gathered)
            verdict = self._verdicts.get(key)
            if verdict is None:
                verdict = _remember(self._verdicts, key, self._agree(gathered))
            problem, labels, plan = verdict
            if problem is not None:
                self._fail_round(current, f"backward step {current.number}: {problem}")
                return
            current.labels, current.plan = labels, plan
        step.bucket_slots, step.bucket_of = _assign(current.plan, step.index_of)
        # Gradients submitted while the members were still agreeing count now.
        step.unsubmitted = [len(slots) for slots in step.bucket_slots]
        for index in step.submitted:
            step.unsubmitted[step.bucket_of[index]] -= 1
        step.buckets_left = len(current.plan)
        self._launch_ready(step)

    def _agree(self, gathered: list[np.ndarray]) -> tuple[str | None, dict, list[Bucket]]:
        """(why the members' registrations differ or ``None``, labels by id, bucket plan)."""
        problem = self._disagreement(gathered)
        if problem is not None:
            return problem, {}, []
        first = _parse(gathered[0])
        labels = {value: label for value, _, _, _, label in first}
        return None, labels, plan_buckets([(v, n, d) for v, n, d, _, _ in first], self.config)

    def _disagreement(self, gathered: list[np.ndarray]) -> str | None:
        """Why the members' registrations differ, or ``None`` if they agree."""
        engine = self.engine
        tables = [{entry[0]: entry for entry in _parse(payload)} for payload in gathered]
        every = {}
        for table in tables:
            for value, entry in table.items():
                every.setdefault(value, entry)
        problems = []
        for value, entry in every.items():
            label = entry[4]
            without = [engine.member_name(i) for i, t in enumerate(tables) if value not in t]
            if without:
                having = [engine.member_name(i) for i, t in enumerate(tables) if value in t]
                problems.append(
                    f"parameter {label!r} is registered on {', '.join(having)} "
                    f"but not on {', '.join(without)}"
                )
                continue
            kinds = {(t[value][1], t[value][2], t[value][3]) for t in tables}
            if len(kinds) > 1:
                described = ", ".join(
                    f"{engine.member_name(i)}: {t[value][1]} elements {t[value][2]}"
                    for i, t in enumerate(tables)
                )
                problems.append(f"parameter {label!r} differs in shape or dtype ({described})")
        if not problems:
            return None
        return (
            "the devices' distributed parameters differ, so their gradients cannot be "
            f"all-reduced: {'; '.join(problems)}"
        )

    def _on_submit_many(self, step: DeviceStep, items: list[tuple[int, np.ndarray]]) -> None:
        if step.round is None or step.round.failed or step.error is not None:
            return
        step.submitted.update(items)
        if step.round.plan is not None:
            for slot_index, _ in items:
                step.unsubmitted[step.bucket_of[slot_index]] -= 1
            self._launch_ready(step)

    def _launch_ready(self, step: DeviceStep) -> None:
        """Launch the buckets whose gradients are all in (in plan order on ordered engines)."""
        if self.engine.ordered:
            plan_size = len(step.bucket_slots)
            while step.next_bucket < plan_size and step.unsubmitted[step.next_bucket] == 0:
                self._launch(step, step.next_bucket)
                step.next_bucket += 1
        else:
            for bucket, left in enumerate(step.unsubmitted):
                if left == 0 and bucket not in step.bucket_pendings:
                    self._launch(step, bucket)

    def _launch(self, step: DeviceStep, bucket: int) -> None:
        current = step.round
        slots = step.bucket_slots[bucket]
        buffers = [step.submitted.pop(index) for index in slots]
        pending = self.engine.all_reduce(
            step.device,
            buffers,
            self.config.all_reduce_op,
            ("grad", current.number, bucket),
            self.engine.members,
        )
        step.bucket_pendings[bucket] = pending
        pending.then(lambda done: self._on_reduced(step, bucket, done))

    def _on_reduced(self, step: DeviceStep, bucket: int, pending: Pending) -> None:
        if not self._settled(step, pending):
            return
        current = step.round
        for index, result in zip(step.bucket_slots[bucket], pending.result):
            step.results[index] = result
        step.intervals.append((pending.launched_at, pending.finished_at))
        step.buckets_left -= 1
        if step.buckets_left == 0:
            step.done.set()
            self._waiting.discard(step)
            self._update_urgency()
            if all(s.done.is_set() for s in current.steps.values()) and len(current.steps) == len(
                self.engine.local
            ):
                current.finished = True
                self._end_round(current)

    def _on_waiting(self, step: DeviceStep) -> None:
        if step.round is not None and not step.round.failed and not step.done.is_set():
            self.engine.set_state(step.round.number, WAITING)
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
            pendings = [step.agreement, *step.bucket_pendings.values()]
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
        # Each step keeps its round, so the round lets go of the steps: without that cycle,
        # a step (and the gradients it holds) is freed once its backward returns, not steps
        # later by the garbage collector.
        current.steps.clear()
        self.engine.set_state(current.number, IDLE)

    # -- diagnosis --------------------------------------------------------------------------
    def _on_stalled(self, step: DeviceStep) -> None:
        if step.done.is_set():
            return
        self._fail_round(step.round, self._describe_stall(step))

    def _describe_stall(self, step: DeviceStep) -> str:
        current, engine = step.round, self.engine
        head = (
            f"gradient sync of backward step {current.number} on {step.device} timed out after "
            f"{self.config.timeout:g} s"
        )
        if current.plan is None:
            missing = engine.missing(step.agreement) or []
            return f"{head}: " + "; ".join(
                _with_status(
                    engine,
                    index,
                    f"{engine.member_name(index)} never registered its distributed parameters "
                    "for this step",
                    "it has not called backward, or its thread died",
                )
                for index in missing
            )
        stalled = [b for b, p in sorted(step.bucket_pendings.items()) if not p.done()]
        if not stalled:
            return f"{head}: its own gradients were never all submitted"
        bucket = stalled[0]
        pending = step.bucket_pendings[bucket]
        labels = [current.labels.get(v, str(v)) for v in current.plan[bucket].values]
        what = (
            f"the all-reduce of {_quote(labels)} "
            f"(bucket {bucket + 1} of {len(current.plan)}) never completed"
        )
        missing = engine.missing(pending)
        if missing is None:  # the engine cannot tell who: say what it knows of each peer
            known = [engine.member_status(i) for i in range(len(engine.members))]
            return f"{head}: {what}; " + "; ".join(text for text in known if text)
        parts = []
        for index in missing:
            device = engine.members[index]
            other = current.steps.get(device)
            name = engine.member_name(index)
            if other is None:
                parts.append(f"{name} never registered for this step")
                continue
            absent = [
                slot.label
                for slot in (other.slots[i] for i in other.bucket_slots[bucket])
                if slot.index not in other.submitted and not slot.sent
            ]
            if absent:
                parts.append(
                    f"{name} has not submitted the gradient of {_quote(absent)} (its backward "
                    "has not produced it)"
                )
            else:
                parts.append(f"{name} has not joined it")
        return f"{head}: {what}: {'; '.join(parts)}"

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
        engine = self.engine
        missing = engine.missing(inner)
        head = f"{what} timed out after {self.config.timeout:g} s"
        if missing is None:
            known = [engine.member_status(i) for i in range(len(engine.members))]
            reason = f"{head}; " + "; ".join(text for text in known if text)
        else:
            reason = f"{head}: " + "; ".join(
                _with_status(engine, i, f"{engine.member_name(i)} never joined it") for i in missing
            )
        engine.abandon(inner, reason)

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


def _with_status(engine: Collective, index: int, text: str, otherwise: str = "") -> str:
    """``text``, then what the engine knows of the member (or ``otherwise``)."""
    status = engine.member_status(index)
    if status:
        return f"{text}: {status}"
    return f"{text} ({otherwise})" if otherwise else text


def _quote(labels: Sequence[str]) -> str:
    shown = ", ".join(repr(label) for label in labels[:6])
    more = f" and {len(labels) - 6} more" if len(labels) > 6 else ""
    return f"parameter{'s' if len(labels) > 1 else ''} {shown}{more}"
