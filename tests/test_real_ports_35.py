"""A program written here in the style of pytorch/examples' word-level language model
(``word_language_model``: its data, model and training scripts), run under torch and, ported,
under retrograd from the same weights (the harness: ``tests/real_ports.py``), on a small corpus
written to disk:

- a vocabulary and corpus reading ``train.txt``/``valid.txt``/``test.txt`` line by line into
  ``torch.tensor(ids).type(torch.int64)`` joined by ``torch.cat``; batches made by
  ``data.narrow(0, 0, n * bsz)`` and ``data.view(bsz, -1).t().contiguous()``;
- a recurrent model building its layer by ``getattr(nn, kind)(emb, hid, layers,
  dropout=...)`` (or ``nn.RNN(..., nonlinearity=...)``), tied weights by
  ``self.decoder.weight = self.encoder.weight``, ``nn.init.uniform_``/``zeros_``, the first
  hidden state by ``next(self.parameters()).new_zeros``;
- a model deriving from ``nn.Transformer`` (``super().__init__(d_model=..., nhead=...,
  dim_feedforward=..., num_encoder_layers=...)``, its ``decoder`` replaced by an
  ``nn.Linear``, only ``self.encoder`` called, with ``mask=``), the causal mask by
  ``(torch.triu(torch.ones(n, n)) == 1).transpose(0, 1)`` and two ``masked_fill``s of a
  ``.float()`` mask, ``src.device`` and ``.to(device)``, a sinusoidal positional buffer;
- the loop: hidden states detached by a recursion on ``isinstance(h, torch.Tensor)`` over
  LSTM state tuples, ``model.zero_grad()``, ``torch.nn.utils.clip_grad_norm_`` and the
  hand-written SGD ``p.data.add_(p.grad, alpha=-lr)``, evaluation under ``torch.no_grad()``
  summing ``len(data) * criterion(output, targets).item()``, the learning rate divided by 4
  when the validation loss does not improve, the best model kept by ``torch.save(model, f)``
  into an open file and read back by ``torch.load(f, weights_only=False)`` (a pickled module
  of classes defined by the script), then ``model.rnn.flatten_parameters()``.

The port changes only the gradient lines (``grads = loss.backward()``,
``clip_grad_norm_(grads, ...)`` and ``p.grad(grads)``). The recurrent runs use
``dropout=0``; ``nn.Transformer``'s own dropout (0.1, not passed on by the model) is set to 0
on its ``nn.Dropout`` modules (and ``MultiheadAttention.dropout``) after construction, in both
runs, since the two libraries draw different masks.
"""

from __future__ import annotations

import math
import re
import sys
import types
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, port

