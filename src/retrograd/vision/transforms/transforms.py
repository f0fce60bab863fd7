"""torchvision.transforms (v1): the transform classes, their random parameters drawn from
retrograd's global generator in torchvision's order (so a seeded run repeats itself)."""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Callable, Sequence
from typing import Any

from ... import nn as _nn
from ...errors import (
    DTypeError,
    InvalidArgumentError,
    ShapeError,
    check_callable,
    check_iterable,
)
from .. import _lib as rg
from . import functional as F  # noqa: N812 (torchvision's name)
from .functional import InterpolationMode


def _setup_size(size: Any, name: str) -> tuple[int, int]:
    if isinstance(size, numbers.Number):
        size = (size, size)
    elif isinstance(size, Sequence) and len(size) == 1:
        size = (size[0], size[0])
    if not isinstance(size, Sequence) or len(size) != 2:
        raise InvalidArgumentError(f"{name}: please provide only two dimensions (h, w) for size")
    if any(not isinstance(s, numbers.Number) or s < 0 for s in size):
        raise InvalidArgumentError(f"{name}: size must be non-negative numbers, got {size}")
    return int(size[0]), int(size[1])


def _transform_list(name: str, transforms: Any) -> list[Callable]:
    """``transforms`` as a list, each of them callable: an int or a tensor given for it is
    refused when the transform is built (torchvision's ``TypeError`` came at the first image,
    from inside the loop)."""
    check_iterable(name, transforms, "transforms")
    transforms = list(transforms)
    for transform in transforms:
        check_callable(name, transform, "each of transforms")
    return transforms


