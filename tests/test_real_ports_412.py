"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of GabrielMajeri/char-rnn-pytorch (a character-level RNN after Karpathy's min-char-rnn),
run under torch and, ported, under retrograd from the same weights and draws.

Its surface: a cell of three raw ``nn.Parameter(torch.zeros(...))`` matrices filled by
``nn.init.xavier_normal_`` and stepped by ``torch.tanh(h @ W + x @ U)``; an alphabet of
``string.printable`` numbered by ``itertools.count`` with an unknown-character slot; one-hot
rows written by ``row[index] = 1`` and joined by ``torch.stack(tuple(map(...)))``;
``optim.RMSprop`` at its defaults on ``F.cross_entropy`` against the next characters, the hidden
state carried across batches by ``.detach()`` and a running mean printed now and then; the
weights saved by ``torch.save(state_dict)`` and reloaded into a fresh model by
``load_state_dict(torch.load(path))`` from a ``pathlib.Path``; ``eval()``, a one-dimensional
``torch.randn(hidden)`` start state broadcast against a batch of characters,
``argmax(axis=-1)`` and characters looked up by 0-d index tensors.

The port changes the import lines and the gradient lines; ``torch.randn`` draws one stream in
both runs, and ``initialize`` gives the port torch's initial weights.
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

CHAR_RNN_SOURCE = """
import itertools
import pathlib
import string

import torch
from torch import nn, optim
from torch.nn import functional as F

CHARS = string.printable
numbering = itertools.count()
char_ids = {c: next(numbering) for c in CHARS}
UNKNOWN = next(numbering)           # anything outside string.printable
VOCAB = UNKNOWN + 1
WIDTH, STRIDE = 12, 32
CHECKPOINT = pathlib.Path("weights") / "tiny_rnn.pt"


class TinyRNN(nn.Module):
    # the cell written out by hand: no nn.RNN, three bare matrices
    def __init__(self, n_in, width, n_out):
        super().__init__()
        self.U = nn.Parameter(torch.zeros(n_in, width))
        self.W = nn.Parameter(torch.zeros(width, width))
        self.V = nn.Parameter(torch.zeros(width, n_out))
        for matrix in (self.U, self.W, self.V):
            nn.init.xavier_normal_(matrix)

    def forward(self, x, h):
        h = torch.tanh(h @ self.W + x @ self.U)
        return h @ self.V, h


def encode(text):
    def one_hot(k):
        row = torch.zeros(VOCAB)
        row[k] = 1
        return row
    return torch.stack(tuple(map(one_hot, (char_ids.get(c, UNKNOWN) for c in text))))


with open("corpus.txt") as f:
    corpus = f.read()

model = TinyRNN(VOCAB, WIDTH, VOCAB)
initialize(model)
opt = optim.RMSprop(model.parameters())
h = torch.zeros(STRIDE, WIDTH)
seen, running = 0, 0.0
for start in range(0, len(corpus) - STRIDE - 1, STRIDE):
    window = corpus[start:start + STRIDE + 1]
    targets = torch.tensor([char_ids.get(c, UNKNOWN) for c in window[1:]])
    opt.zero_grad()
    logits, h = model(encode(window[:-1]), h)
    loss = F.cross_entropy(logits, targets)
    loss.backward()
    opt.step()
    h = h.detach()          # keep the state, cut the graph
    seen += 1
    running += loss.item()
    record.append(loss.item())
    if seen % 4 == 0:
        print(f"{seen} {running / seen:.6f}")

CHECKPOINT.parent.mkdir(exist_ok=True)
torch.save(model.state_dict(), CHECKPOINT)

# sampling side: a fresh model, the weights read back from disk
reader = TinyRNN(VOCAB, WIDTH, VOCAB)
assert CHECKPOINT.exists()
reader.load_state_dict(torch.load(CHECKPOINT))
reader.eval()
record.append({k: v.detach().numpy() for k, v in reader.state_dict().items()})
prompt = "Where is the prince~"    # '~' is printable, so keep an unknown one too
prompt += "\\u00e9"
h0 = torch.randn(WIDTH)             # one state, broadcast over the prompt's rows
with torch.no_grad():
    scores, _ = reader(encode(prompt), h0)
guess = "".join(CHARS[k] if k < len(CHARS) else "?" for k in scores.argmax(axis=-1))
print(guess)
record.append(guess)
"""

CHAR_RNN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


def test_char_rnn_trains_on_one_hot_batches_with_rmsprop_and_samples_as_torch(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(412)
    phrases = ["the prince said ", "natasha smiled. ", "war and peace\n", "who was it? "]
    corpus = "".join(phrases[int(k)] for k in rng.integers(len(phrases), size=60))
    (tmp_path / "corpus.txt").write_text(corpus[: 32 * 16 + 2])
    records, logs = runs_with_draws(
        CHAR_RNN_SOURCE, CHAR_RNN_STEPS, capsys, 412, initialize=initializer()
    )
    theirs, ours = records
    assert len(theirs) == 16 + 2 and theirs[-3] < theirs[0]  # it learns
    theirs_printed, ours_printed = (log.splitlines() for log in logs)
    assert len(theirs_printed) == 5 and ours_printed[-1] == theirs_printed[-1]
    for mine, reference in zip(ours_printed[:-1], theirs_printed[:-1]):
        assert mine.split()[0] == reference.split()[0]
        np.testing.assert_allclose(float(mine.split()[1]), float(reference.split()[1]), rtol=1e-5)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
