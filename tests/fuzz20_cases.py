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

import math

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
SCALARS = [0, 1, -1, 2, -3, 7, True, False, 0.5, -1.5, 2.0, 0.0, -0.0, I64_MAX]


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
    "sqrt_exp": (1, lambda lib, a: (lib.sqrt(_t(lib, a)), lib.exp(_t(lib, a)))),
    "rounding": (
        1,
        lambda lib, a: (lib.floor(_t(lib, a)), lib.round(_t(lib, a)), lib.trunc(_t(lib, a))),
    ),
    "ceil": (1, lambda lib, a: lib.ceil(_t(lib, a))),
    "predicates": (1, lambda lib, a: (lib.isnan(_t(lib, a)), lib.isfinite(_t(lib, a)))),
    "reciprocal": (1, lambda lib, a: lib.reciprocal(_t(lib, a))),
    "float_div_zero": (1, lambda lib, a: _t(lib, a) / 0),
    "sum_dtype": (1, lambda lib, a: _t(lib, a).sum(dtype=lib.int64)),
    "cumsum_dtype": (1, lambda lib, a: _t(lib, a).cumsum(0, dtype=lib.float64)),
    "matmul": (2, lambda lib, a, b: _t(lib, a).reshape(-1, 1) @ _t(lib, b).reshape(1, -1)),
    "mm_square": (1, lambda lib, a: _t(lib, a).reshape(1, -1).T @ _t(lib, a).reshape(1, -1)),
    "dot": (2, lambda lib, a, b: lib.dot(_t(lib, a).reshape(-1)[:1], _t(lib, b).reshape(-1)[:1])),
    "outer": (2, lambda lib, a, b: lib.outer(_t(lib, a).reshape(-1), _t(lib, b).reshape(-1))),
    "trace_tril": (1, lambda lib, a: (lib.tril(_t(lib, a).reshape(1, -1)), _t(lib, a).sum())),
    "var": (1, lambda lib, a: _t(lib, a).var()),
    "logsumexp": (1, lambda lib, a: _t(lib, a).reshape(-1).logsumexp(0)),
    "median": (1, lambda lib, a: _t(lib, a).reshape(-1).median()),
    "sigmoid": (1, lambda lib, a: lib.sigmoid(_t(lib, a))),
    "roll_flip": (1, lambda lib, a: (_t(lib, a).roll(1, -1), _t(lib, a).flip(-1))),
    "nansum": (1, lambda lib, a: lib.nansum(_t(lib, a))),
    "argsort": (1, lambda lib, a: _t(lib, a).argsort(dim=-1, stable=True)),
    "unique": (1, lambda lib, a: lib.unique(_t(lib, a), return_counts=True)),
    "diff": (1, lambda lib, a: lib.diff(_t(lib, a).reshape(-1))),
    "cummin": (1, lambda lib, a: tuple(_t(lib, a).reshape(-1).cummin(0))),
    # (the values only: which of tied elements topk's index names is each kernel's)
    "topk": (1, lambda lib, a: _t(lib, a).reshape(-1).topk(1).values),
    "clamp_bool": (1, lambda lib, a: _t(lib, a).clamp(0, 1)),
    "lerp": (2, lambda lib, a, b: lib.lerp(_t(lib, a), _t(lib, b), 0.5)),
    "addcmul": (3, lambda lib, a, b, c: lib.addcmul(_t(lib, a), _t(lib, b), _t(lib, c), value=2)),
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


# ---- creation functions --------------------------------------------------------------------

DTYPE_CHOICES = (None, None, "float32", "float64", "int64", "bool")


def _number(rng, kind=None):
    kind = kind or str(_pick(rng, "int", "int", "float", "bool"))
    if kind == "bool":
        return bool(rng.random() < 0.5)
    if kind == "int":
        return int(rng.integers(-6, 7))
    return float(_pick(rng, -2.5, -1.0, -0.25, 0.0, 0.3, 0.5, 1.0, 1.75, 3.0, 4.5))


def _size_forms(lib, shape, form):
    """``shape`` as a tuple, a list, varargs or a ``Size`` (arguments, keyword arguments)."""
    if form == "tuple":
        return (tuple(shape),), {}
    if form == "list":
        return (list(shape),), {}
    if form == "varargs":
        return tuple(shape), {}
    if form == "size_kw":
        return (), {"size": tuple(shape)}
    return (lib.Size(shape),), {}


def _dtype_kw(lib, dt):
    return {} if dt is None else {"dtype": getattr(lib, dt)}


