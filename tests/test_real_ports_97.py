"""Real-port tests (the harness: ``tests/real_ports.py``): a program written here in the style of
wyharveychen/CloserLookFewShot's Baseline++ (a cosine classifier over a small conv encoder,
pretrained, then refitted on one few-shot episode of saved features).

The surface it exercises: fan-in initialisation by ``layer.weight.data.normal_(0, std)`` and
``fill_``; a cosine head built with ``WeightNorm.apply(linear, 'weight', dim=0)`` from
``torch.nn.utils.weight_norm`` that divides by ``torch.norm(x, p=2, dim=1).unsqueeze(1)
.expand_as(x)``; a ``Flatten`` module by ``x.view(x.size(0), -1)``; ``nn.Sequential`` of a list
of ``Conv2d``/``BatchNorm2d``/``ReLU(inplace=True)``/``MaxPool2d``; ``x[:, 0:1, :, :]``;
``Variable``; ``remove_weight_norm``; Adam with its defaults and a ``'{:d} ... {:f}'.format``
log; an episode split by ``contiguous().view(n, *x.size()[2:])``; labels by
``torch.from_numpy(np.repeat(range(n), k))``; SGD with ``momentum=0.9, dampening=0.9,
weight_decay=0.001`` over ``np.random.permutation`` batches indexed by ``torch.from_numpy``;
``scores.data.cpu().numpy().argmax(axis=1)``.

The regression it guards: ``from torch.nn.utils.weight_norm import WeightNorm`` raised
ImportError (the path was an alias of ``nn.utils``, which has only the functions).

The lines the port changes: the ``import`` lines and the gradient lines (``loss.backward()``
returns the gradients, ``step`` takes them). The refitted head gets torch's initial weights by
an ``initialize`` line.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

FEW_SHOT_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
from torch.autograd import Variable as V
from torch.nn.utils.weight_norm import WeightNorm, remove_weight_norm


def fan_in_init(layer):
    # He-style spread for convolutions; norms start as the identity
    if isinstance(layer, nn.Conv2d):
        fan = layer.kernel_size[0] * layer.kernel_size[1] * layer.out_channels
        layer.weight.data.normal_(0, math.sqrt(2.0 / float(fan)))
    elif isinstance(layer, nn.BatchNorm2d):
        layer.weight.data.fill_(1)
        layer.bias.data.fill_(0)


class CosineHead(nn.Module):
    # logits are scaled cosines; the weight-norm gain gives each class a learnable length
    def __init__(self, in_dim, n_classes, scale=3):
        super().__init__()
        self.fc = nn.Linear(in_dim, n_classes, bias=False)
        WeightNorm.apply(self.fc, 'weight', dim=0)
        self.scale = scale

    def forward(self, feats):
        lengths = torch.norm(feats, p=2, dim=1).unsqueeze(1).expand_as(feats)
        return self.scale * self.fc(feats.div(lengths + 1e-5))


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


def conv_stage(c_in, c_out):
    layers = [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out),
              nn.ReLU(inplace=True), nn.MaxPool2d(2)]
    for layer in layers:
        fan_in_init(layer)
    return nn.Sequential(*layers)


class GrayEncoder(nn.Module):
    def __init__(self, width=16, stages=2):
        super().__init__()
        stages = [conv_stage(1 if k == 0 else width, width) for k in range(stages)]
        self.body = nn.Sequential(*stages, Flatten())
        self.feat_dim = width

    def forward(self, images):
        return self.body(images[:, 0:1, :, :])  # grayscale: the first channel only


class Pretrainer(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        self.encoder = GrayEncoder()
        self.head = CosineHead(self.encoder.feat_dim, n_classes)
        self.criterion = nn.CrossEntropyLoss()

    def forward(self, images):
        return self.head(self.encoder(V(images)))

    def fit_epoch(self, epoch, loader, opt):
        running = 0.0
        for step, (images, labels) in enumerate(loader):
            opt.zero_grad()
            loss = self.criterion(self(images), V(labels))
            loss.backward()
            opt.step()
            running += loss.item()
            record.append(loss.item())
        mean = running / float(step + 1)
        print('epoch {:d} | {:d} batches | mean loss {:f}'.format(epoch, len(loader), mean))


def split_episode(episode, n_way, n_shot):
    # (n_way, n_shot + n_query, dim) -> support rows and query rows, class-major
    episode = V(episode)
    support = episode[:, :n_shot].contiguous().view(n_way * n_shot, -1)
    query = episode[:, n_shot:]
    return support, query.contiguous().view(n_way * query.size(1), *episode.size()[2:])


def refit_head(episode, n_way, n_shot, feat_dim):
    support, query = split_episode(episode, n_way, n_shot)
    targets = V(torch.from_numpy(np.repeat(range(n_way), n_shot)))
    clf = CosineHead(feat_dim, n_way)
    initialize(clf)
    sgd = torch.optim.SGD(clf.parameters(), lr=0.05, momentum=0.9, dampening=0.9,
                          weight_decay=0.001)
    ce = nn.CrossEntropyLoss()
    for sweep in range(12):
        order = np.random.permutation(n_way * n_shot)
        for start in range(0, len(order), 4):
            picked = torch.from_numpy(order[start:start + 4])
            sgd.zero_grad()
            loss = ce(clf(support[picked]), targets[picked])
            loss.backward()
            sgd.step()
    record.append(params_of(clf))
    scores = clf(query)
    remove_weight_norm(clf.fc)  # (folds g * v / |v| back into one weight)
    record.append(clf.fc.weight.detach().numpy().copy())
    return scores


model = Pretrainer(n_classes=3)
initialize(model)
opt = torch.optim.Adam(model.parameters())
loader = [(torch.tensor(x), torch.tensor(y)) for x, y in batches]
for epoch in range(2):
    model.train()
    model.fit_epoch(epoch, loader, opt)
record.append(params_of(model.encoder, model.head))

episode = torch.tensor(saved_features)
n_way, n_shot = 3, 2
scores = refit_head(episode, n_way, n_shot, model.encoder.feat_dim)
guess = scores.data.cpu().numpy().argmax(axis=1)
truth = np.repeat(range(n_way), episode.size(1) - n_shot)
record.extend([scores.detach().numpy(), float(np.mean(guess == truth) * 100)])
"""

