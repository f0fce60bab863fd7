"""OneCycleLR, CyclicLR, CosineAnnealingWarmRestarts, SequentialLR and ChainedScheduler
against torch's: the same optimizer configuration (two parameter groups), the learning rates
and momenta (or betas) of every group after every step equal to ~1e-12, and a state-dict
round trip that resumes the same sequence."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.errors import InvalidArgumentError
from retrograd.optim import lr_scheduler

torch = pytest.importorskip("torch")
T = torch.optim.lr_scheduler

GROUP_LRS = (0.1, 0.03)


def make_ours(kind: str):
    first, second = nn.Linear(2, 2, dtype="float64"), nn.Linear(2, 1, dtype="float64")
    groups = [{"params": list(first.parameters()), "lr": GROUP_LRS[0]},
              {"params": list(second.parameters()), "lr": GROUP_LRS[1]}]  # fmt: skip
    if kind == "adam":
        return optim.Adam(groups, lr=0.1, betas=(0.9, 0.999))
    return optim.SGD(groups, lr=0.1, momentum=0.9)


def make_torch(kind: str):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(2))], "lr": GROUP_LRS[0]},
              {"params": [torch.nn.Parameter(torch.zeros(1))], "lr": GROUP_LRS[1]}]  # fmt: skip
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.1, betas=(0.9, 0.999))
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def snapshot(optimizer) -> list[float]:
    """Every group's lr, and its momentum or beta1."""
    values = []
    for group in optimizer.param_groups:
        values.append(float(group["lr"]))
        values.append(float(group["betas"][0] if "betas" in group else group["momentum"]))
    return values


def sequences(ours_factory, torch_factory, kind: str, steps: int, epochs=None):
    """The snapshots after construction and after each step, ours and torch's."""
    ours_optimizer, torch_optimizer = make_ours(kind), make_torch(kind)
    ours, theirs = ours_factory(ours_optimizer), torch_factory(torch_optimizer)
    ours_seq, torch_seq = [snapshot(ours_optimizer)], [snapshot(torch_optimizer)]
    for i in range(steps):
        torch_optimizer.step()
        if epochs is None:
            theirs.step()
            ours.step()
        else:
            theirs.step(epochs[i])
            ours.step(epochs[i])
        ours_seq.append(snapshot(ours_optimizer))
        torch_seq.append(snapshot(torch_optimizer))
        assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12, abs=1e-15)
    return np.array(ours_seq), np.array(torch_seq), ours, theirs


CASES = {
    "onecycle-cos": ("sgd", 100, lambda m: lambda o: m.OneCycleLR(o, max_lr=1.0, total_steps=100)),
    "onecycle-linear-adam": ("adam", 60, lambda m: lambda o: m.OneCycleLR(
        o, max_lr=[0.5, 0.2], epochs=6, steps_per_epoch=10, anneal_strategy="linear")),
    "onecycle-three-phase": ("sgd", 80, lambda m: lambda o: m.OneCycleLR(
        o, max_lr=0.4, total_steps=80, pct_start=0.25, three_phase=True, div_factor=10.0,
        final_div_factor=100.0, base_momentum=[0.8, 0.7], max_momentum=0.99)),
    "onecycle-no-momentum": ("sgd", 30, lambda m: lambda o: m.OneCycleLR(
        o, max_lr=0.3, total_steps=30, cycle_momentum=False)),
    "cyclic-triangular": ("sgd", 70, lambda m: lambda o: m.CyclicLR(
        o, base_lr=0.01, max_lr=[0.1, 0.05], step_size_up=7, step_size_down=4)),
    "cyclic-triangular2": ("sgd", 70, lambda m: lambda o: m.CyclicLR(
        o, base_lr=0.001, max_lr=0.1, step_size_up=5, mode="triangular2")),
    "cyclic-exp-range-adam": ("adam", 70, lambda m: lambda o: m.CyclicLR(
        o, base_lr=0.001, max_lr=0.1, step_size_up=6, mode="exp_range", gamma=0.97,
        base_momentum=0.85, max_momentum=0.95)),
    "cyclic-scale-fn": ("sgd", 40, lambda m: lambda o: m.CyclicLR(
        o, base_lr=0.01, max_lr=0.2, step_size_up=3, scale_fn=lambda x: 1 / (1 + 0.1 * x),
        scale_mode="iterations", cycle_momentum=False)),
    "warm-restarts": ("sgd", 50, lambda m: lambda o: m.CosineAnnealingWarmRestarts(
        o, T_0=4, eta_min=1e-3)),
    "warm-restarts-mult": ("sgd", 60, lambda m: lambda o: m.CosineAnnealingWarmRestarts(
        o, T_0=3, T_mult=2, eta_min=0.0)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_cyclic_schedule_matches_torch(case):
    kind, steps, factory = CASES[case]
    ours, expected, _, _ = sequences(factory(lr_scheduler), factory(T), kind, steps)
    assert np.ptp(ours[:, 0]) > 0  # the schedule moved
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("t_mult", [1, 2, 3])
def test_warm_restarts_fractional_epochs(t_mult):
    """``step(epoch + i / iters)`` each batch, as torch's documentation shows."""
    epochs = [epoch + i / 7 for epoch in range(12) for i in range(7)]
    epochs += [3.5, 0.25, 40.0, 17.75]  # jumps back and forth as well
    factory = lambda m: lambda o: m.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=t_mult,  # noqa: E731
                                                                 eta_min=0.002)  # fmt: skip
    ours, expected, ours_s, theirs_s = sequences(
        factory(lr_scheduler), factory(T), "sgd", len(epochs), epochs
    )
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-15)
    assert (ours_s.last_epoch, ours_s.T_i) == (theirs_s.last_epoch, theirs_s.T_i)
    assert ours_s.T_cur == pytest.approx(theirs_s.T_cur, rel=1e-12)


