"""Fusion: chains of elementwise calls of a segment grouped into one kernel each.

A call is fusable when it is one of the NumPy backend's own elementwise kernels
(:data:`.kernels.OPS`, or a float cast) on NumPy arrays whose shapes broadcast to its output's,
with one dtype (a bool mask aside). Walking the segment in order, a fusable call joins an open
group of its output's shape that made one of its operands (merging several such groups), or
else the latest open group of that shape (unless a call of that group is the last to read a
large value, which the group's kernel, moved to this later call, would keep alive), or starts
one. A group is *sealed* (takes no more
calls) as soon as a call outside it reads one of its values, or a kernel that may write into
its first argument (``accumulate``, ``slice_accumulate``) is handed one of the group's inputs.
Every group then runs as one kernel at the place of its last call: all its operands exist by
then, and nothing outside has read its values yet. It writes out only the values read after
it; the others never reach memory. A value that only later kernels of the segment read goes to
a row of the *arena* (:class:`_Arena`: preallocated, rows reused by liveness), not to an
array of its own.

Groups too small to pay for a compiled call stay as the calls they were (:func:`_worth_it`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..backend.numpy_backend import NumpyBackend
from . import kernels
from .recording import slots_of

__all__ = ["MAX_CALLS", "MIN_CALLS", "MIN_ELEMENTS", "fuse_calls", "slots_of"]

#: Kernels that may write their result into their first argument.
_WRITES_FIRST = frozenset({"accumulate", "slice_accumulate"})
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_ARRAY_TYPES = (np.ndarray, np.generic)


class _Group:
    def __init__(self, shape: tuple, position: int):
        self.shape = shape
        self.members: list[int] = [position]
        self.made: set[int] = set()
        self.inputs: set[int] = set()
        self.open = True


def _is_numpy_kernel(function: Any, name: str) -> bool:
    """Whether ``function`` is the NumPy backend's own kernel ``name`` (not an override)."""
    own = getattr(NumpyBackend, name, None)
    if own is None:
        return False
    return function is own or getattr(function, "__func__", None) is own


def _operand_meta(encoded: tuple, meta: list) -> tuple | None:
    """``(shape, dtype, is_numpy_scalar)`` of an array operand, or ``None``."""
    kind, payload = encoded
    if kind == "s":
        info = meta[payload]
        if info is None or not issubclass(info[0], _ARRAY_TYPES):
            return None
        return info[1], np.dtype(info[2]), issubclass(info[0], np.generic)
    if kind == "c" and isinstance(payload, _ARRAY_TYPES):
        return payload.shape, payload.dtype, isinstance(payload, np.generic)
    return None


def _broadcasts(shape: tuple, out: tuple) -> bool:
    if len(shape) > len(out):
        return False
    return all(n in (1, m) for n, m in zip(shape, out[len(out) - len(shape) :]))


def _spec(call: tuple, meta: list, exact: bool) -> tuple | None:
    """``(op, operands, constants, out dtype)`` of a fusable call, else ``None``."""
    _, function, name, args, kwargs, out = call
    if kwargs or type(out) is not int or meta[out] is None or meta[out][0] is not np.ndarray:
        return None
    if name == "cast":
        op = kernels.FusedOp((0,), "{a0}", out="float")
    else:
        op = kernels.OPS.get(name)
    if op is None or not _is_numpy_kernel(function, name):
        return None
    out_shape, out_dtype = meta[out][1], np.dtype(meta[out][2])
    if len(args) < len(op.arrays):
        return None
    operands = []
    for position in op.arrays:
        info = _operand_meta(args[position], meta)
        if info is None or not _broadcasts(info[0], out_shape):
            return None
        operands.append((args[position], info))
    dtypes = [info[1] for _, info in operands]
    masks = {1} if name in ("mask_fill", "mask_where") else set()
    values = [d for i, d in enumerate(dtypes) if i not in masks]
    if any(dtypes[i] != np.bool_ for i in masks) or len(set(values)) != 1:
        return None
    dtype = values[0]
    if name == "cast":
        if out_dtype not in _FLOATS or not (dtype in _FLOATS or dtype == np.bool_):
            return None
    elif op.out == "bool":
        if out_dtype != np.bool_:
            return None
    elif out_dtype != dtype or dtype not in _FLOATS:
        return None
    if exact and not op.is_exact(dtype.name):
        return None
    constants = []
    for position, encoded in enumerate(args):
        if position in op.arrays or name == "cast":
            continue
        if encoded[0] != "c" or type(encoded[1]) not in (int, float, bool):
            return None
        constants.append(dtype.type(encoded[1]))
    return op, operands, constants, out_dtype


