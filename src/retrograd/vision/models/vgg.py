"""torchvision.models.vgg over retrograd (torchvision's parameter names; weights=None only)."""

from __future__ import annotations

from typing import Any

from ... import nn
from ...tensor import Tensor
from ._api import refuse_weights

cfgs: dict[str, list[Any]] = {
    "A": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "B": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "D": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "E": [
        64,
        64,
        "M",
        128,
        128,
        "M",
        256,
        256,
        256,
        256,
        "M",
        512,
        512,
        512,
        512,
        "M",
        512,
        512,
        512,
        512,
        "M",
    ],
}


class VGG(nn.Module):
    def __init__(
        self,
        features: nn.Module,
        num_classes: int = 1000,
        init_weights: bool = True,
        dropout: float = 0.5,
    ) -> None:
        super().__init__()
        self.features = features
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(4096, num_classes),
        )
        if init_weights:
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                    if m.bias is not None:
                        nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.constant_(m.bias, 0)

    def forward(self, x: Tensor) -> Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(x.flatten(1))


def make_layers(cfg: list[Any], batch_norm: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    in_channels = 3
    for v in cfg:
        if v == "M":
            layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
        else:
            layers.append(nn.Conv2d(in_channels, v, kernel_size=3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU(inplace=True))
            in_channels = v
    return nn.Sequential(*layers)


def _vgg(name: str, cfg: str, batch_norm: bool, weights: Any, **kwargs: Any) -> VGG:
    refuse_weights(name, weights, kwargs)
    return VGG(make_layers(cfgs[cfg], batch_norm=batch_norm), **kwargs)


def vgg11(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> VGG:
    return _vgg("vgg11", "A", False, weights, **kwargs)


def vgg11_bn(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> VGG:
    return _vgg("vgg11_bn", "A", True, weights, **kwargs)


def vgg13(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> VGG:
    return _vgg("vgg13", "B", False, weights, **kwargs)


def vgg16(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> VGG:
    return _vgg("vgg16", "D", False, weights, **kwargs)


def vgg16_bn(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> VGG:
    return _vgg("vgg16_bn", "D", True, weights, **kwargs)


def vgg19(*, weights: Any = None, progress: bool = True, **kwargs: Any) -> VGG:
    return _vgg("vgg19", "E", False, weights, **kwargs)
