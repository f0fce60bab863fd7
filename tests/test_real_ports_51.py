# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- T5 as Hugging Face transformers writes it (``models/t5/modeling_t5.py``), a stack of
  self-attention blocks, encoder (bidirectional buckets) and decoder (causal, unidirectional
  buckets), small: ``T5LayerNorm`` (the RMS over ``hidden_states.to(torch.float32).pow(2)
  .mean(-1, keepdim=True)`` and ``torch.rsqrt``, ``self.weight.dtype in [torch.float16,
  torch.bfloat16]``), ``T5DenseActDense`` and the gated ``T5DenseGatedActDense`` (``isinstance(
  self.wo.weight, torch.Tensor)``, ``torch.int8``), ``T5Attention._relative_position_bucket``
  (``(relative_position > 0).to(torch.long)``, ``torch.abs``, ``-torch.min(relative_position,
  torch.zeros_like(...))``, ``torch.log(relative_position.float() / max_exact)`` of zero
  distances (``-inf``, cast to long and then not taken), ``torch.full_like``, ``relative_buckets
  += torch.where(...)`` onto the int ``0``), ``compute_bias`` through an ``nn.Embedding`` and
  ``permute([2, 0, 1])``, ``scores += position_bias_masked`` in place, the first block's bias
  shared by the others, ``softmax(scores.float(), dim=-1).type_as(scores)``, the fp16 clamp
  (``torch.isinf(...).any()``), ``get_extended_attention_mask`` with the decoder's
  ``seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]``, the
  ``d_model**-0.5`` rescale before the head, ``CrossEntropyLoss(ignore_index=-100)`` and
  ``torch.optim.Adafactor``;
- CLIP as openai/CLIP writes it (``clip/model.py``, the ViT variant), small, under the
  fine-tuning loop of its issue #83 and open_clip's clamp of the logit scale: the fp16-safe
  ``LayerNorm`` subclass (``super().forward(x.type(torch.float32))`` and back to the input's
  type), ``QuickGELU`` (``x * torch.sigmoid(1.702 * x)``), ``nn.MultiheadAttention(d_model,
  n_head)`` called with ``need_weights=False, attn_mask=`` the causal mask made by
  ``torch.empty(...)``, ``fill_(float("-inf"))`` and ``triu_(1)`` (moved by ``.to(dtype=x.dtype,
  device=x.device)`` every call), an ``nn.Sequential(OrderedDict(...))`` MLP, the class token by
  ``self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], ...)``, ``x @
  self.proj``, ``logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))`` and its
  ``.exp()``, the end-of-text features ``x[torch.arange(x.shape[0]), text.argmax(dim=-1)]``,
  ``initialize_parameters`` (``nn.init.normal_`` of ``block.attn.in_proj_weight``), the
  symmetric cross-entropy over ``torch.arange(len(images))``, ``model.logit_scale.clamp_(0,
  math.log(100))`` under ``no_grad``, zero-shot ``(100.0 * image_features @ text_features.T)
  .softmax(dim=-1)`` and ``topk``, and ``convert_weights`` (``l.weight.data =
  l.weight.data.half()``, the attention's ``in_proj_weight``/``bias_k``/``bias_v`` by
  ``getattr``; under the torch inner backend: NumPy has no float16 and refuses it by name);
- the parametrizations tutorial (pytorch/tutorials ``intermediate_source/parametrizations.py``)
  as written (its ``print`` calls recorded, its ``torch.rand`` draws and the layers' initial
  weights from one seeded stream, its three import lines given by the harness): ``symmetric``
  by ``X.triu() + X.triu(1).transpose(-1, -2)``, ``parametrize.register_parametrization`` on a
  ``Linear`` and a ``Conv2d`` (``Skew``), ``layer.parametrizations.weight.original``,
  ``torch.dist``, the ``NoisyParametrization`` computed again on each read and once under
  ``parametrize.cached()``, ``CayleyMap`` (a registered ``torch.eye`` buffer,
  ``torch.linalg.solve``) and ``MatrixExponential`` (``torch.matrix_exp``) chained after
  ``Skew`` or ``Symmetric``, ``torch.linalg.eigvalsh``, ``right_inverse`` with ``layer.weight =
  X``, ``remove_parametrizations`` with and without ``leave_parametrized``; beyond it, the
  orthogonal, SPD and Cayley layers trained by SGD.

- latent diffusion's UNet blocks as CompVis/latent-diffusion writes them
  (``ldm/modules/diffusionmodules/util.py`` and ``openaimodel.py``), in a one-level UNet of
  their layout under a DDPM training step: ``checkpoint`` through ``CheckpointFunction`` (a
  ``torch.autograd.Function`` whose ``forward`` runs under ``no_grad`` and whose ``backward``
  recomputes under ``torch.enable_grad()`` from ``x.detach().requires_grad_(True)`` and
  ``x.view_as(x)``, then ``torch.autograd.grad(..., allow_unused=True)`` for the inputs and
  ``self.parameters()``), ``timestep_embedding``, ``zero_module`` by ``p.detach().zero_()``,
  ``GroupNorm32`` (``super().forward(x.float()).type(x.dtype)``), ``TimestepBlock`` with an
  ``@abstractmethod`` and ``TimestepEmbedSequential(nn.Sequential, TimestepBlock)``,
  ``Upsample`` by ``F.interpolate(x, scale_factor=2, mode="nearest")``, ``Downsample``,
  ``ResBlock`` (``emb_out[..., None]`` until the ranks match, ``torch.chunk`` scale and shift,
  ``self.in_layers[:-1]``, up and down), ``AttentionBlock`` with ``QKVAttentionLegacy`` and
  ``QKVAttention`` (``torch.einsum("bct,bcs->bts", ...)``), ``torch.cumprod`` of the betas and
  ``sqrt_alphas_cumprod[t].view(-1, 1, 1, 1)``.

