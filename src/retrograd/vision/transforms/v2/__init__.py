"""torchvision.transforms.v2 over retrograd, for samples of one image: each transform takes an
image or a sample (tuple, list or dict) and transforms its first image (a PIL image, or the
first tensor of two or more dimensions, v2's rule when no ``tv_tensors.Image`` is marked),
passing the rest (labels, names) through. Samples holding several images, boxes or masks
(transformed together in torchvision) are not supported: transform them one by one."""

from __future__ import annotations

from typing import Any

from ....errors import InvalidArgumentError
from ....tensor import Tensor
from ... import _lib as rg
from .. import functional as F  # noqa: N812 (torchvision's name)
from .. import transforms as _v1


def _is_image(value: Any) -> bool:
    return F._is_pil_image(value) or (isinstance(value, Tensor) and value.dim() >= 2)


def _on_first_image(function: Any, inputs: tuple) -> Any:
    sample = inputs[0] if len(inputs) == 1 else inputs
    if _is_image(sample):
        return function(sample)
    done = False

    def visit(value: Any) -> Any:
        nonlocal done
        if done:
            return value
        if _is_image(value):
            done = True
            return function(value)
        if isinstance(value, (tuple, list)):
            return type(value)(visit(v) for v in value)
        if isinstance(value, dict):
            return {k: visit(v) for k, v in value.items()}
        return value

    return visit(sample)


def _v2(cls: type) -> type:
    """``cls`` (a v1 transform) taking a v2 sample."""

    def __call__(self, *inputs: Any) -> Any:  # noqa: N807
        if not inputs:
            raise InvalidArgumentError(f"{cls.__name__}: called with no input")
        return _on_first_image(lambda image: cls.__call__(self, image), inputs)

    return type(cls.__name__, (cls,), {"__call__": __call__, "__module__": __name__})


class Compose(_v1.Compose):
    def __call__(self, *inputs: Any) -> Any:
        sample = inputs if len(inputs) > 1 else inputs[0]
        for transform in self.transforms:
            sample = (
                transform(*sample)
                if isinstance(transform, _V2) and isinstance(sample, tuple)
                else transform(sample)
            )
        return sample


class _V2:
    """Marks the v2 transforms (which unpack a tuple sample)."""


class ToImage(_V2):
    """A PIL image or HWC ndarray as a uint8 (or its own dtype) tensor [C, H, W]; a tensor
    passes."""

    def __call__(self, *inputs: Any) -> Any:
        def convert(image: Any) -> Any:
            if isinstance(image, Tensor):
                return image
            if F._is_pil_image(image):
                return F.pil_to_tensor(image)
            import numpy as np

            array = np.asarray(image)
            array = array[:, :, None] if array.ndim == 2 else array
            return rg.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))

        sample = inputs[0] if len(inputs) == 1 else inputs
        if not _is_image(sample) and hasattr(sample, "__array_interface__"):
            return convert(sample)
        return _on_first_image(convert, inputs)


class ToDtype(_V2):
    """The image converted to ``dtype``; with ``scale=True`` rescaled as
    ``convert_image_dtype`` (uint8 [0, 255] <-> float [0, 1])."""

    def __init__(self, dtype: Any, scale: bool = False) -> None:
        self.dtype, self.scale = dtype, scale

    def __call__(self, *inputs: Any) -> Any:
        def convert(image: Tensor) -> Tensor:
            return F.convert_image_dtype(image, self.dtype) if self.scale else image.to(self.dtype)

        return _on_first_image(convert, inputs)


class ToPureTensor(_V2):
    def __call__(self, *inputs: Any) -> Any:
        return inputs[0] if len(inputs) == 1 else inputs


_NAMES = [
    "CenterCrop",
    "ColorJitter",
    "GaussianBlur",
    "Grayscale",
    "Lambda",
    "Normalize",
    "Pad",
    "RandomApply",
    "RandomChoice",
    "RandomCrop",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomOrder",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomVerticalFlip",
    "Resize",
    "ToPILImage",
    "PILToTensor",
]
for _name in _NAMES:
    globals()[_name] = type(_name, (_v2(getattr(_v1, _name)), _V2), {"__module__": __name__})
ToTensor = type("ToTensor", (_v2(_v1.ToTensor), _V2), {"__module__": __name__})
InterpolationMode = F.InterpolationMode
functional = F

__all__ = [
    *_NAMES,
    "Compose",
    "InterpolationMode",
    "ToDtype",
    "ToImage",
    "ToPureTensor",
    "ToTensor",
    "functional",
]
