"""Focused regressions of the defects that the ports of ``tests/test_real_ports_89.py`` and
``tests/test_real_ports_90.py`` found, each checked against torch's behaviour."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def test_sparse_legacy_constructors_build_torchs_sparse_tensors():
    """tkipf/pygcn's ``torch.sparse.FloatTensor(indices, values, shape)`` was an
    ``AttributeError`` (no such name), then a refusal; it is torch's sparse COO tensor now (of
    the values' dtype, as torch's legacy constructor keeps it), ``LongTensor(2, 2)`` an empty
    one, and no dense tensor is an instance of the sparse types (as in torch)."""
    indices, values = [[0, 1], [1, 0]], [1.0, 2.0]
    ours = rg.sparse.FloatTensor(rg.tensor(indices), rg.tensor(values), rg.Size([2, 2]))
    theirs = torch.sparse.FloatTensor(
        torch.tensor(indices), torch.tensor(values), torch.Size([2, 2])
    )
    assert ours.is_sparse and str(theirs.dtype) == f"torch.{ours.dtype}"
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())
    doubles = rg.sparse.FloatTensor(rg.tensor(indices), rg.tensor(values, dtype="float64"))
    their_doubles = torch.sparse.FloatTensor(
        torch.tensor(indices), torch.tensor(values, dtype=torch.float64)
    )
    assert str(their_doubles.dtype) == f"torch.{doubles.dtype}"
    assert isinstance(doubles, rg.sparse.DoubleTensor) == isinstance(
        their_doubles, torch.sparse.DoubleTensor
    )
    empty, their_empty = rg.sparse.LongTensor(2, 2), torch.sparse.LongTensor(2, 2)
    assert empty._nnz() == their_empty._nnz() == 0 and empty.dtype == "int64"
    assert isinstance(empty, rg.sparse.LongTensor) and not isinstance(empty, rg.sparse.IntTensor)
    assert not isinstance(rg.tensor(values), rg.sparse.FloatTensor)
    assert not isinstance(torch.ones(2), torch.sparse.FloatTensor)
    with pytest.raises(rg.DTypeError, match=r"sparse\.FloatTensor: expects"):
        rg.sparse.FloatTensor(rg.tensor(indices), rg.tensor(values), (2, 2), "extra")


def test_to_dense_of_a_dense_tensor_is_itself():
    """``adj.to_dense()`` (GCN code whatever the adjacency's layout) was an
    ``AttributeError``; torch returns the strided tensor itself, or its cast."""
    for lib in (torch, rg):
        x = lib.tensor([[1.0, -2.0], [3.0, 0.5]], requires_grad=True)
        assert x.to_dense() is x
        doubled = x.to_dense(lib.float64)
        assert doubled.dtype == lib.float64
    ours = rg.tensor([[1.0, -2.0], [3.0, 0.5]]).require_grad()
    grads = (ours.to_dense(rg.float64) ** 2).sum().backward()
    np.testing.assert_allclose(ours.grad(grads).numpy(), [[2.0, -4.0], [6.0, 1.0]])


def test_sparse_addmm_of_dense_matrices_is_addmm():
    """``torch.sparse.addmm(mat, mat1, mat2, beta=, alpha=)`` was missing; torch's is
    ``addmm`` for a dense ``mat1`` (values and gradients)."""
    rng = np.random.default_rng(3001)
    arrays = [rng.standard_normal((2, 3)), rng.standard_normal((2, 4)), rng.standard_normal((4, 3))]
    results = []
    for lib in (torch, rg):
        mat, mat1, mat2 = (lib.tensor(a, requires_grad=True) for a in arrays)
        out = lib.sparse.addmm(mat, mat1, mat2, beta=0.5, alpha=2.0)
        loss = (out * out).sum()
        if lib is torch:
            loss.backward()
            grads = [t.grad.numpy() for t in (mat, mat1, mat2)]
        else:
            gradients = loss.backward()
            grads = [t.grad(gradients).numpy() for t in (mat, mat1, mat2)]
        results.append((out.detach().numpy(), grads))
    (theirs, their_grads), (ours, our_grads) = results
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    for mine, reference in zip(our_grads, their_grads):
        np.testing.assert_allclose(mine, reference, rtol=1e-12)


def _not_positive_definite(lib):
    return lib.tensor(np.array([[1.0, 2.0], [2.0, 1.0]]))


@pytest.mark.parametrize(
    "call",
    [
        lambda lib: lib.linalg.cholesky(_not_positive_definite(lib)),
        lambda lib: lib.cholesky(_not_positive_definite(lib)),
        lambda lib: lib.linalg.cholesky_ex(_not_positive_definite(lib), check_errors=True),
        lambda lib: lib.linalg.inv(lib.zeros(2, 2)),
        lambda lib: lib.linalg.solve(lib.zeros(2, 2), lib.ones(2)),
        lambda lib: lib.linalg.lu_factor(lib.zeros(2, 2)),
    ],
    ids=["linalg.cholesky", "cholesky", "cholesky_ex", "inv", "solve", "lu_factor"],
)
def test_failed_factorizations_raise_linalg_error_a_runtime_error(call):
    """A matrix with no Cholesky factor or no inverse raised a ``ValueError``, which GP
    code's jitter retries (GPyTorch's ``psd_safe_cholesky``: ``except RuntimeError``; or
    ``except torch.linalg.LinAlgError``) do not catch; torch raises its ``LinAlgError``, a
    ``RuntimeError``. Still an ``InvalidArgumentError`` of the hierarchy, as before."""
    with pytest.raises(RuntimeError):  # torch.linalg.LinAlgError (lu_factor: a RuntimeError)
        call(torch)
    with pytest.raises(rg.linalg.LinAlgError) as raised:
        call(rg)
    assert isinstance(raised.value, RuntimeError)
    assert isinstance(raised.value, rg.errors.InvalidArgumentError)
    assert rg.linalg.LinAlgError is rg.errors.LinAlgError


def test_jitter_retry_catching_runtime_error_recovers():
    """The retry loop as GP code writes it, over a singular (positive semi-definite) kernel
    matrix: the first factorization fails, the jittered one succeeds."""
    ones = np.ones((3, 3))
    for lib in (torch, rg):
        matrix = lib.tensor(ones)
        jitter = 1e-6
        try:
            factor = lib.linalg.cholesky(matrix)
            failed = False
        except RuntimeError:
            failed = True
            factor = lib.linalg.cholesky(matrix + jitter * lib.eye(3, dtype=lib.float64))
        assert failed
        np.testing.assert_allclose(
            (factor @ factor.transpose(-2, -1)).numpy(), ones + jitter * np.eye(3)
        )


def test_solve_ex_of_one_singular_matrix_returns_its_info():
    """``linalg.solve_ex`` of one (unbatched) singular matrix raised a ``DTypeError``
    ("cannot combine a tensor with bool"); torch returns the info (its solution is LAPACK's
    partial one, NaN here) and raises nothing."""
    for lib in (torch, rg):
        result, info = lib.linalg.solve_ex(lib.zeros(2, 2), lib.ones(2, 1))
        assert info.item() == 1
        assert np.isnan(result.numpy()).any()
        result, info = lib.linalg.solve_ex(lib.tensor([[2.0, 0.0], [0.0, 4.0]]), lib.ones(2, 1))
        assert info.item() == 0
        np.testing.assert_allclose(result.numpy(), [[0.5], [0.25]])


def test_is_shared_is_false_as_for_a_tensor_torch_has_not_shared():
    """``p.is_shared()`` (asked by Hogwild code before ``share_memory_()``) was an
    ``AttributeError``; torch's answer for a tensor it has not shared is ``False``, for one
    ``share_memory_()`` marked ``True`` (sending it to another process is refused:
    ``test_leftovers22_fixes.py``)."""
    assert torch.ones(2).is_shared() is False
    assert rg.ones(2).is_shared() is False
    assert rg.nn.Linear(2, 1).weight.is_shared() is False
    assert rg.ones(2).share_memory_().is_shared() is True
