"""Regression tests for the defects the linear-algebra real ports (``test_real_ports_271`` ..
``_279``) exposed: torch's randomized ``svd_lowrank``/``pca_lowrank``, a gradient joining a
parameter under ``no_grad``, and torch's dtype and shape rules of ``linalg.solve``,
``solve_triangular``, ``vecdot`` and ``cdist``."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import retrograd as rg


def _shared_sketch(monkeypatch, sketch):
    """Both libraries' ``randn`` answering ``sketch`` (in the dtype asked for)."""
    monkeypatch.setattr(rg, "randn", lambda *size, dtype=None, **_: rg.tensor(sketch, dtype=dtype))
    monkeypatch.setattr(
        torch, "randn", lambda *size, dtype=None, **_: torch.tensor(sketch, dtype=dtype)
    )


@pytest.mark.parametrize("shape", [(9, 5), (4, 7)])
def test_svd_lowrank_is_torchs_randomized_approximation_and_its_gradient(monkeypatch, shape):
    rng = np.random.default_rng(4401)
    data = rng.standard_normal(shape) * np.linspace(3.0, 0.2, shape[1])
    shift = rng.standard_normal((1, shape[1])) * 0.1
    _shared_sketch(monkeypatch, rng.standard_normal((min(shape), 3)))  # the tall side's columns
    ours = rg.tensor(data).requires_grad_()
    theirs = torch.tensor(data, requires_grad=True)
    u, s, v = rg.svd_lowrank(ours, q=3, niter=1, M=rg.tensor(shift))
    tu, ts, tv = torch.svd_lowrank(theirs, q=3, niter=1, M=torch.tensor(shift))
    assert (u.shape, s.shape, v.shape) == (tuple(tu.shape), tuple(ts.shape), tuple(tv.shape))
    np.testing.assert_allclose(s.numpy(), ts.detach().numpy(), rtol=1e-10)
    # the singular vectors' signs are the LAPACK's: compared through the rank-3 approximation
    approx = u @ rg.diag_embed(s) @ v.mT
    their_approx = tu @ torch.diag_embed(ts) @ tv.mT
    np.testing.assert_allclose(approx.detach().numpy(), their_approx.detach().numpy(), atol=1e-10)
    # an approximation, not the truncated SVD: the exact third singular value differs
    exact = np.linalg.svd(data - shift, compute_uv=False)
    assert abs(float(s[2]) - exact[2]) > 1e-8
    weights = rng.standard_normal(tuple(approx.shape))
    grads = (approx * rg.tensor(weights)).sum().backward()
    (their_approx * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), atol=1e-9)


def test_pca_lowrank_gradient_matches_finite_differences(monkeypatch):
    rng = np.random.default_rng(4402)
    data = rng.standard_normal((8, 4)) * np.array([3.0, 1.5, 0.5, 0.1])
    _shared_sketch(monkeypatch, rng.standard_normal((4, 2)))

    def top_values(values):
        return float(rg.pca_lowrank(rg.tensor(values), q=2, niter=2)[1].sum())

    x = rg.tensor(data).requires_grad_()
    grad = x.grad(rg.pca_lowrank(x, q=2, niter=2)[1].sum().backward()).numpy()
    step, numeric = 1e-6, np.zeros_like(data)
    for index in np.ndindex(*data.shape):
        bump = np.zeros_like(data)
        bump[index] = step
        numeric[index] = (top_values(data + bump) - top_values(data - bump)) / (2 * step)
    np.testing.assert_allclose(grad, numeric, atol=1e-6)
    t = torch.tensor(data, requires_grad=True)
    torch.pca_lowrank(t, q=2, niter=2)[1].sum().backward()
    np.testing.assert_allclose(grad, t.grad.numpy(), atol=1e-9)


def test_low_rank_sketch_follows_retrograds_generator_and_checks_niter():
    data = rg.tensor(np.random.default_rng(4403).standard_normal((10, 6)))
    rg.manual_seed(7)
    first = rg.pca_lowrank(data, q=2, niter=0)[1].numpy()
    rg.manual_seed(7)
    again = rg.pca_lowrank(data, q=2, niter=0)[1].numpy()
    np.testing.assert_array_equal(first, again)  # the sketch is rg.randn's, seeded
    for bad in (-1, 1.5, True):
        with pytest.raises(rg.InvalidArgumentError, match=r"pca_lowrank: niter"):
            rg.pca_lowrank(data, q=2, niter=bad)
        with pytest.raises(rg.InvalidArgumentError, match=r"svd_lowrank: niter"):
            rg.svd_lowrank(data, q=2, niter=bad)
    assert rg.svd_lowrank(data, q=2, niter=None)[1].shape == (2,)  # torch's None: 2


