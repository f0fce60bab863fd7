"""torchvision.io's image functions over retrograd: images read and written by PIL as uint8
tensors [C, H, W]."""

from __future__ import annotations

import os
from enum import Enum
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, ShapeError
from ..tensor import Tensor
from . import _lib as rg


class ImageReadMode(Enum):
    """The channels an image is read with (UNCHANGED: as stored)."""

    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = 4


_PIL_MODES = {
    ImageReadMode.GRAY: "L",
    ImageReadMode.GRAY_ALPHA: "LA",
    ImageReadMode.RGB: "RGB",
    ImageReadMode.RGB_ALPHA: "RGBA",
}


def read_file(path: str | os.PathLike) -> Tensor:
    """The bytes of a file as a 1-D uint8 tensor."""
    with open(path, "rb") as handle:
        return rg.from_numpy(np.frombuffer(handle.read(), dtype=np.uint8).copy())


def _decode(source: Any, mode: ImageReadMode, where: str) -> Tensor:
    import io as _io

    from PIL import Image, UnidentifiedImageError

    if isinstance(mode, str):
        mode = ImageReadMode[mode.upper()]
    try:
        with Image.open(source) as picture:
            if mode is not ImageReadMode.UNCHANGED:
                picture = picture.convert(_PIL_MODES[mode])
            elif picture.mode not in ("L", "LA", "RGB", "RGBA"):
                picture = picture.convert("RGBA" if "A" in picture.getbands() else "RGB")
            array = np.array(picture)
    except (UnidentifiedImageError, OSError) as error:
        if isinstance(source, _io.BytesIO):
            raise InvalidArgumentError(f"{where}: not a decodable image ({error})") from None
        raise
    if array.ndim == 2:
        array = array[:, :, None]
    return rg.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def read_image(path: str | os.PathLike, mode: Any = ImageReadMode.UNCHANGED) -> Tensor:
    """A PNG/JPEG/... file as a uint8 tensor [C, H, W]."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"read_image: no file {path}")
    from PIL import UnidentifiedImageError

    try:
        return _decode(path, mode, f"read_image({path!r})")
    except UnidentifiedImageError as error:
        raise InvalidArgumentError(
            f"read_image: {path} is not a decodable image ({error})"
        ) from None


decode_image_path = read_image


def decode_image(input: Any, mode: Any = ImageReadMode.UNCHANGED) -> Tensor:  # noqa: A002
    """Encoded bytes (a 1-D uint8 tensor) or a path, decoded to a uint8 tensor [C, H, W]."""
    import io as _io

    if isinstance(input, (str, os.PathLike)):
        return read_image(input, mode)
    if not isinstance(input, Tensor) or input.dim() != 1:
        raise ShapeError(
            f"decode_image: input should be a 1-D uint8 tensor of encoded bytes, got "
            f"{list(getattr(input, 'shape', [])) or type(input).__name__}"
        )
    return _decode(_io.BytesIO(input.numpy().tobytes()), mode, "decode_image")


decode_png = decode_jpeg = decode_image


def write_png(input: Tensor, filename: str | os.PathLike, compression_level: int = 6) -> None:  # noqa: A002
    """A uint8 tensor [C, H, W] (C 1 or 3) saved as PNG."""
    from PIL import Image

    if not isinstance(input, Tensor) or input.dim() != 3 or input.shape[0] not in (1, 3, 4):
        raise ShapeError(
            f"write_png: input should be a uint8 tensor [C, H, W] with C in 1, 3, 4, got "
            f"{list(getattr(input, 'shape', []))}"
        )
    if str(input.dtype) != "uint8":
        raise InvalidArgumentError(f"write_png: input should be uint8, got {input.dtype}")
    array = input.numpy().transpose(1, 2, 0)
    array = array[:, :, 0] if array.shape[2] == 1 else array
    Image.fromarray(np.ascontiguousarray(array)).save(
        filename, format="PNG", compress_level=compression_level
    )


def write_jpeg(input: Tensor, filename: str | os.PathLike, quality: int = 75) -> None:  # noqa: A002
    from PIL import Image

    if not isinstance(input, Tensor) or input.dim() != 3 or input.shape[0] not in (1, 3):
        raise ShapeError(
            "write_jpeg: input should be uint8 [C, H, W] with C 1 or 3, got "
            f"{list(getattr(input, 'shape', []))}"
        )
    array = input.numpy().transpose(1, 2, 0)
    array = array[:, :, 0] if array.shape[2] == 1 else array
    Image.fromarray(np.ascontiguousarray(array)).save(filename, format="JPEG", quality=quality)
