"""Real-style PyTorch programs ported to retrograd, continued (the harness:
``tests/real_ports.py``): programs written here in the style of SeanNaren/deepspeech.pytorch,
tkipf/pygcn, a hand-written exact Gaussian process with GPyTorch's jitter-retrying Cholesky,
and ikostrikov/pytorch-a3c, each trained a few steps against torch's run of the same text.

- a CTC speech model: a ``TimeDistributed`` module folding ``T*N*H`` by ``x.view(t * n, -1)``,
  a conv stack zeroing padded frames through ``torch.BoolTensor(x.size()).fill_(0)``,
  ``mask[b].narrow(2, n, extra).fill_(1)`` and ``masked_fill``, ``nn.Hardtanh(0, 20,
  inplace=True)``, recurrent layers through ``pack_padded_sequence``/``pad_packed_sequence``
  on int32 lengths (a bidirectional LSTM whose directions are summed by ``view(..., 2,
  -1).sum(2)``; a GRU with a future-context depthwise ``Conv1d(groups=)`` after ``F.pad(x,
  pad=..., value=0)``), output lengths over ``conv.modules()`` with ``type(m) ==
  nn.modules.conv.Conv2d``, a collate by ``narrow(1, 0, n).copy_(spec)`` and item assignment
  into ``torch.FloatTensor(n)``/``torch.IntTensor(n)``, ``fractions.mul_(...).int()``,
  ``CTCLoss(blank=, reduction='sum', zero_infinity=True)`` of ``log_softmax``, Nesterov SGD and
  ``clip_grad_norm_``; evaluated with a softmax-when-evaluating module and a greedy decoder
  (``torch.max(probs, 2)``, ``torch.tensor(offsets, dtype=torch.int)``).
- a two-layer GCN on a small Cora-format graph read by ``np.genfromtxt``: one-hot classes,
  the symmetric adjacency and row normalization by ``scipy.sparse``,
  ``Parameter(torch.FloatTensor(in, out))`` filled by ``weight.data.uniform_``, ``torch.mm``
  then ``torch.spmm`` of a ``torch.sparse.FloatTensor(indices, values, shape)`` (once refused
  by retrograd), ``F.nll_loss`` over ``torch.LongTensor(range(...))`` indices,
  ``max(1)[1].type_as(labels)``, Adam with ``weight_decay``, the printed log compared.
- exact GP regression over two tasks batched in one ``[2, n, n]`` kernel (float64 default
  dtype): softplus scales, ``torch.linalg.cholesky``, ``torch.cholesky_solve``, the log
  determinant from ``torch.diagonal(L, dim1=-2, dim2=-1)``, Adam then ``optim.LBFGS`` (with
  and without ``line_search_fn="strong_wolfe"``), ``solve_triangular`` predictions; and a
  jitter-retrying ``torch.cholesky`` whose ``except RuntimeError`` adds to
  ``diagonal(dim1=-2, dim2=-1).add_(...)``: retrograd raised a ``ValueError`` there, which the
  program did not catch (``rg.linalg.LinAlgError`` now, a ``RuntimeError`` as torch's).
- an A3C worker run in this process on a small stand-in for an Atari screen: rows rescaled by
  ``w *= std / torch.sqrt(w.pow(2).sum(1, keepdim=True))`` assigned to ``weight.data``,
  initialisation by ``__class__.__name__.find('Conv')``, ``nn.LSTMCell`` with its state
  detached between rollouts, a ``SharedAdam`` (an ``optim.Adam`` subclass whose state holds
  ``torch.zeros(1)`` steps and ``p.data.new().resize_as_(p.data).zero_()`` moments, stepped
  with the deprecated ``add_(alpha, t)``/``addcmul_(value, a, b)``/``addcdiv_(value, a, b)``
  forms), ``multinomial(num_samples=1)``, the GAE loop, ``clip_grad_norm_``, gradients handed
  over by ``shared._grad = local.grad``; the shared and the plain Adam. Under torch 2,
  ``zero_grad()`` sets the shared model's gradients to ``None`` and nothing zeroes the
  worker's, which so accumulate over the updates: the port reproduces that.

The ported lines: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``clip_grad_norm_(grads, ...)``, ``step(grads)``; in A3C the hand-over copies the worker's
gradients by ``grad_replace(grads, param.grad(grads))``, ``SharedAdam.step`` reads
``p.grad(grads)``, the worker's gradients accumulate as torch's ``.grad`` does and
``zero_grad()`` drops the shared model's). ``share_memory()``/``share_memory_()`` are refused by
design (no tensor is shared between processes), so those calls are left out of the port.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    params_of,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IMPORTS = (
    "\nimport torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
    "\nimport retrograd as torch\nimport retrograd.nn as nn\n"
    "from retrograd.nn import functional as F\n",
)


@pytest.fixture
def default_dtype():
    """The default dtype restored after a program that sets it."""
    previous, our_previous = torch.get_default_dtype(), rg.get_default_dtype()
    yield
    torch.set_default_dtype(previous)
    rg.set_default_dtype(our_previous)


SPEECH_SOURCE = '''
import math
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn import CTCLoss


class TimeDistributed(nn.Module):
    """Applies a module to every frame of a (time, batch, features) tensor."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        steps, batch = x.size(0), x.size(1)
        return self.inner(x.view(steps * batch, -1)).view(steps, batch, -1)


