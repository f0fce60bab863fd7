"""Differential cases against PyTorch for ``tests/test_fuzz_vs_torch.py``.

Each case generator draws, from a ``numpy`` generator, the operands of one op (shapes with
0-d, size-0 and size-1 broadcasting dims up to rank 4; float32/float64/int64/bool; special
values; transposed, strided and expanded views) and a function written once against a
namespace ``lib`` that is either ``torch`` or ``retrograd``: both libraries spell the surface
the same way, so one lambda runs on both. :func:`compare` runs a case on both and reports the
first difference in error-or-not, dtype, shape, values and (float64 inputs) gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import retrograd as rg

FLOAT_VALUES = [-2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 2.5, 3.0, 0.3, -0.7]
SPECIAL_VALUES = [math.inf, -math.inf, math.nan]
INT_VALUES = [-7, -3, -2, -1, 0, 1, 2, 3, 5, 7]
DTYPES = ["float32", "float64", "int64", "bool"]
FLOATS = ["float32", "float64"]


@dataclass
class Operand:
    shape: tuple[int, ...]
    dtype: str
    view: str = "plain"  # plain | T | step | expand
    special: bool = False
    positive: bool = False
    values: list | None = None  # pool to draw from instead of the defaults
    distinct: bool = False  # all values different (no ties)


@dataclass
class Case:
    name: str
    operands: list[Operand]
    fn: Callable  # fn(lib, *tensors)
    grad: bool = True
    exact: bool = False  # integer-valued results: exact comparison
    rtol: float | None = None
    indices_ok: bool = True  # compare int outputs (indices) too
    note: str = ""
    arrays: list[np.ndarray] = field(default_factory=list)


def _values(rng, op: Operand, shape) -> np.ndarray:
    n = int(np.prod(shape)) if shape else 1
    if op.distinct:
        step = 0.5 if op.dtype.startswith("float") else 1
        return (rng.permutation(max(n, 1))[:n] * step - 1).astype(op.dtype).reshape(shape)
    if op.values is not None:
        flat = rng.choice(np.array(op.values, dtype=object), n)
        return np.array(list(flat), dtype=op.dtype).reshape(shape)
    if op.dtype == "bool":
        return rng.random(shape) < 0.5 if shape else np.array(rng.random() < 0.5)
    if op.dtype.startswith("int"):
        pool = [v for v in INT_VALUES if v > 0] if op.positive else INT_VALUES
        return np.array(rng.choice(pool, n), dtype=op.dtype).reshape(shape)
    pool = FLOAT_VALUES + (SPECIAL_VALUES if op.special else [])
    if op.positive:
        pool = [abs(v) + 0.25 for v in FLOAT_VALUES]
    mix = rng.choice(np.array(pool), n)
    noise = rng.standard_normal(n) * 2
    pick = rng.random(n) < 0.5
    return (
        np.where(pick, mix, np.abs(noise) + 0.1 if op.positive else noise)
        .astype(op.dtype)
        .reshape(shape)
    )


def base_array(rng, op: Operand) -> np.ndarray:
    """The array behind the operand, before its view is taken."""
    shape = op.shape
    if op.view == "T" and len(shape) >= 2:
        shape = shape[:-2] + (shape[-1], shape[-2])
    elif op.view == "step" and len(shape) >= 1:
        shape = shape[:-1] + (shape[-1] * 2,)
    elif op.view == "expand":
        shape = tuple(1 for _ in shape)
    return _values(rng, op, shape)


def take_view(lib, t, op: Operand):
    if op.view == "T" and len(op.shape) >= 2:
        return t.transpose(-1, -2)
    if op.view == "step" and len(op.shape) >= 1:
        return t[..., ::2]
    if op.view == "expand":
        return t.expand(*op.shape) if op.shape else t
    return t


def draw_arrays(rng, case: Case) -> list[np.ndarray]:
    return [base_array(rng, op) for op in case.operands]


# ---- running ----------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "").replace("retrograd.", "")


def _flatten(out) -> list:
    if isinstance(out, (tuple, list)):
        items = []
        for o in out:
            items.extend(_flatten(o))
        return items
    return [out]


def run(lib, case: Case, arrays, with_grad: bool):
    """(outputs, leaves, error) on library ``lib``."""
    torch = _torch()
    is_torch = lib is torch
    leaves, tensors = [], []
    for op, a in zip(case.operands, arrays):
        if is_torch:
            t = torch.tensor(a)
            if with_grad and op.dtype == "float64":
                t.requires_grad_(True)
        else:
            t = rg.tensor(a)
            if with_grad and op.dtype == "float64":
                t = t.require_grad()
        leaves.append(t)
        tensors.append(take_view(lib, t, op))
    try:
        out = case.fn(lib, *tensors)
    except Exception as e:
        return None, leaves, e
    return out, leaves, None


def to_numpy(x):
    torch = _torch()
    if isinstance(x, torch.Tensor):
        return x.detach().numpy(), _dtype_name(x.dtype)
    if isinstance(x, rg.Tensor):
        return x.numpy(), _dtype_name(x.dtype)
    return np.asarray(x), type(x).__name__


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _close(got, want, exact, rtol, what):
    if got.shape != want.shape:
        raise Mismatch(f"{what}: shape {got.shape} != torch's {want.shape}")
    if exact or got.dtype.kind in "biu":
        if not np.array_equal(got, want, equal_nan=got.dtype.kind == "f"):
            raise Mismatch(f"{what}: values\n{got}\n!= torch's\n{want}")
        return
    if got.dtype.kind == "f" and want.dtype.kind == "f":
        if not np.array_equal(np.isnan(got), np.isnan(want)):
            raise Mismatch(f"{what}: NaN positions differ\n{got}\n!= torch's\n{want}")
        try:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, equal_nan=True)
        except AssertionError as e:
            raise Mismatch(f"{what}: {e}") from None
        return
    if not np.array_equal(got, want):
        raise Mismatch(f"{what}: values {got} != torch's {want}")


def compare(case: Case, arrays, seed: int = 0) -> None:
    torch = _torch()
    with_grad = case.grad and any(op.dtype == "float64" for op in case.operands)
    t_out, t_leaves, t_err = run(torch, case, arrays, with_grad)
    r_out, r_leaves, r_err = run(rg, case, arrays, with_grad)
    if t_err is not None:
        if r_err is None:
            raise Mismatch(f"torch raises {type(t_err).__name__}: {t_err}; retrograd returns")
        if not isinstance(r_err, rg.RetrogradError):
            raise Mismatch(f"bare error {type(r_err).__name__}: {r_err}")
        return
    if r_err is not None:
        raise Mismatch(f"retrograd raises {type(r_err).__name__}: {r_err}") from r_err
    t_items, r_items = _flatten(t_out), _flatten(r_out)
    if len(t_items) != len(r_items):
        raise Mismatch(f"{len(r_items)} outputs != torch's {len(t_items)}")
    float64 = all(op.dtype != "float32" for op in case.operands)
    for k, (r, t) in enumerate(zip(r_items, t_items)):
        got, gdt = to_numpy(r)
        want, wdt = to_numpy(t)
        if gdt != wdt:
            raise Mismatch(f"output {k}: dtype {gdt} != torch's {wdt}")
        if not case.indices_ok and want.dtype.kind == "i" and isinstance(t, torch.Tensor):
            continue
        rtol = case.rtol or (1e-9 if float64 and want.dtype == np.float64 else 2e-5)
        _close(got, want, case.exact, rtol, f"output {k}")
    # the inputs themselves (in-place ops, setitem)
    for k, (r, t) in enumerate(zip(r_leaves, t_leaves)):
        _close(to_numpy(r)[0], to_numpy(t)[0], False, 1e-9, f"operand {k} after the op")
    if not with_grad:
        return
    rng = np.random.default_rng(seed)
    t_loss, r_loss = None, None
    for r, t in zip(r_items, t_items):
        if not isinstance(t, torch.Tensor) or not t.requires_grad:
            continue
        w = rng.standard_normal(tuple(t.shape))
        tl = (t * torch.tensor(w)).sum()
        rl = (r * rg.tensor(w)).sum()
        t_loss = tl if t_loss is None else t_loss + tl
        r_loss = rl if r_loss is None else r_loss + rl
    if t_loss is None:
        return
    try:
        t_grads = torch.autograd.grad(
            t_loss, [lf for lf in t_leaves if lf.requires_grad], allow_unused=True
        )
    except (RuntimeError, NotImplementedError):
        # torch defines no gradient here (floor_divide, unique, ...) or asserts internally
        return
    if not r_loss.requires_grad:
        # everything was overwritten by constants: torch keeps a graph of zeros
        if all(g is None or not g.any() for g in t_grads):
            return
        raise Mismatch("retrograd's result left the graph where torch's has a gradient")
    grads = r_loss.backward()
    r_grads = [lf.grad(grads) for lf in r_leaves if lf.is_require_grad()]
    for k, (r, t) in enumerate(zip(r_grads, t_grads)):
        if t is None:
            t = torch.zeros(())
        if t._is_zerotensor():
            t = torch.zeros(t.shape, dtype=t.dtype)
        want = t.detach().numpy()
        got = (
            np.zeros(())
            if r is None
            else rg.Tensor.from_inner(r).numpy()
            if not isinstance(r, rg.Tensor)
            else r.numpy()
        )
        got = np.broadcast_to(got, want.shape) if got.ndim == 0 else got
        _close(got, want, False, case.rtol or (1e-7 if float64 else 1e-5), f"gradient {k}")


# ---- drawing shapes and operands --------------------------------------------------------


def rand_shape(rng, min_rank=0, max_rank=4, zero=True) -> tuple[int, ...]:
    rank = int(rng.integers(min_rank, max_rank + 1))
    sizes = [0, 1, 2, 3, 4] if zero else [1, 2, 3, 4]
    p = np.array([0.06 if s == 0 else 1.0 for s in sizes]) if zero else None
    if p is not None:
        p = p / p.sum()
    return tuple(int(rng.choice(sizes, p=p)) for _ in range(rank))


def broadcast_partner(rng, shape) -> tuple[int, ...]:
    drop = int(rng.integers(0, len(shape) + 1)) if rng.random() < 0.4 else 0
    out = list(shape[drop:])
    for i in range(len(out)):
        if rng.random() < 0.3:
            out[i] = 1
    if rng.random() < 0.15 and len(out) < 4:  # the partner has the extra leading dims
        out = [int(rng.integers(1, 3))] + out
    return tuple(out)


def rand_view(rng, shape) -> str:
    kinds = ["plain", "plain", "T", "step", "expand"]
    v = str(rng.choice(kinds))
    if v == "T" and len(shape) < 2:
        return "plain"
    if v == "step" and len(shape) < 1:
        return "plain"
    return v


def operand(rng, shape, dtype, **kw) -> Operand:
    return Operand(tuple(shape), dtype, rand_view(rng, shape), **kw)


def rand_dim(rng, ndim) -> int:
    if ndim == 0:
        return int(rng.choice([0, -1]))
    d = int(rng.integers(0, ndim))
    return d - ndim if rng.random() < 0.5 else d


def rand_dtype(rng, pool=DTYPES) -> str:
    return str(rng.choice(pool))


GENERATORS: dict[str, Callable] = {}


def gen(name):
    def register(f):
        GENERATORS[name] = f
        return f

    return register


# ---- elementwise ------------------------------------------------------------------------

BINARY = {
    "add": lambda lib, a, b: a + b,
    "sub": lambda lib, a, b: a - b,
    "mul": lambda lib, a, b: a * b,
    "truediv": lambda lib, a, b: a / b,
    "div_floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "floordiv": lambda lib, a, b: a // b,
    "remainder": lambda lib, a, b: a % b,
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "pow": lambda lib, a, b: a**b,
    "atan2": lambda lib, a, b: lib.atan2(a, b),
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "minimum": lambda lib, a, b: lib.minimum(a, b),
    "fmax": lambda lib, a, b: lib.fmax(a, b),
    "fmin": lambda lib, a, b: lib.fmin(a, b),
    "eq": lambda lib, a, b: a == b,
    "ne": lambda lib, a, b: a != b,
    "lt": lambda lib, a, b: a < b,
    "le": lambda lib, a, b: lib.le(a, b),
    "gt": lambda lib, a, b: a.gt(b),
    "ge": lambda lib, a, b: a.ge(b),
    "logical_and": lambda lib, a, b: lib.logical_and(a, b),
    "logical_or": lambda lib, a, b: a.logical_or(b),
    "logical_xor": lambda lib, a, b: lib.logical_xor(a, b),
    "bitwise_and": lambda lib, a, b: a & b,
    "bitwise_or": lambda lib, a, b: a | b,
    "bitwise_xor": lambda lib, a, b: a ^ b,
    "hypot": lambda lib, a, b: lib.hypot(a, b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),  # (no inf/NaN: torch's result / self)
    "sub_alpha": lambda lib, a, b: lib.sub(a, b, alpha=2),
    "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=3),
    "where_self": lambda lib, a, b: lib.where(a > 0, a, b),
    "mul_method": lambda lib, a, b: a.mul(b),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "eq_fn": lambda lib, a, b: lib.eq(a, b),
    "isclose": lambda lib, a, b: lib.isclose(a, b),
    "lerp_half": lambda lib, a, b: lib.lerp(a, b, 0.5),
}
for _name, _fn in BINARY.items():

    def _make(name=_name, fn=_fn):
        @gen("bin_" + name)
        def g(rng):
            shape = rand_shape(rng)
            other = broadcast_partner(rng, shape)
            if rng.random() < 0.5:
                shape, other = other, shape
            da, db = rand_dtype(rng), rand_dtype(rng)
            if rng.random() < 0.4:
                db = da
            # torch's gradients of copysign (result / self) and xlogy (log(y) at x == 0) at
            # infinities are not followed
            special = rng.random() < 0.3 and name not in ("copysign", "xlogy")
            ops = [
                operand(rng, shape, da, special=special),
                operand(rng, other, db, special=special),
            ]
            if name == "xlogy":  # retrograd's xlogy gives 0, not torch's 0 / 0, at x = y = 0
                ops[1].positive = True
                ops[1].dtype = "float64" if ops[1].dtype == "bool" else ops[1].dtype
            return Case("bin_" + name, ops, fn)

    _make()

SCALARS = [2, -3, 0, 1, 2.5, -0.5, 0.0, True, False, -2, 3.0, float("inf"), float("nan")]
SCALAR_BINARY = {
    "add": (lambda lib, a, s: a + s, lambda lib, a, s: s + a),
    "sub": (lambda lib, a, s: a - s, lambda lib, a, s: s - a),
    "mul": (lambda lib, a, s: a * s, lambda lib, a, s: s * a),
    "truediv": (lambda lib, a, s: a / s, lambda lib, a, s: s / a),
    "floordiv": (lambda lib, a, s: a // s, lambda lib, a, s: s // a),
    "mod": (lambda lib, a, s: a % s, lambda lib, a, s: s % a),
    "pow": (lambda lib, a, s: a**s, lambda lib, a, s: s**a),
    "eq": (lambda lib, a, s: a == s, lambda lib, a, s: s == a),
    "lt": (lambda lib, a, s: a < s, lambda lib, a, s: s < a),
    "maximum_t": (lambda lib, a, s: a.clamp(min=s), lambda lib, a, s: a.clamp(max=s)),
    "remainder_fn": (lambda lib, a, s: lib.remainder(a, s), lambda lib, a, s: lib.fmod(a, s)),
    "and": (lambda lib, a, s: a & s, lambda lib, a, s: s | a),
    "div_floor": (
        lambda lib, a, s: lib.div(a, s, rounding_mode="floor"),
        lambda lib, a, s: a.div(s, rounding_mode="trunc"),
    ),
    "add_method": (lambda lib, a, s: a.add(s), lambda lib, a, s: a.sub(s)),
    "mul_method": (lambda lib, a, s: a.mul(s), lambda lib, a, s: a.div(s)),
    "pow_method": (lambda lib, a, s: a.pow(s), lambda lib, a, s: lib.pow(s, a)),
    "where_scalar": (
        lambda lib, a, s: lib.where(a > 0, a, s),
        lambda lib, a, s: lib.where(a > 0, s, a),
    ),
}
for _name, (_f, _r) in SCALAR_BINARY.items():

    def _make(name=_name, f=_f, r=_r):
        @gen("scalar_" + name)
        def g(rng):
            shape = rand_shape(rng)
            dtype = rand_dtype(rng)
            s = SCALARS[int(rng.integers(len(SCALARS)))]
            if name.startswith("pow") and isinstance(s, bool):
                s = int(s)  # torch's x ** False has a NaN gradient at 0 (its exponent-0 path
                # skipped for a bool): not followed
            fn = f if rng.random() < 0.5 else r
            return Case(
                f"scalar_{name}({s!r})",
                [operand(rng, shape, dtype, special=rng.random() < 0.3)],
                lambda lib, a: fn(lib, a, s),
            )

    _make()


@gen("zero_dim_promotion")
def _zero_dim(rng):
    """A 0-d tensor against a dimensioned one: the dimensioned operand's category wins."""
    shape = rand_shape(rng, 1)
    da, db = rand_dtype(rng), rand_dtype(rng)
    op = str(rng.choice(["add", "mul", "sub", "truediv", "maximum", "where_self", "pow"]))
    fn = BINARY[op]
    ops = [operand(rng, shape, da), Operand((), db)]
    if rng.random() < 0.5:
        ops.reverse()
    return Case("zero_dim_" + op, ops, fn)


