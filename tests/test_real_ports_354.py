# ruff: noqa: E501, W293  (the programs are kept as their authors wrote them: long lines, blank lines with spaces)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
byte-pair encoding driving a tied-softmax GRU language model trained with hand-written label
smoothing, against torch's run of the same code from the same weights and text.

- karpathy/minbpe's ``BasicTokenizer`` (``minbpe/base.py``'s ``get_stats``, ``merge`` and
  ``Tokenizer``, ``minbpe/basic.py``), pure Python, trains the merges and encodes the lines;
- cocaer/simpleNMT's ``LabelSmoothingLoss`` (``src/utils/labelsmoothing.py``: ``x.data.clone()``
  then ``fill_`` and ``scatter_(1, target.data.unsqueeze(1), self.confidence)`` into the target
  distribution of ``nn.KLDivLoss(reduction='sum')``) and NougatCA/SPT-Code's
  ``LabelSmoothingCrossEntropyLoss`` (``sources/utils/label_smoothing.py``: ``torch.zeros_like``
  under ``torch.no_grad()``, ``-true_dist * pred`` summed and averaged).

What it exercises beyond them: the test's model, which embeds each line's BPE ids by an
``nn.Embedding`` whose weight the output ``nn.Linear`` shares (the tied softmax of ELMo-style
language models), packs the variable-length lines by ``pack_sequence(..., enforce_sorted=False)``,
runs an ``nn.GRU`` over the packed batch, unpacks with ``pad_packed_sequence(batch_first=True)``,
and selects the real positions with a boolean mask from ``pad_sequence(..., padding_value=-1)``;
greedy generation decodes the ids back to text through the tokenizer. The tokenizer's save/load
and ``render_token`` helpers are left out. ``initialize(...)`` gives the port torch's initial
weights. The lines changed: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

BPE_LM_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

# -- minbpe/base.py --------------------------------------------------------------------------------
def get_stats(ids, counts=None):
    """
    Given a list of integers, return a dictionary of counts of consecutive pairs
    Example: [1, 2, 3, 1, 2] -> {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    Optionally allows to update an existing dictionary of counts
    """
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]): # iterate consecutive elements
        counts[pair] = counts.get(pair, 0) + 1
    return counts


def merge(ids, pair, idx):
    """
    In the list of integers (ids), replace all consecutive occurrences
    of pair with the new integer token idx
    Example: ids=[1, 2, 3, 1, 2], pair=(1, 2), idx=4 -> [4, 3, 4]
    """
    newids = []
    i = 0
    while i < len(ids):
        # if not at the very last position AND the pair matches, replace it
        if ids[i] == pair[0] and i < len(ids) - 1 and ids[i+1] == pair[1]:
            newids.append(idx)
            i += 2
        else:
            newids.append(ids[i])
            i += 1
    return newids

class Tokenizer:
    """Base class for Tokenizers"""

    def __init__(self):
        # default: vocab size of 256 (all bytes), no merges, no patterns
        self.merges = {} # (int, int) -> int
        self.pattern = "" # str
        self.special_tokens = {} # str -> int, e.g. {'<|endoftext|>': 100257}
        self.vocab = self._build_vocab() # int -> bytes

    def train(self, text, vocab_size, verbose=False):
        # Tokenizer can train a vocabulary of size vocab_size from text
        raise NotImplementedError

    def encode(self, text):
        # Tokenizer can encode a string into a list of integers
        raise NotImplementedError

    def decode(self, ids):
        # Tokenizer can decode a list of integers into a string
        raise NotImplementedError

    def _build_vocab(self):
        # vocab is simply and deterministically derived from merges
        vocab = {idx: bytes([idx]) for idx in range(256)}
        for (p0, p1), idx in self.merges.items():
            vocab[idx] = vocab[p0] + vocab[p1]
        for special, idx in self.special_tokens.items():
            vocab[idx] = special.encode("utf-8")
        return vocab

# -- minbpe/basic.py -------------------------------------------------------------------------------
class BasicTokenizer(Tokenizer):

    def __init__(self):
        super().__init__()

    def train(self, text, vocab_size, verbose=False):
        assert vocab_size >= 256
        num_merges = vocab_size - 256

        # input text preprocessing
        text_bytes = text.encode("utf-8") # raw bytes
        ids = list(text_bytes) # list of integers in range 0..255

        # iteratively merge the most common pairs to create new tokens
        merges = {} # (int, int) -> int
        vocab = {idx: bytes([idx]) for idx in range(256)} # int -> bytes
        for i in range(num_merges):
            # count up the number of times every consecutive pair appears
            stats = get_stats(ids)
            # find the pair with the highest count
            pair = max(stats, key=stats.get)
            # mint a new token: assign it the next available id
            idx = 256 + i
            # replace all occurrences of pair in ids with idx
            ids = merge(ids, pair, idx)
            # save the merge
            merges[pair] = idx
            vocab[idx] = vocab[pair[0]] + vocab[pair[1]]
            # prints
            if verbose:
                print(f"merge {i+1}/{num_merges}: {pair} -> {idx} ({vocab[idx]}) had {stats[pair]} occurrences")

        # save class variables
        self.merges = merges # used in encode()
        self.vocab = vocab   # used in decode()

    def decode(self, ids):
        # given ids (list of integers), return Python string
        text_bytes = b"".join(self.vocab[idx] for idx in ids)
        text = text_bytes.decode("utf-8", errors="replace")
        return text

    def encode(self, text):
        # given a string text, return the token ids
        text_bytes = text.encode("utf-8") # raw bytes
        ids = list(text_bytes) # list of integers in range 0..255
        while len(ids) >= 2:
            # find the pair with the lowest merge index
            stats = get_stats(ids)
            pair = min(stats, key=lambda p: self.merges.get(p, float("inf")))
            # subtle: if there are no more merges available, the key will
            # result in an inf for every single pair, and the min will be
            # just the first pair in the list, arbitrarily
            # we can detect this terminating case by a membership check
            if pair not in self.merges:
                break # nothing else can be merged anymore
            # otherwise let's merge the best pair (lowest merge index)
            idx = self.merges[pair]
            ids = merge(ids, pair, idx)
        return ids

