"""Regressions found by fuzzing round 21 (``tests/fuzz21_cases.py``), each checked against
torch 2.13."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _both(fn):
    """fn(lib) in torch and in retrograd, as nested lists."""
    return fn(torch), fn(rg)


def test_writes_through_unfold_windows_that_share_no_element_reach_the_base():
    # (every write through unfold's windows was refused as overlapping, step >= size too)
    def program(lib):
        x = lib.arange(12.0, dtype=lib.float64).reshape(3, 4)
        windows = x.unfold(1, 2, 3)  # (one element apart: none in two windows)
        windows.mul_(10)
        windows[0, 0, 1] = -1
        column = x.unfold(0, 1, 2)  # (a single element per window)
        column += 100
        return x.tolist(), windows.tolist(), column.tolist()

    want, got = _both(program)
    assert got == want


def test_unfold_window_writes_carry_the_gradient():
    def grads(lib):
        leaf = lib.tensor(np.linspace(-1, 1, 10), dtype=lib.float64, requires_grad=True)
        x = leaf * 1.0
        w = lib.tensor([0.5, 2.0], dtype=lib.float64, requires_grad=True)
        x.unfold(0, 2, 4).mul_(w)  # windows [0:2] and [4:6] and [8:10]
        loss = (x * lib.arange(10, dtype=lib.float64)).sum()
        return [g.tolist() for g in lib.autograd.grad(loss, [leaf, w])]

    want, got = _both(grads)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_writes_through_overlapping_unfold_windows_are_refused():
    # (torch writes them one by one in its kernel's order; retrograd refuses, by name)
    x = rg.arange(5.0)
    with pytest.raises(rg.ShapeError, match="overlapping windows of unfold"):
        x.unfold(0, 2, 1).add_(1)


def test_a_zero_dim_int_tensor_in_an_index_is_read_as_an_int():
    # (it was an index tensor: a copy, not a view, and with another index tensor apart from
    # it the broadcast dimensions went first)
    def program(lib):
        x = lib.zeros(3, 2)
        row = x[lib.tensor(1)]  # a view of x, as x[1]
        row += 1
        x[:, lib.tensor(0)].sub_(1)
        y = lib.zeros(4, 3, 2)
        shapes = [
            tuple(y[lib.tensor(1), :, lib.tensor([0, 1])].shape),
            tuple(y[:, lib.tensor([0, 2]), None, lib.tensor(-1)].shape),
            tuple(y[lib.tensor([True, False, True, True]), lib.tensor(2)].shape),
        ]
        return x.tolist(), shapes

    want, got = _both(program)
    assert got == want
    with pytest.raises(IndexError):  # (out of range as an int is)
        rg.zeros(3, 2)[rg.tensor(3)]


def test_infinite_norms_of_a_vector_with_nan_give_torch_gradient():
    # (amax's NaN everywhere; torch's backward splits the gradient among the NaNs, whose
    # sign, 0, then zeroes it)
    def grads(lib):
        out = []
        for order in (math.inf, -math.inf):
            x = lib.tensor([[math.nan, 1.0, -2.0], [0.5, -3.0, 3.0]], dtype=lib.float64,
                           requires_grad=True)  # fmt: skip
            n = lib.linalg.vector_norm(x, order, dim=1)
            (g,) = lib.autograd.grad((n * lib.tensor([1.0, 2.0], dtype=lib.float64)).sum(), [x])
            out.append(g.tolist())
        return out

    want, got = _both(grads)
    np.testing.assert_array_equal(np.array(got), np.array(want))


def test_index_put_accumulate_refuses_an_index_out_of_range():
    # (the accumulating path wrapped a negative index by the size without checking, and
    # checked the flat position against the element count only: [-1, 3] on a dim of size 2
    # wrote elsewhere, -4 on size 3 wrapped to 2)
    for shape, indices in (((4, 2, 4), ([1], [-1, 3])), ((3,), ([0, -4],)), ((2, 3), ([2],))):
        for lib in (torch, rg):
            x = lib.zeros(shape, dtype=lib.float64)
            tensors = tuple(lib.tensor(i) for i in indices)
            with pytest.raises(IndexError, match="out of"):
                x.index_put_(tensors, lib.tensor(1.0, dtype=lib.float64), accumulate=True)
    # in range, negatives and duplicates add up as torch's
    want = torch.zeros(3, dtype=torch.float64)
    want.index_put_((torch.tensor([0, -3, -1, 2]),), torch.tensor(1.0, dtype=torch.float64), True)
    got = rg.zeros(3, dtype=rg.float64)
    got.index_put_((rg.tensor([0, -3, -1, 2]),), rg.tensor(1.0, dtype=rg.float64), True)
    assert got.tolist() == want.tolist()


def test_diagonal_scatter_writes_the_diagonal_that_diagonal_takes():
    # (torch.diagonal_scatter and Tensor.diagonal_scatter did not exist)
    def program(lib):
        x = lib.tensor(np.arange(24.0).reshape(2, 3, 4), dtype=lib.float64, requires_grad=True)
        s = lib.tensor(np.linspace(-1, 1, 6).reshape(2, 3), dtype=lib.float64, requires_grad=True)
        y = lib.diagonal_scatter(x * 1, s * 3, 1, 1, 2)
        z = x.diagonal_scatter(s[:1].T.float() * 5, -1, 0, -1)  # (src cast to x's dtype)
        grads = lib.autograd.grad((y * y).sum() + (z * z).sum(), [x, s])
        return [y.tolist(), z.tolist(), str(z.dtype)[-7:], *(g.tolist() for g in grads)]

    want, got = _both(program)
    assert got == want
    with pytest.raises(rg.ShapeError, match="diagonal_scatter"):
        rg.diagonal_scatter(rg.zeros(3, 4), rg.ones(2))


def test_index_put_accumulate_checks_a_mask_against_the_dims_it_covers():
    # (the accumulating path took a mask's true positions whatever its shape: a mask of 3
    # over a dimension of 2 wrote row 0, a [2, 1] mask over [2, 3] wrote one element)
    for mask in ([True, False, False], [[True], [False]]):
        for lib in (torch, rg):
            y = lib.zeros(2, 3, dtype=lib.float64)
            with pytest.raises(IndexError, match="mask"):
                y.index_put_((lib.tensor(mask),), lib.tensor(1.0, dtype=lib.float64), True)
    want, got = _both(
        lambda lib: (
            lib.zeros(2, 3, dtype=lib.float64)
            .index_put_(
                (lib.tensor([1, 0]), lib.tensor([True, False, True])),
                lib.tensor([1.0, 2.0], dtype=lib.float64),
                accumulate=True,
            )
            .tolist()
        )
    )
    assert got == want


def test_a_slice_of_an_expanded_tensor_taking_each_element_once_writes_through():
    # (every write below an expand was refused as overlapping, x.expand(2, n)[1] = v too)
    def program(lib):
        x0 = lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64, requires_grad=True)
        x = x0 * 1
        e = x.expand(2, 3)
        e[1] = lib.tensor([7.0, 8.0, 9.0], dtype=lib.float64) * x0
        x.unsqueeze(0).expand(2, 3)[1:].add_(1)
        y0 = lib.ones(3, 1, dtype=lib.float64, requires_grad=True)
        y = y0 * 2
        y.expand(3, 4)[:, 2] = lib.tensor([5.0, 6.0, 7.0], dtype=lib.float64) * y0[:, 0]
        loss = (x * lib.tensor([1.0, 2.0, 3.0], dtype=lib.float64)).sum() + (y**2).sum()
        return [x.tolist(), e.tolist(), y.tolist(), *(g.tolist() for g in lib.autograd.grad(
            loss, [x0, y0]))]  # fmt: skip

    want, got = _both(program)
    assert got == want
    with pytest.raises(rg.ShapeError, match="expanded"):  # (two copies: refused, as torch)
        rg.ones(3, 1).expand(3, 4)[:, 1:3].add_(1)
