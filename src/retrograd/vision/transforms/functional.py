"""torchvision.transforms.functional over retrograd: the image operations of the v1 transforms,
on tensors ``[..., C, H, W]`` (float in [0, 1] or integer in [0, 255]) and on PIL images, with
torchvision's arithmetic (functional_tensor.py / functional_pil.py)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from enum import Enum
from typing import Any

import numpy as np

from ... import nn as _nn
from ...errors import DTypeError, InvalidArgumentError, ShapeError
from ...tensor import Tensor
from ...tensor.dtypes import DTYPE_OBJECTS, canonical_dtype
from .. import _lib as rg

F = _nn.functional


class InterpolationMode(Enum):
    """torchvision's interpolation names (the values are PIL's and F.interpolate's modes)."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


_PIL_RESAMPLE = {"nearest": 0, "lanczos": 1, "bilinear": 2, "bicubic": 3, "box": 4, "hamming": 5}
_PIL_CODES = {code: mode for mode, code in _PIL_RESAMPLE.items()}


def _interpolation(value: Any) -> InterpolationMode:
    if isinstance(value, InterpolationMode):
        return value
    if isinstance(value, int) and value in _PIL_CODES:  # PIL's Image.BILINEAR etc.
        return InterpolationMode(_PIL_CODES[value])
    try:
        return InterpolationMode(value)
    except ValueError:
        raise InvalidArgumentError(
            f"interpolation {value!r} is not an InterpolationMode (or PIL resample code)"
        ) from None


def _pil():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - PIL is a dependency of the examples extra
        raise ImportError("PIL images need Pillow: pip install pillow") from None
    return Image


def _is_pil_image(img: Any) -> bool:
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover
        return False
    return isinstance(img, Image.Image)


def _check_image(fn: str, img: Any) -> None:
    if _is_pil_image(img):
        return
    if not isinstance(img, Tensor):
        raise InvalidArgumentError(
            f"{fn}: img should be a PIL Image or a Tensor, got {type(img).__name__}"
        )
    if img.dim() < 2:
        raise ShapeError(
            f"{fn}: a tensor image has shape [..., H, W] (2 dimensions at least), got "
            f"{list(img.shape)}"
        )


def get_dimensions(img: Any) -> list[int]:
    """[channels, height, width]."""
    _check_image("get_dimensions", img)
    if _is_pil_image(img):
        return [len(img.getbands()), img.height, img.width]
    channels = 1 if img.dim() == 2 else img.shape[-3]
    return [channels, img.shape[-2], img.shape[-1]]


def get_image_size(img: Any) -> list[int]:
    """[width, height] (torchvision's order)."""
    _, height, width = get_dimensions(img)
    return [width, height]


def get_image_num_channels(img: Any) -> int:
    return get_dimensions(img)[0]


def _is_float(img: Tensor) -> bool:
    return img.is_floating_point()


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("retrograd.")


