"""torch's ``torch.fft``: ``fft ifft rfft irfft hfft ihfft`` along one dim, their ``2``
and ``n`` forms along several, with torch's ``n``/``s``/``dim``/``norm``
and its gradients (each transform is linear: its gradient is the adjoint transform; the real
inverse ones differentiate as torch's ``c2r``, the imaginary parts at frequency 0 and at the
Nyquist frequency counting for nothing). Two kernels compute them all, the backends' complex
``fftn`` and their real-input ``rfftn`` (the forward real transforms, and ``fft``/``ifft``
of a real input completed by symmetry, exactly real at frequency 0 and ``n / 2`` as
torch's); the inverse real and Hermitian forms are built on ``fftn``. The helpers: :func:`fftfreq`,
:func:`rfftfreq`, :func:`fftshift` and :func:`ifftshift`.

>>> import retrograd as rg
>>> rg.fft.fftfreq(5).tolist()
[0.0, 0.20000000298023224, 0.4000000059604645, -0.4000000059604645, -0.20000000298023224]
>>> rg.fft.fftshift(rg.arange(5)).tolist()
[3, 4, 0, 1, 2]
"""

from __future__ import annotations

import functools
import math
import numbers
import operator
from collections.abc import Callable
from typing import Any

from .backend.protocol import COMPLEX_DTYPES, FLOAT_DTYPES, INT_DTYPES, default_float_dtype
from .errors import (
    DTypeError,
    InvalidArgumentError,
    InvalidValueError,
    KernelDTypeError,
    ShapeError,
    guard,
    shape_text,
)
from .tensor import Tensor, arange, cat, zeros
from .tensor._dispatch import normalize_dim
from .tensor.creation import _no_out
from .tensor.dtypes import canonical_dtype
from .tensor.functions import accepts_out

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

_NORMS = ("backward", "ortho", "forward")


def _norm(op: str, norm: Any) -> str:
    if norm is None:
        return "backward"
    if norm not in _NORMS:
        raise InvalidArgumentError(
            f"fft.{op}: invalid normalization mode {norm!r}; expected one of {_NORMS} or None"
        )
    return norm


def _dual(norm: str) -> str:
    """The normalization of the other direction that gives the same scaling (``hfft`` is
    ``irfft`` of the conjugate, scaled as a forward transform)."""
    return {"backward": "forward", "forward": "backward"}.get(norm, norm)


def _tensor(op: str, input: Any) -> Tensor:  # noqa: A002 (torch's name)
    if not isinstance(input, Tensor):
        raise InvalidArgumentError(f"fft.{op}: expected a tensor, got {type(input).__name__}")
    return input


def _no_half_precision(op: str, x: Tensor) -> None:
    """Refuse a float16 or bfloat16 input, as torch's CPU transforms refuse it ("Unsupported
    dtype Half"): its kernels compute in float32 and float64 only, and the transform of a
    half-precision signal was computed here in complex64 as if it were float32, a result no
    torch script on the CPU gets."""
    if x.dtype in ("float16", "bfloat16"):
        raise KernelDTypeError(  # (torch's RuntimeError)
            f"fft.{op}: unsupported dtype {x.dtype} (the transforms compute in float32 or "
            f"float64 and their complex dtypes, as torch's CPU kernels); cast the input first"
        )


def _as_complex(op: str, x: Tensor) -> Tensor:
    """``x`` in the complex dtype torch computes its transform in (float64: complex128; other
    real dtypes: the default float dtype's complex one)."""
    if x.is_complex():
        return x
    _no_half_precision(op, x)
    if x.dtype not in ("float32", "float64"):
        x = x.to(default_float_dtype())
    return x.to("complex128" if x.dtype == "float64" else "complex64")


def _real_input(op: str, x: Tensor) -> Tensor:
    if x.is_complex():
        raise KernelDTypeError(  # (torch's RuntimeError)
            f"fft.{op} expects a real input tensor, but got {x.dtype}"
        )
    _no_half_precision(op, x)
    return x if x.dtype in ("float32", "float64") else x.to(default_float_dtype())


