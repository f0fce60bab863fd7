"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of msight-tech/research-xbm and research-ms-loss, cross-batch memory for embedding
learning, with its losses.

- a feature queue (``torch.zeros(size, dim).cuda()`` and int64 labels, ``full`` by
  ``self.labels[-1].item() != 0``, slice assignments ``self.feats[-n:] = feats`` of detached
  features, wrap-around);
- a contrastive loss: ``torch.matmul(a, b.t())``, ``torch.masked_select`` of a similarity row
  by ``labels_a[i] == labels_b`` (a 0-d against a 1-d tensor) and again by a threshold,
  ``len`` of a selection, ``neg = 0`` mixed with tensors in ``sum(terms) / n``, statistics kept
  in a dict;
- a multi-similarity loss: boolean indexing ``sim[i][labels == labels[i]]``, Python
  ``min``/``max`` over a 1-d tensor compared inside an index, the mined pairs' log-sum-exp
  weighting, ``torch.zeros([], requires_grad=True)`` when nothing is mined, ``torch.t``;
- a normalising head (``module.apply`` of a Kaiming initialiser chosen by
  ``m.__class__.__name__.find('Linear')``, ``nn.init.kaiming_normal_(a=0, mode='fan_out')``,
  ``nn.init.constant_``, ``F.normalize(x, p=2, dim=1)``);
- the training loop: the memory enqueued after a start iteration, ``loss = loss + weight *
  memory_loss``, the loader restarted on ``StopIteration``, ``del feats`` / ``del loss``.

The backbone is a small stand-in; the datasets are synthetic ``(inputs, labels, indices)``
batches. The lines changed for the port: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import types

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


XBM_SOURCE = """
import torch
from torch import nn

stats = {}


def kaiming_for_linear(module):
    if module.__class__.__name__.find("Linear") >= 0:
        nn.init.kaiming_normal_(module.weight, a=0, mode="fan_out")
        nn.init.constant_(module.bias, 0.0)


class EmbeddingNet(nn.Module):
    # a small trunk (a CNN in real use) and a projection onto the unit sphere
    def __init__(self, cfg):
        super(EmbeddingNet, self).__init__()
        self.trunk = nn.Sequential(nn.Linear(cfg.INPUTS, cfg.HIDDEN), nn.ReLU())
        self.project = nn.Linear(cfg.HIDDEN, cfg.EMBED_DIM)
        self.project.apply(kaiming_for_linear)

    def forward(self, x):
        return nn.functional.normalize(self.project(self.trunk(x)), p=2, dim=1)


class FeatureQueue:
    # the embeddings of recent batches, kept without gradient, oldest overwritten first
    def __init__(self, size, dim):
        self.size = size
        self.feats = torch.zeros(size, dim).cuda()
        self.labels = torch.zeros(size, dtype=torch.long).cuda()
        self.head = 0

    @property
    def full(self):
        return self.labels[-1].item() != 0  # labels start at 1

    def contents(self):
        if self.full:
            return self.feats, self.labels
        return self.feats[: self.head], self.labels[: self.head]

    def push(self, feats, labels):
        n = len(labels)
        if self.head + n <= self.size:
            self.feats[self.head : self.head + n] = feats
            self.labels[self.head : self.head + n] = labels
            self.head += n
        else:
            self.feats[-n:] = feats
            self.labels[-n:] = labels
            self.head = 0


class PairMarginLoss(nn.Module):
    def __init__(self, margin=0.4):
        super(PairMarginLoss, self).__init__()
        self.margin = margin

    def forward(self, feats_a, labels_a, feats_b, labels_b):
        sim = torch.matmul(feats_a, feats_b.t())
        terms, hard_counts = [], []
        for i in range(feats_a.size(0)):
            same = torch.masked_select(sim[i], labels_a[i] == labels_b)
            same = torch.masked_select(same, same < 1 - 1e-5)  # not the sample itself
            other = torch.masked_select(sim[i], labels_a[i] != labels_b)
            hard = torch.masked_select(other, other > self.margin)
            neg = 0
            if len(hard) > 0:
                neg = torch.sum(hard)
                hard_counts.append(len(hard))
            terms.append(torch.sum(1 - same) + neg)
        source = "batch" if feats_b.shape[0] == feats_a.shape[0] else "memory"
        stats[source + "_hard_rows"] = len(hard_counts)
        stats[source + "_mean_hard"] = sum(hard_counts) / max(1, len(hard_counts))
        return sum(terms) / feats_a.size(0)


class MinedSimilarityLoss(nn.Module):
    def __init__(self, alpha, beta, base=0.5, margin=0.1):
        super(MinedSimilarityLoss, self).__init__()
        self.alpha, self.beta, self.base, self.margin = alpha, beta, base, margin

    def forward(self, embeddings, labels):
        n = embeddings.size(0)
        assert n == labels.size(0), f"{n} embeddings, {labels.size(0)} labels"
        sim = torch.matmul(embeddings, torch.t(embeddings))
        terms = []
        for i in range(embeddings.size(0)):
            pos = sim[i][labels == labels[i]]
            pos = pos[pos < 1 - 1e-5]
            neg = sim[i][labels != labels[i]]
            # keep the negatives closer than the farthest positive, and vice versa
            hard_neg = neg[neg + self.margin > min(pos)]
            hard_pos = pos[pos - self.margin < max(neg)]
            if len(hard_neg) == 0 or len(hard_pos) == 0:
                continue
            pull = torch.log(1 + torch.sum(torch.exp(-self.alpha * (hard_pos - self.base))))
            push = torch.log(1 + torch.sum(torch.exp(self.beta * (hard_neg - self.base))))
            terms.append(pull / self.alpha + push / self.beta)
        if not terms:
            return torch.zeros([], requires_grad=True)  # (a zero that still backpropagates)
        return sum(terms) / embeddings.size(0)


def train_with_memory(cfg, model, loader, optimizer, criterion, record):
    queue = FeatureQueue(cfg.MEMORY_SIZE, cfg.EMBED_DIM)
    batches = iter(loader)
    for step in range(1, cfg.STEPS + 1):
        try:
            inputs, labels, _ = next(batches)
        except StopIteration:
            batches = iter(loader)
            inputs, labels, _ = next(batches)
        model.train()
        feats = model(inputs)
        use_memory = step > cfg.MEMORY_FROM
        if use_memory:
            queue.push(feats.detach(), labels.detach())
        loss = criterion(feats, labels, feats, labels)
        stats["batch_loss"] = loss.item()
        if use_memory:
            memory_loss = criterion(feats, labels, *queue.contents())
            stats["memory_loss"] = memory_loss.item()
            loss = loss + cfg.MEMORY_WEIGHT * memory_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(dict(stats))
        record.append(loss.item())
        del feats
        del loss
    record.append({key: w.detach().numpy().copy() for key, w in model.named_parameters()})
"""

