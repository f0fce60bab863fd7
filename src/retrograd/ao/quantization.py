"""``torch.ao.quantization``'s stubs: :class:`QuantStub` and :class:`DeQuantStub` mark where a
model's values would be quantized and dequantized once converted; before conversion, torch's
and these are the identity (a ``qconfig``, when given, is kept as the module's attribute).

Quantizing itself (``quantize_dynamic``, ``prepare``/``convert``, quantization-aware
training's ``prepare_qat``, the default qconfigs, ``fuse_modules``) is refused by name:
retrograd has no integer kernels to run a quantized model on.
"""

from __future__ import annotations

from typing import Any, NoReturn

from ..errors import InvalidArgumentError
from ..nn.modules import Module

__all__ = [
    "DeQuantStub",
    "QuantStub",
    "convert",
    "fuse_modules",
    "get_default_qat_qconfig",
    "get_default_qconfig",
    "prepare",
    "prepare_qat",
    "quantize",
    "quantize_dynamic",
]


class _Stub(Module):
    """A quantization stub before conversion: the identity, keeping the ``qconfig`` given."""

    def __init__(self, qconfig: Any = None) -> None:
        super().__init__()
        if qconfig:
            self.qconfig = qconfig

    def forward(self, x: Any) -> Any:
        return x


class QuantStub(_Stub):
    """Where a converted model would quantize its input: the identity before conversion."""


class DeQuantStub(_Stub):
    """Where a converted model would dequantize: the identity before conversion."""


def _refused(name: str) -> NoReturn:
    raise InvalidArgumentError(
        f"ao.quantization.{name}: retrograd has no quantized (integer) kernels, so models are "
        "not quantized here; train and run in floating point"
    )


def quantize_dynamic(model: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("quantize_dynamic")


def quantize(model: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("quantize")


def prepare(model: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("prepare")


def prepare_qat(model: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("prepare_qat")


def convert(model: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("convert")


def fuse_modules(model: Any, *args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("fuse_modules")


def get_default_qconfig(*args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("get_default_qconfig")


def get_default_qat_qconfig(*args: Any, **kwargs: Any) -> NoReturn:
    """Refused (see the module docstring)."""
    _refused("get_default_qat_qconfig")
