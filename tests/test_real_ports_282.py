"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of gusye1234/LightGCN-PyTorch, a recommender propagating embeddings over a sparse
normalized user-item adjacency, trained under torch and, ported, under retrograd from the
same weights and dropout draws.

What it exercises: the adjacency built by ``scipy.sparse`` (``dok_matrix``, ``tolil``, block
assignment, ``sp.diags``) and turned into a sparse tensor by ``torch.sparse.FloatTensor(index,
data, torch.Size(shape))`` of ``torch.stack([row, col])`` with ``row =
torch.Tensor(coo.row).long()`` and ``torch.FloatTensor(coo.data)``, then
``.coalesce().to(device)``, whole or as folds of rows (one sparse tensor per fold); graph
dropout reading ``g.size()``, ``g.indices().t()`` and ``g.values()``, masking them by
``(torch.rand(len(values)) + keep).int().bool()`` and rebuilding by
``torch.sparse.FloatTensor(index.t(), values, size)``; propagation by ``torch.sparse.mm``
(per fold, joined by ``torch.cat``), ``torch.stack(dim=1)``, ``torch.mean``, ``torch.split``
by sizes; ``nn.Embedding(num_embeddings=, embedding_dim=)`` with ``nn.init.normal_(std=)``;
the BPR loss with ``norm(2).pow(2)`` regularization, ``torch.mul``,
``torch.nn.functional.softplus``, Adam, ``loss.cpu().item()``; ratings by ``nn.Sigmoid`` of
``torch.matmul(u, items.t())``; ``to_dense()``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``self.opt.step(grads)``). The dropout draws come from one shared stream.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

LIGHTGCN_SOURCE = """
import torch
from torch import nn, optim
from time import time


def to_sparse_tensor(mat):
    coo = mat.tocoo().astype(np.float32)
    index = torch.stack([torch.Tensor(coo.row).long(), torch.Tensor(coo.col).long()])
    return torch.sparse.FloatTensor(index, torch.FloatTensor(coo.data), torch.Size(coo.shape))


def normalized_graph(R, folds):
    # [[0, R], [R^T, 0]] scaled by D^-1/2 on both sides; one sparse tensor per fold of rows
    n_u, n_i = R.shape
    n = n_u + n_i
    began = time()
    A = sp.dok_matrix((n, n), dtype=np.float32).tolil()
    A[:n_u, n_u:] = R.tolil()
    A[n_u:, :n_u] = R.T.tolil()
    deg = np.array(A.todok().sum(axis=1)).flatten()
    scale = np.power(deg, -0.5)
    scale[np.isinf(scale)] = 0.0
    D = sp.diags(scale)
    A = D.dot(A).dot(D).tocsr()
    if folds == 1:
        return to_sparse_tensor(A).coalesce().to(cfg["device"])
    step = n // folds
    bounds = [k * step for k in range(folds)] + [n]
    pieces = zip(bounds, bounds[1:])
    return [to_sparse_tensor(A[a:b]).coalesce().to(cfg["device"]) for a, b in pieces]


class GraphRecommender(nn.Module):
    def __init__(self, cfg, R):
        super().__init__()
        self.cfg = cfg
        self.n_users, self.n_items = R.shape
        self.users = nn.Embedding(num_embeddings=self.n_users, embedding_dim=cfg["dim"])
        self.items = nn.Embedding(num_embeddings=self.n_items, embedding_dim=cfg["dim"])
        nn.init.normal_(self.users.weight, std=0.1)
        nn.init.normal_(self.items.weight, std=0.1)
        self.squash = nn.Sigmoid()
        self.graph = normalized_graph(R, cfg["folds"])
        print("graph ready, folds:", cfg["folds"])

    @staticmethod
    def drop_edges(g, keep):
        size, index, values = g.size(), g.indices().t(), g.values()
        kept = (torch.rand(len(values)) + keep).int().bool()  # 1 with probability keep
        return torch.sparse.FloatTensor(index[kept].t(), values[kept] / keep, size)

    def propagate(self):
        graph = self.graph
        if self.cfg["edge_dropout"] and self.training:
            print("dropping edges")
            keep = self.cfg["keep"]
            if isinstance(graph, list):
                graph = [self.drop_edges(g, keep) for g in graph]
            else:
                graph = self.drop_edges(graph, keep)
        h = torch.cat([self.users.weight, self.items.weight])
        layers = [h]
        for _ in range(self.cfg["hops"]):
            if isinstance(graph, list):
                h = torch.cat([torch.sparse.mm(g, h) for g in graph], dim=0)
            else:
                h = torch.sparse.mm(graph, h)
            layers.append(h)
        mixed = torch.mean(torch.stack(layers, dim=1), dim=1)
        return torch.split(mixed, [self.n_users, self.n_items])

    def scores(self, users):
        u, i = self.propagate()
        return self.squash(torch.matmul(u[users.long()], i.t()))

    def bpr(self, users, pos, neg):
        u, i = self.propagate()
        pos_score = torch.sum(torch.mul(u[users], i[pos]), dim=1)
        neg_score = torch.sum(torch.mul(u[users], i[neg]), dim=1)
        ego = [self.users(users), self.items(pos), self.items(neg)]
        l2 = 0.5 * sum(e.norm(2).pow(2) for e in ego) / float(len(users))
        return torch.mean(torch.nn.functional.softplus(neg_score - pos_score)), l2


class Trainer:
    def __init__(self, model, cfg):
        self.model, self.decay = model, cfg["decay"]
        self.opt = optim.Adam(model.parameters(), lr=cfg["lr"])

    def step(self, users, pos, neg):
        ranking, l2 = self.model.bpr(users.long(), pos.long(), neg.long())
        loss = ranking + self.decay * l2
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.cpu().item()


model = GraphRecommender(cfg, interactions)
initialize(model)
trainer = Trainer(model, cfg)
first = model.graph[0] if isinstance(model.graph, list) else model.graph
record.append(first.to_dense().numpy())
for who, liked, disliked in batches:
    model.train()
    record.append(trainer.step(torch.tensor(who), torch.tensor(liked), torch.tensor(disliked)))
    record.append(params_of(model))
model.eval()
record.append(model.scores(torch.tensor([1, 3, 4])).detach().numpy())
"""

