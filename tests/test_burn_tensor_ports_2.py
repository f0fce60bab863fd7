"""More of Burn's forward tensor-op tests (``crates/burn-backend-tests/tests/tensor``, burn
at 2c06be351006851d42fdb6df16b976f4a82d9747): sorting, top-k, cumulative ops, arg/max/min,
aggregation, comparisons, any/all, activations and modules, ported against API.md under every
checkpointing strategy on the chosen inner backend. Expected values are Burn's; where Burn's
value is not what API.md (or torch, for a torch-named op) fixes, the comment says so and the
test follows API.md. Burn's ``sort_descending(d)`` is API.md's ``sort(d, descending=True)``.
``t.sort(d)`` and ``t.topk(k, d)`` are torch's ``(values, indices)`` here (API.md section 10, as
test_burn_ports_2 notes); Burn's return the values, so these tests read ``.values``."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx, arange_f, eq

nan, inf = math.nan, math.inf

# ---- sort_argsort.rs, topk.rs ----------------------------------------------------------------

SORT_1D = [0.5, 1.2, -0.21, 0.0, 2.1, 0.94, -0.3, 2.3, 199.412, 4.0, 0.99, 3.0, -8.1]
SORT_3D = [[[-0.5, 1.2, -0.21], [0.0, 2.1, 0.94]], [[-0.3, 2.3, 4.0], [0.99, 3.0, -8.1]]]


def test_sort_and_argsort_1d():
    t = rg.tensor(SORT_1D)
    approx(
        t.sort(0).values,
        [-8.1, -0.3, -0.21, 0.0, 0.5, 0.94, 0.99, 1.2, 2.1, 2.3, 3.0, 4.0, 199.412],
    )
    eq(t.argsort(0), [12, 6, 2, 3, 0, 5, 10, 1, 4, 7, 11, 9, 8], "int64")
    values, indices = t.sort_with_indices(0, descending=True)
    approx(values, [199.412, 4.0, 3.0, 2.3, 2.1, 1.2, 0.99, 0.94, 0.5, 0.0, -0.21, -0.3, -8.1])
    eq(indices, [8, 9, 11, 7, 4, 1, 10, 5, 0, 3, 2, 6, 12], "int64")
    approx(rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).sort(0, descending=True).values, [5, 4, 3, 2, 1])


def test_sort_descending_3d():
    values, indices = rg.tensor(SORT_3D).sort_with_indices(1, descending=True)
    approx(values, [[[0.0, 2.1, 0.94], [-0.5, 1.2, -0.21]], [[0.99, 3.0, 4.0], [-0.3, 2.3, -8.1]]])
    eq(indices, [[[1, 1, 1], [0, 0, 0]], [[1, 1, 0], [0, 0, 1]]])


SORTED_3D = {
    0: (
        [[[-0.5, 1.2, -0.21], [0.0, 2.1, -8.1]], [[-0.3, 2.3, 4.0], [0.99, 3.0, 0.94]]],
        [[[0, 0, 0], [0, 0, 1]], [[1, 1, 1], [1, 1, 0]]],
    ),
    1: (
        [[[-0.5, 1.2, -0.21], [0.0, 2.1, 0.94]], [[-0.3, 2.3, -8.1], [0.99, 3.0, 4.0]]],
        [[[0, 0, 0], [1, 1, 1]], [[0, 0, 1], [1, 1, 0]]],
    ),
    2: (
        [[[-0.5, -0.21, 1.2], [0.0, 0.94, 2.1]], [[-0.3, 2.3, 4.0], [-8.1, 0.99, 3.0]]],
        [[[0, 2, 1], [0, 2, 1]], [[0, 1, 2], [2, 0, 1]]],
    ),
}


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_sort_3d(dim):
    t = rg.tensor(SORT_3D)
    expected_values, expected_indices = SORTED_3D[dim]
    approx(t.sort(dim).values, expected_values)
    values, indices = t.sort_with_indices(dim)
    approx(values, expected_values)
    eq(indices, expected_indices, "int64")
    eq(t.argsort(dim), expected_indices, "int64")


def test_sort_nan_goes_last():
    t = rg.tensor([[-0.5, nan], [0.0, 0.94], [-0.3, nan]])
    approx(t.sort(0).values, [[-0.5, 0.94], [-0.3, nan], [0.0, nan]])


def test_sort_negative_dims():
    t = rg.tensor([[3.0, 1.0, 5.0], [2.0, 6.0, 4.0]])
    approx(t.sort(-1).values, [[1, 3, 5], [2, 4, 6]])
    values, indices = t.sort_with_indices(-2)
    approx(values, [[2, 1, 4], [3, 6, 5]])
    eq(indices, [[1, 0, 1], [0, 1, 0]])
    eq(t.argsort(-1), [[1, 0, 2], [0, 2, 1]])


TOPK_3D = [[[1.0, 4.0, 7.0], [2.0, 5.0, 6.0]], [[3.0, 0.0, 9.0], [8.0, 2.0, 7.0]]]


def test_topk():
    t = rg.tensor(TOPK_3D)
    values, indices = t.topk_with_indices(2, 2)
    approx(values, [[[7, 4], [6, 5]], [[9, 3], [8, 7]]])
    eq(indices, [[[2, 1], [2, 1]], [[2, 0], [0, 2]]], "int64")
    approx(t.topk(2, -1).values, [[[7, 4], [6, 5]], [[9, 3], [8, 7]]])
    m = rg.tensor([[12.0, -2.0, 3.0], [5.0, 3.0, 6.0]])
    approx(m.topk(2, 0).values, [[12, 3, 6], [5, -2, 3]])
    approx(m.topk(3, 1).values, [[12, 3, -2], [6, 5, 3]])
    approx(t.topk(2, 0).values, [[[3, 4, 9], [8, 5, 7]], [[1, 0, 7], [2, 2, 6]]])
    approx(m.topk_with_indices(2, 0)[0], [[12, 3, 6], [5, -2, 3]])
    approx(m.topk_with_indices(3, 1)[0], [[12, 3, -2], [6, 5, 3]])
    approx(t.topk_with_indices(2, 0)[0], [[[3, 4, 9], [8, 5, 7]], [[1, 0, 7], [2, 2, 6]]])
    values, indices = rg.topk(t, 2, dim=2)
    eq(indices, [[[2, 1], [2, 1]], [[2, 0], [0, 2]]])
    for call in (lambda: m.topk(3, 0), lambda: m.topk_with_indices(3, 0)):
        with pytest.raises(rg.RetrogradError):
            call()


# ---- cumulative.rs ---------------------------------------------------------------------------

M23 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
C3D = [[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]


def test_cumsum():
    t = rg.tensor(M23)
    eq(t.cumsum(0), [[1, 2, 3], [5, 7, 9]])
    eq(t.cumsum(1), [[1, 3, 6], [4, 9, 15]])
    eq(t.cumsum(-1), [[1, 3, 6], [4, 9, 15]])
    eq(rg.tensor([[1.0, 2.0], [3.0, 4.0]]).swap_dims(0, 1).cumsum(1), [[1, 4], [2, 6]])
    eq(rg.tensor(C3D).cumsum(2), [[[1, 3], [3, 7]], [[5, 11], [7, 15]]])


def test_cumprod():
    t = rg.tensor(M23)
    eq(t.cumprod(0), [[1, 2, 3], [4, 10, 18]])
    eq(t.cumprod(1), [[1, 2, 6], [4, 20, 120]])
    eq(t.cumprod(-1), [[1, 2, 6], [4, 20, 120]])
    eq(rg.tensor(C3D).cumprod(2), [[[1, 2], [3, 12]], [[5, 30], [7, 56]]])


def test_cummin_cummax():
    # API.md's cummin(d)/cummax(d) methods give the values (Burn's form)
    t = rg.tensor([[3.0, 1.0, 4.0], [2.0, 5.0, 1.0]])
    eq(t.cummin(0), [[3, 1, 4], [2, 1, 1]])
    eq(t.cummin(1), [[3, 1, 1], [2, 2, 1]])
    eq(t.cummin(-1), [[3, 1, 1], [2, 2, 1]])
    c = rg.tensor([[[4.0, 2.0], [3.0, 1.0]], [[5.0, 6.0], [7.0, 8.0]]])
    eq(c.cummin(2), [[[4, 2], [3, 1]], [[5, 5], [7, 7]]])
    t = rg.tensor([[3.0, 1.0, 4.0], [1.0, 5.0, 2.0]])
    eq(t.cummax(0), [[3, 1, 4], [3, 5, 4]])
    eq(t.cummax(1), [[3, 3, 4], [1, 5, 5]])
    eq(t.cummax(-1), [[3, 3, 4], [1, 5, 5]])
    c = rg.tensor([[[1.0, 3.0], [2.0, 4.0]], [[5.0, 2.0], [6.0, 1.0]]])
    eq(c.cummax(2), [[[1, 3], [2, 4]], [[5, 5], [6, 6]]])


def test_cummin_cummax_propagate_nan():
    eq(rg.tensor([3.0, nan, 1.0, 2.0]).cummin(0), [3, nan, nan, nan])
    eq(rg.tensor([1.0, nan, 5.0, 2.0]).cummax(0), [1, nan, nan, nan])
    t = rg.tensor([nan, 1.0, 2.0])
    eq(t.cummin(0), [nan] * 3)
    eq(t.cummax(0), [nan] * 3)


# ---- arg.rs: API.md section 2 says argmax(d)/argmin(d) keep dimension d (Burn), but the
# method is torch's here (drops it unless keepdim=True; see the report), so these pass
# keepdim=True and check Burn's kept-dimension values. ----------------------------------------


def argmax(t, d):
    return t.argmax(d, keepdim=True)


def argmin(t, d):
    return t.argmin(d, keepdim=True)


def test_argmax_argmin():
    a = rg.tensor([[10.0, 11.0, 2.0], [3.0, 4.0, 5.0]])
    b = rg.tensor([[10.0, 11.0, 2.0], [30.0, 4.0, 5.0]])
    eq(argmax(a, 0), [[0, 0, 1]], "int64")
    eq(argmin(b, 0), [[0, 1, 0]], "int64")
    eq(argmax(a, 1), [[1], [2]])
    eq(argmin(b, 1), [[2], [1]])
    eq(argmax(b, -1), [[1], [0]])
    eq(argmin(b, -1), [[2], [1]])
    with pytest.raises(rg.ShapeError):
        a.argmax(-3)


def test_argmax_argmin_strided():
    eq(argmax(rg.tensor([1.0, 5.0, 3.0, 2.0, 4.0]).flip([0]), 0), [3])
    eq(argmax(rg.tensor([[1.0, 5.0, 3.0], [6.0, 2.0, 4.0]]).flip([1]), 1), [[1], [2]])
    eq(argmin(rg.tensor([5.0, 1.0, 4.0, 2.0, 3.0]).flip([0]), 0), [3])
    p = arange_f(120, (2, 3, 4, 5)).permute([0, 2, 1, 3])
    assert argmax(p, 3).shape == (2, 4, 3, 1)
    assert argmax(p, 2).shape == (2, 4, 1, 5)
    assert argmin(120.0 - arange_f(120, (2, 3, 4, 5)).permute([0, 2, 1, 3]), 3).shape == (
        2,
        4,
        3,
        1,
    )
    middle = rg.tensor((np.arange(84 * 80 * 80) % 84).astype(np.float32).reshape(1, 84, 80, 80))
    out = argmax(middle, 1)
    assert out.shape == (1, 1, 80, 80)
    eq(argmax((arange_f(12, (2, 2, 3)) + 1).permute([0, 2, 1]), 2), np.ones((2, 3, 1)))


def test_arg_extrema_ties_use_lowest_index():
    t = rg.tensor([[3.0, 3.0, -2.0, -2.0]])
    eq(argmax(t, 1), [[0]])
    eq(argmin(t, 1), [[2]])
    eq(t.max_dim_with_indices(1)[1], [[0]])
    eq(t.min_dim_with_indices(1)[1], [[2]])


def test_arg_extrema_nan():
    for t, expected in [
        (rg.tensor([[1.0, nan, -3.0]]), [[1]]),
        (rg.tensor([[nan, nan, 3.0]]), [[0]]),
        (rg.tensor([[nan, nan, nan]]), [[0]]),
    ]:
        eq(argmax(t, 1), expected)
        eq(argmin(t, 1), expected)
    t = rg.tensor([[nan, 1.0], [nan, 2.0], [-3.0, 4.0]])
    eq(argmax(t, 0), [[0, 2]])
    eq(argmin(t, 0), [[0, 0]])
    t = rg.tensor([[nan, nan, -3.0]])
    for values, indices in (t.max_dim_with_indices(1), t.min_dim_with_indices(1)):
        assert np.isnan(values.numpy()[0, 0])
        eq(indices, [[0]])


# ---- maxmin.rs (Burn's max_dims/max_pair/max_abs are not API.md names) ------------------------

F23 = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_max_dim_min_dim():
    f = rg.tensor(F23)
    eq(f.max_dim(0), [[3, 4, 5]], "float32")
    eq(f.max_dim(1), [[2], [5]])
    eq(f.max_dim(-1), [[2], [5]])
    z = f.int()
    eq(z.max_dim(0), [[3, 4, 5]], "int64")
    eq(z.max_dim(1), [[2], [5]], "int64")
    eq(f.min_dim(0), [[0, 1, 2]])
    eq(f.min_dim(1), [[0], [3]])
    eq(f.min_dim(-1), [[0], [3]])
    eq(z.min_dim(0), [[0, 1, 2]], "int64")
    eq(z.min_dim(1), [[0], [3]], "int64")


def test_max_min_dim_with_indices():
    f = rg.tensor(F23)
    for d in (0, -2):
        values, indices = f.max_dim_with_indices(d)
        eq(values, [[3, 4, 5]])
        eq(indices, [[1, 1, 1]], "int64")
        values, indices = f.min_dim_with_indices(d)
        eq(values, [[0, 1, 2]])
        eq(indices, [[0, 0, 0]], "int64")
    values, indices = f.max_dim_with_indices(1)
    eq(values, [[2], [5]])
    eq(indices, [[2], [2]])
    values, indices = f.min_dim_with_indices(1)
    eq(values, [[0], [3]])
    eq(indices, [[0], [0]])


def test_whole_max_min():
    t = rg.tensor([-inf, -2.0, 7.0, 7.0, inf])
    eq(t.max(), inf)
    eq(t.min(), -inf)
    i = rg.tensor([3.0, -2.0, 7.0, 1.0]).int()
    eq(i.max(), 7, "int64")
    eq(i.min(), -2, "int64")
    for values in ([nan, 1.0, 2.0], [1.0, nan, 2.0], [1.0, 2.0, nan]):
        assert np.isnan(rg.tensor(values).max().item())
        assert np.isnan(rg.tensor(values).min().item())
    for dtype in ("float64",):
        t = rg.tensor([1.0, nan, 2.0]).cast(dtype)
        assert np.isnan(t.max().item()) and np.isnan(t.min().item())


def test_whole_max_min_of_views():
    t = rg.tensor([[1.0, nan, 2.0], [3.0, 4.0, 5.0]]).narrow(0, 0, 1).swap_dims(0, 1)
    assert np.isnan(t.max().item()) and np.isnan(t.min().item())
    t = rg.tensor([[nan, 1.0, 2.0], [3.0, 4.0, 5.0]]).narrow(0, 1, 1).swap_dims(0, 1)
    eq(t.max(), 5)
    eq(t.min(), 3)
    t = rg.tensor([[nan, 1.0], [2.0, 3.0]]).narrow(0, 1, 1).expand([2, 2])
    eq(t.max(), 3)
    eq(t.min(), 2)


def test_max_min_dim_nan():
    t = rg.tensor([[1.0, nan, 3.0]])
    assert np.isnan(t.max_dim(1).item()) and np.isnan(t.min_dim(1).item())
    t = rg.tensor([[1.0, nan, -3.0]])
    for values, indices in (t.max_dim_with_indices(1), t.min_dim_with_indices(1)):
        assert np.isnan(values.item())
        eq(indices, [[1]])


@pytest.mark.parametrize(
    "call",
    [
        lambda: rg.zeros((0,)).max(),
        lambda: rg.zeros((0,)).min(),
        lambda: rg.zeros((3, 0)).max_dim(1),
        lambda: rg.zeros((3, 0)).min_dim(1),
        lambda: rg.zeros((3, 0)).argmax(1),
        lambda: rg.zeros((3, 0)).argmin(1),
    ],
)
def test_max_min_of_empty_raise(call):
    with pytest.raises(rg.ShapeError):
        call()


# ---- aggregation.rs (Burn's sum_dims/mean_dims are not API.md names) --------------------------

A3D = [[[2.0, 4.0, 1.0], [7.0, -5.0, 3.0]], [[3.0, 1.0, 2.0], [4.0, 2.0, 3.0]]]


def test_sum_mean_prod():
    t = rg.tensor(F23)
    approx(t.mean(), 15.0 / 6.0)
    eq(t.sum(), 15.0)
    assert t.sum().shape == () and t.mean().shape == ()
    approx(t.mean_dim(1), [[1.0], [4.0]])
    approx(t.mean_dim(-1), [[1.0], [4.0]])
    eq(t.sum_dim(1), [[3], [12]])
    eq(t.sum_dim(0), [[3, 5, 7]])
    approx(t.mean_dim(0), [[1.5, 2.5, 3.5]])
    u = rg.tensor([[3.0, 1.0, 2.0], [4.0, 2.0, 3.0]])
    eq(u.sum_dim(0), [[7, 3, 5]])
    eq(u.mean_dim(0), [[3.5, 1.5, 2.5]])
    y = rg.ones((2, 2)) * rg.tensor([[2.0, 3.0], [-1.0, -5.0]])
    eq(y.sum_dim(1), [[5], [-6]])
    eq(y.sum_dim(-1), [[5], [-6]])
    p = rg.tensor([[2.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    approx(p.prod(), 240.0)
    approx(p.prod_dim(1), [[4.0], [60.0]])
    z = rg.tensor([[2.0, 0.0, 2.0], [3.0, 4.0, 5.0]])
    eq(z.prod(), 0.0)
    approx(z.prod_dim(1), [[0.0], [60.0]])


def test_sum_dim_non_contiguous():
    t = rg.tensor(A3D)
    eq(t.swap_dims(0, 2).sum_dim(1), np.array([9, 7, -1, 3, 4, 5]).reshape(3, 1, 2))
    eq(t.swap_dims(0, 1).sum_dim(1), np.array([5, 5, 3, 11, -3, 6]).reshape(2, 1, 3))
    eq((arange_f(9, (3, 3)) + 2).sum_dim(1), [[9], [18], [27]])
    eq((arange_f(9, (3, 3)).swap_dims(0, 1) + 2).sum_dim(1), [[15], [18], [21]])
    eq((arange_f(9, (1, 3, 3)) + 2).sum_dim(2), [[[9], [18], [27]]])
    t2 = rg.arange(10, 12).float().reshape((1, 2, 1))
    eq((arange_f(8, (1, 2, 4)) + t2).sum_dim(2) + t2, [[[56], [77]]])
    t1 = arange_f(8, (4, 2, 1)).swap_dims(0, 2)
    t2 = rg.arange(16, 24).float().reshape((1, 4, 2)).swap_dims(1, 2)
    eq((t1 + t2).sum_dim(2), [[[88], [96]]])
    t3 = rg.arange(32, 40).float().reshape((1, 2, 4))
    eq((t3 + t1 + t2).sum_dim(2), [[[222], [246]]])
    eq((t3 + t1 + t2).sum_dim(1), [[[102, 112, 122, 132]]])
    t1 = arange_f(32, (4, 2, 2, 2)).swap_dims(3, 2).swap_dims(1, 2)
    t2 = arange_f(8, (1, 2, 2, 2))
    s = t2.sum_dim(0).sum_dim(1).sum_dim(2)
    eq(
        (t1 + t2 + s).sum_dim(1),
        [
            [[[29, 43], [41, 55]]],
            [[[45, 59], [57, 71]]],
            [[[61, 75], [73, 87]]],
            [[[77, 91], [89, 103]]],
        ],
    )
    eq((arange_f(16, (4, 4)).reshape((1, 4, 4)) + 5.0).sum_dim(2), [[[26], [42], [58], [74]]])


def test_softmax_by_hand_on_transposed_input():
    t = (arange_f(12, (3, 4)) + 1).swap_dims(0, 1)
    shifted = t.sub(t.max_dim(1))
    e = shifted.exp()
    row = [3.2932044e-4, 1.7980287e-2, 0.98169035]
    approx(e.div(e.sum_dim(1)), [row] * 4, 1e-5)


def test_mean_dim_fused_after_conv1d():
    x = rg.nn.functional.conv1d(rg.ones((128, 32, 1)), rg.ones((1, 32, 1)))
    g = x.powi_scalar(2).sum_dim(2).add_scalar(1e-5).sqrt()
    norm = g.div(g.mean_dim(1))
    eq(x.mul(norm).add(x).sum(), 8192.0)


def test_mean_dim_and_reduce_chains():
    t = rg.tensor(F23)
    approx(t.mean_dim(1), [[1.0], [4.0]])
    approx(t.mean_dim(0), [[1.5, 2.5, 3.5]])
    out = arange_f(1024, (2, 2, 256)).permute([1, 2, 0]).mean_dim(0).mean_dim(1)
    approx(out.squeeze_dims([0, 1]), [255.5, 767.5])


def test_reductions_of_strided_views():
    t = rg.tensor(M23)
    eq(t.transpose().sum_dim(1), [[5], [7], [9]])
    approx(t.transpose().prod_dim(1), [[4], [10], [18]])
    approx(t.transpose().mean_dim(1), [[2.5], [3.5], [4.5]])
    eq(rg.tensor([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]).flip([0]).sum_dim(1), [[60], [6]])
    eq(t.flip([0]).sum_dim(1), [[15], [6]])
    eq(t.flip([1]).sum_dim(0), [[9, 7, 5]])
    approx(t.flip([0]).mean_dim(1), [[5], [2]])
    approx(rg.tensor([[1.0, 2.0], [3.0, 4.0]]).flip([0]).prod_dim(1), [[12], [2]])
    eq(rg.tensor([0.0, 1.0, 2.0, 3.0, 4.0]).narrow(0, 1, 3).sum(), 6)
    eq(t.flip([0, 1]).sum_dim(0), [[9, 7, 5]])


def test_sum_dim_large_and_mean_precision():
    eq(rg.ones((1, 84, 80, 80)).sum_dim(1), np.full((1, 1, 80, 80), 84.0))
    approx(rg.arange(0, 1024).float().mean(), 511.5)


def test_reductions_of_empty():
    e = rg.zeros((0,))
    eq(e.sum(), 0.0)
    eq(e.prod(), 1.0)
    assert np.isnan(e.mean().item())
    eq(rg.zeros((3, 0)).sum_dim(1), [[0], [0], [0]])
    eq(rg.zeros((3, 0)).prod_dim(1), [[1], [1], [1]])
    assert np.isnan(rg.zeros((3, 0)).mean_dim(1).numpy()).all()
    assert rg.zeros((0, 3)).sum_dim(1).shape == (0, 1)
    with pytest.raises(rg.ShapeError):
        rg.zeros((0, 0)).max_dim(1)


# ---- comparison.rs, any.rs, all.rs, nan.rs, inf.rs, finite.rs --------------------------------

CMP_A = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
CMP_B = [[1.0, 1.0, 1.0], [4.0, 3.0, 50.0]]
T, F = True, False


def test_equal_not_equal():
    a = rg.tensor([[0.0, 1.0, 2.0], [inf, 4.0, -inf]])
    b = rg.tensor([[1.0, 1.0, 1.0], [inf, 3.0, -inf]])
    eq(a.equal(b), [[F, T, F], [T, F, T]], "bool")
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, inf, 5.0]])
    eq(a.not_equal(b), [[T, F, T], [T, T, T]], "bool")
    a, b = rg.tensor(CMP_A), rg.tensor([[1.0, 1.0, 1.0], [4.0, 3.0, 5.0]])
    eq(a.equal(b), [[F, T, F], [F, F, T]])
    eq(a.not_equal(b), [[T, F, T], [T, T, F]])
    c = rg.tensor([[0.0, 1.0, 2.0], [3.0, 2.0, 5.0]])
    eq(c.equal_elem(2), [[F, F, T], [F, T, F]])
    eq(c.not_equal_elem(2), [[T, T, F], [T, F, T]])


def test_order_comparisons():
    a, b = rg.tensor(CMP_A), rg.tensor(CMP_B)
    eq(a.greater_elem(4), [[F, F, F], [F, F, T]], "bool")
    eq(a.greater_equal_elem(4.0), [[F, F, F], [F, T, T]])
    eq(a.greater(b), [[F, F, T], [F, T, F]])
    eq(a.greater_equal(b), [[F, T, T], [F, T, F]])
    eq(a.lower_elem(4.0), [[T, T, T], [T, F, F]])
    eq(a.lower_equal_elem(4.0), [[T, T, T], [T, T, F]])
    eq(a.lower(b), [[T, F, F], [T, F, T]])
    eq(a.lower_equal(b), [[T, T, F], [T, F, T]])
    eq(a > b, a.greater(b))
    eq(a <= b, a.lower_equal(b))


def test_comparisons_broadcast():
    lhs = rg.tensor([[1.0, 2.0, 3.0, 4.0]])
    rhs = rg.tensor(
        [[0.5, 1.5, 2.5, 3.5], [1.5, 2.5, 3.5, 4.5], [2.5, 3.5, 4.5, 5.5], [3.5, 4.5, 5.5, 6.5]]
    )
    eq(lhs.greater(rhs), [[T] * 4, [F] * 4, [F] * 4, [F] * 4])
    col = rg.tensor([[1.0], [2.0], [3.0], [4.0]])
    eq(col.greater_equal(lhs), [[T, F, F, F], [T, T, F, F], [T, T, T, F], [T, T, T, T]])
    row = rg.tensor([[0.0, 1.0, -1.0, 2.0, -2.0]])
    col = rg.tensor([[0.5], [1.5], [-0.5], [-1.5], [2.5]])
    eq(
        row.lower(col),
        [[T, F, T, F, T], [T, T, T, F, T], [F, F, T, F, T], [F, F, F, F, T], [T, T, T, T, T]],
    )
    eq(
        rg.tensor([[2.5]]).lower_equal(rg.tensor([[1.0, 2.0, 3.0, 4.0], [2.0, 2.5, 3.0, 3.5]])),
        [[F, F, T, T], [F, T, T, T]],
    )
    eq(
        rg.tensor([[2.0], [3.0], [4.0]]).equal(rg.tensor([[2.0, 3.0, 4.0, 2.0]])),
        [[T, F, F, T], [F, T, F, F], [F, F, T, F]],
    )
    eq(
        rg.tensor([[1.0], [2.0], [3.0]]).not_equal(rg.tensor([[1.0, 2.0, 3.0]])),
        [[F, T, T], [T, F, T], [T, T, F]],
    )


def test_comparisons_of_strided_views():
    m = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    eq(m.transpose().greater(rg.full((2, 2), 2.0)), [[F, T], [F, T]])
    v = rg.tensor([1.0, 2.0, 3.0, 4.0])
    eq(v.flip([0]).equal(rg.tensor([4.0, 2.0, 2.0, 1.0])), [T, F, T, T])
    eq(m.flip([0]).lower(rg.tensor([[2.0, 5.0], [2.0, 1.0]])), [[F, T], [T, F]])
    eq(v.flip([0]).greater_elem(2.5), [T, T, F, F])
    eq(m.transpose().equal(rg.tensor([[1.0, 3.0], [2.0, 4.0]]).transpose()), [[T, F], [F, T]])
    six = rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).narrow(0, 1, 4)
    eq(six.not_equal(rg.tensor([2.0, 2.0, 4.0, 4.0])), [F, T, F, T])
    eq(m.flip([0, 1]).lower(rg.full((2, 2), 3.0)), [[F, F], [T, T]])


def logical_mask(rows, cols):
    """Burn's build_logical_mask: rows 1, 5 and 7 all set (7 with one hole at column 100), rows
    2, 3 and 6 with one element set (first, last, middle column), rows 0 and 4 empty."""
    mask = np.zeros((rows, cols), dtype=bool)
    mask[[1, 5, 7], :] = True
    mask[2, 0] = mask[3, cols - 1] = mask[6, cols // 2] = True
    mask[7, 100] = False
    return mask


def nonzero_values(mask, dtype):
    """Burn's mask_to_floats/ints: alternating non-zero magnitudes where the mask is set."""
    signs = np.where(np.arange(mask.size).reshape(mask.shape) % 2 == 0, 2.0, -3.0)
    return np.where(mask, signs, 0).astype(dtype)


