"""A detached tensor keeps its base's storage, not its base's graph (as torch's).

Through its view link, ``y.detach()`` held ``y``, and with it ``y``'s graph and the values it
saved for backward, for as long as the detached tensor lived: an evaluation loop without
``no_grad`` that kept ``model(x).detach()`` held every batch's activations (2 MB a batch of
the model below, where torch holds the 20 KB of predictions), and under a memory budget a
manual update ``(p - lr * g).detach().requires_grad_()`` kept the old parameters and a
backup of ``lr * g``, which the budget counted as held (twice what a replayed step
predicted, in ``tests/test_checkpointing_user_loops.py``'s functional loop)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import torch

import retrograd as rg


def _inner_array(t: rg.Tensor):
    backend = t._backend
    return backend.inner_value(t._prim) if backend.is_autodiff else t._prim


def test_a_detached_output_frees_the_activations_of_its_graph():
    rng = np.random.default_rng(0)
    w1 = rg.tensor(rng.standard_normal((16, 64)).astype(np.float32)).requires_grad_()
    w2 = rg.tensor(rng.standard_normal((64, 3)).astype(np.float32)).requires_grad_()
    x = rg.tensor(rng.standard_normal((8, 16)).astype(np.float32))
    hidden = (x @ w1).relu()  # saved for backward by the second matmul
    saved = weakref.ref(_inner_array(hidden))
    out = hidden @ w2
    kept = out.detach()
    del hidden, out
    gc.collect()
    assert saved() is None  # was alive, held through kept's link to out
    assert kept.shape == (8, 3) and not kept.requires_grad


def test_a_budget_counts_nothing_of_a_manual_update_once_detached():
    budget = rg.BudgetCheckpointing(4096)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), budget)):
        p = rg.tensor(np.ones((30, 24), np.float32)).requires_grad_()
        grads = (p * p).sum().backward()
        old = weakref.ref(_inner_array(p))
        p = (p - 0.2 * p.grad(grads)).detach().requires_grad_()
        gc.collect()
        assert budget.held_bytes == 0  # was 2,880: the backup of 0.2 * g
        assert old() is None  # the old parameter's values
        np.testing.assert_array_equal(p.numpy(), np.full((30, 24), 0.6, np.float32))


def test_detached_tensors_of_a_dropped_base_still_share_their_storage():
    results = []
    for lib in (torch, rg):
        w = lib.ones(3, requires_grad=True)
        y = w * 2
        a, b = y.detach(), y.detach()
        c = b[1:]  # a view of a detached tensor
        del y
        gc.collect()
        a.add_(1)
        c.mul_(10)
        results.append([a.tolist(), b.tolist(), c.tolist()])
    assert results[0] == results[1] == [[3.0, 30.0, 30.0], [3.0, 30.0, 30.0], [30.0, 30.0]]


def test_a_write_through_a_detached_tensor_still_reaches_a_live_base():
    results = []
    for lib in (torch, rg):
        w = lib.ones(3, requires_grad=True)
        y = w * 2
        d = y.detach()
        d[0] = 7.0
        y.mul_(3)
        results.append([y.tolist(), d.tolist()])
    assert results[0] == results[1] == [[21.0, 6.0, 6.0], [21.0, 6.0, 6.0]]
