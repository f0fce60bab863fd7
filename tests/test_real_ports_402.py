# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
two graph attention layers written in plain torch around ``torch.sparse.softmax``:

- a PyTorch port of Veličković's GAT heads (``AttentionHead`` and ``SpAttentionHead``, "equivalent
  to attn_head()/sp_attn_head() in the original TF implementation"): the dense head's
  ``F.softmax(F.leaky_relu(logits) + bias_mat, dim=-1)`` over an outer sum of ``nn.Linear``
  scores, and the sparse head's edge logits ``f_1[row] + f_2[col]`` from
  ``adj_mat.coalesce().indices()``, ``torch.sparse_coo_tensor(torch.stack([row, col]), e, ...,
  device=e.device)``, ``torch.sparse.softmax(sparse_logits, dim=1)`` and ``torch.sparse.mm``,
  residual projections and ``F.elu``; two sparse heads concatenated and one more, trained by
  Adam on node labels, and the dense head given the sparse head's weights computing the same;
- a ``MemoryAggregator`` (one graph-attention head over an ``edge_index``: ``torch.Tensor(n,
  m)`` filled by ``kaiming_normal_`` and wrapped in ``nn.Parameter``, ``torch.sum(..., axis=-1)``
  of gathered queries and keys, ``torch.sparse.FloatTensor(edge_index, sparse_A, torch.Size)``,
  ``torch.div`` of the sparse tensor by a number, ``torch.sparse.mm(torch.sparse.softmax(...),
  V)``), trained by Adam.

