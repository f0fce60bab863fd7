"""Burn's tensor tests that call ops under Burn's own names (``crates/burn-backend-tests/tests/
tensor``, tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747): ``max_dims``,
``max_abs``, ``max_pair``, ``sum_dims``, ``prod_dims``, ``var_mean``, ``var_bias``,
``median_with_indices``, ``sort_descending``, ``argtopk``, ``is_close``/``all_close``,
``fmod_scalar``, ``roll_dim``, ``one_hot_fill``, ``categorical``, ``slice_fill``,
``select_dim``, ``bool_and``/``bool_or``/``bool_xor``/``bool_not``, ``bitwise_*_scalar``,
``empty_like``, ``rank``, and the activations ``hard_sigmoid(alpha, beta)``,
``quiet_softmax`` and ``thresholded_relu`` (also in ``rg.nn.functional``). The earlier ports
left them out as names API.md does not give; retrograd now has them
(``tensor/burn_names.py``, composites of the API.md/torch ops), so they are ported here as Burn
writes them, under every checkpointing strategy on the chosen inner backend, with gradient
checks where the composite is differentiable. Expected values are Burn's.

Deliberate difference: Burn's ``roll(shifts, dims)`` turns the other way from torch's;
``Tensor.roll`` keeps torch's direction (a torch name, API.md section 10) and Burn's
``roll_dim`` is Burn's."""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx, eq

F23 = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
ABS = [[0.0, 1.0, -2.0], [-5.0, 6.0, 1.0]]
VAR = [[0.5, 1.8, 0.2, -2.0], [3.0, -4.0, 5.0, 0.0]]


# ---- maxmin.rs, aggregation.rs, prod.rs: the *_dims reductions, max_abs, max_pair ------------


def test_max_min_dims():
    f = rg.tensor(F23)
    eq(f.max_dims([0]), [[3.0, 4.0, 5.0]])
    eq(f.max_dims([-2]), [[3.0, 4.0, 5.0]])
    eq(f.max_dims([0, 1]), [[5.0]])
    eq(f.min_dims([0]), [[0.0, 1.0, 2.0]])
    eq(f.min_dims([-2]), [[0.0, 1.0, 2.0]])
    eq(f.min_dims([0, 1]), [[0.0]])


