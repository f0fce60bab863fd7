# ruff: noqa: E501  (the embedded scripts and the port steps replacing their import lines run past 100 columns)
"""Programs written here in the style of five research repositories, each run under torch and,
ported, under retrograd from the same weights and draws (the harness: ``tests/real_ports.py``;
continued from ``tests/test_real_ports_64.py``):

- a Child-Sum Tree-LSTM similarity model in the style of dasguptar/treelstm.pytorch, on a few
  hand-made sentence pairs: a recursion over parent-list trees, leaves started from
  ``inputs[0].detach().new(1, mem_dim).fill_(0.0).requires_grad_()``, ``torch.split`` of the
  gates by ``iou.size(1) // 3``, ``.repeat(len(kid_h), 1)``, ``zip(*map(...))`` of the
  children's states, ``torch.cat`` of tuples, a frozen ``nn.Embedding(..., padding_idx=0)``
  filled by ``weight.data.copy_``, ``deepcopy`` of the dataset's tensors, a dataset indexed by
  the 0-d tensors of ``torch.randperm``, ``math.floor``/``math.ceil`` of a 0-d score,
  ``nn.KLDivLoss()``, ``optim.Adagrad(filter(...), weight_decay=...)`` stepped every
  ``batchsize`` samples with the gradients accumulated (ported as a sum of ``Gradients``), and
  ``torch.dot(scale, torch.exp(output))`` written into ``predictions[i]``.
- a Siamese network in the style of harveyslash/Facial-Similarity-with-Siamese-Networks, on
  8x8 images: ``nn.ReflectionPad2d(1)``, ``nn.ReLU(inplace=True)`` before ``nn.BatchNorm2d``,
  a contrastive loss of ``F.pairwise_distance(..., keepdim=True)`` and ``torch.clamp(margin -
  d, min=0.0)``, labels from ``torch.from_numpy(np.array([int(a != b)], dtype=np.float32))``
  batched by a ``DataLoader``; then ``nn.TripletMarginLoss(margin=1.0, p=2, swap=True)``,
  ``nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance())`` and
  ``nn.CosineEmbeddingLoss(margin=0.2)`` under ``optim.NAdam``.
- a pointer network in the style of shirgur/PointerNet, sorting points: ``Parameter(
  torch.FloatTensor(dim), requires_grad=True)`` initialised by the deprecated
  ``nn.init.uniform``, a ``-inf`` parameter expanded by ``init_inf``, ``scores[mask] =
  self.inf[mask]``, ``nn.Softmax()`` without ``dim``, ``runner.data[:, i] = i`` on a repeated
  parameter, ``(runner == picked.unsqueeze(1).expand(...)).float()``, the next inputs picked by
  a ``.byte()`` mask, ``nn.Conv1d(dim, dim, 1, 1)`` over the encoder outputs, a
  ``DataLoader`` of dict samples, and ``CrossEntropyLoss`` over the softmax outputs. Its
  bidirectional branch (``torch.cat(h[-2:], dim=-1)``, one tensor) fails in torch, and so it
  must in retrograd.
- NetVLAD with a hard triplet loss in the style of lyakaap/NetVLAD-pytorch: a convolution's
  ``weight``/``bias`` replaced by ``nn.Parameter`` values computed from the centroids,
  ``F.normalize`` three times, ``flat.expand(K, -1, -1, -1).permute(1, 0, 2, 3)`` minus the
  expanded centroids, ``residual *= weights.unsqueeze(2)`` in the graph, pairwise distances
  with a masked ``sqrt``, triplet masks of ``torch.eye(n).byte() ^ 1`` and of a bool
  ``labels_equal ^ 1``, batch-all and hardest variants.
- neural arithmetic logic units in the style of kevinzakka/NALU-pytorch: a ``Parameter``
  computed at construction from two uninitialised ``torch.Tensor(out, in)`` parameters (so
  ``W`` trains and ``W_hat``/``M_hat`` do not), ``register_parameter("bias", None)`` passed
  to ``F.linear``, ``init.kaiming_uniform_(..., a=...)``,
  ``torch.FloatTensor(n).uniform_(low, high).unsqueeze_(1)``, ``torch.FloatTensor`` of a list
  of pairs of 0-d tensors, list-indexed rows, RMSprop, and the models printed with their
  ``extra_repr``.
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


def defined_initializer(seed):
    """:func:`initializer`, with torch's parameters first overwritten by draws of a seeded
    stream: for programs that leave a parameter as ``torch.Tensor(n, m)``'s uninitialised
    memory (or compute one from such memory), which could hold anything, NaN included."""
    initialize = initializer()
    rng = np.random.default_rng(seed)

    def defined(module):
        if isinstance(module, torch.nn.Module):
            with torch.no_grad():
                for parameter in module.parameters():
                    if parameter.requires_grad:  # (a frozen pretrained table is defined)
                        values = rng.uniform(-0.5, 0.5, tuple(parameter.shape))
                        parameter.copy_(torch.tensor(values))
        initialize(module)

    return defined


class SharedPermutations:
    """``torch.randperm`` of a library drawing from one seeded stream (so both runs visit the
    samples in the same order)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def randperm(n, dtype=None, device=None, **_):
            return lib.tensor(rng.permutation(n), dtype=dtype or lib.int64)

        self.saved = lib.randperm
        lib.randperm = randperm
        return self

    def __exit__(self, *exc):
        self.lib.randperm = self.saved
        return False


