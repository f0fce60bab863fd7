# ruff: noqa: E501  (the embedded programs and the port steps replacing their import lines run past 100 columns)
"""Programs written here in the style of four research repositories, and one of our own, each
run under torch and, ported, under retrograd from the same weights and draws (the harness:
``tests/real_ports.py``; continued from ``tests/test_real_ports_71.py``):

- TimesNet in the style of thuml/Time-Series-Library, small: periods found by
  ``torch.fft.rfft`` and ``torch.topk`` of ``abs(spectrum).mean(0).mean(-1)`` with
  ``strength[0] = 0`` written in place, the indices taken to NumPy (``x.shape[1] // top``) and
  used to index ``abs(spectrum).mean(-1)[:, top]``, the series zero-padded to a multiple of
  each period and reshaped to 2-d by NumPy integers, an Inception-style block of ``Conv2d``s
  averaged by ``torch.stack(outs, dim=-1).mean(-1)``, the periods weighted by
  ``F.softmax(weights, dim=1).unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)``, a circular
  ``Conv1d`` value embedding (its padding chosen by ``torch.__version__ >= '1.5.0'``),
  sinusoidal position and fixed calendar embeddings (``nn.Parameter(table,
  requires_grad=False)`` as an embedding's weight), the non-stationary normalisation by
  ``torch.var(..., unbiased=False)``; imputation (a random mask by ``mask[mask <= rate] = 0``,
  ``x.masked_fill(mask == 0, 0)``, ``torch.sum(x, dim=1) / torch.sum(mask == 1, dim=1)``,
  ``x /= std`` in place, the loss over ``filled[mask == 0]``), anomaly detection, and the
  classification head over a padding mask under ``RAdam``.
- SASRec in the style of pmixer/SASRec.pytorch: ``torch.nn.Embedding(n_items + 1, ...,
  padding_idx=0)``, ``torch.LongTensor`` of NumPy sequences, ``h *=
  self.item_emb.embedding_dim ** 0.5``, positions by ``np.tile`` masked by ``positions *=
  (history != 0)``, ``~torch.BoolTensor(history == 0)`` multiplied in, the causal
  ``~torch.tril(torch.ones((n, n), dtype=torch.bool))`` mask of a sequence-first
  ``nn.MultiheadAttention``, ``y += x`` in place, ``xavier_normal_`` over every parameter
  inside ``try/except``, ``weight.data[0, :] = 0``, ``BCEWithLogitsLoss`` over the positions
  ``np.where(pos != 0)`` gives, ``loss += cfg.l2_emb * torch.norm(param)``, Adam, and ranks by
  ``-scores`` and ``argsort().argsort()`` under ``torch.no_grad()``.
- BinaryNet in the style of itayhubara/BinaryNet.pytorch, small: the activations binarized
  through ``x.data = binarize(x.data)`` (the graph kept: the gradient passes straight
  through), the latent weights kept on the parameter as ``self.weight.org`` and the binary
  ones written by ``self.weight.data = binarize(...)``, ``out += self.bias.view(1,
  -1).expand_as(out)``, the latent weights restored by ``p.data.copy_(p.org)`` before the
  step and clipped by ``p.org.copy_(p.data.clamp_(-1, 1))`` after it.
- XNOR-Net in the style of jiecaoyu/XNOR-Net-PyTorch, small: a ``torch.autograd.Function``
  with ``ctx.save_for_backward`` returning two outputs, its backward zeroing by
  ``grad[x.ge(1)] = 0``; the weights mean-centred, clamped, saved and binarized by ``.data =``
  assignments; ``alpha[real.lt(-1.0)] = 0`` into an expanded tensor; the binary gradient
  written by ``w.grad.data = ...``; one parameter group per parameter.
- BinaryConnect with straight-through estimators (our own): ``grad[x.abs() > 1] = 0`` in a
  custom ``Function`` and the weights by ``w + (w.sign() - w).detach()``, the latent weights
  clipped by ``p.data.clamp_(-1, 1)`` after each SGD step.

Two regressions are guarded on their own: a masked write into an expanded tensor (XNOR's
``alpha[...] = 0``) and a gradient's ``.data`` assigned being the gradient the step takes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


def _runs(source, steps, **names):
    """The records of ``source`` under torch and of its port under retrograd (torch's initial
    weights loaded into the port's modules by ``initialize``)."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            source
            if lib is torch
            else port(source, steps).replace("from torch.", "from retrograd.")
        )
        shared = {
            k.removeprefix("make_"): v(lib) if k.startswith("make_") else v
            for k, v in names.items()
        }
        with SharedDraws(lib, 7200):
            run_source(text, lib, record=record, initialize=initialize, **shared)
        records.append(record)
    return records