UNARY = {
    "abs": lambda lib, a: a.abs(),
    "neg": lambda lib, a: -a,
    "sign": lambda lib, a: a.sign(),
    "sgn": lambda lib, a: a.sgn(),
    "exp": lambda lib, a: a.exp(),
    "log": lambda lib, a: a.log(),
    "log1p": lambda lib, a: lib.log1p(a),
    "log2": lambda lib, a: a.log2(),
    "log10": lambda lib, a: lib.log10(a),
    "sqrt": lambda lib, a: a.sqrt(),
    "rsqrt": lambda lib, a: a.rsqrt(),
    "sin": lambda lib, a: lib.sin(a),
    "cos": lambda lib, a: a.cos(),
    "tan": lambda lib, a: a.tan(),
    "tanh": lambda lib, a: a.tanh(),
    "sigmoid": lambda lib, a: a.sigmoid(),
    "asin": lambda lib, a: a.asin(),
    "atan": lambda lib, a: lib.atan(a),
    "sinh": lambda lib, a: a.sinh(),
    "floor": lambda lib, a: a.floor(),
    "ceil": lambda lib, a: lib.ceil(a),
    "round": lambda lib, a: a.round(),
    "round_dec": lambda lib, a: lib.round(a, decimals=1),
    "trunc": lambda lib, a: a.trunc(),
    "frac": lambda lib, a: a.frac(),
    "relu": lambda lib, a: lib.relu(a),
    "square": lambda lib, a: a.square(),
    "reciprocal": lambda lib, a: a.reciprocal(),
    "isnan": lambda lib, a: a.isnan(),
    "isinf": lambda lib, a: lib.isinf(a),
    "isfinite": lambda lib, a: a.isfinite(),
    "isposinf": lambda lib, a: lib.isposinf(a),
    "signbit": lambda lib, a: lib.signbit(a),
    "logical_not": lambda lib, a: lib.logical_not(a),
    "bitwise_not": lambda lib, a: ~a,
    "exp2": lambda lib, a: lib.exp2(a),
    "expm1": lambda lib, a: a.expm1(),
    "erf": lambda lib, a: a.erf(),
    "erfc": lambda lib, a: lib.erfc(a),
    "nan_to_num": lambda lib, a: lib.nan_to_num(a),
    "nan_to_num_args": lambda lib, a: a.nan_to_num(nan=1.5, posinf=9.0, neginf=-9.0),
    "clamp": lambda lib, a: a.clamp(-1.0, 1.0),
    "clamp_int": lambda lib, a: a.clamp(-1, 2),
    "clamp_min": lambda lib, a: a.clamp_min(0.5),
    "clamp_max": lambda lib, a: lib.clamp(a, max=0),
    "clamp_inverted": lambda lib, a: a.clamp(1.0, -1.0),
    "clip": lambda lib, a: a.clip(-0.5, 0.5),
    "float": lambda lib, a: a.float(),
    "double": lambda lib, a: a.double(),
    "long": lambda lib, a: a.long(),
    "bool": lambda lib, a: a.bool(),
    "to_f64": lambda lib, a: a.to(lib.float64),
    "positive": lambda lib, a: +a,
    "pow2": lambda lib, a: a.pow(2),
    "pow_half": lambda lib, a: a.pow(0.5),
    "pow_neg": lambda lib, a: a**-1,
    "softplus": lambda lib, a: lib.nn.functional.softplus(a),
    "silu": lambda lib, a: lib.nn.functional.silu(a),
    "gelu": lambda lib, a: lib.nn.functional.gelu(a),
    "leaky_relu": lambda lib, a: lib.nn.functional.leaky_relu(a, 0.1),
    "elu": lambda lib, a: lib.nn.functional.elu(a),
    "hardtanh": lambda lib, a: lib.nn.functional.hardtanh(a),
    "relu6": lambda lib, a: lib.nn.functional.relu6(a),
    "logsigmoid": lambda lib, a: lib.nn.functional.logsigmoid(a),
    "softsign": lambda lib, a: lib.nn.functional.softsign(a),
    "hardsigmoid": lambda lib, a: lib.nn.functional.hardsigmoid(a),
    "hardswish": lambda lib, a: lib.nn.functional.hardswish(a),
    "mish": lambda lib, a: lib.nn.functional.mish(a),
    "selu": lambda lib, a: lib.nn.functional.selu(a),
    "threshold": lambda lib, a: lib.nn.functional.threshold(a, 0.5, -1.0),
    "F_relu": lambda lib, a: lib.nn.functional.relu(a),
    "deg2rad": lambda lib, a: lib.deg2rad(a),
    "sinc": lambda lib, a: lib.sinc(a),
    "logit": lambda lib, a: lib.logit(a),
    "heaviside": lambda lib, a: lib.heaviside(a, lib.tensor(0.5)),
}
# torch's vectorized kernels and its scalar tail disagree at NaN or inf for these (elu's
# branch, hardtanh's and hardswish's gradients, float32 gelu(inf)), so the answer depends on
# where the value sits
_UNARY_NO_NAN = ("elu", "selu", "relu6", "hardtanh", "hardswish", "hardsigmoid", "gelu")

