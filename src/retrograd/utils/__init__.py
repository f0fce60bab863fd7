"""torch's ``torch.utils``: :mod:`.data` (datasets, samplers, ``DataLoader``) and
:mod:`.checkpoint`."""

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
