# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
HarshTrivedi/packing-unpacking-pytorch-minimal-tutorial's ``pad_packed_demo.py`` as written (its
long comments of example values left out): three character sequences numbered by a vocabulary
with ``<pad>`` at 0, ``seq_lengths = LongTensor(list(map(len, vectorized_seqs)))``, a padded batch
made by ``Variable(torch.zeros((len(vectorized_seqs), seq_lengths.max()))).long()`` (a size tuple
holding a 0-d tensor) and filled row by row by ``seq_tensor[idx, :seqlen] = LongTensor(seq)``
(0-d tensors as slice bounds), the batch sorted by ``seq_lengths.sort(0, descending=True)`` and
``seq_tensor[perm_idx]``, embedded, packed by ``pack_padded_sequence(embedded_seq_tensor,
seq_lengths.cpu().numpy(), batch_first=True)`` (the lengths a NumPy array), run through a
``batch_first`` ``LSTM`` and unpacked by ``pad_packed_sequence``, and ``print(ht[-1])``; the
names come from ``from torch import LongTensor``, ``from torch.nn import Embedding, LSTM`` and
``from torch.autograd import Variable``.

The script only runs forward; the test then differentiates the sum of its final states and its
unpacked outputs with respect to the embedding and the LSTM (through the packing, the sort and
the padding) in both libraries. ``initialize`` gives the port torch's initial weights (two lines
added after the modules are built); the port changes only the import lines.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

PAD_PACKED_DEMO_SOURCE = """
import torch
from torch import LongTensor
from torch.nn import Embedding, LSTM
from torch.autograd import Variable
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

## We want to run LSTM on a batch of 3 character sequences ['long_str', 'tiny', 'medium']
#
#     Step 1: Construct Vocabulary
#     Step 2: Load indexed data (list of instances, where each instance is list of character indices)
#     Step 3: Make Model
#  *  Step 4: Pad instances with 0s till max length sequence
#  *  Step 5: Sort instances by sequence length in descending order
#  *  Step 6: Embed the instances
#  *  Step 7: Call pack_padded_sequence with embeded instances and sequence lengths
#  *  Step 8: Forward with LSTM
#  *  Step 9: Call unpack_padded_sequences if required / or just pick last hidden vector
#  *  Summary of Shape Transformations

# We want to run LSTM on a batch following 3 character sequences
seqs = ['long_str',  # len = 8
        'tiny',      # len = 4
        'medium']    # len = 6


## Step 1: Construct Vocabulary ##
##------------------------------##
# make sure <pad> idx is 0
vocab = ['<pad>'] + sorted([char for seq in seqs for char in seq])
# => ['<pad>', '_', 'd', 'e', 'g', 'i', 'l', 'm', 'n', 'o', 'r', 's', 't', 'u', 'y']


## Step 2: Load indexed data (list of instances, where each instance is list of character indices) ##
##-------------------------------------------------------------------------------------------------##
vectorized_seqs = [[vocab.index(tok) for tok in seq]for seq in seqs]


## Step 3: Make Model ##
##--------------------##
embed = Embedding(len(vocab), 4) # embedding_dim = 4
lstm = LSTM(input_size=4, hidden_size=5, batch_first=True) # input_dim = 4, hidden_dim = 5
initialize(embed)
initialize(lstm)


## Step 4: Pad instances with 0s till max length sequence ##
##--------------------------------------------------------##

# get the length of each seq in your batch
seq_lengths = LongTensor(list(map(len, vectorized_seqs)))
# seq_lengths => [ 8, 4,  6]
# batch_sum_seq_len: 8 + 4 + 6 = 18
# max_seq_len: 8

seq_tensor = Variable(torch.zeros((len(vectorized_seqs), seq_lengths.max()))).long()

for idx, (seq, seqlen) in enumerate(zip(vectorized_seqs, seq_lengths)):
    seq_tensor[idx, :seqlen] = LongTensor(seq)
# seq_tensor.shape : (batch_size X max_seq_len) = (3 X 8)


## Step 5: Sort instances by sequence length in descending order ##
##---------------------------------------------------------------##

seq_lengths, perm_idx = seq_lengths.sort(0, descending=True)
seq_tensor = seq_tensor[perm_idx]
# seq_tensor.shape : (batch_size X max_seq_len) = (3 X 15)


## Step 6: Embed the instances ##
##-----------------------------##

embedded_seq_tensor = embed(seq_tensor)
# embedded_seq_tensor.shape : (batch_size X max_seq_len X embedding_dim) = (3 X 8 X 4)


## Step 7: Call pack_padded_sequence with embeded instances and sequence lengths ##
##-------------------------------------------------------------------------------##

packed_input = pack_padded_sequence(embedded_seq_tensor, seq_lengths.cpu().numpy(), batch_first=True)
# packed_input.data.shape : (batch_sum_seq_len X embedding_dim) = (18 X 4)
#
# packed_input.batch_sizes => [ 3,  3,  3,  3,  2,  2,  1,  1]


## Step 8: Forward with LSTM ##
##---------------------------##

packed_output, (ht, ct) = lstm(packed_input)
# packed_output.data.shape : (batch_sum_seq_len X hidden_dim) = (33 X 5)

# packed_output.batch_sizes => [ 3,  3,  3,  3,  2,  2,  1,  1] (same as packed_input.batch_sizes)


## Step 9: Call unpack_padded_sequences if required / or just pick last hidden vector ##
##------------------------------------------------------------------------------------##

# unpack your output if required
output, input_sizes = pad_packed_sequence(packed_output, batch_first=True)
# output.shape : ( batch_size X max_seq_len X hidden_dim) = (3 X 18 X 4)

# Or if you just want the final hidden state?
print(ht[-1])
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
            names[k] for k in ("embed", "lstm", "packed_input", "packed_output")
        )
        record = [
            names["seq_tensor"],
            names["perm_idx"],
            packed_input.data,
            packed_input.batch_sizes,
        ]
        record += [
            packed_output.data,
            names["output"],
            names["input_sizes"],
            names["ht"],
            names["ct"],
        ]
        loss = names["ht"].sum() + (names["output"] * lib.arange(1.0, 6.0)).sum()
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
    assert theirs[3].tolist() == [3, 3, 3, 3, 2, 2, 1, 1]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
