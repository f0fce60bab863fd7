"""Real ports, continued (the harness: ``tests/real_ports.py``): data augmentation of video
clips in tensor ops, programs written here in the style of torchvision's tensor colour
transforms (``ColorJitter`` on ``(T, C, H, W)`` clips) and of a video training script (random
resized crops by a spatial transformer, a small 3-D CNN).

- colour jitter: luma by ``unbind(dim=-3)`` and ``.to(img.dtype)``, ``unsqueeze(dim=-3)``,
  ``expand``; a blend ``(r * a + (1 - r) * b).clamp(0, bound).to(dtype)`` with the bound by
  dtype (``torch.uint8`` ... comparisons); brightness, contrast by ``torch.mean(..., dim=(-3,
  -2, -1), keepdim=True)`` after ``torch.is_floating_point``, saturation; the hue through HSV:
  ``torch.max(img, dim=-3).values``/``torch.min``, ``torch.where`` of the grey mask, bool masks
  combined by ``&`` and multiplied into float tensors, ``torch.fmod``, ``(h + f) % 1.0``, and
  back: ``torch.floor``, ``.to(dtype=torch.int32)``, int ``% 6``, a one-hot sector mask by
  comparing with ``torch.arange(6, device=...).view(-1, 1, 1)``, ``torch.stack`` on
  ``dim=-3``/``-4`` and ``torch.einsum`` of an equation with ellipses and spaces; the gradient
  taken back to the clip through every step (the hue's included), float32 and float64.
- training: ``F.affine_grid(theta, [n, c, h, w], align_corners=False)`` and ``grid_sample``
  with ``mode``/``padding_mode``, one ``theta`` a clip folded over its frames by
  ``repeat_interleave``, ``nn.Conv3d`` with tuple arguments, ``nn.BatchNorm3d``,
  ``nn.AdaptiveAvgPool3d((1, 1, 1))``, ``F.cross_entropy(label_smoothing=0.1)``, ``Adam``.

Regressions guarded: gradients through ``max(dim).values``, boolean-times-float masks,
``fmod`` and the int one-hot ``einsum``; ``from torch import Tensor`` annotations. The lines
changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``, ``clip.grad(grads)``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

FUNCTIONAL_TENSOR_SOURCE = """
import torch
from torch import Tensor

LUMA = (0.299, 0.587, 0.114)


def top_value(dtype: torch.dtype) -> float:
    # the brightest value of an image of this dtype (floats are in [0, 1])
    limits = {torch.uint8: 255, torch.int16: 32767, torch.int32: 2**31 - 1}
    return limits.get(dtype, 1.0)


def channels_of(img: Tensor) -> int:
    if img.ndim < 3:
        raise TypeError(f"expected (..., C, H, W), got {img.ndim} dimensions")
    return img.shape[-3]


def gray(img: Tensor, keep_channels: bool = False) -> Tensor:
    if channels_of(img) == 1:
        return img.clone()
    red, green, blue = img.unbind(dim=-3)
    mono = (LUMA[0] * red + LUMA[1] * green + LUMA[2] * blue).to(img.dtype).unsqueeze(dim=-3)
    return mono.expand(img.shape) if keep_channels else mono


def mix(img: Tensor, other: Tensor, amount: float) -> Tensor:
    amount = float(amount)
    mixed = amount * img + (1.0 - amount) * other
    return mixed.clamp(0, top_value(img.dtype)).to(img.dtype)


def brightness(img: Tensor, factor: float) -> Tensor:
    return mix(img, torch.zeros_like(img), factor)


def contrast(img: Tensor, factor: float) -> Tensor:
    work = img.dtype if torch.is_floating_point(img) else torch.float32
    level = torch.mean(gray(img).to(work), dim=(-3, -2, -1), keepdim=True)
    return mix(img, level, factor)


def saturation(img: Tensor, factor: float) -> Tensor:
    return img if channels_of(img) == 1 else mix(img, gray(img), factor)


