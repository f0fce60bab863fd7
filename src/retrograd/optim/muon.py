"""``Muon``: momentum orthogonalized by a Newton-Schulz iteration, as ``torch.optim.Muon``.

Muon (Jordan et al., 2024) updates a 2-d weight by its momentum's nearest semi-orthogonal
matrix, ``U V^T`` of the momentum's SVD ``U S V^T``, approximated by five steps of a quintic
Newton-Schulz iteration run in bfloat16 (the iteration's fixed point is loose on purpose: its
singular values land in about [0.7, 1.2], which trains as well as the exact one and costs five
pairs of matmuls). It is for the hidden layers' matrices; biases, embeddings and heads train
with AdamW beside it, as torch's documentation says. The update is torch's single-tensor
algorithm, operation for operation.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..tensor import Tensor, zeros_like
from .adaptive import _ascent
from .optimizers import Optimizer, State

__all__ = ["Muon"]

#: Keller Jordan's coefficients (a, b, c) of the quintic ``a X + b (X X^T) X + c (X X^T)^2 X``,
#: chosen for the steepest slope at zero that still converges near one: torch's defaults.
NEWTON_SCHULZ_COEFFICIENTS = (3.4445, -4.775, 2.0315)
LR_ADJUSTMENTS = (None, "original", "match_rms_adamw")


def zeropower_via_newtonschulz(
    update: Tensor, coefficients: tuple[float, float, float], steps: int, eps: float
) -> Tensor:
    """``update``'s orthogonalization, ``U S' V^T`` with ``S'`` near the identity, as torch's
    ``_zeropower_via_newtonschulz``: a wide matrix is iterated as it is, a tall one transposed
    (its Gram matrix is then the small one). The iteration runs in bfloat16, as torch's, where
    the backend has bfloat16 (``TorchBackend``); where it has none (``NumpyBackend``), in the
    update's own dtype, which is closer to the exact iteration than torch's, not equal to it.

    >>> import retrograd as rg
    >>> g = rg.tensor([[3.0, 0.0], [0.0, 0.5]])
    >>> [[round(v, 1) for v in row] for row in zeropower_via_newtonschulz(
    ...     g, NEWTON_SCHULZ_COEFFICIENTS, 5, 1e-7).float().tolist()]
    [[0.7, 0.0], [0.0, 1.0]]
    """
    a, b, c = coefficients
    tall = update.shape[0] > update.shape[1]
    try:
        ortho = update.bfloat16()
        wide = "float32"  # torch's bfloat16 addmm sums and scales in float32, rounds once
    except DTypeError:  # no bfloat16 on this backend
        ortho, wide = update, update.dtype
    if tall:
        ortho = ortho.T
    ortho = ortho / ortho.norm().clamp(min=eps)  # the spectral norm at most one
    low = ortho.dtype
    for _ in range(steps):
        gram = (ortho @ ortho.T).to(wide)
        gram_update = gram.addmm(gram, gram, beta=b, alpha=c).to(low).to(wide)
        ortho = ortho.to(wide).addmm(gram_update, ortho.to(wide), beta=a).to(low)
    return ortho.T if tall else ortho


def adjusted_lr(lr: float, adjustment: str | None, shape: tuple[int, ...]) -> float:
    """The rate an update of a ``shape`` matrix takes, so that updates of every shape have
    about one RMS: Keller Jordan's ``sqrt(max(1, rows / cols))`` (``"original"``, the
    default) or Moonshot's ``0.2 sqrt(max(rows, cols))``, which matches AdamW's RMS so that
    AdamW's rates carry over (``"match_rms_adamw"``).

    >>> adjusted_lr(0.02, None, (512, 128))
    0.04
    >>> round(adjusted_lr(0.02, "match_rms_adamw", (512, 128)), 4)
    0.0905
    """
    rows, cols = shape[:2]
    if adjustment is None or adjustment == "original":
        ratio = math.sqrt(max(1, rows / cols))
    elif adjustment == "match_rms_adamw":
        ratio = 0.2 * math.sqrt(max(rows, cols))
    else:
        ratio = 1.0
    return lr * ratio


class Muon(Optimizer):
    """Muon, as ``torch.optim.Muon``: ``B = mu B + (1 - mu) g`` (a ``lerp``), the update
    ``g + mu (B - g)`` (Nesterov) or ``B``, orthogonalized (:func:`zeropower_via_newtonschulz`),
    decoupled weight decay ``p = p (1 - lr wd)``, then ``p = p - lr' O`` with ``lr'`` from
    :func:`adjusted_lr`. Every parameter must be a matrix.

    >>> import retrograd as rg
    >>> w = rg.nn.Parameter(rg.ones(2, 3))
    >>> opt = rg.optim.Muon([w], lr=0.1, weight_decay=0.0)
    >>> opt.step((w * rg.tensor([[1.0, 0, 0], [0, 1.0, 0]])).sum().backward())
    >>> [[round(v, 2) for v in row] for row in w.tolist()]
    [[0.89, 1.0, 1.0], [1.0, 0.89, 1.0]]
    """

    counts_steps = False
    made_in_step = ("momentum_buffer",)

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_coefficients: tuple[float, float, float] = NEWTON_SCHULZ_COEFFICIENTS,
        eps: float = 1e-7,
        ns_steps: int = 5,
        adjust_lr_fn: str | None = None,
    ):
        if adjust_lr_fn not in LR_ADJUSTMENTS:
            raise InvalidArgumentError(
                f"Muon: adjust_lr_fn must be one of {LR_ADJUSTMENTS}, got {adjust_lr_fn!r}"
            )
        if len(tuple(ns_coefficients)) != 3:
            raise InvalidArgumentError(
                f"Muon: ns_coefficients must be three numbers (a, b, c), got {ns_coefficients!r}"
            )
        if not 0 <= int(ns_steps) < 100:
            raise InvalidArgumentError(f"Muon: ns_steps must be in [0, 100), got {ns_steps!r}")
        defaults = {
            "lr": lr,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "nesterov": bool(nesterov),
            "ns_coefficients": tuple(ns_coefficients),
            "eps": eps,
            "ns_steps": int(ns_steps),
            "adjust_lr_fn": adjust_lr_fn,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            for parameter in group["params"]:
                if parameter.ndim != 2:
                    raise ShapeError(
                        "Muon: only 2-d parameters (the hidden layers' matrices) are "
                        f"supported, found one of shape {tuple(parameter.shape)}; give "
                        "biases, embeddings and other parameters to AdamW"
                    )

    def _complex_update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        raise DTypeError(
            f"Muon: complex parameters are not supported (as in torch), got a {value.dtype} "
            f"parameter of shape {tuple(value.shape)}"
        )

    def update(self, value: Tensor, grad: Tensor, state: State, group: dict) -> tuple:
        state = dict(state)
        grad = _ascent(grad, group)
        momentum, lr, weight_decay = group["momentum"], group["lr"], group["weight_decay"]
        if isinstance(lr, Tensor):
            lr = lr.item()
        buffer = state.get("momentum_buffer")
        if buffer is None:
            buffer = zeros_like(grad)
        buffer = buffer.lerp(grad, 1.0 - momentum)
        direction = grad.lerp(buffer, momentum) if group["nesterov"] else buffer
        ortho = zeropower_via_newtonschulz(
            direction, group["ns_coefficients"], group["ns_steps"], group["eps"]
        )
        step = adjusted_lr(lr, group["adjust_lr_fn"], tuple(value.shape))
        value = value * (1.0 - lr * weight_decay)
        state["momentum_buffer"] = buffer
        return value.add(ortho.to(value.dtype), alpha=-step), state
