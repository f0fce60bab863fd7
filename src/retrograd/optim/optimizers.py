"""SGD, Adam, AdamW and RMSprop over parameter groups, stepping on a ``Gradients`` value.

An optimizer takes what ``torch.optim`` takes (an iterable of parameters, or of parameter
groups: dicts with ``"params"`` and per-group hyper-parameters) or, as before, a module. Its
``param_groups`` are torch's: ``for g in optimizer.param_groups: g["lr"] = lr`` is how a
schedule sets the learning rate. Parameters are identified by object: a tied parameter is one
parameter with one state.

Each step computes on the inner backend (no graph is recorded): a *pure* update function per
algorithm (``sgd_update``, ``adam_update``, ``rmsprop_update``: ``(value, grad, state,
hyper-parameters) -> (new value, new state)``) gives the new value, which replaces the
parameter's value in place (:func:`retrograd.tensor.inplace.assign`: the object, its leaf
status and its distributed mark stay). The formulas are PyTorch's, operation for operation, so
the two agree on the same gradients up to float rounding; the test suite checks it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import AutodiffError, DTypeError, InvalidArgumentError, ShapeError
from ..tensor import Tensor, tensor, zeros_like
from ..tensor.inplace import assign
from ..tensor.internal import apply

__all__ = [
    "SGD",
    "Adam",
    "AdamW",
    "Optimizer",
    "RMSprop",
    "adam_update",
    "rmsprop_update",
    "sgd_update",
]

State = dict[str, Any]


# -- the pure updates -----------------------------------------------------------------------------
def sgd_update(
    value: Tensor,
    grad: Tensor,
    state: State,
    *,
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
) -> tuple[Tensor, State]:
    """``torch.optim.SGD``: ``d = g + weight_decay * p``; with momentum
    ``b = momentum * b + (1 - dampening) * d`` (``b = d`` at the first step) and
    ``d = d + momentum * b`` (Nesterov) or ``d = b``; then ``p = p - lr * d``."""
    state = dict(state)
    direction = grad
    if weight_decay:
        direction = direction + value * weight_decay
    if momentum:
        buffer = state.get("momentum_buffer")
        if buffer is None:
            buffer = direction
        else:
            # torch adds the gradient with alpha = 1 - dampening: no product when it is 1
            damped = direction * (1.0 - dampening) if dampening else direction
            buffer = buffer * momentum + damped
        state["momentum_buffer"] = buffer
        direction = direction + buffer * momentum if nesterov else buffer
    return value - direction * lr, state


def adam_update(
    value: Tensor,
    grad: Tensor,
    state: State,
    *,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    decoupled: bool = False,
) -> tuple[Tensor, State]:
    """Adam (``torch.optim.Adam``; ``decoupled``: AdamW's weight decay, ``p *= 1 - lr wd``):
    ``m = m + (1 - beta1) (g - m)``, ``v = beta2 v + (1 - beta2) g^2``, then
    ``p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)``.
    ``state["step"]`` is the step count *after* this step."""
    state = dict(state)
    beta1, beta2 = betas
    first = state.get("exp_avg")
    second = state.get("exp_avg_sq")
    if first is None:
        first, second = zeros_like(grad), zeros_like(grad)
    # one fused backend kernel (Backend.adam_update documents the formula and its order)
    hyper = (state["step"], lr, beta1, beta2, eps, weight_decay, decoupled)
    value, first, second = apply("adam_update", (value, grad, first, second), hyper)
    state["exp_avg"], state["exp_avg_sq"] = first, second
    return value, state


def rmsprop_update(
    value: Tensor,
    grad: Tensor,
    state: State,
    *,
    lr: float,
    alpha: float = 0.99,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    momentum: float = 0.0,
    centered: bool = False,
) -> tuple[Tensor, State]:
    """``torch.optim.RMSprop``: ``v = alpha v + (1 - alpha) g^2``; the denominator is
    ``sqrt(v) + eps`` (centered: ``sqrt(v - a^2) + eps``, ``a`` the running mean gradient);
    with momentum ``b = momentum b + g / denominator`` and ``p = p - lr b``, else
    ``p = p - lr g / denominator``."""
    state = dict(state)
    if weight_decay:
        grad = grad + value * weight_decay
    square = state.get("square_avg")
    if square is None:
        square = zeros_like(grad)
    square = square * alpha + grad * (1.0 - alpha) * grad
    state["square_avg"] = square
    if centered:
        average = state.get("grad_avg")
        if average is None:
            average = zeros_like(grad)
        average = average + (grad - average) * (1.0 - alpha)
        state["grad_avg"] = average
        denominator = (square - average * average).sqrt() + eps
    else:
        denominator = square.sqrt() + eps
    if momentum > 0.0:
        buffer = state.get("momentum_buffer")
        if buffer is None:
            buffer = zeros_like(grad)
        buffer = buffer * momentum + grad / denominator
        state["momentum_buffer"] = buffer
        return value - buffer * lr, state
    return value - grad / denominator * lr, state


# -- the optimizers -------------------------------------------------------------------------------
class Optimizer:
    """Base class: parameter groups, per-parameter state, the step, state dicts.

    Subclasses give their ``defaults`` (every hyper-parameter, ``lr`` first) and
    :meth:`update`, which maps ``(value, grad, state, group)`` to ``(new value, new state)``
    on the inner backend.
    """

    def __init__(self, params: Any, defaults: dict[str, Any]):
        lr = defaults.get("lr")
        if not (isinstance(lr, int | float) and lr >= 0.0):
            raise InvalidArgumentError(
                f"{type(self).__name__}: lr must be non-negative, got {lr!r}"
            )
        self.defaults = dict(defaults)
        #: the module given, if one was (the old form ``Optimizer(module, ...)``)
        self.module = params if hasattr(params, "named_parameters") else None
        #: torch's groups: dicts of ``"params"`` (a list of tensors) and hyper-parameters
        self.param_groups: list[dict[str, Any]] = []
        #: per parameter (the tensor object itself, hashed by identity): step count, buffers
        self.state: dict[Tensor, State] = {}
        if self.module is not None:
            params = self.module.parameters()
        if isinstance(params, Tensor):
            raise InvalidArgumentError(
                f"{type(self).__name__}: params must be an iterable of tensors, of parameter "
                "groups, or a module; got a single tensor"
            )
        groups = list(params)
        if not groups:
            raise InvalidArgumentError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], Mapping):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)
        #: the learning rate given at construction (schedules scale from each group's own)
        self.initial_lr = float(lr)

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Add a group (``{"params": [...], "lr": ..., ...}``); missing hyper-parameters take
        the optimizer's defaults. A parameter may be in one group only."""
        if not isinstance(group, Mapping) or "params" not in group:
            raise InvalidArgumentError(
                f"{type(self).__name__}: a parameter group is a dict with 'params', got "
                f"{type(group).__name__}"
            )
        params = group["params"]
        params = [params] if isinstance(params, Tensor) else list(params)
        unique: list[Tensor] = []
        seen: set[int] = set()
        for p in params:
            if not isinstance(p, Tensor):
                raise InvalidArgumentError(
                    f"{type(self).__name__}: parameters must be tensors, got {type(p).__name__}"
                )
            if id(p) not in seen:  # a tied parameter given twice is one parameter
                seen.add(id(p))
                unique.append(p)
        for other in self.param_groups:
            if any(id(p) in seen for p in other["params"]):
                raise InvalidArgumentError(
                    f"{type(self).__name__}: some parameters appear in more than one group"
                )
        new = {**self.defaults, **{k: v for k, v in group.items() if k != "params"}}
        new["params"] = unique
        self._check_group(new)
        self.param_groups.append(new)

    def _check_group(self, group: dict[str, Any]) -> None:
        if not group["lr"] >= 0.0:
            raise InvalidArgumentError(
                f"{type(self).__name__}: lr must be non-negative, got {group['lr']!r}"
            )

    # -- the learning rate of a one-group optimizer, as before -------------------------------
    @property
    def lr(self) -> float:
        """The first group's learning rate; setting it sets every group's."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: float) -> None:
        for group in self.param_groups:
            group["lr"] = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Nothing to do: gradients are the value ``backward()`` returns. Kept so that
        PyTorch training loops port unchanged."""

    def step(self, grads: Any = None) -> None:
        """Update every parameter that has a gradient in ``grads`` (what ``backward()``
        returned); parameters without one are left as they are, as in PyTorch. torch's
        ``step()`` without them (gradients kept on the parameters) and ``step(closure)`` are
        refused with an error that says what to write instead."""
        if grads is None or callable(grads):
            raise AutodiffError(
                f"{type(self).__name__}.step: pass the gradients backward() returned, "
                "grads = loss.backward(); optimizer.step(grads) (gradients are a value here, "
                "not kept on the parameters" + ("; closures are not supported)" if grads else ")")
            )
        for group in self.param_groups:
            for parameter in group["params"]:
                grad = parameter.grad(grads)
                if grad is None:
                    continue
                if grad.backend.is_autodiff:  # backward(create_graph=True): the plain values
                    grad = grad.inner()
                value = parameter.inner() if parameter.backend.is_autodiff else parameter
                state = self.state.get(parameter) or {"step": 0}
                state = {**state, "step": state.get("step", 0) + 1}
                new, self.state[parameter] = self.update(value, grad, state, group)
                assign(parameter, new, f"{type(self).__name__}.step")

    def update(
        self, value: Tensor, grad: Tensor, state: State, group: dict[str, Any]
    ) -> tuple[Tensor, State]:
        raise NotImplementedError

    # -- state dicts ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """torch's layout: ``{"state": {index: {...}}, "param_groups": [{..., "params":
        [indices]}]}``, parameters numbered by position across the groups; tensors in the
        state as NumPy copies (so it saves with ``np.savez``/pickle anywhere)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            numbers = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                numbers.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": numbers})
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[index[id(p)]] = {
                        key: np.array(v.numpy(), copy=True) if isinstance(v, Tensor) else v
                        for key, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (or torch's, for the same algorithm), matching
        parameters by position in the groups; hyper-parameters come from it too.

        Everything is checked and converted before anything changes: the groups' sizes, their
        hyper-parameters (finite, and accepted as the constructor accepts them), each state's
        parameter number, and every buffer's shape and dtype against its parameter's. A wrong
        entry raises an error naming it and leaves the optimizer as it was.
        """
        where = f"{type(self).__name__}.load_state_dict"
        groups = state_dict.get("param_groups") if isinstance(state_dict, Mapping) else None
        saved_state = state_dict.get("state") if isinstance(state_dict, Mapping) else None
        if not isinstance(groups, list | tuple) or not isinstance(saved_state, Mapping):
            raise InvalidArgumentError(
                f"{where}: expected state_dict()'s form, a dict with 'state' (a dict) and "
                f"'param_groups' (a list), got {type(state_dict).__name__}"
            )
        if any(not isinstance(g, Mapping) or "params" not in g for g in groups):
            raise InvalidArgumentError(f"{where}: every parameter group needs 'params'")
        if len(groups) != len(self.param_groups) or any(
            len(saved["params"]) != len(own["params"])
            for saved, own in zip(groups, self.param_groups)
        ):
            raise InvalidArgumentError(
                f"{where}: the saved groups have "
                f"{[len(g['params']) for g in groups]} parameters, this optimizer's "
                f"{[len(g['params']) for g in self.param_groups]}"
            )
        merged = []
        for saved, own in zip(groups, self.param_groups):
            group = {**own, **{k: v for k, v in saved.items() if k != "params"}}
            _check_finite(where, group)
            self._check_group(group)
            merged.append(group)
        by_number: dict[int, Tensor] = {}
        for saved, own in zip(groups, self.param_groups):
            for number, p in zip(saved["params"], own["params"]):
                by_number[_parameter_number(where, number)] = p
        new_state: dict[Tensor, State] = {}
        for number, entry in saved_state.items():
            p = by_number.get(_parameter_number(where, number))
            if p is None:
                raise InvalidArgumentError(
                    f"{where}: state for parameter {number!r}, which no group lists (the "
                    f"groups list {sorted(by_number)})"
                )
            if not isinstance(entry, Mapping):
                raise InvalidArgumentError(
                    f"{where}: the state of parameter {number} is a {type(entry).__name__}, "
                    "not a dict"
                )
            new_state[p] = {key: _state_value(where, number, key, v, p) for key, v in entry.items()}
        for own, group in zip(self.param_groups, merged):
            own.update({k: v for k, v in group.items() if k != "params"})
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for number, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {number}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        return "\n".join([*lines, ")"])


def _check_finite(where: str, group: Mapping[str, Any]) -> None:
    """Every number among a group's hyper-parameters (``betas``' too) is finite."""
    for key, value in group.items():
        values = value if isinstance(value, list | tuple) and key != "params" else [value]
        for number in values:
            numeric = isinstance(number, int | float) and not isinstance(number, bool)
            if numeric and not math.isfinite(number):
                raise InvalidArgumentError(f"{where}: {key} must be finite, got {value!r}")


def _parameter_number(where: str, number: Any) -> int:
    try:
        return operator.index(number) if not isinstance(number, str) else int(number)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"{where}: parameters are numbered by integers, got {number!r}"
        ) from None


def _state_value(where: str, number: int, key: str, value: Any, parameter: Tensor) -> Any:
    """A saved state entry as the optimizer keeps it: the step an int, a buffer a tensor of
    the parameter's shape, dtype, backend and device; a Python scalar as it is."""
    if key == "step":
        step = np.asarray(_array(value))
        if step.ndim or step.dtype.kind not in "iuf" or not (np.isfinite(step) and step >= 0):
            raise InvalidArgumentError(
                f"{where}: the step of parameter {number} must be a count, got {value!r}"
            )
        return int(step)
    if np.ndim(_array(value)) == 0 and not isinstance(value, np.ndarray | Tensor):
        return value
    array = np.asarray(_array(value))
    if array.dtype.kind not in "biuf":
        raise DTypeError(
            f"{where}: state {number}/{key} holds {array.dtype} values, its parameter is "
            f"{parameter.dtype}"
        )
    if tuple(array.shape) != tuple(parameter.shape):
        raise ShapeError(
            f"{where}: state {number}/{key} has shape {list(array.shape)}, its parameter "
            f"{list(parameter.shape)}"
        )
    inner = parameter.inner() if parameter.backend.is_autodiff else parameter
    return tensor(np.asarray(array, dtype=inner.dtype), backend=inner.backend, device=inner.device)


def _array(value: Any) -> Any:
    detach = getattr(value, "detach", None)  # a torch tensor in a torch state dict
    if callable(detach) and not isinstance(value, Tensor):
        return detach().cpu().numpy()
    return np.asarray(value) if isinstance(value, Tensor) else value


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, Nesterov momentum and weight decay, as
    ``torch.optim.SGD`` (:func:`sgd_update`).

    >>> import retrograd as rg
    >>> from retrograd import nn, optim
    >>> model = nn.Linear(2, 1)
    >>> grads = model(rg.ones((1, 2))).sum().backward()
    >>> optim.SGD(model.parameters(), lr=0.1, momentum=0.9).step(grads)
    """

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        defaults = {
            "lr": lr,
            "momentum": float(momentum),
            "dampening": float(dampening),
            "weight_decay": float(weight_decay),
            "nesterov": bool(nesterov),
        }
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if group["nesterov"] and (group["momentum"] <= 0.0 or group["dampening"] != 0.0):
            raise InvalidArgumentError(
                "SGD: Nesterov momentum requires a momentum and zero dampening"
            )

    def update(self, value, grad, state, group):
        return sgd_update(
            value,
            grad,
            state,
            lr=group["lr"],
            momentum=group["momentum"],
            dampening=group["dampening"],
            weight_decay=group["weight_decay"],
            nesterov=group["nesterov"],
        )


class Adam(Optimizer):
    """Adam (Kingma & Ba), L2 weight decay added to the gradient, as ``torch.optim.Adam``
    (:func:`adam_update`)."""

    decoupled = False

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ):
        defaults = {
            "lr": lr,
            "betas": (float(betas[0]), float(betas[1])),
            "eps": float(eps),
            "weight_decay": float(weight_decay),
        }
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        beta1, beta2 = group["betas"]
        if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
            raise InvalidArgumentError(
                f"{type(self).__name__}: betas must be in [0, 1), got {group['betas']!r}"
            )

    def update(self, value, grad, state, group):
        return adam_update(
            value,
            grad,
            state,
            lr=group["lr"],
            betas=group["betas"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            decoupled=self.decoupled,
        )


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``: each
    parameter is first scaled by ``1 - lr * weight_decay`` (its group's), then takes the Adam
    step. GPT training decays 2-d weights only, with two groups::

        optimizer = optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=3e-4)
    """

    decoupled = True

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ):
        super().__init__(params, lr, betas, eps, weight_decay)


class RMSprop(Optimizer):
    """RMSprop (Hinton), as ``torch.optim.RMSprop`` (:func:`rmsprop_update`), with momentum,
    the centered variant and L2 weight decay."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
    ):
        if not alpha >= 0.0:
            raise InvalidArgumentError(f"RMSprop: alpha must be non-negative, got {alpha!r}")
        defaults = {
            "lr": lr,
            "alpha": float(alpha),
            "eps": float(eps),
            "weight_decay": float(weight_decay),
            "momentum": float(momentum),
            "centered": bool(centered),
        }
        super().__init__(params, defaults)

    def update(self, value, grad, state, group):
        return rmsprop_update(
            value,
            grad,
            state,
            lr=group["lr"],
            alpha=group["alpha"],
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            momentum=group["momentum"],
            centered=group["centered"],
        )
