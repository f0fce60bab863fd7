"""Defects found by the real ports of round 70 (``tests/test_real_ports_70b.py``, ``_70c``,
``_70d``), each checked against torch.

- ``torch.fake_quantize_per_tensor_affine`` and ``torch.fake_quantize_per_channel_affine``,
  the float ops quantization-aware training is written with, were missing: their values (the
  rounding of ``x * (1.0f / scale)`` half to even, an int zero point added after it, a float
  one before it, the clamp), their straight-through gradient (zero where the integer left the
  range), their dtypes and torch's refusals; a scale computed from ``weight.detach()`` (a
  leaf that requires grad here, Burn's rule) taken as a constant, as torch's plain one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _both(values, dtype=np.float32):
    return torch.tensor(values.astype(dtype)), rg.tensor(values.astype(dtype))


def _grid_values(n, seed):
    # values on and near the grid's half points, where the rounding rule decides
    rng = np.random.default_rng(seed)
    halves = (rng.integers(-12, 12, n) + 0.5) * 0.25
    return np.concatenate([halves, rng.normal(0.0, 1.5, n)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fake_quantize_per_tensor_values_and_gradient_as_torch(dtype):
    theirs, ours = _both(_grid_values(40, 7001), dtype)
    theirs.requires_grad_(True)
    ours.requires_grad_(True)
    weights = np.linspace(-1.0, 2.0, theirs.numel()).astype(dtype)
    t_out = torch.fake_quantize_per_tensor_affine(theirs, 0.25, 3, -8, 7)
    r_out = rg.fake_quantize_per_tensor_affine(ours, 0.25, 3, -8, 7)
    (t_out * torch.tensor(weights)).sum().backward()
    grads = (r_out * rg.tensor(weights)).sum().backward()
    assert str(r_out.dtype).split(".")[-1] == str(t_out.dtype).split(".")[-1]
    np.testing.assert_array_equal(r_out.detach().numpy(), t_out.detach().numpy())
    np.testing.assert_array_equal(ours.grad(grads).numpy(), theirs.grad.numpy())
    assert (theirs.grad == 0).any() and (theirs.grad != 0).any()  # both sides of the range


def test_fake_quantize_per_tensor_takes_one_element_tensors_and_no_grad():
    theirs, ours = _both(_grid_values(16, 7002))
    t_out = torch.fake_quantize_per_tensor_affine(
        theirs, torch.tensor([0.3]), torch.tensor(2, dtype=torch.int32), 0, 15
    )
    with rg.no_grad():
        r_out = rg.fake_quantize_per_tensor_affine(
            ours, rg.tensor([0.3]), rg.tensor(2, dtype=rg.int32), 0, 15
        )
    np.testing.assert_array_equal(r_out.numpy(), t_out.numpy())


@pytest.mark.parametrize("zero_dtype", ["int32", "float32"])
@pytest.mark.parametrize("axis", [0, 2])
def test_fake_quantize_per_channel_values_and_gradient_as_torch(zero_dtype, axis):
    rng = np.random.default_rng(7003)
    values = rng.normal(0.0, 1.0, (3, 4, 5)).astype(np.float32)
    n = values.shape[axis]
    scale = rng.uniform(0.05, 0.3, n).astype(np.float32)
    zero = rng.integers(-3, 4, n).astype(np.float32)
    if zero_dtype == "float32":
        zero = zero + np.float32(0.5)  # a float zero point: added before the rounding
    theirs, ours = torch.tensor(values, requires_grad=True), rg.tensor(values, requires_grad=True)
    t_out = torch.fake_quantize_per_channel_affine(
        theirs,
        torch.tensor(scale),
        torch.tensor(zero).to(getattr(torch, zero_dtype)),
        axis,
        -8,
        7,
    )
    r_out = rg.fake_quantize_per_channel_affine(
        ours, rg.tensor(scale), rg.tensor(zero).to(getattr(rg, zero_dtype)), axis, -8, 7
    )
    weights = np.arange(values.size, dtype=np.float32).reshape(values.shape)
    (t_out * torch.tensor(weights)).sum().backward()
    grads = (r_out * rg.tensor(weights)).sum().backward()
    np.testing.assert_array_equal(r_out.detach().numpy(), t_out.detach().numpy())
    np.testing.assert_array_equal(ours.grad(grads).numpy(), theirs.grad.numpy())


def test_fake_quantize_refusals_as_torch():
    x = rg.ones(3, 4)
    scale, zero = rg.tensor([0.1, 0.2, 0.3]), rg.zeros(3, dtype=rg.int32)
    with pytest.raises(rg.InvalidArgumentError, match="quant_min"):
        rg.fake_quantize_per_tensor_affine(x, 0.5, 0, 7, 0)
    with pytest.raises(rg.InvalidArgumentError, match="zero_point"):
        rg.fake_quantize_per_tensor_affine(x, 0.5, 9, 0, 7)
    with pytest.raises(rg.DTypeError, match="int64"):
        rg.fake_quantize_per_tensor_affine(x.long(), 0.5, 0, 0, 7)
    with pytest.raises(rg.DTypeError, match="zero_point"):
        rg.fake_quantize_per_tensor_affine(x, 0.5, 2.0, 0, 7)
    with pytest.raises(rg.DTypeError, match="float64"):
        rg.fake_quantize_per_channel_affine(x, scale.double(), zero, 0, -8, 7)
    with pytest.raises(rg.DTypeError, match="int64"):
        rg.fake_quantize_per_channel_affine(x, scale, zero.long(), 0, -8, 7)
    with pytest.raises(rg.ShapeError, match=r"\[3, 4\]"):
        rg.fake_quantize_per_channel_affine(x, scale, zero, 1, -8, 7)
    with pytest.raises(rg.ShapeError, match="1-D"):
        rg.fake_quantize_per_channel_affine(x, scale.view(3, 1), zero, 0, -8, 7)
    with pytest.raises(rg.InvalidArgumentError, match="axis"):
        rg.fake_quantize_per_channel_affine(x, scale, zero, -2, -8, 7)
    with pytest.raises(IndexError):
        rg.fake_quantize_per_channel_affine(x, scale, zero, 2, -8, 7)
    with pytest.raises(rg.InvalidArgumentError, match="zero_point"):
        rg.fake_quantize_per_channel_affine(x, scale, zero + 9, 0, -8, 7)


def test_fake_quantize_takes_an_observers_scale_from_a_detached_weight_as_a_constant():
    # an observer's per-channel scale from weight.detach(): torch's requires no grad; here
    # (Burn's rule) it is a leaf that does, and the weight's gradient is the masked one alone
    values = np.random.default_rng(7004).normal(0.0, 1.0, (4, 6)).astype(np.float32)
    grads_of = {}
    for lib in (torch, rg):
        weight = lib.nn.Parameter(lib.tensor(values))
        observed = weight.detach()
        scale = observed.abs().amax(dim=1) / 7.0
        zero = lib.zeros(4, dtype=lib.int32)
        out = lib.fake_quantize_per_channel_affine(weight, scale, zero, 0, -4, 3)
        grads = (out * out).sum().backward()
        grad = weight.grad if lib is torch else weight.grad(grads)
        grads_of[lib] = (out.detach().numpy(), grad)
    np.testing.assert_array_equal(grads_of[rg][0], grads_of[torch][0])
    np.testing.assert_array_equal(grads_of[rg][1].numpy(), grads_of[torch][1].numpy())
