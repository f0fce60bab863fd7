"""torchvision.models over retrograd: ResNet, VGG and MobileNetV2 with torchvision's parameter names
(``weights=None`` only; nothing is downloaded)."""

from .mobilenetv2 import MobileNetV2, mobilenet_v2
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
    "MobileNetV2",
    "ResNet",
    "mobilenet_v2",
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
