"""Real ports, continued (the harness: ``tests/real_ports.py``): a Graph Isomorphism Network
for whole-graph classification written here in the style of weihua916/powerful-gnns, run on
torch and, ported, on retrograd from the same weights and batches.

The program reads a MUTAG-format text file into one networkx graph per sample with edge
matrices ``torch.LongTensor(edges).transpose(0, 1)`` and one-hot tag features written by
``features[range(n), [tags]] = 1``, splits by scikit-learn's ``StratifiedKFold``, and trains a
GIN: MLPs with batch norms, the block-diagonal adjacency and the graph pooling matrix as
``torch.sparse.FloatTensor(idx, values, torch.Size([...]))`` used through ``torch.spmm``, max
pooling over ``padded[neighbour_index]`` where ``-1`` pads read an appended row of
``torch.min(h, dim=0)[0]``, and the learnt ``(1 + self.eps[layer]) * h``. The loop: ``argparse``
from ``sys.argv``, ``StepLR`` stepped before the optimizer, ``np.random.permutation`` batches,
``loss.detach().cpu().numpy()`` summed into a float, chunked evaluation and ``output.max(1,
keepdim=True)[1]`` accuracies through ``pred.eq(labels.view_as(pred))``, ``print(model.eps)``.

The original port exposed no defect of its own (it passed when added); the file guards that
this surface trains as torch does. What stands in: the MUTAG file is a small synthetic one in
its format (rings and stars of 5 to 7 nodes with three node tags), written to the test's
working directory; the arguments are small (``--final_dropout 0``: the dropout masks are each
library's own draws; ``--decay 1e-3``: the biases ahead of each batch norm have no gradient
but their decay, which keeps Adam's steps on them from following the rounding noise, and they
are left out of the final comparison where they still may). The program calls
``initialize(model)`` and records the trained parameters; the port changes the gradient lines
and the import lines naming ``torch``.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GIN_SOURCE = """
# Whole-graph classification with a Graph Isomorphism Network (Xu et al. 2019).
import argparse

import networkx as nx
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from sklearn import model_selection
from torch.nn import functional as F


class Sample:
    def __init__(self, graph, label, tags):
        self.graph, self.label, self.tags = graph, label, tags
        self.neighbours = [sorted(graph.neighbors(v)) for v in range(len(graph))]
        self.widest = max(len(ns) for ns in self.neighbours)
        edges = [list(e) for e in graph.edges()]
        edges += [[j, i] for i, j in edges]
        self.edges = torch.LongTensor(edges).transpose(0, 1)
        self.features = None


def read_dataset(name):
    samples, labels = [], {}
    with open(f"dataset/{name}/{name}.txt") as fh:
        for _ in range(int(fh.readline())):
            n, label = map(int, fh.readline().split())
            graph, tags = nx.Graph(), []
            graph.add_nodes_from(range(n))
            for v in range(n):
                tag, degree, *rest = map(int, fh.readline().split())
                tags.append(tag)
                graph.add_edges_from((v, u) for u in rest[:degree])
            samples.append(Sample(graph, labels.setdefault(label, len(labels)), tags))
    n_tags = 1 + max(t for s in samples for t in s.tags)
    for s in samples:
        s.features = torch.zeros(len(s.tags), n_tags)
        s.features[range(len(s.tags)), [s.tags]] = 1
    print(f"{len(samples)} graphs, {len(labels)} classes, {n_tags} tags")
    return samples, len(labels)


def fold(samples, seed, k):
    folds = model_selection.StratifiedKFold(n_splits=4, shuffle=True, random_state=seed)
    train_idx, test_idx = list(folds.split(np.zeros(len(samples)), [s.label for s in samples]))[k]
    return [samples[i] for i in train_idx], [samples[i] for i in test_idx]


class MLP(nn.Module):
    def __init__(self, depth, n_in, n_hidden, n_out):
        super().__init__()
        sizes = [n_in] + [n_hidden] * (depth - 1) + [n_out]
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.norms = nn.ModuleList(nn.BatchNorm1d(b) for b in sizes[1:-1])

    def forward(self, x):
        for linear, norm in zip(self.linears, self.norms):
            x = F.relu(norm(linear(x)))
        return self.linears[-1](x)


