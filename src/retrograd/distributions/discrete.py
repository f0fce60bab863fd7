"""Discrete families: :class:`Poisson`, :class:`Binomial`, :class:`Geometric`,
:class:`NegativeBinomial`, :class:`Multinomial`, :class:`OneHotCategorical` (and its
straight-through :class:`OneHotCategoricalStraightThrough`), with torch's formulas.

Poisson and binomial draws are inverse-CDF draws (SciPy's quantile functions on the host) of
uniforms from the stream ``rg.seed`` seeds: exact in distribution, reproducible from the seed,
not torch's numbers.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..autodiff import no_grad
from ..errors import InvalidArgumentError
from ..tensor import rand, tensor
from ..tensor.dtypes import Size
from ..tensor.functions import where
from . import constraints
from .categorical import Categorical
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .special import lgamma
from .utils import (
    BinaryProbsOrLogits,
    as_value,
    binary_cross_entropy_with_logits,
    broadcast_all,
    tiny,
)

__all__ = [
    "Binomial",
    "Geometric",
    "Multinomial",
    "NegativeBinomial",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Poisson",
]


def _quantile_draws(d: Distribution, like: Any, sample_shape: Any, quantile: Any) -> Any:
    """``quantile(u, *params)`` of uniforms ``u`` of the sample shape (on the host)."""
    shape = d._extended_shape(sample_shape)
    with no_grad():
        u = rand(shape, dtype="float64", device=like.device).numpy()
    return tensor(np.asarray(quantile(u), np.float64), dtype=like.dtype, device=like.device)


def _host(t: Any, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.asarray(t.detach().numpy(), np.float64), shape)


def _probs_or_logits(name: str, probs: Any, logits: Any) -> None:
    if (probs is None) == (logits is None):
        raise InvalidArgumentError(
            f"{name}: either `probs` or `logits` must be specified, but not both."
        )


class Poisson(ExponentialFamily):
    """Poisson counts with mean ``rate``."""

    arg_constraints: ClassVar[dict[str, Any]] = {"rate": constraints.nonnegative}
    support = constraints.nonnegative_integer

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.rate.log(),)

    def _log_normalizer(self, x: Any) -> Any:
        return x.exp()

    def __init__(self, rate: Any, validate_args: Any = None) -> None:
        (self.rate,) = broadcast_all(rate)
        super().__init__(tuple(self.rate.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.rate

    @property
    def mode(self) -> Any:
        return self.rate.floor()

    @property
    def variance(self) -> Any:
        return self.rate

    def sample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        rate = _host(self.rate, shape)

        def draw(u: np.ndarray) -> np.ndarray:
            return _stats().poisson.ppf(u, rate)

        return _quantile_draws(self, self.rate, sample_shape, draw)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.rate)
        self._validate_sample(value)
        rate = self.rate
        # xlogy, as torch's: 0 where the count is 0, -inf for a positive count of a zero rate,
        # and its derivative in the count is log(rate) there too
        return value.xlogy(rate) - rate - lgamma(value + 1)


def _clamp_by_zero(x: Any) -> Any:
    """``clamp(x, min=0)`` whose gradient at 0 is 0.5 (torch's, so that Binomial's log density
    has the analytic gradient ``k - n sigmoid(logit)`` at a zero logit)."""
    return (x.clamp(min=0) + x - x.clamp(max=0)) / 2


class Binomial(BinaryProbsOrLogits, Distribution):
    """Successes in ``total_count`` trials of probability ``probs`` (or ``sigmoid(logits)``)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "total_count": constraints.nonnegative_integer,
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    has_enumerate_support = True

    def __init__(self, total_count: Any = 1, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        _probs_or_logits("Binomial", probs, logits)
        self._param_name = "probs" if probs is not None else "logits"
        given = probs if probs is not None else logits
        self.total_count, param = broadcast_all(total_count, given)
        self.__dict__[self._param_name] = param  # the other derived on use (lazily)
        super().__init__(tuple(param.shape), validate_args=validate_args)

    def _expand_args(self) -> dict[str, Any]:
        return {"total_count": self.total_count, self._param_name: getattr(self, self._param_name)}

    @property
    def param_shape(self) -> Size:
        """The shape of the given parameter (``probs`` or ``logits``), as torch's."""
        return Size(getattr(self, self._param_name).shape)

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> Any:
        return constraints.integer_interval(0, self.total_count)

    @property
    def mean(self) -> Any:
        return self.total_count * self.probs

    @property
    def mode(self) -> Any:
        return ((self.total_count + 1) * self.probs).floor().clamp(max=self.total_count)

    @property
    def variance(self) -> Any:
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        n, p = _host(self.total_count, shape), _host(self.probs, shape)

        def draw(u: np.ndarray) -> np.ndarray:
            return _stats().binom.ppf(u, n, p)

        return _quantile_draws(self, self.probs, sample_shape, draw)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        self._validate_sample(value)
        n, logits = self.total_count, self.logits
        normalize = n * _clamp_by_zero(logits) + n * (-logits.abs()).exp().log1p() - lgamma(n + 1)
        return value * logits - lgamma(value + 1) - lgamma(n - value + 1) - normalize

    def enumerate_support(self, expand: bool = True) -> Any:
        """``0 .. total_count`` along a new leading dimension (one ``total_count`` for all)."""
        counts = self.total_count.detach().numpy()
        top = int(counts.max()) if counts.size else 0
        if counts.size and int(counts.min()) != top:
            raise NotImplementedError(
                "Binomial.enumerate_support: inhomogeneous total_count is not supported"
            )
        from ..tensor import arange

        values = arange(top + 1, device=self.probs.device).cast(self.probs.dtype)
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((top + 1,) + self.batch_shape) if expand else values

    def entropy(self) -> Any:
        values = self.enumerate_support(expand=False)
        log_prob = self.log_prob(values)
        return -(log_prob.exp() * log_prob).sum(0)


class Geometric(BinaryProbsOrLogits, Distribution):
    """Failures before the first success, success probability ``probs``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    support = constraints.nonnegative_integer

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None):
        _probs_or_logits("Geometric", probs, logits)
        self._param_name = "probs" if probs is not None else "logits"
        (param,) = broadcast_all(probs if probs is not None else logits)
        self.__dict__[self._param_name] = param  # the other derived on use (lazily)
        super().__init__(tuple(param.shape), validate_args=validate_args)
        if self._validate_args and not bool((self.probs > 0).all().item()):
            raise InvalidArgumentError(
                f"Geometric: expected parameter probs to be positive, got {self.probs}"
            )

    def _expand_args(self) -> dict[str, Any]:
        return {self._param_name: getattr(self, self._param_name)}

    @property
    def mean(self) -> Any:
        return self.probs.reciprocal() - 1

    @property
    def mode(self) -> Any:
        return self.probs * 0

    @property
    def variance(self) -> Any:
        return (self.probs.reciprocal() - 1) / self.probs

    def sample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            u = rand(shape, dtype=self.probs.dtype, device=self.probs.device).clamp(
                min=tiny(self.probs)
            )
            return (u.log() / (-self.probs).log1p()).floor()

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        self._validate_sample(value)
        value, probs = broadcast_all(value, self.probs)
        probs = where(probs.eq(1) & value.eq(0), probs * 0, probs)
        return value * (-probs).log1p() + self.probs.log()

    def entropy(self) -> Any:
        bce = binary_cross_entropy_with_logits(self.logits, self.probs)
        return bce / self.probs


class _OverCategorical:
    """The parameters of a distribution built on a :class:`Categorical` over its last
    dimension (``self._categorical``): ``probs``, ``logits``, ``param_shape`` and the one
    given, for ``expand``, read from it."""

    _categorical: Categorical

    def _expand_args(self) -> dict[str, Any]:
        name = self._categorical._param_name
        return {name: getattr(self._categorical, name)}

    @property
    def probs(self) -> Any:
        return self._categorical.probs

    @property
    def logits(self) -> Any:
        return self._categorical.logits

    @property
    def param_shape(self) -> Size:
        return self._categorical.param_shape


class OneHotCategorical(_OverCategorical, Distribution):
    """:class:`Categorical` with its outcomes as one-hot vectors (event shape ``(K,)``)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.simplex,
        "logits": constraints.independent(constraints.real, 1),
    }
    support = constraints.one_hot
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None):
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        k = self._categorical.param_shape[-1]
        super().__init__(self._categorical.batch_shape, (k,), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.probs

    @property
    def mode(self) -> Any:
        return _one_hot(self.probs.argmax(-1), self.event_shape[0], self.probs.dtype)

    @property
    def variance(self) -> Any:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape: Any = ()) -> Any:
        indices = self._categorical.sample(sample_shape)
        return _one_hot(indices, self.event_shape[0], self.probs.dtype)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        self._validate_sample(value)
        return self._categorical.log_prob(value.argmax(-1))

    def entropy(self) -> Any:
        return self._categorical.entropy()

    def enumerate_support(self, expand: bool = True) -> Any:
        from ..tensor import eye

        k = self.event_shape[0]
        values = eye(k, dtype=self.probs.dtype, device=self.probs.device)
        values = values.reshape((k,) + (1,) * len(self.batch_shape) + (k,))
        return values.expand((k,) + self.batch_shape + (k,)) if expand else values


