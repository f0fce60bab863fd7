"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
byte-pair encoding driving a tied-softmax GRU language model trained with hand-written label
smoothing, against torch's run of the same code from the same weights and text.

- A program written here in the style of karpathy/minbpe's basic tokenizer (pure Python: pair
  counts, merges learned greedily and applied earliest-first) and of the label-smoothing losses
  of NMT and code-summarisation repositories (one by ``x.data.clone()`` then ``fill_`` and
  ``scatter_(1, gold.data.unsqueeze(1), 1 - eps)`` into the target of
  ``nn.KLDivLoss(reduction='sum')``, one by ``torch.zeros_like`` under ``torch.no_grad()`` and
  ``-target * log_probs`` summed and averaged).
- The language model embeds each line's ids by an ``nn.Embedding`` whose weight the output
  ``nn.Linear`` shares (a tied softmax), packs the variable-length lines by
  ``pack_sequence(..., enforce_sorted=False)``, runs an ``nn.GRU`` over the packed batch,
  unpacks with ``pad_packed_sequence(batch_first=True)``, and selects the real positions with a
  boolean mask from ``pad_sequence(..., padding_value=-1)``; greedy generation decodes the ids
  back to text.

Compared against torch: the losses and lengths, the weights, the smoothed target, the generated
text and the printed merges. ``initialize(...)`` gives the port torch's initial weights. The
lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

BPE_LM_SOURCE = """
import collections

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.utils import rnn as rnn_utils


# ---- byte-pair encoding ----------------------------------------------------------------
def pair_counts(ids):
    return collections.Counter(zip(ids, ids[1:]))


def replace_pair(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i : i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


class BytePairCodec:
    def __init__(self):
        self.merges = {}  # (left, right) -> new id, in the order learned
        self.pieces = {i: bytes([i]) for i in range(256)}

    def learn(self, text, size):
        ids = list(text.encode("utf-8"))
        for new_id in range(256, size):
            counts = pair_counts(ids)
            pair = max(counts, key=counts.get)  # (the first of equal counts, as max keeps it)
            ids = replace_pair(ids, pair, new_id)
            self.merges[pair] = new_id
            self.pieces[new_id] = self.pieces[pair[0]] + self.pieces[pair[1]]
            piece = self.pieces[new_id]
            print(f"merge {new_id - 255}: {pair} -> {new_id} {piece!r} x{counts[pair]}")

    def encode(self, text):
        ids = list(text.encode("utf-8"))
        while len(ids) > 1:
            # apply the earliest-learned merge present
            pair = min(pair_counts(ids), key=lambda p: self.merges.get(p, float("inf")))
            if pair not in self.merges:
                break
            ids = replace_pair(ids, pair, self.merges[pair])
        return ids

    def decode(self, ids):
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")


# ---- two ways of writing label smoothing -------------------------------------------------
class SmoothedKL(nn.Module):
    # KL divergence to a target that puts 1 - eps on the gold class
    def __init__(self, classes, eps):
        super().__init__()
        self.classes, self.eps = classes, eps
        self.kl = nn.KLDivLoss(reduction="sum")
        self.last_target = None

    def forward(self, logits, gold):
        log_probs = F.log_softmax(logits, dim=-1)
        target = log_probs.data.clone()
        target.fill_(self.eps / (self.classes - 2))
        target.scatter_(1, gold.data.unsqueeze(1), 1.0 - self.eps)
        self.last_target = target
        return self.kl(log_probs, target) / log_probs.size(0)


class SmoothedCE(nn.Module):
    def __init__(self, classes, eps):
        super().__init__()
        self.classes, self.eps = classes, eps

    def forward(self, logits, gold):
        log_probs = logits.log_softmax(dim=-1)
        with torch.no_grad():
            target = torch.zeros_like(log_probs)
            target.fill_(self.eps / (self.classes - 1))
            target.scatter_(1, gold.data.unsqueeze(1), 1.0 - self.eps)
        return torch.mean(torch.sum(-target * log_probs, dim=-1))


# ---- a GRU language model whose softmax shares the embedding ----------------------------
class TiedGRU(nn.Module):
    def __init__(self, vocab, width):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = nn.GRU(width, width, batch_first=True)
        self.head = nn.Linear(width, vocab)
        self.head.weight = self.embed.weight

    def forward(self, seqs, state=None):
        packed = rnn_utils.pack_sequence([self.embed(s) for s in seqs], enforce_sorted=False)
        out, state = self.rnn(packed, state)
        out, lengths = rnn_utils.pad_packed_sequence(out, batch_first=True)
        return self.head(out), lengths, state


codec = BytePairCodec()
codec.learn(text, 256 + 16)
lines = text.split("\\n")
encoded = [codec.encode(line) for line in lines]
assert [codec.decode(ids) for ids in encoded] == lines
vocab = len(codec.pieces)
model = TiedGRU(vocab, 12)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.03)
kl_loss, ce_loss = SmoothedKL(vocab, 0.1), SmoothedCE(vocab, 0.1)
for step in range(4):
    batch = [torch.tensor(encoded[(3 * step + i) % len(encoded)]) for i in range(3)]
    logits, lengths, _ = model([ids[:-1] for ids in batch])
    shifted = [ids[1:] for ids in batch]
    targets = rnn_utils.pad_sequence(shifted, batch_first=True, padding_value=-1)
    keep = targets != -1
    loss = kl_loss(logits[keep], targets[keep]) + 0.5 * ce_loss(logits[keep], targets[keep])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(list(lengths.tolist()))
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})
record.append(kl_loss.last_target.numpy())
with torch.no_grad():
    ids = codec.encode("a ")
    logits, _, state = model([torch.tensor(ids)])
    for _ in range(6):
        ids.append(int(logits[0, -1].argmax(-1)))
        logits, _, state = model([torch.tensor(ids[-1:])], state)
    record.append(codec.decode(ids))
"""

BPE_LM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]

TEXT = """a red fox ran by the old barn
the old dog slept by the barn door
a red hen and the old dog sat by the door
the fox saw the hen and the hen ran
by the barn the dog and the fox sat"""


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
    assert logs[0].count("merge ") == 16 and logs[1] == logs[0]
    assert theirs[-1].startswith("a ")
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
