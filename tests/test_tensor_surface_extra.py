"""The further ``torch.Tensor`` methods (and their ``rg.X`` function forms) against torch:
special functions, C-library functions, bit operations, fused products, matrix functions,
selection statistics, scatter forms, rearrangements, counts and metadata.

Values and dtypes come from torch in float64 (and float32 where the dtype rule matters), the
gradients too; the op-table rules added for them (``lgamma``, ``digamma``, ``polygamma``,
``i0``/``i1``, ``erfc``, ``fmod``, ``slogdet``) are also checked against finite differences.
Every test runs on the inner backend the suite is run on (``RETROGRAD_INNER=torch``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from nn_testing import check_finite_differences
from surface_testing import same_gradients, same_values

RNG = np.random.default_rng(2024)


def _normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def _positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.3, 4.0, shape)


# -- special functions ---------------------------------------------------------------------------
SPECIAL = {
    "lgamma": (lambda lib, x: x.lgamma(), lambda: _normal(3, 4) * 3),
    "digamma": (lambda lib, x: lib.digamma(x), _positive),
    "polygamma 1": (lambda lib, x: x.polygamma(1), _positive),
    "polygamma 2": (lambda lib, x: lib.polygamma(2, x), _positive),
    "polygamma 0": (lambda lib, x: lib.polygamma(0, x), _positive),
    "mvlgamma": (lambda lib, x: lib.mvlgamma(x + 2.0, 3), _positive),
    "i0": (lambda lib, x: lib.i0(x), lambda: _normal(3, 4) * 2),
    "erfc": (lambda lib, x: x.erfc(), lambda: _normal(3, 4) * 3),
    "logit": (lambda lib, x: lib.logit(x), lambda: RNG.uniform(0.02, 0.98, (3, 4))),
    "logit eps": (lambda lib, x: x.logit(0.2), lambda: RNG.uniform(0.02, 0.98, (3, 4))),
    "sinc": (lambda lib, x: lib.sinc(x), lambda: np.append(_normal(7), [0.0, 1.0, -2.0])),
    "deg2rad": (lambda lib, x: lib.deg2rad(x), lambda: _normal(5) * 200),
    "rad2deg": (lambda lib, x: x.rad2deg(), _normal),
    "frac": (lambda lib, x: x.frac(), lambda: _normal(6) * 5),
    "fix": (lambda lib, x: x.fix(), lambda: _normal(6) * 5),
    "arccos": (lambda lib, x: lib.arccos(x), lambda: RNG.uniform(-0.9, 0.9, 6)),
    "arcsinh": (lambda lib, x: x.arcsinh(), _normal),
    "arctanh": (lambda lib, x: x.arctanh(), lambda: RNG.uniform(-0.9, 0.9, 6)),
    "absolute": (lambda lib, x: lib.absolute(x), lambda: _normal(5)),
    "negative": (lambda lib, x: x.negative(), lambda: _normal(5)),
    "positive": (lambda lib, x: lib.positive(x), lambda: _normal(5)),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", list(SPECIAL))
def test_unary_functions_match_torch(case, dtype):
    fn, make = SPECIAL[case]
    array = make() if case not in ("rad2deg",) else make(5)
    same_gradients(fn, [array], dtype, scale_atol=10.0 if dtype == "float32" else 1.0)


BINARY = {
    "xlogy": (lambda lib, x, y: lib.xlogy(x, y), lambda: (_normal(3, 4), _positive(3, 4))),
    "xlogy zeros": (
        lambda lib, x, y: x.xlogy(y),
        lambda: (np.array([0.0, 0.0, 1.5, -2.0]), np.array([0.5, 2.0, 3.0, 0.5])),
    ),
    "logaddexp": (lambda lib, x, y: lib.logaddexp(x, y), lambda: (_normal(3, 4), _normal(4) * 3)),
    "logaddexp2": (lambda lib, x, y: x.logaddexp2(y), lambda: (_normal(3, 4), _normal(3, 4))),
    "fmod": (lambda lib, x, y: lib.fmod(x, y), lambda: (_normal(3, 4) * 5, _positive(4) - 2.2)),
    "fmax": (
        lambda lib, x, y: lib.fmax(x, y),
        lambda: (np.array([1.0, np.nan, 2.0, np.nan, 3.0]), np.array([0.5, 4.0, np.nan, 1.0, 3.0])),
    ),
    "fmin": (
        lambda lib, x, y: x.fmin(y),
        lambda: (np.array([1.0, np.nan, 2.0, np.nan, 3.0]), np.array([0.5, 4.0, np.nan, 1.0, 3.0])),
    ),
    "ldexp": (lambda lib, x, y: lib.ldexp(x, y), lambda: (_normal(4), np.array([1.0, -3, 0, 10]))),
    "float_power": (lambda lib, x, y: x.float_power(y), lambda: (_positive(4), _normal(4))),
    "dist": (lambda lib, x, y: lib.dist(x, y), lambda: (_normal(3, 4), _normal(4))),
    "dist p3": (lambda lib, x, y: x.dist(y, 3), lambda: (_normal(3, 4), _normal(3, 4))),
    "arctan2": (lambda lib, x, y: lib.arctan2(x, y), lambda: (_normal(5), _normal(5))),
}


@pytest.mark.parametrize("case", list(BINARY))
def test_binary_functions_match_torch(case):
    fn, make = BINARY[case]
    same_gradients(fn, list(make()))


def test_copysign_and_nan_to_num_match_torch():
    x = np.array([1.5, -2.0, 0.0, 3.0, -0.5])
    y = np.array([-1.0, 2.0, -0.0, 0.0, -3.0])
    same_values(lambda lib, a, b: lib.copysign(a, b), [x, y])
    same_gradients(
        lambda lib, a: a.copysign(torch.tensor(y) if lib is torch else rg.tensor(y)), [x]
    )
    bad = np.array([1.0, np.nan, np.inf, -np.inf, -2.0])
    for kwargs in ({}, {"nan": 2.0}, {"nan": 1.0, "posinf": 9.0, "neginf": -9.0}):
        same_gradients(lambda lib, a, kw=kwargs: lib.nan_to_num(a, **kw), [bad])
        same_values(lambda lib, a, kw=kwargs: a.nan_to_num(**kw), [bad], "float32")
    same_values(lambda lib, a: a.nan_to_num(), [np.array([1, 2])])


def test_special_function_values_at_their_edges_match_torch():
    x = np.array([0.0, -0.0, 1e-300, 1.0, 2.0, 3.5, np.inf, -np.inf, np.nan])
    same_values(lambda lib, a: a.lgamma(), [x])
    same_values(lambda lib, a: a.digamma(), [x[:6]])
    same_values(lambda lib, a: a.erfc(), [np.array([-30.0, 0.0, 10.0, 26.0, np.inf])])
    same_values(lambda lib, a: lib.sinc(a), [np.array([0.0, 1.0, 0.5, -3.0])])
    same_values(lambda lib, a: a.lgamma(), [np.array([1, 2, 5])])  # ints: float32


def test_xlogy_at_zero_matches_torch_and_its_x_gradient_is_zero_there():
    x, y = np.array([0.0, 0.0, 0.0, 2.0]), np.array([0.0, -1.0, np.nan, 0.0])
    same_values(lambda lib, a, b: lib.xlogy(a, b), [x, y])
    same_values(lambda lib, a: lib.xlogy(a, 3.0), [x])
    same_gradients(lambda lib, a: lib.xlogy(a, 0.0), [x[:3]])


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.lgamma(),
        lambda x: x.digamma(),
        lambda x: x.polygamma(2),
        lambda x: x.i0(),
        lambda x: x.erfc(),
        lambda x: x.fmod(0.7),
        lambda x: rg.fmod(x * 3.0, x.flip(0) + 5.0),
    ],
)
def test_new_op_rules_match_finite_differences(fn):
    check_finite_differences(fn, [_positive(6)])


def test_second_derivatives_of_the_new_rules_match_torch():
    x = _positive(5)
    for name in ("lgamma", "digamma", "i0", "erfc"):
        rx = rg.tensor(x).require_grad()
        (g,) = rg.autograd.grad(getattr(rx, name)().sum(), [rx], create_graph=True)
        (gg,) = rg.autograd.grad(g.sum(), [rx])
        tx = torch.tensor(x, requires_grad=True)
        (tg,) = torch.autograd.grad(getattr(tx, name)().sum(), [tx], create_graph=True)
        (tgg,) = torch.autograd.grad(tg.sum(), [tx])
        np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-9, atol=1e-10, err_msg=name)


def test_predicates_and_integer_ops_match_torch():
    x = np.array([1.0, -np.inf, np.inf, np.nan, -0.0, 0.0, -2.0])
    for name in ("isposinf", "isneginf", "isreal", "signbit"):
        same_values(lambda lib, a, name=name: getattr(lib, name)(a), [x])
    same_values(lambda lib, a: a.signbit(), [np.array([-1, 0, 3])])
    a, b = np.array([12, -18, 7, 0]), np.array([8, 12, 0, 5])
    for name in ("gcd", "lcm"):
        same_values(lambda lib, u, v, name=name: getattr(lib, name)(u, v), [a, b])
    same_values(lambda lib, u: lib.fmod(u, 5), [np.array([7, -7, 3])])
    same_values(lambda lib, u: u.fmod(-2.5), [np.array([7, -7, 3])])
    same_values(lambda lib, u, v: lib.nextafter(u, v), [_normal(4), _normal(4)])
    same_values(lambda lib, u, v: lib.heaviside(u, v), [np.array([-1.0, 0.0, 2.0]), np.ones(3) / 2])
    same_values(lambda lib, u, v: lib.isclose(u, v), [np.array([1.0, 2.0]), np.array([1.0, 2.1])])
    assert rg.tensor([1.0, 2.0]).allclose(rg.tensor([1.0, 2.0 + 1e-9])) is True


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, a, b: lib.bitwise_and(a, b),
        lambda lib, a, b: a.bitwise_or(b),
        lambda lib, a, b: a ^ b,
        lambda lib, a, b: a & 6,
        lambda lib, a, b: 5 | a,
        lambda lib, a, b: ~a,
        lambda lib, a, b: lib.bitwise_not(a),
        lambda lib, a, b: a << b.abs(),
        lambda lib, a, b: lib.bitwise_right_shift(a, b.abs()),
        lambda lib, a, b: a >> 1,
        lambda lib, a, b: 1 << b.abs(),
        lambda lib, a, b: a << 70,
    ],
)
def test_bitwise_ops_match_torch(fn):
    same_values(fn, [np.array([12, -7, 0, 255, 3]), np.array([10, 3, -1, 4, 2])])


def test_bitwise_ops_of_bools_and_mixed_dtypes_match_torch():
    p, q = np.array([True, False, True]), np.array([True, True, False])
    for fn in (
        lambda lib, a, b: a & b,
        lambda lib, a, b: lib.bitwise_xor(a, b),
        lambda lib, a, b: ~a,
        lambda lib, a, b: a | True,
        lambda lib, a, b: a & 3,
    ):
        same_values(fn, [p, q])
    same_values(lambda lib, a, b: a & b, [p, np.array([3, 2, 1])])


def test_bitwise_ops_refuse_floats():
    with pytest.raises(rg.DTypeError, match="bitwise_and"):
        rg.tensor([1.0]) & rg.tensor([2.0])
    with pytest.raises(rg.DTypeError, match="bitwise_not"):
        ~rg.tensor([1.5])
    with pytest.raises(rg.DTypeError, match="gcd"):
        rg.gcd(rg.tensor([1.0]), rg.tensor([2.0]))


# -- fused products and matrix functions ---------------------------------------------------------
PRODUCTS = {
    "addmm": (
        lambda lib, c, a, b: lib.addmm(c, a, b),
        lambda: (_normal(3, 5), _normal(3, 4), _normal(4, 5)),
    ),
    "addmm scaled, broadcast input": (
        lambda lib, c, a, b: c.addmm(a, b, beta=0.5, alpha=-2.0),
        lambda: (_normal(5), _normal(3, 4), _normal(4, 5)),
    ),
    "addmm beta 0 ignores NaN": (
        lambda lib, c, a, b: c.addmm(a, b, beta=0),
        lambda: (np.full((3, 5), np.nan), _normal(3, 4), _normal(4, 5)),
    ),
    "baddbmm": (
        lambda lib, c, a, b: lib.baddbmm(c, a, b, alpha=0.3),
        lambda: (_normal(2, 3, 5), _normal(2, 3, 4), _normal(2, 4, 5)),
    ),
    "addbmm": (
        lambda lib, c, a, b: c.addbmm(a, b, beta=2),
        lambda: (_normal(3, 5), _normal(2, 3, 4), _normal(2, 4, 5)),
    ),
    "addmv": (
        lambda lib, c, a, b: lib.addmv(c, a, b),
        lambda: (_normal(3), _normal(3, 4), _normal(4)),
    ),
    "addr": (
        lambda lib, c, a, b: c.addr(a, b, alpha=3),
        lambda: (_normal(3, 4), _normal(3), _normal(4)),
    ),
}


@pytest.mark.parametrize("case", list(PRODUCTS))
def test_fused_products_match_torch(case):
    fn, make = PRODUCTS[case]
    arrays = list(make())
    if "NaN" in case:
        same_values(fn, arrays)
        return
    same_gradients(fn, arrays)


def test_fused_products_of_integers_and_their_errors_match_torch():
    c, a, b = np.ones((2, 2), np.int64), np.arange(4).reshape(2, 2), np.arange(4).reshape(2, 2)
    same_values(lambda lib, u, v, w: u.addmm(v, w, beta=2, alpha=3), [c, a, b])
    with pytest.raises(rg.DTypeError, match="addmm"):
        rg.tensor(c).addmm(rg.tensor(a), rg.tensor(b), alpha=0.5)
    with pytest.raises(rg.ShapeError, match="addmm"):
        rg.ones(3, 3).addmm(rg.ones(2, 2), rg.ones(2, 2))


@pytest.mark.parametrize(
    "shapes", [((2, 3), (4, 5)), ((3,), (2, 2)), ((2, 1, 2), (3, 2)), ((2,), (3,))]
)
def test_kron_matches_torch(shapes):
    same_gradients(lambda lib, a, b: lib.kron(a, b), [_normal(*shapes[0]), _normal(*shapes[1])])


def test_vdot_matches_torch():
    same_gradients(lambda lib, a, b: lib.vdot(a, b), [_normal(5), _normal(5)])


def _well_conditioned(*shape: int) -> np.ndarray:
    return _normal(*shape) + 3.0 * np.eye(shape[-1])


MATRIX = {
    "inverse": lambda lib, a: a.inverse(),
    "pinverse": lambda lib, a: lib.pinverse(a),
    "matrix_power 3": lambda lib, a: a.matrix_power(3),
    "matrix_power 0": lambda lib, a: lib.matrix_power(a, 0) * a,
    "matrix_power -2": lambda lib, a: a.matrix_power(-2),
    "det": lambda lib, a: lib.det(a),
    "logdet": lambda lib, a: a.logdet(),
    "slogdet logabsdet": lambda lib, a: a.slogdet().logabsdet,
}


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
@pytest.mark.parametrize("case", list(MATRIX))
def test_matrix_functions_match_torch(case, shape):
    same_gradients(MATRIX[case], [_well_conditioned(*shape)])


def test_slogdet_sign_sgn_and_ldexp_of_integer_exponents_match_torch():
    a = _well_conditioned(2, 3, 3)
    a[0] = -a[0]
    same_values(lambda lib, m: lib.slogdet(m).sign, [a])
    same_values(lambda lib, x: lib.sgn(x), [np.array([-2.0, 0.0, 3.0])])
    # values only: torch's gradient computes 2**other in integers (0 for negative exponents)
    same_values(lambda lib, x, n: lib.ldexp(x, n), [_normal(4), np.array([1, -3, 0, 10])])


def test_det_of_negative_and_singular_matrices_matches_torch():
    flipped = np.array([[0.0, 1.0], [1.0, 0.0]]) * 2.0
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    for a in (flipped, singular):
        same_values(lambda lib, m: (m.det(), m.logdet(), *m.slogdet()), [a])
    check_finite_differences(lambda m: m.slogdet().logabsdet, [_well_conditioned(3, 3)])


# -- selection statistics ------------------------------------------------------------------------
@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
def test_kthvalue_matches_torch(dim, keepdim):
    a = _normal(4, 5)
    same_gradients(lambda lib, x: x.kthvalue(2, dim, keepdim).values, [a])
    same_values(lambda lib, x: lib.kthvalue(x, 3, dim, keepdim), [a])


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("q", [0.3, [0.0, 0.25, 0.5, 1.0]])
@pytest.mark.parametrize("dim", [None, 1])
def test_quantile_matches_torch(q, dim, interpolation):
    a = _normal(3, 6)
    qs = q if isinstance(q, float) else np.array(q)

    def fn(lib, x):
        qq = qs if isinstance(qs, float) else lib.tensor(qs)
        return lib.quantile(x, qq, dim, interpolation=interpolation)

    same_gradients(fn, [a])
    same_values(lambda lib, x: x.quantile(0.6, dim, True, interpolation=interpolation), [a])


def test_nan_ignoring_statistics_match_torch():
    a = _normal(4, 5)
    a[0, 1] = a[2, 2] = a[2, 4] = np.nan
    a[3, :] = np.nan
    same_values(lambda lib, x: lib.nanquantile(x, 0.4, 1), [a])
    same_values(lambda lib, x: x.quantile(0.4, 1), [a])
    same_values(lambda lib, x: x.nanmedian(1), [a[:3]])
    same_values(lambda lib, x: lib.nanmedian(x), [a])
    same_values(lambda lib, x: x.nanmean(1), [a])
    same_values(lambda lib, x: lib.nanmean(x), [a])
    same_gradients(lambda lib, x: x.nanmean(0, True), [a[:3]], pick=lambda t: t[..., :1])


def test_reductions_and_statistics_match_torch():
    a = _normal(3, 6)
    same_values(lambda lib, x: lib.aminmax(x), [a])
    same_values(lambda lib, x: x.aminmax(dim=1, keepdim=True), [a])
    same_gradients(lambda lib, x: lib.cov(x), [a])
    same_gradients(lambda lib, x: x.cov(correction=0), [a])
    same_gradients(lambda lib, x: x.cov(), [a[0]])
    same_gradients(lambda lib, x: lib.corrcoef(x), [a])
    same_gradients(lambda lib, x: lib.renorm(x, 2, 0, 1.5), [a])
    same_gradients(lambda lib, x: x.renorm(1, 1, 2.0), [a])
    same_gradients(lambda lib, x: lib.msort(x), [a])


# -- index and scatter forms ---------------------------------------------------------------------
def test_take_along_dim_matches_torch():
    a = _normal(3, 5)
    idx = RNG.integers(0, 5, (3, 2))
    same_gradients(lambda lib, x, i: lib.take_along_dim(x, i, 1), [a, idx])
    same_gradients(lambda lib, x, i: x.take_along_dim(i), [a, idx])
    same_gradients(lambda lib, x, i: x.take_along_dim(i[:1], 1), [a, idx])
    argsorted = np.argsort(a, axis=0)
    same_gradients(lambda lib, x, i: lib.take_along_dim(x, i, 0), [a, argsorted])


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_scatter_reduce_matches_torch(reduce, include_self):
    index = np.array([[0, 2, 0, 1], [3, 3, 0, 0]])
    fn = lambda lib, x, s, i: x.scatter_reduce(1, i, s, reduce, include_self=include_self)  # noqa: E731
    same_gradients(fn, [_normal(2, 4), _normal(2, 4), index])
    same_values(fn, [np.arange(8).reshape(2, 4), np.arange(8).reshape(2, 4) * 3, index])


def test_scatter_reduce_refuses_reductions_it_lacks():
    # torch's five are there (tests/test_real_ports_13.py and test_index_dtypes_prod_vander.py
    # check them against torch); another name is refused, naming those it takes
    with pytest.raises(RuntimeError):
        torch.zeros(3).scatter_reduce(0, torch.tensor([0]), torch.ones(1), "median")
    with pytest.raises(rg.InvalidArgumentError, match="'sum', 'prod', 'mean'"):
        rg.zeros(3).scatter_reduce(0, rg.tensor([0]), rg.ones(1), "median")


def test_index_put_matches_torch():
    rows, cols = np.array([0, 2, 0]), np.array([1, 1, 1])
    for accumulate in (False, True):
        fn = lambda lib, x, v, r, c, add=accumulate: x.index_put((r, c), v, add)  # noqa: E731
        same_values(fn, [_normal(3, 4), _normal(3), rows, cols])
    same_gradients(
        lambda lib, x, v, r, c: lib.index_put(x, (r, c), v, accumulate=True),
        [_normal(3, 4), _normal(3), rows, cols],
    )
    same_gradients(
        lambda lib, x, v, r: x.index_put((r,), v), [_normal(3, 4), _normal(4), np.array([2])]
    )


def test_select_and_slice_scatter_match_torch():
    same_gradients(lambda lib, x, s: lib.select_scatter(x, s, 1, -1), [_normal(3, 4), _normal(3)])
    same_gradients(
        lambda lib, x, s: x.slice_scatter(s, 1, 1, None, 2), [_normal(3, 5), _normal(3, 2)]
    )
    same_gradients(lambda lib, x, s: lib.slice_scatter(x, s), [_normal(2, 3), _normal(2, 3)])


@pytest.mark.parametrize("offset", [0, 1, -2])
def test_diag_embed_and_diagflat_match_torch(offset):
    same_gradients(lambda lib, x: lib.diag_embed(x, offset), [_normal(2, 3)])
    same_gradients(lambda lib, x: x.diag_embed(offset, 0, 2), [_normal(2, 3)])
    same_gradients(lambda lib, x: lib.diagflat(x, offset), [_normal(2, 2)])


# -- rearrangements ------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [-1, 0, 1, 2, 3, 5])
@pytest.mark.parametrize("dims", [(0, 1), (1, 0), (2, 0)])
def test_rot90_matches_torch(k, dims):
    same_gradients(lambda lib, x: lib.rot90(x, k, dims), [_normal(2, 3, 4)])


def test_splits_and_sum_to_size_match_torch():
    a = _normal(4, 6, 2)
    same_values(lambda lib, x: lib.hsplit(x, 3), [a])
    same_values(lambda lib, x: x.vsplit([1, 3]), [a])
    same_values(lambda lib, x: lib.dsplit(x, 2), [a])
    same_values(lambda lib, x: x.hsplit(2), [_normal(6)])
    same_values(lambda lib, x: x.split_with_sizes([1, 2, 3], 1), [a])
    same_gradients(lambda lib, x: x.sum_to_size(6, 1), [a])
    same_gradients(lambda lib, x: x.sum_to_size((1, 1, 2)), [a])
    same_values(lambda lib, x: lib.narrow_copy(x, 1, 2, 3), [a])
    with pytest.raises(rg.ShapeError, match="sum_to_size"):
        rg.ones(2, 3).sum_to_size(3, 3)
    with pytest.raises(rg.ShapeError, match="split_with_sizes"):
        rg.ones(2, 3).split_with_sizes([1, 1], 1)


# -- counts and draws ----------------------------------------------------------------------------
def test_counts_match_torch():
    ints = np.array([3, 1, 1, 0, 5, 3, 3])
    same_values(lambda lib, x: lib.bincount(x), [ints])
    same_values(lambda lib, x: x.bincount(minlength=9), [ints])
    same_values(lambda lib, x, w: x.bincount(w), [ints, _normal(7)])
    same_values(lambda lib, x: x.unique(return_inverse=True, return_counts=True), [ints])
    runs = np.array([1, 1, 2, 2, 3, 1, 1, 2])
    same_values(lambda lib, x: lib.unique_consecutive(x, True, True), [runs])
    data = np.array([0.0, 0.5, 1.0, 2.5, 3.0, -1.0, 2.99])
    same_values(lambda lib, x: lib.histc(x, 4), [data])
    same_values(lambda lib, x: x.histc(3, 0.0, 3.0), [data])
    same_values(lambda lib, x: x.histc(5), [data], "float32")


def test_draws_have_the_shapes_and_ranges_torch_gives():
    probs = rg.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    drawn = probs.multinomial(4, replacement=True)
    assert drawn.shape == (2, 4) and drawn.dtype == "int64"
    assert set(drawn[0].tolist()) == {1} and set(drawn[1].tolist()) <= {0, 2}
    coins = rg.tensor([0.0, 1.0, 1.0, 0.0]).bernoulli()
    assert coins.tolist() == [0.0, 1.0, 1.0, 0.0] and coins.dtype == "float32"


# -- metadata and what autograd hooks mean here --------------------------------------------------
def test_metadata_matches_torch():
    for data in ([1.0, 2.0], [[1, 2, 3]], [True], 2.5):
        t, r = torch.tensor(data), rg.tensor(data)
        assert r.is_signed() == t.is_signed()
        assert r.is_complex() == t.is_complex()
        assert r.is_cpu == t.is_cpu and r.is_nested == t.is_nested
        assert r.itemsize == t.itemsize and r.nbytes == t.nbytes
        assert r.is_same_size(rg.tensor(data)) and rg.is_same_size(r, r)
    assert rg.tensor([3.0]).is_nonzero() is True and rg.tensor(0).is_nonzero() is False
    with pytest.raises(rg.ShapeError, match="is_nonzero"):
        rg.tensor([1.0, 2.0]).is_nonzero()


def test_forms_that_cannot_hold_are_clear_errors():
    x = rg.tensor([1.0]).require_grad()
    assert x.detach().short().dtype == "int16" and x.detach().char().dtype == "int8"
    with pytest.raises(rg.DTypeError, match="frac"):
        rg.tensor([1]).frac()
    # torch 2.13 no longer refuses elements <= (p-1)/2: the lgamma sum, as torch's
    expected = torch.tensor([0.2]).mvlgamma(3)
    assert np.allclose(rg.tensor([0.2]).mvlgamma(3).numpy(), expected.numpy())


def test_grad_fn_and_retains_grad_answer_as_torch_does():
    x = rg.tensor([1.0, 2.0]).require_grad()
    tx = torch.tensor([1.0, 2.0], requires_grad=True)
    assert (x.grad_fn is None) == (tx.grad_fn is None)
    y, ty = x * 2, tx * 2
    assert (y.grad_fn is None) == (
        ty.grad_fn is None
    ) and y.grad_fn == ty.grad_fn.name() == "MulBackward0"
    assert rg.tensor([1.0]).grad_fn is None
    assert y.retains_grad is False and ty.retains_grad is False
    y.retain_grad()
    ty.retain_grad()
    assert y.retains_grad is True and ty.retains_grad is True
    assert x.retains_grad is False


def test_function_forms_exist_for_the_new_methods():
    for name in ("addmm", "lgamma", "bitwise_and", "kthvalue", "quantile", "rot90", "xlogy"):
        assert callable(getattr(rg, name)) and hasattr(rg.Tensor, name)
    zero = rg.tensor(0.0, dtype="float64")
    assert rg.logaddexp(zero, zero).item() == math.log(2.0)


def test_linalg_det_slogdet_and_matrix_power_match_torch():
    a = _well_conditioned(2, 3, 3)
    same_gradients(lambda lib, m: lib.linalg.det(m), [a])
    same_gradients(lambda lib, m: lib.linalg.slogdet(m).logabsdet, [a])
    same_gradients(lambda lib, m: lib.linalg.matrix_power(m, 4), [a])
    with pytest.raises(rg.ShapeError, match="square"):
        rg.linalg.det(rg.ones(2, 3))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_matches_torch(dim):
    same_gradients(lambda lib, x: lib.logcumsumexp(x, dim), [_normal(5, 7) * 3])
    wide = np.array([[-1000.0, 0.0, 1000.0, -np.inf, 5.0]])
    same_values(lambda lib, x: x.logcumsumexp(1), [wide])


def test_mode_matches_torch():
    ints = np.array([[1, 2, 2, 3, 3, 1], [5, 5, 4, 4, 0, 0]])
    same_values(lambda lib, x: lib.mode(x, 1), [ints])
    same_values(lambda lib, x: x.mode(0, True), [ints])
    floats = np.array([[2.0, 1.0, 2.0, 1.0, 7.0], [0.5, 0.5, 3.0, 3.0, 3.0]])
    same_gradients(lambda lib, x: x.mode().values, [floats])


@pytest.mark.parametrize(
    "fn",
    [
        lambda lib, x, y: x.clone().lgamma_(),
        lambda lib, x, y: x.clone().xlogy_(y.abs()),
        lambda lib, x, y: x.clone().addmm_(x, y, beta=0.5),
        lambda lib, x, y: x.clone().nan_to_num_(nan=1.0),
        lambda lib, x, y: x.clone().fmod_(2.0),
        lambda lib, x, y: x.clone().arctan2_(y),
    ],
)
def test_in_place_forms_match_torch(fn):
    same_values(fn, [_normal(3, 3), _normal(3, 3)])


def test_in_place_forms_keep_the_dtype_as_torch():
    ints = np.array([5, 12, 7])
    same_values(lambda lib, x: x.clone().bitwise_and_(6), [ints])
    same_values(lambda lib, x: x.clone().gcd_(lib.tensor([10, 8, 3])), [ints])
    with pytest.raises(rg.DTypeError, match="lgamma_"):
        rg.tensor(ints).lgamma_()
    with pytest.raises(rg.AutodiffError, match="in-place"):
        rg.tensor([1.0]).require_grad().lgamma_()


SOLVE = {
    "matrix": ((3, 3), (3, 2), {}),
    "vector": ((3, 3), (3,), {}),
    "batch broadcast": ((2, 3, 3), (3, 4), {}),
    "batched vectors": ((2, 3, 3), (2, 3), {}),
    "right": ((3, 3), (2, 3), {"left": False}),
}


@pytest.mark.parametrize("case", list(SOLVE))
def test_linalg_solve_matches_torch(case):
    a_shape, b_shape, kwargs = SOLVE[case]
    same_gradients(
        lambda lib, a, b: lib.linalg.solve(a, b, **kwargs),
        [_well_conditioned(*a_shape), _normal(*b_shape)],
    )


def test_linalg_solve_matches_finite_differences_and_refuses_singular_matrices():
    check_finite_differences(
        lambda a, b: rg.linalg.solve(a, b), [_well_conditioned(3, 3), _normal(3, 2)]
    )
    with pytest.raises(rg.InvalidArgumentError, match="singular"):
        rg.linalg.solve(rg.zeros(2, 2, dtype="float64"), rg.ones(2, dtype="float64"))


def test_methods_torch_removed_raise_as_there():
    a = rg.eye(2)
    for name in ("solve", "lstsq", "eig", "symeig"):
        with pytest.raises(RuntimeError, match="removed"):
            getattr(torch.eye(2), name)(*([torch.eye(2)] if name in ("solve", "lstsq") else []))
        with pytest.raises(rg.InvalidArgumentError, match="removed"):
            getattr(a, name)(a)


def _positive_definite(*shape: int) -> np.ndarray:
    a = _normal(*shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")  # the oracle's torch.cholesky
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_cholesky_matches_torch(shape):
    a = _positive_definite(*shape)
    same_gradients(lambda lib, m: lib.linalg.cholesky(m), [a])
    same_gradients(lambda lib, m: m.cholesky(upper=True), [a])
    same_gradients(lambda lib, m: lib.cholesky(m), [a])


def test_cholesky_matches_finite_differences_through_a_symmetric_input_and_refuses_indefinite():
    check_finite_differences(
        lambda a: (a @ a.mT + rg.eye(3, dtype="float64") * 3.0).cholesky(), [_normal(3, 3)]
    )
    with pytest.raises(rg.InvalidArgumentError, match="positive-definite"):
        rg.linalg.cholesky(rg.tensor([[1.0, 2.0], [2.0, 1.0]]))


@pytest.mark.parametrize(
    "weights, message",
    [
        ([0.5, -1.0], "element < 0"),
        ([float("nan"), 1.0], "`nan`"),
        ([float("inf"), 1.0], "`inf`"),
        ([[0.2, 0.8], [0.0, 0.0]], r"sum of probabilities <= 0"),
    ],
)
def test_multinomial_refuses_what_torch_refuses(weights, message):
    with pytest.raises(RuntimeError):  # torch refuses them too
        torch.multinomial(torch.tensor(weights), 1, replacement=True)
    with pytest.raises(rg.errors.InvalidArgumentError, match=message):
        rg.multinomial(rg.tensor(weights), 1, replacement=True)


def test_hypot_function_is_torchs():
    a, b = np.array([3.0, 1e200, -2.0, 0.5]), np.array([4.0, 1e200, 0.0, -0.25])
    x = rg.tensor(a, dtype="float64").require_grad()
    out = rg.hypot(x, rg.tensor(b, dtype="float64"))
    grads = out.sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    expected = torch.hypot(tx, torch.tensor(b))
    expected.sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy(), rtol=1e-15)


def test_equality_with_an_object_that_defines_its_own_is_left_to_it_as_torchs():
    """``norm == pytest.approx(1.0)`` and ``t == mock.ANY`` answer as with torch's tensors:
    the other object's ``__eq__`` runs (the tensor's declined); ``None`` and strings are not
    equal; an object with no equality of its own is still refused by name."""
    from unittest import mock

    import torch

    for lib in (rg, torch):
        norm = lib.tensor(1.0, dtype=lib.float64)
        assert bool(norm == pytest.approx(1.0)) and not bool(norm == pytest.approx(1.5))
        assert bool(norm != pytest.approx(1.5)) and bool(norm == mock.ANY)
        assert (norm == None) is False and (norm == "cpu") is False  # noqa: E711
        assert bool(lib.tensor([1.0, 2.0]) == pytest.approx([1.0, 2.0]))
    with pytest.raises(rg.DTypeError, match="equal: cannot combine a tensor with object"):
        rg.tensor(1.0) == object()  # noqa: B015
