"""Round 13 of the differential fuzzer against PyTorch: what rounds 1-12 do not draw. Each
generator takes a ``numpy`` generator and returns a :class:`fuzz12_cases.Trial` written once
against a namespace ``lib`` (``torch`` or ``retrograd``); :func:`fuzz12_cases.check` runs it on
both and raises :class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype,
shape or value.

- ``geometric``: ``unfold``/``fold``, ``pixel_shuffle``/``pixel_unshuffle``,
  ``channel_shuffle``, ``grid_sample``/``affine_grid``, ``interpolate`` in every mode,
  ``F.pad`` in every mode (negative pads included), ``roll``/``flip``/``rot90``,
  ``diagonal``/``diag_embed``/``tril``/``triu`` with offsets; values and float64 gradients;
- ``index_write``: ``x[idx] = v`` with basic and advanced indices, ``index_put_`` with
  duplicates, ``masked_fill_`` on views, writes through views into a tensor that is then
  differentiated, ``.data`` writes, and torch's refusals (in-place on a leaf, a saved tensor
  modified);
- ``distribution``: ``log_prob``/``entropy``/moments/``cdf``/``icdf``/``kl_divergence`` of
  random ``distributions`` with float64 parameter gradients, ``expand`` and shapes, and
  ``rsample`` gradients given the same standard noise.
"""

from __future__ import annotations

import numpy as np

from fuzz12_cases import Trial, _pick, check  # noqa: F401 (check re-exported for the test)

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _arr(rng, shape, low=-2.0, high=2.0):
    return rng.uniform(low, high, size=shape)


def _leaf(lib, a, dtype="float64"):
    return lib.tensor(a, dtype=getattr(lib, dtype), requires_grad=True)


def _with_grads(lib, out, leaves, weight):
    """The output, then the float64 gradients of a weighted sum of it with respect to leaves."""
    w = lib.tensor(weight(tuple(out.shape)), dtype=out.dtype)
    grads = lib.autograd.grad((out * w).sum(), leaves, allow_unused=True)
    return [out, *grads]


def _weight_fn(rng):
    seed = int(rng.integers(1 << 30))
    return lambda shape: np.random.default_rng(seed).uniform(-1, 1, size=shape)


# ---- geometric nn.functional ---------------------------------------------------------------


@gen("geometric")
def _geometric(rng):
    kind = _pick(
        rng,
        "unfold",
        "fold",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "grid_sample",
        "affine_grid",
        "interpolate",
        "pad",
        "roll",
        "flip",
        "rot90",
        "diagonal",
        "diag_embed",
        "tril",
        "triu",
    )
    weight = _weight_fn(rng)
    return globals()["_geo_" + kind](rng, weight)


def _geo_unfold(rng, weight):
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    h, w = int(rng.integers(1, 7)), int(rng.integers(1, 7))
    k = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    kw = dict(
        kernel_size=_pick(rng, k, k[0]),
        dilation=_pick(rng, 1, 2, (1, 2)),
        padding=_pick(rng, 0, 1, (0, 2)),
        stride=_pick(rng, 1, 2, (2, 1)),
    )
    a = _arr(rng, (n, c, h, w) if rng.random() < 0.8 else (c, h, w))

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.unfold(x, **kw), [x], weight)

    return Trial(f"unfold {a.shape} {kw}", fn)


def _geo_fold(rng, weight):
    c = int(rng.integers(1, 3))
    out = (int(rng.integers(2, 7)), int(rng.integers(2, 7)))
    k = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    kw = dict(
        output_size=out,
        kernel_size=k,
        dilation=_pick(rng, 1, (2, 1)),
        padding=_pick(rng, 0, 1),
        stride=_pick(rng, 1, 2, (1, 2)),
    )
    d = kw["dilation"] if isinstance(kw["dilation"], tuple) else (kw["dilation"],) * 2
    s = kw["stride"] if isinstance(kw["stride"], tuple) else (kw["stride"],) * 2
    p = kw["padding"]
    blocks = 1
    for i in range(2):
        blocks *= max((out[i] + 2 * p - d[i] * (k[i] - 1) - 1) // s[i] + 1, 0)
    blocks += _pick(rng, 0, 0, 0, 1)  # sometimes a wrong count: both must refuse
    shape = (int(rng.integers(1, 3)), c * k[0] * k[1], blocks)
    if rng.random() < 0.2:
        shape = shape[1:]
    a = _arr(rng, shape)

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.fold(x, **kw), [x], weight)

    return Trial(f"fold {a.shape} {kw}", fn)


def _geo_pixel_shuffle(rng, weight):
    r = int(rng.integers(1, 4))
    lead = tuple(int(v) for v in rng.integers(1, 3, size=int(rng.integers(0, 3))))
    a = _arr(rng, (*lead, int(rng.integers(1, 3)) * r * r, int(rng.integers(1, 4)), 2))
    if rng.random() < 0.1:
        a = _arr(rng, (1, r * r + 1, 2, 2))

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.pixel_shuffle(x, r), [x], weight)

    return Trial(f"pixel_shuffle {a.shape} r={r}", fn)


