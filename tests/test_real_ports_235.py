# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
volumetric segmentation losses.

- wolny/pytorch-3dunet's losses as ``pytorch3dunet/unet3d/losses.py`` and ``utils.py`` write
  them: ``flatten`` (``permute((1, 0) + tuple(range(2, tensor.dim())))`` then
  ``contiguous().view(C, -1)``), ``compute_per_channel_dice`` with its V-Net squared
  denominator and ``clamp(min=epsilon)``, ``_AbstractDiceLoss`` (``register_buffer('weight',
  None)``, ``nn.Sigmoid``/``nn.Softmax(dim=1)`` or a ``lambda``), ``DiceLoss``,
  ``GeneralizedDiceLoss`` (the one-channel case ``torch.cat((input, 1 - input))``, ``w_l
  .requires_grad = False``), ``BCEDiceLoss``, ``expand_as_one_hot`` with ``ignore_index``
  (``input.expand(shape) == ignore_index``, ``input[input == ignore_index] = 0``, ``torch.zeros
  (shape).to(input.device).scatter_(1, input, 1)``, ``result[mask] = ignore_index``), beside
  ``F.cross_entropy(..., ignore_index=...)`` over ``(N, C, D, H, W)``; under a small 3-D
  encoder-decoder (the harness's: ``Conv3d``/``GroupNorm``/``MaxPool3d``, ``F.interpolate(...,
  mode='trilinear', align_corners=False)`` back to the skip's size) trained with Adam, in
  float64 (a pooled window of equal values would route the gradient by each run's rounding).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


LOSSES_SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn as nn


# -- pytorch3dunet/unet3d/utils.py ------------------------------------------------------
def expand_as_one_hot(input, C, ignore_index=None):
    \"\"\"
    Converts NxSPATIAL label image to NxCxSPATIAL, where each label gets converted to its corresponding one-hot vector.
    It is assumed that the batch dimension is present.
    Args:
        input (torch.Tensor): 3D/4D input image
        C (int): number of channels/labels
        ignore_index (int): ignore index to be kept during the expansion
    Returns:
        4D/5D output torch.Tensor (NxCxSPATIAL)
    \"\"\"
    assert input.dim() == 4

    # expand the input tensor to Nx1xSPATIAL before scattering
    input = input.unsqueeze(1)
    # create output tensor shape (NxCxSPATIAL)
    shape = list(input.size())
    shape[1] = C

    if ignore_index is not None:
        # create ignore_index mask for the result
        mask = input.expand(shape) == ignore_index
        # clone the src tensor and zero out ignore_index in the input
        input = input.clone()
        input[input == ignore_index] = 0
        # scatter to get the one-hot tensor
        result = torch.zeros(shape).to(input.device).scatter_(1, input, 1)
        # bring back the ignore_index in the result
        result[mask] = ignore_index
        return result
    else:
        # scatter to get the one-hot tensor
        return torch.zeros(shape).to(input.device).scatter_(1, input, 1)


# -- pytorch3dunet/unet3d/losses.py -----------------------------------------------------
def compute_per_channel_dice(input, target, epsilon=1e-6, weight=None):
    \"\"\"
    Computes DiceCoefficient as defined in https://arxiv.org/abs/1606.04797 given  a multi channel input and target.
    Assumes the input is a normalized probability, e.g. a result of Sigmoid or Softmax function.

    Args:
         input (torch.Tensor): NxCxSpatial input tensor
         target (torch.Tensor): NxCxSpatial target tensor
         epsilon (float): prevents division by zero
         weight (torch.Tensor): Cx1 tensor of weight per channel/class
    \"\"\"

    # input and target shapes must match
    assert input.size() == target.size(), "'input' and 'target' must have the same shape"

    input = flatten(input)
    target = flatten(target)
    target = target.float()

    # compute per channel Dice Coefficient
    intersect = (input * target).sum(-1)
    if weight is not None:
        intersect = weight * intersect

    # here we can use standard dice (input + target).sum(-1) or extension (see V-Net) (input^2 + target^2).sum(-1)
    denominator = (input * input).sum(-1) + (target * target).sum(-1)
    return 2 * (intersect / denominator.clamp(min=epsilon))


class _AbstractDiceLoss(nn.Module):
    \"\"\"
    Base class for different implementations of Dice loss.
    \"\"\"

    def __init__(self, weight=None, normalization='sigmoid'):
        super(_AbstractDiceLoss, self).__init__()
        self.register_buffer('weight', weight)
        # The output from the network during training is assumed to be un-normalized probabilities and we would
        # like to normalize the logits. Since Dice (or soft Dice in this case) is usually used for binary data,
        # normalizing the channels with Sigmoid is the default choice even for multi-class segmentation problems.
        # However if one would like to apply Softmax in order to get the proper probability distribution from the
        # output, just specify `normalization=Softmax`
        assert normalization in ['sigmoid', 'softmax', 'none']
        if normalization == 'sigmoid':
            self.normalization = nn.Sigmoid()
        elif normalization == 'softmax':
            self.normalization = nn.Softmax(dim=1)
        else:
            self.normalization = lambda x: x

    def dice(self, input, target, weight):
        # actual Dice score computation; to be implemented by the subclass
        raise NotImplementedError

    def forward(self, input, target):
        # get probabilities from logits
        input = self.normalization(input)

        # compute per channel Dice coefficient
        per_channel_dice = self.dice(input, target, weight=self.weight)

        # average Dice score across all channels/classes
        return 1. - torch.mean(per_channel_dice)


class DiceLoss(_AbstractDiceLoss):
    \"\"\"Computes Dice Loss according to https://arxiv.org/abs/1606.04797.
    For multi-class segmentation `weight` parameter can be used to assign different weights per class.
    The input to the loss function is assumed to be a logit and will be normalized by the Sigmoid function.
    \"\"\"

    def __init__(self, weight=None, normalization='sigmoid'):
        super().__init__(weight, normalization)

    def dice(self, input, target, weight):
        return compute_per_channel_dice(input, target, weight=self.weight)


class GeneralizedDiceLoss(_AbstractDiceLoss):
    \"\"\"Computes Generalized Dice Loss (GDL) as described in https://arxiv.org/pdf/1707.03237.pdf.
    \"\"\"

    def __init__(self, normalization='sigmoid', epsilon=1e-6):
        super().__init__(weight=None, normalization=normalization)
        self.epsilon = epsilon

    def dice(self, input, target, weight):
        assert input.size() == target.size(), "'input' and 'target' must have the same shape"

        input = flatten(input)
        target = flatten(target)
        target = target.float()

        if input.size(0) == 1:
            # for GDL to make sense we need at least 2 channels (see https://arxiv.org/pdf/1707.03237.pdf)
            # put foreground and background voxels in separate channels
            input = torch.cat((input, 1 - input), dim=0)
            target = torch.cat((target, 1 - target), dim=0)

        # GDL weighting: the contribution of each label is corrected by the inverse of its volume
        w_l = target.sum(-1)
        w_l = 1 / (w_l * w_l).clamp(min=self.epsilon)
        w_l.requires_grad = False

        intersect = (input * target).sum(-1)
        intersect = intersect * w_l

        denominator = (input + target).sum(-1)
        denominator = (denominator * w_l).clamp(min=self.epsilon)

        return 2 * (intersect.sum() / denominator.sum())


class BCEDiceLoss(nn.Module):
    \"\"\"Linear combination of BCE and Dice losses\"\"\"

    def __init__(self, alpha, beta):
        super(BCEDiceLoss, self).__init__()
        self.alpha = alpha
        self.bce = nn.BCEWithLogitsLoss()
        self.beta = beta
        self.dice = DiceLoss()

    def forward(self, input, target):
        return self.alpha * self.bce(input, target) + self.beta * self.dice(input, target)


def flatten(tensor):
    \"\"\"Flattens a given tensor such that the channel axis is first.
    The shapes are transformed as follows:
       (N, C, D, H, W) -> (C, N * D * H * W)
    \"\"\"
    # number of channels
    C = tensor.size(1)
    # new axis order
    axis_order = (1, 0) + tuple(range(2, tensor.dim()))
    # Transpose: (N, C, D, H, W) -> (C, N, D, H, W)
    transposed = tensor.permute(axis_order)
    # Flatten: (C, N, D, H, W) -> (C, N * D * H * W)
    return transposed.contiguous().view(C, -1)


# -- the harness's small 3-D encoder-decoder --------------------------------------------
class TinyUNet3D(nn.Module):
    def __init__(self, in_channels, out_channels, f_maps=4):
        super().__init__()
        self.enc1 = nn.Sequential(nn.GroupNorm(1, in_channels), nn.Conv3d(in_channels, f_maps, 3, padding=1, bias=False), nn.ReLU(inplace=True))
        self.pool = nn.MaxPool3d(kernel_size=2)
        self.enc2 = nn.Sequential(nn.GroupNorm(2, f_maps), nn.Conv3d(f_maps, 2 * f_maps, 3, padding=1, bias=False), nn.ReLU(inplace=True))
        self.dec1 = nn.Sequential(nn.GroupNorm(2, 3 * f_maps), nn.Conv3d(3 * f_maps, f_maps, 3, padding=1, bias=False), nn.ReLU(inplace=True))
        self.final_conv = nn.Conv3d(f_maps, out_channels, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        up = F.interpolate(e2, size=e1.size()[2:], mode='trilinear', align_corners=False)
        x = self.dec1(torch.cat((e1, up), dim=1))
        return self.final_conv(x)


def train(volumes, labels, loss_name, record, initialize):
    model = TinyUNet3D(1, 3).double()
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-5)
    volumes = torch.tensor(volumes)
    labels = torch.tensor(labels)
    if loss_name == 'dice':
        criterion = DiceLoss(weight=torch.tensor([0.5, 1.0, 2.0]).double(), normalization='softmax')
    elif loss_name == 'gdl':
        criterion = GeneralizedDiceLoss(normalization='sigmoid')
    elif loss_name == 'bce_dice':
        criterion = BCEDiceLoss(0.5, 0.5)
    for step in range(3):
        logits = model(volumes)
        if loss_name == 'cross_entropy':
            loss = F.cross_entropy(logits, labels, ignore_index=-1)
        else:
            target = expand_as_one_hot(labels, 3, ignore_index=-1)
            target = target.clamp(min=0).double()
            loss = criterion(logits, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
    record.append(expand_as_one_hot(labels, 3, ignore_index=-1).numpy())
"""

LOSSES_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nfrom retrograd import nn as nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("loss_name", ["dice", "gdl", "bce_dice", "cross_entropy"])
def test_pytorch_3dunet_losses_train_a_volumetric_segmenter_as_torch(loss_name):
    rng = np.random.default_rng(2350)
    volumes = rng.standard_normal((2, 1, 6, 8, 8))
    labels = rng.integers(0, 3, (2, 6, 8, 8))
    labels[0, :2, :3, :3] = -1  # ignored voxels
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        program = run_source(
            LOSSES_SOURCE if lib is torch else port(LOSSES_SOURCE, LOSSES_STEPS), lib
        )
        program["train"](volumes, labels, loss_name, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)
