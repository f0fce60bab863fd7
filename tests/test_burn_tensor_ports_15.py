"""burn-flex's op tests beyond convolution (``crates/burn-flex/src/ops/{activation, reduce,
binary, expand, slice, sort, float, bool, comparison, gather_scatter, unary, matmul, int,
attention}.rs`` and ``src/tensor.rs``, tracel-ai/burn at
2c06be351006851d42fdb6df16b976f4a82d9747), not ported before (``test_burn_tensor_ports_14``
has its convolutions, pools, resampling and FFT), then burn-tch's and burn-ndarray's op tests
(``crates/burn-tch/src/tensor.rs``, ``crates/burn-ndarray/src/ops/{adaptive_avgpool, matmul,
base}.rs``) and two burn-nn RNN cases ``test_burn_tensor_ports_10`` left (GRU against PyTorch
with and without an initial state, a reversed RNN). Burn's CPU backend checks its fused softmax
and layer norm, its reductions on empty and integer tensors, its broadcasting of strided
(transposed, flipped, narrowed, expanded) operands, its sorts and its attention against
reference loops or values written in the test; here the same inputs go through API.md's ops
and ``rg.nn.functional``, under every checkpointing strategy on the chosen inner backend.
Expected values are Burn's, and its reference loops are written in NumPy.

Burn's forms map to ours: ``layer_norm(x, gamma, beta, eps)`` is ``F.layer_norm(x, (d,),
gamma, beta, eps)``; ``Slice::new(start, end, step)`` is an entry of ``t.slice`` (Burn's
negative step walks the range backwards, as ``t.slice`` does); a ``FlexTensor``
``transpose``/``flip``/``narrow``/``expand`` is the same view op; ``float_into_int`` is
``.int()`` (truncation toward zero); Burn's u8/u16/u32/u64/i32 int tensors are int64 here (the
values fit) and ``IntDType::I32`` index outputs are int64; ``argmax(d)``/``argmin(d)`` pass
``keepdim=True`` (the methods are torch's here, as ``test_burn_tensor_ports_2`` notes);
Burn's attention mask is true where a key is hidden (torch's boolean ``attn_mask`` is its
complement), its bias is torch's float ``attn_mask``, and its causal mask is aligned to the
bottom right, so for unequal lengths it is given as a mask (torch's ``is_causal`` is aligned to
the top left). Burn's f16/bf16 cases, its ``int_mean_dim`` (torch refuses an integer mean
without a dtype, API.md section 10), its softcap option (no torch form), the layout and
SIMD-path predicates and the zero-copy checks have no public counterpart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports_10 import load_gates, scalar_gates


def close(actual, expected, tol=1e-4):
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=0, atol=tol)


def eq(actual, expected, dtype=None):
    np.testing.assert_array_equal(np.asarray(actual), np.asarray(expected))
    if dtype is not None:
        assert actual.dtype == dtype, (actual.dtype, dtype)


# ---- activation.rs: fused softmax and layer norm ------------------------------------------------


def softmax_ref(data, row_len):
    rows = np.asarray(data, np.float64).reshape(-1, row_len)
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).reshape(np.shape(data))


def layer_norm_ref(data, gamma, beta, eps, row_len):
    rows = np.asarray(data, np.float64).reshape(-1, row_len)
    mean = rows.mean(axis=1, keepdims=True)
    var = ((rows - mean) ** 2).mean(axis=1, keepdims=True)
    out = (rows - mean) / np.sqrt(var + eps) * np.asarray(gamma, np.float64)
    if beta is not None:
        out = out + np.asarray(beta, np.float64)
    return out.reshape(np.shape(data))


def layer_norm(x, gamma, beta=None, eps=1e-5):
    x = np.asarray(x)
    return F.layer_norm(
        rg.tensor(x),
        (x.shape[-1],),
        rg.tensor(np.asarray(gamma, x.dtype)),
        None if beta is None else rg.tensor(np.asarray(beta, x.dtype)),
        eps,
    )


def test_layer_norm_2d_with_beta():
    x = np.arange(1.0, 9.0, dtype=np.float32).reshape(2, 4)
    row = [-1.3416408, -0.4472136, 0.4472136, 1.3416408]
    close(layer_norm(x, [1.0] * 4, [0.0] * 4), [row, row])


def test_layer_norm_with_affine():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    out = layer_norm(x, [2.0, 0.5, 1.0, 3.0], [1.0, -1.0, 0.0, 2.0])
    close(out, [[-1.6833, -1.2236, 0.4472, 6.0249]], 1e-3)


def test_layer_norm_no_beta():
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    close(layer_norm(x, [1.0] * 4), [[-1.3416408, -0.4472136, 0.4472136, 1.3416408]])


@pytest.mark.parametrize(
    "data, gamma, beta, row_len, tol",
    [
        (  # multi_chunk_rayon
            ((np.arange(128 * 16) % 19) * 0.03).astype(np.float32),
            [1.0] * 16,
            [0.0] * 16,
            16,
            1e-4,
        ),
        (  # simd_body_plus_scalar_tail
            (np.arange(34) * 0.137 - 2.3).astype(np.float32),
            1.0 + np.arange(17) * 0.05,
            np.arange(17) * 0.01,
            17,
            1e-5,
        ),
        (  # f64_with_beta_multi_chunk
            (np.arange(80 * 16) % 13) * 0.07 - 0.3,
            [0.9] * 16,
            [0.05] * 16,
            16,
            1e-10,
        ),
        (  # f64_no_beta
            np.array([1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 1.5, -0.5]),
            [1.0] * 4,
            None,
            4,
            1e-10,
        ),
    ],
    ids=["multi_chunk", "simd_tail", "f64_with_beta_multi_chunk", "f64_no_beta"],
)
def test_layer_norm_matches_reference(data, gamma, beta, row_len, tol):
    x = data.reshape(-1, row_len)
    out = layer_norm(x, gamma, beta)
    assert out.dtype == str(x.dtype)
    close(out, layer_norm_ref(x, gamma, beta, 1e-5, row_len), tol)


def test_layer_norm_empty_last_dim_returns_input():
    x = rg.zeros((3, 0))
    assert F.layer_norm(x, (0,), rg.zeros((0,)), rg.zeros((0,)), 1e-5).shape == (3, 0)


@pytest.mark.parametrize(
    "gamma_shape, beta_shape",
    [((3,), None), ((4,), (3,)), ((2, 4), None)],
    ids=["gamma_length", "beta_length", "gamma_rank"],
)
def test_layer_norm_parameter_shape_mismatch_raises(gamma_shape, beta_shape):
    x = rg.tensor([[1.0, 2.0, 3.0, 4.0]])
    beta = None if beta_shape is None else rg.zeros(beta_shape)
    with pytest.raises(rg.ShapeError, match="layer_norm"):
        F.layer_norm(x, (4,), rg.ones(gamma_shape), beta, 1e-5)
    assert F.layer_norm(x, (4,), rg.ones((4,)), None, 1e-5).shape == (1, 4)


def test_layer_norm_gamma_dtype_mismatch_raises():
    x = rg.tensor([[1.0, 2.0, 3.0, 4.0]])
    with pytest.raises(rg.DTypeError, match="layer_norm"):
        F.layer_norm(x, (4,), rg.ones((4,), dtype="float64"), None, 1e-5)


@pytest.mark.parametrize(
    "data, row_len, tol",
    [
        ((np.arange(32) * 0.1).astype(np.float32), 32, 1e-5),
        (((np.arange(100 * 16) % 17) * 0.05).astype(np.float32), 16, 1e-5),
        (np.arange(1.0, 9.0), 4, 1e-10),
        ((np.arange(34) * 0.137 - 2.3).astype(np.float32), 17, 1e-5),
    ],
    ids=["simd_body_row", "multi_chunk", "f64", "simd_tail"],
)
def test_softmax_matches_reference(data, row_len, tol):
    x = data.reshape(-1, row_len)
    out = rg.tensor(x).softmax(1)
    assert out.dtype == str(x.dtype)
    close(out, softmax_ref(x, row_len), tol)
    close(F.softmax(rg.tensor(x), dim=-1), softmax_ref(x, row_len), tol)


def test_softmax_empty_last_dim_returns_input():
    assert rg.zeros((2, 0)).softmax(1).shape == (2, 0)


def test_softmax_dim_out_of_range_raises():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(rg.ShapeError, match="softmax"):
        x.softmax(2)
    close(x.softmax(1).sum_dim(1), [[1.0], [1.0]], 1e-6)


# ---- reduce.rs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, dim, dtype",
    [
        ((0, 4), 1, "float32"),
        ((3, 0), 0, "float32"),
        ((0, 4), 1, "float64"),
        ((0, 4), 1, "int64"),
    ],
    ids=["f32_zero_outer", "f32_zero_inner", "f64_zero_outer", "int_zero_outer"],
)
def test_sum_dim_of_an_empty_tensor(shape, dim, dtype):
    out = rg.zeros(shape, dtype=dtype).sum_dim(dim)
    expected = list(shape)
    expected[dim] = 1
    assert out.shape == tuple(expected) and out.dtype == dtype
    assert np.asarray(out).size == 0


def test_mean_dim_of_an_empty_outer_dim():
    out = rg.zeros((0, 4)).mean_dim(1)
    assert out.shape == (0, 1) and np.asarray(out).size == 0


def test_int_reductions():
    eq(rg.tensor([1, 2, 3, 4, 5]).sum(), 15, "int64")
    eq(rg.tensor([[1, 2, 3], [4, 5, 6]]).sum_dim(1), [[6], [15]], "int64")
    eq(rg.tensor([1, 5, 3, 2, 4]).argmax(0, keepdim=True), [1], "int64")
    eq(rg.tensor([10, 20, 30]).sum(), 60)
    eq(rg.tensor([100, 200, 300]).sum(), 600)
    eq(rg.tensor([[1, 2], [3, 4]]).sum_dim(1), [[3], [7]])
    eq(rg.tensor([2, 3, 5]).prod(), 30, "int64")
    eq(rg.tensor([5, 100, 42]).max(), 100, "int64")
    eq(rg.tensor([5, 1, 42]).min(), 1, "int64")
    eq(rg.tensor([[10, 20], [30, 5]]).max_dim(1), [[20], [30]], "int64")
    eq(rg.tensor([[10, 2], [30, 5]]).min_dim(1), [[2], [5]], "int64")
    values, indices = rg.tensor([[5, 10], [3, 8]]).max_dim_with_indices(1)
    eq(values, [[10], [8]], "int64")
    eq(indices, [[1], [1]], "int64")


@pytest.mark.parametrize(
    "shape, dim, reduce", [((0, 3), 0, "max_dim"), ((3, 0), 1, "min_dim")], ids=["max", "min"]
)
def test_max_min_dim_over_an_empty_dimension_raises(shape, dim, reduce):
    x = rg.zeros(shape)
    with pytest.raises(rg.RetrogradError, match=reduce.removesuffix("_dim")):
        getattr(x, reduce)(dim)


def test_argmax_with_leading_nan():
    # NaN is the largest value: both of Burn's paths give the first NaN's index
    eq(rg.tensor([[math.nan] * 3]).argmax(1, keepdim=True), [[0]])
    long = np.ones((1, 600), dtype=np.float32)
    long[0, :2] = np.nan
    long[0, 300] = 5.0
    eq(rg.tensor(long).argmax(1, keepdim=True), [[0]])


# ---- binary.rs: broadcasting strided and shared operands ----------------------------------------


def test_binary_shared_row_broadcast():
    a = rg.arange(1, 13).float().reshape((1, 3, 4))
    gamma = rg.tensor([10.0, 20.0, 30.0, 40.0]).reshape((1, 1, 4))
    eq(
        (a * gamma).reshape((-1,)),
        [10, 40, 90, 160, 50, 120, 210, 320, 90, 200, 330, 480],
    )


def test_binary_per_row_scalar_broadcast():
    a = rg.tensor([[1.0, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]]).reshape((1, 3, 4))
    mean = rg.tensor([2.5, 25.0, 250.0]).reshape((1, 3, 1))
    eq(
        (a - mean).reshape((-1,)),
        [-1.5, -0.5, 0.5, 1.5, -15, -5, 5, 15, -150, -50, 50, 150],
    )


def test_binary_permuted_lhs_broadcast_rhs():
    a = rg.arange(0, 24).float().reshape((2, 3, 4)).swap_dims(1, 2)
    gamma = rg.tensor([1.0, 10.0, 100.0]).reshape((1, 1, 3))
    reference = [
        (b * 12 + r * 4 + c) * [1.0, 10.0, 100.0][r]
        for b in range(2)
        for c in range(4)
        for r in range(3)
    ]
    eq((a * gamma).reshape((-1,)), reference)


def test_binary_permuted_lhs_per_row_scalar_sub():
    a = rg.arange(1, 25).float().reshape((2, 3, 4)).swap_dims(1, 2)
    mean = rg.arange(0, 8).float().reshape((2, 4, 1))
    reference = [
        (b * 12 + r * 4 + c + 1) - (b * 4 + c) for b in range(2) for c in range(4) for r in range(3)
    ]
    eq((a - mean).reshape((-1,)), reference)


OPS = {"add": rg.Tensor.add, "sub": rg.Tensor.sub, "mul": rg.Tensor.mul, "div": rg.Tensor.div}


@pytest.mark.parametrize(
    "pattern, op, expected",
    [
        ("shared", "add", [6.0, 12.0, 15.0, 22.0, 34.0, 63.0]),
        ("shared", "sub", [2.0, 4.0, 9.0, 18.0, 26.0, 57.0]),
        ("shared", "mul", [8.0, 32.0, 36.0, 40.0, 120.0, 180.0]),
        ("shared", "div", [2.0, 2.0, 4.0, 10.0, 7.5, 20.0]),
        ("perrow", "add", [6.0, 10.0, 14.0, 25.0, 35.0, 65.0]),
        ("perrow", "sub", [2.0, 6.0, 10.0, 15.0, 25.0, 55.0]),
        ("perrow", "mul", [8.0, 16.0, 24.0, 100.0, 150.0, 300.0]),
        ("perrow", "div", [2.0, 4.0, 6.0, 4.0, 6.0, 12.0]),
    ],
)
def test_binary_broadcast_rhs_all_ops_and_patterns(pattern, op, expected):
    a = rg.tensor([[4.0, 8.0, 12.0], [20.0, 30.0, 60.0]])
    b = rg.tensor([[2.0, 4.0, 3.0]]) if pattern == "shared" else rg.tensor([[2.0], [5.0]])
    eq(OPS[op](a, b).reshape((-1,)), expected)


@pytest.mark.parametrize(
    "pattern, op, expected",
    [
        ("shared", "add", [3.0, 6.0, 12.0, 10.0, 20.0, 40.0]),
        ("shared", "sub", [1.0, 2.0, 4.0, -6.0, -12.0, -24.0]),
        ("shared", "mul", [2.0, 8.0, 32.0, 16.0, 64.0, 256.0]),
        ("shared", "div", [2.0, 2.0, 2.0, 0.25, 0.25, 0.25]),
        ("perrow", "add", [13.0, 14.0, 16.0, 110.0, 120.0, 150.0]),
        ("perrow", "sub", [11.0, 10.0, 8.0, 90.0, 80.0, 50.0]),
        ("perrow", "mul", [12.0, 24.0, 48.0, 1000.0, 2000.0, 5000.0]),
        ("perrow", "div", [12.0, 6.0, 3.0, 10.0, 5.0, 2.0]),
    ],
)
def test_binary_broadcast_lhs_all_ops_and_patterns(pattern, op, expected):
    if pattern == "shared":
        a = rg.tensor([[2.0, 4.0, 8.0]])
        b = rg.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    else:
        a = rg.tensor([[12.0], [100.0]])
        b = rg.tensor([[1.0, 2.0, 4.0], [10.0, 20.0, 50.0]])
    eq(OPS[op](a, b).reshape((-1,)), expected)


def test_binary_broadcast_non_unique_lhs_and_full_scalar():
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    keep_alive = a
    eq((a + rg.tensor([[10.0, 20.0, 30.0]])).reshape((-1,)), [11, 22, 33, 14, 25, 36])
    eq(keep_alive, [[1, 2, 3], [4, 5, 6]])
    x = rg.arange(0, 12).float().reshape((2, 2, 3))
    scalar = rg.tensor([100.0]).expand((2, 2, 3))
    eq((x + scalar).reshape((-1,)), np.arange(12) + 100.0)


def test_binary_broadcast_lhs_3d_shared_row_sub():
    gamma = rg.tensor([100.0, 200.0, 300.0, 400.0]).reshape((1, 1, 4))
    x = rg.arange(0, 24).float().reshape((2, 3, 4))
    g = [100.0, 200.0, 300.0, 400.0]
    eq((gamma - x).reshape((-1,)), [g[i % 4] - i for i in range(24)])


# ---- expand.rs ----------------------------------------------------------------------------------


def test_expand_shapes():
    assert rg.tensor([1.0, 2.0, 3.0]).expand((2, 3)).shape == (2, 3)
    eq(rg.tensor([[1.0], [2.0], [3.0]]).expand((3, 4)), [[1] * 4, [2] * 4, [3] * 4])
    same = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(same.expand((2, 3)), same)


def test_expand_transposed():
    t = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).transpose()
    eq(t.expand((3, 2, 2)).reshape((-1,)), [1.0, 3.0, 2.0, 4.0] * 3)


def test_expand_flipped():
    flipped = rg.tensor([1.0, 2.0, 3.0]).flip([0])
    eq(flipped.expand((2, 3)).reshape((-1,)), [3.0, 2.0, 1.0] * 2)
    flipped = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).flip([0])
    eq(flipped.expand((3, 2, 2)).reshape((-1,)), [3.0, 4.0, 1.0, 2.0] * 3)


def test_expand_narrowed_preserves_offset():
    narrowed = rg.tensor([0.0, 1.0, 2.0, 3.0, 4.0]).narrow(0, 1, 3)
    eq(narrowed.expand((2, 3)).reshape((-1,)), [1.0, 2.0, 3.0] * 2)


@pytest.mark.parametrize("shape, target", [((2, 3, 4), (2, 3)), ((3,), ())])
def test_expand_to_fewer_dims_raises(shape, target):
    x = rg.zeros(shape)
    with pytest.raises(rg.ShapeError, match="expand"):
        x.expand(target)
    assert x.shape == shape


def test_broadcast_binary_with_flipped():
    lhs = rg.tensor([1.0, 2.0, 3.0, 4.0]).flip([0])
    rhs = rg.tensor([[10.0], [20.0]])
    out = lhs + rhs
    assert out.shape == (2, 4)
    eq(out, [[14.0, 13.0, 12.0, 11.0], [24.0, 23.0, 22.0, 21.0]])
    eq(lhs.expand((2, 4)).reshape((-1,)), [4.0, 3.0, 2.0, 1.0] * 2)


# ---- slice.rs -----------------------------------------------------------------------------------


def test_slice_basic_step_and_negative():
    eq(rg.arange(0, 6).float().reshape((2, 3)).slice([(0, 1), (1, 3)]), [[1.0, 2.0]])
    eq(rg.arange(0, 6).float().slice([slice(0, 6, 2)]), [0.0, 2.0, 4.0])
    eq(rg.arange(0, 5).float().slice([slice(-3, None)]), [2.0, 3.0, 4.0])
    eq(rg.arange(0, 5).float().slice([slice(0, None, -1)]), [4.0, 3.0, 2.0, 1.0, 0.0])


def test_slice_assign():
    eq(
        rg.arange(0, 5).float().slice_assign([(1, 4)], rg.tensor([10.0, 11.0, 12.0])),
        [0.0, 10.0, 11.0, 12.0, 4.0],
    )
    eq(
        rg.arange(0, 9)
        .float()
        .reshape((3, 3))
        .slice_assign([(1, 3), (1, 3)], rg.tensor([[10.0, 11.0], [12.0, 13.0]]))
        .reshape((-1,)),
        [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 6.0, 12.0, 13.0],
    )
    row = rg.tensor([[100.0, 101.0, 102.0, 103.0]])
    out = rg.arange(0, 12).float().reshape((3, 4)).slice_assign([(1, 2), slice(0, None)], row)
    eq(out.reshape((-1,)), [0, 1, 2, 3, 100, 101, 102, 103, 8, 9, 10, 11])


def scalar_expanded(value, shape, dtype="float32"):
    return rg.tensor([value], dtype=dtype).expand(shape)


def test_slice_assign_broadcast_scalar():
    eq(
        rg.arange(0, 5).float().slice_assign([(1, 4)], scalar_expanded(7.0, (3,))),
        [0.0, 7.0, 7.0, 7.0, 4.0],
    )
    out = rg.arange(0, 16).float().reshape((4, 4))
    out = out.slice_assign([(1, 3), (1, 3)], scalar_expanded(-1.0, (2, 2)))
    eq(out.reshape((-1,)), [0, 1, 2, 3, 4, -1, -1, 7, 8, -1, -1, 11, 12, 13, 14, 15])
    out = rg.arange(0, 24).float().reshape((2, 3, 4))
    out = out.slice_assign([(0, 1), (0, 2), (1, 3)], scalar_expanded(9.0, (1, 2, 2)))
    expected = np.arange(24.0)
    expected[[1, 2, 5, 6]] = 9.0
    eq(out.reshape((-1,)), expected)
    out = rg.arange(0, 10).float().slice_assign([slice(0, 10, 2)], scalar_expanded(0.0, (5,)))
    eq(out, [0.0, 1.0, 0.0, 3.0, 0.0, 5.0, 0.0, 7.0, 0.0, 9.0])


def test_slice_assign_broadcast_scalar_int():
    out = rg.arange(0, 12).reshape((3, 4))
    out = out.slice_assign([(0, 2), (1, 3)], scalar_expanded(-7, (2, 2), "int64"))
    eq(out.reshape((-1,)), [0, -7, -7, 3, 4, -7, -7, 7, 8, 9, 10, 11], "int64")


def test_slice_assign_broadcast_scalar_strided():
    out = rg.arange(0, 24).float().reshape((2, 3, 4))
    out = out.slice_assign([(0, 2), (0, 3), slice(0, 4, 2)], scalar_expanded(9.0, (2, 3, 2)))
    expected = np.arange(24.0).reshape(2, 3, 4)
    expected[:, :, [0, 2]] = 9.0
    eq(out, expected)
    out = rg.arange(0, 25).float().reshape((5, 5))
    out = out.slice_assign([slice(0, 5, 2), (1, 4)], scalar_expanded(-1.0, (3, 3)))
    expected = np.arange(25.0).reshape(5, 5)
    expected[::2, 1:4] = -1.0
    eq(out, expected)


# ---- sort.rs ------------------------------------------------------------------------------------


def test_sort_along_last_dim():
    rows, cols = 64, 64
    src = ((np.arange(rows * cols) * 1664525 + 1013904223) % 1000).astype(np.float32)
    src = src.reshape(rows, cols)
    eq(rg.tensor(src).sort(1), np.sort(src, axis=1))
    data = (np.arange(4096) % 17).astype(np.float32).reshape(128, 32)
    out = np.asarray(rg.tensor(data).sort(1, descending=True))
    assert (np.diff(out, axis=1) <= 0).all()
    eq(out, -np.sort(-data, axis=1))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_with_indices_last_dim(descending):
    src = np.sin(np.arange(512 * 512, dtype=np.float32) * np.float32(0.37)).reshape(512, 512)
    values, indices = rg.tensor(src).sort_with_indices(1, descending=descending)
    values, indices = np.asarray(values), np.asarray(indices)
    steps = np.diff(values, axis=1)
    assert (steps <= 0).all() if descending else (steps >= 0).all()
    eq(values, np.take_along_axis(src, indices, axis=1))
    eq(np.sort(indices, axis=1), np.broadcast_to(np.arange(512), (512, 512)))


@pytest.mark.parametrize("descending", [False, True])
def test_argsort_last_dim(descending):
    src = ((np.arange(200 * 1500) * 7919) % 997).astype(np.float32).reshape(200, 1500)
    indices = np.asarray(rg.tensor(src).argsort(1, descending=descending))
    ordered = np.take_along_axis(src, indices, axis=1)
    steps = np.diff(ordered, axis=1)
    assert (steps <= 0).all() if descending else (steps >= 0).all()
    eq(np.sort(indices, axis=1), np.broadcast_to(np.arange(1500), (200, 1500)))


# ---- float.rs, bool.rs, comparison.rs, gather_scatter.rs -----------------------------------------


def test_float_into_int_truncates():
    eq(rg.tensor([1.5, -2.7, 0.0, 255.9]).int(), [1, -2, 0, 255], "int32")
    eq(rg.tensor([0.0, 1.9, 127.5, 255.0]).int(), [0, 1, 127, 255], "int32")


def test_float_arg_and_dim_with_indices():
    eq(rg.tensor([[1.0, 3.0, 2.0]]).argmax(1, keepdim=True), [[1]], "int64")
    eq(rg.tensor([[3.0, 1.0, 2.0]]).argmin(1, keepdim=True), [[1]], "int64")
    values, indices = rg.tensor([[1.0, 5.0], [3.0, 2.0]]).max_dim_with_indices(1)
    eq(values, [[5.0], [3.0]])
    eq(indices, [[1], [0]], "int64")
    values, indices = rg.tensor([[1.0, 5.0], [3.0, 2.0]]).min_dim_with_indices(1)
    eq(values, [[1.0], [2.0]])
    eq(indices, [[0], [1]], "int64")


def test_float_random_f64():
    rg.seed(7)
    t = rg.random((100,), "uniform", dtype="float64")
    assert t.dtype == "float64"
    data = np.asarray(t)
    assert ((data >= 0.0) & (data <= 1.0)).all()


def test_bool_into_int_and_float():
    t = rg.tensor([True, False, True])
    eq(t.int(), [1, 0, 1], "int32")
    eq(t.cast("float64"), [1.0, 0.0, 1.0], "float64")


def test_any_dim_of_views():
    transposed = rg.tensor([[0.0, 1.0], [0.0, 0.0]]).transpose()
    eq(transposed.any(1), [False, True])
    narrowed = rg.tensor([[0.0, 5.0], [0.0, 3.0], [0.0, 0.0]]).narrow(0, 0, 2)
    eq(narrowed.any(1), [True, True])


def test_gather_and_select():
    eq(rg.tensor([10.0, 20.0, 30.0, 40.0]).gather(0, rg.tensor([3, 0, 2])), [40.0, 10.0, 30.0])
    eq(
        rg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).select(0, rg.tensor([2, 0])),
        [[5.0, 6.0], [1.0, 2.0]],
    )


def test_select_2d_dim0_large():
    rows, cols = 2048, 1024
    data = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    idx = np.arange(rows - 1, -1, -2)
    out = rg.tensor(data).select(0, rg.tensor(idx))
    assert out.shape == (len(idx), cols)
    eq(out, data[idx])


# ---- unary.rs, matmul.rs ------------------------------------------------------------------------


def test_round_ties_even_large_float():
    data = np.array([2e18, -2e18, np.finfo(np.float32).max, np.finfo(np.float32).min], np.float32)
    out = np.asarray(rg.tensor(data).round())
    assert out.dtype == np.float32
    eq(out.view(np.uint32), data.view(np.uint32))


ERF_F64 = [
    (0.0, 0.0),
    (1e-10, 1.128379167095512574e-10),
    (0.5, 0.5204998778130465377),
    (0.84, 0.7651427114549945347),
    (0.85, 0.7706680576083525324),
    (1.0, 0.8427007929497148693),
    (1.5, 0.9661051464753107271),
    (2.0, 0.9953222650189527342),
    (3.0, 0.9999779095030014145),
    (6.0, 0.9999999999999999785),
    (30.0, 1.0),
    (-0.5, -0.5204998778130465377),
    (-1.0, -0.8427007929497148693),
    (-3.0, -0.9999779095030014145),
]


def test_erf_f64_is_full_precision():
    x, expected = np.array(ERF_F64).T
    out = rg.tensor(x).erf()
    assert out.dtype == "float64"
    close(out, expected, 1e-14)


def test_erf_f32_full_f32_precision():
    cases = [
        (0.0, 0.0),
        (0.5, 0.5204999),
        (0.84, 0.7651427),
        (0.85, 0.77066806),
        (1.0, 0.8427008),
        (2.0, 0.99532224),
        (6.0, 1.0),
        (-0.5, -0.5204999),
        (-1.0, -0.8427008),
    ]
    x, expected = np.array(cases, dtype=np.float32).T
    close(rg.tensor(x).erf(), expected, 1e-6)


def test_matmul_f64():
    lhs = rg.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    rhs = rg.tensor(np.array([[5.0, 6.0], [7.0, 8.0]]))
    out = lhs.matmul(rhs)
    assert out.dtype == "float64"
    eq(out, [[19.0, 22.0], [43.0, 50.0]])


def test_matmul_batched_transposed_f64():
    q = np.arange(1.0, 9.0).reshape(2, 2, 2)
    k = np.array([1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 2.0]).reshape(2, 2, 2)
    out = rg.tensor(q).matmul(rg.tensor(k).swap_dims(1, 2))
    contiguous = rg.tensor(np.ascontiguousarray(k.transpose(0, 2, 1)))
    eq(out, rg.tensor(q).matmul(contiguous))
    eq(out, q @ k.transpose(0, 2, 1))


# ---- int.rs -------------------------------------------------------------------------------------


def test_int_min_value_abs_and_neg_wrap():
    # two's complement: |i64::MIN| and -i64::MIN wrap to i64::MIN (Burn's wrapping_abs/neg,
    # torch's and NumPy's int64 arithmetic)
    smallest = np.iinfo(np.int64).min
    eq(rg.tensor([smallest]).abs(), [smallest], "int64")
    eq(-rg.tensor([smallest]), [smallest], "int64")


def test_int_shift_by_the_bit_width_does_not_fail():
    one, shift = rg.tensor([1]), rg.tensor([64])
    assert one.bitwise_left_shift(shift).shape == (1,)
    assert one.bitwise_right_shift(shift).shape == (1,)


def test_int_into_float_f64():
    eq(rg.tensor([1, 2, -3]).cast("float64"), [1.0, 2.0, -3.0], "float64")


def test_int_mask_fill_and_mask_where():
    eq(rg.tensor([1, 2, 3, 4]).mask_fill(rg.tensor([True, False, True, False]), 0), [0, 2, 0, 4])
    eq(
        rg.tensor([10, 20, 30, 40]).mask_fill(rg.tensor([False, True, False, True]), -1),
        [10, -1, 30, -1],
    )
    out = rg.tensor([1, 2, 3, 4]).mask_fill(rg.tensor([True, True, False, False]), 255)
    eq(out, [255, 255, 3, 4], "int64")
    eq(rg.tensor([100, 200, 300]).mask_fill(rg.tensor([True, False, True]), 0), [0, 200, 0])
    values = rg.tensor([10, 20, 30, 40])
    eq(
        rg.tensor([1, 2, 3, 4]).mask_where(rg.tensor([True, False, True, False]), values),
        [10, 2, 30, 4],
        "int64",
    )
    eq(
        rg.tensor([1, 2, 3, 4]).mask_where(rg.tensor([False, True, False, True]), values),
        [1, 20, 3, 40],
    )


def test_int_gather_select_and_adds():
    t = rg.tensor([[10, 20, 30], [40, 50, 60]])
    eq(t.gather(1, rg.tensor([[2, 0], [1, 2]])), [[30, 10], [50, 60]], "int64")
    eq(t.select(1, rg.tensor([0, 1])), [[10, 20], [40, 50]], "int64")
    out = rg.tensor([[0, 0, 0]]).scatter(
        1, rg.tensor([[0, 2, 1]]), rg.tensor([[10, 20, 30]]), "add"
    )
    eq(out, [[10, 30, 20]], "int64")
    out = rg.tensor([1, 2, 3]).select_assign(0, rg.tensor([0, 2]), rg.tensor([10, 20]), "add")
    eq(out, [11, 2, 23], "int64")


def test_int_cumulative():
    eq(rg.tensor([1, 2, 3, 4]).cumsum(0), [1, 3, 6, 10], "int64")
    eq(rg.tensor([1, 2, 3, 4]).cumprod(0), [1, 2, 6, 24], "int64")
    eq(rg.tensor([3, 1, 4, 1, 5]).cummin(0), [3, 1, 1, 1, 1], "int64")
    eq(rg.tensor([3, 1, 4, 1, 5]).cummax(0), [3, 3, 4, 4, 5], "int64")


def test_int_random_stays_in_range():
    rg.seed(11)
    t = rg.randint(0, 11, (100,))
    assert t.dtype == "int64"
    data = np.asarray(t)
    assert ((data >= 0) & (data <= 10)).all()


# ---- attention.rs: against Burn's naive reference ----------------------------------------------


def attention_ref(q, k, v, mask=None, bias=None, scale=None, causal=False):
    """Burn's ``attention_naive``: scores = q k^T * scale (+ bias), masked (Burn's mask is true
    where a key is hidden; its causal mask is aligned to the bottom right, offset seq_kv -
    seq_q), softmax over the keys, times v; float64."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    if bias is not None:
        scores = scores + bias
    hidden = np.zeros(scores.shape, dtype=bool)
    if mask is not None:
        hidden |= mask
    if causal:
        seq_q, seq_kv = scores.shape[-2:]
        offset = seq_kv - seq_q
        hidden |= np.arange(seq_kv)[None, :] > np.arange(seq_q)[:, None] + offset
    # a row with every key hidden attends to nothing: zeros, not NaN (Burn's
    # test_attention_fully_masked_rows_no_nan, and torch's)
    scores = np.where(hidden, -np.inf, scores)
    top = np.where(hidden.all(axis=-1, keepdims=True), 0.0, scores.max(axis=-1, keepdims=True))
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    return np.divide(weights, total, out=np.zeros_like(weights), where=total > 0) @ v


