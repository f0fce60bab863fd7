"""Activation modules, with PyTorch's constructor arguments: ``ReLU``, ``GELU``, ``SiLU``,
``Tanh``, ``Sigmoid``, ``Softmax``, ``LeakyReLU``, ``PReLU``, ``ELU``... (``inplace=True`` is
accepted and nothing is modified in place: API.md section 8). ``MultiheadAttention`` is
importable from here too, torch's path for it (its home is :mod:`.attention`)."""

from __future__ import annotations

import numbers
import warnings
from typing import Any

from ...errors import DTypeError, InvalidArgumentError, ShapeError, shape_text
from ...tensor import Tensor, full
from .. import functional as F  # noqa: N812  (PyTorch's idiom)
from ..parameter import Parameter
from .attention import MultiheadAttention
from .module import Module, _refill

__all__ = [
    "CELU",
    "ELU",
    "GELU",
    "GLU",
    "SELU",
    "Hardshrink",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "LeakyReLU",
    "LogSigmoid",
    "LogSoftmax",
    "Mish",
    "MultiheadAttention",
    "PReLU",
    "RReLU",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softmax2d",
    "Softmin",
    "Softplus",
    "Softshrink",
    "Softsign",
    "Tanh",
    "Tanhshrink",
    "Threshold",
]


def _inplace_repr(module: Module, text: str = "") -> str:
    """``text`` with torch's ``inplace=True`` after it where the module was made so (a module
    printed, ``print(model)``, reads as torch's)."""
    if not getattr(module, "inplace", False):
        return text
    return f"{text}, inplace=True" if text else "inplace=True"


class ReLU(Module):
    """``max(x, 0)`` elementwise."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input)

    def extra_repr(self) -> str:
        return _inplace_repr(self)


class GELU(Module):
    """``x * Phi(x)`` (``approximate="none"``, exact) or PyTorch's tanh approximation
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (``approximate="tanh"``).

    >>> round(GELU("tanh")(rg.tensor([1.0])).item(), 6)
    0.841192
    """

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise InvalidArgumentError(
                f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}"
            )
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """``x * sigmoid(x)`` elementwise."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.silu(input)

    def extra_repr(self) -> str:
        return _inplace_repr(self)


class Tanh(Module):
    """``tanh(x)`` elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        return F.tanh(input)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        return F.sigmoid(input)


class _Elementwise(Module):
    """An activation with no parameters: ``forward`` is :attr:`_fn` with the stored keyword
    arguments (``inplace`` accepted, see the module docstring)."""

    _fn: Any = None
    _fields: tuple[str, ...] = ()
    _prints_inplace = False  # torch's Hardswish and Hardsigmoid keep inplace out of the repr

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, *(getattr(self, f) for f in self._fields))

    def extra_repr(self) -> str:
        text = ", ".join(f"{f}={getattr(self, f)}" for f in self._fields)
        return _inplace_repr(self, text) if self._prints_inplace else text


class _OverDim(Module):
    """The softmax family's ``dim`` (``None``: torch's implicit choice, deprecated there) and
    repr; each member subclasses it alone, as in torch (a ``LogSoftmax`` is no ``Softmax``)."""

    _fn: Any = None

    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return type(self)._fn(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax(_OverDim):
    """``F.softmax(x, dim)``.

    >>> Softmax(dim=1)(rg.zeros((1, 4))).tolist()
    [[0.25, 0.25, 0.25, 0.25]]
    """

    _fn = staticmethod(F.softmax)


class LogSoftmax(_OverDim):
    _fn = staticmethod(F.log_softmax)


class Softmin(_OverDim):
    _fn = staticmethod(F.softmin)


class Softmax2d(Module):
    """Softmax over the channels of ``[N, C, H, W]`` (or ``[C, H, W]``)."""

    def forward(self, input: Tensor) -> Tensor:
        if input.ndim not in (3, 4):  # dim -3 of another rank is not the channels
            raise ShapeError(
                f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D of shape "
                f"{shape_text(input.shape)}"
            )
        return F.softmax(input, -3)


class LeakyReLU(_Elementwise):
    """``x`` where positive, ``negative_slope * x`` elsewhere."""

    _prints_inplace = True
    _fn = staticmethod(F.leaky_relu)
    _fields = ("negative_slope",)

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace


class Hardtanh(_Elementwise):
    _prints_inplace = True
    _fn = staticmethod(F.hardtanh)
    _fields = ("min_val", "max_val")

    def __init__(
        self,
        min_val: float = -1.0,
        max_val: float = 1.0,
        inplace: bool = False,
        min_value: float | None = None,
        max_value: float | None = None,
    ):
        super().__init__()
        # torch's deprecated spellings, still accepted there with a FutureWarning
        if min_value is not None:
            warnings.warn(
                "keyword argument `min_value` is deprecated and renamed to `min_val`",
                FutureWarning,
                stacklevel=2,
            )
            min_val = min_value
        if max_value is not None:
            warnings.warn(
                "keyword argument `max_value` is deprecated and renamed to `max_val`",
                FutureWarning,
                stacklevel=2,
            )
            max_val = max_value
        if max_val <= min_val:  # torch's constructor refuses it (a NaN passes, as there)
            raise InvalidArgumentError(
                f"Hardtanh: max_val ({max_val}) must be greater than min_val ({min_val})"
            )
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace


class ReLU6(Hardtanh):
    """``Hardtanh(0, 6)``, as torch's (its subclass: ``min_val`` 0, ``max_val`` 6)."""

    _fn = staticmethod(F.relu6)
    _fields = ()

    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)


