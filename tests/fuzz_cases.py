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
    tracked = [lf for lf in r_leaves if lf.is_require_grad()]
    r_grads = [lf.grad(grads) for lf in tracked]
    for k, (r, t, leaf) in enumerate(zip(r_grads, t_grads, tracked)):
        if t is None:  # torch's graph never reached the leaf (a norm with p=0): zeros
            t = torch.zeros(leaf.shape, dtype=torch.float64)
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


def _leaves_and_loss(lib, case: Case, arrays, seed: int):
    """Float64 leaves, and ``sum(w * out)`` over the float64 outputs (``None`` if none)."""
    torch = _torch()
    leaves, tensors = [], []
    for op, a in zip(case.operands, arrays):
        t = lib.tensor(a)
        if op.dtype == "float64":
            t = t.requires_grad_(True) if lib is torch else t.require_grad()
        leaves.append(t)
        tensors.append(take_view(lib, t, op))
    out = case.fn(lib, *tensors)
    rng = np.random.default_rng(seed)
    loss = None
    for o in _flatten(out):
        if not isinstance(o, (torch.Tensor, rg.Tensor)) or _dtype_name(o.dtype) != "float64":
            continue
        term = (o * lib.tensor(rng.standard_normal(tuple(o.shape)))).sum()
        loss = term if loss is None else loss + term
    return [lf for op, lf in zip(case.operands, leaves) if op.dtype == "float64"], loss


def _second_loss(lib, grads, leaves, seed: int):
    """``sum(v * g)`` over the tracked first-order gradients ``g`` (one ``v`` drawn per leaf,
    tracked or not, so that both libraries weigh each gradient alike)."""
    rng = np.random.default_rng(seed + 1)
    loss = None
    for g, leaf in zip(grads, leaves):
        v = rng.standard_normal(tuple(leaf.shape))
        if g is None or not g.requires_grad:
            continue
        term = (g * lib.tensor(v)).sum()
        loss = term if loss is None else loss + term
    return loss


def compare_second_order(case: Case, arrays, seed: int = 0) -> None:
    """Second derivatives: the gradient of ``sum(v * grad(sum(w * f(x))))``, ``backward(
    create_graph=True)`` (API.md section 3) against ``torch.autograd.grad(create_graph=True)``.

    Where torch's second derivative is NaN it is not compared: torch's backward formulas
    mask their first derivative with ``where`` (sinc at 0, copysign, pow at a zero base or
    exponent, norm at a zero vector), and differentiating through the masked-out branch
    gives 0 * inf. Elsewhere, NaNs included, the two must agree.
    """
    torch = _torch()
    try:
        t_leaves, t_loss = _leaves_and_loss(torch, case, arrays, seed)
    except Exception:
        return
    if t_loss is None or not t_loss.requires_grad or not t_leaves:
        return
    try:
        t_first = torch.autograd.grad(t_loss, t_leaves, create_graph=True, allow_unused=True)
        t_second_loss = _second_loss(torch, t_first, t_leaves, seed)
        if t_second_loss is None:
            return
        t_second = torch.autograd.grad(t_second_loss, t_leaves, allow_unused=True)
    except (RuntimeError, NotImplementedError):
        return
    r_leaves, r_loss = _leaves_and_loss(rg, case, arrays, seed)
    r_second_loss = None
    if r_loss is not None and r_loss.requires_grad:  # (else: overwritten by constants)
        r_grads = r_loss.backward(create_graph=True)
        r_second_loss = _second_loss(rg, [lf.grad(r_grads) for lf in r_leaves], r_leaves, seed)
    want = [
        np.zeros(tuple(lf.shape))
        if g is None
        else torch.zeros(g.shape, dtype=g.dtype).numpy()
        if g._is_zerotensor()
        else g.numpy()
        for g, lf in zip(t_second, t_leaves)
    ]
    if r_second_loss is None:
        got = [np.zeros(w.shape) for w in want]
    else:
        grads = r_second_loss.backward()
        got = [
            np.zeros(w.shape) if lf.grad(grads) is None else lf.grad(grads).numpy()
            for lf, w in zip(r_leaves, want)
        ]
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.broadcast_to(g, w.shape) if g.ndim == 0 else g
        compared = ~np.isnan(w)
        if g.shape != w.shape:
            raise Mismatch(f"second-order gradient {k}: shape {g.shape} != torch's {w.shape}")
        _close(g[compared], w[compared], False, case.rtol or 1e-7, f"second-order gradient {k}")


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
    # the values and indices (API.md section 2's values are also torch's pair)
    "cummax": lambda lib, a, kw: a.cummax(kw.get("dim", 0)),
    "cummin": lambda lib, a, kw: lib.cummin(a, kw.get("dim", 0)),
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


# ---- in-place writes through views, view chains, setitem gradients ----------------------
# (torch refuses in-place writes to the outputs of unbind/split/chunk, which retrograd
# allows: those views are not drawn; as_strided is not part of the API)


def _base_views(shape) -> list[tuple[str, Callable]]:
    """Views of a base of ``shape`` to write through: name and fn(lib, base)."""
    n = len(shape)
    views = [
        ("whole", lambda lib, t: t),
        ("view_same", lambda lib, t: t.view(shape)),
        ("unsqueeze_squeeze", lambda lib, t: t.unsqueeze(0).squeeze(0)),
    ]
    if n >= 1 and shape[0] >= 1:
        half = shape[0] // 2
        views += [
            ("slice1", lambda lib, t: t[1:]),
            ("slice_neg", lambda lib, t: t[-1:]),
            ("select0", lambda lib, t: t[0]),
            ("select_neg", lambda lib, t: t[-1]),
            ("narrow", lambda lib, t: t.narrow(0, half, shape[0] - half)),
            ("step", lambda lib, t: t[::2]),
            ("ellipsis_last", lambda lib, t: t[..., 0] if shape[-1] else t),
        ]
    if n >= 2:
        views += [
            ("t", lambda lib, t: t.transpose(0, 1)),
            ("mT", lambda lib, t: t.mT),
            ("movedim", lambda lib, t: t.movedim(0, -1)),
            ("permute", lambda lib, t: t.permute(*range(n - 1, -1, -1))),
            ("diagonal", lambda lib, t: t.diagonal()),
            ("col_step", lambda lib, t: t[:, 1::2]),
            ("flatten_view", lambda lib, t: t.view(-1)),
            ("unflatten", lambda lib, t: t.flatten().unflatten(0, (shape[0], -1))),
            ("chain", lambda lib, t: t[1:].transpose(0, 1)[::2]),
            ("none_index", lambda lib, t: t[None, :, 1:]),
            ("last_two", lambda lib, t: t[:, -2:]),
        ]
    return views


