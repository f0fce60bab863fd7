"""Regressions from the tenth fuzzing round (in-place writes through views, view chains,
norms, boundary values, second derivatives, ``nn.functional`` arguments): each case runs on
torch and on retrograd and must agree on raising or not, dtype, shape, values (NaNs
included) and float64 gradients (``fuzz_cases.compare``), or on second derivatives
(``fuzz_cases.compare_second_order``). Expected values all come from torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
from fuzz_cases import Case, Mismatch, Operand, compare, compare_second_order

torch = pytest.importorskip("torch")

NAN, INF = math.nan, math.inf


def _case(fn, arrays) -> tuple[Case, list[np.ndarray]]:
    arrays = [np.asarray(a) for a in arrays]
    return Case("regression", [Operand(a.shape, str(a.dtype)) for a in arrays], fn), arrays


def _check(fn, *arrays):
    compare(*_case(fn, arrays))


def _check_second_order(fn, *arrays):
    compare_second_order(*_case(fn, arrays))


def f64(*values):
    return np.array(values, dtype=np.float64)


def _copy_leaf_then_write(lib, a, b):
    # copy_ of a leaf made the base that leaf: the relu_ was refused, its gradient wrong
    base = a * 2.0
    view = base[1:]
    base.copy_(b)
    view.relu_()
    return base * base


def _fill_zero_dim_leaf(lib, a, b):
    base = a * 1.0
    base.fill_(b)  # a 0-d leaf fills a 0-d tensor: the same value, not the same leaf
    base.mul_(3.0)
    return base


def _pad(mode, amounts):
    return lambda lib, x: lib.nn.functional.pad(x, amounts, mode=mode)


CASES = {
    "copy_leaf_then_write_through_view": (
        _copy_leaf_then_write,
        f64(1.0, -2.0, 3.0),
        f64(-1.0, 0.5, -4.0),
    ),
    "copy_leaf_into_plain": (
        lambda lib, a, b: lib.zeros(3, dtype=lib.float64).copy_(b).add_(a),
        f64(1.0, 2.0, 3.0),
        f64(-1.0, 0.5, 4.0),
    ),
    "fill_zero_dim_leaf": (_fill_zero_dim_leaf, np.float64(0.5), np.float64(2.0)),
    # windows of size 0, and unfold of a 0-d tensor
    "unfold_size_zero": (
        lambda lib, a: (a.unfold(1, 0, 1), a.unfold(1, 0, 2), a.unfold(-1, 0, 5)),
        np.ones((2, 3)),
    ),
    "unfold_size_zero_empty_dim": (lambda lib, a: a.unfold(1, 0, 1), np.ones((2, 0))),
    "unfold_zero_dim": (lambda lib, a: (a.unfold(0, 1, 1), a.unfold(-1, 0, 2)), np.float64(2.5)),
    # a 0-d norm stays 0-d with keepdim
    "vector_norm_zero_dim_keepdim": (
        lambda lib, a: (
            lib.linalg.vector_norm(a, 1, dim=0, keepdim=True),
            a.norm(p=3, dim=(0,), keepdim=True),
        ),
        np.float64(-1.5),
    ),
    # the count of non-zeros counts NaNs
    "norm_p0_nan": (
        lambda lib, a: (a.norm(p=0), lib.linalg.vector_norm(a, 0, dim=1)),
        np.array([[1.0, -INF, 0.0], [NAN, 0.0, 2.0]]),
    ),
    # erfinv(+-1) is +-inf (and its gradient inf) when the input requires grad
    "erfinv_edges": (lambda lib, a: a.erfinv(), f64(-1.0, 1.0, -0.0, 0.5, 2.0, NAN)),
    # a NaN bound gives NaN
    "clamp_nan_tensor_min": (
        lambda lib, a, lo: lib.clamp(a, min=lo),
        f64(-INF, 1.0, 2.0),
        f64(NAN, NAN, 1.0),
    ),
    "clamp_nan_tensor_both": (
        lambda lib, a, lo, hi: lib.clamp(a, lo, hi),
        f64(-1.0, 1.0, 2.0, NAN),
        f64(NAN, 0.0, 0.0, 0.0),
        f64(0.5, NAN, 1.5, 1.0),
    ),
    # two bools promote to bool, which torch's shifts refuse
    "shift_bool_bool": (lambda lib, a: (a << True, a >> a), np.array([True, False])),
    "shift_bool_int": (lambda lib, a: (a << 2, a >> lib.tensor([1])), np.array([True, False])),
    # torch's linear kernels copy an axis whose size does not change, whatever the factor
    "bilinear_same_size_axis": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.3, mode="bilinear"),
        np.arange(12.0).reshape(1, 1, 4, 3),
    ),
    "linear_same_size": (
        lambda lib, x: lib.nn.functional.interpolate(
            x, scale_factor=(1.2,), mode="linear", align_corners=False
        ),
        np.arange(3.0).reshape(1, 1, 3),
    ),
    "trilinear_same_size_axis": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.3, mode="trilinear"),
        np.arange(24.0).reshape(1, 1, 2, 4, 3),
    ),
    # torch's 1-d and 3-d nearest forward kernels apply the scale factor where the 2-d one
    # copies (same size) or halves (twice the size); every nearest backward takes the shortcut
    "nearest_1d_same_size": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.3, mode="nearest"),
        np.arange(6.0).reshape(2, 1, 3),
    ),
    "nearest_1d_twice": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=2.1, mode="nearest"),
        np.arange(6.0).reshape(2, 1, 3),
    ),
    "nearest_3d_same_size": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.3, mode="nearest"),
        np.arange(6.0).reshape(1, 1, 1, 2, 3),
    ),
    "nearest_2d_same_size": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=(1.3, 2.1), mode="nearest"),
        np.arange(6.0).reshape(1, 1, 2, 3),
    ),
    # torch's bicubic backward copies the gradient when no size changes
    "bicubic_same_size_gradient": (
        lambda lib, x: lib.nn.functional.interpolate(x, scale_factor=1.3, mode="bicubic"),
        np.array([[[[1.7, -1.5, -0.0]]], [[[-3.6, -1.0, -2.5]]]]),
    ),
    # reflect/replicate with a crop on one side read the whole input (torch's index map)
    "pad_reflect_crop_right": (_pad("reflect", (2, -2)), np.arange(6.0).reshape(1, 2, 3)),
    "pad_reflect_crop_left": (_pad("reflect", (-1, 2)), np.arange(6.0).reshape(1, 2, 3)),
    "pad_replicate_crop_all_but_edge": (
        _pad("replicate", (-3, 2)),
        np.arange(6.0).reshape(1, 2, 3),
    ),
    "pad_replicate_empty_1d": (_pad("replicate", (-2, -1)), np.arange(6.0).reshape(1, 2, 3)),
    "pad_replicate_empty_2d": (
        _pad("replicate", (0, 0, -1, -1)),
        np.arange(6.0).reshape(1, 1, 2, 3),
    ),
    "pad_reflect_2d_mixed": (_pad("reflect", (1, -1, -1, 1)), np.arange(12.0).reshape(1, 1, 3, 4)),
    # tied maxima in an adaptive window: the gradient to the first in row-major order
    "adaptive_max_pool2d_ties": (
        lambda lib, x: lib.nn.functional.adaptive_max_pool2d(x, (2, 1)),
        np.array([[[[-0.7, -2.5, 3.0], [3.0, 2.4, 0.1], [3.0, -3.6, 2.5], [3.2, -1.0, 1.0]]]]),
    ),
    # index_put_(accumulate=True) with a bool mask added at the mask's 0/1 values as indices
    "index_put_accumulate_mask": (
        lambda lib, x, v: x.clone().index_put_((lib.tensor([True, False, True, False]),), v, True),
        np.arange(12.0).reshape(4, 3),
        f64(1.0, 2.0, 3.0),
    ),
    # index tensors that broadcast to 2-d, the rest of the dims whole
    "index_put_accumulate_broadcast_index": (
        lambda lib, x, v: x.clone().index_put_(
            (lib.tensor([[0], [0]]), lib.tensor([0, 2])), v, accumulate=True
        ),
        np.arange(24.0).reshape(4, 3, 2),
        np.array([[1.0, 2.0], [3.0, 4.0]]),
    ),
    # index_put_ does not drop a value's leading ones (setitem does): torch refuses them
    "index_put_leading_ones": (
        lambda lib, x, v: x.clone().index_put_((lib.tensor([0, 1]),), v),
        np.zeros(4),
        np.ones((1, 2)),
    ),
    "index_put_mask_single_value": (
        lambda lib, x, v: x.clone().index_put_((lib.tensor([[True, False], [False, True]]),), v),
        np.zeros((2, 2), np.int64),
        np.full((1, 1), 2.5),
    ),
    # any/all over dim=() reduce over no dimension (sum's dim=() is every dimension)
    "any_all_no_dims": (
        lambda lib, x: (x.any(dim=()), x.all(dim=[]), lib.any(x, dim=(), keepdim=True)),
        np.array([[1, 0], [0, 0]]),
    ),
    "sum_no_dims": (lambda lib, x: (x.sum(dim=()), x.mean(dim=[], keepdim=True)), f64(1.0, 2.5)),
    # multi_margin_loss counts a term where it is > 0 only: not at 0, nor at NaN
    "multi_margin_boundary_and_nan": (
        lambda lib, x: lib.nn.functional.multi_margin_loss(
            x, lib.tensor([0, 2]), p=2, reduction="none"
        ),
        np.array([[0.5, 1.0, -0.5, 1.5], [0.2, NAN, 0.2, -0.8]]),
    ),
    # fold refuses empty non-batch dimensions, as torch
    # erfinv in float32 near +-1 (Newton's steps in float32 were 3% off at 0.9999999)
    "erfinv_float32_tails": (
        lambda lib, a: a.erfinv(),
        np.array([0.9999, 0.99999, -0.999999, 0.9999999, -0.99995], np.float32),
    ),
    "fold_no_blocks": (
        lambda lib, x: lib.nn.functional.fold(x, (1, 4), (1, 3), dilation=(1, 2), stride=(2, 1)),
        np.ones((2, 6, 0)),
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    fn, *arrays = CASES[name]
    _check(fn, *arrays)


def _bce(lib, x, y):
    f = lib.nn.functional
    return f.binary_cross_entropy(x.sigmoid(), y.sigmoid(), reduction="none")


SECOND_ORDER = {
    # bce's gradients were recorded as constants: its second derivatives were missing
    "bce": (_bce, f64(0.3, -1.2, 2.0), f64(-0.5, 0.4, 1.5)),
    "bce_direct": (
        lambda lib, x, y: lib.nn.functional.binary_cross_entropy(x, y),
        f64(0.3, 0.6, 0.5),
        f64(0.2, 0.9, 0.0),
    ),
    # torch's double backward of the elu family masks by x < 0: 0 at x = 0
    "elu_at_zero": (lambda lib, x: lib.nn.functional.elu(x, 0.3), f64(-1.5, -0.0, 0.0, 0.5)),
    "selu_at_zero": (lambda lib, x: lib.nn.functional.selu(x), f64(-1.5, -0.0, 0.0, 0.5)),
    "celu_at_zero": (lambda lib, x: lib.nn.functional.celu(x, 2.0), f64(-1.5, -0.0, 0.0, 0.5)),
    # a negative base's log is NaN through the output, as torch's: a second derivative
    "rpow_negative_base": (lambda lib, x: (-0.5) ** x, f64(-1.0, 2.0)),
    # logaddexp's kinks (maximum, abs) zeroed its second derivative at ties: s (1 - s)
    "logaddexp_ties": (
        lambda lib, x, y: lib.logaddexp(x, y),
        f64(1.0, 2.0, -1.0),
        f64(1.0, 0.5, -1.0),
    ),
    "logaddexp2_ties": (lambda lib, x, y: lib.logaddexp2(x, y), f64(1.0, 2.0), f64(1.0, 0.5)),
    "logcumsumexp_ties": (lambda lib, x: x.logcumsumexp(1), np.array([[1.0, 1.0, 2.0, -1.0, 1.0]])),
    # two zeros: the first derivatives are all 0, the second ones at the zeros not
    "prod_two_zeros": (lambda lib, x: x.prod(), f64(2.0, 0.0, 0.5, 0.0, 3.0)),
    "prod_dim_two_zeros": (
        lambda lib, x: x.prod(0),
        np.array([[2.0, 0.0], [0.0, 1.5], [0.0, 3.0]]),
    ),
    # the floor quotient is a constant: no 0 / 0 at a zero divisor
    "remainder_zero_divisor": (
        lambda lib, x, y: lib.remainder(x, y) * x,
        f64(2.5, -1.5, 3.0),
        f64(0.0, 0.0, 2.0),
    ),
    "fmod_zero_divisor": (
        lambda lib, x, y: lib.fmod(x, y) * y,
        f64(2.5, -1.5, 3.0),
        f64(0.0, 0.0, -0.7),
    ),
    "rremainder": (lambda lib, x: (2.5 % x) * x, f64(0.0, -1.5, 3.0)),
    # huber/smooth_l1 squared |d|: abs's kink zeroed the second derivative at d = 0; at
    # |d| == delta torch's second derivative is the linear branch's
    "huber": (
        lambda lib, x, y: lib.nn.functional.huber_loss(x, y, reduction="none", delta=0.5),
        f64(1.0, 2.0, 0.5, 1.5),
        f64(1.0, 1.5, 1.0, 0.0),
    ),
    "smooth_l1": (
        lambda lib, x, y: lib.nn.functional.smooth_l1_loss(x, y, reduction="none", beta=0.5),
        f64(1.0, 2.0, 0.5, 1.5),
        f64(1.0, 1.5, 1.0, 0.0),
    ),
    # erfinv's recorded Newton step had a constant slope: second derivative 0
    "erfinv": (lambda lib, x: x.erfinv(), f64(0.5, -0.3, 0.99, 1e-8)),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_second_order_matches_torch(name):
    fn, *arrays = SECOND_ORDER[name]
    _check_second_order(fn, *arrays)


def test_bce_first_order_at_saturated_probabilities_unchanged():
    """x of 0 and 1 keep torch's finite gradient in x (its eps), as before."""
    x, y = f64(0.0, 1.0, 1e-13, 0.4), f64(0.3, 0.4, 0.5, 0.9)
    rx, ry = rg.tensor(x).require_grad(), rg.tensor(y)
    grads = rg.nn.functional.binary_cross_entropy(rx, ry, reduction="sum").backward()
    tx = torch.tensor(x, requires_grad=True)
    (want,) = torch.autograd.grad(
        torch.nn.functional.binary_cross_entropy(tx, torch.tensor(y), reduction="sum"), tx
    )
    np.testing.assert_allclose(rx.grad(grads).numpy(), want.numpy(), rtol=1e-12)


def test_unfold_window_larger_than_a_zero_dim_tensor_raises():
    with pytest.raises(rg.ShapeError, match="unfold"):
        rg.tensor(2.0).unfold(0, 2, 1)


def test_second_order_helper_can_fail():
    with pytest.raises(Mismatch):
        _check_second_order(lambda lib, a: a**3 if lib is rg else a**3 + a * a, f64(0.5, 2.0))
