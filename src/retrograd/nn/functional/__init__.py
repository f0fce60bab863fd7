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

from .activation import (
    gelu,
    leaky_relu,
    log_sigmoid,
    log_softmax,
    relu,
    sigmoid,
    silu,
    softmax,
    softplus,
    tanh,
)
from .attention import scaled_dot_product_attention
from .conv import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
from .linear import embedding, linear
from .loss import cross_entropy, mse_loss, nll_loss
from .multihead import multi_head_attention_forward
from .normalization import batch_norm, dropout, group_norm, layer_norm, rms_norm
from .pooling import (
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    avg_pool1d,
    avg_pool2d,
    max_pool1d,
    max_pool1d_with_indices,
    max_pool2d,
    max_pool2d_with_indices,
)
from .sampling import interpolate, pad

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "avg_pool1d",
    "avg_pool2d",
    "batch_norm",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cross_entropy",
    "dropout",
    "embedding",
    "gelu",
    "group_norm",
    "interpolate",
    "layer_norm",
    "leaky_relu",
    "linear",
    "log_sigmoid",
    "log_softmax",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool2d_with_indices",
    "mse_loss",
    "pad",
    "relu",
    "rms_norm",
    "scaled_dot_product_attention",
    "sigmoid",
    "silu",
    "softmax",
    "softplus",
    "tanh",
]
# -- recurrent and transformer functions, nll_loss --
__all__ += ["multi_head_attention_forward", "nll_loss"]
