"""The running contexts, by the devices they host, and the backward hook's install.

Both the backward hook (:mod:`.reducer.backward_hook`) and ``all_reduce``
(:mod:`.collective`) find a device's context here; the context registers itself on ``start``
and leaves on ``close``. The hook is installed in the autodiff runtime's ``BACKWARD_HOOKS``
while any context runs, so a process that never starts one pays nothing in its backwards.
"""

from __future__ import annotations

import threading
from typing import Any

from ..device import Device
from ..errors import DistributedError

__all__ = ["active_context", "register_context", "unregister_context"]

_LOCK = threading.Lock()
#: device -> the running context that hosts it
_CONTEXTS: dict[Device, Any] = {}


def active_context(device: Device) -> Any:
    """The running context that hosts ``device``, or ``None``."""
    return _CONTEXTS.get(device)


def register_context(context: Any, hook: Any) -> None:
    """Make ``context`` the one of its local devices, and install ``hook`` (one object, shared
    by every context) in the autodiff runtime if it is not there yet."""
    from ..autodiff.runtime import BACKWARD_HOOKS

    with _LOCK:
        taken = [d for d in context.local_devices if d in _CONTEXTS]
        if taken:
            raise DistributedError(
                f"DistributedContext: {', '.join(map(str, taken))} already belong to a running "
                "context; close it first"
            )
        for device in context.local_devices:
            _CONTEXTS[device] = context
        if hook not in BACKWARD_HOOKS:
            BACKWARD_HOOKS.append(hook)


def unregister_context(context: Any, hook: Any) -> None:
    """Forget ``context``; ``hook`` leaves the runtime with the last running context."""
    from ..autodiff.runtime import BACKWARD_HOOKS

    with _LOCK:
        for device in context.local_devices:
            if _CONTEXTS.get(device) is context:
                del _CONTEXTS[device]
        # gradients accumulated under no_sync belong to this context's job, not the next
        hook.forget(context.local_devices)
        if not _CONTEXTS and hook in BACKWARD_HOOKS:
            BACKWARD_HOOKS.remove(hook)