TREE_LSTM_SOURCE = """
import math
from copy import deepcopy

import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn.functional import log_softmax


class Node:
    def __init__(self, idx):
        self.idx, self.kids, self.state = idx, [], None


def parse_parents(line):
    # 1-based parent indices, 0 marks the root
    parents = [int(p) for p in line.split()]
    nodes = [Node(i) for i in range(len(parents))]
    root = None
    for i, p in enumerate(parents):
        if p == 0:
            root = nodes[i]
        else:
            nodes[p - 1].kids.append(nodes[i])
    return root


class ChildSumCell(nn.Module):
    def __init__(self, n_in, mem_dim):
        super().__init__()
        self.mem_dim = mem_dim
        self.x_iou, self.h_iou = nn.Linear(n_in, 3 * mem_dim), nn.Linear(mem_dim, 3 * mem_dim)
        self.x_f, self.h_f = nn.Linear(n_in, mem_dim), nn.Linear(mem_dim, mem_dim)

    def step(self, x, kid_c, kid_h):
        h_sum = torch.sum(kid_h, dim=0, keepdim=True)
        iou = self.x_iou(x) + self.h_iou(h_sum)
        gate_in, gate_out, cand = torch.split(iou, iou.size(1) // 3, dim=1)
        gate_in, gate_out, cand = torch.sigmoid(gate_in), torch.sigmoid(gate_out), torch.tanh(cand)
        f = torch.sigmoid(self.h_f(kid_h) + self.x_f(x).repeat(len(kid_h), 1))
        c = gate_in * cand + torch.sum(f * kid_c, dim=0, keepdim=True)
        return c, gate_out * torch.tanh(c)

    def forward(self, node, inputs):
        for kid in node.kids:
            self.forward(kid, inputs)
        if node.kids:
            kid_c, kid_h = zip(*map(lambda k: k.state, node.kids))
            kid_c, kid_h = torch.cat(kid_c, dim=0), torch.cat(kid_h, dim=0)
        else:
            kid_c = inputs[0].detach().new(1, self.mem_dim).fill_(0.0).requires_grad_()
            kid_h = inputs[0].detach().new(1, self.mem_dim).fill_(0.0).requires_grad_()
        node.state = self.step(inputs[node.idx], kid_c, kid_h)
        return node.state


class PairScorer(nn.Module):
    def __init__(self, vocab, in_dim, mem_dim, hidden, classes, freeze):
        super().__init__()
        self.emb = nn.Embedding(vocab, in_dim, padding_idx=0)
        if freeze:
            self.emb.weight.requires_grad_(False)
        self.cell = ChildSumCell(in_dim, mem_dim)
        self.hidden = nn.Linear(2 * mem_dim, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, ltree, lsent, rtree, rsent):
        _, lh = self.cell(ltree, self.emb(lsent))
        _, rh = self.cell(rtree, self.emb(rsent))
        features = torch.cat((torch.mul(lh, rh), torch.abs(lh - rh)), 1)
        return log_softmax(self.out(torch.sigmoid(self.hidden(features))), dim=1)


def soft_target(score, classes):
    # spread a real score over its two neighbouring integer classes
    target = torch.zeros(1, classes)
    lo, hi = math.floor(score), math.ceil(score)
    if lo == hi:
        target[0, lo - 1] = 1
    else:
        target[0, lo - 1] = hi - score
        target[0, hi - 1] = score - lo
    return target


class PairDataset:
    def __init__(self, lsents, rsents, lparents, rparents, scores, classes):
        self.lsents = [torch.tensor(s, dtype=torch.long) for s in lsents]
        self.rsents = [torch.tensor(s, dtype=torch.long) for s in rsents]
        self.lparents, self.rparents = lparents, rparents
        self.scores = torch.tensor(scores, dtype=torch.float)
        self.classes = classes

    def __len__(self):
        return len(self.scores)

    def __getitem__(self, i):
        # fresh trees and copied tensors: the trees hold per-pass state
        return (parse_parents(self.lparents[i]), deepcopy(self.lsents[i]),
                parse_parents(self.rparents[i]), deepcopy(self.rsents[i]), deepcopy(self.scores[i]))


def main(args, dataset, vectors):
    model = PairScorer(args.vocab_size, args.input_dim, args.mem_dim, args.hidden_dim, args.num_classes, args.freeze_embed)
    initialize(model)
    model.emb.weight.data.copy_(vectors)
    loss_fn = nn.KLDivLoss()
    optimizer = optim.Adagrad(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr, weight_decay=args.wd)
    scale = torch.arange(1, dataset.classes + 1, dtype=torch.float)
    for ep in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        epoch_loss = 0.0
        order = torch.randperm(len(dataset))
        for n, i in enumerate(order):
            ltree, lsent, rtree, rsent, score = dataset[i]
            out = model(ltree, lsent, rtree, rsent)
            loss = loss_fn(out, soft_target(score, dataset.classes))
            epoch_loss += loss.item()
            loss.backward()
            if (n + 1) % args.batchsize == 0:
                optimizer.step()
                optimizer.zero_grad()
        record.append(epoch_loss / len(dataset))
        model.eval()
        predictions = torch.zeros(len(dataset), dtype=torch.float)
        with torch.no_grad():
            for i in range(len(dataset)):
                ltree, lsent, rtree, rsent, _ = dataset[i]
                predictions[i] = torch.dot(scale, torch.exp(model(ltree, lsent, rtree, rsent).squeeze(0)))
        record.append(predictions.numpy().copy())
        print("epoch", ep, "loss", round(epoch_loss / len(dataset), 3))
    record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
"""

