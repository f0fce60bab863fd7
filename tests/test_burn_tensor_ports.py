"""Burn's forward tensor-op tests (``crates/burn-backend-tests/tests/tensor/float/ops`` and its
``int``/``bool`` siblings, tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747), ported
against API.md and run under every checkpointing strategy on the chosen inner backend.
Expected values are Burn's as its test source writes them; where Burn's value is not what
API.md (or torch, for a torch-named op) fixes, the comment says so and the test follows API.md.
Burn's ``#[should_panic]`` cases become checks that retrograd raises its own error."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)


def eq(actual, expected, dtype=None):
    """Burn's ``assert_eq``: exact values (and the dtype, when given)."""
    got = np.asarray(actual)
    np.testing.assert_array_equal(got, np.asarray(expected))
    if dtype is not None:
        assert actual.dtype == dtype, (actual.dtype, dtype)


def approx(actual, expected, tol=1e-4):
    """Burn's ``assert_approx_eq`` with its default tolerance (relative and absolute)."""
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=tol, atol=tol)


def arange_f(n, shape=None):
    t = rg.arange(0, n).float()
    return t if shape is None else t.reshape(shape)


# ---- add.rs, sub.rs, mul.rs, div.rs ----------------------------------------------------------


def test_add_d2_and_broadcast():
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(a + rg.tensor([[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]), [[6, 8, 10], [12, 14, 16]])
    eq(
        rg.tensor([[0.0, 1.0, 2.0]]) + rg.tensor([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]),
        [[3, 5, 7], [6, 8, 10]],
    )
    eq(a + 2.0, [[2, 3, 4], [5, 6, 7]])
    eq(a.add_scalar(2.0), [[2, 3, 4], [5, 6, 7]])


def test_add_different_strides():
    t1 = rg.tensor([[0.0, 1.0], [2.0, 3.0]]) * 1
    t2 = rg.tensor([[4.0, 5.0], [6.0, 7.0]]) * 1
    eq(t1 + t2.transpose(), [[4, 7], [7, 10]])
    eq(t1.transpose() + t2, [[4, 7], [7, 10]])
    eq(t1.transpose() + rg.tensor([[4.0, 5.0]]) * 1, [[4, 7], [5, 8]])


def test_add_maybe_fused_not_contiguous():
    t1 = arange_f(8, (2, 4))
    t2 = rg.arange(8, 16).float().reshape((4, 2)).swap_dims(0, 1)
    eq(t1 + t2, [[8, 11, 14, 17], [13, 16, 19, 22]])
    t2 = rg.arange(8, 10).float().reshape((1, 2)).swap_dims(0, 1)
    eq(t2 + t1, [[8, 9, 10, 11], [13, 14, 15, 16]])


def test_add_narrowed_and_scalar_transposed():
    a = arange_f(16, (4, 4))
    eq(a.narrow(0, 1, 2) + a.narrow(0, 1, 2), [[8, 10, 12, 14], [16, 18, 20, 22]])
    eq(rg.tensor([[1.0, 2.0], [3.0, 4.0]]).transpose() + 10.0, [[11, 13], [12, 14]])


def test_sub():
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(a - rg.tensor([[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]), np.full((2, 3), -6.0))
    eq(
        rg.tensor([[0.0, 1.0, 2.0]]) - rg.tensor([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]),
        [[-3, -3, -3], [-6, -6, -6]],
    )
    eq(a - 2.0, [[-2, -1, 0], [1, 2, 3]])
    eq(a.sub_scalar(2.0), [[-2, -1, 0], [1, 2, 3]])


def test_mul():
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(a * a, [[0, 1, 4], [9, 16, 25]])
    eq(
        rg.tensor([[0.0, 1.0, 2.0]]) * rg.tensor([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]),
        [[0, 4, 10], [0, 7, 16]],
    )
    eq(
        rg.tensor([0.0, 1.0, 2.0]).reshape((3, 1)) * rg.tensor([3.0, 4.0, 5.0]).reshape((1, 3)),
        [[0, 0, 0], [3, 4, 5], [6, 8, 10]],
    )
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).transpose()
    eq(x * rg.tensor([[2.0, 3.0], [4.0, 5.0]]).transpose(), [[2, 12], [6, 20]])
    eq(a * 2.0, [[0, 2, 4], [6, 8, 10]])
    eq(a.mul_scalar(2.0), [[0, 2, 4], [6, 8, 10]])


def test_div():
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    approx(a / rg.tensor([[1.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), [[0, 1, 1], [1, 1, 1]])
    eq(
        rg.tensor([[0.0, 1.0, 2.0]]) / rg.tensor([[1.0, 1.0, 2.0], [3.0, 4.0, 5.0]]),
        np.array([[0, 1, 1], [0, 0.25, 0.4]], dtype=np.float32),
    )
    eq(a / 2.0, [[0, 0.5, 1], [1.5, 2, 2.5]])
    eq(a.div_scalar(2.0), [[0, 0.5, 1], [1.5, 2, 2.5]])


# ---- powf_scalar.rs, powf.rs, clamp.rs -------------------------------------------------------


def test_powf_scalar():
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    approx(a.powf_scalar(0.71), [[0.0, 1.0, 1.6358], [2.1815, 2.67586, 3.13522]])
    b = rg.tensor([[1.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    approx(b.powf_scalar(-0.33), [[1.0, 1.0, 0.79553646], [0.695905, 0.6328783, 0.58794934]])
    n = rg.tensor([[0.0, -1.0, -2.0], [-3.0, -4.0, -5.0]])
    approx(n.powf_scalar(4.0), [[0, 1, 16], [81, 256, 625]])
    approx(n.powf_scalar(3.0), [[0, -1, -8], [-27, -64, -125]])


def test_powf():
    a = rg.tensor([[1.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    approx(a.powf(rg.tensor([[1.0, 1.0, 2.0], [3.0, 4.0, 2.0]])), [[1, 1, 4], [27, 256, 25]])
    approx(
        a.powf(rg.tensor([[-0.95, -0.67, -0.45], [-0.24, -0.5, -0.6]])),
        [[1.0, 1.0, 0.73204285], [0.76822936, 0.5, 0.38073079]],
    )
    n = rg.tensor([[1.0, -1.0, -2.0], [-3.0, -4.0, -5.0]])
    approx(n.powf(rg.tensor([[2.0, 2.0, 4.0], [4.0, 4.0, 2.0]])), [[1, 1, 16], [81, 256, 25]])
    approx(n.powf(rg.full((2, 3), 3.0)), [[1, -1, -8], [-27, -64, -125]])


def test_powf_broadcasted():
    t1 = rg.tensor([2.0, 3.0, 4.0])
    t2 = rg.tensor([1.0])
    approx(t1.powf(t2), [2.0, 3.0, 4.0])
    approx(t2.powf(t1), [1.0, 1.0, 1.0])


def test_powf_scalar_tensor_rope_frequencies():
    channels = rg.arange(0, 64, step=2).float() if _arange_has_step() else None
    if channels is None:
        channels = rg.tensor(np.arange(0, 64, 2)).float()
    inv_freq = rg.tensor([10000.0]).powf(-channels / 64.0)
    freqs = rg.arange(0, 1024).float().unsqueeze_dim(1) * inv_freq.unsqueeze_dim(0)
    assert freqs.cos().shape == (1024, 32)
    approx(inv_freq, 10000.0 ** (-np.arange(0, 64, 2) / 64.0), 1e-5)


def _arange_has_step() -> bool:
    try:
        rg.arange(0, 4, step=2)
    except TypeError:
        return False
    return True


def test_clamp():
    a = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    i = rg.tensor([[0, 1, 2], [3, 4, 5]])
    eq(a.clamp_min(2.0), [[2, 2, 2], [3, 4, 5]], "float32")
    eq(i.clamp_min(2), [[2, 2, 2], [3, 4, 5]], "int64")
    eq(a.clamp_max(2.0), [[0, 1, 2], [2, 2, 2]], "float32")
    eq(i.clamp_max(4), [[0, 1, 2], [3, 4, 4]], "int64")
    eq(a.clamp(1.0, 4.0), [[1, 1, 2], [3, 4, 4]], "float32")
    eq(i.clamp(1, 4), [[1, 1, 2], [3, 4, 4]], "int64")
    eq(rg.ones((2, 4)).clamp(0.0, 0.5), np.full((2, 4), 0.5))


# ---- remainder.rs (Burn's remainder is torch's: the sign of the divisor) ---------------------

REMAINDER_PAIRS = [
    ([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0], [2.0, 3.0, 1.0, 2.0, 1.0, 3.0], [1, 1, 0, 1, 0, 0]),
    (
        [1.0, 2.0, 3.0, 4.0, 5.0],
        [1.4233, 2.7313, 0.2641, 1.9651, 0.5897],
        [1.0, 2.0, 0.0949, 0.0698, 0.2824],
    ),
    ([0.0, 0.0, 0.0], [3.5, -2.1, 1e-4], [0, 0, 0]),
    ([-1.0, 1.5, -2.0, 2.5, 0.5, 4.0], [1.0, 1.5, 2.0, 2.5, 0.5, 4.0], [0] * 6),
    ([-7.0, -3.0, 2.0, 6.0], [-2.5, -2.1, -1.5, -3.25], [-2.0, -0.9, -1.0, -0.5]),
    (
        [-1.0, 1.0, -1.5, 1.5, -1.0, 1.0, -1.5, 1.5],
        [10.0] * 4 + [-10.0] * 4,
        [9.0, 1.0, 8.5, 1.5, -1.0, -9.0, -1.5, -8.5],
    ),
]


@pytest.mark.parametrize("lhs,rhs,expected", REMAINDER_PAIRS)
def test_remainder(lhs, rhs, expected):
    approx(rg.tensor(lhs).remainder(rg.tensor(rhs)), expected)
    approx(rg.tensor(lhs) % rg.tensor(rhs), expected)


REMAINDER_SCALARS = [
    ([-3.0, -2.0, -1.0, 1.0, 2.0, 3.0], 2.0, [1, 0, 1, 1, 0, 1]),
    ([1.0, 2.0, 3.0, 4.0, 5.0], -1.5, [-0.5, -1.0, 0.0, -0.5, -1.0]),
    ([0.0, 0.0, 0.0], 3.5, [0, 0, 0]),
    ([-4.0, 4.0], 4.0, [0, 0]),
    ([-7.0, -3.0, 2.0, 6.0], -2.5, [-2.0, -0.5, -0.5, -1.5]),
    ([-7.5, -2.5, 2.5, 7.5], 3.0, [1.5, 0.5, 2.5, 1.5]),
    ([-1.0, 1.0], 10.0, [9.0, 1.0]),
]


@pytest.mark.parametrize("lhs,rhs,expected", REMAINDER_SCALARS)
def test_remainder_scalar(lhs, rhs, expected):
    approx(rg.tensor(lhs).remainder_scalar(rhs), expected)
    approx(rg.tensor(lhs) % rhs, expected)


# ---- round.rs, sign.rs, trunc.rs, flip.rs ----------------------------------------------------


def test_round():
    x = rg.tensor([[24.0423, 87.9478, 76.1838], [59.6929, 43.8169, 94.8826]])
    approx(x.round(), [[24, 88, 76], [60, 44, 95]])
    approx(rg.tensor([1.5, 2.5, 3.5, 4.5, 5.5, 6.5]).round(), [2, 2, 4, 4, 6, 6])


def test_sign():
    eq(rg.tensor([[-0.2, -1.0, 2.0], [3.0, 0.0, -5.0]]).sign(), [[-1, -1, 1], [1, 0, -1]])
    out = rg.tensor([[-0.0, 0.0]]).sign().numpy()
    assert not np.signbit(out).any(), out  # -0.0 maps to +0.0, bit for bit


def test_trunc():
    approx(rg.tensor([[2.3, -1.7, 0.5], [-0.5, 3.9, -4.2]]).trunc(), [[2, -1, 0], [0, 3, -4]])
    approx(rg.tensor([1.7, 2.9, 3.1, 4.5]).trunc(), [1, 2, 3, 4])
    approx(rg.tensor([-1.7, -2.9, -3.1, -4.5]).trunc(), [-1, -2, -3, -4])
    v = rg.tensor([0.0, -0.0, math.inf, -math.inf, math.nan]).trunc().numpy()
    assert v[0] == 0 and not np.signbit(v[0])
    assert v[1] == 0 and np.signbit(v[1])
    assert v[2] == math.inf and v[3] == -math.inf and np.isnan(v[4])


def test_flip():
    t = arange_f(24, (2, 3, 4))
    expected = [
        [[15, 14, 13, 12], [19, 18, 17, 16], [23, 22, 21, 20]],
        [[3, 2, 1, 0], [7, 6, 5, 4], [11, 10, 9, 8]],
    ]
    eq(t.flip([0, 2]), expected)
    eq(t.flip([]), t)
    with pytest.raises(rg.ShapeError):
        rg.arange(0, 24).reshape((2, 3, 4)).flip([0, 0, 1])
    with pytest.raises(rg.ShapeError):
        rg.arange(0, 24).reshape((2, 3, 4)).flip([3, 0, 1])


# ---- permute.rs, flatten.rs, narrow.rs, chunk.rs, stack.rs, tri.rs ---------------------------


def test_permute():
    t = arange_f(16, (2, 2, 4))
    expected = [[[0, 8], [4, 12]], [[1, 9], [5, 13]], [[2, 10], [6, 14]], [[3, 11], [7, 15]]]
    eq(t.permute([2, 1, 0]), expected)
    eq(t.permute([-1, 1, 0]), expected)
    eq(t.permute([0, 1, 2]), t)
    t = arange_f(24, (2, 3, 4))
    expected = [
        [[0, 12], [4, 16], [8, 20]],
        [[1, 13], [5, 17], [9, 21]],
        [[2, 14], [6, 18], [10, 22]],
        [[3, 15], [7, 19], [11, 23]],
    ]
    eq(t.permute([2, 1, 0]), expected)
    eq(t.permute([-1, 1, 0]), expected)


def test_flatten():
    t = rg.ones((2, 3, 4, 5))
    assert t.flatten(0, 3).shape == (120,)
    assert t.flatten(1, 2).shape == (2, 12, 5)
    assert t.flatten(0, 2).shape == (24, 5)
    assert t.flatten(1, 3).shape == (2, 60)
    assert t.flatten(-3, -1).shape == (2, 60)
    with pytest.raises(rg.ShapeError):
        t.flatten(2, 0)


NARROW_INPUT = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]]


def test_narrow():
    t = rg.tensor(NARROW_INPUT)
    eq(t.narrow(0, 0, 2), [[1, 2, 3], [4, 5, 6]])
    eq(t.narrow(1, 1, 2), [[2, 3], [5, 6], [8, 9]])
    eq(arange_f(64, (8, 8)).narrow(0, 3, 4), np.arange(24, 56).reshape(4, 8))


@pytest.mark.parametrize("args", [(2, 0, 2), (0, 3, 2), (0, 0, 4)])
def test_narrow_invalid(args):
    with pytest.raises(rg.RetrogradError):
        rg.tensor(NARROW_INPUT).narrow(*args)


def test_chunk():
    parts = rg.arange(0, 12).float().chunk(6, 0)
    assert len(parts) == 6
    for i, p in enumerate(parts):
        eq(p, [2 * i, 2 * i + 1])
    parts = rg.arange(0, 11).float().chunk(6, 0)
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10]]
    assert [p.shape[0] for p in rg.arange(0, 100).float().chunk(8, 0)] == [13] * 7 + [9]
    assert [p.tolist() for p in rg.arange(0, 6).float().chunk(7, 0)] == [[i] for i in range(6)]
    with pytest.raises(rg.ShapeError):
        rg.arange(0, 12).chunk(6, 1)


def test_stack():
    t1, t2 = rg.tensor([[1.0, 2.0, 3.0]]), rg.tensor([[4.0, 5.0, 6.0]])
    eq(rg.stack([t1, t2], 0), [[[1, 2, 3]], [[4, 5, 6]]])
    eq(rg.stack([t1, t2], 1), [[[1, 2, 3], [4, 5, 6]]])
    a = rg.tensor([[[1.0, 2.0, 3.0]], [[1.1, 2.1, 3.1]]])
    b = rg.tensor([[[4.0, 5.0, 6.0]], [[4.1, 5.1, 6.1]]])
    eq(rg.stack([a, b], 0), np.stack([np.asarray(a), np.asarray(b)]))
    with pytest.raises(rg.ShapeError):
        rg.stack([rg.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]), rg.tensor([[4.0, 5.0]])], 0)
    with pytest.raises(rg.RetrogradError):
        rg.stack([], 0)
    with pytest.raises(rg.ShapeError):
        rg.stack([a, rg.tensor([[[4.0, 5.0, 6.0]]])], 3)


def test_tri():
    eq(rg.ones((3, 3)).triu(0), [[1, 1, 1], [0, 1, 1], [0, 0, 1]], "float32")
    eq(rg.ones((3, 3), dtype="int64").triu(1), [[0, 1, 1], [0, 0, 1], [0, 0, 0]], "int64")
    eq(rg.triu(rg.ones((3, 3)), 1), [[0, 1, 1], [0, 0, 1], [0, 0, 0]])
    eq(rg.ones((3, 3)).tril(0), [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    eq(rg.ones((3, 3)).tril(-1), [[0, 0, 0], [1, 0, 0], [1, 1, 0]])


def test_tri_int_batched_and_too_few_dims():
    ones = rg.ones((3, 3), dtype="int64")
    eq(ones.triu(-1), [[1, 1, 1], [1, 1, 1], [0, 1, 1]], "int64")
    eq(ones.tril(1), [[1, 1, 0], [1, 1, 1], [1, 1, 1]], "int64")
    batch = rg.ones((2, 1, 4, 4), dtype="int64")
    eq(batch.triu(1), np.broadcast_to(np.triu(np.ones((4, 4)), 1), (2, 1, 4, 4)))
    eq(batch.tril(1), np.broadcast_to(np.tril(np.ones((4, 4)), 1), (2, 1, 4, 4)))
    for op in ("triu", "tril"):
        with pytest.raises(rg.ShapeError):
            getattr(rg.tensor([1, 2, 3]), op)(0)


# ---- cat.rs, expand.rs, repeat.rs, repeat_dim.rs ---------------------------------------------
# Burn's larger expected arrays are written here as the NumPy expression that spells them out
# (np.tile, broadcast_to); the values are the ones its source lists.


def test_cat():
    t1, t2 = rg.tensor([[1.0, 2.0, 3.0]]), rg.tensor([[4.0, 5.0, 6.0]])
    approx(rg.cat([t1, t2], 0), [[1, 2, 3], [4, 5, 6]])
    approx(rg.cat([t1, t2], 1), [[1, 2, 3, 4, 5, 6]])
    a = rg.tensor([[[1.0, 2.0, 3.0]], [[1.1, 2.1, 3.1]]])
    b = rg.tensor([[[4.0, 5.0, 6.0]]])
    expected = [[[1.0, 2.0, 3.0]], [[1.1, 2.1, 3.1]], [[4.0, 5.0, 6.0]]]
    approx(rg.cat([a, b], 0), expected)
    approx(rg.cat([a.cast("float32"), b.cast("float32")], 0), expected)
    with pytest.raises(rg.ShapeError):
        rg.cat([rg.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]), rg.tensor([[4.0, 5.0]])], 0)
    with pytest.raises(rg.RetrogradError):
        rg.cat([], 0)
    with pytest.raises(rg.ShapeError):
        rg.cat([a, b], 3)


def test_cat_with_empty_tensors():
    t1 = rg.tensor([[1.0, 2.0, 3.0]])
    approx(rg.cat([t1, rg.zeros((1, 0))], 1), [[1, 2, 3]])
    approx(rg.cat([rg.zeros((1, 0)), rg.tensor([[4.0, 5.0, 6.0]])], 1), [[4, 5, 6]])
    parts = [rg.zeros((2, 0)), rg.tensor([[1.0, 2.0], [3.0, 4.0]]), rg.zeros((2, 0))]
    approx(rg.cat([*parts, rg.tensor([[5.0], [6.0]])], 1), [[1, 2, 5], [3, 4, 6]])
    assert rg.cat([rg.zeros((2, 0)), rg.zeros((2, 0))], 1).shape == (2, 0)


def test_expand():
    eq(rg.tensor([1.0, 2.0, 3.0]).expand([3, 3]), [[1, 2, 3]] * 3)
    eq(rg.tensor([4.0, 7.0, 2.0, 3.0]).expand([2, 4]), [[4, 7, 2, 3]] * 2)
    m = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    eq(m.expand([3, 2, 2]), [[[1, 2], [3, 4]]] * 3)
    eq(rg.tensor([[1.0, 2.0, 3.0, 4.0]]).expand([2, 3, 4]), np.ones((2, 3, 1)) * [1, 2, 3, 4])
    eq(m.expand([3, 2, 2]).sum_dim(0), [[[3, 6], [9, 12]]])
    eq(rg.tensor([1.0]).expand([2, 3]), np.ones((2, 3)))
    with pytest.raises(rg.ShapeError):
        rg.tensor([1.0, 2.0, 3.0]).expand([2, 2])
    eq(m.transpose().expand([3, 2, 2]), [[[1, 3], [2, 4]]] * 3)
    eq(rg.tensor([1.0, 2.0, 3.0]).flip([0]).expand([2, 3]), [[3, 2, 1]] * 2)
    eq(m.flip([0]).expand([3, 2, 2]), [[[3, 4], [1, 2]]] * 3)
    eq(rg.tensor([0.0, 1.0, 2.0, 3.0, 4.0]).narrow(0, 1, 3).expand([2, 3]), [[1, 2, 3]] * 2)


def test_repeat():
    # Burn's first case, ``[[0, 1, 2]].repeat(&[4, 1, 1])`` -> shape [4, 3], drops the surplus
    # repeat count; ``repeat`` is not in API.md, so it keeps torch's meaning (section 10): the
    # extra count adds a leading dimension, shape [4, 1, 3].
    eq(rg.tensor([[0.0, 1.0, 2.0]]).repeat([4, 1, 1]), [[[0, 1, 2]]] * 4)
    data = np.arange(1, 17, dtype=np.float32).reshape(4, 2, 2)
    eq(rg.tensor(data).repeat([2, 3, 2]), np.tile(data, (2, 3, 2)))
    assert rg.ones((2, 3, 4)).repeat([1, 0, 2]).shape == (2, 0, 8)


def test_repeat_dim():
    eq(rg.tensor(np.array([[0.0, 1.0, 2.0]])).repeat_dim(0, 4), [[0, 1, 2]] * 4)
    data = np.arange(1, 17, dtype=np.float32).reshape(4, 2, 2)
    eq(rg.tensor(data).repeat_dim(2, 2), np.tile(data, (1, 1, 2)))
    t = arange_f(16, (4, 1, 4)).swap_dims(0, 2).repeat_dim(1, 4)
    eq(t, np.broadcast_to(np.arange(16).reshape(4, 1, 4).swapaxes(0, 2), (4, 4, 4)))
    eq(t[0], [[0, 4, 8, 12]] * 4)
    t = arange_f(16, (2, 2, 1, 4)).swap_dims(0, 1).repeat_dim(2, 4)
    eq(t[0, 1], [[8, 9, 10, 11]] * 4)
    eq(t[1, 0], [[4, 5, 6, 7]] * 4)
    eq(t, np.tile(np.arange(16).reshape(2, 2, 1, 4).swapaxes(0, 1), (1, 1, 4, 1)))
    t = arange_f(16, (1, 2, 2, 4)).swap_dims(0, 2).swap_dims(1, 3).repeat_dim(2, 4)
    eq(t[1, 3], [[7, 15]] * 4)
    eq(t, np.tile(np.arange(16).reshape(1, 2, 2, 4).swapaxes(0, 2).swapaxes(1, 3), (1, 1, 4, 1)))
    assert rg.ones((2, 3, 4)).repeat_dim(2, 0).shape == (2, 3, 0)
    view = rg.tensor([1.0, 2.0, 3.0]).unsqueeze_dim(1).repeat_dim(1, 1).unsqueeze_dim(2)
    eq(view, [[[1]], [[2]], [[3]]])


# ---- reshape.rs, transpose.rs, squeeze.rs, movedim.rs ----------------------------------------


def test_reshape():
    assert rg.tensor([0.0, 1.0, 2.0]).ndim == 1
    assert rg.tensor([[0.0, 1.0, 2.0]]).ndim == 2
    eq(rg.tensor([0.0, 1.0, 2.0]).reshape([1, 3]), [[0, 1, 2]])
    eq(rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]).reshape([6]), [0, 1, 2, 3, 4, 5])


def test_reshape_dim_inference():
    # Burn's 0 keeps the input's size at that position (torch has no such form; a literal 0
    # can never hold for a tensor with elements, so the two do not collide).
    t = arange_f(12, (4, 3))
    r = t.reshape([2, -1])
    assert r.shape == (2, 6)
    assert r.reshape([0, 2, -1]).shape == (2, 2, 3)
    assert t.reshape([-1]).shape == (12,)
    assert t.reshape([0, 3]).shape == (4, 3)
    eq(r.reshape([0, 2, -1]), np.arange(12).reshape(2, 2, 3))
    assert rg.zeros((0, 5)).reshape([0, 5]).shape == (0, 5)  # torch's empty dimension stays


def test_reshape_does_not_corrupt_after_slice():
    zeros = rg.zeros((2,))
    zeros.slice([(1, 2)]).reshape([1]).exp()
    eq(zeros, [0, 0])


@pytest.mark.parametrize("shape", [[-1, -1], [-2, -1]])
def test_reshape_invalid(shape):
    with pytest.raises(rg.ShapeError):
        rg.tensor([0.0, 1.0, 2.0]).reshape(shape)


TRANSPOSE_INPUT = [[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], [[6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]]


def test_transpose_and_swap_dims():
    t = rg.tensor(TRANSPOSE_INPUT)
    expected = [[[0, 3], [1, 4], [2, 5]], [[6, 9], [7, 10], [8, 11]]]
    approx(t.transpose(), expected)
    ones = rg.ones((1, 1, 1))
    approx(t.transpose(), expected)
    approx(ones, [[[1.0]]])
    approx(t.swap_dims(0, 0), TRANSPOSE_INPUT)
    swapped = [[[0, 6], [3, 9]], [[1, 7], [4, 10]], [[2, 8], [5, 11]]]
    approx(t.swap_dims(0, 2), swapped)
    approx(t.swap_dims(-3, -1), swapped)


def test_squeeze():
    assert rg.ones((2, 1, 4)).squeeze_dim(1).shape == (2, 4)
    assert rg.ones((2, 1, 4)).squeeze().shape == (2, 4)
    assert rg.ones((1, 3, 4, 5)).squeeze_dim(0).shape == (3, 4, 5)
    assert rg.ones((2, 3, 4, 1)).squeeze_dim(3).shape == (2, 3, 4)
    with pytest.raises(rg.ShapeError):
        rg.ones((2, 3, 4, 5)).squeeze_dim(2)
    assert rg.ones((1, 3, 1)).squeeze().shape == (3,)
    # Burn refuses a squeeze to rank 0 (its ranks are static); a 0-d tensor is fine here.
    assert rg.ones((1, 1, 1)).squeeze().shape == ()


def test_squeeze_dims():
    assert rg.ones((1, 1, 3)).squeeze_dims([]).shape == (3,)
    assert rg.ones((1, 3, 1, 5)).squeeze_dims([0, 2]).shape == (3, 5)
    assert rg.ones((2, 1, 3, 1)).squeeze_dims([-3, -1]).shape == (2, 3)
    eq(rg.tensor([[[1.0], [2.0]]]).squeeze_dims([]), [1, 2])
    with pytest.raises(rg.ShapeError, match="squeeze_dims"):
        rg.ones((2, 3, 4)).squeeze_dims([1])


def test_unsqueeze_dim():
    assert rg.ones((2, 4, 1)).unsqueeze_dim(1).shape == (2, 1, 4, 1)
    assert rg.ones((2, 3, 4, 5)).unsqueeze_dim(0).shape == (1, 2, 3, 4, 5)
    assert rg.ones((5, 4, 3, 2)).unsqueeze_dim(4).shape == (5, 4, 3, 2, 1)
    with pytest.raises(rg.ShapeError):
        rg.ones((2, 3, 4, 5)).unsqueeze_dim(5)


@pytest.mark.parametrize(
    "shape,dims,expected",
    [
        ((3, 4, 5), [1, -2], (3, 1, 4, 1, 5)),
        ((3, 4, 5), [0, 4], (1, 3, 4, 5, 1)),
        ((3, 4, 5), [1], (3, 1, 4, 5)),
        ((3, 4, 5), [0, -1, -1], (1, 3, 4, 5, 1, 1)),
        ((3, 4, 5), [0, 1, 3], (1, 1, 3, 1, 4, 5)),
        ((4,), [-1, 0, 0], (1, 1, 4, 1)),
        ((5,), [0, 0], (1, 1, 5)),
        ((5,), [1, 1, 1], (5, 1, 1, 1)),
    ],
)
def test_unsqueeze_dims(shape, dims, expected):
    out = rg.arange(0, math.prod(shape)).float().reshape(shape).unsqueeze_dims(dims)
    assert out.shape == expected
    eq(out.flatten(0, -1), np.arange(math.prod(shape)))


@pytest.mark.parametrize("shape,dims", [((3, 4, 5), [0, -6]), ((4,), [2, 2])])
def test_unsqueeze_dims_invalid(shape, dims):
    with pytest.raises(rg.ShapeError, match="unsqueeze_dims"):
        rg.ones(shape).unsqueeze_dims(dims)


def test_unsqueeze_dims_gradient():
    x = rg.tensor([[1.0, 2.0], [3.0, 4.0]]).require_grad()
    y = x.unsqueeze_dims([0, -1])
    assert y.shape == (1, 2, 2, 1)
    g = x.grad((y * y).sum().backward())
    approx(g, [[2, 4], [6, 8]])


def test_movedim():
    t = arange_f(24, (2, 3, 4))
    expected = np.arange(24).reshape(2, 3, 4).transpose(1, 2, 0)
    eq(expected[0], [[0, 12], [1, 13], [2, 14], [3, 15]])
    eq(t.movedim(0, 2), expected)
    eq(t.movedim(0, -1), expected)
    eq(t.movedim(0, 0), t)
    expected = [
        [[0, 1, 2, 3], [12, 13, 14, 15]],
        [[4, 5, 6, 7], [16, 17, 18, 19]],
        [[8, 9, 10, 11], [20, 21, 22, 23]],
    ]
    eq(t.movedim([0, 1], [1, 0]), expected)
    eq(t.movedim([-3, -2], [-2, -3]), expected)
    eq(t.movedim([0, 1], [0, 1]), t)
    i = rg.arange(0, 24).reshape((2, 3, 4))
    for src, dst in [([0, 1], [0]), (0, 100), ([0, 1, 1, 1, 1], [0, 0, 1]), ([0, 100], [0, 1])]:
        with pytest.raises(rg.ShapeError):
            i.movedim(src, dst)


# ---- split.rs, gather_scatter.rs -------------------------------------------------------------


def parts(tensors):
    return [t.tolist() for t in tensors]


def test_split():
    t = rg.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0], [8.0, 9.0], [10.0, 11.0]])
    assert parts(t.split(2, 0)) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9], [10, 11]]]
    assert parts(t[:5].split(2, 0)) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8, 9]]]
    t = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    assert parts(t.split(2, 1)) == [[[0, 1], [3, 4]], [[2], [5]]]
    assert parts(rg.tensor([0.0, 1.0, 2.0, 3.0, 4.0]).split(10, 0)) == [[0, 1, 2, 3, 4]]
    t = arange_f(16, (4, 2, 2))
    assert parts(t.split(2, 0)) == [
        np.arange(8).reshape(2, 2, 2).tolist(),
        np.arange(8, 16).reshape(2, 2, 2).tolist(),
    ]
    t = arange_f(12, (2, 3, 2))
    assert parts(t.split(2, 1)) == [[[[0, 1], [2, 3]], [[6, 7], [8, 9]]], [[[4, 5]], [[10, 11]]]]


