"""Round 14 of the differential fuzzer against PyTorch: what rounds 1-13 do not draw, or draw
only on fixed arguments. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`fuzz12_cases.check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or value.
Inputs come as plain, transposed, stepped or expanded views of float64 leaves, so gradients
reach the leaf through the view.

- ``selection``: sort/argsort/msort/topk/kthvalue/median/nanmedian/mode/quantile/
  nanquantile/unique/unique_consecutive/searchsorted/bucketize/histc/bincount/isin on their
  argument grids (descending, stable, largest, sorted, interpolation, return_inverse and
  counts, sides and sorters, weights and minlength), ties where torch's pick is defined;
- ``scatter``: scatter_reduce in every reduction with and without self, index_add with
  alpha, index_copy, take, put/put_ with accumulate, take_along_dim without a dim, gather at
  negative dims, with duplicate indices, and out-of-range indices that must raise;
- ``promotion``: result dtypes of n-ary ops across int64/bool/float32/float64 tensors, 0-d
  tensors and Python scalars (where, clamp, cat/stack, addcmul/addcdiv, lerp, float_power,
  ldexp, heaviside, gcd, copysign, full/full_like, result_type/promote_types/can_cast);
- ``linalg``: batched solve_triangular, lu_factor/lu, matrix_power (negative too), vecdot,
  multi_dot, cross with a dim, cond, matrix_rank, vander, tensordot, kron, block_diag, cdist
  at p in {0, 1, 2, 3, inf}, addmm/baddbmm/addmv/addr with alpha/beta (beta=0 ignores NaN),
  trace, logdet;
- ``chain2``: programs of 3-6 ops through views and in-place updates, then the second
  derivative (the gradient of a weighted sum of the gradient, with ``create_graph``);
- ``nnf``: lp_pool, local_response_norm, cosine_similarity/pairwise_distance/pdist,
  one_hot, adaptive max pools with indices, softmin, hardtanh/threshold/celu/rrelu(eval)/
  prelu, avg_pool's divisor_override, max_pool with dilation and ceil_mode, normalize with
  p, losses with every reduction;
- ``scan``: cumsum/cumprod with dtype=, cumprod through several zeros, logcumsumexp with
  -inf, cummax/cummin, diff with n/prepend/append, trapezoid/cumulative_trapezoid,
  var_mean/std_mean with correction, aminmax, renorm, nan_to_num, dist.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import math

import numpy as np

from fuzz12_cases import Trial, _pick
from fuzz12_cases import check as _check
from fuzz_cases import Mismatch

GENERATORS: dict = {}


def check(trial: Trial) -> None:
    """:func:`fuzz12_cases.check`, less one deliberate difference: torch's refusal of a
    backward through a value an in-place op changed after it was saved, where retrograd keeps
    the saved value (API.md section 10)."""
    try:
        _check(trial)
    except Mismatch as e:
        if "modified by an inplace operation" in str(e) and "retrograd returns" in str(e):
            return
        raise


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _shape(rng, rmin=1, rmax=3, lo=1, hi=4):
    return tuple(int(v) for v in rng.integers(lo, hi, size=int(rng.integers(rmin, rmax + 1))))


def _weight_fn(rng):
    seed = int(rng.integers(1 << 30))
    return lambda shape: np.random.default_rng(seed).uniform(-1, 1, size=shape)


class Input:
    """A float64 (or other dtype) leaf drawn for a target shape, read through a random view."""

    def __init__(self, rng, shape, dtype="float64", values=None, view=None, distinct=False):
        self.shape = tuple(shape)
        self.dtype = dtype
        nd = len(self.shape)
        kinds = ["plain", "plain", "T", "step"] + ([] if distinct else ["expand"])
        kinds = [k for k in kinds if k == "plain" or (nd >= 2 if k == "T" else nd >= 1)]
        self.view = view if view in kinds else _pick(rng, *kinds)
        base = self.shape
        if self.view == "T":
            base = base[:-2] + (base[-1], base[-2])
        elif self.view == "step":
            base = base[:-1] + (base[-1] * 2,)
        elif self.view == "expand":
            # size-1 dims where the draw says so, expanded back
            base = tuple(1 if rng.random() < 0.5 else n for n in base)
        n = int(np.prod(base)) if base else 1
        if distinct:  # no ties anywhere (torch's pick among ties is its kernel's)
            flat = rng.permutation(n) * 0.5 - 1.0
        elif values is not None:
            flat = np.array([values[int(i)] for i in rng.integers(len(values), size=n)])
        elif dtype == "bool":
            flat = rng.random(n) < 0.5
        elif dtype == "int64":
            flat = rng.integers(-4, 5, size=n)
        else:
            flat = rng.uniform(-2.0, 2.0, size=n)
        self.array = np.asarray(flat).astype(dtype).reshape(base)

    def leaf(self, lib, grad=True):
        leaf = lib.tensor(self.array, dtype=getattr(lib, self.dtype))
        if grad and self.dtype.startswith("float"):
            leaf.requires_grad_(True)
        return leaf

    def read(self, lib, leaf):
        if self.view == "T":
            return leaf.transpose(-1, -2)
        if self.view == "step":
            return leaf[..., ::2]
        if self.view == "expand":
            return leaf.expand(*self.shape)
        return leaf

    def make(self, lib, grad=True):
        """(leaf, the view of it)"""
        leaf = self.leaf(lib, grad)
        return leaf, self.read(lib, leaf)

    def __repr__(self):
        return f"{self.dtype}{list(self.shape)}:{self.view}"


def _grads(lib, outs, leaves, weight):
    """The float64 gradients of a weighted sum of the float outputs w.r.t. the leaves."""
    # (each output weighted by its place among all of them: one that is differentiable in
    # one library only, as slogdet's sign, changes nothing else)
    outs = [(k, o) for k, o in enumerate(outs)]
    outs = [(k, o) for k, o in outs if o.dtype in (lib.float64, lib.float32) and o.requires_grad]
    leaves = [x for x in leaves if x.requires_grad]
    if not leaves:
        return []
    if not outs:  # (no gradient at all: torch's None or zeros, as an unused leaf)
        return [None] * len(leaves)
    total = 0
    for k, o in outs:
        w = lib.tensor(np.asarray(weight(tuple(o.shape))) * (k + 1), dtype=o.dtype)
        total = total + (o * w).sum()
    return list(lib.autograd.grad(total, leaves, allow_unused=True))


def _trial(name, body, leaves_of, weight, rtol=1e-9):
    """A trial returning body's results, then gradients of its float results."""

    def fn(lib):
        results, leaves = body(lib)
        tensors = [r for r in results if isinstance(r, lib.Tensor)]
        return [*results, *_grads(lib, tensors, leaves, weight)]

    return Trial(name, fn, rtol=rtol)


# ---- sorting and selection ----------------------------------------------------------------

TIED = [-1.0, 0.0, 0.5, 0.5, 2.0, -1.0]


@gen("selection")
def _selection(rng):
    kind = _pick(
        rng,
        "sort",
        "argsort",
        "msort",
        "topk",
        "kthvalue",
        "median",
        "nanmedian",
        "mode",
        "quantile",
        "unique",
        "unique_consecutive",
        "searchsorted",
        "bucketize",
        "histc",
        "bincount",
        "isin",
    )
    return globals()["_sel_" + kind](rng, _weight_fn(rng))