T5 ran unchanged. The defects found (each with a focused test in
``test_realports9_fixes.py``): an optimizer step on a 0-d parameter whose value NumPy holds as
a scalar (CLIP's ``nn.Parameter(torch.ones([]) * np.log(1 / 0.07))``): Adam and RMSprop failed
("return arrays must be of ArrayType"), and SGD silently left the parameter unchanged; the
state dict's ``v.float()``, ``.double()``, ``.half()``, ``.long()``, ``.to(dtype)`` and
``.clone()`` returned plain NumPy arrays, so ``v.float().numpy()`` failed; there was no
top-level ``torch.matrix_exp`` (nor ``Tensor.matrix_exp``), only ``rg.linalg.matrix_exp``;
``autograd.grad`` called under ``no_grad`` (as ``Function.backward`` runs) found nothing to
differentiate in a graph built under ``enable_grad``: its weighted sum of the outputs was
recorded in the caller's grad mode.
"""

from __future__ import annotations

import abc
import math
import os
from collections import OrderedDict
from typing import Union

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

ACTIVATIONS_SOURCE = '''
# transformers/activations.py
class NewGELUActivation(nn.Module):
    """
    Implementation of the GELU activation function currently in Google BERT repo (identical to OpenAI GPT). Also see
    the Gaussian Error Linear Units paper: https://arxiv.org/abs/1606.08415
    """

    def forward(self, input: Tensor) -> Tensor:
        return 0.5 * input * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (input + 0.044715 * torch.pow(input, 3.0))))


class ClassInstantier(OrderedDict):
    def __getitem__(self, key):
        content = super().__getitem__(key)
        cls, kwargs = content if isinstance(content, tuple) else (content, {})
        return cls(**kwargs)


ACT2CLS = {
    "gelu": nn.GELU,
    "gelu_new": NewGELUActivation,
    "relu": nn.ReLU,
}
ACT2FN = ClassInstantier(ACT2CLS)
'''

T5_SOURCE = '''
class T5Config:
    model_type = "t5"

    def __init__(self, vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                 relative_attention_num_buckets=32, relative_attention_max_distance=128, dropout_rate=0.1,
                 layer_norm_epsilon=1e-6, feed_forward_proj="relu", is_decoder=False):
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.d_kv = d_kv
        self.d_ff = d_ff
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.relative_attention_num_buckets = relative_attention_num_buckets
        self.relative_attention_max_distance = relative_attention_max_distance
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        self.feed_forward_proj = feed_forward_proj
        self.is_decoder = is_decoder

        act_info = self.feed_forward_proj.split("-")
        self.dense_act_fn = act_info[-1]
        self.is_gated_act = act_info[0] == "gated"

        if len(act_info) > 1 and act_info[0] != "gated" or len(act_info) > 2:
            raise ValueError(
                f"`feed_forward_proj`: {feed_forward_proj} is not a valid activation function of the dense layer. "
                "Please make sure `feed_forward_proj` is of the format `gated-{ACT_FN}` or `{ACT_FN}`, e.g. "
                "'gated-gelu' or 'relu'"
            )

        # for backwards compatibility
        if feed_forward_proj == "gated-gelu":
            self.dense_act_fn = "gelu_new"


class T5LayerNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        Construct a layernorm module in the T5 style. No bias and no subtraction of mean.
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        # T5 uses a layer_norm which only scales and doesn't shift, which is also known as Root Mean
        # Square Layer Normalization https://arxiv.org/abs/1910.07467 thus varience is calculated
        # w/o mean and there is no bias. Additionally we want to make sure that the accumulation for
        # half-precision inputs is done in fp32

        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)

        # convert into half-precision if necessary
        if self.weight.dtype in [torch.float16, torch.bfloat16]:
            hidden_states = hidden_states.to(self.weight.dtype)

        return self.weight * hidden_states


class T5DenseActDense(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.wi = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = ACT2FN[config.dense_act_fn]

    def forward(self, hidden_states):
        hidden_states = self.wi(hidden_states)
        hidden_states = self.act(hidden_states)
        hidden_states = self.dropout(hidden_states)
        if (
            isinstance(self.wo.weight, torch.Tensor)
            and hidden_states.dtype != self.wo.weight.dtype
            and self.wo.weight.dtype != torch.int8
        ):
            hidden_states = hidden_states.to(self.wo.weight.dtype)
        hidden_states = self.wo(hidden_states)
        return hidden_states


class T5DenseGatedActDense(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout_rate)
        self.act = ACT2FN[config.dense_act_fn]

    def forward(self, hidden_states):
        hidden_gelu = self.act(self.wi_0(hidden_states))
        hidden_linear = self.wi_1(hidden_states)
        hidden_states = hidden_gelu * hidden_linear
        hidden_states = self.dropout(hidden_states)

        # To make 8bit quantization work for google/flan-t5-xxl, self.wo is kept in float32.
        # See https://github.com/huggingface/transformers/issues/20287
        # we also make sure the weights are not in `int8` in case users will force `_keep_in_fp32_modules` to be `None``
        if (
            isinstance(self.wo.weight, torch.Tensor)
            and hidden_states.dtype != self.wo.weight.dtype
            and self.wo.weight.dtype != torch.int8
        ):
            hidden_states = hidden_states.to(self.wo.weight.dtype)

        hidden_states = self.wo(hidden_states)
        return hidden_states


class T5LayerFF(nn.Module):
    def __init__(self, config: T5Config):
        super().__init__()
        if config.is_gated_act:
            self.DenseReluDense = T5DenseGatedActDense(config)
        else:
            self.DenseReluDense = T5DenseActDense(config)

        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(self, hidden_states):
        forwarded_states = self.layer_norm(hidden_states)
        forwarded_states = self.DenseReluDense(forwarded_states)
        hidden_states = hidden_states + self.dropout(forwarded_states)
        return hidden_states


class T5Attention(nn.Module):
    def __init__(self, config: T5Config, has_relative_attention_bias=False):
        super().__init__()
        self.is_decoder = config.is_decoder
        self.has_relative_attention_bias = has_relative_attention_bias
        self.relative_attention_num_buckets = config.relative_attention_num_buckets
        self.relative_attention_max_distance = config.relative_attention_max_distance
        self.d_model = config.d_model
        self.key_value_proj_dim = config.d_kv
        self.n_heads = config.num_heads
        self.dropout = config.dropout_rate
        self.inner_dim = self.n_heads * self.key_value_proj_dim

        # Mesh TensorFlow initialization to avoid scaling before softmax
        self.q = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.k = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.v = nn.Linear(self.d_model, self.inner_dim, bias=False)
        self.o = nn.Linear(self.inner_dim, self.d_model, bias=False)

        if self.has_relative_attention_bias:
            self.relative_attention_bias = nn.Embedding(self.relative_attention_num_buckets, self.n_heads)
        self.pruned_heads = set()
        self.gradient_checkpointing = False

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        """
        Adapted from Mesh Tensorflow:
        https://github.com/tensorflow/mesh/blob/0cb87fe07da627bf0b7e60475d59f95ed6b5be3d/mesh_tensorflow/transformer/transformer_layers.py#L593

        Translate relative position to a bucket number for relative attention. The relative position is defined as
        memory_position - query_position, i.e. the distance in tokens from the attending position to the attended-to
        position. If bidirectional=False, then positive relative positions are invalid. We use smaller buckets for
        small absolute relative_position and larger buckets for larger absolute relative_positions. All relative
        positions >=max_distance map to the same bucket. All relative positions <=-max_distance map to the same bucket.
        This should allow for more graceful generalization to longer sequences than the model has been trained on

        Args:
            relative_position: an int32 Tensor
            bidirectional: a boolean - whether the attention is bidirectional
            num_buckets: an integer
            max_distance: an integer

        Returns:
            a Tensor with the same shape as relative_position, containing int32 values in the range [0, num_buckets)
        """
        relative_buckets = 0
        if bidirectional:
            num_buckets //= 2
            relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
            relative_position = torch.abs(relative_position)
        else:
            relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
        # now relative_position is in the range [0, inf)

        # half of the buckets are for exact increments in positions
        max_exact = num_buckets // 2
        is_small = relative_position < max_exact

        # The other half of the buckets are for logarithmically bigger bins in positions up to max_distance
        relative_position_if_large = max_exact + (
            torch.log(relative_position.float() / max_exact)
            / math.log(max_distance / max_exact)
            * (num_buckets - max_exact)
        ).to(torch.long)
        relative_position_if_large = torch.min(
            relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
        )

        relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
        return relative_buckets

    def compute_bias(self, query_length, key_length, device=None):
        """Compute binned relative position bias"""
        if device is None:
            device = self.relative_attention_bias.weight.device
        context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None]
        memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
        relative_position = memory_position - context_position  # shape (query_length, key_length)
        relative_position_bucket = self._relative_position_bucket(
            relative_position,  # shape (query_length, key_length)
            bidirectional=(not self.is_decoder),
            num_buckets=self.relative_attention_num_buckets,
            max_distance=self.relative_attention_max_distance,
        )
        values = self.relative_attention_bias(relative_position_bucket)  # shape (query_length, key_length, num_heads)
        values = values.permute([2, 0, 1]).unsqueeze(0)  # shape (1, num_heads, query_length, key_length)
        return values

    def forward(
        self,
        hidden_states,
        mask=None,
        key_value_states=None,
        position_bias=None,
        past_key_value=None,
        layer_head_mask=None,
        query_length=None,
        use_cache=False,
        output_attentions=False,
    ):
        """
        Self-attention (if key_value_states is None) or attention over source sentence (provided by key_value_states).
        """
        # Input is (batch_size, seq_length, dim)
        # Mask is (batch_size, key_length) (non-causal) or (batch_size, key_length, key_length)
        # past_key_value[0] is (batch_size, n_heads, q_len - 1, dim_per_head)
        batch_size, seq_length = hidden_states.shape[:2]

        real_seq_length = seq_length

        if past_key_value is not None:
            if len(past_key_value) != 2:
                raise ValueError(
                    f"past_key_value should have 2 past states: keys and values. Got { len(past_key_value)} past states"
                )
            real_seq_length += past_key_value[0].shape[2] if query_length is None else query_length

        key_length = real_seq_length if key_value_states is None else key_value_states.shape[1]

        def shape(states):
            """projection"""
            return states.view(batch_size, -1, self.n_heads, self.key_value_proj_dim).transpose(1, 2)

        def unshape(states):
            """reshape"""
            return states.transpose(1, 2).contiguous().view(batch_size, -1, self.inner_dim)

        def project(hidden_states, proj_layer, key_value_states, past_key_value):
            """projects hidden states correctly to key/query states"""
            if key_value_states is None:
                # self-attn
                # (batch_size, n_heads, seq_length, dim_per_head)
                hidden_states = shape(proj_layer(hidden_states))
            elif past_key_value is None:
                # cross-attn
                # (batch_size, n_heads, seq_length, dim_per_head)
                hidden_states = shape(proj_layer(key_value_states))

            if past_key_value is not None:
                if key_value_states is None:
                    # self-attn
                    # (batch_size, n_heads, key_length, dim_per_head)
                    hidden_states = torch.cat([past_key_value, hidden_states], dim=2)
                elif past_key_value.shape[2] != key_value_states.shape[1]:
                    # checking that the `sequence_length` of the `past_key_value` is the same as
                    # the provided `key_value_states` to support prefix tuning
                    # cross-attn
                    # (batch_size, n_heads, seq_length, dim_per_head)
                    hidden_states = shape(proj_layer(key_value_states))
                else:
                    # cross-attn
                    hidden_states = past_key_value
            return hidden_states

        # get query states
        query_states = shape(self.q(hidden_states))  # (batch_size, n_heads, seq_length, dim_per_head)

        # get key/value states
        key_states = project(
            hidden_states, self.k, key_value_states, past_key_value[0] if past_key_value is not None else None
        )
        value_states = project(
            hidden_states, self.v, key_value_states, past_key_value[1] if past_key_value is not None else None
        )

        # compute scores
        scores = torch.matmul(
            query_states, key_states.transpose(3, 2)
        )  # equivalent of torch.einsum("bnqd,bnkd->bnqk", query_states, key_states), compatible with onnx op>9

        if position_bias is None:
            if not self.has_relative_attention_bias:
                position_bias = torch.zeros(
                    (1, self.n_heads, real_seq_length, key_length), device=scores.device, dtype=scores.dtype
                )
                if self.gradient_checkpointing and self.training:
                    position_bias.requires_grad = True
            else:
                position_bias = self.compute_bias(real_seq_length, key_length, device=scores.device)

            # if key and values are already calculated
            # we want only the last query position bias
            if past_key_value is not None:
                position_bias = position_bias[:, :, -hidden_states.size(1) :, :]

            if mask is not None:
                position_bias = position_bias + mask  # (batch_size, n_heads, seq_length, key_length)

        if self.pruned_heads:
            mask = torch.ones(position_bias.shape[1])
            mask[list(self.pruned_heads)] = 0
            position_bias_masked = position_bias[:, mask.bool()]
        else:
            position_bias_masked = position_bias

        scores += position_bias_masked
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(
            scores
        )  # (batch_size, n_heads, seq_length, key_length)
        attn_weights = nn.functional.dropout(
            attn_weights, p=self.dropout, training=self.training
        )  # (batch_size, n_heads, seq_length, key_length)

        # Mask heads if we want to
        if layer_head_mask is not None:
            attn_weights = attn_weights * layer_head_mask

        attn_output = unshape(torch.matmul(attn_weights, value_states))  # (batch_size, seq_length, dim)
        attn_output = self.o(attn_output)

        present_key_value_state = (key_states, value_states) if (self.is_decoder and use_cache) else None
        outputs = (attn_output,) + (present_key_value_state,) + (position_bias,)

        if output_attentions:
            outputs = outputs + (attn_weights,)
        return outputs


class T5LayerSelfAttention(nn.Module):
    def __init__(self, config, has_relative_attention_bias=False):
        super().__init__()
        self.SelfAttention = T5Attention(config, has_relative_attention_bias=has_relative_attention_bias)
        self.layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        position_bias=None,
        layer_head_mask=None,
        past_key_value=None,
        use_cache=False,
        output_attentions=False,
    ):
        normed_hidden_states = self.layer_norm(hidden_states)
        attention_output = self.SelfAttention(
            normed_hidden_states,
            mask=attention_mask,
            position_bias=position_bias,
            layer_head_mask=layer_head_mask,
            past_key_value=past_key_value,
            use_cache=use_cache,
            output_attentions=output_attentions,
        )
        hidden_states = hidden_states + self.dropout(attention_output[0])
        outputs = (hidden_states,) + attention_output[1:]  # add attentions if we output them
        return outputs


class T5Block(nn.Module):
    # the self-attention and feed-forward layers of T5Block (no cross-attention: a stack without an encoder)
    def __init__(self, config, has_relative_attention_bias=False):
        super().__init__()
        self.is_decoder = config.is_decoder
        self.layer = nn.ModuleList()
        self.layer.append(T5LayerSelfAttention(config, has_relative_attention_bias=has_relative_attention_bias))
        self.layer.append(T5LayerFF(config))

    def forward(self, hidden_states, attention_mask=None, position_bias=None):
        self_attention_outputs = self.layer[0](
            hidden_states,
            attention_mask=attention_mask,
            position_bias=position_bias,
        )
        hidden_states, present_key_value_state = self_attention_outputs[:2]
        attention_outputs = self_attention_outputs[2:]  # Keep self-attention outputs and relative position weights

        # clamp inf values to enable fp16 training
        if hidden_states.dtype == torch.float16:
            clamp_value = torch.where(
                torch.isinf(hidden_states).any(),
                torch.finfo(hidden_states.dtype).max - 1000,
                torch.finfo(hidden_states.dtype).max,
            )
            hidden_states = torch.clamp(hidden_states, min=-clamp_value, max=clamp_value)

        # Apply Feed Forward layer
        hidden_states = self.layer[-1](hidden_states)

        outputs = (hidden_states,)
        return outputs + attention_outputs  # hidden-states, (self-attention position bias)


class T5Stack(nn.Module):
    def __init__(self, config, embed_tokens=None):
        super().__init__()
        self.config = config
        self.embed_tokens = embed_tokens
        self.is_decoder = config.is_decoder

        self.block = nn.ModuleList(
            [T5Block(config, has_relative_attention_bias=bool(i == 0)) for i in range(config.num_layers)]
        )
        self.final_layer_norm = T5LayerNorm(config.d_model, eps=config.layer_norm_epsilon)
        self.dropout = nn.Dropout(config.dropout_rate)

    @property
    def dtype(self):
        return next(self.parameters()).dtype

    # ModuleUtilsMixin.get_extended_attention_mask
    def get_extended_attention_mask(self, attention_mask, input_shape, device=None, dtype=None):
        if dtype is None:
            dtype = self.dtype
        if attention_mask.dim() == 3:
            extended_attention_mask = attention_mask[:, None, :, :]
        elif attention_mask.dim() == 2:
            # Provided a padding mask of dimensions [batch_size, seq_length]
            # - if the model is a decoder, apply a causal mask in addition to the padding mask
            # - if the model is an encoder, make the mask broadcastable to [batch_size, num_heads, seq_length, seq_length]
            if self.config.is_decoder:
                # ModuleUtilsMixin.create_extended_attention_mask_for_decoder
                batch_size, seq_length = input_shape
                seq_ids = torch.arange(seq_length, device=device)
                causal_mask = seq_ids[None, None, :].repeat(batch_size, seq_length, 1) <= seq_ids[None, :, None]
                # in case past_key_values are used we need to add a prefix ones mask to the causal mask
                # causal and attention masks must have same type with pytorch version < 1.3
                causal_mask = causal_mask.to(attention_mask.dtype)
                extended_attention_mask = causal_mask[:, None, :, :] * attention_mask[:, None, None, :]
            else:
                extended_attention_mask = attention_mask[:, None, None, :]
        else:
            raise ValueError(
                f"Wrong shape for input_ids (shape {input_shape}) or attention_mask (shape {attention_mask.shape})"
            )

        # Since attention_mask is 1.0 for positions we want to attend and 0.0 for
        # masked positions, this operation will create a tensor which is 0.0 for
        # positions we want to attend and the dtype's smallest value for masked positions.
        # Since we are adding it to the raw scores before the softmax, this is
        # effectively the same as removing these entirely.
        extended_attention_mask = extended_attention_mask.to(dtype=dtype)  # fp16 compatibility
        extended_attention_mask = (1.0 - extended_attention_mask) * torch.finfo(dtype).min
        return extended_attention_mask

    def forward(self, input_ids=None, attention_mask=None):
        input_shape = input_ids.size()
        input_ids = input_ids.view(-1, input_shape[-1])
        inputs_embeds = self.embed_tokens(input_ids)
        batch_size, seq_length = input_shape

        if attention_mask is None:
            attention_mask = torch.ones(batch_size, seq_length, device=inputs_embeds.device)

        # We can provide a self-attention mask of dimensions [batch_size, from_seq_length, to_seq_length]
        # ourselves in which case we just need to make it broadcastable to all heads.
        extended_attention_mask = self.get_extended_attention_mask(attention_mask, input_shape, inputs_embeds.device)

        position_bias = None
        hidden_states = self.dropout(inputs_embeds)

        for i, layer_module in enumerate(self.block):
            layer_outputs = layer_module(
                hidden_states,
                attention_mask=extended_attention_mask,
                position_bias=position_bias,
            )
            hidden_states = layer_outputs[0]

            # We share the position biases between the layers - the first layer store them
            # layer_outputs = hidden-states, (self-attention position bias)
            position_bias = layer_outputs[1]

        hidden_states = self.final_layer_norm(hidden_states)
        hidden_states = self.dropout(hidden_states)
        return hidden_states


config = T5Config(vocab_size=21, d_model=16, d_kv=4, d_ff=24, num_layers=2, num_heads=4,
                  relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.0,
                  feed_forward_proj=FEED_FORWARD, is_decoder=IS_DECODER)
shared = nn.Embedding(config.vocab_size, config.d_model)
stack = T5Stack(config, shared)
lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
model = nn.ModuleDict({"stack": stack, "lm_head": lm_head})
initialize(model)
record.append(T5Attention._relative_position_bucket(torch.arange(-20, 21), bidirectional=True, num_buckets=8, max_distance=12).tolist())
record.append(T5Attention._relative_position_bucket(torch.arange(-20, 21), bidirectional=False, num_buckets=8, max_distance=12).tolist())
optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-2)
for input_ids, attention_mask, labels in batches:
    sequence_output = stack(input_ids, attention_mask=attention_mask)
    # Rescale output before projecting on vocab
    # See https://github.com/tensorflow/mesh/blob/fa19d69eafc9a482aff0b59ddd96b025c0cb207d/mesh_tensorflow/transformer/transformer.py#L586
    sequence_output = sequence_output * (config.d_model**-0.5)
    lm_logits = lm_head(sequence_output)
    loss_fct = CrossEntropyLoss(ignore_index=-100)
    loss = loss_fct(lm_logits.view(-1, lm_logits.size(-1)), labels.view(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''

CLIP_SOURCE = '''
class LayerNorm(nn.LayerNorm):
    """Subclass torch's LayerNorm to handle fp16."""

    def forward(self, x: torch.Tensor):
        orig_type = x.dtype
        ret = super().forward(x.type(torch.float32))
        return ret.type(orig_type)


class QuickGELU(nn.Module):
    def forward(self, x: torch.Tensor):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model: int, n_head: int, attn_mask: torch.Tensor = None):
        super().__init__()

        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1 = LayerNorm(d_model)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(d_model, d_model * 4)),
            ("gelu", QuickGELU()),
            ("c_proj", nn.Linear(d_model * 4, d_model))
        ]))
        self.ln_2 = LayerNorm(d_model)
        self.attn_mask = attn_mask

    def attention(self, x: torch.Tensor):
        self.attn_mask = self.attn_mask.to(dtype=x.dtype, device=x.device) if self.attn_mask is not None else None
        return self.attn(x, x, x, need_weights=False, attn_mask=self.attn_mask)[0]

    def forward(self, x: torch.Tensor):
        x = x + self.attention(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, attn_mask: torch.Tensor = None):
        super().__init__()
        self.width = width
        self.layers = layers
        self.resblocks = nn.Sequential(*[ResidualAttentionBlock(width, heads, attn_mask) for _ in range(layers)])

    def forward(self, x: torch.Tensor):
        return self.resblocks(x)


