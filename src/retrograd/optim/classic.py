"""The rest of ``torch.optim``'s algorithms: ``Rprop``, ``ASGD`` and ``Adafactor``.

Each update is torch's single-tensor algorithm, operation for operation, as in
:mod:`.adaptive`: a pure function of (value, grad, state) under the optimizer's group
settings. Where torch keeps a scalar of the state in a 0-d tensor of its "scalar dtype" (float32,
or float64 under a float64 default dtype) and reads it back with ``.item()``, the scalar is
rounded to that dtype here too, so float32 runs agree with torch's bit for bit in the scalars.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..tensor import Tensor, full_like, zeros, zeros_like
from ..tensor.dtypes import default_float_dtype, finfo
from .adaptive import _ascent, _decayed, _torch_defaults
from .optimizers import Optimizer, State

__all__ = ["ASGD", "Adafactor", "Rprop"]


def _scalar(value: float) -> float:
    """``value`` as torch's 0-d state tensors of the scalar dtype hold it."""
    return float(np.float64(value) if default_float_dtype() == "float64" else np.float32(value))


def _foreach_eta(lr: float, lambd: float, alpha: float, step: int) -> float:
    """ASGD's next ``eta`` as torch's ``foreach=True`` computes it: ``lr / (1 + lambd * lr *
    step) ** alpha`` on its step count, a 0-d tensor of the scalar dtype, so each operation
    rounds in that dtype (and ``lr / tensor`` is ``tensor.reciprocal() * lr``)."""
    dtype = np.float64 if default_float_dtype() == "float64" else np.float32
    base = dtype(1.0) + dtype(lambd * lr) * dtype(step)
    return float(dtype(1.0) / base ** dtype(alpha) * dtype(lr))


class Rprop(Optimizer):
    """Resilient backpropagation, as ``torch.optim.Rprop``: each weight's step size grows by
    ``etas[1]`` while its gradient keeps its sign and shrinks by ``etas[0]`` when it flips
    (that step then skips the weight), clamped to ``step_sizes``; the weight moves by its step
    size against the gradient's sign. ``lr`` is the initial step size, read once per weight.

    >>> import retrograd as rg
    >>> w = rg.tensor([1.0, -1.0]).require_grad()
    >>> opt = rg.optim.Rprop([w], lr=0.1)
    >>> opt.step((w * w).sum().backward())
    >>> [round(v, 4) for v in w.tolist()]
    [0.9, -0.9]
    """

    def __init__(self, params: Any, lr: float = 1e-2, etas: tuple = (0.5, 1.2),
                 step_sizes: tuple = (1e-6, 50.0), **flags: Any):  # fmt: skip
        etaminus, etaplus = float(etas[0]), float(etas[1])
        if not 0.0 < etaminus < 1.0 < etaplus:
            raise InvalidArgumentError(
                f"Rprop: etas must satisfy 0 < etas[0] < 1 < etas[1], got {etas!r}"
            )
        if not float(lr) >= 0.0:
            raise InvalidArgumentError(f"Rprop: lr must be non-negative, got {lr!r}")
        defaults = _torch_defaults(
            "Rprop",
            flags,
            {
                "lr": lr,
                "etas": (etaminus, etaplus),
                "step_sizes": (float(step_sizes[0]), float(step_sizes[1])),
            },
            "lr etas step_sizes foreach maximize differentiable capturable",
        )
        super().__init__(params, defaults)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        etaminus, etaplus = group["etas"]
        low, high = group["step_sizes"]
        prev, step_size = state.get("prev"), state.get("step_size")
        if prev is None:
            prev, step_size = zeros_like(grad), full_like(grad, group["lr"])
        sign = (grad * prev).sign()
        factor = sign.mask_fill(sign.greater(0.0), etaplus)
        factor = factor.mask_fill(sign.lower(0.0), etaminus).mask_fill(sign.equal_elem(0.0), 1.0)
        step_size = (step_size * factor).clamp(low, high)
        grad = grad.mask_fill(factor.equal_elem(etaminus), 0.0)
        state["prev"], state["step_size"] = grad, step_size
        return value - grad.sign() * step_size, state


