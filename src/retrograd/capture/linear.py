"""A linear layer's bias and the GELU after it in one pass: a rewrite of a segment's calls before
fusion.

A transformer's MLP (``gelu(c_fc(x))``) reaches the NumPy backend as ``linear`` (the product,
then the bias added in a pass of its own), often a ``reshape`` (a view), and ``gelu``, which
reads the whole product again. When those calls come one after another and nothing else
reads the product before its reshape, the program runs them as one :func:`linear_gelu`: the
product, then one compiled loop (``backend/compiled.py``'s ``bias_gelu_float32``) that adds
the bias and writes the GELU while each row is in cache (a GPT's [2048, 512]: one pass over
4 MiB fewer). Both values stay: backward reads the GELU's input. The loop's arithmetic is the
two calls' (the float32 addition, then ``gelu_float32``'s formula), so the bits are theirs;
where it does not apply (other dtypes, no bias) the calls run as recorded.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from .fusion import _is_numpy_kernel
from .recording import slots_of

__all__ = ["fuse_linear_gelu", "linear_gelu"]


def linear_gelu(
    linear: Any, reshape: Any, gelu: Any, shape: Any, x: Any, weight: Any, bias: Any
) -> tuple:
    """``(h, gelu(h))`` for ``h = linear(x, weight, bias)``, reshaped to ``shape`` unless it
    is ``None``: one pass for the bias and the GELU where the operands are float32 arrays."""
    if (
        isinstance(x, np.ndarray)
        and isinstance(weight, np.ndarray)
        and isinstance(bias, np.ndarray)
        and x.dtype == weight.dtype == bias.dtype == np.float32
        and x.ndim >= 1
        and weight.ndim == 2
        and bias.shape == (weight.shape[0],)
        and bias.size > 0
        and x.shape[-1] == weight.shape[1]
    ):
        from ..backend.compiled import bias_gelu_float32

        product = np.matmul(x, weight.T)
        rows = product.reshape(-1, bias.size)
        out = np.empty(rows.shape, np.float32)
        bias_gelu_float32(rows, bias, out)
        if shape is not None:
            product = reshape(product, shape)
        return product, out.reshape(product.shape)
    product = linear(x, weight, bias)
    if shape is not None:
        product = reshape(product, shape)
    return product, gelu(product)


def _float32_array(encoded: tuple, meta: list) -> tuple | None:
    """The shape of a slot or constant that is a float32 array, else ``None``."""
    if encoded[0] == "s":
        info = meta[encoded[1]]
        if info is None or info[0] is not np.ndarray or np.dtype(info[2]) != np.float32:
            return None
        return tuple(info[1])
    value = encoded[1]
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.shape
    return None


def _match(calls: list[tuple], start: int, meta: list, later: set, readers: dict) -> int:
    """How many calls from ``start`` make a linear layer and its GELU (0 if they do not)."""
    _, function, name, args, kwargs, product = calls[start]
    if (
        name != "linear"
        or kwargs
        or len(args) != 3
        or type(product) is not int
        or not _is_numpy_kernel(function, name)
    ):
        return 0
    weight, bias = _float32_array(args[1], meta), _float32_array(args[2], meta)
    if weight is None or bias is None or len(weight) != 2 or bias != (weight[0],):
        return 0
    if _float32_array(args[0], meta) is None or _float32_array(("s", product), meta) is None:
        return 0
    position, value = start + 1, product
    if position < len(calls) and calls[position][2] == "reshape":
        _, function, name, args, kwargs, out = calls[position]
        if (
            kwargs
            or len(args) != 2
            or args[0] != ("s", product)
            or args[1][0] != "c"
            or type(out) is not int
            or not _is_numpy_kernel(function, name)
            or readers.get(product) != 1
            or product in later
        ):
            return 0
        position, value = position + 1, out
    if position >= len(calls):
        return 0
    _, function, name, args, kwargs, out = calls[position]
    if (
        name != "gelu"
        or kwargs
        or args != [("s", value)]
        or type(out) is not int
        or not _is_numpy_kernel(function, name)
    ):
        return 0
    return position - start + 1


def fuse_linear_gelu(calls: list[tuple], meta: list, later: set) -> list[tuple]:
    """``calls`` with each ``linear`` (with a bias), optional ``reshape`` and ``gelu`` run
    replaced by one :func:`linear_gelu` call. ``meta``: each slot's recorded type, shape and
    dtype; ``later``: the slots read after these calls."""
    readers: dict[int, int] = {}
    for call in calls:
        for slot in slots_of(call[3], call[4]):
            readers[slot] = readers.get(slot, 0) + 1
    out: list[tuple] = []
    position = 0
    while position < len(calls):
        length = _match(calls, position, meta, later, readers)
        if not length:
            out.append(calls[position])
            position += 1
            continue
        run = calls[position : position + length]
        linear, gelu = run[0], run[-1]
        reshape = run[1] if length == 3 else None
        function = partial(
            linear_gelu,
            linear[1],
            reshape[1] if reshape else None,
            gelu[1],
            reshape[3][1][1] if reshape else None,
        )
        product = reshape[5] if reshape else linear[5]
        out.append(("call", function, "linear_gelu", list(linear[3]), {}, (product, gelu[5])))
        position += length
    return out