class PaddedConvStack(nn.Module):
    """Runs the conv stack, zeroing the frames past each utterance's end after every layer."""

    def __init__(self, layers):
        super().__init__()
        self.layers = layers

    def forward(self, x, frames):
        for layer in self.layers:
            x = layer(x)
            pad = torch.BoolTensor(x.size()).fill_(0)
            for b, n in enumerate(frames):
                n = n.item()
                extra = pad[b].size(2) - n
                if extra > 0:
                    pad[b].narrow(2, n, extra).fill_(1)
            x = x.masked_fill(pad, 0)
        return x


class Recurrent(nn.Module):
    def __init__(self, n_in, n_hidden, cell, both_ways, norm=True):
        super().__init__()
        self.both_ways = both_ways
        self.norm = TimeDistributed(nn.BatchNorm1d(n_in)) if norm else None
        self.rnn = cell(input_size=n_in, hidden_size=n_hidden, bidirectional=both_ways, bias=True)

    def forward(self, x, frames):
        if self.norm is not None:
            x = self.norm(x)
        packed, _ = self.rnn(nn.utils.rnn.pack_padded_sequence(x, frames))
        x, _ = nn.utils.rnn.pad_packed_sequence(packed)
        if self.both_ways:  # the two directions added
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2).view(x.size(0), x.size(1), -1)
        return x


class FutureContext(nn.Module):
    """A per-channel convolution over the next ``width`` frames (for one-way models)."""

    def __init__(self, channels, width):
        super().__init__()
        self.pad = (0, width - 1)
        self.conv = nn.Conv1d(channels, channels, kernel_size=width, groups=channels, bias=False)

    def forward(self, x):
        x = F.pad(x.permute(1, 2, 0), pad=self.pad, value=0)
        return self.conv(x).permute(2, 0, 1).contiguous()


class SoftmaxWhenEvaluating(nn.Module):
    def forward(self, x):
        return x if self.training else F.softmax(x, dim=-1)


class SpeechNet(nn.Module):
    def __init__(self, alphabet, freqs, cfg):
        super().__init__()
        self.alphabet = alphabet
        self.conv = PaddedConvStack(nn.Sequential(
            nn.Conv2d(1, 3, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)),
            nn.BatchNorm2d(3),
            nn.Hardtanh(0, 20, inplace=True),  # a ReLU capped at 20
        ))
        features = 3 * ((freqs + 2 - 3) // 2 + 1)
        self.rnns = nn.ModuleList([
            Recurrent(features, cfg.hidden, cfg.cell, cfg.both_ways, norm=False),
            Recurrent(cfg.hidden, cfg.hidden, cfg.cell, cfg.both_ways),
        ])
        self.context = None if cfg.both_ways else nn.Sequential(
            FutureContext(cfg.hidden, cfg.context), nn.Hardtanh(0, 20, inplace=True))
        self.out = TimeDistributed(nn.Sequential(
            nn.BatchNorm1d(cfg.hidden), nn.Linear(cfg.hidden, len(alphabet), bias=False)))
        self.softmax = SoftmaxWhenEvaluating()
        self.ctc = CTCLoss(blank=alphabet.index('_'), reduction='sum', zero_infinity=True)

    def frames_out(self, lengths):
        for layer in self.conv.modules():
            if type(layer) == nn.modules.conv.Conv2d:
                span = layer.dilation[1] * (layer.kernel_size[1] - 1)
                lengths = (lengths + 2 * layer.padding[1] - span - 1) // layer.stride[1] + 1
        return lengths.int()

    def forward(self, spectrograms, lengths):
        lengths = self.frames_out(lengths.cpu().int())
        x = self.conv(spectrograms, lengths)
        b, c, f, t = x.size()
        x = x.view(b, c * f, t).permute(2, 0, 1).contiguous()
        for rnn in self.rnns:
            x = rnn(x, lengths)
        if self.context is not None:
            x = self.context(x)
        return self.softmax(self.out(x).transpose(0, 1)), lengths


def collate(samples):
    samples = sorted(samples, key=lambda s: s[0].size(1), reverse=True)
    freqs, longest = samples[0][0].size(0), samples[0][0].size(1)
    spectrograms = torch.zeros(len(samples), 1, freqs, longest)
    fractions = torch.FloatTensor(len(samples))
    label_lengths = torch.IntTensor(len(samples))
    labels = []
    for b, (spec, text) in enumerate(samples):
        spectrograms[b][0].narrow(1, 0, spec.size(1)).copy_(spec)
        fractions[b] = spec.size(1) / float(longest)
        label_lengths[b] = len(text)
        labels += text
    return spectrograms, torch.tensor(labels, dtype=torch.long), fractions, label_lengths


def greedy_decode(alphabet, probs, lengths):
    _, best = torch.max(probs, 2)
    texts, positions = [], []
    for b in range(best.size(0)):
        text, where = '', []
        for t in range(lengths[b]):
            symbol = alphabet[best[b][t].item()]
            if symbol != '_':
                text += symbol
                where.append(t)
        texts.append(text)
        positions.append(torch.tensor(where, dtype=torch.int))
    return texts, positions


alphabet = '_abcdefg '
net = SpeechNet(alphabet, freqs, cfg)
initialize(net)
record.append(params_of(net))
optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)
batches = [collate([(torch.from_numpy(s), t) for s, t in batch]) for batch in samples]
record.append([b[2].tolist() for b in batches])
net.train()
for spectrograms, labels, fractions, label_lengths in batches:
    lengths = fractions.mul_(int(spectrograms.size(3))).int()
    out, out_lengths = net(spectrograms, lengths)
    loss = net.ctc(out.transpose(0, 1).log_softmax(-1), labels, out_lengths, label_lengths)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 2.0)
    optimizer.step()
    record.append(loss.item())
    record.append(out_lengths.tolist())
    record.append(params_of(net))
