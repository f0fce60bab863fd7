"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of plain-torch graph attention layers built around ``torch.sparse.softmax`` (PyTorch
ports of the original GAT heads, and a memory aggregator over an ``edge_index``).

- a dense and a sparse attention head sharing one parameter layout: node scores from two
  ``nn.Linear(d, 1)``; the dense head's ``F.softmax(F.leaky_relu(s + t.transpose(1, 2)) +
  mask, dim=-1)``, the sparse head's edge scores ``s[row] + t[col]`` from
  ``adj.coalesce().indices()``, ``torch.sparse_coo_tensor(torch.stack([row, col]), e, (n, n),
  device=e.device)``, ``torch.sparse.softmax(..., dim=1)`` and ``torch.sparse.mm``; a bias
  ``nn.Parameter``, a residual projection, ``F.elu`` as a default argument; two sparse heads in
  an ``nn.ModuleList`` concatenated and one more, trained by Adam with weight decay on node
  labels, then a dense head given a sparse head's ``state_dict`` computing the same;
- an aggregator over an ``edge_index``: weights made by ``torch.Tensor(n, m)``, filled by
  ``kaiming_normal_`` and wrapped in ``nn.Parameter``, ``torch.sum(..., axis=-1)`` of gathered
  queries and keys, ``torch.sparse.FloatTensor(edge_index, values, torch.Size([...]))``,
  ``torch.div`` of the sparse tensor by a number, ``torch.sparse.mm(torch.sparse.softmax(...),
  V)``, trained by Adam on ``F.mse_loss``.

What stands in: random graphs with self-loops (every row has an entry), random features and
labels from the seeded global streams; no dropout. The port changes the gradient lines and the
import lines naming ``torch``; ``initialize`` gives it torch's initial weights.
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GAT_HEADS_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F


class HeadBase(nn.Module):
    def __init__(self, d_in, d_out, residual=False, activation=F.elu):
        super().__init__()
        self.embed = nn.Linear(d_in, d_out, bias=False)
        self.score_src = nn.Linear(d_out, 1)
        self.score_dst = nn.Linear(d_out, 1)
        self.bias = nn.Parameter(torch.zeros(d_out))
        # a projection only where the widths differ; otherwise the input is added as is
        self.skip = nn.Linear(d_in, d_out, bias=False) if residual and d_in != d_out else None
        self.residual, self.activation = residual, activation

    def finish(self, mixed, x):
        out = mixed + self.bias
        if self.residual:
            out = out + (self.skip(x) if self.skip is not None else x)
        return out if self.activation is None else self.activation(out)


class DenseHead(HeadBase):
    def forward(self, x, mask):
        z = self.embed(x)
        pair = self.score_src(z) + self.score_dst(z).transpose(1, 2)
        weights = F.softmax(F.leaky_relu(pair) + mask, dim=-1)
        return self.finish(torch.matmul(weights, z), x)


class SparseHead(HeadBase):
    def forward(self, x, adj):
        n = x.shape[1]
        z = self.embed(x)
        src, dst = self.score_src(z).reshape(n), self.score_dst(z).reshape(n)
        row, col = adj.coalesce().indices()
        edge = F.leaky_relu(src[row] + dst[col])
        scores = torch.sparse_coo_tensor(torch.stack([row, col]), edge, (n, n), device=edge.device)
        weights = torch.sparse.softmax(scores, dim=1)  # over each node's neighbours only
        return self.finish(torch.sparse.mm(weights, z.squeeze(0)).unsqueeze(0), x)


n, d, classes = 9, 5, 3
links = (np.random.rand(n, n) < 0.3) | np.eye(n, dtype=bool)
links = links | links.T
src_ids, dst_ids = np.nonzero(links)
where = torch.tensor(np.stack([src_ids, dst_ids]))
adj = torch.sparse_coo_tensor(where, torch.ones(len(src_ids)), (n, n))
mask = torch.tensor(np.where(links, 0.0, -1e9)[None], dtype=torch.float32)
x = torch.randn(1, n, d)
y = torch.tensor(np.random.randint(0, classes, n))

first = nn.ModuleList(SparseHead(d, 4, residual=True) for _ in range(2))
last = SparseHead(8, classes, residual=True, activation=None)
initialize(first)
initialize(last)
opt = torch.optim.Adam([*first.parameters(), *last.parameters()], lr=0.01, weight_decay=5e-4)
for _ in range(4):
    opt.zero_grad()
    hidden = torch.cat([head(x, adj) for head in first], dim=-1)
    loss = F.cross_entropy(last(hidden, adj).squeeze(0), y)
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(params_of(first, last))

twin = DenseHead(d, 4, residual=True)
twin.load_state_dict(first[1].state_dict())
with torch.no_grad():
    via_mask, via_sparse = twin(x, mask), first[1](x, adj)
record.append(via_mask.numpy().copy())
record.append(float((via_mask - via_sparse).abs().max() < 1e-5))
"""

AGGREGATOR_SOURCE = """
import torch
import math


def fresh_weight(rows, cols):
    w = torch.Tensor(rows, cols)  # uninitialised until kaiming fills it
    torch.nn.init.kaiming_normal_(w)
    return torch.nn.Parameter(w)


class EdgeAggregator(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        part = width // heads
        self.scale = math.sqrt(part)
        self.q, self.k, self.v = (fresh_weight(width, part) for _ in range(3))

    def forward(self, nodes, edge_index):
        q, k, v = nodes @ self.q, nodes @ self.k, nodes @ self.v
        logits = torch.sum(q[edge_index[0]] * k[edge_index[1]], axis=-1)
        size = torch.Size([nodes.shape[0], nodes.shape[0]])
        scores = torch.div(torch.sparse.FloatTensor(edge_index, logits, size), self.scale)
        return torch.sparse.mm(torch.sparse.softmax(scores, dim=1), v)


count = 8
pairs = [[i, (i + hop) % count] for i in range(count) for hop in (0, 2, 3)]
edge_index = torch.tensor(np.array(pairs).T)
nodes, goal = torch.randn(count, 6), torch.randn(count, 3)
agg = EdgeAggregator(6, 2)
initialize(agg)
opt = torch.optim.Adam(agg.parameters(), lr=0.02)
for _ in range(4):
    opt.zero_grad()
    loss = F.mse_loss(agg(nodes, edge_index), goal)
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(params_of(agg))
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_sparse_attention_heads_train_as_torch(capsys):
    steps = [*STEPS, ("import torch.nn as nn\n", "import retrograd.nn as nn\n")]
    records, _ = runs_with_draws(
        GAT_HEADS_SOURCE, steps, capsys, seed=8, initialize=initializer(), params_of=params_of
    )
    ours, theirs = records[1], records[0]
    assert theirs[-1] == ours[-1] == 1.0
    assert theirs[3] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_edge_aggregator_sparse_softmax_attention_trains_as_torch(capsys):
    records, _ = runs_with_draws(
        AGGREGATOR_SOURCE,
        STEPS,
        capsys,
        seed=9,
        initialize=initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert theirs[3] < theirs[0]
    assert np.isfinite(theirs[-1]["0.q"]).all()
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
