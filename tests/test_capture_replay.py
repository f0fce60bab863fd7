"""What a replay does around the recorded calls: the optimizer step bound at capture
(``retrograd.optim.bound.BoundStep``: the update kernels called directly) and the state checks
answered from the last walk of the module trees while nothing changed.

Every expected value is an eager twin's (same weights, same batches, eager steps); every
equality is exact. The changes a replay must see (a hyper-parameter edited in a group, a mode,
a parameter or group replaced) are made *after* replays ran, when the checks answer from what
they read before.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.optim import Optimizer
from test_capture_training import assert_same_optimizer_state as assert_same_state
from test_capture_training import assert_same_parameters

STEPS = 4


def model_and_optimizer(make_optimizer, dropout=0.0):
    rg.seed(2)
    layers = [nn.Linear(4, 6), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    model = nn.Sequential(*layers, nn.Linear(6, 2))
    return model, make_optimizer(model)


def step_for(model, opt):
    def train_step(x):
        loss = model(x).square().mean()
        opt.step(loss.backward())
        return loss

    return train_step


def data(n=STEPS, seed=3):
    rng = np.random.default_rng(seed)
    return [rg.tensor(rng.standard_normal((5, 4)).astype(np.float32)) for _ in range(n)]


class _CountingStep:
    """Counts the calls of ``Optimizer.step_parameter`` (the eager path) while active."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = Optimizer.step_parameter

        def counting(optimizer, parameter, grad, group):
            self.calls += 1
            return original(optimizer, parameter, grad, group)

        monkeypatch.setattr(Optimizer, "step_parameter", counting)


