# ruff: noqa: E501  (the embedded programs and the port steps run past 100 columns)
"""Programs written here in the style of two semantic segmentation repositories, each trained
a few steps under torch and, ported, under retrograd from the same weights and draws (the
harness: ``tests/real_ports.py``):

- a SegFormer in the style of NVlabs/SegFormer (its Mix Transformer backbone and all-MLP
  head), small: a Mix-FFN (``fc1``, a depthwise 3x3 conv over the tokens seen as a map, GELU,
  ``fc2``), attention whose keys and values come from a map shrunk by a strided conv and a
  LayerNorm, blocks with timm-style stochastic depth (``keep + torch.rand(shape)`` then
  ``floor_()``), overlapping patch embeddings, the per-block rates ``[x.item() for x in
  torch.linspace(0, rate, sum(depths))]``, weights set by ``self.apply`` of ``trunc_normal_``,
  ``normal_`` and ``zero_``; the head's per-stage linear embeddings resized by
  ``F.interpolate(..., mode='bilinear', align_corners=False)`` (through a ``resize`` that
  turns a ``torch.Size`` into a tuple), a conv-BN-ReLU fuse; the logits resized to the labels
  for ``F.cross_entropy(..., ignore_index=255)`` and a pixel accuracy by
  ``topk``/``eq``/``mul_``, trained with AdamW; then a sliding-window inference (crops padded
  back by ``F.pad``, ``hits[:, :, y1:y2, x1:x2] += 1``, ``torch.onnx.is_in_onnx_export()``,
  ``img.new_zeros``) and the flip of its logits.
- HRNet's multi-resolution fusion in the style of HRNet/HRNet-Semantic-Segmentation: residual
  blocks, a multi-resolution module that checks its branch lists (logging the error it
  raises), builds each branch with a shortcut where the width changes, and fuses every
  branch into every other (strided 3x3 convs down; a 1x1 conv then ``nn.Upsample(
  scale_factor=2 ** (j - i), mode='nearest')`` up; ``None`` held in an ``nn.ModuleList`` as
  the diagonal's placeholder), the head's ``F.interpolate(input=..., size=(h, w),
  mode='bilinear', align_corners=...)`` and ``torch.cat``; a pixel cross-entropy and an
  online-hard-example-mining one (``p.gather(1, safe.unsqueeze(1))``, ``.sort()``,
  ``max(floor, self.thresh)`` of a 0-d tensor and a float), trained by SGD with momentum
  over a ``filter``-ed parameter group and a poly learning rate.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``step`` takes them).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- SegFormer --------------------------------------------------------------------------------------
SEGFORMER_SOURCE = """
import collections.abc
import warnings

import torch
import torch.nn as nn
from torch.nn import functional as F


def pair(v):
    return v if isinstance(v, collections.abc.Iterable) else (v, v)


def stochastic_depth(x, p, training):
    # drop a residual branch for whole samples with probability p, rescaling the kept ones
    if p == 0. or not training:
        return x
    keep = 1 - p
    mask = keep + torch.rand((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype, device=x.device)
    mask.floor_()
    return x.div(keep) * mask


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        return stochastic_depth(x, self.p, self.training)


def init_weights(m):
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=.02)
        if m.bias is not None:
            nn.init.constant_(m.bias, 0)
    if isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
    if isinstance(m, nn.Conv2d):
        fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
        m.weight.data.normal_(0, (2.0 / fan_out) ** 0.5)  # He, by fan-out
        if m.bias is not None:
            m.bias.data.zero_()


class MixFFN(nn.Module):
    # linear, a depthwise 3x3 conv over the tokens laid out as a map, GELU, linear
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.dw = nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.apply(init_weights)

    def forward(self, x, H, W):
        x = self.fc1(x)
        B, N, C = x.shape
        x = self.dw(x.transpose(1, 2).view(B, C, H, W)).flatten(2).transpose(1, 2)
        return self.fc2(F.gelu(x))


