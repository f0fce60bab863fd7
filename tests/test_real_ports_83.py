"""Real-port tests, continued (the harness: ``tests/real_ports.py``): programs written here
in the style of two code bases, each run under torch and, ported, under retrograd from the
same weights.

- A Transformer translator in the style of jadore801120/attention-is-all-you-need-pytorch:
  a sinusoid table as a buffer from ``torch.FloatTensor`` of a float64 NumPy array, masks by
  ``(1 - torch.triu(torch.ones(...), diagonal=1)).bool()`` and ``pad_mask & causal_mask``,
  ``masked_fill(mask == 0, -1e9)``, embeddings and the output projection tied by assigning one
  ``Parameter`` to ``weight``, ``xavier_uniform_`` over the parameters with ``p.dim() > 1``,
  ``out, *_ =`` of a one-element tuple, in-place ``q += residual``, ``x *= d ** 0.5`` and
  ``logit *= d ** -0.5``, a warm-up schedule writing each group's ``lr``, label smoothing by
  ``torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)`` and ``masked_select``; then beam
  search: buffers from ``torch.LongTensor([[bos]])`` and ``torch.full(..., dtype=torch.long)``
  written through ``blank[:, 0] =``, ``topk``, ``//`` and ``%`` of int64 tensors,
  ``seqs[:, :step] = seqs[rows, :step]``, ``lengths.masked_fill(~ended, n).min(1)``,
  ``scores.div(lengths.float() ** alpha).max(0)``, ``seqs[pick][:lengths[pick]].tolist()``.
- GRU4Rec in the style of GRU4REC-pytorch, under each ranking loss (TOP1, BPR, TOP1-max,
  BPR-max, cross-entropy), optimizer and final activation: a one-hot buffer from an
  uninitialized ``torch.FloatTensor(b, n)`` cleared by ``zero_()`` and filled by
  ``scatter_(1, index, 1)``, ``nn.GRU`` over one step with rows of the hidden state reset by
  ``hidden[:, rows, :] = 0`` for a NumPy index array, in-batch negatives by
  ``logit[:, target.view(-1)]``, ``logit.diag().view(-1, 1).expand_as(logit)``,
  ``F.logsigmoid``, ``Variable(torch.arange(n).long())``, ``nn.Softmax()``/``nn.LogSoftmax()``
  without ``dim``, ``nn.ELU(alpha=)``, recall and MRR by ``topk``, ``(t == top).nonzero()[:,
  :-1]``, ``torch.reciprocal`` and ``.data``; a session-parallel loader.

These programs brought no fix of their own; they guard the surfaces above.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, ported_imports, run_source


@pytest.fixture(autouse=True)
def _seeded():
    """Torch's initial weights (which both runs start from) from fixed seeds."""
    torch.manual_seed(0)
    np.random.seed(0)
    rg.seed(0)


TRANSLATE_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


def sinusoids(positions, width):
    angle = np.array([[p / np.power(10000, 2 * (j // 2) / width) for j in range(width)]
                      for p in range(positions)])
    angle[:, 0::2], angle[:, 1::2] = np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])
    return torch.FloatTensor(angle).unsqueeze(0)  # from float64 NumPy


def padding_mask(seq, pad):
    return (seq != pad).unsqueeze(-2)


def causal_mask(seq):
    n = seq.size(1)
    return (1 - torch.triu(torch.ones((1, n, n), device=seq.device), diagonal=1)).bool()


class Attention(nn.Module):
    def __init__(self, heads, d_model, d_k, d_v):
        super().__init__()
        self.heads, self.d_k, self.d_v = heads, d_k, d_v
        self.q = nn.Linear(d_model, heads * d_k, bias=False)
        self.k = nn.Linear(d_model, heads * d_k, bias=False)
        self.v = nn.Linear(d_model, heads * d_v, bias=False)
        self.fc = nn.Linear(heads * d_v, d_model, bias=False)
        self.norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, query, key, value, mask=None):
        q, k, v = query, key, value
        b, nq, nk, h = q.size(0), q.size(1), k.size(1), self.heads
        residual = q
        q = self.q(q).view(b, nq, h, self.d_k).transpose(1, 2)
        k = self.k(k).view(b, nk, h, self.d_k).transpose(1, 2)
        v = self.v(v).view(b, nk, h, self.d_v).transpose(1, 2)
        scores = torch.matmul(q / self.d_k ** 0.5, k.transpose(2, 3))
        if mask is not None:
            scores = scores.masked_fill(mask.unsqueeze(1) == 0, -1e9)
        q = torch.matmul(torch.softmax(scores, dim=-1), v)
        q = q.transpose(1, 2).contiguous().view(b, nq, -1)
        q = self.fc(q)
        q += residual
        return self.norm(q)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_inner):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_inner), nn.Linear(d_inner, d_model)
        self.norm = nn.LayerNorm(d_model, eps=1e-6)

    def forward(self, x):
        residual = x
        x = self.w_2(torch.relu(self.w_1(x)))
        x += residual
        return self.norm(x)


