"""The backend protocol: every primitive operation the layers above need.

A backend holds tensors as *primitives* of its own kind (NumPy arrays for :class:`NumpyBackend`,
autodiff primitives for :class:`~retrograd.autodiff.Autodiff`, torch tensors, CPU or CUDA, for
:class:`TorchBackend`) and implements each method below on them. The tensor API calls these
methods and nothing else, and the backward rules are written against them, so one rule serves
every backend and, run on the autodiff backend itself, gives higher-order gradients.

Conventions, so that implementations stay small:

- Operations are dtype-polymorphic: ``add`` adds floats or ints; callers have already promoted
  both operands to one dtype. Dtypes are named as in :data:`DTYPES`; the half types
  ``"bfloat16" "float16"`` exist on backends that have them (``TorchBackend``).
- Dimensions arrive normalized (``0 <= dim < ndim``) and validated by the tensor API, except
  ``swap_dims``, which also accepts negative dims.
- ``*_dim`` reductions keep the reduced dimensions with size 1, as in Burn.
- Ops returning ``(values, indices)`` give int64 indices along the reduced/sorted dimension.
- Sums and products (``sum``, ``sum_dim``, ``prod``, ``prod_dim``, ``cumsum``, ``cumprod``) of
  ``bool``, ``uint8``, ``int8``, ``int16`` and ``int32`` are int64, as torch's; other dtypes
  keep theirs.
- ``*_scalar`` operations take a Python scalar as second operand; ``r*_scalar`` put it first.
- Tensor arguments come first, then the non-tensor parameters (dims, scalars, slices).
- Nothing is modified in place: every method returns a new primitive (which may share memory
  with an input, as a view does). The exceptions say so where declared: the engine's gradient
  sums (``accumulate``, ``slice_accumulate``) and the optimizer updates called with
  ``inplace=True`` (``sgd_update``, ``adam_update``, ``rmsprop_update``), whose callers pass
  only buffers nothing else references.

The neural-network kernels (convolution, batch norm, pooling, interpolation), the recurrent
layers', the losses' and the special functions' are declared in :mod:`.protocol_nn`,
:mod:`.protocol_rnn`, :mod:`.protocol_loss` and :mod:`.protocol_math`, base classes of
:class:`Backend`; they are part of the protocol alike.
"""

from __future__ import annotations

import contextlib
import math
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..device import CPU0
from ..errors import AutodiffError, DTypeError, LinAlgError, shape_text
from .protocol_loss import LossProtocol
from .protocol_math import MathProtocol
from .protocol_nn import NNProtocol
from .protocol_products import ProductProtocol
from .protocol_rnn import RecurrentProtocol
from .sizes import ITEMSIZE

#: torch's ``gelu(approximate="tanh")`` constant, the Python float of sqrt(2 / pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

__all__ = [
    "COMPLEX_DTYPES",
    "COMPLEX_OF_REAL",
    "COMPLEX_SEEN",
    "DTYPES",
    "FLOAT_DTYPES",
    "GRAD_DTYPES",
    "INT_DTYPES",
    "ITEMSIZE",
    "METADATA",
    "PROTOCOL_OPS",
    "REAL_OF_COMPLEX",
    "Backend",
    "complex_draws",
    "default_float_dtype",
    "set_default_float_dtype",
    "singular_matrix",
]

#: Every dtype name of the protocol.
DTYPES = (
    "float32",
    "float64",
    "int64",
    "bool",
    "bfloat16",
    "float16",
    "uint8",
    "int32",
    "int16",
    "int8",
    "complex64",
    "complex128",
)
#: The floating-point dtypes: the ones gradients flow through (with the complex ones).
FLOAT_DTYPES = ("float32", "float64", "bfloat16", "float16")
#: The complex dtypes; gradients flow through them too (torch's convention: the gradient of
#: a real loss is the conjugate Wirtinger derivative, ``2z`` for ``|z|^2``).
COMPLEX_DTYPES = ("complex64", "complex128")
#: Set once a backend has made a complex array in this process: until then the autodiff
#: backend's record of an op never asks whether an operand is complex (the real hot path pays
#: one test of this flag). Backends set it where complex arrays come from (a dtype lookup
#: that misses their real table, complex data).
COMPLEX_SEEN = [False]
#: The dtypes a tensor requiring a gradient can have.
GRAD_DTYPES = FLOAT_DTYPES + COMPLEX_DTYPES
#: Each complex dtype's real part, and the complex dtype of each real float dtype.
REAL_OF_COMPLEX = {"complex64": "float32", "complex128": "float64"}
COMPLEX_OF_REAL = {
    "float32": "complex64",
    "float64": "complex128",
    "float16": "complex64",
    "bfloat16": "complex64",
}
#: The integer dtypes (bool apart), widest first.
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")

#: torch's default dtype: the one Python floats and floating tensors made without a dtype take.
#: Process-wide, as torch's (``rg.set_default_dtype``); kept here, below every layer that makes
#: tensors, so that backends, the tensor API and nn all read the one value.
_DEFAULT_FLOAT = ["float32"]


def default_float_dtype() -> str:
    """The dtype of new floating tensors made without a dtype (``rg.get_default_dtype``)."""
    return _DEFAULT_FLOAT[0]


class _RandomRefusal(threading.local):
    """Why random draws are refused on this thread (None: they are not)."""

    message: str | None = None


_RANDOM_REFUSAL = _RandomRefusal()


@contextlib.contextmanager
def random_refused(message: str) -> Any:
    """Within the block, on this thread, every random draw -- of the process-wide stream, a
    device's or a user's ``Generator`` -- raises ``AutodiffError(message)``, a RuntimeError
    (torch's ``vmap`` in its default ``randomness="error"``)."""
    before = _RANDOM_REFUSAL.message
    _RANDOM_REFUSAL.message = message
    try:
        yield
    finally:
        _RANDOM_REFUSAL.message = before


@contextlib.contextmanager
def random_allowed() -> Any:
    """Within the block, on this thread, random draws are allowed again (a nested ``vmap``
    whose randomness is ``"same"`` or ``"different"``)."""
    before = _RANDOM_REFUSAL.message
    _RANDOM_REFUSAL.message = None
    try:
        yield
    finally:
        _RANDOM_REFUSAL.message = before


def check_random_allowed() -> None:
    """Raise where :func:`random_refused` refuses random draws on this thread."""
    message = _RANDOM_REFUSAL.message
    if message is not None:
        raise AutodiffError(message)


def set_default_float_dtype(name: str) -> None:
    """Make ``name`` (one of :data:`FLOAT_DTYPES`) the default float dtype."""
    if name not in FLOAT_DTYPES:
        raise DTypeError(
            f"set_default_dtype: the default must be a float dtype ({', '.join(FLOAT_DTYPES)}), "
            f"got {name!r}"
        )
    _DEFAULT_FLOAT[0] = name


_INV_SQRT_2 = 0.7071067811865476


def _product_in(dtype: str, a: float, b: float) -> float:
    """``a * b`` as a kernel computes it in ``dtype`` (float32: each rounded to float32, and
    the product, whose exact value a double holds, rounded once), torch's constants."""
    if dtype != "float32":
        return a * b
    return _float32(_float32(a) * _float32(b))


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


_INV_SQRT_2PI = 0.3989422804014327


def _one_float_dtype(backend: Any, *arrays: Any) -> bool:
    """Whether ``arrays`` are all float32 or all float64 (an optimizer's value, gradient and
    state): the dtypes torch's fused ``add(alpha=)``/``lerp``/``addcmul`` take together."""
    dtype = backend.dtype(arrays[0])
    return dtype in ("float32", "float64") and all(backend.dtype(a) == dtype for a in arrays)


def _required(*_args: Any, **_kwargs: Any) -> Any:
    raise NotImplementedError


def complex_draws(backend: Any, shape: Sequence[int], distribution: str, dtype: str, device: Any):
    """Random complex numbers as torch draws them: real and imaginary parts each uniform on
    [0, 1) (``rand``), or each normal with variance 1/2, so that ``|z|^2`` has mean 1
    (``randn``)."""
    shape = tuple(shape)
    parts = backend.random(shape + (2,), distribution, REAL_OF_COMPLEX[dtype], device)
    if distribution != "uniform":
        parts = backend.mul_scalar(parts, _INV_SQRT_2)
    lead = (slice(None),) * len(shape)
    real = backend.reshape(backend.slice(parts, lead + (slice(0, 1),)), shape)
    imag = backend.reshape(backend.slice(parts, lead + (slice(1, 2),)), shape)
    return backend.complex(real, imag)


def singular_matrix(op: str, shape: Sequence[int]) -> LinAlgError:
    """The error for a matrix with no inverse (torch's ``LinAlgError``)."""
    return LinAlgError(
        f"{op}: the input matrix of shape {shape_text(shape)} is singular, it has no inverse"
    )


