"""Round 23 of the differential fuzzer against PyTorch: what rounds 10-22 draw one op at a
time, chained. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`check` runs it on both and raises :class:`fuzz_cases.Mismatch` on the
first difference in raising or not, dtype, shape or value (gradients included), then runs
retrograd's side under every checkpointing strategy, whose results must be bit-identical to
NoCheckpointing's.

- ``chain``: programs of 4-10 ops (elementwise with tensors of other shapes and dtypes, 0-d
  tensors and Python numbers, ``where``, ``clamp`` with tensor bounds, casts, reductions with
  dims and ``keepdim``, scans, shape ops, selections with repeated indices: gather,
  take_along_dim, scatter_reduce in every reduction, scatter_add, index_select, index_add,
  masked_fill, stable sort, cummax) over 1-3 leaves of mixed dtypes (float64, float32,
  int64, bool, and float16/bfloat16 on the torch backend) that broadcast against each other:
  the result's dtype, shape and values and the gradients of every float leaf;
- ``autograd``: ``autograd.grad`` on random compositions: ``grad_outputs`` of every shape
  (and of wrong ones, which must raise), lists of outputs, single tensors or tuples of inputs,
  inputs that are intermediate results, ``allow_unused`` and ``materialize_grads``,
  ``retain_graph`` (the same gradients twice), ``is_grads_batched``, and mixed partial
  derivatives through ``create_graph`` up to the third order;
- ``distance``: ``cdist`` at every ``p`` and ``compute_mode``, ``pdist``,
  ``cosine_similarity``, ``pairwise_distance``, ``F.normalize``, ``linalg.vector_norm``,
  ``dist`` and ``norm`` of inputs with repeated rows, zero rows and tied entries (zero
  distances and zero norms, where the gradient is a convention): values and gradients;
- ``func``: ``func.jacrev``/``jacfwd``/``hessian``/``vmap``/``grad`` (``argnums``,
  ``has_aux``) over float64 ``chain`` programs.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

import retrograd as rg
from fuzz12_cases import Trial, _pick
from fuzz14_cases import _weight_fn
from fuzz17_cases import check as _check17

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def check(trial: Trial) -> None:
    """Against torch, then retrograd's results under every strategy against NoCheckpointing."""
    _check17(trial, strategies=True)


def _on_torch() -> bool:
    return type(rg.current_backend().inner).__name__ == "TorchBackend"


HALF = ("float16", "bfloat16")


def _out(lib, t):
    """A result as it compares: half-precision tensors as (dtype name, float64 values)."""
    if isinstance(t, lib.Tensor) and str(t.dtype).rsplit(".", 1)[-1] in HALF:
        return [str(t.dtype).rsplit(".", 1)[-1], t.detach().double()]
    return [t]


def _is_float(lib, t) -> bool:
    return t.dtype in (lib.float64, lib.float32, lib.float16, lib.bfloat16)


def _grads(lib, outs, leaves, weight):
    """The gradients of a weighted sum of the float outputs w.r.t. the float leaves."""
    leaves = [x for x in leaves if x.requires_grad]
    outs = [(k, o) for k, o in enumerate(outs) if _is_float(lib, o) and o.requires_grad]
    if not leaves:
        return []
    if not outs:
        return [None] * len(leaves)
    total = 0
    for k, o in outs:
        w = lib.tensor(np.asarray(weight(tuple(o.shape))) * (k + 1), dtype=o.dtype)
        total = total + (o * w).sum().double()
    return list(lib.autograd.grad(total, leaves, allow_unused=True))


# ---- chains of ops over mixed dtypes ------------------------------------------------------

FLOATS = ("float64", "float32")
DTYPES = ("float64", "float32", "int64", "bool")


def _values(rng, shape, dtype, nonzero=False):
    n = int(np.prod(shape)) if shape else 1
    if dtype == "bool":
        flat = rng.random(n) < 0.5
    elif dtype == "int64":
        flat = rng.integers(-3, 4, size=n)
    elif nonzero:  # (away from the points where a derivative is 0/0)
        flat = rng.choice([-1, 1], size=n) * rng.integers(1, 17, size=n) / 8.0
    else:  # (values on a grid of 1/8: exact in every float dtype)
        flat = rng.integers(-16, 17, size=n) / 8.0
    return np.asarray(flat).astype("float64" if dtype in HALF else dtype).reshape(shape)


