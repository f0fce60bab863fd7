"""``multi_head_attention_forward``: PyTorch's function behind ``nn.MultiheadAttention``.

Sequence-first layout, as PyTorch's: ``query`` ``[L, N, E]``, ``key`` ``[S, N, kdim]``,
``value`` ``[S, N, vdim]`` (unbatched: ``[L, E]``...). The input projections are one
``linear`` when ``query``, ``key`` and ``value`` are the same tensor object (self-attention;
PyTorch decides by identity too), else one per input, with ``in_proj_weight``'s rows
``[q; k; v]``. Heads are views ``[L, N, H, D] -> [N, H, L, D]`` of the projections; without
``need_weights`` the attention is the fused ``scaled_dot_product_attention`` (its output laid
out so that going back to ``[L, N, E]`` is a view), with it the probabilities are formed
explicitly, to be returned (averaged over heads unless ``average_attn_weights=False``).

Masks follow PyTorch's ``nn.MultiheadAttention``, which is the reverse of
``scaled_dot_product_attention`` for booleans: a ``True`` in ``attn_mask`` or
``key_padding_mask`` *hides* that key; a float mask is added to the scores. ``attn_mask`` is
``[L, S]`` or ``[N * num_heads, L, S]``, ``key_padding_mask`` ``[N, S]``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from ...errors import (
    ArgumentConflictError,
    AssertedDTypeError,
    AssertedShapeError,
    InvalidArgumentError,
    MixedDTypeError,
    SizeMismatchError,
)
from ...tensor import Tensor, cat
from ...tensor.internal import FLOAT_DTYPES, result_dtype, shape_text, wrap
from ._common import _as_tensor, _float_input
from .attention import scaled_dot_product_attention
from .linear import linear
from .normalization import dropout as _dropout

__all__ = ["canonical_mask", "multi_head_attention_forward"]


def canonical_mask(
    fn: str, mask: Any, name: str, like: Tensor, dtype: str | None = None
) -> Tensor | None:
    """``mask`` as an additive float mask in ``dtype`` (default ``like``'s): a bool mask
    becomes ``-inf`` where it is true (a hidden key), 0 elsewhere; a float mask is kept;
    ``None`` stays."""
    if mask is None:
        return None
    dtype = dtype or like.dtype
    mask = _as_tensor(fn, like, mask, name)
    if mask.dtype == "bool":
        zeros = wrap(like, like.backend.zeros(mask.shape, dtype, like.device))
        return zeros.mask_fill(mask, -math.inf)
    if mask.dtype not in FLOAT_DTYPES:
        raise AssertedDTypeError(
            f"{fn}: only bool and floating types of {name} are supported, got {mask.dtype}"
        )
    return mask.cast(dtype)


def _in_projection(query, key, value, embed_dim, in_proj_weight, in_proj_bias, separate):
    """``(q, k, v)``, each ``[*, N, E]``."""
    if separate is not None:
        w_q, w_k, w_v = separate
        # torch's asserts of the separate weights against the inputs' widths (a key or value
        # of another width than the module's kdim/vdim)
        for what, x, w in (("query", query, w_q), ("key", key, w_k), ("value", value, w_v)):
            expected = (query.shape[-1], x.shape[-1])
            if tuple(w.shape) != expected:
                raise AssertedShapeError(
                    f"multi_head_attention_forward: expecting {what} weights shape of "
                    f"{shape_text(expected)}, but got {shape_text(w.shape)} ({what} "
                    f"{shape_text(x.shape)})"
                )
        b_q = b_k = b_v = None
        if in_proj_bias is not None:
            b_q, b_k, b_v = in_proj_bias.split(embed_dim, 0)
        return linear(query, w_q, b_q), linear(key, w_k, b_k), linear(value, w_v, b_v)
    if key is value and query is key:  # self-attention: one product
        return tuple(linear(query, in_proj_weight, in_proj_bias).split(embed_dim, -1))
    weights = in_proj_weight.split(embed_dim, 0)
    biases = (None,) * 3 if in_proj_bias is None else in_proj_bias.split(embed_dim, 0)
    if key is value:
        q = linear(query, weights[0], biases[0])
        kv_bias = None if in_proj_bias is None else cat(list(biases[1:]), 0)
        k, v = linear(key, cat(list(weights[1:]), 0), kv_bias).split(embed_dim, -1)
        return q, k, v
    return tuple(linear(x, w, b) for x, w, b in zip((query, key, value), weights, biases))


def _shape_check(fn, query, key, value, key_padding_mask, attn_mask, num_heads) -> None:
    """torch's ``_mha_shape_check``: the ranks of the inputs and masks (a 3-d mask of an
    unbatched query its shape too), each refused with its ``AssertionError``."""
    shapes = (
        f"query {shape_text(query.shape)}, key {shape_text(key.shape)}, value "
        f"{shape_text(value.shape)}"
    )
    if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
        raise AssertedShapeError(
            f"{fn}: query, key and value must all be 3-d [L, N, E] (or 2-d, unbatched); {shapes}"
        )
    kpm_ndim = query.ndim - 1
    if key_padding_mask is not None and getattr(key_padding_mask, "ndim", kpm_ndim) != kpm_ndim:
        raise AssertedShapeError(
            f"{fn}: key_padding_mask must be {kpm_ndim}-d for a {query.ndim}-d query, got "
            f"{shape_text(tuple(key_padding_mask.shape))}; {shapes}"
        )
    if attn_mask is None:
        return
    mask_shape = tuple(getattr(attn_mask, "shape", ()))
    if len(mask_shape) not in (2, 3):
        raise AssertedShapeError(
            f"{fn}: attn_mask must be 2-d or 3-d, got {shape_text(mask_shape)}; {shapes}"
        )
    expected = (num_heads, query.shape[0], key.shape[0])
    if query.ndim == 2 and len(mask_shape) == 3 and mask_shape != expected:
        raise AssertedShapeError(
            f"{fn}: the 3-d attn_mask of an unbatched query must be {shape_text(expected)}, "
            f"got {shape_text(mask_shape)}; {shapes}"
        )


def _mask_dtype(mask: Any, query: Tensor) -> str | None:
    """The dtype torch adds ``mask`` in: a float mask's own, the query's for a bool one."""
    if mask is None:
        return None
    dtype = getattr(mask, "dtype", None)
    return dtype if dtype is not None and dtype in FLOAT_DTYPES else query.dtype


def _check_mask_dtypes(fn: str, query: Tensor, dtypes: tuple, need_weights: bool) -> None:
    """torch adds the masks in their own dtypes (promoted) before the attention: its product
    of the weights' path takes the query's dtype alone, its sdpa float32 or the query's; it
    refuses others with ``RuntimeError``. (retrograd adds them in the query's dtype.)"""
    present = [d for d in dtypes if d is not None]
    if not present:
        return
    merged = present[0] if len(present) == 1 else result_dtype(*present)
    accepted = (query.dtype,) if need_weights else ("float32", query.dtype)
    if merged not in accepted:
        raise MixedDTypeError(
            f"{fn}: masks of dtype {merged} (attn_mask and key_padding_mask combined) beside a "
            f"query of {query.dtype}"
            + ("" if need_weights else " (need_weights=False: float32 or the query's dtype)")
        )


def _pad_key(mask: Tensor | None) -> Tensor | None:
    """A zero column appended to a float mask's key dimension (an always-visible key)."""
    if mask is None:
        return None
    zeros = wrap(mask, mask.backend.zeros((*mask.shape[:-1], 1), mask.dtype, mask.device))
    return cat([mask, zeros], mask.ndim - 1)


def multi_head_attention_forward(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    embed_dim_to_check: int,
    num_heads: int,
    in_proj_weight: Tensor | None,
    in_proj_bias: Tensor | None,
    bias_k: Tensor | None,
    bias_v: Tensor | None,
    add_zero_attn: bool,
    dropout_p: float,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    training: bool = True,
    key_padding_mask: Tensor | None = None,
    need_weights: bool = True,
    attn_mask: Tensor | None = None,
    use_separate_proj_weight: bool = False,
    q_proj_weight: Tensor | None = None,
    k_proj_weight: Tensor | None = None,
    v_proj_weight: Tensor | None = None,
    static_k: Tensor | None = None,
    static_v: Tensor | None = None,
    average_attn_weights: bool = True,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Multi-head attention, PyTorch's ``F.multi_head_attention_forward`` (its arguments and
    their meaning; see the module docstring): ``(attn_output [L, N, E], attn_weights)``, the
    weights ``[N, L, S]`` (``[N, num_heads, L, S]`` without averaging) or ``None`` without
    ``need_weights``. ``is_causal`` is a hint that ``attn_mask`` is the causal mask: used
    without ``need_weights`` and ``key_padding_mask``, it runs the causal kernel instead of
    the mask. ``static_k``/``static_v`` are not supported (an error)."""
    fn = "multi_head_attention_forward"
    query = _float_input(fn, query)
    if static_k is not None or static_v is not None:
        raise InvalidArgumentError(f"{fn}: static_k and static_v are not supported")
    batched = query.ndim == 3
    _shape_check(fn, query, key, value, key_padding_mask, attn_mask, num_heads)
    if not batched:
        same_kv, same_qk = key is value, query is key
        query = query.unsqueeze_dim(1)
        key = query if same_qk else key.unsqueeze_dim(1)
        value = key if same_kv else value.unsqueeze_dim(1)
        if key_padding_mask is not None:
            key_padding_mask = _as_tensor(fn, query, key_padding_mask, "key_padding_mask")
            key_padding_mask = key_padding_mask.unsqueeze_dim(0)
    length, batch, embed_dim = query.shape
    mask_dtypes = {getattr(m, "dtype", None) for m in (key_padding_mask, attn_mask)}
    if key_padding_mask is not None and attn_mask is not None and len(mask_dtypes) == 2:
        # torch's deprecation of a bool mask beside a float one (its _canonical_mask)
        warnings.warn(
            "Support for mismatched key_padding_mask and attn_mask is deprecated. Use same "
            "type for both instead.",
            UserWarning,
            stacklevel=3,
        )
    kpm_dtype = _mask_dtype(key_padding_mask, query)
    # torch adds the two masks in their promoted dtype (float32 ones rounded in float32
    # beside a float64 query), then the attention casts the sum
    merge = None
    if kpm_dtype is not None and attn_mask is not None:
        merge = result_dtype(kpm_dtype, _mask_dtype(attn_mask, query))
    key_padding_mask = canonical_mask(fn, key_padding_mask, "key_padding_mask", query, merge)
    if is_causal and attn_mask is None:
        raise ArgumentConflictError(
            f"{fn}: need attn_mask if specifying the is_causal hint; pass the causal mask "
            f"(nn.Transformer.generate_square_subsequent_mask) as attn_mask"
        )
    mask_dtype = None
    if is_causal and key_padding_mask is None and not need_weights:
        attn_mask = None  # the causal kernel instead of the mask
    else:
        mask_dtype = _mask_dtype(attn_mask, query)
        attn_mask = canonical_mask(fn, attn_mask, "attn_mask", query, merge)
        if key_padding_mask is not None:
            is_causal = False
    # torch's order of checks and its classes: asserts (AssertionError) for the widths and
    # the keys and values, RuntimeError for the attention mask's shape
    if embed_dim != embed_dim_to_check:
        raise AssertedShapeError(
            f"{fn}: was expecting embedding dimension of {embed_dim_to_check}, but got "
            f"{embed_dim} (query {shape_text(query.shape)})"
        )
    head_dim = embed_dim // num_heads
    if head_dim * num_heads != embed_dim:
        raise AssertedShapeError(
            f"{fn}: embed_dim {embed_dim} not divisible by num_heads {num_heads}"
        )
    compared = 2 if use_separate_proj_weight else 3  # (the widths may differ with kdim/vdim)
    if key.shape[:compared] != value.shape[:compared]:
        raise AssertedShapeError(
            f"{fn}: key {shape_text(key.shape)} and value {shape_text(value.shape)} must have "
            f"the same {'sequence length and batch size' if use_separate_proj_weight else 'shape'}"
        )
    if key.shape[1] != batch:
        raise SizeMismatchError(
            f"{fn}: key {shape_text(key.shape)} and value {shape_text(value.shape)} must have "
            f"query's batch size {batch} (query {shape_text(query.shape)})"
        )
    separate = (q_proj_weight, k_proj_weight, v_proj_weight) if use_separate_proj_weight else None
    q, k, v = _in_projection(query, key, value, embed_dim, in_proj_weight, in_proj_bias, separate)
    source = key.shape[0]
    if attn_mask is not None:
        expected = [(length, source), (batch * num_heads, length, source)]
        if attn_mask.shape not in expected:
            raise SizeMismatchError(
                f"{fn}: attn_mask should be {shape_text(expected[0])} or "
                f"{shape_text(expected[1])}, got {shape_text(attn_mask.shape)}"
            )
        attn_mask = (
            attn_mask.reshape((1, 1, length, source))
            if attn_mask.ndim == 2
            else attn_mask.reshape((batch, num_heads, length, source))
        )
    if key_padding_mask is not None and key_padding_mask.shape != (batch, source):
        raise AssertedShapeError(
            f"{fn}: key_padding_mask should be {shape_text((batch, source))}, got "
            f"{shape_text(key_padding_mask.shape)}"
        )
    _check_mask_dtypes(fn, query, (mask_dtype, kpm_dtype), need_weights)
    if bias_k is not None and bias_v is not None:
        k = cat([k, bias_k.expand((1, batch, embed_dim))], 0)
        v = cat([v, bias_v.expand((1, batch, embed_dim))], 0)
        attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
    elif bias_k is not None or bias_v is not None:
        raise AssertedShapeError(f"{fn}: give both bias_k and bias_v, or neither")

    def heads(x: Tensor) -> Tensor:  # [S, N, E] -> [N, H, S, D], a view
        return x.reshape((x.shape[0], batch, num_heads, head_dim)).permute((1, 2, 0, 3))

    q, k, v = heads(q), heads(k), heads(v)
    if add_zero_attn:
        zeros = wrap(q, q.backend.zeros((batch, num_heads, 1, head_dim), q.dtype, q.device))
        k, v = cat([k, zeros], 2), cat([v, zeros], 2)
        attn_mask, key_padding_mask = _pad_key(attn_mask), _pad_key(key_padding_mask)
    if key_padding_mask is not None:
        padding = key_padding_mask.reshape((batch, 1, 1, key_padding_mask.shape[-1]))
        attn_mask = padding if attn_mask is None else attn_mask + padding
    if attn_mask is not None and attn_mask.dtype != query.dtype:
        attn_mask = attn_mask.cast(query.dtype)
    if not training:
        dropout_p = 0.0
    if need_weights:
        scores = (q * (1.0 / math.sqrt(head_dim))).matmul(k.swap_dims(-1, -2))
        if attn_mask is not None:
            scores = scores + attn_mask
        weights = scores.softmax(-1)
        if dropout_p > 0.0:
            weights = _dropout(weights, dropout_p, True)
        out = weights.matmul(v)
        weights = weights.mean(1) if average_attn_weights else weights
    else:
        out = scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal)
        weights = None
    out = out.permute((2, 0, 1, 3)).reshape((length * batch, embed_dim))
    out = linear(out, out_proj_weight, out_proj_bias).reshape((length, batch, embed_dim))
    if not batched:
        out = out.squeeze_dim(1)
        weights = None if weights is None else weights.squeeze_dim(0)
    return out, weights
