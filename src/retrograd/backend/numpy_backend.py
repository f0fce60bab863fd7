"""The NumPy backend: NumPy arrays (or NumPy scalars, for 0-d results) as primitives."""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..effects import DRAWS, pcg64_state, pcg64_words
from ..errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    OutOfMemoryError,
    ShapeError,
    SizeMismatchError,
    index_error,
)
from . import numpy_fma, special
from .numpy_math import NumpyMathKernels
from .numpy_nn import NumpyNNKernels
from .numpy_optim import NumpyOptimizerKernels
from .numpy_rnn import NumpyRecurrentKernels
from .numpy_transformer import NumpyTransformerKernels
from .protocol import (
    COMPLEX_DTYPES,
    COMPLEX_SEEN,
    Backend,
    check_random_allowed,
    complex_draws,
    default_float_dtype,
    singular_matrix,
)
from .std_algorithms import std_nth_element, std_partial_sort, std_sort

# NumPy warns where a float operation meets a pole or overflows (``log(0)``, ``1 / 0``,
# ``exp(1000)``); torch gives the same infinities and NaN silently, and so does retrograd on
# either backend: a ported ``torch.log(probs)`` over zeros is not a fault in the program. The
# filter covers NumPy's floating-point messages raised from retrograd's own frames only (a
# user's NumPy calls warn as before, and ``np.seterr(all="raise")`` still raises); ignoring by
# filter costs nothing per op, where an ``errstate`` around each would (about 1 us).
warnings.filterwarnings(
    "ignore",
    message=r"(divide by zero|invalid value|overflow|underflow) encountered in",
    category=RuntimeWarning,
    module=r"retrograd(\.|$)",
)

__all__ = ["NumpyBackend"]

_DTYPES = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "int64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
    "uint8": np.dtype(np.uint8),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
    "int8": np.dtype(np.int8),
}
#: kept apart from ``_DTYPES``: a lookup of one notes that complex arrays exist
#: (``COMPLEX_SEEN``), at no cost to the real dtypes' lookups
_COMPLEX_DTYPES = {"complex64": np.dtype(np.complex64), "complex128": np.dtype(np.complex128)}
_NAMES = {dtype: name for name, dtype in {**_DTYPES, **_COMPLEX_DTYPES}.items()}
_COMPLEX_OF = {np.dtype(np.float32): np.complex64, np.dtype(np.float64): np.complex128}
#: the integer dtypes of NumPy arrays that tensors made from them keep (others become int64)
_KEPT_INTS = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.int16, np.int32))
#: the dtypes whose sums and products are int64, as torch's (NumPy's of uint8 are uint64)
_WIDENED = {np.dtype(t): np.int64 for t in (np.uint8, np.int8, np.int16, np.int32)}
# torch's CPU cumsum/cumprod carry the running value in a wider type than they store (its
# ``acc_type``: double for float32), so a long float32 running sum stays within one rounding
# of the exact one instead of drifting by the length of the scan
_RUNNING_ACCUMULATOR = {
    np.dtype(np.float32): np.float64,
    np.dtype(np.complex64): np.complex128,
}


class _Generator:
    """The process-wide random generator behind ``rg.seed`` (NumPy's is thread-safe)."""

    #: PCG64's state and increment (128 bits each, as 4 x 32), has_uint32, uinteger, then the
    #: initial seed (64 bits, as 2 x 32): ``rg.get_rng_state``'s int64 words
    STATE_WORDS = 12

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._weak = weakref.ref(self)  # (what effects.DRAWS holds it by)
        #: how many times the stream was reseeded or restored: a device generator that
        #: follows this one (``TorchBackend``'s on a GPU) reseeds itself when it changes
        self.epoch = 0
        self.reseed(int(np.random.SeedSequence().entropy) % 2**63)

    def reseed(self, seed: int) -> None:
        with self.lock:
            self.initial = int(seed) % 2**64
            self._rng = np.random.default_rng(self.initial)
            self.epoch += 1

    @property
    def rng(self) -> np.random.Generator:
        """The stream, for a draw (refused where :func:`random_refused` says so); its
        position noted first, for a retried op to put back (:data:`effects.DRAWS`)."""
        check_random_allowed()
        rng = self._rng
        DRAWS.before_draw(self._weak, pcg64_words(rng.bit_generator))
        return rng

    def restore_position(self, words: list[int], blob: object) -> None:
        """Return to a position :data:`effects.DRAWS` noted (a retried op's draws undone)."""
        with self.lock:
            self._rng.bit_generator.state = pcg64_state(words)

    def state_words(self) -> np.ndarray:
        with self.lock:
            state = self._rng.bit_generator.state
            initial = self.initial
        words = []
        for value in (state["state"]["state"], state["state"]["inc"]):
            words += [(value >> (32 * k)) & 0xFFFFFFFF for k in range(4)]
        words += [int(state["has_uint32"]), int(state["uinteger"])]
        words += [initial & 0xFFFFFFFF, initial >> 32]
        return np.array(words, dtype=np.int64)

    def set_state_words(self, words: np.ndarray) -> None:
        ints = [int(w) for w in words]
        state = {
            "bit_generator": "PCG64",
            "state": {
                "state": sum(ints[k] << (32 * k) for k in range(4)),
                "inc": sum(ints[4 + k] << (32 * k) for k in range(4)),
            },
            "has_uint32": ints[8],
            "uinteger": ints[9],
        }
        rng = np.random.default_rng()
        rng.bit_generator.state = state
        with self.lock:
            self._rng = rng
            self.initial = ints[10] | (ints[11] << 32)
            self.epoch += 1


GENERATOR = _Generator()


def numpy_dtype(dtype: str) -> np.dtype:
    try:
        return _DTYPES[dtype]
    except KeyError:
        if dtype in _COMPLEX_DTYPES:
            COMPLEX_SEEN[0] = True
            return _COMPLEX_DTYPES[dtype]
        if dtype in ("bfloat16", "float16"):
            raise DTypeError(
                f"dtype {dtype!r} is not supported by NumpyBackend; use rg.TorchBackend for "
                "half-precision tensors"
            ) from None
        raise DTypeError(
            f"unknown dtype {dtype!r}: expected one of {', '.join(_NAMES.values())}"
        ) from None


def check_int64_range(array: np.ndarray) -> None:
    """Refuse values past int64's range about to become int64 (``tensor([2**63])``, a uint64
    array, ``tensor([1e30, nan], dtype="int64")``): a cast would wrap them to negative
    numbers, where torch refuses them ("cannot be converted to type int64 without overflow")."""
    kind = array.dtype.kind
    if not array.size or kind not in "ufO":
        return
    if kind == "O":  # Python ints past uint64's range too (np.array([-2**63 - 1]))
        ints = [v for v in array.ravel() if isinstance(v, int) and not isinstance(v, bool)]
        bad = np.array([v for v in ints if not -(2**63) <= v < 2**63], dtype=object)
    elif kind == "u":
        bad = array[array > np.iinfo(np.int64).max]
    else:  # 2**63 itself is out: the largest float64 below it is the last one that fits
        bad = array[~((array >= -(2.0**63)) & (array < 2.0**63))]
    if bad.size:
        first = bad.ravel()[0]
        first = first.item() if isinstance(first, np.generic) else first
        raise InvalidArgumentError(
            f"tensor: {first!r} is out of int64's range (retrograd's integer dtype)"
        )


