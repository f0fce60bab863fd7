"""A zoo of real models, written once as torchvision and timm write them, for either library.

Every ``make_*(torch, nn, F, ...)`` builds its model from the given library: ``torch`` is
``torch`` or ``retrograd``, ``nn`` and ``F`` its ``nn`` and ``nn.functional``. The bodies follow
the originals line for line (``torchvision/models/{mobilenetv2,mobilenetv3,efficientnet,
densenet,shufflenetv2,squeezenet,googlenet,vgg,convnext,swin_transformer}.py``,
``torchvision/ops/{misc,stochastic_depth}.py``, timm's ``vision_transformer.py`` and
``layers/{patch_embed,mlp,drop}.py``, facebookresearch/DiT's ``models.py``): the same layers,
the same ops, the same initialization. What differs is only the size: every builder takes the
widths and depths the original hard-codes as arguments (defaulting to small ones), so that the
float64 oracle tests in ``tests/test_model_zoo.py`` run each model in well under a second.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict, namedtuple
from functools import partial

import numpy as np


def _make_divisible(v, divisor, min_value=None):
    """torchvision.models._utils._make_divisible (from the TensorFlow MobileNet repository)."""
    if min_value is None:
        min_value = divisor
    new_v = max(min_value, int(v + divisor / 2) // divisor * divisor)
    # Make sure that round down does not go down by more than 10%.
    if new_v < 0.9 * v:
        new_v += divisor
    return new_v


def _ops(torch, nn, F):
    """torchvision.ops.misc and torchvision.ops.stochastic_depth, for the given library."""

    class ConvNormActivation(nn.Sequential):
        def __init__(
            self,
            in_channels,
            out_channels,
            kernel_size=3,
            stride=1,
            padding=None,
            groups=1,
            norm_layer=nn.BatchNorm2d,
            activation_layer=nn.ReLU,
            dilation=1,
            inplace=True,
            bias=None,
            conv_layer=nn.Conv2d,
        ):
            if padding is None:
                if isinstance(kernel_size, int) and isinstance(dilation, int):
                    padding = (kernel_size - 1) // 2 * dilation
                else:
                    _conv_dim = (
                        len(kernel_size) if isinstance(kernel_size, tuple) else len(dilation)
                    )
                    kernel_size = (
                        (kernel_size,) * _conv_dim if isinstance(kernel_size, int) else kernel_size
                    )
                    dilation = (dilation,) * _conv_dim if isinstance(dilation, int) else dilation
                    padding = tuple(
                        (kernel_size[i] - 1) // 2 * dilation[i] for i in range(_conv_dim)
                    )
            if bias is None:
                bias = norm_layer is None

            layers = [
                conv_layer(
                    in_channels,
                    out_channels,
                    kernel_size,
                    stride,
                    padding,
                    dilation=dilation,
                    groups=groups,
                    bias=bias,
                )
            ]

            if norm_layer is not None:
                layers.append(norm_layer(out_channels))

            if activation_layer is not None:
                params = {} if inplace is None else {"inplace": inplace}
                layers.append(activation_layer(**params))
            super().__init__(*layers)
            self.out_channels = out_channels

    class Conv2dNormActivation(ConvNormActivation):
        def __init__(
            self,
            in_channels,
            out_channels,
            kernel_size=3,
            stride=1,
            padding=None,
            groups=1,
            norm_layer=nn.BatchNorm2d,
            activation_layer=nn.ReLU,
            dilation=1,
            inplace=True,
            bias=None,
        ):
            super().__init__(
                in_channels,
                out_channels,
                kernel_size,
                stride,
                padding,
                groups,
                norm_layer,
                activation_layer,
                dilation,
                inplace,
                bias,
                nn.Conv2d,
            )

    class SqueezeExcitation(nn.Module):
        def __init__(
            self,
            input_channels,
            squeeze_channels,
            activation=nn.ReLU,
            scale_activation=nn.Sigmoid,
        ):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
            self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
            self.activation = activation()
            self.scale_activation = scale_activation()

        def _scale(self, input):
            scale = self.avgpool(input)
            scale = self.fc1(scale)
            scale = self.activation(scale)
            scale = self.fc2(scale)
            return self.scale_activation(scale)

        def forward(self, input):
            scale = self._scale(input)
            return scale * input

    class MLP(nn.Sequential):
        def __init__(
            self,
            in_channels,
            hidden_channels,
            norm_layer=None,
            activation_layer=nn.ReLU,
            inplace=None,
            bias=True,
            dropout=0.0,
        ):
            params = {} if inplace is None else {"inplace": inplace}

            layers = []
            in_dim = in_channels
            for hidden_dim in hidden_channels[:-1]:
                layers.append(nn.Linear(in_dim, hidden_dim, bias=bias))
                if norm_layer is not None:
                    layers.append(norm_layer(hidden_dim))
                layers.append(activation_layer(**params))
                layers.append(nn.Dropout(dropout, **params))
                in_dim = hidden_dim

            layers.append(nn.Linear(in_dim, hidden_channels[-1], bias=bias))
            layers.append(nn.Dropout(dropout, **params))

            super().__init__(*layers)

    class Permute(nn.Module):
        def __init__(self, dims):
            super().__init__()
            self.dims = dims

        def forward(self, x):
            return torch.permute(x, self.dims)

    def stochastic_depth(input, p, mode, training=True):
        if p < 0.0 or p > 1.0:
            raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
        if mode not in ["batch", "row"]:
            raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
        if not training or p == 0.0:
            return input

        survival_rate = 1.0 - p
        if mode == "row":
            size = [input.shape[0]] + [1] * (input.ndim - 1)
        else:
            size = [1] * input.ndim
        noise = torch.empty(size, dtype=input.dtype, device=input.device)
        noise = noise.bernoulli_(survival_rate)
        if survival_rate > 0.0:
            noise.div_(survival_rate)
        return input * noise

    class StochasticDepth(nn.Module):
        def __init__(self, p, mode):
            super().__init__()
            self.p = p
            self.mode = mode

        def forward(self, input):
            return stochastic_depth(input, self.p, self.mode, self.training)

    class ops:
        pass

    ops.Conv2dNormActivation = Conv2dNormActivation
    ops.SqueezeExcitation = SqueezeExcitation
    ops.MLP = MLP
    ops.Permute = Permute
    ops.stochastic_depth = stochastic_depth
    ops.StochasticDepth = StochasticDepth
    return ops


# -- MobileNetV2 ----------------------------------------------------------------------------------
MOBILENET_V2_SETTING = [
    # t, c, n, s
    [1, 16, 1, 1],
    [6, 24, 2, 2],
    [6, 32, 3, 2],
    [6, 64, 4, 2],
    [6, 96, 3, 1],
    [6, 160, 3, 2],
    [6, 320, 1, 1],
]


def make_mobilenet_v2(
    torch,
    nn,
    F,
    num_classes=1000,
    width_mult=0.25,
    inverted_residual_setting=None,
    last_channel=1280,
    dropout=0.2,
):
    """torchvision's ``MobileNetV2``; ``last_channel`` (1280 there) is an argument."""
    Conv2dNormActivation = _ops(torch, nn, F).Conv2dNormActivation

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride, expand_ratio, norm_layer=None):
            super().__init__()
            self.stride = stride
            if stride not in [1, 2]:
                raise ValueError(f"stride should be 1 or 2 instead of {stride}")

            if norm_layer is None:
                norm_layer = nn.BatchNorm2d

            hidden_dim = int(round(inp * expand_ratio))
            self.use_res_connect = self.stride == 1 and inp == oup

            layers = []
            if expand_ratio != 1:
                # pw
                layers.append(
                    Conv2dNormActivation(
                        inp,
                        hidden_dim,
                        kernel_size=1,
                        norm_layer=norm_layer,
                        activation_layer=nn.ReLU6,
                    )
                )
            layers.extend(
                [
                    # dw
                    Conv2dNormActivation(
                        hidden_dim,
                        hidden_dim,
                        stride=stride,
                        groups=hidden_dim,
                        norm_layer=norm_layer,
                        activation_layer=nn.ReLU6,
                    ),
                    # pw-linear
                    nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
                    norm_layer(oup),
                ]
            )
            self.conv = nn.Sequential(*layers)
            self.out_channels = oup
            self._is_cn = stride > 1

        def forward(self, x):
            if self.use_res_connect:
                return x + self.conv(x)
            else:
                return self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(
            self,
            num_classes=1000,
            width_mult=1.0,
            inverted_residual_setting=None,
            round_nearest=8,
            block=None,
            norm_layer=None,
            dropout=0.2,
        ):
            super().__init__()

            if block is None:
                block = InvertedResidual

            if norm_layer is None:
                norm_layer = nn.BatchNorm2d

            input_channel = 32

            if inverted_residual_setting is None:
                inverted_residual_setting = MOBILENET_V2_SETTING

            # only check the first element, assuming user knows t,c,n,s are required
            if len(inverted_residual_setting) == 0 or len(inverted_residual_setting[0]) != 4:
                raise ValueError(
                    f"inverted_residual_setting should be non-empty or a 4-element list, got {inverted_residual_setting}"
                )

            # building first layer
            input_channel = _make_divisible(input_channel * width_mult, round_nearest)
            self.last_channel = _make_divisible(last_channel * max(1.0, width_mult), round_nearest)
            features = [
                Conv2dNormActivation(
                    3, input_channel, stride=2, norm_layer=norm_layer, activation_layer=nn.ReLU6
                )
            ]
            # building inverted residual blocks
            for t, c, n, s in inverted_residual_setting:
                output_channel = _make_divisible(c * width_mult, round_nearest)
                for i in range(n):
                    stride = s if i == 0 else 1
                    features.append(
                        block(
                            input_channel,
                            output_channel,
                            stride,
                            expand_ratio=t,
                            norm_layer=norm_layer,
                        )
                    )
                    input_channel = output_channel
            # building last several layers
            features.append(
                Conv2dNormActivation(
                    input_channel,
                    self.last_channel,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=nn.ReLU6,
                )
            )
            # make it nn.Sequential
            self.features = nn.Sequential(*features)

            # building classifier
            self.classifier = nn.Sequential(
                nn.Dropout(p=dropout),
                nn.Linear(self.last_channel, num_classes),
            )

            # weight initialization
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.zeros_(m.bias)

        def _forward_impl(self, x):
            x = self.features(x)
            # Cannot use "squeeze" as batch-size can be 1
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x

        def forward(self, x):
            return self._forward_impl(x)

    return MobileNetV2(
        num_classes=num_classes,
        width_mult=width_mult,
        inverted_residual_setting=inverted_residual_setting,
        dropout=dropout,
    )