WLM_SOURCE = """
import os
import time


class Vocab:
    def __init__(self):
        self.index, self.words = {}, []

    def add(self, word):
        if word not in self.index:
            self.index[word] = len(self.words)
            self.words.append(word)
        return self.index[word]

    def __len__(self):
        return len(self.words)


class TextSplits:
    def __init__(self, folder):
        self.vocab = Vocab()
        paths = [os.path.join(folder, name + ".txt") for name in ("train", "valid", "test")]
        self.train, self.valid, self.test = (self.encode(path) for path in paths)

    def encode(self, path):
        with open(path, encoding="utf8") as f:
            lines = [line.split() + ["<eos>"] for line in f]
        ids = [[self.vocab.add(w) for w in words] for words in lines]
        rows = [torch.tensor(line_ids).type(torch.int64) for line_ids in ids]
        return torch.cat(rows)


def init_ends(embedding, readout):
    nn.init.uniform_(embedding.weight, -0.1, 0.1)
    nn.init.uniform_(readout.weight, -0.1, 0.1)
    nn.init.zeros_(readout.bias)


class RecurrentLM(nn.Module):
    def __init__(self, kind, vocab, emb, hid, layers, dropout=0.0, tie=False):
        super().__init__()
        self.kind, self.vocab, self.hid, self.layers = kind, vocab, hid, layers
        self.dropout_layer = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab, emb)
        if kind in ("LSTM", "GRU"):
            self.rnn = getattr(nn, kind)(emb, hid, layers, dropout=dropout)
        elif kind.startswith("RNN_"):
            self.rnn = nn.RNN(emb, hid, layers, nonlinearity=kind[4:].lower(), dropout=dropout)
        else:
            raise ValueError("unknown cell " + kind)
        self.head = nn.Linear(hid, vocab)
        if tie:
            if hid != emb:
                raise ValueError("tying needs hid == emb")
            self.head.weight = self.embed.weight
        init_ends(self.embed, self.head)

    def forward(self, tokens, state):
        out, state = self.rnn(self.dropout_layer(self.embed(tokens)), state)
        logits = self.head(self.dropout_layer(out)).view(-1, self.vocab)
        return F.log_softmax(logits, dim=1), state

    def init_hidden(self, bsz):
        w = next(self.parameters())
        blank = lambda: w.new_zeros(self.layers, bsz, self.hid)  # noqa: E731
        return (blank(), blank()) if self.kind == "LSTM" else blank()


class Sinusoids(nn.Module):
    def __init__(self, width, dropout=0.1, longest=64):
        super().__init__()
        self.drop = nn.Dropout(p=dropout)
        where = torch.arange(0, longest, dtype=torch.float).unsqueeze(1)
        rate = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))
        table = torch.zeros(longest, width)
        table[:, 0::2] = torch.sin(where * rate)
        table[:, 1::2] = torch.cos(where * rate)
        self.register_buffer("table", table.unsqueeze(1))  # [time, 1, width]

    def forward(self, x):
        return self.drop(x + self.table[: x.size(0)])


class CausalLM(nn.Transformer):
    def __init__(self, vocab, width, heads, ff, layers, dropout=0.0):
        super().__init__(d_model=width, nhead=heads, dim_feedforward=ff, num_encoder_layers=layers)
        self.width, self.causal = width, None
        self.positions = Sinusoids(width, dropout)
        self.input_emb = nn.Embedding(vocab, width)
        self.decoder = nn.Linear(width, vocab)
        init_ends(self.input_emb, self.decoder)

    @staticmethod
    def causal_mask(n):
        allowed = (torch.triu(torch.ones(n, n)) == 1).transpose(0, 1)
        blocked = allowed.float().masked_fill(allowed == 0, float("-inf"))
        return blocked.masked_fill(allowed == 1, 0.0)

    def forward(self, src):
        if self.causal is None or self.causal.size(0) != len(src):
            self.causal = self.causal_mask(len(src)).to(src.device)
        x = self.positions(self.input_emb(src) * math.sqrt(self.width))
        return F.log_softmax(self.decoder(self.encoder(x, mask=self.causal)), dim=-1)


device = torch.device("cpu")
splits = TextSplits(args.data)


def columns(ids, bsz):
    usable = ids.size(0) // bsz * bsz
    return ids.narrow(0, 0, usable).view(bsz, -1).t().contiguous().to(device)


train_ids = columns(splits.train, args.batch_size)
valid_ids, test_ids = columns(splits.valid, 2), columns(splits.test, 2)
V = len(splits.vocab)
recurrent = args.model != "Transformer"
if recurrent:
    sizes = (args.emsize, args.nhid, args.nlayers)
    model = RecurrentLM(args.model, V, *sizes, args.dropout, args.tied).to(device)
else:
    model = CausalLM(V, args.emsize, args.nhead, args.nhid, args.nlayers, args.dropout).to(device)
initialize(model)  # torch's initial weights in both runs
nll = nn.NLLLoss()


def detach_state(h):
    # cut the graph at the batch boundary; LSTM states are (h, c) tuples
    return h.detach() if isinstance(h, torch.Tensor) else tuple(detach_state(s) for s in h)


def window(ids, i):
    n = min(args.bptt, len(ids) - 1 - i)
    return ids[i:i + n], ids[i + 1:i + 1 + n].view(-1)


def run_forward(x, state):
    if recurrent:
        return model(x, state)
    return model(x).view(-1, V), state


def score(ids):
    model.eval()
    total, state = 0.0, model.init_hidden(2) if recurrent else None
    with torch.no_grad():
        for i in range(0, ids.size(0) - 1, args.bptt):
            x, y = window(ids, i)
            out, state = run_forward(x, state)
            state = detach_state(state) if recurrent else None
            total += len(x) * nll(out, y).item()
    return total / (len(ids) - 1)


def one_epoch(epoch):
    model.train()
    running, tick = 0.0, time.time()
    state = model.init_hidden(args.batch_size) if recurrent else None
    for b, i in enumerate(range(0, train_ids.size(0) - 1, args.bptt)):
        x, y = window(train_ids, i)
        model.zero_grad()
        out, state = run_forward(x, detach_state(state) if recurrent else None)
        loss = nll(out, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip)
        for param in model.parameters():
            param.data.add_(param.grad, alpha=-lr)  # plain SGD by hand
        running += loss.item()
        losses.append(loss.item())
        if b and b % args.log_interval == 0:
            mean = running / args.log_interval
            ms = (time.time() - tick) * 1000 / args.log_interval
            line = "epoch {:2d} batch {:3d}/{:3d} lr {:.2f} ms/batch {:6.2f} loss {:.3f} ppl {:.2f}"
            print(line.format(epoch, b, len(train_ids) // args.bptt, lr, ms, mean, math.exp(mean)))
            running, tick = 0.0, time.time()


lr, best = args.lr, None
losses = []
val_losses, lrs = [], []
for epoch in range(1, args.epochs + 1):
    one_epoch(epoch)
    val = score(valid_ids)
    val_losses.append(val)
    lrs.append(lr)
    if best is None or val < best:
        best = val
        with open(args.save, "wb") as f:
            torch.save(model, f)
    else:
        lr /= 4.0  # no progress on validation: anneal

with open(args.save, "rb") as f:
    restored = torch.load(f, weights_only=False)
if recurrent:
    restored.rnn.flatten_parameters()  # the loaded weights are no longer one block
model = restored
test_loss = score(test_ids)
"""