def _write(name: str, lib, v, o) -> None:
    """In-place op ``name`` on the view ``v`` with the operand ``o``."""
    if name == "iadd":
        v += o
    elif name == "isub":
        v -= o
    elif name == "imul":
        v *= o
    elif name == "idiv":
        v /= o * o + 2.0
    elif name == "set_ellipsis":
        v[...] = o
    else:
        VIEW_WRITES[name](lib, v, o)


VIEW_WRITES = {
    "add_": lambda lib, v, o: v.add_(o),
    "add_alpha": lambda lib, v, o: v.add_(o, alpha=-0.5),
    "sub_": lambda lib, v, o: v.sub_(o),
    "mul_": lambda lib, v, o: v.mul_(o),
    "div_": lambda lib, v, o: v.div_(o * o + 1.0),
    "copy_": lambda lib, v, o: v.copy_(o),
    "fill_": lambda lib, v, o: v.fill_(1.5),
    "zero_": lambda lib, v, o: v.zero_(),
    "clamp_": lambda lib, v, o: v.clamp_(-0.5, 0.7),
    "masked_fill_": lambda lib, v, o: v.masked_fill_(o > 0, -3.0),
    "pow_": lambda lib, v, o: v.pow_(2),
    "exp_": lambda lib, v, o: v.exp_(),
    "tanh_": lambda lib, v, o: v.tanh_(),
    "sigmoid_": lambda lib, v, o: v.sigmoid_(),
    "neg_": lambda lib, v, o: v.neg_(),
    "abs_sqrt_": lambda lib, v, o: v.abs_().sqrt_(),
    "addcmul_": lambda lib, v, o: v.addcmul_(o, o, value=0.5),
    "lerp_": lambda lib, v, o: v.lerp_(o, 0.3),
    "relu_": lambda lib, v, o: v.relu_(),
    "mul_scalar": lambda lib, v, o: v.mul_(-2.0),
    "clamp_min_": lambda lib, v, o: v.clamp_min_(0.1),
    "iadd": None,
    "isub": None,
    "imul": None,
    "idiv": None,
    "set_ellipsis": None,
}


def _view_shape(fn, shape) -> tuple[int, ...]:
    return tuple(fn(_torch(), _torch().zeros(shape)).shape)


@gen("view_write")
def _view_write(rng):
    """A write through a view of a non-leaf, then the base, the view, or both read (the
    gradient flows through the write into the leaf and the operand)."""
    shape = rand_shape(rng, 1, 3)
    views = _base_views(shape)
    vname, vfn = views[int(rng.integers(len(views)))]
    op = sorted(VIEW_WRITES)[int(rng.integers(len(VIEW_WRITES)))]
    pre = str(rng.choice(["mul", "clone", "add"]))
    read = str(rng.choice(["base", "view", "both", "square"]))
    vshape = _view_shape(vfn, shape)
    other = broadcast_partner(rng, vshape) if rng.random() < 0.7 else vshape

    def fn(lib, a, b):
        base = a * 1.0 if pre == "mul" else a.clone() if pre == "clone" else a + 0.5
        v = vfn(lib, base)
        _write(op, lib, v, b)
        if read == "base":
            return base
        if read == "view":
            return v
        if read == "square":
            return (base * base).sum(0) if base.ndim else base * base
        return base, v

    return Case(
        f"view_write {vname}.{op} pre={pre} read={read}",
        [Operand(shape, "float64", special=rng.random() < 0.1), Operand(other, "float64")],
        fn,
    )


@gen("view_write_twice")
def _view_write_twice(rng):
    """Two writes through two views of one base."""
    shape = rand_shape(rng, 2, 3, zero=False)
    views = _base_views(shape)
    (n1, v1), (n2, v2) = (views[int(rng.integers(len(views)))] for _ in range(2))
    op1, op2 = (sorted(VIEW_WRITES)[int(rng.integers(len(VIEW_WRITES)))] for _ in range(2))
    s1, s2 = _view_shape(v1, shape), _view_shape(v2, shape)

    def fn(lib, a, b, c):
        base = a * 2.0
        x, y = v1(lib, base), v2(lib, base)
        _write(op1, lib, x, b)
        _write(op2, lib, y, c)
        return base.sin(), x, y

    return Case(
        f"two views {n1}.{op1} {n2}.{op2}",
        [
            Operand(shape, "float64"),
            Operand(broadcast_partner(rng, s1), "float64"),
            Operand(broadcast_partner(rng, s2), "float64"),
        ],
        fn,
    )


@gen("setitem_grad")
def _setitem_grad(rng):
    """``x[idx] = v`` (and ``+=``, ``*=``, ``index_put_``) with a float64 ``v`` that
    broadcasts into the selection: gradients into both."""
    torch = _torch()
    shape = rand_shape(rng, 1, 3)
    items = _index(rng, shape)
    try:
        selected = tuple(torch.zeros(shape)[_realize(torch, items)].shape)
    except (IndexError, RuntimeError):
        selected = (1,)
    mode = str(rng.choice(["set", "iadd", "imul", "index_put_acc", "index_put"]))
    # (index_put_ does not drop a value's leading ones as setitem does: torch refuses them)
    vshape = broadcast_partner(rng, selected) if rng.random() < 0.6 else selected

    def fn(lib, a, v):
        base = a * 1.0
        idx = _realize(lib, items)
        all_long = idx and all(
            isinstance(i, (torch.Tensor, rg.Tensor)) and _dtype_name(i.dtype) == "int64"
            for i in idx
        )
        if mode == "iadd":
            base[idx] += v
        elif mode == "imul":
            base[idx] *= v
        elif mode.startswith("index_put") and all_long:
            base.index_put_(tuple(idx), v, accumulate=mode == "index_put_acc")
        else:
            base[idx] = v
        return base

    return Case(
        f"setitem_grad {items} {mode} v{vshape}",
        [Operand(shape, "float64"), Operand(vshape, "float64")],
        fn,
    )