def _make(lib, array, dtype, grad):
    t = lib.tensor(array, dtype=getattr(lib, dtype))
    if grad and dtype not in ("int64", "bool"):
        t.requires_grad_(True)
    return t


def _sub_shape(rng, shape):
    """A shape that broadcasts to ``shape``: a suffix of it with some dims made 1."""
    k = int(rng.integers(0, len(shape) + 1))
    tail = shape[len(shape) - k :]
    return tuple(1 if rng.random() < 0.3 else n for n in tail)


class Chain:
    """A random program: ``steps`` of (text, fn(lib, t, xs) -> t) over leaves ``xs``."""

    def __init__(self, rng, dtypes, length, shape=None, grad_only=False, exclude=()):
        self.shape = (
            shape
            if shape is not None
            else tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 4))))
        )
        self.grad_only = grad_only  # (for func transforms: float64 and differentiable ops)
        self.exclude = exclude
        n_in = int(rng.integers(1, 4))
        self.inputs = []  # (dtype, array)
        for k in range(n_in):
            dtype = str(_pick(rng, *dtypes))
            shp = self.shape if k == 0 else _sub_shape(rng, self.shape)
            self.inputs.append((dtype, _values(rng, shp, dtype, grad_only)))
        self.dtypes = dtypes
        self.steps = []
        cur = self.shape
        for _ in range(length):
            text, fn, cur = self._step(rng, cur)
            self.steps.append((text, fn))
        self.out_shape = cur

    def leaves(self, lib, grad=True):
        return [_make(lib, a, d, grad) for d, a in self.inputs]

    def run(self, lib, xs):
        t = xs[0]
        for _, fn in self.steps:
            t = fn(lib, t, xs)
        return t

    def __repr__(self):
        ins = ", ".join(f"{d}{list(a.shape)}" for d, a in self.inputs)
        return f"chain({ins}): " + " -> ".join(s for s, _ in self.steps)

    # -- one step

    def _operand(self, rng, shape):
        """(text, fn(lib, xs) -> operand) broadcasting against ``shape``."""
        kinds = ["input", "input", "tensor", "0d", "scalar"]
        if self.grad_only:
            kinds = ["input", "input", "scalar"]
        kind = _pick(rng, *kinds)
        if kind == "input":
            k = int(rng.integers(len(self.inputs)))
            ishape = self.inputs[k][1].shape
            try:
                fits = np.broadcast_shapes(ishape, shape) == tuple(shape)
            except ValueError:
                fits = False
            if fits:
                return f"x{k}", lambda lib, xs: xs[k]
            kind = "tensor"
        if kind == "scalar":
            v = _pick(rng, 2, -1, 0.5, 1.5, True, 3)
            if self.grad_only and isinstance(v, bool):
                v = 2
            return repr(v), lambda lib, xs: v
        dtype = str(_pick(rng, *self.dtypes))
        shp = () if kind == "0d" else _sub_shape(rng, shape)
        a = _values(rng, shp, dtype, self.grad_only)
        return f"{dtype}{list(shp)}", lambda lib, xs: _make(lib, a, dtype, False)

    def _step(self, rng, shape):
        nd = len(shape)
        kinds = ["binary"] * 4 + ["unary"] * 3 + ["where", "clamp", "reduce", "scan", "shape"]
        kinds += ["select"] * 2
        if not self.grad_only:
            # (a comparison's bool result turns later ops to float32: not in float64 draws)
            kinds += ["cast"] + (["compare"] if len(self.dtypes) > 1 else [])
        kind = _pick(rng, *kinds)
        if kind in self.exclude:
            kind = "unary"
        d = int(rng.integers(-nd, nd)) if nd else 0
        if kind == "binary":
            op = str(_pick(rng, "add", "sub", "mul", "div", "maximum", "minimum", "atan2", "rsub"))
            if self.grad_only:
                op = str(_pick(rng, "add", "sub", "mul", "atan2", "rsub"))
            text, other = self._operand(rng, shape)
            alpha = _pick(rng, None, 2)
            if op in ("add", "sub") and alpha is not None and "." not in text:

                def fn(lib, t, xs):
                    o = other(lib, xs)
                    if not isinstance(o, lib.Tensor):  # (alpha with a number: torch refuses
                        o = lib.tensor(o)  # a bool alpha; an int one is fine)
                    return getattr(lib, op)(t, o, alpha=alpha)

                return f"{op}({text}, alpha={alpha})", fn, shape

            def fn(lib, t, xs):
                o = other(lib, xs)
                if op == "rsub":
                    return o - t
                if not isinstance(o, lib.Tensor) and op in ("maximum", "minimum", "atan2"):
                    o = lib.tensor(o)  # (these take tensors only)
                if op == "atan2" and t.dtype == lib.bool:
                    # (torch's atan2 backward negates its first argument: a bool one raises
                    # there; the derivative is -y/(x^2+y^2), that of an int64 one)
                    t = t.long()
                return getattr(lib, op)(t, o)

            return f"{op}({text})", fn, shape
        if kind == "unary":
            op = str(
                _pick(
                    rng,
                    "neg",
                    "abs",
                    "tanh",
                    "sin",
                    "sigmoid",
                    "square",
                    "relu",
                    "sqrt1",
                    "exp_tanh",
                    "floor",
                    "sign",
                    "reciprocal1",
                    "pow2",
                )
            )
            if self.grad_only and op in ("floor", "sign"):
                op = "tanh"

            def fn(lib, t, xs):
                if op == "sqrt1":
                    return (t.abs() + 1).sqrt()
                if op == "exp_tanh":
                    return t.tanh().exp()
                if op == "reciprocal1":
                    return (t * t + 1).reciprocal()
                if op == "pow2":
                    return t.pow(2)
                if op == "relu":
                    return lib.relu(t)
                return getattr(t, op)()

            return op, fn, shape
        if kind == "where":
            text, other = self._operand(rng, shape)
            flip = bool(rng.random() < 0.5)

            def fn(lib, t, xs):
                o = other(lib, xs)
                cond = t > 0
                return lib.where(cond, o, t) if flip else lib.where(cond, t, o)

            return f"where(t>0, {'o, t' if flip else 't, o'} o={text})", fn, shape
        if kind == "clamp":
            lo_text, lo = self._operand(rng, shape)
            hi = _pick(rng, None, 1, 1.5)
            form = _pick(rng, "both", "min", "max")

            def fn(lib, t, xs):
                low = lo(lib, xs)
                if form == "min":
                    return t.clamp(min=low)
                if form == "max":
                    return t.clamp(max=low)
                high = hi if not isinstance(low, lib.Tensor) else (low + 1 if hi else None)
                return t.clamp(low, high)

            return f"clamp_{form}({lo_text}, {hi})", fn, shape
        if kind == "cast":
            dtype = str(_pick(rng, *self.dtypes))
            return f"to({dtype})", lambda lib, t, xs: t.to(getattr(lib, dtype)), shape
        if kind == "compare":
            text, other = self._operand(rng, shape)
            op = str(_pick(rng, "gt", "le", "eq", "ne"))

            def fn(lib, t, xs):
                return getattr(lib, op)(t, other(lib, xs))

            return f"{op}({text})", fn, shape
        if kind == "reduce" and nd:
            op = str(_pick(rng, "sum", "mean", "amax", "amin", "prod", "logsumexp", "norm"))
            if (self.grad_only and op in ("amax", "amin")) or op in self.exclude:
                op = "sum"
            keep = bool(rng.random() < 0.5)
            new = tuple(1 if i == d % nd else n for i, n in enumerate(shape))
            if not keep:
                new = new[: d % nd] + new[d % nd + 1 :]

            def fn(lib, t, xs):
                if op == "norm":
                    return lib.linalg.vector_norm(t, 2, dim=d, keepdim=keep)
                return getattr(lib, op)(t, d, keepdim=keep)

            return f"{op}({d}, keep={keep})", fn, new
        if kind == "scan" and nd:
            op = str(_pick(rng, "cumsum", "cumprod", "softmax", "log_softmax", "logcumsumexp"))
            if op in self.exclude:
                op = "cumsum"
            if self.grad_only and shape[d] == 1:
                # (torch's second derivative of logcumsumexp along a dim of size 1, where it
                # is the identity, is NaN or rounding noise, 0 here; a softmax there is
                # constant, whose norm's derivatives are 0/0)
                op = "cumsum"
            return f"{op}({d})", lambda lib, t, xs: getattr(lib, op)(t, d), shape
        if kind == "select" and nd:
            return self._select(rng, shape, d)
        if kind == "shape" and nd:
            op = str(
                _pick(
                    rng,
                    "transpose",
                    "flip",
                    "roll",
                    "unsqueeze_expand",
                    "flatten",
                    "tril",
                    "movedim",
                    "rot90",
                    "pad",
                    "einsum",
                )
            )
            e = int(rng.integers(-nd, nd))
            if op == "rot90" and nd >= 2 and d % nd != e % nd:
                k = int(rng.integers(-2, 4))
                new = list(shape)
                if k % 2:
                    new[d], new[e] = new[e], new[d]
                return (
                    f"rot90({k},({d},{e}))",
                    lambda lib, t, xs: t.rot90(k, (d, e)),
                    tuple(new),
                )
            if op == "pad":
                # constant padding of the last dims, negative pads cropping
                pads = []
                new = list(shape)
                for i in range(int(rng.integers(1, min(nd, 2) + 1))):
                    lo, hi = (int(v) for v in rng.integers(-1, 3, size=2))
                    if new[-1 - i] + lo + hi < 1:
                        lo = hi = 0
                    pads += [lo, hi]
                    new[-1 - i] += lo + hi
                value = float(_pick(rng, 0.0, 1.5))
                return (
                    f"pad({pads}, {value})",
                    lambda lib, t, xs: lib.nn.functional.pad(t, pads, value=value),
                    tuple(new),
                )
            if op == "einsum" and nd >= 2:
                form = _pick(rng, "...ij->...ji", "...ij->...i", "i...->...i", "...i,...i->...")
                if form == "...ij->...ji":
                    new = shape[:-2] + (shape[-1], shape[-2])
                elif form == "...ij->...i":
                    new = shape[:-1]
                elif form == "i...->...i":
                    new = shape[1:] + (shape[0],)
                else:
                    new = shape[:-1]

                def fn(lib, t, xs):
                    if form == "...i,...i->...":
                        return lib.einsum(form, t, t.flip(-1))
                    return lib.einsum(form, t)

                return f"einsum({form!r})", fn, new
            if op == "transpose":
                new = list(shape)
                new[d], new[e] = new[e], new[d]
                return f"transpose({d},{e})", lambda lib, t, xs: t.transpose(d, e), tuple(new)
            if op == "movedim":
                new = list(shape)
                new.insert(e % nd, new.pop(d % nd))
                return f"movedim({d},{e})", lambda lib, t, xs: t.movedim(d, e), tuple(new)
            if op == "flip":
                return f"flip({d})", lambda lib, t, xs: t.flip(d), shape
            if op == "roll":
                s = int(rng.integers(-3, 4))
                return f"roll({s},{d})", lambda lib, t, xs: t.roll(s, d), shape
            if op == "flatten":
                return "flatten", lambda lib, t, xs: t.flatten(), (int(np.prod(shape)),)
            if op == "tril" and nd >= 2:
                k = int(rng.integers(-2, 3))
                f = _pick(rng, "tril", "triu")
                return f"{f}({k})", lambda lib, t, xs: getattr(t, f)(k), shape
            n = int(rng.integers(1, 3))
            new = shape[: d % nd] + (n,) + shape[d % nd :]
            return (
                f"unsqueeze_expand({d % nd},{n})",
                lambda lib, t, xs: t.unsqueeze(d % nd).expand(*new),
                new,
            )
        return "neg", lambda lib, t, xs: -t, shape

    def _select(self, rng, shape, d):
        """Indexing ops along ``d`` with repeated indices (shape kept, or the index's)."""
        nd, n = len(shape), shape[d]
        op = str(
            _pick(
                rng,
                "gather",
                "take_along_dim",
                "scatter_reduce",
                "index_select",
                "masked_fill",
                "sort",
                "cummax",
                "index_add",
                "scatter_add",
            )
        )
        index = rng.integers(0, n, size=shape)  # (repeats: a gradient sums over them)
        if op in ("gather", "take_along_dim"):

            def fn(lib, t, xs):
                if op == "gather":
                    return t.gather(d, lib.tensor(index))
                return lib.take_along_dim(t, lib.tensor(index), d)

            return f"{op}({d}, {index.tolist()})", fn, shape
        if op in ("scatter_reduce", "scatter_add"):
            how = str(_pick(rng, "sum", "prod", "mean", "amax", "amin"))
            include = bool(rng.random() < 0.5)
            text, other = self._operand(rng, shape)

            def fn(lib, t, xs):
                src = other(lib, xs)
                if not isinstance(src, lib.Tensor) or tuple(src.shape) != tuple(t.shape):
                    src = t * 2 if isinstance(src, lib.Tensor) else t
                if op == "scatter_add":
                    return t.scatter_add(d, lib.tensor(index), src)
                return t.scatter_reduce(d, lib.tensor(index), src, how, include_self=include)

            return f"{op}({d}, {how}, self={include}, src={text})", fn, shape
        if op in ("index_select", "index_add"):
            picks = rng.integers(0, n, size=int(rng.integers(1, n + 2)))
            if op == "index_select":
                new = shape[: d % nd] + (len(picks),) + shape[d % nd + 1 :]
                return (
                    f"index_select({d}, {picks.tolist()})",
                    lambda lib, t, xs: t.index_select(d, lib.tensor(picks)),
                    new,
                )
            alpha = _pick(rng, 1, 2)

            def fn(lib, t, xs):
                src = (
                    t.index_select(d, lib.tensor(picks)) * 0.5
                    if self.grad_only
                    else (t.index_select(d, lib.tensor(picks)))
                )
                return t.index_add(d, lib.tensor(picks), src, alpha=alpha)

            return f"index_add({d}, {picks.tolist()}, alpha={alpha})", fn, shape
        if op == "masked_fill":
            value = _pick(rng, 0.5, -1, True)
            if self.grad_only:
                value = 0.5
            return (
                f"masked_fill(t>0.5, {value})",
                lambda lib, t, xs: t.masked_fill(t > 0.5, value),
                shape,
            )
        if op == "sort":
            desc = bool(rng.random() < 0.5)
            return (
                f"sort({d}, desc={desc}, stable)",
                lambda lib, t, xs: t.sort(dim=d, descending=desc, stable=True)[0],
                shape,
            )
        return f"cummax({d})", lambda lib, t, xs: t.cummax(d)[0], shape