class Backend(NNProtocol, RecurrentProtocol, LossProtocol, MathProtocol, ProductProtocol):
    """Abstract base of all backends; the method list, with its bases' (the neural-network,
    recurrent and loss kernels), *is* the protocol.

    Subclasses implement every method. ``name`` labels the backend in messages.
    """

    name = "backend"
    #: Methods a backend may leave to this class: the memory counters, and the fused kernels
    #: whose default here is composed of the other primitives (correct everywhere; a backend
    #: overrides one where its own kernel is faster).
    OPTIONAL = frozenset(
        {
            "memory_allocated",
            "reset_peak_memory",
            "adam_update",
            "sgd_update",
            "rmsprop_update",
            "owns_memory",
            "write_into",
            "global_norm",
            "attention",
            "attention_backward",
            "batch_norm",
            "batch_norm_backward",
            "batch_norm_update",
            "conv_backward",
            "conv_transpose_backward",
            "gelu_backward",
            "relu_backward",
            "layer_norm",
            "layer_norm_backward",
            "linear",
            "slice_backward",
            "accumulate",
            "slice_accumulate",
            *RecurrentProtocol.OPTIONAL_RECURRENT,
            "softmax_backward",
            "log_softmax_backward",
            "gather_backward",
            "prod_backward",
            "prod_dim_backward",
            "cumprod_backward",
            "arithmetic_warnings_ignored",
            "lerp_scalar",
            "hardswish",
            "hardtanh",
            "smooth_l1",
            "huber",
            "variance",
            "maximum",
            "minimum",
            "cdist",
            "logaddexp",
            "sinc",
            "logit",
            "logit_backward",
            "erfinv",
            "softsign",
            "log2",
            "log10",
            "exp2",
            "tanh_backward",
            "silu_backward",
            "mish_backward",
            "elu_backward",
            "softplus_threshold",
            "hardswish_backward",
            "softplus_backward",
            "log_sigmoid_backward",
            "gelu_tanh_backward",
            "hardsigmoid",
            "elu",
            "mish",
            "gelu_tanh",
            "prelu",
            "first_order_only",
            "prelu_backward_input",
            "prelu_backward_weight",
            "leaky_relu_backward",
            "hardtanh_backward",
            "hardsigmoid_backward",
            "threshold",
            "threshold_backward",
            "hardshrink",
            "softshrink",
            "shrink_backward",
            "mul_mask",
            "binary_cross_entropy",
            "norm2",
            "vector_norm",
            "rsqrt",
            "has_dtype",
            "grid_sample",
            "grid_sample_backward",
            "ctc_loss",
            "ctc_loss_backward",
            "group_norm",
            "group_norm_backward",
        }
    )
    #: The device label tensors made on this backend get when none is given (a GPU backend
    #: says ``cuda:0``).
    default_device = CPU0
    #: True for backends that record a graph (the autodiff decorator).
    is_autodiff = False

    def __copy__(self) -> Backend:
        return self

    def __deepcopy__(self, memo: dict) -> Backend:
        """A backend is the engine its tensors run on, not a value of theirs: a copied module,
        optimizer or tensor keeps running on the same one (a copy of an autodiff backend would
        copy its graph and its checkpointer's state with it)."""
        return self

    # -- data, creation, metadata -------------------------------------------------------------
    def from_data(self, data: Any, dtype: str | None, device: Any) -> Any:
        """A primitive holding ``data`` (scalar, nested lists, NumPy array), copied."""
        raise NotImplementedError

    def to_numpy(self, x: Any) -> Any:
        """The values of ``x`` as a NumPy array (may share memory)."""
        raise NotImplementedError

    def copy_value(self, x: Any) -> Any:
        """A primitive holding ``x``'s values in memory of its own. Ops never write their
        inputs' memory, so most results may share it; ``clone`` and ``copy.deepcopy`` may not,
        as ``Tensor.numpy()`` hands the memory out writable (a clone that shared it took the
        user's writes into its source's array, and a deep-copied target network its source
        model's). This default goes through the host (``from_data`` copies); a backend on a
        device overrides it."""
        return self.from_data(self.to_numpy(x), self.dtype(x), self.default_device)

    def shape(self, x: Any) -> tuple[int, ...]:
        raise NotImplementedError

    def dtype(self, x: Any) -> str:
        raise NotImplementedError

    def has_dtype(self, dtype: str) -> bool:
        """Whether this backend holds tensors of ``dtype`` (a name in :data:`DTYPES`): the
        half dtypes are optional (autocast computes in its dtype only where it exists)."""
        return dtype in DTYPES

    def same_dtype(self, x: Any, y: Any) -> bool:
        """Whether ``x`` and ``y`` have one dtype (the tensor API's fast path asks this)."""
        raise NotImplementedError

    def device(self, x: Any) -> Any:
        """The device ``x`` lives on, or ``None`` where the backend keeps no device label."""
        raise NotImplementedError

    def zeros(self, shape: Sequence[int], dtype: str, device: Any) -> Any:
        raise NotImplementedError

    def ones(self, shape: Sequence[int], dtype: str, device: Any) -> Any:
        raise NotImplementedError

    def full(self, shape: Sequence[int], value: float, dtype: str, device: Any) -> Any:
        raise NotImplementedError

    def zeros_like(self, x: Any) -> Any:
        raise NotImplementedError

    def ones_like(self, x: Any) -> Any:
        raise NotImplementedError

    def eye(self, n: int, m: int, dtype: str, device: Any) -> Any:
        raise NotImplementedError

    def arange(self, start: int, end: int, step: int, dtype: str, device: Any) -> Any:
        raise NotImplementedError

    def random(self, shape: Sequence[int], distribution: str, dtype: str, device: Any) -> Any:
        """``"uniform"`` on [0, 1) or ``"normal"`` (mean 0, std 1), from the seeded generator."""
        raise NotImplementedError

    def bernoulli(self, shape: Sequence[int], p: float, device: Any) -> Any:
        """A bool primitive, true with probability ``p``."""
        raise NotImplementedError

    def seed(self, seed: int) -> None:
        raise NotImplementedError

    def rng_state(self) -> Any:
        """The position of the stream :meth:`seed` seeds, and the seed it started from, as a
        host int64 array :meth:`set_rng_state` takes back (``rg.get_rng_state``)."""
        raise NotImplementedError

    def set_rng_state(self, words: Any) -> None:
        """Return the stream to a position :meth:`rng_state` gave."""
        raise NotImplementedError

    def cast(self, x: Any, dtype: str) -> Any:
        raise NotImplementedError

    def bitcast(self, x: Any, dtype: str) -> Any:
        """The bytes of ``x`` (its values laid out row-major) read as ``dtype``, in new memory
        (torch's ``view(dtype)``): the same shape for a dtype of the same itemsize, else the
        last dimension scaled by the ratio of the itemsizes (the caller checked that it
        divides)."""
        raise NotImplementedError

    def to_device(self, x: Any, device: Any) -> Any:
        raise NotImplementedError

    def any(self, x: Any) -> bool:
        """Whether any element is true (a Python bool: backward rules may branch on it)."""
        raise NotImplementedError

    def detach(self, x: Any) -> Any:
        """``x`` cut from any graph: a backward rule's constant (a piecewise-constant factor
        such as a floor quotient, whose derivative is 0) under ``create_graph``."""
        raise NotImplementedError

    def memory_allocated(self) -> tuple[int, int] | None:
        """``(bytes allocated now, peak bytes since reset_peak_memory())`` of the device memory
        this backend's allocator holds, or ``None`` where its values live in host memory that
        ``tracemalloc`` sees (NumPy). :mod:`retrograd.memory` measures with it."""
        return None

    def reset_peak_memory(self) -> None:
        """Start a new peak for :meth:`memory_allocated` (its current allocation)."""

    # -- validation and errors (no host round trip on a device backend) ----------------------
    def check_index_range(
        self,
        indices: Any,
        size: int,
        message: Callable[[int | None], str],
        ignore: int | None = None,
    ) -> None:
        """Raise ``IndexOutOfRangeError(message(bad))`` when an entry of the int64 ``indices``
        lies outside ``[0, size)``; entries equal to ``ignore`` are allowed.

        ``bad`` is the first offending value; where ``message(bad)`` is an exception rather
        than a str, that exception is raised (:func:`retrograd.errors.index_error`: value checks
        built on this one). A backend whose values live on an accelerator
        may check asynchronously instead of copying the indices to the host: the error is
        then raised at the next synchronisation (as CUDA's device-side asserts are), and
        ``bad`` may be ``None``. The NumPy backend checks at once.
        """
        raise NotImplementedError

    def error_class(self, error: Exception) -> type | None:
        """The class of :mod:`retrograd.errors` that ``error``, raised by one of this
        backend's kernels, means (a shape, dtype or index error of the user's input), or
        ``None`` when it is not about the input and must propagate unchanged.

        Each backend maps its own exceptions: NumPy's ``ValueError``/``IndexError``/
        ``TypeError``; torch's ``RuntimeError`` with a size-mismatch message, and so on.
        :func:`retrograd.errors.translate` asks this.
        """
        return None

    def arithmetic_warnings_ignored(self) -> contextlib.AbstractContextManager:
        """A context in which this backend's arithmetic gives IEEE results (``inf``, ``NaN``)
        without warnings. Backward runs its rules and recomputations in it: a gradient's
        ``0 * inf`` or ``0 / 0`` is the rule's answer (torch gives the same values silently),
        and a warning from inside the engine would point at no line the user wrote. Nothing
        here; the NumPy backend silences NumPy's floating-point warnings."""
        return contextlib.nullcontext()

    # -- elementwise binary, broadcasting -----------------------------------------------------
    add = sub = mul = div = pow = remainder = atan2 = hypot = _required
    add_scalar = sub_scalar = mul_scalar = div_scalar = pow_scalar = remainder_scalar = _required
    rsub_scalar = rdiv_scalar = rpow_scalar = rremainder_scalar = _required

    # -- fused elementwise: torch's kernels, rounded once where torch's fused multiply-add is
    def lerp(self, x: Any, end: Any, weight: Any) -> Any:
        """torch's ``lerp`` of float arrays of one dtype (broadcasting; ``weight`` an array or
        a Python number, taken in that dtype): ``fma(w, end - x, x)`` where ``|w| < 1/2``,
        else ``fma(w - 1, end - x, end)``, each rounded once (so both ends are exact)."""
        raise NotImplementedError

    def lerp_scalar(self, x: Any, end: Any, weight: float) -> Any:
        """:meth:`lerp` with a Python number for ``weight`` (the op of its own: the weight is
        a parameter, not an input)."""
        return self.lerp(x, end, weight)

    def norm2(self, x: Any, dims: tuple[int, ...]) -> Any:
        """The Euclidean norm of ``x`` over ``dims``, kept as size-1 dims: the square root of
        the sum of the squares (the op table's ``norm2``, whose rule is torch's
        ``norm_backward`` for ``p = 2``). This default composes primitives; over dims of
        size 1 it is ``|x|``, as torch's (no square to under- or overflow: the norm of a
        subnormal or huge entry is itself)."""
        shape = self.shape(x)
        if all(shape[d] == 1 for d in dims):
            return self.abs(x)
        return self.sqrt(self.sum_dim(self.square(x), dims))

    def vector_norm(self, x: Any, order: float, dims: tuple[int, ...]) -> Any:
        """The ``order``-norm of ``x`` over ``dims``, kept as size-1 dims, for ``order``
        other than 0, 2 and the infinities: ``(sum |x|^order)^(1 / order)``, ``|0|^order``
        infinite for ``order < 0`` (the norm then 0). The op table's ``vector_norm``, whose
        rule is torch's ``norm_backward``. This default composes primitives (their summation
        order, not torch's kernel's left-to-right one). Over dims of size 1, ``|x|`` itself,
        as torch's kernel gives (no power, no root: exact at subnormal and huge entries)."""
        magnitude = self.abs(x)
        if all(self.shape(x)[d] == 1 for d in dims):
            return magnitude
        total = self.sum_dim(magnitude if order == 1.0 else self.pow_scalar(magnitude, order), dims)
        return total if order == 1.0 else self.pow_scalar(total, 1.0 / order)

    def rsqrt(self, x: Any) -> Any:
        """``1 / sqrt(x)``, two roundings, as torch's CPU kernel (this default)."""
        return self.recip(self.sqrt(x))

    def hardswish(self, x: Any) -> Any:
        """torch's ``hardswish`` kernel, operation for operation: ``x * min(max(x + 3, 0), 6)
        / 6`` (so ``x * 6 / 6``, rounded twice, where ``x >= 3``; ``-0`` where a negative
        ``x <= -3``; NaN at ``-inf`` and NaN). This default composes primitives."""
        return self.div_scalar(self.mul(x, self.clamp(self.add_scalar(x, 3.0), 0.0, 6.0)), 6.0)

    def hardswish_backward(self, grad: Any, x: Any) -> Any:
        """torch's ``hardswish_backward``: 0 where ``x <= -3``, ``grad`` where ``x >= 3`` (and
        NaN, torch's scalar loop's; its vectorized one gives NaN), ``grad * (x / 3 + 0.5)``
        between. This default composes primitives."""
        inside = self.mul(grad, self.add_scalar(self.div_scalar(x, 3.0), 0.5))
        passed = self.logical_or(self.greater_equal_elem(x, 3.0), self.is_nan(x))
        return self.mask_fill(
            self.mask_where(inside, passed, grad), self.lower_equal_elem(x, -3.0), 0.0
        )

    def hardtanh(self, x: Any, lo: float, hi: float) -> Any:
        """``x`` clamped to ``[lo, hi]`` (the op table's ``hardtanh``, whose gradient stops on
        the bounds). This default is the clamp."""
        return self.clamp(x, lo, hi)

    def smooth_l1(self, d: Any, beta: float) -> Any:
        """torch's smooth L1 loss of each difference ``d`` (``beta > 0``): ``0.5 d**2 / beta``
        where ``|d| < beta`` (NaN too), ``|d| - 0.5 beta`` elsewhere (the op table's, whose
        rule reads ``d``). This default composes primitives (:meth:`_huber_parts`)."""
        near, quadratic, linear = self._huber_parts(d, beta)
        return self.mask_where(linear, quadratic, self.mul_scalar(self.square(near), 0.5 / beta))

    def huber(self, d: Any, delta: float) -> Any:
        """torch's Huber loss of each difference ``d`` (``delta > 0``): ``0.5 d**2`` where
        ``|d| < delta`` (NaN too), ``delta (|d| - 0.5 delta)`` elsewhere. A default composing
        primitives, as :meth:`smooth_l1`."""
        near, quadratic, linear = self._huber_parts(d, delta)
        linear = self.mul_scalar(linear, delta)
        return self.mask_where(linear, quadratic, self.mul_scalar(self.square(near), 0.5))

    def _huber_parts(self, d: Any, bound: float) -> tuple[Any, Any, Any]:
        # the square of d itself where |d| < bound (0 elsewhere: no inf * 0), the mask of the
        # quadratic branch (NaN's too), and |d| - bound / 2
        size = self.abs(d)
        quadratic = self.logical_or(self.lower_elem(size, bound), self.is_nan(size))
        near = self.mask_fill(d, self.logical_not(quadratic), 0.0)
        return near, quadratic, self.sub_scalar(size, 0.5 * bound)

    def variance(self, x: Any, dims: tuple[int, ...], correction: float) -> Any:
        """torch's ``var`` over ``dims`` (kept, of size 1), dividing by ``n - correction``
        (positive): the mean, the squared deviations' sum over ``dims`` (each one reduction
        over every dim, as Tensor.mean's and sum's), divided (the op table's ``variance``,
        whose rule reads ``x``). This default composes primitives."""
        mean = self.mean_dim(x, tuple(dims))
        total = self.sum_dim(self.square(self.sub(x, mean)), tuple(dims))
        return self.div_scalar(total, math.prod(self.shape(x)[d] for d in dims) - correction)

    def maximum(self, x: Any, y: Any) -> Any:
        """torch's ``maximum`` (the op table's, whose gradient splits at a tie): the larger of
        ``x`` and ``y``, NaN where either is, and at a tie exactly ``x`` but ``+0`` for ``-0``
        beside ``+0``. This default composes primitives (:meth:`_extremum`)."""
        return self._extremum(x, y, self.greater)

    def minimum(self, x: Any, y: Any) -> Any:
        """torch's ``minimum``, as :meth:`maximum`."""
        return self._extremum(x, y, self.lower)

    def _extremum(self, x: Any, y: Any, wins: Any) -> Any:
        # neither wins: a tie, whose value is exactly x ((x + y) / 2 overflows past half the
        # largest float, and x / 2 + y / 2 rounds subnormals, so the second serves only beyond
        # 1), or a NaN (x + y)
        total = self.add(x, y)
        halves = self.mask_where(
            self.mul_scalar(total, 0.5),
            self.greater_elem(self.abs(x), 1.0),
            self.add(self.mul_scalar(x, 0.5), self.mul_scalar(y, 0.5)),
        )
        neither = self.mask_where(total, self.equal(x, y), halves)
        return self.mask_where(self.mask_where(neither, wins(x, y), x), wins(y, x), y)

    def grid_sample(self, x: Any, grid: Any, mode: str, padding_mode: str, align: bool) -> Any:
        """torch's ``grid_sample`` (the op table's, float32/float64): ``x`` ``[N, C, *sizes]``
        read at the points of ``grid`` ``[N, *out, S]``, ``[N, C, *out]``. This default
        composes primitives, the arithmetic of the tensor-level composite it replaced (7
        December), bit for bit."""
        from .protocol_grid import grid_sample

        return grid_sample(self, x, grid, mode, padding_mode, align)

    def grid_sample_backward(
        self, grad: Any, x: Any, grid: Any, mode: str, padding_mode: str, align: bool, needs
    ) -> tuple[Any, Any]:
        """The gradients of :meth:`grid_sample` in ``x`` and ``grid`` (``None`` where
        ``needs`` says none), read from ``x`` and ``grid`` alone, as torch's
        ``grid_sampler_2d_backward``. This default composes primitives (the corner weights,
        indices and values recomputed), so it differentiates again on the autodiff backend."""
        from .protocol_grid import grid_sample_backward

        return grid_sample_backward(self, grad, x, grid, mode, padding_mode, align, needs)

    def cdist(self, x1: Any, x2: Any, p: float) -> Any:
        """torch's ``cdist`` for ``p > 0`` (the op table's): the ``p``-norms of the rows'
        differences ``x1[..., :, None, :] - x2[..., None, :, :]``, ``[..., P, R]``. This
        default composes primitives, the arithmetic of the tensor layer's vector norms (at
        ``p = inf`` the largest size)."""
        s1, s2 = self.shape(x1), self.shape(x2)
        diff = self.sub(
            self.reshape(x1, s1[:-1] + (1, s1[-1])), self.reshape(x2, s2[:-2] + (1,) + s2[-2:])
        )
        last = (len(self.shape(diff)) - 1,)
        if p == 1.0:
            out = self.sum_dim(self.abs(diff), last)
        elif p == math.inf:
            out = self.max_dim(self.abs(diff), last[0])[0]
        else:
            if p == 2.0:
                total = self.sum_dim(self.square(diff), last)
            else:
                magnitude = self.abs(diff)
                zero_entry = self.equal_elem(magnitude, 0.0)
                powered = self.pow_scalar(self.mask_fill(magnitude, zero_entry, 1.0), p)
                total = self.sum_dim(self.mask_fill(powered, zero_entry, 0.0), last)
            zero = self.equal_elem(total, 0.0)
            safe = self.mask_fill(total, zero, 1.0)
            root = self.sqrt(safe) if p == 2.0 else self.pow_scalar(safe, 1.0 / p)
            out = self.mask_fill(root, zero, 0.0)
        return self.reshape(out, self.shape(out)[:-1])

    def logaddexp(self, x: Any, y: Any, scale: float) -> Any:
        """torch's ``logaddexp`` (``scale`` 1) or ``logaddexp2`` (``scale`` log 2) of real
        floats: ``max + log1p(exp(-|x - y|))``, or ``max + log1p(exp2(-|x - y|)) / log 2``
        (torch's kernel's formula), equal infinities kept. This default composes primitives."""
        gap = self.abs(self.sub(x, y))
        if scale == 1.0:
            soft = self.log1p(self.exp(self.neg(gap)))
        else:
            soft = self.mul_scalar(self.log1p(self.exp2(self.neg(gap))), 1.0 / scale)
        out = self.add(self.maximum(x, y), soft)
        return self.mask_where(out, self.logical_and(self.is_inf(x), self.equal(x, y)), x)

    def sinc(self, x: Any) -> Any:
        """``sin(pi x) / (pi x)``, 1 where ``x * x`` is 0 (torch's, for float32 and float64).
        This default composes primitives."""
        zero = self.equal_elem(self.square(x), 0.0)
        product = self.mul_scalar(self.mask_fill(x, zero, 1.0), math.pi)
        return self.mask_fill(self.div(self.sin(product), product), zero, 1.0)

    def logit(self, x: Any, eps: float | None) -> Any:
        """torch's ``logit`` of real floats: ``log(z / (1 - z))``, ``z`` the input clamped to
        ``[eps, 1 - eps]`` (in the dtype; ``eps`` wins where the bounds cross) when ``eps`` is
        given, else ``x`` (NaN outside ``[0, 1]``). This default composes primitives."""
        if eps is not None:  # (both masks of x itself: eps wins for eps > 1/2)
            low, high = _bounds_of_eps(eps, self.dtype(x))
            below = self.lower_elem(x, low)
            x = self.mask_fill(self.mask_fill(x, self.greater_elem(x, high), high), below, low)
        return self.log(self.div(x, self.rsub_scalar(x, 1.0)))

    def logit_backward(self, grad: Any, x: Any, eps: float | None) -> Any:
        """torch's ``logit_backward``: ``grad / (x (1 - x))`` (``grad * inf`` at 0 and 1);
        when ``eps`` is given, 0 where ``x`` is not in ``[eps, 1 - eps]`` (NaN too, as torch's
        vectorized kernel and its ``infinitely_differentiable_logit_backward``), else NaN
        outside ``[0, 1]``. This default composes primitives (on the autodiff backend it is
        recorded, so it differentiates again)."""
        positive = self.add_scalar(x, 0.0)  # (-0 + 0 is +0: grad / +0 is grad * inf)
        out = self.div(grad, self.mul(positive, self.rsub_scalar(positive, 1.0)))
        if eps is None:
            outside = self.logical_or(self.lower_elem(x, 0.0), self.greater_elem(x, 1.0))
            return self.mask_fill(out, outside, math.nan)
        low, high = _bounds_of_eps(eps, self.dtype(x))
        inside = self.logical_and(self.greater_equal_elem(x, low), self.lower_equal_elem(x, high))
        return self.mask_fill(out, self.logical_not(inside), 0.0)

    def erfinv(self, x: Any) -> Any:
        """The inverse error function of real floats (NaN outside ``[-1, 1]``, infinite at
        the ends). This default composes primitives: Giles's (2010) single-precision
        approximation, then three Newton steps on ``erf``, all in float64 whatever the dtype
        (near +-1 a float32 erf's rounding, times erf's inverse slope, 1e5 there, left
        ``erfinv(0.9999999)`` 3% off), rounded once to the dtype."""
        dtype = self.dtype(x)
        value = x if dtype == "float64" else self.cast(x, "float64")
        w = self.neg(self.log(self.mul(self.rsub_scalar(value, 1.0), self.add_scalar(value, 1.0))))
        central = self.sub_scalar(w, 2.5)
        tail = self.sub_scalar(self.sqrt(self.clamp(w, 5.0, None)), 3.0)
        p_central = self.add_scalar(self.mul_scalar(central, 0.0), _GILES_CENTRAL[0])
        p_tail = self.add_scalar(self.mul_scalar(tail, 0.0), _GILES_TAIL[0])
        for c, t in zip(_GILES_CENTRAL[1:], _GILES_TAIL[1:]):
            p_central = self.add_scalar(self.mul(p_central, central), c)
            p_tail = self.add_scalar(self.mul(p_tail, tail), t)
        guess = self.mul(self.mask_where(p_central, self.greater_equal_elem(w, 5.0), p_tail), value)
        edge = self.equal_elem(self.abs(value), 1.0)
        guess = self.mask_where(guess, edge, self.mul_scalar(value, math.inf))
        for _ in range(3):
            step = self.mul_scalar(self.sub(self.erf(guess), value), math.sqrt(math.pi) / 2.0)
            step = self.mul(step, self.exp(self.square(guess)))
            guess = self.sub(guess, self.mask_fill(step, self.is_nan(step), 0.0))
        return guess if dtype == "float64" else self.cast(guess, dtype)

    def softsign(self, x: Any) -> Any:
        """``x / (|x| + 1)``. This default composes primitives."""
        return self.div(x, self.add_scalar(self.abs(x), 1.0))

    def tanh_backward(self, grad: Any, out: Any) -> Any:
        """``grad * (1 - out**2)`` from tanh's output. This default composes primitives (on the
        autodiff backend it is recorded, so it differentiates again); torch's kernel, which a
        backend may give instead, rounds ``1 - out**2`` once (a fused multiply-add)."""
        return self.mul(grad, self.rsub_scalar(self.square(out), 1.0))

    def silu_backward(self, grad: Any, x: Any) -> Any:
        """``grad * s * (1 + x (1 - s))`` with ``s = sigmoid(x)``, from ``x`` alone. This
        default composes primitives."""
        s = self.sigmoid(x)
        return self.mul(
            grad, self.mul(s, self.add_scalar(self.mul(x, self.rsub_scalar(s, 1.0)), 1.0))
        )

    def mish_backward(self, grad: Any, x: Any) -> Any:
        """The gradient of ``x * tanh(softplus(x))`` from ``x`` alone: the rules of that
        composition in their order (mul's to ``x``, then tanh's and softplus's to its other
        side, summed). This default composes primitives."""
        t = self.tanh(self.softplus(x, 1.0))
        through = self.mul(self.mul(grad, x), self.rsub_scalar(self.square(t), 1.0))
        return self.add(self.mul(grad, t), self.mul(through, self.sigmoid(x)))

    def elu_backward(
        self, grad: Any, x: Any, alpha: float, input_scale: float, scale: float = 1.0
    ) -> Any:
        """torch's ``elu_backward`` from ``x``: ``grad * scale`` where ``x > 0``, else ``((grad
        * input_scale) * (alpha * scale)) * exp(x * input_scale)`` (the product ``alpha *
        scale`` rounded in the dtype), torch's vectorized kernel's order, so NaN where ``x``
        is (its scalar tail loop passes ``grad`` there instead). This default composes
        primitives and is recorded on the autodiff backend, so it differentiates again: at
        ``x == 0`` the gradient is ``(grad * input_scale) * (alpha * scale)``, of zero
        derivative in ``x`` (torch's double backward masks by ``x < 0``)."""
        negcoef = _product_in(self.dtype(x), alpha, scale)
        positive = self.greater_elem(x, 0.0)
        safe = self.mask_fill(x, self.greater_equal_elem(x, 0.0), 0.0)  # (NaN stays)
        if input_scale != 1.0:
            safe = self.mul_scalar(safe, input_scale)
        scaled = self.mul_scalar(grad, input_scale) if input_scale != 1.0 else grad
        at_zero = self.mul_scalar(scaled, negcoef)
        slope = self.mul(at_zero, self.exp(safe))
        passed = self.mul_scalar(grad, scale) if scale != 1.0 else grad
        return self.mask_where(
            self.mask_where(slope, positive, passed), self.equal_elem(x, 0.0), at_zero
        )

    def softplus_threshold(self, x: Any, beta: float, threshold: float) -> Any:
        """torch's ``softplus``: ``x`` where ``x * beta > threshold``, else ``log1p(exp(x *
        beta)) / beta`` (its kernel's formula; the exponential sees 0 where it is not taken,
        so that it does not overflow there). This default composes primitives."""
        scaled, above = self._softplus_parts(x, beta, threshold)
        out = self.log1p(self.exp(scaled))
        if beta != 1.0:
            out = self.div_scalar(out, beta)
        return self.mask_where(out, above, x)

    def softplus_backward(self, grad: Any, x: Any, beta: float, threshold: float) -> Any:
        """torch's ``softplus_backward`` from ``x``: ``grad`` where ``x * beta > threshold``,
        else ``grad * z / (z + 1)`` with ``z = exp(x * beta)`` (its kernel's order). This
        default composes primitives. Where ``x * beta`` equals the threshold, ``z`` is the
        threshold's: the same bits, of no derivative in ``x``, as torch's double backward
        (``sigmoid_backward`` masked by ``x * beta < threshold``) gives 0 there."""
        scaled, above = self._softplus_parts(x, beta, threshold)
        z = self.exp(self.mask_fill(scaled, self.equal_elem(scaled, threshold), threshold))
        return self.mask_where(self.div(self.mul(grad, z), self.add_scalar(z, 1.0)), above, grad)

    def _softplus_parts(self, x: Any, beta: float, threshold: float) -> tuple[Any, Any]:
        # x * beta, 0 where above the threshold (no exp overflow where x itself is taken), and
        # the mask of the linear tail
        scaled = self.mul_scalar(x, beta) if beta != 1.0 else x
        above = self.greater_elem(scaled, threshold)
        return self.mask_fill(scaled, above, 0.0), above

    def log_sigmoid_backward(self, grad: Any, x: Any) -> Any:
        """torch's ``log_sigmoid_backward`` with its forward's buffer ``b = exp(-|x|)``,
        recomputed from ``x``: ``(1 - b / (1 + b)) * grad`` where ``x < 0``, else ``(b / (1 +
        b)) * grad`` (its kernel's ``(max_deriv - sign * b / (1 + b)) * grad``). This default
        composes primitives. ``-|x|`` is taken branch by branch (``x`` below 0, ``-x`` from
        0 on: the same bits), not through ``abs``, whose derivative at 0 is 0: recorded under
        ``create_graph`` that made the second derivative at 0 zero, where it is -1/4."""
        below = self.lower_elem(x, 0.0)
        buffer = self.exp(self.mask_where(self.neg(x), below, x))
        share = self.div(buffer, self.add_scalar(buffer, 1.0))
        negative = self.mul(self.rsub_scalar(share, 1.0), grad)
        return self.mask_where(self.mul(share, grad), below, negative)

    def gelu_tanh_backward(self, grad: Any, x: Any) -> Any:
        """torch's ``gelu_backward(approximate="tanh")`` from ``x``, its kernel's order:
        ``t = tanh(k (x + c x**3))``, ``grad * (0.5 (1 + t) + (0.5 x) (1 - t*t) (k (1 + 3c
        x**2)))``, ``k = sqrt(2 / pi)``, ``c = 0.044715``. This default composes primitives,
        recorded on the autodiff backend."""
        square = self.mul(x, x)
        t = self.tanh(self._gelu_tanh_inner(x, square))
        left_derivative = self.mul_scalar(self.add_scalar(t, 1.0), 0.5)
        inner_derivative = self.mul_scalar(
            self.add_scalar(
                self.mul_scalar(square, _product_in(self.dtype(x), 3.0, 0.044715)), 1.0
            ),
            _SQRT_2_OVER_PI,
        )
        right_derivative = self.mul(
            self.mul(self.mul_scalar(x, 0.5), self.rsub_scalar(self.mul(t, t), 1.0)),
            inner_derivative,
        )
        return self.mul(grad, self.add(left_derivative, right_derivative))

    def _gelu_tanh_inner(self, x: Any, square: Any) -> Any:
        # torch's kBeta * (x + kKappa * x_cube), x_cube = x * x_sq
        cube = self.mul(x, square)
        return self.mul_scalar(self.add(x, self.mul_scalar(cube, 0.044715)), _SQRT_2_OVER_PI)

    def log2(self, x: Any) -> Any:
        """The base-2 logarithm. This default scales the natural one, so it is not exact at
        powers of two; a backend with a ``log2`` kernel gives it (torch's and NumPy's are)."""
        return self.mul_scalar(self.log(x), 1.0 / math.log(2.0))

    def log10(self, x: Any) -> Any:
        """The base-10 logarithm. This default scales the natural one (not exact at powers of
        ten, which a backend's own ``log10`` kernel is)."""
        return self.mul_scalar(self.log(x), 1.0 / math.log(10.0))

    def exp2(self, x: Any) -> Any:
        """``2 ** x``. This default is ``exp(x ln 2)`` (not exact at integers, which a
        backend's own ``exp2`` kernel is)."""
        return self.exp(self.mul_scalar(x, math.log(2.0)))

    def hardsigmoid(self, x: Any) -> Any:
        """``min(max(x + 3, 0), 6) / 6``. This default composes primitives."""
        return self.div_scalar(self.clamp(self.add_scalar(x, 3.0), 0.0, 6.0), 6.0)

    def hardtanh_backward(self, grad: Any, out: Any, lo: float, hi: float) -> Any:
        """torch's ``hardtanh_backward``, read from the output ``out`` of the hardtanh:
        ``grad`` where ``lo < out < hi`` (and NaN), else 0 (on the bounds too, where clamp's
        gradient passes; wherever ``x`` is at or beyond a bound, ``out`` is that bound). This
        default composes primitives."""
        stopped = self.logical_or(self.lower_equal_elem(out, lo), self.greater_equal_elem(out, hi))
        return self.mask_fill(grad, stopped, 0.0)

    def hardsigmoid_backward(self, grad: Any, x: Any, sixth: float) -> Any:
        """torch's ``hardsigmoid_backward``: ``grad * sixth`` strictly inside ``(-3, 3)``,
        0 elsewhere (NaN too); ``sixth`` is torch's ``1.0f / 6.0f``, by which it multiplies in
        every dtype. This default composes primitives."""
        inside = self.logical_and(self.greater_elem(x, -3.0), self.lower_elem(x, 3.0))
        return self.mask_fill(self.mul_scalar(grad, sixth), self.logical_not(inside), 0.0)

    def elu(
        self,
        x: Any,
        alpha: float,
        input_scale: float,
        scale: float = 1.0,
        rule_input_scale: float | None = None,
    ) -> Any:
        """torch's ``elu``: ``x * scale`` where ``x > 0`` (and NaN), else ``expm1(x *
        input_scale) * (alpha * scale)`` (the product rounded in the dtype, torch's
        ``negcoef``), whose exponential sees 0 where ``x >= 0``, and ``x * alpha * scale *
        input_scale`` at ``x == 0`` (the op table's ``elu``: torch's second derivative there
        is 0). ``rule_input_scale`` is the input scale of the op's rule (celu's: torch's
        derivative takes ``1 / float(alpha)``), which the value does not read. This default
        composes primitives."""
        negcoef = _product_in(self.dtype(x), alpha, scale)
        safe = self.mask_fill(x, self.logical_not(self.lower_elem(x, 0.0)), 0.0)
        if input_scale != 1.0:
            safe = self.mul_scalar(safe, input_scale)
        zero = self.equal_elem(x, 0.0)
        at_zero = self.mask_fill(x, self.logical_not(zero), 0.0)
        at_zero = self.mul_scalar(at_zero, negcoef * input_scale)
        branch = self.mask_where(self.mul_scalar(self.expm1(safe), negcoef), zero, at_zero)
        positive = self.mul_scalar(x, scale) if scale != 1.0 else x
        return self.mask_where(positive, self.lower_equal_elem(x, 0.0), branch)

    def mish(self, x: Any) -> Any:
        """torch's ``mish`` kernel's formula, ``x * tanh(log1p(exp(x)))``; the exponential
        sees at most 20 (beyond, the tanh is 1 in float64 as in torch's, with no overflow).
        This default composes primitives."""
        softplus = self.log1p(self.exp(self.clamp(x, None, 20.0)))
        return self.mul(x, self.tanh(softplus))

    def gelu_tanh(self, x: Any) -> Any:
        """torch's ``gelu(approximate="tanh")`` in its kernel's order of operations: ``0.5 *
        x * (1 + tanh(k * (x + c * x * x**2)))``, ``k = sqrt(2 / pi)``, ``c = 0.044715``.
        This default composes primitives."""
        t = self.tanh(self._gelu_tanh_inner(x, self.mul(x, x)))
        return self.mul(self.mul_scalar(x, 0.5), self.add_scalar(t, 1.0))

    def add_scaled(self, x: Any, y: Any, alpha: float) -> Any:
        """torch's ``add(x, y, alpha=alpha)`` of float arrays of one dtype (broadcasting):
        ``fma(y, alpha, x)``, ``alpha`` taken in the dtype, rounded once."""
        raise NotImplementedError

    def addcmul(self, x: Any, t1: Any, t2: Any, value: float) -> Any:
        """torch's ``addcmul(x, t1, t2, value=value)`` of float arrays of one dtype
        (broadcasting): ``fma(value * t1, t2, x)``, ``value`` taken in the dtype."""
        raise NotImplementedError

    # -- elementwise unary --------------------------------------------------------------------
    neg = abs = exp = expm1 = log = log1p = sqrt = square = recip = _required
    sin = cos = tan = sinh = cosh = tanh = asin = acos = atan = asinh = acosh = atanh = _required
    erf = sign = round = floor = ceil = trunc = _required
    sigmoid = log_sigmoid = relu = gelu = silu = _required

    # -- complex numbers ----------------------------------------------------------------------
    #: ``real(x)``/``imag(x)``: the parts of a complex ``x`` (its real dtype); ``conj(x)``;
    #: ``complex(re, im)``: a complex array of two real ones of one dtype; ``fftn(x, dims,
    #: inverse, norm)``: the complex discrete Fourier transform of a complex ``x`` over
    #: ``dims`` (``inverse``: the inverse one), ``norm`` as torch's (``"backward"``,
    #: ``"ortho"``, ``"forward"``), each dim keeping its size
    real = imag = conj = complex = fftn = _required

    def rfftn(self, x: Any, dims: tuple[int, ...], norm: str) -> Any:
        """The discrete Fourier transform of a real ``x`` over ``dims``, one-sided as torch's
        ``fft.rfftn``: the last of ``dims`` keeps its ``n // 2 + 1`` non-negative frequencies.
        A kernel for real input computes it as torch's does (a real transform along the last
        dim, then complex ones), so the bins that are real for every real input (frequency 0
        or ``n / 2`` along each dim) have an imaginary part of exactly zero, as torch's: the
        complex transform of ``x`` rounds there to about 1e-16, which a phase (``angle``)
        turns into a jump of 2 pi. This default is that complex transform, cut."""
        full = self.fftn(self.complex(x, self.zeros_like(x)), dims, False, norm)
        shape = self.shape(full)
        last = dims[-1]
        return self.slice(
            full,
            tuple(
                slice(0, shape[i] // 2 + 1 if i == last else shape[i], 1) for i in range(last + 1)
            ),
        )

    def relu_backward(self, grad: Any, out: Any) -> Any:
        """``grad`` where the ReLU's output ``out`` is positive, else exactly zero (also where
        ``grad`` is not finite): the ReLU's gradient, torch's ``threshold_backward``. It reads
        the output, which the next layer usually keeps anyway. This default composes
        primitives (recorded on the autodiff backend, so it differentiates again)."""
        return self.threshold_backward(grad, out, 0.0)

    def prelu(self, x: Any, weight: Any) -> Any:
        """torch's ``_prelu_kernel``: ``x`` where ``x > 0``, else ``weight * x`` (``weight``
        broadcast to ``x``; so ``x`` itself where ``x > 0`` whatever the weight, a NaN too).
        This default composes primitives."""
        return self.mask_where(self.mul(x, weight), self.greater_elem(x, 0.0), x)

    def prelu_backward_input(self, grad: Any, x: Any, weight: Any) -> Any:
        """The PReLU's gradient to ``x``: ``grad`` where ``x > 0``, else ``weight * grad``
        (torch's ``_prelu_kernel_backward``, whose own derivatives the op table follows).
        This default composes primitives."""
        return self.mask_where(self.mul(grad, weight), self.greater_elem(x, 0.0), grad)

    def prelu_backward_weight(self, grad: Any, x: Any) -> Any:
        """The PReLU's gradient to its weight, before the sum to the weight's shape: ``x *
        grad`` where ``x > 0`` fails, else 0. This default composes primitives."""
        return self.mask_fill(self.mul(grad, x), self.greater_elem(x, 0.0), 0.0)

    def first_order_only(self, gradient: Any, op: str) -> Any:
        """``gradient``, a gradient that ``op``'s backward computed: on a backend that records
        (``create_graph``), recorded with a backward that refuses, as torch's for an op whose
        backward it does not differentiate (``hardsigmoid``, ``ctc_loss``...). This default,
        for a backend that records nothing, is ``gradient`` itself."""
        return gradient

    def gelu_backward(self, grad: Any, x: Any) -> Any:
        """``grad * gelu'(x)`` = ``grad * (Phi(x) + x * phi(x))``: the exact GELU's gradient.

        It reads ``x`` only, as torch's does, so that the GELU's output is not held for it.
        This default composes protocol primitives; on the autodiff backend it is recorded, so
        it differentiates again.
        """
        cdf = self.mul_scalar(self.add_scalar(self.erf(self.mul_scalar(x, _INV_SQRT_2)), 1.0), 0.5)
        pdf = self.mul_scalar(self.exp(self.mul_scalar(self.square(x), -0.5)), _INV_SQRT_2PI)
        return self.mul(grad, self.add(cdf, self.mul(x, pdf)))

    def softplus(self, x: Any, beta: float) -> Any:
        raise NotImplementedError

    def leaky_relu(self, x: Any, slope: float) -> Any:
        raise NotImplementedError

    def leaky_relu_backward(self, grad: Any, x: Any, slope: float) -> Any:
        """torch's ``leaky_relu_backward``: ``grad`` where ``x > 0``, else ``slope * grad``.
        This default composes primitives."""
        return self.mask_where(self.mul_scalar(grad, slope), self.greater_elem(x, 0.0), grad)

    def binary_cross_entropy(self, x: Any, y: Any) -> Any:
        """torch's binary cross-entropy of probabilities ``x`` and targets ``y``, unreduced:
        ``-(y log x + (1 - y) log(1 - x))``, each log clamped at -100. This default composes
        primitives."""
        log_x = self.clamp(self.log(x), -100.0, None)
        log_not_x = self.clamp(self.log(self.rsub_scalar(x, 1.0)), -100.0, None)
        return self.neg(self.add(self.mul(y, log_x), self.mul(self.rsub_scalar(y, 1.0), log_not_x)))

    def mul_mask(self, x: Any, mask: Any) -> Any:
        """``x * mask`` for a bool ``mask``, which is cast to ``x``'s dtype (broadcasting, as
        ``mul``). This default composes primitives."""
        return self.mul(x, self.cast(mask, self.dtype(x)))

    def threshold(self, x: Any, threshold: float, value: float) -> Any:
        """torch's ``threshold``: ``x`` where ``x > threshold`` (and NaN), else ``value``. This
        default composes primitives."""
        return self.mask_fill(x, self.lower_equal_elem(x, threshold), value)

    def threshold_backward(self, grad: Any, x: Any, threshold: float) -> Any:
        """torch's ``threshold_backward``: ``grad`` where ``x > threshold`` (and NaN), else
        exactly zero. ``x`` may be the threshold's output where its ``value`` is at most
        ``threshold`` (it is above ``threshold`` exactly where ``x`` is). This default composes
        primitives."""
        return self.mask_fill(grad, self.lower_equal_elem(x, threshold), 0.0)

    def hardshrink(self, x: Any, lambd: float) -> Any:
        """torch's ``hardshrink``: 0 where ``|x| <= lambd``, else ``x`` (NaN too). This default
        composes primitives."""
        return self.mask_fill(x, self.lower_equal_elem(self.abs(x), lambd), 0.0)

    def softshrink(self, x: Any, lambd: float) -> Any:
        """torch's ``softshrink`` (``lambd >= 0``): ``x - lambd`` above ``lambd``, ``x + lambd``
        below ``-lambd``, 0 between (NaN passes). This default composes primitives."""
        shrunk = self.mask_where(
            self.sub_scalar(x, lambd), self.lower_elem(x, -lambd), self.add_scalar(x, lambd)
        )
        return self.mask_fill(shrunk, self.lower_equal_elem(self.abs(x), lambd), 0.0)

    def shrink_backward(self, grad: Any, out: Any) -> Any:
        """torch's ``hardshrink_backward`` and ``softshrink_backward`` (``lambd >= 0``), read
        from the shrink's output ``out``: ``grad`` where ``|x| > lambd`` (and NaN), else 0. The
        output is 0 exactly where ``|x| <= lambd``: beyond ``lambd``, ``x`` (hardshrink) or
        ``x -+ lambd`` (softshrink: the difference of two distinct floats) is not 0. This
        default composes primitives."""
        return self.mask_fill(grad, self.equal_elem(out, 0.0), 0.0)

    def clamp(self, x: Any, lo: float | None, hi: float | None) -> Any:
        raise NotImplementedError

    # -- comparisons and logic (bool results) -------------------------------------------------
    equal = not_equal = greater = greater_equal = lower = lower_equal = _required
    equal_elem = not_equal_elem = greater_elem = greater_equal_elem = _required
    lower_elem = lower_equal_elem = _required
    is_nan = is_inf = logical_not = logical_and = logical_or = _required

    # -- selection ----------------------------------------------------------------------------
    def mask_where(self, x: Any, mask: Any, values: Any) -> Any:
        """``values`` where ``mask`` is true, else ``x`` (broadcasting)."""
        raise NotImplementedError

    def mask_fill(self, x: Any, mask: Any, value: float) -> Any:
        raise NotImplementedError

    # -- reductions ---------------------------------------------------------------------------
    def sum(self, x: Any) -> Any:
        """0-d sum of all elements."""
        raise NotImplementedError

    def sum_dim(self, x: Any, dims: tuple[int, ...]) -> Any:
        raise NotImplementedError

    mean = prod = max = min = _required
    mean_dim = _required

    def prod_dim(self, x: Any, dim: int) -> Any:
        raise NotImplementedError

    def max_dim(self, x: Any, dim: int) -> tuple[Any, Any]:
        """``(values, indices)`` of the maximum along ``dim``; first occurrence wins."""
        raise NotImplementedError

    def min_dim(self, x: Any, dim: int) -> tuple[Any, Any]:
        raise NotImplementedError

    argmax = argmin = _required

    # -- cumulative, sorting ------------------------------------------------------------------
    cumsum = cumprod = _required

    def cummax(self, x: Any, dim: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def cummin(self, x: Any, dim: int) -> tuple[Any, Any]:
        raise NotImplementedError

    def logcumsumexp(self, x: Any, dim: int) -> Any:
        """``log(cumsum(exp(x)))`` along ``dim`` without overflow (float ``x``), accumulated
        in float64 for float32 as torch's CPU kernel; equal infinities stay themselves."""
        raise NotImplementedError

    def sort(self, x: Any, dim: int, descending: bool) -> tuple[Any, Any]:
        """Stable sort: ``(values, indices)``."""
        raise NotImplementedError

    def topk(
        self,
        x: Any,
        k: int,
        dim: int,
        largest: bool = True,
        sorted: bool = True,  # noqa: A002
    ) -> tuple[Any, Any]:
        """The ``k`` largest (``largest=False``: smallest) along ``dim``: ``(values,
        indices)``, largest (smallest) first when ``sorted``; tied values in the order torch's
        CPU kernel leaves them (libstdc++'s ``partial_sort``/``nth_element``/``sort``, as
        ATen's ``TopKImpl.h`` calls them), and so, when not ``sorted``, its arrangement."""
        raise NotImplementedError

    # -- shape --------------------------------------------------------------------------------
    def reshape(self, x: Any, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def permute(self, x: Any, dims: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def swap_dims(self, x: Any, a: int, b: int) -> Any:
        raise NotImplementedError

    def flip(self, x: Any, dims: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def expand(self, x: Any, shape: tuple[int, ...]) -> Any:
        """Broadcast ``x`` to ``shape`` (NumPy's rules)."""
        raise NotImplementedError

    def slice(self, x: Any, slices: tuple[slice, ...]) -> Any:
        """``x[slices]`` with one normalized ``slice`` per leading dimension."""
        raise NotImplementedError

    def slice_assign(self, x: Any, values: Any, slices: tuple[slice, ...]) -> Any:
        raise NotImplementedError

    def slice_backward(self, grad: Any, shape: tuple[int, ...], slices: tuple[slice, ...]) -> Any:
        """Zeros of ``shape`` in ``grad``'s dtype with ``grad`` at ``slices``: the adjoint of
        :meth:`slice` (a kernel writes ``grad`` into fresh zeros, without the copy of them
        ``slice_assign`` would make)."""
        return self.slice_assign(
            self.zeros(shape, self.dtype(grad), self.device(grad)), grad, slices
        )

    def slice_accumulate(self, acc: Any, grad: Any, slices: tuple[slice, ...]) -> Any:
        """``acc + slice_backward(grad, shape(acc), slices)``: a slice's gradient added to a
        gradient sum. The one exception, with :meth:`accumulate`, to the rule that nothing is
        modified in place: a kernel may add ``grad`` into ``acc`` itself and return it. The
        autodiff engine passes as ``acc`` only a sum it allocated and nothing else references
        (so a split's pieces fill one buffer instead of one of zeros each, summed)."""
        return self.add(acc, self.slice_backward(grad, self.shape(acc), slices))

    def accumulate(self, acc: Any, value: Any) -> Any:
        """``acc + value`` (equal shapes and dtypes), which a kernel may write into ``acc``
        and return: see :meth:`slice_accumulate`."""
        return self.add(acc, value)

    def cat(self, xs: Sequence[Any], dim: int) -> Any:
        raise NotImplementedError

    def repeat_dim(self, x: Any, dim: int, times: int) -> Any:
        raise NotImplementedError

    def unfold(self, x: Any, dim: int, size: int, step: int) -> Any:
        """Windows of ``size`` every ``step`` along ``dim``, as a new last dimension."""
        raise NotImplementedError

    def fold(self, x: Any, dim: int, size: int, step: int, length: int) -> Any:
        """The adjoint of ``unfold``: sums the windows back into a dimension of ``length``."""
        raise NotImplementedError

    # -- indexing -----------------------------------------------------------------------------
    def gather(self, x: Any, indices: Any, dim: int) -> Any:
        raise NotImplementedError

    def scatter_add(self, x: Any, indices: Any, values: Any, dim: int) -> Any:
        raise NotImplementedError

    def scatter_assign(self, x: Any, indices: Any, values: Any, dim: int) -> Any:
        raise NotImplementedError

    def select(self, x: Any, indices: Any, dim: int) -> Any:
        raise NotImplementedError

    def select_add(self, x: Any, indices: Any, values: Any, dim: int) -> Any:
        raise NotImplementedError

    def select_assign(self, x: Any, indices: Any, values: Any, dim: int) -> Any:
        raise NotImplementedError

    def select_reduce(self, x: Any, indices: Any, values: Any, dim: int, reduce: str) -> Any:
        """``x`` with the slices of ``values`` combined into it at ``indices`` (1-d) along
        ``dim`` by ``reduce``, ``"prod"``, ``"amax"`` or ``"amin"``, repeated indices in
        turn (torch's ``scatter_reduce`` with ``include_self=True``; a NaN wins ``amax`` and
        ``amin``): one vectorized kernel, whatever the repeats."""
        raise NotImplementedError

    def nonzero(self, x: Any) -> tuple[Any, ...]:
        """int64 indices of the non-zero (true) elements, one primitive per dimension."""
        raise NotImplementedError

    # -- linear algebra and fused activations -------------------------------------------------
    def matmul(self, x: Any, y: Any) -> Any:
        """Batched matrix product of operands with at least 2 dims, batch dims broadcasting."""
        raise NotImplementedError

    def sparse_coo_mm(self, rows: Any, cols: Any, values: Any, dense: Any, num_rows: int) -> Any:
        """The product of the sparse ``num_rows x dense.shape[0]`` matrix whose nonzeros are
        ``values`` (1-d) at ``(rows, cols)`` (int64, 1-d, in range; repeats add up, as in an
        uncoalesced COO tensor) with the 2-d ``dense``: ``num_rows x dense.shape[1]``, of
        ``dense``'s dtype, which ``values`` shares. This composition of the protocol's gather
        and scatter-add is what a backend without a sparse kernel runs."""
        products = self.mul(self.select(dense, cols, 0), self.reshape(values, (-1, 1)))
        out = self.zeros((num_rows, self.shape(dense)[1]), self.dtype(dense), self.device(dense))
        return self.select_add(out, rows, products, 0)

    def cross(self, x: Any, y: Any, dim: int) -> Any:
        raise NotImplementedError

    def inverse(self, x: Any) -> Any:
        """The inverse of each square matrix of ``x`` ``[..., n, n]`` (LU with pivoting, as
        LAPACK's ``getrf``/``getri``); an exactly singular one raises ``LinAlgError``."""
        raise NotImplementedError

    def pinv(self, x: Any, atol: float, rtol: float) -> Any:
        """The Moore-Penrose pseudo-inverse of each matrix of ``x`` ``[..., m, n]`` from its SVD,
        singular values at most ``max(atol, rtol * largest)`` taken as zero (torch's rule)."""
        raise NotImplementedError

    def softmax(self, x: Any, dim: int) -> Any:
        raise NotImplementedError

    def softmax_backward(self, grad: Any, out: Any, dim: int) -> Any:
        """``out * (grad - sum(grad * out, dim))``: the gradient of ``sum(grad * softmax(x,
        dim))`` in ``x``, from ``out = softmax(x, dim)``. This default composes primitives; on
        the autodiff backend it is recorded, so it differentiates again."""
        return self.mul(out, self.sub(grad, self.sum_dim(self.mul(grad, out), (dim,))))

    def linear(self, x: Any, weight: Any, bias: Any) -> Any:
        """``x @ weight^T + bias`` for ``x`` ``[N, in]``, ``weight`` ``[out, in]``, ``bias``
        ``[out]`` or empty (none): PyTorch's ``addmm``, the bias added in the product's own
        output (a kernel allocates one array, not two)."""
        out = self.matmul(x, self.swap_dims(weight, 0, 1))
        return self.add(out, bias) if self.shape(bias)[0] else out

    # -- the optimizers' updates ------------------------------------------------------------
    # torch.optim's formulas, one kernel per parameter. With ``inplace=True`` a kernel may
    # write the new value into ``value`` and the new state into the state buffers and return
    # them (torch's in-place ``param.add_``): the optimizer passes it only when nothing else
    # references those buffers (:func:`retrograd.optim.optimizers.sole_reference`); with
    # ``inplace=False`` it must not modify them. Either way the results are the same bits.
    def owns_memory(self, x: Any) -> bool:
        """Whether no other primitive shares ``x``'s memory (what the optimizers ask before
        writing into a buffer; Python references to ``x`` itself they count themselves). This
        default says no: nothing is ever written in place."""
        return False

    def write_into(self, kernel: str, x: Any, y: Any, alpha: float | None = None) -> Any:
        """``kernel(x, y)`` written into ``x``'s own memory (torch's in-place ``add_``,
        ``mul_``...), returning ``x``: ``kernel`` is ``add``, ``sub``, ``mul`` or ``div`` (``y`` a
        primitive that broadcasts to ``x``'s shape, of its dtype) or their ``_scalar`` forms
        (``y`` a Python number), and ``x`` then holds the bits ``kernel(x, y)`` returns; with
        ``alpha`` (``add`` and ``sub``, a float), those of ``add_scaled(x, y, alpha)`` (or
        ``-alpha`` for ``sub``; torch's ``add_(y, alpha=alpha)``, one fused multiply-add) for
        floats, of ``kernel(x, mul_scalar(y, alpha))`` for integers. The
        caller makes sure nothing else sees ``x``'s memory
        (:func:`retrograd.tensor.ownership.sole_buffer`). ``None`` where the backend writes
        nothing in place: this default."""
        return None

    def global_norm(self, *values: Any) -> Any:
        """The 2-norm of every entry of ``values`` (one or more float primitives) taken
        as one vector, a 0-d float64 primitive: ``clip_grad_norm_``'s total norm of the
        gradients. This default squares and sums each value in its own dtype, casts the sums
        to float64 and adds them in order, then takes the square root; a backend's kernel
        may accumulate otherwise (one pass per value, without the squares' array), within
        the rounding of the values' dtype (NumPy: each square and sum in float64; torch:
        its own ``_foreach_norm`` and ``vector_norm``, torch's ``clip_grad_norm_``'s bits).
        """
        total = None
        for x in values:
            if self.dtype(x) in COMPLEX_DTYPES:  # the norm of a complex vector: of |z|
                x = self.abs(x)
            part = self.cast(self.sum(self.square(x)), "float64")
            total = part if total is None else self.add(total, part)
        return self.sqrt(total)

    def sgd_update(
        self,
        value: Any,
        grad: Any,
        buffer: Any,
        lr: float,
        momentum: float,
        dampening: float,
        weight_decay: float,
        nesterov: bool,
        inplace: bool,
    ) -> tuple[Any, Any]:
        """One SGD step of a parameter, ``torch.optim.SGD``: ``(new value, new momentum
        buffer)``; ``buffer`` is empty (``[0]``) at the first step and without momentum (then
        the buffer returned is empty too).

        torch's single-tensor loop, line for line: ``d = grad.add(value, alpha=weight_decay)``;
        with momentum ``b = (buffer * momentum).add(d, alpha=1 - dampening)`` (``b = d`` at the
        first step) and ``d = d.add(b, alpha=momentum)`` (Nesterov) or ``d = b``; then
        ``value.add(d, alpha=-lr)``, each ``add`` with ``alpha`` one fused multiply-add
        (:meth:`add_scaled`), as torch's rounds it. Buffers of another dtype than the value's
        take NumPy's promotion, each product rounded apart.
        """
        fused = _one_float_dtype(self, value, grad, buffer)

        def scaled_sum(x: Any, y: Any, alpha: float) -> Any:
            if fused:
                return self.add_scaled(x, y, alpha)
            return self.add(x, self.mul_scalar(y, alpha))

        direction = scaled_sum(grad, value, weight_decay) if weight_decay else grad
        if momentum:
            if self.shape(buffer) == (0,) and self.shape(value) != (0,):
                buffer = direction
            else:
                buffer = scaled_sum(self.mul_scalar(buffer, momentum), direction, 1.0 - dampening)
            direction = scaled_sum(direction, buffer, momentum) if nesterov else buffer
        return scaled_sum(value, direction, -lr), buffer

    def adam_update(
        self,
        value: Any,
        grad: Any,
        first: Any,
        second: Any,
        step: int,
        lr: float,
        beta1: float,
        beta2: float,
        eps: float,
        weight_decay: float,
        decoupled: bool,
        inplace: bool = False,
    ) -> tuple[Any, Any, Any]:
        """One Adam/AdamW step of a parameter, torch's single-tensor ``torch.optim.Adam``
        line for line: ``(new value, first moment, second moment)``.

        With ``weight_decay``: ``value * (1 - lr * weight_decay)`` first when ``decoupled``
        (AdamW), else ``grad.add(value, alpha=weight_decay)``. Then ``m = first.lerp(grad, 1 -
        beta1)``, ``v = (second * beta2).addcmul(grad, grad, value=1 - beta2)``, ``value +
        (-lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)`` (torch's
        ``addcdiv``); ``add(alpha=)``, ``lerp`` and ``addcmul`` each one fused multiply-add, as
        torch's. Buffers of another dtype than the value's take NumPy's promotion, each product
        rounded apart.
        """
        fused = _one_float_dtype(self, value, grad, first, second)
        if weight_decay:
            if decoupled:
                value = self.mul_scalar(value, 1.0 - lr * weight_decay)
            elif fused:
                grad = self.add_scaled(grad, value, weight_decay)
            else:
                grad = self.add(grad, self.mul_scalar(value, weight_decay))
        if fused:
            first = self.lerp_scalar(first, grad, 1.0 - beta1)
            second = self.addcmul(self.mul_scalar(second, beta2), grad, grad, 1.0 - beta2)
        else:
            first = self.add(first, self.mul_scalar(self.sub(grad, first), 1.0 - beta1))
            second = self.add(
                self.mul_scalar(second, beta2), self.mul(self.mul_scalar(grad, 1.0 - beta2), grad)
            )
        step_size = lr / (1.0 - beta1**step)
        denominator = self.add_scalar(
            self.div_scalar(self.sqrt(second), (1.0 - beta2**step) ** 0.5), eps
        )
        update = self.div(self.mul_scalar(first, -step_size), denominator)
        return self.add(value, update), first, second

    def rmsprop_update(
        self,
        value: Any,
        grad: Any,
        square: Any,
        average: Any,
        buffer: Any,
        lr: float,
        alpha: float,
        eps: float,
        weight_decay: float,
        momentum: float,
        centered: bool,
        inplace: bool,
    ) -> tuple[Any, Any, Any, Any]:
        """One RMSprop step, ``torch.optim.RMSprop``: ``(new value, square average, gradient
        average, momentum buffer)``; ``average`` (centered) and ``buffer`` (momentum) are
        empty (``[0]``) where unused, and come back so.

        torch's single-tensor loop, line for line: ``g = grad.add(value, alpha=weight_decay)``;
        ``v = (square * alpha).addcmul(g, g, value=1 - alpha)``; centered, ``a =
        average.lerp(g, 1 - alpha)`` and the denominator ``sqrt(v.addcmul(a, a, value=-1)) +
        eps``, else ``sqrt(v) + eps``; with momentum ``b = buffer * momentum + g /
        denominator`` and ``value.add(b, alpha=-lr)``, else ``value + (-lr) * g /
        denominator``; ``add(alpha=)``, ``lerp`` and ``addcmul`` each one fused multiply-add.
        Buffers of another dtype than the value's take NumPy's promotion, each product
        rounded apart.
        """
        fused = _one_float_dtype(self, value, grad, square, average, buffer)
        if weight_decay:
            if fused:
                grad = self.add_scaled(grad, value, weight_decay)
            else:
                grad = self.add(grad, self.mul_scalar(value, weight_decay))
        square = self.mul_scalar(square, alpha)
        if fused:
            square = self.addcmul(square, grad, grad, 1.0 - alpha)
        else:
            square = self.add(square, self.mul(self.mul_scalar(grad, 1.0 - alpha), grad))
        if centered:
            if fused:
                average = self.lerp_scalar(average, grad, 1.0 - alpha)
                spread = self.addcmul(square, average, average, -1.0)
            else:
                moved = self.mul_scalar(self.sub(grad, average), 1.0 - alpha)
                average = self.add(average, moved)
                spread = self.sub(square, self.mul(average, average))
            denominator = self.add_scalar(self.sqrt(spread), eps)
        else:
            denominator = self.add_scalar(self.sqrt(square), eps)
        if momentum > 0.0:
            buffer = self.add(self.mul_scalar(buffer, momentum), self.div(grad, denominator))
            if fused:
                return self.add_scaled(value, buffer, -lr), square, average, buffer
            return self.sub(value, self.mul_scalar(buffer, lr)), square, average, buffer
        step = self.div(self.mul_scalar(grad, -lr), denominator)
        return self.add(value, step), square, average, buffer

    # -- fused transformer kernels --------------------------------------------------------------
    # Each has a default composed of the primitives above, so every backend has a correct one
    # (and, on the autodiff backend, a recorded one: the defaults of the backward kernels are
    # what ``backward(create_graph=True)`` differentiates); a backend overrides them with fused
    # kernels. An absent ``weight``/``bias``/``mask``/``drop`` is an empty ``[0]`` primitive,
    # as for ``conv``'s bias.
    def layer_norm(self, x: Any, weight: Any, bias: Any, eps: float) -> tuple[Any, Any]:
        """Normalize ``x`` over its last dimension (biased variance), then ``* weight + bias``
        (both ``[D]``, or empty): ``(out, stats)``, ``stats`` = ``[2, *x.shape[:-1]]`` holding
        the mean and ``1 / sqrt(var + eps)`` of each row, for :meth:`layer_norm_backward`."""
        last = len(self.shape(x)) - 1
        mean = self.mean_dim(x, (last,))
        centered = self.sub(x, mean)
        variance = self.mean_dim(self.square(centered), (last,))
        rstd = self.recip(self.sqrt(self.add_scalar(variance, eps)))
        out = self.mul(centered, rstd)
        if self.shape(weight)[0]:
            out = self.mul(out, weight)
        if self.shape(bias)[0]:
            out = self.add(out, bias)
        lead = (1, *self.shape(x)[:-1])
        stats = self.cat([self.reshape(mean, lead), self.reshape(rstd, lead)], 0)
        return out, stats

    def layer_norm_backward(
        self, grad: Any, x: Any, weight: Any, stats: Any, eps: float
    ) -> tuple[Any, Any, Any]:
        """The gradients of ``sum(grad * layer_norm(x, weight, bias, eps)[0])``: ``(dx,
        dweight, dbias)`` (``dweight``/``dbias`` ``[D]``, meaningless for an empty weight).
        ``stats`` is what :meth:`layer_norm` returned; this default recomputes it from ``x``
        instead, so that, recorded, it is differentiable in ``x``."""
        shape = self.shape(x)
        last = len(shape) - 1
        lead = tuple(range(last))
        mean = self.mean_dim(x, (last,))
        centered = self.sub(x, mean)
        variance = self.mean_dim(self.square(centered), (last,))
        rstd = self.recip(self.sqrt(self.add_scalar(variance, eps)))
        normalized = self.mul(centered, rstd)
        dbias = self.reshape(self.sum_dim(grad, lead), shape[-1:]) if lead else grad
        dweight = self.mul(grad, normalized)
        if lead:
            dweight = self.reshape(self.sum_dim(dweight, lead), shape[-1:])
        scaled = self.mul(grad, weight) if self.shape(weight)[0] else grad
        projection = self.mean_dim(self.mul(scaled, normalized), (last,))
        dx = self.sub(
            self.sub(scaled, self.mean_dim(scaled, (last,))), self.mul(normalized, projection)
        )
        return self.mul(dx, rstd), dweight, dbias

    def _attention_scores(self, q, k, mask, scale, causal):
        """``q @ k^T * scale + mask``, causal entries ``-inf``: the defaults' shared part."""
        scores = self.mul_scalar(self.matmul(q, self.swap_dims(k, -1, -2)), scale)
        if self.shape(mask)[0]:
            scores = self.add(scores, mask)
        if causal:
            length, source = self.shape(q)[-2], self.shape(k)[-2]
            device = self.device(q)
            rows = self.reshape(self.arange(0, length, 1, "int64", device), (length, 1))
            cols = self.reshape(self.arange(0, source, 1, "int64", device), (1, source))
            scores = self.mask_fill(scores, self.lower(rows, cols), float("-inf"))
        return scores

    def _attention_probs(self, scores, last):
        """``(softmax(scores), dead)``, ``dead`` the rows whose keys are all masked (``[..., L,
        1]``), their probabilities zero instead of NaN."""
        dead = self.equal_elem(self.max_dim(scores, last)[0], float("-inf"))
        return self.mask_fill(self.softmax(scores, last), dead, 0.0), dead

    def attention(
        self, q: Any, k: Any, v: Any, mask: Any, drop: Any, scale: float, causal: bool
    ) -> tuple[Any, Any]:
        """Scaled dot-product attention, PyTorch's ``scaled_dot_product_attention``:
        ``(out, lse)``, ``out = dropout(softmax(q @ k^T * scale + mask)) @ v``.

        ``q`` is ``[..., L, E]``, ``k`` ``[..., S, E]``, ``v`` ``[..., S, Ev]`` with equal
        leading dimensions; ``mask`` is a float additive mask (``-inf`` where a key is
        masked) broadcastable to ``[..., L, S]`` with as many dims, or empty; ``causal``
        masks key ``j > i`` for query ``i`` (PyTorch's top-left aligned ``tril``); ``drop`` is
        the dropout multiplier (0 or ``1 / (1 - p)``) of shape ``[..., L, S]``, or empty.
        ``lse`` (``[..., L]``) is the log-sum-exp of each row of masked scores, what
        :meth:`attention_backward` needs to recompute the probabilities without keeping them.
        A row whose keys are all masked is zero with zero gradients, as in torch (``lse`` is
        then ``+inf``).
        """
        scores = self._attention_scores(q, k, mask, scale, causal)
        last = len(self.shape(scores)) - 1
        probs, dead = self._attention_probs(scores, last)
        peak = self.max_dim(scores, last)[0]
        peak = self.mask_fill(peak, dead, 0.0)
        lse = self.add(self.log(self.sum_dim(self.exp(self.sub(scores, peak)), (last,))), peak)
        lse = self.mask_fill(lse, dead, float("inf"))
        if self.shape(drop)[0]:
            probs = self.mul(probs, drop)
        out = self.matmul(probs, v)
        return out, self.reshape(lse, self.shape(lse)[:-1])

    def attention_backward(
        self,
        grad: Any,
        q: Any,
        k: Any,
        v: Any,
        out: Any,
        lse: Any,
        mask: Any,
        drop: Any,
        scale: float,
        causal: bool,
    ) -> tuple[Any, Any, Any]:
        """``(dq, dk, dv)``, the gradients of ``sum(grad * attention(q, k, v, ...)[0])``.

        ``out`` and ``lse`` are what :meth:`attention` returned: a fused kernel recomputes the
        probabilities as ``exp(scores - lse)`` and uses ``rowsum(grad * out)`` for the softmax
        term. This default recomputes them from ``q`` and ``k`` (so that, recorded, it is
        differentiable in all its tensor inputs) and reads ``out`` only for that term.
        """
        scores = self._attention_scores(q, k, mask, scale, causal)
        last = len(self.shape(scores)) - 1
        probs = self._attention_probs(scores, last)[0]
        kept = self.mul(probs, drop) if self.shape(drop)[0] else probs
        dv = self.matmul(self.swap_dims(kept, -1, -2), grad)
        dkept = self.matmul(grad, self.swap_dims(v, -1, -2))
        if self.shape(drop)[0]:
            dkept = self.mul(dkept, drop)
        row = self.sum_dim(self.mul(grad, out), (last,))
        dscores = self.mul_scalar(self.mul(probs, self.sub(dkept, row)), scale)
        dq = self.matmul(dscores, k)
        dk = self.matmul(self.swap_dims(dscores, -1, -2), q)
        return dq, dk, dv


#: Protocol methods that compute no tensor (they answer from shapes, dtypes, devices; ``detach``
#: of an inner backend is the identity): what wraps every operation (capture's recording, the
#: profiler's timing) passes them by.
METADATA = frozenset(
    {
        "shape",
        "dtype",
        "same_dtype",
        "has_dtype",
        "device",
        "error_class",
        "detach",
        "arithmetic_warnings_ignored",
    }
)

#: Names of the protocol's tensor operations (everything but data/creation/metadata), the
#: kernels of its bases included.
PROTOCOL_OPS = tuple(
    name for name in dir(Backend) if not name.startswith("_") and callable(getattr(Backend, name))
)


#: the significant bits of the half dtypes; a uniform draw made for one of them is put on its
#: grid k / 2**bits (torch's generator draws them so), where a cast of the float32 draw could
#: round up to 1 and leave [0, 1)
_HALF_UNIFORM_BITS = {"float16": 11, "bfloat16": 8}

# Giles (2010), "Approximating the erfinv function": single-precision coefficients, highest
# power first, of the central (w < 5) and tail branches (:meth:`Backend.erfinv`)
_GILES_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)  # fmt: skip
_GILES_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)  # fmt: skip


def _bounds_of_eps(eps: float, dtype: str) -> tuple[float, float]:
    """torch's ``logit`` bounds ``(eps, 1 - eps)`` as its kernels take them: ``eps`` in the
    dtype, ``1 - eps`` computed there (float32 rounds both)."""
    if dtype != "float32":
        return float(eps), 1.0 - float(eps)
    low = struct.unpack("f", struct.pack("f", float(eps)))[0]
    return low, struct.unpack("f", struct.pack("f", 1.0 - low))[0]


def on_uniform_grid(draws: Any, dtype: str) -> Any:
    """Host uniform ``draws`` (a NumPy array) on [0, 1) for a tensor of ``dtype``: as they are,
    or, for a half dtype, rounded down to values it holds exactly (so still below 1)."""
    bits = _HALF_UNIFORM_BITS.get(str(dtype))
    if bits is None:
        return draws
    scale = float(2**bits)
    return (draws * scale) // 1.0 / scale
