"""NumPy kernels of the convolutions: forward, transposed, and their joint backward.

Every ungrouped convolution runs channels-last, PyTorch's ``channels_last`` memory format: the
shape stays ``[N, C, *spatial]`` but the array lies in memory as ``[N, *spatial, C]``. An input
in another layout is copied once into it (a ninth of the columns a 3x3 kernel makes from it),
and outputs are written in it, so in a network the copy happens only for the data. In that
layout a convolution is one matrix product per batch block of columns (im2col):

- *forward*: the columns ``[B * cells, rows]`` of a block times the weight ``[rows, O]``,
  written straight into the output, bias added while the block is at hand (or, with few
  rows, in the product: :data:`BIAS_COLUMN_ROWS`). A 1x1 convolution of stride 1 needs no
  columns: the input is its own.
- *weight gradient*: the output gradient ``[O, N * cells]`` times the columns, one product
  per layer (per block, summed, when the batch is large), the long ``N * cells`` axis the
  product's inner one.
- *input gradient*: a transposed convolution of the output gradient, which is, by shape,
  a stride-1 convolution with the flipped weight (every input cell written once), or the
  products ``output gradient @ weight`` placed back: copied when the stride equals the
  kernel (a U-Net's upsampling: the windows do not overlap), else folded (col2im: one
  strided add per kernel offset, or, in 2-d, the same adds compiled, per block of samples
  small enough that the products are folded from the cache: :mod:`.compiled_conv`).

Float32 3x3 convolutions of stride 1 with enough output cells and channels run as Winograd's
F(2x2, 3x3) or F(4x4, 3x3) instead, forward, input gradient and (where its exact zeros are
known: :data:`WINOGRAD_WEIGHT_GRADIENT`) weight gradient: 2.25 or 4 times fewer products,
between compiled transforms (:mod:`.compiled_winograd`, :data:`WINOGRAD_MIN_CELLS`), in
batch blocks whose transformed tiles stay in the caches. On a cold Numba cache their NumPy
twins, of the same bits, run while a background process compiles them
(:mod:`.winograd_numpy`, :mod:`.kernel_compile`). Float32 stride-1 convolutions on
maps so small that most of im2col's products would read padding run tap by tap
(:data:`TAPWISE_MAX_COVERED`).

The columns' rows are ordered ``(*kernel, c)``: one copy of a window view, in runs of
``kernel[-1] * C`` contiguous values, with the weight reordered to match; or, where the weight
outweighs the columns (the deep layers of a network: small maps, many channels),
``(c, *kernel)``, the weight's own order, no copy of it (:func:`_channel_major`).

Batch blocks of :data:`COLUMN_BLOCK_BYTES` of columns bound the memory. Grouped convolutions
keep the NCHW order of the columns, ``[B, G, (C/G, *kernel), cells]``, and multiply each
group's block with one batched product.

Any input layout is accepted; values do not depend on it beyond rounding
(tests/test_nn_layouts.py, tests/test_conv_kernels.py).
"""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .sizes import (
    conv_output_size,
    conv_transpose_output_padding,
    conv_transpose_output_size,
)

__all__ = ["NumpyConvKernels", "channels_last"]

#: Bytes of im2col columns (and output) per batch block: about a core's L2 cache. The block's
#: copy and its product run one after the other on it, and a block that stays in the caches
#: spares the copy's round trip through memory (``benchmarks/bench_convnets.py`` measures the
#: effect). It bounds the memory a large batch takes as well.
COLUMN_BLOCK_BYTES = 1 << 20


#: Bytes of products per batch block of a compiled fold (:mod:`.compiled_conv`): about a
#: core's L2 cache, so that the fold reads what the product has just written from the cache.
#: One sample per block on the small CNN's input gradient (663 KB of products each); the
#: product is no slower in blocks that size, and the fold reads them three times faster.
FOLD_BLOCK_BYTES = 1 << 20


#: Convolutions with fewer rows than this (``C * prod(kernel)``: a network's first layer, on
#: one to three channels) add their bias in the product, as a last column of ones beside the
#: columns and the bias beside the weight, rather than in a pass over the output, which costs
#: half as much as such a short product.
BIAS_COLUMN_ROWS = 32

#: Float32 3x3 convolutions of stride 1 run as Winograd's minimal filtering (forward, input
#: and weight gradients; :mod:`.compiled_winograd`) from this many output cells ``N * H *
#: W``, with at least :data:`WINOGRAD_MIN_CHANNELS` channels in and out; ``None`` turns it
#: off. Its products are 2.25 (F(2x2, 3x3)) or 4 (F(4x4, 3x3)) times fewer than im2col's,
#: but its weight is 16/9 or 4 times larger, transformed on every call: with few cells (a
#: U-Net's bottom, 32 cells of 1024 channels; a ResNet's last stage, 64 of 512) that costs
#: more than it saves (measured on ResNet-18's and U-Net's layers: F(2x2, 3x3) about even
#: with im2col at 128 cells, F(4x4, 3x3) with F(2x2, 3x3) at 512). With few channels the
#: tiles' transforms outweigh the products.
WINOGRAD_MIN_CELLS: int | None = 256
WINOGRAD_MIN_CHANNELS = 16

#: From this many output cells, and an output at least 4x4, F(4x4, 3x3) rather than F(2x2,
#: 3x3) (see :data:`WINOGRAD_MIN_CELLS`).
WINOGRAD_LARGE_TILE_CELLS = 1024

#: When weight gradients run as Winograd's: ``None`` (the default) where the elements that
#: are exactly zero are known (:func:`_winograd_weight_grad_applies`), those set to 0;
#: ``True`` always (the tests); ``False`` never. Winograd's weight gradient is within its
#: bound of the products' scale, like the rest, but an element whose every product is zero
#: (a tap that only meets the padding or an activation's zeros) comes out of the transforms'
#: cancellation as rounding noise, not 0, and Adam's first steps, ``g / |g|``, turn that
#: noise into steps of the learning rate: 1 and 2 data-parallel workers trained the CLI's
#: CNN to losses 1e-4 apart in 5 steps (1e-7 with im2col's weight gradient;
#: tests/test_cli_train.py allows 1e-5). Forward and input gradients did not move that
#: comparison.
WINOGRAD_WEIGHT_GRADIENT: bool | None = None

#: Output cells (batch times map) from which a weight gradient whose input and output
#: gradient both have zeros runs as Winograd's, its dead channels' and taps' elements set to
#: 0 (:func:`_exact_zeros`).
WINOGRAD_SUPPORT_CELLS = 4096

#: Winograd's output tile, 2 or 4, forced (the tests force each); ``None``: by size.
WINOGRAD_TILE: int | None = None

#: Float32 2-d stride-1 convolutions whose kernel taps land on the padding so often that
#: at most this fraction of im2col's products read the input run tap by tap instead
#: (:func:`_tapwise_conv`): one product per kernel tap over the cells where it reads the
#: input. A ResNet's last stage, 3x3 kernels on 2x2 maps padded by 1: 16 of 36 (0.44);
#: 4x4 maps: 0.69. ``None`` turns it off.
TAPWISE_MAX_COVERED: float | None = 0.5

#: Bytes of Winograd's transformed tiles and their products per batch block
#: (:func:`_winograd_blocks`): a few times a core's L2 cache, so that the products read the
#: tiles, and the output transform the products, from the caches.
WINOGRAD_BLOCK_BYTES = 1 << 21


#: Whether :func:`_warm_blas` has run in this process.
_BLAS_WARMED = [False]


def _warm_blas() -> None:
    """Run one 384 x 384 float32 product, once per process, before the first convolution.

    NumPy's OpenBLAS (its Haswell kernels, on the AMD EPYC machines this was measured on)
    runs single-precision products at half speed in a process until a product with every
    dimension of about 352 or more has run: ``[36864, 288] @ [288, 64]``, the second
    convolution of the benchmark CNN, took 80 ms before and 42 ms after, and stayed fast
    (the process's transparent huge pages grow by 8 MB at that first large product). A
    network's convolutions need not contain such a product; this one costs a few
    milliseconds, once.
    """
    if not _BLAS_WARMED[0]:
        _BLAS_WARMED[0] = True
        square = np.ones((384, 384), dtype=np.float32)
        np.matmul(square, square)


