"""Checkpointing that never costs more than it saves (API.md section 4): linear recomputation
under every strategy, BudgetCheckpointing's eviction and recomputation, identical gradients,
and the peak/recomputed reports."""

from __future__ import annotations

import time

import numpy as np
import pytest

import retrograd as rg
from retrograd.autodiff.checkpoint import parse_bytes
from retrograd.autodiff.checkpoint.budget.backward import _SPARE_RERUNS

pytestmark = pytest.mark.backend_independent(
    "every test names its backend, Autodiff(NumpyBackend(), its strategy): the same on every pass"
)

STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget": lambda: rg.BudgetCheckpointing("1MB"),
    # two values of the chain: every value is evicted and recomputed, and drops for the budget
    # would recompute the chain from its start for each read (n^2/30 ops) were they unbounded
    "budget-256": lambda: rg.BudgetCheckpointing(256),
}


def _sin_chain(strategy, n, shape=(4, 4)):
    """Backward through y = sin(y), n times, from a float64 leaf: (gradient, Gradients)."""
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
        x = rg.tensor(np.full(shape, 0.5)).require_grad()
        y = x
        for _ in range(n):
            y = y.sin()
        grads = y.sum().backward()
    return x.grad(grads).numpy(), grads


def _expected_sin_chain(n, value=0.5):
    """d sin^n(x)/dx by the chain rule, computed directly in NumPy."""
    grad, y = 1.0, value
    for _ in range(n):
        grad *= np.cos(y)
        y = np.sin(y)
    return grad


@pytest.mark.parametrize("name", STRATEGIES)
def test_chain_recomputation_is_linear(name):
    counts = {}
    for n in (1000, 4000):
        gradient, grads = _sin_chain(STRATEGIES[name](), n)
        np.testing.assert_allclose(gradient, _expected_sin_chain(n), rtol=1e-12)
        counts[n] = grads.recomputed_ops
        # each op rerun at most about twice. A budget may also spend its fixed spare on
        # values recomputed once already (budget/backward.py: _SPARE_RERUNS), whatever n;
        # under BudgetCheckpointing(256) the drops follow measured prices, and runs took
        # 1.96n to 2.13n: a tenth of n is left for that (quadratic took 130n at n = 1000)
        slack = n // 10 if name == "budget-256" else 0
        assert grads.recomputed_ops <= 2 * n + _SPARE_RERUNS + slack
    # 4x the ops, about 4x the recomputations (quadratic would be 16x)
    assert counts[4000] <= 4.5 * max(counts[1000], 1)


def test_balanced_chain_holds_about_root_n_values():
    _, grads = _sin_chain(rg.BalancedCheckpointing(), 4000)
    value_bytes = 4 * 4 * 8
    # NoCheckpointing holds all 4000 values; anchors + one segment are ~2 sqrt(4000) = 127
    assert grads.peak_bytes <= 200 * value_bytes
    _, plain = _sin_chain(rg.NoCheckpointing(), 4000)
    assert plain.peak_bytes >= 3999 * value_bytes


@pytest.mark.parametrize("name", STRATEGIES)
def test_twenty_thousand_op_sin_chain_is_fast(name):
    started = time.perf_counter()
    gradient, _ = _sin_chain(STRATEGIES[name](), 20_000)
    # quadratic recomputation took minutes; linear takes well under a second alone
    assert time.perf_counter() - started < 30
    np.testing.assert_allclose(gradient, _expected_sin_chain(20_000), rtol=1e-10)


def _residual_mlp(strategy, seed=0, layers=4, width=32, batch=16):
    rng = np.random.default_rng(seed)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
        params = [
            (
                rg.tensor(rng.standard_normal((width, width)) / width**0.5).require_grad(),
                rg.tensor(rng.standard_normal(width) * 0.1).require_grad(),
            )
            for _ in range(layers)
        ]
        h = rg.tensor(rng.standard_normal((batch, width)))
        for weight, bias in params:
            z = h @ weight + bias
            h = h + 0.5 * z * (1.0 + (z * 0.7978845608 * (1.0 + 0.044715 * z * z)).tanh())
            h = (h - h.mean_dim(1)) / ((h - h.mean_dim(1)).square().mean_dim(1) + 1e-5).sqrt()
        grads = (h * h).mean().backward()
    return [p.grad(grads).numpy() for pair in params for p in pair], grads


@pytest.mark.parametrize("budget", [256, 4096, 16_384, "64KiB", "1MB"])
def test_budget_gradients_are_bit_identical(budget):
    plain, _plain_grads = _residual_mlp(rg.NoCheckpointing())
    ours, _grads = _residual_mlp(rg.BudgetCheckpointing(budget))
    for a, b in zip(plain, ours):
        assert np.array_equal(a, b)


