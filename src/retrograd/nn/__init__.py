"""Neural-network building blocks: functions (:mod:`.functional`) and modules.

>>> from retrograd import nn
>>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> sorted(model.state_dict())
['0.bias', '0.weight', '2.bias', '2.weight']
"""

from . import functional
from .modules import (
    GELU,
    AvgPool2d,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    Module,
    ReLU,
    Sequential,
)

__all__ = [
    "GELU",
    "AvgPool2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "Module",
    "ReLU",
    "Sequential",
    "functional",
]
