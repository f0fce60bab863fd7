# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
sparse graph attention.

- pyGAT's sparse ``SpGAT`` as Diego999 writes it (github.com/Diego999/pyGAT ``layers.py``'s
  ``SpecialSpmmFunction``, ``SpecialSpmm`` and ``SpGraphAttentionLayer``, ``models.py``'s
  ``SpGAT``), trained by the ``train.py`` of ``tests/test_real_ports_46.py`` (the dense
  ``GAT``'s port) with ``args.sparse`` set: the edges by ``adj.nonzero().t()``, the attention
  input ``torch.cat((h[edge[0, :], :], h[edge[1, :], :]), dim=1).t()``,
  ``torch.exp(-self.leakyrelu(self.a.mm(edge_h).squeeze()))``, ``assert not
  torch.isnan(h).any()``, and the custom ``autograd.Function`` whose ``forward`` builds
  ``torch.sparse_coo_tensor(indices, values, shape)``, saves it by ``ctx.save_for_backward(a,
  b)`` and returns ``torch.matmul(a, b)``, and whose ``backward`` reads ``a._indices()``,
  gathers the values' gradient by ``grad_output.matmul(b.t()).view(-1)[edge_idx]`` and gives
  ``b``'s by ``a.t().matmul(grad_output)``; the row sums by the same product with
  ``torch.ones(size=(N,1), device=dv)``.

``tests/test_real_ports_46.py`` left SpGAT out: retrograd had no sparse layouts. Only the
gradient lines differ. Dropout is 0, the runs deterministic.
"""

from __future__ import annotations

import glob
import os
import types

import numpy as np
import scipy.sparse as sp
import torch

import retrograd as rg
from real_ports import assert_records_agree, port
from test_real_ports_46 import GAT_SOURCE, GAT_STEP, Clock

SPGAT_SOURCE = """
# layers.py
class SpecialSpmmFunction(torch.autograd.Function):
    \"\"\"Special function for only sparse region backpropataion layer.\"\"\"
    @staticmethod
    def forward(ctx, indices, values, shape, b):
        assert indices.requires_grad == False
        a = torch.sparse_coo_tensor(indices, values, shape)
        ctx.save_for_backward(a, b)
        ctx.N = shape[0]
        return torch.matmul(a, b)

    @staticmethod
    def backward(ctx, grad_output):
        a, b = ctx.saved_tensors
        grad_values = grad_b = None
        if ctx.needs_input_grad[1]:
            grad_a_dense = grad_output.matmul(b.t())
            edge_idx = a._indices()[0, :] * ctx.N + a._indices()[1, :]
            grad_values = grad_a_dense.view(-1)[edge_idx]
        if ctx.needs_input_grad[3]:
            grad_b = a.t().matmul(grad_output)
        return None, grad_values, None, grad_b


class SpecialSpmm(nn.Module):
    def forward(self, indices, values, shape, b):
        return SpecialSpmmFunction.apply(indices, values, shape, b)


class SpGraphAttentionLayer(nn.Module):
    \"\"\"
    Sparse version GAT layer, similar to https://arxiv.org/abs/1710.10903
    \"\"\"

    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super(SpGraphAttentionLayer, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.alpha = alpha
        self.concat = concat

        self.W = nn.Parameter(torch.zeros(size=(in_features, out_features)))
        nn.init.xavier_normal_(self.W.data, gain=1.414)

        self.a = nn.Parameter(torch.zeros(size=(1, 2*out_features)))
        nn.init.xavier_normal_(self.a.data, gain=1.414)

        self.dropout = nn.Dropout(dropout)
        self.leakyrelu = nn.LeakyReLU(self.alpha)
        self.special_spmm = SpecialSpmm()

    def forward(self, input, adj):
        dv = 'cuda' if input.is_cuda else 'cpu'

        N = input.size()[0]
        edge = adj.nonzero().t()

        h = torch.mm(input, self.W)
        # h: N x out
        assert not torch.isnan(h).any()

        # Self-attention on the nodes - Shared attention mechanism
        edge_h = torch.cat((h[edge[0, :], :], h[edge[1, :], :]), dim=1).t()
        # edge: 2*D x E

        edge_e = torch.exp(-self.leakyrelu(self.a.mm(edge_h).squeeze()))
        assert not torch.isnan(edge_e).any()
        # edge_e: E

        e_rowsum = self.special_spmm(edge, edge_e, torch.Size([N, N]), torch.ones(size=(N,1), device=dv))
        # e_rowsum: N x 1

        edge_e = self.dropout(edge_e)
        # edge_e: E

        h_prime = self.special_spmm(edge, edge_e, torch.Size([N, N]), h)
        assert not torch.isnan(h_prime).any()
        # h_prime: N x out

        h_prime = h_prime.div(e_rowsum)
        # h_prime: N x out
        assert not torch.isnan(h_prime).any()

        if self.concat:
            # if this layer is not last layer,
            return F.elu(h_prime)
        else:
            # if this layer is last layer,
            return h_prime

    def __repr__(self):
        return self.__class__.__name__ + ' (' + str(self.in_features) + ' -> ' + str(self.out_features) + ')'


# models.py
class SpGAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout, alpha, nheads):
        \"\"\"Sparse version of GAT.\"\"\"
        super(SpGAT, self).__init__()
        self.dropout = dropout

        self.attentions = [SpGraphAttentionLayer(nfeat,
                                                 nhid,
                                                 dropout=dropout,
                                                 alpha=alpha,
                                                 concat=True) for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module('attention_{}'.format(i), attention)

        self.out_att = SpGraphAttentionLayer(nhid * nheads,
                                             nclass,
                                             dropout=dropout,
                                             alpha=alpha,
                                             concat=False)

    def forward(self, x, adj):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        return F.log_softmax(x, dim=1)

"""

# train.py's model choice, ``if args.sparse: model = SpGAT(...)``, written as its sparse branch
# (test_real_ports_46's train.py keeps the dense one)
PROGRAM = SPGAT_SOURCE + GAT_SOURCE.replace("\nmodel = GAT(nfeat=", "\nmodel = SpGAT(nfeat=")


def test_pygat_sparse_spgat_matches_torch(tmp_path, monkeypatch, capsys):
    assert "model = SpGAT(nfeat=" in PROGRAM
    rng = np.random.default_rng(281)
    n_nodes = 24
    edges = rng.integers(0, n_nodes, (60, 2))
    raw_features = (rng.random((n_nodes, 12)) < 0.3).astype(np.float32)
    raw_labels = rng.integers(0, 3, n_nodes)
    args = types.SimpleNamespace(
        hidden=4, dropout=0.0, nb_heads=3, alpha=0.2, lr=0.05, weight_decay=5e-4,
        fastmode=False, epochs=10, patience=4, sparse=True,
    )  # fmt: skip
    records, logs, state, files = [], [], {}, []
    for lib in (torch, rg):
        directory = tmp_path / lib.__name__
        directory.mkdir()
        monkeypatch.chdir(directory)

        def initialize(model):
            if not state:
                state.update({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
            else:
                model.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

        torch.manual_seed(0)
        record = []
        names = {
            "torch": lib,
            "nn": lib.nn,
            "F": lib.nn.functional,
            "optim": lib.optim,
            "np": np,
            "sp": sp,
            "glob": glob,
            "os": os,
            "time": Clock,
            "Variable": lib.autograd.Variable,
            "args": args,
            "record": record,
            "initialize": initialize,
            "n_nodes": n_nodes,
            "edges": edges,
            "raw_features": raw_features,
            "raw_labels": raw_labels,
        }
        source = PROGRAM if lib is torch else port(PROGRAM, GAT_STEP)
        exec(compile(source, f"<{lib.__name__} pygat sparse>", "exec"), names)
        record.append(repr(names["model"]))
        record.append(
            {k: v.detach().numpy().copy() for k, v in names["model"].state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
        files.append(sorted(os.listdir(directory)))
    assert "Loading" in logs[0] and logs[0].count("Epoch: ") >= 5
    assert logs[1] == logs[0] and files[1] == files[0] and len(files[0]) == 1
    assert "attention_0.a" in records[0][-1] and records[0][-1]["attention_0.a"].shape == (1, 8)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_special_spmm_gradients_match_torch_and_the_sparse_product():
    """SpGAT's custom Function gives the values and the dense operand the gradients that the
    sparse product's own backward gives (torch's and retrograd's)."""
    names = {}
    for lib in (torch, rg):
        exec(
            compile(SPGAT_SOURCE, "<spgat>", "exec"),
            ns := {"torch": lib, "nn": lib.nn, "F": lib.nn.functional},
        )
        names[lib] = ns
    rng = np.random.default_rng(5)
    edge = np.array([[0, 0, 1, 2, 2], [0, 2, 1, 0, 1]])
    values, dense = rng.random(5), rng.standard_normal((3, 2))
    grads = []
    for lib in (torch, rg):
        v = lib.tensor(values, dtype=lib.float64).requires_grad_()
        d = lib.tensor(dense, dtype=lib.float64).requires_grad_()
        out = names[lib]["SpecialSpmmFunction"].apply(lib.tensor(edge), v, lib.Size([3, 3]), d)
        loss = (out.sin() * out).sum()
        if lib is torch:
            loss.backward()
            grads.append((v.grad.numpy(), d.grad.numpy()))
        else:
            g = loss.backward()
            grads.append((v.grad(g).numpy(), d.grad(g).numpy()))
        v2 = lib.tensor(values, dtype=lib.float64).requires_grad_()
        d2 = lib.tensor(dense, dtype=lib.float64).requires_grad_()
        out2 = lib.sparse.mm(lib.sparse_coo_tensor(lib.tensor(edge), v2, (3, 3)), d2)
        loss2 = (out2.sin() * out2).sum()
        if lib is torch:
            loss2.backward()
            grads.append((v2.grad.numpy(), d2.grad.numpy()))
        else:
            g2 = loss2.backward()
            grads.append((v2.grad(g2).numpy(), d2.grad(g2).numpy()))
    for mine in grads[1:]:
        np.testing.assert_allclose(mine[0], grads[0][0], rtol=1e-12)
        np.testing.assert_allclose(mine[1], grads[0][1], rtol=1e-12)
