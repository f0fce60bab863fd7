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
from fuzz14_cases import check as check
from fuzz16_cases import _trial

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _per_dim(rng, dim, *values):
    """One value or a tuple of ``dim`` of them."""
    if rng.random() < 0.5:
        return _pick(rng, *values)
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
        strides = stride if isinstance(stride, tuple) else (stride,) * dim
        dils = dilation if isinstance(dilation, tuple) else (dilation,) * dim
        args["output_padding"] = tuple(int(rng.integers(max(s, d))) for s, d in zip(strides, dils))
        build = lambda nn: getattr(nn, f"ConvTranspose{dim}d")(cin, cout, k, **args)  # noqa: E731
    else:
        pad = c("same", "valid", 0, 1, 2, "tuple")
        if pad == "tuple":
            pad = tuple(int(c(0, 1, 2)) for _ in range(dim))
        args = dict(stride=stride, padding=pad, dilation=dilation, groups=groups, bias=bias)
        args["padding_mode"] = c("zeros", "reflect", "replicate", "circular")
        build = lambda nn: getattr(nn, f"Conv{dim}d")(cin, cout, k, **args)  # noqa: E731
    batched = rng.random() < 0.8
    spatial = tuple(int(c(1, 2, 3, 5)) for _ in range(dim))
    shape = ((int(c(1, 2)),) if batched else ()) + (cin,) + spatial
    layout = c("plain", "plain", "channels_last") if batched else "plain"
    name = f"{'ConvTranspose' if transpose else 'Conv'}{dim}d {cin}->{cout} k={k} {args}"
    return _module_trial(
        f"{name} x={list(shape)}", shape, build, lambda lib, m, x: m(x), rng, layout
    )


# ---- pooling -------------------------------------------------------------------------------


@gen("pool")
def _pool(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    dim = int(c(1, 2, 3))
    kind = str(c("max", "max", "avg", "avg", "lp", "adaptive_max", "adaptive_avg"))
    batched = rng.random() < 0.8
    spatial = tuple(int(c(1, 2, 3, 4, 5, 7)) for _ in range(dim))
    shape = ((int(c(1, 2)),) if batched else ()) + (int(c(1, 2)),) + spatial
    k = _per_dim(rng, dim, 1, 2, 3)
    stride = c(None, *([_per_dim(rng, dim, 1, 2, 3)] * 3))
    pad = _per_dim(rng, dim, 0, 0, 1, 2)
    ceil = bool(c(False, True))
    weight = _weight_fn(rng)
    xa = rng.permutation(int(np.prod(shape))).reshape(shape) * 0.25 - 1.0  # no ties

    if kind == "max":
        dil = _per_dim(rng, dim, 1, 1, 2)
        indices = bool(c(False, True))
        unpool = indices and rng.random() < 0.6
        args = dict(stride=stride, padding=pad, dilation=dil, ceil_mode=ceil)

        def op(lib, x):
            nnf = lib.nn.functional
            out = getattr(nnf, f"max_pool{dim}d")(x, k, return_indices=indices, **args)
            if not indices:
                return [out]
            y, i = out
            if bool((y == float("-inf")).any()):
                # a window over padding alone (dilation, ceil_mode): torch's index is its
                # kernel's start, outside the input along an axis; retrograd's the window's
                # first cell clipped into the input, where each sends its gradient. Neither
                # compared, and not unpooled.
                hole = y == float("-inf")
                return [lib.where(hole, 0.0, y), lib.where(hole, -1, i)]
            if not unpool:
                return [y, i]
            u = getattr(nnf, f"max_unpool{dim}d")(y, i, k, stride=stride, padding=pad)
            return [y, i, u]

        name = f"max_pool{dim}d k={k} {args} indices={indices} unpool={unpool}"
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
        x = lib.tensor(xa, requires_grad=True)
        return _leaves(op(lib, x)), [x]

    return _trial(f"{name} x={list(xa.shape)}", body, weight, rtol=1e-7)


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
    return f"interpolate {args}", shape, lambda lib, x: lib.nn.functional.interpolate(x, **args)


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
        return v if isinstance(v, tuple) else (v, v)

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

    def body(lib):
        x = lib.tensor(xa, requires_grad=True)
        return _leaves(op(lib, x)), [x]

    return _trial(f"{name} x={list(shape)}", body, weight, rtol=1e-7)
