"""Continuous families of one real parameter pair: :class:`Uniform`, :class:`Laplace`,
:class:`Exponential`, :class:`Cauchy`, :class:`HalfNormal`, :class:`Gumbel`,
:class:`LogNormal`, and :class:`GeneralizedPareto`, with torch's formulas (log_prob,
entropy, moments, cdf/icdf) and
reparameterized samples (``rsample``) drawn from the stream ``rg.seed`` seeds."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..tensor import full_like, ones_like, rand, randn
from ..tensor.functions import where
from . import constraints
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .normal import Normal
from .transformed import TransformedDistribution
from .transforms import AbsTransform, AffineTransform, ExpTransform
from .utils import as_value, broadcast_all, eps, tiny

__all__ = [
    "Cauchy",
    "Exponential",
    "GeneralizedPareto",
    "Gumbel",
    "HalfNormal",
    "Laplace",
    "LogNormal",
    "Uniform",
]

EULER_GAMMA = 0.57721566490153286061


def _uniform(d: Distribution, like: Any, sample_shape: Any) -> Any:
    return rand(d._extended_shape(sample_shape), dtype=like.dtype, device=like.device)


def _normal(d: Distribution, like: Any, sample_shape: Any) -> Any:
    return randn(d._extended_shape(sample_shape), dtype=like.dtype, device=like.device)


class _LocScale(Distribution):
    """A location-scale family: ``loc`` real, ``scale`` positive, broadcast together."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.real
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    @property
    def mode(self) -> Any:
        return self.loc

    def _value(self, value: Any) -> Any:
        value = as_value(value, self.loc)
        self._validate_sample(value)
        return value


class Uniform(Distribution):
    """Uniform on ``[low, high)``."""

    arg_constraints: ClassVar[dict[str, Any]] = {"low": constraints.real, "high": constraints.real}
    has_rsample = True

    def __init__(self, low: Any, high: Any, validate_args: Any = None) -> None:
        self.low, self.high = broadcast_all(low, high)
        super().__init__(tuple(self.low.shape), validate_args=validate_args)
        if self._validate_args and not bool((self.low < self.high).all().item()):
            from ..errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"Uniform: expected parameter low to be less than high, got low={self.low}, "
                f"high={self.high}"
            )

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> Any:
        return constraints.half_open_interval(self.low, self.high)

    @property
    def mean(self) -> Any:
        return (self.high + self.low) / 2

    @property
    def mode(self) -> Any:
        return self.high * math.nan

    @property
    def stddev(self) -> Any:
        return (self.high - self.low) / 12**0.5

    @property
    def variance(self) -> Any:
        return (self.high - self.low).pow(2) / 12

    def rsample(self, sample_shape: Any = ()) -> Any:
        u = _uniform(self, self.low, sample_shape)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.low)
        self._validate_sample(value)
        inside = (self.low <= value) & (self.high > value)
        return inside.cast(self.low.dtype).log() - (self.high - self.low).log()

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self.low)
        self._validate_sample(value)
        return ((value - self.low) / (self.high - self.low)).clamp(0, 1)

    def icdf(self, value: Any) -> Any:
        return as_value(value, self.low) * (self.high - self.low) + self.low

    def entropy(self) -> Any:
        return (self.high - self.low).log()


class Laplace(_LocScale):
    """Laplace (double exponential) with location ``loc`` and scale ``scale``."""

    @property
    def mean(self) -> Any:
        return self.loc

    @property
    def variance(self) -> Any:
        return 2 * self.scale.pow(2)

    @property
    def stddev(self) -> Any:
        return 2**0.5 * self.scale

    def rsample(self, sample_shape: Any = ()) -> Any:
        e = eps(self.loc)
        u = _uniform(self, self.loc, sample_shape) * (2 - e) + (e - 1)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value: Any) -> Any:
        value = self._value(value)
        return -(2 * self.scale).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value: Any) -> Any:
        z = self._value(value) - self.loc
        return 0.5 - 0.5 * z.sign() * (-z.abs() / self.scale).expm1()

    def icdf(self, value: Any) -> Any:
        term = as_value(value, self.loc) - 0.5
        return self.loc - self.scale * term.sign() * (-2 * term.abs()).log1p()

    def entropy(self) -> Any:
        return 1 + (2 * self.scale).log()


class Cauchy(_LocScale):
    """Cauchy (Lorentz) with median ``loc`` and half width ``scale``: no mean or variance."""

    @property
    def mean(self) -> Any:
        return full_like(self.loc, math.nan)

    @property
    def variance(self) -> Any:
        return full_like(self.loc, math.inf)

    def rsample(self, sample_shape: Any = ()) -> Any:
        u = _uniform(self, self.loc, sample_shape)
        return self.loc + (math.pi * (u - 0.5)).tan() * self.scale

    def log_prob(self, value: Any) -> Any:
        z = (self._value(value) - self.loc) / self.scale
        return -math.log(math.pi) - self.scale.log() - z.pow(2).log1p()

    def cdf(self, value: Any) -> Any:
        return ((self._value(value) - self.loc) / self.scale).atan() / math.pi + 0.5

    def icdf(self, value: Any) -> Any:
        return (math.pi * (as_value(value, self.loc) - 0.5)).tan() * self.scale + self.loc

    def entropy(self) -> Any:
        return math.log(4 * math.pi) + self.scale.log()


