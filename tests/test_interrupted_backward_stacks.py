"""An interrupt at any line of a backward leaves nothing of it on the thread's stacks.

A backward pushes its tape and gradients on the thread's stacks (``runtime.backward``: what a
hook or a nested backward reads), and ``Tensor.backward`` pushes the list where backwards
called while it runs leave their gradients. Each is popped on the way out, finished or
interrupted. Pushed or popped outside the ``try`` that pops them, an interrupt between the
two left an entry for good: in ``runtime.backward`` between its two pops, the gradients it
had gathered; in ``Tensor.backward`` in its ``finally`` before the pop, a list to which every
later backward on the thread added its gradients. CI's soak of interrupted optimizer steps
(``test_reliability_sweep_67``) met both as objects left behind, at the seeds whose lines
happened to land there.

Here the interrupt lands at each line of the two functions in turn where a real one can
(``test_reliability_sweep_67``'s model), and after each: the stacks hold nothing of it, and
the gradients of a backward run next are freed when dropped.
"""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

import pytest

import retrograd as rg
from retrograd.autodiff import runtime
from test_reliability_sweep_67 import _CHECKS, _no_interrupt_lands


class _InterruptAtLine:
    """A trace function raising KeyboardInterrupt at the ``at``-th line event of ``code``
    where a real interrupt can land (``test_reliability_sweep_67``'s model: after an
    instruction where a signal's handler runs, under the handler that covers it; never on a
    ``with`` statement's way out, whose ``__exit__`` call an interrupt cannot precede -- one
    raised there left a lock held, and every later thread that took it hung)."""

    def __init__(self, code, at: int | None):
        self.code, self.at, self.seen, self.check = code, at, 0, 0

    def __call__(self, frame, event, arg):
        if event == "call" and frame.f_code is self.code:
            frame.f_trace_opcodes = True
            return self._line
        return None

    def _line(self, frame, event, arg):
        if event == "opcode":
            if frame.f_code.co_code[frame.f_lasti] in _CHECKS:
                self.check = frame.f_lasti
        elif event == "line" and not _no_interrupt_lands(frame, self.check):
            self.seen += 1
            if self.seen == self.at:
                raise KeyboardInterrupt
        return self._line


def _loss() -> tuple[rg.Tensor, rg.Tensor]:
    x = rg.tensor([1.0, -2.0, 3.0], requires_grad=True)
    return x, ((x * x).tanh() * x).sum()


def _interrupted_at(code, at: int | None, retain_graph: bool = False) -> tuple[bool, int, Any]:
    _, loss = _loss()
    tracer = _InterruptAtLine(code, at)
    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        loss.backward(retain_graph=retain_graph)
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
    finally:
        sys.settrace(previous)
    return interrupted, tracer.seen, loss


def _nothing_left() -> None:
    assert not getattr(runtime._RUNNING, "tapes", None)
    assert not getattr(runtime._RUNNING, "gradients", None)
    assert not runtime._READING
    x, loss = _loss()
    grads = loss.backward()
    assert x.grad(grads) is not None
    kept = weakref.ref(grads)
    del grads, loss
    gc.collect()
    assert kept() is None, "a later backward's gradients are kept alive"


@pytest.mark.parametrize("retain_graph", [False, True], ids=["consuming", "retaining"])
@pytest.mark.parametrize(
    "function", [runtime.backward, rg.Tensor.backward], ids=["runtime", "Tensor"]
)
def test_an_interrupt_at_any_line_of_a_backward_leaves_nothing_on_the_stacks(
    function, retain_graph
):
    """... and the graph usable: whole where the interrupt came before the walk's first step
    ran, and after it, consumed as torch's ("backward through the graph a second time"),
    never claimed for good by a backward that no longer runs."""
    code = function.__code__
    _interrupted_at(code, None, retain_graph)  # (the first backward of a process runs set-up)
    _, total, _ = _interrupted_at(code, None, retain_graph)
    assert total > 5
    consumed = []
    for at in range(1, total + 1):
        interrupted, _, loss = _interrupted_at(code, at, retain_graph)
        assert interrupted, at
        _nothing_left()
        try:
            loss.backward()
            consumed.append(False)
        except rg.AutodiffError as error:
            assert "was consumed by an earlier backward()" in str(error), (at, error)
            assert not retain_graph, (at, error)
            consumed.append(True)
    # once a step has run and freed its part of the graph, it stays consumed
    assert consumed == sorted(consumed), consumed


def _sub(w: rg.Tensor, g: rg.Tensor) -> None:
    w.sub_(g, alpha=0.1)


def _through_data(w: rg.Tensor, g: rg.Tensor) -> None:
    w.data = w.data - 0.1 * g


@pytest.mark.parametrize("writer", [_sub, _through_data], ids=["sub_", "data="])
def test_a_write_interrupted_and_written_again_remembers_the_old_leaf_once(writer):
    """An in-place write remembers the leaf it replaces while a live ``Gradients`` holds that
    leaf's gradient. Interrupted after that step and before the tensor took its fresh leaf,
    the write is made again on the same old leaf: it was remembered twice, and the soak of
    interrupted optimizer steps saw the second one as an object left behind."""
    from retrograd.tensor import inplace, views

    code = {_sub: views._set_root, _through_data: inplace.assign}[writer].__code__

    def write(at: int | None) -> tuple[bool, int, list]:
        w = rg.tensor([1.0, 2.0], requires_grad=True)
        grads = (w * w).sum().backward()  # alive: w's old leaf stays readable
        tracer = _InterruptAtLine(code, at)
        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            with rg.no_grad():
                writer(w, w.grad(grads))
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        finally:
            sys.settrace(previous)
        with rg.no_grad():
            writer(w, w.grad(grads))
        return interrupted, tracer.seen, [former.key for former in w._former_keys]

    write(None)
    _, total, keys = write(None)
    assert len(keys) == len(set(keys)) and total > 5
    for at in range(1, total + 1):
        interrupted, _, keys = write(at)
        assert interrupted, at
        assert len(keys) == len(set(keys)), (at, keys)
