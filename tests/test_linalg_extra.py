"""The rest of ``rg.linalg`` (norms, eigh/svd/qr, lstsq, solve_triangular, matrix_exp and the
small helpers) against torch in float64 (values to 1e-10 and gradients), against finite
differences, and their errors. Decomposition gradients are checked on losses that do not
depend on the eigen/singular vectors' signs (torch's gradients are defined only for those)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from nn_testing import check_finite_differences
from surface_testing import same_gradients

RNG = np.random.default_rng(2026)
INF = math.inf


def _weights(*shape: int) -> np.ndarray:
    return np.random.default_rng(7).standard_normal(shape)


def _lib_linalg(lib):
    return lib.linalg


# -- norms ---------------------------------------------------------------------------------------
NORM_INPUT = RNG.standard_normal((3, 4, 5))
NORM_INPUT[1, 2] = 0.0  # a zero vector along the last dim: the subgradient case
NORM_INPUT[0, 1, 3] = 0.0  # a zero entry


@pytest.mark.parametrize("order", [2, 1, 3, 1.5, 0.5, -1, INF, -INF, 0])
@pytest.mark.parametrize("dim, keepdim", [(None, False), (-1, False), ((0, 2), True)])
def test_vector_norm_matches_torch(order, dim, keepdim):
    if order != 0:
        same_gradients(
            lambda lib, x: lib.linalg.vector_norm(x, order, dim, keepdim), [NORM_INPUT.copy()]
        )
        return
    # the count of non-zeros: torch's gradient is undefined (None), ours zero
    x = rg.tensor(NORM_INPUT).require_grad()
    out = rg.linalg.vector_norm(x, 0, dim, keepdim)
    expected = torch.linalg.vector_norm(torch.tensor(NORM_INPUT), 0, dim, keepdim)
    np.testing.assert_array_equal(out.detach().numpy(), expected.numpy())
    (g,) = rg.autograd.grad(out.sum(), x)
    assert not g.numpy().any()


def test_vector_norm_gradient_at_zero_is_zero_and_dtype_applies():
    x = rg.zeros((3,), dtype="float64").require_grad()
    (g,) = rg.autograd.grad(rg.linalg.vector_norm(x), x)
    assert g.tolist() == [0.0, 0.0, 0.0]
    out = rg.linalg.vector_norm(rg.ones((2, 2)), dtype="float64")
    assert out.dtype == "float64" and out.item() == 2.0
    check_finite_differences(lambda x: rg.linalg.vector_norm(x, 3, dim=1), [NORM_INPUT[0] + 0.1])


MATRIX_ORDS = ["fro", "nuc", 1, -1, 2, -2, INF, -INF]


@pytest.mark.parametrize("order", MATRIX_ORDS)
@pytest.mark.parametrize("dim, keepdim", [((-2, -1), False), ((2, 0), True), ((0, 1), False)])
def test_matrix_norm_matches_torch(order, dim, keepdim):
    same_gradients(
        lambda lib, x: lib.linalg.matrix_norm(x, order, dim, keepdim),
        [RNG.standard_normal((3, 4, 5))],
    )


@pytest.mark.parametrize(
    "order, dim, shape",
    [
        (None, None, (3, 4, 5)),
        (None, None, (4, 5)),
        (2, None, (6,)),
        (2, None, (4, 5)),
        ("nuc", None, (4, 5)),
        ("fro", (0, 2), (3, 4, 5)),
        (INF, (1,), (3, 4, 5)),
        (-1, (1, 2), (3, 4, 5)),
        (None, (0, 1), (3, 4, 5)),
        (3, 0, (4, 5)),
    ],
)
def test_norm_dispatches_as_torch(order, dim, shape):
    same_gradients(lambda lib, x: lib.linalg.norm(x, order, dim), [RNG.standard_normal(shape)])


@pytest.mark.parametrize(
    "p, dim, keepdim",
    [
        ("fro", None, False),
        ("fro", (0, 1), True),
        ("fro", 1, False),
        ("nuc", None, False),
        ("nuc", (1, 0), True),
        (2, None, False),
        (1, 1, True),
        (3.5, 0, False),
        (-2, 1, False),
        (INF, None, False),
        (None, 1, False),
    ],
)
def test_tensor_norm_matches_torch(p, dim, keepdim):
    same_gradients(lambda lib, x: x.norm(p, dim, keepdim), [RNG.standard_normal((4, 5))])


def test_norm_errors_name_the_op():
    x = rg.tensor(RNG.standard_normal((2, 3, 4)))
    with pytest.raises(rg.DTypeError, match=r"vector_norm.*floating point"):
        rg.linalg.vector_norm(rg.tensor([1, 2]))
    with pytest.raises(rg.InvalidArgumentError, match="matrix_norm: order 3"):
        rg.linalg.matrix_norm(x, 3)
    with pytest.raises(rg.ShapeError, match=r"matrix_norm.*at least 2 dimensions"):
        rg.linalg.matrix_norm(rg.ones((3,)))
    with pytest.raises(rg.ShapeError, match=r"linalg.norm.*1-D or 2-D"):
        rg.linalg.norm(x, 2)
    with pytest.raises(rg.ShapeError, match=r"linalg.norm.*length 1 or 2"):
        rg.linalg.norm(x, dim=(0, 1, 2))
    with pytest.raises(rg.InvalidArgumentError, match="vector_norm: ord must be a number"):
        rg.linalg.vector_norm(x, "fro")


# -- eigh ----------------------------------------------------------------------------------------
def _symmetric(*shape: int) -> np.ndarray:
    a = RNG.standard_normal(shape)
    return a + np.swapaxes(a, -1, -2)


def _eigh_loss(lib, x, uplo="L"):
    """Eigenvalues squared plus a weighted ``|V|``: independent of the eigenvectors' signs."""
    values, vectors = lib.linalg.eigh(x, UPLO=uplo)
    weights = lib.tensor(_weights(*x.shape), dtype=x.dtype)
    return (values * values).sum() + (vectors.abs() * weights).sum()


