"""Dropout layers: ``Dropout`` (elements), ``Dropout1d/2d/3d`` (whole channels),
``AlphaDropout`` and ``FeatureAlphaDropout`` (SELU networks'), the
identity in eval mode (``inplace=True`` is accepted: nothing is modified in place)."""

from __future__ import annotations

from ...errors import InvalidArgumentError
from ...tensor import Tensor
from .. import functional as F  # noqa: N812 (PyTorch's idiom)
from .module import Module

__all__ = [
    "AlphaDropout",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Dropout3d",
    "FeatureAlphaDropout",
]


class _DropoutNd(Module):
    """What torch's dropout layers share (its ``_DropoutNd``): ``p``, ``inplace`` (accepted:
    nothing is modified in place), the functional form ``_fn`` applied in training mode, the
    ``extra_repr``. Each layer subclasses it alone, as in torch, so that ``isinstance(m,
    nn.Dropout)`` holds for element dropout only, not for ``Dropout2d``."""

    _fn = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise InvalidArgumentError(
                f"{type(self).__name__}: p must be between 0 and 1, got {p!r}"
            )
        self.p, self.inplace = p, inplace

    def forward(self, input: Tensor) -> Tensor:
        return self._fn(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero each element with probability ``p`` in training mode; the identity in eval mode.
    ``inplace=True`` is accepted (nothing is modified in place).

    >>> Dropout(0.5).eval()(rg.ones((2, 2))).tolist()
    [[1.0, 1.0], [1.0, 1.0]]
    """


class Dropout1d(_DropoutNd):
    """Zero whole channels of ``[N, C, L]``."""

    _fn = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    """Zero whole channels of ``[N, C, H, W]`` (torch's ``Dropout2d``)."""

    _fn = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    _fn = staticmethod(F.dropout3d)


class AlphaDropout(_DropoutNd):
    """``F.alpha_dropout`` in training mode: dropped elements take SELU's saturation value
    and an affine map keeps the mean and variance."""

    _fn = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    """``F.feature_alpha_dropout``: alpha dropout of whole channels."""

    _fn = staticmethod(F.feature_alpha_dropout)
