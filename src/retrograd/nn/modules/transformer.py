"""Transformer modules, PyTorch's: ``TransformerEncoderLayer``, ``TransformerEncoder``,
``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer``, with their
constructor arguments (``norm_first``, ``batch_first``, ``activation="relu"|"gelu"|callable``,
``bias``...), sub-module names (so a PyTorch state dict loads unchanged) and forward
signatures. The stacks hold copies of the layer they are given (``layers.0``, ``layers.1``...),
as PyTorch's ``_get_clones`` does; ``Transformer`` re-initialises every matrix with
Xavier-uniform.

The causal-mask hint: a stack given a mask and ``is_causal=None`` checks whether the mask is
:meth:`Transformer.generate_square_subsequent_mask` (a host read of the mask, as in PyTorch,
once per mask) and, if so, its layers run the causal attention kernel instead of adding it.

>>> from retrograd import nn
>>> layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
>>> encoder = nn.TransformerEncoder(layer, num_layers=2)
>>> mask = nn.Transformer.generate_square_subsequent_mask(5)
>>> encoder(rg.ones((5, 3, 8)), mask=mask).shape
retrograd.Size([5, 3, 8])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import ArgumentTypeError, SizeMismatchError, UnsupportedModeError
from ...tensor import Tensor, tensor
from ...tensor.dtypes import default_float_dtype
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from .. import init
from .activation import GELU, ReLU
from .attention import MultiheadAttention
from .container import ModuleList
from .linear import Dropout, Linear
from .module import Module
from .norm import LayerNorm

__all__ = [
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]

Activation = str | Callable[[Tensor], Tensor]


def _activation(activation: Activation) -> Callable[[Tensor], Tensor]:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    # (torch's RuntimeError: an unknown mode, as interpolate's)
    raise UnsupportedModeError(f"activation should be relu/gelu, not {activation!r}")


def _relu_or_gelu(activation: Callable[[Tensor], Tensor]) -> int:
    """torch's ``activation_relu_or_gelu`` of an encoder layer: 1 for ReLU, 2 for GELU (the
    function or the module), 0 else. Code modelled on torch's ``TransformerEncoder`` reads it
    to choose its fast path."""
    if activation is F.relu or isinstance(activation, ReLU):
        return 1
    if activation is F.gelu or isinstance(activation, GELU):
        return 2
    return 0


def _clones(module: Module, count: int) -> ModuleList:
    """``count`` independent copies of ``module`` (equal values, no parameter shared)."""
    return ModuleList([module.replicate() for _ in range(count)])


# torch's private names of the two helpers, which layers built after torch's transformer import
_get_activation_fn = _activation
_get_clones = _clones


def _sequence_length(x: Tensor, batch_first: bool) -> int:
    return x.shape[0] if x.ndim == 2 or not batch_first else x.shape[1]


class _HoldsCausalCheck:
    """A module keeping a :class:`_CausalCheck`, a cache that is no part of its state: a
    pickle (``torch.save(model)``) holds none, so loading one under ``weights_only`` needs no
    class torch's does not, and the module loaded back starts a fresh one."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_causal", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__["_causal"] = _CausalCheck()


class _CausalCheck:
    """PyTorch's ``_detect_is_causal_mask``: ``is_causal`` when given, else whether ``mask`` is
    the square subsequent mask of ``size``, read on the host, once per mask: the answer for the
    last mask's primitive is kept (an in-place update gives a tensor a new one), so a model
    passing its mask every step reads it once, and a captured step not at all."""

    __slots__ = ("answer", "primitive")

    def __init__(self) -> None:
        self.primitive, self.answer = None, False

    def __call__(self, mask: Tensor | None, is_causal: bool | None, size: int) -> bool:
        if is_causal is not None:
            return bool(is_causal)
        if mask is None or mask.shape != (size, size):
            return False
        if mask.primitive is not self.primitive:
            values = np.asarray(mask.numpy())
            if values.dtype == np.bool_:
                causal = np.triu(np.ones((size, size), bool), 1)
            else:
                causal = np.triu(np.full((size, size), -np.inf), 1)
            self.primitive, self.answer = mask.primitive, bool(np.array_equal(values, causal))
        return self.answer


def _factory(backend: Any, device: Any, dtype: str | None) -> dict[str, Any]:
    return dict(backend=backend, device=device, dtype=dtype)