def _c_arange(rng, dt):
    n = int(_pick(rng, 1, 2, 3, 3))
    kinds = [str(_pick(rng, "int", "int", "float")) for _ in range(n)]
    args = [_number(rng, k) for k in kinds]
    if n == 3 and args[2] == 0:
        args[2] = float(_pick(rng, 0.5, -0.5, 2, -1))
    if n == 3 and rng.random() < 0.5:  # (a step toward the end, mostly)
        args[2] = abs(args[2]) if args[1] >= args[0] else -abs(args[2])
    as_tensors = bool(rng.random() < 0.2)  # (0-d tensor bounds, read as their numbers)

    def fn(lib):
        given = [lib.tensor(a) for a in args] if as_tensors else args
        return [lib.arange(*given, **_dtype_kw(lib, dt))]

    return Trial(f"arange{tuple(args)} {dt} tensors={as_tensors}", fn)


def _c_space(rng, dt):
    kind = str(_pick(rng, "linspace", "logspace"))
    start, end = _number(rng), _number(rng)
    steps = int(_pick(rng, 0, 1, 1, 2, 3, 5, 7))
    extra = {}
    if kind == "logspace" and rng.random() < 0.6:
        extra["base"] = float(_pick(rng, 2.0, 10.0, 0.5, 3.0, 1.0))
    as_tensors = bool(rng.random() < 0.2)

    def fn(lib):
        a, b = (lib.tensor(start), lib.tensor(end)) if as_tensors else (start, end)
        return [getattr(lib, kind)(a, b, steps, **_dtype_kw(lib, dt), **extra)]

    return Trial(
        f"{kind}({start}, {end}, {steps}, {extra}) {dt} tensors={as_tensors}", fn, rtol=1e-6
    )


def _c_full(rng, dt):
    value = _number(rng)
    if rng.random() < 0.15:  # (values no int64 holds)
        value = float(_pick(rng, math.nan, math.inf, -math.inf, 1e30, -1e19))
    shape = _pick(rng, (), (2,), (2, 3), (0, 2))
    like = bool(rng.random() < 0.5)
    source = _pick(rng, [1, 2], [1.0, 2.0], [True, False], [[1, 0]])

    def fn(lib):
        if like:
            return [lib.full_like(lib.tensor(source), value, **_dtype_kw(lib, dt))]
        return [lib.full(shape, value, **_dtype_kw(lib, dt))]

    return Trial(f"full like={like} {shape} {source} {value!r} {dt}", fn)


def _c_eye(rng, dt):
    n = int(rng.integers(0, 5))
    m = None if rng.random() < 0.4 else int(rng.integers(0, 5))
    args = (n,) if m is None else (n, m)
    return Trial(f"eye{args} {dt}", lambda lib: [lib.eye(*args, **_dtype_kw(lib, dt))])


def _c_tri_indices(rng, dt):
    kind = str(_pick(rng, "tril_indices", "triu_indices"))
    row, col = int(rng.integers(0, 5)), int(rng.integers(0, 5))
    offset = int(rng.integers(-5, 6))
    args = (row, col) if rng.random() < 0.2 else (row, col, offset)
    if dt != "int64":
        dt = None  # (torch: int64 or int32 only)
    return Trial(
        f"{kind}{args} {dt}", lambda lib: [getattr(lib, kind)(*args, **_dtype_kw(lib, dt))]
    )


def _c_sizes(rng, dt):
    kind = str(_pick(rng, "zeros", "ones", "empty", "rand", "randn"))
    rank = int(rng.integers(0, 4))
    shape = [int(v) for v in rng.integers(0, 4, size=rank)]
    form = str(_pick(rng, "tuple", "list", "varargs", "Size", "size_kw"))
    if form == "varargs" and not shape:
        form = "tuple"
    if kind in ("rand", "randn") and dt in ("int64", "bool"):
        dt = None

    def fn(lib):
        args, kwargs = _size_forms(lib, shape, form)
        out = getattr(lib, kind)(*args, **kwargs, **_dtype_kw(lib, dt))
        if kind in ("empty", "rand", "randn"):  # (the values are not compared)
            return [str(out.dtype).split(".")[-1], str(tuple(out.shape))]
        return [out]

    return Trial(f"{kind} {form} {shape} {dt}", fn)


