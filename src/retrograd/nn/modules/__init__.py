"""Neural-network modules, as PyTorch's ``torch.nn.modules``: the :class:`Module` base
(:mod:`.module`), containers, and layers with PyTorch's constructor signatures, defaults and
weight layouts, so that a PyTorch state dict loads unchanged.

>>> from retrograd import nn
>>> sorted(nn.BatchNorm2d(2).state_dict())
['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']
"""

import inspect

from ...errors import guard

# -- torch's surface beyond API.md section 8 (section 10) --------------------------------------
# torch's module paths (nn.modules.batchnorm.BatchNorm2d ...), importable as attributes
from . import (  # noqa: F401
    adaptive,
    batchnorm,
    channelshuffle,
    distance,
    dropout,
    fold,
    instancenorm,
    lazy,
    normalization,
    padding,
    pixelshuffle,
    sparse,
    utils,
)
from .activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmax2d,
    Softmin,
    Softplus,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
)
from .attention import MultiheadAttention
from .batchnorm import SyncBatchNorm
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .conv import Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
from .dropout import Dropout1d, Dropout2d, Dropout3d
from .fold import Fold, Unfold
from .instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from .linear import Dropout, Embedding, Flatten, Identity, Linear, Unflatten
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import Module
from .norm import BatchNorm1d, BatchNorm2d, BatchNorm3d, GroupNorm, LayerNorm, RMSNorm
from .padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from .pixelshuffle import PixelShuffle, PixelUnshuffle
from .pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    Upsample,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import EmbeddingBag
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "CELU",
    "ELU",
    "GELU",
    "GLU",
    "SELU",
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveMaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "BatchNorm3d",
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConstantPad3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "CrossEntropyLoss",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "Embedding",
    "Flatten",
    "Fold",
    "GroupNorm",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "HuberLoss",
    "Identity",
    "InstanceNorm1d",
    "InstanceNorm2d",
    "InstanceNorm3d",
    "KLDivLoss",
    "L1Loss",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "LogSigmoid",
    "LogSoftmax",
    "MSELoss",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "Mish",
    "Module",
    "ModuleDict",
    "ModuleList",
    "PReLU",
    "ParameterDict",
    "ParameterList",
    "PixelShuffle",
    "PixelUnshuffle",
    "RMSNorm",
    "ReLU",
    "ReLU6",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReflectionPad3d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "ReplicationPad3d",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "SmoothL1Loss",
    "Softmax",
    "Softmax2d",
    "Softmin",
    "Softplus",
    "Softsign",
    "Tanh",
    "Tanhshrink",
    "Threshold",
    "Unflatten",
    "Unfold",
    "Upsample",
    "ZeroPad1d",
    "ZeroPad2d",
    "ZeroPad3d",
]
# -- recurrent and transformer modules, NLLLoss --
__all__ += ["NLLLoss"]
__all__ += ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]
__all__ += ["MultiheadAttention", "Transformer", "TransformerDecoder", "TransformerDecoderLayer"]
__all__ += ["TransformerEncoder", "TransformerEncoderLayer"]
__all__ += ["EmbeddingBag", "SyncBatchNorm"]

# -- distances, margin losses, LRN, unpooling, lazy layers (torch's nn surface) -----------------
from .activation import Hardshrink, RReLU, Softshrink  # noqa: E402
from .adaptive import AdaptiveLogSoftmaxWithLoss  # noqa: E402
from .channelshuffle import ChannelShuffle  # noqa: E402
from .distance import CosineSimilarity, PairwiseDistance  # noqa: E402
from .dropout import AlphaDropout, FeatureAlphaDropout  # noqa: E402
from .lazy import (  # noqa: E402
    LazyBatchNorm1d,
    LazyBatchNorm2d,
    LazyBatchNorm3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyConvTranspose1d,
    LazyConvTranspose2d,
    LazyConvTranspose3d,
    LazyInstanceNorm1d,
    LazyInstanceNorm2d,
    LazyInstanceNorm3d,
    LazyLinear,
)
from .linear import Bilinear  # noqa: E402
from .loss import (  # noqa: E402
    CosineEmbeddingLoss,
    CTCLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    MarginRankingLoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    NLLLoss2d,
    PoissonNLLLoss,
    SoftMarginLoss,
    TripletMarginLoss,
    TripletMarginWithDistanceLoss,
)
from .normalization import CrossMapLRN2d, LocalResponseNorm  # noqa: E402
from .pooling import (  # noqa: E402
    FractionalMaxPool2d,
    FractionalMaxPool3d,
    LPPool1d,
    LPPool2d,
    LPPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)

__all__ += ["ChannelShuffle", "CosineSimilarity", "Hardshrink", "RReLU", "Softshrink"]
__all__ += ["AlphaDropout", "Bilinear", "FeatureAlphaDropout", "PairwiseDistance"]
__all__ += ["LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d", "LazyConv1d"]
__all__ += ["LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d"]
__all__ += ["LazyConvTranspose3d", "LazyInstanceNorm1d", "LazyInstanceNorm2d"]
__all__ += ["LazyInstanceNorm3d", "LazyLinear"]
__all__ += ["CosineEmbeddingLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "MarginRankingLoss"]
__all__ += ["MultiLabelMarginLoss", "MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss2d"]
__all__ += ["PoissonNLLLoss", "SoftMarginLoss", "TripletMarginLoss"]
__all__ += ["CrossMapLRN2d", "LocalResponseNorm", "TripletMarginWithDistanceLoss"]
__all__ += ["FractionalMaxPool2d", "FractionalMaxPool3d"]
__all__ += ["LPPool1d", "LPPool2d", "LPPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]
__all__ += ["CTCLoss", "UpsamplingBilinear2d", "UpsamplingNearest2d"]
__all__ += ["AdaptiveLogSoftmaxWithLoss"]


def _guard_modules() -> None:
    """Each built-in module's constructor and ``forward`` answer arguments no check foresaw
    (a str given for a size, a list for the input) with an error of the hierarchy naming the
    module (errors.guard). Containers' ``forward`` runs the user's modules, whose exceptions
    pass unchanged; a user's subclass keeps its own ``forward`` unguarded."""
    for name in __all__:
        cls = globals().get(name)
        if not isinstance(cls, type) or not issubclass(cls, Module) or cls is Module:
            continue
        for method in ("__init__", "forward"):
            if method == "forward" and cls.__module__.endswith(".container"):
                continue
            function = inspect.getattr_static(cls, method, None)
            if getattr(function, "__retrograd_guarded__", False):
                function = function.__wrapped__  # a base's: guarded again under this name
            if type(function).__name__ != "function" or function is vars(Module).get(method):
                continue
            setattr(cls, method, guard(name, function, cls, f"{cls.__qualname__}.{method}"))


_guard_modules()
