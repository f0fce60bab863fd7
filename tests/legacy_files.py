"""torch's legacy files (``_use_new_zipfile_serialization=False``) with the same bytes in every
process.

torch names each storage of a legacy file by its address in memory (``str(storage._cdata)``)
and writes the storages in the order of those names, so a file of the same tensors differs
from process to process: its names may be a digit longer (every byte after them shifts), its
storages in another order. A test that flips bits at seeded offsets of such a file hits other
fields after other tests ran (a count where it hit data before). :func:`legacy_file` gives the
file torch would write had the storages the addresses 0, 1, 2... in the order the pickle first
names them: the same bytes whatever ran before.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

import torch

#: The bytes of one element of each storage class a test saves.
_ITEM_SIZES = {
    "FloatStorage": 4,
    "DoubleStorage": 8,
    "HalfStorage": 2,
    "LongStorage": 8,
    "IntStorage": 4,
    "ByteStorage": 1,
    "BoolStorage": 1,
}


class _References(pickle.Unpickler):
    """Reads a legacy file's object pickle, noting each storage reference (class, key, count)
    in the order the pickle makes them; nothing of torch's is rebuilt."""

    def __init__(self, file: Any) -> None:
        super().__init__(file)
        self.storages: dict[str, tuple[str, int]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("torch"):
            return name if name.endswith("Storage") else (lambda *args, **kwargs: None)
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        _, kind, key, _location, numel, _view = pid
        self.storages.setdefault(key, (kind, numel))


def legacy_file(state: Any) -> bytes:
    """``torch.save(state, _use_new_zipfile_serialization=False)``'s bytes, its storages named
    ``"0"``, ``"1"``... in the order the pickle first names them (see the module's note)."""
    buffer = io.BytesIO()
    torch.save(state, buffer, _use_new_zipfile_serialization=False)
    stream = io.BytesIO(buffer.getvalue())
    for _ in range(3):  # the magic number, the protocol, the saving system's sizes
        pickle.load(stream)
    header_end = stream.tell()
    references = _References(stream)
    references.load()
    object_end = stream.tell()
    listed = pickle.load(stream)
    blocks = {}
    for key in listed:
        kind, numel = references.storages[key]
        count = struct.unpack("<q", stream.read(8))[0]
        assert count == numel, (key, count, numel)
        blocks[key] = struct.pack("<q", count) + stream.read(count * _ITEM_SIZES[kind])
    assert not stream.read(), "bytes after the last storage"
    names = {key: str(number) for number, key in enumerate(references.storages)}
    assert len(names) <= 10, "names past 9 would sort apart from their numbers"
    data = buffer.getvalue()
    pickled = data[header_end:object_end]
    for key, name in names.items():  # protocol 2 has no frames: a string's length is its own
        old = key.encode()
        pickled = pickled.replace(
            b"X" + struct.pack("<I", len(old)) + old,
            b"X" + struct.pack("<I", len(name)) + name.encode(),
        )
    order = sorted(names, key=lambda key: names[key])
    listing = pickle.dumps([names[key] for key in order], protocol=2)
    return data[:header_end] + pickled + listing + b"".join(blocks[key] for key in order)
