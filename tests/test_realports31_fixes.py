"""Regression tests of the defects the real ports 91-92 found (realports31: JEM's SGLD on a
leaf made from the replay buffer, the DEQ's implicit backward from a hook), each against
torch's run of the same lines."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg


def _np(t):
    return np.asarray(t.detach().numpy())


def _sgld(lib, make_leaf):
    """JEM's ``sample_q`` loop on a leaf ``make_leaf`` builds from rows of a buffer; the
    iterates and the buffer after."""
    buffer = lib.tensor(np.linspace(-1.0, 1.0, 12).reshape(6, 2), dtype=lib.float32)
    x_k = make_leaf(lib, buffer)
    seen = []
    for _ in range(3):
        f_prime = lib.autograd.grad((x_k.sin() * 3).sum(), [x_k], retain_graph=True)[0]
        x_k.data += 0.5 * f_prime
        seen.append(_np(x_k).copy())
    return seen, _np(buffer).copy(), bool(x_k.requires_grad), bool(x_k.is_leaf)


LEAVES_FROM_VIEWS = {
    "Variable of an indexed batch": lambda lib, b: lib.autograd.Variable(
        b[lib.tensor([4, 1, 4])], requires_grad=True
    ),
    "Variable of a slice": lambda lib, b: lib.autograd.Variable(b[1:3], requires_grad=True),
    "requires_grad_ of a slice": lambda lib, b: b[2:5].requires_grad_(),
    "requires_grad_ of a detached slice": lambda lib, b: b[:, 1].detach().requires_grad_(),
}


@pytest.mark.parametrize("how", list(LEAVES_FROM_VIEWS))
def test_a_leaf_made_from_a_view_keeps_requiring_grad_after_a_data_write(how):
    """The leaf lost ``requires_grad`` at the first ``x_k.data += ...`` (the write goes to the
    view's base, and the view was recomputed from it as a plain tensor), so the next
    ``autograd.grad`` refused it."""
    theirs = _sgld(torch, LEAVES_FROM_VIEWS[how])
    ours = _sgld(rg, LEAVES_FROM_VIEWS[how])
    for mine, reference in zip(ours[0], theirs[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-6, atol=1e-6)  # the shared base
    assert ours[2:] == theirs[2:] == (True, True)


def test_variable_with_requires_grad_leaves_its_tensor_as_it_was():
    """``Variable(t, requires_grad=True)`` made ``t`` itself require grad: a later in-place
    write to ``t`` was refused (a leaf that requires grad), where torch's is allowed and
    shows in the new leaf, which shares ``t``'s values."""
    results = []
    for lib in (torch, rg):
        t = lib.tensor([1.0, 2.0, 3.0])
        x = lib.autograd.Variable(t, requires_grad=True)
        t.add_(1.0)  # allowed: t does not require grad
        (g,) = lib.autograd.grad((x * x).sum(), x)
        results.append((x is t, bool(t.requires_grad), bool(x.requires_grad), _np(x), _np(g)))
    (*mine, x_ours, g_ours), (*reference, x_theirs, g_theirs) = results[1], results[0]
    assert mine == reference == [False, False, True]
    np.testing.assert_allclose(x_ours, x_theirs)
    np.testing.assert_allclose(g_ours, g_theirs)


def _implicit_backward(lib):
    """The DEQ tutorial's implicit backward, in small: a hook on the layer's output solves
    for the adjoint by ``autograd.grad(f0, z0, y, retain_graph=True)``, whose graph goes
    through the input ``x``, a part of the graph the running backward has claimed."""
    w_in = lib.tensor([[0.5, -0.3], [0.2, 0.4]], dtype=lib.float64, requires_grad=True)
    w = lib.tensor([[0.3, 0.1], [-0.2, 0.25]], dtype=lib.float64, requires_grad=True)
    data = lib.tensor([[1.0, -2.0], [0.5, 0.3]], dtype=lib.float64)
    x = (data @ w_in).tanh()

    def f(z):
        return (z @ w + x).tanh()

    with lib.no_grad():
        z = lib.zeros_like(x)
        for _ in range(60):
            z = f(z)
    z = f(z)
    z0 = z.clone().detach().requires_grad_()
    f0 = f(z0)

    def backward_hook(grad):
        g = grad
        for _ in range(60):
            g = lib.autograd.grad(f0, z0, g, retain_graph=True)[0] + grad
        return g

    z.register_hook(backward_hook)
    loss = (z * lib.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=lib.float64)).sum()
    if lib is torch:
        loss.backward()
        return _np(w_in.grad), _np(w.grad)
    grads = loss.backward()
    return _np(w_in.grad(grads)), _np(w.grad(grads))


def test_autograd_grad_from_a_hook_reaching_the_claimed_graph_matches_torch():
    """The hook's ``autograd.grad`` failed on a ``KeyError`` of the checkpointer (it drained
    the values of nodes the outer backward had taken), reported as an ``UnboundLocalError``."""
    for mine, reference in zip(_implicit_backward(rg), _implicit_backward(torch)):
        np.testing.assert_allclose(mine, reference, rtol=1e-9, atol=1e-12)


def test_an_error_in_a_retaining_backward_is_reported_as_itself():
    """A hook raising in a backward with ``retain_graph=True`` came out as an
    ``UnboundLocalError`` of the backward's cleanup; the graph stays usable after."""
    x = rg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3
    handle = y.register_hook(lambda grad: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        y.sum().backward(retain_graph=True)
    handle.remove()
    grads = y.sum().backward()
    np.testing.assert_allclose(_np(x.grad(grads)), [3.0, 3.0])
