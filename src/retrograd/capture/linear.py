"""A linear layer's epilogue in one pass: a rewrite of a segment's calls before fusion.

A linear layer reaches the NumPy backend as ``linear`` (the product, then the bias added in a
pass of its own), often a ``reshape`` (a view), and then, in a transformer, either ``gelu``
(the MLP's ``gelu(c_fc(x))``) or ``add`` into the residual stream (``x + c_proj(...)``), each
reading the whole product again. When those calls come one after another and nothing else
reads the product before them, the program runs them as one call: the product, then one
compiled loop (``backend/compiled.py``) over it while each row is in cache:

- :func:`linear_gelu` (float32): the bias added and the GELU written (``bias_gelu_float32``);
  both values stay, as backward reads the GELU's input;
- :func:`linear_add`: ``residual + (product + bias)`` written over the product
  (``bias_residual_rows``), so the sum needs no array of its own.

A GPT's [2048, 512] and [2048, 128]: a pass over the product fewer, and for the residual add
an array fewer. The loops' arithmetic is the calls' (the addition of the bias, then
``gelu_float32``'s formula or the ``add``), so the bits are theirs; where they do not apply
(other dtypes, no bias, other layouts) the calls run as recorded.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from .fusion import _is_numpy_kernel
from .recording import slot_readers

__all__ = ["fuse_linear_epilogues", "linear_add", "linear_gelu"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


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


def linear_add(
    linear: Any, reshape: Any, add: Any, first: bool, shape: Any, x: Any, weight: Any,
    bias: Any, residual: Any,
) -> Any:  # fmt: skip
    """``add(residual, h)`` (``add(h, residual)`` unless ``first``) for ``h = linear(x,
    weight, bias)`` reshaped to ``shape`` unless it is ``None``: the bias and the sum in one
    pass over the product where the operands are float arrays of one dtype."""
    if (
        isinstance(x, np.ndarray)
        and isinstance(weight, np.ndarray)
        and isinstance(bias, np.ndarray)
        and isinstance(residual, np.ndarray)
        and x.dtype in _FLOATS
        and x.dtype == weight.dtype == bias.dtype == residual.dtype
        and x.ndim >= 1
        and weight.ndim == 2
        and bias.shape == (weight.shape[0],)
        and bias.size > 0
        and x.shape[-1] == weight.shape[1]
        and residual.flags.c_contiguous
    ):
        rows = (*x.shape[:-1], weight.shape[0])
        if residual.shape == (rows if shape is None else _resolved(shape, rows)):
            from ..backend.compiled import bias_residual_rows

            out = np.empty(residual.shape, x.dtype)  # its own memory, as the add's result
            np.matmul(x, weight.T, out=out.reshape(rows))
            flat = out.reshape(-1, bias.size)
            bias_residual_rows(flat, bias, residual.reshape(-1, bias.size))
            return out
    product = linear(x, weight, bias)
    if shape is not None:
        product = reshape(product, shape)
    return add(residual, product) if first else add(product, residual)


def _resolved(shape: Any, rows: tuple) -> tuple:
    """``shape`` (a reshape's target, maybe with a ``-1``) for an array of shape ``rows``."""
    shape = tuple(shape)
    if -1 in shape:
        known = int(np.prod([n for n in shape if n != -1]))
        size = int(np.prod(rows))
        shape = tuple(size // known if known and n == -1 else n for n in shape)
    return shape


def _float_array(encoded: tuple, meta: list) -> tuple | None:
    """``(shape, dtype)`` of a slot or constant that is a float32 or float64 array."""
    if encoded[0] == "s":
        info = meta[encoded[1]]
        if info is None or info[0] is not np.ndarray or np.dtype(info[2]) not in _FLOATS:
            return None
        return tuple(info[1]), np.dtype(info[2])
    value = encoded[1]
    if isinstance(value, np.ndarray) and value.dtype in _FLOATS:
        return value.shape, value.dtype
    return None


def _match(calls: list[tuple], start: int, meta: list, later: set, readers: dict) -> tuple:
    """``(number of calls, epilogue call)`` of a linear layer from ``start`` and its GELU or
    residual add (``(0, None)`` if there is none)."""
    none = 0, None
    _, function, name, args, kwargs, product = calls[start]
    if (
        name != "linear"
        or kwargs
        or len(args) != 3
        or type(product) is not int
        or not _is_numpy_kernel(function, name)
    ):
        return none
    operands = [_float_array(encoded, meta) for encoded in (*args, ("s", product))]
    if any(info is None for info in operands) or len({info[1] for info in operands}) != 1:
        return none
    (_, dtype), weight, bias = operands[0], operands[1][0], operands[2][0]
    if len(weight) != 2 or bias != (weight[0],) or not weight[0]:
        return none
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
            return none
        position, value = position + 1, out
    if position >= len(calls):
        return none
    epilogue = calls[position]
    _, function, name, args, kwargs, out = epilogue
    if kwargs or type(out) is not int or not _is_numpy_kernel(function, name):
        return none
    if name == "gelu" and args == [("s", value)] and dtype == np.float32:
        return position - start + 1, epilogue
    if (
        name != "add"
        or len(args) != 2
        or ("s", value) not in args
        or args[0] == args[1]
        or readers.get(value) != 1
        or value in later
    ):
        return none
    residual = _float_array(args[0] if args[1] == ("s", value) else args[1], meta)
    shape = _float_array(("s", value), meta)
    if residual is None or residual != shape or tuple(meta[out][1]) != shape[0]:
        return none
    return position - start + 1, epilogue


def fuse_linear_epilogues(calls: list[tuple], meta: list, later: set) -> list[tuple]:
    """``calls`` with each ``linear`` (with a bias), optional ``reshape`` and ``gelu`` or
    residual ``add`` replaced by one :func:`linear_gelu` or :func:`linear_add` call.
    ``meta``: each slot's recorded type, shape and dtype; ``later``: the slots read after
    these calls."""
    readers = slot_readers(calls)
    out: list[tuple] = []
    position = 0
    while position < len(calls):
        length, epilogue = _match(calls, position, meta, later, readers)
        if not length:
            out.append(calls[position])
            position += 1
            continue
        run = calls[position : position + length]
        linear = run[0]
        reshape = run[1] if length == 3 else None
        shape = reshape[3][1][1] if reshape else None
        reshape_function = reshape[1] if reshape else None
        product = reshape[5] if reshape else linear[5]
        if epilogue[2] == "gelu":
            function = partial(linear_gelu, linear[1], reshape_function, epilogue[1], shape)
            call = ("call", function, "linear_gelu", list(linear[3]), {}, (product, epilogue[5]))
        else:
            first = epilogue[3][1] == ("s", product)  # add(residual, product)
            residual = epilogue[3][0] if first else epilogue[3][1]
            function = partial(linear_add, linear[1], reshape_function, epilogue[1], first, shape)
            call = ("call", function, "linear_add", [*linear[3], residual], {}, epilogue[5])
        out.append(call)
        position += length
    return out
