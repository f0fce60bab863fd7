"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
msight-tech/research-xbm, cross-batch memory for embedding learning, with its losses.

``ret_benchmark/modeling/xbm.py``'s ``XBM`` (a feature queue of ``torch.zeros(self.K, 128)``
and int64 targets, ``is_full`` by ``self.targets[-1].item() != 0``, slice assignments
``self.feats[-q_size:] = feats`` of detached features, wrap-around), ``losses/contrastive_loss.py``
(``torch.masked_select`` of a similarity row by ``targets_col[i] == target_row``, ``len`` of a
selection, ``neg_loss = 0`` mixed with tensors in ``sum(loss) / n``), research-ms-loss's
``multi_similarity_loss.py`` (boolean indexing ``sim_mat[i][labels == labels[i]]``, Python
``min``/``max`` over a 1-d tensor compared inside an index, the mined pairs' log-sum-exp
weighting), ``heads/linear_norm.py``'s ``LinearNorm`` (``fc.apply(weights_init_kaiming)``,
``F.normalize(x, p=2, dim=1)``), and ``engine/trainer.py``'s ``do_train`` loop: the memory
enqueued after ``START_ITERATION``, ``loss = loss + cfg.XBM.WEIGHT * xbm_loss``, the loader
restarted on ``StopIteration``, ``del feats`` / ``del loss``.

Left out of ``do_train``: validation (its retrieval metrics), the logger/meters/writer and the
checkpointer; ``_train_loader.next()`` (Python 2's iterator method, which torch's loaders no
longer have) is ``next(_train_loader)`` in both runs. The backbone is a small stand-in; the
datasets are synthetic ``(images, targets, indices)`` batches. The lines changed for the port:
the ``import`` lines and the gradient lines.
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
import numpy as np

log_info = {}


