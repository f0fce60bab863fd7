# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
signal processing with complex spectra, torch used as an array library.

- torchaudio's functional DSP as ``src/torchaudio/functional/functional.py`` writes it (the
  docstrings left out): ``spectrogram`` with ``power=None`` (the complex ``torch.stft`` of a
  ``hann_window``, ``spec_f /= window.pow(2.0).sum().sqrt()`` in place on a complex tensor,
  ``spec_f.reshape(shape[:-1] + spec_f.shape[-2:])``) and with ``power=2``,
  ``_get_spec_norms``, ``_get_complex_dtype`` (``torch.cfloat``/``torch.cdouble``),
  ``griffinlim`` (``torch.full(..., 1, dtype=complex)`` phases, ``torch.istft`` of
  ``specgram * angles``, ``tprev.mul_(momentum)`` on a complex tensor, ``angles.div(angles
  .abs().add(1e-16))``), ``mu_law_encoding``/``mu_law_decoding`` (``torch.sign``,
  ``torch.log1p`` of a 0-d tensor, a float-to-int64 cast), ``phase_vocoder`` (``torch.real(
  ...).dtype``, ``torch.arange(0, n, rate, dtype=...)``, ``time_steps % 1.0``,
  ``.angle()``, ``F.pad`` of a complex tensor, ``index_select`` by ``.long()`` indices,
  ``torch.round``, ``torch.cumsum``, ``torch.polar``), ``mask_along_axis_iid`` (the draws
  ``torch.rand(shape[:-2])``, ``.long()[..., None, None]`` masks, ``masked_fill``),
  ``compute_deltas`` (a ``replicate`` ``F.pad``, ``arange(...).repeat(c, 1, 1)`` kernel and a
  grouped ``conv1d``) and ``detect_pitch_frequency`` (``_compute_nccf``'s ``unfold`` frames and
  ``torch.linalg.vector_norm``, ``_combine_max``'s ``mask * a[1] + ~mask * b[1]`` of bool and
  int64, ``indices += lag_min`` in place on ``torch.max``'s indices, ``_median_smoothing``'s
  writes into ``indices[..., :pad_length]`` and ``torch.median`` over ``unfold`` windows).

The lines changed: the ``import`` lines; ``torch.rand`` draws one shared stream in both runs.
"""

from __future__ import annotations

import math

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, port, run_source

AUDIO_FUNCTIONAL_SOURCE = """
import math
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor


def spectrogram(
    waveform: Tensor,
    pad: int,
    window: Tensor,
    n_fft: int,
    hop_length: int,
    win_length: int,
    power: Optional[float],
    normalized: Union[bool, str],
    center: bool = True,
    pad_mode: str = "reflect",
    onesided: bool = True,
    return_complex: Optional[bool] = None,
) -> Tensor:
    if pad > 0:
        # TODO add "with torch.no_grad():" back when JIT supports it
        waveform = torch.nn.functional.pad(waveform, (pad, pad), "constant")

    frame_length_norm, window_norm = _get_spec_norms(normalized)

    # pack batch
    shape = waveform.size()
    waveform = waveform.reshape(-1, shape[-1])

    # default values are consistent with librosa.core.spectrum._spectrogram
    spec_f = torch.stft(
        input=waveform,
        n_fft=n_fft,
        hop_length=hop_length,
        win_length=win_length,
        window=window,
        center=center,
        pad_mode=pad_mode,
        normalized=frame_length_norm,
        onesided=onesided,
        return_complex=True,
    )

    # unpack batch
    spec_f = spec_f.reshape(shape[:-1] + spec_f.shape[-2:])

    if window_norm:
        spec_f /= window.pow(2.0).sum().sqrt()
    if power is not None:
        if power == 1.0:
            return spec_f.abs()
        return spec_f.abs().pow(power)
    return spec_f


def _get_spec_norms(normalized: Union[str, bool]):
    frame_length_norm, window_norm = False, False
    if isinstance(normalized, str):
        if normalized not in ["frame_length", "window"]:
            raise ValueError("Invalid normalized parameter: {}".format(normalized))
        if normalized == "frame_length":
            frame_length_norm = True
        elif normalized == "window":
            window_norm = True
    elif isinstance(normalized, bool):
        if normalized:
            window_norm = True
    else:
        raise TypeError("Input type not supported")
    return frame_length_norm, window_norm


