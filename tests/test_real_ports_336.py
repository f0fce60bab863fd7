"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
spectrograms computed by convolution.

- Spectral layers written here in the style of KinWaiCheuk/nnAudio: a ``torch.__version__`` gate
  around ``import torch.fft``; Fourier kernels built in NumPy with ``scipy.signal.get_window``
  (a Hann window on every bin, a Hamming window on a linear frequency scale between ``fmin``
  and ``fmax``) and registered by name as buffers or ``nn.Parameter``\\ s
  (``register_buffer``/``register_parameter``); inputs of one, two or three axes broadcast to
  ``(batch, 1, time)``; ``nn.ReflectionPad1d``/``nn.ConstantPad1d`` centring; the spectrum by two
  strided ``conv1d``\\ s, returned complex (``torch.stack((real, -imag), -1)``), as a magnitude
  (``sqrt``, ``+ 1e-8`` when trainable) or as an ``atan2`` phase; the inverse by extending the
  one-sided bins into a flipped copy whose imaginary part is negated in place, two ``conv2d``\\ s,
  an in-place ``/=``, overlap-add by ``fold`` into a ``(1, length)`` image, the window's sum of
  squares by ``fold`` of a repeated window cached with ``hasattr``, and the in-place
  normalisation ``wave[:, mask] = wave[:, mask].div(wsum[mask])`` by a boolean mask; a
  separate inverse layer; a Mel layer (NumPy Slaney filters, ``torch.matmul``, trainable
  filters and kernels); MFCCs by a power-to-dB of ``torch.max`` against registered buffers and
  ``flatten(1).max(1)[0]`` with an in-place ``-=``, and a DCT by ``torch.fft.fft`` of the
  even-odd reordering (``flip([2])``), ``torch.view_as_real`` and in-place ``V[:, :, 0] /=``;
  ``extra_repr`` in ``str(layer)``; two Adam steps fitting a trainable Mel layer to another
  signal's log-Mel spectrogram.

