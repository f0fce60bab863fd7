"""Round 86's defects in linear algebra with every option, each against torch.

- ``Tensor.svd()`` (``torch.svd``) of a complex matrix returned ``Vh.mT`` as ``V``, not its
  conjugate transpose: ``U diag(S) V^H`` was not the input (off by up to 1.9 on a 3x3);
- ``linalg.cross``/``torch.cross``/``Tensor.cross`` of a ``[3, 3]`` and a ``[3]`` broadcast
  them, where torch refuses inputs of different numbers of dimensions;
- ``linalg.lstsq(driver="gels", rcond=0.3)`` dropped the small singular values as gelsd
  does; torch's gels is a QR solve that ignores ``rcond`` (the solution was off by 6.5);
- ``linalg.householder_product`` refused complex inputs, which torch takes (``H_i = I - tau_i
  v_i v_i^H``), and with an empty ``tau`` its identity result was recorded on neither input,
  so a loss of it alone could not be differentiated;
- ``Tensor.triangular_solve``/``torch.triangular_solve`` with a zero on the triangle's
  diagonal raised a ``LinAlgError`` ("singular"), where torch's substitution gives inf and
  NaN (as ``linalg.solve_triangular`` here already did).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _complex(rng, *shape):
    return rng.randn(*shape) + 1j * rng.randn(*shape)


def test_legacy_svd_of_a_complex_matrix_returns_v_not_its_transpose():
    a = _complex(np.random.RandomState(0), 2, 3, 3)
    _, s, v = torch.tensor(a).svd()
    ours_u, ours_s, ours_v = rg.tensor(a).svd(some=False)
    np.testing.assert_allclose(ours_s.numpy(), s.numpy(), rtol=1e-10)
    rebuilt = (ours_u.numpy() * ours_s.numpy()[..., None, :]) @ np.conj(
        np.swapaxes(ours_v.numpy(), -1, -2)
    )
    np.testing.assert_allclose(rebuilt, a, atol=1e-10)
    # V's columns up to a phase: |V| is gauge-free
    np.testing.assert_allclose(np.abs(ours_v.numpy()), np.abs(v.resolve_conj().numpy()), atol=1e-10)


@pytest.mark.parametrize("form", ["linalg", "torch", "method"])
def test_cross_broadcasts_inputs_of_one_number_of_dimensions_as_torch(form):
    """Inputs of one number of dimensions broadcast, as torch's. One of fewer dimensions
    (``[2, 3, 3]`` with ``[3, 3]``), which torch refuses, broadcasts too through the tensor
    method and ``rg.cross``: API.md section 2's ``cross(other, d)`` broadcasts as NumPy does
    (``op_cases.py``'s ``cross_broadcast``), a superset of torch's inputs whose results on
    torch's own are torch's. ``rg.linalg.cross``, a name only torch's namespace has, refuses
    it as torch's does (``test_random_linalg_50``'s contractions)."""
    x, y = np.random.RandomState(1).randn(2, 3, 3), np.random.RandomState(2).randn(3, 3)

    def call(lib, a, b):
        if form == "linalg":
            return lib.linalg.cross(a, b)
        return lib.cross(a, b, dim=-1) if form == "torch" else a.cross(b, dim=-1)

    expected = call(torch, torch.tensor(x), torch.tensor(y[None]))
    np.testing.assert_allclose(call(rg, rg.tensor(x), rg.tensor(y[None])).numpy(), expected)
    if form == "linalg":
        with pytest.raises(rg.ShapeError, match="same number of dimensions"):
            call(rg, rg.tensor(x), rg.tensor(y))
        return
    np.testing.assert_allclose(call(rg, rg.tensor(x), rg.tensor(y)).numpy(), expected)


def test_lstsq_gels_ignores_rcond():
    rng = np.random.RandomState(3)
    a, b = rng.randn(4, 4), rng.randn(4, 2)
    a[:, 0] *= 1e-3  # a small singular value that rcond=0.3 would drop
    expected = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), rcond=0.3, driver="gels")
    ours = rg.linalg.lstsq(rg.tensor(a), rg.tensor(b), rcond=0.3, driver="gels")
    np.testing.assert_allclose(ours.solution.numpy(), expected.solution.numpy(), rtol=1e-8)


@pytest.mark.parametrize(("shape", "k"), [((4, 3), 2), ((2, 3, 3), 3), ((2, 4, 2), 0)])
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_householder_product_of_complex_and_of_no_reflector(shape, k, dtype):
    rng = np.random.RandomState(4)
    a = _complex(rng, *shape) if dtype == "complex128" else rng.randn(*shape)
    tau = _complex(rng, *shape[:-2], k) if dtype == "complex128" else rng.randn(*shape[:-2], k)
    weights = rng.randn(*shape)
    t_a, t_tau = (torch.tensor(v, requires_grad=True) for v in (a, tau))
    expected = torch.linalg.householder_product(t_a, t_tau)
    (expected * torch.tensor(weights)).real.sum().backward()
    r_a, r_tau = (rg.tensor(v, requires_grad=True) for v in (a, tau))
    ours = rg.linalg.householder_product(r_a, r_tau)
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours.numpy(), expected.detach().numpy(), atol=1e-12)
    grads = (ours * rg.tensor(weights)).real.sum().backward()
    for ours_leaf, torch_leaf in ((r_a, t_a), (r_tau, t_tau)):
        # (torch leaves an empty tau's gradient None: zeros of its shape)
        wanted = np.zeros(torch_leaf.shape) if torch_leaf.grad is None else torch_leaf.grad
        np.testing.assert_allclose(ours_leaf.grad(grads).numpy(), np.asarray(wanted), atol=1e-10)


def test_householder_product_of_no_reflector_is_the_identity_whatever_a_holds():
    a = np.full((2, 3, 2), np.nan)
    expected = torch.linalg.householder_product(torch.tensor(a), torch.zeros(2, 0).double())
    leaf = rg.tensor(a, requires_grad=True)
    ours = rg.linalg.householder_product(leaf, rg.zeros(2, 0, dtype="float64"))
    np.testing.assert_array_equal(ours.numpy(), expected.numpy())
    grads = ours.sum().backward()
    np.testing.assert_array_equal(leaf.grad(grads).numpy(), np.zeros(a.shape))


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [True, False])
def test_triangular_solve_with_a_zero_on_the_diagonal_gives_torchs_inf_and_nan(upper, transpose):
    a = np.random.RandomState(5).randn(2, 3, 3)
    a[:, 1, 1] = 0.0  # singular triangles: torch's substitution divides by the zero
    b = np.random.RandomState(6).randn(2, 3, 2)
    expected = torch.tensor(b).triangular_solve(torch.tensor(a), upper=upper, transpose=transpose)
    ours = rg.tensor(b).triangular_solve(rg.tensor(a), upper=upper, transpose=transpose)
    np.testing.assert_array_equal(np.isfinite(ours.solution.numpy()), np.isfinite(expected[0]))
    np.testing.assert_allclose(ours.solution.numpy(), expected[0].numpy(), equal_nan=True)
    np.testing.assert_array_equal(ours.cloned_coefficient.numpy(), a)
    functional = rg.triangular_solve(rg.tensor(b), rg.tensor(a), upper=upper, transpose=transpose)
    np.testing.assert_allclose(functional[0].numpy(), expected[0].numpy(), equal_nan=True)