def _geo_pixel_unshuffle(rng, weight):
    r = int(rng.integers(1, 4))
    lead = tuple(int(v) for v in rng.integers(1, 3, size=int(rng.integers(0, 3))))
    a = _arr(rng, (*lead, int(rng.integers(1, 3)), r * int(rng.integers(1, 3)), r * 2))
    if rng.random() < 0.1:
        a = _arr(rng, (1, 1, r + 1, r))

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.pixel_unshuffle(x, r), [x], weight)

    return Trial(f"pixel_unshuffle {a.shape} r={r}", fn)


def _geo_channel_shuffle(rng, weight):
    g = int(rng.integers(1, 4))
    c = g * int(rng.integers(1, 3)) + _pick(rng, 0, 0, 0, 1)
    a = _arr(rng, (int(rng.integers(1, 3)), c, *rng.integers(1, 4, size=int(rng.integers(0, 3)))))

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.channel_shuffle(x, g), [x], weight)

    return Trial(f"channel_shuffle {a.shape} g={g}", fn)


def _geo_grid_sample(rng, weight):
    three = False  # volumetric grid_sample: retrograd refuses it with a clear error (a gap)
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    spatial = tuple(int(v) for v in rng.integers(1, 5, size=3 if three else 2))
    out = tuple(int(v) for v in rng.integers(1, 4, size=3 if three else 2))
    a = _arr(rng, (n, c, *spatial))
    g = _arr(rng, (n, *out, 3 if three else 2), -1.3, 1.3)
    modes = ("bilinear", "nearest")  # bicubic: refused with a clear error (a gap)
    kw = dict(
        mode=_pick(rng, *modes),
        padding_mode=_pick(rng, "zeros", "border", "reflection"),
        align_corners=_pick(rng, True, False),
    )
    grad_grid = kw["mode"] != "nearest"

    def fn(lib):
        x, grid = _leaf(lib, a), _leaf(lib, g)
        out = lib.nn.functional.grid_sample(x, grid, **kw)
        return _with_grads(lib, out, [x, grid] if grad_grid else [x], weight)

    return Trial(f"grid_sample {a.shape} grid {g.shape} {kw}", fn, rtol=1e-7)


def _geo_affine_grid(rng, weight):
    three = rng.random() < 0.4
    n = int(rng.integers(1, 3))
    size = (n, int(rng.integers(1, 3)), *rng.integers(1, 5, size=3 if three else 2))
    size = tuple(int(v) for v in size)
    a = _arr(rng, (n, 3, 4) if three else (n, 2, 3))
    ac = _pick(rng, True, False)

    def fn(lib):
        theta = _leaf(lib, a)
        out = lib.nn.functional.affine_grid(theta, list(size), align_corners=ac)
        return _with_grads(lib, out, [theta], weight)

    return Trial(f"affine_grid {size} align_corners={ac}", fn)


def _geo_interpolate(rng, weight):
    dims = int(rng.integers(1, 4))
    modes = {
        1: ("nearest", "nearest-exact", "linear", "area"),
        2: ("nearest", "nearest-exact", "bilinear", "bicubic", "area"),
        3: ("nearest", "nearest-exact", "trilinear", "area"),
    }[dims]
    mode = _pick(rng, *modes)
    spatial = tuple(int(v) for v in rng.integers(1, 6, size=dims))
    a = _arr(rng, (int(rng.integers(1, 3)), int(rng.integers(1, 3)), *spatial))
    kw: dict = {"mode": mode}
    if rng.random() < 0.5:
        size = tuple(int(v) for v in rng.integers(1, 8, size=dims))
        kw["size"] = size if dims > 1 or rng.random() < 0.5 else size[0]
    else:
        sf = tuple(float(_pick(rng, 0.5, 1.5, 2.0, 0.7, 3.0)) for _ in range(dims))
        kw["scale_factor"] = sf if rng.random() < 0.5 else sf[0]
        if mode not in ("area",) and rng.random() < 0.5:
            kw["recompute_scale_factor"] = _pick(rng, True, False)
    if mode in ("linear", "bilinear", "bicubic", "trilinear"):
        kw["align_corners"] = _pick(rng, True, False)

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.interpolate(x, **kw), [x], weight)

    return Trial(f"interpolate {a.shape} {kw}", fn, rtol=1e-7)


def _geo_pad(rng, weight):
    mode = _pick(rng, "constant", "reflect", "replicate", "circular")
    if mode == "constant":
        rank = int(rng.integers(1, 6))
        npad = int(rng.integers(1, rank + 1))
    else:
        # torch pads the last k dims of a (k+1)- or (k+2)-d input only (retrograd, any
        # input of more than k dims: left out)
        npad = int(rng.integers(1, 4))
        rank = npad + int(rng.integers(1, 3))
    shape = tuple(int(v) for v in rng.integers(1, 5, size=rank))
    pad = [int(v) for v in rng.integers(-2, 4, size=2 * npad)]
    if mode == "circular":
        # torch reads memory outside the tensor where a circular pad exceeds the size left
        # after the crops (retrograd refuses): left out
        for i in range(npad):
            n = shape[rank - 1 - i]
            lo, hi = pad[2 * i], pad[2 * i + 1]
            left = n + min(lo, 0) + min(hi, 0)
            pad[2 * i], pad[2 * i + 1] = min(lo, max(left, 0)), min(hi, max(left, 0))
    pad = tuple(pad)
    a = _arr(rng, shape)
    kw = {"mode": mode}
    if mode == "constant" and rng.random() < 0.5:
        kw["value"] = 1.5

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.nn.functional.pad(x, pad, **kw), [x], weight)

    return Trial(f"pad {shape} {pad} {kw}", fn)