TIMESNET_SOURCE = """
import math
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.fft


def sinusoid_table(n, d):
    table = torch.zeros(n, d).float()
    pos = torch.arange(0, n).float().unsqueeze(1)
    freq = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)
    return table


class SeriesEmbedding(nn.Module):
    # the values by a circular convolution over time, plus fixed position and calendar codes
    def __init__(self, c_in, d_model, calendar=(13, 32, 7, 24), max_len=64):
        super().__init__()
        pad = 1 if torch.__version__ >= '1.5.0' else 2
        self.values = nn.Conv1d(c_in, d_model, kernel_size=3, padding=pad, padding_mode='circular', bias=False)
        nn.init.kaiming_normal_(self.values.weight, mode='fan_in', nonlinearity='leaky_relu')
        self.register_buffer('positions', sinusoid_table(max_len, d_model).unsqueeze(0))
        self.calendar = nn.ModuleList()
        for size in calendar:  # month, day, weekday, hour
            table = nn.Embedding(size, d_model)
            table.weight = nn.Parameter(sinusoid_table(size, d_model), requires_grad=False)
            self.calendar.append(table)

    def forward(self, x, marks=None):
        out = self.values(x.permute(0, 2, 1)).transpose(1, 2) + self.positions[:, :x.size(1)]
        if marks is not None:
            marks = marks.long()
            for i, table in enumerate(self.calendar):
                out = out + table(marks[:, :, i]).detach()
        return out


class MultiKernel(nn.Module):
    # parallel square convolutions of widths 1, 3, 5, ..., averaged
    def __init__(self, c_in, c_out, n_kernels):
        super().__init__()
        self.branches = nn.ModuleList(
            [nn.Conv2d(c_in, c_out, kernel_size=2 * i + 1, padding=i) for i in range(n_kernels)])
        for conv in self.branches:
            nn.init.kaiming_normal_(conv.weight, mode='fan_out', nonlinearity='relu')
            nn.init.constant_(conv.bias, 0)

    def forward(self, x):
        outs = [conv(x) for conv in self.branches]
        return torch.stack(outs, dim=-1).mean(-1)


def dominant_periods(x, k):
    spectrum = torch.fft.rfft(x, dim=1)
    strength = abs(spectrum).mean(0).mean(-1)
    strength[0] = 0  # not the mean
    _, top = torch.topk(strength, k)
    top = top.detach().cpu().numpy()
    return x.shape[1] // top, abs(spectrum).mean(-1)[:, top]


class PeriodBlock(nn.Module):
    # fold the series into a (cycles, period) grid per dominant period, convolve in 2-d,
    # unfold, and mix the periods by their spectral weight
    def __init__(self, cfg):
        super().__init__()
        self.length = cfg.seq_len + cfg.pred_len
        self.k = cfg.top_k
        self.conv = nn.Sequential(
            MultiKernel(cfg.d_model, cfg.d_ff, cfg.num_kernels),
            nn.GELU(),
            MultiKernel(cfg.d_ff, cfg.d_model, cfg.num_kernels),
        )

    def forward(self, x):
        B, T, N = x.size()
        periods, weights = dominant_periods(x, self.k)
        views = []
        for p in periods:
            cycles = -(-self.length // p)
            if cycles * p > self.length:
                tail = torch.zeros([B, cycles * p - self.length, N]).to(x.device)
                grid = torch.cat([x, tail], dim=1)
            else:
                grid = x
            grid = grid.reshape(B, cycles, p, N).permute(0, 3, 1, 2).contiguous()
            flat = self.conv(grid).permute(0, 2, 3, 1).reshape(B, -1, N)
            views.append(flat[:, :self.length, :])
        views = torch.stack(views, dim=-1)
        weights = F.softmax(weights, dim=1).unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)
        return torch.sum(views * weights, -1) + x


class TimesNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.task = cfg.task_name
        self.embed = SeriesEmbedding(cfg.enc_in, cfg.d_model)
        self.blocks = nn.ModuleList([PeriodBlock(cfg) for _ in range(cfg.e_layers)])
        self.norm = nn.LayerNorm(cfg.d_model)
        if self.task == 'long_term_forecast':
            self.stretch = nn.Linear(cfg.seq_len, cfg.seq_len + cfg.pred_len)
        if self.task == 'classification':
            self.head = nn.Linear(cfg.d_model * cfg.seq_len, cfg.num_class)
        else:
            self.head = nn.Linear(cfg.d_model, cfg.c_out)

    def encode(self, x, marks):
        h = self.embed(x, marks)
        if self.task == 'long_term_forecast':
            h = self.stretch(h.permute(0, 2, 1)).permute(0, 2, 1)  # the horizon appended
        for block in self.blocks:
            h = self.norm(block(h))
        return h

    def forward(self, x, marks=None, mask=None):
        if self.task == 'classification':
            h = F.gelu(self.encode(x, None)) * marks.unsqueeze(-1)  # padded steps zeroed
            return self.head(h.reshape(h.shape[0], -1))
        if mask is None:
            # non-stationary normalisation: each series to zero mean and unit variance
            mean = x.mean(1, keepdim=True).detach()
            x = x.sub(mean)
            std = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + 1e-5)
            x = x.div(std)
        else:
            # the same, over the observed entries only
            mean = (torch.sum(x, dim=1) / torch.sum(mask == 1, dim=1)).unsqueeze(1).detach()
            x = x.sub(mean).masked_fill(mask == 0, 0)
            std = torch.sqrt(torch.sum(x * x, dim=1) / torch.sum(mask == 1, dim=1) + 1e-5)
            std = std.unsqueeze(1).detach()
            x /= std
        out = self.head(self.encode(x, marks))
        steps = out.shape[1]
        out = out.mul(std[:, 0, :].unsqueeze(1).repeat(1, steps, 1))
        return out.add(mean[:, 0, :].unsqueeze(1).repeat(1, steps, 1))


def fit(cfg, batches):
    model = TimesNet(cfg).float()
    initialize(model)
    opt_class = torch.optim.RAdam if cfg.task_name == 'classification' else torch.optim.Adam
    optimizer = opt_class(model.parameters(), lr=cfg.learning_rate)
    mse = nn.MSELoss()
    model.train()
    for batch in batches:
        optimizer.zero_grad()
        if cfg.task_name == 'long_term_forecast':
            x, y, x_marks, _ = [t.float() for t in batch]
            forecast = model(x, x_marks)[:, -cfg.pred_len:, :]
            loss = mse(forecast, y[:, -cfg.pred_len:, :])
        elif cfg.task_name == 'imputation':
            x, _, x_marks, _ = [t.float() for t in batch]
            mask = torch.rand(x.shape)
            mask[mask <= cfg.mask_rate] = 0  # hidden
            mask[mask > cfg.mask_rate] = 1  # seen
            filled = model(x.masked_fill(mask == 0, 0), x_marks, mask)
            loss = mse(filled[mask == 0], x[mask == 0])
        elif cfg.task_name == 'anomaly_detection':
            x = batch[0].float()
            loss = mse(model(x), x)  # reconstruction
        else:
            x, label, padding = batch
            loss = F.cross_entropy(model(x.float(), padding.float()), label.long().squeeze(-1))
        record.append(loss.item())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 4.0)
        optimizer.step()
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

TIMESNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\nimport torch.fft\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.fft\n",
    ),
    # retrograd's __version__ is its own (0.1.0), see test_real_ports_55
    ("pad = 1 if torch.__version__ >= '1.5.0' else 2", "pad = 1"),
    # no complex tensors in retrograd (API.md): the spectrum as its real and imaginary parts,
    # its amplitude ``abs(spectrum)`` as their hypotenuse
    (
        "    spectrum = torch.fft.rfft(x, dim=1)\n    strength = abs(spectrum).mean(0).mean(-1)\n",
        "    re, im = torch.signal.rfft(x, 1)\n    amplitude = torch.sqrt(re ** 2 + im ** 2)\n    strength = amplitude.mean(0).mean(-1)\n",
    ),
    ("abs(spectrum).mean(-1)[:, top]", "amplitude.mean(-1)[:, top]"),
    (
        "        loss.backward()\n        nn.utils.clip_grad_norm_(model.parameters(), 4.0)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        nn.utils.clip_grad_norm_(grads, model.parameters(), 4.0)\n        optimizer.step(grads)\n",
    ),
]


class _TimesNetArgs:
    task_name = "long_term_forecast"
    seq_len = 10
    label_len = 4
    pred_len = 4
    top_k = 2
    d_model = 4
    d_ff = 6
    num_kernels = 2
    e_layers = 1
    enc_in = 2
    c_out = 2
    embed = "fixed"
    freq = "h"
    dropout = 0.0
    mask_rate = 0.25
    features = "M"
    learning_rate = 0.01
    num_class = 3


def _calendar(rng, batch, length):
    """Time features as the data loaders' ``timeenc=0`` stamps: month, day, weekday, hour."""
    return np.stack(
        [
            rng.integers(1, 13, (batch, length)),
            rng.integers(1, 32, (batch, length)),
            rng.integers(0, 7, (batch, length)),
            rng.integers(0, 24, (batch, length)),
        ],
        axis=-1,
    ).astype(np.float32)


