"""Optimizer steps bound once to their parameters: what a replay of a captured step calls.

A captured step's replay has each parameter's gradient as a plain value of the inner backend
(an array), in an order fixed at capture. :class:`BoundStep` takes them so, without the
eager path's per-step Python: no ``Gradients`` value to build and search, no dispatch through
the tensor layer to the update kernel, no checks of the assignment that the capture already
made. For SGD, Adam, AdamW and RMSprop it calls the inner backend's fused update kernel
(``sgd_update``, ``adam_update``, ``rmsprop_update``) directly, with what
:meth:`Optimizer.step` would give it:

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

from collections.abc import Callable, Sequence
from typing import Any

from ..tensor import Tensor
from ..tensor.inplace import assign
from .optimizers import SGD, Adam, Optimizer, RMSprop, _empty_buffer, sole_reference

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
        self.empty = _empty_buffer(value)._prim


# -- the kernels' calls, one per algorithm --------------------------------------------------------
# ``ready(state, group)``: whether the state has the buffers the kernel reads (a first step
# makes them through the eager path); ``call(optimizer, value, grad, state, group, in_place,
# place)``: the kernel run, the state's buffers set in ``state``, the new value returned.
def _sgd_ready(state: dict, group: dict) -> bool:
    return True


def _sgd(optimizer, value, grad, state, group, in_place, place):
    momentum = group["momentum"]
    buffer = state.get("momentum_buffer") if momentum else None
    new, raw = place.inner.sgd_update(
        value,
        grad,
        place.empty if buffer is None else buffer._prim,
        group["lr"],
        momentum,
        group["dampening"],
        group["weight_decay"],
        group["nesterov"],
        in_place,
    )
    if momentum:
        state["momentum_buffer"] = _kept(raw, buffer, place)
    return new


def _adam_ready(state: dict, group: dict) -> bool:
    return state.get("exp_avg") is not None and state.get("exp_avg_sq") is not None


def _adam(optimizer, value, grad, state, group, in_place, place):
    first, second = state["exp_avg"], state["exp_avg_sq"]
    beta1, beta2 = group["betas"]
    new, raw_first, raw_second = place.inner.adam_update(
        value,
        grad,
        first._prim,
        second._prim,
        state["step"],
        group["lr"],
        beta1,
        beta2,
        group["eps"],
        group["weight_decay"],
        optimizer.decoupled,
        in_place,
    )
    state["exp_avg"] = _kept(raw_first, first, place)
    state["exp_avg_sq"] = _kept(raw_second, second, place)
    return new


def _rmsprop_used(group: dict) -> tuple[tuple[str, bool], ...]:
    """RMSprop's buffers and whether the group uses each."""
    return (
        ("square_avg", True),
        ("grad_avg", bool(group["centered"])),
        ("momentum_buffer", group["momentum"] > 0.0),
    )


def _rmsprop_ready(state: dict, group: dict) -> bool:
    return all(state.get(key) is not None for key, used in _rmsprop_used(group) if used)


def _rmsprop(optimizer, value, grad, state, group, in_place, place):
    used = _rmsprop_used(group)
    olds = [state[key] if on else None for key, on in used]
    new, *raws = place.inner.rmsprop_update(
        value,
        grad,
        *[place.empty if old is None else old._prim for old in olds],
        group["lr"],
        group["alpha"],
        group["eps"],
        group["weight_decay"],
        group["momentum"],
        group["centered"],
        in_place,
    )
    for (key, on), old, raw in zip(used, olds, raws):
        if on:
            state[key] = _kept(raw, old, place)
    return new


#: Each algorithm's ``update`` (the method an optimizer class has) -> (ready, call).
_KERNELS: dict[Callable, tuple[Callable, Callable]] = {
    SGD.update: (_sgd_ready, _sgd),
    Adam.update: (_adam_ready, _adam),
    RMSprop.update: (_rmsprop_ready, _rmsprop),
}


def _kernel_of(optimizer: Any) -> tuple[Callable, Callable] | None:
    """The kernel call of ``optimizer``'s algorithm, or ``None`` when its step is its own."""
    cls = type(optimizer)
    if not isinstance(optimizer, Optimizer) or not optimizer.updates_in_place:
        return None
    if cls.step is not Optimizer.step or cls.step_parameter is not Optimizer.step_parameter:
        return None
    return _KERNELS.get(getattr(cls, "update", None))


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
        self.places = [_Place(p, *where[id(p)]) for p in self.parameters]
        self.kernel = _kernel_of(optimizer)

    @staticmethod
    def binds(optimizer: Any) -> bool:
        """Whether a step of ``optimizer`` can be bound: SGD, Adam, AdamW or RMSprop, or a
        subclass that changes none of ``step``, ``step_parameter`` and ``update`` (any other
        optimizer's step is its own code, called as it is)."""
        return _kernel_of(optimizer) is not None

    def __call__(self, grads: Sequence[Any]) -> bool:
        """Step on ``grads``, one per parameter given at construction, in that order (those
        of parameters not in the optimizer's groups are not read); ``False`` (and nothing
        done) when a parameter moved in ``param_groups`` since capture."""
        groups = self.optimizer.param_groups
        for parameter, place in zip(self.parameters, self.places):
            if place.group >= len(groups):
                return False
            params = groups[place.group]["params"]
            if place.index >= len(params) or params[place.index] is not parameter:
                return False
        for parameter, place, k in zip(self.parameters, self.places, self.positions):
            group = groups[place.group]
            if self._fast(parameter, group):
                self._step_one(parameter, grads[k], group, place)
            else:
                grad_tensor = Tensor(grads[k], place.inner, place.device)
                self.optimizer.step_parameter(parameter, grad_tensor, group)
        return True

    def _fast(self, parameter: Tensor, group: dict) -> bool:
        """Whether the kernel call below does what :meth:`Optimizer.step_parameter` would."""
        if getattr(parameter, "_view", None) is not None:
            return False
        backend = parameter._backend
        state = self.optimizer.state.get(parameter)  # a first step makes it the eager way
        ready = self.kernel[0]
        return (
            backend.is_autodiff
            and not getattr(parameter, "_views", None)
            and backend.is_require_grad(parameter._prim)
            and backend.param_id(parameter._prim) is None
            and state is not None
            and ready(state, group)
        )

    def _step_one(self, parameter: Tensor, grad: Any, group: dict, place: _Place) -> None:
        optimizer = self.optimizer
        states = optimizer.state
        # asked before this step holds the value or the state (see sole_reference)
        in_place = sole_reference(parameter, states)
        backend = parameter._backend
        value = backend.inner_value(parameter._prim)
        state = states[parameter]
        state = {**state, "step": state.get("step", 0) + 1}
        new = self.kernel[1](optimizer, value, grad, state, group, in_place, place)
        states[parameter] = state
        if new is value or (
            type(new) is type(value) and new.dtype == value.dtype and new.shape == value.shape
        ):
            parameter._prim = backend.require_grad(backend.wrap(new))  # a fresh leaf
        else:  # a kernel that changed the dtype: assign casts, as the eager step's does
            op = f"{type(optimizer).__name__}.step"
            assign(parameter, Tensor(new, place.inner, place.device), op)
