"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a log-mel front end written in torch.

- A speech front end written here in the style of Whisper's ``audio.py``: cutting or padding to
  a fixed length on tensors (``torch.is_tensor``, ``index_select`` of an ``arange``, ``F.pad``
  of a flattened reversed list of pad widths, on the last and the first axis) and on NumPy
  arrays (``take(indices=range(n), axis=...)``, ``np.pad``); a filterbank under
  ``functools.lru_cache`` keyed by the audio's ``device`` (``np.load`` of an ``.npz`` next to
  ``__file__`` in a ``with`` block, ``torch.from_numpy(...).to(device)``); the log-mel
  spectrogram (``torch.from_numpy`` of a NumPy wave, ``.to("cpu")``, ``F.pad`` padding,
  ``torch.hann_window(n).to(wave.device)``, the complex ``torch.stft`` of a 1-d and a 2-d
  input, ``spectrum[..., :-1].abs() ** 2``, ``filters @ power``, ``torch.clamp(...,
  min=1e-10).log10()``, ``torch.maximum`` against ``logged.max() - 8.0``); the gradient of the
  spectrogram's mean in the wave.

The filterbank file is written by the test: Slaney-style triangular mel filters computed in
NumPy (librosa's ``filters.mel`` formula; librosa is not installed). The lines a port changes:
the ``import`` lines and the gradient lines; ``torch.randn`` draws one shared stream.
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, runs_with_draws

WHISPER_AUDIO_SOURCE = r"""import functools
import os

import numpy as np
import torch
from torch.nn import functional as F

RATE = 8000
WINDOW = 200  # 25 ms frames
STRIDE = 80  # every 10 ms
BANDS = 40


def fit_length(x, size, *, axis=-1):
    # cut or zero-pad `x` (a tensor or an ndarray) to `size` along `axis`
    if torch.is_tensor(x):
        if x.shape[axis] > size:
            x = x.index_select(dim=axis, index=torch.arange(size, device=x.device))
        elif x.shape[axis] < size:
            widths = [[0, 0] for _ in range(x.ndim)]
            widths[axis][1] = size - x.shape[axis]
            # F.pad lists (left, right) pairs from the last axis backwards
            x = F.pad(x, [w for pair in reversed(widths) for w in pair])
        return x
    if x.shape[axis] > size:
        return x.take(indices=range(size), axis=axis)
    missing = [(0, 0)] * x.ndim
    missing[axis] = (0, max(0, size - x.shape[axis]))
    return np.pad(x, missing)


@functools.lru_cache(maxsize=None)
def filterbank(device, bands=BANDS):
    path = os.path.join(os.path.dirname(__file__), "assets", "filters.npz")
    with np.load(path) as stored:
        return torch.from_numpy(stored[f"mel_{bands}"]).to(device)


def log_mel(wave, bands=BANDS, padding=0, device=None):
    if not torch.is_tensor(wave):
        wave = torch.from_numpy(wave)
    if device is not None:
        wave = wave.to(device)
    if padding:
        wave = F.pad(wave, (0, padding))
    taper = torch.hann_window(WINDOW).to(wave.device)
    spectrum = torch.stft(wave, WINDOW, STRIDE, window=taper, return_complex=True)
    power = spectrum[..., :-1].abs() ** 2  # the last frame is dropped
    mel = filterbank(wave.device, bands) @ power
    logged = torch.clamp(mel, min=1e-10).log10()
    logged = torch.maximum(logged, logged.max() - 8.0)  # an 80 dB floor
    return (logged + 4.0) / 4.0
"""

WHISPER_AUDIO_DRIVER = r"""
clip = (0.1 * np.random.randn(RATE // 4)).astype(np.float32)
record.append(fit_length(clip, 1500))
record.append(fit_length(clip, 2500))
record.append(log_mel(clip).numpy())
record.append(log_mel(clip, padding=240, device="cpu").numpy())
record.append(filterbank.cache_info().hits)

pair = torch.randn(2, 1800) * 0.05
record.append(fit_length(pair, 1600).numpy())
padded = fit_length(pair, 2000)
record.append(padded.numpy())
record.append(fit_length(pair.t(), 3, axis=0).numpy())
record.append(fit_length(pair[:1], 4, axis=0).numpy())
record.append(log_mel(padded).numpy())

signal = (0.05 * torch.randn(1200)).requires_grad_()
features = log_mel(signal)
features.mean().backward()
record.append(features.detach().numpy())
record.append(signal.grad.numpy())
"""

WHISPER_AUDIO_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("features.mean().backward()", "grads = features.mean().backward()"),
    ("signal.grad.numpy()", "signal.grad(grads).numpy()"),
]


def slaney_mel_filters(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    """librosa's ``filters.mel`` (Slaney's mel scale and area normalization), in NumPy."""

    def hz_to_mel(hz):
        hz = np.asarray(hz, dtype=np.float64)
        linear = hz / (200.0 / 3)
        log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(hz >= 1000.0, log_part, linear)

    def mel_to_hz(mel):
        mel = np.asarray(mel, dtype=np.float64)
        linear = mel * (200.0 / 3)
        log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
        return np.where(mel >= 15.0, log_part, linear)

    fft_freqs = np.linspace(0, sr / 2, 1 + n_fft // 2)
    mel_freqs = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    gaps = np.diff(mel_freqs)
    ramps = mel_freqs[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / gaps[:-1, None]
    upper = ramps[2:] / gaps[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_freqs[2 : n_mels + 2] - mel_freqs[:n_mels]))[:, None]
    return weights.astype(np.float32)


def test_whisper_log_mel_front_end_as_torch(capsys, tmp_path):
    """Waves padded and trimmed (NumPy and tensors, either axis), their log-mel
    spectrograms (1-d, padded, batched), the filter cache's hits, and the gradient of a
    spectrogram's mean in its wave."""
    (tmp_path / "assets").mkdir()
    np.savez_compressed(
        tmp_path / "assets" / "filters.npz", mel_40=slaney_mel_filters(8000, 200, 40)
    )
    (theirs, ours), _ = runs_with_draws(
        WHISPER_AUDIO_SOURCE + WHISPER_AUDIO_DRIVER, WHISPER_AUDIO_STEPS, capsys, 33501,
        __file__=str(tmp_path / "audio.py"),
    )  # fmt: skip
    assert theirs[2].shape == (40, 25) and theirs[4] == 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