@gen("index_put_accumulate")
def _index_put_accumulate(rng):
    """``index_put_`` with repeated (and negative) indices, into the base or a view of it."""
    shape = rand_shape(rng, 1, 3, zero=False)
    n = len(shape)
    k = int(rng.integers(1, n + 1))
    m = int(rng.integers(0, 5))
    kind = str(rng.choice(["long", "long", "mask", "broadcast"]))
    if kind == "mask":  # a bool mask over the first k dims
        idx = [("mask", (rng.random(shape[:k]) < 0.5).tolist())]
        m = int(np.sum(idx[0][1]))
    elif kind == "broadcast" and k >= 2:  # index tensors of shapes (m, 1) and (m,)
        idx = [rng.integers(-shape[d], shape[d], m).tolist() for d in range(k)]
        idx[0] = [[i] for i in idx[0]]
    else:
        idx = [rng.integers(-shape[d], shape[d], m).tolist() for d in range(k)]
    picked = (m, m) if isinstance(idx[0], list) and idx[0] and isinstance(idx[0][0], list) else (m,)
    vshape = picked + shape[k:]
    if rng.random() < 0.4:
        vshape = vshape[1:]
    elif rng.random() < 0.2:
        vshape = (1,) + vshape  # torch refuses it: leading ones are not dropped
    acc = bool(rng.random() < 0.7)
    dt = rand_dtype(rng, ["float64", "float64", "float32", "int64"])
    vdt = dt if rng.random() < 0.8 else rand_dtype(rng, ["float64", "float32", "int64"])
    through_view = bool(rng.random() < 0.4 and n >= 2)

    def fn(lib, a, v):
        base = a * 1
        target = base.transpose(0, 1).transpose(0, 1) if through_view else base
        index = tuple(
            lib.tensor(i[1], dtype=lib.bool)
            if isinstance(i, tuple)
            else lib.tensor(i, dtype=lib.int64)
            for i in idx
        )
        target.index_put_(index, v, accumulate=acc)
        return base

    return Case(
        f"index_put_ acc={acc} idx={idx} view={through_view}",
        [Operand(shape, dt), Operand(vshape, vdt)],
        fn,
    )


