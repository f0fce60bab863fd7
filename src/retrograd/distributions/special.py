"""Special functions the distributions need as differentiable tensor ops: ``lgamma``,
``digamma``, ``polygamma(n, x)`` (SciPy's, on the host), and the reparameterized standard
gamma draw.

Each is one op declaration (:class:`~retrograd.autodiff.ops.Op`) whose forward calls
``scipy.special`` on the values and whose backward rule is the next polygamma, itself an op,
so gradients of any order follow. The values go through the host (a round trip per call on an
accelerator); they are SciPy's, correct to a few ulps.

The gamma draw is inverse-CDF sampling, ``x = P^-1(alpha, u)`` with ``u`` uniform from the
stream ``rg.seed`` seeds, and its gradient is the implicit reparameterization gradient
``dx/dalpha = -(dP/dalpha)(alpha, x) / p(x; alpha)`` (Figurnov et al., 2018; torch's
``_standard_gamma_grad`` approximates the same quantity), with ``dP/dalpha`` summed from the
series of the regularized incomplete gamma function.

>>> import retrograd as rg
>>> round(lgamma(rg.tensor([4.0], dtype="float64")).item(), 12)  # log(3!)
1.791759469228
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..autodiff.ops import Op
from ..backend.lazy import scipy_special as special
from ..tensor import Tensor, rand

__all__ = ["digamma", "gammainc", "lgamma", "polygamma", "standard_gamma"]


def _host(fn: Any) -> Any:
    """A forward ``(B, x, *params)`` computing ``fn(values, *params)`` on the host."""

    def forward(B: Any, x: Any, *params: Any) -> Any:  # noqa: N803 (the rules' name)
        values = np.asarray(B.to_numpy(x))
        out = np.asarray(fn(values, *params), dtype=values.dtype)
        return B.from_data(out, B.dtype(x), B.device(x))

    return forward


def _run(B: Any, op: Op, x: Any, *params: Any) -> Any:  # noqa: N803
    """``op`` on a primitive of ``B``: recorded on an autodiff backend (second order)."""
    if getattr(B, "is_autodiff", False):
        return B.apply(op, x, params=params)
    return op.run_forward(B, [x], params)


def _polygamma_vjp(B: Any, g: Any, x: Any, n: int) -> Any:  # noqa: N803
    return B.mul(g, _run(B, _POLYGAMMA, x, n + 1))


def _digamma_vjp(B: Any, g: Any, x: Any) -> Any:  # noqa: N803
    return B.mul(g, _run(B, _POLYGAMMA, x, 1))


def _lgamma_vjp(B: Any, g: Any, x: Any) -> Any:  # noqa: N803
    return B.mul(g, _run(B, _DIGAMMA, x))


_POLYGAMMA = Op(
    "distributions_polygamma",
    ("x",),
    ("n",),
    (_polygamma_vjp,),
    memory_bound=True,
    forward=_host(lambda x, n: special.polygamma(n, x)),
)
_DIGAMMA = Op(
    "distributions_digamma",
    ("x",),
    (),
    (_digamma_vjp,),
    memory_bound=True,
    forward=_host(lambda x: special.digamma(x)),
)
_LGAMMA = Op(
    "distributions_lgamma",
    ("x",),
    (),
    (_lgamma_vjp,),
    memory_bound=True,
    forward=_host(lambda x: special.gammaln(x)),
)


def _call(op: Op, x: Tensor, *params: Any) -> Tensor:
    x = x if x.is_float() else x.double()
    return Tensor(_run(x._backend, op, x._prim, *params), x._backend, x._device)


def lgamma(x: Tensor) -> Tensor:
    """``log |Gamma(x)|``, elementwise (torch's ``torch.lgamma``)."""
    return _call(_LGAMMA, x)


def digamma(x: Tensor) -> Tensor:
    """``d/dx log Gamma(x)`` (torch's ``torch.digamma``)."""
    return _call(_DIGAMMA, x)


def polygamma(n: int, x: Tensor) -> Tensor:
    """The ``n``-th derivative of ``digamma`` (torch's ``torch.polygamma``)."""
    return _call(_POLYGAMMA, x, int(n)) if n else digamma(x)


def gamma_cdf_alpha_derivative(alpha: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``d/dalpha P(alpha, x)`` of the regularized lower incomplete gamma function, from
    ``P = sum_n exp((alpha + n) log x - x - lgamma(alpha + n + 1))`` differentiated term by
    term (each term times ``log x - digamma(alpha + n + 1)``); the terms are summed until they
    fall below ``1e-17`` of the total (at most ``x + 12 sqrt(x) + 60`` of them)."""
    alpha, x = np.broadcast_arrays(np.asarray(alpha, np.float64), np.asarray(x, np.float64))
    x = np.maximum(x, np.finfo(np.float64).tiny)
    log_x = np.log(x)
    total = np.zeros_like(x)
    terms = int(np.max(x + 12 * np.sqrt(x) + 60)) if x.size else 0
    for n in range(terms):
        a = alpha + n + 1
        weight = np.exp((alpha + n) * log_x - x - special.gammaln(a))
        total += weight * (log_x - special.digamma(a))
    return total


def _gammainc_forward(B: Any, a: Any, x: Any) -> Any:  # noqa: N803
    values = np.asarray(B.to_numpy(x))
    out = special.gammainc(np.asarray(B.to_numpy(a), np.float64), values)
    return B.from_data(out.astype(values.dtype), B.dtype(x), B.device(x))


def _host_gradient(B: Any, g: Any, fn: Any, a: Any, x: Any) -> Any:  # noqa: N803
    """``g * fn(a, x)``, ``fn`` computed on the host values (a first-order gradient)."""
    inner = getattr(B, "inner", B)
    values = [np.asarray(_values(B, t), np.float64) for t in (a, x)]
    local = np.asarray(fn(*values), dtype=np.asarray(_values(B, x)).dtype)
    return B.mul(g, _lift(B, inner.from_data(local, B.dtype(x), B.device(x))))


def _values(B: Any, t: Any) -> Any:  # noqa: N803
    return B.to_numpy(t)


def _lift(B: Any, prim: Any) -> Any:  # noqa: N803
    return B.wrap(prim) if getattr(B, "is_autodiff", False) else prim


def _gamma_density(a: np.ndarray, x: np.ndarray) -> np.ndarray:
    safe = np.maximum(x, np.finfo(np.float64).tiny)
    return np.exp((a - 1) * np.log(safe) - x - special.gammaln(a)) * (x > 0)


_GAMMAINC = Op(
    "distributions_gammainc",
    ("a", "x"),
    (),
    (
        lambda B, g, a, x: _host_gradient(B, g, gamma_cdf_alpha_derivative, a, x),  # noqa: N803
        lambda B, g, a, x: _host_gradient(B, g, _gamma_density, a, x),  # noqa: N803
    ),
    memory_bound=True,
    forward=_gammainc_forward,
)


def gammainc(a: Tensor, x: Tensor) -> Tensor:
    """The regularized lower incomplete gamma function ``P(a, x)`` (torch's
    ``torch.special.gammainc``), differentiable in ``x`` and, unlike torch's, in ``a``
    (first order: the gradients are computed on the host)."""
    import numpy as _np

    shape = tuple(_np.broadcast_shapes(tuple(a.shape), tuple(x.shape)))
    a, x = a.expand(shape), x.expand(shape)
    backend = x._backend
    prim = (
        backend.apply(_GAMMAINC, a._prim, x._prim)
        if backend.is_autodiff
        else (_gammainc_forward(backend, a._prim, x._prim))
    )
    return Tensor(prim, backend, x._device)


def _gamma_sample_grad(alpha: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``dx/dalpha`` at fixed ``u = P(alpha, x)``."""
    log_density = (alpha - 1) * np.log(x) - x - special.gammaln(alpha)
    return -gamma_cdf_alpha_derivative(alpha, x) / np.exp(log_density)


def _sample_forward(B: Any, alpha: Any, draws: np.ndarray) -> Any:  # noqa: N803
    return B.from_data(draws.astype(B.to_numpy(alpha).dtype), B.dtype(alpha), B.device(alpha))


def _sample_vjp(B: Any, g: Any, alpha: Any, draws: np.ndarray) -> Any:  # noqa: N803
    values = np.asarray(B.to_numpy(alpha), np.float64)
    grad = _gamma_sample_grad(np.broadcast_to(values, draws.shape), draws)
    dtype = B.dtype(g)
    return B.mul(g, B.from_data(grad.astype(draws.dtype), dtype, B.device(g)))


_STANDARD_GAMMA = Op(
    "distributions_standard_gamma",
    ("alpha",),
    ("draws",),
    (_sample_vjp,),
    memory_bound=True,
    forward=_sample_forward,
)


def standard_gamma(alpha: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Draws of ``Gamma(alpha, 1)`` of ``shape`` (``alpha`` broadcast to it), differentiable in
    ``alpha`` by implicit reparameterization."""
    alpha = alpha.expand(shape) if tuple(alpha.shape) != tuple(shape) else alpha
    u = rand(shape, dtype="float64", device=alpha.device).numpy()
    a = np.asarray(alpha.detach().numpy(), np.float64)
    tiny = np.finfo(np.float64).tiny
    draws = np.maximum(special.gammaincinv(a, u), tiny)
    if alpha.dtype != "float64":
        draws = np.maximum(draws, np.finfo(np.float32).tiny)
    backend = alpha._backend
    return Tensor(
        _run(backend, _STANDARD_GAMMA, alpha._prim, draws), backend, alpha._device
    ).reshape(shape)


def _checked_concentration(op: str, input: Any) -> None:  # noqa: A002 (torch's name)
    from ..errors import DTypeError

    if not isinstance(input, Tensor) or not input.is_floating_point():
        raise DTypeError(
            f"{op}: expected a floating point tensor of concentrations, got "
            f"{getattr(input, 'dtype', type(input).__name__)}"
        )


def torch_standard_gamma(input: Tensor, generator: Any = None) -> Tensor:  # noqa: A002
    """``torch._standard_gamma``: one ``Gamma(alpha, 1)`` draw per element of ``input``, in its
    dtype, differentiable in ``input`` (private in torch, called by model code)."""
    _checked_concentration("_standard_gamma", input)
    return standard_gamma(input, tuple(input.shape))


def torch_sample_dirichlet(input: Tensor, generator: Any = None) -> Tensor:  # noqa: A002
    """``torch._sample_dirichlet``: one Dirichlet draw per row of the last dimension of the
    concentrations ``input`` (torchvision's mixup and cutmix draw their ratio so)."""
    _checked_concentration("_sample_dirichlet", input)
    draws = standard_gamma(input, tuple(input.shape))
    return draws / draws.sum(-1, keepdim=True)


def log_beta(a: Tensor, b: Tensor) -> Tensor:
    """``log B(a, b) = lgamma(a) + lgamma(b) - lgamma(a + b)``."""
    return lgamma(a) + lgamma(b) - lgamma(a + b)


HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)