TREE_LSTM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        optimizer.zero_grad()\n        epoch_loss = 0.0\n",
        "        optimizer.zero_grad()\n        grads = None\n        epoch_loss = 0.0\n",
    ),
    (
        "            loss.backward()\n",
        "            sample_grads = loss.backward()\n            grads = sample_grads if grads is None else grads + sample_grads\n",
    ),
    (
        "                optimizer.step()\n                optimizer.zero_grad()\n",
        "                optimizer.step(grads)\n                optimizer.zero_grad()\n                grads = None\n",
    ),
]


class _TreeArgs:
    vocab_size = 9
    input_dim = 6
    mem_dim = 5
    hidden_dim = 4
    num_classes = 5
    freeze_embed = True
    lr = 0.05
    wd = 1e-4
    batchsize = 2
    epochs = 2


def test_child_sum_tree_lstm_similarity_trains_as_torch(capsys):
    rng = np.random.default_rng(6501)
    vectors = (rng.standard_normal((_TreeArgs.vocab_size, _TreeArgs.input_dim)) * 0.5).astype(
        np.float32
    )
    # dependency trees as parent lists (1-based parents, 0 the root)
    lparents = ["2 0 2", "0 1 1 3", "3 3 0 3 4", "0 1"]
    rparents = ["0 1", "2 0 2 3", "2 0", "3 1 0 3"]
    lsentences = [[1, 2, 3], [4, 5, 6, 7], [8, 1, 2, 3, 4], [5, 6]]
    rsentences = [[3, 4], [1, 2, 8, 7], [6, 5], [2, 3, 4, 8]]
    labels = [2.5, 4.0, 1.2, 3.6]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            TREE_LSTM_SOURCE
            if lib is torch
            else port(TREE_LSTM_SOURCE, TREE_LSTM_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        dataset = names["PairDataset"](
            lsentences, rsentences, lparents, rparents, labels, _TreeArgs.num_classes
        )
        with SharedPermutations(lib, 6501):
            names["main"](_TreeArgs, dataset, lib.tensor(vectors))
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)


