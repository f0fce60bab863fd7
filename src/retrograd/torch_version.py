"""torch's ``torch.torch_version.TorchVersion``: a version string that compares with other
version strings and tuples by its release numbers (``version >= "2.1"``,
``version >= (2, 1)``), as scripts compare ``torch.__version__``."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TorchVersion"]


def _release(value: Any) -> tuple[int, ...]:
    if isinstance(value, tuple | list):
        return tuple(int(v) for v in value)
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(value))
    if match is None:
        raise ValueError(f"TorchVersion: {value!r} is not a version")
    return tuple(int(v) for v in match.group(1).split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    size = max(len(a), len(b))
    return a + (0,) * (size - len(a)), b + (0,) * (size - len(b))


class TorchVersion(str):
    """A version string compared by its release numbers (see the module)."""

    def _pair(self, other: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return _padded(_release(self), _release(other))

    def __lt__(self, other: Any) -> bool:
        a, b = self._pair(other)
        return a < b

    def __le__(self, other: Any) -> bool:
        a, b = self._pair(other)
        return a <= b

    def __gt__(self, other: Any) -> bool:
        a, b = self._pair(other)
        return a > b

    def __ge__(self, other: Any) -> bool:
        a, b = self._pair(other)
        return a >= b

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str | tuple | list):
            try:
                a, b = self._pair(other)
            except ValueError:
                return False
            return a == b
        return NotImplemented

    __hash__ = str.__hash__
