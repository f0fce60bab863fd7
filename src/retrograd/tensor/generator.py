"""``rg.Generator``: a random stream of its own, as ``torch.Generator``, for the ``generator=``
argument of ``rand``, ``randn``, ``randint``, ``randperm``, ``normal``, the in-place random
fills, the data samplers and ``random_split``.

Draws are made on the host by NumPy's PCG64, seeded by ``manual_seed``, with the same calls the
NumPy backend's process-wide stream makes, then copied to the tensor's backend and device. So a
generator seeded with ``s`` gives the draws ``rg.manual_seed(s)`` gives the global stream
(on the NumPy backend), and drawing from a generator leaves the global stream where it was, as
in torch. The numbers differ from torch's (another algorithm, as ``rg.manual_seed``'s).

>>> import retrograd as rg
>>> g = rg.Generator().manual_seed(3)
>>> first = rg.randperm(5, generator=g).tolist()
>>> first == rg.randperm(5, generator=rg.Generator().manual_seed(3)).tolist()
True
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..backend.protocol import check_random_allowed, on_uniform_grid
from ..context import current_backend
from ..device import Device
from ..effects import DRAWS, pcg64_state, pcg64_words
from ..errors import DTypeError, InvalidArgumentError, check_iterable, guard
from . import creation
from ._dispatch import TensorBase
from .creation import tensor

__all__ = [
    "Generator",
    "default_generator",
    "fork_rng",
    "get_rng_state",
    "initial_seed",
    "manual_seed",
    "random_namespace",
    "set_rng_state",
    "thread_safe_generator",
]

#: torch's default seed of a new ``torch.Generator()``
DEFAULT_SEED = 67280421310721
_STATE_WORDS = 10  # PCG64: state and increment (128 bits each, as 4 x 32), has_uint32, uinteger


def checked_seed(op: str, seed: Any) -> int:
    """``seed`` as the 64-bit value the stream starts from: an int (a NumPy one too, not a
    bool) of torch's range, ``-2**63`` to ``2**64 - 1`` (a negative one wraps to 64 bits, as
    torch's); outside it torch raises "Overflow when unpacking long long", a ``ValueError``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise InvalidArgumentError(f"{op}: expected an int, got {seed!r}")
    if not -(2**63) <= int(seed) < 2**64:
        raise InvalidArgumentError(
            f"{op}: seed {int(seed)} is out of the 64-bit range a generator takes "
            "(-2**63 to 2**64 - 1)"
        )
    return int(seed) % 2**64


def checked_state_words(op: str, new_state: Any, count: int, source: str) -> np.ndarray:
    """The words of a state ``source`` gave (``count`` int64 values, or the other length of
    the two, a generator's 10 and the global stream's 12, which holds the seed too: torch's
    states of both have one form, and ``g.set_state(torch.get_rng_state())`` copies the
    global stream into a generator): anything else is
    refused before the stream changes, a tensor of another kind (torch's uint8 state, a list)
    with a ``DTypeError`` (torch's ``TypeError``), a damaged one (words outside 32 bits, an
    even PCG64 increment, which no state of NumPy's PCG64 has and which would draw a
    degenerate stream) with an ``InvalidArgumentError``."""
    expected = f"the int64 tensor of {count} values that {source} returns"
    if not isinstance(new_state, TensorBase | np.ndarray):
        raise DTypeError(f"{op}: expected {expected}, got {type(new_state).__name__}")
    words = np.asarray(new_state.numpy() if isinstance(new_state, TensorBase) else new_state)
    if words.dtype != np.int64:
        raise DTypeError(f"{op}: expected {expected}, got a {words.dtype} tensor")
    if words.shape not in ((_STATE_WORDS,), (_RNG_STATE_WORDS,)):
        raise InvalidArgumentError(f"{op}: expected {expected}, got shape {list(words.shape)}")
    if ((words < 0) | (words >= 2**32)).any() or words[4] % 2 == 0 or words[8] not in (0, 1):
        raise InvalidArgumentError(
            f"{op}: {words.tolist()} is not a state {source} returns (each word is 32 bits, "
            "the increment odd): damaged, or made by hand"
        )
    return words