net.eval()
with torch.no_grad():
    spectrograms, labels, fractions, label_lengths = batches[0]
    probs, out_lengths = net(spectrograms, fractions.int())
    record.append(probs.numpy().copy())
    record.append(out_lengths.tolist())
    texts, positions = greedy_decode(alphabet, probs, out_lengths)
    record.append(texts)
    record.append([p.tolist() for p in positions])
running = {name: t.numpy().copy() for name, t in net.state_dict().items() if "running" in name}
record.append(running)
'''

SPEECH_STEPS = [
    IMPORTS,
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    (
        "clip_grad_norm_(net.parameters(), 2.0)",
        "clip_grad_norm_(grads, net.parameters(), 2.0)",
    ),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


@pytest.mark.parametrize(("both_ways", "cell"), [(True, "LSTM"), (False, "GRU")])
def test_ctc_speech_model_trains_and_decodes_as_torch(both_ways, cell):
    rng = np.random.default_rng(8901)
    samples = [
        [
            (
                rng.standard_normal((8, length)).astype(np.float32),
                list(rng.integers(1, 8, rng.integers(1, 3))),
            )
            for length in rng.integers(6, 13, 3)
        ]
        for _ in range(2)
    ]
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            SPEECH_SOURCE
            if lib is torch
            else port(SPEECH_SOURCE, SPEECH_STEPS).replace("from torch.", "from retrograd.")
        )
        cfg = types.SimpleNamespace(
            both_ways=both_ways, cell=getattr(lib.nn, cell), hidden=5, context=3
        )
        run_source(
            text,
            lib,
            record=record,
            samples=samples,
            freqs=8,
            cfg=cfg,
            initialize=initialize,
            params_of=params_of,
        )
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 2 + 2 * 3 + 5
    # the first batch's frames after the stride-2 convolution, longest first
    lengths = sorted((s.shape[1] for s, _ in samples[0]), reverse=True)
    assert theirs[-4] == [(n - 1) // 2 + 1 for n in lengths]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


GCN_SOURCE = """
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.optim as optim


def one_hot_classes(names):
    kinds = sorted(set(names))
    table = {k: np.identity(len(kinds))[i, :] for i, k in enumerate(kinds)}
    return np.array([table[n] for n in names], dtype=np.int32)


def rows_normalized(m):
    totals = np.array(m.sum(1)).flatten()
    inverse = np.power(totals, -1.0)
    inverse[np.isinf(inverse)] = 0.0
    return sp.diags(inverse).dot(m)


def as_sparse_tensor(m):
    m = m.tocoo().astype(np.float32)
    where = torch.from_numpy(np.vstack((m.row, m.col)).astype(np.int64))
    return torch.sparse.FloatTensor(where, torch.from_numpy(m.data), torch.Size(m.shape))


def read_graph(folder):
    nodes = np.genfromtxt(folder + "cora.content", dtype=np.dtype(str))
    features = sp.csr_matrix(nodes[:, 1:-1], dtype=np.float32)
    classes = one_hot_classes(nodes[:, -1])
    position = {int(name): i for i, name in enumerate(nodes[:, 0])}
    cites = np.genfromtxt(folder + "cora.cites", dtype=np.int32)
    pairs = np.array([[position[a], position[b]] for a, b in cites], dtype=np.int32)
    adj = sp.coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])),
                        shape=(len(classes), len(classes)), dtype=np.float32)
    adj = adj + adj.T.multiply(adj.T > adj) - adj.multiply(adj.T > adj)  # symmetric
    adj = rows_normalized(adj + sp.eye(adj.shape[0]))
    features = torch.FloatTensor(np.array(rows_normalized(features).todense()))
    labels = torch.LongTensor(np.where(classes)[1])
    return as_sparse_tensor(adj), features, labels


class GraphConv(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.FloatTensor(n_in, n_out))
        self.bias = nn.Parameter(torch.FloatTensor(n_out))
        bound = 1.0 / math.sqrt(n_out)
        self.weight.data.uniform_(-bound, bound)
        self.bias.data.uniform_(-bound, bound)

    def forward(self, x, adj):
        return torch.spmm(adj, torch.mm(x, self.weight)) + self.bias


class TwoLayerGCN(nn.Module):
    def __init__(self, n_in, hidden, n_classes, dropout):
        super().__init__()
        self.first, self.second = GraphConv(n_in, hidden), GraphConv(hidden, n_classes)
        self.dropout = dropout

    def forward(self, x, adj):
        x = F.dropout(F.relu(self.first(x, adj)), self.dropout, training=self.training)
        return F.log_softmax(self.second(x, adj), dim=1)


def accuracy(log_probs, labels):
    hits = log_probs.max(1)[1].type_as(labels).eq(labels).double()
    return hits.sum() / len(labels)


adj, features, labels = read_graph(data_path)
spans = ((0, 8), (8, 12), (12, 18))
train_idx, val_idx, test_idx = (torch.LongTensor(range(a, b)) for a, b in spans)
gcn = TwoLayerGCN(features.shape[1], 5, int(labels.max()) + 1, dropout=0.0)
initialize(gcn)
optimizer = optim.Adam(gcn.parameters(), lr=0.05, weight_decay=5e-4)
for epoch in range(4):
    started = time.time()
    gcn.train()
    optimizer.zero_grad()
    out = gcn(features, adj)
    loss = F.nll_loss(out[train_idx], labels[train_idx])
    acc = accuracy(out[train_idx], labels[train_idx])
    loss.backward()
    optimizer.step()
    gcn.eval()
    out = gcn(features, adj)
    val_loss = F.nll_loss(out[val_idx], labels[val_idx])
    print('epoch {:03d} train {:.4f}/{:.4f} val {:.4f}/{:.4f} ({:.2f}s)'.format(
        epoch + 1, loss.item(), acc.item(), val_loss.item(),
        accuracy(out[val_idx], labels[val_idx]).item(),
        time.time() - started))
    record.append([loss.item(), acc.item(), val_loss.item()])
    record.append(params_of(gcn))
gcn.eval()
out = gcn(features, adj)
test_loss = F.nll_loss(out[test_idx], labels[test_idx])
print("test: loss {:.4f}, accuracy {:.4f}".format(test_loss.item(),
                                                  accuracy(out[test_idx], labels[test_idx]).item()))
record.append(out.detach().numpy().copy())
"""

GCN_STEPS = [
    (
        IMPORTS[0] + "import torch.optim as optim\n",
        IMPORTS[1] + "import retrograd.optim as optim\n",
    ),
    ("    loss.backward()\n    optimizer.step()\n", "    optimizer.step(loss.backward())\n"),
]


def _write_cora(directory, rng, nodes=18, features=10, citations=30):
    """A small graph in Cora's two files: ``<id> <0/1 words...> <label>`` and ``<cited>
    <citing>`` lines, the ids not in order."""
    ids = rng.permutation(1000)[:nodes] + 30
    labels = ["Theory", "Neural_Networks", "Rule_Learning"]
    with open(os.path.join(directory, "cora.content"), "w") as f:
        for i in range(nodes):
            words = (rng.uniform(size=features) < 0.3).astype(int)
            words[i % features] = 1
            f.write("\t".join([str(ids[i]), *map(str, words), labels[rng.integers(0, 3)]]) + "\n")
    with open(os.path.join(directory, "cora.cites"), "w") as f:
        for _ in range(citations):
            a, b = rng.choice(nodes, 2, replace=False)
            f.write(f"{ids[a]}\t{ids[b]}\n")


def test_gcn_trains_as_torch(tmp_path):
    _write_cora(tmp_path, np.random.default_rng(8902))
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        text = (
            GCN_SOURCE
            if lib is torch
            else port(GCN_SOURCE, GCN_STEPS).replace("from torch.", "from retrograd.")
        )
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            run_source(
                text,
                lib,
                record=record,
                data_path=f"{tmp_path}/",
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
        # the timings masked, and the numbers (printed to 4 digits, the last of which may
        # round either way): the records hold them
        logs.append(re.sub(r"\d+\.\d+", "#", out.getvalue()))
    theirs, ours = records
    assert "epoch 004 train #/# val #/# (#s)" in logs[0] and "test: loss #" in logs[0]
    assert logs[1] == logs[0]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_sparse_float_tensor_builds_torchs_sparse_adjacency():
    """``torch.sparse.FloatTensor(indices, values, shape)`` (once refused) is the sparse COO
    tensor torch's is (its indices, values, size and dtype), and ``torch.spmm`` of it is
    torch's product."""
    indices, values = [[0, 1, 1], [1, 0, 2]], [1.0, 2.0, -0.5]
    ours = rg.sparse.FloatTensor(rg.tensor(indices), rg.tensor(values), rg.Size([2, 3]))
    theirs = torch.sparse.FloatTensor(
        torch.tensor(indices), torch.tensor(values), torch.Size([2, 3])
    )
    assert ours.is_sparse and ours.dtype == "float32" and tuple(ours.shape) == (2, 3)
    assert isinstance(ours, rg.sparse.FloatTensor) and not isinstance(
        rg.tensor(values), rg.sparse.FloatTensor
    )
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())
    support = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    np.testing.assert_allclose(
        rg.spmm(ours, rg.tensor(support)).numpy(), torch.spmm(theirs, torch.tensor(support)).numpy()
    )


GP_SOURCE = '''
import math
import warnings

