"""Neural-network functions (PyTorch's signatures and argument meanings).

Layout is PyTorch's: ``[N, C, *spatial]`` (an unbatched ``[C, *spatial]`` input works too).
Convolution, pooling and interpolation run one backend primitive each (see the
"neural-network kernels" section of :class:`~retrograd.backend.Backend`); the rest (linear,
embedding, losses, normalization, dropout) are compositions of tensor operations. Everything
is differentiable, to any order with ``backward(create_graph=True)``.

Bad arguments raise :class:`~retrograd.ShapeError` (or :class:`~retrograd.DTypeError`,
:class:`~retrograd.IndexOutOfRangeError`) naming the function and the shapes at fault, before
anything is computed.
"""

from __future__ import annotations

import inspect

from ...errors import guard_namespace as _guard_namespace

# -- torch's surface beyond API.md section 8 (section 10) --------------------------------------
from .activation import (
    celu,
    elu,
    gelu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    selu,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softsign,
    tanh,
    tanhshrink,
    threshold,
)
from .attention import scaled_dot_product_attention
from .bags import embedding_bag
from .conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from .deform import deform_conv2d
from .grid import affine_grid, grid_sample
from .linear import embedding, linear, one_hot
from .loss import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .multihead import multi_head_attention_forward
from .normalization import (
    batch_norm,
    dropout,
    dropout1d,
    dropout2d,
    dropout3d,
    group_norm,
    instance_norm,
    layer_norm,
    normalize,
    rms_norm,
)
from .pooling import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
    max_pool3d,
    max_pool3d_with_indices,
)
from .sampling import fold, interpolate, pad, pixel_shuffle, pixel_unshuffle, unfold

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "affine_grid",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "batch_norm",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "celu",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cross_entropy",
    "deform_conv2d",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "elu",
    "embedding",
    "fold",
    "gelu",
    "glu",
    "grid_sample",
    "group_norm",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "huber_loss",
    "instance_norm",
    "interpolate",
    "kl_div",
    "l1_loss",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_sigmoid",
    "log_softmax",
    "logsigmoid",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_pool3d",
    "max_pool3d_with_indices",
    "mish",
    "mse_loss",
    "normalize",
    "one_hot",
    "pad",
    "pixel_shuffle",
    "pixel_unshuffle",
    "prelu",
    "relu",
    "relu6",
    "rms_norm",
    "scaled_dot_product_attention",
    "selu",
    "sigmoid",
    "silu",
    "smooth_l1_loss",
    "softmax",
    "softmin",
    "softplus",
    "softsign",
    "tanh",
    "tanhshrink",
    "threshold",
    "unfold",
]
# -- recurrent and transformer functions, nll_loss --
__all__ += ["multi_head_attention_forward", "nll_loss"]
__all__ += ["embedding_bag"]

# -- distances, margin and ranking losses, shrinkage, LRN, unpooling (torch's F surface) --------
from .activation import (  # noqa: E402
    celu_,
    elu_,
    gumbel_softmax,
    hard_sigmoid,
    hardshrink,
    hardtanh_,
    leaky_relu_,
    quiet_softmax,
    relu_,
    rrelu,
    rrelu_,
    selu_,
    softshrink,
    threshold_,
    thresholded_relu,
)
from .distance import (  # noqa: E402
    cosine_embedding_loss,
    cosine_similarity,
    pairwise_distance,
    pdist,
    triplet_margin_loss,
    triplet_margin_with_distance_loss,
)
from .linear import bilinear  # noqa: E402
from .loss import gaussian_nll_loss, poisson_nll_loss  # noqa: E402
from .margin import (  # noqa: E402
    ctc_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    soft_margin_loss,
)
from .normalization import alpha_dropout, feature_alpha_dropout, local_response_norm  # noqa: E402
from .pooling import (  # noqa: E402
    adaptive_max_pool1d_with_indices,
    adaptive_max_pool2d_with_indices,
    adaptive_max_pool3d,
    adaptive_max_pool3d_with_indices,
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
    lp_pool1d,
    lp_pool2d,
    lp_pool3d,
    max_unpool1d,
    max_unpool2d,
    max_unpool3d,
)
from .sampling import (  # noqa: E402
    channel_shuffle,
    native_channel_shuffle,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)

__all__ += ["celu_", "elu_", "gumbel_softmax", "hardshrink", "hardtanh_", "leaky_relu_"]
__all__ += ["relu_", "rrelu", "rrelu_", "selu_", "softshrink", "threshold_"]
__all__ += ["cosine_embedding_loss", "cosine_similarity", "pairwise_distance", "pdist"]
__all__ += ["bilinear", "triplet_margin_loss", "triplet_margin_with_distance_loss"]
__all__ += ["gaussian_nll_loss", "hinge_embedding_loss", "poisson_nll_loss"]
__all__ += ["hard_sigmoid", "quiet_softmax", "thresholded_relu"]
__all__ += ["margin_ranking_loss", "multi_margin_loss", "multilabel_margin_loss"]
__all__ += ["ctc_loss", "multilabel_soft_margin_loss", "soft_margin_loss"]
__all__ += ["alpha_dropout", "feature_alpha_dropout", "local_response_norm"]
__all__ += ["adaptive_max_pool1d_with_indices", "adaptive_max_pool2d_with_indices"]
__all__ += ["adaptive_max_pool3d", "adaptive_max_pool3d_with_indices"]
__all__ += ["fractional_max_pool2d", "fractional_max_pool2d_with_indices"]
__all__ += ["fractional_max_pool3d", "fractional_max_pool3d_with_indices"]
__all__ += ["lp_pool1d", "lp_pool2d", "lp_pool3d", "max_unpool1d", "max_unpool2d", "max_unpool3d"]
__all__ += [
    "channel_shuffle",
    "native_channel_shuffle",
    "upsample",
    "upsample_bilinear",
    "upsample_nearest",
]


# Arguments no check foresaw get an error of the hierarchy naming the function (errors.guard).
def _takes_input(name: str) -> bool:
    """Whether torch names ``name``'s first parameter ``input`` where retrograd's is another
    (PyTorch code writes ``F.cross_entropy(input=logits, target=y)``)."""
    function = globals()[name]
    if not (callable(function) and type(function).__name__ == "function"):
        return False
    parameters = list(inspect.signature(function).parameters)
    first = parameters[0] if parameters else None
    return "input" not in parameters and (first == "x" or name in ("cross_entropy", "embedding"))


_guard_namespace(globals(), __all__, {name: "input" for name in __all__ if _takes_input(name)})