class VisionTransformer(nn.Module):
    def __init__(self, input_resolution: int, patch_size: int, width: int, layers: int, heads: int, output_dim: int):
        super().__init__()
        self.input_resolution = input_resolution
        self.output_dim = output_dim
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=width, kernel_size=patch_size, stride=patch_size, bias=False)

        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(scale * torch.randn((input_resolution // patch_size) ** 2 + 1, width))
        self.ln_pre = LayerNorm(width)

        self.transformer = Transformer(width, layers, heads)

        self.ln_post = LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x: torch.Tensor):
        x = self.conv1(x)  # shape = [*, width, grid, grid]
        x = x.reshape(x.shape[0], x.shape[1], -1)  # shape = [*, width, grid ** 2]
        x = x.permute(0, 2, 1)  # shape = [*, grid ** 2, width]
        x = torch.cat([self.class_embedding.to(x.dtype) + torch.zeros(x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device), x], dim=1)  # shape = [*, grid ** 2 + 1, width]
        x = x + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x)

        x = x.permute(1, 0, 2)  # NLD -> LND
        x = self.transformer(x)
        x = x.permute(1, 0, 2)  # LND -> NLD

        x = self.ln_post(x[:, 0, :])

        if self.proj is not None:
            x = x @ self.proj

        return x


class CLIP(nn.Module):
    def __init__(self,
                 embed_dim: int,
                 # vision
                 image_resolution: int,
                 vision_layers: Union[Tuple[int, int, int, int], int],
                 vision_width: int,
                 vision_patch_size: int,
                 # text
                 context_length: int,
                 vocab_size: int,
                 transformer_width: int,
                 transformer_heads: int,
                 transformer_layers: int
                 ):
        super().__init__()

        self.context_length = context_length

        vision_heads = vision_width // 64
        self.visual = VisionTransformer(
            input_resolution=image_resolution,
            patch_size=vision_patch_size,
            width=vision_width,
            layers=vision_layers,
            heads=vision_heads,
            output_dim=embed_dim
        )

        self.transformer = Transformer(
            width=transformer_width,
            layers=transformer_layers,
            heads=transformer_heads,
            attn_mask=self.build_attention_mask()
        )

        self.vocab_size = vocab_size
        self.token_embedding = nn.Embedding(vocab_size, transformer_width)
        self.positional_embedding = nn.Parameter(torch.empty(self.context_length, transformer_width))
        self.ln_final = LayerNorm(transformer_width)

        self.text_projection = nn.Parameter(torch.empty(transformer_width, embed_dim))
        self.logit_scale = nn.Parameter(torch.ones([]) * np.log(1 / 0.07))

        self.initialize_parameters()

    def initialize_parameters(self):
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)

        proj_std = (self.transformer.width ** -0.5) * ((2 * self.transformer.layers) ** -0.5)
        attn_std = self.transformer.width ** -0.5
        fc_std = (2 * self.transformer.width) ** -0.5
        for block in self.transformer.resblocks:
            nn.init.normal_(block.attn.in_proj_weight, std=attn_std)
            nn.init.normal_(block.attn.out_proj.weight, std=proj_std)
            nn.init.normal_(block.mlp.c_fc.weight, std=fc_std)
            nn.init.normal_(block.mlp.c_proj.weight, std=proj_std)

        if self.text_projection is not None:
            nn.init.normal_(self.text_projection, std=self.transformer.width ** -0.5)

    def build_attention_mask(self):
        # lazily create causal attention mask, with full attention between the vision tokens
        # pytorch uses additive attention mask; fill with -inf
        mask = torch.empty(self.context_length, self.context_length)
        mask.fill_(float("-inf"))
        mask.triu_(1)  # zero out the lower diagonal
        return mask

    @property
    def dtype(self):
        return self.visual.conv1.weight.dtype

    def encode_image(self, image):
        return self.visual(image.type(self.dtype))

    def encode_text(self, text):
        x = self.token_embedding(text).type(self.dtype)  # [batch_size, n_ctx, d_model]

        x = x + self.positional_embedding.type(self.dtype)
        x = x.permute(1, 0, 2)  # NLD -> LND
        x = self.transformer(x)
        x = x.permute(1, 0, 2)  # LND -> NLD
        x = self.ln_final(x).type(self.dtype)

        # x.shape = [batch_size, n_ctx, transformer.width]
        # take features from the eot embedding (eot_token is the highest number in each sequence)
        x = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection

        return x

    def forward(self, image, text):
        image_features = self.encode_image(image)
        text_features = self.encode_text(text)

        # normalized features
        image_features = image_features / image_features.norm(dim=1, keepdim=True)
        text_features = text_features / text_features.norm(dim=1, keepdim=True)

        # cosine similarity as logits
        logit_scale = self.logit_scale.exp()
        logits_per_image = logit_scale * image_features @ text_features.t()
        logits_per_text = logits_per_image.t()

        # shape = [global_batch_size, global_batch_size]
        return logits_per_image, logits_per_text