def test_split_empty():
    # Burn gives no pieces for an empty tensor; ``split`` keeps torch's meaning (API.md
    # sections 2 and 8): one empty piece, and a split size of 0 is allowed there.
    assert [p.shape for p in rg.tensor([]).split(1, 0)] == [(0,)]
    assert [p.shape for p in rg.tensor([]).split(0, 0)] == [(0,)]
    with pytest.raises(rg.ShapeError, match="split_size must be positive"):
        rg.tensor([0.0, 1.0, 2.0, 3.0, 4.0]).split(0, 0)


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.split(1, 2),
        lambda t: t.split(1, -2),
        lambda t: t.split_with_sizes([1, 2], -2),
    ],
)
def test_split_invalid_dim(call):
    with pytest.raises(rg.ShapeError):
        call(rg.tensor([0.0, 1.0, 2.0]))


def test_split_with_sizes():
    t = rg.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    assert parts(t.split_with_sizes([2, 3, 1], 0)) == [[0, 1], [2, 3, 4], [5]]
    with pytest.raises(rg.ShapeError):
        t.split_with_sizes([2, 2, 1], 0)
    # Burn drops the zero-length piece; torch (whose name this is) keeps it.
    assert parts(rg.tensor([0.0, 1.0, 2.0]).split_with_sizes([0, 1, 2], 0)) == [[], [0], [1, 2]]