SIAMESE_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class PairSet(Dataset):
    def __init__(self, images, classes, pairs):
        self.images, self.classes, self.pairs = images, classes, pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, k):
        a, b = self.pairs[k]
        different = torch.from_numpy(np.array([int(self.classes[a] != self.classes[b])], dtype=np.float32))
        return torch.from_numpy(self.images[a]), torch.from_numpy(self.images[b]), different


class Twin(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(1, 2, 3), nn.ReLU(inplace=True), nn.BatchNorm2d(2),
            nn.ReflectionPad2d(1), nn.Conv2d(2, 3, 3), nn.ReLU(inplace=True), nn.BatchNorm2d(3),
        )
        self.embed = nn.Sequential(nn.Linear(3 * 8 * 8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))

    def branch(self, x):
        return self.embed(self.features(x).view(x.size(0), -1))

    def forward(self, left, right):
        return self.branch(left), self.branch(right)


class MarginContrastive(nn.Module):
    # pull same-class pairs together, push others at least `margin` apart
    def __init__(self, margin: float = 2.0):
        super().__init__()
        self.margin = margin

    def forward(self, u, v, different):
        d = F.pairwise_distance(u, v, keepdim=True)
        return torch.mean((1 - different) * d.pow(2) + different * torch.clamp(self.margin - d, min=0.0).pow(2))


def main(images, classes, pairs, triples):
    pair_set = PairSet(images, classes, pairs)
    net = Twin()
    initialize(net)
    loss_fn = MarginContrastive()
    optimizer = optim.Adam(net.parameters(), lr=5e-4)
    history = []
    for epoch in range(2):
        for left, right, different in DataLoader(pair_set, batch_size=4, shuffle=False, num_workers=0):
            optimizer.zero_grad()
            u, v = net(left, right)
            pair_loss = loss_fn(u, v, different)
            pair_loss.backward()
            optimizer.step()
            history.append(pair_loss.item())
            print("epoch {} loss {}".format(epoch, round(pair_loss.item(), 3)))
    record.append(history)
    net.eval()
    probe = iter(DataLoader(pair_set, batch_size=1, shuffle=False))
    first, _, _ = next(probe)
    for _ in range(3):
        _, other, _ = next(probe)
        u, v = net(Variable(first), Variable(other))
        record.append(F.pairwise_distance(u, v).item())
    net.train()
    margin_loss = nn.TripletMarginLoss(margin=1.0, p=2, swap=True)
    dist_loss = nn.TripletMarginWithDistanceLoss(distance_function=nn.PairwiseDistance(), margin=0.5)
    cos_loss = nn.CosineEmbeddingLoss(margin=0.2)
    optimizer = optim.NAdam(net.parameters(), lr=0.001)
    anchors, positives, negatives = (torch.from_numpy(images[list(col)]) for col in zip(*triples))
    for _ in range(2):
        optimizer.zero_grad()
        ea, ep = net(anchors, positives)
        en = net.branch(negatives)
        sign = torch.cat([torch.ones(len(ea)), -torch.ones(len(ea))])
        loss = margin_loss(ea, ep, en) + dist_loss(ea, ep, en) + cos_loss(torch.cat([ea, ea]), torch.cat([ep, en]), sign)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({name: t.detach().numpy().copy() for name, t in net.state_dict().items()})
