"""torch's ``torch.distributed.algorithms``: the ``Join`` context manager for uneven inputs."""

from .join import Join

__all__ = ["Join"]