import torch
import torch.nn as nn
from torch.nn import functional as F

torch.set_default_dtype(torch.double)


def cholesky_with_jitter(K, tries=3, first=None):
    """The lower factor of K; if K is only semi-definite, retry with a growing diagonal."""
    try:
        return torch.cholesky(K)
    except RuntimeError as failure:
        if torch.isnan(K).any():
            raise ValueError("the matrix holds NaN") from failure
        step = first if first is not None else (1e-6 if K.dtype == torch.float32 else 1e-8)
        shifted, added = K.clone(), 0.0
        for k in range(tries):
            target = step * 10 ** k
            shifted.diagonal(dim1=-2, dim2=-1).add_(target - added)
            added = target
            try:
                factor = torch.cholesky(shifted)
            except RuntimeError:
                continue
            warnings.warn(f"not positive definite: {target} added to the diagonal", RuntimeWarning)
            return factor
        raise failure


class TwoTaskGP(nn.Module):
    """An exact GP per output, batched over the tasks: RBF kernels, constant means."""

    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y  # (n, d) and (tasks, n)
        tasks = y.shape[0]
        self.raw_length = nn.Parameter(torch.zeros(tasks, 1, x.shape[-1]))
        self.raw_scale = nn.Parameter(torch.zeros(tasks, 1, 1))
        self.log_noise = nn.Parameter(torch.full((tasks, 1, 1), -2.0))
        self.mean = nn.Parameter(torch.zeros(tasks, 1))

    @property
    def length(self):
        return F.softplus(self.raw_length) + 1e-4

    @property
    def scale(self):
        return F.softplus(self.raw_scale)

    def kernel(self, a, b):
        a, b = a.unsqueeze(0) / self.length, b.unsqueeze(0) / self.length
        dist2 = (a ** 2).sum(-1, keepdim=True) + (b ** 2).sum(-1).unsqueeze(-2)
        dist2 = dist2 - 2 * a @ b.transpose(-1, -2)
        return self.scale * torch.exp(-0.5 * dist2.clamp_min(0))

    def factor(self):
        n = self.x.shape[0]
        eye = torch.eye(n, dtype=self.x.dtype)
        gram = self.kernel(self.x, self.x) + (self.log_noise.exp() + 1e-6) * eye
        return torch.linalg.cholesky(gram)

    def loss(self):
        n = self.x.shape[0]
        L = self.factor()
        centred = (self.y - self.mean).unsqueeze(-1)
        fit = 0.5 * (centred * torch.cholesky_solve(centred, L)).sum(dim=(-2, -1))
        half_logdet = torch.log(torch.diagonal(L, dim1=-2, dim2=-1)).sum(-1)
        return (fit + half_logdet + 0.5 * n * math.log(2 * math.pi)).sum() / n

    @torch.no_grad()
    def posterior(self, test):
        L = self.factor()
        weights = torch.cholesky_solve((self.y - self.mean).unsqueeze(-1), L)
        cross = self.kernel(self.x, test)
        mean = (cross.transpose(-1, -2) @ weights).squeeze(-1) + self.mean
        v = torch.linalg.solve_triangular(L, cross, upper=False)
        cov = self.kernel(test, test) - v.transpose(-1, -2) @ v
        return mean, (self.scale.squeeze(-1) - v.pow(2).sum(-2)).clamp_min(1e-10), cov