class ReducedAttention(nn.Module):
    # keys and values from the map shrunk r times by a strided conv, then normalised
    def __init__(self, dim, heads, r):
        super().__init__()
        self.heads, self.r = heads, r
        self.scale = (dim // heads) ** -0.5
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * dim)
        self.out = nn.Linear(dim, dim)
        if r > 1:
            self.reduce = nn.Conv2d(dim, dim, kernel_size=r, stride=r)
            self.norm = nn.LayerNorm(dim)
        self.apply(init_weights)

    def forward(self, x, H, W):
        B, N, C = x.shape
        d = C // self.heads
        q = self.q(x).reshape(B, N, self.heads, d).permute(0, 2, 1, 3)
        source = x
        if self.r > 1:
            grid = x.permute(0, 2, 1).reshape(B, C, H, W)
            source = self.norm(self.reduce(grid).reshape(B, C, -1).permute(0, 2, 1))
        kv = self.kv(source).reshape(B, -1, 2, self.heads, d).permute(2, 0, 3, 1, 4)
        attn = ((q @ kv[0].transpose(-2, -1)) * self.scale).softmax(dim=-1)
        return self.out((attn @ kv[1]).transpose(1, 2).reshape(B, N, C))


class Block(nn.Module):
    def __init__(self, dim, heads, mlp_ratio, r, drop_path):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = ReducedAttention(dim, heads, r)
        self.ffn = MixFFN(dim, int(dim * mlp_ratio))
        self.drop = DropPath(drop_path) if drop_path > 0. else nn.Identity()

    def forward(self, x, H, W):
        x = x + self.drop(self.attn(self.norm1(x), H, W))
        return x + self.drop(self.ffn(self.norm2(x), H, W))


