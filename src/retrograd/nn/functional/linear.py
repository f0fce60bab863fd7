"""``linear`` (one fused backend op), ``bilinear`` (a matrix product and a reduction) and
``embedding`` (a gather of rows)."""

from __future__ import annotations

import math

from ...errors import (
    DTypeError,
    KernelDTypeError,
    MixedDTypeError,
    PaddingIndexError,
    ShapeError,
    SizeMismatchError,
    check_bool,
)
from ...tensor import Tensor
from ...tensor.autocasting import autocast_op
from ...tensor.internal import (
    INT_DTYPES,
    TensorOp,
    apply,
    check_indices,
    shape_text,
    wrap,
)
from ._common import (
    _PLAIN_DTYPES,
    _as_tensor,
    _float_pair,
    _real,
)


# -- linear ---------------------------------------------------------------------------------------
def _matmul_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """torch's ``linear`` of complex or integer tensors: ``x @ weight.T + bias`` (a
    transpose, no conjugate), by ``matmul``, whose complex rules give the gradients (the
    fused kernel is of floats); the operands of one dtype, as torch's (its CPU ``addmm`` takes
    every integer dtype)."""
    operands = [t for t in (x, weight, bias) if t is not None]
    if not all(isinstance(t, Tensor) for t in operands) or len({t.dtype for t in operands}) > 1:
        got = ", ".join(getattr(t, "dtype", type(t).__name__) for t in operands)
        if all(isinstance(t, Tensor) for t in operands):  # (torch's RuntimeError)
            raise MixedDTypeError(
                f"linear: expected input, weight and bias of one dtype, got {got}"
            )
        raise DTypeError(f"linear: expected input, weight and bias of one dtype, got {got}")
    if weight.ndim not in (1, 2) or x.ndim == 0 or x.shape[-1] != weight.shape[-1]:
        raise ShapeError(
            f"linear: input {shape_text(x.shape)} does not fit weight {shape_text(weight.shape)} "
            "([out_features, in_features])"
        )
    out = x.matmul(weight.mT if weight.ndim == 2 else weight)
    return out if bias is None else out + bias