def floats_of_big_ints(array: np.ndarray, dtype: str) -> np.ndarray:
    """An object array of Python ints past int64's range asked for as floats, as float64
    values (torch's ``tensor([2**70], dtype=float64)``); anything else as it is."""
    if array.dtype.kind != "O" or dtype not in ("float16", "bfloat16", "float32", "float64"):
        return array
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in array.flat):
        return array
    return array.astype(np.float64)


def _canonical(array: np.ndarray, data: Any) -> np.ndarray:
    """Map an array made from user data onto the host dtypes retrograd knows."""
    kind = array.dtype.kind
    if kind in "uO":  # unsigned ints but uint8 become int64 (floats stay floats); ints past
        check_int64_range(array)  # int64's range give an object array: named, not "dtype object"
    if kind == "b":
        return array
    if kind == "c":  # complex: a NumPy array keeps complex64/complex128, as torch.tensor's;
        COMPLEX_SEEN[0] = True
        # Python complex numbers take the default float dtype's complex dtype, as torch's
        if isinstance(data, np.ndarray | np.generic):
            return array if array.dtype == np.complex64 else array.astype(np.complex128)
        host = np.complex128 if default_float_dtype() == "float64" else np.complex64
        return array.astype(host, copy=False)
    if isinstance(data, np.ndarray | np.generic):
        if kind == "f":
            return array if array.dtype in (np.float32, np.float64) else array.astype(np.float32)
        if array.dtype in _KEPT_INTS:  # kept, as torch.from_numpy keeps them
            return array
        if kind in "iu":
            return array.astype(np.int64, copy=False)
    elif kind in "fiu":
        # Python floats and (nested lists of) numbers take the default float dtype (float32
        # unless rg.set_default_dtype changed it); under a half default, float32 here (the
        # host has no half type: the tensor API asks for the half dtype by name).
        default = default_float_dtype()
        host = np.float64 if default == "float64" else np.float32
        return array.astype(host, copy=False)
    raise DTypeError(f"tensor: cannot make a tensor from data of dtype {array.dtype}")


_SAME_SIZE_INT = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}
_SAME_SIZE_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}

#: ReLUs (and their gradients) of this many elements or more run compiled
#: (:mod:`.compiled_relu`); smaller ones stay NumPy's, so that a small model never loads Numba.
COMPILED_RELU_MIN_SIZE = 1 << 16


def _address(array: np.ndarray) -> int:
    """Where ``array``'s first element lies in memory, read from ``__array_interface__``. Not
    from ``array.ctypes.data``: NumPy makes a ctypes object at each read of ``.ctypes``, and
    objects of 56 B made there stayed traced on the reading line, more as reads went on (an
    attention's ``q @ k.transpose(-2, -1)`` of one ``qkv`` buffer, which ``matmul`` checks
    for a shared start: 2 KB more over 30 steps of a small model,
    ``tests/test_rel70_fixes.py``); the interface's dict goes with the read."""
    return array.__array_interface__["data"][0]


def _in_float64(ufunc, x):
    """``ufunc(x)``, a float32 ``x`` computed in float64 and rounded once."""
    if x.dtype == np.float32:
        return ufunc(x.astype(np.float64)).astype(np.float32)
    return ufunc(x)


def _remainder(x: Any, y: Any) -> Any:
    """torch's ``remainder``: ``fmod``, moved by ``y`` where its sign is not ``y``'s. A zero
    keeps ``fmod``'s sign, the dividend's (NumPy's ``remainder`` gives it the divisor's:
    ``0 % -2`` is ``-0.0`` there, ``+0.0`` in torch)."""
    out = np.remainder(x, y)
    if out.dtype.kind != "f":
        return out
    with np.errstate(invalid="ignore"):
        mod = np.fmod(x, y)
    return np.where(mod == 0, mod, out)


def _compiled_relu_arrays(arrays: list[np.ndarray]):
    """For the compiled ReLU loops: the module :mod:`.compiled_relu`, the flat views of
    ``arrays`` and of a result laid out as they are, and the result
    (:func:`.compiled_relu.dense_flat`), when they are float32 or float64 arrays of at least
    :data:`COMPILED_RELU_MIN_SIZE` elements lying densely in memory in one order; else
    ``None``."""
    first = arrays[0]
    if first.dtype not in (np.float32, np.float64) or first.size < COMPILED_RELU_MIN_SIZE:
        return None
    from . import compiled_relu

    dense = compiled_relu.dense_flat(arrays)
    return None if dense is None else (compiled_relu, *dense)


def _compiled_activation(name: str, x: np.ndarray) -> np.ndarray | None:
    """``name`` (``sigmoid``, ``silu``, ``tanh``) of ``x`` by its compiled loop
    (:mod:`.compiled_activations`), in ``x``'s memory order, when ``x`` is a float32 array of
    at least :data:`COMPILED_RELU_MIN_SIZE` elements lying densely in memory; else ``None``."""
    if x.dtype != np.float32 or x.size < COMPILED_RELU_MIN_SIZE:
        return None
    from . import compiled_activations
    from .compiled_relu import dense_flat

    dense = dense_flat([x])
    if dense is None:
        return None
    (flat, target), out = dense
    getattr(compiled_activations, f"{name}_flat")(flat, target)
    return out


_COMPILED_FMA = f"{__package__}.compiled_fma"


def _compiled_fused(
    kernel: str, arrays: list[np.ndarray], scalars: tuple, into: np.ndarray | None = None
) -> np.ndarray | None:
    """``kernel`` of :mod:`.compiled_fma` on ``arrays`` (then ``scalars``, taken in their dtype),
    when they are float32 or float64 arrays of one shape and dtype lying densely in memory in
    one order, of at least :data:`COMPILED_RELU_MIN_SIZE` elements or of any size once the
    module is loaded (one call there costs less than the emulation's dozen NumPy passes); else
    ``None`` (:mod:`.numpy_fma` then gives the same bits in NumPy passes). ``into``: written
    there (the first of ``arrays``, C-contiguous: each element is read before it is written)
    in place of a new array."""
    first = arrays[0]
    dtype, shape = first.dtype, first.shape
    if (
        (first.size < COMPILED_RELU_MIN_SIZE and _COMPILED_FMA not in sys.modules)
        or (dtype != np.float32 and dtype != np.float64)
        or not first.ndim  # (a 0-d primitive may be a NumPy scalar)
    ):
        return None
    for a in arrays:
        if a.shape != shape or a.dtype != dtype:
            return None
    from . import compiled_fma

    if all(a.flags.c_contiguous for a in arrays):  # (the common case, without dense_flat's sort)
        out = np.empty(shape, dtype) if into is None else into
        flats = [a.reshape(-1) for a in arrays]
        flats.append(out.reshape(-1))
    elif into is not None:
        return None
    else:
        from .compiled_relu import dense_flat

        dense = dense_flat(arrays)
        if dense is None:
            return None
        flats, out = dense
    scale = dtype.type
    getattr(compiled_fma, kernel)(*flats[:-1], *[scale(s) for s in scalars], flats[-1])
    return out


