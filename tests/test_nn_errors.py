"""Bad arguments to retrograd.nn.functional: the right error class, a message naming the
function and the shapes at fault, and every tensor and graph left usable."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)


def zeros(*shape, dtype="float32"):
    return rg.zeros(shape, dtype)


def raises(error, call, *fragments):
    """``call()`` raises ``error`` whose message holds every fragment."""
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return caught.value


SHAPE_ERRORS = {
    "conv2d channels": (
        lambda: F.conv2d(zeros(2, 3, 8, 8), zeros(5, 4, 3, 3)),
        ["conv2d", "3 channels", "expects 4", "groups=1", "[2, 3, 8, 8]", "[5, 4, 3, 3]"],
    ),
    "conv2d groups": (
        lambda: F.conv2d(zeros(1, 3, 8, 8), zeros(4, 1, 3, 3), groups=2),
        ["conv2d", "groups=2", "[1, 3, 8, 8]", "[4, 1, 3, 3]"],
    ),
    "conv1d out channels and groups": (
        lambda: F.conv1d(zeros(1, 4, 8), zeros(3, 2, 3), groups=2),
        ["conv1d", "groups=2", "(3)"],
    ),
    "conv2d kernel larger than padded input": (
        lambda: F.conv2d(zeros(1, 1, 4, 4), zeros(1, 1, 7, 3), padding=1),
        ["conv2d", "larger than the padded input", "[6, 6]", "[1, 1, 4, 4]"],
    ),
    "conv2d dilated kernel": (
        lambda: F.conv2d(zeros(1, 1, 5, 5), zeros(1, 1, 3, 3), dilation=3),
        ["conv2d", "kernel [3, 3]", "dilation [3, 3]"],
    ),
    "conv2d input rank": (
        lambda: F.conv2d(zeros(3, 8), zeros(4, 3, 3, 3)),
        ["conv2d", "3-d (unbatched) or 4-d (batched)", "[3, 8]"],
    ),
    "conv3d weight rank": (
        lambda: F.conv3d(zeros(1, 2, 4, 4, 4), zeros(2, 2, 3, 3)),
        ["conv3d", "5-d", "[2, 2, 3, 3]"],
    ),
    "conv2d bias": (
        lambda: F.conv2d(zeros(1, 2, 4, 4), zeros(3, 2, 3, 3), zeros(2)),
        ["conv2d", "bias", "[3]", "[2]"],
    ),
    "conv2d stride": (
        lambda: F.conv2d(zeros(1, 1, 4, 4), zeros(1, 1, 2, 2), stride=0),
        ["conv2d", "stride", "positive"],
    ),
    "conv2d padding tuple": (
        lambda: F.conv2d(zeros(1, 1, 4, 4), zeros(1, 1, 2, 2), padding=(1, 1, 1)),
        ["conv2d", "padding"],
    ),
    "conv2d same with stride": (
        lambda: F.conv2d(zeros(1, 1, 4, 4), zeros(1, 1, 2, 2), stride=2, padding="same"),
        ["conv2d", "'same'", "stride 1"],
    ),
    "conv_transpose2d channels": (
        lambda: F.conv_transpose2d(zeros(1, 3, 4, 4), zeros(2, 5, 3, 3)),
        ["conv_transpose2d", "3 channels", "expects 2", "[1, 3, 4, 4]", "[2, 5, 3, 3]"],
    ),
    "conv_transpose1d groups": (
        lambda: F.conv_transpose1d(zeros(1, 3, 4), zeros(3, 1, 3), groups=2),
        ["conv_transpose1d", "groups=2", "(3)"],
    ),
    "conv_transpose1d output size": (
        lambda: F.conv_transpose1d(zeros(1, 1, 2), zeros(1, 1, 1), padding=3),
        ["conv_transpose1d", "output size", "[1, 1, 2]"],
    ),
    "conv_transpose1d bias": (
        lambda: F.conv_transpose1d(zeros(1, 2, 4), zeros(2, 3, 2), zeros(2)),
        ["conv_transpose1d", "bias", "[3]"],
    ),
    "max_pool2d padding": (
        lambda: F.max_pool2d(zeros(1, 1, 6, 6), 2, padding=2),
        ["max_pool2d", "padding [2, 2]", "half the kernel", "[1, 1, 6, 6]"],
    ),
    "avg_pool1d kernel": (
        lambda: F.avg_pool1d(zeros(1, 1, 4), 6),
        ["avg_pool1d", "larger than the padded input", "[1, 1, 4]"],
    ),
    "max_pool1d rank": (
        lambda: F.max_pool1d(zeros(1, 1, 4, 4), 2),
        ["max_pool1d", "2-d (unbatched) or 3-d (batched)", "[1, 1, 4, 4]"],
    ),
    "adaptive_avg_pool2d size": (
        # (2, 0) is an empty output, as in torch; a negative size is refused
        lambda: F.adaptive_avg_pool2d(zeros(1, 1, 4, 4), (2, -1)),
        ["adaptive_avg_pool2d", "output_size"],
    ),
    "interpolate rank": (
        lambda: F.interpolate(zeros(1, 1, 4), size=8, mode="bilinear"),
        ["interpolate", "'bilinear'", "4-d", "[1, 1, 4]"],
    ),
    "interpolate both": (
        lambda: F.interpolate(zeros(1, 1, 4), size=8, scale_factor=2.0),
        ["interpolate", "exactly one"],
    ),
    "interpolate empty": (
        lambda: F.interpolate(zeros(1, 1, 4), scale_factor=0.1),
        ["interpolate", "[1, 1, 4]", "[0]"],
    ),
    "linear features": (
        lambda: F.linear(zeros(2, 3), zeros(4, 5)),
        ["linear", "3 features", "expects 5", "[2, 3]", "[4, 5]"],
    ),
    "linear bias": (
        lambda: F.linear(zeros(2, 3), zeros(4, 3), zeros(3)),
        ["linear", "bias", "[4]", "[3]"],
    ),
    "cross_entropy target shape": (
        lambda: F.cross_entropy(zeros(4, 5), rg.zeros((3,), "int64")),
        ["cross_entropy", "[4]", "input [4, 5], target [3]"],
    ),
    "cross_entropy probability shape": (
        lambda: F.cross_entropy(zeros(4, 5), zeros(4, 4)),
        ["cross_entropy", "probability", "input [4, 5], target [4, 4]"],
    ),
    "mse_loss shapes": (
        lambda: F.mse_loss(zeros(2, 3), zeros(3, 2)),
        ["mse_loss", "input [2, 3], target [3, 2]"],
    ),
    "mse_loss weight": (
        lambda: F.mse_loss(zeros(2, 3), zeros(2, 3), weight=zeros(3)),
        ["mse_loss", "weight", "input [2, 3]", "weight [3]"],
    ),
    "cross_entropy weight": (
        lambda: F.cross_entropy(zeros(4, 5), rg.zeros((4,), "int64"), zeros(4)),
        ["cross_entropy", "weight", "[5]", "[4]", "input [4, 5]"],
    ),
    "layer_norm shape": (
        lambda: F.layer_norm(zeros(2, 3, 4), (3,)),
        ["layer_norm", "[3]", "[2, 3, 4]"],
    ),
    "layer_norm weight": (
        lambda: F.layer_norm(zeros(2, 4), 4, zeros(3)),
        ["layer_norm", "weight", "[4]", "[3]"],
    ),
    "embedding weight rank": (
        lambda: F.embedding(rg.zeros((2,), "int64"), zeros(3)),
        ["embedding", "2-d", "[3]"],
    ),
}


@pytest.mark.parametrize("case", list(SHAPE_ERRORS))
def test_bad_shapes_raise_shape_error_naming_function_and_shapes(case):
    call, fragments = SHAPE_ERRORS[case]
    error = raises(rg.ShapeError, call, *fragments)
    assert isinstance(error, ValueError)


def test_out_of_range_targets_and_indices_raise_index_errors():
    error = raises(
        rg.IndexOutOfRangeError,
        lambda: F.cross_entropy(zeros(4, 5), rg.tensor(np.array([0, 5, 1, 2]))),
        "cross_entropy",
        "target 5",
        "5 classes",
        "[4, 5]",
    )
    assert isinstance(error, IndexError) and isinstance(error, rg.RetrogradError)
    raises(
        rg.IndexOutOfRangeError,
        lambda: F.cross_entropy(zeros(2, 3), rg.tensor(np.array([-1, 0]))),
        "target -1",
    )
    raises(
        rg.IndexOutOfRangeError,
        lambda: F.embedding(rg.tensor(np.array([[0, 7]])), zeros(4, 2)),
        "embedding",
        "index 7",
        "4 embeddings",
        "[1, 2]",
        "[4, 2]",
    )
    raises(
        rg.IndexOutOfRangeError,
        lambda: F.embedding(rg.tensor(np.array([0])), zeros(4, 2), padding_idx=4),
        "embedding",
        "padding_idx 4",
    )


def test_wrong_dtypes_raise_dtype_error():
    raises(
        rg.DTypeError,
        # (integers convolve, as on torch's CPU: tests/test_leftovers_8.py; bools do not)
        lambda: F.conv1d(zeros(1, 1, 4, dtype="bool"), zeros(1, 1, 2, dtype="bool")),
        "conv1d",
        "float",
    )
    raises(rg.DTypeError, lambda: F.max_pool1d(zeros(1, 1, 4, dtype="int64"), 2), "max_pool1d")
    raises(rg.DTypeError, lambda: F.embedding(zeros(2), zeros(3, 2)), "embedding", "int64")
    raises(
        rg.DTypeError,
        lambda: F.cross_entropy(zeros(2, 3), zeros(2, dtype="bool")),
        "cross_entropy",
        "bool",
    )
    raises(rg.DTypeError, lambda: F.conv1d([[[1.0]]], zeros(1, 1, 1)), "conv1d", "tensor")


def test_bad_options_raise_value_error():
    raises(ValueError, lambda: F.interpolate(zeros(1, 1, 4), size=8, mode="lanczos"), "'lanczos'")
    raises(
        ValueError,
        lambda: F.interpolate(zeros(1, 1, 4), size=8, align_corners=True),
        "align_corners",
    )
    raises(ValueError, lambda: F.dropout(zeros(3), 1.5), "dropout", "1.5")
    raises(ValueError, lambda: F.mse_loss(zeros(3), zeros(3), reduction="avg"), "'avg'")
    raises(
        ValueError,
        lambda: F.cross_entropy(zeros(2, 3), rg.zeros((2,), "int64"), label_smoothing=1.5),
        "cross_entropy",
        "label_smoothing",
        "1.5",
    )
    raises(
        ValueError,
        lambda: F.avg_pool2d(zeros(1, 1, 4, 4), 2, divisor_override=0),
        "avg_pool2d",
        "divisor_override",
    )
    raises(
        ValueError,
        lambda: F.cross_entropy(zeros(2, 3), zeros(2, 3), ignore_index=0),
        "cross_entropy",
        "ignore_index",
        "probabilities",
    )


def test_a_failed_call_leaves_tensors_and_graph_usable():
    x = rg.tensor(np.arange(32.0).reshape(1, 2, 4, 4)).require_grad()
    weight = rg.tensor(np.ones((3, 2, 3, 3))).require_grad()
    hidden = (x * 0.5).tanh()  # a graph the failing calls touch
    with pytest.raises(rg.ShapeError):
        F.conv2d(hidden, rg.ones((3, 4, 3, 3), "float64"))
    with pytest.raises(rg.ShapeError):
        F.max_pool2d(hidden, 2, padding=3)
    with pytest.raises(rg.IndexOutOfRangeError):
        F.cross_entropy(hidden.reshape((2, 16)), rg.tensor(np.array([0, 16])))
    out = F.conv2d(hidden, weight, padding=1)
    grads = out.sum().backward()

    # The same computation on fresh tensors, never touched by a failure.
    x2 = rg.tensor(np.arange(32.0).reshape(1, 2, 4, 4)).require_grad()
    weight2 = rg.tensor(np.ones((3, 2, 3, 3))).require_grad()
    grads2 = F.conv2d((x2 * 0.5).tanh(), weight2, padding=1).sum().backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), x2.grad(grads2).numpy())
    np.testing.assert_array_equal(weight.grad(grads).numpy(), weight2.grad(grads2).numpy())