class PatchEmbed(nn.Module):
    # overlapping patches: a strided conv wider than its stride
    def __init__(self, c_in, dim, patch, stride):
        super().__init__()
        patch = pair(patch)
        self.proj = nn.Conv2d(c_in, dim, kernel_size=patch, stride=stride, padding=(patch[0] // 2, patch[1] // 2))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        x = self.proj(x)
        H, W = x.shape[2:]
        return self.norm(x.flatten(2).transpose(1, 2)), H, W


class MixTransformer(nn.Module):
    def __init__(self, c_in=3, dims=(8, 16, 16, 16), heads=(1, 2, 2, 2), mlp_ratios=(2, 2, 2, 2),
                 depths=(2, 1, 1, 1), ratios=(4, 2, 1, 1), drop_path_rate=0.):
        super().__init__()
        rates = [x.item() for x in torch.linspace(0, drop_path_rate, sum(depths))]
        self.embeds, self.stages, self.norms = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        first = 0
        for i, depth in enumerate(depths):
            patch, stride = (7, 4) if i == 0 else (3, 2)
            self.embeds.append(PatchEmbed(c_in if i == 0 else dims[i - 1], dims[i], patch, stride))
            self.stages.append(nn.ModuleList(
                [Block(dims[i], heads[i], mlp_ratios[i], ratios[i], rates[first + j]) for j in range(depth)]))
            self.norms.append(nn.LayerNorm(dims[i]))
            first += depth

    def forward(self, x):
        B = x.shape[0]
        features = []
        for embed, blocks, norm in zip(self.embeds, self.stages, self.norms):
            x, H, W = embed(x)
            for block in blocks:
                x = block(x, H, W)
            x = norm(x).reshape(B, H, W, -1).permute(0, 3, 1, 2).contiguous()
            features.append(x)
        return features


def resize(x, size=None, scale_factor=None, mode='nearest', align_corners=None, warning=True):
    if warning and align_corners and size is not None:
        h, w = (int(s) for s in x.shape[2:])
        if (int(size[0]) - 1) % max(h - 1, 1) or (int(size[1]) - 1) % max(w - 1, 1):
            warnings.warn('with align_corners=True an output of n * (input - 1) + 1 aligns best')
    if isinstance(size, torch.Size):  # a tuple of ints for interpolate
        size = tuple(int(s) for s in size)
    return F.interpolate(x, size, scale_factor, mode, align_corners)


def pixel_accuracy(logits, labels, k=1):
    _, top = logits.topk(k, dim=1)
    top = top.transpose(0, 1)  # (k, N, H, W)
    hits = top.eq(labels.unsqueeze(0).expand_as(top))
    return hits[:k].view(-1).float().sum(0, keepdim=True).mul_(100.0 / labels.numel())


class MLPHead(nn.Module):
    # each stage's features embedded by a linear layer, brought to the finest map, fused
    def __init__(self, in_dims, dim, n_classes, ignore_index=255):
        super().__init__()
        self.ignore_index = ignore_index
        # (no biases: the fuse's BatchNorm would take them away again)
        self.embeds = nn.ModuleList([nn.Linear(c, dim, bias=False) for c in in_dims])
        self.fuse = nn.Sequential(
            nn.Conv2d(dim * len(in_dims), dim, 1, bias=False), nn.BatchNorm2d(dim), nn.ReLU(inplace=True))
        self.classify = nn.Conv2d(dim, n_classes, kernel_size=1)

    def forward(self, features):
        n = features[0].shape[0]
        finest = features[0].size()[2:]
        maps = []
        for i, (f, embed) in enumerate(zip(features, self.embeds)):
            m = embed(f.flatten(2).transpose(1, 2)).permute(0, 2, 1).reshape(n, -1, f.shape[2], f.shape[3])
            if i > 0:
                m = resize(m, size=finest, mode='bilinear', align_corners=False)
            maps.append(m)
        return self.classify(self.fuse(torch.cat(maps[::-1], dim=1)))

    def losses(self, logits, labels):
        logits = resize(logits, size=labels.shape[2:], mode='bilinear', align_corners=False)
        labels = labels.squeeze(1)
        per_pixel = F.cross_entropy(logits, labels, reduction='none', ignore_index=self.ignore_index)
        return per_pixel.mean(), pixel_accuracy(logits, labels)


def sliding_logits(img, out_shape, stride=16, crop=32, n_classes=3):
    n, _, H, W = img.size()
    rows = max(H - crop + stride - 1, 0) // stride + 1
    cols = max(W - crop + stride - 1, 0) // stride + 1
    total = img.new_zeros((n, n_classes, H, W))
    hits = img.new_zeros((n, 1, H, W))
    for r in range(rows):
        for c in range(cols):
            y2, x2 = min(r * stride + crop, H), min(c * stride + crop, W)
            y1, x1 = max(y2 - crop, 0), max(x2 - crop, 0)
            window = img[:, :, y1:y2, x1:x2]
            out = resize(head(backbone(window)), size=window.shape[2:], mode='bilinear', align_corners=False)
            total += F.pad(out, (int(x1), int(W - x2), int(y1), int(H - y2)))
            hits[:, :, y1:y2, x1:x2] += 1
    assert (hits == 0).sum() == 0
    if torch.onnx.is_in_onnx_export():  # a constant in an exported graph
        hits = torch.from_numpy(hits.cpu().detach().numpy()).to(device=img.device)
    return resize(total / hits, size=out_shape, mode='bilinear', align_corners=False, warning=False)


backbone = MixTransformer(drop_path_rate=0.3)
head = MLPHead([8, 16, 16, 16], 8, 3)
initialize(backbone)
initialize(head)
weights = list(backbone.parameters()) + list(head.parameters())
optimizer = torch.optim.AdamW(weights, lr=6e-4, betas=(0.9, 0.999), weight_decay=0.01)

images, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 3, (2, 1, 32, 32))
labels[:, :, :4, :] = 255  # an unlabelled band
for step in range(2):
    backbone.train()
    head.train()
    loss, acc = head.losses(head(backbone(images)), labels)
    record.append([loss.item(), acc.item()])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(params_of(backbone, head))

backbone.eval()
head.eval()
with torch.no_grad():
    logits = resize(head(backbone(images)), size=images.shape[2:], mode='bilinear', align_corners=False)
    probs = F.softmax(logits, dim=1)
    classes = probs.argmax(dim=1)
    slid = sliding_logits(torch.randn(1, 3, 40, 48), (36, 44)).flip(dims=(3,))
record.append(probs.numpy().copy())
record.append(classes.numpy().copy())
record.append(slid.numpy().copy())
"""

SEGFORMER_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("    loss.backward()\n    optimizer.step()\n", "    optimizer.step(loss.backward())\n"),
]


def test_nvlabs_segformer_trains_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        SEGFORMER_SOURCE,
        SEGFORMER_STEPS,
        capsys,
        9301,
        initialize=initializer(),
        params_of=params_of,
    )
    assert len(theirs) == 2 * 2 + 3
    # no true gradient (AdamW follows the rounding noise): the last stage's norm bias, which
    # feeds only the head's last embedding and so adds the same to every pixel of a sample
    # before the fuse's BatchNorm, which takes it away
    no_gradient = ["0.norms.3.bias"]
    assert_records_agree(ours[:-1], theirs[:-1], rtol=2e-4, atol=2e-5, skip=no_gradient)
    # in eval mode the BatchNorm's running statistics no longer take that bias away: the
    # slide-inference logits carry their noise (AdamW's steps of 6e-4 on rounding-sized
    # gradients), so they are compared to a tolerance of that size
    assert_records_agree(ours[-1:], theirs[-1:], rtol=1e-3, atol=1e-3)


# -- HRNet --------------------------------------------------------------------------------------------
HRNET_SOURCE = """
import logging

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

MOMENTUM = 0.01
ALIGN = False
log = logging.getLogger("hrnet-port")


def conv_bn(c_in, c_out, stride=1, relu=True):
    layers = [nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out, momentum=MOMENTUM)]
    if relu:
        layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Residual(nn.Module):
    expansion = 1

    def __init__(self, c_in, c_out, stride=1, shortcut=None):
        super().__init__()
        self.body = nn.Sequential(conv_bn(c_in, c_out, stride), conv_bn(c_out, c_out, relu=False))
        self.shortcut = shortcut
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        skip = x if self.shortcut is None else self.shortcut(x)
        return self.relu(self.body(x) + skip)


