"""What porting graph networks written in plain torch exposed (realports54): ``torch.sparse
.softmax``/``log_softmax`` (sparse GAT layers normalize each node's edge scores with them) were
refused, and ``Tensor.sum`` of a sparse tensor was refused though ``sparse.sum`` worked.
Expected values come from torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

# a 3x4 adjacency with a repeated place (0, 1), an empty row and a lone entry
INDICES = [[0, 2, 0, 2, 2, 0, 0], [1, 0, 3, 2, 3, 1, 0]]
VALUES = [0.5, -1.0, 2.0, 0.25, 1.5, -0.75, 3.0]


def sparse_pair(values: np.ndarray, dtype_pair=(torch.float32, rg.float32)):
    theirs = torch.tensor(values, dtype=dtype_pair[0], requires_grad=True)
    ours = rg.tensor(values, dtype=dtype_pair[1], requires_grad=True)
    return (
        theirs,
        torch.sparse_coo_tensor(torch.tensor(INDICES), theirs, (3, 4)),
        ours,
        rg.sparse_coo_tensor(rg.tensor(INDICES), ours, (3, 4)),
    )


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [1, 0, -1])
def test_sparse_softmax_values_and_gradients_match_torch(log, dim):
    np.random.seed(0)
    weights = np.random.standard_normal((3, 4)).astype(np.float32)
    values_t, theirs, values_r, ours = sparse_pair(np.array(VALUES, dtype=np.float32))
    name = "log_softmax" if log else "softmax"
    # torch's backward of a negative dim is wrong (its gradient is not that of the values it
    # computes, nor that of the dense masked softmax): the reference takes the dim as positive
    out_t = getattr(torch.sparse, name)(theirs, dim % 2)
    out_r = getattr(rg.sparse, name)(ours, dim)
    assert out_r.is_sparse and out_r.is_coalesced() and out_t.is_coalesced()
    np.testing.assert_array_equal(out_r.indices().numpy(), out_t.indices().numpy())
    np.testing.assert_allclose(out_r.values().numpy(), out_t.values().detach().numpy(), 1e-6, 1e-6)
    (out_t.to_dense() * torch.tensor(weights)).sum().backward()
    grads = (out_r.to_dense() * rg.tensor(weights)).sum().backward()
    np.testing.assert_allclose(values_r.grad(grads).numpy(), values_t.grad.numpy(), 1e-5, 1e-6)


def test_sparse_softmax_gradient_matches_finite_differences_in_float64():
    np.random.seed(1)
    weights = np.random.standard_normal((3, 4))
    values = np.array(VALUES)

    def loss(v: np.ndarray) -> float:
        s = rg.sparse_coo_tensor(rg.tensor(INDICES), rg.tensor(v), (3, 4))
        return float((rg.sparse.log_softmax(s, 1).to_dense() * rg.tensor(weights)).sum().item())

    leaf = rg.tensor(values, requires_grad=True)
    out = rg.sparse.log_softmax(rg.sparse_coo_tensor(rg.tensor(INDICES), leaf, (3, 4)), 1)
    analytic = leaf.grad((out.to_dense() * rg.tensor(weights)).sum().backward()).numpy()
    numeric = np.zeros_like(values)
    for i in range(len(values)):
        step = np.zeros_like(values)
        step[i] = 1e-6
        numeric[i] = (loss(values + step) - loss(values - step)) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_sparse_softmax_takes_dtype_as_torch():
    _, theirs, _, ours = sparse_pair(np.array(VALUES, dtype=np.float32))
    out_t = torch.sparse.softmax(theirs, 1, dtype=torch.float64)
    out_r = rg.sparse.softmax(ours, 1, dtype=rg.float64)
    assert out_r.dtype == rg.float64 and out_t.dtype == torch.float64
    np.testing.assert_allclose(out_r.values().numpy(), out_t.values().detach().numpy(), 1e-12)


def test_sparse_softmax_refuses_bad_input_by_name():
    ours = rg.sparse_coo_tensor(rg.tensor(INDICES), rg.tensor(VALUES), (3, 4))
    with pytest.raises(rg.ShapeError, match=r"sparse\.softmax: dimension 2 is out of range"):
        rg.sparse.softmax(ours, 2)
    with pytest.raises(rg.InvalidArgumentError, match=r"sparse\.softmax of a dense tensor"):
        rg.sparse.softmax(rg.ones(2, 2), 1)
    integer = rg.sparse_coo_tensor(rg.tensor(INDICES), rg.tensor([1, 2, 3, 4, 5, 6, 7]), (3, 4))
    with pytest.raises(rg.DTypeError, match="floating-point"):
        rg.sparse.log_softmax(integer, 0)
    # the tensor stays usable
    assert rg.sparse.softmax(ours, 1).to_dense().shape == (3, 4)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"dim": 1}, {"dim": 0, "keepdim": True}, {"dim": (0, 1)}, {"dtype": "float64"}],
    ids=["all", "dim1", "dim0-keepdim", "both-dims", "dtype"],
)
def test_sum_of_a_sparse_tensor_matches_torch(kwargs):
    values_t, theirs, values_r, ours = sparse_pair(np.array(VALUES, dtype=np.float32))
    dtype = kwargs.pop("dtype", None)
    out_t = theirs.sum(**kwargs, **({"dtype": getattr(torch, dtype)} if dtype else {}))
    out_r = ours.sum(**kwargs, **({"dtype": getattr(rg, dtype)} if dtype else {}))
    assert out_r.is_sparse == out_t.is_sparse and tuple(out_r.shape) == tuple(out_t.shape)
    assert str(out_r.dtype).removeprefix("torch.") == str(out_t.dtype).removeprefix("torch.")
    dense_t = out_t.to_dense() if out_t.is_sparse else out_t
    dense_r = out_r.to_dense() if out_r.is_sparse else out_r
    np.testing.assert_allclose(dense_r.numpy(), dense_t.detach().numpy(), 1e-6)
    # (torch's backward of a sparse sum over some dims fails, "expand is unsupported for
    # Sparse tensors": the reference gradient is the dense sum's)
    reference = theirs.to_dense().sum(**kwargs) if out_t.is_sparse else dense_t
    reference.pow(2).sum().backward()
    grads = dense_r.pow(2).sum().backward()
    np.testing.assert_allclose(values_r.grad(grads).numpy(), values_t.grad.numpy(), 1e-6)
