"""torch's ``torch.distributions.constraints``: what a parameter or a sample must satisfy.

A constraint's ``check(value)`` is a boolean tensor (one entry per event: the event dimensions
``event_dim`` folded in); ``Distribution`` asks it for every parameter in ``arg_constraints``
when ``validate_args`` holds, and ``support`` for the values ``log_prob`` is given.

>>> import retrograd as rg
>>> positive.check(rg.tensor([1.0, -1.0])).tolist()
[True, False]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "Constraint",
    "MixtureSameFamilyConstraint",
    "boolean",
    "cat",
    "corr_cholesky",
    "dependent",
    "dependent_property",
    "greater_than",
    "greater_than_eq",
    "half_open_interval",
    "independent",
    "integer_interval",
    "interval",
    "is_dependent",
    "less_than",
    "lower_cholesky",
    "lower_triangular",
    "multinomial",
    "nonnegative",
    "nonnegative_integer",
    "one_hot",
    "positive",
    "positive_definite",
    "positive_integer",
    "positive_semidefinite",
    "real",
    "real_vector",
    "simplex",
    "square",
    "stack",
    "symmetric",
    "unit_interval",
]


class Constraint:
    """A region: ``check(value)`` tells which values lie in it."""

    is_discrete = False
    event_dim = 0

    def check(self, value: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return type(self).__name__.lstrip("_") + "()"


class _Dependent(Constraint):
    """torch's placeholder for a parameter or support that depends on other parameters (a
    ``Uniform``'s ``low``): no coordinatewise check, so validation passes over it.
    ``is_discrete`` and ``event_dim``, where not given, cannot be known statically."""

    def __init__(self, *, is_discrete: Any = NotImplemented, event_dim: Any = NotImplemented):
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete: Any = NotImplemented,
                 event_dim: Any = NotImplemented) -> _Dependent:  # fmt: skip
        """``constraints.dependent(is_discrete=True, event_dim=1)``: one with those known."""
        if is_discrete is NotImplemented:
            is_discrete = self._is_discrete
        if event_dim is NotImplemented:
            event_dim = self._event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value: Any) -> Any:
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint: Any) -> bool:
    """Whether ``constraint`` is a dependent one (validation skips those)."""
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """``@constraints.dependent_property(is_discrete=False, event_dim=0)`` over a method: a
    property on instances (``self.support``, built from the parameters), a dependent
    constraint on the class (``Uniform.support``)."""

    def __init__(self, fn: Callable[..., Any] | None = None, *, is_discrete: Any = NotImplemented,
                 event_dim: Any = NotImplemented) -> None:  # fmt: skip
        property.__init__(self, fn)
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    def __call__(self, fn: Callable[..., Any]) -> _DependentProperty:  # type: ignore[override]
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _Real(Constraint):
    def check(self, value: Any) -> Any:
        return value.eq(value)  # false for NaN only


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value: Any) -> Any:
        return value.eq(0) | value.eq(1)


class _GreaterThan(Constraint):
    def __init__(self, lower_bound: float) -> None:
        self.lower_bound = lower_bound

    def check(self, value: Any) -> Any:
        return value > self.lower_bound

    def __repr__(self) -> str:  # (torch's: the subclasses by their own names)
        return f"{type(self).__name__.lstrip('_')}(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    def check(self, value: Any) -> Any:
        return value >= self.lower_bound


class _LessThan(Constraint):
    """The half line below ``upper_bound`` (open)."""

    def __init__(self, upper_bound: Any) -> None:
        self.upper_bound = upper_bound

    def check(self, value: Any) -> Any:
        return value < self.upper_bound

    def __repr__(self) -> str:
        return f"LessThan(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    def __init__(self, lower_bound: Any, upper_bound: Any) -> None:
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value: Any) -> Any:
        return (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self) -> str:
        bounds = f"lower_bound={self.lower_bound}, upper_bound={self.upper_bound}"
        return f"{type(self).__name__.lstrip('_')}({bounds})"


class _HalfOpenInterval(_Interval):
    def check(self, value: Any) -> Any:
        return (value >= self.lower_bound) & (value < self.upper_bound)


class _IntegerInterval(_Interval):
    is_discrete = True

    def check(self, value: Any) -> Any:
        return value.eq(value.floor()) & super().check(value)


class _IntegerGreaterThan(_GreaterThanEq):
    is_discrete = True

    def check(self, value: Any) -> Any:
        return value.eq(value.floor()) & super().check(value)


class _Independent(Constraint):
    """``base`` on each entry, all of the last ``reinterpreted`` dimensions together."""

    def __init__(self, base: Constraint, reinterpreted: int) -> None:
        self.base, self.reinterpreted = base, reinterpreted
        self.is_discrete = base.is_discrete
        self.event_dim = base.event_dim + reinterpreted

    @property
    def base_constraint(self) -> Constraint:
        """torch's name of ``base``."""
        return self.base

    @property
    def reinterpreted_batch_ndims(self) -> int:
        """torch's name of ``reinterpreted``."""
        return self.reinterpreted

    def __repr__(self) -> str:
        return f"IndependentConstraint({self.base!r}, {self.reinterpreted})"

    def check(self, value: Any) -> Any:
        ok = self.base.check(value)
        for _ in range(self.reinterpreted):
            ok = ok.all(-1)
        return ok


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value: Any) -> Any:
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value: Any) -> Any:
        return (value.eq(0) | value.eq(1)).all(-1) & value.sum(-1).eq(1)


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value: Any) -> Any:
        lower = value.tril().eq(value).all(-1).all(-1)
        return lower & (value.diagonal(dim1=-2, dim2=-1) > 0).all(-1)