def _get_complex_dtype(real_dtype: torch.dtype):
    if real_dtype == torch.double:
        return torch.cdouble
    if real_dtype == torch.float:
        return torch.cfloat
    if real_dtype == torch.half:
        return torch.complex32
    raise ValueError(f"Unexpected dtype {real_dtype}")


def griffinlim(
    specgram: Tensor,
    window: Tensor,
    n_fft: int,
    hop_length: int,
    win_length: int,
    power: float,
    n_iter: int,
    momentum: float,
    length: Optional[int],
    rand_init: bool,
) -> Tensor:
    if not 0 <= momentum < 1:
        raise ValueError("momentum must be in range [0, 1). Found: {}".format(momentum))

    momentum = momentum / (1 + momentum)

    # pack batch
    shape = specgram.size()
    specgram = specgram.reshape([-1] + list(shape[-2:]))

    specgram = specgram.pow(1 / power)

    # initialize the phase
    if rand_init:
        angles = torch.rand(specgram.size(), dtype=_get_complex_dtype(specgram.dtype), device=specgram.device)
    else:
        angles = torch.full(specgram.size(), 1, dtype=_get_complex_dtype(specgram.dtype), device=specgram.device)

    # And initialize the previous iterate to 0
    tprev = torch.tensor(0.0, dtype=specgram.dtype, device=specgram.device)
    for _ in range(n_iter):
        # Invert with our current estimate of the phases
        inverse = torch.istft(
            specgram * angles, n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window, length=length
        )

        # Rebuild the spectrogram
        rebuilt = torch.stft(
            input=inverse,
            n_fft=n_fft,
            hop_length=hop_length,
            win_length=win_length,
            window=window,
            center=True,
            pad_mode="reflect",
            normalized=False,
            onesided=True,
            return_complex=True,
        )

        # Update our phase estimates
        angles = rebuilt
        if momentum:
            angles = angles - tprev.mul_(momentum)
        angles = angles.div(angles.abs().add(1e-16))

        # Store the previous iterate
        tprev = rebuilt

    # Return the final phase estimates
    waveform = torch.istft(
        specgram * angles, n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window, length=length
    )

    # unpack batch
    waveform = waveform.reshape(shape[:-2] + waveform.shape[-1:])

    return waveform


def mu_law_encoding(x: Tensor, quantization_channels: int) -> Tensor:
    mu = quantization_channels - 1.0
    if not x.is_floating_point():
        x = x.to(torch.float)
    mu = torch.tensor(mu, dtype=x.dtype)
    x_mu = torch.sign(x) * torch.log1p(mu * torch.abs(x)) / torch.log1p(mu)
    x_mu = ((x_mu + 1) / 2 * mu + 0.5).to(torch.int64)
    return x_mu


def mu_law_decoding(x_mu: Tensor, quantization_channels: int) -> Tensor:
    mu = quantization_channels - 1.0
    if not x_mu.is_floating_point():
        x_mu = x_mu.to(torch.float)
    mu = torch.tensor(mu, dtype=x_mu.dtype)
    x = ((x_mu) / mu) * 2 - 1.0
    x = torch.sign(x) * (torch.exp(torch.abs(x) * torch.log1p(mu)) - 1.0) / mu
    return x