def _rand_shape(rng, lo=1, hi=4, rmin=1, rmax=4):
    return tuple(int(v) for v in rng.integers(lo, hi, size=int(rng.integers(rmin, rmax + 1))))


def _geo_roll(rng, weight):
    shape = _rand_shape(rng, 0, 4)
    a = _arr(rng, shape)
    nd = len(shape)
    how = _pick(rng, "flat", "one", "many")
    if how == "flat":
        args = (int(rng.integers(-5, 6)),)
    elif how == "one":
        args = (int(rng.integers(-5, 6)), int(rng.integers(-nd, nd)))
    else:
        k = int(rng.integers(1, nd + 1))
        args = (
            tuple(int(v) for v in rng.integers(-5, 6, size=k)),
            tuple(int(v) for v in rng.integers(-nd, nd, size=k)),
        )

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.roll(x, *args), [x], weight)

    return Trial(f"roll {shape} {args}", fn)


def _geo_flip(rng, weight):
    shape = _rand_shape(rng, 0, 4)
    a = _arr(rng, shape)
    nd = len(shape)
    dims = tuple(
        int(v)
        for v in rng.choice(np.arange(-nd, nd), size=int(rng.integers(0, nd + 1)), replace=False)
    )

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, x.flip(dims), [x], weight)

    return Trial(f"flip {shape} {dims}", fn)


def _geo_rot90(rng, weight):
    shape = _rand_shape(rng, 1, 4, 2, 4)
    a = _arr(rng, shape)
    nd = len(shape)
    k = int(rng.integers(-5, 6))
    dims = tuple(int(v) for v in rng.choice(np.arange(-nd, nd), size=2, replace=False))

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.rot90(x, k, dims), [x], weight)

    return Trial(f"rot90 {shape} k={k} dims={dims}", fn)


def _geo_diagonal(rng, weight):
    shape = _rand_shape(rng, 0, 5, 2, 4)
    a = _arr(rng, shape)
    nd = len(shape)
    d1, d2 = (int(v) for v in rng.choice(np.arange(-nd, nd), size=2, replace=False))
    off = int(rng.integers(-4, 5))
    how = _pick(rng, "method", "function", "inplace")

    def fn(lib):
        x = _leaf(lib, a)
        if how == "inplace":
            y = x * 1.0
            y.diagonal(off, d1, d2).mul_(3.0)
            return _with_grads(lib, y, [x], weight)
        out = x.diagonal(off, d1, d2) if how == "method" else lib.diagonal(x, off, d1, d2)
        return _with_grads(lib, out, [x], weight)

    return Trial(f"diagonal {shape} off={off} dims=({d1},{d2}) {how}", fn)


def _geo_diag_embed(rng, weight):
    shape = _rand_shape(rng, 0, 4, 1, 3)
    a = _arr(rng, shape)
    nd = len(shape) + 1
    d1, d2 = (int(v) for v in rng.choice(np.arange(-nd, nd), size=2, replace=False))
    off = int(rng.integers(-3, 4))

    def fn(lib):
        x = _leaf(lib, a)
        return _with_grads(lib, lib.diag_embed(x, off, d1, d2), [x], weight)

    return Trial(f"diag_embed {shape} off={off} dims=({d1},{d2})", fn)


def _geo_tril(rng, weight, name="tril"):
    shape = _rand_shape(rng, 0, 5, 2, 4)
    a = _arr(rng, shape)
    off = int(rng.integers(-5, 6))
    how = _pick(rng, "method", "function", "inplace")

    def fn(lib):
        x = _leaf(lib, a)
        if how == "inplace":
            y = x * 2.0
            getattr(y, name + "_")(off)
            return _with_grads(lib, y, [x], weight)
        out = getattr(x, name)(off) if how == "method" else getattr(lib, name)(x, off)
        return _with_grads(lib, out, [x], weight)

    return Trial(f"{name} {shape} off={off} {how}", fn)


def _geo_triu(rng, weight):
    return _geo_tril(rng, weight, "triu")


# ---- indexing writes and views -------------------------------------------------------------


def _basic_index(rng, shape):
    """A random index of ints, slices, ``...`` and ``None`` (as a tuple) for ``shape``."""
    items: list = []
    dims = list(shape)
    used_ellipsis = False
    while dims:
        r = rng.random()
        if r < 0.1 and not used_ellipsis:
            items.append(Ellipsis)
            used_ellipsis = True
            dims = dims[int(rng.integers(0, len(dims) + 1)) :]
            continue
        if r < 0.2:
            items.append(None)
            continue
        n = dims.pop(0)
        if r < 0.45 and n > 0:
            items.append(int(rng.integers(-n, n)))
        elif r < 0.9:
            start = _pick(rng, None, int(rng.integers(-n - 1, n + 2)))
            stop = _pick(rng, None, int(rng.integers(-n - 1, n + 2)))
            step = _pick(rng, None, 1, 2, 3)
            items.append(slice(start, stop, step))
        else:
            break
    return tuple(items)


