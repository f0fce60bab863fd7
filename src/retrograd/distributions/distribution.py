"""The :class:`Distribution` base: shapes, argument validation, sampling entry points and
``expand``, as torch's ``torch.distributions.Distribution``.

``batch_shape`` is the shape of the batch of independent distributions, ``event_shape`` that of
one draw; ``sample(sample_shape)`` returns ``sample_shape + batch_shape + event_shape``.
With ``validate_args`` (on by default, as torch's outside ``python -O``) every parameter is
checked against ``arg_constraints`` when the distribution is made, and the values given to
``log_prob`` against ``support``: a bad one raises ``rg.InvalidArgumentError`` naming the
distribution, the parameter and the values.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..autodiff import no_grad
from ..errors import InvalidArgumentError
from ..tensor.dtypes import Size
from ..tensor.shape import shape_arg
from . import constraints

__all__ = ["Distribution"]


class Distribution:
    """A batch of distributions of ``batch_shape``, each over events of ``event_shape``."""

    has_rsample = False
    has_enumerate_support = False
    arg_constraints: ClassVar[dict[str, Any]] = {}
    support: Any = None
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Whether distributions made without ``validate_args`` validate (torch's switch)."""
        if value not in (True, False):
            raise InvalidArgumentError("Distribution.set_default_validate_args: expected a bool")
        Distribution._validate_args = value

    def __init__(self, batch_shape: tuple[int, ...] = (), event_shape: tuple[int, ...] = (),
                 validate_args: Any = None) -> None:  # fmt: skip
        # a str or an int list checked here: the base runs outside its subclasses' guards when
        # a user's distribution calls it
        # (torch.Size, as torch's: ``batch_shape.numel()``, a Size in ``repr``)
        self.batch_shape = Size(shape_arg(batch_shape, f"{type(self).__name__}: batch_shape"))
        self.event_shape = Size(shape_arg(event_shape, f"{type(self).__name__}: event_shape"))
        if validate_args is not None:
            self._validate_args = bool(validate_args)
        if self._validate_args:
            for name, constraint in self.arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue  # (torch's: nothing to check coordinatewise)
                value = self.__dict__.get(name)  # parameters not given are not checked
                if value is None and isinstance(getattr(type(self), name, None), property):
                    value = getattr(self, name)  # a base distribution's, as torch checks it
                if not hasattr(value, "shape"):
                    continue
                if not bool(constraint.check(value).all().item()):
                    raise InvalidArgumentError(
                        f"{type(self).__name__}: expected parameter {name} (tensor of shape "
                        f"{tuple(value.shape)}) to satisfy the constraint {constraint!r}, but "
                        f"found invalid values: {_values_text(value)}"
                    )

    # -- shapes ----------------------------------------------------------------------------
    def _extended_shape(self, sample_shape: Any = ()) -> Size:
        return Size(tuple(sample_shape) + self.batch_shape + self.event_shape)

    def _expand_args(self) -> dict[str, Any]:
        """The constructor arguments ``expand`` broadcasts (by default the tensor
        parameters of ``arg_constraints`` stored on the instance)."""
        return {
            name: self.__dict__[name]
            for name in type(self).arg_constraints
            if hasattr(self.__dict__.get(name), "shape")
        }

    def expand(self, batch_shape: Any, _instance: Any = None) -> Distribution:
        """The same distribution over a larger ``batch_shape`` (parameters broadcast, not
        copied), as torch's ``expand``."""
        batch_shape = shape_arg(batch_shape, f"{type(self).__name__}.expand")
        own = len(self.batch_shape)
        args = {
            name: value.expand(batch_shape + tuple(value.shape[own:]))
            for name, value in self._expand_args().items()
        }
        return type(self)(**args, validate_args=False)

    # -- sampling --------------------------------------------------------------------------
    def sample(self, sample_shape: Any = ()) -> Any:
        """A draw of ``sample_shape + batch_shape + event_shape``, outside the graph."""
        if self.has_rsample:
            with no_grad():
                return self.rsample(sample_shape)
        raise NotImplementedError(f"{type(self).__name__}.sample is not implemented")

    def rsample(self, sample_shape: Any = ()) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterized sample")

    def sample_n(self, n: int) -> Any:
        return self.sample((n,))

    # -- densities and moments -------------------------------------------------------------
    def log_prob(self, value: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.log_prob is not implemented")

    def entropy(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.entropy is not implemented")

    def cdf(self, value: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.cdf is not implemented")

    def icdf(self, value: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.icdf is not implemented")

    def perplexity(self) -> Any:
        return self.entropy().exp()

    @property
    def mean(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.mean is not implemented")

    @property
    def mode(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.mode is not implemented")

    @property
    def variance(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.variance is not implemented")

    @property
    def stddev(self) -> Any:
        return self.variance.sqrt()

    def _validate_sample(self, value: Any) -> None:
        """Raise unless ``value`` lies in ``support`` (with ``validate_args``)."""
        if not self._validate_args or self.support is None or not hasattr(value, "shape"):
            return
        if not bool(self.support.check(value).all().item()):
            raise InvalidArgumentError(
                f"{type(self).__name__}: expected value argument (tensor of shape "
                f"{tuple(value.shape)}) to be within the support ({self.support!r}) of the "
                f"distribution, but found invalid values: {_values_text(value)}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={list(self.batch_shape)})"


def _values_text(value: Any) -> str:
    """A tensor's values on one line (an error message is one line), cut short past 200
    characters."""
    try:
        text = repr(value.tolist())
    except Exception:
        text = type(value).__name__
    return text if len(text) <= 200 else text[:197] + "..."
