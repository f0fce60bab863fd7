"""The gamma family: :class:`Gamma`, :class:`Beta`, :class:`Dirichlet`, :class:`StudentT`,
:class:`FisherSnedecor`.

Log densities and entropies are torch's formulas over the differentiable ``lgamma`` /
``digamma`` of :mod:`.special`. ``rsample`` draws standard gamma variates by inverse CDF from
the stream ``rg.seed`` seeds and differentiates them by implicit reparameterization
(:func:`.special.standard_gamma`); ``Beta`` and ``Dirichlet`` normalize such draws (torch's
Dirichlet backward uses another, equally unbiased, implicit gradient, so single-sample
gradients differ from torch's while their expectations agree).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..tensor import cat, full_like, randn, stack
from ..tensor.functions import where
from ..tensor.special import xlogy
from . import constraints
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .special import digamma, gammainc, lgamma, log_beta, standard_gamma
from .utils import as_value, broadcast_all, tiny

__all__ = ["Beta", "Chi2", "Dirichlet", "FisherSnedecor", "Gamma", "StudentT"]


class Gamma(ExponentialFamily):
    """Gamma with shape ``concentration`` and inverse scale ``rate``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "concentration": constraints.positive,
        "rate": constraints.positive,
    }
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.concentration - 1, -self.rate)

    def _log_normalizer(self, x: Any, y: Any) -> Any:
        return lgamma(x + 1) + (x + 1) * (-y.reciprocal()).log()

    def __init__(self, concentration: Any, rate: Any, validate_args: Any = None) -> None:
        self.concentration, self.rate = broadcast_all(concentration, rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.concentration / self.rate

    @property
    def mode(self) -> Any:
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self) -> Any:
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        value = standard_gamma(self.concentration, shape) / self.rate.expand(shape)
        return value.clamp(min=tiny(value))

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.rate)
        self._validate_sample(value)
        return (
            xlogy(self.concentration, self.rate)
            + xlogy(self.concentration - 1, value)
            - self.rate * value
            - lgamma(self.concentration)
        )

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self.rate)
        self._validate_sample(value)
        return gammainc(self.concentration, self.rate * value)

    def entropy(self) -> Any:
        c = self.concentration
        return c - self.rate.log() + lgamma(c) + (1.0 - c) * digamma(c)


class Chi2(Gamma):
    """``Gamma(df / 2, 1 / 2)``."""

    arg_constraints: ClassVar[dict[str, Any]] = {"df": constraints.positive}

    def __init__(self, df: Any, validate_args: Any = None) -> None:
        (self.df,) = broadcast_all(df)
        super().__init__(0.5 * self.df, self.df * 0 + 0.5, validate_args=validate_args)

    def _expand_args(self) -> dict[str, Any]:
        return {"df": self.df}


class Beta(ExponentialFamily):
    """Beta on ``[0, 1]`` with ``concentration1`` (alpha) and ``concentration0`` (beta)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "concentration1": constraints.positive,
        "concentration0": constraints.positive,
    }
    support = constraints.unit_interval
    has_rsample = True

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.concentration1, self.concentration0)

    def _log_normalizer(self, x: Any, y: Any) -> Any:
        return lgamma(x) + lgamma(y) - lgamma(x + y)

    def __init__(self, concentration1: Any, concentration0: Any, validate_args: Any = None):
        self.concentration1, self.concentration0 = broadcast_all(concentration1, concentration0)
        super().__init__(tuple(self.concentration1.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self) -> Any:
        a, b = self.concentration1, self.concentration0
        return _dirichlet_mode(stack([a, b], -1)).select(-1, 0)

    @property
    def variance(self) -> Any:
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        x = standard_gamma(self.concentration1, shape)
        y = standard_gamma(self.concentration0, shape)
        return (x / (x + y)).clamp(tiny(x), 1 - 1e-16 if x.dtype == "float64" else 1 - 6e-8)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.concentration1)
        self._validate_sample(value)
        a, b = self.concentration1, self.concentration0
        return xlogy(a - 1, value) + xlogy(b - 1, 1 - value) - log_beta(a, b)

    def entropy(self) -> Any:
        a, b = self.concentration1, self.concentration0
        return (
            log_beta(a, b)
            - (a - 1) * digamma(a)
            - (b - 1) * digamma(b)
            + (a + b - 2) * digamma(a + b)
        )


def _dirichlet_mode(concentration: Any) -> Any:
    """torch's: ``(c - 1)^+`` normalized; where every ``c < 1`` (the density is unbounded at
    the corners) the first corner, which is what torch's argmax of that 0/0 row gives."""
    excess = (concentration - 1).clamp(min=0)
    mode = excess / excess.sum(-1, keepdim=True)
    corner = (concentration * 0).narrow(-1, 0, 1) + 1
    corner = cat([corner, (concentration * 0).narrow(-1, 1, concentration.shape[-1] - 1)], -1)
    below_one = (concentration < 1).all(-1, keepdim=True).expand(mode.shape)
    return where(below_one, corner, mode)