def _c_like(rng, dt):
    kind = str(_pick(rng, "zeros_like", "ones_like", "empty_like", "rand_like", "randint_like"))
    source = _pick(rng, [1, 2], [1.0, 2.0], [[True], [False]], 3, 2.5)
    if kind == "rand_like" and dt in ("int64", "bool"):
        dt = None
    high = int(rng.integers(1, 6))

    def fn(lib):
        x = lib.tensor(source)
        if kind == "randint_like":
            out = lib.randint_like(x, high, **_dtype_kw(lib, dt))
            inside = bool(((out >= 0) & (out < high)).all()) if out.dtype != lib.bool else True
            return [str(out.dtype).split(".")[-1], str(tuple(out.shape)), str(inside)]
        out = getattr(lib, kind)(x, **_dtype_kw(lib, dt))
        if kind in ("empty_like", "rand_like"):
            return [str(out.dtype).split(".")[-1], str(tuple(out.shape))]
        return [out]

    return Trial(f"{kind}({source}) {dt}", fn)


def _c_randint(rng, dt):
    low = int(rng.integers(-5, 5))
    high = low + int(rng.integers(-1, 6))
    shape = _pick(rng, (3,), (2, 2), (0,), ())
    form = int(rng.integers(3))
    if dt in ("float32", "float64", "bool") and rng.random() < 0.5:
        dt = None

    def fn(lib):
        kw = _dtype_kw(lib, dt)
        if form == 0:
            out = lib.randint(high, shape, **kw)
            lo = 0
        elif form == 1:
            out = lib.randint(low, high, shape, **kw)
            lo = low
        else:
            out = lib.randint(low=low, high=high, size=shape, **kw)
            lo = low
        values = out.double()
        inside = bool(((values >= lo) & (values < high)).all())
        return [str(out.dtype).split(".")[-1], str(tuple(out.shape)), str(inside)]

    return Trial(f"randint form={form} {low} {high} {shape} {dt}", fn)


def _nested(rng, depth, kinds):
    n = int(rng.integers(1, 4))
    if depth == 0:
        return [_number(rng, str(_pick(rng, *kinds))) for _ in range(n)]
    return [_nested_same(rng, depth - 1, kinds) for _ in range(1)] * n


def _nested_same(rng, depth, kinds):
    return _nested(rng, depth, kinds)


def _c_tensor(rng, dt):
    kinds = _pick(
        rng,
        ("int",),
        ("bool",),
        ("float",),
        ("int", "bool"),
        ("int", "float"),
        ("bool", "float"),
        ("int", "bool", "float"),
    )
    depth = int(rng.integers(0, 3))
    rows = [_nested(rng, max(depth - 1, 0), kinds) for _ in range(int(rng.integers(1, 3)))]
    if depth == 0:
        data = rows[0]
    else:  # (rows of one shape: the first one's)
        data = [rows[0]] * len(rows)
    scalar = rng.random() < 0.15
    if scalar:
        data = _number(rng, str(_pick(rng, *kinds)))
    fn_name = str(_pick(rng, "tensor", "tensor", "as_tensor"))
    return Trial(
        f"{fn_name}({data}) {dt}", lambda lib: [getattr(lib, fn_name)(data, **_dtype_kw(lib, dt))]
    )


def _c_sharing(rng, dt):
    """``from_numpy``/``as_tensor``/``tensor`` of an array: the values and dtype, and (for
    ``tensor``) that a later write to the array does not show in the tensor."""
    kind = str(_pick(rng, "from_numpy", "as_tensor", "as_tensor_dtype", "tensor"))
    npdt = str(_pick(rng, "float32", "float64", "int64", "bool"))
    shape = _pick(rng, (3,), (2, 2), ())
    seed = int(rng.integers(1 << 30))

    def fn(lib):
        a = np.random.default_rng(seed).integers(0, 3, size=shape).astype(npdt)
        if kind == "from_numpy":
            t = lib.from_numpy(a)
        elif kind == "as_tensor":
            t = lib.as_tensor(a)
        elif kind == "as_tensor_dtype":
            t = lib.as_tensor(a, dtype=lib.float64)
        else:
            t = lib.tensor(a)
        before = t.clone()
        a[...] = np.ones((), dtype=npdt) if npdt != "bool" else ~a
        # (from_numpy and as_tensor copy: retrograd's tensors never share an array's memory,
        # a deliberate difference (tensor/creation.py); the write is compared for tensor's copy)
        return [before, t] if kind == "tensor" else [before]

    return Trial(f"sharing {kind} {npdt} {shape}", fn)


