"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a BiGRU-CRF tagger trained a few batches and decoded by Viterbi, against torch's run of the same
code from the same weights and batches.

- A program written here in the style of threelittlemonkeys/lstm-crf-pytorch: the legacy
  constructors ``torch.FloatTensor(n).fill_(0.)`` and an empty ``torch.LongTensor()`` grown by
  ``torch.cat((back, pointers.unsqueeze(1)), 1)`` (a 1-d empty tensor joined to 2-d ones, which
  torch skips), ``torch.cuda.FloatTensor if ... else torch.FloatTensor`` aliases, the CRF's
  per-example ``row[tag]`` and ``trans[pair]`` with ``pair`` a tuple of two 0-d index tensors,
  ``tags.gather(0, mask.sum(0).long().unsqueeze(0))`` and ``self.trans[EOS, last]``, the
  forward algorithm's masked log-sum-exp (``torch.max(x, -1)[0]``), ``self.trans.data[...] =
  -10000`` on a ``Parameter``, ``self.zero_grad()`` inside ``forward``, ``getattr(nn, "GRU")``
  two layers bidirectional over ``pack_padded_sequence(x, lengths, enforce_sorted=False)`` with
  int32 lengths and an initial state, ``pad_packed_sequence``, the in-place ``h *=
  mask.unsqueeze(2)``, a character CNN (``nn.Conv2d`` over ``(w, dim)`` kernels,
  ``F.max_pool1d(k, k.size(2))``) concatenated with the word lookup by ``type(h) ==
  torch.Tensor``, ``LongTensor(rows)`` then ``transpose_(0, 1)``; Viterbi with
  ``scores.max(2)``, ``scores += emit``, and back-tracking in Python with 0-d tensors as list
  indices and ``mask[:, b].sum().int()`` as a slice bound.

Compared against torch: the losses (which fall), the weights, the decoded tag paths and the
printed mean losses. The batches are seeded sentences whose tags follow their words.
``initialize(...)`` gives the port torch's initial weights. The lines a port changes: the
``import`` lines and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

CRF_TAGGER_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F

PAD, BOS, EOS = 0, 1, 2
RNN, LAYERS, HIDDEN, CHAR_DIM, WORD_DIM = "GRU", 2, 10, 5, 8
USE_GPU = torch.cuda.is_available()
FloatT = torch.cuda.FloatTensor if USE_GPU else torch.FloatTensor
LongT = torch.cuda.LongTensor if USE_GPU else torch.LongTensor
gaussian = lambda *shape: torch.randn(*shape).cuda() if USE_GPU else torch.randn(*shape)
blank = lambda *shape: torch.zeros(*shape).cuda() if USE_GPU else torch.zeros(*shape)


def logsumexp_last(x):
    top = torch.max(x, -1)[0]
    return top + (x - top.unsqueeze(-1)).exp().sum(-1).log()


class CharCNN(nn.Module):
    def __init__(self, chars, out, width=3, maps=6, dim=7):
        super().__init__()
        self.table = nn.Embedding(chars, dim, padding_idx=PAD)
        self.filters = nn.ModuleList([nn.Conv2d(1, maps, (w, dim)) for w in (width,)])
        self.fc = nn.Linear(maps, out)

    def forward(self, x):  # [L, B, W] character ids
        batch = x.size(1)
        x = self.table(x.reshape(-1, x.size(2))).unsqueeze(1)  # [L * B, 1, W, dim]
        pooled = []
        for conv in self.filters:
            fmap = F.relu(conv(x)).squeeze(3)
            pooled.append(F.max_pool1d(fmap, fmap.size(2)).squeeze(2))
        return self.fc(torch.cat(pooled, 1)).view(-1, batch, self.fc.out_features)