class ASGD(Optimizer):
    """Averaged stochastic gradient descent, as ``torch.optim.ASGD``: the weight decays by
    ``1 - lambd eta`` and steps by ``-eta g``; ``ax`` (the state's average) follows the weights
    from step ``t0`` on; ``eta = lr / (1 + lambd lr t)^alpha`` and ``mu = 1 / max(1, t - t0)``
    after each step, kept in torch's scalar dtype.

    >>> import retrograd as rg
    >>> w = rg.tensor([1.0]).require_grad()
    >>> opt = rg.optim.ASGD([w], lr=0.1, lambd=0.0)
    >>> opt.step((w * w).sum().backward())
    >>> round(w.item(), 6)
    0.8
    """

    def __init__(self, params: Any, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75,
                 t0: float = 1e6, weight_decay: float = 0.0, **flags: Any):  # fmt: skip
        if not float(lr) >= 0.0:
            raise InvalidArgumentError(f"ASGD: lr must be non-negative, got {lr!r}")
        if not float(weight_decay) >= 0.0:
            raise InvalidArgumentError(
                f"ASGD: weight_decay must be non-negative, got {weight_decay!r}"
            )
        defaults = _torch_defaults(
            "ASGD",
            flags,
            {
                "lr": lr,
                "lambd": float(lambd),
                "alpha": float(alpha),
                "t0": float(t0),
                "weight_decay": float(weight_decay),
            },
            "lr lambd alpha t0 weight_decay foreach maximize differentiable capturable",
        )
        super().__init__(params, defaults)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        lr, lambd = group["lr"], group["lambd"]
        step = state["step"]
        eta, mu, ax = state.get("eta"), state.get("mu"), state.get("ax")
        if ax is None:
            eta, mu, ax = _scalar(lr), 1.0, zeros_like(value)
        grad = _decayed(value, grad, group["weight_decay"])
        # (eta and mu as torch reads them, eta.item(): Python floats of the held values)
        eta, mu = float(eta), float(mu)
        if group.get("foreach"):
            # torch's multi-tensor form: the decay folded into the step, p - eta (g + lambd p),
            # and the average moved by one fused multiply-add even at mu = 1
            value = value.add(grad.add(value, alpha=lambd), alpha=-eta)
            ax = ax.add(value - ax, alpha=mu)
        else:
            value = (value * (1.0 - lambd * eta)).add(grad, alpha=-eta)
            ax = ax + (value - ax) * mu if mu != 1.0 else value
        state["ax"] = ax
        # torch's new values are torch.as_tensor(a Python float): of the default dtype, copied
        # into the state tensors whatever their dtype (a load casts them to the parameter's)
        if group.get("foreach"):
            state["eta"] = _foreach_eta(lr, lambd, group["alpha"], step)
        else:
            state["eta"] = _scalar(lr / ((1.0 + lambd * lr * step) ** group["alpha"]))
        state["mu"] = _scalar(1.0 / max(1.0, step - group["t0"]))
        return value, state