# -- layouts ---------------------------------------------------------------------------------------
def channels_last(x: np.ndarray) -> bool:
    """Whether ``x`` ``[N, C, *spatial]`` (C > 1) lies in memory as a C-contiguous
    ``[N, *spatial, C]``: the layout convolutions write their outputs in."""
    return x.ndim > 2 and x.shape[1] > 1 and np.moveaxis(x, 1, -1).flags.c_contiguous


def _to_last(x: np.ndarray) -> np.ndarray:
    """``x`` ``[N, C, *spatial]`` as a C-contiguous ``[N, *spatial, C]`` array: a view when it
    is channels-last already, else one copy."""
    return np.ascontiguousarray(np.moveaxis(x, 1, -1))


def _from_last(x: np.ndarray) -> np.ndarray:
    """The ``[N, C, *spatial]`` view of a channels-last ``[N, *spatial, C]`` array."""
    return np.moveaxis(x, -1, 1)


def _pad_last(x: np.ndarray, before, lengths) -> np.ndarray:
    """Channels-last ``x`` ``[N, *spatial, C]`` placed at ``before`` (per spatial axis; negative
    crops) in zeros of spatial ``lengths``; what lies past ``lengths`` is cut off (a view of
    ``x`` where that is all)."""
    spatial = x.shape[1:-1]
    if all(b == 0 for b in before) and all(t <= n for t, n in zip(lengths, spatial)):
        # a view, cropped or not: a 1x1 convolution of stride 2 on an even map reads all but
        # the last row and column, and needs no copy of the rest
        everything = slice(None)
        return x[(everything, *(slice(0, t) for t in lengths), everything)]
    target, source = [], []
    for b, n, total in zip(before, spatial, lengths):
        start = max(0, -b)
        stop = min(n, total - b)
        source.append(slice(start, max(start, stop)))
        target.append(slice(start + b, start + b + max(0, stop - start)))
    out = np.zeros((x.shape[0], *lengths, x.shape[-1]), dtype=x.dtype)
    everything = slice(None)
    out[(everything, *target, everything)] = x[(everything, *source, everything)]
    return out


def _windows_last(xp: np.ndarray, kernel, stride, dilation, out_size) -> np.ndarray:
    """A view ``[N, *out_size, *kernel, C]`` of the windows of the padded channels-last
    ``xp``: element ``[n, o..., k..., c]`` is the cell kernel offset ``k`` of output ``o``
    reads."""
    ndim = len(kernel)
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    windows = sliding_window_view(xp, extents, axis=tuple(range(1, 1 + ndim)))
    # [N, *positions, C, *extents]: every stride-th position, every dilation-th cell
    windows = windows[
        (slice(None),)
        + tuple(slice(0, s * (o - 1) + 1, s) for s, o in zip(stride, out_size))
        + (slice(None),)
        + tuple(slice(None, None, d) for d in dilation)
    ]
    return windows.transpose(0, *range(1, 1 + ndim), *range(2 + ndim, 2 + 2 * ndim), 1 + ndim)


