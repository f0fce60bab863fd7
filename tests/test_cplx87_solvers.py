"""Complex inputs of the LU and triangular solvers, against torch 2.13.

retrograd refused complex tensors in ``linalg.lu_factor``, ``lu_solve``, ``lu``,
``solve_triangular``, ``triangular_solve`` (method and torch form), ``cholesky_solve`` and
``cholesky_inverse`` (``UnsupportedDTypeError``/``DTypeError``), where torch computes them and
their gradients. Each test compares the values and the gradient of every input under a real
loss of the complex output with a random complex upstream weight (``(out * W).real.sum()``),
complex64 and complex128, batched.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

DTYPES = ["complex64", "complex128"]
TOLERANCE = {"complex64": 2e-4, "complex128": 1e-10}


def _complex(rng, *shape):
    return rng.randn(*shape) + 1j * rng.randn(*shape)


def _well_conditioned(rng, *shape):
    """Random complex matrices with a dominant diagonal (conditioned for complex64)."""
    n = shape[-1]
    return _complex(rng, *shape) + 3 * n * np.eye(n)


def _compare(call, arrays, dtype, *, int_args=()):
    """``call(lib, *leaves)`` in torch and retrograd: values and the gradient of each leaf under
    ``(out * W).real.sum()`` summed over the complex outputs (W random complex)."""
    tol = TOLERANCE[dtype]
    t_leaves = [torch.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    r_leaves = [rg.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    expected, ours = call(torch, *t_leaves), call(rg, *r_leaves)
    expected = expected if isinstance(expected, tuple) else (expected,)
    ours = ours if isinstance(ours, tuple) else (ours,)
    rng = np.random.RandomState(99)
    t_loss, r_loss = 0, 0
    for e, o in zip(expected, ours, strict=True):
        assert o.dtype == str(e.dtype).removeprefix("torch."), (o.dtype, e.dtype)
        np.testing.assert_allclose(o.numpy(), e.detach().resolve_conj().numpy(), rtol=tol, atol=tol)
        if not e.is_complex():  # (pivots, P)
            continue
        weight = _complex(rng, *e.shape).astype(dtype)
        t_loss = t_loss + (e * torch.tensor(weight)).real.sum()
        r_loss = r_loss + (o * rg.tensor(weight)).real.sum()
    t_loss.backward()
    grads = r_loss.backward()
    for t_leaf, r_leaf in zip(t_leaves, r_leaves, strict=True):
        np.testing.assert_allclose(
            r_leaf.grad(grads).numpy(), t_leaf.grad.resolve_conj().numpy(), rtol=tol, atol=tol
        )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_lu_factor_and_lu_of_complex_matrices(dtype, shape):
    a = _complex(np.random.RandomState(0), *shape)  # no dominant diagonal: pivots are drawn
    _compare(lambda lib, x: tuple(lib.linalg.lu_factor(x)), [a], dtype)
    _compare(lambda lib, x: tuple(lib.linalg.lu(x)), [a], dtype)
    _compare(lambda lib, x: tuple(x.lu()), [a], dtype)


def test_lu_factor_pivots_by_real_plus_imaginary_magnitude_as_lapack():
    # |0.7+0.7i| = 0.99 < 1 but |Re| + |Im| = 1.4 > 1: zgetrf's izamax keeps row 1
    a = np.array([[0.7 + 0.7j, 1.2], [1.0, 2.0]])
    expected = torch.linalg.lu_factor(torch.tensor(a))
    ours = rg.linalg.lu_factor(rg.tensor(a))
    np.testing.assert_array_equal(ours.pivots.numpy(), expected.pivots.numpy())
    np.testing.assert_allclose(ours.LU.numpy(), expected.LU.numpy(), rtol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("left", "adjoint"), [(True, False), (True, True), (False, False), (False, True)]
)
def test_lu_solve_of_complex_factors(dtype, left, adjoint):
    rng = np.random.RandomState(1)
    a = _complex(rng, 2, 3, 3)
    b = _complex(rng, 2, 3, 2) if left else _complex(rng, 2, 2, 3)

    def call(lib, x, y):
        factors, pivots = lib.linalg.lu_factor(x)
        return lib.linalg.lu_solve(factors, pivots, y, left=left, adjoint=adjoint)

    _compare(call, [a, b], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize(("left", "unitriangular"), [(True, False), (False, False), (True, True)])
def test_solve_triangular_of_complex_matrices(dtype, upper, left, unitriangular):
    rng = np.random.RandomState(2)
    a = _well_conditioned(rng, 2, 3, 3)  # the other triangle is read by neither
    b = _complex(rng, 2, 3, 2) if left else _complex(rng, 2, 2, 3)

    def call(lib, x, y):
        return lib.linalg.solve_triangular(
            x, y, upper=upper, left=left, unitriangular=unitriangular
        )

    _compare(call, [a, b], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("form", ["method", "function"])
@pytest.mark.parametrize(
    ("upper", "transpose", "unitriangular"),
    [(True, False, False), (False, True, False), (True, True, True), (False, False, True)],
)
def test_triangular_solve_of_complex_matrices(dtype, form, upper, transpose, unitriangular):
    rng = np.random.RandomState(3)
    a, b = _well_conditioned(rng, 2, 3, 3), _complex(rng, 3, 2)  # b broadcasts over a's batch
    options = {"upper": upper, "transpose": transpose, "unitriangular": unitriangular}

    def call(lib, y, x):
        if form == "method":
            return tuple(y.triangular_solve(x, **options))
        return tuple(lib.triangular_solve(y, x, **options))

    _compare(call, [b, a], dtype)


def _cholesky_factor(rng, dtype, upper):
    """A complex Cholesky factor (from torch). The other triangle is left zero: torch's
    gradient reads it (``-(G X^H + X G^H) @ input2``) where its value does not, and
    retrograd's real rule differentiates the triangle alone (a known departure)."""
    m = _complex(rng, 2, 3, 3)
    hermitian = m @ np.conj(np.swapaxes(m, -1, -2)) + 3 * np.eye(3)
    return torch.linalg.cholesky(torch.tensor(hermitian), upper=upper).numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("form", ["method", "function"])
