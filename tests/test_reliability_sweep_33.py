"""Round 33 of the reliability sweep (API.md section 7): the whole public surface given
arguments the earlier rounds' pools (``tests/test_reliability_sweep.py``, ``_13.py``) do not
hold.

The surface is enumerated, not listed: every name of ``rg.__all__``, every public method of
``rg.Tensor``, and the ``__all__`` of ``rg.nn.functional``, ``rg.linalg``, ``rg.fft`` and
``rg.special``; then every single-input layer of ``rg.nn`` (the table of round 27) built with
a bad constructor argument and called. The pool: complex, float64, int8, uint8 and int32
tensors, a 4-d tensor, 0-d int and bool tensors, a tensor requiring grad, an empty matrix;
Python's ``1j``, ``2**70`` and ``-2**70``, ``inf`` and NaN, a NumPy array, a *torch* tensor (a
ported script's leftover), lists and tuples of tensors, a dict, bytes, a slice, ``Ellipsis``,
a dtype, a shape with a negative size, a ragged nested list.

Each call must give a result or an error of the hierarchy (``rg.RetrogradError``) with a
message naming the op, within seconds: a bare ``IndexError``/``TypeError``/``ValueError`` of
NumPy, torch or Python from inside, a ``RecursionError`` or a hang fails the test. A failed
call must leave the tensors it was given as they were (values and shape), and a graph built
before the sweep must still give its gradients. The defects found are in
``test_reliability_regressions_33.py``.
"""

from __future__ import annotations

import inspect
import random
import signal
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812  (PyTorch's idiom)
from test_reliability_sweep_27 import LAYERS

#: Entry points that change the process's state, write files, sleep, or allocate what their
#: argument says (``empty(2**70)`` is an allocator's refusal, swept elsewhere): not swept.
_NOT_SWEPT = {
    "save", "load", "seed", "manual_seed", "set_default_backend", "set_default_device",
    "set_default_dtype", "set_float32_matmul_precision", "set_num_threads",
    "set_num_interop_threads", "set_printoptions", "set_rng_state", "use_backend",
    "use_deterministic_algorithms", "compile", "capture", "vmap", "random", "from_numpy",
    "set_default_tensor_type", "set_warn_always", "set_flush_denormal", "set_anomaly_enabled",
    "set_grad_enabled", "set_deterministic_debug_mode", "from_file", "load_library",
    "backward", "register_hook", "register_post_accumulate_grad_hook", "apply_", "map_",
    "share_memory_", "pin_memory", "record_stream", "cuda", "data_ptr", "storage",
    "untyped_storage", "set_", "set_distributed", "resize_", "empty", "empty_like",
}  # fmt: skip


def _pool() -> dict[str, Callable[[], Any]]:
    """Fresh values (in-place ops change no other call's argument)."""
    rows = np.linspace(0.1, 1.0, 6).reshape(2, 3)
    return {
        "complex": lambda: rg.tensor([1 + 2j, 3 - 1j, 0.5j]),
        "float64": lambda: rg.tensor(rows),
        "int8": lambda: rg.tensor(np.arange(6, dtype=np.int8).reshape(2, 3)),
        "uint8": lambda: rg.tensor(np.arange(6, dtype=np.uint8).reshape(2, 3)),
        "int32": lambda: rg.tensor(np.arange(3, dtype=np.int32)),
        "4d": lambda: rg.ones((1, 2, 3, 4)),
        "int 0-d": lambda: rg.tensor(2),
        "bool 0-d": lambda: rg.tensor(True),
        "requires grad": lambda: rg.tensor(rows.astype(np.float32)).require_grad(),
        "empty matrix": lambda: rg.zeros((0, 0)),
        "one": lambda: rg.tensor([3.0]),
        "float32": lambda: rg.tensor(rows.astype(np.float32)),
        "int64": lambda: rg.tensor(np.arange(6).reshape(2, 3)),
        "bool": lambda: rg.tensor(np.arange(6).reshape(2, 3) % 2 == 0),
        "1j": lambda: 1j,
        "2**70": lambda: 2**70,
        "-2**70": lambda: -(2**70),
        "inf": lambda: float("inf"),
        "nan": lambda: float("nan"),
        "ndarray": lambda: np.ones((2, 3), dtype=np.float32),
        "torch tensor": lambda: torch.ones(2, 3),
        "tensor list": lambda: [rg.ones(2), rg.ones(3)],
        "tensor tuple": lambda: (rg.ones((2, 3)), rg.ones((2, 3))),
        "dict": lambda: {"a": 1},
        "bytes": lambda: b"ab",
        "slice": lambda: slice(0, 2),
        "Ellipsis": lambda: Ellipsis,
        "dtype": lambda: rg.float32,
        "reduction word": lambda: "mean",
        "negative shape": lambda: (-1, 2),
        "zero shape": lambda: (2, 0),
        "ragged": lambda: [[1, 2], [3]],
        "None": lambda: None,
        "-2": lambda: -2,
        "3": lambda: 3,
    }


_TENSORS = [
    "complex", "float64", "int8", "uint8", "int32", "4d", "int 0-d", "bool 0-d",
    "requires grad", "empty matrix", "one", "float32", "int64", "bool",
]  # fmt: skip


def _public(namespace: Any, label: str) -> list[tuple[str, Callable[..., Any]]]:
    entries = []
    for name in sorted(namespace.__all__):
        value = getattr(namespace, name, None)
        if name in _NOT_SWEPT or inspect.isclass(value) or inspect.ismodule(value):
            continue
        if callable(value):
            entries.append((f"{label}.{name}", value))
    return entries


def _surface() -> list[tuple[str, Callable[..., Any]]]:
    entries = _public(rg, "rg") + _public(F, "F")
    for name in ("linalg", "fft", "special"):
        entries += _public(getattr(rg, name), name)
    for name in sorted(dir(rg.Tensor)):
        method = getattr(rg.Tensor, name, None)
        if not name.startswith("_") and name not in _NOT_SWEPT and callable(method):
            entries.append((f"Tensor.{name}", method))
    return entries


class _NoAnswer(BaseException):
    """Raised by the alarm (a BaseException: no ``except Exception`` inside swallows it)."""


def _alarm(*_: Any) -> None:
    raise _NoAnswer


def _bindable(function: Callable[..., Any], args: tuple) -> bool:
    """Whether ``args`` fit the signature (a wrong count is Python's TypeError at the call,
    as torch's, and says nothing about the op)."""
    try:
        inspect.signature(function).bind(*args)
    except TypeError:
        return False
    except ValueError:  # no signature to read: call it
        return True
    return True


def _snapshot(value: Any) -> Any:
    if isinstance(value, rg.Tensor):
        return value.shape, value.detach().numpy().copy()
    return None


def _outcome(label: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """``None`` for a result or a refusal of the hierarchy that left its tensors as they
    were; otherwise what went wrong."""
    before = [_snapshot(a) for a in args]
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)  # a first call may compile a kernel; a hang takes far longer
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            call(*args, **kwargs)
    except rg.RetrogradError as error:
        if not str(error).strip():
            return f"{label}: {type(error).__name__} without a message"
    except NotImplementedError:  # a documented limit
        pass
    except _NoAnswer:
        return f"{label}: no answer in 20 s"
    except Exception as error:  # what the sweep looks for
        return f"{label}: {type(error).__name__}: {str(error)[:160]}"
    else:
        return None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    for argument, was in zip(args, before):  # refused: nothing it was given changed
        if was is not None and argument.shape == was[0]:
            now = argument.detach().numpy()
            if not np.array_equal(now, was[1], equal_nan=True):
                return f"{label}: refused, but changed an argument's values"
        elif was is not None:
            return f"{label}: refused, but changed an argument's shape"
    return None


@pytest.fixture
def pending():
    """A graph built before the sweep, and the gradients it must still give."""
    a = rg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]).require_grad()
    b = rg.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -2.0]]).require_grad()
    yield a, b, (a * b + a.exp()).sum()