for _name, _fn in UNARY.items():

    def _make(name=_name, fn=_fn):
        @gen("un_" + name)
        def g(rng):
            shape = rand_shape(rng)
            # torch's vectorized elu takes the negative branch at NaN, its scalar tail not
            special = rng.random() < 0.4 and name not in _UNARY_NO_NAN
            # torch's rsqrt at -0.0 gives -inf; its logit gradient at -0.0 is -inf
            positive = name in ("pow_half", "logit")
            return Case(
                "un_" + name,
                [operand(rng, shape, rand_dtype(rng), special=special, positive=positive)],
                fn,
            )

    _make()


@gen("clamp_tensor")
def _clamp_tensor(rng):
    shape = rand_shape(rng)
    lo = broadcast_partner(rng, shape)
    hi = broadcast_partner(rng, shape)
    dt = rand_dtype(rng, ["float32", "float64", "int64"])
    ops = [
        operand(rng, shape, dt, special=rng.random() < 0.3),
        Operand(lo, rand_dtype(rng, FLOATS + ["int64"])),
        Operand(hi, dt),
    ]
    return Case("clamp_tensor", ops, lambda lib, a, lo, hi: lib.clamp(a, lo, hi))


@gen("where")
def _where(rng):
    shape = rand_shape(rng)
    s1, s2 = broadcast_partner(rng, shape), broadcast_partner(rng, shape)
    ops = [
        Operand(shape, "bool"),
        operand(rng, s1, rand_dtype(rng)),
        operand(rng, s2, rand_dtype(rng)),
    ]
    return Case("where", ops, lambda lib, c, a, b: lib.where(c, a, b))


# ---- reductions -------------------------------------------------------------------------


def _dims(rng, ndim):
    """None, one dim or a tuple of distinct dims (negative ones too)."""
    r = rng.random()
    if r < 0.2:
        return None
    if r < 0.65 or ndim == 0:
        return rand_dim(rng, ndim)
    k = int(rng.integers(1, ndim + 1))
    picked = rng.permutation(ndim)[:k]
    return tuple(int(d) - ndim if rng.random() < 0.5 else int(d) for d in picked)


def _kw(dim, keepdim):
    kw = {}
    if dim is not None:
        kw["dim"] = dim
        kw["keepdim"] = keepdim
    return kw


