"""The FLOPs of a recorded op, counted from its op name and operand shapes (the timer's key),
and the share of a step's FLOPs a plan recomputes: a measure of a plan's cost that no
timing noise moves.

The count is a model, not a measurement: a product (``matmul``, ``linear``, batched alike)
costs ``2 * m * n * k`` per batch entry, attention (``scaled_dot_product_attention``'s
``attention`` op) its two products, ``4 * b * h * t * s * d``; every other op one FLOP per
element of its largest operand (an elementwise op, a reduction, a softmax, a copy). A view
(a value that shares its parent's buffer) costs none. A step's FLOPs are three times its
forward's: backward computes about two products per forward one (the usual count of a
training step, Kaplan et al. and Megatron's papers). The share a plan recomputes
(:func:`recompute_fraction`) is what its backward reruns, each evicted value once, as the
plan models it, over that step: the bound below which no timing of the step can go that
the plan itself sets, whatever the machine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["op_flops", "recompute_flops", "recompute_fraction", "step_flops"]

#: ops that multiply their last two axes as matrices, batched over the leading ones
_PRODUCTS = frozenset({"matmul", "bmm", "mm"})
#: a value whose op is unknown (recorded untimed, with no key): a FLOP per 4 bytes it holds
_BYTES_PER_ELEMENT = 4


def _elements(shape: Any) -> int:
    return math.prod(shape) if isinstance(shape, tuple) else 0


def op_flops(key: tuple, nbytes: int) -> float:
    """FLOPs of the op of the timer's ``key`` (``(op name, output bytes, *input shapes)``)
    whose output holds ``nbytes``.

    >>> op_flops(("matmul", 0, (4, 8, 16), (16, 32)), 0)  # 2 * (4 * 8) * 16 * 32
    32768.0
    >>> op_flops(("linear", 0, (10, 16), (32, 16), (32,)), 0)  # 2 * 10 * 16 * 32
    10240.0
    >>> op_flops(("attention", 0, (2, 4, 8, 16), (2, 4, 8, 16), (2, 4, 8, 16)), 0)
    32768.0
    >>> op_flops(("tanh", 0, (4, 8)), 0), op_flops((), 64)
    (32.0, 16.0)
    """
    if len(key) < 3:
        return float(nbytes // _BYTES_PER_ELEMENT)
    name, shapes = key[0], [s for s in key[2:] if isinstance(s, tuple)]
    if name in _PRODUCTS and len(shapes) >= 2 and len(shapes[0]) and len(shapes[1]) >= 2:
        a, b = shapes[0], shapes[1]
        *batch_a, m, k = a if len(a) >= 2 else (1, *a)
        *batch_b, _, n = b
        rank = max(len(batch_a), len(batch_b))
        batch_a = [1] * (rank - len(batch_a)) + batch_a
        batch_b = [1] * (rank - len(batch_b)) + batch_b
        batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b))
        return float(2 * batch * m * k * n)
    if name == "linear" and len(shapes) >= 2 and len(shapes[1]) == 2:
        out_features, in_features = shapes[1]
        rows = _elements(shapes[0]) // max(in_features, 1)
        return float(2 * rows * in_features * out_features)
    if name == "attention" and len(shapes) >= 3 and len(shapes[0]) >= 2:
        query, keys, values = shapes[:3]
        *batch, t, d = query
        s, dv = keys[-2], values[-1]
        return float(2 * math.prod(batch) * t * s * (d + dv))
    return float(max((_elements(s) for s in shapes), default=nbytes // _BYTES_PER_ELEMENT))


def step_flops(flops: Sequence[float]) -> float:
    """A training step's FLOPs: its forward's (``flops``, per recorded value) and backward's,
    counted as twice the forward's."""
    return 3.0 * float(sum(flops))


def recompute_flops(trace: Any, evicted: Sequence[bool]) -> float:
    """FLOPs ``trace``'s backward reruns when ``evicted`` are recomputed, as
    :func:`~.plan.profile` models the schedule (each evicted value needed once rerun, once)."""
    from .plan import profile

    counted = trace.with_costs(trace.flops)
    return profile(counted, evicted, views=False).seconds


def recompute_fraction(trace: Any, evicted: Sequence[bool]) -> float | None:
    """The share of the step's FLOPs (:func:`step_flops`) the plan of ``evicted`` recomputes;
    ``None`` for a trace that counted no FLOPs."""
    total = step_flops(trace.flops)
    if not trace.flops or total <= 0:
        return None
    return recompute_flops(trace, evicted) / total
