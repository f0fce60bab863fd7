"""Padding layers over ``F.pad``: ``ZeroPad1d/2d/3d``, ``ConstantPad1d/2d/3d``,
``ReflectionPad1d/2d/3d``, ``ReplicationPad1d/2d/3d``, ``CircularPad1d/2d/3d``; ``padding`` an
int (every side) or torch's tuple, last dimension first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...tensor import Tensor
from .. import functional as F  # noqa: N812 (PyTorch's idiom)
from .module import Module

__all__ = [
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
]


class _Pad(Module):
    mode = "constant"
    dims = 2
    #: whether the module takes a ``value`` (``ConstantPad*d``, which torch prints with it)
    takes_value = False

    def __init__(self, padding: int | Sequence[int], value: float = 0.0):
        super().__init__()
        if isinstance(padding, int):
            padding = (padding,) * (2 * self.dims)
        self.padding = tuple(padding)
        self.value = value

    def forward(self, input: Tensor) -> Tensor:
        if self.mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self) -> str:
        if self.takes_value:
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


def _padding(mode: str, dims: int, name: str, constant: bool, base: type = _Pad) -> type:
    """The class ``name`` over ``base``: torch's ``ZeroPad*d`` are its ``ConstantPad*d``
    with the value 0."""
    if constant:

        def init(self: Any, padding: Any, value: float) -> None:
            _Pad.__init__(self, padding, value)
    else:

        def init(self: Any, padding: Any) -> None:
            _Pad.__init__(self, padding)

    doc = f"``F.pad(x, padding, {mode!r})`` over the last {dims} dimension(s)."
    namespace = {"mode": mode, "dims": dims, "takes_value": constant, "__init__": init}
    return type(name, (base,), {**namespace, "__doc__": doc})


ConstantPad1d = _padding("constant", 1, "ConstantPad1d", True)
ConstantPad2d = _padding("constant", 2, "ConstantPad2d", True)
ConstantPad3d = _padding("constant", 3, "ConstantPad3d", True)
ZeroPad1d = _padding("constant", 1, "ZeroPad1d", False, ConstantPad1d)
ZeroPad2d = _padding("constant", 2, "ZeroPad2d", False, ConstantPad2d)
ZeroPad3d = _padding("constant", 3, "ZeroPad3d", False, ConstantPad3d)
ReflectionPad1d = _padding("reflect", 1, "ReflectionPad1d", False)
ReflectionPad2d = _padding("reflect", 2, "ReflectionPad2d", False)
ReflectionPad3d = _padding("reflect", 3, "ReflectionPad3d", False)
ReplicationPad1d = _padding("replicate", 1, "ReplicationPad1d", False)
ReplicationPad2d = _padding("replicate", 2, "ReplicationPad2d", False)
ReplicationPad3d = _padding("replicate", 3, "ReplicationPad3d", False)
CircularPad1d = _padding("circular", 1, "CircularPad1d", False)
CircularPad2d = _padding("circular", 2, "CircularPad2d", False)
CircularPad3d = _padding("circular", 3, "CircularPad3d", False)
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
