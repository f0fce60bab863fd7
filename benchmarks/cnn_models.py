"""Two real convolutional models, written once as PyTorch users write them, for either library.

``make_resnet18(lib, nn, F)`` is torchvision's ``resnet18`` (``torchvision/models/resnet.py``:
``BasicBlock``, ``_make_layer``, the 7x7 stem, max-pool, four stages, adaptive average pool,
``fc``; its initialization) and ``make_unet(lib, nn, F)`` is milesial's Pytorch-UNet
(``unet/unet_parts.py`` and ``unet/unet_model.py``: ``DoubleConv``, ``Down``, ``Up`` with a
transposed convolution or bilinear upsampling, ``OutConv``). ``lib`` is ``torch`` or
``retrograd`` (for ``cat`` and ``flatten``), ``nn`` and ``F`` its ``nn`` and
``nn.functional``: the same text builds both, so that a benchmark or a test compares the
libraries on one model. The only departure from the originals is ``x.shape[2]`` for
``x.size()[2]``.

The benchmarks (``bench_resnet.py``) and the oracle tests (``tests/test_models_vs_torch.py``)
import this file.
"""

from __future__ import annotations


def make_resnet18(lib, nn, F, num_classes: int = 1000, width: int = 64):  # noqa: N803
    """torchvision's ``resnet18(num_classes=...)``; ``width`` (64 there) scales every stage,
    so that the float64 oracle test can run a narrower copy of the same code."""

    def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
        return nn.Conv2d(
            in_planes,
            out_planes,
            kernel_size=3,
            stride=stride,
            padding=dilation,
            groups=groups,
            bias=False,
            dilation=dilation,
        )

    def conv1x1(in_planes, out_planes, stride=1):
        return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv3x3(inplanes, planes, stride)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(planes, planes)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x
            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)
            out = self.conv2(out)
            out = self.bn2(out)
            if self.downsample is not None:
                identity = self.downsample(x)
            out += identity
            out = self.relu(out)
            return out

    class ResNet(nn.Module):
        def __init__(self, block, layers):
            super().__init__()
            self.inplanes = width
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(block, width, layers[0])
            self.layer2 = self._make_layer(block, 2 * width, layers[1], stride=2)
            self.layer3 = self._make_layer(block, 4 * width, layers[2], stride=2)
            self.layer4 = self._make_layer(block, 8 * width, layers[3], stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8 * width * block.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

        def _make_layer(self, block, planes, blocks, stride=1):
            downsample = None
            if stride != 1 or self.inplanes != planes * block.expansion:
                downsample = nn.Sequential(
                    conv1x1(self.inplanes, planes * block.expansion, stride),
                    nn.BatchNorm2d(planes * block.expansion),
                )
            layers = [block(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * block.expansion
            for _ in range(1, blocks):
                layers.append(block(self.inplanes, planes))
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.maxpool(x)
            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
            x = self.layer4(x)
            x = self.avgpool(x)
            x = lib.flatten(x, 1)
            x = self.fc(x)
            return x

    return ResNet(BasicBlock, [2, 2, 2, 2])


def make_unet(
    lib,
    nn,
    F,  # noqa: N803
    n_channels: int = 3,
    n_classes: int = 2,
    bilinear: bool = False,
    width: int = 64,
):
    """milesial's ``UNet(n_channels, n_classes, bilinear)``; ``width`` (64 there) scales every
    level, for the float64 oracle test."""

    class DoubleConv(nn.Module):
        """(convolution => [BN] => ReLU) * 2"""

        def __init__(self, in_channels, out_channels, mid_channels=None):
            super().__init__()
            if not mid_channels:
                mid_channels = out_channels
            self.double_conv = nn.Sequential(
                nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(mid_channels),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(out_channels),
                nn.ReLU(inplace=True),
            )

        def forward(self, x):
            return self.double_conv(x)

    class Down(nn.Module):
        """Downscaling with maxpool then double conv"""

        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.maxpool_conv = nn.Sequential(
                nn.MaxPool2d(2), DoubleConv(in_channels, out_channels)
            )

        def forward(self, x):
            return self.maxpool_conv(x)

    class Up(nn.Module):
        """Upscaling then double conv"""

        def __init__(self, in_channels, out_channels, bilinear=True):
            super().__init__()
            if bilinear:
                self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
                self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
            else:
                self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
                self.conv = DoubleConv(in_channels, out_channels)

        def forward(self, x1, x2):
            x1 = self.up(x1)
            diff_y = x2.shape[2] - x1.shape[2]
            diff_x = x2.shape[3] - x1.shape[3]
            x1 = F.pad(x1, [diff_x // 2, diff_x - diff_x // 2, diff_y // 2, diff_y - diff_y // 2])
            x = lib.cat([x2, x1], dim=1)
            return self.conv(x)

    class OutConv(nn.Module):
        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

        def forward(self, x):
            return self.conv(x)

    class UNet(nn.Module):
        def __init__(self, n_channels, n_classes, bilinear=False):
            super().__init__()
            self.n_channels = n_channels
            self.n_classes = n_classes
            self.bilinear = bilinear

            self.inc = DoubleConv(n_channels, width)
            self.down1 = Down(width, 2 * width)
            self.down2 = Down(2 * width, 4 * width)
            self.down3 = Down(4 * width, 8 * width)
            factor = 2 if bilinear else 1
            self.down4 = Down(8 * width, 16 * width // factor)
            self.up1 = Up(16 * width, 8 * width // factor, bilinear)
            self.up2 = Up(8 * width, 4 * width // factor, bilinear)
            self.up3 = Up(4 * width, 2 * width // factor, bilinear)
            self.up4 = Up(2 * width, width, bilinear)
            self.outc = OutConv(width, n_classes)

        def forward(self, x):
            x1 = self.inc(x)
            x2 = self.down1(x1)
            x3 = self.down2(x2)
            x4 = self.down3(x3)
            x5 = self.down4(x4)
            x = self.up1(x5, x4)
            x = self.up2(x, x3)
            x = self.up3(x, x2)
            x = self.up4(x, x1)
            logits = self.outc(x)
            return logits

    return UNet(n_channels, n_classes, bilinear)
