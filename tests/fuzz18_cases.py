"""Round 18 of the differential fuzzer against PyTorch: wide argument grids of the spatial
``nn`` layers and functional ops. Each generator takes a ``numpy`` generator and returns a
:class:`fuzz12_cases.Trial` written once against a namespace ``lib`` (``torch`` or
``retrograd``); :func:`fuzz14_cases.check` runs it on both and raises
:class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype, shape or value
(gradients of the input and of every parameter included).

- ``conv``: ``Conv*d``/``ConvTranspose*d`` with per-dim tuples of stride, padding, dilation
  and output padding, ``'same'``/``'valid'``, groups, every padding mode, bias on and off,
  batched and unbatched inputs, inputs read through a channels-last permutation, and
  arguments torch refuses;
- ``pool``: max/avg/lp/adaptive pools 1d-3d with ``ceil_mode``, ``count_include_pad``,
  ``divisor_override``, ``return_indices`` and ``max_unpool``;
- ``resample``: ``interpolate`` in every mode with ``size`` or ``scale_factor``,
  ``align_corners``, ``recompute_scale_factor``, ``antialias``; ``grid_sample`` and
  ``affine_grid``; ``nnf.pad`` modes; ``unfold``/``fold``; ``pixel_shuffle``/``unshuffle``;
- ``losses``: the losses under every reduction with ``weight=``, ``ignore_index=``,
  ``label_smoothing=``, ``pos_weight=``, probability targets and (N, C, d1, d2) shapes;
- ``norm``: BatchNorm/InstanceNorm/GroupNorm/LayerNorm/LocalResponseNorm with
  ``affine``/``track_running_stats``/``momentum=None``, several training steps, then eval:
  outputs, gradients and running statistics.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import numpy as np

from fuzz12_cases import Trial, _leaves, _pick, _run_module
from fuzz14_cases import _weight_fn
from fuzz14_cases import check as _check
from fuzz16_cases import _trial
from fuzz_cases import Mismatch

__all__ = ["GENERATORS", "check"]

#: Left out of the draws (known differences, not defects fixed here):
#: - retrograd refuses integer and bool inputs to the pools and to interpolate with a
#:   DTypeError (float input only); torch computes max/avg/lp pools and some resizes of int64;
#: - ``interpolate(antialias=True)``, ``grid_sample`` of 5-d inputs and its ``'bicubic'``
#:   mode are refused with a named error;
#: - an ``output_padding`` of ``max(stride, dilation)`` or more is accepted (as Burn);
#: - the gradient of an infinite CTC loss without ``zero_infinity``: torch's NaN, retrograd's
#:   zero;
#: - losses of mixed float32 and float64 arguments (torch refuses some, keeps one argument's
#:   dtype in others; retrograd promotes);
#: - where torch has no kernel for a dtype (``"im2col_out_cpu" not implemented for 'Long'``),
#:   retrograd's result is not compared (:func:`check`).
#: Torch bugs kept out: max-pool windows over padding alone (torch's backward writes outside
#: the plane); circular ``F.pad`` with crops beyond the cropped size and reflect/replicate
#: ``F.pad`` backward of an empty result (both uninitialized values).

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _per_dim(rng, dim, *values):
    """One value or a tuple of ``dim`` of them (or of one: torch repeats it in some ops,
    refuses it in others)."""
    if rng.random() < 0.5:
        return _pick(rng, *values)
    if rng.random() < 0.1:
        return (_pick(rng, *values),)
    return tuple(_pick(rng, *values) for _ in range(dim))


def _module_trial(name, shape, build, call, rng, layout="plain"):
    """A module trial (the input read through ``layout``: a channels-last permutation)."""
    xa = rng.standard_normal(shape)
    state: dict = {}

    def call2(lib, m, x):
        if layout == "channels_last" and x.dim() >= 3:
            perm = (0, *range(2, x.dim()), 1)
            inv = (0, x.dim() - 1, *range(1, x.dim() - 1))
            x = x.permute(*perm).contiguous().permute(*inv)
        return call(lib, m, x)

    return Trial(f"{name} {layout}", lambda lib: _run_module(lib, build, call2, xa, state), 1e-7)


def _dtype(rng, ints=True):
    """Mostly float64; float32 (compared at float32's tolerance), int64 or bool sometimes:
    raising or not must agree with torch too."""
    kinds = ["float64"] * 14 + ["float32"] * 3 + (["int64", "bool"] if ints else [])
    return str(_pick(rng, *kinds))


def _input(lib, array, dtype):
    if dtype == "int64":
        array = np.round(array * 3)
    elif dtype == "bool":
        array = array > 0
    x = lib.tensor(array, dtype=getattr(lib, dtype))
    return x.requires_grad_(True) if dtype.startswith("float") else x


def check(trial: Trial) -> None:
    """:func:`fuzz14_cases.check`, less torch's missing kernels for a dtype (its
    ``NotImplementedError: "..." not implemented for 'Long'``), where retrograd may compute."""
    try:
        _check(trial)
    except Mismatch as e:
        if "torch raises NotImplementedError" in str(e) and "not implemented for" in str(e):
            return
        raise


# ---- convolutions --------------------------------------------------------------------------


@gen("conv")
def _conv(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    dim = int(c(1, 2, 3))
    transpose = rng.random() < 0.4
    groups = int(c(1, 1, 2, 3))
    cin = groups * int(c(1, 2)) + (1 if rng.random() < 0.05 else 0)
    cout = groups * int(c(1, 2)) + (1 if rng.random() < 0.05 else 0)
    k = _per_dim(rng, dim, 1, 2, 3)
    stride = _per_dim(rng, dim, 1, 2, 3)
    dilation = _per_dim(rng, dim, 1, 2)
    bias = bool(c(True, False))
    if transpose:
        pad = _per_dim(rng, dim, 0, 1, 2)
        args = dict(stride=stride, padding=pad, dilation=dilation, groups=groups, bias=bias)
        # (an output_padding of max(stride, dilation) or more is accepted on purpose, as Burn
        # does: functional/conv.py; torch refuses it. Left out of the draws.)
        strides, dils = (
            (v * dim if len(v) == 1 else v) if isinstance(v, tuple) else (v,) * dim
            for v in (stride, dilation)
        )
        args["output_padding"] = tuple(int(rng.integers(max(s, d))) for s, d in zip(strides, dils))
        build = lambda nn: getattr(nn, f"ConvTranspose{dim}d")(cin, cout, k, **args)  # noqa: E731
    else:
        pad = c("same", "valid", 0, 1, 2, "tuple")
        if pad == "tuple":
            pad = tuple(int(c(0, 1, 2)) for _ in range(dim))
        args = dict(stride=stride, padding=pad, dilation=dilation, groups=groups, bias=bias)
        args["padding_mode"] = c("zeros", "reflect", "replicate", "circular")
        # torch's module zips a one-entry dilation with the kernel size when it pads 'same'
        # with a mode: one dimension padded, the wrong one (a torch bug, kept out)
        one = isinstance(dilation, tuple) and len(dilation) == 1
        if pad == "same" and args["padding_mode"] != "zeros" and one:
            args["dilation"] = dilation = dilation * dim
        build = lambda nn: getattr(nn, f"Conv{dim}d")(cin, cout, k, **args)  # noqa: E731
    batched = rng.random() < 0.8
    spatial = tuple(int(c(1, 2, 3, 5)) for _ in range(dim))
    # (an empty batch: torch skips its check that a transposed convolution's output is not
    # empty, which it makes for any other batch; kept out)
    batch = int(c(1, 2)) if transpose else int(c(0, 1, 1, 1, 2, 2, 2))
    shape = ((batch,) if batched else ()) + (cin,) + spatial
    layout = c("plain", "plain", "channels_last") if batched else "plain"
    name = f"{'ConvTranspose' if transpose else 'Conv'}{dim}d {cin}->{cout} k={k} {args}"
    return _module_trial(
        f"{name} x={list(shape)}", shape, build, lambda lib, m, x: m(x), rng, layout
    )


# ---- pooling -------------------------------------------------------------------------------


def _every_window_real(spatial, k, stride, pad, dil, ceil):
    """Whether every max-pool window holds a cell of the input (torch's output sizes)."""
    dim = len(spatial)
    each = [v if isinstance(v, tuple) else (v,) * dim for v in (k, stride or k, pad, dil)]
    for length, kk, s, p, d in zip(spatial, *each):
        span = length + 2 * p - d * (kk - 1) - 1
        if span < 0:
            continue  # (torch refuses it)
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= length + p:
            out -= 1
        for o in range(out):
            start = o * s - p
            if not any(0 <= start + j * d < length for j in range(kk)):
                return False
    return True


@gen("pool")
def _pool(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    dim = int(c(1, 2, 3))
    kind = str(c("max", "max", "avg", "avg", "lp", "adaptive_max", "adaptive_avg"))
    batched = rng.random() < 0.8
    spatial = tuple(int(c(1, 2, 3, 4, 5, 7)) for _ in range(dim))
    shape = ((int(c(0, 1, 1, 1, 2, 2, 2)),) if batched else ()) + (int(c(1, 2)),) + spatial
    k = _per_dim(rng, dim, 1, 2, 3)
    stride = c(None, *([_per_dim(rng, dim, 1, 2, 3)] * 3))
    pad = _per_dim(rng, dim, 0, 0, 1, 2)
    ceil = bool(c(False, True))
    weight = _weight_fn(rng)
    dtype = _dtype(rng, ints=False)  # (integer pools are refused: above)
    xa = rng.permutation(int(np.prod(shape))).reshape(shape) * 0.25 - 1.0  # no ties

    if kind == "max":
        dil = _per_dim(rng, dim, 1, 1, 2)
        if not _every_window_real(spatial, k, stride, pad, dil, ceil):
            # a window over padding alone (dilation, ceil_mode): torch's index points outside
            # the plane, and its backward writes there (heap corruption, a crash): a torch
            # bug, kept out (retrograd's test: test_fuzz18_regressions.py)
            dil = 1
        indices = bool(c(False, True))
        unpool = indices and rng.random() < 0.6
        with_size = bool(c(False, True))  # max_unpool's output_size: the input's
        args = dict(stride=stride, padding=pad, dilation=dil, ceil_mode=ceil)

        def op(lib, x):
            nnf = lib.nn.functional
            out = getattr(nnf, f"max_pool{dim}d")(x, k, return_indices=indices, **args)
            if not indices:
                return [out]
            y, i = out
            if not unpool:
                return [y, i]
            size = x.shape[-dim:] if with_size else None
            # (torch's max_unpool indexes a one-entry kernel, stride or padding by
            # dimension: an IndexError or a refused output_size, a torch bug; given one
            # entry per dimension here)
            full = [
                v * dim if isinstance(v, tuple) and len(v) == 1 else v for v in (k, stride, pad)
            ]
            u = getattr(nnf, f"max_unpool{dim}d")(y, i, *full, output_size=size)
            return [y, i, u]

        name = f"max_pool{dim}d k={k} {args} indices={indices} unpool={unpool}/{with_size}"
    elif kind == "avg":
        cip = bool(c(True, False))
        div = c(None, None, 1, 2, 3)
        args = dict(stride=stride, padding=pad, ceil_mode=ceil, count_include_pad=cip)
        if dim > 1:
            args["divisor_override"] = div

        def op(lib, x):
            return [getattr(lib.nn.functional, f"avg_pool{dim}d")(x, k, **args)]

        name = f"avg_pool{dim}d k={k} {args}"
    elif kind == "lp":
        dim = min(dim, 2) if rng.random() < 0.7 else dim
        shape = shape[: len(shape) - len(spatial)] + spatial[:dim]
        xa = xa.reshape(-1)[: int(np.prod(shape))].reshape(shape)
        xa = np.abs(xa) + 0.5  # (torch's lp_pool of a negative sum is NaN either way)
        p = c(1.0, 2.0, 3.0)
        kk = k if isinstance(k, int) else k[0]

        def op(lib, x):
            return [getattr(lib.nn.functional, f"lp_pool{dim}d")(x, p, kk, None, ceil)]

        name = f"lp_pool{dim}d p={p} k={kk} ceil={ceil}"
    else:
        size = _per_dim(rng, dim, 1, 2, 3, 4, None)
        if size is None or (isinstance(size, tuple) and all(s is None for s in size)):
            size = 2
        indices = kind == "adaptive_max" and bool(c(False, True))

        def op(lib, x):
            nnf = lib.nn.functional
            if kind == "adaptive_max":
                out = getattr(nnf, f"adaptive_max_pool{dim}d")(x, size, return_indices=indices)
                return out if indices else [out]
            return [getattr(nnf, f"adaptive_avg_pool{dim}d")(x, size)]

        name = f"{kind}_pool{dim}d size={size} indices={indices}"

    def body(lib):
        x = _input(lib, xa, dtype)
        return _leaves(op(lib, x)), [x]

    second = dtype == "float64" and rng.random() < 0.3
    return _trial(f"{name} x={dtype}{list(xa.shape)} second={second}", body, weight, 1e-7, second)


# ---- resampling: interpolate, grid_sample, pad, fold, pixel shuffle --------------------------

#: the interpolate modes by the spatial rank they take
MODES = {
    1: ("nearest", "nearest-exact", "linear", "area"),
    2: ("nearest", "nearest-exact", "bilinear", "bicubic", "area"),
    3: ("nearest", "nearest-exact", "trilinear", "area"),
}


def _interpolate(rng, c):
    dim = int(c(1, 2, 3))
    mode = str(c(*MODES[dim]))
    spatial = tuple(int(c(1, 2, 3, 5)) for _ in range(dim))
    shape = (int(c(1, 2)), int(c(1, 2))) + spatial
    args: dict = {"mode": mode}
    if rng.random() < 0.5:
        args["size"] = _per_dim(rng, dim, 1, 2, 3, 4, 7)
    else:
        args["scale_factor"] = _per_dim(rng, dim, 0.5, 1.0, 1.5, 2.0, 2.7, 3.0)
        if rng.random() < 0.5:
            args["recompute_scale_factor"] = bool(c(True, False))
    if mode in ("linear", "bilinear", "bicubic", "trilinear"):
        args["align_corners"] = c(None, True, False)
    # (antialias=True is refused with an InvalidArgumentError: not drawn)
    if rng.random() < 0.05:  # both or neither: torch refuses
        args["size"], args["scale_factor"] = 2, 2.0
    if rng.random() < 0.08:  # an input of another rank than the mode's (torch refuses most)
        shape = shape[:-1] if rng.random() < 0.5 else shape + (2,)
    module = rng.random() < 0.25

    def op(lib, x):
        if not module:
            return lib.nn.functional.interpolate(x, **args)
        if mode == "nearest" and dim == 2 and "size" in args and rng_alias:
            return lib.nn.UpsamplingNearest2d(size=args["size"])(x)
        if mode == "bilinear" and "scale_factor" in args and rng_alias:
            return lib.nn.UpsamplingBilinear2d(scale_factor=args["scale_factor"])(x)
        kw = {k: v for k, v in args.items() if k != "antialias"}
        return lib.nn.Upsample(**kw)(x)

    rng_alias = bool(rng.random() < 0.5)
    return f"interpolate {args} module={module} alias={rng_alias}", shape, op


def _grid_sample(rng, c):
    # (5-d inputs and mode='bicubic' are refused with a named error: not drawn)
    dim = 2
    mode = str(c("bilinear", "nearest"))
    pmode = str(c("zeros", "border", "reflection"))
    align = bool(c(True, False))
    n, ch = int(c(1, 2)), int(c(1, 2))
    spatial = tuple(int(c(1, 2, 3, 4)) for _ in range(dim))
    out = tuple(int(c(1, 2, 3)) for _ in range(dim))
    theta = rng.uniform(-1.2, 1.2, size=(n, dim, dim + 1))
    # (grid points away from the cell borders nearest ties; torch's pick there is its kernel's)
    gshape = (n, *out, dim)
    grid = rng.uniform(-1.3, 1.3, size=gshape)

    def fn(lib, x):
        nnf = lib.nn.functional
        t = lib.tensor(theta, requires_grad=True)
        g = lib.tensor(grid, requires_grad=mode != "nearest")
        if rng_affine:
            g = nnf.affine_grid(t, [n, ch, *out], align_corners=align)
            if mode == "nearest":
                g = g.detach()
        return [g, nnf.grid_sample(x, g, mode=mode, padding_mode=pmode, align_corners=align)]

    rng_affine = bool(rng.random() < 0.4) and mode != "nearest"
    name = f"grid_sample mode={mode} padding={pmode} align={align} affine={rng_affine}"
    return name, (n, ch) + spatial, fn


def _pad(rng, c):
    mode = str(c("constant", "reflect", "replicate", "circular"))
    nd = int(c(1, 2, 3))
    rank = nd + int(c(1, 2)) if mode != "constant" else int(c(1, 2, 3, 4))
    shape = tuple(int(c(1, 2, 3, 4)) for _ in range(rank))
    npairs = nd if mode != "constant" else int(rng.integers(1, rank + 1))
    pads = tuple(int(c(-1, 0, 1, 2, 3)) for _ in range(2 * npairs))
    if mode == "circular":
        # torch checks a circular padding against the size before the crops and then reads
        # memory it never wrote (garbage values) where it exceeds the size after them; a
        # torch bug, kept out: no crops with circular padding
        pads = tuple(max(p, 0) for p in pads)
    sizes = [shape[-1 - i // 2] for i in range(len(pads))]
    out = [n + pads[2 * i] + pads[2 * i + 1] for i, n in enumerate(sizes[::2])]
    if mode != "constant" and min(out) <= 0:
        # torch's reflect/replicate backward of an empty result leaves the gradient
        # uninitialized (garbage values): a torch bug, kept out
        pads = tuple(max(p, 0) for p in pads)
    value = c(None, 0.5) if mode == "constant" else None
    kw = {} if value is None else {"value": value}
    return (
        f"pad {pads} mode={mode} {kw}",
        shape,
        lambda lib, x: lib.nn.functional.pad(x, pads, mode=mode, **kw),
    )


def _fold(rng, c):
    k = _per_dim(rng, 2, 1, 2, 3)
    d = _per_dim(rng, 2, 1, 2)
    p = _per_dim(rng, 2, 0, 1)
    s = _per_dim(rng, 2, 1, 2)
    args = dict(kernel_size=k, dilation=d, padding=p, stride=s)
    spatial = (int(c(2, 3, 4, 5)), int(c(2, 3, 4, 5)))
    batched = rng.random() < 0.8
    ch = int(c(1, 2))
    if rng.random() < 0.5:
        shape = ((int(c(1, 2)),) if batched else ()) + (ch,) + spatial
        return f"unfold {args}", shape, lambda lib, x: lib.nn.functional.unfold(x, **args)

    def pair(v):
        return (v * 2 if len(v) == 1 else v) if isinstance(v, tuple) else (v, v)

    kk, dd, pp, ss = pair(k), pair(d), pair(p), pair(s)
    blocks = 1
    for n, a, b, e, f in zip(spatial, kk, dd, pp, ss):
        blocks *= max((n + 2 * e - b * (a - 1) - 1) // f + 1, 0)
    blocks += 1 if rng.random() < 0.05 else 0
    shape = ((int(c(1, 2)),) if batched else ()) + (ch * kk[0] * kk[1], blocks)
    return (
        f"fold output={spatial} {args}",
        shape,
        lambda lib, x: lib.nn.functional.fold(x, spatial, **args),
    )


def _shuffle(rng, c):
    r = int(c(1, 2, 3))
    lead = tuple(int(c(1, 2)) for _ in range(int(c(0, 1, 2))))
    if rng.random() < 0.5:
        shape = (
            lead
            + (int(c(1, 2)) * r * r + (1 if rng.random() < 0.05 else 0),)
            + (
                int(c(1, 2)),
                int(c(1, 3)),
            )
        )
        return f"pixel_shuffle r={r}", shape, lambda lib, x: lib.nn.functional.pixel_shuffle(x, r)
    shape = lead + (
        int(c(1, 2)),
        int(c(1, 2)) * r,
        int(c(1, 2)) * r + (1 if rng.random() < 0.05 else 0),
    )
    return f"pixel_unshuffle r={r}", shape, lambda lib, x: lib.nn.functional.pixel_unshuffle(x, r)


@gen("resample")
def _resample(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    kind = str(c("interpolate", "interpolate", "grid_sample", "pad", "fold", "shuffle"))
    name, shape, op = {
        "interpolate": _interpolate,
        "grid_sample": _grid_sample,
        "pad": _pad,
        "fold": _fold,
        "shuffle": _shuffle,
    }[kind](rng, c)
    xa = rng.standard_normal(shape)
    weight = _weight_fn(rng)
    dtype = _dtype(rng)
    if kind in ("interpolate", "grid_sample") and not dtype.startswith("float"):
        dtype = "float64"  # (integer resampling is refused: above)

    def body(lib):
        x = _input(lib, xa, dtype)
        return _leaves(op(lib, x)), [x]

    second = dtype == "float64" and rng.random() < 0.3
    return _trial(f"{name} x={dtype}{list(shape)} second={second}", body, weight, 1e-7, second)


# ---- losses --------------------------------------------------------------------------------

REDUCTIONS = ("mean", "sum", "none")


def _loss_case(rng, c):
    """(name, [(input array, differentiable)], fn(lib, *tensors))."""
    kind = str(
        c(
            "cross_entropy",
            "cross_entropy",
            "nll",
            "bce",
            "bce_logits",
            "kl_div",
            "huber",
            "smooth_l1",
            "margin_ranking",
            "triplet",
            "cosine_embedding",
            "hinge_embedding",
            "poisson_nll",
            "gaussian_nll",
            "multilabel_margin",
            "multilabel_soft_margin",
            "multi_margin",
            "soft_margin",
            "ctc",
        )
    )
    red = str(c(*REDUCTIONS))
    n, ch = int(c(1, 2, 3)), int(c(2, 3, 4))
    extra = tuple(int(c(1, 2, 3)) for _ in range(int(c(0, 0, 1, 2))))
    u = lambda *s: rng.uniform(-2, 2, size=s)  # noqa: E731
    if kind in ("cross_entropy", "nll"):
        batched = rng.random() < 0.85
        shape = ((n,) if batched else ()) + (ch,) + (extra if batched else ())
        tshape = ((n,) if batched else ()) + (extra if batched else ())
        kw: dict = {"reduction": red}
        if rng.random() < 0.5:
            kw["ignore_index"] = int(c(-100, 0, 1))
        weight = rng.uniform(0.2, 2.0, size=ch) if rng.random() < 0.5 else None
        probs = kind == "cross_entropy" and rng.random() < 0.35
        if kind == "cross_entropy" and rng.random() < 0.5:
            kw["label_smoothing"] = float(c(0.0, 0.1, 0.3))
        if probs:
            target = rng.dirichlet(np.ones(ch), size=int(np.prod(tshape, dtype=int)))
            target = np.moveaxis(target.reshape(*tshape, ch), -1, 1 if batched else 0)
        else:
            target = rng.integers(0, ch, size=tshape)
            if "ignore_index" in kw and target.size:
                flat = target.reshape(-1)
                flat[rng.random(flat.size) < 0.3] = kw["ignore_index"]
        # (cross_entropy's mean over targets that are all ignored is NaN in both)
        arrays = [(u(*shape), True), (target, probs)]
        if weight is not None:
            arrays.append((weight, False))

        def fn(lib, x, t, w=None):
            nnf = lib.nn.functional
            if kind == "nll":
                return nnf.nll_loss(nnf.log_softmax(x, 1 if x.dim() > 1 else 0), t, w, **kw)
            return nnf.cross_entropy(x, t, w, **kw)

        return f"{kind} {kw} weight={weight is not None} probs={probs}", arrays, fn
    shape = (n, ch) + extra
    if kind in ("bce", "bce_logits"):
        x = rng.uniform(0.05, 0.95, size=shape) if kind == "bce" else u(*shape)
        y = rng.uniform(0, 1, size=shape) if rng.random() < 0.5 else rng.integers(0, 2, shape)
        arrays = [(x, True), (y.astype(float), rng.random() < 0.3)]
        wshape = c(None, shape, shape[-1:], (1,) * len(shape))
        if wshape is not None:
            arrays.append((rng.uniform(0.1, 2.0, size=wshape), False))
        pshape = c(None, shape[-1:]) if kind == "bce_logits" else None
        if pshape is not None:
            if wshape is None:
                arrays.append((np.ones(1), False))
            arrays.append((rng.uniform(0.2, 3.0, size=pshape), False))

        def fn(lib, x, y, w=None, pw=None):
            nnf = lib.nn.functional
            if kind == "bce":
                return nnf.binary_cross_entropy(x, y, w, reduction=red)
            w = None if wshape is None else w
            return nnf.binary_cross_entropy_with_logits(x, y, w, reduction=red, pos_weight=pw)

        return f"{kind} red={red} weight={wshape} pos_weight={pshape}", arrays, fn
    if kind == "kl_div":
        log_target = bool(c(True, False))
        t = rng.uniform(0.05, 1.0, size=shape)
        t = np.log(t) if log_target else t
        red = str(c(*REDUCTIONS, "batchmean"))
        arrays = [(np.log(rng.uniform(0.05, 1, size=shape)), True), (t, True)]

        def fn(lib, x, t):
            return lib.nn.functional.kl_div(x, t, reduction=red, log_target=log_target)

        return f"kl_div red={red} log_target={log_target}", arrays, fn
    if kind in ("huber", "smooth_l1"):
        par = float(c(0.0, 0.5, 1.0, 2.0)) if kind == "smooth_l1" else float(c(0.5, 1.0, 2.0))
        arrays = [(u(*shape), True), (u(*shape), True)]

        def fn(lib, x, y):
            nnf = lib.nn.functional
            if kind == "huber":
                return nnf.huber_loss(x, y, reduction=red, delta=par)
            return nnf.smooth_l1_loss(x, y, reduction=red, beta=par)

        return f"{kind} red={red} par={par}", arrays, fn
    if kind == "margin_ranking":
        margin = float(c(0.0, 0.5))
        y = rng.choice([-1.0, 1.0], size=(n,))
        arrays = [(u(n), True), (u(n), True), (y, False)]
        return (
            f"margin_ranking red={red} margin={margin}",
            arrays,
            lambda lib, a, b, y: lib.nn.functional.margin_ranking_loss(
                a, b, y, margin=margin, reduction=red
            ),
        )
    if kind == "triplet":
        kw = dict(margin=float(c(0.5, 1.0)), p=float(c(1.0, 2.0)), swap=bool(c(True, False)))
        d = (n, ch) if rng.random() < 0.8 else (ch,)
        arrays = [(u(*d), True), (u(*d), True), (u(*d), True)]
        return (
            f"triplet red={red} {kw} {d}",
            arrays,
            lambda lib, a, p, ng: lib.nn.functional.triplet_margin_loss(
                a, p, ng, reduction=red, **kw
            ),
        )
    if kind == "cosine_embedding":
        margin = float(c(0.0, 0.3, -0.2))
        arrays = [(u(n, ch), True), (u(n, ch), True), (rng.choice([-1.0, 1.0], size=n), False)]
        return (
            f"cosine_embedding red={red} margin={margin}",
            arrays,
            lambda lib, a, b, y: lib.nn.functional.cosine_embedding_loss(
                a, b, y, margin=margin, reduction=red
            ),
        )
    if kind == "hinge_embedding":
        margin = float(c(0.5, 1.0))
        arrays = [(u(*shape), True), (rng.choice([-1.0, 1.0], size=shape), False)]
        return (
            f"hinge_embedding red={red} margin={margin}",
            arrays,
            lambda lib, x, y: lib.nn.functional.hinge_embedding_loss(
                x, y, margin=margin, reduction=red
            ),
        )
    if kind == "poisson_nll":
        kw = dict(log_input=bool(c(True, False)), full=bool(c(True, False)))
        x = u(*shape) if kw["log_input"] else rng.uniform(0.1, 3, size=shape)
        y = rng.integers(0, 5, size=shape).astype(float)
        arrays = [(x, True), (y, True)]
        return (
            f"poisson_nll red={red} {kw}",
            arrays,
            lambda lib, x, y: lib.nn.functional.poisson_nll_loss(x, y, reduction=red, **kw),
        )
    if kind == "gaussian_nll":
        full = bool(c(True, False))
        vshape = c(shape, shape[:-1] + (1,), shape[:-1])
        arrays = [(u(*shape), True), (u(*shape), True), (rng.uniform(0.1, 2, vshape), True)]
        return (
            f"gaussian_nll red={red} full={full} var={vshape}",
            arrays,
            lambda lib, x, y, v: lib.nn.functional.gaussian_nll_loss(
                x, y, v, full=full, reduction=red
            ),
        )
    if kind == "multilabel_margin":
        t = np.full((n, ch), -1)
        for row in t:
            k = int(rng.integers(0, ch + 1))
            row[:k] = rng.permutation(ch)[:k]
        return (
            f"multilabel_margin red={red}",
            [(u(n, ch), True), (t, False)],
            lambda lib, x, t: lib.nn.functional.multilabel_margin_loss(x, t, reduction=red),
        )
    if kind == "multilabel_soft_margin":
        w = rng.uniform(0.2, 2, size=ch) if rng.random() < 0.5 else None
        arrays = [(u(n, ch), True), (rng.integers(0, 2, (n, ch)).astype(float), False)]
        arrays += [(w, False)] if w is not None else []
        return (
            f"multilabel_soft_margin red={red} weight={w is not None}",
            arrays,
            lambda lib, x, t, w=None: lib.nn.functional.multilabel_soft_margin_loss(
                x, t, weight=w, reduction=red
            ),
        )
    if kind == "multi_margin":
        kw = dict(p=int(c(1, 2)), margin=float(c(0.5, 1.0)))
        w = rng.uniform(0.2, 2, size=ch) if rng.random() < 0.5 else None
        arrays = [(u(n, ch), True), (rng.integers(0, ch, n), False)]
        arrays += [(w, False)] if w is not None else []
        return (
            f"multi_margin red={red} {kw} weight={w is not None}",
            arrays,
            lambda lib, x, t, w=None: lib.nn.functional.multi_margin_loss(
                x, t, weight=w, reduction=red, **kw
            ),
        )
    if kind == "soft_margin":
        arrays = [(u(*shape), True), (rng.choice([-1.0, 1.0], size=shape), False)]
        return (
            f"soft_margin red={red}",
            arrays,
            lambda lib, x, y: lib.nn.functional.soft_margin_loss(x, y, reduction=red),
        )
    # ctc: log-probabilities [T, N, C] (or [T, C] unbatched), targets padded or concatenated
    steps = int(c(3, 4, 6))
    blank = int(c(0, ch - 1))
    zero_inf = bool(c(True, False))
    lengths = rng.integers(0, 3, size=n)
    labels = [x for x in range(ch) if x != blank]
    targets = rng.choice(labels, size=(n, 2))
    concat = rng.random() < 0.4
    tin = np.concatenate([t[:k] for t, k in zip(targets, lengths)]) if concat else targets
    in_len = rng.integers(1, steps + 1, size=n)
    in_len[0] = steps
    if not zero_inf:
        # (an impossible alignment's infinite loss: torch's gradient is NaN over that
        # sequence's frames, retrograd's zero. Drawn only with zero_infinity.)
        in_len[:] = steps
    arrays = [(u(steps, n, ch), True), (tin.astype(np.int64), False)]
    arrays += [(in_len, False), (lengths, False)]

    def fn(lib, x, t, il, tl):
        lp = lib.nn.functional.log_softmax(x, 2)
        return lib.nn.functional.ctc_loss(
            lp, t, il, tl, blank=blank, reduction=red, zero_infinity=zero_inf
        )

    return f"ctc red={red} blank={blank} zero_inf={zero_inf} concat={concat}", arrays, fn


@gen("losses")
def _losses(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    name, arrays, fn = _loss_case(rng, c)
    weight = _weight_fn(rng)
    # float32 for every float argument, sometimes (mixed float32 and float64 arguments are
    # left out: torch refuses some, keeps one argument's dtype in others, promotes in the
    # rest, where retrograd promotes throughout)
    f32 = [rng.random() < 0.2] * len(arrays)

    def body(lib):
        tensors = []
        for (a, grad), low in zip(arrays, f32):
            a = np.asarray(a)
            floating = a.dtype.kind == "f"
            dtype = lib.float32 if low and floating else None
            tensors.append(lib.tensor(a, dtype=dtype, requires_grad=grad and floating))
        return [fn(lib, *tensors)], [t for t in tensors if t.requires_grad]

    # (torch has no second derivative of ctc, multi_margin and multilabel_margin losses)
    once = name.startswith(("ctc", "multi_margin", "multilabel_margin "))
    second = not f32[0] and not once and rng.random() < 0.3
    return _trial(f"{name} float32={f32[0]} second={second}", body, weight, 1e-7, second)


# ---- normalization layers ------------------------------------------------------------------


@gen("norm")
def _norm(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    kind = str(c("batch", "batch", "instance", "instance", "group", "layer", "lrn"))
    dim = int(c(1, 2, 3))
    ch = int(c(1, 2, 4))
    n = int(c(0, 1, 2, 2, 3, 3))
    spatial = tuple(int(c(1, 2, 3)) for _ in range(dim))
    if kind == "batch" and dim == 1 and rng.random() < 0.4:
        spatial = ()  # BatchNorm1d over [N, C]
    shape = (n, ch) + spatial
    kw: dict = {}
    if kind in ("batch", "instance"):
        kw = dict(
            eps=float(c(1e-5, 1e-3)),
            momentum=c(0.1, 0.5, None),
            affine=bool(c(True, False)),
            track_running_stats=bool(c(True, False)),
        )
        cls = f"{kind.capitalize()}Norm{dim}d"
        if kind == "instance" and n == 0:
            # torch bugs on an empty batch, kept out: with affine=True its instance_norm
            # fails inside (IndexError from select()); with running statistics it writes NaN
            # into them, where its BatchNorm (and retrograd's InstanceNorm) leaves them
            kw["affine"] = kw["track_running_stats"] = False
        if kind == "instance" and rng.random() < 0.3:
            shape = shape[1:]  # unbatched
        build = lambda nn: getattr(nn, cls)(ch, **kw)  # noqa: E731
    elif kind == "group":
        groups = int(c(*[g for g in (1, 2, 4) if ch % g == 0]))
        kw = dict(affine=bool(c(True, False)), eps=float(c(1e-5, 1e-3)))
        cls = f"GroupNorm({groups}, {ch})"
        build = lambda nn: nn.GroupNorm(groups, ch, **kw)  # noqa: E731
    elif kind == "layer":
        k = int(rng.integers(1, len(shape) + 1))
        norm = shape[-k:]
        kw = dict(elementwise_affine=bool(c(True, False)), bias=bool(c(True, False)))
        cls = f"LayerNorm({norm})"
        build = lambda nn: nn.LayerNorm(norm, **kw)  # noqa: E731
    else:
        kw = dict(size=int(c(1, 2, 3, 5)), alpha=float(c(1e-4, 0.5)), beta=0.75, k=float(c(1, 2)))
        cls = "LocalResponseNorm"
        build = lambda nn: nn.LocalResponseNorm(**kw)  # noqa: E731
    steps = int(c(1, 2, 3))
    evaluate = bool(c(True, False))
    # one channel too many: an error in torch (but not on an empty batch, where torch's
    # batch_norm returns before any check: kept out)
    if rng.random() < 0.05 and kind != "lrn" and n:
        shape = shape[:-1] + (shape[-1] + 1,) if kind == "layer" else shape
        shape = (shape[0], shape[1] + 1, *shape[2:]) if kind != "layer" else shape
    xs = [rng.standard_normal(shape) * 2 + 0.5 for _ in range(steps)]
    state: dict = {}

    def call(lib, m, x):
        # several training steps (running statistics move), then the drawn input, in eval
        # mode or not, and the buffers
        for a in xs[1:]:
            m(lib.tensor(a))
        if evaluate:
            m.eval()
        out = m(x)
        buffers = [b for _, b in sorted(m.named_buffers())]
        return [out, *[b.double() if b.dtype.is_floating_point else b for b in buffers]]

    def fn(lib):
        return _run_module(lib, build, call, xs[0], state)

    return Trial(f"{cls} {kw} x={list(shape)} steps={steps} eval={evaluate}", fn, rtol=1e-7)