def test_gather():
    idx = rg.tensor
    eq(rg.tensor([0.0, 1.0, 2.0]).gather(0, idx([1, 1, 0, 1, 2])), [1, 1, 0, 1, 2])
    m = rg.tensor([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(m.gather(0, idx([[0, 1, 0], [1, 0, 1]])), [[0, 4, 2], [3, 1, 5]])
    eq(m.gather(1, idx([[2, 1, 0, 0], [2, 0, 1, 2]])), [[2, 1, 0, 0], [5, 3, 4, 5]])
    eq(m.gather(1, idx([[1, 2]]).reshape([2, 1])), [[1], [5]])
    t = rg.tensor(TRANSPOSE_INPUT)
    eq(
        t.gather(1, idx([[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [0, 1, 1]]])),
        [[[3, 1, 2], [0, 4, 2]], [[6, 7, 11], [6, 10, 11]]],
    )


def test_scatter():
    idx = rg.tensor
    out = rg.zeros((3,)).scatter(0, idx([1, 0, 2]), rg.tensor([5.0, 4.0, 3.0]), "add")
    eq(out, [4, 5, 3])
    out = rg.tensor([10.0, 20.0, 30.0, 40.0]).scatter(
        0, idx([1, 3]), rg.tensor([7.0, 50.0]), "assign"
    )
    eq(out, [10, 7, 30, 50])
    values = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    base = rg.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    eq(base.scatter(0, idx([[1, 0, 1], [0, 1, 0]]), values, "assign"), [[4, 2, 6], [1, 5, 3]])
    zeros = rg.zeros((2, 3))
    eq(zeros.scatter(0, idx([[1, 0, 1], [1, 1, 0]]), values, "add"), [[0, 2, 6], [5, 5, 3]])
    eq(zeros.scatter(1, idx([[1, 0, 2], [1, 2, 0]]), values, "add"), [[2, 1, 3], [6, 4, 5]])
    t = rg.tensor(TRANSPOSE_INPUT)
    v = t + 12.0
    out = t.scatter(1, idx([[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [0, 1, 1]]]), v, "add")
    eq(out, [[[15, 14, 33], [15, 20, 5]], [[45, 26, 8], [9, 32, 54]]])
    eq(zeros.scatter(1, idx([[1], [2]]), rg.tensor([[1.0], [4.0]]), "add"), [[0, 1, 0], [0, 0, 4]])
    with pytest.raises(rg.RetrogradError):
        rg.zeros((3,)).scatter(0, idx([1, 0, 2]), rg.tensor([5.0, 4.0]), "add")
    base = rg.tensor([[[1.0]], [[2.0]], [[3.0]], [[4.0]]])
    index = idx([2, 0]).unsqueeze_dim(1).repeat_dim(1, 1).unsqueeze_dim(2).repeat_dim(2, 1)
    eq(
        base.scatter(0, index, rg.tensor([[[10.0]], [[20.0]]]), "add"),
        [[[21]], [[2]], [[13]], [[4]]],
    )


# ---- select.rs, mask.rs ----------------------------------------------------------------------

SELECT_2D = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


def test_select():
    idx = rg.tensor
    eq(rg.tensor([0.0, 1.0, 2.0]).select(0, idx([1, 1, 0, 1, 2])), [1, 1, 0, 1, 2])
    m = rg.tensor(SELECT_2D)
    eq(m.select(0, idx([1, 0])), [[3, 4, 5], [0, 1, 2]])
    eq(m.select(0, idx([1, 0, 1, 1])), [[3, 4, 5], [0, 1, 2], [3, 4, 5], [3, 4, 5]])
    four = rg.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]])
    eq(four.select(0, idx([1, 0, 3, 2])), [[2, 3], [0, 1], [6, 7], [4, 5]])
    eq(m.select(1, idx([1, 1, 0, 1, 2])), [[1, 1, 0, 1, 2], [4, 4, 3, 4, 5]])
    t = rg.tensor([[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]])
    t = rg.cat([t, -t], 0)
    eq(
        t.select(1, idx([1, 0, 3, 2])),
        [[[3, 4], [1, 2], [7, 8], [5, 6]], [[-3, -4], [-1, -2], [-7, -8], [-5, -6]]],
    )
    eq(m.select(-1, idx([1, 0, 2])), m.select(1, idx([1, 0, 2])))
    with pytest.raises(rg.ShapeError):
        m.select(10, idx([1, 1, 0, 1, 2]))
    with pytest.raises(rg.ShapeError):
        rg.tensor([[1.0, 2.0], [3.0, 4.0]]).select(-3, idx([0, 1]))
    # Burn ignores this case ("empty dims support is sparse"); torch's answer is [0, 2].
    assert rg.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]).select(
        0, rg.tensor(np.zeros(0, dtype=np.int64))
    ).shape == (0, 2)


