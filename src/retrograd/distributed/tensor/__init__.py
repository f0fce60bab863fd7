"""torch's ``torch.distributed.tensor`` (DTensor): refused by name, each name pointing at
retrograd's data parallel (every rank holds whole tensors; there are no sharded ones)."""

from __future__ import annotations

from .._refusals import refusing_class, refusing_function

__all__ = [
    "DTensor",
    "Partial",
    "Placement",
    "Replicate",
    "Shard",
    "distribute_module",
    "distribute_tensor",
]

DTensor = refusing_class("distributed.tensor.DTensor")
Placement = refusing_class("distributed.tensor.Placement")
Shard = refusing_class("distributed.tensor.Shard")
Replicate = refusing_class("distributed.tensor.Replicate")
Partial = refusing_class("distributed.tensor.Partial")
distribute_tensor = refusing_function("distributed.tensor.distribute_tensor")
distribute_module = refusing_function("distributed.tensor.distribute_module")
