"""One focused regression test per defect the differential fuzzer (``test_fuzz_vs_torch.py``)
found: each case runs once on torch and once on retrograd and must agree on raising or not,
dtype, shape, values (NaNs included) and float64 gradients (``fuzz_cases.compare``). A few
checks that torch cannot express directly (error classes, aliasing) are written by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from fuzz_cases import Case, Mismatch, Operand, compare

torch = pytest.importorskip("torch")

NAN, INF = math.nan, math.inf


def _check(fn, *arrays):
    arrays = [np.asarray(a) for a in arrays]
    operands = [Operand(a.shape, str(a.dtype)) for a in arrays]
    compare(Case("regression", operands, fn), arrays)


def f64(*values):
    return np.array(values, dtype=np.float64)


CASES = {
    # 0-d tensors take dim 0 and -1 (torch wraps them as one dimension of size 1)
    "zero_dim_sum": (lambda lib, a: (a.sum(0), a.sum(dim=-1, keepdim=True)), np.float64(2.5)),
    "zero_dim_max": (lambda lib, a: a.max(0), np.float64(2.5)),
    "zero_dim_sort": (lambda lib, a: a.sort(-1), np.float64(2.5)),
    "zero_dim_topk": (lambda lib, a: lib.topk(a, 1, 0), np.float64(2.5)),
    "zero_dim_softmax": (lambda lib, a: (a.softmax(0), a.log_softmax(-1)), np.float64(2.5)),
    "zero_dim_cumsum": (lambda lib, a: (a.cumsum(0), a.cumprod(-1)), np.float64(2.5)),
    "zero_dim_argmax": (lambda lib, a: (a.argmax(0), a.argmin(-1, keepdim=True)), np.float64(2.5)),
    "zero_dim_logsumexp": (lambda lib, a: (a.logsumexp(0), a.norm(dim=0)), np.float64(2.5)),
    "zero_dim_amax": (lambda lib, a: (a.amax(0), a.mean(-1), a.prod(0)), np.float64(2.5)),
    # matrix products do not promote: mixed dtypes and bools raise, as torch's
    "mm_mixed": (lambda lib, a, b: a @ b, np.ones((2, 2), np.float32), np.ones((2, 2))),
    "matmul_int_float": (lambda lib, a, b: lib.matmul(a, b), np.ones((2, 3), np.int64), np.ones(3)),
    "bmm_mixed": (
        lambda lib, a, b: lib.bmm(a, b),
        np.ones((1, 2, 2)),
        np.ones((1, 2, 2), np.float32),
    ),
    "dot_mixed": (lambda lib, a, b: lib.dot(a, b), np.ones(3), np.ones(3, np.int64)),
    "mm_bool": (lambda lib, a, b: a @ b, np.ones((2, 2), bool), np.ones((2, 2), bool)),
    "addmm_mixed": (
        lambda lib, a, b: lib.addmm(a, b, b),
        np.ones((2, 2)),
        np.ones((2, 2), np.float32),
    ),
    "einsum_contracted_mixed": (
        lambda lib, a, b: lib.einsum("ij,jk->ik", a, b),
        np.ones((2, 2)),
        np.ones((2, 2), np.float32),
    ),
    "einsum_elementwise_promotes": (
        lambda lib, a, b: lib.einsum("ij,ij->ij", a, b),
        np.ones((2, 2)),
        np.ones((2, 2), np.int64),
    ),
    "tensordot_empty": (lambda lib, a, b: lib.inner(a, b), np.ones((3, 0)), np.ones((2, 0))),
    # clamp: torch's promotion with a float bound, and its gradient (none at NaN, none when
    # min > max)
    "clamp_int_float_bound": (lambda lib, a: a.clamp(0.5, 2.5), np.array([1, 2, 3])),
    "clamp_bool_int_bound": (lambda lib, a: a.clamp(0, 2), np.array([True, False])),
    "clamp_nan_gradient": (lambda lib, a: a.clamp(-1.0, 1.0), f64(NAN, 0.5, 1.0, -1.0, 3.0)),
    "clamp_inverted": (lambda lib, a: a.clamp(1.0, -1.0), f64(-2.0, 0.0, 1.0, NAN)),
    "clamp_bool_bool": (lambda lib, a: a.clamp(max=False), np.array([True])),
    "clamp_tensor_bounds": (
        lambda lib, a, lo, hi: lib.clamp(a, lo, hi),
        f64(-0.5, 2.0, 0.5, NAN, -3.0, 5.0, NAN),
        f64(-0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 7.0),
        f64(0.0, 3.0, 1.0, 1.0, 0.0, 0.0, -2.5),
    ),
    # integer activations keep their dtype; bools are refused
    "relu_int": (lambda lib, a: (lib.relu(a), lib.nn.functional.relu6(a)), np.array([-2, 0, 7])),
    "relu_bool": (lambda lib, a: lib.relu(a), np.array([True])),
    "threshold_int": (lambda lib, a: lib.nn.functional.threshold(a, 1.5, -1.0), np.array([1, 2])),
    "hardtanh_int": (lambda lib, a: lib.nn.functional.hardtanh(a), np.array([-3, 0, 4])),
    "silu_int": (lambda lib, a: lib.nn.functional.silu(a), np.array([1, 2])),
    "softmax_int": (lambda lib, a: a.softmax(0), np.array([1, 2])),
    # gradients at kinks, as torch's kernels
    "hardtanh_bounds": (
        lambda lib, a: (lib.nn.functional.hardtanh(a), lib.nn.functional.relu6(a * 6.0)),
        f64(-1.0, 1.0, 0.0, 0.5, NAN),
    ),
    "hardsigmoid_bounds": (
        lambda lib, a: lib.nn.functional.hardsigmoid(a),
        f64(-3.0, 3.0, 0.0, NAN),
    ),
    # (torch's gradient at NaN depends on the element's place in its vectorized loop)
    "hardswish_inf": (lambda lib, a: lib.nn.functional.hardswish(a), f64(-3.0, 3.0, -INF, 1.0)),
    "elu_inf": (
        lambda lib, a: (lib.nn.functional.elu(a), lib.nn.functional.celu(a)),
        f64(INF, -1.0),
    ),
    "logit_edges": (lambda lib, a: lib.logit(a), f64(0.0, 1.0, 0.5, 1.5, -0.5)),
    "abs_nan": (lambda lib, a: a.abs(), f64(NAN, -2.0, 0.0)),
    "std_zero_spread": (lambda lib, a: a.std(0), f64(2.0, 2.0)),
    "atan2_origin": (lambda lib, a, b: lib.atan2(a, b), f64(0.0, 1.0), f64(0.0, 0.0)),
    "pow_zero_to_negative": (lambda lib, a, b: a**b, f64(0.0, 0.0, 2.0), f64(-1.0, 2.0, 0.5)),
    "cumprod_single": (lambda lib, a: a.cumprod(0), f64(NAN)),
    "cumprod_size_one_dim": (lambda lib, a: a.cumprod(1), np.array([[NAN], [INF], [2.0]])),
    "maximum_nan": (
        lambda lib, a, b: (lib.maximum(a, b), lib.minimum(a, b)),
        f64(NAN, 1.0, 2.0),
        f64(1.0, NAN, 2.0),
    ),
    "max_nan_tie": (lambda lib, a: (a.max(), a.amax()), f64(NAN, 1.0, NAN)),
    "amax_inf": (lambda lib, a: a.amax(), f64(1.0, INF, INF)),
    "median_ties": (lambda lib, a: a.median(), f64(1.0, 1.0, 1.0, 2.0)),
    "median_nan": (lambda lib, a: (a.median(), a.median(0)), f64(3.0, NAN, 1.0)),
    "median_empty": (lambda lib, a: a.median(), np.zeros(0)),
    # an all-NaN slice: torch's index is where std::nth_element leaves position 0
    "nanmedian_all_nan": (
        lambda lib, a: (a.nanmedian(0), a.nanmedian(1), a[:4].nanmedian(0), a[:, :4].nanmedian(1)),
        np.where(np.arange(35).reshape(7, 5) == 11, 1.0, NAN),
    ),
    "nanmedian_ties": (lambda lib, a: a.nanmedian(), f64(NAN, 1.0, 1.0, 2.0)),
    # (the method keeps Burn's values-only form; torch's gives (values, indices))
    "cummax_nan": (
        lambda lib, a: a.cummax(0),
        f64(1.0, NAN, 3.0, NAN),
    ),
    # division and remainder
    "floor_divide_inf": (lambda lib, a: a // INF, f64(1.0, -1.0, 0.0, -0.5)),
    "floor_divide_signed_zero": (lambda lib, a: a // -0.5, f64(0.0, -0.0, 0.5, 1.0)),
    "floor_divide_gradient": (
        lambda lib, a, b: (a.div(b, rounding_mode="floor"), a.div(b, rounding_mode="trunc")),
        f64(1.0, 2.0),
        f64(0.0, 1.0),
    ),
    "floor_divide_int_by_bool": (lambda lib, a: a.div(True, rounding_mode="floor"), np.array([3])),
    "remainder_gradient": (
        lambda lib, a, b: lib.remainder(a, b),
        f64(0.3, 2.5, -7.0),
        f64(0.1, -0.5, 3.5),
    ),
    # torch computes x ** -0.5 as rsqrt (and x ** 0.5 as sqrt): -0.0 -> -inf, -inf -> NaN
    "pow_minus_half_signed_zero": (
        lambda lib, a: (a**-0.5, a.pow(-0.5), a**0.5, a**1.5),
        f64(-0.0, -INF, 0.0, INF, 4.0, -4.0, 0.25),
    ),
    # a tensor exponent of 0.5 (broadcast or 0-d) is IEEE pow in torch, not sqrt
    "pow_tensor_exponent_half": (
        lambda lib, a, b: (a**b, a ** b.reshape(()), b.expand(5) ** b),
        f64(-0.0, -INF, 0.0, INF, 4.0),
        f64(0.5),
    ),
    "pow_minus_half_float32": (
        lambda lib, a: a**-0.5,
        np.array([-0.0, -INF, 0.0, INF, 4.0, 0.3], np.float32),
    ),
    "int_pow_negative_exponent": (
        lambda lib, a, b: (a**b, 2**b),
        np.array([1, -1, 2, 0, -1]),
        np.array([-2, -1, -1, 2, -4]),
    ),
    # dtypes of the other elementwise ops
    "logical_any_dtype": (
        lambda lib, a, b: (lib.logical_and(a, b), a.logical_or(b), lib.logical_xor(a, b)),
        f64(0.0, 1.0, NAN),
        np.array([1, 0, 2]),
    ),
    "sub_bool": (lambda lib, a: a - 1, np.array([True])),
    "add_alpha_bool": (
        lambda lib, a, b: lib.add(a, b, alpha=3),
        np.array([True, False]),
        np.array([False, False]),
    ),
    "sign_nan": (lambda lib, a: (a.sign(), a.sgn()), f64(NAN, -0.0, 2.0, -INF)),
    "bool_square_sign": (lambda lib, a: (a.square(), a.sign()), np.array([True, False])),
    "nansum_int": (lambda lib, a: lib.nansum(a, 0), np.array([[1, 2], [3, 4]])),
    "hypot_int": (lambda lib, a: lib.hypot(a, a), np.array([3, 4])),
    "isclose_inf": (lambda lib, a, b: lib.isclose(a, b), f64(0.5, INF, NAN), f64(INF, INF, NAN)),
    "isclose_mixed": (lambda lib, a, b: lib.isclose(a, b), f64(1.0), np.array([True])),
    "lerp_mixed": (lambda lib, a, b: lib.lerp(a, b, 0.5), np.ones(2, np.float32), np.ones(2)),
    "mean_int": (lambda lib, a: a.mean(), np.array([1, 2])),
    "var_int": (lambda lib, a: a.var(), np.array([1, 2])),
    "argmax_bool": (lambda lib, a: a.argmax(), np.array([True, False])),
    "topk_bool": (lambda lib, a: a.topk(1), np.array([True, False])),
    "abs_bool": (lambda lib, a: a.abs(), np.array([True])),
    "floor_bool": (lambda lib, a: a.floor(), np.array([True])),
    "round_int_decimals": (lambda lib, a: lib.round(a, decimals=1), np.array([1])),
    "remainder_bool": (lambda lib, a: a % a, np.array([True])),
    "pos_bool": (lambda lib, a: +a, np.array([True])),
    "trace_3d": (lambda lib, a: a.trace(), np.ones((2, 2, 2))),
    "logcumsumexp_int": (lambda lib, a: a.logcumsumexp(0), np.array([1, 2])),
    # shapes and indexing
    "cat_legacy_empty": (lambda lib, a, b: lib.cat([a, b], 1), np.ones((2, 3)), np.zeros(0)),
    "argsort_stable": (lambda lib, a: a.argsort(dim=0, stable=True), f64(2.0, 1.0, 2.0)),
    "masked_scatter_broadcast": (
        lambda lib, a, m, s: a.masked_scatter(m, s),
        f64(1.0, 2.0, 3.0),
        np.array([[True, False, True], [False, True, False]]),
        np.arange(6.0),
    ),
    "negative_slice_step": (lambda lib, a: a[::-1], f64(1.0, 2.0, 3.0)),
    "conjugate_transposes": (lambda lib, a: (a.H, a.mH), np.arange(6.0).reshape(2, 3)),
    "logsumexp_empty": (lambda lib, a: a.logsumexp(0), np.zeros((0, 3))),
    "diff_empty": (lambda lib, a: a.diff(dim=0), np.zeros((0, 1))),
    "amin_empty_other_dim": (lambda lib, a: a.amin(1), np.zeros((0, 1))),
    "sum_empty_dims_tuple": (lambda lib, a: (a.sum(()), a.mean(())), np.ones((2, 3))),
    "cumsum_dtype": (
        lambda lib, a: (a.cumsum(0, dtype=lib.float64), a.cumprod(0)),
        np.array([True, True]),
    ),
    "index_put_accumulate_leading": (
        lambda lib, a: a.index_put(
            (lib.tensor([0, 0, -1]),), lib.ones(3, dtype=a.dtype), accumulate=True
        ),
        np.zeros((2, 3)),
    ),
    "index_put_mixed_dtypes": (
        lambda lib, a: a.index_put((lib.tensor([0]),), lib.ones(3)),
        np.zeros((2, 3)),
    ),
    "take_negative": (lambda lib, a: a.take(lib.tensor([[-1, 0]])), f64(1.0, 2.0, 3.0)),
    "rsub": (lambda lib, a: lib.rsub(a, 3, alpha=2), f64(1.0, 2.0)),
    "prelu_at_zero": (
        lambda lib, a: lib.nn.functional.prelu(a, lib.full((1,), 0.25, dtype=a.dtype)),
        f64(0.0, -1.0, 2.0),
    ),
    "huber_smooth_l1_inf_nan": (
        lambda lib, a, b: (
            lib.nn.functional.huber_loss(a, b, reduction="none", delta=0.7),
            lib.nn.functional.smooth_l1_loss(a, b, reduction="none", beta=0.5),
        ),
        f64(INF, NAN, 0.2, -3.0),
        f64(0.0, 0.0, 0.0, 0.0),
    ),
    "prod_gradient_inf": (lambda lib, a: (a.prod(), a.prod(0)), f64(2.0, INF, 3.0)),
    "prod_gradient_two_zeros_inf": (lambda lib, a: a.prod(), f64(0.0, INF, 0.0, 2.0)),
    "prod_zero_dim_nan": (lambda lib, a: (a.prod(), a.prod(0)), np.float64(NAN)),
    "std_mean_zero_spread": (lambda lib, a: lib.std_mean(a, dim=0), f64(2.0, 2.0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    fn, *arrays = CASES[name]
    _check(fn, *arrays)


def _setitem(kind):
    def fn(lib, a, v):
        out = a.clone()
        if kind == "leading_ones":
            out[1, -1] = v  # a [1] value into a 0-d place
        elif kind == "mask_scalar_value":
            out[out > 0] = v  # one value, cast as masked_fill_ casts
        elif kind == "advanced_mixed":
            out[[0, 1]] = v  # index_put_ wants one dtype
        elif kind == "int_fill":
            out[0] = 2.7  # truncated toward zero
        elif kind == "bool_mask_float":
            out[lib.tensor([True, False, True])] = 0.5  # nonzero: True
            out[lib.tensor([False, True, False])] = NAN  # NaN is nonzero too
            out[lib.tensor([True, False, False])] = -0.0
        return out

    return fn


@pytest.mark.parametrize(
    "kind, arrays",
    [
        ("leading_ones", [np.zeros((2, 4)), f64(5.0)]),
        ("mask_scalar_value", [np.array([1, -1, 2]), f64(2.5)]),
        ("advanced_mixed", [np.zeros((3, 2)), np.ones(2, np.float32)]),
        ("int_fill", [np.zeros(3, np.int64), f64(0.0)]),
        ("bool_mask_float", [np.zeros(3, bool), f64(0.0)]),
    ],
)
def test_setitem_matches_torch(kind, arrays):
    _check(_setitem(kind), *arrays)


def test_copy_converts_any_dtype():
    _check(lambda lib, a, b: a.clone().copy_(b), np.zeros(3, bool), f64(0.0, 2.5, -1.0))


def test_in_place_on_an_untracked_view_joins_the_graph():
    """``base.T.add_(w)`` with ``w`` requiring grad: the view itself is in the graph after
    the write (torch: ``AsStridedBackward``), so a loss on the view reaches ``w``."""

    def fn(lib, a, w):
        base = a.clone()
        view = base.transpose(0, 1)
        view.add_(w, alpha=2)
        return view

    _check(fn, np.array([[0.5, 1.0, 2.0]], np.float32), f64(2.0))


def test_module_level_functions_exist():
    x = rg.tensor([3.0, 4.0])
    assert rg.hypot(x, x).tolist() == pytest.approx([3 * math.sqrt(2), 4 * math.sqrt(2)])
    out = rg.scatter_add(rg.zeros(3), 0, rg.tensor([0, 0]), rg.tensor([1.0, 2.0]))
    assert out.tolist() == [3.0, 0.0, 0.0]
    assert rg.clamp_min(x, 3.5).tolist() == [3.5, 4.0]
    assert rg.ravel(rg.ones(2, 2)).shape == (4,)


def test_errors_are_retrograd_errors_naming_the_op():
    a, b = rg.ones(2, 2), rg.ones(2, 2, dtype=rg.float64)
    with pytest.raises(rg.DTypeError, match=r"matmul.*float32.*float64"):
        a @ b
    with pytest.raises(rg.DTypeError, match="addmm"):
        rg.addmm(b, a, a)
    with pytest.raises(rg.DTypeError, match=r"einsum.*'j'"):
        rg.einsum("ij,jk->ik", a, b)
    with pytest.raises(rg.DTypeError, match="sub"):
        rg.tensor([True]) - rg.tensor([True])


def test_comparison_helper_can_fail():
    with pytest.raises(Mismatch):
        _check(lambda lib, a: a if lib is rg else a + 1, f64(1.0))
