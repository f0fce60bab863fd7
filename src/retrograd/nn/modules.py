"""Neural-network modules: layers that own their parameters as named tensors.

A :class:`Module` keeps its parameters by name (``"weight"``, ``"bias"``) and its sub-modules by
name, so every parameter of a model has a dotted name (``"0.weight"``, ``"encoder.fc.bias"``).
Gradients stay a value: ``loss.backward()`` returns them and an optimizer reads them from it and
*replaces* each parameter with a new leaf (``module.set_parameter(name, tensor)``), which keeps
the old one's distributed mark. Nothing is modified in place.

>>> import retrograd as rg
>>> from retrograd import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> [name for name, _ in model.named_parameters()]
['0.weight', '0.bias', '2.weight', '2.bias']
>>> model(rg.zeros((3, 4))).shape
(3, 2)
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..tensor import FLOAT_DTYPES, Tensor, random, tensor
from . import functional as F  # noqa: N812  (PyTorch's idiom)

__all__ = [
    "GELU",
    "AvgPool2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "Module",
    "ReLU",
    "Sequential",
]

StateSource = Mapping[str, Any] | str | os.PathLike


class Module:
    """Base class of layers and models.

    Subclasses call ``super().__init__()``, register parameters with
    :meth:`register_parameter` (or assign sub-modules as attributes) and define
    :meth:`forward`. Parameters read back as attributes (``self.weight``), always the current
    tensor, so a parameter an optimizer replaced is what the next forward uses.
    """

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    # -- attributes ---------------------------------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Module):
            self._parameters.pop(name, None)
            self._modules[name] = value
        elif name in self._parameters:
            self.set_parameter(name, value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: parameters and sub-modules live in dicts.
        state = self.__dict__
        if name in state.get("_parameters", ()):
            return state["_parameters"][name]
        if name in state.get("_modules", ()):
            return state["_modules"][name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def register_parameter(self, name: str, value: Tensor) -> Tensor:
        """Own ``value`` as the parameter ``name`` (made a leaf that requires grad)."""
        if "." in name or not name:
            raise InvalidArgumentError(f"register_parameter: invalid name {name!r}")
        if not isinstance(value, Tensor) or value.dtype not in FLOAT_DTYPES:
            raise DTypeError(f"register_parameter: {name!r} must be a float Tensor, got {value!r}")
        self._modules.pop(name, None)
        self._parameters[name] = _as_leaf(value)
        return self._parameters[name]

    # -- traversal ----------------------------------------------------------------------------
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """This module (name ``prefix``) and every sub-module, depth first, with dotted names."""
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def children(self) -> Iterator[Module]:
        yield from self._modules.values()

    def named_parameters(self) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, tensor)`` for every parameter, in registration order.

        >>> Linear(2, 3).named_parameters().__next__()[0]
        'weight'
        """
        for prefix, module in self.named_modules():
            for name, value in module._parameters.items():
                yield (f"{prefix}.{name}" if prefix else name), value

    def parameters(self) -> list[Tensor]:
        """Every parameter tensor, in the order of :meth:`named_parameters`."""
        return [value for _, value in self.named_parameters()]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def _owner(self, name: str) -> tuple[Module, str]:
        *path, leaf = name.split(".")
        module = self
        for part in path:
            if part not in module._modules:
                raise KeyError(f"{type(self).__name__} has no sub-module {part!r} (in {name!r})")
            module = module._modules[part]
        if leaf not in module._parameters:
            raise KeyError(f"{type(self).__name__} has no parameter {name!r}")
        return module, leaf

    def get_parameter(self, name: str) -> Tensor:
        """The parameter with dotted ``name``."""
        module, leaf = self._owner(name)
        return module._parameters[leaf]

    def set_parameter(self, name: str, value: Tensor) -> Tensor:
        """Replace the parameter with dotted ``name`` by ``value`` and return the new leaf.

        ``value`` must have the old shape. It becomes a leaf that requires grad (a tracked
        value is detached first), and a distributed parameter's replacement is marked with the
        same parameter id, so data-parallel training goes on after an optimizer step.
        """
        module, leaf = self._owner(name)
        old = module._parameters[leaf]
        if not isinstance(value, Tensor):
            raise DTypeError(
                f"set_parameter: {name!r} must be a Tensor, got {type(value).__name__}"
            )
        if value.shape != old.shape:
            raise ShapeError(
                f"set_parameter: {name!r} has shape {list(old.shape)}, got {list(value.shape)}"
            )
        value = _as_leaf(value)
        if old.is_distributed() and not value.is_distributed():
            value.set_distributed(old.backend.param_id(old.primitive))
        module._parameters[leaf] = value
        return value

    # -- modes ----------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        """Training mode (dropout active) for this module and its sub-modules; returns self."""
        for _, module in self.named_modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """Evaluation mode (dropout is the identity); returns self."""
        return self.train(False)

    # -- distributed --------------------------------------------------------------------------
    def set_distributed(self) -> Module:
        """Mark every parameter for gradient all-reduce, its dotted name as the param id.

        Every replica (device or process) names its parameters alike, so the ids agree.
        """
        for name, value in list(self.named_parameters()):
            value.set_distributed(name)
        return self

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The parameters' values by dotted name, as NumPy arrays (copies)."""
        return {name: np.array(value.numpy(), copy=True) for name, value in self.named_parameters()}

    def save(self, path: str | os.PathLike) -> None:
        """Write :meth:`state_dict` to an ``.npz`` file."""
        np.savez(path, **self.state_dict())

    def load_state_dict(self, state: StateSource, strict: bool = True) -> Module:
        """Set the parameters from a mapping of arrays or an ``.npz`` file; returns self.

        Each parameter becomes a new leaf on its current backend and device, with the stored
        values cast to its dtype. ``strict`` (the default) requires exactly this module's names.
        """
        if not isinstance(state, Mapping):
            with np.load(state) as archive:
                state = {name: archive[name] for name in archive.files}
        own = dict(self.named_parameters())
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if strict and (missing or unexpected):
            raise KeyError(
                f"load_state_dict: missing parameters {missing}, unexpected {unexpected}"
            )
        for name, current in own.items():
            if name not in state:
                continue
            array = np.asarray(state[name])
            if tuple(array.shape) != current.shape:
                raise ShapeError(
                    f"load_state_dict: {name!r} has shape {list(current.shape)}, "
                    f"the state has {list(array.shape)}"
                )
            fresh = tensor(
                array.astype(current.dtype), backend=current.backend, device=current.device
            )
            self.set_parameter(name, fresh)
        return self

    def replicate(self, backend: Any = None, device: Any = None) -> Module:
        """A copy of this module whose parameters are new leaves (same values) on ``backend``
        and ``device`` (this module's when ``None``); nothing is shared with the original.

        Data-parallel training makes one replica per device this way; a replica on a backend
        without autodiff (``rg.NumpyBackend()``) evaluates without recording any graph.
        """
        memo: dict[int, Any] = {}
        for _, value in self.named_parameters():
            memo[id(value)] = _as_leaf(
                tensor(
                    np.array(value.numpy(), copy=True),
                    backend=backend if backend is not None else value.backend,
                    device=device if device is not None else value.device,
                )
            )
        return copy.deepcopy(self, memo)

    # -- calling ------------------------------------------------------------------------------
    def forward(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [
            f"  ({name}): " + repr(child).replace("\n", "\n  ")
            for name, child in self._modules.items()
        ]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n" + "\n".join(lines) + "\n)" if lines else ")")