class OneHotCategoricalStraightThrough(OneHotCategorical):
    """:class:`OneHotCategorical` whose ``rsample`` is the one-hot draw with the
    straight-through gradient of ``probs`` (Bengio et al., 2013)."""

    has_rsample = True

    def rsample(self, sample_shape: Any = ()) -> Any:
        samples = self.sample(sample_shape)
        probs = self.probs
        return samples + (probs - probs.detach())


class Multinomial(_OverCategorical, Distribution):
    """Counts of ``total_count`` draws (one int for the whole batch) from the categories of
    ``probs`` or ``logits`` (the last dimension)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.simplex,
        "logits": constraints.real_vector,
    }

    def __init__(self, total_count: int = 1, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        if isinstance(total_count, bool) or not isinstance(total_count, int | np.integer):
            raise NotImplementedError(
                "Multinomial: inhomogeneous total_count is not supported (expected an int, got "
                f"{type(total_count).__name__})"
            )
        self.total_count = int(total_count)
        self._categorical = Categorical(probs, logits, validate_args=validate_args)
        self._binomial = Binomial(self.total_count, probs=self.probs, validate_args=False)
        batch = self._categorical.batch_shape
        super().__init__(batch, self._categorical.param_shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> Multinomial:
        batch_shape = tuple(batch_shape)
        ((name, param),) = self._expand_args().items()
        param = param.expand(batch_shape + tuple(param.shape[-1:]))
        return Multinomial(self.total_count, **{name: param}, validate_args=False)

    @constraints.dependent_property(is_discrete=True, event_dim=1)
    def support(self) -> Any:
        return constraints.multinomial(self.total_count)

    @property
    def mean(self) -> Any:
        return self.probs * self.total_count

    @property
    def variance(self) -> Any:
        return self.total_count * self.probs * (1 - self.probs)

    def sample(self, sample_shape: Any = ()) -> Any:
        sample_shape = tuple(sample_shape)
        if not self.total_count:  # no draws: all counts 0
            return self.probs.detach().new_zeros(self._extended_shape(sample_shape))
        indices = self._categorical.sample((self.total_count,) + sample_shape)
        return _one_hot(indices, self.event_shape[0], self.probs.dtype).sum(0)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        self._validate_sample(value)
        shape = tuple(np.broadcast_shapes(tuple(self.logits.shape), tuple(value.shape)))
        logits, value = self.logits.expand(shape), value.expand(shape)
        # a category of probability 0 that was never drawn contributes 0, not 0 * -inf
        logits = where(value.eq(0) & logits.eq(-np.inf), value * 0, logits)
        log_factorial_n = lgamma(value.sum(-1) + 1)
        log_factorial_xs = lgamma(value + 1).sum(-1)
        return log_factorial_n - log_factorial_xs + (logits * value).sum(-1)

    def entropy(self) -> Any:
        n = self.total_count
        term1 = n * self._categorical.entropy() - math.lgamma(n + 1)
        support = self._binomial.enumerate_support(expand=False)
        support = support.narrow(0, 1, support.shape[0] - 1)
        binomial_probs = self._binomial.log_prob(support).exp()
        weights = lgamma(support + 1)
        return term1 + (binomial_probs * weights).sum((0, -1))


class NegativeBinomial(BinaryProbsOrLogits, Distribution):
    """Successes before ``total_count`` failures, success probability ``probs`` (or
    ``sigmoid(logits)``); ``total_count`` may be any non-negative real."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "total_count": constraints.greater_than_eq(0),
        "probs": constraints.half_open_interval(0.0, 1.0),
        "logits": constraints.real,
    }
    support = constraints.nonnegative_integer

    def __init__(self, total_count: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        _probs_or_logits("NegativeBinomial", probs, logits)
        self._param_name = "probs" if probs is not None else "logits"
        given = probs if probs is not None else logits
        self.total_count, param = broadcast_all(total_count, given)
        self.total_count = self.total_count.cast(param.dtype)
        # only the given parameter is stored (and validated); the other is derived on use
        self.__dict__[self._param_name] = param
        super().__init__(tuple(param.shape), validate_args=validate_args)

    def _expand_args(self) -> dict[str, Any]:
        return {"total_count": self.total_count, self._param_name: getattr(self, self._param_name)}

    @property
    def param_shape(self) -> Size:
        return Size(getattr(self, self._param_name).shape)

    @property
    def mean(self) -> Any:
        return self.total_count * self.logits.exp()

    @property
    def mode(self) -> Any:
        return ((self.total_count - 1) * self.logits.exp()).floor().clamp(min=0.0)

    @property
    def variance(self) -> Any:
        return self.mean / (-self.logits).sigmoid()

    def sample(self, sample_shape: Any = ()) -> Any:
        from .gamma import Gamma

        with no_grad():
            rate = Gamma(self.total_count, (-self.logits).exp(), validate_args=False).sample(
                sample_shape
            )
            return Poisson(rate, validate_args=False).sample()

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.total_count)
        self._validate_sample(value)
        n, logits = self.total_count, self.logits
        # log sigmoid(z) = -softplus(-z)
        log_unnormalized = -n * logits.softplus() - value * (-logits).softplus()
        log_normalization = -lgamma(n + value) + lgamma(1.0 + value) + lgamma(n)
        # a zero total count at zero has probability 1 though lgamma(0) is infinite: the
        # normalization there is set to 0 (not multiplied by 0, which gives inf - inf's NaN)
        log_normalization = log_normalization.masked_fill((n + value).eq(0), 0.0)
        return log_unnormalized - log_normalization


def _one_hot(indices: Any, k: int, dtype: Any) -> Any:
    from ..tensor import arange

    return indices.unsqueeze(-1).eq(arange(k, device=indices.device)).cast(dtype)


def _stats() -> Any:
    """``scipy.stats``, imported at the first draw that needs it: importing it takes longer
    nearly as long as the rest of ``import retrograd`` (0.75 s of CPU against 1.05 s here),
    which every script and every rank of a distributed run would pay."""
    from scipy import stats

    return stats
