"""Regressions found by round 16 of the differential fuzzer (``tests/fuzz16_cases.py``): one
focused case per defect, expected values from torch."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _same(got, want):
    np.testing.assert_array_equal(got.numpy(), want.detach().numpy())
    assert tuple(got.shape) == tuple(want.shape)


def test_nansum_takes_dtype():
    # nansum had no dtype= keyword (a DTypeError naming an unexpected argument)
    a = np.array([[1.5, math.nan], [2.0, 3.0]])
    for dtype in ("float32", "float64"):
        got = rg.tensor(a).nansum(1, dtype=getattr(rg, dtype))
        want = torch.tensor(a).nansum(1, dtype=getattr(torch, dtype))
        assert str(got.dtype).endswith(dtype)
        _same(got, want)
    got = rg.tensor([True, False, True]).nansum(dtype=rg.float32)
    _same(got, torch.tensor([True, False, True]).nansum(dtype=torch.float32))


def test_nansum_and_nanmean_keepdim_without_dim():
    # with keepdim=True and no dim, torch keeps every dim (of size 1); retrograd gave a 0-d
    a = np.array([[[1.0, math.nan, 2.0]], [[4.0, 5.0, math.nan]]])
    for op in ("nansum", "nanmean"):
        got = getattr(rg.tensor(a), op)(keepdim=True)
        want = getattr(torch.tensor(a), op)(keepdim=True)
        assert tuple(got.shape) == (1, 1, 1)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_unique_keeps_each_nan():
    # np.unique merged NaNs (equal_nan=True); torch's unique counts each NaN once
    a = torch.tensor([1.0, math.nan, 2.0, math.nan, 1.0])
    values, inverse, counts = rg.unique(
        rg.tensor(a.numpy()), return_inverse=True, return_counts=True
    )
    w_values, w_inverse, w_counts = torch.unique(a, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(values.numpy(), w_values.numpy())
    np.testing.assert_array_equal(inverse.numpy(), w_inverse.numpy())
    np.testing.assert_array_equal(counts.numpy(), w_counts.numpy())


def test_topk_smallest_counts_nan_largest():
    # largest=False took the largest of -x, which put NaN first: torch counts NaN the
    # largest value either way, so the smallest k leave it out
    a = np.array([[1.0, math.nan, -1.0, 2.0], [math.nan, math.nan, 0.5, -0.0]])
    for k in (1, 2, 3):
        got = rg.tensor(a, requires_grad=True)
        values, indices = got.topk(k, -1, largest=False)
        want = torch.tensor(a).topk(k, -1, largest=False)
        np.testing.assert_array_equal(values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    # int64's minimum negated overflows to itself: it was taken for the largest
    b = np.array([3, -(2**63), 5, 0])
    values, indices = rg.tensor(b).topk(2, largest=False)
    want = torch.tensor(b).topk(2, largest=False)
    np.testing.assert_array_equal(values.numpy(), want.values.numpy())
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())


def test_topk_smallest_gradient():
    a = np.array([0.3, math.nan, -1.0, 2.0, -0.5])
    x = rg.tensor(a, requires_grad=True)
    grads = x.topk(2, largest=False).values.mul(rg.tensor([1.0, 3.0])).sum().backward()
    t = torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(
        (t.topk(2, largest=False).values * torch.tensor([1.0, 3.0])).sum(), t
    )
    np.testing.assert_array_equal(x.grad(grads).numpy(), want.numpy())


@pytest.mark.parametrize("fn", ["vector_norm", "matrix_norm"])
def test_norm_dtype_refusals(fn):
    # torch refuses an int input (dtype= does not make it valid) and a dtype= that narrows
    # the input's; retrograd cast and returned
    x = np.ones((2, 3))
    for arr, dtype in ((x.astype(np.int64), "float64"), (x, "float32")):
        with pytest.raises(RuntimeError):
            getattr(torch.linalg, fn)(torch.tensor(arr), dtype=getattr(torch, dtype))
        with pytest.raises(rg.DTypeError, match=f"linalg.{fn}"):
            getattr(rg.linalg, fn)(rg.tensor(arr), dtype=getattr(rg, dtype))
    # widening stays allowed
    got = getattr(rg.linalg, fn)(rg.tensor(x, dtype=rg.float32), dtype=rg.float64)
    assert got.dtype == rg.float64


def test_gelu_float32_gradient_at_huge_inputs():
    # the float32 GELU slope multiplied x * v'(x) (infinite once x * x overflows) by a
    # density of 0: NaN for |x| above 1.8e19, where torch's is 1 (or 0 below)
    a = np.array([3e38, -3e38, 1e20, -1e20, 2e19, -2e19, 7.0, -7.0, math.inf, 0.0], np.float32)
    x = rg.tensor(a, requires_grad=True)
    got = x.grad(rg.nn.functional.gelu(x).sum().backward())
    t = torch.tensor(a, requires_grad=True)
    (want,) = torch.autograd.grad(torch.nn.functional.gelu(t).sum(), t)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_index_reduce(reduce, include_self):
    # index_reduce (and index_reduce_, rg.index_reduce) did not exist: an AttributeError
    xa = np.array([[1.0, -2.0, 0.5], [2.0, 2.0, -1.0], [0.5, 3.0, 1.5], [-1.0, 0.0, 2.0]])
    sa = np.array([[2.0, 2.0, 0.5], [-1.5, 1.0, 3.0], [2.0, -2.0, 1.0]])
    index = [2, 0, 2]  # a repeated index
    w = np.linspace(-1, 1, 12).reshape(4, 3)
    x, src = rg.tensor(xa, requires_grad=True), rg.tensor(sa, requires_grad=True)
    out = x.index_reduce(0, rg.tensor(index), src, reduce, include_self=include_self)
    grads = (out * rg.tensor(w)).sum().backward()
    tx, ts = torch.tensor(xa, requires_grad=True), torch.tensor(sa, requires_grad=True)
    want = tx.index_reduce(0, torch.tensor(index), ts, reduce, include_self=include_self)
    w_gx, w_gs = torch.autograd.grad((want * torch.tensor(w)).sum(), (tx, ts))
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad(grads).numpy(), w_gx.numpy(), rtol=1e-12)
    np.testing.assert_allclose(src.grad(grads).numpy(), w_gs.numpy(), rtol=1e-12)
    y = rg.tensor(xa)
    y.index_reduce_(0, rg.tensor(index), rg.tensor(sa), reduce, include_self=include_self)
    np.testing.assert_allclose(y.numpy(), want.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(
        rg.index_reduce(rg.tensor(xa), 0, rg.tensor(index), rg.tensor(sa), reduce).numpy(),
        torch.index_reduce(torch.tensor(xa), 0, torch.tensor(index), torch.tensor(sa), reduce),
        rtol=1e-12,
    )


def test_index_reduce_refusals():
    x = rg.zeros(3, 2)
    with pytest.raises(rg.InvalidArgumentError, match="index_reduce"):
        x.index_reduce(0, rg.tensor([0]), rg.ones(1, 2), "sum")  # torch's refusal too
    with pytest.raises(rg.ShapeError, match="index_reduce"):
        x.index_reduce(0, rg.tensor([0, 1]), rg.ones(1, 2), "amax")
    with pytest.raises(rg.RetrogradError, match="index_reduce"):
        x.index_reduce(0, rg.tensor([3]), rg.ones(1, 2), "amax")
