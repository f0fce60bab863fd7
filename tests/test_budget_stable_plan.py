"""Issue 24: under a budget below the plan's floor, every step after the plan does the same
work. The SDPA transformer of ``benchmarks/bench_budget_loops.py`` at 0.25x on the torch
inner backend planned a floor within budget + 10% of NoCheckpointing's peak, then ran one to
three more steps eagerly (trials in search of a replay that held less) before following it:
159-208 recomputed ops in those steps, 57 in the floor's after them. The half-size model
here recomputed ``[107, 106, 53, 53]`` (2 planned steps of 3) before
``planner.FLOOR_SLACK``."""

from __future__ import annotations

import math
import random
import types

import numpy as np
import pytest

import retrograd as rg
from retrograd.autodiff.checkpoint.budget import strategy as budget_strategy
from retrograd.autodiff.checkpoint.budget import timer as budget_timer
from retrograd.autodiff.checkpoint.budget.plan import plan_evictions
from retrograd.nn import functional as F  # noqa: N812

pytestmark = pytest.mark.backend_independent(
    "every backend is built here, on NumPy or on the inner backend a test names"
)

torch = pytest.importorskip("torch")

BATCH, SEQ, D, HEADS, BLOCKS = 2, 64, 64, 4, 4


def sdpa_transformer(backend: rg.Autodiff):
    """One training step of the benchmark's SDPA transformer (half size): leaves, input and
    mask made anew each step, as a hand-written loop makes them."""
    rng = np.random.default_rng(1)
    shapes = [(D, 3 * D), (D, D), (D, 4 * D), (4 * D, D)]
    arrays = [
        (rng.standard_normal(shape) / math.sqrt(shape[0])).astype(np.float32)
        for _ in range(BLOCKS)
        for shape in shapes
    ]
    keep = ~np.triu(np.ones((SEQ, SEQ), dtype=bool), 1)

    def step(index: int):
        with rg.use_backend(backend):
            ws = [rg.tensor(a).require_grad() for a in arrays]
            data = np.random.default_rng(index).standard_normal((BATCH, SEQ, D))
            x = rg.tensor(data.astype(np.float32))
            for k in range(BLOCKS):
                qkv, proj, up, down = ws[4 * k : 4 * k + 4]
                q, key, v = (x @ qkv).split(D, 2)
                q, key, v = (
                    z.reshape((BATCH, SEQ, HEADS, D // HEADS)).swap_dims(1, 2) for z in (q, key, v)
                )
                mask = rg.tensor(keep, dtype="bool")
                y = F.scaled_dot_product_attention(q, key, v, attn_mask=mask)
                x = x + y.swap_dims(1, 2).reshape((BATCH, SEQ, D)) @ proj
                x = x + F.gelu(x @ up) @ down
            grads = (x * x).mean().backward()
            return grads, [w.grad(grads).numpy() for w in ws]

    return step


def test_every_step_after_the_plan_recomputes_the_same_ops_on_torch():
    # every draw is from a generator of its own (np.random.default_rng(seed)): nothing reads
    # NumPy's or torch's global random state, so nothing run before changes this test
    plain = sdpa_transformer(rg.Autodiff(rg.TorchBackend("cpu")))
    full = plain(0)[0].peak_bytes
    budget = rg.BudgetCheckpointing(full // 4)
    step = sdpa_transformer(rg.Autodiff(rg.TorchBackend("cpu"), budget))
    ops, peaks = [], []
    for index in range(4):
        grads, arrays = step(index)
        ops.append(grads.recomputed_ops)
        peaks.append(grads.peak_bytes)
        for ours, theirs in zip(arrays, plain(index)[1]):
            assert np.array_equal(ours, theirs)
    assert budget.plans == 1, budget.plans
    assert budget.planned_steps == 3, (budget.planned_steps, ops)  # every step after the first
    assert len(set(ops[1:])) == 1, ops
    assert max(peaks[1:]) <= budget.max_bytes + full // 10, (peaks, budget.max_bytes, full)


# -- under the floor, with every op's time jittered ------------------------------------------
#
# A graph whose plan holds more than 1.1 times the budget (the replay of its eager step, or the
# greedy's floor far above the budget) ran up to three more eager steps after its plan was
# made (trials), each recomputing another count of ops: issue 24's reproduction at 0.25x
# recomputed [93, 90, 78, 78, ...], and which steps were trials depended on measured times.
# Now every step after the first follows the plan; a replay prices each op at the fastest
# time measured for it, so a pause in the first step misleads none of them.

ISSUE_B, ISSUE_T, ISSUE_D, ISSUE_LAYERS = 4, 64, 64, 4
MLP_WIDTH, MLP_BATCH, MLP_LAYERS = 64, 16, 6


def issue_reproduction(backend: rg.Autodiff, index: int):
    """Issue 24's reproduction: leaves, input and causal mask made anew each step."""
    rng = np.random.default_rng(1)
    d = ISSUE_D
    arrays = [(rng.standard_normal((d, d)) / d**0.5).astype(np.float32) for _ in range(8)]
    data = rng.standard_normal((ISSUE_B, ISSUE_T, d)).astype(np.float32)
    causal = np.triu(np.ones((ISSUE_T, ISSUE_T), dtype=bool), 1)
    with rg.use_backend(backend):
        ws = [rg.tensor(a).require_grad() for a in arrays]
        x = rg.tensor(data + np.float32(index))
        mask = rg.tensor(causal, dtype="bool")
        for k in range(ISSUE_LAYERS):
            q = x @ ws[2 * k]
            att = (q @ q.swap_dims(1, 2)) * (1.0 / d**0.5)
            att = att.mask_fill(mask, float("-inf")).softmax(-1)
            x = x + (att @ (x @ ws[2 * k + 1])).tanh()
        grads = (x * x).sum().backward()
        return grads, [w.grad(grads).numpy() for w in ws]


def residual_mlp(backend: rg.Autodiff, index: int):
    """The residual MLP of ``benchmarks/bench_budget_loops.py``, small (13 activations of one
    size make NoCheckpointing's peak; at 0.25x the least any schedule holds is 4)."""
    rng = np.random.default_rng(0)
    arrays = [
        (rng.standard_normal((MLP_WIDTH, MLP_WIDTH)) / MLP_WIDTH**0.5).astype(np.float32)
        for _ in range(2 * MLP_LAYERS)
    ]
    data = np.random.default_rng(index).standard_normal((MLP_BATCH, MLP_WIDTH))
    with rg.use_backend(backend):
        ws = [rg.tensor(a).require_grad() for a in arrays]
        h = rg.tensor(data.astype(np.float32))
        for k in range(MLP_LAYERS):
            h = h + (h @ ws[2 * k]).tanh() @ ws[2 * k + 1]
        grads = (h * h).mean().backward()
        return grads, [w.grad(grads).numpy() for w in ws]


def _jitter_the_budget_clock(monkeypatch, seed: int, sigma: float) -> None:
    """The budget's clock advances 1 µs times a seeded log-normal factor at each read: every
    op's measured time (its price) is jittered, as on a machine whose load comes and goes, and
    the same whatever the machine's real load (a real clock times a factor failed here 1 run
    in 5 on a loaded machine: the first step's prices decide the steps after it)."""
    draw = random.Random(seed)
    now = [0.0]

    def clock() -> float:
        now[0] += 1e-6 * draw.lognormvariate(0.0, sigma)
        return now[0]

    monkeypatch.setattr(budget_timer, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(budget_strategy, "perf_counter", clock)


def _inner(name: str) -> rg.Backend:
    return rg.TorchBackend("cpu") if name == "torch" else rg.NumpyBackend()


@pytest.mark.parametrize("inner", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("workload", "steps", "seed"),
    # seed 3: today's code recomputed [64, 102, 64, 64, 64, 64] (a trial in step 2)
    [(issue_reproduction, 8, 0), (residual_mlp, 6, 0), (residual_mlp, 6, 3)],
    ids=["issue", "mlp-0", "mlp-3"],
)
def test_under_the_floor_every_step_after_the_first_does_the_same_work(
    monkeypatch, inner, workload, steps, seed
):
    plain = rg.Autodiff(_inner(inner))
    reference = [workload(plain, i) for i in range(steps)]
    full = reference[0][0].peak_bytes
    _jitter_the_budget_clock(monkeypatch, seed, sigma=1.0)
    budget = rg.BudgetCheckpointing(full // 4)
    backend = rg.Autodiff(_inner(inner), budget)
    ops, peaks = [], []
    for i, (_, expected) in enumerate(reference):
        grads, got = workload(backend, i)
        ops.append(grads.recomputed_ops)
        peaks.append(grads.peak_bytes)
        for ours, theirs in zip(got, expected, strict=True):
            assert np.array_equal(ours, theirs)
    assert budget.plans == 1 and budget.planned_steps == steps - 1, (budget.plans, ops)
    assert len(set(ops[1:])) == 1, ops
    assert len(set(peaks[1:])) == 1, peaks
    assert peaks[1] <= budget.max_bytes + full // 10, (peaks, budget.max_bytes, full)


# -- a plan holds what it predicts ------------------------------------------------------------


@pytest.mark.own_checkpointing("every backend is built here, under a budget of its own")
def test_an_anchored_plan_holds_what_it_predicts(monkeypatch):
    # The residual MLP of test_budget_plan.py (h - h.mean_dim(1) after each residual sum) at
    # 0.3x: the anchored schedule keeps the cut points of the residual stream, the sum h and
    # the centred value after it; no rule reads h, and the centred value, kept, makes it
    # needless, so the model counted it nowhere, but the engine held it through forward as
    # its consumers' backup: each step held 36,864 bytes where 28,672 were predicted.
    from test_budget_plan import _residual_mlp

    plain = _residual_mlp(rg.NoCheckpointing(), steps=3)
    _jitter_the_budget_clock(monkeypatch, seed=20, sigma=2.0)
    budget = rg.BudgetCheckpointing(int(0.3 * plain[0][1].peak_bytes))
    ours = _residual_mlp(budget, steps=3)
    for (expected, _), (found, _) in zip(plain, ours, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(expected, found, strict=True))
    plan = budget.planner.kept[0]
    assert plan.mode == "anchored" and budget.planned_steps == 2, (plan.mode, budget.plans)
    held = [grads.peak_bytes for _, grads in ours[1:]]
    assert held == [budget.predicted_peak] * 2, (held, budget.predicted_peak)


@pytest.mark.own_checkpointing("every backend is built here, under a budget of its own")
@pytest.mark.parametrize(
    ("inner", "seed", "first", "after"),
    [("numpy", 6, 4, 4), ("torch", 6, 4, 4), ("numpy", 22, 6, 4)],
    ids=["copied-numpy", "copied-torch", "repriced-numpy"],
)
def test_a_replay_holds_what_its_plan_predicts(monkeypatch, inner, seed, first, after):
    # The residual MLP at 0.25x (benchmarks/bench_budget_noise.py's), op times jittered with
    # σ 2. Seed 6: the eager step holds the graph's least 4 values, below the floor's 8 and
    # the anchored schedule's 7, so its steps replay it; replayed at the fastest time seen
    # for each op, another schedule than the step's, they held 6 values where the plan
    # predicted 4. Now they replay it at the times it gave its values as it went, and make
    # its choices again. Seed 22: the eager step, misled, holds 6, over the budget and a
    # tenth: replayed at the fastest prices, with 4, which the plan predicts once a step has
    # held it (it said 6 before, what the eager step held). (Seed 13's eager step held 6 too
    # until its values were repriced as faster runs of their ops came, Evictor.reprice: it
    # holds 4 now.)
    plain = rg.Autodiff(_inner(inner))
    reference = [residual_mlp(plain, i) for i in range(3)]
    full = reference[0][0].peak_bytes
    _jitter_the_budget_clock(monkeypatch, seed=seed, sigma=2.0)
    budget = rg.BudgetCheckpointing(full // 4)
    backend = rg.Autodiff(_inner(inner), budget)
    held = []
    for i, (_, expected) in enumerate(reference):
        grads, got = residual_mlp(backend, i)
        held.append(grads.peak_bytes)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    value = MLP_BATCH * MLP_WIDTH * 4
    assert budget.planner.kept[0].mode == "replay" and budget.planned_steps == 2
    assert held == [first * value, after * value, after * value], [p / value for p in held]
    assert budget.predicted_peak == after * value, budget.predicted_peak / value


# -- the floor is a function of the graph and sizes, not of the prices --------------------------


@pytest.mark.own_checkpointing("every backend is built here, under a budget of its own")
def test_the_floor_holds_the_same_bytes_whatever_the_prices(monkeypatch):
    # The masked transformer of test_budget_plan.py at 0.15x: no plan fits, every step after
    # the first follows the greedy's floor. Its search is a local one from where the priced
    # greedy's path led, so the floor moved with the prices: 659,456 bytes (nine activations
    # kept at the end of forward) at the times measured, 593,920 (eight) with every op
    # priced alike. Now the floor is searched at equal prices and the measured ones only
    # choose among the plans that hold no more: the same bytes for any clock.
    from test_budget_plan import _masked_step

    random_prices = random.Random(7)
    full, _, expected = _masked_step(rg.Autodiff(rg.NumpyBackend()))
    _jitter_the_budget_clock(monkeypatch, seed=0, sigma=2.0)
    budget = rg.BudgetCheckpointing(int(0.15 * full))
    backend = rg.Autodiff(rg.NumpyBackend(), budget)
    runs = [_masked_step(backend) for _ in range(3)]
    for _, _, grads in runs:
        assert all(np.array_equal(a, b) for a, b in zip(expected, grads, strict=True))
    plan = budget.planner.kept[0]
    assert plan.mode == "floor" and budget.planned_steps == 2, (plan.mode, budget.plans)
    assert runs[1][0] == runs[2][0] == plan.counted, ([r[0] for r in runs], plan.counted)
    held = {plan.counted}
    trace = plan.trace
    measured = trace.costs
    for sigma in (0.0, 0.5, 1.0, 2.0, 3.0):  # the same trace, its ops priced otherwise
        trace.costs = [c * random_prices.lognormvariate(0.0, sigma) for c in measured]
        held.add(plan_evictions(trace, budget.max_bytes)[2])
    trace.costs = [1.0] * len(measured)
    held.add(plan_evictions(trace, budget.max_bytes)[2])
    assert len(held) == 1, held