def _chain_trial(name, chain, weight, rtol):
    def fn(lib):
        xs = chain.leaves(lib)
        y = chain.run(lib, xs)
        out = [*_out(lib, y)]
        for g in _grads(lib, [y], xs, weight):
            out.extend(_out(lib, g))
        return out

    return Trial(name, fn, rtol=rtol)


@gen("chain")
def _chain(rng):
    # float64 alone (compared to 1e-9), or mixed (float32 math: ulps of libm's differ)
    form = _pick(rng, "float64", "mixed", "mixed", "half" if _on_torch() else "mixed")
    dtypes = {"float64": ("float64",), "mixed": DTYPES, "half": DTYPES + HALF}[form]
    chain = Chain(rng, dtypes, int(rng.integers(4, 11)))
    rtol = {"float64": 1e-9, "mixed": 5e-5, "half": 2e-2}[form]
    return _chain_trial(f"{form} {chain!r}", chain, _weight_fn(rng), rtol)


# ---- distances and norms at zero ----------------------------------------------------------

#: values with ties, and rows drawn again: zero distances, zero vectors, tied maxima
POOL = (-1.0, -0.5, 0.0, 0.0, 0.5, 1.0, 1.5)


def _rows(rng, n, m, batch=(), repeat_from=None, zero=0.2):
    """(batch, n, m) rows from POOL; some rows zero, some repeated (from ``repeat_from``)."""
    a = rng.choice(POOL, size=(*batch, n, m))
    for i in range(n):
        r = rng.random()
        if r < zero:
            a[..., i, :] = 0.0
        elif r < 0.5 and repeat_from is not None and repeat_from.shape[-2]:
            a[..., i, :] = repeat_from[..., int(rng.integers(repeat_from.shape[-2])), :]
        elif r < 0.7 and i:
            a[..., i, :] = a[..., int(rng.integers(i)), :]
    return a