#: A group is fused when it has this many calls, or two on arrays of this many elements: a
#: compiled call costs about three NumPy calls on small arrays, and on large ones each call
#: fused away saves a pass over memory.
MIN_CALLS, MIN_ELEMENTS = 4, 4096
#: At most this many calls a kernel: Numba's compile time grows faster than linearly with a
#: kernel's length (seconds for a few hundred calls), while the replay saves little more.
MAX_CALLS = 48


def _worth_it(size: int, members: int) -> bool:
    return members >= 2 and (size >= MIN_ELEMENTS or members >= MIN_CALLS)


def fuse_calls(calls: list[tuple], meta: list, later: set, exact: bool) -> tuple[list, int]:
    """``calls`` with fusable runs replaced by fused-kernel calls, and how many kernels.
    ``meta``: each slot's recorded type, shape and dtype; ``later``: the slots read after
    these calls."""
    if not kernels.available():
        return calls, 0
    specs = [_spec(call, meta, exact) for call in calls]
    last_read: dict[int, int] = {}
    for position, call in enumerate(calls):
        for slot in slots_of(call[3], call[4]):
            last_read[slot] = position
    groups: list[_Group] = []
    group_of_call: dict[int, _Group] = {}
    maker: dict[int, _Group] = {}  # slot -> the group whose call made it
    for position, (call, spec) in enumerate(zip(calls, specs)):
        reads = slots_of(call[3], call[4])
        if spec is None:
            for slot in reads:
                if slot in maker:
                    maker[slot].open = False
            if call[2] in _WRITES_FIRST and call[3] and call[3][0][0] == "s":
                for group in groups:
                    if call[3][0][1] in group.inputs:
                        group.open = False
            continue
        shape = meta[call[5]][1]
        feeding = {id(maker[s]): maker[s] for s in reads if s in maker}
        joinable = [g for g in feeding.values() if g.open and g.shape == shape]
        for other in feeding.values():  # a value read by a call in another group: sealed
            if not any(other is g for g in joinable):
                other.open = False
        if not joinable:
            latest = next((g for g in reversed(groups) if g.open and g.shape == shape), None)
            if latest is not None and not _frees_a_large_value(latest, last_read, meta, later):
                joinable = [latest]
        if joinable:
            group = joinable[0]
            for other in joinable[1:]:
                if len(group.members) + len(other.members) < MAX_CALLS:
                    _merge(group, other, group_of_call, maker)
                    groups.remove(other)
                else:  # read by this call's kernel: it runs before, as it stands
                    other.open = False
            group.members.append(position)
            group.open = len(group.members) < MAX_CALLS
        else:
            group = _Group(shape, position)
            groups.append(group)
        group_of_call[position] = group
        maker[call[5]] = group
        group.made.add(call[5])
        group.inputs.update(s for s in reads if s not in group.made)
    fused, count = _rewrite(calls, specs, groups, meta, later)
    return (_fold_constants(fused, meta, later) if count else fused), count


def _frees_a_large_value(group: _Group, last_read: dict, meta: list, later: set) -> bool:
    """Whether a call of ``group`` is the last to read a value of an array's own size (above
    the arena's). A call that shares no value with the group would move the group's kernel
    to its own place, later, and the value would live until then where the eager step freed
    it (a recomputation in backward, fused with the gradient chain after it, held one
    activation more than the eager step)."""
    end = group.members[-1]
    for slot in group.inputs:
        info = meta[slot]
        if (
            last_read.get(slot, end + 1) <= end
            and slot not in later
            and info is not None
            and int(np.prod(info[1])) > ARENA_VALUE_ELEMENTS
        ):
            return True
    return False


def _merge(group: _Group, other: _Group, group_of_call: dict, maker: dict) -> None:
    group.members = sorted(group.members + other.members)
    group.made |= other.made
    group.inputs = (group.inputs | other.inputs) - group.made
    for position in other.members:
        group_of_call[position] = group
    for slot in other.made:
        maker[slot] = group


