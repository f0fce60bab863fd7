"""Regressions found by round 22 of the differential fuzzer (``tests/fuzz22_cases.py``): each
expected value comes from torch or from the mathematics, and each test failed on the old code."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def test_linalg_lu_solve_matches_torch_in_every_form():
    # linalg.lu_solve did not exist (an AttributeError)
    rng = np.random.default_rng(0)
    a = rng.uniform(-0.3, 0.3, (2, 3, 3)) + 2 * np.eye(3)
    for left, adjoint in ((True, False), (True, True), (False, False), (False, True)):
        b = rng.standard_normal((2, 3, 2) if left else (2, 2, 3))
        w = rng.standard_normal(b.shape)
        got, want = [], []
        for lib, out in ((rg, got), (torch, want)):
            ta = lib.tensor(a, dtype=lib.float64, requires_grad=True)
            tb = lib.tensor(b, dtype=lib.float64, requires_grad=True)
            lu, piv = lib.linalg.lu_factor(ta)
            x = lib.linalg.lu_solve(lu, piv, tb, left=left, adjoint=adjoint)
            grads = lib.autograd.grad((x * lib.tensor(w)).sum(), [ta, tb])
            out.extend([x.detach().numpy(), *(g.numpy() for g in grads)])
        for g, t in zip(got, want):
            np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12)


def test_linalg_lu_solve_refuses_a_right_hand_side_that_does_not_fit():
    lu, piv = rg.linalg.lu_factor(rg.eye(3, dtype=rg.float64))
    with pytest.raises(rg.ShapeError, match="lu_solve"):
        rg.linalg.lu_solve(lu, piv, rg.ones(2, 2, dtype=rg.float64))


@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_nanmean_refuses_an_integer_input_whatever_dtype_says(dtype):
    # nanmean(int_or_bool, dtype=float64) returned a mean; torch refuses a non-float input
    x = rg.tensor([1, 0, 1], dtype=getattr(rg, dtype))
    with pytest.raises(RuntimeError, match="floating point"):
        torch.nanmean(torch.tensor([1, 0, 1], dtype=getattr(torch, dtype)), dtype=torch.float64)
    with pytest.raises(rg.DTypeError, match="nanmean"):
        rg.nanmean(x, dtype=rg.float64)


def test_reduce_lr_on_plateau_refuses_min_lrs_of_another_count_than_the_groups():
    # a list of two min_lr over one group was taken (the second ignored); torch refuses it
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.zeros(2))
        opt = lib.optim.SGD([p], lr=0.1)
        with pytest.raises(ValueError, match="min_lrs"):
            lib.optim.lr_scheduler.ReduceLROnPlateau(opt, min_lr=[0.1, 0.2])


def test_linalg_householder_product_matches_torch_for_fewer_reflectors_than_columns():
    # linalg.householder_product did not exist (nn.utils.parametrizations had a private
    # version taking as many reflectors as columns)
    rng = np.random.default_rng(1)
    for shape, k in (((4, 3), 2), ((2, 3, 3), 3), ((3, 2), 1)):
        a = rng.standard_normal(shape) * 0.5
        tau = rng.uniform(0.5, 1.5, shape[:-2] + (k,))
        w = rng.standard_normal(shape)
        got, want = [], []
        for lib, out in ((rg, got), (torch, want)):
            ta = lib.tensor(a, dtype=lib.float64, requires_grad=True)
            tt = lib.tensor(tau, dtype=lib.float64, requires_grad=True)
            q = lib.linalg.householder_product(ta, tt)
            grads = lib.autograd.grad((q * lib.tensor(w)).sum(), [ta, tt], allow_unused=True)
            out.append(q.detach().numpy())
            out.extend(
                np.zeros(x.shape) if g is None else g.numpy() for g, x in zip(grads, [ta, tt])
            )
        for g, t in zip(got, want):
            np.testing.assert_allclose(g, t, rtol=1e-10, atol=1e-12)
    with pytest.raises(rg.ShapeError, match="householder_product"):
        rg.linalg.householder_product(rg.ones(2, 3, dtype=rg.float64), rg.ones(2, dtype=rg.float64))


@pytest.mark.parametrize("op", ["median", "nanmedian"])
@pytest.mark.parametrize("dtype", ["int64", "bool", "float64"])
def test_the_median_of_no_elements_keeps_the_dtype(op, dtype):
    # median()/nanmedian() of an empty int64 tensor was a float32 NaN and median() of an empty
    # bool tensor was refused; torch casts its NaN to the dtype (int64's minimum, bool's True)
    want = getattr(torch.zeros((3, 0), dtype=getattr(torch, dtype)), op)()
    got = getattr(rg.zeros((3, 0), dtype=getattr(rg, dtype)), op)()
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_array_equal(got.numpy(), want.numpy())
