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


# -- 2. the optimizers' implementation switches --------------------------------------------------
_OPTIMIZERS = [
    "ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam",
    "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam",
]  # fmt: skip


def _without_params(groups):
    return [{k: v for k, v in g.items() if k != "params"} for g in groups]


@pytest.mark.parametrize("name", _OPTIMIZERS)
def test_optimizer_defaults_and_groups_as_torch(name):
    made = {}
    for lib in (torch, rg):
        first, second = lib.nn.Parameter(lib.ones(2)), lib.nn.Parameter(lib.ones(3))
        groups = [{"params": [first]}]
        if name != "LBFGS":  # (one group only)
            groups.append({"params": [second], "lr": 0.5})
        made[lib] = getattr(lib.optim, name)(groups)
    ours, theirs = made[rg], made[torch]
    assert list(ours.defaults.items()) == list(theirs.defaults.items())
    for own, reference in zip(ours.param_groups, theirs.param_groups):
        assert list(own) == list(reference)
    saved, expected = ours.state_dict()["param_groups"], theirs.state_dict()["param_groups"]
    assert saved == expected


_SWITCHED = {
    "Adam": {"foreach": True, "decoupled_weight_decay": True},
    "AdamW": {"fused": True},
    "SGD": {"fused": True, "momentum": 0.9},
    "Adagrad": {"fused": True},
    "RMSprop": {"foreach": False},
    "NAdam": {"foreach": True, "decoupled_weight_decay": True},
    "Adafactor": {"foreach": True},
}


@pytest.mark.parametrize("name", sorted(_SWITCHED))
def test_optimizer_switches_round_trip_and_keep_the_numbers(name):
    settings = dict(_SWITCHED[name], lr=0.1)
    if name != "Adafactor":
        settings["weight_decay"] = 0.1
    start = np.random.default_rng(2).standard_normal((2, 3))
    results, groups = {}, {}
    for lib in (torch, rg):
        weight = lib.nn.Parameter(lib.tensor(start))
        optimizer = getattr(lib.optim, name)([weight], **settings)
        for _ in range(3):
            loss = (weight * weight * weight).sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
        results[lib] = np.array(weight.detach().numpy())
        groups[lib] = _without_params(optimizer.state_dict()["param_groups"])
    np.testing.assert_allclose(results[rg], results[torch], rtol=1e-12, atol=1e-14)
    assert groups[rg] == groups[torch]
    fresh = getattr(rg.optim, name)([rg.nn.Parameter(rg.tensor(start))], lr=0.1)
    saved = getattr(rg.optim, name)([rg.nn.Parameter(rg.tensor(start))], **settings)
    fresh.load_state_dict(saved.state_dict())
    assert _without_params(fresh.param_groups) == _without_params(saved.param_groups)


def test_optimizer_switches_refused_as_torch():
    weight = [rg.nn.Parameter(rg.ones(2))]
    with pytest.raises(RetrogradError, match="`fused` and `foreach` cannot be `True`"):
        rg.optim.Adam(weight, fused=True, foreach=True)
    with pytest.raises(RetrogradError, match="unexpected keyword.*fused"):
        rg.optim.RMSprop(weight, fused=True)
    with pytest.raises(RetrogradError, match="differentiable"):
        rg.optim.SGD(weight).add_param_group(
            {"params": [rg.nn.Parameter(rg.ones(1))], "differentiable": True}
        )