@pytest.mark.parametrize("task", ["long_term_forecast", "imputation", "anomaly_detection"])
def test_timesnet_trains_as_torch(task):
    rng = np.random.default_rng(7201)
    args = _TimesNetArgs()
    args.task_name = task
    if task != "long_term_forecast":
        args.pred_len = 0
    t = np.arange(args.seq_len + args.pred_len)
    batches = []
    steps = 3 if task == "long_term_forecast" else 2
    for _ in range(steps):
        phase = rng.uniform(0, 6, (3, 1, 2))
        series = np.sin(2 * np.pi * t[None, :, None] / 5 + phase) + 0.5 * np.cos(
            2 * np.pi * t[None, :, None] / 3 + phase
        )
        series = (series + 0.1 * rng.standard_normal(series.shape)).astype(np.float32)
        x, y = series[:, : args.seq_len], series[:, args.seq_len - args.label_len :]
        marks = _calendar(rng, 3, args.seq_len + args.pred_len)
        batches.append((x, y, marks[:, : args.seq_len], marks[:, args.seq_len - args.label_len :]))
    theirs, ours = _runs(
        TIMESNET_SOURCE + "\nfit(args, [tuple(torch.from_numpy(a) for a in b) for b in batches])\n",
        TIMESNET_STEPS,
        args=args,
        batches=batches,
    )
    assert len(theirs) == steps + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_timesnet_classification_trains_as_torch():
    rng = np.random.default_rng(7202)
    args = _TimesNetArgs()
    args.task_name = "classification"
    args.seq_len, args.pred_len = 9, 0
    batches = []
    for _ in range(2):
        x = rng.standard_normal((4, args.seq_len, 2)).astype(np.float32)
        lengths = rng.integers(5, args.seq_len + 1, 4)
        padding_mask = (np.arange(args.seq_len)[None, :] < lengths[:, None]).astype(np.float32)
        label = rng.integers(0, 3, (4, 1))
        batches.append((x * padding_mask[..., None], label, padding_mask))
    theirs, ours = _runs(
        TIMESNET_SOURCE + "\nfit(args, [tuple(torch.from_numpy(a) for a in b) for b in batches])\n",
        TIMESNET_STEPS,
        args=args,
        batches=batches,
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


SASREC_SOURCE = """
import numpy as np
import torch


class PointwiseFFN(torch.nn.Module):
    def __init__(self, d, p):
        super().__init__()
        self.inner = torch.nn.Conv1d(d, d, kernel_size=1)
        self.outer = torch.nn.Conv1d(d, d, kernel_size=1)
        self.drop = torch.nn.Dropout(p=p)

    def forward(self, x):
        # the 1x1 convolutions want (batch, channels, time)
        y = self.outer(self.drop(torch.relu(self.inner(x.transpose(-1, -2)))))
        y = self.drop(y).transpose(-1, -2)
        y += x
        return y


class SelfAttentiveRec(torch.nn.Module):
    def __init__(self, n_items, cfg):
        super().__init__()
        self.dev = cfg.device
        d = cfg.hidden_units
        self.item_emb = torch.nn.Embedding(n_items + 1, d, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(cfg.maxlen + 1, d, padding_idx=0)
        self.drop = torch.nn.Dropout(p=cfg.dropout_rate)
        blocks = range(cfg.num_blocks)
        self.attn_norms = torch.nn.ModuleList([torch.nn.LayerNorm(d, eps=1e-8) for _ in blocks])
        self.attns = torch.nn.ModuleList([torch.nn.MultiheadAttention(d, cfg.num_heads, cfg.dropout_rate) for _ in blocks])
        self.ffn_norms = torch.nn.ModuleList([torch.nn.LayerNorm(d, eps=1e-8) for _ in blocks])
        self.ffns = torch.nn.ModuleList([PointwiseFFN(d, cfg.dropout_rate) for _ in blocks])
        self.final_norm = torch.nn.LayerNorm(d, eps=1e-8)

    def encode(self, history):
        h = self.item_emb(torch.LongTensor(history).to(self.dev))
        h *= self.item_emb.embedding_dim ** 0.5
        positions = np.tile(np.arange(1, history.shape[1] + 1), [history.shape[0], 1])
        positions *= (history != 0)  # padding stays at position 0
        h += self.pos_emb(torch.LongTensor(positions).to(self.dev))
        h = self.drop(h)
        keep = ~torch.BoolTensor(history == 0).to(self.dev).unsqueeze(-1)
        h *= keep
        n = h.shape[1]
        future = ~torch.tril(torch.ones((n, n), dtype=torch.bool, device=self.dev))
        for attn_norm, attn, ffn_norm, ffn in zip(self.attn_norms, self.attns, self.ffn_norms, self.ffns):
            h = torch.transpose(h, 0, 1)  # time first, for the attention layer
            q = attn_norm(h)
            attended, _ = attn(q, h, h, attn_mask=future)
            h = torch.transpose(q + attended, 0, 1)
            h = ffn(ffn_norm(h))
            h *= keep
        return self.final_norm(h)

    def forward(self, history, positives, negatives):
        feats = self.encode(history)
        pos = self.item_emb(torch.LongTensor(positives).to(self.dev))
        neg = self.item_emb(torch.LongTensor(negatives).to(self.dev))
        return (feats * pos).sum(dim=-1), (feats * neg).sum(dim=-1)

    def score(self, history, candidates):
        last = self.encode(history)[:, -1, :]
        cands = self.item_emb(torch.LongTensor(candidates).to(self.dev))
        return cands.matmul(last.unsqueeze(-1)).squeeze(-1)


def rank_eval(model, histories, candidates):
    # the held-out item is each candidate list's first; where does it rank?
    ndcg, hits, ranks = 0.0, 0.0, []
    for history, items in zip(histories, candidates):
        scores = -model.score(np.array([history]), np.array([items]))[0]
        rank = scores.argsort().argsort()[0].item()
        ranks.append(rank)
        if rank < 10:
            ndcg += 1 / np.log2(rank + 2)
            hits += 1
    return ndcg / len(ranks), hits / len(ranks), ranks


def main(cfg, n_users, n_items, batches, eval_users, eval_seqs, eval_items):
    model = SelfAttentiveRec(n_items, cfg).to(cfg.device)
    for _, param in model.named_parameters():
        try:
            torch.nn.init.xavier_normal_(param.data)  # 2-d and up only
        except Exception:
            pass  # 1-d parameters (biases, norms) keep their defaults
    for table in (model.item_emb, model.pos_emb):
        table.weight.data[0, :] = 0  # the padding rows
    initialize(model)
    bce = torch.nn.BCEWithLogitsLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98))
    for epoch in range(1, cfg.num_epochs + 1):
        model.train()
        for step, (users, seq, pos, neg) in enumerate(batches):
            seq, pos, neg = np.array(seq), np.array(pos), np.array(neg)
            pos_logits, neg_logits = model(seq, pos, neg)
            optimizer.zero_grad()
            real = np.where(pos != 0)
            loss = bce(pos_logits[real], torch.ones(pos_logits.shape, device=cfg.device)[real])
            loss += bce(neg_logits[real], torch.zeros(neg_logits.shape, device=cfg.device)[real])
            for param in model.item_emb.parameters():
                loss += cfg.l2_emb * torch.norm(param)
            loss.backward()
            optimizer.step()
            record.append(loss.item())
            print("epoch {} step {}: loss {}".format(epoch, step, round(loss.item(), 4)))
        model.eval()
        with torch.no_grad():
            ndcg, hit, ranks = rank_eval(model, eval_seqs, eval_items)
        record.append([ndcg, hit])
        record.append(ranks)
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

SASREC_STEPS = [
    ("import numpy as np\nimport torch\n", "import numpy as np\nimport retrograd as torch\n"),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


class _SasRecArgs:
    device = "cpu"
    hidden_units = 8
    num_heads = 2
    num_blocks = 2
    dropout_rate = 0.0
    maxlen = 6
    lr = 0.01
    l2_emb = 0.001
    num_epochs = 2


def _sequences(rng, users, itemnum, maxlen):
    """``WarpSampler``'s batches: each user's history left-padded with 0, the next items as
    positives and unseen items as negatives."""
    seq = np.zeros((len(users), maxlen), dtype=np.int64)
    pos = np.zeros_like(seq)
    neg = np.zeros_like(seq)
    for row in range(len(users)):
        length = rng.integers(2, maxlen + 2)
        history = rng.integers(1, itemnum + 1, length)
        take = min(length - 1, maxlen)
        seq[row, maxlen - take :] = history[-take - 1 : -1]
        pos[row, maxlen - take :] = history[-take:]
        neg[row, maxlen - take :] = rng.integers(1, itemnum + 1, take)
    return seq, pos, neg


def test_sasrec_trains_and_ranks_as_torch(capsys):
    rng = np.random.default_rng(7203)
    args = _SasRecArgs()
    usernum, itemnum = 10, 12
    batches = []
    for _ in range(2):
        users = rng.integers(1, usernum + 1, 4)
        batches.append((users, *_sequences(rng, users, itemnum, args.maxlen)))
    eval_users = [1, 2]
    eval_seqs, _, _ = _sequences(rng, eval_users, itemnum, args.maxlen)
    eval_items = [list(rng.permutation(np.arange(1, itemnum + 1))[:5]) for _ in eval_users]
    records = []
    initialize = initializer()
    logs = []
    for lib in (torch, rg):
        record = []
        text = SASREC_SOURCE if lib is torch else port(SASREC_SOURCE, SASREC_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](args, usernum, itemnum, batches, eval_users, eval_seqs, eval_items)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1] == logs[0]
    assert "epoch 2 step 1: loss" in logs[0]
    # The keys' biases have no gradient (a softmax over the keys does not see a shift common
    # to all of them), so Adam's steps on them follow the rounding noise: only the queries'
    # and values' thirds of ``in_proj_bias`` are compared.
    for state in (theirs[-1], ours[-1]):
        for name in [k for k in state if k.endswith("in_proj_bias")]:
            query, _, value = np.split(state.pop(name), 3)
            state[name + ".query"], state[name + ".value"] = query, value
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


BINARYNET_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim


def binarize(t):
    return t.sign()


class SignLinear(nn.Linear):
    # +-1 weights (the real-valued ones kept on the parameter as .org) and, past the first
    # layer, +-1 inputs; the graph sees neither swap, so gradients pass straight through
    def __init__(self, n_in, n_out, binary_input=True):
        super().__init__(n_in, n_out)
        self.binary_input = binary_input

    def forward(self, x):
        if self.binary_input:
            x.data = binarize(x.data)
        if not hasattr(self.weight, 'org'):
            self.weight.org = self.weight.data.clone()
        self.weight.data = binarize(self.weight.org)
        out = nn.functional.linear(x, self.weight)
        if self.bias is not None:
            self.bias.org = self.bias.data.clone()
            out += self.bias.view(1, -1).expand_as(out)  # one bias per unit
        return out


class BinaryMLP(nn.Module):
    def __init__(self, width=6):
        super().__init__()
        self.layers = nn.ModuleList(
            [SignLinear(784, width, binary_input=False), SignLinear(width, width), SignLinear(width, width)])
        self.norms = nn.ModuleList([nn.BatchNorm1d(width) for _ in range(3)])
        self.act = nn.Hardtanh()
        self.out = nn.Linear(width, 10)

    def forward(self, x):
        x = x.view(-1, 784)
        for layer, norm in zip(self.layers, self.norms):
            x = self.act(norm(layer(x)))
        return nn.functional.log_softmax(self.out(x), dim=1)


model = BinaryMLP()
initialize(model)
nll = nn.NLLLoss()
adam = optim.Adam(model.parameters(), lr=args.lr)


def train_epoch():
    model.train()
    for images, digits in train_loader:
        adam.zero_grad()
        loss = nll(model(images), digits)
        loss.backward()
        # step the real-valued weights, then keep them in [-1, 1]
        for p in model.parameters():
            if hasattr(p, 'org'):
                p.data.copy_(p.org)
        adam.step()
        for p in model.parameters():
            if hasattr(p, 'org'):
                p.org.copy_(p.data.clamp_(-1, 1))
        record.append(loss.item())
        record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
        record.append({n: p.org.numpy().copy() for n, p in model.named_parameters() if hasattr(p, 'org')})


for _ in range(2):
    train_epoch()
"""

BINARYNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        adam.step()\n", "        adam.step(grads)\n"),
]


