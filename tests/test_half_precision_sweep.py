"""bfloat16 and float16 on the torch inner backend, checked against torch run in the same dtype.

Half precision is the torch backend's (API.md section 9); the NumPy backend refuses it with a
DTypeError, which is all these tests check there. On torch: layers built in half precision (by
``dtype=``, ``.to``, ``.half()``/``.bfloat16()``) keep their parameters, outputs and gradients in
it and agree with torch's; optimizers step half-precision parameters as torch's do; and the
mixed-dtype calls torch refuses (a half-precision weight fed a float32 input, a float32 class
weight with half-precision logits) are refused with a DTypeError, not silently promoted.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import on_torch

HALF_TOLERANCE = {"float16": 2e-2, "bfloat16": 8e-2}  # what 11 or 8 bits of mantissa allow

needs_torch = pytest.mark.skipif(not on_torch(), reason="half precision is the torch backend's")


def data(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def as_numpy(t):
    return t.float().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.float().numpy())


def close(actual, expected, dtype):
    tolerance = HALF_TOLERANCE[dtype]
    scale = max(1.0, float(np.abs(as_numpy(expected)).max()))
    np.testing.assert_allclose(
        as_numpy(actual), as_numpy(expected), rtol=tolerance, atol=tolerance * scale
    )


# ---- NumPy: the refusals --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", list(HALF_TOLERANCE))
def test_numpy_backend_refuses_half_precision(dtype):
    if on_torch():
        return  # the torch backend computes in half precision (the tests below)
    with pytest.raises(rg.DTypeError, match=dtype):
        rg.tensor([1.0, 2.0], dtype=dtype)
    with pytest.raises(rg.DTypeError, match=dtype):
        rg.nn.Linear(2, 3, dtype=getattr(rg, dtype))
    layer = rg.nn.Linear(2, 3)
    with pytest.raises(rg.DTypeError, match=dtype):
        layer.to(getattr(rg, dtype))
    assert layer.weight.dtype == "float32"  # the refused cast left the layer as it was
    assert layer(rg.ones((1, 2))).shape == (1, 3)


# ---- layers built in half precision, forward and backward as torch's -------------------------

LAYERS = {
    "Linear": (lambda m, **k: m.nn.Linear(3, 4, **k), (2, 3)),
    "Conv2d": (lambda m, **k: m.nn.Conv2d(2, 3, 2, padding=1, **k), (1, 2, 4, 4)),
    "ConvTranspose1d": (lambda m, **k: m.nn.ConvTranspose1d(2, 3, 2, stride=2, **k), (1, 2, 3)),
    "BatchNorm1d": (lambda m, **k: m.nn.BatchNorm1d(3, **k), (4, 3)),
    "GroupNorm": (lambda m, **k: m.nn.GroupNorm(2, 4, **k), (2, 4, 3)),
    "LayerNorm": (lambda m, **k: m.nn.LayerNorm(3, **k), (2, 3)),
    "GRU": (lambda m, **k: m.nn.GRU(3, 4, **k), (2, 1, 3)),
    "MultiheadAttention": (lambda m, **k: m.nn.MultiheadAttention(4, 2, **k), (3, 1, 4)),
}


def build(module, name, dtype, how):
    make = LAYERS[name][0]
    torch_dtype = getattr(module, dtype)
    if how == "dtype":
        return make(module, dtype=torch_dtype)
    layer = make(module)
    if how == "to":
        return layer.to(torch_dtype)
    return layer.half() if dtype == "float16" else layer.bfloat16()


def first_output(out):
    return out[0] if isinstance(out, tuple) else out


@needs_torch
@pytest.mark.parametrize("how", ["dtype", "to", "method"])
@pytest.mark.parametrize("dtype", list(HALF_TOLERANCE))
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_in_half_precision_as_torch(name, dtype, how):
    torch.manual_seed(0)
    expected_layer = build(torch, name, dtype, how)
    layer = build(rg, name, dtype, how)
    # torch's initial values (rounded to the dtype already) into the retrograd layer
    layer.load_state_dict(
        {
            key: rg.tensor(value.float().numpy(), dtype=str(value.dtype).removeprefix("torch."))
            for key, value in expected_layer.state_dict().items()
        }
    )
    shape = LAYERS[name][1]
    x = rg.tensor(data(*shape), dtype=dtype).require_grad()
    tx = torch.tensor(data(*shape), dtype=getattr(torch, dtype), requires_grad=True)
    inputs, torch_inputs = (
        ((x, x, x), (tx, tx, tx)) if name == "MultiheadAttention" else ((x,), (tx,))
    )
    out = first_output(layer(*inputs))
    expected = first_output(expected_layer(*torch_inputs))
    assert out.dtype == dtype
    close(out, expected.detach(), dtype)
    grads = (out.float() ** 2).sum().backward()
    (expected.float() ** 2).sum().backward()
    close(x.grad(grads), tx.grad, dtype)
    for (key, parameter), expected_parameter in zip(
        layer.named_parameters(), expected_layer.parameters()
    ):
        assert parameter.dtype == dtype, key
        grad = parameter.grad(grads)
        assert grad.dtype == dtype, key
        close(grad, expected_parameter.grad, dtype)


# ---- optimizers stepping half-precision parameters -------------------------------------------

OPTIMIZERS = {
    "SGD": {"lr": 0.1, "momentum": 0.9},
    "Adam": {"lr": 0.05},
    "AdamW": {"lr": 0.05},
    "RMSprop": {"lr": 0.01},
    "Adagrad": {"lr": 0.1},
    "NAdam": {"lr": 0.05},
}


@needs_torch
@pytest.mark.parametrize("dtype", list(HALF_TOLERANCE))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_steps_half_precision_as_torch(name, dtype, tmp_path):
    start = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)
    parameter = rg.nn.Parameter(rg.tensor(start, dtype=dtype))
    optimizer = getattr(rg.optim, name)([parameter], **OPTIMIZERS[name])
    expected = torch.nn.Parameter(torch.tensor(start, dtype=getattr(torch, dtype)))
    expected_optimizer = getattr(torch.optim, name)([expected], **OPTIMIZERS[name])
    for _ in range(3):
        optimizer.step((parameter.float() ** 2).sum().backward())
        expected_optimizer.zero_grad()
        (expected.float() ** 2).sum().backward()
        expected_optimizer.step()
    assert parameter.dtype == dtype
    close(parameter, expected.detach(), dtype)
    for key, value in expected_optimizer.state[expected].items():
        if value.dtype == expected.dtype:  # the moments (not step, NAdam's mu_product)
            assert optimizer.state[parameter][key].dtype == dtype, key
            close(optimizer.state[parameter][key], value, dtype)
    # the saved state steps on as the live one
    rg.save(optimizer.state_dict(), tmp_path / "optimizer.pt")
    resumed_parameter = rg.nn.Parameter(parameter.detach().clone())
    resumed = getattr(rg.optim, name)([resumed_parameter], **OPTIMIZERS[name])
    resumed.load_state_dict(rg.load(tmp_path / "optimizer.pt"))
    optimizer.step((parameter.float() ** 2).sum().backward())
    resumed.step((resumed_parameter.float() ** 2).sum().backward())
    assert resumed_parameter.dtype == dtype
    np.testing.assert_array_equal(as_numpy(resumed_parameter), as_numpy(parameter))


# ---- mixed dtypes: what torch refuses, retrograd refuses --------------------------------------

MIXED = {
    "Linear": lambda m, nnf, h, f: m.nn.Linear(4, 2, dtype=h.dtype)(f),
    "linear": lambda m, nnf, h, f: nnf.linear(f, h[0, 0, :2]),
    "Conv2d": lambda m, nnf, h, f: m.nn.Conv2d(3, 2, 2, dtype=h.dtype)(f),
    "conv1d": lambda m, nnf, h, f: nnf.conv1d(f[:, :, 0], h[:2, :, 0, :2]),
    "conv_transpose2d": lambda m, nnf, h, f: nnf.conv_transpose2d(f, h[0, :, None, :2, :2]),
    "Bilinear": lambda m, nnf, h, f: m.nn.Bilinear(4, 4, 2, dtype=h.dtype)(f[0, 0], f[0, 0]),
    "MultiheadAttention": lambda m, nnf, h, f: m.nn.MultiheadAttention(4, 2, dtype=h.dtype)(
        f[0], f[0], f[0]
    ),
    "PReLU": lambda m, nnf, h, f: m.nn.PReLU(dtype=h.dtype)(f),
    "prelu": lambda m, nnf, h, f: nnf.prelu(h, f[0, :, 0, 0]),
    "cross_entropy_weight": lambda m, nnf, h, f: nnf.cross_entropy(
        h[:, :, 0, 0], m.tensor([0, 2]), weight=f[0, :, 0, 0].abs()
    ),
    "binary_cross_entropy": lambda m, nnf, h, f: nnf.binary_cross_entropy(h.sigmoid(), f.sigmoid()),
}


@needs_torch
@pytest.mark.parametrize("dtype", list(HALF_TOLERANCE))
@pytest.mark.parametrize("name", list(MIXED))
def test_mixed_dtypes_refused_as_torch(name, dtype):
    values = data(2, 3, 4, 4)
    call = MIXED[name]
    with pytest.raises(RuntimeError):  # the reference: torch refuses these mixes
        call(
            torch,
            torch.nn.functional,
            torch.tensor(values, dtype=getattr(torch, dtype)),
            torch.tensor(values),
        )
    half, single = rg.tensor(values, dtype=dtype), rg.tensor(values)
    with pytest.raises(rg.DTypeError, match=rf"(?s)float32.*{dtype}|{dtype}.*float32"):
        call(rg, rg.nn.functional, half, single)
    # the tensors stay usable: in one dtype the call computes, as torch's does
    out = call(rg, rg.nn.functional, half, single.to(dtype))
    out = first_output(out)
    assert out.dtype == dtype


# ---- batch_norm: float32 running statistics of a half-precision input -------------------------


@needs_torch
@pytest.mark.parametrize("dtype", list(HALF_TOLERANCE))
def test_batch_norm_float32_running_stats_stay_float32_precise(dtype):
    # torch updates float32 buffers in float32: with momentum 0 they keep their values to the
    # bit (rounded to the input's dtype first, 1.001 became 1.0 in bfloat16)
    values = data(4, 3, 2, 2)
    start_mean = np.array([1.001, -0.3337, 2.0003], np.float32)
    start_var = np.array([1.0007, 0.50003, 3.1416], np.float32)
    expected_mean, expected_var = torch.tensor(start_mean), torch.tensor(start_var)
    torch.nn.functional.batch_norm(
        torch.tensor(values, dtype=getattr(torch, dtype)),
        expected_mean,
        expected_var,
        training=True,
        momentum=0.0,
    )
    running_mean, running_var = rg.tensor(start_mean), rg.tensor(start_var)
    out = rg.nn.functional.batch_norm(
        rg.tensor(values, dtype=dtype), running_mean, running_var, training=True, momentum=0.0
    )
    assert out.dtype == dtype
    assert running_mean.dtype == running_var.dtype == "float32"
    np.testing.assert_array_equal(running_mean.numpy(), expected_mean.numpy())
    np.testing.assert_array_equal(running_var.numpy(), expected_var.numpy())
    # and with torch's momentum, within what the half-precision batch statistics allow
    expected_mean, expected_var = torch.tensor(start_mean), torch.tensor(start_var)
    torch.nn.functional.batch_norm(
        torch.tensor(values, dtype=getattr(torch, dtype)),
        expected_mean,
        expected_var,
        training=True,
    )
    running_mean, running_var = rg.tensor(start_mean), rg.tensor(start_var)
    rg.nn.functional.batch_norm(
        rg.tensor(values, dtype=dtype), running_mean, running_var, training=True
    )
    np.testing.assert_allclose(running_mean.numpy(), expected_mean.numpy(), atol=2e-3)
    np.testing.assert_allclose(running_var.numpy(), expected_var.numpy(), rtol=2e-3)
