"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of pyGAT's sparse graph attention (Diego999/pyGAT's ``SpGAT``), trained a few epochs
under torch and, ported, under retrograd from the same weights.

What it exercises: a custom ``torch.autograd.Function`` whose ``forward`` asserts
``edges.requires_grad == False``, builds ``torch.sparse_coo_tensor(indices, values, size)``,
keeps that sparse tensor by ``ctx.save_for_backward`` and returns ``torch.matmul(sparse,
dense)``, and whose ``backward`` reads ``ctx.saved_tensors``, ``ctx.needs_input_grad``,
``sparse._indices()``, gathers the values' gradient by ``upstream.matmul(dense.t()).view(-1)
[flat]`` and gives the dense operand's by ``sparse.t().matmul(upstream)``; the edge list by
``adj.nonzero().t()``, ``torch.cat((h[e[0, :], :], h[e[1, :], :]), dim=1).t()``,
``att.mm(pairs).squeeze()``, ``assert not torch.isnan(proj).any()``, row sums by the same
product with ``torch.ones(size=(n, 1), device=...)`` and ``x.is_cuda``, ``torch.Size``,
``nn.init.xavier_normal_(p.data, gain=1.414)``, heads kept in a list and registered by
``add_module``, a ``__repr__``, ``F.dropout(training=self.training)``; training by Adam with
``weight_decay``, ``torch.FloatTensor``/``torch.LongTensor``, ``logp.max(1)[1].type_as(y)``,
and the best epoch's ``state_dict`` kept on disk by ``torch.save``/``torch.load``.

Retrograd had no sparse layouts when pyGAT's dense GAT was first ported
(``tests/test_real_ports_46.py``), so this sparse variant guards them. Only the gradient lines
differ. Dropout is 0, the runs deterministic.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

LAYERS_SOURCE = """
class EdgeSpmm(torch.autograd.Function):
    # (sparse N x N with the given edge values) @ dense, differentiable in the values and the
    # dense operand only: the edge pattern is data
    @staticmethod
    def forward(ctx, edges, weights, size, dense):
        assert edges.requires_grad == False
        sparse = torch.sparse_coo_tensor(edges, weights, size)
        ctx.save_for_backward(sparse, dense)
        ctx.n = size[0]
        return torch.matmul(sparse, dense)

    @staticmethod
    def backward(ctx, upstream):
        sparse, dense = ctx.saved_tensors
        d_weights = d_dense = None
        if ctx.needs_input_grad[1]:
            # only the entries on the edges: flat positions row * n + col of the dense gradient
            flat = sparse._indices()[0, :] * ctx.n + sparse._indices()[1, :]
            d_weights = upstream.matmul(dense.t()).view(-1)[flat]
        if ctx.needs_input_grad[3]:
            d_dense = sparse.t().matmul(upstream)
        return None, d_weights, None, d_dense


class SparseGATHead(nn.Module):
    def __init__(self, n_in, n_out, slope, last=False):
        super().__init__()
        self.n_in, self.n_out, self.last = n_in, n_out, last
        self.weight = nn.Parameter(torch.zeros(size=(n_in, n_out)))
        self.att = nn.Parameter(torch.zeros(size=(1, 2 * n_out)))
        nn.init.xavier_normal_(self.weight.data, gain=1.414)
        nn.init.xavier_normal_(self.att.data, gain=1.414)
        self.act = nn.LeakyReLU(slope)

    def forward(self, x, adj):
        device = "cuda" if x.is_cuda else "cpu"
        n = x.size()[0]
        edges = adj.nonzero().t()
        proj = torch.mm(x, self.weight)
        assert not torch.isnan(proj).any()
        pairs = torch.cat((proj[edges[0, :], :], proj[edges[1, :], :]), dim=1).t()  # 2*out x E
        scores = torch.exp(-self.act(self.att.mm(pairs).squeeze()))
        shape = torch.Size([n, n])
        norm = EdgeSpmm.apply(edges, scores, shape, torch.ones(size=(n, 1), device=device))
        mixed = EdgeSpmm.apply(edges, scores, shape, proj).div(norm)
        assert not torch.isnan(mixed).any()
        return mixed if self.last else F.elu(mixed)

    def __repr__(self):
        return "{}({} -> {})".format(type(self).__name__, self.n_in, self.n_out)


class SparseGAT(nn.Module):
    def __init__(self, n_in, hidden, n_cls, heads, slope=0.2, p_drop=0.0):
        super().__init__()
        self.p_drop = p_drop
        self.heads = [SparseGATHead(n_in, hidden, slope) for _ in range(heads)]
        for k, head in enumerate(self.heads):
            self.add_module("head_{}".format(k), head)
        self.readout = SparseGATHead(hidden * heads, n_cls, slope, last=True)

    def forward(self, x, adj):
        x = F.dropout(x, self.p_drop, training=self.training)
        x = torch.cat([head(x, adj) for head in self.heads], dim=1)
        x = F.dropout(x, self.p_drop, training=self.training)
        return F.log_softmax(F.elu(self.readout(x, adj)), dim=1)
"""

