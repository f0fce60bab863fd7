"""Real ports, continued (the harness: ``tests/real_ports.py``): an image-augmentation module
written here in the style of torchvision's tensor transforms (``transforms/_functional_tensor.py``),
run on uint8, int16 and float32 images, torch used as an array library.

Surface: dtype conversion (float to int by ``mul(top + 1 - eps)`` and a truncating ``.to``,
int to int by ``torch.div(..., rounding_mode="floor")`` or an integer factor), a crop past the
border through ``F.pad``, constant/replicate/reflect padding of a uint8 image cast to float32 and
back, symmetric padding by index tensors ``img[:, rows[:, None], cols[None, :]]`` with negative
indices, a luma sum truncated into uint8, blending (``ratio * img`` of uint8,
``clamp(0, top).to(dtype)``), gamma, ``255 - img``, ``img & -int(2 ** (8 - bits))`` on uint8,
``torch.where`` solarizing, sharpening (``kernel /= kernel.sum()``, ``torch.round`` before the
cast back, a write into ``out[..., 1:-1, 1:-1]``), autocontrast (``amin``/``amax`` over
``dim=(-2, -1)``, ``torch.isfinite(scale).logical_not()`` and ``low[flat] = 0``), histogram
equalization (``torch.bincount(..., minlength=256)``, ``hist[hist != 0]``, floor division of
int64, ``if step == 0``, ``torch.cumsum``, ``F.pad`` of an int64 table,
``table[img.to(torch.int64)]``),
a grouped ``conv2d`` Gaussian blur, affine/rotate/perspective sampling grids (``torch.empty``
filled through ``grid[..., 0].copy_(...)`` and ``fill_``, ``linspace(...).unsqueeze_(-1)``,
``bmm``, ``(corners / tol).trunc_()`` for the expanded size, a mask channel through
``grid_sample`` and ``img[outside] = colour[outside]``) and ``interpolate`` with
``antialias=False`` (bicubic clamped for uint8).

Regressions guarded: each of the forms above once failed or disagreed with torch on integer
images (the truncating casts, floor division of integer tensors, bitwise and with a negative
Python int on uint8, boolean-mask writes, in-place ``copy_``/``fill_``/``unsqueeze_``/``trunc_``
on views, int64 ``F.pad`` and ``bincount``'s ``minlength``); the error forms torchvision raises
(``TypeError`` for non-uint8 posterize, ``RuntimeError`` for an unsafe float-to-int64 cast) pass
through a port unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import port, run_source

AUGMENT_SOURCE = """
import torch
import torch.nn.functional as F

INT_TOPS = {torch.uint8: 255, torch.int8: 127, torch.int16: 32767, torch.int32: 2**31 - 1}


def top_of(dtype):
    return INT_TOPS.get(dtype, 1)


def working_float(img):
    return img.dtype if img.is_floating_point() else torch.float32