# -- MobileNetV3 ----------------------------------------------------------------------------------
def make_mobilenet_v3_small(
    torch,
    nn,
    F,
    num_classes=1000,
    width_mult=0.25,
    reduced_tail=False,
    dilated=False,
    dropout=0.2,
):
    """torchvision's ``mobilenet_v3_small`` (``_mobilenet_v3_conf("mobilenet_v3_small")``)."""
    ops = _ops(torch, nn, F)
    Conv2dNormActivation = ops.Conv2dNormActivation
    SElayer = ops.SqueezeExcitation

    class InvertedResidualConfig:
        # Stores information listed at Tables 1 and 2 of the MobileNetV3 paper
        def __init__(
            self,
            input_channels,
            kernel,
            expanded_channels,
            out_channels,
            use_se,
            activation,
            stride,
            dilation,
            width_mult,
        ):
            self.input_channels = self.adjust_channels(input_channels, width_mult)
            self.kernel = kernel
            self.expanded_channels = self.adjust_channels(expanded_channels, width_mult)
            self.out_channels = self.adjust_channels(out_channels, width_mult)
            self.use_se = use_se
            self.use_hs = activation == "HS"
            self.stride = stride
            self.dilation = dilation

        @staticmethod
        def adjust_channels(channels, width_mult):
            return _make_divisible(channels * width_mult, 8)

    class InvertedResidual(nn.Module):
        # Implemented as described at section 5 of MobileNetV3 paper
        def __init__(
            self,
            cnf,
            norm_layer,
            se_layer=partial(SElayer, scale_activation=nn.Hardsigmoid),
        ):
            super().__init__()
            if not (1 <= cnf.stride <= 2):
                raise ValueError("illegal stride value")

            self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels

            layers = []
            activation_layer = nn.Hardswish if cnf.use_hs else nn.ReLU

            # expand
            if cnf.expanded_channels != cnf.input_channels:
                layers.append(
                    Conv2dNormActivation(
                        cnf.input_channels,
                        cnf.expanded_channels,
                        kernel_size=1,
                        norm_layer=norm_layer,
                        activation_layer=activation_layer,
                    )
                )

            # depthwise
            stride = 1 if cnf.dilation > 1 else cnf.stride
            layers.append(
                Conv2dNormActivation(
                    cnf.expanded_channels,
                    cnf.expanded_channels,
                    kernel_size=cnf.kernel,
                    stride=stride,
                    dilation=cnf.dilation,
                    groups=cnf.expanded_channels,
                    norm_layer=norm_layer,
                    activation_layer=activation_layer,
                )
            )
            if cnf.use_se:
                squeeze_channels = _make_divisible(cnf.expanded_channels // 4, 8)
                layers.append(se_layer(cnf.expanded_channels, squeeze_channels))

            # project
            layers.append(
                Conv2dNormActivation(
                    cnf.expanded_channels,
                    cnf.out_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
            )

            self.block = nn.Sequential(*layers)
            self.out_channels = cnf.out_channels
            self._is_cn = cnf.stride > 1

        def forward(self, input):
            result = self.block(input)
            if self.use_res_connect:
                result += input
            return result

    class MobileNetV3(nn.Module):
        def __init__(
            self,
            inverted_residual_setting,
            last_channel,
            num_classes=1000,
            block=None,
            norm_layer=None,
            dropout=0.2,
        ):
            super().__init__()

            if not inverted_residual_setting:
                raise ValueError("The inverted_residual_setting should not be empty")

            if block is None:
                block = InvertedResidual

            if norm_layer is None:
                norm_layer = partial(nn.BatchNorm2d, eps=0.001, momentum=0.01)

            layers = []

            # building first layer
            firstconv_output_channels = inverted_residual_setting[0].input_channels
            layers.append(
                Conv2dNormActivation(
                    3,
                    firstconv_output_channels,
                    kernel_size=3,
                    stride=2,
                    norm_layer=norm_layer,
                    activation_layer=nn.Hardswish,
                )
            )

            # building inverted residual blocks
            for cnf in inverted_residual_setting:
                layers.append(block(cnf, norm_layer))

            # building last several layers
            lastconv_input_channels = inverted_residual_setting[-1].out_channels
            lastconv_output_channels = 6 * lastconv_input_channels
            layers.append(
                Conv2dNormActivation(
                    lastconv_input_channels,
                    lastconv_output_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=nn.Hardswish,
                )
            )

            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(
                nn.Linear(lastconv_output_channels, last_channel),
                nn.Hardswish(inplace=True),
                nn.Dropout(p=dropout, inplace=True),
                nn.Linear(last_channel, num_classes),
            )

            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.zeros_(m.bias)

        def _forward_impl(self, x):
            x = self.features(x)

            x = self.avgpool(x)
            x = torch.flatten(x, 1)

            x = self.classifier(x)

            return x

        def forward(self, x):
            return self._forward_impl(x)

    reduce_divider = 2 if reduced_tail else 1
    dilation = 2 if dilated else 1

    bneck_conf = partial(InvertedResidualConfig, width_mult=width_mult)
    adjust_channels = partial(InvertedResidualConfig.adjust_channels, width_mult=width_mult)
    inverted_residual_setting = [
        bneck_conf(16, 3, 16, 16, True, "RE", 2, 1),  # C1
        bneck_conf(16, 3, 72, 24, False, "RE", 2, 1),  # C2
        bneck_conf(24, 3, 88, 24, False, "RE", 1, 1),
        bneck_conf(24, 5, 96, 40, True, "HS", 2, 1),  # C3
        bneck_conf(40, 5, 240, 40, True, "HS", 1, 1),
        bneck_conf(40, 5, 240, 40, True, "HS", 1, 1),
        bneck_conf(40, 5, 120, 48, True, "HS", 1, 1),
        bneck_conf(48, 5, 144, 48, True, "HS", 1, 1),
        bneck_conf(
            48, 5, 288 // reduce_divider, 96 // reduce_divider, True, "HS", 2, dilation
        ),  # C4
        bneck_conf(
            96 // reduce_divider,
            5,
            576 // reduce_divider,
            96 // reduce_divider,
            True,
            "HS",
            1,
            dilation,
        ),
        bneck_conf(
            96 // reduce_divider,
            5,
            576 // reduce_divider,
            96 // reduce_divider,
            True,
            "HS",
            1,
            dilation,
        ),
    ]
    last_channel = adjust_channels(1024 // reduce_divider)  # C5
    return MobileNetV3(
        inverted_residual_setting, last_channel, num_classes=num_classes, dropout=dropout
    )


# -- EfficientNet ---------------------------------------------------------------------------------
def make_efficientnet_b0(
    torch,
    nn,
    F,
    num_classes=1000,
    width_mult=0.25,
    depth_mult=0.5,
    dropout=0.2,
    stochastic_depth_prob=0.2,
):
    """torchvision's ``efficientnet_b0`` (``MBConv``, ``MBConvConfig``, ``EfficientNet``); the
    widths and depths are scaled by ``width_mult`` and ``depth_mult`` as for B1..B7."""
    ops = _ops(torch, nn, F)
    Conv2dNormActivation = ops.Conv2dNormActivation
    SqueezeExcitation = ops.SqueezeExcitation
    StochasticDepth = ops.StochasticDepth

    class MBConvConfig:
        # Stores information listed at Table 1 of the EfficientNet paper & Table 4 of the EfficientNetV2 paper
        def __init__(
            self,
            expand_ratio,
            kernel,
            stride,
            input_channels,
            out_channels,
            num_layers,
            width_mult=1.0,
            depth_mult=1.0,
            block=None,
        ):
            self.expand_ratio = expand_ratio
            self.kernel = kernel
            self.stride = stride
            self.input_channels = self.adjust_channels(input_channels, width_mult)
            self.out_channels = self.adjust_channels(out_channels, width_mult)
            self.num_layers = self.adjust_depth(num_layers, depth_mult)
            if block is None:
                block = MBConv
            self.block = block

        @staticmethod
        def adjust_channels(channels, width_mult, min_value=None):
            return _make_divisible(channels * width_mult, 8, min_value)

        @staticmethod
        def adjust_depth(num_layers, depth_mult):
            return int(math.ceil(num_layers * depth_mult))

    class MBConv(nn.Module):
        def __init__(
            self,
            cnf,
            stochastic_depth_prob,
            norm_layer,
            se_layer=SqueezeExcitation,
        ):
            super().__init__()

            if not (1 <= cnf.stride <= 2):
                raise ValueError("illegal stride value")

            self.use_res_connect = cnf.stride == 1 and cnf.input_channels == cnf.out_channels

            layers = []
            activation_layer = nn.SiLU

            # expand
            expanded_channels = cnf.adjust_channels(cnf.input_channels, cnf.expand_ratio)
            if expanded_channels != cnf.input_channels:
                layers.append(
                    Conv2dNormActivation(
                        cnf.input_channels,
                        expanded_channels,
                        kernel_size=1,
                        norm_layer=norm_layer,
                        activation_layer=activation_layer,
                    )
                )

            # depthwise
            layers.append(
                Conv2dNormActivation(
                    expanded_channels,
                    expanded_channels,
                    kernel_size=cnf.kernel,
                    stride=cnf.stride,
                    groups=expanded_channels,
                    norm_layer=norm_layer,
                    activation_layer=activation_layer,
                )
            )

            # squeeze and excitation
            squeeze_channels = max(1, cnf.input_channels // 4)
            layers.append(
                se_layer(
                    expanded_channels,
                    squeeze_channels,
                    activation=partial(nn.SiLU, inplace=True),
                )
            )

            # project
            layers.append(
                Conv2dNormActivation(
                    expanded_channels,
                    cnf.out_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
            )

            self.block = nn.Sequential(*layers)
            self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
            self.out_channels = cnf.out_channels

        def forward(self, input):
            result = self.block(input)
            if self.use_res_connect:
                result = self.stochastic_depth(result)
                result += input
            return result

    class EfficientNet(nn.Module):
        def __init__(
            self,
            inverted_residual_setting,
            dropout,
            stochastic_depth_prob=0.2,
            num_classes=1000,
            norm_layer=None,
            last_channel=None,
        ):
            super().__init__()

            if not inverted_residual_setting:
                raise ValueError("The inverted_residual_setting should not be empty")

            if norm_layer is None:
                norm_layer = nn.BatchNorm2d

            layers = []

            # building first layer
            firstconv_output_channels = inverted_residual_setting[0].input_channels
            layers.append(
                Conv2dNormActivation(
                    3,
                    firstconv_output_channels,
                    kernel_size=3,
                    stride=2,
                    norm_layer=norm_layer,
                    activation_layer=nn.SiLU,
                )
            )

            # building inverted residual blocks
            total_stage_blocks = sum(cnf.num_layers for cnf in inverted_residual_setting)
            stage_block_id = 0
            for cnf in inverted_residual_setting:
                stage = []
                for _ in range(cnf.num_layers):
                    # copy to avoid modifications. shallow copy is enough
                    block_cnf = copy.copy(cnf)

                    # overwrite info if not the first conv in the stage
                    if stage:
                        block_cnf.input_channels = block_cnf.out_channels
                        block_cnf.stride = 1

                    # adjust stochastic depth probability based on the depth of the stage block
                    sd_prob = stochastic_depth_prob * float(stage_block_id) / total_stage_blocks

                    stage.append(block_cnf.block(block_cnf, sd_prob, norm_layer))
                    stage_block_id += 1

                layers.append(nn.Sequential(*stage))

            # building last several layers
            lastconv_input_channels = inverted_residual_setting[-1].out_channels
            lastconv_output_channels = (
                last_channel if last_channel is not None else 4 * lastconv_input_channels
            )
            layers.append(
                Conv2dNormActivation(
                    lastconv_input_channels,
                    lastconv_output_channels,
                    kernel_size=1,
                    norm_layer=norm_layer,
                    activation_layer=nn.SiLU,
                )
            )

            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(
                nn.Dropout(p=dropout, inplace=True),
                nn.Linear(lastconv_output_channels, num_classes),
            )

            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Linear):
                    init_range = 1.0 / math.sqrt(m.out_features)
                    nn.init.uniform_(m.weight, -init_range, init_range)
                    nn.init.zeros_(m.bias)

        def _forward_impl(self, x):
            x = self.features(x)

            x = self.avgpool(x)
            x = torch.flatten(x, 1)

            x = self.classifier(x)

            return x

        def forward(self, x):
            return self._forward_impl(x)

    bneck_conf = partial(MBConvConfig, width_mult=width_mult, depth_mult=depth_mult)
    inverted_residual_setting = [
        bneck_conf(1, 3, 1, 32, 16, 1),
        bneck_conf(6, 3, 2, 16, 24, 2),
        bneck_conf(6, 5, 2, 24, 40, 2),
        bneck_conf(6, 3, 2, 40, 80, 3),
        bneck_conf(6, 5, 1, 80, 112, 3),
        bneck_conf(6, 5, 2, 112, 192, 4),
        bneck_conf(6, 3, 1, 192, 320, 1),
    ]
    return EfficientNet(
        inverted_residual_setting,
        dropout,
        stochastic_depth_prob=stochastic_depth_prob,
        num_classes=num_classes,
    )


# -- DenseNet -------------------------------------------------------------------------------------
def make_densenet(
    torch,
    nn,
    F,
    growth_rate=4,
    block_config=(2, 2, 2),
    num_init_features=8,
    bn_size=2,
    drop_rate=0,
    num_classes=1000,
    memory_efficient=False,
):
    """torchvision's ``DenseNet`` (``_DenseLayer``, ``_DenseBlock``, ``_Transition``);
    ``memory_efficient`` recomputes each bottleneck under ``torch.utils.checkpoint``."""
    Tensor = torch.Tensor
    cp = torch.utils.checkpoint

    class _DenseLayer(nn.Module):
        def __init__(
            self,
            num_input_features,
            growth_rate,
            bn_size,
            drop_rate,
            memory_efficient=False,
        ):
            super().__init__()
            self.norm1 = nn.BatchNorm2d(num_input_features)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv1 = nn.Conv2d(
                num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False
            )

            self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
            self.relu2 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(
                bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False
            )

            self.drop_rate = float(drop_rate)
            self.memory_efficient = memory_efficient

        def bn_function(self, inputs):
            concated_features = torch.cat(inputs, 1)
            bottleneck_output = self.conv1(self.relu1(self.norm1(concated_features)))
            return bottleneck_output

        def call_checkpoint_bottleneck(self, input):
            def closure(*inputs):
                return self.bn_function(inputs)

            return cp.checkpoint(closure, *input, use_reentrant=False)

        # todo: rewrite when torchscript supports any
        def any_requires_grad(self, input):
            for tensor in input:
                if tensor.requires_grad:
                    return True
            return False

        def forward(self, input):
            if isinstance(input, Tensor):
                prev_features = [input]
            else:
                prev_features = input

            if self.memory_efficient and self.any_requires_grad(prev_features):
                if torch.jit.is_scripting():
                    raise Exception("Memory Efficient not supported in JIT")

                bottleneck_output = self.call_checkpoint_bottleneck(prev_features)
            else:
                bottleneck_output = self.bn_function(prev_features)

            new_features = self.conv2(self.relu2(self.norm2(bottleneck_output)))
            if self.drop_rate > 0:
                new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
            return new_features

    class _DenseBlock(nn.ModuleDict):
        _version = 2

        def __init__(
            self,
            num_layers,
            num_input_features,
            bn_size,
            growth_rate,
            drop_rate,
            memory_efficient=False,
        ):
            super().__init__()
            for i in range(num_layers):
                layer = _DenseLayer(
                    num_input_features + i * growth_rate,
                    growth_rate=growth_rate,
                    bn_size=bn_size,
                    drop_rate=drop_rate,
                    memory_efficient=memory_efficient,
                )
                self.add_module("denselayer%d" % (i + 1), layer)

        def forward(self, init_features):
            features = [init_features]
            for name, layer in self.items():
                new_features = layer(features)
                features.append(new_features)
            return torch.cat(features, 1)

    class _Transition(nn.Sequential):
        def __init__(self, num_input_features, num_output_features):
            super().__init__()
            self.norm = nn.BatchNorm2d(num_input_features)
            self.relu = nn.ReLU(inplace=True)
            self.conv = nn.Conv2d(
                num_input_features, num_output_features, kernel_size=1, stride=1, bias=False
            )
            self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    class DenseNet(nn.Module):
        def __init__(
            self,
            growth_rate=32,
            block_config=(6, 12, 24, 16),
            num_init_features=64,
            bn_size=4,
            drop_rate=0,
            num_classes=1000,
            memory_efficient=False,
        ):
            super().__init__()

            # First convolution
            self.features = nn.Sequential(
                OrderedDict(
                    [
                        (
                            "conv0",
                            nn.Conv2d(
                                3, num_init_features, kernel_size=7, stride=2, padding=3, bias=False
                            ),
                        ),
                        ("norm0", nn.BatchNorm2d(num_init_features)),
                        ("relu0", nn.ReLU(inplace=True)),
                        ("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1)),
                    ]
                )
            )

            # Each denseblock
            num_features = num_init_features
            for i, num_layers in enumerate(block_config):
                block = _DenseBlock(
                    num_layers=num_layers,
                    num_input_features=num_features,
                    bn_size=bn_size,
                    growth_rate=growth_rate,
                    drop_rate=drop_rate,
                    memory_efficient=memory_efficient,
                )
                self.features.add_module("denseblock%d" % (i + 1), block)
                num_features = num_features + num_layers * growth_rate
                if i != len(block_config) - 1:
                    trans = _Transition(
                        num_input_features=num_features, num_output_features=num_features // 2
                    )
                    self.features.add_module("transition%d" % (i + 1), trans)
                    num_features = num_features // 2

            # Final batch norm
            self.features.add_module("norm5", nn.BatchNorm2d(num_features))

            # Linear layer
            self.classifier = nn.Linear(num_features, num_classes)

            # Official init from torch repo.
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.Linear):
                    nn.init.constant_(m.bias, 0)

        def forward(self, x):
            features = self.features(x)
            out = F.relu(features, inplace=True)
            out = F.adaptive_avg_pool2d(out, (1, 1))
            out = torch.flatten(out, 1)
            out = self.classifier(out)
            return out

    return DenseNet(
        growth_rate,
        block_config,
        num_init_features,
        bn_size,
        drop_rate,
        num_classes,
        memory_efficient,
    )


# -- ShuffleNetV2 ---------------------------------------------------------------------------------
def make_shufflenet_v2(
    torch,
    nn,
    F,
    stages_repeats=(2, 2, 2),
    stages_out_channels=(8, 16, 32, 64, 128),
    num_classes=1000,
):
    """torchvision's ``ShuffleNetV2`` (``shufflenet_v2_x0_5`` is ``[4, 8, 4]``,
    ``[24, 48, 96, 192, 1024]``)."""

    def channel_shuffle(x, groups):
        batchsize, num_channels, height, width = x.size()
        channels_per_group = num_channels // groups

        # reshape
        x = x.view(batchsize, groups, channels_per_group, height, width)

        x = torch.transpose(x, 1, 2).contiguous()

        # flatten
        x = x.view(batchsize, num_channels, height, width)

        return x

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride):
            super().__init__()

            if not (1 <= stride <= 3):
                raise ValueError("illegal stride value")
            self.stride = stride

            branch_features = oup // 2
            if (self.stride == 1) and (inp != branch_features << 1):
                raise ValueError(
                    f"Invalid combination of stride {stride}, inp {inp} and oup {oup} values. If stride == 1 then inp should be equal to oup // 2 << 1."
                )

            if self.stride > 1:
                self.branch1 = nn.Sequential(
                    self.depthwise_conv(inp, inp, kernel_size=3, stride=self.stride, padding=1),
                    nn.BatchNorm2d(inp),
                    nn.Conv2d(inp, branch_features, kernel_size=1, stride=1, padding=0, bias=False),
                    nn.BatchNorm2d(branch_features),
                    nn.ReLU(inplace=True),
                )
            else:
                self.branch1 = nn.Sequential()

            self.branch2 = nn.Sequential(
                nn.Conv2d(
                    inp if (self.stride > 1) else branch_features,
                    branch_features,
                    kernel_size=1,
                    stride=1,
                    padding=0,
                    bias=False,
                ),
                nn.BatchNorm2d(branch_features),
                nn.ReLU(inplace=True),
                self.depthwise_conv(
                    branch_features, branch_features, kernel_size=3, stride=self.stride, padding=1
                ),
                nn.BatchNorm2d(branch_features),
                nn.Conv2d(
                    branch_features,
                    branch_features,
                    kernel_size=1,
                    stride=1,
                    padding=0,
                    bias=False,
                ),
                nn.BatchNorm2d(branch_features),
                nn.ReLU(inplace=True),
            )

        @staticmethod
        def depthwise_conv(i, o, kernel_size, stride=1, padding=0, bias=False):
            return nn.Conv2d(i, o, kernel_size, stride, padding, bias=bias, groups=i)

        def forward(self, x):
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.branch2(x2)), dim=1)
            else:
                out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)

            out = channel_shuffle(out, 2)

            return out

    class ShuffleNetV2(nn.Module):
        def __init__(
            self,
            stages_repeats,
            stages_out_channels,
            num_classes=1000,
            inverted_residual=InvertedResidual,
        ):
            super().__init__()

            if len(stages_repeats) != 3:
                raise ValueError("expected stages_repeats as list of 3 positive ints")
            if len(stages_out_channels) != 5:
                raise ValueError("expected stages_out_channels as list of 5 positive ints")
            self._stage_out_channels = stages_out_channels

            input_channels = 3
            output_channels = self._stage_out_channels[0]
            self.conv1 = nn.Sequential(
                nn.Conv2d(input_channels, output_channels, 3, 2, 1, bias=False),
                nn.BatchNorm2d(output_channels),
                nn.ReLU(inplace=True),
            )
            input_channels = output_channels

            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

            # Static annotations for mypy
            stage_names = [f"stage{i}" for i in [2, 3, 4]]
            for name, repeats, output_channels in zip(
                stage_names, stages_repeats, self._stage_out_channels[1:]
            ):
                seq = [inverted_residual(input_channels, output_channels, 2)]
                for i in range(repeats - 1):
                    seq.append(inverted_residual(output_channels, output_channels, 1))
                setattr(self, name, nn.Sequential(*seq))
                input_channels = output_channels

            output_channels = self._stage_out_channels[-1]
            self.conv5 = nn.Sequential(
                nn.Conv2d(input_channels, output_channels, 1, 1, 0, bias=False),
                nn.BatchNorm2d(output_channels),
                nn.ReLU(inplace=True),
            )

            self.fc = nn.Linear(output_channels, num_classes)

        def _forward_impl(self, x):
            # See note [TorchScript super()]
            x = self.conv1(x)
            x = self.maxpool(x)
            x = self.stage2(x)
            x = self.stage3(x)
            x = self.stage4(x)
            x = self.conv5(x)
            x = x.mean([2, 3])  # globalpool
            x = self.fc(x)
            return x

        def forward(self, x):
            return self._forward_impl(x)

    return ShuffleNetV2(list(stages_repeats), list(stages_out_channels), num_classes=num_classes)