def phase_vocoder(complex_specgrams: Tensor, rate: float, phase_advance: Tensor) -> Tensor:
    if rate == 1.0:
        return complex_specgrams

    # pack batch
    shape = complex_specgrams.size()
    complex_specgrams = complex_specgrams.reshape([-1] + list(shape[-2:]))

    # Figures out the corresponding real dtype, i.e. complex128 -> float64, complex64 -> float32
    # Note torch.real is a view so it does not incur any memory copy.
    real_dtype = torch.real(complex_specgrams).dtype
    time_steps = torch.arange(0, complex_specgrams.size(-1), rate, device=complex_specgrams.device, dtype=real_dtype)

    alphas = time_steps % 1.0
    phase_0 = complex_specgrams[..., :1].angle()

    # Time Padding
    complex_specgrams = torch.nn.functional.pad(complex_specgrams, [0, 2])

    # (new_bins, freq, 2)
    complex_specgrams_0 = complex_specgrams.index_select(-1, time_steps.long())
    complex_specgrams_1 = complex_specgrams.index_select(-1, (time_steps + 1).long())

    angle_0 = complex_specgrams_0.angle()
    angle_1 = complex_specgrams_1.angle()

    norm_0 = complex_specgrams_0.abs()
    norm_1 = complex_specgrams_1.abs()

    phase = angle_1 - angle_0 - phase_advance
    phase = phase - 2 * math.pi * torch.round(phase / (2 * math.pi))

    # Compute Phase Accum
    phase = phase + phase_advance
    phase = torch.cat([phase_0, phase[..., :-1]], dim=-1)
    phase_acc = torch.cumsum(phase, -1)

    mag = alphas * norm_1 + (1 - alphas) * norm_0

    complex_specgrams_stretch = torch.polar(mag, phase_acc)

    # unpack batch
    complex_specgrams_stretch = complex_specgrams_stretch.reshape(shape[:-2] + complex_specgrams_stretch.shape[1:])
    return complex_specgrams_stretch


def _get_mask_param(mask_param: int, p: float, axis_length: int) -> int:
    if p == 1.0:
        return mask_param
    else:
        return min(mask_param, int(axis_length * p))


def mask_along_axis_iid(
    specgrams: Tensor,
    mask_param: int,
    mask_value: Union[float, Tensor],
    axis: int,
    p: float = 1.0,
) -> Tensor:
    dim = specgrams.dim()

    if dim < 3:
        raise ValueError(f"Spectrogram must have at least three dimensions ({dim} given).")

    if axis not in [dim - 2, dim - 1]:
        raise ValueError(
            f"Only Frequency and Time masking are supported (axis {dim-2} and axis {dim-1} supported; {axis} given)."
        )

    if not 0.0 <= p <= 1.0:
        raise ValueError(f"The value of p must be between 0.0 and 1.0 ({p} given).")

    mask_param = _get_mask_param(mask_param, p, specgrams.shape[axis])
    if mask_param < 1:
        return specgrams

    device = specgrams.device
    dtype = specgrams.dtype

    value = torch.rand(specgrams.shape[: (dim - 2)], device=device, dtype=dtype) * mask_param
    min_value = torch.rand(specgrams.shape[: (dim - 2)], device=device, dtype=dtype) * (specgrams.size(axis) - value)

    # Create broadcastable mask
    mask_start = min_value.long()[..., None, None]
    mask_end = (min_value.long() + value.long())[..., None, None]
    mask = torch.arange(0, specgrams.size(axis), device=device, dtype=dtype)

    # Per batch example masking
    specgrams = specgrams.transpose(axis, -1)
    # this aims to avoid CPU-GPU sync from upstream
    specgrams = (
        torch.where((mask >= mask_start) & (mask < mask_end), mask_value.repeat(*specgrams.shape), specgrams)
        if isinstance(mask_value, Tensor)
        else specgrams.masked_fill((mask >= mask_start) & (mask < mask_end), mask_value)
    )
    specgrams = specgrams.transpose(axis, -1)

    return specgrams


def compute_deltas(specgram: Tensor, win_length: int = 5, mode: str = "replicate") -> Tensor:
    device = specgram.device
    dtype = specgram.dtype

    # pack batch
    shape = specgram.size()
    specgram = specgram.reshape(1, -1, shape[-1])

    if win_length < 3:
        raise ValueError(f"Window length should be greater than or equal to 3. Found win_length {win_length}")

    n = (win_length - 1) // 2

    # twice sum of integer squared
    denom = n * (n + 1) * (2 * n + 1) / 3

    specgram = torch.nn.functional.pad(specgram, (n, n), mode=mode)

    kernel = torch.arange(-n, n + 1, 1, device=device, dtype=dtype).repeat(specgram.shape[1], 1, 1)

    output = torch.nn.functional.conv1d(specgram, kernel, groups=specgram.shape[1]) / denom

    # unpack batch
    output = output.reshape(shape)

    return output


