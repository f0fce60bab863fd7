"""A backward that keeps its graph (``retain_graph``, ``create_graph``) on one thread while a
backward that consumes the same graph runs on another.

The retaining backward walks the graph first (nothing claimed yet), then the consuming one
claims it and releases each node after its step: the retaining one then read released nodes
and returned gradients silently ``None`` or partial (3 to 21 runs in 40 of a 30-layer chain,
as measured before the fix). Now a consuming backward leaves the nodes a retaining backward
still reads to that backward's end (``runtime._READING``), so both return full gradients, as
when they run one after the other, and the graph is consumed afterwards.
"""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest
import torch

import retrograd as rg
from concurrency_cases import DEADLINE, STRATEGIES, fresh_backend, run_in_threads


def _problem(backend):
    gen = np.random.default_rng(29)
    w1 = gen.standard_normal((5, 8)).astype(np.float32)
    w2 = gen.standard_normal((8, 3)).astype(np.float32)
    x = gen.standard_normal((4, 5)).astype(np.float32)
    with rg.use_backend(backend):
        a, b = rg.tensor(w1).require_grad(), rg.tensor(w2).require_grad()
        hidden = (rg.tensor(x) @ a).tanh()
        loss = (hidden @ b).sigmoid().pow(2).sum()
    ta, tb = torch.tensor(w1, requires_grad=True), torch.tensor(w2, requires_grad=True)
    ((torch.tensor(x) @ ta).tanh() @ tb).sigmoid().pow(2).sum().backward()
    return (a, b), loss, hidden, (ta.grad.numpy(), tb.grad.numpy())


@pytest.mark.parametrize("keep", ["retain_graph", "create_graph"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_consuming_backward_leaves_the_nodes_a_retaining_one_reads(strategy, keep):
    """Thread A's retaining backward pauses in the root's hook (its walk done, no step run)
    while thread B's consuming backward runs to its end; then A goes on. Both give torch's
    gradients, and the graph is consumed once both are done."""
    backend = fresh_backend(strategy)
    (a, b), loss, _, expected = _problem(backend)
    retaining_in_hook, consuming_done = threading.Event(), threading.Event()
    retaining = []

    def hook(grad):
        if threading.current_thread() is retaining[0]:
            retaining_in_hook.set()
            assert consuming_done.wait(DEADLINE)
        return grad

    loss.register_hook(hook)

    def differentiate_retaining():
        retaining.append(threading.current_thread())
        with rg.use_backend(backend):
            grads = loss.backward(**{keep: True})
            return a.grad(grads), b.grad(grads)

    def differentiate_consuming():
        assert retaining_in_hook.wait(DEADLINE)
        try:
            with rg.use_backend(backend):
                grads = loss.backward()
                return a.grad(grads), b.grad(grads)
        finally:
            consuming_done.set()

    kept, consumed = run_in_threads(
        lambda f: f(), [(differentiate_retaining,), (differentiate_consuming,)]
    )
    for got in (kept, consumed):
        assert got[0] is not None and got[1] is not None
        for ours, theirs in zip(got, expected):
            ours = ours.detach() if hasattr(ours, "detach") else ours
            np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.AutodiffError, match="consumed by an earlier backward"):
        loss.backward()


def test_what_the_consuming_backward_left_is_freed_when_the_retaining_one_ends():
    """The nodes whose release waited for the retaining backward are released at its end:
    the root lets go of the graph above it (nothing is kept for a backward that cannot run),
    so the hidden value's node goes once the tensor does."""
    backend = fresh_backend("none")
    _, loss, hidden, _ = _problem(backend)
    watched = weakref.ref(hidden.primitive.node)
    retaining_in_hook, consuming_done, retaining_done = (threading.Event() for _ in range(3))
    retaining = []

    def hook(grad):
        if threading.current_thread() is retaining[0]:
            retaining_in_hook.set()
            assert consuming_done.wait(DEADLINE)
        return grad

    loss.register_hook(hook)

    def differentiate_retaining():
        retaining.append(threading.current_thread())
        with rg.use_backend(backend):
            loss.backward(retain_graph=True)
        retaining_done.set()

    def differentiate_consuming():
        assert retaining_in_hook.wait(DEADLINE)
        with rg.use_backend(backend):
            loss.backward()
        consuming_done.set()
        assert retaining_done.wait(DEADLINE)

    run_in_threads(lambda f: f(), [(differentiate_retaining,), (differentiate_consuming,)])
    del hidden
    gc.collect()
    assert watched() is None
