"""More of ``torch.optim``: ``Adadelta``, ``Adagrad``, ``Adamax``, ``NAdam``, ``RAdam``,
``SparseAdam``.

Each update is torch's single-tensor algorithm, line for line, written on tensors of the
inner backend as the updates of :mod:`.optimizers` are: torch's fused lines as the same fused
tensor operations (``add(alpha=)``, ``lerp``, ``addcmul``: one rounding each; ``addcdiv``:
``value * t1 / t2`` in that order), so that float32 results are torch's bit for bit
(tests/test_optim_bits.py). Where torch's ``foreach=True`` formulation rounds differently
(NAdam's and RAdam's denominators, ASGD's average), a group asking for it gets that one.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..tensor import Tensor, full_like, zeros_like
from ..tensor.dtypes import default_float_dtype
from .optimizers import (
    SWITCH_DEFAULTS,
    Optimizer,
    State,
    implementation_switches,
    step_tensor,
)

__all__ = ["Adadelta", "Adagrad", "Adamax", "NAdam", "RAdam", "SparseAdam"]


def _decayed(value: Tensor, grad: Tensor, weight_decay: float) -> Tensor:
    """torch's L2 decay, ``grad.add(param, alpha=weight_decay)`` (one rounding)."""
    return grad.add(value, alpha=weight_decay) if weight_decay else grad


def _check_betas(name: str, betas: Any) -> tuple[float, float]:
    beta1, beta2 = float(betas[0]), float(betas[1])
    if not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
        raise InvalidArgumentError(f"{name}: betas must be in [0, 1), got {betas!r}")
    return beta1, beta2


class Adadelta(Optimizer):
    """Adadelta (Zeiler), as ``torch.optim.Adadelta``: ``v = rho v + (1 - rho) g^2``,
    ``delta = sqrt(u + eps) / sqrt(v + eps) * g``, ``u = rho u + (1 - rho) delta^2``,
    ``p = p - lr delta``."""

    def __init__(self, params: Any, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, **flags: Any):  # fmt: skip
        if not 0.0 <= rho <= 1.0:
            raise InvalidArgumentError(f"Adadelta: rho must be in [0, 1], got {rho!r}")
        defaults = _torch_defaults(
            "Adadelta",
            flags,
            {
                "lr": lr,
                "rho": float(rho),
                "eps": float(eps),
                "weight_decay": float(weight_decay),
            },
            "lr rho eps weight_decay maximize capturable foreach differentiable",
        )
        super().__init__(params, defaults)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        rho, eps = group["rho"], group["eps"]
        grad = _decayed(value, grad, group["weight_decay"])
        square = state.get("square_avg")
        delta_avg = state.get("acc_delta")
        if square is None:
            square, delta_avg = zeros_like(grad), zeros_like(grad)
        square = (square * rho).addcmul(grad, grad, value=1.0 - rho)
        std = (square + eps).sqrt()
        delta = (delta_avg + eps).sqrt() / std * grad
        delta_avg = (delta_avg * rho).addcmul(delta, delta, value=1.0 - rho)
        state["square_avg"], state["acc_delta"] = square, delta_avg
        return value.add(delta, alpha=-group["lr"]), state


