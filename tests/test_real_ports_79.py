"""Real-port tests, continued (the harness: ``tests/real_ports.py``): object detectors, their
targets, losses, decoding and training loops, as programs written here in the style of three
real code bases, each run under torch and, ported, under retrograd from the same weights.

- A CenterNet-style detector (xingyizhou/CenterNet): heads registered by ``self.__setattr__``
  and read by ``self.__getattr__``, ``bias.data.fill_``, ``nn.init.normal_``/``constant_``; the
  heatmap squashed by ``x.sigmoid_()`` in place on a head's output then ``torch.clamp``;
  features gathered by ``permute(...).contiguous().view``, ``gather`` of an ``expand``-ed index
  and a boolean mask; the CornerNet focal loss (``eq``/``lt``, ``pow``, ``if count == 0``); an
  L1 loss by the legacy ``F.l1_loss(..., size_average=False)``; a dataset of NumPy dicts
  (uint8 masks, int64 indices) through a ``DataLoader(pin_memory=True, drop_last=True)``;
  decoding by ``max_pool2d`` peaks and two ``topk`` with ``(inds / width).int().float()``.
- A YOLOv5-style detector (ultralytics/yolov5): Conv-BN-SiLU blocks sharing one activation
  module, CSP and fast-SPP blocks, ``nn.Upsample(None, 2, 'nearest')``; a head with an anchor
  buffer, ``meshgrid(indexing='ij')`` grids ``expand``-ed, ``sigmoid().split``; the stride
  probe, the anchor-order check (``anchors[:] = anchors.flip(0)``, ``anchors /=``), bias priors
  through ``b.data[:, 4] +=`` on a view then a new ``nn.Parameter``; ``type(m) is`` fixes of
  BatchNorm ``eps``/``momentum`` and ``inplace``; SGD over three groups (``nn.__dict__``'s
  norm classes, ``named_parameters(recurse=0)``, ``add_param_group``); an EMA averaging the
  state entries whose ``v.dtype.is_floating_point`` by ``v *= d; v += ...``; CIoU
  (``chunk``, ``minimum``/``maximum``, ``atan``); target assignment (``torch.tensor(shape)
  [[3, 2, 3, 2]]``, ``j, k = (...).T``, ``repeat((5, 1, 1))[j]``, ``clamp_``), losses written
  by ``tobj[b, a, gj, gi] = iou`` and ``t[range(n), cls] = 1``, a focal wrapper switching its
  BCE's ``reduction``; training with warmup by ``np.interp`` into each group's ``lr`` and
  ``momentum`` (``initial_lr`` from ``LambdaLR``), accumulation (ported as a sum of
  ``Gradients``), clipping, the EMA's decoded boxes.
- A RetinaNet (yhenon/pytorch-retinanet style): NumPy anchors through ``torch.from_numpy``,
  pairwise IoU by ``torch.min``/``max`` of ``unsqueeze``-d columns, the anchor focal loss
  (``targets[positive, assigned[positive, 4].long()] = 1``, ``torch.where``/``eq``/``ne``/``le``,
  ``torch.Tensor([[...]])``, ``1 + (~positive)``, an image without objects), box deltas and
  clipping by slice assignment, NumPy NMS, inference concatenating onto ``torch.Tensor([])``;
  ``torch.nn.DataParallel`` with ``.module``, frozen BatchNorm, ``ReduceLROnPlateau``.

The defect these found: a state-dict value's ``dtype`` was NumPy's, without torch's
``is_floating_point`` that the EMA update reads (``test_state_dict_values_answer_torch_dtype_
queries`` checks it directly).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

CENTERNET_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils import data


def splat(heatmap, cx, cy, radius):
    # a Gaussian peak of height 1 at (cx, cy), kept where it beats what is there
    size = 2 * radius + 1
    sigma = size / 6
    ys, xs = np.ogrid[-radius:radius + 1, -radius:radius + 1]
    peak = np.exp(-(xs * xs + ys * ys) / (2 * sigma * sigma))
    peak[peak < np.finfo(peak.dtype).eps * peak.max()] = 0
    h, w = heatmap.shape
    x0, x1 = max(0, cx - radius), min(w, cx + radius + 1)
    y0, y1 = max(0, cy - radius), min(h, cy + radius + 1)
    window = heatmap[y0:y1, x0:x1]
    shifted = peak[y0 - cy + radius:y1 - cy + radius, x0 - cx + radius:x1 - cx + radius]
    np.maximum(window, shifted, out=window)


def gather_rows(feat, ind, mask=None):
    # feat (b, n, c), ind (b, k): the rows ind of each batch element
    c = feat.size(2)
    feat = feat.gather(1, ind.unsqueeze(2).expand(ind.size(0), ind.size(1), c))
    if mask is not None:
        feat = feat[mask.unsqueeze(2).expand_as(feat)].view(-1, c)
    return feat


def gather_at(feat, ind):
    flat = feat.permute(0, 2, 3, 1).contiguous()
    return gather_rows(flat.view(flat.size(0), -1, flat.size(3)), ind)


def heatmap_focal_loss(pred, gt):
    centres, elsewhere = gt.eq(1).float(), gt.lt(1).float()
    pos = (torch.log(pred) * torch.pow(1 - pred, 2) * centres).sum()
    neg = (torch.log(1 - pred) * torch.pow(pred, 2) * torch.pow(1 - gt, 4) * elsewhere).sum()
    count = centres.sum()
    return -neg if count == 0 else -(pos + neg) / count


class MaskedL1(nn.Module):
    def forward(self, out, present, ind, target):
        pred = gather_at(out, ind)
        weight = present.unsqueeze(2).expand_as(pred).float()
        # size_average=False: the old spelling of reduction='sum'
        total = F.l1_loss(pred * weight, target * weight, size_average=False)
        return total / (weight.sum() + 1e-4)


class CenterNet(nn.Module):
    def __init__(self, heads, width=8, head_width=8):
        super().__init__()
        self.heads = heads
        self.stem = nn.Conv2d(3, width, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width, momentum=0.1)
        self.act = nn.ReLU(inplace=True)
        for name in sorted(heads):
            head = nn.Sequential(nn.Conv2d(width, head_width, 3, padding=1), nn.ReLU(inplace=True),
                                 nn.Conv2d(head_width, heads[name], 1))
            if name == 'hm':
                head[-1].bias.data.fill_(-2.19)  # a prior of 0.1 on every cell
            else:
                for m in head.modules():
                    if isinstance(m, nn.Conv2d):
                        nn.init.normal_(m.weight, mean=0.0, std=1e-3)
                        nn.init.constant_(m.bias, 0)
            self.__setattr__(name, head)

    def forward(self, x):
        x = self.act(self.bn(self.stem(x)))
        return {name: self.__getattr__(name)(x) for name in self.heads}


class Boxes(data.Dataset):
    def __init__(self, images, boxes, classes, grid, most=4):
        self.images, self.boxes, self.classes = images, boxes, classes
        self.grid, self.most = grid, most

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        hm = np.zeros((self.classes, self.grid, self.grid), dtype=np.float32)
        wh, offset = np.zeros((self.most, 2), np.float32), np.zeros((self.most, 2), np.float32)
        ind, present = np.zeros(self.most, np.int64), np.zeros(self.most, np.uint8)
        for k, (x0, y0, x1, y1, cls) in enumerate(self.boxes[i][:self.most]):
            centre = np.array([(x0 + x1) / 2, (y0 + y1) / 2], dtype=np.float32)
            cell = centre.astype(np.int32)
            splat(hm[int(cls)], cell[0], cell[1], max(0, int(0.35 * min(x1 - x0, y1 - y0))))
            wh[k], offset[k] = (x1 - x0, y1 - y0), centre - cell
            ind[k], present[k] = cell[1] * self.grid + cell[0], 1
        return dict(input=self.images[i], hm=hm, wh=wh, reg=offset, ind=ind, reg_mask=present)


def peaks(heat, k=3):
    # keep the cells that are the maximum of their neighbourhood
    top = nn.functional.max_pool2d(heat, (k, k), stride=1, padding=(k - 1) // 2)
    return heat * (top == heat).float()


def decode(heat, wh, reg, K):
    b, c, h, w = heat.size()
    scores, inds = torch.topk(peaks(heat).view(b, c, -1), K)
    inds = inds % (h * w)
    ys, xs = (inds / w).int().float(), (inds % w).int().float()
    best, pick = torch.topk(scores.view(b, -1), K)
    classes = (pick / K).int()
    inds, ys, xs = (gather_rows(t.view(b, -1, 1), pick).view(b, K) for t in (inds, ys, xs))
    reg, wh = gather_at(reg, inds), gather_at(wh, inds)
    xs, ys = xs.view(b, K, 1) + reg[:, :, 0:1], ys.view(b, K, 1) + reg[:, :, 1:2]
    half = wh.view(b, K, 2) / 2
    hw, hh = half[..., 0:1], half[..., 1:2]
    boxes = torch.cat([xs - hw, ys - hh, xs + hw, ys + hh], dim=2)
    return torch.cat([boxes, best.view(b, K, 1), classes.view(b, K, 1).float()], dim=2)


def run(images, boxes, record, epochs=2, K=5):
    device = torch.device('cpu')
    model = CenterNet({'hm': 2, 'wh': 2, 'reg': 2})
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    loader = torch.utils.data.DataLoader(Boxes(images, boxes, 2, 8), batch_size=2, shuffle=False,
                                         num_workers=0, pin_memory=True, drop_last=True)
    l1 = MaskedL1()
    model.train()
    for epoch in range(epochs):
        for batch in loader:
            batch = {k: v.to(device=device, non_blocking=True) for k, v in batch.items()}
            out = model(batch['input'])
            hm = torch.clamp(out['hm'].sigmoid_(), min=1e-4, max=1 - 1e-4)
            parts = {
                'hm': heatmap_focal_loss(hm, batch['hm']),
                'wh': l1(out['wh'], batch['reg_mask'], batch['ind'], batch['wh']),
                'off': l1(out['reg'], batch['reg_mask'], batch['ind'], batch['reg']),
            }
            loss = parts['hm'] + 0.1 * parts['wh'] + parts['off']
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            record.append({name: part.mean().item() for name, part in parts.items()})
            state = model.state_dict()
            record.append({name: t.detach().numpy().copy() for name, t in state.items()})
    # inference: the heatmap squashed in place, then the K best peaks decoded to boxes
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(images[:2]))
        dets = decode(out['hm'].sigmoid_(), out['wh'], out['reg'], K)
        # the rows the targets mark present, as CenterNet's debug view gathers them
        first = Boxes(images, boxes, 2, 8)[0]
        ind = torch.from_numpy(first['ind'])[None]
        present = torch.from_numpy(first['reg_mask'])[None]
        shown = gather_rows(out['wh'][:1].flatten(2).transpose(1, 2), ind, present.bool())
    record.append(dets.detach().numpy().copy())
    record.append(shown.numpy().copy())
"""

