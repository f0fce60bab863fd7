"""torchvision.models over retrograd: ResNet and VGG with torchvision's parameter names
(``weights=None`` only; nothing is downloaded)."""

from .resnet import (
    BasicBlock,
    Bottleneck,
    ResNet,
    resnet18,
    resnet34,
    resnet50,
    resnet101,
    resnet152,
    resnext50_32x4d,
    wide_resnet50_2,
)
from .vgg import VGG, vgg11, vgg11_bn, vgg13, vgg16, vgg16_bn, vgg19

__all__ = [
    "VGG",
    "BasicBlock",
    "Bottleneck",
    "ResNet",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "vgg11",
    "vgg11_bn",
    "vgg13",
    "vgg16",
    "vgg16_bn",
    "vgg19",
    "wide_resnet50_2",
]