CREATION = {
    "arange": _c_arange,
    "space": _c_space,
    "full": _c_full,
    "eye": _c_eye,
    "tri_indices": _c_tri_indices,
    "sizes": _c_sizes,
    "like": _c_like,
    "randint": _c_randint,
    "tensor": _c_tensor,
    "sharing": _c_sharing,
}


@gen("creation")
def _creation(rng):
    kind = sorted(CREATION)[int(rng.integers(len(CREATION)))]
    return CREATION[kind](rng, _pick(rng, *DTYPE_CHOICES))


# ---- captured steps against eager steps ----------------------------------------------------
# (not against torch: a captured step must equal the eager step it recorded, bit for bit)


def _inplace_mul(rg, h, x, p):
    h = h * 1.0
    h.mul_(p["v"])
    return h


def _inplace_add(rg, h, x, p):
    h = h.clone()
    h.add_(x)
    return h


def _inplace_slice(rg, h, x, p):
    h = h.clone()
    h[:, 0] = h[:, 0] * 3.0
    return h


#: ``(B, n) -> (B, n)`` steps of a program: elementwise, broadcasting, reductions, views and
#: in-place updates of a non-leaf, over the input ``x`` and the parameters ``W`` (n, n),
#: ``v`` (n,) and ``c`` (1,)
PROGRAM_OPS = {
    "tanh": lambda rg, h, x, p: h.tanh(),
    "sigmoid": lambda rg, h, x, p: h.sigmoid(),
    "gelu": lambda rg, h, x, p: rg.nn.functional.gelu(h),
    "relu": lambda rg, h, x, p: h.relu() + h * 0.1,
    "sin": lambda rg, h, x, p: h.sin(),
    "gauss": lambda rg, h, x, p: (-h.square()).exp(),
    "softplus": lambda rg, h, x, p: rg.nn.functional.softplus(h),
    "abs": lambda rg, h, x, p: h.abs(),
    "square": lambda rg, h, x, p: h * h,
    "mul_v": lambda rg, h, x, p: h * p["v"],
    "add_v": lambda rg, h, x, p: h + p["v"],
    "scale_c": lambda rg, h, x, p: h * p["c"] - p["c"],
    "div": lambda rg, h, x, p: h / (1.0 + p["v"].square()),
    "mul_x": lambda rg, h, x, p: h * x,
    "add_x": lambda rg, h, x, p: h + x,
    "matmul": lambda rg, h, x, p: h @ p["W"],
    "matmul_t": lambda rg, h, x, p: h @ p["W"].t(),
    "linear": lambda rg, h, x, p: rg.nn.functional.linear(h, p["W"], p["v"]),
    "softmax": lambda rg, h, x, p: h.softmax(-1),
    "log_softmax": lambda rg, h, x, p: h.log_softmax(-1),
    "center": lambda rg, h, x, p: h - h.mean(-1, keepdim=True),
    "norm": lambda rg, h, x, p: h / (h.square().sum(-1, keepdim=True) + 1.0).sqrt(),
    "amax": lambda rg, h, x, p: h - h.amax(-1, keepdim=True),
    "max_dim": lambda rg, h, x, p: h * h.max(0, keepdim=True).values,
    "logsumexp": lambda rg, h, x, p: h - h.logsumexp(-1, keepdim=True),
    "var": lambda rg, h, x, p: h * h.var(-1, keepdim=True),
    "cumsum": lambda rg, h, x, p: h.cumsum(-1) * 0.5,
    "flip": lambda rg, h, x, p: h.flip(-1),
    "roll_cat": lambda rg, h, x, p: rg.cat([h[:, 1:], h[:, :1]], -1),
    "reshape": lambda rg, h, x, p: h.reshape(-1).reshape(h.shape),
    "transpose": lambda rg, h, x, p: h.t().tanh().t(),
    "stack_sum": lambda rg, h, x, p: rg.stack([h, h * 2.0], 0).sum(0),
    "outer_mean": lambda rg, h, x, p: (h.unsqueeze(1) * h.unsqueeze(2)).mean(1),
    "narrow": lambda rg, h, x, p: rg.cat([h.narrow(-1, 0, 1) * 2.0, h[:, 1:]], -1),
    "sum_bcast": lambda rg, h, x, p: h + h.sum(0),
    "where": lambda rg, h, x, p: rg.where(h > 0, h, h * 0.1),
    "clamp": lambda rg, h, x, p: h.clamp(-0.5, 0.5),
    "gather": lambda rg, h, x, p: h.gather(-1, (x.abs() * 10.0).long() % h.shape[-1]),
    "index_select": lambda rg, h, x, p: h.index_select(
        -1, rg.tensor(list(range(h.shape[-1]))[::-1])
    ),
    "sort": lambda rg, h, x, p: h.sort(-1).values,
    "topk": lambda rg, h, x, p: rg.cat([h.topk(1, -1).values, h[:, 1:]], -1),
    "layer_norm": lambda rg, h, x, p: rg.nn.functional.layer_norm(
        h, (h.shape[-1],), p["v"], p["v"] * 0.5
    ),
    "masked_fill": lambda rg, h, x, p: h.masked_fill(x > 0.5, 0.25),
    "cumprod": lambda rg, h, x, p: (h * 0.5).cumprod(-1),
    "prod": lambda rg, h, x, p: h * (h * 0.5).prod(-1, keepdim=True),
    "relu_prod": lambda rg, h, x, p: h + h.relu().prod(),  # (zeros: the exact rule)
    "std": lambda rg, h, x, p: h / (h.std(-1, keepdim=True) + 1.0),
    "detach_mix": lambda rg, h, x, p: h + h.detach() * 0.5,
    "expand": lambda rg, h, x, p: h.sum(-1, keepdim=True).expand(h.shape) + h,
    "pow": lambda rg, h, x, p: (h.abs() + 0.1).pow(1.5),
    "maximum": lambda rg, h, x, p: rg.maximum(h, x),
    "leaky": lambda rg, h, x, p: rg.nn.functional.leaky_relu(h, 0.2),
    "dropout": lambda rg, h, x, p: rg.nn.functional.dropout(h, 0.3, training=True),
    "conv1d": lambda rg, h, x, p: rg.nn.functional.conv1d(
        h.unsqueeze(1), p["v"][:2].reshape(1, 1, 2), padding=1
    )[..., : h.shape[-1]].squeeze(1),
    "max_pool": lambda rg, h, x, p: rg.nn.functional.max_pool1d(h.unsqueeze(1), 2, 1, padding=1)[
        ..., : h.shape[-1]
    ].squeeze(1),
    "embedding": lambda rg, h, x, p: (
        h + rg.nn.functional.embedding((x.abs() * 10.0).long() % h.shape[-1], p["W"]).mean(1)
    ),
    "scatter_add": lambda rg, h, x, p: rg.zeros_like(h).scatter_add(
        -1, (x.abs() * 10.0).long() % h.shape[-1], h
    ),
    "attention": lambda rg, h, x, p: (
        (h.unsqueeze(-1) * h.unsqueeze(-2)).softmax(-1) @ h.unsqueeze(-1)
    ).squeeze(-1),
    "silu_elu": lambda rg, h, x, p: rg.nn.functional.silu(h) + rg.nn.functional.elu(h),
    "hardtanh": lambda rg, h, x, p: rg.nn.functional.hardtanh(h * 2.0),
    "logsigmoid": lambda rg, h, x, p: rg.nn.functional.logsigmoid(h),
    "where_x": lambda rg, h, x, p: rg.where(x > 0, h, p["v"]),
    "inplace_mul": _inplace_mul,
    "inplace_add": _inplace_add,
    "inplace_slice": _inplace_slice,
}