class Stack(nn.Module):
    # the encoder (cross=False) or the decoder (cross=True): embeddings, positions, layers
    def __init__(self, vocab, d_model, d_inner, layers, heads, d_k, pad, scale_emb, cross):
        super().__init__()
        self.emb = nn.Embedding(vocab, d_model, padding_idx=pad)
        self.register_buffer('pos_table', sinusoids(32, d_model))
        self.norm = nn.LayerNorm(d_model, eps=1e-6)
        def layer():
            attends = [Attention(heads, d_model, d_k, d_k) for _ in range(2 if cross else 1)]
            return nn.ModuleList(attends + [FeedForward(d_model, d_inner)])

        self.layers = nn.ModuleList(layer() for _ in range(layers))
        self.scale, self.d_model = scale_emb, d_model

    def forward(self, seq, mask, memory=None, memory_mask=None):
        x = self.emb(seq)
        if self.scale:
            x *= self.d_model ** 0.5
        x = self.norm(x + self.pos_table[:, :x.size(1)].clone().detach())
        for layer in self.layers:
            x = layer[0](x, x, x, mask=mask)
            if memory is not None:
                x = layer[1](x, memory, memory, mask=memory_mask)
            x = layer[-1](x)
        return x,


class Transformer(nn.Module):
    def __init__(self, vocab, pad, d_model=8, d_inner=12, layers=2, heads=2, d_k=4, scale='prj'):
        super().__init__()
        self.pad, self.d_model, self.scale_prj = pad, d_model, scale == 'prj'
        args = (vocab, d_model, d_inner, layers, heads, d_k, pad, scale == 'emb')
        self.encoder, self.decoder = Stack(*args, cross=False), Stack(*args, cross=True)
        self.prj = nn.Linear(d_model, vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        self.prj.weight = self.decoder.emb.weight  # one matrix for both embeddings and the output
        self.encoder.emb.weight = self.decoder.emb.weight

    def forward(self, src, trg):
        src_mask = padding_mask(src, self.pad)
        trg_mask = padding_mask(trg, self.pad) & causal_mask(trg)
        memory, *_ = self.encoder(src, src_mask)
        out, *_ = self.decoder(trg, trg_mask, memory, src_mask)
        logit = self.prj(out)
        if self.scale_prj:
            logit *= self.d_model ** -0.5
        return logit.view(-1, logit.size(2))


class WarmupAdam:
    def __init__(self, optimizer, lr_mul, d_model, warmup):
        self.optimizer, self.lr_mul, self.d_model = optimizer, lr_mul, d_model
        self.warmup, self.steps = warmup, 0

    def zero_grad(self):
        self.optimizer.zero_grad()

    def step_and_update_lr(self):
        self.steps += 1
        ramp = min(self.steps ** -0.5, self.steps * self.warmup ** -1.5)
        lr = self.lr_mul * self.d_model ** -0.5 * ramp
        for group in self.optimizer.param_groups:
            group['lr'] = lr
        self.optimizer.step()


def loss_and_hits(pred, gold, pad, smoothing):
    real = gold.ne(pad)
    if smoothing:
        eps, n = 0.1, pred.size(1)
        target = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
        target = target * (1 - eps) + (1 - target) * eps / (n - 1)
        loss = -(target * torch.log_softmax(pred, dim=1)).sum(dim=1).masked_select(real).sum()
    else:
        loss = nn.functional.cross_entropy(pred, gold, ignore_index=pad, reduction='sum')
    hits = pred.max(1)[1].eq(gold).masked_select(real).sum().item()
    return loss, hits, real.sum().item()


def split(batch):
    src, trg = batch.src.transpose(0, 1), batch.trg.transpose(0, 1)
    return src, trg[:, :-1], trg[:, 1:].contiguous().view(-1)


class BeamSearch(nn.Module):
    def __init__(self, model, beam, max_len, pad, bos, eos):
        super().__init__()
        self.model, self.beam, self.max_len = model, beam, max_len
        self.pad, self.bos, self.eos = pad, bos, eos
        self.register_buffer('start', torch.LongTensor([[bos]]))
        self.register_buffer('blank', torch.full((beam, max_len), pad, dtype=torch.long))
        self.blank[:, 0] = bos
        self.register_buffer('lengths', torch.arange(1, max_len + 1, dtype=torch.long).unsqueeze(0))

    def next_probs(self, seq, memory, src_mask):
        out, *_ = self.model.decoder(seq, causal_mask(seq), memory, src_mask)
        return torch.softmax(self.model.prj(out), dim=-1)

    @torch.no_grad()
    def translate(self, src, alpha=0.7):
        src_mask = padding_mask(src, self.pad)
        memory, *_ = self.model.encoder(src, src_mask)
        probs, best = self.next_probs(self.start, memory, src_mask)[:, -1, :].topk(self.beam)
        scores, seqs = torch.log(probs).view(self.beam), self.blank.clone().detach()
        seqs[:, 1] = best[0]
        memory = memory.repeat(self.beam, 1, 1)
        pick = 0
        for step in range(2, self.max_len):
            probs = self.next_probs(seqs[:, :step], memory, src_mask)[:, -1, :]
            probs, best = probs.topk(self.beam)
            total = torch.log(probs).view(self.beam, -1) + scores.view(self.beam, 1)
            scores, flat = total.view(-1).topk(self.beam)
            rows, cols = flat // self.beam, flat % self.beam
            seqs[:, :step] = seqs[rows, :step]
            seqs[:, step] = best[rows, cols]
            ended = seqs == self.eos
            lengths, _ = self.lengths.masked_fill(~ended, self.max_len).min(1)
            if (ended.sum(1) > 0).sum(0).item() == self.beam:  # every beam has ended
                _, pick = scores.div(lengths.float() ** alpha).max(0)
                pick = pick.item()
                break
        return seqs[pick][:lengths[pick]].tolist()


def run_epoch(model, batches, optimizer, smoothing):
    model.train(optimizer is not None)
    total, hits, words = 0.0, 0, 0
    for batch in batches:
        src, trg_in, gold = split(batch)
        if optimizer is not None:
            optimizer.zero_grad()
        loss, n_hits, n_words = loss_and_hits(model(src, trg_in), gold, 1, smoothing)
        if optimizer is not None:
            loss.backward()
            optimizer.step_and_update_lr()  # the warm-up rate, then Adam's step
        total, hits, words = total + loss.item(), hits + n_hits, words + n_words
    return total / words, hits / words


def main(opt, training, validation, sentences):
    model = Transformer(opt.vocab, 1, scale=opt.scale)
    initialize(model)
    optimizer = WarmupAdam(optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-09), 0.5, 8, 4)
    for epoch in range(2):
        loss, accuracy = run_epoch(model, training, optimizer, opt.smoothing)
        ppl = math.exp(min(loss, 100))
        print(f'epoch {epoch} training: ppl {ppl:8.3f} accuracy {100 * accuracy:3.3f} %')
        with torch.no_grad():
            v_loss, v_accuracy = run_epoch(model, validation, None, False)
        ppl = math.exp(min(v_loss, 100))
        print(f'epoch {epoch} validation: ppl {ppl:8.3f} accuracy {100 * v_accuracy:3.3f} %')
        lr = optimizer.optimizer.param_groups[0]['lr']
        record.append((loss, accuracy, v_loss, v_accuracy, lr))
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
    search = BeamSearch(model, beam=3, max_len=7, pad=1, bos=2, eos=3)
    for words in sentences:
        out = search.translate(torch.LongTensor([[2] + words + [3]]))
        record.append(' '.join(str(i) for i in out))