COMPOSITES = {
    "sequential-warmup-cosine": lambda m: lambda o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.1, total_iters=5),
            m.CosineAnnealingLR(o, T_max=20, eta_min=1e-4)], milestones=[5]),
    "sequential-three": lambda m: lambda o: m.SequentialLR(
        o, [m.ConstantLR(o, factor=0.5, total_iters=3), m.ExponentialLR(o, gamma=0.9),
            m.StepLR(o, step_size=4, gamma=0.5)], milestones=[4, 12]),
    "sequential-lambda": lambda m: lambda o: m.SequentialLR(
        o, [m.LambdaLR(o, lambda e: (e + 1) / 4), m.MultiStepLR(o, [3, 9], gamma=0.3)],
        milestones=[4]),
    "chained-constant-exponential": lambda m: lambda o: m.ChainedScheduler(
        [m.ConstantLR(o, factor=0.1, total_iters=2), m.ExponentialLR(o, gamma=0.9)]),
    "chained-linear-cosine-multistep": lambda m: lambda o: m.ChainedScheduler(
        [m.LinearLR(o, start_factor=0.2, total_iters=4),
         m.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
         m.MultiStepLR(o, milestones=[5, 11], gamma=0.5)]),
    "chained-polynomial-step-multiplicative": lambda m: lambda o: m.ChainedScheduler(
        [m.PolynomialLR(o, total_iters=15, power=2.0), m.StepLR(o, step_size=3, gamma=0.7),
         m.MultiplicativeLR(o, lambda e: 0.99)]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(COMPOSITES))
def test_composite_schedule_matches_torch(case):
    factory = COMPOSITES[case]
    ours, expected, _, _ = sequences(factory(lr_scheduler), factory(T), "sgd", 30)
    assert np.ptp(ours[:, 0]) > 0
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-15)


ROUND_TRIPS = {
    "onecycle": (CASES["onecycle-three-phase"][2], 80),
    "cyclic": (CASES["cyclic-exp-range-adam"][2], 50),
    "warm-restarts": (CASES["warm-restarts-mult"][2], 40),
    "sequential": (COMPOSITES["sequential-warmup-cosine"], 30),
    "chained": (COMPOSITES["chained-linear-cosine-multistep"], 30),
}


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_state_dict_round_trip_resumes_the_sequence(case):
    factory, steps = ROUND_TRIPS[case]
    factory = factory(lr_scheduler)
    kind = "adam" if case == "cyclic" else "sgd"
    optimizer = make_ours(kind)
    schedule = factory(optimizer)
    for _ in range(steps // 2):
        schedule.step()
    saved_optimizer, saved = optimizer.state_dict(), schedule.state_dict()
    assert "optimizer" not in saved
    continued = []
    for _ in range(steps - steps // 2):
        schedule.step()
        continued.append(snapshot(optimizer))
    fresh_optimizer = make_ours(kind)
    fresh = factory(fresh_optimizer)
    fresh_optimizer.load_state_dict(saved_optimizer)
    fresh.load_state_dict(saved)
    resumed = []
    for _ in range(steps - steps // 2):
        fresh.step()
        resumed.append(snapshot(fresh_optimizer))
    assert resumed == continued


def test_one_cycle_refuses_a_step_past_total_steps():
    optimizer = make_ours("sgd")
    schedule = lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=3)
    for _ in range(3):
        schedule.step()
    with pytest.raises(InvalidArgumentError, match="total steps is 3"):
        schedule.step()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda o: lr_scheduler.OneCycleLR(o, max_lr=1.0), "total_steps OR"),
        (lambda o: lr_scheduler.OneCycleLR(o, 1.0, 10, pct_start=1), "pct_start"),
        (lambda o: lr_scheduler.OneCycleLR(o, 1.0, 10, anneal_strategy="exp"), "anneal"),
        (lambda o: lr_scheduler.OneCycleLR(o, [1.0], 10), "same length"),
        (lambda o: lr_scheduler.CyclicLR(o, 0.1, 1.0, mode="sine"), "invalid"),
        (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=0), "T_0"),
        (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=1.5), "T_mult"),
        (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2)], [3]), "milestones"),
        (lambda o: lr_scheduler.ChainedScheduler([]), "at least one"),
    ],
)
def test_bad_arguments_raise_clear_errors(build, message):
    with pytest.raises(InvalidArgumentError, match=message):
        build(make_ours("sgd"))


