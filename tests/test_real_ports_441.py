# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
Spijkervet/SimCLR's contrastive losses written by hand.

- ``simclr/modules/nt_xent.py``'s ``NT_Xent`` (one process, ``world_size=1``: its
  ``GatherLayer`` branch is not taken), ``simclr/modules/identity.py``'s ``Identity`` and
  ``simclr/simclr.py``'s ``SimCLR`` (the encoder's ``fc`` replaced by ``Identity`` after it was
  built; a projector of bias-free ``Linear``s), trained as ``main.py``'s ``train`` does with Adam
  from a loader of ``((x_i, x_j), _)`` pairs. It exercises ``torch.ones((N, N), dtype=bool)``
  (Python's ``bool`` as a dtype), ``mask.fill_diagonal_(0)``, item assignment of a bool mask in a
  loop, ``nn.CosineSimilarity(dim=2)`` broadcast over ``z.unsqueeze(1)``/``z.unsqueeze(0)``,
  ``torch.diag(sim, k)`` with positive and negative offsets, ``sim[self.mask].reshape(N, -1)``,
  ``torch.zeros(N).to(device).long()``, ``CrossEntropyLoss(reduction="sum")`` and ``loss /= N``.
- The repository's first ``main.py``'s ``calc_loss``: ``sim /= args.temperature``,
  ``sim[torch.arange(0, B), mask_triag]`` gathers, ``masks = sim.clone()`` with advanced-index
  assignments ``masks[mask_diag, mask_diag] = 0.0``, ``-torch.log(nominator / denominator)``,
  ``total_loss /= 2``.

The encoder (a torchvision ResNet in the repository) is a small convolutional stand-in with an
``fc`` the model replaces; STL10 and its augmentations are a synthetic dataset of two noisy views.
The lines changed for the port: the ``import`` lines and the gradient lines.
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


SIMCLR_SOURCE = '''
import torch
import torch.nn as nn


# -- simclr/modules/identity.py --
class Identity(nn.Module):
    def __init__(self):
        super(Identity, self).__init__()

    def forward(self, x):
        return x


# -- simclr/modules/nt_xent.py --
class NT_Xent(nn.Module):
    def __init__(self, batch_size, temperature, world_size):
        super(NT_Xent, self).__init__()
        self.batch_size = batch_size
        self.temperature = temperature
        self.world_size = world_size

        self.mask = self.mask_correlated_samples(batch_size, world_size)
        self.criterion = nn.CrossEntropyLoss(reduction="sum")
        self.similarity_f = nn.CosineSimilarity(dim=2)

    def mask_correlated_samples(self, batch_size, world_size):
        N = 2 * batch_size * world_size
        mask = torch.ones((N, N), dtype=bool)
        mask = mask.fill_diagonal_(0)
        for i in range(batch_size * world_size):
            mask[i, batch_size * world_size + i] = 0
            mask[batch_size * world_size + i, i] = 0
        return mask

    def forward(self, z_i, z_j):
        """
        We do not sample negative examples explicitly.
        Instead, given a positive pair, similar to (Chen et al., 2017), we treat the other 2(N − 1) augmented examples within a minibatch as negative examples.
        """
        N = 2 * self.batch_size * self.world_size

        if self.world_size > 1:
            z_i = torch.cat(GatherLayer.apply(z_i), dim=0)
            z_j = torch.cat(GatherLayer.apply(z_j), dim=0)
        z = torch.cat((z_i, z_j), dim=0)

        sim = self.similarity_f(z.unsqueeze(1), z.unsqueeze(0)) / self.temperature

        sim_i_j = torch.diag(sim, self.batch_size * self.world_size)
        sim_j_i = torch.diag(sim, -self.batch_size * self.world_size)

        # We have 2N samples, but with Distributed training every GPU gets N examples too, resulting in: 2xNxN
        positive_samples = torch.cat((sim_i_j, sim_j_i), dim=0).reshape(N, 1)
        negative_samples = sim[self.mask].reshape(N, -1)

        labels = torch.zeros(N).to(positive_samples.device).long()
        logits = torch.cat((positive_samples, negative_samples), dim=1)
        loss = self.criterion(logits, labels)
        loss /= N
        return loss


# -- simclr/simclr.py --
class SimCLR(nn.Module):
    """
    We opt for simplicity and adopt the commonly used ResNet (He et al., 2016) to obtain hi = f(x ̃i) = ResNet(x ̃i) where hi ∈ Rd is the output after the average pooling layer.
    """

    def __init__(self, encoder, projection_dim, n_features):
        super(SimCLR, self).__init__()

        self.encoder = encoder
        self.n_features = n_features

        # Replace the fc layer with an Identity function
        self.encoder.fc = Identity()

        # We use a MLP with one hidden layer to obtain z_i = g(h_i) = W(2)σ(W(1)h_i) where σ is a ReLU non-linearity.
        self.projector = nn.Sequential(
            nn.Linear(self.n_features, self.n_features, bias=False),
            nn.ReLU(),
            nn.Linear(self.n_features, projection_dim, bias=False),
        )

    def forward(self, x_i, x_j):
        h_i = self.encoder(x_i)
        h_j = self.encoder(x_j)

        z_i = self.projector(h_i)
        z_j = self.projector(h_j)
        return h_i, h_j, z_i, z_j


# -- the first main.py's calc_loss --
def calc_loss(args, z_i, z_j, cossim, mask_diag, mask_triag):

    """
    We do not sample negative examples explicitly.
    Instead, given a positive pair, similar to (Chen et al., 2017), we treat the other 2(N − 1) augmented examples within a minibatch as negative examples.
    """

    ## pairwise similarity, manually:
    p1 = torch.cat((z_i, z_j), dim=0)

    sim = cossim(p1.unsqueeze(1), p1.unsqueeze(0))
    sim /= args.temperature
    sim = torch.exp(sim)

    nominator = torch.cat(
        (
            sim[torch.arange(0, args.batch_size), mask_triag],
            sim[mask_triag, torch.arange(0, args.batch_size)],
        ),
        dim=0,
    )

    masks = sim.clone()
    masks[mask_diag, mask_diag] = 0.0
    masks[mask_triag, torch.arange(0, args.batch_size)] = 0.0
    masks[torch.arange(0, args.batch_size), mask_triag] = 0.0
    denominator = masks.sum()

    l_ij = -torch.log(nominator / denominator).to(args.device)
    total_loss = l_ij.mean()
    total_loss /= 2
    return total_loss


# -- the stand-in for torchvision's ResNet encoder (an fc that SimCLR replaces) --
class TinyResNet(nn.Module):
    def __init__(self, n_features):
        super().__init__()
        self.conv = nn.Conv2d(3, n_features, 3, padding=1)
        self.bn = nn.BatchNorm2d(n_features)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(n_features, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


# -- main.py's train (one process) --
def train(args, train_loader, model, criterion, optimizer, record):
    loss_epoch = 0
    for step, ((x_i, x_j), _) in enumerate(train_loader):
        optimizer.zero_grad()
        x_i = x_i.to(args.device)
        x_j = x_j.to(args.device)

        # positive pair, with encoding
        h_i, h_j, z_i, z_j = model(x_i, x_j)

        if args.loss == "nt_xent":
            loss = criterion(z_i, z_j)
        else:
            loss = calc_loss(args, z_i, z_j, criterion, args.mask_diag, args.mask_triag)
        loss.backward()

        optimizer.step()

        if step % 50 == 0:
            print(f"Step [{step}/{len(train_loader)}]\\t Loss: {loss.item()}")

        record.append(loss.item())
        loss_epoch += loss.item()
    return loss_epoch


def main(args, train_loader, record, initialize):
    encoder = TinyResNet(args.n_features)
    model = SimCLR(encoder, args.projection_dim, args.n_features)
    initialize(model)
    model = model.to(args.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-4)

    if args.loss == "nt_xent":
        criterion = NT_Xent(args.batch_size, args.temperature, args.world_size)
    else:
        criterion = torch.nn.CosineSimilarity(dim=2)
        args.mask_diag = torch.arange(0, args.batch_size * 2).to(args.device)
        args.mask_triag = torch.arange(args.batch_size, args.batch_size * 2).to(args.device)
    for epoch in range(args.start_epoch, args.epochs):
        loss_epoch = train(args, train_loader, model, criterion, optimizer, record)
        print(f"Epoch [{epoch}/{args.epochs}]\\t Loss: {loss_epoch / len(train_loader)}")
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
'''

SIMCLR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n\n        optimizer.step()\n",
        "        grads = loss.backward()\n\n        optimizer.step(grads)\n",
    ),
]


