"""Regressions found by the round-55 random indexing, scatter/gather and selection programs.

- ``scatter_reduce``/``index_reduce`` with ``amax``/``amin`` and ``include_self=False`` on an
  int32, int16, int8 or uint8 tensor refused: the written positions were first filled with
  int64's bounds, which overflow the narrower dtype.
- ``x[uint8_mask] = values`` was refused outright; torch reads a legacy byte mask as a bool
  one there too, and refuses only where its ``index_put_`` takes the ``masked_fill_`` path
  (the mask the only index tensor, one value), after checking the mask's shape.
- ``x[int16_index] = value_of_another_dtype`` reported the value's dtype; torch refuses the
  index dtype first (an ``IndexError``).
- ``topk(0)`` of a 0-d tensor gave an empty ``[0]`` result; torch's kernel gives the 0-d
  tensor's one value (and index 0) for ``k`` 0 or 1.
- ``scatter``/``scatter_add``/``scatter_reduce`` with a ``src`` larger than the index were
  differentiated; torch reads src's leading part but its backward fails (an "invalid gradient"
  for src; for ``prod``/``amax``/``amin``, where src does not broadcast against the index, a
  size mismatch, towards ``self`` too). Ours raises a ``ShapeError`` where a backward reaches
  them.
- ``scatter(..., reduce="add" | "multiply")`` (and ``scatter_``) were differentiated; torch
  implements no derivative of that form: its result requires grad and a backward raises.
  Burn's ``scatter(dim, indices, values, "add")`` stays differentiable.
- ``index_reduce(include_self=False)`` with an int32 index was differentiated; torch's
  backward fails there (an ``IndexError`` from its ``index_fill_``).
- ``x[index] = value`` of another dtype reported the dtype before an index broadcast error,
  a mask's or the value's shape; torch reports those first (and the range after the dtype).
- ``index_fill`` with an index of another dtype than int64 raised a ``DTypeError`` alone;
  torch's is an ``IndexError`` (now both).
- ``index_reduce(..., "mean")`` of a 2-d bool tensor refused the dtype before checking the
  indices; torch checks the indices first (a 1-d bool tensor is refused before them).
- ``searchsorted``/``bucketize`` of a 0-d value promoted it as a 1-d tensor; torch compares
  in the common dtype of its 0-d rules (a 0-d float64 value against float32 boundaries is
  compared in float32, a 0-d int16 -1 against uint8 boundaries is 255).
- ``unique``/``unique_consecutive`` of a tensor requiring grad gave values outside the graph,
  so a backward through them silently left that path out; torch records them with no
  derivative (a backward raises).
- ``index_put`` of values of another dtype reported the dtype before the indices' errors and
  the values' shape (as ``x[index] = value`` did); with ``accumulate=True``, index tensors
  that do not broadcast raised an add's ``ShapeError``, not torch's ``IndexError``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _values(t) -> np.ndarray:
    return t.detach().numpy().copy() if isinstance(t, torch.Tensor) else np.asarray(t.numpy())


def _both(program):
    """``program(lib)`` for torch and retrograd: ``(torch's result or error, ours)``."""
    results = []
    for lib in (torch, rg):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                results.append(program(lib))
            except Exception as error:  # (compared below)
                results.append(error)
    return results


@pytest.mark.parametrize("dtype", ["int32", "int16", "int8", "uint8"])
@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("function", ["scatter_reduce", "index_reduce"])
def test_extreme_reduce_without_self_on_narrow_ints(dtype, reduce, function) -> None:
    data = np.array([[3, 1, 2], [0, 4, 1]], dtype=dtype)
    source = np.array([[5, 0, 2], [1, 1, 3]], dtype=dtype)
    index = [[0, 0, 1], [1, 0, 0]] if function == "scatter_reduce" else [1, 1]

    def program(lib):
        x, s, i = lib.tensor(data), lib.tensor(source), lib.tensor(index)
        call = getattr(x, function)
        return call(1 if function == "scatter_reduce" else 0, i, s, reduce, include_self=False)

    expected, got = _both(program)
    assert str(got.dtype) == str(expected.dtype).replace("torch.", "")
    np.testing.assert_array_equal(_values(got), _values(expected))


def _byte_mask_write(value_kind: str, mask_values: list[int], shape: tuple[int, ...]):
    def program(lib):
        x = lib.zeros(shape, dtype=lib.float64)
        mask = lib.tensor(np.array(mask_values, dtype=np.uint8))
        if value_kind == "scalar":
            x[mask] = 5.0
        elif value_kind == "one":
            x[mask] = lib.tensor([5.0], dtype=lib.float64)
        elif value_kind == "row":
            x[mask] = lib.arange(shape[-1], dtype=lib.float64)
        elif value_kind == "after_0d_int":  # (a 0-d int index is a select: masked_fill_ path)
            x[lib.tensor(1, dtype=lib.int8), mask] = 5.0
        else:  # with a second (int) index tensor: no masked_fill_ path, the mask is read
            x[mask, lib.tensor([0, 1])] = lib.tensor(7.0, dtype=lib.float64)
        return x

    return program


@pytest.mark.parametrize(
    "value_kind, mask_values, shape",
    [
        ("row", [1, 0, 1], (3, 2)),
        ("scalar", [1, 0, 1], (3, 2)),  # torch: masked_fill_ refuses a byte mask
        ("one", [1, 0, 1], (3,)),  # (a one-element value too)
        ("scalar", [1, 0], (3, 2)),  # the mask's shape is checked first: IndexError
        ("second_index", [1, 0, 1], (3, 2)),
        ("after_0d_int", [1, 0, 1], (2, 3)),
    ],
)
def test_byte_mask_writes_as_torch(value_kind, mask_values, shape) -> None:
    expected, got = _both(_byte_mask_write(value_kind, mask_values, shape))
    if isinstance(expected, Exception):
        assert isinstance(got, rg.RetrogradError), got
        assert "setitem" in str(got) or "indexing" in str(got)
        if isinstance(expected, IndexError):
            assert isinstance(got, IndexError), got
        return
    assert not isinstance(got, Exception), got
    np.testing.assert_array_equal(_values(got), _values(expected))


def test_byte_mask_write_is_differentiated() -> None:
    data = np.arange(6.0).reshape(3, 2)
    mask = np.array([1, 0, 1], dtype=np.uint8)
    weights = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    grads = []
    for lib in (torch, rg):
        x = lib.tensor(data, requires_grad=True)
        v = lib.tensor([10.0, 20.0], dtype=lib.float64, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x * 1
            y[lib.tensor(mask)] = v
        grads.append(lib.autograd.grad((y * lib.tensor(weights)).sum(), [x, v]))
    for want, have in zip(*grads):
        np.testing.assert_allclose(_values(have), _values(want))


@pytest.mark.parametrize("value", [rg.tensor([1]), 2.0, rg.tensor([True, False])])
def test_index_dtype_is_refused_before_the_value_dtype(value) -> None:
    x = rg.zeros(3)
    with pytest.raises(IndexError, match=r"setitem.*int16"):
        x[rg.tensor([0, 1], dtype="int16")] = value
    np.testing.assert_array_equal(x.numpy(), np.zeros(3, np.float32))
    with pytest.raises(IndexError):  # (torch's, for the comparison)
        torch.zeros(3)[torch.tensor([0, 1], dtype=torch.int16)] = torch.tensor([1])


@pytest.mark.parametrize("k", [0, 1, 2])
@pytest.mark.parametrize("dim", [0, -1])
def test_topk_of_a_zero_dim_tensor(k, dim) -> None:
    def program(lib):
        x = lib.tensor(2.5, dtype=lib.float64, requires_grad=True)
        values, indices = x.topk(k, dim=dim)
        (grad,) = lib.autograd.grad(values.sum() * 3, [x])
        return values, indices, grad

    expected, got = _both(program)
    if isinstance(expected, Exception):
        assert isinstance(got, rg.RetrogradError) and "topk" in str(got), got
        return
    for want, have in zip(expected, got):
        assert tuple(have.shape) == tuple(want.shape)
        assert str(have.dtype) == str(want.dtype).replace("torch.", "")
        np.testing.assert_array_equal(_values(have), _values(want))
    assert tuple(rg.topk(rg.tensor(2.5), 0).values.shape) == ()


def _gradients_or_error(lib, program, wanted: str):
    """The float64 gradients of ``program``'s output (weighted) with respect to the inputs
    named in ``wanted`` (``"x"``, ``"s"`` or both), or the error the backward raised."""
    x = lib.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=lib.float64, requires_grad=True)
    s = lib.tensor([[7.0, 8.0, 9.0]], dtype=lib.float64, requires_grad="s" in wanted)
    y = program(lib, x, s)
    assert y.requires_grad
    inputs = [t for name, t in (("x", x), ("s", s)) if name in wanted]
    try:
        return lib.autograd.grad((y * y).sum(), inputs)
    except Exception as error:  # (compared by the caller)
        return error


@pytest.mark.parametrize("wanted", ["xs", "x"])
@pytest.mark.parametrize(
    "name",
    ["scatter", "scatter_add", "sum", "mean", "prod", "amax", "amin"],
)
def test_a_src_larger_than_the_index_refuses_in_backward_as_torch(name, wanted) -> None:
    """torch reads a larger src's leading part but its backward fails: for src always, and for
    self too under prod/amax/amin (whose backward reads src)."""

    def program(lib, x, s):
        index = lib.tensor([[1, 1]])
        if name == "scatter":
            return x.scatter(1, index, s)
        if name == "scatter_add":
            return x.scatter_add(1, index, s)
        return x.scatter_reduce(1, index, s, name, include_self=False)

    expected = _gradients_or_error(torch, program, wanted)
    got = _gradients_or_error(rg, program, wanted)
    if isinstance(expected, Exception):
        assert isinstance(got, rg.ShapeError) and "larger than the index" in str(got), got
        return
    assert not isinstance(got, Exception), got
    for want, have in zip(expected, got):
        np.testing.assert_allclose(_values(have), _values(want))


@pytest.mark.parametrize("reduce", ["add", "multiply"])
@pytest.mark.parametrize("form", ["src", "value", "in_place"])
def test_scatter_with_reduce_keyword_is_not_differentiable_as_torch(reduce, form) -> None:
    """torch's ``scatter(..., reduce=)`` has no derivative (its result still requires grad,
    and a backward through it raises); the values are torch's."""
    results = []
    for lib in (torch, rg):
        x = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        s = lib.tensor([4.0, 5.0], dtype=lib.float64, requires_grad=True)
        index = lib.tensor([0, 0])
        if form == "src":
            y = x.scatter(0, index, s, reduce=reduce)
        elif form == "value":
            y = x.scatter(0, index, 2.0, reduce=reduce)
        else:
            y = lib.zeros(3, dtype=lib.float64)
            y.scatter_(0, index, s, reduce=reduce)
        assert y.requires_grad
        with pytest.raises(RuntimeError, match="derivative"):
            lib.autograd.grad(y.sum(), [x if form != "in_place" else s])
        results.append(_values(y))
        # the inputs stay usable
        (g,) = lib.autograd.grad((x * 2).sum(), [x])
        np.testing.assert_array_equal(_values(g), 2.0)
    np.testing.assert_array_equal(results[1], results[0])


def test_burn_scatter_update_add_stays_differentiable() -> None:
    x = rg.tensor([1.0, 2.0, 3.0], dtype="float64", requires_grad=True)
    s = rg.tensor([4.0, 5.0], dtype="float64", requires_grad=True)
    y = x.scatter(0, rg.tensor([0, 0]), s, "add")
    gx, gs = rg.autograd.grad((y * rg.tensor([1.0, 2.0, 3.0], dtype="float64")).sum(), [x, s])
    np.testing.assert_array_equal(gx.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(gs.numpy(), [1.0, 1.0])


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_index_reduce_backward_with_an_int32_index(reduce, include_self, index_dtype) -> None:
    """torch's backward of ``include_self=False`` with an int32 index fails (its
    ``index_fill_`` wants int64); every other combination is differentiated."""
    outcomes = []
    for lib in (torch, rg):
        x = lib.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=lib.float64, requires_grad=True)
        s = lib.tensor([[5.0, 6.0], [2.0, 1.0]], dtype=lib.float64, requires_grad=True)
        index = lib.tensor(np.array([0, 0], dtype=index_dtype))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = x.index_reduce(0, index, s, reduce, include_self=include_self)
        try:
            outcomes.append(lib.autograd.grad((y * y).sum(), [x, s]))
        except Exception as error:  # (compared below)
            outcomes.append(error)
        np.testing.assert_array_equal(_values(x), [[1.0, 2.0], [3.0, 4.0]])
    expected, got = outcomes
    if isinstance(expected, Exception):
        assert isinstance(expected, IndexError)
        assert isinstance(got, IndexError) and isinstance(got, rg.RetrogradError), got
        assert "index_reduce" in str(got)
        return
    assert not isinstance(got, Exception), got
    for want, have in zip(expected, got):
        np.testing.assert_allclose(_values(have), _values(want), rtol=1e-12)


@pytest.mark.parametrize(
    "case",
    ["index_broadcast", "mask_shape", "value_shape", "out_of_range", "both_fine_but_dtype"],
)
def test_write_errors_come_in_torch_order(case) -> None:
    """torch's ``x[index] = value`` checks the indices and the value's shape before the
    value's dtype, and the indices' range after it."""

    def program(lib):
        x = lib.zeros(3, 2)
        value = lib.tensor([1])  # int64 into float32: refused in the end
        if case == "index_broadcast":
            x[lib.tensor([0, 1]), lib.tensor([0, 1, 0])] = value
        elif case == "mask_shape":
            x[lib.tensor([True, False])] = value
        elif case == "value_shape":
            x[lib.tensor([0])] = lib.tensor([[1, 2, 3]])
        elif case == "out_of_range":
            x[lib.tensor([5])] = value
        else:
            x[lib.tensor([0, 1])] = value
        return x

    expected, got = _both(program)
    assert isinstance(expected, Exception)
    assert isinstance(got, rg.RetrogradError), got
    if isinstance(expected, IndexError):
        assert isinstance(got, IndexError), got
    elif "dtypes match" in str(expected):
        assert isinstance(got, rg.DTypeError), got
    else:
        assert isinstance(got, rg.ShapeError) and "shape mismatch" in str(got), got


@pytest.mark.parametrize("dtype", ["int32", "int16", "uint8", "float32"])
def test_index_fill_index_dtype_is_an_index_error_as_torch(dtype) -> None:
    with pytest.raises(IndexError):
        torch.zeros(3).index_fill(0, torch.tensor(np.array([0, 1]).astype(dtype)), 1.0)
    x = rg.zeros(3)
    with pytest.raises(IndexError, match=r"index_fill.*int64") as caught:
        x.index_fill(0, rg.tensor(np.array([0, 1]).astype(dtype)), 1.0)
    assert isinstance(caught.value, rg.DTypeError)  # (as before: either except catches it)
    np.testing.assert_array_equal(x.numpy(), np.zeros(3, np.float32))


@pytest.mark.parametrize("reduce", ["prod", "amax", "amin"])
def test_a_larger_src_that_broadcasts_is_differentiated_as_torch(reduce) -> None:
    """A src larger only where the index has size 1 broadcasts in torch's backward, which
    then runs: the gradients of self and of src's read part are torch's."""
    grads = []
    for lib in (torch, rg):
        x = lib.tensor([[1.0, 2.0, 3.0]], dtype=lib.float64, requires_grad=True)
        s = lib.tensor([[4.0, 5.0], [6.0, 7.0]], dtype=lib.float64, requires_grad=True)
        y = x.scatter_reduce(1, lib.tensor([[0, 0]]), s, reduce, include_self=False)
        weights = lib.tensor([[1.0, 2.0, 3.0]], dtype=lib.float64)
        grads.append(lib.autograd.grad((y * weights).sum(), [x, s]))
    (want_x, want_s), (have_x, have_s) = grads
    np.testing.assert_allclose(_values(have_x), _values(want_x))
    np.testing.assert_allclose(_values(have_s)[:1], _values(want_s)[:1])


@pytest.mark.parametrize("shape", [(2,), (2, 2)])
@pytest.mark.parametrize("index", [[-1], [2], [1]])
def test_index_reduce_of_bool_checks_the_index_first(shape, index) -> None:
    """torch checks index_reduce's indices (no negative ones) before refusing a bool mean
    (or any 1-d bool reduction)."""

    def program(lib):
        x = lib.ones(shape, dtype=lib.bool)
        source = lib.zeros(shape[:-1] + (1,), dtype=lib.bool)
        return x.index_reduce(-1, lib.tensor(index), source, "mean")

    expected, got = _both(program)
    assert isinstance(expected, Exception)
    assert isinstance(got, rg.RetrogradError) and "index_reduce" in str(got), got
    assert isinstance(got, IndexError) == isinstance(expected, IndexError), (got, expected)


@pytest.mark.parametrize(
    "values, boundaries",
    [
        (np.array(-1, np.int16), np.array([0, 1, 3, 5], np.uint8)),  # -1 read as uint8's 255
        (np.array([-1, 2, 300], np.int16), np.array([0, 1, 3, 5], np.uint8)),
        (np.array(0.1, np.float64), np.array([0.1, 0.2], np.float32)),  # compared in float32
        (np.array([0.1], np.float64), np.array([0.1, 0.2], np.float32)),  # in float64
        (np.array(7, np.int64), np.array([1.5, 7.0], np.float32)),
    ],
)
@pytest.mark.parametrize("right", [False, True])
def test_search_of_a_zero_dim_value_in_torch_dtype(values, boundaries, right) -> None:
    """torch compares in the two tensors' common dtype by its 0-d rules: a 0-d value takes
    the boundaries' dtype within a category; it was promoted as a 1-d one."""
    for function in ("searchsorted", "bucketize"):

        def program(lib, function=function):
            v, b = lib.tensor(values), lib.tensor(boundaries)
            if function == "searchsorted":
                return lib.searchsorted(b, v, right=right)
            return lib.bucketize(v, b, right=right)

        expected, got = _both(program)
        assert str(got.dtype) == str(expected.dtype).replace("torch.", "")
        np.testing.assert_array_equal(_values(got), _values(expected), err_msg=function)


@pytest.mark.parametrize(
    "call",
    [
        lambda lib, x: lib.unique(x),
        lambda lib, x: lib.unique(x, return_inverse=True, return_counts=True)[0],
        lambda lib, x: x.unique(dim=0),
        lambda lib, x: lib.unique_consecutive(x),
        lambda lib, x: x.unique_consecutive(return_counts=True, dim=0)[0],
    ],
)
def test_unique_values_refuse_a_backward_as_torch(call) -> None:
    """torch records unique and unique_consecutive (their values require grad) with no
    derivative: a backward through them raises. Ours left the path out of the gradient."""
    for lib in (torch, rg):
        x = lib.tensor([3.0, 1.0, 3.0, 3.0, 2.0], dtype=lib.float64, requires_grad=True)
        values = call(lib, x)
        assert values.requires_grad
        with pytest.raises(RuntimeError, match="derivative"):
            lib.autograd.grad(values.sum() + x.sum(), [x])
        (g,) = lib.autograd.grad((x * 2).sum(), [x])  # the input stays usable
        np.testing.assert_array_equal(_values(g), 2.0)
        with lib.no_grad():
            assert not call(lib, x).requires_grad


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize(
    "case", ["int16_index", "index_broadcast", "mask_shape", "out_of_range", "value_shape"]
)
@pytest.mark.parametrize("value_dtype", ["int64", "float32"])
def test_index_put_errors_come_in_torch_order(case, accumulate, value_dtype) -> None:
    """``index_put`` checks the indices and the values' shape before the values' dtype (the
    range after it), accumulating or not; index tensors that do not broadcast are torch's
    IndexError when accumulating too (ours was an add's ShapeError)."""

    def program(lib):
        x = lib.zeros(3, 2)
        value = lib.tensor(np.array([1]).astype(value_dtype))
        indices = {
            "int16_index": (lib.tensor([0, 1], dtype=lib.int16),),
            "index_broadcast": (lib.tensor([0, 1]), lib.tensor([0, 1, 0])),
            "mask_shape": (lib.tensor([True, False]),),
            "out_of_range": (lib.tensor([5]),),
            "value_shape": (lib.tensor([0]),),
        }[case]
        if case == "value_shape":
            value = lib.tensor(np.array([[1, 2, 3]]).astype(value_dtype))
        return x.index_put(indices, value, accumulate=accumulate)

    expected, got = _both(program)
    assert isinstance(expected, Exception)
    assert isinstance(got, rg.RetrogradError) and "index_put" in str(got), got
    assert isinstance(got, IndexError) == isinstance(expected, IndexError), (got, expected)
    if "dtypes match" in str(expected):
        assert isinstance(got, rg.DTypeError), got
