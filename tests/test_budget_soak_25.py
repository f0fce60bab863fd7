"""BudgetCheckpointing soaked in training loops that build their input every step.

Each loop runs 50 steps from the same seed under NoCheckpointing and under two budgets (a
small one, 0.3x of NoCheckpointing's peak, and a large one, 0.7x), with the input built afresh
each step (from NumPy arrays, or by rg ops) and one idiom of real loops: shapes that change
from step to step (a sequence length drawn per batch, the short last batch of an epoch),
control flow that depends on the data, truncated BPTT carrying a detached hidden state, two
backward calls through one retained graph, a gradient penalty (``autograd.grad`` with
``create_graph``), accumulation over micro-batches, hooks that keep tensors, evaluation in
``eval()`` under ``no_grad`` between training steps, and ``utils.checkpoint``.

Under each budget, against the same loop without one:

- every loss, gradient and parameter has the same bits at every step;
- every backward that followed a plan the planner found feasible (mode ``fits``) holds no more
  than the plan predicted, and so no more than the budget (or its step re-plans the graph,
  the plan's model having missed);
- such a backward recomputes exactly the ops the plan predicted (each evicted value a backward
  step needs, once);
- once the loop settled (its 13th step), a step whose graph was planned follows its plan:
  at most a tenth of the backward calls run eagerly (a loop of more graphs than the plans
  kept, or whose backward records nothing, says how many more);
- memory is flat: once a step is over nothing is held for backward, and from the 13th step to
  the last neither the live graph nodes, the budget's own tables (plans, trials, seen graphs,
  timings, pool, evictor, constants) nor its held bytes grow.

Found and fixed (``planner.py``): graphs that start alike (a length drawn per batch) fell off
their plans, a step following the first plan it matched and parting from it (the variable-
length RNN at the large budget: 23 plans made, 23 of 50 steps followed one; now 3 and 47);
a plan that fits whose steps held more than the budget, within the tenth over its count
that re-planned, was kept (the gradient penalty: 1.05x the budget every step). The
regressions are at the end of this file.

Left as they are (measured here): two backward calls through one retained graph hold 1.21x
the large budget (1.33x before round 26): under this graph's floor (recomputing the trunk's
tanh holds its input and output beside the batch), so its plan is that floor, followed by
both walks since round 26 (``test_budget_soak_26.py``: before it, the second walk had no plan
and ran eagerly every step); the gradient penalty's plan still counts 480 bytes fewer than
its forward holds (the re-plan absorbs it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from retrograd.autodiff.checkpoint.budget.plan import profile
from retrograd.autodiff.checkpoint.budget.planner import (
    ANCHORED,
    FITS,
    MAX_PLANS,
    MAX_REPLANS,
    SEEN_GRAPHS,
)
from retrograd.autodiff.checkpoint.budget.timer import MAX_KEYS

nn = rg.nn
F = rg.nn.functional

STEPS = 50
#: the step from which nothing may grow (plans, trials and timings settle before it)
SETTLED = 12
BUDGETS = {"small": 0.3, "large": 0.7}


class Context:
    """What a loop reports: its values per step (NumPy copies), the Gradients of each of its
    backward calls, and, at the end of each step, the memory it leaves held."""

    def __init__(self, strategy: rg.CheckpointStrategy):
        self.strategy = strategy
        self.values: list[dict[str, np.ndarray]] = []
        self.peaks: list[int] = []
        #: per step: the budget's held bytes and the sizes of its tables, at the step's end
        self.memory: list[tuple] = []
        #: per step: the graph nodes recorded in it, and those alive at its end
        self.recorded: list[int] = []
        #: the budget's backward log (:class:`Backwards`), and its length at each step's end
        self.log: list[dict] = []
        self.marks: list[int] = []
        self.live: list[int] = []
        self._nodes: weakref.WeakSet = weakref.WeakSet()
        self._count = 0
        if isinstance(strategy, rg.BudgetCheckpointing):
            save = strategy.save

            def counting_save(node, recipe, inputs, out):
                self._nodes.add(node)
                self._count += 1
                return save(node, recipe, inputs, out)

            strategy.save = counting_save  # (before the backend is made: it keeps the method)

    def grads(self, grads: rg.Gradients) -> rg.Gradients:
        self.peaks.append(grads.peak_bytes)
        return grads

    def step(self, **values) -> None:
        self.values.append({name: _array(value) for name, value in values.items()})
        if isinstance(self.strategy, rg.BudgetCheckpointing):
            self.memory.append(_budget_tables(self.strategy))
            self.recorded.append(self._count)
            self.live.append(len(self._nodes))
            self._count = 0
            self.marks.append(len(self.log))


def _budget_tables(strategy: rg.BudgetCheckpointing) -> tuple:
    planner = strategy.planner
    return (
        strategy.held_bytes,
        len(planner.kept),
        len(planner._seen),
        len(strategy.timer._seconds),
        len(strategy.pool._held),
        len(strategy.evictor._tier_of),
        len(strategy._constants),
    )


def _array(value) -> np.ndarray:
    if value is None:
        return np.array([np.nan])
    if isinstance(value, (list, tuple)):
        return np.concatenate([_array(v).ravel() for v in value]) if value else np.zeros(0)
    if hasattr(value, "numpy"):
        return np.array(value.detach().numpy(), copy=True)
    return np.array(value, copy=True)


def _param_grads(grads: rg.Gradients, module: nn.Module) -> list:
    return [p.grad(grads) for p in module.parameters()]


class Backwards:
    """Every backward run under ``strategy``: whether it followed a plan (its mode), the
    plan's predicted peak and recomputed ops, and what the backward then held and recomputed
    (from the strategy's own report, so backward calls that return no Gradients count too)."""

    def __init__(self, strategy: rg.BudgetCheckpointing):
        self.log: list[dict] = []
        planner = strategy.planner
        begins, ended = planner.backward_begins, strategy._backward_ended
        running: list[dict] = []

        def backward_begins(recorded, steps, fastest=None, retained=False):
            result = begins(recorded, steps, fastest, retained)
            plan = planner._checking  # the plan this backward follows (a step's, or its walk's)
            entry = {"mode": None if result is None else result[1], "walk": planner.walk}
            if result is not None and result[1] == FITS:
                entry["counted"] = plan.counted
                entry["predicted_ops"] = _predicted_ops(plan, planner.walk)
            self.log.append(entry)
            running.append((entry, plan))
            return result

        def backward_ended(report):
            entry, plan = running.pop()
            attempts = None if plan is None else len(plan.attempts)
            if report is not None:
                entry["peak"], entry["ops"] = report.peak_bytes, report.recomputed_ops
            ended(report)
            # a plan whose step held more than it predicted is re-planned (planner.MAX_REPLANS)
            entry["replanned"] = plan is not None and len(plan.attempts) > attempts

        planner.backward_begins = backward_begins
        strategy._backward_ended = backward_ended


def _predicted_ops(plan, walk: int = 0) -> int:
    """The ops a step that follows ``plan`` recomputes in its ``walk``-th backward through
    its graph (a retained graph walks again, and each walk recomputes what it needs
    afresh), by the plan's own model: each value it evicts (when it can be recomputed) that
    a backward step of that walk needs, once."""
    trace = plan.trace
    evicted = [e and r for e, r in zip(plan.evict, trace.recomputable)]
    if trace.walks:
        trace = trace.walk_traces()[walk][1]
    found = profile(trace, evicted, views=False)
    return sum(1 for v, e in enumerate(evicted) if e and found.last[v] >= 0)


Loop = Callable[[Context, np.random.Generator], None]


def _run(loop: Loop, strategy: rg.CheckpointStrategy) -> tuple[Context, Backwards | None]:
    backwards = Backwards(strategy) if isinstance(strategy, rg.BudgetCheckpointing) else None
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        rg.seed(0)
        ctx = Context(strategy)
        if backwards is not None:
            ctx.log = backwards.log
        loop(ctx, np.random.default_rng(0))
    assert len(ctx.values) == STEPS
    return ctx, backwards


def _assert_same(reference: Context, other: Context, name: str) -> None:
    for i, (mine, theirs) in enumerate(zip(other.values, reference.values)):
        assert list(mine) == list(theirs), (name, i)
        for key, expected in theirs.items():
            found = mine[key]
            assert found.shape == expected.shape, (name, i, key)
            assert np.array_equal(found, expected, equal_nan=True), (
                f"{name}: step {i}, {key} differs by {np.nanmax(np.abs(found - expected))}"
            )


def check_loop(loop: Loop) -> None:
    plain, _ = _run(loop, rg.NoCheckpointing())
    peak = max(plain.peaks)
    for label, fraction in BUDGETS.items():
        budget = int(fraction * peak)
        strategy = rg.BudgetCheckpointing(budget)
        ctx, backwards = _run(loop, strategy)
        name = f"{loop.__name__} under {label} ({budget} of {peak} bytes)"
        _assert_same(plain, ctx, name)
        planned = [entry for entry in backwards.log if entry["mode"] == FITS]
        for entry in planned:
            # a step over its plan's count re-plans its graph (the plan's model missed)
            within = entry["peak"] <= max(entry["counted"], budget)
            assert within or entry["replanned"], (name, entry)
            assert entry["ops"] == entry["predicted_ops"], (name, entry)
        # once settled, a step whose graph was planned follows its plan
        late = backwards.log[ctx.marks[SETTLED] :]
        eager = sum(entry["mode"] is None for entry in late)
        assert eager <= getattr(loop, "eager_share", 0.1) * len(late), (name, eager, len(late))
        _assert_flat(ctx, name)


def _assert_flat(ctx: Context, name: str) -> None:
    """Nothing grows from step to step once the loop settled: the bytes held for backward
    between steps, the budget's per-value tables, the graph nodes alive (at most those of
    the step just run and of the one before, which a hook or a loop variable may keep), and
    its bounded caches stay within their bounds."""
    held = [tables[0] for tables in ctx.memory]
    assert held[SETTLED:] == [held[SETTLED]] * (STEPS - SETTLED), (name, held)
    settled = ctx.memory[SETTLED]
    for i in range(SETTLED, STEPS):
        tables = ctx.memory[i]
        kept, seen, timings = tables[1:4]
        assert kept <= MAX_PLANS and seen <= SEEN_GRAPHS, (name, i)
        assert timings <= MAX_KEYS, (name, i)
        grown = [a > b for a, b in zip(tables[4:], settled[4:])]  # pool, evictor, constants
        assert not any(grown), (name, i, settled, tables)
        assert ctx.live[i] <= ctx.recorded[i] + ctx.recorded[i - 1], (name, i, ctx.live)


# ------------------------------------------------------------------------------------------
# the loops


def mlp_numpy_batches_short_last(ctx: Context, rng) -> None:
    """A classifier fed NumPy batches, every seventh the short last batch of an epoch."""
    model = nn.Sequential(
        nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.GELU(), nn.Linear(32, 3)
    )
    opt = rg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for i in range(STEPS):
        batch = 5 if i % 7 == 6 else 16
        x = rg.tensor(rng.standard_normal((batch, 8)).astype(np.float32))
        y = rg.tensor(rng.integers(0, 3, batch))
        loss = F.cross_entropy(model(x), y)
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        ctx.step(loss=loss, grads=_param_grads(grads, model))


def rnn_variable_length_rg_input(ctx: Context, rng) -> None:
    """A character RNN whose tokens are built by rg ops each step, over a sequence length
    drawn per batch (an RNNCell unrolled in Python)."""
    vocab, width = 11, 16
    emb = nn.Embedding(vocab, 8)
    cell = nn.RNNCell(8, width)
    head = nn.Linear(width, vocab)
    params = [*emb.parameters(), *cell.parameters(), *head.parameters()]
    opt = rg.optim.Adam(params, lr=1e-2)
    for i in range(STEPS):
        length = int(rng.integers(3, 6))
        tokens = (rg.arange(4 * (length + 1)).reshape(4, length + 1) * (i % 5 + 2) + i) % vocab
        h = rg.zeros(4, width)
        loss = rg.zeros(())
        for t in range(length):
            h = cell(emb(tokens[:, t]), h)
            loss = loss + F.cross_entropy(head(h), tokens[:, t + 1])
        loss = loss / length
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        ctx.step(loss=loss, grads=[p.grad(grads) for p in params])


def data_dependent_control_flow(ctx: Context, rng) -> None:
    """A net whose depth and activation are chosen from the batch's values."""
    layers = nn.ModuleList([nn.Linear(12, 12) for _ in range(3)])
    head = nn.Linear(12, 1)
    params = [*layers.parameters(), *head.parameters()]
    opt = rg.optim.SGD(params, lr=0.02)
    for _ in range(STEPS):
        x = rg.tensor(rng.standard_normal((10, 12)).astype(np.float32))
        depth = 1 + int(x.abs().mean().item() * 10) % 3
        h = x
        for layer in layers[:depth]:
            h = layer(h)
            h = h.relu() if h.sum().item() > 0 else h.tanh()
        loss = (head(h) ** 2).mean()
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        ctx.step(loss=loss, depth=depth, grads=[p.grad(grads) for p in params])


def truncated_bptt_lstm(ctx: Context, rng) -> None:
    """An LSTM over a long NumPy series in chunks of 6, its state carried detached."""
    lstm = nn.LSTM(3, 12, batch_first=True)
    head = nn.Linear(12, 3)
    params = [*lstm.parameters(), *head.parameters()]
    opt = rg.optim.SGD(params, lr=0.05)
    series = rng.standard_normal((2, 6 * STEPS + 1, 3)).astype(np.float32)
    state = None
    for i in range(STEPS):
        chunk = rg.tensor(series[:, 6 * i : 6 * i + 6])
        target = rg.tensor(series[:, 6 * i + 1 : 6 * i + 7])
        out, state = lstm(chunk, state)
        loss = F.mse_loss(head(out), target)
        grads = ctx.grads(loss.backward())
        state = tuple(s.detach() for s in state)
        opt.step(grads)
        ctx.step(loss=loss, grads=[p.grad(grads) for p in params])


def two_backwards_retained(ctx: Context, rng) -> None:
    """Two heads on one trunk, each backpropagated in turn through the retained graph."""
    trunk = nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 24), nn.Sigmoid())
    head_a, head_b = nn.Linear(24, 2), nn.Linear(24, 1)
    params = [*trunk.parameters(), *head_a.parameters(), *head_b.parameters()]
    opt = rg.optim.SGD(params, lr=0.05)
    for _ in range(STEPS):
        x = rg.tensor(rng.standard_normal((12, 10)).astype(np.float32))
        features = trunk(x)
        loss_a = F.cross_entropy(head_a(features), rg.tensor(rng.integers(0, 2, 12)))
        loss_b = (head_b(features) ** 2).mean()
        first = ctx.grads(loss_a.backward(retain_graph=True))
        second = ctx.grads(loss_b.backward())
        grads = first + second
        opt.step(grads)
        ctx.step(a=loss_a, b=loss_b, grads=[p.grad(grads) for p in params])


