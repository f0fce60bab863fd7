"""Real ports, continued (the harness: ``tests/real_ports.py``): metric learning written by
hand in plain torch, programs written here in the style of TinyZeaMays/CircleLoss.

A pair-similarity loss that seeds its own backward passes: cosine similarities of normalised
embeddings (``feature @ feature.transpose(1, 0)``, ``.view(-1)``), same-label pairs from an int
matrix with ``torch.eye(..., dtype=, device=)`` added in place (``+=``) and boolean indexing by
``.eq(1)``/``.eq(0)``; weights from ``torch.clamp_min(..., min=)`` of detached similarities, the
loss capped by ``torch.clamp_max(..., max=)``, and two backwards through one graph,
``pos.backward(gradient=..., retain_graph=True)`` then ``neg.backward(gradient=...)`` (the
seeded gradients summed); a small convolutional embedder (``Conv2d`` by keywords,
``MaxPool2d(kernel_size=)``, ``mean(dim=[2, 3])``, ``F.normalize``) trained by SGD with momentum
after ``model.zero_grad()``, then a pair-verification pass deciding ``if same and close`` on
0-d tensors. A margin softmax over a cosine classifier (an ``nn.Linear`` subclass without bias,
``F.linear`` of normalised inputs and weights): ``gather(dim=, index=)``,
``scatter_(dim=, index=, src=)`` into detached tensors, ``torch.ones_like(..., dtype=, device=)``,
``CrossEntropyLoss``. ``Tensor`` and ``Tuple`` annotations, ``super(Class, self).__init__``.

The data (MNIST-like images) are small synthetic tensors behind ``TensorDataset``/``DataLoader``;
the lines changed for the port are the ``import`` lines and the gradient lines (the two seeded
backwards return gradients, summed and handed to ``step``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

RG_IMPORTS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import nn, Tensor\n", "from retrograd import nn, Tensor\n"),
]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    rg.seed(0)


# -- a pair-similarity loss with its own backward -------------------------------------------------
CIRCLE_SOURCE = """
from typing import Tuple

import torch
from torch import nn, Tensor
from torch.optim import SGD


class CosineClassifier(nn.Linear):
    # logits are cosines between the normalised input and each normalised class row
    def __init__(self, dim: int, classes: int) -> None:
        super(CosineClassifier, self).__init__(dim, classes, bias=False)

    def forward(self, features: Tensor) -> Tensor:
        unit = nn.functional.normalize
        return nn.functional.linear(unit(features), unit(self.weight))


class MarginSoftmaxLoss(nn.Module):
    def __init__(self, margin: float, scale: float) -> None:
        super(MarginSoftmaxLoss, self).__init__()
        self.margin, self.scale = margin, scale
        self.ce = nn.CrossEntropyLoss()

    def forward(self, cosines: Tensor, target: Tensor) -> Tensor:
        column = target.unsqueeze(1)
        # each logit is weighted by how far it is from its optimum (no gradient through it)
        weight = torch.clamp_min(cosines + self.margin, min=0).detach()
        own = cosines.gather(dim=1, index=column)
        own_weight = torch.clamp_min(1 + self.margin - own, min=0).detach()
        weight.scatter_(dim=1, index=column, src=own_weight)
        shift = self.margin * torch.ones_like(cosines, dtype=cosines.dtype, device=cosines.device)
        ones = torch.ones_like(column, device=cosines.device, dtype=cosines.dtype)
        shift.scatter_(dim=1, index=column, src=ones - self.margin)
        return self.ce(self.scale * weight * (cosines - shift), target)