"""

TRANSLATE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    ("    def step_and_update_lr(self):\n", "    def step_and_update_lr(self, grads):\n"),
    ("        self.optimizer.step()\n", "        self.optimizer.step(grads)\n"),
    (
        "            loss.backward()\n            optimizer.step_and_update_lr()",
        "            grads = loss.backward()\n            optimizer.step_and_update_lr(grads)",
    ),
]


def _translation_batches(lib, rng, count, batch_size, pad, bos, eos, vocab):
    """Batches as torchtext's iterators give them: ``src`` and ``trg`` as (length, batch)
    index tensors, ``<s>``/``</s>`` around each sentence, padded with ``pad``; the target a
    scrambled copy of the source (reversed, each token shifted by one)."""
    batches = []
    for _ in range(count):
        lengths = rng.integers(2, 6, batch_size)
        width = int(lengths.max()) + 2
        src = np.full((width, batch_size), pad)
        trg = np.full((width, batch_size), pad)
        for j, n in enumerate(lengths):
            words = rng.integers(4, vocab - 1, n)
            src[: n + 2, j] = [bos, *words, eos]
            trg[: n + 2, j] = [bos, *(words[::-1] + 1), eos]
        batches.append(types.SimpleNamespace(src=lib.tensor(src), trg=lib.tensor(trg)))
    return batches


@pytest.mark.parametrize("smoothing", [True, False])
def test_attention_is_all_you_need_trains_and_translates_as_torch(capsys, smoothing):
    opt = types.SimpleNamespace(vocab=14, scale="prj" if smoothing else "emb", smoothing=smoothing)
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(8301)
        training = _translation_batches(lib, rng, 2, 4, 1, 2, 3, 14)
        validation = _translation_batches(lib, rng, 1, 3, 1, 2, 3, 14)
        record = []
        text = TRANSLATE_SOURCE if lib is torch else port(TRANSLATE_SOURCE, TRANSLATE_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](opt, training, validation, [[5, 6, 7], [9, 4]])
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "validation" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


GRU4REC_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.autograd import Variable  # (as older code wraps its targets)


def activation(name):
    if name == 'tanh':
        return nn.Tanh()
    if name == 'relu':
        return nn.ReLU()
    if name == 'softmax':
        return nn.Softmax()
    if name == 'softmax_logit':
        return nn.LogSoftmax()
    kind, value = name.split('-')
    if kind == 'elu':
        return nn.ELU(alpha=float(value))
    return nn.LeakyReLU(negative_slope=float(value))


class SessionGRU(nn.Module):
    # the next item of every session of a batch, from the current one (one-hot or embedded)
    def __init__(self, n_items, hidden, layers, batch, embedding_dim, act):
        super().__init__()
        self.n_items, self.hidden, self.layers, self.batch = n_items, hidden, layers, batch
        self.embedding_dim = embedding_dim  # -1: one-hot inputs
        if embedding_dim != -1:
            self.embed = nn.Embedding(n_items, embedding_dim)
        self.onehot = torch.FloatTensor(batch, n_items)  # uninitialized: cleared before each use
        width = embedding_dim if embedding_dim != -1 else n_items
        self.gru = nn.GRU(width, hidden, layers, dropout=0.0)
        self.out = nn.Linear(hidden, n_items)
        self.act = activation(act)

    def forward(self, items, hidden):
        if self.embedding_dim == -1:
            self.onehot.zero_()
            x = self.onehot.scatter_(1, items.view(-1, 1), 1)
        else:
            x = self.embed(items)
        out, hidden = self.gru(x.unsqueeze(0), hidden)
        return self.act(self.out(out.view(-1, out.size(-1)))), hidden

    def init_hidden(self):
        return torch.zeros(self.layers, self.batch, self.hidden)


def ranking_loss(kind, logit):
    # logit[i, j]: the score of session i's next item against session j's (in-batch negatives)
    positive = logit.diag().view(-1, 1).expand_as(logit)
    if kind == 'CrossEntropy':
        return nn.CrossEntropyLoss()(logit, Variable(torch.arange(logit.size(0)).long()))
    if kind == 'BPR':
        return -torch.mean(nn.functional.logsigmoid(positive - logit))
    if kind == 'TOP1':
        return torch.sigmoid(logit - positive).mean() + torch.sigmoid(logit ** 2).mean()
    weights = nn.functional.softmax(logit, dim=1)
    if kind == 'BPR-max':
        return -torch.log(torch.mean(weights * torch.sigmoid(positive - logit)))
    # TOP1-max
    return torch.mean(weights * (torch.sigmoid(logit - positive) + torch.sigmoid(logit ** 2)))


def session_batches(data, batch):
    # each row follows one session; a finished session's row takes the next session
    offsets, clicks = data.click_offsets, data.df.item_idx.values
    rows = np.arange(batch)
    last = rows.max()
    start, end = offsets[data.session_idx_arr[rows]], offsets[data.session_idx_arr[rows] + 1]
    finished_rows = []
    while True:
        shortest = (end - start).min()
        now = clicks[start]
        for i in range(shortest - 1):
            nxt = clicks[start + i + 1]
            yield torch.LongTensor(now), torch.LongTensor(nxt), finished_rows
            now = nxt
        start = start + (shortest - 1)
        finished_rows = np.arange(len(rows))[(end - start) <= 1]
        for r in finished_rows:
            last += 1
            if last >= len(offsets) - 1:
                return
            rows[r] = last
            session = data.session_idx_arr[last]
            start[r], end[r] = offsets[session], offsets[session + 1]


def recall_and_mrr(logit, target, k):
    _, top = torch.topk(logit, k, -1)
    target = target.view(-1, 1).expand_as(top)
    hits = (target == top).nonzero()
    if len(hits) == 0:
        return 0.0, 0.0
    recall = float((target == top).nonzero()[:, :-1].size(0)) / target.size(0)
    mrr = torch.sum(torch.reciprocal((hits[:, -1] + 1).float())).data / target.size(0)
    return recall, mrr.item()


def make_optimizer(params, kind, lr, weight_decay, momentum, eps):
    if kind == 'RMSProp':
        return optim.RMSprop(params, lr=lr, eps=eps, weight_decay=weight_decay, momentum=momentum)
    if kind == 'Adagrad':
        return optim.Adagrad(params, lr=lr, weight_decay=weight_decay)
    if kind == 'Adadelta':
        return optim.Adadelta(params, lr=lr, eps=eps, weight_decay=weight_decay)
    if kind == 'Adam':
        return optim.Adam(params, lr=lr, eps=eps, weight_decay=weight_decay)
    return optim.SGD(params, lr=lr, weight_decay=weight_decay, momentum=momentum)


def main(args, train_sessions, valid_sessions):
    train_data, valid_data = train_sessions, valid_sessions
    n_items = len(train_data.items)
    model = SessionGRU(n_items, 8, args.num_layers, 4, args.embedding_dim, args.final_act)
    initialize(model)
    optimizer = make_optimizer(model.parameters(), args.optimizer_type, 0.05, 1e-4, 0.1, 1e-6)
    print('training')
    for epoch in range(2):
        model.train()
        hidden, losses = model.init_hidden(), []
        for items, target, finished_rows in session_batches(train_data, 4):
            if len(finished_rows) != 0:
                hidden[:, finished_rows, :] = 0  # a new session starts from nothing
            hidden = hidden.detach()
            logit, hidden = model(items, hidden)
            loss = ranking_loss(args.loss_type, logit[:, target.view(-1)])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        record.append(losses)
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        model.eval()
        scores = []
        with torch.no_grad():
            hidden = model.init_hidden()
            for items, target, finished_rows in session_batches(valid_data, 4):
                if len(finished_rows) != 0:
                    hidden[:, finished_rows, :] = 0
                logit, hidden = model(items, hidden)
                scores.append((ranking_loss(args.loss_type, logit[:, target.view(-1)]).item(),
                               *recall_and_mrr(logit, target, 3)))
        loss, recall, mrr = np.mean(scores, axis=0)
        record.append([loss, recall, mrr])
        print(f'epoch {epoch}: loss {np.mean(losses):.4f}, '
              f'validation loss {loss:.4f} recall {recall:.4f} mrr {mrr:.4f}')
"""