def attention(q, k, v, mask=None, bias=None, scale=None, causal=False, **kwargs):
    """Burn's options through torch's signature: its hiding mask is the complement of torch's
    boolean attn_mask, a bias is torch's float attn_mask, and its bottom-right causal mask is
    given as a mask when the lengths differ (torch's is_causal is top-left aligned)."""
    seq_q, seq_kv = q.shape[-2], k.shape[-2]
    if (causal and seq_q != seq_kv) or (mask is not None and bias is not None):
        hidden = np.zeros(q.shape[:-1] + (seq_kv,), dtype=bool)
        if mask is not None:
            hidden = hidden | mask
        if causal:
            hidden = hidden | (
                np.arange(seq_kv)[None, :] > np.arange(seq_q)[:, None] + seq_kv - seq_q
            )
        additive = np.where(hidden, -np.inf, 0.0) + (0.0 if bias is None else bias)
        attn_mask, is_causal = rg.tensor(additive.astype(np.float32)), False
    elif mask is not None:
        attn_mask, is_causal = rg.tensor(~mask), causal
    elif bias is not None:
        attn_mask, is_causal = rg.tensor(np.asarray(bias, np.float32)), causal
    else:
        attn_mask, is_causal = None, causal
    return F.scaled_dot_product_attention(
        rg.tensor(q),
        rg.tensor(k),
        rg.tensor(v),
        attn_mask,
        is_causal=is_causal,
        scale=scale,
        **kwargs,
    )


