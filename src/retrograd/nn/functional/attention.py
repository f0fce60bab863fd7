"""``scaled_dot_product_attention``: the fused backend op, or ordinary ops for a float mask
that needs a gradient."""

from __future__ import annotations

import math
import numbers

import numpy as np

from ...backends import check_viable_backend
from ...errors import (
    InvalidArgumentError,
    MixedDTypeError,
    SizeMismatchError,
)
from ...tensor import Tensor
from ...tensor.autocasting import autocast_op
from ...tensor.internal import (
    TensorOp,
    apply,
    shape_text,
    wrap,
)
from ..attention.bias import CausalBias
from ._common import (
    _PLAIN_DTYPES,
    _as_tensor,
    _float_input,
)

# -- attention -------------------------------------------------------------------------------------
_ATTENTION = TensorOp("scaled_dot_product_attention", kernel="attention")


@autocast_op("scaled_dot_product_attention")
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """``dropout(softmax(query @ key^T * scale + mask)) @ value``, PyTorch's function.

    ``query`` ``[..., L, E]``, ``key`` ``[..., S, E]``, ``value`` ``[..., S, Ev]`` whose
    leading dimensions broadcast (``enable_gqa``: key and value heads, dim -3, repeated to the
    query's, grouped-query attention); ``attn_mask`` broadcastable to ``[..., L, S]``: bool
    keeps the keys where it is true, float is added to the scores; ``is_causal`` keeps key
    ``j <= i`` for query ``i`` (top-left aligned, as PyTorch; with ``attn_mask`` too, both
    apply, as torch 2.13's fused path does though its docs say it raises); ``scale``
    defaults to ``1 / sqrt(E)``; ``dropout_p`` drops probabilities from the seeded generator
    (``rg.seed``). One fused op (the backend's ``attention``): backward keeps the output and
    each row's log-sum-exp, never the ``[..., L, S]`` probabilities. A float mask that requires
    a gradient gets one: the attention is then composed of ordinary ops.
    """
    fn = "scaled_dot_product_attention"
    check_viable_backend(fn)
    if (
        attn_mask is None
        and type(dropout_p) in (float, int)
        and dropout_p == 0
        and enable_gqa is False
        and (is_causal is True or is_causal is False)
        and (scale is None or type(scale) is float)
        and isinstance(query, Tensor)
        and isinstance(key, Tensor)
        and isinstance(value, Tensor)
    ):
        out = _plain_attention(query, key, value, is_causal, scale)
        if out is not None:
            return out
    if isinstance(attn_mask, CausalBias):  # torch.nn.attention.bias's causal masks
        attn_mask = attn_mask.materialize()
    q = _float_input(fn, query)
    k, v = (_as_tensor(fn, q, t, name) for t, name in ((key, "key"), (value, "value")))
    shapes = f"query {shape_text(q.shape)}, key {shape_text(k.shape)}, value {shape_text(v.shape)}"
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise SizeMismatchError(f"{fn}: query, key and value need at least 2 dims; {shapes}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise MixedDTypeError(f"{fn}: query, key and value must have one float dtype; {shapes}")
    ndim = max(q.ndim, k.ndim, v.ndim)
    if q.ndim != ndim or k.ndim != ndim or v.ndim != ndim:  # torch broadcasts them, as matmul
        q, k, v = (t.reshape((1,) * (ndim - t.ndim) + t.shape) for t in (q, k, v))
    if q.ndim == 2:  # unbatched [L, E] (torch's): the kernels take a leading dimension
        options = (attn_mask, dropout_p, is_causal, scale, enable_gqa)
        batched = (t.unsqueeze(0) for t in (q, k, v))
        return scaled_dot_product_attention(*batched, *options).squeeze(0)
    if enable_gqa and q.ndim >= 3:
        heads = q.shape[-3]
        if any(t.shape[-3] == 0 or heads % t.shape[-3] for t in (k, v)):
            raise SizeMismatchError(
                f"{fn}: with enable_gqa the key and value heads (dim -3) must divide the "
                f"query's; {shapes}"
            )
        k, v = (t.repeat_interleave(heads // t.shape[-3], dim=-3) for t in (k, v))
    try:  # torch broadcasts the leading dimensions, as matmul does
        lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    except ValueError:
        lead = None
    if lead is not None:
        q, k, v = (t if t.shape[:-2] == lead else t.expand(lead + t.shape[-2:]) for t in (q, k, v))
    length, source = q.shape[-2], k.shape[-2]
    if (
        k.shape[:-2] != q.shape[:-2]
        or v.shape[:-2] != q.shape[:-2]
        or k.shape[-1] != q.shape[-1]
        or v.shape[-2] != source
    ):
        raise SizeMismatchError(
            f"{fn}: expected query [..., L, E], key [..., S, E] and value [..., S, Ev] with "
            f"equal leading dimensions; {shapes}"
        )
    if not isinstance(dropout_p, numbers.Real) or not 0.0 <= dropout_p <= 1.0:
        raise InvalidArgumentError(f"{fn}: dropout_p must be between 0 and 1, got {dropout_p!r}")
    if not source:  # no keys: torch's zeros (an empty sum of values), composed for gradients
        return q.matmul(k.transpose(-2, -1)).matmul(v)
    # no features (E = 0): every score is 0 whatever the scale (torch scales q and k, empty)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    scale = float(scale)
    empty = wrap(q, q.backend.zeros((0,), q.dtype, q.device))
    mask = empty
    if attn_mask is not None:
        mask = _as_tensor(fn, q, attn_mask, "attn_mask")
        target = (*q.shape[:-2], length, source)
        try:
            broadcast = _broadcast_shape(mask.shape, target)
        except ValueError:
            broadcast = None
        if broadcast != target:
            raise SizeMismatchError(
                f"{fn}: attn_mask {shape_text(mask.shape)} does not broadcast to the scores "
                f"{shape_text(target)}; {shapes}"
            )
        if mask.dtype == "bool":
            mask = wrap(q, q.backend.zeros(mask.shape, q.dtype, q.device)).mask_fill(
                ~mask, -math.inf
            )
        elif mask.dtype in ("float32", q.dtype):  # torch's: bool, float32 or the query's
            mask = mask.cast(q.dtype)
        else:
            raise MixedDTypeError(
                f"{fn}: attn_mask must be bool, float32 or of the query's dtype {q.dtype}, got "
                f"{mask.dtype}; {shapes}"
            )
        mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)
    drop = empty
    if dropout_p == 1.0:
        drop = wrap(q, q.backend.zeros((*q.shape[:-2], length, source), q.dtype, q.device))
    elif dropout_p > 0.0:
        keep = wrap(
            q, q.backend.bernoulli((*q.shape[:-2], length, source), 1.0 - dropout_p, q.device)
        )
        drop = keep.cast(q.dtype) * (1.0 / (1.0 - dropout_p))
    if mask.requires_grad:
        return _composed_attention(q, k, v, mask, drop, scale, is_causal)
    out, _ = apply(_ATTENTION, (q, k, v, mask, drop), (scale, bool(is_causal)))
    return out


def _plain_attention(
    q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: float | None
) -> Tensor | None:
    """A model's call, the one every forward makes: query, key and value of three or more
    dims, one float32/float64 dtype, one backend and device, equal leading dimensions, at
    least one key, no mask, no dropout. The one op :func:`scaled_dot_product_attention`'s
    general path records for it, without that path's checks, lifts and broadcasts, which
    are no-ops here. None for any other call: the general path takes it, and its errors."""
    dtype = q.dtype
    if dtype not in _PLAIN_DTYPES or k.dtype != dtype or v.dtype != dtype:
        return None
    backend, device = q.backend, q.device
    if (
        k.backend is not backend
        or v.backend is not backend
        or k.device is not device
        or v.device is not device
    ):
        return None
    q_shape, k_shape, v_shape = q.shape, k.shape, v.shape
    if (
        len(q_shape) < 3
        or k_shape[:-2] != q_shape[:-2]
        or v_shape[:-2] != q_shape[:-2]
        or len(k_shape) != len(q_shape)
        or len(v_shape) != len(q_shape)
        or k_shape[-1] != q_shape[-1]
        or v_shape[-2] != k_shape[-2]
        or not k_shape[-2]
    ):
        return None
    if scale is None:
        scale = 1.0 / math.sqrt(q_shape[-1]) if q_shape[-1] else 1.0
    empty = wrap(q, backend.zeros((0,), dtype, device))
    out, _ = apply(_ATTENTION, (q, k, v, empty, empty), (scale, is_causal))
    return out


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of two shapes (``ValueError`` where they do not broadcast)."""
    if len(a) > len(b):
        raise ValueError
    a = (1,) * (len(b) - len(a)) + a
    if any(m != n and m != 1 for m, n in zip(a, b)):
        raise ValueError
    return b


def _composed_attention(q, k, v, mask, drop, scale, causal):
    """Attention of ordinary ops, for a float mask that requires a gradient."""
    scores = q.matmul(k.swap_dims(-1, -2)) * scale + mask
    if causal:
        length, source = q.shape[-2], k.shape[-2]
        rows = wrap(q, q.backend.arange(0, length, 1, "int64", q.device)).reshape((length, 1))
        cols = wrap(q, q.backend.arange(0, source, 1, "int64", q.device)).reshape((1, source))
        hidden = rows < cols
        scores = scores.mask_fill(hidden, -math.inf)
    # torch's safe softmax: a row of keys all masked (-inf) attends to nothing (zeros, as the
    # fused kernel gives, with zero gradients), not NaN
    hidden_rows = scores.eq(-math.inf).all(-1, keepdim=True)
    probs = scores.mask_fill(hidden_rows, 0.0).softmax(-1).mask_fill(hidden_rows, 0.0)
    if drop.numel():
        probs = probs * drop
    return probs.matmul(v)
