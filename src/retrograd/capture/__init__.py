"""Step capture: record one training step as the inner-backend calls it makes, then replay them.

``step = rg.capture(step_fn, *example_inputs, state=[model, optimizer])`` runs
``step_fn(*example_inputs)`` once, eagerly and for real (it *is* a training step), while every
call that reaches the inner backend is recorded: the autodiff decorator, the backward pass, the
checkpointer's recomputations and any tensor code of the step all end in such calls, so their
list, with each argument resolved to an earlier call's output, an input, a piece of state or a
constant, *is* the step. ``step(*inputs)`` then replays that list on new inputs of the same
shapes and dtypes, without running the step's Python, building a graph or walking a tape.

The list is compiled once into straight-line Python (``step.code`` shows it): one line per
call, and a ``del`` right after a value's last use, so a replay holds no more memory than the
eager step did. When every value is a torch CUDA tensor, each run of calls between optimizer
steps is instead captured once more into a ``torch.cuda.CUDAGraph`` (static input buffers,
warm-up on a side stream) and replayed as one launch.

State. Parameters are rebound to new tensors every step (optimizers are functional), so capture
must know where they live: ``state`` lists the modules and optimizers the step trains. The
parameters' current values are read at the start of every replay, and a parameter the step
replaced is written back afterwards, so the model is exactly as an eager step leaves it.
An optimizer's ``step(grads)`` is *not* replayed from the recording: it is host code by design
(step counts, Adam's bias corrections, schedules that set ``lr`` between steps), whose scalars
change every step, and replaying its recorded ops would freeze them at the captured step's
values. So a replay runs forward and backward from the recording and calls the optimizer on the
replayed gradients, as eager code would; its state stays the optimizer's own.

What is refused, with :class:`CaptureError`: a host read while recording (``.item()``,
``.tolist()``, ``np.asarray``, ``if tensor:``; the inner ``to_numpy``, ``any``, ``nonzero``),
since a replay would not see the value change; an optimizer not listed in ``state`` stepping
inside the step; distributed parameters (their all-reduce is not an inner-backend call); inputs
of other shapes, dtypes or backends at replay, or other values of non-tensor arguments. Random
draws (``dropout``, ``rg.random``) are inner calls too: a replay draws fresh numbers from the
same generator in the same order, exactly as the eager steps would.
"""

from __future__ import annotations

import os
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from .autodiff import Gradients
from .backend.protocol import PROTOCOL_OPS
from .context import current_backend
from .errors import AutodiffError
from .optim import Optimizer
from .tensor import Tensor

__all__ = ["CaptureError", "CapturedStep", "capture"]

#: Calls that answer from metadata (shapes, dtypes, devices): not part of the step's work.
_METADATA = frozenset({"shape", "dtype", "same_dtype", "device", "error_class"})
#: Calls whose answer depends on tensor values on the host: a replay could not follow them.
_HOST_READS = {
    "to_numpy": "copies a tensor's values to the host (.item(), .tolist(), .numpy(), "
    "np.asarray(t), float(t), or Python branching on a tensor such as `if t:`)",
    "any": "reads whether a tensor has a true element on the host",
    "nonzero": "makes a tensor whose shape depends on the values of another",
}
#: Calls that draw from or reseed a random generator: not repeatable in CUDA-graph warm-ups.
_RANDOM = frozenset({"random", "bernoulli", "seed"})
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
#: Output types never entered in the identity map: small ints and bools are shared objects.
_UNTRACKED_OUTPUTS = (bool, int, str, type(None))


class CaptureError(AutodiffError):
    """A step that cannot be captured, or a replay that does not fit its capture."""


# -- recording --------------------------------------------------------------------------------
class _Recorder:
    """The calls of one step, with every argument resolved to a slot or a constant.

    A value is known by identity: each output of a recorded call gets a *slot*, found again by
    ``id``. A slot keeps a weak reference to its value where the type allows one (arrays,
    torch tensors), so the recording holds no more memory than the eager step, and a dead
    value's reused ``id`` matches nothing; other values (NumPy scalars) are held. An argument
    that is no slot (a tensor made before the step and closed over, a dim, a scalar) is a
    constant of the program.
    """

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.depth = 0  # > 0 inside a recorded call: a backend calling itself is not recorded
        self.paused = False  # inside an optimizer step, which is not recorded
        self.ids: dict[int, int] = {}
        self.refs: list[Callable[[], Any]] = []  # slot -> () -> its value, or None once dead
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


