"""``Normal(loc, scale)``: Gaussian distributions."""

from __future__ import annotations

import math
import numbers
from typing import Any

from ..autodiff import no_grad
from ..tensor import randn, tensor
from .distribution import Distribution

__all__ = ["Normal"]


def _as_tensor(value: Any, like: Any = None) -> Any:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    dtype = like.dtype if like is not None else "float32"
    return tensor(float(value), dtype=dtype)


class Normal(Distribution):
    """Mean ``loc`` and standard deviation ``scale`` (tensors or numbers, broadcast)."""

    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: Any = None) -> None:
        reference = (
            loc
            if not isinstance(loc, numbers.Number)
            else (scale if not isinstance(scale, numbers.Number) else None)
        )
        loc, scale = _as_tensor(loc, reference), _as_tensor(scale, reference)
        import numpy as np

        shape = tuple(np.broadcast_shapes(loc.shape, scale.shape))
        self.loc = loc.expand(shape) if loc.shape != shape else loc
        self.scale = scale.expand(shape) if scale.shape != shape else scale
        super().__init__(shape)

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

    def sample(self, sample_shape: Any = ()) -> Any:
        with no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value: Any) -> Any:
        value = _as_tensor(value, self.loc)
        var = self.scale**2
        log_scale = self.scale.log()
        return -((value - self.loc) ** 2) / (2 * var) - log_scale - math.log(math.sqrt(2 * math.pi))

    def entropy(self) -> Any:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()

    def cdf(self, value: Any) -> Any:
        value = _as_tensor(value, self.loc)
        return 0.5 * (1 + ((value - self.loc) * self.scale.reciprocal() / math.sqrt(2)).erf())

    def icdf(self, value: Any) -> Any:
        value = _as_tensor(value, self.loc)
        return self.loc + self.scale * (2 * value - 1).erfinv() * math.sqrt(2)