def _check_number(fn: str, name: str, value: Any) -> None:
    """torchvision's ``TypeError`` for an argument that must be a number (a str angle, a
    list given for a factor), rather than Python's from the arithmetic inside."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise DTypeError(f"{fn}: {name} should be a number, got {value!r}")


def _max_value(img: Tensor) -> float:
    return 1.0 if _is_float(img) else float(np.iinfo(np.dtype(str(img.dtype))).max)


# ---- conversions ----------------------------------------------------------------------------


def to_tensor(pic: Any) -> Tensor:
    """A PIL image or HWC ndarray as a CHW tensor; uint8 data scaled to float in [0, 1]."""

    if _is_pil_image(pic):
        mode = pic.mode
        # torchvision's mode_to_nptype: 32-bit, 16-bit and float modes keep their values
        dtype = {"I": np.int32, "I;16": np.int16, "F": np.float32}.get(mode, np.uint8)
        array = np.array(pic, dtype=dtype, copy=True)
        if mode == "1":
            array = array * np.uint8(255)
    elif isinstance(pic, np.ndarray):
        if pic.ndim not in (2, 3):
            raise ShapeError(f"to_tensor: pic should be 2 or 3 dimensional, got {pic.ndim}")
        array = pic
    else:
        raise InvalidArgumentError(
            f"to_tensor: pic should be a PIL Image or ndarray, got {type(pic).__name__}"
        )
    if array.ndim == 2:
        array = array[:, :, None]
    tensor = rg.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
    if array.dtype == np.uint8:
        return tensor.to(rg.get_default_dtype()).div(255)
    return tensor


def pil_to_tensor(pic: Any) -> Tensor:
    """A PIL image as a CHW tensor of its own dtype (no scaling)."""

    if not _is_pil_image(pic):
        raise InvalidArgumentError(f"pil_to_tensor: pic should be a PIL Image, got {type(pic)}")
    array = np.array(pic, copy=True)
    if array.ndim == 2:
        array = array[:, :, None]
    return rg.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def to_pil_image(pic: Any, mode: str | None = None) -> Any:
    """A CHW tensor or HWC ndarray as a PIL image (float data scaled by 255 and truncated)."""
    image_module = _pil()
    if isinstance(pic, Tensor):
        if pic.dim() not in (2, 3):
            raise ShapeError(f"to_pil_image: pic should be 2/3 dimensional, got {pic.dim()}")
        if pic.dim() == 2:
            pic = pic.unsqueeze(0)
        if pic.is_floating_point() and mode != "F":
            pic = pic.mul(255).byte()
        array = np.transpose(pic.detach().cpu().numpy(), (1, 2, 0))
    elif isinstance(pic, np.ndarray):
        if pic.ndim not in (2, 3):
            raise ShapeError(f"to_pil_image: pic should be 2/3 dimensional, got {pic.ndim}")
        array = pic[:, :, None] if pic.ndim == 2 else pic
    else:
        raise InvalidArgumentError(
            f"to_pil_image: pic should be a Tensor or ndarray, got {type(pic).__name__}"
        )
    channels = array.shape[-1]
    if channels == 1:
        array = array[:, :, 0]
        if mode is None:
            mode = {np.uint8: "L", np.int16: "I;16", np.int32: "I", np.float32: "F"}.get(
                array.dtype.type
            )
            if mode is None:
                raise InvalidArgumentError(
                    f"to_pil_image: input type {array.dtype} is not supported"
                )
    elif mode is None:
        mode = {2: "LA", 3: "RGB", 4: "RGBA"}.get(channels)
        if mode is None:
            raise InvalidArgumentError(f"to_pil_image: {channels} channels are not supported")
        if array.dtype != np.uint8:
            raise InvalidArgumentError(
                f"to_pil_image: {channels}-channel images must be uint8, got {array.dtype}"
            )
    try:
        return image_module.fromarray(array, mode=mode)
    except (ValueError, TypeError) as error:  # PIL's "Invalid mode for data type"
        raise InvalidArgumentError(
            f"to_pil_image: mode {mode!r} does not hold {channels}-channel {array.dtype} data "
            f"({error})"
        ) from None


def convert_image_dtype(image: Tensor, dtype: Any = None) -> Tensor:
    """Float <-> integer images with torchvision's scaling."""

    if not isinstance(image, Tensor):
        raise DTypeError(
            f"convert_image_dtype: image should be a Tensor, got {type(image).__name__}"
        )
    dtype = DTYPE_OBJECTS[
        canonical_dtype("convert_image_dtype", rg.float32 if dtype is None else dtype)
    ]
    if image.dtype == dtype:
        return image
    target_float = rg.empty(0, dtype=dtype).is_floating_point()
    if image.is_floating_point():
        if target_float:
            return image.to(dtype)
        # torchvision's refusal: a float32 holds no integer beyond 2**24, so its 1.0 scaled to
        # an int32's or int64's maximum (and a float64's to an int64's) overflows the cast
        unsafe = {"float32": ("int32", "int64"), "float64": ("int64",)}
        if _dtype_name(dtype) in unsafe.get(_dtype_name(image.dtype), ()):
            raise InvalidArgumentError(
                f"convert_image_dtype: the cast from {image.dtype} to {dtype} cannot be "
                "performed safely"
            )
        eps = 1e-3
        top = float(np.iinfo(np.dtype(str(dtype).replace("retrograd.", ""))).max)
        return image.mul(top + 1.0 - eps).to(dtype)
    top_in = _max_value(image)
    if target_float:
        return image.to(dtype).div(top_in)
    top_out = float(np.iinfo(np.dtype(str(dtype).replace("retrograd.", ""))).max)
    return image.to(rg.float64).mul((top_out + 1) / (top_in + 1)).floor().to(dtype)