def _chain_steps(rng, shape) -> tuple[list[str], list[Callable]]:
    torch = _torch()
    t = torch.zeros(shape)
    names, steps = [], []
    for _ in range(int(rng.integers(1, 5))):
        n = t.ndim
        if n == 0:
            choices = [
                ("unsqueeze", lambda lib, x: x.unsqueeze(0)),
                ("expand", lambda lib, x: x.expand(3)),
                ("unfold0", lambda lib, x: x.unfold(0, 1, 1)),
            ]
        else:
            d = rand_dim(rng, n)
            size = t.shape[d]
            st = 1 + int(rng.integers(0, 2))
            w = min(int(rng.integers(0, 3)), size)
            choices = [
                (f"unfold({d},{w},{st})", lambda lib, x, d=d, w=w, st=st: x.unfold(d, w, st)),
                (f"narrow{d}", lambda lib, x, d=d, s=size: x.narrow(d, s // 3, s - s // 3)),
                (f"movedim{d}", lambda lib, x, d=d: x.movedim(d, 0)),
                (f"flip{d}", lambda lib, x, d=d: x.flip(d)),
                (f"unflatten{d}", lambda lib, x, d=d, s=size: x.unflatten(d, (1, s))),
                (f"select{d}", lambda lib, x, d=d, s=size: x.select(d, -1) if s else x),
                ("contiguous", lambda lib, x: x.contiguous()),
                (
                    "expand_contiguous",
                    lambda lib, x: x.unsqueeze(0).expand(2, *x.shape).contiguous(),
                ),
                (
                    "expand_reshape",
                    lambda lib, x: x.unsqueeze(1).expand(x.shape[0], 2, *x.shape[1:]).reshape(-1),
                ),
                ("step2", lambda lib, x: x[..., ::2]),
                ("step3", lambda lib, x: x[..., 1::3]),
                ("scaled_T", lambda lib, x: (x * 2).transpose(0, -1)),
                ("squeeze", lambda lib, x: x.squeeze()),
                ("diagonal", lambda lib, x: x.diagonal(0, 0, -1) if x.ndim >= 2 else x),
                ("diagonal_off", lambda lib, x: x.diagonal(-1, -1, 0) if x.ndim >= 2 else x),
                ("tril", lambda lib, x: x.tril() if x.ndim >= 2 else x),
                ("sum_expand", lambda lib, x: x.sum(0, keepdim=True).expand_as(x)),
                ("swapaxes", lambda lib, x: x.swapaxes(0, -1)),
                ("reshape_view", lambda lib, x: x.reshape(-1).view(x.shape)),
            ]
        name, step = choices[int(rng.integers(len(choices)))]
        try:
            t = step(torch, t)
        except RuntimeError:
            break
        names.append(name)
        steps.append(step)
    return names, steps


@gen("view_chain")
def _view_chain(rng):
    """A chain of views (unfold with windows of 0, narrow, movedim, unflatten, expand then
    contiguous, diagonal...): values and gradients."""
    shape = rand_shape(rng, 1, 4, zero=rng.random() < 0.2)
    names, steps = _chain_steps(rng, shape)

    def fn(lib, a):
        for step in steps:
            a = step(lib, a)
        return a

    dtype = rand_dtype(rng, ["float64", "float64", "float32", "int64", "bool"])
    return Case("chain " + " ".join(names), [Operand(shape, dtype)], fn)


# ---- norms, corrections, ties, special values, integer arithmetic -----------------------


@gen("norms")
def _norms(rng):
    """``norm(p)`` and ``linalg.vector_norm(ord)`` with p = 0, +-inf, fractional, negative,
    over dim tuples (0-d inputs too), with zeros and ties."""
    shape = rand_shape(rng, 0, 3)
    p = [0, 1, 2, 3, 0.5, math.inf, -math.inf, -1, 1.5][int(rng.integers(9))]
    kw = _kw(_dims(rng, len(shape)), bool(rng.random() < 0.5))
    op = operand(rng, shape, rand_dtype(rng, ["float64", "float64", "float32"]))
    # (a NaN norm of order < 1: torch's gradient at the zero entries is NaN, retrograd's 0)
    op.special = rng.random() < 0.2 and 1 <= p < math.inf
    if rng.random() < 0.3:
        op.values = [0.0, 1.0, -1.0, 2.0]
    if rng.random() < 0.5:
        return Case(f"norm p={p} {kw}", [op], lambda lib, a: a.norm(p=p, **kw))
    return Case(
        f"vector_norm ord={p} {kw}", [op], lambda lib, a: lib.linalg.vector_norm(a, ord=p, **kw)
    )


@gen("matrix_norms")
def _matrix_norms(rng):
    shape = rand_shape(rng, 2, 3, zero=rng.random() < 0.2)
    p = ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf][int(rng.integers(8))]
    keep = bool(rng.random() < 0.5)
    op = operand(rng, shape, rand_dtype(rng, ["float64", "float64", "float32"]))
    if rng.random() < 0.5:
        p = p if p in ("fro", "nuc") else "fro"
        return Case(
            f"norm {p} keep={keep}",
            [op],
            lambda lib, a: lib.norm(a, p=p, dim=(-2, -1), keepdim=keep),
        )
    return Case(
        f"matrix_norm {p} keep={keep}",
        [op],
        lambda lib, a: lib.linalg.matrix_norm(a, ord=p, keepdim=keep),
    )


@gen("var_correction")
def _var_correction(rng):
    """var/std (and their _mean forms) with corrections 0, 0.5, 1, 2, 3 over dim tuples.
    (Where the correction reaches the count, torch's gradient differs between its full and
    its dim reductions: not drawn.)"""
    shape = rand_shape(rng, 1, 3, zero=False)
    dim = _dims(rng, len(shape))
    kw = _kw(dim, bool(rng.random() < 0.5))
    dims = range(len(shape)) if dim is None else (dim,) if isinstance(dim, int) else dim
    count = int(np.prod([shape[d] for d in dims]))
    corrections = [c for c in (0, 0.5, 1, 2, 3) if c < count]
    c = corrections[int(rng.integers(len(corrections)))]
    which = str(rng.choice(["var", "std", "var_mean", "std_mean"]))
    op = operand(rng, shape, rand_dtype(rng, ["float64", "float64", "float32"]))
    if op.view == "expand":  # (torch's std of a constant: noise of 1e-16, see _NO_EXPAND)
        op.view = "plain"

    def fn(lib, a):
        if which in ("var", "std"):
            return getattr(a, which)(correction=c, **kw)
        return getattr(lib, which)(a, correction=c, **kw)

    return Case(f"{which} correction={c} {kw}", [op], fn)


@gen("cumulative")
def _cumulative(rng):
    shape = rand_shape(rng, 0, 3)
    d = rand_dim(rng, len(shape))
    which = str(rng.choice(["cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"]))
    pool = ["float64", "float64", "float32"] + (["int64", "bool"] if which[3] in "sp" else [])
    op = operand(rng, shape, rand_dtype(rng, pool))
    if which == "cumprod" and op.dtype.startswith("float") and rng.random() < 0.5:
        op.values = [0.0, 0.0, 1.0, 2.0, -1.5, 0.5]

    def fn(lib, a):
        return getattr(a, which)(d)

    return Case(f"{which}({d})", [op], fn)


TIE_OPS = {
    "max": lambda lib, a, dim, keep: a.max() if dim is None else a.max(dim, keepdim=keep)[0],
    "min": lambda lib, a, dim, keep: a.min() if dim is None else a.min(dim, keepdim=keep)[0],
    "amax": lambda lib, a, dim, keep: a.amax() if dim is None else a.amax(dim, keepdim=keep),
    "amin_empty_dims": lambda lib, a, dim, keep: a.amin(dim=() if dim is None else dim),
    "max_binary": lambda lib, a, dim, keep: lib.max(a, a.flip(0) if a.ndim else a),
    "maximum": lambda lib, a, dim, keep: (lib.maximum(a, lib.ones_like(a)), lib.fmax(a, a)),
    "logsumexp": lambda lib, a, dim, keep: lib.logsumexp(a, dim=0 if dim is None else dim),
    "clamp": lambda lib, a, dim, keep: (a.clamp(min=1.0, max=1.0) * 1.0, a.clamp(0.0, 1.0)),
    "where": lambda lib, a, dim, keep: lib.where(a >= 1.0, a, a * 2),
    "sort": lambda lib, a, dim, keep: a.sort(dim=-1 if dim is None else dim, stable=True)[0],
    "any_all_no_dims": lambda lib, a, dim, keep: (a.any(dim=()), (a > 0).all(dim=[], keepdim=keep)),
}


@gen("ties")
def _ties(rng):
    """Reductions and selections over tied values (the gradient split between the ties,
    as torch splits it), infinities among them."""
    shape = rand_shape(rng, 0, 3)
    dim = None if rng.random() < 0.3 else rand_dim(rng, len(shape))
    name = sorted(TIE_OPS)[int(rng.integers(len(TIE_OPS)))]
    keep = bool(rng.random() < 0.5)
    op = operand(rng, shape, rand_dtype(rng, ["float64", "float64", "float32"]))
    op.values = [1.0, 1.0, 2.0, -1.0, 0.0] + ([math.inf, -math.inf] if rng.random() < 0.3 else [])
    fn = TIE_OPS[name]
    return Case(f"ties {name} dim={dim} keep={keep}", [op], lambda lib, a: fn(lib, a, dim, keep))


@gen("prod_zeros")
def _prod_zeros(rng):
    shape = rand_shape(rng, 0, 3)
    dim = None if rng.random() < 0.3 else rand_dim(rng, len(shape))
    keep = bool(rng.random() < 0.5)
    op = operand(rng, shape, rand_dtype(rng, ["float64", "float64", "float32", "int64"]))
    op.values = (
        [0, 1, 2, -3]
        if op.dtype == "int64"
        else [0.0, 0.0, 1.0, 2.0, -1.5, 0.5, 3.0]
        if rng.random() < 0.8
        else [0.0, math.inf, math.nan, 1.0]
    )
    return Case(
        f"prod dim={dim} keep={keep}",
        [op],
        lambda lib, a: a.prod() if dim is None else a.prod(dim, keepdim=keep),
    )


BOUNDARY_VALUES = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e-300, -1e-300, 1e308,
                   0.5, -0.5, 2.0, -2.0, 1e-8]  # fmt: skip
