# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- the whole DETR model (facebookresearch/detr ``models/detr.py``'s ``DETR`` and
  ``PostProcess``, ``models/transformer.py``, ``models/backbone.py``,
  ``models/position_encoding.py``, ``util/misc.py``'s ``NestedTensor`` and
  ``nested_tensor_from_tensor_list``, torchvision's ``FrozenBatchNorm2d`` and
  ``IntermediateLayerGetter``), on a small ResNet-shaped backbone (``conv1``, ``bn1``, ``relu``,
  ``maxpool``, ``layer1``..``layer4``, ``avgpool``, ``fc``) made with ``norm_layer=
  FrozenBatchNorm2d``, trained with the matcher and criterion of ``tests/test_real_ports_28.py``:
  images of different sizes padded by ``for img, pad_img, m in zip(tensor_list, tensor, mask):
  pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)`` and ``m[: img.shape[1],
  :img.shape[2]] = False`` (writes through the rows that iterating a tensor yields);
  ``FrozenBatchNorm2d``'s buffers and its ``_load_from_state_dict`` override deleting
  ``num_batches_tracked`` before ``super()._load_from_state_dict``; the backbone frozen by name
  (``parameter.requires_grad_(False)``); ``IntermediateLayerGetter(nn.ModuleDict)`` built from
  ``named_children()`` into an ``OrderedDict`` with ``return_layers``; the mask resized by
  ``F.interpolate(m[None].float(), size=x.shape[-2:]).to(torch.bool)[0]``; ``Joiner(nn.Sequential)``
  indexing ``self[0]``/``self[1]``; ``PositionEmbeddingSine`` (``not_mask.cumsum(1,
  dtype=torch.float32)``, ``dim_t // 2``, ``torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:,
  :, :, 1::2].cos()), dim=4).flatten(3)``); DETR's own transformer (``_get_clones`` by
  ``copy.deepcopy``, ``q = k = self.with_pos_embed(src, pos)``, ``nn.MultiheadAttention`` with
  ``key_padding_mask``, post- and pre-norm layers, ``return_intermediate`` by ``torch.stack``,
  ``xavier_uniform_`` of every ``p.dim() > 1``, ``memory.permute(1, 2, 0).view(bs, c, h, w)``);
  the auxiliary outputs; ``PostProcess`` (``prob[..., :-1].max(-1)``, ``target_sizes.unbind(1)``,
  ``scale_fct[:, None, :]``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_28 import DETR_SOURCE, DETR_STEP

DETR_MODEL_SOURCE = """
import copy
from collections import OrderedDict
from typing import Dict, List, Optional

from torch import Tensor


# util/misc.py
class NestedTensor(object):
    def __init__(self, tensors, mask: Optional[Tensor]):
        self.tensors = tensors
        self.mask = mask

    def to(self, device):
        # type: (Device) -> NestedTensor # noqa
        cast_tensor = self.tensors.to(device)
        mask = self.mask
        if mask is not None:
            assert mask is not None
            cast_mask = mask.to(device)
        else:
            cast_mask = None
        return NestedTensor(cast_tensor, cast_mask)

    def decompose(self):
        return self.tensors, self.mask

    def __repr__(self):
        return str(self.tensors)


def _max_by_axis(the_list):
    # type: (List[List[int]]) -> List[int]
    maxes = the_list[0]
    for sublist in the_list[1:]:
        for index, item in enumerate(sublist):
            maxes[index] = max(maxes[index], item)
    return maxes


def nested_tensor_from_tensor_list(tensor_list: List[Tensor]):
    # TODO make this more general
    if tensor_list[0].ndim == 3:
        # TODO make it support different-sized images
        max_size = _max_by_axis([list(img.shape) for img in tensor_list])
        # min_size = tuple(min(s) for s in zip(*[img.shape for img in tensor_list]))
        batch_shape = [len(tensor_list)] + max_size
        b, c, h, w = batch_shape
        dtype = tensor_list[0].dtype
        device = tensor_list[0].device
        tensor = torch.zeros(batch_shape, dtype=dtype, device=device)
        mask = torch.ones((b, h, w), dtype=torch.bool, device=device)
        for img, pad_img, m in zip(tensor_list, tensor, mask):
            pad_img[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
            m[: img.shape[1], :img.shape[2]] = False
    else:
        raise ValueError('not supported')
    return NestedTensor(tensor, mask)


# torchvision/ops/misc.py
class FrozenBatchNorm2d(torch.nn.Module):
    \"\"\"
    BatchNorm2d where the batch statistics and the affine parameters are fixed.
    \"\"\"

    def __init__(self, n):
        super(FrozenBatchNorm2d, self).__init__()
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        num_batches_tracked_key = prefix + 'num_batches_tracked'
        if num_batches_tracked_key in state_dict:
            del state_dict[num_batches_tracked_key]

        super(FrozenBatchNorm2d, self)._load_from_state_dict(
            state_dict, prefix, local_metadata, strict,
            missing_keys, unexpected_keys, error_msgs)

    def forward(self, x):
        # move reshapes to the beginning
        # to make it fuser-friendly
        w = self.weight.reshape(1, -1, 1, 1)
        b = self.bias.reshape(1, -1, 1, 1)
        rv = self.running_var.reshape(1, -1, 1, 1)
        rm = self.running_mean.reshape(1, -1, 1, 1)
        eps = 1e-5
        scale = w * (rv + eps).rsqrt()
        bias = b - rm * scale
        return x * scale + bias


# torchvision/models/_utils.py
class IntermediateLayerGetter(nn.ModuleDict):
    _version = 2
    __annotations__ = {
        "return_layers": Dict[str, str],
    }

    def __init__(self, model: nn.Module, return_layers: Dict[str, str]) -> None:
        if not set(return_layers).issubset([name for name, _ in model.named_children()]):
            raise ValueError("return_layers are not present in model")
        orig_return_layers = return_layers
        return_layers = {str(k): str(v) for k, v in return_layers.items()}
        layers = OrderedDict()
        for name, module in model.named_children():
            layers[name] = module
            if name in return_layers:
                del return_layers[name]
            if not return_layers:
                break

        super().__init__(layers)
        self.return_layers = orig_return_layers

    def forward(self, x):
        out = OrderedDict()
        for name, module in self.items():
            x = module(x)
            if name in self.return_layers:
                out_name = self.return_layers[name]
                out[out_name] = x
        return out


# a small stand-in for torchvision's resnet50(norm_layer=FrozenBatchNorm2d)
class TinyResNet(nn.Module):
    def __init__(self, norm_layer, width=4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False)
        self.bn1 = norm_layer(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = nn.Sequential(nn.Conv2d(width, width, 3, padding=1, bias=False), norm_layer(width), nn.ReLU(inplace=True))
        self.layer2 = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False), norm_layer(2 * width), nn.ReLU(inplace=True))
        self.layer3 = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, padding=1, bias=False), norm_layer(2 * width), nn.ReLU(inplace=True))
        self.layer4 = nn.Sequential(nn.Conv2d(2 * width, 4 * width, 3, padding=1, bias=False), norm_layer(4 * width), nn.ReLU(inplace=True))
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(4 * width, 10)


# models/backbone.py
class BackboneBase(nn.Module):

    def __init__(self, backbone: nn.Module, train_backbone: bool, num_channels: int, return_interm_layers: bool):
        super().__init__()
        for name, parameter in backbone.named_parameters():
            if not train_backbone or 'layer2' not in name and 'layer3' not in name and 'layer4' not in name:
                parameter.requires_grad_(False)
        if return_interm_layers:
            return_layers = {"layer1": "0", "layer2": "1", "layer3": "2", "layer4": "3"}
        else:
            return_layers = {'layer4': "0"}
        self.body = IntermediateLayerGetter(backbone, return_layers=return_layers)
        self.num_channels = num_channels

    def forward(self, tensor_list: NestedTensor):
        xs = self.body(tensor_list.tensors)
        out: Dict[str, NestedTensor] = {}
        for name, x in xs.items():
            m = tensor_list.mask
            assert m is not None
            mask = F.interpolate(m[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
            out[name] = NestedTensor(x, mask)
        return out


class Backbone(BackboneBase):
    \"\"\"ResNet backbone with frozen BatchNorm.\"\"\"
    def __init__(self, name: str,
                 train_backbone: bool,
                 return_interm_layers: bool,
                 dilation: bool):
        backbone = TinyResNet(norm_layer=FrozenBatchNorm2d)
        num_channels = 16
        super().__init__(backbone, train_backbone, num_channels, return_interm_layers)


class Joiner(nn.Sequential):
    def __init__(self, backbone, position_embedding):
        super().__init__(backbone, position_embedding)

    def forward(self, tensor_list: NestedTensor):
        xs = self[0](tensor_list)
        out: List[NestedTensor] = []
        pos = []
        for name, x in xs.items():
            out.append(x)
            # position encoding
            pos.append(self[1](x).to(x.tensors.dtype))

        return out, pos


# models/position_encoding.py
class PositionEmbeddingSine(nn.Module):
    \"\"\"
    This is a more standard version of the position embedding, very similar to the one
    used by the Attention is all you need paper, generalized to work on images.
    \"\"\"
    def __init__(self, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
        super().__init__()
        self.num_pos_feats = num_pos_feats
        self.temperature = temperature
        self.normalize = normalize
        if scale is not None and normalize is False:
            raise ValueError("normalize should be True if scale is passed")
        if scale is None:
            scale = 2 * math.pi
        self.scale = scale

    def forward(self, tensor_list: NestedTensor):
        x = tensor_list.tensors
        mask = tensor_list.mask
        assert mask is not None
        not_mask = ~mask
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        if self.normalize:
            eps = 1e-6
            y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
            x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale

        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)

        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos = torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)
        return pos


# models/transformer.py
class Transformer(nn.Module):

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6,
                 num_decoder_layers=6, dim_feedforward=2048, dropout=0.1,
                 activation="relu", normalize_before=False,
                 return_intermediate_dec=False):
        super().__init__()

        encoder_layer = TransformerEncoderLayer(d_model, nhead, dim_feedforward,
                                                dropout, activation, normalize_before)
        encoder_norm = nn.LayerNorm(d_model) if normalize_before else None
        self.encoder = TransformerEncoder(encoder_layer, num_encoder_layers, encoder_norm)

        decoder_layer = TransformerDecoderLayer(d_model, nhead, dim_feedforward,
                                                dropout, activation, normalize_before)
        decoder_norm = nn.LayerNorm(d_model)
        self.decoder = TransformerDecoder(decoder_layer, num_decoder_layers, decoder_norm,
                                          return_intermediate=return_intermediate_dec)

        self._reset_parameters()

        self.d_model = d_model
        self.nhead = nhead

    def _reset_parameters(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, mask, query_embed, pos_embed):
        # flatten NxCxHxW to HWxNxC
        bs, c, h, w = src.shape
        src = src.flatten(2).permute(2, 0, 1)
        pos_embed = pos_embed.flatten(2).permute(2, 0, 1)
        query_embed = query_embed.unsqueeze(1).repeat(1, bs, 1)
        mask = mask.flatten(1)

        tgt = torch.zeros_like(query_embed)
        memory = self.encoder(src, src_key_padding_mask=mask, pos=pos_embed)
        hs = self.decoder(tgt, memory, memory_key_padding_mask=mask,
                          pos=pos_embed, query_pos=query_embed)
        return hs.transpose(1, 2), memory.permute(1, 2, 0).view(bs, c, h, w)


class TransformerEncoder(nn.Module):

    def __init__(self, encoder_layer, num_layers, norm=None):
        super().__init__()
        self.layers = _get_clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src,
                mask: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None):
        output = src

        for layer in self.layers:
            output = layer(output, src_mask=mask,
                           src_key_padding_mask=src_key_padding_mask, pos=pos)

        if self.norm is not None:
            output = self.norm(output)

        return output


class TransformerDecoder(nn.Module):

    def __init__(self, decoder_layer, num_layers, norm=None, return_intermediate=False):
        super().__init__()
        self.layers = _get_clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm
        self.return_intermediate = return_intermediate

    def forward(self, tgt, memory,
                tgt_mask: Optional[Tensor] = None,
                memory_mask: Optional[Tensor] = None,
                tgt_key_padding_mask: Optional[Tensor] = None,
                memory_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None,
                query_pos: Optional[Tensor] = None):
        output = tgt

        intermediate = []

        for layer in self.layers:
            output = layer(output, memory, tgt_mask=tgt_mask,
                           memory_mask=memory_mask,
                           tgt_key_padding_mask=tgt_key_padding_mask,
                           memory_key_padding_mask=memory_key_padding_mask,
                           pos=pos, query_pos=query_pos)
            if self.return_intermediate:
                intermediate.append(self.norm(output))

        if self.norm is not None:
            output = self.norm(output)
            if self.return_intermediate:
                intermediate.pop()
                intermediate.append(output)

        if self.return_intermediate:
            return torch.stack(intermediate)

        return output.unsqueeze(0)


class TransformerEncoderLayer(nn.Module):

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation="relu", normalize_before=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        # Implementation of Feedforward model
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)

        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

        self.activation = _get_activation_fn(activation)
        self.normalize_before = normalize_before

    def with_pos_embed(self, tensor, pos: Optional[Tensor]):
        return tensor if pos is None else tensor + pos

    def forward_post(self,
                     src,
                     src_mask: Optional[Tensor] = None,
                     src_key_padding_mask: Optional[Tensor] = None,
                     pos: Optional[Tensor] = None):
        q = k = self.with_pos_embed(src, pos)
        src2 = self.self_attn(q, k, value=src, attn_mask=src_mask,
                              key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src = self.norm1(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src))))
        src = src + self.dropout2(src2)
        src = self.norm2(src)
        return src

    def forward_pre(self, src,
                    src_mask: Optional[Tensor] = None,
                    src_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None):
        src2 = self.norm1(src)
        q = k = self.with_pos_embed(src2, pos)
        src2 = self.self_attn(q, k, value=src2, attn_mask=src_mask,
                              key_padding_mask=src_key_padding_mask)[0]
        src = src + self.dropout1(src2)
        src2 = self.norm2(src)
        src2 = self.linear2(self.dropout(self.activation(self.linear1(src2))))
        src = src + self.dropout2(src2)
        return src

    def forward(self, src,
                src_mask: Optional[Tensor] = None,
                src_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None):
        if self.normalize_before:
            return self.forward_pre(src, src_mask, src_key_padding_mask, pos)
        return self.forward_post(src, src_mask, src_key_padding_mask, pos)


class TransformerDecoderLayer(nn.Module):

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1,
                 activation="relu", normalize_before=False):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout)
        # Implementation of Feedforward model
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)

        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

        self.activation = _get_activation_fn(activation)
        self.normalize_before = normalize_before

    def with_pos_embed(self, tensor, pos: Optional[Tensor]):
        return tensor if pos is None else tensor + pos

    def forward_post(self, tgt, memory,
                     tgt_mask: Optional[Tensor] = None,
                     memory_mask: Optional[Tensor] = None,
                     tgt_key_padding_mask: Optional[Tensor] = None,
                     memory_key_padding_mask: Optional[Tensor] = None,
                     pos: Optional[Tensor] = None,
                     query_pos: Optional[Tensor] = None):
        q = k = self.with_pos_embed(tgt, query_pos)
        tgt2 = self.self_attn(q, k, value=tgt, attn_mask=tgt_mask,
                              key_padding_mask=tgt_key_padding_mask)[0]
        tgt = tgt + self.dropout1(tgt2)
        tgt = self.norm1(tgt)
        tgt2 = self.multihead_attn(query=self.with_pos_embed(tgt, query_pos),
                                   key=self.with_pos_embed(memory, pos),
                                   value=memory, attn_mask=memory_mask,
                                   key_padding_mask=memory_key_padding_mask)[0]
        tgt = tgt + self.dropout2(tgt2)
        tgt = self.norm2(tgt)
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt))))
        tgt = tgt + self.dropout3(tgt2)
        tgt = self.norm3(tgt)
        return tgt

    def forward_pre(self, tgt, memory,
                    tgt_mask: Optional[Tensor] = None,
                    memory_mask: Optional[Tensor] = None,
                    tgt_key_padding_mask: Optional[Tensor] = None,
                    memory_key_padding_mask: Optional[Tensor] = None,
                    pos: Optional[Tensor] = None,
                    query_pos: Optional[Tensor] = None):
        tgt2 = self.norm1(tgt)
        q = k = self.with_pos_embed(tgt2, query_pos)
        tgt2 = self.self_attn(q, k, value=tgt2, attn_mask=tgt_mask,
                              key_padding_mask=tgt_key_padding_mask)[0]
        tgt = tgt + self.dropout1(tgt2)
        tgt2 = self.norm2(tgt)
        tgt2 = self.multihead_attn(query=self.with_pos_embed(tgt2, query_pos),
                                   key=self.with_pos_embed(memory, pos),
                                   value=memory, attn_mask=memory_mask,
                                   key_padding_mask=memory_key_padding_mask)[0]
        tgt = tgt + self.dropout2(tgt2)
        tgt2 = self.norm3(tgt)
        tgt2 = self.linear2(self.dropout(self.activation(self.linear1(tgt2))))
        tgt = tgt + self.dropout3(tgt2)
        return tgt

    def forward(self, tgt, memory,
                tgt_mask: Optional[Tensor] = None,
                memory_mask: Optional[Tensor] = None,
                tgt_key_padding_mask: Optional[Tensor] = None,
                memory_key_padding_mask: Optional[Tensor] = None,
                pos: Optional[Tensor] = None,
                query_pos: Optional[Tensor] = None):
        if self.normalize_before:
            return self.forward_pre(tgt, memory, tgt_mask, memory_mask,
                                    tgt_key_padding_mask, memory_key_padding_mask, pos, query_pos)
        return self.forward_post(tgt, memory, tgt_mask, memory_mask,
                                 tgt_key_padding_mask, memory_key_padding_mask, pos, query_pos)


def _get_clones(module, N):
    return nn.ModuleList([copy.deepcopy(module) for i in range(N)])


def _get_activation_fn(activation):
    \"\"\"Return an activation function given a string\"\"\"
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if activation == "glu":
        return F.glu
    raise RuntimeError(F"activation should be relu/gelu, not {activation}.")


# models/detr.py
class DETR(nn.Module):
    \"\"\" This is the DETR module that performs object detection \"\"\"
    def __init__(self, backbone, transformer, num_classes, num_queries, aux_loss=False):
        super().__init__()
        self.num_queries = num_queries
        self.transformer = transformer
        hidden_dim = transformer.d_model
        self.class_embed = nn.Linear(hidden_dim, num_classes + 1)
        self.bbox_embed = MLP(hidden_dim, hidden_dim, 4, 3)
        self.query_embed = nn.Embedding(num_queries, hidden_dim)
        self.input_proj = nn.Conv2d(backbone.num_channels, hidden_dim, kernel_size=1)
        self.backbone = backbone
        self.aux_loss = aux_loss

    def forward(self, samples: NestedTensor):
        if isinstance(samples, (list, torch.Tensor)):
            samples = nested_tensor_from_tensor_list(samples)
        features, pos = self.backbone(samples)

        src, mask = features[-1].decompose()
        assert mask is not None
        hs = self.transformer(self.input_proj(src), mask, self.query_embed.weight, pos[-1])[0]

        outputs_class = self.class_embed(hs)
        outputs_coord = self.bbox_embed(hs).sigmoid()
        out = {'pred_logits': outputs_class[-1], 'pred_boxes': outputs_coord[-1]}
        if self.aux_loss:
            out['aux_outputs'] = self._set_aux_loss(outputs_class, outputs_coord)
        return out

    @torch.jit.unused
    def _set_aux_loss(self, outputs_class, outputs_coord):
        # this is a workaround to make torchscript happy, as torchscript
        # doesn't support dictionary with non-homogeneous values, such
        # as a dict having both a Tensor and a list.
        return [{'pred_logits': a, 'pred_boxes': b}
                for a, b in zip(outputs_class[:-1], outputs_coord[:-1])]


class PostProcess(nn.Module):
    \"\"\" This module converts the model's output into the format expected by the coco api\"\"\"
    @torch.no_grad()
    def forward(self, outputs, target_sizes):
        out_logits, out_bbox = outputs['pred_logits'], outputs['pred_boxes']

        assert len(out_logits) == len(target_sizes)
        assert target_sizes.shape[1] == 2

        prob = F.softmax(out_logits, -1)
        scores, labels = prob[..., :-1].max(-1)

        # convert to [x0, y0, x1, y1] format
        boxes = box_cxcywh_to_xyxy(out_bbox)
        # and from relative [0, 1] to absolute [0, height] coordinates
        img_h, img_w = target_sizes.unbind(1)
        scale_fct = torch.stack([img_w, img_h, img_w, img_h], dim=1)
        boxes = boxes * scale_fct[:, None, :]

        results = [{'scores': s, 'labels': l, 'boxes': b} for s, l, b in zip(scores, labels, boxes)]

        return results


def build(train_backbone, return_interm_layers, normalize_before, aux_loss, hidden_dim=16, num_queries=4):
    backbone = Backbone("resnet50", train_backbone, return_interm_layers, False)
    model = Joiner(backbone, PositionEmbeddingSine(hidden_dim // 2, normalize=True))
    model.num_channels = backbone.num_channels
    transformer = Transformer(d_model=hidden_dim, dropout=0.0, nhead=2, dim_feedforward=32,
                              num_encoder_layers=1, num_decoder_layers=2,
                              normalize_before=normalize_before, return_intermediate_dec=True)
    return DETR(model, transformer, num_classes=3, num_queries=num_queries, aux_loss=aux_loss)
"""


@pytest.mark.parametrize(
    ("train_backbone", "interm", "pre_norm", "aux"),
    [(True, False, False, True), (False, True, True, False)],
)
def test_detr_model_backbone_transformer_and_postprocess_match_torch(
    train_backbone, interm, pre_norm, aux
):
    source = DETR_SOURCE + DETR_MODEL_SOURCE
    theirs, ours = both(source, DETR_STEP, linear_sum_assignment=linear_sum_assignment)
    rng = np.random.default_rng(32)
    sizes = [(28, 20), (20, 24), (24, 24), (16, 28)]
    images = [rng.standard_normal((3, h, w)) for h, w in sizes]
    boxes = [
        (
            rng.integers(0, 3, 1 + k % 2),
            np.concatenate(
                [rng.uniform(0.3, 0.7, (1 + k % 2, 2)), rng.uniform(0.1, 0.3, (1 + k % 2, 2))], 1
            ),
        )
        for k in range(4)
    ]
    # frozen batch-norm statistics, loaded through the num_batches_tracked-deleting override
    frozen = {}
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        model = names["build"](train_backbone, interm, pre_norm, aux)
        trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
        if initial is None:
            state = model.state_dict()
            for k in state:
                if k.endswith(("running_var", "weight")) and "body" in k:
                    frozen[k] = rng.uniform(0.5, 1.5, tuple(state[k].shape))
                elif k.endswith(("running_mean", "bias")) and "body" in k:
                    frozen[k] = rng.uniform(-0.2, 0.2, tuple(state[k].shape))
            initial = {k: v.detach().numpy().copy() for k, v in state.items()}
            initial.update(frozen)
        loaded = {k: lib.tensor(v, dtype=lib.float32) for k, v in initial.items()}
        # a BatchNorm2d checkpoint's extra key, which FrozenBatchNorm2d drops on load
        loaded["backbone.0.body.bn1.num_batches_tracked"] = lib.tensor(5)
        model.load_state_dict(loaded)
        assert "backbone.0.body.bn1.num_batches_tracked" not in model.state_dict()
        matcher = names["HungarianMatcher"](cost_class=1, cost_bbox=5, cost_giou=2)
        weight_dict = {"loss_ce": 1, "loss_bbox": 5, "loss_giou": 2}
        if aux:
            aux_weight_dict = {}
            for i in range(2 - 1):
                aux_weight_dict.update({k + f"_{i}": v for k, v in weight_dict.items()})
            weight_dict.update(aux_weight_dict)
        criterion = names["SetCriterion"](
            3, matcher, weight_dict, eos_coef=0.1, losses=["labels", "boxes", "cardinality"]
        )
        batches = [
            (
                [lib.tensor(images[i], dtype=lib.float32) for i in pair],
                [
                    {
                        "labels": lib.tensor(boxes[i][0]),
                        "boxes": lib.tensor(boxes[i][1], dtype=lib.float32),
                    }
                    for i in pair
                ],
            )
            for pair in ((0, 1), (2, 3), (1, 2))
        ]
        nested = names["nested_tensor_from_tensor_list"](batches[0][0])
        record = [trainable, nested.tensors.numpy(), nested.mask.numpy()]
        record += names["train"](model, criterion, batches)
        model.eval()
        outputs = model(batches[1][0])
        results = names["PostProcess"]()(outputs, lib.tensor([[480, 640], [300, 400]]))
        record += [[r[k].numpy() for k in ("scores", "labels", "boxes")] for r in results]
        records.append(record)
    assert records[1][0] == records[0][0]
    assert records[0][2].any() and not records[0][2].all()  # some padding

    def flat(recs):
        return [
            np.concatenate([a.ravel().astype(np.float64) for a in r])
            if isinstance(r, list) and r and isinstance(r[0], np.ndarray)
            else r
            for r in recs
        ]

    # the key projections' biases have a zero gradient (AdamW follows rounding noise there):
    # compare the query and value parts of in_proj_bias only
    for record in records:
        for name, value in record[-3].items():
            if name.endswith("in_proj_bias"):
                record[-3][name] = np.concatenate([value[:16], value[32:]])
    assert_records_agree(flat(records[1][1:]), flat(records[0][1:]), rtol=5e-4, atol=5e-5)


RENAMING_SOURCE = """
class Renamed(nn.Module):
    # a layer whose checkpoints from an older version call its weight 'w'
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(2, 3))
        self.inner = nn.Linear(3, 2)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict,
                              missing_keys, unexpected_keys, error_msgs):
        old = prefix + 'w'
        if old in state_dict:
            state_dict[prefix + 'weight'] = state_dict.pop(old)
        if prefix + 'bad' in state_dict:
            error_msgs.append('bad entry for ' + prefix)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict,
                                      missing_keys, unexpected_keys, error_msgs)


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Renamed()
"""


def test_load_from_state_dict_overrides_edit_the_state_as_torch_s_do():
    """An override of ``_load_from_state_dict`` (was: never called) renames a key under its
    prefix before ``super()``'s step; the caller's dict is left as it was; an entry in
    ``error_msgs`` fails the load and changes nothing."""
    theirs, ours = both(RENAMING_SOURCE, [])
    w = np.arange(6.0).reshape(2, 3)
    inner_w, inner_b = np.ones((2, 3)), np.array([0.5, -0.5])
    loaded = []
    for lib, names in ((torch, theirs), (rg, ours)):
        holder = names["Holder"]()
        state = {
            "block.w": lib.tensor(w, dtype=lib.float32),
            "block.inner.weight": lib.tensor(inner_w, dtype=lib.float32),
            "block.inner.bias": lib.tensor(inner_b, dtype=lib.float32),
        }
        result = holder.load_state_dict(state)
        assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
        assert "block.w" in state and "block.weight" not in state  # the caller's dict
        loaded.append({k: v.detach().numpy().copy() for k, v in holder.state_dict().items()})
        bad = dict(state, **{"block.bad": lib.tensor(0.0)})
        bad["block.w"] = lib.tensor(w * 0 + 7, dtype=lib.float32)
        with pytest.raises(RuntimeError, match=r"bad entry for block\."):
            holder.load_state_dict(bad, strict=False)
        if lib is rg:  # retrograd checks before writing: nothing changed
            np.testing.assert_array_equal(holder.block.weight.detach().numpy(), w)
    assert_records_agree([loaded[1]], [loaded[0]], rtol=0, atol=0)