def _select_bits(x: np.ndarray, mask: np.ndarray, values: Any) -> np.ndarray | None:
    """``np.where(mask, values, x)`` computed on the bits, ``x ^ ((x ^ values) & -mask)``, or
    ``None`` where ``np.where`` should do it (small or non-numeric arrays).

    Integer bit operations select exactly (NaN payloads, infinities, signed zeros) and without
    branches: on a large array with an unpredictable mask, 2-3x faster than ``np.where``.
    """
    if x.dtype.kind not in "fiu" or x.size < 4096:
        return None
    mask = np.asarray(mask)
    values = np.asarray(values)
    if mask.dtype != np.bool_ or values.dtype != x.dtype:
        return None
    bits = _SAME_SIZE_INT[x.dtype.itemsize]
    x_bits, value_bits = x.view(bits), values.view(bits)
    if value_bits.ndim == 0 and value_bits == 0:  # fill with zero bits: x & (mask - 1)
        keep = np.subtract(mask.view(np.int8), 1, dtype=bits)
        return np.bitwise_and(x_bits, keep, out=keep if keep.shape == x.shape else None).view(
            x.dtype
        )
    select = np.negative(mask.view(np.int8), dtype=bits)  # all ones where the mask is set
    out = np.bitwise_and(np.bitwise_xor(x_bits, value_bits), select)
    return np.bitwise_xor(x_bits, out, out=out).view(x.dtype)


def _window_index(dim: int, ndim: int, index: Any) -> tuple:
    return (slice(None),) * dim + (index,) + (slice(None),) * (ndim - dim - 1)


def _stable_argsort(x: np.ndarray, dim: int, descending: bool) -> np.ndarray:
    if not descending:
        return np.argsort(x, axis=dim, kind="stable")
    # Sorting the reversed array stably and reversing again keeps ties in their original order.
    reversed_order = np.argsort(np.flip(x, axis=dim), axis=dim, kind="stable")
    return (x.shape[dim] - 1) - np.flip(reversed_order, axis=dim)


def _topk_ties_as_torch(
    x: np.ndarray, order: np.ndarray, k: int, dim: int, largest: bool, ordered: bool
) -> np.ndarray:
    """The first ``k`` of ``order`` (a stable sort along ``dim``, largest first when
    ``largest``), with the rows where it is not the only answer replaced by torch's CPU
    ``topk``'s: the rows where ties meet in the first ``k + 1`` sorted values, and every row
    when ``ordered`` is false and torch's ``nth_element`` path leaves the first ``k`` in its
    own order. Those rows replay torch's libstdc++ calls (``TopKImpl.h``) on the host."""
    n = x.shape[dim]
    chosen = order[_window_index(dim, x.ndim, slice(0, k))]
    if k == 0 or n < 2:
        return chosen
    rows = np.moveaxis(x, dim, -1).reshape(-1, n)
    ranked = np.take_along_axis(rows, np.moveaxis(order, dim, -1).reshape(-1, n), axis=1)
    uses_partial_sort = k * 64 <= n
    if not ordered and not uses_partial_sort and k >= 2:
        redo = np.ones(rows.shape[0], bool)
    else:
        span = ranked[:, : min(k + 1, n)]
        same = span[:, 1:] == span[:, :-1]
        if span.dtype.kind in "fc":
            same |= np.isnan(span[:, 1:]) & np.isnan(span[:, :-1])
        redo = same.any(axis=1)
    if not redo.any():
        return chosen
    picked = np.moveaxis(chosen, dim, -1).reshape(-1, k).copy()
    if largest:  # torch's comparators: NaN counts as the largest value either way

        def before(a: tuple, b: tuple) -> bool:
            return (a[0] != a[0] and b[0] == b[0]) or a[0] > b[0]

    else:

        def before(a: tuple, b: tuple) -> bool:
            return (a[0] == a[0] and b[0] != b[0]) or a[0] < b[0]

    for r in np.flatnonzero(redo):
        items = list(zip(rows[r].tolist(), range(n)))
        if uses_partial_sort:
            std_partial_sort(items, 0, k, n, before)
        else:
            std_nth_element(items, 0, k - 1, n, before)
            if ordered:
                std_sort(items, 0, k - 1, before)
        picked[r] = [position for _, position in items[:k]]
    shape = np.moveaxis(chosen, dim, -1).shape
    return np.ascontiguousarray(np.moveaxis(picked.reshape(shape), -1, dim))


def _scatter_index(indices: np.ndarray, dim: int) -> tuple:
    grid = list(np.ogrid[tuple(slice(0, n) for n in indices.shape)])
    grid[dim] = indices
    return tuple(grid)


def _cumulative_extreme(x: np.ndarray, dim: int, ufunc: np.ufunc) -> tuple[Any, Any]:
    values = ufunc.accumulate(x, axis=dim)
    positions = np.arange(x.shape[dim]).reshape((-1,) + (1,) * (x.ndim - dim - 1))
    # The latest position where x reaches the running extreme, as PyTorch reports it (a NaN
    # reaches a NaN extreme: the latest NaN so far).
    reached = x == values
    if x.dtype.kind == "f":
        reached |= np.isnan(x) & np.isnan(values)
    candidates = np.where(reached, positions, 0)
    return values, np.maximum.accumulate(candidates, axis=dim)