def _as_leaf(value: Tensor) -> Tensor:
    """``value`` as a leaf that requires grad (tracked values are cut from their graph).

    On a backend without autodiff (inference) it stays a plain tensor.
    """
    if not value.backend.is_autodiff or value.is_require_grad():
        return value
    if value.requires_grad:  # an intermediate of a graph
        value = value.detach()
    return value.require_grad()


def _uniform(shape: tuple[int, ...], bound: float, backend: Any, device: Any, dtype: str) -> Tensor:
    """U(-bound, bound) from the generator :func:`retrograd.seed` seeds; an untracked tensor."""
    values = random(shape, "uniform", dtype=dtype, backend=backend, device=device).numpy()
    return tensor((values * 2.0 - 1.0) * bound, dtype=dtype, backend=backend, device=device)


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


class Linear(Module):
    """``y = x @ weight.T + bias``, weight ``[out_features, in_features]``.

    Initialized as PyTorch's ``nn.Linear``: U(-k, k), k = 1/sqrt(in_features).

    >>> Linear(3, 2)(rg.ones((5, 3))).shape
    (5, 2)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        backend: Any = None,
        device: Any = None,
        dtype: str = "float32",
    ):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        shape = (out_features, in_features)
        self.register_parameter("weight", _uniform(shape, bound, backend, device, dtype))
        if bias:
            self.register_parameter(
                "bias", _uniform((out_features,), bound, backend, device, dtype)
            )

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self._parameters.get("bias"))

    def extra_repr(self) -> str:
        has_bias = "bias" in self._parameters
        return f"{self.in_features}, {self.out_features}, bias={has_bias}"


class Conv2d(Module):
    """2-d convolution over ``[N, C, H, W]``, weight ``[out, in/groups, kh, kw]``.

    Initialized as PyTorch's ``nn.Conv2d``: U(-k, k), k = 1/sqrt(in/groups * kh * kw).

    >>> Conv2d(1, 4, 3, padding=1)(rg.ones((2, 1, 8, 8))).shape
    (2, 4, 8, 8)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] | str = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        *,
        backend: Any = None,
        device: Any = None,
        dtype: str = "float32",
    ):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise InvalidArgumentError(
                f"Conv2d: in_channels {in_channels} and out_channels {out_channels} must be "
                f"divisible by groups {groups}"
            )
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _pair(kernel_size)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        bound = 1.0 / math.sqrt(fan_in)
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.register_parameter("weight", _uniform(shape, bound, backend, device, dtype))
        if bias:
            self.register_parameter(
                "bias", _uniform((out_channels,), bound, backend, device, dtype)
            )

    def forward(self, x: Tensor) -> Tensor:
        return F.conv2d(
            x,
            self.weight,
            self._parameters.get("bias"),
            self.stride,
            self.padding,
            self.dilation,
            self.groups,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}"
        )


