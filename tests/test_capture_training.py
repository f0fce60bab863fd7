"""Capture of the training loops people write: optimizers over parameter groups, learning-rate
schedules that set ``lr`` between steps, global-norm clipping inside the step, and nanoGPT's
``train.py`` step (AdamW over ``configure_optimizers``' two groups, ``clip_grad_norm_`` at 1.0).

Every comparison is against eager steps of a twin model from the same weights: N eager steps
against a capture plus N-1 replays, bit for bit (the default fusion computes what the calls
did, to the bit). The expected values are always the eager steps'.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.app.models import GPT, GPTConfig

STEPS = 5


def assert_same_parameters(a, b):
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def assert_same_optimizer_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for key in sa["state"]:
        for name, value in sa["state"][key].items():
            assert np.array_equal(np.asarray(value), np.asarray(sb["state"][key][name])), name


# -- nanoGPT's train.py, ported -------------------------------------------------------------------
CONFIG = GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, n_embd=16)
LR, MIN_LR, WARMUP, DECAY_ITERS = 6e-3, 6e-4, 2, 6


def configure_optimizers(model, weight_decay=0.1, learning_rate=LR, betas=(0.9, 0.95)):
    """nanoGPT's ``GPT.configure_optimizers``: weight decay on the 2-d parameters only."""
    params = {name: p for name, p in model.named_parameters()}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return optim.AdamW(groups, lr=learning_rate, betas=betas)


def get_lr(it):
    """nanoGPT's schedule: linear warm-up, then cosine decay to ``MIN_LR``."""
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > DECAY_ITERS:
        return MIN_LR
    ratio = (it - WARMUP) / (DECAY_ITERS - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def nanogpt_twins(config=CONFIG):
    rg.seed(0)
    first = GPT(config)
    second = GPT(config)
    second.load_state_dict(first.state_dict())
    return (first, configure_optimizers(first)), (second, configure_optimizers(second))


def nanogpt_step_for(model, optimizer, grad_clip=1.0):
    def train_step(X, Y):  # noqa: N803  (nanoGPT's names)
        _, loss = model(X, Y)
        grads = loss.backward()
        norm = nn.utils.clip_grad_norm_(grads, model.parameters(), grad_clip)
        optimizer.step(grads)
        return loss, norm

    return train_step


def token_batches(n=STEPS, batch=3, config=CONFIG, seed=1):
    rng = np.random.default_rng(seed)
    data = rng.integers(0, config.vocab_size, (n, batch, config.block_size + 1))
    return [(rg.tensor(d[:, :-1].copy()), rg.tensor(d[:, 1:].copy())) for d in data]


def square_loss_step_for(model, opt):
    def train_step(x):
        loss = model(x).square().mean()
        opt.step(loss.backward())
        return loss

    return train_step


def set_lr(optimizer, lr):
    for group in optimizer.param_groups:
        group["lr"] = lr


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_nanogpt_train_step_captured_equals_eager_over_several_steps(dropout):
    config = GPTConfig(**{**CONFIG.__dict__, "dropout": dropout})
    (eager, eager_opt), (captured, captured_opt) = nanogpt_twins(config)
    data = token_batches(config=config)
    rg.seed(7)
    expected = []
    for it, (X, Y) in enumerate(data):  # noqa: N806
        set_lr(eager_opt, get_lr(it))
        loss, norm = nanogpt_step_for(eager, eager_opt)(X, Y)
        assert isinstance(norm, rg.Tensor)  # eager too: torch's 0-d tensor, nothing read
        expected.append((loss.numpy(), norm.item()))
    rg.seed(7)
    set_lr(captured_opt, get_lr(0))
    step = rg.capture(nanogpt_step_for(captured, captured_opt), *data[0], state=[captured_opt])
    got = [step.result]
    for it, (X, Y) in enumerate(data[1:], start=1):  # noqa: N806
        set_lr(captured_opt, get_lr(it))  # the schedule, between replays
        got.append(step(X, Y))
    for (loss, norm), (got_loss, got_norm) in zip(expected, got):
        assert isinstance(got_norm, rg.Tensor) and got_norm.shape == ()  # no host read inside
        assert np.array_equal(loss, got_loss.numpy())
        assert got_norm.item() == norm
    assert_same_parameters(eager, captured)
    assert_same_optimizer_state(eager_opt, captured_opt)
    assert [g["lr"] for g in captured_opt.param_groups] == [get_lr(STEPS - 1)] * 2
    assert captured.wte.weight is captured.lm_head.weight  # tying survives the replays


def test_grouped_optimizer_as_the_only_state_and_per_group_learning_rates():
    def make():
        rg.seed(3)
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
        groups = [
            {"params": model[0].parameters(), "lr": 0.05, "momentum": 0.9},
            {"params": model[2].parameters(), "lr": 0.01},
        ]
        return model, optim.SGD(groups, lr=0.02)

    (eager, eager_opt), (captured, captured_opt) = make(), make()

    data = [rg.random((5, 6)) for _ in range(STEPS)]
    schedules = [optim.StepLR(eager_opt, 2, gamma=0.5), optim.StepLR(captured_opt, 2, gamma=0.5)]
    for x in data:
        square_loss_step_for(eager, eager_opt)(x)
        schedules[0].step()
    step = rg.capture(square_loss_step_for(captured, captured_opt), data[0], state=[captured_opt])
    schedules[1].step()
    for x in data[1:]:
        step(x)
        schedules[1].step()
    assert [g["lr"] for g in captured_opt.param_groups] == [0.05 * 0.25, 0.01 * 0.25]
    assert_same_parameters(eager, captured)
    assert_same_optimizer_state(eager_opt, captured_opt)


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda p: optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda p: optim.Adam(p, lr=0.01, weight_decay=1e-3),
        lambda p: optim.AdamW(p, lr=0.01),
        lambda p: optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    ],
    ids=["sgd", "adam", "adamw", "rmsprop"],
)
def test_every_optimizer_over_a_parameter_list(make_optimizer):
    def make():
        rg.seed(4)
        model = nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 3))
        return model, make_optimizer(list(model.parameters()))

    (eager, eager_opt), (captured, captured_opt) = make(), make()

    data = [rg.random((3, 4)) for _ in range(STEPS)]
    expected = [square_loss_step_for(eager, eager_opt)(x).numpy() for x in data]
    step = rg.capture(square_loss_step_for(captured, captured_opt), data[0], state=[captured_opt])
    got = [step.result.numpy()] + [step(x).numpy() for x in data[1:]]
    assert all(np.array_equal(a, b) for a, b in zip(expected, got))
    assert_same_parameters(eager, captured)
    assert_same_optimizer_state(eager_opt, captured_opt)


