"""Regressions found by tests/test_random_programs_42.py (in-place writes through views and
indexing): each against torch, on the suite's inner backend."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _np(t) -> np.ndarray:
    return np.asarray(t.detach().numpy(), dtype=np.float64)


# -- a write under no_grad into a tensor computed in the graph ----------------------------------
@pytest.mark.parametrize("through_view", [False, True])
def test_a_write_under_no_grad_keeps_a_non_leaf_in_its_graph(through_view):
    """torch changes the values and keeps the tensor in its graph, the write unseen by
    backward; retrograd cut the tensor from the graph (no gradient reached x)."""
    data = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    results = []
    for lib in (torch, rg):
        x = lib.tensor(data, dtype=lib.float64, requires_grad=True)
        base = x.clone()
        with lib.no_grad():
            if through_view:
                base[0].zero_()
            else:
                base.mul_(3.0)
        assert base.requires_grad
        out = (base.tanh() * lib.tensor(data + 1.0)).sum()
        (grad,) = lib.autograd.grad(out, [x])
        results.append((_np(base), _np(grad)))
    (want_value, want_grad), (got_value, got_grad) = results
    np.testing.assert_allclose(got_value, want_value, rtol=1e-12)
    np.testing.assert_allclose(got_grad, want_grad, rtol=1e-12)


def test_the_gradient_passes_a_no_grad_write_whole():
    """The no_grad write's gradient is the identity: d/dx sum(sin(x*2 then overwritten by
    x*2+c)) is 2*cos(x*2+c), by hand."""
    data = np.array([0.3, -0.2, 1.1])
    x = rg.tensor(data, dtype=rg.float64, requires_grad=True)
    y = x * 2.0
    with rg.no_grad():
        y.add_(0.5)
    (grad,) = rg.autograd.grad(y.sin().sum(), [x])
    np.testing.assert_allclose(_np(grad), 2.0 * np.cos(2.0 * data + 0.5), rtol=1e-12)


# -- autograd.grad of a leaf written under no_grad between two uses -----------------------------
def test_autograd_grad_of_a_leaf_written_under_no_grad_takes_both_uses():
    """torch's leaf is one tensor: a graph recorded before a no_grad write and one after it
    both send it their gradient; retrograd's autograd.grad kept only the newer use's."""
    results = []
    for lib in (torch, rg):
        w = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        x = lib.tensor([3.0, 5.0], dtype=lib.float64)
        before = w * x
        with lib.no_grad():
            w.add_(1.0)
        after = w * x * w
        (grad,) = lib.autograd.grad((before + after).sum(), [w])
        results.append(_np(grad))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-12)
    np.testing.assert_allclose(results[1], [3.0 + 2 * 3.0 * 2.0, 5.0 + 2 * 5.0 * 3.0])


def test_backward_with_inputs_of_a_leaf_written_under_no_grad_takes_the_earlier_use():
    w = rg.tensor([1.0, 2.0], dtype=rg.float64, requires_grad=True)
    loss = (w * rg.tensor([3.0, 5.0], dtype=rg.float64)).sum()
    with rg.no_grad():
        w.mul_(10.0)
    grads = loss.backward(inputs=[w])
    np.testing.assert_allclose(_np(w.grad(grads)), [3.0, 5.0])


# -- a write with grad on through a view taken under no_grad ------------------------------------
def _no_grad_view_writes(lib):
    x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
    plain = lib.zeros(3, dtype=lib.float64)
    computed = x * 1.0
    with lib.no_grad():
        of_computed = computed[:2]
        of_plain = plain[:2]
    return {
        "mul_ of a view of a tensor that requires grad": lambda: of_computed.mul_(2.0),
        "add_ of a value that requires grad": lambda: of_plain.add_(x[:2]),
        "a view of the view, taken with grad on": lambda: of_plain[:1].copy_(x[:1]),
        "setitem": lambda: of_plain.__setitem__(0, x[0]),
    }


@pytest.mark.parametrize("case", list(_no_grad_view_writes(torch)))
def test_a_write_with_grad_on_through_a_view_taken_under_no_grad_is_refused(case):
    with pytest.raises(RuntimeError, match="view was created in no_grad mode"):
        _no_grad_view_writes(torch)[case]()
    with pytest.raises(rg.AutodiffError, match="view was created in no_grad mode"):
        _no_grad_view_writes(rg)[case]()


def test_writes_through_a_view_taken_under_no_grad_that_torch_accepts_still_work():
    for lib in (torch, rg):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        plain = lib.zeros(3, dtype=lib.float64)
        with lib.no_grad():
            view = plain[1:]
        view.add_(1.0)  # nothing requires grad: not recorded
        with lib.no_grad():
            view.mul_(x[1:])  # under no_grad: not recorded
        assert _np(plain).tolist() == [0.0, 2.0, 3.0]
        assert not plain.requires_grad
        with lib.no_grad():
            copy = plain[:2].clone()
        copy.add_(x[:2])  # a clone is no view: recorded
        assert copy.requires_grad


# -- clone under no_grad ---------------------------------------------------------------------------
def test_clone_under_no_grad_is_outside_the_graph():
    """torch's clone under no_grad does not require grad; retrograd's clone of a non-leaf
    kept its node (requires_grad True)."""
    for lib in (torch, rg):
        x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
        y = x * 2.0
        with lib.no_grad():
            copies = (y.clone(), x.clone())
        assert [c.requires_grad for c in copies] == [False, False]
        assert y.clone().requires_grad
        np.testing.assert_array_equal(_np(copies[0]), [2.0, 4.0])


# -- .data and detach() of a view computed in the graph ----------------------------------------
def _writes_through_detached_views(lib):
    w = lib.ones(2, 3, dtype=lib.float64, requires_grad=True)
    w[:, 0].data.fill_(0.0)  # the view is a temporary: gone before the write
    w.t()[1].data.mul_(5.0)
    h = w * 2.0
    h[0].data.fill_(-1.0)
    h[1, 1:].detach().fill_(7.0)
    kept = h.t()[1:].data
    return w, h, kept


def test_a_write_through_data_of_a_temporary_view_reaches_the_base():
    """``w[:, 0].data.fill_(0)``: retrograd's .data held the temporary view weakly and lost
    its way to ``w`` when the view went, so the write reached nothing."""
    (tw, th, tk), (rw, rh, rk) = (_writes_through_detached_views(lib) for lib in (torch, rg))
    np.testing.assert_array_equal(_np(rw), _np(tw))
    np.testing.assert_array_equal(_np(rh), _np(th))
    assert rk.stride() == tk.stride() and not rk.requires_grad
    assert rh.requires_grad and not rk.requires_grad
    # the tensor .data gave aliases its root still: a later write shows in both ways
    for kept, root in ((tk, th), (rk, rh)):
        kept[0, 0] = 3.0
        with (torch if root is th else rg).no_grad():
            root[1, 2] = 4.0
    np.testing.assert_array_equal(_np(rh), _np(th))
    np.testing.assert_array_equal(_np(rk), _np(tk))


def test_the_gradient_of_a_tensor_written_through_data_of_a_view_passes_the_write():
    results = []
    for lib in (torch, rg):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        y = x * 3.0
        y[1].data.mul_(10.0)
        (grad,) = lib.autograd.grad((y * y).sum(), [x])
        results.append((_np(y), _np(grad)))
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_array_equal(results[1][1], results[0][1])


# -- a write through a slice of an expanded tensor ----------------------------------------------
def test_writes_through_slices_of_an_expanded_tensor_as_torch():
    """The slices of an ``index`` view may stop before the last dimensions: the check that a
    slice of an expanded tensor takes each element once looked at the sliced dimensions
    only, so an empty write was refused with slice_assign's broadcast error, and a write
    touching an expanded dimension got that error, not torch's refusal."""
    results = []
    for lib in (torch, rg):
        x = lib.tensor([[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]], dtype=lib.float64)
        x.requires_grad_(True)
        base = x.clone()
        expanded = base.expand(2, 2, 3)
        expanded.narrow(0, 0, 0).add_(lib.ones(0, 2, 3, dtype=lib.float64))  # nothing written
        expanded.narrow(1, 1, 1).add_(1.0)  # one copy of each element
        expanded[:, 0, 1:].mul_(3.0)
        error = rg.ShapeError if lib is rg else RuntimeError
        with pytest.raises(error, match="more than one element of the written-to tensor"):
            expanded.narrow(0, 0, 1).add_(1.0)
        weights = lib.arange(6.0, dtype=lib.float64).reshape(2, 1, 3)
        (grad,) = lib.autograd.grad((base * weights).sum(), [x])
        results.append((_np(base), _np(grad)))
    np.testing.assert_array_equal(results[1][0], results[0][0])
    np.testing.assert_array_equal(results[1][1], results[0][1])
