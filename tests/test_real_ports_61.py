"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_60.py`` (the
harness: ``tests/real_ports.py``):

- Lovász losses written here in the style of bermanmaxim/LovaszSoftmax, trained in the manner
  of its demo notebooks (a small convolutional net on random images, in float32): the Jaccard
  gradient of ``truth_sorted.float().cumsum(0)`` with ``jac[1:n] = jac[1:n] - jac[0:-1]``,
  ``torch.sort(errors, dim=0, descending=True)`` and ``truth[order]``,
  ``torch.dot(F.relu(errors_sorted), Variable(grad))``, ``probas[valid.nonzero().squeeze()]``
  of the pixels not void (label 255), ``classes='present'``, ``'all'`` and a list, the sigmoid
  case (``probas.dim() == 3``), a generator mean with ``filterfalse(isnan, ...)``, a stable BCE
  by ``torch.nn.modules.Module``, and IoU metrics by ``&``/``|`` of masks and
  ``float(intersection)``.
- ArcFace, CosFace and SphereFace heads written here in the style of
  ronghuaiyang/arcface-pytorch, with a focal loss, over a small embedder of random features:
  ``Parameter(torch.FloatTensor(n, d))`` filled by ``nn.init.xavier_uniform_`` and the
  deprecated ``xavier_uniform``, ``F.linear(F.normalize(x), F.normalize(w))``,
  ``torch.where(cos > th, shifted, cos - mm)``, ``hot.scatter_(1, labels.view(-1, 1).long(),
  1)`` of ``torch.zeros(size, device='cpu')``, ``out *= s``, Chebyshev lambdas,
  ``Variable(cos.data.acos())``, ``((-1.0) ** k)`` of a tensor, ``torch.norm(x, 2, 1)``,
  overridden ``__repr__``s printed, SGD or Adam over two parameter groups with ``StepLR``
  stepped first, and the accuracy by ``np.argmax`` of ``out.data.cpu().numpy()``.
- a DeepLabV3-style segmenter written here in the style of torchvision's segmentation models
  and reference (a small dilated backbone, in float64): an ``nn.ModuleDict`` subclass taking
  the outputs of named children, ``OrderedDict`` outputs, ``F.interpolate(...,
  mode="bilinear", align_corners=False)``, atrous and image-pooling ``nn.Sequential``
  subclasses (one iterating ``for layer in self`` in its own ``forward``), an auxiliary head
  with ``lr * 10`` in its parameter group, ``cross_entropy(ignore_index=255)``,
  ``PolynomialLR``, ``torch.cuda.amp.autocast(enabled=False)``, and a confusion matrix by
  ``torch.bincount(idx, minlength=n ** 2)`` under ``torch.inference_mode()`` with ``self.mat +=
  ...``; its dropouts set to ``p = 0`` (their masks are each library's own).
- CBAM and BAM written here in the style of Jongchan/attention-module, in a small residual
  network trained a few SGD steps (precision meters, the log compared): a channel gate over
  ``'avg'``, ``'max'``, ``'lp'`` and ``'lse'`` pools (``F.lp_pool2d``, a log-sum-exp),
  ``F.sigmoid(...).unsqueeze(2).unsqueeze(3).expand_as(x)``, ``torch.max(x, 1)[0]``,
  ``nn.Sequential.add_module`` with ``'fc_%d' % i`` names, ``torch.autograd.Variable``, and the
  initialization that writes through the state dict: ``init.kaiming_normal(self.state_dict()[
  key], mode='fan_out')`` and ``self.state_dict()[key][...] = 0`` (the fix below).
- the center loss written here in the style of KaiyangZhou/pytorch-center-loss (a small
  LeNet-like net with ``nn.PReLU``, random images, an argument parser): the distance matrix by
  ``.expand(...).t()`` and the deprecated ``d.addmm_(1, -2, x, centers.t())``,
  ``labels.eq(classes.expand(...))``, ``loss_c *= weight``, two SGD optimizers over one
  backward with the centers' gradients rescaled in place (``param.grad.data *= (1. /
  weight)``, ported as ``param.grad(grads).data *=``), ``StepLR``, ``datetime.timedelta``, and
  the accuracy by ``logits.data.max(1)[1]`` and ``right += (guess == labels.data).sum()``.
- non-local blocks written here in the style of AlexHex7/Non-local_pytorch (1-d, 2-d and 3-d
  blocks, a small digit network, random images, in float64): ``nn.MaxPool1d(kernel_size=(2))``,
  ``nn.MaxPool3d(kernel_size=(1, 2, 2))`` appended by ``nn.Sequential(self.value, pool)``,
  ``nn.init.constant_(self.out[1].weight, 0)``, ``y.view(b, inner, *x.size()[2:])``, returned
  affinity maps, ``self.convs[:4](x)`` and ``self.convs[10:]`` slices of a ``Sequential``, the
  bare calls ``torch.set_grad_enabled(True)``/``(False)`` around the loops, ``sum(losses) /
  losses.__len__()`` of tensors, and ``print(net)`` compared with torch's (the fix below).

Defects found and fixed: ``print(model)`` of a CNN differed from torch's (``tests/
test_real_ports_60.py`` fixed the embeddings and norms): the max pools left out ``dilation`` and
``ceil_mode``, ``AvgPool1d``, ``PixelShuffle``/``PixelUnshuffle``, ``Softplus``, ``Fold`` and
``Unfold`` printed nothing of their arguments, the ``MaxUnpool`` layers printed ints where torch
prints tuples, ``GroupNorm`` left out ``bias=``, ``ConstantPad*d`` its value, the convolutions
``padding_mode`` and the transposed ones ``output_padding``, ``RMSNorm`` its
``elementwise_affine``, and ``Hardshrink``/``Softshrink`` printed ``lambd=`` (torch: the value
alone). ``model.state_dict()[key][...] = 0`` wrote only into the copy (a state-dict value's
NumPy item assignment did not reach the module, where torch's state-dict tensors share its
storage); ``nn.init`` refused a state-dict value (``'StateValue' object has no attribute
'backend'``): both now write through to the parameter or buffer. ``v.std()`` and ``v.var()`` of
a state-dict value were NumPy's (no Bessel correction: ``0.0`` for a single weight where
torch's is ``nan``): they are torch's now, and ``np.std(v)`` keeps NumPy's.

Left as they are: lazy modules print no sizes before their first call (torch prints zeros),
and there is no ``nn.FractionalMaxPool2d``. By earlier design decisions: ``Tensor.nonzero()``
returns Burn's list of per-dimension indices, so the Lovász program's
``valid.nonzero().squeeze()`` asks for torch's form by ``as_tuple=False``.

The lines changed: the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``,
``param.grad(grads)``), the ``import`` lines naming ``torch``, and the one ``nonzero`` above.
"""

from __future__ import annotations

import math
import re
import types

import numpy as np
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

# -- the Lovász losses ----------------------------------------------------------------------------
LOVASZ_SOURCE = """
from itertools import filterfalse
from math import isnan

import torch
from torch import autograd
import torch.nn.functional as nnf

F, Variable = nnf, autograd.Variable