REDUCE_MULTI = {  # dim may be None, int or tuple
    "sum": lambda lib, a, kw: a.sum(**kw),
    "mean": lambda lib, a, kw: a.mean(**kw),
    "amax": lambda lib, a, kw: lib.amax(a, **kw) if kw else a.amax(),
    "amin": lambda lib, a, kw: a.amin(**kw),
    "nansum": lambda lib, a, kw: lib.nansum(a, **kw),
    "nanmean": lambda lib, a, kw: a.nanmean(**kw),
    "var": lambda lib, a, kw: a.var(**kw),
    "std": lambda lib, a, kw: lib.std(a, **kw),
    "var_corr0": lambda lib, a, kw: a.var(correction=0, **kw),
    "logsumexp": lambda lib, a, kw: lib.logsumexp(a, **(kw or {"dim": 0})),
    "norm": lambda lib, a, kw: a.norm(**kw),
    "count_nonzero": lambda lib, a, kw: lib.count_nonzero(a, **({"dim": kw["dim"]} if kw else {})),
    "sum_dtype": lambda lib, a, kw: a.sum(dtype=lib.float64, **kw),
}
REDUCE_ONE = {  # dim None or int
    "prod": lambda lib, a, kw: a.prod(**kw),
    "max": lambda lib, a, kw: a.max(**kw),
    "min": lambda lib, a, kw: lib.min(a, **kw),
    "argmax": lambda lib, a, kw: a.argmax(**kw),
    "argmin": lambda lib, a, kw: lib.argmin(a, **kw),
    "all": lambda lib, a, kw: a.all(**kw),
    "any": lambda lib, a, kw: lib.any(a, **kw),
    "median": lambda lib, a, kw: a.median(**kw),
    "nanmedian": lambda lib, a, kw: a.nanmedian(**kw),
    "cumsum": lambda lib, a, kw: a.cumsum(kw.get("dim", 0)),
    "cumprod": lambda lib, a, kw: lib.cumprod(a, dim=kw.get("dim", 0)),
    # Burn's (API.md's) cummax/cummin return the values only; torch's a (values, indices)
    "cummax": lambda lib, a, kw: _first(lib, a.cummax(kw.get("dim", 0))),
    "cummin": lambda lib, a, kw: lib.cummin(a, kw.get("dim", 0)).values,  # torch's function
    "logcumsumexp": lambda lib, a, kw: a.logcumsumexp(kw.get("dim", 0)),
    "sort": lambda lib, a, kw: a.sort(dim=kw.get("dim", -1), stable=True),
    "sort_desc": lambda lib, a, kw: lib.sort(
        a, dim=kw.get("dim", -1), descending=True, stable=True
    ),
    "argsort": lambda lib, a, kw: a.argsort(dim=kw.get("dim", -1), stable=True),
    "softmax": lambda lib, a, kw: a.softmax(kw.get("dim", 0)),
    "log_softmax": lambda lib, a, kw: lib.nn.functional.log_softmax(a, dim=kw.get("dim", 0)),
    "topk": lambda lib, a, kw: lib.topk(
        a, min(2, a.shape[kw.get("dim", -1)] if a.ndim else 1), dim=kw.get("dim", -1)
    ),
    "mode": lambda lib, a, kw: a.mode(kw.get("dim", -1)),
    "kthvalue": lambda lib, a, kw: a.kthvalue(1, kw.get("dim", -1)),
    "unique": lambda lib, a, kw: lib.unique(a),
    "max_dim_noarg": lambda lib, a, kw: a.max(kw.get("dim", 0)),
    "diff": lambda lib, a, kw: a.diff(dim=kw.get("dim", -1)),
}


def _first(lib, out):
    return out if lib is rg else out.values


_NO_TIES = ("kthvalue", "topk", "mode")  # torch's index among ties is its kernel's choice
_NO_SPECIAL = (
    "mode",
    "unique",
    "cumprod",  # torch's zero-path masks at inf and NaN are not followed
    "logcumsumexp",
    "nanmean",
    "var",
    "std",
    "var_corr0",
)  # NaN orders and inf * 0 in torch's formulas
_NO_EXPAND = (
    "median",  # torch's median reads expanded inputs wrongly
    "nanmedian",
    # an expanded operand is constant: its std is 0 and the gradient 0 / 0, which torch's
    # rounded mean turns into noise (std 1e-16, a gradient of order 1)
    "std",
)


def _reduce_case(rng, name, fn, multi):
    shape = rand_shape(rng)
    if name in ("median", "nanmedian") and 0 in shape:
        shape = tuple(max(n, 1) for n in shape)  # torch's empty bool median: garbage
    if name in ("var", "std", "var_corr0"):  # n - correction <= 0: 0 / 0 in both, unlike
        shape = rand_shape(rng, 1, zero=False)
    ndim = len(shape)
    dim = _dims(rng, ndim) if multi else (None if rng.random() < 0.25 else rand_dim(rng, ndim))
    kw = _kw(dim, bool(rng.random() < 0.5))
    dtype = rand_dtype(rng)
    special = rng.random() < 0.35 and name not in _NO_SPECIAL
    ties = rng.random() < 0.4 and name not in _NO_TIES
    op = operand(rng, shape, dtype, special=special)
    if name in _NO_EXPAND + _NO_TIES and op.view == "expand":
        op.view = "plain"
    if name in _NO_TIES and dtype != "bool":
        op.distinct = True
    if ties and dtype != "bool":
        op.values = [1.0, 2.0, -1.0] + (
            [math.nan, math.inf] if special and dtype != "int64" else []
        )
    return Case(f"{name}({kw})", [op], lambda lib, a: fn(lib, a, kw))


for _name, _fn in REDUCE_MULTI.items():

    def _make(name=_name, fn=_fn):
        GENERATORS["red_" + name] = lambda rng: _reduce_case(rng, name, fn, True)

    _make()
for _name, _fn in REDUCE_ONE.items():

    def _make(name=_name, fn=_fn):
        GENERATORS["red_" + name] = lambda rng: _reduce_case(rng, name, fn, False)

    _make()


@gen("api_reductions")
def _api_reductions(rng):
    """API.md's names against torch's keepdim spellings."""
    shape = rand_shape(rng, 1)
    d = rand_dim(rng, len(shape))
    # (API.md's argmax(d) and var(d) keep the dim, torch's positional forms drop it: the
    # library follows torch there, so those two are not compared)
    which = str(rng.choice(["sum_dim", "mean_dim", "max_dim", "min_dim", "prod_dim"]))
    torch_form = {
        "sum_dim": lambda a: a.sum(d, keepdim=True),
        "mean_dim": lambda a: a.mean(d, keepdim=True),
        "max_dim": lambda a: a.max(d, keepdim=True).values,
        "min_dim": lambda a: a.min(d, keepdim=True).values,
        "prod_dim": lambda a: a.prod(d, keepdim=True),
        "argmax": lambda a: a.argmax(d, keepdim=True),
        "var": lambda a: a.var(d, keepdim=True),
    }[which]

    def fn(lib, a):
        if lib is rg:
            return getattr(a, which)(d)
        return torch_form(a)

    dtype = (
        "float64"
        if which in ("mean_dim", "var")
        else rand_dtype(rng, ["float64", "float32", "int64"])
    )
    return Case(f"api_{which}({d})", [operand(rng, shape, dtype, special=rng.random() < 0.3)], fn)


# ---- shapes ----------------------------------------------------------------------------


def _perm(rng, n):
    return tuple(int(p) - n if rng.random() < 0.3 else int(p) for p in rng.permutation(n))


@gen("shape_ops")
def _shape_ops(rng):
    shape = rand_shape(rng, 1)
    n = len(shape)
    d0, d1 = rand_dim(rng, n), rand_dim(rng, n)
    perm = _perm(rng, n)
    numel = int(np.prod(shape))
    which = int(rng.integers(0, 22))
    fns = [
        ("transpose", lambda lib, a: a.transpose(d0, d1)),
        ("permute", lambda lib, a: a.permute(*perm)),
        ("permute_tuple", lambda lib, a: lib.permute(a, perm)),
        ("flip", lambda lib, a: a.flip(d0)),
        ("flip_tuple", lambda lib, a: lib.flip(a, (d0,))),
        ("reshape", lambda lib, a: a.reshape(-1)),
        ("reshape2", lambda lib, a: a.reshape(numel, 1) if numel else a.reshape(0, -1)),
        ("view_flat", lambda lib, a: a.contiguous().view(-1)),
        ("flatten", lambda lib, a: a.flatten(d0 if d0 <= d1 % n else 0)),
        ("squeeze", lambda lib, a: a.squeeze()),
        ("squeeze_dim", lambda lib, a: a.squeeze(d0)),
        ("unsqueeze", lambda lib, a: a.unsqueeze(d0)),
        ("unsqueeze_neg", lambda lib, a: lib.unsqueeze(a, -1)),
        ("movedim", lambda lib, a: lib.movedim(a, d0, d1)),
        ("roll", lambda lib, a: a.roll(2, d0)),
        ("roll_flat", lambda lib, a: lib.roll(a, -1)),
        ("narrow", lambda lib, a: a.narrow(d0, 0, min(1, a.shape[d0]))),
        ("chunk", lambda lib, a: a.chunk(2, d0)),
        ("split", lambda lib, a: lib.split(a, 1, dim=d0) if a.shape[d0] else a.split(1, d0)),
        ("repeat", lambda lib, a: a.repeat(*([2] + [1] * (n - 1)))),
        ("tile", lambda lib, a: lib.tile(a, (2,))),
        ("unbind", lambda lib, a: a.unbind(d0)),
    ]
    name, fn = fns[which]
    return Case(f"{name} d0={d0} d1={d1} perm={perm}", [operand(rng, shape, rand_dtype(rng))], fn)


