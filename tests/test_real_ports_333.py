"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
SpecAugment and CTC.

- An augmentation and CTC training program written here in the style of ESPnet2's
  ``specaug``/``ctc`` layers and torchaudio's greedy CTC decoder: a ``pad_list`` by
  ``xs[0].new(n, max_len, *rest).fill_(value)`` and row writes; masks along time or frequency
  from ``torch.randint(..., device=...)`` widths and starts (``max(1, D - widths.max())`` of an
  int and a 0-d tensor, ``(start <= arange) * (arange < start + width)`` then ``any(dim=1)``,
  ``masked_fill`` when the input requires grad and ``masked_fill_`` otherwise, ``spec.mean()``
  as the fill, a 4-d input through ``view``); a time warp whose centre and warped length are
  0-d tensors from ``torch.randint(...)[0]`` used as slice bounds and in ``F.interpolate``'s
  ``size`` (bicubic, ``align_corners=False``), written back in place (``x[:, :, :w] = left``)
  or by ``torch.cat`` under autograd, per utterance through ``pad_list`` when lengths differ;
  ``extra_repr`` in ``str(module)``; a CTC head (``nn.CTCLoss(reduction="none",
  zero_infinity=True)`` with an infeasible utterance, targets by ``torch.cat([ys[i, :n] for i,
  n in enumerate(lens)])``, ``.to(device=..., dtype=...)``, ``F.dropout``) over a BLSTM
  trained with Adam; a greedy decoder (``torch.unique_consecutive(ids, dim=-1)``, labels
  indexed by 0-d tensors).

Compared against torch: the reprs, the augmented features of each step, the losses and weights,
a warp's gradient, the transcripts and argmaxes. The lines a port changes: the ``import`` lines
and the gradient lines; ``torch.randn`` and ``torch.randint`` draw one shared stream in both
runs; torch's weights are loaded into the port's.
"""

from __future__ import annotations

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

ESPNET_SOURCE = r"""import math

import torch
from torch.nn import functional as F


def pad_list(seqs, fill):
    longest = max(s.size(0) for s in seqs)
    out = seqs[0].new(len(seqs), longest, *seqs[0].size()[1:]).fill_(fill)
    for row, seq in enumerate(seqs):
        out[row, : seq.size(0)] = seq
    return out


AXES = {"time": 1, "freq": 2}


def random_bands(spec, axis, widths, count, zero_fill):
    shape = spec.size()
    if spec.dim() == 4:  # (batch, channel, time, freq): fold the channels into the batch
        spec = spec.view(-1, *spec.shape[2:])
    batch, extent = spec.shape[0], spec.shape[axis]
    width = torch.randint(widths[0], widths[1], (batch, count), device=spec.device)
    width = width.unsqueeze(2)
    begin = torch.randint(0, max(1, extent - width.max()), (batch, count), device=spec.device)
    begin = begin.unsqueeze(2)
    grid = torch.arange(extent, device=spec.device)[None, None, :]
    hit = ((begin <= grid) * (grid < begin + width)).any(dim=1)
    hit = hit.unsqueeze(2) if axis == 1 else hit.unsqueeze(1)
    fill = 0.0 if zero_fill else spec.mean()
    if spec.requires_grad:
        spec = spec.masked_fill(hit, fill)
    else:
        spec = spec.masked_fill_(hit, fill)
    return spec.view(*shape)


class BandMask(torch.nn.Module):
    def __init__(self, axis="time", widths=(0, 10), count=2, zero_fill=True):
        super().__init__()
        self.axis_name, self.axis = axis, AXES[axis]
        self.widths, self.count, self.zero_fill = widths, count, zero_fill

    def extra_repr(self):
        return f"axis={self.axis_name}, widths={self.widths}, count={self.count}"

    def forward(self, spec, lengths=None):
        return random_bands(spec, self.axis, self.widths, self.count, self.zero_fill), lengths


class RelativeBandMask(BandMask):
    # widths as fractions of the axis' extent
    def forward(self, spec, lengths=None):
        extent = spec.shape[self.axis]
        low = max(0, math.floor(extent * self.widths[0]))
        high = min(extent, math.floor(extent * self.widths[1]))
        if high <= low:
            return spec, lengths
        return random_bands(spec, self.axis, (low, high), self.count, self.zero_fill), lengths


def warp_time(feats, window, mode="bicubic"):
    shape = feats.size()
    if feats.dim() == 3:
        feats = feats[:, None]
    steps = feats.shape[2]
    if steps - window <= window:
        return feats.view(*shape)
    pivot = torch.randint(window, steps - window, (1,))[0]
    moved = torch.randint(pivot - window, pivot + window, (1,))[0] + 1
    head = F.interpolate(feats[:, :, :pivot], (moved, feats.shape[3]), mode=mode,
                         align_corners=False)
    tail = F.interpolate(feats[:, :, pivot:], (steps - moved, feats.shape[3]), mode=mode,
                         align_corners=False)
    if feats.requires_grad:
        feats = torch.cat([head, tail], dim=-2)
    else:
        feats[:, :, :moved] = head
        feats[:, :, moved:] = tail
    return feats.view(*shape)


