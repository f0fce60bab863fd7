"""Winograd's F(2x2, 3x3) and F(4x4, 3x3) behind the NumPy backend's float32 3x3 stride-1
convolutions (``backend/compiled_winograd.py``): forward, input gradient and weight gradient,
and the transposed convolutions that run on them, against PyTorch in float64.

Weight gradients run as Winograd's by default only where their exact zeros are known (one side
free of zeros, or large maps, the dead channels' and taps' elements set to 0; see numpy_conv);
these tests force it on, and check the default.

The float32 tolerance is relative to the convolution of the absolute values (``|x| * |w|``,
the scale of the sums' rounding): 8 float32 epsilons for F(2x2, 3x3), 64 for F(4x4, 3x3)
(its transforms' coefficients up to 8 and 1/24 amplify rounding; measured up to 30 on
these shapes, against about 1 for im2col's products). The algebra itself (transforms, flips,
padding, cropping, partial tiles, batch blocks) is checked exactly: F(2x2, 3x3) run in
float64 (its coefficients are exact there) against torch at 1e-12, and its gradients as the
adjoints of its forward. Float64 convolutions never take the Winograd path, and the cases it
does not cover (strides, dilation, groups, other kernels, 1-d) fall back bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd.backend import compiled_winograd, numpy_conv
from retrograd.backend.numpy_conv import _from_last, _to_last

torch = pytest.importorskip("torch")
aten = torch.ops.aten

RNG = np.random.default_rng(1234)
NUMPY = rg.NumpyBackend()

#: every test calls NUMPY's kernels by name: the same run on every pass
pytestmark = pytest.mark.backend_independent("NUMPY's Winograd kernels, called by name")
EPS32 = float(np.finfo(np.float32).eps)
TOLERANCE = {2: 8 * EPS32, 4: 64 * EPS32}

# (x shape [N, C, H, W], out channels, padding): odd and even sides, partial tiles,
# padding 0 to 2, more channels out than in and fewer
SHAPES = {
    "3x3-padded": ((2, 3, 7, 6), 4, 1),
    "unpadded": ((1, 5, 9, 10), 3, 0),
    "over-padded": ((2, 2, 5, 5), 3, 2),
    "tiny": ((3, 4, 3, 3), 2, 1),
    "one-cell": ((1, 3, 1, 1), 2, 1),
    "wide": ((1, 20, 13, 11), 33, 1),
}


@pytest.fixture
def winograd(monkeypatch):
    """Force Winograd at every size, with a given tile, and small batch blocks (several per
    call: the weight gradient sums them)."""

    def force(tile):
        monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", 1)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CHANNELS", 1)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_TILE", tile)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_BLOCK_BYTES", 1)
        monkeypatch.setattr(numpy_conv, "WINOGRAD_WEIGHT_GRADIENT", True)

    return force


def as_torch(a):
    return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))


def arrays(shape, c_out, dtype=np.float32, channels_last=False):
    x = RNG.standard_normal(shape)
    if channels_last:
        x = _from_last(_to_last(x))
    w = RNG.standard_normal((c_out, shape[1], 3, 3))
    b = RNG.standard_normal(c_out)
    return x.astype(dtype), w.astype(dtype), b.astype(dtype)


def assert_within(mine, expected, scale, tolerance):
    assert mine.shape == expected.shape
    excess = np.abs(np.asarray(mine, dtype=np.float64) - expected) - tolerance * scale
    assert excess.max() <= 0, f"off by {np.max(np.abs(mine - expected) / scale) / EPS32} eps"


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("layout", ["contiguous", "channels-last"])
@pytest.mark.parametrize("name", SHAPES)
def test_float32_convolution_and_its_gradients_match_torch(name, layout, tile, winograd):
    shape, c_out, p = SHAPES[name]
    x, w, b = arrays(shape, c_out, channels_last=layout == "channels-last")
    winograd(tile)
    params = ((1, 1), (p, p), (1, 1))
    out = NUMPY.conv(x, w, b, *params, 1)
    assert out.dtype == np.float32
    expected = aten.convolution(as_torch(x), as_torch(w), as_torch(b), *params, False, [0, 0], 1)
    magnitude = aten.convolution(
        as_torch(np.abs(x)), as_torch(np.abs(w)), as_torch(np.abs(b)), *params, False, [0, 0], 1
    )
    assert_within(out, expected.numpy(), magnitude.numpy(), TOLERANCE[tile])

    g = RNG.standard_normal(out.shape).astype(np.float32)
    dx, dw, db = NUMPY.conv_backward(g, x, w, *params, 1, (True, True, True))
    expected = aten.convolution_backward(
        as_torch(g), as_torch(x), as_torch(w), [c_out], *params, False, [0, 0], 1, [True] * 3
    )
    magnitudes = aten.convolution_backward(
        as_torch(np.abs(g)),
        as_torch(np.abs(x)),
        as_torch(np.abs(w)),
        [c_out],
        *params,
        False,
        [0, 0],
        1,
        [True] * 3,
    )
    for mine, theirs, magnitude in zip((dx, dw, db), expected, magnitudes):
        assert mine.dtype == np.float32
        assert_within(mine, theirs.numpy(), magnitude.numpy(), TOLERANCE[tile])


@pytest.mark.parametrize("tile", [2, 4])
def test_each_gradient_alone_is_the_one_computed_with_the_others(tile, winograd):
    """The backward computes the input and weight gradients together (F(4x4, 3x3): from the
    same transformed output-gradient tiles) or either alone: the same values."""
    x, w, _ = arrays((3, 6, 9, 10), 7)
    g = RNG.standard_normal((3, 7, 9, 10)).astype(np.float32)
    params = ((1, 1), (1, 1), (1, 1), 1)
    winograd(tile)
    both = NUMPY.conv_backward(g, x, w, *params, (True, True, False))
    np.testing.assert_array_equal(
        NUMPY.conv_backward(g, x, w, *params, (True, False, False))[0], both[0]
    )
    np.testing.assert_array_equal(
        NUMPY.conv_backward(g, x, w, *params, (False, True, False))[1], both[1]
    )


@pytest.mark.parametrize("tile", [2, 4])
def test_float32_stride1_transposed_convolution_matches_torch(tile, winograd):
    """A stride-1 transposed convolution is the Winograd convolution with the weight turned
    by 180 degrees (the input gradient's path); its backward, the forward's."""
    x = RNG.standard_normal((2, 5, 6, 7)).astype(np.float32)
    w = RNG.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    winograd(tile)
    params = ((1, 1), (1, 1), (0, 0), (1, 1), 1)
    out = NUMPY.conv_transpose(x, w, b, *params)
    expected = aten.convolution(
        as_torch(x), as_torch(w), as_torch(b), [1, 1], [1, 1], [1, 1], True, [0, 0], 1
    )
    magnitude = aten.convolution(
        as_torch(np.abs(x)),
        as_torch(np.abs(w)),
        as_torch(np.abs(b)),
        [1, 1],
        [1, 1],
        [1, 1],
        True,
        [0, 0],
        1,
    )
    assert_within(out, expected.numpy(), magnitude.numpy(), TOLERANCE[tile])
    g = RNG.standard_normal(out.shape).astype(np.float32)
    dx, dw, _ = NUMPY.conv_transpose_backward(g, x, w, *params, (True, True, False))
    expected = aten.convolution_backward(
        as_torch(g), as_torch(x), as_torch(w), None, [1, 1], [1, 1], [1, 1], True, [0, 0], 1,
        [True, True, False],
    )  # fmt: skip
    magnitudes = aten.convolution_backward(
        as_torch(np.abs(g)), as_torch(np.abs(x)), as_torch(np.abs(w)), None, [1, 1], [1, 1],
        [1, 1], True, [0, 0], 1, [True, True, False],
    )  # fmt: skip
    for mine, theirs, magnitude in zip((dx, dw), expected[:2], magnitudes[:2]):
        assert_within(mine, theirs.numpy(), magnitude.numpy(), TOLERANCE[tile])


@pytest.mark.parametrize("name", SHAPES)
def test_the_algebra_is_exact_in_float64(name, winograd):
    """F(2x2, 3x3)'s transforms are exact in float64 (halves), so run directly there it
    matches torch to float64 rounding: forward, the turned weight of an input gradient, and
    the weight gradient; the gradients are the forward's adjoints (finite differences of a
    linear map)."""
    shape, c_out, p = SHAPES[name]
    x, w, b = arrays(shape, c_out, dtype=np.float64)
    winograd(2)
    xcl = _to_last(x)
    out_size = tuple(n + 2 * p - 2 for n in shape[2:])
    out = numpy_conv._winograd_conv(xcl, w, b, (p, p), out_size)
    expected = aten.convolution(
        as_torch(x), as_torch(w), as_torch(b), [1, 1], [p, p], [1, 1], False, [0, 0], 1
    )
    np.testing.assert_allclose(_from_last(out), expected.numpy(), rtol=1e-12, atol=1e-12)

    g = RNG.standard_normal(out.shape)  # channels-last, as out
    none = np.zeros(0)
    dx = numpy_conv._winograd_conv(g, w, none, (2 - p, 2 - p), shape[2:], transposed=True)
    dw = numpy_conv._winograd_weight_grad(xcl, g, (p, p))
    pure = numpy_conv._winograd_conv(xcl, w, none, (p, p), out_size)  # linear in x and in w
    np.testing.assert_allclose(np.vdot(g, pure), np.vdot(xcl, dx), rtol=1e-12)
    np.testing.assert_allclose(np.vdot(g, pure), np.vdot(w, dw), rtol=1e-12)
    expected = aten.convolution_backward(
        as_torch(_from_last(g)), as_torch(x), as_torch(w), None, [1, 1], [p, p], [1, 1], False,
        [0, 0], 1, [True, True, False],
    )  # fmt: skip
    np.testing.assert_allclose(_from_last(dx), expected[0].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dw, expected[1].numpy(), rtol=1e-12, atol=1e-11)


@pytest.mark.parametrize("tile", [2, 4])
def test_weight_gradients_are_im2cols_by_default(tile, winograd, monkeypatch):
    """WINOGRAD_WEIGHT_GRADIENT off (the default): the weight gradient is im2col's, bit for
    bit, an element whose products are all zero exactly 0 (here: a channel that is zero
    but at one corner cell, whose far taps meet only padding and zeros)."""
    x, w, _ = arrays((2, 3, 6, 6), 4)
    x[:, 0] = 0
    x[:, 0, 5, 5] = 1
    g = RNG.standard_normal((2, 4, 6, 6)).astype(np.float32)
    params = ((1, 1), (1, 1), (1, 1), 1)
    winograd(tile)
    monkeypatch.setattr(numpy_conv, "WINOGRAD_WEIGHT_GRADIENT", False)
    default = NUMPY.conv_backward(g, x, w, *params, (True, True, False))
    monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", None)
    plain = NUMPY.conv_backward(g, x, w, *params, (True, True, False))
    np.testing.assert_array_equal(default[1], plain[1])
    assert np.all(default[1][:, 0, 0, :] == 0) and np.all(default[1][:, 0, :, 0] == 0)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("dense", ["gradient", "input"])
def test_known_exact_zeros_of_the_weight_gradient_are_zeros(dense, tile, winograd, monkeypatch):
    """The default: Winograd's weight gradient where one side is free of zeros, its elements
    that are sums of zero products set to exactly 0, the rest as torch's; im2col's where both
    sides have zeros."""
    x, w, _ = arrays((2, 3, 6, 6), 4)
    g = RNG.standard_normal((2, 4, 6, 6)).astype(np.float32)
    sparse = x if dense == "gradient" else g
    sparse[:, 0] = 0  # one channel alive at one corner: taps reaching it from one side only
    sparse[:, 0, 5, 5] = 1
    params = ((1, 1), (1, 1), (1, 1), 1)
    winograd(tile)
    monkeypatch.setattr(numpy_conv, "WINOGRAD_WEIGHT_GRADIENT", None)
    calls = []
    monkeypatch.setattr(
        numpy_conv, "_winograd_weight_grad", spy(calls, numpy_conv._winograd_weight_grad)
    )
    monkeypatch.setattr(numpy_conv, "_winograd_backward", spy(calls, numpy_conv._winograd_backward))
    dw = NUMPY.conv_backward(g, x, w, *params, (False, True, False))[1]
    assert calls  # Winograd's
    expected = aten.convolution_backward(
        as_torch(g), as_torch(x), as_torch(w), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
        [False, True, False],
    )[1].numpy()  # fmt: skip
    if dense == "gradient":  # no output reaches the corner input through a top or left tap
        assert np.all(dw[:, 0, 0, :] == 0) and np.all(dw[:, 0, :, 0] == 0)
    else:  # the corner output reaches no input through a bottom or right tap
        assert np.all(dw[0, :, 2, :] == 0) and np.all(dw[0, :, :, 2] == 0)
    assert np.all(dw[expected == 0] == 0)
    magnitude = aten.convolution_backward(
        as_torch(np.abs(g)), as_torch(np.abs(x)), as_torch(np.abs(w)), None, [1, 1], [1, 1],
        [1, 1], False, [0, 0], 1, [False, True, False],
    )[1].numpy()  # fmt: skip
    assert_within(dw, expected, magnitude, TOLERANCE[tile])

    calls.clear()
    x[:, 1, 0, 0] = 0  # zeros on both sides now: im2col's
    g[:, 1, 0, 0] = 0
    dw = NUMPY.conv_backward(g, x, w, *params, (False, True, False))[1]
    monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", None)
    plain = NUMPY.conv_backward(g, x, w, *params, (False, True, False))[1]
    np.testing.assert_array_equal(dw, plain)
    assert not calls or all(c is None for c in calls)


@pytest.mark.parametrize("tile", [2, 4])
def test_large_maps_with_zeros_on_both_sides_keep_dead_channels_exactly_zero(
    tile, winograd, monkeypatch
):
    """ReLU'd inputs and pooled gradients on maps of WINOGRAD_SUPPORT_CELLS output cells or
    more: Winograd's weight gradient, a dead input channel's and a dead filter's elements 0."""
    x, w, _ = arrays((8, 3, 24, 24), 4)
    x = np.maximum(x, 0)  # ReLU's zeros
    x[:, 2] = 0  # a dead input channel
    g = RNG.standard_normal((8, 4, 24, 24)).astype(np.float32)
    g[g < 0.5] = 0  # a max-pool's backward: mostly zeros
    g[:, 1] = 0  # a dead filter
    assert numpy_conv.WINOGRAD_SUPPORT_CELLS <= 8 * 24 * 24
    params = ((1, 1), (1, 1), (1, 1), 1)
    winograd(tile)
    monkeypatch.setattr(numpy_conv, "WINOGRAD_WEIGHT_GRADIENT", None)
    calls = []
    monkeypatch.setattr(
        numpy_conv, "_winograd_weight_grad", spy(calls, numpy_conv._winograd_weight_grad)
    )
    monkeypatch.setattr(numpy_conv, "_winograd_backward", spy(calls, numpy_conv._winograd_backward))
    dw = NUMPY.conv_backward(g, x, w, *params, (False, True, False))[1]
    assert calls and any(c is not None for c in calls)  # Winograd's
    assert np.all(dw[:, 2] == 0) and np.all(dw[1] == 0)
    expected = aten.convolution_backward(
        as_torch(g), as_torch(x), as_torch(w), None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1,
        [False, True, False],
    )[1].numpy()  # fmt: skip
    magnitude = aten.convolution_backward(
        as_torch(np.abs(g)), as_torch(np.abs(x)), as_torch(np.abs(w)), None, [1, 1], [1, 1],
        [1, 1], False, [0, 0], 1, [False, True, False],
    )[1].numpy()  # fmt: skip
    assert_within(dw, expected, magnitude, TOLERANCE[tile])