class _PositiveDefinite(Constraint):
    """Symmetric, and its Cholesky factorization succeeds (NumPy's, on the values)."""

    event_dim = 2

    def check(self, value: Any) -> Any:
        import numpy as np

        from ..tensor import tensor

        values = np.asarray(value.detach().numpy(), np.float64)
        shape = values.shape[:-2]
        flat = values.reshape((-1,) + values.shape[-2:])
        symmetric = np.isclose(flat, flat.swapaxes(-1, -2), rtol=1e-6, atol=1e-8).all((-1, -2))
        try:  # the whole stack at once (a Wishart sample checks 40,000 draws)
            np.linalg.cholesky(flat)
            factored = np.ones(len(flat), bool)
        except np.linalg.LinAlgError:  # one of them is not: which, one by one
            factored = np.array([_factors(matrix) for matrix in flat], bool)
        return tensor((symmetric & factored).reshape(shape), device=value.device)


def _factors(matrix: Any) -> bool:
    """Whether NumPy's Cholesky factorization of ``matrix`` succeeds."""
    import numpy as np

    try:
        np.linalg.cholesky(matrix)
    except np.linalg.LinAlgError:
        return False
    return True


class _CorrCholesky(Constraint):
    """Lower-triangular with a positive diagonal and rows of unit Euclidean norm."""

    event_dim = 2

    def check(self, value: Any) -> Any:
        from .utils import eps

        tol = eps(value) * value.shape[-1] * 10
        row_norm = (value * value).sum(-1).sqrt()
        unit_rows = ((row_norm - 1).abs() <= tol).all(-1)
        return _LowerCholesky().check(value) & unit_rows


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value: Any) -> Any:
        return value.tril().eq(value).all(-1).all(-1)


class _Square(Constraint):
    event_dim = 2

    def check(self, value: Any) -> Any:
        from ..tensor import full

        ok = value.shape[-1] == value.shape[-2]
        return full(tuple(value.shape[:-2]), ok, dtype="bool", device=value.device)


class _Symmetric(_Square):
    """Square and equal to its transpose (to torch's ``atol=1e-6``)."""

    def check(self, value: Any) -> Any:
        square = super().check(value)
        if not bool(square.all().item()):
            return square
        return value.isclose(value.mT, atol=1e-6).all(-2).all(-1)


class _PositiveSemidefinite(_Symmetric):
    """Symmetric with no negative eigenvalue (NumPy's ``eigvalsh``, on the values)."""

    def check(self, value: Any) -> Any:
        import numpy as np

        from ..tensor import tensor

        symmetric = super().check(value)
        if not bool(symmetric.all().item()):
            return symmetric
        values = np.asarray(value.detach().numpy(), np.float64)
        return tensor((np.linalg.eigvalsh(values) >= 0).all(-1), device=value.device)


