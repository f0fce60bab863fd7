# ruff: noqa: N803  (``M`` is torch's keyword for the window length)
"""``rg.signal.windows``: torch's ``torch.signal.windows`` (SciPy's window functions), each
computed by the steps torch's own takes (a ``linspace`` in the window's dtype, then its
elementwise formula), so the values agree with torch's to the rounding of those steps.

>>> import retrograd as rg
>>> rg.signal.windows.bartlett(5).tolist()
[0.0, 0.5, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .backend.protocol import default_float_dtype
from .errors import InvalidArgumentError, guard
from .tensor import Tensor, arange, empty, linspace, ones, tensor
from .tensor.dtypes import canonical_dtype

__all__ = [
    "bartlett",
    "blackman",
    "cosine",
    "exponential",
    "gaussian",
    "general_cosine",
    "general_hamming",
    "hamming",
    "hann",
    "kaiser",
    "nuttall",
]


def _checked(name: str, length: int, dtype: Any) -> str:
    """The window's dtype, after torch's checks (a non-negative length, float32/float64)."""
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise InvalidArgumentError(f"{name} requires non-negative window length, got M={length}")
    dtype = canonical_dtype(name, dtype, allow_none=True) or default_float_dtype()
    if dtype not in ("float32", "float64"):
        raise InvalidArgumentError(f"{name} expects float32 or float64 dtypes, got: {dtype}")
    return dtype


def _short(length: int, dtype: str, device: Any, requires_grad: bool) -> Tensor | None:
    """The windows of 0 and 1 points (empty, and ``[1.0]``)."""
    if length == 0:
        return empty((0,), dtype=dtype, device=device).requires_grad_(requires_grad)
    if length == 1:
        return ones((1,), dtype=dtype, device=device).requires_grad_(requires_grad)
    return None


def _line(start: float, end: float, length: int, dtype: str, device: Any, grad: bool) -> Tensor:
    return linspace(start, end, length, dtype=dtype, device=device, requires_grad=grad)


def exponential(M: int, *, center: float | None = None, tau: float = 1.0, sym: bool = True,
                dtype: Any = None, layout: Any = None, device: Any = None,
                requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``exp(-|n - center| / tau)``."""
    dtype = _checked("exponential", M, dtype)
    if tau <= 0:
        raise InvalidArgumentError(f"Tau must be positive, got: {tau} instead.")
    if sym and center is not None:
        raise InvalidArgumentError("Center must be None for symmetric windows")
    if M == 0:
        return _short(M, dtype, device, requires_grad)
    if center is None:
        center = (M if not sym and M > 1 else M - 1) / 2.0
    constant = 1 / tau
    k = _line(-center * constant, (-center + (M - 1)) * constant, M, dtype, device, requires_grad)
    return (-k.abs()).exp()


def cosine(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``sin(pi * (n + 0.5) / M)``."""
    dtype = _checked("cosine", M, dtype)
    if M == 0:
        return _short(M, dtype, device, requires_grad)
    start = 0.5
    constant = math.pi / (M + 1 if not sym and M > 1 else M)
    return _line(
        start * constant, (start + (M - 1)) * constant, M, dtype, device, requires_grad
    ).sin()


def gaussian(M: int, *, std: float = 1.0, sym: bool = True, dtype: Any = None,
             layout: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``exp(-((n - (M - 1) / 2) / std) ** 2 / 2)``."""
    dtype = _checked("gaussian", M, dtype)
    if std <= 0:
        raise InvalidArgumentError(f"Standard deviation must be positive, got: {std} instead.")
    if M == 0:
        return _short(M, dtype, device, requires_grad)
    start = -(M if not sym and M > 1 else M - 1) / 2.0
    constant = 1 / (std * math.sqrt(2))
    k = _line(start * constant, (start + (M - 1)) * constant, M, dtype, device, requires_grad)
    return (-(k**2)).exp()


def kaiser(M: int, *, beta: float = 12.0, sym: bool = True, dtype: Any = None,
           layout: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``I0(beta * sqrt(1 - (2n / (M - 1) - 1) ** 2)) / I0(beta)``."""
    dtype = _checked("kaiser", M, dtype)
    if beta < 0:
        raise InvalidArgumentError(f"beta must be non-negative, got: {beta} instead.")
    short = _short(M, dtype, device, requires_grad)
    if short is not None:
        return short
    beta_ = tensor(beta, dtype=dtype, device=device)  # in the dtype, as torch's (no NaNs)
    start = -beta_
    constant = 2.0 * beta_ / (M if not sym else M - 1)
    end = beta_.minimum(start + (M - 1) * constant)
    k = _line(start.item(), end.item(), M, dtype, device, requires_grad)
    return (beta_ * beta_ - k.pow(2)).sqrt().i0() / beta_.i0()


def general_cosine(M: int, *, a: Iterable[float], sym: bool = True, dtype: Any = None,
                   layout: Any = None, device: Any = None,
                   requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``sum_i (-1) ** i * a[i] * cos(2 pi i n / (M - 1))``."""
    dtype = _checked("general_cosine", M, dtype)
    short = _short(M, dtype, device, requires_grad)
    if short is not None:
        return short
    if not isinstance(a, Iterable):
        raise InvalidArgumentError("general_cosine: coefficients must be a list/tuple")
    a = list(a)
    if not a:
        raise InvalidArgumentError("general_cosine: coefficients cannot be empty")
    constant = 2 * math.pi / (M if not sym else M - 1)
    k = _line(0, (M - 1) * constant, M, dtype, device, requires_grad)
    a_i = tensor([(-1) ** i * w for i, w in enumerate(a)], dtype=dtype, device=device)
    i = arange(len(a), dtype=dtype, device=device)
    return (a_i.unsqueeze(-1) * (i.unsqueeze(-1) * k).cos()).sum(0)


def general_hamming(M: int, *, alpha: float = 0.54, sym: bool = True, dtype: Any = None,
                    layout: Any = None, device: Any = None,
                    requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``alpha - (1 - alpha) * cos(2 pi n / (M - 1))``."""
    return general_cosine(M, a=[alpha, 1.0 - alpha], sym=sym, dtype=dtype, device=device,
                          requires_grad=requires_grad)  # fmt: skip


def hamming(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    return general_hamming(M, sym=sym, dtype=dtype, device=device, requires_grad=requires_grad)


def hann(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
         device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    return general_hamming(M, alpha=0.5, sym=sym, dtype=dtype, device=device,
                           requires_grad=requires_grad)  # fmt: skip


def blackman(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    return general_cosine(M, a=[0.42, 0.5, 0.08], sym=sym, dtype=dtype, device=device,
                          requires_grad=requires_grad)  # fmt: skip


def bartlett(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
             device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    """``1 - |2n / (M - 1) - 1|``."""
    dtype = _checked("bartlett", M, dtype)
    short = _short(M, dtype, device, requires_grad)
    if short is not None:
        return short
    start = -1
    constant = 2 / (M if not sym else M - 1)
    return 1 - _line(start, start + (M - 1) * constant, M, dtype, device, requires_grad).abs()


def nuttall(M: int, *, sym: bool = True, dtype: Any = None, layout: Any = None,
            device: Any = None, requires_grad: bool = False) -> Tensor:  # fmt: skip
    return general_cosine(M, a=[0.3635819, 0.4891775, 0.1365995, 0.0106411], sym=sym,
                          dtype=dtype, device=device, requires_grad=requires_grad)  # fmt: skip


for _name in __all__:
    globals()[_name] = guard(f"signal.windows.{_name}", globals()[_name])
del _name
