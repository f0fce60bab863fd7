"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- a long-horizon forecaster written here in the style of zhouhaoyi/Informer2020 (24 steps in, 12 +
  6 out, 3 series, width 16, two heads, ``factor=2``, dropout left out: its masks are each
  library's own draws), with ProbSparse-style attention and with full attention, distilling on:
  ``K.unsqueeze(-3).expand(B, H, L_Q, L_K, E)`` indexed by ``[:, :, torch.arange(L_Q).unsqueeze(
  1), picks, :]`` with ``torch.randint(L_K, (L_Q, n))`` (one seeded stream in both runs),
  ``M.topk(n, sorted=False)[1]``, ``Q[torch.arange(B)[:, None, None], torch.arange(H)[None, :,
  None], top, :]``, the cheap context by ``V.cumsum(dim=-2)`` or ``V.mean(dim=-2)...expand(
  ...).clone()`` updated by ``context[arange, arange, top, :] = torch.matmul(attn,
  V).type_as(context)``, the sampled causal mask by ``triu(1)`` expanded and gathered,
  ``scores.masked_fill_(mask, -np.inf)`` in place, ``np.ceil(np.log(L)).astype('int').item()``,
  ``torch.einsum("blhe,bshe->bhls", ...)`` with a ``torch.triu`` bool mask; a circular
  ``nn.Conv1d`` token embedding with ``kaiming_normal_(mode='fan_in',
  nonlinearity='leaky_relu')``, ``table.require_grad = False`` (a no-op attribute) and ``pe[:,
  0::2] = torch.sin(...)``, an ``nn.Embedding`` whose weight is replaced by
  ``nn.Parameter(w, requires_grad=False)`` and ``.detach()``-ed, ``x.long()`` time marks; the
  distilling block (circular conv, ``BatchNorm1d``, ``ELU``, ``MaxPool1d(3, 2, 1)``), kernel-1
  ``Conv1d`` feed-forwards on ``y.transpose(-1, 1)``, the mixed heads' ``transpose(2,
  1).contiguous()``, ``.float()`` of the model, ``torch.cat([y[:, :label_len, :], blank],
  dim=1)``, ``np.average`` of 0-d tensors and ``group['lr'] = lr`` updates.
- Deep Graph Infomax written here in the style of PetarV-/DGI, on a small random graph with
  Cora's layout (30 nodes, 20 features, 16 hidden units, 4 epochs, two linear probes of 6 steps):
  dense (``torch.FloatTensor`` of ``np.matrix`` values with ``[np.newaxis]``, ``torch.bmm``) and
  sparse, which retrograd first refused (``torch.sparse.FloatTensor(indices, values,
  torch.Size(shape))`` from ``torch.from_numpy`` of SciPy's COO parts, and
  ``torch.unsqueeze(torch.spmm(adj, torch.squeeze(h, 0)), 0)``); ``h += self.bias``,
  ``nn.PReLU``, ``nn.Bilinear`` scores against ``summary.expand_as(h)``, corruption by
  ``feats[:, np.random.permutation(n), :]``, ``nn.BCEWithLogitsLoss``, ``print('Loss:', loss)``,
  the best epoch by ``if loss < best`` on tensors with ``torch.save(model.state_dict(), path)``
  and ``torch.load``, detached embeddings probed with ``torch.argmax`` labels, accuracies
  ``torch.stack``-ed, ``mean()`` and ``std()``.
- an N-BEATS forecaster written here in the style of philipperemy/n-beats (a Keras-like
  ``compile``/``fit``/``predict``), with trend and seasonality stacks and with generic ones
  tied within a stack: ``self.parameters = []`` (a list shadowing the method) extended by each
  unit's ``parameters()`` and then replaced by ``nn.ParameterList(self.parameters)`` (which
  makes ``self.parameters()`` the method again), units kept in plain lists (not sub-modules),
  ``self.to_back = self.to_fore = nn.Linear(...)``, ``__str__`` overridden,
  ``opt_class(lr=..., params=self.parameters())``, ``torch.zeros(size=(...,))``, bases by
  ``torch.tensor([np.cos(2 * np.pi * k * t) for k in ...]).float()`` of NumPy rows and
  ``theta.mm(S.to(device))``, ``random.shuffle`` of the batches, ``torch.tensor(x,
  dtype=torch.float)`` and ``f'{loss:.4f}'``.
- a Conformer speech encoder written here in the style of sooftware/conformer, with a CTC loss
  and three SGD steps with momentum (8 features wide, 32 frames, one layer, kernel 5, no
  dropout): two strided ``Conv2d`` subsampling and ``permute(0, 2, 1, 3)``, output lengths by
  ``(lengths >> 2) - 1``, a relative positional encoding kept in a plain attribute (``self.pe =
  None`` then a tensor) and sliced about its middle, ``torch.flip(pe, [0])``, Transformer-XL's
  relative shift (``new_zeros``, ``torch.cat``, a ``view`` to the transposed shape, ``[:, :,
  1:].view_as(scores)``), ``u_bias``/``v_bias`` parameters, depthwise ``Conv1d``
  (``groups=channels``), a GLU by ``x.chunk(2, dim=self.dim)``, Swish, ``BatchNorm1d``, half-step
  residuals, transpose modules in ``nn.Sequential``, ``init.xavier_uniform_``/``init.zeros_``,
  ``from torch import Tensor`` annotations and a parameter count.
- optimizers written here in the style of LiyuanLucasLiu/RAdam (a rectified Adam and a warm-up
  AdamW), each training a small regression seven steps so both of the rectified branches run
  (momentum SGD, or no step, while the variance is not tractable; the rectified step after):
  ``from torch.optim.optimizer import required, Optimizer``, a cache ``[[None, None, None] for _
  in range(10)]`` in the defaults and per group (a group with ``betas`` of its own),
  ``p.grad.data.float()``, ``grad.is_sparse``, ``state['exp_avg'].type_as(w)``,
  ``p.data.copy_(w)``, and the deprecated scale-first overloads (``m.mul_(b1).add_(1 - b1,
  g)``, ``v.mul_(b2).addcmul_(1 - b2, g, g)``, ``w.addcdiv_(-size, m, denom)``, ``w.add_(-wd *
  lr, w)``).