LIGHTGCN_STEPS = [
    (
        "        loss.backward()\n        self.opt.step()\n",
        "        grads = loss.backward()\n        self.opt.step(grads)\n",
    ),
    (
        "import torch\nfrom torch import nn, optim\n",
        "import retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
]


@pytest.mark.parametrize("folds", [1, 3], ids=["whole", "A_split"])
@pytest.mark.parametrize("edge_dropout", [False, True], ids=["no_dropout", "graph_dropout"])
def test_lightgcn_trains_as_torch(capsys, folds, edge_dropout):
    rng = np.random.default_rng(282)
    n_users, n_items = 6, 8
    dense = (rng.random((n_users, n_items)) < 0.35).astype(np.float32)
    dense[0, 0] = dense[5, 7] = 1.0
    batches = [
        (rng.integers(0, n_users, 5), rng.integers(0, n_items, 5), rng.integers(0, n_items, 5))
        for _ in range(3)
    ]
    cfg = dict(
        folds=folds, dim=4, hops=2, keep=0.6, edge_dropout=edge_dropout, decay=1e-3, lr=0.05,
        device="cpu",
    )  # fmt: skip
    (theirs, ours), logs = runs_with_draws(
        LIGHTGCN_SOURCE, LIGHTGCN_STEPS, capsys, 2820, cfg=cfg, sp=sp,
        interactions=sp.csr_matrix(dense), batches=batches, initialize=initializer(),
        params_of=params_of,
    )  # fmt: skip
    assert ("dropping edges" in logs[0]) == edge_dropout
    assert logs[1] == logs[0]
    first_rows = (n_users + n_items) // folds
    assert theirs[0].shape == (first_rows, n_users + n_items)
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