XBM_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _namespace(**entries):
    return types.SimpleNamespace(
        **{k: _namespace(**v) if isinstance(v, dict) else v for k, v in entries.items()}
    )


CFG = _namespace(
    INPUTS=10, HIDDEN=12, EMBED_DIM=24, MEMORY_SIZE=20, MEMORY_FROM=2, MEMORY_WEIGHT=1.0, STEPS=8
)


class Batches:
    """A class-balanced sampler's ``(inputs, labels, indices)`` batches: 4 classes of 2."""

    def __init__(self, lib, rng, n_batches):
        self.batches = []
        for b in range(n_batches):
            targets = np.repeat(rng.permutation(6)[:4] + 1, 2)
            images = (rng.standard_normal((8, 10)) + targets[:, None] * 0.3).astype(np.float32)
            self.batches.append(
                (lib.tensor(images), lib.tensor(targets), lib.tensor(np.arange(8) + 8 * b))
            )

    def __iter__(self):
        return iter(self.batches)


def test_xbm_trains_the_contrastive_loss_against_its_cross_batch_memory_as_torch():
    """Eight iterations over a loader of three batches (restarted twice), a memory of 20 that
    wraps around after its third enqueue."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = XBM_SOURCE.replace(".cuda()", "")  # both, on the CPU
        names = run_source(text if lib is torch else port(text, XBM_STEPS), lib)
        model = names["EmbeddingNet"](CFG)
        initialize(model)
        optimizer = lib.optim.Adam(model.parameters(), lr=1e-3)
        criterion = names["PairMarginLoss"]()
        names["train_with_memory"](
            CFG, model, Batches(lib, np.random.default_rng(0), 3), optimizer, criterion, record
        )
        records.append(record)
    assert "memory_hard_rows" in records[0][-3]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_multi_similarity_loss_mines_and_weights_pairs_as_torch():
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        text = XBM_SOURCE.replace(".cuda()", "")
        names = run_source(text if lib is torch else port(text, XBM_STEPS), lib)
        model = names["EmbeddingNet"](CFG)
        initialize(model)
        optimizer = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        criterion = names["MinedSimilarityLoss"](alpha=2.0, beta=40.0)
        record = []
        for images, targets, _ in Batches(lib, np.random.default_rng(1), 4):
            loss = criterion(model(images), targets)
            optimizer.zero_grad()
            if lib is torch:
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            record.append(loss.item())
        record.append({key: w.detach().numpy().copy() for key, w in model.named_parameters()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
