"""torchvision.models over retrograd: ResNet, VGG and MobileNetV2 with torchvision's parameter names
(``weights=None`` only; nothing is downloaded)."""

from ._api import (
    MobileNet_V2_Weights,
    ResNet18_Weights,
    ResNet34_Weights,
    ResNet50_Weights,
    ResNet101_Weights,
    ResNet152_Weights,
    ResNeXt50_32X4D_Weights,
    VGG11_BN_Weights,
    VGG11_Weights,
    VGG13_Weights,
    VGG16_BN_Weights,
    VGG16_Weights,
    VGG19_Weights,
    Wide_ResNet50_2_Weights,
)
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
    "MobileNet_V2_Weights",
    "ResNeXt50_32X4D_Weights",
    "ResNet",
    "ResNet18_Weights",
    "ResNet34_Weights",
    "ResNet50_Weights",
    "ResNet101_Weights",
    "ResNet152_Weights",
    "VGG11_BN_Weights",
    "VGG11_Weights",
    "VGG13_Weights",
    "VGG16_BN_Weights",
    "VGG16_Weights",
    "VGG19_Weights",
    "Wide_ResNet50_2_Weights",
    "get_model",
    "get_model_builder",
    "list_models",
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


def list_models(module: object = None) -> list[str]:
    """The builders' names, sorted."""
    return sorted(name for name in _BUILDERS)


def get_model_builder(name: str):
    try:
        return _BUILDERS[name.lower()]
    except KeyError:
        raise ValueError(
            f"Unknown model {name}; the models here: {', '.join(list_models())}"
        ) from None


def get_model(name: str, **config: object):
    """The model ``name`` built with ``config`` (``weights=None`` only)."""
    return get_model_builder(name)(**config)


_BUILDERS = {
    builder.__name__: builder
    for builder in (
        mobilenet_v2,
        resnet18,
        resnet34,
        resnet50,
        resnet101,
        resnet152,
        resnext50_32x4d,
        wide_resnet50_2,
        vgg11,
        vgg11_bn,
        vgg13,
        vgg16,
        vgg16_bn,
        vgg19,
    )
}
