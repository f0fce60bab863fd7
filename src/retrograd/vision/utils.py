"""torchvision.utils over retrograd: make_grid, save_image (PNG and the other formats of PIL),
draw_bounding_boxes."""

from __future__ import annotations

import io
import math
import os
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, ShapeError
from ..files import atomic_write
from ..tensor import Tensor
from . import _lib as rg


def _as_batch(tensor: Any) -> Tensor:
    if isinstance(tensor, (list, tuple)):
        tensor = rg.stack(list(tensor), dim=0)
    if not isinstance(tensor, Tensor):
        raise InvalidArgumentError(
            f"make_grid: tensor should be a Tensor or a list of Tensors, got {type(tensor)}"
        )
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    if tensor.dim() == 3:
        if tensor.shape[0] == 1:
            tensor = rg.cat((tensor, tensor, tensor), 0)
        tensor = tensor.unsqueeze(0)
    if tensor.dim() != 4:
        raise ShapeError(
            f"make_grid: expected images [B, C, H, W], [C, H, W] or [H, W], got "
            f"{list(tensor.shape)}"
        )
    if tensor.shape[1] == 1:
        tensor = rg.cat((tensor, tensor, tensor), 1)
    return tensor


def make_grid(
    tensor: Any,
    nrow: int = 8,
    padding: int = 2,
    normalize: bool = False,
    value_range: tuple[float, float] | None = None,
    scale_each: bool = False,
    pad_value: float = 0.0,
) -> Tensor:
    """The images of a batch tiled ``nrow`` to a row, ``padding`` pixels of ``pad_value``
    between them (single-channel images repeated to three channels)."""

    batch = _as_batch(tensor)
    array = batch.detach().cpu().numpy()
    if normalize:
        array = array.copy()

        def norm(part: np.ndarray) -> np.ndarray:
            low, high = (
                (float(part.min()), float(part.max())) if value_range is None else value_range
            )
            return (np.clip(part, low, high) - low) / max(high - low, 1e-5)

        if scale_each:
            array = np.stack([norm(image) for image in array]).astype(array.dtype)
        else:
            array = norm(array).astype(array.dtype)
    if array.shape[0] == 1:
        return rg.from_numpy(np.ascontiguousarray(array[0]))
    count = array.shape[0]
    columns = min(nrow, count)
    rows = math.ceil(count / columns)
    height, width = array.shape[2] + padding, array.shape[3] + padding
    grid = np.full(
        (array.shape[1], height * rows + padding, width * columns + padding),
        pad_value,
        dtype=array.dtype,
    )
    for k in range(count):
        y, x = divmod(k, columns)
        grid[
            :,
            y * height + padding : (y + 1) * height,
            x * width + padding : (x + 1) * width,
        ] = array[k]
    return rg.from_numpy(grid)


def save_image(tensor: Any, fp: Any, format: str | None = None, **kwargs: Any) -> None:  # noqa: A002
    """Save ``make_grid(tensor, **kwargs)`` (values in [0, 1]) as an image file (by PIL)."""
    from PIL import Image

    grid = make_grid(tensor, **kwargs).to(_float_dtype())
    array = np.clip(grid.numpy() * 255 + 0.5, 0, 255).astype(np.uint8).transpose(1, 2, 0)
    picture = Image.fromarray(array[:, :, 0] if array.shape[2] == 1 else array)
    if not isinstance(fp, str | os.PathLike):  # a file object: PIL writes into it
        picture.save(fp, format=format)
        return
    if format is None:  # (what PIL reads from the name, which it no longer sees)
        suffix = os.path.splitext(os.fspath(fp))[1].lower()
        format = Image.registered_extensions().get(suffix)  # noqa: A001
        if format is None:
            raise InvalidArgumentError(
                f"save_image: cannot tell an image format from the name {os.fspath(fp)!r}; "
                "give format= (such as 'PNG')"
            )
    encoded = io.BytesIO()
    try:
        picture.save(encoded, format=format)
    except (KeyError, ValueError, OSError) as error:  # an unknown format, one PIL can't write
        raise InvalidArgumentError(
            f"save_image: cannot write format {format!r} ({type(error).__name__}: {error})"
        ) from None
    # encoded first, then written whole: a full disk leaves the file that was there
    with atomic_write(fp) as file:
        file.write(encoded.getvalue())


def _float_dtype():
    return rg.float32


def draw_bounding_boxes(
    image: Tensor,
    boxes: Tensor,
    labels: list[str] | None = None,
    colors: Any = None,
    fill: bool = False,
    width: int = 1,
    font: str | None = None,
    font_size: int | None = None,
) -> Tensor:
    """The uint8 image [3, H, W] with ``boxes`` (x1, y1, x2, y2) outlined (by PIL's draw)."""
    from PIL import Image, ImageDraw

    if not isinstance(image, Tensor) or image.dtype != rg.uint8:
        raise InvalidArgumentError(
            f"draw_bounding_boxes: the image should be a uint8 Tensor, got "
            f"{getattr(image, 'dtype', type(image))}"
        )
    if image.dim() != 3 or image.shape[0] not in (1, 3):
        raise ShapeError(
            f"draw_bounding_boxes: pass an image [C, H, W] with 1 or 3 channels, got "
            f"{list(image.shape)}"
        )
    if boxes.dim() != 2 or boxes.shape[-1] != 4:
        raise ShapeError(f"draw_bounding_boxes: boxes should be [N, 4], got {list(boxes.shape)}")
    box_list = boxes.detach().cpu().numpy().astype(np.int64).tolist()
    if bool(((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])).any()):
        raise InvalidArgumentError(
            "draw_bounding_boxes: boxes need to be in (xmin, ymin, xmax, ymax) format"
        )
    array = image.numpy()
    if array.shape[0] == 1:
        array = np.repeat(array, 3, axis=0)
    picture = Image.fromarray(np.ascontiguousarray(array.transpose(1, 2, 0)))
    draw = ImageDraw.Draw(picture, "RGBA" if fill else None)
    if colors is None or isinstance(colors, (str, tuple)):
        colors = [colors or "red"] * len(box_list)
    for k, box in enumerate(box_list):
        color = colors[k]
        if fill:
            rgb = Image.new("RGB", (1, 1), color).getpixel((0, 0))
            draw.rectangle(box, width=width, outline=color, fill=(*rgb, 100))
        else:
            draw.rectangle(box, width=width, outline=color)
        if labels is not None and k < len(labels):
            draw.text((box[0] + width, box[1] + width), labels[k], fill=color)
    return rg.from_numpy(np.ascontiguousarray(np.array(picture).transpose(2, 0, 1)))
