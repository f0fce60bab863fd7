"""torch's ``torch.autograd`` names over retrograd's gradients-as-a-value: ``Variable``,
``grad`` and ``inference_mode``.

``Variable(t, requires_grad=False)`` is the tensor itself (torch deprecated the wrapper long
ago: a tensor is a variable); with ``requires_grad=True`` a leaf that requires grad.
``grad(outputs, inputs)`` returns the gradients of ``outputs`` with respect to ``inputs``, as
torch's does: it runs ``backward`` on the sum of the outputs (weighted by ``grad_outputs``)
and reads each input's gradient from the result. The inputs must be leaves that require grad
or tensors whose gradient is retained (``retain_grad()``) before the outputs are computed.

>>> import retrograd as rg
>>> x = rg.autograd.Variable(rg.tensor([1.0, 2.0]), requires_grad=True)
>>> rg.autograd.grad((x * x).sum(), x)[0].tolist()
[2.0, 4.0]
"""

from __future__ import annotations

from typing import Any

from .autodiff import no_grad
from .errors import AutodiffError, ShapeError
from .tensor import Tensor
from .tensor.functions import sum as _sum

__all__ = ["Variable", "grad", "inference_mode"]


def Variable(data: Any, requires_grad: bool = False, volatile: bool = False) -> Tensor:  # noqa: N802 (torch's name)
    """The tensor ``data`` itself (made a leaf that requires grad with ``requires_grad``)."""
    if not isinstance(data, Tensor):
        from .tensor import tensor

        data = tensor(data)
    if requires_grad and not data.is_require_grad():
        data = data.detach() if data.requires_grad else data
        data.require_grad()
    return data


def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` (a tensor or a sequence) with respect to ``inputs``
    (a tensor or a sequence), weighted by ``grad_outputs`` (ones for a scalar output), as a
    tuple; an input the outputs do not depend on raises unless ``allow_unused`` (then
    ``None``, or zeros with ``materialize_grads``). ``create_graph`` records the gradients'
    own graph (for a gradient penalty); ``retain_graph`` defaults to it, as in torch."""
    if is_grads_batched:
        raise AutodiffError("autograd.grad: is_grads_batched is not supported")
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None:
        weights: list[Any] = [None] * len(outs)
    elif isinstance(grad_outputs, Tensor):
        weights = [grad_outputs]
    else:
        weights = list(grad_outputs)
    if len(weights) != len(outs):
        raise ShapeError(f"autograd.grad: {len(weights)} grad_outputs for {len(outs)} outputs")
    terms = []
    for out, weight in zip(outs, weights):
        if weight is None:
            if out.numel() != 1:
                raise AutodiffError(
                    f"autograd.grad: grad can be implicitly created only for scalar outputs, "
                    f"got shape {list(out.shape)}; pass grad_outputs"
                )
            terms.append(_sum(out))
        else:
            terms.append(_sum(out * weight.detach()))
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    retain = create_graph if retain_graph is None else retain_graph
    grads = total.backward(retain_graph=retain, create_graph=create_graph)
    results: list[Tensor | None] = []
    for x in ins:
        g = x.grad(grads)
        if g is not None and g.backend is not x.backend and x.backend.is_autodiff:
            g = Tensor.from_inner(g, backend=x.backend)
        if g is None:
            if not allow_unused and not materialize_grads:
                raise AutodiffError(
                    "autograd.grad: one of the differentiated tensors appears to not have been "
                    "used in the graph (or is not a leaf requiring grad, nor retain_grad()); "
                    "set allow_unused=True if this is the desired behavior"
                )
            if materialize_grads:
                from .tensor import zeros_like

                g = zeros_like(x)
        results.append(g)
    return tuple(results)


class inference_mode(no_grad):  # noqa: N801 (torch's name)
    """torch's ``inference_mode``: nothing is recorded in the block (``rg.no_grad``);
    ``inference_mode(False)`` records as usual. A context manager and a decorator."""

    def __init__(self, mode: bool = True):
        super().__init__()
        self._target = not mode
