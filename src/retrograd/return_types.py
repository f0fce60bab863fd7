"""torch's ``torch.return_types``: the classes of the named tuples that ops return
(``max``, ``sort``, ``topk``, ``linalg_eigh``...), so that ``isinstance(out,
torch.return_types.max)`` holds of what ``t.max(1)`` returns, as torch's. Each is the class
retrograd's op makes, collected here by its name (torch's)."""

from __future__ import annotations

from types import ModuleType

from . import linalg as _linalg
from .tensor import pairs as _pairs
from .tensor import products as _products
from .tensor import reduce as _reduce
from .tensor import selection as _selection
from .tensor import special as _special
from .tensor import torch_functions as _torch_functions


def _result_classes(*modules: ModuleType) -> dict[str, type]:
    found: dict[str, type] = {}
    for module in modules:
        for value in vars(module).values():
            named = isinstance(value, type) and issubclass(value, tuple)
            if named and hasattr(value, "_fields") and value is not _pairs.ValuesAndIndices:
                found.setdefault(value.__name__, value)
    for name in ("sort", "topk", "cummax", "cummin"):
        found[name] = _pairs.values_and_indices(name)
    return found


_CLASSES = _result_classes(_reduce, _selection, _products, _special, _torch_functions, _linalg)
globals().update(_CLASSES)
__all__ = sorted(_CLASSES)
