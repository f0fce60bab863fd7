"""Real ports, continued (the harness: ``tests/real_ports.py``): a whole DETR-style detector,
written here in the style of facebookresearch/detr (with torchvision's ``FrozenBatchNorm2d`` and
``IntermediateLayerGetter``), on a small ResNet-shaped backbone (``conv1``, ``bn1``, ``relu``,
``maxpool``, ``layer1``..``layer4``, ``avgpool``, ``fc``) built with frozen BatchNorm, trained by
its own Hungarian-matched set loss (``torch.cdist``, SciPy's ``linear_sum_assignment``,
generalized IoU, a no-object class weight buffer, ``torch.full_like`` index pairs, auxiliary
losses per decoder layer; AdamW with a backbone parameter group, ``StepLR``,
``clip_grad_norm_``).

It reaches: images of different sizes padded by ``for img, slot, pad in zip(images, batch,
mask): slot[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)`` and ``pad[:
img.shape[1], : img.shape[2]] = False`` (writes through the rows that iterating a tensor
yields); ``FrozenBatchNorm2d``'s buffers and its ``_load_from_state_dict`` override deleting
``num_batches_tracked`` before ``super()._load_from_state_dict``; the backbone frozen by name
(``p.requires_grad_(False)``); an ``nn.ModuleDict`` subclass built from ``named_children()``
into an ``OrderedDict`` up to the last tapped layer; the mask resized by
``F.interpolate(mask[None].float(), size=x.shape[-2:]).to(torch.bool)[0]``; an
``nn.Sequential`` subclass indexing ``self[0]``/``self[1]``; sine position encodings
(``inside.cumsum(1, dtype=torch.float32)``, ``k // 2``, ``torch.stack((a[:, :, :,
0::2].sin(), a[:, :, :, 1::2].cos()), dim=4).flatten(3)``); the transformer (clones by
``copy.deepcopy``, ``q = k = plus(x, pos)``, ``nn.MultiheadAttention`` with
``key_padding_mask``, post- and pre-norm layers, every decoder layer's output by
``torch.stack``, ``xavier_uniform_`` of every ``p.dim() > 1``, ``memory.permute(1, 2,
0).view(n, c, h, w)``); the auxiliary outputs; the post-processing (``probs[..., :-1].max(-1)``,
``sizes.unbind(1)``, ``scale[:, None, :]`` under ``@torch.no_grad()``). A second test checks an
override of ``_load_from_state_dict`` renaming an old key and failing on a reported error.

The program is self-contained (it no longer borrows ``tests/test_real_ports_28.py``'s matcher
and criterion). The port changes the gradient lines.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import retrograd as rg
from real_ports import assert_records_agree, both

DETR_MODEL_SOURCE = """
# A DETR-style detector, written in the style of facebookresearch/detr: a frozen-BatchNorm
# ResNet-like backbone read at named layers, sine position encodings of the padding mask, an
# encoder-decoder transformer over object queries, class and box heads (with auxiliary outputs
# per decoder layer), trained by a Hungarian-matched set loss; and the post-processing into
# absolute corner boxes.
import copy
import collections
from typing import Dict, List, Optional  # (annotations as DETR writes them)

from torch import Tensor


def cxcywh_to_corners(b):
    cx, cy, w, h = b.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def pairwise_giou(a, b):
    # generalized IoU of every corner box in a with every one in b
    assert (a[:, 2:] >= a[:, :2]).all() and (b[:, 2:] >= b[:, :2]).all()
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lo, hi = torch.max(a[:, None, :2], b[:, :2]), torch.min(a[:, None, 2:], b[:, 2:])
    overlap = (hi - lo).clamp(min=0)
    inter = overlap[:, :, 0] * overlap[:, :, 1]
    union = area_a[:, None] + area_b - inter
    hull = (torch.max(a[:, None, 2:], b[:, 2:]) - torch.min(a[:, None, :2], b[:, :2])).clamp(min=0)
    hull_area = hull[:, :, 0] * hull[:, :, 1]
    return inter / union - (hull_area - union) / hull_area


