"""Burn's ``burn_tensor::signal``: the real FFT of real signals as a pair of real tensors
(``torch.fft.rfft`` itself, of complex result, is :mod:`.fft`'s). Each
transform is a matmul with a cosine and a sine matrix over the tensor API, so both directions
are differentiable and their gradients are the adjoint maps, as torch's are. torch's ``stft``
is here too (``return_complex=False`` and ``True``), exported as ``rg.stft`` and
``Tensor.stft``, and its inverse ``istft`` (``rg.istft``).

>>> import retrograd as rg
>>> re, im = rg.signal.rfft(rg.tensor([1.0, 2.0, 3.0, 4.0]), 0)
>>> re.tolist(), im.tolist()
([10.0, -2.0, -2.0], [0.0, 2.0, 0.0])
>>> rg.signal.irfft(re, im, 0).tolist()
[1.0, 2.0, 3.0, 4.0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import signal_windows as windows
from .errors import DTypeError, InvalidArgumentError, ShapeError, guard, shape_text
from .tensor import FLOAT_DTYPES, Tensor, cat, stack, tensor, zeros
from .tensor._dispatch import int_argument, lift, normalize_dim, result_dtype
from .tensor.autocasting import autocast_op
from .tensor.complexes import view_as_complex, view_as_real

__all__ = ["irfft", "istft", "rfft", "stft", "windows"]


def rfft(signal: Tensor, dim: int, n: int | None = None) -> tuple[Tensor, Tensor]:
    """The real and imaginary parts of the one-sided DFT along ``dim`` (``n // 2 + 1``
    frequencies), the signal cut or zero-padded to ``n`` samples first (default: its length),
    as ``torch.fft.rfft(signal, n, dim)``."""
    fn = "signal.rfft"
    x = _float(fn, signal)
    d = normalize_dim(fn, dim, x.ndim)
    if n is None and x.shape[d] == 0:  # no samples have no spectrum (torch refuses them too)
        raise ShapeError(f"{fn}: a signal of 0 samples along dim {d} has no spectrum; pass n")
    x = _fit(x, d, x.shape[d] if n is None else _length(fn, n))
    size = x.shape[d]
    angle = 2 * np.pi * (np.outer(np.arange(size), np.arange(size // 2 + 1)) % size) / size
    moved = x.swap_dims(d, -1)
    re = moved.matmul(_matrix(x, np.cos(angle))).swap_dims(d, -1)
    im = moved.matmul(_matrix(x, -np.sin(angle))).swap_dims(d, -1)
    return re, im


def irfft(re: Tensor, im: Tensor, dim: int, n: int | None = None) -> Tensor:
    """The real signal of ``n`` samples (default ``2 * (frequencies - 1)``) whose one-sided
    spectrum along ``dim`` is ``re + i im``, the frequencies cut or zero-padded to ``n // 2 +
    1`` first, as ``torch.fft.irfft(re + i im, n, dim)`` (the imaginary parts at frequency 0
    and, for even ``n``, at ``n / 2`` do not count)."""
    fn = "signal.irfft"
    re, im = _float(fn, re), _float(fn, lift(re, im, fn))
    if re.shape != im.shape:
        raise ShapeError(
            f"{fn}: re and im must have one shape, got {shape_text(re.shape)} and "
            f"{shape_text(im.shape)}"
        )
    d = normalize_dim(fn, dim, re.ndim)
    size = 2 * (re.shape[d] - 1) if n is None else _length(fn, n)
    if size < 1:
        raise ShapeError(f"{fn}: {re.shape[d]} frequencies give no samples; pass n")
    bins = size // 2 + 1
    re, im = _fit(re, d, bins), _fit(im, d, bins)
    weight = np.full(bins, 2.0)
    weight[0] = 1.0
    if size % 2 == 0:
        weight[-1] = 1.0
    angle = 2 * np.pi * (np.outer(np.arange(bins), np.arange(size)) % size) / size
    cos = _matrix(re, weight[:, None] * np.cos(angle) / size)
    sin = _matrix(re, -weight[:, None] * np.sin(angle) / size)
    out = re.swap_dims(d, -1).matmul(cos) + im.swap_dims(d, -1).matmul(sin)
    return out.swap_dims(d, -1)


@autocast_op("stft")
def stft(input: Tensor, n_fft: int, hop_length: int | None = None, win_length: int | None = None,  # noqa: A002
         window: Any = None, center: bool = True, pad_mode: str = "reflect",
         normalized: bool = False, onesided: bool | None = None,
         return_complex: bool | None = None,
         align_to_window: bool | None = None) -> Tensor:  # fmt: skip
    """torch's ``stft`` in its real form (``return_complex=False``): the frames' DFTs with the
    real and imaginary parts in a last dimension of 2, shape ``(batch?, n_freq, n_frames, 2)``
    (HiFi-GAN's and Tacotron's mel spectrograms, ``torch.sqrt(spec.pow(2).sum(-1) + 1e-9)``).
    The frames (``unfold``), times the window, times a cosine and a sine matrix: gradients
    reach the signal and the window. ``return_complex=True`` gives the complex spectrum
    ``(batch?, n_freq, n_frames)``; as in torch, a real signal needs ``return_complex``
    given. A complex signal (or window) has the two-sided spectrum of every frame's FFT
    (``return_complex`` True by default; ``onesided=True`` refused, as torch refuses it)."""
    fn = "stft"
    signal = _float_or_complex(fn, input)
    complex_window = isinstance(window, Tensor) and window.is_complex()
    two_sided_only = signal.is_complex() or complex_window
    if return_complex is None:
        if not two_sided_only:
            raise InvalidArgumentError(
                f"{fn}: return_complex must be given for real inputs, as torch requires; "
                "return_complex=False gives the real and imaginary parts in a last dimension "
                "of 2"
            )
        return_complex = True  # a complex signal or window: torch's default
    if not isinstance(return_complex, bool):  # torch's argument parser takes a bool only
        raise DTypeError(f"{fn}: return_complex must be a bool, got {return_complex!r}")
    if two_sided_only and onesided:
        raise InvalidArgumentError(
            f"{fn}: Cannot have onesided output if window or input is complex"
        )
    if signal.ndim not in (1, 2):
        raise ShapeError(f"{fn}: expected a 1-d or 2-d input, got shape {shape_text(signal.shape)}")
    n_fft, hop_length, win_length = _frame_sizes(fn, n_fft, hop_length, win_length)
    if signal.ndim == 2 and signal.shape[0] == 0:  # torch's kernels refuse it, whatever pads
        raise ShapeError(
            f"{fn}: expected a batch of at least one signal, got shape {shape_text(signal.shape)}"
        )
    if window is None:
        window = _matrix(signal.real if signal.is_complex() else signal, np.ones(win_length))
    elif not isinstance(window, Tensor):  # torch takes a tensor or None only
        raise DTypeError(f"{fn}: window must be a tensor or None, got {type(window).__name__}")
    elif window.dtype != signal.dtype and (window.dtype in FLOAT_DTYPES or complex_window):
        # the result takes the promoted dtype of the signal and the window, as torch's
        signal = signal.to(result_dtype(str(signal.dtype), str(window.dtype)))
    batched = signal if signal.ndim == 2 else signal.unsqueeze(0)
    if center:
        if align_to_window is not None:
            raise InvalidArgumentError(
                f"{fn}: align_to_window should only be set when center=False, as torch "
                f"requires; got align_to_window={align_to_window!r} with center=True"
            )
        batched = _pad_ends(fn, batched, n_fft // 2, pad_mode)
    elif align_to_window is not None and not isinstance(align_to_window, bool):
        raise DTypeError(f"{fn}: align_to_window must be a bool, got {align_to_window!r}")
    elif align_to_window and win_length < n_fft:
        # frames start where the window starts (torch's): the signal padded with zeros by
        # the window's offset in the frame, so that the frames hold the window's samples
        offset = (n_fft - win_length) // 2
        length = batched.shape[-1]
        batched = _fit(
            _fit(batched.flip(-1), -1, length + offset).flip(-1), -1, length + n_fft - win_length
        )
    length = batched.shape[-1]
    if n_fft > length:
        raise ShapeError(
            f"{fn}: expected 0 < n_fft <= {length} (the padded input's length), got n_fft={n_fft}"
        )
    if window.shape != (win_length,):
        raise ShapeError(
            f"{fn}: expected a 1-d window of size win_length={win_length}, got shape "
            f"{shape_text(window.shape)}"
        )
    left = (n_fft - win_length) // 2  # a shorter window is centred in the frame, as torch's
    window = _fit(_fit(window.to(signal.dtype).flip(0), 0, win_length + left).flip(0), 0, n_fft)
    frames = batched.unfold(-1, n_fft, hop_length) * window
    if two_sided_only:  # each frame's whole DFT: torch's two-sided spectrum
        from . import fft

        transformed = fft.fft(frames, n_fft, -1, "ortho" if normalized else "backward")
        spectrum = transformed.transpose(-2, -1)
        spectrum = spectrum if signal.ndim == 2 else spectrum.squeeze(0)
        return spectrum if return_complex else view_as_real(spectrum)
    bins = n_fft // 2 + 1 if onesided is None or onesided else n_fft
    angle = 2 * np.pi * (np.outer(np.arange(n_fft), np.arange(bins)) % n_fft) / n_fft
    scale = n_fft**-0.5 if normalized else 1.0
    cosines, sines = np.cos(angle) * scale, -np.sin(angle) * scale
    if bool(frames.detach().isfinite().all().item()):
        re = frames.matmul(_matrix(signal, cosines))
        im = frames.matmul(_matrix(signal, sines))
    else:
        re, im = _nonfinite_spectrum(frames, _matrix(signal, cosines), _matrix(signal, sines))
    spectrum = stack([re, im], -1).transpose(-3, -2)
    spectrum = spectrum if signal.ndim == 2 else spectrum.squeeze(0)
    return view_as_complex(spectrum) if return_complex else spectrum


def _frame_sizes(fn: str, n_fft: Any, hop_length: Any, win_length: Any) -> tuple[int, int, int]:
    """``n_fft``, ``hop_length`` and ``win_length`` checked, with torch's defaults (a hop of a
    quarter frame, a window of the whole frame)."""
    n_fft = _positive(fn, "n_fft", n_fft)
    hop_length = n_fft // 4 if hop_length is None else _positive(fn, "hop_length", hop_length)
    win_length = n_fft if win_length is None else _positive(fn, "win_length", win_length)
    if win_length > n_fft:
        raise InvalidArgumentError(
            f"{fn}: expected 0 < win_length <= n_fft, got win_length={win_length}, n_fft={n_fft}"
        )
    return n_fft, hop_length, win_length


def istft(input: Tensor, n_fft: int, hop_length: int | None = None,  # noqa: A002
          win_length: int | None = None, window: Any = None, center: bool = True,
          normalized: bool = False, onesided: bool | None = None, length: int | None = None,
          return_complex: bool = False) -> Tensor:  # fmt: skip
    """torch's ``istft``: the signal of a complex spectrum ``(batch?, n_freq, n_frames)`` (as
    ``stft(..., return_complex=True)`` makes it): each frame's inverse DFT times the window,
    overlap-added and divided by the overlap-added squared window. Differentiable in the
    spectrum and the window. ``return_complex=True`` gives the complex signal of a two-sided
    spectrum (``onesided=False``), as of a complex signal's ``stft``."""
    fn = "istft"
    if not isinstance(input, Tensor) or not input.is_complex():
        kind = input.dtype if isinstance(input, Tensor) else type(input).__name__
        raise DTypeError(f"{fn} requires a complex-valued input tensor, got {kind}")
    if not isinstance(return_complex, bool):
        raise DTypeError(f"{fn}: return_complex must be a bool, got {return_complex!r}")
    if isinstance(window, Tensor) and window.is_complex():
        raise DTypeError(
            f"{fn}: a complex window is not supported in retrograd; give a real window"
        )
    if input.ndim not in (2, 3):
        raise ShapeError(
            f"{fn}: expected a 2-d or 3-d spectrum (batch?, n_freq, n_frames), got shape "
            f"{shape_text(input.shape)}"
        )
    spectrum = input if input.ndim == 3 else input.unsqueeze(0)
    n_fft, hop_length, win_length = _frame_sizes(fn, n_fft, hop_length, win_length)
    if hop_length > win_length:  # (torch's check, whatever the window's overlap)
        raise InvalidArgumentError(
            f"{fn}: expected 0 < hop_length <= win_length, got hop_length={hop_length}, "
            f"win_length={win_length}"
        )
    n_freq, n_frames = spectrum.shape[-2:]
    onesided = n_freq != n_fft if onesided is None else onesided
    if return_complex and onesided:
        raise InvalidArgumentError(
            f"{fn}: Cannot have onesided output if window or input is complex: "
            "return_complex=True needs a two-sided spectrum (onesided=False)"
        )
    if n_freq != (n_fft // 2 + 1 if onesided else n_fft):
        raise ShapeError(
            f"{fn}: expected {n_fft // 2 + 1 if onesided else n_fft} frequencies for "
            f"n_fft={n_fft} (onesided={onesided}), got {n_freq}"
        )
    real_dtype = spectrum.real.dtype
    if window is None:
        window = tensor(np.ones(win_length), dtype=real_dtype, backend=input.backend)
    elif not isinstance(window, Tensor) or window.shape != (win_length,):
        got = shape_text(window.shape) if isinstance(window, Tensor) else type(window).__name__
        raise ShapeError(f"{fn}: expected a 1-d window of size win_length={win_length}, got {got}")
    left = (n_fft - win_length) // 2
    window = _fit(_fit(window.to(real_dtype).flip(0), 0, win_length + left).flip(0), 0, n_fft)
    from . import fft

    norm = "ortho" if normalized else "backward"
    columns = spectrum.transpose(-2, -1)
    if onesided:
        frames = fft.irfft(columns, n_fft, -1, norm)
    else:  # the signal is complex: its real part unless asked for whole (return_complex)
        frames = fft.ifft(columns, n_fft, -1, norm)
        frames = frames if return_complex else frames.real
        window = window.to(frames.dtype)
    total = n_fft + hop_length * (n_frames - 1)
    overlap = (frames * window)._apply("fold", (frames * window,), (1, n_fft, hop_length, total))
    squares = (window * window).real if window.is_complex() else window * window
    squares = squares.expand(1, n_frames, n_fft)
    envelope = squares._apply("fold", (squares,), (1, n_fft, hop_length, total))
    start = n_fft // 2 if center else 0
    if length is not None:
        end = start + _positive(fn, "length", length)
    else:
        end = total - n_fft // 2 if center else total
    kept = min(end, total)
    if kept <= start:  # (torch's check of the window's overlap fails on no samples)
        raise InvalidArgumentError(
            f"{fn}: the {n_frames} frame(s) of n_fft={n_fft}, hop_length={hop_length} leave no "
            f"samples once the center padding of {n_fft // 2} is cut from each end; torch "
            "refuses this too (give length=)"
        )
    signal, envelope = overlap[:, start:kept], envelope[:, start:kept]
    if bool((envelope.abs() < 1e-11).any().item()):
        raise InvalidArgumentError(
            f"{fn}: window overlap add min: the squared window overlap-added with hop_length="
            f"{hop_length} is zero somewhere (torch refuses this window and hop too)"
        )
    signal = signal / envelope
    if end > total:
        signal = _fit(signal, 1, end - start)
    return signal if input.ndim == 3 else signal.squeeze(0)


def _nonfinite_spectrum(frames: Tensor, cosines: Tensor, sines: Tensor) -> tuple[Tensor, Tensor]:
    """The frames' DFT where some samples are infinite or NaN, as an FFT gives it: a sample
    counts only at the frequencies whose coefficient for it is not zero (an FFT's butterflies
    move it by an exact rotation there, where the matmul would make ``inf * 0 = NaN``), so
    one infinite sample makes the others ``±inf`` by the signs of the coefficients and
    leaves them finite where its coefficient is zero; ``inf`` meeting ``-inf``, or a NaN,
    gives NaN. The finite samples are transformed as usual, the gradient passing to all
    (the transform is linear: its gradient does not read the samples)."""
    values = frames.detach()
    clean = values.nan_to_num(0.0, 0.0, 0.0)
    if frames.requires_grad:  # the finite values, the gradient passing whole to frames
        clean = frames._apply("data_write", (frames, clean))
    dtype = frames.dtype
    plus, minus = values.isposinf().to(dtype), values.isneginf().to(dtype)
    nan = values.isnan().to(dtype)
    parts = []
    for coefficients in (cosines, sines):
        positive, negative = coefficients.greater(0).to(dtype), coefficients.less(0).to(dtype)
        up = plus.matmul(positive) + minus.matmul(negative)  # terms of inf * c going to +inf
        down = plus.matmul(negative) + minus.matmul(positive)
        rising, falling = up.greater(0), down.greater(0)
        undefined = rising.logical_and(falling)
        undefined = undefined.logical_or(nan.matmul(coefficients.ne(0).to(dtype)).greater(0))
        limit = (
            zeros(up.shape, dtype=dtype, backend=up.backend, device=up.device)
            .masked_fill(rising, float("inf"))
            .masked_fill(falling, float("-inf"))
            .masked_fill(undefined, float("nan"))
        )
        parts.append(clean.matmul(coefficients) + limit)
    return parts[0], parts[1]


def _pad_ends(fn: str, x: Tensor, size: int, mode: str) -> Tensor:
    """``x`` extended by ``size`` samples at both ends of its last dimension, as
    ``F.pad(x, (size, size), mode)`` extends it (torch's ``stft`` with ``center=True``)."""
    if size == 0:
        return x
    length = x.shape[-1]
    if mode == "constant":
        return _fit(_fit(x.flip(-1), -1, length + size).flip(-1), -1, length + 2 * size)
    if mode == "reflect":
        if size >= length:
            raise ShapeError(
                f"{fn}: reflect padding of {size} needs an input longer than {size}, got length "
                f"{length}"
            )
        ends = [x.narrow(-1, 1, size).flip(-1), x, x.narrow(-1, length - size - 1, size).flip(-1)]
    elif mode == "replicate":
        if length == 0:
            raise ShapeError(f"{fn}: replicate padding needs a non-empty input, got length 0")
        ends = [x.narrow(-1, 0, 1).expand(*x.shape[:-1], size), x]
        ends.append(x.narrow(-1, length - 1, 1).expand(*x.shape[:-1], size))
    elif mode == "circular":
        if size > length:
            raise ShapeError(f"{fn}: circular padding of {size} exceeds the length {length}")
        ends = [x.narrow(-1, length - size, size), x, x.narrow(-1, 0, size)]
    else:
        raise InvalidArgumentError(
            f"{fn}: pad_mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}"
        )
    return cat(ends, -1)


def _positive(fn: str, name: str, value: Any) -> int:
    value = int_argument(fn, value, name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"{fn}: {name} must be a positive int, got {value!r}")
    return value


Tensor.stft = stft  # ``y.stft(n_fft, ...)``, as torch's method
Tensor.istft = istft  # ``spectrum.istft(n_fft, ...)``, as torch's method


def _float_or_complex(fn: str, x: Tensor) -> Tensor:
    if isinstance(x, Tensor) and x.is_complex():
        return x
    return _float(fn, x)


def _float(fn: str, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor) or x.dtype not in FLOAT_DTYPES:
        kind = x.dtype if isinstance(x, Tensor) else type(x).__name__
        raise DTypeError(f"{fn}: expected a float tensor, got {kind}")
    return x


def _length(fn: str, n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ShapeError(f"{fn}: n must be a positive int, got {n!r}")
    return n


def _fit(x: Tensor, d: int, size: int) -> Tensor:
    """``x`` cut or zero-padded to ``size`` along ``d``."""
    have = x.shape[d]
    if have >= size:
        return x if have == size else x.narrow(d, 0, size)
    shape = list(x.shape)
    shape[d] = size - have
    return cat([x, zeros(tuple(shape), dtype=x.dtype, backend=x.backend, device=x.device)], d)


def _matrix(like: Tensor, values: np.ndarray) -> Tensor:
    """A constant of ``like``'s dtype, backend and device (computed in float64 first; the
    cosines and sines that are zero exactly, zero)."""
    values = np.where(np.abs(values) < 1e-12, 0.0, values)
    # the backend rounds to the dtype (NumPy has no bfloat16 to do it on the host)
    return tensor(values, dtype=like.dtype, backend=like.backend, device=like.device)


# the public functions turn a built-in exception about their arguments (an unknown keyword,
# a str for a length) into the hierarchy's, named after the function (errors.guard)
for _name in __all__:
    globals()[_name] = guard(f"signal.{_name}", globals()[_name], __name__, _name)
del _name