# ---- geometry -------------------------------------------------------------------------------


def normalize(tensor: Tensor, mean: Sequence[float], std: Sequence[float], inplace: bool = False):
    """(tensor - mean) / std per channel of a float tensor [..., C, H, W]."""

    if not isinstance(tensor, Tensor):
        raise InvalidArgumentError(f"normalize: img should be a Tensor, got {type(tensor)}")
    if not tensor.is_floating_point():
        raise InvalidArgumentError(
            f"normalize: input tensor should be a float tensor, got {tensor.dtype}"
        )
    if tensor.dim() < 3:
        raise ShapeError(
            f"normalize: expected a tensor image of size (..., C, H, W), got {list(tensor.shape)}"
        )
    for name, values in (("mean", mean), ("std", std)):
        flat = values if isinstance(values, list | tuple) else [values]
        if not all(
            isinstance(v, numbers.Real | Tensor | np.ndarray) and not isinstance(v, bool)
            for v in flat
        ):  # (rg.tensor("abc") said "tensor: cannot make a tensor from data of dtype <U3")
            raise DTypeError(f"normalize: {name} should hold numbers, got {values!r}")
    mean_t = rg.as_tensor(mean, dtype=tensor.dtype)
    std_t = rg.as_tensor(std, dtype=tensor.dtype)
    if bool((std_t == 0).any()):
        raise InvalidArgumentError(
            f"normalize: std evaluated to zero after conversion to {tensor.dtype}, leading "
            "to division by zero"
        )
    channels = tensor.shape[-3]
    for name, value in (("mean", mean_t), ("std", std_t)):
        if value.dim() > 1 or value.numel() not in (1, channels):
            raise ShapeError(
                f"normalize: {name} has {value.numel()} values for an image of {channels} "
                f"channels (shape {list(tensor.shape)}); give 1 or {channels}"
            )
    if mean_t.dim() == 1:
        mean_t = mean_t.view(-1, 1, 1)
    if std_t.dim() == 1:
        std_t = std_t.view(-1, 1, 1)
    if inplace:
        return tensor.sub_(mean_t).div_(std_t)
    return tensor.sub(mean_t).div(std_t)


def _resized_size(height: int, width: int, size: Any, max_size: int | None) -> list[int]:
    # torchvision: "Size should be int or sequence" (a TypeError), for a float too
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = [size]
    if not isinstance(size, list | tuple) or not all(
        isinstance(extent, numbers.Integral) and not isinstance(extent, bool) for extent in size
    ):
        raise DTypeError(f"resize: size should be an int or a sequence of ints, got {size!r}")
    size = [int(extent) for extent in size]
    if any(extent <= 0 for extent in size):  # (PIL's bare "height and width must be > 0")
        raise ShapeError(f"resize: size must be positive, got {size}")
    if len(size) == 1:
        short, long = (width, height) if width <= height else (height, width)
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None:
            if max_size <= size[0]:
                raise InvalidArgumentError(
                    f"resize: max_size = {max_size} must be strictly greater than the "
                    f"requested size for the smaller edge size = {size}"
                )
            if new_long > max_size:
                new_short, new_long = int(max_size * new_short / new_long), max_size
        return [new_long, new_short] if width <= height else [new_short, new_long]
    if len(size) != 2:
        raise InvalidArgumentError(f"resize: size should be an int or a 1/2-sequence, got {size}")
    if max_size is not None:
        raise InvalidArgumentError("resize: max_size is only supported for a single int size")
    return [int(size[0]), int(size[1])]