- a lookahead wrapper written here in the style of michaelrzhang/lookahead around SGD with
  momentum, the inner momentum kept or reset (pullback is left: see the CHANGELOG), seven steps
  of a small regression: an ``Optimizer`` subclass that never calls ``super().__init__``, its
  own ``state = defaultdict(dict)`` and a ``param_groups`` property, the slow weights by
  ``p.data.mul_(alpha).add_(1.0 - alpha, slow)`` (the deprecated overload), the inner SGD's
  ``state[p]["momentum_buffer"]`` read and replaced by ``torch.zeros_like(p.data)`` (the next
  steps use what was written there), and an evaluation on the slow weights swapped in and out.

The lines changed: the gradient lines (``grads = loss.backward()``, ``opt.step(grads)``; in the
optimizers written as torch's, ``step(self, grads, closure=None)`` and ``p.grad(grads)``), the
``import`` lines naming ``torch``, and ``torch.__version__>='1.5.0'`` (the circular
convolutions' padding; retrograd's ``__version__`` is its own, ``0.1.0``, see the CHANGELOG).
"""

from __future__ import annotations

import types

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

INFORMER_SOURCE = """
import torch
from torch import nn, optim

F = nn.functional


class CausalMask:
    def __init__(self, b, l):
        with torch.no_grad():
            self.mask = torch.triu(torch.ones([b, 1, l, l], dtype=torch.bool), diagonal=1)


class SampledCausalMask:
    # the causal mask of the kept queries only
    def __init__(self, b, h, l, kept, scores):
        full = torch.ones(l, scores.shape[-1], dtype=torch.bool).triu(1)
        wide = full[None, None, :].expand(b, h, l, scores.shape[-1])
        self.mask = wide[torch.arange(b)[:, None, None], torch.arange(h)[None, :, None], kept, :]
        self.mask = self.mask.view(scores.shape)


class DenseAttention(nn.Module):
    def __init__(self, causal=True):
        super().__init__()
        self.causal = causal

    def forward(self, q, k, v, mask):
        b, l, h, e = q.shape
        scores = torch.einsum("blhe,bshe->bhls", q, k)
        if self.causal:
            scores.masked_fill_(CausalMask(b, l).mask, -np.inf)
        weights = torch.softmax(scores / math.sqrt(e), dim=-1)
        return torch.einsum("bhls,bshd->blhd", weights, v).contiguous()


class SparseQueryAttention(nn.Module):
    # scores only the queries whose sampled score spread is largest; the rest keep a
    # cheap context (running sum under a causal mask, mean otherwise)
    def __init__(self, causal=True, c=2):
        super().__init__()
        self.causal, self.c = causal, c

    def spread(self, q, k, n_sample, n_top):
        b, h, lk, e = k.shape
        lq = q.shape[-2]
        k_wide = k.unsqueeze(-3).expand(b, h, lq, lk, e)
        picks = torch.randint(lk, (lq, n_sample))
        k_some = k_wide[:, :, torch.arange(lq).unsqueeze(1), picks, :]
        some = torch.matmul(q.unsqueeze(-2), k_some.transpose(-2, -1)).squeeze()
        gap = some.max(-1)[0] - torch.div(some.sum(-1), lk)
        top = gap.topk(n_top, sorted=False)[1]
        q_top = q[torch.arange(b)[:, None, None], torch.arange(h)[None, :, None], top, :]
        return torch.matmul(q_top, k.transpose(-2, -1)), top

    def forward(self, q, k, v, mask):
        b, lq, h, d = q.shape
        lk = k.shape[1]
        q, k, v = q.transpose(2, 1), k.transpose(2, 1), v.transpose(2, 1)
        n_sample = min(self.c * np.ceil(np.log(lk)).astype("int").item(), lk)
        n_top = min(self.c * np.ceil(np.log(lq)).astype("int").item(), lq)
        scores, top = self.spread(q, k, n_sample, n_top)
        scores = scores / math.sqrt(d)
        if self.causal:
            context = v.cumsum(dim=-2)
            scores.masked_fill_(SampledCausalMask(b, h, lq, top, scores).mask, -np.inf)
        else:
            context = v.mean(dim=-2).unsqueeze(-2).expand(b, h, lq, v.shape[-1]).clone()
        weights = torch.softmax(scores, dim=-1)
        context[torch.arange(b)[:, None, None], torch.arange(h)[None, :, None], top, :] = (
            torch.matmul(weights, v).type_as(context)
        )
        return context.transpose(2, 1).contiguous()


class Heads(nn.Module):
    def __init__(self, inner, width, n_heads, mix=False):
        super().__init__()
        self.inner, self.n_heads, self.mix = inner, n_heads, mix
        self.to_q = nn.Linear(width, width)
        self.to_k = nn.Linear(width, width)
        self.to_v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x, memory, mask=None):
        b, l, _ = x.shape
        s, h = memory.shape[1], self.n_heads
        out = self.inner(
            self.to_q(x).view(b, l, h, -1),
            self.to_k(memory).view(b, s, h, -1),
            self.to_v(memory).view(b, s, h, -1),
            mask,
        )
        if self.mix:  # heads interleaved with time, as the sparse decoder does
            out = out.transpose(2, 1).contiguous()
        return self.out(out.view(b, l, -1))


def circular_conv(c_in, c_out):
    pad = 1 if torch.__version__ >= '1.5.0' else 2
    conv = nn.Conv1d(c_in, c_out, kernel_size=3, padding=pad, padding_mode="circular")
    nn.init.kaiming_normal_(conv.weight, mode="fan_in", nonlinearity="leaky_relu")
    return conv


def sinusoids(n, width):
    table = torch.zeros(n, width).float()
    table.require_grad = False  # (a typo kept from the style: a no-op attribute)
    where = torch.arange(0, n).float().unsqueeze(1)
    rate = (torch.arange(0, width, 2).float() * -(math.log(10000.0) / width)).exp()
    table[:, 0::2] = torch.sin(where * rate)
    table[:, 1::2] = torch.cos(where * rate)
    return table


class FrozenTable(nn.Module):
    def __init__(self, n, width):
        super().__init__()
        self.embed = nn.Embedding(n, width)
        self.embed.weight = nn.Parameter(sinusoids(n, width), requires_grad=False)

    def forward(self, ids):
        return self.embed(ids).detach()


class Embed(nn.Module):
    def __init__(self, c_in, width):
        super().__init__()
        self.values = circular_conv(c_in, width)
        self.register_buffer("positions", sinusoids(64, width).unsqueeze(0))
        self.calendar = nn.ModuleList([FrozenTable(n, width) for n in (13, 32, 7, 24)])

    def forward(self, x, marks):
        marks = marks.long()
        out = self.values(x.permute(0, 2, 1)).transpose(1, 2)
        out = out + self.positions[:, : x.size(1)]
        for i, table in enumerate(self.calendar):
            out = out + table(marks[:, :, i])
        return out


