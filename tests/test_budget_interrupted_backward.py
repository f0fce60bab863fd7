"""A backward interrupted before its checkpointer exists, under a memory budget.

An interrupt (Ctrl-C) can land while a backward walks its graph (``runtime.Tape``) or while
the budget hands its checkpointer out (``BudgetCheckpointing.begin_backward``: the planner's
``backward_begins``, the walked tree, the checkpointer's build). Until 6 December the step
being recorded stayed open there: the next step's forward was recorded as the rest of it (a
graph of two forwards, planned and kept as a graph of its own), or the planner waited on the
end of a backward that never ran, and an interrupted walk left the graph's nodes claimed, so
that a second ``backward`` refused the graph as consumed. ``test_memsoak1``'s interrupts at
random lines met it as one plan left behind over 30 steps.

Each case interrupts one backward at the n-th line run inside one of those functions, then
backpropagates the same graph again, or trains a step on while it is still alive and drops
it, and trains on: the gradients are the uninterrupted ones, and the steps after it follow
the loop's one plan, holding what the steps before it held.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

F = rg.nn.functional

#: (the function's code name, its file's name, the lines to interrupt at): where a backward
#: starts. Not ``_tape``'s first line, its ``try``: an interrupt there comes before the
#: backward began, as one before ``backward()`` was called, and the step's graph is then a
#: graph alive that no backward ran (its trace is dropped when the graph is; a loop that
#: keeps it alive while the next step runs records the next forward as its continuation).
PLACES = [
    ("_walk", "runtime.py", (1, 2, 3, 5, 8)),
    ("_tape", "runtime.py", (2,)),
    ("_checkpointer_for", "strategy.py", (1, 2, 3, 5, 8)),
    ("backward_begins", "planner.py", (1, 2, 3, 5, 8)),
    ("_checkpointer", "strategy.py", (1, 2, 3, 5, 8)),
    ("_with_sources", "strategy.py", (1, 2, 3, 5, 8)),
]
CASES = [((name, filename), line) for name, filename, lines in PLACES for line in lines]


class _InterruptInside:
    """A trace function raising KeyboardInterrupt at the ``line``-th line event of a frame
    running function ``name`` of file ``filename``."""

    def __init__(self, name: str, filename: str, line: int):
        self.name, self.filename, self.left = name, filename, line
        self.fired = False

    def __call__(self, frame, event, arg):
        code = frame.f_code
        if event == "call":
            inside = code.co_name == self.name and code.co_filename.endswith(self.filename)
            return self if inside and not self.fired else None
        if event == "line" and not self.fired:
            self.left -= 1
            if self.left == 0:
                self.fired = True
                raise KeyboardInterrupt
        return self


def _loss(ws: list[rg.Tensor], x: rg.Tensor) -> rg.Tensor:
    h = x
    for w in ws:
        h = (h @ w).tanh() + h
    return (h * h).mean()


def _arrays() -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(11)
    ws = [(rng.standard_normal((32, 32)) / 6).astype(np.float32) for _ in range(4)]
    return ws, rng.standard_normal((16, 32)).astype(np.float32)


@pytest.mark.parametrize("retry", [True, False], ids=["retried", "dropped"])
@pytest.mark.parametrize(
    ("place", "line"), CASES, ids=[f"{place[0]}-{line}" for place, line in CASES]
)
def test_an_interrupt_as_backward_starts_leaves_the_loop_on_its_plan(place, line, retry):
    arrays, batch = _arrays()
    with rg.use_backend(rg.Autodiff(inner_backend())):
        ws = [rg.tensor(a).require_grad() for a in arrays]
        grads = _loss(ws, rg.tensor(batch)).backward()
        expected = [w.grad(grads).numpy().copy() for w in ws]
        unbudgeted = grads.peak_bytes
    strategy = rg.BudgetCheckpointing(unbudgeted // 2)
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        ws = [rg.tensor(a).require_grad() for a in arrays]
        x = rg.tensor(batch)
        before = [_loss(ws, x).backward() for _ in range(4)]
        assert strategy.plans == 1
        loss = _loss(ws, x)
        trace = _InterruptInside(*place, line)
        sys.settrace(trace)
        try:
            loss.backward()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert trace.fired, f"{place[0]} ran fewer than {line} lines"
        if retry:  # the same graph, backpropagated whole this time
            again = loss.backward()
            assert all(np.array_equal(w.grad(again).numpy(), e) for w, e in zip(ws, expected))
            del again
        else:  # left alone while the loop trains on (an interrupted step skipped), then dropped
            grads = _loss(ws, x).backward()
            assert all(np.array_equal(w.grad(grads).numpy(), e) for w, e in zip(ws, expected))
            del grads
        del loss
        after = [_loss(ws, x).backward() for _ in range(4)]
        assert strategy.plans == 1, strategy.plans  # no graph of two forwards planned
        assert len(strategy.planner.kept) == 1
        peaks = {g.peak_bytes for g in before[1:] + after}
        assert len(peaks) == 1, ([g.peak_bytes for g in before], [g.peak_bytes for g in after])
        ops = {g.recomputed_ops for g in before[1:] + after}
        assert len(ops) == 1, ops
        for grads in after:
            assert all(np.array_equal(w.grad(grads).numpy(), e) for w, e in zip(ws, expected))
    assert strategy.held_bytes == 0