def test_sum_mean_prod_dims():
    f = rg.tensor(F23)
    eq(f.sum_dims([1]), [[3.0], [12.0]])
    eq(f.sum_dims([-1]), [[3.0], [12.0]])
    eq(f.sum_dims([0, 1]), [[15.0]])
    eq(f.mean_dims([1]), [[1.0], [4.0]])
    eq(f.mean_dims([-1]), [[1.0], [4.0]])
    eq(f.mean_dims([0, 1]), [[2.5]])
    t = rg.tensor([[[1.0, -2.0, 3.0], [5.0, 9.0, 6.0]], [[9.0, 2.0, 5.0], [5.0, 7.0, 7.0]]])
    eq(t.sum_dims_squeeze([0, 1]), [20.0, 16.0, 21.0])
    p = rg.tensor([[-5.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    eq(p.prod_dims([1]), [[-10.0], [60.0]])
    eq(p.prod_dims([-1]), [[-10.0], [60.0]])
    eq(p.prod_dims([0, 1]), [[-600.0]])


def test_max_abs():
    t = rg.tensor(ABS)
    eq(t.max_abs(), 6.0)
    eq(t.max_abs_dim(0), [[5.0, 6.0, 2.0]])
    eq(t.max_abs_dim(-2), [[5.0, 6.0, 2.0]])
    eq(t.max_abs_dim(1), [[2.0], [6.0]])
    eq(t.max_abs_dims([0]), [[5.0, 6.0, 2.0]])
    eq(t.max_abs_dims([-2]), [[5.0, 6.0, 2.0]])
    eq(t.max_abs_dims([0, 1]), [[6.0]])
    assert math.isnan(rg.tensor([-3.0, math.nan, 2.0]).max_abs().item())
    values = np.asarray(rg.tensor([[1.0, math.nan, -3.0], [1.0, -4.0, 3.0]]).max_abs_dim(1))
    assert np.isnan(values[0, 0]) and values[1, 0] == 4.0


def test_max_min_pair():
    a, b = rg.tensor([1.0, 2.0, 3.0, 4.0]), rg.tensor([2.0, 1.0, 4.0, 5.0])
    eq(a.max_pair(b), [2.0, 2.0, 4.0, 5.0])
    eq(a.min_pair(b), [1.0, 1.0, 3.0, 4.0])
    eq(rg.tensor([1, 5, 3, 4]).max_pair(rg.tensor([2, 1, 4, 5])), [2, 5, 4, 5])


def test_burn_reductions_gradients():
    # Gradients of the composites, by hand: max_abs picks |-5| = 5 (sign -1); max_dims folds
    # max_dim, so the one largest element gets the gradient; sum_dims gives ones; prod_dims of
    # a row gives the product of the others.
    x = rg.tensor(ABS).require_grad()
    approx(x.grad(x.max_abs_dim(1).sum().backward()), [[0, 0, -1], [0, 1, 0]])
    x = rg.tensor(ABS).require_grad()
    approx(x.grad(x.max_dims([0, 1]).sum().backward()), [[0, 0, 0], [0, 1, 0]])
    x = rg.tensor(ABS).require_grad()
    approx(x.grad(x.sum_dims([0, 1]).sum().backward()), np.ones((2, 3)))
    x = rg.tensor([[-5.0, 1.0, 2.0], [3.0, 4.0, 5.0]]).require_grad()
    approx(x.grad(x.prod_dims([1]).sum().backward()), [[2, -10, -5], [20, 15, 12]])
    a, b = rg.tensor([1.0, 2.0, 3.0]).require_grad(), rg.tensor([2.0, 1.0, 4.0]).require_grad()
    grads = a.max_pair(b).sum().backward()
    approx(a.grad(grads), [0, 1, 0])
    approx(b.grad(grads), [1, 0, 1])


# ---- var.rs, median.rs -----------------------------------------------------------------------


def test_var_mean_and_bias():
    t = rg.tensor(VAR)
    var, mean = t.var_mean(1)
    approx(var, [[2.4892], [15.3333]], 1e-3)
    approx(mean, [[0.125], [1.0]], 1e-3)
    approx(t.var_bias(1), [[1.86688], [11.5]], 1e-3)
    var, mean = t.var_mean_bias(1)
    approx(var, [[1.86688], [11.5]], 1e-3)
    approx(mean, [[0.125], [1.0]], 1e-3)
    approx(t.var(-1), t.var(1))
    approx(t.var_bias(-1), t.var_bias(1))
    for neg, pos in zip(t.var_mean(-1), t.var_mean(1)):
        approx(neg, pos)
    for neg, pos in zip(t.var_mean_bias(-1), t.var_mean_bias(1)):
        approx(neg, pos)


def test_median_with_indices():
    values, indices = rg.tensor([3.0, 1.0, 2.0]).median_with_indices(0)
    eq(values, [2.0])
    eq(indices, [2], "int64")
    t = rg.tensor([[5.0, 1.0, 3.0], [2.0, 8.0, 4.0]])
    values, indices = t.median_with_indices(1)
    eq(values, [[3.0], [4.0]])
    eq(indices, [[2], [2]], "int64")
    for neg, pos in zip(t.median_with_indices(-1), t.median_with_indices(1)):
        eq(neg, pos)


# ---- sort_argsort.rs, topk.rs ----------------------------------------------------------------


def test_sort_descending_and_argtopk():
    eq(rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).sort_descending(0), [5.0, 4.0, 3.0, 2.0, 1.0])
    t = rg.tensor([[3, 1, 5], [2, 6, 4]])
    eq(t.sort_descending(-1), [[5, 3, 1], [6, 4, 2]])
    values, indices = t.sort_descending_with_indices(-2)
    eq(values, [[3, 6, 5], [2, 1, 4]])
    eq(indices, [[0, 1, 0], [1, 0, 1]])
    eq(t.argsort_descending(-1), [[2, 0, 1], [1, 2, 0]])
    eq(rg.tensor([1, 2, 3, 4, 5]).argtopk(3, 0), [4, 3, 2])
    t = rg.tensor([[[1, 4, 7], [2, 5, 6]], [[3, 0, 9], [8, 2, 7]]])
    eq(t.argtopk(2, 2), [[[2, 1], [2, 1]], [[2, 0], [0, 2]]])
    eq(t.argtopk(2, -1), [[[2, 1], [2, 1]], [[2, 0], [0, 2]]])


# ---- close.rs, fmod.rs, roll.rs --------------------------------------------------------------


def test_is_close_all_close():
    t1 = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]])
    t2 = rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 3.0]]) + 1e-9
    expected = [[True, True, True], [True, True, False]]
    eq(t1.is_close(t2, None, None), expected)
    eq(t1.is_close(t2, 1e-5, 1e-8), expected)
    assert not t1.all_close(t2, None, None)
    assert t1.all_close(rg.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 1.0]]) + 1e-9, None, None)
    inf_plus, one, inf_minus = rg.tensor([[math.inf]]), rg.tensor([[1.0]]), rg.tensor([[-math.inf]])
    assert not inf_plus.all_close(inf_minus, None, None)
    assert not one.all_close(inf_minus, None, None)
    assert not one.all_close(inf_plus, None, None)
    assert inf_plus.all_close(inf_plus, None, None)


