# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
Open-Unmix, the music source separation reference model.

- sigsep/open-unmix-pytorch as written: ``openunmix/transforms.py`` (``make_filterbanks``
  with its ``nn.Parameter(torch.hann_window(n_fft), requires_grad=False)`` window,
  ``TorchSTFT``: the batch packed by ``view(-1, shape[-1])``, ``torch.stft(...,
  return_complex=True)``, ``torch.view_as_real`` and the batch unpacked by ``view(shape[:-1]
  + stft_f.shape[-3:])``; ``TorchISTFT``: ``torch.istft(torch.view_as_complex(X), ...,
  length=length)``; ``ComplexNorm``: ``torch.abs(torch.view_as_complex(spec))`` and the mono
  downmix); ``openunmix/model.py``'s ``OpenUnmix`` (the input permuted frames-first, the
  detached mixture ``mix``, the crop to ``max_bin``, the bidirectional stacked ``LSTM`` with
  its skip connection, three ``BatchNorm1d``, the in-place output scaling ``x *=`` /
  ``x +=`` of a reshaped batch-norm output, the ReLU mask times the mixture);
  ``openunmix/utils.py``'s ``bandwidth_to_max_bin``, ``AverageMeter`` and ``EarlyStopping``;
  ``scripts/train.py``'s ``train``/``valid``/``get_statistics`` (a deep copy of the encoder,
  sklearn's ``StandardScaler.partial_fit`` of ``np.squeeze`` of the downmixed spectrogram)
  and its ``main`` loop (``DataLoader(shuffle=True)``, ``Adam`` with weight decay,
  ``ReduceLROnPlateau``, early stopping) with the checkpoint files, git commit, argparse
  and tqdm left out; then the separation of ``Separator`` with ``niter=0`` (the ratio mask
  of the estimate over the mixture magnitude on the complex STFT, inverted by ``TorchISTFT``
  with ``center=True``).

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns
the gradients, ``optimizer.step`` takes them). Also added, for both runs alike:
``unmix.lstm.dropout = 0.0`` after the model is built (dropout draws from each library's own
generator). MUSDB18 is replaced by a few synthetic stereo tracks (a chord of sines as the
target, noise and a second chord as the interferers) with the dataset's interface; the
weights are torch's (``initialize``); ``DataLoader``'s shuffle permutes by one shared stream.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import assert_records_agree, initializer, params_of, port, run_source