class MixtureSameFamilyConstraint(Constraint):
    """A ``MixtureSameFamily``'s support: its component's constraint, checked with the
    components' dimension added back and folded in."""

    def __init__(self, base_constraint: Constraint) -> None:
        if not isinstance(base_constraint, Constraint):
            from ..errors import DTypeError

            raise DTypeError(
                "MixtureSameFamilyConstraint: base_constraint must be a Constraint, got "
                f"{type(base_constraint).__name__}"
            )
        self.base_constraint = base_constraint

    @property
    def is_discrete(self) -> bool:  # type: ignore[override]
        return self.base_constraint.is_discrete

    @property
    def event_dim(self) -> int:  # type: ignore[override]
        return self.base_constraint.event_dim

    def check(self, value: Any) -> Any:
        event_dim = self.event_dim
        if value.dim() < event_dim:
            from ..errors import ShapeError

            raise ShapeError(
                f"MixtureSameFamilyConstraint: expected value.dim() >= {event_dim}, got "
                f"{value.dim()}"
            )
        result = self.base_constraint.check(value.unsqueeze(-1 - event_dim))
        keep = value.dim() - event_dim
        return result.reshape(tuple(result.shape[:keep]) + (-1,)).all(-1)

    def __repr__(self) -> str:
        return f"MixtureSameFamilyConstraint({self.base_constraint!r})"


class _Cat(Constraint):
    """``cseq[i]`` on consecutive pieces of ``lengths[i]`` entries along ``dim``."""

    def __init__(self, cseq: Any, dim: int = 0, lengths: Any = None) -> None:
        self.cseq = list(cseq)
        self.lengths = [1] * len(self.cseq) if lengths is None else list(lengths)
        self.dim = dim
        self.is_discrete = any(c.is_discrete for c in self.cseq)
        self.event_dim = max(c.event_dim for c in self.cseq)

    def check(self, value: Any) -> Any:
        from ..tensor import cat

        checks, start = [], 0
        for constraint, length in zip(self.cseq, self.lengths, strict=True):
            checks.append(constraint.check(value.narrow(self.dim, start, length)))
            start += length
        return cat(checks, self.dim)


class _Stack(Constraint):
    """``cseq[i]`` on the ``i``-th slice along ``dim``."""

    def __init__(self, cseq: Any, dim: int = 0) -> None:
        self.cseq = list(cseq)
        self.dim = dim
        self.is_discrete = any(c.is_discrete for c in self.cseq)
        # a negative ``dim`` reaching into the event makes the stacked dimension part of it
        event_dim = max(c.event_dim for c in self.cseq)
        self.event_dim = event_dim + 1 if dim + event_dim < 0 else event_dim

    def check(self, value: Any) -> Any:
        from ..tensor import stack

        pieces = [value.select(self.dim, i) for i in range(value.shape[self.dim])]
        return stack([c.check(v) for c, v in zip(self.cseq, pieces, strict=True)], self.dim)


class _Multinomial(Constraint):
    """Non-negative integer counts summing to at most ``upper_bound`` (torch's check)."""

    is_discrete = True
    event_dim = 1

    def __init__(self, upper_bound: int) -> None:
        self.upper_bound = upper_bound

    def check(self, value: Any) -> Any:
        return (value >= 0).all(-1) & (value.sum(-1) <= self.upper_bound)


dependent = _Dependent()
dependent_property = _DependentProperty
boolean = _Boolean()
real = _Real()
real_vector = _Independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
simplex = _Simplex()
one_hot = _OneHot()
lower_cholesky = _LowerCholesky()
lower_triangular = _LowerTriangular()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
less_than = _LessThan
positive_definite = _PositiveDefinite()
corr_cholesky = _CorrCholesky()
square = _Square()
cat = _Cat
stack = _Stack
multinomial = _Multinomial
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
interval = _Interval
half_open_interval = _HalfOpenInterval
integer_interval = _IntegerInterval
independent = _Independent
