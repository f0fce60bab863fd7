"""torch's ``torch.profiler`` (and ``torch.autograd.profiler``): where a step's time goes, one
event per call that reaches the inner backend (its kernels: ``matmul``, ``conv2d``,
``layer_norm_backward``...), forward and backward alike, plus the ranges the code names with
:class:`record_function`::

    with rg.profiler.profile(record_shapes=True) as prof:
        with rg.profiler.record_function("train_step"):
            optimizer.step(loss_fn(model(x), y).backward())
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=10))
    prof.export_chrome_trace("trace.json")     # chrome://tracing, Perfetto

While recording, a timing wrapper sits over each protocol method of the current backend's
inner backend (the instance the step's tensors live on); nothing is patched otherwise. Times
are host wall times: on an accelerator a kernel's time shows where the host waits for it.
``schedule``, ``on_trace_ready`` and ``tensorboard_trace_handler`` follow torch's semantics.

``profile_memory=True`` counts the bytes of the values each call returns (its allocations;
releases are not tracked, so no call shows torch's negative "Self CPU Mem"), ``with_stack=True``
keeps the Python frames of the code that made each call (``key_averages(group_by_stack_n=5)``
groups by them and the table shows them as "Source Location"; ``export_stacks`` writes them for
flame graphs).
"""

from __future__ import annotations

import enum
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import ContextDecorator
from typing import Any

from .backend.protocol import METADATA, PROTOCOL_OPS
from .context import current_backend
from .errors import DTypeError, InvalidArgumentError, check_callable, check_iterable
from .files import atomic_write

__all__ = [
    "EventList",
    "FunctionEvent",
    "ProfilerAction",
    "ProfilerActivity",
    "profile",
    "record_function",
    "schedule",
    "tensorboard_trace_handler",
]


class ProfilerActivity(enum.Enum):
    CPU = "CPU"
    CUDA = "CUDA"
    XPU = "XPU"
    MTIA = "MTIA"


