"""Optimizer steps bound once to their parameters: what a replay of a captured step calls.

A captured step's replay has each parameter's gradient as a plain value of the inner backend
(an array), in an order fixed at capture. :class:`BoundStep` takes them so, without the
eager path's per-step Python: no ``Gradients`` value to build and search, no dispatch through
the tensor layer to the update kernel, no checks of the assignment that the capture already
made. For a :class:`~.optimizers.FusedOptimizer` (SGD, Adam, AdamW, RMSprop) it calls the
inner backend's fused update kernel directly, through the same calling convention
(:class:`~.fused.FusedUpdate`) as the eager step, with what :meth:`Optimizer.step` would give
it:

- the hyper-parameters read from ``param_groups`` at every call (a schedule's ``lr``, any
  other edit of a group, takes effect at the next step, as in eager code);
- the state's step count and buffers, written in place exactly where :func:`sole_reference`
  allows it (otherwise new arrays, as the pure update makes), and kept in ``optimizer.state``;
- the parameter object made a fresh leaf holding the new value, as :func:`assign` makes it.

So the bits, the state and the aliasing are the eager step's. Whatever is out of the common
case -- another optimizer class (or a subclass with its own ``update``), a state whose buffers
are not there yet, a parameter with views or a distributed mark, a kernel that changed the
dtype -- takes :meth:`Optimizer.step_parameter`, the eager path itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..step_hooks import has_step_hooks
from ..tensor import Tensor
from ..tensor.inplace import assign
from ..tensor.kept_gradients import keeps_zero_gradient, mark_gradient_held
from .fused import FusedUpdate, empty_buffer
from .optimizers import (
    FusedOptimizer,
    Optimizer,
    keep_state,
    known_count,
    sole_reference,
    step_count,
)

__all__ = ["BoundStep"]


def _kept(raw: Any, old: Tensor | None, place: _Place) -> Tensor:
    """A state buffer holding ``raw``: the old tensor where the kernel wrote into it."""
    if old is not None and old._prim is raw:
        return old
    return Tensor(raw, place.inner, place.device)


class _Place:
    """Where a parameter is: its group and index there, its inner backend and device, and an
    empty array of its dtype (the kernels' "no buffer")."""

    __slots__ = ("device", "empty", "group", "index", "inner")

    def __init__(self, parameter: Tensor, group: int, index: int):
        value = parameter.inner() if parameter.backend.is_autodiff else parameter
        self.group, self.index = group, index
        self.inner, self.device = value._backend, value._device
        self.empty = empty_buffer(value)._prim


def _kernel_of(optimizer: Any) -> FusedUpdate | None:
    """The fused kernel of ``optimizer``'s algorithm, or ``None`` when its step is its own."""
    cls = type(optimizer)
    if not isinstance(optimizer, FusedOptimizer):
        return None
    if cls.step is not Optimizer.step or cls.step_parameter is not Optimizer.step_parameter:
        return None
    if cls.update is not FusedOptimizer.update or not optimizer.updates_in_place:
        return None
    if optimizer.bypasses_kernel():  # maximize/amsgrad: more than the bare kernel
        return None
    listed = [id(p) for group in optimizer.param_groups for p in group["params"]]
    if len(set(listed)) != len(listed):  # a parameter stepped at each of its places
        return None
    return optimizer.fused


class BoundStep:
    """``optimizer.step`` on the gradients of ``parameters``, given as plain inner values in
    that order, for the optimizers with a fused update kernel (:meth:`binds`).

    Each parameter's group is found again at every call by position (a group dict replaced by
    another is read too); when a parameter is no longer where it was, the call steps nothing
    and answers ``False``: the caller then steps the eager way.
    """

    def __init__(self, optimizer: Optimizer, parameters: Sequence[Tensor]):
        self.optimizer = optimizer
        where = {
            id(p): (number, index)
            for number, group in enumerate(optimizer.param_groups)
            for index, p in enumerate(group["params"])
        }
        #: the positions in ``parameters`` of the optimizer's own (it steps no other)
        self.positions = [k for k, p in enumerate(parameters) if id(p) in where]
        self.parameters = [parameters[k] for k in self.positions]
        self._bound_ids = {id(p) for p in self.parameters}
        self.places = [_Place(p, *where[id(p)]) for p in self.parameters]
        self.kernel = _kernel_of(optimizer)

    @staticmethod
    def binds(optimizer: Any) -> bool:
        """Whether a step of ``optimizer`` can be bound: a :class:`FusedOptimizer` (SGD, Adam,
        AdamW, RMSprop, or a subclass that changes none of ``step``, ``step_parameter`` and
        ``update``; its ``settings`` may change); any other optimizer's step is its own code,
        called as it is."""
        return _kernel_of(optimizer) is not None

    def __call__(self, grads: Sequence[Any]) -> bool:
        """Step on ``grads``, one per parameter given at construction, in that order (those
        of parameters not in the optimizer's groups are not read); ``False`` (and nothing
        done) when a parameter moved in ``param_groups`` since capture, or when the eager step
        does more than the kernels: torch's step hooks to run, or a parameter without a
        gradient here whose kept zero gradient (``zero_grad(set_to_none=False)``) it steps."""
        groups = self.optimizer.param_groups
        if has_step_hooks(self.optimizer) or any(
            id(p) not in self._bound_ids and keeps_zero_gradient(p)
            for group in groups
            for p in group["params"]
        ):
            return False
        for parameter, place in zip(self.parameters, self.places):
            if place.group >= len(groups):
                return False
            params = groups[place.group]["params"]
            if place.index >= len(params) or params[place.index] is not parameter:
                return False
        settings_of: dict[int, dict] = {}  # read once per group and call
        for parameter, place, k in zip(self.parameters, self.places, self.positions):
            group = groups[place.group]
            settings = settings_of.get(place.group)
            if settings is None:
                settings = settings_of[place.group] = self.optimizer.settings(group)
            mark_gradient_held(parameter)
            if self._fast(parameter, settings):
                self._step_one(parameter, grads[k], settings, place)
            else:
                grad_tensor = Tensor(grads[k], place.inner, place.device)
                self.optimizer.step_parameter(parameter, grad_tensor, group)
        return True

    def _fast(self, parameter: Tensor, settings: dict) -> bool:
        """Whether the kernel call below does what :meth:`Optimizer.step_parameter` would."""
        if getattr(parameter, "_view", None) is not None:
            return False
        backend = parameter._backend
        # a first step makes the state the eager way (SGD without momentum keeps none)
        state = self.optimizer.state.get(parameter)
        if state is None and not self.optimizer.counts_steps:
            state = {}
        return (
            backend.is_autodiff
            and not getattr(parameter, "_views", None)
            and backend.is_require_grad(parameter._prim)
            and backend.param_id(parameter._prim) is None
            and state is not None
            and self.kernel.ready(settings, state)
        )

    def _step_one(self, parameter: Tensor, grad: Any, settings: dict, place: _Place) -> None:
        optimizer = self.optimizer
        states = optimizer.state
        # asked before this step holds the value or the state (see sole_reference)
        in_place = sole_reference(parameter, states)
        backend = parameter._backend
        value = backend.inner_value(parameter._prim)
        state = states.get(parameter) or {}
        held_step = state.get("step")
        state = {**state, "step": step_count(held_step, known_count(optimizer, parameter)) + 1}
        held_step = optimizer._count_first(parameter, place.inner, held_step, state["step"])
        new, buffers = self.kernel.run_inner(
            place.inner, value, grad, state, settings, in_place, place.empty
        )
        for key, old, raw in buffers:
            state[key] = _kept(raw, old, place)
        keep_state(optimizer, parameter, state, held_step)
        if new is value or (
            type(new) is type(value) and new.dtype == value.dtype and new.shape == value.shape
        ):
            parameter._prim = backend.require_grad(backend.wrap(new))  # a fresh leaf
        else:  # a kernel that changed the dtype: assign casts, as the eager step's does
            op = f"{type(optimizer).__name__}.step"
            assign(parameter, Tensor(new, place.inner, place.device), op)
