"""An embedding's gradient, ``select_add`` of rows, as one compiled pass (Numba).

NumPy's path (:meth:`~retrograd.backend.NumpyBackend.select_add`) sorts the indices, gathers
the rows in that order, sums each run of equal indices with ``np.add.reduceat`` and adds the
sums into a copy of the target: four passes and two temporaries the size of the gradient
(about 0.3 ms for a GPT's 2048 rows of 128). This loop gives the same bits in one pass: it
orders the rows by a counting sort (stable, as the ``argsort`` there) and sums each run as
``reduceat`` does, the run's first row plus NumPy's pairwise sum of the others
(:func:`_pairwise_rows`: eight running sums below 128 rows, halves above, as
``pairwise_sum`` in NumPy's ``loops_utils``), then adds the run's sum into its row. (A NaN
may come out with the other sign: which NaN an addition of two keeps is the compiler's
choice, NumPy's C compiler's as Numba's.)
"""

from __future__ import annotations

import numba
import numpy as np

from . import numba_interrupts  # noqa: F401  (Ctrl-C held while a kernel is made)

__all__ = ["index_add_rows"]

#: NumPy's ``PW_BLOCKSIZE``: runs of up to this many rows take the eight running sums.
_BLOCK = 128


@numba.njit(error_model="numpy", cache=True, nogil=True)
def _pairwise_rows(values, order, start, count, zero, result):
    """``result[:]`` = NumPy's pairwise sum of the rows ``values[order[start:start +
    count]]``, column by column; ``zero`` is ``-0.0`` in the values' dtype, where NumPy's
    short sums start (so that a sum of ``-0.0`` stays ``-0.0``)."""
    width = values.shape[1]
    if count < 8:
        for j in range(width):
            result[j] = zero
        for k in range(count):
            row = order[start + k]
            for j in range(width):
                result[j] += values[row, j]
    elif count <= _BLOCK:
        sums = np.empty((8, width), values.dtype)
        for t in range(8):
            row = order[start + t]
            for j in range(width):
                sums[t, j] = values[row, j]
        i = 8
        whole = count - count % 8
        while i < whole:
            for t in range(8):
                row = order[start + i + t]
                for j in range(width):
                    sums[t, j] += values[row, j]
            i += 8
        for j in range(width):
            result[j] = ((sums[0, j] + sums[1, j]) + (sums[2, j] + sums[3, j])) + (
                (sums[4, j] + sums[5, j]) + (sums[6, j] + sums[7, j])
            )
        while i < count:
            row = order[start + i]
            for j in range(width):
                result[j] += values[row, j]
            i += 1
    else:
        half = count // 2
        half -= half % 8
        second = np.empty(width, values.dtype)
        _pairwise_rows(values, order, start, half, zero, result)
        _pairwise_rows(values, order, start + half, count - half, zero, second)
        for j in range(width):
            result[j] += second[j]


@numba.njit(error_model="numpy", cache=True, nogil=True)
def index_add_rows(out, rows, values, zero):
    """In place, ``out[rows[i]] += values[i]`` for every ``i``, the values of one index summed
    first (in ``reduceat``'s order), then added into their row; ``True``. ``False``, and
    ``out`` untouched, when a row is out of range (the caller's NumPy path reports it)."""
    count = rows.size
    targets, width = out.shape
    starts = np.zeros(targets + 1, np.int64)
    for i in range(count):
        r = rows[i]
        if r < 0 or r >= targets:
            return False
        starts[r + 1] += 1
    for r in range(targets):
        starts[r + 1] += starts[r]
    order = np.empty(count, np.int64)
    filled = starts[:-1].copy()
    for i in range(count):
        r = rows[i]
        order[filled[r]] = i
        filled[r] += 1
    rest = np.empty(width, values.dtype)
    for r in range(targets):
        first, end = starts[r], starts[r + 1]
        if first == end:
            continue
        head = order[first]
        if end - first == 1:
            for j in range(width):
                out[r, j] += values[head, j]
            continue
        _pairwise_rows(values, order, first + 1, end - first - 1, zero, rest)
        for j in range(width):
            out[r, j] += values[head, j] + rest[j]
    return True