def _blocks(n: int, sample_bytes: int, block_bytes: int | None = None):
    """``(size, starts)``: batch blocks of about ``block_bytes`` (by default
    :data:`COLUMN_BLOCK_BYTES`, read at each call) of columns."""
    if block_bytes is None:
        block_bytes = COLUMN_BLOCK_BYTES
    size = max(1, min(n, block_bytes // max(sample_bytes, 1)))
    return size, range(0, n, size)


def _offsets(kernel):
    """Every kernel offset, as a tuple of one index per spatial axis."""
    return itertools.product(*(range(k) for k in kernel))


def _offset_cells(offsets, counts, stride, dilation) -> tuple:
    """For one kernel offset: the slices of the padded input the ``counts`` outputs read (of
    the padded output a transposed convolution's inputs write), per spatial axis."""
    return tuple(
        slice(k * d, k * d + s * (n - 1) + 1, s)
        for k, n, s, d in zip(offsets, counts, stride, dilation)
    )


def _channel_major(weight_size: int, column_size: int) -> bool:
    """Whether a convolution orders its columns ``(c, *kernel)``, the weight's own order,
    whose matrix is then a view, rather than ``(*kernel, c)``, whose copy from a
    channels-last input is several times faster (runs of ``kernel[-1] * C`` values against
    runs of ``C`` values written ``prod(kernel)`` apart) but which needs the weight
    reordered, a copy as large as the weight. Measured, the reorder costs more than the
    slower copy about when the weight outgrows the columns: in the deep layers of a network,
    small maps with many channels (a U-Net's bottom, a ResNet's last stage)."""
    return weight_size > column_size


def _column_offset(columns, offsets, channel_major: bool, ndim: int):
    """The part of ``columns`` ``[B, *cells, *kernel, C]`` (``[B, *cells, C, *kernel]`` when
    ``channel_major``) at one kernel offset: ``[B, *cells, C]``."""
    everything = (slice(None),) * (1 + ndim)
    if channel_major:
        return columns[(*everything, slice(None), *offsets)]
    return columns[(*everything, *offsets, slice(None))]


def _columns_last(
    xcl, kernel, stride, padding, dilation, out_size, channel_major, extra=0, ones=False
):
    """Yield ``(start, stop, columns)`` per batch block of the channels-last ``xcl``: the
    columns ``[(stop - start) * cells, rows]``, C-contiguous, in output order, the rows
    ordered ``(*kernel, c)`` or, ``channel_major``, ``(c, *kernel)``; with ``ones`` (rows
    ordered ``(*kernel, c)`` only), a last column of ones besides: ``[..., rows + 1]``.

    ``padding`` is the zero padding before each spatial axis (the padding after is whatever
    the windows need). ``extra``: bytes per output cell the caller writes while the block is
    cached, counted in the block's size. One buffer serves every block; a 1x1 kernel of
    stride 1 without padding yields the input itself. ``(*kernel, c)`` columns are one
    copy of a window view; ``(c, *kernel)`` ones one copy per kernel offset (runs of ``C``
    values), the faster way to write them.
    """
    n, c = xcl.shape[0], xcl.shape[-1]
    ndim = len(kernel)
    cells = math.prod(out_size)
    pointwise = all(k == 1 for k in kernel) and all(s == 1 for s in stride)
    if pointwise and not any(padding) and tuple(out_size) == xcl.shape[1:-1] and not ones:
        yield 0, n, xcl.reshape(n * cells, c)
        return
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    needed = [s * (o - 1) + e for s, o, e in zip(stride, out_size, extents)]
    padded = _pad_last(xcl, padding, needed)
    rows = c * math.prod(kernel)
    size, starts = _blocks(n, (rows * xcl.itemsize + extra) * cells)
    if channel_major:
        buffer = np.empty((size, *out_size, c, *kernel), dtype=xcl.dtype)
    else:
        windows = _windows_last(padded, kernel, stride, dilation, out_size)
        buffer = np.empty((size, *out_size, rows + ones), dtype=xcl.dtype)
        buffer[..., rows:] = 1
    for start in starts:
        stop = min(start + size, n)
        block = buffer[: stop - start]
        if channel_major:
            for offsets in _offsets(kernel):
                source = padded[
                    (slice(start, stop), *_offset_cells(offsets, out_size, stride, dilation))
                ]
                _column_offset(block, offsets, True, ndim)[...] = source
        else:
            target = block[..., :rows].reshape(stop - start, *windows.shape[1:], copy=False)
            np.copyto(target, windows[start:stop])
        yield start, stop, block.reshape((stop - start) * cells, rows + ones)


def _weight_rows(weight: np.ndarray, channel_major: bool) -> np.ndarray:
    """``weight`` ``[O, C, *kernel]`` as ``[O, rows]``, rows ordered as the columns: a view
    when ``channel_major``, else a copy ordered ``(*kernel, c)``."""
    if channel_major:
        return weight.reshape(weight.shape[0], -1)
    return np.moveaxis(weight, 1, -1).reshape(weight.shape[0], -1)


def _flipped_transposed(weight: np.ndarray) -> np.ndarray:
    """``weight`` ``[C_in, C_out, *kernel]`` of a transposed convolution as the weight
    ``[C_out, C_in, *kernel]`` of the equivalent stride-1 convolution: flipped in space."""
    spatial = tuple(range(2, weight.ndim))
    return np.flip(weight, spatial).swapaxes(0, 1)


class _Scratch(threading.local):
    """Per thread, grow-only buffers for a convolution's temporaries (by slot name)."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}


_SCRATCH = _Scratch()

#: The largest scratch array :func:`_scratch` keeps between calls (per slot and thread):
#: a batch block's is about :data:`WINOGRAD_BLOCK_BYTES`, more only when one sample is more.
SCRATCH_KEEP_BYTES = 1 << 25


def _scratch(slot: str, shape, dtype) -> np.ndarray:
    """An uninitialized C-contiguous array of ``shape`` in this thread's buffer ``slot``, kept
    between calls: Winograd's transformed tiles are megabytes, and a fresh array that size is a
    fresh mapping from the system (glibc maps large blocks) whose every page faults when first
    written: 1300 faults, 2.8 ms of system time, on a ResNet-18 layer whose products take 1.7.
    A slot's contents are valid until its next use in the same thread. Arrays larger than
    :data:`SCRATCH_KEEP_BYTES` are fresh, not kept (one huge image would hold its memory)."""
    size = math.prod(shape)
    if size * np.dtype(dtype).itemsize > SCRATCH_KEEP_BYTES:
        return np.empty(shape, dtype=dtype)
    buffer = _SCRATCH.buffers.get(slot)
    if buffer is None or buffer.dtype != dtype or buffer.size < size:
        buffer = np.empty(size, dtype=dtype)
        _SCRATCH.buffers[slot] = buffer
    return buffer[:size].reshape(shape)


def _winograd(dtype, weight_shape, stride, dilation, n: int, out_size) -> bool:
    """Whether a convolution by a weight of ``weight_shape`` (``[C_out, C_in, *kernel]`` or
    a transposed convolution's ``[C_in, C_out, *kernel]``) runs as Winograd's F(2x2, 3x3)
    (:mod:`.compiled_winograd`): float32, a 3x3 kernel of stride 1 and no dilation, enough
    cells and channels (:data:`WINOGRAD_MIN_CELLS`)."""
    if WINOGRAD_MIN_CELLS is None or dtype != np.float32 or tuple(weight_shape[2:]) != (3, 3):
        return False
    if tuple(stride) != (1, 1) or tuple(dilation) != (1, 1):
        return False
    if min(weight_shape[:2]) < WINOGRAD_MIN_CHANNELS:
        return False
    return n * out_size[0] * out_size[1] >= WINOGRAD_MIN_CELLS


def _winograd_tile(n: int, out_size) -> int:
    """The output tile's side: :data:`WINOGRAD_TILE` where set, else 4 from
    :data:`WINOGRAD_LARGE_TILE_CELLS` output cells where each side has room for it, else 2."""
    if WINOGRAD_TILE is not None:
        return WINOGRAD_TILE
    large = n * math.prod(out_size) >= WINOGRAD_LARGE_TILE_CELLS and min(out_size) >= 4
    return 4 if large else 2


def _winograd_blocks(xcl, padding, out_size, channels_out, tile):
    """Yield ``(start, stop, v)`` per batch block: the transformed input tiles ``v``
    ``[(tile + 2) ** 2, tiles, C]`` (this thread's scratch) of samples ``start:stop`` of the
    channels-last ``xcl`` padded by ``padding`` before each axis, for an output of
    ``out_size``. A block's tiles and their products (``channels_out`` per tile) take about
    :data:`WINOGRAD_BLOCK_BYTES`, so that each product reads its tiles from the cache."""
    from .winograd_numpy import input_tiles, input_tiles4

    n, c_in = xcl.shape[0], xcl.shape[-1]
    tiles_h, tiles_w = (out_size[0] + tile - 1) // tile, (out_size[1] + tile - 1) // tile
    points = (tile + 2) ** 2
    xp = _pad_last(xcl, padding, (tile * tiles_h + 2, tile * tiles_w + 2))
    per_sample = points * tiles_h * tiles_w * (c_in + channels_out) * xcl.itemsize
    size, starts = _blocks(n, per_sample, WINOGRAD_BLOCK_BYTES)
    transform = input_tiles4 if tile == 4 else input_tiles
    for start in starts:
        stop = min(start + size, n)
        v = _scratch("tiles", (points, (stop - start) * tiles_h * tiles_w, c_in), xcl.dtype)
        transform(xp[start:stop], tiles_h, tiles_w, v)
        yield start, stop, v


def _winograd_weight(weight: np.ndarray, flipped: bool, tile: int) -> np.ndarray:
    """The transformed weight ``[(tile + 2) ** 2, A, B]`` of ``weight`` ``[A, B, 3, 3]``:
    ``G w G^T``, of the weight turned by 180 degrees with ``flipped``."""
    from .compiled_winograd import FLIPPED, UNFLIPPED
    from .winograd_numpy import weight_tiles, weight_tiles4

    u = np.empty(((tile + 2) ** 2, *weight.shape[:2]), dtype=weight.dtype)
    taps = np.ascontiguousarray(weight).reshape(*weight.shape[:2], 9)
    if tile == 4:
        weight_tiles4(taps, flipped, u)
    else:
        weight_tiles(taps, FLIPPED if flipped else UNFLIPPED, u)
    return u


def _winograd_conv(xcl, weight, bias, padding, out_size, transposed=False):
    """:func:`_conv_last` of a 3x3 stride-1 kernel as F(2x2, 3x3) or F(4x4, 3x3): 16 or 36
    products ``[tiles, C] @ [C, O]`` between the transforms. ``transposed``: ``weight`` is a
    transposed convolution's ``[C, O, 3, 3]`` and the convolution the stride-1 one with its
    flip."""
    from .winograd_numpy import output_tiles, output_tiles4

    tile = _winograd_tile(xcl.shape[0], out_size)
    u = _winograd_weight(weight, transposed, tile)
    u = u if transposed else u.transpose(0, 2, 1)  # [points, C, O]
    c_out = u.shape[2]
    out = np.empty((xcl.shape[0], *out_size, c_out), dtype=xcl.dtype)
    transform = output_tiles4 if tile == 4 else output_tiles
    for start, stop, v in _winograd_blocks(xcl, padding, out_size, c_out, tile):
        m = _scratch("products", (len(u), v.shape[1], c_out), xcl.dtype)
        np.matmul(v, u, out=m)
        transform(m, out[start:stop], bias, bias.size > 0)
    return out


def _winograd_weight_grad(xcl, gcl, padding):
    """:func:`_weight_grad_last` of a 3x3 stride-1 kernel as F(2x2, 3x3) or F(4x4, 3x3):
    ``dU = sum over blocks of Z^T @ V`` (``Z = A dY A^T``), then ``G^T dU G``."""
    from .winograd_numpy import (
        grad_tiles,
        grad_tiles4,
        weight_grad_untile,
        weight_grad_untile4,
    )

    out_size = gcl.shape[1:-1]
    tile = _winograd_tile(gcl.shape[0], out_size)
    c_out = gcl.shape[-1]
    whole = tuple(tile * ((length + tile - 1) // tile) for length in out_size)
    gp = _pad_last(gcl, (0, 0), whole)
    transform = grad_tiles4 if tile == 4 else grad_tiles
    du = part = None
    for start, stop, v in _winograd_blocks(xcl, padding, out_size, c_out, tile):
        z = _scratch("products", (len(v), v.shape[1], c_out), gcl.dtype)
        transform(gp[start:stop], z)
        if du is None:
            du = np.matmul(z.transpose(0, 2, 1), v)  # [points, O, C]
        else:
            part = np.matmul(z.transpose(0, 2, 1), v, out=part)
            du += part
    taps = np.empty((*du.shape[1:], 9), dtype=du.dtype)
    (weight_grad_untile4 if tile == 4 else weight_grad_untile)(du, taps)
    return taps.reshape(*du.shape[1:], 3, 3)


def _winograd_backward(xcl, gcl, weight, padding, needs_dx: bool, needs_dw: bool):
    """A 3x3 stride-1 convolution's input and weight gradients (channels-last ``dx``,
    ``dw``; ``None`` where not needed) as F(4x4, 3x3) transposed, sharing the transformed
    output-gradient tiles ``Z = A dY A^T``: ``dU = sum Z^T @ V`` as
    :func:`_winograd_weight_grad`, and ``dV = Z @ U`` folded back, ``B dV B^T`` per tile
    added where the forward's tile read its input (:func:`.compiled_winograd.fold_tiles4`).
    The forward's own tiling, so no output-gradient padding and no partial tiles beyond the
    forward's: an unpadded convolution's input gradient as a convolution of the output
    gradient padded by 2 has 36% more products on the small CNN's 24x24 maps."""
    from .winograd_numpy import (
        fold_tiles4,
        grad_tiles4,
        input_tiles4,
        weight_grad_untile4,
    )

    n, c_in, c_out = gcl.shape[0], xcl.shape[-1], gcl.shape[-1]
    out_size = gcl.shape[1:-1]
    tiles_h, tiles_w = (out_size[0] + 3) // 4, (out_size[1] + 3) // 4
    per_tile = tiles_h * tiles_w
    gp = _pad_last(gcl, (0, 0), (4 * tiles_h, 4 * tiles_w))
    if needs_dw:
        xp = _pad_last(xcl, padding, (4 * tiles_h + 2, 4 * tiles_w + 2))
    u = _winograd_weight(weight, False, 4) if needs_dx else None  # [36, O, C]
    dx = np.zeros_like(xcl) if needs_dx else None
    per_sample = 36 * per_tile * (2 * c_in + c_out) * xcl.itemsize
    size, starts = _blocks(n, per_sample, WINOGRAD_BLOCK_BYTES)
    du = part = None
    for start in starts:
        stop = min(start + size, n)
        z = _scratch("grads", (36, (stop - start) * per_tile, c_out), gcl.dtype)
        grad_tiles4(gp[start:stop], z)
        if needs_dw:
            v = _scratch("tiles", (36, (stop - start) * per_tile, c_in), xcl.dtype)
            input_tiles4(xp[start:stop], tiles_h, tiles_w, v)
            if du is None:
                du = np.matmul(z.transpose(0, 2, 1), v)  # [36, O, C]
            else:
                part = np.matmul(z.transpose(0, 2, 1), v, out=part)
                du += part
        if needs_dx:
            m = _scratch("products", (36, (stop - start) * per_tile, c_in), xcl.dtype)
            np.matmul(z, u, out=m)
            fold_tiles4(m, dx[start:stop], tiles_h, tiles_w, *padding)
    dw = None
    if needs_dw:
        taps = np.empty((c_out, c_in, 9), dtype=xcl.dtype)
        weight_grad_untile4(du, taps)
        dw = taps.reshape(c_out, c_in, 3, 3)
    return dx, dw


def _tap_cells(in_size, out_size, kernel, padding):
    """Yield ``(offsets, outputs, inputs)`` per kernel tap that reads the input at all (2-d
    or any, stride 1, no dilation): the slices of output cells whose window puts that tap
    on an input cell, and of those input cells."""
    for offsets in _offsets(kernel):
        outputs, inputs = [], []
        for k, n, m, p in zip(offsets, in_size, out_size, padding):
            low, high = max(0, p - k), min(m, n + p - k)
            if high <= low:
                break
            outputs.append(slice(low, high))
            inputs.append(slice(low + k - p, high + k - p))
        else:
            yield offsets, tuple(outputs), tuple(inputs)


def _tapwise(dtype, weight_shape, stride, dilation, in_size, out_size, padding) -> bool:
    """Whether a convolution runs tap by tap (:data:`TAPWISE_MAX_COVERED`)."""
    if TAPWISE_MAX_COVERED is None or dtype != np.float32 or len(weight_shape) != 4:
        return False
    if any(s != 1 for s in stride) or any(d != 1 for d in dilation):
        return False
    kernel = weight_shape[2:]
    covered = sum(
        math.prod(s.stop - s.start for s in outputs)
        for _, outputs, _ in _tap_cells(in_size, out_size, kernel, padding)
    )
    return covered <= TAPWISE_MAX_COVERED * math.prod(kernel) * math.prod(out_size)


#: Weights of this many elements or more are reordered tap-major, and their tap-major
#: gradients back, by compiled loops (:func:`.compiled_conv.taps_first`, ``taps_last``: 0.5
#: ms each way on ResNet-18's last stage, 512x512x3x3, against NumPy's copies' 0.8 and 1.0,
#: three times a step each); smaller ones by NumPy's copy, so that a small model never loads
#: Numba.
COMPILED_REORDER_MIN_SIZE = 1 << 16


def _compiled_reorder(weight: np.ndarray) -> bool:
    return weight.size >= COMPILED_REORDER_MIN_SIZE and weight.dtype in (np.float32, np.float64)


def _tap_major(weight: np.ndarray, buffer: np.ndarray | None = None) -> np.ndarray:
    """``weight`` ``[O, C, *kernel]`` (any strides) as ``[*kernel, O, C]`` (C-contiguous):
    each tap's matrix a product's operand; written at the start of the flat ``buffer`` when
    one is given (large enough)."""
    o, c, kernel = *weight.shape[:2], weight.shape[2:]
    if not _compiled_reorder(weight):
        return np.ascontiguousarray(np.moveaxis(weight, (0, 1), (-2, -1)))
    from .compiled_conv import taps_first

    if buffer is None:
        taps = np.empty((*kernel, o, c), dtype=weight.dtype)
    else:
        taps = buffer[: weight.size].reshape(*kernel, o, c)
    taps_first(weight.reshape(o, c, -1), taps.reshape(-1, o, c))
    return taps


def _from_tap_major(taps: np.ndarray, out: np.ndarray) -> None:
    """Write ``taps`` ``[*kernel, O, C]`` (C-contiguous) into the C-contiguous ``out`` ``[O,
    C, *kernel]``."""
    o, c = taps.shape[-2:]
    if not _compiled_reorder(taps):
        out[...] = np.moveaxis(taps, (-2, -1), (0, 1))
        return
    from .compiled_conv import taps_last

    taps_last(taps.reshape(-1, o, c), out.reshape(o, c, -1))


#: Bytes of weight a tap-by-tap convolution's forward and weight gradient reorder at a time
#: (:func:`_tap_blocks`; one buffer for all blocks): the products then read the reordered
#: block from the caches, and the weight gradient is written into its layout from them.
#: ResNet-18's last stage (a 9.4 MB weight; blocks of 113 filters), best of 25 interleaved
#: runs: forward 2.9 -> 2.7 ms with the caches flushed before each (as in a training step,
#: where the weight was last touched by the previous step's update), 2.4 -> 2.3 warm;
#: weight gradient even flushed, 2.2 -> 1.9 warm. The input gradient reads the whole weight
#: at once: in blocks of channels (strided runs of the weight) it was slower.
TAPWISE_BLOCK_BYTES = 1 << 21


def _tap_blocks(length: int, other: int, taps: int, itemsize: int) -> list[slice]:
    """Slices of ``length`` filters (or channels) whose weight, ``other`` channels (filters)
    by ``taps`` each, takes about :data:`TAPWISE_BLOCK_BYTES`."""
    size = max(1, TAPWISE_BLOCK_BYTES // max(1, other * taps * itemsize))
    return [slice(start, min(start + size, length)) for start in range(0, length, size)]


def _whole_first(cells: list, lengths, side: int) -> bool:
    """Move to the front of ``cells`` (:func:`_tap_cells`' triples) a tap whose slices on
    ``side`` (1: the outputs, 2: the inputs) span all of ``lengths``, if one does (a 'same'
    convolution's centre tap), and say whether one did: that tap's product is written into
    the result, which then needs no zeros and one add less."""
    for index, cell in enumerate(cells):
        if all(s.stop - s.start == n for s, n in zip(cell[side], lengths)):
            cells.insert(0, cells.pop(index))
            return True
    return False


def _cell_rows(cells: np.ndarray) -> np.ndarray:
    """Channels-last ``cells`` ``[N, *spatial, C]`` as rows ``[N * cells, C]`` (any of them
    zero: ``reshape(-1, 0)`` cannot say how many rows)."""
    return cells.reshape(math.prod(cells.shape[:-1]), cells.shape[-1])


def _place_product(target: np.ndarray, product: np.ndarray, first: bool) -> None:
    """Write (``first``) or add ``product`` (rows of ``target``'s cells) into ``target``."""
    product = product.reshape(target.shape)
    if first:
        np.copyto(target, product)
    else:
        target += product


def _tapwise_conv(xcl, weight, bias, padding, out_size):
    """:func:`_conv_last` (stride 1) tap by tap: per kernel tap, the input cells it reads
    times its ``[O, C]`` matrix, added to the outputs that read them (no products of the
    padding's zeros); a block of filters at a time (:data:`TAPWISE_BLOCK_BYTES`)."""
    n, c_in, c_out = xcl.shape[0], xcl.shape[-1], weight.shape[0]
    kernel = weight.shape[2:]
    cells = list(_tap_cells(xcl.shape[1:-1], out_size, kernel, padding))
    whole = _whole_first(cells, out_size, 1)
    out = (np.empty if whole else np.zeros)((n, *out_size, c_out), dtype=xcl.dtype)
    everything = slice(None)
    rows = [_cell_rows(xcl[(everything, *inputs, everything)]) for _, _, inputs in cells]
    blocks = _tap_blocks(c_out, c_in, math.prod(kernel), xcl.itemsize)
    buffer = None  # one for every block's reordered weight, which then stays in the caches
    if len(blocks) > 1:
        buffer = np.empty(blocks[0].stop * c_in * math.prod(kernel), dtype=weight.dtype)
    for block in blocks:
        taps = _tap_major(weight[block], buffer)
        for index, (offsets, outputs, _) in enumerate(cells):
            target = out[(everything, *outputs, block)]
            _place_product(target, np.matmul(rows[index], taps[offsets].T), index == 0 and whole)
    if bias.size:
        out += bias
    return out


def _tapwise_backward(xcl, gcl, weight, padding, needs_dx: bool, needs_dw: bool):
    """:func:`_tapwise_conv`'s input and weight gradients (channels-last ``dx``, ``dw``;
    ``None`` where not needed), tap by tap; ``dw`` a block of filters at a time, written from
    the caches into its own layout."""
    c_in, c_out = xcl.shape[-1], gcl.shape[-1]
    in_size, kernel = xcl.shape[1:-1], weight.shape[2:]
    taps_count = math.prod(kernel)
    cells = list(_tap_cells(in_size, gcl.shape[1:-1], kernel, padding))
    whole = _whole_first(cells, in_size, 2)
    everything = slice(None)
    g_rows = [_cell_rows(gcl[(everything, *outputs, everything)]) for _, outputs, _ in cells]
    dx = dw = None
    if needs_dx:  # the whole weight at once: in blocks of channels it read slower
        dx = (np.empty_like if whole else np.zeros_like)(xcl)
        taps = _tap_major(weight)
        for index, (offsets, _, inputs) in enumerate(cells):
            target = dx[(everything, *inputs, everything)]
            _place_product(target, np.matmul(g_rows[index], taps[offsets]), index == 0 and whole)
    if needs_dw:
        x_rows = [_cell_rows(xcl[(everything, *inputs, everything)]) for *_, inputs in cells]
        read = {offsets for offsets, _, _ in cells}
        dw = np.empty((c_out, c_in, *kernel), dtype=xcl.dtype)
        blocks = _tap_blocks(c_out, c_in, taps_count, xcl.itemsize)
        largest = blocks[0].stop if blocks else 0
        buffer = np.empty(largest * c_in * taps_count, dtype=xcl.dtype)
        for block in blocks:
            shape = (*kernel, block.stop - block.start, c_in)
            taps = buffer[: math.prod(shape)].reshape(shape)
            for offsets in _offsets(kernel):
                if offsets not in read:  # a tap that only meets the padding
                    taps[offsets] = 0
            for index, (offsets, _, _) in enumerate(cells):
                np.matmul(g_rows[index][:, block].T, x_rows[index], out=taps[offsets])
            _from_tap_major(taps, dw[block])
    return dx, dw


def _exact_zeros(x_nonzero, g_nonzero, x_dense, g_dense, kernel, padding):
    """Where a stride-1 convolution's weight gradient ``[O, C, *kernel]`` is exactly zero
    because one side of its products is, from where the input and the output gradient are
    nonzero (``[N, *spatial, channels]`` booleans; ``*_dense``: nonzero everywhere): every
    element is a sum of products ``g[n, o, p] * x[n, c, p + k - padding]``, so element
    ``(o, c, k)`` is zero where channel ``c`` of the input is zero on every cell tap ``k``
    reads (a dead channel; one alive only where a tap cannot reach), and where channel ``o`` of
    the output gradient is zero on every cell tap ``k`` sends to (a dead filter). A boolean
    array broadcasting to the gradient. A side without zeros adds only the taps that read
    nothing but padding, which the other side marks too. Where both sides have zeros (ReLU's
    and max-pooling's) an element may also vanish because their supports miss each other; on
    maps of more than :data:`WINOGRAD_SUPPORT_CELLS` cells, with no dead channel, that is
    taken not to happen (see :func:`_winograd_weight_grad_applies`)."""
    cells = list(_tap_cells(x_nonzero.shape[1:-1], g_nonzero.shape[1:-1], kernel, padding))

    def dead_taps(nonzero, inputs_side):
        alive = nonzero.any(axis=0)  # [*spatial, channels]
        zeros = np.ones((*kernel, nonzero.shape[-1]), dtype=bool)
        for offsets, outputs, inputs in cells:
            region = inputs if inputs_side else outputs
            zeros[offsets] = ~alive[(*region, slice(None))].any(axis=tuple(range(len(kernel))))
        return np.moveaxis(zeros, -1, 0)  # [channels, *kernel]

    if g_dense and not x_dense:
        return dead_taps(x_nonzero, True)[None]
    if x_dense and not g_dense:
        return dead_taps(g_nonzero, False)[:, None]
    zeros = dead_taps(x_nonzero, True)[None]  # both dense: the padding-only taps
    return zeros if g_dense else zeros | dead_taps(g_nonzero, False)[:, None]


def _winograd_weight_grad_applies(xcl, gcl, kernel, padding):
    """``(applies, zeros)``: whether a Winograd-eligible weight gradient runs as Winograd's
    (:data:`WINOGRAD_WEIGHT_GRADIENT`), and the mask of its exact zeros to set (or ``None``).
    By default it runs where every exact zero is known: one side has no zeros, or the maps
    are large enough (:data:`WINOGRAD_SUPPORT_CELLS`) that two supports of a live input
    channel and a live filter missing each other on every sample is not a case to plan for."""
    if WINOGRAD_WEIGHT_GRADIENT is not None:
        return WINOGRAD_WEIGHT_GRADIENT, None
    x_nonzero, g_nonzero = xcl != 0, gcl != 0
    x_dense, g_dense = bool(x_nonzero.all()), bool(g_nonzero.all())
    if not (x_dense or g_dense) and math.prod(gcl.shape[:-1]) < WINOGRAD_SUPPORT_CELLS:
        return False, None
    return True, _exact_zeros(x_nonzero, g_nonzero, x_dense, g_dense, kernel, padding)


def _conv_last(xcl, weight, bias, stride, padding, dilation, out_size, channel_major=None):
    """Channels-last convolution: ``xcl`` ``[N, *in, C]`` and ``weight`` ``[O, C, *kernel]``
    give ``[N, *out_size, O]`` (C-contiguous), ``bias`` (``[O]`` or empty) added.
    ``channel_major``: the columns' order (see :func:`_channel_major`), chosen here when
    ``None``."""
    _warm_blas()
    n, c_out = xcl.shape[0], weight.shape[0]
    kernel = weight.shape[2:]
    if _winograd(xcl.dtype, weight.shape, stride, dilation, n, out_size):
        return _winograd_conv(xcl, weight, bias, padding, out_size)
    cells = math.prod(out_size)
    if channel_major is None:
        channel_major = _channel_major(weight.size, n * cells * weight[0].size)
    w_rows = _weight_rows(weight, channel_major)
    bias_column = bias.size > 0 and not channel_major and w_rows.shape[1] < BIAS_COLUMN_ROWS
    if bias_column:
        w_rows = np.concatenate([w_rows, bias.reshape(c_out, 1)], axis=1)
    out = np.empty((n, cells, c_out), dtype=xcl.dtype)
    for start, stop, columns in _columns_last(
        xcl,
        kernel,
        stride,
        padding,
        dilation,
        out_size,
        channel_major,
        c_out * xcl.itemsize,
        bias_column,
    ):
        block = out[start:stop].reshape((stop - start) * cells, c_out)
        np.matmul(columns, w_rows.T, out=block)
        if bias.size and not bias_column:  # while the block is in cache
            block += bias
    return out.reshape(n, *out_size, c_out)


def _folded_lengths(in_size, kernel, stride, padding, dilation, out_size) -> list[int]:
    """The spatial size of a transposed convolution's output before its padding is cropped:
    every window's reach, and at least ``padding + out_size`` (an ``output_padding`` past the
    windows adds cells no input reaches)."""
    return [
        max(s * (m - 1) + d * (k - 1) + 1, p + o)
        for m, k, s, p, d, o in zip(in_size, kernel, stride, padding, dilation, out_size)
    ]


def _conv_transpose_last(xcl, weight, bias, stride, padding, output_padding, dilation):
    """Ungrouped transposed convolution of the channels-last ``xcl`` ``[N, *in, C_in]`` by
    ``weight`` ``[C_in, C_out, *kernel]``: ``[N, *out, C_out]``, C-contiguous.

    Three ways, by shape. With stride 1 and ``C_out >= C_in``, a convolution with the flipped
    weight (every output cell written once; its columns hold ``C_in`` values per kernel
    offset). Otherwise the products ``x @ weight`` (``C_out`` values per input cell and
    kernel offset: fewer, when ``C_out < C_in``) are placed: copied to their own output cells
    when the stride equals the kernel (the windows do not overlap), else folded (col2im: one
    strided add per kernel offset). A weight larger than the products is never reordered
    (see :func:`_channel_major`): the products are ordered ``(c, *kernel)``, its own order,
    and folded.
    """
    _warm_blas()
    n, c_in = xcl.shape[0], xcl.shape[-1]
    in_size, kernel = xcl.shape[1:-1], weight.shape[2:]
    ndim = len(kernel)
    c_out = weight.shape[1]
    out_size = tuple(
        conv_transpose_output_size(*args)
        for args in zip(in_size, kernel, stride, padding, output_padding, dilation)
    )
    cells = math.prod(in_size)
    channel_major = _channel_major(weight.size, n * cells * weight[0].size)
    if _winograd(xcl.dtype, weight.shape, stride, dilation, n, out_size):
        before = tuple(k - 1 - p for k, p in zip(kernel, padding))
        return _winograd_conv(xcl, weight, bias, before, out_size, transposed=True)
    if all(s == 1 for s in stride) and not channel_major and c_out >= c_in:
        # The adjoint of a stride-1 convolution is a convolution with the flipped weight,
        # padded by the kernel's reach less the padding (negative: cropped) on the left.
        before = tuple(d * (k - 1) - p for k, d, p in zip(kernel, dilation, padding))
        flipped = _flipped_transposed(weight)
        return _conv_last(xcl, flipped, bias, stride, before, dilation, out_size, False)
    # products [B, *in, (*kernel, C_out)] (or (C_out, *kernel)) = x @ weight
    if channel_major:
        w_rows = weight.reshape(c_in, -1)
        shape = (*in_size, c_out, *kernel)
    else:
        w_rows = np.moveaxis(weight, 1, -1).reshape(c_in, -1)
        shape = (*in_size, *kernel, c_out)
    full = _folded_lengths(in_size, kernel, stride, padding, dilation, out_size)
    everything = slice(None)
    # one matrix per block, [B * cells, C_in]: a stack [B, cells, C_in] would be B products
    # (NumPy's matmul multiplies a stack by a matrix one matrix at a time), each as short as a
    # deep layer's few cells: [16, 4, 512] @ [512, 4608] took three times [64, 512]'s time.
    rows = xcl.reshape(n * cells, c_in)
    size, starts = _blocks(n, w_rows.shape[1] * cells * xcl.itemsize)
    disjoint = all(s == k and d == 1 for s, k, d in zip(stride, kernel, dilation))
    if disjoint:  # every output cell is written by one kernel offset of one input cell
        out = np.empty((n, *full, c_out), dtype=xcl.dtype)
        reach = tuple(s * m for s, m in zip(stride, in_size))
        for axis, length in enumerate(reach, start=1):  # cells past every window
            index = [everything] * out.ndim
            index[axis] = slice(length, None)
            out[tuple(index)] = 0
        # [N, m1, k1, m2, k2, ..., C] is the covered part, interleaving input and offset
        covered = out[(everything, *(slice(0, r) for r in reach), everything)]
        interleaved = covered.reshape(n, *itertools.chain(*zip(in_size, kernel)), c_out, copy=False)
        order = (0, *range(1, 2 * ndim + 1, 2), *range(2, 2 * ndim + 2, 2), 2 * ndim + 1)
        target = interleaved.transpose(order)  # [N, *in, *kernel, C]
        if channel_major:  # [N, *in, C, *kernel]
            target = np.moveaxis(target, -1, 1 + ndim)
        for start in starts:
            stop = min(start + size, n)
            products = np.matmul(rows[start * cells : stop * cells], w_rows)
            target[start:stop] = products.reshape(stop - start, *shape)
    else:
        compiled = _compiled_fold(ndim, channel_major, xcl.dtype, n * math.prod(full) * c_out)
        out = (np.empty if compiled else np.zeros)((n, *full, c_out), dtype=xcl.dtype)
        if compiled:  # blocks whose products stay in cache until folded
            size, starts = _blocks(n, w_rows.shape[1] * cells * xcl.itemsize, FOLD_BLOCK_BYTES)
        buffer = np.empty((size * cells, w_rows.shape[1]), dtype=xcl.dtype)
        for start in starts:
            stop = min(start + size, n)
            products = np.matmul(
                rows[start * cells : stop * cells], w_rows, out=buffer[: (stop - start) * cells]
            )
            products = products.reshape(stop - start, *shape)
            block = out[start:stop]
            if compiled:  # the same sums in the same order (compiled_conv)
                compiled(products, block, *stride, *dilation)
                continue
            for offsets in _offsets(kernel):
                target = block[(everything, *_offset_cells(offsets, in_size, stride, dilation))]
                target += _column_offset(products, offsets, channel_major, ndim)
    crop = tuple(slice(p, p + o) for p, o in zip(padding, out_size))
    out = out[(everything, *crop, everything)]
    if bias.size:
        out = np.add(out, bias)  # a contiguous copy, bias added
    return np.ascontiguousarray(out)


#: Folds (and bias gradients) of this many elements or more run compiled
#: (:mod:`.compiled_conv`); smaller ones stay NumPy's, so that a small model never loads Numba.
COMPILED_FOLD_MIN_SIZE = 1 << 16


def _compiled_fold(ndim: int, channel_major: bool, dtype, size: int):
    """The compiled fold for a 2-d fold of products ordered ``(*kernel, c)`` in float32 or
    float64 of at least :data:`COMPILED_FOLD_MIN_SIZE` elements, else ``None``."""
    if ndim != 2 or channel_major or dtype not in (np.float32, np.float64):
        return None
    if size < COMPILED_FOLD_MIN_SIZE:
        return None
    from .compiled_conv import fold2d

    return fold2d


def _weight_grad_last(xcl, gcl, kernel, stride, padding, dilation, winograd_checked=False):
    """The weight gradient ``[O, C, *kernel]`` of an ungrouped convolution from the
    channels-last input ``xcl`` and output gradient ``gcl`` ``[N, *out, O]``: one product
    ``[O, N * cells] @ [N * cells, rows]`` per block of columns (or Winograd's, unless
    ``winograd_checked``: the caller already found it does not apply)."""
    _warm_blas()
    n, c_in, c_out = xcl.shape[0], xcl.shape[-1], gcl.shape[-1]
    out_size = gcl.shape[1:-1]
    winograd = not winograd_checked and _winograd(
        xcl.dtype, (c_out, c_in, *kernel), stride, dilation, n, out_size
    )
    if winograd:
        applies, zeros = _winograd_weight_grad_applies(xcl, gcl, kernel, padding)
        if applies:
            grad = _winograd_weight_grad(xcl, gcl, padding)
            if zeros is not None:
                grad[np.broadcast_to(zeros, grad.shape)] = 0
            return grad
    cells = math.prod(out_size)
    rows = c_in * math.prod(kernel)
    channel_major = _channel_major(c_out * rows, n * cells * rows)
    g = gcl.reshape(n, cells, c_out)
    grad = np.zeros((c_out, rows), dtype=xcl.dtype)  # an empty batch's
    for start, stop, columns in _columns_last(
        xcl, kernel, stride, padding, dilation, out_size, channel_major
    ):
        part = np.matmul(g[start:stop].reshape(len(columns), c_out).T, columns)
        grad = part if start == 0 else np.add(grad, part, out=grad)
    if channel_major:
        return grad.reshape(c_out, c_in, *kernel)
    grad = grad.reshape(c_out, *kernel, c_in)
    return np.ascontiguousarray(np.moveaxis(grad, -1, 1))


def _channel_sums(xcl: np.ndarray) -> np.ndarray:
    """Per channel, the sum of the channels-last ``xcl`` (a bias's gradient), accumulated in
    float64 whatever the dtype."""
    rows = xcl.reshape(-1, xcl.shape[-1])
    if rows.size >= COMPILED_FOLD_MIN_SIZE and rows.dtype in (np.float32, np.float64):
        from .compiled_conv import channel_sums  # one pass, no float64 copy

        sums = np.zeros(rows.shape[1], dtype=np.float64)
        channel_sums(rows, sums)
        return sums.astype(xcl.dtype)
    return np.einsum("mc->c", rows, dtype=np.float64).astype(xcl.dtype)


# -- grouped convolutions: NCHW columns ------------------------------------------------------------
def _empty_like_layout(x: np.ndarray, shape) -> np.ndarray:
    """An uninitialized ``[N, C, *spatial]`` array of ``shape``, channels-last if ``x`` is."""
    if channels_last(x):
        return np.moveaxis(np.empty((shape[0], *shape[2:], shape[1]), dtype=x.dtype), -1, 1)
    return np.empty(shape, dtype=x.dtype)


def _place(x: np.ndarray, before, total_lengths, fill) -> np.ndarray:
    """``x`` placed at offset ``before`` in an array of spatial ``total_lengths`` filled with
    ``fill``; the part of ``x`` beyond ``total_lengths`` is cut off."""
    spatial = x.shape[2:]
    if all(b == 0 for b in before) and tuple(total_lengths) == tuple(spatial):
        return x
    out = _empty_like_layout(x, x.shape[:2] + tuple(total_lengths))
    out.fill(fill)
    target, source = [], []
    for b, n, total in zip(before, spatial, total_lengths):
        end = min(b + n, total)
        target.append(slice(b, end))
        source.append(slice(0, end - b))
    out[(slice(None), slice(None), *target)] = x[(slice(None), slice(None), *source)]
    return out


def _windows(x, kernel, stride, padding, dilation, out_size, fill=0):
    """A view ``[N, C, *kernel, *out_size]`` of the windows of ``x`` padded with ``fill``:
    element ``[n, c, k..., o...]`` is the input cell kernel offset ``k`` of output ``o``
    reads."""
    extents = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    needed = [s * (o - 1) + e for s, o, e in zip(stride, out_size, extents)]
    xp = _place(x, padding, needed, fill)
    ndim = len(kernel)
    windows = sliding_window_view(xp, extents, axis=tuple(range(2, 2 + ndim)))
    windows = windows[
        (slice(None), slice(None))
        + tuple(slice(None, None, s) for s in stride)
        + tuple(slice(None, None, d) for d in dilation)
    ]
    # [N, C, *out, *kernel] -> [N, C, *kernel, *out]
    return windows.transpose(0, 1, *range(2 + ndim, 2 + 2 * ndim), *range(2, 2 + ndim))


def _grouped_columns(x, kernel, stride, padding, dilation, groups, out_size, extra=0):
    """Yield ``(start, stop, columns)`` per batch block: the columns ``[stop-start, groups,
    C/groups * prod(kernel), prod(out_size)]`` of ``x[start:stop]``, row ``(c, k...)`` input
    channel ``c`` at kernel offset ``k``; ``extra``: bytes per output cell the caller writes
    while the block is cached."""
    n, c = x.shape[:2]
    windows = _windows(x, kernel, stride, padding, dilation, out_size)
    rows, cells = (c // groups) * math.prod(kernel), math.prod(out_size)
    size, starts = _blocks(n, (c * math.prod(kernel) * x.itemsize + extra) * cells)
    buffer = np.empty((size, *windows.shape[1:]), dtype=x.dtype)
    for start in starts:
        stop = min(start + size, n)
        block = buffer[: stop - start]
        np.copyto(block, windows[start:stop])
        yield start, stop, block.reshape(stop - start, groups, rows, cells)


def _channel_rows(x: np.ndarray) -> np.ndarray:
    """``x`` ``[N, C, *spatial]`` as matrices ``[N, C, prod(spatial)]`` (a view when it can)."""
    return x.reshape(*x.shape[:2], math.prod(x.shape[2:]))


def _fold(out, columns, kernel, stride, dilation, in_size):
    """col2im: add ``columns`` ``[N, C, *kernel, *in_size]`` into ``out`` ``[N, C, *full]``
    (the padded output), one strided add per kernel offset."""
    everything = slice(None)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        cells = tuple(
            slice(k * d, k * d + s * (n - 1) + 1, s)
            for k, n, s, d in zip(offsets, in_size, stride, dilation)
        )
        out[(everything, everything, *cells)] += columns[(everything, everything, *offsets)]


def _grouped_conv(x, weight, bias, stride, padding, dilation, groups, out_size):
    n, c_out = x.shape[0], weight.shape[0]
    kernel = weight.shape[2:]
    w = weight.reshape(groups, c_out // groups, -1)
    out = np.empty((n, groups, c_out // groups, math.prod(out_size)), dtype=x.dtype)
    per_channel = bias.reshape(groups, c_out // groups, 1) if bias.size else None
    for start, stop, columns in _grouped_columns(
        x, kernel, stride, padding, dilation, groups, out_size, c_out * x.itemsize
    ):
        block = np.matmul(w, columns, out=out[start:stop])
        if per_channel is not None:
            block += per_channel
    return out.reshape(n, c_out, *out_size)


def _grouped_conv_transpose(x, weight, bias, stride, padding, output_padding, dilation, groups):
    n, c_in = x.shape[:2]
    kernel = weight.shape[2:]
    per_group_out = weight.shape[1]
    c_out = groups * per_group_out
    in_size = x.shape[2:]
    out_size = tuple(
        conv_transpose_output_size(*args)
        for args in zip(in_size, kernel, stride, padding, output_padding, dilation)
    )
    full = _folded_lengths(in_size, kernel, stride, padding, dilation, out_size)
    out = np.empty((n, c_out, *full), dtype=x.dtype)
    out[...] = bias.reshape((c_out,) + (1,) * len(full)) if bias.size else 0
    # columns[n, g, (o, k...), l] = sum_c weight[g, c, (o, k...)] * x[n, g, c, l], folded
    # into the padded output block by block while they are in cache.
    w = weight.reshape(groups, c_in // groups, per_group_out * math.prod(kernel))
    w = w.transpose(0, 2, 1)
    xs = _channel_rows(x).reshape(n, groups, c_in // groups, math.prod(in_size))
    size, starts = _blocks(n, w.shape[1] * groups * xs.shape[3] * x.itemsize)
    buffer = np.empty((size, groups, w.shape[1], xs.shape[3]), dtype=x.dtype)
    for start in starts:
        stop = min(start + size, n)
        columns = np.matmul(w, xs[start:stop], out=buffer[: stop - start])
        columns = columns.reshape(stop - start, c_out, *kernel, *in_size)
        _fold(out[start:stop], columns, kernel, stride, dilation, in_size)
    crop = tuple(slice(p, p + o) for p, o in zip(padding, out_size))
    return out[(slice(None), slice(None), *crop)]


def _grouped_weight_grad(x, out_grad, kernel_size, stride, padding, dilation, groups):
    c_in, c_out = x.shape[1], out_grad.shape[1]
    out_size = out_grad.shape[2:]
    g = _channel_rows(out_grad).reshape(
        out_grad.shape[0], groups, c_out // groups, math.prod(out_size)
    )
    grad = np.zeros(
        (groups, c_out // groups, (c_in // groups) * math.prod(kernel_size)), dtype=x.dtype
    )
    for start, stop, columns in _grouped_columns(
        x, kernel_size, stride, padding, dilation, groups, out_size
    ):
        # [B, G, O/G, L] @ [B, G, L, C/G*K], summed over the block
        grad += np.matmul(g[start:stop], columns.swapaxes(2, 3)).sum(axis=0)
    return grad.reshape(c_out, c_in // groups, *kernel_size)


class NumpyConvKernels:
    """The convolution kernels of :class:`~retrograd.backend.NumpyBackend`."""

    def conv(self, x, weight, bias, stride, padding, dilation, groups):
        kernel = weight.shape[2:]
        out_size = tuple(
            conv_output_size(length, k, s, p, d)
            for length, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation)
        )
        if groups != 1:
            return _grouped_conv(x, weight, bias, stride, padding, dilation, groups, out_size)
        if _tapwise(x.dtype, weight.shape, stride, dilation, x.shape[2:], out_size, padding):
            return _from_last(_tapwise_conv(_to_last(x), weight, bias, padding, out_size))
        out = _conv_last(_to_last(x), weight, bias, stride, padding, dilation, out_size)
        return _from_last(out)

    def conv_transpose(self, x, weight, bias, stride, padding, output_padding, dilation, groups):
        if groups != 1:
            return _grouped_conv_transpose(
                x, weight, bias, stride, padding, output_padding, dilation, groups
            )
        out = _conv_transpose_last(
            _to_last(x), weight, bias, stride, padding, output_padding, dilation
        )
        return _from_last(out)

    def conv_weight_grad(self, x, out_grad, kernel_size, stride, padding, dilation, groups):
        if groups != 1:
            return _grouped_weight_grad(x, out_grad, kernel_size, stride, padding, dilation, groups)
        return _weight_grad_last(
            _to_last(x), _to_last(out_grad), kernel_size, stride, padding, dilation
        )

    def conv_backward(self, grad, x, weight, stride, padding, dilation, groups, needs):
        if groups != 1:  # the protocol's default: the adjoints, one kernel each
            return super().conv_backward(grad, x, weight, stride, padding, dilation, groups, needs)
        # the output gradient laid out channels-last once, for all three
        gcl = _to_last(grad)
        kernel = weight.shape[2:]
        dx = dweight = dbias = None
        n, out_size = x.shape[0], grad.shape[2:]
        winograd = _winograd(grad.dtype, weight.shape, stride, dilation, n, out_size)
        shared = winograd and _winograd_tile(n, out_size) == 4
        tapwise = _tapwise(
            grad.dtype, weight.shape, stride, dilation, x.shape[2:], out_size, padding
        )
        if (shared or tapwise) and (needs[0] or needs[1]):
            xcl = _to_last(x)
            if tapwise:
                dx, dweight = _tapwise_backward(xcl, gcl, weight, padding, *needs[:2])
            else:
                by_winograd, zeros = False, None
                if needs[1]:
                    by_winograd, zeros = _winograd_weight_grad_applies(xcl, gcl, kernel, padding)
                if needs[0] or by_winograd:
                    dx, dweight = _winograd_backward(
                        xcl, gcl, weight, padding, needs[0], by_winograd
                    )
                if by_winograd and zeros is not None:
                    dweight[np.broadcast_to(zeros, dweight.shape)] = 0
                if needs[1] and not by_winograd:
                    dweight = _weight_grad_last(
                        xcl, gcl, kernel, stride, padding, dilation, winograd_checked=True
                    )
            if dx is not None:
                dx = _from_last(dx)
            if needs[2]:
                dbias = _channel_sums(gcl)
            return dx, dweight, dbias
        if needs[0]:
            output_padding = conv_transpose_output_padding(
                x.shape[2:], grad.shape[2:], kernel, stride, padding, dilation
            )
            none = np.zeros(0, dtype=grad.dtype)
            dx = _from_last(
                _conv_transpose_last(gcl, weight, none, stride, padding, output_padding, dilation)
            )
        if needs[1]:
            dweight = _weight_grad_last(_to_last(x), gcl, kernel, stride, padding, dilation)
        if needs[2]:
            dbias = _channel_sums(gcl)
        return dx, dweight, dbias

    def conv_transpose_backward(
        self, grad, x, weight, stride, padding, output_padding, dilation, groups, needs
    ):
        kernel = weight.shape[2:]
        reachable = all(
            conv_output_size(n, k, s, p, d) == m
            for n, m, k, s, p, d in zip(
                grad.shape[2:], x.shape[2:], kernel, stride, padding, dilation
            )
        )
        if groups != 1 or not reachable:  # the protocol's default
            return super().conv_transpose_backward(
                grad, x, weight, stride, padding, output_padding, dilation, groups, needs
            )
        # the adjoint of conv_transpose(., weight) is conv(., weight); its weight gradient is
        # that convolution's, with grad as its input and x as its output gradient
        gcl = _to_last(grad)
        dx = dweight = dbias = None
        if needs[0]:
            none = np.zeros(0, dtype=grad.dtype)
            dx = _from_last(_conv_last(gcl, weight, none, stride, padding, dilation, x.shape[2:]))
        if needs[1]:
            dweight = _weight_grad_last(gcl, _to_last(x), kernel, stride, padding, dilation)
        if needs[2]:
            dbias = _channel_sums(gcl)
        return dx, dweight, dbias
