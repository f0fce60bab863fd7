"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of sigsep/open-unmix-pytorch (the music source separation reference model: its
transforms, model, utilities and training script), run under torch and, ported, under
retrograd from the same weights and draws.

Its surface: a Hann window held as ``nn.Parameter(torch.hann_window(n), requires_grad=False)``;
an STFT module packing the batch by ``view(-1, shape[-1])``, ``torch.stft(...,
return_complex=True)``, ``torch.view_as_real`` and unpacking by ``view(shape[:-1] +
spec.shape[-3:])``; its inverse by ``torch.istft(torch.view_as_complex(X), ..., length=n)``; the
magnitude by ``torch.abs(torch.view_as_complex(spec))`` with a mono downmix; the model: input
permuted frames-first, the mixture kept by ``x.detach().clone()``, a crop to ``max_bin``, input
shift and scale ``Parameter``s from NumPy statistics (``torch.from_numpy(...).float()``), three
``BatchNorm1d``, a bidirectional stacked ``LSTM`` with a skip connection by ``torch.cat``, the
in-place output scaling ``x *= ...``/``x += ...`` of a reshaped batch-norm output and the ReLU
mask times the mixture; the statistics by a ``copy.deepcopy(encoder).to("cpu")`` and sklearn's
``StandardScaler.partial_fit(np.squeeze(X))``; training with ``DataLoader(shuffle=True)``,
``Adam(weight_decay=...)``, ``ReduceLROnPlateau(factor, patience, cooldown)``, a running-average
meter and early stopping; then separation by a ratio mask on the mixture's complex STFT,
inverted with ``center=True``.

``lstm.dropout = 0.0`` is set after the model is built in both runs (dropout draws from each
library's own generator). The tracks are synthetic stereo ones (a chord of sines as the
target, noise and a second chord as the interferers); the weights are torch's (``initialize``);
``DataLoader``'s shuffle permutes by one shared stream. The port changes the import lines and
the gradient lines.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
)