CENTERNET_STEPS = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_centernet_trains_and_decodes_as_torch():
    rng = np.random.default_rng(7901)
    images = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    # boxes (x1, y1, x2, y2, class) on the 8x8 output grid
    boxes = [
        [(0.5, 1.2, 3.1, 4.0, 0), (4.2, 4.4, 7.5, 7.3, 1)],
        [(1.0, 0.3, 6.2, 3.3, 1), (2.1, 4.0, 4.9, 7.7, 0), (5.5, 5.1, 7.9, 7.6, 1)],
        [(0.2, 0.2, 2.7, 2.9, 0), (3.3, 2.5, 7.1, 6.8, 0)],
        [(2.4, 1.1, 5.6, 6.3, 1), (0.1, 5.0, 1.9, 7.4, 1)],
    ]
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            CENTERNET_SOURCE
            if lib is torch
            else ported_imports(port(CENTERNET_SOURCE, CENTERNET_STEPS))
        )
        run_source(text, lib, initialize=initialize)["run"](images, boxes, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


YOLO_SOURCE = """
import math
from copy import deepcopy

import numpy as np
import torch
import torch.nn as nn


def same_padding(k):
    return k // 2 if isinstance(k, int) else [v // 2 for v in k]


class ConvBNAct(nn.Module):
    act_default = nn.SiLU()  # one module shared by every instance, as YOLOv5 has it

    def __init__(self, c_in, c_out, k=1, s=1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, s, same_padding(k), bias=False)
        self.norm = nn.BatchNorm2d(c_out)
        self.act = self.act_default

    def forward(self, x):
        return self.act(self.norm(self.conv(x)))


class CSPBlock(nn.Module):
    # two 1x1 branches, one through residual bottlenecks, joined by a third 1x1
    def __init__(self, c_in, c_out, n=1, shortcut=True):
        super().__init__()
        hidden = c_out // 2
        self.left, self.right = ConvBNAct(c_in, hidden), ConvBNAct(c_in, hidden)
        self.blocks = nn.ModuleList(
            nn.Sequential(ConvBNAct(hidden, hidden), ConvBNAct(hidden, hidden, 3))
            for _ in range(n))
        self.shortcut = shortcut
        self.join = ConvBNAct(2 * hidden, c_out)

    def forward(self, x):
        y = self.left(x)
        for block in self.blocks:
            y = y + block(y) if self.shortcut else block(y)
        return self.join(torch.cat((y, self.right(x)), 1))


class FastSPP(nn.Module):
    def __init__(self, c_in, c_out, k=5):
        super().__init__()
        self.reduce, self.expand = ConvBNAct(c_in, c_in // 2), ConvBNAct(c_in * 2, c_out)
        self.pool = nn.MaxPool2d(kernel_size=k, stride=1, padding=k // 2)

    def forward(self, x):
        pooled = [self.reduce(x)]
        for _ in range(3):  # pools of 5, 9 and 13 by repetition
            pooled.append(self.pool(pooled[-1]))
        return self.expand(torch.cat(pooled, 1))


class Head(nn.Module):
    stride = None  # set by the detector's probe

    def __init__(self, classes, anchors, channels):
        super().__init__()
        self.nc, self.no = classes, classes + 5
        self.nl, self.na = len(anchors), len(anchors[0]) // 2
        self.grid = [torch.empty(0) for _ in range(self.nl)]
        self.anchor_grid = [torch.empty(0) for _ in range(self.nl)]
        self.register_buffer('anchors', torch.tensor(anchors).float().view(self.nl, -1, 2))
        self.m = nn.ModuleList(nn.Conv2d(c, self.no * self.na, 1) for c in channels)

    def forward(self, xs):
        decoded = []
        for i in range(self.nl):
            bs, _, ny, nx = xs[i].shape
            out = self.m[i](xs[i]).view(bs, self.na, self.no, ny, nx)
            xs[i] = out.permute(0, 1, 3, 4, 2).contiguous()
            if not self.training:
                if self.grid[i].shape[2:4] != xs[i].shape[2:4]:
                    self.grid[i], self.anchor_grid[i] = self.make_grid(nx, ny, i)
                xy, wh, conf = xs[i].sigmoid().split((2, 2, self.nc + 1), 4)
                xy = (xy * 2 + self.grid[i]) * self.stride[i]
                wh = (wh * 2) ** 2 * self.anchor_grid[i]
                decoded.append(torch.cat((xy, wh, conf), 4).view(bs, -1, self.no))
        return xs if self.training else (torch.cat(decoded, 1), xs)

    def make_grid(self, nx, ny, i):
        like = dict(device=self.anchors.device, dtype=self.anchors.dtype)
        shape = 1, self.na, ny, nx, 2
        gy, gx = torch.meshgrid(torch.arange(ny, **like), torch.arange(nx, **like), indexing='ij')
        grid = torch.stack((gx, gy), 2).expand(shape) - 0.5
        return grid, (self.anchors[i] * self.stride[i]).view((1, self.na, 1, 1, 2)).expand(shape)


class Detector(nn.Module):
    def __init__(self, classes=2, anchors=((10, 14, 23, 27, 37, 58), (4, 5, 8, 10, 13, 12))):
        super().__init__()
        self.p3 = nn.Sequential(ConvBNAct(3, 4, 3, 2), ConvBNAct(4, 8, 3, 2), CSPBlock(8, 8),
                                ConvBNAct(8, 8, 3, 2), CSPBlock(8, 8))
        self.p4 = nn.Sequential(ConvBNAct(8, 16, 3, 2), FastSPP(16, 16))
        self.up = nn.Upsample(None, 2, 'nearest')
        self.neck = CSPBlock(24, 8, shortcut=False)
        self.detect = Head(classes, anchors, (8, 16))
        probe = 32
        head = self.detect
        outs = self.forward(torch.zeros(1, 3, probe, probe))
        head.stride = torch.tensor([probe / o.shape[-2] for o in outs])
        area = head.anchors.prod(-1).mean(-1).view(-1)  # anchors must grow with the stride
        if (area[-1] - area[0]).sign() != (head.stride[-1] - head.stride[0]).sign():
            print('reversing the anchor order')
            head.anchors[:] = head.anchors.flip(0)
        head.anchors /= head.stride.view(-1, 1, 1)
        for conv, s in zip(head.m, head.stride):  # priors: few objects, classes even
            b = conv.bias.view(head.na, -1)
            b.data[:, 4] += math.log(8 / (640 / s) ** 2)
            b.data[:, 5:] += math.log(0.6 / (head.nc - 0.99999))
            conv.bias = torch.nn.Parameter(b.view(-1), requires_grad=True)
        for m in self.modules():
            if type(m) is nn.BatchNorm2d:
                m.eps, m.momentum = 1e-3, 0.03
            elif type(m) in [nn.Hardswish, nn.LeakyReLU, nn.ReLU, nn.ReLU6, nn.SiLU]:
                m.inplace = True

    def forward(self, x):
        p3 = self.p3(x)
        p4 = self.p4(p3)
        return self.detect([self.neck(torch.cat([self.up(p4), p3], 1)), p4])


def unwrap(model):
    parallel = (nn.parallel.DataParallel, nn.parallel.DistributedDataParallel)
    return model.module if type(model) in parallel else model


def three_groups(model, lr, momentum, decay):
    norms = tuple(v for k, v in nn.__dict__.items() if 'Norm' in k)
    decayed, norm_weights, biases = [], [], []
    for m in model.modules():
        for name, p in m.named_parameters(recurse=0):
            if name == 'bias':
                biases.append(p)
            elif name == 'weight' and isinstance(m, norms):
                norm_weights.append(p)
            else:
                decayed.append(p)
    optimizer = torch.optim.SGD(biases, lr=lr, momentum=momentum, nesterov=True)
    optimizer.add_param_group({'params': decayed, 'weight_decay': decay})
    optimizer.add_param_group({'params': norm_weights, 'weight_decay': 0.0})
    sizes = len(biases), len(decayed), len(norm_weights)
    print(f'{type(optimizer).__name__}: %d biases, %d decayed, %d norms' % sizes)
    return optimizer


class EMA:
    def __init__(self, model, decay=0.9999, tau=2000):
        self.ema = deepcopy(unwrap(model)).eval()
        self.updates = 0
        self.decay = lambda n: decay * (1 - math.exp(-n / tau))  # ramps up over the first updates
        for frozen in self.ema.parameters():
            frozen.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        current = unwrap(model).state_dict()
        for name, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:  # not the BatchNorm counters
                v *= d
                v += (1 - d) * current[name].detach()

    def copy_attributes(self, model, names):
        for k, v in model.__dict__.items():
            if k in names and not k.startswith('_'):
                setattr(self.ema, k, v)


def ciou(box1, box2, eps=1e-7):
    x1, y1, w1, h1 = box1.chunk(4, -1)
    x2, y2, w2, h2 = box2.chunk(4, -1)
    l1, r1, t1, b1 = x1 - w1 / 2, x1 + w1 / 2, y1 - h1 / 2, y1 + h1 / 2
    l2, r2, t2, b2 = x2 - w2 / 2, x2 + w2 / 2, y2 - h2 / 2, y2 + h2 / 2
    inter = (r1.minimum(r2) - l1.maximum(l2)).clamp(0) * (b1.minimum(b2) - t1.maximum(t2)).clamp(0)
    union = eps + w1 * h1 + w2 * h2 - inter
    iou = inter / union
    diagonal = (r1.maximum(r2) - l1.minimum(l2)) ** 2 + (b1.maximum(b2) - t1.minimum(t2)) ** 2 + eps
    centres = ((x2 - x1) ** 2 + (y2 - y1) ** 2)
    v = torch.pow(torch.atan(w2 / h2) - torch.atan(w1 / h1), 2) * 4 / math.pi ** 2
    with torch.no_grad():
        trade = v / (1 + eps + v - iou)
    return iou - (centres / diagonal + v * trade)


class Focal(nn.Module):
    def __init__(self, bce, gamma, alpha=0.25):
        super().__init__()
        self.bce, self.gamma, self.alpha = bce, gamma, alpha
        self.reduction, bce.reduction = bce.reduction, 'none'

    def forward(self, logits, target):
        loss = self.bce(logits, target)
        p = torch.sigmoid(logits)
        p_t = target * p + (1 - target) * (1 - p)
        loss *= (target * self.alpha + (1 - target) * (1 - self.alpha)) * (1.0 - p_t) ** self.gamma
        return loss.mean() if self.reduction == 'mean' else loss.sum()


class DetectionLoss:
    def __init__(self, model):
        device = next(model.parameters()).device
        h, head = model.hyp, unwrap(model).detect
        self.bce_cls = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([h['cls_pw']], device=device))
        self.bce_obj = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([h['obj_pw']], device=device))
        if h['fl_gamma'] > 0:
            self.bce_cls = Focal(self.bce_cls, h['fl_gamma'])
            self.bce_obj = Focal(self.bce_obj, h['fl_gamma'])
        self.balance, self.hyp, self.device = [4.0, 1.0], h, device
        self.na, self.nc, self.nl, self.anchors = head.na, head.nc, head.nl, head.anchors

    def __call__(self, preds, targets):
        lcls, lbox, lobj = (torch.zeros(1, device=self.device) for _ in range(3))
        classes, boxes, where, anchors = self.assign(preds, targets)
        for i, pi in enumerate(preds):
            b, a, gj, gi = where[i]
            tobj = torch.zeros(pi.shape[:4], dtype=pi.dtype, device=self.device)
            n = b.shape[0]
            if n:
                pxy, pwh, _, pcls = pi[b, a, gj, gi].split((2, 2, 1, self.nc), 1)
                pxy, pwh = pxy.sigmoid() * 2 - 0.5, (pwh.sigmoid() * 2) ** 2 * anchors[i]
                pbox = torch.cat((pxy, pwh), 1)
                iou = ciou(pbox, boxes[i]).squeeze()
                lbox += (1.0 - iou).mean()
                tobj[b, a, gj, gi] = iou.detach().clamp(0).type(tobj.dtype)
                t = torch.full_like(pcls, 0.0, device=self.device)
                t[range(n), classes[i]] = 1.0
                lcls += self.bce_cls(pcls, t)
            lobj += self.bce_obj(pi[..., 4], tobj) * self.balance[i]
        lbox *= self.hyp['box']
        lobj *= self.hyp['obj']
        lcls *= self.hyp['cls']
        return (lbox + lobj + lcls) * tobj.shape[0], torch.cat((lbox, lobj, lcls)).detach()

    def assign(self, preds, targets):
        # each target (image, class, x, y, w, h) to the anchors whose shape is near enough and
        # to its cell and the two nearest neighbouring cells
        na, nt = self.na, targets.shape[0]
        classes, boxes, where, anchors = [], [], [], []
        gain = torch.ones(7, device=self.device)
        anchor_ids = torch.arange(na, device=self.device).float().view(na, 1).repeat(1, nt)
        targets = torch.cat((targets.repeat(na, 1, 1), anchor_ids[..., None]), 2)
        half = 0.5
        shifts = [[0, 0], [1, 0], [0, 1], [-1, 0], [0, -1]]
        shifts = torch.tensor(shifts, device=self.device).float() * half
        for i in range(self.nl):
            shape = preds[i].shape
            gain[2:6] = torch.tensor(shape)[[3, 2, 3, 2]]
            t = targets * gain
            ratio = t[..., 4:6] / self.anchors[i][:, None]
            t = t[torch.max(ratio, 1 / ratio).max(2)[0] < self.hyp['anchor_t']]
            gxy = t[:, 2:4]
            gxi = gain[[2, 3]] - gxy
            left, up = ((gxy % 1 < half) & (gxy > 1)).T
            right, down = ((gxi % 1 < half) & (gxi > 1)).T
            use = torch.stack((torch.ones_like(left), left, up, right, down))
            t = t.repeat((5, 1, 1))[use]
            offsets = (torch.zeros_like(gxy)[None] + shifts[:, None])[use]
            bc, gxy, gwh, a = t.chunk(4, 1)
            a, (b, c) = a.long().view(-1), bc.long().T
            gij = (gxy - offsets).long()
            gi, gj = gij.T
            where.append((b, a, gj.clamp_(0, shape[2] - 1), gi.clamp_(0, shape[3] - 1)))
            boxes.append(torch.cat((gxy - gij, gwh), 1))
            anchors.append(self.anchors[i][a])
            classes.append(c)
        return classes, boxes, where, anchors


class Images(torch.utils.data.Dataset):
    def __init__(self, pictures, rows):
        self.pictures, self.rows = pictures, rows

    def __len__(self):
        return len(self.pictures)

    def __getitem__(self, i):
        labels = torch.zeros((len(self.rows[i]), 6))
        labels[:, 1:] = torch.from_numpy(self.rows[i])
        # HWC BGR to CHW RGB
        chw = np.ascontiguousarray(self.pictures[i].transpose((2, 0, 1))[::-1])
        return torch.from_numpy(chw), labels

    @staticmethod
    def collate(batch):
        images, labels = zip(*batch)
        for i, rows in enumerate(labels):
            rows[:, 0] = i  # which image of the batch
        return torch.stack(images, 0), torch.cat(labels, 0)


def train(hyp, images, labels, record, epochs=2, batch_size=2, nominal=8):
    device = torch.device('cpu')
    model = Detector().to(device)
    initialize(model)
    model.hyp = hyp
    optimizer = three_groups(model, hyp['lr0'], hyp['momentum'], hyp['weight_decay'])
    ramp = lambda e: ((1 - math.cos(e * math.pi / epochs)) / 2) * (hyp['lrf'] - 1) + 1
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda=ramp)
    ema = EMA(model)
    loader = torch.utils.data.DataLoader(
        Images(images, labels), batch_size=batch_size, collate_fn=Images.collate)
    compute_loss = DetectionLoss(model)
    batches, warmup, last_step = len(loader), 6, -1
    for epoch in range(epochs):
        model.train()
        mean_loss = torch.zeros(3, device=device)
        optimizer.zero_grad()
        for i, (imgs, targets) in enumerate(loader):
            seen = i + batches * epoch
            imgs = imgs.to(device, non_blocking=True).float() / 255
            if seen <= warmup:  # biases fall from warmup_bias_lr, the rest rise from 0
                accumulate = max(1, np.interp(seen, [0, warmup], [1, nominal / batch_size]).round())
                for j, group in enumerate(optimizer.param_groups):
                    start = hyp['warmup_bias_lr'] if j == 0 else 0.0
                    span = [0, warmup]
                    group['lr'] = np.interp(seen, span, [start, group['initial_lr'] * ramp(epoch)])
                    if 'momentum' in group:
                        ends = [hyp['warmup_momentum'], hyp['momentum']]
                        group['momentum'] = np.interp(seen, span, ends)
            loss, items = compute_loss(model(imgs), targets.to(device))
            loss.backward()
            if seen - last_step >= accumulate:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
                optimizer.step()
                optimizer.zero_grad()
                ema.update(model)
                last_step = seen
            mean_loss = (mean_loss * i + items) / (i + 1)
            record.append(items.numpy().copy())
        record.append(np.array([g['lr'] for g in optimizer.param_groups]))
        scheduler.step()
        ema.copy_attributes(model, ['hyp', 'nc'])
        record.append(mean_loss.numpy().copy())
        for module in (model, ema.ema):
            record.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
    with torch.no_grad():
        boxes, _ = ema.ema(imgs)
    record.append(boxes.detach().numpy().copy())
"""

YOLO_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        optimizer.zero_grad()\n        for i, (imgs",
        "        optimizer.zero_grad()\n        grads = None\n        for i, (imgs",
    ),
    (
        "            loss.backward()\n",
        "            grads = loss.backward() if grads is None else grads + loss.backward()\n",
    ),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    (
        "                optimizer.step()\n                optimizer.zero_grad()\n",
        "                optimizer.step(grads)\n                optimizer.zero_grad()\n"
        "                grads = None\n",
    ),
]