class Halve(nn.Module):
    # distilling between encoder layers: conv, norm, ELU, stride-2 max pool over time
    def __init__(self, width):
        super().__init__()
        self.conv = circular_conv(width, width)
        self.norm = nn.BatchNorm1d(width)
        self.act = nn.ELU()
        self.pool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(self.act(self.norm(self.conv(x.permute(0, 2, 1))))).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, attend, width, cross=None):
        super().__init__()
        self.attend, self.cross = attend, cross
        self.up = nn.Conv1d(width, width, kernel_size=1)
        self.down = nn.Conv1d(width, width, kernel_size=1)
        self.norms = nn.ModuleList([nn.LayerNorm(width) for _ in range(3 if cross else 2)])

    def forward(self, x, memory=None):
        x = self.norms[0](x + self.attend(x, x))
        if self.cross is not None:
            x = self.norms[1](x + self.cross(x, memory))
        y = F.gelu(self.up(x.transpose(-1, 1)))
        return self.norms[-1](x + self.down(y).transpose(-1, 1))


class Forecaster(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.horizon = a.pred_len
        w, h = a.d_model, a.n_heads
        self.enc_embed = Embed(a.enc_in, w)
        self.dec_embed = Embed(a.dec_in, w)
        if a.attn == "prob":
            kind = lambda causal: SparseQueryAttention(causal, a.factor)
        else:
            kind = DenseAttention
        self.encoder = nn.ModuleList([Block(Heads(kind(False), w, h), w) for _ in range(2)])
        self.halve = Halve(w)
        self.enc_norm = nn.LayerNorm(w)
        cross = Heads(DenseAttention(False), w, h)
        self.decoder = Block(Heads(kind(True), w, h, mix=True), w, cross=cross)
        self.head = nn.Linear(w, a.c_out)

    def forward(self, x, x_marks, y, y_marks):
        memory = self.encoder[0](self.enc_embed(x, x_marks))
        memory = self.enc_norm(self.encoder[1](self.halve(memory)))
        out = self.decoder(self.dec_embed(y, y_marks), memory)
        return self.head(out)[:, -self.horizon :, :]


def decayed(optimizer, epoch, base):
    lr = base * (0.5 ** (epoch - 1))
    for g in optimizer.param_groups:
        g["lr"] = lr
    print("Updating learning rate to {}".format(lr))


def one_batch(forecaster, x, y, x_marks, y_marks):
    x, y = x.float(), y.float()
    blank = torch.zeros([y.shape[0], args.pred_len, y.shape[-1]]).float()
    dec_in = torch.cat([y[:, : args.label_len, :], blank], dim=1).float()
    return forecaster(x, x_marks.float(), dec_in, y_marks.float()), y[:, -args.pred_len :, :]


forecaster = Forecaster(args).float()
initialize(forecaster)
opt = optim.Adam(forecaster.parameters(), lr=args.learning_rate)
mse = nn.MSELoss()
for epoch in range(args.train_epochs):
    forecaster.train()
    seen = []
    for i, batch in enumerate(loader(torch, "train")):
        opt.zero_grad()
        guess, truth = one_batch(forecaster, *batch)
        loss = mse(guess, truth)
        seen.append(loss.item())
        print("\\tbatch {} epoch {} | loss {:.6f}".format(i + 1, epoch + 1, loss.item()))
        loss.backward()
        opt.step()
        record.append(loss.item())
        record.append(params_of(forecaster))
    forecaster.eval()
    with torch.no_grad():
        held = [mse(*one_batch(forecaster, *batch)).detach() for batch in loader(torch, "val")]
    held = np.average(held)
    record.append(held)
    print("epoch {} | train {:.6f} held-out {:.6f}".format(epoch + 1, np.average(seen), held))
    decayed(opt, epoch + 1, args.learning_rate)
"""

INFORMER_STEPS = [
    (
        "import torch\nfrom torch import nn, optim\n",
        "import retrograd as torch\nfrom torch import nn, optim\n",
    ),
    ("pad = 1 if torch.__version__ >= '1.5.0' else 2", "pad = 1"),
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


def _loader(lib, flag, rng_seed=55):
    """Batches as ``Dataset_ETT_hour`` gives them through a ``DataLoader``: float64 windows
    of 3 series and integer (month, day, weekday, hour) marks, as float64."""
    rng = np.random.default_rng(rng_seed + (flag == "val"))
    batches = []
    for _ in range(1):
        start = rng.integers(0, 1000, size=4)
        hours = start[:, None] + np.arange(24 + 6)[None, :]
        series = np.sin(hours[..., None] / np.array([5.0, 7.0, 11.0])) + 0.1 * rng.standard_normal(
            (4, 30, 3)
        )
        marks = np.stack(
            [hours // 720 % 12 + 1, hours // 24 % 31 + 1, hours // 24 % 7, hours % 24], axis=-1
        ).astype(np.float64)
        batches.append(
            tuple(
                lib.tensor(a)
                for a in (series[:, :24], series[:, 12:], marks[:, :24], marks[:, 12:])
            )
        )
    return batches


def _args(attn):
    return types.SimpleNamespace(
        model="informer", enc_in=3, dec_in=3, c_out=3, seq_len=24, label_len=12, pred_len=6,
        factor=2, d_model=16, n_heads=2, e_layers=2, d_layers=1, d_ff=16, dropout=0.0,
        attn=attn, embed="fixed", freq="h", activation="gelu", output_attention=False,
        distil=True, mix=True, padding=0, features="M", learning_rate=3e-3, lradj="type1",
        train_epochs=2,
    )  # fmt: skip


@pytest.mark.parametrize("attn", ["prob", "full"])
def test_informer_trains_as_torch(capsys, attn):
    records, logs = runs_with_draws(
        INFORMER_SOURCE,
        INFORMER_STEPS,
        capsys,
        seed=55,
        initialize=initializer(),
        params_of=params_of,
        args=_args(attn),
        loader=_loader,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Updating learning rate") == 2
    assert [line[:20] for line in logs[1].splitlines()] == [
        line[:20] for line in logs[0].splitlines()
    ]
    # zero gradients, so Adam's steps follow the rounding: the keys' biases (softmax is
    # shift-invariant) and the biases a batch norm removes (the distilling convolution's and
    # the layer norm's before it)
    zero = [name for name in theirs[1] if name.endswith("to_k.bias")]
    zero += ["0.encoder.0.norms.1.bias", "0.halve.conv.bias"]
    assert len(zero) == 6 and all(name in theirs[1] for name in zero)
    valis = (2, 5)  # in eval mode the batch norm's running mean holds those biases' steps
    assert_records_agree(
        [r for i, r in enumerate(ours) if i not in valis],
        [r for i, r in enumerate(theirs) if i not in valis],
        rtol=1e-4,
        atol=1e-5,
        skip=zero,
    )
    np.testing.assert_allclose([ours[i] for i in valis], [theirs[i] for i in valis], rtol=5e-3)


# -- Deep Graph Infomax ---------------------------------------------------------------------------
DGI_SOURCE = """
import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn


def xavier_init(module):
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Bilinear)):
            nn.init.xavier_uniform_(m.weight.data)
            if m.bias is not None:
                m.bias.data.fill_(0.0)