class ProfilerAction(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def schedule(
    *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0
) -> Callable[[int], ProfilerAction]:
    """torch's schedule: skip ``skip_first`` steps, then cycles of ``wait`` idle, ``warmup``
    and ``active`` recorded steps (the last one saves), ``repeat`` times (0: for ever).

    >>> plan = schedule(wait=1, warmup=1, active=2)
    >>> [plan(step).name for step in range(4)]
    ['NONE', 'WARMUP', 'RECORD', 'RECORD_AND_SAVE']
    """
    counts = {"wait": wait, "warmup": warmup, "active": active, "repeat": repeat,
              "skip_first": skip_first}  # fmt: skip
    for name, count in counts.items():  # (a str compared with 0: Python's bare TypeError)
        if isinstance(count, bool) or not isinstance(count, int | float):
            raise DTypeError(f"schedule: {name} must be a number of steps, got {count!r}")
    if min(wait, warmup, repeat, skip_first) < 0 or active <= 0:
        raise InvalidArgumentError(
            "schedule: wait, warmup, repeat and skip_first must be >= 0 and active > 0"
        )

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        cycle = wait + warmup + active
        if repeat > 0 and step // cycle >= repeat:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if position < cycle - 1 else ProfilerAction.RECORD_AND_SAVE

    return action


class FunctionEvent:
    """One timed call (or one :class:`record_function` range): microseconds since the
    profile started; ``self_cpu_time_total`` leaves out the calls made inside it."""

    def __init__(
        self,
        name: str,
        start: float,
        end: float,
        thread: int,
        shapes: list,
        stack: list[str] | None = None,
    ):
        self.name, self.key = name, name
        self.time_range = (start, end)
        self.thread = thread
        self.input_shapes = shapes
        self.stack = stack or []
        self.children: list[FunctionEvent] = []
        self.count = 1
        #: bytes of the values this call returned itself, and with its calls' (profile_memory)
        self.self_cpu_memory_usage = 0
        self.cpu_memory_usage = 0
        self.results: list[Any] = []

    @property
    def cpu_time_total(self) -> float:
        return self.time_range[1] - self.time_range[0]

    @property
    def self_cpu_time_total(self) -> float:
        return self.cpu_time_total - sum(child.cpu_time_total for child in self.children)

    def __repr__(self) -> str:
        return f"<FunctionEvent {self.name} {self.cpu_time_total:.1f} us>"


class FunctionEventAvg:
    """The events of one name (and input shapes, when grouped by them), summed."""

    def __init__(self, key: str, shapes: Any = None, stack: list[str] | None = None):
        self.key, self.input_shapes = key, shapes
        self.stack = stack or []
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_memory_usage = 0
        self.self_cpu_memory_usage = 0

    def add(self, event: Any) -> FunctionEventAvg:
        self.count += event.count
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        self.cpu_memory_usage += event.cpu_memory_usage
        self.self_cpu_memory_usage += event.self_cpu_memory_usage
        return self

    @property
    def cpu_time(self) -> float:
        return self.cpu_time_total / max(self.count, 1)

    @property
    def self_cpu_time(self) -> float:
        return self.self_cpu_time_total / max(self.count, 1)

    def __repr__(self) -> str:
        return f"<FunctionEventAvg {self.key} x{self.count} {self.cpu_time_total:.1f} us>"


_SORT_KEYS = {
    "cpu_time_total",
    "self_cpu_time_total",
    "cpu_time",
    "self_cpu_time",
    "count",
    "cpu_memory_usage",
    "self_cpu_memory_usage",
}

#: the name torch's table gives the ranges ``profile.step()`` opens under a schedule
_STEP_PREFIX = "ProfilerStep#"
_STEP_NAME = "ProfilerStep*"


def _memory(nbytes: int) -> str:
    """Bytes as torch's table writes them (``92.06 KB``, ``160 B``)."""
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


def _time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class EventList(list):
    """A list of events, with torch's ``key_averages``, ``table`` and ``total_average``."""

    #: whether the recording counted memory (the table then shows torch's memory columns)
    profile_memory = False

    def key_averages(
        self, group_by_input_shape: bool = False, group_by_stack_n: int = 0
    ) -> EventList:
        """One row per name (torch's ``ProfilerStep*`` for the steps' ranges), and per input
        shapes and innermost ``group_by_stack_n`` frames when asked."""
        if isinstance(group_by_stack_n, bool) or not isinstance(group_by_stack_n, int):
            raise DTypeError(
                f"key_averages: group_by_stack_n must be an int, got {group_by_stack_n!r}"
            )
        if group_by_stack_n < 0:
            raise InvalidArgumentError(
                f"key_averages: group_by_stack_n must be >= 0, got {group_by_stack_n}"
            )
        groups: dict[Any, FunctionEventAvg] = {}
        for event in self:
            name = _STEP_NAME if event.key.startswith(_STEP_PREFIX) else event.key
            shapes = str(event.input_shapes) if group_by_input_shape else None
            stack = tuple(event.stack[:group_by_stack_n])
            key = (name, shapes, stack)
            if key not in groups:
                groups[key] = FunctionEventAvg(name, shapes, list(stack))
            groups[key].add(event)
        averages = EventList(groups.values())
        averages.profile_memory = self.profile_memory
        return averages

    def total_average(self) -> FunctionEventAvg:
        total = FunctionEventAvg("Total")
        for event in self:
            total.add(event)
        return total

    def table(
        self,
        sort_by: str | None = None,
        row_limit: int = 100,
        header: str | None = None,
        top_level_events_only: bool = False,
        **_: Any,
    ) -> str:
        """torch's table: name, self and total CPU time (and their share of the whole), the
        average, the number of calls; sorted by ``sort_by`` (largest first)."""
        rows = list(self)
        if sort_by is not None:
            if sort_by not in _SORT_KEYS:
                raise InvalidArgumentError(
                    f"table: sort_by must be one of {sorted(_SORT_KEYS)}, got {sort_by!r}"
                )
            rows.sort(key=lambda row: getattr(row, sort_by), reverse=True)
        # torch stops at the row whose count equals row_limit: any other value (-1, None)
        # shows every row, where a slice [:-1] dropped the last one
        shapes = any(getattr(row, "input_shapes", None) for row in rows)
        if isinstance(row_limit, int) and not isinstance(row_limit, bool) and row_limit >= 0:
            rows = rows[:row_limit]
        whole = sum(row.self_cpu_time_total for row in self) or 1.0
        width = max([len("Name"), *(len(row.key) for row in rows)]) + 2
        columns = ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
        if self.profile_memory:
            columns += ["CPU Mem", "Self CPU Mem"]
        columns.append("# of Calls")
        stacks = any(row.stack for row in rows)
        line = "-" * width + "".join(" " + "-" * 14 for _ in columns)
        lines = [header] if header else []
        lines += [line, "Name".ljust(width) + "".join(f" {c:>14}" for c in columns)]
        if shapes:
            lines[-1] += "  Input Shapes"
        if stacks:
            lines[-1] += "  Source Location"
        lines.append(line)
        for row in rows:
            cells = [
                f"{100 * row.self_cpu_time_total / whole:.2f}%",
                _time(row.self_cpu_time_total),
                f"{100 * row.cpu_time_total / whole:.2f}%",
                _time(row.cpu_time_total),
                _time(row.cpu_time_total / max(row.count, 1)),
            ]
            if self.profile_memory:
                cells += [_memory(row.cpu_memory_usage), _memory(row.self_cpu_memory_usage)]
            cells.append(str(row.count))
            text = row.key.ljust(width) + "".join(f" {c:>14}" for c in cells)
            if shapes and row.input_shapes:
                text += f"  {row.input_shapes}"
            if stacks and row.stack:
                text += f"  {row.stack[0]}"
            lines.append(text)
            indent = " " * (len(text) - len(row.stack[0])) if stacks and row.stack else ""
            lines += [indent + frame for frame in row.stack[1:]]
        lines += [line, f"Self CPU time total: {_time(whole)}"]
        return "\n".join(lines)


class _Recording:
    """The events of one recording, and the per-thread stacks that give each its children."""

    def __init__(self, record_shapes: bool, profile_memory: bool = False, with_stack: bool = False):
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.origin = time.perf_counter_ns()
        self.events: list[FunctionEvent] = []
        self.local = threading.local()
        self.lock = threading.Lock()

    def now(self) -> float:
        return (time.perf_counter_ns() - self.origin) / 1e3

    def begin(self, name: str, args: Iterable[Any]) -> tuple:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        shapes = (
            [list(getattr(a, "shape", ())) for a in args if hasattr(a, "shape")]
            if self.record_shapes
            else []
        )
        frames = _user_frames() if self.with_stack else []
        children: list[FunctionEvent] = []
        stack.append(children)
        return name, self.now(), shapes, children, frames

    def end(self, opened: tuple, result: Any = None) -> FunctionEvent:
        name, start, shapes, children, frames = opened
        event = FunctionEvent(name, start, self.now(), threading.get_ident(), shapes, frames)
        event.children = children
        if self.profile_memory:
            # a value a call passes on from one of its own calls was allocated there
            passed_on = {id(v) for child in children for v in child.results}
            event.self_cpu_memory_usage = sum(
                _nbytes(v) for v in _values(result) if id(v) not in passed_on
            )
            event.cpu_memory_usage = event.self_cpu_memory_usage + sum(
                child.cpu_memory_usage for child in children
            )
            event.results = list(_values(result))
        stack = self.local.stack
        stack.pop()
        if stack:
            stack[-1].append(event)
        with self.lock:
            self.events.append(event)
        return event


#: the recording in progress (one at a time, as torch's profiler)
_active: list[_Recording] = []

#: where retrograd's own frames live (left out of the stacks, as torch leaves out its own)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _user_frames() -> list[str]:
    """The calling code's frames, innermost first, as torch's ``file(line): function``."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not os.path.abspath(path).startswith(_PACKAGE_DIR):
            frames.append(f"{path}({frame.f_lineno}): {frame.f_code.co_name}")
        frame = frame.f_back
    return frames


def _values(result: Any) -> Iterable[Any]:
    """The values a call returned (one, or the items of a returned tuple or list)."""
    if isinstance(result, tuple | list):
        for item in result:
            yield from _values(item)
    elif result is not None:
        yield result


def _nbytes(value: Any) -> int:
    """Bytes of an inner value (NumPy arrays and torch tensors both have ``nbytes``)."""
    nbytes = getattr(value, "nbytes", 0)
    return nbytes if isinstance(nbytes, int) else 0


def _timed(recording: _Recording, name: str, method: Callable) -> Callable:
    def timed(*args: Any, **kwargs: Any) -> Any:
        opened = recording.begin(name, args)
        result = None
        try:
            result = method(*args, **kwargs)
            return result
        finally:
            recording.end(opened, result)

    return timed


class record_function(ContextDecorator):  # noqa: N801  (torch's name)
    """A named range in the profile (a context manager or a decorator); nothing when no
    profile records."""

    def __init__(self, name: str, args: str | None = None):
        if not isinstance(name, str):  # torch: "Expected a value of type 'str' for 'name'"
            raise DTypeError(f"record_function: name must be a str, got {name!r}")
        self.name = name
        self._opened: list = []

    def __enter__(self) -> record_function:
        recording = _active[-1] if _active else None
        self._opened.append((recording, recording.begin(self.name, ()) if recording else None))
        return self

    def __exit__(self, *exc: Any) -> None:
        recording, opened = self._opened.pop()
        if recording is not None and opened is not None:
            recording.end(opened)


class profile:  # noqa: N801  (torch's name)
    """torch's ``profile(activities=None, schedule=None, on_trace_ready=None,
    record_shapes=False, ...)``: records while active (every step without a ``schedule``);
    ``step()`` advances the schedule; ``key_averages()``, ``events()``,
    ``export_chrome_trace(path)`` read the last recording. ``profile_memory``, ``with_stack``,
    ``with_flops`` and ``with_modules`` are accepted and not measured."""

    def __init__(
        self,
        activities: Iterable[ProfilerActivity] | None = None,
        schedule: Callable[[int], ProfilerAction] | None = None,
        on_trace_ready: Callable[[profile], Any] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
        with_flops: bool = False,
        with_modules: bool = False,
        enabled: bool = True,
        **_: Any,
    ):
        if activities is not None:
            check_iterable("profile", activities, "activities")
            activities = list(activities)
            unknown = [a for a in activities if not isinstance(a, ProfilerActivity)]
            if unknown or not activities:  # torch: "No valid profiler activities found"
                raise InvalidArgumentError(
                    f"profile: no valid profiler activities in {activities!r}; give "
                    "ProfilerActivity members (ProfilerActivity.CPU, ProfilerActivity.CUDA)"
                )
        for name, function in (("schedule", schedule), ("on_trace_ready", on_trace_ready)):
            if function is not None:  # here, not as "not callable" at the first step
                check_callable("profile", function, name)
        self.activities = set(activities or [ProfilerActivity.CPU])
        self.schedule = schedule
        self.on_trace_ready = on_trace_ready
        self.record_shapes = record_shapes
        self.profile_memory = profile_memory
        self.with_stack = with_stack
        self.enabled = enabled
        self.step_num = 0
        self._step_range: record_function | None = None
        self._recording: _Recording | None = None
        self._saved: list[tuple[Any, str, Any]] = []
        self._events = EventList()

    # -- recording ------------------------------------------------------------------------------
    def _action(self) -> ProfilerAction:
        if not self.enabled:
            return ProfilerAction.NONE
        return self.schedule(self.step_num) if self.schedule else ProfilerAction.RECORD

    def _start_recording(self) -> None:
        if self._recording is not None:
            return
        if _active:
            raise InvalidArgumentError("profile: another profile is already recording")
        recording = self._recording = _Recording(
            self.record_shapes, self.profile_memory, self.with_stack
        )
        _active.append(recording)
        backend = current_backend()
        inner = backend.inner if backend.is_autodiff else backend
        for name in PROTOCOL_OPS:
            if name in METADATA or name.startswith("_"):
                continue
            method = getattr(inner, name)
            self._saved.append((inner, name, vars(inner).get(name, _MISSING)))
            setattr(inner, name, _timed(recording, name, method))

    def _stop_recording(self) -> None:
        if self._recording is None:
            return
        for owner, name, old in reversed(self._saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._saved.clear()
        _active.remove(self._recording)
        self._events = EventList(sorted(self._recording.events, key=lambda e: e.time_range[0]))
        for event in self._events:
            event.results = []  # (the values are only needed while their parents close)
            if event.name.startswith(_STEP_PREFIX):  # torch's events name every step so
                event.name = event.key = _STEP_NAME
        self._events.profile_memory = self.profile_memory
        self._recording = None

    def _open_step_range(self) -> None:
        """Under a schedule, torch marks each step with a ``ProfilerStep#<n>`` range."""
        if self.schedule is not None and self._recording is not None:
            self._step_range = record_function(f"{_STEP_PREFIX}{self.step_num}")
            self._step_range.__enter__()

    def _close_step_range(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    def start(self) -> None:
        if self._action() in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._start_recording()
        self._open_step_range()

    def stop(self) -> None:
        self._close_step_range()
        saving = self._recording is not None
        self._stop_recording()
        if saving and self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def step(self) -> None:
        """The end of a training step: the schedule decides whether the next one records,
        and a finished active span is handed to ``on_trace_ready``."""
        self._close_step_range()
        before = self._action()
        self.step_num += 1
        after = self._action()
        if before == ProfilerAction.RECORD_AND_SAVE:
            self._stop_recording()
            if self.on_trace_ready is not None:
                self.on_trace_ready(self)
        if after in (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE):
            self._start_recording()
        self._open_step_range()

    def __enter__(self) -> profile:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- results --------------------------------------------------------------------------------
    def events(self) -> EventList:
        return self._events

    def key_averages(
        self, group_by_input_shape: bool = False, group_by_stack_n: int = 0, **_: Any
    ) -> EventList:
        if group_by_stack_n and not self.with_stack:
            raise InvalidArgumentError(
                "key_averages: group_by_stack_n needs a profile made with with_stack=True "
                "(no stacks were recorded)"
            )
        return self._events.key_averages(group_by_input_shape, group_by_stack_n)

    def export_stacks(self, path: str | os.PathLike, metric: str = "self_cpu_time_total") -> None:
        """torch's flame-graph lines, ``outermost;...;innermost;name value`` per call (the
        value in whole microseconds), for a profile made with ``with_stack=True``."""
        if metric not in ("self_cpu_time_total", "self_cpu_memory_usage"):
            raise InvalidArgumentError(
                f"export_stacks: metric must be 'self_cpu_time_total' or "
                f"'self_cpu_memory_usage', got {metric!r}"
            )
        if not self.with_stack:
            raise InvalidArgumentError(
                "export_stacks: the profile was made without with_stack=True (no stacks)"
            )
        with atomic_write(path, "w") as file:  # whole or not at all
            for event in self._events:
                if event.stack:
                    frames = ";".join(reversed(event.stack))
                    file.write(f"{frames};{event.name} {int(getattr(event, metric))}\n")

    def export_memory_timeline(self, path: str | os.PathLike, device: str | None = None) -> None:
        """Not available: retrograd counts what each call allocates, not when values are
        freed, so there is no timeline of memory in use to draw."""
        raise InvalidArgumentError(
            "export_memory_timeline: retrograd's profiler counts the bytes each call "
            "allocates (profile_memory=True, the table's 'CPU Mem' columns) but not when they "
            "are freed, so it has no memory timeline to export"
        )

    def export_chrome_trace(self, path: str | os.PathLike) -> None:
        """The events as Chrome's trace format (``chrome://tracing``, Perfetto)."""
        if not isinstance(path, str | os.PathLike):
            raise DTypeError(
                f"export_chrome_trace: expected a path (str or os.PathLike), got "
                f"{type(path).__name__}"
            )
        trace = {
            "traceEvents": [
                {
                    "name": event.name,
                    "ph": "X",
                    "cat": "cpu_op",
                    "ts": event.time_range[0],
                    "dur": event.cpu_time_total,
                    "pid": os.getpid(),
                    "tid": event.thread,
                    "args": {"Input Dims": event.input_shapes} if event.input_shapes else {},
                }
                for event in self._events
            ],
            "displayTimeUnit": "ms",
        }
        with atomic_write(path, "w") as file:  # whole or not at all
            json.dump(trace, file)


_MISSING = object()


def tensorboard_trace_handler(
    dir_name: str | os.PathLike, worker_name: str | None = None, use_gzip: bool = False
) -> Callable[[profile], None]:
    """An ``on_trace_ready`` writing each trace to ``dir_name`` as
    ``<worker>.<milliseconds>.pt.trace.json`` (TensorBoard's profiler plugin reads it)."""
    if use_gzip:
        raise InvalidArgumentError("tensorboard_trace_handler: use_gzip is not supported")

    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        stamp = int(time.time() * 1000)
        prof.export_chrome_trace(os.path.join(dir_name, f"{worker}.{stamp}.pt.trace.json"))

    return handler