# -- SqueezeNet -----------------------------------------------------------------------------------
def make_squeezenet(
    torch,
    nn,
    F,
    version="1_1",
    num_classes=1000,
    dropout=0.5,
    width_div=8,
):
    """torchvision's ``SqueezeNet`` (``Fire``); every channel count is divided by ``width_div``."""
    init = nn.init

    def w(c):
        return c // width_div

    class Fire(nn.Module):
        def __init__(self, inplanes, squeeze_planes, expand1x1_planes, expand3x3_planes):
            super().__init__()
            self.inplanes = inplanes
            self.squeeze = nn.Conv2d(inplanes, squeeze_planes, kernel_size=1)
            self.squeeze_activation = nn.ReLU(inplace=True)
            self.expand1x1 = nn.Conv2d(squeeze_planes, expand1x1_planes, kernel_size=1)
            self.expand1x1_activation = nn.ReLU(inplace=True)
            self.expand3x3 = nn.Conv2d(squeeze_planes, expand3x3_planes, kernel_size=3, padding=1)
            self.expand3x3_activation = nn.ReLU(inplace=True)

        def forward(self, x):
            x = self.squeeze_activation(self.squeeze(x))
            return torch.cat(
                [
                    self.expand1x1_activation(self.expand1x1(x)),
                    self.expand3x3_activation(self.expand3x3(x)),
                ],
                1,
            )

    class SqueezeNet(nn.Module):
        def __init__(self, version="1_0", num_classes=1000, dropout=0.5):
            super().__init__()
            self.num_classes = num_classes
            if version == "1_0":
                self.features = nn.Sequential(
                    nn.Conv2d(3, w(96), kernel_size=7, stride=2),
                    nn.ReLU(inplace=True),
                    nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                    Fire(w(96), w(16), w(64), w(64)),
                    Fire(w(128), w(16), w(64), w(64)),
                    Fire(w(128), w(32), w(128), w(128)),
                    nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                    Fire(w(256), w(32), w(128), w(128)),
                    Fire(w(256), w(48), w(192), w(192)),
                    Fire(w(384), w(48), w(192), w(192)),
                    Fire(w(384), w(64), w(256), w(256)),
                    nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                    Fire(w(512), w(64), w(256), w(256)),
                )
            elif version == "1_1":
                self.features = nn.Sequential(
                    nn.Conv2d(3, w(64), kernel_size=3, stride=2),
                    nn.ReLU(inplace=True),
                    nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                    Fire(w(64), w(16), w(64), w(64)),
                    Fire(w(128), w(16), w(64), w(64)),
                    nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                    Fire(w(128), w(32), w(128), w(128)),
                    Fire(w(256), w(32), w(128), w(128)),
                    nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True),
                    Fire(w(256), w(48), w(192), w(192)),
                    Fire(w(384), w(48), w(192), w(192)),
                    Fire(w(384), w(64), w(256), w(256)),
                    Fire(w(512), w(64), w(256), w(256)),
                )
            else:
                # FIXME: Is this needed? SqueezeNet should only be called from the
                # FIXME: squeezenet1_x() functions
                # FIXME: This checking is not done for the other models
                raise ValueError(f"Unsupported SqueezeNet version {version}: 1_0 or 1_1 expected")

            # Final convolution is initialized differently from the rest
            final_conv = nn.Conv2d(w(512), self.num_classes, kernel_size=1)
            self.classifier = nn.Sequential(
                nn.Dropout(p=dropout),
                final_conv,
                nn.ReLU(inplace=True),
                nn.AdaptiveAvgPool2d((1, 1)),
            )

            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    if m is final_conv:
                        init.normal_(m.weight, mean=0.0, std=0.01)
                    else:
                        init.kaiming_uniform_(m.weight)
                    if m.bias is not None:
                        init.constant_(m.bias, 0)

        def forward(self, x):
            x = self.features(x)
            x = self.classifier(x)
            return torch.flatten(x, 1)

    return SqueezeNet(version, num_classes=num_classes, dropout=dropout)


# -- GoogLeNet ------------------------------------------------------------------------------------
def make_googlenet(
    torch,
    nn,
    F,
    num_classes=1000,
    aux_logits=True,
    transform_input=False,
    init_weights=True,
    dropout=0.2,
    dropout_aux=0.7,
    width_div=16,
):
    """torchvision's ``GoogLeNet`` (``Inception``, ``InceptionAux``, ``BasicConv2d``); every
    channel count and the auxiliary heads' widths are divided by ``width_div``."""
    GoogLeNetOutputs = namedtuple("GoogLeNetOutputs", ["logits", "aux_logits2", "aux_logits1"])

    def w(c):
        return c // width_div

    class BasicConv2d(nn.Module):
        def __init__(self, in_channels, out_channels, **kwargs):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
            self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

        def forward(self, x):
            x = self.conv(x)
            x = self.bn(x)
            return F.relu(x, inplace=True)

    class Inception(nn.Module):
        def __init__(
            self,
            in_channels,
            ch1x1,
            ch3x3red,
            ch3x3,
            ch5x5red,
            ch5x5,
            pool_proj,
            conv_block=None,
        ):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.branch1 = conv_block(in_channels, ch1x1, kernel_size=1)

            self.branch2 = nn.Sequential(
                conv_block(in_channels, ch3x3red, kernel_size=1),
                conv_block(ch3x3red, ch3x3, kernel_size=3, padding=1),
            )

            self.branch3 = nn.Sequential(
                conv_block(in_channels, ch5x5red, kernel_size=1),
                # Here, kernel_size=3 instead of kernel_size=5 is a known bug.
                # Please see https://github.com/pytorch/vision/issues/906 for details.
                conv_block(ch5x5red, ch5x5, kernel_size=3, padding=1),
            )

            self.branch4 = nn.Sequential(
                nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
                conv_block(in_channels, pool_proj, kernel_size=1),
            )

        def _forward(self, x):
            branch1 = self.branch1(x)
            branch2 = self.branch2(x)
            branch3 = self.branch3(x)
            branch4 = self.branch4(x)

            outputs = [branch1, branch2, branch3, branch4]
            return outputs

        def forward(self, x):
            outputs = self._forward(x)
            return torch.cat(outputs, 1)

    class InceptionAux(nn.Module):
        def __init__(self, in_channels, num_classes, conv_block=None, dropout=0.7):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.conv = conv_block(in_channels, w(128), kernel_size=1)

            self.fc1 = nn.Linear(w(2048), w(1024))
            self.fc2 = nn.Linear(w(1024), num_classes)
            self.dropout = nn.Dropout(p=dropout)

        def forward(self, x):
            # aux1: N x 512 x 14 x 14, aux2: N x 528 x 14 x 14
            x = F.adaptive_avg_pool2d(x, (4, 4))
            # aux1: N x 512 x 4 x 4, aux2: N x 528 x 4 x 4
            x = self.conv(x)
            # N x 128 x 4 x 4
            x = torch.flatten(x, 1)
            # N x 2048
            x = F.relu(self.fc1(x), inplace=True)
            # N x 1024
            x = self.dropout(x)
            # N x 1024
            x = self.fc2(x)
            # N x 1000 (num_classes)

            return x

    class GoogLeNet(nn.Module):
        __constants__ = ["aux_logits", "transform_input"]

        def __init__(
            self,
            num_classes=1000,
            aux_logits=True,
            transform_input=False,
            init_weights=None,
            blocks=None,
            dropout=0.2,
            dropout_aux=0.7,
        ):
            super().__init__()
            if blocks is None:
                blocks = [BasicConv2d, Inception, InceptionAux]
            if init_weights is None:
                init_weights = True
            if len(blocks) != 3:
                raise ValueError(f"blocks length should be 3 instead of {len(blocks)}")
            conv_block = blocks[0]
            inception_block = blocks[1]
            inception_aux_block = blocks[2]

            self.aux_logits = aux_logits
            self.transform_input = transform_input

            self.conv1 = conv_block(3, w(64), kernel_size=7, stride=2, padding=3)
            self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
            self.conv2 = conv_block(w(64), w(64), kernel_size=1)
            self.conv3 = conv_block(w(64), w(192), kernel_size=3, padding=1)
            self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)

            self.inception3a = inception_block(w(192), w(64), w(96), w(128), w(16), w(32), w(32))
            self.inception3b = inception_block(w(256), w(128), w(128), w(192), w(32), w(96), w(64))
            self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)

            self.inception4a = inception_block(w(480), w(192), w(96), w(208), w(16), w(48), w(64))
            self.inception4b = inception_block(w(512), w(160), w(112), w(224), w(24), w(64), w(64))
            self.inception4c = inception_block(w(512), w(128), w(128), w(256), w(24), w(64), w(64))
            self.inception4d = inception_block(w(512), w(112), w(144), w(288), w(32), w(64), w(64))
            self.inception4e = inception_block(
                w(528), w(256), w(160), w(320), w(32), w(128), w(128)
            )
            self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)

            self.inception5a = inception_block(
                w(832), w(256), w(160), w(320), w(32), w(128), w(128)
            )
            self.inception5b = inception_block(
                w(832), w(384), w(192), w(384), w(48), w(128), w(128)
            )

            if aux_logits:
                self.aux1 = inception_aux_block(w(512), num_classes, dropout=dropout_aux)
                self.aux2 = inception_aux_block(w(528), num_classes, dropout=dropout_aux)
            else:
                self.aux1 = None  # type: ignore[assignment]
                self.aux2 = None  # type: ignore[assignment]

            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.dropout = nn.Dropout(p=dropout)
            self.fc = nn.Linear(w(1024), num_classes)

            if init_weights:
                for m in self.modules():
                    if isinstance(m, nn.Conv2d) or isinstance(m, nn.Linear):
                        nn.init.trunc_normal_(m.weight, mean=0.0, std=0.01, a=-2, b=2)
                    elif isinstance(m, nn.BatchNorm2d):
                        nn.init.constant_(m.weight, 1)
                        nn.init.constant_(m.bias, 0)

        def _transform_input(self, x):
            if self.transform_input:
                x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
                x_ch1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
                x_ch2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
                x = torch.cat((x_ch0, x_ch1, x_ch2), 1)
            return x

        def _forward(self, x):
            # N x 3 x 224 x 224
            x = self.conv1(x)
            # N x 64 x 112 x 112
            x = self.maxpool1(x)
            # N x 64 x 56 x 56
            x = self.conv2(x)
            # N x 64 x 56 x 56
            x = self.conv3(x)
            # N x 192 x 56 x 56
            x = self.maxpool2(x)

            # N x 192 x 28 x 28
            x = self.inception3a(x)
            # N x 256 x 28 x 28
            x = self.inception3b(x)
            # N x 480 x 28 x 28
            x = self.maxpool3(x)
            # N x 480 x 14 x 14
            x = self.inception4a(x)
            # N x 512 x 14 x 14
            aux1 = None
            if self.aux1 is not None:
                if self.training:
                    aux1 = self.aux1(x)

            x = self.inception4b(x)
            # N x 512 x 14 x 14
            x = self.inception4c(x)
            # N x 512 x 14 x 14
            x = self.inception4d(x)
            # N x 528 x 14 x 14
            aux2 = None
            if self.aux2 is not None:
                if self.training:
                    aux2 = self.aux2(x)

            x = self.inception4e(x)
            # N x 832 x 14 x 14
            x = self.maxpool4(x)
            # N x 832 x 7 x 7
            x = self.inception5a(x)
            # N x 832 x 7 x 7
            x = self.inception5b(x)
            # N x 1024 x 7 x 7

            x = self.avgpool(x)
            # N x 1024 x 1 x 1
            x = torch.flatten(x, 1)
            # N x 1024
            x = self.dropout(x)
            x = self.fc(x)
            # N x 1000 (num_classes)
            return x, aux2, aux1

        def eager_outputs(self, x, aux2, aux1):
            if self.training and self.aux_logits:
                return GoogLeNetOutputs(x, aux2, aux1)
            else:
                return x  # type: ignore[return-value]

        def forward(self, x):
            x = self._transform_input(x)
            x, aux1, aux2 = self._forward(x)
            aux_defined = self.training and self.aux_logits
            return self.eager_outputs(x, aux2, aux1) if aux_defined else x

    return GoogLeNet(
        num_classes=num_classes,
        aux_logits=aux_logits,
        transform_input=transform_input,
        init_weights=init_weights,
        dropout=dropout,
        dropout_aux=dropout_aux,
    )


# -- VGG ------------------------------------------------------------------------------------------
def make_vgg11_bn(
    torch,
    nn,
    F,
    num_classes=1000,
    init_weights=True,
    dropout=0.5,
    width_div=16,
):
    """torchvision's ``vgg11_bn`` (``cfgs["A"]``, ``make_layers(batch_norm=True)``, ``VGG``);
    channel counts and the classifier's widths are divided by ``width_div``."""

    def w(c):
        return c // width_div

    def make_layers(cfg, batch_norm=False):
        layers = []
        in_channels = 3
        for v in cfg:
            if v == "M":
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                conv2d = nn.Conv2d(in_channels, v, kernel_size=3, padding=1)
                if batch_norm:
                    layers += [conv2d, nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                else:
                    layers += [conv2d, nn.ReLU(inplace=True)]
                in_channels = v
        return nn.Sequential(*layers)

    class VGG(nn.Module):
        def __init__(self, features, num_classes=1000, init_weights=True, dropout=0.5):
            super().__init__()
            self.features = features
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
            self.classifier = nn.Sequential(
                nn.Linear(w(512) * 7 * 7, w(4096)),
                nn.ReLU(True),
                nn.Dropout(p=dropout),
                nn.Linear(w(4096), w(4096)),
                nn.ReLU(True),
                nn.Dropout(p=dropout),
                nn.Linear(w(4096), num_classes),
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

        def forward(self, x):
            x = self.features(x)
            x = self.avgpool(x)
            x = torch.flatten(x, 1)
            x = self.classifier(x)
            return x

    cfg_a = [w(64), "M", w(128), "M", w(256), w(256), "M", w(512), w(512), "M", w(512), w(512), "M"]
    return VGG(
        make_layers(cfg_a, batch_norm=True),
        num_classes=num_classes,
        init_weights=init_weights,
        dropout=dropout,
    )


# -- ConvNeXt -------------------------------------------------------------------------------------
def make_convnext(
    torch,
    nn,
    F,
    block_setting=((8, 16, 1), (16, 32, 1), (32, 64, 2), (64, None, 1)),
    stochastic_depth_prob=0.1,
    layer_scale=1e-6,
    num_classes=1000,
):
    """torchvision's ``ConvNeXt`` (``CNBlock``, ``CNBlockConfig``, ``LayerNorm2d``);
    ``convnext_tiny`` is ``((96, 192, 3), (192, 384, 3), (384, 768, 9), (768, None, 3))``."""
    ops = _ops(torch, nn, F)
    Conv2dNormActivation = ops.Conv2dNormActivation
    Permute = ops.Permute
    StochasticDepth = ops.StochasticDepth

    class LayerNorm2d(nn.LayerNorm):
        def forward(self, x):
            x = x.permute(0, 2, 3, 1)
            x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
            x = x.permute(0, 3, 1, 2)
            return x

    class CNBlock(nn.Module):
        def __init__(
            self,
            dim,
            layer_scale,
            stochastic_depth_prob,
            norm_layer=None,
        ):
            super().__init__()
            if norm_layer is None:
                norm_layer = partial(nn.LayerNorm, eps=1e-6)

            self.block = nn.Sequential(
                nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
                Permute([0, 2, 3, 1]),
                norm_layer(dim),
                nn.Linear(in_features=dim, out_features=4 * dim, bias=True),
                nn.GELU(),
                nn.Linear(in_features=4 * dim, out_features=dim, bias=True),
                Permute([0, 3, 1, 2]),
            )
            self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)
            self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

        def forward(self, input):
            result = self.layer_scale * self.block(input)
            result = self.stochastic_depth(result)
            result += input
            return result

    class CNBlockConfig:
        # Stores information listed at Section 3 of the ConvNeXt paper
        def __init__(
            self,
            input_channels,
            out_channels,
            num_layers,
        ):
            self.input_channels = input_channels
            self.out_channels = out_channels
            self.num_layers = num_layers

    class ConvNeXt(nn.Module):
        def __init__(
            self,
            block_setting,
            stochastic_depth_prob=0.0,
            layer_scale=1e-6,
            num_classes=1000,
            block=None,
            norm_layer=None,
            **kwargs,
        ):
            super().__init__()

            if not block_setting:
                raise ValueError("The block_setting should not be empty")

            if block is None:
                block = CNBlock

            if norm_layer is None:
                norm_layer = partial(LayerNorm2d, eps=1e-6)

            layers = []

            # Stem
            firstconv_output_channels = block_setting[0].input_channels
            layers.append(
                Conv2dNormActivation(
                    3,
                    firstconv_output_channels,
                    kernel_size=4,
                    stride=4,
                    padding=0,
                    norm_layer=norm_layer,
                    activation_layer=None,
                    bias=True,
                )
            )

            total_stage_blocks = sum(cnf.num_layers for cnf in block_setting)
            stage_block_id = 0
            for cnf in block_setting:
                # Bottlenecks
                stage = []
                for _ in range(cnf.num_layers):
                    # adjust stochastic depth probability based on the depth of the stage block
                    sd_prob = stochastic_depth_prob * stage_block_id / (total_stage_blocks - 1.0)
                    stage.append(block(cnf.input_channels, layer_scale, sd_prob))
                    stage_block_id += 1
                layers.append(nn.Sequential(*stage))
                if cnf.out_channels is not None:
                    # Downsampling
                    layers.append(
                        nn.Sequential(
                            norm_layer(cnf.input_channels),
                            nn.Conv2d(
                                cnf.input_channels, cnf.out_channels, kernel_size=2, stride=2
                            ),
                        )
                    )

            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d(1)

            lastblock = block_setting[-1]
            lastconv_output_channels = (
                lastblock.out_channels
                if lastblock.out_channels is not None
                else lastblock.input_channels
            )
            self.classifier = nn.Sequential(
                norm_layer(lastconv_output_channels),
                nn.Flatten(1),
                nn.Linear(lastconv_output_channels, num_classes),
            )

            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.Linear)):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

        def _forward_impl(self, x):
            x = self.features(x)
            x = self.avgpool(x)
            x = self.classifier(x)
            return x

        def forward(self, x):
            return self._forward_impl(x)

    return ConvNeXt(
        [CNBlockConfig(*cnf) for cnf in block_setting],
        stochastic_depth_prob=stochastic_depth_prob,
        layer_scale=layer_scale,
        num_classes=num_classes,
    )


