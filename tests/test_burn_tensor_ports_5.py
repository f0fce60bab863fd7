"""The rest of Burn's float op tests (``crates/burn-backend-tests/tests/tensor/float/{ops,stats}``,
tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747): matmul, the unary math ops,
hypot, prod, fmod, var, eye, ported against API.md under every checkpointing strategy on the
chosen inner backend (expected values are Burn's)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx, arange_f, eq

E = math.e
nan, inf = math.nan, math.inf

# ---- matmul.rs --------------------------------------------------------------------------------


def test_matmul():
    t = rg.tensor
    eq(
        t([[1.0, 7.0], [2.0, 3.0], [1.0, 5.0]]).matmul(t([[4.0, 7.0, 5.0], [2.0, 3.0, 5.0]])),
        [[18, 28, 40], [14, 23, 25], [14, 22, 30]],
        "float32",
    )
    eq(t([[[1.0, 7.0], [2.0, 3.0]]]).matmul(t([[[4.0, 7.0], [2.0, 3.0]]])), [[[18, 28], [14, 23]]])
    eq(
        t([[[1.0, 7.0], [2.0, 3.0]]]).matmul(
            t([[[4.0, 7.0], [2.0, 3.0]], [[2.0, 5.0], [6.0, 3.0]]])
        ),
        [[[18, 28], [14, 23]], [[44, 26], [22, 19]]],
    )
    eq(
        t([[[[1.0, 7.0], [2.0, 3.0]]], [[[2.0, 5.0], [6.0, 3.0]]]]).matmul(
            t([[[[9.0, 8.0], [1.0, 4.0]], [[2.0, 7.0], [3.0, 5.0]]]])
        ),
        [
            [[[16, 36], [21, 28]], [[23, 42], [13, 29]]],
            [[[23, 36], [57, 60]], [[19, 39], [21, 57]]],
        ],
    )
    eq(
        t([[5.0, 14.0], [14.0, 50.0]]).matmul(t([[3.0, 4.0, 5.0], [0.0, 1.0, 2.0]])),
        [[15, 34, 53], [42, 106, 170]],
    )
    eq(
        arange_f(12, (3, 4)).matmul(
            t([[0.0, 1.0, 2.0], [4.0, 5.0, 6.0], [8.0, 9.0, 10.0], [12.0, 13.0, 14.0]])
        ),
        [[56, 62, 68], [152, 174, 196], [248, 286, 324]],
    )
    rows = t([[[1.0, 7.0]], [[2.0, 3.0]], [[1.0, 5.0]]])
    eq(
        rows.matmul(t([[[4.0, 7.0, 5.0], [2.0, 3.0, 5.0]]])),
        [[[18, 28, 40]], [[14, 23, 25]], [[14, 22, 30]]],
    )
    eq(
        rows.matmul(
            t(
                [
                    [[1.0, 4.0, 5.0], [3.0, 5.0, 6.0]],
                    [[8.0, 2.0, 3.0], [0.0, 2.0, 4.0]],
                    [[4.0, 7.0, 5.0], [2.0, 3.0, 5.0]],
                ]
            )
        ),
        [[[22, 39, 47]], [[16, 10, 18]], [[14, 22, 30]]],
    )
    sq = arange_f(16, (4, 4))
    approx(
        sq.matmul(sq),
        [[56, 62, 68, 74], [152, 174, 196, 218], [248, 286, 324, 362], [344, 398, 452, 506]],
    )
    approx(
        sq.matmul(sq.transpose()),
        [[14, 38, 62, 86], [38, 126, 214, 302], [62, 214, 366, 518], [86, 302, 518, 734]],
    )
    r = arange_f(32, (4, 8))
    approx(
        r.matmul(r.transpose()),
        [
            [140, 364, 588, 812],
            [364, 1100, 1836, 2572],
            [588, 1836, 3084, 4332],
            [812, 2572, 4332, 6092],
        ],
    )
    eq(t([[1.0, 2.0, 3.0, 4.0]]).matmul(t([[3.0], [4.0], [5.0], [6.0]])), [[50]])
    eq(
        t([[3.0] * 3, [4.0] * 3, [5.0] * 3, [6.0] * 3]).matmul(t([[1.0, 2.0, 3.0, 4.0]] * 3)),
        [[9, 18, 27, 36], [12, 24, 36, 48], [15, 30, 45, 60], [18, 36, 54, 72]],
    )
    with pytest.raises(rg.ShapeError):
        t([[3.0, 3.0], [4.0, 4.0], [5.0, 5.0], [6.0, 6.0]]).matmul(t([[1.0, 2.0, 3.0, 4.0]] * 3))


def test_matmul_vecmat_transposed_fused():
    weight = arange_f(64, (1, 2, 1, 32)).transpose()
    signal = arange_f(192, (1, 2, 3, 32))
    eq(signal.matmul(weight) + 5, [[[[10421], [26293], [42165]], [[172213], [220853], [269493]]]])


def test_matmul_transposed_operands():
    t = rg.tensor
    lhs = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(lhs.transpose().matmul(t([[1.0, 0.0], [0.0, 1.0]])), [[1, 4], [2, 5], [3, 6]])
    rhs = t([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    eq(t([[1.0, 0.0], [0.0, 1.0]]).matmul(rhs.transpose()), [[1, 3, 5], [2, 4, 6]])
    eq(lhs.transpose().matmul(rhs.transpose()), [[9, 19, 29], [12, 26, 40], [15, 33, 51]])
    q = arange_f(12, (2, 2, 3)) + 1
    k = t([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]])
    eq(q.matmul(k.swap_dims(1, 2)), [[[1, 2], [4, 5]], [[24, 48], [33, 66]]])
    b = t([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 2.0]]])
    eq(q.swap_dims(1, 2).matmul(b), [[[1, 4], [2, 5], [3, 6]], [[14, 20], [16, 22], [18, 24]]])
    a = arange_f(12, (2, 3, 2)) + 1
    eq(
        a.swap_dims(1, 2).matmul(q.swap_dims(1, 2)),
        [[[22, 49], [28, 64]], [[220, 301], [244, 334]]],
    )
    lhs3 = t([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]])
    rhs3 = t(
        [
            [[1.0, 0.0], [0.0, 1.0]],
            [[2.0, 0.0], [0.0, 2.0]],
            [[1.0, 1.0], [1.0, 1.0]],
            [[0.0, 1.0], [1.0, 0.0]],
        ]
    )
    eq(
        lhs3.swap_dims(1, 2).matmul(rhs3),
        [
            [[1, 4], [2, 5], [3, 6]],
            [[2, 8], [4, 10], [6, 12]],
            [[5, 5], [7, 7], [9, 9]],
            [[4, 1], [5, 2], [6, 3]],
        ],
    )


# ---- abs, ceil, floor, exp, log, log1p, sqrt, square, recip, neg, erf, hypot, prod ------------

X23 = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
ROUNDING = [[24.0423, 87.9478, 76.1838], [59.6929, 43.8169, 94.8826]]


def test_unary_math():
    eq(rg.tensor([1.0, -2.0, 3.0, -4.0]).flip([0]).abs(), [4, 3, 2, 1])
    eq(rg.tensor([[0.0, -1.0, 2.0], [3.0, 4.0, -5.0]]).abs(), [[0, 1, 2], [3, 4, 5]])
    approx(rg.tensor(ROUNDING).ceil(), [[25, 88, 77], [60, 44, 95]])
    approx(rg.tensor(ROUNDING).floor(), [[24, 87, 76], [59, 43, 94]])
    approx(rg.tensor([[0.0, 1.0], [2.0, 3.0]]).transpose().exp(), [[1, E * E], [E, E**3]])
    x = rg.tensor(X23)
    approx(x.exp(), [[1.0, 2.71830, 7.3891], [20.0855, 54.5981, 148.4132]])
    cube = rg.tensor([[[1.0, E], [E * E, E**3]], [[1.0, E], [E * E, E**3]]])
    approx(cube.permute([2, 0, 1]).log(), [[[0, 2], [0, 2]], [[1, 3], [1, 3]]])
    approx(x.log(), [[-inf, 0.0, math.log(2)], [1.09861, 1.38629, 1.60944]])
    approx(x.log1p(), [[0.0, math.log(2), 1.09861], [1.38629, 1.60944, 1.79176]])
    approx(rg.tensor([1.0, 4.0, 9.0, 16.0, 25.0, 36.0]).narrow(0, 1, 4).sqrt(), [2, 3, 4, 5])
    approx(rg.tensor([[1.0, 4.0], [9.0, 16.0]]).flip([0]).sqrt(), [[3, 4], [1, 2]])
    approx(x.sqrt(), [[0.0, 1.0, math.sqrt(2)], [1.73205, 2.0, 2.2360]])
    approx(x.square(), [[0, 1, 4], [9, 16, 25]])
    approx(
        rg.tensor([[0.5, 1.0, 2.0], [3.0, -4.0, -5.0]]).recip(),
        [[2.0, 1.0, 0.5], [0.33333, -0.25, -0.2]],
    )
    neg = x.neg().numpy()
    eq(neg, [[-0.0, -1, -2], [-3, -4, -5]])
    assert np.signbit(neg[0, 0])  # -0.0, as Burn checks bit for bit
    approx(x.erf(), [[0.0, 0.8427, 0.99532], [0.99998, 1.0, 1.0]])
    approx(
        rg.tensor([[-0.056, -0.043, -0.089], [3.0, 4.0, 5.0]]).erf(),
        [[-0.06312324, -0.048490416, -0.10016122], [0.99998, 1.0, 1.0]],
    )


def test_hypot():
    approx(
        rg.tensor([[3.0, 4.0], [5.0, 12.0]]).hypot(rg.tensor([[4.0, 3.0], [12.0, 5.0]])),
        [[5, 5], [13, 13]],
    )
    approx(
        rg.tensor([[3.0, 4.0, 5.0]]).hypot(rg.tensor([[4.0], [3.0]])),
        [[5.0, 5.656854, 6.404], [4.2426405, 5.0, 5.831]],
        1e-3,
    )  # Burn writes 6.404 and 5.831 to three places (its tolerance is 0.5%)
    approx(
        rg.tensor([[0.0, 3.0], [0.0, 0.0]]).hypot(rg.tensor([[4.0, 0.0], [0.0, 5.0]])),
        [[4, 3], [0, 5]],
    )


def test_prod():
    f = rg.tensor([[-5.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(f.prod(), -600.0)
    eq(f.prod_dim(1), [[-10], [60]])
    eq(f.prod_dim(-1), [[-10], [60]])


# ---- fmod.rs (torch's name and meaning: the sign of the dividend) -----------------------------


def test_fmod():
    approx(
        rg.tensor([[5.3, -5.3], [7.5, -7.5]]).fmod(rg.tensor([[2.0, 2.0], [3.0, 3.0]])),
        [[1.3, -1.3], [1.5, -1.5]],
    )
    approx(rg.tensor([5.3, -5.3, 7.5, -7.5]).fmod(2.0), [1.3, -1.3, 1.5, -1.5])
    approx(
        rg.tensor([10.0, 7.5, 3.8, 1.2]).fmod(rg.tensor([3.0, 2.0, 1.5, 0.7])), [1.0, 1.5, 0.8, 0.5]
    )
    approx(
        rg.tensor([-10.0, -7.5, -3.8, -1.2]).fmod(rg.tensor([3.0, 2.0, 1.5, 0.7])),
        [-1.0, -1.5, -0.8, -0.5],
    )
    approx(
        rg.tensor([5.3, -5.3, 5.3, -5.3]).fmod(rg.tensor([2.0, 2.0, -2.0, -2.0])),
        [1.3, -1.3, 1.3, -1.3],
    )
    assert np.isnan(
        rg.tensor([inf, -inf, inf, -inf]).fmod(rg.tensor([2.0, 3.0, -2.0, -3.0])).numpy()
    ).all()
    assert np.isnan(
        rg.tensor([5.3, -5.3, 0.0, 1.0]).fmod(rg.tensor([0.0, -0.0, 0.0, -0.0])).numpy()
    ).all()
    approx(
        rg.tensor([5.3, -5.3, 0.0, -0.0]).fmod(rg.tensor([inf, -inf, inf, -inf])),
        [5.3, -5.3, 0.0, -0.0],
    )
    out = rg.tensor([nan, 5.3, nan, 0.0]).fmod(rg.tensor([2.0, nan, nan, 3.0])).numpy()
    assert np.isnan(out[:3]).all() and not np.isnan(out[3])
    assert rg.tensor([-0.0]).fmod(rg.tensor([2.0])).item() == 0.0
    approx(
        rg.tensor([[5.3, -5.3]]).fmod(rg.tensor([[2.0, 2.0], [3.0, 3.0], [1.5, 1.5]])),
        [[1.3, -1.3], [2.3, -2.3], [0.8, -0.8]],
    )
    approx(
        rg.tensor([[[5.0, -7.0, 8.0]]]).fmod(rg.tensor([[[3.0] * 3], [[4.0] * 3]])),
        [[[2.0, -1.0, 2.0]], [[1.0, -3.0, 0.0]]],
    )


# ---- stats/var.rs, stats/eye.rs ----------------------------------------------------------------

VAR_INPUT = [[0.5, 1.8, 0.2, -2.0], [3.0, -4.0, 5.0, 0.0]]


def test_var():
    # API.md section 2 says var(d) keeps d with size 1 (Burn); the method is torch's here
    # (drops it unless keepdim=True; see the report), so this passes keepdim=True.
    t = rg.tensor(VAR_INPUT)
    approx(t.var(1, keepdim=True), [[2.4892], [15.3333]])
    approx(t.var(-1, keepdim=True), t.var(1, keepdim=True))
    var, mean = rg.var_mean(t, 1, keepdim=True)
    approx(var, [[2.4892], [15.3333]])
    approx(mean, [[0.125], [1.0]])
    # Burn's var_bias is the biased (n) variance: torch's correction=0
    approx(rg.var(t, 1, correction=0, keepdim=True), [[1.86688], [11.5]])


def test_eye():
    eq(rg.eye(3), [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "float32")
    eq(rg.eye(3, dtype="int64"), [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "int64")


# ---- iter_dim.rs ------------------------------------------------------------------------------

ITER_3D = [[[1.0, 2.0, 3.0, 1.0, 2.0], [4.0, 5.0, 6.0, 1.0, 2.0], [7.0, 8.0, 9.0, 1.0, 2.0]]]


def test_iter_dim():
    assert list(rg.tensor([1, 2, 3, 4]).iter_dim(0))[-1].tolist() == [4]
    with pytest.raises(rg.ShapeError):
        rg.zeros((10,)).iter_dim(1)
    data = [[1.0, 2.0, 3.0, 1.0, 2.0], [4.0, 5.0, 6.0, 1.0, 2.0], [7.0, 8.0, 9.0, 1.0, 2.0]]
    t = rg.tensor(data)
    eq(list(t.transpose().iter_dim(1))[1].flatten(0, -1), t.slice([(1, 2), (0, 5)]).flatten(0, -1))
    m = rg.tensor([[3.0, 4.9, 2.0], [2.0, 1.9, 3.0]])
    rows = list(m.iter_dim(0))
    assert len(rows) == 2
    approx(rows[0], [[3.0, 4.9, 2.0]])
    approx(rows[1], [[2.0, 1.9, 3.0]])
    approx(list(m.iter_dim(1))[1], [[4.9], [1.9]])
    assert len(list(m.iter_dim(1))) == 3
    c = rg.tensor(ITER_3D)
    parts = list(c.iter_dim(0))
    assert len(parts) == 1
    eq(parts[0], c)
    eq(list(c.iter_dim(1))[2], [[[7, 8, 9, 1, 2]]])
    parts = list(c.iter_dim(2))
    assert len(parts) == 5
    eq(parts[0], [[[1], [4], [7]]])
    eq(parts[4], [[[2], [2], [2]]])
    eq(parts[1].flatten(0, -1), [2, 5, 8])
    x = rg.arange(0, 72).reshape([4, 6, 3])
    parts = list(x.iter_dim(1))
    eq(parts[0], [[[0, 1, 2]], [[18, 19, 20]], [[36, 37, 38]], [[54, 55, 56]]])
    eq(parts[-1], [[[15, 16, 17]], [[33, 34, 35]], [[51, 52, 53]], [[69, 70, 71]]])
    eq(parts[3], [[[9, 10, 11]], [[27, 28, 29]], [[45, 46, 47]], [[63, 64, 65]]])
    single = rg.arange(0, 12).reshape([4, 1, 3])
    assert len(list(single.iter_dim(1))) == 1
    eq(next(single.iter_dim(1)), single)


def test_iter_dim_gradient():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float64").require_grad()
    loss = sum(((i + 1) * p).sum() for i, p in enumerate(x.iter_dim(1)))
    eq(x.grad(loss.backward()), [[1, 2], [1, 2]])


# ---- negative_dims.rs -------------------------------------------------------------------------


def test_negative_dims():
    t = rg.ones((2, 1, 3, 1))
    eq(t.squeeze_dim(-3), t.squeeze_dim(1))
    eq(t.squeeze_dims([-3, -1]), t.squeeze_dims([1, 3]))
    m = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(m.unsqueeze_dim(-1), m.unsqueeze_dim(2))
    eq(m.unsqueeze_dim(-3), m.unsqueeze_dim(0))
    eq(m.unsqueeze_dim(-2), m.unsqueeze_dim(1))
    c = arange_f(24, (2, 3, 4))
    eq(c.flip([-3, -1]), c.flip([0, 2]))
    eq(c.movedim(0, -1), c.movedim(0, 2))
    eq(c.movedim([-3, -2], [-2, -3]), c.movedim([0, 1], [1, 0]))
    x = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(x.slice_dim(-1, slice(1, None)), x.slice_dim(1, slice(1, None)))
    idx = rg.tensor([[2, 1, 0], [0, 2, 1]])
    eq(x.gather(-1, idx), x.gather(1, idx))
    v, si = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), rg.tensor([[1, 0, 2], [1, 2, 0]])
    eq(rg.zeros((2, 3)).scatter(-1, si, v, "add"), rg.zeros((2, 3)).scatter(1, si, v, "add"))
    eq(m.repeat_dim(-1, 2), m.repeat_dim(1, 2))
    other = rg.tensor([[7.0], [8.0]])
    eq(rg.cat([m, other], -1), rg.cat([m, other], 1))
    eq(rg.stack([m, m], -1), rg.stack([m, m], 2))
    eq(rg.stack([m, m], -3), rg.stack([m, m], 0))
    eq(x.narrow(-1, 1, 2), x.narrow(1, 1, 2))
    for a, b in zip(x.chunk(2, -1), x.chunk(2, 1)):
        eq(a, b)
    for a, b in zip(x.split(2, -1), x.split(2, 1)):
        eq(a, b)
    for a, b in zip(x.split_with_sizes([1, 2], -1), x.split_with_sizes([1, 2], 1)):
        eq(a, b)
    b = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]])
    for a, c2 in zip(b.iter_dim(-1), b.iter_dim(1)):
        eq(a, c2)
    eq(b.any_dim(-1), b.any_dim(1))
    eq(b.all_dim(-1), b.all_dim(1))


# ---- full.rs, init.rs, create_like.rs, cast.rs, mask_select.rs --------------------------------


def test_full_zeros_ones_and_like():
    eq(rg.full((2, 3), 2.1), np.full((2, 3), 2.1, dtype=np.float32), "float32")
    eq(rg.full((2, 3), 2.1, dtype="float32"), np.full((2, 3), 2.1, dtype=np.float32), "float32")
    assert rg.zeros((2, 2)).shape == (2, 2)
    eq(rg.zeros((2, 2)), [[0, 0], [0, 0]], "float32")
    eq(rg.zeros((2, 2), dtype="float32"), [[0, 0], [0, 0]], "float32")
    eq(rg.ones((2, 2)), [[1, 1], [1, 1]], "float32")
    source = arange_f(12, (2, 2, 3))
    for made, value in ((source.zeros_like(), 0.0), (source.ones_like(), 1.0)):
        assert made.shape == source.shape and made.dtype == source.dtype
        assert made.device == source.device
        eq(made, np.full((2, 2, 3), value))


def test_cast():
    eq(
        rg.tensor([[0.0, 43.0, 0.0], [2.0, -4.2, 31.33]]).bool(),
        [[False, True, False], [True, True, True]],
        "bool",
    )
    eq(rg.tensor([[1.0, 2.0, 3.0], [4.4, 5.5, 6.6]]).int(), [[1, 2, 3], [4, 5, 6]], "int32")
    eq(rg.tensor([[1, 2, 3], [4, 5, 6]]).float(), [[1, 2, 3], [4, 5, 6]], "float32")
    eq(rg.tensor([[True, False, True], [False, False, True]]).float(), [[1, 0, 1], [0, 0, 1]])
    data = [[1.0, 2.0, 3.0], [4.4, 5.5, 6.6]]
    approx(rg.tensor(data).cast("float32"), data)
    eq(rg.tensor(data).cast("int64"), [[1, 2, 3], [4, 5, 6]], "int64")
    assert rg.tensor([1.0, 2.5, 3.7]).cast("float32").dtype == "float32"


def test_mask_select():
    eq(
        rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).mask_select(
            rg.tensor([False, True, False, True, True])
        ),
        [2, 4, 5],
    )
    eq(
        rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).mask_select(
            rg.tensor([[True, False, True], [False, True, False]])
        ),
        [1, 3, 5],
    )
    eq(
        arange_f(8, (2, 2, 2))
        .add(1.0)
        .mask_select(rg.tensor([[[True, False], [False, True]], [[True, True], [False, False]]])),
        [1, 4, 5, 6],
    )
    eq(
        rg.tensor([[1.0, 2.0], [3.0, 4.0]]).mask_select(rg.tensor([[False, False], [True, False]])),
        [3],
    )
    assert rg.tensor([1.0, 2.0, 3.0]).mask_select(rg.tensor([False] * 3)).shape == (0,)
    eq(
        rg.tensor([[1.0, 2.0], [3.0, 4.0]])
        .transpose()
        .mask_select(rg.tensor([[True, False], [False, True]])),
        [1, 4],
    )
    eq(
        rg.tensor([1.0, 2.0, 3.0, 4.0])
        .flip([0])
        .mask_select(rg.tensor([True, False, True, False]).flip([0])),
        [3, 1],
    )
    eq(
        rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .narrow(0, 1, 4)
        .mask_select(rg.tensor([True, False, False, True])),
        [2, 5],
    )
    with pytest.raises(rg.ShapeError):
        rg.tensor([1.0, 2.0, 3.0]).mask_select(rg.tensor([True, False]))


def test_is_close_all_close():
    # Burn's is_close/all_close are torch's isclose/allclose (rtol 1e-5, atol 1e-8)
    a = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]])
    b = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 3.0]]) + 1e-9
    eq(a.isclose(b), [[True, True, True], [True, True, False]])
    eq(a.isclose(b, rtol=1e-5, atol=1e-8), [[True, True, True], [True, True, False]])
    assert not a.allclose(b)
    assert a.allclose(rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]]) + 1e-9)
    inf_plus, one, inf_minus = rg.tensor([[inf]]), rg.tensor([[1.0]]), rg.tensor([[-inf]])
    assert not inf_plus.allclose(inf_minus)
    assert not one.allclose(inf_minus)
    assert not one.allclose(inf_plus)
    assert inf_plus.allclose(inf_plus)


# ---- gather_scatter_nd.rs ---------------------------------------------------------------------


def test_gather_nd():
    idx = rg.tensor
    eq(arange_f(9, (3, 3)).gather_nd(idx([[0, 1], [1, 2], [2, 0]])), [1, 5, 6])
    c = arange_f(24, (2, 3, 4))
    out = c.gather_nd(idx([[1], [0]]))
    eq(out, np.arange(24).reshape(2, 3, 4)[[1, 0]])
    eq(out[0, 0], [12, 13, 14, 15])
    eq(arange_f(8, (2, 2, 2)).gather_nd(idx([[0, 0, 1], [1, 1, 0]])), [1, 6])
    eq(
        rg.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]]).gather_nd(
            idx([[0, 0], [0, 2], [1, 1]])
        ),
        [10, 30, 50],
    )
    eq(rg.tensor([10.0, 20.0, 30.0]).gather_nd(idx([[1]])), [20])
    d = arange_f(12, (2, 3, 2)) + 1
    eq(d.gather_nd(idx([[0, 2], [1, 0], [0, 1]])), [[5, 6], [7, 8], [3, 4]])


def test_scatter_nd():
    idx = rg.tensor
    pos = idx([[0, 1], [2, 0]])
    eq(
        rg.zeros((3, 3)).scatter_nd(pos, rg.tensor([10.0, 20.0]), "assign"),
        [[0, 10, 0], [0, 0, 0], [20, 0, 0]],
    )
    eq(
        rg.ones((3, 3)).scatter_nd(pos, rg.tensor([10.0, 20.0]), "add"),
        [[1, 11, 1], [1, 1, 1], [21, 1, 1]],
    )
    eq(
        rg.zeros((2, 3)).scatter_nd(idx([[0, 1], [0, 1]]), rg.tensor([5.0, 3.0]), "add"),
        [[0, 8, 0], [0, 0, 0]],
    )
    rows = rg.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    eq(rg.zeros((2, 3)).scatter_nd(idx([[0], [1]]), rows, "assign"), rows)
    eq(
        rg.tensor([[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]]).scatter_nd(
            idx([[0, 1], [1, 2]]), rg.tensor([10.0, 2.0]), "mul"
        ),
        [[2, 30, 4], [5, 6, 14]],
    )
    base = rg.tensor([[5.0, 10.0], [15.0, 20.0]])
    eq(base.scatter_nd(idx([[0, 0], [1, 1]]), rg.tensor([3.0, 25.0]), "min"), [[3, 10], [15, 20]])
    eq(base.scatter_nd(idx([[0, 0], [1, 1]]), rg.tensor([3.0, 25.0]), "max"), [[5, 10], [15, 25]])
    eq(
        rg.zeros((3, 3)).scatter_nd(idx([[0], [2], [1]]), arange_f(9, (3, 3)) + 1, "assign"),
        [[1, 2, 3], [7, 8, 9], [4, 5, 6]],
    )
    eq(rg.tensor([1.0, 2.0, 3.0]).scatter_nd(idx([[2]]), rg.tensor([99.0]), "assign"), [1, 2, 99])
    eq(
        rg.ones((2, 2, 2)).scatter_nd(
            idx([[1]]), rg.tensor([[[10.0, 20.0], [30.0, 40.0]]]), "assign"
        ),
        [[[1, 1], [1, 1]], [[10, 20], [30, 40]]],
    )
    data = arange_f(9, (3, 3)) + 1
    gathered = data.gather_nd(idx([[0], [2]]))
    eq(
        rg.zeros((3, 3)).scatter_nd(idx([[0], [2]]), gathered, "add"),
        [[1, 2, 3], [0, 0, 0], [7, 8, 9]],
    )
    out = rg.zeros((2, 3, 4)).scatter_nd(
        idx([[0, 1], [1, 2]]),
        rg.tensor([[10.0, 20.0, 30.0, 40.0], [50.0, 60.0, 70.0, 80.0]]),
        "add",
    )
    expected = np.zeros((2, 3, 4))
    expected[0, 1], expected[1, 2] = [10, 20, 30, 40], [50, 60, 70, 80]
    eq(out, expected)


# ---- padding.rs: Burn's ``pad((left, right, top, bottom), mode)`` is torch's
# ``F.pad(x, (left, right, top, bottom), mode)``; PadMode::Edge is torch's "replicate". torch's
# reflect/replicate take a batch or channel dimension in front of the padded ones, so the 2-d
# cases pad x[None] and drop it again. ----------------------------------------------------------


def pad(x, pads, mode="constant", value=0.0):
    import retrograd.nn.functional as F  # noqa: N812

    if mode == "constant":
        return F.pad(x, pads, mode, value)
    lifted = x.ndim == 2
    out = F.pad(x.unsqueeze_dim(0) if lifted else x, pads, mode)
    return out.squeeze_dim(0) if lifted else out


def test_pad_constant():
    out = pad(rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), (2, 2, 2, 2), value=1.1)
    expected = np.full((6, 7), 1.1, dtype=np.float32)
    expected[2:4, 2:5] = [[0, 1, 2], [3, 4, 5]]
    eq(out, expected)
    x4 = rg.tensor([[[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]]])
    expected = np.full((1, 1, 7, 6), 1.1, dtype=np.float32)
    expected[0, 0, 2:5, 2:4] = [[0, 1], [2, 3], [4, 5]]
    eq(pad(x4, (2, 2, 2, 2), value=1.1), expected)
    expected = np.full((1, 1, 10, 5), 1.1, dtype=np.float32)
    expected[0, 0, 4:7, 2:4] = [[0, 1], [2, 3], [4, 5]]
    eq(pad(x4, (2, 1, 4, 3), value=1.1), expected)
    eq(
        pad(rg.tensor([[1.0, 2.0], [3.0, 4.0]]), (1, 1, 1, 1)),
        [[0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 4, 0], [0, 0, 0, 0]],
    )
    padded = pad(rg.zeros((0, 3)), (0, 0, 2, 2), value=1.0)
    assert padded.shape == (4, 3)
    eq(padded, np.ones((4, 3)))


def test_pad_reflect():
    m = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(
        pad(m, (1, 1, 1, 1), "reflect"),
        [[5, 4, 5, 6, 5], [2, 1, 2, 3, 2], [5, 4, 5, 6, 5], [2, 1, 2, 3, 2]],
    )
    row = rg.tensor([[1.0, 2.0, 3.0, 4.0]])
    eq(pad(row, (2, 2, 0, 0), "reflect"), [[3, 2, 1, 2, 3, 4, 3, 2]])
    sq = arange_f(9, (1, 1, 3, 3)) + 1
    eq(
        pad(sq, (1, 1, 1, 1), "reflect"),
        [[[[5, 4, 5, 6, 5], [2, 1, 2, 3, 2], [5, 4, 5, 6, 5], [8, 7, 8, 9, 8], [5, 4, 5, 6, 5]]]],
    )
    eq(pad(row, (3, 3, 0, 0), "reflect"), [[4, 3, 2, 1, 2, 3, 4, 3, 2, 1]])
    eq(
        pad(arange_f(9, (3, 3)) + 1, (2, 1, 1, 2), "reflect"),
        [
            [6, 5, 4, 5, 6, 5],
            [3, 2, 1, 2, 3, 2],
            [6, 5, 4, 5, 6, 5],
            [9, 8, 7, 8, 9, 8],
            [6, 5, 4, 5, 6, 5],
            [3, 2, 1, 2, 3, 2],
        ],
    )
    with pytest.raises(rg.RetrogradError):
        pad(rg.tensor([[1.0, 2.0, 3.0]]), (3, 0, 0, 0), "reflect")


def test_pad_edge():
    m = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(
        pad(m, (1, 1, 1, 1), "replicate"),
        [[1, 1, 2, 3, 3], [1, 1, 2, 3, 3], [4, 4, 5, 6, 6], [4, 4, 5, 6, 6]],
    )
    eq(
        pad(rg.tensor([[1.0, 2.0, 3.0, 4.0]]), (2, 3, 0, 0), "replicate"),
        [[1, 1, 1, 2, 3, 4, 4, 4, 4]],
    )
    eq(
        pad(rg.tensor([[[[1.0, 2.0], [3.0, 4.0]]]]), (1, 1, 1, 1), "replicate"),
        [[[[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]]],
    )
    eq(pad(m, (2, 1, 3, 1), "replicate"), [[1, 1, 1, 2, 3, 3]] * 4 + [[4, 4, 4, 5, 6, 6]] * 2)
    sq = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    for mode in ("constant", "reflect", "replicate"):
        eq(pad(sq, (0, 0, 0, 0), mode, 5.0), sq)


def test_pad_empty_tensor_edge_and_reflect_raise():
    for mode in ("replicate", "reflect"):
        with pytest.raises(rg.ShapeError):
            pad(rg.zeros((0, 3)), (0, 0, 1, 1), mode)


# ---- stats/median.rs, stats/cov.rs, linalg/*.rs, grid/*.rs: Burn's functions under their torch
# forms (torch's median(dim) and the norms drop the dim unless keepdim=True; Burn's keep it;
# Burn's trace/diag/matvec batch over leading dims, torch's over none, so the batched cases go
# through diagonal()/matmul). -------------------------------------------------------------------


def test_median():
    t = rg.tensor(VAR_INPUT)
    eq(t.median(1, keepdim=True).values, np.array([[0.2], [0.0]], dtype=np.float32))
    eq(t.median(0, keepdim=True).values, np.array([[0.5, -4.0, 0.2, -2.0]], dtype=np.float32))
    odd = rg.tensor(
        [[0.5, 1.8, 0.2, -2.0, 1.0], [3.0, -4.0, 5.0, 0.0, -1.0], [5.0, -5.0, 1.0, 3.0, -2.0]]
    )
    eq(odd.median(1, keepdim=True).values, [[0.5], [0.0], [1.0]])
    eq(odd.median(0, keepdim=True).values, [[3.0, -4.0, 1.0, 0.0, -1.0]])
    eq(odd.flatten(0, -1).median(), 0.5)
    values, indices = rg.tensor([3.0, 1.0, 2.0]).median(0)
    eq(values, 2.0)
    eq(indices, 2)
    m = rg.tensor([[5.0, 1.0, 3.0], [2.0, 8.0, 4.0]])
    values, indices = m.median(1, keepdim=True)
    eq(values, [[3], [4]])
    eq(indices, [[2], [2]], "int64")
    eq(m.median(-1).values, m.median(1).values)


def test_cov():
    t = rg.tensor(VAR_INPUT)
    approx(t.cov(correction=1), [[2.48917, -1.73333], [-1.73333, 15.33333]])
    approx(t.cov(correction=0), [[1.86687, -1.3], [-1.3, 11.5]])
    tall = rg.tensor([[0.5, 1.8], [0.2, -2.0], [3.0, -4.0], [5.0, 0.0]])
    approx(
        tall.cov(),
        [
            [0.845, -1.43, -4.55, -3.25],
            [-1.43, 2.42, 7.7, 5.5],
            [-4.55, 7.7, 24.5, 17.5],
            [-3.25, 5.5, 17.5, 12.5],
        ],
        1e-3,
    )


def test_det():
    det = rg.linalg.det
    approx(det(rg.tensor([[[5.0]]])), [5.0])
    approx(det(rg.tensor([[[4.0, 3.0], [6.0, 3.0]]])), [-6.0])
    approx(det(rg.tensor([[[4.0, 7.0, 3.0], [6.0, 1.0, 3.0], [8.0, 3.0, 7.0]]])), [-104.0], 1e-3)
    approx(det(rg.eye(3).unsqueeze_dim(0)), [1.0])
    approx(det(rg.eye(300).unsqueeze_dim(0)), [1.0])
    approx(det(rg.tensor([[[0.0, 4.0, 2.0], [0.0, 2.0, 1.0], [0.0, 3.0, 9.0]]])), [0.0])
    approx(det(rg.tensor([[[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [3.0, 6.0, 9.0]]])), [0.0], 5e-3)
    approx(det(rg.tensor([[[1.0, 2.0, 3.0], [0.0, 4.0, 5.0], [0.0, 0.0, 6.0]]])), [24.0], 1e-3)
    approx(det(rg.tensor([[[2.0, 0.0, 0.0], [3.0, 4.0, 0.0], [5.0, 6.0, 7.0]]])), [56.0], 1e-3)
    approx(det(rg.tensor([[[3.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 2.0]]])), [30.0], 1e-3)
    approx(det(rg.zeros((1, 10, 10))), [0.0])
    approx(det(rg.ones((1, 10, 10))), [0.0], 5e-3)
    rg.seed(3)
    x = rg.random((1, 20, 20))
    approx(
        det(x.slice_assign([slice(None), slice(None), (16, 17)], rg.zeros((1, 20, 1)))), [0.0], 5e-3
    )
    approx(
        det(x.slice_assign([slice(None), (17, 18)], x.slice([slice(None), (5, 6)]))), [0.0], 5e-3
    )


def test_matvec():
    approx(rg.tensor([[1.0, 2.0], [3.0, 4.0]]).matmul(rg.tensor([5.0, 6.0])), [17.0, 39.0])
    eq(rg.tensor([[2, 0, -1], [1, 3, 2]]).matmul(rg.tensor([3, -2, 4])), [2, 5], "int64")

    def matvec(m, v):
        return m.matmul(v.unsqueeze_dim(-1)).squeeze_dim(-1)

    m = rg.tensor([[[1.0, 0.0, 2.0], [3.0, 1.0, -1.0]], [[-2.0, 1.0, 0.0], [0.5, -1.5, 2.0]]])
    approx(matvec(m, rg.tensor([[1.0, -1.0, 0.5], [2.0, 0.0, -1.0]])), [[2.0, 1.5], [-4.0, -1.0]])
    m = rg.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], [[-1.0, 0.0, 2.0], [3.0, 1.0, -2.0]]])
    approx(matvec(m, rg.tensor([[1.0, 0.0, -1.0]])), [[-2.0, -2.0], [-3.0, 5.0]])
    m = rg.tensor([[[1.0, 0.0, 2.0], [3.0, -1.0, 1.0]]])
    approx(matvec(m, rg.tensor([[2.0, 1.0, 0.0], [1.0, -1.0, 3.0]])), [[2.0, 5.0], [7.0, 7.0]])
    with pytest.raises(rg.ShapeError):
        rg.zeros((2, 3)).matmul(rg.zeros((4,)))
    with pytest.raises(rg.ShapeError):
        matvec(rg.zeros((2, 3, 4)), rg.zeros((3, 4)))


def test_trace_diag_outer():
    approx(rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]).trace(), 15.0)
    approx(rg.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]).trace(), 7.0)
    approx(rg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).trace(), 5.0)
    approx(rg.tensor([[42.0]]).trace(), 42.0)
    batch = rg.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    approx(batch.diagonal(0, -2, -1).sum_dim(-1), [[5.0], [13.0]])
    eq(rg.tensor([[1.0, 2.0], [3.0, 4.0]]).diag(), [1.0, 4.0])
    eq(rg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]).diag(), [1.0, 4.0])
    eq(rg.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]).diag(), [1.0, 6.0])
    eq(batch.diagonal(0, -2, -1), [[1.0, 4.0], [5.0, 8.0]])
    tall = rg.tensor(
        [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], [[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]]
    )
    eq(tall.diagonal(0, -2, -1), [[1.0, 4.0], [7.0, 10.0]])
    u, v = rg.tensor([1.0, 2.0, 3.0]), rg.tensor([4.0, 5.0])
    approx(u.outer(v), [[4, 5], [8, 10], [12, 15]])
    assert rg.zeros((3,)).outer(rg.zeros((5,))).shape == (3, 5)
    assert rg.tensor([1.0, 2.0]).outer(rg.tensor([3.0, 4.0, 5.0])).shape == (2, 3)
    approx(rg.tensor([-1.0, 2.0]).outer(rg.tensor([3.0, -4.0])), [[-3, 4], [6, -8]])
    eq(rg.tensor([1, 2, 3]).outer(rg.tensor([4, 5])), [[4, 5], [8, 10], [12, 15]], "int64")


def test_cosine_similarity_and_vector_norm():
    import retrograd.nn.functional as F  # noqa: N812

    x1 = rg.tensor([[1.0, 2.0, 3.0], [0.5, 1.5, 2.5]])
    x2 = rg.tensor([[1.5, 2.5, 3.5], [0.7, 1.7, 2.7]])
    # Burn writes 0.99983 and 0.99987; the cosines are 0.99741 and 0.99871 (torch's too), which
    # Burn's 0.5% tolerance accepts: checked here at that tolerance and against the exact values.
    burn_expected = [[0.99983203], [0.99987257]]
    approx(F.cosine_similarity(x1, x2, 1).unsqueeze_dim(1), burn_expected, 5e-3)
    approx(F.cosine_similarity(x1, x2, 1, eps=1e-8).unsqueeze_dim(1), burn_expected, 5e-3)
    exact = [17.0 / math.sqrt(14.0 * 20.75), 9.65 / math.sqrt(8.75 * 10.67)]
    approx(F.cosine_similarity(x1, x2, 1), exact, 1e-5)
    eq(
        F.cosine_similarity(
            rg.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]),
            rg.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
            1,
        ),
        [0.0, 0.0],
    )
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    approx(F.cosine_similarity(a, a * 2.0, 1), [1.0, 1.0])
    approx(F.cosine_similarity(a, -a, 1), [-1.0, -1.0])
    c1 = arange_f(8, (2, 2, 2)) + 1
    c2 = c1 + 1
    expected = [[[0.9959688], [0.9958376]], [[0.9955946], [0.9955169]]]
    approx(F.cosine_similarity(c1, c2, 2).unsqueeze_dim(2), expected, 5e-3)  # as above
    approx(F.cosine_similarity(c1, c2, -1).unsqueeze_dim(-1), expected, 5e-3)
    a1, a2 = np.asarray(c1, dtype=np.float64), np.asarray(c2, dtype=np.float64)
    exact = (a1 * a2).sum(2) / np.sqrt((a1 * a1).sum(2) * (a2 * a2).sum(2))
    approx(F.cosine_similarity(c1, c2, 2), exact, 1e-5)
    norm = rg.linalg.vector_norm
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    eq(norm(x, inf, 0, keepdim=True), [[3, 4]])
    eq(norm(x, -inf, 0, keepdim=True), [[1, 2]])
    eq(norm(x, inf, 1, keepdim=True), [[2], [4]])
    eq(norm(x, -inf, 1, keepdim=True), [[1], [3]])
    eq(norm(rg.tensor([[1.0, -2.0, 0.0], [0.0, 0.0, 4.0]]), 0, 0, keepdim=True), [[1, 1, 1]])


def test_affine_grid_and_meshgrid():
    import retrograd.nn.functional as F  # noqa: N812

    # Burn's affine_grid_2d samples the corners (torch's align_corners=True)
    identity = rg.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    eq(
        F.affine_grid(identity, [1, 1, 2, 2], align_corners=True),
        [[[[-1, -1], [1, -1]], [[-1, 1], [1, 1]]]],
    )
    eq(
        F.affine_grid(identity * 2.0, [1, 1, 2, 2], align_corners=True),
        [[[[-2, -2], [2, -2]], [[-2, 2], [2, 2]]]],
    )
    moved = rg.tensor([[[1.0, 0.0, 0.5], [0.0, 1.0, -0.5]]])
    eq(
        F.affine_grid(moved, [1, 1, 2, 2], align_corners=True),
        [[[[-0.5, -1.5], [1.5, -1.5]], [[-0.5, 0.5], [1.5, 0.5]]]],
    )
    x, y, z = rg.tensor([1, 2, 3, 4]), rg.tensor([5, 6]), rg.tensor([7, 8])
    shape = (4, 2, 2)
    for got, want in zip(
        rg.meshgrid(x, y, z, indexing="ij"),
        (x.reshape([4, 1, 1]), y.reshape([1, 2, 1]), z.reshape([1, 1, 2])),
    ):
        eq(got, want.expand(shape))
    for got, want in zip(
        rg.meshgrid(x, y, z, indexing="xy"),
        (x.reshape([4, 1, 1]), y.reshape([1, 2, 1]), z.reshape([1, 1, 2])),
    ):
        eq(got, want.expand(shape).swap_dims(0, 1))
    a, b = rg.tensor([0.5, 1.0, 2.5]), rg.tensor([0.5, 1.0])
    eq(
        rg.stack(rg.meshgrid(a, b, indexing="ij"), 0),
        [[[0.5, 0.5], [1.0, 1.0], [2.5, 2.5]], [[0.5, 1.0], [0.5, 1.0], [0.5, 1.0]]],
    )


# ---- hann/hamming/blackman_window.rs, dot.rs, grid_sample.rs (torch's names; Burn's
# ``hann_window(n, periodic)`` is ``rg.hann_window(n, periodic=...)``, its grid_sample_2d default
# is torch's bilinear, zeros padding, align_corners=False) ----------------------------------------


#: Burn's Hamming window has the exact coefficients 25/46 and 21/46; torch's (the name's meaning
#: here) defaults to 0.54 and 0.46, so the ports pass Burn's as alpha and beta.
BURN_HAMMING = {"alpha": 25 / 46, "beta": 21 / 46}


def test_windows():
    approx(
        rg.hann_window(8, periodic=True),
        [0.0, 0.146447, 0.5, 0.853553, 1.0, 0.853553, 0.5, 0.146447],
    )
    approx(
        rg.hann_window(8, periodic=False),
        [0.0, 0.188255, 0.611260, 0.950484, 0.950484, 0.611260, 0.188255, 0.0],
    )
    approx(
        rg.hamming_window(8, periodic=True, **BURN_HAMMING),
        [0.086957, 0.220669, 0.543478, 0.866288, 1.0, 0.866288, 0.543478, 0.220669],
    )
    approx(
        rg.hamming_window(8, periodic=False, **BURN_HAMMING),
        [0.086957, 0.258842, 0.645064, 0.954790, 0.954790, 0.645064, 0.258842, 0.086957],
    )
    approx(
        rg.blackman_window(8, periodic=True),
        [0.0, 6.6447e-02, 3.4e-01, 7.7355e-01, 1.0, 7.7355e-01, 3.4e-01, 6.6447e-02],
    )
    approx(
        rg.blackman_window(8, periodic=False),
        [0.0, 9.0453e-02, 4.5918e-01, 9.2036e-01, 9.2036e-01, 4.5918e-01, 9.0453e-02, 0.0],
    )
    approx(rg.hamming_window(8), 0.54 - 0.46 * np.cos(2 * np.pi * np.arange(8) / 8))
    for window in (rg.hann_window, rg.hamming_window, rg.blackman_window):
        assert window(4, periodic=True, dtype="float32").dtype == "float32"
        for periodic in (True, False):
            assert window(0, periodic=periodic).shape == (0,)
            eq(window(1, periodic=periodic), [1.0])


def test_dot():
    eq(rg.tensor([1.0, 2.0, 3.0]).dot(rg.tensor([0.0, -1.0, 4.0])), 10.0)
    eq(rg.tensor([1, 2, 3]).dot(rg.tensor([0, -1, 4])), 10, "int64")
    with pytest.raises(rg.RetrogradError):
        rg.tensor([1, 2]).dot(rg.tensor([1, 2, 3]))


GRID_INPUT = [[[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]]]
GRID = [[[[0.0, 0.0], [-1.0, 0.25]], [[1.0, 1.0], [0.2, -0.8]]]]


def test_grid_sample():
    import retrograd.nn.functional as F  # noqa: N812

    x, grid = rg.tensor(GRID_INPUT), rg.tensor(GRID)
    approx(
        F.grid_sample(x, grid, mode="bilinear", align_corners=False),
        [[[[4.0, 2.0625], [2.0, 1.04]]]],
    )
    approx(
        F.grid_sample(x, grid, padding_mode="border", align_corners=True),
        [[[[4.0, 3.75], [8.0, 1.8]]]],
    )
    outside = rg.tensor([[[[0.0, -2.0]]]])
    approx(F.grid_sample(x, outside, align_corners=False), [[[[0.0]]]])
    approx(F.grid_sample(x, outside, padding_mode="border", align_corners=False), [[[[1.0]]]])
    approx(
        F.grid_sample(x, grid, padding_mode="reflection", align_corners=False),
        [[[[4.0, 4.125], [8.0, 1.3]]]],
    )


# ---- random.rs (API.md's rg.random: "uniform" on [0, 1) or "normal"; Burn's Uniform(low, high)
# and Bernoulli(p) distributions have no API.md form and are not ported), int square.rs --------


def test_random_and_seed():
    t = rg.random((20,), "uniform").numpy()
    assert t.dtype == np.float32 and ((t >= 0.0) & (t < 1.0)).all()
    rg.seed(42)
    a = rg.random((5,))
    rg.seed(42)
    b = rg.random((5,))
    eq(a, b)
    n = rg.random((1000,), "normal").numpy()
    assert abs(n.mean()) < 0.2 and 0.8 < n.std() < 1.2
    eq(rg.tensor([[0, 1, 2], [3, 4, 5]]).square(), [[0, 1, 4], [9, 16, 25]], "int64")


# ---- the Burn methods added for these ports (take(dim, indices), unsqueeze_dims, iter_dim):
# their gradients against finite differences in float64 and against torch ------------------------


def _fd_and_torch(build_rg, build_torch, shape):
    import torch

    rng = np.random.default_rng(7)
    data = rng.normal(size=shape)
    weights = rng.normal(size=build_torch(torch.tensor(data)).shape)
    x = rg.tensor(data).require_grad()
    grad = np.asarray(x.grad((build_rg(x) * rg.tensor(weights)).sum().backward()))

    def f(a):
        return float((np.asarray(build_rg(rg.tensor(a))) * weights).sum())

    numeric = np.zeros_like(data)
    for i in np.ndindex(*shape):
        up, down = data.copy(), data.copy()
        up[i] += 1e-6
        down[i] -= 1e-6
        numeric[i] = (f(up) - f(down)) / 2e-6
    np.testing.assert_allclose(grad, numeric, rtol=1e-6, atol=1e-6)
    t = torch.tensor(data, requires_grad=True)
    (build_torch(t) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(grad, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_take_dim_gradient():
    import torch

    index = [[0, 2], [2, 2], [1, 0]]
    _fd_and_torch(
        lambda x: x.take(1, rg.tensor(index)),
        lambda t: t.index_select(1, torch.tensor(index).reshape(-1)).reshape(2, 3, 2, 2),
        (2, 3, 2),
    )


def test_unsqueeze_dims_and_iter_dim_gradients():
    _fd_and_torch(
        lambda x: x.unsqueeze_dims([0, -1]) * 2.0, lambda t: t.reshape(1, 2, 3, 1) * 2.0, (2, 3)
    )
    _fd_and_torch(
        lambda x: rg.cat([p * (i + 1.0) for i, p in enumerate(x.iter_dim(1))], 1),
        lambda t: _torch_scaled_columns(t),
        (2, 3),
    )


def _torch_scaled_columns(t):
    import torch

    return torch.cat([t.narrow(1, i, 1) * (i + 1.0) for i in range(t.shape[1])], 1)