class _BinaryNetArgs:
    lr = 0.01


def _mnist_like(rng, batches, batch_size):
    return [
        (
            rng.uniform(0, 1, (batch_size, 1, 28, 28)).astype(np.float32),
            rng.integers(0, 10, batch_size),
        )
        for _ in range(batches)
    ]


def test_binarynet_with_latent_weights_trains_as_torch():
    rng = np.random.default_rng(7204)
    data = _mnist_like(rng, 2, 7)
    theirs, ours = _runs(
        BINARYNET_SOURCE,
        BINARYNET_STEPS,
        args=_BinaryNetArgs(),
        make_train_loader=lambda lib: [
            (lib.tensor(x), lib.tensor(y, dtype=lib.int64)) for x, y in data
        ],
    )
    assert len(theirs) == 3 * 4
    # (the biases of the binarized layers are followed by batch normalisation, which takes
    # any constant out: their true gradient is zero, and Adam's steps follow the rounding)
    biases = ("layers.0.bias", "layers.1.bias", "layers.2.bias")
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=biases)


XNOR_SOURCE = """
import numpy
import torch
import torch.nn as nn
import torch.optim as optim


# The network is small, its max pooling ahead of the binarized layers, which sum an odd
# number of +-1 terms: their outputs take few values, and a tie in a pooling window or a sum
# of exactly 0 (the biases start at zero) at a ReLU would be broken by each library's
# rounding its own way.
class SignWithScale(torch.autograd.Function):
    # sign(x), and the mean |x| over the channels; a straight-through gradient cut where |x| >= 1
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        scale = torch.mean(x.abs(), 1, keepdim=True)
        return x.sign(), scale

    @staticmethod
    def backward(ctx, grad_sign, grad_scale):
        x, = ctx.saved_tensors
        grad = grad_sign.clone()
        grad[x.ge(1)] = 0
        grad[x.le(-1)] = 0
        return grad


class XnorConv(nn.Module):
    # batch norm -> binary activations -> 1x1 convolution (binarized by WeightBinarizer) -> ReLU
    def __init__(self, c_in, c_out):
        super().__init__()
        self.norm = nn.BatchNorm2d(c_in, eps=1e-4, momentum=0.1, affine=True)
        self.norm.weight.data = self.norm.weight.data.zero_().add(1.0)
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=1, stride=1, padding=0)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        signs, _ = SignWithScale.apply(self.norm(x))
        return self.act(self.conv(signs))


class TinyNIN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 5, kernel_size=3, padding=1),
            nn.BatchNorm2d(5, affine=False, eps=1e-4, momentum=0.1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        )
        self.binary = nn.Sequential(XnorConv(5, 5), XnorConv(5, 4))
        self.head = nn.Sequential(
            nn.BatchNorm2d(4, affine=False, eps=1e-4, momentum=0.1),
            nn.Conv2d(4, 10, kernel_size=1),
            nn.ReLU(inplace=True),
            nn.AvgPool2d(kernel_size=3, stride=1),
        )

    def forward(self, x):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d) and hasattr(m.weight, 'data'):
                m.weight.data.clamp_(min=0.01)  # keep the scales positive
        return self.head(self.binary(self.stem(x))).view(x.size(0), 10)


class WeightBinarizer():
    # the inner convolutions run on scaled sign weights; the real-valued ones are kept aside
    # and stepped with the gradient of the scaled signs
    def __init__(self, model):
        convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
        inner = numpy.arange(1, len(convs) - 1).tolist()  # the first and the last stay real
        self.weights = [convs[i].weight for i in inner]
        self.saved = [w.data.clone() for w in self.weights]

    def binarize(self):
        for i, w in enumerate(self.weights):
            w.data = w.data.add(w.data.mean(1, keepdim=True).mul(-1).expand_as(w.data))
            w.data = w.data.clamp(-1.0, 1.0)
            self.saved[i].copy_(w.data)
            n = w.data[0].nelement()
            alpha = w.data.norm(1, 3, keepdim=True).sum(2, keepdim=True).sum(1, keepdim=True).div(n)
            w.data = w.data.sign().mul(alpha.expand(w.data.size()))

    def restore(self):
        for w, kept in zip(self.weights, self.saved):
            w.data.copy_(kept)

    def binary_gradient(self):
        for w in self.weights:
            real = w.data
            n = real[0].nelement()
            s = real.size()
            alpha = real.norm(1, 3, keepdim=True).sum(2, keepdim=True).sum(1, keepdim=True).div(n).expand(s)
            alpha[real.lt(-1.0)] = 0
            alpha[real.gt(1.0)] = 0
            g = w.grad.data
            via_alpha = real.sign().mul(g).sum(3, keepdim=True).sum(2, keepdim=True).sum(1, keepdim=True)
            via_alpha = via_alpha.div(n).expand(s).mul(real.sign())
            w.grad.data = alpha.mul(g).add(via_alpha).mul(1.0 - 1.0 / s[1]).mul(n)
            w.grad.data = w.grad.data.mul(1e+4)


model = TinyNIN()
for m in model.modules():
    if isinstance(m, nn.Conv2d):
        m.weight.data.normal_(mean=0.0, std=0.05)
        m.bias.data.zero_()
initialize(model)
groups = [{'params': [p], 'lr': float(args.lr), 'weight_decay': 1e-5} for p in model.parameters()]
optimizer = optim.Adam(groups, lr=0.10, weight_decay=1e-5)
xent = nn.CrossEntropyLoss()
binarizer = WeightBinarizer(model)

for epoch in range(2):
    model.train()
    for images, classes in trainloader:
        binarizer.binarize()
        optimizer.zero_grad()
        loss = xent(model(images), classes)
        loss.backward()
        binarizer.restore()
        binarizer.binary_gradient()
        optimizer.step()
        record.append(loss.item())
        record.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
"""