def test_select_assign():
    idx = rg.tensor
    out = rg.tensor([0.0, 1.0, 2.0]).select_assign(
        0, idx([1, 1, 0, 1, 2]), rg.tensor([5.0, 4.0, 3.0, 2.0, 1.0]), "add"
    )
    eq(out, [3, 12, 3])
    base = rg.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]])
    out = base.select_assign(0, idx([2, 0]), rg.tensor([[5.0, 70.0], [80.0, 1.0]]), "assign")
    eq(out, [[80, 1], [30, 40], [5, 70]])
    base = rg.tensor([[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]])
    out = base.select_assign(1, idx([2, 0]), rg.tensor([[7.0, 8.0], [9.0, 10.0]]), "assign")
    eq(out, [[8, 20, 7], [10, 50, 9]])
    out = rg.tensor([7, 8, 9]).select_assign(
        0, idx([1, 1, 0, 1, 2]), rg.tensor([5, 4, 3, 2, 1]), "add"
    )
    eq(out, [10, 19, 10], "int64")
    m = rg.tensor(SELECT_2D)
    values = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(m.select_assign(0, idx([1, 0]), values, "add"), [[4, 6, 8], [4, 6, 8]])
    eq(m.select_assign(1, idx([1, 0, 2]), values, "add"), [[2, 2, 5], [8, 8, 11]])
    v2 = rg.tensor([[1.0, 2.0], [3.0, 4.0]])
    eq(m.select_assign(-1, idx([0, 2]), v2, "add"), m.select_assign(1, idx([0, 2]), v2, "add"))
    with pytest.raises(rg.ShapeError):
        rg.tensor([[1.0, 2.0], [3.0, 4.0]]).select_assign(
            -3, idx([0]), rg.tensor([[5.0], [6.0]]), "add"
        )