@gen("cat_stack")
def _cat_stack(rng):
    shape = rand_shape(rng, 1)
    n = len(shape)
    d = rand_dim(rng, n)
    other = list(shape)
    other[d] = int(rng.integers(0, 3))
    k = int(rng.integers(1, 4))
    dts = [rand_dtype(rng) for _ in range(k)]
    if rng.random() < 0.5:
        dts = [dts[0]] * k
    which = str(rng.choice(["cat", "stack", "hstack", "vstack", "cat_empty"]))
    if which == "stack":
        ops = [operand(rng, shape, dt) for dt in dts]
        sd = int(rng.integers(-n - 1, n + 1))
        return Case(f"stack({sd})", ops, lambda lib, *ts: lib.stack(ts, dim=sd))
    if which == "cat_empty":  # torch's legacy rule: a 1-d size-0 tensor is skipped
        ops = [operand(rng, shape, dts[0]), Operand((0,), dts[-1])]
        return Case("cat_empty", ops, lambda lib, *ts: lib.cat(ts, dim=d))
    ops = [operand(rng, tuple(other) if i % 2 else shape, dt) for i, dt in enumerate(dts)]
    if which == "cat":
        return Case(f"cat({d})", ops, lambda lib, *ts: lib.cat(list(ts), d))
    return Case(which, ops, lambda lib, *ts: getattr(lib, which)(ts))


@gen("expand_broadcast")
def _expand(rng):
    shape = rand_shape(rng, 1, 3)
    target = broadcast_partner(rng, shape)
    which = int(rng.integers(0, 4))
    fns = [
        lambda lib, a, b: a.expand_as(b) if len(b.shape) >= len(a.shape) else a + 0,
        lambda lib, a, b: lib.broadcast_tensors(a, b),
        lambda lib, a, b: a.expand(*([-1] * a.ndim)),
        lambda lib, a, b: lib.broadcast_to(a, lib.broadcast_shapes(a.shape, b.shape)),
    ]
    return Case(
        f"expand{which}",
        [operand(rng, target, "float64"), operand(rng, shape, rand_dtype(rng))],
        lambda lib, a, b: fns[which](lib, b, a),
    )


# ---- indexing ---------------------------------------------------------------------------


def _index(rng, shape):
    """A random torch index of ``shape``: ints, slices with steps, None, Ellipsis, int
    tensors, bool masks and lists."""
    items = []
    d = 0
    n = len(shape)
    used_ellipsis = False
    while d < n:
        r = rng.random()
        size = shape[d]
        if r < 0.2 and size > 0:
            items.append(int(rng.integers(-size, size)))
            d += 1
        elif r < 0.45:
            start = int(rng.integers(-size - 1, size + 1)) if rng.random() < 0.5 else None
            stop = int(rng.integers(-size - 1, size + 2)) if rng.random() < 0.5 else None
            step = int(rng.integers(1, 3)) if rng.random() < 0.5 else None
            items.append(slice(start, stop, step))
            d += 1
        elif r < 0.55:
            items.append(None)
        elif r < 0.65 and not used_ellipsis:
            items.append(Ellipsis)
            used_ellipsis = True
            d += int(rng.integers(0, n - d + 1))
        elif r < 0.8 and size > 0:
            k = int(rng.integers(0, 4))
            items.append(("long", rng.integers(-size, size, k).tolist()))
            d += 1
        elif r < 0.9:
            items.append(("mask", (rng.random(size) < 0.5).tolist()))
            d += 1
        elif size > 0:
            items.append(("list", rng.integers(-size, size, int(rng.integers(1, 3))).tolist()))
            d += 1
        else:
            items.append(slice(None))
            d += 1
    return items


def _realize(lib, items):
    out = []
    for it in items:
        if isinstance(it, tuple) and it[0] == "long":
            out.append(lib.tensor(it[1], dtype=lib.int64))
        elif isinstance(it, tuple) and it[0] == "mask":
            out.append(lib.tensor(it[1], dtype=lib.bool))
        elif isinstance(it, tuple) and it[0] == "list":
            out.append(list(it[1]))
        else:
            out.append(it)
    return tuple(out)


@gen("getitem")
def _getitem(rng):
    shape = rand_shape(rng, 1)
    items = _index(rng, shape)
    if rng.random() < 0.15:  # one whole-tensor mask
        return Case(
            "getitem_mask",
            [operand(rng, shape, rand_dtype(rng)), Operand(shape, "bool")],
            lambda lib, a, m: a[m],
        )
    return Case(
        f"getitem {items}",
        [operand(rng, shape, rand_dtype(rng))],
        lambda lib, a: a[_realize(lib, items)],
    )


@gen("setitem")
def _setitem(rng):
    shape = rand_shape(rng, 1)
    items = _index(rng, shape)
    dtype = rand_dtype(rng)
    vdt = rand_dtype(rng)
    scalar = rng.random() < 0.4
    sval = [1.5, 2, True, -1][int(rng.integers(0, 4))]

    def fn(lib, a, v):
        a = a.clone()
        idx = _realize(lib, items)
        if scalar:
            a[idx] = sval
        else:
            a[idx] = v
        return a

    vshape = (1,)
    return Case(
        f"setitem {items} scalar={sval if scalar else None}",
        [operand(rng, shape, dtype), Operand(vshape, vdt)],
        fn,
    )


@gen("gather_scatter")
def _gather(rng):
    shape = rand_shape(rng, 1, 3, zero=False)
    n = len(shape)
    d = rand_dim(rng, n)
    idx_shape = list(shape)
    idx_shape[d] = int(rng.integers(1, 4))
    size = shape[d]
    which = str(
        rng.choice(
            [
                "gather",
                "scatter",
                "scatter_add",
                "scatter_reduce",
                "index_select",
                "index_add",
                "take_along",
                "masked_fill",
                "masked_scatter",
                "index_fill",
                "index_copy",
                "masked_select",
            ]
        )
    )
    dtype = rand_dtype(rng, ["float64", "float32", "int64"])
    index = Operand(tuple(idx_shape), "int64", values=list(range(size)))
    src = Operand(tuple(idx_shape), dtype)
    if which == "gather":
        return Case(
            f"gather({d})", [operand(rng, shape, dtype), index], lambda lib, a, i: a.gather(d, i)
        )
    if which == "take_along":
        return Case(
            f"take_along({d})",
            [operand(rng, shape, dtype), index],
            lambda lib, a, i: lib.take_along_dim(a, i, dim=d),
        )
    if which == "scatter":
        # distinct positions so that assignment has no ties
        return Case(
            f"scatter({d})",
            [operand(rng, shape, dtype), Operand(tuple(idx_shape), "int64", values=[0]), src],
            lambda lib, a, i, s: a.scatter(d, i, s),
        )
    if which == "scatter_add":
        return Case(
            f"scatter_add({d})",
            [operand(rng, shape, dtype), index, src],
            lambda lib, a, i, s: lib.scatter_add(a, d, i, s),
        )
    if which == "scatter_reduce":
        red = str(rng.choice(["sum", "mean"]))  # prod, amax, amin: refused (not built)
        inc = bool(rng.random() < 0.5)
        return Case(
            f"scatter_reduce({d},{red},{inc})",
            [operand(rng, shape, dtype), index, src],
            lambda lib, a, i, s: a.scatter_reduce(d, i, s, red, include_self=inc),
        )
    k = int(rng.integers(0, 4))
    vec = Operand(
        (k,),
        "int64",
        values=list(range(-size, size)) if which == "index_select" else list(range(size)),
    )
    if which == "index_select":
        return Case(
            f"index_select({d})",
            [operand(rng, shape, dtype), vec],
            lambda lib, a, i: a.index_select(d, i),
        )
    src_shape = list(shape)
    src_shape[d] = k
    if which == "index_add":
        return Case(
            f"index_add({d})",
            [operand(rng, shape, dtype), vec, Operand(tuple(src_shape), dtype)],
            lambda lib, a, i, s: a.index_add(d, i, s, alpha=2),
        )
    if which == "index_copy":
        vec = Operand((min(k, size),), "int64", values=[0])
        src_shape[d] = min(k, size)
        return Case(
            f"index_copy({d})",
            [operand(rng, shape, dtype), vec, Operand(tuple(src_shape), dtype)],
            lambda lib, a, i, s: a.index_copy(
                d, i.unique() if False else i[:1], s.narrow(d, 0, min(1, s.shape[d]))
            ),
        )
    if which == "index_fill":
        return Case(
            f"index_fill({d})",
            [operand(rng, shape, dtype), vec],
            lambda lib, a, i: a.index_fill(d, i, -2),
        )
    mshape = broadcast_partner(rng, shape)
    if which == "masked_fill":
        val = [0.5, -1, float("nan"), True][int(rng.integers(0, 4))]
        return Case(
            f"masked_fill({val})",
            [operand(rng, shape, dtype), Operand(mshape, "bool")],
            lambda lib, a, m: a.masked_fill(m, val),
        )
    if which == "masked_select":
        return Case(
            "masked_select",
            [operand(rng, shape, dtype), Operand(mshape, "bool")],
            lambda lib, a, m: lib.masked_select(a, m),
        )
    return Case(
        "masked_scatter",
        [
            operand(rng, shape, dtype),
            Operand(mshape, "bool"),
            Operand((int(np.prod(shape)) * 2,), dtype),
        ],
        lambda lib, a, m, s: a.masked_scatter(m, s),
    )


