"""Real ports, continued (the harness: ``tests/real_ports.py``): speech features computed by
hand in torch, without torchaudio, by a front end written here in the style of speechbrain's
``speechbrain/processing/features.py``:

- ``STFT`` (``torch.hamming_window``, the positional ``torch.stft(x, n_fft, hop, win, window,
  center, pad_mode, normalized, onesided, return_complex=False)`` real form, the multi-channel
  ``permute(0, 3, 2, 4, 1)``), ``ISTFT`` (``torch.complex(x[..., 0], x[..., 1])`` into
  ``torch.istft(..., length=)``), ``magnitude`` (a power and a log), ``MelFilterbank``
  learnable (``freeze=False``: ``f_central``/``band`` as ``nn.Parameter``\\ s, the triangular
  filters by ``torch.max(zero, torch.min(rising, falling))``) and frozen (triangular,
  rectangular by ``ge``/``le`` masks multiplied, gaussian), with multi-channel input, the dB
  scale (``torch.log10(torch.clamp(x, min=amin))``, ``db -= ...`` in place, ``amax(dim=(-2,
  -1))``, ``torch.max`` against a ``view``), ``DCT`` (``basis[0] *= 1 / sqrt(2)`` in place,
  ``basis.t()``), ``DeltaFeatures`` (a ``replicate`` pad and a grouped ``conv1d`` by a
  ``register_buffer``'d ``arange(...).repeat(n_features, 1, 1)`` kernel), ``FrameContext``
  (``torch.eye(n, m)``, ``torch.roll`` of its columns, a grouped ``conv1d`` with padding) and
  ``FeatureNormalization`` (per-sentence ``x[i] = ...`` writes into a graph tensor, the
  ``torch.round(lengths[i] * T).int()`` slice, the ``global`` running statistics);
- a driver: features of a stereo and a mono batch, the STFT/ISTFT round trip, then four Adam
  steps of a keyword classifier whose filterbank learns its centres and bands.

The lines changed: the ``import`` line and the gradient lines; ``torch.randn`` draws one shared
stream in both runs.
"""

from __future__ import annotations

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

