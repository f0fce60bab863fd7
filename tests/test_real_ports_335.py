"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a log-mel front end written in torch.

- Whisper's audio front end as ``whisper/audio.py`` writes it (the stored version that reads
  files by ``soundfile``; the long docstrings shortened), with ``whisper/utils.py``'s
  ``exact_div``: ``pad_or_trim`` on tensors (``torch.is_tensor``, ``index_select`` of an
  ``arange``, ``F.pad`` of a flattened reversed list of pad widths, on the last and the first
  axis) and on NumPy arrays, ``mel_filters`` under ``functools.lru_cache`` keyed by the
  audio's ``device`` (``np.load`` of ``assets/mel_filters.npz`` next to ``__file__``,
  ``torch.from_numpy(...).to(device)``), and ``log_mel_spectrogram`` (``torch.from_numpy``
  of a NumPy wave, ``padding``, ``torch.hann_window(N_FFT).to(audio.device)``, the complex
  ``torch.stft`` of a 1-d and a 2-d input, ``stft[..., :-1].abs() ** 2``, ``filters @
  magnitudes``, ``torch.clamp(..., min=1e-10).log10()``, ``torch.maximum`` against
  ``log_spec.max() - 8.0``); the gradient of the spectrogram's mean in the wave.

The filterbank file is written by the test: Slaney-style triangular mel filters computed in
NumPy (librosa's ``filters.mel(sr=16000, n_fft=400, n_mels=80)`` formula; librosa is not
installed). The lines changed: the ``import`` lines (``soundfile``, ``librosa`` and the
package's relative import) and the gradient lines; ``torch.randn`` draws one shared stream.
"""

from __future__ import annotations

import numpy as np

from real_ports import assert_records_agree, runs_with_draws

WHISPER_AUDIO_SOURCE = r'''import os
from functools import lru_cache
from typing import Optional, Union

import numpy as np
import torch
import torch.nn.functional as F


# whisper/utils.py
def exact_div(x, y):
    assert x % y == 0
    return x // y


# whisper/audio.py
# hard-coded audio hyperparameters
SAMPLE_RATE = 16000
N_FFT = 400
N_MELS = 80
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples in a 30-second chunk
N_FRAMES = exact_div(N_SAMPLES, HOP_LENGTH)  # 3000 frames in a mel spectrogram input

N_SAMPLES_PER_TOKEN = HOP_LENGTH * 2  # the initial convolutions has stride 2
FRAMES_PER_SECOND = exact_div(SAMPLE_RATE, HOP_LENGTH)  # 10ms per audio frame
TOKENS_PER_SECOND = exact_div(SAMPLE_RATE, N_SAMPLES_PER_TOKEN)  # 20ms per audio token


def load_audio(file: str, sr: int = SAMPLE_RATE):
    """
    Open an audio file and read as mono waveform, resampling as necessary
    """
    try:
        # Load the audio file and resample it as necessary.
        # Requires the `soundfile` package to be installed.
        audio, original_sr = sf.read(file)
        if original_sr != sr:
            audio = librosa.resample(audio, original_sr, sr)
    except Exception as e:
        raise RuntimeError(f"Failed to load audio: {str(e)}") from e

    return audio.astype(np.float32)


def pad_or_trim(array, length: int = N_SAMPLES, *, axis: int = -1):
    """
    Pad or trim the audio array to N_SAMPLES, as expected by the encoder.
    """
    if torch.is_tensor(array):
        if array.shape[axis] > length:
            array = array.index_select(
                dim=axis, index=torch.arange(length, device=array.device)
            )

        if array.shape[axis] < length:
            pad_widths = [(0, 0)] * array.ndim
            pad_widths[axis] = (0, length - array.shape[axis])
            array = F.pad(array, [pad for sizes in pad_widths[::-1] for pad in sizes])
    else:
        if array.shape[axis] > length:
            array = array.take(indices=range(length), axis=axis)

        if array.shape[axis] < length:
            pad_widths = [(0, 0)] * array.ndim
            pad_widths[axis] = (0, length - array.shape[axis])
            array = np.pad(array, pad_widths)

    return array


@lru_cache(maxsize=None)
def mel_filters(device, n_mels: int = N_MELS) -> torch.Tensor:
    """
    load the mel filterbank matrix for projecting STFT into a Mel spectrogram.
    """
    assert n_mels == 80, f"Unsupported n_mels: {n_mels}"
    with np.load(
        os.path.join(os.path.dirname(__file__), "assets", "mel_filters.npz")
    ) as f:
        return torch.from_numpy(f[f"mel_{n_mels}"]).to(device)


def log_mel_spectrogram(
    audio: Union[str, np.ndarray, torch.Tensor],
    n_mels: int = N_MELS,
    padding: int = 0,
    device: Optional[Union[str, torch.device]] = None,
):
    """
    Compute the log-Mel spectrogram of
    """
    if not torch.is_tensor(audio):
        if isinstance(audio, str):
            audio = load_audio(audio)
        audio = torch.from_numpy(audio)

    if device is not None:
        audio = audio.to(device)
    if padding > 0:
        audio = F.pad(audio, (0, padding))
    window = torch.hann_window(N_FFT).to(audio.device)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2

    filters = mel_filters(audio.device, n_mels)
    mel_spec = filters @ magnitudes

    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    log_spec = (log_spec + 4.0) / 4.0
    return log_spec
'''

WHISPER_AUDIO_DRIVER = r"""
# the test's driver: a NumPy wave and a batch of tensors, padded or trimmed, their log-mel
# spectrograms, and the gradient of one with respect to its wave
wave = (0.1 * np.random.randn(SAMPLE_RATE // 2)).astype(np.float32)
record.append(pad_or_trim(wave, 7000))
record.append(pad_or_trim(wave, 9000))
record.append(log_mel_spectrogram(wave).numpy())
record.append(log_mel_spectrogram(wave, padding=480, device="cpu").numpy())
record.append(mel_filters.cache_info().hits)
batch = torch.randn(2, 7200) * 0.05
record.append(pad_or_trim(batch, 6400).numpy())
record.append(pad_or_trim(batch, 8000).numpy())
record.append(pad_or_trim(batch.t(), 3, axis=0).numpy())
record.append(log_mel_spectrogram(pad_or_trim(batch, 8000)).numpy())
quiet = (torch.randn(4000) * 0.05).requires_grad_()
spec = log_mel_spectrogram(quiet)
spec.mean().backward()
record.append(spec.detach().numpy())
record.append(quiet.grad.numpy())
"""

WHISPER_AUDIO_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("spec.mean().backward()", "grads = spec.mean().backward()"),
    ("quiet.grad.numpy()", "quiet.grad(grads).numpy()"),
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
        tmp_path / "assets" / "mel_filters.npz", mel_80=slaney_mel_filters(16000, 400, 80)
    )
    (theirs, ours), _ = runs_with_draws(
        WHISPER_AUDIO_SOURCE + WHISPER_AUDIO_DRIVER, WHISPER_AUDIO_STEPS, capsys, 33501,
        __file__=str(tmp_path / "audio.py"),
    )  # fmt: skip
    assert theirs[2].shape == (80, 50) and theirs[4] == 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
