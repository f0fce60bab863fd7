"""Families torch defines as a :class:`TransformedDistribution` of a simpler one, with its
bases and transforms: :class:`HalfCauchy` (``|Cauchy|``), :class:`Pareto` (``scale *
exp(Exponential)``), :class:`Weibull` (``scale * Exponential ** (1 / concentration)``),
:class:`Kumaraswamy` (a power of one minus a power of a uniform), :class:`InverseGamma`
(``1 / Gamma``) and :class:`LogisticNormal` (a normal vector stick-broken onto the
simplex). Their ``log_prob``, ``rsample``, ``cdf`` and ``icdf`` come through the transforms;
moments and entropies are torch's closed forms.

>>> import retrograd as rg
>>> d = Pareto(rg.tensor(1.0, dtype="float64"), rg.tensor(3.0, dtype="float64"))
>>> round(d.mean.item(), 6)
1.5
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..tensor import full, full_like
from ..tensor.functions import where
from . import constraints
from .continuous import EULER_GAMMA, Cauchy, Exponential, Uniform
from .distribution import Distribution
from .gamma import Gamma
from .normal import Normal
from .transformed import TransformedDistribution
from .transforms import (
    AbsTransform,
    AffineTransform,
    ExpTransform,
    PowerTransform,
    StickBreakingTransform,
)
from .utils import as_value, broadcast_all

__all__ = ["HalfCauchy", "InverseGamma", "Kumaraswamy", "LogisticNormal", "Pareto", "Weibull"]


class _ByParameters(TransformedDistribution):
    """``expand`` remakes the family from its broadcast parameters (its ``arg_constraints``),
    so the expanded distribution is of the same family, as torch's. The base is made without
    validation: the family validates its own parameters, so errors name it."""

    def _expand_args(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in type(self).arg_constraints}

    expand = Distribution.expand  # type: ignore[assignment]


class HalfCauchy(_ByParameters):
    """``|Cauchy(0, scale)|``."""

    arg_constraints: ClassVar[dict[str, Any]] = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale: Any, validate_args: Any = None) -> None:
        base = Cauchy(0, scale, validate_args=False)
        super().__init__(base, AbsTransform(), validate_args=validate_args)

    @property
    def scale(self) -> Any:
        return self.base_dist.scale

    @property
    def mean(self) -> Any:
        return full(self._extended_shape(), math.inf, dtype=self.scale.dtype,
                    device=self.scale.device)  # fmt: skip

    @property
    def mode(self) -> Any:
        return self.scale * 0

    @property
    def variance(self) -> Any:
        return self.base_dist.variance

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.scale)
        self._validate_sample(value)
        log_prob = self.base_dist.log_prob(value) + math.log(2)
        return where(value >= 0, log_prob, full_like(log_prob, -math.inf))

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self.scale)
        self._validate_sample(value)
        return 2 * self.base_dist.cdf(value) - 1

    def icdf(self, value: Any) -> Any:
        return self.base_dist.icdf((as_value(value, self.scale) + 1) / 2)

    def entropy(self) -> Any:
        return self.base_dist.entropy() - math.log(2)


class Pareto(_ByParameters):
    """Pareto type I with minimum ``scale`` and tail index ``alpha``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "alpha": constraints.positive,
        "scale": constraints.positive,
    }

    def __init__(self, scale: Any, alpha: Any, validate_args: Any = None) -> None:
        self.scale, self.alpha = broadcast_all(scale, alpha)
        base = Exponential(self.alpha, validate_args=False)
        transforms = [ExpTransform(), AffineTransform(loc=0, scale=self.scale)]
        super().__init__(base, transforms, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> Any:  # type: ignore[override]
        return constraints.greater_than_eq(self.scale)

    @property
    def mean(self) -> Any:
        a = self.alpha.clamp(min=1)
        return a * self.scale / (a - 1)

    @property
    def mode(self) -> Any:
        return self.scale

    @property
    def variance(self) -> Any:
        a = self.alpha.clamp(min=2)
        return self.scale.pow(2) * a / ((a - 1).pow(2) * (a - 2))

    def entropy(self) -> Any:
        return (self.scale / self.alpha).log() + (1 + self.alpha.reciprocal())


class Weibull(_ByParameters):
    """Weibull with ``scale`` and shape ``concentration``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "scale": constraints.positive,
        "concentration": constraints.positive,
    }
    support = constraints.positive

    def __init__(self, scale: Any, concentration: Any, validate_args: Any = None) -> None:
        self.scale, self.concentration = broadcast_all(scale, concentration)
        self.concentration_reciprocal = self.concentration.reciprocal()
        base = Exponential(self.scale * 0 + 1, validate_args=False)
        transforms = [
            PowerTransform(exponent=self.concentration_reciprocal),
            AffineTransform(loc=0, scale=self.scale),
        ]
        super().__init__(base, transforms, validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.scale * (1 + self.concentration_reciprocal).lgamma().exp()

    @property
    def mode(self) -> Any:
        c = self.concentration
        return self.scale * ((c - 1) / c).pow(c.reciprocal())

    @property
    def variance(self) -> Any:
        r = self.concentration_reciprocal
        return self.scale.pow(2) * ((1 + 2 * r).lgamma().exp() - (2 * (1 + r).lgamma()).exp())

    def entropy(self) -> Any:
        r = self.concentration_reciprocal
        return EULER_GAMMA * (1 - r) + (self.scale * r).log() + 1


def _kumaraswamy_moment(a: Any, b: Any, n: int) -> Any:
    arg1 = 1 + n / a
    log_value = arg1.lgamma() + b.lgamma() - (arg1 + b).lgamma()
    return b * log_value.exp()


class Kumaraswamy(_ByParameters):
    """Kumaraswamy on ``[0, 1]`` with ``concentration1`` (a) and ``concentration0`` (b):
    density ``a b x^(a-1) (1 - x^a)^(b-1)``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "concentration1": constraints.positive,
        "concentration0": constraints.positive,
    }
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1: Any, concentration0: Any, validate_args: Any = None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        zeros = self.concentration0 * 0
        base = Uniform(zeros, zeros + 1, validate_args=False)
        transforms = [
            PowerTransform(exponent=self.concentration0.reciprocal()),
            AffineTransform(loc=1.0, scale=-1.0),
            PowerTransform(exponent=self.concentration1.reciprocal()),
        ]
        super().__init__(base, transforms, validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return _kumaraswamy_moment(self.concentration1, self.concentration0, 1)

    @property
    def mode(self) -> Any:
        """``((a - 1) / (a b - 1)) ** (1 / a)``, NaN where ``a < 1`` or ``b < 1`` (torch
        2.13's formula takes ``log1p(-b)``, NaN for every ``b > 1``, so this one is the
        closed form itself)."""
        a, b = self.concentration1, self.concentration0
        undefined = (b < 1) | (a < 1)
        safe_a = where(undefined, a * 0 + 2, a)
        safe_b = where(undefined, b * 0 + 2, b)
        log_mode = ((safe_a - 1).log() - (safe_a * safe_b - 1).log()) / safe_a
        return where(undefined, full_like(log_mode, math.nan), log_mode.exp())

    @property
    def variance(self) -> Any:
        a, b = self.concentration1, self.concentration0
        return _kumaraswamy_moment(a, b, 2) - self.mean.pow(2)

    def entropy(self) -> Any:
        a, b = self.concentration1, self.concentration0
        t1 = 1 - a.reciprocal()
        t0 = 1 - b.reciprocal()
        h0 = (b + 1).digamma() + EULER_GAMMA
        return t0 + t1 * h0 - a.log() - b.log()


class InverseGamma(_ByParameters):
    """``1 / Gamma(concentration, rate)``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "concentration": constraints.positive,
        "rate": constraints.positive,
    }
    support = constraints.positive
    has_rsample = True

    def __init__(self, concentration: Any, rate: Any, validate_args: Any = None) -> None:
        base = Gamma(concentration, rate, validate_args=False)
        neg_one = full((), -1.0, dtype=base.rate.dtype, device=base.rate.device)
        super().__init__(base, PowerTransform(neg_one), validate_args=validate_args)

    @property
    def concentration(self) -> Any:
        return self.base_dist.concentration

    @property
    def rate(self) -> Any:
        return self.base_dist.rate

    @property
    def mean(self) -> Any:
        c = self.concentration
        return where(c > 1, self.rate / (c - 1), full_like(c, math.inf))

    @property
    def mode(self) -> Any:
        return self.rate / (self.concentration + 1)

    @property
    def variance(self) -> Any:
        c = self.concentration
        result = self.rate.square() / ((c - 1).square() * (c - 2))
        return where(c > 2, result, full_like(c, math.inf))

    def entropy(self) -> Any:
        c = self.concentration
        return c + self.rate.log() + c.lgamma() - (1 + c) * c.digamma()


class LogisticNormal(_ByParameters):
    """``StickBreakingTransform`` of ``Normal(loc, scale)`` vectors: a distribution over the
    simplex with one more entry than ``loc``'s last dimension."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        base: Distribution = Normal(loc, scale, validate_args=False)
        if not base.batch_shape:
            base = base.expand((1,))
        super().__init__(base, StickBreakingTransform(), validate_args=validate_args)

    @property
    def loc(self) -> Any:
        return self.base_dist.base_dist.loc

    @property
    def scale(self) -> Any:
        return self.base_dist.base_dist.scale
