# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- pyGAT as Diego999 writes it (github.com/Diego999/pyGAT ``layers.py``'s
  ``GraphAttentionLayer``, ``models.py``'s ``GAT``, ``utils.py``'s ``normalize_adj``/
  ``normalize_features``/``accuracy`` and ``train.py``'s ``train``/``compute_test`` and its
  early-stopping loop), on a small random graph for Cora: ``nn.Parameter(torch.empty(size=
  (in_features, out_features)))`` with ``nn.init.xavier_uniform_(self.W.data, gain=1.414)``,
  ``torch.mm(h, self.W)``, the attention input by ``self.a[:self.out_features, :]`` and
  ``Wh1 + Wh2.T``, ``-9e15*torch.ones_like(e)``, ``torch.where(adj > 0, e, zero_vec)``,
  ``F.softmax(attention, dim=1)``, ``F.elu``; the heads kept in a plain list and registered by
  ``self.add_module('attention_{}'.format(i), attention)``, ``torch.cat([att(x, adj) for att in
  self.attentions], dim=1)``; ``output.max(1)[1].type_as(labels)``, ``preds.eq(labels)
  .double()``, ``Variable(features)``, ``loss_train.data.item()``, ``torch.save(model.
  state_dict(), '{}.pkl'.format(epoch))`` and ``model.load_state_dict(torch.load(
  '{}.pkl'.format(best_epoch)))`` with ``glob.glob('*.pkl')`` and ``os.remove``. The adjacency
  and features are normalized by ``scipy.sparse`` as the original does, then made dense by
  ``torch.FloatTensor(np.array(adj.todense()))``.

The sparse ``SpGAT`` (``SpecialSpmmFunction`` over ``torch.sparse_coo_tensor``), left out here
when retrograd had no sparse layouts, is ported in ``tests/test_real_ports_281.py`` with this
train.py. Dropout is 0, the runs deterministic.
Only the gradient lines differ.
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