def test_fmod_scalar():
    approx(rg.tensor([5.3, -5.3, 7.5, -7.5]).fmod_scalar(2.0), [1.3, -1.3, 1.5, -1.5], 1e-3)
    t = rg.tensor([[5.3, -5.3, 7.5], [-7.5, 10.0, -10.0]])
    approx(t.fmod_scalar(3.0), [[2.3, -2.3, 1.5], [-1.5, 1.0, -1.0]], 1e-3)
    t = rg.tensor([5.3, -5.3, 0.0, -0.0])
    approx(t.fmod_scalar(math.inf), [5.3, -5.3, 0.0, -0.0], 1e-3)
    small = np.asarray(t.fmod_scalar(1e-5))
    assert abs(small[0]) < 1e-5 and abs(small[1]) < 1e-5
    assert small[2] == 0.0 and small[3] == 0.0


def test_roll_dim():
    t = rg.tensor([[0, 1, 2], [3, 4, 5]])
    eq(t.roll_dim(1, 0), [[3, 4, 5], [0, 1, 2]])
    eq(t.roll_dim(-1, 1), [[2, 0, 1], [5, 3, 4]])
    # roll.rs test_roll: Burn's roll(&[1, -1], &[0, 1]) is roll_dim over each dim in turn
    eq(t.roll_dim(1, 0).roll_dim(-1, 1), [[5, 3, 4], [2, 0, 1]])
    eq(t.roll_dim(2 * 32 + 1, 0).roll_dim(3 * (-400) - 1, 1), [[5, 3, 4], [2, 0, 1]])
    # torch's roll (the API.md name) turns the other way
    eq(t.roll((1, -1), (0, 1)), [[4, 5, 3], [1, 2, 0]])
    for dim in (2, -3):
        with pytest.raises(rg.ShapeError, match="roll_dim"):
            t.roll_dim(1, dim)


# ---- one_hot.rs: one_hot_fill ----------------------------------------------------------------


