"""Replaying a captured step: :class:`CapturedStep`.

A replay checks its inputs against the capture's (shapes, dtypes, backends, the values of
non-tensor arguments) and the state against the captured one (parameter names, shapes and
dtypes, train/eval modes) before anything runs, so a refused replay changes nothing. It then
loads the inputs and the parameters' current values into the program's slots, runs the
program's items in order (compiled segments, and optimizer steps called as eager code calls
them, on the replayed gradients), writes back parameters the step replaced itself, and
returns the step's result with the replayed values.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..autodiff import Gradients
from ..tensor import Tensor
from .program import CudaGraphSegment, OptimizerCall
from .recording import CaptureError
from .state import inner_value, write_back

__all__ = ["MAX_PROGRAMS", "CapturedStep", "decode_result", "inner_value", "raw_spec"]

#: The programs a step keeps, one per input signature and mode (``torch.compile``'s default
#: cache limit too): a loop whose shapes change every step would otherwise record and compile
#: every step, slower than running it eagerly.
MAX_PROGRAMS = 8


class CapturedStep:
    """A recorded training step; call it with new inputs to replay it.

    ``result`` is what ``step_fn`` returned when it ran during capture (the first step's loss).
    ``code`` is the compiled program, ``num_calls`` the number of recorded inner calls,
    ``num_fused`` the number of fused elementwise kernels they were grouped into, and
    ``cuda_graph`` whether segments replay through CUDA graphs. These describe the program of
    the first capture; ``programs`` counts all kept (``capture(..., recapture=True)``: one per
    input signature and train/eval mode met).
    """

    _recapture = None  # the step captured again for other inputs (None: refuse them)

    def __init__(self, **fields: Any):
        self.__dict__.update(fields)
        self._others: list[CapturedStep] = []  # the programs captured again, newest last
        self._warned = False

    @property
    def programs(self) -> int:
        return 1 + len(self._others)

    @property
    def code(self) -> str:
        parts = []
        for item in self._items:
            if isinstance(item, OptimizerCall):
                grads = ", ".join(f"v{slot}" for slot in item.ins)
                parts.append(
                    f"# {type(item.optimizer).__name__}.step(gradients {grads}), called as in "
                    "eager code; then the parameters are read again"
                )
            else:
                segment = item.segment if isinstance(item, CudaGraphSegment) else item
                graph = "# replayed through a CUDA graph\n" if segment is not item else ""
                parts.append(graph + segment.source)
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        return (
            f"CapturedStep({getattr(self._fn, '__name__', 'step')}, {self.num_calls} calls, "
            f"inputs {[spec[1] for spec in self._input_specs if spec[0] == 't']})"
        )

    def _mismatch(self, inputs: tuple) -> str | None:
        """Why this program cannot replay ``inputs`` in the modules' current modes, where
        capturing the step again for them could (other shapes, dtypes, backends, constants or
        modes); ``None`` when it can. A tensor given for a constant, or the reverse, raises."""
        specs = self._input_specs
        if len(inputs) != len(specs):
            return f"expected {len(specs)} inputs as at capture, got {len(inputs)}"
        for index, (spec, given) in enumerate(zip(specs, inputs)):
            if spec[0] == "t":
                _, shape, dtype, backend, raw = spec
                if isinstance(given, Tensor) and given._backend is backend:
                    value = given._prim
                    if backend.is_autodiff and backend.is_tracked(value):
                        refuse_tracked(given, index, "captured step")
                    if (
                        raw_spec(backend.inner_value(value) if backend.is_autodiff else value)
                        == raw
                    ):
                        continue  # what the inner value says (cheaper than the tensor's dtype)
                if not isinstance(given, Tensor):
                    raise CaptureError(
                        f"captured step: input {index} was a Tensor of shape {list(shape)} "
                        f"{dtype} at capture, got {type(given).__name__}"
                    )
                if given.shape != shape or given.dtype != dtype or given.backend != backend:
                    on_given, on_captured = backend_labels(given.backend, backend)
                    return (
                        f"input {index} has shape {list(given.shape)} {given.dtype} on "
                        f"{on_given}, but the step was captured with shape "
                        f"{list(shape)} {dtype} on {on_captured}"
                    )
            elif isinstance(given, Tensor):
                raise CaptureError(
                    f"captured step: non-tensor input {index} was {spec[1]!r} at capture, got a "
                    "Tensor; a constant of the captured step stays a constant"
                )
            elif not (type(given) is type(spec[1]) and given == spec[1]):
                return (
                    f"non-tensor input {index} was {spec[1]!r} at capture, got {given!r} (a "
                    "constant of the captured step)"
                )
        state = self._state
        return (
            state.mode_change()
            or state.parameter_change()
            or state.buffer_change()
            or state.constant_change()
            or state.freeze_change()
        )

    def _program_for(self, inputs: tuple) -> CapturedStep | None:
        """The kept program that replays ``inputs``; ``None`` to capture one; raises where
        none may be captured."""
        reason = self._mismatch(inputs)
        if reason is None:
            return self
        for index, other in enumerate(self._others):
            if other._mismatch(inputs) is None:
                self._others.append(self._others.pop(index))  # most recently used last
                return other
        if self._recapture is None:
            raise CaptureError(
                f"captured step: {reason}; capture the step again for these inputs and modes, or "
                "capture with recapture=True"
            )
        return None

    def _state_values(self, entries: list) -> dict[int, Any]:
        """The parameters' current values by slot, each checked against the shape and dtype
        it had at capture (on the inner value's own attributes; the tensor's only to name a
        difference)."""
        if len(entries) != len(self._state_specs):
            raise CaptureError(
                f"captured step: the state has {len(entries)} parameters, "
                f"{len(self._state_specs)} at capture"
            )
        env: dict[int, Any] = {}
        for slot, (_, name, tensor), spec, raw in zip(
            self._state_slots, entries, self._state_specs, self._state_raw_specs
        ):
            value = inner_value(tensor)
            if raw_spec(value) != raw and (tensor.shape, tensor.dtype) != spec:
                raise CaptureError(
                    f"captured step: parameter {name!r} has shape {list(tensor.shape)} "
                    f"{tensor.dtype}, but {list(spec[0])} {spec[1]} at capture"
                )
            if slot is not None:
                env[slot] = value
        return env

    def __call__(self, *inputs: Any) -> Any:
        program = self._program_for(inputs)
        if program is not None:
            return program._replay(inputs)
        if self.programs >= MAX_PROGRAMS:
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"captured step {getattr(self._fn, '__name__', 'step')!r}: inputs or modes "
                    f"beyond the {MAX_PROGRAMS} programs kept; such steps run eagerly (pad "
                    "inputs to a few shapes to replay them)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            return self._fn(*inputs)
        other = self._recapture(*inputs)  # runs the step, as the first capture did
        self._others.append(other)
        return other.result

    def _replay(self, inputs: tuple) -> Any:
        values = [inner_value(x) for x, spec in zip(inputs, self._input_specs) if spec[0] == "t"]
        entries = self._state.checked()
        env = self._state_values(entries)
        env.update(zip(self._input_slots, values))
        last = self._last_item
        backend = self._backend
        # the step's backward kernels are among these: quiet, as backward is when run eagerly
        with backend.inner.arithmetic_warnings_ignored():
            for position, item in enumerate(self._items):
                args = [env.pop(slot) if last[slot] == position else env[slot] for slot in item.ins]
                if isinstance(item, OptimizerCall):
                    outs = self._run_optimizer(item, args, entries)
                else:
                    outs = item.run(*args)
                for slot, value in zip(item.outs, outs):
                    if slot is not None:
                        env[slot] = value
        for index, encoded in self._write_back:
            module, name, tensor = entries[index]
            value = env[encoded[1]] if encoded[0] == "s" else encoded[1]
            write_back(module, name, tensor, Tensor(backend.wrap(value), backend, tensor.device))
        return decode_result(self._result, env)

    def _run_optimizer(self, item: OptimizerCall, args: list, entries: list) -> list:
        """``item``'s optimizer stepped on the replayed gradients ``args``; the parameters'
        values after it where the program reads them (``entries``: the state's parameters,
        objects an optimizer step updates in place)."""
        values = iter(args)
        grads = [
            next(values) if encoded[0] == "s" else encoded[1] for _, encoded in item.grad_slots
        ]
        bound = item.bound
        parameters = item.parameters
        if (
            bound is None
            or not all(entries[index][2] is p for (index, _), p in zip(item.grad_slots, parameters))
            or not bound(grads)
        ):  # the optimizer's own step, or parameters not where they were: the eager lookup
            backend = self._backend
            gradients = Gradients(backend.inner)
            for (index, _), value in zip(item.grad_slots, grads):
                backend.grad_replace(entries[index][2].primitive, gradients, value)
            item.optimizer.step(gradients)
        return [
            None if slot is None else inner_value(entry[2])
            for slot, entry in zip(item.outs, entries)
        ]


def refuse_tracked(tensor: Tensor, index: int, op: str) -> None:
    """Refuse input ``index`` of a step where autodiff tracks it (a leaf that requires grad,
    or an output of a graph): the step's inputs are data, at capture and at every replay."""
    backend = tensor.backend
    if backend.is_autodiff and backend.is_tracked(tensor.primitive):
        raise CaptureError(
            f"{op}: input {index} (shape {list(tensor.shape)}) is tracked by autodiff; "
            "inputs of a captured step are data, not leaves that require grad"
        )


def backend_labels(given: Any, expected: Any) -> tuple[str, str]:
    """How a message names two backends: by name, or in full where the names are alike
    (two autodiff backends over NumPy with different checkpointing)."""
    if given.name != expected.name:
        return given.name, expected.name
    return repr(given), repr(expected)


def raw_spec(value: Any) -> tuple:
    """An inner value's shape and dtype as its own type gives them (what a replay compares)."""
    return getattr(value, "shape", None), getattr(value, "dtype", None)


def decode_result(encoded: tuple, env: dict) -> Any:
    """The step's result (tensors, sequences, dicts, constants) with the replayed values."""
    kind = encoded[0]
    if kind == "tensor":
        _, (where, payload), backend, device = encoded
        value = env[payload] if where == "s" else payload
        primitive = backend.wrap(value) if backend.is_autodiff else value
        return Tensor(primitive, backend, device)
    if kind == "seq":
        return encoded[1](decode_result(item, env) for item in encoded[2])
    if kind == "dict":
        return {key: decode_result(item, env) for key, item in encoded[1].items()}
    return encoded[1]
