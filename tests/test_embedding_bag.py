"""``F.embedding_bag`` and ``nn.EmbeddingBag`` against torch: every mode, 2-d bags and 1-d
input with offsets (``include_last_offset``, empty bags), ``padding_idx``,
``per_sample_weights``; values and gradients in float64; the module's state dict; errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from retrograd import nn
from surface_testing import same_gradients

RNG = np.random.default_rng(43)
WEIGHT = RNG.standard_normal((10, 4))
FLAT = RNG.integers(0, 10, (9,))
BAGS = {
    "2-d": (RNG.integers(0, 10, (3, 5)), None, False),
    "offsets": (FLAT, np.array([0, 2, 2, 6]), False),  # an empty bag in the middle
    "last offset": (FLAT, np.array([0, 4, 4, 9]), True),
}


@pytest.mark.parametrize("padding_idx", [None, int(FLAT[0])])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("bags", list(BAGS))
def test_embedding_bag_matches_torch(bags, mode, padding_idx):
    indices, offsets, include_last = BAGS[bags]

    def bag(lib, weight):
        return lib.nn.functional.embedding_bag(
            lib.tensor(indices),
            weight,
            None if offsets is None else lib.tensor(offsets),
            mode=mode,
            include_last_offset=include_last,
            padding_idx=padding_idx,
        )

    same_gradients(bag, [WEIGHT])


@pytest.mark.parametrize("bags", list(BAGS))
def test_per_sample_weights_match_torch(bags):
    indices, offsets, include_last = BAGS[bags]
    per_sample = RNG.standard_normal(indices.shape)

    def bag(lib, weight, scale):
        off = None if offsets is None else lib.tensor(offsets)
        return lib.nn.functional.embedding_bag(
            lib.tensor(indices), weight, off, mode="sum", per_sample_weights=scale,
            include_last_offset=include_last,
        )  # fmt: skip

    same_gradients(bag, [WEIGHT, per_sample])


def test_the_module_has_torchs_state_and_outputs():
    torch.manual_seed(1)
    theirs = torch.nn.EmbeddingBag(10, 4, mode="max", padding_idx=2).double()
    ours = nn.EmbeddingBag(10, 4, mode="max", padding_idx=2, dtype="float64")
    assert list(ours.state_dict()) == list(theirs.state_dict()) == ["weight"]
    assert np.all(ours.weight.numpy()[2] == 0.0)
    ours.load_state_dict({"weight": theirs.weight.detach().numpy()})
    x, off = torch.tensor(FLAT), torch.tensor([0, 3, 5])
    expected = theirs(x, off).detach().numpy()
    np.testing.assert_allclose(ours(rg.tensor(FLAT), rg.tensor([0, 3, 5])).numpy(), expected)


def test_errors_say_what_is_wrong_or_unsupported():
    weight = rg.tensor(WEIGHT)
    with pytest.raises(rg.InvalidArgumentError, match="only supported for mode='sum'"):
        rg.nn.functional.embedding_bag(
            rg.tensor(BAGS["2-d"][0]), weight, per_sample_weights=rg.ones((3, 5)), mode="mean"
        )
    with pytest.raises(rg.InvalidArgumentError, match="offsets has to be None"):
        rg.nn.functional.embedding_bag(rg.tensor(BAGS["2-d"][0]), weight, rg.tensor([0]))
    with pytest.raises(rg.InvalidArgumentError, match="offsets has to be a 1-d tensor"):
        rg.nn.functional.embedding_bag(rg.tensor(FLAT), weight)
    with pytest.raises(rg.InvalidArgumentError, match="max mode does not support scaling"):
        nn.EmbeddingBag(10, 4, scale_grad_by_freq=True, mode="max")(rg.tensor(BAGS["2-d"][0]))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("bags", list(BAGS))
def test_max_norm_renormalizes_the_rows_looked_up_as_torchs(bags, mode):
    """``max_norm``: the rows ``input`` looks up whose norm passes it are scaled in place
    (untracked) to ``max_norm / (norm + 1e-7)`` of themselves before the bags are reduced;
    the output, the weight left behind and its gradient equal torch's."""
    indices, offsets, include_last = BAGS[bags]
    outputs, tables, gradients = [], [], []
    for lib in (torch, rg):
        weight = (torch.tensor(WEIGHT * 2, requires_grad=True) if lib is torch
                  else rg.nn.Parameter(rg.tensor(WEIGHT * 2)))  # fmt: skip
        out = lib.nn.functional.embedding_bag(
            lib.tensor(indices), weight, None if offsets is None else lib.tensor(offsets),
            mode=mode, include_last_offset=include_last, max_norm=1.5, norm_type=1.0,
        )  # fmt: skip
        scale = np.arange(out.numel(), dtype=np.float64).reshape(tuple(out.shape))
        if lib is torch:
            (out * torch.tensor(scale)).sum().backward()
            gradients.append(weight.grad.numpy())
            outputs.append(out.detach().numpy())
            tables.append(weight.detach().numpy())
        else:
            grads = (out * rg.tensor(scale)).sum().backward()
            gradients.append(weight.grad(grads).numpy())
            outputs.append(out.numpy())
            tables.append(weight.numpy())
    for theirs, ours in (outputs, tables, gradients):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)