BOUNDARY_OPS = {
    "log1p": lambda lib, a, b: a.log1p(),
    "atan2": lambda lib, a, b: lib.atan2(a, b),
    "pow": lambda lib, a, b: a**b,
    "pow_half": lambda lib, a, b: a**0.5,
    "pow_1.5": lambda lib, a, b: a**1.5,
    "pow_neg_1.5": lambda lib, a, b: a**-1.5,
    "pow_0": lambda lib, a, b: a**0,
    "pow_0.0": lambda lib, a, b: a**0.0,
    "pow_3": lambda lib, a, b: a**3,
    "rpow_0": lambda lib, a, b: 0.0**a,
    "rpow_neg": lambda lib, a, b: (-2.0) ** a,
    "sqrt": lambda lib, a, b: a.sqrt(),
    "rsqrt": lambda lib, a, b: a.rsqrt(),
    "log": lambda lib, a, b: a.log(),
    "hypot": lambda lib, a, b: lib.hypot(a, b),
    "div": lambda lib, a, b: a / b,
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "floordiv": lambda lib, a, b: a // b,
    "trunc_div": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "tanh": lambda lib, a, b: a.tanh(),
    "sigmoid": lambda lib, a, b: a.sigmoid(),
    "softplus": lambda lib, a, b: lib.nn.functional.softplus(a),
    "softplus_beta": lambda lib, a, b: lib.nn.functional.softplus(a, beta=2.0, threshold=5.0),
    "logsigmoid": lambda lib, a, b: lib.nn.functional.logsigmoid(a),
    "silu": lambda lib, a, b: lib.nn.functional.silu(a),
    "gelu_tanh": lambda lib, a, b: lib.nn.functional.gelu(a, approximate="tanh"),
    "elu": lambda lib, a, b: lib.nn.functional.elu(a, alpha=0.5),
    "celu": lambda lib, a, b: lib.nn.functional.celu(a, alpha=2.0),
    "mish": lambda lib, a, b: lib.nn.functional.mish(a),
    "erfinv": lambda lib, a, b: a.erfinv(),
    "acos": lambda lib, a, b: a.acos(),
    "asin": lambda lib, a, b: a.asin(),
    "acosh": lambda lib, a, b: a.acosh(),
    "atanh": lambda lib, a, b: a.atanh(),
    "asinh": lambda lib, a, b: a.asinh(),
    "cosh": lambda lib, a, b: a.cosh(),
    "expm1": lambda lib, a, b: a.expm1(),
    "exp2": lambda lib, a, b: a.exp2(),
    "lgamma": lambda lib, a, b: a.lgamma(),
    "sinc": lambda lib, a, b: a.sinc(),
    "logaddexp": lambda lib, a, b: lib.logaddexp(a, b),
    "logaddexp2": lambda lib, a, b: lib.logaddexp2(a, b),
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "clamp_tensor": lambda lib, a, b: a.clamp(min=b),
    "abs": lambda lib, a, b: a.abs(),
    "sgn": lambda lib, a, b: a.sgn(),
    "log_softmax": lambda lib, a, b: a.log_softmax(-1) if a.ndim else a.log_softmax(0),
    "softmax": lambda lib, a, b: a.softmax(-1) if a.ndim else a.softmax(0),
    "nan_to_num": lambda lib, a, b: lib.nan_to_num(a),
    "square": lambda lib, a, b: a.square(),
    "reciprocal": lambda lib, a, b: a.reciprocal(),
    "log2": lambda lib, a, b: a.log2(),
    "erfcx": lambda lib, a, b: lib.special.erfcx(a),
    "log_ndtr": lambda lib, a, b: lib.special.log_ndtr(a),
    "ndtri": lambda lib, a, b: lib.special.ndtri(a),
    "xlog1py": lambda lib, a, b: lib.special.xlog1py(a, b),
    "entr": lambda lib, a, b: lib.special.entr(a),
}


@gen("boundary_values")
def _boundary_values(rng):
    """Ops at their boundaries: log1p(-1), atan2(0, 0), 0 ** 0, negative ** fractional,
    sqrt(0), erfinv(+-1), infinities, denormals, -0.0. (Left out: digamma's poles, where
    torch's trigamma is a finite garbage value; xlogy at y = 0, retrograd's 0 for torch's
    0 / 0; norms of infinities, inf / inf in torch's gradient; copysign and lerp's gradients
    at infinities, see BINARY.)"""
    shape = rand_shape(rng, 0, 2)
    name = sorted(BOUNDARY_OPS)[int(rng.integers(len(BOUNDARY_OPS)))]
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    other_dt = rand_dtype(rng, ["float64", "float32", "int64"]) if rng.random() < 0.3 else dt
    other = Operand(shape, other_dt, values=BOUNDARY_VALUES if rng.random() < 0.8 else [0.0, 1.0])
    if other_dt == "int64":
        other.values = [0, 1, -1, 2, -2]
    return Case(
        f"boundary {name}", [Operand(shape, dt, values=BOUNDARY_VALUES), other], BOUNDARY_OPS[name]
    )


