"""Real ports, continued (the harness: ``tests/real_ports.py``): a variational graph
auto-encoder for link prediction written here in the style of zfjsail/gae-pytorch, run on
torch and, ported, on retrograd from the same weights and draws.

The program reads Planetoid-format pickles through ``pickle._Unpickler`` with ``encoding =
"latin1"``, builds node features by ``torch.FloatTensor(np.array(m.todense()))`` and the
adjacency through networkx (``from_dict_of_lists``, ``adjacency_matrix``), holds out positive
edges and samples negative ones with ``np.random``, normalises the graph with SciPy and hands it
over as ``torch.sparse.FloatTensor(indices, values, torch.Size(...))`` of ``torch.from_numpy``
parts. The model: graph convolutions holding ``Parameter(torch.FloatTensor(n_in, n_out))``
filled by ``xavier_uniform_`` (``Module`` and ``Parameter`` imported from ``torch.nn.modules
.module`` and ``torch.nn.parameter``), ``torch.spmm(adj, support)`` and their own
``__repr__``; the reparameterisation ``torch.randn_like(std)`` then ``eps.mul(std).add_(mu)``;
an inner-product decoder ``torch.mm(z, z.t())``; the weighted loss ``torch.sigmoid(1 -
out).log()`` under ``torch.neg(torch.mean(...))`` plus the KL term; a module-level
``argparse`` and an ``Adam`` loop scoring ROC/AP with scikit-learn on ``mu.data.numpy()``.

The original port exposed no defect of its own (it passed when added); the file guards that
this surface trains as torch does. What stands in: the Cora pickles are a small synthetic
graph in their format (two communities of 14 nodes, sparse binary features, written to the
test's working directory); the arguments are small. The program calls ``initialize(model)``
(the port gets torch's initial weights) and records the trained parameters; the port changes
the gradient lines and the import lines naming ``torch``; ``randn_like`` draws from one stream
shared by both runs.
"""

from __future__ import annotations

import pickle
import re
import sys

import numpy as np
import scipy.sparse as sp

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

GAE_SOURCE = """
# Link prediction with a variational graph auto-encoder (Kipf & Welling 2016).
import argparse
import pickle

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.modules.loss
from sklearn.metrics import average_precision_score, roc_auc_score
from torch import optim
from torch.nn import functional as F
from torch.nn.modules.module import Module as BaseModule
from torch.nn.parameter import Parameter as Weight

cli = argparse.ArgumentParser(description="VGAE on a Planetoid graph")
cli.add_argument("--dataset", default="cora")
cli.add_argument("--epochs", type=int, default=100)
cli.add_argument("--hidden", type=int, nargs=2, default=[32, 16])
cli.add_argument("--lr", type=float, default=0.01)
opts = cli.parse_args()


def read_pickle(path):
    with open(path, "rb") as fh:
        unpickler = pickle._Unpickler(fh)
        unpickler.encoding = "latin1"  # the files were written by Python 2
        return unpickler.load()


def load_graph(name):
    part = {key: read_pickle(f"data/ind.{name}.{key}") for key in ("tx", "allx", "graph")}
    with open(f"data/ind.{name}.test.index") as fh:
        test_order = [int(row) for row in fh if row.strip()]
    rows = sp.vstack((part["allx"], part["tx"])).tolil()
    rows[test_order, :] = rows[sorted(test_order), :]
    features = torch.FloatTensor(np.array(rows.todense()))
    return nx.adjacency_matrix(nx.from_dict_of_lists(part["graph"])), features


def split_edges(adj, held_out=0.15):
    upper = sp.triu(adj, k=1).tocoo()
    pairs = np.stack([upper.row, upper.col], axis=1)
    np.random.shuffle(pairs)
    n_test = max(1, int(held_out * len(pairs)))
    test, train = pairs[:n_test], pairs[n_test:]
    linked = {tuple(p) for p in pairs} | {tuple(p[::-1]) for p in pairs}
    negatives = []
    while len(negatives) < n_test:
        i, j = np.random.randint(0, adj.shape[0], size=2)
        if i != j and (i, j) not in linked:
            negatives.append((i, j))
    kept = sp.coo_matrix((np.ones(len(train)), (train[:, 0], train[:, 1])), shape=adj.shape)
    return (kept + kept.T).tocsr(), test, np.array(negatives)


def to_sparse_tensor(m):
    m = m.tocoo().astype(np.float32)
    where = torch.from_numpy(np.vstack((m.row, m.col)).astype(np.int64))
    return torch.sparse.FloatTensor(where, torch.from_numpy(m.data), torch.Size(m.shape))


def normalised(adj):
    looped = sp.coo_matrix(adj) + sp.eye(adj.shape[0])
    scale = sp.diags(np.power(np.asarray(looped.sum(1)), -0.5).ravel())
    return to_sparse_tensor(scale @ looped @ scale)


def link_scores(emb, pos, neg):
    logits = emb @ emb.T
    guess = [1 / (1 + np.exp(-logits[i, j])) for i, j in np.concatenate([pos, neg])]
    truth = np.r_[np.ones(len(pos)), np.zeros(len(neg))]
    return roc_auc_score(truth, guess), average_precision_score(truth, guess)


class GraphConv(BaseModule):
    def __init__(self, n_in, n_out, act=F.relu):
        super().__init__()
        self.n_in, self.n_out, self.act = n_in, n_out, act
        self.weight = Weight(torch.FloatTensor(n_in, n_out))
        torch.nn.init.xavier_uniform_(self.weight, gain=1.0)

    def forward(self, x, adj):
        return self.act(torch.spmm(adj, torch.mm(x, self.weight)))

    def __repr__(self):
        return f"{type(self).__name__}({self.n_in} => {self.n_out})"


class VGAE(BaseModule):
    def __init__(self, n_feat, n_hidden, n_latent):
        super().__init__()
        identity = lambda h: h
        self.shared = GraphConv(n_feat, n_hidden)
        self.mean = GraphConv(n_hidden, n_latent, act=identity)
        self.log_std = GraphConv(n_hidden, n_latent, act=identity)

    def forward(self, x, adj):
        h = self.shared(x, adj)
        mu, log_std = self.mean(h, adj), self.log_std(h, adj)
        z = mu
        if self.training:
            std = torch.exp(log_std)
            z = torch.randn_like(std).mul(std).add_(mu)
        return torch.mm(z, z.t()), mu, log_std


def vgae_loss(logits, target, mu, log_std, n, norm, pos_weight):
    # the decoder's raw scores go through sigmoid here (as the reference code does)
    linked = pos_weight * target * torch.sigmoid(logits).log()
    ll = linked + (1 - target) * torch.sigmoid(1 - logits).log()
    recon = norm * torch.neg(torch.mean(ll))
    kl = -0.5 / n * torch.mean(torch.sum(1 + 2 * log_std - mu.pow(2) - log_std.exp().pow(2), 1))
    return recon + kl


def main(opts):
    adj, features = load_graph(opts.dataset)
    adj = adj - sp.dia_matrix((adj.diagonal()[None, :], [0]), shape=adj.shape)
    adj.eliminate_zeros()
    train_adj, test_pos, test_neg = split_edges(adj)
    n = adj.shape[0]
    target = torch.FloatTensor((train_adj + sp.eye(n)).toarray())
    links = train_adj.sum()
    pos_weight = float(n * n - links) / links
    norm = n * n / float((n * n - links) * 2)
    graph = normalised(train_adj)

    vgae = VGAE(features.shape[1], *opts.hidden)
    initialize(vgae)
    opt = optim.Adam(vgae.parameters(), lr=opts.lr)
    for epoch in range(1, opts.epochs + 1):
        vgae.train()
        opt.zero_grad()
        logits, mu, log_std = vgae(features, graph)
        loss = vgae_loss(logits, target, mu, log_std, n, norm, pos_weight)
        loss.backward()
        opt.step()
        roc, ap = link_scores(mu.data.numpy(), test_pos, test_neg)
        print(f"epoch {epoch:03d} loss {loss.item():.5f} roc {roc:.5f} ap {ap:.5f}")
    print(vgae.shared)
    record.append(params_of(vgae))


if __name__ == "__main__":
    main(opts)
"""

