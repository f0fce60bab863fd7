"""``MultivariateNormal(loc, covariance_matrix=None, precision_matrix=None, scale_tril=None)``
and :class:`Independent`.

The Cholesky factorization and the triangular solves are composed here from differentiable
tensor ops, column by column (``O(n^2)`` small ops: meant for the small event sizes
distributions use, as an RL policy's or a VAE's). A precision matrix is turned into the
lower Cholesky factor of its inverse as torch does (the Cholesky factor of the flipped
matrix, flipped back and inverted), so no general inverse is needed.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..autodiff import enable_grad
from ..errors import InvalidArgumentError, LinAlgError, ShapeError
from ..tensor import randn, stack
from . import constraints
from .distribution import Distribution
from .utils import as_value

__all__ = ["Independent", "MultivariateNormal", "cholesky", "solve_lower"]


def cholesky(matrix: Any) -> Any:
    """The lower Cholesky factor ``L`` of symmetric positive-definite ``matrix`` (``...,
    n, n``), ``L @ L.mT == matrix``; differentiable (the Cholesky-Banachiewicz recurrence)."""
    n = matrix.shape[-1]
    # the values of the lower triangle (as torch's), with the symmetric gradient torch gives
    # (the recurrence alone reads, and so differentiates, the lower triangle only)
    lower_values = (matrix.tril() + matrix.tril(-1).transpose(-2, -1)).detach()
    symmetric = (matrix + matrix.transpose(-2, -1)) / 2
    matrix = symmetric + (lower_values - symmetric.detach())
    rows: list[list[Any]] = [[None] * n for _ in range(n)]
    zero = matrix[..., 0, 0] * 0
    for i in range(n):
        for j in range(i + 1):
            partial = matrix[..., i, j]
            for k in range(j):
                partial = partial - rows[i][k] * rows[j][k]
            if i == j:
                if not bool((partial > 0).all().item()):
                    raise LinAlgError(
                        "cholesky: the matrix is not positive-definite (leading minor of order "
                        f"{i + 1} is not positive)"
                    )
                rows[i][j] = partial.sqrt()
            else:
                rows[i][j] = partial / rows[j][j]
        for j in range(i + 1, n):
            rows[i][j] = zero
    return stack([stack(row, -1) for row in rows], -2)


def solve_lower(lower: Any, rhs: Any) -> Any:
    """``X`` with ``lower @ X == rhs`` for lower-triangular ``lower`` (``..., n, n``) and
    ``rhs`` (``..., n, m``), by forward substitution; differentiable in both."""
    n = lower.shape[-1]
    rows: list[Any] = []
    for i in range(n):
        partial = rhs[..., i, :]
        for k in range(i):
            partial = partial - lower[..., i, k].unsqueeze(-1) * rows[k]
        rows.append(partial / lower[..., i, i].unsqueeze(-1))
    return stack(rows, -2)


def _eye_like(matrix: Any) -> Any:
    from ..tensor import eye

    return eye(matrix.shape[-1], dtype=matrix.dtype, device=matrix.device)


def _precision_to_scale_tril(precision: Any) -> Any:
    flipped = precision.flip((-2, -1))
    lf = cholesky(flipped)
    l_inv = lf.flip((-2, -1)).transpose(-2, -1)
    eye = _eye_like(precision).expand(tuple(precision.shape))
    return solve_lower(l_inv, eye)


def _batch_mahalanobis(scale_tril: Any, diff: Any) -> Any:
    """``|L^-1 diff|^2`` over the last dimension, batch shapes broadcast."""
    shape = tuple(np.broadcast_shapes(tuple(scale_tril.shape[:-2]), tuple(diff.shape[:-1])))
    n = diff.shape[-1]
    lower = scale_tril.expand(shape + (n, n))
    solved = solve_lower(lower, diff.expand(shape + (n,)).unsqueeze(-1)).squeeze(-1)
    return solved.pow(2).sum(-1)


class MultivariateNormal(Distribution):
    """Gaussian over vectors of the last dimension of ``loc``, given exactly one of
    ``covariance_matrix``, ``precision_matrix`` or ``scale_tril`` (lower-triangular with a
    positive diagonal)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real_vector,
        "covariance_matrix": constraints.positive_definite,
        "precision_matrix": constraints.positive_definite,
        "scale_tril": constraints.lower_cholesky,
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: Any, covariance_matrix: Any = None, precision_matrix: Any = None,
                 scale_tril: Any = None, validate_args: Any = None) -> None:  # fmt: skip
        given = [m for m in (covariance_matrix, precision_matrix, scale_tril) if m is not None]
        if len(given) != 1:
            raise InvalidArgumentError(
                "MultivariateNormal: exactly one of covariance_matrix, precision_matrix or "
                "scale_tril may be specified"
            )
        (matrix,) = given
        if loc.ndim < 1 or matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2]:
            raise ShapeError(
                f"MultivariateNormal: loc must be at least one-dimensional and the matrix a "
                f"square matrix of at least two dimensions, got loc {tuple(loc.shape)} and "
                f"matrix {tuple(matrix.shape)}"
            )
        n = loc.shape[-1]
        if matrix.shape[-1] != n:
            raise ShapeError(
                f"MultivariateNormal: loc's event size {n} does not match the matrix's "
                f"{tuple(matrix.shape[-2:])}"
            )
        batch = tuple(np.broadcast_shapes(tuple(matrix.shape[:-2]), tuple(loc.shape[:-1])))
        self.loc = loc.expand(batch + (n,))
        self._given = {}
        if scale_tril is not None:
            self.scale_tril = scale_tril.expand(batch + (n, n))
            self._given["scale_tril"] = self.scale_tril
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self.covariance_matrix = covariance_matrix.expand(batch + (n, n))
            self._given["covariance_matrix"] = self.covariance_matrix
        else:
            self.precision_matrix = precision_matrix.expand(batch + (n, n))
            self._given["precision_matrix"] = self.precision_matrix
        super().__init__(batch, (n,), validate_args=validate_args)
        if covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        elif precision_matrix is not None:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)

    def __getattr__(self, name: str) -> Any:
        # the two matrices not given, derived on first use as torch's lazy properties
        # under enable_grad, as torch's lazy_property: a first use inside no_grad (as
        # sample's) would otherwise cache a value cut off from the parameters
        with enable_grad():
            if name == "scale_tril":
                value = self._unbroadcasted_scale_tril.expand(
                    self.batch_shape + self.event_shape * 2
                )
            elif name == "covariance_matrix":
                lower = self._unbroadcasted_scale_tril
                value = (lower @ lower.transpose(-2, -1)).expand(
                    self.batch_shape + self.event_shape * 2
                )
            elif name == "precision_matrix":
                lower = self._unbroadcasted_scale_tril
                inverse = solve_lower(lower, _eye_like(lower).expand(tuple(lower.shape)))
                value = (inverse.transpose(-2, -1) @ inverse).expand(
                    self.batch_shape + self.event_shape * 2
                )
            else:
                raise AttributeError(name)
        self.__dict__[name] = value
        return value

    def _expand_args(self) -> dict[str, Any]:
        return {"loc": self.loc, **self._given}

    @property
    def mean(self) -> Any:
        return self.loc

    @property
    def mode(self) -> Any:
        return self.loc

    @property
    def variance(self) -> Any:
        return (
            self._unbroadcasted_scale_tril.pow(2)
            .sum(-1)
            .expand(self.batch_shape + self.event_shape)
        )

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        eps = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def _half_log_det(self) -> Any:
        return self._unbroadcasted_scale_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.loc)
        self._validate_sample(value)
        diff = value - self.loc
        m = _batch_mahalanobis(self._unbroadcasted_scale_tril, diff)
        n = self.event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + m) - self._half_log_det()

    def entropy(self) -> Any:
        n = self.event_shape[0]
        h = 0.5 * n * (1.0 + math.log(2 * math.pi)) + self._half_log_det()
        return h.expand(self.batch_shape) if self.batch_shape else h


