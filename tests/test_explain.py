"""The engine's plan hook, ``rg.autodiff.step_plan``: what backward will do with each value of a
step, reported before backward runs, agrees with what backward then does, and changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend
from retrograd.autodiff import RecordingAutodiff, step_plan
from retrograd.autodiff.explain import EVICTED, FREED, LEAF, RECOMPUTED, SAVED


def _mlp_step(backend, seed=0):
    """A two-layer MLP's loss on ``backend``: (loss, its leaves)."""
    rng = np.random.default_rng(seed)
    with rg.use_backend(backend):
        w1 = rg.tensor(rng.standard_normal((8, 16))).require_grad()
        w2 = rg.tensor(rng.standard_normal((16, 4))).require_grad()
        x = rg.tensor(rng.standard_normal((5, 8)))  # untracked: a rule reads it (w1's gradient)
        h = (x @ w1).tanh() * 0.5 + 1.0
        loss = ((h @ w2).relu() ** 2).mean()
    return loss, (w1, w2)


def _recomputed_bytes(plan):
    return sum(v.nbytes for v in plan if v.status in (RECOMPUTED, EVICTED))


@pytest.mark.parametrize(
    "strategy, status",
    [
        (rg.NoCheckpointing(), None),
        (rg.BalancedCheckpointing(), RECOMPUTED),
        (rg.BudgetCheckpointing(256), EVICTED),
    ],
)
def test_the_plan_is_what_backward_then_does(strategy, status):
    backend = RecordingAutodiff(inner_backend(), strategy)
    loss, (w1, w2) = _mlp_step(backend)
    plan = step_plan(backend, loss.primitive)
    statuses = {value.status for value in plan}
    if status is None:
        assert statuses <= {SAVED, FREED, LEAF}
    else:
        assert status in statuses
    # each value marked recomputed is recomputed once by the backward that follows; one marked
    # evicted at least once (backward under a budget may drop and recompute more)
    planned = _recomputed_bytes(plan)
    grads = loss.backward()
    if status == EVICTED:
        assert grads.recomputed_bytes >= planned > 0
    else:
        assert grads.recomputed_bytes == planned
        assert (planned > 0) == (status is not None)
    # and the plan consumed nothing: the gradients are NoCheckpointing's
    plain_loss, (p1, p2) = _mlp_step(rg.Autodiff(inner_backend()))
    plain = plain_loss.backward()
    for ours, theirs in ((w1, p1), (w2, p2)):
        np.testing.assert_array_equal(ours.grad(grads).numpy(), theirs.grad(plain).numpy())


def test_every_value_is_reported_once_with_its_kind_shape_and_parents():
    backend = RecordingAutodiff(inner_backend(), rg.BalancedCheckpointing())
    loss, (w1, _) = _mlp_step(backend)
    plan = step_plan(backend, loss.primitive)
    keys = [value.key for value in plan]
    assert len(keys) == len(set(keys))
    assert plan.root == loss.primitive.node.id
    by_key = {value.key: value for value in plan}
    leaf = by_key[w1.primitive.node.id]
    assert (leaf.kind, leaf.status, leaf.shape, leaf.op) == ("leaf", LEAF, (8, 16), None)
    ops = {value.op: value for value in plan if value.op is not None}
    assert ops["matmul"].kind == "compute" and ops["tanh"].kind == "memory"
    assert ops["mean"].shape == () and ops["matmul"].shape in ((5, 16), (5, 4))
    # the untracked input x is a constant the first matmul's rules read (w1's gradient)
    (constant,) = [value for value in plan if value.kind == "constant"]
    assert constant.status == SAVED and constant.shape == (5, 8)
    readers = [value for value in plan if constant.key in value.constants]
    assert [value.op for value in readers] == ["matmul"]
    assert w1.primitive.node.id in readers[0].parents
    # parents are reported values
    assert all(parent in by_key for value in plan for parent in value.parents)


def test_without_a_recording_backend_shapes_are_known_for_held_values_only():
    backend = rg.Autodiff(inner_backend(), rg.NoCheckpointing())
    loss, _ = _mlp_step(backend)
    plan = step_plan(backend, loss.primitive)
    for value in plan:
        if value.status == SAVED:
            assert value.shape is not None and value.nbytes > 0
        elif value.status == FREED:
            assert value.shape is None and value.nbytes is None


def test_an_untracked_root_has_no_plan():
    backend = rg.Autodiff(inner_backend())
    with rg.use_backend(backend):
        x = rg.tensor([1.0, 2.0])
    with pytest.raises(rg.AutodiffError, match="step_plan"):
        step_plan(backend, (x * 2).sum().primitive)


def test_a_consumed_graph_has_no_plan():
    backend = rg.Autodiff(inner_backend())
    loss, _ = _mlp_step(backend)
    loss.backward()
    with pytest.raises(rg.AutodiffError, match="consumed"):
        step_plan(backend, loss.primitive)


@pytest.mark.parametrize("strategy", [rg.BalancedCheckpointing(), rg.BudgetCheckpointing(256)])
def test_a_missing_value_is_reported_with_the_backward_step_that_recomputes_it(strategy):
    from retrograd.autodiff.runtime import Tape

    backend = RecordingAutodiff(inner_backend(), strategy)
    # under a budget, the step drawn follows the plan: made after the first step, or under
    # the plans' floor (256 bytes) after the first step as well
    for _ in range(2):
        _mlp_step(backend)[0].backward()
        if getattr(strategy, "planned_steps", 1):
            break
    loss, _ = _mlp_step(backend)
    plan = step_plan(backend, loss.primitive)
    missing = {v.key: v for v in plan if v.status in (RECOMPUTED, EVICTED)}
    assert missing
    assert all(v.recomputed_at is None for v in plan if v.key not in missing)
    steps = Tape(loss.primitive.node).steps
    for value in missing.values():
        step, op = value.recomputed_at
        assert steps[step].op.name == op
        # that step reads the value, or a missing value recomputed from it (through other
        # missing values: a chain is recomputed whole)
        read = set(steps[step].saved.keys)
        reached, frontier = set(), [key for key in read if key in missing]
        while frontier:
            key = frontier.pop()
            if key not in reached:
                reached.add(key)
                frontier.extend(p for p in missing[key].parents if p in missing)
        assert value.key in reached, (value, read)
