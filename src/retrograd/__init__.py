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
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .autodiff.params import ParamId
from .backend import Backend, NumpyBackend
from .capture import CapturedStep, CaptureError, capture
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
    flatten,
    full,
    multinomial,
    ones,
    ones_like,
    rand,
    randn,
    random,
    seed,
    stack,
    tensor,
    topk,
    tril,
    triu,
    zeros,
    zeros_like,
)

__version__ = "0.1.0"


def __getattr__(name: str):
    """``rg.TorchBackend``, resolved on first use: ``import retrograd`` must not need torch."""
    if name == "TorchBackend":
        from .backend import torch_backend

        return torch_backend.TorchBackend
    raise AttributeError(f"module 'retrograd' has no attribute {name!r}")


__all__ = [
    "Autodiff",
    "AutodiffError",
    "Backend",
    "BalancedCheckpointing",
    "BudgetCheckpointing",
    "CaptureError",
    "CapturedStep",
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
    "capture",
    "cat",
    "current_backend",
    "default_backend",
    "distributed",
    "enable_grad",
    "eye",
    "flatten",
    "full",
    "is_grad_enabled",
    "multinomial",
    "nn",
    "no_grad",
    "ones",
    "ones_like",
    "optim",
    "rand",
    "randn",
    "random",
    "seed",
    "set_default_backend",
    "set_grad_enabled",
    "stack",
    "tensor",
    "topk",
    "tril",
    "triu",
    "use_backend",
    "zeros",
    "zeros_like",
]