def _check_points(op: str, n: Any) -> int:
    """The signal length ``n`` (``n=``, an entry of ``s=``) as an int; refused when it is not
    a positive integer, naming the length given (not one derived from it). An integer of
    another type (NumPy's ``int64``, a 0-d integer tensor) counts, as torch's parser takes
    them through ``__index__``: ``n=np.int64(5)`` was refused."""
    if isinstance(n, numbers.Integral) and not isinstance(n, bool):
        points = operator.index(n)
    elif isinstance(n, Tensor) and n.dtype in INT_DTYPES:
        points = operator.index(n)  # (a 0-d integer tensor; its own error for another one)
    elif isinstance(n, bool | float | str | Tensor) or n is None:
        raise InvalidArgumentError(f"fft.{op}: invalid number of data points ({n!r}) specified")
    else:  # (another library's tensor: the guard names it, as for every op)
        raise TypeError(f"fft.{op}: expected an int number of data points, got {type(n)}")
    if points < 1:
        raise InvalidArgumentError(f"fft.{op}: invalid number of data points ({n!r}) specified")
    return points


def _resized(op: str, x: Tensor, dim: int, n: int) -> Tensor:
    """``x`` cut or zero-padded at the end of ``dim`` to ``n`` entries, as torch's ``n=``."""
    n = _check_points(op, n)
    size = x.shape[dim]
    if n == size:
        return x
    if n < size:
        return x.narrow(dim, 0, n)
    shape = list(x.shape)
    shape[dim] = n - size
    return cat([x, zeros(shape, dtype=x.dtype, device=x.device)], dim)


def _dims(op: str, x: Tensor, s: Any, dim: Any, default_all: bool) -> tuple[tuple, tuple]:
    """torch's ``s``/``dim`` of an n-dimensional transform: the dims (normalized) and the
    sizes (``None`` where the input's own). A single int ``s`` is a list of one, as torch's
    parser reads an int given for a list of ints (``fftn(x, 5)``: it was refused)."""
    if isinstance(s, int) and not isinstance(s, bool):
        s = (s,)
    if dim is None:
        if not default_all:  # (the 2-d transforms' dims are the last two, s given or not:
            dims = (-2, -1)  # an s of another length is refused, as torch refuses it)
        elif s is None:
            dims = tuple(range(x.ndim))
        elif len(s) > x.ndim:  # (torch: "Got shape with 3 values but input tensor only has
            raise ShapeError(  # 2 dimensions"; the dim -3 it implies was named instead of s)
                f"fft.{op}: s={tuple(s)} has {len(s)} sizes but the input of shape "
                f"{shape_text(x.shape)} has only {x.ndim} dimensions"
            )
        else:
            dims = tuple(range(-len(s), 0))
    else:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
    # (the default last two of a 1-d input are out of range, as torch says)
    dims = tuple(normalize_dim(f"fft.{op}", d, x.ndim) for d in dims)
    if len(set(dims)) != len(dims):
        raise InvalidArgumentError(f"fft.{op}: dims must be unique, got {dims}")
    if s is None:
        sizes = (None,) * len(dims)
    else:
        # (-1: the input's own size; None is refused, as torch's parser refuses it)
        sizes = tuple(None if _is_minus_one(n) else _check_points(op, n) for n in s)
        if len(sizes) != len(dims):
            raise InvalidValueError(  # (torch's RuntimeError)
                f"fft.{op}: when given, dim and s must have one length, got {len(dims)} dims "
                f"and s of length {len(sizes)}"
            )
    return dims, sizes


def _c2c(op: str, x: Tensor, dims: tuple, sizes: tuple, inverse: bool, norm: str) -> Tensor:
    x = _as_complex(op, x)
    for d, n in zip(dims, sizes):
        if n is not None:
            x = _resized(op, x, d, n)
    return _transform(op, x, dims, inverse, norm)


def _transform(op: str, x: Tensor, dims: tuple, inverse: bool, norm: str) -> Tensor:
    """The backend's ``fftn`` of ``x`` over ``dims``; an empty tensor is refused, as torch
    refuses it (its kernels' "invalid number of data points (0)")."""
    if x.numel() == 0:
        raise InvalidArgumentError(
            f"fft.{op}: invalid number of data points (0) specified: the input of shape "
            f"{shape_text(x.shape)} is empty"
        )
    return x._apply("fftn", (x,), (dims, inverse, norm))


