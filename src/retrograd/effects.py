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
from collections import deque
from collections.abc import Callable

__all__ = ["DRAWS", "WRITES"]


class _DrawLog:
    """The streams' positions before their last :attr:`KEPT` draws, each with the stream and
    the thread that drew, numbered by :attr:`count` (the draws so far, any thread's)."""

    #: draws remembered: a first run that drew more than this many times cannot be undone
    KEPT = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0
        self._entries: deque[tuple[int, int, object, Callable[[], None]]] = deque(maxlen=self.KEPT)

    def before_draw(self, stream: object, restore: Callable[[], None]) -> None:
        """Note a draw about to be made from ``stream``: ``restore`` puts it back where it
        is now."""
        with self._lock:
            self._entries.append((self.count, threading.get_ident(), stream, restore))
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
            later = [entry for entry in self._entries if entry[0] >= since]
            if not later or later[0][0] != since:
                return False
            mine = [entry for entry in later if entry[1] == me]
            streams = {id(entry[2]) for entry in mine}
            if any(entry[1] != me and id(entry[2]) in streams for entry in later):
                return False
            kept = [entry for entry in self._entries if entry[0] < since or entry[1] != me]
            self._entries.clear()
            self._entries.extend(kept)
        # (outside the lock: a stream takes its own lock to be put back, and a draw holds
        # that lock while it notes itself here)
        for entry in reversed(mine):  # each stream's earliest position put back last
            entry[3]()
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