@autocast_op("linear")
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``, weight ``[out_features, in_features]`` as in PyTorch.

    >>> import retrograd as rg
    >>> linear(rg.ones((2, 3)), rg.ones((4, 3)), rg.zeros((4,))).shape
    retrograd.Size([2, 4])
    """
    if (
        isinstance(x, Tensor)
        and isinstance(weight, Tensor)
        and (bias is None or isinstance(bias, Tensor))
    ):
        out = _plain_linear(x, weight, bias)
        if out is not None:
            return out
    fn = "linear"
    if any(isinstance(t, Tensor) and t.is_complex() for t in (x, weight, bias)) or (
        isinstance(x, Tensor) and x.dtype in INT_DTYPES
    ):
        return _matmul_linear(x, weight, bias)
    x, weight = _float_pair(fn, x, weight, "weight", one_dtype=True)
    if weight.ndim == 1 and x.ndim and x.shape[-1] == weight.shape[0]:
        # as torch: a weight vector gives one output per row, unsqueezed; a bias then only
        # with a vector input, and 0-d
        if bias is None:
            return x.matmul(weight)
        bias = _float_pair(fn, x, bias, "bias", one_dtype=True)[1]
        if x.ndim == 1 and bias.ndim == 0:
            return x.matmul(weight) + bias
        raise ShapeError(
            f"{fn}: a weight vector takes a bias only as a 0-d one with a vector input; input "
            f"{shape_text(x.shape)}, weight {shape_text(weight.shape)}, bias "
            f"{shape_text(bias.shape)}"
        )
    if weight.ndim != 2 or x.ndim == 0 or x.shape[-1] != weight.shape[1]:
        features = x.shape[-1] if x.ndim else "no"
        expected = weight.shape[1] if weight.ndim == 2 else "a 2-d weight [out, in]"
        raise ShapeError(
            f"{fn}: input has {features} features but weight expects {expected}; input "
            f"{shape_text(x.shape)}, weight {shape_text(weight.shape)}"
        )
    lead = x.shape[:-1]
    if bias is not None:
        if isinstance(bias, Tensor) and bias.dtype != x.dtype:  # torch's addmm refuses it
            raise MixedDTypeError(
                f"{fn}: input and bias must have the same dtype, got input {x.dtype} "
                f"{shape_text(x.shape)} and bias {bias.dtype} {shape_text(bias.shape)}"
            )
        bias = _as_tensor(fn, x, bias, "bias")
        out_shape = (*lead, weight.shape[0])
        if bias.shape != (weight.shape[0],):
            # torch adds any bias that broadcasts to the output without growing it
            if not _broadcasts_to(bias.shape, out_shape):
                raise ShapeError(
                    f"{fn}: bias {shape_text(bias.shape)} does not broadcast to the output "
                    f"{shape_text(out_shape)} (a bias of {shape_text((weight.shape[0],))}, one "
                    "per output feature, or a shape that broadcasts to the output)"
                )
            plain = x.matmul(weight.transpose())
            return plain + bias
    # Flatten leading dimensions: one matrix product, whose weight gradient is one product too.
    # (the row count spelled out: ``-1`` cannot say it when there are no features)
    flat = x.reshape((math.prod(lead), x.shape[-1])) if x.ndim > 2 else x
    if x.ndim >= 2 and (bias is None or bias.dtype == x.dtype):
        # one op, PyTorch's addmm: the bias lands in the product's own output, no second array
        empty = bias is None
        bias = wrap(x, x.backend.zeros((0,), x.dtype, x.device)) if empty else bias
        out = apply(_LINEAR, (flat, weight, bias))
    else:  # a vector input, or a bias given as numbers (lifted to a dtype of its own)
        out = flat.matmul(weight.transpose())
        if bias is not None:
            out = out + bias
    if x.ndim > 2:
        out = out.reshape((*lead, weight.shape[0]))
    return out


def _plain_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor | None:
    """A layer's call, the one every forward makes: a float32/float64 input of two or more
    dims, a 2-d weight and a ``[out]`` bias (or none), all of the input's dtype, backend and
    device. The ops :func:`linear`'s general path records for it (a flattening reshape where
    the input has more than two dims, the fused op, the reshape back), without that path's
    checks, lifts and promotions, which are no-ops here (about a third of a call's Python
    time, 7 December). None for any other call: the general path takes it, and its errors."""
    dtype = x.dtype
    if dtype not in _PLAIN_DTYPES or weight.dtype != dtype:
        return None
    backend, device = x.backend, x.device
    if weight.backend is not backend or weight.device is not device:
        return None
    shape, weight_shape = x.shape, weight.shape
    if len(shape) < 2 or len(weight_shape) != 2 or shape[-1] != weight_shape[1]:
        return None
    if bias is None:
        bias = wrap(x, backend.zeros((0,), dtype, device))
    elif (
        bias.dtype != dtype
        or bias.backend is not backend
        or bias.device is not device
        or bias.shape != (weight_shape[0],)
    ):
        return None
    if len(shape) == 2:
        return apply(_LINEAR, (x, weight, bias))
    lead = shape[:-1]
    flat = x.reshape((math.prod(lead), shape[-1]))
    return apply(_LINEAR, (flat, weight, bias)).reshape((*lead, weight_shape[0]))


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


_LINEAR = TensorOp("linear")


@autocast_op("bilinear")
def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y[..., o] = x1 @ weight[o] @ x2 + bias[o]``, weight ``[out, in1, in2]`` as torch's;
    the inputs ``[*, in1]`` and ``[*, in2]`` share their leading dimensions.

    >>> import retrograd as rg
    >>> bilinear(rg.ones((2, 3)), rg.ones((2, 4)), rg.ones((5, 3, 4))).shape
    retrograd.Size([2, 5])
    """
    fn = "bilinear"
    x1, x2 = _float_pair(fn, input1, input2, "input2", one_dtype=True)
    weight = _float_pair(fn, x1, weight, "weight", one_dtype=True)[1]
    shapes = (
        f"input1 {shape_text(x1.shape)}, input2 {shape_text(x2.shape)}, weight "
        f"{shape_text(weight.shape)}"
    )
    if (
        x1.ndim == 0
        or x1.shape[:-1] != x2.shape[:-1]
        or weight.ndim != 3
        or weight.shape[1:] != (x1.shape[-1], x2.shape[-1])
    ):
        raise ShapeError(
            f"{fn}: expected input1 [*, in1], input2 [*, in2] with the same leading "
            f"dimensions and weight [out, in1, in2]; {shapes}"
        )
    out_features, in1, in2 = weight.shape
    lead = x1.shape[:-1]
    if x1.dtype in ("float32", "float64") and (
        x1.requires_grad or x2.requires_grad or weight.requires_grad
    ):
        # one op of the op table whose rule reads the inputs and the weight, as torch's
        # _trilinear: the composite below held the weight's permuted copy and x1's product
        # with it (2.35x torch's bytes; 7 December). Its arithmetic is the composite's.
        out = x1._apply("bilinear", (x1, x2, weight))
    else:
        left = x1.reshape((-1, in1)).matmul(weight.permute((1, 0, 2)).reshape((in1, -1)))
        pairs = left.reshape((-1, out_features, in2)) * x2.reshape((-1, 1, in2))
        out = pairs.sum_dim(2).reshape((*lead, out_features))
    if bias is not None:
        bias = _as_tensor(fn, x1, bias, "bias")
        if bias.shape != (out_features,):
            raise ShapeError(
                f"{fn}: bias must have shape [{out_features}]; bias {shape_text(bias.shape)}"
            )
        out = out + bias
    return out


