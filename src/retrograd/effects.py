"""What an op did that a second run of it would repeat: random draws and in-place writes.

:func:`errors.guard` runs a public entry again when a tensor requiring grad met a tensor of
its decorator's inner backend (an :class:`~retrograd.errors.InnerOperandError`). Whatever the
failed first run had done must not show: the draws it made would be drawn again from later
in the stream (numbers torch's program never gives), a write it made into a tensor would be
made twice (a running mean updated twice). So every stream notes its position just before it
draws (:data:`DRAWS`), which the retry puts back, and every in-place write counts itself
(:data:`WRITES`), which makes the retry refuse where one happened (on the thread that retries).

Both are process-wide and cheap: a draw saves its stream's few words, a write adds one; the
guard reads a counter at entry and looks further only when the retry comes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["DRAWS", "WRITES", "pcg64_state", "pcg64_words"]

_WORDS = 6  # PCG64's position: state and increment (128 bits each, as 2 x 64), two flags


def pcg64_words(bit_generator: Any) -> tuple[int, ...]:
    """The position of a NumPy PCG64 ``bit_generator`` as :data:`DRAWS` keeps it."""
    state = bit_generator.state
    value, increment = state["state"]["state"], state["state"]["inc"]
    low = 2**64 - 1
    return (value & low, value >> 64, increment & low, increment >> 64,
            int(state["has_uint32"]), int(state["uinteger"]))  # fmt: skip


def pcg64_state(words: Sequence[int]) -> dict[str, Any]:
    """The ``bit_generator.state`` of the position :func:`pcg64_words` gave."""
    ints = [int(w) for w in words]
    return {
        "bit_generator": "PCG64",
        "state": {"state": ints[0] | (ints[1] << 64), "inc": ints[2] | (ints[3] << 64)},
        "has_uint32": ints[4],
        "uinteger": ints[5],
    }


class _DrawLog:
    """The streams' positions before their last :attr:`KEPT` draws, each with the stream (a
    weak reference it keeps, so that the log holds no stream alive) and the thread that drew,
    numbered by :attr:`count` (the draws so far, any thread's). The slots are made once:
    noting a draw allocates nothing that stays (a training loop's memory does not grow)."""

    #: draws remembered: a first run that drew more than this many times cannot be undone
    KEPT = 64

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._numbers = np.full(self.KEPT, -1, np.int64)  # each slot's draw number
        self._threads = np.zeros(self.KEPT, np.uint64)
        self._words = np.zeros((self.KEPT, _WORDS), np.uint64)
        self._streams: list[Any] = [None] * self.KEPT  # the streams' weak references
        self._blobs: list[Any] = [None] * self.KEPT  # a position of another form (a device's)

    def before_draw(
        self, stream: Callable[[], Any], words: Sequence[int] = (), blob: Any = None
    ) -> None:
        """Note a draw about to be made from ``stream()`` (a weak reference to an object with
        ``restore_position(words, blob)``), which is at ``words`` (:func:`pcg64_words`) or
        ``blob`` now."""
        with self._lock:
            slot = self.count % self.KEPT
            self._numbers[slot] = self.count
            self._threads[slot] = threading.get_ident()
            if words:
                self._words[slot] = words
            self._streams[slot] = stream
            self._blobs[slot] = blob
            self.count += 1

    def rewind(self, since: int) -> bool:
        """Put every stream this thread drew from since ``since`` (a :attr:`count` read
        before, on this thread) back where it was then; whether that could be done: not
        where the log no longer reaches back so far, nor where another thread drew from one
        of those streams meanwhile (its draws would repeat)."""
        me = threading.get_ident()
        with self._lock:
            if self.count == since:
                return True
            numbers = range(since, self.count)
            slots = [n % self.KEPT for n in numbers]
            if len(slots) > self.KEPT or any(self._numbers[k] != n for k, n in zip(slots, numbers)):
                return False
            mine = [k for k in slots if int(self._threads[k]) == me]
            streams = {id(self._streams[k]) for k in mine}
            if any(int(self._threads[k]) != me and id(self._streams[k]) in streams for k in slots):
                return False
            restores = [(self._streams[k](), self._words[k].tolist(), self._blobs[k]) for k in mine]
        # (outside the lock: a stream takes its own lock to be put back, and a draw holds
        # that lock while it notes itself here); each stream's earliest position last
        for stream, words, blob in reversed(restores):
            if stream is not None:
                stream.restore_position(words, blob)
        return True


class _WriteCount(threading.local):
    """How many in-place writes into a tensor this thread made so far."""

    count = 0

    def note(self) -> None:
        self.count += 1


#: the random streams' log (the process-wide one, a ``Generator``'s, a device's)
DRAWS = _DrawLog()
#: the in-place writes' count, each thread's
WRITES = _WriteCount()