def gradient_penalty(ctx: Context, rng) -> None:
    """A critic trained with a gradient penalty on interpolates (WGAN-GP): autograd.grad with
    create_graph, then a backward through both graphs."""
    critic = nn.Sequential(
        nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Softplus(), nn.Linear(16, 1)
    )
    params = list(critic.parameters())
    opt = rg.optim.Adam(params, lr=1e-3)
    for _ in range(STEPS):
        real = rg.tensor(rng.standard_normal((8, 6)).astype(np.float32))
        fake = rg.tensor(rng.standard_normal((8, 6)).astype(np.float32) + 1)
        alpha = rg.tensor(rng.random((8, 1)).astype(np.float32))
        mixed = (alpha * real + (1 - alpha) * fake).requires_grad_()
        (slope,) = rg.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
        penalty = ((slope.norm(dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10 * penalty
        grads = ctx.grads(loss.backward())
        opt.step(grads)
        ctx.step(loss=loss, penalty=penalty, grads=[p.grad(grads) for p in params])


# its depth and activations make 14 graphs, more than the plans kept (planner.MAX_PLANS)
data_dependent_control_flow.eager_share = 0.25

LOOPS = [
    mlp_numpy_batches_short_last,
    rnn_variable_length_rg_input,
    data_dependent_control_flow,
    truncated_bptt_lstm,
    two_backwards_retained,
    gradient_penalty,
]


@pytest.mark.parametrize("loop", LOOPS, ids=[loop.__name__ for loop in LOOPS])
def test_a_budget_holds_in_a_loop_that_builds_its_input_each_step(loop):
    check_loop(loop)


# ------------------------------------------------------------------------------------------
# regressions


def _chain_step(backend: rg.Backend, arrays: list[np.ndarray], length: int) -> rg.Gradients:
    """A residual chain of ``length`` layers: graphs of every length start alike."""
    with rg.use_backend(backend):
        w = rg.tensor(arrays[0]).require_grad()
        h = rg.tensor(arrays[1])
        for _ in range(length):
            h = h + (h @ w).tanh()
        return (h * h).mean().backward()


def _chain_arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((16, 16)) / 4).astype(np.float32),
        rng.standard_normal((8, 16)).astype(np.float32),
    ]


def test_steps_of_graphs_that_start_alike_follow_their_own_plans():
    # Found by rnn_variable_length_rg_input: a step matched the first kept plan whose first
    # value it shared, was evicted by that plan's choices, parted from it where its length
    # differed, ran eagerly (over the budget) and planned its graph afresh: 31 plans for 5
    # lengths over 50 steps, 13 steps followed one (here: 23 plans, 6 of 33 steps followed).
    # A step now follows every plan it matches until they part; each graph is planned once
    # (and re-planned should a step pass the budget) and every later step follows its own.
    arrays = _chain_arrays(0)
    plain = [_chain_step(rg.Autodiff(inner_backend()), arrays, n) for n in (5, 7, 9)]
    budget = int(0.9 * min(g.peak_bytes for g in plain))
    strategy = rg.BudgetCheckpointing(budget)
    backwards = Backwards(strategy)
    backend = rg.Autodiff(inner_backend(), strategy)
    for length in [5, 9, 7, 5, 9, 7] + [5, 7, 9, 9, 5, 7, 7, 5, 9] * 3:
        _chain_step(backend, arrays, length)
    assert strategy.plans <= 3 + MAX_REPLANS, strategy.plans
    after = backwards.log[6:]  # every graph planned (from its first step) and followed once
    assert all(entry["mode"] in (FITS, ANCHORED) for entry in after), backwards.log
    # (a step that matched several plans may recompute a value more than its own plan
    # predicts: one evicted while they disagreed, the budget having no room to hold it)
    assert all(entry["peak"] <= budget for entry in after[-15:]), backwards.log


def test_a_plan_whose_step_passes_the_budget_is_replanned():
    # Found by gradient_penalty: its plan counted 5,320 bytes under a budget of 5,499 and its
    # steps held 5,800, every step: more than the budget, but less than the tenth over the
    # plan's count that re-planned. A step over the budget re-plans now too.
    arrays = _chain_arrays(1)
    plain = _chain_step(rg.Autodiff(inner_backend()), arrays, 9)
    strategy = rg.BudgetCheckpointing(int(0.9 * plain.peak_bytes))
    backend = rg.Autodiff(inner_backend(), strategy)
    for _ in range(2):
        _chain_step(backend, arrays, 9)
    plan = strategy.planner.kept[0]
    assert plan.mode == FITS and strategy.plans == 1
    over = strategy.max_bytes + 4  # over the budget, within a tenth of the plan's count
    assert over <= 1.1 * plan.counted, (over, plan.counted)
    strategy.planner._checking = plan  # as a step that followed it, ending
    strategy.planner.backward_ended(over)
    assert strategy.plans == 2
    replanned = strategy.planner.kept[0]
    assert replanned.target == plan.target - (over - plan.counted)
    assert replanned.counted <= replanned.target
