"""Regression tests for the defects the ports of ``tests/test_real_ports_221.py`` onward found
(probabilistic and scientific programs), each checked against torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg

# each family with two parameter sets, as (name, args): batches of two, float64, so that the
# closed forms are checked against torch's to rounding
FAMILIES = {
    "Bernoulli": [([0.3, 0.7],), ([0.6, 0.2],)],
    "Beta": [([2.0, 0.7], [3.0, 1.5]), ([1.5, 4.0], [0.8, 2.0])],
    "Binomial": [(5, [0.3, 0.7]), (5, [0.6, 0.2])],
    "ContinuousBernoulli": [([0.3, 0.8],), ([0.6, 0.2],)],
    "Exponential": [([2.0, 0.5],), ([1.0, 3.0],)],
    "Gamma": [([2.0, 3.0], [1.0, 0.5]), ([1.5, 2.0], [2.0, 1.0])],
    "Gumbel": [([1.0, -0.5], [2.0, 0.7]), ([0.0, 0.3], [1.0, 1.5])],
    "Laplace": [([0.0, 1.0], [1.0, 2.0]), ([1.0, -1.0], [2.0, 0.5])],
    "Normal": [([0.0, 1.0], [1.0, 2.0]), ([0.5, -1.0], [1.5, 0.7])],
    "Pareto": [([1.0, 0.5], [3.0, 2.5]), ([0.5, 0.2], [2.0, 1.5])],
    "Poisson": [([2.0, 0.5],), ([3.0, 1.0],)],
    "Uniform": [([0.2, 0.1], [0.7, 0.9]), ([-1.0, 0.0], [2.0, 1.5])],
}

# every pair torch registers between two of these families
PAIRS = sorted(
    (p.__name__, q.__name__)
    for p, q in torch.distributions.kl._KL_REGISTRY
    if p.__name__ in FAMILIES and q.__name__ in FAMILIES
)


def _make(lib, name, args, grad=False):
    tensors = [
        lib.tensor(a, dtype=lib.float64, requires_grad=grad) if isinstance(a, list) else a
        for a in args
    ]
    family = getattr(lib.distributions, name)
    if name in ("Bernoulli", "ContinuousBernoulli"):
        return family(probs=tensors[0]), tensors
    if name == "Binomial":
        return family(total_count=tensors[0], probs=tensors[1]), tensors
    return family(*tensors), tensors


@pytest.mark.parametrize(("p_name", "q_name"), PAIRS)
def test_kl_divergence_between_families_as_torchs(p_name, q_name):
    """Before: some 40 of torch's registered pairs (Beta-Normal, Uniform-Gamma, Gumbel-Normal,
    Pareto-Exponential, the infinite ones...) raised NotImplementedError; each is torch's
    closed form now, value and gradient."""
    for which in range(2):
        values, grads = [], []
        for lib in (torch, rg):
            p, p_params = _make(lib, p_name, FAMILIES[p_name][which], grad=True)
            q, q_params = _make(lib, q_name, FAMILIES[q_name][1 - which], grad=True)
            kl = lib.distributions.kl_divergence(p, q)
            values.append(np.asarray(kl.detach().numpy()))
            leaves = [t for t in p_params + q_params if hasattr(t, "requires_grad")]
            finite = lib.isfinite(kl)
            if bool(finite.all()) and kl.requires_grad:
                g = lib.autograd.grad(kl.sum(), leaves, allow_unused=True)
                grads.append([None if x is None else np.asarray(x.numpy()) for x in g])
            else:
                grads.append(None)
        np.testing.assert_allclose(values[1], values[0], rtol=1e-9, atol=1e-12)
        assert values[1].shape == values[0].shape
        if grads[0] is not None:
            assert grads[1] is not None
            for mine, theirs in zip(grads[1], grads[0], strict=True):
                if theirs is None:
                    assert mine is None or not np.any(mine)
                else:
                    np.testing.assert_allclose(mine, theirs, rtol=1e-6, atol=1e-10)