def test_cycling_momentum_needs_momentum_or_betas():
    optimizer = optim.Adagrad(nn.Linear(1, 1), lr=0.1)
    with pytest.raises(InvalidArgumentError, match="cycle_momentum"):
        lr_scheduler.OneCycleLR(optimizer, max_lr=1.0, total_steps=10)
    schedule = lr_scheduler.CyclicLR(optimizer, 0.01, 0.1, step_size_up=2, cycle_momentum=False)
    assert math.isclose(schedule.step(), 0.055)


def test_members_must_share_the_optimizer():
    first, second = make_ours("sgd"), make_ours("sgd")
    schedules = [lr_scheduler.StepLR(first, 2), lr_scheduler.StepLR(second, 2)]
    with pytest.raises(InvalidArgumentError, match="same optimizer"):
        lr_scheduler.ChainedScheduler(schedules)
    with pytest.raises(InvalidArgumentError, match="ReduceLROnPlateau"):
        lr_scheduler.SequentialLR(
            first, [lr_scheduler.StepLR(first, 2), lr_scheduler.ReduceLROnPlateau(first)], [2]
        )


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_training_with_one_cycle_gives_torch_parameters(kind):
    """The cycled learning rate and momentum (or beta1) reach the optimizer's update."""
    torch.manual_seed(0)
    theirs_layer = torch.nn.Linear(3, 2).double()
    ours_layer = nn.Linear(3, 2).double()
    ours_layer.load_state_dict({k: v.numpy() for k, v in theirs_layer.state_dict().items()})
    if kind == "sgd":
        theirs_opt = torch.optim.SGD(theirs_layer.parameters(), lr=0.1, momentum=0.9)
        ours_opt = optim.SGD(ours_layer.parameters(), lr=0.1, momentum=0.9)
    else:
        theirs_opt = torch.optim.Adam(theirs_layer.parameters(), lr=0.1)
        ours_opt = optim.Adam(ours_layer.parameters(), lr=0.1)
    theirs_schedule = T.OneCycleLR(theirs_opt, max_lr=0.5, total_steps=20)
    ours_schedule = lr_scheduler.OneCycleLR(ours_opt, max_lr=0.5, total_steps=20)
    x = np.random.default_rng(0).standard_normal((4, 3))
    for _ in range(20):
        theirs_opt.zero_grad()
        (theirs_layer(torch.tensor(x)) ** 2).sum().backward()
        theirs_opt.step()
        theirs_schedule.step()
        ours_opt.step((ours_layer(rg.tensor(x)) ** 2).sum().backward())
        ours_schedule.step()
    for name, value in theirs_layer.state_dict().items():
        np.testing.assert_allclose(ours_layer.state_dict()[name], value.numpy(), rtol=1e-10)


@pytest.mark.parametrize(
    "name, options",
    [
        ("StepLR", {"step_size": 2}),
        ("ExponentialLR", {"gamma": 0.7}),
        ("OneCycleLR", {"max_lr": 1.0, "total_steps": 9}),
    ],
)
def test_step_count_last_lr_and_the_deprecated_epoch_argument(name, options):
    """torch's bookkeeping (``_step_count``, ``_last_lr`` in the state dict; ``get_last_lr``
    is what the last step set, not a rate changed by hand since) and ``step(epoch)``."""
    import warnings

    ours_optimizer, theirs_optimizer = make_ours("sgd"), make_torch("sgd")
    ours = getattr(lr_scheduler, name)(ours_optimizer, **options)
    theirs = getattr(T, name)(theirs_optimizer, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "optimizer.step() before lr_scheduler.step()"
        for _ in range(3):
            ours.step()
            theirs.step()
    assert ours._step_count == theirs._step_count == 4
    assert ours.state_dict()["_last_lr"] == pytest.approx(
        theirs.state_dict()["_last_lr"], rel=1e-12
    )
    ours_optimizer.param_groups[0]["lr"] = theirs_optimizer.param_groups[0]["lr"] = 5.0
    assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)
    if name != "OneCycleLR":  # torch's OneCycleLR has no closed form to jump to
        with pytest.warns(UserWarning, match="epoch parameter"):
            ours.step(6)
        with pytest.warns(UserWarning, match="epoch parameter"):
            theirs.step(6)
        assert ours.get_last_lr() == pytest.approx(theirs.get_last_lr(), rel=1e-12)
        assert ours.last_epoch == theirs.last_epoch == 6
