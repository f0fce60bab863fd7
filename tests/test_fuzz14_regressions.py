"""Regressions from the fourteenth fuzzing round (selection, scatter and index ops, result
dtypes, linalg, second derivatives through views, ``nn.functional`` arguments, cumulative
ops; generators in ``tests/fuzz14_cases.py``). Expected values all come from torch, run
side by side by :func:`fuzz12_cases.check`."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from fuzz12_cases import Trial, check

torch = pytest.importorskip("torch")

NAN = math.nan


def _grad(lib, out, leaves):
    w = lib.tensor(np.linspace(-1.0, 1.0, out.numel()).reshape(tuple(out.shape)), dtype=out.dtype)
    return list(lib.autograd.grad((out * w).sum(), leaves))


# ---- quantile: a NaN result is read from the NaN, which gets the gradient ------------------


@pytest.mark.parametrize("name", ["quantile", "nanquantile"])
@pytest.mark.parametrize("interpolation", ["linear", "midpoint", "nearest", "lower", "higher"])
def test_quantile_gradient_reaches_the_nan_it_returns(name, interpolation):
    # retrograd masked a NaN row's result to NaN: a constant, no gradient; torch reads the
    # NaN itself (the last sorted place; for nanquantile, place 0 of an all-NaN row)
    a = np.array([[0.5, NAN, -1.0, 2.0], [NAN, NAN, NAN, NAN], [1.0, 3.0, -2.0, 0.0]])

    def fn(lib):
        x = lib.tensor(a, requires_grad=True)
        q = lib.tensor([0.0, 0.3, 1.0], dtype=lib.float64)
        out = getattr(lib, name)(x, q, dim=1, interpolation=interpolation)
        return [out, *_grad(lib, out, [x])]

    check(Trial(f"{name} {interpolation}", fn))


# ---- searchsorted and bucketize --------------------------------------------------------------


def test_searchsorted_refuses_side_left_with_right_true():
    def fn(lib):
        s = lib.tensor([0.0, 1.0, 2.0])
        return [lib.searchsorted(s, lib.tensor([0.5]), right=True, side="left")]

    check(Trial("opposites", fn))
    with pytest.raises(rg.InvalidArgumentError, match="opposites"):
        fn(rg)


@pytest.mark.parametrize("sorter", [False, True])
def test_searchsorted_of_a_0d_values_tensor_is_0d(sorter):
    def fn(lib):
        s = lib.tensor([2.0, 0.0, 1.0] if sorter else [0.0, 1.0, 2.0])
        kw = {"sorter": lib.tensor([1, 2, 0])} if sorter else {}
        return [lib.searchsorted(s, lib.tensor(0.5), **kw), lib.searchsorted(s, 1.0, **kw)]

    check(Trial("0-d values", fn))


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_and_bucketize_put_nan_past_every_edge(right):
    def fn(lib):
        s = lib.tensor([0.0, 1.0, 2.0], dtype=lib.float64)
        v = lib.tensor([NAN, 1.0, -NAN, 5.0], dtype=lib.float64)
        return [lib.searchsorted(s, v, right=right), lib.bucketize(v, s, right=right)]

    check(Trial("nan", fn))


# ---- unique ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_along_a_dim(dim):
    # refused ("dim= is not supported") before
    a = np.array([[1, 0, 1], [2, 2, 2], [1, 0, 1], [0, 5, 0]])

    def fn(lib):
        x = lib.tensor(a)
        return list(lib.unique(x, return_inverse=True, return_counts=True, dim=dim))

    check(Trial(f"unique dim={dim}", fn))


def test_unique_consecutive_inverse_of_a_0d_tensor_is_0d():
    # a host read through np.ascontiguousarray, which makes a 0-d array 1-d
    def fn(lib):
        return list(
            lib.unique_consecutive(lib.tensor(3.0), return_inverse=True, return_counts=True)
        )

    check(Trial("0-d", fn))


# ---- index ops on 0-d tensors and negative flat indices --------------------------------------

ZERO_D = {
    "gather_0d_index": lambda lib, x: x.gather(0, lib.tensor(0)),
    "gather_1d_index": lambda lib, x: x.gather(-1, lib.tensor([0, 0])),
    "gather_bad": lambda lib, x: x.gather(0, lib.tensor([[0]])),
    "topk_unsorted": lambda lib, x: lib.topk(x, 1, sorted=False)[0],
    "index_select": lambda lib, x: x.index_select(-1, lib.tensor(0)),
    "index_select_two": lambda lib, x: x.index_select(0, lib.tensor([0, 0])),
    "index_add": lambda lib, x: x.index_add(-1, lib.tensor([0]), lib.tensor(3.0, dtype=x.dtype)),
    "index_copy": lambda lib, x: x.index_copy(0, lib.tensor([0]), lib.tensor(3.0, dtype=x.dtype)),
    "index_fill": lambda lib, x: x.index_fill(0, lib.tensor([0]), 3.0),
    "index_fill_out_of_range": lambda lib, x: x.index_fill(0, lib.tensor([1]), 3.0),
}


@pytest.mark.parametrize("name", sorted(ZERO_D))
def test_index_ops_on_a_0d_tensor(name):
    # dimension 0 / -1 of a 0-d tensor was "given for a 0-d tensor, which has none"
    def fn(lib):
        x = lib.tensor(2.0, dtype=lib.float64, requires_grad=True)
        out = ZERO_D[name](lib, x)
        return [out, *lib.autograd.grad(out.sum() * 1.5, [x])]

    check(Trial(name, fn))


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_counts_negative_indices_from_the_end(accumulate):
    def fn(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        v = lib.tensor([9.0, 8.0, 7.0], dtype=lib.float64, requires_grad=True)
        y = x * 1.0
        y.put_(lib.tensor([-1, 0, -3]), v, accumulate=accumulate)
        return [y, *_grad(lib, y, [x, v])]

    check(Trial("put negative", fn))


def test_put_refuses_an_index_below_minus_the_size():
    def fn(lib):
        return [lib.zeros(2, 2).put(lib.tensor([-5]), lib.tensor([1.0]))]

    check(Trial("put -5", fn))
    with pytest.raises(IndexError, match="index -5 is out of range"):
        fn(rg)


def test_take_along_dim_counts_negative_indices_from_the_end():
    def fn(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lib.float64, requires_grad=True)
        out = lib.take_along_dim(x, lib.tensor([[-1, 0], [-3, -2]]), dim=1)
        return [out, *_grad(lib, out, [x])]

    check(Trial("take_along_dim negative", fn))


def test_gather_takes_sparse_grad():
    def fn(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        out = lib.gather(x, 1, lib.tensor([[1, 1], [0, 1]]), sparse_grad=False)
        return [out, *_grad(lib, out, [x])]

    check(Trial("sparse_grad", fn))


def test_scatter_reduce_multiply():
    # refused ("only 'add'") before; torch's legacy form of scatter_reduce(..., "prod")
    def fn(lib):
        x = lib.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=lib.float64)
        i = lib.tensor([[0, 0], [2, 0]])
        src = lib.tensor([[2.0, 3.0], [0.5, -1.0]], dtype=lib.float64)
        return [x.scatter(1, i, src, reduce="multiply"), x.scatter(1, i, 1.5, reduce="multiply")]

    check(Trial("multiply", fn))


# ---- result dtypes ---------------------------------------------------------------------------

NUMBER_FIRST = {
    "add": lambda lib, t: lib.add(3, t, alpha=2),
    "sub": lambda lib, t: lib.sub(2.5, t),
    "mul": lambda lib, t: lib.mul(True, t),
    "div_floor": lambda lib, t: lib.div(3, t, rounding_mode="floor"),
    "true_divide": lambda lib, t: lib.true_divide(2, t),
    "floor_divide": lambda lib, t: lib.floor_divide(-3, t),
    "remainder": lambda lib, t: lib.remainder(-1.5, t),
    "remainder_numbers": lambda lib, t: lib.remainder(3, 2),  # torch: no such form
    "atan2_number": lambda lib, t: lib.atan2(3, t),  # torch: no such form
}


@pytest.mark.parametrize("dtype", ["int64", "float64", "bool"])
@pytest.mark.parametrize("name", sorted(NUMBER_FIRST))
def test_number_first_arithmetic_functions(name, dtype):
    # "argument 'input' must be a Tensor" for every one, where torch's parser takes a number
    def fn(lib):
        t = lib.tensor(np.array([2, 4, 1]).astype(dtype), dtype=getattr(lib, dtype))
        if dtype == "float64" and name not in ("floor_divide", "remainder"):
            t.requires_grad_(True)  # (torch has no derivative of those two in their divisor)
        out = NUMBER_FIRST[name](lib, t)
        grads = lib.autograd.grad(out.sum(), [t]) if out.requires_grad else []
        return [out, *grads]

    check(Trial(name, fn))


def test_float_power_refuses_two_numbers():
    check(Trial("float_power", lambda lib: [lib.float_power(2, 0.5)]))


@pytest.mark.parametrize(
    "shapes",
    [((3,), (), (2, 3)), ((), (), (3,)), ((2, 3), (3,), ()), ((), (), ())],
)
@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_addcdiv_promote_their_three_operands_together(name, shapes):
    # float32 [3] + float64 [] * int64 [2, 3] was float64: the product promoted first
    def fn(lib):
        x = lib.ones(shapes[0], dtype=lib.float32)
        a = lib.full(shapes[1], 1.5, dtype=lib.float64)
        b = lib.full(shapes[2], 3, dtype=lib.int64)
        return [getattr(lib, name)(x, a, b, value=0.5), getattr(lib, name)(x, b, a)]

    check(Trial(name, fn))


@pytest.mark.parametrize(
    "bounds",
    ["scalar_0d", "0d_scalar", "scalar_1d", "1d_scalar", "0d_0d", "scalar_scalar"],
)
def test_clamp_with_a_number_and_a_tensor_bound(bounds):
    # torch reads a 0-d tensor beside a number as a number and refuses any other tensor there
    def bound(lib, kind, value):
        return {
            "scalar": value,
            "0d": lib.tensor(value, dtype=lib.float64),
            "1d": lib.tensor([value] * 3, dtype=lib.float64),
        }[kind]

    def fn(lib):
        lo, hi = bounds.split("_")
        x = lib.tensor([-2, 0, 3])
        return [lib.clamp(x, bound(lib, lo, -0.5), bound(lib, hi, 2.5))]

    check(Trial(bounds, fn))


def test_ldexp_of_an_int_tensor_by_a_0d_float64_exponent_is_float64():
    # the int tensor was cast to float32 first, then multiplied: float32
    def fn(lib):
        x = lib.tensor([1, 2, 3])
        return [
            lib.ldexp(x, lib.tensor(2.0, dtype=lib.float64)),
            lib.ldexp(x, lib.tensor([1, 2, 0])),
        ]

    check(Trial("ldexp", fn))


# ---- linalg ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n, big_n", [(1, None), (3, 1), (0, None), (2, 0), (3, 2), (2, None)])
def test_linalg_vander_refuses_n_of_one_or_less(n, big_n):
    # N = 1 (or a default N of one element) gave a column of ones where torch refuses
    def fn(lib):
        x = lib.tensor(np.arange(n) + 1.5, dtype=lib.float64, requires_grad=True)
        out = lib.linalg.vander(x, N=big_n)
        return [out, *_grad(lib, out, [x])]

    check(Trial(f"vander n={n} N={big_n}", fn))


@pytest.mark.parametrize(
    "a_shape, b_shape",
    [((3, 3), (2, 3, 1)), ((2, 3, 3), (3,)), ((2, 3, 3), (3, 1)), ((2, 3, 3), (2, 3))],
)
def test_lstsq_takes_b_of_as_many_dimensions_as_a_or_one_fewer(a_shape, b_shape):
    def fn(lib):
        a = lib.tensor(np.eye(3) * 2.0 + 0.1, dtype=lib.float64).expand(*a_shape)
        b = lib.ones(b_shape, dtype=lib.float64)
        return [lib.linalg.lstsq(a, b).solution]

    check(Trial(f"lstsq {a_shape} {b_shape}", fn))


@pytest.mark.parametrize("tol", [1e-3, 0.5, 2.0])
def test_matrix_rank_takes_tol(tol):
    def fn(lib):
        a = lib.tensor(np.diag([3.0, 1.0, 0.2]), dtype=lib.float64)
        return [
            lib.linalg.matrix_rank(a, tol=tol),
            lib.linalg.matrix_rank(a, hermitian=True, tol=tol),
        ]

    check(Trial(f"tol={tol}", fn))


@pytest.mark.parametrize(
    "a_shape, b_shape, dims",
    [((1,), (2,), ([0], [0])), ((2, 1), (3, 2), ([1], [0])), ((2, 3), (1, 3), 1),
     ((1, 2, 3), (4, 2, 1), ([0, 2], [2, 0])), ((2,), (3,), ([0], [0]))],
)  # fmt: skip
def test_tensordot_sums_a_side_contracted_against_size_one(a_shape, b_shape, dims):
    # "contracted dimensions differ": torch sums the other side's dimension first
    rng = np.random.default_rng(5)
    av, bv = rng.uniform(-1, 1, a_shape), rng.uniform(-1, 1, b_shape)

    def fn(lib):
        a = lib.tensor(av, requires_grad=True)
        b = lib.tensor(bv, requires_grad=True)
        out = lib.tensordot(a, b, dims=dims)
        return [out, *_grad(lib, out, [a, b])]

    check(Trial(f"tensordot {a_shape} {b_shape} {dims}", fn))


# ---- nn.functional and cumulative ops --------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_one_hot_refuses_to_infer_the_classes_of_an_empty_tensor(shape):
    # num_classes=-1 of an empty tensor gave [..., 0] where torch refuses
    def fn(lib):
        return [lib.nn.functional.one_hot(lib.zeros(shape, dtype=lib.int64), -1)]

    check(Trial(f"one_hot {shape}", fn))
    check(
        Trial(
            "with classes",
            lambda lib: [lib.nn.functional.one_hot(lib.zeros(shape, dtype=lib.int64), 3)],
        )
    )


@pytest.mark.parametrize("name", ["cumsum_", "cumprod_"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_inplace_cumulative_ops_take_only_their_own_dtype(name, dtype):
    def fn(lib):
        x = lib.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=lib.float64)
        getattr(x, name)(1, dtype=getattr(lib, dtype))
        return [x]

    check(Trial(f"{name} {dtype}", fn))


@pytest.mark.parametrize("shape", [(3,), (1,), (), (2, 3)])
def test_renorm_needs_two_dimensions(shape):
    def fn(lib):
        x = lib.tensor(np.full(shape, 2.0), requires_grad=True)
        out = lib.renorm(x, 2, 0, 1.0)
        return [out, *_grad(lib, out, [x])]

    check(Trial(f"renorm {shape}", fn))


def test_diff_of_order_zero_is_the_input_without_prepend_or_append():
    def fn(lib):
        x = lib.tensor([1.0, 4.0, 9.0], dtype=lib.float64, requires_grad=True)
        p = lib.tensor([0.5], dtype=lib.float64, requires_grad=True)
        out = lib.diff(x, n=0, prepend=p, append=p)
        return [out, *_grad(lib, out, [x])]

    check(Trial("diff n=0", fn))


@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
@pytest.mark.parametrize("shape", [(3,), (2, 3), (2, 1, 2)])
def test_var_mean_keeps_the_mean_dims_over_all_elements(name, shape):
    # the mean was 0-d with dim=None, keepdim=True; the var [1, ..., 1]
    def fn(lib):
        x = lib.tensor(np.arange(np.prod(shape), dtype=np.float64).reshape(shape) ** 1.5,
                       requires_grad=True)  # fmt: skip
        v, m = getattr(lib, name)(x, dim=None, keepdim=True, correction=0)
        return [v, m, *_grad(lib, v + m, [x])]

    check(Trial(f"{name} {shape}", fn))


@pytest.mark.parametrize(
    "values, dim",
    [([0.5, -math.inf, -math.inf, 2.0, -math.inf], 0),
     ([[1.0, 0.5], [-math.inf, -math.inf], [-math.inf, -math.inf]], 0),
     ([[30.0, -math.inf, -math.inf, -30.0]], 1), (2.5, 0), (-math.inf, -1)],
)  # fmt: skip
def test_logcumsumexp_gradient_of_minus_infinity_is_zero(values, dim):
    # the doubling scan added -inf to -inf: logaddexp's gradient there is NaN, which reached
    # the -inf entries where torch's exp(x_i - out_j) gives 0 (and a 0-d tensor: identity)
    def fn(lib):
        x = lib.tensor(values, dtype=lib.float64, requires_grad=True)
        out = lib.logcumsumexp(x, dim)
        return [out, *_grad(lib, out, [x])]

    check(Trial(f"logcumsumexp {values}", fn))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nan_to_num_casts_its_replacements_to_the_tensors_precision(dtype):
    # on the torch backend, 1e300 into a float32 tensor raised an overflow error from the fill
    def fn(lib):
        x = lib.tensor([math.inf, math.nan, -math.inf, 1.5], dtype=getattr(lib, dtype))
        return [lib.nan_to_num(x, nan=1e300, posinf=1e300, neginf=-1e300)]

    check(Trial(f"nan_to_num {dtype}", fn))


@pytest.mark.parametrize("b_shape", [(2, 3), (1, 3), (3, 1), (3,), (2, 3, 1), (1, 3, 2)])
def test_lstsq_reads_b_as_a_vector_only_of_a_shape_less_its_last_dim(b_shape):
    # B [1, 3] against A [2, 3, 3] was read as vectors (one dimension fewer than A), where
    # torch reads a matrix of 1 row, and refuses it
    def fn(lib):
        a = lib.tensor(np.eye(3) * [2.0, 3.0, 4.0] + 0.5, requires_grad=True).expand(2, 3, 3)
        b = lib.tensor(np.arange(np.prod(b_shape)).reshape(b_shape) + 1.0, requires_grad=True)
        out = lib.linalg.lstsq(a, b).solution
        return [out, *_grad(lib, out, [a, b])]

    check(Trial(f"lstsq {b_shape}", fn))


@pytest.mark.parametrize("left", [True, False])
def test_solve_triangular_reads_b_as_matrices_even_of_a_shape_less_its_last_dim(left):
    # B [2, 2] against A [2, 2, 2] was solve's vector case: a [2, 2] result, torch's [2, 2, 2]
    def fn(lib):
        a = lib.tensor(np.array([[[2.0, 0.5], [0.0, 3.0]], [[1.0, -1.0], [0.0, 4.0]]]),
                       requires_grad=True)  # fmt: skip
        b = lib.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=lib.float64, requires_grad=True)
        out = lib.linalg.solve_triangular(a, b, upper=True, left=left)
        return [out, *_grad(lib, out, [a, b])]

    check(Trial(f"solve_triangular left={left}", fn))


@pytest.mark.parametrize("pair", [(3, 2), (3.5, 2), (True, False), (3, 2.5), (-7, 2)])
@pytest.mark.parametrize(
    "name",
    ["add", "sub", "mul", "multiply", "div", "true_divide", "floor_divide", "remainder"],
)
def test_arithmetic_of_two_numbers(name, pair):
    # torch.mul(3, 2) is tensor(6) (a 0-d tensor of the numbers' type); retrograd refused
    # every two-number form. torch refuses remainder's, sub's of two bools and
    # floor_divide's of bools: so does retrograd.
    check(Trial(f"{name}{pair}", lambda lib: [getattr(lib, name)(*pair)]))