def convert_weights(model: nn.Module):
    """Convert applicable model parameters to fp16"""

    def _convert_weights_to_fp16(l):
        if isinstance(l, (nn.Conv1d, nn.Conv2d, nn.Linear)):
            l.weight.data = l.weight.data.half()
            if l.bias is not None:
                l.bias.data = l.bias.data.half()

        if isinstance(l, nn.MultiheadAttention):
            for attr in [*[f"{s}_proj_weight" for s in ["in", "q", "k", "v"]], "in_proj_bias", "bias_k", "bias_v"]:
                tensor = getattr(l, attr)
                if tensor is not None:
                    tensor.data = tensor.data.half()

        for name in ["text_projection", "proj"]:
            if hasattr(l, name):
                attr = getattr(l, name)
                if attr is not None:
                    attr.data = attr.data.half()

    model.apply(_convert_weights_to_fp16)


model = CLIP(embed_dim=8, image_resolution=8, vision_layers=1, vision_width=64, vision_patch_size=4,
             context_length=6, vocab_size=17, transformer_width=16, transformer_heads=2, transformer_layers=2)
initialize(model)

# the fine-tuning loop of openai/CLIP issue #83, with open_clip's clamp of the logit scale
loss_img = nn.CrossEntropyLoss()
loss_txt = nn.CrossEntropyLoss()
optimizer = optim.Adam(model.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2)
device = "cpu"
for batch in train_dataloader:
    optimizer.zero_grad()

    images, texts = batch

    images = images.to(device)
    texts = texts.to(device)

    logits_per_image, logits_per_text = model(images, texts)

    ground_truth = torch.arange(len(images), dtype=torch.long, device=device)

    total_loss = (loss_img(logits_per_image, ground_truth) + loss_txt(logits_per_text, ground_truth)) / 2
    total_loss.backward()
    optimizer.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(100))
    record.append(total_loss.item())