"""

SIAMESE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("from torch import optim\n", "from retrograd import optim\n"),
    (
        "            pair_loss.backward()\n            optimizer.step()\n",
        "            grads = pair_loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_siamese_contrastive_and_triplet_losses_train_as_torch(capsys):
    rng = np.random.default_rng(6502)
    images = rng.uniform(size=(8, 1, 8, 8)).astype(np.float32)
    classes = [0, 1, 2, 0, 1, 2, 0, 1]
    pairs = [(0, 3), (0, 1), (1, 4), (2, 7), (5, 2), (6, 0), (3, 4), (7, 1)]
    triplets = [(0, 3, 1), (1, 4, 2), (2, 5, 6), (7, 4, 0)]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = SIAMESE_SOURCE if lib is torch else port(SIAMESE_SOURCE, SIAMESE_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record, initialize=initialize, Variable=lambda t: t)
        names["main"](images, classes, pairs, triplets)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


POINTER_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import Parameter as P
from torch.utils.data import DataLoader, Dataset as TaskSet


class PointerAttention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.query = nn.Linear(dim, dim)
        self.keys = nn.Conv1d(dim, dim, 1, 1)  # a per-position linear map of the encoder outputs
        self.v = P(torch.FloatTensor(dim), requires_grad=True)
        self._inf = P(torch.FloatTensor([float("-inf")]), requires_grad=False)
        self.softmax = nn.Softmax()
        nn.init.uniform(self.v, -1, 1)

    def init_inf(self, shape):
        self.inf = self._inf.unsqueeze(1).expand(*shape)

    def forward(self, h, enc, mask):
        keys = self.keys(enc.permute(0, 2, 1))
        q = self.query(h).unsqueeze(2).expand(-1, -1, keys.size(2))
        v = self.v.unsqueeze(0).expand(keys.size(0), -1).unsqueeze(1)
        scores = torch.bmm(v, torch.tanh(q + keys)).squeeze(1)
        if len(scores[mask]) > 0:
            scores[mask] = self.inf[mask]
        return self.softmax(scores)


class PointerNet(nn.Module):
    def __init__(self, emb, hidden, bidir):
        super().__init__()
        self.bidir = bidir
        self.embed = nn.Linear(2, emb)
        self.encoder = nn.LSTM(emb, hidden // 2 if bidir else hidden, batch_first=True, bidirectional=bidir)
        self.cell = nn.LSTMCell(emb, hidden)
        self.attend = PointerAttention(hidden)
        self.start = P(torch.FloatTensor(emb), requires_grad=False)
        nn.init.uniform(self.start, -1, 1)

    def forward(self, points):
        b, n, _ = points.size()
        x = self.embed(points.view(b * n, -1)).view(b, n, -1)
        enc, (h, c) = self.encoder(x)
        if self.bidir:
            h = torch.cat(h[-2:], dim=-1)  # one tensor, not a tuple: torch refuses it
            c = torch.cat(c[-2:], dim=-1)
        else:
            h, c = h[-1], c[-1]
        mask = P(torch.ones(b, n), requires_grad=False)
        runner = P(torch.zeros(n), requires_grad=False).repeat(b, 1).long()
        for i in range(n):
            runner.data[:, i] = i
        self.attend.init_inf(mask.size())
        step_in = self.start.unsqueeze(0).expand(b, -1)
        outputs, pointers = [], []
        for _ in range(n):
            h, c = self.cell(step_in, (h, c))
            probs = self.attend(h, enc, torch.eq(mask, 0))
            masked = probs * mask
            _, picked = masked.max(1)
            hit = (runner == picked.unsqueeze(1).expand(-1, n)).float()
            mask = mask * (1 - hit)
            chosen = hit.unsqueeze(2).expand(-1, -1, x.size(2)).byte()
            step_in = x[chosen.data.bool()].view(b, -1)
            outputs.append(probs.unsqueeze(0))
            pointers.append(picked.unsqueeze(1))
        return torch.cat(outputs).permute(1, 0, 2), torch.cat(pointers, 1)


class SortTask(TaskSet):
    def __init__(self, points):
        self.points = points

    def __len__(self):
        return len(self.points)

    def __getitem__(self, i):
        order = np.argsort(self.points[i][:, 0])
        return {"Points": torch.from_numpy(self.points[i]).float(), "Solution": torch.from_numpy(order)}


def main(params, points):
    model = PointerNet(params.embedding_size, params.hiddens, params.bidir)
    initialize(model)
    loader = DataLoader(SortTask(points), batch_size=params.batch_size, shuffle=False)
    loss_fn = nn.CrossEntropyLoss()
    opt = optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=params.lr)
    for ep in range(params.nof_epoch):
        for batch in loader:
            probs, pointers = model(batch["Points"])
            loss = loss_fn(probs.contiguous().view(-1, probs.size()[-1]), batch["Solution"].view(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            record.append(loss.item())
            record.append(pointers.numpy().tolist())
        print("epoch", ep, "loss", round(loss.item(), 4))
    record.append({k: v.detach().numpy().copy() for k, v in model.named_parameters()})
"""