def _probability(name: str, p: Any) -> float:
    """``p`` where it is a number (a str compared with a draw was Python's ``TypeError``)."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise DTypeError(f"{name}: p should be a number (a probability), got {p!r}")
    return p


def _ratio_bounds(name: str, ratio: Any) -> Any:
    """torchvision draws aspect ratios between the logarithms of ``ratio``: a bound that is
    not positive has none (Python's "math domain error" at the first image)."""
    if not isinstance(ratio, Sequence) or len(ratio) != 2:
        raise DTypeError(f"{name}: ratio should be a sequence (min, max), got {ratio!r}")
    if any(isinstance(r, bool) or not isinstance(r, numbers.Real) or r <= 0 for r in ratio):
        raise InvalidArgumentError(f"{name}: ratio should hold two positive numbers, got {ratio}")
    return ratio


def _check_range(
    value: Any,
    name: str,
    center: float = 1.0,
    bound=(0, float("inf")),
    clip_first_on_zero: bool = True,
):
    if isinstance(value, numbers.Number):
        if value < 0:
            raise InvalidArgumentError(f"If {name} is a single number, it must be non negative.")
        value = [center - float(value), center + float(value)]
        if clip_first_on_zero:
            value[0] = max(value[0], 0.0)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        value = [float(value[0]), float(value[1])]
    else:
        raise InvalidArgumentError(
            f"{name} should be a single number or a list/tuple with length 2."
        )
    if not bound[0] <= value[0] <= value[1] <= bound[1]:
        raise InvalidArgumentError(f"{name} values should be between {bound}, but got {value}.")
    if value[0] == value[1] == center:
        return None
    return tuple(value)


class Compose:
    """Apply ``transforms`` in order."""

    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = _transform_list(type(self).__name__, transforms)

    def __call__(self, img: Any) -> Any:
        for transform in self.transforms:
            img = transform(img)
        return img

    def __repr__(self) -> str:
        body = "".join(f"\n    {t}" for t in self.transforms)
        return f"{type(self).__name__}({body}\n)"


class _Transform(_nn.Module):
    """A transform that is a Module (as torchvision's are), called on one image."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ToTensor:
    """PIL image / HWC ndarray -> CHW tensor; uint8 scaled to float in [0, 1]."""

    def __call__(self, pic: Any) -> Any:
        return F.to_tensor(pic)

    def __repr__(self) -> str:
        return "ToTensor()"


class PILToTensor:
    def __call__(self, pic: Any) -> Any:
        return F.pil_to_tensor(pic)

    def __repr__(self) -> str:
        return "PILToTensor()"


class ToPILImage:
    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode

    def __call__(self, pic: Any) -> Any:
        return F.to_pil_image(pic, self.mode)

    def __repr__(self) -> str:
        return f"ToPILImage(mode={self.mode})"


class ConvertImageDtype(_Transform):
    def __init__(self, dtype: Any) -> None:
        super().__init__()
        self.dtype = dtype

    def forward(self, image: Any) -> Any:
        return F.convert_image_dtype(image, self.dtype)


class Normalize(_Transform):
    def __init__(self, mean: Sequence[float], std: Sequence[float], inplace: bool = False) -> None:
        super().__init__()
        self.mean, self.std, self.inplace = mean, std, inplace

    def forward(self, tensor: Any) -> Any:
        return F.normalize(tensor, self.mean, self.std, self.inplace)

    def __repr__(self) -> str:
        return f"Normalize(mean={self.mean}, std={self.std})"


class Resize(_Transform):
    def __init__(
        self,
        size: Any,
        interpolation: Any = InterpolationMode.BILINEAR,
        max_size: int | None = None,
        antialias: bool | None = True,
    ) -> None:
        super().__init__()
        if not isinstance(size, (int, Sequence)):
            raise InvalidArgumentError(f"Resize: size should be int or sequence, got {type(size)}")
        self.size, self.max_size, self.antialias = size, max_size, antialias
        self.interpolation = F._interpolation(interpolation)

    def forward(self, img: Any) -> Any:
        return F.resize(img, self.size, self.interpolation, self.max_size, self.antialias)

    def __repr__(self) -> str:
        return f"Resize(size={self.size}, interpolation={self.interpolation.value})"


Scale = Resize


class CenterCrop(_Transform):
    def __init__(self, size: Any) -> None:
        super().__init__()
        self.size = _setup_size(size, "CenterCrop")

    def forward(self, img: Any) -> Any:
        return F.center_crop(img, self.size)

    def __repr__(self) -> str:
        return f"CenterCrop(size={self.size})"


class Pad(_Transform):
    def __init__(self, padding: Any, fill: Any = 0, padding_mode: str = "constant") -> None:
        super().__init__()
        F._pad_ltrb(padding)
        if padding_mode not in ("constant", "edge", "reflect", "symmetric"):
            raise InvalidArgumentError(f"Pad: unknown padding_mode {padding_mode!r}")
        self.padding, self.fill, self.padding_mode = padding, fill, padding_mode

    def forward(self, img: Any) -> Any:
        return F.pad(img, self.padding, self.fill, self.padding_mode)


class Lambda:
    def __init__(self, lambd: Callable) -> None:
        if not callable(lambd):
            raise InvalidArgumentError(f"Lambda: argument should be callable, got {type(lambd)}")
        self.lambd = lambd

    def __call__(self, img: Any) -> Any:
        return self.lambd(img)

    def __repr__(self) -> str:
        return "Lambda()"


class RandomApply(_Transform):
    def __init__(self, transforms: Sequence[Callable], p: float = 0.5) -> None:
        super().__init__()
        self.transforms = _transform_list("RandomApply", transforms)
        self.p = _probability("RandomApply", p)

    def forward(self, img: Any) -> Any:
        if self.p < rg.rand(1).item():
            return img
        for transform in self.transforms:
            img = transform(img)
        return img


class RandomChoice:
    """One of ``transforms``, picked by Python's ``random`` with weights ``p`` (as torchvision's
    v1)."""

    def __init__(self, transforms: Sequence[Callable], p: Sequence[float] | None = None) -> None:
        self.transforms = _transform_list("RandomChoice", transforms)
        if p is not None and len(p) != len(self.transforms):
            raise InvalidArgumentError(
                f"RandomChoice: {len(p)} probabilities for {len(self.transforms)} transforms"
            )
        self.p = None if p is None else list(p)

    def __call__(self, *args: Any) -> Any:
        transform = random.choices(self.transforms, weights=self.p)[0]
        return transform(*args)


class RandomOrder:
    """``transforms`` in an order shuffled by Python's ``random`` (as torchvision's v1)."""

    def __init__(self, transforms: Sequence[Callable]) -> None:
        self.transforms = _transform_list("RandomOrder", transforms)

    def __call__(self, img: Any) -> Any:
        order = list(range(len(self.transforms)))
        random.shuffle(order)
        for index in order:
            img = self.transforms[index](img)
        return img


class RandomCrop(_Transform):
    """A random ``size`` crop, after optional ``padding`` and padding to ``size`` if needed."""

    @staticmethod
    def get_params(img: Any, output_size: tuple[int, int]) -> tuple[int, int, int, int]:
        _, h, w = F.get_dimensions(img)
        th, tw = output_size
        if h < th or w < tw:
            raise InvalidArgumentError(
                f"RandomCrop: required crop size {(th, tw)} is larger than input image size "
                f"{(h, w)}"
            )
        if w == tw and h == th:
            return 0, 0, h, w
        i = int(rg.randint(0, h - th + 1, size=(1,)).item())
        j = int(rg.randint(0, w - tw + 1, size=(1,)).item())
        return i, j, th, tw

    def __init__(
        self,
        size: Any,
        padding: Any = None,
        pad_if_needed: bool = False,
        fill: Any = 0,
        padding_mode: str = "constant",
    ) -> None:
        super().__init__()
        self.size = _setup_size(size, "RandomCrop")
        self.padding, self.pad_if_needed = padding, pad_if_needed
        self.fill, self.padding_mode = fill, padding_mode

    def forward(self, img: Any) -> Any:
        if self.padding is not None:
            img = F.pad(img, self.padding, self.fill, self.padding_mode)
        _, height, width = F.get_dimensions(img)
        if self.pad_if_needed and width < self.size[1]:
            img = F.pad(img, [self.size[1] - width, 0], self.fill, self.padding_mode)
        if self.pad_if_needed and height < self.size[0]:
            img = F.pad(img, [0, self.size[0] - height], self.fill, self.padding_mode)
        i, j, h, w = self.get_params(img, self.size)
        return F.crop(img, i, j, h, w)

    def __repr__(self) -> str:
        return f"RandomCrop(size={self.size}, padding={self.padding})"


class RandomHorizontalFlip(_Transform):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = _probability(type(self).__name__, p)

    def forward(self, img: Any) -> Any:
        if rg.rand(1).item() < self.p:
            return F.hflip(img)
        return img

    def __repr__(self) -> str:
        return f"RandomHorizontalFlip(p={self.p})"


class RandomVerticalFlip(RandomHorizontalFlip):
    def forward(self, img: Any) -> Any:
        if rg.rand(1).item() < self.p:
            return F.vflip(img)
        return img

    def __repr__(self) -> str:
        return f"RandomVerticalFlip(p={self.p})"


class RandomResizedCrop(_Transform):
    """A crop of random area fraction ``scale`` and aspect ``ratio``, resized to ``size``."""

    def __init__(
        self,
        size: Any,
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: Any = InterpolationMode.BILINEAR,
        antialias: bool | None = True,
    ) -> None:
        super().__init__()
        self.size = _setup_size(size, "RandomResizedCrop")
        _ratio_bounds("RandomResizedCrop", ratio)
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise InvalidArgumentError(
                f"RandomResizedCrop: scale and ratio should be of kind (min, max), got "
                f"scale={scale}, ratio={ratio}"
            )
        self.scale, self.ratio, self.antialias = scale, ratio, antialias
        self.interpolation = F._interpolation(interpolation)

    @staticmethod
    def get_params(img: Any, scale: Sequence[float], ratio: Sequence[float]):
        _, height, width = F.get_dimensions(img)
        area = height * width
        _ratio_bounds("RandomResizedCrop.get_params", ratio)
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            target_area = area * rg.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = math.exp(rg.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            w = round(math.sqrt(target_area * aspect_ratio))
            h = round(math.sqrt(target_area / aspect_ratio))
            if 0 < w <= width and 0 < h <= height:
                i = int(rg.randint(0, height - h + 1, size=(1,)).item())
                j = int(rg.randint(0, width - w + 1, size=(1,)).item())
                return i, j, h, w
        in_ratio = float(width) / float(height)
        if in_ratio < min(ratio):
            w = width
            h = round(w / min(ratio))
        elif in_ratio > max(ratio):
            h = height
            w = round(h * max(ratio))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def forward(self, img: Any) -> Any:
        i, j, h, w = self.get_params(img, self.scale, self.ratio)
        return F.resized_crop(img, i, j, h, w, self.size, self.interpolation, self.antialias)

    def __repr__(self) -> str:
        return f"RandomResizedCrop(size={self.size}, scale={self.scale}, ratio={self.ratio})"


class Grayscale(_Transform):
    def __init__(self, num_output_channels: int = 1) -> None:
        super().__init__()
        self.num_output_channels = num_output_channels

    def forward(self, img: Any) -> Any:
        return F.rgb_to_grayscale(img, self.num_output_channels)


class RandomGrayscale(_Transform):
    def __init__(self, p: float = 0.1) -> None:
        super().__init__()
        self.p = _probability(type(self).__name__, p)

    def forward(self, img: Any) -> Any:
        channels = F.get_image_num_channels(img)
        if rg.rand(1).item() < self.p:
            return F.rgb_to_grayscale(img, num_output_channels=channels)
        return img


class ColorJitter(_Transform):
    """Random brightness, contrast, saturation and hue, applied in a random order."""

    def __init__(
        self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0
    ) -> None:
        super().__init__()
        self.brightness = _check_range(brightness, "brightness")
        self.contrast = _check_range(contrast, "contrast")
        self.saturation = _check_range(saturation, "saturation")
        self.hue = _check_range(hue, "hue", center=0, bound=(-0.5, 0.5), clip_first_on_zero=False)

    @staticmethod
    def get_params(brightness, contrast, saturation, hue):
        fn_idx = rg.randperm(4).tolist()

        def draw(bounds):
            return (
                None if bounds is None else float(rg.empty(1).uniform_(bounds[0], bounds[1]).item())
            )

        b = draw(brightness)
        c = draw(contrast)
        s = draw(saturation)
        h = draw(hue)
        return fn_idx, b, c, s, h

    def forward(self, img: Any) -> Any:
        fn_idx, b, c, s, h = self.get_params(
            self.brightness, self.contrast, self.saturation, self.hue
        )
        for fn_id in fn_idx:
            if fn_id == 0 and b is not None:
                img = F.adjust_brightness(img, b)
            elif fn_id == 1 and c is not None:
                img = F.adjust_contrast(img, c)
            elif fn_id == 2 and s is not None:
                img = F.adjust_saturation(img, s)
            elif fn_id == 3 and h is not None:
                img = F.adjust_hue(img, h)
        return img

    def __repr__(self) -> str:
        return (
            f"ColorJitter(brightness={self.brightness}, contrast={self.contrast}, "
            f"saturation={self.saturation}, hue={self.hue})"
        )


class GaussianBlur(_Transform):
    def __init__(self, kernel_size: Any, sigma: Any = (0.1, 2.0)) -> None:
        super().__init__()
        self.kernel_size = _setup_size(kernel_size, "GaussianBlur")
        for k in self.kernel_size:
            if k <= 0 or k % 2 == 0:
                raise InvalidArgumentError(
                    "Kernel size value should be an odd and positive number."
                )
        if isinstance(sigma, numbers.Number):
            if sigma <= 0:
                raise InvalidArgumentError("If sigma is a single number, it must be positive.")
            sigma = (float(sigma), float(sigma))
        elif isinstance(sigma, Sequence) and len(sigma) == 2:
            if not 0.0 < sigma[0] <= sigma[1]:
                raise InvalidArgumentError(
                    "sigma values should be positive and of the form (min, max)."
                )
        else:
            raise InvalidArgumentError(
                "sigma should be a single number or a list/tuple with length 2."
            )
        self.sigma = sigma

    @staticmethod
    def get_params(sigma_min: float, sigma_max: float) -> float:
        return float(rg.empty(1).uniform_(sigma_min, sigma_max).item())

    def forward(self, img: Any) -> Any:
        sigma = self.get_params(self.sigma[0], self.sigma[1])
        return F.gaussian_blur(img, self.kernel_size, [sigma, sigma])


class RandomRotation(_Transform):
    def __init__(
        self,
        degrees: Any,
        interpolation: Any = InterpolationMode.NEAREST,
        expand: bool = False,
        center: Any = None,
        fill: Any = 0,
    ) -> None:
        super().__init__()
        if not isinstance(degrees, numbers.Number) and (
            not isinstance(degrees, Sequence)
            or len(degrees) != 2
            or not all(isinstance(d, numbers.Number) for d in degrees)
        ):
            raise InvalidArgumentError(
                f"RandomRotation: degrees should be a number or a sequence of two, got {degrees!r}"
            )
        if isinstance(degrees, numbers.Number):
            if degrees < 0:
                raise InvalidArgumentError("If degrees is a single number, it must be positive.")
            degrees = (-float(degrees), float(degrees))
        self.degrees = [float(d) for d in degrees]
        self.interpolation = F._interpolation(interpolation)
        self.expand, self.center, self.fill = expand, center, fill

    @staticmethod
    def get_params(degrees: Sequence[float]) -> float:
        return float(rg.empty(1).uniform_(float(degrees[0]), float(degrees[1])).item())

    def forward(self, img: Any) -> Any:
        angle = self.get_params(self.degrees)
        fill = self.fill
        if F._is_pil_image(img) and isinstance(fill, numbers.Number):
            fill = (
                tuple([int(fill)] * len(img.getbands())) if len(img.getbands()) > 1 else int(fill)
            )
        return F.rotate(img, angle, self.interpolation, self.expand, self.center, fill)


class RandomInvert(_Transform):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = _probability(type(self).__name__, p)

    def forward(self, img: Any) -> Any:
        if rg.rand(1).item() < self.p:
            return F.invert(img)
        return img


class RandomErasing(_Transform):
    """Erase a random rectangle of a tensor image with probability ``p``."""

    def __init__(
        self,
        p: float = 0.5,
        scale=(0.02, 0.33),
        ratio=(0.3, 3.3),
        value: Any = 0,
        inplace: bool = False,
    ) -> None:
        super().__init__()
        # torchvision's checks, in its order and with its kinds of error
        if not isinstance(value, numbers.Number | str | tuple | list):
            raise DTypeError(
                f"RandomErasing: value should be a number, a str or a sequence, got {value!r}"
            )
        if isinstance(value, str) and value != "random":
            raise InvalidArgumentError(
                f"RandomErasing: if value is a str, it should be 'random', got {value!r}"
            )
        if not isinstance(scale, Sequence) or len(scale) != 2:
            raise DTypeError(f"RandomErasing: scale should be a sequence (min, max), got {scale!r}")
        _ratio_bounds("RandomErasing", ratio)
        if scale[0] < 0 or scale[1] > 1:
            raise InvalidArgumentError(
                f"RandomErasing: scale should be between 0 and 1, got {tuple(scale)}"
            )
        if not 0 <= _probability("RandomErasing", p) <= 1:
            raise InvalidArgumentError(
                f"RandomErasing: the probability p should be between 0 and 1, got {p}"
            )
        self.p, self.scale, self.ratio, self.value, self.inplace = p, scale, ratio, value, inplace

    @staticmethod
    def get_params(img, scale, ratio, value=None):
        img_c, img_h, img_w = img.shape[-3], img.shape[-2], img.shape[-1]
        area = img_h * img_w
        log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
        for _ in range(10):
            erase_area = area * rg.empty(1).uniform_(scale[0], scale[1]).item()
            aspect_ratio = math.exp(rg.empty(1).uniform_(log_ratio[0], log_ratio[1]).item())
            h = round(math.sqrt(erase_area * aspect_ratio))
            w = round(math.sqrt(erase_area / aspect_ratio))
            if not (h < img_h and w < img_w):
                continue
            if value is None:
                v = rg.empty(img_c, h, w, dtype=rg.float32).normal_()
            else:
                v = rg.tensor(value)[:, None, None]
            i = int(rg.randint(0, img_h - h + 1, size=(1,)).item())
            j = int(rg.randint(0, img_w - w + 1, size=(1,)).item())
            return i, j, h, w, v
        return 0, 0, img_h, img_w, img

    def forward(self, img: Any) -> Any:
        if rg.rand(1).item() < self.p:
            value = None if self.value == "random" else self.value
            if isinstance(value, (int, float)):
                value = [float(value)]
            elif isinstance(value, (tuple, list)):
                value = [float(v) for v in value]
            channels = img.shape[-3]
            if value is not None and len(value) not in (1, channels):
                raise ShapeError(
                    f"RandomErasing: value holds {len(value)} values for an image of "
                    f"{channels} channels (shape {list(img.shape)}); give 1 or {channels}"
                )
            x, y, h, w, v = self.get_params(img, self.scale, self.ratio, value)
            return F.erase(img, x, y, h, w, v, self.inplace)
        return img