#: ``select_reduce``'s reductions: NumPy's ufuncs (``maximum``/``minimum`` propagate NaN)
_SELECT_REDUCTIONS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def _hermitian_where_self_conjugate(half: np.ndarray, dims: tuple, n: int) -> np.ndarray:
    """``rfftn``'s one-sided spectrum ``half`` of a real signal (``n`` entries along the last
    of ``dims``) made exactly Hermitian over the other dims where its last index is its own
    mirror (frequency 0, and ``n / 2`` for an even ``n``): ``X[-k] = conj(X[k])`` there, and
    exactly real where ``k = -k`` (frequency 0 or a half length along every dim). torch's
    kernels give both exactly; pocketfft's complex passes over the other dims round them (an
    imaginary part of about 1e-16 where it is 0, whose ``angle`` is +-pi or 1e-16, not 0
    or pi). Each such entry becomes the mean of itself and its mirror's conjugate: a change
    of at most a rounding, exactly symmetric (the two means add the same two numbers)."""
    last = dims[-1]
    for index in (0, n // 2) if n % 2 == 0 and n > 1 else (0,):
        at = [slice(None)] * half.ndim
        at[last] = slice(index, index + 1)
        plane = half[tuple(at)]
        mirror = plane
        for d in dims[:-1]:  # index k along another dim -> -k modulo its size
            mirror = np.roll(np.flip(mirror, d), 1, d)
        half[tuple(at)] = (plane + np.conjugate(mirror)) / 2
    return half


def _complex_power_of_zero(x, y, out):
    """``out`` (NumPy's complex ``x ** y``) with torch's value where ``x`` is 0: its kernel's
    ``exp(y * log(x))``, ``log(0)`` being ``-inf``, is ``inf + nan j`` for ``Re(y) < 0``
    (NumPy's ``nan + nan j``), 0 for ``Re(y) > 0`` and ``nan + nan j`` for ``Re(y) == 0``
    (an exponent tensor of zeros too: NumPy's 1)."""
    zero = x == 0
    if not np.any(zero):
        return out
    re = np.real(y)
    at_zero = np.where(
        re < 0, complex(np.inf, np.nan), np.where(re > 0, 0j, complex(np.nan, np.nan))
    )
    return np.where(zero, at_zero, out).astype(out.dtype, copy=False)


class NumpyBackend(
    NumpyMathKernels,
    NumpyNNKernels,
    NumpyTransformerKernels,
    NumpyRecurrentKernels,
    NumpyOptimizerKernels,
    Backend,
):
    """CPU tensors as NumPy arrays; the embedded default inner backend.

    >>> b = NumpyBackend()
    >>> b.add(b.from_data([1.0, 2.0], None, None), b.ones((2,), "float32", None)).tolist()
    [2.0, 3.0]
    """

    name = "numpy"

    def __repr__(self) -> str:
        return "NumpyBackend()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NumpyBackend)

    def __hash__(self) -> int:
        return hash(NumpyBackend)

    # -- data, creation, metadata -------------------------------------------------------------
    def from_data(self, data, dtype, device):
        numpy_data = isinstance(data, np.ndarray | np.generic)
        if numpy_data:
            array = np.array(data, copy=True)
        elif hasattr(data, "__array__"):
            # another library's array (a torch tensor): read without asking its __array__ for
            # NumPy 2's copy= keyword, which older implementations lack, then copied
            array = np.array(np.asarray(data), copy=True)
        else:
            array = np.array(data)
        if dtype is not None:
            array = floats_of_big_ints(array, dtype)
            if array.dtype.kind == "c" and dtype == "bool":
                return array != 0  # torch's: true where either part is nonzero (1j too)
            if array.dtype.kind == "c" and dtype not in COMPLEX_DTYPES and numpy_data:
                array = array.real  # torch casts a NumPy array: its real part (a cast's)
            if array.dtype.kind == "c" and dtype not in COMPLEX_DTYPES:
                raise DTypeError(
                    f"tensor: complex data cannot make a {dtype} tensor (torch refuses "
                    "complex numbers there); take .real or .abs() of it first"
                )
            if array.dtype.kind not in "biufc":
                check_int64_range(array)
                raise DTypeError(f"tensor: cannot make a tensor from data of dtype {array.dtype}")
            if dtype == "int64":
                check_int64_range(array)
            return array.astype(numpy_dtype(dtype), copy=False)
        return _canonical(array, data)

    def to_numpy(self, x):
        return np.asarray(x)

    def copy_value(self, x):
        return x.copy()

    def shape(self, x):
        return x.shape

    def dtype(self, x):
        # A dict lookup: NumPy's ``dtype.name`` is a slow Python-level property.
        return _NAMES[x.dtype]

    def same_dtype(self, x, y):
        return x.dtype is y.dtype or x.dtype == y.dtype

    def has_dtype(self, dtype):
        return dtype in _DTYPES or dtype in _COMPLEX_DTYPES  # (no bfloat16, no float16)

    def device(self, x):
        return None

    def zeros(self, shape, dtype, device):
        return np.zeros(shape, numpy_dtype(dtype))

    def ones(self, shape, dtype, device):
        return np.ones(shape, numpy_dtype(dtype))

    def full(self, shape, value, dtype, device):
        return np.full(shape, value, numpy_dtype(dtype))

    def zeros_like(self, x):
        return np.zeros(x.shape, x.dtype)

    def ones_like(self, x):
        return np.ones(x.shape, x.dtype)

    def eye(self, n, m, dtype, device):
        return np.eye(n, m, dtype=numpy_dtype(dtype))

    def arange(self, start, end, step, dtype, device):
        return np.arange(start, end, step, dtype=numpy_dtype(dtype))

    def random(self, shape, distribution, dtype, device):
        if dtype in COMPLEX_DTYPES:
            return complex_draws(self, shape, distribution, dtype, device)
        np_dtype = numpy_dtype(dtype)
        with GENERATOR.lock:
            if distribution == "uniform":
                return GENERATOR.rng.random(shape, dtype=np_dtype)
            return GENERATOR.rng.standard_normal(shape, dtype=np_dtype)

    def bernoulli(self, shape, p, device):
        with GENERATOR.lock:
            return GENERATOR.rng.random(shape) < p

    def seed(self, seed):
        GENERATOR.reseed(seed)

    def rng_state(self):
        return GENERATOR.state_words()

    def set_rng_state(self, words):
        GENERATOR.set_state_words(words)

    def cast(self, x, dtype):
        x = np.asarray(x)
        if x.dtype.kind == "c" and dtype == "bool":
            return x != 0  # torch's: true where either part is nonzero (1j too)
        if x.dtype.kind == "c" and dtype not in COMPLEX_DTYPES:
            return x.real.astype(numpy_dtype(dtype))  # torch's cast keeps the real part
        return x.astype(numpy_dtype(dtype))

    def bitcast(self, x, dtype):
        return np.array(x, order="C").view(numpy_dtype(dtype))

    def to_device(self, x, device):
        return x

    def detach(self, x):
        return x  # (a plain value has no graph)

    def any(self, x):
        return bool(np.any(x))

    def check_index_range(self, indices, size, message, ignore=None):
        if not indices.size or (indices.min() >= 0 and indices.max() < size):
            return
        bad = (indices < 0) | (indices >= size)
        if ignore is not None:
            bad &= indices != ignore
        if bad.any():
            raise index_error(message(int(indices[bad].flat[0])))

    @staticmethod
    def arithmetic_warnings_ignored():
        return np.errstate(all="ignore")

    def error_class(self, error):
        if isinstance(error, MemoryError):  # NumPy's allocation of a result no machine holds
            return OutOfMemoryError
        if isinstance(error, IndexError):
            return IndexOutOfRangeError
        if isinstance(error, TypeError):
            return DTypeError
        if isinstance(error, ValueError):
            # (operands that do not broadcast together: torch's RuntimeError "The size of
            # tensor a (2) must match the size of tensor b (3)")
            return SizeMismatchError if "could not be broadcast" in str(error) else ShapeError
        return None

    # -- complex numbers -----------------------------------------------------------------------
    def real(self, x):
        return np.real(x).copy()

    def imag(self, x):
        return np.imag(x).copy()

    conj = staticmethod(np.conjugate)

    def complex(self, re, im):
        COMPLEX_SEEN[0] = True
        out = np.empty(np.broadcast_shapes(re.shape, im.shape), _COMPLEX_OF[re.dtype])
        out.real, out.imag = re, im
        return out

    def fftn(self, x, dims, inverse, norm):
        if not dims:
            return x.copy()
        # one dim at a time, as NumPy's fftn (its last dim first): a signal that is real at
        # the start, or becomes real after a pass (a dim of one entry, zero-padded: its
        # transform is that entry repeated), takes the exact real-input path for the rest
        transform = np.fft.ifft if inverse else np.fft.fft
        while dims:
            if not np.any(x.imag):
                return self._fftn_of_real(np.real(x), dims, inverse, norm)
            x = transform(x, axis=dims[-1], norm=norm).astype(x.dtype, copy=False)
            dims = dims[:-1]
        return x

    def _fftn_of_real(self, x, dims, inverse, norm):
        """The complex transform of a signal whose imaginary parts are all zero (``fft2`` and
        ``fftn`` of a real tensor, which torch takes as complex): torch's complex kernel gives
        such a signal a spectrum that is exactly Hermitian (``X[-k mod n] = conj(X[k])`` over
        every transformed dim, exactly real at frequency 0 and ``n / 2``), where pocketfft's
        complex one rounds the imaginary parts there to about 1e-16 (and ``angle`` jumped by
        2 pi). So: the real-input :meth:`rfftn`, completed by that symmetry along the last dim,
        and for an inverse conjugated (``ifft`` of a real signal is the conjugate of its
        forward transform scaled as the inverse)."""
        scaling = (
            {"backward": "forward", "forward": "backward"}.get(norm, norm) if inverse else norm
        )
        half = self.rfftn(x, dims, scaling)
        last, n = dims[-1], x.shape[dims[-1]]
        count = n - n // 2 - 1  # the bins n // 2 + 1 .. n - 1, conjugates of count .. 1
        if count > 0:
            mirrored = np.take(half, np.arange(count, 0, -1), axis=last)
            for d in dims[:-1]:  # index k along another dim -> -k modulo its size
                mirrored = np.roll(np.flip(mirrored, d), 1, d)
            half = np.concatenate([half, np.conjugate(mirrored)], axis=last)
        if not inverse:
            return half
        out = np.conjugate(half)
        out.imag += 0.0  # (torch's complex kernel gives +0.0 at the real bins, whose angle is 0
        return out  # or pi: the conjugate's -0.0 made -pi of pi)

    def rfftn(self, x, dims, norm):
        out = np.fft.rfft(x, axis=dims[-1], norm=norm).astype(_COMPLEX_OF[x.dtype], copy=False)
        out = self.fftn(out, dims[:-1], False, norm)  # (the passes NumPy's rfftn makes)
        return _hermitian_where_self_conjugate(out, dims, x.shape[dims[-1]])

    # -- elementwise binary -------------------------------------------------------------------
    add = staticmethod(np.add)
    sub = staticmethod(np.subtract)
    mul = staticmethod(np.multiply)
    div = staticmethod(np.true_divide)

    def pow(self, x, y):
        out = np.power(x, y)
        if out.dtype.kind == "c":
            return _complex_power_of_zero(x, y, out)
        exponent = np.asarray(y)
        seen_as_scalar = exponent.ndim == 0 or exponent.size < out.size or 0 in exponent.strides
        if np.asarray(x).dtype.kind == "f" and seen_as_scalar and np.any(exponent == 0.5):
            # NumPy takes sqrt for an exponent of 0.5 that its loop sees as a scalar (a 0-d or
            # broadcast one), so -0.0 and -inf give -0.0 and NaN; torch's pow with a tensor
            # exponent is IEEE pow's, 0.0 and inf (a scalar exponent is pow_scalar's sqrt).
            # A full exponent array already gets IEEE pow: nothing to scan.
            fix = (y == 0.5) & ((x == 0.0) | (x == -np.inf)) & np.signbit(x)
            if fix.any():
                out = np.where(fix, np.abs(x).astype(out.dtype), out)
        return out

    remainder = staticmethod(_remainder)
    atan2 = staticmethod(np.arctan2)
    hypot = staticmethod(np.hypot)

    # torch's fused kernels, bit for bit: one rounding where torch's has its fused multiply-add
    def lerp(self, x, end, weight):
        if isinstance(weight, np.ndarray | np.generic):
            out = _compiled_fused("lerp_flat", [x, end, weight], ())
        else:
            out = _compiled_fused("lerp_scalar_flat", [x, end], (weight,))
        return numpy_fma.lerp(x, end, weight) if out is None else out

    def add_scaled(self, x, y, alpha):
        out = _compiled_fused("add_scaled_flat", [x, y], (alpha,))
        return numpy_fma.add_scaled(x, y, alpha) if out is None else out

    def add_scaled_into(self, x, y, alpha):
        """:meth:`add_scaled` written into ``x`` (``write_into``'s ``add_``/``sub_`` with
        ``alpha``): one compiled pass where the loop applies, else the NumPy emulation's
        result copied in."""
        if _compiled_fused("add_scaled_flat", [x, y], (alpha,), into=x) is None:
            np.copyto(x, numpy_fma.add_scaled(x, y, alpha))
        return x

    def addcmul(self, x, t1, t2, value):
        out = _compiled_fused("addcmul_flat", [x, t1, t2], (value,))
        return numpy_fma.addcmul(x, t1, t2, value) if out is None else out

    add_scalar = staticmethod(np.add)
    sub_scalar = staticmethod(np.subtract)
    mul_scalar = staticmethod(np.multiply)
    div_scalar = staticmethod(np.true_divide)
    remainder_scalar = staticmethod(_remainder)

    def rsub_scalar(self, x, s):
        return np.subtract(s, x)

    def rdiv_scalar(self, x, s):
        return np.true_divide(s, x)

    def pow_scalar(self, x, s):
        if s == -0.5 and x.dtype.kind == "f":
            # torch computes x ** -0.5 as rsqrt (NumPy's x ** 0.5 is already sqrt): -0.0 gives
            # -inf and -inf NaN, where IEEE pow gives inf and 0
            return np.reciprocal(np.sqrt(x))
        out = np.power(x, s)
        if out.dtype.kind == "c" and s != 0:  # (a number exponent 0 gives 1, as torch's)
            return _complex_power_of_zero(x, s, out)
        return out

    def rpow_scalar(self, x, s):
        return np.power(s, x)

    def rremainder_scalar(self, x, s):
        return _remainder(s, x)

    # -- elementwise unary --------------------------------------------------------------------
    neg = staticmethod(np.negative)
    abs = staticmethod(np.abs)
    exp = staticmethod(np.exp)
    expm1 = staticmethod(np.expm1)
    log = staticmethod(np.log)
    log1p = staticmethod(np.log1p)

    # NumPy's float32 log2/log10/exp2 are not rounded correctly (its log10 of 100 is 2.0000002):
    # computed in float64 and rounded once, they are torch's in all but ~0.1% of draws
    def log2(self, x):
        return _in_float64(np.log2, x)

    def log10(self, x):
        return _in_float64(np.log10, x)

    def exp2(self, x):
        return _in_float64(np.exp2, x)

    sqrt = staticmethod(np.sqrt)
    square = staticmethod(np.square)

    def recip(self, x):
        out = np.reciprocal(x)
        if out.dtype.kind == "c":  # torch's 1 / 0 is inf + nan j (NumPy's nan + nan j)
            return _complex_power_of_zero(x, -1.0, out)
        return out

    sin = staticmethod(np.sin)
    cos = staticmethod(np.cos)
    tan = staticmethod(np.tan)
    sinh = staticmethod(np.sinh)
    cosh = staticmethod(np.cosh)

    def tanh(self, x):
        out = _compiled_activation("tanh", x)
        if out is not None:  # one pass (compiled_activations)
            return out
        return np.tanh(x)

    asin = staticmethod(np.arcsin)
    acos = staticmethod(np.arccos)
    atan = staticmethod(np.arctan)
    asinh = staticmethod(np.arcsinh)
    acosh = staticmethod(np.arccosh)
    atanh = staticmethod(np.arctanh)
    sign = staticmethod(np.sign)
    round = staticmethod(np.round)
    floor = staticmethod(np.floor)
    ceil = staticmethod(np.ceil)
    trunc = staticmethod(np.trunc)

    def erf(self, x):
        return special.erf(x)

    def sigmoid(self, x):
        out = _compiled_activation("sigmoid", x)
        if out is not None:  # one pass (compiled_activations)
            return out
        if x.dtype.kind == "c":  # (no overflow-safe split by sign for complex numbers)
            return 1.0 / (1.0 + np.exp(-x))
        tail = np.exp(-np.abs(x))
        return np.where(x >= 0, 1.0 / (1.0 + tail), tail / (1.0 + tail)).astype(x.dtype, copy=False)

    def log_sigmoid(self, x):
        return np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))

    def softplus(self, x, beta):
        scaled = x * beta if beta != 1 else x
        out = np.maximum(scaled, 0) + np.log1p(np.exp(-np.abs(scaled)))
        return out / beta if beta != 1 else out

    def relu(self, x):
        dense = _compiled_relu_arrays([x])
        if dense is not None:  # one pass, the same bits (compiled_relu)
            kernels, (flat, result_flat), result = dense
            kernels.relu_flat(flat, result_flat)
            return result
        # (not np.maximum(x, 0), which makes -0.0 +0.0: torch's relu keeps -0.0)
        return np.where(x < 0, np.zeros((), x.dtype), x)

    def relu_backward(self, grad, out):
        # grad's bits times 0 or 1 in unsigned integers: exact selection (a zero is +0.0,
        # whatever grad holds), a quarter faster than masking, keeping grad's layout
        if grad.dtype.kind != "f" or out.shape != grad.shape or not grad.ndim:
            return super().relu_backward(grad, out)  # (0-d values may be NumPy scalars)
        dense = _compiled_relu_arrays([grad, out]) if out.dtype == grad.dtype else None
        if dense is not None:  # one pass, the same bits (compiled_relu)
            kernels, (grad_flat, out_flat, result_flat), result = dense
            kernels.relu_backward_flat(grad_flat, out_flat, result_flat)
            return result
        bits = _SAME_SIZE_UINT[grad.itemsize]
        keep = np.less_equal(out, 0)  # not "greater": a NaN output keeps its gradient
        np.logical_not(keep, out=keep)
        result = np.empty_like(grad)
        np.multiply(
            grad.view(bits),
            keep.view(np.uint8),
            out=result.view(bits),
            dtype=bits,
            casting="unsafe",
        )
        return result

    def leaky_relu(self, x, slope):
        return np.where(x > 0, x, x * slope)

    def gelu(self, x):
        return special.gelu(x)

    def silu(self, x):
        out = _compiled_activation("silu", x)
        if out is not None:  # one pass (compiled_activations)
            return out
        return x * self.sigmoid(x)

    def clamp(self, x, lo, hi):
        if lo is None and hi is None:
            return x
        if x.dtype.kind == "f":
            # torch's min(max(x, lo), hi) keeps x at a tie of zeros (clamp(-0.0, min=0) is
            # -0.0); np.clip, as np.maximum(x, lo), takes the bound. NumPy's binary max/min
            # return their second operand at a tie, so the bound goes first.
            out = x if lo is None else np.asarray(np.maximum(x.dtype.type(lo), x))
            if hi is not None:
                out = np.asarray(np.minimum(x.dtype.type(hi), out))
            return out
        return np.clip(x, lo, hi)

    # -- comparisons and logic ----------------------------------------------------------------
    equal = equal_elem = staticmethod(np.equal)
    not_equal = not_equal_elem = staticmethod(np.not_equal)
    greater = greater_elem = staticmethod(np.greater)
    greater_equal = greater_equal_elem = staticmethod(np.greater_equal)
    lower = lower_elem = staticmethod(np.less)
    lower_equal = lower_equal_elem = staticmethod(np.less_equal)
    is_nan = staticmethod(np.isnan)
    is_inf = staticmethod(np.isinf)
    logical_not = staticmethod(np.logical_not)
    logical_and = staticmethod(np.logical_and)
    logical_or = staticmethod(np.logical_or)

    # -- selection ----------------------------------------------------------------------------
    def mask_where(self, x, mask, values):
        out = _select_bits(x, mask, values)
        return np.where(mask, values, x) if out is None else out

    def mask_fill(self, x, mask, value):
        fill = x.dtype.type(value)
        out = _select_bits(x, mask, fill)
        return np.where(mask, fill, x) if out is None else out

    # -- reductions ---------------------------------------------------------------------------
    def vector_norm(self, x, order, dims):
        # torch's CPU norm kernel (one thread): |x|^order in x's dtype (powf for float32),
        # accumulated left to right in x's dtype over the reduced entries in memory order,
        # then the power 1 / order, that quotient rounded to the dtype. np.sum's pairwise
        # order, not torch's, left 164.38943 where torch gives 164.38950 (a 1-norm of 210
        # float32 entries); an accumulate is strictly sequential.
        kept = [d for d in range(x.ndim) if d not in dims]
        count = int(np.prod([x.shape[d] for d in dims]))
        rows = np.transpose(x, kept + list(dims)).reshape(-1, count) if count else None
        scalar = x.dtype.type
        if count == 1:  # torch's kernel: |x| itself, no power and no root (exact at extremes)
            return np.abs(x)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            if count:
                magnitude = np.abs(rows)
                terms = magnitude if order == 1.0 else np.power(magnitude, scalar(order))
                total = np.add.accumulate(terms, axis=1, dtype=x.dtype)[:, -1]
            else:
                total = np.zeros(int(np.prod([x.shape[d] for d in kept])), x.dtype)
            out = total if order == 1.0 else np.power(total, scalar(1) / scalar(order))
        return out.reshape(tuple(1 if d in dims else n for d, n in enumerate(x.shape)))

    def sum(self, x):
        # what np.sum calls, without its Python-level argument handling (the same reduction)
        return np.add.reduce(x, axis=None, dtype=_WIDENED.get(x.dtype))

    def sum_dim(self, x, dims):
        if _leading_column_sum(x, dims):
            rows = x.reshape(-1, int(np.prod(x.shape[len(dims) :])))
            total = np.matmul(np.ones(rows.shape[0], x.dtype), rows)
            return total.reshape((1,) * len(dims) + x.shape[len(dims) :])
        return np.sum(x, axis=dims, keepdims=True, dtype=_WIDENED.get(x.dtype))

    def mean(self, x):
        if x.size == 0:  # NaN, as torch, without NumPy's "mean of empty slice" warnings
            return np.full((), np.nan, dtype=x.dtype)
        return np.mean(x)

    def mean_dim(self, x, dims):
        if x.size == 0:
            shape = tuple(1 if d in dims else n for d, n in enumerate(x.shape))
            return np.full(shape, np.nan, dtype=x.dtype)
        return np.mean(x, axis=dims, keepdims=True)

    def prod(self, x):
        return np.prod(x, dtype=_WIDENED.get(x.dtype))

    def prod_dim(self, x, dim):
        return np.prod(x, axis=dim, keepdims=True, dtype=_WIDENED.get(x.dtype))

    def max(self, x):
        return np.max(x)

    def min(self, x):
        return np.min(x)

    def max_dim(self, x, dim):
        indices = np.argmax(x, axis=dim, keepdims=True)
        return np.take_along_axis(x, indices, axis=dim), indices

    def min_dim(self, x, dim):
        indices = np.argmin(x, axis=dim, keepdims=True)
        return np.take_along_axis(x, indices, axis=dim), indices

    def argmax(self, x, dim):
        return np.argmax(x, axis=dim, keepdims=True)

    def argmin(self, x, dim):
        return np.argmin(x, axis=dim, keepdims=True)

    # -- cumulative, sorting ------------------------------------------------------------------
    def cumsum(self, x, dim):
        if x.dtype in _RUNNING_ACCUMULATOR:
            wide = np.cumsum(x, axis=dim, dtype=_RUNNING_ACCUMULATOR[x.dtype])
            out = wide.astype(x.dtype, copy=False)
            if out.dtype.kind in "fc":  # (as below)
                out += 0.0
            return out
        out = np.cumsum(
            x, axis=dim, dtype=x.dtype if x.dtype.kind in "fc" else _WIDENED.get(x.dtype)
        )
        if out.dtype.kind in "fc":  # torch's running sums start from +0.0: never -0.0
            out += 0.0
        return out

    def cumprod(self, x, dim):
        if x.dtype in _RUNNING_ACCUMULATOR:
            wide = np.cumprod(x, axis=dim, dtype=_RUNNING_ACCUMULATOR[x.dtype])
            return wide.astype(x.dtype, copy=False)
        return np.cumprod(
            x, axis=dim, dtype=x.dtype if x.dtype.kind in "fc" else _WIDENED.get(x.dtype)
        )

    def cummax(self, x, dim):
        return _cumulative_extreme(x, dim, np.maximum)

    def cummin(self, x, dim):
        return _cumulative_extreme(x, dim, np.minimum)

    def logcumsumexp(self, x, dim):
        # a sequential scan of logaddexp in float64, as torch's CPU kernel runs it (its
        # accumulator type for float32 is double)
        wide = x.astype(np.float64) if x.dtype == np.float32 else x
        out = np.logaddexp.accumulate(wide, axis=dim).astype(x.dtype, copy=False)
        out += 0.0  # (torch's scan starts from -inf: a leading -0.0 comes out +0.0)
        return out

    def sort(self, x, dim, descending):
        indices = _stable_argsort(x, dim, descending)
        return np.take_along_axis(x, indices, axis=dim), indices

    def topk(self, x, k, dim, largest=True, sorted=True):  # noqa: A002 (torch's name)
        indices = _stable_argsort(x, dim, largest)
        indices = _topk_ties_as_torch(x, indices, k, dim, largest, sorted)
        return np.take_along_axis(x, indices, axis=dim), indices

    # -- shape --------------------------------------------------------------------------------
    def reshape(self, x, shape):
        return np.reshape(x, shape)

    def permute(self, x, dims):
        return np.transpose(x, dims)

    def swap_dims(self, x, a, b):
        return np.swapaxes(x, a, b)

    def flip(self, x, dims):
        return np.flip(x, axis=dims)

    def expand(self, x, shape):
        return np.broadcast_to(x, shape)

    def slice(self, x, slices):
        return x[slices]

    def slice_assign(self, x, values, slices):
        out = np.array(x, copy=True)
        out[slices] = values
        return out

    def slice_backward(self, grad, shape, slices):
        out = np.zeros(shape, grad.dtype)
        out[slices] = grad
        return out

    # the engine's own gradient sums (see the protocol): added into in place
    def slice_accumulate(self, acc, grad, slices):
        if not _addable_into(acc, grad):
            return np.add(acc, self.slice_backward(grad, np.shape(acc), slices))
        acc[slices] += grad
        return acc

    def accumulate(self, acc, value):
        if not _addable_into(acc, value) or np.shape(value) != acc.shape:
            return np.add(acc, value)
        return np.add(acc, value, out=acc)

    def cat(self, xs, dim):
        return np.concatenate(xs, axis=dim)

    def repeat_dim(self, x, dim, times):
        reps = [1] * x.ndim
        reps[dim] = times
        return np.tile(x, reps)

    def unfold(self, x, dim, size, step):
        windows = sliding_window_view(x, size, axis=dim)
        return windows[_window_index(dim, windows.ndim, slice(None, None, step))]

    def fold(self, x, dim, size, step, length):
        count = x.shape[dim]
        shape = list(x.shape[:-1])
        shape[dim] = length
        out = np.zeros(shape, x.dtype)
        for k in range(size):
            target = _window_index(dim, out.ndim, slice(k, k + step * (count - 1) + 1, step))
            out[target] += x[..., k]
        return out

    # -- indexing -----------------------------------------------------------------------------
    def gather(self, x, indices, dim):
        if indices.shape != x.shape:
            # PyTorch's gather reads only the index-shaped corner of the other dimensions.
            corner = tuple(
                slice(None) if d == dim else slice(0, n) for d, n in enumerate(indices.shape)
            )
            x = x[corner]
        return np.take_along_axis(x, indices, axis=dim)

    def scatter_add(self, x, indices, values, dim):
        out = np.array(x, copy=True)
        np.add.at(out, _scatter_index(indices, dim), values)
        return out

    def gather_backward(self, grad, indices, dim, shape):
        out = np.zeros(shape, grad.dtype)
        np.add.at(out, _scatter_index(indices, dim), grad)
        return out

    def scatter_assign(self, x, indices, values, dim):
        out = np.array(x, copy=True)
        out[_scatter_index(indices, dim)] = values
        return out

    def select(self, x, indices, dim):
        return np.take(x, indices, axis=dim)

    def select_add(self, x, indices, values, dim):
        out = np.array(x, copy=True)
        if indices.ndim != 1 or indices.size < 64 or values.dtype != out.dtype:
            np.add.at(out, _window_index(dim, out.ndim, indices), values)
            return out
        # An embedding's gradient: np.add.at goes row by row (3 ms for 2048 rows of 128);
        # sorting the indices and summing each run of equal ones with reduceat is ~4x faster,
        # and the compiled loop giving reduceat's bits ~9x more (compiled_index).
        rows = np.where(indices < 0, indices + out.shape[dim], indices)
        if _compiled_index_add(out, rows, values, dim):
            from .compiled_index import index_add_rows

            if index_add_rows(out, rows, values, values.dtype.type(-0.0)):
                return out
        order = np.argsort(rows, kind="stable")
        ranked = rows[order]
        starts = np.flatnonzero(np.concatenate(([True], ranked[1:] != ranked[:-1])))
        sums = np.add.reduceat(np.take(values, order, axis=dim), starts, axis=dim)
        out[_window_index(dim, out.ndim, ranked[starts])] += sums
        return out

    def select_assign(self, x, indices, values, dim):
        out = np.array(x, copy=True)
        out[_window_index(dim, out.ndim, indices)] = values
        return out

    def select_reduce(self, x, indices, values, dim, reduce):
        out = np.array(x, copy=True)
        combine = _SELECT_REDUCTIONS[reduce]
        if out.dtype == np.bool_ and reduce == "prod":
            combine = np.logical_and
        with np.errstate(invalid="ignore", over="ignore"):  # NaN wins, as in torch's
            combine.at(out, _window_index(dim, out.ndim, indices), values)
        return out

    def nonzero(self, x):
        return tuple(index.astype(np.int64, copy=False) for index in np.nonzero(x))

    # -- linear algebra and fused activations -------------------------------------------------
    @staticmethod
    def matmul(x, y):
        # NumPy hands a product of one buffer by its own transpose (``q @ q.swapaxes(-1, -2)``)
        # to BLAS's syrk, whose bits differ from gemm's: the product would then depend on
        # whether its operands share memory, and a recomputed operand does not (checkpointing
        # recomputes ``q`` into a new buffer while a kept transposed view still reads the
        # old one), so gradients would differ from NoCheckpointing's in the last bits. Such a
        # pair runs as any other product.
        x_base, y_base = getattr(x, "base", None), getattr(y, "base", None)
        one_buffer = y_base is x or x_base is y or (x_base is not None and x_base is y_base)
        if one_buffer and _address(x) == _address(y):
            y = y.copy()
        return np.matmul(x, y)

    def sparse_coo_mm(self, rows, cols, values, dense, num_rows):
        if dense.dtype in (np.float32, np.float64) and values.dtype == dense.dtype:
            from scipy import sparse  # its CSR kernel sums each row in one pass

            matrix = sparse.csr_matrix((values, (rows, cols)), shape=(num_rows, dense.shape[0]))
            return np.asarray(matrix @ dense, dtype=dense.dtype)
        out = np.zeros((num_rows, dense.shape[1]), dtype=dense.dtype)
        np.add.at(out, rows, values[:, None] * dense[cols])
        return out

    def cross(self, x, y, dim):
        return np.cross(x, y, axis=dim)

    def inverse(self, x):
        try:
            return np.linalg.inv(x)
        except np.linalg.LinAlgError:
            raise singular_matrix("inverse", x.shape) from None

    def pinv(self, x, atol, rtol):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        largest = s.max(axis=-1, keepdims=True) if s.shape[-1] else s
        kept = s > np.maximum(atol, rtol * largest)
        s_inv = np.divide(1.0, s, out=np.zeros_like(s), where=kept)
        # conjugate transposes: V diag(1/s) U^H
        v, uh = np.swapaxes(vh, -1, -2).conj(), np.swapaxes(u, -1, -2).conj()
        return np.matmul(v * s_inv[..., None, :], uh)

    # The last dimension of large float32 arrays runs compiled, a row at a time in cache
    # (:mod:`.compiled_softmax`); the rest in NumPy passes over arrays made here.
    def softmax(self, x, dim):
        if x.size == 0:  # nothing to normalise (np.max of an empty axis raises)
            return x.copy()
        if _compiled_softmax(dim, x):
            from .compiled_softmax import softmax_rows

            out = np.empty(x.shape, x.dtype)
            softmax_rows(x.reshape(-1, x.shape[-1]), out.reshape(-1, x.shape[-1]))
            return out
        out = np.subtract(x, np.max(x, axis=dim, keepdims=True))
        np.exp(out, out=out)
        out /= np.sum(out, axis=dim, keepdims=True)
        return out

    def softmax_backward(self, grad, out, dim):
        if grad.dtype != out.dtype or grad.shape != out.shape:
            return super().softmax_backward(grad, out, dim)
        if _compiled_softmax(dim, grad, out):
            from .compiled_softmax import softmax_backward_rows

            width = out.shape[-1]
            result = np.empty(out.shape, out.dtype)
            softmax_backward_rows(
                grad.reshape(-1, width), out.reshape(-1, width), result.reshape(-1, width)
            )
            return result
        result = np.multiply(grad, out)
        np.subtract(grad, np.sum(result, axis=dim, keepdims=True), out=result)
        result *= out
        return result


