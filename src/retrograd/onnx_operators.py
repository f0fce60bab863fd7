"""torch's ``torch.onnx.operators``: ``shape_as_tensor`` and ``reshape_from_tensor_shape``,
which model code written to export with dynamic sizes calls in its forward (fairseq's
``SinusoidalPositionalEmbedding`` takes ``bsz, seq_len`` from ``shape_as_tensor(input)`` and
views by them). They mean here what they mean in eager torch: the sizes as an ``int64``
tensor, and a reshape to the sizes a tensor holds. ``import torch.onnx.operators`` finds this
module (``module_paths``).

>>> import retrograd as rg
>>> import retrograd.onnx.operators as operators
>>> operators.shape_as_tensor(rg.ones(2, 3)).tolist()
[2, 3]
"""

from __future__ import annotations

from typing import Any

from .errors import DTypeError, ShapeError
from .tensor import Tensor, tensor

__all__ = ["reshape_from_tensor_shape", "shape_as_tensor"]


def shape_as_tensor(x: Tensor) -> Tensor:
    """The sizes of ``x`` as a 1-d ``int64`` tensor (no gradient: sizes are not
    differentiable), on ``x``'s device."""
    if not isinstance(x, Tensor):
        raise DTypeError(
            f"onnx.operators.shape_as_tensor: expected a Tensor, got {type(x).__name__}"
        )
    return tensor(list(x.shape), dtype="int64", device=x.device)


def reshape_from_tensor_shape(x: Tensor, shape: Any) -> Tensor:
    """``x`` reshaped to the sizes ``shape`` holds (a 1-d integer tensor; one size may be
    ``-1``), as ``x.reshape(shape.tolist())``."""
    if not isinstance(x, Tensor):
        raise DTypeError(
            f"onnx.operators.reshape_from_tensor_shape: expected a Tensor, got {type(x).__name__}"
        )
    if not isinstance(shape, Tensor) or shape.dtype.is_floating_point or shape.dim() != 1:
        raise ShapeError(
            f"onnx.operators.reshape_from_tensor_shape: the shape must be a 1-d integer "
            f"tensor, got {shape!r}"
        )
    return x.reshape(tuple(int(size) for size in shape.tolist()))