def _dist_trial(name, arrays, body, weight, rtol=1e-9):
    def fn(lib):
        xs = [_make(lib, a, "float64", True) for a in arrays]
        outs = body(lib, *xs)
        return [*outs, *_grads(lib, outs, xs, weight)]

    return Trial(name, fn, rtol=rtol)


@gen("distance")
def _distance(rng):
    kind = str(
        _pick(
            rng, "cdist", "pdist", "cosine", "pairwise", "normalize", "vector_norm", "dist", "norm"
        )
    )
    weight = _weight_fn(rng)
    p = float(_pick(rng, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, np.inf))
    m = int(rng.integers(1, 4))
    if kind == "cdist":
        batch = _pick(rng, (), (2,))
        a = _rows(rng, int(rng.integers(1, 4)), m, batch)
        b = _rows(rng, int(rng.integers(1, 4)), m, batch, repeat_from=a)
        mode = _pick(
            rng,
            None,
            "use_mm_for_euclid_dist",
            "donot_use_mm_for_euclid_dist",
            "use_mm_for_euclid_dist_if_necessary",
        )

        def body(lib, x, y):
            kw = {} if mode is None else {"compute_mode": mode}
            return [lib.cdist(x, y, p=p, **kw)]

        # (the matrix-product form rounds differently: sqrt(|x|^2 + |y|^2 - 2xy))
        rtol = 1e-9 if mode != "use_mm_for_euclid_dist" else 1e-6
        return _dist_trial(
            f"cdist {a.tolist()} {b.tolist()} p={p} {mode}", [a, b], body, weight, rtol
        )
    if kind == "pdist":
        a = _rows(rng, int(rng.integers(1, 5)), m)

        def body(lib, x):
            return [lib.pdist(x, p=p)]

        return _dist_trial(f"pdist {a.tolist()} p={p}", [a], body, weight)
    if kind == "cosine":
        a = _rows(rng, int(rng.integers(1, 4)), m)
        b = _rows(rng, a.shape[0], m, repeat_from=a)
        if rng.random() < 0.3:  # broadcasting one row against the others
            b = b[:1]
        if rng.random() < 0.3:  # a multiple of a row: cosine 1
            b = b * 2.0
        dim = int(_pick(rng, -1, 1, 0))
        eps = float(_pick(rng, 1e-8, 0.5))

        def body(lib, x, y):
            return [lib.nn.functional.cosine_similarity(x, y, dim=dim, eps=eps)]

        return _dist_trial(
            f"cosine {a.tolist()} {b.tolist()} dim={dim} eps={eps}", [a, b], body, weight
        )
    if kind == "pairwise":
        a = _rows(rng, int(rng.integers(1, 4)), m)
        b = _rows(rng, a.shape[0], m, repeat_from=a)
        eps = float(_pick(rng, 1e-6, 0.0, 0.25))
        keep = bool(rng.random() < 0.5)

        def body(lib, x, y):
            return [lib.nn.functional.pairwise_distance(x, y, p=p, eps=eps, keepdim=keep)]

        return _dist_trial(
            f"pairwise {a.tolist()} {b.tolist()} p={p} eps={eps} keep={keep}", [a, b], body, weight
        )
    if kind == "normalize":
        a = _rows(rng, int(rng.integers(1, 4)), m, zero=0.4)
        dim = int(_pick(rng, -1, 0))
        eps = float(_pick(rng, 1e-12, 0.5))
        p = float(_pick(rng, 1.0, 2.0, 3.0, np.inf))

        def body(lib, x):
            return [lib.nn.functional.normalize(x, p=p, dim=dim, eps=eps)]

        return _dist_trial(f"normalize {a.tolist()} p={p} dim={dim} eps={eps}", [a], body, weight)
    if kind == "vector_norm":
        a = _rows(rng, int(rng.integers(1, 4)), m, zero=0.4)
        ord_ = float(_pick(rng, 0.0, 0.5, 1.0, 2.0, 3.0, np.inf, -np.inf, -1.0))
        dim = _pick(rng, None, -1, 0, (0, 1))
        keep = bool(rng.random() < 0.5)

        def body(lib, x):
            return [lib.linalg.vector_norm(x, ord_, dim=dim, keepdim=keep)]

        return _dist_trial(
            f"vector_norm {a.tolist()} ord={ord_} dim={dim} keep={keep}", [a], body, weight
        )
    if kind == "dist":
        a = _rows(rng, int(rng.integers(1, 3)), m)
        b = _rows(rng, a.shape[0], m, repeat_from=a)

        def body(lib, x, y):
            if p == 0:  # (torch's dist backward at p=0 raises "Expected a proper Tensor but
                # got None": the gradient, zero, is not compared)
                x, y = x.detach(), y.detach()
            return [lib.dist(x, y, p=p)]

        return _dist_trial(f"dist {a.tolist()} {b.tolist()} p={p}", [a, b], body, weight)
    a = _rows(rng, int(rng.integers(1, 3)), m, zero=0.4)
    pn = _pick(rng, "fro", 1, 2, 3, np.inf, None)
    dim = _pick(rng, None, 1, (0, 1))
    keep = bool(rng.random() < 0.5)

    def body(lib, x):
        return [lib.norm(x, p=pn, dim=dim, keepdim=keep)]

    return _dist_trial(f"norm {a.tolist()} p={pn} dim={dim} keep={keep}", [a], body, weight)


