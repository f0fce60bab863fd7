"""``Normal(loc, scale)``: Gaussian distributions."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..tensor import randn, tensor
from ..tensor.dtypes import default_float_dtype
from . import constraints
from .exp_family import ExponentialFamily
from .utils import broadcast_all

__all__ = ["Normal"]


def _as_tensor(value: Any, like: Any = None) -> Any:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    dtype = like.dtype if like is not None else default_float_dtype()
    return tensor(float(value), dtype=dtype)


class Normal(ExponentialFamily):
    """Mean ``loc`` and standard deviation ``scale`` (tensors or numbers, broadcast)."""

    has_rsample = True
    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real,
        "scale": constraints.positive,
    }
    support = constraints.real
    _mean_carrier_measure = 0

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.loc / self.scale.pow(2), -0.5 * self.scale.pow(2).reciprocal())

    def _log_normalizer(self, x: Any, y: Any) -> Any:
        return -0.25 * x.pow(2) / y + 0.5 * (-math.pi / y).log()

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        self.loc, self.scale = broadcast_all(loc, scale)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    @property
    def mean(self) -> Any:
        return self.loc

    @property
    def mode(self) -> Any:
        return self.loc

    @property
    def stddev(self) -> Any:
        return self.scale

    @property
    def variance(self) -> Any:
        return self.scale.pow(2)

    def rsample(self, sample_shape: Any = ()) -> Any:
        """``loc + eps * scale`` (differentiable in both), ``eps`` standard normal draws."""
        shape = self._extended_shape(sample_shape)
        eps = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value: Any) -> Any:
        value = _as_tensor(value, self.loc)
        self._validate_sample(value)
        var = self.scale**2
        log_scale = self.scale.log()
        return -((value - self.loc) ** 2) / (2 * var) - log_scale - math.log(math.sqrt(2 * math.pi))

    def entropy(self) -> Any:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    def cdf(self, value: Any) -> Any:
        value = _as_tensor(value, self.loc)
        self._validate_sample(value)
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value: Any) -> Any:
        value = _as_tensor(value, self.loc)
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)
