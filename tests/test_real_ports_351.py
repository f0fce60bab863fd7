"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
character-aware word embeddings and a character speller, trained a few steps against torch's run
of the same code from the same weights and sentences.

- A program written here in the style of the CS224N character-aware NMT assignment (a
  character CNN with a highway layer, and an LSTM character decoder): ``torch.LongTensor`` of
  nested lists of character ids and ``torch.transpose(t, 0, 1)``, ``torch.tensor(...,
  dtype=torch.long, device=...)`` and ``torch.t``, ``nn.Embedding(..., padding_idx=0)`` over a
  3-d index tensor, ``.view((a, b, c)).transpose(1, 2)`` into ``nn.Sequential(nn.Conv1d,
  nn.ReLU, nn.MaxPool1d(k))`` and ``.squeeze(2)``, the highway gate (``g * proj + (1 - g) *
  x``) inside a ``Sequential`` with ``nn.Dropout`` (run in ``eval()`` mode), the decoder's
  ``outputs, last = lstm(...)`` with ``last[-1]`` the cell state, ``nn.CrossEntropyLoss(
  ignore_index=0)`` over ``view((l * b))``, ``reshape(...).t().contiguous()``, and greedy
  spelling through ``torch.LongTensor([[start] * b])``, ``scores.argmax(dim=2)`` and
  ``.item()`` (a conditional expression that empties a word whenever a special character is
  chosen); Adam on both modules.

Compared against torch: the word ids, losses, weights, the embeddings and the spelled words, and
the log's length. ``initialize(...)`` gives the port torch's initial weights. The lines a port
changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

