"""Step capture: record one training step as the inner-backend calls it makes, then replay them.

``step = rg.capture(step_fn, *example_inputs, state=[optimizer])`` runs
``step_fn(*example_inputs)`` once, eagerly and for real (it *is* a training step), while every
call that reaches the inner backend is recorded: the autodiff decorator, the backward pass, the
checkpointer's recomputations and any tensor code of the step all end in such calls, so their
list, with each argument resolved to an earlier call's output, an input, a piece of state or a
constant, *is* the step. ``step(*inputs)`` then replays that list on new inputs of the same
shapes and dtypes, without running the step's Python, building a graph or walking a tape.

The package, in the order the work happens:

- :mod:`.recording`: the wrappers over the inner backend and ``Optimizer.step`` that record
  the calls, and the refusals (host reads; :class:`CaptureError`);
- :mod:`.state`: the parameters the step trains, from the modules and optimizers listed in
  ``state`` (an optimizer over parameter groups needs no module);
- :mod:`.program`: the recording split at optimizer steps into segments compiled to
  straight-line Python (a ``del`` after each value's last use), or CUDA graphs on torch CUDA
  tensors; :mod:`.slices`, :mod:`.norm`, :mod:`.linear` and :mod:`.squares` first run a few
  patterns of calls as one (a split's backward, a layer norm's backward with the residual
  add, a linear layer with its GELU or residual add, a gradient norm's sum of squares; the
  calls' bits), then :mod:`.fusion` and :mod:`.kernels`
  group chains of elementwise NumPy calls into compiled kernels (bit-identical by default;
  ``fuse="fast"`` also fuses transcendentals);
- :mod:`.replay`: :class:`CapturedStep`, which checks inputs and state, runs the program,
  calls the optimizers on the replayed gradients, and writes back what the step replaced.

The optimizer's ``step(grads)`` is not replayed from the recording but called, as eager code
calls it: its step counts, bias corrections and the learning rates a schedule sets in
``param_groups`` between steps change every step. docs/capture.md has the whole story.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ..context import captured_writes, current_backend
from ..tensor import Tensor
from .program import CudaGraphSegment, compile_program
from .recording import CaptureError, Patches, Recorder, WatchedGradients
from .replay import (
    MAX_PROGRAMS,
    CapturedStep,
    backend_labels,
    inner_value,
    raw_spec,
    refuse_tracked,
)
from .state import State

__all__ = ["MAX_PROGRAMS", "CaptureError", "CapturedStep", "capture"]


def capture(
    step_fn: Callable[..., Any],
    *example_inputs: Any,
    state: Iterable[Any] = (),
    cuda_graph: bool | str = "auto",
    fuse: bool | str = True,
    recapture: bool = True,
) -> CapturedStep:
    """Run ``step_fn(*example_inputs)`` once, recording it; return a replayable step.

    ``step_fn`` is one whole training step (forward, ``backward()``, optimizer step) on tensors
    of an autodiff backend; ``example_inputs`` are its tensors (the first batch: this call
    trains on it) and hashable constants. ``state`` lists the modules and optimizers it trains
    (an optimizer brings its module, or its parameter groups' parameters). ``cuda_graph``:
    ``"auto"`` replays through CUDA graphs when every recorded value is a torch CUDA tensor,
    ``False`` never, ``True`` requires it. ``fuse``: ``True`` groups chains of elementwise
    NumPy calls into fused kernels that compute bit for bit what the calls did; ``"fast"``
    also fuses transcendental functions (exp, log, sin, tanh, GELU...), whose compiled
    versions may differ from NumPy's in the last bit (docs/capture.md states the tolerance);
    ``False`` replays every call as recorded. ``recapture``: a call whose inputs differ in
    shape, dtype or backend, or in a non-tensor argument's value, or made after a module the
    step calls switched between ``train()`` and ``eval()``, captures the step again for them
    (that call runs the step eagerly, as the first did) and keeps each program, as
    ``jax.jit`` retraces; past :data:`MAX_PROGRAMS` programs such calls run the step eagerly,
    with a warning. ``False`` refuses them with :class:`CaptureError` instead.

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
    retrograd.Size([])
    """
    if not callable(step_fn):
        raise CaptureError(f"capture: step_fn must be callable, got {type(step_fn).__name__}")
    if cuda_graph not in (True, False, "auto"):
        raise CaptureError(f"capture: cuda_graph must be True, False or 'auto', got {cuda_graph!r}")
    if fuse not in (True, False, "fast"):
        raise CaptureError(f"capture: fuse must be True, False or 'fast', got {fuse!r}")
    state = list(state)
    again = None
    if recapture:

        def again(*inputs: Any) -> CapturedStep:
            return capture(
                step_fn, *inputs, state=state, cuda_graph=cuda_graph, fuse=fuse, recapture=False
            )

    step = _capture_one(step_fn, example_inputs, State(state), cuda_graph, fuse)
    step._recapture = again
    return step


def _capture_one(
    step_fn: Callable[..., Any],
    example_inputs: tuple,
    state: State,
    cuda_graph: bool | str,
    fuse: bool | str,
) -> CapturedStep:
    """One program: ``step_fn`` run on ``example_inputs`` and recorded."""
    entries = state.entries()
    tensors = [x for x in example_inputs if isinstance(x, Tensor)] + [t for _, _, t in entries]
    state.note_trained(entries)
    backend = _step_backend(tensors, entries)
    recorder = Recorder()
    input_specs, input_slots = _record_inputs(example_inputs, recorder)
    state_slots = [recorder.new_slot(inner_value(t)) for _, _, t in entries]
    loaded = list(state_slots)  # the slot each state entry's current value is in
    on_step = _optimizer_recorder(state, backend, recorder, loaded)
    inners = []
    for candidate in [t.backend for t in tensors] + [current_backend()]:
        inner = candidate.inner if candidate.is_autodiff else candidate
        if not any(inner is known for known in inners):
            inners.append(inner)
    writes: list = []
    token = captured_writes.set(writes)
    try:
        with Patches(recorder, inners, on_step) as patches:
            result = step_fn(*example_inputs)
    finally:
        captured_writes.reset(token)
    state.calls(patches.modules)
    state.closed_over = _closed_over(recorder)
    for module, name, _, value in state.unlisted_buffers:
        if recorder.slot(value) is not None:
            raise CaptureError(
                f"capture: the step updates buffer {name!r} of a {type(module).__name__} (a "
                "batch norm's running statistics, say) in no module listed in state: a replay "
                "would leave it as it is; list the model in state"
            )
    _refuse_outside_writes(writes, recorder, backend, state)

    write_back = []
    final = state.entries()
    if len(final) != len(entries):
        raise CaptureError("capture: the step changed the number of the model's parameters")
    for index, (_, _, tensor) in enumerate(final):
        value = inner_value(tensor)
        if recorder.slot(value) != loaded[index]:
            write_back.append((index, recorder.encode(value)))
    encoded_result = _encode_result(result, recorder)
    live_at_end = [encoded[1] for _, encoded in write_back if encoded[0] == "s"]
    live_at_end += _result_slots(encoded_result)
    items, last_item, fused = compile_program(recorder, live_at_end, cuda_graph, fuse)
    return CapturedStep(
        _fn=step_fn,
        _backend=backend,
        _state=state,
        _input_specs=input_specs,
        _input_slots=input_slots,
        _state_slots=state_slots,
        _state_specs=[(t.shape, t.dtype) for _, _, t in entries],
        _state_raw_specs=[raw_spec(inner_value(t)) for _, _, t in entries],
        _items=items,
        _last_item=last_item,
        _write_back=write_back,
        _result=encoded_result,
        result=result,
        num_calls=sum(1 for step in recorder.steps if step[0] == "call"),
        num_fused=fused,
        cuda_graph=any(isinstance(item, CudaGraphSegment) for item in items),
    )


def _refuse_outside_writes(writes: list, recorder: Recorder, backend: Any, state: State) -> None:
    """Refuse a step that wrote in place to a tensor made before it (its value then was no
    input, parameter or value of the step) outside the state: a replay computes the new value
    but never gives it to that tensor."""
    listed = {id(tensor) for _, _, tensor in state.entries()}
    for tensor, before in writes:
        if id(tensor) in listed or getattr(tensor, "_backend", None) is not backend:
            continue
        value = backend.inner_value(before) if backend.is_autodiff else before
        if recorder.slot(value) is None:
            raise CaptureError(
                f"capture: the step writes in place to a tensor of shape {list(tensor.shape)} "
                "made before it and in no module listed in state: a replay would leave it as it "
                "is; make it a buffer of a listed module, or return the new value"
            )


def _closed_over(recorder: Recorder) -> list[tuple[Callable[[], Any], Any]]:
    """The tensors made before the step whose values the program reads as constants (closed
    over by the step: a mask, a frozen embedding of a module not listed), each as a weak
    reference with the inner value it held. A replay compares them, so that one written in
    place since capture (which gives the tensor a new inner value) makes the call capture
    again instead of replaying the old value. The recording holds only the values, so their
    owners are found by who refers to them (an inner value is held by the autodiff backend's
    primitive, held by the tensor): two walks of the heap, at capture and only when the
    program reads such constants."""
    values: dict[int, Any] = {}
    for step in recorder.steps:
        if step[0] == "call":
            for encoded in (*step[3], *step[4].values()):
                _collect_arrays(encoded, values)
    if not values:
        return []
    holders = gc.get_referrers(*values.values())
    tensors = [h for h in holders if isinstance(h, Tensor)]
    wrappers = [
        h
        for h in holders
        if not isinstance(h, (Tensor, dict, list, tuple)) and not hasattr(h, "dtype")
    ]
    if wrappers:
        tensors += [h for h in gc.get_referrers(*wrappers) if isinstance(h, Tensor)]
    found, seen = [], set()
    for tensor in tensors:
        value = inner_value(tensor)
        if id(value) in values and id(tensor) not in seen:
            seen.add(id(tensor))
            found.append((weakref.ref(tensor), value))
    return found


def _collect_arrays(encoded: tuple, values: dict[int, Any]) -> None:
    """Add the arrays among the constants of ``encoded`` (an argument as the recorder encodes
    it) to ``values``, by id. (A function of the module: a nested recursive one would be a
    reference cycle, left to the garbage collector.)"""
    kind, payload = encoded
    if kind == "c":
        if hasattr(payload, "dtype") and hasattr(payload, "shape"):
            values.setdefault(id(payload), payload)
    elif kind in ("l", "t"):
        for item in payload:
            _collect_arrays(item, values)


def _step_backend(tensors: list[Tensor], entries: list) -> Any:
    """The autodiff backend the step runs on; every parameter must be on it, undistributed."""
    backend = next((t.backend for t in tensors if t.backend.is_autodiff), None)
    if backend is None:
        raise CaptureError(
            "capture: neither the inputs nor the state hold a tensor of an autodiff backend; "
            "a training step needs one"
        )
    for _, name, tensor in entries:
        if tensor.backend != backend:
            on_parameter, on_step = backend_labels(tensor.backend, backend)
            raise CaptureError(
                f"capture: parameter {name!r} is on {on_parameter}, the step on {on_step}; a "
                "step runs on one backend"
            )
        if tensor.is_distributed():
            raise CaptureError(
                f"capture: parameter {name!r} is distributed; its gradient all-reduce is not an "
                "inner-backend call and cannot be captured"
            )
    return backend


def _record_inputs(example_inputs: tuple, recorder: Recorder) -> tuple[list, list]:
    """Each input's spec (checked at every replay) and, for tensors, its slot."""
    input_specs, input_slots = [], []
    for index, x in enumerate(example_inputs):
        if isinstance(x, Tensor):
            refuse_tracked(x, index, "capture")
            input_specs.append(("t", x.shape, x.dtype, x.backend, raw_spec(inner_value(x))))
            input_slots.append(recorder.new_slot(inner_value(x)))
        elif isinstance(x, (bool, int, float, str, type(None))):
            input_specs.append(("c", x))
        else:
            raise CaptureError(
                f"capture: input {index} is a {type(x).__name__}; pass Tensors (the step's "
                "data) and hashable constants (ints, floats, strings)"
            )
    return input_specs, input_slots


def _optimizer_recorder(state: State, backend: Any, recorder: Recorder, loaded: list) -> Callable:
    """What ``Optimizer.step`` does while recording: note which slot holds each parameter's
    gradient, let the optimizer run unrecorded, and give the parameters' new values slots."""

    def on_step(optimizer: Any, run: Callable[[Any], Any], grads: Any) -> Any:
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
        watched = WatchedGradients(grads)
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
        parameters = [tensor for _, _, tensor in state.entries()]
        # (a buffer is no optimizer's: it keeps the slot of the value the step gave it)
        buffers = {id(tensor) for tensor in state.buffers()}
        outs = [
            None if id(tensor) in buffers else recorder.new_slot(inner_value(tensor))
            for tensor in parameters
        ]
        loaded[:] = [old if out is None else out for old, out in zip(loaded, outs)]
        recorder.steps.append(("optimizer", optimizer, grad_slots, outs, parameters))
        return out

    return on_step


def _encode_result(result: Any, recorder: Recorder) -> tuple:
    if isinstance(result, Tensor):
        value = inner_value(result)
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
