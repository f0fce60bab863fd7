"""Round 71's defects in the spatial ops, each against torch.

- the refusals torch raises as ``RuntimeError`` were ``ShapeError``s (a ``ValueError``) only:
  a pooling window, convolution kernel or ``unfold`` block larger than the padded input, a
  3-d average pool's kernel larger than the input, groups that do not divide the channels,
  ``padding="same"`` with a stride, a transposed convolution's output size below 1, ``fold``
  blocks that do not match (or do not fit: a reshape error before), a pad wider than the
  dimension it reflects or wraps or a crop larger than it, ``pixel_shuffle``'s and
  ``channel_shuffle``'s channels, ``interpolate``'s empty output or negative
  ``scale_factor``, ``grid_sample``'s batch sizes, fractional max pooling's kernel too
  large, a stride or dilation below 1 and a negative padding; now ``SizeMismatchError``
  (also a ``RuntimeError``);
- the refusals torch raises as ``NotImplementedError`` (an unknown ``interpolate`` or ``pad``
  mode, a mode for an input rank it does not take, ``affine_grid`` of a 3-entry size) were
  ``ShapeError``s or ``InvalidArgumentError``s, and ``grid_sample``'s bicubic mode of a 5-d
  input (torch's ``RuntimeError``) an ``InvalidArgumentError``; now ``UnsupportedModeError``
  (both, and a ``NotImplementedError``, so a ``RuntimeError``);
- ``max_unpool`` of an index outside its output raised an ``IndexError`` alone (torch's:
  ``RuntimeError``); now ``InvalidMaxIndexError``, both;
- ``affine_grid`` took an empty batch, which torch refuses (``ValueError``) but where
  ``align_corners=True`` meets a size of 1;
- ``interpolate(antialias=True)`` filtered a dimension whose size does not change (with a
  ``scale_factor`` of 1.3 over 3 rows): torch's kernel leaves it as it is;
- ``nn.Upsample(scale_factor=0.0)`` kept the factor, which torch's module reads as ``None``
  (then ``interpolate``'s "either size or scale_factor" ``ValueError``);
- ``interpolate(mode="nearest-exact")`` computed the source pixel in float64, torch in
  float32 (float64 for the sizes of a float64 1-d/3-d input) rounded to float32 before the
  floor: a pixel on a half was the one before;
- the NumPy backend's legacy ``nearest`` of a float64 1-d/3-d input resized by size took
  float32 throughout, where torch's forward kernels scale in float64.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg
import retrograd.errors as errors

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(71)


def _x(*shape):
    return RNG.standard_normal(shape)


def _refusal(lib, make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            make(lib, lib.nn.functional)
        except Exception as error:  # (the class is what is compared)
            return error
    return None


def _same_refusal(make, expected_class, ours_class):
    """torch raises ``expected_class``; retrograd an instance of it, of the hierarchy's
    ``ours_class`` (named: looked up after the first check)."""
    theirs = _refusal(torch, make)
    assert type(theirs) is expected_class, theirs
    mine = _refusal(rg, make)
    assert isinstance(mine, expected_class), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, getattr(errors, ours_class)), f"{type(mine).__name__}: {mine}"
    assert isinstance(mine, rg.RetrogradError)


X3, X4, X5 = _x(2, 3, 5), _x(2, 3, 4, 5), _x(1, 2, 3, 4, 5)
W4 = _x(4, 3, 2, 2)

RUNTIME_REFUSALS = {
    "max_pool2d kernel past the input": lambda lib, f: f.max_pool2d(lib.tensor(X4), 5),
    "max_pool1d stride 0": lambda lib, f: f.max_pool1d(lib.tensor(X3), 2, 0),
    "avg_pool1d negative padding": lambda lib, f: f.avg_pool1d(lib.tensor(X3), 2, 1, -1),
    "avg_pool3d input smaller than kernel": lambda lib, f: f.avg_pool3d(
        lib.tensor(X5), (2, 5, 1), padding=(1, 1, 0)
    ),
    "lp_pool2d kernel past the input": lambda lib, f: f.lp_pool2d(lib.tensor(X4), 2.0, 6),
    "adaptive_avg_pool2d empty input": lambda lib, f: f.adaptive_avg_pool2d(
        lib.tensor(_x(1, 2, 0, 3)), 2
    ),
    "conv2d kernel past the input": lambda lib, f: f.conv2d(
        lib.tensor(X4[..., :1]), lib.tensor(W4)
    ),
    "conv2d groups": lambda lib, f: f.conv2d(lib.tensor(X4), lib.tensor(W4[:, :1]), groups=2),
    "conv2d same with a stride": lambda lib, f: f.conv2d(
        lib.tensor(X4), lib.tensor(W4), stride=2, padding="same"
    ),
    "conv_transpose2d output size 0": lambda lib, f: f.conv_transpose2d(
        lib.tensor(X4), lib.tensor(_x(3, 2, 1, 1)), padding=(2, 0)
    ),
    "unfold block past the input": lambda lib, f: f.unfold(lib.tensor(X4), 5),
    "unfold negative padding": lambda lib, f: f.unfold(lib.tensor(X4), 2, padding=-1),
    "fold blocks of another count": lambda lib, f: f.fold(lib.tensor(_x(2, 4, 5)), (3, 3), 2),
    "fold blocks that do not fit": lambda lib, f: f.fold(lib.tensor(_x(1, 9, 1)), 1, 3),
    "reflect pad wider than the dim": lambda lib, f: f.pad(lib.tensor(X3), (5, 0), "reflect"),
    "circular pad wider than the dim": lambda lib, f: f.pad(
        lib.tensor(X4), (0, 0, 5, 0), "circular"
    ),
    "constant crop past the dim": lambda lib, f: f.pad(lib.tensor(X3), (-3, -3)),
    "pixel_shuffle channels": lambda lib, f: f.pixel_shuffle(lib.tensor(X4), 2),
    "pixel_unshuffle sizes": lambda lib, f: f.pixel_unshuffle(lib.tensor(X4), 2),
    "channel_shuffle 2-d": lambda lib, f: f.channel_shuffle(lib.tensor(_x(2, 4)), 2),
    "interpolate empty output": lambda lib, f: f.interpolate(
        lib.tensor(X4[:, :, :1]), scale_factor=0.5
    ),
    "interpolate negative scale": lambda lib, f: f.interpolate(
        lib.tensor(X4), scale_factor=-1.0, mode="bilinear"
    ),
    "grid_sample batch sizes": lambda lib, f: f.grid_sample(
        lib.tensor(X4), lib.tensor(_x(3, 2, 2, 2)), align_corners=False
    ),
    "fractional_max_pool2d kernel too large": lambda lib, f: f.fractional_max_pool2d(
        lib.tensor(X4), 3, output_size=(3, 3), _random_samples=lib.tensor(np.full((2, 3, 2), 0.5))
    ),
}


@pytest.mark.parametrize("case", sorted(RUNTIME_REFUSALS))
def test_the_refusals_torch_raises_as_runtime_errors(case):
    _same_refusal(RUNTIME_REFUSALS[case], RuntimeError, "SizeMismatchError")


NOT_IMPLEMENTED = {
    "interpolate bilinear of a 3-d input": lambda lib, f: f.interpolate(
        lib.tensor(X3), size=4, mode="bilinear"
    ),
    "interpolate unknown mode": lambda lib, f: f.interpolate(lib.tensor(X4), size=4, mode="cubic"),
    "pad unknown mode": lambda lib, f: f.pad(lib.tensor(X3), (1, 1), mode="wrap"),
    "pad reflect of 3 pairs of a 3-d input": lambda lib, f: f.pad(
        lib.tensor(X3), (1, 1, 1, 1, 1, 1), mode="reflect"
    ),
    "affine_grid of 3 sizes": lambda lib, f: f.affine_grid(
        lib.tensor(_x(2, 2, 3)), [2, 3, 4], align_corners=False
    ),
}


@pytest.mark.parametrize("case", sorted(NOT_IMPLEMENTED))
def test_the_refusals_torch_raises_as_not_implemented(case):
    _same_refusal(NOT_IMPLEMENTED[case], NotImplementedError, "UnsupportedModeError")


def test_grid_sample_refuses_bicubic_of_a_5d_input_as_a_runtime_error():
    def make(lib, f):
        grid = lib.tensor(_x(1, 2, 2, 2, 3))
        return f.grid_sample(lib.tensor(X5), grid, mode="bicubic", align_corners=False)

    _same_refusal(make, RuntimeError, "UnsupportedModeError")  # (an InvalidArgumentError too)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_max_unpool_of_an_index_outside_its_output_is_a_runtime_error(dims):
    shape = (1, 1) + (1,) * dims

    def make(lib, f):
        values, index = lib.ones(shape), lib.tensor(np.full(shape, 99, dtype=np.int64))
        return getattr(f, f"max_unpool{dims}d")(values, index, 2)

    _same_refusal(make, RuntimeError, "InvalidMaxIndexError")
    assert isinstance(_refusal(rg, make), IndexError)  # (and still an out-of-range index)


def test_affine_grid_refuses_an_empty_batch_but_where_torch_warns():
    def make(lib, f):
        return f.affine_grid(lib.tensor(_x(0, 2, 3)), [0, 3, 4, 4], align_corners=False)

    _same_refusal(make, ValueError, "ShapeError")

    def unit(lib, f):  # (align_corners and a size of 1: torch warns instead of checking)
        return f.affine_grid(lib.tensor(_x(0, 2, 3)), [0, 3, 1, 4], align_corners=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert tuple(unit(rg, rg.nn.functional).shape) == tuple(
            unit(torch, torch.nn.functional).shape
        )


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize(
    "how", [{"scale_factor": (1.3, 2.0)}, {"scale_factor": 1.3}, {"size": (3, 5)}]
)
def test_antialias_leaves_a_dimension_of_unchanged_size_as_torch(mode, how):
    x = _x(2, 3, 3, 2)

    def make(lib):
        return lib.nn.functional.interpolate(lib.tensor(x), mode=mode, antialias=True, **how)

    expected, got = make(torch), make(rg)
    assert tuple(got.shape) == tuple(expected.shape)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)


def test_upsample_reads_a_scale_factor_of_zero_as_none():
    for lib in (torch, rg):
        with pytest.raises(ValueError, match=r"size (and|or) scale_factor"):
            lib.nn.Upsample(scale_factor=0.0)(lib.ones((1, 1, 2)))


def test_interpolate_area_takes_a_scale_factor_of_zero():
    x = _x(1, 2, 3, 4)

    def make(lib):
        return lib.nn.functional.interpolate(lib.tensor(x), scale_factor=0.0, mode="area")

    assert tuple(make(rg).shape) == tuple(make(torch).shape) == (1, 2, 0, 0)


def _nearest_exact_cases():
    for n_in in range(1, 25):
        for n_out in range(1, 50):
            yield n_in, {"size": n_out}
        for factor in (0.3, 0.37, 0.65, 1.1, 1.37, 1.7, 2.2, 2.5, 3.3, 1 / 3, 2 / 3):
            if int(n_in * factor) > 0:
                yield n_in, {"scale_factor": factor}


@pytest.mark.parametrize(
    ("dtype", "dims"), [("float64", 1), ("float64", 2), ("float64", 3), ("float32", 2)]
)
def test_nearest_exact_picks_torchs_pixels_on_a_half(dtype, dims):
    """torch computes the source pixel in float32 (its 2-d kernel, and every scale_factor)
    or float64 (the sizes of a float64 input of 1 or 3 dims), the product rounded to float32
    before the floor: from 2 pixels to 49, output 24 sits on the half (24.5 * 2 / 49 = 1),
    which float64 alone puts at 0.99999. (A float32 input of 1 or 3 dims resized by size is
    left out: 3 of 2301 such sizes still differ from torch's, whose rule there is not found;
    its scale factors are in the float32 2-d case's rule, tested through dims=2.)"""
    bad = []
    for n_in, how in _nearest_exact_cases():
        if "scale_factor" in how and dims > 1:
            how = {"scale_factor": (1.0,) * (dims - 1) + (how["scale_factor"],)}
        elif "size" in how:
            how = {"size": (1,) * (dims - 1) + (how["size"],)}
        x = np.arange(n_in, dtype=dtype).reshape((1, 1) + (1,) * (dims - 1) + (n_in,))
        expected = torch.nn.functional.interpolate(torch.tensor(x), mode="nearest-exact", **how)
        got = rg.nn.functional.interpolate(rg.tensor(x), mode="nearest-exact", **how)
        if not np.array_equal(got.numpy(), expected.numpy()):
            bad.append((n_in, how))
    assert not bad, bad[:5]


@pytest.mark.parametrize("dims", [1, 3])
def test_nearest_scales_a_float64_inputs_sizes_as_torchs_1d_and_3d_kernels(dims):
    """torch's 1-d and 3-d ``nearest`` kernels scale a float64 input's sizes in float64, the
    product rounded to float32 before the floor (14 pixels to 46: output 23 reads pixel 7);
    retrograd's NumPy kernel took float32 throughout (pixel 6). The gradient is torch's too
    (its backward takes the float32 rule: both are compared)."""
    bad = []
    for n_in in range(1, 20):
        for n_out in range(1, 50):
            x = np.arange(n_in, dtype=np.float64).reshape((1, 1) + (1,) * (dims - 1) + (n_in,))
            size = (1,) * (dims - 1) + (n_out,)
            tx, rx = torch.tensor(x, requires_grad=True), rg.tensor(x).requires_grad_(True)
            expected = torch.nn.functional.interpolate(tx, size=size, mode="nearest")
            got = rg.nn.functional.interpolate(rx, size=size, mode="nearest")
            (expected_grad,) = torch.autograd.grad(expected.sum(), tx)
            (grad,) = rg.autograd.grad(got.sum(), [rx])
            if not np.array_equal(got.detach().numpy(), expected.detach().numpy()):
                bad.append(("value", n_in, n_out))
            if not np.array_equal(grad.numpy(), expected_grad.numpy()):
                bad.append(("grad", n_in, n_out))
    assert not bad, bad[:5]
