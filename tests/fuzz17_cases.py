"""Round 17 of the differential fuzzer against PyTorch: what rounds 1-16 draw little from. Each
generator takes a ``numpy`` generator and returns a :class:`fuzz12_cases.Trial` written once
against a namespace ``lib`` (``torch`` or ``retrograd``); :func:`check` runs it on both and
raises :class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or
value.

- ``inplace``: programs of 2-6 in-place ops (``add_``/``mul_``/``clamp_`` with tensor
  bounds/``masked_fill_``/``index_add_``/``copy_``/``scatter_``/``index_fill_``/item and mask
  writes, unary ``*_``) through views of views (slices, selects, transposes, diagonals,
  narrows, flattening) of a non-leaf, of a buffer outside the graph, or of a leaf under
  ``no_grad``, with reads between them (some of which save the value a later write changes:
  torch's "modified by an inplace operation", which retrograd never raises, API.md section
  10); values, gradients and second derivatives. Every draw also runs under
  ``BalancedCheckpointing`` and two ``BudgetCheckpointing`` budgets, whose results must be
  bit-identical to ``NoCheckpointing``'s;
- ``promotion``: binary ops, comparisons, ``where``, ``clamp`` with tensor bounds, the
  division modes, ``remainder``/``fmod``, integer ``pow``, the bitwise and shift ops across
  int64/bool/float16/bfloat16/float32/float64 tensors, 0-d tensors and Python scalars, in
  both operand orders: result dtypes, values (integer division by zero and negative integer
  powers must raise) and gradients. Half precision draws run on the torch inner backend; on
  NumPy each must raise ``DTypeError`` (:attr:`HALF`);
- ``reductions``: sum/prod/mean/var/std (``correction=``)/logsumexp/amax/amin/norm/nansum/
  nanmean/count_nonzero and the scans (cumsum/cumprod/logcumsumexp/cummax) and selections
  (median/nanmedian/mode/quantile/max/min/kthvalue) with tuples of dims, ``keepdim``, negative
  and empty dims, over ties: values and gradients (among ties where torch's pick is defined);
- ``shapes``: chains of 2-5 shape ops (expand/broadcast_to/unfold/movedim/flatten/unflatten/
  tile/repeat/repeat_interleave with tensor repeats/roll/flip/rot90/diagonal/diag_embed/
  tril/triu with offsets/permute/narrow/select/squeeze with dim tuples/swapaxes/reshape):
  values, gradients and second derivatives;
- ``func``: ``func.grad``/``vjp``/``jvp``/``jacrev``/``jacfwd``/``hessian``/``vmap(grad)`` over
  random small programs of two arguments.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

import retrograd as rg
from fuzz12_cases import Trial, _pick, _run
from fuzz14_cases import _weight_fn
from fuzz14_cases import check as _check14
from fuzz15_cases import _half_out
from fuzz16_cases import _trial
from fuzz_cases import Mismatch, _torch

__all__ = ["GENERATORS", "HALF", "check"]

GENERATORS: dict = {}

#: the names of the trials that draw float16/bfloat16 (refused by the NumPy backend)
HALF: set = set()

#: the strategies every ``inplace`` draw runs under besides NoCheckpointing
STRATEGIES = {
    "balanced": rg.BalancedCheckpointing,
    "budget-1": lambda: rg.BudgetCheckpointing(1),
    "budget-512": lambda: rg.BudgetCheckpointing(512),
}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def check(trial: Trial, strategies: bool = False) -> None:
    """:func:`fuzz14_cases.check`; with ``strategies``, retrograd's results under every
    checkpointing strategy must also be bit-identical to its NoCheckpointing ones."""
    _check14(trial)
    if not strategies:
        return
    inner = rg.current_backend().inner
    with rg.use_backend(rg.Autodiff(inner, rg.NoCheckpointing())):
        want, err = _run(rg, trial)
    for label, make in STRATEGIES.items():
        with rg.use_backend(rg.Autodiff(inner, make())):
            got, got_err = _run(rg, trial)
        if (err is None) != (got_err is None):
            raise Mismatch(f"{label}: raises {got_err!r}, NoCheckpointing {err!r}")
        for k, (g, w) in enumerate(zip(got or [], want or [])):
            if isinstance(w, tuple):
                same = g[1:3] == w[1:3] and np.array_equal(g[3], w[3], equal_nan=True)
                if not same or np.signbit(g[3]).tolist() != np.signbit(w[3]).tolist():
                    raise Mismatch(f"{label}: result {k}\n{g[3]}\n!= NoCheckpointing's\n{w[3]}")
            elif g != w:
                raise Mismatch(f"{label}: result {k} {g!r} != NoCheckpointing's {w!r}")


def _shape_of(fn, shape):
    """The shape ``fn(torch, zeros(shape))`` has (draws fit their arguments to it)."""
    torch = _torch()
    return tuple(fn(torch, torch.zeros(shape)).shape)


def _array(rng, shape, pool=None, dtype="float64"):
    n = int(np.prod(shape)) if shape else 1
    if pool is not None:
        flat = np.array([pool[int(i)] for i in rng.integers(len(pool), size=n)])
    else:
        flat = rng.uniform(-2.0, 2.0, size=n)
    return flat.astype(dtype).reshape(shape)


def _leaf(lib, array, grad=True, dtype="float64"):
    return lib.tensor(array, dtype=getattr(lib, dtype), requires_grad=grad)


# ---- in-place ops through views ----------------------------------------------------------


def _views(rng, shape):
    """A view of a tensor of ``shape``: (name, fn(lib, t))."""
    n = len(shape)
    d = int(rng.integers(n))
    size = shape[d]
    kinds = ["whole", "select", "slice", "narrow", "step", "neg_select"]
    kinds += ["T", "T", "diagonal", "mT"] if n >= 2 else []
    kinds += ["flat", "unsqueeze"]
    kind = str(_pick(rng, *kinds)) if size else "whole"
    i = int(rng.integers(max(size, 1)))
    lo = int(rng.integers(max(size, 1)))
    hi = int(rng.integers(lo, size + 1)) if size else 0
    if kind == "whole":
        return "t", lambda lib, t: t
    if kind == "select":
        return f"select({d},{i})", lambda lib, t: t.select(d, i)
    if kind == "neg_select":
        return f"select({d},{i - size})", lambda lib, t: t.select(d, i - size)
    if kind == "slice":
        idx = (slice(None),) * d + (slice(lo, hi),)
        return f"[{d}:{lo}:{hi}]", lambda lib, t: t[idx]
    if kind == "narrow":
        return f"narrow({d},{lo},{hi - lo})", lambda lib, t: t.narrow(d, lo, hi - lo)
    if kind == "step":
        idx = (slice(None),) * d + (slice(lo, None, 2),)
        return f"[{d}:{lo}::2]", lambda lib, t: t[idx]
    if kind == "T":
        e = int(rng.integers(n))
        return f"transpose({d},{e})", lambda lib, t: t.transpose(d, e)
    if kind == "mT":
        return "mT", lambda lib, t: t.mT
    if kind == "diagonal":
        off = int(rng.integers(-1, 2))
        return f"diagonal({off})", lambda lib, t: t.diagonal(off, -2, -1)
    if kind == "unsqueeze":
        return f"unsqueeze({d})", lambda lib, t: t.unsqueeze(d)
    # (a flattening view only of a contiguous tensor: the caller checks)
    return "flat", lambda lib, t: t.view(-1) if t.is_contiguous() else t.reshape(-1)


INPLACE = [
    "add_",
    "add_alpha",
    "sub_",
    "mul_",
    "mul_scalar",
    "div_",
    "clamp_",
    "clamp_tensor",
    "masked_fill_",
    "masked_fill_tensor",
    "index_add_",
    "copy_",
    "copy_f32",
    "setitem_int",
    "setitem_mask",
    "setitem_index",
    "iadd_scalar",
    "imul",
    "exp_",
    "tanh_",
    "sigmoid_",
    "relu_",
    "neg_",
    "pow_",
    "addcmul_",
    "lerp_",
    "zero_",
    "fill_",
    "index_fill_",
    "scatter_",
    "abs_",
    "clamp_min_",
]


#: the writes whose backward reads neither the tensor written nor its result: programs of
#: these alone (and reads that save nothing) never meet torch's "modified by an inplace
#: operation", so their gradients are compared whatever the order
LINEAR = [
    "add_",
    "add_alpha",
    "sub_",
    "mul_scalar",
    "masked_fill_",
    "masked_fill_tensor",
    "index_add_",
    "copy_",
    "copy_f32",
    "setitem_int",
    "setitem_mask",
    "setitem_index",
    "iadd_scalar",
    "zero_",
    "fill_",
    "index_fill_",
    "scatter_",
    "neg_",
]


def _inplace_step(rng, vshape, linear):
    """(name, fn(lib, view, other leaves), the shapes of the operands it takes)."""
    op = str(_pick(rng, *(LINEAR if linear else INPLACE)))
    n = len(vshape)
    indexed = ("index_add_", "setitem_int", "setitem_index", "index_fill_", "scatter_")
    if (n == 0 or 0 in vshape) and op in indexed:
        op = "add_"
    partner = tuple(1 if rng.random() < 0.3 else s for s in vshape)
    partner = partner[int(rng.integers(len(partner) + 1)) :] if rng.random() < 0.3 else partner
    mask = _array(rng, vshape, [True, False], "bool")
    d = int(rng.integers(n)) if n else 0
    size = vshape[d] if n else 0
    if op in ("add_", "sub_", "mul_", "lerp_", "copy_", "imul", "addcmul_"):
        shapes = [partner]
    elif op == "copy_f32":  # (not broadcast: float32 sums of the gradient differ in order)
        shapes = [vshape]
    elif op in ("div_",):
        shapes = [partner]
    elif op == "clamp_tensor":
        shapes = [partner, tuple(1 if rng.random() < 0.5 else s for s in vshape)]
    elif op == "masked_fill_tensor":
        shapes = [()]
    elif op == "index_add_":
        k = int(rng.integers(1, 4))
        idx = rng.integers(size, size=k)
        shapes = [vshape[:d] + (k,) + vshape[d + 1 :]]
    elif op == "setitem_int":
        i = int(rng.integers(-vshape[0], vshape[0]))
        shapes = [partner[1:] if len(partner) == n else partner[-(n - 1) :] if n > 1 else ()]
    elif op == "setitem_mask":
        shapes = [()] if rng.random() < 0.5 else []
    elif op == "setitem_index":
        k = int(rng.integers(1, 3))
        idx = rng.permutation(vshape[0])[:k]
        shapes = [(k,) + vshape[1:]]
    elif op == "scatter_":
        # (no duplicates along dim: which of two writes to one place wins is torch's kernel's)
        idx = np.stack([rng.permutation(size) for _ in range(int(np.prod(vshape) // size))])
        idx = np.moveaxis(idx.reshape(*(vshape[:d] + vshape[d + 1 :]), size), -1, d)
        shapes = [vshape]
    else:
        shapes = []
    lo, hi = sorted(rng.uniform(-1.5, 1.5, size=2))
    alpha = float(_pick(rng, 0.5, -2.0))

    def fn(lib, v, others):
        o = others[0] if others else None
        if op == "add_":
            v.add_(o)
        elif op == "add_alpha":
            v.add_(lib.full_like(v, 1.5).detach(), alpha=alpha)
        elif op == "sub_":
            v.sub_(o, alpha=alpha)
        elif op in ("mul_", "imul"):
            if op == "imul":
                v *= o
            else:
                v.mul_(o)
        elif op == "mul_scalar":
            v.mul_(alpha)
        elif op == "div_":
            v.div_(o * o + 1.0)
        elif op == "clamp_":
            v.clamp_(lo, hi)
        elif op == "clamp_tensor":
            v.clamp_(min=o, max=others[1] + 1.0)
        elif op == "masked_fill_":
            v.masked_fill_(lib.tensor(mask), alpha)
        elif op == "masked_fill_tensor":
            v.masked_fill_(lib.tensor(mask), o)
        elif op == "index_add_":
            v.index_add_(d, lib.tensor(idx), o, alpha=alpha)
        elif op == "copy_":
            v.copy_(o)
        elif op == "copy_f32":
            v.copy_(o.float())
        elif op == "setitem_int":
            v[i] = o
        elif op == "setitem_mask":
            v[lib.tensor(mask)] = o if others else 0.25
        elif op == "setitem_index":
            v[lib.tensor(idx)] = o
        elif op == "iadd_scalar":
            v += 0.75
        elif op == "pow_":
            v.pow_(2)
        elif op == "addcmul_":
            v.addcmul_(o, o, value=alpha)
        elif op == "lerp_":
            v.lerp_(o, 0.25)
        elif op == "fill_":
            v.fill_(alpha)
        elif op == "index_fill_":
            v.index_fill_(d, lib.tensor([size - 1, 0]), alpha)
        elif op == "scatter_":
            v.scatter_(d, lib.tensor(idx), o)
        elif op == "clamp_min_":
            v.clamp_min_(lo)
        else:
            getattr(v, op)()

    return op, fn, shapes


READS = {
    "double": lambda lib, v: v * 2.0,  # (saves nothing)
    "sum": lambda lib, v: v.sum(),
    "clone": lambda lib, v: v.clone(),
    "sin": lambda lib, v: v.sin(),  # (saves v: a later write changes it)
    "exp": lambda lib, v: v.exp(),  # (saves its result)
    "square": lambda lib, v: v * v,
}


@gen("inplace")
def _inplace(rng):
    shape = tuple(int(s) for s in rng.integers(2, 5, size=int(rng.integers(1, 4))))
    starts = ["mul", "clone", "add", "buffer", "buffer", "leaf_no_grad"] * 3 + ["leaf"]
    start = str(_pick(rng, *starts))
    linear = rng.random() < 0.6
    a = _array(rng, shape)
    b = _array(rng, shape)
    steps = []
    for _ in range(int(rng.integers(2, 7))):
        vname, vfn = _views(rng, shape)
        vshape = _shape_of(vfn, shape)
        if rng.random() < 0.3 and vshape:  # a view of the view
            vname2, vfn2 = _views(rng, vshape)
            vname = f"{vname}.{vname2}"
            vfn = (lambda f, g: lambda lib, t: g(lib, f(lib, t)))(vfn, vfn2)
            vshape = _shape_of(vfn, shape)
        op, wfn, shapes = _inplace_step(rng, vshape, linear)
        operands = [_array(rng, s) for s in shapes]
        reads = list(READS)[: 3 if linear else len(READS)]
        read = str(_pick(rng, *reads)) if rng.random() < 0.4 else None
        steps.append((vname, vfn, op, wfn, operands, read))
    keep_views = rng.random() < 0.5
    second = rng.random() < 0.3
    weight = _weight_fn(rng)

    def body(lib):
        la, lb = _leaf(lib, a), _leaf(lib, b)
        leaves = [la, lb]
        if start == "mul":
            x = la * 1.5
        elif start == "clone":
            x = la.clone()
        elif start == "add":
            x = la + lb
        elif start == "buffer":  # outside the graph until a write brings a leaf in
            x = lib.zeros(shape, dtype=lib.float64)
            x[1] = la[0] * 2.0
        else:  # a leaf that requires grad: torch refuses writes to it or its views
            x = la
            if start == "leaf_no_grad":
                with lib.no_grad():
                    x.mul_(2.0)
                    x[0] = 1.0
                x = x * 1.0
        results = []
        for _name, vfn, _op, wfn, operands, read in steps:
            v = vfn(lib, x)
            others = [_leaf(lib, o) * lb.sum() for o in operands]
            wfn(lib, v, others)
            if read is not None:
                results.append(READS[read](lib, v))
            if keep_views:
                results.append(v)
        return [x, *results], leaves

    text = ", ".join(f"{vn}.{op}" + (f"+{read}" if read else "") for vn, _, op, _, _, read in steps)
    name = f"inplace start={start} [{text}] views={keep_views} second={second} linear={linear}"
    return _trial(name, body, weight, second=second)


# ---- promotion ---------------------------------------------------------------------------

BINARY = {
    "add": lambda lib, a, b: a + b,
    "sub": lambda lib, a, b: a - b,
    "mul": lambda lib, a, b: a * b,
    "div": lambda lib, a, b: a / b,
    "div_floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "floordiv": lambda lib, a, b: a // b,
    "floor_divide": lambda lib, a, b: lib.floor_divide(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "mod": lambda lib, a, b: a % b,
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "pow": lambda lib, a, b: a**b,
    "pow_fn": lambda lib, a, b: lib.pow(a, b),
    "eq": lambda lib, a, b: a == b,
    "ne": lambda lib, a, b: a != b,
    "lt": lambda lib, a, b: a < b,
    "le": lambda lib, a, b: a <= b,
    "gt": lambda lib, a, b: lib.gt(a, b),
    "ge": lambda lib, a, b: lib.ge(a, b),
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "minimum": lambda lib, a, b: lib.minimum(a, b),
    "fmax": lambda lib, a, b: lib.fmax(a, b),
    "atan2": lambda lib, a, b: lib.atan2(a, b),
    "hypot": lambda lib, a, b: lib.hypot(a, b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "true_divide": lambda lib, a, b: lib.true_divide(a, b),
    "and": lambda lib, a, b: a & b,
    "or": lambda lib, a, b: a | b,
    "xor": lambda lib, a, b: a ^ b,
    "bitwise_and": lambda lib, a, b: lib.bitwise_and(a, b),
    "lshift": lambda lib, a, b: a << b,
    "rshift": lambda lib, a, b: a >> b,
    "bitwise_left_shift": lambda lib, a, b: lib.bitwise_left_shift(a, b),
    "logical_xor": lambda lib, a, b: lib.logical_xor(a, b),
    "where": lambda lib, a, b: lib.where(_cond(lib, a, b), a, b),
    "clamp_min": lambda lib, a, b: lib.clamp(a, min=b),
    "clamp_max": lambda lib, a, b: a.clamp(max=b),
    "clamp_both": lambda lib, a, b: lib.clamp(a, min=b, max=b + 1) if _is_t(lib, b) else None,
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "isclose": lambda lib, a, b: lib.isclose(a, b),
}
INT_ONLY = {"and", "or", "xor", "bitwise_and", "lshift", "rshift", "bitwise_left_shift"}
#: torch's signature takes tensors only (retrograd also takes a number: not drawn)
TENSOR_ONLY = {"fmax", "logical_xor"}


def _is_t(lib, x):
    return isinstance(x, lib.Tensor)


def _cond(lib, a, b):
    ref = a if _is_t(lib, a) else b
    return lib.tensor(np.arange(int(np.prod(ref.shape))).reshape(tuple(ref.shape)) % 3 == 0)


TENSOR_DTYPES = ["int64", "bool", "float32", "float64", "int64", "float64", "float16", "bfloat16"]
INT_POOL = [-7, -3, -2, -1, 0, 1, 2, 3, 5]
FLOAT_POOL = [-2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 1.5, 3.0, 0.3, -0.7, 2.0, 0.1, 1e-3]


def _operand(rng, op, shape):
    """("tensor", dtype, array) or ("scalar", value)."""
    int_op = op in INT_ONLY
    if rng.random() < 0.3 and op not in TENSOR_ONLY:
        kind = str(_pick(rng, "int", "float", "bool")) if not int_op else "int"
        if op in ("lshift", "rshift", "bitwise_left_shift") or kind == "int":
            pool = [0, 1, 2, 3] if "shift" in op else INT_POOL
            return ("scalar", int(pool[int(rng.integers(len(pool)))]))
        if kind == "bool":
            return ("scalar", bool(rng.random() < 0.5))
        return ("scalar", float(_pick(rng, *FLOAT_POOL)))
    dtype = str(_pick(rng, "int64", "bool", "int64")) if int_op else str(_pick(rng, *TENSOR_DTYPES))
    if rng.random() < 0.3:
        shape = ()
    if dtype == "bool":
        arr = _array(rng, shape, [True, False], "bool")
    elif dtype == "int64":
        pool = [0, 1, 2, 3, 5, 7] if "shift" in op else INT_POOL
        arr = _array(rng, shape, pool, "int64")
    else:
        arr = _array(rng, shape, FLOAT_POOL + [0.25, -1.25])
    return ("tensor", dtype, arr)


def _make_operand(lib, operand, grad=True):
    if operand[0] == "scalar":
        return operand[1]
    _, dtype, arr = operand
    grad = grad and dtype in ("float32", "float64")
    t = lib.tensor(arr, dtype=getattr(lib, dtype))
    return t.requires_grad_(True) if grad else t


@gen("promotion")
def _promotion(rng):
    op = str(_pick(rng, *BINARY))
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    other = tuple(1 if rng.random() < 0.3 else s for s in shape)
    a, b = _operand(rng, op, shape), _operand(rng, op, other)
    if a[0] == "scalar" and b[0] == "scalar":
        a = ("tensor", "float64", _array(rng, shape))
    if rng.random() < 0.5:
        a, b = b, a
    rounded = ("div_floor", "div_trunc", "floordiv", "floor_divide")
    if op in rounded and any(o[0] == "tensor" and o[1] in ("float16", "bfloat16") for o in (a, b)):
        # torch's rounded half division divides in float32 and rounds once where an operand
        # has one element (its CPU-scalar path), else rounds the half quotient first: 3 /
        # bfloat16(0.3) is 9 or 10 by the divisor's size, a torch inconsistency. Not drawn
        op = "div"
    if op.startswith("clamp") and a[0] == "scalar":
        a, b = b, a
    if op in ("pow", "pow_fn") and a[0] == "scalar" and isinstance(a[1], bool):
        a = ("scalar", int(a[1]))  # (True ** t: an internal assert in torch)
    if op in ("pow", "pow_fn") and b[0] == "scalar" and isinstance(b[1], bool):
        # (t ** False: torch's backward misses its exponent-0 case, 0 * 0 ** -1 = NaN)
        b = ("scalar", int(b[1]))
    if op in ("xlogy", "hypot", "copysign", "atan2", "fmax", "isclose") and any(
        o[0] == "tensor" and o[1] in ("float16", "bfloat16") for o in (a, b)
    ):
        a = ("tensor", "float64", _array(rng, shape))  # (torch has no half forms on the CPU)
    weight = _weight_fn(rng)
    name = f"promotion {op} {a[:2]} {b[:2]}"

    def body(lib):
        # (floor division: torch has no derivative, retrograd's is 0; a deliberate difference)
        # (remainder of a number by a tensor: torch has no derivative, retrograd's is)
        grad = op not in ("floordiv", "floor_divide")
        grad = grad and not (op in ("mod", "remainder") and a[0] == "scalar")
        # (torch's backward of pow with a bool exponent, and of atan2 with a bool operand,
        # subtracts from or negates a bool tensor and refuses: a torch bug)
        bools = any(o[0] == "tensor" and o[1] == "bool" for o in (a, b))
        grad = grad and not (op in ("pow", "pow_fn", "atan2") and bools)
        x, y = _make_operand(lib, a, grad), _make_operand(lib, b, grad)
        leaves = [t for t in (x, y) if _is_t(lib, t) and t.requires_grad]
        out = BINARY[op](lib, x, y)
        if half:  # (torch's half tensors have no numpy(): their dtype's name and float64)
            return ([] if out is None else _half_out(lib, out)), leaves
        return ([] if out is None else [out]), leaves

    half = any(o[0] == "tensor" and o[1] in ("float16", "bfloat16") for o in (a, b))
    if half:
        HALF.add(name)
    # (a float64 gradient through a float32 result: torch sums it in float32, then casts)
    f32 = any(o[0] == "tensor" and o[1] == "float32" for o in (a, b))
    return _trial(name, body, weight, rtol=1e-2 if half else 1e-5 if f32 else 1e-9)


# ---- reductions and scans ----------------------------------------------------------------

TIES = [-1.0, 0.0, 0.5, 0.5, 2.0, -1.0, 2.0]


def _dim_arg(rng, n, multi=True):
    """An int dim (maybe negative), a tuple of them, (), or None."""
    kinds = ["int"] + (["tuple", "tuple", "empty", "none"] if multi else [])
    kind = str(_pick(rng, *kinds)) if n else str(_pick(rng, "none", "zero"))
    if kind == "zero":
        return int(_pick(rng, 0, -1))
    if kind == "none":
        return None
    if kind == "empty":
        return ()
    if kind == "int":
        return int(rng.integers(-n, n))
    k = int(rng.integers(1, n + 1))
    dims = [int(d) - (n if rng.random() < 0.4 else 0) for d in rng.permutation(n)[:k]]
    return tuple(dims)


REDUCE = {
    "sum": lambda lib, x, d, k: x.sum(d, keepdim=k) if d is not None else x.sum(),
    "prod": lambda lib, x, d, k: x.prod(d, keepdim=k) if d is not None else x.prod(),
    "mean": lambda lib, x, d, k: x.mean(d, keepdim=k) if d is not None else x.mean(),
    "nansum": lambda lib, x, d, k: lib.nansum(x, d, keepdim=k),
    "nanmean": lambda lib, x, d, k: x.nanmean(d, keepdim=k),
    "amax": lambda lib, x, d, k: x.amax(() if d is None else d, keepdim=k),
    "amin": lambda lib, x, d, k: lib.amin(x, () if d is None else d, keepdim=k),
    # (dim=(): torch's logsumexp fails, "output with shape [] doesn't match the broadcast
    # shape [1]", a torch bug; every dimension spelled out instead)
    "logsumexp": lambda lib, x, d, k: x.logsumexp(
        tuple(range(x.ndim)) if d is None or d == () else d, keepdim=k
    ),
    "norm": lambda lib, x, d, k: x.norm(dim=d, keepdim=k),
    "norm1": lambda lib, x, d, k: lib.linalg.vector_norm(x, 1, dim=d, keepdim=k),
    "count_nonzero": lambda lib, x, d, k: lib.count_nonzero(x, dim=d),
    "var": lambda lib, x, d, k, c=1: x.var(d, correction=c, keepdim=k),
    "std": lambda lib, x, d, k, c=1: lib.std(x, dim=d, correction=c, keepdim=k),
    "var_mean": lambda lib, x, d, k, c=1: lib.var_mean(x, d, correction=c, keepdim=k),
    "std_mean": lambda lib, x, d, k, c=1: lib.std_mean(x, dim=d, correction=c, keepdim=k),
}
SCANS = {
    "cumsum": lambda lib, x, d: x.cumsum(d),
    "cumprod": lambda lib, x, d: lib.cumprod(x, dim=d),
    "logcumsumexp": lambda lib, x, d: x.logcumsumexp(d),
    "cummax": lambda lib, x, d: x.cummax(d),
    "cummin": lambda lib, x, d: lib.cummin(x, d),
}
SELECT = {
    "median": lambda lib, x, d, k: x.median(d, keepdim=k) if d is not None else x.median(),
    "nanmedian": lambda lib, x, d, k: x.nanmedian(d, keepdim=k) if d is not None else x.nanmedian(),
    "mode": lambda lib, x, d, k: x.mode(d if d is not None else -1, keepdim=k),
    "max": lambda lib, x, d, k: x.max(d, keepdim=k) if d is not None else x.max(),
    "min": lambda lib, x, d, k: lib.min(x, d, keepdim=k) if d is not None else x.min(),
    "kthvalue": lambda lib, x, d, k: x.kthvalue(1, d if d is not None else -1, keepdim=k),
    "quantile": lambda lib, x, d, k: lib.quantile(x, 0.3, dim=d, keepdim=k),
    "quantile_t": lambda lib, x, d, k: x.quantile(
        lib.tensor([0.0, 0.5, 0.75], dtype=x.dtype), dim=d, keepdim=k, interpolation="midpoint"
    ),
    "nanquantile": lambda lib, x, d, k: x.nanquantile(0.6, dim=d, keepdim=k, interpolation="lower"),
    "argmax": lambda lib, x, d, k: x.argmax(d, keepdim=k),
}


@gen("reductions")
def _reductions(rng):
    family = str(_pick(rng, "reduce", "reduce", "scan", "select"))
    n = int(rng.integers(0, 4))
    shape = tuple(int(s) for s in rng.integers(0 if rng.random() < 0.15 else 1, 4, size=n))
    keep = bool(rng.random() < 0.5)
    view = str(_pick(rng, "plain", "T", "step")) if n >= 2 else "plain"
    if family == "reduce":
        op = str(_pick(rng, *REDUCE))
        dim = _dim_arg(rng, n, multi=op != "count_nonzero" or rng.random() < 0.5)
        corr = int(_pick(rng, 0, 1, 2))
        if op[:3] in ("var", "std"):
            if dim == ():  # (torch's backward takes () for no dimension: N = 1, a torch bug)
                dim = None
            # no degrees of freedom: torch's gradient is its formula's, 2 / (N - correction)
            # times x - mean (+-inf, NaN, or finite for a negative N - correction, its
            # forward's inf or NaN notwithstanding); retrograd's is NaN. Not drawn
            size = int(np.prod(shape))
            dims = [int(d) for d in np.atleast_1d(dim)] if dim is not None and shape else []
            reduced = int(np.prod([shape[d] for d in dims])) if dims else size
            corr = min(corr, reduced - 1) if size else corr
        fn = REDUCE[op]
        call = (lambda lib, x: fn(lib, x, dim, keep, corr)) if op[:3] in ("var", "std") else None
        call = call or (lambda lib, x: fn(lib, x, dim, keep))
        ties = rng.random() < 0.5
    elif family == "scan":
        op = str(_pick(rng, *SCANS))
        dim = int(rng.integers(-n, n)) if n else int(_pick(rng, 0, -1))
        call = lambda lib, x: SCANS[op](lib, x, dim)  # noqa: E731
        ties = op not in ("cummax", "cummin") or rng.random() < 0.3
    else:
        op = str(_pick(rng, *SELECT))
        multi = op.startswith("quantile") or op == "nanquantile"
        dim = _dim_arg(rng, n, multi=False) if not multi or rng.random() < 0.7 else None
        call = lambda lib, x: SELECT[op](lib, x, dim, keep)  # noqa: E731
        # ties only where torch's pick is defined: not the index of median/mode/kthvalue/max
        # (and not quantile's gradient: among ties torch's sort picks the element)
        ties = False
    pool = TIES if ties else None
    # (not nanmean: over a row of NaN only torch's gradient is NaN (its nansum's backward
    # multiplies by the mask: inf * 0), retrograd's 0, a known difference)
    if op in ("nansum", "nanmedian", "nanquantile") and rng.random() < 0.6:
        pool = (pool or [0.3, -1.1, 2.2, 0.7, -0.4]) + [float("nan")]
    if op == "prod" or op == "cumprod":
        pool = pool or [0.5, -1.5, 2.0, 0.0, 1.25, -0.75]
    base = shape
    if view == "T":
        base = shape[:-2] + (shape[-1], shape[-2])
    elif view == "step":
        base = shape[:-1] + (shape[-1] * 2,)
    if pool is None:  # distinct values: no ties anywhere
        size = int(np.prod(base))
        arr = (rng.permutation(size) * 0.37 - 1.0).reshape(base)
    else:
        arr = _array(rng, base, pool)
    weight = _weight_fn(rng)
    second = op in ("sum", "mean", "var", "std", "logsumexp", "norm", "logcumsumexp", "prod")
    second = second and rng.random() < 0.3 and pool is None
    name = f"{family} {op} {list(shape)}:{view} dim={dim} keepdim={keep} ties={ties}"

    def body(lib):
        leaf = _leaf(lib, arr)
        x = leaf.transpose(-1, -2) if view == "T" else leaf[..., ::2] if view == "step" else leaf
        return call(lib, x), [leaf]

    return _trial(name, body, weight, second=second)


# ---- shape ops ---------------------------------------------------------------------------


def _shape_step(rng, shape):
    """(text, fn(lib, t)) of one shape op fitted to ``shape``."""
    n = len(shape)
    ops = ["flip", "roll", "movedim", "unsqueeze", "tile", "repeat", "repeat_interleave"]
    ops += ["broadcast_to", "reshape", "flatten"] + (["expand"] if n else [])
    if n >= 1:
        ops += ["unfold", "narrow", "select", "unflatten", "diag_embed", "squeeze", "permute"]
    if n >= 2:
        ops += ["rot90", "diagonal", "tril", "triu", "swapaxes", "mT", "tril", "triu"]
    op = str(_pick(rng, *ops))
    d = int(rng.integers(-n, n)) if n else 0
    if op == "flip":
        dims = tuple(int(x) for x in rng.permutation(n)[: int(rng.integers(0, n + 1))])
        return f"flip{dims}", lambda lib, t: t.flip(dims)
    if op == "roll":
        if n and rng.random() < 0.6:
            k = int(rng.integers(1, n + 1))
            dims = tuple(int(x) - n for x in rng.permutation(n)[:k])
            shifts = tuple(int(s) for s in rng.integers(-5, 6, size=k))
            return f"roll({shifts},{dims})", lambda lib, t: lib.roll(t, shifts, dims)
        s = int(rng.integers(-4, 5))
        return f"roll({s})", lambda lib, t: t.roll(s)
    if op == "movedim":
        if n == 0:
            return "movedim(0,0)", lambda lib, t: t.movedim(0, 0)
        k = int(rng.integers(1, n + 1))
        src = tuple(int(x) for x in rng.permutation(n)[:k])
        dst = tuple(int(x) - n for x in rng.permutation(n)[:k])
        return f"movedim({src},{dst})", lambda lib, t: lib.movedim(t, src, dst)
    if op == "unsqueeze":
        u = int(rng.integers(-n - 1, n + 1))
        return f"unsqueeze({u})", lambda lib, t: t.unsqueeze(u)
    if op in ("tile", "repeat"):
        k = max(n + int(rng.integers(0, 2)), 1) if op == "repeat" else int(rng.integers(1, n + 2))
        reps = tuple(int(r) for r in rng.integers(1, 3, size=k))
        if op == "tile":
            return f"tile{reps}", lambda lib, t: t.tile(reps)
        return f"repeat{reps}", lambda lib, t: t.repeat(*reps)
    if op == "repeat_interleave":
        if n and rng.random() < 0.6:
            reps = rng.integers(0, 3, size=shape[d])
            return (
                f"repeat_interleave(tensor{reps.tolist()},{d})",
                lambda lib, t: t.repeat_interleave(lib.tensor(reps), dim=d),
            )
        r = int(rng.integers(1, 3))
        dim = d if n and rng.random() < 0.5 else None
        return f"repeat_interleave({r},{dim})", lambda lib, t: lib.repeat_interleave(t, r, dim=dim)
    if op in ("expand", "broadcast_to"):
        new = tuple(int(s) for s in rng.integers(1, 3, size=int(rng.integers(0, 2))))
        target = new + tuple(int(_pick(rng, 2, 3)) if s == 1 else s for s in shape)
        if op == "expand":
            spelled = new + tuple(-1 if rng.random() < 0.3 else s for s in target[len(new) :])
            return f"expand{spelled}", lambda lib, t: t.expand(*spelled)
        return f"broadcast_to{target}", lambda lib, t: lib.broadcast_to(t, target)
    if op == "reshape":
        total = int(np.prod(shape))
        target = (-1,) if rng.random() < 0.5 or total == 0 else (1, total, 1)
        return f"reshape{target}", lambda lib, t: t.reshape(target)
    if op == "flatten":
        if n == 0:
            return "flatten()", lambda lib, t: t.flatten()
        s, e = sorted(int(x) for x in rng.integers(0, n, size=2))
        return f"flatten({s},{e - n})", lambda lib, t: t.flatten(s, e - n)
    if op == "unfold":
        size = int(rng.integers(0, shape[d] + 1))
        step = int(rng.integers(1, 3))
        return f"unfold({d},{size},{step})", lambda lib, t: t.unfold(d, size, step)
    if op == "narrow":
        lo = int(rng.integers(0, shape[d] + 1))
        ln = int(rng.integers(0, shape[d] - lo + 1))
        return f"narrow({d},{lo},{ln})", lambda lib, t: t.narrow(d, lo, ln)
    if op == "select":
        if shape[d] == 0:
            return "flip(())", lambda lib, t: t.flip(())
        i = int(rng.integers(-shape[d], shape[d]))
        return f"select({d},{i})", lambda lib, t: t.select(d, i)
    if op == "unflatten":
        size = shape[d]
        sizes = _pick(rng, (1, size), (size, 1), (-1, 1), (1, -1, 1)) if size else (0, 2)
        if size and size % 2 == 0 and rng.random() < 0.5:
            sizes = (2, -1)
        return f"unflatten({d},{sizes})", lambda lib, t: t.unflatten(d, sizes)
    if op == "diag_embed":
        off = int(rng.integers(-2, 3))
        d1, d2 = (int(x) for x in rng.permutation(n + 1)[:2])
        return f"diag_embed({off},{d1},{d2})", lambda lib, t: lib.diag_embed(t, off, d1, d2)
    if op == "squeeze":
        dims = tuple(int(x) for x in rng.permutation(n)[: int(rng.integers(1, n + 1))])
        return f"squeeze({dims})", lambda lib, t: t.squeeze(dims)
    if op == "permute":
        p = tuple(int(x) - (n if rng.random() < 0.3 else 0) for x in rng.permutation(n))
        return f"permute{p}", lambda lib, t: t.permute(*p)
    if op == "rot90":
        k = int(rng.integers(-3, 5))
        d1, d2 = (int(x) for x in rng.permutation(n)[:2])
        return f"rot90({k},({d1},{d2}))", lambda lib, t: lib.rot90(t, k, (d1, d2))
    if op == "diagonal":
        off = int(rng.integers(-2, 3))
        d1, d2 = (int(x) - (n if rng.random() < 0.5 else 0) for x in rng.permutation(n)[:2])
        return f"diagonal({off},{d1},{d2})", lambda lib, t: t.diagonal(off, d1, d2)
    if op in ("tril", "triu"):
        off = int(rng.integers(-2, 3))
        return f"{op}({off})", lambda lib, t: getattr(t, op)(off)
    if op == "swapaxes":
        e = int(rng.integers(-n, n))
        return f"swapaxes({d},{e})", lambda lib, t: t.swapaxes(d, e)
    return "mT", lambda lib, t: t.mT


@gen("shapes")
def _shapes(rng):
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(0, 4))))
    shape = tuple(1 if rng.random() < 0.2 else s for s in shape)
    steps, cur = [], shape
    for _ in range(int(rng.integers(2, 6))):
        text, fn = _shape_step(rng, cur)
        try:
            cur = _shape_of(fn, cur)
        except Exception:  # (a draw torch refuses: the comparison sees it too)
            steps.append((text, fn))
            break
        steps.append((text, fn))
        if int(np.prod(cur)) > 400:
            break
    arr = _array(rng, shape)
    weight = _weight_fn(rng)
    square = rng.random() < 0.5
    second = square and rng.random() < 0.5
    name = "shapes " + ".".join(t for t, _ in steps) + f" from {list(shape)} square={square}"

    def body(lib):
        leaf = _leaf(lib, arr)
        t = leaf
        for _, fn in steps:
            t = fn(lib, t)
        return [t * t if square else t], [leaf]

    return _trial(name, body, weight, second=second)


# ---- func transforms ---------------------------------------------------------------------

UNARY = {
    "sin": lambda lib, x: x.sin(),
    "tanh": lambda lib, x: x.tanh(),
    "exp_half": lambda lib, x: (x * 0.5).exp(),
    "square": lambda lib, x: x * x,
    "softplus": lambda lib, x: lib.nn.functional.softplus(x),
    "sigmoid": lambda lib, x: x.sigmoid(),
    "cube": lambda lib, x: x.pow(3),
}
MIX = {
    "add": lambda lib, x, y: x + y,
    "mul": lambda lib, x, y: x * y,
    "div": lambda lib, x, y: x / (y * y + 1.0),
    "atan2": lambda lib, x, y: lib.atan2(x, y + 3.0),
    "where": lambda lib, x, y: lib.where(x > y, x * y, x - y),
    "maximum": lambda lib, x, y: lib.maximum(x, y * 0.5),
}
TAIL = {
    "sum": lambda lib, z: z.sum(),
    "logsumexp": lambda lib, z: z.logsumexp(-1).sum(),
    "softmax_dot": lambda lib, z: (z.softmax(-1) * z).sum(),
    "norm": lambda lib, z: (z * z + 1.0).sqrt().sum(),
    "cumsum_sq": lambda lib, z: (z.cumsum(0) ** 2).mean(),
    "prod": lambda lib, z: (z * 0.5 + 1.0).prod(),
}


@gen("func")
def _func(rng):
    n = int(rng.integers(1, 4))
    x = _array(rng, (n,)) if rng.random() < 0.6 else _array(rng, (2, n))
    y = _array(rng, x.shape) if rng.random() < 0.7 else _array(rng, x.shape[-1:])
    u1, u2 = str(_pick(rng, *UNARY)), str(_pick(rng, *UNARY))
    mix = str(_pick(rng, *MIX))
    tail = str(_pick(rng, *TAIL))
    vector = rng.random() < 0.4  # a tensor output (jacobians, jvp, vjp)
    transform = str(
        _pick(rng, "grad", "grad01", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd",
              "jacrev01", "hessian", "jacfwd_jacrev", "vmap_grad", "grad_grad_sum",
              "hessian01", "jvp_grad1", "vjp_grad1")
    )  # fmt: skip
    tx = _array(rng, x.shape)
    ty = _array(rng, y.shape)
    name = f"func {transform} {u1}({mix}({u2}(x), y)).{tail} vector={vector} x{x.shape} y{y.shape}"

    def f(lib, a, b):
        z = UNARY[u1](lib, MIX[mix](lib, UNARY[u2](lib, a), b))
        return z if vector else TAIL[tail](lib, z)

    def fn(lib):
        a, b = lib.tensor(x, dtype=lib.float64), lib.tensor(y, dtype=lib.float64)
        g = lambda a, b: f(lib, a, b)  # noqa: E731
        s = lambda a, b: TAIL[tail](lib, f(lib, a, b)) if vector else f(lib, a, b)  # noqa: E731
        F = lib.func  # noqa: N806
        if transform == "grad":
            return [F.grad(s)(a, b)]
        if transform == "grad01":
            return list(F.grad(s, argnums=(0, 1))(a, b))
        if transform == "grad_and_value":
            gv, v = F.grad_and_value(s, argnums=1)(a, b)
            return [gv, v]
        if transform == "vjp":
            out, pull = F.vjp(g, a, b)
            return [out, *pull(lib.ones_like(out) * 0.7)]
        if transform == "jvp":
            return list(F.jvp(g, (a, b), (lib.tensor(tx), lib.tensor(ty))))
        if transform == "jacrev":
            return [F.jacrev(g)(a, b)]
        if transform == "jacfwd":
            return [F.jacfwd(g, argnums=1)(a, b)]
        if transform == "jacrev01":
            return list(F.jacrev(g, argnums=(0, 1))(a, b))
        if transform == "hessian":
            return [F.hessian(s)(a, b)]
        if transform == "jacfwd_jacrev":
            return [F.jacfwd(F.jacrev(s, argnums=1), argnums=0)(a, b)]
        if transform == "hessian01":
            return [h for row in F.hessian(s, argnums=(0, 1))(a, b) for h in row]
        if transform == "jvp_grad1":  # (the tangent of a gradient in b along a and b)
            return list(F.jvp(F.grad(s, argnums=1), (a, b), (lib.tensor(tx), lib.tensor(ty))))
        if transform == "vjp_grad1":
            out, pull = F.vjp(F.grad(s, argnums=1), a, b)
            return [out, *pull(lib.ones_like(out) * -0.5)]
        if transform == "vmap_grad":
            if a.ndim < 2 or b.ndim < 2:
                return [F.vmap(F.grad(lambda p, q: s(p, q)), in_dims=(0, None))(a.unsqueeze(0), b)]
            return [F.vmap(F.grad(s))(a, b)]
        return [F.grad(lambda p: F.grad(s)(p, b).sum())(a)]

    return Trial(name, fn, rtol=1e-9)