GAE_STEPS = [
    ("import torch\nimport torch.nn.modules.loss\n",
     "import retrograd as torch\nimport retrograd.nn.modules.loss\n"),
    ("        loss.backward()\n        opt.step()",
     "        grads = loss.backward()\n        opt.step(grads)"),
]  # fmt: skip


def write_planetoid(root) -> None:
    """``data/ind.cora.{x,tx,allx,graph,test.index}`` as Planetoid pickles them: 28 nodes in two
    communities (dense inside, one bridge), 12 sparse binary features leaning on the community;
    the last 6 nodes are the test nodes, listed out of order."""
    rng = np.random.default_rng(11)
    n, n_test, n_features = 28, 6, 12
    community = np.arange(n) % 2
    graph = {i: [] for i in range(n)}
    for i in range(n):
        for j in range(i + 1, n):
            if community[i] == community[j] and rng.uniform() < 0.3:
                graph[i].append(j)
                graph[j].append(i)
    graph[0].append(1)
    graph[1].append(0)
    features = (
        rng.uniform(size=(n, n_features))
        < 0.2 + 0.4 * (np.arange(n_features) % 2 == community[:, None])
    ).astype(np.float32)
    allx = sp.csr_matrix(features[: n - n_test])
    test_index = list(range(n - n_test, n))[::-1]
    tx = sp.csr_matrix(features[test_index])
    data = root / "data"
    data.mkdir()
    for name, value in (("x", allx[:10]), ("tx", tx), ("allx", allx), ("graph", graph)):
        (data / f"ind.cora.{name}").write_bytes(pickle.dumps(value))
    (data / "ind.cora.test.index").write_text("\n".join(str(i) for i in test_index) + "\n")


NUMBER = r"-?\d+\.\d+(?:e[-+]?\d+)?"


def test_gae_style_vgae_trains_as_torch(capsys, monkeypatch, tmp_path):
    write_planetoid(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["vgae.py", "--epochs", "6", "--hidden", "16", "8"])
    records, logs = runs_with_draws(
        GAE_SOURCE,
        GAE_STEPS,
        capsys,
        seed=3,
        initialize=initializer(),
        params_of=params_of,
        __name__="__main__",
    )
    ours, theirs = records[1], records[0]
    assert "GraphConv(12 => 16)" in logs[0] and "GraphConv(12 => 16)" in logs[1]
    assert re.sub(NUMBER, "#", logs[1]) == re.sub(NUMBER, "#", logs[0])
    np.testing.assert_allclose(
        [float(v) for v in re.findall(NUMBER, logs[1])],
        [float(v) for v in re.findall(NUMBER, logs[0])],
        rtol=1e-4,
        atol=2e-5,
    )
    losses = [float(v) for v in re.findall(r"loss (\S+)", logs[0])]
    assert len(losses) == 6 and losses[-1] < losses[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