def jaccard_gradient(truth_sorted):
    # the Lovasz extension's gradient of the Jaccard loss along a sorted error order
    total = truth_sorted.sum()
    inter = total - truth_sorted.float().cumsum(0)
    union = total + (1 - truth_sorted).float().cumsum(0)
    jac = 1.0 - inter / union
    n = len(truth_sorted)
    if n > 1:
        jac[1:n] = jac[1:n] - jac[0:-1]
    return jac


def average(values, skip_nan=False, empty=0):
    values = iter(values)
    if skip_nan:
        values = filterfalse(isnan, values)
    try:
        total, count = next(values), 1
    except StopIteration:
        if empty == 'raise':
            raise ValueError('empty mean')
        return empty
    for count, v in enumerate(values, 2):
        total += v
    return total / count if count > 1 else total


def binary_iou(pred, truth, void=None, per_image=True):
    pairs = zip(pred, truth) if per_image else [(pred, truth)]
    scores = []
    for p, t in pairs:
        both = ((t == 1) & (p == 1)).sum()
        either = ((t == 1) | ((p == 1) & (t != void))).sum()
        scores.append(float(both) / float(either) if either else 1.0)
    return 100 * average(scores)


def class_iou(pred, truth, n_classes, void=None, per_image=False):
    pairs = zip(pred, truth) if per_image else [(pred, truth)]
    per = []
    for p, t in pairs:
        row = []
        for c in range(n_classes):
            both = ((t == c) & (p == c)).sum()
            either = ((t == c) | ((p == c) & (t != void))).sum()
            row.append(float(both) / float(either) if either else float('nan'))
        per.append(row)
    return [100 * average(col, skip_nan=True) for col in zip(*per)]


def hinge_flat(logits, truth):
    if len(truth) == 0:
        return logits.sum() * 0.0
    signs = 2.0 * truth.float() - 1.0
    errors = 1.0 - logits * Variable(signs)
    errors_sorted, order = torch.sort(errors, dim=0, descending=True)
    return torch.dot(F.relu(errors_sorted), Variable(jaccard_gradient(truth[order.data])))


def drop_void(scores, truth, void):
    scores, truth = scores.view(-1), truth.view(-1)
    if void is None:
        return scores, truth
    keep = truth != void
    return scores[keep], truth[keep]


def lovasz_hinge(logits, truth, per_image=True, void=None):
    if per_image:
        pairs = zip(logits, truth)
        return average(hinge_flat(*drop_void(a[None], b[None], void)) for a, b in pairs)
    return hinge_flat(*drop_void(logits, truth, void))


def softmax_flat(probas, truth, classes='present'):
    if probas.numel() == 0:
        return probas * 0.0
    n = probas.size(1)
    losses = []
    for c in (list(range(n)) if classes in ('all', 'present') else classes):
        hit = (truth == c).float()
        if classes == 'present' and hit.sum() == 0:
            continue
        p_c = probas[:, 0] if n == 1 else probas[:, c]  # (n == 1: one sigmoid map)
        errors = (Variable(hit) - p_c).abs()
        errors_sorted, order = torch.sort(errors, 0, descending=True)
        losses.append(torch.dot(errors_sorted, Variable(jaccard_gradient(hit[order.data]))))
    return average(losses)


def flat_probas(probas, truth, void=None):
    if probas.dim() == 3:  # sigmoid output: one channel
        b, h, w = probas.size()
        probas = probas.view(b, 1, h, w)
    b, c, h, w = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, c)
    truth = truth.view(-1)
    if void is None:
        return probas, truth
    valid = truth != void
    return probas[valid.nonzero().squeeze()], truth[valid]


def lovasz_softmax(probas, truth, classes='present', per_image=False, void=None):
    if per_image:
        flat = (flat_probas(p.unsqueeze(0), t.unsqueeze(0), void) for p, t in zip(probas, truth))
        return average(softmax_flat(*f, classes=classes) for f in flat)
    return softmax_flat(*flat_probas(probas, truth, void), classes=classes)


class StableBCE(torch.nn.modules.Module):
    def forward(self, logits, target):
        neg_abs = -logits.abs()
        return (logits.clamp(min=0) - logits * target + (1 + neg_abs.exp()).log()).mean()


def binary_xent(logits, truth, void=None):
    logits, truth = drop_void(logits, truth, void)
    return StableBCE()(logits, Variable(truth.float()))


import torch.nn as nn


class TinySegmenter(nn.Module):
    def __init__(self, n_out):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, n_out, 1))

    def forward(self, x):
        return self.body(x)


def train_binary(images, truth, steps):
    net = TinySegmenter(1)
    initialize(net)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(steps):
        logits = net(images).squeeze(1)
        loss = lovasz_hinge(logits, truth, void=255) + lovasz_hinge(logits, truth, per_image=False)
        loss = loss + binary_xent(logits, truth, void=255)
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
        record.append(binary_iou((logits > 0).long(), truth, void=255))
        record.append(binary_iou((logits > 0).long(), truth, void=255, per_image=False))


def train_multiclass(images, truth, steps):
    net = TinySegmenter(4)
    initialize(net)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    for _ in range(steps):
        logits = net(images)
        probas = F.softmax(logits, dim=1)
        loss = lovasz_softmax(probas, truth, void=255)
        loss = loss + lovasz_softmax(probas, truth, classes='all', per_image=True, void=255)
        loss = loss + lovasz_softmax(probas, truth, classes=[1, 3])
        loss = loss + lovasz_softmax(torch.sigmoid(logits[:, 2]), (truth == 2).long(), classes=[1])
        loss = loss + 0.1 * F.cross_entropy(logits, truth, ignore_index=255)
        opt.zero_grad()
        loss.backward()
        opt.step()
        record.append(loss.item())
        record.append(class_iou(logits.argmax(1), truth, 4, void=255))
        record.append(class_iou(logits.argmax(1), truth, 4, void=255, per_image=True))
    record.append(average([1.0, float('nan'), 3.0], skip_nan=True))
    record.append({k: p.detach().numpy().copy() for k, p in net.named_parameters()})
"""

LOVASZ_STEPS = [
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
    (
        "import torch\nfrom torch import autograd\n",
        "import retrograd as torch\nfrom retrograd import autograd\n",
    ),
    ("import torch.nn.functional as nnf\n", "import retrograd.nn.functional as nnf\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    # retrograd's Tensor.nonzero() keeps Burn's list of per-dimension indices (an earlier
    # design decision, CHANGELOG): torch's [count, ndim] form is asked for by name
    ("probas[valid.nonzero().squeeze()]", "probas[valid.nonzero(as_tuple=False).squeeze()]"),
]


def test_lovasz_losses_train_as_torch():
    rng = np.random.default_rng(1501)
    images = rng.standard_normal((2, 3, 6, 6))
    labels = rng.integers(0, 4, (2, 6, 6))
    labels[0][labels[0] == 3] = 1  # class 3 only in the second image ("present" per image)
    labels[:, 0, :2] = 255  # void pixels
    binary = (images[:, 0] + 0.3 * rng.standard_normal((2, 6, 6)) > 0).astype(np.int64)
    binary[1, 2:4, 1] = 255
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = LOVASZ_SOURCE if lib is torch else port(LOVASZ_SOURCE, LOVASZ_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["train_binary"](lib.tensor(images, dtype=lib.float32), lib.tensor(binary), 3)
        names["train_multiclass"](lib.tensor(images, dtype=lib.float32), lib.tensor(labels), 3)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)


# -- ArcFace, CosFace, SphereFace -----------------------------------------------------------------
ARCFACE_SOURCE = """
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable as Wrap
from torch.nn import Parameter as P
from torch.optim.lr_scheduler import StepLR as StepDecay

