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

import copy
import functools
import math
import numbers
import weakref
from typing import Any

from ..errors import (
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    check_iterable,
    guard_methods,
)
from ..tensor.shape import shape_arg
from . import constraints

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "CatTransform",
    "ComposeTransform",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "ExpTransform",
    "IndependentTransform",
    "LowerCholeskyTransform",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "TanhTransform",
    "Transform",
    "identity_transform",
]


def _same(a: Any, b: Any) -> bool:
    """torch's parameter equality of transforms: numbers by value, tensors entrywise."""
    if hasattr(a, "shape") or hasattr(b, "shape"):
        try:
            first, second = (a, b) if hasattr(a, "shape") else (b, a)
            return bool((first == second).all().item())
        except ShapeError:  # shapes that do not broadcast are not equal
            return False
    return a == b


def _number_or_tensor(op: str, what: str, value: Any) -> Any:
    """``value`` where it is a number or a tensor (a parameter of a transform), else a
    ``DTypeError`` at construction, not at the first property or call that reads it."""
    if isinstance(value, bool) or not (isinstance(value, numbers.Real) or hasattr(value, "shape")):
        raise DTypeError(f"{op}: {what} must be a number or a tensor, got {value!r}")
    return value


def _transforms(op: str, tseq: Any, empty: bool = True) -> list[Any]:
    """``tseq`` as a list of transforms (non-empty unless ``empty``), each checked here: a
    tensor or an int among them would fail later in a property, far from the mistake."""
    check_iterable(op, tseq, "the transforms")
    parts = list(tseq)
    wrong = next((p for p in parts if not isinstance(p, Transform)), None)
    if wrong is not None:
        raise InvalidArgumentError(
            f"{op}: every element of the transforms must be a Transform, got {type(wrong).__name__}"
        )
    if not parts and not empty:
        raise InvalidArgumentError(f"{op}: needs at least one transform")
    return parts


def _takes_tensors(method: Any) -> Any:
    """A composite transform's ``_call``, ``_inverse`` or ``log_abs_det_jacobian``, refusing
    what is not a tensor by the transform's name (its own code reads ``x.shape`` and sums the
    parts' results; it is not guarded, so that the parts' exceptions, maybe the user's,
    pass unchanged)."""

    @functools.wraps(method)
    def checked(self: Any, *values: Any) -> Any:
        for value in values:
            if not hasattr(value, "shape"):
                raise DTypeError(
                    f"{type(self).__name__}: expected a tensor, got {type(value).__name__}"
                )
        return method(self, *values)

    return checked


def sum_rightmost(value: Any, dims: int) -> Any:
    """``value`` summed over its rightmost ``dims`` dimensions (none for ``dims <= 0``)."""
    return value.sum(tuple(range(-dims, 0))) if dims > 0 else value


