"""Burn's tensor tests that the earlier batches left (tracel-ai/burn at
2c06be351006851d42fdb6df16b976f4a82d9747): the IEEE edge cases of
``crates/burn-backend-tests/tests/tensor/float/ops/{aggregation, fmod, sign, trunc, remainder,
maxmin, powf, reshape, chunk, split}.rs``, ``tensor/int/ops/abs.rs``'s signed minimum and
burn-tensor's ``src/tensor/api/extension.rs`` (a tensor's primitive taken out and put back, for
float, int and bool tensors), under every checkpointing strategy on the chosen inner backend.
Expected values are Burn's as its test source writes them.

Burn's forms map to ours: ``TestTensorInt::arange(a..b).float()`` is ``rg.arange(a, b).float()``;
``into_primitive``/``from_primitive`` are ``t.inner()``/``rg.Tensor.from_inner(p, backend=B)``
(API.md section 3); ``outer(a, b)`` is ``a[:, None] * b[None, :]``.

Deliberate difference (torch's semantics, API.md section 2 being silent): ``split`` of an empty
dimension gives one empty piece, as torch's does, where Burn gives none.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)


def values(t):
    return np.asarray(t.numpy())


# ---- aggregation.rs ---------------------------------------------------------------------------


def test_mean_of_a_long_float_range_does_not_overflow():
    np.testing.assert_allclose(rg.arange(0, 1024).float().mean().item(), 511.5, rtol=1e-3)


# ---- fmod.rs, remainder.rs --------------------------------------------------------------------


def test_fmod_of_negative_zero_is_zero():
    out = values(rg.tensor([-0.0]).fmod(rg.tensor([2.0])))
    assert out[0] == 0.0


def test_fmod_propagates_nan_arguments():
    out = values(
        rg.tensor([math.nan, 5.3, math.nan, 0.0]).fmod(rg.tensor([2.0, math.nan, math.nan, 3.0]))
    )
    assert np.isnan(out[:3]).all()
    assert out[3] == 0.0


def test_fmod_edge_case_values():
    dividend = rg.tensor([0.0, -0.0, 1e-10, -1e-10, 10.0, -10.0])
    out = dividend.fmod(rg.tensor([1.0, 1.0, 1.0, 1.0, 3.0, 3.0]))
    np.testing.assert_allclose(
        values(out), [0.0, -0.0, 1e-10, -1e-10, 1.0, -1.0], rtol=1e-3, atol=1e-3
    )
    # The sign follows the dividend (C's fmod), zeros included.
    assert np.signbit(values(out)[1])


def test_remainder_scalar_of_zeros_is_zero():
    np.testing.assert_allclose(values(rg.tensor([0.0, 0.0, 0.0]).remainder_scalar(3.5)), 0.0)


# ---- sign.rs, trunc.rs ------------------------------------------------------------------------


def test_sign_of_negative_zero_is_positive_zero():
    out = values(rg.tensor([[-0.0, 0.0]]).sign())
    assert out.tolist() == [[0.0, 0.0]]
    assert not np.signbit(out).any(), "sign(-0.0) must be +0.0, not -0.0"


def test_trunc_keeps_ieee_special_values():
    out = values(rg.tensor([0.0, -0.0, math.inf, -math.inf, math.nan]).trunc())
    assert out[0] == 0.0 and not np.signbit(out[0])
    assert out[1] == 0.0 and np.signbit(out[1])
    assert np.isposinf(out[2]) and np.isneginf(out[3])
    assert np.isnan(out[4])


# ---- maxmin.rs --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [[math.nan, 1.0, 2.0], [1.0, math.nan, 2.0], [1.0, 2.0, math.nan]])
def test_whole_max_and_min_propagate_nan_wherever_it_is(data):
    t = rg.tensor(data)
    assert math.isnan(t.max().item())
    assert math.isnan(t.min().item())


# ---- powf.rs ----------------------------------------------------------------------------------


def test_powf_of_a_one_element_base_broadcasts_over_the_exponents():
    # Rotary-embedding frequencies: base ** (-channels / head_dim), then cos/sin of the outer
    # product with the positions (Burn only checks that this runs; here against NumPy too).
    head_dim, seq_len = 64, 1024
    channels = rg.tensor(np.arange(0, head_dim, 2)).float()
    inv_freq = rg.tensor([10000.0]).powf(-channels / float(head_dim))
    positions = rg.arange(0, seq_len).float()
    freqs = positions[:, None] * inv_freq[None, :]
    expected_inv = 10000.0 ** (-np.arange(0, head_dim, 2) / head_dim)
    np.testing.assert_allclose(values(inv_freq), expected_inv, rtol=1e-5)
    expected = np.arange(seq_len)[:, None] * expected_inv[None, :]
    # float32 positions up to 1023 radians: compare with an absolute tolerance of float32 ulps.
    np.testing.assert_allclose(values(freqs.cos()), np.cos(expected), atol=2e-4)
    np.testing.assert_allclose(values(freqs.sin()), np.sin(expected), atol=2e-4)


# ---- reshape.rs -------------------------------------------------------------------------------


def test_reshape_of_a_slice_leaves_the_source_unchanged():
    zeros = rg.zeros([2])
    zeros.slice([(1, 2)]).reshape([1]).exp()
    assert values(zeros).tolist() == [0.0, 0.0]


# ---- chunk.rs, split.rs -----------------------------------------------------------------------


def test_chunk_not_evenly_divisible_leaves_a_short_last_chunk():
    chunks = rg.arange(0, 100).float().chunk(8, 0)
    assert [c.shape[0] for c in chunks] == [13, 13, 13, 13, 13, 13, 13, 9]


def test_chunk_into_more_pieces_than_elements():
    chunks = rg.arange(0, 6).float().chunk(7, 0)
    assert len(chunks) == 6
    for index, chunk in enumerate(chunks):
        assert values(chunk).tolist() == [float(index)]


@pytest.mark.parametrize("size", [0, 1])
def test_split_of_an_empty_dimension(size):
    # Burn gives no piece; torch (whose semantics API.md's split follows) gives one empty piece.
    pieces = rg.zeros([0]).split(size, 0)
    assert [p.shape for p in pieces] == [(0,)]


# ---- int/ops/abs.rs ---------------------------------------------------------------------------


def test_int_abs_of_the_signed_minimum_wraps():
    minimum = np.iinfo(np.int64).min
    out = rg.tensor(np.array([[minimum, 0, -1, 2]], dtype=np.int64)).abs()
    assert out.dtype == "int64"
    assert values(out).tolist() == [[minimum, 0, 1, 2]]


# ---- burn-tensor src/tensor/api/extension.rs --------------------------------------------------


@pytest.mark.parametrize(
    "data, dtype",
    [
        ([[1.0, -2.5], [3.0, 4.25]], "float32"),
        ([[1, -2], [3, 4]], "int64"),
        ([[True, False], [False, True]], "bool"),
    ],
)
def test_primitive_round_trip_keeps_values_and_dtype(data, dtype, backend):  # noqa: F811
    t = rg.tensor(data)
    assert t.dtype == dtype
    back = rg.Tensor.from_inner(t.inner(), backend=backend)
    assert back.dtype == dtype
    assert back.shape == (2, 2)
    np.testing.assert_array_equal(values(back), np.array(data))
    # Taking the primitive out does not consume or change the tensor.
    np.testing.assert_array_equal(values(t), np.array(data))


# ---- burn-backend-tests/tests/fusion/{reduce_broadcasted, inplace, cat, reduce_logical}.rs ----
# Burn checks that its fused kernels give the values of the unfused chain; the values are what
# a user sees, so they are checked here on the same chains (the fusion inspector's reports have
# no counterpart).


def arange_f(start, end, shape):
    return rg.arange(start, end).reshape(list(shape)).float()


def test_reduce_broadcasted_1():
    fused_on_read = arange_f(0, 32, (4, 8))
    x = (arange_f(0, 32, (4, 8)) + fused_on_read).sum_dim(1) + arange_f(0, 4, (4, 1))
    expected = np.array([56.0, 193.0, 330.0, 467.0])[:, None] + np.arange(8.0)
    np.testing.assert_allclose(values(x + fused_on_read), expected, rtol=1e-3, atol=1e-3)


def test_reduce_broadcasted_2():
    x = (arange_f(0, 32, (4, 8)) + arange_f(0, 32, (4, 8))).sum_dim(1)
    x = (x + arange_f(16, 48, (4, 8))).mean_dim(1)
    expected = np.array([107.5, 251.5, 395.5, 539.5])[:, None] + np.arange(8.0)
    np.testing.assert_allclose(values(x + arange_f(32, 64, (4, 8))), expected, rtol=1e-3)


def test_reduce_broadcasted_3():
    fused_on_read = arange_f(0, 32, (4, 8))
    x = (arange_f(0, 32, (4, 8)) + fused_on_read).sum_dim(1) + arange_f(0, 4, (4, 1))
    x = (x + fused_on_read).mean_dim(1)
    expected = np.array([91.5, 236.5, 381.5, 526.5])[:, None] + np.arange(8.0)
    np.testing.assert_allclose(values(x + arange_f(32, 64, (4, 8))), expected, rtol=1e-3)


def test_reduce_broadcasted_4_reused_partial():
    x_previous = arange_f(0, 32, (4, 8)) + arange_f(0, 32, (4, 8))
    x = x_previous.sum_dim(1) * arange_f(0, 4, (4, 1))
    x = (x + x_previous).mean_dim(1)
    expected = np.array([39.0, 247.0, 711.0, 1431.0])[:, None] + np.arange(8.0)
    np.testing.assert_allclose(values(x + arange_f(32, 64, (4, 8))), expected, rtol=1e-3)


def test_reduce_broadcasted_masked_softmax():
    d0, q, k = 6, 96, 96
    n = d0 * q * k
    x = (arange_f(0, n, (d0, q, k)) / float(n) - 0.5) * 20.0
    mask = rg.arange(0, k).reshape([1, k]).greater(rg.arange(0, q).reshape([q, 1]))
    scores = x.mask_fill(mask.reshape([1, q, k]), -10000.0)
    e = (scores - scores.max_dim(2)).exp()
    actual = values(e / e.sum_dim(2))
    # The same causal-masked softmax, row by row, in NumPy.
    xs = (np.arange(n, dtype=np.float64).reshape(d0, q, k) / n - 0.5) * 20.0
    xs = np.where(np.arange(k)[None, :] > np.arange(q)[:, None], -10000.0, xs)
    ex = np.exp(xs - xs.max(axis=2, keepdims=True))
    assert np.isfinite(actual).all()
    np.testing.assert_allclose(actual, ex / ex.sum(axis=2, keepdims=True), rtol=1e-2, atol=1e-2)


def test_reduce_broadcasted_max_propagates_nan():
    fused_on_read = rg.tensor([[1.0, math.nan, 3.0, 2.0], [1.0, 4.0, 3.0, 2.0]])
    out = (rg.zeros([2, 4]) + fused_on_read).max_dim(1) + rg.zeros([2, 1])
    out = values(out + fused_on_read + 1.0)
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1], [6.0, 9.0, 8.0, 7.0])


def test_consuming_elementwise_chain():
    tensor = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).add_scalar(0.0).mul_scalar(1.0)
    for _ in range(4):
        tensor = tensor.add_scalar(1.0).mul_scalar(2.0)
    np.testing.assert_allclose(values(tensor), [[46.0, 62.0], [78.0, 94.0]])


def test_broadcast_elementwise_chain():
    tensor = rg.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    out = (tensor + rg.tensor([[10.0, 20.0, 30.0, 40.0]])).mul_scalar(2.0)
    np.testing.assert_allclose(values(out), [[22.0, 44.0, 66.0, 88.0], [30.0, 52.0, 74.0, 96.0]])


def test_zero_stride_singleton_with_broadcast():
    bias = rg.tensor([[[10.0], [20.0], [30.0], [40.0]]])
    tensor = rg.tensor([[[1.0], [2.0], [3.0], [4.0]], [[5.0], [6.0], [7.0], [8.0]]])
    out = (tensor.repeat_dim(2, 1) + bias).mul_scalar(2.0)
    expected = [[[22.0], [44.0], [66.0], [88.0]], [[30.0], [52.0], [74.0], [96.0]]]
    np.testing.assert_allclose(values(out), expected)


def test_read_only_input_is_not_written():
    tensor = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).add_scalar(0.0).mul_scalar(1.0)
    out = tensor.add_scalar(1.0).mul_scalar(2.0)
    np.testing.assert_allclose(values(out), [[4.0, 6.0], [8.0, 10.0]])
    np.testing.assert_allclose(values(tensor), [[1.0, 2.0], [3.0, 4.0]])


def test_reduce_of_an_elementwise_output_that_is_also_returned():
    tensor = rg.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    out = tensor.add_scalar(1.0).mul_scalar(2.0)
    res = out.sum_dim(1).mul_scalar(3.0).add_scalar(1.0)
    np.testing.assert_allclose(values(out), [[4.0, 6.0, 8.0, 10.0], [12.0, 14.0, 16.0, 18.0]])
    np.testing.assert_allclose(values(res), [[85.0], [181.0]])


def test_repeated_accumulating_updates():
    acc = rg.zeros([32]).add_scalar(0.0).mul_scalar(1.0)
    for step in range(1, 4):
        acc = (acc + rg.full([32], float(step))).add_scalar(1.0)
    np.testing.assert_allclose(values(acc), np.full(32, 9.0))


def test_cat_then_elementwise():
    a = rg.tensor([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]])
    b = rg.tensor([[8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0]])
    out = rg.cat([a, b], 0).mul_scalar(2.0)
    np.testing.assert_allclose(values(out), 2.0 * np.arange(16.0).reshape(4, 4))


def test_cat_last_dim_with_unaligned_segments():
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    b = rg.tensor([[10.0, 20.0, 30.0, 40.0, 50.0], [60.0, 70.0, 80.0, 90.0, 100.0]])
    out = rg.cat([a, b], 1).add_scalar(1.0)
    expected = [
        [2.0, 3.0, 4.0, 11.0, 21.0, 31.0, 41.0, 51.0],
        [5.0, 6.0, 7.0, 61.0, 71.0, 81.0, 91.0, 101.0],
    ]
    np.testing.assert_allclose(values(out), expected)


def test_cat_three_inputs_middle_dim():
    a = rg.tensor([[[1.0, 2.0]], [[3.0, 4.0]]])
    b = rg.tensor([[[5.0, 6.0], [7.0, 8.0]], [[9.0, 10.0], [11.0, 12.0]]])
    c = rg.tensor([[[13.0, 14.0]], [[15.0, 16.0]]])
    out = rg.cat([a, b, c], 1).mul_scalar(2.0)
    expected = [
        [[2.0, 4.0], [10.0, 12.0], [14.0, 16.0], [26.0, 28.0]],
        [[6.0, 8.0], [18.0, 20.0], [22.0, 24.0], [30.0, 32.0]],
    ]
    np.testing.assert_allclose(values(out), expected)


def test_cat_of_a_computed_input():
    a = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = rg.tensor([[5.0, 6.0], [7.0, 8.0]])
    out = rg.cat([a.mul_scalar(10.0), b], 0)
    np.testing.assert_allclose(values(out), [[10.0, 20.0], [30.0, 40.0], [5.0, 6.0], [7.0, 8.0]])


def test_cat_int_and_bool_then_elementwise():
    out = rg.cat([rg.tensor([1, 2, 3]), rg.tensor([4, 5])], 0) + 10
    assert out.dtype == "int64" and values(out).tolist() == [11, 12, 13, 14, 15]
    joined = rg.cat([rg.tensor([True, False, True]), rg.tensor([False, True])], 0)
    out = joined.equal(rg.tensor([True, True, False, False, True]))
    assert out.dtype == "bool" and values(out).tolist() == [True, False, False, True, True]


def test_cat_of_a_transposed_input():
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).swap_dims(0, 1)
    b = rg.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    out = rg.cat([a, b], 1).mul_scalar(2.0)
    expected = [[2.0, 8.0, 20.0, 40.0], [4.0, 10.0, 60.0, 80.0], [6.0, 12.0, 100.0, 120.0]]
    np.testing.assert_allclose(values(out), expected)


def test_cat_output_broadcast_by_elementwise():
    a = rg.tensor([[1.0, 2.0, 3.0]])
    b = rg.tensor([[10.0, 20.0, 30.0, 40.0, 50.0]])
    c = rg.tensor([[100.0] * 8, [200.0] * 8])
    out = rg.cat([a, b], 1) + c
    expected = [
        [101.0, 102.0, 103.0, 110.0, 120.0, 130.0, 140.0, 150.0],
        [201.0, 202.0, 203.0, 210.0, 220.0, 230.0, 240.0, 250.0],
    ]
    np.testing.assert_allclose(values(out), expected)


def logical_mask(rows=4, cols=257):
    r, c = np.divmod(np.arange(rows * cols), cols)
    mask = np.where(r % 3 == 0, False, np.where(r % 3 == 1, True, c % 3 == 0))
    return mask.reshape(rows, cols)


def logical_input(kind):
    mask = logical_mask()
    signed = np.where(np.arange(mask.size).reshape(mask.shape) % 2 == 0, 2, -3)
    return mask, {
        "bool": mask,
        "float": np.where(mask, signed, 0).astype(np.float32),
        "int": np.where(mask, signed, 0).astype(np.int64),
    }[kind]


@pytest.mark.parametrize("kind", ["bool", "float", "int"])
def test_any_dim_and_all_dim_over_an_unaligned_row(kind):
    mask, data = logical_input(kind)
    t = rg.tensor(data)
    assert values(t.any_dim(1)).tolist() == mask.any(axis=1, keepdims=True).tolist()
    assert values(t.all_dim(1)).tolist() == mask.all(axis=1, keepdims=True).tolist()


def test_any_dim_and_all_dim_broadcast_back():
    mask = logical_mask()
    t = rg.tensor(mask)
    any_or = values(t.any_dim(1).bool_or(t))
    all_and = values(t.all_dim(1).bool_and(t))
    np.testing.assert_array_equal(any_or, mask.any(axis=1, keepdims=True) | mask)
    np.testing.assert_array_equal(all_and, mask.all(axis=1, keepdims=True) & mask)


def test_whole_any_and_all():
    mask = logical_mask()
    t_mixed, t_false, t_true = rg.tensor(mask), rg.zeros([4, 257]).bool(), rg.ones([4, 257]).bool()
    assert t_mixed.any().item() is True and t_mixed.all().item() is False
    assert t_false.any().item() is False and t_true.all().item() is True
    _, floats = logical_input("float")
    _, ints = logical_input("int")
    assert rg.tensor(floats).any().item() is True
    assert rg.tensor(ints).any().item() is True


def test_reshape_then_any_dim():
    mask = logical_mask()
    out = values(rg.tensor(mask).reshape([257, 4]).any_dim(1))
    np.testing.assert_array_equal(out, mask.reshape(257, 4).any(axis=1, keepdims=True))


def test_elementwise_then_any_dim():
    mask, floats = logical_input("float")
    out = values(rg.tensor(floats).mul_scalar(5.0).any_dim(1))
    np.testing.assert_array_equal(out, mask.any(axis=1, keepdims=True))


# ---- fusion/int_bitwise.rs --------------------------------------------------------------------


def test_int_bitwise_chain_then_float_cast():
    # Burn's bitwise_xor/and_scalar/right_shift_scalar/or/not are torch's ^ & >> | ~.
    lhs, rhs = rg.tensor([13, 7, 3, 12]), rg.tensor([11, 3, 5, 9])
    bitwise = (((lhs ^ rhs) & 7) >> 1) | ~lhs
    assert bitwise.dtype == "int64"
    out = bitwise.float().mul_scalar(0.5)
    assert out.dtype == "float32"
    assert values(out).tolist() == [-6.5, -3.0, -0.5, -6.5]


# ---- fusion/nhwc_relayout.rs ------------------------------------------------------------------

BIAS = 1000.0


def reference_pool_2x2(grid):
    n, c, h, w = grid.shape
    return grid.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def test_elementwise_then_max_pool2d():
    x = arange_f(0, 16, (2, 2, 2, 2)) + rg.zeros([2, 2, 2, 2])
    out = F.max_pool2d(x, 2, 2)
    assert values(out).reshape(-1).tolist() == [3.0, 7.0, 11.0, 15.0]
    assert out.shape == (2, 2, 1, 1)


@pytest.mark.parametrize("dims", [(2, 4, 4, 8), (1, 8, 6, 6), (3, 3, 8, 8)])
def test_elementwise_then_max_pool2d_widths(dims):
    flat = np.arange(np.prod(dims), dtype=np.float32).reshape(dims)
    out = F.max_pool2d(rg.tensor(flat) + BIAS, 2, 2)
    np.testing.assert_array_equal(values(out), reference_pool_2x2(flat + BIAS))


@pytest.mark.parametrize("dims", [(2, 4, 4, 8), (1, 4, 6, 6)])
def test_elementwise_then_max_pool2d_of_a_transposed_input(dims):
    n, c, h, w = dims
    flat = np.arange(n * c * h * w, dtype=np.float32).reshape(n, c, w, h)
    out = F.max_pool2d(rg.tensor(flat).swap_dims(2, 3) + BIAS, 2, 2)
    np.testing.assert_array_equal(values(out), reference_pool_2x2(flat.swapaxes(2, 3) + BIAS))


def test_elementwise_then_nearest_interpolate():
    x = arange_f(0, 16, (2, 2, 2, 2)) + rg.zeros([2, 2, 2, 2])
    out = F.interpolate(x, size=(4, 4), mode="nearest")
    expected = np.arange(16.0).reshape(2, 2, 2, 2).repeat(2, axis=2).repeat(2, axis=3)
    np.testing.assert_array_equal(values(out), expected)


# ---- burn-backend-tests/tests/cubecl/{reduce, broadcast, cast, contiguous, unary}.rs ----------
# Burn's GPU-kernel tests; those that compare with its reference backend compare with NumPy here
# (their gradients are in test_burn_ports_3).

TOPK_INPUT = [
    [[0.5, 1.2, 0.8, 3.3], [4.4, 2.1, 9.9, 0.1], [7.7, 8.8, 6.6, 5.5]],
    [[1.1, 0.2, 4.4, 2.2], [6.0, 7.0, 5.0, 8.0], [3.0, 3.0, 1.0, 2.0]],
]


def test_argtopk_and_topk():
    t = rg.tensor([[1.0, 7.0, 3.0], [8.0, 2.0, 8.0]])
    assert values(t.argtopk(2, -1)).tolist() == [[1, 2], [0, 2]]
    assert values(t.topk(2, 1)).tolist() == [[7.0, 3.0], [8.0, 8.0]]
    assert values(rg.tensor([10.0, 50.0, 20.0, 40.0, 30.0]).argtopk(3, 0)).tolist() == [1, 3, 4]
    cube = rg.tensor([[[10.0, 1.0], [5.0, 20.0]], [[1.0, 10.0], [20.0, 5.0]]])
    assert values(cube.argtopk(1, 0)).tolist() == [[[0, 1], [1, 0]]]
    assert values(cube.topk(1, 0)).tolist() == [[[10.0, 10.0], [20.0, 20.0]]]


def test_argtopk_and_topk_with_ties():
    t = rg.tensor([5.0, 2.0, 5.0, 5.0])
    assert values(t.argtopk(2, 0)).tolist() == [0, 2]
    assert values(t.topk(2, 0)).tolist() == [5.0, 5.0]


def test_argtopk_and_topk_3d_last_dim():
    t = rg.tensor(TOPK_INPUT)
    expected_indices = [[[3, 1], [2, 0], [1, 0]], [[2, 3], [3, 1], [0, 1]]]
    assert values(t.argtopk(2, 2)).tolist() == expected_indices
    expected = [[[3.3, 1.2], [9.9, 4.4], [8.8, 7.7]], [[4.4, 2.2], [8.0, 7.0], [3.0, 3.0]]]
    np.testing.assert_allclose(values(t.topk(2, 2)), expected, rtol=1e-6)


@pytest.mark.parametrize("reduce", ["sum", "mean", "prod"])
def test_whole_and_dim_reductions_match_numpy(reduce):
    data = np.random.default_rng(5).uniform(0.5, 1.5, (6, 256)).astype(np.float32)
    t = rg.tensor(data)
    expected = getattr(data.astype(np.float64), reduce)
    np.testing.assert_allclose(getattr(t, reduce)().item(), expected(), rtol=1e-3)
    np.testing.assert_allclose(
        values(getattr(t, f"{reduce}_dim")(1)), expected(axis=1, keepdims=True), rtol=1e-3
    )


def test_argmax_and_argmin_match_numpy():
    data = np.random.default_rng(6).standard_normal((6, 256)).astype(np.float32)
    t = rg.tensor(data)
    assert values(t.argmax(1)).tolist() == data.argmax(axis=1).tolist()
    assert values(t.argmin(0)).tolist() == data.argmin(axis=0).tolist()


@pytest.mark.parametrize(
    "shape_a, shape_b, shape",
    [
        ((2, 0), (2, 1), (2, 0)),
        ((2, 1), (2, 0), (2, 0)),
        ((0, 3), (1, 3), (0, 3)),
        ((2, 0), (2, 0), (2, 0)),
    ],
)
def test_broadcast_against_an_empty_dimension(shape_a, shape_b, shape):
    a, b = rg.zeros(list(shape_a)), rg.zeros(list(shape_b))
    assert (a + b).shape == shape
    assert a.greater(b).shape == shape


def test_mask_where_broadcast_against_an_empty_dimension():
    out = rg.zeros([2, 0]).mask_where(rg.tensor([[True], [False]]), rg.zeros([2, 1]))
    assert out.shape == (2, 0)


def test_broadcast_add_of_a_column_and_a_matrix():
    out = rg.tensor([[1.0], [2.0]]) + rg.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    assert values(out).tolist() == [[11.0, 21.0, 31.0], [42.0, 52.0, 62.0]]


def test_casts_between_int_bool_and_float():
    ints = rg.arange(0, 100)
    assert values(ints).tolist() == list(range(100))
    assert values(ints.float()).tolist() == [float(i) for i in range(100)]
    t = rg.tensor([[1.0, 0.0, 3.0], [0.0, 0.0, 900.0]])
    assert values(t.greater_elem(0.0).int()).tolist() == [[1, 0, 1], [0, 0, 1]]
    assert values(t.greater_elem(0.0).float()).tolist() == [[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]


@pytest.mark.parametrize("shape", [(4, 4, 4, 4), (8, 3, 7, 4), (1, 4, 1, 1), (2, 5, 6, 3)])
def test_swapped_views_read_back_in_order(shape):
    grid = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    t = rg.arange(0, int(np.prod(shape))).reshape(list(shape)).float()
    for i in range(4):
        for j in range(i + 1, 4):
            np.testing.assert_array_equal(values(t.swap_dims(i, j)), grid.swapaxes(i, j))


def test_tanh_saturates_to_one_for_large_inputs():
    out = [(rg.ones([1]) * x).tanh().item() for x in (43.0, 44.0, 45.0, -45.0)]
    assert out == [1.0, 1.0, 1.0, -1.0]


# ---- cubecl/fft.rs (the real transforms; ``test_burn_tensor_ports_14`` has burn-flex's) -------
# ``rfft``/``irfft`` are Burn's ``signal::rfft(x, dim, n)``/``irfft(re, im, dim, n)``
# (``rg.signal``); Burn's ``cfft`` of a (re, im) pair has no counterpart (no complex dtype).

SQ2INV = 1.0 / math.sqrt(2.0)
SINE_8 = [0.0, SQ2INV, 1.0, SQ2INV, 0.0, -SQ2INV, -1.0, -SQ2INV]
COSINE_8 = [1.0, SQ2INV, 0.0, -SQ2INV, -1.0, -SQ2INV, 0.0, SQ2INV]
SINE_PLUS_HALF_SECOND = [
    0.0,
    SQ2INV + 0.5,
    1.0,
    SQ2INV - 0.5,
    0.0,
    -(SQ2INV - 0.5),
    -1.0,
    -(SQ2INV + 0.5),
]
ALTERNATING = [0.0, 1.0, 0.0, -1.0, 0.0, 1.0, 0.0, -1.0]


def spectrum(signal, dim, n=None):
    re, im = rg.signal.rfft(rg.tensor(np.asarray(signal, np.float32)), dim, n)
    assert re.shape == im.shape
    return values(re), values(im)


def test_rfft_of_sines_is_imaginary_and_of_a_cosine_real():
    re, im = spectrum([SINE_PLUS_HALF_SECOND], 1)
    np.testing.assert_allclose(re, np.zeros((1, 5)), atol=1e-4)
    np.testing.assert_allclose(im, [[0.0, -4.0, -2.0, 0.0, 0.0]], atol=1e-4)
    re, im = spectrum([COSINE_8], 1)
    np.testing.assert_allclose(re, [[0.0, 4.0, 0.0, 0.0, 0.0]], atol=1e-3)
    np.testing.assert_allclose(im, np.zeros((1, 5)), atol=1e-3)


def test_rfft_of_distinct_rows_and_columns():
    re, im = spectrum([SINE_8, ALTERNATING], 1)
    np.testing.assert_allclose(re, np.zeros((2, 5)), atol=1e-3)
    np.testing.assert_allclose(im, [[0, -4, 0, 0, 0], [0, 0, -4, 0, 0]], atol=1e-3)
    re, im = spectrum(np.array([SINE_8, ALTERNATING]).T, 0)
    np.testing.assert_allclose(re, np.zeros((5, 2)), atol=1e-3)
    np.testing.assert_allclose(im, [[0, 0], [-4, 0], [0, -4], [0, 0], [0, 0]], atol=1e-3)


def test_rfft_negative_dim_matches_positive_dim():
    signal = [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, -1.0]]
    for positive, negative in zip(spectrum(signal, 1), spectrum(signal, -1)):
        np.testing.assert_allclose(negative, positive, atol=1e-4)


def test_rfft_of_3d_tensors():
    re, im = spectrum([[SINE_8, ALTERNATING], [ALTERNATING, SINE_8]], 2)
    np.testing.assert_allclose(re, np.zeros((2, 2, 5)), atol=1e-3)
    expected_im = [
        [[0, -4, 0, 0, 0], [0, 0, -4, 0, 0]],
        [[0, 0, -4, 0, 0], [0, -4, 0, 0, 0]],
    ]
    np.testing.assert_allclose(im, expected_im, atol=1e-3)
    signal = [
        [[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0], [0.0, 0.0]],
        [[0.0, 1.0], [0.0, 0.0], [0.0, -1.0], [0.0, 0.0]],
    ]
    re, im = spectrum(signal, 1)
    np.testing.assert_allclose(re, [[[0, 0], [2, 0], [0, 0]], [[0, 0], [0, 2], [0, 0]]], atol=1e-3)
    np.testing.assert_allclose(im, np.zeros((2, 3, 2)), atol=1e-3)


def inverse(re, im, dim, n=None):
    as_tensor = lambda a: rg.tensor(np.asarray(a, np.float32))  # noqa: E731
    return values(rg.signal.irfft(as_tensor(re), as_tensor(im), dim, n))


def test_irfft_gives_back_the_sine_and_cosine_waves():
    np.testing.assert_allclose(
        inverse([[0.0] * 5], [[0.0, -4.0, -2.0, 0.0, 0.0]], 1), [SINE_PLUS_HALF_SECOND], atol=1e-3
    )
    np.testing.assert_allclose(
        inverse([[0.0, 4.0, 0.0, 0.0, 0.0]], [[0.0] * 5], 1), [COSINE_8], atol=1e-3
    )
    out = inverse([[0.0] * 5] * 2, [[0, -4, 0, 0, 0], [0, 0, -4, 0, 0]], 1)
    np.testing.assert_allclose(out, [SINE_8, ALTERNATING], atol=1e-3)
    out = inverse([[0, 0], [4, 4], [0, 0], [0, 0], [0, 0]], np.zeros((5, 2)), 0)
    np.testing.assert_allclose(out, np.array([COSINE_8, COSINE_8]).T, atol=1e-3)
    np.testing.assert_allclose(
        inverse(*spectrum(signal := [[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, -1.0]], 1), -1),
        signal,
        atol=1e-4,
    )


def test_irfft_and_rfft_with_an_explicit_length():
    re, im = spectrum([1.0, 0.0, 0.0, 0.0], 0)
    assert inverse(re, im, 0, 8).shape == (8,)
    re, im = spectrum([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]], 1, 8)
    assert re.shape == im.shape == (2, 5)
    np.testing.assert_allclose(re[0], np.ones(5), atol=1e-3)


# ---- cubecl/{uniform, normal, bernoulli}.rs ---------------------------------------------------
# Burn's ``Distribution::Default``/``Uniform(a, b)``/``Normal(m, s)``/``Bernoulli(p)`` draws are
# ``rg.random``/``uniform_``/``rg.normal``/``rg.bernoulli`` under ``rg.seed`` (torch's forms,
# API.md section 10); the statistical checks (cubek's helpers) are written out in NumPy, on
# quarter-size draws (256 x 256 for the runs tests, 500 x 500 for the 68-95-99.7 rule).


def runs_test_z(numbers, low, high):
    """Wald-Wolfowitz runs test around the interval's midpoint: the z-score of the number of
    runs of values above/below it."""
    above = np.asarray(numbers, np.float64) > (low + high) / 2.0
    n1, n2 = int(above.sum()), int((~above).sum())
    runs = 1 + int(np.count_nonzero(above[1:] != above[:-1]))
    n = n1 + n2
    expected = 2.0 * n1 * n2 / n + 1.0
    variance = 2.0 * n1 * n2 * (2.0 * n1 * n2 - n) / (n * n * (n - 1.0))
    return (runs - expected) / math.sqrt(variance)


def at_least_one_per_bin(numbers, bins, low, high):
    counts, _ = np.histogram(np.asarray(numbers, np.float64), bins=bins, range=(low, high))
    return bool((counts > 0).all())


def test_uniform_draws_stay_within_their_interval():
    rg.seed(0)
    default = values(rg.random([24, 24]))
    assert default.min() >= 0.0 and default.max() < 1.0
    rg.seed(0)
    shifted = values(rg.empty(24, 24).uniform_(5.0, 17.0))
    assert shifted.min() >= 5.0 and shifted.max() < 17.0
    rg.seed(0)
    assert at_least_one_per_bin(values(rg.empty(64, 64).uniform_(-5.0, 10.0)), 3, -5.0, 10.0)


def test_uniform_draws_pass_the_runs_test():
    rg.seed(0)
    assert abs(runs_test_z(values(rg.random([256, 256])).ravel(), 0.0, 1.0)) < 3.0


def test_int_uniform_draws_cover_their_interval():
    rg.seed(0)
    ints = values(rg.randint(-10, 10, (64, 64)))
    assert ints.dtype == np.int64
    assert ints.min() >= -10 and ints.max() < 10
    assert at_least_one_per_bin(ints.astype(np.float64), 10, -10.0, 10.0)


def test_seed_makes_draws_reproducible():
    rg.seed(42)
    first = values(rg.random([5]))
    rg.seed(42)
    np.testing.assert_array_equal(values(rg.random([5])), first)


def test_normal_draws_have_the_expected_mean_and_spread():
    rg.seed(0)
    draws = values(rg.normal(10.0, 2.0, size=(100, 100)))
    np.testing.assert_allclose(draws.mean(), 10.0, atol=0.1)
    rg.seed(0)
    standard = np.abs(values(rg.random([500, 500], distribution="normal")).ravel())
    for width, share in [(1.0, 0.6827), (2.0, 0.9545), (3.0, 0.9973)]:
        np.testing.assert_allclose((standard <= width).mean(), share, atol=0.005)


def test_bernoulli_draws():
    rg.seed(0)
    draws = values(rg.bernoulli(rg.full((40, 40), 0.7)))
    assert set(np.unique(draws)) <= {0.0, 1.0}
    np.testing.assert_allclose(draws.mean(), 0.7, atol=0.05)
    rg.seed(0)
    halves = values(rg.bernoulli(rg.full((256, 256), 0.5))).ravel()
    assert abs(runs_test_z(halves, 0.0, 1.1)) < 3.0