def _sel_sort(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    nd = len(shape)
    stable = _pick(rng, True, None)
    # ties only under stable=True: torch's order among ties is its kernel's otherwise
    x = Input(rng, shape, values=TIED, distinct=not stable)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    desc = _pick(rng, True, False)
    form = _pick(rng, "method", "function", "kw")

    def body(lib):
        leaf, t = x.make(lib)
        kw = {"descending": desc}
        if stable:
            kw["stable"] = True
        if form == "method":
            # (torch's stable= form takes the dim as a keyword only)
            v, i = t.sort(**kw, dim=dim) if stable else t.sort(dim, **kw)
        elif form == "function":
            v, i = lib.sort(t, dim=dim, **kw)
        else:
            v, i = lib.sort(t, **kw) if dim == -1 else t.sort(dim=dim, **kw)
        return [v, i], [leaf]

    return _trial(f"sort {x} dim={dim} desc={desc} stable={stable} {form}", body, None, weight)


def _sel_argsort(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    nd = len(shape)
    x = Input(rng, shape, values=TIED)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    desc = _pick(rng, True, False)

    def body(lib):
        _, t = x.make(lib)
        return [t.argsort(dim=dim, descending=desc, stable=True)], []

    return _trial(f"argsort {x} dim={dim} desc={desc}", body, None, weight)


def _sel_msort(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    x = Input(rng, shape, values=TIED)

    def body(lib):
        leaf, t = x.make(lib)
        return [lib.msort(t)], [leaf]

    return _trial(f"msort {x}", body, None, weight)


def _sel_topk(rng, weight):
    shape = _shape(rng, 0, 3, 1, 5)
    nd = len(shape)
    x = Input(rng, shape, distinct=True)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    size = shape[dim] if nd else 1
    # k = size + 1: both refuse (k = 0 of a 0-d tensor: torch's result is 0-d, left out)
    k = int(rng.integers(0 if nd else 1, size + 2))
    largest, srt = _pick(rng, True, False), _pick(rng, True, True, False)

    def body(lib):
        leaf, t = x.make(lib)
        v, i = lib.topk(t, k, dim=dim, largest=largest, sorted=srt)
        if not srt:  # the order of an unsorted topk is the kernel's: compare as sets
            v, order = v.sort(dim)
            i = i.gather(dim, order)
        return [v, i], [leaf]

    return _trial(f"topk {x} k={k} dim={dim} largest={largest} sorted={srt}", body, None, weight)


def _sel_kthvalue(rng, weight):
    shape = _shape(rng, 0, 3, 1, 5)
    nd = len(shape)
    x = Input(rng, shape, distinct=True)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    size = shape[dim] if nd else 1
    k = int(rng.integers(0, size + 2))  # 0 and size + 1: both refuse
    keep = _pick(rng, True, False)

    def body(lib):
        leaf, t = x.make(lib)
        v, i = t.kthvalue(k, dim, keepdim=keep)
        return [v, i], [leaf]

    return _trial(f"kthvalue {x} k={k} dim={dim} keep={keep}", body, None, weight)


def _sel_median(rng, weight, name="median"):
    shape = _shape(rng, 0, 3, 1, 5)
    nd = len(shape)
    special = name == "nanmedian" or rng.random() < 0.3
    x = Input(rng, shape, distinct=True)
    if special:  # NaNs in place of some values
        x.array = np.where(rng.random(x.array.shape) < 0.3, math.nan, x.array)
    how = _pick(rng, "all", "dim", "dim")
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    keep = _pick(rng, True, False)

    def body(lib):
        leaf, t = x.make(lib)
        f = getattr(t, name)
        if how == "all":
            return [f()], [leaf]
        v, i = f(dim, keepdim=keep)
        return [v, i], [leaf]

    return _trial(f"{name} {x} {how} dim={dim} keep={keep}", body, None, weight)


def _sel_nanmedian(rng, weight):
    return _sel_median(rng, weight, "nanmedian")


def _sel_mode(rng, weight):
    shape = _shape(rng, 0, 3, 1, 5)
    nd = len(shape)
    # one most frequent value per row: (torch's pick among equally frequent values and its
    # index among the repeats are its kernel's) draws from a small pool, then compare values
    x = Input(rng, shape, values=[0.0, 1.0, 1.0, 1.0, 2.0], view="plain")
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    keep = _pick(rng, True, False)

    def body(lib):
        leaf, t = x.make(lib)
        v, _ = t.mode(dim, keepdim=keep)
        return [v], [leaf]

    return _trial(f"mode {x} dim={dim} keep={keep}", body, None, weight)


def _sel_quantile(rng, weight):
    shape = _shape(rng, 0, 3, 1, 5)
    nd = len(shape)
    nan = rng.random() < 0.3
    x = Input(rng, shape, distinct=True)
    if nan:  # one NaN (which of several NaNs torch's sort puts last is its kernel's)
        x.array.flat[int(rng.integers(x.array.size))] = math.nan
    name = _pick(rng, "quantile", "nanquantile")
    q_kind = _pick(rng, "float", "tensor0", "tensor1", "bad")
    qs = [float(v) for v in rng.choice([0.0, 0.1, 0.25, 0.5, 0.8, 1.0], size=3)]
    dim = _pick(rng, None, int(rng.integers(-max(nd, 1), max(nd, 1))))
    keep = _pick(rng, True, False)
    interp = _pick(rng, "linear", "lower", "higher", "midpoint", "nearest")

    def body(lib):
        leaf, t = x.make(lib)
        if q_kind == "float":
            q = qs[0]
        elif q_kind == "tensor0":
            q = lib.tensor(qs[1], dtype=lib.float64)
        elif q_kind == "tensor1":
            q = lib.tensor(qs, dtype=lib.float64)
        else:
            q = 1.5
        out = getattr(lib, name)(t, q, dim=dim, keepdim=keep, interpolation=interp)
        return [out], [leaf]

    return _trial(f"{name} {x} q={q_kind}{qs} dim={dim} keep={keep} {interp}", body, None, weight)


def _sel_unique(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    nd = len(shape)
    dtype = _pick(rng, "float64", "int64", "bool")
    x = Input(rng, shape, dtype=dtype, values=None if dtype == "bool" else [0, 1, 1, 2, -3])
    inv, cnt = _pick(rng, True, False), _pick(rng, True, False)
    dim = _pick(rng, None, None, int(rng.integers(-max(nd, 1), max(nd, 1))))
    if dim is not None and 0 in shape:
        dim = None  # torch's unique(dim=) of an empty tensor: its own refusals
    srt = _pick(rng, True, False)

    def body(lib):
        _, t = x.make(lib, grad=False)
        out = lib.unique(t, sorted=True, return_inverse=inv, return_counts=cnt, dim=dim)
        if not srt:
            out = t.unique(return_inverse=inv, return_counts=cnt, dim=dim)
        return list(out) if isinstance(out, tuple) else [out], []

    return _trial(f"unique {x} inv={inv} counts={cnt} dim={dim}", body, None, weight)


def _sel_unique_consecutive(rng, weight):
    shape = _shape(rng, 0, 3, 0, 5)
    nd = len(shape)
    dtype = _pick(rng, "float64", "int64")
    x = Input(rng, shape, dtype=dtype, values=[0, 1, 1, 2])
    inv, cnt = _pick(rng, True, False), _pick(rng, True, False)
    dim = _pick(rng, None, int(rng.integers(-max(nd, 1), max(nd, 1))))
    if dim is not None and 0 in shape:
        dim = None

    def body(lib):
        _, t = x.make(lib, grad=False)
        out = lib.unique_consecutive(t, return_inverse=inv, return_counts=cnt, dim=dim)
        return list(out) if isinstance(out, tuple) else [out], []

    return _trial(f"unique_consecutive {x} inv={inv} counts={cnt} dim={dim}", body, None, weight)


def _sel_searchsorted(rng, weight):
    rows = _pick(rng, (), (2,), (2, 3))
    m = int(rng.integers(0, 5))
    seq = np.sort(rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0], size=(*rows, m)), axis=-1)
    sorter_perm = rng.random() < 0.3
    shuffled = seq[..., rng.permutation(m)]
    vals_shape = (*rows, int(rng.integers(0, 4))) if rows else _shape(rng, 0, 2, 0, 4)
    vals = rng.choice([-2.0, 0.0, 0.5, 1.0, 3.0, math.nan], size=vals_shape)
    right = _pick(rng, True, False)
    side = _pick(rng, None, "left", "right")
    out_int32 = _pick(rng, True, False)
    scalar = rng.random() < 0.2 and not rows
    if scalar:
        vals = np.array(0.5)

    def body(lib):
        s = lib.tensor(seq, dtype=lib.float64)
        v = 0.5 if scalar else lib.tensor(vals, dtype=lib.float64)
        kw = {"right": right, "out_int32": out_int32}
        if side is not None:
            kw["side"] = side
        if sorter_perm:  # the sequence shuffled, and the permutation that sorts it
            s = lib.tensor(shuffled, dtype=lib.float64)
            kw["sorter"] = lib.tensor(np.argsort(shuffled, axis=-1, kind="stable"))
        return [lib.searchsorted(s, v, **kw)], []

    return _trial(
        f"searchsorted {seq.shape} {vals_shape} right={right} side={side} int32={out_int32} "
        f"sorter={sorter_perm} scalar={scalar}",
        body,
        None,
        weight,
    )


def _sel_bucketize(rng, weight):
    m = int(rng.integers(0, 5))
    bounds = np.sort(rng.choice([-1.0, 0.0, 0.5, 1.0, 2.0], size=m))
    x = Input(rng, _shape(rng, 0, 3, 0, 4), values=[-2.0, 0.0, 0.5, 1.0, 3.0, math.nan])
    right = _pick(rng, True, False)
    out_int32 = False  # (as in searchsorted)

    def body(lib):
        _, t = x.make(lib, grad=False)
        b = lib.tensor(bounds, dtype=lib.float64)
        return [lib.bucketize(t, b, right=right, out_int32=out_int32)], []

    return _trial(f"bucketize {x} {bounds} right={right} int32={out_int32}", body, None, weight)


def _sel_histc(rng, weight):
    x = Input(rng, _shape(rng, 0, 3, 0, 5), values=[-2.0, -1.0, 0.0, 0.3, 1.0, 2.0, 3.0])
    bins = int(rng.integers(1, 6))
    lo, hi = _pick(rng, (0, 0), (-1.0, 1.0), (0.0, 2.0), (1.0, -1.0))

    def body(lib):
        _, t = x.make(lib, grad=False)
        return [lib.histc(t, bins=bins, min=lo, max=hi)], []

    return _trial(f"histc {x} bins={bins} range=({lo},{hi})", body, None, weight)


def _sel_bincount(rng, weight):
    weighted = _pick(rng, None, "float64", "float32", "int64")
    # (an empty input with weights: torch's result is int64 zeros, its weights' dtype
    # otherwise; left out)
    n = int(rng.integers(0 if weighted is None else 1, 6))
    idx = rng.integers(0, 5, size=n)
    if rng.random() < 0.1 and n:
        idx[0] = -1  # both refuse
    w = rng.uniform(-1, 1, size=n)
    minlength = int(rng.integers(0, 7))

    def body(lib):
        i = lib.tensor(idx, dtype=lib.int64)
        wt = None
        leaves = []
        if weighted is not None:
            wt = lib.tensor(w, dtype=getattr(lib, weighted))
        return [lib.bincount(i, weights=wt, minlength=minlength)], leaves

    return _trial(f"bincount {idx} w={weighted} minlength={minlength}", body, None, weight)


def _sel_isin(rng, weight):
    dtype = _pick(rng, "float64", "int64")
    x = Input(rng, _shape(rng, 0, 3, 0, 4), dtype=dtype, values=[0, 1, 2, 3])
    t_shape = _shape(rng, 0, 2, 0, 4)
    tv = rng.choice([1, 3, 5], size=t_shape)
    invert = _pick(rng, True, False)
    scalar = _pick(rng, None, "elements", "test")

    def body(lib):
        _, e = x.make(lib, grad=False)
        t = lib.tensor(tv, dtype=getattr(lib, dtype))
        if scalar == "elements":
            return [lib.isin(2, t, invert=invert)], []
        if scalar == "test":
            return [lib.isin(e, 1, invert=invert)], []
        return [lib.isin(e, t, invert=invert)], []

    return _trial(f"isin {x} {tv.shape} invert={invert} scalar={scalar}", body, None, weight)


# ---- scatter, index_add, take, put ---------------------------------------------------------


@gen("scatter")
def _scatter(rng):
    kind = _pick(
        rng,
        "scatter_reduce",
        "scatter_reduce",
        "scatter_value",
        "index_add",
        "index_copy",
        "take",
        "put",
        "take_along_dim",
        "gather",
        "index_select",
        "masked_scatter",
    )
    return globals()["_sc_" + kind](rng, _weight_fn(rng))


def _index_values(rng, shape, size, bad):
    """Indices in [0, size) with duplicates (one out of range, or negative, when ``bad``)."""
    idx = rng.integers(0, max(size, 1), size=shape)
    if bad and idx.size:
        idx.flat[int(rng.integers(idx.size))] = _pick(rng, size, -size - 1, -1)
    return idx


def _sc_scatter_reduce(rng, weight):
    shape = _shape(rng, 1, 3, 1, 4)
    nd = len(shape)
    dim = int(rng.integers(-nd, nd))
    d = dim % nd
    ishape = tuple(int(rng.integers(0, n + 1)) if i != d else int(rng.integers(0, 5))
                   for i, n in enumerate(shape))  # fmt: skip
    bad = rng.random() < 0.08
    idx = _index_values(rng, ishape, shape[d], bad)
    reduce = _pick(rng, "sum", "prod", "mean", "amax", "amin")
    include = _pick(rng, True, False)
    dtype = _pick(rng, "float64", "float64", "float32", "int64")
    # ties between self and src (amax/amin split the gradient between equal values)
    pool = [-1.0, 0.5, 2.0, 0.5] if reduce in ("amax", "amin") and rng.random() < 0.5 else None
    if dtype == "int64":
        pool = [-2, 0, 1, 3]
    x = Input(rng, shape, dtype, values=pool)
    src = Input(rng, ishape, dtype, values=pool, view="plain")
    how = _pick(rng, "method", "inplace")

    def body(lib):
        xl, xt = x.make(lib)
        sl, st = src.make(lib)
        i = lib.tensor(idx, dtype=lib.int64)
        if how == "inplace":
            out = xt * 1 if dtype != "int64" else xt.clone()
            out.scatter_reduce_(dim, i, st, reduce, include_self=include)
        else:
            out = xt.scatter_reduce(dim, i, st, reduce=reduce, include_self=include)
        return [out], [xl, sl]

    return _trial(
        f"scatter_reduce {x} dim={dim} idx{ishape} {reduce} include_self={include} {how} bad={bad}",
        body,
        None,
        weight,
    )


def _sc_scatter_value(rng, weight):
    shape = _shape(rng, 1, 3, 1, 4)
    nd = len(shape)
    dim = int(rng.integers(-nd, nd))
    d = dim % nd
    ishape = tuple(int(rng.integers(0, n + 1)) for n in shape)
    # distinct positions along dim (an assignment's pick among duplicates is the kernel's)
    idx = np.stack(
        [rng.permutation(shape[d])[: ishape[d]] for _ in range(int(np.prod(ishape)) or 1)]
    )
    idx = np.moveaxis(
        idx[: int(np.prod([n for i, n in enumerate(ishape) if i != d])) or 1].reshape(
            [n for i, n in enumerate(ishape) if i != d] + [ishape[d]]
        ),
        -1,
        d,
    ) if 0 not in ishape else np.zeros(ishape, dtype=np.int64)  # fmt: skip
    value = _pick(rng, 1.5, -2, True)
    red = _pick(rng, None, "add", "multiply")
    x = Input(rng, shape)

    def body(lib):
        # (torch has no derivative of scatter with reduce=)
        xl, xt = x.make(lib, grad=red is None)
        i = lib.tensor(idx, dtype=lib.int64)
        if red is None:
            return [xt.scatter(dim, i, value)], [xl]
        return [xt.scatter(dim, i, value, reduce=red)], [xl]

    return _trial(f"scatter value {x} dim={dim} idx{ishape} {value} {red}", body, None, weight)


def _sc_index_add(rng, weight):
    shape = _shape(rng, 0, 3, 1, 4)
    nd = len(shape)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    d = dim % nd if nd else 0
    k = int(rng.integers(0, 5))
    bad = rng.random() < 0.08
    idx = _index_values(rng, (k,), shape[d] if nd else 1, bad)
    sshape = tuple(k if i == d else n for i, n in enumerate(shape)) if nd else ()
    if not nd and k != 1:
        idx, sshape = idx[:1] if k else np.array([0]), ()
    alpha = _pick(rng, 1, 2, -0.5)
    dtype = _pick(rng, "float64", "float64", "int64")
    if dtype == "int64" and isinstance(alpha, float):
        alpha = 3  # (a float alpha for an int tensor: refused by both, drawn elsewhere)
    x = Input(rng, shape, dtype)
    src = Input(rng, sshape, dtype)
    how = _pick(rng, "method", "function", "inplace")

    def body(lib):
        xl, xt = x.make(lib)
        sl, st = src.make(lib)
        i = lib.tensor(idx, dtype=lib.int64)
        if how == "method":
            out = xt.index_add(dim, i, st, alpha=alpha)
        elif how == "function":
            out = lib.index_add(xt, dim, i, st, alpha=alpha)
        else:
            out = xt.clone()
            out.index_add_(dim, i, st, alpha=alpha)
        return [out], [xl, sl]

    return _trial(f"index_add {x} dim={dim} idx={idx} src={src} alpha={alpha} {how}", body,
                  None, weight)  # fmt: skip


def _sc_index_copy(rng, weight):
    shape = _shape(rng, 1, 3, 1, 4)
    nd = len(shape)
    dim = int(rng.integers(-nd, nd))
    d = dim % nd
    k = int(rng.integers(0, shape[d] + 1))
    idx = rng.permutation(shape[d])[:k]  # distinct (a copy's pick among duplicates: kernel's)
    if rng.random() < 0.08 and k:
        idx[0] = shape[d]
    sshape = tuple(k if i == d else n for i, n in enumerate(shape))
    x = Input(rng, shape)
    src = Input(rng, sshape)
    how = _pick(rng, "method", "inplace")

    def body(lib):
        xl, xt = x.make(lib)
        sl, st = src.make(lib)
        i = lib.tensor(idx, dtype=lib.int64)
        if how == "method":
            out = xt.index_copy(dim, i, st)
        else:
            out = xt * 1.0
            out.index_copy_(dim, i, st)
        return [out], [xl, sl]

    return _trial(f"index_copy {x} dim={dim} idx={idx} {how}", body, None, weight)


def _sc_take(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    n = int(np.prod(shape)) if shape else 1
    ishape = _shape(rng, 0, 2, 0, 4)
    bad = rng.random() < 0.1 or n == 0
    idx = rng.integers(-n, max(n, 1), size=ishape) if n else np.zeros(ishape, dtype=np.int64)
    if bad and idx.size:
        idx.flat[0] = _pick(rng, n, -n - 1)
    x = Input(rng, shape)

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.take(xt, lib.tensor(idx, dtype=lib.int64))], [xl]

    return _trial(f"take {x} idx={idx.tolist()}", body, None, weight)


def _sc_put(rng, weight):
    shape = _shape(rng, 0, 3, 1, 4)
    n = int(np.prod(shape)) if shape else 1
    k = int(rng.integers(0, 5))
    accumulate = _pick(rng, True, False)
    if accumulate:
        idx = rng.integers(-n, n, size=k)
    else:  # distinct targets (a put's pick among duplicates: the kernel's)
        idx = rng.permutation(n)[: min(k, n)] - (n if rng.random() < 0.5 else 0)
    if rng.random() < 0.08 and idx.size:
        idx[0] = n
    x = Input(rng, shape, view="plain")
    src = Input(rng, idx.shape, view="plain")
    how = _pick(rng, "method", "inplace")

    def body(lib):
        xl, xt = x.make(lib)
        sl, st = src.make(lib)
        i = lib.tensor(idx, dtype=lib.int64)
        if how == "method":
            out = xt.put(i, st, accumulate=accumulate)
        else:
            out = xt * 1.0
            out.put_(i, st, accumulate=accumulate)
        return [out], [xl, sl]

    return _trial(f"put {x} idx={idx.tolist()} accumulate={accumulate} {how}", body, None, weight)


def _sc_take_along_dim(rng, weight):
    shape = _shape(rng, 1, 3, 1, 4)
    nd = len(shape)
    dim = _pick(rng, None, int(rng.integers(-nd, nd)))
    if dim is None:
        n = int(np.prod(shape))
        idx = rng.integers(0, n, size=_shape(rng, 1, 1, 0, 5))
    else:
        d = dim % nd
        # broadcasting between the index and the input outside dim
        ishape = tuple(int(rng.integers(0, 4)) if i == d else _pick(rng, n, 1)
                       for i, n in enumerate(shape))  # fmt: skip
        idx = rng.integers(-shape[d] if rng.random() < 0.2 else 0, shape[d], size=ishape)
    # (dim=None of a non-contiguous input: torch's view(-1) refuses it, a torch bug; left out)
    x = Input(rng, shape, view="plain" if dim is None else None)

    def body(lib):
        xl, xt = x.make(lib)
        i = lib.tensor(idx, dtype=lib.int64)
        out = lib.take_along_dim(xt, i) if dim is None else lib.take_along_dim(xt, i, dim=dim)
        return [out], [xl]

    return _trial(f"take_along_dim {x} idx={idx.tolist()} dim={dim}", body, None, weight)


def _sc_gather(rng, weight):
    shape = _shape(rng, 0, 3, 1, 4)
    nd = len(shape)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    d = dim % nd if nd else 0
    size = shape[d] if nd else 1
    ishape = tuple(int(rng.integers(0, n + 1)) if i != d else int(rng.integers(0, 5))
                   for i, n in enumerate(shape)) if nd else _pick(rng, (), (2,))  # fmt: skip
    bad = rng.random() < 0.08
    idx = _index_values(rng, ishape, size, bad)
    sparse = _pick(rng, False, False, True)
    x = Input(rng, shape)

    def body(lib):
        xl, xt = x.make(lib)
        i = lib.tensor(idx, dtype=lib.int64)
        out = lib.gather(xt, dim, i, sparse_grad=False) if sparse else xt.gather(dim, i)
        return [out], [xl]

    return _trial(f"gather {x} dim={dim} idx={idx.tolist()} bad={bad}", body, None, weight)


def _sc_index_select(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    nd = len(shape)
    dim = int(rng.integers(-max(nd, 1), max(nd, 1)))
    size = shape[dim % nd] if nd else 1
    k = int(rng.integers(0, 5))
    idx = rng.integers(0, max(size, 1), size=_pick(rng, (k,), ()))
    if (rng.random() < 0.1 or size == 0) and idx.size:
        idx.flat[0] = size
    x = Input(rng, shape)

    def body(lib):
        xl, xt = x.make(lib)
        return [xt.index_select(dim, lib.tensor(idx, dtype=lib.int64))], [xl]

    return _trial(f"index_select {x} dim={dim} idx={idx.tolist()}", body, None, weight)


def _sc_masked_scatter(rng, weight):
    shape = _shape(rng, 0, 3, 1, 4)
    mshape = tuple(_pick(rng, n, 1) for n in shape)[int(rng.integers(0, len(shape) + 1)) :]
    mask = rng.random(mshape) < 0.5
    n = int(np.prod(shape)) if shape else 1
    m = n - int(rng.integers(0, 2)) if rng.random() < 0.2 else n + int(rng.integers(0, 3))
    x = Input(rng, shape)
    src = Input(rng, _pick(rng, (m,), (1, m)), view="plain")
    how = _pick(rng, "method", "inplace")

    def body(lib):
        xl, xt = x.make(lib)
        sl, st = src.make(lib)
        mk = lib.tensor(mask)
        if how == "method":
            out = xt.masked_scatter(mk, st)
        else:
            out = xt * 1.0
            out.masked_scatter_(mk, st)
        return [out], [xl, sl]

    return _trial(f"masked_scatter {x} mask{mshape} src{src.shape} {how}", body, None, weight)


# ---- result dtypes of n-ary ops ------------------------------------------------------------

PROMO_DTYPES = ["bool", "int64", "float32", "float64"]
PROMO_SCALARS = [True, 2, -3, 0.5, -1.5, 0]


def _promo_operand(rng):
    """("tensor", dtype, shape) — a 0-d tensor sometimes — or ("scalar", value)."""
    if rng.random() < 0.3:
        return ("scalar", _pick(rng, *PROMO_SCALARS))
    dtype = _pick(rng, *PROMO_DTYPES)
    shape = _pick(rng, (), (3,), (2, 3), (1, 3))
    return ("tensor", dtype, shape)


def _promo_value(lib, spec, seed):
    if spec[0] == "scalar":
        return spec[1]
    _, dtype, shape = spec
    r = np.random.default_rng(seed)
    if dtype == "bool":
        a = r.random(shape) < 0.5
    elif dtype == "int64":
        a = r.integers(-3, 4, size=shape)
    else:
        a = r.uniform(-2, 2, size=shape)
    return lib.tensor(a, dtype=getattr(lib, dtype))


PROMO_OPS = {
    "where": (3, lambda lib, c, a, b: lib.where(c if _is_t(lib, c) else lib.tensor(c) > 0, a, b)),
    "where_bool": (
        3,
        lambda lib, c, a, b: lib.where((c > 0) if _is_t(lib, c) else lib.tensor(bool(c)), a, b),
    ),
    "clamp": (3, lambda lib, a, lo, hi: lib.clamp(a, lo, hi)),
    "clamp_min": (2, lambda lib, a, lo: lib.clamp(a, min=lo)),
    "clamp_max_method": (2, lambda lib, a, hi: a.clamp(max=hi) if _is_t(lib, a) else None),
    "cat": (3, lambda lib, a, b, c: lib.cat([_t(lib, a), _t(lib, b), _t(lib, c)], -1)),
    "stack": (2, lambda lib, a, b: lib.stack([_t(lib, a), _t(lib, b)])),
    "addcmul": (3, lambda lib, a, b, c: lib.addcmul(_t(lib, a), _t(lib, b), _t(lib, c))),
    "addcmul_value": (
        3,
        lambda lib, a, b, c: lib.addcmul(_t(lib, a), _t(lib, b), _t(lib, c), value=2),
    ),
    "addcdiv": (3, lambda lib, a, b, c: lib.addcdiv(_t(lib, a), _t(lib, b), _t(lib, c))),
    "lerp": (3, lambda lib, a, b, w: lib.lerp(_t(lib, a), _t(lib, b), w)),
    "float_power": (2, lambda lib, a, b: lib.float_power(a, b)),
    # (a bool exponent: torch refuses it for a float input only, its kernel's dispatch;
    # left out)
    "ldexp": (2, lambda lib, a, b: lib.ldexp(_t(lib, a), _nobool(lib, _t(lib, b)))),
    "heaviside": (2, lambda lib, a, b: lib.heaviside(_t(lib, a), _t(lib, b))),
    "gcd": (2, lambda lib, a, b: lib.gcd(_t(lib, a), _t(lib, b))),
    "copysign": (2, lambda lib, a, b: lib.copysign(a, b)),
    "nextafter": (2, lambda lib, a, b: lib.nextafter(_t(lib, a), _t(lib, b))),
    "true_divide": (2, lambda lib, a, b: lib.true_divide(a, b)),
    "floor_divide": (2, lambda lib, a, b: lib.floor_divide(a, b)),
    "result_type": (2, lambda lib, a, b: str(lib.result_type(a, b)).split(".")[-1]),
    "promote_types": (
        2,
        lambda lib, a, b: str(lib.promote_types(_t(lib, a).dtype, _t(lib, b).dtype)).split(".")[-1],
    ),
    "can_cast": (2, lambda lib, a, b: str(lib.can_cast(_t(lib, a).dtype, _t(lib, b).dtype))),
    "full": (1, lambda lib, v: lib.full((2,), v if not _is_t(lib, v) else 1)),
    "full_like": (2, lambda lib, a, v: lib.full_like(_t(lib, a), v if not _is_t(lib, v) else 2)),
    "maximum": (2, lambda lib, a, b: lib.maximum(_t(lib, a), _t(lib, b))),
    "fmin": (2, lambda lib, a, b: lib.fmin(_t(lib, a), _t(lib, b))),
    "dot": (2, lambda lib, a, b: lib.dot(_t(lib, a).flatten()[:2], _t(lib, b).flatten()[:2])),
    "matmul": (2, lambda lib, a, b: _t(lib, a).reshape(1, -1)[:, :1] @ _t(lib, b).reshape(1, -1)),
    "isclose": (2, lambda lib, a, b: lib.isclose(_t(lib, a), _t(lib, b))),
    "eq_scalar_tensor": (2, lambda lib, a, b: _t(lib, a) == b),
    "bitwise_or": (2, lambda lib, a, b: _t(lib, a) | b),
    "remainder_scalar_first": (
        2,
        lambda lib, a, b: lib.remainder(a, _t(lib, b)) if not _is_t(lib, a) else a % b,
    ),
    "sum_dtype": (1, lambda lib, a: _t(lib, a).sum(dtype=lib.float64)),
    "prod_int": (1, lambda lib, a: _t(lib, a).prod()),
    "mean_int": (1, lambda lib, a: _t(lib, a).mean()),
    "cumsum_bool": (1, lambda lib, a: _t(lib, a).reshape(-1).cumsum(0)),
    "cumsum_dtype": (1, lambda lib, a: _t(lib, a).reshape(-1).cumsum(0, dtype=lib.float32)),
    "sum_bool": (1, lambda lib, a: _t(lib, a).sum(-1)),
    "abs_neg": (1, lambda lib, a: (-_t(lib, a)) if _t(lib, a).dtype != lib.bool else abs(a)),
    "sign_sqrt": (1, lambda lib, a: (lib.sign(_t(lib, a)), lib.sqrt(_t(lib, a).abs()))),
    "trunc_round": (1, lambda lib, a: (lib.trunc(_t(lib, a)), lib.round(_t(lib, a)))),
    "softmax_int": (1, lambda lib, a: lib.softmax(_t(lib, a).reshape(-1), 0)),
    "masked_fill_float_into_int": (
        2,
        lambda lib, a, b: _t(lib, a).masked_fill(_t(lib, a) != 0, b if not _is_t(lib, b) else 1),
    ),
    "inplace_add": (2, lambda lib, a, b: _inplace(lib, a, b, "add_")),
    "inplace_mul": (2, lambda lib, a, b: _inplace(lib, a, b, "mul_")),
    "inplace_div": (2, lambda lib, a, b: _inplace(lib, a, b, "div_")),
    "inplace_clamp": (2, lambda lib, a, b: _inplace(lib, a, b, "clamp_")),
    "inplace_copy": (2, lambda lib, a, b: _t(lib, a).clone().copy_(_t(lib, b).expand_as(a))),
}


def _is_t(lib, x):
    return isinstance(x, lib.Tensor)


def _t(lib, x):
    return x if _is_t(lib, x) else lib.tensor(x)


def _nobool(lib, t):
    return t.long() if t.dtype == lib.bool else t


def _inplace(lib, a, b, name):
    a = _t(lib, a).clone()
    return getattr(a, name)(b)


@gen("promotion")
def _promotion(rng):
    name = sorted(PROMO_OPS)[int(rng.integers(len(PROMO_OPS)))]
    arity, f = PROMO_OPS[name]
    specs = [_promo_operand(rng) for _ in range(arity)]
    if name in ("true_divide", "floor_divide") and all(sp[0] == "scalar" for sp in specs):
        # (two numbers: torch's arithmetic functions take them, retrograd refuses them with
        # a clear error, a known gap; left out)
        specs[1] = ("tensor", "float64", (3,))
    seeds = [int(v) for v in rng.integers(1 << 30, size=arity)]

    def fn(lib):
        args = [_promo_value(lib, s, k) for s, k in zip(specs, seeds)]
        out = f(lib, *args)
        return list(out) if isinstance(out, tuple) else [out]

    return Trial(f"promotion {name} {specs}", fn, rtol=1e-6)


# ---- linalg on batched and awkward inputs --------------------------------------------------


def _batch(rng):
    return _pick(rng, (), (2,), (1, 2), (2, 1))


def _well(rng, shape):
    """A well-conditioned square batch: noise plus a multiple of the identity."""
    n = shape[-1]
    return rng.uniform(-1, 1, size=shape) + 3.0 * np.eye(n)


@gen("linalg")
def _linalg(rng):
    kind = _pick(
        rng,
        "solve_triangular",
        "lu_factor",
        "lu",
        "matrix_power",
        "vecdot",
        "multi_dot",
        "cross",
        "cond",
        "matrix_rank",
        "vander",
        "tensordot",
        "kron",
        "block_diag",
        "cdist",
        "addmm_family",
        "trace_logdet",
        "solve_batched",
        "norms",
    )
    return globals()["_la_" + kind](rng, _weight_fn(rng))


def _la_solve_triangular(rng, weight):
    n, k = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    b = _batch(rng)
    upper, left, unit = _pick(rng, True, False), _pick(rng, True, False), _pick(rng, True, False)
    a = _well(rng, (*b, n, n))
    rhs = rng.uniform(-1, 1, size=(*_pick(rng, b, ()), n, k) if left else (*b, k, n))
    if rng.random() < 0.1:
        rhs = rng.uniform(-1, 1, size=(n + 1, k))  # both refuse

    def body(lib):
        A = lib.tensor(a, requires_grad=True)  # noqa: N806
        B = lib.tensor(rhs, requires_grad=True)  # noqa: N806
        out = lib.linalg.solve_triangular(A, B, upper=upper, left=left, unitriangular=unit)
        return [out], [A, B]

    return _trial(
        f"solve_triangular {a.shape} {rhs.shape} upper={upper} left={left} unit={unit}",
        body,
        None,
        weight,
        rtol=1e-7,
    )


def _la_lu_factor(rng, weight):
    n = int(rng.integers(1, 4))
    a = _well(rng, (*_batch(rng), n, n))
    pivot = True

    def body(lib):
        A = lib.tensor(a, requires_grad=True)  # noqa: N806
        LU, piv = lib.linalg.lu_factor(A, pivot=pivot)  # noqa: N806
        # (compared as int64: the trial's int outputs)
        return [LU, piv.long()], [A]

    return _trial(f"lu_factor {a.shape}", body, None, weight, rtol=1e-7)


def _la_lu(rng, weight):
    m, n = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    a = rng.uniform(-1, 1, size=(*_batch(rng), m, n))
    a[..., : min(m, n), : min(m, n)] += 3 * np.eye(min(m, n))  # pivots stay on the diagonal

    def body(lib):
        A = lib.tensor(a, requires_grad=True)  # noqa: N806
        P, L, U = lib.linalg.lu(A)  # noqa: N806
        return [P, L, U], [A]

    return _trial(f"lu {a.shape}", body, None, weight, rtol=1e-7)


def _la_matrix_power(rng, weight):
    n = int(rng.integers(1, 4))
    k = int(rng.integers(-3, 5))
    a = _well(rng, (*_batch(rng), n, n)) / 3.0
    nonsquare = rng.random() < 0.1
    if nonsquare:
        a = a[..., :, :0] if n == 1 else a[..., :, 1:]

    def body(lib):
        A = lib.tensor(a, requires_grad=True)  # noqa: N806
        return [lib.linalg.matrix_power(A, k)], [A]

    return _trial(f"matrix_power {a.shape} k={k}", body, None, weight, rtol=1e-7)


def _la_vecdot(rng, weight):
    n = int(rng.integers(0, 4))
    sa, sb = (*_batch(rng), n), (*_batch(rng), n)
    dim = _pick(rng, -1, -1, 0)
    x, y = Input(rng, sa), Input(rng, sb)

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        return [lib.linalg.vecdot(xt, yt, dim=dim)], [xl, yl]

    return _trial(f"vecdot {x} {y} dim={dim}", body, None, weight)


def _la_multi_dot(rng, weight):
    k = int(rng.integers(1, 5))
    dims = [int(v) for v in rng.integers(1, 4, size=k + 1)]
    shapes = [(dims[i], dims[i + 1]) for i in range(k)]
    vec_first, vec_last = rng.random() < 0.3, rng.random() < 0.3
    if vec_first:
        shapes[0] = (dims[1],)
    if vec_last and (k > 1 or not vec_first):
        shapes[-1] = (dims[-2],)
    if rng.random() < 0.1:
        shapes[0] = (dims[0], dims[1] + 1)  # both refuse
    mats = [Input(rng, s, view=_pick(rng, "plain", "T")) for s in shapes]

    def body(lib):
        made = [m.make(lib) for m in mats]
        return [lib.linalg.multi_dot([t for _, t in made])], [leaf for leaf, _ in made]

    return _trial(f"multi_dot {mats}", body, None, weight)


def _la_cross(rng, weight):
    b = _shape(rng, 0, 2, 1, 3)
    pos = int(rng.integers(0, len(b) + 1))
    sa = b[:pos] + (3,) + b[pos:]
    sb = tuple(_pick(rng, n, 1) if n != 3 else 3 for n in sa)
    dim = _pick(rng, None, pos, pos - len(sa))
    fn_name = _pick(rng, "linalg", "torch")
    x, y = Input(rng, sa), Input(rng, sb)

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        if fn_name == "linalg":
            out = lib.linalg.cross(xt, yt) if dim is None else lib.linalg.cross(xt, yt, dim=dim)
        else:
            out = lib.cross(xt, yt) if dim is None else lib.cross(xt, yt, dim=dim)
        return [out], [xl, yl]

    return _trial(f"cross {fn_name} {x} {y} dim={dim}", body, None, weight)


def _la_cond(rng, weight):
    n = int(rng.integers(1, 4))
    p = _pick(rng, None, 2, -2, 1, -1, math.inf, -math.inf, "fro", "nuc")
    a = _well(rng, (*_batch(rng), n, n))

    def body(lib):
        # (the gradient of the other orders: torch's own backward refuses it, its inverse
        # modified in place; left out)
        A = lib.tensor(a, requires_grad=p in (2, -2, None))  # noqa: N806
        return [lib.linalg.cond(A, p)], [A]

    return _trial(f"cond {a.shape} p={p}", body, None, weight, rtol=1e-7)


def _la_matrix_rank(rng, weight):
    m, n = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    r = int(rng.integers(0, min(m, n) + 1))
    b = _batch(rng)
    a = rng.uniform(-1, 1, size=(*b, m, r)) @ rng.uniform(-1, 1, size=(*b, r, n))
    herm = rng.random() < 0.3 and m == n
    if herm:
        a = a @ np.swapaxes(a, -1, -2)
    kw = _pick(rng, {}, {"atol": 0.5}, {"rtol": 0.1}, {"tol": 1e-3})
    if herm:
        kw = dict(kw, hermitian=True)

    def body(lib):
        A = lib.tensor(a)  # noqa: N806
        return [lib.linalg.matrix_rank(A, **kw)], []

    return _trial(f"matrix_rank {a.shape} rank={r} {kw}", body, None, weight)


def _la_vander(rng, weight):
    x = Input(rng, (*_batch(rng), int(rng.integers(0, 4))))
    n = _pick(rng, None, 0, 1, 3)

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.linalg.vander(xt, N=n)], [xl]

    return _trial(f"vander {x} N={n}", body, None, weight)


def _la_tensordot(rng, weight):
    shared = _shape(rng, 0, 2, 1, 4)
    a_extra, b_extra = _shape(rng, 0, 2, 1, 3), _shape(rng, 0, 2, 1, 3)
    how = _pick(rng, "int", "lists", "bad")
    if how == "int":
        sa, sb, dims = a_extra + shared, shared + b_extra, len(shared)
    else:
        pa = rng.permutation(len(shared))
        sa = shared + a_extra
        sb = b_extra + tuple(shared[i] for i in pa)
        dims = (
            list(range(len(shared))),
            [len(b_extra) + int(np.flatnonzero(pa == i)[0]) for i in range(len(shared))],
        )
        if how == "bad" and shared:
            sb = b_extra + tuple(shared[i] + 1 for i in pa)
    x, y = Input(rng, sa), Input(rng, sb)

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        return [lib.tensordot(xt, yt, dims=dims)], [xl, yl]

    return _trial(f"tensordot {x} {y} dims={dims}", body, None, weight)


def _la_kron(rng, weight):
    # (non-contiguous inputs: torch's kron views them, and refuses; left out)
    x = Input(rng, _shape(rng, 0, 3, 1, 3), view=_pick(rng, "plain", "expand"))
    y = Input(rng, _shape(rng, 0, 3, 1, 3), view=_pick(rng, "plain", "expand"))

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        return [lib.kron(xt, yt)], [xl, yl]

    return _trial(f"kron {x} {y}", body, None, weight)


def _la_block_diag(rng, weight):
    # (a 1-d empty block: torch's backward misplaces the blocks after it; left out)
    shapes = [_pick(rng, (), (2,), (1, 3), (2, 2), (0, 2)) for _ in range(int(rng.integers(1, 4)))]
    dtypes = [_pick(rng, "float64", "float64", "int64") for _ in shapes]
    ins = [Input(rng, s, d) for s, d in zip(shapes, dtypes)]

    def body(lib):
        made = [i.make(lib) for i in ins]
        return [lib.block_diag(*[t for _, t in made])], [leaf for leaf, _ in made]

    return _trial(f"block_diag {ins}", body, None, weight)


def _la_cdist(rng, weight):
    d = int(rng.integers(1, 4))
    b = _pick(rng, (), (2,))
    # (uniform values: no ties between the coordinate differences that p = inf compares)
    x = Input(rng, (*b, int(rng.integers(0, 4)), d))
    y = Input(rng, (*_pick(rng, b, (1,) * len(b)), int(rng.integers(1, 4)), d))
    p = _pick(rng, 0.0, 1.0, 2.0, 3.0, 0.5, math.inf)
    mode = _pick(rng, "use_mm_for_euclid_dist_if_necessary", "donot_use_mm_for_euclid_dist")

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        # p = 0 counts differences: no gradient in torch (left out)
        if p == 0.0:
            xl.requires_grad_(False), yl.requires_grad_(False)
        return [lib.cdist(xt, yt, p=p, compute_mode=mode)], [xl, yl]

    return _trial(f"cdist {x} {y} p={p}", body, None, weight, rtol=1e-7)


def _la_addmm_family(rng, weight):
    which = _pick(rng, "addmm", "addbmm", "baddbmm", "addmv", "addr")
    n, m, k, bt = (int(v) for v in rng.integers(1, 4, size=4))
    shapes = {
        "addmm": ((n, m), (n, k), (k, m)),
        "addbmm": ((n, m), (bt, n, k), (bt, k, m)),
        "baddbmm": ((bt, n, m), (bt, n, k), (bt, k, m)),
        "addmv": ((n,), (n, k), (k,)),
        "addr": ((n, m), (n,), (m,)),
    }[which]
    self_shape = shapes[0]
    if rng.random() < 0.4:  # a broadcasting input
        self_shape = tuple(_pick(rng, s, 1) for s in self_shape)[int(rng.integers(0, 2)) :]
    beta, alpha = _pick(rng, 1, 0, 0.5, -2), _pick(rng, 1, 0.5, 0, 2)
    nan = beta == 0 and rng.random() < 0.5  # beta = 0: the input's NaN is ignored
    x = Input(rng, self_shape)
    if nan:
        x.array = np.full_like(x.array, math.nan)
    a, b = Input(rng, shapes[1]), Input(rng, shapes[2])

    def body(lib):
        xl, xt = x.make(lib)
        al, at = a.make(lib)
        bl, bt_ = b.make(lib)
        out = getattr(lib, which)(xt, at, bt_, beta=beta, alpha=alpha)
        return [out], [xl, al, bl]

    return _trial(f"{which} {x} {a} {b} beta={beta} alpha={alpha}", body, None, weight)


def _la_trace_logdet(rng, weight):
    which = _pick(rng, "trace", "logdet", "slogdet", "det")
    if which == "trace":
        x = Input(rng, _shape(rng, 2, 2, 0, 4))
    else:
        n = int(rng.integers(0, 4))
        x = Input(rng, (*_batch(rng), n, n), view=_pick(rng, "plain", "T"))
        x.array = x.array + 3 * np.eye(n) * _pick(rng, 1, -1)  # logdet of -: NaN
    # a singular matrix (no gradient: torch's at a singular matrix is its solver's noise)
    singular = which != "trace" and rng.random() < 0.15 and x.shape[-1] > 1
    if singular:  # (a zero row: an exact zero pivot; a repeated row is rounding's to call)
        x.array[..., 0, :] = 0.0

    def body(lib):
        xl, xt = x.make(lib, grad=not singular)
        if which == "slogdet":
            sign, val = lib.linalg.slogdet(xt)
            return [sign, val], [xl]
        return [getattr(lib, which)(xt)], [xl]

    return _trial(f"{which} {x}", body, None, weight, rtol=1e-6)


def _la_solve_batched(rng, weight):
    n = int(rng.integers(1, 4))
    ab, bb = _batch(rng), _batch(rng)
    a = _well(rng, (*ab, n, n))
    vec = rng.random() < 0.3
    left = _pick(rng, True, False) if not vec else True
    rhs = rng.uniform(-1, 1, size=(*bb, n) if vec else (*bb, n, 2) if left else (*bb, 2, n))
    which = _pick(rng, "solve", "inv", "pinv", "lstsq")

    def body(lib):
        A = lib.tensor(a, requires_grad=True)  # noqa: N806
        B = lib.tensor(rhs, requires_grad=True)  # noqa: N806
        if which == "solve":
            return [lib.linalg.solve(A, B, left=left)], [A, B]
        if which == "inv":
            return [lib.linalg.inv(A)], [A]
        if which == "pinv":
            return [lib.linalg.pinv(A)], [A]
        # (a B of one dimension fewer than A, not A's shape less its last dimension: torch
        # takes some, pairing entries of different batches, where retrograd refuses them
        # all; left out)
        if B.ndim == A.ndim - 1 and tuple(B.shape) != tuple(A.shape[:-1]):
            B = B[..., None]  # noqa: N806
        return [lib.linalg.lstsq(A, B).solution], [A, B]

    return _trial(f"{which} {a.shape} {rhs.shape} left={left}", body, None, weight, rtol=1e-6)


def _la_norms(rng, weight):
    which = _pick(rng, "vector_norm", "matrix_norm", "norm")
    shape = _shape(rng, 1, 4, 1, 4)
    x = Input(rng, shape, distinct=True)
    nd = len(shape)
    keep = _pick(rng, True, False)
    if which == "vector_norm":
        ord_ = _pick(rng, 2, 1, 0, 3, 0.5, math.inf, -math.inf, -1)
        dim = _pick(rng, None, int(rng.integers(-nd, nd)), tuple(range(nd))[-2:])
        kw = {"ord": ord_, "dim": dim, "keepdim": keep}
        if ord_ == 0:
            x.view = "plain"
    elif which == "matrix_norm":
        ord_ = _pick(rng, "fro", "nuc", 1, -1, math.inf, -math.inf, 2, -2)
        kw = {"ord": ord_, "keepdim": keep}
        if nd < 2:
            kw["dim"] = (0, -1)  # both refuse: one dimension given twice
    else:
        ord_ = _pick(rng, None, "fro", 2, 1, math.inf)
        dim = _pick(rng, None, -1, (0, -1) if nd >= 2 else -1)
        kw = {"ord": ord_, "dim": dim, "keepdim": keep}
        if ord_ is not None and dim is None and nd > 2:
            kw["dim"] = (0, 1)
    dtype_kw = _pick(rng, None, "float64")

    def body(lib):
        xl, xt = x.make(lib)
        extra = {"dtype": lib.float64} if dtype_kw else {}
        f = getattr(lib.linalg, which)
        return [f(xt, **kw, **extra)], [xl]

    return _trial(f"{which} {x} {kw} dtype={dtype_kw}", body, None, weight, rtol=1e-7)


# ---- second derivatives of programs through views and in-place updates --------------------

#: writable views of a [3, 4] tensor (strided ones only: a reshape of a non-contiguous tensor
#: is a copy in torch, whose writes do not reach the base)
CHAIN_VIEWS = {
    "rows": lambda t: t[1:],
    "cols_step": lambda t: t[..., ::2],
    "T": lambda t: t.T,
    "row0": lambda t: t[0],
    "narrow": lambda t: t.narrow(-1, 1, 2),
    "diagonal": lambda t: t.diagonal(),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "select_neg": lambda t: t.select(-1, -1),
    "movedim": lambda t: t.movedim(0, -1),
    "middle": lambda t: t[:, 1:3],
}

#: smooth in-place writes ``v.op_(o)`` (o: a tensor of v's shape from the leaves)
CHAIN_WRITES = {
    "mul_": lambda v, o, c: v.mul_(o),
    "add_": lambda v, o, c: v.add_(o, alpha=-0.5),
    "sub_c": lambda v, o, c: v.sub_(c),
    "div_": lambda v, o, c: v.div_(o * o + 1.0),
    "addcmul_": lambda v, o, c: v.addcmul_(o, v, value=0.5),
    "addcdiv_": lambda v, o, c: v.addcdiv_(o, o * o + 2.0, value=-1.0),
    "lerp_": lambda v, o, c: v.lerp_(o, 0.3),
    "copy_": lambda v, o, c: v.copy_(o * c),
    "pow_": lambda v, o, c: v.pow_(2),
    "tanh_": lambda v, o, c: v.tanh_(),
    "sigmoid_": lambda v, o, c: v.sigmoid_(),
    "square_": lambda v, o, c: v.square_(),
    "mul_c": lambda v, o, c: v.mul_(c),
    "sin_": lambda v, o, c: v.sin_(),
    "exp_": lambda v, o, c: v.mul_(0.3).exp_(),
    "masked_fill_": lambda v, o, c: v.masked_fill_(o > 0.2, 0.5),
    "clamp_": lambda v, o, c: v.clamp_(-0.6, 0.7),
    "iadd": None,
    "imul": None,
}

#: out-of-place steps on the [3, 4] tensor (b: the tensor, x: the leaf, c: a 0-d leaf)
CHAIN_OPS = {
    "mul_x": lambda lib, b, x, c: b * x,
    "tanh": lambda lib, b, x, c: b.tanh(),
    "sin": lambda lib, b, x, c: b.sin(),
    "matmul": lambda lib, b, x, c: b @ (x.T @ x * 0.1),
    "softmax": lambda lib, b, x, c: lib.softmax(b, -1),
    "add_T": lambda lib, b, x, c: b + x.T.T * c,
    "cumsum": lambda lib, b, x, c: b.cumsum(0) * 0.5,
    "logsumexp": lambda lib, b, x, c: b - b.logsumexp(-1, keepdim=True),
    "norm": lambda lib, b, x, c: b / (b.norm(dim=0, keepdim=True) + 1.0),
    "where": lambda lib, b, x, c: lib.where(x > 0, b * b, b * c),
    "flip": lambda lib, b, x, c: b.flip(0) * x,
    "roll": lambda lib, b, x, c: b.roll(1, -1) + b,
    "clone_T": lambda lib, b, x, c: b.T.clone().T * c,
}


@gen("chain2")
def _chain2(rng):
    steps = []
    for _ in range(int(rng.integers(3, 7))):
        if rng.random() < 0.6:
            views = [_pick(rng, *sorted(CHAIN_VIEWS)) for _ in range(int(rng.integers(1, 3)))]
            # a clone first, half the time: torch refuses to differentiate through a value
            # saved for backward and then written (retrograd keeps it), which would end most
            # programs of several writes
            fresh = bool(rng.random() < 0.5)
            steps.append(("write", views, _pick(rng, *sorted(CHAIN_WRITES)), fresh))
        else:
            steps.append(("op", _pick(rng, *sorted(CHAIN_OPS))))
    xa = rng.uniform(-1, 1, size=(3, 4))
    ca = float(rng.uniform(0.5, 1.5))
    weight = _weight_fn(rng)
    vseed = int(rng.integers(1 << 30))

    def fn(lib):
        x = lib.tensor(xa, requires_grad=True)
        c = lib.tensor(ca, dtype=lib.float64, requires_grad=True)
        b = (x * 1.5).sin()  # not a leaf: in-place writes are allowed
        other = x.cos() * c
        for step in steps:
            if step[0] == "op":
                b = CHAIN_OPS[step[1]](lib, b, x, c)
                continue
            _, views, write, fresh = step
            if fresh:
                b = b.clone()
            v, o = b, other
            for name in views:
                v, o = CHAIN_VIEWS[name](v), CHAIN_VIEWS[name](o)
            if write == "iadd":
                v += o
            elif write == "imul":
                v *= o
            else:
                CHAIN_WRITES[write](v, o, c)
        w = lib.tensor(weight(tuple(b.shape)), dtype=lib.float64)
        loss = (b * w).sum()
        gx, gc = lib.autograd.grad(loss, [x, c], create_graph=True, allow_unused=True)
        v = lib.tensor(np.random.default_rng(vseed).uniform(-1, 1, (3, 4)), dtype=lib.float64)
        second = (gx * v).sum() + (0.0 if gc is None else gc * 0.7)
        hx, hc = lib.autograd.grad(second, [x, c], allow_unused=True)
        return [b, gx, gc, hx, hc]

    return Trial("chain2 " + " | ".join(str(s[1:]) for s in steps), fn, rtol=1e-7)


# ---- nn.functional on unusual arguments ----------------------------------------------------


@gen("nnf")
def _nnf(rng):
    kind = _pick(
        rng,
        "lp_pool",
        "local_response_norm",
        "similarity",
        "pdist",
        "one_hot",
        "adaptive_max_pool",
        "activations",
        "avg_pool",
        "max_pool",
        "normalize",
        "losses",
        "embedding",
    )
    return globals()["_nf_" + kind](rng, _weight_fn(rng))


def _nf_lp_pool(rng, weight):
    two = rng.random() < 0.5
    spatial = _shape(rng, 2 if two else 1, 2 if two else 1, 1, 6)
    x = Input(rng, (*_pick(rng, (1,), (2,), ()), int(rng.integers(1, 3)), *spatial))
    x.array = np.abs(x.array) + 0.1  # (torch's p-th root at a zero sum: NaN gradient)
    p = _pick(rng, 1.0, 2.0, 3.0, 1.5)
    k = _pick(rng, 1, 2, 3, (2, 1)) if two else _pick(rng, 1, 2, 3)
    stride = _pick(rng, None, 1, 2)
    ceil = _pick(rng, True, False)

    def body(lib):
        xl, xt = x.make(lib)
        f = lib.nn.functional.lp_pool2d if two else lib.nn.functional.lp_pool1d
        return [f(xt, p, k, stride=stride, ceil_mode=ceil)], [xl]

    return _trial(f"lp_pool {x} p={p} k={k} stride={stride} ceil={ceil}", body, None, weight,
                  rtol=1e-7)  # fmt: skip


def _nf_local_response_norm(rng, weight):
    x = Input(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 6)), *_shape(rng, 0, 2, 1, 4)))
    size = int(rng.integers(1, 5))
    kw = {"alpha": _pick(rng, 1e-4, 0.5), "beta": _pick(rng, 0.75, 1.5), "k": _pick(rng, 1.0, 2.0)}

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.nn.functional.local_response_norm(xt, size, **kw)], [xl]

    return _trial(f"local_response_norm {x} size={size} {kw}", body, None, weight, rtol=1e-7)