class GIN(nn.Module):
    def __init__(self, opts, n_in, n_classes):
        super().__init__()
        self.opts = opts
        rounds = opts.num_layers - 1
        self.eps = nn.Parameter(torch.zeros(rounds))
        widths = [n_in] + [opts.hidden_dim] * rounds
        hid = opts.hidden_dim
        depth = opts.num_mlp_layers
        self.mlps = nn.ModuleList(MLP(depth, widths[i], hid, hid) for i in range(rounds))
        self.norms = nn.ModuleList(nn.BatchNorm1d(opts.hidden_dim) for _ in range(rounds))
        self.readouts = nn.ModuleList(nn.Linear(w, n_classes) for w in widths)

    def _offsets(self, batch):
        return np.cumsum([0] + [len(s.tags) for s in batch])

    def _adjacency(self, batch):
        starts = self._offsets(batch)
        edges = torch.cat([s.edges + int(o) for s, o in zip(batch, starts)], 1)
        n = int(starts[-1])
        if self.opts.neighbor_pooling_type != "average" or not self.opts.learn_eps:
            loops = torch.LongTensor([range(n), range(n)])
            edges = torch.cat([edges, loops], 1)
        values = torch.ones(edges.shape[1])
        return torch.sparse.FloatTensor(edges, values, torch.Size([n, n]))

    def _readout_matrix(self, batch):
        starts = self._offsets(batch)
        idx, values = [], []
        for g, s in enumerate(batch):
            size = len(s.tags)
            weight = 1.0 / size if self.opts.graph_pooling_type == "average" else 1.0
            idx += [[g, int(starts[g]) + v] for v in range(size)]
            values += [weight] * size
        idx = torch.LongTensor(idx).transpose(0, 1)
        shape = torch.Size([len(batch), int(starts[-1])])
        return torch.sparse.FloatTensor(idx, torch.FloatTensor(values), shape)

    def _padded_neighbours(self, batch):
        starts, widest = self._offsets(batch), max(s.widest for s in batch)
        rows = []
        for s, o in zip(batch, starts):
            for v, ns in enumerate(s.neighbours):
                row = [u + int(o) for u in ns] + [-1] * (widest - len(ns))
                rows.append(row if self.opts.learn_eps else row + [v + int(o)])
        return torch.LongTensor(rows)

    def forward(self, batch):
        h = torch.cat([s.features for s in batch], 0)
        pooling = self.opts.neighbor_pooling_type
        if pooling == "max":
            neighbours = self._padded_neighbours(batch)
        else:
            adj = self._adjacency(batch)
        hidden = [h]
        for layer, (mlp, norm) in enumerate(zip(self.mlps, self.norms)):
            if pooling == "max":
                floor = torch.min(h, dim=0)[0]  # what the -1 pads read
                padded = torch.cat([h, floor.reshape(1, -1)])
                pooled = torch.max(padded[neighbours], dim=1)[0]
            else:
                pooled = torch.spmm(adj, h)
                if pooling == "average":
                    pooled = pooled / torch.spmm(adj, torch.ones((adj.shape[0], 1)))
            if self.opts.learn_eps:
                pooled = pooled + (1 + self.eps[layer]) * h
            h = F.relu(norm(mlp(pooled)))
            hidden.append(h)
        readout = self._readout_matrix(batch)
        score = 0
        for layer, h in enumerate(hidden):
            pooled = torch.spmm(readout, h)
            logits = self.readouts[layer](pooled)
            score += F.dropout(logits, self.opts.final_dropout, training=self.training)
        return score


def scores_in_chunks(model, samples, size=16):
    model.eval()
    return torch.cat([model(samples[i:i + size]).detach() for i in range(0, len(samples), size)], 0)


def accuracy(model, samples):
    pred = scores_in_chunks(model, samples).max(1, keepdim=True)[1]
    labels = torch.LongTensor([s.label for s in samples])
    return pred.eq(labels.view_as(pred)).sum().cpu().item() / len(samples)


