"""Parameter initialization, as ``torch.nn.init``: each ``*_`` function replaces a tensor's
values in place (a ``Parameter`` stays the same object, so ties hold) and returns it.

Random values come from the generator :func:`retrograd.seed` seeds. The formulas (gains,
fans, bounds) are PyTorch's, so an initialization written for PyTorch ports line for line::

    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    model.apply(_init_weights)

>>> import retrograd as rg
>>> from retrograd import nn
>>> w = nn.Parameter(rg.zeros((2, 3)))
>>> nn.init.ones_(w) is w, w.tolist()
(True, [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from ..backend.protocol import on_uniform_grid
from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..errors import guard_namespace as _guard_namespace
from ..tensor import Tensor, random, tensor
from ..tensor._dispatch import check_float_range, checked_generator
from ..tensor.inplace import assign
from .modules.state_value import StateValue

__all__ = [
    "calculate_gain",
    "constant",
    "constant_",
    "dirac",
    "dirac_",
    "eye",
    "eye_",
    "kaiming_normal",
    "kaiming_normal_",
    "kaiming_uniform",
    "kaiming_uniform_",
    "normal",
    "normal_",
    "ones_",
    "orthogonal",
    "orthogonal_",
    "sparse",
    "sparse_",
    "trunc_normal_",
    "uniform",
    "uniform_",
    "xavier_normal",
    "xavier_normal_",
    "xavier_uniform",
    "xavier_uniform_",
    "zeros_",
]


def _draw(t: Tensor, distribution: str, generator: Any = None, op: str = "init") -> np.ndarray:
    """Host float64 draws of ``t``'s shape from ``generator`` (an ``rg.Generator``, torch's
    ``generator=``) or, without one, from the seeded stream. An int or bool tensor is
    refused (torch's "normal_kernel_cpu not implemented for 'Long'"): a cast would truncate
    the draws."""
    if not t.is_floating_point():
        raise DTypeError(
            f"{op}: random values need a floating-point tensor, got {t.dtype} of shape "
            f"{list(t.shape)}"
        )
    if checked_generator(op, generator) is not None:
        return np.asarray(generator.draws(t.shape, distribution, "float64"), dtype=np.float64)
    backend, device = _placement(t)
    return random(t.shape, distribution, dtype="float64", backend=backend, device=device).numpy()


def _placement(t: Tensor | StateValue) -> tuple[Any, Any]:
    """The backend and device of ``t``, or of the tensor a state-dict value was copied from
    (the defaults for a copy of none)."""
    if isinstance(t, StateValue):
        t = t._source
        if t is None:
            return None, None
    return t.backend, t.device


def _fill(t: Tensor | StateValue, values: Any, op: str) -> Tensor | StateValue:
    """``t``'s values replaced in place; a state-dict value (``init.kaiming_normal_(
    model.state_dict()[key])``, as CBAM's ResNet initializes) writes through to the module's
    tensor, as torch's state-dict tensors share its storage."""
    if isinstance(t, StateValue):
        return t.copy_(np.asarray(values, dtype=t.dtype))
    # the backend rounds to t's dtype (NumPy has no bfloat16 to do it on the host)
    fresh = tensor(np.asarray(values), dtype=t.dtype, backend=t.backend, device=t.device)
    return assign(t, fresh, op)


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator: Any = None) -> Tensor:
    """Values from U(a, b)."""
    if not a <= b:  # torch's check (a NaN bound too)
        raise InvalidArgumentError(f"uniform_: expects a <= b, got a={a!r}, b={b!r}")
    draws = on_uniform_grid(_draw(tensor, "uniform", generator, "uniform_"), tensor.dtype)
    return _fill(tensor, a + (b - a) * draws, "uniform_")


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator: Any = None) -> Tensor:
    """Values from N(mean, std^2)."""
    if not std >= 0.0:  # torch's check (a NaN std too)
        raise InvalidArgumentError(f"normal_: expects std >= 0, got {std!r}")
    return _fill(tensor, mean + std * _draw(tensor, "normal", generator, "normal_"), "normal_")


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator: Any = None,
) -> Tensor:
    """Values from N(mean, std^2) truncated to ``[a, b]`` (absolute bounds, as PyTorch's):
    draws outside are drawn again."""
    if not a < b:
        raise InvalidArgumentError(f"trunc_normal_: need a < b, got a={a}, b={b}")
    values = mean + std * _draw(tensor, "normal", generator, "trunc_normal_")
    for _ in range(1000):
        outside = (values < a) | (values > b)
        if not outside.any():
            break
        values = np.where(
            outside, mean + std * _draw(tensor, "normal", generator, "trunc_normal_"), values
        )
    else:
        raise InvalidArgumentError(
            f"trunc_normal_: [a, b] = [{a}, {b}] is too unlikely under N({mean}, {std}^2)"
        )
    return _fill(tensor, values, "trunc_normal_")


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Every value ``val`` (a finite one within the tensor's dtype, as torch's)."""
    check_float_range("constant_", val, tensor.dtype)
    return _fill(tensor, np.full(tensor.shape, float(val)), "constant_")


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float | int:
    """PyTorch's recommended gain for ``nonlinearity`` (``"relu"``: sqrt(2), ``"tanh"``: 5/3,
    ``"leaky_relu"``: sqrt(2 / (1 + slope^2)), linear and convolutions: 1, ...)."""
    linear = {
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "sigmoid",
    }
    if nonlinearity in linear:
        return 1  # torch's int
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is not None and (
            isinstance(param, bool) or not isinstance(param, int | float)
        ):  # torch's check: a bool, a string or a tensor is no slope
            raise InvalidArgumentError(
                f"calculate_gain: negative_slope {param!r} of leaky_relu is not a valid number"
            )
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise InvalidArgumentError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _fans(t: Tensor, op: str) -> tuple[int, int]:
    """PyTorch's fan in and fan out: dims 1 and 0 times the receptive field (the rest)."""
    if t.ndim < 2:
        raise ShapeError(
            f"{op}: fan in and fan out need a tensor of at least 2 dimensions, got shape "
            f"{list(t.shape)}"
        )
    receptive = math.prod(t.shape[2:])
    return t.shape[1] * receptive, t.shape[0] * receptive


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """torch's private helper, which layers written after ``nn.Linear`` call in their
    ``reset_parameters`` (``fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)``)."""
    return _fans(tensor, "_calculate_fan_in_and_fan_out")


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio)."""
    fan_in, fan_out = _fans(tensor, "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return _fill(
        tensor,
        bound * (2.0 * _draw(tensor, "uniform", generator, "xavier_uniform_") - 1.0),
        "xavier_uniform_",
    )


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(tensor, "xavier_normal_")
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return _fill(
        tensor, std * _draw(tensor, "normal", generator, "xavier_normal_"), "xavier_normal_"
    )


def _no_op_if_empty(t: Tensor) -> bool:
    """torch's shortcut: a kaiming initialization of a zero-element tensor (of any number of
    dimensions, fans or not) warns and changes nothing."""
    if 0 in t.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", UserWarning, stacklevel=3)
        return True
    return False


def _kaiming_std(t: Tensor, a: float, mode: str, nonlinearity: str, op: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise InvalidArgumentError(f"{op}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(t, op)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Any = None,
) -> Tensor:
    """U(-b, b), b = sqrt(3) * gain / sqrt(fan) (He et al.); PyTorch's defaults."""
    if _no_op_if_empty(tensor):
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return _fill(
        tensor,
        bound * (2.0 * _draw(tensor, "uniform", generator, "kaiming_uniform_") - 1.0),
        "kaiming_uniform_",
    )


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator: Any = None,
) -> Tensor:
    """N(0, std^2), std = gain / sqrt(fan) (He et al.); PyTorch's defaults."""
    if _no_op_if_empty(tensor):
        return tensor
    std = _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_")
    return _fill(
        tensor, std * _draw(tensor, "normal", generator, "kaiming_normal_"), "kaiming_normal_"
    )


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator: Any = None) -> Tensor:
    """A (semi-)orthogonal matrix times ``gain``, from the QR decomposition of a normal draw
    (torch's construction: the sign of ``R``'s diagonal fixed, the tensor's trailing dims
    flattened into columns, the transpose taken when there are more columns than rows)."""
    if tensor.ndim < 2:
        raise ShapeError("orthogonal_: only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _draw(tensor, "normal", generator, "orthogonal_").reshape(rows, cols)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).reshape(tensor.shape), "orthogonal_")


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix (a 2-d tensor)."""
    if tensor.ndim != 2:
        raise ShapeError("eye_: only 2-d tensors are supported")
    return _fill(tensor, np.eye(*tensor.shape), "eye_")


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """The Dirac delta of a convolution weight ``[out, in, *k]``: each output channel (per
    group) passes its input channel through unchanged."""
    if tensor.ndim not in (3, 4, 5):
        raise ShapeError("dirac_: only 3-, 4- and 5-d tensors are supported")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise InvalidArgumentError(f"dirac_: groups must be a positive int, got {groups!r}")
    if tensor.shape[0] % groups:
        raise ShapeError(
            f"dirac_: dim 0 of shape {list(tensor.shape)} must be divisible by groups={groups}"
        )
    out_per_group = tensor.shape[0] // groups
    values = np.zeros(tensor.shape)
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, tensor.shape[1])):
            values[(g * out_per_group + d, d, *centre)] = 1.0
    return _fill(tensor, values, "dirac_")


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator: Any = None) -> Tensor:
    """A sparse 2-d matrix (Martens, 2010; torch's ``sparse_``): values from N(0, std), then
    ``ceil(sparsity * rows)`` entries of each column, at random rows, set to zero."""
    if tensor.ndim != 2:
        raise ShapeError(
            f"sparse_: only tensors with 2 dimensions are supported, got {list(tensor.shape)}"
        )
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    values = _draw(tensor, "normal", generator, "sparse_") * std
    # a random permutation of the rows for each column: the order of uniform draws
    order = np.argsort(_draw(tensor, "uniform", generator, "sparse_"), axis=0, kind="stable")
    for col in range(cols):
        values[order[:num_zeros, col], col] = 0.0
    return _fill(tensor, values, "sparse_")


# torch's deprecated spellings without the trailing underscore
def uniform(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return uniform_(tensor, a, b)


def normal(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return normal_(tensor, mean, std)


def constant(tensor: Tensor, val: float) -> Tensor:
    return constant_(tensor, val)


def xavier_uniform(tensor: Tensor, gain: float = 1.0) -> Tensor:
    return xavier_uniform_(tensor, gain)


def xavier_normal(tensor: Tensor, gain: float = 1.0) -> Tensor:
    return xavier_normal_(tensor, gain)


def kaiming_uniform(tensor: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return kaiming_uniform_(tensor, *args, **kwargs)


def kaiming_normal(tensor: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    return kaiming_normal_(tensor, *args, **kwargs)


def orthogonal(tensor: Tensor, gain: float = 1.0) -> Tensor:
    return orthogonal_(tensor, gain)


def eye(tensor: Tensor) -> Tensor:
    return eye_(tensor)


def dirac(tensor: Tensor, groups: int = 1) -> Tensor:
    return dirac_(tensor, groups)


def sparse(tensor: Tensor, sparsity: float, std: float = 0.01) -> Tensor:
    return sparse_(tensor, sparsity, std)


# Arguments no check foresaw (a str or None for a tensor, a str for a size) get an error of
# the hierarchy naming the function (errors.guard), as rg.* and nn.functional's do.
_guard_namespace(globals(), __all__)


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    """torch's private helper: the fan in or out (``mode``) that kaiming's bounds divide by."""
    if not isinstance(mode, str) or mode.lower() not in ("fan_in", "fan_out"):
        raise InvalidArgumentError(
            f"_calculate_correct_fan: mode {mode!r} not supported, please use one of "
            "fan_in, fan_out"
        )
    fan_in, fan_out = _fans(tensor, "_calculate_correct_fan")
    return fan_in if mode.lower() == "fan_in" else fan_out


# torch's private spellings of the fills, which layer code written before the public ones
# calls (timm's ``_no_grad_trunc_normal_``): the same functions, in torch's argument order
_no_grad_uniform_ = uniform_
_no_grad_normal_ = normal_
_no_grad_trunc_normal_ = trunc_normal_
_no_grad_fill_ = constant_
_no_grad_zero_ = zeros_
