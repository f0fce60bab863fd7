# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- GraphSAGE as williamleif/graphsage-simple writes it (``graphsage/aggregators.py``,
  ``encoders.py``, ``model.py``'s ``SupervisedGraphSage`` and ``run_cora``), on a small random
  graph for Cora (every degree under the sample size, so no ``random.sample`` of a set, which
  Python 3.11 refuses): ``MeanAggregator`` building a row-normalized mask by
  ``Variable(torch.zeros(len(samp_neighs), len(unique_nodes)))``, ``mask[row_indices,
  column_indices] = 1`` from list comprehensions, ``mask.div(num_neigh)`` and ``mask.mm(...)``;
  ``self.features(torch.LongTensor(unique_nodes_list))`` through an ``nn.Embedding`` whose
  ``weight`` is replaced by ``nn.Parameter(torch.FloatTensor(feat_data), requires_grad=False)``,
  the second layer's features a ``lambda nodes: enc1(nodes).t()``, ``nn.Parameter(
  torch.FloatTensor(embed_dim, 2 * feat_dim))`` filled by the old ``init.xavier_uniform`` (no
  underscore), ``self.weight.mm(combined.t())``, ``enc1.num_samples = 5`` (the original's
  no-op typo), SGD over ``filter(lambda p : p.requires_grad, graphsage.parameters())``,
  ``random.shuffle(train)`` of a list, ``labels[np.array(batch_nodes)]`` and the validation
  F1 by ``f1_score(labels[val], val_output.data.numpy().argmax(axis=1), average="micro")``.

