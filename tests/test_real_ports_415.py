"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of keon/seq2seq (a GRU encoder-decoder with additive attention and teacher forcing, its
``model.py``/``train.py`` pair), run under torch and, ported, under retrograd from the same
weights and draws.

Its surface: a two-layer bidirectional ``nn.GRU`` encoder whose directions are summed by
slicing the feature axis, attention by ``hidden.repeat(T, 1, 1).transpose(0, 1)``,
``F.relu(self.attn(torch.cat([h, enc], 2)))`` and ``torch.bmm(v, energy)`` against
``nn.Parameter(torch.rand(hidden))`` refilled by ``.data.uniform_(-stdv, stdv)``, a decoder with
``nn.Dropout(p, inplace=True)`` and ``weights.bmm(enc.transpose(0, 1))``, ``F.log_softmax``
outputs written row by row into ``Variable(torch.zeros(T, B, V)).cuda()``, the encoder state cut
by ``hidden[:n_layers]``, teacher forcing by ``random.random()`` against
``output.data.max(1)[1]`` wrapped in ``Variable(...)``; training with ``F.nll_loss(out[1:]
.view(-1, V), trg[1:].contiguous().view(-1), ignore_index=pad)``, ``clip_grad_norm_`` imported
from ``torch.nn.utils``, ``loss.data.item()``, evaluation under ``torch.no_grad()``, argparse's
single-dash options read from ``sys.argv``, ``print(model)`` and the best model saved under
``./.save``.

The program is CUDA-minded (``assert torch.cuda.is_available()``, ``.cuda()`` on tensors and the
model): both runs get ``cuda.is_available()`` answering ``True`` and ``.cuda()`` returning its
receiver, as a CPU stands in for the GPU. The sentence pairs are the synthetic corpus of
``tests/test_real_ports_410.py``, tokenized by the program itself; dropout is 0 (each library
draws its own masks). The port changes the import lines naming ``torch`` and the gradient lines.
"""

from __future__ import annotations

import random
import sys

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
)
from test_real_ports_410 import synthetic_multi30k

SEQ2SEQ_SOURCE = """
import argparse
import math
import os
import random

import torch
from torch import nn, optim
from torch.autograd import Variable  # as pre-0.4 scripts wrap tensors
from torch.nn.utils import clip_grad_norm_ as clip_norm

F = nn.functional


class Encoder(nn.Module):
    def __init__(self, n_words, n_embed, n_hidden, layers=2, dropout=0.0):
        super().__init__()
        self.n_hidden = n_hidden
        self.embed = nn.Embedding(n_words, n_embed)
        self.gru = nn.GRU(n_embed, n_hidden, layers, dropout=dropout, bidirectional=True)

    def forward(self, src):
        states, last = self.gru(self.embed(src))
        # add the two directions instead of keeping 2H features
        return states[:, :, : self.n_hidden] + states[:, :, self.n_hidden :], last


class AdditiveAttention(nn.Module):
    def __init__(self, n_hidden):
        super().__init__()
        self.attn = nn.Linear(2 * n_hidden, n_hidden)
        self.v = nn.Parameter(torch.rand(n_hidden))
        bound = 1.0 / math.sqrt(self.v.size(0))
        self.v.data.uniform_(-bound, bound)

    def forward(self, query, keys):  # query [B, H], keys [T, B, H]
        steps = keys.size(0)
        q = query.repeat(steps, 1, 1).transpose(0, 1)
        keys = keys.transpose(0, 1)
        energy = F.relu(self.attn(torch.cat([q, keys], 2))).transpose(1, 2)
        v = self.v.repeat(keys.size(0), 1).unsqueeze(1)
        return F.softmax(torch.bmm(v, energy).squeeze(1), dim=1).unsqueeze(1)


class Decoder(nn.Module):
    def __init__(self, n_embed, n_hidden, n_words, layers=1, dropout=0.0):
        super().__init__()
        self.n_words, self.layers = n_words, layers
        self.embed = nn.Embedding(n_words, n_embed)
        self.drop = nn.Dropout(dropout, inplace=True)
        self.attend = AdditiveAttention(n_hidden)
        self.gru = nn.GRU(n_hidden + n_embed, n_hidden, layers)
        self.out = nn.Linear(2 * n_hidden, n_words)

    def forward(self, word, state, keys):
        x = self.drop(self.embed(word).unsqueeze(0))
        weights = self.attend(state[-1], keys)
        context = weights.bmm(keys.transpose(0, 1)).transpose(0, 1)
        y, state = self.gru(torch.cat([x, context], 2), state)
        scores = self.out(torch.cat([y.squeeze(0), context.squeeze(0)], 1))
        return F.log_softmax(scores, dim=1), state


