"""Defects found by realports9 beyond the ports themselves (``test_real_ports_50.py``),
each checked against torch 2.13."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


@pytest.mark.parametrize(
    ("shape", "normalized"), [((2, 0), (0,)), ((2, 3, 0), (3, 0)), ((2, 0, 3), (0, 3))]
)
def test_layer_norm_over_a_zero_size_shape_is_empty_as_torch(shape, normalized):
    # was refused ("normalized_shape must be positive"); torch returns the empty result and
    # empty gradients of the input's, weight's and bias's shapes
    theirs = torch.nn.LayerNorm(normalized)
    x = torch.zeros(shape, requires_grad=True)
    y = theirs(x)
    y.sum().backward()
    ours = rg.nn.LayerNorm(normalized)
    ours_x = rg.zeros(shape, requires_grad=True)
    out = ours(ours_x)
    grads = out.sum().backward()
    assert out.shape == tuple(y.shape)
    assert ours_x.grad(grads).shape == tuple(x.grad.shape)
    assert ours.weight.grad(grads).shape == tuple(theirs.weight.grad.shape)
    assert ours.bias.grad(grads).shape == tuple(theirs.bias.grad.shape)
    assert rg.nn.functional.layer_norm(rg.zeros(shape), normalized).shape == shape
    assert rg.nn.functional.rms_norm(rg.zeros(shape), normalized).shape == tuple(
        torch.nn.functional.rms_norm(torch.zeros(shape), normalized).shape
    )


@pytest.mark.parametrize("fn", ["layer_norm", "rms_norm"])
def test_norm_over_an_empty_normalized_shape_is_refused_as_torch(fn):
    # torch: "Expected normalized_shape to be at least 1-dimensional"; retrograd normalized
    # over nothing and returned zeros
    with pytest.raises(RuntimeError, match="at least 1-dimensional"):
        getattr(torch.nn.functional, fn)(torch.ones(2, 3), ())
    with pytest.raises(rg.errors.ShapeError, match="at least one dimension"):
        getattr(rg.nn.functional, fn)(rg.ones((2, 3)), ())


def test_layer_norm_of_a_nonempty_shape_is_unchanged():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(
        rg.nn.functional.layer_norm(rg.tensor(x), (4,)).numpy(),
        torch.nn.functional.layer_norm(torch.tensor(x), (4,)).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