def test_select_assign_bool_matches_int_path():
    t = rg.tensor([True, False, True])
    values = rg.tensor([False, True, True])
    indices = rg.tensor([0, 1, 0])
    expected = t.int().select_assign(0, indices, values.int(), "add").greater_elem(0)
    eq(expected, [True, True, True])
    eq(t.select_assign(0, indices, values, "add"), expected, "bool")


def test_mask_fill_and_where():
    t = arange_f(16, (2, 2, 4)).swap_dims(0, 2)
    eq(
        t.mask_fill(t.lower_equal_elem(5.0), -5.0),
        [[[-5, 8], [-5, 12]], [[-5, 9], [-5, 13]], [[-5, 10], [6, 14]], [[-5, 11], [7, 15]]],
    )
    x = rg.tensor([[1.0, 7.0], [2.0, 3.0]])
    mask = rg.tensor([[True, False], [False, True]])
    eq(
        x.mask_where(mask, rg.tensor([[1.8, 2.8], [3.8, 4.8]])),
        np.array([[1.8, 7.0], [2.0, 4.8]], dtype=np.float32),
    )
    eq(x.mask_fill(mask, 2.0), [[2, 7], [2, 2]])
    big_mask = rg.tensor(
        [
            [[True, False], [False, True]],
            [[False, True], [True, False]],
            [[False, False], [False, False]],
            [[True, True], [True, True]],
        ]
    )
    base = rg.arange(2, 6).reshape((1, 2, 2)).float()
    eq(
        base.mask_where(big_mask, rg.ones((4, 2, 2))),
        [[[1, 3], [4, 1]], [[2, 1], [1, 5]], [[2, 3], [4, 5]], [[1, 1], [1, 1]]],
    )
    eq(rg.arange(2, 4).float().mask_where(rg.tensor([True, False]), rg.ones((1,))), [1, 3])
    nans = rg.full((3, 3), math.nan)
    m = rg.tensor([[True, True, True], [True, True, False], [False, False, False]])
    v = rg.tensor([[0.9, 0.8, 0.7], [0.6, 0.5, 0.4], [0.3, 0.2, 0.1]])
    nan = math.nan
    approx(nans.mask_where(m, v), [[0.9, 0.8, 0.7], [0.6, 0.5, nan], [nan, nan, nan]])
    eq(
        rg.zeros((1, 4, 2, 2)).mask_fill(rg.tensor([[[[True, False], [False, True]]]]), 2.0),
        np.broadcast_to([[2, 0], [0, 2]], (1, 4, 2, 2)),
    )
    eq(rg.full((2, 2), -math.inf).mask_fill(mask, 10.0), [[10, -math.inf], [-math.inf, 10]])