class Matcher(nn.Module):
    def __init__(self, w_class=1.0, w_l1=1.0, w_giou=1.0):
        super().__init__()
        self.w_class, self.w_l1, self.w_giou = w_class, w_l1, w_giou

    @torch.no_grad()
    def forward(self, outputs, targets):
        n, queries = outputs["pred_logits"].shape[:2]
        prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)
        boxes = outputs["pred_boxes"].flatten(0, 1)
        labels = torch.cat([t["labels"] for t in targets])
        truth = torch.cat([t["boxes"] for t in targets])
        cost = (
            self.w_l1 * torch.cdist(boxes, truth, p=1)
            - self.w_class * prob[:, labels]
            - self.w_giou * pairwise_giou(cxcywh_to_corners(boxes), cxcywh_to_corners(truth))
        )
        per_image = cost.view(n, queries, -1).cpu().split([len(t["boxes"]) for t in targets], -1)
        pairs = [linear_sum_assignment(c[k]) for k, c in enumerate(per_image)]
        as_index = lambda ids: torch.as_tensor(ids, dtype=torch.int64)
        return [(as_index(q), as_index(t)) for q, t in pairs]


class SetLoss(nn.Module):
    def __init__(self, n_classes, matcher, weights, no_object_weight):
        super().__init__()
        self.n_classes, self.matcher, self.weights = n_classes, matcher, weights
        class_weight = torch.ones(n_classes + 1)
        class_weight[-1] = no_object_weight  # the "no object" class
        self.register_buffer("class_weight", class_weight)

    @staticmethod
    def matched(pairs):
        image = torch.cat([torch.full_like(q, k) for k, (q, _) in enumerate(pairs)])
        return image, torch.cat([q for q, _ in pairs])

    def terms(self, out, targets, pairs, n_boxes, log):
        logits, where = out["pred_logits"], self.matched(pairs)
        labels = torch.cat([t["labels"][j] for t, (_, j) in zip(targets, pairs)])
        wanted = torch.full(
            logits.shape[:2], self.n_classes, dtype=torch.int64, device=logits.device
        )
        wanted[where] = labels
        found = {"loss_ce": F.cross_entropy(logits.transpose(1, 2), wanted, self.class_weight)}
        if log:
            with torch.no_grad():
                hits = logits[where].argmax(-1).eq(labels).float().sum(0)
                found["class_error"] = 100 - hits.mul_(100.0 / labels.size(0))
                counts = torch.as_tensor([len(t["labels"]) for t in targets], device=logits.device)
                predicted = (logits.argmax(-1) != logits.shape[-1] - 1).sum(1)
                found["cardinality_error"] = F.l1_loss(predicted.float(), counts.float())
        boxes = out["pred_boxes"][where]
        truth = torch.cat([t["boxes"][j] for t, (_, j) in zip(targets, pairs)], dim=0)
        found["loss_bbox"] = F.l1_loss(boxes, truth, reduction="none").sum() / n_boxes
        giou = torch.diag(pairwise_giou(cxcywh_to_corners(boxes), cxcywh_to_corners(truth)))
        found["loss_giou"] = (1 - giou).sum() / n_boxes
        return found

    def forward(self, outputs, targets):
        n_boxes = torch.as_tensor([float(sum(len(t["labels"]) for t in targets))])
        n_boxes = torch.clamp(n_boxes, min=1).item()
        final = {k: v for k, v in outputs.items() if k != "aux_outputs"}
        losses = self.terms(final, targets, self.matcher(final, targets), n_boxes, log=True)
        for depth, out in enumerate(outputs.get("aux_outputs", [])):
            found = self.terms(out, targets, self.matcher(out, targets), n_boxes, log=False)
            losses.update({f"{k}_{depth}": v for k, v in found.items()})
        return losses


def fit(model, criterion, batches, lr=1e-3):
    out = []
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    groups = [
        {"params": [p for n, p in trainable if "backbone" not in n]},
        {"params": [p for n, p in trainable if "backbone" in n], "lr": lr / 10},  # slower
    ]
    optimizer = torch.optim.AdamW(groups, lr=lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 2)
    model.train()
    criterion.train()
    for images, targets in batches:
        terms = criterion(model(images), targets)
        total = sum(v * criterion.weights[k] for k, v in terms.items() if k in criterion.weights)
        out.append({k: v.item() for k, v in terms.items()})
        optimizer.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        schedule.step()
        out.append(total.item())
    out.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return out


class Masked:
    # a batch of images padded to a common size, with True over the padding
    def __init__(self, images, mask: Optional[Tensor]):
        self.tensors, self.mask = images, mask

    def decompose(self):
        return self.tensors, self.mask  # (features, padding)


