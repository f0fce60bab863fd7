"""Recording a step: every call that reaches the inner backend, with its arguments resolved.

While ``rg.capture`` runs the step, :class:`Patches` puts a recording wrapper over each protocol
method of the inner backend instance(s) the step's tensors live on, and over
``Optimizer.step``. A :class:`Recorder` keeps the list of calls, each argument encoded as an
earlier call's output (a *slot*), a constant, or a list of those. Host reads (``to_numpy``,
``any``, ``nonzero``) raise :class:`CaptureError` instead, naming the line of the step that
made them.
"""

from __future__ import annotations

import os
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

from ..autodiff import Gradients
from ..backend.protocol import METADATA, PROTOCOL_OPS
from ..context import capturing
from ..errors import AutodiffError
from ..nn import Module
from ..optim import Optimizer

__all__ = ["CaptureError", "Patches", "Recorder", "WatchedGradients", "slots_of"]

#: Calls whose answer depends on tensor values on the host: a replay could not follow them.
HOST_READS = {
    "to_numpy": "copies a tensor's values to the host (.item(), .tolist(), .numpy(), "
    "np.asarray(t), float(t), or Python branching on a tensor such as `if t:`)",
    "any": "reads whether a tensor has a true element on the host",
    "nonzero": "makes a tensor whose shape depends on the values of another",
}
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Output types never entered in the identity map: small ints and bools are shared objects.
_UNTRACKED_OUTPUTS = (bool, int, str, type(None))


class CaptureError(AutodiffError):
    """A step that cannot be captured, or a replay that does not fit its capture."""


