"""``F.nll_loss`` and ``F.cross_entropy``'s class-index loss without class weights or label
smoothing record one ``nll_loss`` op (7 December): the composite's forward arithmetic in its
order, and torch's ``nll_loss_backward`` as its rule, ``-g / count`` written into zeros at
each target's class (0 where ignored). As a composite the loss was 9 recorded nodes, and its
gradient added the values into zeros, where torch writes them: the sign of a zero gradient
differed from torch's for an upstream gradient of -0.0, and ignored rows got -0.0.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")

F = rg.nn.functional
TF = torch.nn.functional

TARGETS = np.array([1, 1, 2, 0])


def _logits():
    values = np.random.default_rng(0).standard_normal((4, 3))
    values[0, 1] = -np.inf  # (a log-probability of an impossible class)
    return values


def test_a_class_index_loss_records_one_op_after_log_softmax():
    x = rg.tensor(_logits()).require_grad()
    loss = F.cross_entropy(x, rg.tensor(TARGETS))
    node = loss.primitive.node
    assert node.op.name == "nll_loss"
    assert [parent.op.name for parent in node.parents if parent is not None] == ["log_softmax"]
    # label smoothing keeps its composite (two terms, torch's order)
    smoothed = F.cross_entropy(x, rg.tensor(TARGETS), label_smoothing=0.1)
    assert smoothed.primitive.node.op.name != "nll_loss"


@pytest.mark.parametrize("upstream", [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -1.5])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [-100, 1, 0])
def test_the_gradient_has_torchs_bits_zero_signs_and_nans_included(
    upstream, reduction, ignore_index
):
    x = rg.tensor(_logits(), backend=rg.Autodiff(inner_backend())).require_grad()
    loss = F.nll_loss(x, rg.tensor(TARGETS), ignore_index=ignore_index, reduction=reduction)
    (ours,) = rg.autograd.grad(loss, [x], grad_outputs=rg.tensor(np.float64(upstream)))
    tx = torch.tensor(_logits(), requires_grad=True)
    their_loss = TF.nll_loss(
        tx, torch.tensor(TARGETS), ignore_index=ignore_index, reduction=reduction
    )
    (theirs,) = torch.autograd.grad(
        their_loss, [tx], grad_outputs=torch.tensor(upstream, dtype=torch.float64)
    )
    np.testing.assert_array_equal(loss.numpy(), their_loss.detach().numpy())
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(np.signbit(ours.numpy()), np.signbit(theirs.numpy()))


@pytest.mark.parametrize("fn", ["nll_loss", "cross_entropy"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_second_derivatives_as_torchs(fn, reduction):
    x = rg.tensor(_logits() if fn == "cross_entropy" else -np.abs(_logits())).require_grad()
    values = x.numpy().copy()
    loss = getattr(F, fn)(x, rg.tensor(TARGETS), ignore_index=2, reduction=reduction)
    (grad,) = rg.autograd.grad(loss.sum(), [x], create_graph=True)
    (second,) = rg.autograd.grad((grad * grad).sum(), [x])
    tx = torch.tensor(values, requires_grad=True)
    their_loss = getattr(TF, fn)(tx, torch.tensor(TARGETS), ignore_index=2, reduction=reduction)
    (their_grad,) = torch.autograd.grad(their_loss.sum(), [tx], create_graph=True)
    (their_second,) = torch.autograd.grad((their_grad * their_grad).sum(), [tx])
    assert grad.requires_grad and their_grad.requires_grad
    np.testing.assert_allclose(second.numpy(), their_second.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_recomputed_under_a_budget_with_the_same_bits(reduction):
    rng = np.random.default_rng(1)
    logits, weights, targets = (
        rng.standard_normal((16, 5)),
        rng.standard_normal((5, 5)),
        rng.integers(0, 5, 16),
    )
    targets[3] = -100
    found = []
    for strategy in (rg.NoCheckpointing(), rg.BudgetCheckpointing(64)):
        backend = rg.Autodiff(inner_backend(), strategy)
        w = rg.tensor(weights, backend=backend).require_grad()
        x, t = rg.tensor(logits, backend=backend), rg.tensor(targets, backend=backend)
        total = F.cross_entropy((x @ w).tanh(), t, reduction=reduction).sum()
        found.append((total.numpy(), w.grad(total.backward()).numpy()))
    (plain_loss, plain_grad), (budget_loss, budget_grad) = found
    np.testing.assert_array_equal(plain_loss, budget_loss)
    np.testing.assert_array_equal(plain_grad, budget_grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 4), (4,), (3, 4, 2)])
def test_finite_differences_float64(reduction, shape):
    from nn_testing import check_finite_differences

    rng = np.random.default_rng(5)
    logits = rng.standard_normal(shape)
    classes = shape[0] if len(shape) == 1 else shape[1]
    target_shape = () if len(shape) == 1 else shape[:1] + shape[2:]
    targets = np.asarray(rng.integers(0, classes, target_shape), dtype=np.int64)
    if targets.ndim:
        targets.flat[0] = -100  # (an ignored target)

    def loss(x, t):
        return F.cross_entropy(x, t, reduction=reduction)

    check_finite_differences(loss, [logits, targets])
