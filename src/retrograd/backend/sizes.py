"""Output-size arithmetic of convolution and pooling, shared by every layer that needs it.

The functional layer validates arguments with these rules before calling a kernel, the
autodiff ops derive an adjoint's ``output_padding`` from them, and each backend's kernels size
their outputs with them, so all three agree by construction. Pure Python on ints (no array
library), which is why it sits in ``backend/``: the lowest layer that uses it, importable from
every layer above without pulling in a kernel implementation.

Also here: :func:`check_allocation`, the refusal of a result no machine could hold, made from
the sizes before a composite op (``unfold``, ``repeat``) starts building it piece by piece.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence

from ..errors import OutOfMemoryError, shape_text

__all__ = [
    "check_allocation",
    "conv_output_size",
    "conv_transpose_output_padding",
    "conv_transpose_output_size",
    "pool_output_size",
]


def conv_output_size(length: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of a convolution along one axis (may be < 1 for bad arguments).

    >>> conv_output_size(8, 3, 1, 1, 1)  # "same" padding
    8
    >>> conv_output_size(8, 3, 2, 0, 1)
    3
    >>> conv_output_size(7, 3, 1, 0, 2)  # a dilated kernel spans 5 cells
    3
    >>> conv_output_size(2, 5, 1, 0, 1)  # kernel larger than the input
    -2
    """
    return (length + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_output_size(
    length: int, kernel: int, stride: int, padding: int, output_padding: int, dilation: int
) -> int:
    """Output length of a transposed convolution along one axis.

    >>> conv_transpose_output_size(4, 3, 2, 0, 0, 1)
    9
    >>> conv_transpose_output_size(3, 3, 2, 0, 1, 1)  # output_padding: one more cell
    8
    >>> conv_transpose_output_size(conv_output_size(8, 3, 2, 1, 1), 3, 2, 1, 1, 1)
    8
    """
    return (length - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def conv_transpose_output_padding(
    input_size: Sequence[int],
    out_size: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
) -> tuple[int, ...]:
    """The ``output_padding`` per axis that makes a transposed convolution of a convolution's
    output (spatial ``out_size``) give back ``input_size``: the input cells a strided
    convolution skipped.

    >>> conv_transpose_output_padding((8,), (4,), (3,), (2,), (1,), (1,))
    (1,)
    >>> conv_transpose_output_padding((7, 7), (7, 7), (3, 3), (1, 1), (1, 1), (1, 1))
    (0, 0)
    """
    return tuple(
        n - conv_transpose_output_size(o, k, s, p, 0, d)
        for n, o, k, s, p, d in zip(input_size, out_size, kernel, stride, padding, dilation)
    )


def pool_output_size(
    length: int, kernel: int, stride: int, padding: int, dilation: int, ceil_mode: bool
) -> int:
    """Output length of a pooling window along one axis, PyTorch's rule.

    With ``ceil_mode`` a last, partial window is kept only if it starts inside the input or
    its left padding.

    >>> pool_output_size(5, 2, 2, 0, 1, False)
    2
    >>> pool_output_size(5, 2, 2, 0, 1, True)  # the partial window [4, 6) starts inside
    3
    >>> pool_output_size(4, 2, 2, 1, 1, True)  # one starting at 4 would read only padding
    3
    >>> pool_output_size(1, 3, 1, 0, 1, False)  # window larger than the input
    -1
    """
    span = length + 2 * padding - dilation * (kernel - 1) - 1
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= length + padding:
            out -= 1
        return out
    return span // stride + 1


#: Bytes per element of each dtype: the backend protocol's table (:mod:`.protocol` takes it
#: from here: this module imports nothing of the backends, and the protocol imports it)
ITEMSIZE = {
    "float32": 4,
    "float64": 8,
    "int64": 8,
    "bool": 1,
    "bfloat16": 2,
    "float16": 2,
    "uint8": 1,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "complex64": 8,
    "complex128": 16,
}


@functools.lru_cache(maxsize=1)
def machine_memory_bytes() -> int | None:
    """The most one allocation could get: the machine's RAM plus its swap (Linux's
    ``/proc/meminfo``, else ``sysconf``); ``None`` where neither says."""
    try:
        with open("/proc/meminfo") as info:
            fields = dict(line.split(":", 1) for line in info if ":" in line)
        return sum(int(fields[key].split()[0]) * 1024 for key in ("MemTotal", "SwapTotal"))
    except (OSError, KeyError, ValueError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def _bytes_text(count: int) -> str:
    size, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if size < 1024 or unit == "EiB":
            break
        size /= 1024
    return f"{size:.3g} {unit}"


def check_allocation(op: str, shape: Sequence[int], dtype: str, detail: str = "") -> None:
    """Raise :class:`~retrograd.errors.OutOfMemoryError` when a ``shape`` result of ``dtype``
    needs more bytes than the machine has (RAM and swap): the allocator would refuse it (or
    the kernel kill the process) only after the op spent its time building the pieces.
    ``detail``: what else the message names (the input's shape, the arguments at fault).

    >>> check_allocation("unfold", (1, 4, 9), "float32")  # 144 bytes: nothing to say
    """
    available = machine_memory_bytes()
    needed = math.prod(int(n) for n in shape) * ITEMSIZE.get(str(dtype), 8)
    if available is not None and needed > available:
        raise OutOfMemoryError(
            f"{op}: out of memory: the result {shape_text(tuple(shape))} {dtype} needs "
            f"{_bytes_text(needed)} ({needed} bytes), more than this machine's "
            f"{_bytes_text(available)} of memory{'; ' + detail if detail else ''}"
        )