@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (1, 1)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_matches_torch(shape, uplo):
    a = RNG.standard_normal(shape)  # not symmetric: only one triangle is read
    values, vectors = rg.linalg.eigh(rg.tensor(a), uplo)
    t_values, t_vectors = torch.linalg.eigh(torch.tensor(a), UPLO=uplo)
    np.testing.assert_allclose(values.numpy(), t_values.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        np.abs(vectors.numpy()), np.abs(t_vectors.numpy()), rtol=1e-10, atol=1e-10
    )
    same_gradients(lambda lib, x: _eigh_loss(lib, x, uplo), [a])
    same_gradients(lambda lib, x: lib.linalg.eigvalsh(x, UPLO=uplo), [a])


def test_eigh_gradients_match_finite_differences():
    a = _symmetric(3, 3)

    def loss(x):
        return _eigh_loss(rg, (x + x.transpose(-1, -2)) * 0.5)

    check_finite_differences(loss, [a], rtol=1e-6, atol=1e-8)


def test_eigvalsh_gradient_with_repeated_eigenvalues_is_finite_as_torch():
    a = 2.0 * np.eye(3)
    same_gradients(lambda lib, x: lib.linalg.eigvalsh(x).sum(), [a])
    # eigh used for its values only: no gradient reaches the vectors, no 0/0
    same_gradients(lambda lib, x: lib.linalg.eigh(x)[0].square().sum(), [a])


# -- svd -----------------------------------------------------------------------------------------
def _svd_loss(lib, x, full_matrices):
    u, s, vh = lib.linalg.svd(x, full_matrices=full_matrices)
    k = s.shape[-1]
    u, vh = u[..., :k], vh[..., :k, :]  # full_matrices' extra columns are arbitrary bases
    wu = lib.tensor(_weights(*u.shape), dtype=x.dtype)
    wv = lib.tensor(_weights(*vh.shape), dtype=x.dtype) * 0.5
    return (s * s).sum() + (u.abs() * wu).sum() + (vh.abs() * wv).sum()


SVD_SHAPES = [(4, 4), (5, 3), (3, 5), (2, 4, 3)]


