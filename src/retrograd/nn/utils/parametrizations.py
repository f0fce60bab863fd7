"""torch's ``torch.nn.utils.parametrizations``: ``weight_norm`` and ``spectral_norm`` as
parametrizations (:mod:`.parametrize`), with torch's state-dict keys
(``parametrizations.weight.original0`` / ``original1`` for the norm and the direction;
``parametrizations.weight.original`` with ``parametrizations.weight.0._u`` / ``._v``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...autodiff import no_grad
from ...errors import InvalidArgumentError
from ...tensor import Tensor, randn_like
from ..functional import normalize
from ..modules.module import Module
from .norm_hooks import (
    check_weight_norm_dim,
    norm_except_dim,
    power_iteration,
    refresh_in_place,
    spectral_matrix,
    spectrally_normalized,
    weight_norm_value,
)
from .parametrize import register_parametrization

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


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
    weight = getattr(module, name, None)
    if isinstance(weight, Tensor):  # (a missing one: register_parametrization says so)
        check_weight_norm_dim("weight_norm", weight, -1 if dim is None else dim)
    register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    module._register_load_state_dict_pre_hook(_OldWeightNormKeys(name))
    return module


class _OldWeightNormKeys:
    """The load pre-hook of torch's ``_weight_norm_compat_hook``: a state dict saved with the
    old ``nn.utils.weight_norm`` (``<name>_g``, ``<name>_v``) loads into the parametrization
    (``parametrizations.<name>.original0`` / ``original1``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, state_dict: dict, prefix: str, *_: Any) -> None:
        g_key, v_key = f"{prefix}{self.name}_g", f"{prefix}{self.name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{self.name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{self.name}.original1"] = state_dict.pop(v_key)


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
                # (a column's and a row's shapes, which an empty matrix has too)
                u = normalize(randn_like(matrix.sum(1)), dim=0, eps=self.eps)
                v = normalize(randn_like(matrix.sum(0)), dim=0, eps=self.eps)
            self.register_buffer("_u", u)
            self.register_buffer("_v", v)
            self._power(matrix, 15)

    def _power(self, matrix: Tensor, steps: int) -> None:
        u, v = power_iteration(matrix, self._u, self._v, steps, self.eps, u_first=True)
        refresh_in_place(self, {"_u": u, "_v": v})

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


_ORTHOGONAL_MAPS = ("matrix_exp", "cayley", "householder")


def _householder_product(A: Tensor, tau: Tensor) -> Tensor:  # noqa: N803 (torch's name)
    """``linalg.householder_product`` (LAPACK's ``orgqr``)."""
    from ...linalg import householder_product

    return householder_product(A, tau)


def _eye_columns(n: int, k: int) -> Any:
    return np.eye(n, k)


def _make_orthogonal(A: Tensor) -> Tensor:  # noqa: N803 (torch's name)
    """The Q factor of ``A = QR`` with ``diag(R)`` non-negative (torch's ``_make_orthogonal``,
    which takes it from ``geqrf``: the same matrix)."""
    from ...linalg import qr

    Q, R = qr(A)  # noqa: N806
    return Q * R.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


def _is_orthogonal(Q: Tensor) -> bool:  # noqa: N803 (torch's name)
    n, k = Q.shape[-2], Q.shape[-1]
    eps = 10.0 * n * float(np.finfo(Q.numpy().dtype).eps)
    return bool((Q.mT @ Q - Q.new_tensor(np.eye(k), dtype=Q.dtype)).abs().max() <= eps)


