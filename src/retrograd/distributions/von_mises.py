"""``VonMises(loc, concentration)``: the circular normal distribution on angles, with torch's
formulas: the log normalizer ``log(2 pi I0(kappa))`` from the same polynomial approximations
of the modified Bessel functions as torch (Abramowitz and Stegun 9.8.1-9.8.4, about 1e-7
relative), so log densities agree with torch's to rounding; samples by Best and Fisher's
(1979) rejection sampler in float64, from the stream ``rg.seed`` seeds."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..errors import InvalidArgumentError
from ..tensor import rand, randn, tensor
from ..tensor.functions import where
from . import constraints
from .distribution import Distribution
from .utils import as_value, broadcast_all

__all__ = ["VonMises"]

_I0_COEF_SMALL = [1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813]
_I0_COEF_LARGE = [0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706,
                  0.02635537, -0.01647633, 0.00392377]  # fmt: skip
_I1_COEF_SMALL = [0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411]
_I1_COEF_LARGE = [0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967,
                  -0.02895312, 0.01787654, -0.00420059]  # fmt: skip
_COEF_SMALL = [_I0_COEF_SMALL, _I1_COEF_SMALL]
_COEF_LARGE = [_I0_COEF_LARGE, _I1_COEF_LARGE]


def _eval_poly(y: Any, coef: list[float]) -> Any:
    coef = list(coef)
    result: Any = coef.pop()
    while coef:
        result = coef.pop() + y * result
    return result


def _log_modified_bessel_fn(x: Any, order: int = 0) -> Any:
    """``log I_order(x)`` for ``x > 0`` and order 0 or 1 (torch's approximation)."""
    y = (x / 3.75).pow(2)
    small = _eval_poly(y, _COEF_SMALL[order])
    if order == 1:
        small = x.abs() * small
    small = small.log()
    # the large-x branch is evaluated at x >= 3.75 only, so its 1 / x stays finite
    x_large = where(x < 3.75, x * 0 + 3.75, x)
    large = x_large - 0.5 * x_large.log() + _eval_poly(3.75 / x_large, _COEF_LARGE[order]).log()
    return where(x < 3.75, small, large)


def _rejection_sample(loc: np.ndarray, kappa: np.ndarray, proposal_r: np.ndarray,
                      like: Any) -> np.ndarray:  # fmt: skip
    # A concentration so large (about 1e16 and more) that ``proposal_r`` rounds to 1 (or
    # overflows to NaN) makes every proposal's ``c`` 0, never accepted (torch's sampler hangs
    # there): those entries take the normal the von Mises tends to, of standard deviation
    # 1 / sqrt(kappa) (below 1e-8: their draws are ``loc`` to float32's precision).
    degenerate = ~(proposal_r > 1.0)  # NaN too: kappa ** 2 overflowed (kappa above 1e154)
    x = np.zeros(loc.shape)
    if degenerate.any():
        noise = randn(loc.shape, dtype="float64", device=like.device).numpy()
        x = np.where(degenerate, noise / np.sqrt(np.where(degenerate, kappa, 1.0)), x)
    done = degenerate.copy()
    while not done.all():
        u1, u2, u3 = rand((3,) + loc.shape, dtype="float64", device=like.device).numpy()
        z = np.cos(math.pi * u1)
        f = (1 + proposal_r * z) / (proposal_r + z)
        c = kappa * (proposal_r - f)
        with np.errstate(divide="ignore", invalid="ignore"):
            accept = (c * (2 - c) - u2 > 0) | (np.log(c / u2) + 1 - c >= 0)
        accept &= ~done
        x = np.where(accept, np.sign(u3 - 0.5) * np.arccos(np.clip(f, -1, 1)), x)
        done |= accept
    return np.mod(x + math.pi + loc, 2 * math.pi) - math.pi


class VonMises(Distribution):
    """Angles around ``loc`` with concentration ``concentration`` (``kappa``); no
    reparameterized sample, as torch's."""

    arg_constraints: ClassVar[dict[str, Any]] = {
        "loc": constraints.real,
        "concentration": constraints.positive,
    }
    support = constraints.real
    has_rsample = False

    def __init__(self, loc: Any, concentration: Any, validate_args: Any = None) -> None:
        self.loc, self.concentration = broadcast_all(loc, concentration)
        super().__init__(tuple(self.loc.shape), validate_args=validate_args)

    def log_prob(self, value: Any) -> Any:
        value = as_value(value, self.loc)
        self._validate_sample(value)
        log_prob = self.concentration * (value - self.loc).cos()
        return (
            log_prob - math.log(2 * math.pi) - _log_modified_bessel_fn(self.concentration, order=0)
        )

    def sample(self, sample_shape: Any = ()) -> Any:
        shape = self._extended_shape(sample_shape)
        loc = np.broadcast_to(np.asarray(self.loc.detach().numpy(), np.float64), shape)
        kappa = np.broadcast_to(np.asarray(self.concentration.detach().numpy(), np.float64), shape)
        if not (np.isfinite(kappa) & (kappa > 0)).all():
            # even with validate_args=False: the rejection sampler below would never accept
            bad = kappa[~(np.isfinite(kappa) & (kappa > 0))].ravel()[:4].tolist()
            raise InvalidArgumentError(
                f"VonMises.sample: concentration must be positive and finite, got {bad}"
            )
        # a huge kappa overflows (see _rejection_sample); a tiny one divides by a zero rho in
        # the branch np.where does not take
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            tau = 1 + np.sqrt(1 + 4 * kappa**2)
            rho = (tau - np.sqrt(2 * tau)) / (2 * kappa)
            proposal_r = np.where(kappa < 1e-5, 1 / kappa + kappa, (1 + rho**2) / (2 * rho))
        draws = _rejection_sample(loc, kappa, proposal_r, self.loc)
        return tensor(draws, dtype=self.loc.dtype, device=self.loc.device)

    @property
    def mean(self) -> Any:
        return self.loc

    @property
    def mode(self) -> Any:
        return self.loc

    @property
    def variance(self) -> Any:
        """The circular variance ``1 - I1(kappa) / I0(kappa)``."""
        k = self.concentration
        return 1 - (_log_modified_bessel_fn(k, order=1) - _log_modified_bessel_fn(k, order=0)).exp()