def sin_fill(shape, shift):
    return np.sin(
        np.arange(int(np.prod(shape)), dtype=np.float32) * np.float32(0.1) + shift
    ).reshape(shape)


@pytest.mark.parametrize("q_heads, kv_heads", [(4, 2), (4, 1)], ids=["gqa", "mqa"])
def test_attention_grouped_matches_repeated_kv(q_heads, kv_heads):
    q = sin_fill((2, q_heads, 3, 5), 0.0)
    k = sin_fill((2, kv_heads, 4, 5), 1.0)
    v = sin_fill((2, kv_heads, 4, 5), 2.0)
    grouped = attention(q, k, v, enable_gqa=True)
    repeats = q_heads // kv_heads
    full = attention(q, np.repeat(k, repeats, axis=1), np.repeat(v, repeats, axis=1))
    close(grouped, full, 1e-5)
    close(grouped, attention_ref(q, np.repeat(k, repeats, 1), np.repeat(v, repeats, 1)), 1e-5)


def test_attention_bias_and_mask_broadcast_across_batch_and_heads():
    q, k, v = sin_fill((2, 2, 3, 4), 0.0), sin_fill((2, 2, 5, 4), 1.0), sin_fill((2, 2, 5, 4), 2.0)
    bias = np.sin(np.arange(15, dtype=np.float32) * np.float32(0.4)).reshape(1, 1, 3, 5)
    broadcast = attention(q, k, v, bias=bias)
    close(broadcast, attention(q, k, v, bias=np.broadcast_to(bias, (2, 2, 3, 5)).copy()), 1e-5)
    close(broadcast, attention_ref(q, k, v, bias=bias), 1e-5)
    mask = (np.arange(15) % 5 >= 3).reshape(1, 1, 3, 5)
    broadcast = attention(q, k, v, mask=mask)
    close(broadcast, attention(q, k, v, mask=np.broadcast_to(mask, (2, 2, 3, 5)).copy()), 1e-5)
    close(broadcast, attention_ref(q, k, v, mask=mask), 1e-5)


