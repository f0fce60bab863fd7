"""A write through a view of an overlapping view that takes each element once
(``x.unfold(0, 2, 1)[::2]``: windows that share elements, then every other window, which do
not) differentiates as torch's: torch writes through the composed view's own strides, so
every position written loses its old value's gradient. Written link by link, the unfold's
shared positions kept it (random_programs_38 drew ``masked_fill_`` there on the torch pass)."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

MASK = np.array([[False, True], [True, True], [False, False]])

VIEWS = {
    "unfold then every other window": lambda t: t.unfold(0, 2, 1)[0::2],
    "unfold then a window and a half": lambda t: t.unfold(0, 3, 1)[1::3, :2],
    "unfold of a 2-d tensor, transposed": lambda t: t.view(2, 3).unfold(1, 2, 1)[:, ::2].mT,
}

WRITES = {
    "masked_fill_": lambda lib, v, w: v.masked_fill_(
        lib.tensor(MASK.reshape(-1)[: v.numel()].reshape(v.shape)), 0.43
    ),
    "fill_": lambda lib, v, w: v.fill_(-1.5),
    "mul_": lambda lib, v, w: v.mul_(w[: v.numel()].reshape(v.shape)),
    "copy_": lambda lib, v, w: v.copy_(w[: v.numel()].reshape(v.shape) * 2.0),
}


def _run(lib, view, write_op):
    x = lib.tensor(np.arange(1.0, 7.0), requires_grad=True)
    w = lib.tensor(np.linspace(0.1, 0.6, 6), requires_grad=True)
    base = x * 1.0
    v = view(base)
    write_op(lib, v, w)
    loss = (base * lib.tensor(np.arange(1.0, 7.0) ** 2)).sum() + (v * v).sum()
    if lib is torch:
        loss.backward()
        return base.detach().numpy(), x.grad.numpy(), _or_zeros(w.grad)
    grads = loss.backward()
    return base.numpy(), x.grad(grads).numpy(), _or_zeros(w.grad(grads))


def _or_zeros(grad):
    """A gradient as an array: a fill reads no ``w``, which gets none in either library."""
    return np.zeros(6) if grad is None else grad.numpy()


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("view", VIEWS)
def test_a_write_through_a_non_overlapping_view_of_windows_differentiates_as_torch(view, write):
    expected = _run(torch, VIEWS[view], WRITES[write])
    got = _run(rg, VIEWS[view], WRITES[write])
    for name, g, e in zip(("values", "x's gradient", "w's gradient"), got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=name)


def test_the_drawn_program_masked_fill_after_an_add_through_a_full_slice():
    """The program random_programs_38 drew: an add through ``base[0:]``, then the fill."""

    def program(lib):
        x = lib.tensor(np.arange(1.0, 7.0), requires_grad=True)
        w = lib.tensor(np.linspace(0.1, 0.6, 6), requires_grad=True)
        base = x * 1
        v = base[0:]
        v += w
        base.unfold(0, 2, 1)[0::2].masked_fill_(lib.tensor(MASK), 0.43)
        loss = (base * lib.tensor(np.arange(1.0, 7.0))).sum()
        if lib is torch:
            loss.backward()
            return x.grad.numpy(), w.grad.numpy()
        grads = loss.backward()
        return x.grad(grads).numpy(), w.grad(grads).numpy()

    for g, e in zip(program(rg), program(torch)):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(program(rg)[0], [1.0, 0.0, 0.0, 0.0, 5.0, 6.0])
