"""torch's ``torch.nn.attention``: :class:`SDPBackend` and :func:`sdpa_kernel`.

In torch, ``sdpa_kernel(backends)`` restricts which kernels ``scaled_dot_product_attention``
may pick (math, flash, memory-efficient, cuDNN); every one computes the same function, to
float rounding. retrograd has one attention kernel per inner backend, so the choice changes
which function is computed in neither library: ``sdpa_kernel`` checks its argument as torch
does, makes the selection visible (:func:`enabled_backends`) for the block, and restores the
previous one on exit. An empty selection is entered, and attention called inside it raises, as
torch's "No viable backend" does.

>>> from retrograd.nn.attention import SDPBackend, sdpa_kernel, enabled_backends
>>> with sdpa_kernel(SDPBackend.MATH):
...     enabled_backends()
[<SDPBackend.MATH: 0>]
"""

from __future__ import annotations

# the selection lives with torch's flags that read it (``backends.cuda.flash_sdp_enabled()``...)
from ...backends import SDPBackend, enabled_backends, sdpa_kernel

__all__ = ["SDPBackend", "enabled_backends", "sdpa_kernel"]