Compared against torch: the layers' reprs, the complex, magnitude and phase spectra, the
inverses (with and without a length, and the inverse layer), the Hamming spectrum, the MFCCs,
and the losses and parameters of training. The lines a port changes: the ``import`` lines
(``import torch.fft`` binds ``torch``), the version gate (retrograd's version is its own: the
line reads torch's, the one compared against), and the gradient lines; ``torch.randn`` draws
one shared stream.
"""

from __future__ import annotations

from real_ports import assert_records_agree, params_of, runs_with_draws

NNAUDIO_SOURCE = r"""import sys

import numpy as np
import torch
import torch.nn as nn
from scipy import signal as scipy_signal
from torch.nn.functional import conv1d, conv2d
from torch.nn.functional import fold

RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
if RELEASE >= (1, 7):  # older releases had torch.rfft instead of the fft module
    import torch.fft

    assert "torch.fft" in sys.modules


def to_batch(x):
    # (time,), (batch, time) or (batch, 1, time) -> (batch, 1, time)
    if x.dim() == 1:
        return x[None, None, :]
    if x.dim() == 2:
        return x[:, None, :]
    return x


# ---- NumPy design of the kernels and filters ------------------------------------------
def fourier_kernels(n_fft, window="hann", scale="no", fmin=50.0, fmax=6000.0, sr=16000):
    bins = n_fft // 2 + 1
    if scale == "linear":
        cycles = np.linspace(fmin, fmax, bins) * n_fft / sr
    else:
        cycles = np.arange(bins, dtype=np.float64)
    taper = scipy_signal.get_window(window, n_fft, fftbins=True)
    phase = 2 * np.pi * cycles[:, None] * np.arange(n_fft)[None, :] / n_fft
    sin = (np.sin(phase) * taper)[:, None, :].astype(np.float32)
    cos = (np.cos(phase) * taper)[:, None, :].astype(np.float32)
    return torch.tensor(sin), torch.tensor(cos), torch.tensor(taper.astype(np.float32))


def slaney_mel(sr, n_fft, n_mels, fmin=0.0, fmax=None):
    fmax = sr / 2 if fmax is None else fmax
    knee, step = 1000.0, 200.0 / 3
    log_step = np.log(6.4) / 27.0

    def to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        above = knee / step + np.log(np.maximum(f, 1e-10) / knee) / log_step
        return np.where(f >= knee, above, f / step)

    def to_hz(m):
        return np.where(m >= knee / step, knee * np.exp(log_step * (m - knee / step)), m * step)

    edges = to_hz(np.linspace(to_mel(fmin), to_mel(fmax), n_mels + 2))
    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    rising = (freqs[None, :] - edges[:-2, None]) / (edges[1:-1] - edges[:-2])[:, None]
    falling = (edges[2:, None] - freqs[None, :]) / (edges[2:] - edges[1:-1])[:, None]
    tri = np.maximum(0, np.minimum(rising, falling))
    return (tri * (2.0 / (edges[2:] - edges[:-2]))[:, None]).astype(np.float32)


# ---- overlap-add helpers ----------------------------------------------------------------
def overlap_add(frames, hop):
    size, count = frames.shape[1], frames.shape[2]
    total = size + hop * (count - 1)
    return fold(frames, (1, total), kernel_size=(1, size), stride=hop).flatten(1)


def window_energy(taper, count, hop):
    stacked = taper.unsqueeze(-1).repeat((1, count)).unsqueeze(0)
    total = stacked.shape[1] + hop * (count - 1)
    return fold(stacked**2, (1, total), kernel_size=(1, stacked.shape[1]), stride=hop).flatten()


def two_sided(spec):
    # rebuild bins n_fft//2+1 .. n_fft-1 as the mirrored conjugates of 1 .. n_fft//2-1
    mirror = spec[:, 1:-1].flip(1)
    mirror[:, :, :, 1] = -mirror[:, :, :, 1]
    return torch.cat((spec, mirror), 1)


class Resynthesis(nn.Module):
    # shared by the forward layer's inverse and the stand-alone inverse layer
    def synthesize(self, spec, cos_k, sin_k, onesided=True, length=None, refresh=True):
        if onesided:
            spec = two_sided(spec)
        frames = conv2d(spec[..., 0].unsqueeze(1), cos_k) - conv2d(spec[..., 1].unsqueeze(1), sin_k)
        frames = frames.squeeze(-2) * self.taper
        frames /= self.n_fft
        wave = overlap_add(frames, self.hop)
        if refresh or not hasattr(self, "wsum"):
            self.wsum = window_energy(self.taper.flatten(), spec.shape[2], self.hop)
            self.covered = self.wsum > 1e-10
        wave[:, self.covered] = wave[:, self.covered].div(self.wsum[self.covered])
        edge = self.n_fft // 2
        if length is None:
            return wave[:, edge:-edge]
        return wave[:, edge : edge + length]

    def register_inverse_kernels(self, trainable=False):
        n = self.n_fft
        angle = 2 * np.pi * np.outer(np.arange(n), np.arange(n)) / n
        for name, table in (("inv_cos", np.cos(angle)), ("inv_sin", np.sin(angle))):
            kernel = torch.tensor(table.astype(np.float32))[:, None, :, None]
            if trainable:
                self.register_parameter(name, nn.Parameter(kernel))
            else:
                self.register_buffer(name, kernel)


class Spectrogram(Resynthesis):
    def __init__(self, n_fft=32, hop=8, window="hann", scale="no", fmin=50.0, fmax=6000.0,
                 sr=16000, pad_mode="reflect", output="Complex", trainable=False, inverse=False):
        super().__init__()
        self.n_fft, self.hop, self.pad_mode, self.output = n_fft, hop, pad_mode, output
        self.trainable, self.scale = trainable, scale
        sin, cos, taper = fourier_kernels(n_fft, window, scale, fmin, fmax, sr)
        for name, kernel in (("k_sin", sin), ("k_cos", cos)):
            if trainable:
                self.register_parameter(name, nn.Parameter(kernel))
            else:
                self.register_buffer(name, kernel)
        self.register_buffer("taper", taper[None, :, None])
        if inverse:
            self.register_inverse_kernels()

    def extra_repr(self):
        return f"n_fft={self.n_fft}, hop={self.hop}, scale={self.scale}, trainable={self.trainable}"

    def forward(self, x, output=None):
        output = output or self.output
        x = to_batch(x)
        if self.pad_mode == "reflect":
            x = nn.ReflectionPad1d(self.n_fft // 2)(x)
        else:
            x = nn.ConstantPad1d(self.n_fft // 2, 0)(x)
        imag = conv1d(x, self.k_sin, stride=self.hop)
        real = conv1d(x, self.k_cos, stride=self.hop)
        if output == "Magnitude":
            power = real.pow(2) + imag.pow(2)
            return torch.sqrt(power + 1e-8) if self.trainable else torch.sqrt(power)
        if output == "Phase":
            return torch.atan2(-imag + 0.0, real)  # (+ 0.0 turns -0.0 into 0.0)
        return torch.stack((real, -imag), -1)

    def inverse(self, spec, onesided=True, length=None, refresh=True):
        if not hasattr(self, "inv_cos"):
            raise NameError("built without inverse=True")
        return self.synthesize(spec, self.inv_cos, self.inv_sin, onesided, length, refresh)


class InverseSpectrogram(Resynthesis):
    def __init__(self, n_fft=32, hop=8, window="hann"):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        taper = scipy_signal.get_window(window, n_fft, fftbins=True).astype(np.float32)
        self.register_buffer("taper", torch.tensor(taper)[None, :, None])
        self.register_inverse_kernels()

    def forward(self, spec, onesided=False, length=None):
        return self.synthesize(spec, self.inv_cos, self.inv_sin, onesided, length)


class MelLayer(nn.Module):
    def __init__(self, sr=16000, n_fft=32, n_mels=10, hop=8, power=2.0, trainable=False):
        super().__init__()
        self.power, self.n_mels = power, n_mels
        self.stft = Spectrogram(n_fft, hop, output="Magnitude", trainable=trainable)
        basis = torch.tensor(slaney_mel(sr, n_fft, n_mels))
        if trainable:
            self.register_parameter("mel_basis", nn.Parameter(basis))
        else:
            self.register_buffer("mel_basis", basis)

    def extra_repr(self):
        return f"n_mels={self.n_mels}, power={self.power}"

    def forward(self, x):
        return torch.matmul(self.mel_basis, self.stft(to_batch(x)) ** self.power)


class Cepstrum(nn.Module):
    def __init__(self, n_mfcc=6, top_db=80.0, **mel):
        super().__init__()
        self.n_mfcc, self.top_db = n_mfcc, top_db
        self.mel = MelLayer(**mel)
        self.register_buffer("amin", torch.tensor([1e-10]))
        self.register_buffer("ref", torch.abs(torch.tensor([1.0])))

    def extra_repr(self):
        return f"n_mfcc={self.n_mfcc}"

    def to_db(self, power):
        db = 10.0 * torch.log10(torch.max(power, self.amin))
        db -= 10.0 * torch.log10(torch.max(self.amin, self.ref))
        loudest = db.flatten(1).max(1)[0].unsqueeze(1).unsqueeze(1)
        return torch.max(db, loudest - self.top_db)

    @staticmethod
    def dct_ortho(x):
        x = x.permute(0, 2, 1)  # the DCT runs along the Mel axis
        n = x.shape[-1]
        reordered = torch.cat([x[:, :, ::2], x[:, :, 1::2].flip([2])], dim=2)
        spectrum = torch.view_as_real(torch.fft.fft(reordered))
        angle = -torch.arange(n, dtype=x.dtype, device=x.device)[None, :] * np.pi / (2 * n)
        out = spectrum[:, :, :, 0] * torch.cos(angle) - spectrum[:, :, :, 1] * torch.sin(angle)
        out[:, :, 0] /= np.sqrt(n) * 2
        out[:, :, 1:] /= np.sqrt(n / 2) * 2
        return (2 * out).permute(0, 2, 1)

    def forward(self, x):
        return self.dct_ortho(self.to_db(self.mel(x)))[:, : self.n_mfcc, :]
"""

NNAUDIO_DRIVER = r"""
signal = torch.randn(2, 160)
stft = Spectrogram(n_fft=32, hop=8, inverse=True)
spec = stft(signal)
record.append(str(stft))
record.append(spec.numpy())
record.append(stft(signal, output="Magnitude").numpy())
# (the DC and Nyquist bins, and the first frame, symmetric about its centre, have a zero
# imaginary part whose sign is rounding's: their phase is +-pi by chance)
record.append(stft(signal, output="Phase")[:, 1:-1, 1:].numpy())
record.append(stft.inverse(spec, length=160).numpy())
record.append(stft.inverse(spec, refresh=False).numpy())
record.append(InverseSpectrogram(n_fft=32, hop=8)(spec, onesided=True, length=160).numpy())
hamming = Spectrogram(16, 4, window="hamming", scale="linear", fmin=100.0, pad_mode="constant")
record.append(hamming(signal[0], output="Magnitude").numpy())
mfcc = Cepstrum(n_mfcc=5, n_mels=10)
record.append(str(mfcc).splitlines())
record.append(mfcc(signal.unsqueeze(1)).numpy())

reference = torch.log(MelLayer()(torch.randn(2, 160)) + 1e-6)
learner = MelLayer(trainable=True)
optimizer = torch.optim.Adam(learner.parameters(), lr=1e-3)
for step in range(2):
    loss = (torch.log(learner(signal) + 1e-6) - reference).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(learner))
"""

NNAUDIO_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("    import torch.fft\n", "    import retrograd.fft\n"),
    ('torch.__version__.split("+")', '"2.13.0".split("+")'),
    ("    optimizer.zero_grad()\n", ""),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_nnaudio_stft_istft_mel_and_mfcc_as_torch(capsys):
    """The layers' reprs, the complex, magnitude and phase spectra, both inverses (with and
    without a length, the cached window sum, and the inverse layer), a Hamming spectrum on a
    linear frequency scale, MFCCs, and two steps of a trainable Mel layer: losses and
    parameters."""
    (theirs, ours), _ = runs_with_draws(
        NNAUDIO_SOURCE + NNAUDIO_DRIVER, NNAUDIO_STEPS, capsys, 33601, params_of=params_of
    )
    assert theirs[0].startswith("Spectrogram(n_fft=32")
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
