"""``rg.special``: torch's ``torch.special`` namespace, every function of it, over the tensor API.

Names torch keeps elsewhere too are the library's own functions under torch.special's names
(``expit`` is ``sigmoid``, ``gammaln`` is ``lgamma``, ``psi`` is ``digamma``,
``multigammaln`` is ``mvlgamma``; ``polygamma(n, input)`` takes the order first, as torch's).
The others are ops of their own (``autodiff/ops.py``): SciPy's special functions on the NumPy
backend, ``torch.special``'s on the torch backend, with torch's derivatives:

- ``i0e``, ``i1``, ``i1e``, ``erfcx``, ``ndtr``, ``log_ndtr``, ``ndtri``, ``entr``, ``xlog1py``
  (both arguments), ``zeta`` (in ``other``, the offset ``q``), ``gammainc``/``gammaincc`` (in
  ``other``, ``x``) differentiate as torch's do; a gradient torch does not implement (``zeta``
  in its exponent, the incomplete gamma functions in their shape) raises
  ``rg.AutodiffError`` naming the op when backward reaches it, as torch raises then;
- the Bessel-type functions (``bessel_j0`` ... ``scaled_modified_bessel_k1``,
  ``spherical_bessel_j0``): torch returns them untracked (no gradient, silently); here they
  differentiate, by the family's own relations (``J0' = -J1``, ``K1' = -K0 - K1/x``...).
  ``airy_ai`` (whose derivative would need ``Ai'``, which torch has no kernel for) and the
  orthogonal polynomials raise ``rg.AutodiffError`` when a gradient reaches them, rather than
  torch's silent zero.

Integer inputs compute in the default float dtype (``rg.get_default_dtype()``), as torch's.

>>> import retrograd as rg
>>> rg.special.ndtr(rg.tensor([0.0], dtype="float64")).item()
0.5
>>> rg.special.chebyshev_polynomial_t(rg.tensor([0.5], dtype="float64"), 3).tolist()
[-1.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .backend.protocol_math import BESSEL_FUNCTIONS, POLYNOMIALS
from .errors import guard_namespace as _guard_namespace
from .tensor import Tensor
from .tensor._dispatch import TensorOp
from .tensor.creation import _no_out
from .tensor.functions import (
    digamma,
    erf,
    erfc,
    erfinv,
    exp2,
    expm1,
    i0,
    lgamma,
    lift_input,
    log1p,
    logit,
    logsumexp,
    mvlgamma,
    polygamma,
    sigmoid,
    sinc,
)
from .tensor.special import GAMMAINC, GAMMAINCC, float_kernel_operands, float_operands, xlogy

__all__ = [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "chebyshev_polynomial_t",
    "chebyshev_polynomial_u",
    "chebyshev_polynomial_v",
    "chebyshev_polynomial_w",
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "exp2",
    "expit",
    "expm1",
    "gammainc",
    "gammaincc",
    "gammaln",
    "hermite_polynomial_h",
    "hermite_polynomial_he",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "laguerre_polynomial_l",
    "legendre_polynomial_p",
    "log1p",
    "log_ndtr",
    "log_softmax",
    "logit",
    "logsumexp",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "multigammaln",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "shifted_chebyshev_polynomial_t",
    "shifted_chebyshev_polynomial_u",
    "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w",
    "sinc",
    "softmax",
    "spherical_bessel_j0",
    "xlog1py",
    "xlogy",
    "zeta",
]

# -- torch.special's names for functions the library has ------------------------------------
expit = sigmoid
gammaln = lgamma
psi = digamma


def multigammaln(input: Tensor, p: int, *, out: Any = None) -> Tensor:  # noqa: A002 (torch's name)
    """The log of the multivariate gamma function of dimension ``p`` (``Tensor.mvlgamma``)."""
    _no_out("special.multigammaln", out)
    return mvlgamma(input, p)


def softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``softmax`` along ``dim``, the input cast to ``dtype`` first when given (torch's)."""
    x = lift_input("special.softmax", input)
    return (x if dtype is None else x.to(dtype)).softmax(dim)


def log_softmax(input: Tensor, dim: int, *, dtype: Any = None) -> Tensor:  # noqa: A002
    """``log_softmax`` along ``dim``, the input cast to ``dtype`` first when given."""
    x = lift_input("special.log_softmax", input)
    return (x if dtype is None else x.to(dtype)).log_softmax(dim)


def round(input: Tensor, *, decimals: int = 0, out: Any = None) -> Tensor:  # noqa: A001, A002
    """Round half to even, to ``decimals`` decimal places as torch's: ``round(x * 10^d) /
    10^d``, or ``round(x / 10^-d) * 10^-d`` for negative ``decimals`` (gradient 0)."""
    _no_out("special.round", out)
    return lift_input("special.round", input).round(decimals=decimals)


# -- ops of their own ----------------------------------------------------------------------------
def _unary(name: str, kernel: str | None = None, params: tuple = ()) -> Callable[..., Tensor]:
    op = TensorOp(name, kernel, floats=True)

    def function(input: Tensor, *, out: Any = None) -> Tensor:  # noqa: A002 (torch's name)
        _no_out(f"special.{name}", out)
        x = lift_input(f"special.{name}", input)
        return x._apply(op, (x,), params)

    function.__name__ = function.__qualname__ = name
    return function


