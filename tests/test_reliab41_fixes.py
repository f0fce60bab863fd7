"""Reliability 41: torch files that ``rg.load`` loaded and ``torch.load`` refuses.

A probe flipped seeded bits of torch's legacy and zip files and loaded each with both, under
both ``weights_only`` and five ``map_location`` forms. In a legacy file (no checksum) three
kinds of damage loaded here and were refused by torch:

* a storage's saved location that names no device (``"cpu"`` with a bit flipped, or another
  of the pickle's objects where a memo index was flipped): torch refuses it where it restores
  the storage where it was saved from (no ``map_location``, a dict without that location, a
  function that returns ``None``) and ignores it where a ``map_location`` says where it goes;
* a storage's element count that disagrees between the pickle and the file (torch's "storage
  has wrong byte size");
* a file saved from a CUDA device, loaded without ``map_location`` on a machine without one.

Each is refused now where torch refuses it, and loads as torch loads it elsewhere. In a zip,
flips in fields Python's zip reader passes over (or in small records this reader never read)
loaded here and torch's reader (miniz) refuses them: each class is refused now (the last
test).

The order-dependent failure of ``test_reliability_sweep_40`` was the first kind: torch names
a legacy file's storages by their memory addresses, so the file's bytes (names a digit longer,
storages in another order) changed with what ran before, and a seeded flip hit a location
where it had hit a name. The sweep now saves its legacy file with the same bytes in every
process (``tests/legacy_files.py``) and runs in the test's process again.
"""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import pytest
import torch

import retrograd as rg
from legacy_files import legacy_file


def _state() -> dict:
    torch.manual_seed(0)
    return {"w": torch.randn(3, 4), "b": torch.arange(5), "k": torch.ones(2, dtype=torch.float64)}


def _flipped(data: bytes, at: int, bit: int) -> bytes:
    damaged = bytearray(data)
    damaged[at] ^= 1 << bit
    return bytes(damaged)


def _loads(load, data: bytes, **kwargs):
    """What ``load`` gives, or the exception it raises."""
    try:
        return load(io.BytesIO(data), **kwargs)
    except Exception as error:  # (the outcome compared)
        return error


def _check_as_torch(data: bytes, torch_refuses: bool, **kwargs) -> None:
    """torch refuses ``data`` (or loads it) as the case says, and ``rg.load`` does as torch."""
    expected = _loads(torch.load, data, **kwargs)
    assert isinstance(expected, Exception) == torch_refuses, (kwargs, expected)
    loaded = _loads(rg.load, data, **kwargs)
    if torch_refuses:
        assert isinstance(loaded, rg.InvalidArgumentError), (kwargs, loaded)
        assert "the file object" in str(loaded)
        return
    assert not isinstance(loaded, Exception), (kwargs, loaded)
    assert loaded.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(loaded[key].numpy(), value.numpy())


#: map_location forms, and whether torch checks the file's locations under each: it does when
#: it restores a storage where it was saved from.
MAP_LOCATIONS = [
    (None, True),
    ("cpu", False),
    (torch.device("cpu"), False),
    ({"cuda:0": "cpu"}, True),  # (the damaged location is none of its keys)
    (lambda storage, location: storage, False),
    (lambda storage, location: None, True),
]


def _zip_with_location(location: bytes) -> bytes:
    """torch's zip file of :func:`_state`, its pickle naming ``location`` (written whole, its
    checksums right: damage the zip's checks cannot see)."""
    saved = io.BytesIO()
    torch.save(_state(), saved)
    out = io.BytesIO()
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            if name.endswith("data.pkl"):
                data = data.replace(b"X\x03\x00\x00\x00cpu", b"X\x03\x00\x00\x00" + location)
            target.writestr(name, data)
    return out.getvalue()


@pytest.mark.parametrize(("map_location", "checked"), MAP_LOCATIONS)
def test_a_location_that_names_no_device_is_refused_where_torch_restores_it(map_location, checked):
    legacy = legacy_file(_state())
    at = legacy.index(b"X\x03\x00\x00\x00cpu") + 7  # "cpu"'s "u": "cpw"
    memo = legacy.index(b"h\x06K")  # the second storage's location, a memo entry: another one
    for damaged in (
        _flipped(legacy, at, 1),
        _flipped(legacy, memo + 1, 0),
        _zip_with_location(b"cpw"),
    ):
        for weights_only in (True, False):
            _check_as_torch(damaged, checked, map_location=map_location, weights_only=weights_only)


