"""Round 61's defects in views, aliasing and in-place writes, each against torch.

- a view that moves nothing (``transpose(d, d)``, ``swapaxes(d, d)``, ``expand`` to the same
  shape, ``expand_as``, ``broadcast_to``, ``t()``/``T`` of a 1-d tensor) was the tensor
  itself: an in-place shape op on the "view" reshaped the original, and ``expand`` of a leaf
  was that leaf;
- in-place writes (and in-place shape ops) into the outputs of ``split``/``chunk``/``unbind``
  taken with grad on were computed where torch refuses them; pieces of a tensor that does
  not require grad took a value that does where torch refuses that too;
- a fill of an expanded view with no element made the backward fail; a write of no element
  through an overlapping ``as_strided`` view was refused;
- ``out=`` accepted an ``out`` tensor that requires grad, with grad on;
- a tensor detached from a leaf that requires grad refused ``squeeze_``/``t_``, and
  ``detach_()`` of a ``detach()`` or ``.data`` result was refused as a view's;
- a view made a leaf by ``requires_grad_()`` took in-place writes torch refuses;
- the refusals torch raises as ``RuntimeError`` (a ``view`` its strides cannot give, a write
  into an expanded tensor, an in-place result of a dtype the tensor cannot take) were not
  ``RuntimeError``s.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import errors

torch = pytest.importorskip("torch")

X = np.arange(6.0).reshape(2, 3) / 4 - 0.5


def _leaf(lib):
    return lib.tensor(X, dtype=lib.float64, requires_grad=True)


def _grad(lib, loss, leaf):
    (g,) = lib.autograd.grad(loss, [leaf])
    return g.detach().numpy()


# -- views that move nothing are new tensors -------------------------------------------------
NO_OP_VIEWS = {
    "transpose(1, 1)": lambda t: t.transpose(1, 1),
    "transpose(0, -2)": lambda t: t.transpose(0, -2),
    "swapaxes(0, 0)": lambda t: t.swapaxes(0, 0),
    "expand(2, 3)": lambda t: t.expand(2, 3),
    "expand(-1, -1)": lambda t: t.expand(-1, -1),
    "expand_as": lambda t: t.expand_as(t),
    "broadcast_to": lambda t: t.broadcast_to((2, 3)),
    "t() of 1-d": lambda t: t.t(),
    "T of 1-d": lambda t: t.T,
}


@pytest.mark.parametrize("name", sorted(NO_OP_VIEWS))
def test_views_that_move_nothing_are_new_tensors(name):
    make = NO_OP_VIEWS[name]
    results = {}
    for lib in (torch, rg):
        base = _leaf(lib) * 1
        if name.endswith("1-d"):
            base = base[0]
        view = make(base)
        assert view is not base, f"{lib.__name__}: {name} returned its input"
        shape = tuple(base.shape)
        view.unsqueeze_(0)  # the view's own shape changes, not its base's
        assert tuple(base.shape) == shape, name
        view.mul_(2.0)  # ... and a write reaches the base
        results[lib.__name__] = base.detach().numpy().copy()
    np.testing.assert_array_equal(results["retrograd"], results["torch"])


def test_expand_of_a_leaf_to_its_shape_is_a_view_not_the_leaf():
    for lib in (torch, rg):
        x = _leaf(lib)
        e = x.expand(2, 3)
        assert e is not x and not e.is_leaf and e.requires_grad
        with pytest.raises(RuntimeError, match="leaf"):
            e.add_(1.0)  # a view of a leaf that requires grad, as torch says
    x, tx = _leaf(rg), _leaf(torch)
    np.testing.assert_array_equal(
        _grad(rg, (x.expand(2, 3) * 3).sum(), x), _grad(torch, (tx.expand(2, 3) * 3).sum(), tx)
    )


# -- outputs of split/chunk/unbind ------------------------------------------------------------
MULTI_OUTPUT_WRITES = {
    "split(1)[0].mul_": lambda lib, b: b.split(1)[0].mul_(2.0),
    "split([1, 2], 1)[1].fill_": lambda lib, b: b.split([1, 2], 1)[1].fill_(0.5),
    "chunk(3, 1)[2].zero_": lambda lib, b: b.chunk(3, 1)[2].zero_(),
    "unbind(1)[0].add_": lambda lib, b: b.unbind(1)[0].add_(1.0),
    "unbind(0)[1][0] = v": lambda lib, b: b.unbind(0)[1].__setitem__(0, 9.0),
    "split(1)[0] +=": lambda lib, b: b.split(1)[0].__iadd__(1.0),
    "chunk(2)[0].view(-1).clamp_": lambda lib, b: b.chunk(2)[0].view(-1).clamp_(0.0, 0.1),
    "split(1)[0].t_()": lambda lib, b: b.split(1)[0].t_(),
    "unbind(0)[0].unsqueeze_": lambda lib, b: b.unbind(0)[0].unsqueeze_(0),
    "transposed split.copy_": lambda lib, b: b.t().split(2)[0].copy_(lib.ones(2, 2)),
}


@pytest.mark.parametrize("name", sorted(MULTI_OUTPUT_WRITES))
def test_writes_into_multi_output_views_are_refused_with_grad_on(name):
    call = MULTI_OUTPUT_WRITES[name]
    with pytest.raises(RuntimeError, match="returns multiple views"):
        call(torch, _leaf(torch) * 1)
    x = _leaf(rg)
    b = x * 1
    with pytest.raises(errors.AutodiffError, match="returns multiple views"):
        call(rg, b)
    # nothing changed, and the graph is usable
    assert b.shape == (2, 3)
    np.testing.assert_array_equal(b.detach().numpy(), X)
    np.testing.assert_array_equal(_grad(rg, (b * 2).sum(), x), np.full((2, 3), 2.0))


def test_writes_into_multi_output_views_are_taken_where_torch_takes_them():
    """Under no_grad, through detach()/.data, ``unsafe_split``/``unsafe_chunk`` (no view
    tracking), ``tensor_split`` and pieces of a tensor outside the graph: written, as in torch,
    and the base sees the write."""
    programs = [
        lambda lib, b: b.split(1)[0].mul_(2.0),
        lambda lib, b: b.unbind(1)[2].detach().fill_(7.0),
        lambda lib, b: b.chunk(2)[1].data.add_(1.0),
        lambda lib, b: b.unsafe_split(1)[0].mul_(3.0),
        lambda lib, b: b.unsafe_chunk(3, 1)[1].zero_(),
        lambda lib, b: b.tensor_split(2)[1].fill_(-1.0),
    ]
    for k, program in enumerate(programs):
        values = {}
        for lib in (torch, rg):
            b = _leaf(lib) * 1
            if k == 0:
                with lib.no_grad():
                    program(lib, b)
            else:
                program(lib, b)
            values[lib.__name__] = b.detach().numpy().copy()
        np.testing.assert_array_equal(values["retrograd"], values["torch"], err_msg=str(k))
    for lib in (torch, rg):  # pieces of a tensor outside the graph
        b = lib.tensor(X)
        b.split(1)[0].mul_(2.0)
        np.testing.assert_array_equal(b.numpy()[0], X[0] * 2)


def test_pieces_of_a_tensor_outside_the_graph_refuse_a_value_that_requires_grad():
    for lib, error in ((torch, RuntimeError), (rg, errors.AutodiffError)):
        piece = lib.tensor(X).split(1)[0]
        with pytest.raises(error, match=r"(?i)created in no_grad mode"):
            piece.copy_(_leaf(lib)[:1] * 2)


def test_split_outputs_of_a_leaf_are_refused_as_multi_output_views():
    with pytest.raises(RuntimeError, match="returns multiple views"):
        _leaf(torch).split(1)[0].mul_(2.0)
    with pytest.raises(errors.AutodiffError, match="output 0 of Split"):
        _leaf(rg).split(1)[0].mul_(2.0)


# -- writes of no element ---------------------------------------------------------------------
def test_fill_of_an_empty_expanded_view_leaves_the_backward_alone():
    grads = {}
    for lib in (torch, rg):
        x = _leaf(lib)
        b = x * 1
        b.unfold(1, 0, 2).expand(3, 2, 2, 0).zero_()
        grads[lib.__name__] = _grad(lib, (b * b).sum(), x)
    np.testing.assert_allclose(grads["retrograd"], grads["torch"], rtol=1e-12)


def test_write_of_no_element_through_an_overlapping_as_strided_view_is_a_no_op():
    for lib in (torch, rg):
        b = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)
        window = b.as_strided((2, 2), (0, 1))  # both rows on the same two elements
        window.narrow(0, 1, 1).narrow(0, 0, 0).mul_(5.0)
        window.narrow(0, 0, 0).fill_(5.0)
        np.testing.assert_array_equal(b.numpy(), [1.0, 2.0, 3.0])


# -- out= ---------------------------------------------------------------------------------------
def test_out_that_requires_grad_is_refused_with_grad_on():
    for lib in (torch, rg):
        b = _leaf(lib) * 1
        with pytest.raises(RuntimeError, match="out="):
            lib.add(lib.ones(2, 3, dtype=lib.float64), 1.0, out=b)
        np.testing.assert_array_equal(b.detach().numpy(), X)
        with lib.no_grad():
            lib.add(lib.ones(2, 3, dtype=lib.float64), 1.0, out=b)
        np.testing.assert_array_equal(b.detach().numpy(), np.full((2, 3), 2.0))


# -- detach(), detach_() and requires_grad_() --------------------------------------------------
def test_shape_ops_in_place_on_a_detached_leaf_leave_the_leaf_alone():
    for lib in (torch, rg):
        x = _leaf(lib)
        d = x.detach()
        d.t_()
        d.unsqueeze_(0)
        assert tuple(d.shape) == (1, 3, 2) and tuple(x.shape) == (2, 3)
        d[0, 2, 1] = 9.0  # still x's memory
        assert x.detach().numpy()[1, 2] == 9.0


def test_detach_in_place_of_a_detached_tensor():
    for lib in (torch, rg):
        y = _leaf(lib) * 2
        for d in (y.detach(), y.data):
            assert d.detach_() is d and not d.requires_grad
            d.mul_(0.5)  # still y's memory
        np.testing.assert_allclose(y.detach().numpy(), X / 2)
        with pytest.raises(RuntimeError, match=r"(?i)can't detach views in-place"):
            y[1:].detach_()


def test_a_view_made_a_leaf_by_requires_grad_refuses_writes():
    for lib in (torch, rg):
        b = lib.tensor(X)
        v = b[0]
        v.requires_grad_()
        with pytest.raises(RuntimeError, match="view of a leaf"):
            v.mul_(2.0)
        np.testing.assert_array_equal(b.numpy(), X)


# -- the RuntimeErrors torch raises -------------------------------------------------------------
def test_memory_and_cast_refusals_are_runtime_errors_as_torch_raises_them():
    calls = [
        lambda lib: lib.tensor(X).t().view(6),
        lambda lib: lib.tensor(X)[:1].expand(2, 3).add_(1.0),
        lambda lib: lib.zeros(3, dtype=lib.int64).add_(0.5),
        lambda lib: lib.zeros(3, dtype=lib.bool).mul_(lib.ones(3, dtype=lib.int64)),
        lambda lib: lib.add(lib.ones(3), 1.5, out=lib.zeros(3, dtype=lib.int64)),
    ]
    for k, call in enumerate(calls):
        with pytest.raises(RuntimeError):
            call(torch)
        with pytest.raises(RuntimeError) as caught:
            call(rg)
        assert isinstance(caught.value, errors.RetrogradError), k
    with pytest.raises(errors.MemoryLayoutError, match="reshape"):
        rg.tensor(X).t().view(6)
    with pytest.raises(errors.ResultCastError, match="can't be cast"):
        rg.zeros(3, dtype=rg.int64).add_(0.5)
    # the fallback real code writes
    t = rg.tensor(X).t()
    try:
        flat = t.view(6)
    except RuntimeError:
        flat = t.reshape(6)
    np.testing.assert_array_equal(flat.numpy(), X.T.reshape(6))


def test_in_place_shape_ops_keep_the_strides_a_clone_preserved():
    """``x.t().clone()`` keeps the transpose's strides (torch's ``preserve_format``); an
    in-place shape op on it then worked from contiguous strides."""
    seen = {}
    for lib in (torch, rg):
        x = lib.tensor(X).t().clone()
        trace = [(tuple(x.stride()), x.is_contiguous())]
        x.unsqueeze_(0)
        trace.append((tuple(x.stride()), x.is_contiguous()))
        x.transpose_(0, 2)
        trace.append((tuple(x.stride()), x.is_contiguous()))
        x.squeeze_()
        trace.append((tuple(x.stride()), x.is_contiguous()))
        seen[lib.__name__] = trace
    assert seen["retrograd"] == seen["torch"]


def test_out_aliasing_an_input_in_part_is_refused():
    """``torch.mul(x, 2, out=x.t())`` would read elements it had written: torch refuses it;
    ``out=x`` itself is an in-place op, taken."""
    for lib in (torch, rg):
        x = lib.tensor(X[:, :2])
        with pytest.raises(RuntimeError, match="single memory"):
            lib.mul(x, 2.0, out=x.t())
        np.testing.assert_array_equal(x.numpy(), X[:, :2])
        y = lib.arange(4.0)
        with pytest.raises(RuntimeError, match="single memory"):
            lib.add(y[:3], 1.0, out=y[1:])
        with pytest.raises(RuntimeError, match="single memory"):
            y[1:] += y[:-1]
        lib.add(y, 1.0, out=y)
        np.testing.assert_array_equal(y.numpy(), [1.0, 2.0, 3.0, 4.0])


def test_write_of_no_element_from_a_value_in_the_graph_takes_the_base_into_it():
    for lib in (torch, rg):
        base = lib.tensor(X)
        w = lib.ones(0, 3, dtype=lib.float64, requires_grad=True)
        base[2:].mul_(w * 2)
        assert base.requires_grad and not base.is_leaf
        np.testing.assert_array_equal(base.detach().numpy(), X)


def test_as_strided_in_place_keeps_aliasing_the_storage():
    """``as_strided_`` was missing."""
    seen = {}
    for lib in (torch, rg):
        x = lib.arange(6.0, dtype=lib.float64)
        v = x[2:]
        assert v.as_strided_((2,), (2,)) is v
        v.mul_(10.0)
        leaf = lib.arange(6.0, dtype=lib.float64, requires_grad=True)
        y = leaf * 2
        y.as_strided_((3,), (2,), 1)
        (g,) = lib.autograd.grad((y * lib.arange(3.0, dtype=lib.float64)).sum(), leaf)
        seen[lib.__name__] = (x.tolist(), v.tolist(), tuple(y.stride()), g.tolist())
    assert seen["retrograd"] == seen["torch"]