# -- Swin Transformer -----------------------------------------------------------------------------
def make_swin(
    torch,
    nn,
    F,
    patch_size=(4, 4),
    embed_dim=8,
    depths=(2, 2),
    num_heads=(2, 4),
    window_size=(4, 4),
    mlp_ratio=4.0,
    stochastic_depth_prob=0.1,
    num_classes=1000,
    v2=False,
):
    """torchvision's ``SwinTransformer`` (v1: ``shifted_window_attention``,
    ``ShiftedWindowAttention``, ``SwinTransformerBlock``, ``PatchMerging``; with ``v2`` their
    V2s: cosine attention, the continuous position bias MLP, post-norm); ``swin_t`` is
    ``patch_size=[4, 4], embed_dim=96, depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24],
    window_size=[7, 7]``."""
    ops = _ops(torch, nn, F)
    MLP = ops.MLP
    Permute = ops.Permute
    StochasticDepth = ops.StochasticDepth

    def _patch_merging_pad(x):
        H, W, _ = x.shape[-3:]
        x = F.pad(x, (0, 0, 0, W % 2, 0, H % 2))
        x0 = x[..., 0::2, 0::2, :]  # ... H/2 W/2 C
        x1 = x[..., 1::2, 0::2, :]  # ... H/2 W/2 C
        x2 = x[..., 0::2, 1::2, :]  # ... H/2 W/2 C
        x3 = x[..., 1::2, 1::2, :]  # ... H/2 W/2 C
        x = torch.cat([x0, x1, x2, x3], -1)  # ... H/2 W/2 4*C
        return x

    class PatchMerging(nn.Module):
        def __init__(self, dim, norm_layer=nn.LayerNorm):
            super().__init__()
            self.dim = dim
            self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
            self.norm = norm_layer(4 * dim)

        def forward(self, x):
            x = _patch_merging_pad(x)
            x = self.norm(x)
            x = self.reduction(x)  # ... H/2 W/2 2*C
            return x

    def _get_relative_position_bias(
        relative_position_bias_table, relative_position_index, window_size
    ):
        N = window_size[0] * window_size[1]
        relative_position_bias = relative_position_bias_table[relative_position_index]  # type: ignore[index]
        relative_position_bias = relative_position_bias.view(N, N, -1)
        relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        return relative_position_bias

    def shifted_window_attention(
        input,
        qkv_weight,
        proj_weight,
        relative_position_bias,
        window_size,
        num_heads,
        shift_size,
        attention_dropout=0.0,
        dropout=0.0,
        qkv_bias=None,
        proj_bias=None,
        logit_scale=None,
        training=True,
    ):
        B, H, W, C = input.shape
        # pad feature maps to multiples of window size
        pad_r = (window_size[1] - W % window_size[1]) % window_size[1]
        pad_b = (window_size[0] - H % window_size[0]) % window_size[0]
        x = F.pad(input, (0, 0, 0, pad_r, 0, pad_b))
        _, pad_H, pad_W, _ = x.shape

        shift_size = shift_size.copy()
        # If window size is larger than feature size, there is no need to shift window
        if window_size[0] >= pad_H:
            shift_size[0] = 0
        if window_size[1] >= pad_W:
            shift_size[1] = 0

        # cyclic shift
        if sum(shift_size) > 0:
            x = torch.roll(x, shifts=(-shift_size[0], -shift_size[1]), dims=(1, 2))

        # partition windows
        num_windows = (pad_H // window_size[0]) * (pad_W // window_size[1])
        x = x.view(
            B, pad_H // window_size[0], window_size[0], pad_W // window_size[1], window_size[1], C
        )
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(
            B * num_windows, window_size[0] * window_size[1], C
        )  # B*nW, Ws*Ws, C

        # multi-head attention
        if logit_scale is not None and qkv_bias is not None:
            qkv_bias = qkv_bias.clone()
            length = qkv_bias.numel() // 3
            qkv_bias[length : 2 * length].zero_()
        qkv = F.linear(x, qkv_weight, qkv_bias)
        qkv = qkv.reshape(x.size(0), x.size(1), 3, num_heads, C // num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        if logit_scale is not None:
            # cosine attention
            attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)
            logit_scale = torch.clamp(logit_scale, max=math.log(100.0)).exp()
            attn = attn * logit_scale
        else:
            q = q * (C // num_heads) ** -0.5
            attn = q.matmul(k.transpose(-2, -1))
        # add relative position bias
        attn = attn + relative_position_bias

        if sum(shift_size) > 0:
            # generate attention mask
            attn_mask = x.new_zeros((pad_H, pad_W))
            h_slices = (
                (0, -window_size[0]),
                (-window_size[0], -shift_size[0]),
                (-shift_size[0], None),
            )
            w_slices = (
                (0, -window_size[1]),
                (-window_size[1], -shift_size[1]),
                (-shift_size[1], None),
            )
            count = 0
            for h in h_slices:
                for w in w_slices:
                    attn_mask[h[0] : h[1], w[0] : w[1]] = count
                    count += 1
            attn_mask = attn_mask.view(
                pad_H // window_size[0], window_size[0], pad_W // window_size[1], window_size[1]
            )
            attn_mask = attn_mask.permute(0, 2, 1, 3).reshape(
                num_windows, window_size[0] * window_size[1]
            )
            attn_mask = attn_mask.unsqueeze(1) - attn_mask.unsqueeze(2)
            attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(
                attn_mask == 0, float(0.0)
            )
            attn = attn.view(x.size(0) // num_windows, num_windows, num_heads, x.size(1), x.size(1))
            attn = attn + attn_mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, num_heads, x.size(1), x.size(1))

        attn = F.softmax(attn, dim=-1)
        attn = F.dropout(attn, p=attention_dropout, training=training)

        x = attn.matmul(v).transpose(1, 2).reshape(x.size(0), x.size(1), C)
        x = F.linear(x, proj_weight, proj_bias)
        x = F.dropout(x, p=dropout, training=training)

        # reverse windows
        x = x.view(
            B, pad_H // window_size[0], pad_W // window_size[1], window_size[0], window_size[1], C
        )
        x = x.permute(0, 1, 3, 2, 4, 5).reshape(B, pad_H, pad_W, C)

        # reverse cyclic shift
        if sum(shift_size) > 0:
            x = torch.roll(x, shifts=(shift_size[0], shift_size[1]), dims=(1, 2))

        # unpad features
        x = x[:, :H, :W, :].contiguous()
        return x

    class ShiftedWindowAttention(nn.Module):
        def __init__(
            self,
            dim,
            window_size,
            shift_size,
            num_heads,
            qkv_bias=True,
            proj_bias=True,
            attention_dropout=0.0,
            dropout=0.0,
        ):
            super().__init__()
            if len(window_size) != 2 or len(shift_size) != 2:
                raise ValueError("window_size and shift_size must be of length 2")
            self.window_size = window_size
            self.shift_size = shift_size
            self.num_heads = num_heads
            self.attention_dropout = attention_dropout
            self.dropout = dropout

            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.proj = nn.Linear(dim, dim, bias=proj_bias)

            self.define_relative_position_bias_table()
            self.define_relative_position_index()

        def define_relative_position_bias_table(self):
            # define a parameter table of relative position bias
            self.relative_position_bias_table = nn.Parameter(
                torch.zeros(
                    (2 * self.window_size[0] - 1) * (2 * self.window_size[1] - 1), self.num_heads
                )
            )  # 2*Wh-1 * 2*Ww-1, nH
            nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

        def define_relative_position_index(self):
            # get pair-wise relative position index for each token inside the window
            coords_h = torch.arange(self.window_size[0])
            coords_w = torch.arange(self.window_size[1])
            coords = torch.stack(torch.meshgrid(coords_h, coords_w, indexing="ij"))  # 2, Wh, Ww
            coords_flatten = torch.flatten(coords, 1)  # 2, Wh*Ww
            relative_coords = (
                coords_flatten[:, :, None] - coords_flatten[:, None, :]
            )  # 2, Wh*Ww, Wh*Ww
            relative_coords = relative_coords.permute(1, 2, 0).contiguous()  # Wh*Ww, Wh*Ww, 2
            relative_coords[:, :, 0] += self.window_size[0] - 1  # shift to start from 0
            relative_coords[:, :, 1] += self.window_size[1] - 1
            relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
            relative_position_index = relative_coords.sum(-1).flatten()  # Wh*Ww*Wh*Ww
            self.register_buffer("relative_position_index", relative_position_index)

        def get_relative_position_bias(self):
            return _get_relative_position_bias(
                self.relative_position_bias_table, self.relative_position_index, self.window_size
            )

        def forward(self, x):
            relative_position_bias = self.get_relative_position_bias()
            return shifted_window_attention(
                x,
                self.qkv.weight,
                self.proj.weight,
                relative_position_bias,
                self.window_size,
                self.num_heads,
                shift_size=self.shift_size,
                attention_dropout=self.attention_dropout,
                dropout=self.dropout,
                qkv_bias=self.qkv.bias,
                proj_bias=self.proj.bias,
                training=self.training,
            )

    class SwinTransformerBlock(nn.Module):
        def __init__(
            self,
            dim,
            num_heads,
            window_size,
            shift_size,
            mlp_ratio=4.0,
            dropout=0.0,
            attention_dropout=0.0,
            stochastic_depth_prob=0.0,
            norm_layer=nn.LayerNorm,
            attn_layer=ShiftedWindowAttention,
        ):
            super().__init__()

            self.norm1 = norm_layer(dim)
            self.attn = attn_layer(
                dim,
                window_size,
                shift_size,
                num_heads,
                attention_dropout=attention_dropout,
                dropout=dropout,
            )
            self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")
            self.norm2 = norm_layer(dim)
            self.mlp = MLP(
                dim,
                [int(dim * mlp_ratio), dim],
                activation_layer=nn.GELU,
                inplace=None,
                dropout=dropout,
            )

            for m in self.mlp.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.normal_(m.bias, std=1e-6)

        def forward(self, x):
            x = x + self.stochastic_depth(self.attn(self.norm1(x)))
            x = x + self.stochastic_depth(self.mlp(self.norm2(x)))
            return x

    class PatchMergingV2(nn.Module):
        def __init__(self, dim, norm_layer=nn.LayerNorm):
            super().__init__()
            self.dim = dim
            self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
            self.norm = norm_layer(2 * dim)  # difference

        def forward(self, x):
            x = _patch_merging_pad(x)
            x = self.reduction(x)  # ... H/2 W/2 2*C
            x = self.norm(x)
            return x

    class ShiftedWindowAttentionV2(ShiftedWindowAttention):
        def __init__(
            self,
            dim,
            window_size,
            shift_size,
            num_heads,
            qkv_bias=True,
            proj_bias=True,
            attention_dropout=0.0,
            dropout=0.0,
        ):
            super().__init__(
                dim,
                window_size,
                shift_size,
                num_heads,
                qkv_bias=qkv_bias,
                proj_bias=proj_bias,
                attention_dropout=attention_dropout,
                dropout=dropout,
            )

            self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((num_heads, 1, 1))))
            # mlp to generate continuous relative position bias
            self.cpb_mlp = nn.Sequential(
                nn.Linear(2, 512, bias=True),
                nn.ReLU(inplace=True),
                nn.Linear(512, num_heads, bias=False),
            )
            if qkv_bias:
                length = self.qkv.bias.numel() // 3
                self.qkv.bias[length : 2 * length].data.zero_()

        def define_relative_position_bias_table(self):
            # get relative_coords_table
            relative_coords_h = torch.arange(
                -(self.window_size[0] - 1), self.window_size[0], dtype=torch.float32
            )
            relative_coords_w = torch.arange(
                -(self.window_size[1] - 1), self.window_size[1], dtype=torch.float32
            )
            relative_coords_table = torch.stack(
                torch.meshgrid([relative_coords_h, relative_coords_w], indexing="ij")
            )
            relative_coords_table = (
                relative_coords_table.permute(1, 2, 0).contiguous().unsqueeze(0)
            )  # 1, 2*Wh-1, 2*Ww-1, 2

            relative_coords_table[:, :, :, 0] /= self.window_size[0] - 1
            relative_coords_table[:, :, :, 1] /= self.window_size[1] - 1

            relative_coords_table *= 8  # normalize to -8, 8
            relative_coords_table = (
                torch.sign(relative_coords_table)
                * torch.log2(torch.abs(relative_coords_table) + 1.0)
                / 3.0
            )
            self.register_buffer("relative_coords_table", relative_coords_table)

        def get_relative_position_bias(self):
            relative_position_bias = _get_relative_position_bias(
                self.cpb_mlp(self.relative_coords_table).view(-1, self.num_heads),
                self.relative_position_index,  # type: ignore[arg-type]
                self.window_size,
            )
            relative_position_bias = 16 * torch.sigmoid(relative_position_bias)
            return relative_position_bias

        def forward(self, x):
            relative_position_bias = self.get_relative_position_bias()
            return shifted_window_attention(
                x,
                self.qkv.weight,
                self.proj.weight,
                relative_position_bias,
                self.window_size,
                self.num_heads,
                shift_size=self.shift_size,
                attention_dropout=self.attention_dropout,
                dropout=self.dropout,
                qkv_bias=self.qkv.bias,
                proj_bias=self.proj.bias,
                logit_scale=self.logit_scale,
                training=self.training,
            )

    class SwinTransformerBlockV2(SwinTransformerBlock):
        def __init__(
            self,
            dim,
            num_heads,
            window_size,
            shift_size,
            mlp_ratio=4.0,
            dropout=0.0,
            attention_dropout=0.0,
            stochastic_depth_prob=0.0,
            norm_layer=nn.LayerNorm,
            attn_layer=ShiftedWindowAttentionV2,
        ):
            super().__init__(
                dim,
                num_heads,
                window_size,
                shift_size,
                mlp_ratio=mlp_ratio,
                dropout=dropout,
                attention_dropout=attention_dropout,
                stochastic_depth_prob=stochastic_depth_prob,
                norm_layer=norm_layer,
                attn_layer=attn_layer,
            )

        def forward(self, x):
            # Here is the difference, we apply norm after the attention in V2.
            # In V1 we applied norm before the attention.
            x = x + self.stochastic_depth(self.norm1(self.attn(x)))
            x = x + self.stochastic_depth(self.norm2(self.mlp(x)))
            return x

    class SwinTransformer(nn.Module):
        def __init__(
            self,
            patch_size,
            embed_dim,
            depths,
            num_heads,
            window_size,
            mlp_ratio=4.0,
            dropout=0.0,
            attention_dropout=0.0,
            stochastic_depth_prob=0.1,
            num_classes=1000,
            norm_layer=None,
            block=None,
            downsample_layer=PatchMerging,
        ):
            super().__init__()
            self.num_classes = num_classes

            if block is None:
                block = SwinTransformerBlock
            if norm_layer is None:
                norm_layer = partial(nn.LayerNorm, eps=1e-5)

            layers = []
            # split image into non-overlapping patches
            layers.append(
                nn.Sequential(
                    nn.Conv2d(
                        3,
                        embed_dim,
                        kernel_size=(patch_size[0], patch_size[1]),
                        stride=(patch_size[0], patch_size[1]),
                    ),
                    Permute([0, 2, 3, 1]),
                    norm_layer(embed_dim),
                )
            )

            total_stage_blocks = sum(depths)
            stage_block_id = 0
            # build SwinTransformer blocks
            for i_stage in range(len(depths)):
                stage = []
                dim = embed_dim * 2**i_stage
                for i_layer in range(depths[i_stage]):
                    # adjust stochastic depth probability based on the depth of the stage block
                    sd_prob = (
                        stochastic_depth_prob * float(stage_block_id) / (total_stage_blocks - 1)
                    )
                    stage.append(
                        block(
                            dim,
                            num_heads[i_stage],
                            window_size=window_size,
                            shift_size=[0 if i_layer % 2 == 0 else w // 2 for w in window_size],
                            mlp_ratio=mlp_ratio,
                            dropout=dropout,
                            attention_dropout=attention_dropout,
                            stochastic_depth_prob=sd_prob,
                            norm_layer=norm_layer,
                        )
                    )
                    stage_block_id += 1
                layers.append(nn.Sequential(*stage))
                # add patch merging layer
                if i_stage < (len(depths) - 1):
                    layers.append(downsample_layer(dim, norm_layer))
            self.features = nn.Sequential(*layers)

            num_features = embed_dim * 2 ** (len(depths) - 1)
            self.norm = norm_layer(num_features)
            self.permute = Permute([0, 3, 1, 2])  # B H W C -> B C H W
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.flatten = nn.Flatten(1)
            self.head = nn.Linear(num_features, num_classes)

            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.trunc_normal_(m.weight, std=0.02)
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.features(x)
            x = self.norm(x)
            x = self.permute(x)
            x = self.avgpool(x)
            x = self.flatten(x)
            x = self.head(x)
            return x

    return SwinTransformer(
        list(patch_size),
        embed_dim,
        list(depths),
        list(num_heads),
        list(window_size),
        mlp_ratio=mlp_ratio,
        stochastic_depth_prob=stochastic_depth_prob,
        num_classes=num_classes,
        # swin_v2_t: block=SwinTransformerBlockV2, downsample_layer=PatchMergingV2
        block=SwinTransformerBlockV2 if v2 else None,
        downsample_layer=PatchMergingV2 if v2 else PatchMerging,
    )


# -- timm layers ----------------------------------------------------------------------------------
def _timm_layers(torch, nn, F):
    """timm's ``PatchEmbed`` (``layers/patch_embed.py``), ``Mlp`` (``layers/mlp.py``),
    ``DropPath`` (``layers/drop.py``), ``Attention``, ``LayerScale`` and ``Block``
    (``models/vision_transformer.py``)."""

    def to_2tuple(x):
        if isinstance(x, (list, tuple)):
            return tuple(x)
        return (x, x)

    def drop_path(x, drop_prob=0.0, training=False, scale_by_keep=True):
        if drop_prob == 0.0 or not training:
            return x
        keep_prob = 1 - drop_prob
        shape = (x.shape[0],) + (1,) * (
            x.ndim - 1
        )  # work with diff dim tensors, not just 2D ConvNets
        random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
        if keep_prob > 0.0 and scale_by_keep:
            random_tensor.div_(keep_prob)
        return x * random_tensor

    class DropPath(nn.Module):
        def __init__(self, drop_prob=0.0, scale_by_keep=True):
            super().__init__()
            self.drop_prob = drop_prob
            self.scale_by_keep = scale_by_keep

        def forward(self, x):
            return drop_path(x, self.drop_prob, self.training, self.scale_by_keep)

        def extra_repr(self):
            return f"drop_prob={round(self.drop_prob, 3):0.3f}"

    class PatchEmbed(nn.Module):
        def __init__(
            self,
            img_size=224,
            patch_size=16,
            in_chans=3,
            embed_dim=768,
            norm_layer=None,
            flatten=True,
            bias=True,
        ):
            super().__init__()
            self.patch_size = to_2tuple(patch_size)
            self.img_size = to_2tuple(img_size)
            self.grid_size = tuple([s // p for s, p in zip(self.img_size, self.patch_size)])
            self.num_patches = self.grid_size[0] * self.grid_size[1]
            self.flatten = flatten

            self.proj = nn.Conv2d(
                in_chans, embed_dim, kernel_size=patch_size, stride=patch_size, bias=bias
            )
            self.norm = norm_layer(embed_dim) if norm_layer else nn.Identity()

        def forward(self, x):
            B, C, H, W = x.shape
            x = self.proj(x)
            if self.flatten:
                x = x.flatten(2).transpose(1, 2)  # NCHW -> NLC
            x = self.norm(x)
            return x

    class Mlp(nn.Module):
        def __init__(
            self,
            in_features,
            hidden_features=None,
            out_features=None,
            act_layer=nn.GELU,
            norm_layer=None,
            bias=True,
            drop=0.0,
            use_conv=False,
        ):
            super().__init__()
            out_features = out_features or in_features
            hidden_features = hidden_features or in_features
            bias = to_2tuple(bias)
            drop_probs = to_2tuple(drop)
            linear_layer = partial(nn.Conv2d, kernel_size=1) if use_conv else nn.Linear

            self.fc1 = linear_layer(in_features, hidden_features, bias=bias[0])
            self.act = act_layer()
            self.drop1 = nn.Dropout(drop_probs[0])
            self.norm = norm_layer(hidden_features) if norm_layer is not None else nn.Identity()
            self.fc2 = linear_layer(hidden_features, out_features, bias=bias[1])
            self.drop2 = nn.Dropout(drop_probs[1])

        def forward(self, x):
            x = self.fc1(x)
            x = self.act(x)
            x = self.drop1(x)
            x = self.norm(x)
            x = self.fc2(x)
            x = self.drop2(x)
            return x

    class Attention(nn.Module):
        def __init__(
            self,
            dim,
            num_heads=8,
            qkv_bias=False,
            qk_norm=False,
            attn_drop=0.0,
            proj_drop=0.0,
            norm_layer=nn.LayerNorm,
            fused_attn=True,
        ):
            super().__init__()
            assert dim % num_heads == 0, "dim should be divisible by num_heads"
            self.num_heads = num_heads
            self.head_dim = dim // num_heads
            self.scale = self.head_dim**-0.5
            self.fused_attn = fused_attn

            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.q_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
            self.k_norm = norm_layer(self.head_dim) if qk_norm else nn.Identity()
            self.attn_drop = nn.Dropout(attn_drop)
            self.proj = nn.Linear(dim, dim)
            self.proj_drop = nn.Dropout(proj_drop)

        def forward(self, x):
            B, N, C = x.shape
            qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            q, k, v = qkv.unbind(0)
            q, k = self.q_norm(q), self.k_norm(k)

            if self.fused_attn:
                x = F.scaled_dot_product_attention(
                    q,
                    k,
                    v,
                    dropout_p=self.attn_drop.p if self.training else 0.0,
                )
            else:
                q = q * self.scale
                attn = q @ k.transpose(-2, -1)
                attn = attn.softmax(dim=-1)
                attn = self.attn_drop(attn)
                x = attn @ v

            x = x.transpose(1, 2).reshape(B, N, C)
            x = self.proj(x)
            x = self.proj_drop(x)
            return x

    class LayerScale(nn.Module):
        def __init__(self, dim, init_values=1e-5, inplace=False):
            super().__init__()
            self.inplace = inplace
            self.gamma = nn.Parameter(init_values * torch.ones(dim))

        def forward(self, x):
            return x.mul_(self.gamma) if self.inplace else x * self.gamma

    class Block(nn.Module):
        def __init__(
            self,
            dim,
            num_heads,
            mlp_ratio=4.0,
            qkv_bias=False,
            qk_norm=False,
            proj_drop=0.0,
            attn_drop=0.0,
            init_values=None,
            drop_path=0.0,
            act_layer=nn.GELU,
            norm_layer=nn.LayerNorm,
            mlp_layer=Mlp,
        ):
            super().__init__()
            self.norm1 = norm_layer(dim)
            self.attn = Attention(
                dim,
                num_heads=num_heads,
                qkv_bias=qkv_bias,
                qk_norm=qk_norm,
                attn_drop=attn_drop,
                proj_drop=proj_drop,
                norm_layer=norm_layer,
            )
            self.ls1 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
            self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

            self.norm2 = norm_layer(dim)
            self.mlp = mlp_layer(
                in_features=dim,
                hidden_features=int(dim * mlp_ratio),
                act_layer=act_layer,
                drop=proj_drop,
            )
            self.ls2 = LayerScale(dim, init_values=init_values) if init_values else nn.Identity()
            self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

        def forward(self, x):
            x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
            x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
            return x

    class layers:
        pass

    layers.to_2tuple = to_2tuple
    layers.drop_path = drop_path
    layers.DropPath = DropPath
    layers.PatchEmbed = PatchEmbed
    layers.Mlp = Mlp
    layers.Attention = Attention
    layers.LayerScale = LayerScale
    layers.Block = Block
    return layers


# -- timm ViT -------------------------------------------------------------------------------------
def make_vit(
    torch,
    nn,
    F,
    img_size=16,
    patch_size=4,
    num_classes=1000,
    global_pool="token",
    embed_dim=16,
    depth=2,
    num_heads=2,
    mlp_ratio=4.0,
    qkv_bias=True,
    init_values=None,
    class_token=True,
    no_embed_class=False,
    pre_norm=False,
    fc_norm=None,
    drop_rate=0.0,
    drop_path_rate=0.0,
):
    """timm's ``VisionTransformer`` (``vit_tiny_patch16_224`` is ``embed_dim=192, depth=12,
    num_heads=3``), with its ``init_weights`` ('' mode: ``init_weights_vit_timm``)."""
    timm = _timm_layers(torch, nn, F)
    PatchEmbed, Block, Mlp = timm.PatchEmbed, timm.Block, timm.Mlp
    trunc_normal_ = nn.init.trunc_normal_

    def named_apply(fn, module, name="", depth_first=True, include_root=False):
        if not depth_first and include_root:
            fn(module=module, name=name)
        for child_name, child_module in module.named_children():
            child_name = ".".join((name, child_name)) if name else child_name
            named_apply(
                fn=fn,
                module=child_module,
                name=child_name,
                depth_first=depth_first,
                include_root=True,
            )
        if depth_first and include_root:
            fn(module=module, name=name)
        return module

    def init_weights_vit_timm(module, name=""):
        """ViT weight initialization, original timm impl (for reproducibility)"""
        if isinstance(module, nn.Linear):
            trunc_normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif hasattr(module, "init_weights"):
            module.init_weights()

    class VisionTransformer(nn.Module):
        def __init__(
            self,
            img_size=224,
            patch_size=16,
            in_chans=3,
            num_classes=1000,
            global_pool="token",
            embed_dim=768,
            depth=12,
            num_heads=12,
            mlp_ratio=4.0,
            qkv_bias=True,
            qk_norm=False,
            init_values=None,
            class_token=True,
            no_embed_class=False,
            pre_norm=False,
            fc_norm=None,
            drop_rate=0.0,
            pos_drop_rate=0.0,
            proj_drop_rate=0.0,
            attn_drop_rate=0.0,
            drop_path_rate=0.0,
            weight_init="",
            embed_layer=PatchEmbed,
            norm_layer=None,
            act_layer=None,
            block_fn=Block,
            mlp_layer=Mlp,
        ):
            super().__init__()
            assert global_pool in ("", "avg", "token")
            assert class_token or global_pool != "token"
            use_fc_norm = global_pool == "avg" if fc_norm is None else fc_norm
            norm_layer = norm_layer or partial(nn.LayerNorm, eps=1e-6)
            act_layer = act_layer or nn.GELU

            self.num_classes = num_classes
            self.global_pool = global_pool
            self.num_features = self.embed_dim = (
                embed_dim  # num_features for consistency with other models
            )
            self.num_prefix_tokens = 1 if class_token else 0
            self.no_embed_class = no_embed_class

            self.patch_embed = embed_layer(
                img_size=img_size,
                patch_size=patch_size,
                in_chans=in_chans,
                embed_dim=embed_dim,
                bias=not pre_norm,  # disable bias if pre-norm is used (e.g. CLIP)
            )
            num_patches = self.patch_embed.num_patches

            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim)) if class_token else None
            embed_len = num_patches if no_embed_class else num_patches + self.num_prefix_tokens
            self.pos_embed = nn.Parameter(torch.randn(1, embed_len, embed_dim) * 0.02)
            self.pos_drop = nn.Dropout(p=pos_drop_rate)
            self.patch_drop = nn.Identity()
            self.norm_pre = norm_layer(embed_dim) if pre_norm else nn.Identity()

            dpr = [
                x.item() for x in torch.linspace(0, drop_path_rate, depth)
            ]  # stochastic depth decay rule
            self.blocks = nn.Sequential(
                *[
                    block_fn(
                        dim=embed_dim,
                        num_heads=num_heads,
                        mlp_ratio=mlp_ratio,
                        qkv_bias=qkv_bias,
                        qk_norm=qk_norm,
                        init_values=init_values,
                        proj_drop=proj_drop_rate,
                        attn_drop=attn_drop_rate,
                        drop_path=dpr[i],
                        norm_layer=norm_layer,
                        act_layer=act_layer,
                        mlp_layer=mlp_layer,
                    )
                    for i in range(depth)
                ]
            )
            self.norm = norm_layer(embed_dim) if not use_fc_norm else nn.Identity()

            # Classifier Head
            self.fc_norm = norm_layer(embed_dim) if use_fc_norm else nn.Identity()
            self.head_drop = nn.Dropout(drop_rate)
            self.head = nn.Linear(self.embed_dim, num_classes) if num_classes > 0 else nn.Identity()

            if weight_init != "skip":
                self.init_weights(weight_init)

        def init_weights(self, mode=""):
            assert mode in ("jax", "jax_nlhb", "moco", "")
            trunc_normal_(self.pos_embed, std=0.02)
            if self.cls_token is not None:
                nn.init.normal_(self.cls_token, std=1e-6)
            named_apply(init_weights_vit_timm, self)

        def _pos_embed(self, x):
            if self.no_embed_class:
                # deit-3, updated JAX (big vision)
                # position embedding does not overlap with class token, add then concat
                x = x + self.pos_embed
                if self.cls_token is not None:
                    x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
            else:
                # original timm, JAX, and deit vit impl
                # pos_embed has entry for class token, concat then add
                if self.cls_token is not None:
                    x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
                x = x + self.pos_embed
            return self.pos_drop(x)

        def forward_features(self, x):
            x = self.patch_embed(x)
            x = self._pos_embed(x)
            x = self.patch_drop(x)
            x = self.norm_pre(x)
            x = self.blocks(x)
            x = self.norm(x)
            return x

        def forward_head(self, x, pre_logits=False):
            if self.global_pool:
                x = (
                    x[:, self.num_prefix_tokens :].mean(dim=1)
                    if self.global_pool == "avg"
                    else x[:, 0]
                )
            x = self.fc_norm(x)
            x = self.head_drop(x)
            return x if pre_logits else self.head(x)

        def forward(self, x):
            x = self.forward_features(x)
            x = self.forward_head(x)
            return x

    return VisionTransformer(
        img_size=img_size,
        patch_size=patch_size,
        num_classes=num_classes,
        global_pool=global_pool,
        embed_dim=embed_dim,
        depth=depth,
        num_heads=num_heads,
        mlp_ratio=mlp_ratio,
        qkv_bias=qkv_bias,
        init_values=init_values,
        class_token=class_token,
        no_embed_class=no_embed_class,
        pre_norm=pre_norm,
        fc_norm=fc_norm,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
    )


# -- DiT ------------------------------------------------------------------------------------------
def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False, extra_tokens=0):
    """DiT's (from MAE) fixed 2-D sine-cosine position embedding, in NumPy."""
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)

    grid = grid.reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token and extra_tokens > 0:
        pos_embed = np.concatenate([np.zeros([extra_tokens, embed_dim]), pos_embed], axis=0)
    return pos_embed


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0

    # use half of dimensions to encode grid_h
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)

    emb = np.concatenate([emb_h, emb_w], axis=1)  # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000**omega  # (D/2,)

    pos = pos.reshape(-1)  # (M,)
    out = np.einsum("m,d->md", pos, omega)  # (M, D/2), outer product

    emb_sin = np.sin(out)  # (M, D/2)
    emb_cos = np.cos(out)  # (M, D/2)

    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


