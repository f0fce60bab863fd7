"""Ctrl-C and SIGTERM held while Numba compiles or loads a kernel, then delivered.

Numba loads a cached kernel and compiles a new one through LLVM, which calls back into Python
through ctypes (llvmlite's object-cache hooks). A signal whose Python handler ran inside such
a callback lost its exception there: CPython prints ``Exception ignored on calling ctypes
callback function ... KeyboardInterrupt`` and goes on, the kernel is left half-made, and Numba
then fails with ``RuntimeError: no compiled object yet``. A ``retrograd train`` stopped by
Ctrl-C in that moment (its first steps load a dozen kernels) exited with status 1 and
"unexpected RuntimeError" instead of 130 and the interrupted run's line.

Importing this module registers, once per process, a listener on Numba's global compiler
lock: while the main thread holds it (a load or a compilation, nested ones counted once), the
Python handlers of SIGINT and SIGTERM are replaced by one that only notes the signal; when the
lock is released the handlers are put back and each noted signal raised again, so that its
own handler (``KeyboardInterrupt``, the CLI's ``Terminated``, a program's own) runs in
ordinary Python code, the kernel complete. Handlers that are not Python functions (``SIG_DFL``,
``SIG_IGN``) are left alone, as are other threads (only the main thread runs Python handlers).
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import numba
from numba.core import event

__all__ = ["HELD_SIGNALS", "numba"]

#: the signals held while a kernel is made
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _InterruptsHeld(event.Listener):
    """Numba's ``numba:compiler_lock`` events: the first start in the main thread swaps the
    handlers, the matching end restores them and raises what came meanwhile."""

    def __init__(self) -> None:
        self._depth = 0  # only the main thread counts (the others change nothing)
        self._kept: dict[int, Any] = {}
        self._noted: list[int] = []

    def on_start(self, event: Any) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        if self._depth == 0:
            self._hold()
        self._depth += 1

    def on_end(self, event: Any) -> None:
        if threading.current_thread() is not threading.main_thread() or self._depth == 0:
            return
        self._depth -= 1
        if self._depth == 0:
            self._release()

    def _note(self, signum: int, frame: Any) -> None:
        self._noted.append(signum)

    def _hold(self) -> None:
        self._noted = []
        self._kept = {}
        try:
            for number in HELD_SIGNALS:
                handler = signal.getsignal(number)
                if callable(handler):
                    self._kept[number] = handler
                    signal.signal(number, self._note)
        except BaseException:  # (a signal before its handler was swapped: none held)
            self._restore()
            raise

    def _restore(self) -> None:
        kept, self._kept = self._kept, {}
        for number, handler in kept.items():
            signal.signal(number, handler)

    def _release(self) -> None:
        self._restore()
        noted, self._noted = self._noted, []
        for number in dict.fromkeys(noted):  # each once, in the order they came
            signal.raise_signal(number)


_LISTENER = _InterruptsHeld()
event.register("numba:compiler_lock", _LISTENER)
