"""burn-nn's loss and activation tests (``crates/burn-nn/src/loss`` and
``crates/burn-nn/src/activation``, tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747)
not ported before (``test_burn_tensor_ports_3`` has cross_entropy.rs and mse.rs), through
``rg.nn.functional``'s and ``rg.nn``'s torch forms (API.md section 10), under every
checkpointing strategy on the chosen inner backend. Expected values are Burn's as its test
source writes them (most are PyTorch references it quotes).

Burn's configs map to torch's arguments: ``BinaryCrossEntropyLossConfig`` with ``logits`` is
``F.binary_cross_entropy_with_logits``, its per-class ``weights`` are torch's per-element
``weight`` (gathered by target for a 1-d target, broadcast over columns for a multilabel one), its
``smoothing`` is the target ``t * (1 - s) + s / n`` it documents; ``HuberLossConfig::new(d)`` is
``F.huber_loss(delta=d)``; ``KLDivLoss`` is ``F.kl_div`` (``Reduction::BatchMean`` is
``"batchmean"``); ``LpLossConfig::l1``/``l2`` are ``F.l1_loss``/``F.mse_loss`` and
``forward_reduce_dims(dims)`` is the unreduced loss's ``mean(dims, keepdim=True)``;
``SwiGlu`` is ``silu(linear_1(x)) * linear_2(x)``; ``HardSigmoid`` is Burn's
``hard_sigmoid(alpha=0.2, beta=0.5)`` (torch's ``Hardsigmoid`` has alpha 1/6).

Deliberate differences (torch's forms): ``smooth_l1_loss`` accepts ``beta=0`` (plain L1, where
Burn panics) and rejects a negative beta as Burn does; ``poisson_nll_loss`` does not check its
``eps`` or the sign of its targets (Burn panics), and a shape mismatch is a broadcasting error as
in torch; ``cosine_embedding_loss`` and the other ``Reduction::Auto`` losses take torch's
``reduction=`` string. Burn's ``Shrink`` (a bias-shifted soft shrink) has no torch form and is
not ported; the ``display``/config-accessor tests are Rust formatting only.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)
from test_burn_tensor_ports import approx


def t(data):
    return rg.tensor(data)


# ---- loss/binary_cross_entropy.rs ------------------------------------------------------------

BCE_LOGITS = [0.8271, 0.9626, 0.3796, 0.2355]
BCE_TARGETS = [0.0, 1.0, 0.0, 1.0]
ML_LOGITS = [[0.5150, 0.3097, 0.7556], [0.4974, 0.9879, 0.1564]]
ML_TARGETS = [[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]]


def test_binary_cross_entropy_all_correct_and_all_incorrect():
    targets = t([1.0, 0.0, 1.0, 0.0])
    approx(F.binary_cross_entropy(t([1.0, 0.0, 1.0, 0.0]), targets), 0.0)
    # the log is clamped at -100, as Burn's and torch's BCELoss do
    approx(F.binary_cross_entropy(t([0.0, 1.0, 0.0, 1.0]), targets), 100.0)
    approx(rg.nn.BCELoss()(t([0.0, 1.0, 0.0, 1.0]), targets), 100.0)


def test_binary_cross_entropy_and_with_logits():
    loss = F.binary_cross_entropy(F.sigmoid(t(BCE_LOGITS)), t(BCE_TARGETS))
    np.testing.assert_allclose(loss.item(), 0.7491, rtol=1e-4)
    loss = F.binary_cross_entropy_with_logits(t(BCE_LOGITS), t(BCE_TARGETS))
    np.testing.assert_allclose(loss.item(), 0.7491, rtol=1e-4)
    loss = rg.nn.BCEWithLogitsLoss()(t(BCE_LOGITS), t(BCE_TARGETS))
    np.testing.assert_allclose(loss.item(), 0.7491, rtol=1e-4)


def test_binary_cross_entropy_with_weights():
    # Burn's per-class weights [3, 7] gathered by the target: torch's per-element weight
    weight = t([3.0, 7.0, 3.0, 7.0])
    loss = F.binary_cross_entropy(F.sigmoid(t(BCE_LOGITS)), t(BCE_TARGETS), weight=weight)
    np.testing.assert_allclose(loss.item(), 3.1531, rtol=1e-4)
    loss = rg.nn.BCELoss(weight=weight)(F.sigmoid(t(BCE_LOGITS)), t(BCE_TARGETS))
    np.testing.assert_allclose(loss.item(), 3.1531, rtol=1e-4)


def test_binary_cross_entropy_with_smoothing():
    smooth = t([v * (1 - 0.1) + 0.1 / 2 for v in BCE_TARGETS])
    loss = F.binary_cross_entropy(F.sigmoid(t(BCE_LOGITS)), smooth)
    np.testing.assert_allclose(loss.item(), 0.7490, rtol=1e-4)


def test_binary_cross_entropy_multilabel():
    loss = F.binary_cross_entropy_with_logits(t(ML_LOGITS), t(ML_TARGETS))
    np.testing.assert_allclose(loss.item(), 0.7112, rtol=1e-4)
    weight = t([3.0, 7.0, 0.9])
    approx(F.binary_cross_entropy_with_logits(t(ML_LOGITS), t(ML_TARGETS), weight=weight), 3.1708)
    approx(rg.nn.BCEWithLogitsLoss(weight=weight)(t(ML_LOGITS), t(ML_TARGETS)), 3.1708)
    smooth = t(np.asarray(ML_TARGETS) * (1 - 0.1) + 0.1 / 3)
    approx(F.binary_cross_entropy(F.sigmoid(t(ML_LOGITS)), smooth), 0.7228)


def test_binary_cross_entropy_weights_must_match_the_classes():
    # Burn: should_panic "The number of classes"; torch: a broadcasting error
    with pytest.raises(rg.ShapeError):
        F.binary_cross_entropy_with_logits(t(ML_LOGITS), t(ML_TARGETS), weight=t([3.0, 7.0]))


def test_binary_cross_entropy_gradient_matches_finite_differences():
    x = t(ML_LOGITS).require_grad()
    weight = t([3.0, 7.0, 0.9])
    grads = F.binary_cross_entropy_with_logits(x, t(ML_TARGETS), weight=weight).backward()
    # d/dx mean(w * bce_logits(x, y)) = w * (sigmoid(x) - y) / n
    xs, ys = np.asarray(ML_LOGITS), np.asarray(ML_TARGETS)
    expected = np.array([3.0, 7.0, 0.9]) * (1 / (1 + np.exp(-xs)) - ys) / 6
    approx(x.grad(grads), expected, tol=1e-5)


# ---- loss/huber.rs ---------------------------------------------------------------------------


def test_huber_loss():
    predict, targets = t([-2.0, -0.5, 0.0, 0.3, 1.0]), rg.zeros(5)
    approx(
        F.huber_loss(predict, targets, reduction="none", delta=0.5),
        [0.875, 0.125, 0.0, 0.045, 0.375],
    )
    approx(F.huber_loss(predict, targets, delta=0.5), 0.284)
    approx(F.huber_loss(predict, targets, reduction="sum", delta=0.5), 1.42)
    approx(rg.nn.HuberLoss(delta=0.5)(predict, targets), 0.284)


def test_huber_loss_backward():
    predict = t([-2.0, -0.5, 0.0, 0.3, 1.0]).require_grad()
    grads = F.huber_loss(predict, rg.zeros(5), reduction="none", delta=0.5).backward()
    approx(predict.grad(grads), [-0.5, -0.5, 0.0, 0.3, 0.5])


# ---- loss/kldiv.rs ---------------------------------------------------------------------------


def test_kl_div_loss():
    predict, targets = t([[-1.0, -0.5], [-2.0, -0.2]]), t([[0.4, 0.6], [0.1, 0.9]])
    np.testing.assert_allclose(
        F.kl_div(predict, targets, reduction="none").numpy(),
        [[0.0334837139, -0.0064953566], [-0.0302585065, 0.0851755068]],
        atol=1e-5,
    )
    np.testing.assert_allclose(
        F.kl_div(predict, targets, reduction="sum").item(), 0.08191, atol=1e-5
    )
    np.testing.assert_allclose(
        F.kl_div(predict, targets, reduction="batchmean").item(), 0.04095, atol=1e-5
    )
    np.testing.assert_allclose(
        rg.nn.KLDivLoss(reduction="batchmean")(predict, targets).item(), 0.04095, atol=1e-5
    )


def test_kl_div_loss_log_target():
    predict, targets = t([-1.0, -2.0]), t([-0.5, -1.5])
    np.testing.assert_allclose(
        F.kl_div(predict, targets, reduction="none", log_target=True).numpy(),
        [0.3032653299, 0.1115650801],
        atol=1e-5,
    )
    np.testing.assert_allclose(
        F.kl_div(predict, targets, reduction="batchmean", log_target=True).item(),
        0.207415204965,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        F.kl_div(predict, targets, reduction="sum", log_target=True).item(),
        0.414830409931,
        atol=1e-5,
    )


def test_kl_div_loss_backward():
    predict = t([[-1.0, -0.5]]).require_grad()
    grads = F.kl_div(predict, t([[0.4, 0.6]]), reduction="sum").backward()
    approx(predict.grad(grads), [[-0.4, -0.6]])


# ---- loss/cosine_embedding.rs ----------------------------------------------------------------

EYE2 = [[1.0, 0.0], [0.0, 1.0]]


def test_cosine_embedding_loss_positive_negative_and_mixed_targets():
    x1, x2 = t(EYE2), t(EYE2)
    positive = rg.tensor([1, 1])
    approx(F.cosine_embedding_loss(x1, x2, positive, reduction="none"), [0.0, 0.0])
    approx(F.cosine_embedding_loss(x1, x2, positive), 0.0)
    approx(F.cosine_embedding_loss(x1, x2, positive, reduction="sum"), 0.0)
    negative = rg.tensor([-1, -1])
    approx(F.cosine_embedding_loss(x1, x2, negative, reduction="none"), [1.0, 1.0])
    approx(F.cosine_embedding_loss(x1, x2, negative), 1.0)
    approx(F.cosine_embedding_loss(x1, x2, negative, reduction="sum"), 2.0)
    approx(F.cosine_embedding_loss(x1, x2, negative, margin=0.5), 0.5)
    approx(rg.nn.CosineEmbeddingLoss(margin=0.5)(x1, x2, negative), 0.5)
    mixed = rg.tensor([1, -1])
    approx(F.cosine_embedding_loss(x1, x2, mixed, reduction="none"), [0.0, 1.0])
    approx(F.cosine_embedding_loss(x1, x2, mixed), 0.5)


# ---- loss/poisson.rs -------------------------------------------------------------------------

POISSON_PRED = [0.0, 0.0, -40.0, 1.0, 2.0, 3.0]
POISSON_TARGET = [1.0, 4.5, 2.5, 0.0, 0.0, 2.0]


def test_poisson_nll_loss():
    pred, target = t(POISSON_PRED), t(POISSON_TARGET)
    approx(
        F.poisson_nll_loss(pred, target, reduction="none"),
        [1.0000, 1.0000, 100.0000, 2.7183, 7.3891, 14.0855],
    )
    approx(F.poisson_nll_loss(pred, target), 21.0321)
    approx(F.poisson_nll_loss(pred, target, reduction="sum"), 126.1929)
    approx(rg.nn.PoissonNLLLoss()(pred, target), 21.0321)


def test_poisson_nll_loss_no_log_input():
    pred = t([0.0, 0.5, 1.0, 1.0, 2.71828, 7.38905, 20.0855])
    target = t([2.0, 3.0, 1.0, 4.5, 0.0, 0.0, 2.0])
    approx(
        F.poisson_nll_loss(pred, target, log_input=False, reduction="none"),
        [36.84136, 2.579441, 1.0, 1.0, 2.71828, 7.38905, 14.0855],
    )


def test_poisson_nll_loss_full():
    pred, target = t(POISSON_PRED), t(POISSON_TARGET)
    approx(
        F.poisson_nll_loss(pred, target, full=True, reduction="none"),
        [1.0000, 4.9393, 101.1678, 2.7183, 7.3891, 14.7373],
    )
    approx(F.poisson_nll_loss(pred, target, full=True), 21.9920)
    approx(F.poisson_nll_loss(pred, target, full=True, reduction="sum"), 131.9518)


def test_poisson_nll_loss_gradients():
    expected = [0.0000, -3.5000, -2.5000, 2.7183, 7.3891, 18.0855]
    for full in (False, True):
        pred = t(POISSON_PRED).require_grad()
        grads = F.poisson_nll_loss(pred, t(POISSON_TARGET), full=full, reduction="sum").backward()
        approx(pred.grad(grads), expected)


def test_poisson_nll_loss_shape_mismatch():
    # Burn: should_panic "Shape of targets"; torch: a broadcasting error
    with pytest.raises(rg.ShapeError):
        F.poisson_nll_loss(t([0.0, 1.0, 2.0]), t([0.0, 1.0]), reduction="none")


# ---- loss/gaussian_nll.rs --------------------------------------------------------------------


def test_gaussian_nll_loss():
    x, target, var = t([1.0, 2.0]), t([1.5, 1.0]), t([0.5, 1.0])
    approx(F.gaussian_nll_loss(x, target, var, reduction="none"), [-0.096574, 0.5])
    approx(F.gaussian_nll_loss(x, target, var), 0.201713)
    approx(F.gaussian_nll_loss(x, target, var, reduction="sum"), 0.403426)
    approx(rg.nn.GaussianNLLLoss()(x, target, var), 0.201713)
    approx(F.gaussian_nll_loss(x, target, var, full=True, reduction="none"), [0.822365, 1.418939])


def test_gaussian_nll_loss_clamps_var_to_eps():
    x, target = t([1.0, 2.0]), t([1.5, 1.0])
    clamped = F.gaussian_nll_loss(x, target, t([1e-8, 1e-8]), reduction="none")
    at_eps = F.gaussian_nll_loss(x, target, t([1e-6, 1e-6]), reduction="none")
    approx(clamped, at_eps.numpy())
    # the clamped loss is 0.5 * (log(eps) + d^2 / eps): finite, not log(1e-8)'s
    approx(clamped, [0.5 * (math.log(1e-6) + 0.25 / 1e-6), 0.5 * (math.log(1e-6) + 1.0 / 1e-6)])


# ---- loss/hinge_embedding.rs, margin_ranking.rs, multi_margin.rs, soft_margin.rs,
# triplet_margin.rs -----------------------------------------------------------------------------


def test_hinge_embedding_loss():
    x, target = t([0.5, 2.0, 1.5]), t([1.0, -1.0, -1.0])
    approx(F.hinge_embedding_loss(x, target, reduction="none"), [0.5, 0.0, 0.0])
    approx(F.hinge_embedding_loss(x, target), 0.166667)
    approx(F.hinge_embedding_loss(x, target, reduction="sum"), 0.5)
    approx(rg.nn.HingeEmbeddingLoss()(x, target), 0.166667)


def test_margin_ranking_loss():
    first, second, target = t([1.0, 2.0, 3.0]), t([2.0, 1.0, 0.5]), t([1.0, -1.0, 1.0])
    approx(
        F.margin_ranking_loss(first, second, target, margin=0.5, reduction="none"),
        [1.5, 1.5, 0.0],
    )
    approx(F.margin_ranking_loss(first, second, target, margin=0.5), 1.0)
    approx(F.margin_ranking_loss(first, second, target, margin=0.5, reduction="sum"), 3.0)
    approx(rg.nn.MarginRankingLoss(margin=0.5)(first, second, target), 1.0)


def test_multi_margin_loss():
    x, target = t([[0.1, 0.2, 0.7], [0.9, 0.05, 0.05]]), rg.tensor([2, 0])
    approx(F.multi_margin_loss(x, target, reduction="none"), [0.3, 0.1])
    approx(F.multi_margin_loss(x, target), 0.2)
    approx(F.multi_margin_loss(x, target, reduction="sum"), 0.4)
    approx(rg.nn.MultiMarginLoss()(x, target), 0.2)
    approx(F.multi_margin_loss(x, target, p=2, reduction="none"), [0.136667, 0.015])


def test_soft_margin_loss():
    logits, targets = t([[0.5, -1.0], [2.0, -0.5]]), t([[1.0, -1.0], [-1.0, 1.0]])
    approx(
        F.soft_margin_loss(logits, targets, reduction="none"),
        [[0.474077, 0.313262], [2.126928, 0.974077]],
    )
    approx(F.soft_margin_loss(logits, targets), 0.972086)
    approx(F.soft_margin_loss(logits, targets, reduction="sum"), 3.888344)
    approx(rg.nn.SoftMarginLoss()(logits, targets), 0.972086)


def test_triplet_margin_loss():
    anchor = t([[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    positive = t([[1.0, 1.0], [1.0, 2.0], [0.0, 0.0]])
    negative = t([[1.0, 0.0], [0.0, 0.0], [5.0, 0.0]])
    approx(
        F.triplet_margin_loss(anchor, positive, negative, reduction="none"),
        [1.414214, 0.585786, 0.0],
    )
    approx(F.triplet_margin_loss(anchor, positive, negative), 0.666667)
    approx(F.triplet_margin_loss(anchor, positive, negative, reduction="sum"), 2.0)
    approx(rg.nn.TripletMarginLoss()(anchor, positive, negative), 0.666667)


# ---- loss/smooth_l1.rs -----------------------------------------------------------------------


def smooth_l1(pred, target=None, **kw):
    pred = t(pred)
    target = rg.zeros(pred.shape) if target is None else t(target)
    return F.smooth_l1_loss(pred, target, **kw)


def test_smooth_l1_forward_regions():
    approx(smooth_l1([[0.0, 0.5]], reduction="none"), [[0.0, 0.125]])
    approx(smooth_l1([[0.0, 2.0]], reduction="none"), [[0.0, 1.5]])
    approx(smooth_l1([[1.0, 2.0, 3.0]], [[1.0, 2.0, 3.0]], reduction="none"), [[0.0, 0.0, 0.0]])
    approx(smooth_l1([-3.0], reduction="none"), [2.5])
    approx(smooth_l1([0.5, 1.5, 3.0], reduction="none"), [0.125, 1.0, 2.5])
    approx(smooth_l1([0.25, 1.0], reduction="none", beta=0.5), [0.0625, 0.75])
    approx(
        rg.nn.SmoothL1Loss(reduction="none", beta=0.5)(t([0.25, 1.0]), rg.zeros(2)), [0.0625, 0.75]
    )


def test_smooth_l1_reductions():
    approx(smooth_l1([[0.5, 2.0]]), 0.8125)
    approx(smooth_l1([[0.5, 2.0]], reduction="mean"), 0.8125)
    approx(smooth_l1([[0.5, 2.0]], reduction="sum"), 1.625)
    approx(smooth_l1([2.0]), smooth_l1([2.0], reduction="mean").item())


def test_smooth_l1_reduce_dims():
    rows = smooth_l1(
        [[0.0, 1.0, 4.0], [5.0, 5.0, 5.0]],
        [[0.0, 0.0, 0.0], [5.0, 5.0, 5.0]],
        reduction="none",
        beta=2.0,
    )
    approx(rows.mean(1, keepdim=True), [[3.25 / 3.0], [0.0]])
    images = smooth_l1([[[[0.5, 2.0], [0.0, 3.0]]], [[[1.0, 0.0], [0.5, 1.5]]]], reduction="none")
    approx(images.mean((1, 2, 3), keepdim=True), [[[[1.03125]]], [[[0.40625]]]])
    cube = smooth_l1([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]], reduction="none")
    approx(cube.mean((2, 1), keepdim=True), cube.mean((1, 2), keepdim=True).numpy())
    approx(cube.mean((-2, -1), keepdim=True), cube.mean((1, 2), keepdim=True).numpy())


def test_smooth_l1_beta():
    # Burn panics on beta <= 0; torch (and retrograd) reject a negative beta and read beta = 0 as L1
    with pytest.raises(ValueError, match="beta"):
        smooth_l1([1.0], beta=-1.0)
    approx(smooth_l1([1.0, 0.2], reduction="none", beta=0.0), [1.0, 0.2])


# ---- loss/lp_loss.rs: p = 1 and p = 2 are torch's l1_loss and mse_loss ------------------------

LP_PRED = [[1.0, 2.0], [3.0, 4.0]]
LP_TARGET = [[2.0, 1.0], [3.0, 2.0]]


def test_lp_loss_l1_and_l2():
    pred, target = t(LP_PRED), t(LP_TARGET)
    np.testing.assert_array_equal(
        F.l1_loss(pred, target, reduction="none").numpy(), [[1.0, 1.0], [0.0, 2.0]]
    )
    assert F.l1_loss(pred, target).item() == 1.0
    assert F.l1_loss(pred, target, reduction="sum").item() == 4.0
    assert rg.nn.L1Loss()(pred, target).item() == 1.0
    np.testing.assert_array_equal(
        F.mse_loss(pred, target, reduction="none").numpy(), [[1.0, 1.0], [0.0, 4.0]]
    )
    assert F.mse_loss(pred, target).item() == 1.5
    assert F.mse_loss(pred, target, reduction="sum").item() == 6.0
    assert F.l1_loss(pred, pred).item() == 0.0
    assert F.mse_loss(pred, pred).item() == 0.0
    np.testing.assert_array_equal(
        F.l1_loss(t([1.0, 2.0, 3.0]), t([3.0, 4.0, 5.0]), reduction="none").numpy(), [2.0] * 3
    )
    cube_pred = t([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    cube_target = t([[[0.0, 2.0], [3.0, 5.0]], [[4.0, 6.0], [7.0, 10.0]]])
    assert F.mse_loss(cube_pred, cube_target).item() == 0.875


def test_lp_loss_reduce_dims():
    pred = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    l2 = F.mse_loss(pred, t([[0.0, 2.0, 6.0], [1.0, 5.0, 6.0]]), reduction="none")
    approx(l2.mean(1, keepdim=True), [[10.0 / 3.0], [3.0]])
    approx(l2.mean(0, keepdim=True), [[5.0, 0.0, 4.5]])
    l1 = F.l1_loss(pred, t([[0.0, 5.0, 3.0], [1.0, 5.0, 9.0]]), reduction="none")
    approx(l1.mean(1, keepdim=True), [[4.0 / 3.0], [2.0]])
    cube = F.mse_loss(
        t([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]),
        t([[[0.0, 2.0], [3.0, 6.0]], [[4.0, 6.0], [7.0, 10.0]]]),
        reduction="none",
    )
    approx(cube.mean((1, 2), keepdim=True), [[[1.25]], [[1.25]]])
    images = F.mse_loss(
        t([[[[1.0, 2.0], [3.0, 4.0]]], [[[5.0, 6.0], [7.0, 8.0]]]]),
        t([[[[0.0, 2.0], [3.0, 6.0]]], [[[5.0, 5.0], [7.0, 7.0]]]]),
        reduction="none",
    )
    approx(images.mean((1, 2, 3), keepdim=True), [[[[1.25]]], [[[0.5]]]])
    whole = F.mse_loss(t(LP_PRED), t(LP_TARGET), reduction="none")
    approx(whole.mean((0, 1), keepdim=True), [[1.5]])


# ---- activation/*.rs -------------------------------------------------------------------------


def test_celu_and_elu():
    approx(F.celu(t([[0.5, -0.5, -1.0]])), [[0.5, -0.393469, -0.632121]])
    approx(rg.nn.CELU()(t([[0.5, -0.5, -1.0]])), [[0.5, -0.393469, -0.632121]])
    approx(F.celu(t([[0.0, -2.0]]), alpha=2.0), [[0.0, -1.264241]])
    approx(rg.nn.CELU(alpha=2.0)(t([[0.0, -2.0]])), [[0.0, -1.264241]])
    approx(F.elu(t([[0.4410, -0.2507]])), [[0.4410, -0.22186]])
    approx(rg.nn.ELU()(t([[0.4410, -0.2507]])), [[0.4410, -0.22186]])


def test_gelu_approximate():
    x = t([[-1.0, 0.0, 1.0], [0.5, -0.5, 2.0]])
    expected = [
        [-0.1588079929, 0.0000000000, 0.8411920071],
        [0.3457140028, -0.1542859972, 1.9545977116],
    ]
    np.testing.assert_allclose(
        F.gelu(x, approximate="tanh").numpy(), expected, rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(
        rg.nn.GELU(approximate="tanh")(x).numpy(), expected, rtol=1e-5, atol=1e-5
    )


def test_glu_negative_dim():
    x = t(
        [
            [
                [-0.5710, -1.3416, 1.9128, -0.8257, -0.1331, -1.4804, -0.6281, -0.6115],
                [0.0267, -1.3834, 0.2752, 0.7844, -0.3549, -0.4274, 0.3290, -0.5459],
                [-1.6347, -2.0908, 1.8801, 0.3541, 0.2237, 1.0377, 2.4850, 0.3490],
            ]
        ]
    )
    expected = [
        [
            [-0.2665, -0.2487, 0.6656, -0.2904],
            [0.0110, -0.5461, 0.1601, 0.2877],
            [-0.9084, -1.5439, 1.7355, 0.2077],
        ]
    ]
    approx(F.glu(x, -1), expected)
    approx(rg.nn.GLU(-1)(x), expected)


def test_hard_shrink_and_soft_shrink():
    x = t([[0.5, -0.5, -1.0], [8.0, 0.3, 0.0]])
    np.testing.assert_array_equal(F.hardshrink(x).numpy(), [[0.0, 0.0, -1.0], [8.0, 0.0, 0.0]])
    np.testing.assert_array_equal(
        rg.nn.Hardshrink()(x).numpy(), [[0.0, 0.0, -1.0], [8.0, 0.0, 0.0]]
    )
    y = t([[0.1, -0.1, -0.3], [0.5, 0.1, 0.0]])
    np.testing.assert_array_equal(  # Burn compares f32 values exactly
        F.hardshrink(y, 0.2).numpy(), np.float32([[0.0, 0.0, -0.3], [0.5, 0.0, 0.0]])
    )
    np.testing.assert_array_equal(F.softshrink(x).numpy(), [[0.0, 0.0, -0.5], [7.5, 0.0, 0.0]])
    np.testing.assert_array_equal(
        rg.nn.Softshrink()(x).numpy(), [[0.0, 0.0, -0.5], [7.5, 0.0, 0.0]]
    )
    z = t([[0.125, -0.125, -0.5], [0.75, 0.1, 0.0]])
    np.testing.assert_array_equal(
        F.softshrink(z, 0.25).numpy(), [[0.0, 0.0, -0.25], [0.5, 0.0, 0.0]]
    )


def test_hard_sigmoid_and_hard_swish():
    approx(F.hard_sigmoid(t([[0.4410, -0.2507]])), [[0.5882, 0.44986]])
    approx(F.hardswish(t([[3.0, -3.0], [0.0, 1.0]])), [[3.0, 0.0], [0.0, 0.6666667]])
    approx(rg.nn.Hardswish()(t([[3.0, -3.0], [0.0, 1.0]])), [[3.0, 0.0], [0.0, 0.6666667]])


LEAKY_INPUT = [
    [
        [-1.0222, 1.5810, 0.3457, -1.3530],
        [0.0231, 0.8681, 0.2473, -0.0377],
        [0.3520, -1.1199, 1.2219, 0.2804],
    ],
    [
        [1.0002, 0.7259, 0.8779, 0.2084],
        [1.5615, -0.1057, -0.4886, -1.5184],
        [-0.5523, -0.2741, -0.0210, -1.1352],
    ],
]
LEAKY_EXPECTED = [
    [
        [-1.0222e-02, 1.5810e00, 3.457e-01, -1.3530e-02],
        [2.31e-02, 8.681e-01, 2.473e-01, -3.77e-04],
        [3.52e-01, -1.1199e-02, 1.2219e00, 2.804e-01],
    ],
    [
        [1.0002e00, 7.259e-01, 8.779e-01, 2.084e-01],
        [1.5615e00, -1.057e-03, -4.886e-03, -1.5184e-02],
        [-5.523e-03, -2.741e-03, -2.1e-04, -1.1352e-02],
    ],
]


def test_leaky_relu():
    approx(rg.nn.LeakyReLU()(t([[0.4410, -0.2507]])), [[0.4410, -0.002507]], tol=1e-7)
    approx(F.leaky_relu(t(LEAKY_INPUT)), LEAKY_EXPECTED)
    approx(rg.nn.LeakyReLU()(t(LEAKY_INPUT)), LEAKY_EXPECTED)


def test_rrelu():
    x = t([[-2.0, -1.0, 0.0], [0.5, 1.0, 2.0]])
    expected = [[-0.4, -0.2, 0.0], [0.5, 1.0, 2.0]]  # eval: the midpoint slope (0.1 + 0.3) / 2
    approx(F.rrelu(x, 0.1, 0.3, training=False), expected)
    approx(rg.nn.RReLU(0.1, 0.3).eval()(x), expected)
    rg.seed(0)
    negative = t([[-1.0, -2.0], [-3.0, -4.0]])
    out = rg.nn.RReLU().train()(negative).numpy()
    assert not np.array_equal(out, negative.numpy())
    slopes = out / negative.numpy()
    assert np.all((slopes >= 1 / 8 - 1e-6) & (slopes <= 1 / 3 + 1e-6))
    # Burn panics in init ("must be <= upper bound"); torch constructs and raises in forward
    with pytest.raises(ValueError, match="lower bound"):
        rg.nn.RReLU(0.5, 0.2).eval()(x)


def test_softplus():
    approx(F.softplus(t([[0.0, 1.0, -1.0]])), [[0.6931, 1.3133, 0.3133]])
    approx(rg.nn.Softplus()(t([[0.0, 1.0, -1.0]])), [[0.6931, 1.3133, 0.3133]])
    approx(F.softplus(t([[0.0, 1.0]]), beta=2.0), [[0.3466, 1.0635]])
    approx(rg.nn.Softplus(beta=2.0)(t([[0.0, 1.0]])), [[0.3466, 1.0635]])


def test_thresholded_relu():
    np.testing.assert_array_equal(
        F.thresholded_relu(t([[0.5, 1.5, -0.2]])).numpy(), [[0.0, 1.5, 0.0]]
    )


def swiglu(x, bias):
    linear_inner = rg.nn.Linear(3, 3, bias=bias)
    linear_outer = rg.nn.Linear(3, 3, bias=bias)
    for layer in (linear_inner, linear_outer):
        for p in layer.parameters():
            rg.nn.init.constant_(p, 0.5)  # Burn's Initializer::Constant { value: 0.5 }
    return F.silu(linear_inner(x)) * linear_outer(x)


def test_swiglu_forward():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    approx(swiglu(x, False), [[8.5732] * 3, [56.2189] * 3])
    approx(swiglu(x, True), [[11.8909] * 3, [63.9785] * 3])
