"""The defects round 33 of the differential fuzzer (``tests/fuzz33_cases.py``) found, each
checked against torch's result and failing on the code before its fix."""

import math

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

INF, NAN = math.inf, math.nan


def _both(fn, values, dtype="float64", order=1):
    """``fn(lib, x)``'s value and gradients (of its sum; with ``order`` 2 also of the first
    gradient's sum, under ``create_graph``) in torch and in retrograd, as NumPy."""
    results = []
    for lib in (torch, rg):
        x = lib.tensor(values, dtype=getattr(lib, dtype), requires_grad=True)
        out = fn(lib, x)
        (grad,) = lib.autograd.grad(out.sum(), [x], create_graph=order > 1)
        found = [out.detach().numpy(), grad.detach().numpy()]
        if order > 1:
            (second,) = lib.autograd.grad(grad.sum(), [x])
            found.append(second.numpy())
        results.append(found)
    return results


def _same(got, want, signs=True):
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, equal_nan=True)
    if signs:
        assert np.signbit(got).tolist() == np.signbit(want).tolist()


@pytest.mark.parametrize("dtype, huge", [("float64", 1e308), ("float32", 3e38)])
@pytest.mark.parametrize("name", ["maximum", "minimum", "logaddexp", "logaddexp2"])
def test_ties_of_huge_values_are_not_infinite(name, dtype, huge):
    # (a tie's value was (a + b) / 2, whose sum overflowed: maximum(1e308, 1e308) was inf)
    values = [huge, -huge, 5e-324 if dtype == "float64" else 1e-45, -0.0, INF]
    want, got = _both(lambda lib, x: getattr(lib, name)(x, x), values, dtype)
    for g, w in zip(got, want):
        _same(g, w, signs=name in ("maximum", "minimum"))


@pytest.mark.parametrize("divisor", [-2.0, 2.0, -INF, INF, -0.5])
def test_a_zero_remainder_keeps_the_dividends_sign(divisor):
    # (the NumPy backend gave it the divisor's: remainder(0.0, -2.0) was -0.0, torch's +0.0)
    values = [0.0, -0.0, 2.0, -2.0, 4.0, -1.0]
    for dtype in ("float64", "float32"):
        want = torch.remainder(torch.tensor(values, dtype=getattr(torch, dtype)), divisor)
        got = rg.remainder(rg.tensor(values, dtype=getattr(rg, dtype)), divisor)
        _same(got.numpy(), want.numpy())
        want = torch.remainder(divisor, torch.tensor([1.0, -1.0, INF, 0.5, -0.5]))
        got = rg.tensor(divisor) % rg.tensor([1.0, -1.0, INF, 0.5, -0.5])
        _same(got.numpy(), want.numpy())


@pytest.mark.parametrize("size", [3, 5000])  # NumPy's loop and the compiled one
def test_relu_keeps_minus_zero(size):
    # (the NumPy backend's relu made -0.0 +0.0; torch's keeps it)
    values = np.resize(np.array([-0.0, 0.0, -1.0, 2.0, NAN, -INF]), size)
    want, got = _both(lambda lib, x: lib.relu(x), values)
    for g, w in zip(got, want):
        _same(g, w)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_erfinv_of_minus_zero_is_minus_zero_when_tracked(dtype):
    # (its gradient's zero-valued term, added to the value, made -0.0 +0.0)
    want, got = _both(lambda lib, x: lib.erfinv(x), [-0.0, 0.0, 0.5, -1.0], dtype)
    _same(got[0], want[0])


def test_lgamma_at_subnormals_is_finite():
    # (SciPy's gammaln is inf below float64's smallest normal: lgamma(5e-324) was inf, not
    # -log(5e-324) = 744.44)
    values = [5e-324, -5e-324, 1e-310, -1e-310, 2e-308, 1e-300]
    for name in ("lgamma", "special.gammaln"):
        space, _, function = name.rpartition(".")
        want = getattr(getattr(torch, space) if space else torch, function)(
            torch.tensor(values, dtype=torch.float64)
        )
        got = getattr(getattr(rg, space) if space else rg, function)(
            rg.tensor(values, dtype=rg.float64)
        )
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_trigamma_at_the_poles_and_minus_infinity_is_torchs(dtype):
    # (SciPy's: inf at the poles, torch's reflection pi^2 / sin^2(pi x) a huge finite value
    # there, and NaN at -inf; so was digamma's gradient)
    values = [-1.0, -2.0, -20.0, -INF, 0.0, -0.0, 0.5, -0.5, 3.0, INF]
    want = torch.polygamma(1, torch.tensor(values, dtype=getattr(torch, dtype)))
    got = rg.polygamma(1, rg.tensor(values, dtype=getattr(rg, dtype)))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, equal_nan=True)
    want, got = _both(lambda lib, x: lib.digamma(x), values, dtype)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, equal_nan=True)


def test_higher_polygammas_and_zeta_are_nan_at_plus_infinity():
    # (SciPy's limit 0 where torch's Hurwitz zeta, and so polygamma(n >= 2), is NaN)
    values = [INF, -INF, 2.0, -0.0]
    for n in (2, 3):
        want = torch.polygamma(n, torch.tensor(values))
        got = rg.polygamma(n, rg.tensor(values))
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)
    want = torch.special.zeta(torch.tensor([3.0, 2.0]), torch.tensor([INF, 1.5]))
    got = rg.special.zeta(rg.tensor([3.0, 2.0]), rg.tensor([INF, 1.5]))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, equal_nan=True)


