"""The float32 sigmoid, SiLU and tanh of the NumPy backend as compiled loops
(``backend/compiled_activations.py``): taken for large float32 arrays in any dense layout, as
close to float64 as torch's float32 kernels, torch's values at the edges (NaN, infinities,
``-0.0``, the sigmoid's underflow below -87.3), and the same bits when recomputed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend
from retrograd.backend import compiled_activations

#: [batch, channels, height, width], large enough for the loops
SHAPE = (16, 64, 8, 8)
EDGES = [np.nan, np.inf, -np.inf, -100.0, -87.0, 0.0, -0.0, 3e38, -3e38, 1e-30]


def _input(seed=0, layout="contiguous"):
    x = (np.random.default_rng(seed).standard_normal(SHAPE) * 6).astype(np.float32)
    x.flat[: len(EDGES)] = EDGES
    if layout == "channels-last":  # dense, not C-contiguous (a convolution's output)
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    return x


def _apply(name, t):
    return rg.nn.functional.silu(t) if name == "silu" else getattr(t, name)()


def _torch(name, x, dtype):
    t = torch.tensor(x, dtype=dtype, requires_grad=True)
    out = torch.nn.functional.silu(t) if name == "silu" else getattr(torch, name)(t)
    (grad,) = torch.autograd.grad((out * out).sum(), t)
    return out.detach().numpy(), grad.numpy()


def _close_as_torch(ours, theirs, exact):
    finite = np.isfinite(exact)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_array_equal(
        ours[~finite & ~np.isnan(exact)], theirs[~finite & ~np.isnan(exact)]
    )
    scale = np.maximum(np.abs(exact[finite]), 1.0)
    ours_error = (np.abs(ours[finite] - exact[finite]) / scale).max()
    torch_error = (np.abs(theirs[finite] - exact[finite]) / scale).max()
    assert ours_error <= max(2 * torch_error, 4 * np.finfo(np.float32).eps), (
        ours_error,
        torch_error,
    )


@pytest.mark.parametrize("layout", ["contiguous", "channels-last"])
@pytest.mark.parametrize("name", ["sigmoid", "silu", "tanh"])
def test_values_and_gradients_as_torchs(monkeypatch, name, layout):
    calls = []
    if not inner_backend().name.startswith("torch"):
        kernel = getattr(compiled_activations, f"{name}_flat")
        monkeypatch.setattr(
            compiled_activations, f"{name}_flat", lambda *a: calls.append(1) or kernel(*a)
        )
    x = _input(layout=layout)
    backend = rg.Autodiff(inner_backend())
    t = rg.tensor(x, backend=backend).require_grad()
    out = _apply(name, t)
    grad = t.grad((out * out).sum().backward()).numpy()
    exact_out, exact_grad = _torch(name, x, torch.float64)
    torch_out, torch_grad = _torch(name, x, torch.float32)
    with np.errstate(invalid="ignore"):
        _close_as_torch(out.numpy(), torch_out, exact_out)
        _close_as_torch(grad, torch_grad, exact_grad)
    assert out.numpy()[0, 0, 0, 3] == torch_out[0, 0, 0, 3]  # -100: sigmoid's 0, tanh's -1
    assert np.signbit(out.numpy()[0, 0, 0, 6]) == np.signbit(torch_out[0, 0, 0, 6])  # -0.0
    if not inner_backend().name.startswith("torch"):
        assert calls, "the compiled loop was not taken"


@pytest.mark.numpy_only("the NumPy backend's compiled loops")
@pytest.mark.parametrize("name", ["sigmoid", "silu", "tanh"])
def test_small_and_float64_arrays_stay_numpy(monkeypatch, name):
    calls = []
    kernel = getattr(compiled_activations, f"{name}_flat")
    monkeypatch.setattr(
        compiled_activations, f"{name}_flat", lambda *a: calls.append(1) or kernel(*a)
    )
    backend = rg.NumpyBackend()
    for x in (_input()[:1, :2].copy(), _input().astype(np.float64)):
        out = getattr(backend, name)(x)
        expected = _torch(name, x, torch.float64)[0]
        np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-30)
    assert calls == []


@pytest.mark.parametrize("name", ["sigmoid", "silu", "tanh"])
def test_recomputed_gives_forwards_bits(name):
    x = _input(1)  # 65,536 elements: the compiled loops
    w = (np.random.default_rng(2).standard_normal((8, 8)) / 3).astype(np.float32)

    def step(checkpointing):
        backend = rg.Autodiff(inner_backend(), checkpointing)
        weight = rg.tensor(w, backend=backend).require_grad()
        h = rg.tensor(np.nan_to_num(x, posinf=5.0, neginf=-5.0), backend=backend)
        for _ in range(3):
            h = _apply(name, h @ weight) @ weight.swap_dims(0, 1)
        grads = (h * h).sum().backward()
        return weight.grad(grads).numpy(), grads.recomputed_ops

    full, _ = step(rg.NoCheckpointing())
    budget, recomputed = step(rg.BudgetCheckpointing(4096))
    assert recomputed > 0
    np.testing.assert_array_equal(budget, full)
