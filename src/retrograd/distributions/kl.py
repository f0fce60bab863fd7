"""``kl_divergence(p, q)`` and ``register_kl(type_p, type_q)``: torch's registry of closed
forms, looked up by the most specific pair of classes (each argument's method resolution
order, as torch's), with torch's formulas for the pairs it registers between the families
here.

>>> import retrograd as rg
>>> from retrograd.distributions import Exponential
>>> round(kl_divergence(Exponential(rg.tensor(1.0)), Exponential(rg.tensor(2.0))).item(), 6)
0.306853
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ..errors import InvalidArgumentError
from .bernoulli import Bernoulli
from .categorical import Categorical
from .continuous import (
    EULER_GAMMA,
    Cauchy,
    Exponential,
    Gumbel,
    HalfNormal,
    Laplace,
    LogNormal,
    Uniform,
)
from .continuous_bernoulli import ContinuousBernoulli
from .discrete import Binomial, Geometric, OneHotCategorical, Poisson
from .exp_family import ExponentialFamily, log_normalizer_gradients
from .gamma import Beta, Dirichlet, Gamma
from .lowrank_multivariate_normal import (
    LowRankMultivariateNormal,
    _lowrank_logdet,
    _lowrank_mahalanobis,
    _trace_xxt,
)
from .multivariate_normal import Independent, MultivariateNormal, _batch_mahalanobis, solve_lower
from .normal import Normal
from .special import digamma, lgamma
from .transformed import TransformedDistribution
from .transformed_families import Pareto
from .transforms import sum_rightmost

__all__ = ["kl_divergence", "register_kl"]

_KL_REGISTRY: dict[tuple[type, type], Callable] = {}
_KL_MEMO: dict[tuple[type, type], Callable | None] = {}


def register_kl(type_p: type, type_q: type) -> Callable[[Callable], Callable]:
    """Decorator: ``fn(p, q)`` computes KL(p || q) for instances of ``type_p`` and
    ``type_q`` (and their subclasses, unless a more specific pair is registered)."""
    for t in (type_p, type_q):
        if not isinstance(t, type):
            raise InvalidArgumentError(f"register_kl: expected a class, got {t!r}")

    def decorator(fn: Callable) -> Callable:
        _KL_REGISTRY[type_p, type_q] = fn
        _KL_MEMO.clear()
        return fn

    return decorator


def _dispatch(type_p: type, type_q: type) -> Callable | None:
    """The registered pair nearest to ``(type_p, type_q)`` in both MROs."""
    best, best_rank = None, None
    for (super_p, super_q), fn in _KL_REGISTRY.items():
        if issubclass(type_p, super_p) and issubclass(type_q, super_q):
            rank = (type_p.__mro__.index(super_p), type_q.__mro__.index(super_q))
            if best_rank is None or rank < best_rank:
                best, best_rank = fn, rank
    return best


def kl_divergence(p: Any, q: Any) -> Any:
    """KL(p || q) over the batch (``batch_shape``), by the registered closed form."""
    key = (type(p), type(q))
    if key not in _KL_MEMO:
        _KL_MEMO[key] = _dispatch(*key)
    fn = _KL_MEMO[key]
    if fn is None:
        raise NotImplementedError(
            f"kl_divergence: no KL(p || q) is implemented for p = {type(p).__name__} and "
            f"q = {type(q).__name__}"
        )
    return fn(p, q)


def _infinite_where(mask: Any, value: Any) -> Any:
    return value.masked_fill(mask.expand(value.shape), math.inf)


@register_kl(Normal, Normal)
def _kl_normal_normal(p: Normal, q: Normal) -> Any:
    var_ratio = (p.scale / q.scale).pow(2)
    t1 = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (var_ratio + t1 - 1 - var_ratio.log())


@register_kl(LogNormal, LogNormal)
def _kl_lognormal_lognormal(p: LogNormal, q: LogNormal) -> Any:
    return _kl_normal_normal(p, q)  # type: ignore[arg-type]


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p: HalfNormal, q: HalfNormal) -> Any:
    var_ratio = (p.scale / q.scale).pow(2)
    return 0.5 * (var_ratio - 1 - var_ratio.log())


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p: Categorical, q: Categorical) -> Any:
    t = p.probs * (p.logits - q.logits)
    t = t.masked_fill(q.probs.eq(0).expand(t.shape), float("inf"))
    t = t.masked_fill(p.probs.eq(0).expand(t.shape), 0.0)
    return t.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehot_onehot(p: OneHotCategorical, q: OneHotCategorical) -> Any:
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p: Bernoulli, q: Bernoulli) -> Any:
    # torch's: in softplus form (softplus(-z) = -log_sigmoid(z)), a zero p term zero and a
    # term against a zero q infinite (0 * log 0 gave NaN for a p of 0 or 1)
    t1 = p.probs * (p.logits.log_sigmoid() - q.logits.log_sigmoid())
    t1 = t1.mask_fill(q.probs.eq(0), math.inf).mask_fill(p.probs.eq(0), 0.0)
    t2 = (1 - p.probs) * ((-p.logits).log_sigmoid() - (-q.logits).log_sigmoid())
    t2 = t2.mask_fill(q.probs.eq(1), math.inf).mask_fill(p.probs.eq(1), 0.0)
    return t1 + t2


@register_kl(Beta, Beta)
def _kl_beta_beta(p: Beta, q: Beta) -> Any:
    a1, b1, a2, b2 = p.concentration1, p.concentration0, q.concentration1, q.concentration0
    sum_p, sum_q = a1 + b1, a2 + b2
    t1 = lgamma(a2) + lgamma(b2) + lgamma(sum_p)
    t2 = lgamma(a1) + lgamma(b1) + lgamma(sum_q)
    t3 = (a1 - a2) * digamma(a1)
    t4 = (b1 - b2) * digamma(b1)
    t5 = (sum_q - sum_p) * digamma(sum_p)
    return t1 - t2 + t3 + t4 + t5


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p: Gamma, q: Gamma) -> Any:
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = lgamma(q.concentration) - lgamma(p.concentration)
    t3 = (p.concentration - q.concentration) * digamma(p.concentration)
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p: Dirichlet, q: Dirichlet) -> Any:
    sum_p = p.concentration.sum(-1)
    sum_q = q.concentration.sum(-1)
    t1 = lgamma(sum_p) - lgamma(sum_q)
    t2 = (lgamma(p.concentration) - lgamma(q.concentration)).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = digamma(p.concentration) - digamma(sum_p).unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)


@register_kl(Exponential, Exponential)
def _kl_exponential_exponential(p: Exponential, q: Exponential) -> Any:
    rate_ratio = q.rate / p.rate
    return -rate_ratio.log() + rate_ratio - 1


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p: Exponential, q: Gamma) -> Any:
    ratio = q.rate / p.rate
    t1 = -q.concentration * ratio.log()
    return t1 + ratio + lgamma(q.concentration) + q.concentration * EULER_GAMMA - (1 + EULER_GAMMA)


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p: Laplace, q: Laplace) -> Any:
    scale_ratio = p.scale / q.scale
    loc_abs_diff = (p.loc - q.loc).abs()
    t1 = -scale_ratio.log()
    t2 = loc_abs_diff / q.scale
    t3 = scale_ratio * (-loc_abs_diff / p.scale).exp()
    return t1 + t2 + t3 - 1


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p: Cauchy, q: Cauchy) -> Any:
    t1 = ((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)).log()
    return t1 - (4 * p.scale * q.scale).log()


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p: Gumbel, q: Gumbel) -> Any:
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * EULER_GAMMA
    t3 = (ct2 + lgamma(1 + ct1) - ct3).exp()
    return t1 + t2 + t3 - (1 + EULER_GAMMA)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p: Uniform, q: Uniform) -> Any:
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _infinite_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p: Uniform, q: Normal) -> Any:
    common = p.high - p.low
    t1 = (math.sqrt(math.pi * 2) * q.scale / common).log()
    t2 = common.pow(2) / 12
    t3 = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return t1 + 0.5 * (t2 + t3) / q.scale.pow(2)


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p: Laplace, q: Normal) -> Any:
    var_normal = q.scale.pow(2)
    scale_sqr_var_ratio = p.scale.pow(2) / var_normal
    t1 = 0.5 * (2 * scale_sqr_var_ratio / math.pi).log()
    t2 = 0.5 * p.loc.pow(2) - p.loc * q.loc + 0.5 * q.loc.pow(2)
    return -t1 + scale_sqr_var_ratio + t2 / var_normal - 1


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p: Normal, q: Laplace) -> Any:
    loc_diff = p.loc - q.loc
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = (p.scale / q.scale).log()
    t2 = math.sqrt(2 / math.pi) * p.scale * (-0.5 * loc_diff_scale_ratio.pow(2)).exp()
    t3 = loc_diff * (math.sqrt(0.5) * loc_diff_scale_ratio).erf()
    return -t1 + (t2 + t3) / q.scale - 0.5 * (1 + math.log(0.5 * math.pi))


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p: Exponential, q: Normal) -> Any:
    var_normal = q.scale.pow(2)
    rate_sqr = p.rate.pow(2)
    t1 = 0.5 * (rate_sqr * var_normal * 2 * math.pi).log()
    t2 = rate_sqr.reciprocal() - q.loc / p.rate + 0.5 * q.loc.pow(2)
    return t1 - 1 + t2 / var_normal


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p: Gamma, q: Exponential) -> Any:
    return -p.entropy() - q.rate.log() + q.rate * p.concentration / p.rate


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p: Gamma, q: Normal) -> Any:
    var_normal = q.scale.pow(2)
    beta_sqr = p.rate.pow(2)
    c = p.concentration
    t1 = 0.5 * (beta_sqr * var_normal * 2 * math.pi).log() - c - lgamma(c)
    t2 = 0.5 * (c.pow(2) + c) / beta_sqr - q.loc * c / p.rate + 0.5 * q.loc.pow(2)
    return t1 + (c - 1) * digamma(c) + t2 / var_normal


# p's support reaches where q has no density: infinite throughout (torch's, p's shape)
@register_kl(Normal, Uniform)
@register_kl(Normal, Exponential)
@register_kl(Normal, Gamma)
@register_kl(Normal, Beta)
@register_kl(Normal, ContinuousBernoulli)
@register_kl(Normal, Pareto)
@register_kl(Laplace, Uniform)
@register_kl(Laplace, Exponential)
@register_kl(Laplace, Gamma)
@register_kl(Laplace, Beta)
@register_kl(Laplace, ContinuousBernoulli)
@register_kl(Laplace, Pareto)
@register_kl(Gumbel, Uniform)
@register_kl(Gumbel, Exponential)
@register_kl(Gumbel, Gamma)
@register_kl(Gumbel, Beta)
@register_kl(Gumbel, ContinuousBernoulli)
@register_kl(Gumbel, Pareto)
def _kl_real_line_infinity(p: Any, q: Any) -> Any:
    return _infinite_like(p.loc)


@register_kl(Exponential, Uniform)
@register_kl(Exponential, Beta)
@register_kl(Exponential, ContinuousBernoulli)
@register_kl(Exponential, Pareto)
def _kl_exponential_infinity(p: Exponential, q: Any) -> Any:
    return _infinite_like(p.rate)


@register_kl(Gamma, Uniform)
@register_kl(Gamma, Beta)
@register_kl(Gamma, ContinuousBernoulli)
@register_kl(Gamma, Pareto)
def _kl_gamma_infinity(p: Gamma, q: Any) -> Any:
    return _infinite_like(p.concentration)


@register_kl(Beta, Pareto)
def _kl_beta_infinity(p: Beta, q: Pareto) -> Any:
    return _infinite_like(p.concentration1)


@register_kl(ContinuousBernoulli, Pareto)
def _kl_continuous_bernoulli_infinity(p: ContinuousBernoulli, q: Pareto) -> Any:
    return _infinite_like(p.probs)


@register_kl(Pareto, Uniform)
@register_kl(Pareto, Beta)
@register_kl(Pareto, ContinuousBernoulli)
def _kl_pareto_infinity(p: Pareto, q: Any) -> Any:
    return _infinite_like(p.scale)


@register_kl(Poisson, Bernoulli)
@register_kl(Poisson, Binomial)
def _kl_poisson_infinity(p: Poisson, q: Any) -> Any:
    return _infinite_like(p.rate)


def _beta_mean(p: Beta) -> Any:
    return p.concentration1 / (p.concentration1 + p.concentration0)


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p: Bernoulli, q: Poisson) -> Any:
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


@register_kl(Beta, ContinuousBernoulli)
@register_kl(Uniform, ContinuousBernoulli)
def _kl_to_continuous_bernoulli(p: Any, q: ContinuousBernoulli) -> Any:
    result = -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()
    if isinstance(p, Uniform):
        # torch's test: infinite where p's interval reaches either end of [0, 1]
        outside = (p.high >= q.support.upper_bound) | (p.low <= q.support.lower_bound)
        return _infinite_where(outside, result)
    return result


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p: Beta, q: Exponential) -> Any:
    return -p.entropy() - q.rate.log() + q.rate * _beta_mean(p)


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p: Beta, q: Gamma) -> Any:
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    total = p.concentration1 + p.concentration0
    t3 = (q.concentration - 1) * (digamma(p.concentration1) - digamma(total))
    return -p.entropy() + t2 - t3 + q.rate * _beta_mean(p)


@register_kl(Beta, Normal)
def _kl_beta_normal(p: Beta, q: Normal) -> Any:
    mean = _beta_mean(p)
    var_normal = q.scale.pow(2)
    t2 = 0.5 * (var_normal * 2 * math.pi).log()
    t3 = (mean * (1 - mean) / (p.concentration1 + p.concentration0 + 1) + mean.pow(2)) * 0.5
    return -p.entropy() + t2 + (t3 - q.loc * mean + q.loc.pow(2) * 0.5) / var_normal


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p: Beta, q: Uniform) -> Any:
    result = -p.entropy() + (q.high - q.low).log()
    outside = (q.low > p.support.lower_bound) | (q.high < p.support.upper_bound)
    return _infinite_where(outside, result)


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p: ContinuousBernoulli, q: Exponential) -> Any:
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p: ContinuousBernoulli, q: Normal) -> Any:
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).pow(2)) + q.scale.log()
    t3 = (p.variance + p.mean.pow(2) - 2.0 * q.loc * p.mean) / (2.0 * q.scale.pow(2))
    return -p.entropy() + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p: ContinuousBernoulli, q: Uniform) -> Any:
    result = -p.entropy() + (q.high - q.low).log()
    # torch's test, kept as torch writes it: infinite where q starts at or above 0 or ends
    # at or below 1
    outside = (q.low >= p.support.lower_bound) | (q.high <= p.support.upper_bound)
    return _infinite_where(outside, result)


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p: Exponential, q: Gumbel) -> Any:
    scale_rate_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = scale_rate_prod.log() - 1
    t2 = loc_scale_ratio.exp() * scale_rate_prod / (scale_rate_prod + 1)
    return t1 - loc_scale_ratio + t2 + scale_rate_prod.reciprocal()


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p: Gamma, q: Gumbel) -> Any:
    c = p.concentration
    beta_scale_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = (c - 1) * digamma(c) - lgamma(c) - c
    t2 = beta_scale_prod.log() + c / beta_scale_prod
    t3 = loc_scale_ratio.exp() * (1 + beta_scale_prod.reciprocal()).pow(-c) - loc_scale_ratio
    return t1 + t2 + t3


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p: Gumbel, q: Normal) -> Any:
    param_ratio = p.scale / q.scale
    t1 = (param_ratio / math.sqrt(2 * math.pi)).log()
    t2 = (math.pi * param_ratio * 0.5).pow(2) / 3
    t3 = ((p.loc + p.scale * EULER_GAMMA - q.loc) / q.scale).pow(2) * 0.5
    return -t1 + t2 + t3 - (EULER_GAMMA + 1)


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p: Normal, q: Gumbel) -> Any:
    mean_scale_ratio = p.loc / q.scale
    var_scale_sqr_ratio = (p.scale / q.scale).pow(2)
    loc_scale_ratio = q.loc / q.scale
    t1 = var_scale_sqr_ratio.log() * 0.5
    t2 = mean_scale_ratio - loc_scale_ratio
    t3 = (-mean_scale_ratio + 0.5 * var_scale_sqr_ratio + loc_scale_ratio).exp()
    return -t1 + t2 + t3 - (0.5 * (1 + math.log(2 * math.pi)))


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p: Pareto, q: Exponential) -> Any:
    scale_rate_prod = p.scale * q.rate
    t1 = (p.alpha / scale_rate_prod).log()
    t3 = p.alpha * scale_rate_prod / (p.alpha - 1)
    return _infinite_where(p.alpha <= 1, t1 - p.alpha.reciprocal() + t3 - 1)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p: Pareto, q: Gamma) -> Any:
    common_term = p.scale.log() + p.alpha.reciprocal()
    t1 = p.alpha.log() - common_term
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * common_term
    t4 = q.rate * p.alpha * p.scale / (p.alpha - 1)
    return _infinite_where(p.alpha <= 1, t1 + t2 + t3 + t4 - 1)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p: Pareto, q: Normal) -> Any:
    var_normal = 2 * q.scale.pow(2)
    common_term = p.scale / (p.alpha - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    t3 = p.alpha * common_term.pow(2) / (p.alpha - 2)
    t4 = (p.alpha * common_term - q.loc).pow(2)
    result = t1 - p.alpha.reciprocal() + (t3 + t4) / var_normal - 1
    return _infinite_where(p.alpha <= 2, result)


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p: Uniform, q: Beta) -> Any:
    width = p.high - p.low
    t2 = (q.concentration1 - 1) * (p.high.xlogy(p.high) - p.low.xlogy(p.low) - width) / width
    high_rest, low_rest = 1 - p.high, 1 - p.low
    t3 = (
        (q.concentration0 - 1)
        * (high_rest.xlogy(high_rest) - low_rest.xlogy(low_rest) + width)
        / width
    )
    t4 = (
        lgamma(q.concentration1)
        + lgamma(q.concentration0)
        - lgamma(q.concentration1 + q.concentration0)
    )
    result = t3 + t4 - width.log() - t2
    outside = (p.high > q.support.upper_bound) | (p.low < q.support.lower_bound)
    return _infinite_where(outside, result)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p: Uniform, q: Exponential) -> Any:
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return _infinite_where(p.low < q.support.lower_bound, result)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p: Uniform, q: Gamma) -> Any:
    width = p.high - p.low
    t2 = lgamma(q.concentration) - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * (p.high.xlogy(p.high) - p.low.xlogy(p.low) - width) / width
    result = -width.log() + t2 + t3 + q.rate * (p.high + p.low) / 2
    return _infinite_where(p.low < q.support.lower_bound, result)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p: Uniform, q: Gumbel) -> Any:
    common_term = q.scale / (p.high - p.low)
    high_loc_diff = (p.high - q.loc) / q.scale
    low_loc_diff = (p.low - q.loc) / q.scale
    t1 = common_term.log() + 0.5 * (high_loc_diff + low_loc_diff)
    return t1 - common_term * ((-high_loc_diff).exp() - (-low_loc_diff).exp())


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p: Uniform, q: Pareto) -> Any:
    width = p.high - p.low
    t1 = (q.alpha * q.scale.pow(q.alpha) * width).log()
    t2 = (p.high.xlogy(p.high) - p.low.xlogy(p.low) - width) / width
    return _infinite_where(p.low < q.support.lower_bound, t2 * (q.alpha + 1) - t1)


def _infinite_like(t: Any) -> Any:
    return t.detach().new_full(tuple(t.shape), math.inf)


@register_kl(Poisson, Poisson)
def _kl_poisson_poisson(p: Poisson, q: Poisson) -> Any:
    return p.rate * (p.rate.log() - q.rate.log()) - (p.rate - q.rate)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p: Geometric, q: Geometric) -> Any:
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits


@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p: Binomial, q: Binomial) -> Any:
    if bool((p.total_count < q.total_count).any().item()):
        raise NotImplementedError(
            "kl_divergence: Binomial with p.total_count < q.total_count is not implemented"
        )
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p() - (-q.probs).log1p())
    return _infinite_where(p.total_count > q.total_count, kl)


@register_kl(MultivariateNormal, MultivariateNormal)
def _kl_mvn_mvn(p: MultivariateNormal, q: MultivariateNormal) -> Any:
    import numpy as np

    if p.event_shape != q.event_shape:
        raise InvalidArgumentError(
            "kl_divergence: two MultivariateNormals of different event shapes "
            f"{p.event_shape} and {q.event_shape}"
        )
    p_tril, q_tril = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    half_term1 = q_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) - p_tril.diagonal(
        dim1=-2, dim2=-1
    ).log().sum(-1)
    n = p.event_shape[0]
    batch = tuple(np.broadcast_shapes(tuple(q_tril.shape[:-2]), tuple(p_tril.shape[:-2])))
    solved = solve_lower(q_tril.expand(batch + (n, n)), p_tril.expand(batch + (n, n)))
    term2 = solved.pow(2).sum((-2, -1))
    term3 = _batch_mahalanobis(q_tril, q.loc - p.loc)
    return half_term1 + 0.5 * (term2 + term3 - n)


@register_kl(Independent, Independent)
def _kl_independent_independent(p: Independent, q: Independent) -> Any:
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError(
            "kl_divergence: Independent distributions of different reinterpreted_batch_ndims"
        )
    inner = kl_divergence(p.base_dist, q.base_dist)
    return sum_rightmost(inner, p.reinterpreted_batch_ndims)


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p: TransformedDistribution, q: TransformedDistribution) -> Any:
    if p.transforms != q.transforms or p.event_shape != q.event_shape:
        raise NotImplementedError(
            "kl_divergence: TransformedDistributions with different transforms or event shapes"
        )
    inner = kl_divergence(p.base_dist, q.base_dist)
    return sum_rightmost(inner, len(p.event_shape) - len(p.base_dist.event_shape))


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(
    p: ContinuousBernoulli, q: ContinuousBernoulli
) -> Any:
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + (-p.probs).log1p()
    t3 = -q._cont_bern_log_norm() - (-q.probs).log1p()
    return t1 + t2 + t3


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p: ExponentialFamily, q: ExponentialFamily) -> Any:
    """The Bregman divergence of the log normalizer, for two members of one family."""
    if type(p) is not type(q):
        raise NotImplementedError(
            "kl_divergence: the KL divergence between different exponential families "
            f"({type(p).__name__}, {type(q).__name__}) has no Bregman form"
        )
    p_params, log_normalizer, gradients = log_normalizer_gradients(p)
    q_params = q._natural_params
    result = q._log_normalizer(*q_params) - log_normalizer
    batch = len(result.shape)
    for p_param, q_param, gradient in zip(p_params, q_params, gradients, strict=True):
        # each parameter's own event dimensions: torch sums ``len(q.event_shape)`` rightmost
        # ones of every parameter, which for a batched Wishart's scalar ``df`` term sums over
        # the batch (the two agree without a batch)
        term = (q_param - p_param) * gradient
        result = result - sum_rightmost(term, len(term.shape) - batch)
    return result


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p: Pareto, q: Pareto) -> Any:
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * scale_ratio.log() - alpha_ratio.log() + alpha_ratio - 1
    return _infinite_where(p.scale < q.scale, result)


def _same_event_shape(p: Any, q: Any) -> None:
    if p.event_shape != q.event_shape:
        raise InvalidArgumentError(
            f"kl_divergence: {type(p).__name__} and {type(q).__name__} of different event "
            f"shapes {p.event_shape} and {q.event_shape}"
        )


def _broadcast_solve(lower: Any, rhs: Any) -> Any:
    """``solve_lower`` with the batch dimensions of ``lower`` and ``rhs`` broadcast."""
    import numpy as np

    batch = tuple(np.broadcast_shapes(tuple(lower.shape[:-2]), tuple(rhs.shape[:-2])))
    return solve_lower(
        lower.expand(batch + tuple(lower.shape[-2:])), rhs.expand(batch + tuple(rhs.shape[-2:]))
    )


def _woodbury_factor(q: LowRankMultivariateNormal) -> Any:
    """``A = C^-1 W.mT D^-1`` with ``inv(cov) = D^-1 - A.mT A``."""
    w, d = q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag
    return _broadcast_solve(q._capacitance_tril, w.transpose(-2, -1) / d.unsqueeze(-2))


def _lowrank_logdet_of(d: LowRankMultivariateNormal) -> Any:
    return _lowrank_logdet(
        d._unbroadcasted_cov_factor, d._unbroadcasted_cov_diag, d._capacitance_tril
    )


def _lowrank_mahalanobis_of(q: LowRankMultivariateNormal, diff: Any) -> Any:
    return _lowrank_mahalanobis(
        q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, diff, q._capacitance_tril
    )


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_lowrank(p: LowRankMultivariateNormal, q: LowRankMultivariateNormal) -> Any:
    _same_event_shape(p, q)
    term1 = _lowrank_logdet_of(q) - _lowrank_logdet_of(p)
    term3 = _lowrank_mahalanobis_of(q, q.loc - p.loc)
    a = _woodbury_factor(q)
    p_w, p_d = p._unbroadcasted_cov_factor, p._unbroadcasted_cov_diag
    q_d = q._unbroadcasted_cov_diag
    term21 = (p_d / q_d).sum(-1)
    term22 = _trace_xxt(p_w * q_d.rsqrt().unsqueeze(-1))
    term23 = _trace_xxt(a * p_d.sqrt().unsqueeze(-2))
    term24 = _trace_xxt(a @ p_w)
    term2 = term21 + term22 - term23 - term24
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_mvn_lowrank(p: MultivariateNormal, q: LowRankMultivariateNormal) -> Any:
    _same_event_shape(p, q)
    p_tril = p._unbroadcasted_scale_tril
    term1 = _lowrank_logdet_of(q) - 2 * p_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)
    term3 = _lowrank_mahalanobis_of(q, q.loc - p.loc)
    a = _woodbury_factor(q)
    term21 = _trace_xxt(p_tril * q._unbroadcasted_cov_diag.rsqrt().unsqueeze(-1))
    term22 = _trace_xxt(a @ p_tril)
    return 0.5 * (term1 + term21 - term22 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrank_mvn(p: LowRankMultivariateNormal, q: MultivariateNormal) -> Any:
    _same_event_shape(p, q)
    q_tril = q._unbroadcasted_scale_tril
    term1 = 2 * q_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) - _lowrank_logdet_of(p)
    term3 = _batch_mahalanobis(q_tril, q.loc - p.loc)
    p_d_sqrt = p._unbroadcasted_cov_diag.sqrt().diag_embed()
    term21 = _trace_xxt(_broadcast_solve(q_tril, p._unbroadcasted_cov_factor))
    term22 = _trace_xxt(_broadcast_solve(q_tril, p_d_sqrt))
    return 0.5 * (term1 + term21 + term22 + term3 - p.event_shape[0])