def test_one_hot_fill():
    out = rg.tensor([[0.0, 2.0], [1.0, -1.0]]).one_hot_fill(3, 5.0, 0.0, -1)
    eq(out, [[[5.0, 0.0, 0.0], [0.0, 0.0, 5.0]], [[0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]])
    t = rg.tensor([[0.0, 1.0], [1.0, 0.0]])
    eq(t.one_hot_fill(2, 1.0, 0.0, -3), t.one_hot_fill(2, 1.0, 0.0, 0))
    expected = np.ones((3, 10))
    expected[0, 0], expected[1, 3], expected[2, 2] = 3.0, 3.0, 3.0
    eq(rg.tensor([0.0, -7.0, -8.0]).one_hot_fill(10, 3.0, 1.0, 1), expected)
    with pytest.raises(rg.ShapeError, match="one_hot_fill"):
        rg.tensor([[0.0, 2.0], [1.0, -1.0]]).one_hot_fill(2, 5.0, 0.0, 3)
    # int/ops/one_hot.rs: an int tensor gives int values
    out = rg.tensor([[1, 9], [2, 4]]).one_hot_fill(10, 3.0, 1.0, 1)
    expected = np.ones((2, 10, 2), dtype=np.int64)
    expected[0, 1, 0], expected[0, 9, 1], expected[1, 2, 0], expected[1, 4, 1] = 3, 3, 3, 3
    eq(out, expected, "int64")


# ---- categorical.rs --------------------------------------------------------------------------


def test_categorical():
    rg.seed(0)
    assert rg.tensor([[0.5, 0.5], [0.5, 0.5]]).categorical(5).shape == (2, 5)
    eq(rg.tensor([0.0, 0.0, 1.0]).categorical(5), [2, 2, 2, 2, 2], "int64")
    probs = rg.tensor([[[1.0, 0.0, 0.0]], [[0.0, 0.0, 1.0]]])
    eq(probs.categorical(4), [[[0, 0, 0, 0]], [[2, 2, 2, 2]]])
    eq(rg.tensor([[1.0, 0.0, 0.0]]).categorical(10), [[0] * 10])
    eq(rg.tensor([[0.0, 0.0, 1.0]]).categorical(10), [[2] * 10])
    samples = np.asarray(rg.tensor([[0.2, 0.2, 0.2, 0.2, 0.2]]).categorical(100))
    assert samples.min() >= 0 and samples.max() < 5
    eq(rg.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]).categorical(5), [[0] * 5, [2] * 5])
    eq(rg.tensor([[1.0]]).categorical(5), [[0] * 5])
    eq(rg.tensor([[0.0, 0.0, 10.0]]).categorical(10), [[2] * 10])
    ratio = (np.asarray(rg.tensor([[0.5, 0.5]]).categorical(1000)) == 0).mean()
    assert 0.3 < ratio < 0.7
    with pytest.raises(rg.InvalidArgumentError, match="categorical"):
        rg.tensor([[0.5, 0.5]]).categorical(0)


# ---- slice.rs: slice_fill, select_dim; padding.rs's constant cases (through F.pad) -----------


def test_slice_fill():
    t = rg.tensor([0.0, 1.0, 2.0])
    eq(t.slice_fill([(0, 2)], -1.0), [-1.0, -1.0, 2.0])
    eq(t.slice_fill([range(0, 2)], -1.0), [-1.0, -1.0, 2.0])
    eq(t.cast("float32").slice_fill([(0, 2)], 1.0), [1.0, 1.0, 2.0])
    out = t.cast("float64").slice_fill([(0, 2)], 1.0)
    eq(out, [1.0, 1.0, 2.0], "float64")
    eq(t.slice_fill([slice(-1, None)], -1.0), [0.0, 1.0, -1.0])
    eq(rg.tensor(F23).slice_fill([(1, 2), (0, 2)], -1.0), [[0, 1, 2], [-1, -1, 5]])
    eq(rg.tensor([1.0, 2.0, 3.0, 4.0, 5.0]).slice_fill([slice(0, 5, -1)], 10.0), [10.0] * 5)
    nine = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    out = nine.slice_fill([slice(None), slice(0, 3, -2)], -1.0)
    eq(out, [[-1.0, 2.0, -1.0], [-1.0, 5.0, -1.0], [-1.0, 8.0, -1.0]])
    out = rg.zeros((4, 6)).slice_fill([slice(0, 4, 2), slice(0, 6, -3)], 7.0)
    row = [0.0, 0.0, 7.0, 0.0, 0.0, 7.0]
    eq(out, [row, [0.0] * 6, row, [0.0] * 6])
    out = rg.zeros((2, 4, 4)).slice_fill([slice(None), slice(0, 4, 2), slice(0, 4, -2)], 1.0)
    plane = [[0.0, 1.0, 0.0, 1.0], [0.0] * 4, [0.0, 1.0, 0.0, 1.0], [0.0] * 4]
    eq(out, [plane, plane])
    # the filled region has no gradient, the rest passes it through
    x = rg.tensor(F23).require_grad()
    approx(x.grad(x.slice_fill([(1, 2), (0, 2)], -1.0).sum().backward()), [[1, 1, 1], [0, 0, 1]])