def to_hsv(img: Tensor) -> Tensor:
    red, green, blue = img.unbind(dim=-3)
    high = torch.max(img, dim=-3).values
    low = torch.min(img, dim=-3).values
    grey = high == low  # hue and saturation undefined: divide by one instead of zero
    spread = high - low
    sat = spread / torch.where(grey, torch.ones_like(high), high)
    safe = torch.where(grey, torch.ones_like(high), spread)
    dr, dg, db = (high - red) / safe, (high - green) / safe, (high - blue) / safe
    from_red = (high == red) * (db - dg)
    from_green = ((high == green) & (high != red)) * (2.0 + dr - db)
    from_blue = ((high != green) & (high != red)) * (4.0 + dg - dr)
    hue = torch.fmod((from_red + from_green + from_blue) / 6.0 + 1.0, 1.0)
    return torch.stack((hue, sat, high), dim=-3)


def from_hsv(img: Tensor) -> Tensor:
    hue, sat, val = img.unbind(dim=-3)
    sector = torch.floor(hue * 6.0)
    frac = hue * 6.0 - sector
    sector = sector.to(dtype=torch.int32) % 6
    lo = torch.clamp(val * (1.0 - sat), 0.0, 1.0)
    falling = torch.clamp(val * (1.0 - sat * frac), 0.0, 1.0)
    rising = torch.clamp(val * (1.0 - sat * (1.0 - frac)), 0.0, 1.0)
    # per sector, which of (val, rising, falling, lo) each channel takes
    red = torch.stack((val, falling, lo, lo, rising, val), dim=-3)
    green = torch.stack((rising, val, val, falling, lo, lo), dim=-3)
    blue = torch.stack((lo, lo, rising, val, val, falling), dim=-3)
    table = torch.stack((red, green, blue), dim=-4)
    pick = sector.unsqueeze(dim=-3) == torch.arange(6, device=sector.device).view(-1, 1, 1)
    return torch.einsum("...sij, ...csij -> ...cij", pick.to(dtype=img.dtype), table)


def hue(img: Tensor, shift: float) -> Tensor:
    if not -0.5 <= shift <= 0.5:
        raise ValueError(f"hue shift {shift} outside [-0.5, 0.5]")
    if channels_of(img) == 1:
        return img
    h, s, v = to_hsv(img).unbind(dim=-3)
    return from_hsv(torch.stack(((h + shift) % 1.0, s, v), dim=-3))
"""

FT_STEPS = [
    (
        "import torch\nfrom torch import Tensor\n",
        "import retrograd as torch\nfrom retrograd import Tensor\n",
    ),
]


def _jitter(ft, clip, factors):
    """ColorJitter's forward with its draws given: the order and the four factors."""
    order, *amounts = factors
    steps = [ft["brightness"], ft["contrast"], ft["saturation"], ft["hue"]]
    for which in order:
        clip = steps[which](clip, amounts[which])
    return clip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torchvision_colour_jitter_of_video_clips_and_its_gradient_as_torch(dtype):
    rng = np.random.default_rng(2330)
    clips = rng.uniform(0.02, 0.98, (2, 4, 3, 8, 8))  # (N, T, C, H, W)
    clips[0, 0, :, 0, 0] = 0.5  # a grey pixel: maxc == minc
    weights = rng.standard_normal(clips.shape)
    factors = ([3, 0, 2, 1], 1.2, 0.8, 1.3, 0.1)
    results = []
    for lib in (torch, rg):
        ft = run_source(
            FUNCTIONAL_TENSOR_SOURCE if lib is torch else port(FUNCTIONAL_TENSOR_SOURCE, FT_STEPS),
            lib,
        )
        clip = lib.tensor(clips, dtype=getattr(lib, dtype), requires_grad=True)
        out = _jitter(ft, clip, factors)
        loss = (out * lib.tensor(weights, dtype=getattr(lib, dtype))).sum()
        if lib is torch:
            loss.backward()
            grad = clip.grad
        else:
            grads = loss.backward()
            grad = clip.grad(grads)
        hsv = ft["to_hsv"](lib.tensor(clips, dtype=getattr(lib, dtype)))
        results.append(
            [out.detach().numpy(), grad.numpy(), hsv.numpy(), str(out.dtype).split(".")[-1]]
        )
    tolerance = {"float32": (1e-5, 1e-6), "float64": (1e-12, 1e-13)}[dtype]
    assert_records_agree(results[1], results[0], *tolerance)