WLM_STEP = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("clip_grad_norm_(model.parameters(),", "clip_grad_norm_(grads, model.parameters(),"),
    ("param.data.add_(param.grad, alpha=-lr)", "param.data.add_(param.grad(grads), alpha=-lr)"),
]

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ate", "my", "hat", "while", "bird"]


def _write_corpus(path):
    rng = np.random.default_rng(35)
    for name, lines in (("train.txt", 14), ("valid.txt", 4), ("test.txt", 4)):
        text = "\n".join(" ".join(rng.choice(WORDS, rng.integers(3, 8))) for _ in range(lines))
        (path / name).write_text(text + "\n", encoding="utf8")


def _run(lib, source, name, args, initialize, monkeypatch):
    """``source`` executed as the module ``name`` (``torch.save(model)`` pickles its classes by
    module and name)."""
    module = types.ModuleType(name)
    module.__dict__.update(
        torch=lib,
        nn=lib.nn,
        optim=lib.optim,
        F=lib.nn.functional,
        math=math,
        np=np,
        args=args,
        initialize=initialize,
    )
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module.__dict__


@pytest.mark.parametrize(
    "model, tied",
    [("LSTM", True), ("GRU", False), ("RNN_TANH", False), ("Transformer", False)],
)
def test_word_language_model_matches_torch(tmp_path, monkeypatch, capsys, model, tied):
    _write_corpus(tmp_path)
    state = {}

    def initialize(net):
        for m in net.modules():
            if type(m).__name__ == "Dropout":  # nn.Transformer's own 0.1 (see the docstring)
                m.p = 0.0
            if type(m).__name__ == "MultiheadAttention":
                m.dropout = 0.0
        if not state:
            state.update({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
        else:
            net.load_state_dict({k: rg.tensor(v) for k, v in state.items()})

    records = []
    for lib, source in ((torch, WLM_SOURCE), (rg, port(WLM_SOURCE, WLM_STEP))):
        torch.manual_seed(0)
        monkeypatch.setattr(lib, "_wlm_dtype", lib.get_default_dtype(), raising=False)
        lib.set_default_dtype(lib.float64)
        args = SimpleNamespace(
            data=str(tmp_path),
            model=model,
            emsize=8,
            nhid=8 if tied else 12,
            nlayers=2,
            nhead=2,
            lr=20.0 if model != "Transformer" else 2.0,
            clip=0.25,
            epochs=3,
            batch_size=3,
            bptt=5,
            dropout=0.0,
            tied=tied,
            log_interval=2,
            save=str(tmp_path / f"model_{lib.__name__}.pt"),
        )
        names = _run(lib, source, f"wlm_port_{lib.__name__}", args, initialize, monkeypatch)
        assert type(names["model"]).__module__ == f"wlm_port_{lib.__name__}"
        lib.set_default_dtype(lib._wlm_dtype)
        records.append(
            [
                names["losses"],
                names["val_losses"],
                names["lrs"],
                names["test_loss"],
                re.sub(r"ms/batch +[0-9.]+", "", capsys.readouterr().out),
                {n: p.detach().numpy().copy() for n, p in names["model"].named_parameters()},
            ]
        )
        if tied:
            assert names["model"].head.weight is names["model"].embed.weight
    assert records[0][4].count("epoch  3 batch") == 2  # the log lines (timings left out) agree too
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-10)
