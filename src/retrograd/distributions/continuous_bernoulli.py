"""``ContinuousBernoulli(probs=None, logits=None, lims=(0.499, 0.501))``: the density on
``[0, 1]`` proportional to ``p^x (1 - p)^(1 - x)`` (Loaiza-Ganem and Cunningham, 2019), with
torch's formulas, including its Taylor expansions near ``p = 1/2`` where the closed forms
cancel catastrophically."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..autodiff import enable_grad
from ..errors import InvalidArgumentError
from ..tensor import rand
from ..tensor.dtypes import Size
from ..tensor.functions import where
from . import constraints
from .exp_family import ExponentialFamily
from .utils import (
    as_value,
    binary_cross_entropy_with_logits,
    broadcast_all,
    clamp_probs,
    probs_to_logits,
)

__all__ = ["ContinuousBernoulli"]


class ContinuousBernoulli(ExponentialFamily):
    """Parameterized by ``probs`` in ``[0, 1]`` (clamped off the ends) or ``logits``."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    support = constraints.unit_interval
    _mean_carrier_measure = 0
    has_rsample = True

    def __init__(self, probs: Any = None, logits: Any = None,
                 lims: tuple[float, float] = (0.499, 0.501),
                 validate_args: Any = None) -> None:  # fmt: skip
        if (probs is None) == (logits is None):
            raise InvalidArgumentError(
                "ContinuousBernoulli: either `probs` or `logits` must be specified, but not both."
            )
        self._param_name = "probs" if probs is not None else "logits"
        if probs is not None:
            (given,) = broadcast_all(probs)
            # as torch's: checked only when validate_args is passed (either way), since the
            # clamp below would hide a bad value from the base class's check
            check = validate_args is not None
            if check and not bool(constraints.unit_interval.check(given).all().item()):
                raise InvalidArgumentError(
                    f"ContinuousBernoulli: expected parameter probs to lie in [0, 1], got {given}"
                )
            self.__dict__["probs"] = clamp_probs(given)
        else:
            (self.__dict__["logits"],) = broadcast_all(logits)
        self._lims = lims
        param = self.__dict__[self._param_name]
        super().__init__(tuple(param.shape), validate_args=validate_args)

    def __getattr__(self, name: str) -> Any:
        # under enable_grad, as torch's lazy_property: a first use inside no_grad (as
        # sample's) would otherwise cache a value cut off from the parameters
        with enable_grad():
            if name == "logits" and "probs" in self.__dict__:
                value = probs_to_logits(self.__dict__["probs"], is_binary=True)
            elif name == "probs" and "logits" in self.__dict__:
                value = clamp_probs(self.__dict__["logits"].sigmoid())
            else:
                raise AttributeError(name)
        self.__dict__[name] = value
        return value

    def _expand_args(self) -> dict[str, Any]:
        return {self._param_name: self.__dict__[self._param_name]}

    def expand(self, batch_shape: Any, _instance: Any = None) -> ContinuousBernoulli:
        batch_shape = tuple(batch_shape)
        param = self.__dict__[self._param_name].expand(batch_shape)
        new = ContinuousBernoulli(lims=self._lims, validate_args=False,
                                  **{self._param_name: param})  # fmt: skip
        return new

    @property
    def param_shape(self) -> Size:
        return Size(self.__dict__[self._param_name].shape)

    def _outside_unstable_region(self) -> Any:
        return (self.probs <= self._lims[0]) | (self.probs > self._lims[1])

    def _cut_probs(self) -> Any:
        return where(self._outside_unstable_region(), self.probs, self.probs * 0 + self._lims[0])

    def _cont_bern_log_norm(self) -> Any:
        """``log`` of the normalizing constant ``2 atanh(1 - 2p) / (1 - 2p)``."""
        cut = self._cut_probs()
        below = where(cut <= 0.5, cut, cut * 0)
        above = where(cut >= 0.5, cut, cut * 0 + 1)
        log_norm = ((-cut).log1p() - cut.log()).abs().log() - where(
            cut <= 0.5, (-2.0 * below).log1p(), (2.0 * above - 1.0).log()
        )
        x = (self.probs - 0.5).pow(2)
        taylor = math.log(2.0) + (4.0 / 3.0 + 104.0 / 45.0 * x) * x
        return where(self._outside_unstable_region(), log_norm, taylor)

    @property
    def mean(self) -> Any:
        cut = self._cut_probs()
        mus = cut / (2.0 * cut - 1.0) + 1.0 / ((-cut).log1p() - cut.log())
        x = self.probs - 0.5
        taylor = 0.5 + (1.0 / 3.0 + 16.0 / 45.0 * x.pow(2)) * x
        return where(self._outside_unstable_region(), mus, taylor)

    @property
    def variance(self) -> Any:
        cut = self._cut_probs()
        variances = cut * (cut - 1.0) / (1.0 - 2.0 * cut).pow(2) + 1.0 / (
            (-cut).log1p() - cut.log()
        ).pow(2)
        x = (self.probs - 0.5).pow(2)
        taylor = 1.0 / 12.0 - (1.0 / 15.0 - 128.0 / 945.0 * x) * x
        return where(self._outside_unstable_region(), variances, taylor)

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        u = rand(shape, dtype=self.probs.dtype, device=self.probs.device)
        return self.icdf(u)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        bce = binary_cross_entropy_with_logits(logits, value)
        return -bce + self._cont_bern_log_norm()

    def cdf(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        self._validate_sample(value)
        cut = self._cut_probs()
        cdfs = (cut.pow(value) * (1.0 - cut).pow(1.0 - value) + cut - 1.0) / (2.0 * cut - 1.0)
        unbounded = where(self._outside_unstable_region(), cdfs, value)
        return where(value <= 0.0, value * 0, where(value >= 1.0, value * 0 + 1, unbounded))

    def icdf(self, value: Any) -> Any:
        value = as_value(value, self.probs)
        cut = self._cut_probs()
        inverse = ((-cut + value * (2.0 * cut - 1.0)).log1p() - (-cut).log1p()) / (
            cut.log() - (-cut).log1p()
        )
        return where(self._outside_unstable_region(), inverse, value)

    def entropy(self) -> Any:
        log_probs0 = (-self.probs).log1p()
        log_probs1 = self.probs.log()
        return self.mean * (log_probs0 - log_probs1) - self._cont_bern_log_norm() - log_probs0

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.logits,)

    def _log_normalizer(self, x: Any) -> Any:
        unstable = (x <= self._lims[0] - 0.5) | (x > self._lims[1] - 0.5)
        cut = where(unstable, x, x * 0 + (self._lims[0] - 0.5))
        log_norm = cut.expm1().abs().log() - cut.abs().log()
        taylor = 0.5 * x + x.pow(2) / 24.0 - x.pow(4) / 2880.0
        return where(unstable, log_norm, taylor)
