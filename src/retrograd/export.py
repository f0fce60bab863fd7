"""torch's ``torch.export``: refused by name. retrograd runs eagerly and records no graphs to
export (``rg.compile`` is eager too); save the model's ``state_dict()`` (``rg.save``), load it
into the torch model and export there. ``Dim`` (a named dimension for ``dynamic_shapes``) is
built, as the specs that scripts write before calling ``export`` are."""

from __future__ import annotations

from typing import Any, NoReturn

from .errors import InvalidArgumentError

__all__ = ["Dim", "ExportedProgram", "export", "load", "save", "unflatten"]


def _refused(name: str) -> NoReturn:
    raise InvalidArgumentError(
        f"export.{name}: retrograd records no graphs to export; save the model's state_dict() "
        "(rg.save), load it into the torch model and export with torch.export there"
    )


class Dim:
    """torch's ``Dim(name, min=, max=)``: a named dynamic dimension of an export spec."""

    AUTO = "AUTO"
    STATIC = "STATIC"
    DYNAMIC = "DYNAMIC"

    def __init__(self, name: str, *, min: int | None = None, max: int | None = None) -> None:  # noqa: A002
        if min is not None and max is not None and min > max:
            raise InvalidArgumentError(f"Dim {name!r}: min {min} is larger than max {max}")
        self.__name__, self.min, self.max = name, min, max

    def __repr__(self) -> str:
        return f"Dim({self.__name__!r}, min={self.min}, max={self.max})"


def export(*args: Any, **kwargs: Any) -> NoReturn:
    """torch's ``export.export``: refused (see the module docstring)."""
    _refused("export")


def save(*args: Any, **kwargs: Any) -> NoReturn:
    _refused("save")


def load(*args: Any, **kwargs: Any) -> NoReturn:
    _refused("load")


def unflatten(*args: Any, **kwargs: Any) -> NoReturn:
    _refused("unflatten")


class ExportedProgram:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refused("ExportedProgram")
