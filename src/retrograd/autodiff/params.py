"""Parameter ids: the name a distributed parameter has on every device and process.

The autodiff side of data parallel owns them, as in Burn: a leaf's node carries a
:class:`DistributedParam` (:meth:`Autodiff.set_distributed`), and the gradient sync of
:mod:`retrograd.distributed` reads it.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from ..errors import DTypeError

__all__ = ["DistributedParam", "ParamId"]

#: Ids made from values already seen: parameters are marked again at every training step.
_INTERNED: dict[Any, ParamId] = {}


class ParamId:
    """A parameter's identity across devices and processes.

    Built from an int or a str; a str maps to a stable 64-bit value (a hash of its UTF-8 bytes,
    not Python's salted ``hash``), so every rank derives the same id whatever ``PYTHONHASHSEED``.

    >>> ParamId("layer1.weight") == ParamId("layer1.weight")
    True
    """

    __slots__ = ("label", "value")

    def __init__(self, value: int | str):
        if isinstance(value, ParamId):
            self.value, self.label = value.value, value.label
        elif isinstance(value, str):
            digest = hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest()
            self.value = int.from_bytes(digest, "little") >> 1
            self.label = value
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            self.value = int(value)
            self.label = str(value)
        else:
            # DTypeError (a TypeError) also for a negative int: the accepted type is
            # "non-negative int or str", and callers catch TypeError for it.
            raise DTypeError(f"ParamId: expected a non-negative int or a str, got {value!r}")

    @classmethod
    def of(cls, value: Any) -> ParamId:
        """``value`` as a ParamId, interned for ints and strs."""
        if isinstance(value, ParamId):
            return value
        if not isinstance(value, int | str):  # a list or a dict is no key of the intern table
            return cls(value)  # refuses it, naming the value
        key = (type(value), value)
        interned = _INTERNED.get(key)
        if interned is None:
            interned = _INTERNED[key] = cls(value)
        return interned

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ParamId) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"ParamId({self.label!r})"


class DistributedParam(NamedTuple):
    """What data parallel needs of a leaf marked for gradient all-reduce (``node.distributed``).

    Gradient sync plans its buckets when backward starts, before any gradient exists, so the
    node (all the tape holds) carries the parameter's size and dtype with its id.
    """

    id: ParamId
    shape: tuple[int, ...]
    dtype: str