class TwoViews:
    """STL10 through ``TransformsSimCLR``: each item is two noisy views of one image and a label."""

    def __init__(self, lib, rng, n):
        self.lib = lib
        self.images = rng.random((n, 3, 8, 8)).astype(np.float32)
        self.noise = rng.standard_normal((2, n, 3, 8, 8)).astype(np.float32) * 0.1

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        views = [self.lib.tensor(self.images[i] + self.noise[k, i]) for k in (0, 1)]
        return (views[0], views[1]), 0


@pytest.mark.parametrize("loss", ["nt_xent", "calc_loss"])
def test_simclr_trains_with_the_hand_written_nt_xent_as_torch(loss, capsys):
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = SIMCLR_SOURCE if lib is torch else port(SIMCLR_SOURCE, SIMCLR_STEPS)
        names = run_source(text, lib)
        dataset = TwoViews(lib, np.random.default_rng(0), 24)
        loader = lib.utils.data.DataLoader(dataset, batch_size=6, shuffle=False, drop_last=True)
        args = argparse.Namespace(
            loss=loss,
            n_features=8,
            projection_dim=4,
            batch_size=6,
            temperature=0.5,
            world_size=1,
            device=lib.device("cpu"),
            start_epoch=0,
            epochs=2,
        )
        names["main"](args, loader, record, initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert len(records[0]) == 2 * 4 + 1
    assert logs[1].count("Epoch [") == logs[0].count("Epoch [") == 2
    # the conv's bias feeds a BatchNorm: its true gradient is zero, and Adam follows the noise
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=("encoder.conv.bias",))
