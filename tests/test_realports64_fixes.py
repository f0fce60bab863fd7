"""The defects the optimizer ports of round 64 (``tests/test_real_ports_500.py``...) exposed, each
checked against torch directly."""

from __future__ import annotations

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