OPEN_UNMIX_SOURCE = '''
# openunmix/transforms.py
from typing import Optional

import torch
from torch import Tensor
import torch.nn as nn


def make_filterbanks(n_fft=4096, n_hop=1024, center=False, sample_rate=44100.0, method="torch"):
    window = nn.Parameter(torch.hann_window(n_fft), requires_grad=False)

    if method == "torch":
        encoder = TorchSTFT(n_fft=n_fft, n_hop=n_hop, window=window, center=center)
        decoder = TorchISTFT(n_fft=n_fft, n_hop=n_hop, window=window, center=center)
    else:
        raise NotImplementedError
    return encoder, decoder


class TorchSTFT(nn.Module):
    """Multichannel Short-Time-Fourier Forward transform
    uses hard coded hann_window.
    """

    def __init__(self, n_fft=4096, n_hop=1024, center=False, window=None):
        super(TorchSTFT, self).__init__()
        if window is not None:
            self.window = nn.Parameter(torch.hann_window(n_fft), requires_grad=False)
        else:
            self.window = window
        self.n_fft = n_fft
        self.n_hop = n_hop
        self.center = center

    def forward(self, x: Tensor) -> Tensor:
        shape = x.size()
        nb_samples, nb_channels, nb_timesteps = shape

        # pack batch
        x = x.view(-1, shape[-1])

        complex_stft = torch.stft(
            x,
            n_fft=self.n_fft,
            hop_length=self.n_hop,
            window=self.window,
            center=self.center,
            normalized=False,
            onesided=True,
            pad_mode="reflect",
            return_complex=True,
        )
        stft_f = torch.view_as_real(complex_stft)
        # unpack batch
        stft_f = stft_f.view(shape[:-1] + stft_f.shape[-3:])
        return stft_f


class TorchISTFT(nn.Module):
    """Multichannel Inverse-Short-Time-Fourier functional
    wrapper for torch.istft to support batches
    """

    def __init__(
        self,
        n_fft: int = 4096,
        n_hop: int = 1024,
        center: bool = False,
        sample_rate: float = 44100.0,
        window: Optional[nn.Parameter] = None,
    ) -> None:
        super(TorchISTFT, self).__init__()

        self.n_fft = n_fft
        self.n_hop = n_hop
        self.center = center
        self.sample_rate = sample_rate

        if window is not None:
            self.window = nn.Parameter(torch.hann_window(n_fft), requires_grad=False)
        else:
            self.window = window

    def forward(self, X: Tensor, length: Optional[int] = None) -> Tensor:
        shape = X.size()
        X = X.reshape(-1, shape[-3], shape[-2], shape[-1])

        y = torch.istft(
            torch.view_as_complex(X),
            n_fft=self.n_fft,
            hop_length=self.n_hop,
            window=self.window,
            center=self.center,
            normalized=False,
            onesided=True,
            length=length,
        )

        y = y.reshape(shape[:-3] + y.shape[-1:])

        return y


class ComplexNorm(nn.Module):
    r"""Compute the norm of complex tensor input.
    """

    def __init__(self, mono: bool = False):
        super(ComplexNorm, self).__init__()
        self.mono = mono

    def forward(self, spec: Tensor) -> Tensor:
        # take the magnitude

        spec = torch.abs(torch.view_as_complex(spec))

        # downmix in the mag domain to preserve energy
        if self.mono:
            spec = torch.mean(spec, 1, keepdim=True)

        return spec


# openunmix/utils.py
def bandwidth_to_max_bin(rate: float, n_fft: int, bandwidth: float) -> np.ndarray:
    """Convert bandwidth to maximum bin count
    """
    freqs = np.linspace(0, rate / 2, n_fft // 2 + 1, endpoint=True)

    return np.max(np.where(freqs <= bandwidth)[0]) + 1


class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class EarlyStopping(object):
    """Early Stopping Monitor"""

    def __init__(self, mode="min", min_delta=0, patience=10):
        self.mode = mode
        self.min_delta = min_delta
        self.patience = patience
        self.best = None
        self.num_bad_epochs = 0
        self.is_better = None
        self._init_is_better(mode, min_delta)

        if patience == 0:
            self.is_better = lambda a, b: True

    def step(self, metrics):
        if self.best is None:
            self.best = metrics
            return False

        if np.isnan(metrics):
            return True

        if self.is_better(metrics, self.best):
            self.num_bad_epochs = 0
            self.best = metrics
        else:
            self.num_bad_epochs += 1

        if self.num_bad_epochs >= self.patience:
            return True

        return False

    def _init_is_better(self, mode, min_delta):
        if mode not in {"min", "max"}:
            raise ValueError("mode " + mode + " is unknown!")
        if mode == "min":
            self.is_better = lambda a, best: a < best - min_delta
        if mode == "max":
            self.is_better = lambda a, best: a > best + min_delta


# openunmix/model.py
from typing import Optional, Mapping

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn import LSTM, BatchNorm1d, Linear, Parameter


class OpenUnmix(nn.Module):
    """OpenUnmix Core spectrogram based separation module.
    """

    def __init__(
        self,
        nb_bins: int = 4096,
        nb_channels: int = 2,
        hidden_size: int = 512,
        nb_layers: int = 3,
        unidirectional: bool = False,
        input_mean: Optional[np.ndarray] = None,
        input_scale: Optional[np.ndarray] = None,
        max_bin: Optional[int] = None,
    ):
        super(OpenUnmix, self).__init__()

        self.nb_output_bins = nb_bins
        if max_bin:
            self.nb_bins = max_bin
        else:
            self.nb_bins = self.nb_output_bins

        self.hidden_size = hidden_size

        self.fc1 = Linear(self.nb_bins * nb_channels, hidden_size, bias=False)

        self.bn1 = BatchNorm1d(hidden_size)

        if unidirectional:
            lstm_hidden_size = hidden_size
        else:
            lstm_hidden_size = hidden_size // 2

        self.lstm = LSTM(
            input_size=hidden_size,
            hidden_size=lstm_hidden_size,
            num_layers=nb_layers,
            bidirectional=not unidirectional,
            batch_first=False,
            dropout=0.4 if nb_layers > 1 else 0,
        )

        fc2_hiddensize = hidden_size * 2
        self.fc2 = Linear(in_features=fc2_hiddensize, out_features=hidden_size, bias=False)

        self.bn2 = BatchNorm1d(hidden_size)

        self.fc3 = Linear(
            in_features=hidden_size,
            out_features=self.nb_output_bins * nb_channels,
            bias=False,
        )

        self.bn3 = BatchNorm1d(self.nb_output_bins * nb_channels)

        if input_mean is not None:
            input_mean = torch.from_numpy(-input_mean[: self.nb_bins]).float()
        else:
            input_mean = torch.zeros(self.nb_bins)

        if input_scale is not None:
            input_scale = torch.from_numpy(1.0 / input_scale[: self.nb_bins]).float()
        else:
            input_scale = torch.ones(self.nb_bins)

        self.input_mean = Parameter(input_mean)
        self.input_scale = Parameter(input_scale)

        self.output_scale = Parameter(torch.ones(self.nb_output_bins).float())
        self.output_mean = Parameter(torch.ones(self.nb_output_bins).float())

    def freeze(self):
        # set all parameters as not requiring gradient, more RAM-efficient
        # at test time
        for p in self.parameters():
            p.requires_grad = False
        self.eval()

    def forward(self, x: Tensor) -> Tensor:
        # permute so that batch is last for lstm
        x = x.permute(3, 0, 1, 2)
        # get current spectrogram shape
        nb_frames, nb_samples, nb_channels, nb_bins = x.data.shape

        mix = x.detach().clone()

        # crop
        x = x[..., : self.nb_bins]
        # shift and scale input to mean=0 std=1 (across all bins)
        x = x + self.input_mean
        x = x * self.input_scale

        # to (nb_frames*nb_samples, nb_channels*nb_bins)
        # and encode to (nb_frames*nb_samples, hidden_size)
        x = self.fc1(x.reshape(-1, nb_channels * self.nb_bins))
        # normalize every instance in a batch
        x = self.bn1(x)
        x = x.reshape(nb_frames, nb_samples, self.hidden_size)
        # squash range ot [-1, 1]
        x = torch.tanh(x)

        # apply 3-layers of stacked LSTM
        lstm_out = self.lstm(x)

        # lstm skip connection
        x = torch.cat([x, lstm_out[0]], -1)

        # first dense stage + batch norm
        x = self.fc2(x.reshape(-1, x.shape[-1]))
        x = self.bn2(x)

        x = F.relu(x)

        # second dense stage + layer norm
        x = self.fc3(x)
        x = self.bn3(x)

        # reshape back to original dim
        x = x.reshape(nb_frames, nb_samples, nb_channels, self.nb_output_bins)

        # apply output scaling
        x *= self.output_scale
        x += self.output_mean

        # since our output is non-negative, we can apply RELU
        x = F.relu(x) * mix
        # permute back to (nb_samples, nb_channels, nb_bins, nb_frames)
        return x.permute(1, 2, 3, 0)


# scripts/train.py
import torch
import copy
import random
import sklearn.preprocessing


def train(args, unmix, encoder, device, train_sampler, optimizer):
    losses = AverageMeter()
    unmix.train()
    pbar = tqdm.tqdm(train_sampler, disable=args.quiet)
    for x, y in pbar:
        pbar.set_description("Training batch")
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        X = encoder(x)
        Y_hat = unmix(X)
        Y = encoder(y)
        loss = torch.nn.functional.mse_loss(Y_hat, Y)
        loss.backward()
        optimizer.step()
        losses.update(loss.item(), Y.size(1))
        pbar.set_postfix(loss="{:.3f}".format(losses.avg))
    return losses.avg


def valid(args, unmix, encoder, device, valid_sampler):
    losses = AverageMeter()
    unmix.eval()
    with torch.no_grad():
        for x, y in valid_sampler:
            x, y = x.to(device), y.to(device)
            X = encoder(x)
            Y_hat = unmix(X)
            Y = encoder(y)
            loss = torch.nn.functional.mse_loss(Y_hat, Y)
            losses.update(loss.item(), Y.size(1))
        return losses.avg


def get_statistics(args, encoder, dataset):
    encoder = copy.deepcopy(encoder).to("cpu")
    scaler = sklearn.preprocessing.StandardScaler()

    dataset_scaler = copy.deepcopy(dataset)
    if isinstance(dataset_scaler, data.SourceFolderDataset):
        dataset_scaler.random_chunks = False
    else:
        dataset_scaler.random_chunks = False
        dataset_scaler.seq_duration = None

    dataset_scaler.samples_per_track = 1
    dataset_scaler.augmentations = None
    dataset_scaler.random_track_mix = False
    dataset_scaler.random_interferer_mix = False

    pbar = tqdm.tqdm(range(len(dataset_scaler)), disable=args.quiet)
    for ind in pbar:
        x, y = dataset_scaler[ind]
        pbar.set_description("Compute dataset statistics")
        # downmix to mono channel
        X = encoder(x[None, ...]).mean(1, keepdim=False).permute(0, 2, 1)

        scaler.partial_fit(np.squeeze(X))

    # set inital input scaler values
    std = np.maximum(scaler.scale_, 1e-4 * np.max(scaler.scale_))
    return scaler.mean_, std


# main(), from the parsed arguments on
use_cuda = not args.no_cuda and torch.cuda.is_available()
print("Using GPU:", use_cuda)
dataloader_kwargs = {"num_workers": args.nb_workers, "pin_memory": True} if use_cuda else {}

torch.manual_seed(args.seed)
random.seed(args.seed)

device = torch.device("cuda" if use_cuda else "cpu")

train_dataset, valid_dataset, args = data.load_datasets(None, args)

train_sampler = torch.utils.data.DataLoader(
    train_dataset, batch_size=args.batch_size, shuffle=True, **dataloader_kwargs
)
valid_sampler = torch.utils.data.DataLoader(valid_dataset, batch_size=1, **dataloader_kwargs)

stft, _ = make_filterbanks(
    n_fft=args.nfft, n_hop=args.nhop, sample_rate=train_dataset.sample_rate
)
encoder = torch.nn.Sequential(stft, ComplexNorm(mono=args.nb_channels == 1)).to(device)

if args.checkpoint or args.model or args.debug:
    scaler_mean = None
    scaler_std = None
else:
    scaler_mean, scaler_std = get_statistics(args, encoder, train_dataset)

max_bin = bandwidth_to_max_bin(train_dataset.sample_rate, args.nfft, args.bandwidth)

unmix = OpenUnmix(
    input_mean=scaler_mean,
    input_scale=scaler_std,
    nb_bins=args.nfft // 2 + 1,
    nb_channels=args.nb_channels,
    hidden_size=args.hidden_size,
    nb_layers=args.nb_layers,
    max_bin=max_bin,
).to(device)
unmix.lstm.dropout = 0.0
initialize(unmix)

optimizer = torch.optim.Adam(unmix.parameters(), lr=args.lr, weight_decay=args.weight_decay)

scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
    optimizer,
    factor=args.lr_decay_gamma,
    patience=args.lr_decay_patience,
    cooldown=10,
)

es = EarlyStopping(patience=args.patience)

t = tqdm.trange(1, args.epochs + 1, disable=args.quiet)
train_losses = []
valid_losses = []
train_times = []
best_epoch = 0

for epoch in t:
    t.set_description("Training epoch")
    train_loss = train(args, unmix, encoder, device, train_sampler, optimizer)
    valid_loss = valid(args, unmix, encoder, device, valid_sampler)
    scheduler.step(valid_loss)
    train_losses.append(train_loss)
    valid_losses.append(valid_loss)

    t.set_postfix(train_loss=train_loss, val_loss=valid_loss)

    stop = es.step(valid_loss)

    if valid_loss == es.best:
        best_epoch = epoch
    print(epoch, "train", round(train_loss, 4), "valid", round(valid_loss, 4), "lr", optimizer.param_groups[0]["lr"])
    record.append([train_loss, valid_loss, optimizer.param_groups[0]["lr"], best_epoch])
    record.append(params_of(unmix))

    if stop:
        print("Apply Early Stopping")
        break

# Separator.forward with niter=0: the ratio mask on the mixture's complex STFT, inverted
stft, istft = make_filterbanks(n_fft=args.nfft, n_hop=args.nhop, center=True)
unmix.eval()
with torch.no_grad():
    audio, _ = valid_dataset[0]
    audio = audio[None, ...]
    mix_stft = stft(audio)
    X = ComplexNorm(mono=args.nb_channels == 1)(mix_stft)
    target_spectrogram = unmix(X.detach().clone())
    mask = target_spectrogram / (X + 1e-10)
    estimate = istft(mix_stft * mask[..., None], length=audio.shape[-1])
    roundtrip = istft(mix_stft, length=audio.shape[-1])
record.append({"estimate": estimate.numpy(), "roundtrip": roundtrip.numpy(), "audio": audio.numpy()})
'''

