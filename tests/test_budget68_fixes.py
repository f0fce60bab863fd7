"""Regressions of round 68 (issue 24): the plan of a graph recorded after a retained backward
counts what the retained graph still holds (``recorder._held_before_unread``), each failing
before its fix."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from random_budget_67 import Program, budget_of, run
from retrograd.autodiff.checkpoint.budget.planner import FITS
from test_budget_soak_25 import Backwards

STEPS = 5


def _arrays(*shapes) -> list[np.ndarray]:
    rng = np.random.default_rng(68)
    return [(rng.standard_normal(shape) / 3).astype(np.float32) for shape in shapes]


def _late_head(w: np.ndarray, x: np.ndarray):
    """A trunk, a first head whose sigmoid output its graph holds, and a second head's loss
    built after the first head's ``backward(retain_graph=True)``: a step of its own, whose
    backward walks the trunk again but not the sigmoid."""

    def step(backend):
        with rg.use_backend(backend):
            wt = rg.tensor(w).requires_grad_()
            h = (rg.tensor(x) @ wt).tanh()
            scores = h.sigmoid()  # (kept to the step's end, with the first head's graph)
            first = scores.sum().backward(retain_graph=True)
            second = (h * h).sum().backward()
            del scores
            return [first.peak_bytes, second.peak_bytes], wt.grad(second).numpy().copy()

    return step


def _critic_step(w1, w2, real, fake, alpha):
    """A WGAN-GP critic step: the critic's scores at the interpolates kept to the step's end
    (a logged score), their slope by ``autograd.grad(..., create_graph=True)``, then
    ``(loss + 10 * penalty).backward()``: a graph recorded after a retained backward, whose
    walk does not read the critic's relu output (its second derivative reads the mask)."""

    def step(backend):
        with rg.use_backend(backend):
            a, b = rg.tensor(w1).requires_grad_(), rg.tensor(w2).requires_grad_()

            def critic(v):
                return (v @ a).relu() @ b

            weight = rg.tensor(alpha)
            mixed = weight * rg.tensor(real) + (1 - weight) * rg.tensor(fake)
            mixed.requires_grad_()
            scores = critic(mixed)
            (slope,) = rg.autograd.grad(scores.sum(), [mixed], create_graph=True)
            penalty = ((slope * slope).sum(dim=1).sqrt() - 1.0).pow(2).mean()
            loss = critic(rg.tensor(fake)).mean() - critic(rg.tensor(real)).mean()
            grads = (loss + 10.0 * penalty).backward()
            del scores
            return [grads.peak_bytes], a.grad(grads).numpy().copy()

    return step


def _planned(step, budget: int) -> tuple[rg.BudgetCheckpointing, list[dict]]:
    """``step``'s loop under ``budget``, its gradients checked against NoCheckpointing's:
    the strategy and its backward calls (``Backwards``' log)."""
    expected = step(rg.Autodiff(inner_backend()))[1]
    strategy = rg.BudgetCheckpointing(budget)
    backwards = Backwards(strategy)
    backend = rg.Autodiff(inner_backend(), strategy)
    for _ in range(STEPS):
        assert np.array_equal(step(backend)[1], expected)
    assert strategy.held_bytes == 0
    return strategy, backwards.log


@pytest.mark.parametrize("budget", [10**6, 400])
def test_a_late_heads_plan_counts_the_retained_values_its_backward_does_not_read(budget):
    # Fixed in recorder.py (_held_before_unread): the second head's steps start with the
    # first head's graph held (the sigmoid output, 128 bytes, which its walk does not read),
    # and the engine counts it in their forward peak. Its plan counted 256 bytes (the tanh
    # output and the batch its walk reads) where its steps held 384, and it was re-planned
    # three times for nothing (5 plans).
    strategy, log = _planned(_late_head(*_arrays((8, 8), (4, 8))), budget)
    second = log[3::2]  # the second head's planned backward calls
    assert [entry["mode"] for entry in second] == [FITS] * (STEPS - 1), log
    assert [(entry["peak"], entry["counted"]) for entry in second] == [(384, 384)] * (STEPS - 1)
    assert strategy.plans == 2 and not any(entry["replanned"] for entry in log), log


def test_a_critic_steps_plan_counts_the_scores_graph_it_keeps():
    # Fixed as above: the penalty's step starts with the scores' graph held (the relu
    # output, 256 bytes, read by no rule of its walk). Its plan counted 1,776 bytes where its
    # steps held 2,032, and it was re-planned three times (5 plans). (Since 7 December the
    # relu's create_graph gradient is one op reading its output, torch's threshold_backward,
    # where a bool mask of 64 bytes was held beside it: 1,968.)
    strategy, log = _planned(
        _critic_step(
            *_arrays((8, 16), (16, 1), (4, 8), (4, 8)),
            np.random.default_rng(1).random((4, 1)).astype(np.float32),
        ),
        10**6,
    )
    penalty = log[3::2]  # (log[2::2]: autograd.grad's walk, planned apart)
    assert [(entry["mode"], entry["peak"]) for entry in penalty] == [(FITS, 1968)] * (STEPS - 1)
    assert all(entry["counted"] == 1968 for entry in penalty), log
    assert strategy.plans == 2 and not any(entry["replanned"] for entry in log), log


@pytest.mark.parametrize(("seed", "choice"), [(0, 2.0), (1, 1.0), (5, 1.0), (11, 1.0)])
def test_a_random_programs_late_graph_holds_no_more_than_its_plan(seed, choice):
    # Round 67's random programs whose late graph missed its plan (held, counted, first
    # planned step): seed 0 at 2x (a penalty, 3,328 bytes against 2,944), seed 1 at 1x (a
    # late head, 4,317 against 1,024; re-planned, then settled over its prediction), seed 5
    # (8,128 against 4,992) and seed 11 (2,416 against 912), penalties.
    program = Program(seed)
    assert program.head in ("penalty", "late_head")
    budget = budget_of(run(program, rg.NoCheckpointing()), choice)
    strategy = rg.BudgetCheckpointing(budget)
    backwards = Backwards(strategy)
    run(program, strategy)
    for entry in backwards.log:
        if entry["mode"] == FITS and "peak" in entry:
            assert entry["peak"] <= max(entry["counted"], budget), entry
        assert not entry.get("replanned"), entry