gp = TwoTaskGP(torch.tensor(data["x"]), torch.tensor(data["y"]))
adam = torch.optim.Adam(gp.parameters(), lr=0.1)
for _ in range(3):
    adam.zero_grad()
    loss = gp.loss()
    loss.backward()
    adam.step()
    record.append(loss.item())
    record.append(params_of(gp))

lbfgs = torch.optim.LBFGS(gp.parameters(), lr=1, max_iter=6, history_size=5,
                          line_search_fn=line_search)


def closure():
    lbfgs.zero_grad()
    loss = gp.loss()
    loss.backward()
    return loss


for _ in range(2):
    record.append(lbfgs.step(closure).item())
    record.append(params_of(gp))
iterations = lbfgs.state[lbfgs._params[0]]["n_iter"]
record.append(iterations)

mu, var, _ = gp.posterior(torch.tensor(data["test_x"]))
record.append(mu.numpy().copy())
record.append((4 * var.sqrt()).numpy().copy())
_, _, cov = gp.posterior(torch.linspace(-0.01, 0.01, 8).unsqueeze(-1).repeat(1, 2))
with warnings.catch_warnings(record=True) as heard:
    warnings.filterwarnings("always", category=RuntimeWarning)
    L = cholesky_with_jitter(cov)
record.append([str(w.message) for w in heard if issubclass(w.category, RuntimeWarning)])
record.append(bool((L @ L.transpose(-1, -2) - cov).abs().max() < 1e-6))
'''

GP_STEPS = [
    IMPORTS,
    ("    loss.backward()\n    adam.step()\n", "    adam.step(loss.backward())\n"),
    (
        "    loss.backward()\n    return loss\n",
        "    grads = loss.backward()\n    return loss, grads\n",
    ),
]


@pytest.mark.parametrize("line_search", ["strong_wolfe", None])
def test_exact_gaussian_process_fits_and_predicts_as_torch(default_dtype, line_search):
    rng = np.random.default_rng(8903)
    x = rng.uniform(-2, 2, (10, 2))
    noise = 0.1 * rng.standard_normal((2, 10))
    y = np.stack([np.sin(2 * x[:, 0]), x[:, 1] ** 2 - 1]) + noise
    data = {"x": x, "y": y, "test_x": rng.uniform(-2, 2, (4, 2))}
    records = []
    for lib in (torch, rg):
        record = []
        text = GP_SOURCE if lib is torch else port(GP_SOURCE, GP_STEPS)
        run_source(
            text, lib, record=record, data=data, line_search=line_search, params_of=params_of
        )
        records.append(record)
    theirs, ours = records
    # the close points' covariance: the plain factorization failed (retrograd raised a
    # ValueError there once, which ``except RuntimeError`` missed), the first jitter sufficed
    assert theirs[-2] == ["not positive definite: 1e-08 added to the diagonal"]
    assert theirs[-1] is True
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)


A3C_SOURCE = '''
import math
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.optim as optim
from torch import multiprocessing as mp


