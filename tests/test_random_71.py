"""Random calls of the spatial ops against PyTorch, round 71: every option.

Each seed draws a few calls of a spatial op of ``nn.functional`` -- or of its module form
(``nn.Upsample(...)(x)``, ``nn.Conv2d(...)`` with its weights copied in), with the same
options -- and runs them on torch and on retrograd from the same inputs: ``interpolate``
(every mode; ``size`` or an integer or fractional ``scale_factor``, ``align_corners``,
``recompute_scale_factor``, ``antialias``), ``grid_sample`` (every mode and ``padding_mode``,
4-d and 5-d, grids reaching past [-1, 1]) fed by a grid or by ``affine_grid``, max/average/
power-average pooling in 1-3 d (``stride``, ``padding``, ``dilation``, ``ceil_mode``,
``count_include_pad``, ``divisor_override``, ``return_indices`` then ``max_unpool`` with and
without ``output_size``), adaptive average/max pooling to sizes that do not divide (``None``
entries too), fractional max pooling with ``_random_samples``, ``unfold``/``fold``,
``pixel_shuffle``/``pixel_unshuffle``, ``channel_shuffle``, ``pad`` in every mode (negative
pads too) and convolutions and transposed convolutions in 1-3 d (``groups``, ``dilation``,
``output_padding``, ``padding="same"``/``"valid"``, the modules' ``padding_mode``); float32 and
float64, unbatched inputs, empty batches, channels-last inputs and bad options.

The value, its shape and dtype are compared (within a tolerance of the dtype; indices exactly),
and in float64 the gradients of the sum of the float outputs in every float input (the grid,
the affine matrices, the weights); where torch raises, retrograd must raise an error that is an
instance of torch's exception class.

Left out, each where it is drawn, because torch 2.13 is wrong or undecided there: an
anti-aliased output width of 1 (torch copies the first row into all), max pooling windows of
padding alone (garbage indices, an out-of-bounds backward), circular pads that crop below the
padding (uninitialised memory), transposed convolutions of output size 0 (its kernels
disagree), ``pixel_unshuffle`` of an empty batch (returned unchanged), the functional
fractional pooling's single float ``output_ratio`` (a ``TypeError`` of its own); the gradient
of an anti-aliased dimension whose size does not change (torch's backward is not its forward's
transpose), of ``nearest-exact`` resizing a 1-d or 3-d input by size (likewise) and of an
empty result (uninitialised memory) are not compared with torch's.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg
from test_random_69 import Mismatch, _close, _np, compare_gradients

torch = pytest.importorskip("torch")

#: relative tolerance per dtype (of the largest value + 1): the two libraries sum the same
#: terms in other orders
TOL = {"float32": 2e-5, "float64": 1e-10}


class Leaf:
    """An array given to both libraries as a tensor (a leaf that requires grad when ``grad``;
    with ``channels_last``, the call gets its channels-last copy)."""

    def __init__(self, array: np.ndarray, grad: bool = False, channels_last: bool = False):
        self.array, self.grad, self.channels_last = array, grad, channels_last

    def __repr__(self) -> str:
        cl = " channels_last" if self.channels_last else ""
        return f"{self.array.dtype}{list(self.array.shape)}{'*' if self.grad else ''}{cl}"


def _make(lib, value, leaves):
    if isinstance(value, Leaf):
        t = lib.tensor(value.array.copy())
        if value.grad:
            t.requires_grad_(True)
            leaves.append(t)
        if value.channels_last:
            fmt = lib.channels_last if t.dim() == 4 else lib.channels_last_3d
            t = t.contiguous(memory_format=fmt)
        return t
    if isinstance(value, list):
        return [_make(lib, v, leaves) for v in value]
    return value


# -- the draws: a Call ----------------------------------------------------------------------------
class Call:
    """``F.<name>(*args, **kwargs)``, or ``nn.<module>(**ctor)(*args)`` with ``state`` (the
    module's parameters, leaves) loaded; ``then``: a second functional call fed the outputs."""

    def __init__(
        self, name, args, kwargs, module=None, ctor=None, state=None, then=None, values_only=False
    ):
        self.name, self.args, self.kwargs, self.values_only = name, args, kwargs, values_only
        self.module, self.ctor, self.state, self.then = module, ctor, state or {}, then

    def __repr__(self) -> str:
        if self.module:
            text = f"nn.{self.module}(**{self.ctor})[{self.state}]({self.args})"
        else:
            text = f"F.{self.name}({self.args}, {self.kwargs})"
        if self.then:
            text += f" then F.{self.then[0]}(out, idx, {self.then[1]})"
        return text


def _fdtype(rng):
    return str(rng.choice(["float32", "float64"]))


def _x(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _batch(rng):
    return int(rng.choice([0, 1, 2, 3], p=[0.08, 0.3, 0.4, 0.22]))


def _input(rng, dtype, dims, unbatched_ok=True, sizes=(1, 6), channels=None, grad=True):
    """An input of ``dims`` spatial dims: (N, C, *spatial), sometimes unbatched (C, *spatial),
    sometimes channels-last."""
    c = channels if channels is not None else int(rng.integers(1, 4))
    spatial = tuple(int(s) for s in rng.integers(sizes[0], sizes[1], size=dims))
    unbatched = unbatched_ok and rng.random() < 0.15
    shape = (c, *spatial) if unbatched else (_batch(rng), c, *spatial)
    cl = not unbatched and dims in (2, 3) and rng.random() < 0.2
    return Leaf(_x(rng, shape, dtype), grad, channels_last=cl), unbatched


def _tuple_or_int(rng, values, dims):
    if rng.random() < 0.5:
        return int(rng.choice(values))
    return tuple(int(v) for v in rng.choice(values, size=dims))


def _antialias_ok(x, kwargs) -> bool:
    """Not an output width of 1 (where the height changes): torch 2.13's anti-aliased kernel
    gives every output row the first one's value there (a torch bug, not copied)."""
    w = x.array.shape[-1]
    if "size" in kwargs:
        out = kwargs["size"] if isinstance(kwargs["size"], int) else kwargs["size"][-1]
    else:
        f = kwargs["scale_factor"]
        out = int(np.floor(w * (f if isinstance(f, (int, float)) else f[-1])))
    return out != 1


def _a_size_kept(x, kwargs) -> bool:
    if "size" in kwargs:
        size = kwargs["size"]
        out = (size, size) if isinstance(size, int) else size
    else:
        f = kwargs["scale_factor"]
        f = (f, f) if isinstance(f, (int, float)) else f
        out = tuple(int(np.floor(n * g)) for n, g in zip(x.array.shape[-2:], f))
    return any(o == n for o, n in zip(out, x.array.shape[-2:]))


def draw_interpolate(rng, dtype):
    dims = int(rng.integers(1, 4))
    # sometimes long rows: the nearest modes' pixels on a half (2 to 49) need them
    wide = dims < 3 and rng.random() < 0.3
    x, _ = _input(rng, dtype, dims, unbatched_ok=False, sizes=(1, 40) if wide else (1, 6))
    if rng.random() < 0.04:  # unbatched: torch refuses
        x = Leaf(x.array[0] if x.array.shape[0] else x.array[:, 0], True)
    modes = ["nearest", "nearest-exact", "area", ("linear", "bilinear", "trilinear")[dims - 1]]
    if dims == 2:
        modes += ["bicubic", "bilinear"]
    if rng.random() < 0.04:
        modes = ["linear", "bilinear", "bicubic", "trilinear"]  # perhaps the wrong rank
    mode = str(rng.choice(modes))
    if rng.random() < 0.02:
        mode = "cubic"  # no such mode
    kwargs: dict = {"mode": mode}
    u = rng.random()
    if u < 0.4:
        kwargs["size"] = _tuple_or_int(rng, [1, 2, 3, 4, 5, 7] + [41, 46, 49] * wide, dims)
    else:
        factors = [0.5, 2.0, 1.5, 0.7, 3.0, 1.0, 2.5, 0.34, 1.3]
        if rng.random() < 0.5:
            kwargs["scale_factor"] = float(rng.choice(factors))
        else:
            kwargs["scale_factor"] = tuple(float(f) for f in rng.choice(factors, size=dims))
        if rng.random() < 0.1:
            kwargs["scale_factor"] = int(rng.choice([1, 2, 3]))
        if rng.random() < 0.02:
            kwargs["scale_factor"] = float(rng.choice([0.0, -1.0]))
        if rng.random() < 0.5:
            kwargs["recompute_scale_factor"] = bool(rng.random() < 0.5)
    if rng.random() < 0.03:
        kwargs["size"] = 3  # both: torch refuses
    linear = mode in ("linear", "bilinear", "bicubic", "trilinear")
    if (linear and rng.random() < 0.6) or rng.random() < 0.03:
        kwargs["align_corners"] = bool(rng.random() < 0.5)
    if mode in ("bilinear", "bicubic") and rng.random() < 0.4 and _antialias_ok(x, kwargs):
        kwargs["antialias"] = True
        if _a_size_kept(x, kwargs):
            # torch's anti-aliased forward leaves a dimension whose size does not change as it
            # is, its backward filters it (the transpose of another map than its forward's):
            # retrograd's gradient is its forward's, so the values alone are compared
            return Call("interpolate", [x], kwargs, values_only=True)
    if dims == 2 and rng.random() < 0.1 and set(kwargs) <= {"mode", "size", "scale_factor"}:
        # the fixed-mode modules: nearest, or bilinear with align_corners=True
        module = "UpsamplingNearest2d" if rng.random() < 0.5 else "UpsamplingBilinear2d"
        ctor = {k: v for k, v in kwargs.items() if k != "mode"}
        return Call("interpolate", [x], {}, module=module, ctor=ctor)
    # torch's nearest-exact backward of a 1-d or 3-d input resized by size reads other pixels
    # than its forward on a half (30 of 2,301 1-d size pairs): retrograd's gradient is its
    # forward's (torch's forward), so the values alone are compared there
    values_only = mode == "nearest-exact" and dims != 2 and "size" in kwargs
    if rng.random() < 0.3 and "antialias" not in kwargs:
        ctor = {k: v for k, v in kwargs.items() if k in ("size", "scale_factor", "mode")}
        ctor.update({k: v for k, v in kwargs.items() if k not in ctor})
        return Call("interpolate", [x], {}, module="Upsample", ctor=ctor, values_only=values_only)
    return Call("interpolate", [x], kwargs, values_only=values_only)


def _grid(rng, shape, dtype):
    g = rng.uniform(-1.25, 1.25, size=shape)
    if rng.random() < 0.2:
        g = rng.uniform(-3.0, 3.0, size=shape)  # far outside: reflection folds several times
    return g.astype(dtype)


def draw_grid_sample(rng, dtype):
    dims = int(rng.choice([2, 2, 3]))
    x, _ = _input(rng, dtype, dims, unbatched_ok=False, sizes=(1, 5))
    n = x.array.shape[0]
    out = tuple(int(s) for s in rng.integers(1, 4, size=dims))
    if rng.random() < 0.05 and n:
        n = n + 1  # batch sizes differ: torch refuses
    mode = str(
        rng.choice(["bilinear", "nearest", "bicubic"] if dims == 2 else ["bilinear", "nearest"])
    )
    if rng.random() < 0.03:
        mode = "bicubic"
    kwargs = {
        "mode": mode,
        "padding_mode": str(rng.choice(["zeros", "border", "reflection"])),
        "align_corners": bool(rng.random() < 0.5),
    }
    if rng.random() < 0.02:
        kwargs[str(rng.choice(["mode", "padding_mode"]))] = "wrap"  # no such mode
    if rng.random() < 0.3:  # the grid from affine_grid
        size = [n, x.array.shape[1], *out]
        theta = rng.standard_normal((n, dims, dims + 1)) * 0.6
        theta[:, :, :dims] += np.eye(dims)
        grid_call = ("affine_grid", Leaf(theta.astype(dtype), True), size, kwargs["align_corners"])
        return Call("grid_sample", [x, grid_call], kwargs)
    grid = Leaf(_grid(rng, (n, *out, dims), dtype), mode != "nearest" or rng.random() < 0.5)
    return Call("grid_sample", [x, grid], kwargs)


def draw_affine_grid(rng, dtype):
    dims = int(rng.choice([2, 3]))
    n = _batch(rng)
    size = [n, int(rng.integers(1, 4)), *(int(s) for s in rng.integers(1, 5, size=dims))]
    theta = rng.standard_normal((n, dims, dims + 1)).astype(dtype)
    if rng.random() < 0.05:
        size = size[:-1]  # the wrong rank: torch refuses
    kwargs = {"align_corners": bool(rng.random() < 0.5)}
    return Call("affine_grid", [Leaf(theta, True), size], kwargs)


def _pool_options(rng, dims, dilation=True):
    k = _tuple_or_int(rng, [1, 2, 3], dims)
    ks = (k,) * dims if isinstance(k, int) else k
    kwargs: dict = {"kernel_size": k}
    if rng.random() < 0.6:
        kwargs["stride"] = _tuple_or_int(rng, [1, 2, 3], dims)
    if rng.random() < 0.5:
        if rng.random() < 0.5:
            kwargs["padding"] = int(rng.integers(0, min(ks) // 2 + 1))
        else:
            kwargs["padding"] = tuple(int(rng.integers(0, q // 2 + 1)) for q in ks)
        if rng.random() < 0.04:
            kwargs["padding"] = max(ks)  # more than half the kernel: torch refuses
    if dilation and rng.random() < 0.4:
        kwargs["dilation"] = _tuple_or_int(rng, [1, 2], dims)
    if rng.random() < 0.4:
        kwargs["ceil_mode"] = True
    if rng.random() < 0.03:  # bad options: a stride of 0, a negative padding
        kwargs[str(rng.choice(["stride", "padding"]))] = int(rng.choice([0, -1]))
    return kwargs


POOL_MODULE = {"max": "MaxPool{}d", "avg": "AvgPool{}d", "lp": "LPPool{}d"}


def _per_dim(value, dims, default):
    value = default if value is None else value
    return (value,) * dims if isinstance(value, int) else tuple(value)


def _a_window_all_padding(spatial, kwargs) -> bool:
    """Whether a max pooling window covers padding alone (dilation skips the input): torch's
    value there is -inf, its index garbage and its backward writes out of bounds."""
    dims = len(spatial)
    k = _per_dim(kwargs["kernel_size"], dims, None)
    s = _per_dim(kwargs.get("stride"), dims, kwargs["kernel_size"])
    p = _per_dim(kwargs.get("padding"), dims, 0)
    d = _per_dim(kwargs.get("dilation"), dims, 1)
    if min(s) < 1 or min(p) < 0 or min(d) < 1:
        return False  # (refused anyway)
    for n, kk, ss, pp, dd in zip(spatial, k, s, p, d):
        span = n + 2 * pp - dd * (kk - 1) - 1
        out = (-(-span // ss) if kwargs.get("ceil_mode") else span // ss) + 1
        if kwargs.get("ceil_mode") and (out - 1) * ss >= n + pp:
            out -= 1
        for o in range(max(out, 0)):
            if not any(0 <= o * ss - pp + j * dd < n for j in range(kk)):
                return True
    return False


def draw_max_pool(rng, dtype):
    dims = int(rng.integers(1, 4))
    x, _ = _input(rng, dtype, dims, sizes=(1, 7))
    kwargs = _pool_options(rng, dims)
    if _a_window_all_padding(x.array.shape[-dims:], kwargs):
        kwargs.pop("dilation", None)
    name = f"max_pool{dims}d"
    if rng.random() < 0.4:
        kwargs["return_indices"] = True
        if rng.random() < 0.7:  # then max_unpool
            un = {k: kwargs[k] for k in ("kernel_size", "stride", "padding") if k in kwargs}
            if rng.random() < 0.4:
                grow = tuple(int(s) for s in rng.integers(0, 2, size=dims))
                un["output_size"] = ("grow", grow)
            return Call(name, [x], kwargs, then=(f"max_unpool{dims}d", un))
    if rng.random() < 0.3:
        return Call(name, [x], {}, module=POOL_MODULE["max"].format(dims), ctor=kwargs)
    return Call(name, [x], kwargs)


def draw_avg_pool(rng, dtype):
    dims = int(rng.integers(1, 4))
    x, _ = _input(rng, dtype, dims, sizes=(1, 7))
    kwargs = _pool_options(rng, dims, dilation=False)
    if rng.random() < 0.5:
        kwargs["count_include_pad"] = bool(rng.random() < 0.5)
    if dims > 1 and rng.random() < 0.3:
        kwargs["divisor_override"] = int(rng.choice([1, 3, 5]))
    name = f"avg_pool{dims}d"
    if rng.random() < 0.3:
        return Call(name, [x], {}, module=POOL_MODULE["avg"].format(dims), ctor=kwargs)
    return Call(name, [x], kwargs)


def draw_lp_pool(rng, dtype):
    dims = int(rng.integers(1, 4))
    x, _ = _input(rng, dtype, dims, sizes=(1, 7))
    if rng.random() < 0.5:  # positive inputs: no sign games
        x.array = np.abs(x.array) + x.array.dtype.type(0.1)
    opts = _pool_options(rng, dims, dilation=False)
    if dims == 1:  # (torch's lp_pool1d multiplies by its kernel_size: an int alone)
        opts["kernel_size"] = int(np.prod(opts["kernel_size"]))
    kwargs = {
        "norm_type": float(rng.choice([1.0, 2.0, 3.0, 1.5])),
        "kernel_size": opts["kernel_size"],
    }
    for k in ("stride", "ceil_mode"):
        if k in opts:
            kwargs[k] = opts[k]
    name = f"lp_pool{dims}d"
    if rng.random() < 0.3:
        return Call(name, [x], {}, module=POOL_MODULE["lp"].format(dims), ctor=kwargs)
    return Call(name, [x], kwargs)


def draw_adaptive(rng, dtype):
    dims = int(rng.integers(1, 4))
    x, _ = _input(rng, dtype, dims, sizes=(1, 8))
    kind = str(rng.choice(["avg", "max"]))
    if rng.random() < 0.4:
        size = int(rng.integers(1, 6))
    else:
        size = tuple(int(s) for s in rng.integers(1, 6, size=dims))
        if dims > 1 and rng.random() < 0.4:
            size = tuple(None if rng.random() < 0.4 else s for s in size)
    if dims == 1 and isinstance(size, tuple):
        size = size[0] if rng.random() < 0.5 else size
    if rng.random() < 0.03:
        size = 0  # torch refuses (or returns empty)
    name = f"adaptive_{kind}_pool{dims}d"
    kwargs: dict = {"output_size": size}
    if kind == "max" and rng.random() < 0.4:
        kwargs["return_indices"] = True
    module = f"Adaptive{kind.capitalize()}Pool{dims}d"
    if rng.random() < 0.3:
        return Call(name, [x], {}, module=module, ctor=kwargs)
    return Call(name, [x], kwargs)


def draw_fractional(rng, dtype):
    dims = int(rng.choice([2, 3]))
    x, unbatched = _input(rng, dtype, dims, sizes=(2, 8))
    spatial = x.array.shape[-dims:]
    k = _tuple_or_int(rng, [1, 2, 3], dims)
    ks = (k,) * dims if isinstance(k, int) else k
    kwargs: dict = {"kernel_size": k}
    if rng.random() < 0.5:
        kwargs["output_size"] = tuple(
            int(rng.integers(1, max(2, s - q + 2))) for s, q in zip(spatial, ks)
        )
    else:
        # (a single float: torch 2.13's functional form fails on it, "object of type 'float'
        # has no len()"; its module pairs it)
        kwargs["output_ratio"] = tuple(float(r) for r in rng.choice([0.5, 0.7, 0.3], size=dims))
    if rng.random() < 0.4:
        kwargs["return_indices"] = True
    n = 1 if unbatched else x.array.shape[0]
    samples = rng.random((n, x.array.shape[-dims - 1], dims)).astype(dtype)
    kwargs["_random_samples"] = Leaf(samples)
    return Call(f"fractional_max_pool{dims}d", [x], kwargs)


def draw_unfold_fold(rng, dtype):
    kwargs = {"kernel_size": _tuple_or_int(rng, [1, 2, 3], 2)}
    for key, values in (("dilation", [1, 2]), ("padding", [0, 1, 2]), ("stride", [1, 2, 3])):
        if rng.random() < 0.5:
            kwargs[key] = _tuple_or_int(rng, values, 2)
    if rng.random() < 0.03:  # bad options: a stride or dilation of 0, a negative padding
        key = str(rng.choice(["stride", "dilation", "padding"]))
        kwargs[key] = -1 if key == "padding" else 0
    module = rng.random() < 0.3
    if rng.random() < 0.5:
        x, _ = _input(rng, dtype, 2, sizes=(1, 7))
        if module:
            return Call("unfold", [x], {}, module="Unfold", ctor=kwargs)
        return Call("unfold", [x], kwargs)

    def pair(v):
        return (v, v) if isinstance(v, int) else v

    k, d = pair(kwargs["kernel_size"]), pair(kwargs.get("dilation", 1))
    p, s = pair(kwargs.get("padding", 0)), pair(kwargs.get("stride", 1))
    out = tuple(int(o) for o in rng.integers(1, 7, size=2))
    blocks = [
        (o + 2 * pp - dd * (kk - 1) - 1) // max(ss, 1) + 1
        for o, pp, dd, kk, ss in zip(out, p, d, k, s)
    ]
    length = int(np.prod(blocks)) if min(blocks) > 0 else 1
    if rng.random() < 0.05:
        length += 1  # torch refuses
    c = int(rng.integers(1, 3))
    unbatched = rng.random() < 0.15
    shape = (c * k[0] * k[1], length)
    shape = shape if unbatched else (_batch(rng), *shape)
    x = Leaf(_x(rng, shape, dtype), True)
    kwargs["output_size"] = out if rng.random() < 0.7 else int(out[0])
    if module:
        return Call("fold", [x], {}, module="Fold", ctor=kwargs)
    return Call("fold", [x], kwargs)


def draw_shuffle(rng, dtype):
    kind = str(rng.choice(["pixel_shuffle", "pixel_unshuffle", "channel_shuffle"]))
    r = int(rng.choice([1, 2, 3]))
    if kind == "pixel_shuffle":
        c = r * r * int(rng.integers(1, 3))
        if rng.random() < 0.05:
            c += 1  # torch refuses
        x, _ = _input(rng, dtype, 2, channels=c, sizes=(1, 4))
        key, module = "upscale_factor", "PixelShuffle"
    elif kind == "pixel_unshuffle":
        x, _ = _input(rng, dtype, 2, sizes=(1, 3))
        if x.array.shape[0] == 0:  # torch 2.13 returns an empty batch unchanged: not copied
            x.array = _x(rng, (1, *x.array.shape[1:]), dtype)
        x.array = np.tile(x.array, (1,) * (x.array.ndim - 2) + (r, r))
        if rng.random() < 0.05:
            x.array = x.array[..., :-1] if x.array.shape[-1] else x.array
        key, module = "downscale_factor", "PixelUnshuffle"
    else:
        g = int(rng.choice([1, 2, 3]))
        c = g * int(rng.integers(1, 3))
        if rng.random() < 0.05:
            c += 1
        x, _ = _input(rng, dtype, int(rng.integers(1, 4)), channels=c, sizes=(1, 4))
        key, module, r = "groups", "ChannelShuffle", g
    if rng.random() < 0.3:
        return Call(kind, [x], {}, module=module, ctor={key: r})
    return Call(kind, [x], {key: r})


PAD_MODULES = {
    "constant": "ConstantPad{}d",
    "reflect": "ReflectionPad{}d",
    "replicate": "ReplicationPad{}d",
    "circular": "CircularPad{}d",
}


def draw_pad(rng, dtype):
    mode = str(rng.choice(["constant", "constant", "reflect", "replicate", "circular"]))
    dims = int(rng.integers(1, 4))
    x, _ = _input(rng, dtype, dims, sizes=(1, 6))
    npad = dims if mode != "constant" else int(rng.integers(1, x.array.ndim + 1))
    if mode != "constant" and rng.random() < 0.05:
        npad = dims + 1  # torch refuses
    lo = -2 if rng.random() < 0.3 else 0
    pads = [int(p) for p in rng.integers(lo, 4, size=2 * npad)]
    if mode in ("reflect", "replicate") and x.array.shape[0] == 0:
        for i in range(min(npad, x.array.ndim)):
            if x.array.shape[-1 - i] + pads[2 * i] + pads[2 * i + 1] < 0:
                # torch 2.13 gives an empty batch a negative size there ([0, 3, 1, -2])
                pads[2 * i], pads[2 * i + 1] = max(pads[2 * i], 0), max(pads[2 * i + 1], 0)
    if mode == "circular":
        for i in range(min(npad, x.array.ndim)):
            left, right, n = pads[2 * i], pads[2 * i + 1], x.array.shape[-1 - i]
            if n + min(left, 0) + min(right, 0) < max(left, right, 1):
                # a crop that leaves less than the padding wraps: torch 2.13 reads memory it
                # never wrote there (or refuses aliasing memory): no value to compare
                pads[2 * i], pads[2 * i + 1] = max(left, 0), max(right, 0)
    kwargs: dict = {"mode": mode if rng.random() > 0.02 else "wrap"}
    if mode == "constant" and rng.random() < 0.5:
        kwargs["value"] = float(rng.choice([0.5, -1.0, 2.0]))
    if rng.random() < 0.25 and npad == dims:
        ctor = {"padding": tuple(pads)}
        if mode == "constant":
            ctor["value"] = kwargs.get("value", 0.0)
        return Call("pad", [x], {}, module=PAD_MODULES[mode].format(dims), ctor=ctor)
    return Call("pad", [x, pads], kwargs)


def _transposed_size(x, k, opts) -> int:
    """The smallest output size of a transposed convolution."""
    dims = len(k)
    s = _per_dim(opts.get("stride"), dims, 1)
    p = _per_dim(opts.get("padding"), dims, 0)
    d = _per_dim(opts.get("dilation"), dims, 1)
    op = _per_dim(opts.get("output_padding"), dims, 0)
    sizes = x.array.shape[-dims:]
    return min(
        (n - 1) * ss - 2 * pp + dd * (kk - 1) + oo + 1
        for n, ss, pp, dd, kk, oo in zip(sizes, s, p, d, k, op)
    )


def draw_conv(rng, dtype):
    dims = int(rng.integers(1, 4))
    transpose = rng.random() < 0.4
    g = int(rng.choice([1, 1, 2, 3]))
    cin, cout = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    if rng.random() < 0.04:
        cin += 1  # groups do not divide: torch refuses
    x, _ = _input(rng, dtype, dims, channels=cin, sizes=(1, 7))
    k = tuple(int(q) for q in rng.integers(1, 4, size=dims))
    wshape = (cin, cout // g, *k) if transpose else (cout, cin // g, *k)
    w = Leaf(_x(rng, wshape, dtype, 0.5), True)
    b = Leaf(_x(rng, (cout,), dtype), True) if rng.random() < 0.6 else None
    opts: dict = {}
    if rng.random() < 0.5:
        opts["stride"] = _tuple_or_int(rng, [1, 2, 3], dims)
    if rng.random() < 0.4:
        opts["dilation"] = _tuple_or_int(rng, [1, 2], dims)
    if g > 1 or rng.random() < 0.1:
        opts["groups"] = g
    if transpose:
        if rng.random() < 0.5:
            opts["padding"] = _tuple_or_int(rng, [0, 1, 2], dims)
        if rng.random() < 0.4:
            s = opts.get("stride", 1)
            d = opts.get("dilation", 1)
            bound = min(
                max(a, c)
                for a, c in zip(*((v,) * dims if isinstance(v, int) else v for v in (s, d)))
            )
            # (below the bound alone: retrograd accepts a larger one on purpose, as Burn,
            # conv.conv_transpose says so; torch refuses it)
            opts["output_padding"] = int(rng.integers(0, bound))
        name = f"conv_transpose{dims}d"
        module = f"ConvTranspose{dims}d"
        if _transposed_size(x, k, opts) == 0:
            # an output size of 0: torch 2.13's kernels differ (its oneDNN one, grouped float32
            # and some larger shapes, or an empty batch, returns an empty result; its others
            # refuse it, "Output size is too small", as retrograd does): not compared
            opts.pop("padding", None)
    else:
        u = rng.random()
        if u < 0.25:
            opts["padding"] = "same"
            if rng.random() < 0.9:
                opts.pop("stride", None)  # (torch refuses a stride with "same")
        elif u < 0.35:
            opts["padding"] = "valid"
        elif u < 0.7:
            opts["padding"] = _tuple_or_int(rng, [0, 1, 2], dims)
        elif u < 0.72:
            opts["padding"] = "full"  # no such padding
        name = f"conv{dims}d"
        module = f"Conv{dims}d"
    if rng.random() < 0.35:
        ctor = {
            "in_channels": cin,
            "out_channels": cout,
            "kernel_size": k,
            "bias": b is not None,
            **opts,
        }
        if not transpose and rng.random() < 0.5:
            ctor["padding_mode"] = str(rng.choice(["zeros", "reflect", "replicate", "circular"]))
        if cin % g:  # (the module refuses to be made: the functional form's refusal instead)
            return Call(name, [x, w] + ([b] if b is not None else []), opts)
        state = {"weight": w} | ({"bias": b} if b is not None else {})
        return Call(name, [x], {}, module=module, ctor=ctor, state=state)
    args = [x, w] + ([b] if b is not None else [])
    return Call(name, args, opts)


DRAWS = [
    draw_interpolate, draw_interpolate, draw_grid_sample, draw_grid_sample, draw_affine_grid,
    draw_max_pool, draw_max_pool, draw_avg_pool, draw_lp_pool, draw_adaptive, draw_adaptive,
    draw_fractional, draw_unfold_fold, draw_shuffle, draw_pad, draw_pad, draw_conv, draw_conv,
]  # fmt: skip


# -- running one call on both ------------------------------------------------------------------
def _arg(lib, a, leaves):
    if isinstance(a, tuple) and a and a[0] == "affine_grid":
        _, theta, size, align = a
        return lib.nn.functional.affine_grid(_make(lib, theta, leaves), size, align_corners=align)
    return _make(lib, a, leaves)


def _run(lib, call: Call):
    leaves: list = []
    args = [_arg(lib, a, leaves) for a in call.args]
    kwargs = {k: _make(lib, v, leaves) for k, v in call.kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if call.module:
            m = getattr(lib.nn, call.module)(**call.ctor)
            if call.state:
                m = m.double() if call.args[0].array.dtype == np.float64 else m.float()
                m.load_state_dict({k: _make(lib, v, []) for k, v in call.state.items()})
                params = [dict(m.named_parameters())[k] for k in call.state]
                leaves.extend(params)
            out = m(*args)
        else:
            out = getattr(lib.nn.functional, call.name)(*args, **kwargs)
        if call.then:
            un_name, un = call.then
            un = dict(un)
            if "output_size" in un:
                un["output_size"] = _unpool_default(un, out[0])
            out = (getattr(lib.nn.functional, un_name)(out[0], out[1], **un),)
    outs = out if isinstance(out, tuple) else (out,)
    return outs, leaves


def _grads(lib, outs, leaves):
    """The gradients of the sum of the float outputs (float64) in ``leaves``, or None."""
    floats = [o for o in outs if o.dtype.is_floating_point]
    if floats and floats[0].requires_grad and str(floats[0].dtype).endswith("float64"):
        total = sum(o.sum() for o in floats)
        return lib.autograd.grad(total, leaves, allow_unused=True)
    return None


def _unpool_default(un, pooled):
    """The default ``max_unpool`` size grown by ``un["output_size"][1]`` (a valid larger size:
    torch takes any size from the default up to the default + stride - 1)."""
    _, grow = un["output_size"]
    dims = len(grow)

    def tup(v, default):
        v = default if v is None else v
        return (v,) * dims if isinstance(v, int) else tuple(v)

    k = tup(un["kernel_size"], None)
    s = tup(un.get("stride"), un["kernel_size"])
    p = tup(un.get("padding", 0), 0)
    spatial = tuple(pooled.shape[-dims:])
    return [(n - 1) * ss - 2 * pp + kk + g for n, ss, pp, kk, g in zip(spatial, s, p, k, grow)]


def _dtype_name(t):
    return str(t.dtype).rpartition(".")[2]


def check_one(rng, log_prefix=""):
    dtype = _fdtype(rng)
    draw = DRAWS[int(rng.integers(len(DRAWS)))]
    call = draw(rng, dtype)
    log = f"{log_prefix}{call}"
    try:
        expected, leaves = _run(torch, call)
    except Exception as error:  # torch refuses: so must retrograd, with torch's class
        try:
            _run(rg, call)
        except Exception as mine:
            if not isinstance(mine, type(error)):
                raise Mismatch(
                    f"{log}\nraised {type(mine).__name__}: {mine}\ntorch: "
                    f"{type(error).__name__}: {error}"
                ) from mine
            return
        raise Mismatch(
            f"{log}\nretrograd accepted; torch raised {type(error).__name__}: {error}"
        ) from None
    try:
        expected_grads = _grads(torch, expected, leaves)
    except RuntimeError:
        # torch's backward refuses an empty output of adaptive pooling (an ``output_size`` or
        # an area interpolation's size of 0: "Expected grad_output to have non-zero size")
        # and of ``pixel_shuffle`` of an empty channels-last batch (its own gradient's shape)
        # though its forward gives one: the values are compared alone there
        if any(o.numel() for o in expected):
            raise
        expected_grads = None
    try:
        outs, leaves = _run(rg, call)
        grads = _grads(rg, outs, leaves) if expected_grads is not None else None
    except Exception as mine:
        raise Mismatch(f"{log}\nretrograd raised {type(mine).__name__}: {mine}") from mine
    if len(outs) != len(expected):
        raise Mismatch(f"{log}\n{len(outs)} outputs vs torch's {len(expected)}")
    for i, (out, e) in enumerate(zip(outs, expected, strict=True)):
        if _dtype_name(out) != _dtype_name(e):
            raise Mismatch(f"{log}\noutput {i}: dtype {out.dtype} vs torch's {e.dtype}")
        if e.dtype.is_floating_point:
            _close(log, f"output {i}", out, e, TOL[_dtype_name(e)])
        elif not np.array_equal(out.numpy(), e.numpy()) or tuple(out.shape) != tuple(e.shape):
            raise Mismatch(f"{log}\noutput {i} (indices) differ\n{out.numpy()}\n{e.numpy()}")
    if expected_grads is not None and not any(e.numel() for e in expected):
        # an empty result: torch 2.13's gradient of a reflect pad that empties a dimension is
        # the uninitialised memory of its buffer (6.9e-310, 2.9, ...); the sum of nothing has
        # gradient zero, which retrograd's must be
        for i, g in enumerate(grads or ()):
            if g is not None and np.any(_np(g)):
                raise Mismatch(f"{log}\ngrad {i} of an empty result is not zero\n{_np(g)}")
    elif expected_grads is not None and not call.values_only:
        names = range(len(expected_grads))
        compare_gradients(log, names, grads, expected_grads, TOL["float64"])


CALLS_PER_SEED = 12


@pytest.mark.parametrize("seed", range(50))
def test_random_spatial_ops_against_torch(seed):
    rng = np.random.default_rng([71, seed])
    for i in range(CALLS_PER_SEED):
        check_one(rng, f"seed {seed} call {i}: ")
