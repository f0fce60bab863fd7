"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of HarshTrivedi/packing-unpacking-pytorch-minimal-tutorial's ``pad_packed_demo.py``, run
under torch and, ported, under retrograd from the same weights.

Its surface: sentences of unequal length numbered by a vocabulary with ``<pad>`` at 0, their
lengths in ``LongTensor(list(map(len, ...)))``, a padded batch made by
``Variable(torch.zeros((n, lengths.max()))).long()`` (a size tuple holding a 0-d tensor) and
filled row by row by ``batch[row, :n] = LongTensor(ids)`` (0-d tensors as slice bounds), the
batch sorted by ``lengths.sort(0, descending=True)`` and indexed by the permutation, embedded,
packed by ``pack_padded_sequence(x, lengths.cpu().numpy(), batch_first=True)`` (the lengths a
NumPy array), run through a ``batch_first`` ``LSTM``, unpacked by ``pad_packed_sequence`` and
``print(h_n[-1])`` (the repr naming ``SelectBackward0``); the names come from ``from torch import
LongTensor``, ``from torch.nn import Embedding, LSTM`` and ``from torch.autograd import
Variable``.

The script only runs forward; the test then differentiates the sum of its final states and its
unpacked outputs with respect to the embedding and the LSTM (through the packing, the sort and
the padding) in both libraries. ``initialize`` gives the port torch's initial weights; the port
changes only the import lines.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

PAD_PACKED_DEMO_SOURCE = """
import torch
from torch import LongTensor
from torch.autograd import Variable  # the pre-0.4 wrapper, still accepted
from torch.nn import LSTM, Embedding
from torch.nn.utils import rnn as rnn_utils

sentences = ["a cat sat", "the old dog barked at the moon", "birds sing", "rain fell all night"]
tokens = [line.split() for line in sentences]
words = ["<pad>"] + sorted({w for line in tokens for w in line})    # <pad> must stay id 0
ids = [[words.index(w) for w in line] for line in tokens]

emb = Embedding(len(words), 3)
rnn = LSTM(input_size=3, hidden_size=5, batch_first=True)
initialize(emb)
initialize(rnn)

lengths = LongTensor(list(map(len, ids)))
batch = Variable(torch.zeros((len(ids), lengths.max()))).long()
for row, (line, n) in enumerate(zip(ids, lengths)):
    batch[row, :n] = LongTensor(line)

# packing wants the longest first
lengths, order = lengths.sort(0, descending=True)
batch = batch[order]

vectors = emb(batch)
packed = rnn_utils.pack_padded_sequence(vectors, lengths.cpu().numpy(), batch_first=True)
packed_out, (h_n, c_n) = rnn(packed)
unpacked, out_lengths = rnn_utils.pad_packed_sequence(packed_out, batch_first=True)
print(h_n[-1])
"""

PAD_PACKED_DEMO_STEPS = [
    (
        "import torch\nfrom torch import LongTensor\n",
        "import retrograd as torch\nfrom retrograd import LongTensor\n",
    ),
]


def test_pad_packed_demo_sorts_packs_runs_and_unpacks_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    torch.manual_seed(413)  # torch's run draws the initial weights
    np.random.seed(413)
    for lib in (torch, rg):
        ported = port(PAD_PACKED_DEMO_SOURCE, PAD_PACKED_DEMO_STEPS).replace(
            "from torch.", "from retrograd."
        )
        text = PAD_PACKED_DEMO_SOURCE if lib is torch else ported
        names = run_source(text, lib, initialize=initialize)
        logs.append(capsys.readouterr().out)
        embed, lstm, packed_input, packed_output = (
            names[k] for k in ("emb", "rnn", "packed", "packed_out")
        )
        record = [
            names["batch"],
            names["order"],
            packed_input.data,
            packed_input.batch_sizes,
        ]
        record += [
            packed_output.data,
            names["unpacked"],
            names["out_lengths"],
            names["h_n"],
            names["c_n"],
        ]
        loss = names["h_n"].sum() + (names["unpacked"] * lib.arange(1.0, 6.0)).sum()
        weights = [embed.weight, *lstm.parameters()]
        if lib is torch:
            loss.backward()
            record += [w.grad for w in weights]
        else:
            grads = loss.backward()
            record += [w.grad(grads) for w in weights]
        records.append(
            [np.asarray(r.detach().numpy() if hasattr(r, "detach") else r) for r in record]
        )
    theirs, ours = records
    assert logs[0] == logs[1] and "grad_fn=<SelectBackward0>" in logs[0]
    assert theirs[3].tolist() == [4, 4, 3, 2, 1, 1, 1]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