def pair_similarities(embeddings: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
    cosines = (embeddings @ embeddings.transpose(1, 0)).view(-1)
    same = (target.unsqueeze(0) == target.unsqueeze(1)).int()
    # the diagonal becomes 2: a sample paired with itself is in neither set
    same += torch.eye(same.shape[0], device=same.device, dtype=same.dtype)
    same = same.view(-1)
    return cosines[same.eq(1)], cosines[same.eq(0)]


class PairLossOwnBackward(nn.Module):
    def __init__(self, margin: float, scale: float) -> None:
        super(PairLossOwnBackward, self).__init__()
        self.margin, self.scale = margin, scale

    def forward(self, pos: Tensor, neg: Tensor) -> Tensor:
        alpha_pos = torch.clamp_min(1 + self.margin - pos.detach(), min=0.0)
        alpha_neg = torch.clamp_min(neg.detach() + self.margin, min=0.0)
        logits_pos = -self.scale * alpha_pos * (pos - (1 - self.margin))
        logits_neg = self.scale * alpha_neg * (neg - self.margin)
        product = torch.exp(logits_neg).sum() * torch.exp(logits_pos).sum()
        loss = torch.log(1 + torch.clamp_max(product, max=1e38))
        # d loss / d logits is (1 - exp(-loss)) times a softmax over each set: seed the two
        # backward passes by hand rather than differentiate the capped product
        outer = 1 - torch.exp(-loss)
        seed_pos = -outer * self.scale * alpha_pos * torch.softmax(logits_pos, dim=0)
        seed_neg = outer * self.scale * alpha_neg * torch.softmax(logits_neg, dim=0)
        pos.backward(gradient=seed_pos, retain_graph=True)
        neg.backward(gradient=seed_neg)
        return loss.detach()


class Embedder(nn.Module):
    def __init__(self, width: int = 12) -> None:
        super(Embedder, self).__init__()
        self.body = nn.Sequential(
            nn.Conv2d(in_channels=1, out_channels=6, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(in_channels=6, out_channels=width, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
        )

    def forward(self, images: Tensor) -> Tensor:
        return nn.functional.normalize(self.body(images).mean(dim=[2, 3]))


def train_and_verify(train_loader, pair_loader, record, initialize, threshold=0.8):
    model = Embedder()
    initialize(model)
    optimizer = SGD(model.parameters(), lr=0.02, momentum=0.9)
    criterion = PairLossOwnBackward(margin=0.3, scale=32)
    for images, labels in train_loader:
        model.zero_grad()
        loss = criterion(*pair_similarities(model(images), labels))  # (already backpropagated)
        optimizer.step()
        record.append(loss.item())

    counts = {"hit": 0, "miss": 0, "false alarm": 0}
    for images, labels in pair_loader:
        first, second = model(images)
        same = labels[0] == labels[1]
        close = torch.sum(first * second) > threshold
        if same and close:
            counts["hit"] += 1
        elif same:
            counts["miss"] += 1
        elif close:
            counts["false alarm"] += 1
    record.append(list(counts.values()))
    record.append({key: w.detach().numpy().copy() for key, w in model.named_parameters()})
"""

CIRCLE_STEPS = [
    *RG_IMPORTS,
    ("from torch.optim import SGD\n", "from retrograd.optim import SGD\n"),
    ("        pos.backward(", "        self.grads = pos.backward("),
    ("        neg.backward(", "        self.grads = self.grads + neg.backward("),
    ("        optimizer.step()\n", "        optimizer.step(criterion.grads)\n"),
]


def _mnist_like(lib, rng, n, batch_size):
    images = rng.random((n, 1, 16, 16)).astype(np.float32)
    labels = rng.integers(0, 3, n)
    images += labels[:, None, None, None].astype(np.float32) * 0.3  # a class signal to learn
    dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
    # (unshuffled: one order in both runs)
    return lib.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=False)


def test_pair_loss_trains_through_its_own_two_seeded_backwards_as_torch():
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = CIRCLE_SOURCE if lib is torch else port(CIRCLE_SOURCE, CIRCLE_STEPS)
        names = run_source(text, lib)
        rng = np.random.default_rng(440)
        train = _mnist_like(lib, rng, 24, 8)
        pairs = _mnist_like(lib, rng, 10, 2)
        names["train_and_verify"](train, pairs, record, initialize)
        records.append(record)
    assert len(records[0]) == 3 + 2
    assert sum(records[0][3]) > 0  # the verification counted something
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_margin_softmax_over_cosine_classifier_trains_as_torch():
    """``MarginSoftmaxLoss`` over ``CosineClassifier``'s logits, a few SGD steps with momentum."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        names = run_source(
            CIRCLE_SOURCE if lib is torch else port(CIRCLE_SOURCE, CIRCLE_STEPS), lib
        )
        rng = np.random.default_rng(441)
        x = lib.tensor(rng.standard_normal((10, 5)).astype(np.float32))
        y = lib.tensor(rng.integers(0, 3, 10))
        head = names["CosineClassifier"](5, 3)
        initialize(head)
        criterion = names["MarginSoftmaxLoss"](margin=0.3, scale=48)
        optimizer = lib.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
        record = []
        for _ in range(4):
            loss = criterion(head(x), y)
            optimizer.zero_grad()
            if lib is torch:
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            record.append(loss.item())
        record.append({"weight": head.weight.detach().numpy().copy()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