class Transform:
    """An invertible map (or, with ``bijective = False``, one with a right inverse)."""

    bijective = False
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
    def sign(self) -> Any:
        """The sign of the Jacobian's determinant, for the monotone transforms that define it
        (torch's: the others raise)."""
        raise NotImplementedError(f"{type(self).__name__}.sign is not defined (not monotone)")

    @property
    def inv(self) -> Transform:
        """The inverse transform (``inv.inv`` is ``self``).

        Held weakly, as torch holds it: the inverse holds this transform, so a strong
        reference back would make a cycle that keeps both, and the tensors (and graph) a
        cached transform holds, alive until the garbage collector runs."""
        inverse = self._inv() if self._inv is not None else None
        if inverse is None:
            inverse = _InverseTransform(self)
            self._inv = weakref.ref(inverse)
        return inverse

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if isinstance(state["_inv"], weakref.ref):  # (a weak reference does not pickle)
            state["_inv"] = None
        return state

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

    def with_cache(self, cache_size: int = 1) -> Transform:
        """This transform keeping (``cache_size=1``) or not (0) its last ``(x, y)``: itself
        where it already does, else a new one. As torch's: a transform of one's own with an
        ``__init__`` of its own cannot say how to be rebuilt, and raises."""
        if self._cache_size == cache_size:
            return self
        own_init = getattr(type(self).__init__, "__wrapped__", type(self).__init__)
        if own_init is getattr(Transform.__init__, "__wrapped__", Transform.__init__):
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self).__name__}.with_cache is not implemented")

    def _copy_with_cache(self, cache_size: int = 1) -> Transform:
        """``with_cache`` for the transforms here whose parameters a shallow copy keeps."""
        if self._cache_size == cache_size:
            return self
        clone = copy.copy(self)
        Transform.__init__(clone, cache_size)
        return clone

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        return shape_arg(shape, f"{type(self).__name__}.forward_shape")

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        return shape_arg(shape, f"{type(self).__name__}.inverse_shape")

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

    def with_cache(self, cache_size: int = 1) -> Transform:
        return self._inv.with_cache(cache_size).inv

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
        self.parts = _transforms("ComposeTransform", parts)
        if cache_size:  # torch's: the parts cache too, so the log-determinant reuses them
            self.parts = [part.with_cache(cache_size) for part in self.parts]

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    @property
    def domain(self) -> Any:  # type: ignore[override]
        """The first part's domain, widened (as torch's) to the event dimensions a later
        part consumes: ``[Affine, StickBreaking]`` reads vectors though Affine alone is
        elementwise."""
        if not self.parts:
            return constraints.real
        domain = self.parts[0].domain
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim += part.domain.event_dim - part.codomain.event_dim
            event_dim = max(event_dim, part.domain.event_dim)
        if event_dim > domain.event_dim:
            domain = constraints.independent(domain, event_dim - domain.event_dim)
        return domain

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        """The last part's codomain, widened as :attr:`domain` (torch's)."""
        if not self.parts:
            return constraints.real
        codomain = self.parts[-1].codomain
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim += part.codomain.event_dim - part.domain.event_dim
            event_dim = max(event_dim, part.codomain.event_dim)
        if event_dim > codomain.event_dim:
            codomain = constraints.independent(codomain, event_dim - codomain.event_dim)
        return codomain

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
        return max(self.domain.event_dim, self.codomain.event_dim)

    @_takes_tensors
    def _call(self, x: Any) -> Any:
        for part in self.parts:
            x = part(x)
        return x

    @_takes_tensors
    def _inverse(self, y: Any) -> Any:
        for part in reversed(self.parts):
            y = part.inv(y)
        return y

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        for part in self.parts:
            shape = part.forward_shape(shape)
        return shape_arg(shape, "ComposeTransform.forward_shape")

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return shape_arg(shape, "ComposeTransform.inverse_shape")

    @_takes_tensors
    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        if not self.parts:
            return x * 0
        total: Any = 0.0
        # torch's: each part's term summed over the event dimensions the chain has there
        # beyond the part's own (its domain's, which tracks reshaping parts)
        event_dim = self.domain.event_dim
        last = len(self.parts) - 1
        for i, part in enumerate(self.parts):
            # torch's: the last part reads the ``y`` given, not one recomputed from ``x``
            y_part = y if i == last else part(x)
            term = part.log_abs_det_jacobian(x, y_part)
            total = total + sum_rightmost(term, event_dim - part.domain.event_dim)
            event_dim += part.codomain.event_dim - part.domain.event_dim
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

    with_cache = Transform._copy_with_cache

    def __init__(self, exponent: Any, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.exponent = _number_or_tensor("PowerTransform", "exponent", exponent)

    @property
    def sign(self) -> Any:  # type: ignore[override]
        # torch's: an int for a number or a one-element tensor here, else the tensor of signs
        exponent = self.exponent
        if hasattr(exponent, "shape"):
            if exponent.numel() != 1:
                return exponent.sign()
            exponent = exponent.item()
        return 1 if exponent > 0 else -1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PowerTransform) and _same(self.exponent, other.exponent)

    __hash__ = object.__hash__

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

    with_cache = Transform._copy_with_cache

    def __init__(self, loc: Any, scale: Any, event_dim: int = 0, cache_size: int = 0) -> None:
        super().__init__(cache_size)
        self.loc = _number_or_tensor("AffineTransform", "loc", loc)
        self.scale = _number_or_tensor("AffineTransform", "scale", scale)
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
            return scale.sign()  # torch's: the tensor of signs, one per entry
        value = scale.item()
        return 1 if value > 0 else (-1 if value < 0 else 0)

    def _call(self, x: Any) -> Any:
        return self.loc + self.scale * x

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, AffineTransform)
            and _same(self.loc, other.loc)
            and _same(self.scale, other.scale)
        )

    __hash__ = object.__hash__

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