class GraphConv(nn.Module):
    def __init__(self, n_in, n_out):
        super(GraphConv, self).__init__()
        self.lin = nn.Linear(n_in, n_out, bias=False)
        self.bias = nn.Parameter(torch.FloatTensor(n_out))
        self.bias.data.fill_(0.0)
        self.act = nn.PReLU()
        xavier_init(self)

    def forward(self, x, adj, sparse=False):
        h = self.lin(x)
        if sparse:
            h = torch.unsqueeze(torch.spmm(adj, torch.squeeze(h, 0)), 0)
        else:
            h = torch.bmm(adj, h)
        h += self.bias
        return self.act(h)


class Infomax(nn.Module):
    # node embeddings scored against the graph summary: real nodes vs shuffled ones
    def __init__(self, n_in, n_hidden):
        super(Infomax, self).__init__()
        self.conv = GraphConv(n_in, n_hidden)
        self.score = nn.Bilinear(n_hidden, n_hidden, 1)
        xavier_init(self.score)

    def summary(self, h):
        return torch.sigmoid(torch.mean(h, 1))

    def forward(self, real, fake, adj, sparse):
        h_real = self.conv(real, adj, sparse)
        h_fake = self.conv(fake, adj, sparse)
        s = torch.unsqueeze(self.summary(h_real), 1).expand_as(h_real)
        real_score = torch.squeeze(self.score(h_real, s), 2)
        return torch.cat((real_score, torch.squeeze(self.score(h_fake, s), 2)), 1)

    def embed(self, x, adj, sparse):
        return self.conv(x, adj, sparse).detach()


def to_sparse_tensor(matrix):
    coo = matrix.tocoo().astype(np.float32)
    where = torch.from_numpy(np.vstack((coo.row, coo.col)).astype(np.int64))
    return torch.sparse.FloatTensor(where, torch.from_numpy(coo.data), torch.Size(coo.shape))


def sym_normalized(adj):
    degree = np.array(adj.sum(1)).flatten()
    scale = sp.diags(np.power(degree, -0.5))
    return scale.dot(adj).dot(scale).tocoo()


sparse = False
adj, feats, labels, train_ids, val_ids, test_ids = load_data('cora')
row_sums = np.array(feats.sum(1)).flatten()
inverse = np.power(row_sums, -1.0)
inverse[np.isinf(inverse)] = 0.0  # (a node without features keeps a zero row)
feats = sp.diags(inverse).dot(feats).todense()
adj = sym_normalized(adj + sp.eye(adj.shape[0]))
if sparse:
    adj = to_sparse_tensor(adj)
else:
    adj = torch.FloatTensor(adj.todense()[np.newaxis])
n_nodes, n_feats = feats.shape
feats = torch.FloatTensor(feats[np.newaxis])
onehot = torch.FloatTensor(labels[np.newaxis])
train_ids, test_ids = torch.LongTensor(train_ids), torch.LongTensor(test_ids)

dgi = Infomax(n_feats, 16)
initialize(dgi)
optimiser = torch.optim.Adam(dgi.parameters(), lr=0.01, weight_decay=0.0)
bce = nn.BCEWithLogitsLoss()
targets = torch.cat((torch.ones(1, n_nodes), torch.zeros(1, n_nodes)), 1)
best, best_epoch = 1e9, 0
for epoch in range(4):
    dgi.train()
    optimiser.zero_grad()
    shuffled = feats[:, np.random.permutation(n_nodes), :]
    loss = bce(dgi(feats, shuffled, adj, sparse), targets)
    print('Loss:', loss)
    if loss < best:
        best, best_epoch = loss, epoch
        torch.save(dgi.state_dict(), 'best_infomax.pkl')
    loss.backward()
    optimiser.step()
    record.append(loss.item())
    record.append(params_of(dgi))

print('Loading epoch {}'.format(best_epoch))
dgi.load_state_dict(torch.load('best_infomax.pkl'))
embeds = dgi.embed(feats, adj, sparse)
train_y = torch.argmax(onehot[0, train_ids], dim=1)
test_y = torch.argmax(onehot[0, test_ids], dim=1)
xent = nn.CrossEntropyLoss()
scores = []
for _ in range(2):
    probe = nn.Linear(16, onehot.shape[-1])
    xavier_init(probe)
    initialize(probe)
    opt = torch.optim.Adam(probe.parameters(), lr=0.01)
    for _ in range(6):
        opt.zero_grad()
        loss = xent(probe(embeds[0, train_ids]), train_y)
        loss.backward()
        opt.step()
        record.append(loss.item())
    hits = torch.argmax(probe(embeds[0, test_ids]), dim=1) == test_y
    scores.append(torch.sum(hits).float() / test_y.shape[0] * 100)
