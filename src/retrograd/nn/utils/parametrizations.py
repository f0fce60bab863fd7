"""torch's ``torch.nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as
parametrizations (:mod:`.parametrize`), with torch's state-dict keys
(``parametrizations.weight.original0`` / ``original1`` for the norm and the direction;
``parametrizations.weight.original`` with ``parametrizations.weight.0._u`` / ``._v``)."""

from __future__ import annotations

from typing import Any

from ...autodiff import no_grad
from ...errors import InvalidArgumentError
from ...tensor import Tensor, randn_like
from ..functional import normalize
from ..modules.module import Module
from .norm_hooks import (
    norm_except_dim,
    power_iteration,
    spectral_matrix,
    spectrally_normalized,
    weight_norm_value,
)
from .parametrize import register_parametrization

__all__ = ["spectral_norm", "weight_norm"]


class _WeightNorm(Module):
    """``(g, v) -> v * g / ||v||`` over every dimension but ``dim``."""

    def __init__(self, dim: int | None = 0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return weight_norm_value(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Any, name: str = "weight", dim: int | None = 0) -> Any:
    """Weight normalization as a parametrization (torch's
    ``nn.utils.parametrizations.weight_norm``): ``original0`` holds the norms (``g``),
    ``original1`` the direction (``v``). Returns ``module``.

    >>> from retrograd import nn
    >>> sorted(weight_norm(nn.Linear(3, 2)).state_dict())
    ['bias', 'parametrizations.weight.original0', 'parametrizations.weight.original1']
    """
    return register_parametrization(module, name, _WeightNorm(dim), unsafe=True)


class _SpectralNorm(Module):
    """``W -> W / sigma(W)``, ``sigma`` estimated by power iteration on buffers ``_u`` and
    ``_v`` (updated in training mode), as torch's."""

    def __init__(self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0,
                 eps: float = 1e-12):  # fmt: skip
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise InvalidArgumentError(
                f"spectral_norm: dim must be in [-{ndim}, {ndim - 1}] but got {dim}"
            )
        if n_power_iterations <= 0:
            raise InvalidArgumentError(
                "spectral_norm: expected n_power_iterations to be positive, but got "
                f"n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            matrix = spectral_matrix(weight.detach(), self.dim)
            with no_grad():
                u = normalize(randn_like(matrix[:, 0]), dim=0, eps=self.eps)
                v = normalize(randn_like(matrix[0]), dim=0, eps=self.eps)
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)
            self._power(matrix, 15)

    def _power(self, matrix: Tensor, steps: int) -> None:
        u, v = power_iteration(matrix, self._u, self._v, steps, self.eps, u_first=True)
        self._buffers["_u"], self._buffers["_v"] = u, v

    def forward(self, weight: Tensor) -> Tensor:
        if weight.ndim == 1:
            return normalize(weight, dim=0, eps=self.eps)
        matrix = spectral_matrix(weight, self.dim)
        if self.training:
            self._power(matrix, self.n_power_iterations)
        return spectrally_normalized(matrix, weight, self._u, self._v)

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(module: Any, name: str = "weight", n_power_iterations: int = 1,
                  eps: float = 1e-12, dim: int | None = None) -> Any:  # fmt: skip
    """Spectral normalization as a parametrization (torch's
    ``nn.utils.parametrizations.spectral_norm``; ``dim`` defaults to 1 for
    ``ConvTranspose*``, else 0). Returns ``module``.

    >>> from retrograd import nn
    >>> sorted(spectral_norm(nn.Linear(3, 2)).state_dict())  # doctest: +NORMALIZE_WHITESPACE
    ['bias', 'parametrizations.weight.0._u', 'parametrizations.weight.0._v',
     'parametrizations.weight.original']
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise InvalidArgumentError(
            f"spectral_norm: module '{type(module).__name__}' has no parameter or buffer with "
            f"name '{name}'"
        )
    if dim is None:
        dim = 1 if type(module).__name__.startswith("ConvTranspose") else 0
    return register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps)
    )
