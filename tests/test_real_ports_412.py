# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
GabrielMajeri/char-rnn-pytorch, a character-level RNN after Karpathy's min-char-rnn, as written:
``rnn.py``'s ``RNN`` (three ``nn.Parameter(torch.zeros(...))`` matrices filled by
``nn.init.xavier_normal_``, ``torch.tanh(hidden_state @ self.W_hh + x @ self.W_xh)``),
``main.py`` (the alphabet of ``string.printable`` numbered by ``itertools.count``, one-hot rows by
``zeros[index] = 1`` joined by ``torch.stack(tuple(map(one_hot_encode, map(char_to_index,
chars))))``, ``optim.RMSprop(net.parameters())`` at its defaults, ``F.cross_entropy`` against the
next characters, the hidden state of each batch position carried on by ``hidden_state.detach()``,
the running mean printed every thousand characters) and ``sample.py`` (the model reloaded by
``net.load_state_dict(torch.load(MODEL_SAVE_PATH))`` from a ``pathlib.Path``, ``net.eval()``, a
one-dimensional ``torch.randn(HIDDEN_SIZE)`` start state broadcast against the batch of seed
characters, ``pred_chars.argmax(axis=-1)`` and characters looked up by 0-d index tensors).

What stands in: the text (Tolstoy's "War and Peace" in the repository's instructions) is a
synthetic one of repeated phrases, written to ``input/warpeace_input.txt`` in the test's working
directory; ``BATCH_SIZE`` is 64. The three files run as one program: the ``from rnn import RNN``
lines go, ``main.py`` gains ``initialize(net)`` (the port starts from torch's draws), a
``record.append(loss)`` line and the one line that ``sample.py`` asks for and ``main.py`` lacks,
``torch.save(net.state_dict(), "char_rnn.pth")``; ``sample.py`` records the parameters it loads
and its prediction. The port changes the import lines naming ``torch`` and the gradient lines;
``torch.randn`` draws one stream in both runs.
"""

from __future__ import annotations

import random

import numpy as np

from real_ports import assert_records_agree, initializer, runs_with_draws

CHAR_RNN_SOURCE = """
# -- rnn.py ----------------------------------------------------------------------------------------
import torch
import torch.nn as nn


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.W_xh = nn.Parameter(torch.zeros(input_size, hidden_size))
        self.W_hh = nn.Parameter(torch.zeros(hidden_size, hidden_size))
        self.W_hy = nn.Parameter(torch.zeros(hidden_size, output_size))

        nn.init.xavier_normal_(self.W_xh)
        nn.init.xavier_normal_(self.W_hh)
        nn.init.xavier_normal_(self.W_hy)

    def forward(self, x, hidden_state):
        hidden_state = torch.tanh(hidden_state @ self.W_hh + x @ self.W_xh)
        y = hidden_state @ self.W_hy
        return y, hidden_state

# -- main.py ---------------------------------------------------------------------------------------
from itertools import count
import string

import numpy as np

import torch
import torch.nn.functional as F
import torch.optim as optim


ALPHABET = string.printable
ALPHABET_SIZE = len(ALPHABET) + 1

HIDDEN_SIZE = 16

BATCH_SIZE = 64

indices = count()
lookup = {char: next(indices) for char in ALPHABET}
unknown_char_index = next(indices)


def char_to_index(char):
    return lookup.get(char, unknown_char_index)


def one_hot_encode(index):
    zeros = torch.zeros(ALPHABET_SIZE)
    zeros[index] = 1
    return zeros


try:
    with open("input/warpeace_input.txt") as fin:
        input_text = fin.read()
except FileNotFoundError as e:
    print(e)
    print("Please download the input data from 'https://cs.stanford.edu/people/karpathy/char-rnn/'")
    print("Place it in the 'input' directory")
    exit(1)

input_length = len(input_text)


net = RNN(input_size=ALPHABET_SIZE,
          hidden_size=HIDDEN_SIZE,
          output_size=ALPHABET_SIZE)
initialize(net)

optimizer = optim.RMSprop(net.parameters())

hidden_state = torch.zeros(BATCH_SIZE, HIDDEN_SIZE)

total_loss = 0.0

print("Starting to train char RNN")
i = 0
last_print = 0
while i < input_length:
    if i + BATCH_SIZE >= input_length:
        # TODO: pad last batch to `BATCH_SIZE`
        break

    start, end = i, i + BATCH_SIZE
    chars = input_text[start:end]
    next_chars = input_text[start + 1:end + 1]

    chars_tensor = torch.stack(
        tuple(map(one_hot_encode, map(char_to_index, chars))))
    next_chars_index = tuple(map(char_to_index, next_chars))
    next_chars_tensor = torch.tensor(next_chars_index)

    optimizer.zero_grad()

    pred_chars, hidden_state = net(chars_tensor, hidden_state)

    loss = F.cross_entropy(pred_chars, next_chars_tensor)
    loss.backward()

    loss = loss.item()
    total_loss += loss
    record.append(loss)

    if i - last_print > 1000:
        print(total_loss / i)
        last_print = i

    optimizer.step()

    hidden_state = hidden_state.detach()

    i += BATCH_SIZE

torch.save(net.state_dict(), "char_rnn.pth")

# -- sample.py -------------------------------------------------------------------------------------
from itertools import count
from pathlib import Path
import string

import torch


ALPHABET = string.printable
ALPHABET_SIZE = len(ALPHABET) + 1

HIDDEN_SIZE = 16

BATCH_SIZE = 1024
MODEL_SAVE_PATH = Path("./char_rnn.pth")


indices = count()
lookup = {char: next(indices) for char in ALPHABET}
unknown_char_index = next(indices)


def char_to_index(char):
    return lookup.get(char, unknown_char_index)


def one_hot_encode(index):
    zeros = torch.zeros(ALPHABET_SIZE)
    zeros[index] = 1
    return zeros


net = RNN(input_size=ALPHABET_SIZE, hidden_size=HIDDEN_SIZE, output_size=ALPHABET_SIZE)

if MODEL_SAVE_PATH.exists():
    print("Loading trained model from file")
    net.load_state_dict(torch.load(MODEL_SAVE_PATH))
else:
    raise Exception("Please train RNN first")

net.eval()
record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})