class Independent(Distribution):
    """``base_distribution`` with its rightmost ``reinterpreted_batch_ndims`` batch
    dimensions read as event dimensions (log probabilities summed over them)."""

    arg_constraints: ClassVar[dict[str, Any]] = {}

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int,
                 validate_args: Any = None) -> None:  # fmt: skip
        n = int(reinterpreted_batch_ndims)
        batch = base_distribution.batch_shape
        if n > len(batch) or n < 0:
            raise ShapeError(
                f"Independent: expected 0 <= reinterpreted_batch_ndims <= "
                f"len(base_distribution.batch_shape) = {len(batch)}, got {n}"
            )
        self.base_dist = base_distribution
        self.reinterpreted_batch_ndims = n
        cut = len(batch) - n
        super().__init__(batch[:cut], batch[cut:] + base_distribution.event_shape,
                         validate_args=validate_args)  # fmt: skip

    def expand(self, batch_shape: Any, _instance: Any = None) -> Independent:
        batch_shape = tuple(batch_shape)
        base = self.base_dist.expand(
            batch_shape + self.event_shape[: self.reinterpreted_batch_ndims]
        )
        return Independent(base, self.reinterpreted_batch_ndims, validate_args=False)

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    @constraints.dependent_property
    def support(self) -> Any:  # type: ignore[override]
        return constraints.independent(self.base_dist.support, self.reinterpreted_batch_ndims)

    @property
    def mean(self) -> Any:
        return self.base_dist.mean

    @property
    def mode(self) -> Any:
        return self.base_dist.mode

    @property
    def variance(self) -> Any:
        return self.base_dist.variance

    def sample(self, sample_shape: Any = ()) -> Any:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape: Any = ()) -> Any:
        return self.base_dist.rsample(sample_shape)

    def _summed(self, value: Any) -> Any:
        n = self.reinterpreted_batch_ndims
        return value.sum(tuple(range(-n, 0))) if n else value

    def log_prob(self, value: Any) -> Any:
        return self._summed(self.base_dist.log_prob(value))

    def entropy(self) -> Any:
        return self._summed(self.base_dist.entropy())

    def __repr__(self) -> str:
        return f"Independent({self.base_dist!r}, {self.reinterpreted_batch_ndims})"
