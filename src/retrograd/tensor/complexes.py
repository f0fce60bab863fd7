"""torch's functions that make complex tensors of real ones and back: ``complex``, ``polar``,
``view_as_complex``, ``view_as_real``. Each differentiates as torch's does (the gradient of a
real part is the real part of the complex gradient, torch's convention).

``view_as_real`` and ``view_as_complex`` are views of their input, as torch's: a write into
one reaches the input, and one into the input shows in it.

>>> import retrograd as rg
>>> rg.complex(rg.tensor([1.0]), rg.tensor([2.0]))
tensor([1.+2.j])
>>> rg.view_as_real(rg.tensor([1 + 2j])).tolist()
[[1.0, 2.0]]
"""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError, KernelDTypeError, MemoryLayoutError, shape_text
from ._dispatch import COMPLEX_DTYPES, TensorBase
from .autocasting import autocast_op
from .functions import broadcast_tensors
from .views import complex_view_of, link

__all__ = ["complex", "polar", "view_as_complex", "view_as_real"]

_REAL_PARTS = ("float32", "float64")


def _real_pair(op: str, names: tuple[str, str], first: Any, second: Any) -> tuple[Any, Any]:
    for name, value in zip(names, (first, second)):
        if not isinstance(value, TensorBase):
            raise DTypeError(
                f"{op}(): argument '{name}' must be Tensor, not {type(value).__name__}"
            )
    if first.dtype not in _REAL_PARTS or first.dtype != second.dtype:
        # (torch's RuntimeError: "Expected both inputs to be Half, Float or Double tensors")
        raise KernelDTypeError(
            f"{op}: expected {names[0]} and {names[1]} of one dtype, float32 or float64 (as "
            f"torch), got {first.dtype} and {second.dtype}"
        )
    return broadcast_tensors(first, second)


def complex(real: Any, imag: Any, *, out: Any = None) -> Any:  # noqa: A001 (torch's name)
    """The complex tensor ``real + i imag`` (broadcast; float32 parts give complex64,
    float64 complex128)."""
    _no_out("complex", out)
    real, imag = _real_pair("complex", ("real", "imag"), real, imag)
    return real._apply("complex", (real, imag))


@autocast_op("polar")
def polar(abs: Any, angle: Any, *, out: Any = None) -> Any:  # noqa: A002 (torch's name)
    """The complex tensor ``abs * (cos(angle) + i sin(angle))``."""
    _no_out("polar", out)
    magnitude, angle = _real_pair("polar", ("abs", "angle"), abs, angle)
    return complex(magnitude * angle.cos(), magnitude * angle.sin())


def view_as_real(input: Any) -> Any:  # noqa: A002 (torch's name)
    """A complex tensor's real and imaginary parts in a last dimension of size 2."""
    if not isinstance(input, TensorBase):
        raise DTypeError(f"view_as_real(): argument 'input' must be Tensor, not {_kind(input)}")
    if input.dtype not in COMPLEX_DTYPES:  # (torch's RuntimeError)
        raise KernelDTypeError(
            f"view_as_real is only supported for complex tensors, got {input.dtype}"
        )
    return link(complex_view_of(input, "view_as_real"), input, "view_as_real")


@autocast_op("view_as_complex")
def view_as_complex(input: Any) -> Any:  # noqa: A002 (torch's name)
    """The complex tensor of a float32/float64 tensor whose last dimension (of size 2) holds
    real and imaginary parts."""
    if not isinstance(input, TensorBase):
        raise DTypeError(f"view_as_complex(): argument 'input' must be Tensor, not {_kind(input)}")
    if input.dtype not in _REAL_PARTS:  # (torch's RuntimeError)
        raise KernelDTypeError(
            f"view_as_complex is only supported for float32 and float64 tensors, got {input.dtype}"
        )
    if input.ndim == 0 or input.shape[-1] != 2:  # (torch's RuntimeError, as the layout's)
        raise MemoryLayoutError(
            f"view_as_complex: the last dimension must have size 2, got shape "
            f"{shape_text(input.shape)}"
        )
    _require_complex_layout(input)
    return link(complex_view_of(input, "view_as_complex"), input, "view_as_complex")


def _require_complex_layout(input: TensorBase) -> None:  # noqa: A002 (torch's name)
    """Torch's conditions for reading a float tensor's memory as complex numbers: each pair
    (real, imaginary) adjacent, and every pair starting at an even element; a tensor laid out
    otherwise (a transpose, an odd slice) is refused there, so a program that works here
    works under torch."""
    strides, offset = input.stride(), input.storage_offset()
    if strides[-1] != 1:
        raise MemoryLayoutError(
            f"view_as_complex: the last dimension must have stride 1, got strides {strides} "
            f"for shape {shape_text(input.shape)} (as torch; call .contiguous() first)"
        )
    if any(stride % 2 for stride in strides[:-1]):
        raise MemoryLayoutError(
            f"view_as_complex: every stride but the last must be divisible by 2, got strides "
            f"{strides} for shape {shape_text(input.shape)} (as torch; call .contiguous() "
            "first)"
        )
    if offset % 2:
        raise MemoryLayoutError(
            f"view_as_complex: the storage offset must be divisible by 2, got {offset} (as "
            "torch; call .contiguous() first)"
        )


def _kind(value: Any) -> str:
    return type(value).__name__


def _no_out(op: str, out: Any) -> None:
    if out is not None:
        raise DTypeError(f"{op}: out= is not supported; assign the result instead")