class WarpTime(torch.nn.Module):
    def __init__(self, window=3, mode="bicubic"):
        super().__init__()
        self.window, self.mode = window, mode

    def extra_repr(self):
        return f"mode={self.mode}, window={self.window}"

    def forward(self, feats, lengths=None):
        if lengths is None or all(n == lengths[0] for n in lengths):
            return warp_time(feats, self.window, self.mode), lengths
        one_by_one = [
            warp_time(feats[i][None, : lengths[i]], self.window, self.mode)[0]
            for i in range(feats.size(0))
        ]
        return pad_list(one_by_one, 0.0), lengths


class Augment(torch.nn.Sequential):
    def forward(self, feats, lengths=None):
        for stage in self:
            feats, lengths = stage(feats, lengths)
        return feats, lengths


class CTCHead(torch.nn.Module):
    def __init__(self, vocab_size, in_dim, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        self.proj = torch.nn.Linear(in_dim, vocab_size)
        self.criterion = torch.nn.CTCLoss(reduction="none", zero_infinity=True)

    def forward(self, hidden, hidden_lens, labels, label_lens):
        logits = self.proj(F.dropout(hidden, p=self.dropout)).transpose(0, 1)
        log_probs = logits.log_softmax(2)
        flat = torch.cat([labels[i, :n] for i, n in enumerate(label_lens)])
        per_utt = self.criterion(log_probs, flat, hidden_lens, label_lens)
        loss = per_utt.sum() / log_probs.size(1)
        return loss.to(device=hidden.device, dtype=hidden.dtype)

    def log_probs(self, hidden):
        return F.log_softmax(self.proj(hidden), dim=2)

    def best_ids(self, hidden):
        return torch.argmax(self.proj(hidden), dim=2)


def greedy_transcript(emission, symbols, blank=0):
    path = torch.unique_consecutive(torch.argmax(emission, dim=-1), dim=-1)
    text = "".join(symbols[i] for i in path if i != blank)
    return text.replace("|", " ").strip().split()
"""

ESPNET_DRIVER = r"""
# three utterances of different lengths, the third too short for its transcript (its loss is
# zeroed), augmented then encoded by a BLSTM and trained three Adam steps
symbols = ["_", "a", "b", "c", "d", "|"]
augment = Augment(
    WarpTime(window=3),
    BandMask("freq", widths=(0, 4), count=2),
    BandMask("time", widths=(0, 5), count=2),
    RelativeBandMask("time", widths=(0.0, 0.2), count=1, zero_fill=False),
)
record.append(str(augment).splitlines())
lengths = torch.tensor([14, 10, 3])
feats = pad_list([torch.randn(int(n), 8) for n in lengths], 0.0)
targets = [torch.tensor([1, 2, 3]), torch.tensor([2, 2, 5, 4]), torch.tensor([1, 3, 2])]
labels, label_lens = pad_list(targets, -1), torch.tensor([3, 4, 3])
encoder = torch.nn.LSTM(8, 6, batch_first=True, bidirectional=True)
head = CTCHead(len(symbols), 12)
initialize(encoder)
initialize(head)
optimizer = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=1e-2)
for step in range(3):
    augmented, _ = augment(feats.clone(), lengths)
    record.append(augmented.numpy())
    loss = head(encoder(augmented)[0], lengths, labels, label_lens)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(encoder, head))

# equal lengths and an input that requires grad: one warp for the batch by torch.cat, the
# masks out of place; a 4-d input folds its channels
batch = torch.randn(2, 12, 5).requires_grad_()
out, _ = augment(batch)
(out * out).sum().backward()
record.append(out.detach().numpy())
record.append(batch.grad.numpy())
record.append(random_bands(torch.randn(2, 2, 6, 4), 2, (1, 3), 1, True).numpy())

with torch.no_grad():
    hidden = encoder(feats)[0]
    emissions = head.log_probs(hidden)
record.append([greedy_transcript(emissions[i, : lengths[i]], symbols) for i in range(3)])
record.append(head.best_ids(hidden).numpy())
"""

ESPNET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    optimizer.zero_grad()\n", ""),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
    ("(out * out).sum().backward()", "grads = (out * out).sum().backward()"),
    ("batch.grad.numpy()", "batch.grad(grads).numpy()"),
]


def test_espnet_spec_augment_and_ctc_train_and_decode_as_torch(capsys):
    """The modules' reprs, the augmented features of each step, the CTC losses (one
    utterance infeasible) and weights after three steps, the batched warp and its gradient,
    and the greedy transcripts."""
    (theirs, ours), _ = runs_with_draws(
        ESPNET_SOURCE + ESPNET_DRIVER, ESPNET_STEPS, capsys, 33301,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0][0] == "Augment("
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
