"""``rg.frexp`` / ``Tensor.frexp`` against torch's (found missing by a real port)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

SPECIAL = [0.0, -0.0, 1.0, -3.5, 0.75, 1024.0, 1e-30, -7e20, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mantissa_and_exponent_are_torchs(dtype):
    rng = np.random.default_rng(0)
    values = np.concatenate([SPECIAL, rng.standard_normal(50) * 10.0 ** rng.integers(-30, 30, 50)])
    values = values.astype(dtype)
    tiny = np.finfo(dtype).smallest_subnormal
    values = np.concatenate([values, [tiny, -3 * tiny, np.finfo(dtype).max]]).astype(dtype)
    mantissa, exponent = rg.frexp(rg.tensor(values))
    expected = torch.frexp(torch.tensor(values))
    assert mantissa.dtype == dtype and exponent.dtype == "int32"  # (torch's)
    np.testing.assert_array_equal(mantissa.numpy(), expected.mantissa.numpy())
    np.testing.assert_array_equal(exponent.numpy(), expected.exponent.numpy())
    assert rg.tensor(values).frexp().exponent.tolist() == exponent.tolist()


def test_gradient_is_torchs_and_finite_differences():
    rng = np.random.default_rng(1)
    values = rng.standard_normal((3, 4)) * 10.0 ** rng.integers(-5, 5, (3, 4))
    weights = rng.standard_normal((3, 4))
    x = rg.tensor(values).require_grad()
    grads = (rg.frexp(x).mantissa * rg.tensor(weights)).sum().backward()
    tx = torch.tensor(values, requires_grad=True)
    (torch.frexp(tx).mantissa * torch.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(x.grad(grads).numpy(), tx.grad.numpy())
    # the mantissa is x * 2**-e, linear between powers of two: a central difference inside
    # the binade gives the slope exactly up to rounding
    step = np.abs(values) * 1e-7
    plus, minus = np.frexp(values + step)[0], np.frexp(values - step)[0]
    slope = (plus - minus) / (2 * step)
    np.testing.assert_allclose(x.grad(grads).numpy(), weights * slope, rtol=1e-6)


def test_gradient_where_torchs_power_of_two_overflows_is_the_true_one():
    big = np.float32(3e38)  # exponent 128: torch's 2**128 is inf in float32, its gradient 0
    x = rg.tensor([big]).require_grad()
    grads = rg.frexp(x).mantissa.sum().backward()
    assert x.grad(grads).tolist() == [2.0**-128]


def test_integer_input_is_refused():
    with pytest.raises(rg.errors.DTypeError, match="frexp"):
        rg.frexp(rg.tensor([1, 2]))