class _Orthogonal(Module):
    """torch's ``_Orthogonal``: a matrix (or batch) mapped to one with orthonormal columns
    (rows, when wide) by the matrix exponential or the Cayley map of a skew-symmetric matrix
    made from its lower triangle, or by Householder reflections; with ``use_trivialization``
    the result is ``base @ Q``, ``base`` the orthogonalized weight set by ``right_inverse``."""

    def __init__(self, weight: Tensor, orthogonal_map: str, *, use_trivialization: bool = True):
        super().__init__()
        self.shape = tuple(weight.shape)
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:  # noqa: N803 (torch's name)
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT  # noqa: N806
            n, k = k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()  # noqa: N806
            if n != k:  # embedded into a square matrix
                zeros = X.new_zeros((n, n - k)).expand(*X.shape[:-2], -1, -1)
                X = _cat([X, zeros])  # noqa: N806
            A = X - X.mT  # noqa: N806 (skew-symmetric)
            if self.orthogonal_map == "matrix_exp":
                Q = A.matrix_exp()  # noqa: N806
            else:  # the Cayley retraction (I + A/2)(I - A/2)^{-1}
                from ...linalg import solve

                eye = A.new_tensor(_eye_columns(n, n), dtype=A.dtype)
                Q = solve(eye - 0.5 * A, eye + 0.5 * A)  # noqa: N806
            if n != k:
                Q = Q[..., :k]  # noqa: N806
        else:
            A = X.tril(diagonal=-1)  # noqa: N806
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = _householder_product(A, tau)  # noqa: N806
            # the diagonal of X holds the signs (1 or -1), not differentiated
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)  # noqa: N806
        if hasattr(self, "base"):
            Q = self.base @ Q  # noqa: N806
        if transposed:
            Q = Q.mT  # noqa: N806
        return Q

    def right_inverse(self, Q: Tensor) -> Tensor:  # noqa: N803 (torch's name)
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q: Tensor) -> Tensor:  # noqa: N803 (torch's name)
        if tuple(Q.shape) != self.shape:
            raise InvalidArgumentError(
                f"orthogonal: expected a matrix or batch of matrices of shape {list(self.shape)}, "
                f"got a tensor of shape {list(Q.shape)}"
            )
        Q_init = Q  # noqa: N806
        n, k = Q.shape[-2], Q.shape[-1]
        transpose = n < k
        if transpose:
            Q = Q.mT  # noqa: N806
            n, k = k, n
        if not hasattr(self, "base"):
            if self.orthogonal_map in ("matrix_exp", "cayley"):
                # torch's NotImplementedError: registration then keeps the weight as the
                # original (parametrize's identity), an assignment is refused
                raise NotImplementedError(
                    "orthogonal: it is not possible to assign to the matrix exponential or the "
                    "Cayley parametrizations when use_trivialization=False"
                )
            # Householder: Q's own reflectors, from its QR factorization (torch's geqrf), the
            # diagonal made the signs of R's so that Q = QR with diag(R) > 0
            from ...linalg import geqrf

            A, tau = geqrf(Q)  # noqa: N806 (torch's name)
            # (LAPACK's tau is exactly zero where it used no reflection: its sign flips)
            flips = 1.0 - 2.0 * (tau == 0.0).to(A.dtype)
            signs = A.diagonal(dim1=-2, dim2=-1).sign() * flips
            diagonal = A.new_tensor(_eye_columns(n, k), dtype=A.dtype).bool()
            A = A.masked_fill(diagonal, 0.0) + diagonal.to(A.dtype) * signs.unsqueeze(-2)  # noqa: N806
            return A.mT if transpose else A
        if n == k:
            Q = _make_orthogonal(Q) if not _is_orthogonal(Q) else Q.clone()  # noqa: N806
        else:  # completed into a full n x n orthogonal matrix
            completion = randn_like(Q.new_zeros((*Q.shape[:-2], n, n - k)))
            Q = _make_orthogonal(_cat([Q, completion]))  # noqa: N806
        self.base = Q
        # -Id: householder(zeros) is then the identity, as torch's
        neg_id = Q_init.new_tensor(-_eye_columns(*Q_init.shape[-2:]), dtype=Q_init.dtype)
        return neg_id.expand(Q_init.shape).clone()


def _cat(tensors: list) -> Tensor:
    from ...tensor import cat

    return cat(tensors, -1)


def orthogonal(
    module: Any,
    name: str = "weight",
    orthogonal_map: str | None = None,
    *,
    use_trivialization: bool = True,
) -> Any:
    """torch's ``parametrizations.orthogonal``: ``module.<name>`` (a matrix or a batch of
    them) kept with orthonormal columns (or rows, when wide) by ``orthogonal_map``
    (``"matrix_exp"`` for square matrices and ``"householder"`` otherwise by default,
    ``"cayley"``); its state-dict keys are torch's (``parametrizations.weight.original`` and
    ``parametrizations.weight.0.base``).

    >>> import retrograd as rg
    >>> layer = orthogonal(rg.nn.Linear(3, 3, dtype="float64"))
    >>> bool(rg.allclose(layer.weight @ layer.weight.T, rg.eye(3, dtype="float64")))
    True
    """
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise InvalidArgumentError(
            f"orthogonal: module '{module}' has no parameter or buffer with name '{name}'"
        )
    if weight.ndim < 2:
        raise InvalidArgumentError(
            f"orthogonal: expected a matrix or batch of matrices, got a tensor of "
            f"{weight.ndim} dimensions"
        )
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _ORTHOGONAL_MAPS:
        raise InvalidArgumentError(
            'orthogonal: orthogonal_map has to be one of "matrix_exp", "cayley", '
            f'"householder", got {orthogonal_map!r}'
        )
    orth = _Orthogonal(weight, orthogonal_map, use_trivialization=use_trivialization)
    register_parametrization(module, name, orth, unsafe=True)
    return module
