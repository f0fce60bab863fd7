"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a neural vocoder on mu-law labels.

- A WaveRNN-style vocoder written here in the style of fatchord/WaveRNN: a conditioning network
  of 1-wide ``Conv1d``\\ s (``bias=False``) and ``BatchNorm1d`` in residual blocks, a
  nearest-neighbour stretch by ``unsqueeze(-1).unsqueeze(3).repeat(1, 1, 1, f, 1, t).view``,
  ``Conv2d(1, 1, (1, 2s+1), padding=(0, s))`` smoothers whose weight is ``.data.fill_``\\ ed, a
  ``register_buffer('step', torch.zeros(1, dtype=torch.long))`` incremented in place by
  ``forward`` and read by ``.data.item()``, ``flatten_parameters``, GRUs started from
  ``torch.zeros(1, b, h, device=...)``; sampling under ``torch.no_grad()`` with ``nn.GRUCell``\\ s
  whose ``.data`` are set to the GRUs' ``weight_ih_l0.data``..., ``torch.as_tensor(...,
  device=...)``, padding by writes into zeros, folding into overlapping batches by
  ``folded[k] = x[:, a:b, :]``, ``torch.distributions.Categorical(probs).sample()``,
  ``.cpu().numpy()``, a NumPy cross-fade and mu-law expansion, progress through
  ``sys.stdout.write``; the parameter count by ``filter(lambda p: p.requires_grad, ...)`` and
  ``np.prod(p.size())``; batches cut at NumPy-drawn offsets (``torch.tensor(labels).long()``,
  labels to floats by ``x.float()``); training that sets ``lr`` through ``for g in
  optimizer.param_groups``, a 4-d ``F.cross_entropy`` of ``logits.transpose(1,
  2).unsqueeze(-1)``, ``clip_grad_norm_``'s total read by ``np.isnan`` and ``float``.