class MaxPool2d(Module):
    """2-d max pooling (PyTorch's arguments; ``stride`` defaults to ``kernel_size``).

    >>> MaxPool2d(2)(rg.ones((1, 1, 4, 4))).shape
    (1, 1, 2, 2)
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        ceil_mode: bool = False,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class AvgPool2d(Module):
    """2-d average pooling (PyTorch's arguments; ``stride`` defaults to ``kernel_size``).

    >>> AvgPool2d(2)(rg.ones((1, 1, 4, 4))).shape
    (1, 1, 2, 2)
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: int | Sequence[int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad
        )

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}"


class LayerNorm(Module):
    """Normalize over the trailing ``normalized_shape`` dims, then scale and shift.

    >>> LayerNorm(4)(rg.ones((2, 4))).shape
    (2, 4)
    """

    def __init__(
        self,
        normalized_shape: int | Sequence[int],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        backend: Any = None,
        device: Any = None,
        dtype: str = "float32",
    ):
        super().__init__()
        shape = (
            (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        )
        self.normalized_shape, self.eps = shape, eps
        if elementwise_affine:
            self.register_parameter(
                "weight", tensor(np.ones(shape), dtype=dtype, backend=backend, device=device)
            )
            if bias:
                self.register_parameter(
                    "bias", tensor(np.zeros(shape), dtype=dtype, backend=backend, device=device)
                )

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(
            x,
            self.normalized_shape,
            self._parameters.get("weight"),
            self._parameters.get("bias"),
            self.eps,
        )

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Embedding(Module):
    """A lookup table ``weight`` ``[num_embeddings, embedding_dim]``, rows drawn from N(0, 1).

    >>> Embedding(10, 3)(rg.tensor([[1, 2], [3, 4]], dtype="int64")).shape
    (2, 2, 3)
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        *,
        backend: Any = None,
        device: Any = None,
        dtype: str = "float32",
    ):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        values = random(
            (num_embeddings, embedding_dim), "normal", dtype=dtype, backend=backend, device=device
        ).numpy()
        if padding_idx is not None:
            values = values.copy()
            values[padding_idx] = 0.0
        self.register_parameter("weight", tensor(values, backend=backend, device=device))

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Dropout(Module):
    """Zero each element with probability ``p`` in training mode; the identity in eval mode.

    >>> Dropout(0.5).eval()(rg.ones((2, 2))).tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise InvalidArgumentError(f"Dropout: p must be between 0 and 1, got {p!r}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class ReLU(Module):
    """``max(x, 0)`` elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    """``x * Phi(x)`` elementwise (exact GELU)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x)


class Flatten(Module):
    """Flatten dims ``start_dim`` to ``end_dim`` into one (by default all but the batch dim).

    >>> Flatten()(rg.ones((2, 3, 4))).shape
    (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    """Modules applied in order; the sub-modules are named ``"0"``, ``"1"``, ...

    >>> model = Sequential(Linear(2, 2), ReLU())
    >>> len(model), type(model[1]).__name__
    (2, 'ReLU')
    """

    def __init__(self, *modules: Module):
        super().__init__()
        for index, module in enumerate(modules):
            if not isinstance(module, Module):
                raise DTypeError(f"Sequential: item {index} is not a Module: {module!r}")
            self._modules[str(index)] = module

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        self._modules[str(len(self._modules))] = module
        return self

    def forward(self, x: Any) -> Any:
        for module in self._modules.values():
            x = module(x)
        return x