What stands in: a random graph of 10 nodes with self-loops (every row has an entry), random
features and labels; the drop rates are 0 (the masks are each library's own draws). The port
changes the gradient lines and the import lines naming ``torch``; ``initialize`` gives it
torch's initial weights.
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GAT_HEADS_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class AttentionHead(nn.Module):
    \"\"\"Dense graph attention head. Equivalent to attn_head() in the original TF implementation.\"\"\"

    def __init__(self, in_features, out_sz, in_drop=0.0, coef_drop=0.0, residual=False, activation=F.elu):
        super().__init__()
        self.in_drop = in_drop
        self.coef_drop = coef_drop
        self.residual = residual
        self.activation = activation


        self.W = nn.Linear(in_features, out_sz, bias=False)
        # Attention score projections: f_1 and f_2
        self.a_1 = nn.Linear(out_sz, 1)
        self.a_2 = nn.Linear(out_sz, 1)

        self.bias = nn.Parameter(torch.zeros(out_sz))

        # Residual projection when dimensions differ
        if residual and in_features != out_sz:
            self.res_proj = nn.Linear(in_features, out_sz, bias=False)
        else:
            self.res_proj = None

    def forward(self, seq, bias_mat):
        # seq:      [batch, nb_nodes, in_features]
        # bias_mat: [batch, nb_nodes, nb_nodes] or broadcastable
        #           contains 0 for edges, -1e9 for non-edges (same role as TF bias_mat)

        if self.in_drop != 0.0 and self.training:
            seq = F.dropout(seq, p=self.in_drop)

        seq_fts = self.W(seq)                          # [batch, nb_nodes, out_sz]

        f_1 = self.a_1(seq_fts)                        # [batch, nb_nodes, 1]
        f_2 = self.a_2(seq_fts)                        # [batch, nb_nodes, 1]
        # Outer sum: logits[b, i, j] = f_1[b, i] + f_2[b, j]
        logits = f_1 + f_2.transpose(1, 2)             # [batch, nb_nodes, nb_nodes]
        coefs = F.softmax(F.leaky_relu(logits) + bias_mat, dim=-1)

        if self.coef_drop != 0.0 and self.training:
            coefs = F.dropout(coefs, p=self.coef_drop)
        if self.in_drop != 0.0 and self.training:
            seq_fts = F.dropout(seq_fts, p=self.in_drop)

        vals = torch.matmul(coefs, seq_fts)            # [batch, nb_nodes, out_sz]
        ret = vals + self.bias

        if self.residual:
            if self.res_proj is not None:
                ret = ret + self.res_proj(seq)
            else:
                ret = ret + seq

        if self.activation is not None:
            return self.activation(ret)
        return ret


class SpAttentionHead(nn.Module):
    \"\"\"Sparse graph attention head. Equivalent to sp_attn_head() in the original TF implementation.
    Only supports batch_size=1, matching the original constraint.\"\"\"

    def __init__(self, in_features, out_sz, in_drop=0.0, coef_drop=0.0, residual=False, activation=F.elu):
        super().__init__()
        self.in_drop = in_drop
        self.coef_drop = coef_drop
        self.residual = residual
        self.activation = activation
        self.out_sz = out_sz

        self.W = nn.Linear(in_features, out_sz, bias=False)
        self.a_1 = nn.Linear(out_sz, 1)
        self.a_2 = nn.Linear(out_sz, 1)
        self.bias = nn.Parameter(torch.zeros(out_sz))

        if residual and in_features != out_sz:
            self.res_proj = nn.Linear(in_features, out_sz, bias=False)
        else:
            self.res_proj = None

    def forward(self, seq, adj_mat, nb_nodes):
        # seq:     [1, nb_nodes, in_features]  (batch_size must be 1)
        # adj_mat: sparse COO tensor [nb_nodes, nb_nodes], values are 1 for edges

        if self.in_drop != 0.0 and self.training:
            seq = F.dropout(seq, p=self.in_drop)

        seq_fts = self.W(seq)                           # [1, nb_nodes, out_sz]

        f_1 = self.a_1(seq_fts).reshape(nb_nodes)      # [nb_nodes]
        f_2 = self.a_2(seq_fts).reshape(nb_nodes)      # [nb_nodes]

        # Get edge (row, col) indices from the sparse adjacency matrix
        indices = adj_mat.coalesce().indices()           # [2, nnz]
        row, col = indices[0], indices[1]               # row=i (source), col=j (neighbor)

        # Attention logit for each edge: e[i,j] = f_1[i] + f_2[j]
        e = f_1[row] + f_2[col]                         # [nnz]
        e = F.leaky_relu(e)

        # Row-wise sparse softmax via torch.sparse.softmax
        sparse_logits = torch.sparse_coo_tensor(
            torch.stack([row, col]), e, (nb_nodes, nb_nodes), device=e.device
        )
        coefs_sparse = torch.sparse.softmax(sparse_logits, dim=1)  # row-wise

        if self.coef_drop != 0.0 and self.training:
            coefs_sparse = torch.sparse_coo_tensor(
                coefs_sparse.coalesce().indices(),
                F.dropout(coefs_sparse.coalesce().values(), p=self.coef_drop),
                coefs_sparse.shape,
                device=e.device,
            )

        if self.in_drop != 0.0 and self.training:
            seq_fts = F.dropout(seq_fts, p=self.in_drop)

        # Sparse matrix multiply: [nb_nodes, nb_nodes] x [nb_nodes, out_sz]
        seq_fts_sq = seq_fts.squeeze(0)                 # [nb_nodes, out_sz]
        vals = torch.sparse.mm(coefs_sparse, seq_fts_sq)  # [nb_nodes, out_sz]
        vals = vals.unsqueeze(0)                        # [1, nb_nodes, out_sz]
        ret = vals + self.bias

        if self.residual:
            if self.res_proj is not None:
                ret = ret + self.res_proj(seq)
            else:
                ret = ret + seq

        if self.activation is not None:
            return self.activation(ret)
        return ret


# -- a small driver: a two-layer sparse GAT (two heads concatenated, then one) on a toy graph --
nb_nodes, in_features, n_classes = 10, 6, 3
adjacency = (np.random.rand(nb_nodes, nb_nodes) < 0.25) | np.eye(nb_nodes, dtype=bool)
adjacency = adjacency | adjacency.T
rows, cols = np.nonzero(adjacency)
adj_mat = torch.sparse_coo_tensor(torch.tensor(np.stack([rows, cols])), torch.ones(len(rows)), (nb_nodes, nb_nodes))
bias_mat = torch.tensor(np.where(adjacency, 0.0, -1e9)[None], dtype=torch.float32)
seq = torch.randn(1, nb_nodes, in_features)
labels = torch.tensor(np.random.randint(0, n_classes, nb_nodes))

heads = nn.ModuleList([SpAttentionHead(in_features, 4, residual=True) for _ in range(2)])
out_head = SpAttentionHead(8, n_classes, residual=True, activation=None)
initialize(heads)
initialize(out_head)
optimizer = torch.optim.Adam(list(heads.parameters()) + list(out_head.parameters()), lr=0.01, weight_decay=5e-4)
for step in range(5):
    optimizer.zero_grad()
    h = torch.cat([head(seq, adj_mat, nb_nodes) for head in heads], dim=-1)
    logits = out_head(h, adj_mat, nb_nodes).squeeze(0)
    loss = F.cross_entropy(logits, labels)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(heads, out_head))

