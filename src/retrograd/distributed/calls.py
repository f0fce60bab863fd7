"""What a user collective is (:class:`Call`), the header its members exchange before moving any
data, and the verdict on the members' headers (pure functions).

Every member of a collective first all-gathers a small fixed-size header (what it was asked:
the kind, the operation, the dim or source, the order of the devices; what it holds: dtype and
shape; and whether it already rejected the call). Every member then reads the same headers and
so reaches the same verdict: the data moves only if all agree, else every member fails with the
same message. A mismatch therefore never reaches the transport, where MPI or gloo would
truncate, hang or silently reduce buffers of different sizes.

The duals (:func:`dual`) are the backward rules of the collectives: all-gather and
reduce-scatter (SUM) are each other's adjoint; broadcast's adjoint is a sum delivered to the
source (``reduce_to``), and that one's is broadcast again; all-reduce is its own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..device import Device
from .config import ReduceOperation

__all__ = ["KINDS", "Call", "check_headers", "dual", "header", "transport_collective"]

#: the kinds of user collective, in header code order
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce_to")
#: dtypes a header can name, in code order (anything else is code -1: compared by name only
#: where both sides know it)
_DTYPES = (
    "float32",
    "float64",
    "int64",
    "int32",
    "bool",
    "bfloat16",
    "float16",
    "uint8",
    "int16",
    "int8",
)
#: shape dims a header holds exactly; the product of any beyond follows them
_MAX_DIMS = 8
#: kind, op, dtype, dim, src, rejected, ndim, dims..., rest
_FIXED = 7 + _MAX_DIMS + 1


@dataclass(frozen=True)
class Call:
    """One user collective as every member must call it.

    ``devices`` in the caller's order (the order ``all_gather`` concatenates in and
    ``reduce_scatter`` hands out slices in); ``dim`` normalized (non-negative) or ``None``;
    ``src`` an index into ``devices`` (broadcast, reduce_to) or ``None``.

    >>> c = Call("all_gather", None, (Device("cpu", 0), Device("cpu", 1)), dim=0)
    >>> c.describe()
    'all_gather (dim=0) over cpu, cpu:1'
    """

    kind: str
    op: ReduceOperation | None
    devices: tuple[Device, ...]
    dim: int | None = None
    src: int | None = None

    def describe(self) -> str:
        details = [self.op.name] if self.op is not None else []
        if self.dim is not None:
            details.append(f"dim={self.dim}")
        if self.src is not None:
            details.append(f"src={self.src}")
        inside = f" ({', '.join(details)})" if details else ""
        return f"{self.kind}{inside} over {', '.join(map(str, self.devices))}"


def dual(call: Call) -> tuple[Call, float | None]:
    """The collective that is ``call``'s backward, and a scale applied to its result (the
    1/n of a MEAN reduce-scatter, whose all-reduce scales its dual itself).

    >>> d = (Device("cpu", 0), Device("cpu", 1))
    >>> dual(Call("all_gather", None, d, dim=1))[0].kind, dual(Call("all_gather", None, d, 1))[0].op
    ('reduce_scatter', ReduceOperation.SUM)
    >>> back, scale = dual(Call("reduce_scatter", ReduceOperation.MEAN, d, dim=0))
    >>> back.describe(), scale
    ('all_gather (dim=0) over cpu, cpu:1', 0.5)
    >>> dual(Call("broadcast", None, d, src=1))[0].kind
    'reduce_to'
    """
    n = len(call.devices)
    if call.kind == "all_gather":
        return replace(call, kind="reduce_scatter", op=ReduceOperation.SUM), None
    if call.kind == "reduce_scatter":
        scale = 1.0 / n if call.op is ReduceOperation.MEAN else None
        return replace(call, kind="all_gather", op=None), scale
    if call.kind == "broadcast":
        return replace(call, kind="reduce_to", op=ReduceOperation.SUM), None
    if call.kind == "reduce_to":
        return replace(call, kind="broadcast", op=None), None
    return call, None  # all_reduce: its own dual, MEAN scaled by the collective


def transport_collective(call: Call, dtype: str) -> tuple[str, ReduceOperation | None]:
    """The transport collective that moves ``call``'s data: ``all_gather`` for an all-gather
    (and a bool broadcast, which cannot be summed), else an all-reduce with this operation.

    >>> d = (Device("cpu", 0), Device("cpu", 1))
    >>> transport_collective(Call("broadcast", None, d, src=0), "float32")
    ('all_reduce', ReduceOperation.SUM)
    >>> transport_collective(Call("broadcast", None, d, src=0), "bool")
    ('all_gather', None)
    """
    if call.kind == "all_gather" or (call.kind == "broadcast" and dtype == "bool"):
        return "all_gather", None
    if call.kind in ("broadcast", "reduce_to"):
        return "all_reduce", ReduceOperation.SUM
    return "all_reduce", call.op


def header(
    call: Call, order: tuple[int, ...], dtype: str, shape: tuple[int, ...], rejected: bool
) -> np.ndarray:
    """The int64 header a member contributes: fixed fields, then ``order`` (the members'
    indices of ``call.devices``, so that every member's header has the same length).

    >>> h = header(Call("broadcast", None, (Device("cpu", 0),), src=0), (0,), "float32", (2, 3),
    ...            False)
    >>> h.tolist()[:9]
    [3, -1, 0, -1, 0, 0, 2, 2, 3]
    """
    dims = list(shape[:_MAX_DIMS]) + [-1] * (_MAX_DIMS - len(shape[:_MAX_DIMS]))
    rest = int(np.prod(shape[_MAX_DIMS:])) if len(shape) > _MAX_DIMS else -1
    fields = [
        KINDS.index(call.kind),
        -1 if call.op is None else list(ReduceOperation).index(call.op),
        _DTYPES.index(dtype) if dtype in _DTYPES else -1,
        -1 if call.dim is None else call.dim,
        -1 if call.src is None else call.src,
        int(rejected),
        len(shape),
        *dims,
        rest,
        *order,
    ]
    return np.asarray(fields, np.int64)


def check_headers(call: Call, headers: np.ndarray, names: list[str]) -> str | None:
    """What is wrong with a collective whose members sent ``headers`` (one row each, in the
    transport's member order; ``names`` name the rows), or ``None`` if every member agrees.
    Every member computes this from the same rows, so all reach the same verdict.

    >>> d = (Device("cpu", 0), Device("cpu", 1))
    >>> c = Call("all_gather", None, d, dim=0)
    >>> rows = np.stack([header(c, (0, 1), "float32", (4,), False),
    ...                  header(c, (0, 1), "float32", (3,), False)])
    >>> print(check_headers(c, rows, ["rank 0", "rank 1"]))
    all_gather (dim=0) over cpu, cpu:1: the tensors differ in shape (rank 0: [4], rank 1: [3])
    >>> check_headers(c, rows[[0, 0]], ["rank 0", "rank 1"]) is None
    True
    """
    headers = np.asarray(headers)
    what = call.describe()
    shapes = [_shape(row) for row in headers]
    rejected = [name for name, row in zip(names, headers) if row[5]]
    if rejected:
        return f"{what}: {', '.join(rejected)} rejected the call (see the error raised there)"
    asked = headers[:, [0, 1, 3, 4]]
    if (asked != asked[0]).any() or (headers[:, _FIXED:] != headers[0, _FIXED:]).any():
        described = ", ".join(f"{name}: {_asked(row)}" for name, row in zip(names, headers))
        return f"{what}: the members called different collectives ({described})"
    if len(set(shapes)) > 1:
        described = ", ".join(f"{name}: {list(s)}" for name, s in zip(names, shapes))
        return f"{what}: the tensors differ in shape ({described})"
    codes = headers[:, 2]
    if (codes != codes[0]).any():
        described = ", ".join(
            f"{name}: {_DTYPES[c] if c >= 0 else 'another dtype'}" for name, c in zip(names, codes)
        )
        return f"{what}: the tensors differ in dtype ({described})"
    return None


def _shape(row: np.ndarray) -> tuple[int, ...]:
    ndim = int(row[6])
    dims = [int(v) for v in row[7 : 7 + min(ndim, _MAX_DIMS)]]
    if ndim > _MAX_DIMS:
        dims.append(int(row[7 + _MAX_DIMS]))  # the product of the rest
    return tuple(dims)


def _asked(row: np.ndarray) -> str:
    kind, op, dim, src = (int(v) for v in row[[0, 1, 3, 4]])
    parts = [KINDS[kind] if 0 <= kind < len(KINDS) else "?"]
    if op >= 0:
        parts.append(list(ReduceOperation)[op].name)
    if dim >= 0:
        parts.append(f"dim={dim}")
    if src >= 0:
        parts.append(f"src={src}")
    parts.append(f"devices order {row[_FIXED:].tolist()}")
    return " ".join(parts)