def pad_images(images: List[Tensor]):
    if images[0].ndim != 3:
        raise ValueError("expected (channels, height, width) images")
    shape = [len(images)] + [max(sizes) for sizes in zip(*[img.shape for img in images])]
    n, _, h, w = shape
    batch = torch.zeros(shape, dtype=images[0].dtype, device=images[0].device)
    mask = torch.ones((n, h, w), dtype=torch.bool, device=images[0].device)
    # iterating a tensor yields views of its rows: these writes land in batch and mask
    for img, slot, pad in zip(images, batch, mask):
        slot[: img.shape[0], : img.shape[1], : img.shape[2]].copy_(img)
        pad[: img.shape[1], : img.shape[2]] = False
    return Masked(batch, mask)


class FrozenBatchNorm2d(nn.Module):
    # a BatchNorm2d whose statistics and affine map are buffers
    def __init__(self, n, eps=1e-5):
        super().__init__()
        self.eps = eps
        for name, fill in (("weight", torch.ones), ("bias", torch.zeros),
                           ("running_mean", torch.zeros), ("running_var", torch.ones)):
            self.register_buffer(name, fill(n))

    def _load_from_state_dict(self, state_dict, prefix, *args):
        # a BatchNorm2d checkpoint also holds a batch counter, which has no place here
        key = prefix + "num_batches_tracked"
        if key in state_dict:
            del state_dict[key]
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, x):
        var = self.running_var.reshape(1, -1, 1, 1)
        scale = self.weight.reshape(1, -1, 1, 1) * (var + self.eps).rsqrt()
        shift = self.bias.reshape(1, -1, 1, 1) - self.running_mean.reshape(1, -1, 1, 1) * scale
        return x * scale + shift


class LayerTaps(nn.ModuleDict):
    # runs a model's children in order, up to the last one asked for, keeping the named outputs
    def __init__(self, model: nn.Module, taps: Dict[str, str]) -> None:
        children = collections.OrderedDict(model.named_children())
        if not set(taps) <= set(children):
            raise ValueError("a tapped layer is not a child of the model")
        kept, remaining = collections.OrderedDict(), dict(taps)
        for name, child in children.items():
            kept[name] = child
            remaining.pop(name, None)
            if not remaining:
                break
        super().__init__(kept)
        self.taps = taps

    def forward(self, x):
        found = collections.OrderedDict()
        for name, layer in self.items():
            x = layer(x)
            if name in self.taps:
                found[self.taps[name]] = x
        return found


def conv_block(c_in, c_out, norm, stride=1):
    conv = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
    return nn.Sequential(conv, norm(c_out), nn.ReLU(inplace=True))


class SmallResNet(nn.Module):
    # the child names and order of torchvision's ResNets, a few channels wide
    def __init__(self, norm, c=4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, c, 3, stride=2, padding=1, bias=False)
        self.bn1, self.relu = norm(c), nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1, self.layer2 = conv_block(c, c, norm), conv_block(c, 2 * c, norm, stride=2)
        self.layer3, self.layer4 = conv_block(2 * c, 2 * c, norm), conv_block(2 * c, 4 * c, norm)
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d((1, 1)), nn.Linear(4 * c, 10)


class Backbone(nn.Module):
    def __init__(self, train_backbone: bool, all_levels: bool):
        super().__init__()
        net = SmallResNet(norm=FrozenBatchNorm2d)
        for name, p in net.named_parameters():
            if not train_backbone or not any(f"layer{k}" in name for k in (2, 3, 4)):
                p.requires_grad_(False)
        levels = ["layer1", "layer2", "layer3", "layer4"] if all_levels else ["layer4"]
        self.body = LayerTaps(net, {name: str(k) for k, name in enumerate(levels)})
        self.num_channels = 16

    def forward(self, batch: Masked):
        out: Dict[str, Masked] = {}
        for name, x in self.body(batch.tensors).items():
            assert batch.mask is not None
            mask = F.interpolate(batch.mask[None].float(), size=x.shape[-2:]).to(torch.bool)[0]
            out[name] = Masked(x, mask)
        return out


class WithPositions(nn.Sequential):
    def __init__(self, backbone, encoding):
        super().__init__(backbone, encoding)

    def forward(self, batch: Masked):
        features = list(self[0](batch).values())
        return features, [self[1](f).to(f.tensors.dtype) for f in features]


