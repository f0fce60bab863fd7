"""backward(create_graph=True): second derivatives and Hessian-vector products against finite
differences of first derivatives, under both checkpointing strategies."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

STRATEGIES = [rg.NoCheckpointing(), rg.BalancedCheckpointing()]

# Scalar-valued functions of one (3, 4) float64 tensor.
FUNCTIONS = {
    "sin_times_x": lambda x: (x.sin() * x).sum(),
    "cube": lambda x: (x * x * x).sum(),
    "exp_tanh": lambda x: (x.tanh() * 0.5).exp().sum(),
    "sigmoid_sq": lambda x: x.sigmoid().square().sum(),
    "gelu": lambda x: x.gelu().sum(),
    "silu_softplus": lambda x: (x.silu() + x.softplus()).sum(),
    "log_softmax": lambda x: (x.log_softmax(1) * x).sum(),
    "softmax": lambda x: (x.softmax(0) * x.cos()).sum(),
    "div_sqrt": lambda x: (x / (x.square() + 1.0).sqrt()).sum(),
    "matmul_chain": lambda x: (x @ x.transpose()).tanh().sum(),
    "norm_like": lambda x: (
        ((x - x.mean_dim(1)) / ((x - x.mean_dim(1)).square().mean_dim(1) + 1e-3).sqrt()).sin().sum()
    ),
    "prod_dim": lambda x: (x.prod_dim(1) * 0.5).sum(),
    "cumsum_pow": lambda x: (x.cumsum(1).square() * x).sum(),
    "erf_atan": lambda x: (x.erf() * x.atan()).sum(),
    "max_mix": lambda x: (x.max_dim(1) * x).sum(),
    "powf": lambda x: ((x.abs() + 0.5).powf(x * 0.3)).sum(),
}


def _gradient(f, array, strategy):
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        x = rg.tensor(array).require_grad()
        return x.grad(f(x).backward()).numpy()


def _hvp(f, array, vector, strategy):
    """d/dx (grad f(x) . v), through create_graph."""
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        x = rg.tensor(array).require_grad()
        grads = f(x).backward(create_graph=True)
        g = x.grad(grads)
        assert g.requires_grad, "a create_graph gradient must itself be tracked"
        return x.grad((g * rg.tensor(vector)).sum().backward()).numpy()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["none", "balanced"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_hessian_vector_product_against_finite_differences(name, strategy):
    f = FUNCTIONS[name]
    rng = np.random.default_rng(len(name))
    array = rng.uniform(-1.2, 1.2, (3, 4))
    vector = rng.uniform(-1.0, 1.0, (3, 4))
    eps = 1e-5
    expected = (
        _gradient(f, array + eps * vector, strategy) - _gradient(f, array - eps * vector, strategy)
    ) / (2 * eps)
    np.testing.assert_allclose(_hvp(f, array, vector, strategy), expected, rtol=1e-5, atol=1e-7)


def test_hvp_identical_under_both_strategies():
    rng = np.random.default_rng(7)
    array, vector = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (3, 4))
    for name, f in FUNCTIONS.items():
        a, b = (_hvp(f, array, vector, s) for s in STRATEGIES)
        assert np.array_equal(a, b), name


def test_full_hessian_of_two_variable_function():
    # f(x, y) = x^2 y + sin(x y): the Hessian entries in closed form.
    x = rg.tensor(0.7, dtype="float64").require_grad()
    y = rg.tensor(-1.3, dtype="float64").require_grad()
    f = x * x * y + (x * y).sin()
    grads = f.backward(create_graph=True)
    gx, gy = x.grad(grads), y.grad(grads)
    hxx_grads = gx.backward(retain_graph=True)
    hyy = y.grad(gy.backward())
    xv, yv = 0.7, -1.3
    assert x.grad(hxx_grads).item() == pytest.approx(2 * yv - yv * yv * np.sin(xv * yv), rel=1e-12)
    assert y.grad(hxx_grads).item() == pytest.approx(
        2 * xv + np.cos(xv * yv) - xv * yv * np.sin(xv * yv), rel=1e-12
    )
    assert hyy.item() == pytest.approx(-xv * xv * np.sin(xv * yv), rel=1e-12)


def test_third_derivative():
    x = rg.tensor([0.3, -1.1, 2.0], dtype="float64").require_grad()
    first = x.grad((x.sin()).sum().backward(create_graph=True))
    second = x.grad(first.sum().backward(create_graph=True))
    third = x.grad(second.sum().backward())
    np.testing.assert_allclose(third.numpy(), -np.cos([0.3, -1.1, 2.0]), rtol=1e-12)


def test_create_graph_keeps_the_first_graph_usable():
    x = rg.tensor([1.0, 2.0], dtype="float64").require_grad()
    y = (x * x * x).sum()
    y.backward(create_graph=True)
    again = x.grad(y.backward())  # create_graph implies retain_graph
    np.testing.assert_allclose(again.numpy(), [3.0, 12.0])


def test_second_derivative_of_function_of_untracked_constant():
    c = rg.tensor([2.0, 3.0], dtype="float64")
    x = rg.tensor([0.5, -0.5], dtype="float64").require_grad()
    g = x.grad((c * x.exp()).sum().backward(create_graph=True))
    h = x.grad(g.sum().backward())
    np.testing.assert_allclose(h.numpy(), [2.0 * np.exp(0.5), 3.0 * np.exp(-0.5)], rtol=1e-12)
