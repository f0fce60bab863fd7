"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of Spijkervet/SimCLR, contrastive learning with its losses written by hand.

A small convolutional encoder whose ``fc`` is swapped for an ``Identity`` module after it was
built, a projector of bias-free ``Linear`` layers, trained with Adam from a loader of
``((view_a, view_b), label)`` pairs, under one of two hand-written losses:

- an NT-Xent module: a mask built by ``torch.ones((n, n), dtype=bool)`` (Python's ``bool`` as a
  dtype), ``fill_diagonal_(0)`` and item assignment in a loop; ``nn.CosineSimilarity(dim=2)``
  broadcast over ``z.unsqueeze(1)`` and ``z.unsqueeze(0)``; ``torch.diag(sim, k)`` with a
  positive and a negative offset; ``sim[mask].reshape(n, -1)``;
  ``torch.zeros(n).to(device).long()`` targets; ``CrossEntropyLoss(reduction="sum")`` and
  ``loss /= n``;
- a loss by gathers: ``sim /= temperature`` in place, ``sim[torch.arange(b), partner]``
  gathers, ``masked = sim.clone()`` with advanced-index assignments (``masked[idx, idx] =
  0.0``), ``-torch.log(pos / denom)`` and ``loss /= 2``.

The data are two noisy views of random images. Only the import and gradient lines differ.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    rg.seed(0)


CONTRASTIVE_SOURCE = """
import torch
import torch.nn as nn


class Identity(nn.Module):
    def forward(self, x):
        return x


class NTXent(nn.Module):
    def __init__(self, batch, tau):
        super().__init__()
        self.batch, self.tau = batch, tau
        n = 2 * batch
        keep = torch.ones((n, n), dtype=bool)
        keep = keep.fill_diagonal_(0)
        for k in range(batch):  # drop each positive pair from the negatives
            keep[k, batch + k] = 0
            keep[batch + k, k] = 0
        self.keep = keep
        self.xent = nn.CrossEntropyLoss(reduction="sum")
        self.cos = nn.CosineSimilarity(dim=2)

    def forward(self, za, zb):
        n = 2 * self.batch
        z = torch.cat((za, zb), dim=0)
        sim = self.cos(z.unsqueeze(1), z.unsqueeze(0)) / self.tau
        pos = torch.cat((torch.diag(sim, self.batch), torch.diag(sim, -self.batch)), dim=0)
        neg = sim[self.keep].reshape(n, -1)
        target = torch.zeros(n).to(pos.device).long()
        loss = self.xent(torch.cat((pos.reshape(n, 1), neg), dim=1), target)
        loss /= n
        return loss


def gathered_loss(cfg, za, zb, cos):
    b = cfg.batch
    z = torch.cat((za, zb), dim=0)
    sim = cos(z.unsqueeze(1), z.unsqueeze(0))
    sim /= cfg.tau
    sim = sim.exp()
    rows = torch.arange(0, b)
    partner = torch.arange(b, 2 * b).to(cfg.device)
    pos = torch.cat((sim[rows, partner], sim[partner, rows]), dim=0)
    masked = sim.clone()
    everyone = torch.arange(0, 2 * b)
    masked[everyone, everyone] = 0.0
    masked[rows, partner] = 0.0
    masked[partner, rows] = 0.0
    loss = -torch.log(pos / masked.sum()).to(cfg.device).mean()
    loss /= 2
    return loss


class SmallEncoder(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(3, width, 3, padding=1)
        self.norm = nn.BatchNorm2d(width)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, 5)

    def forward(self, x):
        h = self.pool(torch.relu(self.norm(self.conv(x))))
        return self.fc(h.flatten(1))


class Contrastive(nn.Module):
    def __init__(self, encoder, width, out_dim):
        super().__init__()
        self.encoder = encoder
        self.encoder.fc = Identity()  # keep the pooled features
        self.head = nn.Sequential(
            nn.Linear(width, width, bias=False), nn.ReLU(), nn.Linear(width, out_dim, bias=False)
        )

    def forward(self, xa, xb):
        ha, hb = self.encoder(xa), self.encoder(xb)
        return ha, hb, self.head(ha), self.head(hb)


def fit(cfg, loader, record, initialize):
    model = Contrastive(SmallEncoder(cfg.width), cfg.width, cfg.out_dim)
    initialize(model)
    model = model.to(cfg.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if cfg.loss == "nt_xent":
        criterion = NTXent(cfg.batch, cfg.tau)
    else:
        criterion = nn.CosineSimilarity(dim=2)
    for epoch in range(cfg.epochs):
        total = 0.0
        for i, ((xa, xb), _) in enumerate(loader):
            opt.zero_grad()
            _, _, za, zb = model(xa.to(cfg.device), xb.to(cfg.device))
            if cfg.loss == "nt_xent":
                loss = criterion(za, zb)
            else:
                loss = gathered_loss(cfg, za, zb, criterion)
            loss.backward()
            opt.step()
            record.append(loss.item())
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / len(loader):.5f}")
    record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
"""

CONTRASTIVE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]


class NoisyPairs:
    """Each item: two noisy views of one random image, and a dummy label."""

    def __init__(self, lib, rng, n):
        self.lib = lib
        self.images = rng.random((n, 3, 6, 6)).astype(np.float32)
        self.noise = 0.1 * rng.standard_normal((2, n, 3, 6, 6)).astype(np.float32)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        a, b = (self.lib.tensor(self.images[i] + self.noise[k, i]) for k in (0, 1))
        return (a, b), 0


@pytest.mark.parametrize("loss", ["nt_xent", "gathered"])
def test_simclr_style_contrastive_losses_as_torch(loss, capsys):
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = CONTRASTIVE_SOURCE if lib is torch else port(CONTRASTIVE_SOURCE, CONTRASTIVE_STEPS)
        names = run_source(text, lib)
        data = NoisyPairs(lib, np.random.default_rng(44101), 12)
        loader = lib.utils.data.DataLoader(data, batch_size=4, shuffle=False, drop_last=True)
        cfg = argparse.Namespace(
            loss=loss, width=6, out_dim=3, batch=4, tau=0.5, device=lib.device("cpu"), epochs=2
        )
        names["fit"](cfg, loader, record, initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert len(records[0]) == 2 * 3 + 1
    assert logs[1].count("epoch ") == logs[0].count("epoch ") == 2
    # the conv's bias feeds a BatchNorm: its true gradient is zero, and Adam follows the noise
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=("encoder.conv.bias",))
