"""The compiled layer norm backward (``backend/compiled_norm.py``) gives the same bits wherever
its arrays lie in memory.

Its row sums were vectorized only behind LLVM's run-time overlap checks, because the same
loop stored the channel sums; an absent ``weight`` (an empty array, which may point anywhere)
next to the kernel's own buffers failed them, and the sums ran in the scalar order. A
checkpointed step then differed from NoCheckpointing in the last bit now and then
(``test_checkpointing_user_loops.py``'s functional blocks, once in a full run), depending on
where the allocator had put an empty array.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from retrograd.backend import numpy_transformer

pytestmark = pytest.mark.numpy_only("the NumPy backend's compiled kernel")

_LIBC = ctypes.CDLL(None)
_LIBC.malloc.restype = ctypes.c_void_p
_LIBC.malloc.argtypes = [ctypes.c_size_t]
_LIBC.free.argtypes = [ctypes.c_void_p]


def _empty_at(address: int) -> np.ndarray:
    """A float32 array of no elements whose data pointer is ``address`` (never read)."""
    return np.ctypeslib.as_array((ctypes.c_float * 1).from_address(address))[:0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_backward_without_weight_has_the_same_bits_wherever_the_empty_weight_points(
    dtype,
):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((21, 24)).astype(dtype)
    grad = rng.standard_normal((21, 24)).astype(dtype)
    none = np.empty(0, dtype)
    _, stats = numpy_transformer._layer_norm_compiled(x, none, none, 1e-5)
    expected = numpy_transformer._layer_norm_backward_compiled(grad, x, none, stats)
    # Around the blocks the allocator hands out next (freed last, reused first), where the
    # kernel's own buffers go: the old kernel gave two results over these addresses
    results = set()
    for size in (96, 128, 160, 200):
        block = _LIBC.malloc(size)
        _LIBC.free(block)
        for delta in range(-512, 512, 8):
            got = numpy_transformer._layer_norm_backward_compiled(
                grad, x, _empty_at(block + delta), stats
            )
            results.add(tuple(part.tobytes() for part in got))
    assert results == {tuple(part.tobytes() for part in expected)}
