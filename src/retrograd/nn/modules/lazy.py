"""torch's lazy modules: ``LazyLinear``, ``LazyConv1d/2d/3d``, ``LazyConvTranspose1d/2d/3d``,
``LazyBatchNorm1d/2d/3d``, ``LazyInstanceNorm1d/2d/3d``.

Each is built without its input size (``in_features``, ``in_channels``, ``num_features``) and
learns it from the first input, as torch's: the first call builds the full layer (its
initialization drawn then, from ``rg.seed``'s stream), moves the values into the parameter
objects the lazy module has held since construction, and becomes that layer's class
(``LazyLinear`` becomes ``Linear``, torch's ``cls_to_become``). Parameters are the same objects
before and after, so an optimizer built before the first call trains them, as in torch.

Before the first call the parameters are :class:`~..parameter.UninitializedParameter` objects
holding empty ``[0]`` values (they print as torch's and refuse ``numel()``; the state dict holds
them as they are, as torch's), and the module prints as torch's does, its input size 0;
``load_state_dict`` materializes the layer from the state's shapes first (torch's lazy load
hook), so a torch state dict loads into a fresh lazy model.

>>> from retrograd import nn
>>> layer = nn.LazyLinear(3)
>>> layer(rg.ones((2, 5))).shape, type(layer).__name__, layer.in_features
(retrograd.Size([2, 3]), 'Linear', 5)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import ShapeError
from ...tensor import Tensor, tensor
from ...tensor.dtypes import default_float_dtype
from ...tensor.generator import fork_rng
from ...tensor.inplace import assign
from ..parameter import UninitializedBuffer, UninitializedParameter, is_lazy
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, _InstanceNorm
from .linear import Linear
from .module import Module
from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, _BatchNorm

__all__ = [
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyBatchNorm3d",
    "LazyConv1d",
    "LazyConv2d",
    "LazyConv3d",
    "LazyConvTranspose1d",
    "LazyConvTranspose2d",
    "LazyConvTranspose3d",
    "LazyInstanceNorm1d",
    "LazyInstanceNorm2d",
    "LazyInstanceNorm3d",
    "LazyLinear",
    "LazyModuleMixin",
]

#: what a built layer's ``__dict__`` holds that is not copied over as a plain attribute
_REGISTRY_KEYS = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers")


class LazyModuleMixin(Module):
    """A layer whose input size comes from its first input; see the module docstring.

    Subclasses name ``cls_to_become`` and say where the size is read
    (:meth:`_input_size`) and which weight's dimension holds it (``_size_from``).
    """

    cls_to_become: type[Module]
    #: (state-dict name, dimension) of the tensor whose shape gives the input size on load
    _size_from: tuple[str, int] = ("weight", 1)

    def _lazy_init(
        self, args: tuple, kwargs: dict[str, Any], parameters: tuple[str, ...],
        buffers: tuple[str, ...] = (),
    ) -> None:  # fmt: skip
        """Keep the layer's other arguments; hold empty placeholders under its state names."""
        self._lazy_arguments = (args, kwargs)
        dtype = kwargs.get("dtype") or default_float_dtype()
        device = kwargs.get("device")
        for name in parameters:
            empty = tensor(np.zeros((0,)), dtype=dtype, backend=kwargs.get("backend"),
                           device=device)  # fmt: skip
            self.register_parameter(name, UninitializedParameter(empty))
        # the layer's attributes as torch's lazy module has them (``in_features == 0``,
        # ``kernel_size``...): a size-0 layer's, built under a forked generator so that
        # construction draws nothing from the stream
        with fork_rng():
            shadow = self.cls_to_become(0, *args, **kwargs)
        for name, value in shadow.__dict__.items():
            if name not in _REGISTRY_KEYS and name != "training":
                self.__dict__.setdefault(name, value)
        for name in buffers:
            empty = tensor(np.zeros((0,)), dtype=dtype, device=device)
            self.register_buffer(name, UninitializedBuffer(empty.primitive, empty.backend,
                                                           empty.device))  # fmt: skip

    def has_uninitialized_params(self) -> bool:
        return True

    def extra_repr(self) -> str:
        """torch's: the built layer's, its input size 0."""
        return self.cls_to_become.extra_repr(self)

    def _input_size(self, x: Tensor) -> int:
        if not isinstance(x, Tensor) or x.ndim < 2:
            shape = getattr(x, "shape", None)
            raise ShapeError(
                f"{type(self).__name__}: the first input sets the input size and must have at "
                f"least 2 dimensions, got {None if shape is None else tuple(shape)}"
            )
        return x.shape[1]

    def initialize_parameters(self, x: Tensor) -> None:
        """Build the layer for ``x``'s size (torch's name)."""
        self._materialize(self._input_size(x))

    def _materialize(self, size: int) -> None:
        args, kwargs = self._lazy_arguments
        built = self.cls_to_become(size, *args, **kwargs)
        for name, value in built._parameters.items():
            held = self._parameters.get(name)
            if value is not None and held is not None:
                assign(held, value, f"{type(self).__name__} materialize", check_shape=False)
                held.__class__ = held.cls_to_become  # (torch's materialize: same object)
                value = held
            self._parameters[name] = value
        for name, value in built._buffers.items():
            self._buffers[name] = value
        for name, value in built.__dict__.items():
            if name not in _REGISTRY_KEYS and name != "training":
                self.__dict__[name] = value
        del self.__dict__["_lazy_arguments"]
        self.__class__ = self.cls_to_become

    def forward(self, input: Tensor, *args: Any, **kwargs: Any) -> Any:
        self.initialize_parameters(input)
        return self.forward(input, *args, **kwargs)

    def _lazy_load(self, state: Mapping[str, Any], prefix: str) -> None:
        """torch's lazy load hook: a state holding this layer's weight sets its size. A
        state of a layer not built yet holds the empty ``[0]`` placeholder (torch's
        ``UninitializedParameter``, which its hook skips): the layer stays lazy."""
        name, dim = self._size_from
        value = state.get(prefix + name)
        if is_lazy(value):
            return
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > dim and tuple(shape) != (0,):
            self._materialize(int(shape[dim]) * self._size_factor())

    def _size_factor(self) -> int:
        """What the stored dimension is multiplied by to give the input size."""
        return 1