@gen("misc_select")
def _misc(rng):
    shape = rand_shape(rng, 0, 3)
    dtype = rand_dtype(rng)
    which = str(
        rng.choice(
            [
                "nonzero",
                "nonzero_tuple",
                "argwhere",
                "tril",
                "triu",
                "diag",
                "diagonal",
                "trace",
                "flatten_nonzero",
                "where1",
                "repeat_interleave",
                "clone",
                "contiguous",
                "item_like",
                "tolist",
                "sum_bool",
            ]
        )
    )
    fns = {
        "nonzero": lambda lib, a: lib.nonzero(a),
        "nonzero_tuple": lambda lib, a: lib.nonzero(a, as_tuple=True),
        "argwhere": lambda lib, a: lib.argwhere(a),
        "tril": lambda lib, a: a.tril(-1),
        "triu": lambda lib, a: lib.triu(a, 1),
        "diag": lambda lib, a: lib.diag(a),
        "diagonal": lambda lib, a: a.diagonal(0, -2, -1),
        "trace": lambda lib, a: a.trace(),
        "flatten_nonzero": lambda lib, a: a.flatten().nonzero(as_tuple=False),
        "where1": lambda lib, a: lib.where(a),
        "repeat_interleave": lambda lib, a: a.repeat_interleave(2),
        "clone": lambda lib, a: a.clone(),
        "contiguous": lambda lib, a: a.contiguous(),
        "item_like": lambda lib, a: a.sum().item(),
        "tolist": lambda lib, a: lib.tensor(a.tolist()) if a.numel() else a,
        "sum_bool": lambda lib, a: (a > 0).sum(),
    }
    return Case(which, [operand(rng, shape, dtype, special=rng.random() < 0.3)], fns[which])


# ---- products ---------------------------------------------------------------------------


@gen("matmul")
def _matmul(rng):
    m, k, n = (int(rng.integers(0, 4)) for _ in range(3))
    if rng.random() < 0.8:
        k = max(k, 1)
    b = int(rng.integers(1, 3))
    which = str(
        rng.choice(
            [
                "mm",
                "matmul",
                "matmul_1d",
                "matmul_bcast",
                "bmm",
                "addmm",
                "dot",
                "mv",
                "outer",
                "einsum",
                "at",
                "vdot_like",
                "baddbmm",
                "tensordot",
                "inner",
                "addmv",
                "matmul_vec_batched",
            ]
        )
    )
    da, db = rand_dtype(rng, FLOATS + ["int64"]), rand_dtype(rng, FLOATS + ["int64"])
    if rng.random() < 0.5:
        db = da
    shapes = {
        "mm": ((m, k), (k, n)),
        "at": ((m, k), (k, n)),
        "matmul": ((b, m, k), (k, n)),
        "matmul_1d": ((k,), (b, k, n)),
        "matmul_bcast": ((b, 1, m, k), (2, k, n)),
        "matmul_vec_batched": ((b, m, k), (k,)),
        "bmm": ((b, m, k), (b, k, n)),
        "baddbmm": ((b, m, k), (b, k, n)),
        "addmm": ((m, k), (k, n)),
        "addmv": ((m, k), (k,)),
        "dot": ((k,), (k,)),
        "vdot_like": ((k,), (k,)),
        "inner": ((m, k), (n, k)),
        "mv": ((m, k), (k,)),
        "outer": ((m,), (n,)),
        "einsum": ((b, m, k), (b, k, n)),
        "tensordot": ((m, k), (k, n)),
    }[which]
    fns = {
        "mm": lambda lib, x, y: lib.mm(x, y),
        "at": lambda lib, x, y: x @ y,
        "matmul": lambda lib, x, y: lib.matmul(x, y),
        "matmul_1d": lambda lib, x, y: x.matmul(y),
        "matmul_bcast": lambda lib, x, y: x @ y,
        "matmul_vec_batched": lambda lib, x, y: x @ y,
        "bmm": lambda lib, x, y: lib.bmm(x, y),
        "baddbmm": lambda lib, x, y: lib.baddbmm(
            lib.ones(1, dtype=x.dtype), x, y, beta=0.5 if x.is_floating_point() else 2
        ),
        "addmm": lambda lib, x, y: lib.addmm(
            lib.ones(x.shape[0], y.shape[1], dtype=x.dtype), x, y, alpha=2
        ),
        "addmv": lambda lib, x, y: lib.addmv(lib.zeros(x.shape[0], dtype=x.dtype), x, y),
        "dot": lambda lib, x, y: lib.dot(x, y),
        "vdot_like": lambda lib, x, y: x.dot(y),
        "inner": lambda lib, x, y: lib.inner(x, y),
        "mv": lambda lib, x, y: x.mv(y),
        "outer": lambda lib, x, y: lib.outer(x, y),
        "einsum": lambda lib, x, y: lib.einsum("bij,bjk->bik", x, y),
        "tensordot": lambda lib, x, y: lib.tensordot(x, y, dims=1),
    }
    if 0 in shapes[0] + shapes[1]:
        # torch's batched kernels skip the dtype check when the result is empty (and take
        # the second operand's dtype): a quirk not followed
        db = da
    return Case(
        which,
        [operand(rng, shapes[0], da), operand(rng, shapes[1], db)],
        fns[which],
        rtol=1e-5 if "float32" in (da, db) else None,
    )


# ---- in place ---------------------------------------------------------------------------

INPLACE = {
    "add_": lambda lib, a, b: a.add_(b),
    "add_alpha_": lambda lib, a, b: a.add_(b, alpha=2),
    "sub_": lambda lib, a, b: a.sub_(b),
    "mul_": lambda lib, a, b: a.mul_(b),
    "div_": lambda lib, a, b: a.div_(b),
    "iadd": None,
    "imul": None,
    "clamp_": lambda lib, a, b: a.clamp_(-1, 1),
    "clamp_min_": lambda lib, a, b: a.clamp_min_(0),
    "copy_": lambda lib, a, b: a.copy_(b),
    "fill_": lambda lib, a, b: a.fill_(2),
    "zero_": lambda lib, a, b: a.zero_(),
    "masked_fill_": lambda lib, a, b: a.masked_fill_(b > 0, 3),
    "pow_": lambda lib, a, b: a.pow_(2),
    "neg_": lambda lib, a, b: a.neg_(),
    "abs_": lambda lib, a, b: a.abs_(),
    "exp_": lambda lib, a, b: a.exp_(),
    "floor_": lambda lib, a, b: a.floor_(),
    "remainder_": lambda lib, a, b: a.remainder_(b),
    "relu_": lambda lib, a, b: a.relu_(),
    "sigmoid_": lambda lib, a, b: a.sigmoid_(),
    "lerp_": lambda lib, a, b: a.lerp_(b, 0.25),
}


def _inplace_fn(name, how):
    op = INPLACE[name]

    def fn(lib, a, b):
        base = a.clone()
        if how == "whole":
            target = base
        elif how == "row":
            target = base[0] if base.ndim and base.shape[0] else base
        elif how == "T":
            target = base.transpose(0, -1) if base.ndim else base
        else:
            target = base[..., ::2] if base.ndim else base
        if name == "iadd":
            t2 = target
            t2 += b
            ret = t2
        elif name == "imul":
            t2 = target
            t2 *= b
            ret = t2
        else:
            ret = op(lib, target, b)
        return base, ret, target

    return fn