class _AsTransformed:
    """What a family torch writes as a :class:`TransformedDistribution` keeps of its own
    here: its formulas (``log_prob``, ``rsample``, ``entropy``, ``cdf``...), sampling, expand
    and repr, in place of the base distribution pushed through the transforms (the values
    it gave before it was one); ``base_dist`` and ``transforms`` are torch's."""

    sample = Distribution.sample
    expand = Distribution.expand
    __repr__ = Distribution.__repr__


class Gumbel(_AsTransformed, _LocScale, TransformedDistribution):
    """Gumbel (type-I extreme value) with location ``loc`` and scale ``scale``: torch's
    transformed ``Uniform(tiny, 1 - eps)`` (``-log``, negated, ``-log``, then scaled by
    ``-scale`` and moved by ``loc``)."""

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        base = Uniform(
            full_like(self.loc, tiny(self.loc)),
            full_like(self.loc, 1 - eps(self.loc)),
            validate_args=validate_args,
        )
        transforms = [
            ExpTransform().inv,
            AffineTransform(loc=0, scale=-ones_like(self.scale)),
            ExpTransform().inv,
            AffineTransform(loc=self.loc, scale=-self.scale),
        ]
        TransformedDistribution.__init__(self, base, transforms, validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.loc + self.scale * EULER_GAMMA

    @property
    def stddev(self) -> Any:
        return (math.pi / math.sqrt(6)) * self.scale

    @property
    def variance(self) -> Any:
        return self.stddev.pow(2)

    def rsample(self, sample_shape: Any = ()) -> Any:
        u = _uniform(self, self.loc, sample_shape).clamp(tiny(self.loc), 1 - eps(self.loc))
        return self.loc - self.scale * (-u.log()).log()

    def log_prob(self, value: Any) -> Any:
        y = (self.loc - self._value(value)) / self.scale
        return (y - y.exp()) - self.scale.log()

    def cdf(self, value: Any) -> Any:
        return (-(-(self._value(value) - self.loc) / self.scale).exp()).exp()

    def icdf(self, value: Any) -> Any:
        return self.loc - self.scale * (-as_value(value, self.loc).log()).log()

    def entropy(self) -> Any:
        return self.scale.log() + (1 + EULER_GAMMA)


class LogNormal(_AsTransformed, _LocScale, TransformedDistribution):
    """``exp`` of ``Normal(loc, scale)`` (torch's transformed ``Normal``)."""

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        base = Normal(self.loc, self.scale, validate_args=validate_args)
        TransformedDistribution.__init__(self, base, ExpTransform(), validate_args=validate_args)

    support = constraints.positive

    @property
    def mean(self) -> Any:
        return (self.loc + self.scale.pow(2) / 2).exp()

    @property
    def mode(self) -> Any:
        return (self.loc - self.scale.pow(2)).exp()

    @property
    def variance(self) -> Any:
        s2 = self.scale.pow(2)
        return s2.expm1() * (2 * self.loc + s2).exp()

    def rsample(self, sample_shape: Any = ()) -> Any:
        return (self.loc + _normal(self, self.loc, sample_shape) * self.scale).exp()

    def log_prob(self, value: Any) -> Any:
        log_value = self._value(value).log()
        z = (log_value - self.loc) / self.scale
        return -z.pow(2) / 2 - self.scale.log() - 0.5 * math.log(2 * math.pi) - log_value

    def cdf(self, value: Any) -> Any:
        z = (self._value(value).log() - self.loc) / (self.scale * math.sqrt(2))
        return 0.5 * (1 + z.erf())

    def icdf(self, value: Any) -> Any:
        z = (2 * as_value(value, self.loc) - 1).erfinv() * math.sqrt(2)
        return (self.loc + self.scale * z).exp()

    def entropy(self) -> Any:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log() + self.loc


class Exponential(ExponentialFamily):
    """Exponential with rate ``rate`` (mean ``1 / rate``)."""

    arg_constraints: ClassVar[dict[str, Any]] = {"rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (-self.rate,)

    def _log_normalizer(self, x: Any) -> Any:
        return -(-x).log()

    def __init__(self, rate: Any, validate_args: Any = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.rate.reciprocal()

    @property
    def mode(self) -> Any:
        return self.rate * 0

    @property
    def stddev(self) -> Any:
        return self.rate.reciprocal()

    @property
    def variance(self) -> Any:
        return self.rate.pow(-2)

    def rsample(self, sample_shape: Any = ()) -> Any:
        u = _uniform(self, self.rate, sample_shape)
        return -(-u).log1p() / self.rate

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.rate)
        self._validate_sample(value)
        return self.rate.log() - self.rate * value

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self.rate)
        self._validate_sample(value)
        return 1 - (-self.rate * value).exp()

    def icdf(self, value: Any) -> Any:
        return -(-as_value(value, self.rate)).log1p() / self.rate

    def entropy(self) -> Any:
        return 1.0 - self.rate.log()


class HalfNormal(_AsTransformed, TransformedDistribution):
    """``|Normal(0, scale)|`` (torch's transformed ``Normal``)."""

    arg_constraints: ClassVar[dict[str, Any]] = {"scale": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True

    def __init__(self, scale: Any, validate_args: Any = None) -> None:
        (self.scale,) = broadcast_all(scale)
        base = Normal(0, self.scale, validate_args=False)
        TransformedDistribution.__init__(self, base, AbsTransform(), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.scale * math.sqrt(2 / math.pi)

    @property
    def mode(self) -> Any:
        return self.scale * 0

    @property
    def variance(self) -> Any:
        return self.scale.pow(2) * (1 - 2 / math.pi)

    def rsample(self, sample_shape: Any = ()) -> Any:
        return (_normal(self, self.scale, sample_shape) * self.scale).abs()

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.scale)
        self._validate_sample(value)
        z = value / self.scale
        log_prob = -z.pow(2) / 2 - self.scale.log() + 0.5 * math.log(2 / math.pi)
        return where(value >= 0, log_prob, full_like(log_prob, -math.inf))

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self.scale)
        self._validate_sample(value)
        return (value / (self.scale * math.sqrt(2))).erf()

    def icdf(self, value: Any) -> Any:
        return self.scale * as_value(value, self.scale).erfinv() * math.sqrt(2)

    def entropy(self) -> Any:
        return 0.5 * math.log(math.pi / 2) + self.scale.log() + 0.5


class GeneralizedPareto(Distribution):
    """The generalized Pareto distribution of peaks over a threshold: location ``loc``,
    ``scale`` and shape ``concentration`` (``xi``; exponential at 0, bounded above for
    ``xi < 0``)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real,
        "scale": constraints.positive,
        "concentration": constraints.real,
    }
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, concentration: Any, validate_args: Any = None):
        self.loc, self.scale, self.concentration = broadcast_all(loc, scale, concentration)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    def _zero_and_safe(self) -> tuple[Any, Any]:
        """Where ``concentration`` is 0 (torch's ``isclose``), and the concentration with those
        entries replaced by 1 so the ``xi != 0`` branch stays finite."""
        c = self.concentration
        eq_zero = c.isclose(c * 0)
        return eq_zero, where(eq_zero, c * 0 + 1, c)

    def rsample(self, sample_shape: Any = ()) -> Any:
        return self.icdf(_uniform(self, self.loc, sample_shape))

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.loc)
        self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, safe = self._zero_and_safe()
        y = 1 / safe + 1
        nonzero = where(y.eq(0), y, y * (safe * z).log1p())
        return -self.scale.log() - where(eq_zero, z, nonzero)

    def log_survival_function(self, value: Any) -> Any:
        value = as_value(value, self.loc)
        self._validate_sample(value)
        z = (value - self.loc) / self.scale
        eq_zero, safe = self._zero_and_safe()
        return where(eq_zero, -z, -(safe * z).log1p() / safe)

    def log_cdf(self, value: Any) -> Any:
        return (-self.log_survival_function(value).exp()).log1p()

    def cdf(self, value: Any) -> Any:
        return self.log_cdf(value).exp()

    def icdf(self, value: Any) -> Any:
        eq_zero, safe = self._zero_and_safe()
        log_u = (-as_value(value, self.loc)).log1p()
        nonzero = self.loc + self.scale / safe * (-safe * log_u).expm1()
        return where(eq_zero, self.loc - self.scale * log_u, nonzero)

    @property
    def mean(self) -> Any:
        c = self.concentration
        valid = c < 1
        safe = where(valid, c, c * 0 + 0.5)
        return where(valid, self.loc + self.scale / (1 - safe), full_like(c, math.nan))

    @property
    def variance(self) -> Any:
        c = self.concentration
        valid = c < 0.5
        safe = where(valid, c, c * 0 + 0.25)
        result = self.scale.pow(2) / ((1 - safe).pow(2) * (1 - 2 * safe))
        return where(valid, result, full_like(c, math.nan))

    @property
    def mode(self) -> Any:
        return self.loc

    def entropy(self) -> Any:
        return self.scale.log() + self.concentration + 1

    @constraints.dependent_property(is_discrete=False, event_dim=0)
    def support(self) -> Any:
        c = self.concentration
        safe = where(c < 0, c, c * 0 - 1)
        upper = where(c < 0, self.loc - self.scale / safe, full_like(c, math.inf))
        return constraints.interval(self.loc, upper)
