"""``LowRankMultivariateNormal(loc, cov_factor, cov_diag)``: a Gaussian whose covariance is
``W @ W.mT + diag(D)`` with ``W`` of rank ``m`` (torch's), so log densities and entropies cost
an ``m x m`` Cholesky factorization of the capacitance matrix ``I + W.mT @ D^-1 @ W`` (the
Woodbury identity and the matrix determinant lemma) instead of an ``n x n`` one."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..errors import ShapeError
from ..tensor import randn
from . import constraints
from .distribution import Distribution
from .multivariate_normal import _batch_mahalanobis, _eye_like, cholesky, solve_lower
from .utils import as_value

__all__ = ["LowRankMultivariateNormal"]


def _batch_mv(matrix: Any, vector: Any) -> Any:
    return (matrix @ vector.unsqueeze(-1)).squeeze(-1)


def _capacitance_tril(w: Any, d: Any) -> Any:
    """The lower Cholesky factor of ``I + W.mT @ D^-1 @ W`` (``m x m``)."""
    wt_dinv = w.transpose(-2, -1) / d.unsqueeze(-2)
    k = wt_dinv @ w
    return cholesky(k + _eye_like(k))


def _lowrank_logdet(w: Any, d: Any, capacitance_tril: Any) -> Any:
    """``log det(W @ W.mT + D)`` by the matrix determinant lemma."""
    return 2 * capacitance_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) + d.log().sum(-1)


def _lowrank_mahalanobis(w: Any, d: Any, x: Any, capacitance_tril: Any) -> Any:
    """``x.T @ (W @ W.mT + D)^-1 @ x`` by the Woodbury identity."""
    wt_dinv = w.transpose(-2, -1) / d.unsqueeze(-2)
    wt_dinv_x = _batch_mv(wt_dinv, x)
    return (x.pow(2) / d).sum(-1) - _batch_mahalanobis(capacitance_tril, wt_dinv_x)


def _trace_xxt(matrix: Any) -> Any:
    return matrix.pow(2).sum((-2, -1))


class LowRankMultivariateNormal(Distribution):
    """Mean ``loc`` (``..., n``), covariance ``cov_factor @ cov_factor.mT + diag(cov_diag)``
    with ``cov_factor`` of shape ``(..., n, m)`` and positive ``cov_diag`` (``..., n``)."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real_vector,
        "cov_factor": constraints.independent(constraints.real, 2),
        "cov_diag": constraints.independent(constraints.positive, 1),
    }
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc: Any, cov_factor: Any, cov_diag: Any, validate_args: Any = None):
        name = "LowRankMultivariateNormal"
        if loc.ndim < 1:
            raise ShapeError(f"{name}: loc must be at least one-dimensional, got shape ()")
        n = loc.shape[-1]
        if cov_factor.ndim < 2 or cov_factor.shape[-2] != n:
            raise ShapeError(
                f"{name}: cov_factor must be a batch of {n} x m matrices, got shape "
                f"{tuple(cov_factor.shape)}"
            )
        if cov_diag.ndim < 1 or cov_diag.shape[-1] != n:
            raise ShapeError(
                f"{name}: cov_diag must be a batch of vectors of size {n}, got shape "
                f"{tuple(cov_diag.shape)}"
            )
        m = cov_factor.shape[-1]
        try:
            batch = tuple(np.broadcast_shapes(
                tuple(loc.shape[:-1]), tuple(cov_factor.shape[:-2]), tuple(cov_diag.shape[:-1])
            ))  # fmt: skip
        except ValueError as error:
            raise ShapeError(
                f"{name}: incompatible batch shapes: loc {tuple(loc.shape)}, cov_factor "
                f"{tuple(cov_factor.shape)}, cov_diag {tuple(cov_diag.shape)}"
            ) from error
        self.loc = loc.expand(batch + (n,))
        self.cov_factor = cov_factor.expand(batch + (n, m))
        self.cov_diag = cov_diag.expand(batch + (n,))
        self._unbroadcasted_cov_factor = cov_factor
        self._unbroadcasted_cov_diag = cov_diag
        super().__init__(batch, (n,), validate_args=validate_args)
        self._capacitance_tril = _capacitance_tril(cov_factor, cov_diag)

    @property
    def mean(self) -> Any:
        return self.loc

    @property
    def mode(self) -> Any:
        return self.loc

    @property
    def variance(self) -> Any:
        w, d = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        return (w.pow(2).sum(-1) + d).expand(self.batch_shape + self.event_shape)

    @property
    def scale_tril(self) -> Any:
        d_sqrt = self._unbroadcasted_cov_diag.sqrt().unsqueeze(-1)
        dinvsqrt_w = self._unbroadcasted_cov_factor / d_sqrt
        k = dinvsqrt_w @ dinvsqrt_w.transpose(-2, -1)
        lower = d_sqrt * cholesky(k + _eye_like(k))
        return lower.expand(self.batch_shape + self.event_shape * 2)

    @property
    def covariance_matrix(self) -> Any:
        w = self._unbroadcasted_cov_factor
        cov = w @ w.transpose(-2, -1) + self._unbroadcasted_cov_diag.diag_embed()
        return cov.expand(self.batch_shape + self.event_shape * 2)

    @property
    def precision_matrix(self) -> Any:
        w, d = self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag
        wt_dinv = w.transpose(-2, -1) / d.unsqueeze(-2)
        cap = self._capacitance_tril
        shape = tuple(np.broadcast_shapes(tuple(cap.shape[:-2]), tuple(wt_dinv.shape[:-2])))
        m, n = wt_dinv.shape[-2:]
        a = solve_lower(cap.expand(shape + (m, m)), wt_dinv.expand(shape + (m, n)))
        precision = d.reciprocal().diag_embed() - a.transpose(-2, -1) @ a
        return precision.expand(self.batch_shape + self.event_shape * 2)

    def rsample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        w_shape = shape[:-1] + (self.cov_factor.shape[-1],)
        eps_w = randn(w_shape, dtype=self.loc.dtype, device=self.loc.device)
        eps_d = randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return (
            self.loc
            + _batch_mv(self._unbroadcasted_cov_factor, eps_w)
            + self._unbroadcasted_cov_diag.sqrt() * eps_d
        )

    def _log_det(self) -> Any:
        return _lowrank_logdet(
            self._unbroadcasted_cov_factor, self._unbroadcasted_cov_diag, self._capacitance_tril
        )

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.loc)
        self._validate_sample(value)
        diff = value - self.loc
        mahalanobis = _lowrank_mahalanobis(
            self._unbroadcasted_cov_factor,
            self._unbroadcasted_cov_diag,
            diff,
            self._capacitance_tril,
        )
        n = self.event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + self._log_det() + mahalanobis)

    def entropy(self) -> Any:
        n = self.event_shape[0]
        h = 0.5 * (n * (1.0 + math.log(2 * math.pi)) + self._log_det())
        return h.expand(self.batch_shape) if self.batch_shape else h
