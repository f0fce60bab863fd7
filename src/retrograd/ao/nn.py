"""``torch.ao.nn``: its ``quantized`` namespace is :mod:`retrograd.nn.quantized`."""

from __future__ import annotations

from ..nn import quantized

__all__ = ["quantized"]
