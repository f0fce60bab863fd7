"""Regressions found by round 24 of the differential fuzzer (``tests/fuzz24_cases.py``): each
expected value or refusal comes from torch, and each test failed on the old code."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _both(fn):
    """fn(lib) on torch and on retrograd: (torch's result or error, retrograd's)."""
    out = []
    for lib in (torch, rg):
        try:
            out.append(fn(lib))
        except Exception as e:  # either library's refusal is a result here
            out.append(e)
    return out


def test_linear_without_input_features_on_a_batched_input():
    # a [*, 0] input of more than 2 dimensions raised "cannot reshape [2, 3, 0] (0 elements)
    # to [-1, 0]"; torch returns the bias everywhere, and a zero weight gradient
    results = []
    for lib in (torch, rg):
        x = lib.zeros(2, 3, 0, dtype=lib.float64, requires_grad=True)
        w = lib.zeros(4, 0, dtype=lib.float64, requires_grad=True)
        b = lib.tensor([0.5, -1.0, 2.0, 0.25], dtype=lib.float64, requires_grad=True)
        y = lib.nn.functional.linear(x, w, b)
        grads = lib.autograd.grad((y * y).sum(), [x, w, b])
        results.append([y.detach().numpy(), *(g.numpy() for g in grads)])
    for got, want in zip(results[1], results[0]):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want)


F_POOLS = [
    ("max_pool1d", (1, 0, 4), lambda f, x: f.max_pool1d(x, 2)),
    ("max_pool1d", (0, 4), lambda f, x: f.max_pool1d(x, 2, return_indices=True)),
    ("avg_pool1d", (2, 0, 4), lambda f, x: f.avg_pool1d(x, 2)),
    ("lp_pool1d", (0, 4), lambda f, x: f.lp_pool1d(x, 2.0, 2)),
    ("max_pool2d", (1, 0, 4, 4), lambda f, x: f.max_pool2d(x, 2)),
    ("avg_pool2d", (0, 4, 4), lambda f, x: f.avg_pool2d(x, 2)),
    ("max_pool3d", (0, 0, 2, 2, 2), lambda f, x: f.max_pool3d(x, 2)),
    ("avg_pool3d", (1, 0, 2, 2, 2), lambda f, x: f.avg_pool3d(x, 2)),
    ("adaptive_max_pool1d", (1, 0, 4), lambda f, x: f.adaptive_max_pool1d(x, 2)),
    ("adaptive_max_pool2d", (2, 0, 4, 4), lambda f, x: f.adaptive_max_pool2d(x, 0)),
    ("adaptive_avg_pool3d", (1, 0, 2, 2, 2), lambda f, x: f.adaptive_avg_pool3d(x, 2)),
    ("interpolate", (1, 0, 4), lambda f, x: f.interpolate(x, scale_factor=2.0)),
    ("interpolate", (0, 0, 4, 4), lambda f, x: f.interpolate(x, size=3, mode="bilinear")),
    ("pad", (1, 0, 4), lambda f, x: f.pad(x, (1, 1), mode="reflect")),
    ("pad", (0, 4, 4), lambda f, x: f.pad(x, (1, 1, 1, 1), mode="replicate")),
    ("unfold", (1, 0, 3, 3), lambda f, x: f.unfold(x, 2)),
]


@pytest.mark.parametrize(("name", "shape", "fn"), F_POOLS, ids=[f"{n}{s}" for n, s, _ in F_POOLS])
def test_layers_refuse_an_input_without_channels_as_torch(name, shape, fn):
    # pools, interpolation, reflect/replicate padding and unfold of an input with no channels
    # returned an empty result; torch refuses them ("Expected ... tensor with optional 0 dim
    # batch size", "Non-empty 3D data tensor expected")
    want, got = _both(lambda lib: fn(lib.nn.functional, lib.zeros(shape, dtype=lib.float64)))
    assert isinstance(want, Exception)
    assert isinstance(got, rg.ShapeError) and name in str(got), got


def test_layers_still_take_what_torch_takes():
    # (area interpolation of an empty input to one cell was refused: torch's is NaN, its
    # adaptive average pooling's mean of nothing; the rest guard the refusals above from
    # reaching what torch takes)
    cases = [
        ((1, 1, 0), lambda f, x: f.interpolate(x, size=1, mode="area")),
        ((1, 1, 0, 3), lambda f, x: f.interpolate(x, size=(1, 1), mode="area")),
        ((0, 2, 4), lambda f, x: f.max_pool1d(x, 2)),  # an empty batch
        ((0, 4, 4), lambda f, x: f.adaptive_max_pool2d(x, 2)),  # (torch: dim 0 is a batch)
        ((1, 0, 2, 2), lambda f, x: f.adaptive_avg_pool2d(x, 2)),
        ((1, 0, 2, 2, 2), lambda f, x: f.adaptive_avg_pool3d(x, 1)),
        ((1, 0, 4), lambda f, x: f.interpolate(x, size=2, mode="area")),
        ((1, 0, 4), lambda f, x: f.pad(x, (1, 1), mode="circular")),
        ((0, 2, 4), lambda f, x: f.pad(x, (1, 1), mode="reflect")),
    ]
    for shape, fn in cases:
        want, got = _both(
            lambda lib, s=shape, f=fn: f(lib.nn.functional, lib.zeros(s, dtype=lib.float64))
        )
        assert not isinstance(want, Exception) and not isinstance(got, Exception), got
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    ("shape", "amounts"),
    [((2, 3, 4, 5), (1, 1)), ((5, 6), (1, 1, 1, 1)), ((4,), (1, 1)), ((2, 3, 4), ())],
)
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_modes_refuse_what_torch_refuses(shape, amounts, mode):
    # non-constant padding of one dimension of a 4-d input (or two of a 2-d one...) returned
    # a result; torch takes only [C, *] or [N, C, *] with one dimension per (left, right) pair
    want, got = _both(lambda lib: lib.nn.functional.pad(lib.ones(shape), amounts, mode=mode))
    assert isinstance(want, Exception)
    assert isinstance(got, rg.ShapeError) and "pad" in str(got), got


def test_batch_norm_refuses_one_value_per_channel_without_channels():
    # [1, 0] in training returned an empty result; torch counts N * prod(spatial) = 1 value
    # per channel and refuses, channels or not
    for shape in [(1, 0), (1, 0, 1)]:
        want, got = _both(
            lambda lib, s=shape: lib.nn.functional.batch_norm(
                lib.ones(s), None, None, None, None, True
            )
        )
        assert isinstance(want, ValueError)
        assert isinstance(got, rg.RetrogradError) and "more than 1 value" in str(got), got
    ok = rg.nn.functional.batch_norm(rg.ones(2, 0), None, None, training=True)
    assert ok.shape == (2, 0)


def test_repeat_interleave_of_counts_alone():
    # torch.repeat_interleave(counts) (no input to repeat) raised "missing 1 required
    # positional argument: 'repeats'"
    for counts in ([2, 0, 1], [], [3]):
        want, got = _both(
            lambda lib, c=counts: lib.repeat_interleave(lib.tensor(c, dtype=lib.int64))
        )
        assert got.dtype == rg.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for bad in ([[2]], [-1, 2]):
        want, got = _both(lambda lib, c=bad: lib.repeat_interleave(lib.tensor(c)))
        assert isinstance(want, Exception) and isinstance(got, rg.RetrogradError), got
    want, got = _both(lambda lib: lib.repeat_interleave(lib.tensor([2, 0, 1]), output_size=2))
    assert isinstance(want, Exception) and "output_size" in str(got), got


@pytest.mark.parametrize(
    "fn",
    [
        # output_size that does not match: torch refuses, retrograd ignored it
        lambda lib: lib.tensor([1, 2]).repeat_interleave(2, output_size=3),
        lambda lib: lib.tensor([1, 2]).repeat_interleave(lib.tensor([1, 2]), output_size=2),
        # bool counts: torch has no kernel
        lambda lib: lib.tensor([1, 2]).repeat_interleave(lib.tensor([True, False])),
    ],
)
def test_repeat_interleave_refusals(fn):
    want, got = _both(fn)
    assert isinstance(want, Exception)
    assert isinstance(got, rg.RetrogradError) and "repeat_interleave" in str(got), got


def test_repeat_interleave_broadcasts_one_count_tensor():
    # a 0-d count tensor raised a DTypeError; a one-element one along a dim of two refused
    for lib_fn in (
        lambda lib: lib.tensor([[1.0, 2.0]]).repeat_interleave(lib.tensor(2), dim=1),
        lambda lib: lib.tensor([1, 2]).repeat_interleave(lib.tensor([3]), dim=0),
        lambda lib: lib.tensor([1, 2]).repeat_interleave(lib.tensor([2]), output_size=4),
    ):
        want, got = _both(lib_fn)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("isin", lambda lib: lib.isin(lib.tensor([True, False]), lib.tensor([True]))),
        ("isin", lambda lib: lib.isin(lib.tensor([0, 1]), lib.tensor([True]))),
        (
            "searchsorted",
            lambda lib: lib.searchsorted(lib.tensor([False, True]), lib.tensor([True])),
        ),
        ("bucketize", lambda lib: lib.bucketize(lib.tensor([True]), lib.tensor([False, True]))),
        (
            "index_reduce",
            lambda lib: lib.tensor([True, False]).index_reduce(
                0, lib.tensor([0]), lib.tensor([False]), "amax"
            ),
        ),
        ("median", lambda lib: lib.zeros(1, 0, dtype=lib.bool).median(0)),
        ("nanmedian", lambda lib: lib.zeros(0, 3, dtype=lib.bool).nanmedian(1)),
    ],
)
def test_bool_inputs_torch_has_no_kernel_for(name, fn):
    # each returned a result; torch refuses bool tensors there ("not implemented for 'Bool'")
    want, got = _both(fn)
    assert isinstance(want, Exception)
    assert isinstance(got, rg.DTypeError) and name in str(got), got


def test_bool_binary_search_refuses_values_but_not_no_values():
    # searchsorted of bool values in bool boundaries returned; torch has no bool kernel, but
    # skips its dtype check when there is nothing to search
    want, got = _both(lambda lib: lib.searchsorted(lib.tensor([False, True]), lib.tensor(True)))
    assert isinstance(want, Exception) and isinstance(got, rg.DTypeError), got
    for fn in (
        lambda lib: lib.searchsorted(lib.tensor([False, True]), lib.zeros(1, 0, dtype=lib.bool)),
        lambda lib: lib.bucketize(lib.zeros(0, dtype=lib.bool), lib.tensor([False, True])),
        lambda lib: lib.searchsorted(lib.tensor([0, 1]), lib.tensor([True, False])),
    ):
        want, got = _both(fn)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize(
    ("start", "end", "weight"),
    [
        ("int64", "int64", "float32"),
        ("float32", "float32", "float64"),
        ("float64", "float64", "int64"),
        ("bool", "bool", "float64"),
    ],
)
@pytest.mark.parametrize("zero_d_ends", [False, True])
def test_lerp_takes_a_zero_dim_weight_of_another_dtype(start, end, weight, zero_d_ends):
    # torch promotes a 0-d weight tensor with the ends (a float one makes integer ends float,
    # 0-d ends take its dtype); retrograd refused any weight not of the input's dtype
    def fn(lib):
        ends = (1.0, 3.0) if zero_d_ends else ([1.0, 2.0], [3.0, 5.0])
        a = lib.tensor(ends[0], dtype=getattr(lib, start))
        b = lib.tensor(ends[1], dtype=getattr(lib, end))
        return lib.lerp(a, b, lib.tensor(0.25, dtype=getattr(lib, weight)))

    want, got = _both(fn)
    assert str(got.dtype).rsplit(".", 1)[-1] == str(want.dtype).rsplit(".", 1)[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_lerp_gradient_reaches_a_zero_dim_weight_of_another_dtype():
    grads = []
    for lib in (torch, rg):
        a = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor(0.25, dtype=lib.float64, requires_grad=True)
        y = lib.lerp(a, lib.tensor([3.0, 5.0]), w)
        ga, gw = lib.autograd.grad((y * lib.tensor([1.0, -2.0])).sum(), [a, w])
        grads.append((ga.numpy(), gw.numpy(), str(gw.dtype).rsplit(".", 1)[-1]))
    (ga_r, gw_r, dt_r), (ga_t, gw_t, dt_t) = grads[1], grads[0]
    np.testing.assert_allclose(ga_r, ga_t)
    np.testing.assert_allclose(gw_r, gw_t)
    assert dt_r == dt_t == "float64"


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib: lib.logaddexp(lib.tensor([1, 2]), lib.tensor([0, 1])),
        lambda lib: lib.logaddexp2(lib.tensor([True]), lib.tensor([False])),
        lambda lib: lib.igamma(lib.tensor([1, 2]), lib.tensor([True, False])),
        lambda lib: lib.igammac(lib.tensor(2), lib.tensor([1, 3])),
        lambda lib: lib.special.gammainc(lib.tensor([1, 2]), lib.tensor([1, 0])),
        lambda lib: lib.special.gammaincc(lib.tensor([True]), lib.tensor([True])),
        lambda lib: lib.ldexp(lib.tensor([1.0, 2.0]), lib.tensor([True, False])),
        lambda lib: lib.ldexp(lib.tensor([1.0, 2.0], dtype=lib.float64), lib.tensor(True)),
        lambda lib: lib.tensor([1, 2]).index_fill(0, lib.tensor([0]), lib.tensor([5])),
        lambda lib: lib.ones(2, 3).index_fill_(1, lib.tensor([0, 2]), lib.tensor([[5.0]])),
    ],
)
def test_refusals_torch_makes_for_integer_operands_and_value_tensors(fn):
    # logaddexp/logaddexp2/igamma/igammac/gammainc(c) of two integer or bool tensors returned
    # float32 (torch has float kernels only), ldexp of a float input with a bool exponent
    # returned (torch has no such kernel), index_fill with a value tensor of dimensions filled
    # with it (torch takes a 0-d one only)
    want, got = _both(fn)
    assert isinstance(want, Exception)
    assert isinstance(got, rg.RetrogradError), got


def test_the_same_ops_still_take_one_float_operand():
    # (one float operand is enough for torch's float kernels, and an int mantissa takes a
    # bool exponent)
    for fn in (
        lambda lib: lib.logaddexp(lib.tensor([1, 2]), lib.tensor([0.5, 1.0])),
        lambda lib: lib.logaddexp2(lib.tensor([True]), lib.tensor(1.5, dtype=lib.float64)),
        lambda lib: lib.igamma(lib.tensor([1.0, 2.0]), lib.tensor([1, 3])),
        lambda lib: lib.ldexp(lib.tensor([1, 2]), lib.tensor([True, False])),
        lambda lib: lib.tensor([1, 2]).index_fill(0, lib.tensor([0]), lib.tensor(5)),
    ):
        want, got = _both(fn)
        assert str(got.dtype).rsplit(".", 1)[-1] == str(want.dtype).rsplit(".", 1)[-1]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    # (and the refusal above, so this test fails where the refusals are missing)
    want, got = _both(lambda lib: lib.logaddexp(lib.tensor([1]), lib.tensor([2])))
    assert isinstance(want, Exception) and isinstance(got, rg.DTypeError), got


def test_nextafter_passes_the_gradient_to_its_input():
    # nextafter was never differentiable; torch's gradient is the incoming one for ``self``
    # and 0 for ``other``
    grads = []
    for lib in (torch, rg):
        a = lib.tensor([1.0, 2.0, -0.5], dtype=lib.float64, requires_grad=True)
        b = lib.tensor([3.0, 0.0, -0.5], dtype=lib.float64, requires_grad=True)
        y = lib.nextafter(a, b)
        w = lib.tensor([2.0, -3.0, 0.5], dtype=lib.float64)
        ga, gb = lib.autograd.grad((y * w).sum(), [a, b], allow_unused=True)
        grads.append((ga.numpy(), np.zeros(3) if gb is None else gb.numpy()))
    for got, want in zip(grads[1], grads[0]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("order", [1, 2, float("inf")])
def test_largest_type_matrix_norms_of_empty_matrices_are_zero(order):
    # matrix_norm (and linalg.norm) of an empty matrix at ord 1, 2 or inf raised "amax: cannot
    # reduce an empty tensor"; torch's is 0, the largest of no non-negative values
    for shape in [(0, 0), (2, 3, 0), (2, 0, 3)]:
        want, got = _both(
            lambda lib, s=shape: lib.linalg.matrix_norm(lib.zeros(s, dtype=lib.float64), ord=order)
        )
        assert tuple(got.shape) == tuple(want.shape)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        want, got = _both(lambda lib, s=shape: lib.linalg.norm(lib.zeros(s[-2:]), ord=order))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
