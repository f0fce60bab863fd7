"""torch's top-level forms of functional operations (``torch.conv2d``, ``torch.pdist``,
``torch.cosine_similarity``, ``torch.layer_norm``, ``torch.dropout``...), which real code calls
as often as the ``torch.nn.functional`` ones: the same functions where torch's signatures agree
(:data:`SAME_AS_FUNCTIONAL`), and thin forms where they differ (``torch.dropout(input, p,
train)``, ``torch.embedding(weight, indices)``)."""

from __future__ import annotations

from typing import Any

from . import alpha_dropout as _alpha_dropout
from . import dropout as _dropout
from . import embedding as _embedding
from . import feature_alpha_dropout as _feature_alpha_dropout

#: the functional names torch also exports at top level with the same leading arguments
SAME_AS_FUNCTIONAL = (
    "adaptive_avg_pool1d",
    "avg_pool1d",
    "bilinear",
    "celu",
    "channel_shuffle",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "cosine_similarity",
    "group_norm",
    "hardshrink",
    "layer_norm",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool3d",
    "pairwise_distance",
    "pdist",
    "pixel_shuffle",
    "pixel_unshuffle",
    "prelu",
    "rms_norm",
    "selu",
    "threshold",
)


def dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002 (torch's names)
    """``torch.dropout(input, p, train)``: :func:`~retrograd.nn.functional.dropout`."""
    return _dropout(input, p, train)


def alpha_dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    """``torch.alpha_dropout(input, p, train)``."""
    return _alpha_dropout(input, p, train)


def feature_alpha_dropout(input: Any, p: float, train: bool) -> Any:  # noqa: A002
    """``torch.feature_alpha_dropout(input, p, train)``."""
    return _feature_alpha_dropout(input, p, train)


def embedding(
    weight: Any,
    indices: Any,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Any:
    """``torch.embedding(weight, indices)``: the weight first, and ``padding_idx=-1`` for none
    (the ATen form the functional one calls)."""
    return _embedding(
        indices,
        weight,
        None if padding_idx == -1 else padding_idx,
        scale_grad_by_freq=scale_grad_by_freq,
        sparse=sparse,
    )


__all__ = ["alpha_dropout", "dropout", "embedding", "feature_alpha_dropout"]
