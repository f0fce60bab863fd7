"""torchvision.io's image functions over retrograd: images read and written by PIL as uint8
tensors [C, H, W]."""

from __future__ import annotations

import io as _io
import numbers
import os
from enum import Enum
from typing import Any

import numpy as np

from ..errors import DamagedFileError, DTypeError, InvalidArgumentError, ShapeError
from ..files import atomic_write
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


#: What PIL raises for an image it cannot decode: ``OSError`` (``UnidentifiedImageError``,
#: "image file is truncated"), and for a malformed header ``ValueError``, ``SyntaxError`` or
#: ``EOFError`` from its format parsers.
_DECODE_FAILURES = (OSError, ValueError, SyntaxError, EOFError)


def decode_failures() -> tuple[type[BaseException], ...]:
    """What PIL raises for bytes that are no image it can decode: ``_DECODE_FAILURES`` and its
    ``DecompressionBombError`` (an ``Exception`` alone), which a damaged header claiming
    billions of pixels raises as a bomb would."""
    from PIL import Image

    return (*_DECODE_FAILURES, Image.DecompressionBombError)


def _failure_text(error: BaseException) -> str:
    from PIL import Image

    hint = (
        " (a genuine image that large reads with PIL.Image.MAX_IMAGE_PIXELS raised)"
        if isinstance(error, Image.DecompressionBombError)
        else ""
    )
    return f"{type(error).__name__}: {error}{hint}"


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


def _mode(op: str, mode: Any) -> ImageReadMode:
    """``mode`` as an :class:`ImageReadMode` (its name in any case too, as torchvision reads a
    str): an unknown name is an ``InvalidArgumentError`` listing the modes, another type a
    ``DTypeError``, rather than Python's ``KeyError`` from the lookup."""
    if isinstance(mode, ImageReadMode):
        return mode
    if not isinstance(mode, str):
        raise DTypeError(f"{op}: mode should be an ImageReadMode or its name, got {mode!r}")
    try:
        return ImageReadMode[mode.upper()]
    except KeyError:
        raise InvalidArgumentError(
            f"{op}: unknown mode {mode!r}; expected one of {', '.join(ImageReadMode.__members__)}"
        ) from None


def _decode(source: Any, mode: ImageReadMode, where: str) -> Tensor:
    """The pixels of the encoded image ``source`` (a path or bytes), as [C, H, W] uint8. PIL
    reads a file lazily: a truncated or damaged one fails in ``np.array``, with one of
    ``decode_failures()``, raised as the :class:`DamagedFileError` naming ``where``."""
    from PIL import Image

    try:
        with Image.open(source) as picture:
            if mode is not ImageReadMode.UNCHANGED:
                picture = picture.convert(_PIL_MODES[mode])
            elif picture.mode not in ("L", "LA", "RGB", "RGBA"):
                picture = picture.convert("RGBA" if "A" in picture.getbands() else "RGB")
            array = np.array(picture)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise  # the file is not there to read, which says nothing of its bytes
    except decode_failures() as error:
        raise DamagedFileError(
            f"{where}: not a decodable image: damaged, truncated or of a format PIL does not "
            f"read ({_failure_text(error)})"
        ) from None
    if array.ndim == 2:
        array = array[:, :, None]
    return rg.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def read_image(path: str | os.PathLike, mode: Any = ImageReadMode.UNCHANGED) -> Tensor:
    """A PNG/JPEG/... file as a uint8 tensor [C, H, W]."""
    mode = _mode("read_image", mode)
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"read_image: no file {path}")
    return _decode(path, mode, f"read_image: {path}")


decode_image_path = read_image


def decode_image(input: Any, mode: Any = ImageReadMode.UNCHANGED) -> Tensor:  # noqa: A002
    """Encoded bytes (a 1-D uint8 tensor) or a path, decoded to a uint8 tensor [C, H, W]."""

    if isinstance(input, (str, os.PathLike)):
        return read_image(input, mode)
    if not isinstance(input, Tensor) or input.dim() != 1:
        raise ShapeError(
            f"decode_image: input should be a 1-D uint8 tensor of encoded bytes, got "
            f"{list(getattr(input, 'shape', [])) or type(input).__name__}"
        )
    if str(input.dtype) != "uint8":
        raise DTypeError(
            f"decode_image: input should be a uint8 tensor of bytes, got {input.dtype}"
        )
    mode = _mode("decode_image", mode)
    return _decode(_io.BytesIO(input.numpy().tobytes()), mode, "decode_image")


decode_png = decode_jpeg = decode_image


def _checked_image(op: str, input: Any, channels: tuple[int, ...]) -> np.ndarray:  # noqa: A002
    """``input`` (a uint8 tensor [C, H, W] of one of ``channels``, not empty) as the [H, W, C]
    (or [H, W]) array PIL encodes; anything else refused by ``op``'s name before a file is
    touched (PIL's "Cannot handle this data type" was a bare ``TypeError``)."""
    allowed = ", ".join(str(c) for c in channels)
    if not isinstance(input, Tensor) or input.dim() != 3 or input.shape[0] not in channels:
        raise ShapeError(
            f"{op}: input should be a uint8 tensor [C, H, W] with C in {allowed}, got "
            f"{list(getattr(input, 'shape', [])) or type(input).__name__}"
        )
    if str(input.dtype) != "uint8":
        raise DTypeError(f"{op}: input should be a uint8 tensor, got {input.dtype}")
    if input.numel() == 0:
        raise ShapeError(f"{op}: cannot encode an empty image (shape {list(input.shape)})")
    array = input.numpy().transpose(1, 2, 0)
    return np.ascontiguousarray(array[:, :, 0] if array.shape[2] == 1 else array)


def _write_encoded(op: str, array: np.ndarray, filename: str | os.PathLike, **options: Any) -> None:
    """Encode ``array`` in memory, then write the file whole (:func:`atomic_write`): a full
    disk or an interrupt leaves the file that was there as it was."""
    from PIL import Image

    encoded = _io.BytesIO()
    Image.fromarray(array).save(encoded, **options)
    with atomic_write(filename) as file:
        file.write(encoded.getvalue())


def _check_level(op: str, name: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise DTypeError(f"{op}: {name} should be an int, got {value!r}")
    if not low <= value <= high:
        raise InvalidArgumentError(f"{op}: {name} should be between {low} and {high}, got {value}")
    return int(value)


def write_png(input: Tensor, filename: str | os.PathLike, compression_level: int = 6) -> None:  # noqa: A002
    """A uint8 tensor [C, H, W] (C 1, 3 or 4) saved as PNG."""
    level = _check_level("write_png", "compression_level", compression_level, 0, 9)
    array = _checked_image("write_png", input, (1, 3, 4))
    _write_encoded("write_png", array, filename, format="PNG", compress_level=level)


def write_jpeg(input: Tensor, filename: str | os.PathLike, quality: int = 75) -> None:  # noqa: A002
    """A uint8 tensor [C, H, W] (C 1 or 3) saved as JPEG."""
    quality = _check_level("write_jpeg", "quality", quality, 1, 100)
    array = _checked_image("write_jpeg", input, (1, 3))
    _write_encoded("write_jpeg", array, filename, format="JPEG", quality=quality)
