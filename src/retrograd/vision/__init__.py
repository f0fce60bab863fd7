"""torchvision's layout over retrograd: ``import retrograd.vision as torchvision``.

transforms (v1), datasets (read from files under ``root``; nothing is downloaded), utils
(make_grid, save_image), ops (boxes, nms, model blocks) and models (ResNet, VGG). PIL images
need Pillow; importing ``retrograd`` imports none of this."""

from . import datasets, io, models, ops, transforms, utils

__version__ = "0.28.0+retrograd"

__all__ = ["datasets", "io", "models", "ops", "transforms", "utils"]


def get_image_backend() -> str:
    return "PIL"


def set_image_backend(backend: str) -> None:
    if backend != "PIL":
        raise ValueError(f"Invalid backend '{backend}'. Options are 'PIL' (here, the only one)")