def _compute_nccf(waveform: Tensor, sample_rate: int, frame_time: float, freq_low: int) -> Tensor:
    EPSILON = 10 ** (-9)

    # Number of lags to check
    lags = int(math.ceil(sample_rate / freq_low))

    frame_size = int(math.ceil(sample_rate * frame_time))

    waveform_length = waveform.size()[-1]
    num_of_frames = int(math.ceil(waveform_length / frame_size))

    p = lags + num_of_frames * frame_size - waveform_length
    waveform = torch.nn.functional.pad(waveform, (0, p))

    # Compute lags
    output_lag = []
    for lag in range(1, lags + 1):
        s1 = waveform[..., :-lag].unfold(-1, frame_size, frame_size)[..., :num_of_frames, :]
        s2 = waveform[..., lag:].unfold(-1, frame_size, frame_size)[..., :num_of_frames, :]

        output_frames = (
            (s1 * s2).sum(-1)
            / (EPSILON + torch.linalg.vector_norm(s1, ord=2, dim=-1)).pow(2)
            / (EPSILON + torch.linalg.vector_norm(s2, ord=2, dim=-1)).pow(2)
        )

        output_lag.append(output_frames.unsqueeze(-1))

    nccf = torch.cat(output_lag, -1)

    return nccf


def _combine_max(a: Tuple[Tensor, Tensor], b: Tuple[Tensor, Tensor], thresh: float = 0.99) -> Tuple[Tensor, Tensor]:
    mask = a[0] > thresh * b[0]
    values = mask * a[0] + ~mask * b[0]
    indices = mask * a[1] + ~mask * b[1]
    return values, indices


def _find_max_per_frame(nccf: Tensor, sample_rate: int, freq_high: int) -> Tensor:
    lag_min = int(math.ceil(sample_rate / freq_high))

    # Find near enough max that is smallest

    best = torch.max(nccf[..., lag_min:], -1)

    half_size = nccf.shape[-1] // 2
    half = torch.max(nccf[..., lag_min:half_size], -1)

    best = _combine_max(half, best)
    indices = best[1]

    # Add back minimal lag
    indices += lag_min
    # Add 1 empirical calibration offset
    indices += 1

    return indices


def _median_smoothing(indices: Tensor, win_length: int) -> Tensor:
    # Centered windowed
    pad_length = (win_length - 1) // 2

    # "replicate" padding in any dimension
    indices = torch.nn.functional.pad(indices, (pad_length, 0), mode="constant", value=0.0)

    indices[..., :pad_length] = torch.cat(pad_length * [indices[..., pad_length].unsqueeze(-1)], dim=-1)
    roll = indices.unfold(-1, win_length, 1)

    values, _ = torch.median(roll, -1)
    return values


def detect_pitch_frequency(
    waveform: Tensor,
    sample_rate: int,
    frame_time: float = 10 ** (-2),
    win_length: int = 30,
    freq_low: int = 85,
    freq_high: int = 3400,
) -> Tensor:
    # pack batch
    shape = list(waveform.size())
    waveform = waveform.reshape([-1] + shape[-1:])

    nccf = _compute_nccf(waveform, sample_rate, frame_time, freq_low)
    indices = _find_max_per_frame(nccf, sample_rate, freq_high)
    indices = _median_smoothing(indices, win_length)

    # Convert indices to frequency
    EPSILON = 10 ** (-9)
    freq = sample_rate / (EPSILON + indices.to(torch.float))

    # unpack batch
    freq = freq.reshape(shape[:-1] + list(freq.shape[-1:]))

    return freq