def _float_op(img: Tensor):
    """A tensor as float for arithmetic (uint8 -> float32), and the function back."""

    dtype = img.dtype
    if img.is_floating_point():
        return img, lambda out: out
    return (
        img.to(rg.float32),
        lambda out: (
            out.round()
            .clamp(
                *(
                    np.iinfo(np.dtype(str(dtype).replace("retrograd.", ""))).min,
                    np.iinfo(np.dtype(str(dtype).replace("retrograd.", ""))).max,
                )
            )
            .to(dtype)
        ),
    )


def _batched(img: Tensor):
    """[..., C, H, W] as [N, C, H, W] and the function back."""
    shape = list(img.shape)
    if img.dim() == 2:
        return img.reshape(1, 1, *shape), lambda out: out.reshape(out.shape[-2:])
    lead = shape[:-3]
    flat = img.reshape(-1, *shape[-3:])
    return flat, lambda out: out.reshape(*lead, *out.shape[-3:])


def resize(
    img: Any,
    size: Any,
    interpolation: Any = InterpolationMode.BILINEAR,
    max_size: int | None = None,
    antialias: bool | None = True,
) -> Any:
    """Resize to ``size`` ([h, w], or the smaller edge when an int)."""
    _check_image("resize", img)
    mode = _interpolation(interpolation)
    _, height, width = get_dimensions(img)
    out_h, out_w = _resized_size(height, width, size, max_size)
    if [out_h, out_w] == [height, width]:
        return img
    if _is_pil_image(img):
        if mode.value not in _PIL_RESAMPLE:
            raise InvalidArgumentError(f"resize: PIL images do not support {mode}")
        return img.resize((out_w, out_h), _PIL_RESAMPLE[mode.value])
    if mode.value not in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        raise InvalidArgumentError(f"resize: tensors support nearest/bilinear/bicubic, not {mode}")
    batch, unbatch = _batched(img)
    as_float, back = _float_op(batch)
    kwargs: dict[str, Any] = {}
    if mode.value in ("bilinear", "bicubic"):
        kwargs = {"align_corners": False, "antialias": bool(antialias)}
    out = F.interpolate(as_float, size=[out_h, out_w], mode=mode.value, **kwargs)
    if mode is InterpolationMode.BICUBIC and not batch.is_floating_point():
        out = out.clamp(0, 255)
    return unbatch(back(out))


def _pad_ltrb(padding: Any) -> list[int]:
    # torchvision: "Got inappropriate padding arg" (a TypeError) for all but ints
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        padding = [padding]
    if not isinstance(padding, list | tuple) or not all(
        isinstance(p, numbers.Integral) and not isinstance(p, bool) for p in padding
    ):
        raise DTypeError(f"pad: padding should be an int or a sequence of ints, got {padding!r}")
    padding = [int(p) for p in padding]
    if len(padding) == 1:
        return padding * 4
    if len(padding) == 2:
        return [padding[0], padding[1], padding[0], padding[1]]
    if len(padding) == 4:
        return padding
    raise InvalidArgumentError(
        f"pad: padding must be an int or a 1, 2 or 4 element sequence, got {len(padding)}"
    )