XNOR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    ("    def binary_gradient(self):", "    def binary_gradient(self, grads):"),
    (".grad.data", ".grad(grads).data"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    (
        "        binarizer.binary_gradient()\n        optimizer.step()\n",
        "        binarizer.binary_gradient(grads)\n        optimizer.step(grads)\n",
    ),
]


class _XnorArgs:
    lr = 0.01


def test_xnor_net_with_its_binary_gradient_trains_as_torch():
    rng = np.random.default_rng(7205)
    data = [
        (rng.standard_normal((4, 3, 6, 6)).astype(np.float32), rng.integers(0, 10, 4))
        for _ in range(2)
    ]
    theirs, ours = _runs(
        XNOR_SOURCE,
        XNOR_STEPS,
        args=_XnorArgs(),
        make_trainloader=lambda lib: [
            (lib.tensor(x), lib.tensor(y, dtype=lib.int64)) for x, y in data
        ],
    )
    assert len(theirs) == 2 * 4
    # (the first convolution's bias is followed by batch normalisation: no true gradient)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=("stem.0.bias",))


# -- regressions ---------------------------------------------------------------------------------
def test_a_masked_fill_of_an_expanded_tensor_writes_the_shared_locations_as_torch():
    results = []
    for lib in (torch, rg):
        scale = lib.tensor([[1.0], [2.0], [3.0]])
        m = scale.expand(3, 4)
        mask = lib.tensor([[False, True, False, False], [False] * 4, [True, True, False, False]])
        # was: ShapeError "more than one element ... refers to a single memory location";
        # torch writes each selected element's location (and warns the use is deprecated)
        with pytest.warns(UserWarning):
            m[mask] = 0
        with pytest.warns(UserWarning):
            m[lib.tensor([False, True, False])] = lib.tensor(7.0)
        results.append((scale.numpy().copy(), m.numpy().copy()))
    (their_base, theirs), (our_base, ours) = results
    np.testing.assert_array_equal(our_base, their_base)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(our_base, [[0.0], [7.0], [0.0]])
    # in a graph: torch takes the write, then its backward refuses to write the gradient back
    # through the expanded view ("more than one element of the written-to tensor refers to a
    # single memory location"); ours takes it and its backward refuses as torch's
    w = rg.tensor([[1.0], [2.0]]).require_grad()
    h = w * 2.0
    h.expand(2, 3)[rg.tensor([[True, False, False], [False, False, False]])] = 0.0
    assert h.tolist() == [[0.0], [4.0]]
    with pytest.raises(rg.ShapeError, match=r"index_put_: .*single memory location"):
        (h * h).sum().backward()
    # the graph stays usable: a loss that does not go through the write differentiates
    assert w.grad((w * 3.0).sum().backward()).tolist() == [[3.0], [3.0]]
    # a write through a view of the expanded tensor that takes each element once is
    # differentiated, as torch's: the filled location is a constant, the other one 2 * w
    h = w * 2.0
    h.expand(2, 3)[0, 1] = 0.0
    assert w.grad((h * h).sum().backward()).tolist() == [[0.0], [16.0]]