for _name in INPLACE:

    def _make(name=_name):
        @gen("inplace_" + name)
        def g(rng):
            shape = rand_shape(rng)
            how = str(rng.choice(["whole", "row", "T", "step"]))
            da = rand_dtype(rng)
            db = rand_dtype(rng)
            if rng.random() < 0.5:
                db = da
            view_shape = shape
            # the second operand broadcasts against the target view
            if how == "row" and shape and shape[0]:
                view_shape = shape[1:]
            elif how == "T" and shape:
                view_shape = (
                    tuple(reversed(shape))
                    if len(shape) == 2
                    else (shape[-1],) + shape[1:-1] + (shape[0],)
                )
            elif how == "step" and shape:
                view_shape = shape[:-1] + ((shape[-1] + 1) // 2,)
            other = broadcast_partner(rng, view_shape)
            return Case(
                f"{name}[{how}]",
                [operand(rng, shape, da, special=rng.random() < 0.2), operand(rng, other, db)],
                _inplace_fn(name, how),
            )

    _make()


@gen("view_alias")
def _alias(rng):
    """A write through a view shows in its base, and through the base in the view."""
    shape = rand_shape(rng, 2, 3, zero=False)
    which = str(rng.choice(["view_into_base", "base_into_view", "reshape_view", "chain"]))

    def fn(lib, a):
        base = a.contiguous().clone()  # torch: clone keeps a view's strides
        if which == "view_into_base":
            v = base[1:, ::2] if base.shape[0] > 1 else base[:, 0]
            v.mul_(3.0)
        elif which == "base_into_view":
            v = base.transpose(0, 1)
            base.add_(1.0)
        elif which == "reshape_view":
            v = base.view(-1)
            v[0] = 7.0
        else:
            v = base[0]
            w = v[1:]
            w.fill_(-2.0)
        return base, v

    return Case(which, [operand(rng, shape, "float64")], fn)


def draw_case(rng, names=None) -> Case:
    names = names or sorted(GENERATORS)
    name = names[int(rng.integers(len(names)))]
    case = GENERATORS[name](rng)
    case.arrays = draw_arrays(rng, case)
    return case


@gen("api_names")
def _api_names(rng):
    """API.md's names (section 2) against torch's spelling of the same operation."""
    shape = rand_shape(rng, 1, 4, zero=False)
    n = len(shape)
    d0, d1 = rand_dim(rng, n), rand_dim(rng, n)
    du = int(rng.integers(-n - 1, n + 1))
    s = [0.5, -2.0, 3.0][int(rng.integers(0, 3))]
    size = shape[d0]
    pairs = {
        "swap_dims": (lambda a: a.swap_dims(d0, d1), lambda a: a.transpose(d0, d1)),
        "unsqueeze_dim": (lambda a: a.unsqueeze_dim(du), lambda a: a.unsqueeze(du)),
        "squeeze_dim": (
            lambda a: a.unsqueeze_dim(0).squeeze_dim(0),
            lambda a: a.unsqueeze(0).squeeze(0),
        ),
        "repeat_dim": (
            lambda a: a.repeat_dim(d0, 2),
            lambda a: a.repeat(*[2 if i == d0 % n else 1 for i in range(n)]),
        ),
        "narrow": (
            lambda a: a.narrow(d0, size // 2, size - size // 2),
            lambda a: a.narrow(d0, size // 2, size - size // 2),
        ),
        "flip": (lambda a: a.flip((d0,)), lambda a: a.flip(d0)),
        "mask_fill": (
            lambda a: a.mask_fill(a.greater_elem(s), s),
            lambda a: a.masked_fill(a > s, s),
        ),
        "mask_where": (
            lambda a: a.mask_where(a.lower_elem(s), a * 2.0),
            lambda a: _torch().where(a < s, a * 2.0, a),
        ),
        "powf_scalar": (lambda a: a.abs().powf_scalar(s), lambda a: a.abs() ** s),
        "div_scalar": (lambda a: a.div_scalar(s), lambda a: a / s),
        "clamp_min": (lambda a: a.clamp_min(s), lambda a: a.clamp_min(s)),
        "recip": (lambda a: a.recip(), lambda a: a.reciprocal()),
        "greater_equal_elem": (lambda a: a.greater_equal_elem(s), lambda a: a >= s),
        "is_nan": (lambda a: a.is_nan(), lambda a: a.isnan()),
        "select": (
            lambda a: a.select(d0, rg.tensor([size - 1, 0])),
            lambda a: a.index_select(d0, _torch().tensor([size - 1, 0])),
        ),
        "cumsum": (lambda a: a.cumsum(d0), lambda a: a.cumsum(d0)),
        "sort_desc": (
            lambda a: a.sort(d0, descending=True)[0],
            lambda a: a.sort(d0, descending=True).values,
        ),
        "argsort": (lambda a: a.argsort(d0), lambda a: a.argsort(dim=d0, stable=True)),
        "flatten": (lambda a: a.flatten(0, -1), lambda a: a.flatten(0, -1)),
        "unfold": (lambda a: a.unfold(d0, 1, 1), lambda a: a.unfold(d0, 1, 1)),
        "expand": (
            lambda a: a.unsqueeze_dim(0).expand((2,) + a.shape),
            lambda a: a.unsqueeze(0).expand(2, *a.shape),
        ),
        "slice": (lambda a: a.slice([(0, shape[0])]), lambda a: a[0 : shape[0]]),
    }
    name = sorted(pairs)[int(rng.integers(len(pairs)))]
    ours, theirs = pairs[name]
    dtype = rand_dtype(rng, ["float64", "float32"] if name != "argsort" else ["float64", "int64"])
    op = operand(
        rng, shape, dtype, special=rng.random() < 0.2 and name not in ("argsort", "sort_desc")
    )
    if name in ("argsort", "sort_desc"):
        op.distinct = True
    return Case(
        f"api.{name} d0={d0} d1={d1} du={du} s={s}",
        [op],
        lambda lib, a: ours(a) if lib is rg else theirs(a),
    )


@gen("more_ops")
def _more_ops(rng):
    """Less common tensor methods and functions, in torch's spelling."""
    shape = rand_shape(rng, 1, 4)
    n = len(shape)
    d0, d1 = rand_dim(rng, n), rand_dim(rng, n)
    size = shape[d0]
    k = int(rng.integers(-2, 3))
    fns = {
        "sum_all_dims_tuple": lambda lib, a: a.sum(()),
        "cumsum_dtype": lambda lib, a: a.cumsum(d0, dtype=lib.float64),
        "roll_tuple": lambda lib, a: a.roll((1, -1), (d0, d1)) if d0 % n != d1 % n else a.roll(1),
        "tril_k": lambda lib, a: a.tril(k) if n >= 2 else a,
        "triu_k": lambda lib, a: lib.triu(a, k) if n >= 2 else a,
        "repeat_interleave_dim": lambda lib, a: a.repeat_interleave(2, dim=d0),
        "narrow_negative": lambda lib, a: a.narrow(d0, -1, 1) if size else a,
        "split_sizes": lambda lib, a: a.split([size // 2, size - size // 2], d0),
        "chunk_uneven": lambda lib, a: a.chunk(3, d0),
        "unflatten": lambda lib, a: a.flatten().unflatten(0, (1, -1)),
        "movedim_lists": lambda lib, a: lib.movedim(a, [d0], [d1]),
        "squeeze_tuple": lambda lib, a: a.unsqueeze(0).unsqueeze(-1).squeeze((0, -1)),
        "mT": lambda lib, a: a.mT if n >= 2 else a,
        "expand_as": lambda lib, a: a[..., :1].expand_as(a) if size and shape[-1] else a,
        "index_put_accumulate": lambda lib, a: (
            a.index_put((lib.tensor([0, 0]),), lib.ones(shape[1:], dtype=a.dtype), accumulate=True)
            if shape[0]
            else a
        ),
        "take": lambda lib, a: a.take(lib.tensor([0, -1])) if a.numel() else a,
        "index_fill_neg": lambda lib, a: (
            a.index_fill(d0, lib.tensor([size - 1]), -1) if size else a
        ),
        "scatter_value": lambda lib, a: (
            a.scatter(
                d0,
                lib.zeros(a.shape, dtype=lib.int64)[(slice(None),) * (d0 % n) + (slice(0, 1),)],
                2.0,
            )
            if size
            else a
        ),
        "rot90": lambda lib, a: lib.rot90(a, 1, (d0, d1)) if d0 % n != d1 % n else a,
        # (contiguous: torch's kron views its input, and refuses a transposed one)
        "kron": lambda lib, a: lib.kron(a.contiguous(), lib.ones(2, dtype=a.dtype)),
        "flip_all": lambda lib, a: a.flip(tuple(range(n))),
        "diag_embed": lambda lib, a: lib.diag_embed(a),
        "cummin_values": lambda lib, a: lib.cummin(a, d0).values,
        "amax_tuple_keep": lambda lib, a: a.amax((d0,), keepdim=True) if size else a,
        "std_mean": lambda lib, a: lib.std_mean(a, dim=d0) if a.is_floating_point() else a,
        "var_mean": lambda lib, a: (
            lib.var_mean(a, d0, correction=0) if a.is_floating_point() else a
        ),
        "aminmax": lambda lib, a: lib.aminmax(a, dim=d0) if size else a,
        "count_nonzero_tuple": lambda lib, a: lib.count_nonzero(a, dim=(d0,)),
        "any_dim_tuple": lambda lib, a: a.any(dim=d0),
        "sort_stable_desc": lambda lib, a: a.sort(dim=d0, descending=True, stable=True),
        "clone_contiguous_view": lambda lib, a: a.clone().contiguous().view(-1),
        "new_zeros": lambda lib, a: a.new_zeros((2,)),
        "new_full": lambda lib, a: a.new_full((2,), 3),
        "new_tensor": lambda lib, a: a.new_tensor([1, 2]),
        "zeros_like_dtype": lambda lib, a: lib.zeros_like(a, dtype=lib.float64),
        "full_like": lambda lib, a: lib.full_like(a, 2.5),
        "type_as": lambda lib, a: a.type_as(lib.ones(1, dtype=lib.float64)),
        "to_dtype": lambda lib, a: a.to(lib.int64),
        "where_scalars": lambda lib, a: lib.where(a > 0, 1.0, 0),
        "masked_fill_tensor_value": lambda lib, a: a.masked_fill(a > 0, lib.tensor(2.0)),
        "nan_to_num_int": lambda lib, a: lib.nan_to_num(a, nan=0.0),
        "frac": lambda lib, a: a.frac() if a.is_floating_point() else a,
        "bitwise_not_bool": lambda lib, a: ~(a > 0),
        "pow_tensor_scalar_base": lambda lib, a: lib.pow(2.0, a),
        "float_power": lambda lib, a: lib.float_power(a, 2),
        "true_divide_int": lambda lib, a: lib.true_divide(a, 2),
        "mul_bool_scalar": lambda lib, a: a * True,
        "rsub": lambda lib, a: lib.rsub(a, 1) if a.dtype != lib.bool else a,
        "sub_scalar_alpha": lambda lib, a: lib.sub(a, 2, alpha=3) if a.dtype != lib.bool else a,
        "addcmul": lambda lib, a: lib.addcmul(a, a, a, value=0.5) if a.is_floating_point() else a,
        "addcdiv": lambda lib, a: (
            lib.addcdiv(a, a, a + 3.0, value=2) if a.is_floating_point() else a
        ),
        "square_int": lambda lib, a: a.square(),
        "exp_int": lambda lib, a: a.exp(),
        "sqrt_int": lambda lib, a: a.sqrt(),
        "sigmoid_int": lambda lib, a: a.sigmoid(),
        "trunc_int": lambda lib, a: a.trunc(),
        "ceil_int": lambda lib, a: a.ceil(),
        "round_int": lambda lib, a: a.round(),
        "neg_int": lambda lib, a: a.neg() if a.dtype != lib.bool else a,
        "reciprocal_int": lambda lib, a: a.reciprocal(),
        "sign_int": lambda lib, a: a.sign(),
        "signbit_int": lambda lib, a: a.signbit(),
        "sum_int_dtype": lambda lib, a: a.sum(d0, dtype=lib.float32),
        "prod_int": lambda lib, a: a.prod(d0),
        "max_int_dim": lambda lib, a: a.max(d0) if size else a,
        "mean_dtype": lambda lib, a: a.mean(d0, dtype=lib.float64),
        "argsort_desc_int": lambda lib, a: a.argsort(dim=d0, descending=True, stable=True),
        "bincount": lambda lib, a: (
            lib.bincount(a.flatten().abs().long()) if a.dtype == lib.int64 else a
        ),
        "searchsorted": lambda lib, a: lib.searchsorted(lib.tensor([0.0, 1.0, 2.0]), a.double()),
        "bucketize": lambda lib, a: lib.bucketize(a.double(), lib.tensor([0.0, 1.0]), right=True),
        "clamp_tensor_max_only": lambda lib, a: a.clamp(max=lib.zeros(shape[-1:], dtype=a.dtype)),
        "outer_int": lambda lib, a: lib.outer(a.flatten(), a.flatten()[:2]),
        "cross": lambda lib, a: lib.linalg.cross(a, a.flip(d0)) if shape[-1] == 3 else a,
        "diff_n2": lambda lib, a: a.diff(n=2, dim=d0),
        "allclose": lambda lib, a: lib.tensor(lib.allclose(a.double(), a.double() + 1e-9)),
        "equal": lambda lib, a: lib.tensor(lib.equal(a, a.clone())),
        "tolist_roundtrip": lambda lib, a: lib.tensor(a.tolist(), dtype=a.dtype),
        "numel_size": lambda lib, a: lib.tensor([a.numel(), a.size(d0), a.dim()]),
    }
    name = sorted(fns)[int(rng.integers(len(fns)))]
    dtype = rand_dtype(rng)
    return Case(f"more.{name} d0={d0} d1={d1} k={k}", [operand(rng, shape, dtype)], fns[name])


@gen("nn_functional")
def _nn_functional(rng):
    """``nn.functional`` calls on random shapes, dtypes and edge values."""
    n_batch, n_class = int(rng.integers(1, 4)), int(rng.integers(2, 5))
    dtype = rand_dtype(rng, FLOATS)
    special = rng.random() < 0.2
    logits = Operand((n_batch, n_class), dtype, rand_view(rng, (n_batch, n_class)), special=special)
    target = Operand((n_batch,), "int64", values=list(range(n_class)))
    probs = Operand((n_batch, n_class), dtype, positive=True)
    red = str(rng.choice(["mean", "sum", "none"]))
    fns = {
        "cross_entropy": (
            [logits, target],
            lambda lib, x, t: lib.nn.functional.cross_entropy(x, t, reduction=red),
        ),
        "cross_entropy_smooth": (
            [logits, target],
            lambda lib, x, t: lib.nn.functional.cross_entropy(x, t, label_smoothing=0.1),
        ),
        "cross_entropy_ignore": (
            [logits, target],
            lambda lib, x, t: lib.nn.functional.cross_entropy(x, t, ignore_index=0, reduction=red),
        ),
        "cross_entropy_probs": (
            [logits, probs],
            lambda lib, x, p: lib.nn.functional.cross_entropy(x, p / p.sum(-1, keepdim=True)),
        ),
        "nll_loss": (
            [logits, target],
            lambda lib, x, t: lib.nn.functional.nll_loss(x.log_softmax(-1), t, reduction=red),
        ),
        "mse_loss": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.mse_loss(x, y, reduction=red),
        ),
        "l1_loss": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.l1_loss(x, y, reduction=red),
        ),
        "smooth_l1": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.smooth_l1_loss(x, y, beta=0.5),
        ),
        "huber": ([logits, probs], lambda lib, x, y: lib.nn.functional.huber_loss(x, y, delta=0.7)),
        "bce_logits": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.binary_cross_entropy_with_logits(
                x, y / (y + 1), reduction=red
            ),
        ),
        "bce": (
            [probs, probs],
            lambda lib, x, y: lib.nn.functional.binary_cross_entropy(x / (x + 1), y / (y + 1)),
        ),
        "kl_div": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.kl_div(
                x.log_softmax(-1), y / y.sum(-1, keepdim=True), reduction="batchmean"
            ),
        ),
        "normalize": ([logits], lambda lib, x: lib.nn.functional.normalize(x, dim=-1)),
        "cosine_similarity": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.cosine_similarity(x, y, dim=-1),
        ),
        "pairwise_distance": (
            [logits, probs],
            lambda lib, x, y: lib.nn.functional.pairwise_distance(x, y),
        ),
        "one_hot": ([target], lambda lib, t: lib.nn.functional.one_hot(t, n_class)),
        "pad_constant": ([logits], lambda lib, x: lib.nn.functional.pad(x, (1, -1), value=2.0)),
        "pad_reflect": (
            [logits],
            lambda lib, x: lib.nn.functional.pad(x[None], (1, 1), mode="replicate"),
        ),
        "linear_1d": ([logits], lambda lib, x: lib.nn.functional.linear(x[0], x, x[:, 0])),
        "softmax_dtype": (
            [logits],
            lambda lib, x: lib.nn.functional.softmax(x, dim=-1, dtype=lib.float64),
        ),
        "log_softmax_dim0": ([logits], lambda lib, x: lib.nn.functional.log_softmax(x, 0)),
        "layer_norm": ([logits], lambda lib, x: lib.nn.functional.layer_norm(x, (n_class,))),
        "dropout_eval": (
            [logits],
            lambda lib, x: lib.nn.functional.dropout(x, 0.5, training=False),
        ),
        "embedding_pad": (
            [target, probs],
            lambda lib, t, w: lib.nn.functional.embedding(
                t, w.reshape(-1, 1)[:n_class], padding_idx=0
            ),
        ),
        "glu": ([logits], lambda lib, x: lib.nn.functional.glu(x.repeat(1, 2), -1)),
        "softmin": ([logits], lambda lib, x: lib.nn.functional.softmin(x, -1)),
        "gelu_tanh": ([logits], lambda lib, x: lib.nn.functional.gelu(x, approximate="tanh")),
        "prelu": (
            [logits],
            lambda lib, x: lib.nn.functional.prelu(x, lib.full((1,), 0.25, dtype=x.dtype)),
        ),
        "softshrink": ([logits], lambda lib, x: lib.nn.functional.softshrink(x, 0.5)),
        "hardshrink": ([logits], lambda lib, x: lib.nn.functional.hardshrink(x, 0.5)),
        "logsigmoid": ([logits], lambda lib, x: lib.nn.functional.logsigmoid(x)),
        "tanhshrink": ([logits], lambda lib, x: lib.nn.functional.tanhshrink(x)),
    }
    name = sorted(fns)[int(rng.integers(len(fns)))]
    ops, fn = fns[name]
    if name in ("hardshrink", "softshrink"):  # torch's gradient at NaN: loop-place dependent
        for op in ops:
            op.special = False
    return Case(f"F.{name} red={red}", ops, fn, rtol=1e-5 if dtype == "float32" else 1e-8)