class MultiResolution(nn.Module):
    # parallel branches at halving resolutions; then each branch receives the sum of all
    def __init__(self, widths_in, widths, depths, block=Residual):
        super().__init__()
        self.check(widths_in, widths, depths)
        self.widths = list(widths_in)
        self.branches = nn.ModuleList([self.branch(i, block, depths[i], widths[i]) for i in range(len(widths))])
        self.fuse = self.fuse_layers()
        self.relu = nn.ReLU(inplace=True)

    def check(self, widths_in, widths, depths):
        for name, given in (('widths_in', widths_in), ('depths', depths)):
            if len(given) != len(widths):
                message = '{} has {} entries for {} branches'.format(name, len(given), len(widths))
                log.error(message)
                raise ValueError(message)

    def branch(self, i, block, depth, width, stride=1):
        shortcut = None
        if stride != 1 or self.widths[i] != width * block.expansion:
            shortcut = nn.Sequential(
                nn.Conv2d(self.widths[i], width * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(width * block.expansion, momentum=MOMENTUM))
        blocks = [block(self.widths[i], width, stride, shortcut)]
        self.widths[i] = width * block.expansion
        blocks += [block(self.widths[i], width) for _ in range(1, depth)]
        return nn.Sequential(*blocks)

    def fuse_layers(self):
        n = len(self.widths)
        rows = []
        for i in range(n):
            row = []
            for j in range(n):
                if j > i:  # coarser: a 1x1 conv to branch i's width, then nearest upsampling
                    row.append(nn.Sequential(
                        nn.Conv2d(self.widths[j], self.widths[i], 1, 1, 0, bias=False),
                        nn.BatchNorm2d(self.widths[i], momentum=MOMENTUM),
                        nn.Upsample(scale_factor=2 ** (j - i), mode='nearest')))
                elif j == i:
                    row.append(None)  # the branch itself: a placeholder
                else:  # finer: one strided 3x3 conv per halving
                    steps = [conv_bn(self.widths[j], self.widths[j], 2) for _ in range(i - j - 1)]
                    steps.append(conv_bn(self.widths[j], self.widths[i], 2, relu=False))
                    row.append(nn.Sequential(*steps))
            rows.append(nn.ModuleList(row))
        return nn.ModuleList(rows)

    def forward(self, xs):
        xs = [branch(x) for branch, x in zip(self.branches, xs)]
        fused = []
        for i, row in enumerate(self.fuse):
            total = xs[i]
            for j, layer in enumerate(row):
                if layer is not None:
                    total = total + layer(xs[j])
            fused.append(self.relu(total))
        return fused


class HRSegNet(nn.Module):
    def __init__(self, n_classes=3):
        super().__init__()
        self.stem = conv_bn(3, 8, 2)
        # from the stem to three branches at 1, 1/2 and 1/4 of its resolution
        self.split = nn.ModuleList(
            [conv_bn(8, 4), conv_bn(8, 8, 2), nn.Sequential(conv_bn(8, 8, 2), conv_bn(8, 12, 2))])
        self.stage = MultiResolution([4, 8, 12], [4, 6, 8], [1, 1, 1])
        width = int(np.sum(self.stage.widths))
        self.head = nn.Sequential(
            nn.Conv2d(width, width, 1), nn.BatchNorm2d(width, momentum=MOMENTUM), nn.ReLU(inplace=True),
            nn.Conv2d(width, n_classes, 1))

    def forward(self, x):
        x = self.stem(x)
        xs = self.stage([to_branch(x) for to_branch in self.split])
        h, w = xs[0].size(2), xs[0].size(3)
        coarse = [F.interpolate(input=t, size=(h, w), mode='bilinear', align_corners=ALIGN) for t in xs[1:]]
        return self.head(torch.cat([xs[0]] + coarse, 1))


def at_label_size(logits, target):
    h, w = target.shape[1:]
    if logits.size(2) != h or logits.size(3) != w:
        logits = F.interpolate(input=logits, size=(h, w), mode='bilinear', align_corners=ALIGN)
    return logits


class PixelCE(nn.Module):
    def __init__(self, ignore=-1):
        super().__init__()
        self.ce = nn.CrossEntropyLoss(ignore_index=ignore)

    def forward(self, logits, target):
        return self.ce(at_label_size(logits, target), target)


class HardPixelCE(nn.Module):
    # online hard example mining: the mean over the pixels whose true-class probability is
    # below a threshold, raised so that at least `keep` pixels count
    def __init__(self, ignore=-1, thresh=0.7, keep=100000):
        super().__init__()
        self.ignore, self.thresh, self.keep = ignore, thresh, max(1, keep)
        self.ce = nn.CrossEntropyLoss(ignore_index=ignore, reduction='none')

    def forward(self, logits, target):
        logits = at_label_size(logits, target)
        per_pixel = self.ce(logits, target).contiguous().view(-1)
        valid = target.contiguous().view(-1) != self.ignore
        safe = target.clone()
        safe[safe == self.ignore] = 0
        p = F.softmax(logits, dim=1).gather(1, safe.unsqueeze(1))
        p, order = p.contiguous().view(-1)[valid].contiguous().sort()
        floor = p[min(self.keep, p.numel() - 1)]
        threshold = max(floor, self.thresh)
        hard = per_pixel[valid][order]
        return hard[p < threshold].mean()


def poly_lr(optimizer, base, total, step, power=0.9):
    lr = base * ((1 - float(step) / total) ** power)
    for group in optimizer.param_groups:
        group['lr'] = lr
    return lr


model = HRSegNet(3)
initialize(model)
loss_fn = HardPixelCE(ignore=255, thresh=0.5, keep=40) if use_ohem else PixelCE(ignore=255)
trainable = filter(lambda p: p.requires_grad, model.parameters())
optimizer = torch.optim.SGD([{'params': trainable, 'lr': 0.05}], lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=False)
images, labels = torch.randn(2, 3, 32, 32), torch.randint(0, 3, (2, 32, 32))
labels[:, :, -5:] = 255  # unlabelled columns
model.train()
for it in range(3):
    loss = loss_fn(model(images), labels).mean()
    record.append(loss.item())
    model.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(poly_lr(optimizer, 0.05, 3, it))
    record.append(params_of(model))  # after each step
record.append({name: t.numpy().copy() for name, t in model.state_dict().items() if 'running' in name})
model.eval()
with torch.no_grad():
    record.append(model(images).numpy().copy())  # the running statistics' outputs
"""

HRNET_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    ("    loss.backward()\n    optimizer.step()\n", "    optimizer.step(loss.backward())\n"),
]


@pytest.mark.parametrize("use_ohem", [False, True])
def test_hrnet_multi_resolution_fusion_trains_as_torch(capsys, use_ohem):
    (theirs, ours), _ = runs_with_draws(
        HRNET_SOURCE,
        HRNET_STEPS,
        capsys,
        9302,
        initialize=initializer(),
        params_of=params_of,
        use_ohem=use_ohem,
    )
    assert len(theirs) == 3 * 3 + 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