INT_SCALAR_OPS = {
    "floordiv": lambda a, s: a // s,
    "rfloordiv": lambda a, s: s // a,
    "mod": lambda a, s: a % s,
    "rmod": lambda a, s: s % a,
    "div": lambda a, s: a / s,
    "rdiv": lambda a, s: s / a,
    "pow": lambda a, s: a**s,
    "rpow": lambda a, s: s**a,
    "sub": lambda a, s: a - s,
    "rsub": lambda a, s: s - a,
    "mul": lambda a, s: a * s,
    "eq": lambda a, s: a == s,
    "ge": lambda a, s: a >= s,
    "and": lambda a, s: a & s,
    "or": lambda a, s: a | s,
    "xor": lambda a, s: a ^ s,
    "lshift": lambda a, s: a << s,
    "rshift": lambda a, s: a >> s,
    "radd": lambda a, s: s + a,
    "clamp_min": lambda a, s: a.clamp(min=s),
    "fmod": lambda a, s: a.fmod(s),
}
IN_PLACE_SCALAR_OPS = ("+=", "-=", "*=", "/=", "//=", "%=")


@gen("int_scalar")
def _int_scalar(rng):
    """Integer and bool tensors (and float ones) against Python ints, floats and bools:
    the result dtype, signs of floor division and remainder, in-place refusals."""
    shape = rand_shape(rng, 0, 2)
    scalar = [0, 1, -1, 2, -3, 0.5, -2.5, True, False, 7, -7, 3.0, -0.0][int(rng.integers(13))]
    names = sorted(INT_SCALAR_OPS) + list(IN_PLACE_SCALAR_OPS)
    name = names[int(rng.integers(len(names)))]
    if name.endswith("shift") and not isinstance(scalar, bool):
        scalar = abs(int(scalar))  # (a negative shift: C's undefined behaviour in torch)
    dt = rand_dtype(rng, ["int64", "int64", "bool", "float32", "float64"])
    op = Operand(shape, dt, values=[-7, -3, -1, 0, 1, 2, 3, 5] if dt == "int64" else None)

    def fn(lib, a):
        if name not in IN_PLACE_SCALAR_OPS:
            return INT_SCALAR_OPS[name](a, scalar)
        b = a.clone()
        if name == "+=":
            b += scalar
        elif name == "-=":
            b -= scalar
        elif name == "*=":
            b *= scalar
        elif name == "/=":
            b /= scalar
        elif name == "//=":
            b //= scalar
        else:
            b %= scalar
        return b

    return Case(f"int_scalar {name} {scalar!r}", [op], fn)


INT_BINARY_OPS = {
    "floordiv": lambda lib, a, b: a // b,
    "mod": lambda lib, a, b: a % b,
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "div_trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "div": lambda lib, a, b: a / b,
    "pow": lambda lib, a, b: a ** b.abs(),
    "lshift": lambda lib, a, b: a << b.abs(),
    "rshift": lambda lib, a, b: a >> b.abs(),
    "gcd": lambda lib, a, b: lib.gcd(a, b),
    "lcm": lambda lib, a, b: lib.lcm(a, b),
    "true_divide": lambda lib, a, b: lib.true_divide(a, b),
    "floor_divide": lambda lib, a, b: lib.floor_divide(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
}


@gen("int_binary")
def _int_binary(rng):
    shape = rand_shape(rng, 0, 2)
    other = broadcast_partner(rng, shape)
    name = sorted(INT_BINARY_OPS)[int(rng.integers(len(INT_BINARY_OPS)))]
    da = rand_dtype(rng, ["int64", "int64", "bool", "float64"])
    db = rand_dtype(rng, ["int64", "int64", "float32", "float64"])
    ints = [-7, -3, -2, -1, 1, 2, 3, 5, 7]
    return Case(
        f"int_binary {name}",
        [
            Operand(shape, da, values=ints if da == "int64" else None),
            Operand(other, db, values=ints if db == "int64" else [-2.5, -1.0, 1.0, 2.0, 3.5, -0.5]),
        ],
        INT_BINARY_OPS[name],
    )


# ---- nn.functional with unusual arguments -----------------------------------------------


def _nnf(lib):
    return lib.nn.functional


@gen("nnf_interpolate")
def _nnf_interpolate(rng):
    """Every mode, size or scale_factor (a number or a tuple), align_corners,
    recompute_scale_factor; axes whose size does not change."""
    nd = int(rng.integers(1, 3))
    mode = str(rng.choice(["nearest", "nearest-exact", "linear", "bilinear", "bicubic", "area"]))
    nd = 1 if mode == "linear" else 2 if mode in ("bilinear", "bicubic") else nd
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) + tuple(
        int(rng.integers(1, 6)) for _ in range(nd)
    )
    kw: dict = {}
    if rng.random() < 0.5:
        kw["size"] = (
            tuple(int(rng.integers(1, 8)) for _ in range(nd))
            if rng.random() < 0.7
            else int(rng.integers(1, 8))
        )
    else:
        sf = [0.5, 1.5, 2.0, 2.5, 3.0, 0.7, 1.0, 1.3][int(rng.integers(8))]
        if mode == "area":  # (an empty result: torch's area mode gives it, retrograd refuses)
            sf = max(sf, 1.0)
        kw["scale_factor"] = sf if rng.random() < 0.6 else (sf,) * nd
        if rng.random() < 0.4:
            kw["recompute_scale_factor"] = bool(rng.random() < 0.5)
    if mode in ("linear", "bilinear", "bicubic") and rng.random() < 0.6:
        kw["align_corners"] = bool(rng.random() < 0.5)
    return Case(
        f"interpolate {mode} {shape} {kw}",
        [Operand(shape, rand_dtype(rng, ["float64", "float64", "float32"]))],
        lambda lib, x: _nnf(lib).interpolate(x, mode=mode, **kw),
    )


