"""How many ``vmap`` calls the current thread is inside: read by ``vmap`` itself (a read of a
mapped value on the host is refused inside one) and by ``Function.apply`` (a custom function
needs a ``vmap`` rule there, as torch's)."""

from __future__ import annotations

import threading

__all__ = ["VMAP"]


class _VmapDepth(threading.local):
    """How many ``vmap`` calls this thread is inside."""

    depth = 0


VMAP = _VmapDepth()
