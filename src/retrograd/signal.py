"""Burn's ``burn_tensor::signal``: the real FFT of real signals as a pair of real tensors
(retrograd has no complex dtype, so ``torch.fft.rfft`` itself is refused, :mod:`.fft`). Each
transform is a matmul with a cosine and a sine matrix over the tensor API, so both directions
are differentiable and their gradients are the adjoint maps, as torch's are.

>>> import retrograd as rg
>>> re, im = rg.signal.rfft(rg.tensor([1.0, 2.0, 3.0, 4.0]), 0)
>>> re.tolist(), im.tolist()
([10.0, -2.0, -2.0], [0.0, 2.0, 0.0])
>>> rg.signal.irfft(re, im, 0).tolist()
[1.0, 2.0, 3.0, 4.0]
"""

from __future__ import annotations

import numpy as np

from .errors import DTypeError, ShapeError, guard, shape_text
from .tensor import FLOAT_DTYPES, Tensor, cat, tensor, zeros
from .tensor._dispatch import lift, normalize_dim

__all__ = ["irfft", "rfft"]


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
    return tensor(values.astype(like.dtype), backend=like.backend, device=like.device)


# the public functions turn a built-in exception about their arguments (an unknown keyword,
# a str for a length) into the hierarchy's, named after the function (errors.guard)
for _name in __all__:
    globals()[_name] = guard(f"signal.{_name}", globals()[_name], __name__, _name)
del _name
