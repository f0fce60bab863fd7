"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of pyGAT (a dense graph attention network trained on a Cora-like citation graph, with
its ``layers.py``/``models.py``/``utils.py``/``train.py`` split).

- the attention layer: ``nn.Parameter(torch.empty(size=(fan_in, fan_out)))`` initialised by
  ``nn.init.xavier_uniform_(p.data, gain=1.414)``, ``torch.mm``, the attention vector's two
  halves by ``a[:d, :]``/``a[d:, :]`` and the pair scores ``src + dst.T`` by broadcasting,
  ``nn.LeakyReLU(slope)``, non-edges masked by ``torch.where(adj > 0, e, -9e15 *
  torch.ones_like(e))``, ``F.softmax(..., dim=1)``, ``F.dropout(..., training=self.training)``,
  ``torch.matmul``, ``F.elu``, and a hand-written ``__repr__`` that the model's repr shows;
- the model: heads kept in a plain list and registered by ``self.add_module('head_{}'.format(i),
  ...)``, ``torch.cat([...], dim=1)``, ``F.log_softmax``;
- the data: ``scipy.sparse`` symmetrisation and normalisation, made dense by
  ``torch.FloatTensor(np.array(m.todense()))``, ``torch.LongTensor`` of a NumPy array and of a
  ``range``, ``Variable(...)``;
- the loop: ``optim.Adam(..., weight_decay=...)``, ``F.nll_loss``, accuracy by
  ``out.max(1)[1].type_as(labels)`` and ``eq(...).double()``, logs by ``loss.data.item()``,
  early stopping with ``torch.save(model.state_dict(), '{}.pkl'.format(epoch))``,
  ``glob.glob('*.pkl')``/``os.remove`` of the stale checkpoints and the best one restored by
  ``model.load_state_dict(torch.load(...))``.

The sparse variant is ported in ``tests/test_real_ports_281.py``. Dropout is 0, the runs
deterministic. Only the gradient lines differ.
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
# ---- layers
class AttentionHead(nn.Module):
    def __init__(self, fan_in, fan_out, dropout, slope, activate=True):
        super(AttentionHead, self).__init__()
        self.fan_in, self.fan_out = fan_in, fan_out
        self.dropout, self.activate = dropout, activate
        self.W = nn.Parameter(torch.empty(size=(fan_in, fan_out)))
        self.a = nn.Parameter(torch.empty(size=(2 * fan_out, 1)))
        for weight in (self.W, self.a):
            nn.init.xavier_uniform_(weight.data, gain=1.414)
        self.score_act = nn.LeakyReLU(slope)

    def forward(self, x, adj):
        z = torch.mm(x, self.W)
        src = torch.matmul(z, self.a[:self.fan_out, :])
        dst = torch.matmul(z, self.a[self.fan_out:, :])
        scores = self.score_act(src + dst.T)  # (N, 1) + (1, N): every ordered pair
        # a huge negative instead of -inf: a row with no edges still softmaxes to finite values
        blocked = -9e15 * torch.ones_like(scores)
        weights = F.softmax(torch.where(adj > 0, scores, blocked), dim=1)
        weights = F.dropout(weights, self.dropout, training=self.training)
        mixed = torch.matmul(weights, z)
        return F.elu(mixed) if self.activate else mixed

    def __repr__(self):
        return '{}[{} => {}]'.format(type(self).__name__, self.fan_in, self.fan_out)


# ---- models
class GraphAttentionNet(nn.Module):
    def __init__(self, n_in, n_hidden, n_out, heads, dropout, slope):
        super(GraphAttentionNet, self).__init__()
        self.dropout = dropout
        self.heads = [AttentionHead(n_in, n_hidden, dropout, slope) for _ in range(heads)]
        for i, head in enumerate(self.heads):
            self.add_module('head_{}'.format(i), head)
        self.readout = AttentionHead(n_hidden * heads, n_out, dropout, slope, activate=False)

    def forward(self, x, adj):
        x = F.dropout(x, p=self.dropout, training=self.training)
        x = torch.cat([head(x, adj) for head in self.heads], dim=1)
        x = F.dropout(x, p=self.dropout, training=self.training)
        return F.log_softmax(F.elu(self.readout(x, adj)), dim=1)


# ---- utils
def symmetric_norm(m):
    degree = np.array(m.sum(1)).flatten()
    scale = np.power(degree, -0.5)
    scale[np.isinf(scale)] = 0.0
    d = sp.diags(scale)
    return d.dot(m).dot(d)