def make_dit(
    torch,
    nn,
    F,
    input_size=8,
    patch_size=2,
    in_channels=4,
    hidden_size=16,
    depth=2,
    num_heads=2,
    mlp_ratio=4.0,
    class_dropout_prob=0.1,
    num_classes=10,
    learn_sigma=True,
    frequency_embedding_size=256,
):
    """facebookresearch/DiT's ``DiT`` (``TimestepEmbedder``, ``LabelEmbedder``, ``DiTBlock``,
    ``FinalLayer``, ``modulate``, ``unpatchify``), on timm's ``PatchEmbed``, ``Attention`` and
    ``Mlp`` as DiT imports them; ``DiT-S/2`` is ``hidden_size=384, depth=12, num_heads=6``."""
    timm = _timm_layers(torch, nn, F)
    PatchEmbed, Attention, Mlp = timm.PatchEmbed, timm.Attention, timm.Mlp

    def modulate(x, shift, scale):
        return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)

    class TimestepEmbedder(nn.Module):
        """Embeds scalar timesteps into vector representations."""

        def __init__(self, hidden_size, frequency_embedding_size=256):
            super().__init__()
            self.mlp = nn.Sequential(
                nn.Linear(frequency_embedding_size, hidden_size, bias=True),
                nn.SiLU(),
                nn.Linear(hidden_size, hidden_size, bias=True),
            )
            self.frequency_embedding_size = frequency_embedding_size

        @staticmethod
        def timestep_embedding(t, dim, max_period=10000):
            # https://github.com/openai/glide-text2im/blob/main/glide_text2im/nn.py
            half = dim // 2
            freqs = torch.exp(
                -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
            ).to(device=t.device)
            args = t[:, None].float() * freqs[None]
            embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
            if dim % 2:
                embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
            return embedding

        def forward(self, t):
            t_freq = self.timestep_embedding(t, self.frequency_embedding_size)
            t_emb = self.mlp(t_freq)
            return t_emb

    class LabelEmbedder(nn.Module):
        """Embeds class labels into vector representations. Also handles label dropout for
        classifier-free guidance."""

        def __init__(self, num_classes, hidden_size, dropout_prob):
            super().__init__()
            use_cfg_embedding = dropout_prob > 0
            self.embedding_table = nn.Embedding(num_classes + use_cfg_embedding, hidden_size)
            self.num_classes = num_classes
            self.dropout_prob = dropout_prob

        def token_drop(self, labels, force_drop_ids=None):
            """Drops labels to enable classifier-free guidance."""
            if force_drop_ids is None:
                drop_ids = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
            else:
                drop_ids = force_drop_ids == 1
            labels = torch.where(drop_ids, self.num_classes, labels)
            return labels

        def forward(self, labels, train, force_drop_ids=None):
            use_dropout = self.dropout_prob > 0
            if (train and use_dropout) or (force_drop_ids is not None):
                labels = self.token_drop(labels, force_drop_ids)
            embeddings = self.embedding_table(labels)
            return embeddings

    class DiTBlock(nn.Module):
        """A DiT block with adaptive layer norm zero (adaLN-Zero) conditioning."""

        def __init__(self, hidden_size, num_heads, mlp_ratio=4.0, **block_kwargs):
            super().__init__()
            self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True, **block_kwargs)
            self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            mlp_hidden_dim = int(hidden_size * mlp_ratio)

            def approx_gelu():
                return nn.GELU(approximate="tanh")

            self.mlp = Mlp(
                in_features=hidden_size,
                hidden_features=mlp_hidden_dim,
                act_layer=approx_gelu,
                drop=0,
            )
            self.adaLN_modulation = nn.Sequential(
                nn.SiLU(), nn.Linear(hidden_size, 6 * hidden_size, bias=True)
            )

        def forward(self, x, c):
            shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaLN_modulation(
                c
            ).chunk(6, dim=1)
            x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
            x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
            return x

    class FinalLayer(nn.Module):
        """The final layer of DiT."""

        def __init__(self, hidden_size, patch_size, out_channels):
            super().__init__()
            self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
            self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
            self.adaLN_modulation = nn.Sequential(
                nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size, bias=True)
            )

        def forward(self, x, c):
            shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
            x = modulate(self.norm_final(x), shift, scale)
            x = self.linear(x)
            return x

    class DiT(nn.Module):
        """Diffusion model with a Transformer backbone."""

        def __init__(
            self,
            input_size=32,
            patch_size=2,
            in_channels=4,
            hidden_size=1152,
            depth=28,
            num_heads=16,
            mlp_ratio=4.0,
            class_dropout_prob=0.1,
            num_classes=1000,
            learn_sigma=True,
        ):
            super().__init__()
            self.learn_sigma = learn_sigma
            self.in_channels = in_channels
            self.out_channels = in_channels * 2 if learn_sigma else in_channels
            self.patch_size = patch_size
            self.num_heads = num_heads

            self.x_embedder = PatchEmbed(
                input_size, patch_size, in_channels, hidden_size, bias=True
            )
            self.t_embedder = TimestepEmbedder(hidden_size, frequency_embedding_size)
            self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
            num_patches = self.x_embedder.num_patches
            # Will use fixed sin-cos embedding:
            self.pos_embed = nn.Parameter(
                torch.zeros(1, num_patches, hidden_size), requires_grad=False
            )

            self.blocks = nn.ModuleList(
                [DiTBlock(hidden_size, num_heads, mlp_ratio=mlp_ratio) for _ in range(depth)]
            )
            self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)
            self.initialize_weights()

        def initialize_weights(self):
            # Initialize transformer layers:
            def _basic_init(module):
                if isinstance(module, nn.Linear):
                    torch.nn.init.xavier_uniform_(module.weight)
                    if module.bias is not None:
                        nn.init.constant_(module.bias, 0)

            self.apply(_basic_init)

            # Initialize (and freeze) pos_embed by sin-cos embedding:
            pos_embed = get_2d_sincos_pos_embed(
                self.pos_embed.shape[-1], int(self.x_embedder.num_patches**0.5)
            )
            self.pos_embed.data.copy_(torch.from_numpy(pos_embed).float().unsqueeze(0))

            # Initialize patch_embed like nn.Linear (instead of nn.Conv2d):
            w = self.x_embedder.proj.weight.data
            nn.init.xavier_uniform_(w.view([w.shape[0], -1]))
            nn.init.constant_(self.x_embedder.proj.bias, 0)

            # Initialize label embedding table:
            nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)

            # Initialize timestep embedding MLP:
            nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
            nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)

            # Zero-out adaLN modulation layers in DiT blocks:
            for block in self.blocks:
                nn.init.constant_(block.adaLN_modulation[-1].weight, 0)
                nn.init.constant_(block.adaLN_modulation[-1].bias, 0)

            # Zero-out output layers:
            nn.init.constant_(self.final_layer.adaLN_modulation[-1].weight, 0)
            nn.init.constant_(self.final_layer.adaLN_modulation[-1].bias, 0)
            nn.init.constant_(self.final_layer.linear.weight, 0)
            nn.init.constant_(self.final_layer.linear.bias, 0)

        def unpatchify(self, x):
            """x: (N, T, patch_size**2 * C); imgs: (N, H, W, C)"""
            c = self.out_channels
            p = self.x_embedder.patch_size[0]
            h = w = int(x.shape[1] ** 0.5)
            assert h * w == x.shape[1]

            x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
            x = torch.einsum("nhwpqc->nchpwq", x)
            imgs = x.reshape(shape=(x.shape[0], c, h * p, h * p))
            return imgs

        def forward(self, x, t, y):
            """x: (N, C, H, W) images or latents; t: (N,) diffusion timesteps; y: (N,) labels"""
            x = self.x_embedder(x) + self.pos_embed  # (N, T, D), where T = H * W / patch_size ** 2
            t = self.t_embedder(t)  # (N, D)
            y = self.y_embedder(y, self.training)  # (N, D)
            c = t + y  # (N, D)
            for block in self.blocks:
                x = block(x, c)  # (N, T, D)
            x = self.final_layer(x, c)  # (N, T, patch_size ** 2 * out_channels)
            x = self.unpatchify(x)  # (N, out_channels, H, W)
            return x

    return DiT(
        input_size=input_size,
        patch_size=patch_size,
        in_channels=in_channels,
        hidden_size=hidden_size,
        depth=depth,
        num_heads=num_heads,
        mlp_ratio=mlp_ratio,
        class_dropout_prob=class_dropout_prob,
        num_classes=num_classes,
        learn_sigma=learn_sigma,
    )