class Adagrad(Optimizer):
    """Adagrad, as ``torch.optim.Adagrad``: ``s = s + g^2``,
    ``p = p - lr / (1 + (t - 1) lr_decay) * g / (sqrt(s) + eps)``."""

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, **flags: Any):  # fmt: skip
        defaults = _torch_defaults(
            "Adagrad",
            flags,
            {
                "lr": lr,
                "lr_decay": float(lr_decay),
                "weight_decay": float(weight_decay),
                "initial_accumulator_value": float(initial_accumulator_value),
                "eps": float(eps),
            },
            "lr lr_decay eps weight_decay "
            "initial_accumulator_value foreach maximize differentiable fused",
        )
        super().__init__(params, defaults)
        # torch's constructor gives every parameter of its groups a state at once (a frozen
        # one too): step 0 and the accumulator, which state_dict() shows before any step
        for group in self.param_groups:
            for parameter in group["params"]:
                value = parameter.inner() if parameter.backend.is_autodiff else parameter
                step = step_tensor(0, value.backend)
                self.state[parameter] = {"step": step, "sum": self._initial_sum(value)}
                # the count beside its tensor, as a step keeps it: the first step reads none
                self.__dict__.setdefault("_step_counts", {})[parameter] = (step, 0)

    def _initial_sum(self, like: Tensor) -> Tensor:
        """The accumulator's start, torch's: the constructor's ``initial_accumulator_value``
        (a group's own is not read), ``v + vj`` for a complex parameter."""
        start = self.defaults["initial_accumulator_value"]
        return full_like(like, complex(start, start) if like.is_complex() else start)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        step = state["step"]
        grad = _decayed(value, grad, group["weight_decay"])
        clr = group["lr"] / (1.0 + (step - 1) * group["lr_decay"])
        total = state.get("sum")
        if total is None:
            # a parameter of a group added later (or a state loaded without it): torch's
            # step starts it from the constructor's value too (a complex one is stepped as
            # its real pairs here, each pair starting at v, v: torch's v + vj)
            total = full_like(grad, self.defaults["initial_accumulator_value"])
        total = total.addcmul(grad, grad)
        state["sum"] = total
        return value.addcdiv(grad, total.sqrt() + group["eps"], value=-clr), state


class Adamax(Optimizer):
    """Adamax (Adam with the infinity norm), as ``torch.optim.Adamax``."""

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, **flags: Any):  # fmt: skip
        defaults = _torch_defaults(
            "Adamax",
            flags,
            {
                "lr": lr,
                "betas": _check_betas("Adamax", betas),
                "eps": float(eps),
                "weight_decay": float(weight_decay),
            },
            "lr betas eps weight_decay foreach maximize differentiable capturable",
        )
        super().__init__(params, defaults)

    def lerped_state(self, group: dict) -> tuple[str, ...]:
        return ("exp_avg",)  # torch's exp_avg.lerp_(grad, 1 - beta1)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        beta1, beta2 = group["betas"]
        step = state["step"]
        grad = _decayed(value, grad, group["weight_decay"])
        first, norm = state.get("exp_avg"), state.get("exp_inf")
        if first is None:
            first, norm = zeros_like(grad), zeros_like(grad)
        first = first.lerp(grad, 1.0 - beta1)
        norm = (norm * beta2).maximum(grad.abs() + group["eps"])
        state["exp_avg"], state["exp_inf"] = first, norm
        clr = group["lr"] / (1.0 - beta1**step)
        return value.addcdiv(first, norm, value=-clr), state


