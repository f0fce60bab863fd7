"""BudgetCheckpointing where no schedule that recomputes each value once fits: a chain is
recomputed from its anchors for each of its reads (autodiff/checkpoint/budget/backward.py,
``BudgetCheckpointer.active``), and a plan's search is bounded (``plan.Effort``)."""

from __future__ import annotations

import itertools
import types

import numpy as np
import pytest

import retrograd as rg
from retrograd.autodiff.checkpoint.budget import strategy, timer
from retrograd.autodiff.checkpoint.budget.plan import Effort, plan_evictions

WIDTH, BATCH, LAYERS = 64, 16, 6
VALUE = WIDTH * BATCH * 4  # bytes of one activation


def _mlp_step(backend: rg.Autodiff, index: int):
    """The residual MLP of ``benchmarks/bench_budget_loops.py``, small: leaves, input built
    every step; its 13 activations of one size make NoCheckpointing's peak."""
    rng = np.random.default_rng(0)
    arrays = [
        (rng.standard_normal((WIDTH, WIDTH)) / WIDTH**0.5).astype(np.float32)
        for _ in range(2 * LAYERS)
    ]
    data = np.random.default_rng(index).standard_normal((BATCH, WIDTH)).astype(np.float32)
    with rg.use_backend(backend):
        ws = [rg.tensor(a).require_grad() for a in arrays]
        h = rg.tensor(data)
        for k in range(LAYERS):
            h = h + (h @ ws[2 * k]).tanh() @ ws[2 * k + 1]
        grads = (h * h).mean().backward()
        return grads, [w.grad(grads).numpy() for w in ws]