OPEN_UNMIX_SOURCE = """
import copy

import numpy as np
import sklearn.preprocessing
import torch
from torch import Tensor, nn
from torch.nn import functional as F

N_FFT, HOP = 64, 16


class Spectrogram(nn.Module):
    # complex STFT of (batch, channels, time) audio, as real pairs
    def __init__(self, window, center=False):
        super().__init__()
        self.window, self.center = window, center

    def forward(self, audio: Tensor) -> Tensor:
        shape = audio.size()
        spec = torch.stft(audio.view(-1, shape[-1]), n_fft=N_FFT, hop_length=HOP,
                          window=self.window, center=self.center, normalized=False,
                          onesided=True, pad_mode="reflect", return_complex=True)
        spec = torch.view_as_real(spec)
        return spec.view(shape[:-1] + spec.shape[-3:])


class Inverse(nn.Module):
    def __init__(self, window, center=False):
        super().__init__()
        self.window, self.center = window, center

    def forward(self, spec: Tensor, length=None) -> Tensor:
        shape = spec.size()
        flat = spec.reshape(-1, shape[-3], shape[-2], shape[-1])
        audio = torch.istft(torch.view_as_complex(flat), n_fft=N_FFT, hop_length=HOP,
                            window=self.window, center=self.center, length=length)
        return audio.reshape(shape[:-3] + audio.shape[-1:])


class Magnitude(nn.Module):
    def __init__(self, mono=False):
        super().__init__()
        self.mono = mono

    def forward(self, stft_pairs: Tensor) -> Tensor:
        mag = torch.abs(torch.view_as_complex(stft_pairs))
        return torch.mean(mag, 1, keepdim=True) if self.mono else mag


def transforms(center=False):
    window = nn.Parameter(torch.hann_window(N_FFT), requires_grad=False)
    return Spectrogram(window, center), Inverse(window, center)


class Unmix(nn.Module):
    def __init__(self, bins, channels, hidden, layers, mean, scale, max_bin):
        super().__init__()
        self.bins, self.used, self.hidden = bins, max_bin, hidden
        self.fc1 = nn.Linear(max_bin * channels, hidden, bias=False)
        self.bn1 = nn.BatchNorm1d(hidden)
        self.lstm = nn.LSTM(hidden, hidden // 2, num_layers=layers, bidirectional=True, dropout=0.4)
        self.fc2 = nn.Linear(2 * hidden, hidden, bias=False)
        self.bn2 = nn.BatchNorm1d(hidden)
        self.fc3 = nn.Linear(hidden, bins * channels, bias=False)
        self.bn3 = nn.BatchNorm1d(bins * channels)
        self.input_mean = nn.Parameter(torch.from_numpy(-mean[:max_bin]).float())
        self.input_scale = nn.Parameter(torch.from_numpy(1.0 / scale[:max_bin]).float())
        self.output_scale = nn.Parameter(torch.ones(bins).float())
        self.output_mean = nn.Parameter(torch.ones(bins).float())

    def forward(self, mag: Tensor) -> Tensor:
        x = mag.permute(3, 0, 1, 2)  # frames, batch, channels, bins
        frames, batch, channels, _ = x.data.shape
        mixture = x.detach().clone()
        x = (x[..., : self.used] + self.input_mean) * self.input_scale
        x = torch.tanh(self.bn1(self.fc1(x.reshape(-1, channels * self.used))))
        x = x.reshape(frames, batch, self.hidden)
        x = torch.cat([x, self.lstm(x)[0]], -1)
        x = F.relu(self.bn2(self.fc2(x.reshape(-1, x.shape[-1]))))
        x = self.bn3(self.fc3(x)).reshape(frames, batch, channels, self.bins)
        x *= self.output_scale
        x += self.output_mean
        return (F.relu(x) * mixture).permute(1, 2, 3, 0)


class Meter:
    def __init__(self):
        self.total, self.count = 0.0, 0

    def add(self, value, n=1):
        self.total += value * n
        self.count += n

    @property
    def mean(self):
        return self.total / self.count


class Patience:
    def __init__(self, epochs, delta=0.0):
        self.epochs, self.delta, self.best, self.bad = epochs, delta, None, 0

    def stop(self, value):
        if self.best is None or value < self.best - self.delta:
            self.best, self.bad = value, 0
        else:
            self.bad += 1
        return np.isnan(value) or self.bad >= self.epochs


def statistics(encoder, dataset):
    on_cpu = copy.deepcopy(encoder).to("cpu")
    scaler = sklearn.preprocessing.StandardScaler()  # fed one track at a time
    for i in range(len(dataset)):
        mixture, _ = dataset[i]
        mono = on_cpu(mixture[None, ...]).mean(1, keepdim=False).permute(0, 2, 1)
        scaler.partial_fit(np.squeeze(mono))
    return scaler.mean_, np.maximum(scaler.scale_, 1e-4 * np.max(scaler.scale_))


def run_epoch(model, encoder, loader, optimizer=None):
    meter = Meter()
    model.train(optimizer is not None)
    with torch.set_grad_enabled(optimizer is not None):
        for mixture, target in loader:
            mixture, target = mixture.to(device), target.to(device)
            loss = F.mse_loss(model(encoder(mixture)), encoder(target))
            if optimizer is not None:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            meter.add(loss.item(), target.size(0))
    return meter.mean


device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
train_set, valid_set = data.load_datasets()
loader = torch.utils.data.DataLoader(train_set, batch_size=2, shuffle=True)
stft, _ = transforms()
encoder = nn.Sequential(stft, Magnitude()).to(device)
mean, scale = statistics(encoder, train_set)
freqs = np.linspace(0, train_set.sample_rate / 2, N_FFT // 2 + 1, endpoint=True)
max_bin = np.max(np.where(freqs <= 3000)[0]) + 1  # drop what lies above 3 kHz

model = Unmix(N_FFT // 2 + 1, 2, 16, 2, mean, scale, max_bin).to(device)
model.lstm.dropout = 0.0
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-5)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.3, patience=0, cooldown=10)
patience = Patience(epochs=5)
for epoch in range(1, 4):
    train_loss = run_epoch(model, encoder, loader, optimizer)
    valid_loss = run_epoch(model, encoder, torch.utils.data.DataLoader(valid_set, batch_size=1))
    plateau.step(valid_loss)
    lr = optimizer.param_groups[0]["lr"]
    print(epoch, round(train_loss, 4), round(valid_loss, 4), lr)
    record.append([train_loss, valid_loss, lr])
    record.append(params_of(model))
    if patience.stop(valid_loss):
        break

# separate one track: a ratio mask on the mixture's complex STFT
stft, istft = transforms(center=True)
model.eval()
with torch.no_grad():
    audio = valid_set[0][0][None, ...]
    spec = stft(audio)
    mag = Magnitude()(spec)
    mask = model(mag.detach().clone()) / (mag + 1e-10)
    estimate = istft(spec * mask[..., None], length=audio.shape[-1])
    roundtrip = istft(spec, length=audio.shape[-1])
record.append(dict(estimate=estimate.numpy(), roundtrip=roundtrip.numpy(), audio=audio.numpy()))
"""