class NAdam(Optimizer):
    """Adam with Nesterov momentum (Dozat), as ``torch.optim.NAdam`` (momentum decay
    ``0.96 ** (t * momentum_decay)``)."""

    def __init__(self, params: Any, lr: float = 2e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False, **flags: Any):  # fmt: skip
        defaults = _torch_defaults(
            "NAdam",
            flags,
            {
                "lr": lr,
                "betas": _check_betas("NAdam", betas),
                "eps": float(eps),
                "weight_decay": float(weight_decay),
                "momentum_decay": float(momentum_decay),
                "decoupled_weight_decay": bool(decoupled_weight_decay),
            },
            "lr betas eps weight_decay momentum_decay "
            "decoupled_weight_decay maximize foreach capturable differentiable",
        )
        super().__init__(params, defaults)

    def lerped_state(self, group: dict) -> tuple[str, ...]:
        return ("exp_avg",)  # torch's exp_avg.lerp_(grad, 1 - beta1)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        beta1, beta2 = group["betas"]
        lr, step, decay = group["lr"], state["step"], group["momentum_decay"]
        if group["weight_decay"]:
            if group["decoupled_weight_decay"]:
                value = value * (1.0 - lr * group["weight_decay"])
            else:
                grad = grad.add(value, alpha=group["weight_decay"])
        bias_correction2 = 1.0 - beta2**step
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * decay))
        # torch keeps this product in a 0-d state tensor of its "scalar dtype" (float64 under
        # a float64 default dtype, else float32) and multiplies it in that dtype. torch's
        # load_state_dict casts it to the parameter's dtype (held here as a NumPy scalar of
        # that dtype, see optimizers._state_value), and its later steps multiply it in that
        # one: a float64 run resumed from a state dict leaves the uninterrupted one by 1e-9,
        # in torch as here, and goes on as torch's resumed run does
        held = state.get("mu_product", 1.0)
        if isinstance(held, Tensor):
            # a 0-d tensor loaded for a 0-d parameter (kept as a tensor there: it may be a
            # buffer), of the parameter's dtype: the number it holds, in that dtype
            held = np.asarray(held.numpy())[()]
        loaded = isinstance(held, np.floating)
        scalar = (
            type(held)
            if loaded
            else (np.float64 if default_float_dtype() == "float64" else np.float32)
        )
        product = scalar(held) * scalar(mu)
        mu_product = float(product)
        first, second = state.get("exp_avg"), state.get("exp_avg_sq")
        if first is None:
            first, second = zeros_like(grad), zeros_like(grad)
        first = first.lerp(grad, 1.0 - beta1)
        second = (second * beta2).addcmul(grad, grad, value=1.0 - beta2)
        if group.get("foreach"):  # torch's multi-tensor form: sqrt(v) / sqrt(bc2)
            denom = second.sqrt() / (bias_correction2**0.5) + group["eps"]
        else:
            denom = (second / bias_correction2).sqrt() + group["eps"]
        mu_product_next = mu_product * mu_next
        value = value.addcdiv(grad, denom, value=-lr * (1.0 - mu) / (1.0 - mu_product))
        value = value.addcdiv(first, denom, value=(-lr * mu_next) / (1.0 - mu_product_next))
        state.update(exp_avg=first, exp_avg_sq=second, mu_product=product if loaded else mu_product)
        return value, state


class RAdam(Optimizer):
    """Rectified Adam (Liu et al.), as ``torch.optim.RAdam``: plain momentum SGD while the
    variance's rectification term is not yet defined (``rho_t <= 5``)."""

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, **flags: Any):  # fmt: skip
        defaults = _torch_defaults(
            "RAdam",
            flags,
            {
                "lr": lr,
                "betas": _check_betas("RAdam", betas),
                "eps": float(eps),
                "weight_decay": float(weight_decay),
                "decoupled_weight_decay": bool(decoupled_weight_decay),
            },
            "lr betas eps weight_decay "
            "maximize foreach capturable decoupled_weight_decay differentiable",
        )
        super().__init__(params, defaults)

    def lerped_state(self, group: dict) -> tuple[str, ...]:
        return ("exp_avg",)  # torch's exp_avg.lerp_(grad, 1 - beta1)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        beta1, beta2 = group["betas"]
        lr, step = group["lr"], state["step"]
        if group["weight_decay"]:
            if group["decoupled_weight_decay"]:
                value = value * (1.0 - lr * group["weight_decay"])
            else:
                grad = grad.add(value, alpha=group["weight_decay"])
        first, second = state.get("exp_avg"), state.get("exp_avg_sq")
        if first is None:
            first, second = zeros_like(grad), zeros_like(grad)
        first = first.lerp(grad, 1.0 - beta1)
        second = (second * beta2).addcmul(grad, grad, value=1.0 - beta2)
        state["exp_avg"], state["exp_avg_sq"] = first, second
        bias_correction1 = 1.0 - beta1**step
        bias_correction2 = 1.0 - beta2**step
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * step * (beta2**step) / bias_correction2
        rect = 0.0
        if rho_t > 5.0:
            rect = (
                (rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)
            ) ** 0.5
        if group.get("foreach"):
            return _radam_foreach_step(value, first, second, group, rect, step), state
        corrected = first / bias_correction1
        if rect:
            # torch's ``number / tensor`` is ``tensor.reciprocal() * number``: two roundings
            adaptive = (second.sqrt() + group["eps"]).reciprocal() * (bias_correction2**0.5)
            return value - corrected * lr * adaptive * rect, state
        return value - corrected * lr, state