def _user_frame() -> str:
    """The innermost frame of the stack outside retrograd: where the step made the call."""
    for frame in reversed(traceback.extract_stack()):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE):
            return f"{frame.filename}:{frame.lineno}: {frame.line}"
    return "<unknown>"


def _recording_method(recorder: _Recorder, name: str, method: Callable) -> Callable:
    def recording(*args: Any, **kwargs: Any) -> Any:
        if not recorder.active():
            return method(*args, **kwargs)
        recorder.depth += 1
        try:
            out = method(*args, **kwargs)
        finally:
            recorder.depth -= 1
        recorder.record(method, name, args, kwargs, out)
        return out

    return recording


def _refusing_method(recorder: _Recorder, name: str, method: Callable) -> Callable:
    def refusing(*args: Any, **kwargs: Any) -> Any:
        if recorder.active():
            raise CaptureError(
                f"capture: the step {_HOST_READS[name]} while being captured "
                f"(inner backend call {name!r}, at {_user_frame()}). A captured step replays "
                "without running its Python, so its control flow and values cannot depend on "
                "tensor values: read the value outside the step function (the trainer may read "
                "the loss a replay returns), or keep the decision on the backend "
                "(mask_where, clamp)"
            )
        return method(*args, **kwargs)

    return refusing


class _Patches:
    """Recording wrappers set as instance attributes over the inner backends' methods, and over
    ``Optimizer.step``; undone on exit whatever happens."""

    def __init__(self, recorder: _Recorder, backends: list, on_step: Callable):
        self.recorder, self.backends, self.on_step = recorder, backends, on_step
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> _Patches:
        recorder = self.recorder
        for backend in self.backends:
            for name in PROTOCOL_OPS:
                if name in _METADATA:
                    continue
                method = getattr(backend, name)
                wrap = _refusing_method if name in _HOST_READS else _recording_method
                self._set(backend, name, wrap(recorder, name, method))
        for cls in _optimizer_classes():
            self._set(cls, "step", _optimizer_step(recorder, cls.__dict__["step"], self.on_step))
        return self

    def _set(self, owner: Any, name: str, value: Any) -> None:
        self.saved.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)

    def __exit__(self, *exc: object) -> None:
        for owner, name, old in reversed(self.saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


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


def _optimizer_step(recorder: _Recorder, step: Callable, on_step: Callable) -> Callable:
    def recording_step(self: Any, grads: Any, *args: Any, **kwargs: Any) -> Any:
        if not recorder.active():
            return step(self, grads, *args, **kwargs)
        return on_step(self, lambda watched: step(self, watched, *args, **kwargs), grads)

    recording_step.__wrapped__ = step  # type: ignore[attr-defined]
    return recording_step


class _WatchedGradients(Gradients):
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


# -- state --------------------------------------------------------------------------------
class _State:
    """The parameters of the modules in ``state``, by module and dotted name."""

    def __init__(self, items: Iterable[Any]):
        self.modules: list[Any] = []
        self.optimizers: list[Any] = []
        for item in items:
            if isinstance(item, Optimizer):
                self.optimizers.append(item)
                module = getattr(item, "module", None)
                if module is not None and hasattr(module, "named_parameters"):
                    self._add_module(module)
            elif hasattr(item, "named_parameters"):
                self._add_module(item)
            else:
                raise CaptureError(
                    f"capture: state must list modules and optimizers, got {type(item).__name__}"
                )
        self.names = [self._names(module) for module in self.modules]
        self.modes = self._modes()

    def _modes(self) -> tuple:
        """Each sub-module's ``training`` flag: dropout and normalisation branch on it in
        Python, so the captured program is specialised to the modes at capture."""
        return tuple(
            (name, getattr(sub, "training", None))
            for module in self.modules
            for name, sub in module.named_modules()
        )

    def check_modes(self) -> None:
        modes = self._modes()
        if modes != self.modes:
            changed = [name or "(root)" for (name, a), (_, b) in zip(modes, self.modes) if a != b]
            raise CaptureError(
                "captured step: train()/eval() mode changed since capture (in "
                f"{changed or 'the module tree'}); the step was captured in the modes it had "
                "then: capture it again for the other mode"
            )

    def _add_module(self, module: Any) -> None:
        if not any(module is known for known in self.modules):
            self.modules.append(module)

    @staticmethod
    def _names(module: Any) -> tuple[str, ...]:
        return tuple(name for name, _ in module.named_parameters())

    def entries(self) -> list[tuple[Any, str, Tensor]]:
        """``(module, name, tensor)`` for every parameter, each tensor once (weight tying)."""
        out, seen = [], set()
        for module, names in zip(self.modules, self.names):
            parameters = dict(module.named_parameters())
            if tuple(parameters) != names:
                raise CaptureError(
                    f"capture: the parameters of {type(module).__name__} changed since the "
                    f"step was captured: {list(names)} then, {list(parameters)} now"
                )
            for name in names:
                tensor = parameters[name]
                if id(tensor) not in seen:
                    seen.add(id(tensor))
                    out.append((module, name, tensor))
        return out


# -- the compiled program ---------------------------------------------------------------------
class _Segment:
    """A run of recorded calls, compiled into one Python function of its input slots."""

    def __init__(self, calls: list[tuple], ins: list[int], outs: list[int], last: dict, index):
        self.ins, self.outs, self.calls = ins, outs, calls
        self.random = any(call[2] in _RANDOM for call in calls)
        namespace: dict[str, Any] = {}
        lines = [f"def segment_{index}({', '.join(f'v{s}' for s in ins)}):"]
        keep = set(outs)
        for position, (_, function, name, args, kwargs, call_outs) in enumerate(calls):
            fname = f"{name}_{position}"
            namespace[fname] = function
            rendered = [_render(arg, namespace) for arg in args]
            rendered += [f"{key}={_render(value, namespace)}" for key, value in kwargs.items()]
            call = f"{fname}({', '.join(rendered)})"
            if call_outs is None:
                lines.append(f"    {call}")
                targets: tuple = ()
            elif type(call_outs) is tuple:
                targets = call_outs
                names = ", ".join(f"v{s}" for s in targets)
                comma = "," if len(targets) == 1 else ""
                lines.append(f"    {names}{comma} = {call}" if targets else f"    {call}")
            else:
                targets = (call_outs,)
                lines.append(f"    v{call_outs} = {call}")
            # values read for the last time here, and outputs nothing reads
            dead = [s for s in _slots_of(args, kwargs) if last.get(s) == position and s not in keep]
            dead += [s for s in targets if s not in last and s not in keep]
            dead = sorted(set(dead))
            if dead:
                lines.append(f"    del {', '.join(f'v{s}' for s in dead)}")
        lines.append(f"    return ({''.join(f'v{s}, ' for s in outs)})")
        self.source = "\n".join(lines)
        exec(compile(self.source, f"<captured segment {index}>", "exec"), namespace)
        self.function = namespace[f"segment_{index}"]
        self.run = self.function


def _render(encoded: tuple, namespace: dict) -> str:
    kind, payload = encoded
    if kind == "s":
        return f"v{payload}"
    if kind == "c":
        name = f"c{len(namespace)}"
        namespace[name] = payload
        return name
    items = ", ".join(_render(item, namespace) for item in payload)
    return f"[{items}]" if kind == "l" else f"({items}{',' if len(payload) == 1 else ''})"


def _slots_of(args: list, kwargs: dict) -> list[int]:
    found: list[int] = []
    stack = [*args, *kwargs.values()]
    while stack:
        kind, payload = stack.pop()
        if kind == "s":
            found.append(payload)
        elif kind in ("l", "t"):
            stack.extend(payload)
    return found


class _OptimizerCall:
    """An optimizer step at replay: the replayed gradients handed to ``optimizer.step``."""

    def __init__(self, optimizer: Any, grad_slots: list[tuple[int, tuple]], outs: list[int]):
        self.optimizer = optimizer
        self.grad_slots = grad_slots  # (state index, encoded gradient)
        self.ins = [encoded[1] for _, encoded in grad_slots if encoded[0] == "s"]
        self.outs = outs  # the state values after the step, one per state entry


class _CudaGraphSegment:
    """A segment replayed through a CUDA graph (torch's public ``torch.cuda.graph`` API).

    The first call copies its inputs into static buffers, runs the segment a few times on a
    side stream (allocations and lazy initialisation happen outside the capture, as torch
    requires), captures one run into a ``CUDAGraph``, and replays it; later calls copy new
    inputs into the static buffers and replay. Outputs are cloned, since the next replay
    overwrites the graph's output buffers. Only used when every input is a torch CUDA tensor
    and the segment draws no random numbers (warm-up runs would consume them).
    """

    warmup = 3

    def __init__(self, segment: _Segment):
        self.segment = segment
        self.ins, self.outs, self.calls = segment.ins, segment.outs, segment.calls
        self.graph = None
        self.static: list = []
        self.outputs: tuple = ()

    def run(self, *args: Any) -> tuple:
        import torch  # only here: torch is an optional dependency

        if self.graph is None:
            self.static = [arg.clone() for arg in args]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(self.warmup):
                    self.segment.function(*self.static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                self.outputs = self.segment.function(*self.static)
            self.graph = graph
        for buffer, arg in zip(self.static, args):
            buffer.copy_(arg)
        self.graph.replay()
        return tuple(output.clone() for output in self.outputs)


def _is_torch_cuda(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and getattr(value, "is_cuda", 0) is True


# -- the public API ---------------------------------------------------------------------------
class CapturedStep:
    """A recorded training step; call it with new inputs to replay it.

    ``result`` is what ``step_fn`` returned when it ran during capture (the first step's loss).
    ``code`` is the compiled program, ``num_calls`` the number of recorded inner calls, and
    ``cuda_graph`` whether segments replay through CUDA graphs.
    """

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)

    @property
    def code(self) -> str:
        parts = []
        for item in self._items:
            if isinstance(item, _OptimizerCall):
                grads = ", ".join(f"v{slot}" for slot in item.ins)
                parts.append(
                    f"# {type(item.optimizer).__name__}.step(gradients {grads}), called as in "
                    "eager code; then the parameters are read again"
                )
            else:
                segment = item.segment if isinstance(item, _CudaGraphSegment) else item
                graph = "# replayed through a CUDA graph\n" if segment is not item else ""
                parts.append(graph + segment.source)
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        return (
            f"CapturedStep({getattr(self._fn, '__name__', 'step')}, {self.num_calls} calls, "
            f"inputs {[spec[1] for spec in self._input_specs if spec[0] == 't']})"
        )

    def _input_values(self, inputs: tuple) -> list:
        specs = self._input_specs
        if len(inputs) != len(specs):
            raise CaptureError(
                f"captured step: expected {len(specs)} inputs as at capture, got {len(inputs)}"
            )
        values = []
        for index, (spec, given) in enumerate(zip(specs, inputs)):
            if spec[0] == "t":
                _, shape, dtype, backend = spec
                if not isinstance(given, Tensor):
                    raise CaptureError(
                        f"captured step: input {index} was a Tensor of shape {list(shape)} "
                        f"{dtype} at capture, got {type(given).__name__}"
                    )
                if given.shape != shape or given.dtype != dtype or given.backend != backend:
                    raise CaptureError(
                        f"captured step: input {index} has shape {list(given.shape)} "
                        f"{given.dtype} on {given.backend.name}, but the step was captured with "
                        f"shape {list(shape)} {dtype} on {backend.name}; capture the step again "
                        "for other shapes"
                    )
                values.append(_inner_value(given))
            elif not (type(given) is type(spec[1]) and given == spec[1]):
                raise CaptureError(
                    f"captured step: non-tensor input {index} was {spec[1]!r} at capture, got "
                    f"{given!r}; it is a constant of the captured step (pass a Tensor instead)"
                )
        return values

    def __call__(self, *inputs: Any) -> Any:
        values = self._input_values(inputs)
        self._state.check_modes()
        entries = self._state.entries()
        if len(entries) != len(self._state_specs):
            raise CaptureError("captured step: the number of state parameters changed")
        env: dict[int, Any] = dict(zip(self._input_slots, values))
        for slot, (_, name, tensor), spec in zip(self._state_slots, entries, self._state_specs):
            if slot is None:
                continue
            if (tensor.shape, tensor.dtype) != spec:
                raise CaptureError(
                    f"captured step: parameter {name!r} has shape {list(tensor.shape)} "
                    f"{tensor.dtype}, but {list(spec[0])} {spec[1]} at capture"
                )
            env[slot] = _inner_value(tensor)
        last = self._last_item
        for position, item in enumerate(self._items):
            args = [env.pop(slot) if last[slot] == position else env[slot] for slot in item.ins]
            if isinstance(item, _OptimizerCall):
                outs = self._run_optimizer(item, args)
            else:
                outs = item.run(*args)
            for slot, value in zip(item.outs, outs):
                if slot is not None:
                    env[slot] = value
        backend = self._backend
        for index, encoded in self._write_back:
            module, name, tensor = entries[index]
            value = env[encoded[1]] if encoded[0] == "s" else encoded[1]
            module.set_parameter(name, Tensor(backend.wrap(value), backend, tensor.device))
        return _decode_result(self._result, env)

    def _run_optimizer(self, item: _OptimizerCall, args: list) -> list:
        backend = self._backend
        entries = self._state.entries()
        grads = Gradients(backend.inner)
        values = iter(args)
        for index, encoded in item.grad_slots:
            value = next(values) if encoded[0] == "s" else encoded[1]
            backend.grad_replace(entries[index][2].primitive, grads, value)
        item.optimizer.step(grads)
        return [_inner_value(tensor) for _, _, tensor in self._state.entries()]


def capture(
    step_fn: Callable[..., Any],
    *example_inputs: Any,
    state: Iterable[Any] = (),
    cuda_graph: bool | str = "auto",
) -> CapturedStep:
    """Run ``step_fn(*example_inputs)`` once, recording it; return a replayable step.

    ``step_fn`` is one whole training step (forward, ``backward()``, optimizer step) on tensors
    of an autodiff backend; ``example_inputs`` are its tensors (the first batch: this call
    trains on it) and hashable constants. ``state`` lists the modules and optimizers it trains
    (an optimizer brings its module). ``cuda_graph``: ``"auto"`` replays through CUDA graphs
    when every recorded value is a torch CUDA tensor, ``False`` never, ``True`` requires it.

    >>> import retrograd as rg
    >>> from retrograd import nn, optim
    >>> model = nn.Linear(3, 1)
    >>> opt = optim.SGD(model, lr=0.1)
    >>> def train_step(x):
    ...     loss = model(x).square().mean()
    ...     opt.step(loss.backward())
    ...     return loss
    >>> step = rg.capture(train_step, rg.ones((4, 3)), state=[opt])
    >>> step(rg.zeros((4, 3))).shape
    ()
    """
    if not callable(step_fn):
        raise CaptureError(f"capture: step_fn must be callable, got {type(step_fn).__name__}")
    if cuda_graph not in (True, False, "auto"):
        raise CaptureError(f"capture: cuda_graph must be True, False or 'auto', got {cuda_graph!r}")
    state = _State(state)
    entries = state.entries()
    tensors = [x for x in example_inputs if isinstance(x, Tensor)] + [t for _, _, t in entries]
    backend = next((t.backend for t in tensors if t.backend.is_autodiff), None)
    if backend is None:
        raise CaptureError(
            "capture: neither the inputs nor the state hold a tensor of an autodiff backend; "
            "a training step needs one"
        )
    for _, name, tensor in entries:
        if tensor.backend != backend:
            raise CaptureError(
                f"capture: parameter {name!r} is on {tensor.backend.name}, the step on "
                f"{backend.name}; a step runs on one backend"
            )
        if tensor.is_distributed():
            raise CaptureError(
                f"capture: parameter {name!r} is distributed; its gradient all-reduce is not an "
                "inner-backend call and cannot be captured"
            )

    recorder = _Recorder()
    input_specs, input_slots = [], []
    for index, x in enumerate(example_inputs):
        if isinstance(x, Tensor):
            if x.backend.is_autodiff and x.backend.is_tracked(x.primitive):
                raise CaptureError(
                    f"capture: input {index} (shape {list(x.shape)}) is tracked by autodiff; "
                    "inputs of a captured step are data, not leaves that require grad"
                )
            input_specs.append(("t", x.shape, x.dtype, x.backend))
            input_slots.append(recorder.new_slot(_inner_value(x)))
        elif isinstance(x, (bool, int, float, str, type(None))):
            input_specs.append(("c", x))
        else:
            raise CaptureError(
                f"capture: input {index} is a {type(x).__name__}; pass Tensors (the step's "
                "data) and hashable constants (ints, floats, strings)"
            )
    state_slots = [recorder.new_slot(_inner_value(t)) for _, _, t in entries]
    loaded = list(state_slots)  # the slot each state entry's current value is in

    def on_step(optimizer: Any, run: Callable[[], Any], grads: Any) -> Any:
        if not any(optimizer is known for known in state.optimizers):
            raise CaptureError(
                f"capture: {type(optimizer).__name__}.step ran inside the step but the optimizer "
                "is not listed in state=; list it, so that a replay calls it on the replayed "
                "gradients (its step count and bias corrections change every step)"
            )
        grad_slots, own = [], []
        for index, (_, _, tensor) in enumerate(state.entries()):
            value = backend.grad(tensor.primitive, grads)
            if value is not None:
                own.append(value)
                grad_slots.append((index, recorder.encode(value)))
        watched = _WatchedGradients(grads)
        recorder.paused = True
        try:
            out = run(watched)
        finally:
            recorder.paused = False
        # A gradient the optimizer read that no state parameter has: it moved a parameter of a
        # module not listed, which the replayed forward would go on reading as a constant.
        outside = [v for v in watched.read if not any(v is value for value in own)]
        if outside:
            raise CaptureError(
                f"capture: {type(optimizer).__name__}.step read the gradients of "
                f"{len(outside)} parameter(s) of no module in state=; list every module the "
                "step trains"
            )
        now = state.entries()
        outs = [recorder.new_slot(_inner_value(tensor)) for _, _, tensor in now]
        loaded[:] = outs
        recorder.steps.append(("optimizer", optimizer, grad_slots, outs))
        return out

    inners = []
    for candidate in [t.backend for t in tensors] + [current_backend()]:
        inner = candidate.inner if candidate.is_autodiff else candidate
        if not any(inner is known for known in inners):
            inners.append(inner)
    with _Patches(recorder, inners, on_step):
        result = step_fn(*example_inputs)

    write_back = []
    final = state.entries()
    if len(final) != len(entries):
        raise CaptureError("capture: the step changed the number of the model's parameters")
    for index, (_, _, tensor) in enumerate(final):
        value = _inner_value(tensor)
        if recorder.slot(value) != loaded[index]:
            write_back.append((index, recorder.encode(value)))
    encoded_result = _encode_result(result, recorder)
    program = _compile(recorder, write_back, encoded_result, cuda_graph)
    items, last_item = program
    return CapturedStep(
        _fn=step_fn,
        _backend=backend,
        _state=state,
        _input_specs=input_specs,
        _input_slots=input_slots,
        _state_slots=state_slots,
        _state_specs=[(t.shape, t.dtype) for _, _, t in entries],
        _items=items,
        _last_item=last_item,
        _write_back=write_back,
        _result=encoded_result,
        result=result,
        num_calls=sum(1 for step in recorder.steps if step[0] == "call"),
        cuda_graph=any(isinstance(item, _CudaGraphSegment) for item in items),
    )


def _inner_value(tensor: Tensor) -> Any:
    backend = tensor.backend
    return backend.inner_value(tensor.primitive) if backend.is_autodiff else tensor.primitive


def _encode_result(result: Any, recorder: _Recorder) -> tuple:
    if isinstance(result, Tensor):
        value = _inner_value(result)
        backend = result.backend
        return ("tensor", recorder.encode(value), backend, result.device)
    if type(result) in (list, tuple):
        return ("seq", type(result), [_encode_result(item, recorder) for item in result])
    if type(result) is dict:
        return ("dict", {key: _encode_result(item, recorder) for key, item in result.items()})
    if isinstance(result, (bool, int, float, str, type(None))):
        return ("const", result)
    raise CaptureError(
        f"capture: the step returned a {type(result).__name__}; return Tensors, tuples, lists "
        "or dicts of them, or plain constants"
    )


def _result_slots(encoded: tuple) -> list[int]:
    kind = encoded[0]
    if kind == "tensor":
        return [encoded[1][1]] if encoded[1][0] == "s" else []
    if kind == "seq":
        return [slot for item in encoded[2] for slot in _result_slots(item)]
    if kind == "dict":
        return [slot for item in encoded[1].values() for slot in _result_slots(item)]
    return []


def _decode_result(encoded: tuple, env: dict) -> Any:
    kind = encoded[0]
    if kind == "tensor":
        _, (where, payload), backend, device = encoded
        value = env[payload] if where == "s" else payload
        primitive = backend.wrap(value) if backend.is_autodiff else value
        return Tensor(primitive, backend, device)
    if kind == "seq":
        return encoded[1](_decode_result(item, env) for item in encoded[2])
    if kind == "dict":
        return {key: _decode_result(item, env) for key, item in encoded[1].items()}
    return encoded[1]


def _compile(recorder: _Recorder, write_back: list, result: tuple, cuda_graph: bool | str):
    """Split the recording at optimizer steps into segments, compile each, and work out at
    which item every slot is used for the last time (the driver hands a value over there)."""
    groups: list[Any] = []  # lists of calls, and optimizer steps
    for step in recorder.steps:
        if step[0] == "call":
            if not groups or not isinstance(groups[-1], list):
                groups.append([])
            groups[-1].append(step)
        else:
            _, optimizer, grad_slots, outs = step
            groups.append(_OptimizerCall(optimizer, grad_slots, outs))
    end = len(groups)
    # Where each slot is used last: (group, call position within a segment).
    last_group: dict[int, int] = {}
    last_call: dict[int, int] = {}
    for g, group in enumerate(groups):
        if isinstance(group, _OptimizerCall):
            for slot in group.ins:
                last_group[slot] = g
            continue
        for position, (_, _, _, args, kwargs, _) in enumerate(group):
            for slot in _slots_of(args, kwargs):
                last_group[slot] = g
                last_call[(g, slot)] = position
    for _, encoded in write_back:
        if encoded[0] == "s":
            last_group[encoded[1]] = end
    for slot in _result_slots(result):
        last_group[slot] = end
    produced: dict[int, int] = {}  # slot -> group that makes it
    for g, group in enumerate(groups):
        if isinstance(group, _OptimizerCall):
            for slot in group.outs:
                produced[slot] = g
        else:
            for call in group:
                outs = call[5]
                for slot in outs if type(outs) is tuple else () if outs is None else (outs,):
                    produced[slot] = g
    items: list[Any] = []
    for g, group in enumerate(groups):
        if isinstance(group, _OptimizerCall):
            group.outs = [slot if slot in last_group else None for slot in group.outs]
            items.append(group)
            continue
        used = {slot for call in group for slot in _slots_of(call[3], call[4])}
        ins = sorted(slot for slot in used if produced.get(slot, -1) < g)
        outs = sorted(
            slot for slot, p in produced.items() if p == g and last_group.get(slot, -1) > g
        )
        last = {slot: last_call[(g, slot)] for slot in used if last_group[slot] == g}
        segment = _Segment(group, ins, outs, last, len(items))
        on_cuda = bool(ins) and all(recorder.on_cuda[s] for s in ins)
        if cuda_graph is True and not on_cuda:
            raise CaptureError(
                "capture: cuda_graph=True, but the step's values are not torch CUDA tensors "
                "(CUDA graphs need an inner backend on a CUDA device)"
            )
        use_graph = bool(cuda_graph) and on_cuda
        if use_graph and segment.random:
            if cuda_graph is True:
                raise CaptureError(
                    "capture: cuda_graph=True, but the step draws random numbers (dropout, "
                    "rg.random), which CUDA-graph warm-up runs would consume"
                )
            use_graph = False
        items.append(_CudaGraphSegment(segment) if use_graph else segment)
    last_item = {slot: g for slot, g in last_group.items()}
    return items, last_item