# zero-shot classification, as the README does it
model.eval()
with torch.no_grad():
    image_features = model.encode_image(images)
    text_features = model.encode_text(texts)
    image_features /= image_features.norm(dim=-1, keepdim=True)
    text_features /= text_features.norm(dim=-1, keepdim=True)
    similarity = (100.0 * image_features @ text_features.T).softmax(dim=-1)
    values, indices = similarity[0].topk(2)
record.append(similarity)
record.append(indices.tolist())
record.append(model.logit_scale.item())
record.append({k: v.detach().float().numpy().copy() for k, v in model.state_dict().items()})
'''

STEP = [
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    )
]


def run_program(source, step, lib, state, **names):
    """``source`` run under ``lib`` (its port under retrograd), the model initialised by torch
    and then loaded with torch's initial weights; the program's record."""

    def initialize(model):
        if not state:
            state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

    torch.manual_seed(0)
    record = []
    namespace = {
        "torch": lib,
        "nn": lib.nn,
        "optim": lib.optim,
        "F": lib.nn.functional,
        "math": math,
        "np": np,
        "OrderedDict": OrderedDict,
        "Union": Union,
        "Tuple": tuple,
        "Tensor": lib.Tensor,
        "record": record,
        "initialize": initialize,
        **names,
    }
    program = source if lib is torch else port(source, step)
    exec(compile(program, f"<{lib.__name__} port>", "exec"), namespace)
    return record, namespace


@pytest.mark.parametrize(("feed_forward", "is_decoder"), [("relu", False), ("gated-gelu", True)])
def test_hugging_face_t5_stack_matches_torch(feed_forward, is_decoder):
    rng = np.random.default_rng(51)
    tokens = rng.integers(0, 21, (2, 2, 9))
    lengths = [[9, 6], [5, 8]]
    masks = np.array([[[1] * n + [0] * (9 - n) for n in pair] for pair in lengths])
    labels = np.where(masks == 1, rng.integers(0, 21, tokens.shape), -100)
    records, state = [], {}
    for lib in (torch, rg):
        batches = [
            (lib.tensor(t), lib.tensor(m), lib.tensor(y)) for t, m, y in zip(tokens, masks, labels)
        ]
        record, _ = run_program(
            ACTIVATIONS_SOURCE + T5_SOURCE,
            STEP,
            lib,
            state,
            FEED_FORWARD=feed_forward,
            IS_DECODER=is_decoder,
            batches=batches,
            CrossEntropyLoss=lib.nn.CrossEntropyLoss,
        )
        records.append(record)
    # the buckets: bidirectional (exact near zero, logarithmic beyond, capped), and causal
    assert records[0][0][:3] == [3, 3, 3] and records[0][0][20] == 0
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


CLIP_STEP = [
    (
        "    total_loss.backward()\n    optimizer.step()",
        "    grads = total_loss.backward()\n    optimizer.step(grads)",
    )
]


def test_openai_clip_matches_torch():
    rng = np.random.default_rng(511)
    images = rng.standard_normal((3, 4, 3, 8, 8)).astype(np.float32)
    texts = rng.integers(1, 16, (3, 4, 6))
    for batch in texts:  # the end-of-text token, the highest id, ends each caption
        for row, end in zip(batch, rng.integers(2, 6, 4)):
            row[end] = 16
            row[end + 1 :] = 0
    records, state = [], {}
    for lib in (torch, rg):
        data = lib.utils.data
        loader = data.DataLoader(
            data.TensorDataset(
                lib.tensor(images.reshape(12, 3, 8, 8)), lib.tensor(texts.reshape(12, 6))
            ),
            batch_size=4,
        )
        record, names = run_program(CLIP_SOURCE, CLIP_STEP, lib, state, train_dataloader=loader)
        records.append(record)
        # clip.load's fp16 conversion: float16 is the torch inner backend's (NumPy has none,
        # and says so)
        model = names["model"]
        if lib is rg and os.environ.get("RETROGRAD_INNER") != "torch":
            with pytest.raises(rg.errors.DTypeError, match="float16"):
                names["convert_weights"](model)
            continue
        names["convert_weights"](model)
        halves = [
            model.visual.proj,
            model.visual.conv1.weight,
            model.transformer.resblocks[0].attn.in_proj_weight,
        ]
        assert all(p.dtype == lib.float16 for p in halves)
        assert model.visual.ln_pre.weight.dtype == lib.float32
    # the key part of in_proj_bias has no true gradient (it shifts a query's scores by one
    # constant), so Adam's steps on it follow the rounding noise: the query and value parts
    # are compared on their own
    ours, theirs = records[1][-1], records[0][-1]
    skip = [k for k in theirs if k.endswith("attn.in_proj_bias")]
    for name in skip:
        n = len(theirs[name]) // 3
        for part in (slice(0, n), slice(2 * n, 3 * n)):
            np.testing.assert_allclose(ours[name][part], theirs[name][part], rtol=2e-4, atol=2e-5)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=skip)


PARAMETRIZATIONS_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize

def symmetric(X):
    return X.triu() + X.triu(1).transpose(-1, -2)

X = torch.rand(3, 3)
A = symmetric(X)
assert torch.allclose(A, A.T)  # A is symmetric
print(A)                       # Quick visual check

class LinearSymmetric(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(n_features, n_features))

    def forward(self, x):
        A = symmetric(self.weight)
        return x @ A

layer = LinearSymmetric(3)
out = layer(torch.rand(8, 3))

class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

layer = nn.Linear(3, 3)
parametrize.register_parametrization(layer, "weight", Symmetric())

A = layer.weight
assert torch.allclose(A, A.T)  # A is symmetric
print(A)                       # Quick visual check

class Skew(nn.Module):
    def forward(self, X):
        A = X.triu(1)
        return A - A.transpose(-1, -2)


cnn = nn.Conv2d(in_channels=5, out_channels=8, kernel_size=3)
parametrize.register_parametrization(cnn, "weight", Skew())
# Print a few kernels
print(cnn.weight[0, 1])
print(cnn.weight[2, 2])

layer = nn.Linear(3, 3)
print(f"Unparametrized:\\n{layer}")
parametrize.register_parametrization(layer, "weight", Symmetric())
print(f"\\nParametrized:\\n{layer}")

parametrized_weight = layer.parametrizations.weight
print(parametrized_weight)

print(layer.parametrizations.weight.original)

symmetric = Symmetric()
weight_orig = layer.parametrizations.weight.original
print(torch.dist(layer.weight, symmetric(weight_orig)))

class NoisyParametrization(nn.Module):
    def forward(self, X):
        print("Computing the Parametrization")
        return X

layer = nn.Linear(4, 4)
parametrize.register_parametrization(layer, "weight", NoisyParametrization())
print("Here, layer.weight is recomputed every time we call it")
foo = layer.weight + layer.weight.T
bar = layer.weight.sum()
with parametrize.cached():
    print("Here, it is computed just the first time layer.weight is called")
    foo = layer.weight + layer.weight.T
    bar = layer.weight.sum()

class CayleyMap(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("Id", torch.eye(n))

    def forward(self, X):
        # (I + X)(I - X)^{-1}
        return torch.linalg.solve(self.Id - X, self.Id + X)

layer = nn.Linear(3, 3)
parametrize.register_parametrization(layer, "weight", Skew())
parametrize.register_parametrization(layer, "weight", CayleyMap(3))
X = layer.weight
print(torch.dist(X.T @ X, torch.eye(3)))  # X is orthogonal

class MatrixExponential(nn.Module):
    def forward(self, X):
        return torch.matrix_exp(X)

layer_orthogonal = nn.Linear(3, 3)
parametrize.register_parametrization(layer_orthogonal, "weight", Skew())
parametrize.register_parametrization(layer_orthogonal, "weight", MatrixExponential())
X = layer_orthogonal.weight
print(torch.dist(X.T @ X, torch.eye(3)))         # X is orthogonal

layer_spd = nn.Linear(3, 3)
parametrize.register_parametrization(layer_spd, "weight", Symmetric())
parametrize.register_parametrization(layer_spd, "weight", MatrixExponential())
X = layer_spd.weight
print(torch.dist(X, X.T))                        # X is symmetric
print((torch.linalg.eigvalsh(X) > 0.).all())  # X is positive definite

class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

    def right_inverse(self, A):
        return A.triu()

layer = nn.Linear(3, 3)
parametrize.register_parametrization(layer, "weight", Symmetric())
X = torch.rand(3, 3)
X = X + X.T   # X is now symmetric
layer.weight = X  # Initialize layer.weight to be X
print(torch.dist(layer.weight, X))  # layer.weight == X

class Skew(nn.Module):
    def forward(self, X):
        A = X.triu(1)
        return A - A.transpose(-1, -2)

    def right_inverse(self, A):
        # We assume that A is skew-symmetric
        # We take the upper-triangular elements, as these are those used in the forward
        return A.triu(1)

layer = nn.Linear(3, 3)
parametrize.register_parametrization(layer, "weight", Skew())
X = torch.rand(3, 3)
X = X - X.T                             # X is now skew-symmetric
layer.weight = X                        # Initialize layer.weight to be X
print(torch.dist(layer.weight, X))      # layer.weight == X

layer = nn.Linear(3, 3)
print("Before:")
print(layer)
print(layer.weight)
parametrize.register_parametrization(layer, "weight", Skew())
print("\\nParametrized:")
print(layer)
print(layer.weight)
parametrize.remove_parametrizations(layer, "weight")
print("\\nAfter. Weight has skew-symmetric values but it is unconstrained:")
print(layer)
print(layer.weight)

layer = nn.Linear(3, 3)
print("Before:")
print(layer)
print(layer.weight)
parametrize.register_parametrization(layer, "weight", Skew())
print("\\nParametrized:")
print(layer)
print(layer.weight)
parametrize.remove_parametrizations(layer, "weight", leave_parametrized=False)
print("\\nAfter. Same as Before:")
print(layer)
print(layer.weight)

# beyond the tutorial: the orthogonal and SPD layers trained, the gradients through
# torch.matrix_exp and torch.linalg.solve
cayley = nn.Linear(3, 3)
parametrize.register_parametrization(cayley, "weight", Skew())
parametrize.register_parametrization(cayley, "weight", CayleyMap(3))
params = list(layer_orthogonal.parameters()) + list(layer_spd.parameters()) + list(cayley.parameters())
optimizer = torch.optim.SGD(params, lr=0.1)
x = torch.rand(8, 3)
for step in range(3):
    optimizer.zero_grad()
    loss = (layer_orthogonal(x) - x.flip(1)).pow(2).mean() + layer_spd(x).sum() * 0.01 + cayley(x).abs().mean()
    loss.backward()
    optimizer.step()
    print(loss)
print(layer_orthogonal.weight)
print(layer_spd.weight)
print(cayley.weight)
print(list(cayley.state_dict()))
"""

#: the tutorial's import lines: both runs get torch, nn and parametrize from the harness (the
#: draws of torch.rand and the layers' initial weights from one seeded stream)
PARAMETRIZATIONS_IMPORTS = [
    ("import torch\nimport torch.nn as nn\nimport torch.nn.utils.parametrize as parametrize\n", ""),
]


class SharedDraws:
    """``lib`` with ``rand`` drawn from one seeded stream, and ``nn`` whose ``Linear`` and
    ``Conv2d`` take their initial weights from it, so both runs start alike."""

    def __init__(self, lib, rng):
        self._lib, self._rng = lib, rng

        def draw(*shape):
            return lib.tensor(rng.uniform(-0.5, 0.5, shape).astype(np.float32))

        def initialized(base):
            class Layer(base):
                def __init__(self, *args, **kwargs):
                    super().__init__(*args, **kwargs)
                    with lib.no_grad():
                        self.weight.copy_(draw(*self.weight.shape))
                        self.bias.copy_(draw(*self.bias.shape))

            Layer.__name__ = Layer.__qualname__ = base.__name__
            return Layer

        self.nn = type("nn", (), {})()
        for name in ("Module", "Parameter"):
            setattr(self.nn, name, getattr(lib.nn, name))
        self.nn.Linear = initialized(lib.nn.Linear)
        self.nn.Conv2d = initialized(lib.nn.Conv2d)

    def rand(self, *shape):
        return self._lib.tensor(self._rng.uniform(0.0, 1.0, shape).astype(np.float32))

    def __getattr__(self, name):
        return getattr(self._lib, name)


def test_parametrizations_tutorial_matches_torch():
    records = []
    for lib in (torch, rg):
        shim = SharedDraws(lib, np.random.default_rng(512))
        record = []

        def show(*values, record=record, lib=lib):
            for value in values:
                if isinstance(value, lib.Tensor):
                    value = value.detach().numpy().copy()
                    record.append(bool(value) if value.dtype == bool else value)
                else:
                    record.append(value if isinstance(value, str | list) else repr(value))

        names = {
            "torch": shim,
            "nn": shim.nn,
            "parametrize": lib.nn.utils.parametrize,
            "print": show,
        }
        source = port(PARAMETRIZATIONS_SOURCE, PARAMETRIZATIONS_IMPORTS)
        if lib is rg:
            source = port(
                source,
                [
                    (
                        "    loss.backward()\n    optimizer.step()",
                        "    grads = loss.backward()\n    optimizer.step(grads)",
                    )
                ],
            )
        exec(compile(source, f"<{lib.__name__} parametrizations>", "exec"), names)
        records.append(record)
    # NoisyParametrization computed once by register_parametrization's check, three times
    # uncached, once in parametrize.cached()
    texts = [r for r in records[0] if isinstance(r, str)]
    assert texts.count("Computing the Parametrization") == 5
    assert any(text.startswith("ParametrizedLinear(") for text in texts)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


UNET_SOURCE = '''
# ldm/modules/diffusionmodules/util.py
def checkpoint(func, inputs, params, flag):
    """
    Evaluate a function without caching intermediate activations, allowing for
    reduced memory at the expense of extra compute in the backward pass.
    :param func: the function to evaluate.
    :param inputs: the argument sequence to pass to `func`.
    :param params: a sequence of parameters `func` depends on but does not
                   explicitly take as arguments.
    :param flag: if False, disable gradient checkpointing.
    """
    if flag:
        args = tuple(inputs) + tuple(params)
        return CheckpointFunction.apply(func, len(inputs), *args)
    else:
        return func(*inputs)


class CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function, length, *args):
        ctx.run_function = run_function
        ctx.input_tensors = list(args[:length])
        ctx.input_params = list(args[length:])

        with torch.no_grad():
            output_tensors = ctx.run_function(*ctx.input_tensors)
        return output_tensors

    @staticmethod
    def backward(ctx, *output_grads):
        ctx.input_tensors = [x.detach().requires_grad_(True) for x in ctx.input_tensors]
        with torch.enable_grad():
            # Fixes a bug where the first op in run_function modifies the
            # Tensor storage in place, which is not allowed for detach()'d
            # Tensors.
            shallow_copies = [x.view_as(x) for x in ctx.input_tensors]
            output_tensors = ctx.run_function(*shallow_copies)
        input_grads = torch.autograd.grad(
            output_tensors,
            ctx.input_tensors + ctx.input_params,
            output_grads,
            allow_unused=True,
        )
        del ctx.input_tensors
        del ctx.input_params
        del output_tensors
        return (None, None) + input_grads


def timestep_embedding(timesteps, dim, max_period=10000, repeat_only=False):
    """
    Create sinusoidal timestep embeddings.
    :param timesteps: a 1-D Tensor of N indices, one per batch element.
                      These may be fractional.
    :param dim: the dimension of the output.
    :param max_period: controls the minimum frequency of the embeddings.
    :return: an [N x dim] Tensor of positional embeddings.
    """
    if not repeat_only:
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
        ).to(device=timesteps.device)
        args = timesteps[:, None].float() * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    else:
        embedding = repeat(timesteps, 'b -> b d', d=dim)
    return embedding