# the dense head, given the first sparse head's weights, computes what it computes
dense = AttentionHead(in_features, 4, residual=True)
dense.load_state_dict(heads[0].state_dict())
with torch.no_grad():
    sparse_out = heads[0](seq, adj_mat, nb_nodes)
    dense_out = dense(seq, bias_mat)
record.append(dense_out.numpy().copy())
record.append(float((dense_out - sparse_out).abs().max() < 1e-5))
"""

MEMORY_AGGREGATOR_SOURCE = """
import torch
import math


class MemoryAggregator(torch.nn.Module):
    def __init__(self, input_size, n_heads):

        super().__init__()

        self.input_size = input_size
        self.n_head = n_heads
        self.head_size = input_size // n_heads
        self.dk = math.sqrt(self.head_size)

        # query matrix
        Wq = torch.Tensor(self.input_size, self.head_size)
        torch.nn.init.kaiming_normal_(Wq)
        self.Wq = torch.nn.Parameter(Wq)
        # key matrix
        Wk = torch.Tensor(self.input_size, self.head_size)
        torch.nn.init.kaiming_normal_(Wk)
        self.Wk = torch.nn.Parameter(Wk)
        # value matrix
        Wv = torch.Tensor(self.input_size, self.head_size)
        torch.nn.init.kaiming_normal_(Wv)
        self.Wv = torch.nn.Parameter(Wv)

    def forward(self, X, edge_index):
        Q = torch.matmul(X, self.Wq)
        K = torch.matmul(X, self.Wk)
        V = torch.matmul(X, self.Wv)

        sparse_A = torch.sum(Q[edge_index[0, :]] *
                             K[edge_index[1, :]], axis=-1)

        dense_A = torch.sparse.FloatTensor(
            edge_index, sparse_A, torch.Size([X.shape[0], X.shape[0]]))

        masked_A = torch.div(dense_A, self.dk)

        attention = torch.sparse.mm(
            torch.sparse.softmax(masked_A, dim=1), V)

        return attention


# -- a small driver: regress each node's neighbourhood mean through the aggregator --
n_nodes = 9
edge_index = torch.tensor(np.array([[i, (i + k) % n_nodes] for i in range(n_nodes) for k in (0, 1, 3)]).T)
X = torch.randn(n_nodes, 8)
target = torch.randn(n_nodes, 4)
aggregator = MemoryAggregator(8, 2)
initialize(aggregator)
optimizer = torch.optim.Adam(aggregator.parameters(), lr=0.02)
for step in range(5):
    optimizer.zero_grad()
    loss = F.mse_loss(aggregator(X, edge_index), target)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(aggregator))
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_gat_sparse_attention_heads_train_as_torch(capsys):
    steps = [*STEPS, ("import torch.nn as nn\n", "import retrograd.nn as nn\n")]
    steps.append(("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"))
    records, _ = runs_with_draws(
        GAT_HEADS_SOURCE, steps, capsys, seed=8, initialize=initializer(), params_of=params_of
    )
    ours, theirs = records[1], records[0]
    assert theirs[-1] == ours[-1] == 1.0
    assert theirs[4] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_memory_aggregator_sparse_softmax_attention_trains_as_torch(capsys):
    records, _ = runs_with_draws(
        MEMORY_AGGREGATOR_SOURCE,
        STEPS,
        capsys,
        seed=9,
        initialize=initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert theirs[4] < theirs[0]
    assert np.isfinite(theirs[-1]["0.Wq"]).all()
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
