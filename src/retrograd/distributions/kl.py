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
from .discrete import Binomial, Geometric, OneHotCategorical, Poisson
from .gamma import Beta, Dirichlet, Gamma
from .multivariate_normal import Independent, MultivariateNormal, _batch_mahalanobis, solve_lower
from .normal import Normal
from .special import digamma, lgamma
from .transformed import TransformedDistribution
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
    t1 = p.probs * (p.probs.log() - q.probs.log())
    t2 = (1 - p.probs) * ((1 - p.probs).log() - (1 - q.probs).log())
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