# ---- autograd.grad's arguments ------------------------------------------------------------


def _named(lib, grads):
    """Gradients as results: None stays "None" (materialize_grads must give zeros)."""
    return ["None" if g is None else g for g in grads]


def _program(rng, exclude=(), shape=None):
    """A chain over 1-3 float64 leaves of differentiable ops."""
    length = int(rng.integers(2, 6))
    return Chain(rng, ("float64",), length, shape, grad_only=True, exclude=exclude)


@gen("autograd")
def _autograd(rng):
    mode = str(
        _pick(
            rng,
            *("grad_outputs", "retain", "intermediate", "batched", "higher", "unused") * 3,
            "no_grad",
        )
    )
    # (torch's third derivative of logcumsumexp is wrong: finite differences agree with
    # retrograd's; not drawn there)
    # (nor norms: at a zero vector, which x - x makes, torch's second derivatives are NaN)
    chain = _program(rng, ("logcumsumexp", "norm") if mode == "higher" else ())
    weight = _weight_fn(rng)
    two = bool(rng.random() < 0.5)  # a second output: the first leaf's squares summed
    go_kinds = [
        str(_pick(rng, "same", "same", "same", "none", "wrong", "0d", "float32", "ones"))
        for _ in range(2)
    ]
    as_tuple = bool(rng.random() < 0.5)
    allow = _pick(rng, None, True, False)
    materialize = bool(rng.random() < 0.3)
    batch = int(rng.integers(1, 4))

    def grad_output(lib, kind, y):
        shape = tuple(y.shape)
        if kind == "none":
            return None
        if kind == "wrong":
            return lib.ones(shape + (2,), dtype=lib.float64)
        if kind == "0d":
            return lib.tensor(1.5, dtype=lib.float64)
        if kind == "ones":
            return lib.ones_like(y)
        dtype = lib.float32 if kind == "float32" else lib.float64
        return lib.tensor(weight(shape), dtype=dtype)

    def fn(lib):
        xs = chain.leaves(lib)
        extra = lib.tensor(weight((2,)), dtype=lib.float64, requires_grad=True)  # unused
        y = chain.run(lib, xs)
        outs = [y, (xs[0] * xs[0]).sum()] if two else [y]
        leaves = [x for x in xs if x.requires_grad]
        if mode == "grad_outputs":
            gos = [grad_output(lib, k, o) for k, o in zip(go_kinds, outs)]
            ins = tuple(leaves) if as_tuple or len(leaves) > 1 else leaves[0]
            grads = lib.autograd.grad(outs, ins, grad_outputs=gos, allow_unused=True)
            return _named(lib, grads)
        total = sum((o * lib.tensor(weight(tuple(o.shape)), dtype=o.dtype)).sum() for o in outs)
        if mode == "retain":
            first = lib.autograd.grad(total, leaves, retain_graph=True, allow_unused=True)
            second = lib.autograd.grad(total, leaves[::-1], allow_unused=True)
            return [*first, *second]
        if mode == "unused":
            kw = {} if allow is None else {"allow_unused": allow}
            if materialize:
                kw["materialize_grads"] = True
            return _named(lib, lib.autograd.grad(total, [extra, *leaves], **kw))
        if mode == "no_grad":
            return _named(lib, lib.autograd.grad(total.detach(), leaves))
        if mode == "intermediate":
            # a gradient with respect to the result itself and to a leaf through it
            mid = y * 2.0
            out = (mid.tanh() * lib.tensor(weight(tuple(y.shape)), dtype=y.dtype)).sum()
            return list(lib.autograd.grad(out, [mid, y, leaves[0]]))
        if mode == "batched":
            go = lib.tensor(weight((batch, *tuple(y.shape))), dtype=y.dtype)
            grads = lib.autograd.grad(
                y, leaves, grad_outputs=go, is_grads_batched=True, allow_unused=True
            )
            return list(grads)
        # mixed partial derivatives up to the third order
        first = lib.autograd.grad(total, leaves, create_graph=True, allow_unused=True)
        firsts = [g for g in first if g is not None]
        none = [None] * len(leaves)
        if not firsts:
            return [*first, *none, *none]
        s = sum((g * lib.tensor(weight(tuple(g.shape)), dtype=g.dtype)).sum() for g in firsts)
        s = s + (firsts[0] * firsts[0]).sum()
        # (None against zeros passes here: where a program is piecewise linear, retrograd's
        # graph of the gradient ends and torch's goes on to give zeros)
        if not s.requires_grad:
            return [*first, *none, *none]
        second = lib.autograd.grad(s, leaves[::-1], create_graph=True, allow_unused=True)
        used = [g for g in second if g is not None and g.requires_grad]
        if not used:
            return [*first, *second, *none]
        r = sum((g * g).sum() for g in used)
        return [*first, *second, *lib.autograd.grad(r, leaves, allow_unused=True)]

    name = (
        f"autograd {mode} two={two} go={go_kinds} tuple={as_tuple} allow={allow} "
        f"materialize={materialize} batch={batch} {chain!r}"
    )
    return Trial(name, fn, rtol=1e-9)