POINTER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
]


class _PointerParams:
    embedding_size = 6
    hiddens = 8
    bidir = False
    batch_size = 3
    lr = 1e-2
    nof_epoch = 2


def test_pointer_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6503)
    points = rng.uniform(size=(6, 4, 2))
    params = _PointerParams
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            POINTER_SOURCE
            if lib is torch
            else port(POINTER_SOURCE, POINTER_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](params, points)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_pointer_network_s_bidirectional_branch_fails_as_in_torch():
    """``torch.cat(encoder_hidden[0][-2:], dim=-1)`` gives ``cat`` one tensor: torch refuses it
    (a TypeError) where iterating it would join its two slices into a wrong-sized state."""
    points = np.random.default_rng(6504).uniform(size=(3, 4, 2))
    params = type("Params", (_PointerParams,), {"bidir": True})
    initialize = initializer()
    for lib in (torch, rg):
        text = (
            POINTER_SOURCE
            if lib is torch
            else port(POINTER_SOURCE, POINTER_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=[], initialize=initialize)
        with pytest.raises(TypeError, match="cat"):
            names["main"](params, points)
    hidden = rg.ones((2, 3, 4))
    for join in (rg.cat, rg.stack, rg.hstack, rg.vstack, rg.dstack, rg.column_stack):
        with pytest.raises(rg.DTypeError, match=r"not a Tensor \(of shape \[2, 3, 4\]\)"):
            join(hidden)
    assert rg.cat(hidden.unbind(0), dim=-1).shape == (3, 8)


NETVLAD_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F


class VLADPool(nn.Module):
    # soft-assign local descriptors to K centroids and sum their residuals
    def __init__(self, clusters, dim, alpha):
        super().__init__()
        self.k, self.alpha = clusters, alpha
        self.assign = nn.Conv2d(dim, clusters, kernel_size=(1, 1), bias=True)
        self.centroids = nn.Parameter(torch.rand(clusters, dim))
        self.assign.weight = nn.Parameter((2.0 * alpha * self.centroids).unsqueeze(-1).unsqueeze(-1))
        self.assign.bias = nn.Parameter(-alpha * self.centroids.norm(dim=1))

    def forward(self, x):
        n, c = x.shape[:2]
        x = F.normalize(x, p=2, dim=1)
        weights = F.softmax(self.assign(x).view(n, self.k, -1), dim=1)
        flat = x.view(n, c, -1)
        residual = flat.expand(self.k, -1, -1, -1).permute(1, 0, 2, 3) - self.centroids.expand(flat.size(-1), -1, -1).permute(1, 2, 0).unsqueeze(0)
        residual *= weights.unsqueeze(2)
        vlad = F.normalize(residual.sum(dim=-1), p=2, dim=2).view(n, -1)
        return F.normalize(vlad, p=2, dim=1)


def distances(e, eps=1e-16):
    dots = torch.matmul(e, e.t())
    sq = dots.diag()
    d = (sq.unsqueeze(1) - 2.0 * dots + sq.unsqueeze(0)).clamp(min=0)
    zero = d.eq(0).float()
    return torch.sqrt(d + zero * eps) * (1.0 - zero)


def positive_mask(labels):
    not_self = (torch.eye(labels.size(0)).byte() ^ 1).bool()
    return not_self & torch.eq(labels.unsqueeze(0), labels.unsqueeze(1))


def negative_mask(labels):
    return torch.eq(labels.unsqueeze(0), labels.unsqueeze(1)) ^ 1


def triplet_mask(labels):
    not_self = (torch.eye(labels.size(0)).byte() ^ 1).bool()
    distinct = not_self.unsqueeze(2) & not_self.unsqueeze(1) & not_self.unsqueeze(0)
    same = torch.eq(labels.unsqueeze(0), labels.unsqueeze(1))
    return distinct & same.unsqueeze(2) & (same.unsqueeze(1) ^ 1)


class TripletMining(nn.Module):
    def __init__(self, margin, hardest):
        super().__init__()
        self.margin, self.hardest = margin, hardest

    def forward(self, emb, labels):
        d = distances(emb)
        if self.hardest:
            hardest_pos, _ = (positive_mask(labels).float() * d).max(dim=1, keepdim=True)
            far, _ = d.max(dim=1, keepdim=True)
            hardest_neg, _ = (d + far * (1.0 - negative_mask(labels).float())).min(dim=1, keepdim=True)
            return F.relu(hardest_pos - hardest_neg + self.margin).mean()
        loss = F.relu(d.unsqueeze(2) - d.unsqueeze(1) + self.margin) * triplet_mask(labels).float()
        active = torch.gt(loss, 1e-16).float().sum()
        return loss.sum() / (active + 1e-16)


def main(hardest):
    trunk = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2), nn.Conv2d(4, 5, 3, padding=1), nn.ReLU(inplace=True))
    model = nn.Sequential(trunk, VLADPool(3, 5, alpha=1.0))
    initialize(model)
    loss_fn = TripletMining(margin=0.1, hardest=hardest)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
    labels = torch.randint(0, 3, (8,)).long()
    images = torch.rand(8, 3, 8, 8)
    for _ in range(2):
        triplet_loss = loss_fn(model(images), labels)
        optimizer.zero_grad()
        triplet_loss.backward()
        optimizer.step()
        record.append(float(triplet_loss))
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

