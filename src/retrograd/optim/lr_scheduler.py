"""torch's ``torch.optim.lr_scheduler`` path: the learning-rate schedules (their home is
:mod:`.schedules`)."""

from . import schedules
from .schedules import *  # noqa: F403 (the names of schedules.__all__)

__all__ = list(schedules.__all__)