def unit_rows(like, std=1.0):
    """Gaussian rows rescaled to norm ``std`` (small policy logits, unit value head)."""
    w = torch.randn(like.size())
    w *= std / torch.sqrt(w.pow(2).sum(1, keepdim=True))
    return w


def glorot_uniform(m):
    kind = m.__class__.__name__
    if kind.find('Conv') != -1 or kind.find('Linear') != -1:
        shape = list(m.weight.data.size())
        receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
        bound = np.sqrt(6. / (shape[1] * receptive + shape[0] * receptive))
        m.weight.data.uniform_(-bound, bound)
        m.bias.data.fill_(0)


class Agent(nn.Module):
    def __init__(self, channels, n_actions, memory=32):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(channels if i == 0 else 8, 8, 3, stride=2, padding=1)
                                    for i in range(3)])
        self.cell = nn.LSTMCell(8 * 6 * 6, memory)
        self.policy = nn.Linear(memory, n_actions)
        self.value = nn.Linear(memory, 1)
        self.apply(glorot_uniform)
        self.policy.weight.data = unit_rows(self.policy.weight.data, 0.01)
        self.value.weight.data = unit_rows(self.value.weight.data, 1.0)
        for bias in (self.policy.bias, self.value.bias, self.cell.bias_ih, self.cell.bias_hh):
            bias.data.fill_(0)

    def forward(self, screen, memory):
        x = screen
        for conv in self.convs:
            x = F.elu(conv(x))
        h, c = self.cell(x.view(-1, 8 * 6 * 6), memory)
        return self.value(h), self.policy(h), (h, c)


