"""Round 20 of the differential fuzzer against PyTorch: integer and bool tensors end to end,
and the creation functions under every argument form. Each generator takes a ``numpy``
generator and returns a :class:`fuzz12_cases.Trial` written once against a namespace ``lib``
(``torch`` or ``retrograd``); :func:`fuzz14_cases.check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or value.

- ``integers``: int64 and bool operands (int64's extremes among the values, 0-d tensors and
  Python scalars beside them) through the arithmetic operators with int64's wraparound,
  ``//``, ``%``, ``torch.div`` under each ``rounding_mode``, ``fmod``/``remainder`` signs,
  division by zero, the bitwise operators and shifts, comparisons, ``abs``/``neg`` of the
  minimum, ``pow`` with negative exponents, ``clamp`` with int bounds, ``where``/``maximum``/
  ``minimum`` across dtypes, and the reductions' result dtypes (``sum``, ``prod``,
  ``cumsum``, ``cumprod``, ``mean``, ``amax``...);
- ``creation``: ``arange`` (float and negative steps, the dtype inferred from the bounds),
  ``linspace``/``logspace`` (0 and 1 steps, ``base``), ``full``/``full_like`` inferring the
  dtype from the fill value, ``eye(n, m)``, ``tril_indices``/``triu_indices`` with offsets,
  ``zeros``/``ones``/``empty`` with the size as a tuple, a list, varargs or a ``Size``,
  ``*_like`` with ``dtype=``, ``randint`` bounds and dtype, ``tensor`` of nested lists
  mixing bools, ints and floats, ``as_tensor``/``from_numpy`` sharing memory.

The step-capture programs of this round (capture against eager, not against torch) are in
``tests/test_fuzz20.py``.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

from fuzz12_cases import Trial, _pick
from fuzz14_cases import check

__all__ = ["GENERATORS", "check"]

#: Left out of the draws (deliberate differences, API.md section 2 and ``tensor/dtypes.py``):
#: - int8, uint8, int16 and int32 tensors: retrograd's backends hold int64 and bool only
#:   among the integers; a tensor made in one of the others is refused with a ``DTypeError``
#:   naming the dtype to use instead.

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


I64_MIN, I64_MAX = -(2**63), 2**63 - 1
INT_POOL = [I64_MIN, I64_MIN + 1, I64_MAX, I64_MAX - 1, -7, -3, -2, -1, 0, 0, 1, 2, 3, 5, 7, 64]
SMALL_POOL = [-7, -3, -2, -1, 0, 1, 2, 3, 5, 7]
SCALARS = [0, 1, -1, 2, -3, 7, True, False, 0.5, -1.5, 2.0]


def _operand(rng, kinds=("int64", "int64", "bool", "scalar", "float32")):
    """("tensor", dtype, shape, extreme) or ("scalar", value)."""
    kind = str(_pick(rng, *kinds))
    if kind == "scalar":
        return ("scalar", _pick(rng, *SCALARS))
    shape = _pick(rng, (), (3,), (2, 3), (1, 3), (2, 1))
    return ("tensor", kind, shape, bool(rng.random() < 0.4))


def _value(lib, spec, seed):
    if spec[0] == "scalar":
        return spec[1]
    _, dtype, shape, extreme = spec
    r = np.random.default_rng(seed)
    if dtype == "bool":
        a = r.random(shape) < 0.5
    elif dtype == "int64":
        pool = INT_POOL if extreme else SMALL_POOL
        a = np.array(r.choice(np.array(pool, dtype=np.int64), size=shape), dtype=np.int64)
    else:
        a = r.choice(np.array([-2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0]), size=shape)
    return lib.tensor(a, dtype=getattr(lib, dtype))


def _t(lib, x):
    return x if isinstance(x, lib.Tensor) else lib.tensor(x)


INT_OPS = {
    "add": (2, lambda lib, a, b: a + b),
    "sub": (2, lambda lib, a, b: a - b),
    "mul": (2, lambda lib, a, b: a * b),
    "rsub": (2, lambda lib, a, b: lib.sub(_t(lib, a), b, alpha=2)),
    "add_alpha": (2, lambda lib, a, b: lib.add(_t(lib, a), b, alpha=3)),
    "truediv": (2, lambda lib, a, b: a / b),
    "floordiv": (2, lambda lib, a, b: a // b),
    "mod": (2, lambda lib, a, b: a % b),
    "div_trunc": (2, lambda lib, a, b: lib.div(_t(lib, a), b, rounding_mode="trunc")),
    "div_floor": (2, lambda lib, a, b: lib.div(_t(lib, a), b, rounding_mode="floor")),
    "div_none": (2, lambda lib, a, b: lib.div(_t(lib, a), b, rounding_mode=None)),
    "fmod": (2, lambda lib, a, b: lib.fmod(_t(lib, a), b)),
    "remainder": (2, lambda lib, a, b: lib.remainder(_t(lib, a), b)),
    "and": (2, lambda lib, a, b: a & b),
    "or": (2, lambda lib, a, b: a | b),
    "xor": (2, lambda lib, a, b: a ^ b),
    "bitwise_and": (2, lambda lib, a, b: lib.bitwise_and(_t(lib, a), b)),
    "bitwise_not": (1, lambda lib, a: lib.bitwise_not(_t(lib, a))),
    "invert": (1, lambda lib, a: ~_t(lib, a)),
    "lshift": (2, lambda lib, a, b: a << b),
    "rshift": (2, lambda lib, a, b: a >> b),
    "bitwise_left_shift": (
        2,
        lambda lib, a, b: lib.bitwise_left_shift(_t(lib, a), b),
    ),
    "bitwise_right_shift": (
        2,
        lambda lib, a, b: lib.bitwise_right_shift(_t(lib, a), b),
    ),
    "eq": (2, lambda lib, a, b: a == b),
    "ne": (2, lambda lib, a, b: a != b),
    "lt": (2, lambda lib, a, b: a < b),
    "le": (2, lambda lib, a, b: a <= b),
    "gt": (2, lambda lib, a, b: a > b),
    "ge": (2, lambda lib, a, b: a >= b),
    "logical_and": (2, lambda lib, a, b: lib.logical_and(_t(lib, a), _t(lib, b))),
    "logical_xor": (2, lambda lib, a, b: lib.logical_xor(_t(lib, a), _t(lib, b))),
    "logical_not": (1, lambda lib, a: lib.logical_not(_t(lib, a))),
    "abs": (1, lambda lib, a: lib.abs(_t(lib, a))),
    "neg": (1, lambda lib, a: -_t(lib, a)),
    "negative": (1, lambda lib, a: lib.neg(_t(lib, a))),
    "sign": (1, lambda lib, a: lib.sign(_t(lib, a))),
    "square": (1, lambda lib, a: lib.square(_t(lib, a))),
    "pow": (2, lambda lib, a, b: a**b),
    "pow_fn": (2, lambda lib, a, b: lib.pow(_t(lib, a), b)),
    "clamp": (3, lambda lib, a, lo, hi: lib.clamp(_t(lib, a), lo, hi)),
    "clamp_min": (2, lambda lib, a, lo: _t(lib, a).clamp(min=lo)),
    "clamp_max": (2, lambda lib, a, hi: _t(lib, a).clamp(max=hi)),
    "where": (3, lambda lib, c, a, b: lib.where(_t(lib, c) != 0, a, b)),
    "maximum": (2, lambda lib, a, b: lib.maximum(_t(lib, a), _t(lib, b))),
    "minimum": (2, lambda lib, a, b: lib.minimum(_t(lib, a), _t(lib, b))),
    "max_pair": (2, lambda lib, a, b: lib.max(_t(lib, a), _t(lib, b))),
    "sum": (1, lambda lib, a: _t(lib, a).sum()),
    "sum_dim": (1, lambda lib, a: _t(lib, a).sum(-1, keepdim=True)),
    "prod": (1, lambda lib, a: _t(lib, a).prod()),
    "prod_dim": (1, lambda lib, a: _t(lib, a).prod(0)),
    "cumsum": (1, lambda lib, a: _t(lib, a).cumsum(-1)),
    "cumprod": (1, lambda lib, a: _t(lib, a).cumprod(-1)),
    "mean": (1, lambda lib, a: _t(lib, a).mean()),
    "amax": (1, lambda lib, a: _t(lib, a).amax(-1)),
    "amin": (1, lambda lib, a: _t(lib, a).amin()),
    "max": (1, lambda lib, a: _t(lib, a).max()),
    "argmax": (1, lambda lib, a: _t(lib, a).argmax()),
    "any_all": (1, lambda lib, a: (_t(lib, a).any(), _t(lib, a).all(-1))),
    "count_nonzero": (1, lambda lib, a: lib.count_nonzero(_t(lib, a))),
    "sort": (1, lambda lib, a: _t(lib, a).sort(-1).values),
    "cummax": (1, lambda lib, a: tuple(_t(lib, a).cummax(-1))),
    "iadd": (2, lambda lib, a, b: _inplace(lib, a, b, "add_")),
    "imul": (2, lambda lib, a, b: _inplace(lib, a, b, "mul_")),
    "ifloordiv": (2, lambda lib, a, b: _inplace(lib, a, b, "floor_divide_")),
    "iremainder": (2, lambda lib, a, b: _inplace(lib, a, b, "remainder_")),
    "idiv_trunc": (2, lambda lib, a, b: _inplace(lib, a, b, "div_", rounding_mode="trunc")),
    "iand": (2, lambda lib, a, b: _inplace(lib, a, b, "bitwise_and_")),
    "float_cast": (1, lambda lib, a: _t(lib, a).double()),
    "long_cast": (1, lambda lib, a: _t(lib, a).long()),
    "bool_cast": (1, lambda lib, a: _t(lib, a).bool()),
}


#: the ops that divide integers rounding toward zero (see :func:`_integers`)
TRUNCATING = ("div_trunc", "idiv_trunc")


def _inplace(lib, a, b, name, **kwargs):
    a = _t(lib, a).clone()
    out = getattr(a, name)(b, **kwargs)
    return [out, a]


@gen("integers")
def _integers(rng):
    name = sorted(INT_OPS)[int(rng.integers(len(INT_OPS)))]
    arity, f = INT_OPS[name]
    specs = [_operand(rng) for _ in range(arity)]
    if all(s[0] == "scalar" for s in specs):
        specs[0] = ("tensor", "int64", (3,), True)
    if name in TRUNCATING and specs[1] in (("scalar", -1), ("scalar", True)):
        # (torch's truncating integer division of -2**63 by -1 dies of SIGFPE: a torch bug;
        # the divisor -1 is left out of those ops' draws, retrograd's quotient wraps)
        specs[1] = ("scalar", -2)
    seeds = [int(v) for v in rng.integers(1 << 30, size=arity)]

    def fn(lib):
        args = [_value(lib, s, k) for s, k in zip(specs, seeds)]
        if name in TRUNCATING and isinstance(args[1], lib.Tensor) and args[1].dtype == lib.int64:
            args[1] = lib.where(args[1] == -1, -2, args[1])
        out = f(lib, *args)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    return Trial(f"integers {name} {specs}", fn, rtol=1e-6)
