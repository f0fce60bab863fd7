"""torch's ``torch.utils.data._utils.collate``, where programs extend ``default_collate``:
``collate(batch, collate_fn_map=...)`` with ``default_collate_fn_map`` copied or updated
with functions of their own types (each called as ``fn(batch, collate_fn_map=...)``).

>>> import retrograd as rg
>>> from retrograd.utils.data._utils.collate import collate, default_collate_fn_map
>>> class Box:
...     def __init__(self, n):
...         self.n = n
>>> def collate_box_fn(batch, *, collate_fn_map=None):
...     return rg.tensor([box.n for box in batch])
>>> batch = [(Box(1), 0.5), (Box(2), 1.5)]
>>> collate(batch, collate_fn_map={**default_collate_fn_map, Box: collate_box_fn})[0].tolist()
[1, 2]
"""

from ..dataloader import (
    collate,
    collate_float_fn,
    collate_int_fn,
    collate_numpy_array_fn,
    collate_numpy_scalar_fn,
    collate_str_fn,
    collate_tensor_fn,
    default_collate,
    default_collate_fn_map,
    default_convert,
)

__all__ = [
    "collate",
    "collate_float_fn",
    "collate_int_fn",
    "collate_numpy_array_fn",
    "collate_numpy_scalar_fn",
    "collate_str_fn",
    "collate_tensor_fn",
    "default_collate",
    "default_collate_fn_map",
    "default_convert",
]
