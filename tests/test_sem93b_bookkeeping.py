"""The graph bookkeeping round 93 left, against torch 2.13 (helper sem93b).

- ``retains_grad`` of a tensor that ``retain_grad()`` turned False after an in-place write
  under ``no_grad``/``inference_mode``/through ``.data`` (the gradient was kept all along)
  and after ``detach_()``; torch's stays True.
- A leaf frozen by ``requires_grad_(False)`` (or ``detach_()``) lost the gradient earlier
  backwards gave it (``x.grad(grads)`` was None); torch's ``.grad`` keeps it. A backward
  after the freeze, through a graph recorded before it, still gives the frozen leaf none,
  as torch's engine accumulates nothing into a leaf that does not require grad.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def grad_of(lib, t, grads):
    """torch's ``.grad``; retrograd's gradient of ``t`` in ``grads`` (a port's reading)."""
    if lib is torch:
        return t.grad
    return None if grads is None else t.grad(grads)


def listed(t):
    return None if t is None else t.detach().tolist()


@pytest.mark.parametrize("write", ["no_grad", "inference_mode", "data", "view", "detach_"])
def test_retains_grad_survives_writes_outside_the_graph(write):
    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x + x
        y.retain_grad()
        if write == "no_grad":
            with lib.no_grad():
                y.add_(1)
        elif write == "inference_mode":
            with lib.inference_mode():
                y.add_(1)
        elif write == "data":
            y.data.mul_(2)
        elif write == "view":
            with lib.no_grad():
                y[0:1].add_(1)
        else:
            y.detach_()
        out = [y.retains_grad, y.requires_grad, y.is_leaf]
        if y.is_leaf:  # (a copy is a tensor of its own: torch's does not retain)
            out.append(copy.deepcopy(y).retains_grad)
        if y.requires_grad:
            grads = (y * y).sum().backward()
            out.append(listed(grad_of(lib, y, grads)))
        return out

    assert program(rg) == program(torch)


def test_frozen_leaf_keeps_its_gradient():
    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor([3.0, 5.0], requires_grad=True)
        before = (x * w).sum()
        grads = before.backward(retain_graph=True)
        x.requires_grad_(False)
        frozen = [listed(grad_of(lib, x, grads)), x.requires_grad, x.is_leaf]
        # a backward after the freeze, through the graph recorded before it
        later = before.backward()
        if lib is torch:  # one .grad: what the later backward added to it (nothing)
            return frozen, (x.grad - torch.tensor([3.0, 5.0])).abs().sum().item()
        return frozen, x.grad(later)

    (ours, added), (theirs, torch_added) = program(rg), program(torch)
    assert ours == theirs == [[3.0, 5.0], False, True]
    assert torch_added == 0.0 and added is None


def test_frozen_then_thawed_leaf_gradients_add_as_torch():
    """Freeze, a backward through the old graph (nothing for x), thaw, a backward through
    it again (x's gradient again): torch's one ``.grad`` is the sum of all this gives x."""

    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        w = lib.tensor([1.0, 1.0], requires_grad=True)
        y = (x * w).sum()
        y3 = (x * w * 3).sum()
        total = y.backward(retain_graph=True)
        x.requires_grad_(False)
        after_freeze = y.backward()
        x.requires_grad_(True)
        after_thaw = y3.backward()
        if lib is torch:
            return listed(x.grad)
        total = total + after_freeze + after_thaw
        return listed(x.grad(total))

    assert program(rg) == program(torch) == [4.0, 4.0]


@pytest.mark.parametrize("clear", ["zero", "none"])
def test_frozen_leaf_gradient_can_be_cleared(clear):
    def program(lib):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        grads = (x * x).sum().backward()
        x.detach_()  # (a leaf's detach_ freezes it as requires_grad_(False))
        kept = listed(grad_of(lib, x, grads))
        if clear == "zero":
            grad_of(lib, x, grads).zero_()
        elif lib is torch:
            x.grad = None
        else:
            x.grad_remove(grads)
        return [kept, listed(grad_of(lib, x, grads))]

    assert program(rg) == program(torch)


def test_optimizer_steps_a_frozen_parameter_with_its_kept_gradient():
    """torch's optimizers step every parameter whose ``.grad`` is not None, a frozen one
    too: a second ``step()`` after ``requires_grad_(False)``, without ``zero_grad()``,
    moves the frozen weight again by its kept gradient (the port steps with the same
    gradients); a later backward gives it none, so the step after that leaves it."""

    def program(lib):
        model = lib.nn.Linear(2, 1)
        with lib.no_grad():
            model.weight.copy_(lib.tensor([[0.5, -1.0]]))
            model.bias.fill_(0.25)
        data = lib.tensor([[1.0, 2.0], [3.0, -1.0]])
        opt = lib.optim.SGD(model.parameters(), lr=0.1)
        grads = model(data).sum().backward()
        opt.step() if lib is torch else opt.step(grads)
        model.weight.requires_grad_(False)
        opt.step() if lib is torch else opt.step(grads)
        stepped = [listed(model.weight), listed(model.bias)]
        opt.zero_grad()
        grads = model(data).sum().backward()
        opt.step() if lib is torch else opt.step(grads)
        return [*stepped, listed(model.weight), listed(model.bias)]

    ours, theirs = program(rg), program(torch)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-6)