class Generator:
    """A seeded stream of random numbers (``torch.Generator``'s methods: ``manual_seed``,
    ``seed``, ``initial_seed``, ``get_state``, ``set_state``, ``device``)."""

    def __init__(self, device: Any = "cpu") -> None:
        self.device = Device(device)
        self._lock = threading.Lock()
        self._weak = weakref.ref(self)  # (what effects.DRAWS holds it by)
        self.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed: int) -> Generator:
        """Restart the stream from ``seed`` (negative seeds wrap to 64 bits, as torch's)."""
        seed = checked_seed("Generator.manual_seed", seed)
        with self._lock:
            self._initial = seed
            self._rng = np.random.default_rng(self._initial)
        return self

    def seed(self) -> int:
        """Restart the stream from a fresh non-deterministic seed, and return it."""
        fresh = int(np.random.SeedSequence().entropy) % 2**63
        self.manual_seed(fresh)
        return fresh

    def initial_seed(self) -> int:
        """The seed the stream last started from."""
        return self._initial

    def get_state(self) -> Any:
        """The stream's position, as an int64 tensor for :meth:`set_state` (torch gives a
        uint8 tensor of its own algorithm's state; the two do not mix)."""
        with self._lock:
            state = self._rng.bit_generator.state
        words = []
        for value in (state["state"]["state"], state["state"]["inc"]):
            words += [(value >> (32 * k)) & 0xFFFFFFFF for k in range(4)]
        words += [int(state["has_uint32"]), int(state["uinteger"])]
        return tensor(np.array(words, dtype=np.int64))

    def set_state(self, new_state: Any) -> Generator:
        """Return the stream to a position :meth:`get_state` gave."""
        words = checked_state_words("Generator.set_state", new_state, _STATE_WORDS, "get_state")
        ints = [int(w) for w in words]
        seed = ints[10] | (ints[11] << 32) if len(ints) == _RNG_STATE_WORDS else None
        state = {
            "bit_generator": "PCG64",
            "state": {
                "state": sum(ints[k] << (32 * k) for k in range(4)),
                "inc": sum(ints[4 + k] << (32 * k) for k in range(4)),
            },
            "has_uint32": ints[8],
            "uinteger": ints[9],
        }
        with self._lock:
            self._rng.bit_generator.state = state
            if seed is not None:  # the global stream's state carries its seed
                self._initial = seed
        return self

    def draws(self, shape: Sequence[int], distribution: str, dtype: str) -> np.ndarray:
        """Host draws of ``shape`` (float32 for the half dtypes, cast when copied)."""
        check_random_allowed()
        np_dtype = np.float64 if dtype == "float64" else np.float32
        with self._lock:
            DRAWS.before_draw(self._weak, pcg64_words(self._rng.bit_generator))
            if distribution == "uniform":
                return on_uniform_grid(self._rng.random(tuple(shape), dtype=np_dtype), dtype)
            return self._rng.standard_normal(tuple(shape), dtype=np_dtype)

    def restore_position(self, words: list[int], blob: object) -> None:
        """Return to a position :data:`effects.DRAWS` noted (a retried op's draws undone)."""
        with self._lock:
            self._rng.bit_generator.state = pcg64_state(words)

    def clone_state(self) -> Generator:
        """A new generator at this one's position (torch's ``clone_state``): both then draw
        the same numbers, each from its own stream."""
        clone = Generator.__new__(Generator)
        clone.__setstate__(self.__getstate__())
        return clone

    def __getstate__(self) -> dict[str, Any]:
        # pickling and ``copy.deepcopy`` carry the position, as torch's generators do (a
        # sampler or dataset holding one is copied into DataLoader workers), not the lock
        with self._lock:
            position = self._rng.bit_generator.state
        return {"device": str(self.device), "initial_seed": self._initial, "state": position}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.device = Device(state["device"])
        self._lock = threading.Lock()
        self._weak = weakref.ref(self)  # (what effects.DRAWS holds it by)
        self._initial = state["initial_seed"]
        self._rng = np.random.default_rng(self._initial)
        self._rng.bit_generator.state = state["state"]

    def __repr__(self) -> str:
        return f"Generator(device={str(self.device)!r}, initial_seed={self._initial})"


# -- the process-wide stream (the one ``rg.manual_seed`` seeds): torch.random's names ---------
_RNG_STATE_WORDS = 12  # the backend's words: PCG64's position, then the initial seed


def get_rng_state() -> Any:
    """The position of the stream ``rg.manual_seed`` seeds, as an int64 tensor of 12 values
    :func:`set_rng_state` takes back (``rg.save`` stores it). torch's is a uint8 tensor of its
    own algorithm's state; the two do not mix."""
    return tensor(np.asarray(current_backend().rng_state(), dtype=np.int64))


def set_rng_state(new_state: Any) -> None:
    """Return the stream ``rg.manual_seed`` seeds to a position :func:`get_rng_state` gave:
    the draws that followed it repeat (and :func:`initial_seed` answers its seed again)."""
    words = checked_state_words("set_rng_state", new_state, _RNG_STATE_WORDS, "get_rng_state")
    if len(words) == _STATE_WORDS:  # a generator's state: the stream keeps its seed
        words = np.concatenate([words, np.asarray(current_backend().rng_state())[10:]])
    current_backend().set_rng_state(words)