YOLO_HYP = dict(
    lr0=0.01, lrf=0.01, momentum=0.937, weight_decay=0.0005, warmup_momentum=0.8,
    warmup_bias_lr=0.1, box=0.05, cls=0.5, cls_pw=1.0, obj=1.0, obj_pw=1.0, anchor_t=4.0,
)  # fmt: skip


@pytest.mark.parametrize("fl_gamma", [0.0, 1.5])
def test_yolov5_trains_with_ciou_targets_and_ema_as_torch(fl_gamma, capsys):
    rng = np.random.default_rng(7902)
    images = rng.integers(0, 256, (4, 32, 32, 3), dtype=np.uint8)
    # (class, x, y, w, h) normalized, kept apart so that no two targets claim one grid cell
    labels = [
        np.array([[0, 0.22, 0.27, 0.30, 0.25], [1, 0.71, 0.68, 0.40, 0.52]], dtype=np.float32),
        np.array([[1, 0.55, 0.31, 0.18, 0.22]], dtype=np.float32),
        np.array([[0, 0.16, 0.77, 0.21, 0.35], [0, 0.83, 0.21, 0.26, 0.16]], dtype=np.float32),
        np.array([[1, 0.47, 0.53, 0.62, 0.58]], dtype=np.float32),
    ]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = YOLO_SOURCE if lib is torch else port(YOLO_SOURCE, YOLO_STEPS)
        names = run_source(text, lib, initialize=initialize)
        names["train"](dict(YOLO_HYP, fl_gamma=fl_gamma), images, labels, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and "reversing the anchor order" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_state_dict_values_answer_torch_dtype_queries():
    """YOLOv5's ``ModelEMA.update`` (and ultralytics' after it) averages the state entries
    whose ``v.dtype.is_floating_point``; a state value's dtype was NumPy's, which has no such
    attribute (``AttributeError``). It is still NumPy's dtype in every other respect."""
    torch_model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    model = rg.nn.Sequential(rg.nn.Linear(2, 3), rg.nn.BatchNorm1d(3))
    theirs, ours = torch_model.state_dict(), model.state_dict()
    for key, value in ours.items():
        reference = theirs[key].dtype
        assert value.dtype.is_floating_point == reference.is_floating_point, key
        assert value.dtype.is_complex == reference.is_complex, key
        assert value.dtype.is_signed == reference.is_signed, key
        assert value.dtype == np.dtype(str(reference).removeprefix("torch.")), key
        assert np.dtype(value.dtype) == value.view(np.ndarray).dtype
    weight = ours["0.weight"]
    assert (
        weight.dtype.kind == "f" and weight.dtype.itemsize == 4 and weight.dtype.type is np.float32
    )
    assert {np.dtype(np.float32): 1}[weight.dtype] == 1
    assert repr(weight).endswith("dtype=float32)")
    np.testing.assert_array_equal(weight, weight.copy())
    # the EMA's update through the values reaches the module, floating entries only
    for value in ours.values():
        if value.dtype.is_floating_point:
            value *= 0.5
    np.testing.assert_allclose(model[0].weight.numpy(), theirs["0.weight"].numpy() * 0 + weight)
    assert int(model[1].num_batches_tracked) == 0


RETINANET_SOURCE = """
import collections
import math

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import Dataset, DataLoader


def anchor_boxes(image_shape, levels=(3, 4, 5, 6, 7), ratios=(0.5, 1.0, 2.0),
                 scales=(1.0, 1.26, 1.59)):
    # nine boxes centred on every cell of every pyramid level, (x1, y1, x2, y2)
    out = []
    for level in levels:
        stride, size = 2 ** level, 2 ** (level + 2)
        rows, cols = [(n + stride - 1) // stride for n in image_shape]
        base = []
        for r in ratios:
            for s in scales:
                w, h = size * s / np.sqrt(r), size * s * np.sqrt(r)
                base.append([-w / 2, -h / 2, w / 2, h / 2])
        cx, cy = np.meshgrid((np.arange(cols) + 0.5) * stride, (np.arange(rows) + 0.5) * stride)
        centres = np.stack([cx.ravel(), cy.ravel(), cx.ravel(), cy.ravel()], axis=1)
        out.append((centres[:, None, :] + np.array(base)[None]).reshape(-1, 4))
    boxes = torch.from_numpy(np.concatenate(out).astype(np.float32))[None]
    return boxes.cuda() if torch.cuda.is_available() else boxes


def pairwise_iou(a, b):
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    # a's boxes down the rows, b's across the columns
    right = torch.min(torch.unsqueeze(a[:, 2], dim=1), b[:, 2])
    left = torch.max(torch.unsqueeze(a[:, 0], 1), b[:, 0])
    bottom = torch.min(torch.unsqueeze(a[:, 3], dim=1), b[:, 3])
    top = torch.max(torch.unsqueeze(a[:, 1], 1), b[:, 1])
    inter = torch.clamp(right - left, min=0) * torch.clamp(bottom - top, min=0)
    union = torch.unsqueeze((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), dim=1) + area_b - inter
    return inter / torch.clamp(union, min=1e-8)


def centre_form(boxes):
    w, h = boxes[..., 2] - boxes[..., 0], boxes[..., 3] - boxes[..., 1]
    return boxes[..., 0] + 0.5 * w, boxes[..., 1] + 0.5 * h, w, h


class AnchorFocalLoss(nn.Module):
    def forward(self, scores, deltas, anchors, annotations, alpha=0.25, gamma=2.0):
        ax, ay, aw, ah = centre_form(anchors[0])
        cls_losses, box_losses = [], []
        for j in range(scores.shape[0]):
            p = torch.clamp(scores[j], 1e-4, 1.0 - 1e-4)
            gt = annotations[j][annotations[j][:, 4] != -1]
            if gt.shape[0] == 0:  # an image without objects: every anchor is background
                weight = (1.0 - torch.ones(p.shape) * alpha) * torch.pow(p, gamma)
                cls_losses.append((weight * -torch.log(1.0 - p)).sum())
                box_losses.append(torch.tensor(0).float())
                continue
            best_iou, best = torch.max(pairwise_iou(anchors[0], gt[:, :4]), dim=1)
            targets = torch.ones(p.shape) * -1  # -1: ignored
            targets[torch.lt(best_iou, 0.4), :] = 0
            positive = torch.ge(best_iou, 0.5)
            assigned = gt[best, :]
            targets[positive, :] = 0
            targets[positive, assigned[positive, 4].long()] = 1
            is_one = torch.eq(targets, 1.0)
            alphas = torch.ones(p.shape) * alpha
            weight = torch.where(is_one, alphas, 1.0 - alphas)
            weight = weight * torch.pow(torch.where(is_one, 1.0 - p, p), gamma)
            bce = -(targets * torch.log(p) + (1.0 - targets) * torch.log(1.0 - p))
            kept = torch.where(torch.ne(targets, -1.0), weight * bce, torch.zeros(p.shape))
            cls_losses.append(kept.sum() / torch.clamp(positive.sum().float(), min=1.0))
            if positive.sum() > 0:
                gx, gy, gw, gh = centre_form(assigned[positive, :])
                gw, gh = torch.clamp(gw, min=1), torch.clamp(gh, min=1)
                px, py, pw, ph = ax[positive], ay[positive], aw[positive], ah[positive]
                wanted = (gx - px) / pw, (gy - py) / ph, torch.log(gw / pw), torch.log(gh / ph)
                wanted = torch.stack(wanted).t()
                wanted = wanted / torch.Tensor([[0.1, 0.1, 0.2, 0.2]])
                assert ((1 + (~positive)) == 1).sum() == positive.sum()  # bool arithmetic
                diff = torch.abs(wanted - deltas[j][positive, :])
                near = torch.le(diff, 1.0 / 9.0)  # smooth L1 with beta 1/9
                smooth = torch.where(near, 4.5 * torch.pow(diff, 2), diff - 0.5 / 9.0)
                box_losses.append(smooth.mean())
            else:
                box_losses.append(torch.tensor(0).float())
        parts = (cls_losses, box_losses)
        return tuple(torch.stack(part).mean(dim=0, keepdim=True) for part in parts)


def apply_deltas(anchors, deltas, std=(0.1, 0.1, 0.2, 0.2)):
    std = torch.from_numpy(np.array(std, dtype=np.float32))
    x, y, w, h = centre_form(anchors)
    cx, cy = x + deltas[:, :, 0] * std[0] * w, y + deltas[:, :, 1] * std[1] * h
    w, h = torch.exp(deltas[:, :, 2] * std[2]) * w, torch.exp(deltas[:, :, 3] * std[3]) * h
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=2)


def clip_to(boxes, image):
    _, _, height, width = image.shape
    boxes[:, :, :2] = torch.clamp(boxes[:, :, :2], min=0)
    for column, limit in ((2, width), (3, height)):
        boxes[:, :, column] = torch.clamp(boxes[:, :, column], max=limit)
    return boxes


def greedy_nms(boxes, scores, overlap):
    b = boxes.detach().numpy()
    area = np.prod(b[:, 2:] - b[:, :2], axis=1)
    order, keep = scores.detach().numpy().argsort(kind='stable')[::-1], []
    while order.size:
        top, rest = order[0], order[1:]
        keep.append(top)
        iw = np.maximum(0.0, np.minimum(b[top, 2], b[rest, 2]) - np.maximum(b[top, 0], b[rest, 0]))
        ih = np.maximum(0.0, np.minimum(b[top, 3], b[rest, 3]) - np.maximum(b[top, 1], b[rest, 1]))
        inter = iw * ih
        order = rest[inter / (area[top] + area[rest] - inter) <= overlap]
    return torch.tensor(keep, dtype=torch.long)


def subnet(c_in, c_out, width):
    return nn.Sequential(nn.Conv2d(c_in, width, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(width, c_out, 3, padding=1))


class RetinaNet(nn.Module):
    def __init__(self, classes, width=8, anchors_per_cell=9):
        super().__init__()
        self.classes, self.k = classes, anchors_per_cell
        self.stem = nn.Conv2d(3, 8, kernel_size=7, stride=8, padding=3, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU(inplace=True)
        self.levels = nn.ModuleList([nn.Conv2d(8, 8, 3, stride=2, padding=1) for _ in range(4)])
        self.box_head = subnet(8, 4 * anchors_per_cell, width)
        self.cls_head = subnet(8, classes * anchors_per_cell, width)
        self.loss = AnchorFocalLoss()
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()
            elif isinstance(m, nn.Conv2d):  # He initialisation by fan-out
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2.0 / fan_out))
        prior = 0.01
        self.cls_head[-1].weight.data.fill_(0)
        self.cls_head[-1].bias.data.fill_(-math.log((1.0 - prior) / prior))
        self.box_head[-1].weight.data.fill_(0)
        self.box_head[-1].bias.data.fill_(0)

    def freeze_bn(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()

    def forward(self, inputs):
        images, annotations = inputs if self.training else (inputs, None)
        features = [self.act(self.bn(self.stem(images)))]
        for level in self.levels:
            features.append(level(features[-1]))
        deltas = [self.box_head(f).permute(0, 2, 3, 1).contiguous() for f in features]
        deltas = torch.cat([d.view(d.shape[0], -1, 4) for d in deltas], dim=1)
        scores = []
        for f in features:
            s = torch.sigmoid(self.cls_head(f)).permute(0, 2, 3, 1)
            b, h, w, _ = s.shape
            s = s.view(b, h, w, self.k, self.classes).contiguous()
            scores.append(s.view(b, -1, self.classes))
        scores = torch.cat(scores, dim=1)
        anchors = anchor_boxes(images.shape[2:])
        if self.training:
            return self.loss(scores, deltas, anchors, annotations)
        boxes = clip_to(apply_deltas(anchors, deltas), images)
        kept_scores, kept_boxes = torch.Tensor([]), torch.Tensor([])
        kept_labels = torch.Tensor([]).long()
        listed = []
        for c in range(scores.shape[2]):
            s = torch.squeeze(scores[:, :, c])
            over = s > 0.05
            if over.sum() == 0:
                continue
            s, candidates = s[over], torch.squeeze(boxes)[over]
            keep = greedy_nms(candidates, s, 0.5)
            listed.extend(s[keep])
            kept_scores = torch.cat((kept_scores, s[keep]))
            kept_labels = torch.cat((kept_labels, torch.tensor([c] * keep.shape[0])))
            kept_boxes = torch.cat((kept_boxes, candidates[keep]))
        return kept_scores, kept_labels, kept_boxes, [float(v) for v in listed]


class Pictures(Dataset):
    def __init__(self, pictures, boxes):
        self.pictures, self.boxes = pictures, boxes

    def __len__(self):
        return len(self.pictures)

    def __getitem__(self, i):
        picture, boxes = torch.from_numpy(self.pictures[i]), torch.from_numpy(self.boxes[i])
        return {'img': picture, 'annot': boxes}


def pad_batch(samples):
    # images padded to the largest (HWC to NCHW), annotations padded with rows of -1
    images, annots = [s['img'] for s in samples], [s['annot'] for s in samples]
    h, w = max(int(im.shape[0]) for im in images), max(int(im.shape[1]) for im in images)
    batch = torch.zeros(len(images), h, w, 3)
    for i, im in enumerate(images):
        batch[i, :int(im.shape[0]), :int(im.shape[1]), :] = im
    rows = max(max(a.shape[0] for a in annots), 1)
    padded = torch.ones((len(annots), rows, 5)) * -1
    for i, a in enumerate(annots):
        if a.shape[0] > 0:
            padded[i, :a.shape[0], :] = a
    return {'img': batch.permute(0, 3, 1, 2), 'annot': padded}


def main(images, annotations, record, epochs=2):
    pictures = Pictures(images, annotations)
    loader = DataLoader(pictures, num_workers=0, collate_fn=pad_batch, batch_size=2)
    net = RetinaNet(classes=2)
    initialize(net)
    net = torch.nn.DataParallel(net)
    net.training = True
    optimizer = optim.Adam(net.parameters(), lr=1e-3)
    plateau = optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', patience=0)
    history = collections.deque(maxlen=500)
    for epoch in range(epochs):
        net.train()
        net.module.freeze_bn()
        losses = []
        for step, batch in enumerate(loader):
            try:
                optimizer.zero_grad()
                cls_loss, box_loss = net([batch['img'].float(), batch['annot']])
                cls_loss, box_loss = cls_loss.mean(), box_loss.mean()
                loss = cls_loss + box_loss
                if bool(loss == 0):
                    continue
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 0.1)
                optimizer.step()
                history.append(float(loss))
                losses.append(float(loss))
                parts = float(cls_loss), float(box_loss), np.mean(history)
                shown = 'classes %1.5f boxes %1.5f running %1.5f' % parts
                print(f'epoch {epoch} step {step}: {shown}')
                del cls_loss, box_loss
            except Exception as e:
                print(e)
                continue
        plateau.step(np.mean(losses))
        record.append(optimizer.param_groups[0]['lr'])
        record.append({k: v.detach().numpy().copy() for k, v in net.module.state_dict().items()})
    net.eval()
    head, picture = net.module, batch['img'][:1].float()
    with torch.no_grad():
        features = head.act(head.bn(head.stem(picture)))
        record.append(torch.sigmoid(head.cls_head(features)).numpy().copy())
        # The decode runs on exact values (deltas 0, a score per anchor shape): scores of the
        # trained head lie within 1e-5 of each other, and a rounding-sized difference would
        # change which of two overlapping boxes the NMS keeps.
        head.box_head[-1].weight.data.zero_()
        head.box_head[-1].bias.data.zero_()
        head.cls_head[-1].weight.data.zero_()
        shapes = head.cls_head[-1].bias.shape[0]
        head.cls_head[-1].bias.data.copy_(torch.arange(shapes).float() * 0.125 - 2.0)
        scores, labels, boxes, listed = net(picture)
    record.extend([scores.numpy().copy(), labels.numpy().copy(), boxes.numpy().copy(), listed])
"""

RETINANET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    ("                loss.backward()\n", "                grads = loss.backward()\n"),
    ("clip_grad_norm_(net.parameters(),", "clip_grad_norm_(grads, net.parameters(),"),
    ("                optimizer.step()\n", "                optimizer.step(grads)\n"),
]


def test_retinanet_trains_with_anchor_focal_loss_and_decodes_as_torch(capsys):
    rng = np.random.default_rng(7903)
    images = rng.uniform(0, 1, (4, 64, 64, 3)).astype(np.float32)
    annotations = [
        np.array([[4, 6, 40, 38, 0], [30, 28, 62, 60, 1]], dtype=np.float32),
        np.array([[10, 20, 36, 60, 1]], dtype=np.float32),
        np.zeros((0, 5), dtype=np.float32),
        np.array([[20, 8, 56, 30, 0], [-1, -1, -1, -1, -1]], dtype=np.float32),
    ]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            RETINANET_SOURCE
            if lib is torch
            else ported_imports(port(RETINANET_SOURCE, RETINANET_STEPS))
        )
        run_source(text, lib, initialize=initialize)["main"](images, annotations, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and "step 1" in logs[0]
    assert len(records[0][-1]) > 0  # boxes kept by the NMS
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