F = nn.functional


def cosines(features, weight):
    return F.linear(F.normalize(features), F.normalize(weight))


def one_hot_like(scores, labels):
    hot = torch.zeros(scores.size(), device='cpu')
    hot.scatter_(1, labels.view(-1, 1).long(), 1)
    return hot


class AngularMargin(nn.Module):
    # ArcFace: the true class's logit is s cos(theta + m)
    def __init__(self, d, n, s=30.0, m=0.5, easy=False):
        super().__init__()
        self.s, self.m, self.easy = s, m, easy
        self.weight = P(torch.FloatTensor(n, d))
        nn.init.xavier_uniform_(self.weight, gain=1)
        self.threshold = math.cos(math.pi - m)
        self.fallback = math.sin(math.pi - m) * m

    def forward(self, x, labels):
        cos = cosines(x, self.weight)
        sin = torch.sqrt((1.0 - torch.pow(cos, 2)).clamp(0, 1))
        shifted = cos * math.cos(self.m) - sin * math.sin(self.m)
        if self.easy:
            shifted = torch.where(cos > 0, shifted, cos)
        else:  # beyond pi - m the shift would not be monotone: a linear fallback
            shifted = torch.where(cos > self.threshold, shifted, cos - self.fallback)
        hot = one_hot_like(cos, labels)
        out = hot * shifted + (1.0 - hot) * cos
        out *= self.s
        return out


class CosineMargin(nn.Module):
    # CosFace: s (cos(theta) - m) for the true class
    def __init__(self, d, n, s=30.0, m=0.35):
        super().__init__()
        self.d, self.n, self.s, self.m = d, n, s, m
        self.weight = P(torch.FloatTensor(n, d))
        nn.init.xavier_uniform_(self.weight, gain=1.0)

    def forward(self, x, labels):
        cos = cosines(x, self.weight)
        hot = one_hot_like(cos, labels)
        out = hot * (cos - self.m) + (1.0 - hot) * cos
        out *= self.s
        return out

    def __repr__(self):
        return 'CosineMargin(d={}, n={}, s={}, m={})'.format(self.d, self.n, self.s, self.m)


class MultiplicativeMargin(nn.Module):
    # SphereFace: cos(m theta) by Chebyshev polynomials, annealed in by a shrinking lambda
    def __init__(self, d, n, m=4):
        super().__init__()
        self.d, self.n, self.m, self.calls = d, n, m, 0
        self.weight = P(torch.FloatTensor(n, d))
        nn.init.xavier_uniform(self.weight)  # (the deprecated spelling)
        self.chebyshev = [
            lambda c: c ** 0,
            lambda c: c ** 1,
            lambda c: 2 * c ** 2 - 1,
            lambda c: 4 * c ** 3 - 3 * c,
            lambda c: 8 * c ** 4 - 8 * c ** 2 + 1,
        ]

    def forward(self, x, labels):
        self.calls += 1
        lam = max(5.0, 1000.0 * (1 + 0.12 * self.calls) ** -1)
        cos = cosines(x, self.weight).clamp(-1, 1)
        theta = Wrap(cos.data.acos())
        k = (self.m * theta / math.pi).floor()
        psi = ((-1.0) ** k) * self.chebyshev[self.m](cos) - 2 * k
        hot = torch.zeros(cos.size())
        hot.scatter_(1, labels.view(-1, 1), 1)
        out = hot * (psi - cos) / (1 + lam) + cos
        out *= torch.norm(x, 2, 1).view(-1, 1)
        return out

    def __repr__(self):
        return 'MultiplicativeMargin(d=%d, n=%d, m=%d)' % (self.d, self.n, self.m)


class Focal(nn.Module):
    def __init__(self, gamma=0.0):
        super().__init__()
        self.gamma = gamma
        self.ce = nn.CrossEntropyLoss()

    def forward(self, logits, target):
        logp = self.ce(logits, target)
        return ((1 - torch.exp(-logp)) ** self.gamma * logp).mean()


class Embedder(nn.Module):
    def __init__(self, n_in, d):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_in, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, d)
        )

    def forward(self, x):
        return self.net(x)


