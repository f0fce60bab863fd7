"""``Bernoulli(probs=None, logits=None)``: 0/1 outcomes."""

from __future__ import annotations

from typing import Any, ClassVar

from ..autodiff import no_grad
from ..errors import InvalidArgumentError
from ..tensor import rand
from ..tensor.dtypes import Size
from . import constraints
from .exp_family import ExponentialFamily
from .utils import BinaryProbsOrLogits, binary_cross_entropy_with_logits, broadcast_all

__all__ = ["Bernoulli"]


class Bernoulli(BinaryProbsOrLogits, ExponentialFamily):
    """1 with probability ``probs`` (or ``sigmoid(logits)``), else 0."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.unit_interval,
        "logits": constraints.real,
    }
    support = constraints.boolean
    has_enumerate_support = True
    _mean_carrier_measure = 0

    @property
    def _natural_params(self) -> tuple[Any, ...]:
        return (self.probs.logit(),)

    def _log_normalizer(self, x: Any) -> Any:
        return x.exp().log1p()

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        if (probs is None) == (logits is None):
            raise InvalidArgumentError(
                "Bernoulli: either `probs` or `logits` must be specified, but not both."
            )
        # the given parameter is kept (a Python number too, as torch's), the other derived
        # on its first reading (BinaryProbsOrLogits)
        self._param_name = "probs" if probs is not None else "logits"
        (param,) = broadcast_all(probs if probs is not None else logits)
        self.__dict__[self._param_name] = param
        super().__init__(tuple(param.shape), validate_args=validate_args)

    def _expand_args(self) -> dict[str, Any]:
        return {self._param_name: getattr(self, self._param_name)}

    @property
    def param_shape(self) -> Size:
        """The shape of the given parameter (``probs`` or ``logits``), as torch's."""
        return Size(getattr(self, self._param_name).shape)

    @property
    def mode(self) -> Any:
        mode = (self.probs >= 0.5).cast(self.probs.dtype)
        return mode.masked_fill(self.probs.eq(0.5), float("nan"))

    def enumerate_support(self, expand: bool = True) -> Any:
        """``0., 1.`` along a new leading dimension (broadcast over the batch)."""
        from ..tensor import tensor

        values = tensor([0.0, 1.0], dtype=self.probs.dtype, device=self.probs.device)
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((2,) + self.batch_shape) if expand else values

    @property
    def mean(self) -> Any:
        return self.probs

    @property
    def variance(self) -> Any:
        return self.probs * (1 - self.probs)

    def sample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        with no_grad():
            draws = rand(shape, dtype=self.probs.dtype, device=self.probs.device)
            return (draws < self.probs.expand(shape)).cast(self.probs.dtype)

    def log_prob(self, value: Any) -> Any:
        """``-binary_cross_entropy_with_logits(logits, value)``."""
        self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        return -binary_cross_entropy_with_logits(logits, value)

    def entropy(self) -> Any:
        return binary_cross_entropy_with_logits(self.logits, self.probs)
