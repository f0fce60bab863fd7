"""retrograd.nn.functional: gradients against central finite differences (float64, every
function and option), bit-identical gradients under both checkpointing strategies, second
derivatives through the convolution, pooling and interpolation ops, dropout, hand-computed
values. The comparisons with torch.nn.functional are in test_nn_vs_torch.py."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from backends import inner_backend
from nn_testing import (
    analytic_gradients,
    autodiff,
    check_finite_differences,
    numeric_gradient,
)
from retrograd.autodiff.ops import op_kind

RNG = np.random.default_rng(2024)


def randn(*shape):
    return RNG.standard_normal(shape)


def distinct(*shape):
    """Values at least 0.1 apart, so no max-pool window has a near tie."""
    return RNG.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 1.0


def probabilities(*shape):
    p = RNG.random(shape) + 0.1
    return p / p.sum(axis=1, keepdims=True)


def ints(high, *shape):
    return RNG.integers(0, high, shape).astype(np.int64)


# -- finite differences: one row per function and option ---------------------------------------
FD_CASES = {
    # linear
    "linear": (lambda x, w, b: F.linear(x, w, b), [randn(3, 4), randn(2, 4), randn(2)]),
    "linear-3d-no-bias": (lambda x, w: F.linear(x, w), [randn(2, 2, 3), randn(4, 3)]),
    "linear-1d": (lambda x, w, b: F.linear(x, w, b), [randn(3), randn(2, 3), randn(2)]),
    # convolutions
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b), [randn(2, 2, 7), randn(3, 2, 3), randn(3)]),
    "conv1d-stride-pad-dil": (
        lambda x, w: F.conv1d(x, w, None, 2, 2, 2),
        [randn(2, 2, 9), randn(2, 2, 3)],
    ),
    "conv1d-groups": (
        lambda x, w, b: F.conv1d(x, w, b, padding=1, groups=2),
        [randn(1, 4, 6), randn(6, 2, 3), randn(6)],
    ),
    "conv1d-same-even-kernel": (
        lambda x, w: F.conv1d(x, w, padding="same"),
        [randn(2, 2, 6), randn(2, 2, 4)],
    ),
    "conv1d-valid": (
        lambda x, w: F.conv1d(x, w, padding="valid"),
        [randn(1, 1, 5), randn(1, 1, 2)],
    ),
    "conv1d-unbatched": (lambda x, w: F.conv1d(x, w, padding=1), [randn(2, 5), randn(3, 2, 3)]),
    "conv2d": (
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
        [randn(2, 2, 5, 4), randn(3, 2, 3, 3), randn(3)],
    ),
    "conv2d-stride-dil-groups": (
        lambda x, w: F.conv2d(x, w, None, (2, 1), (1, 0), (1, 2), 2),
        [randn(2, 4, 6, 7), randn(4, 2, 2, 3)],
    ),
    "conv2d-remainder": (
        lambda x, w: F.conv2d(x, w, stride=3),
        [randn(1, 2, 8, 7), randn(2, 2, 2, 2)],
    ),
    "conv3d": (
        lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=(1, 0, 1)),
        [randn(1, 2, 4, 5, 3), randn(2, 2, 2, 2, 2), randn(2)],
    ),
    "conv_transpose1d": (
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1),
        [randn(2, 2, 4), randn(2, 3, 3), randn(3)],
    ),
    "conv_transpose1d-groups-dil": (
        lambda x, w: F.conv_transpose1d(x, w, None, 2, 1, 1, 2, 2),
        [randn(2, 4, 5), randn(4, 1, 3)],
    ),
    # Burn's extension: output_padding >= stride, also with padding >= stride
    "conv_transpose1d-big-output-padding": (
        lambda x, w, b: F.conv_transpose1d(x, w, b, stride=1, padding=2, output_padding=3),
        [randn(2, 2, 5), randn(2, 3, 3), randn(3)],
    ),
    "conv_transpose2d": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, (2, 1), (1, 0), (1, 0), 1, (1, 2)),
        [randn(2, 2, 3, 4), randn(2, 3, 3, 2), randn(3)],
    ),
    "conv_transpose2d-big-output-padding": (
        lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, (3, 2)),
        [randn(1, 2, 3, 3), randn(2, 2, 2, 3)],
    ),
    "conv_transpose3d": (
        lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=(0, 1, 0)),
        [randn(1, 2, 2, 3, 2), randn(2, 2, 2, 2, 2)],
    ),
    # pooling
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 3), [randn(2, 2, 9)]),
    "avg_pool1d-pad-exclude": (
        lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False),
        [randn(1, 2, 7)],
    ),
    "avg_pool1d-ceil": (lambda x: F.avg_pool1d(x, 3, 2, 1, ceil_mode=True), [randn(1, 2, 8)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 1)), [randn(2, 2, 5, 6)]),
    "avg_pool2d-ceil-exclude": (
        lambda x: F.avg_pool2d(x, 3, 2, 1, True, False),
        [randn(1, 2, 6, 7)],
    ),
    "avg_pool2d-divisor-override": (
        lambda x: F.avg_pool2d(x, 3, 2, 1, True, divisor_override=4),
        [randn(1, 2, 6, 7)],
    ),
    "max_pool1d": (lambda x: F.max_pool1d(x, 2), [distinct(2, 2, 8)]),
    "max_pool1d-dil-pad-ceil": (lambda x: F.max_pool1d(x, 3, 2, 1, 2, True), [distinct(1, 2, 10)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [distinct(2, 3, 6, 6)]),
    "max_pool2d-overlap": (lambda x: F.max_pool2d(x, 3, 1, 1), [distinct(1, 2, 5, 5)]),
    "max_pool2d-dil-ceil": (
        lambda x: F.max_pool2d(x, (2, 3), (2, 1), (1, 1), (2, 1), True),
        [distinct(1, 2, 7, 6)],
    ),
    "adaptive_avg_pool1d": (lambda x: F.adaptive_avg_pool1d(x, 4), [randn(2, 2, 7)]),
    "adaptive_avg_pool1d-up": (lambda x: F.adaptive_avg_pool1d(x, 9), [randn(1, 2, 4)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), [randn(2, 2, 7, 5)]),
    "adaptive_avg_pool2d-none": (
        lambda x: F.adaptive_avg_pool2d(x, (None, 2)),
        [randn(1, 2, 3, 5)],
    ),
    # interpolation
    "nearest-1d-size": (lambda x: F.interpolate(x, size=7), [randn(2, 2, 3)]),
    "nearest-2d-scale": (lambda x: F.interpolate(x, scale_factor=1.7), [randn(1, 2, 3, 4)]),
    "nearest-2d-down": (lambda x: F.interpolate(x, size=(2, 3)), [randn(1, 2, 5, 7)]),
    "nearest-3d": (lambda x: F.interpolate(x, scale_factor=2), [randn(1, 1, 2, 3, 2)]),
    "interpolate-linear": (lambda x: F.interpolate(x, size=6, mode="linear"), [randn(2, 2, 4)]),
    "bilinear": (lambda x: F.interpolate(x, size=(5, 3), mode="bilinear"), [randn(1, 2, 3, 4)]),
    "bilinear-align": (
        lambda x: F.interpolate(x, scale_factor=2.5, mode="bilinear", align_corners=True),
        [randn(1, 2, 3, 3)],
    ),
    "bilinear-down": (
        lambda x: F.interpolate(x, size=(2, 3), mode="bilinear"),
        [randn(1, 1, 5, 7)],
    ),
    "bicubic": (lambda x: F.interpolate(x, size=(6, 5), mode="bicubic"), [randn(1, 2, 3, 4)]),
    "bicubic-align": (
        lambda x: F.interpolate(x, size=(4, 7), mode="bicubic", align_corners=True),
        [randn(1, 1, 5, 3)],
    ),
    "bicubic-scale": (
        lambda x: F.interpolate(x, scale_factor=(1.5, 0.75), mode="bicubic"),
        [randn(1, 1, 4, 6)],
    ),
    "trilinear": (
        lambda x: F.interpolate(x, size=(3, 2, 4), mode="trilinear"),
        [randn(1, 1, 2, 3, 2)],
    ),
    "nearest-exact-1d": (
        lambda x: F.interpolate(x, size=8, mode="nearest-exact"),
        [randn(2, 2, 5)],
    ),
    "nearest-exact-2d-scale": (
        lambda x: F.interpolate(x, scale_factor=(0.6, 2.3), mode="nearest-exact"),
        [randn(1, 2, 5, 7)],
    ),
    "nearest-exact-3d": (
        lambda x: F.interpolate(x, size=(2, 7, 3), mode="nearest-exact"),
        [randn(1, 1, 4, 5, 6)],
    ),
    "area-1d": (lambda x: F.interpolate(x, scale_factor=1.7, mode="area"), [randn(2, 2, 5)]),
    "area-2d": (lambda x: F.interpolate(x, size=(3, 11), mode="area"), [randn(1, 2, 5, 7)]),
    # embedding, losses, normalization
    "embedding": (lambda i, w: F.embedding(i, w), [ints(5, 2, 3), randn(5, 3)]),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), [randn(4, 5), ints(5, 4)]),
    "cross_entropy-nd": (lambda x, t: F.cross_entropy(x, t), [randn(2, 3, 2, 2), ints(3, 2, 2, 2)]),
    "cross_entropy-prob": (
        lambda x, t: F.cross_entropy(x, t),
        [randn(3, 4, 2), probabilities(3, 4, 2)],
    ),
    "cross_entropy-ignore": (
        lambda x, t: F.cross_entropy(x, t, ignore_index=2),
        [randn(5, 3), np.array([0, 2, 1, 2, 1])],
    ),
    "cross_entropy-sum": (
        lambda x, t: F.cross_entropy(x, t, reduction="sum"),
        [randn(3, 4), ints(4, 3)],
    ),
    "cross_entropy-none": (
        lambda x, t: F.cross_entropy(x, t, reduction="none"),
        [randn(3, 4), ints(4, 3)],
    ),
    "cross_entropy-unbatched": (lambda x, t: F.cross_entropy(x, t), [randn(4), np.array(2)]),
    "cross_entropy-large-logits": (
        lambda x, t: F.cross_entropy(x * 1000.0, t),
        [randn(3, 4), ints(4, 3)],
    ),
    "cross_entropy-weight-smoothing-ignore": (
        lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=1, label_smoothing=0.3),
        [randn(2, 4, 3), np.array([[0, 1, 3], [2, 3, 1]]), RNG.random(4) + 0.5],
    ),
    "cross_entropy-prob-weight-smoothing": (
        lambda x, t, w: F.cross_entropy(x, t, w, reduction="sum", label_smoothing=0.1),
        [randn(3, 4), probabilities(3, 4), RNG.random(4) + 0.5],
    ),
    "mse_loss": (lambda x, t: F.mse_loss(x, t), [randn(3, 4), randn(3, 4)]),
    "mse_loss-weight": (
        lambda x, t, w: F.mse_loss(x, t, weight=w),
        [randn(3, 4), randn(3, 4), RNG.random((3, 4)) + 0.5],
    ),
    "mse_loss-sum": (lambda x, t: F.mse_loss(x, t, reduction="sum"), [randn(2, 3), randn(2, 3)]),
    "layer_norm": (lambda x: F.layer_norm(x, 4), [randn(3, 4)]),
    "layer_norm-affine-2d": (
        lambda x, w, b: F.layer_norm(x, (3, 4), w, b),
        [randn(2, 3, 4), randn(3, 4), randn(3, 4)],
    ),
    "layer_norm-eps": (lambda x, w: F.layer_norm(x, (5,), w, eps=0.1), [randn(2, 5), randn(5)]),
}


@pytest.mark.parametrize("case", list(FD_CASES))
def test_gradients_match_finite_differences(case):
    fn, arrays = FD_CASES[case]
    check_finite_differences(fn, arrays)


def test_embedding_padding_row_gets_no_gradient_but_its_value():
    weight = rg.tensor(randn(5, 2)).require_grad()
    indices = rg.tensor(np.array([[1, 0, 1], [2, 1, 4]]))
    out = F.embedding(indices, weight, padding_idx=1)
    np.testing.assert_array_equal(out.numpy()[0, 0], weight.numpy()[1])
    grad = weight.grad(out.sum().backward()).numpy()
    np.testing.assert_array_equal(grad, [[1, 1], [0, 0], [1, 1], [0, 0], [1, 1]])


def test_dropout_gradient_matches_finite_differences_with_a_fixed_seed():
    def seeded_dropout(x):
        rg.seed(7)  # the same mask on every evaluation
        return F.dropout(x, 0.4)

    check_finite_differences(seeded_dropout, [randn(4, 5)])


# -- checkpointing, higher order, op table --------------------------------------------------------
COMPOSITES = {
    "conv-relu-pool": lambda x, w: F.max_pool2d(F.conv2d(x.tanh(), w, padding=1).relu(), 2),
    "conv_transpose": lambda x, w: F.conv_transpose2d(
        (x * 2.0).sin(), w.swap_dims(0, 1), None, 2, 1, 1
    ).exp(),
    "avg-adaptive": lambda x, w: (
        F.adaptive_avg_pool2d(F.avg_pool2d(x.square(), 3, 1, 1), 3) * w.sum()
    ),
    "interpolate": lambda x, w: (
        F.interpolate(x.sigmoid(), scale_factor=1.5, mode="bicubic")
        + F.interpolate(x, size=(4, 4), mode="bilinear").mean()
    ),
    "layer-norm-ce": lambda x, w: F.cross_entropy(
        F.layer_norm(x, (6, 6)).reshape((2, -1))[:, :5] * 3.0, rg.tensor(np.array([1, 4]))
    ),
    "dropout": lambda x, w: F.dropout(F.conv2d(x, w, padding=1), 0.3).square(),
}


@pytest.mark.parametrize("name", list(COMPOSITES))
def test_gradients_are_bit_identical_under_both_strategies(name):
    rng = np.random.default_rng(10)
    arrays = [
        rng.standard_normal((2, 3, 6, 6)).astype(np.float32),
        rng.standard_normal((3, 3, 3, 3)).astype(np.float32),
    ]
    results = {}
    for strategy in ("none", "balanced"):
        rg.seed(3)  # dropout draws the same mask under both
        results[strategy] = analytic_gradients(
            lambda x, w: COMPOSITES[name](x, w).sum(), arrays, None, strategy
        )
    for ours, theirs in zip(results["none"][1], results["balanced"][1]):
        if ours is not None or theirs is not None:
            assert np.array_equal(ours, theirs)


def _second_order_check(first_order, arrays):
    """Gradient of ``s = sum(v * grad(f))`` (create_graph) against finite differences of
    ``s`` computed with first-order backwards."""
    rng = np.random.default_rng(11)
    directions = [rng.standard_normal(a.shape) for a in arrays]

    def s_value(*arrays_now):
        with rg.use_backend(autodiff("none")):
            tensors = [rg.tensor(a).require_grad() for a in arrays_now]
            grads = first_order(*tensors).backward()
            return sum(
                float(np.sum(v * t.grad(grads).numpy())) for v, t in zip(directions, tensors)
            )

    for strategy in ("none", "balanced"):
        with rg.use_backend(autodiff(strategy)):
            tensors = [rg.tensor(a).require_grad() for a in arrays]
            grads = first_order(*tensors).backward(create_graph=True)
            s = None
            for v, t in zip(directions, tensors):
                term = (t.grad(grads) * rg.tensor(v)).sum()
                s = term if s is None else s + term
            second = s.backward()
            for i, t in enumerate(tensors):
                expected = _numeric(s_value, arrays, i)
                np.testing.assert_allclose(t.grad(second).numpy(), expected, rtol=1e-5, atol=1e-6)


def _numeric(scalar_fn, arrays, index, eps=1e-6):
    arrays = [np.array(a, copy=True) for a in arrays]
    grad = np.zeros_like(arrays[index])
    for position in np.ndindex(grad.shape):
        original = arrays[index][position]
        arrays[index][position] = original + eps
        plus = scalar_fn(*arrays)
        arrays[index][position] = original - eps
        minus = scalar_fn(*arrays)
        arrays[index][position] = original
        grad[position] = (plus - minus) / (2 * eps)
    return grad


def test_second_derivative_through_conv2d_matches_finite_differences():
    seed = np.random.default_rng(12).standard_normal((2, 3, 3, 4))
    _second_order_check(
        lambda x, w: (
            F.conv2d(x, w, stride=(2, 1), padding=1, dilation=(1, 2)).tanh() * rg.tensor(seed)
        ).sum(),
        [randn(2, 2, 5, 4) * 0.5, randn(3, 2, 2, 2) * 0.5],
    )


def test_second_derivative_through_conv_transpose_and_pooling():
    _second_order_check(
        lambda x, w: (
            F.max_pool1d(F.conv_transpose1d(x, w, stride=2, output_padding=1).sin(), 2)
            .square()
            .sum()
            + F.avg_pool1d(x.tanh(), 2, padding=1).exp().sum()
        ),
        [randn(1, 2, 4) * 0.5, randn(2, 2, 3) * 0.5],
    )
    _second_order_check(
        lambda x: (
            F.interpolate(x.sin(), size=(3, 5), mode="bicubic").square().sum()
            + F.adaptive_avg_pool2d(x.exp(), 2).square().sum()
        ),
        [randn(1, 1, 3, 3)],
    )


def test_convolution_pooling_and_interpolation_ops_are_compute_bound():
    for name in (
        "conv",
        "conv_transpose",
        "conv_weight_grad",
        "avg_pool",
        "avg_pool_backward",
        "max_pool",
        "max_pool_backward",
        "adaptive_avg_pool",
        "adaptive_avg_pool_backward",
        "interpolate",
        "interpolate_backward",
        "select",
    ):
        assert op_kind(name) == "compute-bound", name


def test_functions_run_on_the_plain_numpy_backend():
    with rg.use_backend(inner_backend()):
        x = rg.random((2, 3, 8, 8))
        out = F.max_pool2d(F.conv2d(x, rg.random((4, 3, 3, 3)), rg.zeros((4,))), 2)
        assert out.shape == (2, 4, 3, 3)
        assert not out.backend.is_autodiff


# -- dropout ---------------------------------------------------------------------------------------
def test_dropout_is_reproducible_with_rg_seed_and_scales_kept_values():
    x = rg.tensor(np.arange(1.0, 2001.0))
    rg.seed(42)
    first = F.dropout(x, 0.25).numpy()
    rg.seed(42)
    second = F.dropout(x, 0.25).numpy()
    np.testing.assert_array_equal(first, second)
    kept = first != 0
    np.testing.assert_allclose(first[kept], x.numpy()[kept] / 0.75, rtol=1e-6)
    assert 0.2 < 1 - kept.mean() < 0.3  # about p of 2000 values dropped


def test_dropout_gradient_is_the_scaled_mask():
    x = rg.tensor(np.linspace(1.0, 2.0, 1000)).require_grad()
    out = F.dropout(x, 0.5)
    grad = x.grad(out.sum().backward()).numpy()
    np.testing.assert_array_equal(grad, np.where(out.numpy() != 0, 2.0, 0.0))


def test_dropout_outside_training_and_extreme_probabilities():
    x = rg.tensor(randn(3, 4))
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), np.zeros((3, 4)))


# -- a few exact values, computed by hand --------------------------------------------------------
def test_hand_computed_values():
    x = rg.tensor([[[1.0, 2.0, 3.0, 4.0, 5.0]]])
    np.testing.assert_allclose(
        F.conv1d(x, rg.tensor([[[1.0, 0.0, -1.0]]])).numpy(), [[[-2.0, -2.0, -2.0]]]
    )
    np.testing.assert_allclose(
        F.conv_transpose1d(rg.tensor([[[1.0, 2.0]]]), rg.tensor([[[1.0, 10.0]]]), stride=2).numpy(),
        [[[1.0, 10.0, 2.0, 20.0]]],
    )
    # windows [pad, 1, 2], [2, 3, 4], [4, 5, pad]: the pad counts, or not
    np.testing.assert_allclose(F.avg_pool1d(x, 3, 2, 1).numpy(), [[[1.0, 3.0, 3.0]]])
    np.testing.assert_allclose(
        F.avg_pool1d(x, 3, 2, 1, count_include_pad=False).numpy(), [[[1.5, 3.0, 4.5]]]
    )
    np.testing.assert_allclose(F.adaptive_avg_pool1d(x, 2).numpy(), [[[2.0, 4.0]]])
    np.testing.assert_allclose(
        F.interpolate(x, size=3, mode="linear", align_corners=True).numpy(), [[[1.0, 3.0, 5.0]]]
    )
    np.testing.assert_allclose(F.interpolate(x, size=2).numpy(), [[[1.0, 3.0]]])
    ce = F.cross_entropy(rg.tensor([[0.0, 0.0]]), rg.tensor([1], dtype="int64"))
    np.testing.assert_allclose(ce.item(), np.log(2.0), rtol=1e-6)


def test_numeric_gradient_helper_detects_a_wrong_gradient():
    """The finite-difference check can fail: a function whose rule is off is caught."""
    wrong = lambda x: F.avg_pool1d(x, 2).detach() + F.avg_pool1d(x, 2)  # noqa: E731
    x = randn(1, 1, 4)
    _, grads = analytic_gradients(wrong, [x], np.ones((1, 1, 2)), "none")
    numeric = numeric_gradient(wrong, [x], np.ones((1, 1, 2)), 0)
    assert not np.allclose(grads[0], numeric)


@pytest.mark.parametrize("strategy", ["none", "balanced"])
def test_an_empty_batch_goes_forward_and_backward(strategy):
    with rg.use_backend(autodiff(strategy)):
        x = rg.zeros((0, 2, 6, 6)).require_grad()
        weight = rg.ones((3, 2, 3, 3)).require_grad()
        calls = {
            "conv2d": lambda: F.conv2d(x, weight, rg.ones((3,)), padding=1),
            "conv_transpose2d": lambda: F.conv_transpose2d(x, weight.swap_dims(0, 1), stride=2),
            "max_pool2d": lambda: F.max_pool2d(x, 2),
            "avg_pool2d": lambda: F.avg_pool2d(x, 3, 1, 1),
            "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(x, 4),
            "interpolate": lambda: F.interpolate(x, scale_factor=2, mode="bicubic"),
        }
        for name, call in calls.items():
            out = call()
            assert out.shape[0] == 0, name
            grads = out.sum().backward()
            assert x.grad(grads).shape == x.shape, name
            if name.startswith("conv"):
                np.testing.assert_array_equal(weight.grad(grads).numpy(), 0.0)