The lines changed: the gradient lines only (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, params_of, port, run_source

SAGE_SOURCE = '''
from torch.nn import init
from torch.autograd import Variable
from collections import defaultdict


# -- graphsage/aggregators.py --
class MeanAggregator(nn.Module):
    """
    Aggregates a node's embeddings using mean of neighbors' embeddings
    """
    def __init__(self, features, cuda=False, gcn=False):
        """
        Initializes the aggregator for a specific graph.

        features -- function mapping LongTensor of node ids to FloatTensor of feature values.
        cuda -- whether to use GPU
        gcn --- whether to perform concatenation GraphSAGE-style, or add self-loops GCN-style
        """

        super(MeanAggregator, self).__init__()

        self.features = features
        self.cuda = cuda
        self.gcn = gcn

    def forward(self, nodes, to_neighs, num_sample=10):
        """
        nodes --- list of nodes in a batch
        to_neighs --- list of sets, each set is the set of neighbors for node in batch
        num_sample --- number of neighbors to sample. No sampling if None.
        """
        # Local pointers to functions (speed hack)
        _set = set
        if not num_sample is None:
            _sample = random.sample
            samp_neighs = [_set(_sample(to_neigh,
                            num_sample,
                            )) if len(to_neigh) >= num_sample else to_neigh for to_neigh in to_neighs]
        else:
            samp_neighs = to_neighs

        if self.gcn:
            samp_neighs = [samp_neigh + set([nodes[i]]) for i, samp_neigh in enumerate(samp_neighs)]
        unique_nodes_list = list(set.union(*samp_neighs))
        unique_nodes = {n:i for i,n in enumerate(unique_nodes_list)}
        mask = Variable(torch.zeros(len(samp_neighs), len(unique_nodes)))
        column_indices = [unique_nodes[n] for samp_neigh in samp_neighs for n in samp_neigh]
        row_indices = [i for i in range(len(samp_neighs)) for j in range(len(samp_neighs[i]))]
        mask[row_indices, column_indices] = 1
        if self.cuda:
            mask = mask.cuda()
        num_neigh = mask.sum(1, keepdim=True)
        mask = mask.div(num_neigh)
        if self.cuda:
            embed_matrix = self.features(torch.LongTensor(unique_nodes_list).cuda())
        else:
            embed_matrix = self.features(torch.LongTensor(unique_nodes_list))
        to_feats = mask.mm(embed_matrix)
        return to_feats


# -- graphsage/encoders.py --
class Encoder(nn.Module):
    """
    Encodes a node's using 'convolutional' GraphSage approach
    """
    def __init__(self, features, feature_dim,
            embed_dim, adj_lists, aggregator,
            num_sample=10,
            base_model=None, gcn=False, cuda=False,
            feature_transform=False):
        super(Encoder, self).__init__()

        self.features = features
        self.feat_dim = feature_dim
        self.adj_lists = adj_lists
        self.aggregator = aggregator
        self.num_sample = num_sample
        if base_model != None:
            self.base_model = base_model

        self.gcn = gcn
        self.embed_dim = embed_dim
        self.cuda = cuda
        self.aggregator.cuda = cuda
        self.weight = nn.Parameter(
                torch.FloatTensor(embed_dim, self.feat_dim if self.gcn else 2 * self.feat_dim))
        init.xavier_uniform(self.weight)

    def forward(self, nodes):
        """
        Generates embeddings for a batch of nodes.

        nodes     -- list of nodes
        """
        neigh_feats = self.aggregator.forward(nodes, [self.adj_lists[int(node)] for node in nodes],
                self.num_sample)
        if not self.gcn:
            if self.cuda:
                self_feats = self.features(torch.LongTensor(nodes).cuda())
            else:
                self_feats = self.features(torch.LongTensor(nodes))
            combined = torch.cat([self_feats, neigh_feats], dim=1)
        else:
            combined = neigh_feats
        combined = F.relu(self.weight.mm(combined.t()))
        return combined


# -- graphsage/model.py --
class SupervisedGraphSage(nn.Module):

    def __init__(self, num_classes, enc):
        super(SupervisedGraphSage, self).__init__()
        self.enc = enc
        self.xent = nn.CrossEntropyLoss()

        self.weight = nn.Parameter(torch.FloatTensor(num_classes, enc.embed_dim))
        init.xavier_uniform(self.weight)

    def forward(self, nodes):
        embeds = self.enc(nodes)
        scores = self.weight.mm(embeds)
        return scores.t()

    def loss(self, nodes, labels):
        scores = self.forward(nodes)
        return self.xent(scores, labels.squeeze())


def run_cora():
    np.random.seed(1)
    random.seed(1)
    num_nodes = 60
    feat_data, labels, adj_lists = load_cora()
    features = nn.Embedding(60, 12)
    features.weight = nn.Parameter(torch.FloatTensor(feat_data), requires_grad=False)
   # features.cuda()

    agg1 = MeanAggregator(features, cuda=True)
    enc1 = Encoder(features, 12, 16, adj_lists, agg1, gcn=True, cuda=False)
    agg2 = MeanAggregator(lambda nodes : enc1(nodes).t(), cuda=False)
    enc2 = Encoder(lambda nodes : enc1(nodes).t(), enc1.embed_dim, 16, adj_lists, agg2,
            base_model=enc1, gcn=True, cuda=False)
    enc1.num_samples = 5
    enc2.num_samples = 5

    graphsage = SupervisedGraphSage(3, enc2)
    initialize(graphsage)
#    graphsage.cuda()
    rand_indices = np.random.permutation(num_nodes)
    test = rand_indices[:10]
    val = rand_indices[10:20]
    train = list(rand_indices[20:])

    optimizer = torch.optim.SGD(filter(lambda p : p.requires_grad, graphsage.parameters()), lr=0.7)
    times = []
    for batch in range(6):
        batch_nodes = train[:16]
        random.shuffle(train)
        start_time = time.time()
        optimizer.zero_grad()
        loss = graphsage.loss(batch_nodes,
                Variable(torch.LongTensor(labels[np.array(batch_nodes)])))
        loss.backward()
        optimizer.step()
        end_time = time.time()
        times.append(end_time-start_time)
        print(batch, loss.data.item())
        record.append(loss.data.item())

    val_output = graphsage.forward(val)
    print("Validation F1:", f1_score(labels[val], val_output.data.numpy().argmax(axis=1), average="micro"))
    print("Average batch time:", np.mean(times))
    record.append(params_of(graphsage))
    record.append(val_output.data.numpy())


import time
run_cora()
'''

SAGE_STEPS = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def _load_cora():
    """A small random graph with Cora's layout: 0/1 features, 3 classes, neighbour sets of
    ints (every node with 2 to 6 neighbours)."""
    rng = np.random.default_rng(53)
    feat_data = (rng.uniform(size=(60, 12)) < 0.3).astype(np.float32)
    labels = rng.integers(0, 3, size=(60, 1))
    adj_lists = {i: set() for i in range(60)}
    for i in range(60):
        for j in rng.choice(60, size=2, replace=False):
            if int(j) != i:
                adj_lists[i].add(int(j))
                adj_lists[int(j)].add(i)
    for i in range(60):
        adj_lists[i].add(i)  # the self loops gcn=True leaves to the graph
    assert max(len(v) for v in adj_lists.values()) < 10
    return feat_data, labels, adj_lists


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
            load_cora=_load_cora,
            f1_score=_f1_micro,
            random=random,
            params_of=params_of,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert "Validation F1:" in logs[0]
    assert [line for line in logs[1].splitlines() if line.startswith("Validation")] == [
        line for line in logs[0].splitlines() if line.startswith("Validation")
    ]
    assert theirs[5] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