def initial_seed() -> int:
    """The seed the stream ``rg.manual_seed`` seeds last started from."""
    words = [int(w) for w in current_backend().rng_state()]
    return words[10] | (words[11] << 32)


def fresh_seed() -> int:
    """Seed the stream non-deterministically (``torch.seed()``) and return the seed."""
    value = int(np.random.SeedSequence().entropy) % 2**63
    creation.seed(value)
    return value


@contextlib.contextmanager
def fork_rng(
    devices: Any = None,
    enabled: bool = True,
    _caller: str = "fork_rng",
    _devices_kw: str = "devices",
    device_type: str = "cuda",
) -> Iterator[None]:
    """Draws inside the block leave the stream where it was when the block began (torch's
    ``torch.random.fork_rng``; ``devices``/``device_type`` name CUDA generators, whose
    retrograd draws come from this same stream)."""
    if devices is not None:  # torch iterates them ("'int' object is not iterable")
        check_iterable(_caller, devices, _devices_kw)
    if not enabled:
        yield
        return
    saved = get_rng_state()
    try:
        yield
    finally:
        set_rng_state(saved)


class _DefaultGenerator(Generator):
    """``torch.default_generator``: the process-wide stream ``rg.manual_seed`` seeds, as a
    generator. Its methods act on that stream, and given as ``generator=`` it draws from it,
    as the default (``None``) does."""

    #: read by ``checked_generator``: this generator stands for the default stream
    is_default_stream = True

    def __init__(self) -> None:
        self.device = Device("cpu")
        self._lock = threading.Lock()
        self._weak = weakref.ref(self)  # (what effects.DRAWS holds it by)

    def manual_seed(self, seed: int) -> Generator:
        creation.manual_seed(checked_seed("default_generator.manual_seed", seed))
        return self

    def seed(self) -> int:
        return fresh_seed()

    def initial_seed(self) -> int:
        return initial_seed()

    def get_state(self) -> Any:
        return get_rng_state()

    def set_state(self, new_state: Any) -> Generator:
        set_rng_state(new_state)
        return self

    def draws(self, shape: Sequence[int], distribution: str, dtype: str) -> np.ndarray:
        host_dtype = "float64" if dtype == "float64" else "float32"
        return creation.random(tuple(shape), distribution, dtype=host_dtype).numpy()

    def clone_state(self) -> Generator:
        raise InvalidArgumentError(
            "default_generator.clone_state: the process-wide stream has no generator of its "
            "own to clone; save its position with get_state() and restore it with set_state()"
        )

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        # pickled or copied, it stays the process-wide stream
        return (_the_default_generator, ())

    def __repr__(self) -> str:
        return "<rg.default_generator: the stream rg.manual_seed seeds>"


default_generator = _DefaultGenerator()


def _the_default_generator() -> Generator:
    return default_generator


def manual_seed(seed: int) -> Generator:
    """torch's ``manual_seed``: restart the process-wide stream from ``seed`` (the draws
    differ from torch's generator's); returns :data:`default_generator`, as torch's does, so
    that ``generator=rg.manual_seed(0)`` (diffusers' examples) draws from that stream.
    ``seed`` is read by ``int()`` first, as torch reads it (``manual_seed(1.5)`` seeds 1)."""
    creation.manual_seed(checked_seed("manual_seed", int(seed)))
    return default_generator


def thread_safe_generator() -> Generator | None:
    """torch's generator for random draws in a DataLoader's thread worker: ``None`` (the
    default stream), as torch answers in the main process and in process workers."""
    return None


class _Random:
    """``rg.random``: the function ``rg.random(shape, distribution)`` (API.md), which also
    carries ``torch.random``'s names (``rg.random.manual_seed``, ``get_rng_state``...)."""

    def __init__(self) -> None:
        functools.update_wrapper(self, creation.random)
        # guarded as rg.manual_seed and the others are (a str seed: the hierarchy's error)
        self.manual_seed = guard("random.manual_seed", manual_seed)
        self.seed = guard("random.seed", fresh_seed)
        self.initial_seed = guard("random.initial_seed", initial_seed)
        self.get_rng_state = guard("random.get_rng_state", get_rng_state)
        self.set_rng_state = guard("random.set_rng_state", set_rng_state)
        self.fork_rng = fork_rng
        self.default_generator = default_generator
        self.thread_safe_generator = thread_safe_generator
        self.Generator = Generator

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return creation.random(*args, **kwargs)

    def __repr__(self) -> str:
        return "<rg.random: rg.random(shape, distribution) and torch.random's names>"


random_namespace = _Random()