# ---- the func transforms over chains ------------------------------------------------------


@gen("func")
def _func(rng):
    kind = str(_pick(rng, "jacrev", "jacfwd", "hessian", "vmap", "grad", "vjp", "jvp"))
    # (torch's forward-mode derivatives at ties are not its reverse mode's: of clamp with a
    # tensor bound it takes the bound's tangent where its reverse mode gives the input the
    # gradient, of scatter_reduce's amax/amin one tied value's where the reverse mode splits
    # the gradient among them: no clamps and no selections there)
    forward = kind in ("jacfwd", "jvp", "hessian")
    # (small leaves: a hessian of an unreduced output has size**3 entries)
    dims = int(rng.integers(0, 3))
    shape = tuple(int(v) for v in rng.integers(1, 3 if kind == "hessian" else 4, size=dims))
    chain = _program(rng, ("clamp", "select") if forward else (), shape)
    n = len(chain.inputs)
    argnums = _pick(rng, 0, *(((0, n - 1), n - 1) if n > 1 else ()))
    aux = kind != "hessian" and bool(rng.random() < 0.3)  # (hessian takes no has_aux)
    reduce_out = kind in ("grad",) or (kind == "hessian" and rng.random() < 0.7)
    weight = _weight_fn(rng)
    in_dims = int(_pick(rng, 0, -1))

    def program(lib, *xs):
        y = chain.run(lib, list(xs))
        if reduce_out:
            y = (y * lib.tensor(weight(tuple(y.shape)), dtype=y.dtype)).sum()
        return (y, y.detach() * 2) if aux else y

    def fn(lib):
        xs = chain.leaves(lib, grad=False)
        f = lib.func

        def body(*args):
            return program(lib, *args)

        if kind == "vmap":
            # the first leaf, and two others of its shape, stacked along a new first (or
            # last) dim and mapped over it; the other leaves shared
            def g(x0):
                return body(x0, *xs[1:])

            x0 = xs[0]
            stacked = lib.stack([x0, -x0, x0 * 0.5 + 0.25], dim=0 if in_dims == 0 else x0.ndim)
            out = f.vmap(g, in_dims=in_dims)(stacked)
            return list(out) if aux else [out]
        if kind in ("vjp", "jvp"):
            if kind == "vjp":
                out, pull, *rest = f.vjp(body, *xs, has_aux=aux)
                y = out
                ct = lib.tensor(weight(tuple(y.shape)), dtype=y.dtype)
                return [out, *pull(ct), *rest]
            tangents = tuple(lib.tensor(weight(tuple(x.shape)), dtype=x.dtype) for x in xs)
            res = f.jvp(body, tuple(xs), tangents, has_aux=aux)
            return list(res)
        make = getattr(f, kind)
        kw = {} if kind == "hessian" else {"has_aux": aux}
        res = make(body, argnums=argnums, **kw)(*xs)
        flat = []

        def walk(r):
            if isinstance(r, (tuple, list)):
                for v in r:
                    walk(v)
            else:
                flat.append(r)

        walk(res)
        return flat

    return Trial(
        f"func {kind} argnums={argnums} aux={aux} reduce={reduce_out} in_dims={in_dims} {chain!r}",
        fn,
        rtol=1e-9,
    )
