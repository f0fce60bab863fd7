"""The per-op fast paths keep every behaviour: NoCheckpointing's records skip the strategy's
``recomputes`` call unless a subclass or the instance overrides it, node namers registered
after the guards were made still name nodes, the backward runs nodes of one depth newest first
(torch's order), and the held checkpointer's one-call-per-step read hands a value read twice
to both reads. Expected values come from torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd.errors import NODE_NAMERS

X0 = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
W0 = np.linspace(0.5, -0.7, 12, dtype=np.float32).reshape(3, 4)


def _chain(backend):
    """``y = sin(sin(y * w)) + x`` five times on ``backend`` (an outer sin reads an inner
    one's output: recomputed where the strategy recomputes sin): the gradients of x and w, and
    the Gradients (its recomputation report)."""
    with rg.use_backend(backend):
        x = rg.tensor(X0).require_grad()
        w = rg.tensor(W0).require_grad()
        y = x
        for _ in range(5):
            y = (y * w).sin().sin() + x
        grads = y.sum().backward()
    return x.grad(grads).numpy(), w.grad(grads).numpy(), grads


def _torch_chain():
    x = torch.tensor(X0, requires_grad=True)
    w = torch.tensor(W0, requires_grad=True)
    y = x
    for _ in range(5):
        y = (y * w).sin().sin() + x
    y.sum().backward()
    return x.grad.numpy(), w.grad.numpy()


class _RecomputeSin(rg.NoCheckpointing):
    def recomputes(self, op):
        return op.name == "sin"


def _instance_recomputing_sin():
    strategy = rg.NoCheckpointing()
    strategy.recomputes = lambda op: op.name == "sin"
    return strategy


@pytest.mark.parametrize(
    "make, recomputes",
    [(rg.NoCheckpointing, False), (_RecomputeSin, True), (_instance_recomputing_sin, True)],
    ids=["plain", "subclass", "instance"],
)
def test_no_checkpointing_overrides_still_recompute(make, recomputes):
    inner = rg.default_backend().inner
    grad_x, grad_w, grads = _chain(rg.Autodiff(inner, make()))
    expected_x, expected_w = _torch_chain()
    np.testing.assert_allclose(grad_x, expected_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grad_w, expected_w, rtol=1e-5, atol=1e-6)
    assert (grads.recomputed_ops > 0) is recomputes


def test_node_namer_registered_later_names_the_node():
    seen = []

    def namer(args, kwargs, result):
        seen.append(result.shape)

    x = rg.tensor(X0).require_grad()
    assert "cosh" not in NODE_NAMERS
    try:
        NODE_NAMERS["cosh"] = namer
        x.cosh()
        NODE_NAMERS.pop("cosh")
        x.cosh()
        NODE_NAMERS.update({"cosh": namer})
        x.cosh()
    finally:
        NODE_NAMERS.pop("cosh", None)
    x.cosh()
    assert seen == [(3, 4), (3, 4)]


def test_nodes_of_one_depth_run_newest_first_as_torch():
    def order_of(library, leaf):
        fired = []
        a, b, c = leaf * 1.5, leaf * 2.5, leaf * 3.5  # one depth, made in this order
        for name, t in (("a", a), ("b", b), ("c", c)):
            t.register_hook(lambda g, name=name: fired.append(name))
        (a.sum() + b.sum() + c.sum()).backward()
        return fired

    ours = order_of(rg, rg.tensor(X0).require_grad())
    theirs = order_of(torch, torch.tensor(X0, requires_grad=True))
    assert ours == theirs == ["c", "b", "a"]


def test_value_read_twice_by_one_step_reaches_both_reads():
    # x * x saves x twice under one key: the held checkpointer's retrieve_step hands it to
    # both reads and forgets it after the second (RETROGRAD_CHECK_CHECKPOINTER asserts drained)
    x = rg.tensor(X0).require_grad()
    y = (x * x).sin() * x
    grads = y.sum().backward()
    t = torch.tensor(X0, requires_grad=True)
    ((t * t).sin() * t).sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
