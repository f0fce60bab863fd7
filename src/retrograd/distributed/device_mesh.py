"""torch's ``torch.distributed.device_mesh``: refused by name (meshes place shards of
FSDP/DTensor tensors, which do not exist here), pointing at retrograd's data parallel."""

from __future__ import annotations

from ._refusals import refusing_class, refusing_function

__all__ = ["DeviceMesh", "init_device_mesh"]

DeviceMesh = refusing_class("distributed.device_mesh.DeviceMesh")
init_device_mesh = refusing_function("distributed.device_mesh.init_device_mesh")