def main():
    cli = argparse.ArgumentParser(description="GIN graph classification")
    cli.add_argument("--dataset", default="MUTAG")
    cli.add_argument("--epochs", type=int, default=100)
    cli.add_argument("--iters_per_epoch", type=int, default=20)
    cli.add_argument("--batch_size", type=int, default=16)
    cli.add_argument("--lr", type=float, default=0.01)
    cli.add_argument("--decay", type=float, default=0.0)
    cli.add_argument("--num_layers", type=int, default=4)
    cli.add_argument("--num_mlp_layers", type=int, default=2)
    cli.add_argument("--hidden_dim", type=int, default=32)
    cli.add_argument("--final_dropout", type=float, default=0.5)
    cli.add_argument("--graph_pooling_type", choices=["sum", "average"], default="sum")
    cli.add_argument("--neighbor_pooling_type", choices=["sum", "average", "max"], default="sum")
    cli.add_argument("--learn_eps", action="store_true")
    opts = cli.parse_args()

    np.random.seed(0)
    samples, n_classes = read_dataset(opts.dataset)
    train_set, test_set = fold(samples, seed=0, k=0)
    model = GIN(opts, train_set[0].features.shape[1], n_classes)
    initialize(model)
    optimizer = optim.Adam(model.parameters(), lr=opts.lr, weight_decay=opts.decay)
    schedule = optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(1, opts.epochs + 1):
        schedule.step()  # before the optimizer, as many scripts of that era do
        model.train()
        running = 0.0
        for _ in range(opts.iters_per_epoch):
            batch = [train_set[i] for i in np.random.permutation(len(train_set))[:opts.batch_size]]
            loss = loss_fn(model(batch), torch.LongTensor([s.label for s in batch]))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.detach().cpu().numpy()
        print("epoch %d loss %f" % (epoch, running / opts.iters_per_epoch))
        print("accuracy train %f test %f" % (accuracy(model, train_set), accuracy(model, test_set)))
        print(model.eps)
    record.append(params_of(model))  # the trained weights close the record


if __name__ == "__main__":
    main()
"""

GIN_STEPS = [
    ("import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
     "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n"),
    ("            loss.backward()\n            optimizer.step()",
     "            grads = loss.backward()\n            optimizer.step(grads)"),
]  # fmt: skip


def write_dataset(root) -> None:
    """A MUTAG-format file: the graph count, then per graph ``n label`` and per node ``tag
    degree neighbours...``; rings (label 0) and stars (label 1) of 5 to 7 nodes."""
    rng = np.random.default_rng(5)
    lines = ["24"]
    for index in range(24):
        n, label = 5 + index % 3, index % 2
        if label == 0:
            neighbours = [[(j - 1) % n, (j + 1) % n] for j in range(n)]
        else:
            neighbours = [list(range(1, n))] + [[0] for _ in range(1, n)]
        lines.append(f"{n} {label}")
        for j in range(n):
            tag = int(rng.integers(0, 3))
            lines.append(" ".join(str(v) for v in [tag, len(neighbours[j]), *neighbours[j]]))
    (root / "dataset" / "MUTAG").mkdir(parents=True)
    (root / "dataset" / "MUTAG" / "MUTAG.txt").write_text("\n".join(lines) + "\n")


NUMBER = r"-?\d+\.\d+(?:e[-+]?\d+)?"


def numbers_of(log: str) -> list[float]:
    return [float(v) for v in re.findall(NUMBER, log)]


@pytest.mark.parametrize(
    "flags",
    [
        ["--learn_eps"],
        ["--graph_pooling_type", "average", "--neighbor_pooling_type", "average"],
        ["--neighbor_pooling_type", "max", "--learn_eps"],
    ],
    ids=["sum-learn-eps", "average", "max-learn-eps"],
)
def test_powerful_gnns_style_gin_trains_as_torch(capsys, monkeypatch, tmp_path, flags):
    write_dataset(tmp_path)
    monkeypatch.chdir(tmp_path)
    argv = ["main.py", "--epochs", "2", "--iters_per_epoch", "3", "--batch_size", "8"]
    argv += [
        "--num_layers",
        "3",
        "--hidden_dim",
        "8",
        "--final_dropout",
        "0",
        "--decay",
        "1e-3",
        *flags,
    ]
    monkeypatch.setattr(sys, "argv", argv)
    records, logs = runs_with_draws(
        GIN_SOURCE,
        GIN_STEPS,
        capsys,
        seed=0,
        initialize=initializer(),
        params_of=params_of,
        __name__="__main__",
    )
    ours, theirs = records[1], records[0]
    assert "loss" in logs[0] and "accuracy train" in logs[0]
    assert re.sub(NUMBER, "#", logs[1]) == re.sub(NUMBER, "#", logs[0])
    np.testing.assert_allclose(numbers_of(logs[1]), numbers_of(logs[0]), rtol=1e-5, atol=2e-6)
    # each MLP's linear layers feed a batch norm, which cancels their biases: only the weight
    # decay moves them, and Adam's steps on them follow the rounding noise where they are small
    before_batch_norm = [name for name in theirs[-1] if ".mlps." in name and name.endswith(".bias")]
    assert before_batch_norm
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=before_batch_norm)
