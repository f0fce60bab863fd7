"""torch's ``torch.distributions.transforms``: invertible maps with the log absolute
determinant of their Jacobian, for :class:`~.transformed.TransformedDistribution`
(normalizing flows, squashed Gaussian policies).

``t(x)`` maps forward, ``t.inv(y)`` back (``t.inv`` is itself a transform);
``t.log_abs_det_jacobian(x, y)`` is elementwise for the elementwise transforms (``event_dim``
0); ``domain`` / ``codomain`` are constraints whose ``event_dim`` says how many rightmost
dimensions form one event.

>>> import retrograd as rg
>>> t = ComposeTransform([AffineTransform(1.0, 2.0), ExpTransform()])
>>> round(t.inv(t(rg.tensor(0.5, dtype="float64"))).item(), 12)
0.5
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import InvalidArgumentError
from . import constraints

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "ComposeTransform",
    "ExpTransform",
    "PowerTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "TanhTransform",
    "Transform",
    "identity_transform",
]


def sum_rightmost(value: Any, dims: int) -> Any:
    """``value`` summed over its rightmost ``dims`` dimensions (none for ``dims <= 0``)."""
    return value.sum(tuple(range(-dims, 0))) if dims > 0 else value


class Transform:
    """An invertible map (or, with ``bijective = False``, one with a right inverse)."""

    bijective = False
    sign: int = 0
    domain: Any = constraints.real
    codomain: Any = constraints.real

    def __init__(self, cache_size: int = 0) -> None:
        if cache_size not in (0, 1):
            raise InvalidArgumentError(f"Transform: cache_size must be 0 or 1, got {cache_size}")
        self._cache_size = cache_size
        self._cached: tuple[Any, Any] | None = None
        self._inv: Any = None

    @property
    def event_dim(self) -> int:
        return max(self.domain.event_dim, self.codomain.event_dim)

    @property
    def inv(self) -> Transform:
        """The inverse transform (``inv.inv`` is ``self``)."""
        if self._inv is None:
            self._inv = _InverseTransform(self)
        return self._inv

    def __call__(self, x: Any) -> Any:
        if self._cache_size and self._cached is not None and self._cached[0] is x:
            return self._cached[1]
        y = self._call(x)
        if self._cache_size:
            self._cached = (x, y)
        return y

    def _inv_call(self, y: Any) -> Any:
        if self._cache_size and self._cached is not None and self._cached[1] is y:
            return self._cached[0]
        x = self._inverse(y)
        if self._cache_size:
            self._cached = (x, y)
        return x

    def _call(self, x: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: forward is not implemented")

    def _inverse(self, y: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: inverse is not implemented")

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}: log_abs_det_jacobian is not implemented")

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        return tuple(shape)

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        return tuple(shape)

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    def __init__(self, transform: Transform) -> None:
        super().__init__(transform._cache_size)
        self._inv = transform

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return self._inv.codomain

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        return self._inv.domain

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return self._inv.bijective

    @property
    def sign(self) -> int:  # type: ignore[override]
        return self._inv.sign

    @property
    def inv(self) -> Transform:
        return self._inv

    def __call__(self, x: Any) -> Any:
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        return -self._inv.log_abs_det_jacobian(y, x)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"{self._inv!r}.inv"


class ComposeTransform(Transform):
    """``parts`` applied in order: ``parts[-1](... parts[0](x))``."""

    def __init__(self, parts: list[Transform], cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.parts = list(parts)

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return self.parts[0].domain if self.parts else constraints.real

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        return self.parts[-1].codomain if self.parts else constraints.real

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(p.bijective for p in self.parts)

    @property
    def sign(self) -> int:  # type: ignore[override]
        sign = 1
        for p in self.parts:
            sign *= p.sign
        return sign

    @property
    def event_dim(self) -> int:
        return max([p.event_dim for p in self.parts] + [0])

    def _call(self, x: Any) -> Any:
        for part in self.parts:
            x = part(x)
        return x

    def _inverse(self, y: Any) -> Any:
        for part in reversed(self.parts):
            y = part.inv(y)
        return y

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        if not self.parts:
            return x * 0
        total: Any = 0.0
        event_dim = self.event_dim
        for part in self.parts:
            y_part = part(x)
            term = part.log_abs_det_jacobian(x, y_part)
            total = total + sum_rightmost(term, event_dim - part.event_dim)
            x = y_part
        return total

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"ComposeTransform({self.parts!r})"


identity_transform = ComposeTransform([])


class ExpTransform(Transform):
    """``y = exp(x)``."""

    bijective = True
    sign = 1
    codomain = constraints.positive

    def _call(self, x: Any) -> Any:
        return x.exp()

    def _inverse(self, y: Any) -> Any:
        return y.log()

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        return x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExpTransform)

    __hash__ = object.__hash__


def _clipped(probs: Any) -> Any:
    """``probs`` kept in ``[tiny, 1 - eps]`` (torch's clipped sigmoid)."""
    from .utils import eps, tiny

    return probs.clamp(tiny(probs), 1 - eps(probs))


class SigmoidTransform(Transform):
    """``y = sigmoid(x)``."""

    bijective = True
    sign = 1
    codomain = constraints.unit_interval

    def _call(self, x: Any) -> Any:
        return _clipped(x.sigmoid())

    def _inverse(self, y: Any) -> Any:
        y = _clipped(y)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        return -(-x).softplus() - x.softplus()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SigmoidTransform)

    __hash__ = object.__hash__