class SinePositions(nn.Module):
    # 2-d sine/cosine features of each pixel's (cumulative, unpadded) row and column
    def __init__(self, n_feats=64, temperature=10000, normalize=False, scale=None):
        super().__init__()
        if scale is not None and not normalize:
            raise ValueError("a scale needs normalize=True")
        self.n_feats, self.temperature, self.normalize = n_feats, temperature, normalize
        self.scale = 2 * math.pi if scale is None else scale

    def forward(self, batch: Masked):
        assert batch.mask is not None
        inside = ~batch.mask
        rows, cols = inside.cumsum(1, dtype=torch.float32), inside.cumsum(2, dtype=torch.float32)
        if self.normalize:
            rows = rows / (rows[:, -1:, :] + 1e-6) * self.scale
            cols = cols / (cols[:, :, -1:] + 1e-6) * self.scale
        k = torch.arange(self.n_feats, dtype=torch.float32, device=batch.tensors.device)
        freq = self.temperature ** (2 * (k // 2) / self.n_feats)

        def encode(coord):
            angles = coord[:, :, :, None] / freq
            waves = (angles[:, :, :, 0::2].sin(), angles[:, :, :, 1::2].cos())
            return torch.stack(waves, dim=4).flatten(3)  # sin, cos interleaved

        return torch.cat((encode(rows), encode(cols)), dim=3).permute(0, 3, 1, 2)


def clones(layer, n):
    return nn.ModuleList(copy.deepcopy(layer) for _ in range(n))


def plus(x, pos: Optional[Tensor]):
    return x if pos is None else x + pos


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ff, dropout, pre_norm):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d))
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x, padding: Optional[Tensor] = None, pos: Optional[Tensor] = None):
        if self.pre_norm:
            h = self.norm1(x)
            q = k = plus(h, pos)
            x = x + self.drop1(self.attn(q, k, value=h, key_padding_mask=padding)[0])
            return x + self.drop2(self.ff(self.norm2(x)))
        q = k = plus(x, pos)
        x = self.norm1(x + self.drop1(self.attn(q, k, value=x, key_padding_mask=padding)[0]))
        return self.norm2(x + self.drop2(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d, heads, ff, dropout, pre_norm):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.cross_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.ff = nn.Sequential(nn.Linear(d, ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(ff, d))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3))
        self.drops = nn.ModuleList(nn.Dropout(dropout) for _ in range(3))
        self.pre_norm = pre_norm

    def forward(self, y, memory, padding=None, pos=None, query_pos: Optional[Tensor] = None):
        def self_block(h):
            q = k = plus(h, query_pos)
            return self.self_attn(q, k, value=h)[0]

        def cross_block(h):
            return self.cross_attn(query=plus(h, query_pos), key=plus(memory, pos), value=memory,
                                   key_padding_mask=padding)[0]

        blocks = (self_block, cross_block, self.ff)
        for block, norm, drop in zip(blocks, self.norms, self.drops):
            if self.pre_norm:
                y = y + drop(block(norm(y)))
            else:
                y = norm(y + drop(block(y)))
        return y


class DetectionTransformer(nn.Module):
    def __init__(self, d, heads, ff, n_enc, n_dec, pre_norm, dropout=0.0):
        super().__init__()
        self.encoder = clones(EncoderLayer(d, heads, ff, dropout, pre_norm), n_enc)
        self.encoder_norm = nn.LayerNorm(d) if pre_norm else None
        self.decoder = clones(DecoderLayer(d, heads, ff, dropout, pre_norm), n_dec)
        self.decoder_norm = nn.LayerNorm(d)
        self.d_model = d
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def forward(self, src, mask, queries, pos):
        n, c, h, w = src.shape
        src, pos = src.flatten(2).permute(2, 0, 1), pos.flatten(2).permute(2, 0, 1)  # (hw, n, c)
        queries, mask = queries.unsqueeze(1).repeat(1, n, 1), mask.flatten(1)
        memory = src
        for layer in self.encoder:
            memory = layer(memory, padding=mask, pos=pos)
        if self.encoder_norm is not None:
            memory = self.encoder_norm(memory)
        y, every_layer = torch.zeros_like(queries), []
        for layer in self.decoder:
            y = layer(y, memory, padding=mask, pos=pos, query_pos=queries)
            every_layer.append(self.decoder_norm(y))
        return torch.stack(every_layer).transpose(1, 2), memory.permute(1, 2, 0).view(n, c, h, w)


