"""In-place methods on views, swept against torch (helper view89).

A sweep of every in-place ``Tensor`` method torch also has (plus ``t[idx] = v`` and the
augmented operators) over 27 kinds of view (slices with steps, select, transpose/permute/t,
narrow, diagonal, view/reshape, unsqueeze/squeeze, expand, unfold, split/chunk pieces,
real/imag, chains of two) of a non-leaf, of a leaf under ``no_grad`` and of ``.data`` found one
divergence, in the in-place shape ops (``squeeze_``, ``unsqueeze_``, ``t_``, ``transpose_``,
``swapaxes_``, ``swapdims_``) on a view of a leaf that requires grad:

- on a view taken under ``no_grad`` (and reshaped there) they were refused ("the leaf is a
  view or has views"), where torch reshapes the view and leaves its base alone; a later write
  through the reshaped view must still reach the leaf;
- with grad on, on a view taken with grad on, they were taken, where torch refuses them as it
  refuses a write into a view of a leaf.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

X = np.arange(24.0).reshape(4, 6) / 10 + 0.1

VIEWS = {
    "slice[1:3, ::2]": lambda t: t[1:3, ::2],
    "select[1]": lambda t: t[1],
    "t()": lambda t: t.t(),
    "diagonal()": lambda t: t.diagonal(),
    "view(2, 12)": lambda t: t.view(2, 12),
    "unfold(1, 2, 2)": lambda t: t.unfold(1, 2, 2),
    "narrow.unsqueeze": lambda t: t.narrow(0, 1, 2).unsqueeze(-1),
}

SHAPE_OPS = {
    "squeeze_": lambda v: v.squeeze_(),
    "unsqueeze_": lambda v: v.unsqueeze_(0),
    "t_": lambda v: v.t_(),
    "transpose_": lambda v: v.transpose_(0, -1),
    "swapaxes_": lambda v: v.swapaxes_(0, -1),
    "swapdims_": lambda v: v.swapdims_(0, -1),
}


def _reshape_then_write(lib, view_name: str, op_name: str):
    """The leaf, the view's shape and values after ``op`` on a view of the leaf taken under
    ``no_grad`` and a write through it, then the leaf's gradient of a loss reading it."""
    leaf = lib.tensor(X, dtype=lib.float64, requires_grad=True)
    with lib.no_grad():
        view = VIEWS[view_name](leaf)
        try:
            returned = SHAPE_OPS[op_name](view)
        except Exception as error:  # t_ of a view with more than two dimensions
            assert lib is torch or isinstance(error, rg.errors.RetrogradError), error
            assert lib is torch or op_name in str(error), error
            return ("raised", type(error).__name__)
        assert returned is view
        view.mul_(10.0)  # the write reaches the leaf through the reshaped view
        shape, values = tuple(view.shape), view.numpy().copy()
    (grad,) = lib.autograd.grad((leaf * leaf).sum(), [leaf])
    return shape, values, leaf.detach().numpy().copy(), grad.numpy()


@pytest.mark.parametrize("op_name", sorted(SHAPE_OPS))
@pytest.mark.parametrize("view_name", sorted(VIEWS))
def test_shape_op_on_a_no_grad_view_of_a_leaf_as_torch(view_name, op_name):
    expected = _reshape_then_write(torch, view_name, op_name)
    got = _reshape_then_write(rg, view_name, op_name)
    if expected[0] == "raised":
        assert got[0] == "raised", f"{op_name} on {view_name}: torch refuses, retrograd took it"
        return
    assert got[0] == expected[0], f"{op_name} on {view_name}: view shape"
    for name, want, have in zip(("view", "leaf", "grad"), expected[1:], got[1:]):
        np.testing.assert_allclose(have, want, rtol=1e-12, err_msg=f"{op_name} {view_name} {name}")


def test_the_leaf_itself_still_refuses_a_shape_op_while_it_has_views():
    # (what the fix leaves: a leaf that requires grad, with a live view, under no_grad; torch
    # reshapes it, retrograd refuses it clearly rather than rewire the leaf)
    leaf = rg.tensor(X, requires_grad=True)
    view = leaf[1:]
    with rg.no_grad(), pytest.raises(rg.errors.InvalidArgumentError, match="unsqueeze_"):
        leaf.unsqueeze_(0)
    assert tuple(leaf.shape) == (4, 6) and tuple(view.shape) == (3, 6)


@pytest.mark.parametrize("op_name", sorted(SHAPE_OPS))
@pytest.mark.parametrize("view_name", sorted(VIEWS))
def test_shape_op_on_a_view_of_a_leaf_with_grad_on_is_refused_as_in_torch(view_name, op_name):
    for lib in (torch, rg):
        leaf = lib.tensor(X, dtype=lib.float64, requires_grad=True)
        view = VIEWS[view_name](leaf)
        shape = tuple(view.shape)
        with pytest.raises(RuntimeError) as raised:
            SHAPE_OPS[op_name](view)
        if lib is rg:
            assert isinstance(raised.value, rg.errors.RetrogradError)
            assert op_name in str(raised.value)
        assert tuple(view.shape) == shape, f"{lib.__name__}: {op_name} changed the view"
        # ... and the view and its leaf stay usable
        (grad,) = lib.autograd.grad((view * view).sum(), [leaf])
        assert float(grad.sum()) == pytest.approx(2 * float(view.detach().sum()))
