"""Regressions from the eleventh fuzzing round (programs of views and in-place writes, dtype
promotion of binary and in-place ops, nn.functional argument grids, special functions,
second derivatives of random compositions; generators in ``tests/fuzz11_cases.py``): each
case runs on torch and on retrograd and must agree on raising or not, dtype, shape, values
and float64 gradients (``fuzz_cases.compare``). Expected values all come from torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from fuzz_cases import Case, Mismatch, Operand, compare

torch = pytest.importorskip("torch")


def _check(fn, *arrays):
    arrays = [np.asarray(a) for a in arrays]
    compare(Case("regression", [Operand(a.shape, str(a.dtype)) for a in arrays], fn), arrays)


def f64(*values):
    return np.array(values, dtype=np.float64)


def i64(*values):
    return np.array(values, dtype=np.int64)


def _leaf_written_under_no_grad(lib, x, y):
    # y is read, then written in place under no_grad, then read again: torch keeps one
    # gradient per tensor (both reads'); retrograd's fresh leaf lost the first read's
    out = x * y.reshape(-1).repeat(1)
    with lib.no_grad():
        y.mul_(1.5)
    return out + y * 2.0


def _leaf_written_twice(lib, x, y):
    out = (x + y).sin()  # (add saves nothing: torch's backward does not refuse the write)
    with lib.no_grad():
        y.add_(1.0)
        y.clamp_(-1.0, 1.5)
    return out


def _embedding_renorm_in_graph(lib, w, i):
    # max_norm renormalizes the rows looked up in place, under no_grad: a weight computed
    # in the graph stays there (retrograd made it a constant)
    w = w * 1.0
    return lib.nn.functional.embedding(i, w, max_norm=1.0), w


def _conv_module(nd, mode, padding, dilation=1):
    def fn(lib, x, w):
        m = getattr(lib.nn, f"Conv{nd}d")(
            2, 2, 3, padding=padding, padding_mode=mode, dilation=dilation, bias=False,
            dtype=lib.float64,
        )  # fmt: skip
        if lib is torch:
            with torch.no_grad():
                m.weight.copy_(w)
        else:
            m.load_state_dict({"weight": w.detach()})
        return m(x)

    return fn


RNG = np.random.default_rng(11)

CASES = {
    # alpha is checked against the result's dtype, as torch does
    "add_float_alpha_bool_other": (
        lambda lib, a, b: lib.add(a, b, alpha=0.5),
        f64(1.0, 2.0),
        np.array([True, False]),
    ),
    "add_float_alpha_integral_result": (
        lambda lib, a, b: lib.add(a, b, alpha=2.0),
        i64(1, 2),
        i64(3, 4),
    ),
    "add_bool_alpha_int_result": (lambda lib, a, b: a.add(b, alpha=True), i64(1, 2), i64(3, 4)),
    "sub_bool_alpha_float_result": (
        lambda lib, a, b: a.sub(b, alpha=True),
        f64(1.0, 2.0),
        f64(3.0, 4.0),
    ),
    "add_scalar_float_alpha_int_tensor": (lambda lib, a: a.add(2, alpha=0.5), i64(1, 2)),
    "add_zero_dim_float64_alpha_bool": (
        lambda lib, a, b: lib.add(a, b, alpha=0.5),
        np.float64(1.5),
        np.array([True, False, True]),
    ),
    "add_bool_bool_float_alpha": (
        lambda lib, a, b: a.add(b, alpha=0.5),
        np.array([True, False]),
        np.array([False, False]),
    ),
    # fill_ with a 0-d tensor casts it to the tensor's dtype, whatever the two are
    "fill_int_with_float_tensor": (
        lambda lib, a, v: a.clone().fill_(v),
        i64(1, 2, 3),
        np.float32(2.7),
    ),
    "fill_float_with_bool_tensor": (lambda lib, a, v: a.clone().fill_(v), f64(1.0, 2.0), np.True_),
    # torch's in-place forms of floor_divide, logical_*, divide, ... (refusals included)
    "floor_divide_": (lambda lib, a, b: a.clone().floor_divide_(b), i64(7, -7, 5), i64(2, 2, -3)),
    "true_divide_int_refused": (lambda lib, a, b: a.clone().true_divide_(b), i64(7, 5), i64(2, 3)),
    "logical_or_float": (  # (float32: torch passes a gradient through logical_or_)
        lambda lib, a, b: a.clone().logical_or_(b),
        np.array([0.0, 2.0, 0.0], np.float32),
        np.array([0.0, 0.0, 1.0], np.float32),
    ),
    "logical_and_int": (lambda lib, a, b: a.clone().logical_and_(b), i64(0, 2, 3), i64(1, 0, 5)),
    "multiply_subtract_": (
        lambda lib, a, b: a.clone().multiply_(b).subtract_(b, alpha=2),
        f64(1.0, -2.0),
        f64(0.5, 3.0),
    ),
    # addcmul: value cast to an integral result (truncated); bools and integer addcdiv refused
    "addcmul_int_float_value": (
        lambda lib, a, b: (lib.addcmul(a, b, a, value=0.5), lib.addcmul(a, b, a, value=2.7)),
        i64(1, 2, 3),
        i64(4, 5, 6),
    ),
    "addcmul_bool_refused": (
        lambda lib, a, b: lib.addcmul(a, b, a),
        np.array([True, False]),
        np.array([True, True]),
    ),
    "addcdiv_int_refused": (lambda lib, a, b: lib.addcdiv(a, b, a), i64(1, 2), i64(3, 4)),
    "addcdiv_int_float": (lambda lib, a, b: lib.addcdiv(a, b, a + 1), i64(1, 2), f64(3.0, 4.0)),
    # a leaf written in place under no_grad keeps its gradient (the reads before the write too)
    "leaf_written_under_no_grad": (
        _leaf_written_under_no_grad,
        f64(1.0, 2.0, 3.0),
        f64(0.5, -1.0, 2.0),
    ),
    "leaf_written_twice_under_no_grad": (_leaf_written_twice, f64(1.0, -0.5), f64(0.3, 2.0)),
    "embedding_max_norm_non_leaf_weight": (
        _embedding_renorm_in_graph,
        np.array([[1.0, 2.0], [0.1, 0.2], [3.0, 0.0]]),
        i64(0, 2, 2),
    ),
    # conv modules take padding='same'/'valid' with every padding_mode
    "conv1d_same_reflect": (
        _conv_module(1, "reflect", "same", 2),
        RNG.standard_normal((1, 2, 6)),
        RNG.standard_normal((2, 2, 3)),
    ),
    "conv2d_same_circular": (
        _conv_module(2, "circular", "same"),
        RNG.standard_normal((1, 2, 4, 3)),
        RNG.standard_normal((2, 2, 3, 3)),
    ),
    "conv2d_valid_replicate": (
        _conv_module(2, "replicate", "valid"),
        RNG.standard_normal((1, 2, 4, 3)),
        RNG.standard_normal((2, 2, 3, 3)),
    ),
    # triplet_margin_loss and pairwise_distance take any rank (0-d too), as torch 2.13
    "triplet_margin_3d": (
        lambda lib, a, p: lib.nn.functional.triplet_margin_loss(a, p, a.flip(0), reduction="none"),
        RNG.standard_normal((2, 3, 2)),
        RNG.standard_normal((2, 3, 2)),
    ),
    "pairwise_distance_0d": (
        lambda lib, a, b: lib.nn.functional.pairwise_distance(a, b),
        np.float64(1.0),
        np.float64(3.0),
    ),
    # group_norm refuses one value per group, as torch
    "group_norm_one_value": (lambda lib, x: lib.nn.functional.group_norm(x, 2), np.ones((1, 2, 1))),
    "group_norm_two_values": (
        lambda lib, x: lib.nn.functional.group_norm(x, 1),
        f64(1.0, 3.0)[None, :, None],
    ),
    # einsum broadcasts a size-1 dim against the other operand's, contracted ones too
    "einsum_broadcast_contracted": (
        lambda lib, a, b: lib.einsum("ij,jk->ik", a, b),
        RNG.standard_normal((2, 2)),
        RNG.standard_normal((1, 3)),
    ),
    "einsum_broadcast_three": (
        lambda lib, a, b, c: lib.einsum("i,i,i->", a, b, c),
        f64(1.0, 2.0),
        f64(3.0),
        f64(-0.5),
    ),
    "einsum_broadcast_to_empty": (
        lambda lib, a, b: lib.einsum("ij,ij->", a, b),
        np.ones((3, 1)),
        np.ones((3, 0)),
    ),
    # bincount keeps float32 weights' dtype (torch 2.13)
    "bincount_float32_weights": (
        lambda lib, i, w: lib.bincount(i, weights=w),
        i64(0, 2, 2),
        np.array([0.5, 1.5, 2.0], np.float32),
    ),
    # a single row is one variable: 0-d
    "cov_single_row": (lambda lib, a: (lib.cov(a), lib.corrcoef(a)), np.array([[1.0, 2.0, 4.0]])),
    # cdist: compute_mode taken, integers refused, p = 0 NaN where a difference is NaN
    "cdist_compute_mode": (
        lambda lib, a, b: lib.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
        RNG.standard_normal((2, 3)),
        RNG.standard_normal((4, 3)),
    ),
    "cdist_int_refused": (
        lambda lib, a, b: lib.cdist(a, b),
        np.ones((2, 3), np.int64),
        np.ones((1, 3), np.int64),
    ),
    "cdist_p0_nan": (
        lambda lib, a, b: lib.cdist(a, b, p=0),
        np.array([[np.nan, 1.0], [0.0, 2.0]]),
        np.array([[0.0, 1.0]]),
    ),
    "unique_consecutive_dim": (
        lambda lib, a: lib.unique_consecutive(a, return_inverse=True, return_counts=True, dim=1),
        np.array([[1, 1, 2, 2, 1], [3, 3, 0, 0, 3]]),
    ),
    # repeats that are all zero: an empty int64 index, not a float one
    "repeat_interleave_zero_repeats": (
        lambda lib, a: lib.repeat_interleave(a, lib.tensor([0, 0]), dim=0),
        np.ones((2, 3)),
    ),
    # torch's 3-d average pooling refuses an input smaller than the kernel, padding or not
    "avg_pool3d_small_input": (
        lambda lib, x: lib.nn.functional.avg_pool3d(x, 2, 1, 1),
        np.ones((1, 1, 1, 2, 3)),
    ),
    "lp_pool3d_small_input": (
        lambda lib, x: lib.nn.functional.lp_pool3d(x, 2.0, 2, ceil_mode=True),
        np.ones((1, 1, 2, 2, 1)),
    ),
    # scaled_dot_product_attention: enable_gqa, and leading dims that broadcast
    "sdpa_enable_gqa": (
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True
        ),
        RNG.standard_normal((1, 4, 3, 2)),
        RNG.standard_normal((1, 2, 3, 2)),
        RNG.standard_normal((1, 2, 3, 5)),
    ),
    "sdpa_broadcast_heads": (
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(q, k, v),
        RNG.standard_normal((2, 3, 2, 4)),
        RNG.standard_normal((2, 1, 5, 4)),
        RNG.standard_normal((1, 1, 5, 3)),
    ),
    "sdpa_gqa_heads_not_dividing": (
        lambda lib, q, k, v: lib.nn.functional.scaled_dot_product_attention(
            q, k, v, enable_gqa=True
        ),
        RNG.standard_normal((1, 3, 2, 2)),
        RNG.standard_normal((1, 2, 2, 2)),
        RNG.standard_normal((1, 2, 2, 2)),
    ),
}


def _instance_norm_momentum_none(lib, x):
    m = lib.nn.InstanceNorm1d(2, momentum=None, track_running_stats=True, dtype=lib.float64)
    out = m(x)
    return out, m.running_mean, m.running_var


# a hinge exactly at 0 (x[0] - x[1] == 1): torch's kernel sends no gradient there
CASES["multilabel_margin_hinge_at_zero"] = (
    lambda lib, x: lib.nn.functional.multilabel_margin_loss(x, lib.tensor([[1, -1, 0]])),
    np.array([[0.0, 1.0, 3.0]]),
)
# a zero pivot: torch's triangular solve gives inf and NaN (retrograd refused it as singular),
# and so does the QR gradient of a rank-deficient matrix (its backward raised)
CASES["solve_triangular_zero_pivot"] = (
    lambda lib, a, b: (
        lib.linalg.solve_triangular(a, b, upper=True),
        lib.linalg.solve_triangular(a.mT, b.mT, upper=False, left=False),
    ),
    np.array([[0.0, 1.0], [0.0, 2.0]]),
    np.array([[1.0], [2.0]]),
)
CASES["qr_rank_deficient_gradient"] = (
    lambda lib, a: tuple(lib.linalg.qr(a)),
    np.array([[[0.0, 0.0]]]),
)
# renorm keeps a slice whose norm is NaN (NaN > maxnorm is false), as torch's kernel
CASES["renorm_nan_slice"] = (
    lambda lib, a: lib.renorm(a, 2.0, 0, 1.0),
    np.array([[np.nan, 1.0], [3.0, 4.0]]),
)
# a contracted letter of size 1 in one operand: torch sums the other over it first, so a
# float and an int operand multiply (retrograd refused their mixed dtypes)
CASES["einsum_size_one_contraction_mixed_dtypes"] = (
    lambda lib, a, b, c: lib.einsum("bn,anm,bm->ba", a, b, c),
    np.array([[1.5, -2.0]]),
    np.full((3, 1, 1), 2, np.int64),
    np.full((1, 1), 3, np.int64),
)
CASES["instance_norm_momentum_none"] = (  # torch: momentum 0, the statistics stay
    _instance_norm_momentum_none,
    RNG.standard_normal((3, 2, 4)),
)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_torch(name):
    fn, *arrays = CASES[name]
    _check(fn, *arrays)


def test_gradient_after_a_no_grad_write_is_read_replaced_and_removed_whole():
    """``w.grad(grads)`` after ``w`` was updated in place finds the gradient (torch's
    ``w.grad`` survives the update); replacing and removing act on that whole gradient."""
    w = rg.tensor([1.0, 2.0], dtype="float64").require_grad()
    grads = (w * w).sum().backward()
    with rg.no_grad():
        w.sub_(0.1 * w.grad(grads))
    np.testing.assert_array_equal(w.grad(grads).numpy(), [2.0, 4.0])
    w.grad_replace(grads, rg.tensor([5.0, 6.0], dtype="float64"))
    np.testing.assert_array_equal(w.grad(grads).numpy(), [5.0, 6.0])
    np.testing.assert_array_equal(w.grad_remove(grads).numpy(), [5.0, 6.0])
    assert w.grad(grads) is None


def test_reads_before_and_after_a_no_grad_write_add_up():
    w = rg.tensor([1.0, -2.0], dtype="float64").require_grad()
    first = w * 3.0
    with rg.no_grad():
        w.mul_(2.0)
    grads = (first + w * w).sum().backward()
    # 3 from the first read, 2 * (2 w) from the second: torch's one .grad
    np.testing.assert_array_equal(w.grad(grads).numpy(), [3.0 + 4.0, 3.0 - 8.0])


def test_optimizer_step_keeps_the_gradient_once():
    lin = rg.nn.Linear(2, 1)
    opt = rg.optim.SGD(lin.parameters(), lr=0.1)
    grads = lin(rg.ones(3, 2)).sum().backward()
    before = lin.weight.grad(grads).numpy().copy()
    opt.step(grads)
    np.testing.assert_array_equal(lin.weight.grad(grads).numpy(), before)


def test_regression_helper_can_fail():
    with pytest.raises(Mismatch):
        _check(lambda lib, a: a.add(a, alpha=0.5) if lib is torch else a * 1, i64(1, 2))