TRAIN_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn.functional import affine_grid, grid_sample


def crop_theta(area, aspect, centre):
    # a crop covering `area` of the frame with this aspect, in affine_grid's [-1, 1] frame
    across, down = (area * aspect) ** 0.5, (area / aspect) ** 0.5
    return torch.tensor([[across, 0.0, centre[0]], [0.0, down, centre[1]]])


def resized_crops(clips, thetas, side):
    n, t, c, h, w = clips.shape
    per_frame = thetas.repeat_interleave(t, dim=0)  # every frame of a clip: the same crop
    grid = affine_grid(per_frame, [n * t, c, side, side], align_corners=False)
    frames = clips.reshape(n * t, c, h, w)
    frames = grid_sample(frames, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return frames.reshape(n, t, c, side, side)


class ClipNet(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv3d(3, 6, kernel_size=(3, 3, 3), padding=(1, 1, 1), bias=False),
            nn.BatchNorm3d(6),
            nn.ReLU(inplace=True),
            nn.Conv3d(6, 10, (3, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), bias=False),
            nn.BatchNorm3d(10),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool3d(output_size=(1, 1, 1)),
        )
        self.classify = nn.Linear(10, classes)

    def forward(self, clips):  # (N, T, C, H, W): Conv3d wants channels before time
        return self.classify(torch.flatten(self.stem(clips.permute(0, 2, 1, 3, 4)), 1))


def train_clips(ft, jitter, clips, labels, draws, record, initialize):
    net = ClipNet(3)
    initialize(net)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for colour, crops in draws:
        batch = jitter(ft, torch.tensor(clips), colour)
        thetas = torch.cat([crop_theta(*crop) for crop in crops]).view(-1, 2, 3)
        batch = resized_crops(batch, thetas, 10)
        loss = F.cross_entropy(net(batch), torch.tensor(labels), label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record += [loss.item(), batch.numpy()]
    record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
"""

TRAIN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_jittered_and_resized_crops_of_clips_train_a_3d_cnn_as_torch():
    rng = np.random.default_rng(2331)
    clips = rng.uniform(0, 1, (3, 3, 3, 12, 12)).astype(np.float32)
    labels = np.array([0, 2, 1])
    draws = [
        (
            ([1, 3, 0, 2], 0.9, 1.1, 0.7, -0.2),
            [(0.6, 1.2, (0.1, -0.2)), (0.8, 0.9, (0.0, 0.1)), (0.5, 1.0, (-0.2, 0.2))],
        ),
        (
            ([0, 2, 3, 1], 1.1, 0.9, 1.2, 0.05),
            [(0.7, 1.0, (-0.1, 0.0)), (0.9, 1.3, (0.1, 0.1)), (0.4, 0.8, (0.3, -0.3))],
        ),
        (
            ([2, 1, 0, 3], 1.0, 1.3, 0.9, 0.3),
            [(1.0, 1.0, (0.0, 0.0)), (0.6, 0.75, (0.2, 0.0)), (0.8, 1.1, (0.0, -0.1))],
        ),
    ]
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        ft = run_source(
            FUNCTIONAL_TENSOR_SOURCE if lib is torch else port(FUNCTIONAL_TENSOR_SOURCE, FT_STEPS),
            lib,
        )
        record = []
        text = TRAIN_SOURCE if lib is torch else ported_imports(port(TRAIN_SOURCE, TRAIN_STEPS))
        program = run_source(text, lib)
        program["train_clips"](ft, _jitter, clips, labels, draws, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