@pytest.fixture
def steady_clock(monkeypatch):
    """Every op takes the same time to the planner, which prices recomputation by measured op
    times: the plan is then the graph's, not a machine's. Under a loaded machine a noisy
    first step once planned a schedule of 5 values here (1 run in 30 with two busy loops
    beside it), not the 4 the graph allows: the planner's weakness, noted in the session's
    issue note; this test checks what it finds from the graph."""
    ticks = itertools.count()

    def clock() -> float:
        return next(ticks) * 1e-6

    monkeypatch.setattr(timer, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(strategy, "perf_counter", clock)


@pytest.mark.usefixtures("steady_clock")
def test_a_budget_under_every_once_only_schedule_recomputes_chains_again():
    full = rg.Autodiff(rg.NumpyBackend())
    reference = [_mlp_step(full, i) for i in range(5)]
    peak = reference[0][0].peak_bytes
    assert peak == (2 * LAYERS + 1) * VALUE
    # A quarter of the peak: recomputing a layer's tanh output from its residual holds the
    # input, the residual, the product and the output, 4 values, which is the least any
    # schedule holds; each value recomputed once holds the residual stream (7 values).
    backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=rg.BudgetCheckpointing(peak // 4))
    ops = []
    for i, (_, expected) in enumerate(reference):
        grads, got = _mlp_step(backend, i)
        assert grads.peak_bytes <= 4 * VALUE, (i, grads.peak_bytes / VALUE)
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)
        ops.append(grads.recomputed_ops)
    # more ops than a forward's 4 per layer: chains recomputed more than once
    assert min(ops) > 4 * LAYERS, ops
    assert len(set(ops[1:])) == 1, ops


@pytest.mark.parametrize(("pauses", "first"), [((3, 7), 4), ((5, 9), 6)])
def test_a_pause_in_the_first_step_leaves_every_step_after_it_alike(monkeypatch, pauses, first):
    """Every op takes 1 µs but for two pauses of 0.1 ms among the first step's first ops (at
    these clock reads). The pauses at reads 3 and 7 price the first layer's ops dear until
    the second layer's runs of them reprice them (``Evictor.reprice``): the step holds the
    graph's least, 4 values, where it held 8 (and its steps then followed the floor's 7)
    until 6 December. Those at 5 and 9 still mislead it into holding 6; the steps after it
    replay it at the fastest prices, with 4, each alike. (Until 6 December the graph ran up
    to three more eager steps, trials, and followed the one that held least, but each
    trial recomputed another count of ops than the steps after it: docs/checkpointing.md,
    "Under the floor".)"""
    reads = itertools.count(1)
    now = [0.0]

    def clock() -> float:
        now[0] += 1e-6 + (1e-4 if next(reads) in pauses else 0.0)
        return now[0]

    full = rg.Autodiff(rg.NumpyBackend())
    reference = [_mlp_step(full, i) for i in range(4)]
    peak = reference[0][0].peak_bytes
    monkeypatch.setattr(timer, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(strategy, "perf_counter", clock)
    budget = rg.BudgetCheckpointing(peak // 4)
    backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=budget)
    steps = [_mlp_step(backend, i) for i in range(len(reference))]
    assert steps[0][0].peak_bytes == first * VALUE, steps[0][0].peak_bytes / VALUE
    for (_, got), (_, expected) in zip(steps, reference, strict=True):
        for a, b in zip(got, expected, strict=True):
            np.testing.assert_array_equal(a, b)
    assert budget.planned_steps == len(steps) - 1
    after = [grads for grads, _ in steps[1:]]
    assert [grads.peak_bytes for grads in after] == [4 * VALUE] * len(after)
    assert len({grads.recomputed_ops for grads in after}) == 1


def test_a_half_budget_still_recomputes_each_value_once():
    full = rg.Autodiff(rg.NumpyBackend())
    peak = _mlp_step(full, 0)[0].peak_bytes
    backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=rg.BudgetCheckpointing(peak // 2))
    ops = [_mlp_step(backend, i)[0].recomputed_ops for i in range(4)]
    assert ops[1:] == [12] * 3, ops  # 6 matmuls, 4 tanh, 2 adds: the plan of docs/checkpointing.md


def _deep_trace(layers: int):
    """The trace a planned step records for ``layers`` residual tanh layers of tiny tensors."""
    rng = np.random.default_rng(0)
    arrays = [(rng.standard_normal((8, 8)) / 3).astype(np.float32) for _ in range(layers)]
    data = rng.standard_normal((2, 8)).astype(np.float32)

    def step(backend):
        with rg.use_backend(backend):
            h = rg.tensor(data)
            for a in arrays:
                h = h + (h @ rg.tensor(a).require_grad()).tanh()
            return (h * h).sum().backward()

    peak = step(rg.Autodiff(rg.NumpyBackend())).peak_bytes
    strategy = rg.BudgetCheckpointing(peak // 10)
    backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=strategy)
    for _ in range(2):  # under the floor too: a plan from the first step
        step(backend)
    return strategy.planner.kept[0].trace, peak


def test_a_plan_of_a_large_graph_stops_where_its_effort_is_spent():
    trace, peak = _deep_trace(50)
    n = len(trace.sizes)
    # unbounded, this search profiles several million values (a 300-layer chain took a
    # minute); bounded, it stops after the round in which the effort ran out
    effort = Effort(40 * n)
    evicted, found, counted = plan_evictions(trace, peak // 10, effort)
    assert effort.spent
    spent = 40 * n - effort.left
    assert spent <= 40 * n + 4 * n * n, spent / n  # at most one more round of trials
    assert len(evicted) == n and counted == found.peak
    unbounded = Effort(10**12)
    plan_evictions(trace, peak // 10, unbounded)
    assert 10**12 - unbounded.left > 10 * spent


def test_backwards_inside_a_followed_step_keep_the_plans_consistent():
    """A Jacobian's rows with ``create_graph`` run backwards inside the step whose plan is
    followed; one of them re-planned the step's graph, and the followed plan, no longer kept,
    was then looked up in the kept list (ValueError). Expected values: torch's."""
    import torch

    a = np.random.default_rng(0).uniform(-1.0, 1.0, (3, 4))
    t = torch.tensor(a, requires_grad=True)
    t_total = torch.autograd.functional.jacobian(
        lambda x: x.sin() * x.exp() + x * x, t, create_graph=True
    ).sum()
    (expected,) = torch.autograd.grad(t_total, t)
    backend = rg.Autodiff(rg.NumpyBackend(), checkpointing=rg.BudgetCheckpointing(256))
    with rg.use_backend(backend):
        x = rg.tensor(a, dtype=rg.float64).require_grad()
        for _ in range(3):
            total = rg.autograd.functional.jacobian(
                lambda x: x.sin() * x.exp() + x * x, x, create_graph=True
            ).sum()
            (got,) = rg.autograd.grad(total, x)
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