seed = "What do you believe is going to happen?"

chars = seed
chars_tensor = torch.stack(tuple(map(one_hot_encode, map(char_to_index, chars))))
torch.manual_seed(2)
hidden_state = torch.randn(HIDDEN_SIZE)
pred_chars, hidden_state = net(chars_tensor, hidden_state)


pred_chars_indices = pred_chars.argmax(axis=-1)
pred_chars = [ALPHABET[idx] for idx in pred_chars_indices]
print("".join(pred_chars))
record.append("".join(pred_chars))
"""

CHAR_RNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "import torch\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "import string\n\nimport torch\n\n\nALPHABET",
        "import string\n\nimport retrograd as torch\n\n\nALPHABET",
    ),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def synthetic_text(rng: np.random.Generator, length: int) -> str:
    """Phrases drawn at random and joined into lines: text with something to learn."""
    phrases = ["the prince said ", "natasha smiled. ", "war and peace\n", "Pierre, who was it? "]
    text = ""
    while len(text) < length:
        text += phrases[int(rng.integers(len(phrases)))]
    return text[:length]


def test_char_rnn_trains_on_one_hot_batches_with_rmsprop_and_samples_as_torch(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "warpeace_input.txt").write_text(
        synthetic_text(np.random.default_rng(412), 64 * 30 + 5)
    )
    random.seed(412)
    records, logs = runs_with_draws(
        CHAR_RNN_SOURCE, CHAR_RNN_STEPS, capsys, 412, initialize=initializer()
    )
    theirs, ours = records
    assert len(theirs) == 30 + 2 and theirs[-5] < theirs[0]  # it learns
    theirs_printed, ours_printed = (log.splitlines() for log in logs)
    assert len(theirs_printed) == 4 and ours_printed[::2] == theirs_printed[::2]
    np.testing.assert_allclose(float(ours_printed[1]), float(theirs_printed[1]), rtol=1e-5)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
