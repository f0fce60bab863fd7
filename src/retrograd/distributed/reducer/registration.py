"""Registrations: what each member says about its distributed parameters before a backward's
gradients are reduced, its wire format, and the members' agreement, as pure functions.

A registration lists a device's parameters in the order their gradients will become final,
each as ``(id value, label, shape, dtype)``. It travels as one int64 array, so that every
engine can gather it with a plain buffer collective (nothing pickled)::

    [count, label bytes,  then per parameter: id, numel, dtype code, shape digest,
     then the labels, UTF-8, joined by NUL, padded to 8 bytes]

Once every member's registration has arrived, :func:`agree` checks they list the same
parameters with the same shapes and dtypes, and plans the buckets from member 0's order, so
that every member fuses identical buckets.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from ..cache import remember
from ..config import DistributedConfig
from .buckets import Bucket, plan_buckets

__all__ = ["DTYPE_CODES", "Verdict", "agree", "decode", "disagreement", "encode", "payload"]

DTYPE_CODES = {"float32": 1, "float64": 2, "float16": 3, "bfloat16": 4}
DTYPE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
_HEADER, _FIELDS = 2, 4

#: one parameter as a device registers it: (id value, label, shape, dtype)
Param = tuple[int, str, tuple[int, ...], str]
#: one parameter as a registration tells it: (id value, numel, dtype, shape digest, label)
Registered = tuple[int, int, str, int, str]
#: (why the members differ or ``None``, labels by id value, the bucket plan)
Verdict = tuple[str | None, dict[int, str], list[Bucket]]


def shape_digest(shape: tuple[int, ...]) -> int:
    """A 63-bit digest of a shape: members compare shapes without sending them whole."""
    data = ",".join(str(n) for n in shape).encode()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def encode(params: Sequence[Param]) -> np.ndarray:
    """The registration of ``params``, as the int64 array members exchange.

    >>> decode(encode([(5, "w", (2, 3), "float32")]))[0][:3]
    (5, 6, 'float32')
    """
    labels = "\0".join(label for _, label, _, _ in params).encode("utf-8")
    padded = labels + b"\0" * (-len(labels) % 8)
    fields = np.empty(_HEADER + _FIELDS * len(params), dtype=np.int64)
    fields[0] = len(params)
    fields[1] = len(labels)
    for k, (value, _, shape, dtype) in enumerate(params):
        base = _HEADER + _FIELDS * k
        fields[base] = value
        fields[base + 1] = math.prod(shape)
        fields[base + 2] = DTYPE_CODES.get(dtype, 0)
        fields[base + 3] = shape_digest(shape)
    return np.concatenate([fields, np.frombuffer(padded, dtype=np.int64)])


def decode(registration: np.ndarray) -> list[Registered]:
    """``[(id value, numel, dtype, shape digest, label)]`` from a registration.

    >>> [(v, n, d, label) for v, n, d, _, label in decode(encode([(1, "a", (4,), "float64"),
    ...                                                            (2, "b", (), "float32")]))]
    [(1, 4, 'float64', 'a'), (2, 1, 'float32', 'b')]
    """
    count, label_bytes = int(registration[0]), int(registration[1])
    end = _HEADER + _FIELDS * count
    labels = registration[end:].tobytes()[:label_bytes].decode("utf-8").split("\0")
    entries = []
    for k in range(count):
        value, numel, dtype, digest = (int(v) for v in registration[_HEADER + _FIELDS * k :][:4])
        entries.append((value, numel, DTYPE_NAMES.get(dtype, "?"), digest, labels[k]))
    return entries


_PAYLOADS: dict[tuple, np.ndarray] = {}


def payload(params: tuple[Param, ...]) -> np.ndarray:
    """:func:`encode` of ``params``, cached and read-only (shared by every step that
    registers the same list)."""
    registration = _PAYLOADS.get(params)
    if registration is None:
        registration = remember(_PAYLOADS, params, encode(params))
        registration.flags.writeable = False
    return registration


def disagreement(registrations: Sequence[np.ndarray], names: Sequence[str]) -> str | None:
    """Why the members' registrations differ, or ``None`` if they agree; ``names[i]`` names
    member ``i`` in the message.

    >>> a = encode([(1, "w", (2,), "float32")])
    >>> disagreement([a, a], ["cpu:0", "cpu:1"]) is None
    True
    >>> print(disagreement([a, encode([(1, "w", (3,), "float32")])], ["cpu:0", "cpu:1"]))
    ... # doctest: +NORMALIZE_WHITESPACE
    the devices' distributed parameters differ, so their gradients cannot be all-reduced:
    parameter 'w' differs in shape or dtype (cpu:0: 2 elements float32, cpu:1: 3 elements float32)
    """
    tables = [{entry[0]: entry for entry in decode(r)} for r in registrations]
    every = {}
    for table in tables:
        for value, entry in table.items():
            every.setdefault(value, entry)
    problems = []
    for value, entry in every.items():
        label = entry[4]
        without = [names[i] for i, t in enumerate(tables) if value not in t]
        if without:
            having = [names[i] for i, t in enumerate(tables) if value in t]
            problems.append(
                f"parameter {label!r} is registered on {', '.join(having)} "
                f"but not on {', '.join(without)}"
            )
            continue
        kinds = {(t[value][1], t[value][2], t[value][3]) for t in tables}
        if len(kinds) > 1:
            described = ", ".join(
                f"{names[i]}: {t[value][1]} elements {t[value][2]}" for i, t in enumerate(tables)
            )
            problems.append(f"parameter {label!r} differs in shape or dtype ({described})")
    if not problems:
        return None
    hint = ""
    if any("but not on" in problem for problem in problems):
        hint = (
            " (a parameter that only some devices use in a step: wrap the model in "
            "DistributedDataParallel(model, find_unused_parameters=True))"
        )
    return (
        "the devices' distributed parameters differ, so their gradients cannot be "
        f"all-reduced: {'; '.join(problems)}{hint}"
    )


def agree(
    registrations: Sequence[np.ndarray], names: Sequence[str], config: DistributedConfig
) -> Verdict:
    """``(why the members differ or None, labels by id value, bucket plan)``: the plan is
    member 0's, so every member fuses the same gradients.

    >>> config = DistributedConfig(bucket_bytes=0)
    >>> a = encode([(1, "w", (2,), "float32"), (2, "b", (), "float32")])
    >>> problem, labels, plan = agree([a, a], ["cpu:0", "cpu:1"], config)
    >>> problem, labels, [bucket.values for bucket in plan]
    (None, {1: 'w', 2: 'b'}, [[1], [2]])
    """
    problem = disagreement(registrations, names)
    if problem is not None:
        return problem, {}, []
    first = decode(registrations[0])
    labels = {value: label for value, _, _, _, label in first}
    return None, labels, plan_buckets([(v, n, d) for v, n, d, _, _ in first], config)
