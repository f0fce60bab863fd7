"""Composites a memory budget could not shrink, made ops of the op table (memory round 76,
7 December): what backward holds against what torch saves, and their values and gradients.

Measured on float32 inputs of 64K elements (``Gradients.peak_bytes`` under NoCheckpointing
against the storages torch's ``saved_tensors_hooks`` see):

- ``amax``/``amin`` (and the infinite vector norms, which reduce by them): the composite's
  masks and untracked copy of x held 2.75x torch's bytes, and a budget of half
  NoCheckpointing's peak held 3.45x that budget in every step; now one op whose rule reads x
  and the result, as torch's (``(g / count) * tied``);
- ``torch.cdist`` (every p > 0, every compute_mode): the ``[..., P, R, M]`` differences and
  their squares or sizes, 49-123x torch's bytes (136 MB for 1024 x 64 against 256 x 64);
  now one op whose rule reads x1, x2 and the distances, as torch's ``_cdist_backward``
  (the differences are recomputed in the rule, never held).

Values stay the composites' bits (checked while fixing, on both inner backends); gradients
are compared with torch's here.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend
from retrograd.nn import functional as F  # noqa: N812


def _backend(strategy=None):
    return rg.Autodiff(inner_backend(), checkpointing=strategy or rg.NoCheckpointing())


def _activation(array, backend):
    x = rg.tensor(array, backend=backend).requires_grad_()
    return x * 2.0  # an op's output (a leaf's bytes are not counted), its product holding none


# -- amax / amin -------------------------------------------------------------------------------
@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
@pytest.mark.parametrize("kind", ["amax", "amin"])
def test_extremum_holds_its_input_and_result(kind):
    """x and the result, what torch saves (2.75x before: masks and a copy of x)."""
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    h = _activation(a, _backend())
    grads = getattr(rg, kind)(h, dim=1).sum().backward()
    assert grads.peak_bytes == a.nbytes + 64 * 4, grads.peak_bytes


@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
def test_infinite_norm_holds_no_more_than_twice_its_input():
    """The abs's input and its output (torch saves x and the norm): 2.75x torch's before."""
    a = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    h = _activation(a, _backend())
    grads = rg.linalg.vector_norm(h, ord=float("inf"), dim=1).sum().backward()
    assert grads.peak_bytes <= 2 * a.nbytes + 64 * 4, grads.peak_bytes


def _residual_chain(kind, strategy, steps):
    """A residual stack whose layers subtract their rows' largest entry (``amax``) or scale by
    their mean distance to fixed centres (``cdist``); loss: the mean square."""
    backend = _backend(strategy)
    rng = np.random.default_rng(6)
    weights = [(rng.standard_normal((64, 64)) / 8).astype(np.float32) for _ in range(6)]
    centres = rg.tensor(rng.standard_normal((16, 64)).astype(np.float32), backend=backend)
    out = []
    for _ in range(steps):
        ws = [rg.tensor(w, backend=backend).requires_grad_() for w in weights]
        h = rg.tensor(rng.standard_normal((32, 64)).astype(np.float32), backend=backend)
        for w in ws:
            z = h @ w
            if kind == "amax":
                h = h + (z - z.amax(-1, keepdim=True))
            else:
                h = h + (rg.cdist(z, centres) * 0.01).mean(-1, keepdim=True) * z
        grads = (h * h).mean().backward()
        out.append((grads.peak_bytes, [w.grad(grads).numpy() for w in ws]))
    return out


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
@pytest.mark.parametrize(("kind", "bound"), [("amax", 107264), ("cdist", 144128)])
def test_residual_chain_keeps_a_budget(kind, bound):
    """NoCheckpointing's peak at most the measured one (amax: 194,432 bytes before; cdist:
    1,701,632), and a budget of half of it kept within a tenth of the peak in the planned
    steps with NoCheckpointing's gradients (amax's held 268,160, 2.8x its budget, before)."""
    plain = _residual_chain(kind, rg.NoCheckpointing(), 1)
    peak = plain[0][0]
    assert peak <= bound, peak
    steps = _residual_chain(kind, rg.BudgetCheckpointing(peak // 2), 3)
    for found, expected in zip(steps[0][1], plain[0][1]):
        assert np.array_equal(found, expected)
    held = max(p for p, _ in steps[1:])
    assert held <= peak // 2 + 0.1 * peak, (held, peak)


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
def test_one_amax_under_a_budget_holds_no_more_than_without_one():
    """x and the result are read together, so no budget goes below them; it held 4.7x."""
    a = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)

    def step(backend):
        return rg.amax(_activation(a, backend), dim=1).sum().backward().peak_bytes

    plain = step(_backend())
    budget = _backend(rg.BudgetCheckpointing(plain // 2))
    held = [step(budget) for _ in range(3)]
    assert max(held) <= plain, (held, plain)


EXTREMES = np.array(
    [
        [1.0, 3.0, 3.0, -np.inf, 0.5],
        [np.nan, 1.0, 2.0, 0.0, -0.0],
        [np.inf, np.inf, 1.0, 2.0, -1.0],
        [-1.0, -1.0, -1.0, -1.0, -1.0],
        [0.25, -2.0, 7.0, -7.0, 1.0],
    ]
)


@pytest.mark.parametrize("kind", ["amax", "amin"])
@pytest.mark.parametrize("dim", [0, 1, (0, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_extremum_values_and_gradients_are_torchs(kind, dim, dtype):
    """Ties share the gradient, a NaN result gives NaN (torch's count of none): the same bits
    as torch's (one quotient and one product per element)."""
    v = EXTREMES.astype(dtype)
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    y = getattr(rg, kind)(x, dim=dim, keepdim=True)
    g = np.random.default_rng(2).standard_normal(y.shape).astype(dtype)
    grads = (y * rg.tensor(g, backend=x.backend)).sum().backward()
    tx = torch.from_numpy(v).requires_grad_()
    ty = getattr(torch, kind)(tx, dim=dim, keepdim=True)
    ty.backward(torch.from_numpy(g))
    assert np.array_equal(y.numpy(), ty.detach().numpy(), equal_nan=True)
    assert np.array_equal(x.grad(grads).numpy(), tx.grad.numpy(), equal_nan=True)


@pytest.mark.parametrize("order", [float("inf"), -float("inf")])
def test_infinite_norm_gradients_are_torchs(order):
    """The NaN entries tie with a NaN norm (torch's linalg_vector_norm_backward)."""
    x = rg.tensor(EXTREMES, backend=_backend()).requires_grad_()
    grads = rg.linalg.vector_norm(x, ord=order, dim=1).sum().backward()
    tx = torch.from_numpy(EXTREMES).requires_grad_()
    torch.linalg.vector_norm(tx, ord=order, dim=1).sum().backward()
    assert np.array_equal(x.grad(grads).numpy(), tx.grad.numpy(), equal_nan=True)


def test_extremum_second_derivative_is_torchs():
    v = np.random.default_rng(3).standard_normal((6, 5))
    v[2, 1] = v[2, 3] = 9.0  # a tie
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    first = (rg.amax(x, dim=1) ** 3).sum().backward(create_graph=True)
    second = (x.grad(first) * x.grad(first)).sum().backward()
    tx = torch.from_numpy(v).requires_grad_()
    (tg,) = torch.autograd.grad((torch.amax(tx, dim=1) ** 3).sum(), tx, create_graph=True)
    (t2,) = torch.autograd.grad((tg * tg).sum(), tx)
    np.testing.assert_allclose(x.grad(second).numpy(), t2.numpy(), rtol=1e-14, atol=0)


# -- cdist -------------------------------------------------------------------------------------
CDIST_PS = [0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
@pytest.mark.parametrize("p", CDIST_PS)
def test_cdist_holds_its_inputs_and_distances(p):
    """x1, x2 and the distances, torch's bytes (49-123x before: the differences, their
    squares or sizes)."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    backend = _backend()
    grads = rg.cdist(_activation(a, backend), _activation(b, backend), p=p).sum().backward()
    assert grads.peak_bytes == a.nbytes + b.nbytes + 64 * 32 * 4, grads.peak_bytes


def _cdist_operands():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 30, 5))
    b = rng.standard_normal((7, 5))
    a[0, 0] = b[0]  # a zero distance
    a[0, 1, :2] = b[1, :2]  # zero differences
    a[0, 4] = [3.0, -3.0, 1.0, 0.0, 0.0]  # a tie of the largest sizes (p = inf)
    b[2] = [0.0, 0.0, 1.0, 0.0, 0.0]
    return a, b, rng.standard_normal((2, 30, 7))


@pytest.mark.parametrize("p", CDIST_PS)
@pytest.mark.parametrize("mode", ["use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"])
def test_cdist_values_and_gradients_match_torch(p, mode):
    a, b, g = _cdist_operands()
    backend = _backend()
    x1 = rg.tensor(a, backend=backend).requires_grad_()
    x2 = rg.tensor(b, backend=backend).requires_grad_()
    y = rg.cdist(x1, x2, p=p, compute_mode=mode)
    grads = (y * rg.tensor(g, backend=backend)).sum().backward()
    t1, t2 = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    ty = torch.cdist(t1, t2, p=p, compute_mode=mode)
    ty.backward(torch.from_numpy(g))
    # (torch's matrix-product route for p = 2 loses digits to cancellation at the zero
    # distance: 3e-8 there, measured; the values are the differences' norms)
    atol = 1e-7 if p == 2.0 and mode == "use_mm_for_euclid_dist" else 1e-14
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-14, atol=atol)
    # (a few float64 roundings apart: sums over 7 and 60 rows in another order; the route by
    # matrix products near the zero distance as above, 2e-9 measured)
    atol = 1e-8 if p == 2.0 and mode == "use_mm_for_euclid_dist" else 1e-13
    np.testing.assert_allclose(x1.grad(grads).numpy(), t1.grad.numpy(), rtol=1e-13, atol=atol)
    np.testing.assert_allclose(x2.grad(grads).numpy(), t2.grad.numpy(), rtol=1e-13, atol=atol)


def test_cdist_gradients_by_central_differences():
    """The float64 gradient of p = 1.5 and p = 3 against central differences (no zero
    differences here: the norm is smooth)."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((5, 3))
    for p in (1.5, 3.0):
        x1 = rg.tensor(a, backend=_backend()).requires_grad_()
        grads = rg.cdist(x1, rg.tensor(b, backend=x1.backend), p=p).sum().backward()
        numeric = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            step = np.zeros_like(a)
            step[i] = 1e-6
            plus = torch.cdist(torch.from_numpy(a + step), torch.from_numpy(b), p=p).sum()
            minus = torch.cdist(torch.from_numpy(a - step), torch.from_numpy(b), p=p).sum()
            numeric[i] = (plus - minus).item() / 2e-6
        np.testing.assert_allclose(x1.grad(grads).numpy(), numeric, rtol=1e-7, atol=1e-8)


def test_cdist_second_derivative_by_matrix_products_is_torchs():
    """torch differentiates its matrix-product route (p = 2, above 25 rows) to any order."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((30, 4)), rng.standard_normal((6, 4))
    x1 = rg.tensor(a, backend=_backend()).requires_grad_()
    x2 = rg.tensor(b, backend=x1.backend).requires_grad_()
    first = (rg.cdist(x1, x2) ** 2).sum().backward(create_graph=True)
    second = (x1.grad(first) ** 2).sum().backward()
    t1, t2 = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    (tg,) = torch.autograd.grad((torch.cdist(t1, t2) ** 2).sum(), t1, create_graph=True)
    s1, s2 = torch.autograd.grad((tg**2).sum(), [t1, t2])
    np.testing.assert_allclose(x1.grad(second).numpy(), s1.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x2.grad(second).numpy(), s2.numpy(), rtol=1e-12, atol=1e-12)


def test_cdist_runs_on_a_backend_without_autodiff():
    a, b, _ = _cdist_operands()
    for p in CDIST_PS:
        y = rg.cdist(
            rg.tensor(a, backend=inner_backend()), rg.tensor(b, backend=inner_backend()), p=p
        )
        expected = torch.cdist(torch.from_numpy(a), torch.from_numpy(b), p=p).numpy()
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-14, atol=1e-14)


# -- logaddexp / logaddexp2 --------------------------------------------------------------------
LOGADDEXP = ["logaddexp", "logaddexp2"]


@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
@pytest.mark.parametrize("name", LOGADDEXP)
def test_logaddexp_holds_its_operands(name):
    """x and y, torch's bytes (4x before: a maximum, a gap, a smooth form and its copy)."""
    rng = np.random.default_rng(8)
    a, b = (rng.standard_normal((64, 32)).astype(np.float32) for _ in range(2))
    backend = _backend()
    grads = getattr(rg, name)(_activation(a, backend), _activation(b, backend)).sum().backward()
    assert grads.peak_bytes == a.nbytes + b.nbytes, grads.peak_bytes


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
def test_one_logaddexp_under_a_budget_holds_no_more_than_without_one():
    """Its rules read x and y together: no budget goes below them."""
    rng = np.random.default_rng(9)
    a, b = (rng.standard_normal((64, 32)).astype(np.float32) for _ in range(2))

    def step(backend):
        return rg.logaddexp(_activation(a, backend), _activation(b, backend)).sum().backward()

    plain = step(_backend()).peak_bytes
    budget = _backend(rg.BudgetCheckpointing(plain // 2))
    held = [step(budget).peak_bytes for _ in range(3)]
    assert max(held) <= plain, (held, plain)


def _logaddexp_operands():
    special = np.array([0.0, -0.0, 1.0, -1.0, 30.0, -30.0, 800.0, -800.0, np.inf, -np.inf, np.nan])
    a, b = np.meshgrid(special, special, indexing="ij")
    rng = np.random.default_rng(10)
    a = np.concatenate([a.ravel(), rng.standard_normal(100) * 5])
    b = np.concatenate([b.ravel(), rng.standard_normal(100) * 5])
    return a, b, rng.standard_normal(a.shape)


@pytest.mark.parametrize("name", LOGADDEXP)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logaddexp_values_and_gradients_match_torch(name, dtype):
    a, b, g = (v.astype(dtype) for v in _logaddexp_operands())
    backend = _backend()
    x = rg.tensor(a, backend=backend).requires_grad_()
    y = rg.tensor(b, backend=backend).requires_grad_()
    out = getattr(rg, name)(x, y)
    grads = (out * rg.tensor(g, backend=backend)).sum().backward()
    tx, ty = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    expected = getattr(torch, name)(tx, ty)
    expected.backward(torch.from_numpy(g))
    # (the values are the composition's bits, which torch's vectorized exp and log1p round
    # otherwise: up to 2.4e-7 (float32) and 8.9e-16 (float64) apart, relative 2.9e-7 and
    # 1.9e-16 away from 0, measured)
    atol, rtol = (5e-7, 3e-7) if dtype == "float32" else (1e-15, 2e-16)
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)
    for mine, theirs in ((x.grad(grads), tx.grad), (y.grad(grads), ty.grad)):
        if inner_backend().name == "torch":  # torch's rule on torch's kernels: its bits
            assert np.array_equal(mine.numpy(), theirs.numpy(), equal_nan=True)
        # (NumPy's exp rounds otherwise: relative 1.9e-7 and 2.6e-16 measured)
        rtol = 2e-7 if dtype == "float32" else 3e-16
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=rtol, atol=0)


@pytest.mark.parametrize("name", LOGADDEXP)
def test_logaddexp_second_derivatives_match_torch(name):
    """torch's s (1 - s), at x == y too (the composite's kinks there are smoothed)."""
    a, b, _ = _logaddexp_operands()
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    backend = _backend()
    x = rg.tensor(a, backend=backend).requires_grad_()
    y = rg.tensor(b, backend=backend).requires_grad_()
    first = getattr(rg, name)(x, y).sum().backward(create_graph=True)
    second = (x.grad(first) * y.grad(first)).sum().backward()
    tx, ty = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
    gx, gy = torch.autograd.grad(getattr(torch, name)(tx, ty).sum(), [tx, ty], create_graph=True)
    sx, sy = torch.autograd.grad((gx * gy).sum(), [tx, ty])
    np.testing.assert_allclose(x.grad(second).numpy(), sx.numpy(), rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(y.grad(second).numpy(), sy.numpy(), rtol=1e-13, atol=1e-300)


@pytest.mark.parametrize("name", LOGADDEXP)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logaddexp_op_values_are_the_compositions(name, dtype):
    """The op (a tracked operand) gives the bits of the composition an inner backend runs."""
    a, b, _ = (v.astype(dtype) for v in _logaddexp_operands())
    plain = getattr(rg, name)(
        rg.tensor(a, backend=inner_backend()), rg.tensor(b, backend=inner_backend())
    )
    backend = _backend()
    recorded = getattr(rg, name)(
        rg.tensor(a, backend=backend).requires_grad_(), rg.tensor(b, backend=backend)
    )
    assert np.array_equal(recorded.numpy(), plain.numpy(), equal_nan=True)


# -- sinc --------------------------------------------------------------------------------------
@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
def test_sinc_holds_its_input_alone():
    """x, torch's bytes (3.75x before: the masked product, its sine, the quotient's operands
    and the series)."""
    a = np.random.default_rng(11).standard_normal((64, 32)).astype(np.float32)
    grads = rg.sinc(_activation(a, _backend())).sum().backward()
    assert grads.peak_bytes == a.nbytes, grads.peak_bytes


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
def test_sinc_under_a_budget_holds_no_more_than_without_one():
    a = np.random.default_rng(12).standard_normal((64, 32)).astype(np.float32)

    def step(backend):
        return rg.sinc(_activation(a, backend)).sum().backward().peak_bytes

    plain = step(_backend())
    budget = _backend(rg.BudgetCheckpointing(plain // 2))
    assert max(step(budget) for _ in range(3)) <= plain


def _sinc_sample(dtype):
    edges = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, 1e-200, -1e-170, 1e-30, 3e-8, 1e5]
    rng = np.random.default_rng(13)
    return np.concatenate([edges, rng.standard_normal(200) * 3, [np.inf, -np.inf, np.nan]]).astype(
        dtype
    )


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sinc_values_and_gradients_match_torch(dtype):
    v = _sinc_sample(dtype)
    g = np.random.default_rng(14).standard_normal(v.shape).astype(dtype)
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    y = rg.sinc(x)
    grads = (y * rg.tensor(g, backend=x.backend)).sum().backward()
    tx = torch.from_numpy(v).requires_grad_()
    ty = torch.sinc(tx)
    ty.backward(torch.from_numpy(g))
    # (float32: torch's kernel rounds pi x otherwise, 6e-8 apart, measured; the values are
    # the composite's bits)
    atol = 1e-7 if dtype == "float32" else 0
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=0, atol=atol)
    mine, theirs = x.grad(grads).numpy(), tx.grad.numpy()
    # torch's formula: its zeros where pi x^2 is 0 (+0, as torch's); the composite's gradient
    # was up to 7.3e-6 (float32) and 1.6e-9 (float64) from torch's. Both cancel in
    # pi x cos(pi x) - sin(pi x) near small x, rounding otherwise: 3.2e-6 apart in float32,
    # 4.4e-16 in float64, measured
    assert np.array_equal(np.signbit(mine[:9]), np.signbit(theirs[:9]))
    atol = 4e-6 if dtype == "float32" else 1e-15
    np.testing.assert_allclose(mine, theirs, rtol=0, atol=atol)


def test_sinc_second_derivative():
    """torch's away from 0; at 0 the true -pi^2 / 3 (torch's is NaN there)."""
    v = np.array([0.0, -0.0, 0.3, -1.7, 2.5, 1e-3])
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    first = rg.sinc(x).sum().backward(create_graph=True)
    second = x.grad(x.grad(first).sum().backward()).numpy()
    tx = torch.from_numpy(v).requires_grad_()
    (tg,) = torch.autograd.grad(torch.sinc(tx).sum(), tx, create_graph=True)
    (t2,) = torch.autograd.grad(tg.sum(), tx)
    # (at 1e-3 both cancel: 2e-11 (ours) and 7e-11 (torch's) from the series' value, measured)
    np.testing.assert_allclose(second[2:], t2.numpy()[2:], rtol=1e-10, atol=0)
    np.testing.assert_allclose(second[:2], -(np.pi**2) / 3, rtol=1e-15)


def test_sinc_op_values_are_the_compositions():
    for dtype in ("float32", "float64"):
        v = _sinc_sample(dtype)
        plain = rg.sinc(rg.tensor(v, backend=inner_backend()))
        recorded = rg.sinc(rg.tensor(v, backend=_backend()).requires_grad_())
        assert np.array_equal(recorded.numpy(), plain.numpy(), equal_nan=True)


# -- softsign ----------------------------------------------------------------------------------
@pytest.mark.own_checkpointing("measures NoCheckpointing's peak")
def test_softsign_holds_its_input_alone():
    """x (3x before: x, the denominator and the quotient; torch's composite saves x and the
    denominator, 2x)."""
    a = np.random.default_rng(15).standard_normal((64, 32)).astype(np.float32)
    grads = F.softsign(_activation(a, _backend())).sum().backward()
    assert grads.peak_bytes == a.nbytes, grads.peak_bytes


def test_softsign_values_and_derivatives_match_torch():
    rng = np.random.default_rng(16)
    v = np.concatenate([[0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, -1e300], rng.standard_normal(200) * 3])
    g = rng.standard_normal(v.shape)
    x = rg.tensor(v, backend=_backend()).requires_grad_()
    y = F.softsign(x)
    first = (y * rg.tensor(g, backend=x.backend)).sum().backward(create_graph=True)
    second = (x.grad(first) * x.grad(first)).sum().backward()
    tx = torch.from_numpy(v).requires_grad_()
    ty = torch.nn.functional.softsign(tx)
    (tg,) = torch.autograd.grad((ty * torch.from_numpy(g)).sum(), tx, create_graph=True)
    (t2,) = torch.autograd.grad((tg * tg).sum(), tx)
    assert np.array_equal(y.numpy(), ty.detach().numpy())
    # (the composition's rules, rule by rule, as before: torch's div rule rounds
    # -g (x / d) / d, ours -(g x / d) / d, and the two terms cancel to g / d^2: 1.2e-15
    # relative apart, measured)
    np.testing.assert_allclose(x.grad(first).numpy(), tg.detach().numpy(), rtol=3e-15, atol=0)
    np.testing.assert_allclose(x.grad(second).numpy(), t2.numpy(), rtol=1e-14, atol=0)