def pad(img: Any, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> Any:
    """Pad each side; ``padding`` an int, (left/right, top/bottom) or (left, top, right, bottom);
    modes constant, edge, reflect, symmetric."""

    _check_image("pad", img)
    if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
        raise InvalidArgumentError(
            f"pad: padding_mode should be constant, edge, reflect or symmetric, got "
            f"{padding_mode!r}"
        )
    left, top, right, bottom = _pad_ltrb(padding)
    if _is_pil_image(img):
        array = np.asarray(img)
        out = _pad_array(array, left, top, right, bottom, fill, padding_mode)
        result = _pil().fromarray(out, mode=img.mode)
        if img.mode == "P":
            result.putpalette(img.getpalette())
        return result
    if min(left, top, right, bottom) >= 0 and padding_mode != "symmetric" and img.dim() >= 2:
        scalar_fill = not isinstance(fill, (tuple, list)) or len(set(fill)) == 1
        if scalar_fill:  # by F.pad: differentiable, on the tensor's device
            value = fill[0] if isinstance(fill, (tuple, list)) else fill
            batch, unbatch = _batched(img)
            if padding_mode == "constant":
                out = F.pad(batch, [left, right, top, bottom], mode="constant", value=value)
                return unbatch(out)
            as_float, back = _float_op(batch)
            mode = "replicate" if padding_mode == "edge" else padding_mode
            return unbatch(back(F.pad(as_float, [left, right, top, bottom], mode=mode)))
    array = img.detach().cpu().numpy()
    moved = np.moveaxis(array, (-2, -1), (0, 1))
    out = _pad_array(moved, left, top, right, bottom, fill, padding_mode)
    return rg.from_numpy(np.ascontiguousarray(np.moveaxis(out, (0, 1), (-2, -1)))).to(img.device)


def _pad_array(array, left, top, right, bottom, fill, padding_mode):
    """Pad axes 0 (rows) and 1 (columns) of ``array``; negative amounts crop."""
    crop_top, crop_bottom = max(-top, 0), max(-bottom, 0)
    crop_left, crop_right = max(-left, 0), max(-right, 0)
    array = array[crop_top : array.shape[0] - crop_bottom, crop_left : array.shape[1] - crop_right]
    widths = [(max(top, 0), max(bottom, 0)), (max(left, 0), max(right, 0))]
    widths += [(0, 0)] * (array.ndim - 2)
    if padding_mode == "constant":
        if isinstance(fill, (tuple, list)) and array.ndim == 3 and array.shape[2] == len(fill):
            return np.stack(
                [
                    np.pad(array[:, :, c], widths[:2], constant_values=fill[c])
                    for c in range(array.shape[2])
                ],
                axis=2,
            )
        if isinstance(fill, (tuple, list)):
            fill = fill[0]
        return np.pad(array, widths, mode="constant", constant_values=fill)
    return np.pad(array, widths, mode="edge" if padding_mode == "edge" else padding_mode)


def crop(img: Any, top: int, left: int, height: int, width: int) -> Any:
    """The box at (top, left) of ``height`` x ``width``; outside the image is zero-filled."""
    _check_image("crop", img)
    if height < 0 or width < 0:
        raise InvalidArgumentError(
            f"crop: height and width must be non-negative, got height={height}, width={width}"
        )
    if _is_pil_image(img):
        return img.crop((left, top, left + width, top + height))
    _, h, w = get_dimensions(img)
    right, bottom = left + width, top + height
    if left < 0 or top < 0 or right > w or bottom > h:
        inner = img[..., max(top, 0) : min(bottom, h), max(left, 0) : min(right, w)]
        padding = [
            max(-left + min(0, right), 0),
            max(-top + min(0, bottom), 0),
            max(right - max(w, left), 0),
            max(bottom - max(h, top), 0),
        ]
        return pad(inner, padding, fill=0)
    return img[..., top:bottom, left:right]


def center_crop(img: Any, output_size: Any) -> Any:
    """The centred ``output_size`` box (zero padding where the image is smaller)."""
    if isinstance(output_size, numbers.Number):
        output_size = (int(output_size), int(output_size))
    elif isinstance(output_size, (tuple, list)) and len(output_size) == 1:
        output_size = (output_size[0], output_size[0])
    _, height, width = get_dimensions(img)
    crop_h, crop_w = int(output_size[0]), int(output_size[1])
    if crop_w > width or crop_h > height:
        padding = [
            (crop_w - width) // 2 if crop_w > width else 0,
            (crop_h - height) // 2 if crop_h > height else 0,
            (crop_w - width + 1) // 2 if crop_w > width else 0,
            (crop_h - height + 1) // 2 if crop_h > height else 0,
        ]
        img = pad(img, padding, fill=0)
        _, height, width = get_dimensions(img)
        if crop_w == width and crop_h == height:
            return img
    top = round((height - crop_h) / 2.0)
    left = round((width - crop_w) / 2.0)
    return crop(img, top, left, crop_h, crop_w)


def resized_crop(
    img,
    top,
    left,
    height,
    width,
    size,
    interpolation=InterpolationMode.BILINEAR,
    antialias: bool | None = True,
):
    return resize(crop(img, top, left, height, width), size, interpolation, antialias=antialias)


def hflip(img: Any) -> Any:
    _check_image("hflip", img)
    if _is_pil_image(img):
        return img.transpose(_pil().Transpose.FLIP_LEFT_RIGHT)
    return img.flip(-1)


def vflip(img: Any) -> Any:
    _check_image("vflip", img)
    if _is_pil_image(img):
        return img.transpose(_pil().Transpose.FLIP_TOP_BOTTOM)
    return img.flip(-2)


# ---- colour ---------------------------------------------------------------------------------


def rgb_to_grayscale(img: Any, num_output_channels: int = 1) -> Any:
    """ITU-R 601-2 luma (0.2989 R + 0.587 G + 0.114 B), truncated to the input dtype."""
    _check_image("rgb_to_grayscale", img)
    if num_output_channels not in (1, 3):
        raise InvalidArgumentError("num_output_channels should be either 1 or 3")
    if _is_pil_image(img):
        gray = img.convert("L")
        if num_output_channels == 3:
            gray = _pil().merge("RGB", [gray, gray, gray])
        return gray
    channels = get_image_num_channels(img)
    if channels not in (1, 3):
        raise ShapeError(f"rgb_to_grayscale: input image channel should be 1 or 3, got {channels}")
    if channels == 3:
        r, g, b = img.unbind(dim=-3)
        gray = (0.2989 * r + 0.587 * g + 0.114 * b).to(img.dtype).unsqueeze(-3)
    else:
        gray = img.clone()
    if num_output_channels == 3:
        return gray.expand(*gray.shape[:-3], 3, *gray.shape[-2:])
    return gray


to_grayscale = rgb_to_grayscale


def _blend(img1: Tensor, img2: Tensor, ratio: float) -> Tensor:
    ratio = float(ratio)
    bound = _max_value(img1)
    return (ratio * img1 + (1.0 - ratio) * img2).clamp(0, bound).to(img1.dtype)


def _check_factor(fn: str, name: str, factor: float) -> None:
    _check_number(fn, name, factor)
    if factor < 0:
        raise InvalidArgumentError(f"{fn}: {name} ({factor}) is not non-negative")


def adjust_brightness(img: Any, brightness_factor: float) -> Any:
    _check_factor("adjust_brightness", "brightness_factor", brightness_factor)
    _check_image("adjust_brightness", img)
    if _is_pil_image(img):
        from PIL import ImageEnhance

        return ImageEnhance.Brightness(img).enhance(brightness_factor)
    return _blend(img, img.new_zeros(img.shape), brightness_factor)


def adjust_contrast(img: Any, contrast_factor: float) -> Any:
    _check_factor("adjust_contrast", "contrast_factor", contrast_factor)
    _check_image("adjust_contrast", img)
    if _is_pil_image(img):
        from PIL import ImageEnhance

        return ImageEnhance.Contrast(img).enhance(contrast_factor)
    channels = get_image_num_channels(img)
    if channels not in (1, 3):  # torchvision's _assert_channels(img, [3, 1])
        raise ShapeError(
            f"adjust_contrast: an image of 1 or 3 channels, got {channels} (shape "
            f"{list(img.shape)})"
        )
    dtype = img.dtype if img.is_floating_point() else rg.float32
    source = rgb_to_grayscale(img) if channels == 3 else img
    mean = source.to(dtype).mean(dim=(-3, -2, -1), keepdim=True)
    return _blend(img, mean, contrast_factor)


def adjust_saturation(img: Any, saturation_factor: float) -> Any:
    _check_factor("adjust_saturation", "saturation_factor", saturation_factor)
    _check_image("adjust_saturation", img)
    if _is_pil_image(img):
        from PIL import ImageEnhance

        return ImageEnhance.Color(img).enhance(saturation_factor)
    if get_image_num_channels(img) == 1:
        return img
    return _blend(img, rgb_to_grayscale(img), saturation_factor)


def _rgb2hsv(rgb: np.ndarray) -> np.ndarray:
    r, g, b = rgb[..., 0, :, :], rgb[..., 1, :, :], rgb[..., 2, :, :]
    maxc, minc = rgb.max(axis=-3), rgb.min(axis=-3)
    eqc = maxc == minc
    cr = maxc - minc
    ones = np.ones_like(maxc)
    s = cr / np.where(eqc, ones, maxc)
    cr_divisor = np.where(eqc, ones, cr)
    rc, gc, bc = (maxc - r) / cr_divisor, (maxc - g) / cr_divisor, (maxc - b) / cr_divisor
    hr = (maxc == r) * (bc - gc)
    hg = ((maxc == g) & (maxc != r)) * (2.0 + rc - bc)
    hb = ((maxc != g) & (maxc != r)) * (4.0 + gc - rc)
    h = np.fmod((hr + hg + hb) / 6.0 + 1.0, 1.0)
    return np.stack((h, s, maxc), axis=-3)


def _hsv2rgb(hsv: np.ndarray) -> np.ndarray:
    h, s, v = hsv[..., 0, :, :], hsv[..., 1, :, :], hsv[..., 2, :, :]
    i = np.floor(h * 6.0)
    f = h * 6.0 - i
    i = i.astype(np.int64) % 6
    p = np.clip(v * (1.0 - s), 0.0, 1.0)
    q = np.clip(v * (1.0 - s * f), 0.0, 1.0)
    t = np.clip(v * (1.0 - s * (1.0 - f)), 0.0, 1.0)
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(hsv.shape, dtype=hsv.dtype)
    for k, (rr, gg, bb) in enumerate(choices):
        mask = i == k
        out[..., 0, :, :] += mask * rr
        out[..., 1, :, :] += mask * gg
        out[..., 2, :, :] += mask * bb
    return out


def adjust_hue(img: Any, hue_factor: float) -> Any:
    """Shift the hue by ``hue_factor`` turns (in [-0.5, 0.5])."""

    _check_number("adjust_hue", "hue_factor", hue_factor)
    if not -0.5 <= hue_factor <= 0.5:
        raise InvalidArgumentError(f"adjust_hue: hue_factor ({hue_factor}) is not in [-0.5, 0.5]")
    _check_image("adjust_hue", img)
    if _is_pil_image(img):
        if img.mode in ("L", "1", "I", "F"):
            return img
        h, s, v = img.convert("HSV").split()
        np_h = np.array(h, dtype=np.uint8)
        with np.errstate(over="ignore"):
            np_h += np.uint8(hue_factor * 255)
        hue = _pil().fromarray(np_h, "L")
        return _pil().merge("HSV", (hue, s, v)).convert(img.mode)
    if get_image_num_channels(img) == 1:
        return img
    array = img.detach().cpu().numpy()
    is_float = img.is_floating_point()
    work = array.astype(np.float32) / 255.0 if not is_float else array
    hsv = _rgb2hsv(work)
    hsv[..., 0, :, :] = np.fmod(hsv[..., 0, :, :] + hue_factor, 1.0)
    hsv[..., 0, :, :] = np.where(hsv[..., 0, :, :] < 0, hsv[..., 0, :, :] + 1.0, hsv[..., 0, :, :])
    out = _hsv2rgb(hsv)
    if not is_float:
        out = (out * 255.0).astype(array.dtype)
    return rg.from_numpy(np.ascontiguousarray(out.astype(array.dtype)))


def _gaussian_kernel1d(kernel_size: int, sigma: float) -> np.ndarray:
    half = (kernel_size - 1) * 0.5
    x = np.linspace(-half, half, kernel_size, dtype=np.float32)
    pdf = np.exp(-0.5 * (x / np.float32(sigma)) ** 2)
    return pdf / pdf.sum()


def gaussian_blur(img: Any, kernel_size: Any, sigma: Any = None) -> Any:
    """Blur with a separable Gaussian (reflect padding), as torchvision."""

    if isinstance(kernel_size, int):
        kernel_size = [kernel_size, kernel_size]
    kernel_size = list(kernel_size)
    if len(kernel_size) != 2:
        raise InvalidArgumentError(
            f"gaussian_blur: kernel_size should have 2 values, got {kernel_size}"
        )
    for k in kernel_size:
        if k <= 0 or k % 2 == 0:
            raise InvalidArgumentError(
                f"gaussian_blur: kernel_size should have odd and positive integers, got "
                f"{kernel_size}"
            )
    if sigma is None:
        sigma = [k * 0.15 + 0.35 for k in kernel_size]
    if isinstance(sigma, (int, float)):
        sigma = [float(sigma), float(sigma)]
    sigma = [float(s) for s in sigma]
    if len(sigma) == 1:
        sigma = sigma * 2
    if any(s <= 0 for s in sigma):
        raise InvalidArgumentError(f"gaussian_blur: sigma should have positive values, got {sigma}")
    _check_image("gaussian_blur", img)
    if _is_pil_image(img):
        return to_pil_image(gaussian_blur(pil_to_tensor(img), kernel_size, sigma), mode=img.mode)
    kx = _gaussian_kernel1d(kernel_size[0], sigma[0])
    ky = _gaussian_kernel1d(kernel_size[1], sigma[1])
    batch, unbatch = _batched(img)
    as_float, back = _float_op(batch)
    channels = as_float.shape[-3]
    kernel = rg.from_numpy(np.ascontiguousarray(ky[:, None] * kx[None, :])).to(as_float.dtype)
    kernel = kernel.expand(channels, 1, kernel_size[1], kernel_size[0]).to(as_float.device)
    padded = F.pad(
        as_float,
        [kernel_size[0] // 2, kernel_size[0] // 2, kernel_size[1] // 2, kernel_size[1] // 2],
        mode="reflect",
    )
    return unbatch(back(F.conv2d(padded, kernel, groups=channels)))


def invert(img: Any) -> Any:
    _check_image("invert", img)
    if _is_pil_image(img):
        from PIL import ImageOps

        return ImageOps.invert(img)
    return _max_value(img) - img


def erase(img: Tensor, i: int, j: int, h: int, w: int, v: Any, inplace: bool = False) -> Tensor:
    if not isinstance(img, Tensor):  # torchvision: "img should be Tensor Image"
        raise DTypeError(f"erase: img should be a Tensor image, got {type(img).__name__}")
    if not inplace:
        img = img.clone()
    img[..., i : i + h, j : j + w] = v
    return img


def rotate(
    img: Any,
    angle: float,
    interpolation: Any = InterpolationMode.NEAREST,
    expand: bool = False,
    center: Any = None,
    fill: Any = None,
) -> Any:
    """Rotate counter-clockwise by ``angle`` degrees about the centre (PIL images by PIL;
    tensors by nearest/bilinear sampling of the inverse rotation, zero fill)."""

    _check_image("rotate", img)
    _check_number("rotate", "angle", angle)
    mode = _interpolation(interpolation)
    if _is_pil_image(img):
        return img.rotate(
            angle,
            resample=_PIL_RESAMPLE.get(mode.value, 0),
            expand=expand,
            center=center,
            fillcolor=fill,
        )
    if expand or center is not None:
        raise InvalidArgumentError("rotate: expand and center are supported on PIL images only")
    if mode.value not in ("nearest", "bilinear"):
        raise InvalidArgumentError(f"rotate: tensors support nearest or bilinear, not {mode}")
    batch, unbatch = _batched(img)
    as_float, back = _float_op(batch)
    n, _, height, width = as_float.shape
    rad = math.radians(angle)
    cos, sin = math.cos(rad), math.sin(rad)
    # the inverse map from output pixel centres to input, in normalised coordinates
    theta = np.array(
        [[cos, -sin * height / width, 0.0], [sin * width / height, cos, 0.0]], dtype=np.float32
    )
    theta_t = rg.from_numpy(np.repeat(theta[None], n, axis=0)).to(as_float.dtype)
    grid = F.affine_grid(theta_t, list(as_float.shape), align_corners=False)
    out = F.grid_sample(as_float, grid, mode=mode.value, padding_mode="zeros", align_corners=False)
    if fill is not None:
        mask = F.grid_sample(
            as_float.new_ones(as_float.shape), grid, mode=mode.value, align_corners=False
        )
        fill_t = rg.as_tensor(fill, dtype=as_float.dtype).reshape(-1, 1, 1)
        out = out + (1.0 - mask) * fill_t
    return unbatch(back(out))
