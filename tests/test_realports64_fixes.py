"""The defects the optimizer ports of round 64 (``tests/test_real_ports_500.py``...) exposed, each
checked against torch directly."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import retrograd as rg


class _CountingSGD:
    """An optimizer of one's own that keeps a step count under a key of its own in
    ``self.state`` beside its parameters' (as facebookresearch/madgrad's MADGRAD does), for
    either library."""

    @staticmethod
    def make(lib):
        class CountingSGD(lib.optim.Optimizer):
            def __init__(self, params, lr=0.1):
                super().__init__(params, dict(lr=lr))

            def step(self, grads=None):
                if "k" not in self.state:
                    self.state["k"] = lib.tensor([0], dtype=lib.long)
                k = self.state["k"].item()
                for group in self.param_groups:
                    for p in group["params"]:
                        grad = p.grad if lib is torch else p.grad(grads)
                        state = self.state[p]
                        if "momentum" not in state:
                            state["momentum"] = lib.zeros_like(p)
                        state["momentum"].mul_(0.5).add_(grad)
                        p.data.add_(state["momentum"], alpha=-group["lr"] / (k + 1))
                self.state["k"] += 1

        return CountingSGD


def _trained(lib, steps, saved=None):
    """A linear model's weight and its optimizer's state dict after ``steps`` steps (from
    ``saved``, a state dict loaded into the fresh optimizer, when given)."""
    weight = lib.nn.Parameter(lib.tensor(np.array([[0.5, -1.0, 2.0]], np.float32)))
    optimizer = _CountingSGD.make(lib)([weight])
    if saved is not None:
        optimizer.load_state_dict(saved)
    inputs = lib.tensor(np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 1.0]], np.float32))
    for _ in range(steps):
        loss = (inputs @ weight.T).square().sum()
        if lib is torch:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        else:
            optimizer.step(loss.backward())
    return weight.detach().numpy().copy(), optimizer


def test_an_entry_of_the_optimizers_own_in_its_state_is_saved_and_loaded_as_torchs():
    """torch's ``state_dict`` keeps a key of ``self.state`` that is not a parameter (MADGRAD's
    ``self.state['k']``) under that key, in the state's order, and ``load_state_dict`` puts it
    back; retrograd's dropped it from the dict and refused it on loading ("parameters are
    numbered by integers"), so a resumed MADGRAD restarted its step count."""
    torch_weight, torch_optimizer = _trained(torch, 2)
    weight, optimizer = _trained(rg, 2)
    np.testing.assert_allclose(weight, torch_weight, rtol=1e-6)
    theirs, ours = torch_optimizer.state_dict(), optimizer.state_dict()
    assert list(theirs["state"]) == ["k", 0]
    assert list(ours["state"]) == list(theirs["state"])
    assert ours["state"]["k"].tolist() == theirs["state"]["k"].tolist() == [2]
    optimizer.state["k"] += 1  # (the saved count is a copy: the dict keeps the count saved)
    assert ours["state"]["k"].tolist() == [2]

    torch_resumed, torch_reloaded = _trained(torch, 2, saved=theirs)
    resumed, reloaded = _trained(rg, 2, saved=ours)
    assert reloaded.state["k"].tolist() == torch_reloaded.state["k"].tolist() == [4]
    np.testing.assert_allclose(resumed, torch_resumed, rtol=1e-6)


def test_a_parameter_number_no_group_lists_is_still_refused():
    """Only keys that name no parameter load as the optimizer's own: a number (or its digits,
    as a JSON round trip leaves them) of no parameter is a damaged state dict."""
    _, optimizer = _trained(rg, 1)
    saved = optimizer.state_dict()
    for bad in (7, "7"):
        damaged = {
            "state": {**saved["state"], bad: dict(saved["state"][0])},
            "param_groups": saved["param_groups"],
        }
        with pytest.raises(rg.InvalidArgumentError, match="which no group lists"):
            optimizer.load_state_dict(damaged)
    assert optimizer.state["k"].tolist() == [1]


