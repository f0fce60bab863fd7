"""torch's ``torch.nn.attention``: :class:`SDPBackend` and :func:`sdpa_kernel`.

In torch, ``sdpa_kernel(backends)`` restricts which kernels ``scaled_dot_product_attention``
may pick (math, flash, memory-efficient, cuDNN); every one computes the same function, to
float rounding. retrograd has one attention kernel per inner backend, so the choice changes
which function is computed in neither library: ``sdpa_kernel`` checks its argument as torch
does, makes the selection visible (:func:`enabled_backends`) for the block, and restores the
previous one on exit. An empty selection raises, as torch's "no viable backend" does.

>>> from retrograd.nn.attention import SDPBackend, sdpa_kernel, enabled_backends
>>> with sdpa_kernel(SDPBackend.MATH):
...     enabled_backends()
[<SDPBackend.MATH: 0>]
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
from collections.abc import Iterator
from typing import Any

from ...errors import InvalidArgumentError

__all__ = ["SDPBackend", "enabled_backends", "sdpa_kernel"]


class SDPBackend(enum.Enum):
    """torch's kernel kinds for ``scaled_dot_product_attention``, with torch's values."""

    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_KERNELS = [b for b in SDPBackend if b is not SDPBackend.ERROR]
_ENABLED: contextvars.ContextVar[tuple[SDPBackend, ...]] = contextvars.ContextVar(
    "sdpa_enabled", default=tuple(_KERNELS)
)


def enabled_backends() -> list[SDPBackend]:
    """The kernel kinds the current block allows (all of them outside ``sdpa_kernel``)."""
    return list(_ENABLED.get())


@contextlib.contextmanager
def sdpa_kernel(backends: Any, set_priority: bool = False) -> Iterator[None]:
    """Allow only ``backends`` (one :class:`SDPBackend` or a list) in the block, as torch's
    context manager; ``set_priority`` (an order of preference) is accepted. retrograd's
    attention is the same function under every selection (see the module docstring)."""
    chosen = [backends] if isinstance(backends, SDPBackend) else backends
    if not isinstance(chosen, list | tuple) or not all(isinstance(b, SDPBackend) for b in chosen):
        raise InvalidArgumentError(
            f"sdpa_kernel: backend must be an instance of SDPBackend or a list of SDPBackend "
            f"instances, got {type(backends).__name__}"
        )
    usable = tuple(b for b in chosen if b is not SDPBackend.ERROR)
    if not usable:
        raise InvalidArgumentError(
            f"sdpa_kernel: no viable backend for scaled_dot_product_attention in {chosen}"
        )
    token = _ENABLED.set(usable)
    try:
        yield
    finally:
        _ENABLED.reset(token)
