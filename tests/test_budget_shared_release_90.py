"""A backward that releases a node another graph still reads, under a memory budget.

``create_graph`` records a graph that reads the nodes of the graph it differentiated. A
backward through the new graph without ``retain_graph`` releases the nodes it walks, some of
them shared with the first graph; when that graph was retained, a later ``autograd.grad``
through it reads their outputs again. Under NoCheckpointing the reading node holds each such
value itself; under a budget the value may have been evicted, and only the released node
could rebuild it: the later call failed with "the output of node N is needed but was never
checkpointed" where torch and NoCheckpointing compute (found by ``test_random_autograd_46.py``
run with a budget of 256 bytes, whose programs these are).
"""

from __future__ import annotations

import gc

import pytest

import retrograd as rg
from backends import inner_backend
from test_random_autograd_46 import compare, grad_program, run_steps

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.own_checkpointing("compares BudgetCheckpointing(256) with torch")

#: test_random_autograd_46's draws, in its order: the two before leave the budget's planner
#: as the failing third found it (each step of the third but its last failed before)
SEQUENCE = [
    (["div_scalar"], (False, False, False, False, False, False)),
    (["div_scalar"], (True, False, True, False, False, True)),
    (["mean_keep", "sub_w", "mul_w"], (True, True, True, True, False, True)),
]


def test_a_released_node_rebuilds_its_output_for_the_retained_graph():
    backend = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(256))
    for names, flags in SEQUENCE:
        theirs = run_steps(torch, grad_program(torch, names, flags))
        with rg.use_backend(backend):
            ours = run_steps(rg, grad_program(rg, names, flags))
        assert len(ours) == len(theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            compare(a, b, f"{names} {flags} step {i}")


def test_the_kept_recipe_goes_with_the_graph_that_needed_it():
    """The released node keeps its recipe (and the values it rebuilds from) only while the
    retained graph lives: once the programs' graphs are dropped, the budget holds nothing."""
    strategy = rg.BudgetCheckpointing(256)
    backend = rg.Autodiff(inner_backend(), checkpointing=strategy)
    with rg.use_backend(backend):
        for names, flags in SEQUENCE:
            run_steps(rg, grad_program(rg, names, flags))
    gc.collect()
    assert strategy.pool.held_bytes == 0


def _consuming_program(lib, names, flags):
    """As ``grad_program``, but the second order by a plain ``backward()``, which consumes
    what it walks (the budget's records hand their values to its checkpointer)."""
    from test_random_autograd_46 import chain, leaves

    allow_unused, materialize, _, _, scaled, _ = flags
    x, w = leaves(lib)
    z = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    y = chain(lib, names, x, w)
    go = lib.full(y.shape, 0.5, dtype=lib.float64) if scaled else lib.ones_like(y)
    found = []

    def first():
        found[:] = lib.autograd.grad(
            y,
            [x, w, z],
            grad_outputs=go,
            allow_unused=allow_unused,
            materialize_grads=materialize,
            create_graph=True,
            retain_graph=True,
        )
        return list(found)

    def second_order():
        out = (found[0] * found[0]).sum()
        if lib is torch:
            out.backward()
            return [x.grad, w.grad]
        grads = out.backward()
        return [x.grad(grads), w.grad(grads)]

    def again():
        return list(lib.autograd.grad(y, [x], grad_outputs=go, allow_unused=True))

    return [first, second_order, again]


@pytest.mark.parametrize("scaled", [False, True])
@pytest.mark.parametrize("budget", [256, 10**8])
def test_a_consuming_backward_leaves_the_retained_graph_its_parameters(budget, scaled):
    """The consuming backward of ``(g * g).sum()`` releases ``w[:3]``'s node, which ``y``'s
    retained graph reads again: the node keeps its recipe, and the recipe needs ``w``'s value,
    a backup the consuming backward had taken from the record and let go of in its slot
    ("the output of node N is needed but was never checkpointed", with any budget)."""
    backend = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(budget))
    flags = (True, True, True, True, scaled, True)
    theirs = run_steps(torch, _consuming_program(torch, ["square", "mul_w"], flags))
    with rg.use_backend(backend):
        ours = run_steps(rg, _consuming_program(rg, ["square", "mul_w"], flags))
    for i, (a, b) in enumerate(zip(ours, theirs)):
        compare(a, b, f"step {i}")
    del ours
    gc.collect()
    assert backend.checkpointing.pool.held_bytes == 0  # (the backups went with the graphs)