"""

AUDIO_STEPS = [
    (
        "import torch\nfrom torch import Tensor\n",
        "import retrograd as torch\nfrom retrograd import Tensor\n",
    ),
]


def _waves(rng, dtype):
    """Two channels of two chirps with noise (a pitch to detect), at 4 kHz."""
    sample_rate = 4000
    t = np.arange(1600) / sample_rate
    waves = np.stack(
        [
            np.sin(2 * np.pi * (220 + 100 * t) * t) + 0.05 * rng.standard_normal(t.size),
            0.6 * np.sin(2 * np.pi * 330 * t) + 0.3 * np.sin(2 * np.pi * 660 * t),
        ]
    )
    return waves.astype(dtype), sample_rate


def _run(fn, lib, waves, sample_rate, dtype):
    as_lib = getattr(lib, dtype)
    waveform = lib.tensor(waves, dtype=as_lib)
    window = lib.hann_window(64, dtype=as_lib)
    out = {}
    spec = fn["spectrogram"](waveform, 0, window, 64, 16, 64, None, True)
    out["spec_dtype"] = str(spec.dtype).split(".")[-1]
    out["spec"] = lib.view_as_real(spec)
    power = fn["spectrogram"](waveform, 4, window, 64, 16, 64, 2.0, "frame_length")
    out["power"] = power
    out["griffinlim"] = fn["griffinlim"](
        power, window, 64, 16, 64, 2.0, 4, 0.99, waves.shape[-1] + 8, False
    )
    encoded = fn["mu_law_encoding"](waveform, 256)
    out["mu_law"] = encoded
    out["mu_law_dtype"] = str(encoded.dtype).split(".")[-1]
    out["mu_law_back"] = fn["mu_law_decoding"](encoded, 256)
    complex_spec = fn["spectrogram"](waveform, 0, window, 64, 16, 64, None, False)
    advance = lib.linspace(0, math.pi * 16, 33, dtype=as_lib)[..., None]
    stretched = fn["phase_vocoder"](complex_spec, 1.3, advance)
    out["stretched"] = lib.view_as_real(stretched)
    out["slowed"] = lib.view_as_real(fn["phase_vocoder"](complex_spec, 0.7, advance))
    out["masked"] = fn["mask_along_axis_iid"](power.unsqueeze(0).repeat(3, 1, 1, 1), 12, 0.0, 3)
    out["masked_freq"] = fn["mask_along_axis_iid"](
        power.unsqueeze(0).repeat(2, 1, 1, 1), 9, -1.0, 2
    )
    out["deltas"] = fn["compute_deltas"](power)
    out["deltas_7"] = fn["compute_deltas"](power, win_length=7)
    out["pitch"] = fn["detect_pitch_frequency"](waveform, sample_rate, win_length=5, freq_low=100)
    return [v if isinstance(v, str) else v.numpy() for v in out.values()]


def _both(dtype):
    waves, sample_rate = _waves(np.random.default_rng(3120), dtype)
    results = []
    for lib in (torch, rg):
        source = (
            AUDIO_FUNCTIONAL_SOURCE if lib is torch else port(AUDIO_FUNCTIONAL_SOURCE, AUDIO_STEPS)
        )
        with SharedDraws(lib, 3121):
            results.append(_run(run_source(source, lib), lib, waves, sample_rate, dtype))
    theirs, ours = results
    assert len(ours) == len(theirs)
    for i, (mine, reference) in enumerate(zip(ours, theirs)):
        if isinstance(reference, str):
            assert mine == reference, i
        else:
            assert mine.dtype == reference.dtype and mine.shape == reference.shape, i
            # float32 results (``mu_law_decoding``'s ``.to(torch.float)`` among them) to float32;
            # the phase vocoder's float32 phases accumulate to ~4000 rad, where one float32
            # step is 5e-4 rad, so one last-place difference moves a value of magnitude 5 by
            # 2.5e-3 (its float64 run agrees to 1e-9)
            tolerance = 1e-9 if reference.dtype == np.float64 else 2e-5
            if reference.dtype == np.float32 and i in (7, 8):
                tolerance = 1e-2
            np.testing.assert_allclose(mine, reference, tolerance, tolerance, err_msg=str(i))


def test_torchaudio_functional_dsp_in_float32_as_torch():
    _both("float32")


def test_torchaudio_functional_dsp_in_float64_as_torch():
    _both("float64")
