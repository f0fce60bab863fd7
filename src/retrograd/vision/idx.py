"""IDX, the format of MNIST and its kin: read by ``vision.datasets`` and ``retrograd train``
(``app/data.py``), written by the tests that make such files."""

from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

from ..errors import DamagedFileError, InvalidArgumentError
from ..files import atomic_write

__all__ = ["read_idx", "write_idx"]

# IDX: a big-endian header (two zero bytes, a type code, the number of dims, then each dim as a
# uint32) followed by the values, row-major.
_IDX_TYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_IDX_CODES = {
    dtype.newbyteorder(">") if dtype.itemsize > 1 else dtype: code
    for code, dtype in _IDX_TYPES.items()
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in an IDX file (``.gz`` files are decompressed)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as file:
            data = file.read()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except (OSError, EOFError, zlib.error) as error:  # a damaged .gz: truncated, not gzip,
        # or a flipped bit in its compressed stream (zlib's own error, not an OSError)
        raise DamagedFileError(f"{path}: not a readable IDX file ({error})") from None
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_TYPES:
        raise DamagedFileError(f"{path}: not an IDX file (bad magic number {data[:4]!r})")
    dtype, ndim = _IDX_TYPES[data[2]], data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DamagedFileError(
            f"{path}: IDX header of {ndim} dimensions needs {header} bytes, the file has "
            f"{len(data)} (damaged or truncated)"
        )
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    # Python's ints: a damaged header's extents overflow int64, whose product wrapped to 0
    expected = math.prod(shape) * dtype.itemsize
    if len(data) - header != expected:
        raise DamagedFileError(
            f"{path}: IDX header says shape {list(shape)} ({expected} bytes of data), "
            f"the file has {len(data) - header} (damaged or truncated)"
        )
    values = np.frombuffer(data, dtype=dtype, offset=header).reshape(shape)
    return values.astype(dtype.newbyteorder("="))  # native byte order, a writable copy


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Write ``array`` as an IDX file (gzipped when ``path`` ends in ``.gz``)."""
    array = np.asarray(array)
    big = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    if big not in _IDX_CODES:
        raise InvalidArgumentError(f"write_idx: IDX cannot store dtype {array.dtype}")
    header = bytes([0, 0, _IDX_CODES[big], array.ndim])
    header += b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    payload = header + np.ascontiguousarray(array, dtype=big).tobytes()
    if str(path).endswith(".gz"):
        payload = gzip.compress(payload)
    with atomic_write(path) as file:  # whole or not at all
        file.write(payload)