# -- ret_benchmark/utils/init_methods.py --
def weights_init_kaiming(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        nn.init.kaiming_normal_(m.weight, a=0, mode='fan_out')
        nn.init.constant_(m.bias, 0.0)


# -- ret_benchmark/modeling/heads/linear_norm.py --
class LinearNorm(nn.Module):
    def __init__(self, cfg):
        super(LinearNorm, self).__init__()
        self.fc = nn.Linear(cfg.MODEL.HEAD.IN_CHANNELS, cfg.MODEL.HEAD.DIM)
        self.fc.apply(weights_init_kaiming)

    def forward(self, x):
        x = self.fc(x)
        x = nn.functional.normalize(x, p=2, dim=1)
        return x


# -- ret_benchmark/modeling/xbm.py --
class XBM:
    def __init__(self, cfg):
        self.K = cfg.XBM.SIZE
        self.feats = torch.zeros(self.K, 128).cuda()
        self.targets = torch.zeros(self.K, dtype=torch.long).cuda()
        self.ptr = 0

    @property
    def is_full(self):
        return self.targets[-1].item() != 0

    def get(self):
        if self.is_full:
            return self.feats, self.targets
        else:
            return self.feats[:self.ptr], self.targets[:self.ptr]

    def enqueue_dequeue(self, feats, targets):
        q_size = len(targets)
        if self.ptr + q_size > self.K:
            self.feats[-q_size:] = feats
            self.targets[-q_size:] = targets
            self.ptr = 0
        else:
            self.feats[self.ptr: self.ptr + q_size] = feats
            self.targets[self.ptr: self.ptr + q_size] = targets
            self.ptr += q_size


# -- ret_benchmark/losses/contrastive_loss.py --
class ContrastiveLoss(nn.Module):
    def __init__(self, cfg):
        super(ContrastiveLoss, self).__init__()
        self.margin = 0.5

    def forward(self, inputs_col, targets_col, inputs_row, target_row):

        n = inputs_col.size(0)
        # Compute similarity matrix
        sim_mat = torch.matmul(inputs_col, inputs_row.t())
        epsilon = 1e-5
        loss = list()

        neg_count = list()
        for i in range(n):
            pos_pair_ = torch.masked_select(sim_mat[i], targets_col[i] == target_row)
            pos_pair_ = torch.masked_select(pos_pair_, pos_pair_ < 1 - epsilon)
            neg_pair_ = torch.masked_select(sim_mat[i], targets_col[i] != target_row)

            neg_pair = torch.masked_select(neg_pair_, neg_pair_ > self.margin)

            pos_loss = torch.sum(-pos_pair_ + 1)
            if len(neg_pair) > 0:
                neg_loss = torch.sum(neg_pair)
                neg_count.append(len(neg_pair))
            else:
                neg_loss = 0

            loss.append(pos_loss + neg_loss)
        if inputs_col.shape[0] == inputs_row.shape[0]:
            prefix = "batch_"
        else:
            prefix = "memory_"
        if len(neg_count) != 0:
            log_info[f"{prefix}average_neg"] = sum(neg_count) / len(neg_count)
        else:
            log_info[f"{prefix}average_neg"] = 0
        log_info[f"{prefix}non_zero"] = len(neg_count)
        loss = sum(loss) / n  # / all_targets.shape[1]
        return loss


# -- research-ms-loss: ret_benchmark/losses/multi_similarity_loss.py --
class MultiSimilarityLoss(nn.Module):
    def __init__(self, cfg):
        super(MultiSimilarityLoss, self).__init__()
        self.thresh = 0.5
        self.margin = 0.1

        self.scale_pos = cfg.LOSSES.MULTI_SIMILARITY_LOSS.SCALE_POS
        self.scale_neg = cfg.LOSSES.MULTI_SIMILARITY_LOSS.SCALE_NEG

    def forward(self, feats, labels):
        assert feats.size(0) == labels.size(0), \\
            f"feats.size(0): {feats.size(0)} is not equal to labels.size(0): {labels.size(0)}"
        batch_size = feats.size(0)
        sim_mat = torch.matmul(feats, torch.t(feats))

        epsilon = 1e-5
        loss = list()

        for i in range(batch_size):
            pos_pair_ = sim_mat[i][labels == labels[i]]
            pos_pair_ = pos_pair_[pos_pair_ < 1 - epsilon]
            neg_pair_ = sim_mat[i][labels != labels[i]]

            neg_pair = neg_pair_[neg_pair_ + self.margin > min(pos_pair_)]
            pos_pair = pos_pair_[pos_pair_ - self.margin < max(neg_pair_)]

            if len(neg_pair) < 1 or len(pos_pair) < 1:
                continue

            # weighting step
            pos_loss = 1.0 / self.scale_pos * torch.log(
                1 + torch.sum(torch.exp(-self.scale_pos * (pos_pair - self.thresh))))
            neg_loss = 1.0 / self.scale_neg * torch.log(
                1 + torch.sum(torch.exp(self.scale_neg * (neg_pair - self.thresh))))
            loss.append(pos_loss + neg_loss)

        if len(loss) == 0:
            return torch.zeros([], requires_grad=True)

        loss = sum(loss) / batch_size
        return loss


# -- the stand-in backbone (a BN-Inception in the repository) and its LinearNorm head --
class Model(nn.Module):
    def __init__(self, cfg):
        super(Model, self).__init__()
        self.backbone = nn.Sequential(nn.Linear(10, cfg.MODEL.HEAD.IN_CHANNELS), nn.ReLU())
        self.head = LinearNorm(cfg)

    def forward(self, x):
        return self.head(self.backbone(x))


# -- ret_benchmark/engine/trainer.py's do_train (training part) --
def do_train(cfg, model, train_loader, optimizer, criterion, record):
    max_iter = cfg.SOLVER.MAX_ITERS

    if cfg.XBM.ENABLE:
        xbm = XBM(cfg)

    iteration = 0

    _train_loader = iter(train_loader)
    while iteration <= max_iter:
        try:
            images, targets, indices = next(_train_loader)
        except StopIteration:
            _train_loader = iter(train_loader)
            images, targets, indices = next(_train_loader)

        model.train()

        iteration = iteration + 1

        feats = model(images)

        if cfg.XBM.ENABLE and iteration > cfg.XBM.START_ITERATION:
            xbm.enqueue_dequeue(feats.detach(), targets.detach())

        loss = criterion(feats, targets, feats, targets)
        log_info["batch_loss"] = loss.item()

        if cfg.XBM.ENABLE and iteration > cfg.XBM.START_ITERATION:
            xbm_feats, xbm_targets = xbm.get()
            xbm_loss = criterion(feats, targets, xbm_feats, xbm_targets)
            log_info["xbm_loss"] = xbm_loss.item()
            loss = loss + cfg.XBM.WEIGHT * xbm_loss

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        record.append(dict(log_info))
        record.append(loss.item())

        del feats
        del loss
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
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
    MODEL={"HEAD": {"IN_CHANNELS": 16, "DIM": 128}},
    XBM={"ENABLE": True, "SIZE": 20, "START_ITERATION": 2, "WEIGHT": 1.0},
    SOLVER={"MAX_ITERS": 7},
    LOSSES={"MULTI_SIMILARITY_LOSS": {"SCALE_POS": 2.0, "SCALE_NEG": 40.0}},
)


class Batches:
    """The sampler's ``(images, targets, indices)`` batches: 4 classes of 2 per batch."""

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
        model = names["Model"](CFG)
        initialize(model)
        optimizer = lib.optim.Adam(model.parameters(), lr=1e-3)
        criterion = names["ContrastiveLoss"](CFG)
        names["do_train"](
            CFG, model, Batches(lib, np.random.default_rng(0), 3), optimizer, criterion, record
        )
        records.append(record)
    assert "memory_non_zero" in records[0][-3]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_multi_similarity_loss_mines_and_weights_pairs_as_torch():
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        names = run_source(XBM_SOURCE if lib is torch else port(XBM_SOURCE, XBM_STEPS), lib)
        model = names["Model"](CFG)
        initialize(model)
        optimizer = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        criterion = names["MultiSimilarityLoss"](CFG)
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
        record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
