"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a bidirectional LSTM encoder over packed batches and an attention decoder trained a few steps on
the toy reversal task with random teacher forcing, then decoded by beam search, against torch's
run of the same code from the same weights, batches and draws.

- A program written here in the style of IBM/pytorch-seq2seq (its encoder, attention decoder
  and top-k decoder): ``pack_padded_sequence``/``pad_packed_sequence`` through
  ``nn.utils.rnn``, the two directions' states put side by side by ``torch.cat([h[0:n:2],
  h[1:n:2]], 2)``, dot attention by ``torch.bmm`` with ``F.softmax(..., dim=1)`` and
  ``F.tanh``, the teacher-forcing coin ``random.random() < ratio`` (Python's stream, seeded
  alike), greedy symbols by ``topk(1)[1]`` and the NumPy length bookkeeping ``((lengths > t) &
  ended) != 0`` over ``best.data.eq(EOS).cpu().view(-1).numpy()``, ``param.data.uniform_``,
  ``module.zero_grad()``, a summed ``nn.NLLLoss(ignore_index=0)`` under ``optim.Adam``; then a
  beam search: ``tensor.repeat`` inflation of the states and the memory, ``torch.Tensor(b * k,
  1).fill_(-float('inf'))`` with ``index_fill_``, the in-place ``scores += log_probs`` on the
  inflated scores, ``topk`` over the flattened ``(batch, k * V)`` scores, ``flat % V`` and
  ``flat // V``, parents by ``index_select`` of the hidden states, ``masked_fill_`` of
  finished beams with ``-inf`` through ``.data``; and the backtracking: ``nonzero()`` rows,
  item assignment of ended beams into ``index_select`` copies and a ``torch.zeros``
  placeholder, the final re-sort by ``totals.topk(k)`` and ``j.item()``.

Compared against torch: the losses, greedy sequences and lengths of every step, the weights,
and the beams (sequences, scores, lengths, last hidden states). ``initialize(...)`` gives the
port torch's initial weights. The lines a port changes: the ``import`` lines and the gradient
lines.
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

