"""The models ``retrograd train`` and ``retrograd graph`` build: a small CNN and an MLP.

>>> import retrograd as rg
>>> model = build_model("cnn", (1, 8, 8), classes=10)
>>> model(rg.zeros((2, 1, 8, 8))).shape
(2, 10)
"""

from __future__ import annotations

from .. import nn
from ..errors import InvalidArgumentError

__all__ = ["MODELS", "build_model"]

MODELS = ("cnn", "mlp")


def build_model(name: str, image_shape: tuple[int, int, int], classes: int = 10) -> nn.Module:
    """``"cnn"``: two 3x3 convolutions (64 and 128 channels, padding 1), each followed by ReLU
    and 2x2 max pooling, then a linear classifier. ``"mlp"``: flatten, a 128-wide hidden layer
    with layer norm and GELU, then a linear classifier.

    Parameters are drawn from the generator :func:`retrograd.seed` seeds, on the current
    backend.
    """
    channels, height, width = image_shape
    if name == "cnn":
        pooled = (height // 2 // 2) * (width // 2 // 2)
        return nn.Sequential(
            nn.Conv2d(channels, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(128 * pooled, classes),
        )
    if name == "mlp":
        hidden = 128
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(channels * height * width, hidden),
            nn.LayerNorm(hidden),
            nn.GELU(),
            nn.Linear(hidden, classes),
        )
    raise InvalidArgumentError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