def spy(calls, function):
    def wrapped(*args):
        result = function(*args)
        calls.append(result if function.__name__ != "_winograd_backward" or args[5] else None)
        return result

    return wrapped


def test_float64_never_takes_the_winograd_path(winograd, monkeypatch):
    x, w, b = arrays((2, 4, 8, 8), 5, dtype=np.float64)
    g = RNG.standard_normal((2, 5, 8, 8))
    params = ((1, 1), (1, 1), (1, 1), 1)
    winograd(4)
    forced = [NUMPY.conv(x, w, b, *params), *NUMPY.conv_backward(g, x, w, *params, (True,) * 3)]
    monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", None)
    plain = [NUMPY.conv(x, w, b, *params), *NUMPY.conv_backward(g, x, w, *params, (True,) * 3)]
    for a, b_ in zip(forced, plain):
        np.testing.assert_array_equal(a, b_)


# (x shape, weight shape, stride, padding, dilation, groups): what the kernels do not cover
UNCOVERED = {
    "stride2": ((2, 4, 9, 9), (5, 4, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    "dilated": ((2, 4, 9, 9), (5, 4, 3, 3), (1, 1), (2, 2), (2, 2), 1),
    "groups": ((2, 4, 9, 9), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),
    "5x5": ((2, 4, 9, 9), (5, 4, 5, 5), (1, 1), (2, 2), (1, 1), 1),
    "3x2": ((2, 4, 9, 9), (5, 4, 3, 2), (1, 1), (1, 1), (1, 1), 1),
    "1d": ((2, 4, 9), (5, 4, 3), (1,), (1,), (1,), 1),
    "3d": ((1, 2, 4, 5, 4), (3, 2, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
}


@pytest.mark.parametrize("name", UNCOVERED)
def test_uncovered_convolutions_fall_back_bit_for_bit(name, winograd, monkeypatch):
    x_shape, w_shape, *params = UNCOVERED[name]
    x = RNG.standard_normal(x_shape).astype(np.float32)
    w = RNG.standard_normal(w_shape).astype(np.float32)
    b = RNG.standard_normal(w_shape[0]).astype(np.float32)

    def run():
        out = NUMPY.conv(x, w, b, *params)
        g = np.ones_like(out)
        return [out, *NUMPY.conv_backward(g, x, w, *params, (True,) * 3)]

    winograd(2)
    forced = run()
    monkeypatch.setattr(numpy_conv, "WINOGRAD_MIN_CELLS", None)
    for a, b_ in zip(forced, run()):
        np.testing.assert_array_equal(a, b_)


def test_the_weight_transforms_are_their_matrix_definitions():
    """F(2x2, 3x3)'s compiled weight transform (plain and turned by 180 degrees) and weight
    gradient untransform against ``G``'s Kronecker square as a matrix, in float64."""
    taps = RNG.standard_normal((3, 5, 9))
    u = np.empty((16, 3, 5))
    compiled_winograd.weight_tiles(taps, compiled_winograd.UNFLIPPED, u)
    np.testing.assert_allclose(u, np.einsum("ek,abk->eab", compiled_winograd.WEIGHT, taps))
    compiled_winograd.weight_tiles(taps, compiled_winograd.FLIPPED, u)
    turned = np.einsum("ek,abk->eab", compiled_winograd.WEIGHT, taps[..., ::-1])
    np.testing.assert_allclose(u, turned)
    du = RNG.standard_normal((16, 3, 5))
    grad = np.empty((3, 5, 9))
    compiled_winograd.weight_grad_untile(du, grad)
    np.testing.assert_allclose(grad, np.einsum("ek,eab->abk", compiled_winograd.WEIGHT, du))


def test_sizes_choose_the_tile():
    """Defaults: im2col below WINOGRAD_MIN_CELLS output cells or with few channels, F(2x2,
    3x3) on small maps, F(4x4, 3x3) from WINOGRAD_LARGE_TILE_CELLS cells on 4x4 maps and up."""
    choose = numpy_conv._winograd
    f32 = np.dtype(np.float32)
    unit = ((1, 1), (1, 1))
    assert choose(f32, (64, 64, 3, 3), *unit, 16, (16, 16))
    assert not choose(np.dtype(np.float64), (64, 64, 3, 3), *unit, 16, (16, 16))
    assert not choose(f32, (512, 512, 3, 3), *unit, 16, (2, 2))  # ResNet's last stage
    assert not choose(f32, (64, 3, 3, 3), *unit, 16, (16, 16))  # three channels in
    assert numpy_conv._winograd_tile(16, (16, 16)) == 4
    assert numpy_conv._winograd_tile(16, (4, 4)) == 2  # 256 cells
    assert numpy_conv._winograd_tile(1024, (2, 2)) == 2  # no room for a 4x4 tile
