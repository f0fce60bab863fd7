"""torch's spacing of values (its CPU ``linspace``) on the host, to the bit: for
``rg.linspace`` and the edges of ``histogram``'s bins."""

from __future__ import annotations

import numpy as np


def torch_linspace(start: float, end: float, steps: int, precision: type) -> np.ndarray:
    """torch's CPU ``linspace`` to the bit: the step ``(end - start) / (steps - 1)`` in the
    dtype, then ``start + step * i`` below the middle and ``end - step * (steps - 1 - i)``
    from it, each one fused multiply-add (one rounding), as its vectorized kernel computes
    them; wider arithmetic holds the product exactly.

    >>> torch_linspace(-1.0, 1.0, 7, np.float64)[3]  # 1 - (1/3 rounded) * 3, rounded once
    np.float64(5.551115123125783e-17)
    """
    if steps == 1:
        return np.array([start], dtype=precision)
    s, e = precision(start), precision(end)
    step = (e - s) / precision(max(steps - 1, 1))
    wide = np.longdouble if precision == np.float64 else np.float64
    index = np.arange(steps)
    below = wide(s) + wide(step) * index.astype(wide)
    above = wide(e) - wide(step) * (steps - 1 - index).astype(wide)
    return np.where(index < steps // 2, below, above).astype(precision)