class _InplaceOnly(_Elementwise):
    """An activation whose only argument is ``inplace`` (accepted; see the module docstring)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace


class Hardswish(_InplaceOnly):
    _fn = staticmethod(F.hardswish)


class Hardsigmoid(_InplaceOnly):
    _fn = staticmethod(F.hardsigmoid)


class _WithAlpha(_Elementwise):
    """``alpha`` and ``inplace``: ELU's and CELU's arguments (each its own class, as torch's)."""

    _prints_inplace = True
    _fields = ("alpha",)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace


class ELU(_WithAlpha):
    _fn = staticmethod(F.elu)


class CELU(_WithAlpha):
    _fn = staticmethod(F.celu)


class SELU(_InplaceOnly):
    _prints_inplace = True
    _fn = staticmethod(F.selu)


class Mish(_InplaceOnly):
    _prints_inplace = True
    _fn = staticmethod(F.mish)


class Softplus(_Elementwise):
    """``log(1 + exp(beta x)) / beta``; above ``threshold`` (of ``beta x``) the identity."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softsign(_Elementwise):
    _fn = staticmethod(F.softsign)


class Tanhshrink(_Elementwise):
    _fn = staticmethod(F.tanhshrink)


class LogSigmoid(_Elementwise):
    _fn = staticmethod(F.logsigmoid)


class Threshold(_Elementwise):
    _prints_inplace = True
    _fn = staticmethod(F.threshold)
    _fields = ("threshold", "value")

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace


class GLU(_Elementwise):
    _fn = staticmethod(F.glu)
    _fields = ("dim",)

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim


class PReLU(Module):
    """``x`` where positive, ``weight * x`` elsewhere; ``weight`` (``num_parameters``
    values, ``init`` each) is learnt.

    >>> PReLU()(rg.tensor([-2.0, 3.0])).tolist()
    [-0.5, 3.0]
    """

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None,
                 dtype: Any = None):  # fmt: skip
        super().__init__()
        self.num_parameters = num_parameters
        if not isinstance(init, numbers.Real | Tensor):  # (torch's fill_ refuses it)
            raise DTypeError(f"PReLU: init must be a float, got {init!r}")
        self.init = init
        self.weight = Parameter(full((num_parameters,), float(init), dtype=dtype, device=device))

    def reset_parameters(self) -> None:
        """The slopes set to ``init`` again, in place."""
        _refill(self.weight, float(self.init))

    def forward(self, input: Tensor) -> Tensor:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class _Shrink(_Elementwise):
    """``lambd``: the shrinks' argument (each its own class, as torch's)."""

    _fields = ("lambd",)

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def extra_repr(self) -> str:  # torch's: the value alone
        return f"{self.lambd}"


class Hardshrink(_Shrink):
    """``F.hardshrink(x, lambd)``: 0 on ``[-lambd, lambd]``, ``x`` elsewhere."""

    _fn = staticmethod(F.hardshrink)


class Softshrink(_Shrink):
    """``F.softshrink(x, lambd)``: ``x`` moved towards 0 by ``lambd``, 0 in between."""

    _fn = staticmethod(F.softshrink)


class RReLU(Module):
    """Randomized leaky ReLU: random slopes in U(``lower``, ``upper``) in training mode,
    their mean in eval mode (``F.rrelu``).

    >>> RReLU().eval()(rg.tensor([-24.0, 1.0])).tolist()
    [-5.5, 1.0]
    """

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False):
        super().__init__()
        self.lower, self.upper, self.inplace = lower, upper, inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.rrelu(input, self.lower, self.upper, self.training)

    def extra_repr(self) -> str:
        return _inplace_repr(self, f"lower={self.lower}, upper={self.upper}")