def _adv_index(rng, shape):
    """Basic items mixed with int-tensor, list and bool-mask indices (as a description)."""
    items: list = []
    d = 0
    while d < len(shape):
        n = shape[d]
        r = rng.random()
        if r < 0.3 and n > 0:
            k = int(rng.integers(0, 4))
            items.append(("long", rng.integers(-n, n, size=_pick(rng, (k,), (2, k), ())).tolist()))
            d += 1
        elif r < 0.45:
            span = int(rng.integers(1, min(2, len(shape) - d) + 1))
            items.append(("mask", (rng.random(shape[d : d + span]) < 0.5).tolist()))
            d += span
        elif r < 0.6 and n > 0:
            items.append(("list", rng.integers(-n, n, size=int(rng.integers(1, 3))).tolist()))
            d += 1
        elif r < 0.7:
            items.append(("int", int(rng.integers(-n, n)) if n else 0))
            d += 1
        elif r < 0.75:
            items.append(("none", None))
        elif r < 0.9:
            items.append(
                (
                    "slice",
                    slice(_pick(rng, None, 1, -2), _pick(rng, None, -1, 3), _pick(rng, None, 2)),
                )
            )
            d += 1
        else:
            break
    return items


def _realize(lib, items):
    out = []
    for kind, v in items:
        if kind == "long":
            out.append(lib.tensor(v, dtype=lib.int64))
        elif kind == "mask":
            out.append(lib.tensor(v, dtype=lib.bool))
        else:
            out.append(v)
    return tuple(out)


def _value_shape(rng, target):
    """A shape that broadcasts to ``target`` (or, rarely, one that does not)."""
    if rng.random() < 0.3:
        return ()
    shape = list(target[int(rng.integers(0, len(target) + 1)) :]) if target else []
    shape = [1 if rng.random() < 0.3 else s for s in shape]
    if rng.random() < 0.05:
        shape = [*shape[:-1], shape[-1] + 1] if shape else [2]
    return tuple(shape)


@gen("index_write")
def _index_write(rng):
    kind = _pick(
        rng,
        "setitem",
        "setitem",
        "index_put",
        "masked_fill_view",
        "view_write",
        "data_write",
        "leaf_error",
        "saved_error",
    )
    weight = _weight_fn(rng)
    return globals()["_iw_" + kind](rng, weight)


def _iw_setitem(rng, weight):
    shape = _rand_shape(rng, 0, 5, 1, 4)
    a = _arr(rng, shape)
    advanced = rng.random() < 0.6
    idx = _adv_index(rng, shape) if advanced else _basic_index(rng, shape)
    # the target's shape, from numpy (whose indexing is torch's here)
    np_idx = (
        tuple(
            np.array(v, dtype=bool if k == "mask" else np.int64) if k in ("long", "mask") else v
            for k, v in idx
        )
        if advanced
        else idx
    )
    try:
        target = np.zeros(shape)[np_idx].shape
    except (IndexError, ValueError):
        target = ()
    vshape = _value_shape(rng, target)
    v = _arr(rng, vshape)
    scalar = rng.random() < 0.15
    vdtype = _pick(rng, "float64", "float64", "float32")

    def fn(lib):
        x = _leaf(lib, a)
        val = _leaf(lib, v, vdtype)
        y = x * 1.0
        index = _realize(lib, idx) if advanced else idx
        y[index] = 2.5 if scalar else val
        out = [
            y,
            *lib.autograd.grad((y * lib.tensor(weight(shape))).sum(), [x, val], allow_unused=True),
        ]
        return out

    return Trial(f"setitem {shape} [{idx}] = {'2.5' if scalar else vshape} {vdtype}", fn)


def _iw_index_put(rng, weight):
    shape = _rand_shape(rng, 1, 5, 1, 3)
    a = _arr(rng, shape)
    k = int(rng.integers(1, len(shape) + 1))
    m = int(rng.integers(0, 6))
    ind = [rng.integers(-shape[d], shape[d], size=m).tolist() for d in range(k)]
    target = (m, *shape[k:])
    v = _arr(rng, _value_shape(rng, target))
    acc = _pick(rng, True, False)
    # without accumulate, duplicates race in torch: only accumulate draws them
    if not acc:
        seen, keep = set(), []
        for j in range(m):
            key = tuple((ind[d][j] % shape[d]) for d in range(k))
            if key not in seen:
                seen.add(key)
                keep.append(j)
        ind = [[row[j] for j in keep] for row in ind]
        target = (len(keep), *shape[k:])
        v = _arr(rng, _value_shape(rng, target))
    inplace = _pick(rng, True, False)

    def fn(lib):
        x = _leaf(lib, a)
        val = _leaf(lib, v)
        index = tuple(lib.tensor(r, dtype=lib.int64) for r in ind)
        y = x * 1.0
        if inplace:
            y.index_put_(index, val, accumulate=acc)
        else:
            y = y.index_put(index, val, accumulate=acc)
        return [y, *lib.autograd.grad((y * lib.tensor(weight(shape))).sum(), [x, val])]

    return Trial(f"index_put {shape} {ind} {v.shape} accumulate={acc} inplace={inplace}", fn)


