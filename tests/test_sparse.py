"""Sparse COO tensors (tensor/sparse_coo.py): construction, coalescing, the products with dense
matrices and their gradients, against torch and finite differences in float64; refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

INDICES = [[0, 1, 1, 0, 2], [2, 0, 2, 2, 1]]  # (0, 2) twice: uncoalesced
VALUES = [1.5, -2.0, 3.0, 0.5, 4.0]


def _dense(rows: int = 3, cols: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols))


def _pair(requires_grad: bool = True):
    ours_v = rg.tensor(VALUES, dtype="float64").requires_grad_(requires_grad)
    theirs_v = torch.tensor(VALUES, dtype=torch.float64, requires_grad=requires_grad)
    ours = rg.sparse_coo_tensor(rg.tensor(INDICES), ours_v, (3, 3))
    theirs = torch.sparse_coo_tensor(torch.tensor(INDICES), theirs_v, (3, 3))
    return ours, ours_v, theirs, theirs_v


def test_construction_reads_as_torch():
    ours, _, theirs, _ = _pair(False)
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.dtype == "float64"
    assert ours.is_sparse and ours.layout is rg.sparse_coo and ours._nnz() == theirs._nnz()
    assert ours.is_coalesced() == theirs.is_coalesced() is False
    np.testing.assert_array_equal(ours._indices().numpy(), theirs._indices().numpy())
    np.testing.assert_array_equal(ours._values().numpy(), theirs._values().numpy())
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())
    with pytest.raises(rg.InvalidArgumentError, match="uncoalesced"):
        ours.indices()
    ours_c, theirs_c = ours.coalesce(), theirs.coalesce()
    assert ours_c.is_coalesced()
    np.testing.assert_array_equal(ours_c.indices().numpy(), theirs_c.indices().numpy())
    np.testing.assert_array_equal(ours_c.values().numpy(), theirs_c.values().numpy())


def test_dtype_and_size_are_inferred_as_torch():
    for values in ([1, 2, 3, 4, 5], VALUES, [True, False, True, True, False]):
        ours = rg.sparse_coo_tensor(INDICES, values)
        theirs = torch.sparse_coo_tensor(INDICES, values)
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "")
        assert tuple(ours.shape) == tuple(theirs.shape) == (3, 3)
    assert rg.sparse_coo_tensor(INDICES, VALUES, dtype=rg.float64).dtype == "float64"


def test_legacy_constructor_and_isinstance():
    i, v = rg.tensor(INDICES), rg.tensor(VALUES)
    s = rg.sparse.FloatTensor(i, v, rg.Size([3, 4]))
    assert tuple(s.shape) == (3, 4) and isinstance(s, rg.sparse.FloatTensor)
    assert not isinstance(s, rg.sparse.DoubleTensor) and not isinstance(v, rg.sparse.FloatTensor)
    assert tuple(rg.sparse.FloatTensor(i, v).shape) == (3, 3)
    empty = rg.sparse.FloatTensor(2, 3)
    theirs = torch.sparse.FloatTensor(2, 3)
    assert tuple(empty.shape) == tuple(theirs.shape) and empty._nnz() == 0
    np.testing.assert_array_equal(empty.to_dense().numpy(), theirs.to_dense().numpy())


def test_to_sparse_round_trip_and_gradient():
    data = np.array([[0.0, 2.0, 0.0], [-1.0, 0.0, 3.0]])
    x = rg.tensor(data).requires_grad_()
    tx = torch.tensor(data, requires_grad=True)
    ours, theirs = x.to_sparse(), tx.to_sparse()
    assert ours.is_coalesced() and theirs.is_coalesced()
    assert x.to_sparse_coo().is_sparse and ours.to_sparse() is ours and ours.to_sparse_coo() is ours
    np.testing.assert_array_equal(ours.indices().numpy(), theirs.indices().numpy())
    np.testing.assert_array_equal(ours.values().numpy(), theirs.values().detach().numpy())
    weights = np.arange(6.0).reshape(3, 2)
    grads = (rg.sparse.mm(ours, rg.tensor(weights)) ** 2).sum().backward()
    (torch.sparse.mm(theirs, torch.tensor(weights)) ** 2).sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), tx.grad.numpy())


@pytest.mark.parametrize(
    "product",
    [
        lambda lib, s, d: lib.sparse.mm(s, d),
        lambda lib, s, d: lib.spmm(s, d),
        lambda lib, s, d: lib.mm(s, d),
        lambda lib, s, d: lib.matmul(s, d),
        lambda lib, s, d: s @ d,
        lambda lib, s, d: (d.t() @ s.t()).t(),
        lambda lib, s, d: lib.mm(d.t(), s.t()).t(),
        lambda lib, s, d: (s * 2.5) @ d,
        lambda lib, s, d: s.coalesce() @ d / 3,
    ],
    ids=["sparse.mm", "spmm", "mm", "matmul", "@", "dense@sparse", "mm(dense,sparse)",
         "scaled", "coalesced"],
)  # fmt: skip
def test_products_values_and_gradients_match_torch(product):
    ours, ours_v, theirs, theirs_v = _pair()
    dense = _dense()
    d = rg.tensor(dense).requires_grad_()
    td = torch.tensor(dense, requires_grad=True)
    out, tout = product(rg, ours, d), product(torch, theirs, td)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-12)
    grads = (out * out).sum().backward()
    (tout * tout).sum().backward()
    np.testing.assert_allclose(ours_v.grad(grads).numpy(), theirs_v.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(d.grad(grads).numpy(), td.grad.numpy(), rtol=1e-12)


def test_dense_plus_or_minus_sparse_is_torchs_dense_result():
    ours, ours_v, theirs, theirs_v = _pair()
    dense = _dense(3, 3, seed=2)
    for combine in (lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a.add(b)):
        out = combine(rg.tensor(dense), ours)
        tout = combine(torch.tensor(dense), theirs)
        assert not out.is_sparse and not tout.is_sparse
        np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy())
    grads = (rg.eye(3) - ours).pow(2).sum().backward()  # (a float32 eye: promoted, as torch's)
    (torch.eye(3) - theirs).pow(2).sum().backward()
    np.testing.assert_allclose(ours_v.grad(grads).numpy(), theirs_v.grad.numpy())


def test_addmm_of_a_sparse_matrix_matches_torch():
    ours, ours_v, theirs, theirs_v = _pair()
    base, dense = _dense(3, 4, seed=4), _dense(3, 4, seed=5)
    out = rg.sparse.addmm(rg.tensor(base), ours, rg.tensor(dense), beta=0.5, alpha=2.0)
    tout = torch.sparse.addmm(torch.tensor(base), theirs, torch.tensor(dense), beta=0.5, alpha=2.0)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-12)
    grads = out.sum().backward()
    tout.sum().backward()
    np.testing.assert_allclose(ours_v.grad(grads).numpy(), theirs_v.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("coalesced", [False, True])
def test_sparse_plus_sparse_matches_torch(coalesced):
    ours, ours_v, theirs, theirs_v = _pair()
    if coalesced:
        ours, theirs = ours.coalesce(), theirs.coalesce()
    for combine in (lambda a: a + a.t(), lambda a: a - 2 * a.t(), lambda a: a.add(a, alpha=3)):
        out, tout = combine(ours), combine(theirs)
        assert out.is_sparse and out.is_coalesced() == tout.is_coalesced()
        np.testing.assert_allclose(
            out.to_dense().detach().numpy(), tout.to_dense().detach().numpy()
        )
        if tout.is_coalesced():
            np.testing.assert_array_equal(out.indices().numpy(), tout.indices().numpy())
    dense = _dense(3, 2, seed=6)
    grads = ((ours - ours.t()) @ rg.tensor(dense)).pow(2).sum().backward()
    ((theirs - theirs.t()) @ torch.tensor(dense)).pow(2).sum().backward()
    np.testing.assert_allclose(ours_v.grad(grads).numpy(), theirs_v.grad.numpy(), rtol=1e-12)
    with pytest.raises(rg.ShapeError, match="sizes of 'self' and 'other' to match"):
        ours + rg.sparse_coo_tensor([[0], [0]], [1.0], (2, 2), dtype=rg.float64)


def test_matrix_vector_product_matches_torch():
    ours, _, theirs, _ = _pair(False)
    vec = [1.0, -2.0, 0.5]
    np.testing.assert_allclose(
        (ours @ rg.tensor(vec, dtype="float64")).numpy(),
        (theirs @ torch.tensor(vec, dtype=torch.float64)).numpy(),
    )


def _finite_difference(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[i] += eps
        down[i] -= eps
        grad[i] = (f(up) - f(down)) / (2 * eps)
    return grad


def test_gradients_match_finite_differences():
    dense = _dense()
    values = np.array(VALUES)

    def loss(v: np.ndarray, d: np.ndarray) -> float:
        s = rg.sparse_coo_tensor(rg.tensor(INDICES), rg.tensor(v), (3, 3))
        return float((rg.sparse.mm(s, rg.tensor(d)).tanh() ** 2).sum().item())

    v = rg.tensor(values).requires_grad_()
    d = rg.tensor(dense).requires_grad_()
    out = rg.sparse.mm(rg.sparse_coo_tensor(rg.tensor(INDICES), v, (3, 3)), d)
    grads = (out.tanh() ** 2).sum().backward()
    np.testing.assert_allclose(
        v.grad(grads).numpy(), _finite_difference(lambda x: loss(x, dense), values), atol=1e-7
    )
    np.testing.assert_allclose(
        d.grad(grads).numpy(), _finite_difference(lambda x: loss(values, x), dense), atol=1e-7
    )


def test_a_sparse_leaf_gets_a_sparse_gradient_at_its_nonzeros():
    dense = _dense()
    ours = rg.sparse_coo_tensor(INDICES, VALUES, (3, 3), dtype=rg.float64, requires_grad=True)
    theirs = torch.sparse_coo_tensor(
        INDICES, VALUES, (3, 3), dtype=torch.float64, requires_grad=True
    )
    assert ours.requires_grad and ours.is_leaf
    grads = (rg.sparse.mm(ours, rg.tensor(dense)) ** 2).sum().backward()
    (torch.sparse.mm(theirs, torch.tensor(dense)) ** 2).sum().backward()
    grad = ours.grad(grads)
    assert grad.is_sparse and grad.is_coalesced() and theirs.grad.is_sparse
    np.testing.assert_array_equal(grad.indices().numpy(), theirs.grad.coalesce().indices().numpy())
    np.testing.assert_allclose(grad.values().numpy(), theirs.grad.coalesce().values().numpy())


def test_to_dense_and_sparse_sum_gradients_match_torch():
    ours, ours_v, theirs, theirs_v = _pair()
    weights = _dense(3, 3, seed=1)
    grads = (ours.to_dense() * rg.tensor(weights)).sum().backward()
    (theirs.to_dense() * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(ours_v.grad(grads).numpy(), theirs_v.grad.numpy())
    total = rg.sparse.sum(ours)
    np.testing.assert_allclose(total.item(), torch.sparse.sum(theirs).item())
    for dim in (0, 1, (0, 1)):
        o, t = rg.sparse.sum(ours, dim), torch.sparse.sum(theirs, dim)
        o = o.to_dense() if getattr(o, "is_sparse", False) else o
        t = t.to_dense() if t.is_sparse else t
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy())


def test_is_tensor_and_is_floating_point_as_torch():
    ours, _, theirs, _ = _pair(False)
    assert rg.is_tensor(ours) and torch.is_tensor(theirs)
    assert ours.is_floating_point() == theirs.is_floating_point() is True
    assert rg.sparse_coo_tensor(INDICES, [1, 2, 3, 4, 5]).is_floating_point() is False
    assert isinstance(ours, rg.Tensor) and isinstance(theirs, torch.Tensor)
    assert not isinstance(ours, rg.nn.Parameter) and not isinstance(theirs, torch.nn.Parameter)


def test_transpose_and_moves():
    ours, _, theirs, _ = _pair(False)
    np.testing.assert_array_equal(ours.t().to_dense().numpy(), theirs.t().to_dense().numpy())
    assert ours.t().is_coalesced() == theirs.t().is_coalesced()
    assert ours.float().dtype == "float32" and ours.to("cpu").dtype == "float64"
    assert ours.double().cpu().detach().shape == (3, 3) and ours.size(1) == 3


def test_float32_products_on_the_kernel_path_match_torch():
    rng = np.random.default_rng(3)
    n, f, nnz = 40, 7, 200
    idx = rng.integers(0, n, size=(2, nnz))
    vals = rng.standard_normal(nnz).astype(np.float32)
    dense = rng.standard_normal((n, f)).astype(np.float32)
    out = rg.sparse.mm(rg.sparse_coo_tensor(idx, vals, (n, n)), rg.tensor(dense))
    theirs = torch.sparse.mm(
        torch.sparse_coo_tensor(torch.tensor(idx), torch.tensor(vals), (n, n)), torch.tensor(dense)
    )
    np.testing.assert_allclose(out.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)


def test_integer_products_match_torch():
    ours = rg.sparse_coo_tensor(INDICES, [1, 2, 3, 4, 5], (3, 3))
    theirs = torch.sparse_coo_tensor(INDICES, [1, 2, 3, 4, 5], (3, 3))
    dense = [[1, 2], [3, 4], [5, 6]]
    np.testing.assert_array_equal(
        (ours @ rg.tensor(dense)).numpy(), torch.matmul(theirs, torch.tensor(dense)).numpy()
    )


# -- bad input -------------------------------------------------------------------------------------
def test_bad_construction_is_refused_by_name():
    with pytest.raises(rg.IndexOutOfRangeError, match="sparse_coo_tensor: size is inconsistent"):
        rg.sparse_coo_tensor(INDICES, VALUES, (2, 3))
    with pytest.raises(rg.IndexOutOfRangeError, match="negative"):
        rg.sparse_coo_tensor([[0, -1]], [1.0, 2.0], (3,))
    with pytest.raises(rg.ShapeError, match="same number of elements"):
        rg.sparse_coo_tensor(INDICES, VALUES[:3], (3, 3))
    with pytest.raises(rg.ShapeError, match="number of dimensions"):
        rg.sparse_coo_tensor(INDICES, VALUES, (3, 3, 3))
    with pytest.raises(rg.ShapeError, match="hybrid"):
        rg.sparse_coo_tensor(INDICES, rg.ones(5, 2), (3, 3))
    with pytest.raises(rg.DTypeError, match="int64"):
        rg.sparse_coo_tensor(rg.tensor(INDICES, dtype="float32"), VALUES)
    with pytest.raises(rg.InvalidArgumentError, match="hybrid"):
        rg.ones(2, 2).to_sparse(1)


def test_bad_products_are_refused_by_name():
    ours, _, _, _ = _pair(False)
    with pytest.raises(rg.ShapeError, match=r"sparse\.mm: mat1 and mat2 shapes"):
        rg.sparse.mm(ours, rg.ones(4, 2, dtype="float64"))
    with pytest.raises(rg.DTypeError, match="dtype"):
        rg.sparse.mm(ours, rg.ones(3, 2))  # float32 with a float64 sparse: torch refuses too
    with pytest.raises(rg.InvalidArgumentError, match="two sparse"):
        ours @ ours
    with pytest.raises(rg.ShapeError, match="spmm"):
        rg.spmm(rg.sparse_coo_tensor([[0], [0], [0]], [1.0], (1, 1, 1)), rg.ones(1, 1))


@pytest.mark.parametrize(
    "call",
    [
        ("relu", lambda s: s.relu()),
        ("relu", lambda s: rg.relu(s)),
        ("add", lambda s: s + rg.ones(3, 3, dtype="float64")),
        ("add", lambda s: s.add(rg.ones(3, 3, dtype="float64"))),
        ("sub", lambda s: s - rg.ones(3, 3, dtype="float64")),
        ("indexing", lambda s: s[0]),
        ("mean", lambda s: s.mean()),
        ("view", lambda s: s.view(9)),
        ("mul", lambda s: s * rg.ones(3, 3)),
        ("sparse.softmax of a dense tensor", lambda s: rg.sparse.softmax(s.to_dense(), 0)),
        ("sparse.sum", lambda s: rg.sparse.sum(s.to_dense())),
    ],
    ids=lambda call: call[0] if isinstance(call, tuple) else None,
)
def test_everything_else_is_refused_by_name(call):
    name, f = call
    ours, values, _, _ = _pair()
    with pytest.raises(rg.InvalidArgumentError, match=name):
        f(ours)
    assert ours._nnz() == 5 and values.requires_grad  # left usable
    assert hasattr(ours, "relu") is False and not hasattr(ours, "no_such_name")


def test_deepcopy_copies_and_copy_shares():
    import copy

    ours, values, _, _ = _pair()
    deep, shallow = copy.deepcopy(ours), copy.copy(ours)
    assert deep._values() is not values and shallow._values() is values
    np.testing.assert_array_equal(
        deep.to_dense().detach().numpy(), ours.to_dense().detach().numpy()
    )
    values.data.mul_(2.0)
    assert deep._values().detach().numpy()[0] == VALUES[0]


def test_saving_is_refused_and_writes_nothing(tmp_path):
    ours, _, _, _ = _pair(False)
    with pytest.raises(rg.DTypeError, match=r"saving .*sparse COO"):
        rg.save({"adj": ours}, tmp_path / "adj.pt")
    assert not (tmp_path / "adj.pt").exists()
