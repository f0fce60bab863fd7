"""Defects found by the real ports of round 79 (``tests/test_real_ports_79a.py``, ``_79b``,
``_79c``).

TaoRuijie/ECAPA-TDNN's ``train_network`` steps its ``StepLR`` at the start of each epoch,
before the optimizer's first step; torch warns of that order ("Detected call of
`lr_scheduler.step()` before `optimizer.step()`"), the only notice a user gets that the
first rate of the schedule is skipped. retrograd said nothing.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg

ORDER = "Detected call of `lr_scheduler.step()` before `optimizer.step()`"


def _order_warnings(lib, program: str) -> list[str]:
    """The order warnings a schedule over SGD raises along ``program``: ``o`` an optimizer
    step (after a backward), ``s`` a schedule step, ``m`` the schedule made."""
    layer = lib.nn.Linear(2, 1)
    optimizer = lib.optim.SGD(layer.parameters(), lr=0.1)
    x = lib.tensor(np.ones((3, 2), dtype=np.float32))
    schedule = None
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for event in program:
            if event == "m":
                schedule = lib.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            elif event == "s":
                schedule.step()
            else:
                optimizer.zero_grad()
                loss = layer(x).sum()
                if lib is torch:
                    loss.backward()
                    optimizer.step()
                else:
                    optimizer.step(loss.backward())
        seen = [str(w.message)[: len(ORDER)] for w in caught if ORDER in str(w.message)]
    return seen


@pytest.mark.parametrize("program", ["msos", "mos", "mss", "omss", "mossos", "moss"])
def test_a_schedule_stepped_before_the_optimizer_warns_as_torch(program):
    theirs = _order_warnings(torch, program)
    assert _order_warnings(rg, program) == theirs
    assert bool(theirs) == (program in {"msos", "mss", "omss"})


class _OwnSGD(rg.optim.Optimizer):
    """An optimizer written as torch's are (its own ``step``)."""

    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))

    def step(self, grads):
        for group in self.param_groups:
            for p in group["params"]:
                p.data.add_(p.grad(grads), alpha=-group["lr"])


def test_an_optimizer_of_ones_own_is_tracked_too():
    layer = rg.nn.Linear(2, 1)
    optimizer = _OwnSGD(layer.parameters(), lr=0.1)
    schedule = rg.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    optimizer.step(layer(rg.ones(3, 2)).sum().backward())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schedule.step()
    fresh = rg.optim.lr_scheduler.StepLR(_OwnSGD(layer.parameters(), lr=0.1), step_size=1)
    with pytest.warns(UserWarning, match="before `optimizer.step"):
        fresh.step()


def _weight_norm_warnings(lib) -> list[tuple[str, str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv = lib.nn.utils.weight_norm(lib.nn.Conv1d(2, 3, 3))
        lib.nn.utils.remove_weight_norm(conv)
        lib.nn.utils.weight_norm(lib.nn.Linear(2, 2), name="weight", dim=None)
    return [(w.category.__name__, str(w.message)) for w in caught]


def test_the_deprecated_weight_norm_warns_as_torch():
    """r9y9/wavenet_vocoder wraps every convolution in ``nn.utils.weight_norm``: torch gives
    its ``FutureWarning`` (deprecated in favour of ``parametrizations.weight_norm``) at each
    call, retrograd gave it only from ``WeightNorm.apply``."""
    theirs = _weight_norm_warnings(torch)
    assert len(theirs) == 2 and theirs[0][0] == "FutureWarning"
    assert _weight_norm_warnings(rg) == theirs
