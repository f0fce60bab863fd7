"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- a two-layer GraphSAGE node classifier written here in the style of williamleif/graphsage-simple,
  on a small random graph with Cora's layout (every degree under the sample size, so no
  ``random.sample`` of a set, which Python 3.11 refuses). The surface: a mean aggregator
  building a row-normalized mask by ``Variable(torch.zeros(rows, cols))``, ``mask[rows_list,
  cols_list] = 1`` from list comprehensions, ``mask.sum(1, keepdim=True)``, ``mask.div(...)``
  and ``mask.mm(...)``; node features looked up by ``torch.LongTensor(list)`` through an
  ``nn.Embedding`` whose ``weight`` is replaced by ``nn.Parameter(torch.FloatTensor(array),
  requires_grad=False)``, the second layer's features a ``lambda ids: layer1(ids).t()``;
  weights made by ``nn.Parameter(torch.FloatTensor(out, in))`` and filled by the old
  ``init.xavier_uniform`` (no underscore), ``weight.mm(h.t())``, ``torch.cat(..., dim=1)``,
  ``nn.CrossEntropyLoss`` of ``labels.squeeze()``, an attribute set on a module after
  construction, SGD over ``filter(lambda p: p.requires_grad, model.parameters())``,
  ``random.shuffle`` of a list, ``labels[np.array(batch)]``, ``loss.data.item()`` and a micro
  F1 of ``out.data.numpy().argmax(axis=1)``.

The lines changed: the gradient lines only (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, params_of, port, run_source

SAGE_SOURCE = """
from torch.nn import init
from torch.autograd import Variable  # (the pre-0.4 wrapper: a no-op now)


class NeighbourMean(nn.Module):
    # mean of the neighbours' features, as one (batch x touched nodes) matrix product
    def __init__(self, lookup):
        super(NeighbourMean, self).__init__()
        self.lookup = lookup

    def forward(self, neighbour_sets):
        touched = sorted(set().union(*neighbour_sets))
        column_of = {node: c for c, node in enumerate(touched)}
        weights = Variable(torch.zeros(len(neighbour_sets), len(touched)))
        rows = [r for r, hood in enumerate(neighbour_sets) for _ in hood]
        cols = [column_of[node] for hood in neighbour_sets for node in hood]
        weights[rows, cols] = 1
        weights = weights.div(weights.sum(1, keepdim=True))
        return weights.mm(self.lookup(torch.LongTensor(touched)))


class SageLayer(nn.Module):
    # self features next to the neighbour mean, projected: embeddings come out as columns
    def __init__(self, lookup, in_dim, out_dim, graph, below=None):
        super(SageLayer, self).__init__()
        self.lookup = lookup
        if below is not None:  # a lambda lookup hides the layer below: register it
            self.below = below
        self.graph = graph
        self.out_dim = out_dim
        self.mean = NeighbourMean(lookup)
        self.weight = nn.Parameter(torch.FloatTensor(out_dim, 2 * in_dim))
        init.xavier_uniform(self.weight)  # (the deprecated spelling)

    def forward(self, ids):
        own = self.lookup(torch.LongTensor(ids))
        around = self.mean([self.graph[int(i)] for i in ids])
        both = torch.cat([own, around], dim=1)
        return F.relu(self.weight.mm(both.t()))


class NodeClassifier(nn.Module):
    def __init__(self, encoder, n_classes):
        super(NodeClassifier, self).__init__()
        self.encoder = encoder
        self.criterion = nn.CrossEntropyLoss()
        self.weight = nn.Parameter(torch.FloatTensor(n_classes, encoder.out_dim))
        init.xavier_uniform(self.weight, gain=1.0)

    def forward(self, ids):
        return self.weight.mm(self.encoder(ids)).t()

    def loss(self, ids, targets):
        return self.criterion(self.forward(ids), targets.squeeze())


np.random.seed(7)
random.seed(7)
features, labels, graph = make_graph()
table = nn.Embedding(features.shape[0], features.shape[1])
table.weight = nn.Parameter(torch.FloatTensor(features), requires_grad=False)

first = SageLayer(table, features.shape[1], 10, graph)
second = SageLayer(lambda ids: first(ids).t(), first.out_dim, 8, graph, below=first)
second.sample_size = 4  # (an attribute added after construction)
model = NodeClassifier(second, 3)
initialize(model)

order = np.random.permutation(features.shape[0])
held_out, train = order[:12], list(order[12:])
optimizer = torch.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.5)
for step in range(4):
    random.shuffle(train)
    batch = train[:12]
    optimizer.zero_grad()
    loss = model.loss(batch, Variable(torch.LongTensor(labels[np.array(batch)])))
    loss.backward()
    optimizer.step()
    print("step", step, "loss", round(loss.data.item(), 4))
    record.append(float(loss.data.item()))

scores = model(held_out)
guesses = scores.data.numpy().argmax(axis=1)
print("held-out F1:", f1_score(labels[held_out], guesses, average="micro"))
record.append(params_of(model))
record.append(scores.data.numpy())
"""

SAGE_STEPS = [
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def _make_graph():
    """A small random graph with Cora's layout: 0/1 features, 3 classes, neighbour sets of
    ints (every node with 1 to 6 neighbours, itself among them)."""
    rng = np.random.default_rng(53)
    features = (rng.uniform(size=(40, 9)) < 0.3).astype(np.float32)
    labels = rng.integers(0, 3, size=(40, 1))
    graph = {i: {i} for i in range(40)}
    for i in range(40):
        for j in rng.choice(40, size=2, replace=False):
            graph[i].add(int(j))
            graph[int(j)].add(i)
    return features, labels, graph


def _f1_micro(truth, predicted, average):
    assert average == "micro"  # sklearn's micro F1 of single-label classes: the accuracy
    return float((np.asarray(truth).reshape(-1) == np.asarray(predicted)).mean())


def test_graphsage_simple_trains_as_torch(capsys):
    records, logs = [], []
    states = []
    for lib in (torch, rg):
        record = []

        def initialize(module, lib=lib):
            if lib is torch:
                states.append(
                    {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
                )
            else:
                module.load_state_dict(states[0])

        torch.manual_seed(0)  # torch's initial weights, whatever ran before
        text = SAGE_SOURCE if lib is torch else port(SAGE_SOURCE, SAGE_STEPS)
        text = text.replace("from torch.", f"from {lib.__name__}.")
        run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            make_graph=_make_graph,
            f1_score=_f1_micro,
            random=random,
            params_of=params_of,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert "held-out F1:" in logs[0]
    assert [line for line in logs[1].splitlines() if line.startswith("held-out")] == [
        line for line in logs[0].splitlines() if line.startswith("held-out")
    ]
    assert theirs[3] < theirs[0]
    assert "0.encoder.below.weight" in theirs[4]  # the first layer trains too
    frozen = ours[4]["0.encoder.below.lookup.weight"]  # (requires_grad=False: SGD skips it)
    np.testing.assert_array_equal(frozen, _make_graph()[0])
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
