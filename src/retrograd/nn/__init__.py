"""Neural-network building blocks: functions (:mod:`.functional`), modules (:mod:`.modules`),
:class:`Parameter`, initialization (:mod:`.init`) and utilities (:mod:`.utils`), laid out as
``torch.nn``.

>>> from retrograd import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> sorted(model.state_dict())
['0.bias', '0.weight', '2.bias', '2.weight']
"""

# -- torch's surface beyond API.md section 8 (section 10) --------------------------------------
from . import attention, functional, init, modules, parallel, quantized, utils
from .modules import *  # noqa: F403  (every module class, as modules.__all__ lists them)
from .parallel import DataParallel
from .parameter import Buffer, Parameter, UninitializedBuffer, UninitializedParameter

__all__ = [
    *modules.__all__,
    "DataParallel",
    "Buffer",
    "Parameter",
    "UninitializedBuffer",
    "UninitializedParameter",
    "attention",
    "functional",
    "init",
    "parallel",
    "quantized",
    "utils",
]
