"""Regression tests of the defects the real ports of round 74 found (helper ports74)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import DTypeError, MixedDTypeError, ShapeError, SizeMismatchError


def _pair(*shape, seed):
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return torch.tensor(values, requires_grad=True), rg.tensor(values, requires_grad=True)


@pytest.mark.parametrize(("time", "pad"), [(6, 0), (6, 2), (3, 0), (2, 0), (0, 1)])
def test_conv_tbc_is_torchs_time_batch_channel_convolution(time, pad):
    """``torch.conv_tbc`` (fairseq's ``ConvTBC``, its ``fconv`` models) was missing: a 1-d
    convolution over ``[time, batch, channels]`` by a ``[kernel, in, out]`` weight, values
    and gradients as torch's, an empty output where ``time + 2 pad`` is the kernel width
    less one."""
    tx, rx = _pair(time, 2, 3, seed=1)
    tw, rw = _pair(3, 3, 4, seed=2)
    tb, rb = _pair(4, seed=3)
    theirs = torch.conv_tbc(tx, tw, tb, pad)
    ours = rg.conv_tbc(rx, rw, rb, pad)
    assert tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)
    cotangent = np.random.default_rng(4).standard_normal(tuple(theirs.shape)).astype(np.float32)
    (theirs * torch.tensor(cotangent)).sum().backward()
    grads = (ours * rg.tensor(cotangent)).sum().backward()
    for t, r in ((tx, rx), (tw, rw), (tb, rb)):
        np.testing.assert_allclose(r.grad(grads).numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_conv_tbc_refuses_what_torch_refuses_naming_the_op_and_shapes():
    x, w, b = rg.ones(5, 2, 3), rg.ones(3, 3, 4), rg.ones(4)
    with pytest.raises(ShapeError, match=r"conv_tbc: input must be 3-d.*\[2, 3\]"):
        rg.conv_tbc(x[0], w, b)
    with pytest.raises(ShapeError, match="conv_tbc: weight must be 3-d"):
        rg.conv_tbc(x, w[0], b)
    with pytest.raises(ShapeError, match="conv_tbc: bias must be 1-d"):
        rg.conv_tbc(x, w, b[None])
    with pytest.raises(SizeMismatchError, match=r"conv_tbc: input's in_channels.*\[3, 2, 4\]"):
        rg.conv_tbc(x, rg.ones(3, 2, 4), b)
    with pytest.raises(SizeMismatchError, match="conv_tbc: bias's size"):
        rg.conv_tbc(x, w, rg.ones(5))
    with pytest.raises(SizeMismatchError, match="conv_tbc: pad 0 leaves an output of -1"):
        rg.conv_tbc(rg.ones(1, 2, 3), w, b)
    with pytest.raises(DTypeError, match="conv_tbc: bias must be a tensor, got NoneType"):
        rg.conv_tbc(x, w, None)
    with pytest.raises(MixedDTypeError, match="conv_tbc: input, weight and bias"):
        rg.conv_tbc(x.double(), w, b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "reduce",
    [
        lambda lib, x: x.var(),
        lambda lib, x: x.var(0),
        lambda lib, x: x.std(1, correction=0),
        lambda lib, x: x.std(),
        lambda lib, x: lib.std_mean(x, 1)[0],
        lambda lib, x: lib.var_mean(x, dim=0, keepdim=True)[0],
    ],
    ids=["var", "var0", "std1", "std", "std_mean", "var_mean"],
)
def test_16_bit_var_and_std_are_accumulated_in_float32_and_rounded_once(dtype, reduce):
    """torch's var and std of a float16 or bfloat16 tensor accumulate in float32 and round
    the result once; retrograd's rounded the mean, the deviations, their sum and the root
    each in 16 bits (on 7 x 33 entries of spread 3 around 4, ``var(0)`` differed from
    torch's in every trial). The value is now torch's bit for bit; the gradient is torch's
    16-bit backward's, to the last bit or two of the 16-bit format (its products are rounded
    in an order of their own)."""
    backend = rg.Autodiff(rg.TorchBackend("cpu"))
    values = np.random.default_rng(5).standard_normal((7, 33)) * 3 + 4
    theirs = torch.tensor(values, dtype=getattr(torch, dtype), requires_grad=True)
    ours = rg.tensor(
        theirs.detach().float().numpy(), dtype=dtype, backend=backend, requires_grad=True
    )
    expected, got = reduce(torch, theirs), reduce(rg, ours)
    assert str(got.dtype) == dtype
    np.testing.assert_array_equal(got.detach().float().numpy(), expected.detach().float().numpy())
    cotangent = np.random.default_rng(6).standard_normal(tuple(expected.shape))
    (expected * torch.tensor(cotangent, dtype=expected.dtype)).sum().backward()
    grads = (got * rg.tensor(cotangent, backend=backend).to(got.dtype)).sum().backward()
    ulp = 2.0**-8 if dtype == "bfloat16" else 2.0**-11
    reference = theirs.grad.float().numpy()
    np.testing.assert_allclose(
        ours.grad(grads).float().numpy(), reference, rtol=0, atol=2 * ulp * np.abs(reference).max()
    )
