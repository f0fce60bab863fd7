"""torch's ``torch.nn.modules.batchnorm`` path: the batch normalization layers (their home is
:mod:`.norm`)."""

from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d"]