SPEECH_FEATURES_SOURCE = """
# A hand-written speech front end: STFT and its inverse, magnitudes, mel filterbanks (frozen or
# learnable), a dB scale, DCT, deltas, context windows and input normalization. Tensors are
# (batch, time, features[, channels]).
import math

import torch


def ms_to_samples(ms, sample_rate):
    return int(round(sample_rate / 1000.0 * ms))


class STFT(torch.nn.Module):
    \"\"\"(batch, time[, channels]) -> (batch, frames, bins, 2[, channels])\"\"\"

    def __init__(self, rate, win_ms=25, hop_ms=10, n_fft=400, window_fn=torch.hamming_window):
        super().__init__()
        self.n_fft = n_fft
        self.win, self.hop = ms_to_samples(win_ms, rate), ms_to_samples(hop_ms, rate)
        self.window = window_fn(self.win)

    def forward(self, x):
        shape = x.shape
        if x.dim() == 3:  # channels folded into the batch
            x = x.transpose(1, 2).reshape(shape[0] * shape[2], shape[1])
        # positional: n_fft, hop, win, window, center, pad_mode, normalized, onesided
        spec = torch.stft(
            x, self.n_fft, self.hop, self.win, self.window.to(x.device), True, "constant",
            False, True, return_complex=False,
        )
        if len(shape) == 3:
            return spec.reshape(shape[0], shape[2], *spec.shape[1:]).permute(0, 3, 2, 4, 1)
        return spec.transpose(2, 1)


class ISTFT(torch.nn.Module):
    def __init__(self, sample_rate, win_ms=25, hop_ms=10, window_fn=torch.hamming_window):
        super().__init__()
        self.win, self.hop = ms_to_samples(win_ms, sample_rate), ms_to_samples(hop_ms, sample_rate)
        self.window = window_fn(self.win)

    def forward(self, spec, length=None):
        shape = spec.shape
        n_fft = (shape[2] - 1) * 2  # one-sided
        if spec.dim() == 5:  # -> (batch * channels, bins, frames, 2)
            spec = spec.permute(0, 4, 2, 1, 3)
            spec = spec.reshape(-1, *spec.shape[2:])
        else:
            spec = spec.permute(0, 2, 1, 3)
        wave = torch.istft(
            input=torch.complex(spec[..., 0], spec[..., 1]), n_fft=n_fft,
            hop_length=self.hop, win_length=self.win, window=self.window.to(spec.device),
            center=True, onesided=True, length=length,
        )
        if len(shape) == 5:
            return wave.reshape(shape[0], shape[4], -1).transpose(1, 2)
        return wave


def magnitude(spec, power=1, log=False, eps=1e-14):
    # the real and imaginary parts sit on the axis before the channels, when there are any
    energy = spec.pow(2).sum(-2 if spec.dim() == 5 else -1)
    if power < 1:
        energy = energy + eps
    energy = energy.pow(power)
    return torch.log(energy + eps) if log else energy


class MelFilterbank(torch.nn.Module):
    def __init__(self, n_mels=40, n_fft=400, sample_rate=16000, f_min=0, f_max=8000,
                 shape="triangular", log_mel=True, power=2, amin=1e-10, ref=1.0, top_db=80.0,
                 freeze=True):
        super().__init__()
        self.shape, self.log_mel, self.freeze, self.rate = shape, log_mel, freeze, sample_rate
        self.amin, self.top_db = amin, top_db
        self.db_gain = 10 if power == 2 else 20
        self.db_ref = math.log10(max(amin, ref))
        to_mel = lambda hz: 2595 * math.log10(1 + hz / 700)
        mel = torch.linspace(to_mel(f_min), to_mel(f_max), n_mels + 2)
        hz = 700 * (10 ** (mel / 2595) - 1)
        centre, band = hz[1:-1], (hz[1:] - hz[:-1])[:-1]
        if freeze:
            self.f_central, self.band = centre, band
        else:  # learned as fractions of the sample rate
            self.f_central = torch.nn.Parameter(centre / sample_rate)
            self.band = torch.nn.Parameter(band / sample_rate)
        self.freqs = torch.linspace(0, sample_rate // 2, n_fft // 2 + 1).repeat(n_mels, 1)

    def filters(self):  # (bins, mels)
        n_bins = self.freqs.shape[1]
        centre = self.f_central.repeat(n_bins, 1).transpose(0, 1)
        band = self.band.repeat(n_bins, 1).transpose(0, 1)
        if not self.freeze:
            centre, band = centre * self.rate, band * self.rate
        if self.shape == "triangular":
            slope = (self.freqs - centre) / band
            rising, falling = slope + 1.0, 1.0 - slope
            return torch.max(torch.zeros(1), torch.min(rising, falling)).transpose(0, 1)
        if self.shape == "rectangular":
            inside = self.freqs.ge(centre - band) * self.freqs.le(centre + band)
            return inside.float().transpose(0, 1)
        spread = band / torch.tensor(2)
        return torch.exp(-0.5 * ((self.freqs - centre) / spread) ** 2).transpose(0, 1)

    def to_db(self, x):
        db = self.db_gain * torch.log10(torch.clamp(x, min=self.amin))
        db -= self.db_gain * self.db_ref
        floor = db.amax(dim=(-2, -1)) - self.top_db  # per sequence
        return torch.max(db, floor.view(db.shape[0], 1, 1))

    def forward(self, power):
        shape = power.shape
        if power.dim() == 4:  # (batch, time, bins, channels)
            power = power.permute(0, 3, 1, 2).reshape(-1, shape[1], shape[2])
        mel = torch.matmul(power, self.filters())
        if self.log_mel:
            mel = self.to_db(mel)
        if len(shape) == 4:
            mel = mel.reshape(shape[0], shape[3], *mel.shape[1:]).permute(0, 2, 3, 1)
        return mel


class DCT(torch.nn.Module):
    def __init__(self, n_in, n_out=20, ortho=True):
        super().__init__()
        if n_out > n_in:
            raise ValueError(f"{n_out} DCT coefficients of {n_in} inputs")
        k = torch.arange(float(n_out))[:, None]
        basis = torch.cos(math.pi / n_in * (torch.arange(float(n_in)) + 0.5) * k)
        if ortho:
            basis[0] *= 1.0 / math.sqrt(2.0)
            basis *= math.sqrt(2.0 / n_in)
        else:
            basis *= 2.0
        self.matrix = basis.t()

    def forward(self, x):
        return torch.matmul(x, self.matrix.to(x.device))


class DeltaFeatures(torch.nn.Module):
    \"\"\"Time derivatives by a least-squares slope over a window, edges repeated.\"\"\"

    def __init__(self, n_features, window=5):
        super().__init__()
        self.half = (window - 1) // 2
        self.norm = self.half * (self.half + 1) * (2 * self.half + 1) / 3
        taps = torch.arange(-self.half, self.half + 1, dtype=torch.float32)
        self.register_buffer("kernel", taps.repeat(n_features, 1, 1))

    def forward(self, x):
        x = torch.nn.functional.pad(x.transpose(1, 2), (self.half, self.half), mode="replicate")
        slope = torch.nn.functional.conv1d(x, self.kernel.to(x.device), groups=x.shape[1])
        return (slope / self.norm).transpose(1, 2)


class FrameContext(torch.nn.Module):
    \"\"\"Each frame with `left` frames before and `right` after, stacked on the features.\"\"\"

    def __init__(self, left=0, right=0):
        super().__init__()
        self.left, self.right = left, right
        self.width, self.span = left + right + 1, 2 * max(left, right) + 1
        self.kernel = torch.eye(self.width, self.span)
        if right > left:
            self.kernel = torch.roll(self.kernel, right - left, 1)
        self.grouped = None

    def forward(self, x):
        x = x.transpose(1, 2)
        if self.grouped is None:  # one copy of the kernel per feature, built on first use
            copies = self.kernel.repeat(x.shape[1], 1, 1)
            self.grouped = copies.view(x.shape[1] * self.width, self.span).unsqueeze(1)
        out = torch.nn.functional.conv1d(
            x, self.grouped.to(x.device), groups=x.shape[1], padding=max(self.left, self.right)
        )
        return out.transpose(1, 2)


class FeatureNormalization(torch.nn.Module):
    def __init__(self, kind="global", avg_factor=None, update_until_epoch=3, eps=1e-10):
        super().__init__()
        self.kind, self.avg_factor, self.until, self.eps = kind, avg_factor, update_until_epoch, eps
        self.glob_mean, self.glob_std = torch.tensor([0]), torch.tensor([0])
        self.count = 0

    def stats(self, x):
        mean = torch.mean(x, dim=0).detach().data
        std = torch.std(x, dim=0).detach().data
        return mean, torch.max(std, self.eps * torch.ones_like(std))

    def forward(self, x, lengths, epoch=0):
        means, stds = [], []
        for i in range(x.shape[0]):
            valid = torch.round(lengths[i] * x.shape[1]).int()  # padded frames left out
            mean, std = self.stats(x[i, 0:valid, ...])
            means.append(mean)
            stds.append(std)
            if self.kind == "sentence":
                x[i] = (x[i] - mean.data) / std.data
        if self.kind != "global":
            return x
        mean, std = torch.mean(torch.stack(means), dim=0), torch.mean(torch.stack(stds), dim=0)
        if self.training:
            if self.count == 0:
                self.glob_mean, self.glob_std = mean, std
            elif epoch < self.until:
                w = 1 / (self.count + 1) if self.avg_factor is None else self.avg_factor
                self.glob_mean = (1 - w) * self.glob_mean + w * mean
                self.glob_std = (1 - w) * self.glob_std + w * std
            self.count += 1
        return (x - self.glob_mean.data) / self.glob_std.data
"""