@gen("nnf_pad")
def _nnf_pad(rng):
    """constant (negative amounts: crops), reflect, replicate (a crop on one side, a pad on
    the other) and circular padding of 1 to 3 dimensions. (torch's circular padding with a
    negative amount reads uninitialized memory, or corrupts its heap, and its reflect padding
    with one has a gradient of uninitialized memory: not drawn.)"""
    mode = str(rng.choice(["constant", "reflect", "replicate", "circular"]))
    nd = int(rng.integers(1, 4)) if mode != "constant" else int(rng.integers(1, 3))
    spatial = tuple(int(rng.integers(1, 5)) for _ in range(nd))
    batch = (int(rng.integers(1, 3)),) * int(rng.integers(1, 3))
    pad: list[int] = []
    for s in reversed(spatial):
        high = s - 1 if mode == "reflect" else s if mode == "circular" else 3
        # (replicate: never an empty result, where torch's kernels disagree among themselves)
        low = -1 if mode == "constant" or (mode == "replicate" and s >= 3) else 0
        pad += [int(rng.integers(low, high + 1)) for _ in range(2)]
    k = int(rng.integers(1, nd + 1)) if mode == "constant" else nd
    amounts = tuple(pad[: 2 * k])
    kw = {"value": 1.5} if mode == "constant" and rng.random() < 0.5 else {}
    return Case(
        f"pad {mode} {batch + spatial} {amounts}",
        [Operand(batch + spatial, rand_dtype(rng, ["float64", "float64", "float32"]))],
        lambda lib, x: _nnf(lib).pad(x, amounts, mode=mode, **kw),
    )


