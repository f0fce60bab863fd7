"""``Categorical(probs=None, logits=None)``: distributions over ``0 .. K-1``."""

from __future__ import annotations

from typing import Any, ClassVar

from ..autodiff import no_grad
from ..errors import InvalidArgumentError, ShapeError, shape_text
from ..tensor import multinomial, tensor
from ..tensor.dtypes import Size
from . import constraints
from .distribution import Distribution
from .utils import probs_to_logits

__all__ = ["Categorical"]


class Categorical(Distribution):
    """Over the last dimension of ``probs`` (normalized to sum 1) or ``logits`` (normalized
    so that ``logits.exp()`` sums to 1, as torch normalizes them)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "probs": constraints.simplex,
        "logits": constraints.independent(constraints.real, 1),
    }
    has_enumerate_support = True

    def __init__(self, probs: Any = None, logits: Any = None, validate_args: Any = None) -> None:
        if (probs is None) == (logits is None):
            raise InvalidArgumentError(
                "Categorical: either `probs` or `logits` must be specified, but not both."
            )
        given = probs if probs is not None else logits
        if getattr(given, "ndim", 1) == 0:
            name = "probs" if probs is not None else "logits"
            raise ShapeError(f"Categorical: `{name}` parameter must be at least one-dimensional")
        if probs is not None:
            self._param_name = "probs"
            self.probs = probs / probs.sum(-1, keepdim=True)
            # torch's probs_to_logits: clamped into [eps, 1 - eps] (a zero probability's log
            # is log(eps) = -15.9 in float32, as torch's, not log(tiny) = -87.3)
            self.logits = probs_to_logits(self.probs)
        else:
            self._param_name = "logits"
            self.logits = logits - logits.logsumexp(-1, keepdim=True)
            self.probs = self.logits.softmax(-1)
        self._num_events = self.logits.shape[-1]
        super().__init__(tuple(self.logits.shape[:-1]), validate_args=validate_args)

    def _expand_args(self) -> dict[str, Any]:
        return {self._param_name: getattr(self, self._param_name)}

    @constraints.dependent_property(is_discrete=True, event_dim=0)
    def support(self) -> Any:
        return constraints.integer_interval(0, self._num_events - 1)

    @property
    def param_shape(self) -> Size:
        return Size(self.logits.shape)

    @property
    def mean(self) -> Any:
        # undefined for categories: NaN of the batch shape, a constant (torch's)
        return self.probs.new_full(self.batch_shape, float("nan"))

    @property
    def mode(self) -> Any:
        return self.probs.argmax(-1)

    @property
    def variance(self) -> Any:
        return self.probs.new_full(self.batch_shape, float("nan"))

    def enumerate_support(self, expand: bool = True) -> Any:
        """``0 .. K-1`` along a new leading dimension (broadcast over the batch)."""
        from ..tensor import arange

        values = arange(self._num_events, device=self.logits.device)
        values = values.reshape((-1,) + (1,) * len(self.batch_shape))
        return values.expand((self._num_events,) + self.batch_shape) if expand else values

    def sample(self, sample_shape: Any = ()) -> Any:
        """int64 category indices of shape ``sample_shape + batch_shape``."""
        sample_shape = tuple(sample_shape)
        count = 1
        for n in sample_shape:
            count *= n
        with no_grad():
            rows = self.probs.reshape((-1, self._num_events))
            drawn = multinomial(rows, count, replacement=True)  # [rows, count]
        return drawn.t().reshape(sample_shape + self.batch_shape)

    def log_prob(self, value: Any) -> Any:
        value = value if hasattr(value, "long") else tensor(value, dtype="int64")
        self._validate_sample(value)
        value = value.long().unsqueeze(-1)
        value, log_pmf = _broadcast(value, self.logits)
        return log_pmf.gather(-1, value.narrow(-1, 0, 1)).squeeze(-1)

    def entropy(self) -> Any:
        minimum = _most_negative(self.logits)
        logits = self.logits.clamp(min=minimum)
        return -(logits * self.probs).sum(-1)


def _most_negative(t: Any) -> float:
    from ..tensor.dtypes import finfo

    return finfo(t.dtype).min


def _broadcast(value: Any, logits: Any) -> tuple[Any, Any]:
    import numpy as np

    try:
        shape = np.broadcast_shapes(value.shape[:-1], logits.shape[:-1])
    except ValueError:
        raise ShapeError(
            f"log_prob: values of shape {shape_text(value.shape[:-1])} do not broadcast with "
            f"the batch shape {shape_text(logits.shape[:-1])}"
        ) from None
    value = value.expand(tuple(shape) + (1,))
    log_pmf = logits.expand(tuple(shape) + (logits.shape[-1],))
    return value, log_pmf