def zero_module(module):
    """
    Zero out the parameters of a module and return it.
    """
    for p in module.parameters():
        p.detach().zero_()
    return module


class GroupNorm32(nn.GroupNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


def conv_nd(dims, *args, **kwargs):
    """
    Create a 1D, 2D, or 3D convolution module.
    """
    if dims == 1:
        return nn.Conv1d(*args, **kwargs)
    elif dims == 2:
        return nn.Conv2d(*args, **kwargs)
    elif dims == 3:
        return nn.Conv3d(*args, **kwargs)
    raise ValueError(f"unsupported dimensions: {dims}")


def linear(*args, **kwargs):
    """
    Create a linear module.
    """
    return nn.Linear(*args, **kwargs)


def avg_pool_nd(dims, *args, **kwargs):
    """
    Create a 1D, 2D, or 3D average pooling module.
    """
    if dims == 1:
        return nn.AvgPool1d(*args, **kwargs)
    elif dims == 2:
        return nn.AvgPool2d(*args, **kwargs)
    elif dims == 3:
        return nn.AvgPool3d(*args, **kwargs)
    raise ValueError(f"unsupported dimensions: {dims}")


def normalization(channels):
    """
    Make a standard normalization layer.
    :param channels: number of input channels.
    :return: an nn.Module for normalization.
    """
    return GroupNorm32(32, channels)


# ldm/modules/diffusionmodules/openaimodel.py
class TimestepBlock(nn.Module):
    """
    Any module where forward() takes timestep embeddings as a second argument.
    """

    @abstractmethod
    def forward(self, x, emb):
        """
        Apply the module to `x` given `emb` timestep embeddings.
        """


class TimestepEmbedSequential(nn.Sequential, TimestepBlock):
    """
    A sequential module that passes timestep embeddings to the children that
    support it as an extra input.
    """

    def forward(self, x, emb, context=None):
        for layer in self:
            if isinstance(layer, TimestepBlock):
                x = layer(x, emb)
            elif isinstance(layer, SpatialTransformer):
                x = layer(x, context)
            else:
                x = layer(x)
        return x


class Upsample(nn.Module):
    """
    An upsampling layer with an optional convolution.
    :param channels: channels in the inputs and outputs.
    :param use_conv: a bool determining if a convolution is applied.
    :param dims: determines if the signal is 1D, 2D, or 3D. If 3D, then
                 upsampling occurs in the inner-two dimensions.
    """

    def __init__(self, channels, use_conv, dims=2, out_channels=None, padding=1):
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.use_conv = use_conv
        self.dims = dims
        if use_conv:
            self.conv = conv_nd(dims, self.channels, self.out_channels, 3, padding=padding)

    def forward(self, x):
        assert x.shape[1] == self.channels
        if self.dims == 3:
            x = F.interpolate(
                x, (x.shape[2], x.shape[3] * 2, x.shape[4] * 2), mode="nearest"
            )
        else:
            x = F.interpolate(x, scale_factor=2, mode="nearest")
        if self.use_conv:
            x = self.conv(x)
        return x


class Downsample(nn.Module):
    """
    A downsampling layer with an optional convolution.
    :param channels: channels in the inputs and outputs.
    :param use_conv: a bool determining if a convolution is applied.
    :param dims: determines if the signal is 1D, 2D, or 3D. If 3D, then
                 downsampling occurs in the inner-two dimensions.
    """

    def __init__(self, channels, use_conv, dims=2, out_channels=None, padding=1):
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.use_conv = use_conv
        self.dims = dims
        stride = 2 if dims != 3 else (1, 2, 2)
        if use_conv:
            self.op = conv_nd(
                dims, self.channels, self.out_channels, 3, stride=stride, padding=padding
            )
        else:
            assert self.channels == self.out_channels
            self.op = avg_pool_nd(dims, kernel_size=stride, stride=stride)

    def forward(self, x):
        assert x.shape[1] == self.channels
        return self.op(x)


class ResBlock(TimestepBlock):
    """
    A residual block that can optionally change the number of channels.
    """

    def __init__(
        self,
        channels,
        emb_channels,
        dropout,
        out_channels=None,
        use_conv=False,
        use_scale_shift_norm=False,
        dims=2,
        use_checkpoint=False,
        up=False,
        down=False,
    ):
        super().__init__()
        self.channels = channels
        self.emb_channels = emb_channels
        self.dropout = dropout
        self.out_channels = out_channels or channels
        self.use_conv = use_conv
        self.use_checkpoint = use_checkpoint
        self.use_scale_shift_norm = use_scale_shift_norm

        self.in_layers = nn.Sequential(
            normalization(channels),
            nn.SiLU(),
            conv_nd(dims, channels, self.out_channels, 3, padding=1),
        )

        self.updown = up or down

        if up:
            self.h_upd = Upsample(channels, False, dims)
            self.x_upd = Upsample(channels, False, dims)
        elif down:
            self.h_upd = Downsample(channels, False, dims)
            self.x_upd = Downsample(channels, False, dims)
        else:
            self.h_upd = self.x_upd = nn.Identity()

        self.emb_layers = nn.Sequential(
            nn.SiLU(),
            linear(
                emb_channels,
                2 * self.out_channels if use_scale_shift_norm else self.out_channels,
            ),
        )
        self.out_layers = nn.Sequential(
            normalization(self.out_channels),
            nn.SiLU(),
            nn.Dropout(p=dropout),
            zero_module(
                conv_nd(dims, self.out_channels, self.out_channels, 3, padding=1)
            ),
        )

        if self.out_channels == channels:
            self.skip_connection = nn.Identity()
        elif use_conv:
            self.skip_connection = conv_nd(
                dims, channels, self.out_channels, 3, padding=1
            )
        else:
            self.skip_connection = conv_nd(dims, channels, self.out_channels, 1)

    def forward(self, x, emb):
        """
        Apply the block to a Tensor, conditioned on a timestep embedding.
        :param x: an [N x C x ...] Tensor of features.
        :param emb: an [N x emb_channels] Tensor of timestep embeddings.
        :return: an [N x C x ...] Tensor of outputs.
        """
        return checkpoint(
            self._forward, (x, emb), self.parameters(), self.use_checkpoint
        )

    def _forward(self, x, emb):
        if self.updown:
            in_rest, in_conv = self.in_layers[:-1], self.in_layers[-1]
            h = in_rest(x)
            h = self.h_upd(h)
            x = self.x_upd(x)
            h = in_conv(h)
        else:
            h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)
        while len(emb_out.shape) < len(h.shape):
            emb_out = emb_out[..., None]
        if self.use_scale_shift_norm:
            out_norm, out_rest = self.out_layers[0], self.out_layers[1:]
            scale, shift = torch.chunk(emb_out, 2, dim=1)
            h = out_norm(h) * (1 + scale) + shift
            h = out_rest(h)
        else:
            h = h + emb_out
            h = self.out_layers(h)
        return self.skip_connection(x) + h