def test_mask_on_strided_inputs():
    eq(
        rg.tensor([[1.0, 2.0], [3.0, 4.0]])
        .transpose()
        .mask_fill(rg.tensor([[True, False], [False, True]]), 0.0),
        [[0, 3], [2, 0]],
    )
    flipped = rg.tensor([1.0, 2.0, 3.0, 4.0]).flip([0])
    eq(flipped.mask_fill(rg.tensor([True, True, False, False]), 0.0), [0, 0, 2, 1])
    eq(
        rg.tensor([1.0, 2.0, 3.0, 4.0]).mask_fill(
            rg.tensor([False, False, True, True]).flip([0]), 0.0
        ),
        [0, 0, 3, 4],
    )
    eq(
        rg.tensor([[1.0, 2.0], [3.0, 4.0]])
        .flip([0])
        .mask_where(
            rg.tensor([[True, False], [False, True]]), rg.tensor([[10.0, 20.0], [30.0, 40.0]])
        ),
        [[10, 4], [1, 40]],
    )
    eq(flipped.mask_fill(rg.tensor([True, False, True, False]).flip([0]), 0.0), [4, 0, 2, 0])
    eq(
        rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
        .narrow(0, 1, 4)
        .mask_fill(rg.tensor([True, False, False, True]), 0.0),
        [0, 3, 4, 0],
    )


