"""torch's ``torch.nn.modules.normalization`` path: ``LayerNorm``, ``GroupNorm``, ``RMSNorm``
(their home is :mod:`.norm`)."""

from .norm import GroupNorm, LayerNorm, RMSNorm

__all__ = ["GroupNorm", "LayerNorm", "RMSNorm"]
