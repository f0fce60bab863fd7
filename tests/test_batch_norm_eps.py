"""``F.batch_norm`` (and so ``nn.BatchNorm*``) accepted ``eps <= 0`` in training and a
negative ``eps`` in evaluation, where torch 2.13 refuses both (a channel whose batch values
are equal has variance 0: ``eps=0`` divides by zero, a negative one takes a square root of a
negative number)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

CASES = [(True, 0.0), (True, -1e-5), (False, -1e-5)]


@pytest.mark.parametrize(("training", "eps"), CASES)
def test_an_eps_torch_refuses_is_refused(training, eps):
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="eps must be"):
        torch.nn.functional.batch_norm(
            torch.tensor(x), torch.zeros(3), torch.ones(3), training=training, eps=eps
        )
    with pytest.raises(rg.InvalidArgumentError, match="batch_norm: eps must be"):
        rg.nn.functional.batch_norm(
            rg.tensor(x), rg.zeros(3), rg.ones(3), training=training, eps=eps
        )


def test_a_module_with_a_zero_eps_is_refused_in_training_and_runs_in_evaluation():
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    ours, theirs = rg.nn.BatchNorm1d(3, eps=0.0), torch.nn.BatchNorm1d(3, eps=0.0)
    with pytest.raises(ValueError):
        theirs(torch.tensor(x))
    with pytest.raises(rg.InvalidArgumentError):
        ours(rg.tensor(x))
    ours.eval()
    theirs.eval()
    np.testing.assert_allclose(
        ours(rg.tensor(x)).numpy(), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-6
    )
