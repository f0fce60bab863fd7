"""Hooks on the values saved for backward (torch's ``saved_tensors_hooks``), at the engine's
level: while a pair ``(pack, unpack)`` is pushed in a thread, every value a node's backward
rules read, as recorded (the main actions of its :class:`~.checkpoint.builder.Saved`
record), is held as ``pack(backend, value)`` under a key of its own (as an untracked input's
value is), so that each node's step reads it once and unpacks it once: torch calls its
unpack hook once per saved tensor a backward function unpacks, and a value that another node
saved without hooks is read as it is. The packed value remembers the node that made it, for
``create_graph``'s rules (:func:`unpack_step`).

Only the innermost pair applies (torch's rule); pairs are per thread (torch's are thread
local). What a strategy keeps only to recompute from (backups) is held unpacked, and a
memory budget, which holds its values in slots it evicts, refuses hooks rather than
ignoring them. The user's hooks, which take and give tensors, are wrapped above this layer
(:mod:`retrograd.autograd.graph`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ..errors import AutodiffError
from .checkpoint.builder import Saved
from .checkpoint.state import RECOMPUTE
from .ids import new_node_id

__all__ = [
    "EVER_PACKED",
    "HOOKED_THREADS",
    "Packed",
    "active_pair",
    "disabled_message",
    "pack_one",
    "pack_saved",
    "pop",
    "push",
    "set_disabled",
    "unpack_step",
]

_LOCAL = threading.local()

#: how many threads have a pair pushed: the recording path tests this alone when none has
HOOKED_THREADS = [0]
#: whether a value was ever packed: backward steps look for packed values only after that
EVER_PACKED = [False]


class Packed:
    """A saved value held as its pack hook's result: ``key``, the id of the node whose
    output it is (or the fresh key of an untracked input), and the unpack that gives the
    value back."""

    __slots__ = ("key", "packed", "unpack")

    def __init__(self, key: int, packed: Any, unpack: Callable[[Any], Any]):
        self.key = key
        self.packed = packed
        self.unpack = unpack


def _stack() -> list:
    stack = getattr(_LOCAL, "stack", None)
    if stack is None:
        stack = _LOCAL.stack = []
    return stack


def push(pack: Callable[[Any, Any], Any], unpack: Callable[[Any], Any]) -> None:
    """Make ``(pack, unpack)`` this thread's pair until the matching :func:`pop`."""
    message = disabled_message()
    if message is not None:
        raise AutodiffError(message)
    stack = _stack()
    if not stack:
        HOOKED_THREADS[0] += 1
    stack.append((pack, unpack))


def pop() -> None:
    stack = _stack()
    stack.pop()
    if not stack:
        HOOKED_THREADS[0] -= 1


def active_pair() -> tuple | None:
    """This thread's innermost pair, or ``None``."""
    stack = getattr(_LOCAL, "stack", None)
    return stack[-1] if stack else None


def disabled_message() -> str | None:
    """The message of ``disable_saved_tensors_hooks`` while it is in force in this thread."""
    return getattr(_LOCAL, "disabled", None)


def set_disabled(message: str | None) -> str | None:
    """Disable hooks in this thread with ``message`` (``None``: enable); the previous one."""
    previous = disabled_message()
    _LOCAL.disabled = message
    return previous


def pack_saved(backend: Any, saved: Any, pair: tuple) -> None:
    """Hold each value ``saved`` keeps for its node's rules as the pair's packed form."""
    if saved.actions is None:
        return
    if type(saved) is not Saved:
        raise AutodiffError(
            f"saved_tensors_hooks: the values saved for backward under {backend.checkpointing!r} "
            "live in the memory budget's slots, which it evicts and recomputes; saved tensor "
            "hooks are supported under NoCheckpointing and BalancedCheckpointing"
        )
    pack, unpack = pair
    EVER_PACKED[0] = True
    actions = saved.actions
    keys = list(saved.keys)
    for index, (key, value, is_backup) in enumerate(actions):
        if is_backup or value is RECOMPUTE:
            continue
        own_key = new_node_id()
        actions[index] = (own_key, Packed(key, pack(backend, value), unpack), False)
        keys[keys.index(key)] = own_key  # the rule's first read of ``key`` still unkeyed
    saved.keys = tuple(keys)


def pack_one(backend: Any, saved: Any, position: int, pair: tuple) -> None:
    """Hold the ``position``-th value ``saved`` keeps for its node's rules as the pair's packed
    form (torch's ``SavedTensor.register_hooks``), as :func:`pack_saved` holds each."""
    if type(saved) is not Saved:
        raise AutodiffError(
            f"register_hooks: the values saved for backward under {backend.checkpointing!r} "
            "live in the memory budget's slots; saved tensor hooks are supported under "
            "NoCheckpointing and BalancedCheckpointing"
        )
    actions = saved.actions
    index = [i for i, (_, _, is_backup) in enumerate(actions) if not is_backup][position]
    key, value, _ = actions[index]
    if type(value) is Packed:
        raise AutodiffError("register_hooks: hooks have already been set on this SavedTensor")
    if value is RECOMPUTE:
        raise AutodiffError(
            "register_hooks: this saved value is recomputed during backward by the "
            "checkpointing strategy, not held: there is nothing to pack"
        )
    pack, unpack = pair
    EVER_PACKED[0] = True
    own_key = new_node_id()
    actions[index] = (own_key, Packed(key, pack(backend, value), unpack), False)
    keys = list(saved.keys)
    keys[position] = own_key
    saved.keys = tuple(keys)


def unpack_step(keys: tuple, values: list) -> tuple[tuple, list]:
    """The keys and values a step reads, each packed value unpacked and keyed by the node
    it came from again (``create_graph`` finds its node by that key)."""
    keys, values = list(keys), list(values)
    for index, value in enumerate(values):
        if type(value) is Packed:
            keys[index] = value.key
            values[index] = value.unpack(value.packed)
    return tuple(keys), values