CHARACTER_AWARE_SOURCE = """
import numpy as np
import torch
import torch.nn as nn

WORD_CHARS = 12  # every word padded (or cut) to this many characters


class Vocabulary:
    def __init__(self):
        self.word_ids = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
        # characters: pad, start-of-word, end-of-word, unknown, then the alphabet
        self.char_ids = {"<pad>": 0, "{": 1, "}": 2, "<unk>": 3}
        for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'-":
            self.char_ids[ch] = len(self.char_ids)
        self.chars = {i: ch for ch, i in self.char_ids.items()}
        self.begin, self.end = self.char_ids["{"], self.char_ids["}"]

    def add(self, word):
        return self.word_ids.setdefault(word, len(self.word_ids))

    def spell(self, word):
        inner = [self.char_ids.get(ch, 3) for ch in word][: WORD_CHARS - 2]
        return [self.begin, *inner, self.end] + [0] * (WORD_CHARS - 2 - len(inner))

    def char_tensor(self, sents):
        # (sentence length, batch, WORD_CHARS); short sentences padded with empty words
        longest = np.max([len(s) for s in sents])
        rows = [[self.spell(w) for w in s] + [[0] * WORD_CHARS] * (longest - len(s)) for s in sents]
        return torch.transpose(torch.LongTensor(rows), 0, 1)

    def word_tensor(self, sents, device):
        longest = max(len(s) for s in sents)
        ids = [[self.word_ids.get(w, 3) for w in s] + [0] * (longest - len(s)) for s in sents]
        return torch.t(torch.tensor(ids, dtype=torch.long, device=device))


class Highway(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.transform = nn.Sequential(nn.Linear(size, size), nn.ReLU())
        self.carry = nn.Sequential(nn.Linear(size, size), nn.Sigmoid())

    def forward(self, x):
        gate = self.carry(x)
        return gate * self.transform(x) + (1 - gate) * x


class CharWordEmbedding(nn.Module):
    def __init__(self, vocab, word_size, char_size=10, width=4, dropout=0.3):
        super().__init__()
        self.char_size, self.word_size = char_size, word_size
        self.chars = nn.Embedding(len(vocab.char_ids), char_size, padding_idx=0)
        conv = nn.Sequential(
            nn.Conv1d(char_size, word_size, width), nn.ReLU(), nn.MaxPool1d(WORD_CHARS - width + 1)
        )
        self.pipeline = nn.Sequential(conv, Highway(word_size), nn.Dropout(dropout))

    def forward(self, char_ids):
        print(tuple(char_ids.shape))
        length, batch, chars = char_ids.shape
        x = self.chars(char_ids).view((length * batch, chars, self.char_size)).transpose(1, 2)
        per_word = self.pipeline[0](x).squeeze(2)
        return self.pipeline[2](self.pipeline[1](per_word)).view(length, batch, self.word_size)


class Speller(nn.Module):
    # an LSTM over characters started from a word's vector
    def __init__(self, vocab, hidden, char_size=10):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(len(vocab.char_ids), char_size, padding_idx=0)
        self.rnn = nn.LSTM(char_size, hidden)
        self.project = nn.Linear(hidden, len(vocab.char_ids))

    def forward(self, chars, state=None):
        outputs, last = self.rnn(self.embed(chars), state)  # last = (h_n, c_n)
        return self.project(outputs), (torch.unsqueeze(outputs[-1], 0), last[-1])

    def loss(self, chars, state):
        scores, _ = self.forward(chars[:-1], state)
        steps, batch, classes = scores.shape
        criterion = nn.CrossEntropyLoss(ignore_index=0)
        return criterion(scores.view((steps * batch, classes)), chars[1:].view((steps * batch)))

    def greedy(self, state, steps):
        batch = state[0].shape[1]
        current = torch.LongTensor([[self.vocab.begin] * batch])
        words = [""] * batch
        for _ in range(steps):
            scores, state = self.forward(current, state)
            current = scores.argmax(dim=2)
            for k in range(batch):
                code = current[0][k].item()
                # a special character ends nothing: it empties the word so far
                words[k] = words[k] + self.vocab.chars[code] if code > 3 else ""
        return words


vocab = Vocabulary()
for sent in corpus:
    for word in sent:
        vocab.add(word)
size = 8
embed = CharWordEmbedding(vocab, size)
speller = Speller(vocab, size)
initialize(embed)
initialize(speller)
embed.eval()  # (each library draws its own dropout masks)
optimizer = torch.optim.Adam([*embed.parameters(), *speller.parameters()], lr=0.01)
for step in range(3):
    batch = sorted(corpus[2 * step : 2 * step + 3], key=len, reverse=True)
    chars = vocab.char_tensor(batch)
    record.append(vocab.word_tensor(batch, device="cpu").numpy())
    vectors = embed(chars)
    length, n, width = chars.shape
    spelled = chars.reshape(length * n, width).t().contiguous()  # (chars, words)
    start = (vectors.view(1, length * n, size), torch.zeros(1, length * n, size))
    loss = speller.loss(spelled, start)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({name: t.detach().numpy() for name, t in embed.state_dict().items()})
record.append({name: t.detach().numpy() for name, t in speller.state_dict().items()})
with torch.no_grad():
    first = embed(vocab.char_tensor(corpus[:2]))[0]
    record.append(first.numpy())
    record.append(speller.greedy((first.unsqueeze(0), torch.zeros_like(first).unsqueeze(0)), 6))
"""

CHARACTER_AWARE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]

CORPUS = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog", "ran"],
    ["Colourless", "green", "ideas", "sleep", "furiously", "!"],
    ["time", "flies", "like", "an", "arrow"],
    ["fruit", "flies", "like", "a", "banana"],
    ["we", "saw", "her", "duck"],
    ["buffalo", "buffalo", "Buffalo"],
]


def test_cs224n_character_aware_embeddings_and_decoder_train_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    torch.manual_seed(351)  # torch's initial weights, which the port loads
    for lib in (torch, rg):
        record = []
        text = (
            CHARACTER_AWARE_SOURCE
            if lib is torch
            else port(CHARACTER_AWARE_SOURCE, CHARACTER_AWARE_STEPS)
        )
        corpus = [list(sent) for sent in CORPUS]
        run_source(text, lib, record=record, initialize=initialize, corpus=corpus)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1] == logs[0] and len(logs[0].splitlines()) == 4
    assert all(isinstance(word, str) for word in theirs[-1])
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
