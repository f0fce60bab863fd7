"""What torchvision's model builders share here: pretrained weights are refused (nothing is
downloaded), with a message that says how to load a checkpoint instead."""

from __future__ import annotations

from enum import Enum
from typing import Any

from ...errors import InvalidArgumentError


def refuse_weights(name: str, weights: Any, kwargs: dict[str, Any]) -> None:
    pretrained = kwargs.pop("pretrained", False)
    if weights is not None or pretrained:
        raise InvalidArgumentError(
            f"{name}(weights={weights!r}): retrograd downloads no pretrained weights; build "
            f"{name}(weights=None) and load a torchvision checkpoint you have with "
            "model.load_state_dict(retrograd.load(path))"
        )


class _Weights(Enum):
    """torchvision's weight enums by name (``ResNet18_Weights.DEFAULT``...): importable and
    comparable, refused when passed to a builder (nothing is downloaded). ``transforms()`` is
    the ImageNet preprocessing of the checkpoint (resize, centre crop, normalize)."""

    def transforms(self) -> Any:
        from ..transforms._presets import ImageClassification

        return ImageClassification(crop_size=224, resize_size=self._resize_size())

    def _resize_size(self) -> int:
        return 232 if self.name.endswith("V2") else 256

    @classmethod
    def verify(cls, obj: Any) -> Any:
        if obj is None or isinstance(obj, cls):
            return obj
        if isinstance(obj, str):
            return cls[obj.replace(cls.__name__ + ".", "")]
        raise InvalidArgumentError(f"{obj!r} is not a member of {cls.__name__}")


def _weights_enum(name: str, *versions: str) -> type:
    members = {version: version for version in versions}
    enum = _Weights(name, members)
    enum.DEFAULT = enum[versions[-1]]  # (an alias of the newest, as torchvision's)
    return enum


ResNet18_Weights = _weights_enum("ResNet18_Weights", "IMAGENET1K_V1")
ResNet34_Weights = _weights_enum("ResNet34_Weights", "IMAGENET1K_V1")
ResNet50_Weights = _weights_enum("ResNet50_Weights", "IMAGENET1K_V1", "IMAGENET1K_V2")
ResNet101_Weights = _weights_enum("ResNet101_Weights", "IMAGENET1K_V1", "IMAGENET1K_V2")
ResNet152_Weights = _weights_enum("ResNet152_Weights", "IMAGENET1K_V1", "IMAGENET1K_V2")
ResNeXt50_32X4D_Weights = _weights_enum("ResNeXt50_32X4D_Weights", "IMAGENET1K_V1", "IMAGENET1K_V2")
Wide_ResNet50_2_Weights = _weights_enum("Wide_ResNet50_2_Weights", "IMAGENET1K_V1", "IMAGENET1K_V2")
VGG11_Weights = _weights_enum("VGG11_Weights", "IMAGENET1K_V1")
VGG11_BN_Weights = _weights_enum("VGG11_BN_Weights", "IMAGENET1K_V1")
VGG13_Weights = _weights_enum("VGG13_Weights", "IMAGENET1K_V1")
VGG16_Weights = _weights_enum("VGG16_Weights", "IMAGENET1K_V1")
VGG16_BN_Weights = _weights_enum("VGG16_BN_Weights", "IMAGENET1K_V1")
VGG19_Weights = _weights_enum("VGG19_Weights", "IMAGENET1K_V1")
MobileNet_V2_Weights = _weights_enum("MobileNet_V2_Weights", "IMAGENET1K_V1", "IMAGENET1K_V2")