# ---- slice.rs (API.md: one (start, end) pair or slice per leading dim; Burn's ``s![a..b;k]``
# is ``slice(a, b, k)``, whose negative step walks [a, b) backwards) ---------------------------

SLICE_2D = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
STEP_2D = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]]


def test_slice_dim():
    t = rg.tensor([0.0, 1.0, 2.0])
    eq(t.slice_dim(0, slice(-2, None)), [1, 2])
    eq(t.slice_dim(0, slice(1, None, 1)), [1, 2])
    with pytest.raises(rg.ShapeError):
        t.slice_dim(1, slice(1, None))
    with pytest.raises(rg.ShapeError):
        t.slice_dim(-2, slice(1, None))
    eq(rg.tensor(SLICE_2D).slice_dim(1, slice(1, None)), [[1, 2], [4, 5]])
    m = rg.tensor([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]])
    eq(m.slice_dim(1, slice(0, 4, 2)), [[0, 2], [4, 6]])
    eq(rg.tensor(SLICE_2D).slice_dim(1, slice(None, None, -1)), [[2, 1, 0], [5, 4, 3]])


def test_slice():
    t = rg.tensor([0.0, 1.0, 2.0])
    eq(t.slice([(0, 3)]), [0, 1, 2])
    eq(t.slice([(1, 3)]), [1, 2])
    m = rg.tensor(SLICE_2D)
    eq(m.slice([(0, 2)]), SLICE_2D)
    eq(m.slice([(0, 2), (0, 3)]), SLICE_2D)
    eq(m.slice([(0, 2), (0, 2)]), [[0, 1], [3, 4]])
    eq(m.slice((0, 1)), [[0, 1, 2]])
    c = rg.tensor(TRANSPOSE_INPUT)
    eq(c.slice([(1, 2), (1, 2), (0, 2)]), [[[9, 10]]])
    eq(c.transpose().slice([(1, 2), (1, 2), (0, 2)]), [[[7, 10]]])


def test_slice_negative_and_missing_dims():
    m = rg.tensor(SLICE_2D)
    eq(m.slice([(0, 1), (0, 1)]), [[0]])
    eq(m.slice([(0, -1), (0, -2)]), [[0]])
    eq(m.slice([(0, 1), slice(None)]), [[0, 1, 2]])
    eq(m.slice([slice(None), (0, 2)]), [[0, 1], [3, 4]])
    eq(m.slice([slice(None), slice(None)]), SLICE_2D)
    mean = rg.tensor([0.0, 1.0, 2.0]).mean().reshape([1])
    eq(mean.slice([(0, 1)]), [1.0])


def test_slice_past_the_end_is_an_error():
    # Burn now clamps ``slice([0..4])`` on a size-3 dimension; API.md fixes the error.
    with pytest.raises(IndexError):
        rg.tensor([0.0, 1.0, 2.0]).slice([(0, 4)])
    with pytest.raises(rg.RetrogradError):
        rg.tensor(SLICE_2D).slice([(0, 4), (0, 4)])
    with pytest.raises(rg.ShapeError):
        rg.tensor([0.0, 1.0, 2.0]).slice([(0, 1), (0, 1)])


def test_slice_empty():
    t = rg.tensor([0.0, 1.0, 2.0])
    assert t.slice([(2, 1)]).shape == (0,)
    assert t.slice([(1, 1)]).shape == (0,)
    m = rg.tensor(SLICE_2D)
    assert m.slice([(1, 1), (0, 3)]).shape == (0, 3)
    assert m.slice([(0, 2), (2, 2)]).shape == (2, 0)