class AttentionBlock(nn.Module):
    """
    An attention block that allows spatial positions to attend to each other.
    Originally ported from here, but adapted to the N-d case.
    https://github.com/hojonathanho/diffusion/blob/1e0dceb3b3495bbe19116a5e1b3596cd0706c543/diffusion_tf/models/unet.py#L66.
    """

    def __init__(
        self,
        channels,
        num_heads=1,
        num_head_channels=-1,
        use_checkpoint=False,
        use_new_attention_order=False,
    ):
        super().__init__()
        self.channels = channels
        if num_head_channels == -1:
            self.num_heads = num_heads
        else:
            assert (
                channels % num_head_channels == 0
            ), f"q,k,v channels {channels} is not divisible by num_head_channels {num_head_channels}"
            self.num_heads = channels // num_head_channels
        self.use_checkpoint = use_checkpoint
        self.norm = normalization(channels)
        self.qkv = conv_nd(1, channels, channels * 3, 1)
        if use_new_attention_order:
            # split qkv before split heads
            self.attention = QKVAttention(self.num_heads)
        else:
            # split heads before split qkv
            self.attention = QKVAttentionLegacy(self.num_heads)

        self.proj_out = zero_module(conv_nd(1, channels, channels, 1))

    def forward(self, x):
        return checkpoint(self._forward, (x,), self.parameters(), True)   # TODO: check checkpoint usage, is True # TODO: fix the .half call!!!
        #return pt_checkpoint(self._forward, x)  # pytorch

    def _forward(self, x):
        b, c, *spatial = x.shape
        x = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x))
        h = self.attention(qkv)
        h = self.proj_out(h)
        return (x + h).reshape(b, c, *spatial)


class QKVAttentionLegacy(nn.Module):
    """
    A module which performs QKV attention. Matches legacy QKVAttention + input/ouput heads shaping
    """

    def __init__(self, n_heads):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, qkv):
        """
        Apply QKV attention.
        :param qkv: an [N x (H * 3 * C) x T] tensor of Qs, Ks, and Vs.
        :return: an [N x (H * C) x T] tensor after attention.
        """
        bs, width, length = qkv.shape
        assert width % (3 * self.n_heads) == 0
        ch = width // (3 * self.n_heads)
        q, k, v = qkv.reshape(bs * self.n_heads, ch * 3, length).split(ch, dim=1)
        scale = 1 / math.sqrt(math.sqrt(ch))
        weight = torch.einsum(
            "bct,bcs->bts", q * scale, k * scale
        )  # More stable with f16 than dividing afterwards
        weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
        a = torch.einsum("bts,bcs->bct", weight, v)
        return a.reshape(bs, -1, length)


class QKVAttention(nn.Module):
    """
    A module which performs QKV attention and splits in a different order.
    """

    def __init__(self, n_heads):
        super().__init__()
        self.n_heads = n_heads

    def forward(self, qkv):
        """
        Apply QKV attention.
        :param qkv: an [N x (3 * H * C) x T] tensor of Qs, Ks, and Vs.
        :return: an [N x (H * C) x T] tensor after attention.
        """
        bs, width, length = qkv.shape
        assert width % (3 * self.n_heads) == 0
        ch = width // (3 * self.n_heads)
        q, k, v = qkv.chunk(3, dim=1)
        scale = 1 / math.sqrt(math.sqrt(ch))
        weight = torch.einsum(
            "bct,bcs->bts",
            (q * scale).view(bs * self.n_heads, ch, length),
            (k * scale).view(bs * self.n_heads, ch, length),
        )  # More stable with f16 than dividing afterwards
        weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
        a = torch.einsum("bts,bcs->bct", weight, v.reshape(bs * self.n_heads, ch, length))
        return a.reshape(bs, -1, length)


# a small UNet of those blocks (UNetModel's layout, one level), trained as DDPM trains
class TinyUNet(nn.Module):
    def __init__(self, in_channels=3, model_channels=32, use_checkpoint=False):
        super().__init__()
        self.model_channels = model_channels
        time_embed_dim = model_channels * 2
        self.time_embed = nn.Sequential(
            linear(model_channels, time_embed_dim),
            nn.SiLU(),
            linear(time_embed_dim, time_embed_dim),
        )
        ch = model_channels
        self.input_blocks = nn.ModuleList([
            TimestepEmbedSequential(conv_nd(2, in_channels, ch, 3, padding=1)),
            TimestepEmbedSequential(ResBlock(ch, time_embed_dim, 0.0, use_checkpoint=use_checkpoint),
                                    AttentionBlock(ch, num_heads=2)),
            TimestepEmbedSequential(Downsample(ch, True)),
        ])
        self.middle_block = TimestepEmbedSequential(
            ResBlock(ch, time_embed_dim, 0.0, use_scale_shift_norm=True, use_checkpoint=use_checkpoint),
            AttentionBlock(ch, num_head_channels=16, use_new_attention_order=True),
            ResBlock(ch, time_embed_dim, 0.0, down=True),
            ResBlock(ch, time_embed_dim, 0.0, up=True),
        )
        self.output_blocks = nn.ModuleList([
            TimestepEmbedSequential(ResBlock(ch * 2, time_embed_dim, 0.0, out_channels=ch), Upsample(ch, True)),
            TimestepEmbedSequential(ResBlock(ch * 2, time_embed_dim, 0.0, out_channels=ch, use_conv=True)),
        ])
        self.out = nn.Sequential(
            normalization(ch),
            nn.SiLU(),
            zero_module(conv_nd(2, model_channels, in_channels, 3, padding=1)),
        )

    def forward(self, x, timesteps=None):
        hs = []
        t_emb = timestep_embedding(timesteps, self.model_channels, repeat_only=False)
        emb = self.time_embed(t_emb)
        h = x.type(torch.float32)
        for module in self.input_blocks:
            h = module(h, emb)
            hs.append(h)
        h = self.middle_block(h, emb)
        for module in self.output_blocks:
            h = torch.cat([h, hs.pop()], dim=1)
            h = module(h, emb)
        h = h.type(x.dtype)
        return self.out(h)


model = TinyUNet(use_checkpoint=USE_CHECKPOINT)
initialize(model)
T = 1000
betas = torch.linspace(1e-4, 0.02, T, dtype=torch.float64)
alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)
sqrt_alphas_cumprod = torch.sqrt(alphas_cumprod).float()
sqrt_one_minus_alphas_cumprod = torch.sqrt(1.0 - alphas_cumprod).float()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for x_start, t, noise in batches:
    x_noisy = (sqrt_alphas_cumprod[t].view(-1, 1, 1, 1) * x_start
               + sqrt_one_minus_alphas_cumprod[t].view(-1, 1, 1, 1) * noise)
    model_output = model(x_noisy, t)
    loss = F.mse_loss(model_output, noise)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''


def test_latent_diffusion_unet_blocks_match_torch():
    # the ResBlocks checkpointed too (AttentionBlock always is): every block's backward runs
    # CheckpointFunction's recomputation
    use_checkpoint = True
    rng = np.random.default_rng(513)
    images = rng.standard_normal((2, 2, 3, 8, 8)).astype(np.float32)
    steps = rng.integers(0, 1000, (2, 2))
    noises = rng.standard_normal(images.shape).astype(np.float32)
    records, state = [], {}
    for lib in (torch, rg):
        batches = [
            (lib.tensor(x), lib.tensor(t), lib.tensor(n)) for x, t, n in zip(images, steps, noises)
        ]

        class SpatialTransformer(lib.nn.Module):  # ldm's cross-attention block, unused here
            pass

        record, _ = run_program(
            UNET_SOURCE,
            STEP,
            lib,
            state,
            USE_CHECKPOINT=use_checkpoint,
            batches=batches,
            abstractmethod=abc.abstractmethod,
            SpatialTransformer=SpatialTransformer,
            repeat=None,
        )
        records.append(record)
    # AdamW's first steps on the zero-initialised convolutions' near-zero gradients follow
    # float32 rounding: a tenth of a step (lr 1e-3) apart at most
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=1e-4)
