"""Gaps left by earlier rounds, each checked against torch 2.13 (the reference).

- ``gather``/``scatter``/``scatter_add``/``scatter_reduce`` with an index of no entries but
  another shape than the input's (``rg.zeros(3, 2).gather(1, rg.zeros(4, 0, dtype=rg.int64))``)
  raised a ``ShapeError``; torch checks neither the shape nor the dtype of an empty index:
  gather returns an empty tensor of the index's shape, scatter a copy of the input.
- ``rg.linalg.cond`` of empty matrices raised an index error; torch returns 0 for each (untracked,
  of the batch shape), after its check of the order (and of squareness for "fro"/"nuc").
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

# -- gather/scatter with an empty index ------------------------------------------------------------
EMPTY_INDEX_SHAPES = [(4, 0), (0, 5), (0,), (0, 2, 3)]


@pytest.mark.parametrize("shape", EMPTY_INDEX_SHAPES)
def test_gather_with_an_empty_index_of_any_shape(shape):
    weights = np.arange(6.0).reshape(3, 2)
    xt = torch.tensor(weights, requires_grad=True)
    out_t = xt.gather(1, torch.zeros(shape, dtype=torch.int64))
    out_t.sum().backward()
    xr = rg.tensor(weights, requires_grad=True)
    out_r = xr.gather(1, rg.zeros(*shape, dtype=rg.int64))
    assert out_r.shape == tuple(out_t.shape)
    assert out_r.dtype == rg.float64
    np.testing.assert_array_equal(xr.grad(out_r.sum().backward()).numpy(), xt.grad.numpy())


def test_gather_with_an_empty_index_keeps_the_dim_check():
    with pytest.raises(rg.ShapeError, match="gather: dimension 5"):
        rg.zeros(3, 2).gather(5, rg.zeros(4, 0, dtype=rg.int64))


@pytest.mark.parametrize("shape", EMPTY_INDEX_SHAPES)
@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
def test_scatter_with_an_empty_index_is_a_copy(op, shape):
    weights = np.arange(6.0).reshape(3, 2)
    scale = np.linspace(1.0, 2.0, 6).reshape(3, 2)
    xt = torch.tensor(weights, requires_grad=True)
    src_t = torch.ones(shape, dtype=torch.float64, requires_grad=True)
    out_t = getattr(xt, op)(1, torch.zeros(shape, dtype=torch.int64), src_t)
    (out_t * torch.tensor(scale)).sum().backward()
    xr = rg.tensor(weights, requires_grad=True)
    src_r = rg.ones(*shape, dtype=rg.float64, requires_grad=True)
    out_r = getattr(xr, op)(1, rg.zeros(*shape, dtype=rg.int64), src_r)
    np.testing.assert_array_equal(out_r.numpy(), out_t.detach().numpy())
    grads = (out_r * rg.tensor(scale)).sum().backward()
    np.testing.assert_array_equal(xr.grad(grads).numpy(), xt.grad.numpy())
    np.testing.assert_array_equal(src_r.grad(grads).numpy(), src_t.grad.numpy())


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_with_an_empty_index(reduce):
    weights = np.arange(6.0).reshape(3, 2)
    expected = torch.tensor(weights).scatter_reduce(
        1, torch.zeros(4, 0, dtype=torch.int64), torch.ones(5, 5, 5, dtype=torch.float64), reduce
    )
    out = rg.tensor(weights).scatter_reduce(
        1, rg.zeros(4, 0, dtype=rg.int64), rg.ones(5, 5, 5, dtype=rg.float64), reduce
    )
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_scatter_of_a_value_with_an_empty_index():
    expected = torch.arange(6.0).reshape(3, 2).scatter(1, torch.zeros(0, 3, dtype=torch.int64), 7.0)
    out = rg.arange(6.0).reshape(3, 2).scatter(1, rg.zeros(0, 3, dtype=rg.int64), 7.0)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


# -- linalg.cond of empty matrices -----------------------------------------------------------------
COND_ORDERS = [None, 2, -2, "fro", "nuc", 1, -1, float("inf"), float("-inf")]


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3), (0, 3)])
@pytest.mark.parametrize("p", COND_ORDERS)
def test_cond_of_empty_matrices(shape, p):
    try:
        expected = torch.linalg.cond(torch.zeros(shape, dtype=torch.float64), p)
    except RuntimeError:  # torch checks squareness first for the string orders
        with pytest.raises(rg.ShapeError, match=r"linalg\.cond: A must be batches of square"):
            rg.linalg.cond(rg.zeros(*shape, dtype=rg.float64), p)
        return
    out = rg.linalg.cond(rg.zeros(*shape, dtype=rg.float64, requires_grad=True), p)
    assert out.shape == tuple(expected.shape)
    assert out.dtype == rg.float64
    assert out.requires_grad == expected.requires_grad
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_cond_of_an_empty_matrix_still_checks_the_order():
    with pytest.raises(rg.InvalidArgumentError, match=r"linalg\.cond: order 3 is not supported"):
        rg.linalg.cond(rg.zeros(0, 0), 3)