# -- torchvision ViT ------------------------------------------------------------------------------
def make_torchvision_vit(
    torch,
    nn,
    F,
    image_size=16,
    patch_size=4,
    num_layers=2,
    num_heads=2,
    hidden_dim=16,
    mlp_dim=32,
    dropout=0.0,
    attention_dropout=0.0,
    num_classes=1000,
    representation_size=None,
):
    """torchvision's ``VisionTransformer`` (``MLPBlock``, ``EncoderBlock`` on
    ``nn.MultiheadAttention(batch_first=True)``, ``Encoder``); ``vit_b_16`` is
    ``image_size=224, patch_size=16, num_layers=12, num_heads=12, hidden_dim=768,
    mlp_dim=3072``."""
    MLP = _ops(torch, nn, F).MLP

    class MLPBlock(MLP):
        """Transformer MLP block."""

        _version = 2

        def __init__(self, in_dim, mlp_dim, dropout):
            super().__init__(
                in_dim, [mlp_dim, in_dim], activation_layer=nn.GELU, inplace=None, dropout=dropout
            )

            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)
                    if m.bias is not None:
                        nn.init.normal_(m.bias, std=1e-6)

    class EncoderBlock(nn.Module):
        """Transformer encoder block."""

        def __init__(
            self,
            num_heads,
            hidden_dim,
            mlp_dim,
            dropout,
            attention_dropout,
            norm_layer=partial(nn.LayerNorm, eps=1e-6),
        ):
            super().__init__()
            self.num_heads = num_heads

            # Attention block
            self.ln_1 = norm_layer(hidden_dim)
            self.self_attention = nn.MultiheadAttention(
                hidden_dim, num_heads, dropout=attention_dropout, batch_first=True
            )
            self.dropout = nn.Dropout(dropout)

            # MLP block
            self.ln_2 = norm_layer(hidden_dim)
            self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

        def forward(self, input):
            torch._assert(
                input.dim() == 3,
                f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}",
            )
            x = self.ln_1(input)
            x, _ = self.self_attention(x, x, x, need_weights=False)
            x = self.dropout(x)
            x = x + input

            y = self.ln_2(x)
            y = self.mlp(y)
            return x + y

    class Encoder(nn.Module):
        """Transformer Model Encoder for sequence to sequence translation."""

        def __init__(
            self,
            seq_length,
            num_layers,
            num_heads,
            hidden_dim,
            mlp_dim,
            dropout,
            attention_dropout,
            norm_layer=partial(nn.LayerNorm, eps=1e-6),
        ):
            super().__init__()
            # Note that batch_size is on the first dim because
            # we have batch_first=True in nn.MultiAttention() by default
            self.pos_embedding = nn.Parameter(
                torch.empty(1, seq_length, hidden_dim).normal_(std=0.02)
            )  # from BERT
            self.dropout = nn.Dropout(dropout)
            layers = OrderedDict()
            for i in range(num_layers):
                layers[f"encoder_layer_{i}"] = EncoderBlock(
                    num_heads,
                    hidden_dim,
                    mlp_dim,
                    dropout,
                    attention_dropout,
                    norm_layer,
                )
            self.layers = nn.Sequential(layers)
            self.ln = norm_layer(hidden_dim)

        def forward(self, input):
            torch._assert(
                input.dim() == 3,
                f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}",
            )
            input = input + self.pos_embedding
            return self.ln(self.layers(self.dropout(input)))

    class VisionTransformer(nn.Module):
        """Vision Transformer as per https://arxiv.org/abs/2010.11929."""

        def __init__(
            self,
            image_size,
            patch_size,
            num_layers,
            num_heads,
            hidden_dim,
            mlp_dim,
            dropout=0.0,
            attention_dropout=0.0,
            num_classes=1000,
            representation_size=None,
            norm_layer=partial(nn.LayerNorm, eps=1e-6),
            conv_stem_configs=None,
        ):
            super().__init__()
            torch._assert(image_size % patch_size == 0, "Input shape indivisible by patch size!")
            self.image_size = image_size
            self.patch_size = patch_size
            self.hidden_dim = hidden_dim
            self.mlp_dim = mlp_dim
            self.attention_dropout = attention_dropout
            self.dropout = dropout
            self.num_classes = num_classes
            self.representation_size = representation_size
            self.norm_layer = norm_layer

            if conv_stem_configs is not None:
                raise NotImplementedError("the conv stem is not ported")
            else:
                self.conv_proj = nn.Conv2d(
                    in_channels=3,
                    out_channels=hidden_dim,
                    kernel_size=patch_size,
                    stride=patch_size,
                )

            seq_length = (image_size // patch_size) ** 2

            # Add a class token
            self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
            seq_length += 1

            self.encoder = Encoder(
                seq_length,
                num_layers,
                num_heads,
                hidden_dim,
                mlp_dim,
                dropout,
                attention_dropout,
                norm_layer,
            )
            self.seq_length = seq_length

            heads_layers = OrderedDict()
            if representation_size is None:
                heads_layers["head"] = nn.Linear(hidden_dim, num_classes)
            else:
                heads_layers["pre_logits"] = nn.Linear(hidden_dim, representation_size)
                heads_layers["act"] = nn.Tanh()
                heads_layers["head"] = nn.Linear(representation_size, num_classes)

            self.heads = nn.Sequential(heads_layers)

            if isinstance(self.conv_proj, nn.Conv2d):
                # Init the patchify stem
                fan_in = (
                    self.conv_proj.in_channels
                    * self.conv_proj.kernel_size[0]
                    * self.conv_proj.kernel_size[1]
                )
                nn.init.trunc_normal_(self.conv_proj.weight, std=math.sqrt(1 / fan_in))
                if self.conv_proj.bias is not None:
                    nn.init.zeros_(self.conv_proj.bias)

            if hasattr(self.heads, "pre_logits") and isinstance(self.heads.pre_logits, nn.Linear):
                fan_in = self.heads.pre_logits.in_features
                nn.init.trunc_normal_(self.heads.pre_logits.weight, std=math.sqrt(1 / fan_in))
                nn.init.zeros_(self.heads.pre_logits.bias)

            if isinstance(self.heads.head, nn.Linear):
                nn.init.zeros_(self.heads.head.weight)
                nn.init.zeros_(self.heads.head.bias)

        def _process_input(self, x):
            n, c, h, w = x.shape
            p = self.patch_size
            torch._assert(
                h == self.image_size, f"Wrong image height! Expected {self.image_size} but got {h}!"
            )
            torch._assert(
                w == self.image_size, f"Wrong image width! Expected {self.image_size} but got {w}!"
            )
            n_h = h // p
            n_w = w // p

            # (n, c, h, w) -> (n, hidden_dim, n_h, n_w)
            x = self.conv_proj(x)
            # (n, hidden_dim, n_h, n_w) -> (n, hidden_dim, (n_h * n_w))
            x = x.reshape(n, self.hidden_dim, n_h * n_w)

            # (n, hidden_dim, (n_h * n_w)) -> (n, (n_h * n_w), hidden_dim)
            # The self attention layer expects inputs in the format (N, S, E)
            # where S is the source sequence length, N is the batch size, E is the
            # embedding dimension
            x = x.permute(0, 2, 1)

            return x

        def forward(self, x):
            # Reshape and permute the input tensor
            x = self._process_input(x)
            n = x.shape[0]

            # Expand the class token to the full batch
            batch_class_token = self.class_token.expand(n, -1, -1)
            x = torch.cat([batch_class_token, x], dim=1)

            x = self.encoder(x)

            # Classifier "token" as used by standard language architectures
            x = x[:, 0]

            x = self.heads(x)

            return x

    return VisionTransformer(
        image_size,
        patch_size,
        num_layers,
        num_heads,
        hidden_dim,
        mlp_dim,
        dropout=dropout,
        attention_dropout=attention_dropout,
        num_classes=num_classes,
        representation_size=representation_size,
    )


# -- ResNeXt / wide / dilated ResNet --------------------------------------------------------------
def make_resnext(
    torch,
    nn,
    F,
    layers=(1, 1, 1, 1),
    num_classes=1000,
    zero_init_residual=False,
    groups=4,
    width_per_group=32,
    replace_stride_with_dilation=None,
    group_norm=False,
    width=4,
    norm_layer=None,
):
    """torchvision's ``ResNet`` on ``Bottleneck`` (``resnext50_32x4d`` is ``groups=32,
    width_per_group=4``, ``wide_resnet50_2`` ``width_per_group=128``; segmentation backbones
    ``replace_stride_with_dilation=[False, True, True]``); ``width`` (64 there) scales the
    stages, ``group_norm`` passes ``norm_layer=lambda c: nn.GroupNorm(4, c)``."""

    def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
        """3x3 convolution with padding"""
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
        """1x1 convolution"""
        return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(
            self,
            inplanes,
            planes,
            stride=1,
            downsample=None,
            groups=1,
            base_width=64,
            dilation=1,
            norm_layer=None,
        ):
            super().__init__()
            if norm_layer is None:
                norm_layer = nn.BatchNorm2d
            width = int(planes * (base_width / 64.0)) * groups
            # Both self.conv2 and self.downsample layers downsample the input when stride != 1
            self.conv1 = conv1x1(inplanes, width)
            self.bn1 = norm_layer(width)
            self.conv2 = conv3x3(width, width, stride, groups, dilation)
            self.bn2 = norm_layer(width)
            self.conv3 = conv1x1(width, planes * self.expansion)
            self.bn3 = norm_layer(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample
            self.stride = stride

        def forward(self, x):
            identity = x

            out = self.conv1(x)
            out = self.bn1(out)
            out = self.relu(out)

            out = self.conv2(out)
            out = self.bn2(out)
            out = self.relu(out)

            out = self.conv3(out)
            out = self.bn3(out)

            if self.downsample is not None:
                identity = self.downsample(x)

            out += identity
            out = self.relu(out)

            return out

    class ResNet(nn.Module):
        def __init__(
            self,
            block,
            layers,
            num_classes=1000,
            zero_init_residual=False,
            groups=1,
            width_per_group=64,
            replace_stride_with_dilation=None,
            norm_layer=None,
        ):
            super().__init__()
            if norm_layer is None:
                norm_layer = nn.BatchNorm2d
            self._norm_layer = norm_layer

            self.inplanes = width
            self.dilation = 1
            if replace_stride_with_dilation is None:
                # each element in the tuple indicates if we should replace
                # the 2x2 stride with a dilated convolution instead
                replace_stride_with_dilation = [False, False, False]
            if len(replace_stride_with_dilation) != 3:
                raise ValueError(
                    "replace_stride_with_dilation should be None "
                    f"or a 3-element tuple, got {replace_stride_with_dilation}"
                )
            self.groups = groups
            self.base_width = width_per_group
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = norm_layer(self.inplanes)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(block, width, layers[0])
            self.layer2 = self._make_layer(
                block, 2 * width, layers[1], stride=2, dilate=replace_stride_with_dilation[0]
            )
            self.layer3 = self._make_layer(
                block, 4 * width, layers[2], stride=2, dilate=replace_stride_with_dilation[1]
            )
            self.layer4 = self._make_layer(
                block, 8 * width, layers[3], stride=2, dilate=replace_stride_with_dilation[2]
            )
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8 * width * block.expansion, num_classes)

            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)

            # Zero-initialize the last BN in each residual branch,
            # so that the residual branch starts with zeros, and each residual block behaves like an identity.
            # This improves the model by 0.2~0.3% according to https://arxiv.org/abs/1706.02677
            if zero_init_residual:
                for m in self.modules():
                    if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                        nn.init.constant_(m.bn3.weight, 0)  # type: ignore[arg-type]

        def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
            norm_layer = self._norm_layer
            downsample = None
            previous_dilation = self.dilation
            if dilate:
                self.dilation *= stride
                stride = 1
            if stride != 1 or self.inplanes != planes * block.expansion:
                downsample = nn.Sequential(
                    conv1x1(self.inplanes, planes * block.expansion, stride),
                    norm_layer(planes * block.expansion),
                )

            layers = []
            layers.append(
                block(
                    self.inplanes,
                    planes,
                    stride,
                    downsample,
                    self.groups,
                    self.base_width,
                    previous_dilation,
                    norm_layer,
                )
            )
            self.inplanes = planes * block.expansion
            for _ in range(1, blocks):
                layers.append(
                    block(
                        self.inplanes,
                        planes,
                        groups=self.groups,
                        base_width=self.base_width,
                        dilation=self.dilation,
                        norm_layer=norm_layer,
                    )
                )

            return nn.Sequential(*layers)

        def _forward_impl(self, x):
            # See note [TorchScript super()]
            x = self.conv1(x)
            x = self.bn1(x)
            x = self.relu(x)
            x = self.maxpool(x)

            x = self.layer1(x)
            x = self.layer2(x)
            x = self.layer3(x)
            x = self.layer4(x)

            x = self.avgpool(x)
            x = torch.flatten(x, 1)
            x = self.fc(x)

            return x

        def forward(self, x):
            return self._forward_impl(x)

    return ResNet(
        Bottleneck,
        list(layers),
        num_classes=num_classes,
        zero_init_residual=zero_init_residual,
        groups=groups,
        width_per_group=width_per_group,
        replace_stride_with_dilation=replace_stride_with_dilation,
        norm_layer=(lambda c: nn.GroupNorm(4, c)) if group_norm else norm_layer,
    )


