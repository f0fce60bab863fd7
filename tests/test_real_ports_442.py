"""Real ports, continued (the harness: ``tests/real_ports.py``): deep metric learning with the
Proxy-Anchor loss, a program written here in the style of the Proxy-Anchor (CVPR 2020)
reference code.

Surface: labels one-hot encoded through NumPy and sklearn's ``label_binarize``
(``labels.cpu().numpy()``, back by ``torch.FloatTensor``); row normalization by ``torch.pow``,
``torch.sum(..., 1).add_(1e-12)`` in place on a tracked value and ``torch.div`` by
``norm.view(-1, 1).expand_as(v)``; proxies as ``nn.Parameter(torch.randn(...))`` re-drawn by
``nn.init.kaiming_normal_(..., mode="fan_out")``; ``F.linear`` of normalized embeddings and
proxies, ``torch.nonzero(...).squeeze(dim=1)`` and its ``len``, ``torch.where`` against
``torch.zeros_like``; ``nn.Module.__init__(self)`` and ``super(Class, self).__init__()``, a bare
``nn.Module()`` as a container; param groups built from
``set(net.parameters()).difference(set(...embedding.parameters()))``, one group a single
``Parameter`` at ``lr * 100``; AdamW or nesterov SGD, ``StepLR``; a warm-up setting
``requires_grad`` to ``False`` on the trunk and back to ``True``; BatchNorms frozen by
``m.eval()`` over ``net.model.modules()``; ``x.squeeze()``; ``clip_grad_value_`` of two modules'
parameters; ``loss.data.cpu().numpy()`` and ``np.mean`` of those. The data is a synthetic
loader of CUB-200's layout. The port changes the imports and the gradient lines.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, ported_imports, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    rg.seed(0)


PROXY_ANCHOR_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from sklearn.preprocessing import label_binarize
from torch.nn import functional as F


def unit_rows(v):
    squared = torch.sum(torch.pow(v, 2), 1).add_(1e-12)  # in place, on a tracked value
    return torch.div(v, torch.sqrt(squared).view(-1, 1).expand_as(v))


def one_hot_numpy(labels, n_classes):
    dense = label_binarize(labels.cpu().numpy(), classes=range(n_classes))
    return torch.FloatTensor(dense)


class ProxyAnchorLoss(nn.Module):
    def __init__(self, n_classes, dim, margin=0.1, scale=32):
        nn.Module.__init__(self)
        self.proxies = nn.Parameter(torch.randn(n_classes, dim))
        nn.init.kaiming_normal_(self.proxies, mode="fan_out")
        self.n_classes, self.margin, self.scale = n_classes, margin, scale

    def forward(self, embeddings, labels):
        sim = F.linear(unit_rows(embeddings), unit_rows(self.proxies))
        pos_mask = one_hot_numpy(labels, self.n_classes)
        neg_mask = 1 - pos_mask
        # the proxies with at least one sample of their class in the batch
        present = torch.nonzero(pos_mask.sum(dim=0) != 0).squeeze(dim=1)
        none = torch.zeros_like(sim)
        pull = torch.where(pos_mask == 1, torch.exp(-self.scale * (sim - self.margin)), none)
        push = torch.where(neg_mask == 1, torch.exp(self.scale * (sim + self.margin)), none)
        pos_term = torch.log(1 + pull.sum(dim=0)).sum() / len(present)
        neg_term = torch.log(1 + push.sum(dim=0)).sum() / self.n_classes
        return pos_term + neg_term


class Embedder(nn.Module):
    # a torchvision-style trunk kept under .model, its head at .model.embedding
    def __init__(self, dim, normalize=True):
        super(Embedder, self).__init__()
        self.model = nn.Module()
        self.model.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.model.norm = nn.BatchNorm2d(8)
        self.model.pool = nn.AdaptiveAvgPool2d(1)
        self.model.embedding = nn.Linear(8, dim)
        self.normalize = normalize

    def forward(self, images):
        h = self.model.pool(F.relu(self.model.norm(self.model.stem(images))))
        z = self.model.embedding(h.view(h.size(0), -1))
        return unit_rows(z) if self.normalize else z


def fit(cfg, loader, n_classes, record, initialize):
    net = Embedder(cfg.dim)
    loss_fn = ProxyAnchorLoss(n_classes, cfg.dim, margin=cfg.margin, scale=cfg.scale)
    initialize(net)
    initialize(loss_fn)
    trunk = list(set(net.parameters()).difference(set(net.model.embedding.parameters())))
    groups = [
        {"params": trunk},
        {"params": net.model.embedding.parameters(), "lr": cfg.lr},
        {"params": loss_fn.proxies, "lr": cfg.lr * 100},  # the proxies learn fast
    ]
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=cfg.lr, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.SGD(
            groups, lr=cfg.lr, momentum=0.9, nesterov=True, weight_decay=cfg.weight_decay
        )
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=cfg.decay_every, gamma=cfg.decay)
    epoch_means = []
    for epoch in range(cfg.epochs):
        net.train()
        if cfg.freeze_bn:
            for m in net.model.modules():
                if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                    m.eval()
        # warm-up: only the head and the proxies learn in the first cfg.warm epochs
        if cfg.warm > 0 and epoch in (0, cfg.warm):
            for p in trunk:
                p.requires_grad = epoch == cfg.warm
        batch_losses = []
        for images, labels in loader:
            loss = loss_fn(net(images.squeeze()), labels.squeeze())
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_value_(net.parameters(), 10)
            torch.nn.utils.clip_grad_value_(loss_fn.parameters(), 10)
            batch_losses.append(loss.data.cpu().numpy())
            opt.step()
            record.append(loss.item())
        epoch_means.append(np.mean(batch_losses))
        sched.step()
        named = list(net.named_parameters()) + list(loss_fn.named_parameters())
        record.append({name: p.detach().numpy().copy() for name, p in named})
    record.append(epoch_means)
"""