class BoxHead(nn.Module):
    def __init__(self, d, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(d, d if k < depth - 1 else 4) for k in range(depth))

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class Detector(nn.Module):
    def __init__(self, backbone, transformer, n_classes, n_queries, aux_loss=False):
        super().__init__()
        d = transformer.d_model
        self.backbone, self.transformer, self.aux_loss = backbone, transformer, aux_loss
        self.class_embed, self.bbox_embed = nn.Linear(d, n_classes + 1), BoxHead(d, 3)
        self.query_embed = nn.Embedding(n_queries, d)
        self.input_proj = nn.Conv2d(backbone.num_channels, d, kernel_size=1)

    def forward(self, images):
        if isinstance(images, (list, torch.Tensor)):
            images = pad_images(images)
        features, positions = self.backbone(images)
        x, mask = features[-1].decompose()
        hs = self.transformer(self.input_proj(x), mask, self.query_embed.weight, positions[-1])[0]
        logits, boxes = self.class_embed(hs), self.bbox_embed(hs).sigmoid()
        out = {"pred_logits": logits[-1], "pred_boxes": boxes[-1]}
        if self.aux_loss:  # every decoder layer but the last is supervised too
            pairs = zip(logits[:-1], boxes[:-1])
            out["aux_outputs"] = [{"pred_logits": a, "pred_boxes": b} for a, b in pairs]
        return out


class PostProcess(nn.Module):
    # scores, labels and absolute (x0, y0, x1, y1) boxes per image
    @torch.no_grad()
    def forward(self, outputs, sizes):
        logits, boxes = outputs["pred_logits"], outputs["pred_boxes"]
        assert len(logits) == len(sizes) and sizes.shape[1] == 2
        scores, labels = F.softmax(logits, -1)[..., :-1].max(-1)  # the no-object class left out
        height, width = sizes.unbind(1)
        scale = torch.stack([width, height, width, height], dim=1)
        boxes = cxcywh_to_corners(boxes) * scale[:, None, :]
        return [{"scores": s, "labels": l, "boxes": b} for s, l, b in zip(scores, labels, boxes)]


def build(train_backbone, all_levels, pre_norm, aux_loss, d=16, n_queries=4):
    backbone = Backbone(train_backbone, all_levels)
    joined = WithPositions(backbone, SinePositions(d // 2, normalize=True))
    joined.num_channels = backbone.num_channels
    transformer = DetectionTransformer(d, heads=2, ff=32, n_enc=1, n_dec=2, pre_norm=pre_norm)
    return Detector(joined, transformer, n_classes=3, n_queries=n_queries, aux_loss=aux_loss)
"""

DETR_STEPS = [
    (
        "        total.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n"
        "        optimizer.step()",
        "        grads = total.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.1)\n"
        "        optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize(
    ("train_backbone", "interm", "pre_norm", "aux"),
    [(True, False, False, True), (False, True, True, False)],
)
def test_detr_model_backbone_transformer_and_postprocess_match_torch(
    train_backbone, interm, pre_norm, aux
):
    theirs, ours = both(DETR_MODEL_SOURCE, DETR_STEPS, linear_sum_assignment=linear_sum_assignment)
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
        matcher = names["Matcher"](w_class=1, w_l1=5, w_giou=2)
        weight_dict = {"loss_ce": 1, "loss_bbox": 5, "loss_giou": 2}
        if aux:
            aux_weight_dict = {}
            for i in range(2 - 1):
                aux_weight_dict.update({k + f"_{i}": v for k, v in weight_dict.items()})
            weight_dict.update(aux_weight_dict)
        criterion = names["SetLoss"](3, matcher, weight_dict, no_object_weight=0.1)
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
        nested = names["pad_images"](batches[0][0])
        record = [trainable, nested.tensors.numpy(), nested.mask.numpy()]
        record += names["fit"](model, criterion, batches)
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
class Versioned(nn.Module):
    # older checkpoints of this layer stored its weight under the key 'w'
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros((2, 3)))
        self.inner = nn.Linear(3, 2)

    def _load_from_state_dict(self, state, prefix, metadata, strict, missing, unexpected, errors):
        if prefix + 'w' in state:  # the old name: move it to the new one
            state[prefix + 'weight'] = state.pop(prefix + 'w')
        if prefix + 'bad' in state:
            errors.append('bad entry for ' + prefix)
        super()._load_from_state_dict(state, prefix, metadata, strict, missing, unexpected, errors)


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Versioned()
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
