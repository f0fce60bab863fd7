"""torch's ``torch.nn.modules.sparse`` path: ``Embedding`` (its home is :mod:`.linear`)."""

from .linear import Embedding

__all__ = ["Embedding"]