def _nf_similarity(rng, weight):
    shape = _shape(rng, 1, 3, 1, 4)
    other = tuple(_pick(rng, n, 1) for n in shape)
    nd = len(shape)
    which = _pick(rng, "cosine_similarity", "pairwise_distance")
    dim = int(rng.integers(-nd, nd))
    x, y = Input(rng, shape), Input(rng, other)
    zero = rng.random() < 0.15  # a zero vector: eps decides
    p = _pick(rng, 2.0, 1.0, 3.0, math.inf)
    eps = _pick(rng, 1e-8, 1e-6, 0.5)
    keep = _pick(rng, True, False)

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        if zero:
            xt = xt * 0.0
        f = lib.nn.functional
        if which == "cosine_similarity":
            return [f.cosine_similarity(xt, yt, dim=dim, eps=eps)], [xl, yl]
        if nd > 2:  # torch's pairwise_distance: 1-d or 2-d inputs, the last dim
            xt, yt = xt.flatten(0, -2), yt.flatten(0, -2)
        return [f.pairwise_distance(xt, yt, p=p, eps=eps, keepdim=keep)], [xl, yl]

    return _trial(f"{which} {x} {y} dim={dim} p={p} eps={eps} keep={keep} zero={zero}", body,
                  None, weight, rtol=1e-7)  # fmt: skip