# -- cocaer/simpleNMT src/utils/labelsmoothing.py --------------------------------------------------
class LabelSmoothingLoss(nn.Module):
    "Implement label smoothing."
    def __init__(self, size, smoothing=0.0):
        super(LabelSmoothingLoss, self).__init__()
        self.criterion = nn.KLDivLoss(reduction='sum')
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.size = size
        self.true_dist = None
        
    def forward(self, x, target):
        assert x.size(1) == self.size
        x = F.log_softmax(x,dim=-1)
        true_dist = x.data.clone()
        true_dist.fill_(self.smoothing / (self.size - 2))
        true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)

        self.true_dist = true_dist
        return self.criterion(x, true_dist) / x.size(0)

# -- NougatCA/SPT-Code sources/utils/label_smoothing.py --------------------------------------------
class LabelSmoothingCrossEntropyLoss(nn.Module):

    def __init__(self, n_class, smoothing=0.0, dim=-1):
        super(LabelSmoothingCrossEntropyLoss, self).__init__()
        self.confidence = 1.0 - smoothing
        self.smoothing = smoothing
        self.n_class = n_class
        self.dim = dim

    def forward(self, pred, target):
        assert 0 <= self.smoothing < 1
        pred = pred.log_softmax(dim=self.dim)
        with torch.no_grad():
            true_dist = torch.zeros_like(pred)
            true_dist.fill_(self.smoothing / (self.n_class - 1))
            true_dist.scatter_(1, target.data.unsqueeze(1), self.confidence)
        return torch.mean(torch.sum(-true_dist * pred, dim=self.dim))

# -- the test's tied-softmax language model --------------------------------------------------------
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence, pad_sequence

tokenizer = BasicTokenizer()
tokenizer.train(text, 256 + 24, verbose=True)
lines = [tokenizer.encode(line) for line in text.split("\\n")]
assert all(tokenizer.decode(ids) == line for ids, line in zip(lines, text.split("\\n")))
vocab_size = len(tokenizer.vocab)

class TiedGRULanguageModel(nn.Module):
    def __init__(self, vocab_size, dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.decoder = nn.Linear(dim, vocab_size)
        self.decoder.weight = self.embedding.weight  # the tied softmax

    def forward(self, sequences, hidden=None):
        packed = pack_sequence([self.embedding(s) for s in sequences], enforce_sorted=False)
        output, hidden = self.rnn(packed, hidden)
        output, lengths = pad_packed_sequence(output, batch_first=True)
        return self.decoder(output), lengths, hidden

model = TiedGRULanguageModel(vocab_size, 16)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
kl_smoothing = LabelSmoothingLoss(vocab_size, smoothing=0.1)
ce_smoothing = LabelSmoothingCrossEntropyLoss(vocab_size, smoothing=0.1)

for step in range(6):
    batch = [torch.tensor(lines[(2 * step + i) % len(lines)]) for i in range(3)]
    inputs = [ids[:-1] for ids in batch]
    targets = pad_sequence([ids[1:] for ids in batch], batch_first=True, padding_value=-1)
    logits, lengths, _ = model(inputs)
    real = targets != -1
    loss = kl_smoothing(logits[real], targets[real]) + 0.5 * ce_smoothing(logits[real], targets[real])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(lengths.tolist())
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
record.append(kl_smoothing.true_dist.numpy())

with torch.no_grad():
    ids = tokenizer.encode("the ")
    hidden = None
    logits, _, hidden = model([torch.tensor(ids)])
    for _ in range(8):
        ids.append(int(logits[0, -1].argmax()))
        logits, _, hidden = model([torch.tensor(ids[-1:])], hidden)
    record.append(tokenizer.decode(ids))
'''

BPE_LM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]

TEXT = """the cat sat on the mat
the dog sat on the log
a cat and a dog met on the mat
then the cat ran and the dog sat
the mat and the log are on the floor"""


def test_minbpe_tokens_drive_a_tied_gru_lm_with_label_smoothing_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    torch.manual_seed(354)  # torch's initial weights, which the port loads
    for lib in (torch, rg):
        record = []
        text = BPE_LM_SOURCE if lib is torch else port(BPE_LM_SOURCE, BPE_LM_STEPS)
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        run_source(text, lib, record=record, initialize=initialize, text=TEXT)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[0].count("merge ") == 24 and logs[1] == logs[0]
    assert theirs[-1].startswith("the ")
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