SEQ2SEQ_SOURCE = r"""
import random

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
import torch.optim as optim

PAD, SOS, EOS, VOCAB = 0, 1, 2, 10


def side_by_side(state):
    # (2 * layers, batch, h) of a bidirectional RNN -> (layers, batch, 2h)
    return torch.cat([state[0 : state.size(0) : 2], state[1 : state.size(0) : 2]], 2)


class Encoder(nn.Module):
    def __init__(self, emb=6, hidden=5):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, emb)
        self.rnn = nn.LSTM(emb, hidden, batch_first=True, bidirectional=True)

    def forward(self, tokens, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True)
        memory, (h, c) = self.rnn(packed)
        memory, _ = nn.utils.rnn.pad_packed_sequence(memory, batch_first=True)
        return memory, (side_by_side(h), side_by_side(c))


class AttentionDecoder(nn.Module):
    def __init__(self, emb=6, hidden=10, max_len=7):
        super().__init__()
        self.hidden, self.max_len = hidden, max_len
        self.embed = nn.Embedding(VOCAB, emb)
        self.rnn = nn.LSTM(emb, hidden, batch_first=True)
        self.combine = nn.Linear(2 * hidden, hidden)
        self.out = nn.Linear(hidden, VOCAB)

    def step(self, tokens, state, memory):
        batch, steps = tokens.size()
        out, state = self.rnn(self.embed(tokens), state)
        scores = torch.bmm(out, memory.transpose(1, 2))
        weights = F.softmax(scores.view(-1, memory.size(1)), dim=1).view(batch, steps, -1)
        mixed = torch.cat((torch.bmm(weights, memory), out), dim=2)
        out = F.tanh(self.combine(mixed.view(-1, 2 * self.hidden)))
        return F.log_softmax(self.out(out), dim=1).view(batch, steps, -1), state

    def forward(self, memory, state, targets=None, teacher_forcing=0.0):
        batch = memory.size(0)
        forced = targets is not None and random.random() < teacher_forcing
        steps = self.max_len if targets is None else targets.size(1) - 1
        token = targets[:, :1] if targets is not None else torch.LongTensor([[SOS]] * batch)
        outputs, chosen = [], []
        lengths = np.array([steps] * batch)
        for t in range(steps):
            log_probs, state = self.step(token, state, memory)
            outputs.append(log_probs.squeeze(1))
            best = outputs[-1].topk(1)[1]
            chosen.append(best)
            ended = best.data.eq(EOS).cpu().view(-1).numpy()
            lengths[((lengths > t) & ended) != 0] = len(chosen)
            token = targets[:, t + 1 : t + 2] if forced else best
        return outputs, state, {"sequence": chosen, "length": lengths.tolist()}


def beam_search(decoder, memory, state, k):
    batch, steps = memory.size(0), decoder.max_len
    first_of = (torch.LongTensor(range(batch)) * k).view(-1, 1)  # each sentence's first beam
    # k consecutive copies of every sentence's states and memory
    state = tuple(h.repeat(1, 1, k).view(h.size(0), batch * k, -1) for h in state)
    memory = memory.repeat(1, k, 1).view(batch * k, memory.size(1), -1)
    scores = torch.Tensor(batch * k, 1).fill_(-float("inf"))
    scores.index_fill_(0, torch.LongTensor([b * k for b in range(batch)]), 0.0)  # one live beam
    token = torch.transpose(torch.LongTensor([[SOS] * batch * k]), 0, 1)
    history = []
    for _ in range(steps):
        log_probs, state = decoder.step(token, state, memory)
        scores = scores.repeat(1, VOCAB)
        scores += log_probs.squeeze(1)
        best, flat = scores.view(batch, -1).topk(k, dim=1)
        token = (flat % VOCAB).view(batch * k, 1)
        parent = (flat // VOCAB + first_of.expand_as(flat)).view(batch * k)
        scores = best.view(batch * k, 1)
        state = tuple(h.index_select(1, parent) for h in state)
        history.append((scores.clone(), parent, token, state[0]))
        finished = token.data.eq(EOS)
        if finished.nonzero().dim() > 0:  # a finished beam grows no further
            scores.data.masked_fill_(finished, -float("inf"))
    return backtrack(history, batch, k, first_of)


def backtrack(history, batch, k, first_of):
    # follow the parents back from the last step; a beam that ended earlier takes the place
    # of the worst hypothesis still open in its sentence
    final, order = history[-1][0].view(batch, k).topk(k)
    totals = final.clone()
    lengths = [[len(history)] * k for _ in range(batch)]
    last_hidden = torch.zeros(history[-1][3].size())
    ended_count = [0] * batch
    pointer = (order + first_of.expand_as(order)).view(batch * k)
    symbols = []
    for t in range(len(history) - 1, -1, -1):
        step_scores, parent, token, hidden = history[t]
        here = token.index_select(0, pointer)
        if t == len(history) - 1:
            last_hidden[:] = hidden.index_select(1, pointer)
        pointer = parent.index_select(0, pointer)
        for row in reversed(token.data.squeeze(1).eq(EOS).nonzero()):
            i = int(row[0])
            b = i // k
            slot = k - ended_count[b] % k - 1
            ended_count[b] += 1
            at = b * k + slot
            pointer[at] = parent[i]
            here[at, :] = token[i]
            last_hidden[:, at, :] = hidden[:, i, :].data
            totals[b, slot] = step_scores[i, 0]
            lengths[b][slot] = t + 1
        symbols.append(here)
    totals, resort = totals.topk(k)
    lengths = [[lengths[b][j.item()] for j in resort[b, :]] for b in range(batch)]
    resort = (resort + first_of.expand_as(resort)).view(batch * k)
    sequences = [step.index_select(0, resort).view(batch, k, -1) for step in reversed(symbols)]
    last_hidden = last_hidden.index_select(1, resort).view(-1, batch, k, last_hidden.size(2))
    return sequences, totals, lengths, last_hidden


encoder, decoder = Encoder(), AttentionDecoder()
for module in (encoder, decoder):
    for param in module.parameters():
        param.data.uniform_(-0.1, 0.1)
    initialize(module)
optimizer = optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=0.01)
nll = nn.NLLLoss(ignore_index=PAD)
for sources, lengths, targets in batches:
    targets = torch.LongTensor(targets)
    memory, state = encoder(torch.LongTensor(sources), lengths)
    outputs, _, info = decoder(memory, state, targets, teacher_forcing=0.5)
    loss = 0
    for t, log_probs in enumerate(outputs):
        loss += nll(log_probs.contiguous().view(targets.size(0), -1), targets[:, t + 1])
    encoder.zero_grad()
    decoder.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append([s.view(-1).tolist() for s in info["sequence"]])
    record.append(info["length"])
for module in (encoder, decoder):
    record.append({name: t.detach().numpy() for name, t in module.state_dict().items()})

with torch.no_grad():
    sources, lengths, _ = batches[-1]
    memory, state = encoder(torch.LongTensor(sources), lengths)
    sequences, totals, beam_lengths, hidden = beam_search(decoder, memory, state, 3)
record.append([step.reshape(-1).tolist() for step in sequences])
record.append(totals.numpy())
record.append(beam_lengths)
record.append(hidden.numpy())
"""

SEQ2SEQ_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch.nn import functional as F\n", "from retrograd.nn import functional as F\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def reversal_batches(rng: np.random.Generator, count: int, batch_size: int = 4):
    """Batches of the reversal task: sources sorted by decreasing length (as
    ``pack_padded_sequence`` wants them), targets ``SOS + reversed source + EOS`` padded with 0."""
    batches = []
    for _ in range(count):
        lengths = sorted(rng.integers(2, 6, batch_size).tolist(), reverse=True)
        sources, targets = [], []
        for length in lengths:
            tokens = rng.integers(3, 10, length).tolist()
            sources.append(tokens + [0] * (lengths[0] - length))
            target = [1] + tokens[::-1] + [2]
            targets.append(target + [0] * (lengths[0] + 2 - len(target)))
        batches.append((sources, lengths, targets))
    return batches


def test_ibm_seq2seq_trains_with_teacher_forcing_and_beam_searches_as_torch():
    initialize, records = initializer(), []
    batches = reversal_batches(np.random.default_rng(352), 5)
    torch.manual_seed(352)  # torch's initial weights, which the port loads
    for lib in (torch, rg):
        record = []
        random.seed(352)  # the teacher forcing coins
        text = SEQ2SEQ_SOURCE if lib is torch else port(SEQ2SEQ_SOURCE, SEQ2SEQ_STEPS)
        run_source(text, lib, record=record, initialize=initialize, batches=batches)
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 5 * 3 + 6
    assert min(min(lengths) for lengths in theirs[-2]) < 7  # beams ended by EOS, backtracked
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
