"""torch's ``torch.fft``. Every transform there returns complex values (or, for the inverse
real ones and ``hfft``, reads them), and retrograd has no complex tensors, so each raises an
error that says so (:mod:`retrograd.unsupported`), naming :mod:`retrograd.signal`'s real pairs
where they do the same work. The helpers that stay real are here with torch's meaning:
:func:`fftfreq`, :func:`rfftfreq`, :func:`fftshift` and :func:`ifftshift`.

>>> import retrograd as rg
>>> rg.fft.fftfreq(5).tolist()
[0.0, 0.20000000298023224, 0.4000000059604645, -0.4000000059604645, -0.20000000298023224]
>>> rg.fft.fftshift(rg.arange(5)).tolist()
[3, 4, 0, 1, 2]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NoReturn

from .backend.protocol import default_float_dtype
from .errors import InvalidArgumentError, guard
from .tensor import Tensor, arange
from .tensor._dispatch import normalize_dim
from .tensor.creation import _no_out
from .unsupported import no_complex

__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "hfft2",
    "hfftn",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "ihfft2",
    "ihfftn",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]

#: the transforms :mod:`retrograd.signal` does on real pairs
_SIGNAL = {
    "rfft": "rg.signal.rfft(x, dim, n) gives the real and imaginary parts",
    "irfft": "rg.signal.irfft(re, im, dim, n) inverts rg.signal.rfft's pair",
}


def _refused(name: str, signature: str) -> Callable[..., NoReturn]:
    def transform(*args: Any, **kwargs: Any) -> NoReturn:
        hint = _SIGNAL.get(name)
        no_complex(f"fft.{name}" + (f" ({hint})" if hint else ""))

    transform.__name__ = transform.__qualname__ = name
    transform.__doc__ = f"Refused: it computes in complex numbers (torch: ``{name}{signature}``)."
    return transform


fft = _refused("fft", "(input, n, dim, norm)")
ifft = _refused("ifft", "(input, n, dim, norm)")
rfft = _refused("rfft", "(input, n, dim, norm)")
irfft = _refused("irfft", "(input, n, dim, norm)")
hfft = _refused("hfft", "(input, n, dim, norm)")
ihfft = _refused("ihfft", "(input, n, dim, norm)")
fft2 = _refused("fft2", "(input, s, dim=(-2, -1), norm)")
ifft2 = _refused("ifft2", "(input, s, dim=(-2, -1), norm)")
rfft2 = _refused("rfft2", "(input, s, dim=(-2, -1), norm)")
irfft2 = _refused("irfft2", "(input, s, dim=(-2, -1), norm)")
hfft2 = _refused("hfft2", "(input, s, dim=(-2, -1), norm)")
ihfft2 = _refused("ihfft2", "(input, s, dim=(-2, -1), norm)")
fftn = _refused("fftn", "(input, s, dim, norm)")
ifftn = _refused("ifftn", "(input, s, dim, norm)")
rfftn = _refused("rfftn", "(input, s, dim, norm)")
irfftn = _refused("irfftn", "(input, s, dim, norm)")
hfftn = _refused("hfftn", "(input, s, dim, norm)")
ihfftn = _refused("ihfftn", "(input, s, dim, norm)")


def _frequencies(op: str, n: Any, d: float, out: Any, kwargs: dict) -> Tensor:
    """``arange(count) / (d n)`` as torch computes it (times ``1 / (d n)``), in ``dtype``
    (default: the default float dtype): ``rfftfreq``'s ``n // 2 + 1`` steps, or ``fftfreq``'s
    ``n`` with those from ``(n + 1) // 2`` on taken ``n`` down (the negative half)."""
    _no_out(f"fft.{op}", out)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgumentError(f"fft.{op}: n must be a non-negative int, got {n!r}")
    kwargs.pop("layout", None)
    requires_grad = kwargs.pop("requires_grad", False)
    dtype, device = kwargs.pop("dtype", None), kwargs.pop("device", None)
    if kwargs:
        raise InvalidArgumentError(f"fft.{op}: unexpected arguments {sorted(kwargs)}")
    count = n // 2 + 1 if op == "rfftfreq" else n
    steps = arange(count, dtype=dtype or default_float_dtype(), device=device)
    if op == "fftfreq" and n:
        steps = steps - (steps >= (n + 1) // 2) * n
    result = steps * (1.0 / (n * d) if n * d else math.inf)  # torch's: NaN at n = 0
    return result.requires_grad_() if requires_grad else result


def fftfreq(n: int, d: float = 1.0, *, out: Any = None, **kwargs: Any) -> Tensor:
    """The sample frequencies of an ``n``-point DFT with spacing ``d`` (``torch.fft.fftfreq``,
    with its ``dtype``/``device``/``requires_grad``): ``[0, 1, ..., (n - 1) // 2, -(n // 2),
    ..., -1] / (d n)``."""
    return _frequencies("fftfreq", n, d, out, kwargs)


def rfftfreq(n: int, d: float = 1.0, *, out: Any = None, **kwargs: Any) -> Tensor:
    """The non-negative sample frequencies of ``rfft``'s ``n // 2 + 1`` outputs
    (``torch.fft.rfftfreq``): ``[0, 1, ..., n // 2] / (d n)``."""
    return _frequencies("rfftfreq", n, d, out, kwargs)


def _shifted(op: str, input: Tensor, dim: Any, shift: Callable[[int], int]) -> Tensor:  # noqa: A002
    if not isinstance(input, Tensor):
        raise InvalidArgumentError(f"fft.{op}: expected a tensor, got {type(input).__name__}")
    if dim is None:
        dims = tuple(range(input.ndim))
    elif isinstance(dim, int):
        dims = (normalize_dim(f"fft.{op}", dim, input.ndim),)
    else:
        dims = tuple(normalize_dim(f"fft.{op}", d, input.ndim) for d in dim)
    if not dims:
        return input
    return input.roll(tuple(shift(input.shape[d]) for d in dims), dims)


def fftshift(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002 (torch's name)
    """The zero frequency moved to the centre (``torch.fft.fftshift``): a roll by ``n // 2``
    along each of ``dim`` (every dim by default); real tensors, differentiable."""
    return _shifted("fftshift", input, dim, lambda n: n // 2)


def ifftshift(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002 (torch's name)
    """The inverse of :func:`fftshift` (``torch.fft.ifftshift``): a roll by ``(n + 1) // 2``."""
    return _shifted("ifftshift", input, dim, lambda n: (n + 1) // 2)


# the public functions turn a built-in exception about their arguments (an extra argument, a
# float for a dim) into the hierarchy's, named after the function (errors.guard)
for _name in __all__:
    globals()[_name] = guard(f"fft.{_name}", globals()[_name], __name__, _name)
del _name
