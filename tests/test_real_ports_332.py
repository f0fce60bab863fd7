"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
speech separation in the time domain.

- A Dual-Path RNN separator written here in the style of JusperLee/Dual-Path-RNN-Pytorch: a
  strided ``Conv1d`` encoder after ``torch.unsqueeze(x, dim=1)``, a ``Decoder`` subclassing
  ``nn.ConvTranspose1d`` (``super().forward`` then ``torch.squeeze(..., dim=1)``), three
  normalisations chosen by name (a global layer norm by ``torch.mean(x, (1, 2),
  keepdim=True)`` with ``register_parameter(name, None)`` when not affine, a channel norm
  subclassing ``nn.LayerNorm`` and calling ``super().forward`` between ``torch.transpose``\\ s,
  ``nn.GroupNorm(1, dim)``), dual-path blocks whose RNNs are built by ``getattr(nn,
  rnn_type)(..., batch_first=True, dropout=0, bidirectional=True)`` over ``permute(...)
  .contiguous().view(...)``, half-overlapping chunks padded by ``torch.Tensor(torch.zeros(...))
  .type(x.type())`` and merged back by overlap-add, ``torch.chunk`` then ``torch.stack`` of the
  speakers, ``nn.PReLU``, a 1 x 1 ``nn.Conv2d``, ``nn.ModuleList``; the permutation-invariant
  SI-SNR loss (``torch.norm(dim=-1, keepdim=True)``, ``torch.log10``,
  ``itertools.permutations``, ``torch.max(..., dim=0)``); a trainer with ``getattr(torch.optim,
  name)``, ``clip_grad_norm_``, ``param_groups[0]['lr']`` in its log lines, validation under
  ``torch.no_grad()``, ``torch.save`` of the model's and the optimizer's state dicts,
  ``ReduceLROnPlateau`` stepped on the validation loss, ``torch.device('cpu')`` and ``.to``.

Compared against torch: the parameter count, the losses and learning rates of every epoch, the
weights after training and the separated signals. The lines a port changes: the ``import``
lines and the gradient lines; torch's weights are loaded into the port's and the mixtures come
from one shared stream.
"""

from __future__ import annotations

import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

DPRNN_SOURCE = r'''import itertools
import logging
import os

import torch
from torch import nn
from torch.nn import functional as F
from torch.optim import lr_scheduler

log = logging.getLogger("separation")


class GlobalNorm(nn.Module):
    """Normalise over channels and time together (one mean per utterance)."""

    def __init__(self, channels, eps=1e-5, affine=True):
        super().__init__()
        self.eps = eps
        if affine:
            self.gamma = nn.Parameter(torch.ones(channels, 1))
            self.beta = nn.Parameter(torch.zeros(channels, 1))
        else:
            self.register_parameter("gamma", None)
            self.register_parameter("beta", None)

    def forward(self, feats):
        mu = torch.mean(feats, (1, 2), keepdim=True)
        spread = torch.mean((feats - mu) ** 2, (1, 2), keepdim=True)
        normed = (feats - mu) / torch.sqrt(spread + self.eps)
        if self.gamma is None:
            return normed
        return self.gamma * normed + self.beta


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channel axis of a (batch, channels, time) tensor."""

    def forward(self, feats):
        feats = torch.transpose(feats, 1, 2)
        feats = super().forward(feats)
        return torch.transpose(feats, 1, 2)


def make_norm(kind, channels):
    if kind == "gln":
        return GlobalNorm(channels)
    if kind == "cln":
        return ChannelNorm(channels, elementwise_affine=True)
    return nn.GroupNorm(1, channels)


class WaveDecoder(nn.ConvTranspose1d):
    def forward(self, feats):
        wave = super().forward(feats)
        return torch.squeeze(wave, dim=1)


class DualPathBlock(nn.Module):
    def __init__(self, channels, hidden, rnn_type, norm):
        super().__init__()
        rnn = getattr(nn, rnn_type)
        self.local_rnn = rnn(channels, hidden, batch_first=True, dropout=0, bidirectional=True)
        self.global_rnn = rnn(channels, hidden, batch_first=True, dropout=0, bidirectional=True)
        self.local_proj = nn.Linear(2 * hidden, channels)
        self.global_proj = nn.Linear(2 * hidden, channels)
        self.local_norm = make_norm(norm, channels)
        self.global_norm = make_norm(norm, channels)

    def forward(self, chunks):  # (batch, channels, chunk_len, n_chunks)
        b, c, k, s = chunks.shape
        # along each chunk
        seq = chunks.permute(0, 3, 2, 1).contiguous().view(b * s, k, c)
        seq, _ = self.local_rnn(seq)
        seq = self.local_norm(self.local_proj(seq).permute(0, 2, 1).contiguous())
        local = seq.view(b, s, c, k).permute(0, 2, 3, 1).contiguous() + chunks
        # across chunks
        seq = local.permute(0, 2, 3, 1).contiguous().view(b * k, s, c)
        seq, _ = self.global_rnn(seq)
        seq = self.global_norm(self.global_proj(seq).permute(0, 2, 1).contiguous())
        return seq.view(b, k, c, s).permute(0, 2, 1, 3).contiguous() + local


