"""``square``'s derivatives of every order against torch's, whose ``square`` is ``pow(x, 2)``:
its gradient's own gradient stays connected to the input (through ``pow(x, 1)``), so a third
derivative is zeros where ours used to say "does not require grad"."""

import numpy as np
import pytest
import torch

import retrograd as rg


def _orders(x, grad, count):
    out, value = [], x.square().sum()
    for _ in range(count):
        if not value.requires_grad:
            out.append(None)
            break
        (value,) = grad(value.sum(), x, create_graph=True)
        out.append(value.detach().numpy().copy())
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_square_derivatives_of_every_order_are_torchs(dtype):
    data = np.array([1.5, -2.0, 0.0, -0.0, 3e-3, 7.25], dtype=dtype)
    ours = _orders(rg.tensor(data).require_grad(), rg.autograd.grad, 4)
    theirs = _orders(torch.tensor(data).requires_grad_(), torch.autograd.grad, 4)
    assert len(ours) == len(theirs) == 4
    assert ours[-1] is None and theirs[-1] is None  # the fourth: nothing left, as torch's
    for mine, torchs in zip(ours[:-1], theirs[:-1]):
        np.testing.assert_array_equal(mine, torchs)
        assert np.array_equal(np.signbit(mine), np.signbit(torchs))


def test_square_first_order_gradient_keeps_torchs_bits():
    rng = np.random.default_rng(3)
    data = rng.standard_normal(257).astype(np.float32)
    seed = rng.standard_normal(257).astype(np.float32)
    x = rg.tensor(data).require_grad()
    grads = x.square().backward(rg.tensor(seed))
    t = torch.tensor(data, requires_grad=True)
    t.square().backward(torch.tensor(seed))
    np.testing.assert_array_equal(x.grad(grads).numpy(), t.grad.numpy())
