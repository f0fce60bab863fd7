"""Logical devices."""

from __future__ import annotations

import contextvars
import numbers
import threading
from typing import Any

from .errors import InvalidArgumentError

__all__ = ["Device"]

_INTERNED: dict = {}
#: torch's device types: a device of another kind is a typo, refused as torch refuses it
KINDS = frozenset(
    ("cpu", "cuda", "mps", "xpu", "xla", "meta", "hip", "ipu", "hpu", "mtia", "maia", "ve",
     "fpga", "lazy", "vulkan", "mkldnn", "opengl", "opencl", "ideep", "privateuseone")
)  # fmt: skip
_LOCK = threading.Lock()
#: the ``thread_device`` tokens of the ``with device:`` blocks open in this context, innermost
#: last (devices are interned and shared, so the tokens cannot live on them)
_ENTERED_TOKENS: contextvars.ContextVar[tuple] = contextvars.ContextVar(
    "retrograd_device_blocks", default=()
)


def _index_zero(kind: str) -> int:
    return 0


#: the index a device named without one takes (``"cpu"``, ``torch.device("cuda")``); the
#: context layer installs one that answers the current default device's index when it is of
#: that kind (:func:`resolve_unindexed_with`), so that "cpu" in a rank's code is that rank's
#: ``cpu:RANK``, as torch's "cuda" is the current GPU
_unindexed = _index_zero


#: ``[enter, exit]`` of a ``with device:`` block, installed by the tensor layer
#: (:func:`run_device_blocks_with`): ``enter(device)`` makes it the default device of new
#: tensors and returns a token, ``exit(token)`` restores the previous default
_BLOCK_HOOKS: list = []


def run_device_blocks_with(enter: Any, exit: Any) -> None:  # noqa: A002 (the protocol's name)
    """Make ``with device:`` call ``enter(device) -> token`` and ``exit(token)``."""
    _BLOCK_HOOKS[:] = [enter, exit]


def resolve_unindexed_with(resolver: Any) -> None:
    """Make ``resolver(kind) -> int`` give the index of devices named without one."""
    global _unindexed
    _unindexed = resolver


class Device:
    """A logical device: a kind (``"cpu"``, ``"cuda"``) and an index. ``rg.device`` is this
    class, as ``torch.device``: ``rg.device("cuda:1")``, ``rg.device("cpu")``.

    Devices are interned, so ``Device("cpu", 1) is Device("cpu", 1)``; several cpu devices may
    live in one process (the in-process data-parallel engine gives each its own thread).
    A device named without an index (``Device("cpu")``, a torch device whose index is
    ``None``) is the current default device when that is of its kind (a data-parallel rank's
    ``cpu:RANK``), else index 0.

    Printed as torch prints a tensor's device: ``str(rg.device("cpu"))`` is ``"cpu"``, its
    repr ``device(type='cpu')``; the others with their index (``"cuda:0"``, ``"cpu:1"``). As
    the first CPU device is the one ``"cpu"`` names outside data parallelism, ``"cpu:0"``
    prints as ``"cpu"`` too, and ``rg.device("cpu") == rg.device("cpu:0")`` (torch's differ,
    its ``"cpu"`` having no index; ``index`` is 0 here, where torch's is ``None``).

    >>> Device("cpu", 1)
    device(type='cpu', index=1)
    >>> str(Device("cpu")), Device("cpu")
    ('cpu', device(type='cpu'))
    """

    __slots__ = ("__weakref__", "index", "kind")

    kind: str
    index: int

    def __new__(cls, kind: str = "cpu", index: int | None = None) -> Device:
        if isinstance(kind, Device):
            return kind
        if index is None:
            index = 0 if not isinstance(kind, str) or ":" in kind else _unindexed(kind)
        key = (kind, index)
        device = _INTERNED.get(key) if type(kind) is str and type(index) is int else None
        if device is not None:  # a device made before: checked then
            return device
        key = _parsed(kind, index)
        device = _INTERNED.get(key)
        if device is None:
            with _LOCK:
                device = _INTERNED.get(key)
                if device is None:
                    device = object.__new__(cls)
                    object.__setattr__(device, "kind", key[0])
                    object.__setattr__(device, "index", key[1])
                    _INTERNED[key] = device
        return device

    @property
    def type(self) -> str:
        """The kind, under torch's name (``torch.device("cuda").type``)."""
        return self.kind

    def __setattr__(self, name, value):
        raise AttributeError("Device is immutable")

    def __repr__(self) -> str:
        if self.kind == "cpu" and self.index == 0:
            return "device(type='cpu')"
        return f"device(type={self.kind!r}, index={self.index})"

    def __str__(self) -> str:
        # torch's text for a CPU tensor's device: "cpu" (its CPU devices carry no index);
        # the others of retrograd's logical CPU devices (a data-parallel rank's) keep theirs
        if self.kind == "cpu" and self.index == 0:
            return "cpu"
        return f"{self.kind}:{self.index}"

    def __reduce__(self):
        return (Device, (self.kind, self.index))

    # -- torch's ``with torch.device("meta"): net = Net()``: the default device of the block --
    def __enter__(self) -> Device:
        if not _BLOCK_HOOKS:
            raise InvalidArgumentError("device: `with device:` needs retrograd's tensor layer")
        _ENTERED_TOKENS.set((*_ENTERED_TOKENS.get(), _BLOCK_HOOKS[0](self)))
        return self

    def __exit__(self, *exc: Any) -> None:
        tokens = _ENTERED_TOKENS.get()
        _BLOCK_HOOKS[1](tokens[-1])
        _ENTERED_TOKENS.set(tokens[:-1])


def _parsed(kind: Any, index: Any) -> tuple[str, int]:
    """``(kind, index)`` of ``Device(kind, index)`` (``kind`` may be ``"cuda:1"``), checked."""
    given = kind if index == 0 else f"{kind!r}, {index!r}"
    if not isinstance(kind, str):
        raise InvalidArgumentError(f"device: expected a device string, got {kind!r}")
    if ":" in kind:
        kind, _, number = kind.partition(":")
        index = int(number) if number.isdigit() else number
    if kind not in KINDS:
        raise InvalidArgumentError(
            f"device: unknown device type {kind!r} in {given!r}; expected one of "
            f"{', '.join(sorted(KINDS))}"
        )
    if isinstance(index, numbers.Integral) and not isinstance(index, bool):
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidArgumentError(
            f"device: the index must be a non-negative int, got {index!r} in {given!r}"
        )
    return kind, int(index)


CPU0 = Device("cpu", 0)