def test_cholesky_solve_and_inverse_of_complex_factors(dtype, upper, form):
    rng = np.random.RandomState(4)
    factor, b = _cholesky_factor(rng, dtype, upper), _complex(rng, 3, 2)

    def solve(lib, y, x):
        return y.cholesky_solve(x, upper) if form == "method" else lib.cholesky_solve(y, x, upper)

    def inverse(lib, x):
        return x.cholesky_inverse(upper) if form == "method" else lib.cholesky_inverse(x, upper)

    _compare(solve, [b, factor], dtype)
    _compare(inverse, [factor[0]], dtype)  # (torch's cholesky_inverse: batched since 2.x too)
    _compare(inverse, [factor], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_solve_of_torchs_complex_factors(dtype):
    """lu_solve takes the factors torch's lu_factor gives (not only retrograd's)."""
    rng = np.random.RandomState(5)
    factors = torch.linalg.lu_factor(torch.tensor(_complex(rng, 2, 3, 3).astype(dtype)))
    b = _complex(rng, 2, 3, 1).astype(dtype)
    expected = torch.linalg.lu_solve(factors.LU, factors.pivots, torch.tensor(b), adjoint=True)
    ours = rg.linalg.lu_solve(
        rg.tensor(factors.LU.numpy()), rg.tensor(factors.pivots.numpy()), rg.tensor(b), adjoint=True
    )
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=tol, atol=tol)


def test_complex_factors_and_a_real_right_hand_side_are_refused_naming_the_op():
    a = _well_conditioned(np.random.RandomState(6), 3, 3)
    b = np.random.RandomState(7).randn(3, 2)
    t_factors = torch.linalg.lu_factor(torch.tensor(a))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.lu_solve(*t_factors, torch.tensor(b))
    factors = rg.linalg.lu_factor(rg.tensor(a))
    with pytest.raises(rg.DTypeError, match=r"linalg.lu_solve.*complex128.*float64"):
        rg.linalg.lu_solve(*factors, rg.tensor(b))
    for call in (torch, rg):  # (triangular_solve and cholesky_solve: torch's refusal too)
        with pytest.raises((RuntimeError, rg.DTypeError), match=r"dtype|triangular_solve"):
            call.tensor(b).triangular_solve(call.tensor(a))
        with pytest.raises((RuntimeError, rg.DTypeError), match=r"dtype|cholesky_solve"):
            call.tensor(b).cholesky_solve(call.tensor(a))
    # the factors stay usable
    expected = torch.linalg.lu_solve(*t_factors, torch.tensor(b + 0j))
    ours = rg.linalg.lu_solve(*factors, rg.tensor(b + 0j))
    np.testing.assert_allclose(ours.numpy(), expected.numpy(), rtol=1e-12)