def _build_layer(
    layer: Module,
    attentions: int,
    d_model,
    nhead,
    dim_feedforward,
    dropout,
    activation,
    layer_norm_eps,
    batch_first,
    norm_first,
    bias,
    made,
) -> None:
    """The sub-modules of an encoder (one attention) or decoder (two) layer, registered in
    PyTorch's order (its state dict's)."""
    for name in ("self_attn", "multihead_attn")[:attentions]:
        attention = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **made
        )
        setattr(layer, name, attention)
    layer.linear1 = Linear(d_model, dim_feedforward, bias=bias, **made)
    layer.dropout = Dropout(dropout)
    layer.linear2 = Linear(dim_feedforward, d_model, bias=bias, **made)
    layer.norm_first = norm_first
    for k in range(1, attentions + 2):
        setattr(layer, f"norm{k}", LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **made))
    for k in range(1, attentions + 2):
        setattr(layer, f"dropout{k}", Dropout(dropout))
    layer.activation = _activation(activation)


def _attention_block(attention, x, memory, attn_mask, key_padding_mask, is_causal, drop):
    """``drop(attention(x, memory, memory))``, without the attention weights."""
    x = attention(
        x,
        memory,
        memory,
        attn_mask=attn_mask,
        key_padding_mask=key_padding_mask,
        need_weights=False,
        is_causal=is_causal,
    )[0]
    return drop(x)


