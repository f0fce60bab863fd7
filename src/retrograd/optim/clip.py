"""Gradient clipping by global norm, on the ``Gradients`` value.

The norm and the scale factor stay tensors on the gradients' backend: the clipping itself
makes no host round trip, so on a device backend it only queues work. The default return
value, a Python float as before, costs the one read of the norm; ``as_tensor=True`` returns
the 0-d tensor instead and reads nothing.
"""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor, zeros

__all__ = ["clip_grad_norm"]


def clip_grad_norm(
    grads: Any, parameters: Any, max_norm: float, eps: float = 1e-6, *, as_tensor: bool = False
) -> float | Tensor:
    """Scale the gradients of ``parameters`` in ``grads`` so their global L2 norm is at most
    ``max_norm``; return the norm before clipping.

    ``parameters`` is a module or an iterable of tensors. As
    ``torch.nn.utils.clip_grad_norm_``: the scale is ``max_norm / (norm + eps)`` clamped to at
    most 1, and the gradients in ``grads`` are replaced by the scaled ones. The norm is
    accumulated in float64 whatever the gradients' dtype; it comes back as a Python float, or
    with ``as_tensor`` as a 0-d float64 tensor on the gradients' backend (torch's return type),
    which needs no synchronisation with a device.

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
    if not present:
        return zeros((), "float64") if as_tensor else 0.0
    # One running float64 sum, added in parameter order: the values the per-parameter Python
    # floats summed to before, without reading each one on the host.
    squares = None
    for _, grad in present:
        square = grad.square().sum().cast("float64")
        squares = square if squares is None else squares + square
    total = squares.sqrt()
    # A factor of 1 leaves a gradient bit for bit as it is, so every gradient is multiplied
    # and no host-side "scale < 1" test is needed. Detached: with create_graph the gradients
    # are tracked, and the factor is a constant of the clipping, as a Python float was.
    factor = (float(max_norm) / (total + eps)).clamp(max=1.0).detach()
    cast = {}
    for parameter, grad in present:
        if grad.dtype not in cast:
            cast[grad.dtype] = factor.cast(grad.dtype)
        parameter.grad_replace(grads, grad * cast[grad.dtype])
    return total if as_tensor else float(total.item())
