"""Regressions found by round 51 of the differential fuzzer
(``tests/test_random_distributions_51.py``): ``torch.distributions`` against torch 2.13.
Expected values come from torch."""

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _pair(values, dtype="float64", grad=True):
    array = np.asarray(values, dtype=dtype)
    made = rg.tensor(array).requires_grad_(grad), torch.tensor(array).requires_grad_(grad)
    return made


def _np(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


def test_lazy_logits_first_read_under_no_grad_keep_the_graph():
    """NegativeBinomial(probs=...) derived its logits on first use and cached them; sample()
    reads them inside no_grad, so after a sample log_prob and mean had no gradient in probs
    (torch's lazy_property derives under enable_grad)."""
    probs_rg, probs_t = _pair([0.3, 0.6, 0.5])
    value = np.array([1.0, 2.0, 3.0])
    grads = []
    for lib, probs in ((rg, probs_rg), (torch, probs_t)):
        lib.manual_seed(0)
        d = lib.distributions.NegativeBinomial(lib.tensor([2.0, 3.0, 4.0]).double(), probs=probs)
        d.sample((2,))
        loss = d.log_prob(lib.tensor(value)).sum() + d.mean.sum()
        grads.append(_np(lib.autograd.grad(loss, probs)[0]))
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-10)


def test_lazy_matrices_first_read_under_no_grad_keep_the_graph():
    """MultivariateNormal's precision_matrix (and ContinuousBernoulli's logits) read first
    inside no_grad were cached without a graph."""
    cov = [[2.0, 0.5], [0.5, 1.0]]
    got = []
    for lib in (rg, torch):
        c = lib.tensor(np.array(cov)).requires_grad_(True)
        p = lib.tensor(np.array([0.2, 0.7])).requires_grad_(True)
        mvn = lib.distributions.MultivariateNormal(lib.zeros(2).double(), covariance_matrix=c)
        cb = lib.distributions.ContinuousBernoulli(probs=p)
        with lib.no_grad():
            _ = (mvn.precision_matrix, cb.logits)
        (gc,) = lib.autograd.grad(mvn.precision_matrix.sum(), c)
        (gp,) = lib.autograd.grad(cb.logits.sum(), p)
        got.append((_np(gc), _np(gp)))
    np.testing.assert_allclose(got[0][0], got[1][0], rtol=1e-10)
    np.testing.assert_allclose(got[0][1], got[1][1], rtol=1e-10)


@pytest.mark.parametrize(
    "build, method, value",
    [
        (lambda lib: lib.distributions.Normal(0.0, 1.0), "cdf", float("nan")),
        (lambda lib: lib.distributions.Uniform(0.0, 1.0), "cdf", 2.0),
        (lambda lib: lib.distributions.Exponential(1.0), "cdf", -1.0),
        (lambda lib: lib.distributions.HalfNormal(1.0), "cdf", -1.0),
        (lambda lib: lib.distributions.StudentT(3.0), "log_prob", float("nan")),
        (
            lambda lib: (
                lib.distributions.RelaxedBernoulli(lib.tensor(1.5), probs=lib.tensor(0.3)).base_dist
            ),
            "log_prob",
            float("nan"),
        ),
        (
            lambda lib: (
                lib.distributions.RelaxedOneHotCategorical(
                    lib.tensor(1.5), probs=lib.tensor([0.3, 0.7])
                ).base_dist
            ),
            "log_prob",
            float("nan"),
        ),
    ],
)
def test_values_outside_the_support_raise_as_torchs(build, method, value):
    """These cdf / log_prob methods skipped the support check torch makes (a silent nan or
    0/1 instead of torch's ValueError)."""
    with pytest.raises(ValueError):
        getattr(build(torch), method)(torch.tensor([value, value]))
    d = build(rg)
    with pytest.raises(rg.InvalidArgumentError, match=type(d).__name__):
        getattr(d, method)(rg.tensor([value, value]))
    d._validate_args = False  # (without validation it computes, as torch's)
    want_d = build(torch)
    want_d._validate_args = False
    want = getattr(want_d, method)(torch.tensor([value, value]))
    got = getattr(d, method)(rg.tensor([value, value]))
    np.testing.assert_allclose(_np(got), want.numpy(), rtol=1e-5)


