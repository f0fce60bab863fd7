"""Numba kernels compiled in a background process on a cold cache, while NumPy twins of the
same bits run: the first steps of a fresh process need not wait for a compilation.

A :class:`Twinned` kernel is a Numba dispatcher (``cache=True``) and a NumPy function that
computes the same values, bit for bit (the twin). Called with argument types the dispatcher
has loaded, it runs the kernel (Numba's own dispatch, nothing added). For new argument types
(a *signature*) it looks in Numba's on-disk cache: an entry there is loaded, as Numba would,
and the kernel runs. Otherwise the signature is sent to a background compiler, one Python
process (``python -c ...``; a thread would hold the GIL through Numba's Python-heavy
compilation and stall the step it should spare) that compiles each signature it receives into
the same on-disk cache (``NUMBA_CACHE_DIR`` and the source's location are inherited), and the
twin runs meanwhile. Once the compiler reports the signature done, the next call loads it from
the cache and the kernel runs from then on.

Because a twin gives its kernel's bits, when the switch happens does not matter (between the
forward of a step and its recomputation by a checkpointing strategy too): results do not
depend on how warm the cache was. ``tests/test_kernel_compile.py`` holds each twin to its
kernel's bits.

``RETROGRAD_KERNEL_COMPILE`` (read at each new signature): ``background`` (the default) as
above; ``wait``: compile in this process on first use, as Numba does (the twins never run).
Where the background process cannot start or fails, the kernel is compiled in this process.

Numba writes the cache beside the source (``__pycache__``) where that is writable, else in a
user-wide folder (``~/.cache/numba`` or ``NUMBA_CACHE_DIR``): a read-only installation
compiles once per user, not once per process.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["MODE_VARIABLE", "Twinned", "compiler", "mode"]

#: The environment variable that chooses how a kernel missing from the cache is compiled
MODE_VARIABLE = "RETROGRAD_KERNEL_COMPILE"
MODES = ("background", "wait")


def mode() -> str:
    """``background`` or ``wait`` (:data:`MODE_VARIABLE`; an unknown value is refused)."""
    value = os.environ.get(MODE_VARIABLE, "background").strip().lower() or "background"
    if value not in MODES:
        from ..errors import InvalidArgumentError

        raise InvalidArgumentError(f"{MODE_VARIABLE}={value!r}: expected one of {', '.join(MODES)}")
    return value


class _NotReadyError(Exception):
    """Raised out of the dispatcher's compile hook: the twin runs instead."""


#: ``inside``: whether this thread's current kernel call came through :class:`Twinned` (a
#: direct call of the dispatcher compiles as Numba does)
_CALL = threading.local()