def test_budget_keeps_the_peak_under_the_budget():
    _, plain = _residual_mlp(rg.NoCheckpointing())
    for fraction in (0.5, 0.75):
        budget = int(plain.peak_bytes * fraction)
        _, grads = _residual_mlp(rg.BudgetCheckpointing(budget))
        assert grads.peak_bytes <= budget + 0.1 * plain.peak_bytes, (fraction, grads.peak_bytes)
        assert grads.recomputed_bytes > 0
    assert plain.recomputed_bytes == 0 and plain.peak_bytes > 0


def test_budget_below_the_floor_still_saves():
    # Far under NoCheckpointing's peak (a tenth here) the eager step passes the budget: what
    # a recomputation in progress reads and makes is never dropped, and gradients plus one
    # layer's values are this model's floor; the step still runs, saves memory, and the
    # report says by how much.
    _, plain = _residual_mlp(rg.NoCheckpointing())
    for fraction in (0.1, 0.25):
        budget = int(plain.peak_bytes * fraction)
        _, grads = _residual_mlp(rg.BudgetCheckpointing(budget))
        assert grads.peak_bytes <= 0.4 * plain.peak_bytes


def test_budget_smaller_than_one_value_recomputes_a_chain_linearly():
    # No drop can meet a 256-byte budget when each value takes 400: dropping every value right
    # after its recomputation recomputed the chain again for each read (O(n^2): a 2,000-op
    # chain took 100 s). Each value is now recomputed at most twice, then kept.
    counts = {}
    for n in (250, 1000):
        with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), rg.BudgetCheckpointing(256))):
            x = rg.tensor(np.linspace(0.1, 0.9, 100)).cast("float32").require_grad()
            y = x
            for _ in range(n):
                y = (y * 1.0001).sin()
            grads = y.sum().backward()
        counts[n] = grads.recomputed_ops
        assert grads.recomputed_ops <= 4 * 2 * n
        assert grads.peak_bytes > 256  # the report says the budget was passed
        expected = np.ones(100)
        value = np.linspace(0.1, 0.9, 100).astype(np.float32).astype(np.float64)
        for _ in range(n):
            expected = expected * 1.0001 * np.cos(value * 1.0001)
            value = np.sin(value * 1.0001)
        np.testing.assert_allclose(x.grad(grads).numpy(), expected, rtol=1e-3)
    assert counts[1000] <= 4.5 * counts[250]


def test_budget_evicts_during_forward():
    strategy = rg.BudgetCheckpointing(4096)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
        x = rg.tensor(np.linspace(-1, 1, 64)).require_grad()
        y = x
        for _ in range(50):
            y = y.exp().sin()  # each keeps 512 bytes for backward
        assert strategy.held_bytes <= 4096
        assert strategy.evictions > 0
        grads = y.sum().backward()
    # backward may pass it by the few values a recomputation in progress reads and makes
    assert grads.peak_bytes <= 4096 + 4 * 512


def test_a_graph_that_cannot_fit_still_runs_and_reports_by_how_much():
    budget = 1000
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), rg.BudgetCheckpointing(budget))):
        x = rg.tensor(np.ones((64, 64))).require_grad()  # one value: 32 KiB > the budget
        grads = (x.exp() * x.sin()).sum().backward()
    expected = np.exp(1.0) * np.sin(1.0) + np.exp(1.0) * np.cos(1.0)
    np.testing.assert_allclose(x.grad(grads).numpy(), expected)
    assert grads.peak_bytes > budget


def test_budget_with_untracked_inputs_and_general_ops():
    # ops with an untracked input (x @ w with a constant x), cat and a three-input op: the
    # strategy sees every held value, and gradients match NoCheckpointing bit for bit.
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((8, 8)) for _ in range(3)]

    def run(strategy):
        with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
            data = rg.tensor(arrays[0])
            w = rg.tensor(arrays[1]).require_grad()
            v = rg.tensor(arrays[2]).require_grad()
            h = (data @ w).tanh()
            joined = rg.cat([h, v.sin(), h * v], 0)
            out = joined.clamp(-0.5, 0.5).exp().sum_dim(0).square().sum()
            grads = out.backward()
        return w.grad(grads).numpy(), v.grad(grads).numpy()

    plain = run(rg.NoCheckpointing())
    for budget in (128, 1024, 4096):
        for a, b in zip(plain, run(rg.BudgetCheckpointing(budget))):
            assert np.array_equal(a, b)