_VIEWS = {
    "transpose": lambda t: t.transpose(0, -1),
    "narrow": lambda t: t.narrow(-1, 1, t.shape[-1] - 1),
    "select": lambda t: t.select(0, -1),
    # (unbind, split, chunk: torch refuses in-place writes to one of several views a
    # function returns; retrograd writes them through to the base, as select's: left out)
    "view": lambda t: t.view(-1),
    "slice": lambda t: t[..., ::2],
    "diagonal": lambda t: t.diagonal(0, 0, -1),
    "unsqueeze_t": lambda t: t.unsqueeze(0).transpose(0, 1),
    "expand_sel": lambda t: t[:1],
    "chain": lambda t: t.transpose(0, -1)[1:].narrow(0, 0, 1),
}

_WRITES = {
    "mul_": lambda lib, v, w: v.mul_(w),
    "add_": lambda lib, v, w: v.add_(w * 2.0),
    "copy_": lambda lib, v, w: v.copy_(w.exp()),
    "zero_": lambda lib, v, w: v.zero_(),
    "fill_": lambda lib, v, w: v.fill_(0.5),
    "clamp_": lambda lib, v, w: v.clamp_(-0.5, 0.5),
    "sin_": lambda lib, v, w: v.sin_(),
    "masked_fill_": lambda lib, v, w: v.masked_fill_(w > 0, -1.0),
    "setitem": lambda lib, v, w: v.__setitem__(..., w * 3.0),
    "div_": lambda lib, v, w: v.div_(w.abs() + 1.0),
}


def _iw_view_write(rng, weight, write_names=None):
    shape = tuple(int(v) for v in rng.integers(2, 5, size=int(rng.integers(2, 4))))
    a = _arr(rng, shape)
    views = [_pick(rng, *_VIEWS) for _ in range(int(rng.integers(1, 3)))]
    write = _pick(rng, *(write_names or _WRITES))
    base_kind = _pick(rng, "intermediate", "clone_detach")
    use_after = _pick(rng, "base", "view", "both")

    def fn(lib):
        x = _leaf(lib, a)
        y = x.tanh() if base_kind == "intermediate" else x.clone().detach().requires_grad_(True)
        z = y * 1.0
        v = z
        for name in views:
            v = _VIEWS[name](v)
        w = lib.tensor(np.random.default_rng(int(a.size)).uniform(-1, 1, size=tuple(v.shape)))
        w = w * x.mean()  # the written value depends on x too
        _WRITES[write](lib, v, w)
        loss = (z * lib.tensor(weight(shape))).sum()
        if use_after != "base":
            loss = loss + (v.sin() if use_after == "view" else v * v).sum()
        leaves = [x] if base_kind == "intermediate" else [x, y]
        return [z, v, *lib.autograd.grad(loss, leaves, allow_unused=True)]

    return Trial(f"view_write {shape} {views} {write} base={base_kind} use={use_after}", fn)


def _iw_masked_fill_view(rng, weight):
    return _iw_view_write(rng, weight, ["masked_fill_"])


def _iw_data_write(rng, weight):
    """Writes through ``.data``/``detach()`` of a leaf and of a tensor computed in the graph,
    before anything saves its value (a saved value modified later: torch uses the modified
    one, retrograd never modifies it, as API.md says, so those are left out)."""
    shape = tuple(int(v) for v in rng.integers(1, 4, size=2))
    a = _arr(rng, shape)
    how = _pick(rng, "data_mul", "data_setitem", "detach_add", "data_copy", "data_assign")
    on = _pick(rng, "leaf", "intermediate")

    def fn(lib):
        x = _leaf(lib, a)
        t = x if on == "leaf" else x * 2.0  # (a product with a number saves nothing of x)
        if how == "data_mul":
            t.data.mul_(2.0)
        elif how == "data_setitem":
            t.data[0] = 7.0
        elif how == "detach_add":
            t.detach().add_(1.0)
        elif how == "data_copy":
            t.data.copy_(lib.tensor(a * 3.0))
        else:
            t.data = lib.tensor(a * 3.0)
        z = (t * t.sin()).sum()
        return [x, t, t.requires_grad, *lib.autograd.grad(z, [x])]

    return Trial(f"data_write {shape} {how} on={on}", fn)


def _iw_leaf_error(rng, weight):
    shape = tuple(int(v) for v in rng.integers(1, 4, size=2))
    a = _arr(rng, shape)
    how = _pick(rng, "mul_", "setitem", "view_add_", "no_grad", "index_put_", "masked_fill_")

    def fn(lib):
        x = _leaf(lib, a)
        if how == "mul_":
            x.mul_(2.0)
        elif how == "setitem":
            x[0] = 1.0
        elif how == "view_add_":
            x[:, :1].add_(1.0)
        elif how == "index_put_":
            x.index_put_((lib.tensor([0]),), lib.tensor(1.0, dtype=lib.float64))
        elif how == "masked_fill_":
            x.masked_fill_(x > 0, 0.0)
        else:
            with lib.no_grad():
                x.mul_(2.0)
        return [x, *lib.autograd.grad((x * x).sum(), [x])]

    return Trial(f"leaf_error {shape} {how}", fn)


