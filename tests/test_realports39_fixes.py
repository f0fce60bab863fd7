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


def _transforms_of(lib):
    T = lib.distributions.transforms
    return [
        T.ExpTransform(),
        T.AffineTransform(0.5, 2.0),
        T.PowerTransform(2.0),
        T.ComposeTransform([T.AffineTransform(0.5, 2.0), T.ExpTransform()]),
        T.IndependentTransform(T.SigmoidTransform(), 1),
        T.ReshapeTransform((2, 3), (6,)),
        T.StackTransform([T.ExpTransform(), T.AffineTransform(1.0, 3.0)], dim=0),
        T.CatTransform([T.ExpTransform(), T.AffineTransform(1.0, 3.0)], dim=0, lengths=[1, 1]),
        T.CumulativeDistributionTransform(lib.distributions.Normal(0.0, 1.0)),
        T.ExpTransform().inv,
    ]


@pytest.mark.parametrize("index", range(10))
def test_transforms_with_cache_as_torchs(index):
    """Before: ``Transform.with_cache`` was missing (an ``AttributeError``); now each
    transform gives itself back at the same cache size, else an equal transform that keeps
    its last ``(x, y)`` (calling it twice on one input gives the same output object, and its
    inverse gives back the input), as torch's."""
    x_np = np.abs(np.random.default_rng(index).standard_normal((2, 3))) + 0.1
    equal = []
    for lib in (torch, rg):
        transform = _transforms_of(lib)[index]
        assert transform.with_cache(0) is transform
        cached = transform.with_cache()
        assert cached is not transform and cached.with_cache(1) is cached
        assert type(cached) is type(transform)
        equal.append(cached == transform)
        x = lib.tensor(x_np)
        y = cached(x)
        np.testing.assert_allclose(y.numpy(), transform(x).numpy(), rtol=1e-12)
        assert cached(x) is y
        assert cached.inv(y) is x
        assert transform.inv(transform(x)) is not x
    assert equal[1] == equal[0]


def test_a_transform_of_ones_own_with_cache_as_torchs():
    for lib in (torch, rg):
        D = lib.distributions

        class Flip(D.Transform):
            bijective = True

            def _call(self, x):
                return x.flip(-1)

            def _inverse(self, y):
                return y.flip(-1)

        class Scaled(Flip):
            def __init__(self, factor):
                super().__init__()
                self.factor = factor

        cached = Flip().with_cache(1)
        assert type(cached) is Flip
        x = lib.tensor([1.0, 2.0])
        assert cached.inv(cached(x)) is x
        with pytest.raises(NotImplementedError, match="with_cache"):
            Scaled(2.0).with_cache(1)


def test_compose_log_abs_det_jacobian_reads_the_given_y_as_torchs():
    """Before: ``ComposeTransform.log_abs_det_jacobian(x, y)`` recomputed its last part's
    output from ``x``, ignoring ``y`` (an IAF or MAF hands the cached ``y``); torch's reads
    ``y`` for the last part."""
    results = []
    for lib in (torch, rg):
        T = lib.distributions.transforms
        x = lib.tensor([0.5, 1.5], dtype=lib.float64, requires_grad=True)
        y = lib.tensor([3.0, 7.0], dtype=lib.float64, requires_grad=True)
        compose = T.ComposeTransform([T.AffineTransform(1.0, 2.0), T.PowerTransform(3.0)])
        value = compose.log_abs_det_jacobian(x, y)
        grads = lib.autograd.grad(value.sum(), [x, y])
        results.append([value.detach().numpy(), *(g.numpy() for g in grads)])
    for mine, theirs in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)


def test_compose_with_cache_caches_its_parts_as_torchs():
    for lib in (torch, rg):
        T = lib.distributions.transforms
        compose = T.ComposeTransform([T.AffineTransform(1.0, 2.0), T.ExpTransform()], cache_size=1)
        assert all(part._cache_size == 1 for part in compose.parts)
