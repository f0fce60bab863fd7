"""Tensor hooks and ``retain_grad`` of a tensor written in place under ``no_grad`` between
two uses, against torch 2.13.

torch's tensor keeps one gradient through such a write: a leaf's hooks run once per backward,
on the sum of what the uses before and after the write sent it, and a non-leaf's retained
gradient (and the hooks registered on it after the write) sums them too. retrograd made the
written leaf a fresh one (its former key kept for ``Tensor.grad``), and the hooks ran once on
each leaf's part: ``h`` saw ``[5, 5]`` then ``[3, 3]`` where torch's sees ``[8, 8]`` once (a
clamping hook then gave another gradient); a non-leaf's ``retain_grad()`` gave ``None`` (called
before the write) or the later uses' part (after it).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

LIBS = (torch, rg)


def _grad(lib, t, grads):
    return t.grad if lib is torch else t.grad(grads)


def _np(t):
    return None if t is None else np.asarray(t.detach().numpy()).tolist()


def _leaf(lib, values=(1.0, -2.0, 0.5)):
    return lib.tensor(np.array(values, dtype=np.float64), requires_grad=True)


def _run_both(program):
    """``program(lib)`` on torch and on retrograd: their results (lists), compared."""
    theirs, ours = (program(lib) for lib in LIBS)
    assert ours == theirs, (ours, theirs)


def test_a_leaf_hook_runs_once_on_the_sum_of_the_uses_before_and_after_the_write():
    def program(lib):
        log = []
        x = _leaf(lib)
        x.register_hook(lambda g: log.append(_np(g)))
        y = x * 3
        with lib.no_grad():
            x.add_(1)
        grads = (y.sum() + (x * 5).sum()).backward()
        return [log, _np(_grad(lib, x, grads))]

    _run_both(program)


def test_a_clamping_leaf_hook_clamps_the_whole_gradient():
    def program(lib):
        x = _leaf(lib)
        x.register_hook(lambda g: g.clamp(max=4.0))
        y = x * 3
        with lib.no_grad():
            x.mul_(2)
        grads = (y.sum() + (x * 5).sum()).backward()
        return [_np(_grad(lib, x, grads))]

    _run_both(program)


def test_hooks_of_a_leaf_written_twice_before_and_after_the_writes_run_once_in_order():
    def program(lib):
        log = []
        x = _leaf(lib)
        x.register_hook(lambda g: log.append(("doubled", _np(g))) or g * 2)
        a = x.exp()  # (saves its result, not x: torch refuses a saved tensor written)
        with lib.no_grad():
            x.sub_(0.5)
        x.register_hook(lambda g: log.append(("clamped", _np(g))) or g.clamp(min=-3.0))
        b = x * 7
        with lib.no_grad():
            x.mul_(-1)
        c = (x * x * x).sum()
        grads = (a.sum() + b.sum() + c).backward()
        return [log, _np(_grad(lib, x, grads))]

    _run_both(program)


def test_a_hook_registered_after_the_write_sees_the_uses_before_it_too():
    def program(lib):
        log = []
        x = _leaf(lib)
        y = x.exp()
        with lib.no_grad():
            x.add_(1)
        x.register_hook(lambda g: log.append(_np(g)))
        handle = x.register_hook(lambda g: g.mul_(10))  # in place, returning None
        grads = (y.sum() + (x * 5).sum()).backward()
        handle.remove()
        log.append("removed")
        if lib is torch:  # (torch's .grad accumulates; ours is what the backward returned)
            x.grad = None
        with lib.no_grad():
            x.add_(1)
        z = x * 2
        grads = ((x * x).sum() + z.sum()).backward()
        return [log, _np(_grad(lib, x, grads))]

    _run_both(program)


def test_backward_inputs_of_a_written_leaf_runs_its_hook_once():
    def program(lib):
        log = []
        x, w = _leaf(lib), _leaf(lib, (0.25, 3.0, -1.0))
        x.register_hook(lambda g: log.append(_np(g)) or g.sign() * 3)
        y = x * 4 + w * 2
        with lib.no_grad():
            x.add_(2)
        loss = y.sum() - (x * 9).sum() + (w * 2).sum()
        grads = loss.backward(inputs=[x])
        return [log, _np(_grad(lib, x, grads)), _np(_grad(lib, w, grads))]

    _run_both(program)


@pytest.mark.parametrize("when", ["before", "after"])
def test_retain_grad_of_a_non_leaf_written_under_no_grad_sums_both_uses(when):
    def program(lib):
        log = []
        x = _leaf(lib)
        y = x * 2
        if when == "before":
            y.retain_grad()
        a = y * 3
        with lib.no_grad():
            y.add_(1)
        if when == "after":
            y.retain_grad()
        y.register_hook(lambda g: log.append(_np(g)) or g * 2)
        with lib.no_grad():
            y.mul_(0.5)
        grads = (a.sum() + (y * y).sum()).backward()
        return [log, _np(_grad(lib, y, grads)), _np(_grad(lib, x, grads))]

    _run_both(program)


def test_autograd_grad_of_a_non_leaf_written_under_no_grad_sums_both_uses():
    def program(lib):
        x = _leaf(lib)
        y = x.sin()
        a = y * 3
        with lib.no_grad():
            y.add_(1)
        (gy,) = lib.autograd.grad(a.sum() + (y * 5).sum(), [y])
        return [_np(gy)]

    _run_both(program)


def test_retain_grad_follows_a_recorded_write_after_a_write_under_no_grad():
    def program(lib):
        x = _leaf(lib)
        y = x * 2
        y.retain_grad()
        a = y * 3
        with lib.no_grad():
            y.add_(1)
        b = y * 5
        y.mul_(2)  # recorded: the retained gradient is the new value's, as torch's
        grads = (a.sum() + b.sum() + (y * 7).sum()).backward()
        return [_np(_grad(lib, y, grads)), _np(_grad(lib, x, grads))]

    _run_both(program)