OPEN_UNMIX_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "                loss.backward()\n                optimizer.step()\n",
        "                grads = loss.backward()\n                optimizer.step(grads)\n",
    ),
]


def make_data(lib):
    """``openunmix/data.py``'s stand-in: synthetic stereo tracks, a chord of sines as the
    target (vocals) and noise with a second chord as the interferers, in the dataset's
    interface (``__getitem__`` gives ``(mixture, target)``, ``sample_rate``)."""

    class SourceFolderDataset:
        def __init__(self, seed: int, tracks: int, samples: int = 256, sample_rate=8000.0):
            rng = np.random.default_rng(seed)
            t = np.arange(samples) / sample_rate
            self.sample_rate = float(sample_rate)
            self.items = []
            for _ in range(tracks):
                freqs = rng.uniform(200, 1500, size=(2, 3))
                gains = rng.uniform(0.2, 1.0, size=(2, 1, 1))
                target = (gains * np.sin(2 * np.pi * freqs[..., None] * t)).sum(1)
                others = 0.3 * rng.standard_normal((2, samples)) + 0.5 * np.sin(
                    2 * np.pi * rng.uniform(2000, 3500) * t
                )
                self.items.append(
                    (
                        lib.tensor(target + others, dtype=lib.float32),
                        lib.tensor(target, dtype=lib.float32),
                    )
                )

        def __len__(self):
            return len(self.items)

        def __getitem__(self, index):
            return self.items[index]

    def load_datasets():
        return SourceFolderDataset(420, 6), SourceFolderDataset(421, 2)

    return argparse.Namespace(SourceFolderDataset=SourceFolderDataset, load_datasets=load_datasets)


def test_open_unmix_trains_and_separates_as_torch(capsys, monkeypatch):
    torch.manual_seed(0)
    np.random.seed(0)
    initialize, records, logs = initializer(), [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(420)

        def randperm(n, generator=None, _lib=lib, _rng=rng, **_):
            return _lib.tensor(_rng.permutation(n), dtype=_lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)
        text = OPEN_UNMIX_SOURCE
        if lib is rg:
            text = ported_imports(port(text, OPEN_UNMIX_STEPS))
        record = []
        run_source(
            text,
            lib,
            record=record,
            data=make_data(lib),
            initialize=initialize,
            params_of=params_of,
        )
        monkeypatch.undo()
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1].split()[::4] == logs[0].split()[::4] and len(logs[0].splitlines()) == 3
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
    separated = records[0][-1]
    np.testing.assert_allclose(separated["roundtrip"], separated["audio"], atol=1e-5)
