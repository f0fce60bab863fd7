"""``MultiheadAttention``, PyTorch's: its constructor, parameter names and layouts
(``in_proj_weight`` ``[3E, E]`` with rows ``[q; k; v]``, ``in_proj_bias``, ``out_proj``, or
``q_proj_weight``/``k_proj_weight``/``v_proj_weight`` when ``kdim``/``vdim`` differ from
``embed_dim``; ``bias_k``/``bias_v`` with ``add_bias_kv``), initialisation and ``forward``
(see :func:`retrograd.nn.functional.multi_head_attention_forward`).

>>> from retrograd import nn
>>> attention = nn.MultiheadAttention(8, 2)
>>> out, weights = attention(rg.ones((5, 3, 8)), rg.ones((7, 3, 8)), rg.ones((7, 3, 8)))
>>> out.shape, weights.shape
(retrograd.Size([5, 3, 8]), retrograd.Size([3, 5, 7]))
>>> list(attention.state_dict())
['in_proj_weight', 'in_proj_bias', 'out_proj.weight', 'out_proj.bias']
"""

from __future__ import annotations

from typing import Any

from ...errors import AssertedShapeError, InvalidArgumentError
from ...tensor import Tensor, zeros
from ...tensor.dtypes import default_float_dtype
from .. import init
from ..functional.multihead import multi_head_attention_forward
from ..parameter import Parameter
from .linear import NonDynamicallyQuantizableLinear
from .module import Module

__all__ = ["MultiheadAttention"]


class MultiheadAttention(Module):
    """Attention of ``num_heads`` heads of ``embed_dim // num_heads`` features, PyTorch's
    ``nn.MultiheadAttention``: ``forward(query, key, value, key_padding_mask=None,
    need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False)`` returns
    ``(attn_output, attn_weights)``. Inputs are ``[L, N, E]`` (``[N, L, E]`` with
    ``batch_first``; unbatched ``[L, E]``). ``dropout`` drops attention probabilities in
    training mode."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise InvalidArgumentError(
                f"MultiheadAttention: embed_dim and num_heads must be greater than 0, got "
                f"embed_dim={embed_dim} and num_heads={num_heads}"
            )
        if embed_dim % num_heads:  # (torch asserts it)
            raise AssertedShapeError(
                f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads "
                f"{num_heads}"
            )
        made = dict(backend=backend, device=device, dtype=dtype or default_float_dtype())
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(zeros((3 * embed_dim, embed_dim), **made))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.register_parameter("in_proj_weight", None)
            self.q_proj_weight = Parameter(zeros((embed_dim, embed_dim), **made))
            self.k_proj_weight = Parameter(zeros((embed_dim, self.kdim), **made))
            self.v_proj_weight = Parameter(zeros((embed_dim, self.vdim), **made))
        if bias:
            self.in_proj_bias = Parameter(zeros((3 * embed_dim,), **made))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(embed_dim, embed_dim, bias=bias, **made)
        if add_bias_kv:
            self.bias_k = Parameter(zeros((1, 1, embed_dim), **made))
            self.bias_v = Parameter(zeros((1, 1, embed_dim), **made))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's: Xavier-uniform projections, zero biases, Xavier-normal ``bias_k``/``v``
        (``out_proj.weight`` keeps ``Linear``'s initialisation)."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for weight in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        batched = query.ndim == 3
        if self.batch_first and batched:  # keep "key is value" and "query is key" true
            if key is value:
                if query is key:
                    query = key = value = query.swap_dims(0, 1)
                else:
                    query, key = query.swap_dims(0, 1), key.swap_dims(0, 1)
                    value = key
            else:
                query, key, value = (x.swap_dims(0, 1) for x in (query, key, value))
        separate = not self._qkv_same_embed_dim
        out, weights = multi_head_attention_forward(
            query,
            key,
            value,
            self.embed_dim,
            self.num_heads,
            self.in_proj_weight,
            self.in_proj_bias,
            self.bias_k,
            self.bias_v,
            self.add_zero_attn,
            self.dropout,
            self.out_proj.weight,
            self.out_proj.bias,
            training=self.training,
            key_padding_mask=key_padding_mask,
            need_weights=need_weights,
            attn_mask=attn_mask,
            use_separate_proj_weight=separate,
            q_proj_weight=self.q_proj_weight,
            k_proj_weight=self.k_proj_weight,
            v_proj_weight=self.v_proj_weight,
            average_attn_weights=average_attn_weights,
            is_causal=is_causal,
        )
        if self.batch_first and batched:
            out = out.swap_dims(0, 1)
        return out, weights