def split_chunks(feats, size):
    b, c, length = feats.shape
    hop = size // 2
    gap = size - (hop + length % size) % size
    if gap > 0:
        tail = torch.Tensor(torch.zeros(b, c, gap)).type(feats.type())
        feats = torch.cat((feats, tail), dim=2)
    edge = torch.Tensor(torch.zeros(b, c, hop)).type(feats.type())
    feats = torch.cat((edge, feats, edge), dim=2)
    first = feats[:, :, :-hop].contiguous().view(b, c, -1, size)
    second = feats[:, :, hop:].contiguous().view(b, c, -1, size)
    chunks = torch.cat((first, second), dim=3).view(b, c, -1, size)
    return chunks.permute(0, 1, 3, 2).contiguous(), gap


def merge_chunks(chunks, gap):
    b, c, size, s = chunks.shape
    hop = size // 2
    flat = chunks.transpose(2, 3).contiguous().view(b, c, -1, 2 * size)
    merged = flat[:, :, :, :size].contiguous().view(b, c, -1)[:, :, hop:] * 2
    return merged[:, :, :-gap] if gap > 0 else merged


class Separator(nn.Module):
    def __init__(
        self, n_filters, channels, hidden, kernel, rnn_type, norm, blocks, chunk, speakers
    ):
        super().__init__()
        self.chunk, self.speakers = chunk, speakers
        self.encoder = nn.Conv1d(1, n_filters, kernel_size=kernel, stride=kernel // 2)
        self.decoder = WaveDecoder(n_filters, 1, kernel_size=kernel, stride=kernel // 2)
        self.bottleneck = nn.Sequential(
            make_norm(norm, n_filters), nn.Conv1d(n_filters, channels, 1)
        )
        self.blocks = nn.ModuleList(
            [DualPathBlock(channels, hidden, rnn_type, norm) for _ in range(blocks)]
        )
        self.prelu = nn.PReLU()
        self.to_speakers = nn.Conv2d(channels, channels * speakers, kernel_size=1)
        self.to_filters = nn.Conv1d(channels, n_filters, 1)

    def forward(self, mixture):
        basis = F.relu(self.encoder(torch.unsqueeze(mixture, dim=1)))
        chunks, gap = split_chunks(self.bottleneck(basis), self.chunk)
        for block in self.blocks:
            chunks = block(chunks)
        chunks = self.to_speakers(self.prelu(chunks))
        streams = torch.chunk(merge_chunks(chunks, gap), self.speakers, dim=1)
        per_speaker = torch.stack(streams, dim=0)
        n, b, c, length = per_speaker.shape
        masks = torch.sigmoid(self.to_filters(per_speaker.view(n * b, c, length)))
        masks = masks.view(n, b, -1, length)
        return [self.decoder(masks[i] * basis) for i in range(n)]


def si_snr(estimate, target, eps=1e-8):
    estimate = estimate - torch.mean(estimate, dim=-1, keepdim=True)
    target = target - torch.mean(target, dim=-1, keepdim=True)
    energy = torch.norm(target, dim=-1, keepdim=True) ** 2 + eps
    projection = torch.sum(estimate * target, dim=-1, keepdim=True) * target / energy
    noise = estimate - projection
    ratio = torch.norm(projection, dim=-1) / (torch.norm(noise, dim=-1) + eps)
    return 20 * torch.log10(eps + ratio)


def pit_loss(estimates, references):
    scores = []
    for order in itertools.permutations(range(len(references))):
        pairs = [si_snr(estimates[i], references[j]) for i, j in enumerate(order)]
        scores.append(sum(pairs) / len(order))
    best, _ = torch.max(torch.stack(scores), dim=0)
    return -best.sum() / references[0].size(0)


def megabytes_of(model):
    return sum(p.numel() for p in model.parameters()) / 1e6


class Trainer:
    def __init__(self, model, optimizer, scheduler, config):
        self.device = torch.device("cpu")
        self.model = model.to(self.device)
        self.optimizer, self.scheduler = optimizer, scheduler
        self.clip = config["clip"]
        self.folder = config["folder"]
        log.info("model of %.4f M parameters", megabytes_of(self.model))

    def run_epoch(self, batches, epoch, training):
        self.model.train(training)
        total = 0.0
        for step, (mixture, refs) in enumerate(batches, 1):
            mixture = mixture.to(self.device)
            refs = [r.to(self.device) for r in refs]
            if training:
                self.optimizer.zero_grad()
                loss = pit_loss(self.model(mixture), refs)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
                self.optimizer.step()
            else:
                with torch.no_grad():
                    loss = pit_loss(self.model(mixture), refs)
            total += loss.item()
            lr = self.optimizer.param_groups[0]["lr"]
            log.info("epoch %d step %d lr %.2e loss %.4f", epoch, step, lr, total / step)
        return total / len(batches)

    def save(self, epoch, tag):
        os.makedirs(self.folder, exist_ok=True)
        torch.save(
            {
                "epoch": epoch,
                "model": self.model.state_dict(),
                "optim": self.optimizer.state_dict(),
            },
            os.path.join(self.folder, tag + ".pt"),
        )


def two_speaker_batches(count, length=60):
    batches = []
    for _ in range(count):
        loud, quiet = torch.randn(2, length), 0.5 * torch.randn(2, length)
        batches.append((loud + quiet, [loud, quiet]))
    return batches


model = Separator(n_filters=8, channels=6, hidden=4, kernel=4, rnn_type=rnn_type, norm=norm,
                  blocks=2, chunk=6, speakers=2)
initialize(model)
record.append(megabytes_of(model))
optim_cls = getattr(torch.optim, optim_name)
extra = {"momentum": 0.9} if optim_name == "SGD" else {}
optimizer = optim_cls(model.parameters(), lr=1e-3, weight_decay=1e-5, **extra)
scheduler = lr_scheduler.ReduceLROnPlateau(
    optimizer, mode="min", factor=0.5, patience=0, min_lr=1e-8
)
trainer = Trainer(model, optimizer, scheduler, {"clip": 5.0, "folder": checkpoint_dir})

train_set, val_set = two_speaker_batches(2), two_speaker_batches(1)
best = trainer.run_epoch(val_set, 0, training=False)
trainer.save(0, "last")
record.append(best)
for epoch in (1, 2):
    train_loss = trainer.run_epoch(train_set, epoch, training=True)
    val_loss = trainer.run_epoch(val_set, epoch, training=False)
    scheduler.step(val_loss)
    if val_loss < best:
        best = val_loss
        trainer.save(epoch, "best")
    record.append([train_loss, val_loss, optimizer.param_groups[0]["lr"]])
record.append(params_of(model))
# (the SI-SNR loss subtracts each wave's mean: the waves' offsets, and the decoder's bias
# that sets them, have no gradient and follow Adam's rounding noise, so they are left out)
centred = [wave - wave.mean(dim=-1, keepdim=True) for wave in model(val_set[0][0])]
record.append([wave.detach().numpy() for wave in centred])
'''

DPRNN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("                self.optimizer.zero_grad()\n", ""),
    ("                loss.backward()\n", "                grads = loss.backward()\n"),
    (
        "clip_grad_norm_(self.model.parameters(), self.clip)",
        "clip_grad_norm_(grads, self.model.parameters(), self.clip)",
    ),
    ("                self.optimizer.step()\n", "                self.optimizer.step(grads)\n"),
]


@pytest.mark.parametrize(
    "norm, rnn_type, optim_name", [("gln", "GRU", "SGD"), ("cln", "LSTM", "Adam")]
)
def test_dual_path_rnn_trains_validates_and_checkpoints_as_torch(
    capsys, tmp_path, norm, rnn_type, optim_name
):
    """Two epochs of the Dual-Path RNN trainer (validation before and after each,
    ``ReduceLROnPlateau`` on the validation loss): the parameter count, the losses and
    learning rates, the weights after training and the two separated signals."""
    (theirs, ours), _ = runs_with_draws(
        DPRNN_SOURCE, DPRNN_STEPS, capsys, 33201, initialize=initializer(), params_of=params_of,
        norm=norm, rnn_type=rnn_type, optim_name=optim_name, checkpoint_dir=str(tmp_path / "ckpt"),
    )  # fmt: skip
    assert (tmp_path / "ckpt" / "last.pt").exists()
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=("0.decoder.bias",))
