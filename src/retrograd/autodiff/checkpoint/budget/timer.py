"""How long each recorded op took, for the price of recomputing its output.

The time of an op is the wall time since the previous recorded op ended (its kernel and the
Python around it): no clock call per kernel. A training loop reruns the same ops, so the
fastest time seen for an op and its shapes is kept, which filters out pauses and noise; a
plan prices every value of its trace at that fastest time (:meth:`OpTimer.fastest`), so that
the first op of a step (whose wall time since the previous op is unknown, or includes whatever
the loop did in between) costs what its like cost elsewhere in the step.
"""

from __future__ import annotations

import math
import time

__all__ = ["OpTimer"]

#: seconds per byte assumed for an op whose time was not measured (about a memory-bound op's)
_DEFAULT_SECONDS_PER_BYTE = 1e-10

#: a run of an op this much faster than its fastest before reprices the values priced at that
#: (:attr:`OpTimer.improved`): an eviction tier's width (:mod:`.evictor`), so that the small
#: gains of every run do not each cost a pass over the values held
REPRICE_FACTOR = math.sqrt(2)

#: op keys (op, bytes, shapes) whose fastest time is kept at most, the oldest dropped first: a
#: loop whose shapes change every step (a sequence length or a batch size drawn per batch)
#: would otherwise add keys for as long as it runs. A loop of fixed shapes keeps a few hundred.
MAX_KEYS = 4096


class OpTimer:
    """Measures recorded ops: :meth:`measure` at each, :meth:`restart` when its recording is
    done, :meth:`pause` while a backward runs (whose time is no op's)."""

    def __init__(self) -> None:
        #: (op name, output bytes, input shapes) -> fastest run seen. Shapes, not bytes: two
        #: matmuls of equal operand and output bytes can differ fourfold in work (a
        #: transformer's ``x @ w_up`` and its ``q @ k.T`` do), and one priced at the other's
        #: time misleads the plan into recomputing it
        self._seconds: dict[tuple, float] = {}
        #: when the next op's time started (the budget's ``save`` inlines :meth:`restart`);
        #: nothing was recorded yet: the first op's time is unknown, not the time since the
        #: strategy was made
        self.tick = math.inf
        #: the key of the op measured last (see :meth:`fastest`)
        self.key: tuple = ()
        #: ``(key, seconds)`` of the op measured last when that run beat an earlier fastest
        #: time of the same key by :data:`REPRICE_FACTOR` (the values priced at the slower time
        #: are repriced: see :meth:`.Evictor.reprice`), else ``None``. The time travels with
        #: the key: the op may be measured where the caller's own measurement is ``None`` (a
        #: followed plan left at this op), and a stale key must not meet another op's time
        self.improved: tuple[tuple, float] | None = None

    def measure(self, op_name: str, out_bytes: int, inputs: tuple) -> float:
        """Seconds the op just recorded took, the fastest seen for the same op and shapes."""
        seconds = time.perf_counter() - self.tick
        key = self.key = (op_name, out_bytes, *[getattr(x.value, "shape", None) for x in inputs])
        best = self._seconds.get(key)
        if best is not None and best <= seconds:
            return best
        if seconds <= 0 or seconds == math.inf:  # the first op after a backward: unknown
            return best if best is not None else _DEFAULT_SECONDS_PER_BYTE * (out_bytes + 1)
        if best is not None and seconds * REPRICE_FACTOR <= best:
            self.improved = (key, seconds)
        table = self._seconds
        if best is None and len(table) >= MAX_KEYS:
            del table[next(iter(table))]
        table[key] = seconds
        return seconds

    def fastest(self, key: tuple, seconds: float) -> float:
        """The fastest time measured for the op of ``key`` (a :attr:`key`), else ``seconds``
        (an op never measured: its default estimate)."""
        return self._seconds.get(key, seconds)

    def restart(self) -> None:
        """The next op's time starts now."""
        self.tick = time.perf_counter()

    def pause(self) -> None:
        """A backward runs before the next op: that op's time is unknown."""
        self.tick = math.inf
