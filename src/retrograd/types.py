"""torch's ``torch.types``: the aliases that annotations in model code use (``Number``,
``_size``, ``_dtype``, ``Device``...). retrograd's dtypes are named by strings and
:class:`~retrograd.tensor.dtypes.DType` values, its devices by :class:`~retrograd.device.Device`
or a string."""

from __future__ import annotations

from typing import Any, Union

from .device import Device as _DeviceType
from .tensor import Tensor
from .tensor.dtypes import Size

__all__ = ["Device", "Number", "Size", "Tensor"]

_bool = bool
_complex = complex
_float = float
_int = int
_str = str
_dtype = Any  # a dtype name ("float32") or a DType (rg.float32)
_layout = Any
_device = _DeviceType
_size = Union[Size, list[int], tuple[int, ...]]  # noqa: UP007
_Number = Union[int, float, bool]  # noqa: UP007
Number = _Number
Device = Union[_DeviceType, str, int, None]  # noqa: UP007
_TensorOrTensors = Union[Tensor, tuple[Tensor, ...], list[Tensor]]  # noqa: UP007
