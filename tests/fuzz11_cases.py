"""Round 11 of the differential fuzzer (``tests/test_fuzz_vs_torch.py``): generators for what
``fuzz_cases.py`` does not draw yet, registered in the same ``GENERATORS`` table.

- ``prog_views``: random programs of views (transpose, permute, narrow, select, stepped
  slices, diagonal, unflatten, movedim, view/reshape, expand and the outputs of unbind/split/
  chunk to read) interleaved with in-place ops on those views and out-of-place ops, then
  backward through everything;
- ``promote_*``: dtype promotion of every binary and in-place op across int64/bool/float32/
  float64 tensors, 0-d tensors and Python scalars (torch's refusals included);
- ``red_edges``: reductions with ``dim=()``, repeated or out-of-range dims, on 0-d and empty
  tensors;
- ``index_combo``: getitem/setitem mixing bool masks and int arrays, separated advanced
  indices, broadcasting values;
- ``linalg_*``: gradients of solve, inv, det, slogdet, cholesky, qr, eigh, svd-based norms,
  pinv, lstsq... on well-conditioned inputs (and refusals on singular or non-square ones);
- ``special_*``: lgamma, digamma, polygamma, erf family, Bessel i0/i1, xlogy, sinc, logit
  with eps near their edges;
- ``nnf2_*``: nn.functional argument grids fuzz_cases does not draw (conv3d, padding modes,
  max_unpool, embedding max_norm, batch/instance norm with running statistics, losses with
  weight/ignore_index/label_smoothing/probability targets).
"""

from __future__ import annotations

import itertools
import math
import operator

import numpy as np

import retrograd as rg
from fuzz_cases import (
    FLOATS,
    GENERATORS,
    Case,
    Operand,
    _torch,
    gen,
    rand_dim,
    rand_dtype,
    rand_shape,
)

# ---- programs of views and in-place writes ----------------------------------------------

# views of the current tensor: fn(lib, t, r) with ``r`` random ints resolved at run time
# against the tensor's shape (both libraries see the same shapes, so take the same path)
VIEWS = {
    "transpose": lambda lib, t, r: t.transpose(r[0] % t.ndim, r[1] % t.ndim) if t.ndim else t,
    # (a tuple: torch's permute() of a 0-d tensor wants one, it refuses no argument at all)
    "permute": lambda lib, t, r: t.permute(tuple(reversed(range(t.ndim)))),
    "narrow": lambda lib, t, r: (
        t.narrow(d := r[0] % t.ndim, r[1] % max(t.shape[d], 1), 0) if t.ndim else t
    ),
    "narrow1": lambda lib, t, r: (
        t.narrow(d := r[0] % t.ndim, 0, max(t.shape[d] - r[1] % 2, 0)) if t.ndim else t
    ),
    "select": lambda lib, t, r: (
        t.select(d := r[0] % t.ndim, -(r[1] % t.shape[d]) - 1)
        if t.ndim and t.shape[r[0] % t.ndim]
        else t
    ),
    "step": lambda lib, t, r: t[..., r[0] % 2 :: 2] if t.ndim else t,
    "slice_neg": lambda lib, t, r: t[-(r[0] % 3) - 1 :] if t.ndim else t,
    "unsqueeze": lambda lib, t, r: t.unsqueeze(r[0] % (t.ndim + 1)),
    "squeeze": lambda lib, t, r: t.squeeze(),
    "diagonal": lambda lib, t, r: t.diagonal(r[0] % 3 - 1, 0, -1) if t.ndim >= 2 else t,
    "movedim": lambda lib, t, r: t.movedim(r[0] % t.ndim, -1) if t.ndim else t,
    "flatten_view": lambda lib, t, r: t.view(-1),  # torch refuses non-contiguous views
    "reshape": lambda lib, t, r: t.reshape(-1),
    "unflatten": lambda lib, t, r: t.flatten().unflatten(0, (1, -1)),
    "mT": lambda lib, t, r: t.mT if t.ndim >= 2 else t,
    "ellipsis_none": lambda lib, t, r: t[..., None, :] if t.ndim else t[None],
    "expand": lambda lib, t, r: t.unsqueeze(0).expand(2, *t.shape),
    "unbind": lambda lib, t, r: (
        t.unbind(r[0] % t.ndim)[r[1] % t.shape[r[0] % t.ndim]]
        if t.ndim and t.shape[r[0] % t.ndim]
        else t
    ),
    "split": lambda lib, t, r: t.split(2, r[0] % t.ndim)[-1] if t.ndim and t.numel() else t,
    "chunk": lambda lib, t, r: t.chunk(2, -1)[0] if t.ndim and t.shape[-1] else t,
    "tensor_index": lambda lib, t, r: (
        t[lib.tensor([r[0] % t.shape[0], 0])] if t.ndim and t.shape[0] else t
    ),
}
# views torch refuses to write in place (expanded ones; the outputs of unbind/split/chunk
# while tracking gradients, see MULTI_OUTPUT); ``tensor_index`` is a copy
READ_ONLY = ("expand",)
MULTI_OUTPUT = ("unbind", "split", "chunk")

WRITES = {
    "mul_": lambda lib, v, o: v.mul_(o),
    "add_": lambda lib, v, o: v.add_(o, alpha=0.5),
    "sub_": lambda lib, v, o: v.sub_(o),
    "div_": lambda lib, v, o: v.div_(o * o + 1.0),
    "copy_": lambda lib, v, o: v.copy_(o),
    "clamp_": lambda lib, v, o: v.clamp_(-0.5, 0.8),
    "clamp_t": lambda lib, v, o: v.clamp_(min=o),
    "sigmoid_": lambda lib, v, o: v.sigmoid_(),
    "tanh_": lambda lib, v, o: v.tanh_(),
    "zero_": lambda lib, v, o: v.zero_(),
    "fill_": lambda lib, v, o: v.fill_(0.25),
    "masked_fill_": lambda lib, v, o: v.masked_fill_(o > 0, -1.0),
    "addcmul_": lambda lib, v, o: v.addcmul_(o, v, value=0.5),
    "addcdiv_": lambda lib, v, o: v.addcdiv_(o, o * o + 2.0, value=-1.0),
    "lerp_": lambda lib, v, o: v.lerp_(o, 0.4),
    "pow_": lambda lib, v, o: v.pow_(2),
    "square_": lambda lib, v, o: v.square_(),
    "abs_": lambda lib, v, o: v.abs_(),
    "neg_": lambda lib, v, o: v.neg_(),
    "exp_": lambda lib, v, o: v.exp_(),
    "setitem": lambda lib, v, o: v.__setitem__((Ellipsis,), o),
    "setitem_first": lambda lib, v, o: (
        v.__setitem__(0, o[0] if o.ndim else o) if v.ndim and v.shape[0] else v
    ),
    "index_fill_": lambda lib, v, o: (
        v.index_fill_(-1, lib.tensor([0]), 2.0) if v.ndim and v.shape[-1] else v
    ),
    "iadd": None,
    "imul": None,
}


def _under_no_grad(write):
    def run(lib, y, t):
        with lib.no_grad():
            write(lib, y, t)

    return run


# writes the graph does not record: under no_grad into the leaf y (whole, or through a view
# of it), and through detach() into a live tensor t (its values change, its place in the
# graph stays)
OUTSIDE_WRITES = {
    "leaf_mul_": _under_no_grad(lambda lib, y, t: y.mul_(1.5)),
    "leaf_view_add_": _under_no_grad(lambda lib, y, t: y[..., :1].add_(0.5) if y.ndim else y),
    "leaf_setitem": _under_no_grad(lambda lib, y, t: y.__setitem__(0, -1.0) if y.ndim else y),
    # (not t.data.mul_: torch's .data write bypasses the version check, and a backward that
    # saved t, as exp_ or tanh_ save their output, then reads the new values; retrograd's
    # saved values never change, API.md section 10)
    "detach_add_": lambda lib, y, t: t.detach().add_(1) if t.is_floating_point() else t,
}
OUT_OF_PLACE = {
    "mul_y": lambda lib, t, y: t * y,
    "sin": lambda lib, t, y: t.sin(),
    "add_sum": lambda lib, t, y: t + y.sum(),
    "where": lambda lib, t, y: lib.where(t > 0, t, y),
    "relu": lambda lib, t, y: t.relu(),
}