class SoftplusTransform(Transform):
    """``y = log(1 + exp(x))``."""

    bijective = True
    sign = 1
    codomain = constraints.positive

    def _call(self, x: Any) -> Any:
        return x.softplus()

    def _inverse(self, y: Any) -> Any:
        return (-(-y).expm1()).log() + y

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        return -(-x).softplus()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SoftplusTransform)

    __hash__ = object.__hash__


def _offsets(like: Any, n: int, top: int) -> Any:
    """``top - 1, top - 2, ..., top - n`` as a tensor of ``like``'s dtype."""
    from ..tensor import arange

    return top - arange(1, n + 1, device=like.device).cast(like.dtype)


def _pad_last(x: Any, before: bool) -> Any:
    """``x`` with a column of ones added before (or after) its last dimension."""
    from ..tensor import cat

    one = x.narrow(-1, 0, 1) * 0 + 1
    return cat([one, x] if before else [x, one], -1)


class StickBreakingTransform(Transform):
    """Real vectors of ``K - 1`` entries onto the ``K``-simplex by stick breaking (the
    logistic-normal's map; bijective, with a Jacobian determinant, unlike softmax)."""

    bijective = True
    domain = constraints.real_vector
    codomain = constraints.simplex

    def _call(self, x: Any) -> Any:
        offset = _offsets(x, x.shape[-1], x.shape[-1] + 1)
        z = _clipped((x - offset.log()).sigmoid())
        z_cumprod = (1 - z).cumprod(-1)
        return _pad_last(z, before=False) * _pad_last(z_cumprod, before=True)

    def _inverse(self, y: Any) -> Any:
        from .utils import tiny

        y_crop = y.narrow(-1, 0, y.shape[-1] - 1)
        offset = _offsets(y, y_crop.shape[-1], y.shape[-1])
        sf = (1 - y_crop.cumsum(-1)).clamp(min=tiny(y))
        return y_crop.log() - sf.log() + offset.log()

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        offset = _offsets(x, x.shape[-1], x.shape[-1] + 1)
        x = x - offset.log()
        log_sigmoid = -(-x).softplus()
        return (-x + log_sigmoid + y.narrow(-1, 0, y.shape[-1] - 1).log()).sum(-1)

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        _at_least("StickBreakingTransform", shape, 1)
        return tuple(shape[:-1]) + (shape[-1] + 1,)

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        _at_least("StickBreakingTransform", shape, 1)
        return tuple(shape[:-1]) + (shape[-1] - 1,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StickBreakingTransform)

    __hash__ = object.__hash__


def _at_least(name: str, shape: Any, dims: int) -> None:
    if len(shape) < dims:
        raise ShapeError(f"{name}: too few dimensions on input, got shape {tuple(shape)}")