def test_attention_bias_incompatible_dim_raises():
    q = rg.zeros((2, 3, 4, 8))
    with pytest.raises(rg.ShapeError, match="attention"):
        F.scaled_dot_product_attention(q, q.narrow(2, 0, 4), q, attn_mask=rg.zeros((2, 2, 4, 4)))


def test_attention_multi_tile_seq_kv():
    q = np.zeros((1, 1, 2, 4), np.float32)
    q[0, 0, 0, 0] = q[0, 0, 1, 1] = 1.0
    k = np.full((1, 1, 128, 4), 0.1, np.float32)
    v = np.stack([np.arange(128.0), 127.0 - np.arange(128.0)], axis=-1).astype(np.float32)
    out = np.asarray(attention(q, k, v[None, None]))
    close(out.reshape(-1), [63.5, 63.5, 63.5, 63.5], 0.1)


def test_attention_multi_tile_causal():
    q = np.zeros((1, 1, 4, 2), np.float32)
    q[..., 0] = 1.0
    k = np.zeros((1, 1, 128, 2), np.float32)
    k[..., 0] = 1.0
    v = np.arange(128.0, dtype=np.float32).reshape(1, 1, 128, 1)
    # Burn's causal offset is seq_kv - seq_q = 124: query i sees keys 0..=124 + i
    close(np.asarray(attention(q, k, v, causal=True)).reshape(-1), [62.0, 62.5, 63.0, 63.5], 0.1)


