"""The defects round 25 of the differential fuzzer (``tests/fuzz25_cases.py``) found, each
against torch's result."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _rates_and_parameters(lib, make_schedules, steps, reload_at=-1):
    """SGD on a quadratic under schedules stepped one after the other (torch's chaining);
    the optimizer and schedules rebuilt from their state dicts after step ``reload_at``."""
    p = lib.nn.Parameter(lib.tensor([1.0, -2.0], dtype=lib.float64))

    def build():
        opt = lib.optim.SGD([p], lr=0.1, momentum=0.5)
        return opt, make_schedules(lib.optim.lr_scheduler, opt)

    opt, schedules = build()
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(steps):
            loss = ((p - 0.5) ** 2).sum()
            if lib is torch:
                opt.zero_grad()
                loss.backward()
                opt.step()
            else:
                opt.step(loss.backward())
            for schedule in schedules:
                schedule.step()
            out.append(opt.param_groups[0]["lr"])
            out.extend(p.detach().numpy().tolist())
            if k == reload_at:
                saved = copy.deepcopy(opt.state_dict())
                saved_schedules = [copy.deepcopy(s.state_dict()) for s in schedules]
                opt, schedules = build()
                opt.load_state_dict(saved)
                for schedule, state in zip(schedules, saved_schedules):
                    schedule.load_state_dict(state)
    return out


@pytest.mark.parametrize(
    "make",
    [
        # torch's documented example of chaining: both factors apply
        lambda lr, o: [
            lr.ExponentialLR(o, gamma=0.9),
            lr.MultiStepLR(o, milestones=[2, 4], gamma=0.1),
        ],
        lambda lr, o: [lr.MultiStepLR(o, [1, 3], 0.5), lr.ConstantLR(o, factor=0.5, total_iters=3)],
        lambda lr, o: [lr.StepLR(o, 2, 0.5), lr.CosineAnnealingLR(o, T_max=4, eta_min=0.01)],
        lambda lr, o: [lr.LinearLR(o, 0.25, total_iters=3), lr.PolynomialLR(o, 5, 2.0)],
        lambda lr, o: [lr.MultiplicativeLR(o, lambda e: 0.9), lr.ExponentialLR(o, 0.8)],
    ],
    ids=["exponential+multistep", "multistep+constant", "step+cosine", "linear+poly", "mult+exp"],
)
def test_schedules_stepped_one_after_the_other_multiply_as_torch_s(make):
    # each schedule's step set the rate from its own initial rate (the closed form), so the
    # last one stepped overwrote the others' factors: the rates and the parameters left torch's
    got = _rates_and_parameters(rg, make, 6)
    want = _rates_and_parameters(torch, make, 6)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_a_schedule_made_with_last_epoch_still_keeps_the_restored_rate():
    # (resuming by last_epoch is unchanged: the constructor's step keeps the restored rate)
    runs = []
    for lib in (torch, rg):
        opt = lib.optim.SGD([lib.nn.Parameter(lib.ones(1))], lr=0.25)
        opt.param_groups[0]["initial_lr"] = 1.0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            schedule = lib.optim.lr_scheduler.ExponentialLR(opt, 0.5, last_epoch=1)
            rates = [opt.param_groups[0]["lr"]]
            schedule.step()
            runs.append([*rates, opt.param_groups[0]["lr"]])
    assert runs[1] == pytest.approx(runs[0], rel=1e-12)


def test_an_optimizer_state_with_a_negative_rate_a_schedule_set_loads_back():
    # CosineAnnealingLR's eta_min pulls the 0 a finished PolynomialLR left below zero (torch's
    # recursive forms, which the optimizer steps with); its state_dict() was refused by its
    # own load_state_dict ("lr must be non-negative"), which torch's loads
    def make(lr, o):
        return [lr.CosineAnnealingLR(o, T_max=3, eta_min=0.01), lr.PolynomialLR(o, total_iters=4)]

    want = _rates_and_parameters(torch, make, 8, reload_at=5)
    assert min(want[0::3]) < 0  # (the draw does reach a negative rate)
    got = _rates_and_parameters(rg, make, 8, reload_at=5)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_a_negative_rate_given_to_the_constructor_is_still_refused():
    with pytest.raises(rg.InvalidArgumentError, match="lr must be non-negative"):
        rg.optim.SGD([rg.nn.Parameter(rg.ones(1))], lr=-0.1)
