"""Burn's int and bool tensor tests and the remaining float op modules (one_hot, cross, unfold,
trig, arange), from ``crates/burn-backend-tests/tests/tensor/{int,bool,float}/ops``
(tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747), ported against API.md under
every checkpointing strategy on the chosen inner backend. Burn's ``bool_and``/``bool_or``/
``bool_xor``/``bool_not`` are torch's ``logical_*`` and ``& | ^ ~`` here; where a Burn value is
not what API.md or torch (for a torch name) fixes, the comment says so."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx, arange_f, eq

Y, N = True, False  # Burn's true/false, short for the tables
I23 = [[0, 1, 2], [3, 4, 5]]


# ---- int/ops: add, sub, mul, div, remainder, abs, sign, cast ---------------------------------


def test_int_add_sub_mul():
    a = rg.tensor(I23)
    eq(a + rg.tensor([[6, 7, 8], [9, 10, 11]]), [[6, 8, 10], [12, 14, 16]], "int64")
    eq(rg.tensor([[0, 1, 2]]) + rg.tensor([[3, 4, 5], [6, 7, 8]]), [[3, 5, 7], [6, 8, 10]])
    eq(a + 2, [[2, 3, 4], [5, 6, 7]], "int64")
    eq(a.add_scalar(2), [[2, 3, 4], [5, 6, 7]], "int64")
    p = rg.arange(0, 32).reshape([1, 4, 4, 2]).permute([0, 3, 1, 2]).slice([(0, 1), (0, 2)])
    eq(p.add_scalar(0), p, "int64")
    f = rg.arange(0, 32).float().reshape([1, 4, 4, 2]).permute([0, 3, 1, 2])
    eq(f.add_scalar(0.0), f)
    m = rg.tensor([[1, 2], [3, 4]])
    eq(m.transpose() + rg.tensor([[10, 20], [30, 40]]).transpose(), [[11, 33], [22, 44]])
    v = rg.tensor([1, 2, 3, 4])
    eq(v.flip([0]) + rg.tensor([10, 20, 30, 40]).flip([0]), [44, 33, 22, 11])
    eq(v.flip([0]) + 10, [14, 13, 12, 11])
    eq(a - rg.tensor([[6, 7, 8], [9, 10, 11]]), np.full((2, 3), -6), "int64")
    eq(rg.tensor([[0, 1, 2]]) - rg.tensor([[3, 4, 5], [6, 7, 8]]), [[-3, -3, -3], [-6, -6, -6]])
    eq(a - 2, [[-2, -1, 0], [1, 2, 3]])
    eq(a.sub_scalar(2), [[-2, -1, 0], [1, 2, 3]], "int64")
    eq(rg.tensor([10, 20, 30, 40]).flip([0]) - v, [39, 28, 17, 6])
    eq(a * a, [[0, 1, 4], [9, 16, 25]], "int64")
    eq(rg.tensor([[0, 1, 2]]) * rg.tensor([[3, 4, 5], [6, 7, 8]]), [[0, 4, 10], [0, 7, 16]])
    eq(a * 2, [[0, 2, 4], [6, 8, 10]])
    eq(a.mul_scalar(2), [[0, 2, 4], [6, 8, 10]], "int64")
    eq(m.flip([0]) * rg.tensor([[10, 20], [30, 40]]), [[30, 80], [30, 80]])
    eq(m.flip([0, 1]) * rg.full((2, 2), 5, dtype="int64"), [[20, 15], [10, 5]])


def test_int_div():
    # Burn's int ``/`` is an int division; retrograd's ``/`` and ``div`` are torch's true
    # division (a float result), so the int quotient is div's rounding_mode="trunc" there.
    # ``div_scalar`` is Burn's name alone and keeps Burn's int result.
    a = rg.tensor(I23)
    eq(
        a.div(rg.tensor([[1, 1, 2], [1, 1, 2]]), rounding_mode="trunc"),
        [[0, 1, 1], [3, 4, 2]],
        "int64",
    )
    eq(
        rg.tensor([[0, 1, 2]]).div(rg.tensor([[1, 1, 2], [3, 4, 5]]), rounding_mode="trunc"),
        [[0, 1, 1], [0, 0, 0]],
    )
    eq(a.div_scalar(2), [[0, 0, 1], [1, 2, 2]], "int64")
    eq(rg.tensor([-3, 3]).div_scalar(2), [-1, 1], "int64")  # toward zero, as Burn's backends
    eq(a / rg.tensor([[1, 1, 2], [1, 1, 2]]), [[0, 1, 1], [3, 4, 2.5]], "float32")
    with pytest.raises(rg.RetrogradError):
        a.div_scalar(0)


def test_int_remainder():
    lhs = rg.tensor([-3, -2, -1, 1, 2, 3])
    eq(lhs.remainder(rg.tensor([2, 3, 1, 2, 1, 3])), [1, 1, 0, 1, 0, 0], "int64")
    eq(rg.tensor([[10, 20, 30]]).remainder(rg.tensor([[7]])), [[3, 6, 2]], "int64")
    eq(lhs.remainder_scalar(2), [1, 0, 1, 1, 0, 1], "int64")


def test_int_abs_sign_cast():
    eq(rg.tensor([[0, -1, 2], [3, 4, -5]]).abs(), [[0, 1, 2], [3, 4, 5]], "int64")
    smallest = np.iinfo(np.int64).min
    eq(rg.tensor(np.array([[smallest]])).abs(), [[smallest]])  # wraps, as Burn's and torch's
    eq(rg.tensor([[-2, -1, 2], [3, 0, -5]]).sign(), [[-1, -1, 1], [1, 0, -1]], "int64")
    eq(rg.tensor([[0, 43, 0], [2, -4, 31]]).bool(), [[N, Y, N], [Y, Y, Y]], "bool")
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).int(), [[1, 0, 1], [0, 0, 1]], "int32")
    eq(rg.tensor([[1, 2, 3], [4, 5, 6]]).cast("float32"), [[1, 2, 3], [4, 5, 6]], "float32")
    eq(rg.tensor([1, 2, 3]).cast("int64"), [1, 2, 3], "int64")
    eq(rg.tensor([1, 2, 3, 4]).flip([0]).float(), [4, 3, 2, 1], "float32")
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).cast("float32"), [[1, 0, 1], [0, 0, 1]], "float32")
    eq(rg.tensor([Y, N, Y, N]).flip([0]).int(), [0, 1, 0, 1], "int32")
    eq(rg.tensor([Y, N, Y, N]).flip([0]).float(), [0, 1, 0, 1], "float32")
    eq(rg.tensor([[Y, N], [N, Y]]).flip([0]).int(), [[0, 1], [1, 0]])


# ---- int/ops: arange, arange_step, aggregation, cumulative, matmul ---------------------------


def test_arange():
    eq(rg.arange(2, 5), [2, 3, 4], "int64")
    eq(rg.arange(-10, -5), [-10, -9, -8, -7, -6])
    eq(rg.arange(-3, 0), [-3, -2, -1])
    eq(rg.arange(-2, 3), [-2, -1, 0, 1, 2])
    eq(rg.arange(0, 9, 1), list(range(9)), "int64")
    eq(rg.arange(0, 3, 2), [0, 2])
    eq(rg.arange(0, 2, 5), [0])
    eq(rg.arange(-3, 3, 2), [-3, -1, 1])
    eq(rg.arange(-5, 1, 5), [-5, 0])
    with pytest.raises(rg.RetrogradError):
        rg.arange(0, 3, 0)


def test_int_aggregation():
    a = rg.tensor(I23)
    eq(a.sum_dim(1), [[3], [12]], "int64")
    eq(a.sum(), 15, "int64")
    eq(rg.tensor([[2, 1, 2], [3, 4, 5]]).prod(), 240, "int64")
    eq(rg.tensor([[2, 0, 2], [3, 4, 5]]).prod(), 0)
    eq(rg.tensor([[2, 1, 2], [3, 4, 5]]).prod_dim(1), [[4], [60]], "int64")
    eq(rg.tensor([[2, 0, 2], [3, 4, 5]]).prod_dim(-1), [[0], [60]])
    eq(rg.zeros((0,), dtype="int64").sum(), 0, "int64")
    eq(rg.zeros((0,), dtype="int64").prod(), 1, "int64")
    # Burn's int mean_dim is an int (sum / n); here a float mean with the same values.
    eq(a.mean_dim(1), [[1], [4]])


def test_int_cumulative():
    t = rg.tensor([[1, 2, 3], [4, 5, 6]])
    eq(t.cumsum(0), [[1, 2, 3], [5, 7, 9]], "int64")
    eq(t.cumsum(1), [[1, 3, 6], [4, 9, 15]], "int64")
    eq(t.cumsum(-1), [[1, 3, 6], [4, 9, 15]])
    eq(t.cumprod(0), [[1, 2, 3], [4, 10, 18]], "int64")
    eq(t.cumprod(1), [[1, 2, 6], [4, 20, 120]])
    eq(t.cumprod(-1), [[1, 2, 6], [4, 20, 120]])
    t = rg.tensor([[3, 1, 4], [2, 5, 1]])
    eq(t.cummin(0), [[3, 1, 4], [2, 1, 1]], "int64")
    eq(t.cummin(1), [[3, 1, 1], [2, 2, 1]])
    eq(t.cummin(-1), [[3, 1, 1], [2, 2, 1]])
    t = rg.tensor([[3, 1, 4], [1, 5, 2]])
    eq(t.cummax(0), [[3, 1, 4], [3, 5, 4]], "int64")
    eq(t.cummax(1), [[3, 3, 4], [1, 5, 5]])
    eq(t.cummax(-1), [[3, 3, 4], [1, 5, 5]])


def test_int_matmul():
    mm = rg.tensor
    eq(
        mm([[1, 7], [2, 3], [1, 5]]).matmul(mm([[4, 7, 5], [2, 3, 5]])),
        [[18, 28, 40], [14, 23, 25], [14, 22, 30]],
        "int64",
    )
    eq(mm([[[1, 7], [2, 3]]]).matmul(mm([[[4, 7], [2, 3]]])), [[[18, 28], [14, 23]]])
    eq(
        mm([[[1, 7], [2, 3]]]).matmul(mm([[[4, 7], [2, 3]], [[2, 5], [6, 3]]])),
        [[[18, 28], [14, 23]], [[44, 26], [22, 19]]],
    )
    eq(
        mm([[[[1, 7], [2, 3]]], [[[2, 5], [6, 3]]]]).matmul(
            mm([[[[9, 8], [1, 4]], [[2, 7], [3, 5]]]])
        ),
        [
            [[[16, 36], [21, 28]], [[23, 42], [13, 29]]],
            [[[23, 36], [57, 60]], [[19, 39], [21, 57]]],
        ],
    )
    eq(mm([[5, 14], [14, 25]]).matmul(mm([[3, 4, 5], [0, 1, 2]])), [[15, 34, 53], [42, 81, 120]])
    eq(
        rg.arange(0, 12)
        .reshape([3, 4])
        .matmul(mm([[0, 1, 2], [4, 5, 6], [8, 9, 10], [12, 13, 14]])),
        [[56, 62, 68], [152, 174, 196], [248, 286, 324]],
    )
    sq = rg.arange(0, 16).reshape([4, 4])
    eq(
        sq.matmul(sq),
        [[56, 62, 68, 74], [152, 174, 196, 218], [248, 286, 324, 362], [344, 398, 452, 506]],
    )
    eq(
        sq.matmul(sq.transpose()),
        [[14, 38, 62, 86], [38, 126, 214, 302], [62, 214, 366, 518], [86, 302, 518, 734]],
    )
    r = rg.arange(0, 32).reshape([4, 8])
    eq(
        r.matmul(r.transpose()),
        [
            [140, 364, 588, 812],
            [364, 1100, 1836, 2572],
            [588, 1836, 3084, 4332],
            [812, 2572, 4332, 6092],
        ],
    )
    eq(mm([[1, 2, 3, 4]]).matmul(mm([[3], [4], [5], [6]])), [[50]])
    eq(
        mm([[3, 3, 3], [4, 4, 4], [5, 5, 5], [6, 6, 6]]).matmul(mm([[1, 2, 3, 4]] * 3)),
        [[9, 18, 27, 36], [12, 24, 36, 48], [15, 30, 45, 60], [18, 36, 54, 72]],
    )
    with pytest.raises(rg.ShapeError):
        mm([[3, 3], [4, 4], [5, 5], [6, 6]]).matmul(mm([[1, 2, 3, 4]] * 3))


# ---- bool/ops: logical, any/all, argwhere/nonzero, comparison, mask, cast --------------------

B1 = [[N, Y, N], [Y, N, Y]]
B2 = [[Y, Y, N], [N, N, Y]]


def test_bool_logical():
    a, b = rg.tensor(B1), rg.tensor(B2)
    eq(a.logical_and(b), [[N, Y, N], [N, N, Y]], "bool")
    eq(a & b, [[N, Y, N], [N, N, Y]])
    eq(a.logical_or(b), [[Y, Y, N], [Y, N, Y]], "bool")
    eq(a | b, [[Y, Y, N], [Y, N, Y]])
    eq(a.logical_xor(b), [[Y, N, N], [Y, N, N]], "bool")
    eq(a ^ b, [[Y, N, N], [Y, N, N]])
    eq(rg.zeros((256,), dtype="bool") | rg.ones((256,), dtype="bool"), [Y] * 256)
    eq(rg.zeros((256,), dtype="bool") & rg.ones((256,), dtype="bool"), [N] * 256)
    rows = rg.tensor([[Y, N, Y], [N, Y, N]])
    eq(rg.tensor([[Y]]) & rows, rows)
    eq(rg.tensor([[N]]) | rows, rows)
    lhs = rg.tensor(
        [[[Y, N, N, N], [Y, N, Y, N], [N, Y, Y, Y]], [[Y, N, N, Y], [N, N, Y, Y], [Y, Y, N, Y]]]
    )
    rhs = rg.tensor([[N, N, Y, Y], [N, Y, Y, N], [N, N, N, Y]])
    eq(lhs & rhs.unsqueeze_dim(0), np.asarray(lhs) & np.asarray(rhs))
    eq(
        lhs & rhs.unsqueeze_dim(0),
        [[[N, N, N, N], [N, N, Y, N], [N, N, N, Y]], [[N, N, N, Y], [N, N, Y, N], [N, N, N, Y]]],
    )
    eq(rg.tensor([[N, Y, Y], [Y, Y, N]]).logical_not(), [[Y, N, N], [N, N, Y]])
    eq(~rg.tensor([[N, Y, Y], [Y, Y, N]]), [[Y, N, N], [N, N, Y]])


def test_bool_any_all():
    eq(rg.tensor([[N, Y, N], [Y, Y, Y]]).all(), N, "bool")
    eq(rg.tensor([[Y, Y, Y], [Y, Y, Y]]).all(), Y)
    eq(rg.tensor([[N, Y, N], [Y, Y, Y]]).all_dim(1), [[N], [Y]], "bool")
    t = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]]) + 1e-6
    eq(t.lower_equal(t).all(), Y)
    eq(rg.tensor([[N, N, N], [Y, Y, N]]).any(), Y)
    eq(rg.tensor([[N, N, N], [N, N, N]]).any(), N)
    eq(rg.tensor([[N, N, N], [Y, Y, N]]).any_dim(1), [[N], [Y]])


def test_bool_argwhere_nonzero():
    # Burn's nonzero is one index tensor per dimension: torch's nonzero(as_tuple=True)
    v = rg.tensor([N, Y, N, Y, Y])
    eq(v.argwhere(), [[1], [3], [4]], "int64")
    m = rg.tensor([[N, N], [N, Y], [Y, Y]])
    eq(m.argwhere(), [[1, 1], [2, 0], [2, 1]])
    c = rg.tensor([[[N, N, N], [N, Y, N]], [[Y, N, Y], [Y, Y, N]]])
    eq(c.argwhere(), [[0, 1, 1], [1, 0, 0], [1, 0, 2], [1, 1, 0], [1, 1, 1]])
    assert [t.tolist() for t in v.nonzero(as_tuple=True)] == [[1, 3, 4]]
    assert [t.tolist() for t in m.nonzero(as_tuple=True)] == [[1, 2, 2], [1, 0, 1]]
    assert [t.tolist() for t in c.nonzero(as_tuple=True)] == [
        [0, 1, 1, 1, 1],
        [1, 0, 0, 1, 1],
        [1, 0, 2, 0, 1],
    ]
    empty = rg.tensor([N] * 5)
    assert [t.shape for t in empty.nonzero(as_tuple=True)] == [(0,)]
    assert empty.argwhere().shape == (0, 1)


def test_bool_comparison_and_mask():
    a = rg.tensor([[N, Y, Y], [Y, N, Y]])
    b = rg.tensor([[N, N, Y], [N, Y, Y]])
    eq(a.equal(b), [[Y, N, Y], [N, N, Y]], "bool")
    eq(a.not_equal(b), [[N, Y, N], [Y, Y, N]], "bool")
    c = rg.tensor([[[Y, N], [N, Y]], [[Y, Y], [N, N]]])
    d = rg.tensor([[Y, N], [N, Y]]).unsqueeze_dim(0)
    eq(c.equal(d), [[[Y, Y], [Y, Y]], [[Y, N], [Y, N]]])
    eq(c.not_equal(d), [[[N, N], [N, N]], [[N, Y], [N, Y]]])
    t = rg.tensor([[Y, N, Y], [N, Y, N]])
    eq(t.equal_elem(False), [[N, Y, N], [Y, N, Y]])
    eq(t.not_equal_elem(True), [[N, Y, N], [Y, N, Y]])
    mask = rg.tensor([[Y, N], [N, Y]])
    eq(
        rg.tensor([[Y, N], [N, N]]).mask_where(mask, rg.tensor([[N, Y], [Y, N]])),
        [[N, N], [N, N]],
        "bool",
    )
    eq(rg.tensor([[N, Y], [N, N]]).mask_fill(mask, True), [[Y, Y], [N, Y]], "bool")


# ---- float/ops: one_hot, cross, unfold, trig --------------------------------------------------


def test_one_hot():
    eq(
        rg.tensor([0.0, 1.0, 4.0]).one_hot(5),
        [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 1]],
        "float32",
    )
    eq(rg.tensor([2.0]).one_hot(10), [[0, 0, 1, 0, 0, 0, 0, 0, 0, 0]], "float32")
    eq(
        rg.tensor([0, 1, 4]).one_hot(5),
        [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 1]],
        "int64",
    )
    for t, classes in [
        (rg.tensor([5.0]), 5),
        (rg.tensor([0.0]), 0),
        (rg.tensor([5]), 5),
        (rg.tensor([2]), 0),
    ]:
        with pytest.raises(rg.RetrogradError):
            t.one_hot(classes)
    with pytest.raises(rg.DTypeError):
        rg.tensor([0.5]).one_hot(2)
    with pytest.raises(rg.DTypeError):  # torch's function keeps to int64 indices
        rg.nn.functional.one_hot(rg.tensor([0.0, 1.0]), 2)


def test_cross():
    a = rg.tensor([[1.0, 3.0, -5.0], [2.0, -1.0, 4.0]])
    b = rg.tensor([[4.0, -2.0, 1.0], [3.0, 5.0, -2.0]])
    eq(a.cross(b, -1), [[-7, -21, -14], [-18, 16, 13]])
    eq(
        a.cross(rg.tensor([[4.0, 3.0], [-2.0, 5.0], [1.0, -2.0]]).permute([1, 0]), -1),
        [[-7, -21, -14], [-18, 16, 13]],
    )
    x = rg.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    y = rg.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    eq(x.cross(y, 0), [[0, 0], [-1, 0], [0, -1]])
    eq(x.unsqueeze_dim(0).cross(y.unsqueeze_dim(0), 1), [[[0, 0], [-1, 0], [0, -1]]])
    lhs = rg.tensor([[1.0], [2.0], [3.0]])
    rhs = arange_f(12, (3, 4)) + 4.0
    eq(lhs.cross(rhs, 0), lhs.permute([1, 0]).cross(rhs.permute([1, 0]), 1).permute([1, 0]))
    p = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    q = rg.tensor([[7.0, 8.0, 9.0], [1.0, 0.0, -1.0]])
    eq(p.cross(q, 1), p.permute([1, 0]).cross(q.permute([1, 0]), 0).permute([1, 0]))
    eq(rg.tensor([[1.0, 3.0, -5.0]]).cross(b, -1), [[-7, -21, -14], [19, -13, -4]])
    eq(
        rg.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]).cross(
            rg.tensor([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]), -1
        ),
        [[[0, 0, 1], [1, 0, 0]]],
    )
    manual = [
        [2 * 9 - 3 * 8, 3 * 7 - 1 * 9, 1 * 8 - 2 * 7],
        [5 * -1 - 6 * 0, 6 * 1 - 4 * -1, 4 * 0 - 5 * 1],
    ]
    eq(p.cross(q, 1), manual)


def test_unfold():
    rg.seed(0)
    x = rg.random((2, 6, 6))
    expected = rg.stack(
        [
            x.slice([slice(None), (0, 3)]).swap_dims(1, 2),
            x.slice([slice(None), (2, 5)]).swap_dims(1, 2),
        ],
        1,
    )
    eq(x.unfold(1, 3, 2), expected)
    signal = rg.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]])
    eq(signal.unfold(1, 4, 1).reshape([9, 4]), [[i + j for j in range(1, 5)] for i in range(9)])


def test_trig():
    pi = math.pi
    approx(rg.tensor([[0.0, pi], [pi / 2, 3 * pi / 2]]).flip([1]).cos(), [[-1, 1], [0, 0]])
    t = rg.tensor([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]])
    approx(t.slice([slice(None), slice(0, 8, 2)]).sin(), [np.sin([0.0, 2.0, 4.0, 6.0])])
    c = (arange_f(12) * 0.5).reshape([1, 2, 6])
    approx(
        c.slice([slice(None), slice(None), slice(0, 6, 2)]).cos(),
        [np.cos([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])],
    )
    x = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    approx(x.cos(), [[1.0, 0.54030, -0.41615], [-0.98999, -0.65364, 0.28366]])
    approx(x.cosh(), [[1.0, 1.5431, 3.7622], [10.0677, 27.3082, 74.2099]])
    approx(x.sin(), [[0.0, 0.841471, 0.909297], [0.141120, -0.756802, -0.958924]])
    approx(x.sinh(), [[0.0, 1.1752, 3.6269], [10.0179, 27.2899, 74.2032]])
    approx(x.tan(), [[0.0, 1.557408, -2.185040], [-0.142547, 1.157821, -3.380515]])
    approx(x.tanh(), [[0.0, 0.761594, 0.964028], [0.995055, 0.999329, 0.999909]])
    u = rg.tensor([[0.0, 0.5, 0.707107], [-0.5, -0.707107, -1.0]])
    approx(u.asin(), [[0.0, 0.523599, 0.785398], [-0.523599, -0.785398, -1.570796]])
    approx(u.acos(), [[1.570796, 1.047198, 0.785398], [2.094395, 2.356194, 3.141593]])
    approx(x.atan(), [[0.0, 0.785398, 1.107149], [1.249046, 1.325818, 1.373401]])
    approx(x.asinh(), [[0.0, 0.881374, 1.443635], [1.818446, 2.094713, 2.312438]])


def test_inverse_hyperbolic_atan2_and_angles():
    approx(
        rg.tensor([[1.0, 1.5, 2.0], [3.0, 4.0, 5.0]]).acosh(),
        [[0.0, 0.962424, 1.316958], [1.762747, 2.063437, 2.292432]],
    )
    approx(
        rg.tensor([[0.0, 0.5, 0.707107], [-0.5, -0.707107, -0.9]]).atanh(),
        [[0.0, 0.549306, 0.881374], [-0.549306, -0.881374, -1.472219]],
    )
    y = rg.tensor([[0.0, 1.0, 1.0], [-1.0, -1.0, 0.0]])
    x = rg.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, -1.0]])
    approx(y.atan2(x), [[0.0, 0.785398, 1.570796], [-0.785398, -1.570796, 3.141593]])
    pi = math.pi
    degrees = [0.0, 22.5, 30.0, 45.0, 60.0, 90.0, 135.0, 180.0, 270.0, 360.0]
    radians = [0.0, pi / 8, pi / 6, pi / 4, pi / 3, pi / 2, 0.75 * pi, pi, 1.5 * pi, 2 * pi]
    approx(rg.tensor(degrees).deg2rad(), radians)
    approx(
        rg.tensor(
            [0.0, pi / 8, pi / 6, pi / 4, pi / 3, pi / 2, pi, 1.5 * pi, 2 * pi, -pi / 3]
        ).rad2deg(),
        [0.0, 22.5, 30.0, 45.0, 60.0, 90.0, 180.0, 270.0, 360.0, -60.0],
    )


# ---- int/ops: bitwise, sort_argsort, topk, arg, maxmin (argmax with keepdim=True: torch's
# argmax drops the dimension, API.md section 10) -----------------------------------------------

BITS_A = [[3, 4, 5], [9, 3, 8]]
BITS_B = [[6, 7, 8], [9, 10, 15]]


def test_int_bitwise():
    a, b = rg.tensor(BITS_A), rg.tensor(BITS_B)
    eq(a.bitwise_and(b), [[2, 4, 0], [9, 2, 8]], "int64")
    eq(rg.tensor([13, 7]).bitwise_and(rg.tensor([11, 3])), [9, 3])
    eq(a.bitwise_and(5), [[1, 4, 5], [1, 1, 0]], "int64")  # Burn's bitwise_and_scalar
    eq(a.bitwise_not(), [[-4, -5, -6], [-10, -4, -9]], "int64")
    eq(a.bitwise_or(5), [[7, 5, 5], [13, 7, 13]])
    eq(a.bitwise_or(b), [[7, 7, 13], [9, 11, 15]])
    eq(rg.tensor([13, 7]).bitwise_or(rg.tensor([11, 3])), [15, 7])
    eq(a.bitwise_xor(5), [[6, 1, 0], [12, 6, 13]])
    eq(a.bitwise_xor(b), [[5, 3, 13], [0, 9, 7]])
    eq(rg.tensor([13, 7]).bitwise_xor(rg.tensor([11, 3])), [6, 4])
    shifts = rg.tensor([[1, 2, 3], [4, 5, 6]])
    eq(a.bitwise_left_shift(shifts), [[6, 16, 40], [144, 96, 512]], "int64")
    eq(a.bitwise_left_shift(2), [[12, 16, 20], [36, 12, 32]])
    eq(a.bitwise_right_shift(shifts), [[1, 1, 0], [0, 0, 0]])
    eq(a.bitwise_right_shift(2), [[0, 1, 1], [2, 0, 2]])


INT_3D = [[[1, 4, 7], [2, 5, 6]], [[3, 0, 9], [8, 2, 8]]]
INT_3D_B = [[[1, 4, 7], [2, 5, 6]], [[3, 0, 9], [7, 2, 8]]]


def test_int_sort():
    v = rg.tensor([1, 4, 7, 2, 5, 6, 3, 0, 9, 8, 2, 8, -10, 42, 1000])
    eq(v.sort(0), [-10, 0, 1, 2, 2, 3, 4, 5, 6, 7, 8, 8, 9, 42, 1000], "int64")
    w = rg.tensor([1, 4, 7, 2, 5, 6, 3, 0, 9, 8, -10, 42, 1000])
    eq(w.argsort(0), [10, 7, 0, 3, 6, 1, 4, 5, 2, 9, 8, 11, 12], "int64")
    values, indices = w.sort_with_indices(0, descending=True)
    eq(values, [1000, 42, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -10])
    eq(indices, [12, 11, 8, 9, 2, 5, 4, 1, 6, 3, 0, 7, 10])
    values, indices = rg.tensor(INT_3D).sort_with_indices(1, descending=True)
    eq(values, [[[2, 5, 7], [1, 4, 6]], [[8, 2, 9], [3, 0, 8]]])
    eq(indices, [[[1, 1, 0], [0, 0, 1]], [[1, 1, 0], [0, 0, 1]]])
    t = rg.tensor(INT_3D)
    eq(t.sort(0), [[[1, 0, 7], [2, 2, 6]], [[3, 4, 9], [8, 5, 8]]])
    eq(t.sort(1), [[[1, 4, 6], [2, 5, 7]], [[3, 0, 8], [8, 2, 9]]])
    eq(t.sort(2), [[[1, 4, 7], [2, 5, 6]], [[0, 3, 9], [2, 8, 8]]])
    b = rg.tensor(INT_3D_B)
    expected = {
        0: (
            [[[1, 0, 7], [2, 2, 6]], [[3, 4, 9], [7, 5, 8]]],
            [[[0, 1, 0], [0, 1, 0]], [[1, 0, 1], [1, 0, 1]]],
        ),
        1: (
            [[[1, 4, 6], [2, 5, 7]], [[3, 0, 8], [7, 2, 9]]],
            [[[0, 0, 1], [1, 1, 0]], [[0, 0, 1], [1, 1, 0]]],
        ),
        2: (
            [[[1, 4, 7], [2, 5, 6]], [[0, 3, 9], [2, 7, 8]]],
            [[[0, 1, 2], [0, 1, 2]], [[1, 0, 2], [1, 0, 2]]],
        ),
    }
    for d, (vals, idx) in expected.items():
        values, indices = b.sort_with_indices(d)
        eq(values, vals)
        eq(indices, idx)
        eq(b.argsort(d), idx)
    eq(rg.tensor([1, 2, 3, 4, 5]).sort(0, descending=True), [5, 4, 3, 2, 1])
    m = rg.tensor([[3, 1, 5], [2, 6, 4]])
    eq(m.sort(-1, descending=True), [[5, 3, 1], [6, 4, 2]])
    values, indices = m.sort_with_indices(-2, descending=True)
    eq(values, [[3, 6, 5], [2, 1, 4]])
    eq(indices, [[0, 1, 0], [1, 0, 1]])
    eq(m.argsort(-1, descending=True), [[2, 0, 1], [1, 2, 0]])


def test_int_topk():
    v = rg.tensor([1, 2, 3, 4, 5])
    values, indices = v.topk_with_indices(3, 0)
    eq(values, [5, 4, 3], "int64")
    eq(indices, [4, 3, 2], "int64")
    eq(v.topk(3, 0), [5, 4, 3])
    approx(rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).topk(3, 0), [5, 4, 3])
    eq(rg.tensor(INT_3D).topk(2, 2), [[[7, 4], [6, 5]], [[9, 3], [8, 8]]])
    approx(rg.tensor(INT_3D).float().topk(2, 2), [[[7, 4], [6, 5]], [[9, 3], [8, 8]]])
    # Burn's argtopk is the indices of topk_with_indices
    eq(v.topk_with_indices(3, 0)[1], [4, 3, 2])
    t = rg.tensor([[[1, 4, 7], [2, 5, 6]], [[3, 0, 9], [8, 2, 7]]])
    eq(t.topk_with_indices(2, 2)[1], [[[2, 1], [2, 1]], [[2, 0], [0, 2]]])
    values, indices = t.topk_with_indices(2, -1)
    eq(values, [[[7, 4], [6, 5]], [[9, 3], [8, 7]]])
    eq(indices, [[[2, 1], [2, 1]], [[2, 0], [0, 2]]])


def test_int_arg_and_maxmin():
    eq(rg.tensor([[10, 11, 2], [3, 4, 5]]).argmax(0, keepdim=True), [[0, 0, 1]], "int64")
    eq(rg.tensor([[10, 11, 2], [30, 4, 5]]).argmin(0, keepdim=True), [[0, 1, 0]], "int64")
    t = rg.tensor(I23)
    values, indices = t.max_dim_with_indices(0)
    eq(values, [[3, 4, 5]], "int64")
    eq(indices, [[1, 1, 1]], "int64")
    values, indices = t.max_dim_with_indices(1)
    eq(values, [[2], [5]])
    eq(indices, [[2], [2]])
    values, indices = t.min_dim_with_indices(0)
    eq(values, [[0, 1, 2]])
    eq(indices, [[0, 0, 0]])
    values, indices = t.min_dim_with_indices(1)
    eq(values, [[0], [3]])
    eq(indices, [[0], [0]])
    ties = rg.tensor([[1, 3, 3], [2, 2, 0]])
    values, indices = ties.max_dim_with_indices(1)
    eq(values, [[3], [2]])
    eq(indices, [[1], [0]])
    values, indices = ties.min_dim_with_indices(1)
    eq(values, [[1], [0]])
    eq(indices, [[0], [2]])
    c = rg.tensor([[[1, 4, 7], [2, 5, 6]], [[3, 0, 9], [8, 2, 7]]])
    values, indices = c.max_dim_with_indices(2)
    eq(values, [[[7], [6]], [[9], [8]]])
    eq(indices, [[[2], [2]], [[2], [0]]])
    values, indices = c.min_dim_with_indices(2)
    eq(values, [[[1], [2]], [[0], [2]]])
    eq(indices, [[[0], [0]], [[1], [1]]])


# ---- take.rs (Burn's take(dim, indices); take(index) stays torch's flat form) ----------------


def test_take():
    idx = rg.tensor
    eq(rg.tensor([0.0, 1.0, 2.0]).take(0, idx([1, 1, 0, 1, 2])), [1, 1, 0, 1, 2])
    m = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(m.take(0, idx([1, 0, 1, 1])), [[3, 4, 5], [0, 1, 2], [3, 4, 5], [3, 4, 5]])
    eq(m.take(1, idx([2, 0, 1])), [[2, 0, 1], [5, 3, 4]])
    t = arange_f(12, (3, 4)) + 1
    eq(t.take(0, idx([2, 0, 1, 1])), t.select(0, idx([2, 0, 1, 1])))
    eq(
        t.take(0, idx([[0, 2], [1, 0]])),
        [[[1, 2, 3, 4], [9, 10, 11, 12]], [[5, 6, 7, 8], [1, 2, 3, 4]]],
    )
    w = arange_f(8, (2, 4)) + 1
    eq(w.take(1, idx([[0, 3], [2, 1]])), [[[1, 4], [3, 2]], [[5, 8], [7, 6]]])
    c = arange_f(12, (2, 3, 2)) + 1
    eq(
        c.take(1, idx([[0, 2], [1, 0]])),
        [[[[1, 2], [5, 6]], [[3, 4], [1, 2]]], [[[7, 8], [11, 12]], [[9, 10], [7, 8]]]],
    )
    s = arange_f(6, (2, 3)) + 1
    eq(
        s.take(1, idx([[[0, 2], [1, 0]], [[2, 1], [0, 2]]])),
        [[[[1, 3], [2, 1]], [[3, 2], [1, 3]]], [[[4, 6], [5, 4]], [[6, 5], [4, 6]]]],
    )
    eq(s.take(0, idx([1])), [[4, 5, 6]])
    eq(s.take(-1, idx([2, 0, 1])), s.take(1, idx([2, 0, 1])))
    for dim in (10, -3):
        with pytest.raises(rg.ShapeError):
            m.take(dim, idx([1, 0]))
    eq(m.take(idx([0, 5])), [0, 5])  # torch's flat take is unchanged
    b = rg.tensor([[Y, N], [N, Y]])
    eq(b.take(0, idx([1, 0])), [[N, Y], [Y, N]], "bool")
    b3 = rg.tensor([[Y, N, Y], [N, Y, N], [Y, Y, N]])
    eq(b3.take(0, idx([[0, 2], [1, 0]])), [[[Y, N, Y], [Y, Y, N]], [[N, Y, N], [Y, N, Y]]])


def test_take_gradient():
    x = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype="float64").require_grad()
    out = x.take(1, rg.tensor([[0, 2], [2, 2]]))
    assert out.shape == (2, 2, 2)
    eq(x.grad(out.sum().backward()), [[1, 0, 3], [1, 0, 3]])


# ---- bool/ops: gather_scatter, select, unfold, repeat, expand, cat/stack -----------------------


def test_bool_gather_scatter_select():
    t = rg.tensor([Y, N, N])
    eq(t.scatter(0, rg.tensor([1, 0, 2]), rg.tensor([N, Y, Y]), "add"), [Y, N, Y], "bool")
    eq(t.gather(0, rg.tensor([1, 1, 0, 1, 2])), [N, N, Y, N, N], "bool")
    eq(rg.tensor([Y, N, Y]).select(0, rg.tensor([0, 2, 1, 0])), [Y, Y, N, Y], "bool")
    eq(rg.tensor([[Y, N, Y], [N, Y, N]]).select(0, rg.tensor([1, 0])), [[N, Y, N], [Y, N, Y]])
    add = "add"
    eq(rg.tensor([Y, N, Y]).select_assign(0, rg.tensor([0, 2]), rg.tensor([N, Y]), add), [Y, N, Y])
    eq(rg.tensor([N, Y]).select_assign(0, rg.tensor([0, 0]), rg.tensor([Y, N]), add), [Y, Y])
    eq(rg.tensor([N]).select_assign(0, rg.tensor([0]), rg.tensor([Y]), add), [Y])
    eq(rg.tensor([Y, N]).select_assign(0, rg.tensor([0, 0, 0]), rg.tensor([Y, Y, Y]), add), [Y, N])


def test_bool_shape_ops():
    rg.seed(1)
    x = rg.random((2, 6, 6)).greater_elem(0.5)
    expected = rg.stack(
        [
            x.slice([slice(None), (0, 3)]).swap_dims(1, 2),
            x.slice([slice(None), (2, 5)]).swap_dims(1, 2),
        ],
        1,
    )
    eq(x.unfold(1, 3, 2), expected, "bool")
    data = np.array([[[N, Y], [Y, N]], [[Y, Y], [N, N]]])
    eq(rg.tensor(data).repeat([2, 3, 2]), np.tile(data, (2, 3, 2)), "bool")
    eq(rg.tensor([N, Y, N]).expand([3, 3]), [[N, Y, N]] * 3, "bool")
    eq(rg.tensor([Y, N, N]).flip([0]).expand([2, 3]), [[N, N, Y]] * 2)
    a, b = rg.tensor([[Y, N]]), rg.tensor([[N, N]])
    eq(rg.cat([a, b], 0), [[Y, N], [N, N]], "bool")
    eq(rg.stack([a, b], 0), [[[Y, N]], [[N, N]]], "bool")
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).transpose(), [[Y, N], [N, N], [Y, Y]])
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).reshape([3, 2]), [[Y, N], [Y, N], [N, Y]])
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).flip([1]), [[Y, N, Y], [Y, N, N]])
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).permute([1, 0]), [[Y, N], [N, N], [Y, Y]])
    eq(rg.tensor([[Y, N, Y], [N, N, Y]]).movedim(0, 1), [[Y, N], [N, N], [Y, Y]])
    eq(rg.tensor([[Y, N], [N, Y]]).repeat_dim(1, 2), [[Y, N, Y, N], [N, Y, N, Y]])


# ---- int/ops: comparison, mask, gather_scatter, slice_assign, cat, chunk, expand, flip, full,
# init, create_like ----------------------------------------------------------------------------


def test_int_comparison():
    a, b = rg.tensor(I23), rg.tensor([[1, 1, 1], [4, 3, 5]])
    eq(a.equal(b), [[N, Y, N], [N, N, Y]], "bool")
    eq(a.not_equal(b), [[Y, N, Y], [Y, Y, N]], "bool")
    c = rg.tensor([[0, 1, 2], [3, 2, 5]])
    eq(c.equal_elem(2), [[N, N, Y], [N, Y, N]])
    eq(c.not_equal_elem(2), [[Y, Y, N], [Y, N, Y]])
    eq(a.greater_elem(4), [[N, N, N], [N, N, Y]])
    eq(a.greater_equal_elem(4), [[N, N, N], [N, Y, Y]])
    eq(a.lower_elem(4), [[Y, Y, Y], [Y, N, N]])
    eq(a.lower_equal_elem(4), [[Y, Y, Y], [Y, Y, N]])
    d = rg.tensor([[1, 1, 1], [4, 3, 50]])
    eq(a.greater(d), [[N, N, Y], [N, Y, N]])
    eq(a.greater_equal(d), [[N, Y, Y], [N, Y, N]])
    eq(a.lower(d), [[Y, N, N], [Y, N, Y]])
    eq(a.lower_equal(d), [[Y, Y, N], [Y, N, Y]])


def test_int_mask_gather_scatter():
    base = rg.arange(2, 6).reshape([1, 2, 2])
    mask = rg.tensor([[[Y, N], [N, Y]], [[N, Y], [Y, N]], [[N, N], [N, N]], [[Y, Y], [Y, Y]]])
    eq(
        base.mask_where(mask, rg.ones((4, 2, 2), dtype="int64")),
        [[[1, 3], [4, 1]], [[2, 1], [1, 5]], [[2, 3], [4, 5]], [[1, 1], [1, 1]]],
        "int64",
    )
    m = rg.tensor([[1, 7], [2, 3]])
    diag = rg.tensor([[Y, N], [N, Y]])
    eq(m.mask_where(diag, rg.tensor([[8, 9], [10, 11]])), [[8, 7], [2, 11]], "int64")
    eq(m.mask_fill(diag, 9), [[9, 7], [2, 9]], "int64")
    eq(
        rg.tensor([10, 20, 30, 40]).flip([0]).mask_fill(rg.tensor([Y, N, Y, N]), -1),
        [-1, 30, -1, 10],
    )
    eq(rg.tensor([5, 6, 7]).gather(0, rg.tensor([1, 1, 0, 1, 2])), [6, 6, 5, 6, 7], "int64")
    x = rg.arange(0, 24).reshape([3, 4, 2])
    idx = rg.tensor([0, 2, 1, 3])
    expected = [
        [[0, 1], [4, 5], [2, 3], [6, 7]],
        [[8, 9], [12, 13], [10, 11], [14, 15]],
        [[16, 17], [20, 21], [18, 19], [22, 23]],
    ]
    perm = idx.reshape([1, 1, 4]).repeat_dim(0, 3).repeat_dim(1, 2)
    eq(x.permute([0, 2, 1]).gather(2, perm).permute([0, 2, 1]), expected)
    eq(x.gather(1, idx.reshape([1, 4, 1]).repeat_dim(0, 3).repeat_dim(2, 2)), expected)
    eq(
        rg.zeros((3,), dtype="int64").scatter(0, rg.tensor([1, 0, 2]), rg.tensor([5, 4, 3]), "add"),
        [4, 5, 3],
        "int64",
    )


def test_int_slice_assign_cat_chunk():
    t = rg.tensor([1, 2, 3, 4, 5])
    t1 = t.slice_assign([(0, 3)], rg.tensor([10, 20, 30]))
    t2 = t + 2
    eq(t1, [10, 20, 30, 4, 5], "int64")
    eq(t2, [3, 4, 5, 6, 7])
    m = rg.arange(1, 13).reshape([3, 4])
    eq(
        m.slice_assign([slice(0, 3, 2)], rg.tensor([[100, 101, 102, 103], [200, 201, 202, 203]])),
        [[100, 101, 102, 103], [5, 6, 7, 8], [200, 201, 202, 203]],
    )
    rows = rg.tensor([[40, 30, 20, 10], [80, 70, 60, 50], [120, 110, 100, 90]])
    eq(
        m.slice_assign([slice(None), slice(0, 4, -1)], rows),
        [[10, 20, 30, 40], [50, 60, 70, 80], [90, 100, 110, 120]],
    )
    eq(t.slice_assign([(3, 3)], rg.zeros((0,), dtype="int64")), [1, 2, 3, 4, 5])
    eq(rg.cat([rg.tensor([[1, 2, 3]]), rg.tensor([[4, 5, 6]])], 0), [[1, 2, 3], [4, 5, 6]], "int64")
    eq(rg.cat([rg.tensor([[1, 2, 3]]), rg.zeros((1, 0), dtype="int64")], 1), [[1, 2, 3]])
    assert [p.tolist() for p in rg.tensor([[0, 1, 2, 3]]).chunk(2, 1)] == [[[0, 1]], [[2, 3]]]


def test_int_expand_flip_creation():
    v = rg.tensor([1, 2, 3])
    eq(v.expand([3, 3]), [[1, 2, 3]] * 3, "int64")
    eq(v.expand([2, -1]), [[1, 2, 3]] * 2)
    with pytest.raises(rg.ShapeError):
        v.expand([-1, 3])
    eq(v.expand([2, 3]) + 1, [[2, 3, 4]] * 2)
    eq(rg.tensor([[1, 2], [3, 4]]).transpose().expand([3, 2, 2]), [[[1, 3], [2, 4]]] * 3)
    eq(v.flip([0]).expand([2, 3]), [[3, 2, 1]] * 2)
    eq(rg.tensor([0, 1, 2, 3, 4]).narrow(0, 1, 3).expand([2, 3]), [[1, 2, 3]] * 2)
    c = rg.arange(0, 24).reshape([2, 3, 4])
    eq(c.flip([0, 2]), np.arange(24).reshape(2, 3, 4)[::-1, :, ::-1], "int64")
    eq(c.flip([]), c)
    eq(rg.full((2, 2), 2, dtype="int64"), [[2, 2], [2, 2]], "int64")
    eq(rg.zeros((2, 2), dtype="int64"), [[0, 0], [0, 0]], "int64")
    eq(rg.ones((2, 2), dtype="int64"), [[1, 1], [1, 1]], "int64")
    source = rg.arange(0, 12).reshape([2, 2, 3])
    for made, value in ((source.zeros_like(), 0), (source.ones_like(), 1)):
        assert made.shape == source.shape and made.dtype == "int64"
        eq(made, np.full((2, 2, 3), value))


# ---- int/ops: select, slice, stack, unfold, reshape, transpose, permute, movedim, repeat_dim,
# repeat (repeat's surplus count adds a dimension, torch's meaning: see the float port) ---------


def test_int_select_slice_stack():
    eq(rg.tensor([5, 6, 7]).select(0, rg.tensor([1, 1, 0, 1, 2])), [6, 6, 5, 6, 7], "int64")
    base = rg.tensor([[10, 20], [30, 40], [50, 60]])
    eq(
        base.select_assign(0, rg.tensor([2, 0]), rg.tensor([[5, 70], [80, 1]]), "assign"),
        [[80, 1], [30, 40], [5, 70]],
        "int64",
    )
    base = rg.tensor([[10, 20, 30], [40, 50, 60]])
    eq(
        base.select_assign(1, rg.tensor([2, 0]), rg.tensor([[7, 8], [9, 10]]), "assign"),
        [[8, 20, 7], [10, 50, 9]],
    )
    t = rg.tensor([1, 2, 3, 4, 5])
    eq(t.slice([(0, 3)]) + t.slice([(2, 5)]), [4, 6, 8], "int64")
    m = rg.arange(1, 13).reshape([3, 4])
    eq(m.slice([slice(0, 3, 2)]), [[1, 2, 3, 4], [9, 10, 11, 12]])
    eq(m.slice([slice(None), slice(0, 4, -1)]), [[4, 3, 2, 1], [8, 7, 6, 5], [12, 11, 10, 9]])
    eq(rg.stack([rg.tensor([[1, 2, 3]]), rg.tensor([[4, 5, 6]])], 0), [[[1, 2, 3]], [[4, 5, 6]]])
    ones = rg.arange(1, 25).reshape([4, 6])
    mixed = rg.stack([ones, rg.zeros((4, 6), dtype="int64")], 2).reshape([4, 12])
    expected = np.zeros((4, 12), dtype=np.int64)
    expected[:, ::2] = np.arange(1, 25).reshape(4, 6)
    eq(mixed, expected, "int64")


def test_int_shape_ops():
    rg.seed(2)
    x = (rg.random((2, 6, 6)) * 100).int()
    expected = rg.stack(
        [
            x.slice([slice(None), (0, 3)]).swap_dims(1, 2),
            x.slice([slice(None), (2, 5)]).swap_dims(1, 2),
        ],
        1,
    )
    eq(x.unfold(1, 3, 2), expected, "int32")
    eq(
        rg.zeros((8, 4, 8), dtype="int64") + rg.arange(0, 32).reshape([1, 4, 8]),
        np.broadcast_to(np.arange(32).reshape(1, 4, 8), (8, 4, 8)),
    )
    c = rg.tensor([[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]])
    eq(c.transpose(), [[[0, 3], [1, 4], [2, 5]], [[6, 9], [7, 10], [8, 11]]], "int64")
    eq(c.swap_dims(0, 2), [[[0, 6], [3, 9]], [[1, 7], [4, 10]], [[2, 8], [5, 11]]])
    r = rg.arange(0, 24).reshape([2, 3, 4])
    eq(r.permute([2, 1, 0]), np.arange(24).reshape(2, 3, 4).transpose(2, 1, 0), "int64")
    eq(r.permute([-1, 1, 0]), r.permute([2, 1, 0]))
    eq(r.permute([0, 1, 2]), r)
    for dims in ([0, 0, 1], [3, 0, 1]):
        with pytest.raises(rg.ShapeError):
            r.permute(dims)
    eq(r.movedim(0, 2), np.moveaxis(np.arange(24).reshape(2, 3, 4), 0, 2), "int64")
    eq(r.movedim(0, -1), r.movedim(0, 2))
    eq(r.movedim([0, 1], [1, 0]), np.arange(24).reshape(2, 3, 4).swapaxes(0, 1))
    eq(rg.tensor([[0, 1, 2]]).repeat_dim(0, 4), [[0, 1, 2]] * 4, "int64")
    data = np.arange(1, 17).reshape(4, 2, 2)
    eq(rg.tensor(data).repeat_dim(2, 3), np.tile(data, (1, 1, 3)), "int64")
    eq(rg.tensor(data).repeat([2, 3, 2]), np.tile(data, (2, 3, 2)), "int64")
    eq(rg.tensor([[0, 1, 2]]).repeat([4, 1, 1]), [[[0, 1, 2]]] * 4)


# ---- int/ops: all, any, mask_select, take, gather_scatter_nd; bool/ops: create_like, full, init,
# mask_select --------------------------------------------------------------------------------


def test_int_all_any_mask_select_take():
    t = rg.tensor([[0, 1, 0], [1, -1, 1]])
    eq(t.all(), N, "bool")
    eq(rg.ones((2, 3), dtype="int64").all(), Y)
    eq(t.all_dim(1), [[N], [Y]])
    eq(rg.tensor([[0, 0, 0], [1, -1, 0]]).any(), Y)
    eq(rg.zeros((2, 3), dtype="int64").any(), N)
    eq(rg.tensor([[0, 0, 0], [1, -1, 0]]).any_dim(1), [[N], [Y]])
    eq(rg.tensor([10, 20, 30, 40]).mask_select(rg.tensor([Y, N, N, Y])), [10, 40], "int64")
    eq(rg.tensor([[1, 2, 3], [4, 5, 6]]).mask_select(rg.tensor([[N, Y, N], [Y, N, Y]])), [2, 4, 6])
    eq(
        rg.tensor([[10, 20, 30], [40, 50, 60]]).take(0, rg.tensor([1, 0])),
        [[40, 50, 60], [10, 20, 30]],
        "int64",
    )
    eq(
        rg.tensor([[10, 20, 30], [40, 50, 60], [70, 80, 90]]).take(0, rg.tensor([[0, 2], [2, 1]])),
        [[[10, 20, 30], [70, 80, 90]], [[70, 80, 90], [40, 50, 60]]],
    )


def test_int_gather_scatter_nd():
    idx = rg.tensor
    data = rg.tensor([[10, 20, 30], [40, 50, 60]])
    eq(data.gather_nd(idx([[0, 1], [1, 2]])), [20, 60], "int64")
    eq(data.gather_nd(idx([[1], [0]])), [[40, 50, 60], [10, 20, 30]])
    base = rg.tensor([[1, 2, 3], [4, 5, 6]])
    eq(
        base.scatter_nd(idx([[0, 0], [1, 2]]), rg.tensor([10, 20]), "add"),
        [[11, 2, 3], [4, 5, 26]],
        "int64",
    )
    eq(
        rg.tensor([[2, 3], [4, 5]]).scatter_nd(idx([[0, 1], [1, 0]]), rg.tensor([10, 3]), "mul"),
        [[2, 30], [12, 5]],
    )
    eq(
        base.scatter_nd(idx([[0, 1], [1, 2]]), rg.tensor([99, 88]), "assign"),
        [[1, 99, 3], [4, 5, 88]],
    )
    mm = rg.tensor([[5, 10], [15, 20]])
    eq(mm.scatter_nd(idx([[0, 0], [1, 1]]), rg.tensor([3, 25]), "min"), [[3, 10], [15, 20]])
    eq(mm.scatter_nd(idx([[0, 0], [1, 1]]), rg.tensor([3, 25]), "max"), [[5, 10], [15, 25]])
    eq(rg.zeros((2, 3), dtype="int64").scatter_nd(idx([[0], [1]]), data, "assign"), data)
    eq(rg.tensor([1, 2, 3]).scatter_nd(idx([[0]]), rg.tensor([99]), "assign"), [99, 2, 3])


def test_bool_creation_and_mask_select():
    source = rg.tensor([[[N, Y, N], [Y, Y, Y]], [[N, N, N], [Y, Y, N]]])
    for made, value in ((source.zeros_like(), N), (source.ones_like(), Y)):
        assert made.shape == source.shape and made.dtype == "bool"
        eq(made, np.full((2, 2, 3), value))
    eq(rg.full((2, 2), True), [[Y, Y], [Y, Y]], "bool")
    eq(rg.full((2, 2), False), [[N, N], [N, N]], "bool")
    eq(rg.zeros((2, 2), dtype="bool"), [[N, N], [N, N]], "bool")
    eq(rg.ones((2, 2), dtype="bool"), [[Y, Y], [Y, Y]], "bool")
    eq(rg.tensor(np.array([True, False, True])), [Y, N, Y], "bool")
    eq(rg.tensor([Y, N, Y]).mask_select(rg.tensor([Y, Y, N])), [Y, N], "bool")
