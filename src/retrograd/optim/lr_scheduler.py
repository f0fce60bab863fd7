"""torch's ``torch.optim.lr_scheduler`` path: the learning-rate schedules (their homes are
:mod:`.schedules`, :mod:`.cyclic_schedules` and :mod:`.composite_schedules`)."""

from . import composite_schedules, cyclic_schedules, schedules
from .composite_schedules import *  # noqa: F403 (the names of composite_schedules.__all__)
from .cyclic_schedules import *  # noqa: F403 (the names of cyclic_schedules.__all__)
from .schedules import *  # noqa: F403 (the names of schedules.__all__)

__all__ = [*schedules.__all__, *cyclic_schedules.__all__, *composite_schedules.__all__]


class _LRScheduler(schedules.LRScheduler):
    """torch's older name of :class:`LRScheduler` (a subclass, as torch keeps it), the base
    custom schedulers written before torch 2.0 still derive from (DLRM's
    ``LRPolicyScheduler(_LRScheduler)``)."""