@pytest.mark.parametrize("shape", SVD_SHAPES)
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_matches_torch(shape, full_matrices):
    a = RNG.standard_normal(shape)
    u, s, vh = rg.linalg.svd(rg.tensor(a), full_matrices=full_matrices)
    t_u, t_s, t_vh = torch.linalg.svd(torch.tensor(a), full_matrices=full_matrices)
    assert u.shape == tuple(t_u.shape) and vh.shape == tuple(t_vh.shape)
    np.testing.assert_allclose(s.numpy(), t_s.numpy(), rtol=1e-10, atol=1e-10)
    k = s.shape[-1]
    rebuilt = (u[..., :k] * s.unsqueeze_dim(-2)) @ vh[..., :k, :]
    np.testing.assert_allclose(rebuilt.numpy(), a, rtol=1e-10, atol=1e-10)
    eye = np.eye(u.shape[-1])
    np.testing.assert_allclose(
        (u.transpose(-1, -2) @ u).numpy(),
        np.broadcast_to(eye, u.shape[:-2] + eye.shape),
        atol=1e-10,
    )
    same_gradients(lambda lib, x: _svd_loss(lib, x, full_matrices), [a])
    same_gradients(lambda lib, x: lib.linalg.svdvals(x), [a])


def test_svd_gradients_match_finite_differences_and_second_order():
    for shape in [(3, 3), (4, 2), (2, 4)]:
        check_finite_differences(
            lambda x: _svd_loss(rg, x, False), [RNG.standard_normal(shape)], rtol=1e-6, atol=1e-8
        )
    a = RNG.standard_normal((3, 4))
    x, t = rg.tensor(a).require_grad(), torch.tensor(a, requires_grad=True)
    (g,) = rg.autograd.grad(
        rg.linalg.svdvals(x).square().sum() + rg.linalg.svdvals(x).sum(), x, create_graph=True
    )
    (tg,) = torch.autograd.grad(
        torch.linalg.svdvals(t).square().sum() + torch.linalg.svdvals(t).sum(), t, create_graph=True
    )
    (gg,) = rg.autograd.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-8, atol=1e-9)


def test_svdvals_of_an_orthogonal_matrix_has_torch_gradient():
    q = np.linalg.qr(RNG.standard_normal((3, 3)))[0] * 2.0  # all singular values 2
    same_gradients(lambda lib, x: lib.linalg.svdvals(x).sum(), [q])


# -- qr ------------------------------------------------------------------------------------------
def _qr_loss(lib, x, mode):
    q, r = lib.linalg.qr(x, mode=mode)
    wq = lib.tensor(_weights(*q.shape), dtype=x.dtype)
    wr = lib.tensor(_weights(*r.shape), dtype=x.dtype) * 0.5
    return (q * wq).sum() + (r * wr).sum()


@pytest.mark.parametrize(
    "shape, mode",
    [
        ((4, 4), "reduced"),
        ((5, 3), "reduced"),
        ((3, 5), "reduced"),
        ((2, 4, 3), "reduced"),
        ((3, 5), "complete"),
        ((4, 4), "complete"),
        ((2, 3, 5), "reduced"),
    ],
)
def test_qr_matches_torch(shape, mode):
    a = RNG.standard_normal(shape)
    q, r = rg.linalg.qr(rg.tensor(a), mode)
    t_q, t_r = torch.linalg.qr(torch.tensor(a), mode)
    np.testing.assert_allclose(q.numpy(), t_q.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(r.numpy(), t_r.numpy(), rtol=1e-10, atol=1e-10)
    same_gradients(lambda lib, x: _qr_loss(lib, x, mode), [a])


def test_qr_modes_and_finite_differences():
    a = RNG.standard_normal((5, 3))
    q, r = rg.linalg.qr(rg.tensor(a), "complete")
    t_q, t_r = torch.linalg.qr(torch.tensor(a), "complete")
    np.testing.assert_allclose(np.abs(q.numpy()), np.abs(t_q.numpy()), atol=1e-10)
    np.testing.assert_allclose(r.numpy(), t_r.numpy(), atol=1e-10)
    q, r = rg.linalg.qr(rg.tensor(a), "r")
    assert q.shape == (0,)
    np.testing.assert_allclose(
        r.numpy(), torch.linalg.qr(torch.tensor(a), "r")[1].numpy(), atol=1e-10
    )
    for shape in [(4, 3), (3, 3), (3, 5)]:
        check_finite_differences(
            lambda x: _qr_loss(rg, x, "reduced"), [RNG.standard_normal(shape)], rtol=1e-6, atol=1e-8
        )
    x = rg.tensor(a).require_grad()
    with pytest.raises(rg.InvalidArgumentError, match="mode='r'"):
        rg.linalg.qr(x, "r").R.sum().backward()
    with pytest.raises(rg.InvalidArgumentError, match="complete"):
        rg.linalg.qr(x, "complete").R.sum().backward()


# -- matrix_exp ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1)])
def test_matrix_exp_matches_torch(shape):
    a = RNG.standard_normal(shape) * 0.7
    same_gradients(lambda lib, x: lib.linalg.matrix_exp(x), [a])


def test_matrix_exp_finite_differences():
    check_finite_differences(
        rg.linalg.matrix_exp, [RNG.standard_normal((3, 3)) * 0.5], rtol=1e-6, atol=1e-8
    )


# -- solvers and products ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "a_shape, b_shape", [((6, 3), (6, 2)), ((3, 5), (3, 2)), ((2, 5, 4), (2, 5, 3)), ((5, 3), (5,))]
)
def test_lstsq_matches_torch(a_shape, b_shape):
    a, b = RNG.standard_normal(a_shape), RNG.standard_normal(b_shape)
    same_gradients(lambda lib, x, y: lib.linalg.lstsq(x, y).solution, [a, b])
    ours = rg.linalg.lstsq(rg.tensor(a), rg.tensor(b))
    theirs = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b))
    assert ours.rank.tolist() == theirs.rank.tolist() and ours.rank.dtype == "int64"
    assert ours.residuals.shape == tuple(theirs.residuals.shape)
    assert ours.singular_values.shape == tuple(theirs.singular_values.shape)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unitriangular", [True, False])
