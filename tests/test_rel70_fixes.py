"""Reliability round 70: what ``tests/test_memsoak3.py``'s loops of real programs found growing.

Each test repeats the one call a loop made that left traced bytes on retrograd's line, after a
warm-up, and counts what stays traced on that file: nothing may (before the fixes, hundreds of
small objects did, more as calls went on).
"""

from __future__ import annotations

import gc
import io
import tracemalloc

import numpy as np
import pytest

import retrograd as rg
from retrograd.backend import numpy_backend
from retrograd.nn.modules import state_value
from retrograd.tensor import creation, dtypes


def _left_on(path: str, call, warm: int = 200, calls: int = 3000) -> int:
    """Blocks traced as allocated by ``path``'s code and still alive after ``calls`` calls of
    ``call(i)`` (after ``warm`` untraced ones and a full collection each side)."""
    for i in range(warm):
        call(i)
    gc.collect()
    tracemalloc.start(1)
    try:
        before = tracemalloc.take_snapshot()
        for i in range(calls):
            call(i)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    only = [tracemalloc.Filter(True, path)]
    grown = after.filter_traces(only).compare_to(before.filter_traces(only), "filename")
    return sum(stat.count_diff for stat in grown)


def test_tensor_of_a_python_int_leaves_no_dtype_names_traced():
    """A ``Dataset`` making ``torch.tensor(label)`` of an int per item: the dtype's inference
    read NumPy's ``dtype.name``, a string made at each read, and such strings stayed traced
    (10 KB more over 90 epochs of 12 items)."""
    assert _left_on(creation.__file__, lambda i: rg.tensor(i % 3)) == 0


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (3, "int64"),
        ([np.uint8(3), np.uint8(4)], "uint8"),
        ([np.int8(1), np.uint8(4)], "int16"),
        ([np.int32(1)], "int32"),
        ([np.array([1], dtype=">i2")], "int16"),  # either byte order, as torch's
        ([np.int64(1)], "int64"),
    ],
)
def test_the_inferred_integer_dtypes_are_torch_s(data, expected):
    """The dtypes ``torch.tensor`` infers for these (torch 2.13), read by kind and size now."""
    assert rg.tensor(data).dtype == expected


def test_saving_a_state_dict_leaves_no_dtype_names_traced():
    """A loop saving its model's state dict each epoch (``torch.save(model.state_dict(),
    ...)``): each value's dtype was named by ``str()`` of NumPy's dtype, a string NumPy
    builds at each read and keeps some of."""
    model = rg.nn.Linear(3, 2)

    def save(i):
        rg.save(model.state_dict(), io.BytesIO())

    assert _left_on(state_value.__file__, save, warm=20, calls=600) == 0


def test_a_numpy_dtype_named_where_a_dtype_is_due_leaves_no_names_traced():
    """``torch.zeros(n, dtype=np.float32)``, ``x.to(array.dtype)``: NumPy's dtype named by
    ``canonical_dtype``, once per dtype."""
    kinds = [np.dtype(np.float32), np.float64, np.dtype(np.int64)]
    assert _left_on(dtypes.__file__, lambda i: rg.zeros(2, dtype=kinds[i % 3])) == 0
    assert dtypes.numpy_dtype_name(np.dtype(">f4")) == "float32"  # either byte order
    assert [rg.zeros(1, dtype=kind).dtype for kind in kinds] == ["float32", "float64", "int64"]


@pytest.mark.numpy_only("the NumPy backend's matmul")
def test_matmul_of_views_of_one_buffer_leaves_no_ctypes_objects_traced():
    """An attention's ``q @ k.transpose(-2, -1)`` of one ``qkv`` buffer: ``matmul`` compares
    the operands' start addresses, read by ``array.ctypes.data``, whose objects stayed traced
    (2 KB more over 30 steps of a small model)."""
    backend = rg.NumpyBackend()

    def product(i):
        qkv = np.ones((2, 5, 18), dtype=np.float32)
        backend.matmul(qkv[..., :6], qkv[..., 6:12].swapaxes(-1, -2))

    assert _left_on(numpy_backend.__file__, product) == 0


@pytest.mark.numpy_only("the NumPy backend's matmul")
def test_matmul_still_copies_an_operand_that_starts_where_the_other_does():
    """The check the address read serves: ``q @ q.T`` of one buffer runs as gemm's product
    (the same bits as the product of a copy)."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((7, 5)).astype(np.float32)
    expected = np.matmul(q, q.T.copy())
    np.testing.assert_array_equal(rg.NumpyBackend().matmul(q, q.T), expected)