scores = torch.stack(scores)
print('accuracy', scores.mean(), scores.std())
record.append(scores.numpy())
record.append(embeds.numpy())
"""

DGI_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimiser.step()",
        "    grads = loss.backward()\n    optimiser.step(grads)",
    ),
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


def _load_data(dataset):
    """``process.load_data('cora')`` of a small random graph: SciPy sparse adjacency and
    features, one-hot labels, index ranges."""
    import scipy.sparse as sp

    assert dataset == "cora"
    rng = np.random.default_rng(55)
    edges = rng.uniform(size=(30, 30)) < 0.12
    adj = sp.csr_matrix(np.triu(edges, 1) + np.triu(edges, 1).T, dtype=np.float64)
    features = sp.lil_matrix((rng.uniform(size=(30, 20)) < 0.3).astype(np.float32))
    labels = np.eye(3)[rng.integers(0, 3, 30)]
    return adj, features, labels, range(0, 12), range(12, 20), range(20, 30)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_deep_graph_infomax_trains_as_torch(capsys, tmp_path, monkeypatch, sparse):
    monkeypatch.chdir(tmp_path)
    source = (
        DGI_SOURCE if not sparse else DGI_SOURCE.replace("\nsparse = False\n", "\nsparse = True\n")
    )
    assert ("\nsparse = True\n" in source) == sparse
    records, logs = runs_with_draws(
        source,
        DGI_STEPS,
        capsys,
        seed=57,
        initialize=initializer(),
        params_of=params_of,
        load_data=_load_data,
    )
    ours, theirs = records[1], records[0]
    assert logs[0].count("Loss:") == 4
    loading = [[line for line in log.splitlines() if line.startswith("Loading")] for log in logs]
    assert loading[0] == loading[1] == ["Loading epoch 3"]  # (saved before its step)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- N-BEATS -------------------------------------------------------------------------------------
NBEATS_SOURCE = """
import random
from typing import Union

import numpy as np
import torch
from torch import nn, optim
from torch.nn.functional import l1_loss, mse_loss


def polynomial_basis(n_terms, t):
    return torch.tensor([t ** k for k in range(n_terms)]).float()


def fourier_basis(n_terms, t):
    half = n_terms // 2
    rows = [np.cos(2 * np.pi * k * t) for k in range(half)]
    rows += [np.sin(2 * np.pi * k * t) for k in range(n_terms - half)]
    return torch.tensor(rows).float()