# -- LLaMA (Hugging Face transformers' modeling_llama) -------------------------------------------
def make_llama(
    torch,
    nn,
    F,
    vocab_size=32,
    hidden_size=16,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=16,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    attention_bias=False,
    attention_dropout=0.0,
    initializer_range=0.02,
    attn_implementation="eager",
    tie_word_embeddings=False,
):
    """transformers' ``LlamaForCausalLM`` (``LlamaRMSNorm``, ``LlamaRotaryEmbedding``,
    ``rotate_half``, ``apply_rotary_pos_emb``, ``LlamaMLP``, ``repeat_kv``, ``LlamaAttention``
    eager or SDPA, ``LlamaDecoderLayer``, the causal mask from ``finfo.min``, the shifted
    cross-entropy); ``forward(input_ids, labels)`` returns ``(loss, logits)``. Its RMSNorm and
    softmax compute in float32 whatever the model's dtype, as the original."""
    from types import SimpleNamespace

    config = SimpleNamespace(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=rms_norm_eps,
        rope_theta=rope_theta,
        attention_bias=attention_bias,
        attention_dropout=attention_dropout,
        initializer_range=initializer_range,
        hidden_act="silu",
        pad_token_id=None,
        _attn_implementation=attn_implementation,
        tie_word_embeddings=tie_word_embeddings,
    )
    ACT2FN = {"silu": nn.SiLU()}

    class LlamaRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            """LlamaRMSNorm is equivalent to T5LayerNorm"""
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(torch.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self, dim, max_position_embeddings=2048, base=10000, device=None):
            super().__init__()
            self.dim = dim
            self.max_position_embeddings = max_position_embeddings
            self.base = base
            inv_freq = 1.0 / (
                self.base
                ** (torch.arange(0, self.dim, 2, dtype=torch.int64).float().to(device) / self.dim)
            )
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        @torch.no_grad()
        def forward(self, x, position_ids):
            # x: [bs, num_attention_heads, seq_len, head_size]
            inv_freq_expanded = (
                self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            )
            position_ids_expanded = position_ids[:, None, :].float()
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos = emb.cos()
            sin = emb.sin()
            return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

    def rotate_half(x):
        """Rotates half the hidden dims of the input."""
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed

    class LlamaMLP(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.hidden_size = config.hidden_size
            self.intermediate_size = config.intermediate_size
            self.gate_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
            self.up_proj = nn.Linear(self.hidden_size, self.intermediate_size, bias=False)
            self.down_proj = nn.Linear(self.intermediate_size, self.hidden_size, bias=False)
            self.act_fn = ACT2FN[config.hidden_act]

        def forward(self, x):
            down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
            return down_proj

    def repeat_kv(hidden_states, n_rep):
        batch, num_key_value_heads, slen, head_dim = hidden_states.shape
        if n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(
            batch, num_key_value_heads, n_rep, slen, head_dim
        )
        return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)

    class LlamaAttention(nn.Module):
        """Multi-headed attention from 'Attention Is All You Need' paper"""

        def __init__(self, config, layer_idx=None):
            super().__init__()
            self.config = config
            self.layer_idx = layer_idx
            self.attention_dropout = config.attention_dropout
            self.hidden_size = config.hidden_size
            self.num_heads = config.num_attention_heads
            self.head_dim = self.hidden_size // self.num_heads
            self.num_key_value_heads = config.num_key_value_heads
            self.num_key_value_groups = self.num_heads // self.num_key_value_heads
            self.max_position_embeddings = config.max_position_embeddings
            self.rope_theta = config.rope_theta
            self.is_causal = True

            if (self.head_dim * self.num_heads) != self.hidden_size:
                raise ValueError(
                    f"hidden_size must be divisible by num_heads (got `hidden_size`: {self.hidden_size}"
                    f" and `num_heads`: {self.num_heads})."
                )

            self.q_proj = nn.Linear(
                self.hidden_size, self.num_heads * self.head_dim, bias=config.attention_bias
            )
            self.k_proj = nn.Linear(
                self.hidden_size,
                self.num_key_value_heads * self.head_dim,
                bias=config.attention_bias,
            )
            self.v_proj = nn.Linear(
                self.hidden_size,
                self.num_key_value_heads * self.head_dim,
                bias=config.attention_bias,
            )
            self.o_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=config.attention_bias)
            self.rotary_emb = LlamaRotaryEmbedding(
                self.head_dim,
                max_position_embeddings=self.max_position_embeddings,
                base=self.rope_theta,
            )

        def forward(self, hidden_states, attention_mask=None, position_ids=None):
            bsz, q_len, _ = hidden_states.size()

            query_states = self.q_proj(hidden_states)
            key_states = self.k_proj(hidden_states)
            value_states = self.v_proj(hidden_states)

            query_states = query_states.view(bsz, q_len, self.num_heads, self.head_dim).transpose(
                1, 2
            )
            key_states = key_states.view(
                bsz, q_len, self.num_key_value_heads, self.head_dim
            ).transpose(1, 2)
            value_states = value_states.view(
                bsz, q_len, self.num_key_value_heads, self.head_dim
            ).transpose(1, 2)

            cos, sin = self.rotary_emb(value_states, position_ids)
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)

            key_states = repeat_kv(key_states, self.num_key_value_groups)
            value_states = repeat_kv(value_states, self.num_key_value_groups)

            if self.config._attn_implementation == "sdpa":
                causal_mask = attention_mask
                if attention_mask is not None:
                    causal_mask = causal_mask[:, :, :, : key_states.shape[-2]]
                query_states = query_states.contiguous()
                key_states = key_states.contiguous()
                value_states = value_states.contiguous()
                is_causal = True if causal_mask is None and q_len > 1 else False
                attn_output = torch.nn.functional.scaled_dot_product_attention(
                    query_states,
                    key_states,
                    value_states,
                    attn_mask=causal_mask,
                    dropout_p=self.attention_dropout if self.training else 0.0,
                    is_causal=is_causal,
                )
                attn_weights = None
            else:
                attn_weights = torch.matmul(query_states, key_states.transpose(2, 3)) / math.sqrt(
                    self.head_dim
                )

                if attention_mask is not None:  # no matter the length, we just slice it
                    causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
                    attn_weights = attn_weights + causal_mask

                # upcast attention to fp32
                attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(
                    query_states.dtype
                )
                attn_weights = nn.functional.dropout(
                    attn_weights, p=self.attention_dropout, training=self.training
                )
                attn_output = torch.matmul(attn_weights, value_states)

            if attn_output.size() != (bsz, self.num_heads, q_len, self.head_dim):
                raise ValueError(
                    f"`attn_output` should be of size {(bsz, self.num_heads, q_len, self.head_dim)}, but is"
                    f" {attn_output.size()}"
                )

            attn_output = attn_output.transpose(1, 2).contiguous()

            attn_output = attn_output.reshape(bsz, q_len, -1)

            attn_output = self.o_proj(attn_output)

            return attn_output, attn_weights

    class LlamaDecoderLayer(nn.Module):
        def __init__(self, config, layer_idx):
            super().__init__()
            self.hidden_size = config.hidden_size

            self.self_attn = LlamaAttention(config=config, layer_idx=layer_idx)

            self.mlp = LlamaMLP(config)
            self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.post_attention_layernorm = LlamaRMSNorm(
                config.hidden_size, eps=config.rms_norm_eps
            )

        def forward(self, hidden_states, attention_mask=None, position_ids=None):
            residual = hidden_states

            hidden_states = self.input_layernorm(hidden_states)

            # Self Attention
            hidden_states, self_attn_weights = self.self_attn(
                hidden_states=hidden_states,
                attention_mask=attention_mask,
                position_ids=position_ids,
            )
            hidden_states = residual + hidden_states

            # Fully Connected
            residual = hidden_states
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = self.mlp(hidden_states)
            hidden_states = residual + hidden_states

            outputs = (hidden_states,)
            return outputs

    class LlamaModel(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.config = config
            self.padding_idx = config.pad_token_id
            self.vocab_size = config.vocab_size

            self.embed_tokens = nn.Embedding(
                config.vocab_size, config.hidden_size, self.padding_idx
            )
            self.layers = nn.ModuleList(
                [
                    LlamaDecoderLayer(config, layer_idx)
                    for layer_idx in range(config.num_hidden_layers)
                ]
            )
            self.norm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

        def _update_causal_mask(self, input_tensor):
            dtype = input_tensor.dtype
            min_dtype = torch.finfo(dtype).min
            sequence_length = input_tensor.shape[1]
            target_length = sequence_length
            causal_mask = torch.full(
                (sequence_length, target_length),
                fill_value=min_dtype,
                dtype=dtype,
                device=input_tensor.device,
            )
            if sequence_length != 1:
                causal_mask = torch.triu(causal_mask, diagonal=1)
            causal_mask = causal_mask[None, None, :, :].expand(input_tensor.shape[0], 1, -1, -1)
            return causal_mask

        def forward(self, input_ids):
            inputs_embeds = self.embed_tokens(input_ids)
            position_ids = torch.arange(
                0, inputs_embeds.shape[1], device=inputs_embeds.device
            ).unsqueeze(0)
            if self.config._attn_implementation == "sdpa":
                causal_mask = None  # SDPA's is_causal
            else:
                causal_mask = self._update_causal_mask(inputs_embeds)

            hidden_states = inputs_embeds
            for decoder_layer in self.layers:
                layer_outputs = decoder_layer(
                    hidden_states,
                    attention_mask=causal_mask,
                    position_ids=position_ids,
                )
                hidden_states = layer_outputs[0]

            hidden_states = self.norm(hidden_states)
            return hidden_states

    class LlamaForCausalLM(nn.Module):
        _tied_weights_keys = ["lm_head.weight"]

        def __init__(self, config):
            super().__init__()
            self.config = config
            self.model = LlamaModel(config)
            self.vocab_size = config.vocab_size
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.apply(self._init_weights)
            if config.tie_word_embeddings:
                self.lm_head.weight = self.model.embed_tokens.weight

        def _init_weights(self, module):
            std = self.config.initializer_range
            if isinstance(module, nn.Linear):
                module.weight.data.normal_(mean=0.0, std=std)
                if module.bias is not None:
                    module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=std)
                if module.padding_idx is not None:
                    module.weight.data[module.padding_idx].zero_()

        def forward(self, input_ids, labels=None):
            hidden_states = self.model(input_ids)
            logits = self.lm_head(hidden_states)
            logits = logits.float()

            loss = None
            if labels is not None:
                # Shift so that tokens < n predict n
                shift_logits = logits[..., :-1, :].contiguous()
                shift_labels = labels[..., 1:].contiguous()
                # Flatten the tokens
                loss_fct = nn.CrossEntropyLoss()
                shift_logits = shift_logits.view(-1, self.config.vocab_size)
                shift_labels = shift_labels.view(-1)
                # Enable model parallelism
                shift_labels = shift_labels.to(shift_logits.device)
                loss = loss_fct(shift_logits, shift_labels)

            return loss, logits

    return LlamaForCausalLM(config)


