"""``Wishart(df, covariance_matrix=None, precision_matrix=None, scale_tril=None)``: the
distribution of ``sum_k x_k x_k^T`` over ``df`` Gaussian vectors of covariance ``V`` (real
``df > p - 1`` allowed), with torch's log density, moments and entropy, and reparameterized
draws by Bartlett's decomposition (chi-squared diagonal, Gaussian below it)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..autodiff import enable_grad
from ..errors import InvalidArgumentError, ShapeError
from ..tensor import arange, eye, full_like, randn, tensor
from ..tensor.functions import where
from . import constraints
from .exp_family import ExponentialFamily
from .gamma import Chi2
from .multivariate_normal import _precision_to_scale_tril, cholesky, solve_lower
from .utils import as_value, eps

__all__ = ["Wishart"]

_LOG_2 = math.log(2)


def _mvdigamma(x: Any, p: int) -> Any:
    """``sum_{i<p} digamma(x - i / 2)``, the derivative of ``mvlgamma(x, p)``."""
    total = x.digamma()
    for i in range(1, p):
        total = total + (x - i / 2).digamma()
    return total


def _logdet(matrix: Any) -> Any:
    """``log det`` of symmetric positive-definite matrices, from their Cholesky factor."""
    return 2 * cholesky(matrix).diagonal(dim1=-2, dim2=-1).log().sum(-1)


def _broadcast_solve(lower: Any, rhs: Any) -> Any:
    batch = tuple(np.broadcast_shapes(tuple(lower.shape[:-2]), tuple(rhs.shape[:-2])))
    return solve_lower(
        lower.expand(batch + tuple(lower.shape[-2:])), rhs.expand(batch + tuple(rhs.shape[-2:]))
    )


class Wishart(ExponentialFamily):
    """Positive-definite ``p x p`` matrices with ``df`` degrees of freedom and scale given by
    exactly one of ``covariance_matrix``, ``precision_matrix`` or ``scale_tril``."""

    support = constraints.positive_definite
    has_rsample = True
    _mean_carrier_measure = 0

    @property
    def arg_constraints(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "covariance_matrix": constraints.positive_definite,
            "precision_matrix": constraints.positive_definite,
            "scale_tril": constraints.lower_cholesky,
            "df": constraints.greater_than(self.event_shape[-1] - 1),
        }

    def __init__(self, df: Any, covariance_matrix: Any = None, precision_matrix: Any = None,
                 scale_tril: Any = None, validate_args: Any = None) -> None:  # fmt: skip
        named = {
            "covariance_matrix": covariance_matrix,
            "precision_matrix": precision_matrix,
            "scale_tril": scale_tril,
        }
        given = [(name, m) for name, m in named.items() if m is not None]
        if len(given) != 1:
            raise InvalidArgumentError(
                "Wishart: exactly one of covariance_matrix, precision_matrix or scale_tril may "
                "be specified"
            )
        ((self._given_name, param),) = given
        if param.ndim < 2 or param.shape[-1] != param.shape[-2]:
            raise ShapeError(
                f"Wishart: {self._given_name} must be a batch of square matrices, got shape "
                f"{tuple(param.shape)}"
            )
        p = param.shape[-1]
        if hasattr(df, "shape"):
            batch = tuple(np.broadcast_shapes(tuple(param.shape[:-2]), tuple(df.shape)))
            self.df = df.expand(batch)
        else:
            batch = tuple(param.shape[:-2])
            self.df = tensor(float(df), dtype=param.dtype, device=param.device)
        if bool((self.df <= p - 1).any().item()):
            raise InvalidArgumentError(
                f"Wishart: expected df greater than ndim - 1 = {p - 1}, got df={df}"
            )
        self.__dict__[self._given_name] = param.expand(batch + (p, p))
        if bool((self.df < p).any().item()):
            warnings.warn(
                "Wishart: low df values detected; singular samples are highly likely for "
                "ndim - 1 < df < ndim",
                stacklevel=2,
            )
        super().__init__(batch, (p, p), validate_args=validate_args)
        if scale_tril is not None:
            self._unbroadcasted_scale_tril = scale_tril
        elif covariance_matrix is not None:
            self._unbroadcasted_scale_tril = cholesky(covariance_matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(precision_matrix)
        lower = self._unbroadcasted_scale_tril
        steps = arange(p, device=lower.device).cast(lower.dtype).expand(batch + (p,))
        self._dist_chi2 = Chi2(self.df.unsqueeze(-1) - steps, validate_args=False)

    def __getattr__(self, name: str) -> Any:
        # the two matrices not given, derived on first use as torch's lazy properties
        if name.startswith("__") or "_unbroadcasted_scale_tril" not in self.__dict__:
            raise AttributeError(name)
        # under enable_grad, as torch's lazy_property: a first use inside no_grad (as
        # sample's) would otherwise cache a value cut off from the parameters
        with enable_grad():
            lower = self._unbroadcasted_scale_tril
            shape = self.batch_shape + self.event_shape
            if name == "scale_tril":
                value = lower.expand(shape)
            elif name == "covariance_matrix":
                value = (lower @ lower.transpose(-2, -1)).expand(shape)
            elif name == "precision_matrix":
                inverse = solve_lower(lower, eye(lower.shape[-1], dtype=lower.dtype).expand(
                    tuple(lower.shape)
                ))  # fmt: skip
                value = (inverse.transpose(-2, -1) @ inverse).expand(shape)
            else:
                raise AttributeError(name)
        self.__dict__[name] = value
        return value

    def expand(self, batch_shape: Any, _instance: Any = None) -> Wishart:
        batch_shape = tuple(batch_shape)
        matrix = self.__dict__[self._given_name].expand(batch_shape + self.event_shape)
        return Wishart(self.df.expand(batch_shape), validate_args=False,
                       **{self._given_name: matrix})  # fmt: skip

    def _per_matrix(self, t: Any) -> Any:
        return t.reshape(self.batch_shape + (1, 1))

    @property
    def mean(self) -> Any:
        return self._per_matrix(self.df) * self.covariance_matrix

    @property
    def mode(self) -> Any:
        factor = self.df - self.event_shape[-1] - 1
        factor = where(factor <= 0, full_like(factor, math.nan), factor)
        return self._per_matrix(factor) * self.covariance_matrix

    @property
    def variance(self) -> Any:
        v = self.covariance_matrix
        diag = v.diagonal(dim1=-2, dim2=-1)
        return self._per_matrix(self.df) * (v.pow(2) + diag.unsqueeze(-1) * diag.unsqueeze(-2))

    def _bartlett_sampling(self, sample_shape: Any) -> Any:
        p = self.event_shape[-1]
        chi = self._dist_chi2.rsample(sample_shape).sqrt()
        diagonal = chi.clamp(min=eps(chi)).diag_embed()
        below = randn(tuple(sample_shape) + self.batch_shape + (p, p), dtype=chi.dtype,
                      device=chi.device).tril(-1)  # fmt: skip
        chol = self._unbroadcasted_scale_tril @ (diagonal + below)
        return chol @ chol.transpose(-2, -1)

    def rsample(self, sample_shape: Any = (), max_try_correction: int | None = None) -> Any:
        """Bartlett draws; a draw that is numerically singular (possible for ``df`` near
        ``p - 1``) is redrawn, all of the draw's batch together, up to
        ``max_try_correction`` (10) times, as torch's."""
        sample = self._bartlett_sampling(sample_shape)
        tries = 10 if max_try_correction is None else max_try_correction
        for _ in range(tries):
            singular = ~self.support.check(sample.detach())
            if not bool(singular.any().item()):
                break
            warnings.warn("Wishart: singular sample detected", stacklevel=2)
            redraw = self._bartlett_sampling(sample_shape)
            mask = singular.reshape(tuple(singular.shape) + (1, 1)).expand(tuple(sample.shape))
            sample = where(mask, redraw, sample)
        return sample

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self._unbroadcasted_scale_tril)
        self._validate_sample(value)
        nu, p = self.df, self.event_shape[-1]
        lower = self._unbroadcasted_scale_tril
        half_log_det_scale = lower.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        # trace(V^-1 X) = trace(L^-1 X L^-T), X symmetric
        inner = _broadcast_solve(lower, value)
        trace = _broadcast_solve(lower, inner.transpose(-2, -1)).diagonal(dim1=-2, dim2=-1)
        return (
            -nu * (p * _LOG_2 / 2 + half_log_det_scale)
            - (nu / 2).mvlgamma(p)
            + (nu - p - 1) / 2 * _logdet(value)
            - trace.sum(-1) / 2
        )

    def entropy(self) -> Any:
        nu, p = self.df, self.event_shape[-1]
        lower = self._unbroadcasted_scale_tril
        half_log_det_scale = lower.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return (
            (p + 1) * (p * _LOG_2 / 2 + half_log_det_scale)
            + (nu / 2).mvlgamma(p)
            - (nu - p - 1) / 2 * _mvdigamma(nu / 2, p)
            + nu * p / 2
        )

    @property
    def _natural_params(self) -> tuple[Any, Any]:
        p = self.event_shape[-1]
        return (-self.precision_matrix / 2, (self.df - p - 1) / 2)

    def _log_normalizer(self, x: Any, y: Any) -> Any:
        p = self.event_shape[-1]
        return (y + (p + 1) / 2) * (-_logdet(-2 * x) + _LOG_2 * p) + (y + (p + 1) / 2).mvlgamma(p)