GRU4REC_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


class _Frame:
    """The one column of a clicks frame the loader reads (``df.item_idx.values``)."""

    def __init__(self, clicks):
        self.item_idx = types.SimpleNamespace(values=clicks)

    def __len__(self):
        return len(self.item_idx.values)


class _SessionDataset:
    """Clicks sorted by session and time (``df.item_idx.values``), where each session starts
    (``click_offsets``) and the session order (``session_idx_arr``): random sessions of 2 to 5
    clicks over ``n_items`` items."""

    def __init__(self, rng, n_sessions, n_items):
        lengths = rng.integers(2, 6, n_sessions)
        clicks = rng.integers(0, n_items, int(lengths.sum()))
        self.df = _Frame(clicks)
        self.click_offsets = np.concatenate([[0], np.cumsum(lengths)])
        self.session_idx_arr = np.arange(n_sessions)
        self.items = np.arange(n_items)


@pytest.mark.parametrize(
    ("loss_type", "final_act", "embedding_dim", "optimizer_type", "num_layers"),
    [
        ("TOP1-max", "tanh", -1, "Adagrad", 1),
        ("BPR-max", "elu-0.5", 6, "Adam", 2),
        ("BPR", "leaky-0.1", -1, "RMSProp", 1),
        ("TOP1", "relu", 5, "SGD", 1),
        ("CrossEntropy", "softmax_logit", -1, "Adadelta", 1),
    ],
)
def test_gru4rec_trains_as_torch(
    capsys, loss_type, final_act, embedding_dim, optimizer_type, num_layers
):
    args = types.SimpleNamespace(
        num_layers=num_layers, embedding_dim=embedding_dim, final_act=final_act,
        loss_type=loss_type, optimizer_type=optimizer_type,
    )  # fmt: skip
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(8302)
        train_data = _SessionDataset(rng, 9, 10)
        valid_data = _SessionDataset(rng, 6, 10)
        record = []
        text = (
            GRU4REC_SOURCE if lib is torch else ported_imports(port(GRU4REC_SOURCE, GRU4REC_STEPS))
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](args, train_data, valid_data)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "recall" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