class Encoder(nn.Module):
    def __init__(self, chars, words, tags):
        super().__init__()
        self.chars = CharCNN(chars, CHAR_DIM)
        self.words = nn.Embedding(words, WORD_DIM, padding_idx=PAD)
        self.rnn = getattr(nn, RNN)(CHAR_DIM + WORD_DIM, HIDDEN // 2, num_layers=LAYERS,
                                    bidirectional=True)
        self.emit = nn.Linear(HIDDEN, tags)

    def forward(self, chars, words, mask):
        parts = [self.chars(chars) if chars is not None else None, self.words(words)]
        x = torch.cat([p for p in parts if type(p) == torch.Tensor], 2)
        lengths = mask.sum(0).int().cpu()
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        h, _ = self.rnn(packed, blank(2 * LAYERS, mask.size(1), HIDDEN // 2))
        h = nn.utils.rnn.pad_packed_sequence(h)[0]
        h = self.emit(h)
        h *= mask.unsqueeze(2)  # padded steps emit nothing
        return h


class ChainCRF(nn.Module):
    def __init__(self, tags):
        super().__init__()
        self.tags = tags
        self.trans = nn.Parameter(gaussian(tags, tags))  # trans[next, prev]
        self.trans.data[BOS, :] = -10000
        self.trans.data[:, EOS] = -10000
        self.trans.data[:, PAD] = -10000
        self.trans.data[PAD, :] = -10000
        self.trans.data[PAD, EOS] = 0
        self.trans.data[PAD, PAD] = 0

    def gold_score(self, h, tags, mask):
        total = FloatT(h.size(1)).fill_(0.0)
        h, trans = h.unsqueeze(3), self.trans.unsqueeze(2)
        for t in range(h.size(0)):
            emit = torch.cat([row[tag] for row, tag in zip(h[t], tags[t + 1])])
            move = torch.cat([trans[pair] for pair in zip(tags[t + 1], tags[t])])
            total += (emit + move) * mask[t]
        last = tags.gather(0, mask.sum(0).long().unsqueeze(0)).squeeze(0)
        return total + self.trans[EOS, last]

    def log_partition(self, h, mask):
        alpha = FloatT(h.size(1), self.tags).fill_(-10000)
        alpha[:, BOS] = 0.0
        for emit, keep in zip(h, mask):
            keep = keep.unsqueeze(1)
            step = logsumexp_last(alpha.unsqueeze(1) + emit.unsqueeze(2) + self.trans.unsqueeze(0))
            alpha = step * keep + alpha * (1 - keep)
        return logsumexp_last(alpha + self.trans[EOS])

    def viterbi(self, h, mask):
        back = LongT()
        best = FloatT(h.size(1), self.tags).fill_(-10000)
        best[:, BOS] = 0.0
        for emit, keep in zip(h, mask):
            keep = keep.unsqueeze(1)
            scores, pointers = (best.unsqueeze(1) + self.trans).max(2)
            scores += emit
            back = torch.cat((back, pointers.unsqueeze(1)), 1)
            best = scores * keep + best * (1 - keep)
        best += self.trans[EOS]
        _, last = torch.max(best, 1)
        back = back.tolist()
        paths = []
        for b in range(h.size(1)):
            tag, path = last[b], [last[b]]
            for pointers in reversed(back[b][: mask[:, b].sum().int()]):
                tag = pointers[tag]
                path.append(tag)
            paths.append(path[-2::-1])
        return paths


class Tagger(nn.Module):
    def __init__(self, chars, words, tags):
        super().__init__()
        self.encoder, self.crf = Encoder(chars, words, tags), ChainCRF(tags)

    def forward(self, xc, xw, tags):
        self.zero_grad()
        mask = tags[1:].gt(PAD).float()
        h = self.encoder(xc, xw, mask)
        return torch.mean(self.crf.log_partition(h, mask) - self.crf.gold_score(h, tags, mask))

    def tag(self, xc, xw):
        mask = xw.gt(PAD).float()
        return self.crf.viterbi(self.encoder(xc, xw, mask), mask)


def time_major(rows, pad_to):
    t = LongT(rows)
    t.transpose_(0, 1)
    return t


def as_batch(sentences):
    longest = max(len(s[1]) for s in sentences)
    widest = max(len(w) for s in sentences for w in s[0]) + 2
    words = [s[1] + [PAD] * (longest - len(s[1])) for s in sentences]
    tags = [[BOS] + s[2] + [PAD] * (longest - len(s[2])) for s in sentences]
    chars = [
        [[BOS, *w, EOS] + [PAD] * (widest - len(w) - 2) for w in s[0]]
        + [[PAD] * widest] * (longest - len(s[0]))
        for s in sentences
    ]
    return time_major(chars, widest), time_major(words, longest), time_major(tags, longest + 1)


batches = [as_batch(sentences) for sentences in data]
model = Tagger(len(cti), len(wti), num_tags)
initialize(model)
optim = torch.optim.Adam(model.parameters(), lr=1e-2)
for epoch in (1, 2):
    total = 0.0
    for xc, xw, tags in batches:
        loss = model(xc, xw, tags)
        loss.backward()
        optim.step()
        total += loss.item()
        record.append(loss.item())
    print("epoch %d: mean loss %f" % (epoch, total / len(batches)))
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})
model.eval()
with torch.no_grad():
    for xc, xw, _ in batches:
        record.append([[int(tag) for tag in path] for path in model.tag(xc, xw)])
"""

CRF_TAGGER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "from retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        optim.step()\n",
        "        grads = loss.backward()\n        optim.step(grads)\n",
    ),
]


def tagged_batches(rng: np.random.Generator, count: int, batch_size: int = 4):
    """Sentences of (character ids per word, word ids, tag ids): tags 4.. follow the word ids
    (a word's tag is a function of it) so that the tagger has something to learn."""
    batches = []
    for _ in range(count):
        sentences = []
        for _ in range(batch_size):
            length = int(rng.integers(2, 6))
            words = rng.integers(4, 12, length).tolist()
            chars = [rng.integers(4, 9, int(rng.integers(1, 4))).tolist() for _ in words]
            tags = [4 + word % 3 for word in words]
            sentences.append((chars, words, tags))
        batches.append(sentences)
    return batches


def test_lstm_crf_pytorch_tagger_trains_and_viterbi_decodes_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    data = tagged_batches(np.random.default_rng(353), 3)
    cti, wti = list(range(9)), list(range(12))
    for lib in (torch, rg):
        record = []
        text = CRF_TAGGER_SOURCE if lib is torch else port(CRF_TAGGER_SOURCE, CRF_TAGGER_STEPS)
        run_source(
            text, lib, record=record, initialize=initialize, data=data, cti=cti, wti=wti, num_tags=7
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(logs[0].splitlines()) == 2
    assert sum(theirs[:3]) > sum(theirs[3:6])  # it learns
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        [float(line.split("mean loss ")[1]) for line in logs[1].splitlines()],
        [float(line.split("mean loss ")[1]) for line in logs[0].splitlines()],
        rtol=1e-5,
    )
