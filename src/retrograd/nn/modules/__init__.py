"""Neural-network modules, as PyTorch's ``torch.nn.modules``: the :class:`Module` base
(:mod:`.module`), containers, and layers with PyTorch's constructor signatures, defaults and
weight layouts, so that a PyTorch state dict loads unchanged.

>>> from retrograd import nn
>>> sorted(nn.BatchNorm2d(2).state_dict())
['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']
"""

from .activation import GELU, ReLU, Sigmoid, SiLU, Tanh
from .attention import MultiheadAttention
from .container import ModuleDict, ModuleList, Sequential
from .conv import Conv1d, Conv2d, ConvTranspose2d
from .linear import Dropout, Embedding, Flatten, Identity, Linear
from .loss import CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module
from .norm import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from .pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d, Upsample
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "GELU",
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "GroupNorm",
    "Identity",
    "LayerNorm",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "ModuleDict",
    "ModuleList",
    "RMSNorm",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "Upsample",
]
# -- recurrent and transformer modules, NLLLoss --
__all__ += ["NLLLoss"]
__all__ += ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]
__all__ += ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer"]
__all__ += ["TransformerEncoder", "TransformerEncoderLayer"]
