"""``TransformedDistribution(base_distribution, transforms)`` and the relaxed (Concrete /
Gumbel-softmax) families built on it: :class:`RelaxedBernoulli`,
:class:`RelaxedOneHotCategorical` (and their log-space bases :class:`LogitRelaxedBernoulli`,
:class:`ExpRelaxedCategorical`), with torch's formulas."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..errors import InvalidArgumentError
from ..tensor import rand
from . import constraints
from .categorical import Categorical
from .distribution import Distribution
from .multivariate_normal import Independent
from .transforms import (
    ComposeTransform,
    ExpTransform,
    SigmoidTransform,
    Transform,
    sum_rightmost,
)
from .utils import BinaryProbsOrLogits, as_value, broadcast_all, clamp_probs, eps, tiny

__all__ = [
    "ExpRelaxedCategorical",
    "LogitRelaxedBernoulli",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "TransformedDistribution",
]


class TransformedDistribution(Distribution):
    """Draws of ``base_distribution`` pushed through ``transforms`` (one or a list, applied
    in order); ``log_prob`` by the change of variables."""

    arg_constraints: ClassVar[dict[str, Any]] = {}

    def __init__(self, base_distribution: Distribution, transforms: Any,
                 validate_args: Any = None) -> None:  # fmt: skip
        if isinstance(transforms, Transform):
            transforms = [transforms]
        if not all(isinstance(t, Transform) for t in transforms):
            raise InvalidArgumentError(
                "TransformedDistribution: transforms must be a Transform or a list of them, "
                f"got {transforms!r}"
            )
        self.transforms = list(transforms)
        chain = ComposeTransform(self.transforms)
        base_shape = base_distribution.batch_shape + base_distribution.event_shape
        base_event_dim = len(base_distribution.event_shape)
        domain_event_dim = chain.domain.event_dim if self.transforms else 0
        if domain_event_dim > base_event_dim:
            base_distribution = Independent(base_distribution, domain_event_dim - base_event_dim)
        self.base_dist = base_distribution
        shape = chain.forward_shape(base_shape) if self.transforms else base_shape
        codomain_event_dim = chain.codomain.event_dim if self.transforms else 0
        event_dim = max(
            codomain_event_dim,
            codomain_event_dim + len(base_distribution.event_shape) - domain_event_dim,
        )
        cut = len(shape) - event_dim
        super().__init__(shape[:cut], shape[cut:], validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> TransformedDistribution:
        batch_shape = tuple(batch_shape)
        shape = batch_shape + self.event_shape
        for transform in reversed(self.transforms):
            shape = transform.inverse_shape(shape)
        base = self.base_dist.expand(shape[: len(shape) - len(self.base_dist.event_shape)])
        return TransformedDistribution(base, self.transforms, validate_args=False)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @constraints.dependent_property(is_discrete=False)
    def support(self) -> Any:  # type: ignore[override]
        return self.transforms[-1].codomain if self.transforms else self.base_dist.support

    def sample(self, sample_shape: Any = ()) -> Any:
        x = self.base_dist.sample(sample_shape)
        for transform in self.transforms:
            x = transform(x)
        return x

    def rsample(self, sample_shape: Any = ()) -> Any:
        x = self.base_dist.rsample(sample_shape)
        for transform in self.transforms:
            x = transform(x)
        return x

    def log_prob(self, value: Any) -> Any:
        value = _as_value(self, value)
        self._validate_sample(value)
        event_dim = len(self.event_shape)
        log_prob: Any = 0.0
        y = value
        for transform in reversed(self.transforms):
            x = transform.inv(y)
            event_dim += transform.domain.event_dim - transform.codomain.event_dim
            log_prob = log_prob - sum_rightmost(
                transform.log_abs_det_jacobian(x, y), event_dim - transform.domain.event_dim
            )
            y = x
        return log_prob + sum_rightmost(
            self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape)
        )

    def _monotonize_cdf(self, value: Any) -> Any:
        """``value`` where the transforms increase, ``1 - value`` where they decrease (the
        sign an int, or a tensor of signs for tensor-parameterized transforms, as torch's)."""
        sign: Any = 1
        for transform in self.transforms:
            sign = sign * transform.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5

    def cdf(self, value: Any) -> Any:
        value = _as_value(self, value)
        for transform in reversed(self.transforms):
            value = transform.inv(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value: Any) -> Any:
        value = self._monotonize_cdf(_as_value(self, value))
        value = self.base_dist.icdf(value)
        for transform in self.transforms:
            value = transform(value)
        return value

    def __repr__(self) -> str:
        return f"TransformedDistribution({self.base_dist!r}, {self.transforms!r})"


def _as_value(d: Distribution, value: Any) -> Any:
    """``value`` as it is when a tensor, else lifted to the dtype of a parameter of ``d``."""
    return value if hasattr(value, "shape") else as_value(value, _float_parameter(d))


def _float_parameter(d: Distribution) -> Any:
    """A tensor parameter of ``d``'s innermost base (for the dtype and device of values): one
    of its own, else one of a distribution it is built of (``MixtureSameFamily``'s components,
    as the log-normal mixtures of intensity-free point processes are written)."""
    found = _float_parameter_of(d)
    if found is None:
        raise InvalidArgumentError(f"{type(d).__name__}: no tensor parameter to take a dtype from")
    return found


def _float_parameter_of(d: Distribution) -> Any:
    while hasattr(d, "base_dist"):
        d = d.base_dist
    inner = []
    for value in vars(d).values():
        if hasattr(value, "shape") and value.is_float():
            return value
        if isinstance(value, Distribution):
            inner.append(value)
    for value in inner:
        found = _float_parameter_of(value)
        if found is not None:
            return found
    return None


class _Relaxed(BinaryProbsOrLogits, Distribution):
    """The temperature and the ``probs`` / ``logits`` pair of the relaxed families."""

    has_rsample = True

    def __init__(self, temperature: Any, probs: Any, logits: Any, event: bool,
                 validate_args: Any) -> None:  # fmt: skip
        name = type(self).__name__
        if (probs is None) == (logits is None):
            raise InvalidArgumentError(
                f"{name}: either `probs` or `logits` must be specified, but not both."
            )
        self._param_name = "probs" if probs is not None else "logits"
        if event:
            categorical = Categorical(probs, logits, validate_args=validate_args)
            self.probs, self.logits = categorical.probs, categorical.logits
        else:  # the other parameter derived on use (BinaryProbsOrLogits), as torch's
            (self.__dict__[self._param_name],) = broadcast_all(
                probs if probs is not None else logits
            )
        self._given = probs if probs is not None else logits
        param = self.__dict__[self._param_name]
        (self.temperature,) = broadcast_all(as_value(temperature, param))
        shape = tuple(param.shape)
        batch, event_shape = (shape[:-1], shape[-1:]) if event else (shape, ())
        super().__init__(batch, event_shape, validate_args=validate_args)

    def _expand_args(self) -> dict[str, Any]:
        return {self._param_name: self._given}

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        batch_shape = tuple(batch_shape)
        param = self._given
        param = param.expand(batch_shape + tuple(param.shape[len(self.batch_shape) :]))
        return type(self)(self.temperature, **{self._param_name: param}, validate_args=False)


class LogitRelaxedBernoulli(_Relaxed):
    """The logit of a :class:`RelaxedBernoulli` draw (Maddison et al., 2017)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    support = constraints.real

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        super().__init__(temperature, probs, logits, False, validate_args)

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        u = clamp_probs(rand(shape, dtype=probs.dtype, device=probs.device))
        return (u.log() - (-u).log1p() + probs.log() - (-probs).log1p()) / self.temperature

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.logits)
        self._validate_sample(value)
        diff = self.logits - value * self.temperature
        return self.temperature.log() + diff - 2 * diff.softplus()


class RelaxedBernoulli(TransformedDistribution):
    """A continuous relaxation of ``Bernoulli`` on ``(0, 1)`` at ``temperature``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        base = LogitRelaxedBernoulli(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> RelaxedBernoulli:
        base = self.base_dist.expand(batch_shape)
        return RelaxedBernoulli(self.temperature, **base._expand_args(), validate_args=False)

    temperature = property(lambda self: self.base_dist.temperature)
    probs = property(lambda self: self.base_dist.probs)
    logits = property(lambda self: self.base_dist.logits)


class ExpRelaxedCategorical(_Relaxed):
    """The log of a :class:`RelaxedOneHotCategorical` draw (Gumbel-softmax in log space)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.simplex,
        "logits": constraints.independent(constraints.real, 1),
    }
    support = constraints.real_vector

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        super().__init__(temperature, probs, logits, True, validate_args)

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.logits.dtype, device=self.logits.device)
        u = u.clamp(tiny(u), 1 - eps(u))
        gumbels = -((-(u.log())).log())
        scores = (self.logits + gumbels) / self.temperature
        return scores - scores.logsumexp(-1, keepdim=True)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.logits)
        self._validate_sample(value)
        k = self.event_shape[0]
        log_scale = math.lgamma(k) + self.temperature.log() * (k - 1)
        score = self.logits - value * self.temperature
        score = (score - score.logsumexp(-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(TransformedDistribution):
    """A continuous relaxation of ``OneHotCategorical`` on the simplex (Gumbel-softmax,
    Jang et al. and Maddison et al., 2017) at ``temperature``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.simplex,
        "logits": constraints.independent(constraints.real, 1),
    }
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature: Any, probs: Any = None, logits: Any = None,
                 validate_args: Any = None) -> None:  # fmt: skip
        base = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape: Any, _instance: Any = None) -> RelaxedOneHotCategorical:
        base = self.base_dist.expand(batch_shape)
        return RelaxedOneHotCategorical(
            self.temperature, **base._expand_args(), validate_args=False
        )

    temperature = property(lambda self: self.base_dist.temperature)
    probs = property(lambda self: self.base_dist.probs)
    logits = property(lambda self: self.base_dist.logits)
