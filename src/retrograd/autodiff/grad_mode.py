"""Gradient mode: ``rg.no_grad()`` and ``rg.enable_grad()``, per thread.

While gradient recording is off in a thread, the autodiff backend records no node for any op
that thread runs (:meth:`~retrograd.autodiff.Autodiff._record` returns an untracked output),
so evaluation and sampling keep no graph and no saved values. Leaves keep requiring grad; only
new results are untracked, as in PyTorch.

The flag is thread-local because graphs are: a data-parallel worker evaluating under
``no_grad`` must not stop another worker's forward from recording. Nesting restores the
state each block found, whatever it was, so ``enable_grad`` inside ``no_grad`` (or the reverse)
works, and so does re-entering one context object (each entry pushes its own saved state).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

__all__ = ["enable_grad", "is_grad_enabled", "no_grad", "set_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _Mode(threading.local):
    # Class attributes are the defaults every new thread sees: recording on.
    #: whether ops are recorded (what the recording path reads)
    enabled = True
    #: the grad mode set (``is_grad_enabled``): recording, unless ``inference``
    requested = True
    #: inside ``inference_mode()``: nothing is recorded, ``enable_grad`` or not (torch's)
    inference = False

    def __init__(self) -> None:
        self.saved: list[bool] = []


_MODE = _Mode()
#: How many threads have recording off now. The recording path reads this one-element list
#: (a global and an index) and reads the thread-local flag only when it is non-zero: a
#: ``threading.local`` attribute is several times dearer, and every op of every training step
#: would pay for it, for a feature evaluation loops use.
DISABLED_THREADS = [0]
_LOCK = threading.Lock()
#: Forward-mode AD's test of an op recorded under ``no_grad``: set while a dual level is open
#: (by ``autograd.forward_ad``), it answers whether the op's parent nodes carry a tangent, and
#: such an op is recorded anyway, as torch's forward AD runs under ``no_grad``
FORWARD_TANGENTS: list[Callable[[tuple], bool] | None] = [None]


def _record(enabled: bool) -> None:
    if enabled != _MODE.enabled:
        with _LOCK:
            DISABLED_THREADS[0] += -1 if enabled else 1
        _MODE.enabled = enabled


def _set(enabled: bool) -> None:
    _MODE.requested = enabled
    _record(enabled and not _MODE.inference)


def set_inference(inference: bool) -> bool:
    """Enter (or, ``False``, leave) ``inference_mode`` in this thread; returns the setting it
    found, for the block's exit to restore. Inside, nothing is recorded even where
    ``enable_grad`` sets the grad mode on, as torch's."""
    previous = _MODE.inference
    _MODE.inference = inference
    _record(_MODE.requested and not inference)
    return previous


def in_inference_mode() -> bool:
    """Whether this thread runs inside ``inference_mode()`` (an ``inference_mode(False)``
    block inside one is outside it)."""
    return _MODE.inference


@contextmanager
def recording() -> Iterator[None]:
    """Record, inside ``inference_mode()`` too: for the graph's own bookkeeping, which torch
    does whatever the mode, where ``enable_grad()`` records nothing inside
    ``inference_mode`` (torch's rule for programs). Used by a write made there into a tensor
    computed in the graph (torch's stays in its graph, as under ``no_grad``: with
    ``enable_grad`` ``with torch.inference_mode(): y.add_(1)`` left ``y`` and its views out
    of the graph, ``y.requires_grad`` False and ``y.sum().backward()`` refused), and by
    ``autograd.grad``'s seed (``autograd.grad(y, x, ones)`` there raised "does not require
    grad", where torch's engine differentiates a graph recorded before): round 93."""
    previous = set_inference(False)
    try:
        with enable_grad():
            yield
    finally:
        set_inference(previous)


def is_grad_enabled() -> bool:
    """Whether the grad mode of this thread is on (ops are recorded for backward, except
    inside ``inference_mode``)."""
    return _MODE.requested


def _decorated(fn: F, mode: Callable[[], Any]) -> F:
    """``fn`` running inside ``mode()`` at every call. A generator function's body runs in
    the block each time it resumes, and outside it between yields (torch's
    ``_wrap_generator``): wrapping only the call would set the mode for the instant that makes
    the generator and leave its body, which runs later, outside the block."""
    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            inner = fn(*args, **kwargs)
            try:
                with mode():
                    response = inner.send(None)
                while True:
                    try:
                        request = yield response
                    except GeneratorExit:
                        with mode():
                            inner.close()
                        raise
                    except BaseException as error:  # thrown in: on into the body, in the block
                        with mode():
                            response = inner.throw(error)
                    else:
                        with mode():
                            response = inner.send(request)
            except StopIteration as stop:
                return stop.value

        return generator  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with mode():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


class _GradMode:
    """A context manager and decorator setting the recording flag of the current thread."""

    _target = True

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # ``@rg.no_grad`` without parentheses (torch 2's form): the function decorated at once
        if (
            len(args) == 1
            and not kwargs
            and callable(args[0])
            and not issubclass(cls, set_grad_enabled)
        ):
            return cls()(args[0])
        return super().__new__(cls)

    def __enter__(self) -> None:
        _MODE.saved.append(_MODE.requested)
        _set(self._target)

    def __exit__(self, *exc: object) -> None:
        _set(_MODE.saved.pop())

    def __call__(self, fn: F) -> F:
        """Use as a decorator: ``fn`` runs inside the block at every call. This very object
        is entered each time (each entry saves its own state, per thread), so
        ``inference_mode(False)`` decorates with its own setting, not its class's default."""
        return _decorated(fn, lambda: self)


class no_grad(_GradMode):  # noqa: N801  (PyTorch's name)
    """Record nothing inside the block (or the decorated function), in this thread.

    >>> import retrograd as rg
    >>> x = rg.tensor([1.0, 2.0]).require_grad()
    >>> with rg.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    _target = False


class enable_grad(_GradMode):  # noqa: N801  (PyTorch's name)
    """Record again inside a ``no_grad`` block (or the decorated function)."""

    _target = True


class set_grad_enabled(_GradMode):  # noqa: N801  (PyTorch's name)
    """Recording on or off as ``mode`` says, for the block; as a plain call it sets the flag of
    this thread at once (PyTorch's ``torch.set_grad_enabled(False)``)."""

    def __init__(self, mode: bool) -> None:
        self._target = bool(mode)
        self._previous = _MODE.requested
        _set(self._target)

    def __enter__(self) -> None:
        # The constructor already set the flag; restore what it found on exit.
        _MODE.saved.append(self._previous)

    def __call__(self, fn: F) -> F:
        # As a decorator the constructor's change is undone at once (as torch does); each
        # call of ``fn`` sets the mode for its own duration.
        _set(self._previous)
        target = self._target
        return _decorated(fn, lambda: set_grad_enabled(target))
