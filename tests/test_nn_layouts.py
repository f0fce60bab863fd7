"""Memory layouts of the NumPy nn kernels.

Convolutions write their outputs channels-last (``[N, *spatial, C]`` in memory, shape still
``[N, C, *spatial]``) and read channels-last inputs through cheaper columns; pooling keeps the
layout of its input. Whatever the layout of the arrays handed in (contiguous NCHW,
channels-last, or an arbitrary strided view), every kernel must give the same values as on a
contiguous copy, and gradients through a chain of convolutions must match finite
differences. Expected values come from the contiguous-NCHW path of the same kernel (its
correctness is checked against finite differences and PyTorch in the other nn test files) or
from finite differences.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from nn_testing import check_finite_differences, compare_with_torch
from retrograd.backend.numpy_nn import channels_last

RNG = np.random.default_rng(77)
KERNELS = rg.NumpyBackend()


def as_channels_last(x: np.ndarray) -> np.ndarray:
    out = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)
    assert x.shape[1] == 1 or channels_last(out)
    return out


def as_strided_view(x: np.ndarray) -> np.ndarray:
    """The same values in a view that is neither layout (every other element of a buffer)."""
    wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype=x.dtype)
    wide[..., ::2] = x
    return wide[..., ::2]


LAYOUTS = {"channels_last": as_channels_last, "strided": as_strided_view}

# (spatial dims, input [N, C, *spatial], out channels, kernel, stride, padding, dilation, groups)
CONVS = [
    (1, (2, 4, 9), 3, (3,), (1,), (1,), (1,), 1),
    (2, (2, 3, 7, 6), 4, (3, 2), (1, 2), (1, 0), (1, 1), 1),
    (2, (3, 4, 8, 8), 6, (3, 3), (1, 1), (0, 0), (2, 1), 1),
    (2, (2, 4, 7, 7), 4, (3, 3), (2, 1), (1, 1), (1, 1), 2),
    (3, (1, 2, 5, 4, 5), 3, (2, 3, 2), (1, 1, 2), (1, 0, 1), (1, 1, 1), 1),
]


def conv_case(case):
    _, shape, c_out, kernel, stride, padding, dilation, groups = case
    x = RNG.standard_normal(shape)
    weight = RNG.standard_normal((c_out, shape[1] // groups, *kernel))
    bias = RNG.standard_normal(c_out)
    return x, weight, bias, (stride, padding, dilation, groups)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}d-g{c[-1]}-{c[1]}")
def test_convolution_kernels_agree_across_input_layouts(case, layout):
    x, weight, bias, (stride, padding, dilation, groups) = conv_case(case)
    out = KERNELS.conv(x, weight, bias, stride, padding, dilation, groups)
    g = RNG.standard_normal(out.shape)
    weight_grad = KERNELS.conv_weight_grad(
        x, g, weight.shape[2:], stride, padding, dilation, groups
    )
    output_padding = tuple(0 for _ in stride)
    transposed_bias = RNG.standard_normal(x.shape[1])
    transposed = KERNELS.conv_transpose(
        g, weight, transposed_bias, stride, padding, output_padding, dilation, groups
    )

    relaid = LAYOUTS[layout]
    np.testing.assert_allclose(
        KERNELS.conv(relaid(x), weight, bias, stride, padding, dilation, groups),
        out,
        rtol=1e-12,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        KERNELS.conv_weight_grad(
            relaid(x), relaid(g), weight.shape[2:], stride, padding, dilation, groups
        ),
        weight_grad,
        rtol=1e-12,
        atol=1e-12,
    )
    np.testing.assert_allclose(
        KERNELS.conv_transpose(
            relaid(g), weight, transposed_bias, stride, padding, output_padding, dilation, groups
        ),
        transposed,
        rtol=1e-12,
        atol=1e-12,
    )


def test_convolutions_write_channels_last_and_pooling_keeps_the_layout():
    x = RNG.standard_normal((2, 3, 8, 8))
    out = KERNELS.conv(x, RNG.standard_normal((5, 3, 3, 3)), np.zeros(5), (1, 1), (0, 0), (1, 1), 1)
    assert out.shape == (2, 5, 6, 6) and channels_last(out)
    window = ((2, 2), (2, 2), (0, 0), (1, 1), False)
    pooled, indices = KERNELS.max_pool(out, *window)
    assert channels_last(pooled) and channels_last(indices)
    back = KERNELS.max_pool_backward(np.ones(pooled.shape), indices, out.shape[2:], *window)
    assert channels_last(back)
    grouped = KERNELS.conv(
        out, RNG.standard_normal((5, 1, 3, 3)), np.zeros(5), (1, 1), (0, 0), (1, 1), 5
    )
    assert grouped.flags.c_contiguous  # grouped convolutions stay NCHW


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pooling_and_interpolation_agree_across_input_layouts(layout):
    x = RNG.permutation(2 * 4 * 7 * 6).reshape(2, 4, 7, 6) * 0.1  # no ties
    relaid = LAYOUTS[layout]
    for args in [((3, 2), (2, 2), (1, 0), (1, 1), True), ((2, 2), (1, 2), (0, 1), (2, 1), False)]:
        values, indices = KERNELS.max_pool(x, *args)
        got_values, got_indices = KERNELS.max_pool(relaid(x), *args)
        np.testing.assert_array_equal(got_values, values)
        np.testing.assert_array_equal(got_indices, indices)
        g = RNG.standard_normal(values.shape)
        np.testing.assert_array_equal(
            KERNELS.max_pool_backward(relaid(g), relaid(indices), x.shape[2:], *args),
            KERNELS.max_pool_backward(g, indices, x.shape[2:], *args),
        )
    avg = ((3, 2), (2, 1), (1, 1), True, False)
    np.testing.assert_allclose(
        KERNELS.avg_pool(relaid(x), *avg), KERNELS.avg_pool(x, *avg), rtol=1e-14
    )
    np.testing.assert_allclose(
        KERNELS.adaptive_avg_pool(relaid(x), (3, 4)),
        KERNELS.adaptive_avg_pool(x, (3, 4)),
        rtol=1e-14,
    )
    np.testing.assert_allclose(
        KERNELS.interpolate(relaid(x), (9, 5), "bicubic", False, (None, None)),
        KERNELS.interpolate(x, (9, 5), "bicubic", False, (None, None)),
        rtol=1e-14,
    )


def chain_arrays():
    return [
        RNG.standard_normal((2, 1, 7, 7)),
        RNG.standard_normal((4, 1, 3, 3)) * 0.5,
        RNG.standard_normal(4) * 0.1,
        RNG.standard_normal((6, 4, 2, 2)) * 0.5,
        RNG.standard_normal((6, 3, 2, 2)) * 0.5,
        RNG.standard_normal((6, 2, 3, 3)) * 0.5,
    ]


def chain(functional):
    """conv -> relu -> conv (channels-last in and out) -> max pool -> grouped conv ->
    transposed conv, on ``functional`` (retrograd's or PyTorch's)."""

    def program(x, w1, b1, w2, w3, w4):
        h = functional.relu(functional.conv2d(x, w1, b1, padding=1))
        h = functional.conv2d(h, w2)
        h = functional.max_pool2d(h, 2)
        h = functional.conv2d(h, w3, padding=1, groups=2)
        return functional.conv_transpose2d(h, w4, stride=2)

    return program


def test_gradients_through_a_chain_of_channels_last_convolutions():
    """Against central finite differences, bit-identical under both strategies."""
    check_finite_differences(chain(F), chain_arrays())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_chain_of_channels_last_convolutions_matches_torch(dtype):
    torch = pytest.importorskip("torch")
    compare_with_torch(chain(F), chain(torch.nn.functional), chain_arrays(), dtype)