PROXY_ANCHOR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            loss.backward()\n"
        "            torch.nn.utils.clip_grad_value_(net.parameters(), 10)\n"
        "            torch.nn.utils.clip_grad_value_(loss_fn.parameters(), 10)\n",
        "            grads = loss.backward()\n"
        "            torch.nn.utils.clip_grad_value_(grads, net.parameters(), 10)\n"
        "            torch.nn.utils.clip_grad_value_(grads, loss_fn.parameters(), 10)\n",
    ),
    ("            opt.step()\n", "            opt.step(grads)\n"),
]


def _cub_like(lib, rng, n, batch_size):
    """A CUB-200-like training loader in shape: images ``(B, 1, 3, H, W)``-squeezable and labels
    ``(B, 1)`` (the script squeezes both)."""
    labels = rng.integers(0, 4, n)
    images = rng.standard_normal((n, 1, 3, 6, 6)).astype(np.float32)
    images += labels[:, None, None, None, None].astype(np.float32) * 0.5
    dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels[:, None]))
    return lib.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False)


@pytest.mark.parametrize(
    "optimizer,freeze_bn,warm", [("adamw", 1, 1), ("sgd", 0, 0)], ids=["adamw-warm", "sgd"]
)
def test_proxy_anchor_trains_with_warmup_and_frozen_norms_as_torch(optimizer, freeze_bn, warm):
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        if lib is torch:
            text = PROXY_ANCHOR_SOURCE
        else:
            text = ported_imports(port(PROXY_ANCHOR_SOURCE, PROXY_ANCHOR_STEPS))
        names = run_source(text, lib)
        cfg = argparse.Namespace(
            dim=6,
            freeze_bn=freeze_bn,
            margin=0.1,
            scale=32,
            lr=1e-3,
            optimizer=optimizer,
            weight_decay=1e-4,
            decay_every=2,
            decay=0.5,
            epochs=3,
            warm=warm,
        )
        names["fit"](cfg, _cub_like(lib, np.random.default_rng(0), 24, 8), 4, record, initialize)
        records.append(record)
    assert len(records[0]) == 3 * (3 + 1) + 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
