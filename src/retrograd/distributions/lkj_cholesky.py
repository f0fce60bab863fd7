"""``LKJCholesky(dim, concentration=1.0)``: the LKJ distribution over ``dim x dim``
correlation matrices (Lewandowski, Kurowicka and Joe, 2009), as the distribution of their
lower Cholesky factors, with torch's log density and its onion-method sampler (Beta draws for
the squared row norms, uniform directions on the hypersphere) from the stream ``rg.seed``
seeds (with the onion method's Beta parameters corrected, see ``__init__``)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ..errors import InvalidArgumentError
from ..tensor import arange, cat, randn
from ..tensor.functions import where
from . import constraints
from .distribution import Distribution
from .gamma import Beta
from .utils import as_value, broadcast_all, tiny

__all__ = ["LKJCholesky"]


class LKJCholesky(Distribution):
    """Cholesky factors of correlation matrices with density proportional to
    ``det(L L^T) ** (concentration - 1)`` (uniform over correlation matrices at 1)."""

    arg_constraints: ClassVar[dict[str, Any]] = {"concentration": constraints.positive}
    support = constraints.corr_cholesky

    def __init__(self, dim: int, concentration: Any = 1.0, validate_args: Any = None) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise InvalidArgumentError(
                f"LKJCholesky: expected dim to be an integer >= 2, got dim={dim!r}"
            )
        self.dim = dim
        (self.concentration,) = broadcast_all(concentration)
        super().__init__(tuple(self.concentration.shape), (dim, dim), validate_args=validate_args)
        c = self.concentration
        # the onion method's Beta(k / 2, eta + (dim - 2) / 2 - (k - 1) / 2) for the squared
        # norm of row k's off-diagonal part (row 0's is unused). torch 2.13 takes k - 1/2 for
        # the first parameter, right for row 1 only: its correlations beyond the first row have
        # too large a spread (e.g. variance 0.215 for 1/6 at eta = 2, dim = 3)
        offset = arange(dim - 1, device=c.device).cast(c.dtype)
        offset = cat([offset.narrow(0, 0, 1) * 0, offset])
        marginal = c + 0.5 * (dim - 2)
        self._beta = Beta(
            0.5 * offset + 0.5, marginal.unsqueeze(-1) - 0.5 * offset, validate_args=False
        )

    def expand(self, batch_shape: Any, _instance: Any = None) -> LKJCholesky:
        concentration = self.concentration.expand(tuple(batch_shape))
        return LKJCholesky(self.dim, concentration, validate_args=False)

    def sample(self, sample_shape: Any = ()) -> Any:
        y = self._beta.sample(sample_shape).unsqueeze(-1)
        u_normal = randn(self._extended_shape(sample_shape), dtype=y.dtype, device=y.device)
        u_normal = u_normal.tril(-1)
        norm = u_normal.pow(2).sum(-1, keepdim=True).sqrt()
        # the first row is all zero (torch fills it with 0 after a 0 / 0)
        u_hypersphere = u_normal / where(norm.eq(0), norm * 0 + 1, norm)
        w = y.sqrt() * u_hypersphere
        diag = (1 - w.pow(2).sum(-1)).clamp(min=tiny(w)).sqrt()
        return (w + diag.diag_embed()).detach()

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.concentration)
        self._validate_sample(value)
        c, dim = self.concentration, self.dim
        diag = value.diagonal(dim1=-1, dim2=-2).narrow(-1, 1, dim - 1)
        order = arange(2, dim + 1, device=c.device).cast(c.dtype)
        order = 2 * (c - 1).unsqueeze(-1) + dim - order
        unnormalized = (order * diag.log()).sum(-1)
        dm1 = dim - 1
        alpha = c + 0.5 * dm1
        denominator = alpha.lgamma() * dm1
        numerator = (alpha - 0.5).mvlgamma(dm1)
        pi_constant = 0.5 * dm1 * math.log(math.pi)
        return unnormalized - (pi_constant + numerator - denominator)

    def __repr__(self) -> str:
        return f"LKJCholesky(dim={self.dim}, batch_shape={list(self.batch_shape)})"