def _nf_pdist(rng, weight):
    # (no rows: torch's backward crashes the process; left out)
    x = Input(
        rng, (int(rng.integers(1, 5)), int(rng.integers(1, 4))), view=_pick(rng, "plain", "T")
    )
    p = _pick(rng, 2.0, 1.0, 3.0, math.inf, 0.5)

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.nn.functional.pdist(xt, p=p)], [xl]

    return _trial(f"pdist {x} p={p}", body, None, weight, rtol=1e-7)


def _nf_one_hot(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    idx = rng.integers(0, 4, size=shape)
    nc = _pick(rng, -1, 4, 5, 2)
    if rng.random() < 0.1 and idx.size:
        idx.flat[0] = -1

    def body(lib):
        return [lib.nn.functional.one_hot(lib.tensor(idx, dtype=lib.int64), nc)], []

    return _trial(f"one_hot {idx.tolist()} nc={nc}", body, None, weight)


def _nf_adaptive_max_pool(rng, weight):
    d = int(rng.integers(1, 3))
    spatial = _shape(rng, d, d, 1, 7)
    x = Input(rng, (*_pick(rng, (1,), ()), int(rng.integers(1, 3)), *spatial), distinct=True)
    out = tuple(int(v) for v in rng.integers(1, 5, size=d))
    if d == 2 and rng.random() < 0.3:
        out = (out[0], None)
    size = out[0] if d == 1 else out
    ret = _pick(rng, True, False)

    def body(lib):
        xl, xt = x.make(lib)
        f = getattr(lib.nn.functional, f"adaptive_max_pool{d}d")
        res = f(xt, size, return_indices=ret)
        return (list(res) if ret else [res]), [xl]

    return _trial(f"adaptive_max_pool{d}d {x} {size} indices={ret}", body, None, weight)


def _nf_activations(rng, weight):
    which = _pick(rng, "softmin", "hardtanh", "threshold", "celu", "rrelu", "prelu", "glu",
                  "softshrink", "hardshrink", "elu", "selu", "relu6", "logsigmoid",
                  "softplus", "leaky_relu", "gumbel_free", "silu", "mish", "hardswish",
                  "hardsigmoid", "tanhshrink", "softsign")  # fmt: skip
    shape = _shape(rng, 1, 3, 1, 4)
    x = Input(rng, shape, values=[-2.0, -1.0, -0.5, 0.25, 1.0, 3.0, 6.5, -3.0])
    x.array = x.array + rng.uniform(-0.01, 0.01, size=x.array.shape)  # off the kinks
    nd = len(shape)
    dim = int(rng.integers(-nd, nd))
    inplace = _pick(rng, True, False)

    def body(lib):
        xl, xt = x.make(lib)
        f = lib.nn.functional
        y = xt * 1.0  # (in place on a non-leaf)
        if which == "softmin":
            out = f.softmin(y, dim=dim, dtype=lib.float64)
        elif which == "hardtanh":
            out = f.hardtanh(y, -0.5, 2.0, inplace=inplace)
        elif which == "threshold":
            out = f.threshold(y, 0.3, -7.0, inplace=inplace)
        elif which == "celu":
            out = f.celu(y, alpha=0.7, inplace=inplace)
        elif which == "rrelu":
            out = f.rrelu(y, 0.1, 0.3, training=False, inplace=inplace)
        elif which == "prelu":
            w = lib.tensor([0.25] * (shape[1] if nd > 1 else 1), dtype=lib.float64)
            out = f.prelu(y, w)
        elif which == "glu":
            out = f.glu(y, dim=dim)
        elif which == "softshrink":
            out = f.softshrink(y, 0.6)
        elif which == "hardshrink":
            out = f.hardshrink(y, 0.6)
        elif which == "elu":
            out = f.elu(y, alpha=1.3, inplace=inplace)
        elif which == "selu":
            out = f.selu(y, inplace=inplace)
        elif which == "relu6":
            out = f.relu6(y, inplace=inplace)
        elif which == "logsigmoid":
            out = f.logsigmoid(y)
        elif which == "softplus":
            out = f.softplus(y, beta=2.0, threshold=1.5)
        elif which == "leaky_relu":
            out = f.leaky_relu(y, 0.2, inplace=inplace)
        elif which == "gumbel_free":
            out = f.log_softmax(y, dim=dim, dtype=lib.float64)
        elif which == "silu":
            out = f.silu(y, inplace=inplace)
        elif which == "mish":
            out = f.mish(y, inplace=inplace)
        elif which == "hardswish":
            out = f.hardswish(y, inplace=inplace)
        elif which == "hardsigmoid":
            out = f.hardsigmoid(y, inplace=inplace)
        elif which == "tanhshrink":
            out = f.tanhshrink(y)
        else:
            out = f.softsign(y)
        # (inplace=True leaves y as it was in retrograd, as nn.ReLU(inplace=True) does, API.md
        # section 10: y itself is not compared then)
        return [out] if inplace else [out, y], [xl]

    return _trial(f"{which} {x} dim={dim} inplace={inplace}", body, None, weight, rtol=1e-7)


def _nf_avg_pool(rng, weight):
    d = int(rng.integers(1, 4))
    spatial = _shape(rng, d, d, 1, 6)
    x = Input(rng, (*_pick(rng, (1,), (2,), ()), int(rng.integers(1, 3)), *spatial))
    k = int(rng.integers(1, 4))
    kw = {
        "stride": _pick(rng, None, 1, 2),
        "padding": _pick(rng, 0, 0, 1),
        "ceil_mode": _pick(rng, True, False),
        "count_include_pad": _pick(rng, True, False),
    }
    if d > 1:
        kw["divisor_override"] = _pick(rng, None, None, 1, 3)

    def body(lib):
        xl, xt = x.make(lib)
        f = getattr(lib.nn.functional, f"avg_pool{d}d")
        return [f(xt, k, **kw)], [xl]

    return _trial(f"avg_pool{d}d {x} k={k} {kw}", body, None, weight, rtol=1e-7)


def _nf_max_pool(rng, weight):
    d = int(rng.integers(1, 4))
    spatial = _shape(rng, d, d, 1, 7)
    x = Input(rng, (*_pick(rng, (1,), ()), int(rng.integers(1, 3)), *spatial), distinct=True)
    k = int(rng.integers(1, 4))
    kw = {
        "stride": _pick(rng, None, 1, 2, 3),
        "padding": _pick(rng, 0, 0, 1),
        "dilation": _pick(rng, 1, 1, 2),
        "ceil_mode": _pick(rng, True, False),
        "return_indices": _pick(rng, True, False),
    }
    if kw["dilation"] > 1:
        # (padding with dilation can make a window of padding only, whose index torch leaves
        # past the input: its backward then writes out of bounds and can crash the process;
        # left out)
        kw["padding"] = 0

    def body(lib):
        xl, xt = x.make(lib)
        f = getattr(lib.nn.functional, f"max_pool{d}d")
        res = f(xt, k, **kw)
        if not kw["return_indices"]:
            return [res], [xl]
        # (a window of padding only, -inf: its index is torch's leftover, past the input;
        # not compared)
        v, i = res
        return [v, i.masked_fill(v == -math.inf, 0)], [xl]

    return _trial(f"max_pool{d}d {x} k={k} {kw}", body, None, weight)


def _nf_normalize(rng, weight):
    shape = _shape(rng, 1, 3, 0, 4)
    nd = len(shape)
    x = Input(rng, shape)
    p = _pick(rng, 2.0, 1.0, 3.0, math.inf, 0.5)
    dim = _pick(rng, int(rng.integers(-nd, nd)), (0, -1) if nd > 1 else -1)
    eps = _pick(rng, 1e-12, 0.5)
    zero = rng.random() < 0.2

    def body(lib):
        xl, xt = x.make(lib)
        if zero:
            xt = xt * 0.0
        return [lib.nn.functional.normalize(xt, p=p, dim=dim, eps=eps)], [xl]

    return _trial(f"normalize {x} p={p} dim={dim} eps={eps} zero={zero}", body, None, weight,
                  rtol=1e-7)  # fmt: skip


def _nf_losses(rng, weight):
    which = _pick(rng, "l1", "mse", "smooth_l1", "huber", "soft_margin", "hinge_embedding",
                  "triplet_distance", "poisson_nll", "gaussian_nll", "bce", "kl_div_log_target",
                  "nll_2d", "ce_2d")  # fmt: skip
    red = _pick(rng, "none", "sum", "mean")
    shape = _shape(rng, 1, 3, 1, 4)
    x, y = Input(rng, shape), Input(rng, tuple(_pick(rng, n, 1) for n in shape))

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        f = lib.nn.functional
        if which == "l1":
            return [f.l1_loss(xt, yt.expand_as(xt), reduction=red)], [xl, yl]
        if which == "mse":
            return [f.mse_loss(xt, yt.expand_as(xt), reduction=red)], [xl, yl]
        if which == "smooth_l1":
            return [f.smooth_l1_loss(xt, yt.expand_as(xt), reduction=red, beta=0.4)], [xl, yl]
        if which == "huber":
            return [f.huber_loss(xt, yt.expand_as(xt), reduction=red, delta=0.7)], [xl, yl]
        if which == "soft_margin":
            t = (yt.expand_as(xt) > 0).double() * 2 - 1
            return [f.soft_margin_loss(xt, t, reduction=red)], [xl]
        if which == "hinge_embedding":
            t = (yt.expand_as(xt) > 0).double() * 2 - 1
            return [f.hinge_embedding_loss(xt, t, margin=0.8, reduction=red)], [xl]
        if which == "triplet_distance":
            a2 = xt.reshape(xt.shape[0], -1)
            p2 = yt.expand_as(xt).reshape(xt.shape[0], -1)
            out = f.triplet_margin_with_distance_loss(
                a2, p2, a2.flip(0) * 0.5, distance_function=f.pairwise_distance, margin=0.6,
                swap=True, reduction=red,
            )  # fmt: skip
            return [out], [xl, yl]
        if which == "poisson_nll":
            return [f.poisson_nll_loss(xt, yt.abs().expand_as(xt), log_input=True, full=True,
                                       reduction=red)], [xl, yl]  # fmt: skip
        if which == "gaussian_nll":
            var = yt.abs() + 0.1
            return [f.gaussian_nll_loss(xt, xt.detach() * 0.5, var, full=True, eps=1e-3,
                                        reduction=red)], [xl, yl]  # fmt: skip
        if which == "bce":
            return [f.binary_cross_entropy(xt.sigmoid(), yt.sigmoid().expand_as(xt),
                                           reduction=red)], [xl, yl]  # fmt: skip
        if which == "kl_div_log_target":
            return [f.kl_div(xt.log_softmax(-1), yt.expand_as(xt).log_softmax(-1),
                             reduction=red, log_target=True)], [xl, yl]  # fmt: skip
        n = xt.shape[0]
        logits = xt.reshape(n, -1)[:, :1].expand(n, 3) * lib.tensor(
            [1.0, -0.5, 2.0], dtype=lib.float64
        )
        logits = logits.reshape(n, 3, 1, 1).expand(n, 3, 2, 2) + yt.reshape(-1)[0]
        tgt = lib.tensor(np.arange(n * 4).reshape(n, 2, 2) % 4 - 1)  # -1: ignored
        if which == "nll_2d":
            return [f.nll_loss(logits.log_softmax(1), tgt, ignore_index=-1, reduction=red)], [
                xl, yl]  # fmt: skip
        return [f.cross_entropy(logits, tgt.clamp(0, 2), reduction=red, label_smoothing=0.1)], [
            xl, yl]  # fmt: skip

    return _trial(f"{which} {x} {y} red={red}", body, None, weight, rtol=1e-7)


def _nf_embedding(rng, weight):
    num, dim = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    idx = rng.integers(0, num, size=_shape(rng, 0, 2, 0, 4))
    if rng.random() < 0.1 and idx.size:
        idx.flat[0] = num
    pad = _pick(rng, None, 0, -1)
    scale = _pick(rng, False, True)
    w = rng.uniform(-1, 1, size=(num, dim))

    def body(lib):
        wt = lib.tensor(w, requires_grad=True)
        out = lib.nn.functional.embedding(lib.tensor(idx, dtype=lib.int64), wt, padding_idx=pad,
                                          scale_grad_by_freq=scale)  # fmt: skip
        return [out], [wt]

    return _trial(f"embedding {idx.tolist()} {w.shape} pad={pad} scale={scale}", body, None, weight)


# ---- cumulative and running ops ------------------------------------------------------------


@gen("scan")
def _scan(rng):
    kind = _pick(
        rng,
        "cumsum",
        "cumprod",
        "logcumsumexp",
        "cummax",
        "diff",
        "trapezoid",
        "var_mean",
        "aminmax",
        "renorm",
        "nan_to_num",
        "dist",
    )
    return globals()["_scan_" + kind](rng, _weight_fn(rng))


def _scan_dim(rng, shape):
    nd = len(shape)
    return int(rng.integers(-max(nd, 1), max(nd, 1)))


def _scan_cumsum(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    src = _pick(rng, "float64", "float32", "int64", "bool")
    x = Input(rng, shape, src)
    dim = _scan_dim(rng, shape)
    dtype = _pick(rng, None, "float64", "float32", "int64")
    how = _pick(rng, "method", "function", "inplace")
    # (an int dtype= for a float input that requires grad: torch's autograd refuses the int
    # result, retrograd gives it untracked; left out)
    grad = not (dtype == "int64" and src.startswith("float"))

    def body(lib):
        xl, xt = x.make(lib, grad=grad)
        kw = {} if dtype is None else {"dtype": getattr(lib, dtype)}
        if how == "method":
            out = xt.cumsum(dim, **kw)
        elif how == "function":
            out = lib.cumsum(xt, dim=dim, **kw)
        else:  # (cumsum_ keeps the tensor's dtype: torch refuses a dtype= that differs)
            out = xt.clone()
            out.cumsum_(dim, **kw)
        return [out], [xl]

    return _trial(f"cumsum {x} dim={dim} dtype={dtype} {how}", body, None, weight)


def _scan_cumprod(rng, weight):
    shape = _shape(rng, 0, 3, 0, 5)
    src = _pick(rng, "float64", "float64", "int64")
    # zeros, several per row sometimes (the gradient's hard case)
    x = Input(rng, shape, src, values=[0.0, 0.0, 1.5, -0.5, 2.0, 0.7, -1.2])
    dim = _scan_dim(rng, shape)
    dtype = _pick(rng, None, None, "float64")

    def body(lib):
        xl, xt = x.make(lib)
        kw = {} if dtype is None else {"dtype": getattr(lib, dtype)}
        return [lib.cumprod(xt, dim, **kw)], [xl]

    return _trial(f"cumprod {x} dim={dim} dtype={dtype}", body, None, weight)


def _scan_logcumsumexp(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    x = Input(rng, shape, values=[-math.inf, 0.5, -1.0, 2.0, 30.0, -30.0], view="plain")
    dim = _scan_dim(rng, shape)
    if len(shape) and x.array.size:
        # (a slice that starts with -inf: torch's gradient is NaN along its -inf prefix, the
        # 0 * inf of its formula, retrograd's 0; those starts are made finite)
        along = np.moveaxis(x.array, dim, 0)  # (a view: written through)
        along[0] = np.where(np.isneginf(along[0]), 0.5, along[0])

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.logcumsumexp(xt, dim)], [xl]

    return _trial(f"logcumsumexp {x} dim={dim}", body, None, weight)


def _scan_cummax(rng, weight):
    shape = _shape(rng, 0, 3, 0, 5)
    dtype = _pick(rng, "float64", "float64", "int64", "bool")
    x = Input(rng, shape, dtype, values=None if dtype == "bool" else [0, 1, 1, 2, -1, 2])
    if dtype == "float64" and rng.random() < 0.3:
        x.array = np.where(rng.random(x.array.shape) < 0.2, math.nan, x.array)
    dim = _scan_dim(rng, shape)
    which = _pick(rng, "cummax", "cummin")

    def body(lib):
        xl, xt = x.make(lib)
        v, i = getattr(lib, which)(xt, dim)
        return [v, i], [xl]

    return _trial(f"{which} {x} dim={dim}", body, None, weight)


def _scan_diff(rng, weight):
    shape = _shape(rng, 1, 3, 0, 5)
    nd = len(shape)
    dtype = _pick(rng, "float64", "float64", "int64", "bool")
    x = Input(rng, shape, dtype)
    dim = _scan_dim(rng, shape)
    n = _pick(rng, 1, 1, 2, 3, 0)
    pre = _pick(rng, None, "tensor")
    app = _pick(rng, None, "tensor")
    edge = tuple(int(rng.integers(0, 3)) if i == dim % nd else s for i, s in enumerate(shape))
    p = Input(rng, edge, dtype, view="plain")
    a = Input(rng, edge, dtype, view="plain")

    def body(lib):
        xl, xt = x.make(lib)
        pl, pt = p.make(lib)
        al, at = a.make(lib)
        kw = {}
        if pre:
            kw["prepend"] = pt
        if app:
            kw["append"] = at
        return [lib.diff(xt, n=n, dim=dim, **kw)], [xl, pl, al]

    return _trial(f"diff {x} n={n} dim={dim} prepend={pre and p} append={app and a}", body,
                  None, weight)  # fmt: skip


def _scan_trapezoid(rng, weight):
    shape = _shape(rng, 1, 3, 0, 5)
    nd = len(shape)
    y = Input(rng, shape)
    dim = _scan_dim(rng, shape)
    n = shape[dim % nd]
    spacing = _pick(rng, "none", "dx", "x1d", "xfull")
    xs = Input(rng, (n,) if spacing == "x1d" else shape, view="plain")
    which = _pick(rng, "trapezoid", "cumulative_trapezoid")

    def body(lib):
        yl, yt = y.make(lib)
        xl, xt = xs.make(lib)
        f = getattr(lib, which)
        if spacing == "none":
            return [f(yt, dim=dim)], [yl]
        if spacing == "dx":
            return [f(yt, dx=0.7, dim=dim)], [yl]
        return [f(yt, xt, dim=dim)], [yl, xl]

    return _trial(f"{which} {y} dim={dim} spacing={spacing}", body, None, weight)


def _scan_var_mean(rng, weight):
    shape = _shape(rng, 0, 3, 1, 4)
    nd = len(shape)
    x = Input(rng, shape)
    which = _pick(rng, "var_mean", "std_mean")
    dim = _pick(rng, None, _scan_dim(rng, shape), tuple(range(nd))[:2] or None)
    corr = _pick(rng, None, 0, 1, 2)
    keep = _pick(rng, True, False)

    dims = range(len(shape)) if dim is None else (dim,) if isinstance(dim, int) else dim
    n = int(np.prod([shape[d] for d in dims])) if shape else 1
    # (no degrees of freedom left: torch's gradient is its formula's inf, retrograd's the
    # NaN of inf - inf through the mean; the values agree, the gradient is left out)
    degenerate = n - (1 if corr is None else corr) <= 0

    def body(lib):
        xl, xt = x.make(lib, grad=not degenerate)
        kw = {"dim": dim, "keepdim": keep}
        if corr is not None:
            kw["correction"] = corr
        a, b = getattr(lib, which)(xt, **kw)
        return [a, b], [xl]

    return _trial(f"{which} {x} dim={dim} correction={corr} keep={keep}", body, None, weight,
                  rtol=1e-7)  # fmt: skip


def _scan_aminmax(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    dtype = _pick(rng, "float64", "int64", "bool")
    x = Input(rng, shape, dtype)
    dim = _pick(rng, None, _scan_dim(rng, shape))
    keep = _pick(rng, True, False)

    def body(lib):
        _, xt = x.make(lib, grad=False)  # (torch has no aminmax derivative)
        lo, hi = lib.aminmax(xt, dim=dim, keepdim=keep)
        return [lo, hi], []

    return _trial(f"aminmax {x} dim={dim} keep={keep}", body, None, weight)


def _scan_renorm(rng, weight):
    shape = _shape(rng, 1, 3, 1, 4)
    x = Input(rng, shape)
    dim = _scan_dim(rng, shape)
    p = _pick(rng, 1.0, 2.0, 3.0, math.inf)
    maxnorm = _pick(rng, 0.5, 1.0, 10.0)

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.renorm(xt, p, dim, maxnorm)], [xl]

    return _trial(f"renorm {x} p={p} dim={dim} maxnorm={maxnorm}", body, None, weight, rtol=1e-7)


def _scan_nan_to_num(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    dtype = _pick(rng, "float64", "float32", "int64", "bool")
    x = Input(rng, shape, dtype, values=None if dtype in ("int64", "bool") else
              [math.nan, math.inf, -math.inf, 1.5, -0.5, 0.0])  # fmt: skip
    kw = _pick(
        rng, {}, {"nan": 2.0}, {"posinf": 9.0, "neginf": -9.0}, {"nan": -1.0, "posinf": 1e300}
    )

    def body(lib):
        xl, xt = x.make(lib)
        return [lib.nan_to_num(xt, **kw)], [xl]

    return _trial(f"nan_to_num {x} {kw}", body, None, weight)


def _scan_dist(rng, weight):
    shape = _shape(rng, 0, 3, 0, 4)
    x, y = Input(rng, shape), Input(rng, tuple(_pick(rng, n, 1) for n in shape))
    p = _pick(rng, 2.0, 1.0, 0.0, 3.0, math.inf, -math.inf, 0.5)

    def body(lib):
        xl, xt = x.make(lib)
        yl, yt = y.make(lib)
        if p == 0.0:  # (a count: torch's gradient is zero, where it is defined)
            xl.requires_grad_(False), yl.requires_grad_(False)
        return [lib.dist(xt, yt, p)], [xl, yl]

    return _trial(f"dist {x} {y} p={p}", body, None, weight, rtol=1e-7)
