"""Learning-rate schedules give torch 2.13's rates to the bit, step after step: torch's
``step()`` scales each group's current rate by the schedule's own factor (``lr * gamma``),
and StepLR, ExponentialLR, LinearLR and PolynomialLR computed that factor as a ratio of their
closed forms, an ulp or two away (ExponentialLR's third step: ``0.07480520100000003`` against
torch's ``...002``), a drift that grows with the steps. Checked alone, two schedules on one
optimizer, ``ChainedScheduler`` and ``SequentialLR``."""

from __future__ import annotations

import warnings

import pytest
import torch

import retrograd as rg

SCHEDULES = [
    ("StepLR", dict(step_size=3, gamma=0.7)),
    ("StepLR", dict(step_size=1, gamma=0.31)),
    ("MultiStepLR", dict(milestones=[2, 5, 5, 9], gamma=0.3)),
    ("ExponentialLR", dict(gamma=0.93)),
    ("CosineAnnealingLR", dict(T_max=7, eta_min=0.001)),
    ("LinearLR", dict(start_factor=0.3, total_iters=7)),
    ("LinearLR", dict(start_factor=0.9, end_factor=0.1, total_iters=11)),
    ("LinearLR", dict(total_iters=0)),
    ("ConstantLR", dict(factor=0.3, total_iters=4)),
    ("PolynomialLR", dict(total_iters=9, power=1.7)),
    ("PolynomialLR", dict(total_iters=0)),
    ("OneCycleLR", dict(max_lr=0.3, total_steps=60)),
    ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=4)),
    ("CosineAnnealingWarmRestarts", dict(T_0=3, T_mult=2, eta_min=0.01)),
]


def _pair(lr=0.1):
    theirs = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=lr, momentum=0.9)
    ours = rg.optim.SGD([rg.nn.Parameter(rg.ones((2,)))], lr=lr, momentum=0.9)
    return theirs, ours


def _rates(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


@pytest.mark.parametrize(("name", "options"), SCHEDULES, ids=lambda v: str(v))
def test_each_schedule_gives_torchs_rates_to_the_bit(name, options):
    theirs, ours = _pair()
    t = getattr(torch.optim.lr_scheduler, name)(theirs, **options)
    r = getattr(rg.optim.lr_scheduler, name)(ours, **options)
    assert _rates(ours) == _rates(theirs)
    for _ in range(40):
        t.step()
        r.step()
        assert _rates(ours) == _rates(theirs)
        assert r.get_last_lr() == t.get_last_lr()


@pytest.mark.parametrize(
    ("first", "second"),
    [(SCHEDULES[0], SCHEDULES[3]), (SCHEDULES[5], SCHEDULES[9]), (SCHEDULES[1], SCHEDULES[4])],
    ids=lambda v: v[0],
)
def test_schedules_chained_give_torchs_rates_to_the_bit(first, second):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for compose in ("together", "chained"):
            theirs, ours = _pair()
            made = []
            for lib, optimizer in ((torch, theirs), (rg, ours)):
                a = getattr(lib.optim.lr_scheduler, first[0])(optimizer, **first[1])
                b = getattr(lib.optim.lr_scheduler, second[0])(optimizer, **second[1])
                made.append(
                    [a, b]
                    if compose == "together"
                    else [lib.optim.lr_scheduler.ChainedScheduler([a, b])]
                )
            for _ in range(30):
                for schedule in made[0]:
                    schedule.step()
                for schedule in made[1]:
                    schedule.step()
                assert _rates(ours) == _rates(theirs), compose


def test_sequential_schedules_give_torchs_rates_to_the_bit():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs, ours = _pair()
        made = []
        for lib, optimizer in ((torch, theirs), (rg, ours)):
            warmup = lib.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=5)
            decay = lib.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9)
            made.append(lib.optim.lr_scheduler.SequentialLR(optimizer, [warmup, decay], [5]))
        for _ in range(30):
            made[0].step()
            made[1].step()
            assert _rates(ours) == _rates(theirs)