@gen("nnf_conv")
def _nnf_conv(rng):
    """conv and conv_transpose, 1-d and 2-d: groups, dilation, padding='same'/'valid'/
    tuples, stride larger than the kernel, output_padding."""
    nd = int(rng.integers(1, 3))
    groups = int(rng.choice([1, 1, 2, 3]))
    cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    k = tuple(int(rng.integers(1, 4)) for _ in range(nd))
    spatial = tuple(int(rng.integers(1, 7)) for _ in range(nd))
    stride, dil = int(rng.integers(1, 5)), int(rng.integers(1, 3))
    pad = rng.choice(["same", "valid", 0, 1, 2, "tuple"])
    pad = (
        tuple(int(rng.integers(0, 3)) for _ in range(nd))
        if pad == "tuple"
        else str(pad)
        if pad in ("same", "valid")
        else int(pad)
    )
    if pad == "same":
        stride = 1
    bias = bool(rng.random() < 0.5)
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    x_shape = (int(rng.integers(1, 3)), cin) + spatial
    if rng.random() < 0.3:
        pad = 0 if isinstance(pad, str) else pad
        opad = int(rng.integers(0, max(stride, dil)))
        # (an empty output: torch's float32 kernel returns it, its float64 one refuses it, as
        # retrograd does: drawn in float64 only)
        pads = (pad,) * nd if isinstance(pad, int) else pad
        sizes = [
            (n - 1) * stride - 2 * q + dil * (kk - 1) + opad + 1
            for n, kk, q in zip(spatial, k, pads)
        ]
        if min(sizes) < 1:
            dt = "float64"
        w_shape = (cin, cout // groups) + k

        def fn(lib, x, w, b):
            return getattr(_nnf(lib), f"conv_transpose{nd}d")(
                x, w, b if bias else None, stride=stride, padding=pad, output_padding=opad,
                groups=groups, dilation=dil,
            )  # fmt: skip

        name = f"conv_transpose{nd}d s={stride} p={pad} op={opad} d={dil} g={groups}"
    else:
        w_shape = (cout, cin // groups) + k

        def fn(lib, x, w, b):
            return getattr(_nnf(lib), f"conv{nd}d")(
                x, w, b if bias else None, stride=stride, padding=pad, dilation=dil, groups=groups
            )

        name = f"conv{nd}d s={stride} p={pad} d={dil} g={groups}"
    return Case(
        f"{name} x{x_shape} w{w_shape}",
        [Operand(x_shape, dt), Operand(w_shape, dt), Operand((cout,), dt)],
        fn,
        rtol=1e-4 if dt == "float32" else None,
    )


@gen("nnf_pool")
def _nnf_pool(rng):
    """max/avg/lp/adaptive pooling: ceil_mode, count_include_pad, divisor_override,
    dilation, return_indices, ties in a window. (torch's max pooling with a window wholly in
    the padding, dilation > 1 with padding, corrupts its heap in backward: not drawn.)"""
    nd = int(rng.integers(1, 3))
    which = str(rng.choice(["max", "avg", "adaptive_avg", "adaptive_max", "lp", "max_indices"]))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) + tuple(
        int(rng.integers(1, 8)) for _ in range(nd)
    )
    k, s = int(rng.integers(1, 4)), [None, 1, 2, 3][int(rng.integers(4))]
    p, ceil = int(rng.integers(0, k // 2 + 1)), bool(rng.random() < 0.5)
    dil = int(rng.integers(1, 3))
    if dil > 1:
        p = 0
    op = Operand(shape, rand_dtype(rng, ["float64", "float64", "float32"]))
    f = _nnf
    if which in ("max", "max_indices"):
        if rng.random() < 0.3:
            op.values = [1.0, 2.0, -1.0, 0.5, 3.0]
        ret = which == "max_indices"
        return Case(
            f"max_pool{nd}d k={k} s={s} p={p} d={dil} ceil={ceil} {shape}",
            [op],
            lambda lib, x: getattr(f(lib), f"max_pool{nd}d")(
                x, k, s, p, dil, ceil_mode=ceil, return_indices=ret
            ),
        )
    if which == "avg":
        kw = {"ceil_mode": ceil, "count_include_pad": bool(rng.random() < 0.5)}
        divisor = [None, None, 2, 5][int(rng.integers(4))]
        if nd == 2 and divisor:
            kw["divisor_override"] = divisor
        return Case(
            f"avg_pool{nd}d k={k} s={s} p={p} {kw} {shape}",
            [op],
            lambda lib, x: getattr(f(lib), f"avg_pool{nd}d")(x, k, s, p, **kw),
        )
    if which == "lp":
        norm = [1.0, 2.0, 3.0][int(rng.integers(3))]
        op.values = [0.5, 1.0, 2.0, 1.5, 0.25]
        return Case(
            f"lp_pool{nd}d p={norm} k={k} s={s} ceil={ceil} {shape}",
            [op],
            lambda lib, x: getattr(f(lib), f"lp_pool{nd}d")(x, norm, k, s, ceil_mode=ceil),
        )
    out = tuple(int(rng.integers(1, 6)) for _ in range(nd))
    if rng.random() < 0.3:
        out = out[0] if nd == 1 else (out[0], None)
    return Case(
        f"{which}_pool{nd}d out={out} {shape}",
        [op],
        lambda lib, x: getattr(f(lib), f"{which}_pool{nd}d")(x, out),
    )


@gen("nnf_fold")
def _nnf_fold(rng):
    """F.unfold and F.fold (and fold of unfold) with kernel, dilation, padding, stride."""
    k, d, p, s = (
        tuple(int(rng.integers(lo, hi)) for _ in range(2))
        for lo, hi in ((1, 4), (1, 3), (0, 2), (1, 4))
    )
    height, width = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    channels, batch = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    which = str(rng.choice(["unfold", "fold", "roundtrip"]))
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    kw = {"dilation": d, "padding": p, "stride": s}
    if which != "fold":

        def fn(lib, x):
            cols = _nnf(lib).unfold(x, k, **kw)
            return _nnf(lib).fold(cols, (height, width), k, **kw) if which == "roundtrip" else cols

        return Case(f"{which} k={k} {kw}", [Operand((batch, channels, height, width), dt)], fn)
    blocks = 1
    for i, n in enumerate((height, width)):
        blocks *= max((n + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1, 0)
    return Case(
        f"fold k={k} {kw} out={(height, width)}",
        [Operand((batch, channels * k[0] * k[1], blocks), dt)],
        lambda lib, x: _nnf(lib).fold(x, (height, width), k, **kw),
    )


NNF_MISC = {
    "group_norm": lambda f, lib, x: f.group_norm(x, 1),
    "instance_norm": lambda f, lib, x: f.instance_norm(x),
    "local_response_norm": lambda f, lib, x: f.local_response_norm(x, 2),
    "layer_norm_weight": lambda f, lib, x: f.layer_norm(
        x, x.shape[-1:], lib.ones(x.shape[-1], dtype=x.dtype) * 2, None, 1e-3
    ),
    "rms_norm": lambda f, lib, x: f.rms_norm(x, x.shape[-1:]),
    "hardtanh": lambda f, lib, x: f.hardtanh(x, -0.5, 0.5),
    "rrelu_eval": lambda f, lib, x: f.rrelu(x, training=False),
    "softplus_neg_beta": lambda f, lib, x: f.softplus(x, beta=-1.0),
    "threshold": lambda f, lib, x: f.threshold(x, 0.0, 0.0),
    "cosine_similarity": lambda f, lib, x: f.cosine_similarity(x, x.flip(-1), dim=1, eps=1e-3),
    "pdist": lambda f, lib, x: f.pdist(x[0]),
    "triplet_margin": lambda f, lib, x: f.triplet_margin_loss(x[:, 0], x[:, 1], x.sum(1)),
    "soft_margin": lambda f, lib, x: f.soft_margin_loss(x, x.sign().detach()),
    "poisson_nll": lambda f, lib, x: f.poisson_nll_loss(x, x.abs()),
    "gaussian_nll": lambda f, lib, x: f.gaussian_nll_loss(x, x.flip(0), x.abs() + 0.1),
    "hinge_embedding": lambda f, lib, x: f.hinge_embedding_loss(x, x.sign().detach()),
    "nll_2d": lambda f, lib, x: f.nll_loss(
        x.log_softmax(1), lib.zeros((x.shape[0], x.shape[2]), dtype=lib.int64)
    ),
    "cross_entropy_2d": lambda f, lib, x: f.cross_entropy(
        x, lib.ones((x.shape[0], x.shape[2]), dtype=lib.int64), label_smoothing=0.2
    ),
    "cross_entropy_weight": lambda f, lib, x: f.cross_entropy(
        x[..., 0],
        lib.zeros(x.shape[0], dtype=lib.int64),
        weight=lib.arange(x.shape[1], dtype=x.dtype) + 1,
    ),
    "sdpa_causal": lambda f, lib, x: f.scaled_dot_product_attention(x, x, x, is_causal=True),
    "sdpa_mask": lambda f, lib, x: f.scaled_dot_product_attention(
        x, x * 2, x, attn_mask=lib.ones(x.shape[1], x.shape[1], dtype=lib.bool).tril()
    ),
    "normalize_p1": lambda f, lib, x: f.normalize(x, p=1.0, dim=1),
    "normalize_inf": lambda f, lib, x: f.normalize(x, p=math.inf, dim=-1),
    "bilinear": lambda f, lib, x: f.bilinear(
        x, x, lib.ones(2, x.shape[-1], x.shape[-1], dtype=x.dtype)
    ),
    "smooth_l1_beta0": lambda f, lib, x: f.smooth_l1_loss(x, x.flip(0), beta=0.0),
    "huber_none": lambda f, lib, x: f.huber_loss(x, x.flip(-1), reduction="none", delta=0.5),
    "kl_log_target": lambda f, lib, x: f.kl_div(
        x.log_softmax(1), x.flip(0).log_softmax(1), reduction="batchmean", log_target=True
    ),
    "bce_logits_pos_weight": lambda f, lib, x: f.binary_cross_entropy_with_logits(
        x, x.sigmoid().flip(0), pos_weight=lib.ones(x.shape[-1], dtype=x.dtype) * 2
    ),
    "bce": lambda f, lib, x: f.binary_cross_entropy(x.sigmoid(), x.flip(0).sigmoid()),
    "multi_margin": lambda f, lib, x: f.multi_margin_loss(
        x[..., 0], lib.zeros(x.shape[0], dtype=lib.int64)
    ),
    "elu": lambda f, lib, x: f.elu(x.round(), 0.7),
    "selu": lambda f, lib, x: f.selu(x.round()),
    "celu": lambda f, lib, x: f.celu(x.round(), 1.5),
}


@gen("nnf_misc")
def _nnf_misc(rng):
    """Normalizations, losses and attention on [N, C, L] inputs (rounded ones put exact
    zeros into the elu family)."""
    shape = (int(rng.integers(1, 3)), int(rng.integers(2, 5)), int(rng.integers(1, 4)))
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    name = sorted(NNF_MISC)[int(rng.integers(len(NNF_MISC)))]
    fn = NNF_MISC[name]
    return Case(
        f"nnf.{name} {shape}",
        [Operand(shape, dt)],
        lambda lib, x: fn(_nnf(lib), lib, x),
        rtol=1e-4 if dt == "float32" else 1e-8,
    )