FEW_SHOT_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
    (
        "            loss.backward()\n            sgd.step()\n",
        "            grads = loss.backward()\n            sgd.step(grads)\n",
    ),
]


def test_cosine_few_shot_pretrains_and_refits_as_torch(capsys):
    rng = np.random.default_rng(9701)
    batches = [
        (rng.standard_normal((6, 3, 4, 4)).astype(np.float32), rng.integers(0, 3, 6))
        for _ in range(2)
    ]
    saved_features = np.abs(rng.standard_normal((3, 4, 16))).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # (WeightNorm.apply's, in both)
        (theirs, ours), logs = runs_with_draws(
            FEW_SHOT_SOURCE,
            FEW_SHOT_STEPS,
            capsys,
            9701,
            batches=batches,
            saved_features=saved_features,
            initialize=initializer(),
            params_of=params_of,
        )
    assert len(theirs) == 2 * 2 + 1 + 2 + 2
    # the convolutions' biases feed batch norms, which subtract them again: their true
    # gradient is zero, so Adam's steps on them follow the rounding noise
    conv_biases = [f"0.body.{k}.0.bias" for k in range(2)]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=conv_biases)
    assert logs[0].count("epoch") == 2
    assert logs[0].splitlines()[0][:30] == logs[1].splitlines()[0][:30]


def test_weight_norm_hook_class_applies_and_removes_as_torch():
    # ``from torch.nn.utils.weight_norm import WeightNorm`` raised ImportError (the path was
    # an alias of ``nn.utils``, which has only the functions)
    from torch.nn.utils.weight_norm import WeightNorm as TorchWeightNorm

    from retrograd.nn.utils.weight_norm import WeightNorm as RgWeightNorm

    rng = np.random.default_rng(9702)
    weight = rng.standard_normal((3, 4)).astype(np.float32)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    results = []
    for lib, hook in ((torch, TorchWeightNorm), (rg, RgWeightNorm)):
        layer = lib.nn.Linear(4, 3, bias=False)
        layer.load_state_dict({"weight": lib.tensor(weight)})
        with pytest.warns(FutureWarning, match="weight_norm` is deprecated"):
            fn = hook.apply(layer, "weight", dim=None)
        assert sorted(name for name, _ in layer.named_parameters()) == ["weight_g", "weight_v"]
        assert tuple(layer.weight_g.shape) == ()
        with lib.no_grad():
            layer.weight_g.mul_(2.0)
        out = layer(lib.tensor(x)).detach().numpy().copy()
        fn.remove(layer)
        results.append((out, layer.weight.detach().numpy().copy()))
        assert [name for name, _ in layer.named_parameters()] == ["weight"]
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.InvalidArgumentError, match="Cannot register two weight_norm"):
        layer = rg.nn.Linear(2, 2)
        with pytest.warns(FutureWarning):
            RgWeightNorm.apply(layer, "weight", 0)
            RgWeightNorm.apply(layer, "weight", 0)