def test_attention_tile_boundary_mask():
    q = np.array([1.0, 0.0], np.float32).reshape(1, 1, 1, 2)
    k = np.tile(np.array([1.0, 0.0], np.float32), (128, 1)).reshape(1, 1, 128, 2)
    v = np.arange(128.0, dtype=np.float32).reshape(1, 1, 128, 1)
    mask = (np.arange(128) < 64).reshape(1, 1, 1, 128)
    close(np.asarray(attention(q, k, v, mask=mask)).reshape(-1), [95.5], 0.1)


def test_attention_non_uniform_scores_across_tiles():
    k = np.where(np.arange(128) < 64, 0.1, 5.0).astype(np.float32).reshape(1, 1, 128, 1)
    v = np.where(np.arange(128) < 64, 0.0, 1.0).astype(np.float32).reshape(1, 1, 128, 1)
    out = np.asarray(attention(np.ones((1, 1, 1, 1), np.float32), k, v)).reshape(-1)
    assert out[0] > 0.99


def test_attention_partial_last_tile():
    q = np.full((1, 1, 2, 2), 0.1, np.float32)
    k = np.full((1, 1, 100, 2), 0.1, np.float32)
    v = np.arange(100.0, dtype=np.float32).reshape(1, 1, 100, 1)
    close(np.asarray(attention(q, k, v)).reshape(-1), [49.5, 49.5], 0.1)


