"""Neural-network building blocks: functions (:mod:`.functional`) and modules.

>>> from retrograd import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> sorted(model.state_dict())
['0.bias', '0.weight', '2.bias', '2.weight']
"""

from . import functional, modules
from .modules import *  # noqa: F403  (every module class, as modules.__all__ lists them)

__all__ = [*modules.__all__, "functional"]