def test_clipping_inside_a_captured_step_returns_the_norm_as_a_tensor_equal_to_eager():
    def make():
        rg.seed(5)
        model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        return model, optim.SGD(model, lr=0.1)

    (eager, eager_opt), (captured, captured_opt) = make(), make()

    def step_for(model, opt, max_norm):
        def train_step(x):
            grads = (model(x) * 10.0).square().sum().backward()
            norm = optim.clip_grad_norm(grads, model, max_norm)
            opt.step(grads)
            return norm

        return train_step

    data = [rg.random((4, 3)) for _ in range(STEPS)]
    expected = [step_for(eager, eager_opt, 0.5)(x) for x in data]
    step = rg.capture(step_for(captured, captured_opt, 0.5), data[0], state=[captured_opt])
    got = [step.result] + [step(x) for x in data[1:]]
    # torch's dtype: the float32 gradients'
    assert all(isinstance(norm, rg.Tensor) and norm.dtype == "float32" for norm in expected)
    assert all(isinstance(norm, rg.Tensor) and norm.dtype == "float32" for norm in got)
    expected = [norm.item() for norm in expected]
    assert [norm.item() for norm in got] == expected
    assert min(expected) > 0.5  # the clipping did clip
    assert_same_parameters(eager, captured)
    # outside capture too: the tensor, or a float when asked
    grads = eager(data[0]).sum().backward()
    assert isinstance(optim.clip_grad_norm(grads, eager, 1.0), rg.Tensor)
    assert isinstance(optim.clip_grad_norm(grads, eager, 1.0, as_tensor=False), float)


def test_a_nonfinite_check_inside_a_captured_step_is_a_host_read_and_refused():
    model = nn.Linear(3, 1)
    opt = optim.SGD(model, lr=0.1)

    def train_step(x):
        grads = model(x).sum().backward()
        optim.clip_grad_norm(grads, model, 1.0, error_if_nonfinite=True)
        opt.step(grads)

    with pytest.raises(rg.CaptureError, match="host"):
        rg.capture(train_step, rg.ones((2, 3)), state=[opt])


def test_replays_with_mismatched_shapes_are_refused_and_change_nothing():
    (_, _), (model, opt) = nanogpt_twins()
    data = token_batches(n=1)
    step = rg.capture(nanogpt_step_for(model, opt), *data[0], state=[opt], recapture=False)
    before = {k: v.copy() for k, v in model.state_dict().items()}
    steps_before = [s["step"] for s in opt.state.values()]
    X, Y = data[0]  # noqa: N806
    bad = [
        ((X[:2], Y[:2]), r"input 0 has shape \[2, 8\] int64.*captured with shape \[3, 8\]"),
        ((X[:, :5], Y[:, :5]), r"input 0 has shape \[3, 5\]"),
        ((X, Y[:, :5]), r"input 1 has shape \[3, 5\]"),
        ((X.float(), Y), r"input 0 has shape \[3, 8\] float32"),
        ((X,), r"expected 2 inputs"),
    ]
    for inputs, message in bad:
        with pytest.raises(rg.CaptureError, match=message):
            step(*inputs)
    after = model.state_dict()
    assert all(np.array_equal(before[k], after[k]) for k in before)
    assert [s["step"] for s in opt.state.values()] == steps_before
    # a parameter group that changes size is refused too
    opt.param_groups[1]["params"].append(rg.zeros((2,)).require_grad())
    with pytest.raises(rg.CaptureError, match=r"parameter groups of AdamW changed"):
        step(X, Y)