def _feed_forward_block(layer, x, drop):
    return drop(layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and layer
    norm: after (``norm_first=False``, the original) or before (``norm_first=True``) them.
    ``forward(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        options = (dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first)
        made = _factory(backend, device, dtype)
        _build_layer(self, 1, d_model, nhead, *options, bias, made)
        self.activation_relu_or_gelu = _relu_or_gelu(self.activation)

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        masks = (attn_mask, key_padding_mask, is_causal)
        return _attention_block(self.self_attn, x, x, *masks, self.dropout1)

    def _ff_block(self, x):
        return _feed_forward_block(self, x, self.dropout2)


class TransformerDecoderLayer(Module):
    """Self-attention, attention over the encoder's output (``memory``) and a feed-forward
    block, each with a residual connection and layer norm (after them, or before with
    ``norm_first``). ``forward(tgt, memory, tgt_mask=None, memory_mask=None,
    tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=False,
    memory_is_causal=False)``."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        options = (dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first)
        made = _factory(backend, device, dtype)
        _build_layer(self, 2, d_model, nhead, *options, bias, made)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        self_masks = (tgt_mask, tgt_key_padding_mask, tgt_is_causal)
        memory_masks = (memory_mask, memory_key_padding_mask, memory_is_causal)
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), *self_masks)
            x = x + self._mha_block(self.norm2(x), memory, *memory_masks)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, *self_masks))
        x = self.norm2(x + self._mha_block(x, memory, *memory_masks))
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        masks = (attn_mask, key_padding_mask, is_causal)
        return _attention_block(self.self_attn, x, x, *masks, self.dropout1)

    def _mha_block(self, x, memory, attn_mask, key_padding_mask, is_causal):
        masks = (attn_mask, key_padding_mask, is_causal)
        return _attention_block(self.multihead_attn, x, memory, *masks, self.dropout2)

    def _ff_block(self, x):
        return _feed_forward_block(self, x, self.dropout3)


def _fast_path_possible(layer: Module) -> bool:
    """Whether torch's ``TransformerEncoder`` would keep ``use_nested_tensor`` for ``layer``
    (its reasons against, in its order)."""
    if not isinstance(layer, TransformerEncoderLayer) or layer.norm_first:
        return False
    attention = layer.self_attn
    return bool(
        attention.batch_first
        and attention._qkv_same_embed_dim
        and attention.in_proj_bias is not None
        and layer.activation_relu_or_gelu
        and layer.norm1.eps == layer.norm2.eps
        and attention.num_heads % 2 == 0
    )


class TransformerEncoder(_HoldsCausalCheck, Module):
    """``num_layers`` copies of ``encoder_layer`` (``layers``), then ``norm`` if given.
    ``forward(src, mask=None, src_key_padding_mask=None, is_causal=None)``.
    ``enable_nested_tensor`` and ``mask_check`` (PyTorch's sparsity fast path) are accepted
    and do nothing."""

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ):
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check
        # torch's flag of its nested-tensor fast path (which retrograd has not: its result is
        # the slow path's), False where torch would not take it, for code that reads it
        self.use_nested_tensor = enable_nested_tensor and _fast_path_possible(encoder_layer)
        self._causal = _CausalCheck()

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool | None = None,
    ) -> Tensor:
        batch_first = self.layers[0].self_attn.batch_first
        causal = self._causal(mask, is_causal, _sequence_length(src, batch_first))
        output = src
        for layer in self.layers:
            output = layer(
                output, src_mask=mask, is_causal=causal, src_key_padding_mask=src_key_padding_mask
            )
        return output if self.norm is None else self.norm(output)


class TransformerDecoder(_HoldsCausalCheck, Module):
    """``num_layers`` copies of ``decoder_layer`` (``layers``), then ``norm`` if given.
    ``forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False)``."""

    def __init__(
        self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: Module | None = None
    ):
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self._causal = _CausalCheck()

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch_first = self.layers[0].self_attn.batch_first
        causal = self._causal(tgt_mask, tgt_is_causal, _sequence_length(tgt, batch_first))
        output = tgt
        for layer in self.layers:
            output = layer(
                output,
                memory,
                tgt_mask=tgt_mask,
                memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=causal,
                memory_is_causal=memory_is_causal,
            )
        return output if self.norm is None else self.norm(output)


class Transformer(Module):
    """The encoder-decoder transformer of "Attention Is All You Need", PyTorch's
    ``nn.Transformer``: ``encoder`` (a :class:`TransformerEncoder` with a final
    ``LayerNorm``) and ``decoder``, or ``custom_encoder``/``custom_decoder``. Every parameter
    of two or more dimensions is re-drawn from Xavier-uniform.
    ``forward(src, tgt, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=None, tgt_is_causal=None, memory_is_causal=False)``."""

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: Activation = F.relu,
        custom_encoder: Module | None = None,
        custom_decoder: Module | None = None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: str | None = None,
        *,
        backend: Any = None,
    ):
        super().__init__()
        made = _factory(backend, device, dtype)
        layer_args = (d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps)
        layer_options = dict(batch_first=batch_first, norm_first=norm_first, bias=bias, **made)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(
                TransformerEncoderLayer(*layer_args, **layer_options),
                num_encoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **made),
            )
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(
                TransformerDecoderLayer(*layer_args, **layer_options),
                num_decoder_layers,
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **made),
            )
        self._reset_parameters()
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def _reset_parameters(self) -> None:
        for parameter in self.parameters():
            if parameter.ndim > 1:
                init.xavier_uniform_(parameter)

    def forward(
        self,
        src: Tensor,
        tgt: Tensor,
        src_mask: Tensor | None = None,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        src_is_causal: bool | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
    ) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise SizeMismatchError(  # (torch's RuntimeError, as below)
                f"Transformer: the batch number of src and tgt must be equal; src "
                f"{list(src.shape)}, tgt {list(tgt.shape)}"
            )
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise SizeMismatchError(
                f"Transformer: the feature number of src and tgt must be equal to d_model "
                f"({self.d_model}); src {list(src.shape)}, tgt {list(tgt.shape)}"
            )
        memory = self.encoder(
            src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal
        )
        return self.decoder(
            tgt,
            memory,
            tgt_mask=tgt_mask,
            memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask,
            tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )

    @staticmethod
    def generate_square_subsequent_mask(
        sz: int, device: Any = None, dtype: str | None = None, *, backend: Any = None
    ) -> Tensor:
        """The causal mask of ``sz`` positions: ``-inf`` above the diagonal (a position may
        not attend to later ones), 0 elsewhere; the default float dtype unless ``dtype``."""
        if isinstance(sz, bool) or not hasattr(type(sz), "__index__"):
            raise ArgumentTypeError(  # (torch's TypeError)
                f"generate_square_subsequent_mask: sz must be a non-negative int, got {sz!r}"
            )
        if sz < 0:
            raise SizeMismatchError(  # (torch's RuntimeError: a negative dimension)
                f"generate_square_subsequent_mask: sz must be a non-negative int, got {sz!r}"
            )
        values = np.triu(np.full((sz, sz), -math.inf), 1)
        return tensor(values, dtype=dtype or default_float_dtype(), backend=backend, device=device)