class Unit(nn.Module):
    # one doubly residual block: an MLP, then coefficients on a fixed or learned basis
    def __init__(self, kind, width, n_theta, n_back, n_fore, device):
        super(Unit, self).__init__()
        self.kind, self.width, self.n_theta, self.device = kind, width, n_theta, device
        self.mlp = nn.Sequential(
            nn.Linear(n_back, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()
        )
        grid = np.arange(-n_back, n_fore) / (n_back + n_fore)
        if kind == 'generic':
            self.to_back = nn.Linear(width, n_theta, bias=False)
            self.to_fore = nn.Linear(width, n_theta, bias=False)
            self.back_out = nn.Linear(n_theta, n_back)
            self.fore_out = nn.Linear(n_theta, n_fore)
        else:  # one coefficient head serves both directions
            self.to_back = self.to_fore = nn.Linear(width, n_theta, bias=False)
            basis = polynomial_basis if kind == 'trend' else fourier_basis
            self.back_basis = basis(n_theta, grid[:n_back])
            self.fore_basis = basis(n_theta, grid[n_back:])

    def forward(self, x):
        h = self.mlp(x.to(self.device))
        if self.kind == 'generic':
            return self.back_out(self.to_back(h)), self.fore_out(self.to_fore(h))
        back = self.to_back(h).mm(self.back_basis.to(self.device))
        return back, self.to_fore(h).mm(self.fore_basis.to(self.device))

    def __str__(self):
        return f'{self.kind} unit: width {self.width}, {self.n_theta} coefficients'


class Forecaster(nn.Module):
    def __init__(self, kinds, per_stack=2, width=16, n_theta=(4, 6), n_back=10, n_fore=5, tie=False,
                 device=torch.device('cpu')):
        super(Forecaster, self).__init__()
        self.n_fore, self.device = n_fore, device
        self.parameters = []  # (a list for now: replaced below, the method comes back)
        self.stacks = []  # plain lists: the units are reached through self.parameters only
        for s, kind in enumerate(kinds):
            units = []
            for u in range(per_stack):
                if tie and u > 0:
                    units.append(units[-1])
                else:
                    units.append(Unit(kind, width, n_theta[s], n_back, n_fore, device))
                    self.parameters.extend(units[-1].parameters())
                print(f'stack {s}: {units[-1]}')
            self.stacks.append(units)
        self.parameters = nn.ParameterList(list(self.parameters))
        self.to(self.device)

    def forward(self, x):
        x = x[..., 0] if x.dim() == 3 else x
        forecast = torch.zeros(size=(x.size()[0], self.n_fore,))
        for units in self.stacks:
            for unit in units:
                back, fore = unit(x)
                x = x - back
                forecast = forecast + fore
        return x, forecast

    def compile(self, loss: str, opt: Union[str, optim.Optimizer]) -> None:
        self._loss = {'mae': l1_loss, 'mse': mse_loss}[loss]
        if isinstance(opt, str):
            opt_class = {'adam': optim.Adam, 'sgd': optim.SGD}[opt]
            opt = opt_class(lr=3e-3, params=self.parameters())
        self._opt = opt

    def fit(self, x, y, validation_data, epochs, batch_size):
        starts = list(range(0, len(x), batch_size))
        for epoch in range(epochs):
            random.shuffle(starts)
            self.train()
            losses = []
            for i in starts:
                self._opt.zero_grad()
                rows = slice(i, i + batch_size)
                _, guess = self(torch.tensor(x[rows], dtype=torch.float).to(self.device))
                loss = self._loss(guess, torch.tensor(y[rows, :, 0], dtype=torch.float))
                losses.append(loss.item())
                loss.backward()
                self._opt.step()
                record.extend([loss.item(), params_of(self)])
            self.eval()
            vx, vy = validation_data
            _, guess = self(torch.tensor(vx, dtype=torch.float))
            val_loss = self._loss(guess, torch.tensor(vy[..., 0], dtype=torch.float)).item()
            print(f'epoch {epoch + 1}/{epochs} - loss: {np.mean(losses):.4f} - '
                  f'val_loss: {val_loss:.4f}')

    def predict(self, x, backcast=False):
        self.eval()
        back, fore = self(torch.tensor(x, dtype=torch.float))
        return np.expand_dims((back if backcast else fore).detach().numpy(), axis=-1)


net = Forecaster(stack_types, tie=share)
initialize(net)
net.compile(loss='mae', opt='adam')
net.fit(x_train, y_train, batch_size=16, epochs=2, validation_data=(x_test, y_test))
record.append(net.predict(x_test, backcast=False))
record.append(net.predict(x_test, backcast=True))
record.append(sum(1 for _ in net.parameters()))
"""

NBEATS_STEPS = [
    (
        "import torch\nfrom torch import nn, optim\n",
        "import retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
    (
        "                loss.backward()\n                self._opt.step()",
        "                grads = loss.backward()\n                self._opt.step(grads)",
    ),
]


def _windows(n, seed):
    rng = np.random.default_rng(seed)
    start = rng.uniform(0, 20, size=(n, 1))
    t = start + np.arange(15)[None, :] * 0.7
    series = np.sin(t) + 0.05 * t + 0.05 * rng.standard_normal(t.shape)
    return series[:, :10, None], series[:, 10:, None]  # (n, 10, 1) and (n, 5, 1), as its data.py


@pytest.mark.parametrize(
    "stack_types, share",
    [(("trend", "seasonality"), False), (("generic", "generic"), True)],
)
def test_nbeats_trains_as_torch(capsys, stack_types, share):
    x_train, y_train = _windows(40, 1)
    x_test, y_test = _windows(8, 2)
    records, logs = runs_with_draws(
        NBEATS_SOURCE,
        NBEATS_STEPS,
        capsys,
        seed=58,
        initialize=initializer(),
        params_of=params_of,
        stack_types=stack_types,
        share=share,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
    )
    ours, theirs = records[1], records[0]
    assert theirs[-1] == 20  # the parameters of the units made (a tied unit counts once)
    assert logs[0].count("val_loss") == 2
    assert logs[0].count("unit: width 16") == 4  # (the units' own __str__)
    assert [line[:40] for line in logs[1].splitlines()] == [
        line[:40] for line in logs[0].splitlines()
    ]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- the Conformer ---------------------------------------------------------------------------------
CONFORMER_SOURCE = """
import math
import torch
from torch import Tensor, nn
from torch.nn import functional as F, init


class Swish(nn.Module):
    def forward(self, t: Tensor) -> Tensor:
        return t * t.sigmoid()


class GatedHalf(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, t: Tensor) -> Tensor:
        value, gate = t.chunk(2, dim=self.dim)
        return value * gate.sigmoid()


class Swap(nn.Module):
    def __init__(self, a: int, b: int):
        super().__init__()
        self.a, self.b = a, b

    def forward(self, t: Tensor) -> Tensor:
        return t.transpose(self.a, self.b)


class Scaled(nn.Module):
    # x + scale * f(x): the macaron feed-forwards add half a step
    def __init__(self, inner: nn.Module, scale: float = 1.0):
        super().__init__()
        self.inner, self.scale = inner, scale

    def forward(self, t: Tensor) -> Tensor:
        return t + self.scale * self.inner(t)


def linear(n_in: int, n_out: int, bias: bool = True) -> nn.Linear:
    layer = nn.Linear(n_in, n_out, bias=bias)
    init.xavier_uniform_(layer.weight)
    if bias:
        init.zeros_(layer.bias)
    return layer


class RelativePositions(nn.Module):
    # sinusoids for offsets +(T-1) .. -(T-1), built on first use and kept (not a buffer)
    def __init__(self, d: int):
        super().__init__()
        self.d = d
        self.pe = None

    def build(self, n: int):
        if self.pe is not None and self.pe.size(1) >= 2 * n - 1:
            return
        offsets = torch.arange(0, n, dtype=torch.float32).unsqueeze(1)
        evens = torch.arange(0, self.d, 2, dtype=torch.float32)
        freq = torch.exp(evens * -(math.log(10000.0) / self.d))
        ahead, behind = torch.zeros(n, self.d), torch.zeros(n, self.d)
        ahead[:, 0::2], ahead[:, 1::2] = torch.sin(offsets * freq), torch.cos(offsets * freq)
        behind[:, 0::2], behind[:, 1::2] = torch.sin(-offsets * freq), torch.cos(-offsets * freq)
        self.pe = torch.cat([torch.flip(ahead, [0]).unsqueeze(0), behind[1:].unsqueeze(0)], dim=1)

    def forward(self, frames: Tensor) -> Tensor:
        n = frames.size(1)
        self.build(n)
        mid = self.pe.size(1) // 2
        return self.pe[:, mid - n + 1 : mid + n]


class RelativeAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.dk = heads, d // heads
        self.q, self.k, self.v = linear(d, d), linear(d, d), linear(d, d)
        self.pos = linear(d, d, bias=False)
        self.u_bias = nn.Parameter(torch.Tensor(heads, self.dk))
        self.v_bias = nn.Parameter(torch.Tensor(heads, self.dk))
        init.xavier_uniform_(self.u_bias)
        init.xavier_uniform_(self.v_bias)
        self.out = linear(d, d)

    @staticmethod
    def shift(scores: Tensor) -> Tensor:
        # Transformer-XL's trick: pad a column, fold, drop a row: each row moves by its index
        b, h, t1, t2 = scores.size()
        padded = torch.cat([scores.new_zeros(b, h, t1, 1), scores], dim=-1)
        padded = padded.view(b, h, t2 + 1, t1)
        return padded[:, :, 1:].view_as(scores)[:, :, :, : t2 // 2 + 1]

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        b, t, _ = x.size()
        q = self.q(x).view(b, -1, self.heads, self.dk)
        k = self.k(x).view(b, -1, self.heads, self.dk).permute(0, 2, 1, 3)
        v = self.v(x).view(b, -1, self.heads, self.dk).permute(0, 2, 1, 3)
        p = self.pos(pos).view(1, -1, self.heads, self.dk)
        content = torch.matmul((q + self.u_bias).transpose(1, 2), k.transpose(2, 3))
        where = torch.matmul((q + self.v_bias).transpose(1, 2), p.permute(0, 2, 3, 1))
        scores = (content + self.shift(where)) / math.sqrt(self.dk * self.heads)
        mixed = torch.matmul(F.softmax(scores, -1), v).transpose(1, 2)
        return self.out(mixed.contiguous().view(b, -1, self.heads * self.dk))


class AttentionPart(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.positions = RelativePositions(d)
        self.norm = nn.LayerNorm(d)
        self.attn = RelativeAttention(d, heads)

    def forward(self, h: Tensor) -> Tensor:
        return self.attn(self.norm(h), self.positions(h).repeat(1, 1, 1))


def feed_forward(d: int) -> nn.Sequential:
    return nn.Sequential(nn.LayerNorm(d), linear(d, 2 * d), Swish(), linear(2 * d, d))


def conv_part(d: int, kernel: int) -> nn.Sequential:
    return nn.Sequential(
        nn.LayerNorm(d),
        Swap(1, 2),
        nn.Conv1d(d, 2 * d, kernel_size=1),
        GatedHalf(dim=1),
        nn.Conv1d(d, d, kernel, padding=(kernel - 1) // 2, groups=d, bias=False),
        nn.BatchNorm1d(d),
        Swish(),
        nn.Conv1d(d, d, kernel_size=1),
        Swap(1, 2),
    )


class Subsample(nn.Module):
    # two stride-2 convolutions over (time, feature): a quarter of the frames remain
    def __init__(self, d: int):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU()
        )

    def forward(self, x: Tensor, lengths: Tensor):
        y = self.convs(x.unsqueeze(1))
        b, c, t, f = y.size()
        y = y.permute(0, 2, 1, 3).contiguous().view(b, t, c * f)
        return y, (lengths >> 2) - 1


class SpeechEncoder(nn.Module):
    def __init__(self, n_feats: int, d: int, n_layers: int, heads: int, kernel: int, classes: int):
        super().__init__()
        self.subsample = Subsample(d)
        self.proj = linear(d * (((n_feats - 1) // 2 - 1) // 2), d)
        self.layers = nn.ModuleList(
            nn.Sequential(
                Scaled(feed_forward(d), 0.5),
                Scaled(AttentionPart(d, heads)),
                Scaled(conv_part(d, kernel)),
                Scaled(feed_forward(d), 0.5),
                nn.LayerNorm(d),
            )
            for _ in range(n_layers)
        )
        self.classify = linear(d, classes, bias=False)

    def n_trainable(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def forward(self, x: Tensor, lengths: Tensor):
        x, lengths = self.subsample(x, lengths)
        x = self.proj(x)
        for layer in self.layers:
            x = layer(x)
        return F.log_softmax(self.classify(x), dim=-1), lengths


device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
frames = torch.rand(2, 32, 12).to(device)
frame_counts = torch.LongTensor([32, 27])
labels = torch.LongTensor([[2, 5, 5], [3, 1, 0]]).to(device)
label_counts = torch.LongTensor([3, 2])
ctc = nn.CTCLoss().to(device)
encoder = SpeechEncoder(n_feats=12, d=8, n_layers=1, heads=2, kernel=5, classes=7).to(device)
initialize(encoder)
record.append(encoder.n_trainable())
sgd = torch.optim.SGD(encoder.parameters(), momentum=0.9, lr=0.05)
for step in range(3):
    log_probs, out_counts = encoder(frames, frame_counts)
    loss = ctc(log_probs.transpose(0, 1), labels, out_counts, label_counts)
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    record.append(loss.item())
    record.append(out_counts.numpy())
    record.append(params_of(encoder))
"""

CONFORMER_STEPS = [
    (
        "import math\nimport torch\n",
        "import math\nimport retrograd as torch\n",
    ),
    (
        "    loss.backward()\n    sgd.step()",
        "    grads = loss.backward()\n    sgd.step(grads)",
    ),
]


def test_conformer_trains_as_torch(capsys):
    records, _ = runs_with_draws(
        CONFORMER_SOURCE,
        CONFORMER_STEPS,
        capsys,
        seed=59,
        initialize=initializer(),
        params_of=params_of,
    )
    ours, theirs = records[1], records[0]
    assert theirs[2].tolist() == [7, 5]
    assert theirs[7] < theirs[1]
    # (SGD: the keys' biases and the near-constant columns of the positional encoding have
    # zero or near-zero gradients, which Adam's first steps would turn into rounding noise)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- RAdam -----------------------------------------------------------------------------------------
RADAM_SOURCE = """
import math
import torch
from torch.optim.optimizer import required, Optimizer


class Rectified(Optimizer):
    # Adam whose adaptive step is switched on only once the variance estimate is tractable
    # (simple-moving-average length above 4); before that, momentum SGD or no step at all.
    # The rectification terms depend on the step count alone, so they are cached per g.
    def __init__(self, params, lr=required, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 sgd_early=True):
        params = list(params)
        if params and isinstance(params[0], dict):
            for g in params:
                if 'betas' in g and g['betas'] != betas:
                    g['cache'] = [[None, None, None] for _ in range(10)]
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        cache=[[None, None, None] for _ in range(10)])
        self.sgd_early = sgd_early
        super(Rectified, self).__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else closure()
        for g in self.param_groups:
            beta1, beta2 = g['betas']
            for p in g['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data.float()
                if grad.is_sparse:
                    raise RuntimeError('Rectified does not take sparse gradients')
                weights = p.data.float()
                state = self.state[p]
                if len(state) == 0:
                    state['step'] = 0
                    state['exp_avg'] = torch.zeros_like(weights)
                    state['exp_avg_sq'] = torch.zeros_like(weights)
                else:
                    state['exp_avg'] = state['exp_avg'].type_as(weights)
                    state['exp_avg_sq'] = state['exp_avg_sq'].type_as(weights)
                m, v = state['exp_avg'], state['exp_avg_sq']
                state['step'] += 1
                t = state['step']
                v.mul_(beta2).addcmul_(1 - beta2, grad, grad)
                m.mul_(beta1).add_(1 - beta1, grad)

                slot = g['cache'][t % 10]
                if slot[0] == t:
                    length, size = slot[1], slot[2]
                else:
                    decay = beta2 ** t
                    longest = 2 / (1 - beta2) - 1
                    length = longest - 2 * t * decay / (1 - decay)
                    if length >= 5:
                        ratio = (length - 4) / (longest - 4) * (length - 2) / length
                        ratio *= longest / (longest - 2)
                        size = math.sqrt((1 - decay) * ratio) / (1 - beta1 ** t)
                    elif self.sgd_early:
                        size = 1.0 / (1 - beta1 ** t)
                    else:
                        size = -1
                    slot[:] = [t, length, size]

                if length >= 5:
                    if g['weight_decay'] != 0:
                        weights.add_(-g['weight_decay'] * g['lr'], weights)
                    weights.addcdiv_(-size * g['lr'], m, v.sqrt().add_(g['eps']))
                    p.data.copy_(weights)
                elif size > 0:
                    if g['weight_decay'] != 0:
                        weights.add_(-g['weight_decay'] * g['lr'], weights)
                    weights.add_(-size * g['lr'], m)
                    p.data.copy_(weights)
        return loss


class WarmAdamW(Optimizer):
    # decoupled weight decay, the learning rate ramped up over the first `warmup` steps
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, warmup=0):
        super(WarmAdamW, self).__init__(params, dict(lr=lr, betas=betas, eps=eps,
                                                     weight_decay=weight_decay, warmup=warmup))

    def step(self, closure=None):
        for g in self.param_groups:
            beta1, beta2 = g['betas']
            for p in g['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data.float()
                weights = p.data.float()
                state = self.state[p]
                if not state:
                    state['step'] = 0
                    state['exp_avg'] = torch.zeros_like(weights)
                    state['exp_avg_sq'] = torch.zeros_like(weights)
                state['step'] += 1
                t = state['step']
                state['exp_avg_sq'].mul_(beta2).addcmul_(1 - beta2, grad, grad)
                state['exp_avg'].mul_(beta1).add_(1 - beta1, grad)
                lr = g['lr']
                if t < g['warmup']:
                    lr = 1e-8 + t * lr / g['warmup']
                if g['weight_decay'] != 0:
                    weights.add_(-g['weight_decay'] * lr, weights)
                size = lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                denom = state['exp_avg_sq'].sqrt().add_(g['eps'])
                weights.addcdiv_(-size, state['exp_avg'], denom)
                p.data.copy_(weights)


def fit(make_optimizer, steps=7):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 12), nn.Tanh(), nn.Linear(12, 1))
    initialize(net)
    optimizer = make_optimizer(net.parameters())
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.mse_loss(net(inputs), targets)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(params_of(net))
        record.append({'exp_avg_sq': optimizer.state[net[0].weight]['exp_avg_sq'].numpy().copy()})


fit(lambda params: Rectified(params, lr=0.01, weight_decay=0.01))
first_layer = lambda params: [{'params': list(params)[:2], 'betas': (0.8, 0.99)}]
fit(lambda params: Rectified(first_layer(params), lr=0.01, sgd_early=False))
fit(lambda params: WarmAdamW(params, lr=0.01, weight_decay=0.01, warmup=3))
"""

RADAM_STEPS = [
    ("import math\nimport torch\n", "import math\nimport retrograd as torch\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("                if p.grad is None:", "                if p.grad(grads) is None:"),
    (
        "                grad = p.grad.data.float()",
        "                grad = p.grad(grads).data.float()",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_radam_optimizers_train_as_torch(capsys):
    rng = np.random.default_rng(60)
    inputs = rng.standard_normal((32, 4)).astype(np.float32)
    targets = np.sin(inputs.sum(1, keepdims=True)).astype(np.float32)
    records, _ = runs_with_draws(
        RADAM_SOURCE,
        RADAM_STEPS,
        capsys,
        seed=60,
        initialize=initializer(),
        params_of=params_of,
        make_inputs=lambda lib: lib.tensor(inputs),
        make_targets=lambda lib: lib.tensor(targets),
    )
    ours, theirs = records[1], records[0]
    assert len(theirs) == 3 * 7 * 3
    assert theirs[3 * 6] < theirs[0]  # the rectified optimizer's loss fell
    assert theirs[3 * 13] < theirs[3 * 7]  # its second run stepped only once rectified
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- Lookahead -------------------------------------------------------------------------------------
LOOKAHEAD_SOURCE = """
import collections

import torch


class SlowFast(torch.optim.Optimizer):
    # every `every` inner steps, pull the fast weights part of the way back to the slow
    # copy, and make that the new slow copy. Wraps any optimizer: no super().__init__, the
    # groups are the inner optimizer's.
    def __init__(self, inner, every=3, alpha=0.5, momentum="none"):
        assert momentum in ("none", "reset")
        self.inner, self.every, self.alpha, self.momentum = inner, every, alpha, momentum
        self.count = 0
        self.state = collections.defaultdict(dict)
        for p in self.all_params():
            self.state[p]['slow'] = torch.zeros_like(p.data)
            self.state[p]['slow'].copy_(p.data)

    def all_params(self):
        return [p for group in self.inner.param_groups for p in group['params']]

    @property
    def param_groups(self):
        return self.inner.param_groups

    def zero_grad(self):
        self.inner.zero_grad()

    def step(self, closure=None):
        loss = self.inner.step(closure)
        self.count += 1
        if self.count % self.every == 0:
            for p in self.all_params():
                slow = self.state[p]['slow']
                p.data.mul_(self.alpha).add_(1.0 - self.alpha, slow)  # (the old overload)
                slow.copy_(p.data)
                if self.momentum == "reset":
                    assert self.inner.state[p]['momentum_buffer'] is not None
                    self.inner.state[p]['momentum_buffer'] = torch.zeros_like(p.data)
        return loss

    def swap_in_slow(self):
        for p in self.all_params():
            self.state[p]['fast'] = p.data.clone()
            p.data.copy_(self.state[p]['slow'])

    def swap_back(self):
        for p in self.all_params():
            p.data.copy_(self.state[p].pop('fast'))


net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
initialize(net)
sgd = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
opt = SlowFast(sgd, every=3, alpha=0.5, momentum=pullback)
for step in range(7):
    opt.zero_grad()
    loss = F.mse_loss(net(inputs), targets)
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(net))
    record.append({'momentum': opt.inner.state[net[0].weight]['momentum_buffer'].numpy().copy()})
opt.swap_in_slow()
record.append(F.mse_loss(net(inputs), targets).item())
opt.swap_back()
record.append(params_of(net))
"""

LOOKAHEAD_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("        loss = self.inner.step(closure)", "        loss = self.inner.step(grads)"),
    (
        "    loss.backward()\n    opt.step()",
        "    grads = loss.backward()\n    opt.step(grads)",
    ),
]


@pytest.mark.parametrize("pullback", ["none", "reset"])
def test_lookahead_trains_as_torch(capsys, pullback):
    rng = np.random.default_rng(61)
    inputs = rng.standard_normal((32, 4)).astype(np.float32)
    targets = np.cos(inputs.sum(1, keepdims=True)).astype(np.float32)
    records, _ = runs_with_draws(
        LOOKAHEAD_SOURCE,
        LOOKAHEAD_STEPS,
        capsys,
        seed=61,
        initialize=initializer(),
        params_of=params_of,
        pullback=pullback,
        make_inputs=lambda lib: lib.tensor(inputs),
        make_targets=lambda lib: lib.tensor(targets),
    )
    ours, theirs = records[1], records[0]
    assert len(theirs) == 7 * 3 + 2
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