OPEN_UNMIX_STEPS = [
    (
        "import torch\nfrom torch import Tensor\nimport torch.nn as nn\n",
        "import retrograd as torch\nfrom retrograd import Tensor\nimport retrograd.nn as nn\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch import Tensor\nfrom torch.nn import LSTM, BatchNorm1d, Linear, Parameter\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd import Tensor\nfrom retrograd.nn import LSTM, BatchNorm1d, Linear, Parameter\n",
    ),
    ("# scripts/train.py\nimport torch\n", "# scripts/train.py\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class SilentTqdm:
    """``tqdm``'s surface that the script uses, printing nothing."""

    def __init__(self, iterable=(), disable=False, **_):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def set_description(self, text):
        pass

    def set_postfix(self, **logs):
        pass


tqdm_stand_in = argparse.Namespace(tqdm=SilentTqdm, trange=lambda *a, **k: SilentTqdm(range(*a)))


def make_data(lib):
    """``openunmix/data.py``'s stand-in: synthetic stereo tracks, a chord of sines as the
    target (vocals) and noise with a second chord as the interferers, in the dataset's
    interface (``__getitem__`` gives ``(mixture, target)``, ``sample_rate``)."""

    class SourceFolderDataset:
        def __init__(self, seed: int, tracks: int, samples: int = 256, sample_rate=8000.0):
            rng = np.random.default_rng(seed)
            t = np.arange(samples) / sample_rate
            self.sample_rate = sample_rate
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

    def load_datasets(parser, args):
        return SourceFolderDataset(420, 6), SourceFolderDataset(421, 2), args

    return argparse.Namespace(SourceFolderDataset=SourceFolderDataset, load_datasets=load_datasets)


def test_open_unmix_trains_and_separates_as_torch(capsys, monkeypatch):
    torch.manual_seed(0)
    np.random.seed(0)
    args = argparse.Namespace(
        target="vocals",
        epochs=3,
        batch_size=2,
        lr=0.01,
        patience=140,
        lr_decay_patience=0,
        lr_decay_gamma=0.3,
        weight_decay=0.00001,
        seed=42,
        nfft=64,
        nhop=16,
        hidden_size=16,
        nb_layers=2,
        bandwidth=3000,
        nb_channels=2,
        nb_workers=0,
        debug=False,
        quiet=True,
        no_cuda=True,
        checkpoint=None,
        model=None,
    )
    initialize, records, logs = initializer(), [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(420)

        def randperm(n, generator=None, _lib=lib, _rng=rng, **_):
            return _lib.tensor(_rng.permutation(n), dtype=_lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)
        text = OPEN_UNMIX_SOURCE
        if lib is rg:
            text = port(text, OPEN_UNMIX_STEPS)
        record = []
        run_source(
            text,
            lib,
            record=record,
            args=args,
            data=make_data(lib),
            tqdm=tqdm_stand_in,
            initialize=initialize,
            params_of=params_of,
        )
        monkeypatch.undo()
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and "Using GPU: False" in logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
    separated = records[0][-1]
    np.testing.assert_allclose(separated["roundtrip"], separated["audio"], atol=1e-5)
