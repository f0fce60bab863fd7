"""torch's tensor surface (API.md section 10), each name against torch: the same code run with
``retrograd`` and with ``torch`` (``surface_testing``), values, dtypes and gradients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from nn_testing import check_finite_differences
from surface_testing import dtype_name, same_gradients, same_values

RNG = np.random.default_rng(23)


def _a(*shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


def _distinct(*shape: int) -> np.ndarray:
    n = int(np.prod(shape))
    return (RNG.permutation(n) * 0.37 - n * 0.15).reshape(shape)


# -- differentiable functions and methods: (name, fn(lib, *xs), inputs) --------------------------
GRADIENT_CASES = [
    ("exp", lambda lib, x: lib.exp(x), [_a(3, 4)]),
    ("log", lambda lib, x: lib.log(x), [_a(3, 4, low=0.2)]),
    ("sin_cos_tan", lambda lib, x: lib.sin(x) * lib.cos(x) + lib.tan(x * 0.3), [_a(3, 4)]),
    ("sigmoid_tanh", lambda lib, x: lib.sigmoid(x) + lib.tanh(x), [_a(3, 4)]),
    ("sqrt_rsqrt", lambda lib, x: lib.sqrt(x) + lib.rsqrt(x) + x.rsqrt(), [_a(3, 4, low=0.3)]),
    ("log2_log10_log1p", lambda lib, x: lib.log2(x) + x.log10() + lib.log1p(x), [_a(5, low=0.2)]),
    ("abs_neg_square", lambda lib, x: lib.abs(x) + lib.neg(x) * lib.square(x), [_a(3, 4)]),
    (
        "pow",
        lambda lib, x, y: lib.pow(x, 2.5) + lib.pow(2.0, y) + lib.pow(x, y),
        [_a(3, low=0.5), _a(3)],
    ),
    (
        "add_alpha",
        lambda lib, x, y: lib.add(x, y, alpha=-0.5) + x.sub(y, alpha=2),
        [_a(3, 4), _a(4)],
    ),
    (
        "mul_div",
        lambda lib, x, y: lib.mul(x, y) + lib.div(x, y) + lib.divide(x, 3.0),
        [_a(3), _a(3, low=0.5)],
    ),
    ("reciprocal", lambda lib, x: x.reciprocal(), [_a(4, low=0.5)]),
    (
        "clamp_tensor_bounds",
        lambda lib, x, lo, hi: lib.clamp(x, min=lo, max=hi),
        [_a(3, 4), _a(3, 4, high=-0.5), _a(4, low=0.5)],
    ),
    (
        "clamp_clip",
        lambda lib, x: lib.clamp(x, -0.5, 0.7) + x.clip(min=0.1) + lib.clip(x, max=0.2),
        [_a(3, 4)],
    ),
    (
        "addcmul_addcdiv",
        lambda lib, x, a, b: x.addcmul(a, b, value=0.5) + lib.addcdiv(x, a, b, value=2.0),
        [_a(3), _a(3), _a(3, low=0.5)],
    ),
    ("lerp_scalar", lambda lib, x, y: x.lerp(y, 0.3) + lib.lerp(x, y, 0.7), [_a(3, 4), _a(3, 4)]),
    (
        "lerp_tensor",
        lambda lib, x, y, w: x.lerp(y, w),
        [_a(3, 4), _a(3, 4), _a(3, 4, low=0.0, high=1.0)],
    ),
    (
        "maximum_minimum",
        lambda lib, x, y: lib.maximum(x, y) + lib.minimum(x, y) * 2,
        [_a(3, 4), _a(4)],
    ),
    ("max_elementwise", lambda lib, x, y: lib.max(x, y) - lib.min(x, y), [_a(3, 4), _a(3, 4)]),
    ("maximum_ties", lambda lib, x: lib.maximum(x, x.detach()), [_a(3)]),
    (
        "max_dim",
        lambda lib, x: lib.max(x, 1).values.sum() + lib.min(x, 0, keepdim=True)[0],
        [_distinct(3, 4)],
    ),
    ("max_method", lambda lib, x: x.max(dim=-1).values * x.max(), [_distinct(3, 4)]),
    ("amax_amin", lambda lib, x: x.amax((0, 2)) + lib.amin(x, dim=1).sum(), [_distinct(2, 3, 4)]),
    ("amax_ties", lambda lib, x: lib.amax(x, 1), [np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])]),
    (
        "sum_mean_dims",
        lambda lib, x: lib.sum(x, (0, 2)).sum() + lib.mean(x, dim=1, keepdim=True).sum(1)[0],
        [_a(2, 3, 4)],
    ),
    (
        "var_std",
        lambda lib, x: x.var(1) + lib.var(x, 1, keepdim=True).sum(1) + x.std(1, unbiased=False),
        [_a(3, 5)],
    ),
    (
        "var_correction",
        lambda lib, x: x.var(dim=0, correction=0) + lib.std(x, dim=0, correction=2),
        [_a(5, 3)],
    ),
    ("var_all", lambda lib, x: lib.var(x) + x.std() + lib.std(x, unbiased=False), [_a(3, 4)]),
    (
        "var_mean",
        lambda lib, x: (
            lib.var_mean(x, 1)[0]
            + lib.var_mean(x, 1)[1]
            + lib.std_mean(x, 0, keepdim=True)[0].sum()
        ),
        [_a(3, 4)],
    ),
    (
        "norm_2",
        lambda lib, x: x.norm() + lib.norm(x, dim=1).sum() + x.norm(2, 0, keepdim=True).sum(),
        [_a(3, 4)],
    ),
    (
        "norm_p",
        lambda lib, x: x.norm(1) + x.norm(3.0, dim=1).sum() + x.norm(float("inf")),
        [_distinct(3, 4)],
    ),
    (
        "norm_of_zero_row",
        lambda lib, x: (x * lib.tensor([[0.0], [1.0]], dtype=x.dtype)).norm(dim=1),
        [_a(2, 3)],
    ),
    ("logsumexp", lambda lib, x: lib.logsumexp(x, 1) + x.logsumexp((0, 1)), [_a(3, 4) * 30]),
    ("prod_dim", lambda lib, x: lib.prod(x, 1) + x.prod(0, keepdim=True).sum(), [_a(3, 4)]),
    ("median", lambda lib, x: x.median() + lib.median(x, 1).values.sum(), [_distinct(3, 4)]),
    (
        "sort_topk",
        lambda lib, x: lib.sort(x, 1, descending=True)[0] + lib.topk(x, 4, 1).values,
        [_distinct(3, 4)],
    ),
    ("cumsum_cumprod", lambda lib, x: lib.cumsum(x, 1) + lib.cumprod(x, 0), [_a(3, 4)]),
    (
        "matmul_mm_bmm",
        lambda lib, a, b, c: (
            lib.matmul(a, b).sum() + lib.mm(a, b) + lib.bmm(c, c.transpose(1, 2)).sum()
        ),
        [_a(3, 4), _a(4, 3), _a(2, 3, 4)],
    ),
    (
        "dot_outer_mv",
        lambda lib, v, m: lib.outer(v, v).sum() + lib.dot(v, v) + m.mv(v).sum() + v.outer(v)[0, 0],
        [_a(4), _a(3, 4)],
    ),
    ("einsum_matmul", lambda lib, a, b: lib.einsum("ij,jk->ik", a, b), [_a(3, 4), _a(4, 5)]),
    (
        "einsum_attention",
        lambda lib, q, k: lib.einsum("bhqd,bhkd->bhqk", q, k),
        [_a(2, 2, 3, 4), _a(2, 2, 5, 4)],
    ),
    (
        "einsum_implicit_trace_diag",
        lambda lib, a, b: (
            lib.einsum("ii", a) + lib.einsum("ij,ij", a, b) + lib.einsum("ii->i", a).sum()
        ),
        [_a(3, 3), _a(3, 3)],
    ),
    (
        "einsum_ellipsis_sum",
        lambda lib, a, b: (
            lib.einsum("...ij,...jk->...ik", a, b).sum(0) + lib.einsum("bij->j", a).sum()
        ),
        [_a(2, 3, 4), _a(2, 4, 3)],
    ),
    (
        "einsum_outer_three",
        lambda lib, a, b, c: lib.einsum("i,j,k->ijk", a, b, c),
        [_a(2), _a(3), _a(4)],
    ),
    (
        "einsum_list_form",
        lambda lib, a, b: lib.einsum("bn,anm,bm->ba", a, b, a),
        [_a(2, 3), _a(4, 3, 3)],
    ),
    (
        "where",
        lambda lib, c, x, y: lib.where(c, x, y) + lib.where(~c, x, 0.0) + lib.where(c, 2.0, y),
        [_a(3, 4) > 0, _a(3, 4), _a(4)],
    ),
    ("tensor_where_method", lambda lib, c, x, y: x.where(c, y), [_a(3, 4) > 0, _a(3, 4), _a(3, 4)]),
    (
        "unbind_stack",
        lambda lib, x: lib.stack(lib.unbind(x, 1), 0) * 2 + lib.stack(x.unbind(), 1),
        [_a(3, 3)],
    ),
    (
        "split_chunk",
        lambda lib, x: (
            lib.cat(lib.split(x, [1, 3], 1)[::-1], 1) + lib.cat(lib.chunk(x, 2, 0)[::-1], 0)
        ),
        [_a(4, 4)],
    ),
    (
        "tensor_split",
        lambda lib, x: (
            lib.cat(lib.tensor_split(x, 3, 1)[::-1], 1) + x.tensor_split([1, 2])[0].sum()
        ),
        [_a(2, 5)],
    ),
    (
        "roll",
        lambda lib, x: lib.roll(x, 1, 0) + x.roll((2, -1), (1, 0)) + lib.roll(x, 3),
        [_a(3, 4)],
    ),
    (
        "repeat_interleave",
        lambda lib, x: (
            lib.repeat_interleave(x, 2, 0).sum(0) + x.repeat_interleave(3).reshape(3, -1)[0].sum()
        ),
        [_a(3, 4)],
    ),
    (
        "repeat_interleave_counts",
        lambda lib, x: x.repeat_interleave(lib.tensor([1, 0, 2]), dim=0),
        [_a(3, 2)],
    ),
    (
        "tile_repeat",
        lambda lib, x: x.tile(2)[:, :2] + x.tile((2, 1, 1)).sum(0) + x.repeat(1, 2)[:, 1:3],
        [_a(2, 2)],
    ),
    (
        "expand_as_view_as",
        lambda lib, x, y: x.expand_as(y) + y.view_as(y) + x.reshape_as(x),
        [_a(1, 4), _a(3, 4)],
    ),
    (
        "t_T_mT",
        lambda lib, x, y: x.t() + x.T + y.mT.sum(0) + y.transpose(1, 2).sum(0),
        [_a(3, 3), _a(2, 3, 3)],
    ),
    (
        "permute_varargs_movedim",
        lambda lib, x: (
            x.permute(2, 0, 1).sum(0) + lib.movedim(x, 0, 2).sum(1).T + x.swapaxes(0, 2).sum(0).T
        ),
        [_a(2, 3, 4)],
    ),
    (
        "squeeze_unsqueeze_unflatten",
        lambda lib, x: (
            lib.squeeze(lib.unsqueeze(x, 1), 1)
            + x.unflatten(1, (2, 2)).flatten(1)
            + x.ravel().reshape(3, 4)
        ),
        [_a(3, 4)],
    ),
    ("flip", lambda lib, x: x.flip(0) + lib.flip(x, (0, 1)) + x.flip(-1, 0), [_a(3, 4)]),
    (
        "diag_diagonal_trace",
        lambda lib, x, v: (
            lib.diag(x).sum()
            + x.diagonal(1).sum()
            + lib.diag(v).sum(0)
            + lib.trace(x)
            + x.diagonal(-1, 0, 1).sum()
        ),
        [_a(4, 4), _a(4)],
    ),
    ("diff", lambda lib, x: lib.diff(x).sum(1) + x.diff(dim=0, n=2).sum(1), [_a(3, 4)]),
    ("cdist", lambda lib, x, y: lib.cdist(x, y), [_a(3, 4), _a(2, 4)]),
    ("softmax_fn", lambda lib, x: lib.softmax(x, 1) + lib.log_softmax(x, 0), [_a(3, 4)]),
    (
        "gather_take_masked_select",
        lambda lib, x: (
            lib.gather(x, 1, lib.tensor([[0, 0], [1, 0], [2, 1]])).sum()
            + x.take(lib.tensor([0, 5, 11])).sum()
            + lib.masked_select(x, x > 0).sum()
        ),
        [_a(3, 4)],
    ),
    (
        "index_select",
        lambda lib, x: (
            lib.index_select(x, 1, lib.tensor([2, 0, 2])) + x.index_select(1, lib.tensor([1, 1, 0]))
        ),
        [_a(3, 4)],
    ),
    (
        "index_add_copy_fill",
        lambda lib, x, s: (
            x.index_add(0, lib.tensor([2, 0, 2]), s, alpha=2.0)
            + x.index_copy(0, lib.tensor([1, 0, 2]), s)
            + x.index_fill(1, lib.tensor([0, 3]), -1.0)
        ),
        [_a(3, 4), _a(3, 4)],
    ),
    (
        "scatter_forms",
        lambda lib, x, s: (
            x.scatter(1, lib.tensor([[0, 1], [2, 3], [1, 0]]), s)
            + x.scatter(0, lib.tensor([[0, 1, 2, 0]]), 2.5)
            + x.scatter_add(1, lib.tensor([[0, 0], [1, 1], [3, 3]]), s)
        ),
        [_a(3, 4), _a(3, 2)],
    ),
    ("masked_scatter", lambda lib, x, s: x.masked_scatter(x > 0, s), [_a(3, 4), _a(12)]),
    (
        "advanced_index_rows_cols",
        lambda lib, x: x[lib.tensor([0, 2, 2]), lib.tensor([1, 0, 3])] + x[[2, 1, 0], 1],
        [_a(3, 4)],
    ),
    (
        "advanced_index_mask",
        lambda lib, x: x[x > 0.5].sum() + x[lib.tensor([True, False, True])].sum(0).sum(),
        [_a(3, 4)],
    ),
    (
        "advanced_index_separated",
        lambda lib, x: x[lib.tensor([0, 1]), :, lib.tensor([2, 3])] + x[0, :, [1, 2]].T,
        [_a(2, 3, 4)],
    ),
    (
        "advanced_index_negative",
        lambda lib, x: x[:, lib.tensor([-1, 0, -3])] + x[..., [-2, 1, 0]],
        [_a(2, 3)],
    ),
    (
        "addcmul_broadcast",
        lambda lib, x, a, b: lib.addcmul(x, a, b),
        [_a(3, 1), _a(1, 4), _a(3, 4)],
    ),
    ("float_power", lambda lib, x: lib.float_power(x, 2), [_a(3, low=0.5)]),
    ("erfinv", lambda lib, x: lib.erfinv(x) + x.erfinv(), [_a(3, 4, low=-0.95, high=0.95)]),
    ("erfinv_tails", lambda lib, x: x.erfinv(), [np.array([-0.9999999, -0.99, 0.5, 0.999999])]),
    ("relu_fn", lambda lib, x: lib.relu(x) + lib.sigmoid(x), [_a(3, 4)]),
]


@pytest.mark.parametrize("name, fn, arrays", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
def test_functions_and_methods_match_torch_with_gradients(name, fn, arrays):
    same_gradients(fn, arrays, "float64")


FLOAT32_CASES = {"exp", "var_std", "norm_2", "lerp_tensor", "erfinv", "einsum_attention",
                 "maximum_minimum", "logsumexp", "where", "scatter_forms"}  # fmt: skip


@pytest.mark.parametrize(
    "name, fn, arrays",
    [c for c in GRADIENT_CASES if c[0] in FLOAT32_CASES],
    ids=sorted(FLOAT32_CASES, key=[c[0] for c in GRADIENT_CASES].index),
)
def test_float32_functions_match_torch(name, fn, arrays):
    same_gradients(fn, arrays, "float32")


@pytest.mark.parametrize("name", ["erfinv", "norm_of_zero_row", "lerp_tensor", "maximum_minimum"])
def test_composed_gradients_against_finite_differences(name):
    fn, arrays = next((c[1], c[2]) for c in GRADIENT_CASES if c[0] == name)
    check_finite_differences(lambda *xs: fn(rg, *xs), arrays)


# -- integer and bool results, shapes, dtype rules ----------------------------------------------
VALUE_CASES = [
    (
        "argmax_forms",
        lambda lib, x: (
            lib.argmax(x),
            x.argmax(1),
            x.argmax(dim=0, keepdim=True),
            x.argmin(-1, True),
        ),
        [_distinct(3, 4)],
    ),
    (
        "max_indices",
        lambda lib, x: (x.max(1).indices, lib.min(x, 0)[1], lib.max(x, -1, True).indices),
        [_distinct(3, 4)],
    ),
    (
        "comparisons",
        lambda lib, x, y: (
            x.eq(y),
            x.ne(y),
            lib.gt(x, y),
            x.ge(0.0),
            lib.lt(x, 0),
            x.le(y),
            lib.eq(x, x),
        ),
        [np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 4.0])],
    ),
    (
        "any_all",
        lambda lib, x: (
            x.any(),
            (x > 0).all(),
            lib.any(x > 1, 1),
            x.all(dim=0),
            (x > 0).any(0, keepdim=True),
        ),
        [np.array([[0.0, 1.0], [0.0, 3.0]])],
    ),
    (
        "isnan_isinf_isfinite",
        lambda lib, x: (lib.isnan(x), x.isinf(), lib.isfinite(x)),
        [np.array([1.0, np.nan, np.inf, -np.inf])],
    ),
    (
        "logical",
        lambda lib, a, b: (
            lib.logical_and(a > 0, b > 0),
            lib.logical_or(a > 0, b > 0),
            lib.logical_not(a > 0),
            lib.logical_xor(a > 0, b > 0),
            (a > 0) ^ (b > 0),
            lib.bitwise_and(a > 0, b > 0),
        ),
        [_a(5), _a(5)],
    ),
    (
        "sign_round_ceil",
        lambda lib, x: (lib.sign(x), lib.round(x), lib.ceil(x), lib.floor(x), lib.trunc(x)),
        [np.array([-1.5, -0.5, 0.0, 0.5, 2.5, 1.7])],
    ),
    (
        "floor_divide",
        lambda lib, a, b: (
            a // b,
            lib.div(a, b, rounding_mode="floor"),
            lib.div(a, b, rounding_mode="trunc"),
            a // 2,
            lib.floor_divide(a, b),
        ),
        [np.array([7, -7, 6, -1]), np.array([2, 2, -4, 3])],
    ),
    (
        "scatter_larger_source",
        lambda lib, x, s: x.scatter(1, lib.tensor([[0, 1], [2, 3], [1, 0]]), s),
        [_a(3, 4), _a(3, 3)],
    ),
    (
        "scatter_reduce_add",
        lambda lib, x, s: x.scatter(1, lib.tensor([[0, 0], [2, 3], [1, 1]]), s, reduce="add"),
        [_a(3, 4), _a(3, 2)],
    ),
    (
        "floor_divide_float",
        lambda lib, a, b: (
            a // b,
            lib.div(a, b, rounding_mode="floor"),
            lib.div(a, b, rounding_mode="trunc"),
            7.0 // b,
        ),
        [np.array([7.5, -7.5, 6.0, -0.1]), np.array([2.0, 2.0, -4.0, 3.0])],
    ),
    ("remainder_int", lambda lib, a: (a % 3, lib.remainder(a, -3)), [np.array([7, -7, 6, -1])]),
    (
        "sum_of_bools_and_ints",
        lambda lib, x: (
            (x > 0).sum(),
            lib.sum(x > 0, 0),
            x.long().sum(),
            (x > 0).sum(dtype=lib.float64),
        ),
        [_a(3, 4)],
    ),
    (
        "mean_dtype",
        lambda lib, x: (x.mean(dtype=lib.float64), lib.mean(x.long().double())),
        [_a(3, 4)],
    ),
    (
        "count_nonzero_numel",
        lambda lib, x: (
            lib.count_nonzero(x > 0),
            lib.numel(x),
            x.nelement(),
            x.element_size(),
            x.ndimension(),
        ),
        [_a(3, 4)],
    ),
    (
        "sort_indices",
        lambda lib, x: (
            lib.sort(x).indices,
            x.sort(0, True)[1],
            lib.argsort(x, 1),
            lib.topk(x, 2, largest=False).indices,
        ),
        [_distinct(3, 4)],
    ),
    (
        "unique",
        lambda lib, x: (lib.unique(x), lib.unique(x, return_inverse=True, return_counts=True)),
        [np.array([3, 1, 3, 2, 1, 1])],
    ),
    (
        "bucketize",
        lambda lib, x: (
            lib.bucketize(x, lib.tensor([0.0, 1.0, 2.0])),
            lib.bucketize(x, lib.tensor([0.0, 1.0, 2.0]), right=True),
        ),
        [np.array([-1.0, 0.0, 0.5, 1.0, 2.5])],
    ),
    (
        "randperm_shape",
        lambda lib: (
            lib.randperm(5).shape,
            lib.randperm(5).dtype == lib.long,
            lib.randint(0, 3, (4,)).dtype == lib.int64,
        ),
        [],
    ),
    (
        "equal_allclose",
        lambda lib, x, y: (
            lib.equal(x, x),
            lib.equal(x, y),
            lib.allclose(x, x + 1e-9),
            lib.isclose(x, y),
        ),
        [_a(3), _a(3)],
    ),
    (
        "is_tensor_floating",
        lambda lib, x: (
            lib.is_tensor(x),
            lib.is_tensor(3),
            lib.is_floating_point(x),
            x.is_floating_point(),
            x.long().is_floating_point(),
        ),
        [_a(2)],
    ),
    (
        "broadcast",
        lambda lib, x, y: (*lib.broadcast_tensors(x, y), lib.broadcast_shapes((3, 1), (1, 4))),
        [_a(3, 1), _a(4)],
    ),
    ("meshgrid_ij", lambda lib, a, b: lib.meshgrid(a, b, indexing="ij"), [_a(3), _a(4)]),
    (
        "meshgrid_xy",
        lambda lib, a, b, c: lib.meshgrid([a, b, c], indexing="xy"),
        [_a(3), _a(4), _a(2)],
    ),
    (
        "trapezoid",
        lambda lib, y, x: (lib.trapezoid(y), lib.trapezoid(y, dx=0.5), lib.trapezoid(y, x)),
        [_a(3, 5), np.sort(_a(5))],
    ),
    (
        "hstack_vstack_concat",
        lambda lib, a, b: (
            lib.hstack([a, b]),
            lib.vstack([a, b]),
            lib.concat([a, b], 1),
            lib.concatenate((a, b)),
        ),
        [_a(2, 3), _a(2, 3)],
    ),
    (
        "one_d_functions",
        lambda lib, x: (
            lib.squeeze(x.reshape(1, 4)),
            lib.transpose(x.reshape(2, 2), 0, 1),
            lib.swapaxes(x.reshape(2, 2), 0, 1),
            lib.unsqueeze(x, 0),
            lib.flatten(x.reshape(2, 2)),
        ),
        [_a(4)],
    ),
]


@pytest.mark.parametrize("name, fn, arrays", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_and_dtypes_match_torch(name, fn, arrays):
    same_values(fn, arrays)


# -- dtypes and conversions ----------------------------------------------------------------------
def test_dtypes_are_named_as_torch_names_them():
    for name in ("float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool",
                 "float", "double", "long", "half", "int", "short", "int8", "int16",
                 "complex64", "cfloat"):  # fmt: skip
        ours, theirs = getattr(rg, name), getattr(torch, name)
        assert dtype_name(ours) == dtype_name(theirs), name
        assert ours.is_floating_point == theirs.is_floating_point, name
        assert ours.is_complex == theirs.is_complex, name
        assert ours.itemsize == theirs.itemsize, name
    assert rg.float32 == "float32" and isinstance(rg.float32, rg.dtype)
    assert rg.tensor([1.0]).dtype == rg.float32 and rg.tensor([1]).dtype is rg.long
    for dtype in (rg.float32, rg.float64, rg.float16, rg.bfloat16):
        ours, theirs = rg.finfo(dtype), torch.finfo(getattr(torch, dtype_name(dtype)))
        for field in ("eps", "max", "min", "tiny", "bits", "resolution"):
            assert getattr(ours, field) == pytest.approx(getattr(theirs, field), rel=1e-12)
    assert rg.iinfo(rg.int64).max == torch.iinfo(torch.int64).max
    assert rg.pi == torch.pi and rg.e == math.e and rg.inf == math.inf


def test_half_types_are_refused_by_the_numpy_backend_with_what_to_use():
    if isinstance(rg.default_backend().inner, rg.NumpyBackend):
        with pytest.raises(rg.DTypeError, match="TorchBackend"):
            rg.tensor([1.0]).half()
    else:
        assert rg.tensor([1.0]).half().dtype == rg.float16 == "float16"


def test_unsupported_dtypes_are_refused_with_what_to_use():
    # (int16 and int8 are tensor dtypes, as torch's: tests/test_dtypes_int8_int16.py)
    assert rg.zeros(2, dtype=rg.int16).dtype == "int16" and rg.tensor([1]).char().dtype == "int8"
    # (complex64/complex128 are tensor dtypes too: tests/test_complex.py)
    assert rg.zeros(2, dtype=rg.complex64).dtype == "complex64"
    with pytest.raises(rg.DTypeError, match="unknown dtype 'uint16'; expected one of"):
        rg.zeros(2, dtype="uint16")


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.tensor([[1, 2], [3, 4]]),
        lambda lib: lib.tensor([1.5, 2]),
        lambda lib: lib.tensor(True),
        lambda lib: lib.tensor([]),
        lambda lib: lib.tensor(3),
        lambda lib: lib.tensor(np.array([1, 2], dtype=np.int32)).long(),
        lambda lib: lib.tensor(np.float64(2.0)),
        lambda lib: lib.tensor([1, 2], dtype=lib.float64),
        lambda lib: lib.tensor([1.0, 2.0], dtype=float),
        lambda lib: lib.tensor([1, 2], dtype=int),
    ],
)
def test_tensor_infers_dtypes_as_torch(make):
    ours, theirs = make(rg), make(torch)
    assert dtype_name(ours.dtype) == dtype_name(theirs.dtype)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


CASTS = [
    lambda t: t.float(), lambda t: t.double(), lambda t: t.long(), lambda t: t.bool(),
    lambda t: t.to(torch.float32 if isinstance(t, torch.Tensor) else rg.float32),
    lambda t: t.type_as(t.long()), lambda t: t.to(t.double()),
    lambda t: t.to("cpu", t.long().dtype), lambda t: t.to(dtype=t.float().dtype),
    lambda t: t.cpu(), lambda t: t.clone(), lambda t: t.detach(), lambda t: t.contiguous(),
]  # fmt: skip


@pytest.mark.parametrize("cast", CASTS)
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64"])
def test_casts_follow_torch_dtype_rules(cast, dtype):
    data = np.array([1.25, -2.0, 3.5]).astype(dtype)
    ours, theirs = cast(rg.tensor(data)), cast(torch.tensor(data))
    assert dtype_name(ours.dtype) == dtype_name(theirs.dtype)
    np.testing.assert_array_equal(ours.numpy().astype(np.float64), theirs.float().numpy())


def test_float_of_float64_is_float32_and_the_gradient_flows_back():
    same_gradients(lambda lib, x: x.float().double() * x + x.float().sum(), [_a(3)], "float64")


def test_to_returns_the_tensor_itself_when_nothing_changes_as_torch():
    x = rg.tensor([1.0, 2.0])
    assert x.to(rg.float32) is x and x.float() is x and x.cpu() is x and x.to("cpu") is x
    assert x.to(rg.float32, copy=True) is not x


def test_type_names_and_legacy_types():
    x = rg.tensor([1.0, 2.0])
    assert x.type() == "retrograd.FloatTensor" and x.long().type() == "retrograd.LongTensor"
    assert (
        x.type(rg.LongTensor).dtype == rg.long and x.type("torch.DoubleTensor").dtype == rg.double
    )
    assert x.type(rg.float64).dtype == rg.float64
    pairs = [
        (rg.FloatTensor, torch.FloatTensor),
        (rg.LongTensor, torch.LongTensor),
        (rg.DoubleTensor, torch.DoubleTensor),
        (rg.BoolTensor, torch.BoolTensor),
        (rg.Tensor, torch.Tensor),  # the default float dtype
    ]
    for ours, theirs in pairs:
        made, reference = ours(2, 3), theirs(2, 3)
        assert made.shape == tuple(reference.shape)
        assert dtype_name(made.dtype) == dtype_name(reference.dtype)
        assert isinstance(made, ours) and not isinstance(made, rg.HalfTensor)
        data = ours([1, 0, 2])
        np.testing.assert_array_equal(data.numpy(), theirs([1, 0, 2]).numpy())
        assert dtype_name(data.dtype) == dtype_name(theirs([1, 0, 2]).dtype)
        assert ours().shape == tuple(theirs().shape) == (0,)
    weight = rg.nn.Parameter(rg.Tensor(3, 4))  # older model code's idiom
    assert weight.shape == (3, 4) and weight.requires_grad
    with pytest.raises(rg.ShapeError, match="Tensor: sizes must be non-negative"):
        rg.Tensor(2, -1)
    with pytest.raises(rg.DTypeError, match=r"Tensor: expected sizes or one sequence"):
        rg.Tensor(2, "a")


def test_the_tensor_class_makes_tensors_as_torchs_legacy_constructor():
    """``torch.Tensor(2, 3)`` as ``gcn/main.py`` writes it (``nn.Parameter(torch.Tensor(
    input_dim, output_dim))``): the class itself, called with sizes, data or a tensor, makes a
    float tensor; ``rg.Tensor(2, 3)`` once made a broken tensor holding the int 2."""
    forms = [(2, 3), (4,), (), ([1, 0, 2],), ((2, 2),), (np.array([1, 2]),), (rg.Size([2, 1]),)]
    for args in forms:
        theirs = torch.Tensor(*(torch.Size(a) if isinstance(a, rg.Size) else a for a in args))
        made = rg.Tensor(*args)
        assert type(made) is rg.Tensor and made.shape == tuple(theirs.shape)
        assert dtype_name(made.dtype) == dtype_name(theirs.dtype)
        if args and not all(isinstance(a, int) for a in args) and not isinstance(args[0], rg.Size):
            np.testing.assert_array_equal(made.numpy(), theirs.numpy())
    source = rg.tensor([1.0, 2.0], dtype=rg.float64)
    alias = rg.Tensor(source)  # torch's shares the storage and keeps the dtype
    alias.add_(1.0)
    assert alias.dtype == rg.float64 and source.tolist() == [2.0, 3.0]
    weight = rg.nn.Parameter(rg.Tensor(3, 2))
    rg.nn.init.xavier_normal_(weight)
    grads = (weight * weight).sum().backward()
    np.testing.assert_allclose(weight.grad(grads).numpy(), 2 * weight.numpy())
    for bad in [(2.5,), ([1, 2], 3)]:
        with pytest.raises(TypeError):
            torch.Tensor(*bad)
        with pytest.raises(TypeError, match="Tensor"):
            rg.Tensor(*bad)
    with pytest.raises(rg.ShapeError):
        rg.Tensor(-1)


def test_creation_functions_take_torchs_size_keyword():
    """``torch.empty(size=(n_heads, 2 * n_hidden, 1))`` as ``gat/main.py`` writes it: every
    creation function names its shape ``size`` (``full`` its value ``fill_value``,
    ``randint`` its bounds ``low``/``high``)."""
    calls = [
        lambda lib: lib.empty(size=(2, 3)),
        lambda lib: lib.zeros(size=(2, 3), dtype=lib.float64),
        lambda lib: lib.ones(size=[4]),
        lambda lib: lib.rand(size=(2, 1)),
        lambda lib: lib.randn(size=(3,), dtype=lib.float64),
        lambda lib: lib.full(size=(2, 2), fill_value=7),
        lambda lib: lib.full((2, 2), fill_value=1.5),
        lambda lib: lib.randint(5, size=(2, 3)),
        lambda lib: lib.randint(2, 5, size=(6,)),
        lambda lib: lib.randint(low=2, high=5, size=(6,)),
        lambda lib: lib.randint(high=3, size=(2,)),
    ]
    for call in calls:
        made, reference = call(rg), call(torch)
        assert made.shape == tuple(reference.shape)
        assert dtype_name(made.dtype) == dtype_name(reference.dtype)
    assert rg.zeros(size=(2,)).tolist() == [0.0, 0.0] and rg.full(
        size=(1,), fill_value=3
    ).tolist() == [3]
    low_high = rg.randint(low=2, high=5, size=(200,)).numpy()
    assert low_high.min() == 2 and low_high.max() == 4
    for call in (
        lambda lib: lib.zeros(2, size=(3,)),
        lambda lib: lib.full((2,), 1.0, fill_value=2.0),
    ):
        with pytest.raises(TypeError):
            call(torch)
        with pytest.raises(TypeError):
            call(rg)


def test_a_range_or_an_inner_tuple_indexes_as_a_sequence_as_in_torch():
    """``x_[range(x.shape[0]), y] = x.max()`` (mnist_forward_forward/main.py): torch reads a
    ``range``, and a tuple inside the index, as a list of indices, reading and writing."""
    x = _distinct(3, 4)
    reads = [
        lambda t: t[range(2)],
        lambda t: t[range(3), [0, 1, 2]],
        lambda t: t[:, range(1, 4, 2)],
        lambda t: t[(0, 2), 1],
        lambda t: t[(2, 0),],
    ]
    for read in reads:
        same_gradients(lambda lib, t, read=read: read(t) * 2.0, [x], "float64")

    def write(lib, t):
        out = t * 1.0
        out[range(3), lib.tensor([3, 1, 0])] = t.max()
        out[(0, 2), 2] = 0.5
        return out

    same_gradients(write, [x], "float64")


def test_a_zero_dim_tensor_formats_as_its_value_as_in_torch():
    """``'{val:6.2f}'.format(val=acc1[0])`` (imagenet/main.py's AverageMeter): a 0-d tensor
    takes a format spec as its value does; a tensor of more dimensions refuses one."""
    cases = [
        (lambda lib: lib.tensor(1.5, dtype=lib.float64), "6.2f"),
        (lambda lib: lib.tensor([2.25, 1.0])[0], ".3e"),
        (lambda lib: lib.tensor(7), "d"),
        (lambda lib: lib.tensor(7), "04d"),
        (lambda lib: lib.tensor(True), ""),
        (lambda lib: lib.tensor(3.0, requires_grad=True) * 2, "+.1f"),
    ]
    for make, spec in cases:
        assert format(make(rg), spec) == format(make(torch), spec)
    for lib in (rg, torch):
        with pytest.raises(TypeError):
            format(lib.tensor([1.5]), ".2f")
    assert format(rg.tensor([1.5]), "") == str(rg.tensor([1.5]))


def test_new_tensors_take_the_dtype_and_device_of_their_source():
    for lib in (rg, torch):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64)
        made = [x.new_zeros(2, 3), x.new_zeros((2,)), x.new_ones(3), x.new_full((2, 2), 7),
                x.new_empty(4), x.new_tensor([1, 2]), x.new_zeros(2, dtype=lib.long)]  # fmt: skip
        if lib is rg:
            ours = made
        else:
            theirs = made
    for mine, reference in zip(ours, theirs):
        assert dtype_name(mine.dtype) == dtype_name(reference.dtype)
        assert mine.shape == tuple(reference.shape)
        if reference.numel() and mine is not ours[4]:
            np.testing.assert_array_equal(mine.numpy(), reference.numpy())


def test_devices_as_torch_names_them():
    device = rg.device("cpu")
    assert device.type == "cpu" and rg.device("cuda:1").index == 1
    x = rg.tensor([1.0])
    assert not x.is_cuda and x.get_device() == -1 and x.to(rg.device("cpu")) is x
    assert x.to(torch.device("cpu")) is x
    with pytest.raises(rg.DTypeError, match="computes on the CPU"):
        x.cuda()
    with pytest.raises(rg.DTypeError, match="computes on the CPU"):
        rg.zeros(2, device="cuda")


# -- creation ------------------------------------------------------------------------------------
CREATION_CASES = [
    lambda lib: lib.zeros(2, 3, dtype=lib.float64),
    lambda lib: lib.ones((2,), dtype=lib.long),
    lambda lib: lib.empty(3, 2).shape,
    lambda lib: dtype_name(lib.empty_like(lib.ones(2, dtype=lib.float64)).dtype),
    lambda lib: lib.full_like(lib.ones(2, 2), 3.5),
    lambda lib: lib.full((2,), 3),
    lambda lib: lib.full((2,), True),
    lambda lib: lib.zeros_like(lib.ones(2), dtype=lib.long),
    lambda lib: lib.ones_like(lib.ones(2, dtype=lib.long)),
    lambda lib: lib.arange(5),
    lambda lib: lib.arange(0, 1, 0.125),
    lambda lib: lib.arange(1.5, 4),
    lambda lib: lib.arange(10, 0, -3),
    lambda lib: lib.arange(0, 5, dtype=lib.float64),
    lambda lib: lib.arange(0.0, 1.0, 0.1),
    lambda lib: lib.linspace(0, 1, 5),
    lambda lib: lib.linspace(-3, 7, 11),
    lambda lib: lib.linspace(0.1, 0.9, 7, dtype=lib.float64),
    lambda lib: lib.linspace(2, 2, 1),
    lambda lib: lib.logspace(0, 2, 3),
    lambda lib: lib.eye(3, 4, dtype=lib.long),
    lambda lib: lib.from_numpy(np.arange(4.0)),
    lambda lib: lib.as_tensor([1, 2]),
    lambda lib: lib.as_tensor(np.arange(3, dtype=np.float32)),
    lambda lib: lib.scalar_tensor(2.5),
    lambda lib: lib.tensor([1.0, 2.0], requires_grad=True).requires_grad,
    lambda lib: lib.zeros(2, requires_grad=True).is_leaf,
    lambda lib: (lib.ones(2) * 2).is_leaf,
]


@pytest.mark.parametrize("make", CREATION_CASES)
def test_creation_matches_torch(make):
    same_values(lambda lib: make(lib), [], "float32", rtol=1e-7, atol=1e-7)


def test_random_creation_has_the_shapes_dtypes_and_ranges_of_torch():
    rg.manual_seed(0)
    x = rg.randint(3, 7, (1000,))
    assert x.dtype == rg.long and int(x.min()) == 3 and int(x.max()) == 6
    assert rg.randint(5, (2, 3)).shape == (2, 3)
    p = rg.randperm(50)
    assert sorted(p.tolist()) == list(range(50)) and p.dtype == rg.long
    like = rg.randn_like(rg.zeros(400, 3, dtype=rg.float64))
    assert like.dtype == rg.float64 and abs(float(like.mean())) < 0.2
    assert rg.rand_like(rg.zeros(5)).shape == (5,)
    n = rg.normal(2.0, 0.5, size=(2000,))
    assert abs(float(n.mean()) - 2.0) < 0.05 and abs(float(n.std()) - 0.5) < 0.05
    rg.manual_seed(7)
    first = rg.randn(3)
    rg.manual_seed(7)
    assert rg.randn(3).tolist() == first.tolist()


def test_named_tuples_are_not_data():
    x = rg.tensor([[1.0, 2.0]])
    with pytest.raises(rg.DTypeError, match="named tuple"):
        x * x.max(1)
    # sort/topk/cummax/cummin give API.md section 2's values, which are also torch's pair
    assert (x * x.sort(1, descending=True)).tolist() == [[2.0, 2.0]]
    values, indices = x.max(1)
    assert values.tolist() == [2.0] and indices.tolist() == [1]


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.where(lib.tensor([0.2, 0.7]) > 0.5, 1, 0),  # siamese_network's
        lambda lib: lib.where(lib.tensor([0.2, 0.7]) > 0.5, 1.0, 0),
        lambda lib: lib.where(lib.tensor([0.2, 0.7]) > 0.5, True, False),
    ],
)
def test_where_between_two_numbers_takes_torch_s_dtype(make):
    same_values(make, [])
    assert str(make(rg).dtype) == str(make(torch).dtype).removeprefix("torch.")


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.ones(2) + lib.tensor(1.5, dtype=lib.float64),
        lambda lib: lib.tensor(1.5, dtype=lib.float64) * lib.ones(2),
        lambda lib: lib.ones(2, dtype=lib.long) + lib.tensor(1.5, dtype=lib.float64),
        lambda lib: lib.ones(2) + lib.tensor(2),
        lambda lib: lib.tensor(1.0) + lib.tensor(2.0, dtype=lib.float64),
        lambda lib: lib.ones(2, dtype=lib.float64) + lib.tensor(2.0),
        lambda lib: lib.ones(2) * lib.ones(2, dtype=lib.float64),
        lambda lib: lib.where(lib.ones(2) > 0, lib.ones(2), lib.tensor(0.0, dtype=lib.float64)),
    ],
)
def test_zero_dimensional_tensors_promote_by_category_as_torch_s(make):
    same_values(make, [])