def burn_fill(shape):
    n = int(np.prod(shape))
    return ((np.arange(n) % 997) / 997.0 - 0.5).astype(np.float32).reshape(shape)


def burn_mask(shape):
    return ((np.arange(int(np.prod(shape))) * 997) % 100 < 30).reshape(shape)


NAIVE_CASES = {
    # batch, heads, seq_q, seq_kv, head_dim, val_dim, mask, bias, causal, scale
    "basic_4x4": (1, 1, 4, 4, 8, 8, False, False, False, None),
    "multi_head_batch": (2, 4, 8, 8, 16, 16, False, False, False, None),
    "cross_attn": (1, 2, 4, 32, 16, 16, False, False, False, None),
    "multi_tile": (1, 1, 4, 128, 16, 16, False, False, False, None),
    "causal": (1, 2, 16, 16, 32, 32, False, False, True, None),
    "scale_and_causal": (2, 2, 16, 16, 32, 32, False, False, True, 0.05),
    "large_causal": (1, 1, 32, 256, 64, 64, False, False, True, None),
    "with_mask": (1, 2, 8, 8, 16, 16, True, False, False, None),
    "with_bias": (1, 2, 8, 8, 16, 16, False, True, False, None),
    "mask_bias_causal": (2, 2, 16, 128, 32, 32, True, True, True, None),
    "partial_tile": (1, 1, 4, 100, 16, 16, False, False, False, None),
    "partial_tile_causal": (1, 2, 8, 100, 16, 16, False, False, True, None),
}


