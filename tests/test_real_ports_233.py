# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
data augmentation of video clips written in tensor ops.

- torchvision's tensor colour transforms as ``transforms/_functional_tensor.py`` writes them
  (``_blend``, ``rgb_to_grayscale`` by ``unbind(dim=-3)``, ``adjust_brightness``,
  ``adjust_contrast`` by the ``mean`` over ``dim=(-3, -2, -1)``, ``adjust_saturation``,
  ``adjust_hue`` through ``_rgb2hsv`` (``torch.max(img, dim=-3).values``, a bool mask times a
  float tensor, ``torch.fmod``) and ``_hsv2rgb`` (int32 ``i % 6``, the one-hot ``mask`` by
  comparing with ``torch.arange(6).view(-1, 1, 1)``, ``torch.einsum("...ijk, ...xijk ->
  ...xjk", ...)``)), applied to ``(T, C, H, W)`` clips as torchvision's video transforms apply
  them, with the gradient taken back to the clip through every one (the hue's included).
- a random resized crop of whole clips by ``F.affine_grid`` and ``F.grid_sample`` (the
  harness's own few lines, in the spatial transformer's form: one ``theta`` a clip, its
  frames folded into the batch by ``repeat_interleave``), then a small 3-D CNN trained on the
  jittered, cropped clips with Adam.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``, ``clip.grad(grads)``).
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


FUNCTIONAL_TENSOR_SOURCE = """
from typing import List

import torch
from torch import Tensor
from torch.nn.functional import grid_sample


def _is_tensor_a_torch_image(x: Tensor) -> bool:
    return x.ndim >= 2


def _assert_image_tensor(img: Tensor) -> None:
    if not _is_tensor_a_torch_image(img):
        raise TypeError("Tensor is not a torch image.")


def get_dimensions(img: Tensor) -> List[int]:
    _assert_image_tensor(img)
    channels = 1 if img.ndim == 2 else img.shape[-3]
    height, width = img.shape[-2:]
    return [channels, height, width]


def _max_value(dtype: torch.dtype) -> int:
    if dtype == torch.uint8:
        return 255
    elif dtype == torch.int8:
        return 127
    elif dtype == torch.int16:
        return 32767
    elif dtype == torch.int32:
        return 2147483647
    elif dtype == torch.int64:
        return 9223372036854775807
    else:
        # This is only here for completeness. This value is implicitly assumed in a lot of places so changing it is not
        # easy.
        return 1


def _assert_channels(img: Tensor, permitted: List[int]) -> None:
    c = get_dimensions(img)[0]
    if c not in permitted:
        raise TypeError(f"Input image tensor permitted channel values are {permitted}, but found {c}")


def rgb_to_grayscale(img: Tensor, num_output_channels: int = 1) -> Tensor:
    if img.ndim < 3:
        raise TypeError(f"Input image tensor should have at least 3 dimensions, but found {img.ndim}")
    _assert_channels(img, [1, 3])

    if num_output_channels not in (1, 3):
        raise ValueError("num_output_channels should be either 1 or 3")

    if img.shape[-3] == 3:
        r, g, b = img.unbind(dim=-3)
        # This implementation closely follows the TF one:
        # https://github.com/tensorflow/tensorflow/blob/v2.3.0/tensorflow/python/ops/image_ops_impl.py#L2105-L2138
        l_img = (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype)
        l_img = l_img.unsqueeze(dim=-3)
    else:
        l_img = img.clone()

    if num_output_channels == 3:
        return l_img.expand(img.shape)

    return l_img


def adjust_brightness(img: Tensor, brightness_factor: float) -> Tensor:
    if brightness_factor < 0:
        raise ValueError(f"brightness_factor ({brightness_factor}) is not non-negative.")

    _assert_image_tensor(img)

    _assert_channels(img, [1, 3])

    return _blend(img, torch.zeros_like(img), brightness_factor)


def adjust_contrast(img: Tensor, contrast_factor: float) -> Tensor:
    if contrast_factor < 0:
        raise ValueError(f"contrast_factor ({contrast_factor}) is not non-negative.")

    _assert_image_tensor(img)

    _assert_channels(img, [3, 1])
    c = get_dimensions(img)[0]
    dtype = img.dtype if torch.is_floating_point(img) else torch.float32
    if c == 3:
        mean = torch.mean(rgb_to_grayscale(img).to(dtype), dim=(-3, -2, -1), keepdim=True)
    else:
        mean = torch.mean(img.to(dtype), dim=(-3, -2, -1), keepdim=True)

    return _blend(img, mean, contrast_factor)


def adjust_hue(img: Tensor, hue_factor: float) -> Tensor:
    if not (-0.5 <= hue_factor <= 0.5):
        raise ValueError(f"hue_factor ({hue_factor}) is not in [-0.5, 0.5].")

    if not (isinstance(img, torch.Tensor)):
        raise TypeError("Input img should be Tensor image")

    _assert_image_tensor(img)

    _assert_channels(img, [1, 3])
    if get_dimensions(img)[0] == 1:  # Match PIL behaviour
        return img

    orig_dtype = img.dtype
    if img.dtype == torch.uint8:
        img = img.to(dtype=torch.float32) / 255.0

    img = _rgb2hsv(img)
    h, s, v = img.unbind(dim=-3)
    h = (h + hue_factor) % 1.0
    img = torch.stack((h, s, v), dim=-3)
    img_hue_adj = _hsv2rgb(img)

    if orig_dtype == torch.uint8:
        img_hue_adj = (img_hue_adj * 255.0).to(dtype=orig_dtype)

    return img_hue_adj


def adjust_saturation(img: Tensor, saturation_factor: float) -> Tensor:
    if saturation_factor < 0:
        raise ValueError(f"saturation_factor ({saturation_factor}) is not non-negative.")

    _assert_image_tensor(img)

    _assert_channels(img, [1, 3])

    if get_dimensions(img)[0] == 1:  # Match PIL behaviour
        return img

    return _blend(img, rgb_to_grayscale(img), saturation_factor)


def _blend(img1: Tensor, img2: Tensor, ratio: float) -> Tensor:
    ratio = float(ratio)
    bound = _max_value(img1.dtype)
    return (ratio * img1 + (1.0 - ratio) * img2).clamp(0, bound).to(img1.dtype)


def _rgb2hsv(img: Tensor) -> Tensor:
    r, g, b = img.unbind(dim=-3)

    # Implementation is based on https://github.com/python-pillow/Pillow/blob/4174d4267616897df3746d315d5a2d0f82c656ee/
    # src/libImaging/Convert.c#L330
    maxc = torch.max(img, dim=-3).values
    minc = torch.min(img, dim=-3).values

    # The algorithm erases S and H channel where `maxc = minc`. This avoids NaN
    # from happening in the results, because
    #   + S channel has division by `maxc`, which is zero only if `maxc = minc`
    #   + H channel has division by `(maxc - minc)`.
    #
    # Instead of overwriting NaN afterwards, we just prevent it from occurring, so
    # we don't need to deal with it in case we save the NaN in a buffer in
    # backprop, if it is ever supported, but it doesn't hurt to do so.
    eqc = maxc == minc

    cr = maxc - minc
    # Since `eqc => cr = 0`, replacing denominator with 1 when `eqc` is fine.
    ones = torch.ones_like(maxc)
    s = cr / torch.where(eqc, ones, maxc)
    # Note that `eqc => maxc = minc = r = g = b`. So the following calculation
    # of `h` would reduce to `bc - gc + 2 + rc - bc + 4 + rc - bc = 6` so it
    # would not matter what values `rc`, `gc`, and `bc` have here, and thus
    # replacing denominator with 1 when `eqc` is fine.
    cr_divisor = torch.where(eqc, ones, cr)
    rc = (maxc - r) / cr_divisor
    gc = (maxc - g) / cr_divisor
    bc = (maxc - b) / cr_divisor

    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = hr + hg + hb
    h = torch.fmod((h / 6.0 + 1.0), 1.0)
    return torch.stack((h, s, maxc), dim=-3)


def _hsv2rgb(img: Tensor) -> Tensor:
    h, s, v = img.unbind(dim=-3)
    i = torch.floor(h * 6.0)
    f = (h * 6.0) - i
    i = i.to(dtype=torch.int32)

    p = torch.clamp((v * (1.0 - s)), 0.0, 1.0)
    q = torch.clamp((v * (1.0 - s * f)), 0.0, 1.0)
    t = torch.clamp((v * (1.0 - s * (1.0 - f))), 0.0, 1.0)
    i = i % 6

    mask = i.unsqueeze(dim=-3) == torch.arange(6, device=i.device).view(-1, 1, 1)

    a1 = torch.stack((v, q, p, p, t, v), dim=-3)
    a2 = torch.stack((t, v, v, q, p, p), dim=-3)
    a3 = torch.stack((p, p, t, v, v, q), dim=-3)
    a4 = torch.stack((a1, a2, a3), dim=-4)

    return torch.einsum("...ijk, ...xijk -> ...xjk", mask.to(dtype=img.dtype), a4)
"""

FT_STEPS = [
    (
        "import torch\nfrom torch import Tensor\nfrom torch.nn.functional import grid_sample\n",
        "import retrograd as torch\nfrom retrograd import Tensor\nfrom retrograd.nn.functional import grid_sample\n",
    ),
]


def _jitter(ft, clip, factors):
    """ColorJitter's forward with its draws given: ``fn_idx`` and the four factors."""
    fn_idx, brightness, contrast, saturation, hue = factors
    for fn_id in fn_idx:
        if fn_id == 0:
            clip = ft["adjust_brightness"](clip, brightness)
        elif fn_id == 1:
            clip = ft["adjust_contrast"](clip, contrast)
        elif fn_id == 2:
            clip = ft["adjust_saturation"](clip, saturation)
        elif fn_id == 3:
            clip = ft["adjust_hue"](clip, hue)
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
        hsv = ft["_rgb2hsv"](lib.tensor(clips, dtype=getattr(lib, dtype)))
        results.append(
            [out.detach().numpy(), grad.numpy(), hsv.numpy(), str(out.dtype).split(".")[-1]]
        )
    tolerance = {"float32": (1e-5, 1e-6), "float64": (1e-12, 1e-13)}[dtype]
    assert_records_agree(results[1], results[0], *tolerance)


TRAIN_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def random_resized_crop_params(scale, ratio, offset):
    # the crop as a fraction of the frame, centred at ``offset`` (in [-1, 1] coordinates)
    w = (scale * ratio) ** 0.5
    h = (scale / ratio) ** 0.5
    return torch.tensor([[w, 0.0, offset[0]], [0.0, h, offset[1]]])


def crop_clips(clips, thetas, size):
    n, t, c, height, width = clips.shape
    frames = clips.reshape(n * t, c, height, width)
    theta = thetas.repeat_interleave(t, dim=0)
    grid = F.affine_grid(theta, [n * t, c, size, size], align_corners=False)
    cropped = F.grid_sample(frames, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return cropped.reshape(n, t, c, size, size)


class TinyC3D(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv3d(3, 8, kernel_size=(3, 3, 3), padding=(1, 1, 1), bias=False),
            nn.BatchNorm3d(8),
            nn.ReLU(inplace=True),
            nn.Conv3d(8, 16, kernel_size=(3, 3, 3), stride=(1, 2, 2), padding=(1, 1, 1), bias=False),
            nn.BatchNorm3d(16),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool3d((1, 1, 1)),
        )
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = x.permute(0, 2, 1, 3, 4)  # (N, T, C, H, W) -> (N, C, T, H, W)
        return self.fc(torch.flatten(self.features(x), 1))


def main(ft, jitter, clips, labels, draws, record, initialize):
    model = TinyC3D(3)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step, (factors, crops) in enumerate(draws):
        clip = torch.tensor(clips)
        clip = jitter(ft, clip, factors)
        thetas = torch.cat([random_resized_crop_params(*crop) for crop in crops]).view(-1, 2, 3)
        clip = crop_clips(clip, thetas, 12)
        loss = F.cross_entropy(model(clip), torch.tensor(labels), label_smoothing=0.1)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(clip.numpy())
    record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
"""

TRAIN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_jittered_and_resized_crops_of_clips_train_a_3d_cnn_as_torch():
    rng = np.random.default_rng(2331)
    clips = rng.uniform(0, 1, (3, 4, 3, 16, 16)).astype(np.float32)
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
        program = run_source(TRAIN_SOURCE if lib is torch else port(TRAIN_SOURCE, TRAIN_STEPS), lib)
        program["main"](ft, _jitter, clips, labels, draws, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
