"""``clone`` and ``copy.deepcopy`` give memory of their own, as torch's. Ops never write their
inputs' memory, so a clone shared its source's; but ``Tensor.numpy()`` hands that memory out
writable, so a write through it reached the clone (``c = t.clone(); t.numpy()[0] = 9``), the
snapshot ``w0 = p.detach().clone()``, and a deep-copied target or EMA network. Expected values
are torch's, run side by side."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import retrograd as rg


def _snapshots(lib):
    """Each way of copying a tensor, its source then written through ``numpy()``."""
    results = {}
    t = lib.zeros(4)
    c = t.clone()
    d = copy.deepcopy(t)
    t.numpy()[0] = 9.0
    results["clone"], results["deepcopy"] = c.tolist(), d.tolist()

    p = lib.nn.Parameter(lib.zeros(3))
    w0 = p.detach().clone()
    with lib.no_grad():
        n = p.clone()
    p.data.numpy()[1] = 3.0
    results["detach_clone"], results["no_grad_clone"] = w0.tolist(), n.tolist()

    x = lib.tensor([1.0, 2.0], requires_grad=True)
    y = x.clone()
    x.data.numpy()[0] = 7.0
    results["recorded_clone"] = y.detach().tolist()
    return results


def test_copies_do_not_see_writes_into_their_source():
    assert _snapshots(rg) == _snapshots(torch)


def test_a_deep_copied_module_does_not_follow_writes_into_its_source():
    rg.seed(0)
    model = rg.nn.Linear(3, 2)
    target = copy.deepcopy(model)
    before = target.weight.detach().numpy().copy()
    with rg.no_grad():
        model.weight.numpy()[0, 0] = 123.0
        model.bias.data.numpy()[:] = 5.0
    assert float(model.weight[0, 0].detach()) == 123.0
    np.testing.assert_array_equal(target.weight.detach().numpy(), before)
    assert not np.any(target.bias.detach().numpy() == 5.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool", "complex64"])
def test_a_clone_keeps_values_dtype_and_gradient(dtype):
    values = np.array([1, 0, 3], dtype=dtype)
    x = rg.tensor(values)
    c = x.clone()
    assert c.dtype == x.dtype and c.tolist() == x.tolist()
    x.numpy()[0] = 0
    assert c.tolist() == values.tolist()
    if dtype.startswith(("float", "complex")):
        leaf = rg.tensor(values, requires_grad=True)
        theirs = torch.tensor(values, requires_grad=True)
        (grad,) = rg.autograd.grad((leaf.clone() * 2).abs().sum(), leaf)
        (expected,) = torch.autograd.grad((theirs.clone() * 2).abs().sum(), theirs)
        np.testing.assert_allclose(grad.numpy(), expected.numpy())
        assert leaf.clone().grad_fn.name() == theirs.clone().grad_fn.name() == "CloneBackward0"
