"""torch's function forms in ``tensor/assembly.py`` against torch: values, dtypes and (for the
differentiable ones) gradients in float64."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

RNG = np.random.default_rng(7)


def both(*arrays):
    return [rg.tensor(a) for a in arrays], [torch.tensor(a) for a in arrays]


def check_values(ours, theirs):
    if isinstance(theirs, tuple | list):
        assert isinstance(ours, tuple | list) and len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            check_values(o, t)
        return
    assert tuple(ours.shape) == tuple(theirs.shape)
    assert str(ours.dtype) == str(theirs.dtype).removeprefix("torch.")
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)


def check_grads(rg_fn, torch_fn, *arrays):
    """Values and the gradient of a random weighting of the output, for each input."""
    xs = [rg.tensor(a).require_grad() for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, expected = rg_fn(*xs), torch_fn(*ts)
    check_values(out, expected.detach())
    weights = RNG.standard_normal(tuple(expected.shape))
    grads = (out * rg.tensor(weights)).sum().backward()
    (expected * torch.tensor(weights)).sum().backward()
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad(grads).numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "name, arrays",
    [
        (
            "block_diag",
            [RNG.standard_normal((2, 3)), RNG.standard_normal((1, 1)), RNG.standard_normal(2)],
        ),
        ("cartesian_prod", [RNG.standard_normal(3), RNG.standard_normal(2)]),
        ("column_stack", [RNG.standard_normal(3), RNG.standard_normal((3, 2))]),
        ("row_stack", [RNG.standard_normal(3), RNG.standard_normal((2, 3))]),
        ("dstack", [RNG.standard_normal((2, 3)), RNG.standard_normal((2, 3))]),
        (
            "chain_matmul",
            [RNG.standard_normal((2, 3)), RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))],
        ),
    ],
)
def test_assembled_tensors_and_their_gradients(name, arrays):
    variadic = name in ("block_diag", "cartesian_prod", "chain_matmul")

    def call(lib):
        return lambda *x: getattr(lib, name)(*x) if variadic else getattr(lib, name)(list(x))

    check_grads(call(rg), call(torch), *arrays)


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4)])
def test_atleast(shape):
    for name in ("atleast_1d", "atleast_2d", "atleast_3d"):
        array = RNG.standard_normal(shape)
        check_grads(getattr(rg, name), getattr(torch, name), array)
    ours = rg.atleast_2d(rg.ones(3), rg.ones(()))
    assert [tuple(t.shape) for t in ours] == [(1, 3), (1, 1)]


@pytest.mark.parametrize("r, replace", [(2, False), (3, False), (2, True), (4, False)])
def test_combinations(r, replace):
    array = RNG.standard_normal(4)
    check_grads(
        lambda x: rg.combinations(x, r, with_replacement=replace),
        lambda x: torch.combinations(x, r, with_replacement=replace),
        array,
    )


@pytest.mark.parametrize(
    "a_shape, b_shape, dims",
    [
        ((2, 3, 4), (3, 4, 5), 2),
        ((2, 3), (3, 2), 1),
        ((2, 3, 4), (4, 3), ([1, 2], [1, 0])),
        ((2, 3), (4,), 0),
    ],
)
def test_tensordot(a_shape, b_shape, dims):
    check_grads(
        lambda a, b: rg.tensordot(a, b, dims),
        lambda a, b: torch.tensordot(a, b, dims),
        RNG.standard_normal(a_shape),
        RNG.standard_normal(b_shape),
    )
    with pytest.raises(rg.ShapeError, match="tensordot"):
        rg.tensordot(rg.ones((2, 3)), rg.ones((2, 3)), 1)


@pytest.mark.parametrize(
    "row, col, offset", [(3, 3, 0), (4, 2, 1), (2, 5, -1), (3, 4, 2), (0, 3, 0)]
)
def test_triangle_indices(row, col, offset):
    check_values(rg.tril_indices(row, col, offset), torch.tril_indices(row, col, offset))
    check_values(rg.triu_indices(row, col, offset), torch.triu_indices(row, col, offset))


def test_searchsorted_and_isin():
    seq = np.array([[1.0, 3.0, 5.0, 7.0], [2.0, 2.0, 4.0, 8.0]])
    values = np.array([[3.0, 6.0, 9.0], [2.0, 0.0, 5.0]])
    (s, v), (ts, tv) = both(seq, values)
    for kwargs in ({}, {"right": True}, {"side": "right"}, {"side": "left"}):
        check_values(rg.searchsorted(s, v, **kwargs), torch.searchsorted(ts, tv, **kwargs))
    check_values(rg.searchsorted(s[0], v), torch.searchsorted(ts[0], tv))
    check_values(rg.searchsorted(s[0], 4.0), torch.searchsorted(ts[0], 4.0))
    order = np.array([2, 0, 3, 1])
    check_values(
        rg.searchsorted(rg.tensor(seq[0][order]), v, sorter=rg.tensor(np.argsort(seq[0][order]))),
        torch.searchsorted(
            torch.tensor(seq[0][order]), tv, sorter=torch.tensor(np.argsort(seq[0][order]))
        ),
    )
    e, t = np.array([[1, 2], [3, 4]]), np.array([4, 1, 9])
    for invert in (False, True):
        check_values(
            rg.isin(rg.tensor(e), rg.tensor(t), invert=invert),
            torch.isin(torch.tensor(e), torch.tensor(t), invert=invert),
        )


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_and_cumulative_trapezoid(edge_order):
    array = RNG.standard_normal((4, 5))
    for kwargs in ({}, {"dim": 1}, {"spacing": 0.5, "dim": 0}, {"spacing": [2.0, 0.5]}):
        ours = rg.gradient(rg.tensor(array), edge_order=edge_order, **kwargs)
        theirs = torch.gradient(torch.tensor(array), edge_order=edge_order, **kwargs)
        check_values(ours, theirs)
    check_grads(
        lambda y: rg.gradient(y, dim=1, edge_order=edge_order)[0],
        lambda y: torch.gradient(y, dim=1, edge_order=edge_order)[0],
        array,
    )
    check_grads(rg.cumulative_trapezoid, torch.cumulative_trapezoid, array)
    x = np.sort(RNG.standard_normal(5))
    check_grads(
        lambda y: rg.cumulative_trapezoid(y, rg.tensor(x)),
        lambda y: torch.cumulative_trapezoid(y, torch.tensor(x)),
        array,
    )


@pytest.mark.parametrize(
    "name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"]
)
@pytest.mark.parametrize("length", [0, 1, 2, 7, 16])
@pytest.mark.parametrize("periodic", [True, False])
def test_windows(name, length, periodic):
    ours = getattr(rg, name)(length, periodic, dtype=rg.float64)
    theirs = getattr(torch, name)(length, periodic, dtype=torch.float64)
    check_values(ours, theirs)
    assert getattr(rg, name)(4).dtype == "float32"


def test_function_forms_of_methods():
    a = RNG.standard_normal((3, 3))
    b = RNG.standard_normal((3, 3))
    (x, y), (tx, ty) = both(a, b)
    check_values(rg.inner(x, y), torch.inner(tx, ty))
    check_values(rg.cross(x, y, dim=1), torch.cross(tx, ty, dim=1))
    check_values(rg.broadcast_to(x[0], (2, 3)), torch.broadcast_to(tx[0], (2, 3)))
    check_values(rg.fliplr(x), torch.fliplr(tx))
    check_values(rg.flipud(x), torch.flipud(tx))
    check_values(rg.nonzero(x > 0), torch.nonzero(tx > 0))
    check_values(rg.argwhere(x > 0), torch.argwhere(tx > 0))
    index = np.array([0, 2])
    check_values(
        rg.index_add(x, 0, rg.tensor(index), y[:2]),
        torch.index_add(tx, 0, torch.tensor(index), ty[:2]),
    )