def test_select_dim_rank_empty_like():
    t = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    eq(t.select_dim(0, 1), [4.0, 5.0, 6.0])
    eq(t.select_dim(1, 1), [2.0, 5.0])
    assert rg.tensor([0.0, 1.0, 2.0]).rank() == 1
    assert rg.tensor([[0.0, 1.0, 2.0]]).rank() == 2
    for source in (rg.tensor(F23).reshape((1, 2, 3)), rg.tensor([[True, False]])):
        created = source.empty_like()
        assert (created.shape, created.dtype, created.device) == (
            source.shape,
            source.dtype,
            source.device,
        )


def test_pad():
    # Burn's tensor.pad((left, right, top, bottom), mode) is F.pad's torch list, last dim first
    # (Burn's PadMode::Edge is torch's "replicate"); the reflect and edge cases are
    # test_burn_tensor_ports_5's
    out = F.pad(rg.tensor(F23), (2, 2, 2, 2), value=1.1)
    expected = np.full((6, 7), 1.1, dtype=np.float32)
    expected[2:4, 2:5] = F23
    eq(out, expected)
    four = rg.tensor([[[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]]])
    expected = np.full((1, 1, 7, 6), 1.1, dtype=np.float32)
    expected[0, 0, 2:5, 2:4] = [[0, 1], [2, 3], [4, 5]]
    eq(F.pad(four, (2, 2, 2, 2), value=1.1), expected)
    expected = np.full((1, 1, 10, 5), 1.1, dtype=np.float32)
    expected[0, 0, 4:7, 2:4] = [[0, 1], [2, 3], [4, 5]]
    eq(F.pad(four, (2, 1, 4, 3), value=1.1), expected)
    eq(
        F.pad(rg.tensor([[1.0, 2.0], [3.0, 4.0]]), (1, 1, 1, 1)),
        [[0, 0, 0, 0], [0, 1, 2, 0], [0, 3, 4, 0], [0, 0, 0, 0]],
    )


# ---- bool/ops/logical.rs, comparison.rs; int/ops/bitwise.rs ----------------------------------

BOOL_A = [[False, True, False], [True, False, True]]
BOOL_B = [[True, True, False], [False, False, True]]


def test_bool_logical():
    a, b = rg.tensor(BOOL_A), rg.tensor(BOOL_B)
    eq(a.bool_and(b), [[False, True, False], [False, False, True]])
    eq(a.bool_or(b), [[True, True, False], [True, False, True]])
    eq(a.bool_xor(b), [[True, False, False], [True, False, False]])
    eq(rg.tensor([[False, True, True], [True, True, False]]).bool_not(), [[1, 0, 0], [0, 0, 1]])
    zeros, ones = rg.full((256,), 0).bool(), rg.full((256,), 1).bool()
    eq(zeros.bool_or(ones), [True] * 256)
    eq(zeros.bool_and(ones), [False] * 256)
    other = rg.tensor([[True, False, True], [False, True, False]])
    eq(rg.tensor([[True]]).bool_and(other), other)
    eq(rg.tensor([[False]]).bool_or(other), other)
    lhs = rg.tensor([[[True, False], [False, True]], [[True, True], [False, False]]])
    rhs = rg.tensor([[True, False], [False, True]])
    eq(lhs.bool_xor(rhs.unsqueeze_dim(0)), [[[0, 0], [0, 0]], [[0, 1], [0, 1]]])
    eq(
        rg.tensor([[True], [False], [True]]).bool_and(rg.tensor([[True, False, True]])),
        [[1, 0, 1], [0, 0, 0], [1, 0, 1]],
    )
    flipped = rg.tensor([True, False, True, False]).flip([0])
    eq(flipped.bool_not(), [True, False, True, False])
    eq(flipped.bool_and(rg.tensor([True, True, False, False])), [False, True, False, False])
    eq(flipped.bool_or(rg.tensor([True, False, False, False])), [True, True, False, True])
    eq(flipped.bool_xor(rg.tensor([True, True, False, False])), [True, False, False, True])
    eq(
        flipped.bool_and(rg.tensor([True, True, False, False]).flip([0])),
        [False, False, False, True],
    )