def test_solve_triangular_matches_torch(upper, left, unitriangular):
    a = RNG.standard_normal((2, 4, 4)) + 4.0 * np.eye(4)
    b = RNG.standard_normal((2, 4, 3) if left else (2, 3, 4))
    same_gradients(
        lambda lib, x, y: lib.linalg.solve_triangular(
            x, y, upper=upper, left=left, unitriangular=unitriangular
        ),
        [a, b],
    )


def test_small_helpers_match_torch():
    a, b, c = (RNG.standard_normal(s) for s in [(3, 4), (4, 5), (5, 2)])
    v, w = RNG.standard_normal(3), RNG.standard_normal(2)
    same_gradients(lambda lib, x, y, z: lib.linalg.multi_dot([x, y, z]), [a, b, c])
    same_gradients(
        lambda lib, p, x, y, z, q: lib.linalg.multi_dot([p, x, y, z, q]), [v, a, b, c, w]
    )
    x3, y3 = RNG.standard_normal((4, 3)), RNG.standard_normal((1, 3))
    same_gradients(lambda lib, x, y: lib.linalg.cross(x, y), [x3, y3])
    same_gradients(lambda lib, x, y: lib.linalg.cross(x.T, y.T, dim=0), [x3, y3])
    same_gradients(lambda lib, x, y: lib.linalg.vecdot(x, y), [x3, y3])
    same_gradients(lambda lib, x, y: lib.linalg.vecdot(x, y, dim=0), [a, a[:, :1]])
    same_gradients(lambda lib, x, y: lib.linalg.matmul(x, y), [a, b])
    t = RNG.standard_normal((2, 3, 4))
    same_gradients(lambda lib, x: lib.linalg.diagonal(x), [t])
    same_gradients(lambda lib, x: lib.linalg.diagonal(x, offset=1, dim1=0, dim2=2), [t])
    x = np.array([[0.0, 1.5, -2.0], [3.0, 0.5, 1.0]])
    same_gradients(lambda lib, x: lib.linalg.vander(x), [x])
    same_gradients(lambda lib, x: lib.linalg.vander(x, N=5), [x])


def test_matrix_rank_and_cond_match_torch():
    full = RNG.standard_normal((2, 4, 5))
    low = RNG.standard_normal((5, 2)) @ RNG.standard_normal((2, 4))
    for a, options in [(full, {}), (low, {}), (low, dict(atol=0.5)), (full, dict(rtol=0.3))]:
        ours = rg.linalg.matrix_rank(rg.tensor(a), **options)
        theirs = torch.linalg.matrix_rank(torch.tensor(a), **options)
        assert ours.tolist() == theirs.tolist() and ours.dtype == "int64"
    sym = _symmetric(4, 4)
    assert (
        rg.linalg.matrix_rank(rg.tensor(sym), hermitian=True).item()
        == torch.linalg.matrix_rank(torch.tensor(sym), hermitian=True).item()
    )
    square = RNG.standard_normal((2, 3, 3)) + 2.0 * np.eye(3)
    for p in [None, 2, -2]:
        same_gradients(lambda lib, x, p=p: lib.linalg.cond(x, p), [square])
    # torch's backward of cond for these fails (an in-place write inside inv_ex): values here,
    # gradients by finite differences
    for p in ["fro", "nuc", 1, -1, INF, -INF]:
        ours = rg.linalg.cond(rg.tensor(square), p).numpy()
        np.testing.assert_allclose(
            ours, torch.linalg.cond(torch.tensor(square), p).numpy(), rtol=1e-10
        )
        check_finite_differences(
            lambda x, p=p: rg.linalg.cond(x, p), [square], rtol=1e-6, atol=1e-8
        )
    same_gradients(lambda lib, x: lib.linalg.cond(x), [full])


