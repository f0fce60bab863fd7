"""What ``sort``, ``topk``, ``cummax`` and ``cummin`` return: torch's named ``(values,
indices)`` pair (API.md section 10), which is also the values tensor (section 2, Burn's
methods: ``t.sort(1)``, ``t.topk(k, d)`` and ``t.cummax(d)`` give the values).

As a pair it is a tuple: ``values, indices = t.sort(1)``, ``t.topk(k)[1]``, ``.values``,
``.indices``, ``len``, iteration, and code that tells results apart with ``isinstance(out,
tuple)`` all read it as torch's. As a tensor it is its values: their methods and attributes
(``.numpy()``, ``.shape``, ``.backward()``), arithmetic and comparison operators, NumPy's
``asarray``, an operand of a tensor op (``x.mul(t.sort(1))``, ``x * t.sort(1)``), and any index
but an int or a slice (``t.sort(1)[..., 0]``). Where the two readings meet, the pair's wins:
``==`` compares pairs, ``len`` is 2, ``r[0]`` is the values.

>>> import retrograd as rg
>>> t = rg.tensor([[3.0, 1.0, 2.0]])
>>> (t.sort(1) * 10).tolist()
[[10.0, 20.0, 30.0]]
>>> values, indices = t.sort(1)
>>> indices.tolist(), t.topk(2, 1)[1].tolist(), t.topk(2, 1).tolist()
([[1, 2, 0]], [[0, 2]], [[3.0, 2.0]])
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["ValuesAndIndices", "values_and_indices"]


class ValuesAndIndices(tuple):
    """A ``(values, indices)`` pair that is also its values tensor (see the module)."""

    __slots__ = ()
    _fields = ("values", "indices")
    __array_priority__ = 1000  # NumPy defers to the reflected operators below

    def __new__(cls, values: Any, indices: Any) -> ValuesAndIndices:
        return tuple.__new__(cls, (values, indices))

    @property
    def values(self) -> Any:
        return tuple.__getitem__(self, 0)

    @property
    def indices(self) -> Any:
        return tuple.__getitem__(self, 1)

    def __getattr__(self, name: str) -> Any:  # only names a tuple lacks: the values'
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(tuple.__getitem__(self, 0), name)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice) or (
            isinstance(key, numbers.Integral) and not isinstance(key, bool)
        ):
            return tuple.__getitem__(self, key)
        return tuple.__getitem__(self, 0)[key]

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return tuple.__getitem__(self, 0).__array__(dtype, copy)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(values={self.values!r}, indices={self.indices!r})"

    def __reduce__(self) -> tuple:
        return _made, (type(self).__name__, self.values, self.indices)

    def _asdict(self) -> dict[str, Any]:
        return {"values": self.values, "indices": self.indices}


def _on_values(name: str) -> Any:
    def operator(self: ValuesAndIndices, *args: Any) -> Any:
        return getattr(tuple.__getitem__(self, 0), name)(*args)

    operator.__name__ = name
    return operator


# The tuple's own operators (``+`` concatenates, ``*`` repeats, ``<`` compares lexically) are
# replaced by the values' elementwise ones; ``==`` and hashing stay the pair's.
_VALUES_OPERATORS = (
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__pow__",
    "__rpow__",
    "__matmul__",
    "__rmatmul__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__and__",
    "__rand__",
    "__or__",
    "__ror__",
    "__xor__",
    "__rxor__",
    "__invert__",
    "__float__",
    "__int__",
)
for _name in _VALUES_OPERATORS:
    setattr(ValuesAndIndices, _name, _on_values(_name))


_KINDS: dict[str, type] = {}


def _made(name: str, values: Any, indices: Any) -> ValuesAndIndices:
    return values_and_indices(name)(values, indices)


def values_and_indices(name: str) -> type:
    """The pair class torch names ``torch.return_types.<name>`` (``sort``, ``topk``, ...)."""
    kind = _KINDS.get(name)
    if kind is None:
        kind = _KINDS[name] = type(name, (ValuesAndIndices,), {"__slots__": ()})
    return kind