@pytest.mark.parametrize("name", list(NAIVE_CASES))
def test_attention_matches_naive(name):
    batch, heads, seq_q, seq_kv, head_dim, val_dim, with_mask, with_bias, causal, scale = (
        NAIVE_CASES[name]
    )
    q = burn_fill((batch, heads, seq_q, head_dim))
    k = burn_fill((batch, heads, seq_kv, head_dim))
    v = burn_fill((batch, heads, seq_kv, val_dim))
    scores = (batch, heads, seq_q, seq_kv)
    mask = burn_mask(scores) if with_mask else None
    bias = burn_fill(scores) if with_bias else None
    out = attention(q, k, v, mask, bias, scale, causal)
    expected = attention_ref(q, k, v, mask, bias, scale, causal)
    np.testing.assert_allclose(np.asarray(out, np.float64), expected, rtol=1e-4, atol=1e-4)


def test_attention_f64():
    q = np.array([1.0, 0.0, 0.0, 1.0]).reshape(1, 1, 2, 2)
    out = attention(q, q, np.array([10.0, 20.0]).reshape(1, 1, 2, 1))
    assert out.dtype == "float64"
    close(np.asarray(out).reshape(-1), [13.30, 16.70], 0.1)


# ---- binary.rs: shared operands (Burn's in-place paths cannot fire) ------------------------------


@pytest.mark.parametrize(
    "op, expected",
    [
        ("add", [12.0, 24.0, 35.0, 48.0]),
        ("sub", [8.0, 16.0, 25.0, 32.0]),
        ("mul", [20.0, 80.0, 150.0, 320.0]),
        ("div", [5.0, 5.0, 6.0, 5.0]),
    ],
)
def test_binary_swapped_inplace_shared_lhs(op, expected):
    a = rg.tensor([[10.0, 20.0], [30.0, 40.0]])
    keep_alive = a
    eq(OPS[op](a, rg.tensor([[2.0, 4.0], [5.0, 8.0]])).reshape((-1,)), expected)
    eq(keep_alive, [[10.0, 20.0], [30.0, 40.0]])