def test_ex_variants_report_info_as_torch():
    good = RNG.standard_normal((3, 3)) + 3.0 * np.eye(3)
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    batch = np.stack([good, singular])
    inverse, info = rg.linalg.inv_ex(rg.tensor(batch))
    t_inverse, t_info = torch.linalg.inv_ex(torch.tensor(batch))
    assert info.tolist() == t_info.tolist() and info.dtype == "int32" == str(t_info.dtype)[6:]
    np.testing.assert_allclose(inverse.numpy()[0], t_inverse.numpy()[0], rtol=1e-10)
    assert np.isnan(inverse.numpy()[1]).all()
    rhs = RNG.standard_normal((2, 3, 2))
    result, info = rg.linalg.solve_ex(rg.tensor(batch), rg.tensor(rhs))
    t_result, t_info = torch.linalg.solve_ex(torch.tensor(batch), torch.tensor(rhs))
    assert info.tolist() == t_info.tolist()
    np.testing.assert_allclose(result.numpy()[0], t_result.numpy()[0], rtol=1e-10)
    spd = good @ good.T
    not_pd = np.diag([1.0, 2.0, -1.0])
    chol, info = rg.linalg.cholesky_ex(rg.tensor(np.stack([spd, not_pd])))
    t_chol, t_info = torch.linalg.cholesky_ex(torch.tensor(np.stack([spd, not_pd])))
    assert info.tolist() == t_info.tolist() == [0, 3]
    np.testing.assert_allclose(chol.numpy()[0], t_chol.numpy()[0], rtol=1e-10)
    assert rg.linalg.inv_ex(rg.tensor(good)).info.item() == 0
    with pytest.raises(rg.InvalidArgumentError, match="singular"):
        rg.linalg.inv_ex(rg.tensor(singular), check_errors=True)
    with pytest.raises(rg.InvalidArgumentError, match="positive-definite"):
        rg.linalg.cholesky_ex(rg.tensor(not_pd), check_errors=True)


def test_errors_name_the_op_and_shapes():
    rect = rg.ones((2, 3), dtype="float64")
    for fn in (rg.linalg.eigh, rg.linalg.eigvalsh, rg.linalg.matrix_exp, rg.linalg.inv_ex):
        with pytest.raises(rg.ShapeError, match=r"square.*2 by 3"):
            fn(rect)
    with pytest.raises(rg.ShapeError, match=r"svd.*at least 2 dimensions.*\[3\]"):
        rg.linalg.svd(rg.ones((3,)))
    with pytest.raises(rg.DTypeError, match=r"qr.*floating point.*int64"):
        rg.linalg.qr(rg.tensor([[1, 2], [3, 4]]))
    with pytest.raises(rg.InvalidArgumentError, match="qr: mode"):
        rg.linalg.qr(rect, "full")
    with pytest.raises(rg.InvalidArgumentError, match="UPLO"):
        rg.linalg.eigh(rg.ones((2, 2)), UPLO="X")
    with pytest.raises(rg.ShapeError, match=r"lstsq.*rows"):
        rg.linalg.lstsq(rect, rg.ones((3, 1), dtype="float64"))
    with pytest.raises(rg.ShapeError, match=r"multi_dot.*cannot be multiplied"):
        rg.linalg.multi_dot([rect, rect])
    with pytest.raises(rg.ShapeError, match=r"solve_triangular.*square"):
        rg.linalg.solve_triangular(rect, rect, upper=True)