class Adafactor(Optimizer):
    """Adafactor (Shazeer and Stern), as ``torch.optim.Adafactor``: for a weight of two or more
    dimensions the second moment is kept factored, one row and one column statistic (memory
    ``O(n + m)`` for an ``n x m`` matrix), otherwise whole; the relative step size
    ``min(lr, 1/sqrt(t))`` is scaled by the weight's RMS (at least ``eps[1]``) and the update
    clipped to RMS ``d``. ``eps[0]`` defaults to the dtype's machine epsilon.

    >>> import retrograd as rg
    >>> w = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).require_grad()
    >>> opt = rg.optim.Adafactor([w], lr=0.01)
    >>> opt.step((w * w).sum().backward())
    >>> [round(v, 4) for v in w.reshape(-1).tolist()]
    [0.9788, 1.97, 2.9715, 3.9732]
    """

    def __init__(self, params: Any, lr: float = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple = (None, 1e-3), d: float = 1.0, weight_decay: float = 0.0,
                 *, maximize: bool = False, foreach: Any = None):  # fmt: skip
        if not float(lr) >= 0.0:
            raise InvalidArgumentError(f"Adafactor: lr must be non-negative, got {lr!r}")
        if not float(beta2_decay) <= 0.0:
            raise InvalidArgumentError(
                f"Adafactor: beta2_decay must be non-positive, got {beta2_decay!r}"
            )
        if eps[0] is not None and not eps[0] >= 0.0:
            raise InvalidArgumentError(f"Adafactor: eps[0] must be non-negative, got {eps!r}")
        if not eps[1] >= 0.0:
            raise InvalidArgumentError(f"Adafactor: eps[1] must be non-negative, got {eps!r}")
        if not float(d) >= 1.0:
            raise InvalidArgumentError(
                f"Adafactor: d (the clipping threshold) must be at least 1, got {d!r}"
            )
        defaults = {"lr": lr, "beta2_decay": float(beta2_decay),
                    "eps": (None if eps[0] is None else float(eps[0]), float(eps[1])),
                    "d": float(d), "weight_decay": float(weight_decay),
                    "foreach": foreach, "maximize": bool(maximize)}  # fmt: skip
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        """The base's checks, and a loaded group's ``beta2_decay`` non-positive as the
        constructor's (a positive one saved in a damaged state loaded, then overflowed in
        the second step with a bare ``OverflowError``)."""
        super()._check_group(group)
        decay = group.get("beta2_decay", -0.8)
        if not (isinstance(decay, int | float) and not isinstance(decay, bool) and decay <= 0.0):
            raise InvalidArgumentError(
                f"Adafactor: beta2_decay must be a non-positive number, got {decay!r}"
            )

    def state_shape(self, key: str, shape: tuple[int, ...]) -> tuple[int, ...]:
        if key == "row_var":
            return tuple(shape[:-1]) + (1,)
        if key == "col_var":
            return tuple(shape[:-2]) + (1, shape[-1])
        return tuple(shape)

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        lr, step = group["lr"], float(state["step"])
        eps1, eps2 = group["eps"]
        if eps1 is None:
            eps1 = finfo(value.dtype).eps
        one_minus_beta2 = step ** group["beta2_decay"]
        rho = min(lr, 1.0 / step**0.5)
        # torch reads the weight's RMS on the host before the decay, as here
        alpha = max(eps2, value.norm(2).item() / (value.numel() ** 0.5)) * rho
        if group["weight_decay"]:
            value = value * (1.0 - lr * group["weight_decay"])
        if grad.ndim > 1:
            row_var, col_var = state.get("row_var"), state.get("col_var")
            if row_var is None:
                row_var = zeros(
                    grad.shape[:-1] + (1,),
                    dtype=grad.dtype,
                    backend=grad.backend,
                    device=grad.device,
                )
                col_var = zeros(
                    grad.shape[:-2] + (1, grad.shape[-1]),
                    dtype=grad.dtype,
                    backend=grad.backend,
                    device=grad.device,
                )
            row_mean = grad.norm(2, dim=-1, keepdim=True).square() / grad.shape[-1]
            row_var = row_var.lerp(row_mean, one_minus_beta2)
            col_mean = grad.norm(2, dim=-2, keepdim=True).square() / grad.shape[-2]
            col_var = col_var.lerp(col_mean, one_minus_beta2)
            estimate = (row_var @ col_var) / row_var.mean(-2, keepdim=True).clamp(min=eps1)
            state["row_var"], state["col_var"] = row_var, col_var
        else:
            variance = state.get("variance")
            if variance is None:
                variance = zeros_like(grad)
            variance = variance.lerp(grad * grad, one_minus_beta2)
            estimate = variance
            state["variance"] = variance
        update = estimate.clamp(min=eps1 * eps1).rsqrt() * grad
        denom = max(1.0, update.norm(2).item() / ((update.numel() ** 0.5) * group["d"]))
        return value - update * (alpha / denom), state