def _cached(dispatcher: Any, signature: tuple) -> bool:
    """Whether Numba's on-disk cache holds ``signature`` of ``dispatcher`` (an entry the
    dispatcher would load rather than compile); on any doubt ``True`` (compile here)."""
    try:
        cache = dispatcher._cache
        key = cache._index_key(signature, dispatcher.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:
        return True


def _encode(signature: tuple) -> list:
    """``signature`` (Numba types) as JSON: arrays by dtype, dimensions, layout and flags,
    scalars by name; :class:`ValueError` for anything else (then compiled in the process)."""
    from numba import types

    encoded = []
    for t in signature:
        if isinstance(t, types.Array) and isinstance(t.dtype, types.Number | types.Boolean):
            encoded.append(["array", str(t.dtype), t.ndim, t.layout, t.mutable, t.aligned])
        elif isinstance(t, types.Number | types.Boolean) and getattr(types, str(t), None) == t:
            encoded.append(["scalar", str(t)])
        else:
            raise ValueError(f"no encoding for the argument type {t}")
    return encoded


def _decode(encoded: list) -> tuple:
    """:func:`_encode`'s inverse."""
    from numba import types

    signature = []
    for entry in encoded:
        if entry[0] == "array":
            _, dtype, ndim, layout, mutable, aligned = entry
            signature.append(
                types.Array(
                    getattr(types, dtype), ndim, layout, readonly=not mutable, aligned=aligned
                )
            )
        else:
            signature.append(getattr(types, entry[1]))
    return tuple(signature)


class _Compiler:
    """The background compiler: one child process, started on the first request, that
    compiles the signatures it reads (one line each: module, kernel name, Numba types) into
    the on-disk cache and answers ``ok N`` or ``failed N``."""

    def __init__(self) -> None:
        self.process: subprocess.Popen | None = None
        self.broken = False
        self.sent: dict[tuple, int] = {}
        self.results: dict[int, bool] = {}
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def state(self, kernel: Twinned, signature: tuple) -> str:
        """``ready`` (load it), ``failed`` (compile it here) or ``pending`` (run the twin);
        a first request for ``signature`` sends it."""
        key = (kernel.module, kernel.name, signature)
        if self.pid != os.getpid():  # a forked child: its parent's compiler is not its own
            self.__init__()
        with self.lock:
            number = self.sent.get(key)
            if number is None:
                if self.broken or not self._send(key):
                    return "failed"
                return "pending"
            if number in self.results:
                return "ready" if self.results[number] else "failed"
            if self.process is not None and self.process.poll() is not None:
                self.broken = True  # died before answering
                return "failed"
            return "pending"

    def _send(self, key: tuple) -> bool:
        try:
            if self.process is None:
                self._start()
            number = len(self.sent)
            module, name, signature = key
            line = json.dumps([number, module, name, _encode(signature)]) + "\n"
            self.process.stdin.write(line.encode())
            self.process.stdin.flush()
        except (OSError, ValueError):
            self.broken = True
            return False
        self.sent[key] = number
        return True

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # the folder holding retrograd/
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from retrograd.backend.kernel_compile import serve; serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        atexit.register(self.close)

    def _read(self, process: subprocess.Popen) -> None:
        try:
            for line in process.stdout:
                answer, _, number = line.decode().partition(" ")
                with self.lock:
                    self.results[int(number)] = answer == "ok"
        except (OSError, ValueError):  # the pipe closed under it (close(), at exit)
            return

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every signature sent has an answer (tests, benchmarks); whether all
        did within ``timeout`` seconds."""
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                if len(self.results) >= len(self.sent):
                    return True
                if self.process is None or self.process.poll() is not None:
                    return False
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def close(self) -> None:
        """End the child (at exit: a half-compiled signature is simply not cached)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
            process.wait()
        # the pipes too: left open, each is an "unclosed file" ResourceWarning at exit
        for pipe in (process.stdin, process.stdout):
            with contextlib.suppress(OSError, ValueError):
                pipe.close()


_COMPILER = _Compiler()


def compiler() -> _Compiler:
    """This process's background compiler."""
    return _COMPILER


def serve() -> None:
    """The background compiler's loop (the child process): compile each requested
    signature into the on-disk cache, answer on stdout."""
    for line in sys.stdin.buffer:
        number, module, name, encoded = json.loads(line)
        try:
            kernel = getattr(importlib.import_module(module), name)
            getattr(kernel, "dispatcher", kernel).compile(_decode(encoded))
            answer = "ok"
        except Exception:
            answer = "failed"
        sys.stdout.write(f"{answer} {number}\n")
        sys.stdout.flush()


class Twinned:
    """A Numba kernel ``dispatcher`` and its NumPy ``twin`` (same arguments, same bits):
    called, the kernel where it is compiled or cached, else (a cold cache) the twin while
    the background compiler fills the cache (module docstring)."""

    def __init__(self, dispatcher: Any, twin: Callable[..., Any]) -> None:
        self.dispatcher = dispatcher
        self.twin = twin
        self.module = dispatcher.py_func.__module__
        self.name = dispatcher.py_func.__name__
        self.__doc__ = dispatcher.__doc__
        #: calls the twin answered (tests, benchmarks)
        self.twin_calls = 0
        self._sent: set[tuple] = set()
        self._compile_for_args = dispatcher._compile_for_args
        # Numba's dispatcher (C) looks this attribute up on the instance when no loaded
        # overload matches the arguments: the one place a new signature passes
        dispatcher._compile_for_args = self._new_signature

    def __call__(self, *args: Any) -> Any:
        _CALL.inside = True
        try:
            return self.dispatcher(*args)
        except _NotReadyError:
            self.twin_calls += 1
            return self.twin(*args)
        finally:
            _CALL.inside = False

    def _new_signature(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(_CALL, "inside", False) and mode() == "background":
            signature = tuple(self.dispatcher.typeof_pyval(a) for a in args)
            # the on-disk cache is read once per signature, before it is first sent
            sent = signature in self._sent
            if sent or not _cached(self.dispatcher, signature):
                self._sent.add(signature)
                if _COMPILER.state(self, signature) == "pending":
                    raise _NotReadyError
        return self._compile_for_args(*args, **kwargs)