def _factory(kwargs: dict[str, Any], device: Any, dtype: Any) -> dict[str, Any]:
    return {**kwargs, "device": device, "dtype": dtype}


class LazyLinear(LazyModuleMixin, Linear):
    """:class:`Linear` with ``in_features`` from the first input's last dimension."""

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None, **factory: Any):  # fmt: skip
        Module.__init__(self)
        self.out_features = out_features
        names = ("weight", "bias") if bias else ("weight",)
        self._lazy_init((out_features, bias), _factory(factory, device, dtype), names)
        if not bias:
            self.register_parameter("bias", None)

    def _input_size(self, x: Tensor) -> int:
        if not isinstance(x, Tensor) or x.ndim < 1:
            raise ShapeError(
                f"LazyLinear: the first input must have a feature dimension, got {x!r}"
            )
        return x.shape[-1]


class _LazyConvNd(LazyModuleMixin):
    """A convolution with ``in_channels`` from the first input (dimension 1 of a batched
    input, 0 of an unbatched one, as torch's)."""

    spatial = 2

    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 dilation: Any = 1, groups: int = 1, bias: bool = True,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None,
                 **factory: Any):  # fmt: skip
        Module.__init__(self)
        self.out_channels = out_channels
        arguments = (out_channels, kernel_size, stride, padding, dilation, groups, bias,
                     padding_mode)  # fmt: skip
        names = ("weight", "bias") if bias else ("weight",)
        self._lazy_init(arguments, _factory(factory, device, dtype), names)
        if not bias:
            self.register_parameter("bias", None)

    def _input_size(self, x: Tensor) -> int:
        if isinstance(x, Tensor) and x.ndim == self.spatial + 1:
            return x.shape[0]
        return super()._input_size(x)

    def _size_factor(self) -> int:  # the weight is [out, in / groups, *kernel]
        return self._lazy_arguments[0][5]


