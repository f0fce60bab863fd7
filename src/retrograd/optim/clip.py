"""Gradient clipping by global norm, on the ``Gradients`` value."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["clip_grad_norm"]


def clip_grad_norm(grads: Any, parameters: Any, max_norm: float, eps: float = 1e-6) -> float:
    """Scale the gradients of ``parameters`` in ``grads`` so their global L2 norm is at most
    ``max_norm``; return the norm before clipping.

    ``parameters`` is a module or an iterable of tensors. As
    ``torch.nn.utils.clip_grad_norm_``: the scale is ``max_norm / (norm + eps)`` when that is
    below 1, and the gradients in ``grads`` are replaced by the scaled ones.

    >>> import retrograd as rg
    >>> w = rg.tensor([3.0, 4.0]).require_grad()
    >>> grads = (w * w).sum().backward()          # gradient [6, 8], norm 10
    >>> clip_grad_norm(grads, [w], max_norm=1.0)
    10.0
    >>> [round(v, 3) for v in w.grad(grads).tolist()]
    [0.6, 0.8]
    """
    if hasattr(parameters, "parameters"):
        parameters = parameters.parameters()
    present = [(p, g) for p in parameters if (g := p.grad(grads)) is not None]
    squares = 0.0
    for _, grad in present:
        squares += float(grad.square().sum().item())
    total = math.sqrt(squares)
    scale = float(max_norm) / (total + eps)
    if scale < 1.0:
        for parameter, grad in present:
            parameter.grad_replace(grads, grad * scale)
    return total
