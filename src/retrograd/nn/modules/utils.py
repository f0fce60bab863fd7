"""torch's ``torch.nn.modules.utils``: the argument helpers that layer code imports
(``from torch.nn.modules.utils import _pair``: one int for every spatial dim, or the tuple
given) and ``consume_prefix_in_state_dict_if_present``, which strips the ``module.`` prefix a
data-parallel wrapper's state dict has so that the bare model loads it.

>>> _pair(3), _pair((1, 2)), _triple([4, 5, 6])
((3, 3), (1, 2), (4, 5, 6))
>>> _reverse_repeat_tuple((1, 2), 2)  # F.pad's order: last dim first, each pad twice
(2, 2, 1, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...errors import ShapeError

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n: int, name: str = "parse") -> Callable[[Any], tuple]:
    """A parser of one value repeated ``n`` times, or of an iterable taken as it is (its
    length unchecked, as torch's)."""

    def parse(x: Any) -> tuple:
        if isinstance(x, Iterable):
            return tuple(x)
        return (x,) * n

    parse.__name__ = parse.__qualname__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t: Iterable[Any], n: int) -> tuple:
    """``t`` reversed, each item repeated ``n`` times: a per-dim padding in ``F.pad``'s order."""
    return tuple(x for x in reversed(tuple(t)) for _ in range(n))


def _list_with_default(out_size: Any, defaults: list[int]) -> Any:
    """An adaptive pooling's output size with each ``None`` taken from the input's trailing
    sizes ``defaults``; an int is returned as it is."""
    if isinstance(out_size, int):
        return out_size
    if len(defaults) <= len(out_size):
        raise ShapeError(f"Input dimension should be at least {len(out_size) + 1}")
    trailing = defaults[-len(out_size) :]
    return [d if v is None else v for v, d in zip(out_size, trailing)]


def consume_prefix_in_state_dict_if_present(state_dict: dict[str, Any], prefix: str) -> None:
    """Strip ``prefix`` from the keys of ``state_dict`` that start with it, in place, and from
    the keys of its per-module metadata (``state_dict._metadata``) where it has one.

    >>> state = {"module.fc.weight": 1, "step": 2}
    >>> consume_prefix_in_state_dict_if_present(state, "module.")
    >>> state
    {'step': 2, 'fc.weight': 1}
    """
    for key in list(state_dict):
        if key.startswith(prefix):
            state_dict[key[len(prefix) :]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is None:
        return
    for key in list(metadata):
        # '' is the wrapper's own entry; "module" (the prefix without its dot) the model's
        if key and (key == prefix.replace(".", "") or key.startswith(prefix)):
            metadata[key[len(prefix) :]] = metadata.pop(key)
