"""Which backend new tensors use: process-wide default, overridable per thread; and whether
the thread is recording a step for ``rg.capture``."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

__all__ = [
    "captured_writes",
    "capturing",
    "current_backend",
    "default_backend",
    "set_default_backend",
    "thread_device",
    "use_backend",
]

_process_default: Any = None
_thread_backend: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "retrograd_backend", default=None
)
#: The device new tensors get on this thread when none is given, over the backend's default:
#: set by ``rg.distributed.init_process_group(store=ctx)`` on a thread that is one rank of an
#: in-process job (each rank's tensors on its own device, as a process's are on its own).
thread_device: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "retrograd_thread_device", default=None
)


def _unindexed_index(kind: str) -> int:
    """The index of a device named without one: the default device's, if of ``kind``
    (a rank's "cpu" is its ``cpu:RANK``), else 0. Reads only backends already made."""
    device = thread_device.get()
    if device is None:
        backend = _thread_backend.get() or _process_default
        device = getattr(backend, "default_device", None)
    return device.index if device is not None and device.kind == kind else 0


#: True on the thread (and context) where ``rg.capture`` is recording a step: a value read on
#: the host there is refused, so library code that would read one by default (a finiteness
#: or bounds check) skips the read instead. Set and reset by the capture only.
capturing: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "retrograd_capturing", default=False
)

#: While ``rg.capture`` records a step, a list of ``(tensor, its primitive before)`` for every
#: in-place write to a tensor (``None`` otherwise): a tensor made before the step and written
#: by it, in no module of the state, would keep its old value at every replay, so the capture
#: refuses it. Set and reset by the capture only.
captured_writes: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "retrograd_captured_writes", default=None
)


def _install() -> None:
    from .device import resolve_unindexed_with

    resolve_unindexed_with(_unindexed_index)


def default_backend() -> Any:
    """The process-wide default: ``Autodiff(NumpyBackend(), NoCheckpointing())`` unless set.

    >>> import retrograd as rg
    >>> rg.default_backend()
    Autodiff(NumpyBackend(), checkpointing=NoCheckpointing())
    """
    global _process_default
    if _process_default is None:
        from .autodiff import Autodiff
        from .backend import NumpyBackend

        _process_default = Autodiff(NumpyBackend())
    return _process_default


def _checked_backend(op: str, backend: Any) -> Any:
    """``backend`` where it is one (or ``None``: the default), else a ``DTypeError`` naming
    ``op``: a str or a class kept as the backend would break every later op, far from here."""
    from .backend.protocol import Backend
    from .errors import DTypeError, _describe

    if backend is not None and not isinstance(backend, Backend):
        raise DTypeError(
            f"{op}: expected a backend (rg.NumpyBackend(), rg.TorchBackend(), rg.Autodiff(...)), "
            f"got {_describe(backend)}"
        )
    return backend


def set_default_backend(backend: Any) -> None:
    """Make ``backend`` the process-wide default for new tensors (``None``: the default's
    default again)."""
    global _process_default
    _process_default = _checked_backend("set_default_backend", backend)


def current_backend() -> Any:
    """The backend new tensors get here: the thread's ``use_backend`` one, else the default."""
    backend = _thread_backend.get()
    return backend if backend is not None else default_backend()


@contextlib.contextmanager
def use_backend(backend: Any) -> Iterator[Any]:
    """Use ``backend`` for new tensors in this thread (and context) only.

    >>> import retrograd as rg
    >>> with rg.use_backend(rg.Autodiff(rg.NumpyBackend(), rg.BalancedCheckpointing())) as B:
    ...     rg.zeros((2,)).backend is B
    True
    """
    token = _thread_backend.set(_checked_backend("use_backend", backend))
    try:
        yield backend
    finally:
        _thread_backend.reset(token)


_install()