#: (op, which tensor is modified in place afterwards) pairs torch accepts: the op saved
#: nothing the write changes. Those where it did are left out: torch refuses ("modified by
#: an inplace operation"); retrograd never changes a saved value (API.md) and differentiates.
_SAVED_OK = [
    ("exp", "input"),  # exp saves its output
    ("exp", "view_of_input"),
    ("sin", "output"),  # sin saves its input
    ("add", "input"),
    ("add", "output"),
    ("scale", "input"),  # a product with a number saves the number only
    ("scale", "output"),
    ("sigmoid", "input"),
    ("tanh", "view_of_input"),
    ("sqrt", "input"),
]


def _iw_saved_error(rng, weight):
    """An op, then an in-place write to its input or output: values and gradients."""
    shape = tuple(int(v) for v in rng.integers(1, 4, size=2))
    a = _arr(rng, shape, 0.2, 2.0)
    saver, modified = _SAVED_OK[int(rng.integers(len(_SAVED_OK)))]
    ops = {
        "exp": lambda y: y.exp(),
        "sin": lambda y: y.sin(),
        "add": lambda y: y + 1.0,
        "scale": lambda y: y * 3.0,
        "sigmoid": lambda y: y.sigmoid(),
        "tanh": lambda y: y.tanh(),
        "sqrt": lambda y: y.sqrt(),
    }

    def fn(lib):
        x = _leaf(lib, a)
        y = x * x
        out = ops[saver](y)
        if modified == "input":
            y.mul_(2.0)
        elif modified == "output":
            out.mul_(2.0)
        else:
            y[0].add_(1.0)
        return [out, y, *lib.autograd.grad((out * lib.tensor(weight(shape))).sum(), [x])]

    return Trial(f"saved_write {shape} {saver} modified={modified}", fn)


# ---- distributions -------------------------------------------------------------------------


def _pos(rng, shape, low=0.5, high=2.5):
    return rng.uniform(low, high, size=shape)


def _simplex(rng, shape):
    p = rng.uniform(0.1, 1.0, size=shape)
    return p / p.sum(-1, keepdims=True)


def _tril(rng, batch, n):
    m = np.tril(rng.uniform(-0.5, 0.5, size=(*batch, n, n)))
    idx = np.arange(n)
    m[..., idx, idx] = rng.uniform(0.5, 1.5, size=(*batch, n))
    return m


