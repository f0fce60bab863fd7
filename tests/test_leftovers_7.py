"""Leftover defects, each checked against torch 2.13 (the reference).

(The module docstring lists each defect once the file is complete.)
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

INF, NAN = float("inf"), float("nan")


def _same(ours: np.ndarray, theirs: np.ndarray, rtol: float = 0.0) -> None:
    """Equal elementwise, NaN where torch's is NaN (and only there)."""
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0, equal_nan=True)


# -- logcumsumexp: torch's gradient at infinities, second order over a size-1 dim -----------------
LOGCUMSUMEXP_ROWS = [
    [1.0, INF, 2.0],
    [1.0, -INF, 2.0],
    [-INF, -INF, 1.0],
    [INF, INF, 1.0],
    [-INF, 1.0, INF],
    [-INF, -INF, -INF],
    [0.5, -1.5, 3.0],
]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_logcumsumexp_value_and_gradient_match_torch_at_infinities(dtype):
    values = np.array(LOGCUMSUMEXP_ROWS, dtype=dtype)
    # weights of both signs and a zero: torch sums the positive and negative parts apart
    weights = np.array([[1.0, -2.0, 0.0], [0.5, 1.0, -1.0]] * 3 + [[1.0, 1.0, 1.0]], dtype)
    x = rg.tensor(values).require_grad()
    out = rg.logcumsumexp(x, 1)
    grads = (out * rg.tensor(weights)).sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    expected = torch.logcumsumexp(tx, 1)
    (expected * torch.tensor(weights)).sum().backward()
    rtol = 1e-6 if dtype == "float32" else 1e-13
    _same(out.numpy(), expected.detach().numpy(), rtol)
    _same(x.grad(grads).numpy(), tx.grad.numpy(), rtol)


def test_logcumsumexp_second_order_flows_over_a_size_one_dim():
    values = np.array([[0.5, -1.0, 2.0]])
    x = rg.tensor(values).require_grad()
    (g,) = rg.autograd.grad(rg.logcumsumexp(x, 0).sum(), [x], create_graph=True)
    assert g.requires_grad
    (gg,) = rg.autograd.grad((g * g * rg.tensor([[1.0, 2.0, 3.0]])).sum(), [x])
    tx = torch.tensor(values, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.logcumsumexp(tx, 0).sum(), [tx], create_graph=True)
    (tgg,) = torch.autograd.grad((tg * tg * torch.tensor([[1.0, 2.0, 3.0]])).sum(), [tx])
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-12, atol=1e-15)


def test_logcumsumexp_second_order_matches_torch_along_a_longer_dim():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(2, 5))
    upstream = rng.normal(size=(2, 5))
    x = rg.tensor(values).require_grad()
    (g,) = rg.autograd.grad(
        (rg.logcumsumexp(x, 1) * rg.tensor(upstream)).sum(), [x], create_graph=True
    )
    (gg,) = rg.autograd.grad((g * g).sum(), [x])
    tx = torch.tensor(values, requires_grad=True)
    (tg,) = torch.autograd.grad(
        (torch.logcumsumexp(tx, 1) * torch.tensor(upstream)).sum(), [tx], create_graph=True
    )
    (tgg,) = torch.autograd.grad((tg * tg).sum(), [tx])
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gg.numpy(), tgg.numpy(), rtol=1e-10)
