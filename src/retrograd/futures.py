"""torch's ``torch.futures``: :class:`Future`, :func:`collect_all`, :func:`wait_all`.

A ``Future`` holds a value (or an exception) that becomes available later: ``set_result``
or ``set_exception`` completes it once; ``wait`` blocks until then and returns the value (or
raises the exception); ``then(callback)`` returns a future of ``callback(self)``;
``add_done_callback`` runs a callback on completion. As torch's, callbacks run in the thread
that completes the future (at once if it is complete already), and an exception a ``then``
callback raises completes the returned future with a ``RuntimeError`` that names it.

>>> from retrograd.futures import Future, wait_all
>>> f = Future()
>>> doubled = f.then(lambda fut: 2 * fut.value())
>>> f.set_result(21)
>>> wait_all([f, doubled])
[21, 42]
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from .errors import InvalidArgumentError, RetrogradError, check_callable, check_iterable

__all__ = ["Future", "FutureError", "collect_all", "wait_all"]

T = TypeVar("T")
S = TypeVar("S")


class FutureError(RetrogradError, RuntimeError):
    """A future completed twice, read before completion, or whose ``then`` callback raised
    (a ``RuntimeError``, as torch's)."""


class Future(Generic[T]):
    """A value that some code sets once and other code waits for (thread-safe)."""

    def __init__(self, *, devices: Any = None) -> None:
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future[T]], None]] = []

    def done(self) -> bool:
        """Whether the future holds a value or an exception."""
        return self._done.is_set()

    def wait(self) -> T:
        """Block until complete; the value, or the exception raised."""
        self._done.wait()
        return self.value()

    def value(self) -> T:
        """The value of a complete future (its exception raised); an incomplete one raises."""
        if not self._done.is_set():
            raise FutureError("Future.value: the future is not complete yet; call wait()")
        if self._error is not None:
            raise self._error
        return self._value

    def set_result(self, result: T) -> None:
        """Complete the future with ``result`` and run its callbacks."""
        self._complete(result, None)

    def set_exception(self, result: BaseException) -> None:
        """Complete the future with an exception (``wait`` and ``value`` raise it)."""
        if not isinstance(result, BaseException):
            raise InvalidArgumentError(
                f"Future.set_exception: expected an exception, got {type(result).__name__}"
            )
        self._complete(None, result)

    def then(self, callback: Callable[[Future[T]], S]) -> Future[S]:
        """A future of ``callback(self)``, run when this one completes."""
        check_callable("Future.then", callback, "callback")
        chained: Future[S] = Future()

        def run(fut: Future[T]) -> None:
            try:
                result = callback(fut)
            except Exception as error:  # torch: the chained future holds the error
                failure = FutureError(
                    f"Got the following error when running the callback: "
                    f"{type(error).__name__}: {error}"
                )
                failure.__cause__ = error
                chained.set_exception(failure)
            else:
                chained.set_result(result)

        self.add_done_callback(run)
        return chained

    def add_done_callback(self, callback: Callable[[Future[T]], None]) -> None:
        """Run ``callback(self)`` on completion (now, when complete already)."""
        # checked here: stored, it would fail later inside set_result, in another caller
        check_callable("Future.add_done_callback", callback, "callback")
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback(self)

    def _complete(self, value: Any, error: BaseException | None) -> None:
        with self._lock:
            if self._done.is_set():
                raise FutureError(
                    "Future: attempting to mark a completed Future as complete again; a Future "
                    "can only be marked completed once"
                )
            self._value, self._error = value, error
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)


def _futures(op: str, futures: Sequence[Future]) -> list[Future]:
    check_iterable(op, futures, "futures")
    futures = list(futures)
    for fut in futures:
        if not isinstance(fut, Future):
            raise InvalidArgumentError(
                f"{op}: expected a sequence of rg.futures.Future, got a {type(fut).__name__}"
            )
    return futures


def collect_all(futures: Sequence[Future]) -> Future[list[Future]]:
    """A future completed, with the list of ``futures``, once all of them are complete."""
    futures = _futures("collect_all", futures)
    combined: Future[list[Future]] = Future()
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            combined.set_result(futures)

    if not futures:
        combined.set_result([])
    for fut in futures:
        fut.add_done_callback(one_done)
    return combined


def wait_all(futures: Sequence[Future]) -> list[Any]:
    """Wait until every future is complete; their values in order (the first exception in
    that order is raised, after all are complete, as torch's)."""
    futures = _futures("wait_all", futures)
    collect_all(futures).wait()
    return [fut.value() for fut in futures]
