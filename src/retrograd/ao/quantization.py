"""``torch.ao.quantization``'s stubs: :class:`QuantStub` and :class:`DeQuantStub` mark where a
model's values would be quantized and dequantized once converted; before conversion, torch's
and these are the identity (a ``qconfig``, when given, is kept as the module's attribute).
"""

from __future__ import annotations

from typing import Any

from ..nn.modules import Module

__all__ = ["DeQuantStub", "QuantStub"]


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