def test_bitwise_scalar():
    t = rg.tensor([[3, 4, 5], [9, 3, 8]])
    eq(t.bitwise_and_scalar(5), [[1, 4, 5], [1, 1, 0]])
    eq(t.bitwise_or_scalar(5), [[7, 5, 5], [13, 7, 13]])
    eq(t.bitwise_xor_scalar(5), [[6, 1, 0], [12, 6, 13]])
    eq(t.bitwise_left_shift_scalar(2), [[12, 16, 20], [36, 12, 32]])
    eq(t.bitwise_right_shift_scalar(2), [[0, 1, 1], [2, 0, 2]])


# ---- small forward cases the earlier ports do not hold (movedim.rs, narrow.rs, chunk.rs,
# repeat_dim.rs, int reshape.rs and stack.rs) --------------------------------------------------

MOVEDIM_0_2 = [
    [[0.0, 12.0], [1.0, 13.0], [2.0, 14.0], [3.0, 15.0]],
    [[4.0, 16.0], [5.0, 17.0], [6.0, 18.0], [7.0, 19.0]],
    [[8.0, 20.0], [9.0, 21.0], [10.0, 22.0], [11.0, 23.0]],
]


def test_movedim_float_and_int():
    for t in (rg.arange(0, 24).reshape((2, 3, 4)).float(), rg.arange(0, 24).reshape((2, 3, 4))):
        eq(t.movedim(0, 2), MOVEDIM_0_2)
        eq(t.movedim(0, -1), MOVEDIM_0_2)
        eq(t.movedim(0, 0), t)
    t = rg.arange(0, 24).reshape((2, 3, 4)).float()
    eq(t.flip([-3, -1]), t.flip([0, 2]))
    eq(t.movedim([-3, -2], [-2, -3]), t.movedim([0, 1], [1, 0]))
    for source, destination in (([0, 1], [0]), (0, 100), ([0, 100], [0, 1])):
        with pytest.raises(rg.ShapeError, match="movedim"):
            t.movedim(source, destination)


def test_narrow_chunk_and_repeat_dim_of_views():
    t = rg.arange(0, 64).reshape((8, 8)).float()
    eq(t.narrow(0, 3, 4), np.arange(24, 56, dtype=np.float32).reshape(4, 8))
    assert [c.shape[0] for c in rg.arange(0, 100).float().chunk(8, 0)] == [13] * 7 + [9]
    out = rg.arange(0, 16).float().reshape((4, 1, 4)).swap_dims(0, 2).repeat_dim(1, 4)
    eq(out, np.repeat(np.arange(16.0).reshape(4, 4).T[:, None, :], 4, axis=1))
    eq(out[0], [[0.0, 4.0, 8.0, 12.0]] * 4)
    out = rg.arange(0, 16).float().reshape((2, 2, 1, 4)).swap_dims(0, 1).repeat_dim(2, 4)
    eq(out[0, 1], [[8.0, 9.0, 10.0, 11.0]] * 4)
    eq(out[1, 0], [[4.0, 5.0, 6.0, 7.0]] * 4)
    out = rg.arange(0, 16).float().reshape((1, 2, 2, 4)).swap_dims(0, 2).swap_dims(1, 3)
    out = out.repeat_dim(2, 4)
    eq(out[0, 3], [[3.0, 11.0]] * 4)
    eq(out[1, 2], [[6.0, 14.0]] * 4)
    eq(rg.ones((2, 3, 4)).repeat_dim(2, 0).shape, (2, 3, 0))