def row_norm(m):
    totals = np.array(m.sum(1)).flatten()
    inverse = np.power(totals, -1.0)
    inverse[np.isinf(inverse)] = 0.0
    return sp.diags(inverse).dot(m)


def accuracy(out, labels):
    guesses = out.max(1)[1].type_as(labels)
    return guesses.eq(labels).double().sum() / len(labels)


def build_graph():
    links = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                          shape=(n_nodes, n_nodes), dtype=np.float32)
    links = links.maximum(links.T)  # citations count both ways
    adj = symmetric_norm(links + sp.eye(n_nodes))
    feats = row_norm(sp.csr_matrix(bag_of_words, dtype=np.float32))
    splits = [torch.LongTensor(range(a, b)) for a, b in ((0, 10), (10, 16), (16, n_nodes))]
    return (torch.FloatTensor(np.array(adj.todense())),
            torch.FloatTensor(np.array(feats.todense())),
            torch.LongTensor(raw_topics), *splits)


# ---- train
adj, feats, topics, train_ids, val_ids, test_ids = build_graph()
model = GraphAttentionNet(feats.shape[1], args.hidden, int(topics.max()) + 1,
                          args.heads, args.dropout, args.slope)
initialize(model)
opt = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
feats, adj, topics = Variable(feats), Variable(adj), Variable(topics)


def epoch_step(epoch):
    started = time.time()
    model.train()
    opt.zero_grad()
    out = model(feats, adj)
    train_loss = F.nll_loss(out[train_ids], topics[train_ids])
    train_loss.backward()
    opt.step()
    model.eval()
    out = model(feats, adj)
    val_loss = F.nll_loss(out[val_ids], topics[val_ids])
    val_acc = accuracy(out[val_ids], topics[val_ids])
    print('epoch {:3d} | train {:.4f} | val {:.4f} acc {:.3f} | {:.2f}s'.format(
        epoch, train_loss.data.item(), val_loss.data.item(), val_acc.data.item(),
        time.time() - started))
    record.append([train_loss.item(), val_loss.item(), val_acc.item()])
    return val_loss.data.item()


best_loss, best_epoch, waited = float('inf'), 0, 0
for epoch in range(args.max_epochs):
    val_loss = epoch_step(epoch)
    checkpoint = '{}.pkl'.format(epoch)
    torch.save(model.state_dict(), checkpoint)
    if val_loss < best_loss:
        best_loss, best_epoch, waited = val_loss, epoch, 0
    else:
        waited += 1
        if waited == args.patience:
            break
    for name in glob.glob('*.pkl'):
        if int(name.split('.')[0]) < best_epoch:
            os.remove(name)
for name in glob.glob('*.pkl'):
    if int(name.split('.')[0]) > best_epoch:
        os.remove(name)

print('restoring epoch {}'.format(best_epoch))
best_state = torch.load('{}.pkl'.format(best_epoch))
model.load_state_dict(best_state)
model.eval()
out = model(feats, adj)
test_loss = F.nll_loss(out[test_ids], topics[test_ids])
test_acc = accuracy(out[test_ids], topics[test_ids])
print('test loss {:.4f} accuracy {:.4f}'.format(test_loss.data.item(), test_acc.data.item()))
record.append([test_loss.item(), test_acc.item()])
"""

GAT_STEP = [
    (
        "    train_loss.backward()\n    opt.step()",
        "    grads = train_loss.backward()\n    opt.step(grads)",
    )
]


class Clock:
    """``time`` reading a fixed clock, so that both runs print the same lines."""

    @staticmethod
    def time():
        return 0.0


def test_graph_attention_network_matches_torch(tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(46)
    n_nodes = 24
    edges = rng.integers(0, n_nodes, (60, 2))
    raw_features = (rng.random((n_nodes, 12)) < 0.3).astype(np.float32)
    raw_labels = rng.integers(0, 3, n_nodes)
    args = types.SimpleNamespace(
        hidden=4, dropout=0.0, heads=3, slope=0.2, lr=0.01, weight_decay=5e-4,
        max_epochs=12, patience=3,
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
            "pairs": edges,
            "bag_of_words": raw_features,
            "raw_topics": raw_labels,
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
    # stopped early, after stale checkpoints on both sides of the best were removed
    assert "restoring epoch 5" in logs[0] and logs[0].count("epoch ") == 9 + 1
    assert logs[1] == logs[0] and files[1] == files[0] and len(files[0]) == 1
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