class LazyConv1d(_LazyConvNd, Conv1d):
    spatial, cls_to_become = 1, Conv1d


class LazyConv2d(_LazyConvNd, Conv2d):
    """:class:`Conv2d` with ``in_channels`` from the first input.

    >>> conv = LazyConv2d(4, 3)
    >>> conv(rg.ones((1, 2, 5, 5))).shape, conv.weight.shape
    (retrograd.Size([1, 4, 3, 3]), retrograd.Size([4, 2, 3, 3]))
    """

    spatial, cls_to_become = 2, Conv2d


class LazyConv3d(_LazyConvNd, Conv3d):
    spatial, cls_to_become = 3, Conv3d


class _LazyConvTransposeNd(_LazyConvNd):
    """A transposed convolution with ``in_channels`` from the first input (its weight is
    ``[in, out / groups, *kernel]``: the size is dimension 0 on load)."""

    _size_from = ("weight", 0)

    def _size_factor(self) -> int:
        return 1

    def __init__(self, out_channels: int, kernel_size: Any, stride: Any = 1, padding: Any = 0,
                 output_padding: Any = 0, groups: int = 1, bias: bool = True, dilation: Any = 1,
                 padding_mode: str = "zeros", device: Any = None, dtype: Any = None,
                 **factory: Any):  # fmt: skip
        Module.__init__(self)
        self.out_channels = out_channels
        arguments = (out_channels, kernel_size, stride, padding, output_padding, groups, bias,
                     dilation, padding_mode)  # fmt: skip
        names = ("weight", "bias") if bias else ("weight",)
        self._lazy_init(arguments, _factory(factory, device, dtype), names)
        if not bias:
            self.register_parameter("bias", None)


class LazyConvTranspose1d(_LazyConvTransposeNd, ConvTranspose1d):
    spatial, cls_to_become = 1, ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTransposeNd, ConvTranspose2d):
    spatial, cls_to_become = 2, ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTransposeNd, ConvTranspose3d):
    spatial, cls_to_become = 3, ConvTranspose3d


class _LazyNormBase(LazyModuleMixin):
    """Batch or instance normalization with ``num_features`` from the first input's
    dimension 1 (as torch's ``_LazyNormBase``)."""

    _size_from = ("running_mean", 0)

    def __init__(self, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None,
                 *, bias: bool = True, **factory: Any):  # fmt: skip
        Module.__init__(self)
        tracking = track_running_stats
        self.affine, self.track_running_stats = affine, tracking
        self._size_from = ("weight", 0) if affine else ("running_mean", 0)
        parameters = (("weight", "bias") if bias else ("weight",)) if affine else ()
        buffers = ("running_mean", "running_var") if tracking else ()
        kwargs = {"eps": eps, "momentum": momentum, "affine": affine, "bias": bias,
                  "track_running_stats": tracking, "device": device, "dtype": dtype}  # fmt: skip
        if "backend" in factory:
            kwargs["backend"] = factory.pop("backend")
        self._lazy_init((), {**kwargs, **factory}, parameters, buffers)
        if tracking:
            count = tensor(np.array(0, dtype=np.int64), device=device)
            self.register_buffer("num_batches_tracked", count)
        if not affine:
            self.register_parameter("weight", None)
        if not (affine and bias):
            self.register_parameter("bias", None)


class LazyBatchNorm1d(_LazyNormBase, _BatchNorm):
    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNormBase, _BatchNorm):
    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNormBase, _BatchNorm):
    cls_to_become = BatchNorm3d


class _LazyInstanceNorm(_LazyNormBase):
    """Instance normalization; torch's lazy forms default to ``affine=True`` and
    ``track_running_stats=True`` (its ``_LazyNormBase``'s), unlike ``InstanceNorm*d``."""


class LazyInstanceNorm1d(_LazyInstanceNorm, _InstanceNorm):
    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyInstanceNorm, _InstanceNorm):
    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyInstanceNorm, _InstanceNorm):
    cls_to_become = InstanceNorm3d