LOSSES = {
    "sum_x": lambda rg, h, x: (h * x).sum(),
    "mean_square": lambda rg, h, x: h.square().mean(),
    "mse": lambda rg, h, x: rg.nn.functional.mse_loss(h, x),
    "cross_entropy": lambda rg, h, x: rg.nn.functional.cross_entropy(h, x.argmax(-1)),
}

STRATEGIES = ("none", "balanced", "budget")


def _strategy(rg, name):
    if name == "none":
        return rg.NoCheckpointing()
    if name == "balanced":
        return rg.BalancedCheckpointing()
    return rg.BudgetCheckpointing(256)  # (small: values are evicted and recomputed)


class Program:
    """A random differentiable step: a few of :data:`PROGRAM_OPS` on an input, a loss, its
    backward and an optimizer step; it returns the loss, the last hidden value, integer and
    bool values computed from it, and each parameter's gradient."""

    def __init__(self, seed: int, strategy: str, fuse: bool = False):
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.strategy = strategy
        self.fuse = fuse
        self.ops = [str(_pick(rng, *sorted(PROGRAM_OPS))) for _ in range(int(rng.integers(2, 7)))]
        self.loss = str(_pick(rng, *sorted(LOSSES)))
        self.optimizer = str(_pick(rng, "sgd", "momentum", "adam"))
        self.clip = bool(rng.random() < 0.3)
        self.dtype = str(_pick(rng, "float64", "float64", "float32"))
        self.n = int(rng.integers(2, 5))
        self.batches = [int(b) for b in _pick(rng, (3, 3, 3, 5, 5, 3), (2, 2, 4, 2, 4), (4, 4, 4))]
        self.init = {
            "W": rng.standard_normal((self.n, self.n)) * 0.7,
            "v": rng.standard_normal(self.n),
            "c": rng.standard_normal(1),
        }
        self.data = [rng.standard_normal((b, self.n)) for b in self.batches]

    def __repr__(self) -> str:
        return (
            f"Program(seed={self.seed}, ops={self.ops}, loss={self.loss}, "
            f"optimizer={self.optimizer}, clip={self.clip}, dtype={self.dtype}, n={self.n}, "
            f"batches={self.batches}, strategy={self.strategy}, fuse={self.fuse})"
        )

    def make(self, rg):
        """Fresh parameters, their optimizer and the step function over them."""
        params = {k: rg.nn.Parameter(rg.tensor(a, dtype=self.dtype)) for k, a in self.init.items()}
        leaves = [params[k] for k in sorted(params)]
        if self.optimizer == "sgd":
            opt = rg.optim.SGD(leaves, lr=0.05)
        elif self.optimizer == "momentum":
            opt = rg.optim.SGD(leaves, lr=0.05, momentum=0.9, weight_decay=0.01)
        else:
            opt = rg.optim.Adam(leaves, lr=0.01)

        def step(x):
            h = x
            for name in self.ops:
                h = PROGRAM_OPS[name](rg, h, x, params)
            loss = LOSSES[self.loss](rg, h, x) + 0.01 * sum(p.square().sum() for p in leaves)
            grads = loss.backward()
            if self.clip:  # (the norm stays a tensor while a step is captured)
                rg.nn.utils.clip_grad_norm_(grads, leaves, 0.5, as_tensor=True)
            # (integer and bool results of the step: a count, a rounded value, a mask)
            hits = (h.argmax(-1) == x.argmax(-1)).sum()
            codes = (h * 4.0).round().long() // 3 + (x > 0).sum(-1, keepdim=True)
            out = (loss, h, hits, codes, h > x, *(p.grad(grads) for p in leaves))
            opt.step(grads)
            return out

        return step, opt, leaves

    def inputs(self, rg):
        return [rg.tensor(a, dtype=self.dtype) for a in self.data]


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def check_program(rg, inner, program: Program) -> None:
    """Run ``program``'s step eagerly on every batch, and captured (the first batch captures,
    the others replay; a batch of another size captures again), on twin parameters under the
    same strategy; raise :class:`fuzz_cases.Mismatch` at the first output, gradient or
    parameter that differs in a bit."""
    from fuzz_cases import Mismatch

    backend = rg.Autodiff(inner, checkpointing=_strategy(rg, program.strategy))
    with rg.use_backend(backend):
        eager_step, _, eager_params = program.make(rg)
        data = program.inputs(rg)
        rg.seed(program.seed)  # (dropout: the same masks in both runs)
        eager = [[t.numpy() for t in eager_step(x)] for x in data]
        step_fn, opt, params = program.make(rg)
        rg.seed(program.seed)
        captured = rg.capture(step_fn, data[0], state=[opt], fuse=program.fuse)
        got = [[t.numpy() for t in captured.result]]
        got += [[t.numpy() for t in captured(x)] for x in data[1:]]
        names = ["loss", "h", "hits", "codes", "mask", *(f"grad {k}" for k in sorted(program.init))]
        for call, (want_out, got_out) in enumerate(zip(eager, got)):
            for name, w, g in zip(names, want_out, got_out):
                if not _same(g, w):
                    raise Mismatch(
                        f"call {call} ({program.batches[call]} rows): {name}\n{g}\n!= eager\n{w}"
                    )
        for k, p, q in zip(sorted(program.init), params, eager_params):
            if not _same(p.numpy(), q.numpy()):
                raise Mismatch(f"parameter {k} after the steps\n{p.numpy()}\n!= eager\n{q.numpy()}")
        want_programs = len(set(program.batches))
        if captured.programs != want_programs:
            raise Mismatch(f"{captured.programs} programs kept, not {want_programs}")
