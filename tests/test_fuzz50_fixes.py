"""Regressions found by ``test_random_linalg_50.py`` (linear algebra against torch 2.13).

- ``addmm``/``addbmm``/``baddbmm``/``addmv``/``addr`` with ``beta=0`` dropped ``input`` from
  the graph (no gradient where torch gives zeros); ``addr`` with ``beta=0`` cast the result to
  ``input``'s dtype instead of the promoted one; complex tensors with a float ``alpha`` or
  ``beta`` were refused as if integer.
- ``det`` (``linalg.det``, ``Tensor.det``) raised in backward at a singular matrix (an
  inverse); torch gives 0 where the determinant is exactly 0.
- ``linalg.matrix_power(A, 0)`` was out of the graph (backward refused), and refused integer
  matrices torch powers.
- ``linalg.cond`` of a singular matrix in the ``'fro'``, ``'nuc'``, ``±1``, ``±inf`` norms
  raised (torch: inf), and refused complex matrices there.
- ``linalg.inv_ex``/``cholesky_ex``/``solve_ex`` gave int64 ``info`` (torch: int32) and
  refused complex matrices.
- ``linalg.pinv`` had no ``rcond`` (torch's older form); ``linalg.matrix_rank`` refused
  tensors of tolerances; ``tensordot`` refused ``dims`` given as a tensor.
- ``cross`` promoted mixed dtypes (torch refuses them).
- ``linalg.lstsq`` ignored ``driver``: gelsd/gelss give singular values and residuals, gels
  residuals and no rank.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def pair(array, grad=True):
    """The same float64 leaf in torch and retrograd."""
    return (
        torch.tensor(array, dtype=torch.float64, requires_grad=grad),
        rg.tensor(array, dtype=rg.float64, requires_grad=grad),
    )


def dtype_name(dtype):
    return str(dtype).rsplit(".", 1)[-1]


def grad_of(leaf, grads):
    return np.asarray(leaf.grad(grads).numpy())


@pytest.mark.parametrize(
    "op, shapes",
    [
        ("addmm", [(2, 4), (2, 3), (3, 4)]),
        ("addbmm", [(2, 4), (5, 2, 3), (5, 3, 4)]),
        ("baddbmm", [(1, 4), (5, 2, 3), (5, 3, 4)]),
        ("addmv", [(2,), (2, 3), (3,)]),
        ("addr", [(2, 1), (2,), (4,)]),
    ],
)
def test_beta_zero_keeps_input_in_graph_with_zero_gradient(op, shapes):
    rng = np.random.RandomState(0)
    arrays = [rng.randn(*shape) for shape in shapes]
    arrays[0].flat[0] = np.nan  # ignored with beta=0, as torch's
    theirs = [pair(a)[0] for a in arrays]
    ours = [pair(a)[1] for a in arrays]
    expected = getattr(torch, op)(*theirs, beta=0, alpha=2)
    result = getattr(rg, op)(*ours, beta=0, alpha=2)
    np.testing.assert_allclose(result.detach().numpy(), expected.detach().numpy())
    weights = rng.randn(*expected.shape)
    (expected * torch.tensor(weights)).sum().backward()
    grads = (result * rg.tensor(weights)).sum().backward()
    for t, r in zip(theirs, ours):
        np.testing.assert_allclose(grad_of(r, grads), t.grad.numpy(), atol=1e-12)


def test_addr_beta_zero_promotes_like_torch():
    vec1, vec2 = np.array([1.0, 2.0]), np.array([3.0, -1.0, 0.5])
    expected = torch.addr(torch.ones(2, 3, dtype=torch.int64), torch.tensor(vec1),
                          torch.tensor(vec2), beta=0)  # fmt: skip
    result = rg.addr(rg.ones(2, 3, dtype=rg.int64), rg.tensor(vec1), rg.tensor(vec2), beta=0)
    assert dtype_name(result.dtype) == dtype_name(expected.dtype) == "float64"
    np.testing.assert_allclose(result.numpy(), expected.numpy())


def test_complex_fused_products_take_float_scales():
    rng = np.random.RandomState(6)
    arrays = [rng.randn(2, 3) + 1j * rng.randn(2, 3) for _ in range(3)]
    arrays[1], arrays[2] = arrays[1][:, :2], rng.randn(2, 3) + 1j * rng.randn(2, 3)
    expected = torch.addmm(*(torch.tensor(a) for a in arrays), beta=0.5, alpha=-2.0)
    result = rg.addmm(*(rg.tensor(a) for a in arrays), beta=0.5, alpha=-2.0)
    assert dtype_name(result.dtype) == dtype_name(expected.dtype) == "complex128"
    np.testing.assert_allclose(result.numpy(), expected.numpy(), atol=1e-12)
    with pytest.raises(rg.DTypeError, match="addmv"):  # integers still want integer scales
        rg.addmv(rg.ones(2, dtype=rg.int64), rg.ones((2, 2), dtype=rg.int64),
                 rg.ones(2, dtype=rg.int64), beta=0.5)  # fmt: skip


@pytest.mark.parametrize(
    "matrix",
    [
        [[1.0, 2.0], [2.0, 4.0]],
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]],
        [[0.0, 0.0], [0.0, 0.0]],
        [[0.0, 1.0], [1.0, 0.0]],
        [[[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [2.0, 1.0, 0.75]], [[1.0, 2.0, 3.0]] * 3],
    ],
)
@pytest.mark.parametrize("name", ["linalg.det", "det"])
def test_det_gradient_at_singular_matrices_as_torch(matrix, name):
    theirs, ours = pair(np.array(matrix))
    t_fn = torch.linalg.det if name == "linalg.det" else torch.det
    r_fn = rg.linalg.det if name == "linalg.det" else rg.Tensor.det
    expected = t_fn(theirs)
    result = r_fn(ours)
    np.testing.assert_allclose(result.detach().numpy(), expected.detach().numpy(), atol=1e-12)
    expected.sum().backward()
    grads = result.sum().backward()
    np.testing.assert_allclose(grad_of(ours, grads), theirs.grad.numpy(), atol=1e-10)


def test_det_gradient_matches_finite_differences():
    rng = np.random.RandomState(1)
    a = rng.randn(2, 3, 3)
    x = rg.tensor(a, requires_grad=True)
    grads = rg.linalg.det(x).sum().backward()
    eps, numeric = 1e-6, np.zeros_like(a)
    for index in np.ndindex(a.shape):
        up, down = a.copy(), a.copy()
        up[index] += eps
        down[index] -= eps
        numeric[index] = (np.linalg.det(up).sum() - np.linalg.det(down).sum()) / (2 * eps)
    np.testing.assert_allclose(grad_of(x, grads), numeric, rtol=1e-6, atol=1e-8)


def test_matrix_power_zero_in_graph_and_integer_matrices():
    theirs, ours = pair(np.array([[1.0, np.nan], [3.0, 4.0]]))
    torch.linalg.matrix_power(theirs, 0).sum().backward()
    grads = rg.linalg.matrix_power(ours, 0).sum().backward()
    np.testing.assert_array_equal(grad_of(ours, grads), theirs.grad.numpy())
    ints = [[1, 2], [3, 4]]
    for n in (0, 1, 3):
        expected = torch.linalg.matrix_power(torch.tensor(ints), n)
        result = rg.linalg.matrix_power(rg.tensor(ints), n)
        assert result.dtype == rg.int64
        np.testing.assert_array_equal(result.numpy(), expected.numpy())
    with pytest.raises(rg.DTypeError, match="matrix_power"):
        rg.linalg.matrix_power(rg.tensor(ints), -1)


@pytest.mark.parametrize("p", ["fro", "nuc", 1, -1, float("inf"), -float("inf")])
def test_cond_of_singular_matrices_is_inf(p):
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    batch = np.stack([singular, np.array([[2.0, 1.0], [0.5, 3.0]])])
    result = rg.linalg.cond(rg.tensor(batch), p)
    if p != "nuc":  # (torch's nuclear norm of its inf-filled inverse is LAPACK's garbage)
        expected = torch.linalg.cond(torch.tensor(batch), p)
        np.testing.assert_allclose(result.numpy(), expected.numpy())
    assert result[0].item() == float("inf")
    regular = torch.linalg.cond(torch.tensor(batch[1]), p).item()
    np.testing.assert_allclose(result[1].item(), regular)
    rng = np.random.RandomState(2)
    c = rng.randn(3, 3) + 1j * rng.randn(3, 3)
    np.testing.assert_allclose(
        rg.linalg.cond(rg.tensor(c), p).numpy(), torch.linalg.cond(torch.tensor(c), p).numpy()
    )


def test_ex_info_is_int32_and_complex_accepted():
    rng = np.random.RandomState(3)
    a = rng.randn(2, 3, 3) + 1j * rng.randn(2, 3, 3)
    spd = a @ np.conj(np.swapaxes(a, -1, -2)) + 3 * np.eye(3)
    b = rng.randn(2, 3) + 0j
    checks = [
        (torch.linalg.inv_ex(torch.tensor(a)), rg.linalg.inv_ex(rg.tensor(a))),
        (torch.linalg.cholesky_ex(torch.tensor(spd)), rg.linalg.cholesky_ex(rg.tensor(spd))),
        (
            torch.linalg.solve_ex(torch.tensor(a), torch.tensor(b)),
            rg.linalg.solve_ex(rg.tensor(a), rg.tensor(b)),
        ),
    ]
    for (t_result, t_info), (r_result, r_info) in checks:
        assert t_info.dtype == torch.int32 and r_info.dtype == rg.int32
        np.testing.assert_array_equal(r_info.numpy(), t_info.numpy())
        np.testing.assert_allclose(r_result.numpy(), t_result.numpy(), atol=1e-12)
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    assert rg.linalg.inv_ex(rg.tensor(singular)).info.item() == 2
    assert torch.linalg.inv_ex(torch.tensor(singular)).info.item() == 2


def test_pinv_rcond_matrix_rank_tensor_tolerances_tensordot_tensor_dims():
    rng = np.random.RandomState(4)
    a = rng.randn(3, 4)
    np.testing.assert_allclose(
        rg.linalg.pinv(rg.tensor(a), 0.5).numpy(),
        torch.linalg.pinv(torch.tensor(a), 0.5).numpy(),
        atol=1e-12,
    )
    with pytest.raises(rg.InvalidArgumentError, match="pinv"):
        rg.linalg.pinv(rg.tensor(a), 0.5, rtol=0.1)
    batch = rng.randn(3, 4, 4)
    for atol, rtol in [([0.1, 1.0, 10.0], None), (None, [0.0, 0.5, 0.9]), ([0.5], [0.2])]:
        kwargs_t = {k: torch.tensor(v) for k, v in (("atol", atol), ("rtol", rtol)) if v}
        kwargs_r = {k: rg.tensor(v) for k, v in (("atol", atol), ("rtol", rtol)) if v}
        expected = torch.linalg.matrix_rank(torch.tensor(batch), **kwargs_t)
        result = rg.linalg.matrix_rank(rg.tensor(batch), **kwargs_r)
        np.testing.assert_array_equal(result.numpy(), expected.numpy())
    for dims, x, y in [
        (1, rng.randn(2, 3), rng.randn(3, 2)),
        ([[1, 2], [0, 1]], rng.randn(2, 3, 4), rng.randn(3, 4, 2)),
    ]:
        expected = torch.tensordot(torch.tensor(x), torch.tensor(y), dims=torch.tensor(dims))
        result = rg.tensordot(rg.tensor(x), rg.tensor(y), dims=rg.tensor(dims))
        np.testing.assert_allclose(result.numpy(), expected.numpy(), atol=1e-12)


def test_cross_refuses_mixed_dtypes_and_leaves_tensors_usable():
    a = rg.tensor([[1.0, 2.0, 3.0]], dtype=rg.float64, requires_grad=True)
    for other in (rg.tensor([[1, 0, 0]]), rg.tensor([[1.0, 0.0, 0.0]], dtype=rg.float32)):
        with pytest.raises(rg.DTypeError, match="cross"):
            rg.linalg.cross(a, other)
        with pytest.raises(RuntimeError, match="expected scalar type"):
            torch.linalg.cross(torch.tensor(a.detach().numpy()), torch.tensor(other.numpy()))
    grads = rg.linalg.cross(a, rg.tensor([[0.0, 1.0, 0.0]], dtype=rg.float64)).sum().backward()
    np.testing.assert_allclose(grad_of(a, grads), [[1.0, 0.0, -1.0]])  # a1 - a3


@pytest.mark.parametrize("driver", ["gels", "gelsy", "gelsd", "gelss", None])
@pytest.mark.parametrize("shapes", [((5, 3), (5, 2)), ((2, 5, 3), (2, 5)), ((3, 5), (3, 2))])
def test_lstsq_fields_by_driver(driver, shapes):
    rng = np.random.RandomState(5)
    a, b = rng.randn(*shapes[0]), rng.randn(*shapes[1])
    t_a, r_a = pair(a)
    t_b, r_b = pair(b)
    expected = torch.linalg.lstsq(t_a, t_b, driver=driver)
    result = rg.linalg.lstsq(r_a, r_b, driver=driver)
    for name in ("solution", "residuals", "rank", "singular_values"):
        t_field, r_field = getattr(expected, name), getattr(result, name)
        assert tuple(r_field.shape) == tuple(t_field.shape), name
        assert dtype_name(r_field.dtype) == dtype_name(t_field.dtype), name
        np.testing.assert_allclose(r_field.detach().numpy(), t_field.detach().numpy(), atol=1e-10)
    if expected.residuals.numel():
        expected.residuals.sum().backward()
        grads = result.residuals.sum().backward()
        np.testing.assert_allclose(grad_of(r_a, grads), t_a.grad.numpy(), atol=1e-10)
        np.testing.assert_allclose(grad_of(r_b, grads), t_b.grad.numpy(), atol=1e-10)