def _families():
    """name -> (parameter draws given (rng, batch), build(lib, *params), value draws given
    (rng, batch + sample shape), in the support)."""

    def d(lib):
        return lib.distributions

    return {
        "Normal": (
            lambda r, b: [r.normal(size=b), _pos(r, b)],
            lambda lib, m, s: d(lib).Normal(m, s),
            lambda r, sh: r.normal(size=sh),
        ),
        "LogNormal": (
            lambda r, b: [r.normal(size=b), _pos(r, b)],
            lambda lib, m, s: d(lib).LogNormal(m, s),
            lambda r, sh: _pos(r, sh, 0.2, 3.0),
        ),
        "Laplace": (
            lambda r, b: [r.normal(size=b), _pos(r, b)],
            lambda lib, m, s: d(lib).Laplace(m, s),
            lambda r, sh: r.normal(size=sh),
        ),
        "StudentT": (
            lambda r, b: [_pos(r, b, 2.5, 6.0), r.normal(size=b), _pos(r, b)],
            lambda lib, df, m, s: d(lib).StudentT(df, m, s),
            lambda r, sh: r.normal(size=sh),
        ),
        "Uniform": (
            lambda r, b: [r.uniform(-2, -1, size=b), r.uniform(1, 2, size=b)],
            lambda lib, lo, hi: d(lib).Uniform(lo, hi),
            lambda r, sh: r.uniform(-0.9, 0.9, size=sh),
        ),
        "Exponential": (
            lambda r, b: [_pos(r, b)],
            lambda lib, rate: d(lib).Exponential(rate),
            lambda r, sh: _pos(r, sh, 0.1, 3.0),
        ),
        "Gamma": (
            lambda r, b: [_pos(r, b), _pos(r, b)],
            lambda lib, c, rate: d(lib).Gamma(c, rate),
            lambda r, sh: _pos(r, sh, 0.1, 3.0),
        ),
        "Beta": (
            lambda r, b: [_pos(r, b), _pos(r, b)],
            lambda lib, a, b_: d(lib).Beta(a, b_),
            lambda r, sh: r.uniform(0.05, 0.95, size=sh),
        ),
        "Dirichlet": (
            lambda r, b: [_pos(r, (*b, 3))],
            lambda lib, c: d(lib).Dirichlet(c),
            lambda r, sh: _simplex(r, (*sh, 3)),
        ),
        "Poisson": (
            lambda r, b: [_pos(r, b)],
            lambda lib, rate: d(lib).Poisson(rate),
            lambda r, sh: r.integers(0, 5, size=sh).astype(float),
        ),
        "Bernoulli_probs": (
            lambda r, b: [r.uniform(0.1, 0.9, size=b)],
            lambda lib, p: d(lib).Bernoulli(probs=p),
            lambda r, sh: r.integers(0, 2, size=sh).astype(float),
        ),
        "Bernoulli_logits": (
            lambda r, b: [r.normal(size=b)],
            lambda lib, lg: d(lib).Bernoulli(logits=lg),
            lambda r, sh: r.integers(0, 2, size=sh).astype(float),
        ),
        "Geometric": (
            lambda r, b: [r.uniform(0.1, 0.9, size=b)],
            lambda lib, p: d(lib).Geometric(probs=p),
            lambda r, sh: r.integers(0, 5, size=sh).astype(float),
        ),
        "Binomial": (
            lambda r, b: [r.uniform(0.1, 0.9, size=b)],
            lambda lib, p: d(lib).Binomial(5, probs=p),
            lambda r, sh: r.integers(0, 6, size=sh).astype(float),
        ),
        "Categorical_probs": (
            lambda r, b: [_simplex(r, (*b, 4))],
            lambda lib, p: d(lib).Categorical(probs=p),
            lambda r, sh: r.integers(0, 4, size=sh),
        ),
        "Categorical_logits": (
            lambda r, b: [r.normal(size=(*b, 4))],
            lambda lib, lg: d(lib).Categorical(logits=lg),
            lambda r, sh: r.integers(0, 4, size=sh),
        ),
        "OneHotCategorical": (
            lambda r, b: [_simplex(r, (*b, 4))],
            lambda lib, p: d(lib).OneHotCategorical(probs=p),
            lambda r, sh: np.eye(4)[r.integers(0, 4, size=sh)],
        ),
        "RelaxedBernoulli": (
            lambda r, b: [r.uniform(0.1, 0.9, size=b)],
            lambda lib, p: d(lib).RelaxedBernoulli(lib.tensor(0.7, dtype=lib.float64), probs=p),
            lambda r, sh: r.uniform(0.05, 0.95, size=sh),
        ),
        "RelaxedOneHotCategorical": (
            lambda r, b: [_simplex(r, (*b, 3))],
            lambda lib, p: d(lib).RelaxedOneHotCategorical(
                lib.tensor(0.8, dtype=lib.float64), probs=p
            ),
            lambda r, sh: _simplex(r, (*sh, 3)),
        ),
        "MVN_tril": (
            lambda r, b: [r.normal(size=(*b, 3)), _tril(r, b, 3)],
            lambda lib, m, tril: d(lib).MultivariateNormal(m, scale_tril=tril),
            lambda r, sh: r.normal(size=(*sh, 3)),
        ),
        "MVN_cov": (
            lambda r, b: [r.normal(size=(*b, 3)), _tril(r, b, 3)],
            lambda lib, m, tril: d(lib).MultivariateNormal(
                m, covariance_matrix=tril @ tril.transpose(-1, -2)
            ),
            lambda r, sh: r.normal(size=(*sh, 3)),
        ),
        "Independent_Normal": (
            lambda r, b: [r.normal(size=b), _pos(r, b)],
            lambda lib, m, s: d(lib).Independent(d(lib).Normal(m, s), 1 if m.ndim else 0),
            lambda r, sh: r.normal(size=sh),
        ),
        "Tanh_Normal": (
            lambda r, b: [r.normal(size=b) * 0.3, _pos(r, b, 0.2, 0.8)],
            lambda lib, m, s: d(lib).TransformedDistribution(
                d(lib).Normal(m, s), [d(lib).transforms.TanhTransform()]
            ),
            lambda r, sh: r.uniform(-0.9, 0.9, size=sh),
        ),
        "Affine_Exp_Normal": (
            lambda r, b: [r.normal(size=b) * 0.3, _pos(r, b, 0.2, 0.8)],
            lambda lib, m, s: d(lib).TransformedDistribution(
                d(lib).Normal(m, s),
                [d(lib).transforms.AffineTransform(0.5, 2.0), d(lib).transforms.ExpTransform()],
            ),
            lambda r, sh: _pos(r, sh, 0.2, 4.0),
        ),
        "Sigmoid_Normal": (
            lambda r, b: [r.normal(size=b) * 0.3, _pos(r, b, 0.2, 0.8)],
            lambda lib, m, s: d(lib).TransformedDistribution(
                d(lib).Normal(m, s), d(lib).transforms.SigmoidTransform()
            ),
            lambda r, sh: r.uniform(0.05, 0.95, size=sh),
        ),
    }


FAMILIES = _families()

#: cross-family pairs drawn for kl_divergence one way round: torch registers pairs from
#: Uniform and Beta (to Exponential, Gamma, Beta, Normal, Uniform) that retrograd does not
#: have (it raises NotImplementedError naming the pair), left out.
KL_ONE_WAY = [
    ("Laplace", "Normal"),
    ("Normal", "Laplace"),
    ("Exponential", "Normal"),
    ("Gamma", "Normal"),
    ("Gamma", "Exponential"),
    ("Normal", "Uniform"),
    ("Laplace", "Gamma"),
    ("Exponential", "Beta"),
    ("Gamma", "Uniform"),
]

