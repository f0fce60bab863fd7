"""Leftovers closed against torch 2.13 (round 23): ``y.data = t`` of another dtype or shape on
a tensor computed in the graph, jacfwd/hessian's randomness, ``device("cpu:0")``,
``expand()`` without sizes, ``Module.to(float)`` of complex parameters. Every expected
behaviour is torch's, probed side by side."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import retrograd as rg


def _grad(lib, x, out):
    """x's gradient after ``out.backward()``, torch's way or retrograd's (a Gradients value)."""
    if lib is torch:
        out.backward()
        return x.grad.numpy()
    return x.grad(out.backward()).numpy()


# -- (1) y.data = t on a tensor computed in the graph --------------------------------------------
@pytest.mark.parametrize("lib", [torch, rg])
def test_data_set_to_another_dtype_keeps_the_graph_as_torch(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.data = lib.tensor([1.0, 2.0, 4.0], dtype=lib.float64)
    assert y.dtype == lib.float64 and y.requires_grad and not y.is_leaf
    assert y.grad_fn is not None
    out = (y * 3).sum()
    assert out.dtype == lib.float64 and out.requires_grad
    np.testing.assert_array_equal(out.detach().numpy(), 21.0)
    # the gradient reaches x cast back to its float32, through y's old grad_fn (x * 2)
    g = _grad(lib, x, out)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [6.0, 6.0, 6.0])


@pytest.mark.parametrize("lib", [torch, rg])
def test_data_set_to_a_shape_the_old_expands_to_sums_the_gradient_as_torch(lib):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.data = lib.ones(2, 3)
    assert tuple(y.shape) == (2, 3) and y.requires_grad and y.grad_fn is not None
    np.testing.assert_array_equal(_grad(lib, x, (y * 3).sum()), [12.0, 12.0, 12.0])


@pytest.mark.parametrize("lib", [torch, rg])
@pytest.mark.parametrize(("shape", "total"), [((2,), 30.0), ((), 15.0)])
def test_data_set_to_an_incompatible_shape_fails_at_backward_as_torch(lib, shape, total):
    x = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.data = lib.full(shape, 5.0)
    out = (y * 3).sum()  # the forward goes on with the new values
    np.testing.assert_array_equal(out.detach().numpy(), total)
    got = re.escape(str(list(shape)))
    with pytest.raises(
        RuntimeError, match=rf"invalid gradient at index 0 - got {got} but expected"
    ):
        out.backward()
