"""retrograd.nn.functional against torch.nn.functional: values and gradients on random
shapes and options, float32 and float64; max-pool indices and their tie/NaN/inf rules;
convolutions run in small batch blocks. Skipped when torch is not installed."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from nn_testing import compare_with_torch
from retrograd.backend import numpy_conv

torch = pytest.importorskip("torch")
TF = torch.nn.functional
DTYPES = ("float32", "float64")
CASES = range(6)


def _compare_or_both_reject(ours, theirs, arrays, dtype):
    """Random options can be invalid (output size below one): then both must reject them."""
    try:
        theirs(*[torch.tensor(a) for a in arrays])
    except RuntimeError:
        with pytest.raises(rg.ShapeError):
            ours(*[rg.tensor(a) for a in arrays])
        return
    compare_with_torch(ours, theirs, arrays, dtype)


def _conv_config(rng, spatial, transpose):
    groups = int(rng.integers(1, 3))
    c_in, c_out = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    kernel = tuple(int(k) for k in rng.integers(1, 4, spatial))
    stride = tuple(int(s) for s in rng.integers(1, 3, spatial))
    dilation = tuple(int(d) for d in rng.integers(1, 3, spatial))
    padding = tuple(int(p) for p in rng.integers(0, 3, spatial))
    size = tuple(int(n) for n in rng.integers(4, 8 if spatial < 3 else 5, spatial))
    x = rng.standard_normal((int(rng.integers(1, 3)), c_in, *size))
    if transpose:
        # PyTorch needs output_padding < max(stride, dilation)
        out_pad = tuple(int(rng.integers(0, max(s, d))) for s, d in zip(stride, dilation))
        weight = rng.standard_normal((c_in, c_out // groups, *kernel))
        return x, weight, rng.standard_normal(c_out), (stride, padding, out_pad, groups, dilation)
    weight = rng.standard_normal((c_out, c_in // groups, *kernel))
    return x, weight, rng.standard_normal(c_out), (stride, padding, dilation, groups)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("case", CASES)
def test_conv_matches_torch(case, spatial, dtype):
    rng = np.random.default_rng(100 * spatial + case)
    x, w, b, options = _conv_config(rng, spatial, transpose=False)
    ours, theirs = getattr(F, f"conv{spatial}d"), getattr(TF, f"conv{spatial}d")
    _compare_or_both_reject(
        lambda x, w, b: ours(x, w, b, *options),
        lambda x, w, b: theirs(x, w, b, *options),
        [x, w, b],
        dtype,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spatial", [1, 2, 3])
@pytest.mark.parametrize("case", CASES)
def test_conv_transpose_matches_torch(case, spatial, dtype):
    rng = np.random.default_rng(200 * spatial + case)
    x, w, b, options = _conv_config(rng, spatial, transpose=True)
    ours = getattr(F, f"conv_transpose{spatial}d")
    theirs = getattr(TF, f"conv_transpose{spatial}d")
    _compare_or_both_reject(
        lambda x, w, b: ours(x, w, b, *options),
        lambda x, w, b: theirs(x, w, b, *options),
        [x, w, b],
        dtype,
    )


def _pool_config(rng, spatial, with_dilation):
    kernel = tuple(int(k) for k in rng.integers(1, 4, spatial))
    stride = tuple(int(s) for s in rng.integers(1, 3, spatial))
    padding = tuple(int(rng.integers(0, k // 2 + 1)) for k in kernel)
    dilation = tuple(int(d) for d in rng.integers(1, 3, spatial)) if with_dilation else None
    size = tuple(int(n) for n in rng.integers(7, 10, spatial))
    return kernel, stride, padding, dilation, bool(rng.integers(0, 2)), size


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spatial", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_avg_pool_matches_torch(case, spatial, dtype):
    rng = np.random.default_rng(300 * spatial + case)
    kernel, stride, padding, _, ceil_mode, size = _pool_config(rng, spatial, False)
    include_pad = bool(rng.integers(0, 2))
    options = (kernel, stride, padding, ceil_mode, include_pad)
    if spatial == 2 and case % 2:  # PyTorch has divisor_override for 2-d pooling only
        options += (int(rng.integers(1, 6)) * (-1 if case % 4 == 3 else 1),)
    x = rng.standard_normal((2, 3, *size))
    _compare_or_both_reject(
        lambda x: getattr(F, f"avg_pool{spatial}d")(x, *options),
        lambda x: getattr(TF, f"avg_pool{spatial}d")(x, *options),
        [x],
        dtype,
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spatial", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_max_pool_matches_torch(case, spatial, dtype):
    rng = np.random.default_rng(400 * spatial + case)
    kernel, stride, padding, dilation, ceil_mode, size = _pool_config(rng, spatial, True)
    options = (kernel, stride, padding, dilation, ceil_mode)
    x = rng.standard_normal((2, 3, *size))
    _compare_or_both_reject(
        lambda x: getattr(F, f"max_pool{spatial}d")(x, *options),
        lambda x: getattr(TF, f"max_pool{spatial}d")(x, *options),
        [x],
        dtype,
    )
    try:
        getattr(TF, f"max_pool{spatial}d")(torch.tensor(x), *options)
    except RuntimeError:  # invalid options, checked above
        return
    _, ours = getattr(F, f"max_pool{spatial}d_with_indices")(rg.tensor(x), *options)
    _, theirs = getattr(TF, f"max_pool{spatial}d")(torch.tensor(x), *options, return_indices=True)
    assert ours.dtype == "int64"
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_max_pool_ties_nan_and_infinities_follow_torch():
    """Ties go to the first cell, NaN propagates (the last NaN's index), windows of -inf
    point at their first real cell; indices match PyTorch's exactly."""
    rng = np.random.default_rng(5)
    for trial in range(80):
        x = rng.integers(0, 3, (2, 2, 7, 6)).astype(np.float64)  # many ties
        if trial % 2:  # special values (odd trials; even ones have ties only)
            noise = rng.random(x.shape)
            x[noise < 0.15] = -np.inf
            x[(noise > 0.15) & (noise < 0.22)] = np.nan
            x[noise > 0.95] = np.inf
        if trial % 8 == 1:
            x[:] = -np.inf
        kernel = tuple(int(k) for k in rng.integers(1, 4, 2))
        stride = tuple(int(s) for s in rng.integers(1, 3, 2))
        padding = tuple(int(rng.integers(0, k // 2 + 1)) for k in kernel)
        dilation = tuple(int(d) for d in rng.integers(1, 3, 2))
        options = (kernel, stride, padding, dilation, bool(trial % 3 == 0))
        try:
            t_values, t_indices = TF.max_pool2d(torch.tensor(x), *options, return_indices=True)
        except RuntimeError:  # a window larger than the padded input: ours raises too
            with pytest.raises(rg.ShapeError):
                F.max_pool2d(rg.tensor(x), *options)
            continue
        values, indices = F.max_pool2d_with_indices(rg.tensor(x), *options)
        np.testing.assert_array_equal(values.numpy(), t_values.numpy())
        np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spatial", [1, 2])
@pytest.mark.parametrize("case", CASES)
def test_adaptive_avg_pool_matches_torch(case, spatial, dtype):
    rng = np.random.default_rng(500 * spatial + case)
    size = tuple(int(n) for n in rng.integers(1, 9, spatial))
    out = tuple(int(n) for n in rng.integers(1, 9, spatial))
    x = rng.standard_normal((2, 2, *size))
    compare_with_torch(
        lambda x: getattr(F, f"adaptive_avg_pool{spatial}d")(x, out),
        lambda x: getattr(TF, f"adaptive_avg_pool{spatial}d")(x, out),
        [x],
        dtype,
    )


INTERPOLATION_MODES = {
    "nearest": (1, 2, 3),
    "nearest-exact": (1, 2, 3),
    "area": (1, 2, 3),
    "linear": (1,),
    "bilinear": (2,),
    "bicubic": (2,),
    "trilinear": (3,),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", list(INTERPOLATION_MODES))
@pytest.mark.parametrize("case", range(8))
def test_interpolate_matches_torch(case, mode, dtype):
    rng = np.random.default_rng(600 + 10 * case + len(mode))
    spatial = INTERPOLATION_MODES[mode][case % len(INTERPOLATION_MODES[mode])]
    size = tuple(int(n) for n in rng.integers(1, 7, spatial))
    x = rng.standard_normal((2, 2, *size))
    options = {}
    if mode not in ("nearest", "nearest-exact", "area"):
        options["align_corners"] = bool(case % 2)
    if case % 4 < 2:
        options["size"] = tuple(int(n) for n in rng.integers(1, 12, spatial))
    else:
        factors = rng.choice([0.5, 0.75, 1.0, 1.3, 2.0, 2.7, 3.0], spatial)
        options["scale_factor"] = tuple(float(f) for f in factors)
        if any(int(n * f) < 1 for n, f in zip(size, factors)):
            options["scale_factor"] = 2.0
        options["recompute_scale_factor"] = case == 7
    compare_with_torch(
        lambda x: F.interpolate(x, mode=mode, **options),
        lambda x: TF.interpolate(x, mode=mode, **options),
        [x],
        dtype,
        scale_atol=10.0,
    )


def probs_of(rng, shape):
    p = rng.random(shape)
    return p / p.sum(1, keepdims=True)


def test_deprecated_size_average_and_reduce_mean_what_they_mean_in_torch():
    rng = np.random.default_rng(701)
    logits, target = rng.standard_normal((4, 3)), rng.integers(0, 3, 4)
    x, t = rg.tensor(logits), rg.tensor(target)
    for size_average, reduce in ((False, None), (None, False), (True, True), (False, True)):
        with pytest.warns(UserWarning):  # torch warns that they are deprecated
            expected = TF.cross_entropy(
                torch.tensor(logits), torch.tensor(target), size_average=size_average, reduce=reduce
            ).numpy()
            expected_mse = TF.mse_loss(
                torch.tensor(logits),
                torch.tensor(logits[::-1].copy()),
                size_average=size_average,
                reduce=reduce,
            ).numpy()
        got = F.cross_entropy(x, t, size_average=size_average, reduce=reduce).numpy()
        got_mse = F.mse_loss(x, rg.tensor(logits[::-1].copy()), size_average, reduce).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-12)
        np.testing.assert_allclose(got_mse, expected_mse, rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_losses_embedding_linear_layer_norm_match_torch(dtype):
    rng = np.random.default_rng(700)
    logits, target = rng.standard_normal((6, 5, 3)), rng.integers(0, 5, (6, 3))
    target[0, 0] = -100  # PyTorch's default ignore_index
    compare_with_torch(F.cross_entropy, TF.cross_entropy, [logits, target], dtype)
    probs = rng.random((4, 3))
    compare_with_torch(
        F.cross_entropy,
        TF.cross_entropy,
        [rng.standard_normal((4, 3)), probs / probs.sum(1, keepdims=True)],
        dtype,
    )
    compare_with_torch(
        F.mse_loss, TF.mse_loss, [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))], dtype
    )
    # PyTorch does not differentiate with respect to the loss weights: they are constants.
    weights = rng.random(5) + 0.5
    torch_weights = torch.tensor(weights, dtype=getattr(torch, dtype))
    for reduction, smoothing in (("mean", 0.0), ("mean", 0.25), ("sum", 0.1), ("none", 0.4)):
        options = {"reduction": reduction, "label_smoothing": smoothing}
        for inputs, ignore in (
            ([logits, target % 5], {"ignore_index": 2}),
            ([rng.standard_normal((4, 5)), probs_of(rng, (4, 5))], {}),
        ):
            compare_with_torch(
                partial(F.cross_entropy, weight=weights, **options, **ignore),
                partial(TF.cross_entropy, weight=torch_weights, **options, **ignore),
                inputs,
                dtype,
            )
    squared_weights = rng.random((3, 4))
    torch_squared_weights = torch.tensor(squared_weights, dtype=getattr(torch, dtype))
    for reduction in ("mean", "sum", "none"):
        compare_with_torch(
            partial(F.mse_loss, reduction=reduction, weight=squared_weights),
            partial(TF.mse_loss, reduction=reduction, weight=torch_squared_weights),
            [rng.standard_normal((3, 4)), rng.standard_normal((3, 4))],
            dtype,
        )
    compare_with_torch(
        lambda i, w: F.embedding(i, w, padding_idx=0),
        lambda i, w: TF.embedding(i, w, padding_idx=0),
        [rng.integers(0, 6, (3, 4)), rng.standard_normal((6, 5))],
        dtype,
    )
    compare_with_torch(
        F.linear,
        TF.linear,
        [rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4)), rng.standard_normal(5)],
        dtype,
    )
    compare_with_torch(
        lambda x, w, b: F.layer_norm(x, (3, 4), w, b),
        lambda x, w, b: TF.layer_norm(x, (3, 4), w, b),
        [
            rng.standard_normal((2, 3, 4)) * 3 + 1,
            rng.standard_normal((3, 4)),
            rng.standard_normal((3, 4)),
        ],
        dtype,
    )


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_conv2d_padding_same_matches_torch():
    rng = np.random.default_rng(8)
    for kernel, dilation in (((2, 3), 1), ((4, 2), (1, 3)), ((3, 3), 2)):
        x, w = rng.standard_normal((2, 2, 7, 6)), rng.standard_normal((3, 2, *kernel))
        compare_with_torch(
            lambda x, w, d=dilation: F.conv2d(x, w, padding="same", dilation=d),
            lambda x, w, d=dilation: TF.conv2d(x, w, padding="same", dilation=d),
            [x, w],
            "float64",
        )


@pytest.mark.parametrize("block_bytes", [1, 3000])
def test_convolutions_in_small_batch_blocks_match_torch(monkeypatch, block_bytes):
    """The kernels process the batch in cache-sized blocks: one sample per block, and blocks
    of a few samples with a shorter last block, give PyTorch's results."""
    monkeypatch.setattr(numpy_conv, "COLUMN_BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(9)
    x, w, b = rng.standard_normal((7, 4, 6, 5)), rng.standard_normal((6, 2, 3, 2)), np.ones(6)
    compare_with_torch(
        lambda x, w, b: F.conv2d(x, w, b, 1, 1, 1, 2),
        lambda x, w, b: TF.conv2d(x, w, b, 1, 1, 1, 2),
        [x, w, b],
        "float64",
    )
    wt = rng.standard_normal((4, 3, 3, 2))
    compare_with_torch(
        lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1, 2),
        lambda x, w, b: TF.conv_transpose2d(x, w, b, 2, 1, 1, 2),
        [x, wt, b],
        "float64",
    )