#: pairs drawn for kl_divergence each way round
KL_PAIRS = [
    ("Normal", "Normal"),
    ("Laplace", "Laplace"),
    ("Gamma", "Gamma"),
    ("Beta", "Beta"),
    ("Dirichlet", "Dirichlet"),
    ("Exponential", "Exponential"),
    ("Poisson", "Poisson"),
    ("Bernoulli_probs", "Bernoulli_logits"),
    ("Geometric", "Geometric"),
    ("Categorical_probs", "Categorical_logits"),
    ("OneHotCategorical", "OneHotCategorical"),
    ("MVN_tril", "MVN_cov"),
    ("Independent_Normal", "Independent_Normal"),
    ("Binomial", "Binomial"),
    ("LogNormal", "LogNormal"),
]

_PROPS = ("mean", "variance", "stddev", "mode")


@gen("distribution")
def _distribution(rng):
    what = _pick(
        rng, "log_prob", "log_prob", "entropy", "moments", "cdf", "kl", "shapes", "validate"
    )
    batch = tuple(int(v) for v in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    if what == "kl":
        pairs = KL_PAIRS + KL_ONE_WAY
        k = int(rng.integers(len(pairs)))
        p_name, q_name = pairs[k]
        if k < len(KL_PAIRS) and rng.random() < 0.5:
            p_name, q_name = q_name, p_name
        p_draw, p_build, _ = FAMILIES[p_name]
        q_draw, q_build, _ = FAMILIES[q_name]
        if "Independent_Normal" in (p_name, q_name):
            batch = batch or (2,)
        pp, qp = p_draw(rng, batch), q_draw(rng, batch)

        def kl(lib):
            ps = [_leaf(lib, a) for a in pp]
            qs = [_leaf(lib, a) for a in qp]
            out = lib.distributions.kl_divergence(p_build(lib, *ps), q_build(lib, *qs))
            return [out, *lib.autograd.grad(out.sum(), ps + qs, allow_unused=True)]

        return Trial(f"kl {p_name} || {q_name} batch={batch}", kl, rtol=1e-7)
    name = _pick(rng, *FAMILIES)
    draw, build, value = FAMILIES[name]
    if name == "Independent_Normal":
        batch = batch or (2,)
    params = draw(rng, batch)
    sample_shape = tuple(int(v) for v in rng.integers(1, 3, size=int(rng.integers(0, 2))))
    v = value(rng, (*sample_shape, *batch))

    def lp(lib):
        ps = [_leaf(lib, a) for a in params]
        dist = build(lib, *ps)
        x = lib.tensor(v, dtype=lib.int64 if v.dtype.kind == "i" else lib.float64)
        if what == "log_prob":
            out = dist.log_prob(x)
        elif what == "entropy":
            out = dist.entropy()
        elif what == "cdf":
            out = dist.cdf(x)
            inv = dist.icdf(out.detach().clamp(0.05, 0.95))
            out = lib.stack([out, inv]) if out.shape == inv.shape else out
        else:
            res = []
            for prop in _PROPS:
                try:
                    res.append(getattr(dist, prop))
                except NotImplementedError:
                    res.append("not implemented")
            tracked = [r for r in res if not isinstance(r, str) and r.requires_grad]
            loss = sum(r.nan_to_num().sum() for r in tracked)
            grads = lib.autograd.grad(loss, ps, allow_unused=True) if tracked else []
            return [*res, *grads]
        return [out, *lib.autograd.grad(out.sum(), ps, allow_unused=True)]

    def shapes(lib):
        ps = [_leaf(lib, a) for a in params]
        dist = build(lib, *ps)
        big = dist.expand((2, *dist.batch_shape))
        x = lib.tensor(v, dtype=lib.int64 if v.dtype.kind == "i" else lib.float64)
        return [
            str(tuple(dist.batch_shape)),
            str(tuple(dist.event_shape)),
            str(tuple(big.batch_shape)),
            str(tuple(big.sample(sample_shape).shape)),
            str(tuple(dist.sample().shape)),
            big.log_prob(x),
            str(big.has_rsample),
        ]

    def validate(lib):
        ps = [_leaf(lib, a) for a in params]
        dist = build(lib, *ps)
        bad = v.astype(float) * 0.0 - 0.5  # -0.5: outside every support drawn but the reals
        return [dist.log_prob(lib.tensor(bad, dtype=lib.float64))]

    fn = {"shapes": shapes, "validate": validate}.get(what, lp)
    return Trial(f"{what} {name} batch={batch} sample={sample_shape}", _refusing(fn), rtol=1e-7)


def _refusing(fn):
    """``fn`` with torch's ``NotImplementedError`` (a method a family lacks) as a result: the
    two must then agree that it is missing."""

    def run(lib):
        try:
            return fn(lib)
        except NotImplementedError:
            return ["not implemented"]

    return run