def test_binary_broadcast_lhs_non_unique_rhs_sub():
    b = rg.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    keep_alive = b
    eq((rg.tensor([[2.0, 4.0, 8.0]]) - b).reshape((-1,)), [1.0, 2.0, 4.0, -6.0, -12.0, -24.0])
    eq(keep_alive, [[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])


def test_binary_fully_broadcast_scalar_lhs_div():
    scalar = rg.tensor([100.0]).expand((2, 2, 3))
    x = rg.arange(1, 13).float().reshape((2, 2, 3))
    eq((scalar / x).reshape((-1,)), (np.float32(100.0) / np.arange(1, 13, dtype=np.float32)))


def test_binary_broadcast_lhs_permuted_rhs_sub():
    mean = (rg.arange(0, 8) * 10).float().reshape((2, 4, 1))
    x = rg.arange(1, 25).float().reshape((2, 3, 4)).swap_dims(1, 2)
    reference = [
        (b * 4 + c) * 10 - (b * 12 + r * 4 + c + 1)
        for b in range(2)
        for c in range(4)
        for r in range(3)
    ]
    eq((mean - x).reshape((-1,)), reference)


# ---- tensor.rs: contiguous copies of views ------------------------------------------------------


def test_contiguous_of_views():
    empty = rg.arange(0, 6).float().narrow(0, 3, 0)
    assert empty.shape == (0,) and empty.contiguous().shape == (0,)
    assert np.asarray(empty.contiguous()).size == 0
    prefix = rg.arange(0, 40).float().reshape((8, 5)).narrow(0, 0, 5).contiguous()
    eq(prefix, np.arange(25.0).reshape(5, 5))
    data = np.arange(48 * 20, dtype=np.float32).reshape(1, 48, 4, 5)
    eq(rg.tensor(data).permute([0, 2, 3, 1]).contiguous(), data.transpose(0, 2, 3, 1))
    data = np.arange(72, dtype=np.float32).reshape(1, 2, 4, 3, 3)
    out = rg.tensor(data).permute([0, 2, 1, 3, 4]).contiguous()
    assert out.shape == (1, 4, 2, 3, 3)
    eq(out, data.transpose(0, 2, 1, 3, 4))
    stepped = rg.arange(0, 18).float().reshape((6, 3)).slice([slice(0, 6, 2), slice(0, None)])
    eq(stepped.contiguous(), [[0.0, 1.0, 2.0], [6.0, 7.0, 8.0], [12.0, 13.0, 14.0]])


def test_reshape_and_transpose_shapes():
    t = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert t.reshape((3, 2)).shape == (3, 2)
    assert t.transpose().shape == (3, 2)
    eq(t.transpose().reshape((-1,)), [1.0, 4.0, 2.0, 5.0, 3.0, 6.0])


# ---- burn-tch src/tensor.rs: empty broadcasts and aliased views ----------------------------------
# (crates/burn-tch, the libtorch backend: its regressions for #5287 and #5375)


def test_mul_broadcasts_zero_sized_dim():
    one, empty = rg.tensor([1.0]), rg.zeros((0,))
    assert (one * empty).shape == (0,)
    assert (empty * one).shape == (0,)
    assert (rg.tensor([[1.0], [2.0]]) * rg.zeros((2, 0))).shape == (2, 0)
    assert (rg.zeros((1, 0)) * rg.zeros((2, 0))).shape == (2, 0)
    lhs = rg.zeros((2, 0))
    keep_alive = lhs
    assert (lhs * rg.zeros((1, 0))).shape == (2, 0)
    assert keep_alive.shape == (2, 0)


def test_view_ops_do_not_write_over_their_parent():
    parent = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    for view in (parent.permute([1, 0]), parent.swap_dims(0, 1), parent.flip([0])):
        out = view * 10.0 + view
        assert out.shape == (2, 2)
        eq(parent, [[1.0, 2.0], [3.0, 4.0]])


def test_bool_and_over_permuted_alias():
    # x & x^T, the attention-mask pattern Burn's importer generates
    mask = rg.tensor([[True, False], [True, True]])
    expected = [[True, False], [False, True]]
    eq(mask & mask.permute([1, 0]), expected, "bool")
    eq(mask.logical_and(mask.permute([1, 0])), expected, "bool")
    eq(mask, [[True, False], [True, True]])


# ---- burn-ndarray src/ops/{adaptive_avgpool,matmul,base}.rs --------------------------------------


@pytest.mark.parametrize(
    "size, outputs, windows",
    [
        (4, 2, [(0, 2), (2, 4)]),
        (5, 3, [(0, 2), (1, 4), (3, 5)]),
        (4, 4, [(0, 1), (1, 2), (2, 3), (3, 4)]),
        (2, 3, [(0, 1), (0, 2), (1, 2)]),
        (8, 1, [(0, 8)]),
    ],
    ids=["basic", "asymmetric", "same_size", "bigger_output", "output_1"],
)
def test_adaptive_avg_pool_windows(size, outputs, windows):
    # Burn's start_index/end_index: floor(i * n / m) .. ceil((i + 1) * n / m), as torch's; seen
    # through the pool of 10**k values, where each window's mean names its members
    x = (10.0 ** np.arange(size)).astype(np.float64)
    out = F.adaptive_avg_pool1d(rg.tensor(x.reshape(1, 1, size)), outputs)
    expected = [x[start:end].mean() for start, end in windows]
    np.testing.assert_allclose(np.asarray(out).reshape(-1), expected, rtol=1e-12)


@pytest.mark.parametrize(
    "lhs, rhs, out",
    [
        ((5, 3), (3, 7), (5, 7)),
        ((4, 5, 3), (4, 3, 7), (4, 5, 7)),
        ((1, 5, 3), (4, 3, 7), (4, 5, 7)),
        ((4, 5, 3), (1, 3, 7), (4, 5, 7)),
        ((1, 4, 5, 3), (8, 1, 3, 7), (8, 4, 5, 7)),
    ],
    ids=["plain", "stacked", "broadcast_left", "broadcast_right", "multi_broadcast"],
)
def test_matmul_output_shape(lhs, rhs, out):
    a = np.arange(np.prod(lhs), dtype=np.float64).reshape(lhs) % 7 - 3
    b = np.arange(np.prod(rhs), dtype=np.float64).reshape(rhs) % 5 - 2
    result = rg.tensor(a).matmul(rg.tensor(b))
    assert result.shape == out
    eq(result, a @ b)


def test_cat_of_an_unsqueezed_tensor_is_row_major():
    t = rg.arange(1, 25).reshape((4, 6, 1))
    out = rg.cat([t, rg.zeros((4, 6, 1), dtype="int64")], 2)
    assert out.shape == (4, 6, 2)
    expected = np.stack([np.arange(1, 25).reshape(4, 6), np.zeros((4, 6), np.int64)], axis=2)
    eq(out, expected, "int64")
    eq(out.reshape((-1,)), expected.reshape(-1))


# ---- burn-nn src/modules/rnn/{gru,basic}.rs: the cases test_burn_tensor_ports_10 left ---------


def gate(input_weight, input_bias, hidden_weight, hidden_bias):
    """A Burn gate controller: Linear weights are [in, out] (load_gates transposes them)."""
    return {
        "input_weight": input_weight,
        "input_bias": input_bias,
        "hidden_weight": hidden_weight,
        "hidden_bias": hidden_bias,
    }


GRU_GATES = {
    "forward.update_gate": gate(
        [[-0.2811, 0.5090, 0.5018], [0.3391, -0.4236, 0.1081]],
        [0.2932, -0.3519, -0.5715],
        [[-0.3471, 0.5214, 0.0961], [0.0545, -0.4904, -0.1875], [-0.5702, 0.4457, 0.3568]],
        [-0.0100, 0.4518, -0.4102],
    ),
    "forward.reset_gate": gate(
        [[0.4414, -0.1353, -0.1265], [0.4792, 0.5304, 0.1165]],
        [-0.2524, 0.3333, 0.1033],
        [[-0.2695, -0.0677, -0.4557], [0.1472, -0.2345, -0.2662], [-0.2660, 0.3830, -0.1630]],
        [0.1663, 0.2391, 0.1826],
    ),
    "forward.new_gate": gate(
        [[0.4266, 0.2784, 0.4451], [0.0782, -0.0815, 0.0853]],
        [-0.2231, -0.4428, 0.4737],
        [[0.0900, -0.1821, 0.2430], [0.4665, 0.1551, 0.5155], [0.0631, -0.1566, 0.3337]],
        [0.0364, -0.3941, 0.1780],
    ),
}


def test_gru_against_pytorch():
    gru = rg.nn.GRU(2, 3, batch_first=True)
    load_gates(gru, GRU_GATES, ("reset_gate", "update_gate", "new_gate"), ("forward",))
    x = rg.tensor(
        [[[-0.11147, 0.12036], [-0.36963, -0.24042], [-1.19692, 0.20927], [-0.97236, -0.75505]]]
    )
    h0 = rg.tensor([[[0.3239, -0.10852, 0.21033]]])
    with_h0 = [
        [0.05665, -0.34932, 0.43267],
        [-0.1737, -0.49246, 0.38099],
        [-0.35401, -0.68099, 0.05061],
        [-0.47854, -0.70427, -0.13648],
    ]
    without_h0 = [
        [-0.0985, -0.31661, 0.36126],
        [-0.24563, -0.47784, 0.34609],
        [-0.39497, -0.67659, 0.03083],
        [-0.50146, -0.70066, -0.14894],
    ]
    # Burn's Tolerance::permissive: 1e-2 relative and absolute
    output, h = gru(x, h0)
    np.testing.assert_allclose(np.asarray(output)[0], with_h0, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(np.asarray(h)[0, 0], with_h0[-1], rtol=1e-2, atol=1e-2)
    output, _ = gru(x)
    np.testing.assert_allclose(np.asarray(output)[0], without_h0, rtol=1e-2, atol=1e-2)


def test_rnn_forward_reverse_sequence():
    # Burn's RnnConfig::with_reverse(true) runs the sequence backwards; torch has no such
    # flag, so the sequence is flipped in time before a forward nn.RNN
    rnn = rg.nn.RNN(1, 1, batch_first=True)
    load_gates(rnn, scalar_gates({"gate": 0.5}, ("gate",)), ("gate",), ("forward",))
    x = rg.tensor([[[0.1], [0.2], [0.3]]])
    output, h = rnn(x.flip([1]))
    # t=2: tanh(0.15); t=1: tanh(0.1 + 0.5 * 0.1488850); t=0: tanh(0.05 + 0.5 * 0.17269433)
    close(h[0], [[0.135508]], 1e-5)
    assert output.shape == (1, 3, 1)
    close(output.flip([1])[0, 0], [0.135508], 1e-5)
