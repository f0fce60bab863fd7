"""Round 21 of the differential fuzzer against PyTorch: what rounds 10-20 draw only one at a
time. Each generator takes a ``numpy`` generator and returns a :class:`fuzz12_cases.Trial`
written once against a namespace ``lib`` (``torch`` or ``retrograd``); :func:`check` runs it
on both and raises :class:`fuzz_cases.Mismatch` on the first difference in raising or not,
dtype, shape or value (gradients included).

- ``alias``: several views of one tensor made up front (views of views, reshapes that may
  copy, ``contiguous``, ``unfold``, ``expand``, ``[None]``, ``movedim``...), then in-place
  writes with broadcast operands through any of them (``add_``, ``mul_``, ``x[idx] += v`` with
  negative index tensors, ``x[mask] *= s``, ``masked_fill_``, ``copy_``, ``index_put_`` with
  ``accumulate``), reads of the others between the writes: every view must see every write
  torch's does, and the gradients reach the leaves (second derivatives in some draws);
- ``index``: advanced indexing in get and set: ints, negative ints, slices with steps,
  ``None``, ``Ellipsis``, int tensors (negative entries, broadcast against each other, 0-d),
  lists, bool masks over one or more dims, bool scalars, in every placement (torch's rule
  for separated advanced indices), and the out-of-range ones that must raise;
- ``nnf2``: second derivatives of random chains of ``nn.functional`` layers with unusual
  arguments (convolutions with groups, dilation and padding modes, transposed ones with
  output padding, pools with ``ceil_mode``/``count_include_pad``/dilation, ``F.pad`` modes,
  ``interpolate``/``grid_sample`` with ``align_corners``, norms, activations);
- ``special``: reductions and scans over inf/-inf/NaN (``logsumexp``, ``softmax`` rows of
  -inf, ``amax`` ties of inf, norms with infinite entries, ``cumsum``/``cumprod``), their
  gradients.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import math

import numpy as np

from fuzz12_cases import Trial, _pick
from fuzz14_cases import _weight_fn
from fuzz14_cases import check as _check14
from fuzz15_cases import _half_out
from fuzz16_cases import _trial
from fuzz17_cases import _array, _leaf

__all__ = ["GENERATORS", "HALF", "check"]

GENERATORS: dict = {}


def check(trial: Trial) -> None:
    """One trial against torch. (A write whose source overlaps the written tensor in part,
    which torch refuses, was not compared until round 38 made retrograd refuse it too.)"""
    _check14(trial)


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _shape_of(fn, shape):
    from fuzz_cases import _torch

    torch = _torch()
    return tuple(fn(torch, torch.zeros(shape)).shape)


# ---- several views of one tensor, written through each other ------------------------------


def _view(rng, shape):
    """(name, fn(lib, t)) of a view (or a maybe-copy torch makes as a view when it can)."""
    n = len(shape)
    d = int(rng.integers(n)) if n else 0
    size = shape[d] if n else 0
    kinds = ["select", "slice", "step", "none", "ellipsis_int", "reshape", "flatten"]
    kinds += ["contiguous", "unfold", "view_as", "view", "squeeze", "unsqueeze", "narrow"]
    kinds += ["expand"] if rng.random() < 0.3 else []
    kinds += ["T", "movedim", "diagonal", "permute", "unflatten_last", "mT"] if n >= 2 else []
    if not n or 0 in shape:
        kinds = ["none", "contiguous"]
    kind = str(_pick(rng, *kinds))
    i = int(rng.integers(-size, size)) if size else 0
    lo = int(rng.integers(-size, size)) if size else 0
    if kind == "select":
        return f"select({d},{i})", lambda lib, t: t.select(d, i)
    if kind == "slice":
        idx = (slice(None),) * d + (slice(lo, None),)
        return f"[{d}:{lo}:]", lambda lib, t: t[idx]
    if kind == "step":
        idx = (Ellipsis, slice(None, None, 2)) if rng.random() < 0.5 else (slice(1, None, 2),)
        return f"{idx}", lambda lib, t: t[idx]
    if kind == "none":
        return "[None]", lambda lib, t: t[None]
    if kind == "ellipsis_int":
        return f"[...,{i}]", lambda lib, t: t[..., i] if t.shape[-1] > abs(i) else t[..., 0]
    if kind == "reshape":  # (a view where torch can make one, else a copy: both libraries)
        return "reshape(-1)", lambda lib, t: t.reshape(-1)
    if kind == "flatten":
        return "flatten", lambda lib, t: t.flatten()
    if kind == "contiguous":
        return "contiguous", lambda lib, t: t.contiguous()
    if kind == "view":  # (torch refuses a view it cannot make: so must retrograd)
        return "view(-1)", lambda lib, t: t.view(-1)
    if kind == "squeeze":
        return "squeeze()", lambda lib, t: t.squeeze()
    if kind == "unsqueeze":
        return f"unsqueeze({d - n})", lambda lib, t: t.unsqueeze(d - n)
    if kind == "narrow":
        start = int(rng.integers(0, size))
        length = int(rng.integers(0, size - start + 1))
        return f"narrow({d},{start},{length})", lambda lib, t: t.narrow(d, start, length)
    if kind == "expand":  # (a write through it must raise, in both)
        return "expand", lambda lib, t: t.unsqueeze(0).expand(2, *t.shape)
    if kind == "mT":
        return "mT", lambda lib, t: t.mT
    if kind == "view_as":
        return "view_as", lambda lib, t: t.view_as(t)
    if kind == "unfold":
        # (windows that share elements: torch writes them one by one in its kernel's order;
        # retrograd refuses the write, a ShapeError. Not drawn)
        k = int(rng.integers(1, size + 1))
        step = k + int(rng.integers(0, 2))
        return f"unfold({d},{k},{step})", lambda lib, t: t.unfold(d, k, step)
    if kind == "T":
        e = int(rng.integers(n))
        return f"transpose({d},{e})", lambda lib, t: t.transpose(d, e)
    if kind == "movedim":
        return f"movedim({d},-1)", lambda lib, t: t.movedim(d, -1)
    if kind == "permute":
        perm = [int(p) for p in rng.permutation(n)]
        return f"permute{perm}", lambda lib, t: t.permute(*perm)
    if kind == "unflatten_last":
        last = shape[-1]
        return f"unflatten(-1,({last},1))", lambda lib, t: t.unflatten(-1, (last, 1))
    off = int(rng.integers(-1, 2))
    return f"diagonal({off})", lambda lib, t: t.diagonal(off)


WRITES = [
    "add_",
    "mul_",
    "sub_alpha",
    "iadd_index",
    "imul_mask",
    "setitem_mask",
    "setitem_index",
    "setitem_slice",
    "masked_fill_",
    "copy_",
    "index_put_acc",
    "div_",
    "clamp_",
    "from_view",
    "itruediv_scalar",
    "fill_",
    "exp_",
    "addcmul_",
]


def _write(rng, vshape):
    """(name, fn(lib, v, operand, other view), the operand's shape or None)."""
    op = str(_pick(rng, *WRITES))
    n = len(vshape)
    if (not n or 0 in vshape) and op in (
        "iadd_index", "setitem_index", "index_put_acc", "setitem_slice"
    ):  # fmt: skip
        op = "add_"
    partner = tuple(1 if rng.random() < 0.3 else s for s in vshape)
    if rng.random() < 0.3:
        partner = partner[int(rng.integers(len(partner) + 1)) :]
    mask = _array(rng, vshape, [True, False], "bool")
    alpha = float(_pick(rng, 0.5, -2.0, 3.0))
    shape = None
    if op in ("add_", "mul_", "sub_alpha", "copy_", "div_", "addcmul_"):
        shape = partner
    if op in ("iadd_index", "setitem_index"):
        k = int(rng.integers(1, vshape[0] + 1))
        idx = rng.permutation(vshape[0])[:k] - vshape[0] * (rng.random(k) < 0.5)
        shape = (k,) + vshape[1:] if rng.random() < 0.6 else vshape[1:]
        shape = shape[int(rng.integers(len(shape) + 1)) :] if rng.random() < 0.3 else shape
    if op == "index_put_acc":  # (duplicates: accumulated)
        k = int(rng.integers(1, 5))
        idx = rng.integers(-vshape[0], vshape[0], size=k)
        shape = vshape[1:] if rng.random() < 0.5 else (k,) + vshape[1:]
    if op == "setitem_mask" and rng.random() < 0.5:
        shape = ()
    if op == "setitem_slice":
        lo = int(rng.integers(0, vshape[0] + 1))
        shape = (vshape[0] - lo,) + vshape[1:] if rng.random() < 0.5 else vshape[-1:]

    def fn(lib, v, o, w):
        if op == "add_":
            v.add_(o)
        elif op == "mul_":
            v.mul_(o)
        elif op == "sub_alpha":
            v.sub_(o, alpha=alpha)
        elif op == "iadd_index":
            v[lib.tensor(idx)] += o
        elif op == "imul_mask":
            v[lib.tensor(mask)] *= alpha
        elif op == "setitem_mask":
            v[lib.tensor(mask)] = o if o is not None else alpha
        elif op == "setitem_index":
            v[lib.tensor(idx)] = o
        elif op == "setitem_slice":
            v[lo:] = o
        elif op == "masked_fill_":
            v.masked_fill_(lib.tensor(mask), alpha)
        elif op == "copy_":
            v.copy_(o)
        elif op == "index_put_acc":
            v.index_put_((lib.tensor(idx),), o, accumulate=True)
        elif op == "div_":
            v.div_(o * o + 1.0)
        elif op == "clamp_":
            v.clamp_(-0.5, alpha)
        elif op == "from_view":  # another view of the same tensor as the operand
            if w.shape == v.shape:
                v.add_(w * 1.0)
            else:
                v.mul_(w.sum())
        elif op == "itruediv_scalar":
            v /= alpha
        elif op == "fill_":
            v.fill_(alpha)
        elif op == "exp_":
            v.mul_(0.5).exp_()
        else:
            v.addcmul_(o, o, value=alpha)

    return op, fn, shape


#: the views made by indexing (and so written back through an expand when they take each
#: element once)
INDEXING = ("select", "[", "(", "narrow")


def _select0(lib, t):
    return t.select(0, 0)


@gen("alias")
def _alias(rng):
    shape = tuple(int(s) for s in rng.integers(2, 5, size=int(rng.integers(1, 4))))
    start = str(_pick(rng, "mul", "mul", "buffer", "clone_t"))
    a = _array(rng, shape if start != "clone_t" else shape[::-1])
    views = []  # (name, parent index or -1, fn, shape)
    for _ in range(int(rng.integers(2, 5))):
        parent = int(rng.integers(-1, len(views)))
        pshape = shape if parent < 0 else views[parent][3]
        name, fn = _view(rng, pshape)
        if parent >= 0 and views[parent][0] == "expand" and not name.startswith(INDEXING):
            # (below an expand, slices only: torch writes through any view that takes each
            # element once (a diagonal across the expanded dim too); retrograd through
            # slices and selects, and refuses the others, a difference left)
            name, fn = "select(0,0)", _select0
        views.append((name, parent, fn, _shape_of(fn, pshape)))
    steps = []
    for _ in range(int(rng.integers(2, 6))):
        target = int(rng.integers(-1, len(views)))
        tshape = shape if target < 0 else views[target][3]
        op, wfn, oshape = _write(rng, tshape)
        operand = None if oshape is None else _array(rng, oshape)
        other = int(rng.integers(-1, len(views)))
        read = int(rng.integers(-1, len(views))) if rng.random() < 0.5 else None
        steps.append((target, op, wfn, operand, other, read))
    second = rng.random() < 0.25
    weight = _weight_fn(rng)

    def body(lib):
        la = _leaf(lib, a)
        lw = _leaf(lib, np.array(0.75))
        if start == "mul":
            x = la * 1.5
        elif start == "clone_t":  # a non-contiguous base
            x = (la * 1.0).transpose(0, -1)
        else:  # a buffer outside the graph until a write brings a leaf in
            x = lib.zeros(shape, dtype=lib.float64)
            x[0] = la[0] * 2.0
        made = []
        for _name, parent, fn, _s in views:
            made.append(fn(lib, x if parent < 0 else made[parent]))
        results = []
        for target, _op, wfn, operand, other, read in steps:
            t = x if target < 0 else made[target]
            o = None if operand is None else _leaf(lib, operand) * lw
            wfn(lib, t, o, x if other < 0 else made[other])
            if read is not None:
                results.append((x if read < 0 else made[read]) * 1.0)
        return [x, *made, *results], [la, lw]

    text = " ".join(f"v{p}={n}" for n, p, _, _ in views)
    ops = ", ".join(f"v{t}.{op}(v{o})" + (f"+read v{r}" if r is not None else "")
                    for t, op, _, _, o, r in steps)  # fmt: skip
    return _trial(f"alias {start} {list(shape)} [{text}] [{ops}] second={second}", body, weight,
                  second=second)  # fmt: skip


# ---- advanced indexing in get and set ------------------------------------------------------


def _index_item(rng, size, kinds):
    """(text, fn(lib) -> the index item, how many dims it eats, is it advanced)."""
    kind = str(_pick(rng, *kinds))
    if kind == "int":
        i = int(rng.integers(-size, size)) if size else 0
        return f"{i}", (lambda lib: i), 1, False
    if kind == "int_out":  # (out of range: must raise)
        i = int(_pick(rng, size, -size - 1))
        return f"{i}!", (lambda lib: i), 1, False
    if kind == "slice":
        lo = int(rng.integers(-size - 1, size + 1)) if rng.random() < 0.6 else None
        hi = int(rng.integers(-size - 1, size + 2)) if rng.random() < 0.5 else None
        st = int(_pick(rng, 1, 1, 2, 3)) if rng.random() < 0.5 else None
        return f"{lo}:{hi}:{st}", (lambda lib: slice(lo, hi, st)), 1, False
    if kind == "none":
        return "None", (lambda lib: None), 0, False
    if kind == "full":
        return ":", (lambda lib: slice(None)), 1, False
    if kind == "tensor":
        shape = _pick(rng, (2,), (1,), (3,), (2, 1), (1, 2), ())
        arr = rng.integers(-size, size, size=shape) if size else np.zeros(shape, np.int64)
        as_list = shape != () and len(shape) == 1 and rng.random() < 0.3
        text = f"{arr.tolist()}" + ("L" if as_list else "T")
        return text, (lambda lib: arr.tolist() if as_list else lib.tensor(arr)), 1, True
    if kind == "tensor_out":
        arr = np.array([0, size if rng.random() < 0.5 else -size - 1])
        return f"{arr.tolist()}T!", (lambda lib: lib.tensor(arr)), 1, True
    if kind == "bool_scalar":
        b = bool(rng.random() < 0.5)
        return f"{b}", (lambda lib: b), 0, True
    raise AssertionError(kind)


def _constant(array):
    return lambda lib: lib.tensor(array)


@gen("index")
def _index(rng):
    shape = tuple(int(s) for s in rng.integers(1 if rng.random() < 0.9 else 0, 5,
                                                size=int(rng.integers(1, 5))))  # fmt: skip
    mode = str(_pick(rng, "get", "get", "set", "iadd", "set_scalar", "index_put"))
    # (torch's index_put_ checks no index against an empty tensor: x[[0, 1]] = v passes for
    # x of shape (1, 3, 0), a torch bug; retrograd raises. Out-of-range writes into an empty
    # tensor are not drawn)
    # (nor out of range where the rest of the index selects nothing: torch checks an index
    # tensor's entries only against the elements it reads, none there; retrograd raises.
    # Such draws keep every element: whole slices, no masks, no False)
    bad = rng.random() < 0.08 and 0 not in shape
    kinds = ["int", "slice", "slice", "none", "tensor", "tensor", "bool_scalar"]
    if bad:
        kinds = ["int", "full", "none", "tensor"]
    items, dim = [], 0
    ellipsis_at = int(rng.integers(0, len(shape) + 1)) if rng.random() < 0.4 else None
    mask = None
    if rng.random() < 0.25 and not bad:  # a bool mask over the first k dims (after items before it)
        k = int(rng.integers(1, len(shape) + 1))
        mask = (int(rng.integers(0, len(shape) - k + 1)), k)
    while dim < len(shape) and rng.random() < 0.8:
        if mask is not None and dim == mask[0]:
            k = mask[1]
            m = rng.random(shape[dim : dim + k]) < 0.5
            items.append((f"mask{list(m.shape)}", _constant(m), k, True))
            dim += k
            mask = None
            continue
        if ellipsis_at is not None and dim >= ellipsis_at:
            items.append(("...", lambda lib: Ellipsis, 0, False))
            ellipsis_at = None
            break
        items.append(_index_item(rng, shape[dim], kinds))
        dim += items[-1][2]
    if rng.random() < 0.2:
        items.append(("None", lambda lib: None, 0, False))
    if bad:
        at = int(rng.integers(len(items) + 1))
        size = shape[min(at, len(shape) - 1)]
        items.insert(at, _index_item(rng, size, ["int_out", "tensor_out"]))
    single = len(items) == 1 and rng.random() < 0.5  # x[item] rather than x[(item,)]
    a = _array(rng, shape)
    weight = _weight_fn(rng)
    text = "[" + ", ".join(t for t, *_ in items) + "]"

    def index(lib):
        made = tuple(fn(lib) for _, fn, _, _ in items)
        return made[0] if single else made

    def body(lib):
        from fuzz_cases import _torch

        torch = _torch()
        la = _leaf(lib, a)
        lv = _leaf(lib, np.array(1.25))
        if mode == "get":
            return [la[index(lib)]], [la]
        # (the value's shape: the selected one's, maybe trimmed at the front or made 1)
        try:
            sel = tuple(torch.zeros(shape)[index(torch)].shape)
        except IndexError:  # (the draw must raise: the write below raises it)
            sel = ()
        vshape = tuple(1 if rng_v[i % len(rng_v)] < 0.2 else s for i, s in enumerate(sel))
        vshape = vshape[trim:] if trim <= len(vshape) else vshape
        x = la * 1.0
        v = _leaf(lib, np.resize(b, vshape)) * lv
        if mode == "set":
            x[index(lib)] = v
        elif mode == "iadd":
            x[index(lib)] += v
        elif mode == "set_scalar":
            x[index(lib)] = -0.5
        else:  # index_put_ with accumulate (duplicates add up)
            made = index(lib)
            made = made if isinstance(made, tuple) else (made,)
            # (int tensors and masks, from dim 0 on: a mask may then cover dims of another
            # shape, which must raise)
            tensors = tuple(
                m for m in made if isinstance(m, lib.Tensor) and m.dtype in (lib.int64, lib.bool)
            )
            if not tensors:
                tensors = (lib.tensor([0, 0, -1]),)
            x.index_put_(tensors, v.sum(), accumulate=True)
        return [x], [la, lv]

    rng_v = rng.random(6)
    trim = int(rng.integers(0, 3)) if rng.random() < 0.3 else 0
    b = rng.uniform(-2, 2, size=7)
    single_text = " single" if single else ""
    return _trial(f"index {mode} {list(shape)}{text}{single_text}", body, weight)


# ---- second derivatives through nn.functional with unusual arguments -------------------------


def _pleaf(lib, array, params):
    """A parameter leaf in the dtype of the chain's input (``params[0]``)."""
    return lib.tensor(array, dtype=params[0].dtype, requires_grad=True)


def _conv_layer(rng, c, nd):
    groups = int(_pick(rng, *[g for g in (1, 2, 3) if c % g == 0]))
    out = groups * int(rng.integers(1, 3))
    k = int(rng.integers(1, 4))
    stride = int(_pick(rng, 1, 1, 2))
    dil = int(_pick(rng, 1, 1, 2))
    pad = _pick(rng, 0, 1, 2, "same", "valid") if stride == 1 else int(rng.integers(0, 3))
    bias = bool(rng.random() < 0.5)
    w = rng.uniform(-1, 1, size=(out, c // groups) + (k,) * nd)
    b = rng.uniform(-1, 1, size=out)
    text = f"conv{nd}d(k={k},s={stride},p={pad},d={dil},g={groups},bias={bias})"

    def fn(lib, x, params):
        conv = getattr(lib.nn.functional, f"conv{nd}d")
        lw = _pleaf(lib, w, params)
        params.append(lw)
        lb = None
        if bias:
            lb = _pleaf(lib, b, params)
            params.append(lb)
        return conv(x, lw, lb, stride=stride, padding=pad, dilation=dil, groups=groups)

    return text, fn, out


def _convt_layer(rng, c, nd):
    groups = int(_pick(rng, *[g for g in (1, 2) if c % g == 0]))
    out = groups * int(rng.integers(1, 3))
    k = int(rng.integers(1, 4))
    stride = int(_pick(rng, 1, 2))
    dil = int(_pick(rng, 1, 2))
    pad = int(rng.integers(0, 2))
    opad = int(rng.integers(0, max(stride, dil)))
    w = rng.uniform(-1, 1, size=(c, out // groups) + (k,) * nd)
    text = f"conv_transpose{nd}d(k={k},s={stride},p={pad},op={opad},d={dil},g={groups})"

    def fn(lib, x, params):
        conv = getattr(lib.nn.functional, f"conv_transpose{nd}d")
        lw = _pleaf(lib, w, params)
        params.append(lw)
        return conv(x, lw, None, stride=stride, padding=pad, output_padding=opad, groups=groups,
                    dilation=dil)  # fmt: skip

    return text, fn, out


def _pool_layer(rng, c, nd):
    kind = str(_pick(rng, "max", "avg", "lp", "adaptive_avg", "adaptive_max"))
    k = int(rng.integers(1, 4))
    stride = _pick(rng, None, 1, 2)
    pad = int(rng.integers(0, k // 2 + 1))
    ceil = bool(rng.random() < 0.5)
    if kind == "max":
        dil = int(_pick(rng, 1, 2))
        text = f"max_pool{nd}d(k={k},s={stride},p={pad},d={dil},ceil={ceil})"
        call = lambda lib, x: getattr(lib.nn.functional, f"max_pool{nd}d")(  # noqa: E731
            x, k, stride, pad, dil, ceil_mode=ceil
        )
    elif kind == "avg":
        cip = bool(rng.random() < 0.5)
        div = _pick(rng, None, None, 2)
        text = f"avg_pool{nd}d(k={k},s={stride},p={pad},ceil={ceil},cip={cip},div={div})"
        extra = {"divisor_override": div} if nd == 2 else {}
        call = lambda lib, x: getattr(lib.nn.functional, f"avg_pool{nd}d")(  # noqa: E731
            x, k, stride, pad, ceil_mode=ceil, count_include_pad=cip, **extra
        )
    elif kind == "lp":
        p = float(_pick(rng, 1.0, 2.0, 3.0))
        text = f"lp_pool{nd}d(p={p},k={k},s={stride},ceil={ceil})"
        call = lambda lib, x: getattr(lib.nn.functional, f"lp_pool{nd}d")(  # noqa: E731
            x * x + 0.1, p, k, stride, ceil_mode=ceil
        )
    else:
        size = int(rng.integers(1, 4))
        text = f"{kind}_pool{nd}d({size})"
        call = lambda lib, x: getattr(lib.nn.functional, f"{kind}_pool{nd}d")(x, size)  # noqa: E731
    return text, (lambda lib, x, params: call(lib, x)), c


def _pad_layer(rng, c, nd):
    mode = str(_pick(rng, "constant", "reflect", "replicate", "circular"))
    pads = tuple(int(v) for v in rng.integers(0 if mode != "constant" else -1, 3, size=2 * nd))
    value = float(_pick(rng, 0.0, 1.5))
    kw = {"value": value} if mode == "constant" else {}
    text = f"pad({pads},{mode})"
    return text, (lambda lib, x, params: lib.nn.functional.pad(x, pads, mode=mode, **kw)), c


def _resize_layer(rng, c, nd):
    modes = ["nearest", "linear"] if nd == 1 else ["nearest", "bilinear", "bicubic"]
    mode = str(_pick(rng, *modes, "nearest-exact", "area"))
    align = None if mode in ("nearest", "nearest-exact", "area") else bool(rng.random() < 0.5)
    scale = float(_pick(rng, 0.5, 1.5, 2.0, 0.75))
    text = f"interpolate({mode},x{scale},ac={align})"

    def fn(lib, x, params):
        return lib.nn.functional.interpolate(x, scale_factor=scale, mode=mode, align_corners=align)

    return text, fn, c


def _sample_layer(rng, c, nd):
    mode = str(_pick(rng, "bilinear", "nearest"))
    pmode = str(_pick(rng, "zeros", "border", "reflection"))
    align = bool(rng.random() < 0.5)
    theta = rng.uniform(-1.2, 1.2, size=(1, 2, 3))
    text = f"grid_sample(affine,{mode},{pmode},ac={align})"

    def fn(lib, x, params):
        lt = _pleaf(lib, theta, params)
        params.append(lt)
        n = x.shape[0]
        grid = lib.nn.functional.affine_grid(lt.expand(n, 2, 3), (n, x.shape[1], 3, 4),
                                             align_corners=align)  # fmt: skip
        return lib.nn.functional.grid_sample(x, grid, mode=mode, padding_mode=pmode,
                                             align_corners=align)  # fmt: skip

    return text, fn, c


def _norm_layer(rng, c, nd):
    kind = str(_pick(rng, "instance", "group", "layer", "batch", "rms"))
    eps = float(_pick(rng, 1e-5, 0.1))
    g = rng.uniform(0.5, 1.5, size=c)
    text = f"{kind}_norm(eps={eps})"

    def fn(lib, x, params):
        fn_ = lib.nn.functional
        lg = _pleaf(lib, g, params)
        params.append(lg)
        if kind == "instance":
            return fn_.instance_norm(x, weight=lg, eps=eps)
        if kind == "group":
            return fn_.group_norm(x, 1, weight=lg, eps=eps)
        if kind == "batch":
            return fn_.batch_norm(x, None, None, weight=lg, training=True, eps=eps)
        if kind == "rms":
            return fn_.rms_norm(x, x.shape[-1:], eps=eps)
        return fn_.layer_norm(x, x.shape[-1:], eps=eps)

    return text, fn, c


ACTS = {
    "elu": lambda f, x: f.elu(x, alpha=0.7),
    "selu": lambda f, x: f.selu(x),
    # (alpha a power of 2: torch's float64 gradient of celu takes 1 / alpha rounded to float32,
    # 0.58364548802 for exp(-0.7 / 1.3) = 0.58364547814, a torch bug)
    "celu": lambda f, x: f.celu(x, alpha=2.0),
    "softplus": lambda f, x: f.softplus(x, beta=2.0, threshold=1.0),
    "gelu_tanh": lambda f, x: f.gelu(x, approximate="tanh"),
    "gelu": lambda f, x: f.gelu(x),
    "mish": lambda f, x: f.mish(x),
    "silu": lambda f, x: f.silu(x),
    "logsigmoid": lambda f, x: f.logsigmoid(x),
    "hardswish": lambda f, x: f.hardswish(x),
    "tanhshrink": lambda f, x: f.tanhshrink(x),
    "softsign": lambda f, x: f.softsign(x),
    "log_softmax": lambda f, x: f.log_softmax(x, dim=1),
    "softmin": lambda f, x: f.softmin(x, dim=-1),
    "glu": lambda f, x: f.glu(x.repeat_interleave(2, 1), dim=1),
    "normalize": lambda f, x: f.normalize(x, p=3.0, dim=1),
}


def _act(name):
    return lambda lib, x, params: ACTS[name](lib.nn.functional, x)


ACTS_LAYER = {name: _act(name) for name in ACTS}


def _act_layer(rng, c, nd):
    name = str(_pick(rng, *ACTS))
    return name, ACTS_LAYER[name], c


LAYERS = [_conv_layer, _conv_layer, _convt_layer, _pool_layer, _pool_layer, _pad_layer,
          _resize_layer, _norm_layer, _act_layer, _act_layer, _sample_layer]  # fmt: skip


@gen("nnf2")
def _nnf2(rng):
    nd = int(_pick(rng, 1, 2, 2))
    c = int(rng.integers(1, 5))
    n = int(_pick(rng, 1, 2))
    spatial = tuple(int(v) for v in rng.integers(3, 7, size=nd))
    c0 = c
    layers = []
    for _ in range(int(rng.integers(1, 4))):
        make = LAYERS[int(rng.integers(len(LAYERS)))]
        if make is _sample_layer and nd != 2:
            make = _act_layer
        text, fn, c = make(rng, c, nd)
        layers.append((text, fn))
    a = rng.uniform(-1.5, 1.5, size=(n, c0) + spatial)
    weight = _weight_fn(rng)

    def body(lib):
        lx = _leaf(lib, a)
        params = [lx]
        y = lx
        for _text, fn in layers:
            y = fn(lib, y, params)
        return [y], params

    text = " -> ".join(t for t, _ in layers)
    return _trial(f"nnf2 x{list(a.shape)} {text}", body, weight, second=True)


# ---- reductions and scans over infinities and NaN ------------------------------------------

INF_POOL = [-math.inf, math.inf, 0.0, 1.5, -2.0, 1.5, 0.5]

SPECIAL = {
    "logsumexp": lambda lib, x, d, k: x.logsumexp(d, keepdim=k),
    "softmax": lambda lib, x, d, k: lib.softmax(x, d),
    "log_softmax": lambda lib, x, d, k: lib.nn.functional.log_softmax(x, dim=d),
    "amax": lambda lib, x, d, k: x.amax(d, keepdim=k),
    "amin": lambda lib, x, d, k: lib.amin(x, d, keepdim=k),
    "max_dim": lambda lib, x, d, k: x.max(d, keepdim=k).values,
    "max": lambda lib, x, d, k: x.max(),
    "sum": lambda lib, x, d, k: x.sum(d, keepdim=k),
    "mean": lambda lib, x, d, k: x.mean(d, keepdim=k),
    "prod": lambda lib, x, d, k: x.prod(d, keepdim=k),
    "norm2": lambda lib, x, d, k: lib.linalg.vector_norm(x, 2, dim=d, keepdim=k),
    "norm1": lambda lib, x, d, k: lib.linalg.vector_norm(x, 1, dim=d, keepdim=k),
    "norm_inf": lambda lib, x, d, k: lib.linalg.vector_norm(x, math.inf, dim=d, keepdim=k),
    "norm_ninf": lambda lib, x, d, k: lib.linalg.vector_norm(x, -math.inf, dim=d, keepdim=k),
    "norm3": lambda lib, x, d, k: lib.linalg.vector_norm(x, 3, dim=d, keepdim=k),
    "nansum": lambda lib, x, d, k: lib.nansum(x, d, keepdim=k),
    "cumsum": lambda lib, x, d, k: x.cumsum(d),
    "cumprod": lambda lib, x, d, k: x.cumprod(d),
    "logcumsumexp": lambda lib, x, d, k: x.logcumsumexp(d),
    "cummax": lambda lib, x, d, k: x.cummax(d).values,
    "sort": lambda lib, x, d, k: x.sort(d).values,
    "exp_sum": lambda lib, x, d, k: x.exp().sum(d, keepdim=k),
    "sigmoid": lambda lib, x, d, k: lib.sigmoid(x),
    "tanh": lambda lib, x, d, k: lib.tanh(x),
    "softplus": lambda lib, x, d, k: lib.nn.functional.softplus(x),
    "clamp_inf": lambda lib, x, d, k: x.clamp(-math.inf, 1.0),
    "nan_to_num": lambda lib, x, d, k: lib.nan_to_num(x, posinf=3.0),
    "abs_sum": lambda lib, x, d, k: x.abs().sum(d, keepdim=k),
    "relu": lambda lib, x, d, k: lib.relu(x),
    "square": lambda lib, x, d, k: x * x,
    "atan": lambda lib, x, d, k: lib.atan(x),
    "erf": lambda lib, x, d, k: lib.erf(x),
    "where_finite": lambda lib, x, d, k: lib.where(x.isfinite(), x, 0.0).sum(d),
    "isinf": lambda lib, x, d, k: (x.isinf(), x.isneginf(), x.isposinf()),
    "min_max_pair": lambda lib, x, d, k: lib.maximum(x, x.flip(d)),
    "fmax": lambda lib, x, d, k: lib.fmax(x, x.flip(d)),
    "var": lambda lib, x, d, k: x.var(d, keepdim=k),
    "hardtanh": lambda lib, x, d, k: lib.nn.functional.hardtanh(x),
    "log1p_exp": lambda lib, x, d, k: lib.log1p(x.exp()),
    # (y = 0 only where x = 0: torch's gradient in y there is 0 / 0 = NaN, where xlogy(0, y)
    # is 0 for every y, its partial derivative 0, retrograd's; a torch bug, left out)
    "xlogy": lambda lib, x, d, k: lib.xlogy(x, x.abs() + (x == 0).double()),
}

#: what is kept out of each op's draws (torch bugs, and one difference left; see CHANGELOG):
#: - cumprod: torch's gradient through an infinity or NaN before a zero is NaN at the first
#:   element and 0 after the zero ([inf, 0, 2] weighted [1, 2, 3]: torch's [nan, inf, 0],
#:   the products' [1, inf, nan]);
#: - logcumsumexp: torch's gradient is NaN where a prefix holds +inf (the limit is finite:
#:   [0.5, inf] weighted [1, 2] has gradient [1, 2]);
#: - hardtanh: torch's gradient at NaN is the incoming one in its scalar loop and 0 in its
#:   vectorized one (by the tensor's size);
#: - var: with an infinity in a slice retrograd's gradient is NaN over the slice (its mean's
#:   term, inf - inf), torch's formula 2 (x - mean) / (N - 1) gives -inf at the finite
#:   entries; the difference is left (a composed var keeps its exact second derivative).
#: - norm3: over a vector holding a NaN, retrograd's gradient at its zero entries is 0 (the
#:   partial derivative of |x|^3 there), torch's NaN (0 * g / NaN); left.
NO_INF = {"cumprod", "logcumsumexp", "var"}
NO_NAN = {"cumprod", "logcumsumexp", "hardtanh", "norm3"}


@gen("special")
def _special(rng):
    op = str(_pick(rng, *SPECIAL))
    n = int(rng.integers(1, 4))
    shape = tuple(int(s) for s in rng.integers(1, 4, size=n))
    pool = list(INF_POOL) if op not in NO_INF else [v for v in INF_POOL if math.isfinite(v)]
    pool += [math.nan] if rng.random() < 0.3 and op not in NO_NAN else []
    a = _array(rng, shape, pool)
    d = int(rng.integers(-n, n))
    keep = bool(rng.random() < 0.5)
    weight = _weight_fn(rng)

    def body(lib):
        leaf = _leaf(lib, a)
        out = SPECIAL[op](lib, leaf, d, keep)
        return (list(out) if isinstance(out, tuple) else [out]), [leaf]

    return _trial(f"special {op} {a.tolist()} dim={d} keepdim={keep}", body, weight)


# ---- in-place ops and writes across dtypes ---------------------------------------------------

#: the names of the trials that draw float16/bfloat16 (refused by the NumPy backend)
HALF: set = set()

PROMOTE_DTYPES = ["int64", "bool", "float32", "float64", "float16", "bfloat16", "int64", "float64"]

INPLACE_OPS = {
    "add_": lambda lib, t, o: t.add_(o),
    "sub_": lambda lib, t, o: t.sub_(o),
    "mul_": lambda lib, t, o: t.mul_(o),
    "div_": lambda lib, t, o: t.div_(o),
    "div_floor_": lambda lib, t, o: t.div_(o, rounding_mode="floor"),
    "iadd": lambda lib, t, o: t.__iadd__(o),
    "imul": lambda lib, t, o: t.__imul__(o),
    "itruediv": lambda lib, t, o: t.__itruediv__(o),
    "ifloordiv": lambda lib, t, o: t.__ifloordiv__(o),
    "remainder_": lambda lib, t, o: t.remainder_(o),
    "pow_": lambda lib, t, o: t.pow_(o),
    "clamp_min_": lambda lib, t, o: t.clamp_(min=o),
    "copy_": lambda lib, t, o: t.copy_(o if isinstance(o, lib.Tensor) else lib.tensor(o)),
    "fill_": lambda lib, t, o: t.fill_(o),
    "setitem": lambda lib, t, o: t.__setitem__(0, o),
    "setitem_mask": lambda lib, t, o: t.__setitem__(t != t.flip(-1), o),
    "masked_fill_": lambda lib, t, o: t.masked_fill_(t != t.flip(-1), o),
    "index_put_acc": lambda lib, t, o: t.index_put_(
        (lib.tensor([0, -1, 0]),),
        o if isinstance(o, lib.Tensor) else lib.tensor(o),
        accumulate=True,
    ),
    "maximum": lambda lib, t, o: lib.maximum(t, o if isinstance(o, lib.Tensor) else lib.tensor(o)),
    "where": lambda lib, t, o: lib.where(t != 0, t, o),
    "mean": lambda lib, t, o: (t.float().mean(), t.sum(), t.cumsum(-1), t.prod(-1)),
    "matmul": lambda lib, t, o: t @ (o.mT if isinstance(o, lib.Tensor) and o.ndim > 1 else o),
    "lerp_": lambda lib, t, o: t.lerp_(o if isinstance(o, lib.Tensor) else lib.tensor(o), 0.5),
    "addcmul_": lambda lib, t, o: t.addcmul_(o, o, value=2),
}


def _dtype_value(rng, dtype, shape):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "int64":
        return rng.integers(-3, 4, size=shape)
    return np.round(rng.uniform(-2.5, 2.5, size=shape) * 4) / 4  # (exact in every dtype)


@gen("dtypes")
def _dtypes(rng):
    op = str(_pick(rng, *INPLACE_OPS))
    dt = str(_pick(rng, *PROMOTE_DTYPES))
    shape = _pick(rng, (3,), (2, 3))
    a = _dtype_value(rng, dt, shape)
    okind = str(_pick(rng, "tensor", "tensor", "0d", "int", "float", "bool"))
    odt = str(_pick(rng, *PROMOTE_DTYPES))
    if okind == "int":
        other = int(rng.integers(-3, 4))
    elif okind == "float":
        other = float(_pick(rng, 0.5, -1.25, 2.0))
    elif okind == "bool":
        other = bool(rng.random() < 0.5)
    else:
        oshape = () if okind == "0d" else shape[-int(rng.integers(1, len(shape) + 1)) :]
        other = _dtype_value(rng, odt, oshape)
    half = dt in ("float16", "bfloat16") or (okind in ("tensor", "0d") and odt in
                                                ("float16", "bfloat16"))  # fmt: skip
    name = (
        f"dtypes {op} {dt}{list(shape)} with {okind} {odt if okind in ('tensor', '0d') else other}"
    )
    if half:
        HALF.add(name)

    def fn(lib):
        t = lib.tensor(a, dtype=getattr(lib, dt))
        o = lib.tensor(other, dtype=getattr(lib, odt)) if okind in ("tensor", "0d") else other
        out = INPLACE_OPS[op](lib, t, o)
        outs = list(out) if isinstance(out, tuple) else [out]
        if op.endswith("_") or op.startswith("i") or op.startswith("set"):
            outs = [t]
        return [v for x in outs for v in _half_out(lib, x)]

    return Trial(name, fn, rtol=1e-2 if half else 1e-6)


@gen("nnf_half")
def _nnf_half(rng):
    """A chain of ``nnf2``'s layers in float16 or bfloat16 (forward and first derivatives;
    torch's CPU kernels compute in float32 and round)."""
    dt = str(_pick(rng, "float16", "bfloat16", "float32"))
    nd = int(_pick(rng, 1, 2))
    c = int(rng.integers(1, 4))
    spatial = tuple(int(v) for v in rng.integers(3, 6, size=nd))
    c0 = c
    layers = []
    for _ in range(int(rng.integers(1, 3))):
        make = LAYERS[int(rng.integers(len(LAYERS)))]
        if make is _sample_layer and nd != 2:
            make = _act_layer
        text, fn, c = make(rng, c, nd)
        if text == "normalize":  # (its gradient cancels to ~0 where bfloat16's rounding
            text, fn = "silu", ACTS_LAYER["silu"]  # leaves 1% of the others: not compared)
        layers.append((text, fn))
    a = np.round(rng.uniform(-1.5, 1.5, size=(1, c0) + spatial) * 8) / 8
    weight = _weight_fn(rng)
    text = " -> ".join(t for t, _ in layers)
    name = f"nnf_half {dt} x{list(a.shape)} {text}"
    if dt != "float32":
        HALF.add(name)

    def fn(lib):
        lx = lib.tensor(a, dtype=getattr(lib, dt), requires_grad=True)
        params = [lx]
        y = lx
        for _text, layer in layers:
            y = layer(lib, y, params)
        w = lib.tensor(weight(tuple(y.shape)), dtype=y.dtype)
        grads = lib.autograd.grad((y * w).sum(), params, allow_unused=True)
        return [v for o in (y, *grads) for v in _half_out(lib, o)]

    return Trial(name, fn, rtol=3e-2 if dt != "float32" else 1e-4)
