"""The handle of an operation in flight: a collective, a registration exchange, a user
``all_reduce``. Transports complete it; the sync server chains work onto it (``then``); a
device thread waits on it (``wait``, ``outcome``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

from ..errors import DistributedError

__all__ = ["Pending"]


class Pending:
    """An operation in flight; completes once, with a result or an error message.

    ``wait(timeout)`` blocks the calling (device) thread until it completes and says whether
    it did; ``outcome()`` then returns the result or raises :class:`DistributedError`.
    ``then`` and ``finish`` run under the sync server's lock only.

    >>> pending = Pending(("op", 0))
    >>> pending.then(lambda done: print("done:", done.result))
    >>> pending.finish([1.0])
    done: [1.0]
    >>> pending.outcome(), pending.done()
    ([1.0], True)
    """

    __slots__ = (
        "_done",
        "_event",
        "callbacks",
        "error",
        "finished_at",
        "key",
        "launched_at",
        "result",
    )

    def __init__(self, key: Hashable):
        self.key = key
        self.result: Any = None
        self.error: str | None = None
        self.callbacks: list[Callable[[Pending], None]] = []
        self.launched_at = time.perf_counter()
        self.finished_at: float | None = None
        self._done = False
        # Made on the first wait only: most handles (a bucket's) are never waited on by a
        # thread, and an Event costs a lock and a condition.
        self._event: threading.Event | None = None

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None) -> bool:
        if self._done:
            return True
        with _EVENT_LOCK:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        # finish() sets _done before it looks for the event, and the event is published
        # before _done is read again here: one of the two sides sees the other.
        if self._done:
            return True
        return event.wait(timeout)

    def outcome(self) -> Any:
        if self.error is not None:
            raise DistributedError(self.error)
        return self.result

    def then(self, callback: Callable[[Pending], None]) -> None:
        """Call ``callback(self)`` on completion (now, if already complete)."""
        if self._done:
            callback(self)
        else:
            self.callbacks.append(callback)

    def finish(self, result: Any = None, error: str | None = None) -> None:
        """Complete with ``result`` or ``error`` (first call wins); runs the callbacks."""
        if self._done:
            return
        self.result, self.error = result, error
        self.finished_at = time.perf_counter()
        self._done = True
        event = self._event
        if event is not None:
            event.set()
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback(self)

    def __repr__(self) -> str:
        state = "error" if self.error else ("done" if self._done else "in flight")
        return f"Pending({self.key!r}, {state})"


_EVENT_LOCK = threading.Lock()
