"""Gaps against torch 2.13 closed together: the deprecated module backward hook, the
optimizers' implementation switches in their groups, the schedulers' state dicts,
ModuleList/Sequential indexing, mixed-dtype matrix products, the distribution families and
the constraint registry. Every expected value comes from torch."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import AutodiffError, DTypeError, RetrogradError


# -- 1. nn.Module.register_backward_hook -----------------------------------------------------------
def _numpy(value):
    if value is None:
        return None
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value.numpy()


def _hooked_call(lib, module, x_np, leaf_input, scale=None):
    """The hook's (grad_input, grad_output), the FutureWarnings of the call and the input's
    gradient, for torch (``lib`` torch) or retrograd."""
    seen = []

    def hook(mod, grad_input, grad_output):
        seen.append(([_numpy(g) for g in grad_input], [_numpy(g) for g in grad_output]))
        if scale is not None:
            return tuple(None if g is None else g * scale for g in grad_input)
        return None

    module.register_backward_hook(hook)
    if lib is torch:
        x = torch.tensor(x_np, requires_grad=True)
    else:
        x = rg.tensor(x_np).require_grad()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = module(x if leaf_input else x * 1)
    weights = lib.arange(y.numel(), dtype=lib.float32).reshape(tuple(y.shape))
    if lib is torch:
        (y * weights).sum().backward()
        x_grad = x.grad.numpy()
    else:
        x_grad = x.grad((y * weights).sum().backward()).numpy()
    messages = [str(w.message) for w in caught if w.category is FutureWarning]
    return seen, messages, x_grad


def _pair(torch_module, rg_module):
    state = {k: rg.tensor(v.detach().numpy()) for k, v in torch_module.state_dict().items()}
    rg_module.load_state_dict(state)
    return torch_module, rg_module


def _modules(kind):
    torch.manual_seed(0)
    tnn, rnn = torch.nn, rg.nn
    if kind == "linear":
        return _pair(tnn.Linear(3, 2), rnn.Linear(3, 2))
    if kind == "linear_no_bias":
        return _pair(tnn.Linear(3, 2, bias=False), rnn.Linear(3, 2, bias=False))
    if kind == "relu":
        return tnn.ReLU(), rnn.ReLU()
    if kind == "conv2d":
        return _pair(tnn.Conv2d(2, 3, 3), rnn.Conv2d(2, 3, 3))
    if kind == "sequential":
        return _pair(
            tnn.Sequential(tnn.Linear(3, 2), tnn.ReLU()),
            rnn.Sequential(rnn.Linear(3, 2), rnn.ReLU()),
        )
    return _pair(
        tnn.Sequential(tnn.ReLU(), tnn.Linear(3, 2)),
        rnn.Sequential(rnn.ReLU(), rnn.Linear(3, 2)),
    )


@pytest.mark.parametrize(
    "kind", ["linear", "linear_no_bias", "relu", "conv2d", "sequential", "relu_then_linear"]
)
@pytest.mark.parametrize("leaf_input", [True, False])
@pytest.mark.parametrize("scale", [None, 3.0])
def test_register_backward_hook_as_torch(kind, leaf_input, scale):
    torch_module, rg_module = _modules(kind)
    shape = (1, 2, 5, 5) if kind == "conv2d" else (4, 3)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    expected = _hooked_call(torch, torch_module, x, leaf_input, scale)
    got = _hooked_call(rg, rg_module, x, leaf_input, scale)
    (torch_seen, torch_warnings, torch_grad), (rg_seen, rg_warnings, rg_grad) = expected, got
    assert len(rg_seen) == len(torch_seen) == 1
    (t_in, t_out), (r_in, r_out) = torch_seen[0], rg_seen[0]
    assert [None if g is None else g.shape for g in r_in] == [
        None if g is None else g.shape for g in t_in
    ]
    for a, b in zip(t_in + t_out, r_in + r_out):
        if a is not None:
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    assert rg_warnings == torch_warnings
    np.testing.assert_allclose(rg_grad, torch_grad, rtol=1e-5, atol=1e-6)


def test_register_backward_hook_untracked_input_and_mixing_kinds():
    torch_module, rg_module = _modules("linear")
    x = np.ones((2, 3), np.float32)
    grads = {}
    for lib, module in ((torch, torch_module), (rg, rg_module)):

        def hook(module, grad_input, grad_output, lib=lib):
            grads[lib] = [g is None for g in grad_input]

        module.register_backward_hook(hook)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module(lib.tensor(x)).sum().backward()
    assert grads[rg] == grads[torch] == [False, True, False]
    with pytest.raises(RuntimeError, match="Cannot use both") as caught:
        rg_module.register_full_backward_hook(lambda m, gi, go: None)
    assert isinstance(caught.value, AutodiffError)
    other = rg.nn.ReLU()
    other.register_full_backward_hook(lambda m, gi, go: None)
    with pytest.raises(AutodiffError, match="Cannot use both"):
        other.register_backward_hook(lambda m, gi, go: None)