# -- Inception v3 ---------------------------------------------------------------------------------
def make_inception_v3(
    torch,
    nn,
    F,
    num_classes=1000,
    aux_logits=True,
    transform_input=False,
    init_weights=True,
    dropout=0.5,
    width_div=16,
):
    """torchvision's ``Inception3`` (``BasicConv2d``, ``InceptionA``..``InceptionE``,
    ``InceptionAux``, the asymmetric 1x7/7x1 convolutions, ``stddev`` attributes on modules
    for the initialization); every channel count is divided by ``width_div``."""
    InceptionOutputs = namedtuple("InceptionOutputs", ["logits", "aux_logits"])

    def w(c):
        return c // width_div

    class BasicConv2d(nn.Module):
        def __init__(self, in_channels, out_channels, **kwargs):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
            self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

        def forward(self, x):
            x = self.conv(x)
            x = self.bn(x)
            return F.relu(x, inplace=True)

    class InceptionA(nn.Module):
        def __init__(self, in_channels, pool_features, conv_block=None):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.branch1x1 = conv_block(in_channels, w(64), kernel_size=1)

            self.branch5x5_1 = conv_block(in_channels, w(48), kernel_size=1)
            self.branch5x5_2 = conv_block(w(48), w(64), kernel_size=5, padding=2)

            self.branch3x3dbl_1 = conv_block(in_channels, w(64), kernel_size=1)
            self.branch3x3dbl_2 = conv_block(w(64), w(96), kernel_size=3, padding=1)
            self.branch3x3dbl_3 = conv_block(w(96), w(96), kernel_size=3, padding=1)

            self.branch_pool = conv_block(in_channels, pool_features, kernel_size=1)

        def _forward(self, x):
            branch1x1 = self.branch1x1(x)

            branch5x5 = self.branch5x5_1(x)
            branch5x5 = self.branch5x5_2(branch5x5)

            branch3x3dbl = self.branch3x3dbl_1(x)
            branch3x3dbl = self.branch3x3dbl_2(branch3x3dbl)
            branch3x3dbl = self.branch3x3dbl_3(branch3x3dbl)

            branch_pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)
            branch_pool = self.branch_pool(branch_pool)

            outputs = [branch1x1, branch5x5, branch3x3dbl, branch_pool]
            return outputs

        def forward(self, x):
            outputs = self._forward(x)
            return torch.cat(outputs, 1)

    class InceptionB(nn.Module):
        def __init__(self, in_channels, conv_block=None):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.branch3x3 = conv_block(in_channels, w(384), kernel_size=3, stride=2)

            self.branch3x3dbl_1 = conv_block(in_channels, w(64), kernel_size=1)
            self.branch3x3dbl_2 = conv_block(w(64), w(96), kernel_size=3, padding=1)
            self.branch3x3dbl_3 = conv_block(w(96), w(96), kernel_size=3, stride=2)

        def _forward(self, x):
            branch3x3 = self.branch3x3(x)

            branch3x3dbl = self.branch3x3dbl_1(x)
            branch3x3dbl = self.branch3x3dbl_2(branch3x3dbl)
            branch3x3dbl = self.branch3x3dbl_3(branch3x3dbl)

            branch_pool = F.max_pool2d(x, kernel_size=3, stride=2)

            outputs = [branch3x3, branch3x3dbl, branch_pool]
            return outputs

        def forward(self, x):
            outputs = self._forward(x)
            return torch.cat(outputs, 1)

    class InceptionC(nn.Module):
        def __init__(self, in_channels, channels_7x7, conv_block=None):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.branch1x1 = conv_block(in_channels, w(192), kernel_size=1)

            c7 = channels_7x7
            self.branch7x7_1 = conv_block(in_channels, c7, kernel_size=1)
            self.branch7x7_2 = conv_block(c7, c7, kernel_size=(1, 7), padding=(0, 3))
            self.branch7x7_3 = conv_block(c7, w(192), kernel_size=(7, 1), padding=(3, 0))

            self.branch7x7dbl_1 = conv_block(in_channels, c7, kernel_size=1)
            self.branch7x7dbl_2 = conv_block(c7, c7, kernel_size=(7, 1), padding=(3, 0))
            self.branch7x7dbl_3 = conv_block(c7, c7, kernel_size=(1, 7), padding=(0, 3))
            self.branch7x7dbl_4 = conv_block(c7, c7, kernel_size=(7, 1), padding=(3, 0))
            self.branch7x7dbl_5 = conv_block(c7, w(192), kernel_size=(1, 7), padding=(0, 3))

            self.branch_pool = conv_block(in_channels, w(192), kernel_size=1)

        def _forward(self, x):
            branch1x1 = self.branch1x1(x)

            branch7x7 = self.branch7x7_1(x)
            branch7x7 = self.branch7x7_2(branch7x7)
            branch7x7 = self.branch7x7_3(branch7x7)

            branch7x7dbl = self.branch7x7dbl_1(x)
            branch7x7dbl = self.branch7x7dbl_2(branch7x7dbl)
            branch7x7dbl = self.branch7x7dbl_3(branch7x7dbl)
            branch7x7dbl = self.branch7x7dbl_4(branch7x7dbl)
            branch7x7dbl = self.branch7x7dbl_5(branch7x7dbl)

            branch_pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)
            branch_pool = self.branch_pool(branch_pool)

            outputs = [branch1x1, branch7x7, branch7x7dbl, branch_pool]
            return outputs

        def forward(self, x):
            outputs = self._forward(x)
            return torch.cat(outputs, 1)

    class InceptionD(nn.Module):
        def __init__(self, in_channels, conv_block=None):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.branch3x3_1 = conv_block(in_channels, w(192), kernel_size=1)
            self.branch3x3_2 = conv_block(w(192), w(320), kernel_size=3, stride=2)

            self.branch7x7x3_1 = conv_block(in_channels, w(192), kernel_size=1)
            self.branch7x7x3_2 = conv_block(w(192), w(192), kernel_size=(1, 7), padding=(0, 3))
            self.branch7x7x3_3 = conv_block(w(192), w(192), kernel_size=(7, 1), padding=(3, 0))
            self.branch7x7x3_4 = conv_block(w(192), w(192), kernel_size=3, stride=2)

        def _forward(self, x):
            branch3x3 = self.branch3x3_1(x)
            branch3x3 = self.branch3x3_2(branch3x3)

            branch7x7x3 = self.branch7x7x3_1(x)
            branch7x7x3 = self.branch7x7x3_2(branch7x7x3)
            branch7x7x3 = self.branch7x7x3_3(branch7x7x3)
            branch7x7x3 = self.branch7x7x3_4(branch7x7x3)

            branch_pool = F.max_pool2d(x, kernel_size=3, stride=2)
            outputs = [branch3x3, branch7x7x3, branch_pool]
            return outputs

        def forward(self, x):
            outputs = self._forward(x)
            return torch.cat(outputs, 1)

    class InceptionE(nn.Module):
        def __init__(self, in_channels, conv_block=None):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.branch1x1 = conv_block(in_channels, w(320), kernel_size=1)

            self.branch3x3_1 = conv_block(in_channels, w(384), kernel_size=1)
            self.branch3x3_2a = conv_block(w(384), w(384), kernel_size=(1, 3), padding=(0, 1))
            self.branch3x3_2b = conv_block(w(384), w(384), kernel_size=(3, 1), padding=(1, 0))

            self.branch3x3dbl_1 = conv_block(in_channels, w(448), kernel_size=1)
            self.branch3x3dbl_2 = conv_block(w(448), w(384), kernel_size=3, padding=1)
            self.branch3x3dbl_3a = conv_block(w(384), w(384), kernel_size=(1, 3), padding=(0, 1))
            self.branch3x3dbl_3b = conv_block(w(384), w(384), kernel_size=(3, 1), padding=(1, 0))

            self.branch_pool = conv_block(in_channels, w(192), kernel_size=1)

        def _forward(self, x):
            branch1x1 = self.branch1x1(x)

            branch3x3 = self.branch3x3_1(x)
            branch3x3 = [
                self.branch3x3_2a(branch3x3),
                self.branch3x3_2b(branch3x3),
            ]
            branch3x3 = torch.cat(branch3x3, 1)

            branch3x3dbl = self.branch3x3dbl_1(x)
            branch3x3dbl = self.branch3x3dbl_2(branch3x3dbl)
            branch3x3dbl = [
                self.branch3x3dbl_3a(branch3x3dbl),
                self.branch3x3dbl_3b(branch3x3dbl),
            ]
            branch3x3dbl = torch.cat(branch3x3dbl, 1)

            branch_pool = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)
            branch_pool = self.branch_pool(branch_pool)

            outputs = [branch1x1, branch3x3, branch3x3dbl, branch_pool]
            return outputs

        def forward(self, x):
            outputs = self._forward(x)
            return torch.cat(outputs, 1)

    class InceptionAux(nn.Module):
        def __init__(self, in_channels, num_classes, conv_block=None):
            super().__init__()
            if conv_block is None:
                conv_block = BasicConv2d
            self.conv0 = conv_block(in_channels, w(128), kernel_size=1)
            self.conv1 = conv_block(w(128), w(768), kernel_size=5)
            self.conv1.stddev = 0.01  # type: ignore[assignment]
            self.fc = nn.Linear(w(768), num_classes)
            self.fc.stddev = 0.001  # type: ignore[assignment]

        def forward(self, x):
            # N x 768 x 17 x 17
            x = F.avg_pool2d(x, kernel_size=5, stride=3)
            # N x 768 x 5 x 5
            x = self.conv0(x)
            # N x 128 x 5 x 5
            x = self.conv1(x)
            # N x 768 x 1 x 1
            # Adaptive average pooling
            x = F.adaptive_avg_pool2d(x, (1, 1))
            # N x 768 x 1 x 1
            x = torch.flatten(x, 1)
            # N x 768
            x = self.fc(x)
            # N x 1000
            return x

    class Inception3(nn.Module):
        def __init__(
            self,
            num_classes=1000,
            aux_logits=True,
            transform_input=False,
            inception_blocks=None,
            init_weights=None,
            dropout=0.5,
        ):
            super().__init__()
            if inception_blocks is None:
                inception_blocks = [
                    BasicConv2d,
                    InceptionA,
                    InceptionB,
                    InceptionC,
                    InceptionD,
                    InceptionE,
                    InceptionAux,
                ]
            if init_weights is None:
                init_weights = True
            if len(inception_blocks) != 7:
                raise ValueError(
                    f"length of inception_blocks should be 7 instead of {len(inception_blocks)}"
                )
            conv_block = inception_blocks[0]
            inception_a = inception_blocks[1]
            inception_b = inception_blocks[2]
            inception_c = inception_blocks[3]
            inception_d = inception_blocks[4]
            inception_e = inception_blocks[5]
            inception_aux = inception_blocks[6]

            self.aux_logits = aux_logits
            self.transform_input = transform_input
            self.Conv2d_1a_3x3 = conv_block(3, w(32), kernel_size=3, stride=2)
            self.Conv2d_2a_3x3 = conv_block(w(32), w(32), kernel_size=3)
            self.Conv2d_2b_3x3 = conv_block(w(32), w(64), kernel_size=3, padding=1)
            self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
            self.Conv2d_3b_1x1 = conv_block(w(64), w(80), kernel_size=1)
            self.Conv2d_4a_3x3 = conv_block(w(80), w(192), kernel_size=3)
            self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
            self.Mixed_5b = inception_a(w(192), pool_features=w(32))
            self.Mixed_5c = inception_a(w(256), pool_features=w(64))
            self.Mixed_5d = inception_a(w(288), pool_features=w(64))
            self.Mixed_6a = inception_b(w(288))
            self.Mixed_6b = inception_c(w(768), channels_7x7=w(128))
            self.Mixed_6c = inception_c(w(768), channels_7x7=w(160))
            self.Mixed_6d = inception_c(w(768), channels_7x7=w(160))
            self.Mixed_6e = inception_c(w(768), channels_7x7=w(192))
            self.AuxLogits = None
            if aux_logits:
                self.AuxLogits = inception_aux(w(768), num_classes)
            self.Mixed_7a = inception_d(w(768))
            self.Mixed_7b = inception_e(w(1280))
            self.Mixed_7c = inception_e(w(2048))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.dropout = nn.Dropout(p=dropout)
            self.fc = nn.Linear(w(2048), num_classes)
            if init_weights:
                for m in self.modules():
                    if isinstance(m, nn.Conv2d) or isinstance(m, nn.Linear):
                        stddev = float(m.stddev) if hasattr(m, "stddev") else 0.1  # type: ignore
                        torch.nn.init.trunc_normal_(m.weight, mean=0.0, std=stddev, a=-2, b=2)
                    elif isinstance(m, nn.BatchNorm2d):
                        nn.init.constant_(m.weight, 1)
                        nn.init.constant_(m.bias, 0)

        def _transform_input(self, x):
            if self.transform_input:
                x_ch0 = torch.unsqueeze(x[:, 0], 1) * (0.229 / 0.5) + (0.485 - 0.5) / 0.5
                x_ch1 = torch.unsqueeze(x[:, 1], 1) * (0.224 / 0.5) + (0.456 - 0.5) / 0.5
                x_ch2 = torch.unsqueeze(x[:, 2], 1) * (0.225 / 0.5) + (0.406 - 0.5) / 0.5
                x = torch.cat((x_ch0, x_ch1, x_ch2), 1)
            return x

        def _forward(self, x):
            # N x 3 x 299 x 299
            x = self.Conv2d_1a_3x3(x)
            # N x 32 x 149 x 149
            x = self.Conv2d_2a_3x3(x)
            # N x 32 x 147 x 147
            x = self.Conv2d_2b_3x3(x)
            # N x 64 x 147 x 147
            x = self.maxpool1(x)
            # N x 64 x 73 x 73
            x = self.Conv2d_3b_1x1(x)
            # N x 80 x 73 x 73
            x = self.Conv2d_4a_3x3(x)
            # N x 192 x 71 x 71
            x = self.maxpool2(x)
            # N x 192 x 35 x 35
            x = self.Mixed_5b(x)
            # N x 256 x 35 x 35
            x = self.Mixed_5c(x)
            # N x 288 x 35 x 35
            x = self.Mixed_5d(x)
            # N x 288 x 35 x 35
            x = self.Mixed_6a(x)
            # N x 768 x 17 x 17
            x = self.Mixed_6b(x)
            # N x 768 x 17 x 17
            x = self.Mixed_6c(x)
            # N x 768 x 17 x 17
            x = self.Mixed_6d(x)
            # N x 768 x 17 x 17
            x = self.Mixed_6e(x)
            # N x 768 x 17 x 17
            aux = None
            if self.AuxLogits is not None:
                if self.training:
                    aux = self.AuxLogits(x)
            # N x 768 x 17 x 17
            x = self.Mixed_7a(x)
            # N x 1280 x 8 x 8
            x = self.Mixed_7b(x)
            # N x 2048 x 8 x 8
            x = self.Mixed_7c(x)
            # N x 2048 x 8 x 8
            # Adaptive average pooling
            x = self.avgpool(x)
            # N x 2048 x 1 x 1
            x = self.dropout(x)
            # N x 2048 x 1 x 1
            x = torch.flatten(x, 1)
            # N x 2048
            x = self.fc(x)
            # N x 1000 (num_classes)
            return x, aux

        def eager_outputs(self, x, aux):
            if self.training and self.aux_logits:
                return InceptionOutputs(x, aux)
            else:
                return x  # type: ignore[return-value]

        def forward(self, x):
            x = self._transform_input(x)
            x, aux = self._forward(x)
            aux_defined = self.training and self.aux_logits
            return self.eager_outputs(x, aux) if aux_defined else x

    return Inception3(
        num_classes=num_classes,
        aux_logits=aux_logits,
        transform_input=transform_input,
        init_weights=init_weights,
        dropout=dropout,
    )


# -- ResNet + FPN (torchvision.models.detection.backbone_utils) -----------------------------------
def make_resnet_fpn(
    torch,
    nn,
    F,
    trainable_layers=3,
    returned_layers=None,
    out_channels=8,
    width=4,
):
    """torchvision's ``resnet_fpn_backbone``: a ResNet-50-style backbone on
    ``FrozenBatchNorm2d`` with its first layers frozen (``requires_grad_(False)``),
    ``IntermediateLayerGetter`` (an ``nn.ModuleDict`` returning an ``OrderedDict``),
    ``FeaturePyramidNetwork`` (nearest ``interpolate`` to the lateral's ``shape[-2:]``) and
    ``LastLevelMaxPool``; ``out_channels`` is 256 there."""
    Conv2dNormActivation = _ops(torch, nn, F).Conv2dNormActivation

    class FrozenBatchNorm2d(nn.Module):
        def __init__(self, num_features, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.register_buffer("weight", torch.ones(num_features))
            self.register_buffer("bias", torch.zeros(num_features))
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))

        def forward(self, x):
            # move reshapes to the beginning
            # to make it user-friendly
            w = self.weight.reshape(1, -1, 1, 1)
            b = self.bias.reshape(1, -1, 1, 1)
            rv = self.running_var.reshape(1, -1, 1, 1)
            rm = self.running_mean.reshape(1, -1, 1, 1)
            scale = w * (rv + self.eps).rsqrt()
            bias = b - rm * scale
            return x * scale + bias

        def __repr__(self):
            return f"{self.__class__.__name__}({self.weight.shape[0]}, eps={self.eps})"

    class IntermediateLayerGetter(nn.ModuleDict):
        _version = 2

        def __init__(self, model, return_layers):
            if not set(return_layers).issubset([name for name, _ in model.named_children()]):
                raise ValueError("return_layers are not present in model")
            orig_return_layers = return_layers
            return_layers = {str(k): str(v) for k, v in return_layers.items()}
            layers = OrderedDict()
            for name, module in model.named_children():
                layers[name] = module
                if name in return_layers:
                    del return_layers[name]
                if not return_layers:
                    break

            super().__init__(layers)
            self.return_layers = orig_return_layers

        def forward(self, x):
            out = OrderedDict()
            for name, module in self.items():
                x = module(x)
                if name in self.return_layers:
                    out_name = self.return_layers[name]
                    out[out_name] = x
            return out

    class ExtraFPNBlock(nn.Module):
        def forward(self, results, x, names):
            pass

    class LastLevelMaxPool(ExtraFPNBlock):
        """Applies a max_pool2d (not actual max_pool2d, we just subsample) on top of the last
        feature map"""

        def forward(self, x, y, names):
            names.append("pool")
            # Use max pooling to simulate stride 2 subsampling
            x.append(F.max_pool2d(x[-1], kernel_size=1, stride=2, padding=0))
            return x, names

    class FeaturePyramidNetwork(nn.Module):
        _version = 2

        def __init__(self, in_channels_list, out_channels, extra_blocks=None, norm_layer=None):
            super().__init__()
            self.inner_blocks = nn.ModuleList()
            self.layer_blocks = nn.ModuleList()
            for in_channels in in_channels_list:
                if in_channels == 0:
                    raise ValueError("in_channels=0 is currently not supported")
                inner_block_module = Conv2dNormActivation(
                    in_channels,
                    out_channels,
                    kernel_size=1,
                    padding=0,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
                layer_block_module = Conv2dNormActivation(
                    out_channels,
                    out_channels,
                    kernel_size=3,
                    norm_layer=norm_layer,
                    activation_layer=None,
                )
                self.inner_blocks.append(inner_block_module)
                self.layer_blocks.append(layer_block_module)

            # initialize parameters now to avoid modifying the initialization of top_blocks
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_uniform_(m.weight, a=1)
                    if m.bias is not None:
                        nn.init.constant_(m.bias, 0)

            if extra_blocks is not None:
                if not isinstance(extra_blocks, ExtraFPNBlock):
                    raise TypeError(
                        f"extra_blocks should be of type ExtraFPNBlock not {type(extra_blocks)}"
                    )
            self.extra_blocks = extra_blocks

        def get_result_from_inner_blocks(self, x, idx):
            """This is equivalent to self.inner_blocks[idx](x), but torchscript doesn't support
            this yet"""
            num_blocks = len(self.inner_blocks)
            if idx < 0:
                idx += num_blocks
            out = x
            for i, module in enumerate(self.inner_blocks):
                if i == idx:
                    out = module(x)
            return out

        def get_result_from_layer_blocks(self, x, idx):
            num_blocks = len(self.layer_blocks)
            if idx < 0:
                idx += num_blocks
            out = x
            for i, module in enumerate(self.layer_blocks):
                if i == idx:
                    out = module(x)
            return out

        def forward(self, x):
            # unpack OrderedDict into two lists for easier handling
            names = list(x.keys())
            x = list(x.values())

            last_inner = self.get_result_from_inner_blocks(x[-1], -1)
            results = []
            results.append(self.get_result_from_layer_blocks(last_inner, -1))

            for idx in range(len(x) - 2, -1, -1):
                inner_lateral = self.get_result_from_inner_blocks(x[idx], idx)
                feat_shape = inner_lateral.shape[-2:]
                inner_top_down = F.interpolate(last_inner, size=feat_shape, mode="nearest")
                last_inner = inner_lateral + inner_top_down
                results.insert(0, self.get_result_from_layer_blocks(last_inner, idx))

            if self.extra_blocks is not None:
                results, names = self.extra_blocks(results, x, names)

            # make it back an OrderedDict
            out = OrderedDict([(k, v) for k, v in zip(names, results)])

            return out

    class BackboneWithFPN(nn.Module):
        def __init__(
            self,
            backbone,
            return_layers,
            in_channels_list,
            out_channels,
            extra_blocks=None,
            norm_layer=None,
        ):
            super().__init__()

            if extra_blocks is None:
                extra_blocks = LastLevelMaxPool()

            self.body = IntermediateLayerGetter(backbone, return_layers=return_layers)
            self.fpn = FeaturePyramidNetwork(
                in_channels_list=in_channels_list,
                out_channels=out_channels,
                extra_blocks=extra_blocks,
                norm_layer=norm_layer,
            )
            self.out_channels = out_channels

        def forward(self, x):
            x = self.body(x)
            x = self.fpn(x)
            return x

    def _resnet_fpn_extractor(
        backbone, trainable_layers, returned_layers=None, extra_blocks=None, norm_layer=None
    ):
        # select layers that won't be frozen
        if trainable_layers < 0 or trainable_layers > 5:
            raise ValueError(
                f"Trainable layers should be in the range [0,5], got {trainable_layers}"
            )
        layers_to_train = ["layer4", "layer3", "layer2", "layer1", "conv1"][:trainable_layers]
        if trainable_layers == 5:
            layers_to_train.append("bn1")
        for name, parameter in backbone.named_parameters():
            if all([not name.startswith(layer) for layer in layers_to_train]):
                parameter.requires_grad_(False)

        if extra_blocks is None:
            extra_blocks = LastLevelMaxPool()

        if returned_layers is None:
            returned_layers = [1, 2, 3, 4]
        if min(returned_layers) <= 0 or max(returned_layers) >= 5:
            raise ValueError(
                f"Each returned layer should be in the range [1,4]. Got {returned_layers}"
            )
        return_layers = {f"layer{k}": str(v) for v, k in enumerate(returned_layers)}

        in_channels_stage2 = backbone.inplanes // 8
        in_channels_list = [in_channels_stage2 * 2 ** (i - 1) for i in returned_layers]
        return BackboneWithFPN(
            backbone,
            return_layers,
            in_channels_list,
            out_channels,
            extra_blocks=extra_blocks,
            norm_layer=norm_layer,
        )

    backbone = make_resnext(
        torch,
        nn,
        F,
        layers=(1, 1, 1, 1),
        groups=1,
        width_per_group=64,
        width=width,
        norm_layer=FrozenBatchNorm2d,
    )
    return _resnet_fpn_extractor(backbone, trainable_layers, returned_layers)