def test_a_storage_count_that_disagrees_with_the_pickle_is_refused():
    legacy = legacy_file(_state())
    listed_end = legacy.rindex(b"e.") + 2  # the storages follow the list of their names
    counts = [listed_end, listed_end + 8 + 12 * 4, listed_end + 8 + 12 * 4 + 8 + 5 * 8]
    assert [legacy[at] for at in counts] == [12, 5, 2]  # w, b, k in the canonical order
    numel = legacy.index(b"K\x0c")  # w's count in the pickle
    for damaged in (
        _flipped(legacy, numel + 1, 0),  # the pickle says 13
        _flipped(legacy, counts[0], 0),  # the file says 13: the next count read from data
        _flipped(legacy, counts[2], 0),  # k, the last storage: 3 elements of 16 bytes
        _flipped(legacy, counts[2], 1),  # k: 0 elements (its 16 bytes left over)
    ):
        for weights_only in (True, False):
            _check_as_torch(damaged, True, weights_only=weights_only)


def test_a_file_saved_from_a_gpu_loads_without_map_location_only_where_torch_loads_it():
    legacy = legacy_file(_state())
    cuda = legacy.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
    # without a CUDA device torch refuses it (its message asks for a map_location); with one
    # it loads it, and so does this
    refused = not torch.cuda.is_available()
    _check_as_torch(cuda, refused)
    if refused:
        with pytest.raises(rg.InvalidArgumentError, match="map_location='cpu'"):
            rg.load(io.BytesIO(cuda))
    for map_location in ("cpu", {"cuda:0": "cpu"}, lambda storage, location: storage):
        _check_as_torch(cuda, False, map_location=map_location)


def _central_headers(data: bytes) -> dict[str, int]:
    """Where each entry's header in a zip's central directory starts, by the entry's name."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        at, count = archive.start_dir, len(archive.infolist())
    headers = {}
    for _ in range(count):
        name_length, extra, comment = struct.unpack("<HHH", data[at + 28 : at + 34])
        headers[data[at + 46 : at + 46 + name_length].decode()] = at
        at += 46 + name_length + extra + comment
    return headers


def test_zip_damage_torchs_reader_refuses_is_refused_though_pythons_reads_past_it():
    """Flips in fields of a torch zip that Python's zip reader does not read (or in records
    the reader did not read): torch's reader (miniz) refuses each, and so does this."""
    saved = io.BytesIO()
    torch.save(_state(), saved)
    data = saved.getvalue()
    headers = _central_headers(data)
    last = max(headers.values())
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        alignment = archive.getinfo("archive/.storage_alignment")
    name_length, extra = struct.unpack("<HH", data[alignment.header_offset + 26 :][:4])
    end = data.rindex(b"PK\x05\x06")
    locator = end - 20
    assert data[locator : locator + 4] == b"PK\x06\x07"  # torch writes zip64's end records
    cases = {
        "an entry outside the archive's folder": (headers["archive/.storage_alignment"] + 46, 1),
        "a stored entry's two sizes differ": (headers["archive/byteorder"] + 20, 0),
        "data.pkl marked a folder": (headers["archive/data.pkl"] + 38, 4),
        # (Python reads the name as cp437, torch's reader as UTF-8; no byteorder record then)
        "an entry's name not UTF-8": (headers["archive/byteorder"] + 46 + 16, 7),
        "the last entry's comment past the directory": (last + 32, 0),
        "zip64's locator counting no disk": (locator + 16, 0),
        "zip64's end record's size under 44 bytes": (locator - 56 + 4, 3),
        "zip64's end record's disk number": (locator - 56 + 16, 0),
        ".storage_alignment not a number": (alignment.header_offset + 30 + name_length + extra, 4),
    }
    for case, (at, bit) in cases.items():
        damaged = _flipped(data, at, bit)
        for weights_only in (True, False):
            try:
                _check_as_torch(damaged, True, weights_only=weights_only)
            except AssertionError as error:
                raise AssertionError(case) from error