def train(cfg, loader):
    criterion = Focal(gamma=2) if cfg.loss == 'focal' else nn.CrossEntropyLoss()
    model = Embedder(cfg.n_in, 8)
    n = cfg.classes
    heads = {'arc': lambda: AngularMargin(8, n, easy=cfg.easy), 'cos': lambda: CosineMargin(8, n),
             'sphere': lambda: MultiplicativeMargin(8, n)}
    head = heads[cfg.metric]()
    print(head)
    initialize(model)
    initialize(head)
    groups = [{'params': model.parameters()}, {'params': head.parameters()}]
    if cfg.optimizer == 'sgd':
        opt = torch.optim.SGD(groups, lr=cfg.lr, weight_decay=5e-4)
    else:
        opt = torch.optim.Adam(groups, lr=cfg.lr, weight_decay=5e-4)
    schedule = StepDecay(opt, step_size=2, gamma=0.1)
    start = time.time()
    for epoch in range(3):
        schedule.step()  # (before the optimizer, as that loop does)
        model.train()
        for i, (x, labels) in enumerate(loader):
            labels = labels.long()
            out = head(model(x), labels)
            loss = criterion(out, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if (epoch * len(loader) + i) % 2 == 0:
                guess = np.argmax(out.data.cpu().numpy(), axis=1)
                acc = np.mean((guess == labels.data.cpu().numpy()).astype(int))
                speed = 2 / (time.time() - start + 1e-9)
                print('{} epoch {} step {} {} steps/s loss {} acc {}'.format(
                    time.asctime(), epoch, i, speed, loss.item(), acc))
                start = time.time()
            record.append(loss.item())
        both = list(model.named_parameters()) + list(head.named_parameters())
        record.append({name: p.detach().numpy().copy() for name, p in both})
"""

ARCFACE_STEPS = [
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


class Config:
    """The options the loop reads (small sizes)."""

    def __init__(self, **options):
        self.loss, self.easy, self.optimizer, self.classes, self.n_in, self.lr = (
            "focal",
            False,
            "sgd",
            5,
            6,
            0.1,
        )
        self.__dict__.update(options)


def _arcface_data(lib, rng):
    x = rng.standard_normal((12, 6)).astype(np.float32)
    y = rng.integers(0, 5, 12)
    dataset = lib.utils.data.TensorDataset(lib.tensor(x), lib.tensor(y))
    return lib.utils.data.DataLoader(dataset, batch_size=4, shuffle=False)


def test_arcface_margins_train_as_torch(capsys):
    options = [
        {"metric": "arc"},
        {"metric": "arc", "easy": True, "loss": "ce"},
        {"metric": "cos", "optimizer": "adam", "lr": 0.01},
        {"metric": "sphere", "loss": "ce"},
    ]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            ARCFACE_SOURCE if lib is torch else ported_imports(port(ARCFACE_SOURCE, ARCFACE_STEPS))
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        for i, option in enumerate(options):
            names["train"](Config(**option), _arcface_data(lib, np.random.default_rng(i)))
        records.append(record)
        out = capsys.readouterr().out
        logs.append(re.sub(r".* epoch (.*) \S+ steps/s", r"(time) epoch \1 (speed) steps/s", out))
    assert logs[0].count(" epoch ") == 4 * 5
    mine, theirs = logs[1].splitlines(), logs[0].splitlines()
    assert len(mine) == len(theirs)
    # the losses in the log to the parameters' tolerance, the rest (the heads' reprs) exactly
    for a, b in zip(mine, theirs):
        pattern = r"loss (\S+) acc"
        assert re.sub(pattern, "", a) == re.sub(pattern, "", b)
        if "loss" in b:
            np.testing.assert_allclose(
                float(re.search(pattern, a)[1]), float(re.search(pattern, b)[1]), rtol=1e-4
            )
    # the first linear layer's bias comes before a batch norm, which removes it: its true
    # gradient is 0, and Adam's steps follow the rounding noise of each library
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=5e-5, skip=("net.0.bias",))


# -- torchvision's DeepLabV3 ----------------------------------------------------------------------
DEEPLAB_SOURCE = """
import collections

import torch
from torch import nn

F = nn.functional


class TapLayers(nn.ModuleDict):
    # runs a backbone's children in order, keeping the outputs of the named ones
    def __init__(self, backbone, taps):
        wanted, kept = dict(taps), collections.OrderedDict()
        for name, child in backbone.named_children():
            kept[name] = child
            wanted.pop(name, None)
            if not wanted:
                break
        super().__init__(kept)
        self.taps = dict(taps)

    def forward(self, x):
        out = collections.OrderedDict()
        for name, child in self.items():
            x = child(x)
            if name in self.taps:
                out[self.taps[name]] = x
        return out


class Segmenter(nn.Module):
    def __init__(self, backbone, head, aux_head=None):
        super().__init__()
        self.backbone, self.head, self.aux_head = backbone, head, aux_head

    def forward(self, x):
        size = x.shape[-2:]
        feats = self.backbone(x)
        out = collections.OrderedDict()
        up = dict(size=size, mode="bilinear", align_corners=False)
        out["out"] = F.interpolate(self.head(feats["out"]), **up)
        if self.aux_head is not None:
            aux = self.aux_head(feats["aux"])
            out["aux"] = F.interpolate(aux, **up)
        return out


class AtrousConv(nn.Sequential):
    def __init__(self, c_in, c_out, rate):
        super().__init__(nn.Conv2d(c_in, c_out, 3, padding=rate, dilation=rate, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU())


class ImagePool(nn.Sequential):
    def __init__(self, c_in, c_out):
        super().__init__(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c_in, c_out, 1, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU())

    def forward(self, x):
        size = x.shape[-2:]
        for layer in self:
            x = layer(x)
        return F.interpolate(x, size, mode="bilinear", align_corners=False)


class PyramidPooling(nn.Module):
    def __init__(self, c_in, rates, c_out=8):
        super().__init__()
        one = nn.Sequential(nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())
        branches = [one]
        branches += [AtrousConv(c_in, c_out, r) for r in rates] + [ImagePool(c_in, c_out)]
        self.branches = nn.ModuleList(branches)
        self.project = nn.Sequential(nn.Conv2d(len(branches) * c_out, c_out, 1, bias=False),
                                     nn.BatchNorm2d(c_out), nn.ReLU(), nn.Dropout(0.5))

    def forward(self, x):
        return self.project(torch.cat([b(x) for b in self.branches], dim=1))


def deeplab_head(c_in, classes, rates):
    return nn.Sequential(PyramidPooling(c_in, rates), nn.Conv2d(8, 8, 3, padding=1, bias=False),
                         nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, classes, 1))


def plain_head(c_in, classes):
    mid = c_in // 4
    return nn.Sequential(
        nn.Conv2d(c_in, mid, 3, padding=1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
        nn.Dropout(0.1), nn.Conv2d(mid, classes, 1),
    )


class Confusion:
    def __init__(self, n):
        self.n, self.mat = n, None

    def update(self, truth, guess):
        n = self.n
        if self.mat is None:
            self.mat = torch.zeros((n, n), dtype=torch.int64, device=truth.device)
        with torch.inference_mode():
            ok = (truth >= 0) & (truth < n)  # (void pixels, 255, drop out here)
            cells = n * truth[ok].to(torch.int64) + guess[ok]
            self.mat += torch.bincount(cells, minlength=n ** 2).reshape(n, n)

    def __str__(self):
        h = self.mat.float()
        iou = torch.diag(h) / (h.sum(1) + h.sum(0) - torch.diag(h))
        overall = (torch.diag(h).sum() / h.sum()).item() * 100
        per_class = [f"{v:.1f}" for v in (iou * 100).tolist()]
        return "pixel accuracy {:.1f}, IoU {}, mean IoU {:.1f}".format(
            overall, per_class, iou.mean().item() * 100)


def loss_of(outputs, target):
    parts = {k: F.cross_entropy(v, target, ignore_index=255) for k, v in outputs.items()}
    return parts["out"] + 0.5 * parts["aux"] if "aux" in parts else parts["out"]


def conv_bn(c_in, c_out, stride=1, dilation=1):
    conv = nn.Conv2d(c_in, c_out, 3, stride, padding=dilation, dilation=dilation, bias=False)
    return nn.Sequential(conv, nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


def main(images, targets, epochs, aux=True):
    backbone = nn.Sequential(collections.OrderedDict([
        ("stem", conv_bn(3, 8, stride=2)),
        ("stage1", conv_bn(8, 16, stride=2)),
        ("stage2", conv_bn(16, 16, dilation=2)),
        ("stage3", conv_bn(16, 24, dilation=4)),
        ("unused", nn.Linear(24, 10)),  # (past the last tap: dropped)
    ]))
    taps = {"stage3": "out", "stage2": "aux"} if aux else {"stage3": "out"}
    model = Segmenter(TapLayers(backbone, taps), deeplab_head(24, 3, (1, 2)),
                      plain_head(16, 3) if aux else None).double()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0  # (the masks would be each library's own)
    initialize(model)
    data = torch.utils.data.TensorDataset(images, targets)
    train = torch.utils.data.DataLoader(data, batch_size=2, shuffle=False, drop_last=True)
    test = torch.utils.data.DataLoader(data, batch_size=1)
    groups = [{"params": [p for p in model.backbone.parameters() if p.requires_grad]},
              {"params": [p for p in model.head.parameters() if p.requires_grad]}]
    if aux:
        groups.append({"params": list(model.aux_head.parameters()), "lr": 0.1})
    opt = torch.optim.SGD(groups, lr=0.01, momentum=0.9, weight_decay=1e-4)
    steps = len(train) * epochs
    schedule = torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=steps, power=0.9)
    for epoch in range(epochs):
        model.train()
        for x, y in train:
            with torch.cuda.amp.autocast(enabled=False):
                loss = loss_of(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            record.append(loss.item())
            record.append(opt.param_groups[0]["lr"])
        model.eval()
        scores = Confusion(3)
        with torch.inference_mode():
            for x, y in test:
                scores.update(y.flatten(), model(x)["out"].argmax(1).flatten())
        print(scores)
        record.append(scores.mat.numpy().copy())
    record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
    record.append({k: v.numpy().copy() for k, v in model.named_buffers()})
"""

DEEPLAB_STEPS = [
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
]


def test_torchvision_deeplabv3_trains_as_torch(capsys):
    rng = np.random.default_rng(1503)
    images = rng.standard_normal((2, 3, 8, 8))
    targets = rng.integers(0, 3, (2, 8, 8))
    targets[:, :2, :3] = 255  # void pixels
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPLAB_SOURCE if lib is torch else port(DEEPLAB_SOURCE, DEEPLAB_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](lib.tensor(images), lib.tensor(targets), 2)
        names["main"](lib.tensor(images), lib.tensor(targets), 1, aux=False)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert "mean IoU" in logs[0]
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)


# -- CBAM and BAM ---------------------------------------------------------------------------------
CBAM_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import init

F = nn.functional


def pooled(x, how):
    # one value per channel: average, max, L2 (lp, p = 2) or log-sum-exp over the map
    window = (x.size(2), x.size(3))
    if how == 'avg':
        return F.avg_pool2d(x, window, stride=window)
    if how == 'max':
        return F.max_pool2d(x, window, stride=window)
    if how == 'lp':
        return F.lp_pool2d(x, 2, window, stride=window)
    flat = x.view(x.size(0), x.size(1), -1)
    top, _ = torch.max(flat, dim=2, keepdim=True)
    return top + (flat - top).exp().sum(dim=2, keepdim=True).log()


class ChannelAttention(nn.Module):
    def __init__(self, c, squeeze=4, pools=('avg', 'max')):
        super().__init__()
        self.pools = pools
        mid = c // squeeze
        self.mlp = nn.Sequential(nn.Flatten(), nn.Linear(c, mid), nn.ReLU(), nn.Linear(mid, c))

    def forward(self, x):
        total = sum(self.mlp(pooled(x, how)) for how in self.pools)
        return x * F.sigmoid(total).unsqueeze(2).unsqueeze(3).expand_as(x)


class SpatialAttention(nn.Module):
    def __init__(self, k=5):
        super().__init__()
        self.conv = nn.Conv2d(2, 1, k, padding=(k - 1) // 2, bias=False)
        self.bn = nn.BatchNorm2d(1, eps=1e-5, momentum=0.01)

    def forward(self, x):
        summary = torch.cat((torch.max(x, 1)[0].unsqueeze(1), torch.mean(x, 1).unsqueeze(1)), dim=1)
        return x * F.sigmoid(self.bn(self.conv(summary)))


class Bottleneck(nn.Module):
    # BAM: 1 + sigmoid(channel branch + spatial branch), at a stage boundary
    def __init__(self, c, squeeze=4, rate=2):
        super().__init__()
        self.channel = nn.Sequential()
        self.channel.add_module('flat', nn.Flatten())
        self.channel.add_module('fc_%d' % 0, nn.Linear(c, c // squeeze))
        self.channel.add_module('bn_%d' % 0, nn.BatchNorm1d(c // squeeze))
        self.channel.add_module('relu_%d' % 0, nn.ReLU())
        self.channel.add_module('fc_out', nn.Linear(c // squeeze, c))
        self.spatial = nn.Sequential()
        self.spatial.add_module('conv_in', nn.Conv2d(c, c // squeeze, 1))
        self.spatial.add_module('bn_in', nn.BatchNorm2d(c // squeeze))
        self.spatial.add_module('relu_in', nn.ReLU())
        dilated = nn.Conv2d(c // squeeze, c // squeeze, 3, padding=rate, dilation=rate)
        self.spatial.add_module('conv_dilated', dilated)
        self.spatial.add_module('conv_out', nn.Conv2d(c // squeeze, 1, 1))

    def forward(self, x):
        along_c = self.channel(F.avg_pool2d(x, x.size(2), stride=x.size(2)))
        along_c = along_c.unsqueeze(2).unsqueeze(3).expand_as(x)
        return x * (1 + F.sigmoid(along_c * self.spatial(x).expand_as(x)))


class Residual(nn.Module):
    def __init__(self, c_in, c_out, stride=1, attend=False, pools=('avg', 'max')):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.skip = None
        if stride != 1 or c_in != c_out:
            down = nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False)
            self.skip = nn.Sequential(down, nn.BatchNorm2d(c_out))
        self.channel = ChannelAttention(c_out, pools=pools) if attend else None
        self.SpatialGate = SpatialAttention() if attend else None

    def forward(self, x):
        out = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        if self.channel is not None:
            out = self.SpatialGate(self.channel(out))
        return F.relu(out + (x if self.skip is None else self.skip(x)))


class AttentionResNet(nn.Module):
    def __init__(self, kind, classes=6):
        super().__init__()
        cbam = kind == 'CBAM'
        self.conv0 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(8)
        self.bam = Bottleneck(8) if kind == 'BAM' else None
        self.stage1 = nn.Sequential(Residual(8, 8, attend=cbam, pools=('avg', 'max', 'lp', 'lse')),
                                    Residual(8, 8, attend=cbam))
        self.stage2 = Residual(8, 16, stride=2, attend=cbam)
        self.fc = nn.Linear(16, classes)
        init.kaiming_normal(self.fc.weight)  # (the deprecated spelling)
        for name in self.state_dict():  # initialised through the state dict's tensors
            kind_of = name.split('.')[-1]
            if kind_of == 'weight' and 'conv' in name:
                init.kaiming_normal(self.state_dict()[name], mode="fan_out")
            elif kind_of == 'weight' and 'bn' in name:
                self.state_dict()[name][...] = 0 if 'SpatialGate' in name else 1
            elif kind_of == 'bias':
                self.state_dict()[name][...] = 0.0

    def forward(self, x):
        x = F.relu(self.bn0(self.conv0(x)))
        if self.bam is not None:
            x = self.bam(x)
        x = F.avg_pool2d(self.stage2(self.stage1(x)), 4)
        return self.fc(x.view(x.size(0), -1))


class Meter:
    def __init__(self):
        self.last, self.total, self.n = 0, 0, 0

    def add(self, value, n=1):
        self.last, self.total, self.n = value, self.total + value * n, self.n + n

    @property
    def mean(self):
        return self.total / self.n


def top_k(scores, labels, ks=(1,)):
    _, best = scores.topk(max(ks), 1, True, True)
    hits = best.t().eq(labels.view(1, -1).expand_as(best.t()))
    share = 100.0 / labels.size(0)
    return [hits[:k].reshape(-1).float().sum(0, keepdim=True).mul_(share) for k in ks]


def main(kind, images, labels, epochs):
    model = AttentionResNet(kind)
    state = model.state_dict()
    inits.append({k: state[k].numpy().copy() for k in state if 'bn' in k or k.endswith('bias')})
    inits.append({k: (state[k].numel(), float(state[k].float().std())) for k in state
                  if 'conv' in k and k.endswith('weight')})
    initialize(model)
    xent = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, weight_decay=1e-4, momentum=0.9)
    pairs = torch.utils.data.TensorDataset(images, labels)
    loader = torch.utils.data.DataLoader(pairs, batch_size=2)
    for epoch in range(epochs):
        losses, top1, top3 = Meter(), Meter(), Meter()
        model.train()
        for i, (x, y) in enumerate(loader):
            out = model(torch.autograd.Variable(x))
            loss = xent(out, torch.autograd.Variable(y))
            p1, p3 = top_k(out.data, y, ks=(1, 3))
            losses.add(loss.item(), x.size(0))
            top1.add(p1[0], x.size(0))
            top3.add(p3[0], x.size(0))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            shown = (losses.last, losses.mean, float(top1.last), float(top1.mean),
                     float(top3.last), float(top3.mean))
            print(('epoch {} [{}/{}]\\tloss {:.4f} ({:.4f})\\ttop1 {:.3f} ({:.3f})'
                   '\\ttop3 {:.3f} ({:.3f})').format(epoch, i, len(loader), *shown))
            record.append(loss.item())
    record.append({k: p.detach().numpy().copy() for k, p in model.named_parameters()})
"""

CBAM_STEPS = [
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_cbam_and_bam_resnets_train_as_torch(capsys):
    rng = np.random.default_rng(1504)
    images = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    targets = rng.integers(0, 6, 4)
    records, inits, logs = [], [], []
    initialize = initializer()
    for lib in (torch, rg):
        record, init = [], []
        text = CBAM_SOURCE if lib is torch else ported_imports(port(CBAM_SOURCE, CBAM_STEPS))
        names = run_source(text, lib, record=record, inits=init, initialize=initialize)
        for kind in ("CBAM", "BAM"):
            names["main"](kind, lib.tensor(images), lib.tensor(targets), 2)
        records.append(record)
        inits.append(init)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("epoch ") == 8
    number = r"-?\d+\.\d+"
    assert re.sub(number, "x", logs[1]) == re.sub(number, "x", logs[0])
    np.testing.assert_allclose(  # the printed losses and precisions, to their last digit
        np.array(re.findall(number, logs[1]), float),
        np.array(re.findall(number, logs[0]), float),
        atol=2e-3,
    )
    # the values written through the state dict, exactly; the random ones by their spread
    assert_records_agree(inits[1][0::2], inits[0][0::2], rtol=0, atol=0)
    assert any(np.all(v == 0) for k, v in inits[0][0].items() if "SpatialGate.bn" in k)
    for std_mine, std_theirs in zip(inits[1][1::2], inits[0][1::2], strict=True):
        assert list(std_mine) == list(std_theirs)
        for name, (numel, std) in std_theirs.items():
            mine = std_mine[name][1]
            if numel >= 256:
                assert abs(mine - std) < 0.3 * std, name
            else:  # (nan: the std of a single weight, as torch's)
                assert np.isnan(mine) == np.isnan(std), name
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- non-local neural networks --------------------------------------------------------------------
NON_LOCAL_SOURCE = """
import time

import torch
from torch import nn

F = nn.functional


class NonLocal(nn.Module):
    # every position attends to every other (embedded Gaussian affinity); the output joins
    # the input through W, zero-initialised so a new block starts as the identity
    def __init__(self, c, inner=None, dims=2, pool=True, norm=True):
        super().__init__()
        inner = inner or max(c // 2, 1)
        self.inner = inner
        conv = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}[dims]
        shrink = {1: nn.MaxPool1d(kernel_size=(2)), 2: nn.MaxPool2d(kernel_size=(2, 2)),
                  3: nn.MaxPool3d(kernel_size=(1, 2, 2))}[dims]
        batch_norm = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}[dims]
        self.value = conv(c, inner, 1)
        self.query = conv(c, inner, 1)
        self.key = conv(c, inner, 1)
        if norm:
            self.out = nn.Sequential(conv(inner, c, 1), batch_norm(c))
            nn.init.constant_(self.out[1].weight, 0)
            nn.init.constant_(self.out[1].bias, 0)
        else:
            self.out = conv(inner, c, 1)
            nn.init.constant_(self.out.weight, 0)
            nn.init.constant_(self.out.bias, 0)
        if pool:  # fewer keys and values: the same pool after both
            self.value = nn.Sequential(self.value, shrink)
            self.key = nn.Sequential(self.key, shrink)

    def forward(self, x, with_map=False):
        b = x.size(0)
        v = self.value(x).view(b, self.inner, -1).permute(0, 2, 1)
        q = self.query(x).view(b, self.inner, -1).permute(0, 2, 1)
        k = self.key(x).view(b, self.inner, -1)
        affinity = F.softmax(torch.matmul(q, k), dim=-1)
        y = torch.matmul(affinity, v).permute(0, 2, 1).contiguous()
        z = self.out(y.view(b, self.inner, *x.size()[2:])) + x
        return (z, affinity) if with_map else z


class DigitNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            NonLocal(8),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            NonLocal(16),
            nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.fc = nn.Sequential(
            nn.Linear(16 * 2 * 2, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10)
        )

    def forward(self, x):
        return self.fc(self.convs(x).view(x.size(0), -1))

    def forward_with_maps(self, x):
        h = self.convs[:4](x)
        h, first = self.convs[4](h, with_map=True)
        h = self.convs[5:9](h)
        h, second = self.convs[9](h, with_map=True)
        return self.fc(self.convs[10:](h).view(x.size(0), -1)), [first, second]


def main(train_batches, test_batches):
    net = DigitNet().double()
    net.fc[2].p = 0.0  # (its masks would be each library's own)
    initialize(net)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    xent = torch.nn.CrossEntropyLoss()
    print(net)
    for epoch in range(2):
        started = time.time()
        torch.set_grad_enabled(True)
        net.train()
        for images, labels in train_batches:
            loss = xent(net(images), labels)
            net.zero_grad()
            loss.backward()
            opt.step()
            record.append(loss.item())
        print('lr %f, epoch took %.4fs' % (opt.param_groups[0]['lr'], time.time() - started))
        torch.set_grad_enabled(False)
        net.eval()
        losses, right, seen = [], 0, 0
        for images, labels in test_batches:
            scores = net(images)
            losses.append(xent(scores, labels))
            right += (scores.argmax(1) == labels).sum()
            seen += images.size(0)
        net.train()
        print('test %d: accuracy %.4f%% loss %.4f' % (epoch, right.item() * 100.0 / seen,
                                                     (sum(losses) / losses.__len__()).item()))
    torch.set_grad_enabled(True)
    _, maps = net.forward_with_maps(images)
    record.append({f'map_{i}': m.detach().numpy().copy() for i, m in enumerate(maps)})
    record.append({k: p.detach().numpy().copy() for k, p in net.named_parameters()})


def blocks(x1, x3):
    cases = [(NonLocal(4, dims=1, pool=False), x1), (NonLocal(4, dims=1, norm=False), x1),
             (NonLocal(4, inner=3, dims=3), x3), (NonLocal(4, dims=3, pool=False, norm=False), x3)]
    for block, x in cases:
        print(block)
        block.double()
        initialize(block)
        opt = torch.optim.SGD(block.parameters(), 0.1)
        for step in range(2):
            z, affinity = block(x, with_map=True)
            loss = (z ** 2).mean() + affinity.max(-1)[0].mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            record.append(loss.item())
            record.append({'map': affinity.detach().numpy().copy()})
"""

NON_LOCAL_STEPS = [
    (
        "            net.zero_grad()\n            loss.backward()\n",
        "            net.zero_grad()\n            grads = loss.backward()\n",
    ),
    (
        "            opt.zero_grad()\n            loss.backward()\n",
        "            opt.zero_grad()\n            grads = loss.backward()\n",
    ),
    ("            opt.step()\n", "            opt.step(grads)\n"),
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
]


def test_non_local_blocks_train_as_torch(capsys):
    rng = np.random.default_rng(1506)
    images = rng.uniform(size=(4, 1, 16, 16))
    labels = rng.integers(0, 10, 4)
    x1 = rng.standard_normal((2, 4, 6))
    x3 = rng.standard_normal((2, 4, 2, 4, 4))
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        data = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
        train_loader = lib.utils.data.DataLoader(data, batch_size=2, shuffle=False)
        test_loader = lib.utils.data.DataLoader(data, batch_size=2)
        record = []
        text = NON_LOCAL_SOURCE if lib is torch else port(NON_LOCAL_SOURCE, NON_LOCAL_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](train_loader, test_loader)
        names["blocks"](lib.tensor(x1), lib.tensor(x3))
        assert lib.is_grad_enabled()
        records.append(record)
        logs.append(re.sub(r"took \S+s", "took (time)", capsys.readouterr().out))
    assert logs[0].count("test ") == 2
    number = r"-?\d+\.\d+"
    assert re.sub(number, "x", logs[1]) == re.sub(number, "x", logs[0])  # print(net) as torch's
    np.testing.assert_allclose(
        np.array(re.findall(number, logs[1]), float),
        np.array(re.findall(number, logs[0]), float),
        rtol=1e-3,  # (the test loss, in eval mode, reads running means that carry the noise below)
    )
    # the biases before a batch norm: a true gradient of zero, Adam's steps follow the rounding
    skip = ("convs.0.bias", "convs.5.bias", "convs.10.bias")
    skip += tuple(f"convs.{i}.{name}.bias" for i in (4, 9) for name in ("query",))
    skip += tuple(f"convs.{i}.{name}.0.bias" for i in (4, 9) for name in ("out", "value", "key"))
    assert_records_agree(records[1], records[0], rtol=1e-8, atol=1e-10, skip=skip)


# -- defects found by the ports: writing through a state dict, and its values' std ----------------
def _same_module(lib, numbers):
    layer = lib.nn.Linear(3, 2)
    layer.load_state_dict({k: lib.tensor(v) for k, v in numbers.items()})
    return layer


def test_regression_state_dict_item_assignment_writes_through():
    # CBAM's ResNet initializes by self.state_dict()[key][...] = 1: the assignment changed only
    # the copy (torch's state-dict tensors share the module's storage)
    numbers = {"weight": np.arange(6.0).reshape(2, 3), "bias": np.array([5.0, 6.0])}
    layers = []
    for lib in (torch, rg):
        layer = _same_module(lib, numbers)
        layer.state_dict()["bias"][...] = 0
        layer.state_dict()["weight"][1:] = lib.tensor([7.0, 8.0, 9.0])
        layer.state_dict()["weight"][:, 0] = 2
        mask = lib.tensor([[True, False, True], [False, False, False]])
        layer.state_dict()["weight"][mask] = -1.0
        layers.append({k: np.asarray(v.detach().numpy()) for k, v in layer.named_parameters()})
    for name, value in layers[0].items():
        np.testing.assert_array_equal(layers[1][name], value, err_msg=name)


def test_regression_init_of_a_state_dict_value_writes_through():
    # init.kaiming_normal(self.state_dict()[key], mode='fan_out') raised "'StateValue' object
    # has no attribute 'backend'"
    layer = rg.nn.Conv2d(4, 32, 3)
    before = layer.weight.numpy().copy()
    out = rg.nn.init.kaiming_normal(layer.state_dict()["weight"], mode="fan_out")
    after = layer.weight.numpy()
    assert not np.array_equal(after, before)
    np.testing.assert_array_equal(np.asarray(out), after)
    # He-normal by fan out: std sqrt(2 / (32 * 9)) = 0.083 over 1,152 draws
    assert abs(after.std() - math.sqrt(2 / (32 * 9))) < 0.01
    conv = rg.nn.Conv2d(4, 32, 3)
    rg.nn.init.constant_(conv.state_dict()["bias"], 0.5)
    np.testing.assert_array_equal(conv.bias.numpy(), np.full(32, 0.5, np.float32))
    linear = rg.nn.Linear(3, 3)
    rg.nn.init.eye_(linear.state_dict()["weight"])
    np.testing.assert_array_equal(linear.weight.numpy(), np.eye(3))


def test_regression_state_dict_value_std_is_torchs():
    # v.std() of a state-dict value was NumPy's (no Bessel correction: 0.0 for a single weight,
    # where torch's is nan); np.std(v) keeps NumPy's
    numbers = {"weight": np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]]), "bias": np.array([5.0, 6.0])}
    calls = [
        lambda v: v.std(),
        lambda v: v.var(),
        lambda v: v.std(0),
        lambda v: v.var(1, keepdim=True),
        lambda v: v.std(dim=1, unbiased=False),
        lambda v: v.var(dim=0, correction=0),
    ]
    mine = _same_module(rg, numbers).state_dict()["weight"]
    theirs = _same_module(torch, numbers).state_dict()["weight"]
    for call in calls:
        np.testing.assert_allclose(np.asarray(call(mine)), call(theirs).numpy(), rtol=1e-6)
    single = rg.nn.Linear(1, 1).state_dict()["weight"]
    assert np.isnan(float(single.std())) and np.isnan(float(single.var()))
    np.testing.assert_allclose(np.std(mine), np.std(numbers["weight"]), rtol=1e-6)
    np.testing.assert_allclose(np.var(mine, axis=0), np.var(numbers["weight"], axis=0), rtol=1e-6)


# -- center loss ----------------------------------------------------------------------------------
CENTER_LOSS_SOURCE = """
import argparse
import datetime
import time

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import StepLR as Decay

F = nn.functional


class CenterPull(nn.Module):
    # mean squared distance of each feature to its class's learned center
    def __init__(self, n_classes, dim=2):
        super().__init__()
        self.n_classes = n_classes
        self.centers = nn.Parameter(torch.randn(n_classes, dim))

    def forward(self, feats, labels):
        b = feats.size(0)
        d = torch.pow(feats, 2).sum(dim=1, keepdim=True).expand(b, self.n_classes)
        d = d + torch.pow(self.centers, 2).sum(dim=1, keepdim=True).expand(self.n_classes, b).t()
        d.addmm_(1, -2, feats, self.centers.t())  # (the deprecated beta, alpha form)
        own = labels.unsqueeze(1).expand(b, self.n_classes).eq(
            torch.arange(self.n_classes).long().expand(b, self.n_classes))
        return (d * own.float()).clamp(min=1e-12, max=1e12).sum() / b


class TinyLeNet(nn.Module):
    # convolutions to a 2-d feature (the one the centers live in), then the classifier
    def __init__(self, n_classes):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)])
        self.acts = nn.ModuleList([nn.PReLU(), nn.PReLU()])
        self.embed = nn.Linear(16 * 4 * 4, 2)
        self.act = nn.PReLU()
        self.classify = nn.Linear(2, n_classes)

    def forward(self, x):
        for conv, act in zip(self.convs, self.acts):
            x = F.max_pool2d(act(conv(x)), 2)
        feats = self.act(self.embed(x.view(-1, 16 * 4 * 4)))
        return feats, self.classify(feats)


class Running:
    def __init__(self):
        self.value, self.total, self.count = 0, 0, 0

    def update(self, v, n=1):
        self.value, self.total, self.count = v, self.total + v * n, self.count + n

    @property
    def avg(self):
        return self.total / self.count


parser = argparse.ArgumentParser()
parser.add_argument('--lr-model', type=float, default=0.001)
parser.add_argument('--lr-cent', type=float, default=0.5)
parser.add_argument('--weight-cent', type=float, default=1)
parser.add_argument('--epochs', type=int, default=10)
parser.add_argument('--stepsize', type=int, default=5)
args = parser.parse_args(args=argv)


def fit(model, xent, pull, opt_model, opt_cent, loader):
    model.train()
    total, part_x, part_c = Running(), Running(), Running()
    for i, (images, labels) in enumerate(loader):
        feats, logits = model(images)
        loss_x = xent(logits, labels)
        loss_c = pull(feats, labels)
        loss_c *= args.weight_cent
        loss = loss_x + loss_c
        opt_model.zero_grad()
        opt_cent.zero_grad()
        loss.backward()
        opt_model.step()
        for c in pull.parameters():  # undo the weight: the centers learn at their own rate
            c.grad.data *= 1.0 / args.weight_cent
        opt_cent.step()
        n = labels.size(0)
        total.update(loss.item(), n)
        part_x.update(loss_x.item(), n)
        part_c.update(loss_c.item(), n)
        record.append([loss.item(), loss_x.item(), loss_c.item()])
        print('batch {}/{} loss {:.6f} ({:.6f}) xent {:.6f} center {:.6f}'.format(
            i + 1, len(loader), total.value, total.avg, part_x.avg, part_c.avg))


def evaluate(model, loader):
    model.eval()
    right, seen = 0, 0
    with torch.no_grad():
        for images, labels in loader:
            _, logits = model(images)
            right += (logits.data.max(1)[1] == labels.data).sum()
            seen += labels.size(0)
    acc = right * 100. / seen
    record.append([float(acc), float(100. - acc)])
    return acc


def main():
    model = TinyLeNet(data.n_classes)
    pull = CenterPull(data.n_classes)
    initialize(model)
    initialize(pull)
    opt_model = torch.optim.SGD(
        model.parameters(), lr=args.lr_model, weight_decay=5e-4, momentum=0.9
    )
    opt_cent = torch.optim.SGD(pull.parameters(), lr=args.lr_cent)
    schedule = Decay(opt_model, step_size=args.stepsize, gamma=0.5)
    started = time.time()
    for epoch in range(args.epochs):
        print('epoch {}/{}'.format(epoch + 1, args.epochs))
        fit(model, nn.CrossEntropyLoss(), pull, opt_model, opt_cent, data.train)
        schedule.step()
    print('accuracy (%): {}'.format(float(evaluate(model, data.test))))
    print('done in {}'.format(datetime.timedelta(seconds=round(time.time() - started))))
    both = list(model.named_parameters()) + list(pull.named_parameters())
    record.append({name: p.detach().numpy().copy() for name, p in both})


if __name__ == '__main__':
    main()
"""

CENTER_LOSS_STEPS = [
    (
        "        loss.backward()\n        opt_model.step()\n",
        "        grads = loss.backward()\n        opt_model.step(grads)\n",
    ),
    ("            c.grad.data *= ", "            c.grad(grads).data *= "),
    ("        opt_cent.step()\n", "        opt_cent.step(grads)\n"),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_center_loss_trains_as_torch(capsys):
    rng = np.random.default_rng(1505)
    images = rng.uniform(size=(4, 1, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 5, 4)
    argv = ["--epochs", "2", "--stepsize", "1", "--weight-cent", "0.1", "--lr-model", "0.01"]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        pairs = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
        data = types.SimpleNamespace(
            n_classes=5,
            train=lib.utils.data.DataLoader(pairs, batch_size=2, shuffle=False),
            test=lib.utils.data.DataLoader(pairs, batch_size=2),
        )
        record = []
        text = CENTER_LOSS_SOURCE if lib is torch else port(CENTER_LOSS_SOURCE, CENTER_LOSS_STEPS)
        text = text if lib is torch else ported_imports(text)
        names = {"__name__": "__main__", "argv": argv, "data": data}
        run_source(text, lib, record=record, initialize=initialize, **names)
        records.append(record)
        logs.append(re.sub(r"done in \S+", "done in (time)", capsys.readouterr().out))
    assert logs[0].count("batch ") == 4 and "done in" in logs[0]
    number = r"-?\d+\.\d+"
    mine, theirs = logs
    assert re.sub(number, "x", mine) == re.sub(number, "x", theirs)
    np.testing.assert_allclose(
        np.array(re.findall(number, mine), float),
        np.array(re.findall(number, theirs), float),
        rtol=1e-4,
        atol=1e-5,
    )
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def _printed_layers(lib):
    nn = lib.nn
    return [
        nn.MaxPool1d(2),
        nn.MaxPool2d((2, 2)),
        nn.MaxPool3d(kernel_size=(1, 2, 2)),
        nn.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True, return_indices=True),
        nn.AvgPool1d(3, count_include_pad=False),
        nn.AvgPool1d((2,), 1, 1, True),
        nn.MaxUnpool1d(2),
        nn.MaxUnpool2d(2),
        nn.MaxUnpool3d(2, 1),
        nn.PixelShuffle(2),
        nn.PixelUnshuffle(3),
        nn.GroupNorm(2, 4),
        nn.GroupNorm(2, 4, affine=False),
        nn.Softplus(),
        nn.Softplus(2, 5),
        nn.Fold((4, 4), 2),
        nn.Unfold(3, 2, 1, 2),
        nn.ConstantPad2d(1, 3.5),
        nn.ConstantPad1d((1, 2), 0.0),
        nn.ZeroPad2d(1),
        nn.Hardshrink(),
        nn.Softshrink(0.3),
        nn.Conv2d(2, 4, 3, stride=2, groups=2, padding_mode="reflect"),
        nn.Conv1d(2, 4, 3, padding=1, padding_mode="circular", bias=False),
        nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
        nn.ConvTranspose1d(4, 2, 3, stride=3, output_padding=(2,)),
        nn.RMSNorm(4),
        nn.RMSNorm([2, 4], eps=1e-6, elementwise_affine=False),
    ]


def test_regression_pooling_and_other_reprs_print_as_torchs():
    # print(model) of a CNN differed from torch's: the max pools left out dilation and
    # ceil_mode, AvgPool1d printed nothing (torch: its one-element tuples), MaxUnpool ints
    # (torch: tuples), PixelShuffle/PixelUnshuffle, Softplus, Fold and Unfold nothing, GroupNorm
    # torch 2.13's bias=, ConstantPad its value, Hardshrink/Softshrink "lambd=" (torch: the value
    # alone), the convolutions padding_mode and the transposed ones output_padding, and RMSNorm
    # its elementwise_affine
    for mine, theirs in zip(_printed_layers(rg), _printed_layers(torch), strict=True):
        assert repr(mine) == repr(theirs)