def test_continuous_bernoulli_checks_probs_only_when_validate_args_is_passed():
    """torch checks ContinuousBernoulli's probs only when validate_args is given (either
    value), since it clamps them first; by default probs=-1 is accepted (clamped to eps)."""
    probs = [-1.0, 0.5, 2.0]
    want = torch.distributions.ContinuousBernoulli(probs=torch.tensor(probs))
    got = rg.distributions.ContinuousBernoulli(probs=rg.tensor(probs))
    np.testing.assert_allclose(_np(got.probs), _np(want.probs), rtol=1e-6)
    np.testing.assert_allclose(_np(got.mean), _np(want.mean), rtol=1e-5)
    for flag in (True, False):
        with pytest.raises(ValueError):
            torch.distributions.ContinuousBernoulli(torch.tensor(probs), validate_args=flag)
        with pytest.raises(rg.InvalidArgumentError, match="ContinuousBernoulli"):
            rg.distributions.ContinuousBernoulli(rg.tensor(probs), validate_args=flag)


def test_bernoulli_and_binomial_have_param_shape():
    """``param_shape`` (torch's, on every probs/logits family) was missing on Bernoulli and
    Binomial."""
    for lib in (rg, torch):
        assert tuple(lib.distributions.Bernoulli(logits=lib.zeros(2, 3)).param_shape) == (2, 3)
        d = lib.distributions.Binomial(lib.tensor([[3.0], [4.0]]), probs=lib.tensor([0.2, 0.4]))
        assert tuple(d.param_shape) == (2, 2)


def _compose(lib, loc, scale):
    t = lib.distributions.transforms
    return t.ComposeTransform([t.AffineTransform(loc, scale), t.StickBreakingTransform()])


def test_compose_widens_domain_to_the_event_dims_a_later_part_reads():
    """ComposeTransform([Affine, StickBreaking]) took its domain from Affine alone (event_dim
    0, not torch's 1), so its log-det-Jacobian was not summed over the vector, and a
    TransformedDistribution over it had batch_shape () and event_shape (2, 4) instead of
    (2,) and (4,), with wrong log_prob and gradients."""
    rs = np.random.default_rng(0)
    x_np, loc_np, scale_np = rs.normal(size=(2, 3)), rs.normal(size=3), rs.uniform(0.5, 2, 3)
    results = []
    for lib in (rg, torch):
        x, loc, scale = (lib.tensor(a).requires_grad_(True) for a in (x_np, loc_np, scale_np))
        chain = _compose(lib, loc, scale)
        y = chain(x)
        ladj = chain.log_abs_det_jacobian(x, y)
        base = lib.distributions.Independent(
            lib.distributions.Normal(lib.zeros(2, 3).double(), lib.ones(2, 3).double()), 1
        )
        td = lib.distributions.TransformedDistribution(base, [chain])
        log_prob = td.log_prob(y.detach())
        grads = lib.autograd.grad(ladj.sum() + log_prob.sum(), [x, loc, scale])
        shapes = (
            chain.domain.event_dim,
            chain.codomain.event_dim,
            tuple(td.batch_shape),
            tuple(td.event_shape),
            tuple(td.sample((5,)).shape),
        )
        results.append((shapes, _np(ladj), _np(log_prob), [_np(g) for g in grads]))
    (shapes, ladj, log_prob, grads), (w_shapes, w_ladj, w_log_prob, w_grads) = results
    assert shapes == w_shapes == (1, 1, (2,), (4,), (5, 2, 4))
    np.testing.assert_allclose(ladj, w_ladj, rtol=1e-10)
    np.testing.assert_allclose(log_prob, w_log_prob, rtol=1e-10)
    for got, want in zip(grads, w_grads):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_sign_of_a_non_monotone_transform_raises_as_torchs():
    """StickBreakingTransform().sign (and the other transforms without a defined sign) was
    0, so a TransformedDistribution's cdf through one silently returned 0.5 everywhere;
    torch raises NotImplementedError."""
    for lib in (torch, rg):
        t = lib.distributions.transforms
        with pytest.raises(NotImplementedError):
            _ = t.StickBreakingTransform().sign
        with pytest.raises(NotImplementedError):
            _ = t.ComposeTransform([t.ExpTransform(), t.SoftmaxTransform()]).sign
        assert t.ComposeTransform([t.ExpTransform(), t.AffineTransform(0.0, -2.0)]).sign == -1