def test_second_order_through_eigh_and_float32_decompositions_match_torch():
    a = _symmetric(3, 3)
    weights = np.arange(9.0).reshape(3, 3)

    def loss(lib, z):
        values, vectors = lib.linalg.eigh(z)
        return (values**3).sum() + (vectors.abs() * lib.tensor(weights)).sum()

    x, t = rg.tensor(a).require_grad(), torch.tensor(a, requires_grad=True)
    (g,) = rg.autograd.grad(loss(rg, x), x, create_graph=True)
    (tg,) = torch.autograd.grad(loss(torch, t), t, create_graph=True)
    (gg,) = rg.autograd.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-8, atol=1e-9)

    def mixed(lib, x):
        s = lib.linalg.svdvals(x)
        r = lib.linalg.qr(x).R
        square = x.transpose(-1, -2) @ x
        e = lib.linalg.matrix_exp(square * 0.1)
        return s.sum() + r.abs().sum() + lib.linalg.eigvalsh(square).sum() + e.sum()

    same_gradients(mixed, [RNG.standard_normal((2, 4, 3))], "float32")


# -- torch's solves by a factor (found by realports8's Gaussian-process port) -------------------
def _factor(upper: bool, *batch: int) -> np.ndarray:
    a = RNG.standard_normal(batch + (4, 4)) + 3.0 * np.eye(4)
    return np.triu(a) if upper else np.tril(a)


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("b_batch, l_batch", [((), ()), ((2,), ()), ((3, 1), (2,))])
def test_cholesky_solve_matches_torch(upper, b_batch, l_batch):
    # torch's gradient reaches every entry of the factor (its formula differentiates L L^T)
    b, factor = RNG.standard_normal(b_batch + (4, 3)), _factor(upper, *l_batch)
    same_gradients(lambda lib, x, f: lib.cholesky_solve(x, f, upper=upper), [b, factor])
    same_gradients(lambda lib, x, f: x.cholesky_solve(f, upper), [b, factor])


def test_cholesky_solve_reads_only_the_factors_triangle_as_torch():
    lower = _factor(False)
    garbage = lower + np.triu(RNG.standard_normal((4, 4)), 1)  # LAPACK's potrs never reads it
    b = RNG.standard_normal((4, 2))
    ours = rg.cholesky_solve(rg.tensor(b), rg.tensor(garbage))
    theirs = torch.cholesky_solve(torch.tensor(b), torch.tensor(garbage))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_inverse_matches_torch(upper):
    same_gradients(lambda lib, f: lib.cholesky_inverse(f, upper=upper), [_factor(upper, 2)])
    same_gradients(lambda lib, f: f.cholesky_inverse(upper), [_factor(upper)])


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("unitriangular", [False, True])
def test_triangular_solve_matches_torch(upper, transpose, unitriangular):
    a = RNG.standard_normal((2, 4, 4)) + 4.0 * np.eye(4)  # both triangles: only one is read
    b = RNG.standard_normal((2, 4, 3))

    def solve(lib, x, y):
        return lib.triangular_solve(x, y, upper, transpose, unitriangular)

    same_gradients(solve, [b, a], pick=lambda out: out.solution)
    ours = solve(rg, rg.tensor(b), rg.tensor(a))
    assert type(ours).__name__ == "triangular_solve" and ours._fields == (
        "solution",
        "cloned_coefficient",
    )
    np.testing.assert_array_equal(ours.cloned_coefficient.numpy(), a)


def test_factor_solves_name_the_op_at_fault():
    b, lower = rg.ones((4, 2), dtype="float64"), rg.tensor(_factor(False))
    with pytest.raises(rg.ShapeError, match=r"cholesky_solve: .*\[3, 2\].*\[4, 4\]"):
        rg.cholesky_solve(rg.ones((3, 2), dtype="float64"), lower)
    with pytest.raises(rg.ShapeError, match="cholesky_solve: expected a batch of square"):
        rg.cholesky_solve(b, rg.ones((4, 3), dtype="float64"))
    with pytest.raises(rg.DTypeError, match=r"cholesky_solve: .*float32 and float64"):
        rg.cholesky_solve(rg.ones((4, 2)), lower)
    with pytest.raises(rg.DTypeError, match="cholesky_inverse: expected a floating point"):
        rg.cholesky_inverse(rg.ones((2, 2), dtype="int64"))
    with pytest.raises(rg.ShapeError, match=r"triangular_solve: .*do not broadcast"):
        rg.triangular_solve(rg.ones((3, 4, 2), dtype="float64"), rg.tensor(_factor(True, 2)))