def test_a_gradient_joins_its_parameter_under_no_grad_as_torchs():
    start = np.linalg.qr(np.random.default_rng(4404).standard_normal((6, 3)))[0]
    x = rg.tensor(start).requires_grad_()
    grads = (x * x * x).sum().backward()
    gradient = x.grad(grads)  # a tensor of the inner backend, as a gradient is
    with rg.no_grad():
        sym = 0.5 * (gradient.T @ x + x.T @ gradient)
        stacked = rg.cat([gradient, x])
        gradient2 = gradient - x @ sym
    assert not sym.requires_grad and not stacked.requires_grad
    expected_grad = 3 * start**2
    expected_sym = 0.5 * (expected_grad.T @ start + start.T @ expected_grad)
    np.testing.assert_allclose(sym.numpy(), expected_sym, atol=1e-12)
    np.testing.assert_allclose(gradient2.numpy(), expected_grad - start @ expected_sym, atol=1e-12)
    np.testing.assert_allclose(stacked.numpy(), np.concatenate([expected_grad, start]))
    # where a graph is recorded, the gradient is a constant of it, as torch's
    product = gradient.T @ x
    assert product.requires_grad
    np.testing.assert_allclose(product.numpy(), expected_grad.T @ start, atol=1e-12)
    # d/dx[k, j] of sum(G^T x) is sum_i G[k, i]
    expected_x_grad = np.repeat(expected_grad.sum(1, keepdims=True), 3, axis=1)
    np.testing.assert_allclose(x.grad(product.sum().backward()).numpy(), expected_x_grad)


def test_linalg_solve_vecdot_and_cdist_refuse_mixed_dtypes_as_torch():
    rng = np.random.default_rng(4405)
    a, b = rng.standard_normal((3, 3)) + 3 * np.eye(3), rng.standard_normal((3, 2))

    def single(lib, values):
        return lib.tensor(values, dtype=lib.float32)

    cases = [
        ("linalg.solve", lambda lib: lib.linalg.solve(single(lib, a), lib.tensor(b))),
        ("solve_ex: linalg.solve", lambda lib: lib.linalg.solve_ex(single(lib, a), lib.tensor(b))),
        ("linalg.vecdot", lambda lib: lib.linalg.vecdot(single(lib, b), lib.tensor(b))),
        ("cdist", lambda lib: lib.cdist(single(lib, a), lib.tensor(b.T))),
    ]
    for name, call in cases:
        with pytest.raises(RuntimeError):
            call(torch)
        with pytest.raises(rg.DTypeError, match=rf"^{name}: .*float32.*float64.*same dtype"):
            call(rg)
    # one dtype: the values are torch's
    ours = rg.linalg.solve(rg.tensor(a), rg.tensor(b)).numpy()
    np.testing.assert_allclose(ours, torch.linalg.solve(torch.tensor(a), torch.tensor(b)).numpy())


def test_solve_triangular_names_its_own_shapes_and_takes_as_dtype():
    rng = np.random.default_rng(4406)
    upper = np.triu(rng.standard_normal((4, 4))) + 4 * np.eye(4)
    with pytest.raises(RuntimeError, match="Incompatible"):
        torch.linalg.solve_triangular(
            torch.tensor(upper), torch.ones(6, 2, dtype=torch.float64), upper=True
        )
    with pytest.raises(
        rg.ShapeError,
        match=r"^linalg.solve_triangular: incompatible shapes .* AX = B \(\[4, 4\] and \[6, 2\]\)",
    ):
        rg.linalg.solve_triangular(rg.tensor(upper), rg.ones(6, 2, dtype=rg.float64), upper=True)
    with pytest.raises(rg.ShapeError, match=r"XA = B \(\[4, 4\] and \[2, 6\]\)"):
        rg.linalg.solve_triangular(
            rg.tensor(upper), rg.ones(2, 6, dtype=rg.float64), upper=True, left=False
        )
    rhs = rng.standard_normal((4, 2))
    ours = rg.linalg.solve_triangular(
        rg.tensor(upper, dtype=rg.float32), rg.tensor(rhs), upper=True
    )
    theirs = torch.linalg.solve_triangular(
        torch.tensor(upper, dtype=torch.float32), torch.tensor(rhs), upper=True
    )
    assert ours.dtype == rg.float32 and theirs.dtype == torch.float32
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5)


def test_low_rank_methods_refuse_integer_matrices_by_name():
    with pytest.raises(RuntimeError):
        torch.svd_lowrank(torch.tensor([[1, 2], [3, 4]]), q=1)
    for method in (rg.svd_lowrank, rg.pca_lowrank):
        with pytest.raises(rg.DTypeError, match=rf"^{method.__name__}: .*floating point.*int64"):
            method(rg.tensor([[1, 2], [3, 4]]), q=1)


@pytest.mark.parametrize("inner", ["numpy", "torch"])
def test_cholesky_names_the_failing_batch_element_and_minor_as_torch(inner):
    backend = rg.Autodiff(rg.NumpyBackend() if inner == "numpy" else rg.TorchBackend())
    cases = [
        (np.stack([np.eye(3), np.diag([1.0, 2.0, -1.0])]), "(Batch element 1)", 3),
        (np.array([[1.0, 2.0], [2.0, 1.0]]), "order 2", 2),
        (-np.eye(4), "order 1", 1),
    ]
    for matrix, torch_text, order in cases:
        with pytest.raises(torch.linalg.LinAlgError, match=re.escape(torch_text)):
            torch.linalg.cholesky(torch.tensor(matrix))
        where = r" \(batch element 1\)" if matrix.ndim == 3 else ""
        with pytest.raises(
            rg.linalg.LinAlgError,
            match=rf"cholesky: .*{where} is not positive-definite \(its leading minor of "
            rf"order {order} is not\)",
        ):
            rg.linalg.cholesky(rg.tensor(matrix, backend=backend))
    good = rg.tensor(np.eye(2) * 4, backend=backend)
    np.testing.assert_allclose(rg.linalg.cholesky(good).numpy(), np.eye(2) * 2)  # still usable