def _r2c(op: str, x: Tensor, dims: tuple, sizes: tuple, norm: str) -> Tensor:
    """The transform of the real ``x`` over ``dims`` (each cut or padded to its size in
    ``sizes`` first), one-sided along the last of them: the backend's ``rfftn``, a real-input
    kernel as torch's, whose bins at frequency 0 and ``n / 2`` are exactly real (the complex
    transform of ``x`` rounds their imaginary parts to about 1e-16, and ``angle`` made 2 pi
    of that)."""
    _one_axis_at_least(op, x, dims)
    for d, n in zip(dims, sizes):
        if n is not None:
            x = _resized(op, x, d, n)
    if x.numel() == 0:
        raise InvalidArgumentError(
            f"fft.{op}: invalid number of data points (0) specified: the input of shape "
            f"{shape_text(x.shape)} is empty"
        )
    return x._apply("rfftn", (x,), (dims, norm))


def _full(op: str, x: Tensor, dims: tuple, sizes: tuple, inverse: bool, norm: str) -> Tensor:
    """The complex transform of ``x`` over ``dims`` as torch's ``fft``/``ifft`` compute it: a
    complex ``x`` by the complex kernel; a real one as torch's ``fft_r2c`` with
    ``onesided=False``, the
    one-sided :func:`_r2c` spectrum completed by its Hermitian symmetry (``X[-k] =
    conj(X[k])``) and, for an inverse, conjugated (the inverse transform of a real signal is
    the conjugate of its forward one under the dual scaling). So the bins that are real for
    every real input are exactly real and the two halves exact conjugates, as torch's: the
    complex kernel's rounding made ``angle`` jump by 2 pi there."""
    if x.is_complex() or not dims:
        return _c2c(op, x, dims, sizes, inverse, norm)
    x = _real_input(op, x)
    half = _r2c(op, x, dims, sizes, _dual(norm) if inverse else norm)
    last = dims[-1]
    n = x.shape[last] if sizes[-1] is None else sizes[-1]
    if n - n // 2 - 1 > 0:  # X[..., n - k] for k = n // 2 + 1 .. n - 1: conj(X[-k', ..., k])
        mirrored = half.narrow(last, 1, n - n // 2 - 1).flip(last)
        for d in dims[:-1]:  # index k along another dim -> -k modulo its size
            mirrored = mirrored.flip(d).roll(1, d)
        half = cat([half, mirrored.conj()], last)
    return half.conj() if inverse else half


def _one_axis_at_least(op: str, x: Tensor, dims: tuple) -> None:
    """A real transform halves its last dim: it needs one (a 0-d input's default dims, or
    ``dim=()``, give none), as torch's "must transform at least one axis"."""
    if not dims:
        raise InvalidArgumentError(
            f"fft.{op} must transform at least one axis: dim=() for the input of shape "
            f"{shape_text(x.shape)}"
        )


def _is_minus_one(n: Any) -> bool:
    """Whether an entry of ``s`` is -1 (the input's own size), of any integer type."""
    if isinstance(n, Tensor) and n.ndim == 0 and n.dtype in INT_DTYPES:
        n = operator.index(n)
    return isinstance(n, numbers.Integral) and not isinstance(n, bool) and n == -1


def _c2r(op: str, x: Tensor, dim: int, n: int | None, norm: str) -> Tensor:
    """The real inverse transform along ``dim`` of the one-sided spectrum ``x``: the full
    Hermitian spectrum (``X[n - k] = conj(X[k])``), inverted, its real part. The imaginary
    parts at frequency 0 and, for even ``n``, at ``n / 2`` count for nothing, as in torch's
    ``c2r``; the gradient is the adjoint of this map, torch's."""
    x = _as_complex(op, x)
    if n is None:
        n = 2 * (x.shape[dim] - 1)
    n = _check_points(op, n)  # (before the half spectrum is cut to n // 2 + 1 entries)
    half = _resized(op, x, dim, n // 2 + 1)
    mirrored = half.narrow(dim, 1, n - n // 2 - 1).flip(dim).conj()
    full = cat([half, mirrored], dim)
    return _transform(op, full, (dim,), True, norm).real


def fft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch's ``fft.fft``: the discrete Fourier transform along ``dim`` (complex result)."""
    x = _tensor("fft", input)
    return _full(
        "fft", x, (normalize_dim("fft.fft", dim, x.ndim),), (n,), False, _norm("fft", norm)
    )


def ifft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch's ``fft.ifft``: the inverse transform along ``dim``."""
    x = _tensor("ifft", input)
    d = normalize_dim("fft.ifft", dim, x.ndim)
    return _full("ifft", x, (d,), (n,), True, _norm("ifft", norm))


def rfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch's ``fft.rfft``: the ``n // 2 + 1`` non-negative frequencies of a real signal."""
    x = _real_input("rfft", _tensor("rfft", input))
    d = normalize_dim("fft.rfft", dim, x.ndim)
    return _r2c("rfft", x, (d,), (n,), _norm("rfft", norm))


def irfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch's ``fft.irfft``: the real signal of ``n`` samples (default ``2 * (m - 1)``) of a
    one-sided spectrum."""
    x = _tensor("irfft", input)
    return _c2r("irfft", x, normalize_dim("fft.irfft", dim, x.ndim), n, _norm("irfft", norm))


def hfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch's ``fft.hfft``: the (real) transform of a Hermitian-symmetric signal given by
    its one-sided half."""
    x = _as_complex("hfft", _tensor("hfft", input))
    d = normalize_dim("fft.hfft", dim, x.ndim)
    return _c2r("hfft", x.conj(), d, n, _dual(_norm("hfft", norm)))


def ihfft(input: Tensor, n: int | None = None, dim: int = -1, norm: str | None = None) -> Tensor:  # noqa: A002
    """torch's ``fft.ihfft``: the inverse of :func:`hfft`, of a real signal."""
    x = _real_input("ihfft", _tensor("ihfft", input))
    d = normalize_dim("fft.ihfft", dim, x.ndim)
    return _r2c("ihfft", x, (d,), (n,), _dual(_norm("ihfft", norm))).conj()


def _n_dimensional(op: str, inverse: bool, default_all: bool):
    def transform(input: Tensor, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:  # noqa: A002
        x = _tensor(op, input)
        dims, sizes = _dims(op, x, s, dim, default_all)
        # (torch's n-dimensional complex transforms take a real input as complex: its
        # fft_c2c, not the fft_r2c of the one-dimensional ones; its kernel, and the backends'
        # fftn, give a signal with no imaginary part an exactly Hermitian spectrum)
        return _c2c(op, x, dims, sizes, inverse, _norm(op, norm))

    return transform


def _real_n_dimensional(op: str, default_all: bool):
    def transform(input: Tensor, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:  # noqa: A002
        x = _real_input(op, _tensor(op, input))
        dims, sizes = _dims(op, x, s, dim, default_all)
        return _r2c(op, x, dims, sizes, _norm(op, norm))

    return transform


def _inverse_real_n_dimensional(op: str, default_all: bool):
    def transform(input: Tensor, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:  # noqa: A002
        x = _tensor(op, input)
        dims, sizes = _dims(op, x, s, dim, default_all)
        _one_axis_at_least(op, x, dims)
        mode = _norm(op, norm)
        if sizes[-1] is not None:  # the one-sided spectrum cut or padded first, as torch's
            x = _resized(op, x, dims[-1], sizes[-1] // 2 + 1)
        x = _c2c(op, x, dims[:-1], sizes[:-1], True, mode)
        return _c2r(op, x, dims[-1], sizes[-1], mode)

    return transform


def _hermitian_n_dimensional(op: str, default_all: bool):
    """``hfft2``/``hfftn``: :func:`irfftn` of the conjugate, scaled as a forward transform."""
    inverse_real = _inverse_real_n_dimensional(op, default_all)

    def transform(input: Tensor, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:  # noqa: A002
        x = _as_complex(op, _tensor(op, input))
        return inverse_real(x.conj(), s, dim, _dual(_norm(op, norm)))

    return transform


def _inverse_hermitian_n_dimensional(op: str, default_all: bool):
    """``ihfft2``/``ihfftn``: the conjugate of :func:`rfftn`, scaled as an inverse one."""
    real = _real_n_dimensional(op, default_all)

    def transform(input: Tensor, s: Any = None, dim: Any = None, norm: str | None = None) -> Tensor:  # noqa: A002
        return real(input, s, dim, _dual(_norm(op, norm))).conj()

    return transform


fft2 = _n_dimensional("fft2", False, False)
ifft2 = _n_dimensional("ifft2", True, False)
fftn = _n_dimensional("fftn", False, True)
ifftn = _n_dimensional("ifftn", True, True)
rfft2 = _real_n_dimensional("rfft2", False)
rfftn = _real_n_dimensional("rfftn", True)
irfft2 = _inverse_real_n_dimensional("irfft2", False)
irfftn = _inverse_real_n_dimensional("irfftn", True)
hfft2 = _hermitian_n_dimensional("hfft2", False)
ihfft2 = _inverse_hermitian_n_dimensional("ihfft2", False)
hfftn = _hermitian_n_dimensional("hfftn", True)
ihfftn = _inverse_hermitian_n_dimensional("ihfftn", True)


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
    dtype = canonical_dtype(f"fft.{op}", dtype, allow_none=True) or default_float_dtype()
    if dtype not in FLOAT_DTYPES + COMPLEX_DTYPES:  # (torch's check)
        raise DTypeError(f"fft.{op} requires a floating point or complex dtype, got {dtype}")
    if dtype in COMPLEX_DTYPES:  # (torch's check passes them, its CPU arange refuses them:
        raise KernelDTypeError(  # '"arange_cpu" not implemented for 'ComplexFloat'')
            f"fft.{op}: the frequencies of a complex dtype ({dtype}) are not computed, as "
            f"torch's arange refuses it on the CPU; ask for a float dtype"
        )
    count = n // 2 + 1 if op == "rfftfreq" else n
    steps = arange(count, dtype=dtype, device=device)
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
    if not dims:  # (a 0-d input's default dims, or dim=(): torch's roll refuses no shifts)
        raise InvalidArgumentError(
            f"fft.{op}: no dims to shift (dim={dim!r} of the input of shape "
            f"{shape_text(input.shape)}); torch's roll refuses it: `shifts` required"
        )
    return input.roll(tuple(shift(input.shape[d]) for d in dims), dims)


def fftshift(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002 (torch's name)
    """The zero frequency moved to the centre (``torch.fft.fftshift``): a roll by ``n // 2``
    along each of ``dim`` (every dim by default); real tensors, differentiable."""
    return _shifted("fftshift", input, dim, lambda n: n // 2)


def ifftshift(input: Tensor, dim: Any = None) -> Tensor:  # noqa: A002 (torch's name)
    """The inverse of :func:`fftshift` (``torch.fft.ifftshift``): a roll by ``(n + 1) // 2``."""
    return _shifted("ifftshift", input, dim, lambda n: (n + 1) // 2)


# the transforms take torch's ``out=`` (the result cast to ``out``'s dtype where torch's casting
# allows: a complex64 spectrum into a complex128 ``out``, never into a real one)
def _real_out_only(name: str, transform: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """A real-output transform (``irfft*``, ``hfft*``) refusing a complex ``out=``, as torch's
    ("irfft expects a floating point output tensor, but got ComplexDouble"): the real result
    was written into it (a complex ``out`` of a real result is what the general casting
    rules allow, and the transforms' own rule refuses)."""

    @functools.wraps(transform)
    def checked(*args: Any, out: Any = None, **kwargs: Any) -> Tensor:
        if isinstance(out, Tensor) and out.is_complex():
            raise KernelDTypeError(  # (torch's RuntimeError)
                f"fft.{name} expects a floating point output tensor, but got {out.dtype}"
            )
        return transform(*args, out=out, **kwargs)

    return checked


for _name in __all__:
    if "fft" in _name and not _name.endswith(("freq", "shift")):
        globals()[_name] = accepts_out(f"fft.{_name}")(globals()[_name])
        if _name.startswith(("irfft", "hfft")):
            globals()[_name] = _real_out_only(_name, globals()[_name])

# the public functions turn a built-in exception about their arguments (an extra argument, a
# float for a dim) into the hierarchy's, named after the function (errors.guard)
for _name in __all__:
    globals()[_name] = guard(f"fft.{_name}", globals()[_name], __name__, _name)
del _name