#: Softmaxes (and their gradients) of this many elements or more run compiled
#: (:mod:`.compiled_softmax`); smaller ones stay NumPy's, so that a small model never loads Numba.
COMPILED_SOFTMAX_MIN_SIZE = 1 << 16


def _compiled_softmax(dim: int, *arrays: np.ndarray) -> bool:
    """Whether a softmax (or its gradient) over ``dim`` of ``arrays`` runs compiled: the last
    dimension, non-empty, of C-contiguous float32 arrays of at least
    :data:`COMPILED_SOFTMAX_MIN_SIZE` elements."""
    first = arrays[0]
    return (
        first.size >= COMPILED_SOFTMAX_MIN_SIZE
        and dim in (-1, first.ndim - 1)
        and all(a.dtype == np.float32 and a.flags.c_contiguous for a in arrays)
    )


#: Elements from which a sum over leading dimensions is a vector-matrix product.
COLUMN_SUM_ELEMENTS = 1 << 14


def _leading_column_sum(x: np.ndarray, dims: Any) -> bool:
    """Whether ``sum_dim(x, dims)`` sums a large C-contiguous float array over its leading
    dimensions (a linear layer's bias gradient): BLAS's vector-matrix product (``ones @ rows``)
    takes it in one pass, in 0.66-0.75x the time of NumPy's row-by-row reduction (float32
    [2048, 128] and [2048, 512], one thread, paired medians on a shared machine); the same
    sums, rounded in BLAS's order (within float summation error of NumPy's, as
    ``numpy_transformer``'s column sums already are)."""
    return (
        x.dtype in (np.float32, np.float64)
        and x.size >= COLUMN_SUM_ELEMENTS
        and 0 < len(dims) < x.ndim
        and tuple(dims) == tuple(range(len(dims)))
        and x.flags.c_contiguous
    )