GAT_SOURCE = """
# layers.py
class GraphAttentionLayer(nn.Module):
    \"\"\"
    Simple GAT layer, similar to https://arxiv.org/abs/1710.10903
    \"\"\"
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super(GraphAttentionLayer, self).__init__()
        self.dropout = dropout
        self.in_features = in_features
        self.out_features = out_features
        self.alpha = alpha
        self.concat = concat

        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2*out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)

        self.leakyrelu = nn.LeakyReLU(self.alpha)

    def forward(self, h, adj):
        Wh = torch.mm(h, self.W) # h.shape: (N, in_features), Wh.shape: (N, out_features)
        e = self._prepare_attentional_mechanism_input(Wh)

        zero_vec = -9e15*torch.ones_like(e)
        attention = torch.where(adj > 0, e, zero_vec)
        attention = F.softmax(attention, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)

        if self.concat:
            return F.elu(h_prime)
        else:
            return h_prime

    def _prepare_attentional_mechanism_input(self, Wh):
        # Wh.shape (N, out_feature)
        # self.a.shape (2 * out_feature, 1)
        # Wh1&2.shape (N, 1)
        # e.shape (N, N)
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        # broadcast add
        e = Wh1 + Wh2.T
        return self.leakyrelu(e)

    def __repr__(self):
        return self.__class__.__name__ + ' (' + str(self.in_features) + ' -> ' + str(self.out_features) + ')'


# models.py
class GAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout, alpha, nheads):
        \"\"\"Dense version of GAT.\"\"\"
        super(GAT, self).__init__()
        self.dropout = dropout

        self.attentions = [GraphAttentionLayer(nfeat, nhid, dropout=dropout, alpha=alpha, concat=True) for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module('attention_{}'.format(i), attention)

        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout=dropout, alpha=alpha, concat=False)

    def forward(self, x, adj):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        return F.log_softmax(x, dim=1)


# utils.py
def normalize_adj(mx):
    \"\"\"Row-normalize sparse matrix\"\"\"
    rowsum = np.array(mx.sum(1))
    r_inv_sqrt = np.power(rowsum, -0.5).flatten()
    r_inv_sqrt[np.isinf(r_inv_sqrt)] = 0.
    r_mat_inv_sqrt = sp.diags(r_inv_sqrt)
    return mx.dot(r_mat_inv_sqrt).transpose().dot(r_mat_inv_sqrt)


def normalize_features(mx):
    \"\"\"Row-normalize sparse matrix\"\"\"
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = sp.diags(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def load_data():
    features = sp.csr_matrix(raw_features, dtype=np.float32)
    adj = sp.coo_matrix((np.ones(edges.shape[0]), (edges[:, 0], edges[:, 1])), shape=(n_nodes, n_nodes), dtype=np.float32)

    # build symmetric adjacency matrix
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)

    features = normalize_features(features)
    adj = normalize_adj(adj + sp.eye(adj.shape[0]))

    idx_train = range(10)
    idx_val = range(10, 16)
    idx_test = range(16, 24)

    adj = torch.FloatTensor(np.array(adj.todense()))
    features = torch.FloatTensor(np.array(features.todense()))
    labels = torch.LongTensor(raw_labels)

    idx_train = torch.LongTensor(idx_train)
    idx_val = torch.LongTensor(idx_val)
    idx_test = torch.LongTensor(idx_test)

    return adj, features, labels, idx_train, idx_val, idx_test


# train.py
adj, features, labels, idx_train, idx_val, idx_test = load_data()

model = GAT(nfeat=features.shape[1],
            nhid=args.hidden,
            nclass=int(labels.max()) + 1,
            dropout=args.dropout,
            nheads=args.nb_heads,
            alpha=args.alpha)
initialize(model)
optimizer = optim.Adam(model.parameters(),
                       lr=args.lr,
                       weight_decay=args.weight_decay)

features, adj, labels = Variable(features), Variable(adj), Variable(labels)


def train(epoch):
    t = time.time()
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss_train = F.nll_loss(output[idx_train], labels[idx_train])
    acc_train = accuracy(output[idx_train], labels[idx_train])
    loss_train.backward()
    optimizer.step()

    if not args.fastmode:
        # Evaluate validation set performance separately,
        # deactivates dropout during validation run.
        model.eval()
        output = model(features, adj)

    loss_val = F.nll_loss(output[idx_val], labels[idx_val])
    acc_val = accuracy(output[idx_val], labels[idx_val])
    print('Epoch: {:04d}'.format(epoch+1),
          'loss_train: {:.4f}'.format(loss_train.data.item()),
          'acc_train: {:.4f}'.format(acc_train.data.item()),
          'loss_val: {:.4f}'.format(loss_val.data.item()),
          'acc_val: {:.4f}'.format(acc_val.data.item()),
          'time: {:.4f}s'.format(time.time() - t))
    record.append([loss_train.item(), loss_val.item(), acc_val.item()])

    return loss_val.data.item()


def compute_test():
    model.eval()
    output = model(features, adj)
    loss_test = F.nll_loss(output[idx_test], labels[idx_test])
    acc_test = accuracy(output[idx_test], labels[idx_test])
    print("Test set results:",
          "loss= {:.4f}".format(loss_test.data.item()),
          "accuracy= {:.4f}".format(acc_test.data.item()))
    record.append([loss_test.item(), acc_test.item()])

# Train model
t_total = time.time()
loss_values = []
bad_counter = 0
best = args.epochs + 1
best_epoch = 0
for epoch in range(args.epochs):
    loss_values.append(train(epoch))

    torch.save(model.state_dict(), '{}.pkl'.format(epoch))
    if loss_values[-1] < best:
        best = loss_values[-1]
        best_epoch = epoch
        bad_counter = 0
    else:
        bad_counter += 1

    if bad_counter == args.patience:
        break

    files = glob.glob('*.pkl')
    for file in files:
        epoch_nb = int(file.split('.')[0])
        if epoch_nb < best_epoch:
            os.remove(file)

files = glob.glob('*.pkl')
for file in files:
    epoch_nb = int(file.split('.')[0])
    if epoch_nb > best_epoch:
        os.remove(file)

print("Optimization Finished!")
print("Total time elapsed: {:.4f}s".format(time.time() - t_total))

# Restore best model
print('Loading {}th epoch'.format(best_epoch))
model.load_state_dict(torch.load('{}.pkl'.format(best_epoch)))

# Testing
compute_test()
"""

GAT_STEP = [
    (
        "    loss_train.backward()\n    optimizer.step()",
        "    grads = loss_train.backward()\n    optimizer.step(grads)",
    )
]


class Clock:
    """``time`` reading a fixed clock, so that both runs print the same lines."""

    @staticmethod
    def time():
        return 0.0


def test_pygat_matches_torch(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(46)
    n_nodes = 24
    edges = rng.integers(0, n_nodes, (60, 2))
    raw_features = (rng.random((n_nodes, 12)) < 0.3).astype(np.float32)
    raw_labels = rng.integers(0, 3, n_nodes)
    args = types.SimpleNamespace(
        hidden=4, dropout=0.0, nb_heads=3, alpha=0.2, lr=0.05, weight_decay=5e-4,
        fastmode=False, epochs=12, patience=4,
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
        source = GAT_SOURCE if lib is torch else port(GAT_SOURCE, GAT_STEP)
        exec(compile(source, f"<{lib.__name__} pygat>", "exec"), names)
        record.append(repr(names["model"]))
        record.append(
            {k: v.detach().numpy().copy() for k, v in names["model"].state_dict().items()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
        files.append(sorted(os.listdir(directory)))
    assert "Loading" in logs[0] and logs[0].count("Epoch: ") >= 5
    assert logs[1] == logs[0] and files[1] == files[0] and len(files[0]) == 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