TRAIN_SOURCE = """
adj = torch.FloatTensor(adj_np)
feats = torch.FloatTensor(feats_np)
labels = torch.LongTensor(labels_np)
train_idx, val_idx = torch.LongTensor(range(8)), torch.LongTensor(range(8, 14))

model = SparseGAT(feats.shape[1], 3, int(labels.max()) + 1, heads=2)
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr=0.05, weight_decay=5e-4)


def accuracy(logp, y):
    return logp.max(1)[1].type_as(y).eq(y).double().sum() / len(y)


best_val, best_epoch = float("inf"), -1
for epoch in range(6):
    model.train()
    opt.zero_grad()
    loss = F.nll_loss(model(feats, adj)[train_idx], labels[train_idx])
    loss.backward()
    opt.step()
    model.eval()
    logp = model(feats, adj)
    val_loss = F.nll_loss(logp[val_idx], labels[val_idx]).item()
    print("epoch {:02d} train {:.4f} val {:.4f} acc {:.3f}".format(
        epoch, loss.item(), val_loss, accuracy(logp[val_idx], labels[val_idx]).item()))
    record.append([loss.item(), val_loss])
    if val_loss < best_val:  # keep only the best epoch's weights on disk
        best_val, best_epoch = val_loss, epoch
        for old in glob.glob("*.pt"):
            os.remove(old)
        torch.save(model.state_dict(), "best_{}.pt".format(epoch))
model.load_state_dict(torch.load("best_{}.pt".format(best_epoch)))
print("restored epoch", best_epoch)
record.append(model(feats, adj).detach().numpy())
"""

STEPS = [
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)")
]


def test_pygat_sparse_spgat_matches_torch(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(281)
    n = 14
    adj = np.zeros((n, n))
    src, dst = rng.integers(0, n, (2, 30))
    adj[src, dst] = adj[dst, src] = 1.0
    adj += np.eye(n)
    inv_root = 1 / np.sqrt(adj.sum(1))
    data = {
        "adj_np": (adj * inv_root[:, None] * inv_root[None, :]).astype(np.float32),
        "feats_np": (rng.random((n, 6)) < 0.4).astype(np.float32),
        "labels_np": rng.integers(0, 3, n),
    }
    initialize = initializer()
    records, logs, files = [], [], []
    for lib in (torch, rg):
        (tmp_path / lib.__name__).mkdir()
        monkeypatch.chdir(tmp_path / lib.__name__)
        torch.manual_seed(0)
        record = []
        program = LAYERS_SOURCE + TRAIN_SOURCE
        source = program if lib is torch else port(program, STEPS)
        names = run_source(
            source, lib, record=record, initialize=initialize, glob=glob, os=os, **data
        )
        record.append(repr(names["model"].readout))
        record.append({k: v.detach().numpy() for k, v in names["model"].state_dict().items()})
        records.append(record)
        logs.append(capsys.readouterr().out)
        files.append(sorted(os.listdir(".")))
    assert "restored epoch" in logs[0] and logs[0].count("epoch ") == 7
    assert logs[1] == logs[0] and files[1] == files[0] and len(files[0]) == 1
    assert records[0][-1]["head_0.att"].shape == (1, 6)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_special_spmm_gradients_match_torch_and_the_sparse_product():
    """The custom Function gives the values and the dense operand the gradients that the
    sparse product's own backward gives (torch's and retrograd's)."""
    names = {lib: run_source(LAYERS_SOURCE, lib) for lib in (torch, rg)}
    rng = np.random.default_rng(5)
    edge = np.array([[0, 1, 1, 2, 3], [2, 0, 1, 3, 3]])
    values, dense = rng.random(5), rng.standard_normal((4, 3))
    grads = []
    for lib in (torch, rg):
        for through_function in (True, False):
            v = lib.tensor(values, dtype=lib.float64).requires_grad_()
            d = lib.tensor(dense, dtype=lib.float64).requires_grad_()
            if through_function:
                out = names[lib]["EdgeSpmm"].apply(lib.tensor(edge), v, lib.Size([4, 4]), d)
            else:
                out = lib.sparse.mm(lib.sparse_coo_tensor(lib.tensor(edge), v, (4, 4)), d)
            loss = (out.cos() * out).sum()
            if lib is torch:
                loss.backward()
                grads.append((v.grad.numpy(), d.grad.numpy()))
            else:
                g = loss.backward()
                grads.append((v.grad(g).numpy(), d.grad(g).numpy()))
    for mine in grads[1:]:
        np.testing.assert_allclose(mine[0], grads[0][0], rtol=1e-12)
        np.testing.assert_allclose(mine[1], grads[0][1], rtol=1e-12)
