"""retrograd: reverse-mode automatic differentiation as a backend decorator.

>>> import retrograd as rg
>>> x = rg.tensor([1.0, 2.0, 3.0]).require_grad()
>>> grads = (x.exp() * x).sum().backward()
>>> x.grad(grads).shape
(3,)
"""

from . import distributed, nn, optim
from .autodiff import (
    Autodiff,
    BalancedCheckpointing,
    BudgetCheckpointing,
    CheckpointStrategy,
    Gradients,
    NoCheckpointing,
)
from .autodiff.params import ParamId
from .backend import Backend, NumpyBackend
from .context import current_backend, default_backend, set_default_backend, use_backend
from .device import Device
from .errors import (
    AutodiffError,
    DistributedError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    RetrogradError,
    ShapeError,
)
from .tensor import (
    Tensor,
    arange,
    cat,
    eye,
    full,
    ones,
    ones_like,
    random,
    seed,
    stack,
    tensor,
    zeros,
    zeros_like,
)

__version__ = "0.1.0"

__all__ = [
    "Autodiff",
    "AutodiffError",
    "Backend",
    "BalancedCheckpointing",
    "BudgetCheckpointing",
    "CheckpointStrategy",
    "DTypeError",
    "Device",
    "DistributedError",
    "Gradients",
    "IndexOutOfRangeError",
    "InvalidArgumentError",
    "NoCheckpointing",
    "NumpyBackend",
    "ParamId",
    "RetrogradError",
    "ShapeError",
    "Tensor",
    "arange",
    "cat",
    "current_backend",
    "default_backend",
    "distributed",
    "eye",
    "full",
    "nn",
    "ones",
    "ones_like",
    "optim",
    "random",
    "seed",
    "set_default_backend",
    "stack",
    "tensor",
    "use_backend",
    "zeros",
    "zeros_like",
]