OPTIMIZERS = {
    "sgd": lambda m: optim.SGD(m.parameters(), lr=0.05),
    "sgd-momentum": lambda m: optim.SGD(m, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda m: optim.Adam(m, lr=0.01, weight_decay=1e-3),
    "adamw": lambda m: optim.AdamW(m, lr=0.01),
    "rmsprop": lambda m: optim.RMSprop(m, lr=0.01, momentum=0.5, centered=True),
    "nadam": lambda m: optim.NAdam(m, lr=0.01),  # no fused kernel: the eager path
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_bound_step_equals_eager_steps_with_hyper_parameters_edited_between(name, monkeypatch):
    (eager, eager_opt), (captured, captured_opt) = (
        model_and_optimizer(OPTIMIZERS[name]),
        model_and_optimizer(OPTIMIZERS[name]),
    )
    batches = data()

    def edit(opt, it):  # a schedule, and an edit of another hyper-parameter, between steps
        for group in opt.param_groups:
            group["lr"] = group["lr"] * 0.5
            group["weight_decay"] = 0.01 * it

    expected = []
    for it, x in enumerate(batches):
        edit(eager_opt, it)
        expected.append(step_for(eager, eager_opt)(x).numpy())
    edit(captured_opt, 0)
    step = rg.capture(step_for(captured, captured_opt), batches[0], state=[captured_opt])
    counting = _CountingStep(monkeypatch)
    got = [step.result.numpy()]
    for it, x in enumerate(batches[1:], start=1):
        edit(captured_opt, it)
        got.append(step(x).numpy())
    assert all(np.array_equal(a, b) for a, b in zip(expected, got))
    assert_same_parameters(eager, captured)
    assert_same_state(eager_opt, captured_opt)
    # the kernels were called directly, except for the optimizer that has none
    parameters = len(list(captured.parameters()))
    assert counting.calls == (parameters * (STEPS - 1) if name == "nadam" else 0)


def test_references_to_values_and_buffers_see_what_they_see_after_eager_steps():
    # held references decide between writing in place and making new arrays
    # (optim.sole_reference): a replay's step must leave each one as an eager step does
    (eager, eager_opt), (captured, captured_opt) = (
        model_and_optimizer(OPTIMIZERS["sgd-momentum"]),
        model_and_optimizer(OPTIMIZERS["sgd-momentum"]),
    )
    batches = data()
    step_for(eager, eager_opt)(batches[0])
    step = rg.capture(step_for(captured, captured_opt), batches[0], state=[captured_opt])

    def hold(model, opt):
        weight, bias = model[0].weight, model[2].bias
        return [
            weight.detach(),
            opt.state[bias]["momentum_buffer"],
            rg.tensor(model[2].weight.numpy()),
        ]

    held = [hold(eager, eager_opt), hold(captured, captured_opt)]
    for x in batches[1:]:
        step_for(eager, eager_opt)(x)
        step(x)
    for a, b in zip(*held):
        assert np.array_equal(a.numpy(), b.numpy())
    assert_same_parameters(eager, captured)
    assert_same_state(eager_opt, captured_opt)


def test_a_fresh_leaf_after_each_bound_step_as_after_an_eager_step():
    model, opt = model_and_optimizer(OPTIMIZERS["adam"])
    batches = data()
    step = rg.capture(step_for(model, opt), batches[0], state=[opt])
    grads = model(batches[1]).sum().backward()  # gradients of the values before the replay
    assert model[0].weight.grad(grads) is not None
    step(batches[1])
    assert model[0].weight.grad(grads) is None  # not mistaken for one of the new value
    assert model[0].weight.is_leaf and model[0].weight.requires_grad


def test_changes_after_replays_are_seen_by_the_checks():
    model, opt = model_and_optimizer(OPTIMIZERS["sgd-momentum"], dropout=0.5)
    x = data(n=1)[0]
    step = rg.capture(step_for(model, opt), x, state=[opt], recapture=False)
    step(x)
    step(x)  # the checks now answer from the last walk
    model.eval()
    with pytest.raises(rg.CaptureError, match=r"mode changed.*'2'"):
        step(x)
    model.train()
    step(x)
    model[2].train(False)  # a sub-module's mode alone
    with pytest.raises(rg.CaptureError, match=r"mode changed"):
        step(x)
    model[2].train(True)
    step(x)
    # a parameter replaced by another object (the optimizer holds the old one), then put back
    bias = model[3].bias
    model[3].bias = nn.Parameter(rg.zeros((2,)))
    with pytest.raises(rg.CaptureError, match=r"the state has 5 parameters, 4 at capture"):
        step(x)
    model[3].bias = bias
    step(x)
    # a sub-module added; a group added
    model.extra = nn.Linear(1, 1)
    with pytest.raises(rg.CaptureError, match=r"changed since capture \(in the module tree\)"):
        step(x)
    del model.extra
    step(x)
    opt.param_groups[0]["params"].append(rg.zeros((2,)).require_grad())
    with pytest.raises(rg.CaptureError, match=r"parameter groups of SGD changed"):
        step(x)


def test_an_optimizer_with_a_step_of_its_own_is_called_at_every_replay():
    class Logged(optim.SGD):
        calls = 0

        def step(self, grads):
            type(self).calls += 1
            super().step(grads)

    (eager, eager_opt), (captured, captured_opt) = (
        model_and_optimizer(lambda m: optim.SGD(m, lr=0.05, momentum=0.9)),
        model_and_optimizer(lambda m: Logged(m, lr=0.05, momentum=0.9)),
    )
    batches = data()
    for x in batches:
        step_for(eager, eager_opt)(x)
    step = rg.capture(step_for(captured, captured_opt), batches[0], state=[captured_opt])
    for x in batches[1:]:
        step(x)
    assert Logged.calls == STEPS
    assert_same_parameters(eager, captured)
    assert_same_state(eager_opt, captured_opt)


def test_parameters_reordered_in_their_group_after_capture_still_step_as_eager():
    (eager, eager_opt), (captured, captured_opt) = (
        model_and_optimizer(OPTIMIZERS["adam"]),
        model_and_optimizer(OPTIMIZERS["adam"]),
    )
    batches = data()
    step_for(eager, eager_opt)(batches[0])
    step = rg.capture(step_for(captured, captured_opt), batches[0], state=[captured_opt])
    for opt in (eager_opt, captured_opt):  # same sizes: the group check passes
        opt.param_groups[0]["params"].reverse()
    for x in batches[1:]:
        step_for(eager, eager_opt)(x)
        step(x)
    assert_same_parameters(eager, captured)


def test_a_module_with_a_walk_of_its_own_is_walked_at_every_replay():
    class Hiding(nn.Module):
        """Lists its bias only while ``show_bias`` is set (its own named_parameters)."""

        def __init__(self):
            super().__init__()
            self.inner = nn.Linear(4, 2)
            self.show_bias = True

        def named_parameters(self, prefix="", recurse=True):
            for name, p in super().named_parameters(prefix, recurse):
                if self.show_bias or not name.endswith("bias"):
                    yield name, p

        def forward(self, x):
            return self.inner(x)

    model = Hiding()
    opt = optim.SGD(model, lr=0.1)
    x = data(n=1)[0]
    step = rg.capture(step_for(model, opt), x, state=[opt])
    step(x)
    step(x)
    model.show_bias = False  # no dict changed: only its own walk tells
    with pytest.raises(rg.CaptureError, match=r"parameters of Hiding changed"):
        step(x)
