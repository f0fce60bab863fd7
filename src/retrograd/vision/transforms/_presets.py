"""torchvision.transforms._presets.ImageClassification: the evaluation preprocessing of the
classification checkpoints (what ``Weights.transforms()`` gives)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import nn as _nn
from . import functional as F  # noqa: N812 (torchvision's name)
from .functional import InterpolationMode


class ImageClassification(_nn.Module):
    """Resize the smaller edge to ``resize_size``, centre-crop ``crop_size``, scale to float in
    [0, 1] and normalize by ImageNet's mean and std."""

    def __init__(
        self,
        *,
        crop_size: int,
        resize_size: int = 256,
        mean: Sequence[float] = (0.485, 0.456, 0.406),
        std: Sequence[float] = (0.229, 0.224, 0.225),
        interpolation: Any = InterpolationMode.BILINEAR,
        antialias: bool | None = True,
    ) -> None:
        super().__init__()
        self.crop_size, self.resize_size = [crop_size], [resize_size]
        self.mean, self.std = list(mean), list(std)
        self.interpolation, self.antialias = F._interpolation(interpolation), antialias

    def forward(self, img: Any) -> Any:
        from .. import _lib as rg

        img = F.resize(img, self.resize_size, self.interpolation, antialias=self.antialias)
        img = F.center_crop(img, self.crop_size)
        if F._is_pil_image(img):
            img = F.pil_to_tensor(img)
        img = F.convert_image_dtype(img, rg.float32)
        return F.normalize(img, self.mean, self.std)