NETVLAD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        triplet_loss.backward()\n        optimizer.step()\n",
        "        grads = triplet_loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("hardest", [False, True])
def test_netvlad_with_hard_triplet_loss_trains_as_torch(hardest):
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            NETVLAD_SOURCE
            if lib is torch
            else port(NETVLAD_SOURCE, NETVLAD_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedDraws(lib, 6505):
            names["main"](hardest)
        records.append(record)
    # atol is 1% of Adam's step (lr 1e-3): Adam moves a weight by about lr * m / sqrt(v), so a
    # weight whose two gradients nearly cancel turns a rounding difference in them (torch's
    # threaded convolution sums in another order) into a few 1e-6 of movement
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


NALU_SOURCE = """
import random

import torch
import torch.nn as nn
from torch.nn import Parameter, functional as F, init


class AccumulatorCell(nn.Module):
    # weights pushed towards {-1, 0, 1} by tanh(W_hat) * sigmoid(M_hat)
    def __init__(self, n_in, n_out):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.W_hat = Parameter(torch.Tensor(n_out, n_in))
        self.M_hat = Parameter(torch.Tensor(n_out, n_in))
        # computed once from the two (then untrained) tensors, kept as its own parameter
        self.W = Parameter(torch.sigmoid(self.M_hat) * torch.tanh(self.W_hat))
        self.register_parameter("bias", None)
        for raw in (self.W_hat, self.M_hat):
            init.kaiming_uniform_(raw, a=5 ** 0.5)

    def forward(self, x):
        return F.linear(x, self.W, self.bias)

    def extra_repr(self):
        return "n_in={}, n_out={}".format(self.n_in, self.n_out)


class LogicUnitCell(nn.Module):
    # gate between adding (the accumulator) and multiplying (the same in log space)
    def __init__(self, n_in, n_out, eps=1e-10):
        super().__init__()
        self.n_in, self.n_out, self.eps = n_in, n_out, eps
        self.G = Parameter(torch.Tensor(n_out, n_in))
        self.acc = AccumulatorCell(n_in, n_out)
        self.register_parameter("bias", None)
        init.kaiming_uniform_(self.G, a=5 ** 0.5)

    def forward(self, x):
        add = self.acc(x)
        gate = torch.sigmoid(F.linear(x, self.G, self.bias))
        mul = torch.exp(self.acc(torch.log(torch.abs(x) + self.eps)))
        return gate * add + (1 - gate) * mul

    def extra_repr(self):
        return "n_in={}, n_out={}".format(self.n_in, self.n_out)


def make_data(n_train, n_test, pool, terms, op, low, high):
    values = torch.FloatTensor(pool).uniform_(low, high).unsqueeze_(1)
    rows, targets = [], []
    for _ in range(n_train + n_test):
        first = random.sample(range(pool), terms)
        second = random.sample([j for j in range(pool) if j not in first], terms)
        a, b = values[first].sum(), values[second].sum()
        rows.append([a, b])
        targets.append(op(a, b))
    X, y = torch.FloatTensor(rows), torch.FloatTensor(targets).unsqueeze_(1)
    order = list(range(n_train + n_test))
    np.random.shuffle(order)
    return X[order[n_test:]], y[order[n_test:]], X[order[:n_test]], y[order[:n_test]]


def fit(model, optimizer, X, y, steps):
    for i in range(steps):
        pred = model(X)
        loss = F.mse_loss(pred, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("  step {}: loss {:.7f} mae {:.7f}".format(i + 1, loss.item(), torch.mean(torch.abs(y - pred)).item()))
        record.append(loss.item())


def main():
    ops = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}
    errors = {}
    for name, op in ops.items():
        print("task", name)
        X, y, X_eval, y_eval = make_data(12, 4, 20, 3, op, 1, 5)
        models = [nn.Sequential(AccumulatorCell(2, 3), AccumulatorCell(3, 1)), nn.Sequential(LogicUnitCell(2, 3), LogicUnitCell(3, 1))]
        errors[name] = []
        for model in models:
            initialize(model)
            fit(model, torch.optim.RMSprop(model.parameters(), lr=1e-2), X, y, 3)
            with torch.no_grad():
                errors[name].append(torch.abs(y_eval - model(X_eval)).mean().item())
    print(models[1])
    return errors
"""

NALU_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import Parameter, functional as F, init\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import Parameter, functional as F, init\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class SharedUniformFill:
    """``Tensor.uniform_`` of a library drawing from one seeded stream for a tensor that does
    not require grad (the data both runs start from); parameters' initializations draw as
    before (the port loads torch's weights over them)."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng
        own = lib.Tensor.uniform_

        def uniform_(tensor, low=0.0, high=1.0, **kwargs):
            if tensor.requires_grad:
                return own(tensor, low, high, **kwargs)
            with lib.no_grad():
                values = rng.uniform(low, high, tuple(tensor.shape))
                return tensor.copy_(lib.tensor(values, dtype=tensor.dtype))

        lib.Tensor.uniform_ = uniform_
        return self

    def __exit__(self, *exc):
        del self.lib.Tensor.uniform_  # the class's own (inherited) method again
        return False


def test_neural_arithmetic_logic_units_train_as_torch(capsys):
    records, logs, results = [], [], []
    initialize = defined_initializer(6506)  # W is computed from uninitialised memory
    for lib in (torch, rg):
        record = []
        random.seed(6506)
        np.random.seed(6506)
        text = NALU_SOURCE if lib is torch else port(NALU_SOURCE, NALU_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedUniformFill(lib, 6506):
            results.append(names["main"]())
        records.append(record)
        logs.append(capsys.readouterr().out)
    # the log prints float32 losses of thousands to seven decimals: below their precision,
    # so its numbers are compared as numbers
    number = re.compile(r"-?\d+\.\d+")
    assert number.sub("#", logs[1]) == number.sub("#", logs[0])
    np.testing.assert_allclose(
        [float(x) for x in number.findall(logs[1])],
        [float(x) for x in number.findall(logs[0])],
        rtol=1e-5,
    )
    assert "(acc): AccumulatorCell(n_in=3, n_out=1)" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-6)
    assert list(results[1]) == list(results[0])
    for name, errors in results[0].items():
        np.testing.assert_allclose(results[1][name], errors, rtol=1e-4, err_msg=name)
