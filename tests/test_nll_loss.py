"""``F.nll_loss`` and ``nn.NLLLoss`` against PyTorch (values and gradients, float64 and float32:
class weights, ``ignore_index``, every reduction, ``[N, C]``, ``[N, C, d...]`` and unbatched
inputs), against finite differences, and their errors."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from nn_testing import check_finite_differences, compare_with_torch
from retrograd import nn

torch = pytest.importorskip("torch")

rng = np.random.default_rng(5)

CASES = {
    "[N, C]": ((6, 4), (6,)),
    "[N, C, d1, d2]": ((3, 4, 2, 5), (3, 2, 5)),
    "unbatched": ((4,), ()),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", list(CASES))
def test_nll_loss_matches_torch(case, reduction, dtype):
    shape, target_shape = CASES[case]
    log_probs = rng.standard_normal(shape)
    target = rng.integers(0, 4, size=target_shape)
    weight = rng.random(4) + 0.5
    for kwargs in (
        {},
        {"weight": weight},
        {"ignore_index": 2},
        {"weight": weight, "ignore_index": 1},
    ):
        # PyTorch has no gradient for the class weights: they are constants here
        def call(module, x, t, kwargs=kwargs):
            options = dict(kwargs, reduction=reduction)
            if "weight" in options:
                as_tensor = torch.tensor if module is not F else rg.tensor
                options["weight"] = as_tensor(options["weight"].astype(dtype))
            return module.nll_loss(x, t, **options)

        compare_with_torch(
            lambda x, t: call(F, x, t),
            lambda x, t: call(torch.nn.functional, x, t),
            [log_probs, target],
            dtype,
        )


def test_nll_loss_of_log_softmax_is_cross_entropy():
    logits = rng.standard_normal((5, 7))
    target = rng.integers(0, 7, size=5)
    compare_with_torch(
        lambda x, t: F.nll_loss(F.log_softmax(x, 1), t, ignore_index=3),
        lambda x, t: torch.nn.functional.cross_entropy(x, t, ignore_index=3),
        [logits, target],
        "float64",
    )


def test_nll_loss_finite_differences():
    # (in the class weight too: torch refuses one that requires grad, but retrograd's
    # detach() keeps a leaf requiring grad (Burn's rule), so torch code's weight=w.detach()
    # reaches it requiring grad, and its gradient is given)
    target = rng.integers(0, 4, size=(3, 2))
    check_finite_differences(
        lambda x, w: F.nll_loss(x, rg.tensor(target), w, ignore_index=0),
        [rng.standard_normal((3, 4, 2)), rng.random(4) + 0.5],
    )


def test_every_target_ignored_gives_nan_as_torch():
    x = torch.zeros(2, 3)
    t = torch.tensor([1, 1])
    expected = torch.nn.functional.nll_loss(x, t, ignore_index=1)
    with np.errstate(invalid="ignore"):  # 0 / 0 on NumPy
        ours = F.nll_loss(rg.zeros((2, 3)), rg.tensor([1, 1], dtype="int64"), ignore_index=1)
    assert np.isnan(ours.item()) and torch.isnan(expected)


def test_nll_loss_module_matches_torch_and_has_no_state():
    x, t, w = rng.standard_normal((6, 3)), rng.integers(0, 3, size=6), rng.random(3)
    ours = nn.NLLLoss(weight=rg.tensor(w), ignore_index=0, reduction="sum")
    theirs = torch.nn.NLLLoss(weight=torch.tensor(w), ignore_index=0, reduction="sum")
    np.testing.assert_allclose(
        ours(rg.tensor(x), rg.tensor(t)).item(),
        theirs(torch.tensor(x), torch.tensor(t)).item(),
        rtol=1e-12,
    )
    assert nn.NLLLoss()(rg.tensor(x), rg.tensor(t)).shape == ()


def test_nll_loss_errors_name_the_function():
    with pytest.raises(rg.DTypeError, match="nll_loss: target must be int64"):
        F.nll_loss(rg.zeros((2, 3)), rg.zeros((2,)))
    with pytest.raises(rg.ShapeError, match="nll_loss: class-index targets must have shape"):
        F.nll_loss(rg.zeros((2, 3)), rg.tensor([0, 1, 2], dtype="int64"))
    with pytest.raises(rg.IndexOutOfRangeError, match="nll_loss: target 3 is out of range"):
        F.nll_loss(rg.zeros((2, 3)), rg.tensor([0, 3], dtype="int64"))
    with pytest.raises(rg.InvalidArgumentError, match="reduction"):
        F.nll_loss(rg.zeros((2, 3)), rg.tensor([0, 1], dtype="int64"), reduction="avg")
    with pytest.raises(rg.ShapeError, match="class dimension"):
        F.nll_loss(rg.zeros(()), rg.tensor(0, dtype="int64"))