class Translator(nn.Module):
    def __init__(self, enc, dec):
        super().__init__()
        self.encoder, self.decoder = enc, dec

    def forward(self, src, trg, forcing=0.5):
        steps, batch = trg.size(0), src.size(1)
        outputs = Variable(torch.zeros(steps, batch, self.decoder.n_words)).cuda()
        keys, state = self.encoder(src)
        state = state[: self.decoder.layers]
        word = Variable(trg.data[0, :])
        for t in range(1, steps):
            out, state = self.decoder(word, state, keys)
            outputs[t] = out
            guess = out.data.max(1)[1]
            word = Variable(trg.data[t] if random.random() < forcing else guess).cuda()
        return outputs


def numbered(sentences, vocab):
    rows = [["<s>"] + s.lower().replace(".", " .").split() + ["</s>"] for s in sentences]
    width = max(map(len, rows))
    ids = [[vocab.setdefault(w, len(vocab)) for w in r] + [PAD] * (width - len(r)) for r in rows]
    return torch.tensor(ids).t().contiguous()  # [T, B]


PAD = 0
parser = argparse.ArgumentParser(description="attention seq2seq")
parser.add_argument("-epochs", type=int, default=20)
parser.add_argument("-batch", type=int, default=16)
parser.add_argument("-lr", type=float, default=3e-4)
parser.add_argument("-clip", type=float, default=5.0)
args = parser.parse_args()
assert torch.cuda.is_available(), "written for a GPU"

src_vocab, trg_vocab = {"<pad>": PAD}, {"<pad>": PAD}
splits = {}
for name, rows in pairs.items():
    splits[name] = [
        (numbered([r["de"] for r in rows[i : i + args.batch]], src_vocab),
         numbered([r["en"] for r in rows[i : i + args.batch]], trg_vocab))
        for i in range(0, len(rows), args.batch)
    ]
V = len(trg_vocab)

model = Translator(Encoder(len(src_vocab), 8, 12), Decoder(8, 12, V)).cuda()
initialize(model)
opt = optim.Adam(model.parameters(), lr=args.lr)
print(model)


def nll(model, src, trg, forcing):
    out = model(src, trg, forcing=forcing)
    return F.nll_loss(out[1:].view(-1, V), trg[1:].contiguous().view(-1), ignore_index=PAD)


def mean_loss(batches):
    model.eval()
    with torch.no_grad():
        total = sum(nll(model, s.cuda(), t.cuda(), 0.0).data.item() for s, t in batches)
    return total / len(batches)


best = None
for epoch in range(args.epochs):
    model.train()
    for src, trg in splits["train"]:
        opt.zero_grad()
        loss = nll(model, src.cuda(), trg.cuda(), 0.5)
        loss.backward()
        clip_norm(model.parameters(), args.clip)
        opt.step()
        record.append(loss.data.item())
    val = mean_loss(splits["validation"])
    record.append(val)
    print("epoch %d val %5.3f ppl %5.2f" % (epoch, val, math.exp(val)))
    if best is None or val < best:
        os.makedirs(".save", exist_ok=True)
        torch.save(model.state_dict(), "./.save/translator_%d.pt" % epoch)
        best = val
record.append(mean_loss(splits["test"]))
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
"""

SEQ2SEQ_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        loss.backward()\n        clip_norm(model.parameters(), args.clip)\n"
        "        opt.step()\n",
        "        grads = loss.backward()\n"
        "        clip_norm(grads, model.parameters(), args.clip)\n"
        "        opt.step(grads)\n",
    ),
]


def test_attention_seq2seq_trains_with_attention_and_teacher_forcing_as_torch(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    corpus = synthetic_multi30k(np.random.default_rng(415), sizes=(12, 4, 4))
    monkeypatch.setattr(sys, "argv", ["train.py", "-epochs", "2", "-batch", "4", "-lr", "0.001"])
    initialize, records = initializer(), []
    torch.manual_seed(415)  # torch's run draws the initial weights
    np.random.seed(415)
    for lib in (torch, rg):
        with monkeypatch.context() as patch:
            patch.setattr(lib.cuda, "is_available", lambda: True)
            patch.setattr(lib.Tensor, "cuda", lambda self, *args, **kwargs: self)
            patch.setattr(lib.nn.Module, "cuda", lambda self, *args, **kwargs: self)
            record = []
            ported = ported_imports(port(SEQ2SEQ_SOURCE, SEQ2SEQ_STEPS))
            random.seed(415)
            with SharedDraws(lib, 415):
                run_source(
                    SEQ2SEQ_SOURCE if lib is torch else ported,
                    lib,
                    record=record,
                    initialize=initialize,
                    pairs=corpus,
                    __name__="__main__",
                )
        records.append(record)
        capsys.readouterr()
    theirs, ours = records
    assert (
        len(theirs) == 2 * (3 + 1) + 2 and theirs[7] < theirs[3]
    )  # it learns: the validation loss falls
    # unit 7 of the attention's energy is active at every step: its part from the decoder state
    # (and its bias) adds one number to all of a row's energies, which the softmax takes away,
    # so the true gradient of those weights is zero and Adam's steps follow the rounding noise
    noise = {
        "decoder.attend.attn.weight": slice(7, 8),
        "decoder.attend.attn.bias": slice(7, 8),
    }
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, noise=noise)
