"""``einsum``: Einstein summation as permutes, reshapes and batched matmuls.

Each operand is first reduced on its own: a letter repeated within it takes the diagonal
(``diagonal``: the elements themselves, in the operand's dtype), a letter no other operand
and not the output has is summed. Then the operands are contracted pairwise,
left to right: the letters both share and the output keeps are batch dimensions, the letters
both share and the rest of the equation drops are contracted by one ``matmul``, the others
stay. ``...`` stands for the broadcast dimensions, named by letters of their own.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import MixedDTypeError, ShapeError, SizeMismatchError, shape_text
from ._dispatch import promote

__all__ = ["contract"]

_SPARE = "ΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩ"  # names for the dims an ellipsis stands for


def _parse(equation: str, operands: list[Any]) -> tuple[list[str], str]:
    equation = equation.replace(" ", "")
    if "->" in equation:
        left, output = equation.split("->")
    else:
        left, output = equation, None
    inputs = left.split(",")
    if len(inputs) != len(operands):
        raise ShapeError(
            f"einsum: the equation names {len(inputs)} operands, {len(operands)} were given"
        )
    ellipsis_dims = 0
    for spec, t in zip(inputs, operands):
        letters = spec.replace("...", "")
        if not letters.isalpha() and letters:
            raise ShapeError(f"einsum: invalid subscripts {spec!r} (letters and '...' only)")
        if "..." in spec:
            ellipsis_dims = max(ellipsis_dims, t.ndim - len(letters))
        elif len(letters) != t.ndim:
            raise ShapeError(
                f"einsum: subscripts {spec!r} name {len(letters)} dimensions of an operand "
                f"of shape {shape_text(t.shape)}"
            )
    spare = _SPARE[:ellipsis_dims]
    expanded = []
    for spec, t in zip(inputs, operands):
        if "..." in spec:
            own = t.ndim - len(spec.replace("...", ""))
            spec = spec.replace("...", spare[ellipsis_dims - own :])
        expanded.append(spec)
    if output is None:
        counts: dict[str, int] = {}
        for spec in expanded:
            for c in spec:
                counts[c] = counts.get(c, 0) + 1
        output = spare + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in spare))
    else:
        output = output.replace("...", spare)
    for c in output:
        if not any(c in spec for spec in expanded):
            raise ShapeError(f"einsum: output subscript {c!r} appears in no operand")
    return expanded, output


def _diagonal(t: Any, spec: str) -> tuple[Any, str]:
    """Take the diagonal of every letter repeated within ``spec``."""
    while True:
        repeated = next((c for c in spec if spec.count(c) > 1), None)
        if repeated is None:
            return t, spec
        first = spec.index(repeated)
        second = spec.index(repeated, first + 1)
        n = t.shape[first]
        if t.shape[second] != n:
            raise SizeMismatchError(
                f"einsum: subscript {repeated!r} has sizes {n} and {t.shape[second]} in one operand"
            )
        # the diagonal itself (a last dim), as torch's: no product with an identity, whose
        # zeros would meet an infinity off the diagonal (NaN) and whose sum makes a bool or
        # uint8 operand int64
        t = t.diagonal(0, first, second)
        spec = spec[:first] + spec[first + 1 : second] + spec[second + 1 :] + repeated


def _sum_letters(t: Any, spec: str, keep: set[str]) -> tuple[Any, str]:
    drop = [i for i, c in enumerate(spec) if c not in keep]
    if not drop:
        return t, spec
    return t.sum(tuple(drop)), "".join(c for c in spec if c in keep)


def _pair(a: Any, sa: str, b: Any, sb: str, keep: set[str]) -> tuple[Any, str]:
    """Contract ``a`` (letters ``sa``) with ``b`` (``sb``), keeping the letters in ``keep``."""
    shared = [c for c in sa if c in sb]
    batch = [c for c in shared if c in keep]
    summed = [c for c in shared if c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {}
    for spec, t in ((sa, a), (sb, b)):
        for c, n in zip(spec, t.shape):
            if c in size and size[c] != n and 1 not in (size[c], n):
                raise SizeMismatchError(
                    f"einsum: subscript {c!r} has sizes {size[c]} and {n} in different operands"
                )
            size[c] = n if c not in size or size[c] == 1 else size[c]
    # a contracted letter of size 1 in one operand broadcasts: the other is summed over it
    # first (torch's way: then nothing real is contracted over it, so mixed dtypes multiply)
    for c in summed:
        na, nb = a.shape[sa.index(c)], b.shape[sb.index(c)]
        if na != nb and 1 in (na, nb):
            if na == 1:
                b = b.sum(sb.index(c), True)
            else:
                a = a.sum(sa.index(c), True)
            size[c] = 1
    a = a.permute([sa.index(c) for c in batch + left + summed])
    b = b.permute([sb.index(c) for c in batch + summed + right])
    batch_shape = tuple(size[c] for c in batch)
    summed_shape = tuple(size[c] for c in summed)
    # a size-1 dim broadcasts against the other operand's, batch and contracted alike (torch)
    a_shape = batch_shape + a.shape[len(batch) : len(batch) + len(left)] + summed_shape
    b_shape = batch_shape + summed_shape + b.shape[len(batch) + len(summed) :]
    a = a.expand(a_shape) if a.shape != a_shape else a
    b = b.expand(b_shape) if b.shape != b_shape else b
    nb = math.prod(batch_shape)
    nl = math.prod(size[c] for c in left)
    ns = math.prod(summed_shape)
    nr = math.prod(size[c] for c in right)
    if summed:  # a matrix product, as torch's bmm: one dtype, no promotion
        if a.dtype != b.dtype and ns <= 1:  # torch multiplies when nothing real is summed
            a, b = promote(a, b, "einsum")
        if a.dtype != b.dtype:
            raise MixedDTypeError(
                f"einsum: operands contracted over {''.join(summed)!r} have different dtypes "
                f"({a.dtype} {shape_text(a.shape)} and {b.dtype} {shape_text(b.shape)})"
            )
        if a.dtype == "bool" and (ns <= 1 or nb * nl * nr == 0):
            # torch's bmm has no bool kernel, but a sum of one term or none, or an empty
            # result, needs none: torch gives them, bool (a logical and, or False)
            if ns == 1 and nb * nl * nr:
                product = a.reshape((nb, nl, 1)) * b.reshape((nb, 1, nr))
            else:
                product = a.new_zeros((nb, nl, nr))
        else:
            product = a.reshape((nb, nl, ns)).matmul(b.reshape((nb, ns, nr)))
    else:  # nothing summed: torch multiplies elementwise, promoting as ``*`` does
        product = a.reshape((nb, nl, 1)) * b.reshape((nb, 1, nr))
    shape = batch_shape + tuple(size[c] for c in left) + tuple(size[c] for c in right)
    return product.reshape(shape), "".join(batch + left + right)


def contract(equation: str, operands: list[Any]) -> Any:
    if not operands:
        raise ShapeError("einsum: needs at least one operand")
    specs, output = _parse(equation, operands)
    reduced = []
    for t, spec in zip(operands, specs):
        t, spec = _diagonal(t, spec)
        reduced.append((t, spec))
    # sum, in each operand, the letters nothing else needs
    operands_left = []
    for i, (t, spec) in enumerate(reduced):
        others = set(output).union(*(set(s) for j, (_, s) in enumerate(reduced) if j != i))
        operands_left.append(_sum_letters(t, spec, others))
    t, spec = operands_left[0]
    for i in range(1, len(operands_left)):
        u, su = operands_left[i]
        keep = set(output).union(*(set(s) for _, s in operands_left[i + 1 :]))
        t, spec = _pair(t, spec, u, su, keep)
    t, spec = _sum_letters(t, spec, set(output))
    if spec != output:
        t = t.permute([spec.index(c) for c in output])
    return t