def _binary(
    name: str, op: TensorOp, params: tuple = (), operands: Callable = float_operands
) -> Callable[..., Tensor]:
    def function(input: Any, other: Any, *, out: Any = None) -> Tensor:  # noqa: A002
        _no_out(f"special.{name}", out)
        x, y = operands(name, input, other)
        return x._apply(op, (x, y), params)

    function.__name__ = function.__qualname__ = name
    return function


def _bessel(name: str) -> Callable[..., Tensor]:
    return _unary(name, "bessel_function", (name,))


def _polynomial(name: str) -> Callable[..., Tensor]:
    op = TensorOp(name, "orthogonal_polynomial")

    # torch spells these (x, n), not (input, other): ``chebyshev_polynomial_t(x, n=3)``
    def function(x: Any, n: Any, *, out: Any = None) -> Tensor:
        _no_out(f"special.{name}", out)
        values, degree = float_operands(name, x, n)
        return values._apply(op, (values, degree), (name,))

    function.__name__ = function.__qualname__ = name
    return function


i0e = _unary("i0e")
i1 = _unary("i1")
i1e = _unary("i1e")
erfcx = _unary("erfcx")
ndtr = _unary("ndtr")
log_ndtr = _unary("log_ndtr")
ndtri = _unary("ndtri")
entr = _unary("entr")
xlog1py = _binary("xlog1py", TensorOp("xlog1py"))
zeta = _binary("zeta", TensorOp("zeta"))
# (torch has float kernels only: two integer operands are refused)
gammainc = _binary("gammainc", GAMMAINC, operands=float_kernel_operands)
gammaincc = _binary("gammaincc", GAMMAINCC, operands=float_kernel_operands)

airy_ai = _bessel("airy_ai")
bessel_j0 = _bessel("bessel_j0")
bessel_j1 = _bessel("bessel_j1")
bessel_y0 = _bessel("bessel_y0")
bessel_y1 = _bessel("bessel_y1")
modified_bessel_i0 = _bessel("modified_bessel_i0")
modified_bessel_i1 = _bessel("modified_bessel_i1")
modified_bessel_k0 = _bessel("modified_bessel_k0")
modified_bessel_k1 = _bessel("modified_bessel_k1")
scaled_modified_bessel_k0 = _bessel("scaled_modified_bessel_k0")
scaled_modified_bessel_k1 = _bessel("scaled_modified_bessel_k1")
spherical_bessel_j0 = _bessel("spherical_bessel_j0")
chebyshev_polynomial_t = _polynomial("chebyshev_polynomial_t")
chebyshev_polynomial_u = _polynomial("chebyshev_polynomial_u")
chebyshev_polynomial_v = _polynomial("chebyshev_polynomial_v")
chebyshev_polynomial_w = _polynomial("chebyshev_polynomial_w")
shifted_chebyshev_polynomial_t = _polynomial("shifted_chebyshev_polynomial_t")
shifted_chebyshev_polynomial_u = _polynomial("shifted_chebyshev_polynomial_u")
shifted_chebyshev_polynomial_v = _polynomial("shifted_chebyshev_polynomial_v")
shifted_chebyshev_polynomial_w = _polynomial("shifted_chebyshev_polynomial_w")
hermite_polynomial_h = _polynomial("hermite_polynomial_h")
hermite_polynomial_he = _polynomial("hermite_polynomial_he")
laguerre_polynomial_l = _polynomial("laguerre_polynomial_l")
legendre_polynomial_p = _polynomial("legendre_polynomial_p")

_DOCS = {
    "i0e": "``exp(-|x|) i0(x)``; gradient ``i1e(x) - sign(x) i0e(x)``.",
    "i1": "The modified Bessel function of the first kind, order 1; gradient ``i0 - i1/x``.",
    "i1e": "``exp(-|x|) i1(x)``.",
    "erfcx": "``exp(x^2) erfc(x)``, finite where ``erfc`` underflows.",
    "ndtr": "The standard normal CDF.",
    "log_ndtr": "``log ndtr(x)``, accurate in the lower tail.",
    "ndtri": "The standard normal quantile, ``ndtr``'s inverse.",
    "entr": "``-x log x`` (0 at 0, ``-inf`` below).",
    "xlog1py": "``input * log1p(other)``, 0 where ``input`` is 0.",
    "zeta": "The Hurwitz zeta function ``sum_k (k + other)^-input`` (gradient in ``other``).",
    "gammainc": "The regularized lower incomplete gamma function (gradient in ``other``).",
    "gammaincc": "The regularized upper incomplete gamma function (gradient in ``other``).",
}
for _name, _doc in _DOCS.items():
    globals()[_name].__doc__ = f"torch.special.{_name}: {_doc}"
for _name in BESSEL_FUNCTIONS:
    globals()[_name].__doc__ = f"torch.special.{_name}, elementwise (see the module docstring)."
for _name in POLYNOMIALS:
    globals()[_name].__doc__ = (
        f"torch.special.{_name}(input, n): the polynomial of degree ``n`` (truncated to an "
        "integer; 0 where negative) at ``input``; a gradient raises ``rg.AutodiffError`` (torch's "
        "output is untracked)."
    )
del _name, _doc

# Arguments no check foresaw get an error of the hierarchy naming the function, as the rest of
# the public surface (errors.guard); an alias of a tensor function is guarded under its own name.
_guard_namespace(globals(), __all__)
