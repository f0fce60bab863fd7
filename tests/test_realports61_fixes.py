"""Defects found by the interpretability and adversarial-robustness ports of round 61
(``tests/test_real_ports_470.py`` .. ``_475.py``), each checked against torch."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrograd as rg

SCHEDULES = [
    ("StepLR", {"step_size": 2, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [1, 3], "gamma": 0.1}),
    ("CyclicLR", {"base_lr": 0.0, "max_lr": 0.2, "step_size_up": 2.0, "step_size_down": 3.0}),
    ("OneCycleLR", {"max_lr": 1.0, "total_steps": 10}),
    ("CosineAnnealingLR", {"T_max": 5}),
    ("CosineAnnealingWarmRestarts", {"T_0": 3}),
    ("LambdaLR", {"lr_lambda": lambda epoch: 1 / (epoch + 1)}),
    ("MultiplicativeLR", {"lr_lambda": lambda epoch: 0.9}),
    ("LinearLR", {}),
]


def _rates_by_get_lr(lib, name, options):
    parameter = lib.nn.Parameter(lib.zeros(2))
    optimizer = lib.optim.SGD([parameter], lr=0.5, momentum=0.9)
    schedule = getattr(lib.optim.lr_scheduler, name)(optimizer, **options)
    rates = []
    for _ in range(6):
        with warnings.catch_warnings():  # (torch's: no optimizer.step before this one)
            warnings.filterwarnings("ignore", "Detected call of")
            schedule.step()
        with pytest.warns(UserWarning, match="get_last_lr"):
            rates.extend(schedule.get_lr())
        rates.extend(schedule.get_last_lr())
    return rates


@pytest.mark.parametrize(("name", "options"), SCHEDULES, ids=[name for name, _ in SCHEDULES])
def test_get_lr_of_the_schedules_is_torchs(name, options):
    """``scheduler.get_lr()[0]``, which fast_adversarial's training scripts log every epoch, was
    missing from every schedule (an ``AttributeError``); it is torch's form of the schedule at
    ``last_epoch`` (the recursive ones scale the current rate once more at a milestone, as
    torch's do), with torch's warning outside a step."""
    expected = _rates_by_get_lr(torch, name, options)
    got = _rates_by_get_lr(rg, name, options)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_a_schedule_of_ones_own_may_call_get_lr_through_super():
    """A warm-up written as a subclass whose ``get_lr`` returns ``super().get_lr()`` after the
    warm-up (the common ``GradualWarmupScheduler`` pattern) steps as torch's, without the
    warning (the call is within a step)."""

    def rates(lib):
        class WarmupCosine(lib.optim.lr_scheduler.CosineAnnealingLR):
            def get_lr(self):
                if self.last_epoch < 2:
                    return [base * (self.last_epoch + 1) / 2 for base in self.base_lrs]
                return super().get_lr()

        parameter = lib.nn.Parameter(lib.zeros(2))
        optimizer = lib.optim.SGD([parameter], lr=1.0)
        schedule = WarmupCosine(optimizer, T_max=6)
        seen = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.filterwarnings("ignore", "Detected call of")
            for _ in range(7):
                schedule.step()
                seen.append(optimizer.param_groups[0]["lr"])
        return seen

    assert rates(rg) == pytest.approx(rates(torch), rel=1e-12)


def test_reduce_on_plateau_refuses_get_lr_as_torch():
    """ReduceLROnPlateau has no form of the epoch: ``get_lr`` raises torch's
    ``NotImplementedError`` (it was an internal ``DTypeError`` about ``base_lrs``)."""
    optimizer = rg.optim.SGD([rg.nn.Parameter(rg.zeros(2))], lr=1.0)
    schedule = rg.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(NotImplementedError, match="get_last_lr"):
        schedule.get_lr()
    schedule.step(1.0)
    assert schedule.get_last_lr() == [1.0]