def test_lerp_with_a_tensor_weight_follows_torchs_formula_and_gradients():
    # (the value came from `end` only for weight >= 0.5, not |weight| >= 0.5: lerp(-1, inf,
    # -1) was -inf, torch's NaN; and the masked branch of the composition made NaN
    # gradients where torch's are infinite)
    start = [-1.0, -2.0, INF, 1.0, -0.999]
    end = [INF, -INF, 2.0, -0.0, 1e300]
    weight = [-1.0, -2.0, INF, 1.0, -0.999]
    results = []
    for lib in (torch, rg):
        tensors = [
            lib.tensor(v, dtype=lib.float64, requires_grad=True) for v in (start, end, weight)
        ]
        out = lib.lerp(*tensors)
        grads = lib.autograd.grad(out.sum(), tensors)
        results.append([out.detach().numpy()] + [g.numpy() for g in grads])
    for got, want in zip(results[1], results[0]):
        _same(got, want, signs=False)


@pytest.mark.parametrize(
    "dtype, tiny", [("float64", 5e-324), ("float64", 1e-200), ("float32", 1e-30)]
)
def test_sinc_gradient_where_x_squared_underflows_is_zero(dtype, tiny):
    # (torch's formula divides by pi x^2 and puts 0 where that is 0; retrograd's 0 / 0 was NaN)
    want, got = _both(lambda lib, x: lib.sinc(x), [tiny, -tiny, 0.0, 0.25], dtype)
    for g, w in zip(got, want):
        _same(g, w, signs=False)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", ["special.i1", "special.i1e", "i0", "special.i0e"])
def test_bessel_slopes_at_tiny_and_nan_inputs_are_torchs_one_half(name, dtype):
    # (torch takes i1's slope as 1/2 where |x| <= epsilon, NaN included, from a safe x; the
    # NaN and the subnormals gave NaN, 0 or -inf, and i0's second derivative with them)
    space, _, function = name.rpartition(".")

    def fn(lib, x):
        return getattr(getattr(lib, space) if space else lib, function)(x)

    values = [NAN, 0.0, -0.0, 1e-40, -1e-40, 1e-9, 0.5, -2.0]
    want, got = _both(fn, values, dtype, order=2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name", ["logit", "special.logit"])
def test_logit_with_eps_zero_has_infinite_slopes_at_the_ends(name):
    # (log(z / (1 - z)) gave 0 / 0: NaN where torch's 1 / (z (1 - z)) is infinite)
    space, _, function = name.rpartition(".")
    values = [0.0, 1.0, 0.5, -1.0, 2.0, 0.25]
    want, got = _both(
        lambda lib, x: getattr(getattr(lib, space) if space else lib, function)(x, eps=0.0),
        values,
    )
    for g, w in zip(got, want):
        _same(g, w, signs=False)


@pytest.mark.parametrize("sign", [-0.0, 1.0, -INF, NAN])
def test_copysign_gradient_is_nan_at_infinite_and_nan_inputs(sign):
    # (torch's is g * out / x: inf / inf is NaN; retrograd gave +-g there)
    values = [INF, -INF, NAN, 0.0, -0.0, 2.0, -3.0]
    want, got = _both(lambda lib, x: lib.copysign(x, sign), values)
    for g, w in zip(got, want):
        _same(g, w, signs=False)
    # (the second operand tracked: a zero gradient, as torch's)
    for lib in (torch, rg):
        x, y = (
            lib.tensor([1.0, -2.0], requires_grad=True),
            lib.tensor([-1.0, 3.0], requires_grad=True),
        )
        assert lib.autograd.grad(lib.copysign(x, y).sum(), [y])[0].tolist() == [0.0, 0.0]


def test_logsumexp_gradient_is_exp_of_x_minus_the_result():
    # (retrograd's was a softmax: NaN over a whole slice holding +inf, where torch's
    # exp(x - out) is NaN only at the infinity; and half each for huge ties whose log 2 the
    # result absorbed, torch's whole g)
    rows = [[1e300, 1e300, -1e300, 1.0], [INF, 1e300, 0.0, -INF], [-INF, -INF, 1.0, 2.0]]
    for dim in (1, 0):
        want, got = _both(lambda lib, x, dim=dim: lib.logsumexp(x, dim=dim), rows)
        for g, w in zip(got, want):
            _same(g, w, signs=False)
    want, got = _both(lambda lib, x: lib.logsumexp(x, dim=(0, 1)), rows[2:], order=2)
    for g, w in zip(got, want):
        _same(g, w, signs=False)


@pytest.mark.parametrize("name", ["atan", "acosh"])
def test_second_derivatives_through_squares_of_huge_values_are_zero(name):
    # (their gradients square x; square's own gradient took 2 x first: inf at 1e308, times
    # the zero incoming gradient NaN; torch's g * 2 * x stays 0)
    want, got = _both(lambda lib, x: getattr(lib, name)(x), [1e308, -1e308, 3.0], order=2)
    for g, w in zip(got, want):
        _same(g, w, signs=False)


@pytest.mark.parametrize("name", ["addcmul", "addcdiv"])
def test_addcmul_and_addcdiv_scale_tensor1_first_as_torch(name):
    # (retrograd scaled the product or quotient: 0.5 * (3e38 * 2) was inf in float32 where
    # torch's (0.5 * 3e38) * 2 is finite, and -2 * -3e38 / 3e38 finite where torch's is inf)
    t1 = [3e38, -3e38, 1.0, -INF, 2.0]
    t2 = [2.0, 3e38, 0.0, 4.0, -0.5]
    for value in (0.5, -2.0, 1.0):
        results = []
        for lib in (torch, rg):
            tensors = [lib.tensor(v, requires_grad=True) for v in ([0.5] * 5, t1, t2)]
            out = getattr(lib, name)(*tensors, value=value)
            grads = lib.autograd.grad(out.sum(), tensors)
            results.append([out.detach().numpy()] + [g.numpy() for g in grads[:2]])
        for got, want in zip(results[1], results[0]):
            np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)