def test_retain_graph_and_create_graph_under_a_budget():
    xs = np.linspace(0.1, 1.0, 16)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), rg.BudgetCheckpointing(256))):
        x = rg.tensor(xs).require_grad()
        y = (x.sin() * x.exp()).cos().sum()
        first = x.grad(y.backward(retain_graph=True)).numpy()
        second = x.grad(y.backward()).numpy()
        g = x.grad((x * x * x).sum().backward(create_graph=True))
        second_order = x.grad(g.sum().backward()).numpy()
    assert np.array_equal(first, second)
    u = np.sin(xs) * np.exp(xs)
    np.testing.assert_allclose(first, -np.sin(u) * (np.cos(xs) + np.sin(xs)) * np.exp(xs))
    np.testing.assert_allclose(second_order, 6 * xs)


def test_unreferenced_graph_releases_the_budget():
    strategy = rg.BudgetCheckpointing("1MB")
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
        x = rg.tensor(np.ones(256)).require_grad()
        y = x.exp().sin().exp()
        assert strategy.held_bytes > 0
        del y
    assert strategy.held_bytes == 0


def test_reports_under_every_strategy():
    for name, make in STRATEGIES.items():
        _, grads = _sin_chain(make(), 100)
        assert grads.peak_bytes > 0, name
        # a chain of 100 values of 128 bytes fits 1MB; 256 bytes hold two of them
        assert (grads.recomputed_bytes > 0) == (name in ("balanced", "budget-256")), name


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (512, 512),
        ("512", 512),
        ("512MB", 512 * 10**6),
        ("64MiB", 64 * 2**20),
        ("2GiB", 2 * 2**30),
        ("1.5 kb", 1500),
    ],
)
def test_budget_sizes(text, expected):
    assert parse_bytes(text) == expected
    assert rg.BudgetCheckpointing(text).max_bytes == expected


@pytest.mark.parametrize("bad", ["lots", "12 parsecs", 0, -5, "0MB"])
def test_bad_budget_sizes_raise(bad):
    with pytest.raises(ValueError, match="BudgetCheckpointing"):
        rg.BudgetCheckpointing(bad)


def test_budget_equality_and_repr():
    assert rg.BudgetCheckpointing("1KB") == rg.BudgetCheckpointing(1000)
    assert rg.BudgetCheckpointing(1000) != rg.BudgetCheckpointing(1001)
    assert repr(rg.BudgetCheckpointing(1000)) == "BudgetCheckpointing(1000)"


def test_cli_strategy_names():
    from retrograd.app.trainer import make_strategy

    assert make_strategy("budget:64MB") == rg.BudgetCheckpointing(64 * 10**6)
    assert isinstance(make_strategy("balanced"), rg.BalancedCheckpointing)
    for bad in ("budget", "budget:lots", "fast"):
        with pytest.raises(ValueError):
            make_strategy(bad)


def test_graph_marks_evicted_values():
    from retrograd.app.graphview import EVICTED, trace_step

    # the MLP holds 3.6 KiB for backward at batch 2 (fused linear and layer norm): 1 KB evicts
    step = trace_step("mlp", (1, 8, 8), batch_size=2, checkpointing="budget:1KB")
    assert any(node.status == EVICTED for node in step.nodes)
    assert "evicted" in step.to_dot() and "evicted" in step.summary()


def checkpointers_begun(strategy) -> list:
    """The checkpointers ``strategy`` begins its backwards with, from now on (a list that
    grows as backwards begin)."""
    begun = []
    begin = strategy.begin_backward

    def spy(*args, **kwargs):
        begun.append(begin(*args, **kwargs))
        return begun[-1]

    strategy.begin_backward = spy
    return begun


def test_a_backward_that_recomputes_nothing_hands_out_held_values_and_reports_them():
    from retrograd.autodiff.checkpoint.checkpointer import HeldCheckpointer

    strategy = rg.NoCheckpointing()
    begun = checkpointers_begun(strategy)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
        x = rg.tensor(np.linspace(0.1, 1.0, 32)).require_grad()  # a leaf: not counted
        y = x.sin()  # its rule reads x; y is read by the product's rule, twice
        loss = (y * y).sum()
        first = loss.backward(retain_graph=True)
        second = loss.backward()
    assert [type(c) for c in begun] == [HeldCheckpointer, HeldCheckpointer]
    assert all(c.is_empty() for c in begun)  # every value forgotten at its last read
    expected = 2 * np.sin(np.linspace(0.1, 1.0, 32)) * np.cos(np.linspace(0.1, 1.0, 32))
    for grads in (first, second):
        np.testing.assert_allclose(x.grad(grads).numpy(), expected, rtol=1e-15)
        assert grads.peak_bytes == 32 * 8 and grads.recomputed_ops == 0  # y alone


