"""Regressions found by the round-54 random programs over ``nn.functional`` with edge
parameters (tests/test_random_functional_54.py), each against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")
F = rg.nn.functional


def _grad(out: rg.Tensor, leaf: rg.Tensor) -> np.ndarray:
    return leaf.grad(out.sum().backward()).numpy()


@pytest.mark.parametrize(
    ("shape", "window"),
    [
        # width 1, padding 1, dilation 2: every window's columns are -1 and 1, padding alone
        ((1, 1, 5, 1), dict(kernel_size=2, stride=3, padding=1, dilation=(1, 2), ceil_mode=True)),
        ((2, 2, 6, 1), dict(kernel_size=(2, 2), padding=1, dilation=2)),
        ((1, 2, 2, 5, 1), dict(kernel_size=2, stride=(1, 3, 3), padding=1, dilation=(1, 1, 2))),
    ],
)
def test_max_pool_window_over_padding_alone_points_where_torch_does(shape, window):
    """A window that covers only padding has maximum -inf; torch's index for it is the
    window's first position at or after zero along every axis, not clipped to the axis (in
    2-d it runs into the next row), and its gradient goes there. Ours clipped every axis.
    (The cases keep torch's indices inside the input: past it, torch's backward writes
    outside its buffer.)"""
    x = np.random.default_rng(0).standard_normal(shape)
    name = f"max_pool{len(shape) - 2}d"
    expected = torch.tensor(x, requires_grad=True)
    values, indices = getattr(torch.nn.functional, name)(expected, return_indices=True, **window)
    values.sum().backward()
    ours = rg.tensor(x).requires_grad_(True)
    got_values, got_indices = getattr(F, name)(ours, return_indices=True, **window)
    np.testing.assert_array_equal(got_values.numpy(), values.detach().numpy())
    np.testing.assert_array_equal(got_indices.numpy(), indices.numpy())
    np.testing.assert_allclose(_grad(got_values, ours), expected.grad.numpy())


def test_max_pool_compiled_kernels_place_padding_only_windows_as_torch():
    """The compiled kernels (large inputs, channels-first planes and channels-last) follow the
    same rule; torch's index past the last cell is kept at the last cell (torch's own points
    outside the input, and its backward drops it)."""
    x = np.random.default_rng(1).standard_normal((1, 4096, 16, 1))
    window = dict(kernel_size=2, stride=2, padding=1, dilation=(1, 2))
    expected = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **window)[1]
    expected = np.minimum(expected.numpy(), 15)
    for layout in (rg.contiguous_format, rg.channels_last):
        ours = rg.tensor(x).contiguous(memory_format=layout)
        got = F.max_pool2d(ours, return_indices=True, **window)[1]
        np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize(
    ("indices", "offsets", "include_last_offset"),
    [
        ([], [0, 1, 3], False),  # offsets past an empty input
        ([1, 2], [2], True),  # first offset not 0, no bag at all
        ([1, 2], [], True),  # no offsets where the last is included
    ],
)
def test_embedding_bag_refuses_offsets_torch_refuses(indices, offsets, include_last_offset):
    """torch checks the offsets as given (the last one too); ours checked only the bags'
    starts, and returned bags for offsets torch refuses."""
    weight = np.random.default_rng(2).standard_normal((4, 2))
    with pytest.raises(RuntimeError):
        torch.nn.functional.embedding_bag(
            torch.tensor(indices, dtype=torch.int64),
            torch.tensor(weight),
            torch.tensor(offsets, dtype=torch.int64),
            include_last_offset=include_last_offset,
        )
    ours = rg.tensor(weight).requires_grad_(True)
    with pytest.raises(rg.InvalidArgumentError, match="embedding_bag"):
        F.embedding_bag(
            rg.tensor(indices, dtype=rg.int64),
            ours,
            rg.tensor(offsets, dtype=rg.int64),
            include_last_offset=include_last_offset,
        )
    # the weight stays usable
    bags = F.embedding_bag(rg.tensor([[0, 1]]), ours, mode="sum")
    np.testing.assert_allclose(_grad(bags, ours)[:2], np.ones((2, 2)))


@pytest.mark.parametrize("dtype", ["int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize(
    ("name", "take"),
    [
        ("max_pool2d", lambda x: x),
        ("max_pool3d", lambda x: x.unsqueeze(2)),
        ("max_pool1d", lambda x: x[0]),  # torch pools integers in 1-d with the indices only
    ],
)
def test_max_pool_takes_every_integer_dtype_torch_takes(dtype, name, take):
    """torch's CPU max pooling takes int32/int16/int8/uint8 (not only int64), keeping the
    dtype; ours refused every integer dtype but int64."""
    x = np.random.default_rng(3).integers(-100, 120, (1, 3, 5, 6)).astype(dtype)
    window = dict(kernel_size=2, stride=1, padding=1, ceil_mode=True, return_indices=True)
    expected = getattr(torch.nn.functional, name)(take(torch.tensor(x)), **window)
    got = getattr(F, name)(take(rg.tensor(x)), **window)
    for ours, theirs in zip(got, expected):
        assert str(ours.dtype).rsplit(".", 1)[-1] == str(theirs.dtype).rsplit(".", 1)[-1]
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
@pytest.mark.parametrize(
    "name",
    ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"],
)
def test_dropout_that_draws_no_mask_returns_non_float_inputs(dtype, name):
    """torch's dropouts refuse an integer or bool input only where they draw a mask: in eval,
    with p 0 or on an empty input they return it, with p 1 zeros of its dtype. Ours refused
    every non-float input."""
    x = np.arange(24).reshape(2, 3, 4).astype(dtype)
    drop = getattr(F, name)
    for p, training, shape in [
        (0.5, False, x.shape),
        (0.0, True, x.shape),
        (1.0, True, x.shape),
        (0.5, True, (0, 3, 4)),
    ]:
        data = x if shape == x.shape else np.zeros(shape, dtype)
        expected = getattr(torch.nn.functional, name)(torch.tensor(data), p, training)
        got = drop(rg.tensor(data), p, training)
        assert str(got.dtype).rsplit(".", 1)[-1] == str(expected.dtype).rsplit(".", 1)[-1]
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    with pytest.raises(RuntimeError):  # torch draws a float mask it can't write back
        getattr(torch.nn.functional, name)(torch.tensor(x), 0.5, True)
    with pytest.raises(rg.DTypeError, match=name):
        drop(rg.tensor(x), 0.5, True)


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_unfold_and_fold_refuse_integers_as_torch(dtype):
    """torch's CPU im2col/col2im take floats, complex numbers and bools, not integers; ours
    unfolded and folded integer tensors."""
    x = np.ones((1, 4, 3, 3), dtype)
    cols = np.ones((1, 16, 4), dtype)
    with pytest.raises(NotImplementedError):
        torch.nn.functional.unfold(torch.tensor(x), 2)
    with pytest.raises(NotImplementedError):
        torch.nn.functional.fold(torch.tensor(cols), (3, 3), 2)
    with pytest.raises(rg.DTypeError, match="unfold"):
        F.unfold(rg.tensor(x), 2)
    with pytest.raises(rg.DTypeError, match="fold"):
        F.fold(rg.tensor(cols), (3, 3), 2)
    for kind in ("bool", "float64"):  # what torch takes still unfolds
        expected = torch.nn.functional.unfold(torch.tensor(x.astype(kind)), 2)
        np.testing.assert_array_equal(F.unfold(rg.tensor(x.astype(kind)), 2).numpy(), expected)


@pytest.mark.parametrize("norm_type", [float("inf"), -float("inf")])
@pytest.mark.parametrize("spatial", [1, 2, 3])
def test_lp_pool_with_an_infinite_norm_is_torchs_max_of_magnitudes(norm_type, spatial):
    """torch 2.13's ``lp_pool`` with ``norm_type`` inf is the max pool of ``|x|`` (-inf: minus
    the max pool of ``-|x|``); ours took the power route and returned ones."""
    torch.manual_seed(54)
    x = torch.randn(2, 2, *(5,) * spatial, dtype=torch.float64, requires_grad=True)
    name = f"lp_pool{spatial}d"
    expected = getattr(torch.nn.functional, name)(x, norm_type, 2, None, True)
    weights = torch.randn(expected.shape, dtype=torch.float64)
    (expected * weights).sum().backward()
    ours = rg.tensor(x.detach().numpy()).requires_grad_(True)
    got = getattr(F, name)(ours, norm_type, 2, None, True)
    np.testing.assert_allclose(got.numpy(), expected.detach().numpy())
    grads = (got * rg.tensor(weights.numpy())).sum().backward()
    np.testing.assert_allclose(ours.grad(grads).numpy(), x.grad.numpy())


def test_interpolate_refuses_recompute_scale_factor_with_a_size():
    """torch raises ``ValueError`` for ``recompute_scale_factor=True`` with an explicit size;
    ours ignored it."""
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4))
    with pytest.raises(ValueError, match="recompute_scale_factor"):
        torch.nn.functional.interpolate(torch.tensor(x), size=5, recompute_scale_factor=True)
    with pytest.raises(rg.InvalidArgumentError, match="interpolate: recompute_scale_factor"):
        F.interpolate(rg.tensor(x), size=5, recompute_scale_factor=True)
    for flag in (False, None):  # not asking for it is fine, as in torch
        expected = torch.nn.functional.interpolate(
            torch.tensor(x), size=5, recompute_scale_factor=flag
        )
        got = F.interpolate(rg.tensor(x), size=5, recompute_scale_factor=flag)
        np.testing.assert_allclose(got.numpy(), expected.numpy())


def test_lp_pool1d_with_an_infinite_norm_takes_a_tuple_kernel_as_torch():
    """torch's infinite-norm ``lp_pool1d`` is a ``max_pool1d``, which takes ``kernel_size``
    ``(3,)``; a finite norm multiplies by the kernel size, and a tuple fails there."""
    x = np.random.default_rng(5).standard_normal((2, 6))
    expected = torch.nn.functional.lp_pool1d(torch.tensor(x), -float("inf"), (3,), (1,), True)
    got = F.lp_pool1d(rg.tensor(x), -float("inf"), (3,), (1,), True)
    np.testing.assert_allclose(got.numpy(), expected.numpy())
    with pytest.raises(TypeError):
        torch.nn.functional.lp_pool1d(torch.tensor(x), 2.0, (3,))
    with pytest.raises(rg.DTypeError, match="lp_pool1d"):
        F.lp_pool1d(rg.tensor(x), 2.0, (3,))