class SharedAdam(optim.Adam):
    """Adam whose moments exist from the start, so worker processes can share them."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, lr, betas, eps)
        for grp in self.param_groups:
            for p in grp['params']:
                self.state[p]['step'] = torch.zeros(1)
                self.state[p]['m'] = p.data.new().resize_as_(p.data).zero_()
                self.state[p]['v'] = p.data.new().resize_as_(p.data).zero_()

    def share_memory(self):
        for s in self.state.values():
            for t in s.values():
                t.share_memory_()

    def step(self, closure=None):
        for grp in self.param_groups:
            b1, b2 = grp['betas']
            for p in grp['params']:
                if p.grad is None:
                    continue
                g, s = p.grad.data, self.state[p]
                s['step'] += 1
                s['m'].mul_(b1).add_(1 - b1, g)  # the old (scalar, tensor) forms
                s['v'].mul_(b2).addcmul_(1 - b2, g, g)
                n = s['step'].item()
                size = grp['lr'] * math.sqrt(1 - b2 ** n) / (1 - b1 ** n)
                p.data.addcdiv_(-size, s['m'], s['v'].sqrt().add_(grp['eps']))


def hand_over_grads(local, shared):
    for mine, theirs in zip(local.parameters(), shared.parameters()):
        if theirs.grad is not None:
            return
        theirs._grad = mine.grad


def worker(rank, shared, counter, lock, optimizer):
    torch.manual_seed(1 + rank)
    env = create_env()
    env.seed(1 + rank)
    local = Agent(env.observation_space.shape[0], env.action_space.n)
    if optimizer is None:
        optimizer = optim.Adam(shared.parameters(), lr=1e-3)
    screen, finished, steps = torch.from_numpy(env.reset()), True, 0
    for update in range(3):
        local.load_state_dict(shared.state_dict())
        if finished:
            h, c = torch.zeros(1, 32), torch.zeros(1, 32)
        else:
            h, c = h.detach(), c.detach()
        values, chosen_logps, entropies, rewards = [], [], [], []
        for _ in range(5):
            steps += 1
            value, logits, (h, c) = local(screen.unsqueeze(0), (h, c))
            probs, logps = F.softmax(logits, dim=-1), F.log_softmax(logits, dim=-1)
            entropies.append(-(logps * probs).sum(1, keepdim=True))
            action = probs.multinomial(num_samples=1).detach()
            frame, reward, finished, _ = env.step(action.numpy())
            with lock:
                counter.value += 1
            if finished:
                steps, frame = 0, env.reset()
            screen = torch.from_numpy(frame)
            values.append(value)
            chosen_logps.append(logps.gather(1, action))
            rewards.append(max(min(reward, 1), -1))
            if finished:
                break
        ret = torch.zeros(1, 1) if finished else local(screen.unsqueeze(0), (h, c))[0].detach()
        values.append(ret)
        actor, critic, gae = 0, 0, torch.zeros(1, 1)
        for t in reversed(range(len(rewards))):
            ret = 0.99 * ret + rewards[t]
            critic = critic + 0.5 * (ret - values[t]).pow(2)
            gae = gae * 0.99 + rewards[t] + 0.99 * values[t + 1] - values[t]
            actor = actor - chosen_logps[t] * gae.detach() - 0.01 * entropies[t]
        optimizer.zero_grad()
        (actor + 0.5 * critic).backward()
        torch.nn.utils.clip_grad_norm_(local.parameters(), 50)
        hand_over_grads(local, shared)
        optimizer.step()
        record.append([actor.item(), critic.item(), len(rewards)])
        record.append(params_of(shared))


torch.manual_seed(1)
env = create_env()
shared = Agent(env.observation_space.shape[0], env.action_space.n)
initialize(shared)
shared.share_memory()
optimizer = None if no_shared else SharedAdam(shared.parameters(), lr=1e-3)
if optimizer is not None:
    optimizer.share_memory()
counter, lock = mp.Value('i', 0), mp.Lock()
worker(0, shared, counter, lock, optimizer)
record.append(counter.value)
if optimizer is not None:
    record.append([optimizer.state[p]['step'].item() for p in shared.parameters()][:3])
    record.append({str(i): optimizer.state[p]['v'].numpy().copy()
                   for i, p in enumerate(shared.parameters()) if i > 6})
'''

A3C_STEPS = [
    (
        IMPORTS[0] + "import torch.optim as optim\nfrom torch import multiprocessing as mp\n",
        IMPORTS[1]
        + "import retrograd.optim as optim\nfrom retrograd import multiprocessing as mp\n",
    ),
    # share_memory: refused by design (no tensor is shared between processes)
    ("initialize(shared)\nshared.share_memory()\n", "initialize(shared)\n"),
    ("if optimizer is not None:\n    optimizer.share_memory()\n", ""),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("                if p.grad is None:", "                if p.grad(grads) is None:"),
    ("g, s = p.grad.data, self.state[p]", "g, s = p.grad(grads).data, self.state[p]"),
    ("def hand_over_grads(local, shared):", "def hand_over_grads(local, shared, grads):"),
    ("        if theirs.grad is not None:", "        if theirs.grad(grads) is not None:"),
    ("        theirs._grad = mine.grad", "        theirs.grad_replace(grads, mine.grad(grads))"),
    ("True, 0\n    for update", "True, 0\n    grads = None\n    for update"),
    (
        "        optimizer.zero_grad()\n        (actor + 0.5 * critic).backward()\n",
        "        if grads is not None:  # zero_grad(): the shared model's gradients to None\n"
        "            for p in shared.parameters():\n"
        "                p.grad_remove(grads)\n"
        "        g = (actor + 0.5 * critic).backward()\n"
        "        grads = g if grads is None else grads + g\n",
    ),
    (
        "clip_grad_norm_(local.parameters(), 50)",
        "clip_grad_norm_(grads, local.parameters(), 50)",
    ),
    (
        "        hand_over_grads(local, shared)\n        optimizer.step()",
        "        hand_over_grads(local, shared, grads)\n        optimizer.step(grads)",
    ),
]


class _Space:
    def __init__(self, shape=None, n=None):
        self.shape, self.n = shape, n


class _ToyAtari:
    """A 42x42 one-channel screen (``create_atari_env``'s frames) with a paddle the agent
    moves left, right or not, towards a target; episodes of 7 steps."""

    def __init__(self):
        self.observation_space, self.action_space = _Space((1, 42, 42)), _Space(n=3)

    def seed(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.pos, self.t, self.target = 20, 0, int(self.rng.integers(4, 38))
        return self._frame()

    def _frame(self):
        frame = np.zeros((1, 42, 42), np.float32)
        frame[0, 30:34, self.pos : self.pos + 4] = 1.0
        frame[0, 4:8, self.target : self.target + 4] = 0.5
        return frame

    def step(self, action):
        self.pos = int(np.clip(self.pos + (int(np.asarray(action).reshape(-1)[0]) - 1) * 3, 0, 38))
        self.t += 1
        distance = abs(self.pos - self.target)
        reward = 2.0 if distance < 3 else -0.01 * distance
        return self._frame(), reward, self.t >= 7, {}


class _SharedMultinomial:
    """``Tensor.multinomial`` of a library drawing from one seeded stream (the inverse of
    the rows' cumulative sums), so both runs take the same actions."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        lib, rng = self.lib, self.rng

        def multinomial(probs, num_samples=1, replacement=False, generator=None):
            p = np.asarray(probs.detach().numpy(), np.float64)
            cumulative = np.cumsum(p / p.sum(-1, keepdims=True), -1)
            u = rng.uniform(size=(*p.shape[:-1], num_samples))
            index = (u[..., :, None] > cumulative[..., None, :]).sum(-1)
            return lib.tensor(np.minimum(index, p.shape[-1] - 1), dtype=lib.int64)

        self.saved = lib.Tensor.multinomial
        lib.Tensor.multinomial = multinomial
        return self

    def __exit__(self, *exc):
        self.lib.Tensor.multinomial = self.saved
        return False


@pytest.mark.parametrize("no_shared", [False, True])
def test_a3c_worker_trains_the_shared_model_as_torch(no_shared):
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = A3C_SOURCE if lib is torch else port(A3C_SOURCE, A3C_STEPS)
        with SharedDraws(lib, 8904), _SharedMultinomial(lib, 8904):
            run_source(
                text,
                lib,
                record=record,
                no_shared=no_shared,
                create_env=_ToyAtari,
                initialize=initialize,
                params_of=params_of,
            )
        records.append(record)
    theirs, ours = records
    assert [r[2] for r in theirs[0:6:2]] == [5, 2, 5]  # rollouts cut by the episode's end
    assert theirs[6] == 12  # the shared counter
    # Adam's first steps follow the rounding noise of near-zero gradients: atol of 1% of lr
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-5)