def _assert_pending_intact(pending: tuple) -> None:
    a, b, loss = pending
    grads = loss.backward()
    expected = torch.tensor(b.numpy()) + torch.tensor(a.numpy()).exp()
    np.testing.assert_allclose(a.grad(grads).numpy(), expected.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(b.grad(grads).numpy(), a.numpy())


def test_the_surface_is_enumerated_whole():
    """The sweep reaches every namespace it claims (a rename cannot empty it silently)."""
    labels = {label.split(".")[0] for label, _ in _surface()}
    assert labels == {"rg", "F", "linalg", "fft", "special", "Tensor"}
    assert len(_surface()) > 1000


@pytest.mark.parametrize("part", range(3))
def test_new_argument_kinds_over_the_public_surface_raise_the_hierarchy(pending, part):
    """Eight draws per entry point (a third of the surface per part), seeded: the first
    argument a tensor of the pool, up to two more anything of the pool."""
    pool = _pool()
    names = list(pool)
    rng = random.Random(3300 + part)
    failures = []
    for label, function in _surface()[part::3]:
        for _ in range(8):
            keys = [rng.choice(_TENSORS)] + [rng.choice(names) for _ in range(rng.randint(0, 2))]
            args = tuple(pool[key]() for key in keys)
            if not _bindable(function, args):
                continue
            failure = _outcome(f"{label}({', '.join(keys)})", function, *args)
            if failure:
                failures.append(failure)
    _assert_pending_intact(pending)
    assert not failures, "\n".join(failures)


#: Constructor values a layer must refuse or survive: no type, a word, a negative, NaN, a
#: size no memory holds, a complex number.
_BAD_CONSTRUCTOR_VALUES = {
    "None": None, "str": "a", "-1": -1, "nan": float("nan"), "2**40": 2**40, "1j": 1j,
}  # fmt: skip


def test_layers_built_with_bad_arguments_refuse_or_compute_never_leak_or_hang():
    """Each layer of round 27's table, each of its first two constructor arguments replaced
    by each bad value: the construction, or the forward of a good input, refuses by the
    hierarchy or computes, within seconds (``AdaptiveMaxPool*d(2**40)`` cut 2**40 windows one
    at a time)."""
    failures = []
    for name, (good, shape) in LAYERS.items():
        layer_class = getattr(rg.nn, name)
        parameters = [
            p
            for p in list(inspect.signature(layer_class.__init__).parameters)[1:]
            if p not in ("args", "kwargs", "device", "dtype")
        ][:2]
        for position, parameter in enumerate(parameters):
            for value_name, value in _BAD_CONSTRUCTOR_VALUES.items():
                if position < len(good):
                    args, kwargs = (*good[:position], value, *good[position + 1 :]), {}
                else:
                    args, kwargs = good, {parameter: value}
                x = rg.tensor(np.linspace(-1, 1, int(np.prod(shape))).reshape(shape))

                def build_and_call(args=args, kwargs=kwargs, x=x, layer_class=layer_class):
                    return layer_class(*args, **kwargs)(x.float())

                failure = _outcome(f"{name}({parameter}={value_name})", build_and_call)
                if failure:
                    failures.append(failure)
    assert not failures, "\n".join(failures)
