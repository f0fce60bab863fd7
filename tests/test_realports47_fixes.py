"""Defects found while porting the audio programs of ``tests/test_real_ports_330.py`` to
``_337.py`` (their feature front ends build windows and log-spaced grids), each checked
against torch; each fails on the code before the fix."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

WINDOWS = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]


@pytest.mark.parametrize("name", WINDOWS)
def test_a_window_asked_to_require_grad_is_a_leaf_that_does(name):
    """``requires_grad=True`` was swallowed (the window came back a constant); torch's is a
    leaf that requires grad, as a learnable analysis window needs."""
    ours, theirs = (
        getattr(rg, name)(9, requires_grad=True),
        getattr(torch, name)(9, requires_grad=True),
    )
    assert ours.requires_grad and ours.is_leaf
    assert theirs.requires_grad and theirs.is_leaf
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)
    assert not getattr(rg, name)(9).requires_grad


def test_a_learnable_windows_gradient_through_the_stft_is_torchs():
    """The gradient of a magnitude spectrogram's sum in the window that asked for it."""
    signal = np.random.default_rng(4701).standard_normal((2, 64)).astype(np.float32)
    grads = []
    for lib in (torch, rg):
        window = lib.hann_window(16, requires_grad=True)
        spectrum = lib.stft(lib.tensor(signal), 16, 4, window=window, return_complex=True)
        loss = spectrum.abs().sum()
        if lib is torch:
            loss.backward()
            grads.append(window.grad.numpy())
        else:
            grads.append(window.grad(loss.backward()).numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-4, atol=1e-4)
    assert np.abs(grads[0]).max() > 1


@pytest.mark.parametrize("name", WINDOWS)
@pytest.mark.parametrize("dtype", ["int64", "complex64"])
def test_a_window_refuses_a_dtype_that_is_not_floating_point(name, dtype):
    """An int64 window came back truncated to zeros and ones, a complex one as complex
    values; torch refuses both (its message: "expects floating point dtypes")."""
    with pytest.raises((RuntimeError, NotImplementedError)):  # torch's kind differs by dtype
        getattr(torch, name)(4, dtype=getattr(torch, dtype))
    with pytest.raises(rg.DTypeError, match=f"{name} expects a floating point dtype, got {dtype}"):
        getattr(rg, name)(4, dtype=getattr(rg, dtype))


@pytest.mark.parametrize("name", WINDOWS)
def test_a_window_takes_torchs_factory_keywords_and_refuses_others(name):
    """``layout`` and ``pin_memory`` are torch's (accepted); any other keyword was silently
    dropped, where torch raises a TypeError."""
    made = getattr(rg, name)(6, layout=rg.strided, pin_memory=False)
    np.testing.assert_allclose(made.numpy(), getattr(torch, name)(6).numpy(), rtol=1e-6)
    with pytest.raises(TypeError):
        getattr(torch, name)(6, center=True)
    with pytest.raises(TypeError, match=name):
        getattr(rg, name)(6, center=True)
    with pytest.raises(rg.InvalidArgumentError, match="layout"):
        getattr(rg, name)(6, layout=rg.sparse_coo)


def test_logspace_asked_to_require_grad_is_a_leaf():
    """``logspace(..., requires_grad=True)`` came back as the power of a linspace that
    required grad: a non-leaf, so an optimizer could not take it; torch's is a leaf."""
    ours = rg.logspace(0, 2, 3, base=2.0, requires_grad=True)
    theirs = torch.logspace(0, 2, 3, base=2.0, requires_grad=True)
    assert ours.is_leaf and ours.requires_grad and theirs.is_leaf
    (theirs * theirs).sum().backward()
    np.testing.assert_allclose(
        ours.grad((ours * ours).sum().backward()).numpy(), theirs.grad.numpy()
    )
    assert rg.optim.SGD([ours], lr=0.1).param_groups[0]["params"][0] is ours
    with pytest.raises(RuntimeError):
        torch.logspace(0, 2, 3, dtype=torch.int64, requires_grad=True)
    with pytest.raises(rg.DTypeError, match="logspace"):
        rg.logspace(0, 2, 3, dtype=rg.int64, requires_grad=True)