SPEECH_DRIVER = """
# the test's driver: 8 kHz audio, 8 ms windows (64 samples) every 4 ms (32 samples)
stft = STFT(rate=8000, win_ms=8, hop_ms=4, n_fft=64)
istft = ISTFT(sample_rate=8000, win_ms=8, hop_ms=4)
two_channels = torch.randn(2, 320, 2)
spec = stft(two_channels)
record.append(spec.numpy())
record.append(istft(spec, length=320).numpy())
for kind in ("triangular", "rectangular", "gaussian"):
    bank = MelFilterbank(10, n_fft=64, sample_rate=8000, f_max=4000, shape=kind, top_db=30.0)
    record.append(bank(magnitude(spec, power=1)).numpy())
record.append(magnitude(spec, power=0.5, log=True).numpy())

clips = torch.randn(4, 480)
lengths = torch.tensor([1.0, 0.7, 0.9, 0.55])
keywords = torch.tensor([2, 0, 1, 2])
mel = MelFilterbank(n_mels=10, n_fft=64, sample_rate=8000, f_max=4000, top_db=40.0, freeze=False)
front = [DCT(10, n_out=6), DeltaFeatures(6), FrameContext(left=0, right=2)]
per_sentence, running = FeatureNormalization("sentence"), FeatureNormalization("global")
head = torch.nn.Linear(3 * 6 * 3, 3)
initialize(head)
optimizer = torch.optim.Adam([*mel.parameters(), *head.parameters()], lr=1e-3)
record.append(sorted(name for name, _ in mel.named_parameters()))
for step in range(4):
    cepstra = front[0](mel(magnitude(stft(clips), power=1)))
    d1 = front[1](cepstra)
    feats = torch.cat([cepstra, d1, front[1](d1)], dim=2)
    feats = running(per_sentence(feats, lengths), lengths)
    loss = torch.nn.functional.cross_entropy(head(front[2](feats)).mean(dim=1), keywords)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(mel, head))
record.append(running.glob_mean.numpy())
record.append(running.count)
"""

SPEECH_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    optimizer.zero_grad()\n", ""),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_speech_features_and_a_learnable_filterbank_train_as_torch(capsys):
    """The stereo STFT in its real form and its ISTFT, the three frozen filter shapes in dB on
    two channels, the log magnitude; four Adam steps through the learnable filterbank, DCT,
    deltas, both normalizations and the context window: losses, filter centres, bands and
    weights."""
    (theirs, ours), _ = runs_with_draws(
        SPEECH_FEATURES_SOURCE + SPEECH_DRIVER, SPEECH_STEPS, capsys, 33001,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0].shape == (2, 11, 33, 2, 2)
    assert theirs[2].shape == (2, 11, 10, 2)  # the filterbank's two channels
    assert theirs[6] == ["band", "f_central"]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