class TanhTransform(Transform):
    """``y = tanh(x)`` (the squashing of SAC's policies)."""

    bijective = True
    sign = 1
    codomain = constraints.interval(-1.0, 1.0)

    def _call(self, x: Any) -> Any:
        return x.tanh()

    def _inverse(self, y: Any) -> Any:
        return 0.5 * (y.log1p() - (-y).log1p())

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        # log(1 - tanh(x)^2), in torch's stable form
        return 2.0 * (math.log(2.0) - x - (-2.0 * x).softplus())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TanhTransform)

    __hash__ = object.__hash__


class AbsTransform(Transform):
    """``y = |x|`` (not injective: the inverse is the non-negative root)."""

    codomain = constraints.nonnegative

    def _call(self, x: Any) -> Any:
        return x.abs()

    def _inverse(self, y: Any) -> Any:
        return y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AbsTransform)

    __hash__ = object.__hash__


class PowerTransform(Transform):
    """``y = x ** exponent`` on positive ``x``."""

    bijective = True
    domain = constraints.positive
    codomain = constraints.positive

    def __init__(self, exponent: Any, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.exponent = exponent

    @property
    def sign(self) -> int:  # type: ignore[override]
        exponent = self.exponent
        if hasattr(exponent, "shape"):
            if exponent.numel() != 1:
                raise NotImplementedError("PowerTransform.sign of a tensor exponent")
            exponent = exponent.item()
        return 1 if exponent > 0 else -1

    def _call(self, x: Any) -> Any:
        return x.pow(self.exponent)

    def _inverse(self, y: Any) -> Any:
        return y.pow(1 / self.exponent)

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        exponent = self.exponent
        scale = exponent.abs().log() if hasattr(exponent, "shape") else math.log(abs(exponent))
        return scale + (y / x).log()

    def __repr__(self) -> str:
        return f"PowerTransform(exponent={self.exponent})"


class AffineTransform(Transform):
    """``y = loc + scale * x``; ``event_dim`` rightmost dimensions form one event (their
    log-determinants summed)."""

    bijective = True

    def __init__(self, loc: Any, scale: Any, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.loc, self.scale = loc, scale
        self._event_dim = int(event_dim)

    @property
    def event_dim(self) -> int:
        return self._event_dim

    @property
    def domain(self) -> Any:  # type: ignore[override]
        e = self._event_dim
        return constraints.real if e == 0 else constraints.independent(constraints.real, e)

    codomain = domain

    @property
    def sign(self) -> int:  # type: ignore[override]
        scale = self.scale
        if isinstance(scale, int | float):
            return 1 if scale > 0 else (-1 if scale < 0 else 0)
        if scale.numel() != 1:
            raise NotImplementedError("AffineTransform.sign of a tensor scale with several values")
        value = scale.item()
        return 1 if value > 0 else (-1 if value < 0 else 0)

    def _call(self, x: Any) -> Any:
        return self.loc + self.scale * x

    def _inverse(self, y: Any) -> Any:
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        scale = self.scale
        if isinstance(scale, int | float):
            result = x * 0 + math.log(abs(scale))
        else:
            result = (x * 0 + scale).abs().log()
        return sum_rightmost(result, self._event_dim)

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        import numpy as np

        shapes = [tuple(shape)]
        shapes += [tuple(t.shape) for t in (self.loc, self.scale) if hasattr(t, "shape")]
        return tuple(np.broadcast_shapes(*shapes))

    inverse_shape = forward_shape

    def __repr__(self) -> str:
        return f"AffineTransform(loc={self.loc}, scale={self.scale}, event_dim={self._event_dim})"


class SoftmaxTransform(Transform):
    """``y = softmax(x)`` over the last dimension (not bijective: ``inv`` gives the log,
    one of the preimages; no Jacobian determinant, as torch's)."""

    codomain = constraints.simplex
    domain = constraints.real_vector

    def _call(self, x: Any) -> Any:
        probs = (x - x.max(-1, keepdim=True)[0]).exp()
        return probs / probs.sum(-1, keepdim=True)

    def _inverse(self, y: Any) -> Any:
        return y.log()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SoftmaxTransform)

    __hash__ = object.__hash__