class Recorder:
    """The calls of one step, with every argument resolved to a slot or a constant.

    A value is known by identity: each output of a recorded call gets a *slot*, found again by
    ``id``. A slot keeps a weak reference to its value where the type allows one (arrays,
    torch tensors), so the recording holds no more memory than the eager step, and a dead
    value's reused ``id`` matches nothing; other values (NumPy scalars) are held. An argument
    that is no slot (a tensor made before the step and closed over, a dim, a scalar) is a
    constant of the program. ``meta`` keeps each slot's type, shape, dtype and strides (what
    fusion needs to know about a value that is gone by the time the program is compiled).
    """

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.depth = 0  # > 0 inside a recorded call: a backend calling itself is not recorded
        self.paused = False  # inside an optimizer step, which is not recorded
        self.ids: dict[int, int] = {}
        self.refs: list[Callable[[], Any]] = []  # slot -> () -> its value, or None once dead
        self.meta: list[tuple | None] = []  # slot -> (type, shape, dtype, strides) of arrays
        self.on_cuda: list[bool] = []  # slot -> whether it held a torch CUDA tensor
        self.steps: list[tuple] = []

    def active(self) -> bool:
        return not self.depth and not self.paused and threading.get_ident() == self.thread

    def slot(self, value: Any) -> int | None:
        slot = self.ids.get(id(value))
        return slot if slot is not None and self.refs[slot]() is value else None

    def new_slot(self, value: Any) -> int:
        slot = len(self.refs)
        try:
            ref = weakref.ref(value)
        except TypeError:
            ref = _Held(value)
        self.refs.append(ref)
        self.on_cuda.append(_is_torch_cuda(value))
        shape = getattr(value, "shape", None)
        strides = getattr(value, "strides", None)
        self.meta.append(
            (type(value), shape, value.dtype, strides) if type(shape) is tuple else None
        )
        if not isinstance(value, _UNTRACKED_OUTPUTS):
            self.ids[id(value)] = slot
        return slot

    def encode(self, value: Any) -> tuple:
        """``("s", slot)``, ``("c", value)``, or ``("l" | "t", items)`` for a list or tuple
        holding slots (``cat``'s list of tensors)."""
        slot = self.slot(value)
        if slot is not None:
            return ("s", slot)
        if type(value) in (list, tuple):
            items = [self.encode(item) for item in value]
            if any(item[0] != "c" for item in items):
                return ("l" if type(value) is list else "t", items)
        return ("c", value)

    def record(self, function: Callable, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        encoded = [self.encode(arg) for arg in args]
        encoded_kwargs = {key: self.encode(value) for key, value in kwargs.items()}
        if out is None:
            outs = None
        elif type(out) is tuple:
            outs = tuple(self.new_slot(item) for item in out)
        else:
            outs = self.new_slot(out)
        self.steps.append(("call", function, name, encoded, encoded_kwargs, outs))


class _Held:
    """A strong reference with ``weakref.ref``'s interface, for values that take no weak one."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __call__(self) -> Any:
        return self.value


def slots_of(args: list, kwargs: dict) -> list[int]:
    """The slots an encoded call reads, nested lists included."""
    found: list[int] = []
    stack = [*args, *kwargs.values()]
    while stack:
        kind, payload = stack.pop()
        if kind == "s":
            found.append(payload)
        elif kind in ("l", "t"):
            stack.extend(payload)
    return found


def slot_readers(calls: list[tuple]) -> dict[int, int]:
    """How many reads of each slot ``calls`` make (a call reading a slot twice counts
    twice): what a rewrite asks before it keeps a value in registers instead of memory."""
    readers: dict[int, int] = {}
    for call in calls:
        for slot in slots_of(call[3], call[4]):
            readers[slot] = readers.get(slot, 0) + 1
    return readers


def _is_torch_cuda(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and getattr(value, "is_cuda", 0) is True


def _user_frame() -> str:
    """The innermost frame of the stack outside retrograd: where the step made the call."""
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE):
            return f"{frame.filename}:{frame.lineno}: {frame.line}"
    return "<unknown>"


def _recording_method(backend: Any, name: str, method: Callable) -> Callable:
    def recording(*args: Any, **kwargs: Any) -> Any:
        recorders = _recorders_for(backend)
        if not recorders:
            return method(*args, **kwargs)
        for recorder in recorders:
            recorder.depth += 1
        try:
            out = method(*args, **kwargs)
        finally:
            for recorder in recorders:
                recorder.depth -= 1
        for recorder in recorders:
            recorder.record(method, name, args, kwargs, out)
        return out

    return recording


def _refusing_method(backend: Any, name: str, method: Callable) -> Callable:
    def refusing(*args: Any, **kwargs: Any) -> Any:
        if _recorders_for(backend):
            raise CaptureError(
                f"capture: the step {HOST_READS[name]} while being captured "
                f"(inner backend call {name!r}, at {_user_frame()}). A captured step replays "
                "without running its Python, so its control flow and values cannot depend on "
                "tensor values: read the value outside the step function (the trainer may read "
                "the loss a replay returns), or keep the decision on the backend "
                "(mask_where, clamp)"
            )
        return method(*args, **kwargs)

    return refusing


def _captures_here() -> list[Patches]:
    """The captures recording on this thread, innermost first (a capture made inside a
    captured step records into the capture around it too)."""
    found, patches = [], _ACTIVE.get(threading.get_ident())
    while patches is not None:
        found.append(patches)
        patches = patches.outer
    return found


def _recorders_for(backend: Any) -> list[Recorder]:
    """The recorders a call on ``backend`` from this thread goes to: those of the thread's
    captures that patched ``backend`` and record now (not inside a recorded call or a step)."""
    return [
        patches.recorder
        for patches in _captures_here()
        if patches.recorder.active() and any(backend is known for known in patches.backends)
    ]


#: The capture recording on each thread (a capture inside a captured step stacks on it).
_ACTIVE: dict[int, Patches] = {}
#: The wrappers in place: ``(id(owner), name) -> [owner, the attribute they replaced, users]``.
#: Captures on several threads share them (the wrappers find each thread's recorder in
#: :data:`_ACTIVE`), and the last capture to finish puts the attribute back: a pair of
#: captures that saved and restored each other's wrappers left a backend recording, and
#: refusing host reads, for ever after.
_INSTALLED: dict[tuple[int, str], list] = {}
_LOCK = threading.Lock()


class Patches:
    """Recording wrappers set as instance attributes over the inner backends' methods, and over
    ``Optimizer.step`` and ``Module.__call__``; undone on exit whatever happens. Inside,
    :func:`context.capturing` is true on the recording thread (library code that would read a
    value on the host by default, such as amax's finiteness check, skips the read instead).
    The wrappers are shared by the captures of every thread and record only the calls of the
    thread whose capture patched that backend (:func:`_recorders_for`).

    :attr:`modules` lists every module the step called, each once, with its ``training`` flag
    at its first call: the step may call modules that ``state`` does not list (an optimizer
    over ``model.parameters()`` names no module), and their dropout and normalisation branch
    on that flag, so the replay must be refused when it changes."""

    def __init__(self, recorder: Recorder, backends: list, on_step: Callable):
        self.recorder, self.backends, self.on_step = recorder, backends, on_step
        self.saved: list[tuple[int, str]] = []
        self.flag: Any = None
        self.modules: list[tuple[Any, bool]] = []
        self.seen: set[int] = set()  # ids of the modules in :attr:`modules`
        self.outer: Patches | None = None

    def __enter__(self) -> Patches:
        with _LOCK:
            for backend in self.backends:
                for name in PROTOCOL_OPS:
                    if name in METADATA:  # (``detach`` on an inner backend: the identity)
                        continue
                    wrap = _refusing_method if name in HOST_READS else _recording_method
                    self._set(
                        backend, name, lambda method, b=backend, n=name, w=wrap: w(b, n, method)
                    )
            for cls in _optimizer_classes():
                self._set(cls, "step", lambda _, c=cls: _optimizer_step(c.__dict__["step"]))
            self._set(Module, "__call__", lambda _: _module_call(Module.__dict__["__call__"]))
            self.outer = _ACTIVE.get(threading.get_ident())
            _ACTIVE[threading.get_ident()] = self
        self.flag = capturing.set(True)
        return self

    def _set(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        key = (id(owner), name)
        installed = _INSTALLED.get(key)
        if installed is None:
            installed = _INSTALLED[key] = [owner, vars(owner).get(name, _MISSING), 0]
            setattr(owner, name, make(getattr(owner, name)))
        installed[2] += 1
        self.saved.append(key)

    def __exit__(self, *exc: object) -> None:
        if self.flag is not None:
            capturing.reset(self.flag)
        with _LOCK:
            if self.outer is None:
                _ACTIVE.pop(threading.get_ident(), None)
            else:
                _ACTIVE[threading.get_ident()] = self.outer
            for key in reversed(self.saved):
                installed = _INSTALLED[key]
                installed[2] -= 1
                if installed[2]:
                    continue
                del _INSTALLED[key]
                owner, old = installed[0], installed[1]
                if old is _MISSING:
                    delattr(owner, key[1])
                else:
                    setattr(owner, key[1], old)
            self.saved.clear()


_MISSING = object()


def _optimizer_classes() -> list[type]:
    """``Optimizer`` and every subclass that defines its own ``step``."""
    found, stack = [], [Optimizer]
    while stack:
        cls = stack.pop()
        if "step" in cls.__dict__:
            found.append(cls)
        stack.extend(cls.__subclasses__())
    return found


def _module_call(call: Callable) -> Callable:
    def recording_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        for patches in _captures_here():
            if id(self) not in patches.seen:
                patches.seen.add(id(self))
                training = getattr(self, "training", None)
                if training is not None:  # a module without one has no modes
                    patches.modules.append((self, training))
        return call(self, *args, **kwargs)

    recording_call.__wrapped__ = call  # type: ignore[attr-defined]
    return recording_call


def _optimizer_step(step: Callable) -> Callable:
    def recording_step(self: Any, grads: Any = None, *args: Any, **kwargs: Any) -> Any:
        # torch's step() without gradients, or a closure: the step's own answer (its error
        # says what to write; a closure's backward returns gradients this wrapper then sees)
        if grads is None or callable(grads):
            return step(self, grads, *args, **kwargs)

        def run(watched: Any) -> Any:
            return step(self, watched, *args, **kwargs)

        # each capture on this thread sees the step, the innermost first
        for patches in reversed(_captures_here()):
            run = _through(patches, self, run)
        return run(grads)

    recording_step.__wrapped__ = step  # type: ignore[attr-defined]
    return recording_step


def _through(patches: Patches, optimizer: Any, then: Callable[[Any], Any]) -> Callable:
    """``then``, seen by ``patches``'s capture when it records at the time of the call."""

    def call(grads: Any) -> Any:
        if patches.recorder.active():
            return patches.on_step(optimizer, then, grads)
        return then(grads)

    return call


class WatchedGradients(Gradients):
    """The gradients an optimizer is handed during capture, noting every gradient it reads
    (the same values: it shares the original's dict)."""

    __slots__ = ("read",)

    def __init__(self, grads: Gradients):
        super().__init__(grads.backend, grads.device, grads.remaining)
        self.values = grads.values
        self.read: list[Any] = []

    def get(self, node_id: int) -> Any:
        value = self.values.get(node_id)
        if value is not None:
            self.read.append(value)
        return value

    def remove(self, node_id: int) -> Any:
        value = self.values.pop(node_id, None)
        if value is not None:
            self.read.append(value)
        return value