def test_a_gradients_data_assigned_is_the_gradient_the_step_takes():
    w = rg.tensor([1.0, -2.0]).require_grad()
    grads = (w * w).sum().backward()
    # XNOR-Net's updateBinaryGradWeight: ``weight.grad.data = ...`` (was: the assignment
    # changed a copy, and the step took the old gradient)
    w.grad(grads).data = w.grad(grads).data.mul(10.0)
    np.testing.assert_array_equal(w.grad(grads).numpy(), [20.0, -40.0])
    rg.optim.SGD([w], lr=0.01).step(grads)
    np.testing.assert_allclose(w.detach().numpy(), [0.8, -1.6], rtol=1e-6)
    with pytest.raises(rg.ShapeError, match=r"data: a gradient .* keeps its parameter's shape"):
        w.grad(grads).data = rg.tensor([1.0])
    np.testing.assert_array_equal(w.grad(grads).numpy(), [20.0, -40.0])


STE_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F


class StraightThroughSign(torch.autograd.Function):
    # sign() forward; backward, the gradient passed where |x| <= 1 (a hardtanh's gradient)
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, upstream):
        x, = ctx.saved_tensors
        grad = upstream.clone()
        grad[x.abs() > 1] = 0
        return grad


class SignWeights(nn.Linear):
    def forward(self, x):
        latent = self.weight
        signs = latent + (latent.sign() - latent).detach()  # +-1 forward, identity backward
        alpha = latent.abs().mean(dim=1, keepdim=True).detach()
        return F.linear(StraightThroughSign.apply(x), signs * alpha, self.bias)


