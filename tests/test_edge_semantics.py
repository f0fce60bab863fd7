"""Edge cases found by fuzzing ops against PyTorch: 0-d and empty tensors through backward,
integer powers, and integer division by zero. Each against torch (float64 for gradients).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def grads_against_torch(rg_fn, torch_fn, array):
    x = rg.tensor(array).require_grad()
    t = torch.tensor(array, requires_grad=True)
    out, expected = rg_fn(x), torch_fn(t)
    weights = np.random.default_rng(0).standard_normal(tuple(expected.shape))
    got = x.grad((out * rg.tensor(weights)).sum().backward())
    (expected * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-15, atol=0)
    assert got.shape == tuple(t.grad.shape)
    np.testing.assert_allclose(got.numpy(), t.grad.numpy(), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "name, rg_fn, torch_fn",
    [
        ("relu", lambda x: x.relu(), torch.relu),
        ("gelu", lambda x: x.gelu(), torch.nn.functional.gelu),
        ("tanh", lambda x: x.tanh(), torch.tanh),
        ("abs", lambda x: x.abs(), torch.abs),
    ],
)
def test_unary_ops_of_a_0d_tensor_backpropagate(name, rg_fn, torch_fn):
    grads_against_torch(rg_fn, torch_fn, np.array(0.75))
    grads_against_torch(rg_fn, torch_fn, np.array(-0.5))


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
def test_products_over_empty_dimensions_backpropagate(shape):
    array = np.ones(shape)
    grads_against_torch(lambda x: x.prod(), torch.prod, array)
    grads_against_torch(lambda x: x.prod_dim(-1), lambda t: t.prod(-1, keepdim=True), array)


def test_integer_powers_stay_integers_as_in_torch():
    a_np, b_np = np.array([-7, -3, 0, 3, 7]), np.array([2, 0, 3, 1, 5])
    a, b = rg.tensor(a_np), rg.tensor(b_np)
    ta, tb = torch.tensor(a_np), torch.tensor(b_np)
    for ours, theirs in [
        (a**2, ta**2),
        (a**b, ta**tb),
        (2**b, 2**tb),
        (a.pow(3), ta.pow(3)),
        ((a > 0) ** 2, (ta > 0) ** 2),
        (a**2.0, ta**2.0),  # a float exponent: float32
        (a**0.5, ta**0.5),
    ]:
        assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch."), (ours, theirs)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_integers_to_negative_integer_powers_are_refused():
    with pytest.raises(rg.InvalidArgumentError, match="negative integer powers"):
        rg.tensor([-7, -3, 0, 3, 7]) ** -1


def test_integer_tensor_exponents_below_zero_follow_torch():
    """torch refuses only a negative Python exponent; a tensor of exponents gives its
    integer powers: 1 for a base of 1, +-1 for -1 by parity, 0 for any other base."""
    torch = pytest.importorskip("torch")
    base, exponent = [-7, -1, 0, 1, 3, -1], [1, -3, -1, -5, -1, -2]
    ours = rg.tensor(base) ** rg.tensor(exponent)
    theirs = torch.tensor(base) ** torch.tensor(exponent)
    assert ours.dtype == "int64"
    assert ours.tolist() == theirs.tolist() == [-7, -1, 0, 1, 0, 1]


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a // 0,
        lambda a: a % 0,
        lambda a: a // rg.tensor([1, 2, 0, 1, 1]),
        lambda a: a % rg.tensor([1, 2, 0, 1, 1]),
        lambda a: a.remainder(0),
        lambda a: a.div(rg.zeros_like(a), rounding_mode="trunc"),
        lambda a: 7 % rg.tensor([0, 1]),
    ],
)
def test_integer_division_by_zero_is_an_error(call):
    a = rg.tensor([-7, -3, 0, 3, 7])
    with pytest.raises(rg.InvalidArgumentError, match="integer division by zero"):
        call(a)
    np.testing.assert_array_equal((a // 2).numpy(), np.array([-7, -3, 0, 3, 7]) // 2)


def test_float_division_by_zero_follows_ieee_as_torch():
    a = np.array([-1.0, 0.0, 2.0])
    ours = (rg.tensor(a) // 0).numpy()
    theirs = (torch.tensor(a) // 0).numpy()
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize(
    "values, dtype, fill",
    [
        ([1, 2, 3], "int64", 1.5),
        ([1, 2, 3], "int64", -2.7),
        ([1, 2, 3], "int64", 4),
        ([True, False, True], "bool", 0.0),
        ([True, False, True], "bool", 2),
        ([1.0, 2.0, 3.0], "float32", 7),
    ],
)
def test_masked_fill_keeps_the_tensors_dtype_as_torch(values, dtype, fill):
    mask = [True, False, True]
    ours = rg.tensor(values, dtype=dtype).masked_fill(rg.tensor(mask), fill)
    theirs = torch.tensor(values, dtype=getattr(torch, dtype)).masked_fill(torch.tensor(mask), fill)
    assert ours.dtype == dtype
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_masked_fill_takes_a_0d_tensor_value_that_receives_gradient():
    x0, mask, weights = np.array([1.0, 2.0, 3.0]), [True, False, True], [1.0, 2.0, 3.0]
    x, v = rg.tensor(x0).require_grad(), rg.tensor(5.0, dtype="float32").require_grad()
    out = x.masked_fill(rg.tensor(mask), v)
    grads = (out * rg.tensor(weights, dtype="float64")).sum().backward()
    tx, tv = torch.tensor(x0, requires_grad=True), torch.tensor(5.0, requires_grad=True)
    expected = tx.masked_fill(torch.tensor(mask), tv)
    (expected * torch.tensor(weights, dtype=torch.float64)).sum().backward()
    assert out.dtype == "float64"
    np.testing.assert_array_equal(out.numpy(), expected.detach().numpy())
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
    assert v.grad(grads).dtype == "float32" and v.grad(grads).item() == tv.grad.item() == 4.0
    with pytest.raises(rg.ShapeError, match="masked_fill: value must be a 0-d tensor"):
        x.masked_fill(rg.tensor(mask), rg.tensor([1.0]))
    with pytest.raises(rg.InvalidArgumentError, match="masked_fill: value inf cannot"):
        rg.tensor([1, 2, 3]).masked_fill(rg.tensor(mask), float("inf"))
    assert rg.tensor([1, 2]).mask_fill(rg.tensor([True, False]), 1.5).dtype == "float32"  # Burn's


@pytest.mark.parametrize("decimals", [0, 1, 2, -1])
def test_round_takes_decimals_as_torch(decimals):
    values = [1.2345, -2.5678, 0.05, 125.0, 135.0]
    for dtype in ("float32", "float64"):
        ours = rg.tensor(values, dtype=dtype)
        theirs = torch.tensor(values, dtype=getattr(torch, dtype))
        np.testing.assert_array_equal(
            rg.round(ours, decimals=decimals).numpy(),
            torch.round(theirs, decimals=decimals).numpy(),
        )
        np.testing.assert_array_equal(
            ours.clone().round_(decimals=decimals).numpy(), theirs.round(decimals=decimals).numpy()
        )
    with pytest.raises(rg.InvalidArgumentError, match="round: decimals must be an int"):
        rg.tensor([1.0]).round(decimals=1.5)


def test_xlogy_takes_a_number_on_either_side_with_gradients():
    array = np.array([0.5, 2.0, 3.0])
    for first, second in [(2.0, "t"), ("t", 3.0), (0.0, "t")]:
        x, t = rg.tensor(array).require_grad(), torch.tensor(array, requires_grad=True)
        ours = rg.xlogy(x if first == "t" else first, x if second == "t" else second)
        theirs = torch.xlogy(t if first == "t" else first, t if second == "t" else second)
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-15)
        grads = ours.sum().backward()
        theirs.sum().backward()
        np.testing.assert_allclose(x.grad(grads).numpy(), t.grad.numpy(), rtol=1e-14)


def test_softmax_methods_take_a_dtype_as_torch():
    """``attn.softmax(dim=-1, dtype=torch.float32)``, as BERT-style attention writes it: the
    input cast first, the gradient flowing back to the input's dtype."""
    array = np.random.default_rng(3).standard_normal((2, 5))
    for method in ("softmax", "log_softmax"):
        x, t = rg.tensor(array).require_grad(), torch.tensor(array, requires_grad=True)
        ours = getattr(x, method)(dim=-1, dtype=rg.float32)
        theirs = getattr(t, method)(dim=-1, dtype=torch.float32)
        assert ours.dtype == "float32"
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-6)
        grads = (ours * rg.tensor(array, dtype="float32")).sum().backward()
        (theirs * torch.tensor(array, dtype=torch.float32)).sum().backward()
        assert x.grad(grads).dtype == "float64"
        np.testing.assert_allclose(x.grad(grads).numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