def _partner(lib, y, shape):
    """A float64 operand of ``shape`` made from the leaf ``y`` (so it has a gradient)."""
    n = int(np.prod(shape)) if shape else 1
    flat = y.reshape(-1)
    reps = -(-n // max(flat.shape[0], 1))
    return flat.repeat(max(reps, 1))[:n].reshape(shape) if flat.shape[0] else lib.zeros(shape)


def _write(name, lib, v, o):
    if name == "iadd":
        v += o
    elif name == "imul":
        v *= o
    else:
        WRITES[name](lib, v, o)


@gen("prog_views")
def _prog_views(rng):
    """A program: a non-leaf base, views of it and of each other, in-place writes through
    them (and under no_grad on a leaf), out-of-place ops; every live tensor is an output."""
    shape = rand_shape(rng, 1, 3, zero=rng.random() < 0.1)
    steps = []
    for _ in range(int(rng.integers(2, 8))):
        kind = str(rng.choice(["view", "view", "write", "write", "op", "nograd"]))
        r = [int(x) for x in rng.integers(0, 1000, 3)]
        if kind == "view":
            steps.append(("view", str(rng.choice(sorted(VIEWS))), r))
        elif kind == "write":
            steps.append(("write", str(rng.choice(sorted(WRITES))), r))
        elif kind == "op":
            steps.append(("op", str(rng.choice(sorted(OUT_OF_PLACE))), r))
        else:
            steps.append(("nograd", str(rng.choice(sorted(OUTSIDE_WRITES))), r))
    dtype = "float64" if rng.random() < 0.85 else str(rng.choice(["float32", "int64"]))

    def fn(lib, x, y):
        base = x * 1 if rng_base else x.clone()
        if base.dtype == lib.float32:
            # in the graph from the start: torch takes a view of a leaf that does not require
            # grad, written later with a value that does, for "a leaf Variable that requires
            # grad" and refuses in-place ops on it (a quirk not copied)
            base = base + (y.sum() * 0).float()
        live = [(base, True)]  # (tensor, writable)
        for kind, name, r in steps:
            t, writable = live[r[2] % len(live)]
            if kind == "view":
                v = VIEWS[name](lib, t, r)
                if name in MULTI_OUTPUT:
                    # torch refuses to read these views once their base is written in
                    # place while tracking gradients, which retrograd allows: read at once
                    v = v * 1
                live.append((v, writable and name not in READ_ONLY))
            elif kind == "op":
                live.append((OUT_OF_PLACE[name](lib, t, _partner(lib, y, t.shape)), True))
            elif kind == "nograd":
                OUTSIDE_WRITES[name](lib, y, t)
            elif writable:
                o = _partner(lib, y, t.shape).to(t.dtype)
                _write(name, lib, t, o)
        return [t for t, _ in live]

    rng_base = bool(rng.random() < 0.5)
    names = " ".join(f"{k}:{n}" for k, n, _ in steps)
    # y is a leaf written under no_grad: float64 but not a grad leaf would hide nothing, so
    # it is a grad leaf (torch allows in-place under no_grad on a leaf that requires grad)
    return Case(f"prog {names}", [Operand(shape, dtype), Operand(shape, "float64")], fn)


# ---- dtype promotion ---------------------------------------------------------------------

PROMOTE_BINARY = {
    "add": lambda lib, a, b: a + b,
    "rsub": lambda lib, a, b: b - a,
    "mul": lambda lib, a, b: lib.mul(a, b),
    "div": lambda lib, a, b: a / b,
    "floordiv": lambda lib, a, b: a // b,
    "mod": lambda lib, a, b: a % b,
    "pow": lambda lib, a, b: a**b,
    "rpow": lambda lib, a, b: b**a,
    "maximum": lambda lib, a, b: lib.maximum(a, b) if not _scalar(b) else lib.clamp(a, min=b),
    "atan2": lambda lib, a, b: lib.atan2(a, b) if not _scalar(b) else a.atan2(lib.tensor(b)),
    "eq": lambda lib, a, b: a == b,
    "lt": lambda lib, a, b: b < a,
    "where": lambda lib, a, b: lib.where(a > 0, a, b),
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "bitwise_and": lambda lib, a, b: a & b,
    "bitwise_or": lambda lib, a, b: b | a,
    "logical_and": lambda lib, a, b: lib.logical_and(a, b) if not _scalar(b) else a,
    "true_divide": lambda lib, a, b: lib.true_divide(a, b),
    "sub_alpha": lambda lib, a, b: lib.sub(a, b, alpha=2) if not _scalar(b) else a - b,
    "add_alpha_float": lambda lib, a, b: lib.add(a, b, alpha=0.5) if not _scalar(b) else a + b,
    "mul_method": lambda lib, a, b: a.mul(b),
    "clamp_scalar": lambda lib, a, b: a.clamp(min=b) if _scalar(b) else a.clamp(max=b),
    "lerp": lambda lib, a, b: lib.lerp(a, b, 0.5) if not _scalar(b) else a,
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "hypot": lambda lib, a, b: lib.hypot(a, b) if not _scalar(b) else a,
    "float_power": lambda lib, a, b: lib.float_power(a, b),
    "heaviside": lambda lib, a, b: lib.heaviside(a, b) if not _scalar(b) else a,
}
PROMOTE_INPLACE = {
    "add_": lambda lib, a, b: a.add_(b),
    "sub_": lambda lib, a, b: a.sub_(b),
    "mul_": lambda lib, a, b: a.mul_(b),
    "div_": lambda lib, a, b: a.div_(b),
    "div_floor_": lambda lib, a, b: a.div_(b, rounding_mode="floor"),
    "div_trunc_": lambda lib, a, b: a.div_(b, rounding_mode="trunc"),
    "floor_divide_": lambda lib, a, b: a.floor_divide_(b),
    "remainder_": lambda lib, a, b: a.remainder_(b),
    "fmod_": lambda lib, a, b: a.fmod_(b),
    "pow_": lambda lib, a, b: a.pow_(b),
    "clamp_": lambda lib, a, b: a.clamp_(min=b),
    "clamp_max_": lambda lib, a, b: a.clamp_max_(b),
    "masked_fill_": lambda lib, a, b: a.masked_fill_(a > 0, b),
    "fill_": lambda lib, a, b: a.fill_(b),
    "copy_": lambda lib, a, b: a.copy_(b) if not _scalar(b) else a,
    "lerp_": lambda lib, a, b: a.lerp_(b, 0.5) if not _scalar(b) else a,
    "bitwise_and_": lambda lib, a, b: a.bitwise_and_(b),
    "logical_or_": lambda lib, a, b: a.logical_or_(b) if not _scalar(b) else a,
    "atan2_": lambda lib, a, b: a.atan2_(b) if not _scalar(b) else a,
    "addcmul_": lambda lib, a, b: a.addcmul_(b, b) if not _scalar(b) else a,
    "iadd": None,
    "isub": None,
    "imul": None,
    "itruediv": None,
    "ifloordiv": None,
    "imod": None,
    "ipow": None,
    "iand": None,
    "ior": None,
}
_AUG = {  # ``a op= b``: the operator module calls ``a.__iop__(b)``, as the statement does
    "iadd": operator.iadd,
    "isub": operator.isub,
    "imul": operator.imul,
    "itruediv": operator.itruediv,
    "ifloordiv": operator.ifloordiv,
    "imod": operator.imod,
    "ipow": operator.ipow,
    "iand": operator.iand,
    "ior": operator.ior,
}
PROMOTE_SCALARS = [2, -1, 0, 1.5, -0.5, True, False, 3.0]
_POW = ("pow", "rpow", "pow_", "ipow")
# xlogy's gradient in y at x = y = 0: retrograd's 0 for torch's 0 / 0 (see fuzz_cases)
_NO_ZERO = ("xlogy",)
_NONZERO = [-2.5, -1.5, -1.0, -0.5, 0.5, 1.0, 1.5, 2.5, 3.0, 0.3, -0.7]


def _scalar(b) -> bool:
    return isinstance(b, (bool, int, float))


def _promote_operands(rng):
    shape = rand_shape(rng, 0, 2)
    da = rand_dtype(rng)
    kind = str(rng.choice(["tensor", "zero_dim", "scalar"]))
    db = rand_dtype(rng)
    other = (
        Operand(shape if rng.random() < 0.5 else shape[1:], db)
        if kind == "tensor"
        else Operand((), db)
    )
    scalar = PROMOTE_SCALARS[int(rng.integers(len(PROMOTE_SCALARS)))]
    return shape, da, kind, other, scalar


for _name, _fn in PROMOTE_BINARY.items():

    def _make(name=_name, fn=_fn):
        @gen("promote_" + name)
        def g(rng):
            shape, da, kind, other, scalar = _promote_operands(rng)
            swap = bool(rng.random() < 0.3) and kind != "scalar"
            ops = [Operand(shape, da), other]
            if name in _NO_ZERO:
                for op in ops:
                    op.values = _NONZERO
            if name in _POW and isinstance(scalar, bool):
                # torch's pow gradient with a bool exponent is 0 * x ** -1 (NaN at 0) where
                # an int 0 gives 0: a quirk not copied
                scalar = int(scalar)

            def run(lib, a, b):
                if kind == "scalar":
                    return fn(lib, a, scalar)
                return fn(lib, b, a) if swap else fn(lib, a, b)

            return Case(f"promote {name} {kind} scalar={scalar!r} swap={swap}", ops, run)

    _make()

for _name, _fn in PROMOTE_INPLACE.items():

    def _make(name=_name, fn=_fn):
        @gen("promote_" + name)
        def g(rng):
            shape, da, kind, other, scalar = _promote_operands(rng)
            if name in _POW and isinstance(scalar, bool):
                scalar = int(scalar)  # (see the binary ops)

            def run(lib, a, b):
                a = a.clone()
                b = scalar if kind == "scalar" else b
                if name in _AUG:
                    return a, _AUG[name](a, b)
                return a, fn(lib, a, b)

            # torch's logical_or_ on a float tensor passes the gradient through unchanged (its
            # in-place form keeps the previous grad_fn): values only
            return Case(
                f"promote {name} {kind} scalar={scalar!r}",
                [Operand(shape, da), other],
                run,
                grad=name != "logical_or_",
            )

    _make()


# ---- reductions with unusual dims --------------------------------------------------------

RED_EDGES = {
    "sum": lambda lib, a, d, k: a.sum(d, keepdim=k),
    "mean": lambda lib, a, d, k: a.mean(d, keepdim=k),
    "amax": lambda lib, a, d, k: a.amax(d, keepdim=k),
    "amin": lambda lib, a, d, k: lib.amin(a, d, keepdim=k),
    "prod_int": lambda lib, a, d, k: a.prod(d[0] if isinstance(d, tuple) and d else 0, keepdim=k),
    "std": lambda lib, a, d, k: a.std(d, keepdim=k),
    "var_c0": lambda lib, a, d, k: a.var(d, correction=0, keepdim=k),
    "logsumexp": lambda lib, a, d, k: a.logsumexp(d, keepdim=k),
    "nansum": lambda lib, a, d, k: a.nansum(d, keepdim=k),
    "norm": lambda lib, a, d, k: a.norm(dim=d, keepdim=k),
    "vector_norm": lambda lib, a, d, k: lib.linalg.vector_norm(a, 3, dim=d, keepdim=k),
    "all": lambda lib, a, d, k: a.all(d, keepdim=k),
    "any": lambda lib, a, d, k: lib.any(a, d, keepdim=k),
    "count_nonzero": lambda lib, a, d, k: lib.count_nonzero(a, d),
    "max_dim": lambda lib, a, d, k: a.max(d[0] if isinstance(d, tuple) and d else 0, keepdim=k),
    "argmax": lambda lib, a, d, k: a.argmax(d[0] if isinstance(d, tuple) and d else 0, keepdim=k),
    "mean_dtype": lambda lib, a, d, k: a.mean(d, keepdim=k, dtype=lib.float64),
    # (detached: torch refuses an integer dtype for a sum that records gradients, where
    # retrograd returns the untracked integer sum)
    "sum_int_dtype": lambda lib, a, d, k: a.detach().sum(d, keepdim=k, dtype=lib.int64),
}


@gen("red_edges")
def _red_edges(rng):
    """Reductions over ``dim=()``, a list, repeated dims, out-of-range dims, on 0-d and
    empty tensors (torch's refusals included)."""
    shape = rand_shape(rng, 0, 3, zero=rng.random() < 0.4)
    n = len(shape)
    r = rng.random()
    if r < 0.2:
        dim = ()
    elif r < 0.35:
        dim = (rand_dim(rng, n),) * 2  # repeated
    elif r < 0.45:
        dim = max(n, 1) + int(rng.integers(0, 2))  # out of range
    elif r < 0.6:
        dim = [rand_dim(rng, n)]
    else:
        k = int(rng.integers(1, max(n, 1) + 1))
        dim = tuple(
            int(d) - (n if rng.random() < 0.5 else 0) for d in rng.permutation(max(n, 1))[:k]
        )
    keep = bool(rng.random() < 0.5)
    name = sorted(RED_EDGES)[int(rng.integers(len(RED_EDGES)))]
    if name in ("std", "var_c0") and dim == ():
        dim = None  # torch's gradient of var/std over dim=() is n times too large (a bug)
    if name == "logsumexp" and dim == () and n and not keep:
        dim = tuple(range(n))  # torch's logsumexp over dim=() fails its own shape check (a bug)
    fn = RED_EDGES[name]
    return Case(
        f"red_edges {name} dim={dim} keepdim={keep}",
        [Operand(shape, rand_dtype(rng))],
        lambda lib, a: fn(lib, a, dim, keep),
    )


# ---- advanced indexing combinations ------------------------------------------------------


def _combo_index(rng, shape):
    """An index mixing int arrays (1-d and 2-d, broadcasting), a bool mask over one or two
    dims, slices, None and Ellipsis, advanced indices adjacent or separated."""
    items, d, n = [], 0, len(shape)
    while d < n:
        size = shape[d]
        r = rng.random()
        if r < 0.3 and size:
            k = [int(rng.integers(1, 3)), int(rng.integers(1, 3))]
            arr = rng.integers(-size, size, k if rng.random() < 0.3 else k[:1])
            items.append(("long", arr.tolist()))
            d += 1
        elif r < 0.45:
            if d + 1 < n and rng.random() < 0.4:
                items.append(("mask", (rng.random(shape[d : d + 2]) < 0.5).tolist()))
                d += 2
            else:
                items.append(("mask", (rng.random(size) < 0.5).tolist()))
                d += 1
        elif r < 0.55:
            items.append(None)
        elif r < 0.65 and Ellipsis not in items:
            items.append(Ellipsis)
            d = n
        elif r < 0.75 and size:
            items.append(int(rng.integers(-size, size)))
            d += 1
        else:
            items.append(slice(int(rng.integers(0, 2)), None, int(rng.integers(1, 3))))
            d += 1
    if rng.random() < 0.15:
        items.append(("long", [0]))  # one index too many
    return items


def _realize_combo(lib, items):
    out = []
    for it in items:
        if isinstance(it, tuple):
            out.append(lib.tensor(it[1], dtype=lib.int64 if it[0] == "long" else lib.bool))
        else:
            out.append(it)
    return tuple(out)


@gen("index_combo")
def _index_combo(rng):
    torch = _torch()
    shape = rand_shape(rng, 1, 4)
    items = _combo_index(rng, shape)
    try:
        selected = tuple(torch.zeros(shape)[_realize_combo(torch, items)].shape)
    except (IndexError, RuntimeError):
        selected = (1,)
    mode = str(rng.choice(["get", "set", "set", "iadd", "index_put_acc", "set_scalar"]))
    if rng.random() < 0.5:
        vshape = tuple(1 if rng.random() < 0.3 else s for s in selected)
        vshape = vshape[int(rng.integers(0, len(vshape) + 1)) :]
    else:
        vshape = selected
    dt = rand_dtype(rng, ["float64", "float64", "float32", "int64"])

    def fn(lib, a, v):
        idx = _realize_combo(lib, items)
        if mode == "get":
            return a[idx]
        base = a * 1
        if mode == "set":
            base[idx] = v
        elif mode == "set_scalar":
            base[idx] = 2.5
        elif mode == "iadd":
            base[idx] += v
        else:
            longs = tuple(i for i in idx if isinstance(i, (torch.Tensor, rg.Tensor)))
            if len(longs) != len(idx) or any(_is_bool(i) for i in longs):
                base[idx] = v
            else:
                base.index_put_(longs, v, accumulate=True)
        return base

    return Case(
        f"index_combo {mode} {items} v{vshape}",
        [Operand(shape, dt), Operand(vshape, rand_dtype(rng, [dt, dt, "float64", "int64"]))],
        fn,
    )


def _is_bool(t) -> bool:
    return "bool" in str(t.dtype)


# ---- linear algebra ---------------------------------------------------------------------


def _spd(lib, m):
    """A symmetric positive-definite matrix from ``m`` (eigenvalues at least 1)."""
    n = m.shape[-1]
    return m @ m.mT + lib.eye(n, dtype=m.dtype)


def _well(lib, m):
    """A well-conditioned square matrix from ``m``: diagonally dominant."""
    n = m.shape[-1]
    return m + (n + 1.5) * lib.eye(n, dtype=m.dtype)


LINALG = {
    "inv": lambda lib, m, b: lib.linalg.inv(_well(lib, m)),
    "inv_method": lambda lib, m, b: _well(lib, m).inverse(),
    "det": lambda lib, m, b: lib.linalg.det(m),
    "det_method": lambda lib, m, b: _well(lib, m).det(),
    "slogdet": lambda lib, m, b: tuple(lib.linalg.slogdet(_well(lib, m) - 3 * m)),
    "logdet_spd": lambda lib, m, b: _spd(lib, m).logdet(),
    "solve": lambda lib, m, b: lib.linalg.solve(_well(lib, m), b),
    "solve_vec": lambda lib, m, b: lib.linalg.solve(_well(lib, m), b[..., 0]),
    "solve_right": lambda lib, m, b: lib.linalg.solve(_well(lib, m), b.mT, left=False),
    "cholesky": lambda lib, m, b: lib.linalg.cholesky(_spd(lib, m)),
    "cholesky_upper": lambda lib, m, b: lib.linalg.cholesky(_spd(lib, m), upper=True),
    "qr_r_abs": lambda lib, m, b: lib.linalg.qr(_well(lib, m)).R.diagonal(0, -2, -1).abs(),
    "qr_product": lambda lib, m, b: _qr_product(lib, b),
    "eigh_values": lambda lib, m, b: lib.linalg.eigh(_spd(lib, m)).eigenvalues,
    "eigvalsh": lambda lib, m, b: lib.linalg.eigvalsh(_spd(lib, m), UPLO="U"),
    "eigh_projector": lambda lib, m, b: _eigh_projector(lib, m),
    "svdvals": lambda lib, m, b: lib.linalg.svdvals(_well(lib, m)),
    "svdvals_rect": lambda lib, m, b: lib.linalg.svdvals(b),
    "nuc_norm": lambda lib, m, b: lib.linalg.matrix_norm(_well(lib, m), "nuc"),
    "spectral_norm": lambda lib, m, b: lib.linalg.matrix_norm(_well(lib, m), 2),
    "neg_spectral_norm": lambda lib, m, b: lib.linalg.matrix_norm(_well(lib, m), -2),
    "cond": lambda lib, m, b: lib.linalg.cond(_well(lib, m)),
    "pinv_rect": lambda lib, m, b: lib.linalg.pinv(b.mT @ b + lib.eye(b.shape[-1], dtype=b.dtype)),
    "matrix_power_neg": lambda lib, m, b: lib.linalg.matrix_power(_well(lib, m), -2),
    "matrix_power_3": lambda lib, m, b: lib.linalg.matrix_power(m, 3),
    "matrix_exp": lambda lib, m, b: lib.linalg.matrix_exp(m * 0.5),
    "solve_triangular": lambda lib, m, b: lib.linalg.solve_triangular(
        _well(lib, m).triu(), b, upper=True
    ),
    "solve_triangular_unit": lambda lib, m, b: lib.linalg.solve_triangular(
        m.tril(), b, upper=False, unitriangular=True
    ),
    "lstsq": lambda lib, m, b: lib.linalg.lstsq(_well(lib, m), b).solution,
    "inv_singular": lambda lib, m, b: lib.linalg.inv(m * 0),
    "cholesky_not_pd": lambda lib, m, b: lib.linalg.cholesky(-_spd(lib, m)),
    "solve_singular": lambda lib, m, b: lib.linalg.solve(m * 0, b),
    "det_rect": lambda lib, m, b: lib.linalg.det(b),
    "inv_rect": lambda lib, m, b: lib.linalg.inv(b),
    "multi_dot": lambda lib, m, b: lib.linalg.multi_dot(
        [m[0] if m.ndim > 2 else m, b[0] if b.ndim > 2 else b, (b[0] if b.ndim > 2 else b).mT]
    ),
    "vecdot": lambda lib, m, b: lib.linalg.vecdot(m, m.flip(-1), dim=-1),
    "trace": lambda lib, m, b: (m[0] if m.ndim > 2 else m).trace(),
}


def _qr_product(lib, b):
    q, r = lib.linalg.qr(b)
    return q @ r, q.mT @ q


def _eigh_projector(lib, m):
    # distinct eigenvalues (a spread diagonal): the projector on each eigenvector is
    # sign-free
    n = m.shape[-1]
    a = m + m.mT + lib.diag(lib.arange(n, dtype=m.dtype) * 3.0)
    vals, vecs = lib.linalg.eigh(a)
    return vals, vecs * vecs


@gen("linalg_grad")
def _linalg_grad(rng):
    n = int(rng.integers(1, 4))
    k = int(rng.integers(1, 4))
    batch = () if rng.random() < 0.6 else (int(rng.integers(1, 3)),)
    name = sorted(LINALG)[int(rng.integers(len(LINALG)))]
    dt = "float64" if rng.random() < 0.85 else "float32"
    rows = (
        n
        if name not in ("qr_product", "svdvals_rect", "pinv_rect", "det_rect", "inv_rect")
        else int(rng.integers(1, 5))
    )
    m = Operand(batch + (n, n), dt, values=[-0.5, 0.3, 0.7, -0.2, 0.1, 0.9, -0.8])
    b = Operand(batch + (rows, k if name not in ("inv_rect", "det_rect") else rows + 1), dt)
    fn = LINALG[name]
    return Case(
        f"linalg {name} n={n} k={k} batch={batch}",
        [m, b],
        lambda lib, x, y: fn(lib, x, y),
        rtol=1e-7 if dt == "float64" else 1e-4,
    )


# ---- special functions near their edges -------------------------------------------------

SPECIAL_VALUES = [
    0.5, 1.0, 2.0, 1e-8, -1e-8, 0.0, -0.5, -1.5, -2.5, 3.7, 10.0, 25.0, -0.9, 0.999, -0.999,
    1e-3, 1.5, 100.0, -10.3, 0.1,
]  # fmt: skip
SPECIAL_OPS = {
    "lgamma": lambda lib, a, b: a.lgamma(),
    "digamma": lambda lib, a, b: lib.digamma(a),
    "polygamma1": lambda lib, a, b: lib.polygamma(1, a),
    "polygamma2": lambda lib, a, b: a.polygamma(2),
    "polygamma3": lambda lib, a, b: lib.special.polygamma(3, a),
    "mvlgamma": lambda lib, a, b: lib.mvlgamma(a.abs() + 2.0, 2),
    "multigammaln": lambda lib, a, b: lib.special.multigammaln(a.abs() + 1.5, 3),
    "erf": lambda lib, a, b: lib.special.erf(a),
    "erfc": lambda lib, a, b: a.erfc(),
    "erfinv": lambda lib, a, b: lib.erfinv(a),
    "erfcx": lambda lib, a, b: lib.special.erfcx(a),
    "i0": lambda lib, a, b: lib.i0(a),
    "i0e": lambda lib, a, b: lib.special.i0e(a),
    "i1": lambda lib, a, b: lib.special.i1(a),
    "i1e": lambda lib, a, b: lib.special.i1e(a),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "xlogy_scalar": lambda lib, a, b: lib.xlogy(a, 2.0),
    "special_xlogy": lambda lib, a, b: lib.special.xlogy(a, b.abs() + 0.5),
    "xlog1py": lambda lib, a, b: lib.special.xlog1py(a, b.abs()),
    "sinc": lambda lib, a, b: lib.sinc(a),
    "logit": lambda lib, a, b: lib.logit(a),
    "logit_eps": lambda lib, a, b: lib.logit(a, eps=0.01),
    "logit_eps_big": lambda lib, a, b: a.logit(0.3),
    "special_logit": lambda lib, a, b: lib.special.logit(a, eps=1e-6),
    "expit": lambda lib, a, b: lib.special.expit(a),
    "ndtr": lambda lib, a, b: lib.special.ndtr(a),
    "log_ndtr": lambda lib, a, b: lib.special.log_ndtr(a),
    "ndtri": lambda lib, a, b: lib.special.ndtri(a),
    "gammaln": lambda lib, a, b: lib.special.gammaln(a),
    "psi": lambda lib, a, b: lib.special.psi(a),
    "entr": lambda lib, a, b: lib.special.entr(a),
    "sinc_special": lambda lib, a, b: lib.special.sinc(a),
    "log1p": lambda lib, a, b: lib.special.log1p(a),
    "expm1": lambda lib, a, b: lib.special.expm1(a),
    "exp2": lambda lib, a, b: lib.special.exp2(a),
    "logsumexp": lambda lib, a, b: lib.special.logsumexp(a, -1) if a.ndim else a,
    "softmax": lambda lib, a, b: lib.special.softmax(a, 0) if a.ndim else a,
    "zeta": lambda lib, a, b: lib.special.zeta(a.abs() + 1.5, b.abs() + 0.5),
    "gammainc": lambda lib, a, b: lib.special.gammainc(a.abs() + 0.5, b.abs()),
    "gammaincc": lambda lib, a, b: lib.special.gammaincc(a.abs() + 0.5, b.abs()),
    "lgamma_neg": lambda lib, a, b: (a - 0.5).floor().lgamma(),
}
# digamma and polygamma at the poles (0, -1, -2...): torch's values there are garbage
# (its trigamma is finite); the pools hold no non-positive integer for them
_NO_POLES = ("digamma", "polygamma1", "polygamma2", "polygamma3", "psi")


@gen("special_edges")
def _special_edges(rng):
    shape = rand_shape(rng, 0, 2)
    name = sorted(SPECIAL_OPS)[int(rng.integers(len(SPECIAL_OPS)))]
    pool = SPECIAL_VALUES
    if name in _NO_POLES:
        pool = [v for v in pool if not (v <= 0 and float(v).is_integer())]
    if name.startswith("sinc"):  # torch's sinc slope loses every digit at |x| ~ 1e-8
        pool = [v for v in pool if abs(v) != 1e-8]
    if "xlog" in name:
        # xlogy at x = 0: retrograd's 0 for torch's 0 / 0 in the gradient at y = 0 (see
        # fuzz_cases), and torch's second derivatives at y < 0 are not symmetric (1 / y
        # through the gradient in y, 0 through the one in x)
        pool = [v for v in pool if v != 0.0]
    dt = "float64" if rng.random() < 0.75 else rand_dtype(rng, ["float32", "int64", "bool"])
    if name in _NO_POLES and dt in ("int64", "bool"):
        dt = "float32"  # (an integer or bool input lands on the poles, -10 or 0)
    fn = SPECIAL_OPS[name]
    return Case(
        f"special {name}",
        [Operand(shape, dt, values=pool), Operand(shape, "float64", values=pool)],
        lambda lib, a, b: fn(lib, a, b),
        rtol=1e-7 if dt == "float64" else 1e-4,
    )


# ---- nn.functional argument grids (second set) ------------------------------------------


def _f(lib):
    return lib.nn.functional


@gen("nnf2_conv")
def _nnf2_conv(rng):
    """conv3d and conv_transpose3d; conv modules with each padding_mode."""
    torch = _torch()
    which = str(rng.choice(["conv3d", "conv_transpose3d", "module"]))
    groups = int(rng.choice([1, 1, 2]))
    cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    if which == "module":
        nd = int(rng.integers(1, 4))
        mode = str(rng.choice(["zeros", "reflect", "replicate", "circular"]))
        k = int(rng.integers(1, 4))
        spatial = tuple(int(rng.integers(k, 6)) for _ in range(nd))
        pad = rng.choice(["same", "valid", 0, 1, 2])
        pad = (
            str(pad)
            if pad in ("same", "valid")
            else min(int(pad), k - 1 if mode == "reflect" else 2)
        )
        stride = 1 if pad == "same" else int(rng.integers(1, 3))
        dil = int(rng.integers(1, 3))
        x_shape = (int(rng.integers(1, 3)), cin) + spatial
        w_shape = (cout, cin // groups) + (k,) * nd
        bias = bool(rng.random() < 0.5)

        def fn(lib, x, w, b):
            m = getattr(lib.nn, f"Conv{nd}d")(
                cin, cout, k, stride=stride, padding=pad, dilation=dil, groups=groups,
                bias=bias, padding_mode=mode, dtype=getattr(lib, dt),
            )  # fmt: skip
            if lib is torch:
                with torch.no_grad():
                    m.weight.copy_(w)
                    if bias:
                        m.bias.copy_(b)
                return m(x)
            m.load_state_dict({"weight": w.detach(), **({"bias": b.detach()} if bias else {})})
            return m(x)

        # (module parameters are not the fuzzer's leaves: only x's gradient compares)
        return Case(
            f"Conv{nd}d mode={mode} k={k} p={pad} s={stride} d={dil} g={groups} x{x_shape}",
            [Operand(x_shape, dt), Operand(w_shape, dt), Operand((cout,), dt)],
            fn,
            rtol=1e-4 if dt == "float32" else None,
        )
    k = tuple(int(rng.integers(1, 3)) for _ in range(3))
    spatial = tuple(int(rng.integers(1, 4)) for _ in range(3))
    stride, dil = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    x_shape = (1, cin) + spatial
    if which == "conv3d":
        pad = rng.choice(["same", "valid", 0, 1])
        pad = str(pad) if pad in ("same", "valid") else int(pad)
        stride = 1 if pad == "same" else stride
        w_shape = (cout, cin // groups) + k

        def fn(lib, x, w, b):
            return _f(lib).conv3d(x, w, b, stride=stride, padding=pad, dilation=dil, groups=groups)

        name = f"conv3d s={stride} p={pad} d={dil} g={groups}"
    else:
        pad = int(rng.integers(0, 2))
        opad = int(rng.integers(0, max(stride, dil)))
        w_shape = (cin, cout // groups) + k
        dt = "float64"  # (an empty output: see nnf_conv)

        def fn(lib, x, w, b):
            return _f(lib).conv_transpose3d(
                x, w, b, stride=stride, padding=pad, output_padding=opad, groups=groups,
                dilation=dil,
            )  # fmt: skip

        name = f"conv_transpose3d s={stride} p={pad} op={opad} d={dil} g={groups}"
    return Case(
        f"{name} x{x_shape} w{w_shape}",
        [Operand(x_shape, dt), Operand(w_shape, dt), Operand((cout,), dt)],
        fn,
        rtol=1e-4 if dt == "float32" else None,
    )


@gen("nnf2_unpool")
def _nnf2_unpool(rng):
    """max_pool with return_indices, then max_unpool (output_size too)."""
    nd = int(rng.integers(1, 4))
    k = int(rng.integers(1, 4))
    s = [None, 1, 2][int(rng.integers(3))]
    p = int(rng.integers(0, k // 2 + 1))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) + tuple(
        int(rng.integers(k, 6)) for _ in range(nd)
    )
    give_size = bool(rng.random() < 0.4)
    dt = rand_dtype(rng, ["float64", "float64", "float32"])

    def fn(lib, x):
        f = _f(lib)
        y, idx = getattr(f, f"max_pool{nd}d")(x, k, s, p, return_indices=True)
        kw = {"output_size": x.shape[-nd:]} if give_size else {}
        return getattr(f, f"max_unpool{nd}d")(y, k, s, p, **kw), idx

    return Case(
        f"max_unpool{nd}d k={k} s={s} p={p} size={give_size} {shape}",
        [Operand(shape, dt, distinct=True)],
        fn,
    )


@gen("nnf2_embedding")
def _nnf2_embedding(rng):
    """embedding with padding_idx (negative too) and max_norm (which renormalizes the
    weight rows it looks up, in place)."""
    num, dim = int(rng.integers(2, 6)), int(rng.integers(1, 4))
    idx_shape = rand_shape(rng, 1, 2, zero=False)
    kw: dict = {}
    if rng.random() < 0.5:
        kw["padding_idx"] = int(rng.integers(-num, num))
    if rng.random() < 0.6:
        kw["max_norm"] = [0.5, 1.0, 2.0][int(rng.integers(3))]
        kw["norm_type"] = [1.0, 2.0, 3.0][int(rng.integers(3))]
    if rng.random() < 0.2:
        kw["scale_grad_by_freq"] = True

    def fn(lib, i, w):
        w = w * 1  # (max_norm writes the weight: not a leaf)
        out = _f(lib).embedding(i, w, **kw)
        return out, w

    return Case(
        f"embedding {kw}",
        [Operand(idx_shape, "int64", values=list(range(num))), Operand((num, dim), "float64")],
        fn,
    )


@gen("nnf2_norm")
def _nnf2_norm(rng):
    """batch_norm and instance_norm with and without running statistics and affine
    parameters, in training and eval; group_norm and layer_norm with weight/bias or not."""
    which = str(rng.choice(["batch", "instance", "group", "layer"]))
    n, c = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    spatial = tuple(int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3))))
    if which in ("instance",) and not spatial:
        spatial = (int(rng.integers(2, 4)),)
    shape = (n, c) + spatial
    training = bool(rng.random() < 0.6)
    stats = bool(rng.random() < 0.6)
    affine = bool(rng.random() < 0.6)
    momentum = [0.1, 0.5, None][int(rng.integers(3))]
    eps = [1e-5, 0.1][int(rng.integers(2))]
    dt = rand_dtype(rng, ["float64", "float64", "float32"])

    def fn(lib, x, w, b):
        f = _f(lib)
        rm = lib.zeros(c, dtype=x.dtype) + 0.5 if stats else None
        rv = lib.ones(c, dtype=x.dtype) * 2.0 if stats else None
        ww, bb = (w, b) if affine else (None, None)
        if which == "batch":
            out = f.batch_norm(x, rm, rv, ww, bb, training, momentum or 0.0, eps)
        elif which == "instance":
            out = f.instance_norm(
                x, rm, rv, ww, bb, use_input_stats=training, momentum=momentum or 0.0, eps=eps
            )
        elif which == "group":
            g = [d for d in (1, 2, c) if c % d == 0][len(spatial) % 2]
            return f.group_norm(x, g, ww, bb, eps)
        else:
            return f.layer_norm(x, x.shape[1:2], ww, bb if rng_bias else None, eps)
        return (out, rm, rv) if stats else out

    rng_bias = bool(rng.random() < 0.5)
    return Case(
        f"{which}_norm train={training} stats={stats} affine={affine} m={momentum} {shape}",
        [Operand(shape, dt), Operand((c,), dt), Operand((c,), dt)],
        fn,
        rtol=1e-7 if dt == "float64" else 1e-4,
    )


@gen("nnf2_loss")
def _nnf2_loss(rng):
    """Losses with weight, ignore_index, label_smoothing, probability targets, pos_weight,
    each reduction, on [N, C] and [N, C, d] inputs."""
    n, c = int(rng.integers(1, 4)), int(rng.integers(2, 5))
    extra = () if rng.random() < 0.6 else (int(rng.integers(1, 3)),)
    red = str(rng.choice(["mean", "sum", "none"]))
    weighted = bool(rng.random() < 0.5)
    ls = [0.0, 0.1, 0.5][int(rng.integers(3))]
    ignore = [-100, 0, 1][int(rng.integers(3))]
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    which = str(
        rng.choice(
            [
                "ce",
                "ce_probs",
                "nll",
                "bce",
                "bce_logits",
                "multilabel_soft_margin",
                "margin_ranking",
                "cosine_embedding",
                "multi_margin",
                "multilabel_margin",
                "poisson_nll",
                "gaussian_nll",
                "kl_div",
                "triplet",
            ]
        )
    )
    x = Operand((n, c) + extra, dt)
    tgt_vals = list(range(c)) + ([ignore] if ignore < 0 else [])
    t = Operand((n,) + extra, "int64", values=tgt_vals)
    p = Operand((n, c) + extra, dt, positive=True)
    w = Operand((c,), dt, positive=True)

    def fn(lib, x, t, p, w):
        f = _f(lib)
        # (class weights detached: torch has no derivative in the weight of nll_loss, bce
        # or multi_margin_loss and refuses one that requires grad; retrograd gives it)
        ww = w.detach() if weighted else None
        if which == "ce":
            return f.cross_entropy(x, t, weight=ww, ignore_index=ignore, reduction=red,
                                   label_smoothing=ls)  # fmt: skip
        if which == "ce_probs":
            q = p / p.sum(1, keepdim=True)
            return f.cross_entropy(x, q, weight=ww, reduction=red, label_smoothing=ls)
        if which == "nll":
            return f.nll_loss(x.log_softmax(1), t, weight=ww, ignore_index=ignore, reduction=red)
        if which == "bce":
            q = p / (p + 1)
            wb = w.detach() if weighted and not extra else None
            return f.binary_cross_entropy(x.sigmoid(), q, weight=wb, reduction=red)
        if which == "bce_logits":
            q = p / (p + 1)
            pw = w if weighted and not extra else None
            # (pos_weight detached too: torch refuses one that requires grad)
            wd = None if pw is None else pw.detach()
            return f.binary_cross_entropy_with_logits(x, q, weight=wd, pos_weight=wd, reduction=red)
        if which == "multilabel_soft_margin":
            xs, ps = (x[:, :, 0], p[:, :, 0]) if extra else (x, p)
            return f.multilabel_soft_margin_loss(xs, (ps > 1).to(x.dtype), weight=ww, reduction=red)
        if which == "margin_ranking":
            return f.margin_ranking_loss(x, p, (x > 0).to(x.dtype) * 2 - 1, margin=0.3,
                                         reduction=red)  # fmt: skip
        if which == "cosine_embedding":
            xs = x[:, :, 0] if extra else x
            ps = p[:, :, 0] if extra else p
            y = (t[:, 0] if extra else t) % 2 * 2 - 1
            return f.cosine_embedding_loss(xs, ps, y, margin=0.2, reduction=red)
        if which == "multi_margin":
            xs = x[:, :, 0] if extra else x
            ts = (t[:, 0] if extra else t).clamp(0, c - 1)
            return f.multi_margin_loss(xs, ts, p=1 + int(ls > 0), margin=0.7, weight=ww,
                                       reduction=red)  # fmt: skip
        if which == "multilabel_margin":
            xs = x[:, :, 0] if extra else x
            tm = (t[:, :1] if extra else t[:, None]).clamp(-1, c - 1).expand(n, c).contiguous()
            tm[:, -1] = -1
            return f.multilabel_margin_loss(xs, tm, reduction=red)
        if which == "poisson_nll":
            return f.poisson_nll_loss(x.exp() if ls else x, p, log_input=not ls, full=weighted,
                                      reduction=red)  # fmt: skip
        if which == "gaussian_nll":
            return f.gaussian_nll_loss(x, p, p * 0.5 + 0.1, full=weighted, reduction=red)
        if which == "kl_div":
            red2 = "batchmean" if red == "mean" else red
            return f.kl_div(x.log_softmax(1), p / p.sum(1, keepdim=True), reduction=red2)
        return f.triplet_margin_loss(x, p, x.flip(0), margin=0.5, p=1.0 + ls * 2, swap=weighted,
                                     reduction=red)  # fmt: skip

    return Case(
        f"loss {which} red={red} w={weighted} ls={ls} ignore={ignore} x{x.shape}",
        [x, t, p, w],
        fn,
        rtol=1e-7 if dt == "float64" else 1e-4,
    )


@gen("nnf2_interpolate")
def _nnf2_interpolate(rng):
    """3-d interpolation (trilinear, nearest, nearest-exact, area) with scale factors per
    axis. (antialias=True is refused, a documented limitation: not drawn.)"""
    mode = str(rng.choice(["trilinear", "nearest", "nearest-exact", "area"]))
    nd = 3
    shape = (1, int(rng.integers(1, 3))) + tuple(int(rng.integers(1, 5)) for _ in range(nd))
    kw: dict = {}
    if rng.random() < 0.5:
        kw["size"] = tuple(int(rng.integers(1, 6)) for _ in range(nd))
    else:
        kw["scale_factor"] = tuple(
            [0.5, 1.5, 2.0, 1.0, 0.75][int(rng.integers(5))] for _ in range(nd)
        )
        if mode == "area":
            kw["scale_factor"] = tuple(max(s, 1.0) for s in kw["scale_factor"])
        if rng.random() < 0.5:
            kw["recompute_scale_factor"] = bool(rng.random() < 0.5)
    if mode == "trilinear" and rng.random() < 0.5:
        kw["align_corners"] = bool(rng.random() < 0.5)
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    return Case(
        f"interpolate {mode} {shape} {kw}",
        [Operand(shape, dt)],
        lambda lib, x: _f(lib).interpolate(x, mode=mode, **kw),
        rtol=1e-4 if dt == "float32" else None,
    )


_ = (math, FLOATS)


# ---- random compositions (for second derivatives) ---------------------------------------

COMPOSE_UNARY = {
    "sin": lambda lib, a: a.sin(),
    "tanh": lambda lib, a: a.tanh(),
    "sigmoid": lambda lib, a: a.sigmoid(),
    "exp_small": lambda lib, a: (a * 0.3).exp(),
    "log_soft": lambda lib, a: (a * a + 1.0).log(),
    "sqrt_soft": lambda lib, a: (a * a + 0.5).sqrt(),
    "softplus": lambda lib, a: lib.nn.functional.softplus(a),
    "gelu": lambda lib, a: lib.nn.functional.gelu(a),
    "gelu_tanh": lambda lib, a: lib.nn.functional.gelu(a, approximate="tanh"),
    "silu": lambda lib, a: lib.nn.functional.silu(a),
    "mish": lambda lib, a: lib.nn.functional.mish(a),
    "elu": lambda lib, a: lib.nn.functional.elu(a * 1.1 + 0.05),
    "softmax": lambda lib, a: a.softmax(-1),
    "log_softmax": lambda lib, a: a.log_softmax(0),
    "logsumexp": lambda lib, a: a.logsumexp(-1, keepdim=True) * a,
    "cumprod": lambda lib, a: a.cumprod(-1),
    "cumsum": lambda lib, a: a.cumsum(0),
    "norm_scale": lambda lib, a: a / (a.norm(dim=-1, keepdim=True) + 1.0),
    "var": lambda lib, a: a - a.var(-1, keepdim=True),
    "pow3": lambda lib, a: a**3,
    "reciprocal_soft": lambda lib, a: (a * a + 1.0).reciprocal(),
    "atan": lambda lib, a: a.atan(),
    "erf": lambda lib, a: a.erf(),
    "lgamma_soft": lambda lib, a: (a * a + 0.5).lgamma(),
    "digamma_soft": lambda lib, a: (a * a + 0.5).digamma(),
    "transpose_mix": lambda lib, a: a.mT @ a if a.ndim >= 2 else a * a,
    "layer_norm": lambda lib, a: lib.nn.functional.layer_norm(a, a.shape[-1:]),
    "normalize": lambda lib, a: lib.nn.functional.normalize(a, dim=-1),
    "flip_mul": lambda lib, a: a * a.flip(0),
    # (not logcumsumexp: torch's second derivative of it is wrong once the incoming
    # gradient depends on the input, e.g. under a square; finite differences side with
    # retrograd's)
    "sinc": lambda lib, a: lib.sinc(a * 0.7 + 0.31),
    "xlogy_pos": lambda lib, a: lib.xlogy(a, a * a + 0.5),
    "hypot": lambda lib, a: lib.hypot(a, a.flip(-1) + 2.0),
    "atan2": lambda lib, a: lib.atan2(a, a * a + 1.0),
    "rsqrt_soft": lambda lib, a: (a * a + 0.25).rsqrt(),
    "logit_soft": lambda lib, a: lib.logit(a.sigmoid() * 0.8 + 0.1),
}
COMPOSE_BINARY = {
    "mul": lambda lib, a, b: a * b,
    "div_soft": lambda lib, a, b: a / (b * b + 1.0),
    "matmul": lambda lib, a, b: a @ b.mT if a.ndim >= 2 else a * b,
    "pow_soft": lambda lib, a, b: (a * a + 0.5) ** (b * 0.5),
    "maximum": lambda lib, a, b: lib.maximum(a, b * 0.9 + 0.01),
    "where": lambda lib, a, b: lib.where(a > b, a * b, a - b),
    "lerp": lambda lib, a, b: lib.lerp(a, b, a.sigmoid()),
    "logaddexp": lambda lib, a, b: lib.logaddexp(a, b),
    "addcdiv": lambda lib, a, b: a.addcdiv(b, a * a + 1.0, value=0.5),
    "bilinear_form": lambda lib, a, b: (a * b).sum(-1, keepdim=True) * a,
}


@gen("compose_chain")
def _compose_chain(rng):
    """A random composition of 2 to 5 smooth ops on two float64 [m, n] leaves (differentiated
    twice by the second-order test)."""
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    steps = []
    for _ in range(int(rng.integers(2, 6))):
        if rng.random() < 0.6:
            steps.append(("u", str(rng.choice(sorted(COMPOSE_UNARY))), int(rng.integers(0, 100))))
        else:
            steps.append(("b", str(rng.choice(sorted(COMPOSE_BINARY))), int(rng.integers(0, 100))))

    def fn(lib, x, y):
        values = [x, y]
        for kind, name, r in steps:
            a = values[-1]
            if kind == "u":
                values.append(COMPOSE_UNARY[name](lib, a))
            else:
                b = values[r % len(values)]
                if b.shape != a.shape:
                    b = b.sum() * 0.1 + y
                values.append(COMPOSE_BINARY[name](lib, a, b))
        return values[-1]

    return Case(
        "compose " + " ".join(n for _, n, _ in steps),
        [Operand(shape, "float64"), Operand(shape, "float64")],
        fn,
        rtol=1e-6,
    )


# ---- einsum equations ---------------------------------------------------------------------

EINSUM = [
    "ii->i", "ii", "ij->ji", "ij,jk->ik", "ij,ij->", "i,j->ij", "bij,bjk->bik",
    "...ij,...jk->...ik", "ij->", "iij->j", "ijk->kji", "i,i->i", "ij,j->i", "ab,cd->abcd",
    "aab->ab", "i,i,i->", "...i,...i->...", "ij,kj->ik", "ij,jk", "ba,ab", "i...->...",
    "bn,anm,bm->ba", "ij,ij->ij", "ii->", "ijj->ij", "a,a->", "...,...->...", "i->",
]  # fmt: skip


def _einsum_shapes(rng, equation):
    lhs = equation.split("->")[0]
    sizes = {c: int(rng.choice([0, 1, 2, 3], p=[0.05, 0.25, 0.35, 0.35])) for c in "abcdijkmn"}
    ellipsis = tuple(int(rng.integers(1, 3)) for _ in range(int(rng.integers(0, 3))))
    shapes = []
    for term in lhs.split(","):
        dims = []
        for part in term.split("..."):
            dims.append(tuple(sizes[c] for c in part))
        shape = dims[0] + (ellipsis + dims[1] if len(dims) > 1 else ())
        if len(dims) > 1 and ellipsis and rng.random() < 0.3:  # a broadcast ellipsis
            shape = dims[0] + (1,) * len(ellipsis) + dims[1]
        shapes.append(shape)
    return shapes


@gen("einsum_eq")
def _einsum_eq(rng):
    """einsum: traces, diagonals, repeated letters, ellipses that broadcast, implicit
    outputs, three operands, dtypes mixed (torch refuses some mixes)."""
    equation = EINSUM[int(rng.integers(len(EINSUM)))]
    shapes = _einsum_shapes(rng, equation)
    if rng.random() < 0.1 and len(shapes) > 1:  # a size mismatch: both refuse
        shapes[0] = shapes[0][:-1] + (shapes[0][-1] + 1,) if shapes[0] else (1,)
    dt = rand_dtype(rng, ["float64", "float64", "float32", "int64"])
    mixed = rng.random() < 0.1 and not any(0 in s for s in shapes)
    # (not mixed with an empty operand: torch's batched kernels skip their dtype check then,
    # see matmul in fuzz_cases)
    ops = [Operand(s, "float64" if mixed and k == 0 else dt) for k, s in enumerate(shapes)]
    return Case(
        f"einsum {equation} {shapes}",
        ops,
        lambda lib, *xs: lib.einsum(equation, *xs),
        rtol=1e-5 if dt == "float32" else None,
    )


# ---- grid_sample, affine_grid, 3-d pooling, pixel shuffles ------------------------------


@gen("nnf2_grid_sample")
def _nnf2_grid_sample(rng):
    """grid_sample's modes, padding modes and align_corners on 4-d inputs (5-d inputs and
    mode 'bicubic' are refused, documented limitations)."""
    nd = 2
    mode = str(rng.choice(["bilinear", "nearest"]))
    pad = str(rng.choice(["zeros", "border", "reflection"]))
    align = bool(rng.random() < 0.5)
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    spatial = tuple(int(rng.integers(1, 5)) for _ in range(nd))
    out = tuple(int(rng.integers(1, 4)) for _ in range(nd))
    grid = Operand(
        (n, *out, nd), "float64", values=[-1.3, -1.0, -0.6, -0.25, 0.0, 0.3, 0.55, 1.0, 1.2, 0.8]
    )
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    if dt == "float32":
        grid.dtype = "float32"
    return Case(
        f"grid_sample{nd}d {mode} {pad} align={align} x{(n, c, *spatial)} out{out}",
        [Operand((n, c, *spatial), dt), grid],
        lambda lib, x, g: _f(lib).grid_sample(
            x, g, mode=mode, padding_mode=pad, align_corners=align
        ),
        rtol=1e-4 if dt == "float32" else 1e-7,
    )


@gen("nnf2_affine_grid")
def _nnf2_affine_grid(rng):
    nd = 2 if rng.random() < 0.7 else 3
    n = int(rng.integers(1, 3))
    size = (n, int(rng.integers(1, 3))) + tuple(int(rng.integers(1, 4)) for _ in range(nd))
    align = bool(rng.random() < 0.5)
    sample = bool(rng.random() < 0.5) and nd == 2  # (5-d grid_sample: see above)

    def fn(lib, theta, x):
        grid = _f(lib).affine_grid(theta, size, align_corners=align)
        if sample:
            return _f(lib).grid_sample(x, grid, align_corners=align)
        return grid

    return Case(
        f"affine_grid{nd}d size={size} align={align} sample={sample}",
        # (values that put no sampling point exactly on a pixel: the bilinear gradient there
        # takes one side or the other with the last bit of the coordinate)
        [
            Operand(
                (n, nd, nd + 1), "float64", values=[0.37, -0.83, 1.21, 0.59, -0.26, 0.91, -1.13]
            ),
            Operand(size, "float64"),
        ],
        fn,
    )


@gen("nnf2_pool3d")
def _nnf2_pool3d(rng):
    """3-d pooling (max with dilation and indices, avg with divisor_override and
    count_include_pad, adaptive, lp) and pixel/channel shuffles."""
    which = str(rng.choice(["max", "avg", "adaptive_max", "adaptive_avg", "lp", "shuffle"]))
    k, s = int(rng.integers(1, 3)), [None, 1, 2][int(rng.integers(3))]
    p = int(rng.integers(0, k // 2 + 1))
    ceil = bool(rng.random() < 0.5)
    shape = (1, int(rng.integers(1, 3))) + tuple(int(rng.integers(1, 5)) for _ in range(3))
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    op = Operand(shape, dt, distinct=which in ("max", "adaptive_max"))
    f = _f
    if which == "max":
        dil = int(rng.integers(1, 3))
        p = 0 if dil > 1 else p  # (see nnf_pool: torch's backward there corrupts its heap)
        fn = lambda lib, x: f(lib).max_pool3d(x, k, s, p, dil, ceil_mode=ceil, return_indices=True)  # noqa: E731
        name = f"max_pool3d k={k} s={s} p={p} d={dil} ceil={ceil}"
    elif which == "avg":
        kw = {"ceil_mode": ceil, "count_include_pad": bool(rng.random() < 0.5)}
        if rng.random() < 0.4:
            kw["divisor_override"] = int(rng.integers(1, 4))
        fn = lambda lib, x: f(lib).avg_pool3d(x, k, s, p, **kw)  # noqa: E731
        name = f"avg_pool3d k={k} s={s} p={p} {kw}"
    elif which.startswith("adaptive"):
        out = tuple(int(rng.integers(1, 4)) for _ in range(3))
        if rng.random() < 0.3:
            out = (out[0], None, out[2])
        fn = lambda lib, x: getattr(f(lib), f"{which}_pool3d")(x, out)  # noqa: E731
        name = f"{which}_pool3d out={out}"
    elif which == "lp":
        norm = [1.0, 2.0][int(rng.integers(2))]
        op.values = [0.5, 1.0, 2.0, 1.5]
        fn = lambda lib, x: f(lib).lp_pool3d(x, norm, k, s, ceil_mode=ceil)  # noqa: E731
        name = f"lp_pool3d p={norm} k={k} s={s} ceil={ceil}"
    else:
        r = int(rng.integers(1, 3))
        kind = str(rng.choice(["pixel_shuffle", "pixel_unshuffle", "channel_shuffle"]))
        c = int(rng.integers(1, 3)) * (r * r if kind == "pixel_shuffle" else r)
        shape = (1, c, r * int(rng.integers(1, 3)), r * int(rng.integers(1, 3)))
        op = Operand(shape, dt)
        fn = lambda lib, x: getattr(f(lib), kind)(x, r)  # noqa: E731
        name = f"{kind} r={r}"
    return Case(f"{name} {op.shape}", [op], fn, rtol=1e-4 if dt == "float32" else None)


# ---- more functions with argument grids ---------------------------------------------------

MISC2 = {
    "cdist": lambda lib, a, b, r: lib.cdist(a, b, p=[0.0, 1.0, 2.0, 3.0, math.inf, 1.5][r % 6]),
    "cdist_mm": lambda lib, a, b, r: lib.cdist(
        a, b, compute_mode="use_mm_for_euclid_dist" if r % 2 else "donot_use_mm_for_euclid_dist"
    ),
    "dist": lambda lib, a, b, r: lib.dist(a, b, p=[0, 1, 2, math.inf, 3][r % 5]),
    "trapezoid": lambda lib, a, b, r: lib.trapezoid(a, dx=0.5, dim=r % a.ndim - a.ndim),
    "trapezoid_x": lambda lib, a, b, r: lib.trapezoid(a, a.cumsum(-1).detach(), dim=-1),
    "cumulative_trapezoid": lambda lib, a, b, r: lib.cumulative_trapezoid(a, dim=r % a.ndim),
    "diag_embed": lambda lib, a, b, r: lib.diag_embed(a, offset=r % 3 - 1, dim1=-1, dim2=0),
    "diagflat": lambda lib, a, b, r: lib.diagflat(a, r % 3 - 1),
    "block_diag": lambda lib, a, b, r: lib.block_diag(a.reshape(a.shape[0], -1), b[0, 0], b[0]),
    "cartesian_prod": lambda lib, a, b, r: lib.cartesian_prod(a.flatten()[:3], b.flatten()[:2]),
    "rot90": lambda lib, a, b, r: lib.rot90(a, r % 5 - 2, [0, -1]),
    "repeat_interleave": lambda lib, a, b, r: a.repeat_interleave(r % 3, dim=r % a.ndim),
    "repeat_interleave_t": lambda lib, a, b, r: lib.repeat_interleave(
        a, lib.arange(a.shape[0]) % 3, dim=0
    ),
    "histc": lambda lib, a, b, r: lib.histc(a, bins=r % 4 + 1, min=-1, max=1.5),
    "tensordot": lambda lib, a, b, r: lib.tensordot(a, b, dims=([0, -1], [0, -1])),
    "tensordot0": lambda lib, a, b, r: lib.tensordot(a, b[0, 0], dims=0),
    "combinations": lambda lib, a, b, r: lib.combinations(
        a.flatten()[:4], r=r % 3 + 1, with_replacement=bool(r % 2)
    ),
    "cov": lambda lib, a, b, r: lib.cov(a.reshape(a.shape[0], -1), correction=r % 3),
    "corrcoef": lambda lib, a, b, r: lib.corrcoef(a.reshape(a.shape[0], -1)),
    "quantile": lambda lib, a, b, r: lib.quantile(
        a,
        0.3,
        dim=r % a.ndim,
        keepdim=bool(r % 2),
        interpolation=["linear", "lower", "higher", "midpoint", "nearest"][r % 5],
    ),
    # (the quantiles draw distinct values: among ties, which one torch's gradient goes to
    # is its sort's choice)
    "quantile_t": lambda lib, a, b, r: lib.quantile(
        a.flatten(), lib.tensor([0.0, 0.5, 1.0], dtype=a.dtype)
    ),
    "nanquantile": lambda lib, a, b, r: lib.nanquantile(a, 0.75, dim=-1),
    "aminmax": lambda lib, a, b, r: tuple(lib.aminmax(a, dim=r % a.ndim, keepdim=bool(r % 2))),
    "take": lambda lib, a, b, r: lib.take(a, lib.tensor([[0, -1], [1, 0]])),
    "put_": lambda lib, a, b, r: (a * 1).put_(
        lib.tensor([0, 1, 0]), b.flatten()[:3].to(a.dtype), accumulate=bool(r % 2)
    ),
    "unique_consecutive": lambda lib, a, b, r: lib.unique_consecutive(
        a.round(), return_inverse=True, return_counts=True, dim=None if r % 2 else 0
    ),
    "bincount": lambda lib, a, b, r: lib.bincount(
        (a.abs() * 2).long().flatten(),
        weights=b.flatten()[: a.numel()] if r % 2 else None,
        minlength=r % 4,
    ),
    "std_mean": lambda lib, a, b, r: tuple(lib.std_mean(a, dim=r % a.ndim, correction=r % 2)),
    "var_mean": lambda lib, a, b, r: tuple(lib.var_mean(a, dim=(0, -1), keepdim=True)),
    "renorm": lambda lib, a, b, r: lib.renorm(a, [1.0, 2.0, 3.0][r % 3], r % a.ndim, 1.0),
    "triu_indices": lambda lib, a, b, r: lib.triu_indices(a.shape[0], a.shape[-1], r % 3 - 1),
    "tril_indices": lambda lib, a, b, r: lib.tril_indices(a.shape[-1], a.shape[0] + 1, r % 3 - 1),
    "addr": lambda lib, a, b, r: lib.addr(
        a[:, 0] if a.ndim > 1 else a, a.flatten(), b.flatten(), beta=0.5, alpha=2
    ),
    "meshgrid": lambda lib, a, b, r: tuple(
        lib.meshgrid(a.flatten()[:3], b.flatten()[:2], indexing=["ij", "xy"][r % 2])
    ),
    "atleast_3d": lambda lib, a, b, r: lib.atleast_3d(a[0]),
    "logdet": lambda lib, a, b, r: (
        a.reshape(a.shape[0], -1) @ a.reshape(a.shape[0], -1).mT
        + lib.eye(a.shape[0], dtype=a.dtype)
    ).logdet(),
    "narrow_copy": lambda lib, a, b, r: lib.narrow_copy(a, -1, 0, a.shape[-1] - r % 2),
    "index_select": lambda lib, a, b, r: lib.index_select(
        a, r % a.ndim - a.ndim, lib.tensor([0, 0])
    ),
}


@gen("misc2")
def _misc2(rng):
    shape = rand_shape(rng, 2, 3, zero=False)
    name = sorted(MISC2)[int(rng.integers(len(MISC2)))]
    dt = rand_dtype(rng, ["float64", "float64", "float32", "int64"])
    r = int(rng.integers(0, 1000))
    fn = MISC2[name]
    bshape = (int(rng.integers(1, 4)),) + shape[1:] if name.startswith(("cdist", "dist")) else shape
    if name == "dist":
        bshape = shape
    return Case(
        f"misc2 {name} r={r} {shape}",
        # (no NaN for the quantiles: where torch's gradient goes among NaNs is its sort's)
        [
            Operand(
                shape,
                dt,
                # (nor for std_mean/var_mean: torch's one-pass mean of a slice holding inf is
                # NaN, where mean() gives inf)
                special=rng.random() < 0.1 and "quantile" not in name and "_mean" not in name,
                distinct="quantile" in name,
            ),
            Operand(bshape, dt),
        ],
        lambda lib, a, b: fn(lib, a, b, r),
        rtol=1e-4 if dt == "float32" else None,
    )


# ---- attention and CTC argument grids ----------------------------------------------------


@gen("attn_sdpa")
def _attn_sdpa(rng):
    """scaled_dot_product_attention with any bool mask, all-masked rows (NaN) included
    (first derivatives only: on those rows torch's second ones are 0 where its output is
    NaN, a region not worth agreeing on)."""
    return _sdpa_case(rng, open_rows=False)


@gen("nnf2_sdpa")
def _nnf2_sdpa(rng):
    """scaled_dot_product_attention: bool and float masks that broadcast, is_causal with
    L != S, scale, enable_gqa, 3-d and 4-d inputs; every row keeps a key."""
    return _sdpa_case(rng, open_rows=True)


def _sdpa_case(rng, open_rows: bool) -> Case:
    b, h, lq, lk = (int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.integers(1, 4)),
                    int(rng.integers(1, 4)))  # fmt: skip
    e, ev = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    gqa = bool(rng.random() < 0.2) and h == 2
    hk = 1 if gqa else h
    four = bool(rng.random() < 0.7) or gqa
    lead, leadk = ((b, h) if four else (b,)), ((b, hk) if four else (b,))
    mask_kind = str(rng.choice(["none", "bool", "float", "causal"]))
    kw: dict = {}
    if rng.random() < 0.3:
        # (not 0: torch's math path scales the masked scores, -inf * 0, for NaN rows)
        kw["scale"] = [0.5, 2.0, 1e-3][int(rng.integers(3))]
    if gqa:
        kw["enable_gqa"] = True
    mshape = (lq, lk) if rng.random() < 0.5 else (1,) * (len(lead)) + (lq, lk)
    dt = rand_dtype(rng, ["float64", "float64", "float32"])
    ops = [Operand(lead + (lq, e), dt), Operand(leadk + (lk, e), dt), Operand(leadk + (lk, ev), dt)]
    if mask_kind in ("bool", "float"):
        ops.append(Operand(mshape, "bool" if mask_kind == "bool" else dt))

    def fn(lib, q, k, v, *mask):
        f = _f(lib)
        if mask_kind == "causal":
            return f.scaled_dot_product_attention(q, k, v, is_causal=True, **kw)
        if open_rows and mask_kind == "bool":
            mask = (mask[0] | (lib.arange(lk) == 0),)
        return f.scaled_dot_product_attention(q, k, v, attn_mask=mask[0] if mask else None, **kw)

    return Case(
        f"sdpa mask={mask_kind}{mshape} q{ops[0].shape} k{ops[1].shape} v{ops[2].shape} {kw}",
        ops,
        fn,
        rtol=1e-4 if dt == "float32" else 1e-7,
    )


@gen("nnf2_ctc")
def _nnf2_ctc(rng):
    """ctc_loss: reductions, blank not 0, zero_infinity, targets too long for the input
    (an infinite loss), padded and concatenated targets. (An impossible alignment without
    zero_infinity: torch's gradient is NaN, retrograd's finite, as Burn's test asks,
    tests/test_burn_ports_2.py: values only then.)"""
    t_len, n, c = int(rng.integers(1, 6)), int(rng.integers(1, 3)), int(rng.integers(2, 5))
    blank = int(rng.integers(0, c))
    labels = [k for k in range(c) if k != blank]
    s_max = int(rng.integers(1, 4))
    targets = rng.choice(labels, (n, s_max)).tolist()
    in_lens = [int(rng.integers(1, t_len + 1)) for _ in range(n)]
    tg_lens = [int(rng.integers(0, s_max + 1)) for _ in range(n)]
    red = str(rng.choice(["mean", "sum", "none"]))
    zero_inf = bool(rng.random() < 0.5)
    concat = bool(rng.random() < 0.3)

    def fn(lib, x):
        lp = x.log_softmax(-1)
        if concat:
            tg = lib.tensor(
                [t for row, m in zip(targets, tg_lens) for t in row[:m]], dtype=lib.int64
            )
        else:
            tg = lib.tensor(targets, dtype=lib.int64)
        return _f(lib).ctc_loss(
            lp, tg, lib.tensor(in_lens), lib.tensor(tg_lens), blank=blank, reduction=red,
            zero_infinity=zero_inf,
        )  # fmt: skip

    feasible = all(
        i >= m + sum(1 for a, b in itertools.pairwise(row[:m]) if a == b)
        for row, i, m in zip(targets, in_lens, tg_lens)
    )
    return Case(
        f"ctc T={t_len} N={n} C={c} blank={blank} tg={targets} in={in_lens} len={tg_lens} "
        f"red={red} zi={zero_inf} concat={concat}",
        [Operand((t_len, n, c), "float64")],
        fn,
        grad=feasible or zero_inf,
    )


# ---- modules with torch's parameters ----------------------------------------------------


def _module(lib, build, seed: int):
    """``build(nn)`` for torch (seeded) and retrograd, retrograd's loaded with torch's state
    dict; both in float64."""
    torch = _torch()
    torch.manual_seed(seed)
    tm = build(torch.nn).double()
    if lib is torch:
        return tm
    rm = build(rg.nn).double()
    rm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    return rm


def _state(lib, m):
    """The module's floating buffers after the call (running statistics)."""
    return [b for _, b in sorted(m.named_buffers()) if b.is_floating_point()]


MODULES = {
    "mha": lambda rng: _mha_case(rng),
    "rnn": lambda rng: _rnn_case(rng),
    "batchnorm": lambda rng: _bn_case(rng),
    "encoder_layer": lambda rng: _encoder_case(rng),
}


def _mha_case(rng):
    e, heads = [(4, 2), (4, 1), (6, 3), (2, 2)][int(rng.integers(4))]
    kdim = [None, 3][int(rng.integers(2))]
    vdim = [None, 5][int(rng.integers(2))]
    bias, bias_kv, zero_attn = (bool(rng.random() < 0.5) for _ in range(3))
    batch_first = bool(rng.random() < 0.5)
    n, lq, lk = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
    need, average = bool(rng.random() < 0.7), bool(rng.random() < 0.5)
    mask_kind = str(rng.choice(["none", "bool", "float", "padding", "both", "causal"]))
    seed = int(rng.integers(0, 1000))
    ek, ev = kdim or e, vdim or e
    shape = (lambda ln, d: (n, ln, d)) if batch_first else (lambda ln, d: (ln, n, d))
    masks = rng.random((lq, lk)) < 0.3
    masks[:, 0] = False  # (every query keeps a key: all-masked rows are NaN in torch)
    padding = rng.random((n, lk)) < 0.3
    padding[:, 0] = False

    def fn(lib, q, k, v):
        m = _module(
            lib,
            lambda nn: nn.MultiheadAttention(
                e, heads, bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn,
                kdim=kdim, vdim=vdim, batch_first=batch_first,
            ),
            seed,
        )  # fmt: skip
        kw: dict = {"need_weights": need, "average_attn_weights": average}
        if mask_kind in ("bool", "both"):
            kw["attn_mask"] = lib.tensor(masks)
        if mask_kind == "float":
            kw["attn_mask"] = lib.tensor(np.where(masks, -1.5, 0.25))
        if mask_kind in ("padding", "both"):
            kw["key_padding_mask"] = lib.tensor(padding)
        if mask_kind == "causal":
            kw["attn_mask"] = lib.tensor(np.triu(np.ones((lq, lk), bool), 1))
            kw["is_causal"] = True
        out, weights = m(q, k, v, **kw)
        return (out, weights) if need else out

    return Case(
        f"MultiheadAttention e={e} h={heads} kdim={kdim} vdim={vdim} bias={bias} "
        f"bias_kv={bias_kv} zero_attn={zero_attn} bf={batch_first} mask={mask_kind} "
        f"need={need} avg={average} q{shape(lq, e)} k{shape(lk, ek)}",
        [Operand(shape(lq, e), "float64"), Operand(shape(lk, ek), "float64"),
         Operand(shape(lk, ev), "float64")],
        fn,
    )  # fmt: skip


def _rnn_case(rng):
    kind = str(rng.choice(["RNN", "LSTM", "GRU"]))
    size, hidden = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    layers, bi = int(rng.integers(1, 3)), bool(rng.random() < 0.5)
    bias, batch_first = bool(rng.random() < 0.7), bool(rng.random() < 0.5)
    proj = 0  # (not drawn: LSTM projections are checked in test_realports9_fixes.py)
    extra = {"nonlinearity": str(rng.choice(["tanh", "relu"]))} if kind == "RNN" else {}
    n, t = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    unbatched = bool(rng.random() < 0.2)
    x_shape = (t, size) if unbatched else ((n, t, size) if batch_first else (t, n, size))
    with_state = bool(rng.random() < 0.5)
    d = 2 if bi else 1
    h_shape = (layers * d, proj or hidden) if unbatched else (layers * d, n, proj or hidden)
    c_shape = h_shape[:-1] + (hidden,)
    seed = int(rng.integers(0, 1000))

    def fn(lib, x, h, c):
        m = _module(
            lib,
            lambda nn: getattr(nn, kind)(
                size, hidden, layers, bias=bias, batch_first=batch_first, bidirectional=bi,
                **extra,
            ),
            seed,
        )  # fmt: skip
        if not with_state:
            return m(x)
        return m(x, (h, c) if kind == "LSTM" else h)

    return Case(
        f"{kind} in={size} h={hidden} layers={layers} bi={bi} bias={bias} bf={batch_first} "
        f"{extra} x{x_shape} state={with_state}",
        [Operand(x_shape, "float64"), Operand(h_shape, "float64"), Operand(c_shape, "float64")],
        fn,
    )


def _bn_case(rng):
    kind = str(
        rng.choice(["BatchNorm1d", "BatchNorm2d", "InstanceNorm1d", "GroupNorm", "LayerNorm"])
    )
    c = int(rng.integers(1, 4))
    momentum = [0.1, None, 0.5][int(rng.integers(3))]
    affine = bool(rng.random() < 0.6)
    track = bool(rng.random() < 0.7)
    train = bool(rng.random() < 0.6)
    calls = int(rng.integers(1, 3))
    n = int(rng.integers(2, 4))
    shape = {"BatchNorm1d": (n, c, 2), "BatchNorm2d": (n, c, 2, 2), "InstanceNorm1d": (n, c, 3),
             "GroupNorm": (n, c * 2, 2), "LayerNorm": (n, 2, c)}[kind]  # fmt: skip
    seed = int(rng.integers(0, 1000))

    def build(nn):
        if kind == "GroupNorm":
            return nn.GroupNorm(2, c * 2, affine=affine)
        if kind == "LayerNorm":
            return nn.LayerNorm(c, elementwise_affine=affine, bias=track)
        return getattr(nn, kind)(c, momentum=momentum, affine=affine, track_running_stats=track)

    def fn(lib, x):
        m = _module(lib, build, seed)
        m.train(train)
        outs = [m(x * (k + 1)) for k in range(calls)]
        return outs + _state(lib, m)

    return Case(
        f"{kind} c={c} momentum={momentum} affine={affine} track={track} train={train} "
        f"calls={calls} {shape}",
        [Operand(shape, "float64")],
        fn,
    )


def _encoder_case(rng):
    d, heads = [(4, 2), (2, 1)][int(rng.integers(2))]
    ff = int(rng.integers(1, 6))
    norm_first, batch_first = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
    act = str(rng.choice(["relu", "gelu"]))
    decoder = bool(rng.random() < 0.4)
    n, t = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    shape = (n, t, d) if batch_first else (t, n, d)
    causal = bool(rng.random() < 0.5)
    seed = int(rng.integers(0, 1000))

    def fn(lib, x, mem):
        kind = "TransformerDecoderLayer" if decoder else "TransformerEncoderLayer"
        m = _module(
            lib,
            lambda nn: getattr(nn, kind)(
                d, heads, ff, dropout=0.0, activation=act, batch_first=batch_first,
                norm_first=norm_first,
            ),
            seed,
        )  # fmt: skip
        mask = lib.tensor(np.triu(np.ones((t, t), bool), 1)) if causal else None
        if decoder:
            return m(x, mem, tgt_mask=mask)
        return m(x, src_mask=mask)

    return Case(
        f"{'decoder' if decoder else 'encoder'} d={d} h={heads} ff={ff} nf={norm_first} "
        f"bf={batch_first} act={act} causal={causal} {shape}",
        [Operand(shape, "float64"), Operand(shape, "float64")],
        fn,
    )


for _name, _fn in MODULES.items():
    GENERATORS["mod_" + _name] = _fn
