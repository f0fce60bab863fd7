"""Output-size arithmetic of convolution and pooling, shared by every layer that needs it.

The functional layer validates arguments with these rules before calling a kernel, the
autodiff ops derive an adjoint's ``output_padding`` from them, and each backend's kernels size
their outputs with them, so all three agree by construction. Pure Python on ints (no array
library), which is why it sits in ``backend/``: the lowest layer that uses it, importable from
every layer above without pulling in a kernel implementation.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
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