def change_dtype(img, dtype):
    # Floats live in [0, 1]; integers span their whole positive range.
    if img.dtype == dtype:
        return img
    target_is_float = torch.tensor(0, dtype=dtype).is_floating_point()
    if img.is_floating_point():
        if target_is_float:
            return img.to(dtype)
        if dtype == torch.int64:
            raise RuntimeError(f"{img.dtype} to {dtype} cannot be performed safely")
        # a hair under top + 1 so that only 1.0 itself lands on the top value
        return img.mul(top_of(dtype) + 1.0 - 1e-3).to(dtype)
    if target_is_float:
        return img.to(dtype) / float(top_of(img.dtype))
    src, dst = top_of(img.dtype) + 1, top_of(dtype) + 1
    if src > dst:
        return torch.div(img, src // dst, rounding_mode="floor").to(dtype)
    return img.to(dtype) * (dst // src)


def as_float_batch(img, dtype):
    squeezed = img.ndim == 3
    if squeezed:
        img = img.unsqueeze(0)
    return img.to(dtype), (squeezed, img.dtype)


def from_float_batch(img, how):
    squeezed, dtype = how
    if squeezed:
        img = img.squeeze(0)
    if not torch.is_floating_point(torch.tensor(0, dtype=dtype)):
        img = torch.round(img)  # nearest integer, not the truncating cast
    return img.to(dtype)


def pad_image(img, left, right, top, bottom, mode="constant", value=0):
    if mode == "symmetric":
        h, w = img.shape[-2:]
        if min(left, right, top, bottom) < 0:
            img = img[..., max(-top, 0) : h - max(-bottom, 0), max(-left, 0) : w - max(-right, 0)]
            left, right, top, bottom = (max(n, 0) for n in (left, right, top, bottom))
            h, w = img.shape[-2:]
        before, after = list(range(left))[::-1], [-1 - i for i in range(right)]
        cols = torch.tensor(before + list(range(w)) + after)
        before, after = list(range(top))[::-1], [-1 - i for i in range(bottom)]
        rows = torch.tensor(before + list(range(h)) + after)
        return img[:, rows[:, None], cols[None, :]]
    if mode == "constant":
        return F.pad(img, [left, right, top, bottom], value=float(value))
    dtype = img.dtype
    batch = img.unsqueeze(0).to(torch.float32)
    return F.pad(batch, [left, right, top, bottom], mode=mode).squeeze(0).to(dtype)


def window(img, top, left, height, width):
    h, w = img.shape[-2:]
    bottom, right = top + height, left + width
    inside = img[..., max(top, 0) : bottom, max(left, 0) : right]
    return pad_image(inside, max(-left, 0), max(right - w, 0), max(-top, 0), max(bottom - h, 0))


def luma(img):
    red, green, blue = img.unbind(dim=-3)
    return (0.299 * red + 0.587 * green + 0.114 * blue).to(img.dtype).unsqueeze(-3)


def mix(a, b, ratio):
    return (ratio * a + (1.0 - ratio) * b).clamp(0, top_of(a.dtype)).to(a.dtype)


def contrast(img, factor):
    grey = luma(img) if img.shape[-3] == 3 else img
    centre = torch.mean(grey.to(working_float(img)), dim=(-3, -2, -1), keepdim=True)
    return mix(img, centre, factor)


def gamma(img, power, gain=1.0):
    as_float = change_dtype(img, torch.float32)
    return change_dtype((gain * as_float**power).clamp(0, 1), img.dtype)


def negative(img):
    return top_of(img.dtype) - img


def posterize(img, bits):
    if img.dtype != torch.uint8:
        raise TypeError(f"Only torch.uint8 images can be posterized, not {img.dtype}")
    return img & -int(2 ** (8 - bits))


def solarize(img, threshold):
    return torch.where(img >= threshold, negative(img), img)


def sharpen(img, factor):
    kernel = torch.ones((3, 3), dtype=working_float(img))
    kernel[1, 1] = 5.0
    kernel /= kernel.sum()
    kernel = kernel.expand(img.shape[-3], 1, 3, 3)
    batch, how = as_float_batch(img, kernel.dtype)
    smooth = from_float_batch(F.conv2d(batch, kernel, groups=batch.shape[1]), how)
    blurred = img.clone()
    blurred[..., 1:-1, 1:-1] = smooth
    return mix(img, blurred, factor)


def stretch(img):
    top = top_of(img.dtype)
    low = img.amin(dim=(-2, -1), keepdim=True).to(working_float(img))
    high = img.amax(dim=(-2, -1), keepdim=True).to(working_float(img))
    scale = top / (high - low)
    flat = torch.isfinite(scale).logical_not()  # a constant channel divides by zero
    low[flat] = 0
    scale[flat] = 1
    return ((img - low) * scale).clamp(0, top).to(img.dtype)


def equalize_plane(plane):
    hist = torch.bincount(plane.reshape(-1), minlength=256)
    step = torch.div(hist[hist != 0][:-1].sum(), 255, rounding_mode="floor")
    if step == 0:
        return plane
    half = torch.div(step, 2, rounding_mode="floor")
    table = torch.div(torch.cumsum(hist, 0) + half, step, rounding_mode="floor")
    table = F.pad(table, [1, 0])[:-1].clamp(0, 255)
    return table[plane.to(torch.int64)].to(torch.uint8)


def equalize(img):
    if img.ndim == 4:
        return torch.stack([equalize(one) for one in img])
    return torch.stack([equalize_plane(plane) for plane in img])


def blur(img, sizes, sigmas):
    dtype = working_float(img)
    factors = []
    for size, sigma in zip(sizes, sigmas):
        x = torch.linspace(-(size - 1) / 2, (size - 1) / 2, steps=size, dtype=dtype)
        bump = torch.exp(-0.5 * (x / sigma).pow(2))
        factors.append(bump / bump.sum())
    kernel = torch.mm(factors[1][:, None], factors[0][None, :])
    kernel = kernel.expand(img.shape[-3], 1, *kernel.shape)
    batch, how = as_float_batch(img, dtype)
    across, down = sizes[0] // 2, sizes[1] // 2
    batch = F.pad(batch, [across, across, down, down], mode="reflect")
    return from_float_batch(F.conv2d(batch, kernel, groups=batch.shape[1]), how)


def pixel_grid(out_w, out_h, dtype, x_from, y_from):
    grid = torch.empty(1, out_h, out_w, 3, dtype=dtype)
    grid[..., 0].copy_(torch.linspace(x_from, x_from + out_w - 1, steps=out_w))
    grid[..., 1].copy_(torch.linspace(y_from, y_from + out_h - 1, steps=out_h).unsqueeze_(-1))
    grid[..., 2].fill_(1)
    return grid.view(1, out_h * out_w, 3)


def sample(img, grid, mode, fill):
    batch, how = as_float_batch(img, grid.dtype)
    grid = grid.expand(batch.shape[0], *grid.shape[1:])
    if fill is not None:  # an extra channel of ones shows where the grid left the image
        batch = torch.cat((batch, torch.ones_like(batch[:, :1])), dim=1)
    batch = F.grid_sample(batch, grid, mode=mode, padding_mode="zeros", align_corners=False)
    if fill is not None:
        batch, inside = batch[:, :-1], batch[:, -1:].expand_as(batch[:, :-1])
        colours = fill if isinstance(fill, (list, tuple)) else [float(fill)]
        colour = torch.tensor(colours, dtype=batch.dtype).view(1, -1, 1, 1).expand_as(batch)
        if mode == "nearest":
            outside = inside < 0.5
            batch[outside] = colour[outside]
        else:
            batch = batch * inside + (1.0 - inside) * colour
    return from_float_batch(batch, how)


def warp(img, matrix, mode="nearest", fill=None, grow=False):
    h, w = img.shape[-2:]
    dtype = working_float(img)
    theta = torch.tensor(matrix, dtype=dtype).reshape(1, 2, 3)
    out_w, out_h = w, h
    if grow:
        corners = torch.tensor([[x * w / 2, y * h / 2, 1.0] for x in (-1, 1) for y in (-1, 1)])
        moved = torch.matmul(corners, theta[0].T) + torch.tensor((w / 2, h / 2))
        tol = 1e-4  # so that 3.00000001 does not ceil to 4
        high = torch.ceil((moved.max(dim=0)[0] / tol).trunc_() * tol)
        low = torch.floor((moved.min(dim=0)[0] / tol).trunc_() * tol)
        out_w, out_h = (int(n) for n in high - low)
    base = pixel_grid(out_w, out_h, dtype, 0.5 - out_w / 2, 0.5 - out_h / 2)
    grid = base.bmm(theta.transpose(1, 2) / torch.tensor([w / 2, h / 2], dtype=dtype))
    return sample(img, grid.view(1, out_h, out_w, 2), mode, fill)


def perspective(img, c, mode="bilinear", fill=None):
    h, w = img.shape[-2:]
    dtype = working_float(img)
    upper = torch.tensor([[[c[0], c[1], c[2]], [c[3], c[4], c[5]]]], dtype=dtype)
    lower = torch.tensor([[[c[6], c[7], 1.0], [c[6], c[7], 1.0]]], dtype=dtype)
    base = pixel_grid(w, h, dtype, 0.5, 0.5)
    halves = torch.tensor([w / 2, h / 2], dtype=dtype)
    grid = base.bmm(upper.transpose(1, 2) / halves) / base.bmm(lower.transpose(1, 2))
    return sample(img, (grid - 1.0).view(1, h, w, 2), mode, fill)


def resize(img, size, mode="bilinear"):
    batch, how = as_float_batch(img, torch.float32)
    corners = False if mode in ("bilinear", "bicubic") else None
    batch = F.interpolate(batch, size=size, mode=mode, align_corners=corners, antialias=False)
    if mode == "bicubic" and how[1] == torch.uint8:
        batch = batch.clamp(min=0, max=255)
    return from_float_batch(batch, how)
"""

AUGMENT_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\n",
    )
]


def _turn(degrees: float) -> list[float]:
    """The inverse affine matrix of a turn about the image centre."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return [c, s, 0.0, -s, c, 0.0]


def _images(rng):
    """A uint8 RGB batch with a constant channel (equalize's ``step == 0``, autocontrast's
    infinite scale), a uint8 grey image, an int16 image and a float image."""
    rgb = rng.integers(0, 256, (2, 3, 8, 9), dtype=np.uint8)
    rgb[1, 2] = 61
    grey = rng.integers(10, 240, (1, 6, 5), dtype=np.uint8)
    deep = rng.integers(0, 32768, (3, 4, 5), dtype=np.int16)
    floats = rng.uniform(0.0, 1.0, (3, 5, 6)).astype(np.float32)
    return rgb, grey, deep, floats


def _run(aug, lib, images):
    rgb, grey, deep, floats = (lib.from_numpy(x.copy()) for x in images)
    out = {
        "u8_to_float": aug["change_dtype"](rgb, lib.float32),
        "float_to_u8": aug["change_dtype"](floats, lib.uint8),
        "float_to_i16": aug["change_dtype"](floats, lib.int16),
        "i16_to_u8": aug["change_dtype"](deep, lib.uint8),
        "u8_to_i16": aug["change_dtype"](rgb, lib.int16),
        "i16_to_f64": aug["change_dtype"](deep, lib.float64),
        "window_past": aug["window"](grey, -2, 3, 7, 4),
        "grey": aug["luma"](rgb).expand(rgb.shape),
        "brighter": aug["mix"](rgb, lib.zeros_like(rgb), 1.6),
        "contrast": aug["contrast"](rgb, 0.7),
        "contrast_grey": aug["contrast"](grey, 1.3),
        "saturate": aug["mix"](rgb, aug["luma"](rgb), 1.8),
        "gamma": aug["gamma"](rgb, 0.6, gain=1.2),
        "gamma_i16": aug["gamma"](deep, 1.5),
        "negative_i16": aug["negative"](deep),
        "posterize": aug["posterize"](rgb, 3),
        "solarize": aug["solarize"](rgb, 140),
        "sharpen": aug["sharpen"](rgb, 2.2),
        "sharpen_float": aug["sharpen"](floats, 0.4),
        "stretch": aug["stretch"](rgb),
        "stretch_float": aug["stretch"](floats),
        "equalize": aug["equalize"](rgb),
        "equalize_grey": aug["equalize"](grey),
        "blur": aug["blur"](rgb, [5, 3], [1.1, 0.7]),
        "shear": aug["warp"](rgb, [0.9, 0.25, 1.0, -0.1, 1.05, -0.4], fill=[5, 90, 250]),
        "shear_float": aug["warp"](
            floats, [0.9, 0.25, 1.0, -0.1, 1.05, -0.4], "bilinear", fill=0.5
        ),
        "turn": aug["warp"](rgb, _turn(28.0), fill=180),
        "turn_grown": aug["warp"](grey, _turn(28.0), "bilinear", grow=True),
        "perspective": aug["perspective"](
            rgb, [1.05, 0.1, -0.4, 0.04, 0.9, 0.3, 0.01, -0.02], fill=[0, 100, 255]
        ),
        "resize": aug["resize"](rgb, [5, 12]),
        "resize_bicubic": aug["resize"](grey, [9, 4], "bicubic"),
        "resize_nearest": aug["resize"](deep, [6, 3], "nearest"),
    }
    for mode in ("constant", "replicate", "reflect", "symmetric"):
        out[f"pad_{mode}"] = aug["pad_image"](rgb[0], 2, 1, 3, 2, mode, value=7)
    out["pad_symmetric_cut"] = aug["pad_image"](grey, -1, 2, 3, -2, "symmetric")
    return {k: (str(v.dtype).split(".")[-1], tuple(v.shape), v.numpy()) for k, v in out.items()}


def test_torchvision_tensor_transforms_of_uint8_and_int16_images_as_torch():
    images = _images(np.random.default_rng(3110))
    theirs = _run(run_source(AUGMENT_SOURCE, torch), torch, images)
    ours = _run(run_source(port(AUGMENT_SOURCE, AUGMENT_STEPS), rg), rg, images)
    assert list(ours) == list(theirs)
    for name, (dtype, shape, values) in theirs.items():
        assert ours[name][:2] == (dtype, shape), name
        if values.dtype.kind == "f":
            np.testing.assert_allclose(ours[name][2], values, rtol=1e-5, atol=1e-5, err_msg=name)
        else:  # the truncating casts land on the same integers
            np.testing.assert_array_equal(ours[name][2], values, err_msg=name)


def test_the_transforms_refuse_what_torchvision_refuses():
    aug = run_source(port(AUGMENT_SOURCE, AUGMENT_STEPS), rg)
    floats = rg.rand(3, 4, 4)
    with pytest.raises(TypeError, match=r"Only torch\.uint8"):
        aug["posterize"](floats, 2)
    with pytest.raises(RuntimeError, match="cannot be performed safely"):
        aug["change_dtype"](floats, rg.int64)