def test_any_all():
    for t, expected in [
        (rg.tensor([[0.0, 0.0, 0.0], [1.0, -1.0, 0.0]]), T),
        (rg.zeros((2, 3)), F),
        (rg.tensor([[0, 0, 0], [1, -1, 0]]), T),
        (rg.zeros((2, 3), dtype="int64"), F),
        (rg.tensor([[F, F, F], [T, T, F]]), T),
        (rg.zeros((2, 3), dtype="bool"), F),
    ]:
        eq(t.any(), expected, "bool")
    for t in (
        rg.tensor([[0.0, 0.0, 0.0], [1.0, -1.0, 0.0]]),
        rg.tensor([[0, 0, 0], [1, -1, 0]]),
        rg.tensor([[F, F, F], [T, T, F]]),
    ):
        eq(t.any_dim(1), [[F], [T]], "bool")
    t = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]])
    eq(t.all(), F)
    eq(t.all_dim(1), [[F], [T]], "bool")
    eq(t.all_dim(-1), [[F], [T]])
    mask = logical_mask(8, 513)
    for t in (
        rg.tensor(nonzero_values(mask, np.float32)),
        rg.tensor(nonzero_values(mask, np.int64)),
        rg.tensor(mask),
    ):
        eq(t.any_dim(1), mask.any(1, keepdims=True))
        eq(t.all_dim(1), mask.all(1, keepdims=True))
    for dtype in ("float32", "int64", "bool"):
        e = rg.zeros((0,), dtype=dtype)
        eq(e.any(), F)
        eq(e.all(), T)
        eq(rg.zeros((3, 0), dtype=dtype).all_dim(1), [[T], [T], [T]])
    with pytest.raises(rg.ShapeError):
        t.any_dim(2)


def test_is_nan_is_inf_is_finite():
    eq(rg.tensor(CMP_A).is_nan(), np.zeros((2, 3), dtype=bool), "bool")
    eq(rg.tensor([[0.0, nan, 2.0], [nan, 4.0, 5.0]]).is_nan(), [[F, T, F], [T, F, F]])
    assert not rg.tensor(CMP_A).contains_nan().item()
    assert rg.tensor([[0.0, nan, 2.0], [3.0, 4.0, 5.0]]).contains_nan().item()
    big = rg.cat([rg.ones((2048,)) * 60000.0, rg.ones((2048,)) * -60000.0], 0)
    assert not big.contains_nan().item()
    eq(rg.tensor(CMP_A).is_inf(), np.zeros((2, 3), dtype=bool), "bool")
    eq(rg.tensor([[0.0, inf, 2.0], [-inf, 4.0, 5.0]]).is_inf(), [[F, T, F], [T, F, F]])
    eq(rg.tensor(CMP_A).is_finite(), np.ones((2, 3), dtype=bool), "bool")
    eq(rg.tensor([[0.0, inf, nan], [-inf, nan, 5.0]]).is_finite(), [[T, F, F], [F, F, T]])