#: Embedding gradients (``select_add`` of rows) of this many elements or more take the
#: compiled loop (:mod:`.compiled_index`); smaller ones stay NumPy's, so that a small model
#: never loads Numba.
COMPILED_INDEX_MIN_SIZE = 1 << 14


def _compiled_index_add(out: np.ndarray, rows: np.ndarray, values: np.ndarray, dim: int) -> bool:
    """Whether :func:`.compiled_index.index_add_rows` takes this ``select_add``: rows of a
    float matrix, C-contiguous values of its dtype, one per (in-range, made non-negative)
    index, of :data:`COMPILED_INDEX_MIN_SIZE` elements or more."""
    return (
        dim == 0
        and out.ndim == 2
        and out.dtype in (np.float32, np.float64)
        and values.shape == (rows.size, out.shape[1])
        and values.flags.c_contiguous
        and values.size >= COMPILED_INDEX_MIN_SIZE
        and rows.dtype.kind == "i"
    )


def _addable_into(acc: Any, value: Any) -> bool:
    """Whether ``value`` can be added into ``acc`` in place: ``acc`` an array (NumPy sums of
    0-d arrays are scalars) of ``value``'s dtype (else the sum takes the wider one)."""
    return isinstance(acc, np.ndarray) and np.result_type(acc, value) == acc.dtype


def _check_protocol() -> None:
    missing = [
        name
        for name in dir(Backend)
        if not name.startswith("_")
        and name not in Backend.OPTIONAL
        and callable(getattr(Backend, name))
        and getattr(NumpyBackend, name) is getattr(Backend, name)
    ]
    if missing:
        raise TypeError(f"NumpyBackend lacks protocol methods: {missing}")


_check_protocol()