def test_int_reshape_broadcasts_and_stack_layout():
    t1 = rg.arange(0, 32).reshape((2, 4, 4))
    t2 = rg.arange(0, 16).reshape((1, 4, 4))
    t3 = rg.arange(0, 8).reshape((4, 1, 2)).swap_dims(0, 2)
    out = t1 + t2 + t3
    eq(out[0], [[0, 4, 8, 12], [8, 12, 16, 20], [16, 20, 24, 28], [24, 28, 32, 36]])
    eq(out[1], [[17, 21, 25, 29], [25, 29, 33, 37], [33, 37, 41, 45], [41, 45, 49, 53]])
    lhs = rg.arange(0, 4).reshape((2, 2))
    out = lhs.reshape((2, 2, 1)).mul(lhs.reshape((1, 2, 2))).sum_dim(1).reshape((2, 2))
    eq(out, [[2, 3], [6, 11]])
    tensor = rg.arange(1, 25).reshape((4, 6))
    out = rg.stack([tensor, rg.zeros((4, 6), dtype="int64")], 2).reshape((4, 12))
    eq(out[1], [7, 0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0])
    eq(out[3], [19, 0, 20, 0, 21, 0, 22, 0, 23, 0, 24, 0])


# ---- activation/quiet_softmax.rs, thresholded_relu.rs ----------------------------------------


def test_quiet_softmax():
    x = rg.tensor([[1.0, 7.0], [13.0, -3.0]])
    burn = [[2.47e-03, 9.975e-01], [1.0, 1.1254e-07]]
    # Burn's Tolerance::default() (relative 0.5%, absolute 1e-5): its 9.975e-01 is rounded
    for out in (F.quiet_softmax(x, 1), F.quiet_softmax(x, -1), x.quiet_softmax(1)):
        np.testing.assert_allclose(np.asarray(out), burn, rtol=5e-3, atol=1e-5)
    # and exactly "softmax plus one", with its gradient, against torch's formula in float64
    torch = pytest.importorskip("torch")
    data = [[1.0, 7.0], [13.0, -3.0]]
    weights = [[1.0, 2.0], [3.0, 4.0]]
    t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    expected = t.exp() / (1 + t.exp().sum(1, keepdim=True))
    (expected * torch.tensor(weights, dtype=torch.float64)).sum().backward()
    x = rg.tensor(np.array(data)).require_grad()
    out = F.quiet_softmax(x, 1)
    grads = (out * rg.tensor(np.array(weights))).sum().backward()
    approx(out, expected.detach().numpy(), 1e-12)
    approx(x.grad(grads), t.grad.numpy(), 1e-12)


def test_thresholded_relu():
    out = F.thresholded_relu(rg.tensor([[0.0, -1.0, 2.0], [3.0, 1.0, 0.5]]), 1.0)
    eq(out, [[0.0, 0.0, 2.0], [3.0, 0.0, 0.0]])
    out = rg.tensor([[0.0, -1.0, 2.0], [3.0, 0.5, 0.6]]).thresholded_relu(0.5)
    eq(out, np.array([[0.0, 0.0, 2.0], [3.0, 0.0, 0.6]], dtype=np.float32))
    x = rg.tensor([[0.0, -1.0, 2.0], [3.0, 1.0, 0.5]]).require_grad()
    approx(x.grad(F.thresholded_relu(x, 1.0).sum().backward()), [[0, 0, 1], [1, 0, 0]])


def test_hard_sigmoid():
    out = F.hard_sigmoid(rg.tensor([[1.0, 7.0], [13.0, -3.0]]), 0.2, 0.5)
    approx(out, [[0.7, 1.0], [1.0, 0.0]], 1e-3)
    big = float(np.finfo(np.float32).max)
    approx(rg.tensor([big, -big]).hard_sigmoid(0.2, 0.5), [1.0, 0.0], 1e-3)
    x = rg.tensor([[1.0, 7.0], [13.0, -3.0]]).require_grad()
    approx(x.grad(F.hard_sigmoid(x, 0.2, 0.5).sum().backward()), [[0.2, 0], [0, 0]])