def _rewrite(calls, specs, groups, meta, later) -> tuple[list, int]:
    readers: dict[int, set[int]] = {}
    for position, call in enumerate(calls):
        for slot in slots_of(call[3], call[4]):
            readers.setdefault(slot, set()).add(position)
    chosen = [g for g in groups if _worth_it(int(np.prod(g.shape)), len(g.members))]
    arena = _Arena(calls, chosen, meta, later, readers)
    replaced: dict[int, tuple | None] = {}
    for group in chosen:
        members = set(group.members)
        outputs = [
            calls[p][5]
            for p in group.members
            if calls[p][5] in later or readers.get(calls[p][5], set()) - members
        ]
        fused = _fused_call(
            group, [(calls[p], specs[p]) for p in group.members], outputs, meta, arena
        )
        for position in group.members:
            replaced[position] = None
        replaced[group.members[-1]] = fused
    out = []
    for position, call in enumerate(calls):
        if position not in replaced:
            out.append(call)
        elif replaced[position] is not None:
            out.append(replaced[position])
    return out, len(chosen)


#: The arena holds values of at most this many elements (where an array's own allocation,
#: boxing and unboxing cost more than its elements), and at most this many elements in all
#: (it is kept between replays).
ARENA_VALUE_ELEMENTS, ARENA_ELEMENTS = 1 << 14, 1 << 22


class _Arena:
    """Buffer assignment for values passed from one fused kernel to another.

    A value made by a fused kernel and read only by fused kernels of the same segment (not
    after it) never becomes an array of its own: it lives in a row of a *stack*, one
    preallocated array per (dtype, shape) kept with the compiled program, which the kernels
    read and write by row. Rows are reused by liveness (a row is free again after the last
    kernel that reads its value, for the kernels after that one), so a stack holds no more
    rows than values of its kind live at once. A replay then allocates, boxes and frees none
    of these values, and touches memory already mapped.
    """

    def __init__(self, calls, chosen, meta, later, readers):
        kernel_of = {p: g.members[-1] for g in chosen for p in g.members}
        self.row: dict[int, tuple] = {}  # slot -> (stack key, row)
        self.stacks: dict[tuple, Any] = {}
        made = [
            (group.members[-1], calls[p][5])
            for group in chosen
            for p in group.members
            if calls[p][5] not in later
        ]
        ends: dict[int, int] = {}
        for at, slot in made:
            reading = readers.get(slot, set())
            info = meta[slot]
            size = int(np.prod(info[1]))
            if not reading or any(r not in kernel_of for r in reading):
                continue
            if all(kernel_of[r] == at for r in reading) or size > ARENA_VALUE_ELEMENTS:
                continue  # a temporary of its own kernel, or too big to keep
            ends[slot] = max(kernel_of[r] for r in reading)
        free: dict[tuple, list[int]] = {}
        counts: dict[tuple, int] = {}
        releases: dict[int, list[tuple]] = {}
        total = 0
        for at, slot in sorted((at, slot) for at, slot in made if slot in ends):
            for released_at in sorted(p for p in releases if p < at):
                for key, row in releases.pop(released_at):
                    free.setdefault(key, []).append(row)
            info = meta[slot]
            key = (np.dtype(info[2]).str, tuple(info[1]))
            if free.get(key):
                row = free[key].pop()
            else:
                size = int(np.prod(info[1]))
                if total + size > ARENA_ELEMENTS:
                    continue
                total += size
                row = counts.get(key, 0)
                counts[key] = row + 1
            self.row[slot] = (key, row)
            releases.setdefault(ends[slot], []).append((key, row))
        for key, count in counts.items():
            self.stacks[key] = np.zeros((count, *key[1]), np.dtype(key[0]))


