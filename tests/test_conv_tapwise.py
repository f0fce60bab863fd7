"""The NumPy backend's tap-by-tap float32 convolutions (``numpy_conv._tapwise_conv``): stride
1, small maps whose padding takes most of im2col's products (a ResNet's last stage: 3x3
kernels on 2x2 maps). Forward, input and weight gradients against PyTorch in float64, the
choice by size, and the fallback of what it does not cover.

Tolerance: 4 float32 epsilons of the convolution of the absolute values (the products are
im2col's, fewer, summed tap by tap).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd.backend import numpy_conv

torch = pytest.importorskip("torch")
aten = torch.ops.aten

RNG = np.random.default_rng(77)
NUMPY = rg.NumpyBackend()

#: every test calls NUMPY's kernels by name: the same run on every pass
pytestmark = pytest.mark.backend_independent("NUMPY's tap-by-tap kernels, called by name")
TOLERANCE = 4 * float(np.finfo(np.float32).eps)

# (x shape, weight shape, padding): maps smaller than the kernel's reach, odd kernels and sides
SHAPES = {
    "resnet-last-stage": ((3, 8, 2, 2), (6, 8, 3, 3), (1, 1)),
    "one-cell": ((2, 5, 1, 1), (4, 5, 3, 3), (1, 1)),
    "5x5-on-3x3": ((2, 3, 3, 3), (4, 3, 5, 5), (2, 2)),
    "rectangular": ((2, 4, 2, 3), (3, 4, 3, 3), (1, 1)),
    "over-padded": ((2, 3, 2, 2), (5, 3, 2, 2), (2, 1)),
    "batch-one": ((1, 8, 2, 2), (6, 8, 3, 3), (1, 1)),
}


def as_torch(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


@pytest.fixture
def forced(monkeypatch):
    monkeypatch.setattr(numpy_conv, "TAPWISE_MAX_COVERED", 1.0)
    monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", None)


@pytest.mark.parametrize("reorder", ["numpy", "compiled", "compiled-in-blocks"])
@pytest.mark.parametrize("layout", ["nchw", "channels-last"])
@pytest.mark.parametrize("name", SHAPES)
def test_tap_by_tap_matches_torch(name, layout, reorder, forced, monkeypatch):
    if reorder != "numpy":  # the weight and its gradient reordered by compiled_conv's loops
        monkeypatch.setattr(numpy_conv, "COMPILED_REORDER_MIN_SIZE", 0)
    if reorder == "compiled-in-blocks":  # a few filters (channels) at a time, blocks uneven
        monkeypatch.setattr(numpy_conv, "TAPWISE_BLOCK_BYTES", 700)
    x_shape, w_shape, padding = SHAPES[name]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    if layout == "channels-last":
        x = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    b = RNG.standard_normal(w_shape[0]).astype(np.float32)
    params = ((1, 1), padding, (1, 1))
    out = NUMPY.conv(x, w, b, *params, 1)
    assert out.dtype == np.float32
    args = (*params, False, [0, 0], 1)
    expected = aten.convolution(as_torch(x), as_torch(w), as_torch(b), *args).numpy()
    scale = aten.convolution(*(as_torch(np.abs(a)) for a in (x, w, b)), *args).numpy()
    assert out.shape == expected.shape
    assert np.all(np.abs(out - expected) <= TOLERANCE * scale)

    g = RNG.standard_normal(out.shape).astype(np.float32)
    mine = NUMPY.conv_backward(g, x, w, *params, 1, (True, True, True))
    theirs = aten.convolution_backward(
        as_torch(g), as_torch(x), as_torch(w), [w_shape[0]], *args, [True] * 3
    )
    scales = aten.convolution_backward(
        *(as_torch(np.abs(a)) for a in (g, x, w)), [w_shape[0]], *args, [True] * 3
    )
    for a, e, s in zip(mine, theirs, scales):
        assert a.dtype == np.float32 and a.shape == e.shape
        assert np.all(np.abs(a - e.numpy()) <= TOLERANCE * s.numpy())
    alone = (
        NUMPY.conv_backward(g, x, w, *params, 1, (True, False, False))[0],
        NUMPY.conv_backward(g, x, w, *params, 1, (False, True, False))[1],
    )
    np.testing.assert_array_equal(alone[0], mine[0])
    np.testing.assert_array_equal(alone[1], mine[1])


def test_the_choice_by_size():
    choose = numpy_conv._tapwise
    f32 = np.dtype(np.float32)
    unit = ((1, 1), (1, 1))
    assert choose(f32, (512, 512, 3, 3), *unit, (2, 2), (2, 2), (1, 1))  # 16 of 36 products
    assert not choose(f32, (512, 512, 3, 3), *unit, (4, 4), (4, 4), (1, 1))  # 100 of 144
    assert not choose(np.dtype(np.float64), (512, 512, 3, 3), *unit, (2, 2), (2, 2), (1, 1))
    assert not choose(f32, (512, 512, 3, 3), (2, 2), (1, 1), (2, 2), (1, 1), (1, 1))
    assert not choose(f32, (8, 8, 3), (1,), (1,), (2,), (2,), (1,))  # 1-d


@pytest.mark.parametrize(
    "case",
    [
        ((2, 4, 2, 2), (6, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1),  # stride 2
        ((2, 4, 2, 2), (6, 4, 3, 3), (1, 1), (2, 2), (2, 2), 1),  # dilated
        ((2, 4, 2, 2), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),  # groups
    ],
)
def test_uncovered_convolutions_fall_back_bit_for_bit(case, forced, monkeypatch):
    x_shape, w_shape, *params = case
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    b = RNG.standard_normal(w_shape[0]).astype(np.float32)

    def run():
        out = NUMPY.conv(x, w, b, *params)
        return [out, *NUMPY.conv_backward(np.ones_like(out), x, w, *params, (True,) * 3)]

    tapwise = run()
    monkeypatch.setattr(numpy_conv, "TAPWISE_MAX_COVERED", None)
    for a, b_ in zip(tapwise, run()):
        np.testing.assert_array_equal(a, b_)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("w_shape", [(5, 3, 3, 3), (2, 4, 1, 2), (3, 2, 3), (2, 3, 1, 2, 2)])
def test_the_compiled_reorders_permute_as_numpy_does(w_shape, dtype, monkeypatch):
    w = RNG.standard_normal(w_shape).astype(dtype)
    by_numpy = numpy_conv._tap_major(w)
    np.testing.assert_array_equal(by_numpy, np.moveaxis(w, (0, 1), (-2, -1)))
    monkeypatch.setattr(numpy_conv, "COMPILED_REORDER_MIN_SIZE", 0)
    taps = numpy_conv._tap_major(w)
    assert taps.dtype == dtype and taps.flags.c_contiguous
    np.testing.assert_array_equal(taps, by_numpy)
    back = np.empty_like(w)
    numpy_conv._from_tap_major(taps, back)
    np.testing.assert_array_equal(back, w)
    # a weight that is not C-contiguous (a transposed view) reorders as its values say
    view = np.swapaxes(RNG.standard_normal(w_shape[1::-1] + w_shape[2:]).astype(dtype), 0, 1)
    np.testing.assert_array_equal(numpy_conv._tap_major(view), np.moveaxis(view, (0, 1), (-2, -1)))


@pytest.mark.parametrize(
    "x_shape, w_shape, out_shape",
    [
        ((2, 4, 2, 2), (0, 4, 3, 3), (2, 0, 2, 2)),
        ((2, 0, 2, 2), (3, 0, 3, 3), (2, 3, 2, 2)),
        ((0, 4, 2, 2), (3, 4, 3, 3), (0, 3, 2, 2)),
    ],
    ids=["no-filters", "no-channels", "no-samples"],
)
def test_empty_tap_by_tap_convolutions_give_zeros(x_shape, w_shape, out_shape):
    """By hand: every sum is empty (torch's own backward aborts the process on these)."""
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    params = ((1, 1), (1, 1), (1, 1))
    assert numpy_conv._tapwise(x.dtype, w.shape, (1, 1), (1, 1), (2, 2), (2, 2), (1, 1))
    out = NUMPY.conv(x, w, np.zeros(0, np.float32), *params, 1)
    g = RNG.standard_normal(out_shape).astype(np.float32)
    dx, dw = NUMPY.conv_backward(g, x, w, *params, 1, (True, True, False))[:2]
    for a, shape in ((out, out_shape), (dx, x_shape), (dw, w_shape)):
        assert a.shape == shape and a.dtype == np.float32
        np.testing.assert_array_equal(a, np.zeros(shape, np.float32))
