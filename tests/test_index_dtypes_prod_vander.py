"""Found by the third round of real-program ports: torch's refusal of a source of another dtype
in the index-writing ops (retrograd promoted silently), ``scatter_reduce(..., "prod")`` and
``rg.vander``. Expected values are torch's, or by hand where torch's own gradient fails."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

INDEX = [0, 2]
WRITES = {
    "index_add": lambda x, i, s: x.index_add(0, i, s),
    "index_add_": lambda x, i, s: x.index_add_(0, i, s),
    "index_copy": lambda x, i, s: x.index_copy(0, i, s),
    "scatter_add": lambda x, i, s: x.scatter_add(0, i, s),
    "scatter": lambda x, i, s: x.scatter(0, i, s),
    "scatter_reduce": lambda x, i, s: x.scatter_reduce(0, i, s, "sum"),
    "put_": lambda x, i, s: x.put_(i, s),
    "masked_scatter": lambda x, i, s: x.masked_scatter(x > -1, s.repeat(2)),
}


@pytest.mark.parametrize("name", list(WRITES))
def test_a_source_of_another_dtype_is_refused_as_torch_refuses_it(name):
    write = WRITES[name]
    with pytest.raises(RuntimeError):
        write(torch.zeros(3, dtype=torch.float64), torch.tensor(INDEX), torch.ones(2))
    with pytest.raises(rg.DTypeError, match="same dtype"):
        write(rg.zeros(3, dtype=rg.float64), rg.tensor(INDEX), rg.ones(2))
    same = write(rg.zeros(3, dtype=rg.float64), rg.tensor(INDEX), rg.ones(2, dtype=rg.float64))
    expected = write(
        torch.zeros(3, dtype=torch.float64), torch.tensor(INDEX), torch.ones(2).double()
    )
    np.testing.assert_array_equal(same.numpy(), expected.numpy())


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_prod_matches_torch_with_its_gradient(dim, include_self):
    rng = np.random.default_rng(dim + 2 * include_self)
    a = rng.standard_normal((3, 4))
    src = rng.standard_normal((5, 4) if dim == 0 else (3, 6))
    a[0, 1], src[1, 2] = 0.0, 0.0  # zeros: the gradient is the product of the other factors
    index = rng.integers(0, a.shape[dim], src.shape)
    weights = rng.standard_normal(a.shape)
    x, s = rg.tensor(a).require_grad(), rg.tensor(src).require_grad()
    out = x.scatter_reduce(dim, rg.tensor(index), s, "prod", include_self=include_self)
    grads = (out * rg.tensor(weights)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    ts = torch.tensor(src, requires_grad=True)
    t_out = tx.scatter_reduce(dim, torch.tensor(index), ts, "prod", include_self=include_self)
    gx, gs = torch.autograd.grad((t_out * torch.tensor(weights)).sum(), (tx, ts))
    np.testing.assert_array_equal(out.numpy(), t_out.detach().numpy())
    np.testing.assert_allclose(x.grad(grads).numpy(), gx.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s.grad(grads).numpy(), gs.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("increasing", [False, True])
@pytest.mark.parametrize("n", [None, 0, 1, 3, 6])
def test_vander_matches_torch_and_its_gradient_the_powers_rule(n, increasing):
    a = np.array([1.5, -2.0, 0.0, 3.0])
    x = rg.tensor(a).require_grad()
    out = rg.vander(x, n, increasing)
    expected = torch.vander(torch.tensor(a), n, increasing).numpy()
    np.testing.assert_array_equal(out.numpy(), expected)
    columns = out.shape[1]
    if not columns:
        return
    # torch's own backward of vander fails (it writes in place what it saved), so by hand:
    # d/dx sum_j w_j x**p_j = sum_j w_j p_j x**(p_j - 1)
    powers = np.arange(columns) if increasing else np.arange(columns)[::-1]
    weights = np.random.default_rng(0).standard_normal(out.shape)
    grads = (out * rg.tensor(weights)).sum().backward()
    slopes = np.where(powers > 0, a[:, None] ** np.maximum(powers - 1, 0), 0.0)
    np.testing.assert_allclose(
        x.grad(grads).numpy(), (weights * powers * slopes).sum(1), rtol=1e-13, atol=1e-13
    )


def test_vander_of_ints_and_bools_and_bad_arguments():
    assert rg.vander(rg.tensor([1, 2, 3])).tolist() == [[1, 1, 1], [4, 2, 1], [9, 3, 1]]
    assert rg.vander(rg.tensor([True, False])).dtype == "int64"  # torch's promotion
    with pytest.raises(rg.ShapeError, match="1-d"):
        rg.vander(rg.ones((2, 2)))
    with pytest.raises(rg.InvalidArgumentError, match="non-negative"):
        rg.vander(rg.ones(2), -1)