def _fused_call(group: _Group, members: list, outputs: list[int], meta: list, arena) -> tuple:
    """The recorded-call tuple that runs ``members`` as one kernel; values in ``arena`` are
    read from and written to its stacks."""
    ndim = len(group.shape)
    inputs: list[tuple] = []  # encoded operands, in argument order
    input_specs: list = []
    names: dict[Any, str] = {}  # slot (or id of a constant array) -> element expression
    constants: list = []
    stacks: list[tuple] = []  # the arena's stack keys this kernel uses
    rows: list[int] = []
    body = []

    def stacked(slot: int) -> tuple | None:
        if slot not in arena.row:
            return None
        key, row = arena.row[slot]
        if key not in stacks:
            stacks.append(key)
        rows.append(row)
        return stacks.index(key), len(rows) - 1

    for number, (call, (op, operands, values, out_dtype)) in enumerate(members):
        elements = []
        for encoded, (shape, dtype, scalar) in operands:
            key = encoded[1] if encoded[0] == "s" else ("c", id(encoded[1]))
            if key not in names:
                names[key] = f"x{len(input_specs)}"
                broadcast = None if scalar else tuple(n == 1 for n in shape)
                where = stacked(encoded[1]) if encoded[0] == "s" else None
                if where is None:
                    inputs.append(encoded)
                input_specs.append((broadcast, kernels.numpy_name(dtype), where))
            elements.append(names[key])
        ks = []
        for value in values:
            ks.append(f"k{len(constants)}")
            constants.append(value)
        first = operands[0][1][1]
        literal_dtype = kernels.numpy_name(first if first in _FLOATS else out_dtype)
        temporary = f"t{number}"
        expression = op.render(elements, ks, literal_dtype)
        guarded = op.render_guarded(elements, literal_dtype)
        body.append((temporary, expression, kernels.numpy_name(out_dtype), *(guarded or ())))
        names[call[5]] = temporary
    out_specs = [
        (names[slot], kernels.numpy_name(meta[slot][2]), stacked(slot)) for slot in outputs
    ]
    kernel = kernels.build_kernel(
        ndim,
        input_specs,
        [type(c).__name__ for c in constants],
        body,
        out_specs,
        tuple(kernels.numpy_name(np.dtype(key[0])) for key in stacks),
    )
    args = [*inputs, *(("c", arena.stacks[key]) for key in stacks)]
    if stacks:
        args.append(("c", np.array(rows, np.int64)))
    args += [*(("c", c) for c in constants), *(("c", n) for n in group.shape)]
    returned = [slot for slot in outputs if slot not in arena.row]
    outs = tuple(returned) if len(returned) > 1 else (returned[0] if returned else None)
    return ("call", kernel.function, "fused", args, {}, outs)


#: Kernels whose result depends on their operand's shape and dtype only, not its values.
_SHAPE_ONLY = {"ones_like": np.ones, "zeros_like": np.zeros}


def _fold_constants(calls: list[tuple], meta: list, later: set) -> list[tuple]:
    """``calls`` with the values that are the same at every replay computed once, here, and
    handed to the fused kernels that read them as constants: a ``ones_like`` or ``zeros_like``
    (backward's seed gradient), and its ``expand`` to a shape. Only values that nothing but
    fused kernels read (and nothing after the calls), so no kernel that may write into its
    argument is handed one; they are read-only arrays (a small expanded one made contiguous,
    which a kernel reads without a copy)."""
    folded: dict[int, np.ndarray] = {}
    made_by: dict[int, int] = {}
    for position, (_, function, name, args, kwargs, out) in enumerate(calls):
        if type(out) is not int or kwargs or out in later or meta[out] is None:
            continue
        if name in _SHAPE_ONLY and _is_numpy_kernel(function, name) and len(args) == 1:
            value = _SHAPE_ONLY[name](meta[out][1], meta[out][2])
        elif (
            name == "expand"
            and _is_numpy_kernel(function, name)
            and len(args) == 2
            and args[0][0] == "s"
            and args[0][1] in folded
            and args[1][0] == "c"
        ):
            value = np.broadcast_to(folded[args[0][1]], args[1][1])
            if value.size <= ARENA_VALUE_ELEMENTS:
                value = np.ascontiguousarray(value)
        else:
            continue
        if not isinstance(value, np.ndarray) or value.shape != tuple(meta[out][1]):
            continue
        value.flags.writeable = False
        folded[out], made_by[out] = value, position
    changed = True
    while changed:  # a value read by a call that stays is not folded, nor what it reads
        changed = False
        for position, call in enumerate(calls):
            if call[2] == "fused" or made_by.get(call[5]) == position:
                continue
            for slot in slots_of(call[3], call[4]):
                if slot in folded:
                    del folded[slot], made_by[slot]
                    changed = True
    if not folded:
        return calls
    dropped = set(made_by.values())
    out = []
    for position, call in enumerate(calls):
        if position in dropped:
            continue
        if call[2] == "fused":
            args = [("c", folded[a[1]]) if a[0] == "s" and a[1] in folded else a for a in call[3]]
            call = (*call[:3], args, *call[4:])
        out.append(call)
    return out