def test_slice_with_steps():
    t = rg.tensor(STEP_2D)
    eq(t.slice([slice(0, 3, 2)]), [[1, 2, 3, 4], [9, 10, 11, 12]])
    eq(t.slice([slice(None), slice(0, 4, 2)]), [[1, 3], [5, 7], [9, 11]])
    eq(t.slice([slice(0, 3, 2), slice(0, 4, 2)]), [[1, 3], [9, 11]])
    eq(t.slice([slice(0, 3, -1)]), STEP_2D[::-1])
    eq(t.slice([slice(None), slice(0, 4, -1)]), [r[::-1] for r in STEP_2D])
    eq(t.slice([slice(0, 3, -2)]), [[9, 10, 11, 12], [1, 2, 3, 4]])
    eq(t.slice([slice(None), slice(0, 4, -2)]), [[4, 2], [8, 6], [12, 10]])
    eq(t.slice([slice(0, 3, 2), slice(0, 4, -1)]), [[4, 3, 2, 1], [12, 11, 10, 9]])
    eq(t.slice([slice(0, 3, -1), slice(0, 4, 2)]), [[9, 11], [5, 7], [1, 3]])
    v = rg.arange(1, 11).float()
    eq(v.slice([slice(0, 10, 2)]), [1, 3, 5, 7, 9])
    eq(v.slice([slice(0, 10, -1)]), list(range(10, 0, -1)))
    eq(v.slice([slice(2, 8, -2)]), [8, 6, 4])
    c = arange_f(16, (4, 2, 2)) + 1
    eq(c.slice([slice(0, 4, 2), slice(None), slice(None)]), [[[1, 2], [3, 4]], [[9, 10], [11, 12]]])
    eq(
        c.slice([slice(0, 4, -1), slice(0, 2, -1), slice(0, 2, -1)]),
        np.arange(16, 0, -1).reshape(4, 2, 2),
    )


# ---- slice_assign.rs -------------------------------------------------------------------------


def test_slice_assign():
    eq(rg.tensor([0.0, 1.0, 2.0]).slice_assign([(0, 2)], rg.tensor([10.0, 5.0])), [10, 5, 2])
    out = rg.tensor(SLICE_2D).slice_assign([(1, 2), (0, 2)], rg.tensor([[10.0, 5.0]]))
    eq(out, [[0, 1, 2], [10, 5, 5]])
    out = rg.ones((4, 4)).slice_assign([slice(0, 3, 2), slice(None)], rg.zeros((2, 4)))
    eq(out, [[0] * 4, [1] * 4, [0] * 4, [1] * 4])


def test_slice_assign_with_steps():
    t = rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    eq(t.slice_assign([slice(0, 6, 2)], rg.tensor([10.0, 20.0, 30.0])), [10, 2, 20, 4, 30, 6])
    eq(
        t.slice_assign([slice(0, 6, -1)], rg.tensor([60.0, 50.0, 40.0, 30.0, 20.0, 10.0])),
        [10, 20, 30, 40, 50, 60],
    )
    sq = arange_f(16, (4, 4)) + 1
    rows = rg.tensor([[100.0, 101.0, 102.0, 103.0], [200.0, 201.0, 202.0, 203.0]])
    eq(
        sq.slice_assign([slice(0, 4, 2)], rows),
        [[100, 101, 102, 103], [5, 6, 7, 8], [200, 201, 202, 203], [13, 14, 15, 16]],
    )
    cols = rg.tensor([[100.0, 200.0], [101.0, 201.0], [102.0, 202.0], [103.0, 203.0]])
    eq(
        sq.slice_assign([slice(None), slice(0, 4, 2)], cols),
        [[100, 2, 200, 4], [101, 6, 201, 8], [102, 10, 202, 12], [103, 14, 203, 16]],
    )
    eq(
        sq.slice_assign(
            [slice(0, 4, 2), slice(0, 4, 2)], rg.tensor([[100.0, 200.0], [300.0, 400.0]])
        ),
        [[100, 2, 200, 4], [5, 6, 7, 8], [300, 10, 400, 12], [13, 14, 15, 16]],
    )
    eq(
        sq.slice_assign([slice(0, 4, 2), slice(0, 4, -1)], rows),
        [[103, 102, 101, 100], [5, 6, 7, 8], [203, 202, 201, 200], [13, 14, 15, 16]],
    )
    eq(
        sq.slice_assign([slice(0, 4, -1), slice(0, 4, 2)], cols),
        [[103, 2, 203, 4], [102, 6, 202, 8], [101, 10, 201, 12], [100, 14, 200, 16]],
    )
    m = rg.tensor(STEP_2D)
    values = rg.tensor(
        [[30.0, 31.0, 32.0, 33.0], [20.0, 21.0, 22.0, 23.0], [10.0, 11.0, 12.0, 13.0]]
    )
    eq(
        m.slice_assign([slice(0, 3, -1)], values),
        [[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]],
    )
    values = rg.tensor(
        [[40.0, 30.0, 20.0, 10.0], [80.0, 70.0, 60.0, 50.0], [120.0, 110.0, 100.0, 90.0]]
    )
    eq(
        m.slice_assign([slice(None), slice(0, 4, -1)], values),
        [[10, 20, 30, 40], [50, 60, 70, 80], [90, 100, 110, 120]],
    )


def test_slice_assign_3d_and_partial_steps():
    c = arange_f(16, (4, 2, 2)) + 1
    values = rg.tensor([[[100.0, 101.0], [102.0, 103.0]], [[200.0, 201.0], [202.0, 203.0]]])
    eq(
        c.slice_assign([slice(0, 4, 2), slice(None), slice(None)], values),
        [
            [[100, 101], [102, 103]],
            [[5, 6], [7, 8]],
            [[200, 201], [202, 203]],
            [[13, 14], [15, 16]],
        ],
    )
    values = rg.tensor(np.arange(400, 384, -1, dtype=np.float32).reshape(4, 2, 2))
    eq(
        c.slice_assign([slice(0, 4, -1), slice(0, 2, -1), slice(0, 2, -1)], values),
        np.arange(385, 401).reshape(4, 2, 2),
    )
    five = arange_f(25, (5, 5)) + 1
    out = five.slice_assign(
        [slice(1, 4, 2), slice(1, 4, 2)], rg.tensor([[100.0, 200.0], [300.0, 400.0]])
    )
    expected = np.arange(1, 26, dtype=np.float32).reshape(5, 5)
    expected[1, 1], expected[1, 3], expected[3, 1], expected[3, 3] = 100, 200, 300, 400
    eq(out, expected)


def test_slice_assign_empty_and_single_index():
    m = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(m.slice_assign([(0, 2), (1, 1)], rg.zeros((2, 0))), m)
    v = rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    eq(v.slice_assign([(2, 2)], rg.zeros((0,))), v)
    # Burn's ``s![1]`` is the range 1..2 with the dimension kept
    out = rg.ones((2, 3, 1)).slice_assign([1], rg.zeros((1, 3, 1)))
    eq(out, [[[1], [1], [1]], [[0], [0], [0]]])
    assert rg.ones((2, 3, 1)).slice([-1]).shape == (1, 3, 1)
    with pytest.raises(IndexError):
        rg.ones((2, 3, 1)).slice([2])


def test_slice_takes_python_ranges():
    # Burn's ``a..b`` ranges: a Python range per dimension (or one for the first)
    t = arange_f(12, (3, 4))
    eq(t.slice([range(1, 3), range(0, 4, 2)]), [[4, 6], [8, 10]])
    eq(t.slice(range(0, 2)), [[0, 1, 2, 3], [4, 5, 6, 7]])
    eq(t.slice_assign([range(0, 1)], rg.zeros((1, 4))), [[0] * 4, [4, 5, 6, 7], [8, 9, 10, 11]])