class IndependentTransform(Transform):
    """``base_transform`` with its rightmost ``reinterpreted_batch_ndims`` dimensions read as
    one event (log-determinants summed over them)."""

    with_cache = Transform._copy_with_cache

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int,
                 cache_size: int = 0) -> None:  # fmt: skip
        super().__init__(cache_size)
        (self.base_transform,) = _transforms("IndependentTransform", [base_transform])
        self.reinterpreted_batch_ndims = int(reinterpreted_batch_ndims)

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return constraints.independent(self.base_transform.domain, self.reinterpreted_batch_ndims)

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        return constraints.independent(self.base_transform.codomain, self.reinterpreted_batch_ndims)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return self.base_transform.bijective

    @property
    def sign(self) -> Any:  # type: ignore[override]
        return self.base_transform.sign

    @_takes_tensors
    def _call(self, x: Any) -> Any:
        _at_least("IndependentTransform", x.shape, self.domain.event_dim)
        return self.base_transform(x)

    @_takes_tensors
    def _inverse(self, y: Any) -> Any:
        _at_least("IndependentTransform", y.shape, self.codomain.event_dim)
        return self.base_transform.inv(y)

    @_takes_tensors
    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        result = self.base_transform.log_abs_det_jacobian(x, y)
        return sum_rightmost(result, self.reinterpreted_batch_ndims)

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        return self.base_transform.inverse_shape(shape)

    def __repr__(self) -> str:
        return f"IndependentTransform({self.base_transform!r}, {self.reinterpreted_batch_ndims})"


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count


class ReshapeTransform(Transform):
    """Events of ``in_shape`` reshaped to ``out_shape`` (the same number of entries)."""

    bijective = True

    with_cache = Transform._copy_with_cache

    def __init__(self, in_shape: Any, out_shape: Any, cache_size: int = 0) -> None:
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        if _numel(self.in_shape) != _numel(self.out_shape):
            raise ShapeError(
                f"ReshapeTransform: in_shape {self.in_shape} and out_shape {self.out_shape} "
                "have different numbers of elements"
            )
        super().__init__(cache_size)

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return constraints.independent(constraints.real, len(self.in_shape))

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        return constraints.independent(constraints.real, len(self.out_shape))

    def _call(self, x: Any) -> Any:
        batch = tuple(x.shape[: x.ndim - len(self.in_shape)])
        return x.reshape(batch + self.out_shape)

    def _inverse(self, y: Any) -> Any:
        batch = tuple(y.shape[: y.ndim - len(self.out_shape)])
        return y.reshape(batch + self.in_shape)

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        batch = tuple(x.shape[: x.ndim - len(self.in_shape)])
        return x.new_zeros(batch)

    def _swap(self, shape: Any, have: tuple[int, ...], want: tuple[int, ...]) -> tuple[int, ...]:
        shape = tuple(shape)
        _at_least("ReshapeTransform", shape, len(have))
        cut = len(shape) - len(have)
        if shape[cut:] != have:
            raise ShapeError(
                f"ReshapeTransform: shape mismatch: expected {have}, got {shape[cut:]}"
            )
        return shape[:cut] + want

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        return self._swap(shape, self.in_shape, self.out_shape)

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        return self._swap(shape, self.out_shape, self.in_shape)

    def __repr__(self) -> str:
        return f"ReshapeTransform(in_shape={self.in_shape}, out_shape={self.out_shape})"