class Dirichlet(ExponentialFamily):
    """Dirichlet over the simplex of the last dimension of ``concentration``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "concentration": constraints.independent(constraints.positive, 1)
    }
    support = constraints.simplex
    has_rsample = True

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.concentration,)

    def _log_normalizer(self, x: Any) -> Any:
        return lgamma(x).sum(-1) - lgamma(x.sum(-1))

    def __init__(self, concentration: Any, validate_args: Any = None) -> None:
        if concentration.ndim < 1:
            raise constraints_error("Dirichlet", concentration)
        self.concentration = concentration
        shape = tuple(concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self) -> Any:
        return _dirichlet_mode(self.concentration)

    @property
    def variance(self) -> Any:
        total = self.concentration.sum(-1, keepdim=True)
        c = self.concentration
        return c * (total - c) / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        draws = standard_gamma(self.concentration, shape)
        return (draws / draws.sum(-1, keepdim=True)).clamp(min=tiny(draws))

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.concentration)
        self._validate_sample(value)
        c = self.concentration
        return xlogy(c - 1, value).sum(-1) + lgamma(c.sum(-1)) - lgamma(c).sum(-1)

    def entropy(self) -> Any:
        c = self.concentration
        k = c.shape[-1]
        total = c.sum(-1)
        return (
            lgamma(c).sum(-1)
            - lgamma(total)
            - (k - total) * digamma(total)
            - ((c - 1) * digamma(c)).sum(-1)
        )


class StudentT(Distribution):
    """Student's t with ``df`` degrees of freedom, location ``loc`` and scale ``scale``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "df": constraints.positive,
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.real
    has_rsample = True

    def __init__(self, df: Any, loc: Any = 0.0, scale: Any = 1.0, validate_args: Any = None):
        self.df, self.loc, self.scale = broadcast_all(df, loc, scale)
        super().__init__(tuple(self.df.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return where(self.df > 1, self.loc, full_like(self.loc, math.nan))

    @property
    def mode(self) -> Any:
        return self.loc

    @property
    def variance(self) -> Any:
        df = self.df
        finite = self.scale.pow(2) * df / (df - 2)
        infinite = where(df > 1, full_like(df, math.inf), full_like(df, math.nan))
        return where(df > 2, finite, infinite)

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        x = randn(shape, dtype=self.df.dtype, device=self.df.device)
        chi2 = 2 * standard_gamma(0.5 * self.df, shape)
        y = x * (chi2 / self.df.expand(shape)).rsqrt()
        return self.loc + self.scale * y

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.df)
        self._validate_sample(value)
        y = (value - self.loc) / self.scale
        df = self.df
        z = (
            self.scale.log()
            + 0.5 * df.log()
            + 0.5 * math.log(math.pi)
            + lgamma(0.5 * df)
            - lgamma(0.5 * (df + 1.0))
        )
        return -0.5 * (df + 1.0) * (y.pow(2) / df).log1p() - z

    def entropy(self) -> Any:
        df = self.df
        lbeta = lgamma(0.5 * df) + math.lgamma(0.5) - lgamma(0.5 * (df + 1))
        return (
            self.scale.log()
            + 0.5 * (df + 1) * (digamma(0.5 * (df + 1)) - digamma(0.5 * df))
            + 0.5 * df.log()
            + lbeta
        )


class FisherSnedecor(Distribution):
    """Snedecor's F with ``df1`` and ``df2`` degrees of freedom: the ratio of two scaled
    chi-squared draws (``rsample`` differentiable through both gamma draws)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "df1": constraints.positive,
        "df2": constraints.positive,
    }
    support = constraints.positive
    has_rsample = True

    def __init__(self, df1: Any, df2: Any, validate_args: Any = None) -> None:
        self.df1, self.df2 = broadcast_all(df1, df2)
        self._gamma1 = Gamma(self.df1 * 0.5, self.df1, validate_args=False)
        self._gamma2 = Gamma(self.df2 * 0.5, self.df2, validate_args=False)
        super().__init__(tuple(self.df1.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        df2 = where(self.df2 <= 2, full_like(self.df2, math.nan), self.df2)
        return df2 / (df2 - 2)

    @property
    def mode(self) -> Any:
        df1, df2 = self.df1, self.df2
        mode = (df1 - 2) / df1 * df2 / (df2 + 2)
        return where(df1 <= 2, full_like(mode, math.nan), mode)

    @property
    def variance(self) -> Any:
        df1 = self.df1
        df2 = where(self.df2 <= 4, full_like(self.df2, math.nan), self.df2)
        return 2 * df2.pow(2) * (df1 + df2 - 2) / (df1 * (df2 - 2).pow(2) * (df2 - 4))

    def rsample(self, sample_shape: Any = ()) -> Any:
        x1 = self._gamma1.rsample(sample_shape)
        x2 = self._gamma2.rsample(sample_shape)
        x2 = x2.clamp(min=tiny(x2))
        return (x1 / x2).clamp(min=tiny(x2))

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.df1)
        self._validate_sample(value)
        ct1, ct2 = self.df1 * 0.5, self.df2 * 0.5
        ct3 = self.df1 / self.df2
        t1 = lgamma(ct1 + ct2) - lgamma(ct1) - lgamma(ct2)
        t2 = ct1 * ct3.log() + (ct1 - 1) * value.log()
        t3 = (ct1 + ct2) * (ct3 * value).log1p()
        return t1 + t2 - t3


def constraints_error(name: str, value: Any) -> Exception:
    from ..errors import ShapeError

    return ShapeError(
        f"{name}: expected a parameter of at least one dimension, got shape {tuple(value.shape)}"
    )
