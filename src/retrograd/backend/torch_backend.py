"""The torch backend: torch tensors (CPU or CUDA) as primitives.

``TorchBackend(device)`` implements the protocol of :class:`~retrograd.backend.protocol.Backend`
on torch tensors, following :class:`~retrograd.backend.NumpyBackend`'s conventions exactly
(the reference for every one of them). torch's own autograd is never used: every primitive is
made here from host data, a torch factory or a kernel of tensors that do not require grad, so
no primitive ever has ``requires_grad`` and torch records nothing. (Wrapping each kernel in
``torch.no_grad()`` would cost about a microsecond per op for no effect; tests assert the
invariant instead.) The neural-network kernels are torch's own (:mod:`.torch_nn`).

torch is imported when this module is, and this module only when ``rg.TorchBackend`` is first
used (``retrograd/__init__`` resolves the name lazily), so ``import retrograd`` works without
torch.

Random numbers: on the CPU they are drawn by the NumPy backend's seeded generator, so
``rg.seed(n)`` gives the same values, dropout masks and initial weights on both backends and
tests compare them equal. On a GPU they are drawn there, by a torch generator of the device
(``generator="torch"``, the default off the CPU): a host draw would make every dropout mask on
the CPU and copy it over, each step. The device generator follows the host one: it is seeded
with the host stream's seed whenever that is seeded or restored (``rg.seed``,
``rg.set_rng_state``), so runs repeat, with values of their own. Either choice can be asked
for on any device.

Dtypes: ``float32 float64 int64 int32 int16 int8 uint8 bool`` and the half types
``bfloat16 float16``.

Index checks (:meth:`TorchBackend.check_index_range`) never copy indices to the host on a
device: on CUDA (or with ``deferred_index_checks=True``) each check leaves two device scalars
(whether an index is out of range, and the first bad one) and the error is raised at the next
synchronisation (``to_numpy``, ``any``, :meth:`TorchBackend.synchronize`), as a CUDA
device-side assert would be, but catchable and naming the op.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from ..device import Device
from ..effects import DRAWS
from ..errors import (
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    OutOfMemoryError,
    ShapeError,
    SizeMismatchError,
    UnsupportedDTypeError,
    index_error,
)
from .numpy_backend import GENERATOR, numpy_dtype
from .protocol import (
    COMPLEX_DTYPES,
    COMPLEX_SEEN,
    Backend,
    check_random_allowed,
    complex_draws,
    on_uniform_grid,
    singular_matrix,
)
from .torch_math import TorchMathKernels
from .torch_nn import TorchNNKernels
from .torch_optim import TorchOptimizerKernels
from .torch_rnn import TorchRecurrentKernels

__all__ = ["TorchBackend"]

_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int64": torch.int64,
    "bool": torch.bool,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
}
#: kept apart from ``_DTYPES``: a lookup of one notes that complex tensors exist
_COMPLEX_DTYPES = {"complex64": torch.complex64, "complex128": torch.complex128}
_NAMES = {dtype: name for name, dtype in {**_DTYPES, **_COMPLEX_DTYPES}.items()}
_HALF = ("bfloat16", "float16")
#: the dtypes torch sums and multiplies in int64
_WIDENED = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32)
_FLOATS = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def torch_dtype(dtype: str) -> torch.dtype:
    try:
        return _DTYPES[dtype]
    except KeyError:
        if dtype in _COMPLEX_DTYPES:
            COMPLEX_SEEN[0] = True
            return _COMPLEX_DTYPES[dtype]
        raise DTypeError(
            f"unknown dtype {dtype!r}: expected one of {', '.join(_NAMES.values())}"
        ) from None


def _host_array(data: Any, dtype: str | None) -> np.ndarray:
    """``data`` as a NumPy array in one of the four host dtypes, NumPy backend's rules (a half
    dtype is made from float32 and cast on the device)."""
    from .numpy_backend import _canonical, check_int64_range, floats_of_big_ints

    numpy_data = isinstance(data, np.ndarray | np.generic)
    if numpy_data:
        array = np.array(data, copy=True)
    else:
        array = np.array(data)
    if dtype is None:
        return _canonical(array, data)
    array = floats_of_big_ints(array, dtype)
    if array.dtype.kind == "c" and dtype == "bool":
        # torch's: true where either part is nonzero (1j too); an array even of a 0-d one (a
        # comparison of which is a NumPy scalar)
        return np.asarray(array != 0)
    if array.dtype.kind == "c" and dtype not in COMPLEX_DTYPES and numpy_data:
        array = array.real  # torch casts a NumPy array: its real part (a cast's)
    if array.dtype.kind == "c" and dtype not in COMPLEX_DTYPES:
        raise DTypeError(
            f"tensor: complex data cannot make a {dtype} tensor (torch refuses complex "
            "numbers there); take .real or .abs() of it first"
        )
    if array.dtype.kind not in "biufc":
        check_int64_range(array)
        raise DTypeError(f"tensor: cannot make a tensor from data of dtype {array.dtype}")
    if dtype == "int64":
        check_int64_range(array)
    return array.astype(numpy_dtype("float32" if dtype in _HALF else dtype), copy=False)


def _broadcast_shape(a: tuple, b: tuple) -> tuple:
    """The shape ``a`` and ``b`` broadcast to. ``torch.broadcast_shapes`` runs Python through
    ``torch._refs`` (about 60 us a call on the CPU, four calls in a class-index loss's
    forward and backward); NumPy's takes a few. Shapes that do not broadcast go to torch's
    anyway, for its error."""
    if a == b:
        return tuple(a)
    try:
        return np.broadcast_shapes(a, b)
    except ValueError:
        return torch.broadcast_shapes(a, b)


def _positive_slices(x: torch.Tensor, slices: tuple[slice, ...]) -> tuple[tuple, list[int]]:
    """torch slices take positive steps only: each negative-step slice becomes the positive
    slice over the same elements, and its dimension is returned to be flipped."""
    out, flips = [], []
    for dim, s in enumerate(slices):
        step = 1 if s.step is None else s.step
        if step > 0:
            out.append(s)
            continue
        cells = range(*s.indices(x.shape[dim]))
        if not cells:
            out.append(slice(0, 0))
        else:
            out.append(slice(cells[-1], cells[0] + 1, -step))
            flips.append(dim)
    return tuple(out), flips


#: Deferred index checks held before they are folded into one pair of device vectors.
_MAX_PENDING = 1024


_RECORDED_CHECKS = threading.local()


@contextlib.contextmanager
def checks_recorded() -> Iterator[list[tuple]]:
    """Collect the deferred index checks made in this thread while a CUDA graph is captured,
    instead of leaving them pending: a capture runs no kernel, so their flags hold nothing
    until a replay writes them, and every replay writes the same memory again. Hand the list
    to :func:`checks_replayed` after each replay."""
    entries: list[tuple] = []
    previous = getattr(_RECORDED_CHECKS, "entries", None)
    _RECORDED_CHECKS.entries = entries
    try:
        yield entries
    finally:
        _RECORDED_CHECKS.entries = previous


def checks_replayed(entries: list[tuple]) -> None:
    """Leave a replay's checks pending, as an eager step's are: copies of the graph's flags
    (device copies, no host read), which the next replay does not overwrite."""
    for backend, flag, first, message in entries:
        backend._add_pending(flag.clone(), first.clone(), message)


def _messages(message: Any) -> tuple:
    """A pending entry's message makers: one, or a folded entry's tuple of them."""
    return message if isinstance(message, tuple) else (message,)


def _window(dim: int, index: Any) -> tuple:
    return (slice(None),) * dim + (index,)


_SHAPE_WORDS = (
    "size",
    "shape",
    "dimension",
    "broadcast",
    "must match",
    "cannot be multiplied",
    "mismatch",
    "expected",
)


class TorchBackend(
    TorchMathKernels, TorchNNKernels, TorchRecurrentKernels, TorchOptimizerKernels, Backend
):
    """Tensors as torch tensors on ``device`` (``"cpu"``, ``"cuda"``, ``"cuda:1"``).

    >>> b = TorchBackend("cpu")
    >>> b.add(b.from_data([1.0, 2.0], None, None), b.ones((2,), "float32", None)).tolist()
    [2.0, 3.0]
    """

    name = "torch"

    def __init__(
        self,
        device: str | torch.device = "cpu",
        generator: str | None = None,
        deferred_index_checks: bool | None = None,
    ):
        if isinstance(device, Device):
            device = str(device)
        try:
            self.torch_device = torch.device(device)
        except (RuntimeError, TypeError) as error:  # torch's words, the hierarchy's class
            raise InvalidArgumentError(
                f"TorchBackend: not a device: {device!r} ({str(error).splitlines()[0][:120]})"
            ) from None
        if self.torch_device.type == "cuda" and not torch.cuda.is_available():
            raise InvalidArgumentError(
                f"TorchBackend: device {str(device)!r} is not available "
                f"(torch {torch.__version__}: torch.cuda.is_available() is False)"
            )
        if self.torch_device.type == "cuda" and self.torch_device.index is None:
            self.torch_device = torch.device("cuda", torch.cuda.current_device())
        if generator is None:  # the host's stream on the CPU, the device's elsewhere
            generator = "numpy" if self.torch_device.type == "cpu" else "torch"
        if generator not in ("numpy", "torch"):
            raise InvalidArgumentError(
                f"TorchBackend: generator must be 'numpy' or 'torch', not {generator!r}"
            )
        self.generator = generator
        self._torch_generator: torch.Generator | None = None
        self._generator_epoch = -1  # the host stream's epoch it was seeded at
        self._weak = weakref.ref(self)  # (what effects.DRAWS holds it by)
        self.deferred_index_checks = (
            self.torch_device.type != "cpu"
            if deferred_index_checks is None
            else bool(deferred_index_checks)
        )
        self._pending: list[tuple[torch.Tensor, torch.Tensor, Any]] = []
        self._pending_lock = threading.Lock()
        kind, index = self.torch_device.type, self.torch_device.index or 0
        self.default_device = Device(kind, index)

    def __repr__(self) -> str:
        return f"TorchBackend({str(self.torch_device)!r})"

    def __getstate__(self) -> dict[str, Any]:
        """A pickled backend (inside a module saved whole) carries no lock, pending index
        checks or generator: an unpickled one starts with fresh ones."""
        state = dict(self.__dict__)
        state.update(_pending=[], _pending_lock=None, _torch_generator=None, _generator_epoch=-1)
        state.pop("_weak", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pending_lock = threading.Lock()
        self._weak = weakref.ref(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TorchBackend) and other.torch_device == self.torch_device

    def __hash__(self) -> int:
        return hash((TorchBackend, str(self.torch_device)))

    def _on(self, device: Any) -> torch.device:
        """Where a tensor made for the label ``device`` goes: that GPU for a ``cuda`` label,
        else this backend's device (cpu labels are logical: the in-process engine's cpu:1...)."""
        if device is not None and device.__class__ is Device and device.kind == "cuda":
            return torch.device("cuda", device.index)
        return self.torch_device

    # -- data, creation, metadata -------------------------------------------------------------
    def from_data(self, data, dtype, device):
        if isinstance(data, torch.Tensor):
            if data.is_complex():
                COMPLEX_SEEN[0] = True
            out = data.detach().to(self._on(device), copy=True)
            return out if dtype is None else out.to(torch_dtype(dtype))
        if dtype is None and getattr(data, "dtype", None) == np.float16:
            dtype = "float16"  # a NumPy half array keeps its dtype, as torch.tensor(array)'s
        array = _host_array(data, dtype)
        # ``array`` is a fresh copy (never the user's memory): the CPU tensor may share it.
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make 0-d arrays 1-d)
            array = array.copy()
        out = torch.from_numpy(array).to(self._on(device))
        if dtype in _HALF:
            out = out.to(_DTYPES[dtype])
        return out

    def copy_value(self, x):
        return x.clone()

    def to_numpy(self, x):
        self.synchronize()
        x = x.detach()
        if x.dtype is torch.bfloat16:  # NumPy has no bfloat16: the values, widened exactly
            x = x.float()
        return x.cpu().numpy()

    def shape(self, x):
        # torch's Size, left as it is (a tuple() here would cost 70 ns on each of the ~3.5
        # calls an op makes). Whatever hands a shape back to torch (expand, reshape, zeros,
        # ones, full, slice_backward) passes tuple(shape) instead (18 ns): torch 2.13's
        # argument parser keeps a 67-byte block now and then for a Size argument, referred to
        # by no object, a slow leak a training loop shows (ci124).
        return x.shape

    def dtype(self, x):
        return _NAMES[x.dtype]

    def same_dtype(self, x, y):
        return x.dtype is y.dtype

    def device(self, x):
        return x.device

    def zeros(self, shape, dtype, device):
        return torch.zeros(tuple(shape), dtype=torch_dtype(dtype), device=self._on(device))

    def ones(self, shape, dtype, device):
        return torch.ones(tuple(shape), dtype=torch_dtype(dtype), device=self._on(device))

    def full(self, shape, value, dtype, device):
        return torch.full(tuple(shape), value, dtype=torch_dtype(dtype), device=self._on(device))

    def zeros_like(self, x):
        return torch.zeros_like(x)

    def ones_like(self, x):
        return torch.ones_like(x)

    def eye(self, n, m, dtype, device):
        return torch.eye(n, m, dtype=torch_dtype(dtype), device=self._on(device))

    def arange(self, start, end, step, dtype, device):
        return torch.arange(start, end, step, dtype=torch_dtype(dtype), device=self._on(device))

    def _device_generator(self) -> torch.Generator:
        """The device's generator, reseeded with the host stream's seed whenever that stream
        was seeded or restored since (its epoch moved): ``rg.seed(0)`` made on whichever
        backend is current repeats this backend's draws too."""
        check_random_allowed()
        if self._torch_generator is None:
            self._torch_generator = torch.Generator(self.torch_device)
        if self._generator_epoch != GENERATOR.epoch:
            with GENERATOR.lock:
                epoch, initial = GENERATOR.epoch, GENERATOR.initial
            self._torch_generator.manual_seed(initial)
            self._generator_epoch = epoch
        generator = self._torch_generator
        # (its position noted, for a retried op to put back: effects.DRAWS)
        DRAWS.before_draw(self._weak, blob=generator.get_state())
        return generator

    def restore_position(self, words: list[int], blob: Any) -> None:
        """Return the device's generator to a position :data:`effects.DRAWS` noted."""
        if self._torch_generator is not None:
            self._torch_generator.set_state(blob)

    def random(self, shape, distribution, dtype, device):
        if dtype in COMPLEX_DTYPES:
            return complex_draws(self, shape, distribution, dtype, device)
        target = torch_dtype(dtype)
        if self.generator == "torch":
            make = torch.rand if distribution == "uniform" else torch.randn
            return make(
                shape, dtype=target, device=self.torch_device, generator=self._device_generator()
            )
        # Drawn on the host by the NumPy backend's generator: the same values as NumpyBackend.
        host_dtype = numpy_dtype("float32" if dtype in _HALF else dtype)
        with GENERATOR.lock:
            if distribution == "uniform":
                values = on_uniform_grid(GENERATOR.rng.random(shape, dtype=host_dtype), dtype)
            else:
                values = GENERATOR.rng.standard_normal(shape, dtype=host_dtype)
        return torch.from_numpy(values).to(self._on(device), target)

    def bernoulli(self, shape, p, device):
        if self.generator == "torch":
            draws = torch.rand(shape, device=self.torch_device, generator=self._device_generator())
            return draws < p
        with GENERATOR.lock:
            mask = GENERATOR.rng.random(shape) < p
        return torch.from_numpy(mask).to(self._on(device))

    def seed(self, seed):
        GENERATOR.reseed(seed)  # the device generator follows at its next draw

    def rng_state(self):
        # The host stream's, as torch.get_rng_state is the CPU generator's alone (a
        # generator="torch" device stream is the one torch.cuda.get_rng_state would give).
        return GENERATOR.state_words()

    def set_rng_state(self, words):
        GENERATOR.set_state_words(words)

    def cast(self, x, dtype):
        if x.is_complex() and dtype == "bool":
            return x != 0  # (torch's own cast: true where either part is nonzero)
        if x.is_complex() and dtype not in COMPLEX_DTYPES:
            x = x.real  # the real part, as torch's cast keeps (without its warning)
        return x.to(torch_dtype(dtype))

    def bitcast(self, x, dtype):
        return x.clone(memory_format=torch.contiguous_format).view(torch_dtype(dtype))

    def to_device(self, x, device):
        device = Device(device)
        if device.kind == "cuda":
            return x.to(torch.device("cuda", device.index))
        return x  # cpu labels are logical (the in-process engine's cpu:0, cpu:1...)

    def detach(self, x):
        return x  # (a plain value has no graph)

    def any(self, x):
        self.synchronize()
        return bool(x.any())

    def memory_allocated(self):
        # CUDA memory comes from torch's caching allocator, which tracemalloc cannot see: its
        # counters are exact. torch's CPU allocator keeps none (and tracemalloc sees no torch
        # CPU tensor either), so on the CPU this says None like the host backends.
        if self.torch_device.type != "cuda":
            return None
        device = self.torch_device
        return torch.cuda.memory_allocated(device), torch.cuda.max_memory_allocated(device)

    def reset_peak_memory(self):
        if self.torch_device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.torch_device)

    # -- validation and errors ----------------------------------------------------------------
    def check_index_range(self, indices, size, message, ignore=None):
        if not indices.numel():
            return
        if not self.deferred_index_checks and self._all_in_range(indices, size):
            return
        bad = (indices < 0) | (indices >= size)
        if ignore is not None:
            bad &= indices != ignore
        if not self.deferred_index_checks:
            if bad.any():
                raise index_error(message(int(indices[bad].flatten()[0])))
            return
        self._defer(bad, indices, message)

    @staticmethod
    def _all_in_range(indices: torch.Tensor, size: int) -> bool:
        """Whether every index lies in ``[0, size)``, from one ``aminmax``: on the CPU that
        read is a few microseconds, where building the mask of bad entries and asking it
        ``any`` is three kernels and about 25 us on a batch's targets (a class-index loss
        checks its targets every step). The mask is still built when this says no: for the
        ``ignore`` entries, and for the first bad value the message names."""
        lowest, highest = torch.aminmax(indices)
        return int(lowest) >= 0 and int(highest) < size

    def _defer(self, bad: torch.Tensor, indices: torch.Tensor, message: Any) -> None:
        """Keep a failed-check flag and the first bad index as device tensors, read at the
        next synchronisation. The first bad index is taken with ``index_select`` on a
        one-element index: indexing with the 0-d ``argmax`` would read it on the host."""
        flat = bad.flatten()
        where = torch.argmax(flat.to(torch.uint8)).reshape(1)
        first = indices.flatten().index_select(0, where)
        recording = getattr(_RECORDED_CHECKS, "entries", None)
        if recording is not None:  # a graph's capture: its replays make these values
            recording.append((self, flat.any().reshape(1), first, message))
            return
        self._add_pending(flat.any().reshape(1), first, message)

    def _add_pending(self, flag: torch.Tensor, first: torch.Tensor, message: Any) -> None:
        with self._pending_lock:
            self._pending.append((flag, first, message))
            full = len(self._pending) > _MAX_PENDING
        if full:
            self._settle()

    def _settle(self) -> None:
        """Settle the pending checks once there are ``_MAX_PENDING`` of them: one host read
        (the first failure raised, as :meth:`synchronize` does), so a loop that never reads a
        value back holds a bounded number of checks and raises within a bounded number of
        steps: a training step makes a handful of checks, so one read in a hundred steps or
        more, not one a step. Folding them on the device instead kept every message maker
        (the fold grew each time: the cost of a check grew with the steps run). While a CUDA
        graph is being captured a host read is not allowed: there they are folded."""
        if self.torch_device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            with self._pending_lock:
                self._compact()
            return
        self.synchronize()

    def _in_range(self, op: str, indices: torch.Tensor, size: int, dim: int) -> torch.Tensor:
        """The indices a kernel may read. On the CPU, torch's kernels raise for an index out
        of range (an ``IndexError`` or ``RuntimeError`` the hierarchy maps). On a device
        (``deferred_index_checks``) its kernels would stop at a device-side assert, which
        leaves the CUDA context unusable for every later call of the process: there, an out
        of range index is recorded as a deferred check (raised at the next synchronisation,
        naming the op) and clamped into range, so the kernel runs and nothing is corrupted.
        The ops above the backend check their indices first with their own messages; this
        guard covers every caller of the protocol's index kernels."""
        if not self.deferred_index_checks or not indices.numel():
            return indices

        def message(value, op=op, size=size, dim=dim):
            return f"{op}: index {value} is out of range for dimension {dim} of size {size}"

        self.check_index_range(indices, size, message)  # deferred here: no host read
        return indices.clamp(0, max(size - 1, 0))

    def _compact(self) -> None:
        """Fold the pending checks' device scalars into one pair of vectors (a device op, no
        sync): for a CUDA graph's capture, where :meth:`_settle` may not read."""
        flags = torch.cat([flag for flag, _, _ in self._pending])
        firsts = torch.cat([first for _, first, _ in self._pending])
        messages = [m for _, _, message in self._pending for m in _messages(message)]
        self._pending = [(flags, firsts, tuple(messages))]

    def synchronize(self) -> None:
        """Raise the first failed deferred index check (one host read for all pending)."""
        if not self._pending:
            return
        with self._pending_lock:
            pending, self._pending = self._pending, []
        flags = torch.cat([flag for flag, _, _ in pending]).cpu()
        if not bool(flags.any()):
            return
        which = int(torch.argmax(flags.to(torch.uint8)))
        firsts = torch.cat([first for _, first, _ in pending])
        messages = [m for _, _, message in pending for m in _messages(message)]
        raise index_error(messages[which](int(firsts[which].cpu())))

    def error_class(self, error):
        if isinstance(error, MemoryError):
            return OutOfMemoryError
        if isinstance(error, IndexError):
            return IndexOutOfRangeError
        if isinstance(error, TypeError):
            return DTypeError
        if isinstance(error, ValueError):
            return ShapeError
        if isinstance(error, RuntimeError | NotImplementedError):
            text = str(error)
            lowered = text.lower()
            # the allocator's refusal of a result no machine holds (torch.OutOfMemoryError
            # on a device, a RuntimeError from the CPU allocator)
            if "allocate memory" in lowered or "out of memory" in lowered:
                return OutOfMemoryError
            if "out of bounds" in lowered or "out of range" in lowered:
                return IndexOutOfRangeError
            if "not implemented for" in lowered:  # (a kernel without the dtype: both classes)
                return UnsupportedDTypeError
            if "dtype" in lowered or "scalar type" in lowered:
                return DTypeError
            if "bool" in lowered and "not supported" in lowered:  # bool - bool, -bool
                return DTypeError
            if "unsupported range" in lowered or "without overflow" in lowered:  # nan, inf
                return InvalidArgumentError
            if any(word in lowered for word in _SHAPE_WORDS):
                return SizeMismatchError  # (a ShapeError, and torch's RuntimeError)
        return None

    # -- complex numbers -----------------------------------------------------------------------
    def real(self, x):
        return x.real.clone()

    def imag(self, x):
        return x.imag.clone()

    def conj(self, x):
        return x.conj().resolve_conj()

    def complex(self, re, im):
        COMPLEX_SEEN[0] = True
        return torch.complex(re, im)

    def fftn(self, x, dims, inverse, norm):
        if not dims:
            return x.clone()
        transform = torch.fft.ifftn if inverse else torch.fft.fftn
        return transform(x, dim=dims, norm=norm)

    def rfftn(self, x, dims, norm):
        return torch.fft.rfftn(x, dim=dims, norm=norm)

    # -- elementwise binary -------------------------------------------------------------------
    add = staticmethod(torch.add)
    sub = staticmethod(torch.sub)
    mul = staticmethod(torch.mul)
    div = staticmethod(torch.true_divide)
    pow = staticmethod(torch.pow)
    remainder = staticmethod(torch.remainder)
    atan2 = staticmethod(torch.atan2)
    hypot = staticmethod(torch.hypot)

    lerp = staticmethod(torch.lerp)
    # (torch's sqrt is not correctly rounded on every CPU, its rsqrt is 1 / the rounded sqrt)
    rsqrt = staticmethod(torch.rsqrt)

    @staticmethod
    def add_scaled(x, y, alpha):
        return torch.add(x, y, alpha=alpha)

    @staticmethod
    def addcmul(x, t1, t2, value):
        return torch.addcmul(x, t1, t2, value=value)

    add_scalar = staticmethod(torch.add)
    sub_scalar = staticmethod(torch.sub)
    mul_scalar = staticmethod(torch.mul)
    div_scalar = staticmethod(torch.true_divide)
    pow_scalar = staticmethod(torch.pow)
    remainder_scalar = staticmethod(torch.remainder)

    def rsub_scalar(self, x, s):
        return torch.rsub(x, s)

    def rdiv_scalar(self, x, s):
        return s / x

    def rpow_scalar(self, x, s):
        return torch.pow(s, x)

    def rremainder_scalar(self, x, s):
        return torch.remainder(s, x)

    # -- elementwise unary --------------------------------------------------------------------
    neg = staticmethod(torch.neg)
    abs = staticmethod(torch.abs)
    exp = staticmethod(torch.exp)
    expm1 = staticmethod(torch.expm1)
    log = staticmethod(torch.log)
    log1p = staticmethod(torch.log1p)
    log2 = staticmethod(torch.log2)
    log10 = staticmethod(torch.log10)
    exp2 = staticmethod(torch.exp2)

    # torch's backward kernels (a fused multiply-add inside, which composed ops cannot round as)
    tanh_backward = staticmethod(torch.ops.aten.tanh_backward)
    silu_backward = staticmethod(torch.ops.aten.silu_backward)
    mish_backward = staticmethod(torch.ops.aten.mish_backward)

    def elu(self, x, alpha, input_scale, scale=1.0, rule_input_scale=None):
        return torch.ops.aten.elu(x, alpha, scale, input_scale)

    def elu_backward(self, grad, x, alpha, input_scale, scale=1.0):
        return torch.ops.aten.elu_backward(grad, alpha, scale, input_scale, False, x)

    def softplus_threshold(self, x, beta, threshold):
        return torch.nn.functional.softplus(x, beta, threshold)

    def softplus_backward(self, grad, x, beta, threshold):
        return torch.ops.aten.softplus_backward(grad, x, beta, threshold)

    def log_sigmoid_backward(self, grad, x):
        # torch's kernel reads the forward's buffer, exp(-|x|) as its own vectorized exp
        # rounds it (not as torch.exp does): recomputed here rather than held beside x
        _, buffer = torch.ops.aten.log_sigmoid_forward(x)
        return torch.ops.aten.log_sigmoid_backward(grad, x, buffer)

    mish = staticmethod(torch.nn.functional.mish)

    def gelu_tanh(self, x):
        return torch.nn.functional.gelu(x, approximate="tanh")

    def gelu_tanh_backward(self, grad, x):
        return torch.ops.aten.gelu_backward(grad, x, approximate="tanh")

    # (torch's vectorized loops and their scalar tails differ at NaN: the kernels themselves
    # give torch's gradient at each position)
    hardswish_backward = staticmethod(torch.ops.aten.hardswish_backward)

    def hardtanh_backward(self, grad, out, lo, hi):
        # torch's reads x; the output, clamped, is at or beyond a bound exactly where x is,
        # where the bounds are the dtype's: a 16-bit kernel compares in float32 with the
        # bounds unrounded (the clamped 0.9 of float16, 0.8999, is below 0.9)
        if out.dtype not in (torch.float32, torch.float64):
            return super().hardtanh_backward(grad, out, lo, hi)
        return torch.ops.aten.hardtanh_backward(grad, out, lo, hi)

    # torch's kernels where the protocol's defaults compose others: torch's own roundings
    sinc = staticmethod(torch.sinc)
    erfinv = staticmethod(torch.erfinv)

    @staticmethod
    def logit(x, eps):
        return torch.logit(x, eps)

    @staticmethod
    def logit_backward(grad, x, eps):
        return torch.ops.aten.logit_backward(grad, x, eps)

    def binary_cross_entropy(self, x, y):
        if self.deferred_index_checks:
            # the range check above the backend is deferred to the next host read, and
            # torch's kernel would raise now (its own error, a synchronisation on a GPU): a
            # probability outside [0, 1] or NaN gives NaN here, that check the error
            x = torch.where((x >= 0) & (x <= 1), x, torch.nan)
            return super().binary_cross_entropy(x, y)
        return torch.ops.aten.binary_cross_entropy(x, y, None, 0)  # (0: reduction "none")

    def logaddexp(self, x, y, scale):
        # torch's kernels (scale 1, or log 2 for logaddexp2: the only two the tensor API uses)
        return torch.logaddexp(x, y) if scale == 1.0 else torch.logaddexp2(x, y)

    sqrt = staticmethod(torch.sqrt)
    square = staticmethod(torch.square)
    recip = staticmethod(torch.reciprocal)
    sin = staticmethod(torch.sin)
    cos = staticmethod(torch.cos)
    tan = staticmethod(torch.tan)
    sinh = staticmethod(torch.sinh)
    cosh = staticmethod(torch.cosh)
    tanh = staticmethod(torch.tanh)
    asin = staticmethod(torch.asin)
    acos = staticmethod(torch.acos)
    atan = staticmethod(torch.atan)
    asinh = staticmethod(torch.asinh)
    acosh = staticmethod(torch.acosh)
    atanh = staticmethod(torch.atanh)
    erf = staticmethod(torch.erf)
    sign = staticmethod(torch.sign)
    round = staticmethod(torch.round)
    floor = staticmethod(torch.floor)
    ceil = staticmethod(torch.ceil)
    trunc = staticmethod(torch.trunc)
    sigmoid = staticmethod(torch.sigmoid)
    log_sigmoid = staticmethod(torch.nn.functional.logsigmoid)
    relu = staticmethod(torch.relu)

    def relu_backward(self, grad, out):
        return torch.ops.aten.threshold_backward(grad, out, 0)

    silu = staticmethod(torch.nn.functional.silu)

    def gelu(self, x):
        return torch.nn.functional.gelu(x)

    # -- the engine's own kernels (gradient sums) ---------------------------
    def slice_backward(self, grad, shape, slices):
        out = grad.new_zeros(tuple(shape))
        positive, flips = _positive_slices(out, slices)
        out[positive] = torch.flip(grad, flips) if flips else grad
        return out

    # the engine's own gradient sums (see the protocol): added into in place
    def slice_accumulate(self, acc, grad, slices):
        if grad.dtype != acc.dtype or not acc.is_contiguous():
            return super().slice_accumulate(acc, grad, slices)
        positive, flips = _positive_slices(acc, slices)
        acc[positive] += torch.flip(grad, flips) if flips else grad
        return acc

    def accumulate(self, acc, value):
        if value.dtype != acc.dtype or value.shape != acc.shape or not acc.is_contiguous():
            return super().accumulate(acc, value)
        return acc.add_(value)

    def softplus(self, x, beta):
        # NumPy backend's formula, exact for every input (torch's threshold switches to x).
        scaled = x * beta if beta != 1 else x
        out = torch.clamp_min(scaled, 0) + torch.log1p(torch.exp(-torch.abs(scaled)))
        return out / beta if beta != 1 else out

    def leaky_relu(self, x, slope):
        return torch.where(x > 0, x, x * slope)

    def clamp(self, x, lo, hi):
        if lo is None and hi is None:
            return x
        return torch.clamp(x, lo, hi)

    # -- comparisons and logic ----------------------------------------------------------------
    equal = equal_elem = staticmethod(torch.eq)
    not_equal = not_equal_elem = staticmethod(torch.ne)
    greater = greater_elem = staticmethod(torch.gt)
    greater_equal = greater_equal_elem = staticmethod(torch.ge)
    lower = lower_elem = staticmethod(torch.lt)
    lower_equal = lower_equal_elem = staticmethod(torch.le)
    is_nan = staticmethod(torch.isnan)
    is_inf = staticmethod(torch.isinf)
    logical_not = staticmethod(torch.logical_not)
    logical_and = staticmethod(torch.logical_and)
    logical_or = staticmethod(torch.logical_or)

    # -- selection ----------------------------------------------------------------------------
    def mask_where(self, x, mask, values):
        return torch.where(mask, values, x)

    def mask_fill(self, x, mask, value):
        shape = _broadcast_shape(x.shape, mask.shape)
        if shape != x.shape:  # masked_fill broadcasts the mask only; np.where both
            x = x.expand(shape)
        return x.masked_fill(mask, value)

    # -- reductions ---------------------------------------------------------------------------
    def norm2(self, x, dims):
        # torch's own 2-norm kernel: the protocol's sqrt of a sum of squares rounded 1 ulp
        # off it (7 December), and every norm, normalize, cdist and clip_grad_norm_ with it
        return torch.linalg.vector_norm(x, 2.0, dim=dims, keepdim=True)

    def vector_norm(self, x, order, dims):
        # torch's own norm kernel (its accumulation order and its pow)
        return torch.linalg.vector_norm(x, order, dim=dims, keepdim=True)

    def sum(self, x):
        return torch.sum(x)

    def sum_dim(self, x, dims):
        if not dims:  # torch sums over every dimension for dim=(); NumPy over none
            return x.to(torch.int64) if x.dtype in _WIDENED else x
        return torch.sum(x, dim=dims, keepdim=True)

    def mean(self, x):
        return torch.mean(x)

    def mean_dim(self, x, dims):
        if not dims:
            return x
        return torch.mean(x, dim=dims, keepdim=True)

    def prod(self, x):
        return torch.prod(x)

    def prod_dim(self, x, dim):
        return torch.prod(x, dim, keepdim=True)

    def max(self, x):
        return torch.amax(x) if x.numel() else torch.max(x)

    def min(self, x):
        return torch.amin(x) if x.numel() else torch.min(x)

    def max_dim(self, x, dim):
        indices = self.argmax(x, dim)
        return torch.gather(x, dim, indices), indices

    def min_dim(self, x, dim):
        indices = self.argmin(x, dim)
        return torch.gather(x, dim, indices), indices

    def argmax(self, x, dim):
        # torch documents argmax's tie rule (the first maximum), not max(dim)'s.
        return torch.argmax(x.to(torch.uint8) if x.dtype is torch.bool else x, dim, keepdim=True)

    def argmin(self, x, dim):
        return torch.argmin(x.to(torch.uint8) if x.dtype is torch.bool else x, dim, keepdim=True)

    # -- cumulative, sorting ------------------------------------------------------------------
    def cumsum(self, x, dim):
        return torch.cumsum(x, dim)

    def cumprod(self, x, dim):
        return torch.cumprod(x, dim)

    def cummax(self, x, dim):
        values, indices = torch.cummax(x, dim)
        return values, indices

    def cummin(self, x, dim):
        values, indices = torch.cummin(x, dim)
        return values, indices

    def logcumsumexp(self, x, dim):
        return torch.logcumsumexp(x, dim)

    def sort(self, x, dim, descending):
        values, indices = torch.sort(x, dim=dim, descending=descending, stable=True)
        return values, indices

    def topk(self, x, k, dim, largest=True, sorted=True):  # noqa: A002 (torch's name)
        values, indices = torch.topk(x, k, dim, largest, sorted)
        return values, indices

    # -- shape --------------------------------------------------------------------------------
    def reshape(self, x, shape):
        return torch.reshape(x, tuple(shape))

    def permute(self, x, dims):
        return torch.permute(x, dims)

    def swap_dims(self, x, a, b):
        return torch.transpose(x, a, b)

    def flip(self, x, dims):
        return torch.flip(x, dims) if dims else x

    def expand(self, x, shape):
        return x.expand(tuple(shape))  # (a tuple, not a Size: see shape())

    def slice(self, x, slices):
        positive, flips = _positive_slices(x, slices)
        out = x[positive]
        return torch.flip(out, flips) if flips else out

    def slice_assign(self, x, values, slices):
        positive, flips = _positive_slices(x, slices)
        out = x.clone()
        if flips:
            region = out[positive].shape
            values = torch.flip(values.expand(region), flips)
        out[positive] = values
        return out

    def cat(self, xs, dim):
        return torch.cat(list(xs), dim)

    def repeat_dim(self, x, dim, times):
        reps = [1] * x.ndim
        reps[dim] = times
        return x.repeat(reps)

    def unfold(self, x, dim, size, step):
        return x.unfold(dim, size, step)

    def fold(self, x, dim, size, step, length):
        count = x.shape[dim]
        shape = list(x.shape[:-1])
        shape[dim] = length
        out = x.new_zeros(shape)
        for k in range(size):
            out[_window(dim, slice(k, k + step * (count - 1) + 1, step))] += x[..., k]
        return out

    # -- indexing -----------------------------------------------------------------------------
    def gather(self, x, indices, dim):
        return torch.gather(x, dim, self._in_range("gather", indices, x.shape[dim], dim))

    def scatter_add(self, x, indices, values, dim):
        indices = self._in_range("scatter_add", indices, x.shape[dim], dim)
        return torch.scatter_add(x, dim, indices, values)

    def scatter_assign(self, x, indices, values, dim):
        indices = self._in_range("scatter", indices, x.shape[dim], dim)
        return torch.scatter(x, dim, indices, values)

    def select(self, x, indices, dim):
        indices = self._in_range("select", indices, x.shape[dim], dim)
        if indices.ndim == 1:
            return torch.index_select(x, dim, indices)
        out = torch.index_select(x, dim, indices.reshape(-1))  # np.take's n-d indices
        return out.reshape(x.shape[:dim] + indices.shape + x.shape[dim + 1 :])

    def select_add(self, x, indices, values, dim):
        indices = self._in_range("select_add", indices, x.shape[dim], dim)
        return torch.index_add(x, dim, indices, values)

    def select_assign(self, x, indices, values, dim):
        indices = self._in_range("select_assign", indices, x.shape[dim], dim)
        out = x.clone()
        out[_window(dim, indices)] = values
        return out

    def select_reduce(self, x, indices, values, dim, reduce):
        indices = self._in_range("select_reduce", indices, x.shape[dim], dim)
        shape = [1] * values.ndim
        shape[dim] = -1
        spread = indices.reshape(shape).expand(values.shape)
        return torch.scatter_reduce(x, dim, spread, values, reduce, include_self=True)

    def nonzero(self, x):
        return torch.nonzero(x, as_tuple=True)

    # -- linear algebra and fused activations -------------------------------------------------
    matmul = staticmethod(torch.matmul)

    def sparse_coo_mm(self, rows, cols, values, dense, num_rows):
        if dense.dtype in (torch.float32, torch.float64) and values.dtype == dense.dtype:
            # (the indices are checked where the tensor is made; torch warns unless told)
            matrix = torch.sparse_coo_tensor(
                torch.stack((rows, cols)),
                values,
                (num_rows, dense.shape[0]),
                check_invariants=False,
            )
            return torch.sparse.mm(matrix, dense)
        out = torch.zeros((num_rows, dense.shape[1]), dtype=dense.dtype, device=dense.device)
        return out.index_add_(0, rows, values[:, None] * dense[cols])

    def cross(self, x, y, dim):
        shape = _broadcast_shape(x.shape, y.shape)
        return torch.linalg.cross(x.expand(shape), y.expand(shape), dim=dim)

    def inverse(self, x):
        try:
            return torch.linalg.inv(x)
        except torch.linalg.LinAlgError:
            raise singular_matrix("inverse", tuple(x.shape)) from None

    def pinv(self, x, atol, rtol):
        return torch.linalg.pinv(x, atol=atol, rtol=rtol)

    def softmax(self, x, dim):
        return torch.softmax(x, dim)

    def softmax_backward(self, grad, out, dim):
        # one kernel and one array, where the protocol's default makes four (mul, sum, sub, mul)
        if grad.dtype != out.dtype or grad.shape != out.shape:
            return super().softmax_backward(grad, out, dim)
        return torch._softmax_backward_data(grad, out, dim, out.dtype)

    def log_softmax(self, x, dim):
        return torch.log_softmax(x, dim)

    def log_softmax_backward(self, grad, out, dim):
        # one kernel and one array, where the protocol's default makes four (exp, sum, mul, sub)
        if grad.dtype != out.dtype:
            return super().log_softmax_backward(grad, out, dim)
        return torch._log_softmax_backward_data(grad, out, dim, out.dtype)


def _check_protocol() -> None:
    missing = [
        name
        for name in dir(Backend)
        if not name.startswith("_")
        and name not in Backend.OPTIONAL
        and callable(getattr(Backend, name))
        and getattr(TorchBackend, name) is getattr(Backend, name)
    ]
    if missing:
        raise TypeError(f"TorchBackend lacks protocol methods: {missing}")


_check_protocol()