class LowerCholeskyTransform(Transform):
    """Square matrices onto lower-triangular ones with a positive diagonal (the strictly
    lower part kept, the diagonal exponentiated); no Jacobian determinant, as torch's."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.lower_cholesky

    def _call(self, x: Any) -> Any:
        return x.tril(-1) + x.diagonal(dim1=-2, dim2=-1).exp().diag_embed()

    def _inverse(self, y: Any) -> Any:
        return y.tril(-1) + y.diagonal(dim1=-2, dim2=-1).log().diag_embed()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LowerCholeskyTransform)

    __hash__ = object.__hash__


class PositiveDefiniteTransform(Transform):
    """Square matrices onto positive-definite ones: ``L @ L.mT`` of their
    :class:`LowerCholeskyTransform`."""

    domain = constraints.independent(constraints.real, 2)
    codomain = constraints.positive_definite

    def _call(self, x: Any) -> Any:
        lower = LowerCholeskyTransform()(x)
        return lower @ lower.transpose(-2, -1)

    def _inverse(self, y: Any) -> Any:
        from .multivariate_normal import cholesky

        return LowerCholeskyTransform().inv(cholesky(y))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PositiveDefiniteTransform)

    __hash__ = object.__hash__


class CatTransform(Transform):
    """``tseq[i]`` applied to consecutive pieces of ``lengths[i]`` entries (1 each by default)
    along ``dim``, the results concatenated."""

    with_cache = Transform._copy_with_cache

    def __init__(self, tseq: Any, dim: int = 0, lengths: Any = None, cache_size: int = 0):
        tseq = _transforms("CatTransform", tseq, empty=False)
        super().__init__(cache_size)
        self.transforms = tseq
        self.lengths = [1] * len(tseq) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise InvalidArgumentError(
                f"CatTransform: {len(self.lengths)} lengths for {len(self.transforms)} transforms"
            )
        self.dim = int(dim)

    @property
    def event_dim(self) -> int:
        return max(t.event_dim for t in self.transforms)

    @property
    def length(self) -> int:
        return sum(self.lengths)

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(t.bijective for t in self.transforms)

    def _check(self, x: Any) -> None:
        if not -x.ndim <= self.dim < x.ndim:
            raise ShapeError(
                f"CatTransform: dim {self.dim} out of range for a tensor of shape {tuple(x.shape)}"
            )
        if x.shape[self.dim] != self.length:
            raise ShapeError(
                f"CatTransform: size {x.shape[self.dim]} along dim {self.dim} must equal the "
                f"total length {self.length}"
            )

    def _pieces(self, x: Any) -> Any:
        start = 0
        for transform, length in zip(self.transforms, self.lengths, strict=True):
            yield transform, x.narrow(self.dim, start, length)
            start += length

    @_takes_tensors
    def _call(self, x: Any) -> Any:
        from ..tensor import cat

        self._check(x)
        return cat([t(piece) for t, piece in self._pieces(x)], self.dim)

    @_takes_tensors
    def _inverse(self, y: Any) -> Any:
        from ..tensor import cat

        self._check(y)
        return cat([t.inv(piece) for t, piece in self._pieces(y)], self.dim)

    @_takes_tensors
    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        from ..tensor import cat

        self._check(x)
        self._check(y)
        terms = []
        for (t, xs), (_, ys) in zip(self._pieces(x), self._pieces(y), strict=True):
            term = t.log_abs_det_jacobian(xs, ys)
            terms.append(sum_rightmost(term, self.event_dim - t.event_dim))
        dim = self.dim - x.ndim if self.dim >= 0 else self.dim
        dim += self.event_dim
        if dim < 0:
            return cat(terms, dim)
        total = terms[0]
        for term in terms[1:]:
            total = total + term
        return total

    def __repr__(self) -> str:
        return f"CatTransform({self.transforms!r}, dim={self.dim}, lengths={self.lengths})"


class StackTransform(Transform):
    """``tseq[i]`` applied to the ``i``-th slice along ``dim``, the results stacked."""

    with_cache = Transform._copy_with_cache

    def __init__(self, tseq: Any, dim: int = 0, cache_size: int = 0) -> None:
        tseq = _transforms("StackTransform", tseq, empty=False)
        super().__init__(cache_size)
        self.transforms = tseq
        self.dim = int(dim)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(t.bijective for t in self.transforms)

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @property
    def codomain(self) -> Any:  # type: ignore[override]
        return constraints.stack([t.codomain for t in self.transforms], self.dim)

    def _slices(self, z: Any) -> list[Any]:
        if not -z.ndim <= self.dim < z.ndim:
            raise ShapeError(
                f"StackTransform: dim {self.dim} out of range for a tensor of shape "
                f"{tuple(z.shape)}"
            )
        if z.shape[self.dim] != len(self.transforms):
            raise ShapeError(
                f"StackTransform: size {z.shape[self.dim]} along dim {self.dim} must equal the "
                f"number of transforms {len(self.transforms)}"
            )
        return [z.select(self.dim, i) for i in range(z.shape[self.dim])]

    @_takes_tensors
    def _call(self, x: Any) -> Any:
        from ..tensor import stack

        pieces = self._slices(x)
        return stack([t(p) for t, p in zip(self.transforms, pieces, strict=True)], self.dim)

    @_takes_tensors
    def _inverse(self, y: Any) -> Any:
        from ..tensor import stack

        pieces = self._slices(y)
        return stack([t.inv(p) for t, p in zip(self.transforms, pieces, strict=True)], self.dim)

    @_takes_tensors
    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        from ..tensor import stack

        xs, ys = self._slices(x), self._slices(y)
        terms = [
            t.log_abs_det_jacobian(a, b) for t, a, b in zip(self.transforms, xs, ys, strict=True)
        ]
        return stack(terms, self.dim)

    def __repr__(self) -> str:
        return f"StackTransform({self.transforms!r}, dim={self.dim})"


class CumulativeDistributionTransform(Transform):
    """``y = distribution.cdf(x)`` onto the unit interval (inverse ``icdf``; the
    log-determinant is the log density)."""

    bijective = True
    sign = 1
    codomain = constraints.unit_interval

    with_cache = Transform._copy_with_cache

    def __init__(self, distribution: Any, cache_size: int = 0) -> None:
        from .distribution import Distribution

        if not isinstance(distribution, Distribution):
            raise DTypeError(
                f"CumulativeDistributionTransform: expected a Distribution, got "
                f"{type(distribution).__name__}"
            )
        super().__init__(cache_size)
        self.distribution = distribution

    @property
    def domain(self) -> Any:  # type: ignore[override]
        return self.distribution.support

    def _call(self, x: Any) -> Any:
        return self.distribution.cdf(x)

    def _inverse(self, y: Any) -> Any:
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        return self.distribution.log_prob(x)


def _tril_indices(n: int, diag: int) -> tuple[list[int], list[int]]:
    """Row-major indices of the entries of an ``n x n`` matrix on or below diagonal
    ``diag`` (torch's ``tril_indices`` order)."""
    rows, cols = [], []
    for i in range(n):
        for j in range(n):
            if j - i <= diag:
                rows.append(i)
                cols.append(j)
    return rows, cols


def _vec_to_tril(vec: Any, diag: int) -> Any:
    """A vector of the entries below diagonal ``diag`` placed into a square matrix."""
    from ..tensor import stack

    n = _side(vec.shape[-1], diag)
    rows, cols = _tril_indices(n, diag)
    where = {(r, c): k for k, (r, c) in enumerate(zip(rows, cols, strict=True))}
    zero = vec.narrow(-1, 0, 1).squeeze(-1) * 0
    entries = [
        stack([vec.select(-1, where[i, j]) if (i, j) in where else zero for j in range(n)], -1)
        for i in range(n)
    ]
    return stack(entries, -2)


def _side(count: int, diag: int) -> int:
    """The side ``n`` of the square matrix with ``count`` entries on or below ``diag``."""
    n = 1
    while len(_tril_indices(n, diag)[0]) < count:
        n += 1
    if len(_tril_indices(n, diag)[0]) != count:
        raise ShapeError(f"expected a flattened triangular matrix, got {count} entries")
    return n


def _tril_to_vec(matrix: Any, diag: int) -> Any:
    from ..tensor import stack

    rows, cols = _tril_indices(matrix.shape[-1], diag)
    return stack([matrix[..., i, j] for i, j in zip(rows, cols, strict=True)], -1)


class CorrCholeskyTransform(Transform):
    """Unconstrained vectors of ``D (D - 1) / 2`` entries onto Cholesky factors of ``D x D``
    correlation matrices (tanh, then stick breaking along each row; torch's map)."""

    bijective = True
    domain = constraints.real_vector
    codomain = constraints.corr_cholesky

    def _call(self, x: Any) -> Any:
        from ..tensor import eye
        from .utils import eps

        x = x.tanh()
        e = eps(x)
        x = x.clamp(-1 + e, 1 - e)
        r = _vec_to_tril(x, -1)
        z = r.pow(2)
        z1m_cumprod_sqrt = (1 - z).sqrt().cumprod(-1)
        n = r.shape[-1]
        r = r + eye(n, dtype=r.dtype, device=r.device)
        return r * _pad_last(z1m_cumprod_sqrt.narrow(-1, 0, n - 1), before=True)

    def _inverse(self, y: Any) -> Any:
        n = y.shape[-1]
        y_cumsum = 1 - (y * y).cumsum(-1)
        shifted = _pad_last(y_cumsum.narrow(-1, 0, n - 1), before=True)
        t = _tril_to_vec(y, -1) / _tril_to_vec(shifted, -1).sqrt()
        return (t.log1p() - (-t).log1p()) / 2

    def log_abs_det_jacobian(self, x: Any, y: Any) -> Any:
        y1m_cumsum = 1 - (y * y).cumsum(-1)
        stick_breaking_logdet = 0.5 * _tril_to_vec(y1m_cumsum, -2).log().sum(-1)
        tanh_logdet = -2 * (x + (-2 * x).softplus() - math.log(2.0)).sum(-1)
        return stick_breaking_logdet + tanh_logdet

    def forward_shape(self, shape: Any) -> tuple[int, ...]:
        _at_least("CorrCholeskyTransform", shape, 1)
        count = shape[-1]
        side = round((0.25 + 2 * count) ** 0.5 + 0.5)
        if side * (side - 1) // 2 != count:
            raise ShapeError(
                f"CorrCholeskyTransform: {count} is not the size of a flattened strictly lower "
                "triangle"
            )
        return tuple(shape[:-1]) + (side, side)

    def inverse_shape(self, shape: Any) -> tuple[int, ...]:
        _at_least("CorrCholeskyTransform", shape, 2)
        if shape[-2] != shape[-1]:
            raise ShapeError(f"CorrCholeskyTransform: expected square matrices, got {tuple(shape)}")
        side = shape[-1]
        return tuple(shape[:-2]) + (side * (side - 1) // 2,)


#: transforms that run others (which may be the user's): their methods' exceptions pass
#: unchanged (their constructors check the transforms they are given, and are guarded)
_COMPOSITES = ("ComposeTransform", "IndependentTransform", "CatTransform", "StackTransform",
               "CumulativeDistributionTransform")  # fmt: skip
_GUARDED = ("__init__", "_call", "_inverse", "log_abs_det_jacobian", "forward_shape",
            "inverse_shape")  # fmt: skip


def _guard_transforms() -> None:
    """A str or a None given to a built-in transform (``t(None)``, ``t.inv("a")``,
    ``t.forward_shape(3)``) gets the hierarchy's error naming the transform (errors.guard),
    as the distributions' methods do. ``_call`` and ``_inverse`` are guarded, not ``__call__``,
    so that a user's subclass defining its own keeps its exceptions."""
    classes = [(name, globals().get(name)) for name in __all__]
    guard_methods(
        [(name, cls) for name, cls in classes if isinstance(cls, type) and cls is not Transform],
        _GUARDED,
        lambda name, method: {"__init__": name, "_call": name, "_inverse": f"{name}.inv"}.get(
            method, f"{name}.{method}"
        ),
        _COMPOSITES,
    )


_guard_transforms()
