"""``torch.autograd.grad`` and ``torch.autograd.backward`` over retrograd's gradients-as-a-
value: the weighted sum of the outputs, one backward, each input's gradient read from the
``Gradients`` it returns. :mod:`.functional` builds its transforms on :func:`grad`."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ..autodiff import Gradients
from ..autodiff.grad_mode import recording
from ..autodiff.graph import CAPTURED
from ..errors import AutodiffError, DTypeError, InvalidArgumentError, ShapeError
from ..tensor import Tensor
from ..tensor.core import refuse_mixed_complex_grad, refuse_untracked_inputs
from ..tensor.functions import sum as _sum
from .anomaly_mode import check_nan_gradients, is_anomaly_enabled

__all__ = ["backward", "grad"]


def grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...] | dict[str, Tensor | None]:
    """The gradients of ``outputs`` (a tensor or a sequence) with respect to ``inputs``
    (a tensor, a sequence, or a dict of named tensors: then a dict of their gradients by
    name), weighted by ``grad_outputs`` (ones for a scalar output), as a
    tuple; an input the outputs do not depend on raises unless ``allow_unused`` (then
    ``None``, or zeros with ``materialize_grads``). ``create_graph`` records the gradients'
    own graph (for a gradient penalty); ``retain_graph`` defaults to it, as in torch.
    ``only_inputs``, deprecated in torch and ignored there, is accepted and ignored (WGAN-GP
    code still passes it)."""
    if isinstance(inputs, Mapping):  # torch's named inputs: the gradients by the same names
        named = dict(inputs)
        options = (retain_graph, create_graph, only_inputs, allow_unused, is_grads_batched)
        found = grad(outputs, list(named.values()), grad_outputs, *options, materialize_grads)
        return dict(zip(named, found))
    if not only_inputs:
        warnings.warn(
            "only_inputs argument is deprecated and is ignored now (defaults to True). To "
            "accumulate gradient for other parts of the graph, please use torch.autograd.backward.",
            stacklevel=2,
        )
    if materialize_grads and allow_unused is False:  # (torch's refusal: the two disagree)
        raise InvalidArgumentError(
            "autograd.grad: expected allow_unused to be True or not passed when "
            "materialize_grads=True, but got: allow_unused=False"
        )
    ins = _tensors("autograd.grad", "inputs", inputs)
    if not ins:  # torch's refusal (it returned an empty tuple here, a typo's silent answer)
        raise AutodiffError("autograd.grad: the inputs argument cannot be empty")
    constant = [i for i, x in enumerate(ins) if not x.requires_grad]
    if constant:  # torch's refusal, allow_unused or not: no gradient can flow to a constant
        raise AutodiffError(
            f"autograd.grad: one of the differentiated tensors does not require grad (input "
            f"{constant[0]}, of shape {tuple(ins[constant[0]].shape)}); call "
            "requires_grad_() on it, or leave it out of the inputs"
        )
    if is_grads_batched:
        options = (retain_graph, create_graph, allow_unused, materialize_grads)
        return _batched_grad(outputs, inputs, grad_outputs, *options)
    total = _weighted_total("autograd.grad", outputs, grad_outputs, create_graph)
    retain = create_graph if retain_graph is None else retain_graph
    # torch differentiates with respect to any tensor of the graph, not only leaves (MAML's
    # fast weights ``w - lr * g`` after the first inner step): their gradients are kept for
    # this backward only
    # (a retain_grad() one's too: what autograd.grad returns is captured, before the tensor's
    # hooks when its step runs, where its retained .grad would be the hooked one)
    kept = [x for x in ins if x.requires_grad and not x.is_leaf]
    retained = [x.retains_grad for x in kept]
    for x in kept:
        x._backend.retain_grad(x._prim, CAPTURED)
    try:
        # toward the inputs only, as torch's engine: the graph below them is neither walked
        # nor consumed (first-order MAML differentiates through it again later)
        wanted = [x for x in ins if x.requires_grad]
        grads = total._backward(None, retain, create_graph, wanted)
    finally:
        for x, was in zip(kept, retained):
            x._backend.retain_grad(x._prim, was)
    results: list[Tensor | None] = []
    for x in ins:
        g = x.grad(grads)
        if g is not None and g.backend is not x.backend and x.backend.is_autodiff:
            g = Tensor.from_inner(g, backend=x.backend)
        if g is None:
            if not allow_unused and not materialize_grads:
                raise AutodiffError(
                    "autograd.grad: one of the differentiated tensors appears to not have been "
                    "used in the graph (or does not require grad); set allow_unused=True if "
                    "this is the desired behavior"
                )
            if materialize_grads:
                from ..tensor import zeros_like

                # torch's zeros are a fresh leaf recorded when the graph is created: a
                # function of them differentiates (to None) as a function of any gradient
                g = zeros_like(x, requires_grad=create_graph)
        results.append(g)
    check_nan_gradients("autograd.grad", ((f"input {i}", g) for i, g in enumerate(results)))
    return tuple(results)


def _batched_grad(
    outputs: Any,
    inputs: Any,
    grad_outputs: Any,
    retain_graph: bool | None,
    create_graph: bool,
    allow_unused: bool | None,
    materialize_grads: bool,
) -> tuple[Tensor | None, ...]:
    """torch's ``is_grads_batched=True``: each ``grad_outputs`` tensor has a leading batch
    dimension, and each input's gradient is the stack of the gradients for its rows (one
    backward per row, where torch vmaps the backward; the values are the same): a Jacobian by
    ``grad(y, x, torch.eye(n), is_grads_batched=True)``."""
    op = "autograd.grad"
    outs = _tensors(op, "outputs", outputs)
    if grad_outputs is None:
        raise AutodiffError(f"{op}: is_grads_batched=True needs grad_outputs (one batch each)")
    weights = _tensors(op, "gradients", grad_outputs)
    if len(weights) != len(outs):
        raise ShapeError(f"{op}: {len(weights)} gradients given for {len(outs)} outputs")
    for out, weight in zip(outs, weights):
        if weight.ndim != out.ndim + 1 or tuple(weight.shape[1:]) != tuple(out.shape):
            raise ShapeError(
                f"{op}: with is_grads_batched=True a gradient of shape [B, *output.shape] is "
                f"expected; got {list(weight.shape)} for an output of shape {list(out.shape)}"
            )
    sizes = {w.shape[0] for w in weights}
    if len(sizes) != 1:
        raise ShapeError(f"{op}: the gradients' batch sizes differ: {sorted(sizes)}")
    (size,) = sizes
    ins = _tensors(op, "inputs", inputs)
    rows = []
    retain = create_graph if retain_graph is None else retain_graph
    for i in range(size):
        last = i == size - 1  # the graph kept for the next row, then as retain_graph says
        row = [w[i] for w in weights]
        keep = retain if last else True
        unused = allow_unused or materialize_grads
        rows.append(grad(outs, ins, row, keep, create_graph, allow_unused=unused))
    from ..tensor import stack, zeros_like

    results: list[Tensor | None] = []
    for j, x in enumerate(ins):
        column = [row[j] for row in rows]
        if all(g is None for g in column):
            # torch's materialize_grads gives an unused input zeros of its own shape here
            results.append(zeros_like(x) if materialize_grads else None)
            continue
        results.append(stack([zeros_like(x) if g is None else g for g in column], 0))
    return tuple(results)


def _weighted_total(op: str, outputs: Any, weights: Any, create_graph: bool = False) -> Tensor:
    """``sum_k sum(outputs[k] * weights[k])`` (a weight may be ``None`` for a one-element
    output): one tensor whose backward gives the weighted gradients of all the outputs. The
    weights are constants of the backward unless ``create_graph``: then, as torch's, the
    gradients are differentiable with respect to them too (the double-backward trick of
    ``jvp``)."""
    outs = _tensors(op, "outputs", outputs)
    if weights is None:
        weights = [None] * len(outs)
    else:
        weights = _tensors(op, "gradients", weights, none_allowed=True)
    if len(weights) != len(outs):
        raise ShapeError(f"{op}: {len(weights)} gradients given for {len(outs)} outputs")
    if not outs:
        raise AutodiffError(f"{op}: no tensors to differentiate")
    # the weighted sum is the seed of this backward, not a step of the caller's computation:
    # it is recorded even under no_grad (latent diffusion's CheckpointFunction calls
    # autograd.grad in its backward, which runs without grad, on outputs it recomputed under
    # enable_grad), as torch's engine seeds outputs whatever the grad mode
    with recording():
        return _weighted_sum(op, outs, weights, create_graph)


def _weighted_sum(op: str, outs: list, weights: list, create_graph: bool) -> Tensor:
    terms = []
    for out, weight in zip(outs, weights):
        if weight is None:
            if out.is_complex():
                raise AutodiffError(
                    f"{op}: grad can be implicitly created only for real scalar outputs, got "
                    f"{out.dtype}; pass the output's gradient"
                )
            if out.numel() != 1:
                raise AutodiffError(
                    f"{op}: grad can be implicitly created only for scalar outputs, "
                    f"got shape {list(out.shape)}; pass the output's gradient"
                )
            terms.append(_sum(out))
        else:
            if tuple(weight.shape) != tuple(out.shape):
                raise ShapeError(
                    f"{op}: gradient of shape {list(weight.shape)} given for an output of shape "
                    f"{list(out.shape)}"
                )
            refuse_mixed_complex_grad(op, out, weight)
            weight = weight if create_graph else weight.detach()
            if weight._inference:
                # torch's engine takes a gradient made in inference_mode as it is; multiplied
                # in here, it was refused as an inference tensor saved for backward (round 93)
                weight = weight.clone()
            if out.is_complex():
                # the real loss whose torch gradient with respect to ``out`` is ``weight``
                # (the conjugate Wirtinger convention): Re(sum(out * conj(weight)))
                terms.append(_sum((out * weight.conj()).real))
            else:
                terms.append(_sum(out * weight))
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _tensors(op: str, what: str, value: Any, none_allowed: bool = False) -> list[Any]:
    """``value`` (a tensor or a sequence of them; ``None`` entries where ``none_allowed``) as
    a list, anything else refused naming ``op``: a str or a number would otherwise fail deep
    inside the backward with an ``AttributeError``."""
    items = [value] if isinstance(value, Tensor) else value
    if isinstance(items, str | bytes) or not hasattr(items, "__iter__"):
        raise DTypeError(f"{op}: {what} must be a tensor or a sequence of tensors, got {value!r}")
    items = list(items)
    for item in items:
        if not (isinstance(item, Tensor) or (none_allowed and item is None)):
            raise DTypeError(
                f"{op}: {what} must be a tensor or a sequence of tensors, got an element of "
                f"type {type(item).__name__}"
            )
    return items


def backward(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    grad_variables: Any = None,
    inputs: Any = None,
) -> Gradients:
    """torch's ``torch.autograd.backward(tensors, grad_tensors)``: backward from each tensor,
    weighted by its ``grad_tensors`` entry (none for a one-element tensor). Gradients are a
    value here, not fields on the tensors: this returns the ``Gradients`` (read with
    ``x.grad(grads)``) instead of accumulating into ``x.grad``. ``inputs`` (torch: accumulate
    only into these) is accepted; their gradients in the result are the same.

    >>> import retrograd as rg
    >>> x = rg.tensor([1.0, 2.0]).require_grad()
    >>> grads = rg.autograd.backward([x * x], [rg.tensor([1.0, 10.0])])
    >>> x.grad(grads).tolist()
    [2.0, 40.0]
    """
    if grad_variables is not None:
        if grad_tensors is not None:
            raise AutodiffError(
                "autograd.backward: 'grad_tensors' and 'grad_variables' (deprecated) both given; "
                "use 'grad_tensors' only"
            )
        grad_tensors = grad_variables
    if inputs is not None:  # torch's refusals; the gradients given are the same
        refuse_untracked_inputs(
            "autograd.backward", _tensors("autograd.backward", "inputs", inputs)
        )
    total = _weighted_total("autograd.backward", tensors, grad_tensors, create_graph)
    retain = create_graph if retain_graph is None else retain_graph
    grads = total.backward(retain_graph=retain, create_graph=create_graph)
    if is_anomaly_enabled():
        check_nan_gradients(
            "autograd.backward",
            (
                (f"the tensor of node {node}", Tensor(value, grads.backend, grads.device))
                for node, value in grads.values.items()
            ),
        )
    return grads