# -- embedding ------------------------------------------------------------------------------------
def embedding(
    indices: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` ``[num_embeddings, dim]`` at the int64 ``indices`` (any shape):
    ``[*indices.shape, dim]``. The row at ``padding_idx`` gets no gradient, as in PyTorch.
    ``sparse=True`` is taken and gives the dense gradient: the values torch's sparse one holds,
    ``grad.to_dense()`` (retrograd has no sparse tensors; scripts that ask for them, to step
    ``SparseAdam`` or ``SGD``, train the same).

    >>> import retrograd as rg
    >>> embedding(rg.tensor([[0, 2]], dtype="int64"), rg.eye(3)).tolist()
    [[[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]]
    """
    fn = "embedding"
    scale_grad_by_freq = check_bool(fn, scale_grad_by_freq, "scale_grad_by_freq")
    sparse = check_bool(fn, sparse, "sparse")
    if not isinstance(weight, Tensor):
        raise DTypeError(f"{fn}: weight must be a tensor, got {type(weight).__name__}")
    num_rows = weight.shape[0] if weight.ndim else 0
    if padding_idx is not None and not -num_rows <= padding_idx < num_rows:
        raise PaddingIndexError(  # (torch's AssertionError, before anything else is read)
            f"{fn}: padding_idx {padding_idx} is out of range for {num_rows} embeddings"
        )
    indices = _as_tensor(fn, weight, indices, "indices")
    if indices.dtype == "int32":  # (torch's embedding takes Long or Int indices)
        indices = indices.long()
    if indices.dtype != "int64":
        raise KernelDTypeError(  # (torch's RuntimeError)
            f"{fn}: indices must be int64 or int32 (as torch's), got {indices.dtype}"
        )
    if weight.ndim != 2:
        raise SizeMismatchError(  # (torch's RuntimeError: "'weight' must be 2-D")
            f"{fn}: weight must be 2-d [num_embeddings, dim], got {shape_text(weight.shape)}"
        )
    count = weight.shape[0]

    def out_of_range(bad: int | None) -> str:
        index = "an index" if bad is None else f"index {bad}"
        return (
            f"{fn}: {index} is out of range for {count} embeddings; indices "
            f"{shape_text(indices.shape)}, weight {shape_text(weight.shape)}"
        )

    check_indices(indices, count, out_of_range)
    # (1-d indices, a position embedding's, are their own flattening: no reshape recorded)
    flat = indices if indices.ndim == 1 else indices.reshape((-1,))
    if max_norm is not None:
        _renorm_rows(weight, flat, float(_real(fn, "max_norm", max_norm)), norm_type)
    # the op ``weight.select(0, flat)`` records, without that method's second range check of
    # the indices checked above (a backend op of its own: a device read on the torch backend)
    rows = apply("select", (weight, flat), (0,))
    if scale_grad_by_freq:
        # the value unchanged (``rows - held`` is exactly 0), each occurrence's gradient
        # divided by how often its index occurs in ``indices``, as torch's
        held = rows.detach()
        ones = held.new_ones((flat.shape[0],))
        counts = held.new_zeros((count,)).index_add(0, flat, ones).select(0, flat)
        rows = held + (rows - held) / counts.reshape((-1, 1))
    if padding_idx is not None:
        padding = (flat == (padding_idx % count)).reshape((-1, 1))
        rows = rows.mask_where(padding, apply("select", (weight.detach(), flat), (0,)))
    return rows if indices.ndim == 1 else rows.reshape((*indices.shape, weight.shape[1]))


def _renorm_rows(weight: Tensor, flat: Tensor, max_norm: float, norm_type: float) -> None:
    """torch's ``embedding_renorm_``: each row of ``weight`` that ``flat`` looks up and whose
    ``norm_type``-norm passes ``max_norm`` is scaled, in place and untracked, to
    ``max_norm / (norm + 1e-7)`` times itself."""
    held = weight.detach()
    norms = held.norm(p=norm_type, dim=1, keepdim=True)
    used = held.new_zeros((held.shape[0],)).index_fill(0, flat, 1.0).reshape((-1, 1)) > 0
    scale = (max_norm / (norms + 1e-7)).where(used & (norms > max_norm), 1.0)
    # through detach(), as torch's renorm runs under no_grad: a weight computed in the graph
    # keeps its place there (the gradient passes to what it was computed from), a leaf
    # stays a leaf
    weight.detach().copy_(held * scale)


def one_hot(input: Tensor, num_classes: int = -1) -> Tensor:  # noqa: A002 (torch's name)
    """int64 ``[*, num_classes]``: 1 at each index of ``tensor`` (int64), 0 elsewhere;
    ``num_classes=-1`` takes one more than the largest index (a host read, as in torch).
    Unlike the method (Burn's, which also takes a float tensor of class values), torch's
    function takes int64 indices only. (torch's documentation names the first argument
    ``tensor``; its function takes ``input=``.)"""
    if input.dtype != "int64":
        raise KernelDTypeError(  # (torch's RuntimeError)
            f"one_hot: expected an int64 tensor of indices, got {input.dtype}"
        )
    return input.one_hot(num_classes)