class SparseAdam(Optimizer):
    """``torch.optim.SparseAdam`` on dense gradients (retrograd has no sparse ones: the
    ``sparse=False`` embedding a port uses holds the same values). torch's step reads only the
    rows of the gradient's sparse index (an embedding's looked-up rows): the rows of a dense
    gradient holding a nonzero value stand for them (for a 1-d parameter, its elements), so a
    looked-up row whose gradient is exactly 0 keeps its moments here where torch's would
    decay them. Those rows take Adam's moments and ``p -= lr sqrt(1 - beta2^t) / (1 - beta1^t)
    m / (sqrt(v) + eps)``, torch's form; the others are left as they are. Its step count is
    a Python int, as torch's."""

    counts_steps_as_int = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple = (0.9, 0.999),
                 eps: float = 1e-8, maximize: bool = False):  # fmt: skip
        if not float(lr) > 0.0:
            raise InvalidArgumentError(f"SparseAdam: invalid learning rate: {lr!r}")
        if not float(eps) > 0.0:
            raise InvalidArgumentError(f"SparseAdam: invalid epsilon value: {eps!r}")
        defaults = {"lr": lr, "betas": _check_betas("SparseAdam", betas), "eps": float(eps),
                    "maximize": bool(maximize)}  # fmt: skip
        super().__init__(params, defaults)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        beta1, beta2 = group["betas"]
        step = state["step"]
        present = grad != 0
        if grad.ndim > 1:  # whole rows, as the sparse index of an embedding's gradient
            present = present.reshape(grad.shape[0], -1).any(1)
            present = present.reshape((grad.shape[0],) + (1,) * (grad.ndim - 1))
        first, second = state.get("exp_avg"), state.get("exp_avg_sq")
        if first is None:
            first, second = zeros_like(grad), zeros_like(grad)
        first = first.where(present.logical_not(), first + (grad - first) * (1.0 - beta1))
        second = second.where(
            present.logical_not(), second + (grad * grad - second) * (1.0 - beta2)
        )
        state["exp_avg"], state["exp_avg_sq"] = first, second
        step_size = group["lr"] * math.sqrt(1.0 - beta2**step) / (1.0 - beta1**step)
        moved = value - first / (second.sqrt() + group["eps"]) * step_size
        return value.where(present.logical_not(), moved), state


def _radam_foreach_step(
    value: Tensor, first: Tensor, second: Tensor, group: dict, rect: float, step: int
) -> Tensor:
    """RAdam's parameter step as torch's ``foreach=True`` forms it: ``value.addcmul(m, b)``
    with ``b = 1 / ((sqrt(v) + eps) / (-lr rect sqrt(bc2) / bc1)) - lr / bc1`` (``rect`` 0
    while the rectification is undefined: the first term is then ``1 / -inf``, -0)."""
    lr, (beta1, beta2) = group["lr"], group["betas"]
    bias_correction1 = 1 - beta1**step
    unrectified = 0.0 if rect > 0 else 1.0
    scale = ((1 - beta2**step) ** 0.5) * (lr * rect / bias_correction1) * -1
    # (the step runs with the backend's arithmetic warnings off: x / -0 is -inf, as torch's)
    buffer = ((second.sqrt() + group["eps"]) / scale).reciprocal()
    buffer = buffer + (lr * unrectified / bias_correction1) * -1
    return value.addcmul(first, buffer)


def _torch_defaults(name: str, flags: dict[str, Any], values: dict, order: str) -> dict:
    """``values`` (the hyper-parameters), with ``maximize`` and torch's implementation
    switches read from ``flags`` (:func:`~.optimizers.implementation_switches`), keyed in the
    ``order`` (space-separated) of torch 2.13's ``defaults``."""
    keys = order.split()
    maximize = bool(flags.pop("maximize", False))
    switches = implementation_switches(name, flags, tuple(k for k in keys if k in SWITCH_DEFAULTS))
    every = {**values, "maximize": maximize, **switches}
    return {key: every[key] for key in keys}


def _ascent(grad: Tensor, group: dict) -> Tensor:
    """torch's ``maximize``: the gradient negated before anything else of the update."""
    return -grad if group.get("maximize") else grad