net = nn.Sequential(nn.Linear(6, 8), SignWeights(8, 8), nn.Hardtanh(), SignWeights(8, 3))
initialize(net)
sgd = torch.optim.SGD(net.parameters(), momentum=0.9, lr=0.1)
for _ in range(4):
    sgd.zero_grad()
    loss = F.cross_entropy(net(inputs), labels)
    loss.backward()
    sgd.step()
    for w in net.parameters():
        w.data.clamp_(-1, 1)  # the latent weights stay in [-1, 1]
    record.append(loss.item())
    record.append({key: w.detach().numpy().copy() for key, w in net.named_parameters()})
"""

STE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.nn import functional as F\n",
    ),
    ("    loss.backward()\n    sgd.step()\n", "    grads = loss.backward()\n    sgd.step(grads)\n"),
]


def test_binary_connect_with_straight_through_estimators_trains_as_torch():
    rng = np.random.default_rng(7206)
    inputs = (2.0 * rng.standard_normal((10, 6))).astype(np.float32)
    labels = rng.integers(0, 3, 10)
    theirs, ours = _runs(
        STE_SOURCE,
        STE_STEPS,
        make_inputs=lambda lib: lib.tensor(inputs),
        make_labels=lambda lib: lib.tensor(labels, dtype=lib.int64),
    )
    assert theirs[6] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