Compared against torch: the running loss, gradient norm and step buffer of each step, the
weights, both generated waves (returned and given to ``save_wav``, a stand-in that keeps them),
``model.training`` after generation and the printed log. The lines a port changes: the
``import`` lines and the gradient lines; the Categorical's sample is drawn by inverse CDF from
one shared stream in both runs (each library's own sampler draws from its own generator);
torch's weights are loaded into the port's.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

WAVERNN_SOURCE = r"""import math
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


# --- mu-law labels ---------------------------------------------------------------------
def labels_to_unit(labels, bits):
    return 2 * labels / (2**bits - 1.0) - 1.0


def mu_compress(wave, levels):
    mu = levels - 1
    squashed = np.sign(wave) * np.log1p(mu * np.abs(wave)) / np.log1p(mu)
    return np.floor((squashed + 1) / 2 * mu + 0.5)


def mu_expand(unit, levels):
    mu = levels - 1
    return np.sign(unit) * ((1 + mu) ** np.abs(unit) - 1) / mu


def progress(i, total, width=10):
    filled = i * width // total
    sys.stdout.write("\r[" + "#" * filled + "." * (width - filled) + f"] {i}/{total}")


# --- conditioning network --------------------------------------------------------------
class Residual(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(dims, dims, kernel_size=1, bias=False), nn.BatchNorm1d(dims), nn.ReLU(),
            nn.Conv1d(dims, dims, kernel_size=1, bias=False), nn.BatchNorm1d(dims),
        )

    def forward(self, x):
        return x + self.body(x)


class Repeat2d(nn.Module):
    # nearest-neighbour stretch of the last two axes by integer factors
    def __init__(self, along_time, along_freq=1):
        super().__init__()
        self.along_time, self.along_freq = along_time, along_freq

    def forward(self, x):
        b, c, h, w = x.size()
        x = x.unsqueeze(-1).unsqueeze(3).repeat(1, 1, 1, self.along_freq, 1, self.along_time)
        return x.view(b, c, h * self.along_freq, w * self.along_time)


class Upsampler(nn.Module):
    def __init__(self, n_mels, scales, hidden, aux_dims, pad, blocks):
        super().__init__()
        total = int(np.prod(scales))
        self.crop = pad * total
        self.context = nn.Sequential(
            nn.Conv1d(n_mels, hidden, kernel_size=2 * pad + 1, bias=False),
            nn.BatchNorm1d(hidden), nn.ReLU(),
            *[Residual(hidden) for _ in range(blocks)],
            nn.Conv1d(hidden, aux_dims, kernel_size=1),
        )
        self.context_stretch = Repeat2d(total)
        self.smooth = nn.ModuleList()
        for s in scales:
            conv = nn.Conv2d(1, 1, kernel_size=(1, 2 * s + 1), padding=(0, s), bias=False)
            conv.weight.data.fill_(1.0 / (2 * s + 1))  # start as a moving average
            self.smooth.extend([Repeat2d(s), conv])

    def forward(self, mels):
        aux = self.context_stretch(self.context(mels).unsqueeze(1)).squeeze(1)
        up = mels.unsqueeze(1)
        for layer in self.smooth:
            up = layer(up)
        up = up.squeeze(1)[:, :, self.crop : -self.crop]
        return up.transpose(1, 2), aux.transpose(1, 2)


# --- the autoregressive vocoder ---------------------------------------------------------
class Vocoder(nn.Module):
    def __init__(self, n_mels, hidden, bits, pad, scales, hop):
        super().__init__()
        self.classes, self.pad, self.hop, self.hidden = 2**bits, pad, hop, hidden
        self.quarter = hidden // 4  # four slices of the aux features feed four layers
        self.upsample = Upsampler(n_mels, scales, hidden, 4 * self.quarter, pad, blocks=1)
        self.inp = nn.Linear(1 + n_mels + self.quarter, hidden)
        self.gru_a = nn.GRU(hidden, hidden, batch_first=True)
        self.gru_b = nn.GRU(hidden + self.quarter, hidden, batch_first=True)
        self.fc_a = nn.Linear(hidden + self.quarter, hidden)
        self.fc_b = nn.Linear(hidden + self.quarter, hidden)
        self.logits = nn.Linear(hidden, self.classes)
        self.register_buffer("step", torch.zeros(1, dtype=torch.long))
        trainable = filter(lambda p: p.requires_grad, self.parameters())
        print("parameters: %d" % sum(int(np.prod(p.size())) for p in trainable))

    def aux_slices(self, aux):
        q = self.quarter
        return [aux[..., k * q : (k + 1) * q] for k in range(4)]

    def head(self, x, a3, a4):
        x = F.relu(self.fc_a(torch.cat([x, a3], dim=-1)))
        x = F.relu(self.fc_b(torch.cat([x, a4], dim=-1)))
        return self.logits(x)

    def forward(self, prev, mels):
        device = self.logits.weight.device
        for rnn in (self.gru_a, self.gru_b):
            rnn.flatten_parameters()
        self.step += 1
        h0 = torch.zeros(1, prev.size(0), self.hidden, device=device)
        up, aux = self.upsample(mels)
        a1, a2, a3, a4 = self.aux_slices(aux)
        x = self.inp(torch.cat([prev.unsqueeze(-1), up, a1], dim=2))
        x = x + self.gru_a(x, h0)[0]
        x = x + self.gru_b(torch.cat([x, a2], dim=2), h0)[0]
        return self.head(x, a3, a4)

    @staticmethod
    def as_cell(gru):
        cell = nn.GRUCell(gru.input_size, gru.hidden_size)
        cell.weight_ih.data = gru.weight_ih_l0.data
        cell.weight_hh.data = gru.weight_hh_l0.data
        cell.bias_ih.data = gru.bias_ih_l0.data
        cell.bias_hh.data = gru.bias_hh_l0.data
        return cell

    @staticmethod
    def pad_time(x, before, after):
        b, t, c = x.size()
        out = torch.zeros(b, before + t + after, c, device=x.device)
        out[:, before : before + t, :] = x
        return out

    def fold(self, x, target, overlap):
        length, span = x.size(1), target + 2 * overlap
        folds = max(1, math.ceil((length - overlap) / (target + overlap)))
        x = self.pad_time(x, 0, folds * (target + overlap) + overlap - length)
        out = torch.zeros(folds, span, x.size(2), device=x.device)
        for k in range(folds):
            out[k] = x[:, k * (target + overlap) : k * (target + overlap) + span, :]
        return out

    @staticmethod
    def unfold(y, overlap):
        folds, span = y.shape
        hop = span - overlap
        quiet = overlap // 2
        ramp = np.linspace(-1, 1, overlap - quiet)
        fade_in = np.concatenate([np.zeros(quiet), np.sqrt(0.5 * (1 + ramp))])
        fade_out = np.concatenate([np.ones(quiet), np.sqrt(0.5 * (1 - ramp))])
        y[:, :overlap] *= fade_in
        y[:, -overlap:] *= fade_out
        wave = np.zeros(folds * hop + overlap)
        for k in range(folds):
            wave[k * hop : k * hop + span] += y[k]
        return wave

    def generate(self, mels, path, batched, target=6, overlap=2):
        self.eval()
        device = self.logits.weight.device
        cell_a, cell_b = self.as_cell(self.gru_a), self.as_cell(self.gru_b)
        samples = []
        with torch.no_grad():
            mels = torch.as_tensor(mels, dtype=torch.float32, device=device)
            length = (mels.size(-1) - 1) * self.hop
            mels = self.pad_time(mels.transpose(1, 2), self.pad, self.pad).transpose(1, 2)
            up, aux = self.upsample(mels)
            if batched:
                up, aux = self.fold(up, target, overlap), self.fold(aux, target, overlap)
            batch, steps, _ = up.size()
            h_a = torch.zeros(batch, self.hidden, device=device)
            h_b = torch.zeros(batch, self.hidden, device=device)
            x = torch.zeros(batch, 1, device=device)
            slices = self.aux_slices(aux)
            for t in range(steps):
                a1, a2, a3, a4 = (s[:, t, :] for s in slices)
                x = self.inp(torch.cat([x, up[:, t, :], a1], dim=1))
                h_a = cell_a(x, h_a)
                x = x + h_a
                h_b = cell_b(torch.cat([x, a2], dim=1), h_b)
                x = x + h_b
                probs = F.softmax(self.head(x, a3, a4), dim=1)
                drawn = torch.distributions.Categorical(probs).sample()
                sample = labels_to_unit(drawn.float(), math.log2(self.classes))
                samples.append(sample)
                x = sample.unsqueeze(-1)
                if t % 8 == 0:
                    progress(t, steps)
        out = torch.stack(samples).transpose(0, 1).cpu().numpy().astype(np.float64)
        out = mu_expand(out, self.classes)
        out = self.unfold(out, overlap) if batched else out[0]
        out = out[:length]
        out[-2 * self.hop :] *= np.linspace(1, 0, 2 * self.hop)
        save_wav(out, path)
        self.train()
        return out


def make_batch(items):
    frames = hp.seq_len // hp.hop + 2 * hp.pad
    starts = [np.random.randint(0, mel.shape[-1] - frames - 2 * hp.pad - 1) for mel, _ in items]
    mels = np.stack([mel[:, s : s + frames] for (mel, _), s in zip(items, starts)])
    labels = np.stack([
        lab[(s + hp.pad) * hp.hop : (s + hp.pad) * hp.hop + hp.seq_len + 1]
        for (_, lab), s in zip(items, starts)
    ])
    labels = torch.tensor(labels, dtype=torch.int32).long()
    prev = labels_to_unit(labels[:, :-1].float(), hp.bits)
    return prev, labels[:, 1:], torch.tensor(mels.astype(np.float32))


# two RAW-mode steps on mu-law labels of drawn waves, then sampling unbatched and folded
model = Vocoder(n_mels=6, hidden=8, bits=hp.bits, pad=hp.pad, scales=(2, 2), hop=hp.hop)
initialize(model)
optimizer = torch.optim.Adam(params=model.parameters())
for group in optimizer.param_groups:
    group["lr"] = 2e-3
clips = []
for _ in range(3):
    wave = np.tanh(0.4 * np.random.randn(12 * hp.hop))
    clips.append((np.random.rand(6, 12).astype(np.float32), mu_compress(wave, 2**hp.bits)))
total = 0.0
for i, (prev, target, mels) in enumerate([make_batch(clips[:2]), make_batch(clips[1:])], 1):
    scores = model(prev, mels).transpose(1, 2).unsqueeze(-1)  # (batch, classes, time, 1)
    loss = F.cross_entropy(scores, target.unsqueeze(-1))
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if np.isnan(norm):
        print("gradient norm is NaN")
    optimizer.step()
    total += loss.item()
    record.append([total / i, float(norm), model.step.data.item()])
record.append(params_of(model).copy())
mels = torch.tensor(np.random.rand(1, 6, 6).astype(np.float32))
record.append(model.generate(mels, "single.wav", batched=False))
record.append(model.generate(mels, "folded.wav", batched=True, target=6, overlap=2))
for name, kept in save_wav.saved:
    record.extend([name, kept])
record.append(model.training)
"""

WAVERNN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("    optimizer.zero_grad()\n", ""),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    (
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)",
    ),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def shared_categorical(lib, seed: int):
    """``lib``'s ``Categorical`` whose ``sample`` draws by inverse CDF from a NumPy stream
    seeded by ``seed``."""
    rng = np.random.default_rng(seed)

    class Categorical(lib.distributions.Categorical):
        def sample(self, sample_shape=()):
            drawn = lib.tensor(
                rng.uniform(size=tuple(self.probs.shape[:-1])), dtype=self.probs.dtype
            )
            return (self.probs.cumsum(-1) < drawn.unsqueeze(-1)).sum(-1)

    return Categorical


def make_save_wav(lib):
    """``save_wav`` that keeps what it is given (one list per run)."""
    saved = []

    def save_wav(x, path):
        saved.append((str(path), np.array(x, copy=True)))

    save_wav.saved = saved
    return save_wav


def test_wavernn_trains_and_generates_as_torch(capsys, monkeypatch):
    """Two training steps (the running loss, the clipped gradient's norm, the step buffer)
    and the weights after them; generation unbatched and folded into overlapping batches
    (the waves returned and those given to ``save_wav``), and the printed log."""
    for lib in (torch, rg):
        monkeypatch.setattr(lib.distributions, "Categorical", shared_categorical(lib, 33402))
    hp = SimpleNamespace(seq_len=12, hop=4, pad=1, bits=5)
    (theirs, ours), logs = runs_with_draws(
        WAVERNN_SOURCE, WAVERNN_STEPS, capsys, 33401, initialize=initializer(),
        params_of=params_of, hp=hp, make_save_wav=make_save_wav,
    )  # fmt: skip
    assert logs[1] == logs[0] and logs[0].startswith("parameters: ")
    assert theirs[1][2] == 2 and theirs[-5] == "single.wav"
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