@pytest.mark.parametrize("view", ["reshape", "swap_dims", "permute", "slice", "expand"])
def test_balanced_keeps_views_a_rule_reads(view):
    """A view a rule reads (GELU's input as the reshape of a linear layer's output, nanoGPT's
    MLP) is kept under BalancedCheckpointing: recomputing it would keep its input, the same
    memory, and count the recomputed view as new bytes (the GPT's peak_bytes was 1.43x
    NoCheckpointing's)."""
    make = {
        "reshape": lambda h: h.reshape(4, 8, 16),
        "swap_dims": lambda h: h.swap_dims(0, 1),
        "permute": lambda h: h.permute(1, 0),
        "slice": lambda h: h[:, 2:],
        "expand": lambda h: h.reshape(1, 32, 16).expand(3, 32, 16),
    }[view]
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal((32, 8)).astype(np.float32)
    w_value = rng.standard_normal((8, 16)).astype(np.float32)
    results = {}
    for name, strategy in (
        ("none", rg.NoCheckpointing()),
        ("balanced", rg.BalancedCheckpointing()),
    ):
        with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
            x = rg.tensor(x_value)
            w = rg.tensor(w_value).require_grad()
            grads = rg.nn.functional.gelu(make(x @ w)).sum().backward()
            results[name] = (grads.peak_bytes, grads.recomputed_ops, w.grad(grads).numpy())
    assert results["balanced"][1] == 0
    assert results["balanced"][0] <= results["none"][0]
    np.testing.assert_array_equal(results["balanced"][2], results["none"][2])


def _residual_stream(strategy, metric_branch=False):
    """nanoGPT's residual stream, small: ``x = x + proj(layer_norm(x))`` per layer, each
    residual ``add`` read by the next layer norm (a kept op)."""
    rng = np.random.default_rng(0)
    width = 16
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
        weights = [
            rg.tensor(rng.standard_normal((width, width)).astype(np.float32) / 4).require_grad()
            for _ in range(3)
        ]
        x = rg.tensor(rng.standard_normal((64, width)).astype(np.float32)).require_grad()
        h = x
        for weight in weights:
            h = h + rg.nn.functional.layer_norm(h, (width,)) @ weight
        # exp (recomputed under Balanced) reads its output; a matmul (kept) its input
        loss = (h.exp() if metric_branch else h @ weights[0]).sum()
        if metric_branch:
            # kept ops that read the last add but that the backward does not walk
            unused = h @ weights[0]
            del unused
        grads = loss.backward()
        return grads, [w.grad(grads).numpy() for w in [x, *weights]]


@pytest.mark.parametrize("metric_branch", [False, True], ids=["stream", "unwalked-reader"])
def test_balanced_residual_adds_hold_no_backups(metric_branch):
    """Under BalancedCheckpointing a residual ``add`` is recomputable, so it backed up both
    its inputs until backward; but the next layer norm keeps its output, so it is never
    recomputed, and the projection it backed up (read by nothing else) was held from forward
    to backward for nothing: nanoGPT's peak_bytes was 1.13x NoCheckpointing's with nothing
    recomputed. A kept reader now lets those backups go; an add whose reader the backward
    does not walk still finds its output."""
    none, expected = _residual_stream(rg.NoCheckpointing(), metric_branch)
    balanced, got = _residual_stream(rg.BalancedCheckpointing(), metric_branch)
    if metric_branch:
        assert balanced.recomputed_ops == 1  # the exp, from the add's output, kept for it
    else:
        assert balanced.recomputed_ops == 0
        assert balanced.peak_bytes <= none.peak_bytes
    for ours, theirs in zip(got, expected, strict=True):
        np.testing.assert_array_equal(ours, theirs)


class _RecomputeProducts(rg.CheckpointStrategy):
    def recomputes(self, op):
        return op.name in ("matmul", "mul")


def test_a_product_by_its_own_transpose_is_recomputed_bit_for_bit():
    """``q @ q.swap_dims(1, 2)`` (q one buffer, read transposed): NumPy gives that product to
    BLAS's syrk, whose bits differ from gemm's. Recomputed in backward, ``q`` is a new buffer
    while the kept transposed view still reads the old one, so the product ran as gemm and
    the gradients differed from NoCheckpointing's in the last bits (seen under
    BudgetCheckpointing's eager steps, 1e-5 on a masked-attention stack)."""
    rng = np.random.default_rng(0)
    x_value = rng.standard_normal((3, 32, 16)).astype(np.float32)
    w_value = rng.standard_normal((16, 16)).astype(np.float32)
    results = []
    for strategy in (rg.NoCheckpointing(), _RecomputeProducts()):
        with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), strategy)):
            x = rg.tensor(x_value).require_grad()
            w = rg.tensor(w_value).require_grad()
            q = x @ w
            scores = q @ q.swap_dims(1, 2)
            grads = (scores * scores).sum().backward()
            results.append((grads.recomputed_ops, w.grad(grads).numpy()))
    assert results[0][0] == 0 and results[1][0] > 0
    np.testing.assert_array_equal(results[1][1], results[0][1])