def _copied_adam(lib):
    """An Adam written as optimizers copied from torch's own ``adam.py`` are (the repositories
    that vendor it: ``ParamsT`` annotations, ``@_use_grad_for_differentiable`` on ``step``, a
    0-d step count in ``_get_scalar_dtype()``, ``_get_value`` of it, the implementation picked
    by ``_default_to_fused_or_foreach``), for either library."""
    from importlib import import_module

    module = import_module(f"{lib.__name__}.optim.optimizer")
    params_t, use_grad = module.ParamsT, module._use_grad_for_differentiable
    get_value, scalar_dtype = module._get_value, module._get_scalar_dtype
    choose = module._default_to_fused_or_foreach

    class CopiedAdam(module.Optimizer):
        def __init__(self, params: params_t, lr: float = 1e-2, differentiable: bool = False):
            super().__init__(params, dict(lr=lr, betas=(0.9, 0.99), differentiable=differentiable))

        @use_grad
        def step(self, grads=None):
            self.seen_grad_mode = lib.is_grad_enabled()
            for group in self.param_groups:
                params = [p for p in group["params"]]
                self.chosen = choose(params, group["differentiable"], use_fused=False)
                beta1, beta2 = group["betas"]
                for p in params:
                    grad = p.grad if lib is torch else p.grad(grads)
                    state = self.state[p]
                    if len(state) == 0:
                        state["step"] = lib.tensor(0.0, dtype=scalar_dtype())
                        state["exp_avg"] = lib.zeros_like(p)
                        state["exp_avg_sq"] = lib.zeros_like(p)
                    state["step"] += 1
                    step = get_value(state["step"])
                    state["exp_avg"].lerp_(grad, 1 - beta1)
                    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    denom = (state["exp_avg_sq"] / (1 - beta2**step)).sqrt().add_(1e-8)
                    p.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1**step))

    return CopiedAdam


def test_an_optimizer_copied_from_torchs_sources_finds_its_helpers_and_steps_as_torch():
    """``torch.optim.optimizer``'s ``ParamsT``, ``StateDict``, ``_use_grad_for_differentiable``,
    ``_get_value``, ``_get_scalar_dtype`` and ``_default_to_fused_or_foreach``, which
    optimizers copied from torch's sources import, were missing (an ImportError at the
    import line)."""
    results = {}
    for lib in (torch, rg):
        weight = lib.nn.Parameter(lib.tensor(np.array([[0.5, -1.0, 2.0]], np.float32)))
        optimizer = _copied_adam(lib)([weight])
        inputs = lib.tensor(np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 1.0]], np.float32))
        for _ in range(3):
            loss = (inputs @ weight.T).square().sum()
            if lib is torch:
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            assert lib.is_grad_enabled()  # (restored after the step)
        state = optimizer.state[weight]
        results[lib] = (
            weight.detach().numpy().copy(),
            optimizer.seen_grad_mode,
            optimizer.chosen,
            str(state["step"].dtype).removeprefix("torch.").removeprefix("retrograd."),
            float(state["step"]),
        )
    theirs, ours = results[torch], results[rg]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)
    assert ours[1:] == theirs[1:] == (False, (False, False), "float32", 3.0)


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_use_grad_for_differentiable_records_for_a_differentiable_optimizer_and_restores(lib):
    """As torch's: recording on inside a ``differentiable=True`` optimizer's step, and the mode
    the step found back after it, also when the step raises."""
    module = __import__(f"{lib.__name__}.optim.optimizer", fromlist=["_"])
    seen = []

    class Raising(module.Optimizer):
        @module._use_grad_for_differentiable
        def step(self, grads=None):
            seen.append(lib.is_grad_enabled())
            raise ValueError("inside the step")

    weight = lib.nn.Parameter(lib.ones(2))
    optimizer = Raising([weight], dict(lr=0.1, differentiable=True))
    with lib.no_grad(), pytest.raises(ValueError, match="inside the step"):
        optimizer.step()
    with pytest.raises(ValueError, match="inside the step"):
        optimizer.step()
    assert lib.is_grad_enabled()
    assert seen == [True, True]
    assert module._get_scalar_dtype(is_fused=True) == lib.float32
    assert module.StateDict == dict[str, Any]
