"""Random ``torch.nn.functional`` calls with edge parameters against PyTorch (round 54).

Each family draws its calls from a seeded generator: convolutions and transposed ones
(groups, dilation, stride larger than the kernel, ``padding='same'``/``'valid'``, tuple and int
forms, no bias, batchless inputs, ``output_padding``), ``nn.ConvNd`` with every
``padding_mode``, max/avg/LP/adaptive pools (``ceil_mode``, ``count_include_pad``,
``divisor_override``, ``return_indices`` then ``max_unpool`` with an ``output_size``,
dilation, outputs of size 1, adaptive sizes with ``None``), ``f.pad`` (every mode, negative
pads, pads over several dims), ``interpolate`` (every mode, size or scale factor,
``align_corners``, ``recompute_scale_factor``, ``antialias``), ``grid_sample``/``affine_grid``,
``unfold``/``fold``, pixel (un)shuffle, ``embedding`` (``padding_idx``, ``max_norm``,
``scale_grad_by_freq``), ``embedding_bag`` (modes, offsets, ``per_sample_weights``,
``include_last_offset``), ``normalize``, ``local_response_norm``, ``one_hot``, dropouts in eval
and the dtypes each takes. About a tenth of the draws are out of the op's domain.

Compared: whether both raise (ours in the API.md section 7 hierarchy, naming the op, its inputs
usable afterwards), then values, dtypes and shapes, then the float64 gradients of every float
input under a random weighting of the float outputs (torch's autograd).

Left out, where torch itself is no reference: ``output_padding`` at or past both stride and
dilation (accepted, as Burn does: conformance), circular pads that crop more than they keep
and reflect crops to an empty dim (torch reads uninitialized memory), the backward of empty
outputs (torch refuses it), a last offset other than the input's length with
``include_last_offset`` (torch's kernels disagree by dtype), the gradient of max pools
with a window over padding alone (torch's index can point past the input), and antialiased
``interpolate`` with an input or output axis of size 1 (torch's result is wrong there: it
repeats one value where the separable filter gives others).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RF = rg.nn.functional


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _leaves(value) -> list:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _dtype_name(t) -> str:
    return str(t.dtype).rsplit(".", 1)[-1]


def _inputs(lib, arrays, grad: bool) -> list:
    made = []
    for a in arrays:
        t = torch.tensor(a) if lib is torch else rg.tensor(a)
        if grad and a.dtype.kind == "f":
            t.requires_grad_(True)
        made.append(t)
    return made


def _still_usable(name: str, tensors: list) -> None:
    """After a refused call, every input still computes and differentiates."""
    for t in tensors:
        if t.dtype in (rg.float32, rg.float64) and t.requires_grad:
            grads = (t * 2.0).sum().backward()
            np.testing.assert_allclose(t.grad(grads).numpy(), 2.0, err_msg=name)
        else:
            t.clone().numpy()


def compare(name: str, op: str, call: Callable, arrays: list, grad: bool = True) -> None:
    """``call(f, lib, *inputs)`` in torch and retrograd on the same ``arrays``."""
    theirs_in, ours_in = _inputs(torch, arrays, grad), _inputs(rg, arrays, grad)
    theirs_error = ours_error = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            theirs = call(TF, torch, *theirs_in)
        except Exception as error:
            theirs_error = error
        try:
            ours = call(RF, rg, *ours_in)
        except Exception as error:
            ours_error = error
    if theirs_error is not None or ours_error is not None:
        if theirs_error is None or ours_error is None:
            raise Mismatch(f"{name}: torch raised {theirs_error!r}, ours {ours_error!r}")
        if not isinstance(ours_error, rg.RetrogradError) or op not in str(ours_error):
            raise Mismatch(f"{name}: our error {ours_error!r} is not ours or names not {op}")
        _still_usable(name, ours_in)
        return
    theirs_out, ours_out = _leaves(theirs), _leaves(ours)
    if len(theirs_out) != len(ours_out):
        raise Mismatch(f"{name}: {len(theirs_out)} outputs in torch, {len(ours_out)} in ours")
    weighted = []
    rng = np.random.default_rng(54)
    for t, r in zip(theirs_out, ours_out):
        expected, got = t.detach().numpy(), r.detach().numpy()
        if expected.shape != got.shape or _dtype_name(t) != _dtype_name(r):
            raise Mismatch(
                f"{name}: {_dtype_name(r)}{got.shape} for {_dtype_name(t)}{expected.shape}"
            )
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7, err_msg=name)
        if t.requires_grad and t.numel():
            weighted.append((t, r, rng.standard_normal(expected.shape)))
    if not weighted or not grad:
        return
    theirs_loss = sum((t * torch.tensor(w, dtype=t.dtype)).sum() for t, _, w in weighted)
    ours_loss = sum((r * rg.tensor(w.astype(r.numpy().dtype))).sum() for _, r, w in weighted)
    leaves = [(t, r) for t, r in zip(theirs_in, ours_in) if t.requires_grad]
    expected = torch.autograd.grad(theirs_loss, [t for t, _ in leaves], allow_unused=True)
    grads = ours_loss.backward()
    for k, ((_, r), e) in enumerate(zip(leaves, expected)):
        got = r.grad(grads)
        if e is None:
            assert got is None or not np.any(got.numpy()), f"{name}: gradient {k}"
            continue
        assert got is not None, f"{name}: no gradient for input {k}"
        np.testing.assert_allclose(
            got.numpy(), e.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"{name}: gradient {k}"
        )


def _int_or_tuple(rng, d: int, lo: int, hi: int):
    if rng.random() < 0.5:
        return int(rng.integers(lo, hi + 1))
    return tuple(int(rng.integers(lo, hi + 1)) for _ in range(d))


def _each(value, d: int) -> tuple:
    return (value,) * d if isinstance(value, int) else tuple(value)


# -- the families: each draws one call -------------------------------------------------------------
def draw_conv(rng):
    d = int(rng.integers(1, 4))
    groups = int(rng.choice([1, 1, 2, 3]))
    cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    if rng.random() < 0.08:
        cin += 1  # groups that do not divide the channels
    kernel = [int(rng.integers(1, 4)) for _ in range(d)]
    stride, dilation = _int_or_tuple(rng, d, 1, 4), _int_or_tuple(rng, d, 1, 3)
    lead = [] if rng.random() < 0.25 else [int(rng.integers(1, 3))]
    x = rng.standard_normal([*lead, cin, *(int(rng.integers(1, 8)) for _ in range(d))])
    kw = dict(stride=stride, dilation=dilation, groups=groups)
    if rng.random() < 0.4:
        name = f"conv_transpose{d}d"
        w = rng.standard_normal([cin, max(cout // groups, 1), *kernel])
        kw["padding"] = _int_or_tuple(rng, d, 0, 2)
        extra = _int_or_tuple(rng, d, 0, 2)
        bounds = zip(_each(extra, d), _each(stride, d), _each(dilation, d))
        kw["output_padding"] = 0 if any(o >= max(s, t) for o, s, t in bounds) else extra
        channels = w.shape[1] * groups
    else:
        name = f"conv{d}d"
        w = rng.standard_normal([cout, max(cin // groups, 1), *kernel])
        kw["padding"] = ["same", "valid", _int_or_tuple(rng, d, 0, 2)][int(rng.integers(0, 3))]
        channels = cout
    b = rng.standard_normal(channels)
    if rng.random() < 0.1:
        x, w, b = x.astype(np.float32), w.astype(np.float32), b.astype(np.float32)
    if rng.random() < 0.5:
        call = lambda f, lib, x, w, b: getattr(f, name)(x, w, b, **kw)  # noqa: E731
        return f"{name}({x.shape}, {w.shape}, bias, {kw})", name, call, [x, w, b]
    call = lambda f, lib, x, w: getattr(f, name)(x, w, None, **kw)  # noqa: E731
    return f"{name}({x.shape}, {w.shape}, {kw})", name, call, [x, w]


def draw_conv_module(rng):
    d = int(rng.integers(1, 4))
    groups = int(rng.choice([1, 2]))
    cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    mode = str(rng.choice(["zeros", "reflect", "replicate", "circular"]))
    padding = ["same", "valid", int(rng.integers(0, 3)), (1,) * d][int(rng.integers(0, 4))]
    stride = 1 if padding == "same" else int(rng.integers(1, 3))
    args = dict(
        kernel_size=int(rng.integers(1, 4)),
        stride=stride,
        padding=padding,
        dilation=int(rng.integers(1, 3)),
        groups=groups,
        bias=bool(rng.random() < 0.5),
        padding_mode=mode,
    )
    lead = [] if rng.random() < 0.3 else [2]
    x = rng.standard_normal([*lead, cin, *(int(rng.integers(2, 6)) for _ in range(d))])
    torch.manual_seed(0)
    theirs = getattr(torch.nn, f"Conv{d}d")(cin, cout, **args).double()
    ours = getattr(rg.nn, f"Conv{d}d")(cin, cout, **args).double()
    params = [p.detach().numpy() for p in theirs.parameters()]

    def call(f, lib, x, w, b=None):
        return (theirs if lib is torch else ours)._conv_forward(x, w, b)

    return f"Conv{d}d({cin}, {cout}, {args}) on {x.shape}", f"conv{d}d", call, [x, *params]


def draw_pool(rng):
    d = int(rng.integers(1, 4))
    lead = [] if rng.random() < 0.25 else [int(rng.integers(1, 3))]
    x = rng.standard_normal(
        [*lead, int(rng.integers(1, 3)), *(int(rng.integers(1, 7)) for _ in range(d))]
    )
    kind = str(rng.choice(["max", "avg", "lp", "adaptive_max", "adaptive_avg"]))
    kernel = _int_or_tuple(rng, d, 1, 4) if rng.random() < 0.95 else 0
    stride = None if rng.random() < 0.3 else _int_or_tuple(rng, d, 1, 5)
    padding = _int_or_tuple(rng, d, 0, 2)
    ceil_mode = bool(rng.random() < 0.5)
    grad = True
    if kind == "max":
        name = f"max_pool{d}d"
        kw = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode)
        kw["dilation"] = _int_or_tuple(rng, d, 1, 3)
        kw["return_indices"] = bool(rng.random() < 0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:  # a window over padding alone: torch's index may point past the input
                probe = getattr(TF, name)(torch.tensor(x), **{**kw, "return_indices": False})
                grad = bool(torch.isfinite(probe).all())
            except RuntimeError:
                pass
    elif kind == "avg":
        name = f"avg_pool{d}d"
        kw = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil_mode)
        kw["count_include_pad"] = bool(rng.random() < 0.5)
        if d > 1 and rng.random() < 0.4:
            kw["divisor_override"] = int(rng.integers(1, 4))
    elif kind == "lp":
        d = min(d, 2) if rng.random() < 0.5 else d
        x = np.abs(x[(...,) + (0,) * (x.ndim - len(lead) - 1 - d)]) + 0.1
        name = f"lp_pool{d}d"
        kernel = kernel if isinstance(kernel, int) else kernel[:d]
        stride = stride if not isinstance(stride, tuple) else stride[:d]
        norm = float(rng.choice([1.0, 2.0, 3.0, 1.5, np.inf, -np.inf]))
        kw = dict(norm_type=norm, kernel_size=kernel)
        kw.update(stride=stride, ceil_mode=ceil_mode)
    else:
        name = f"{kind}_pool{d}d"
        sizes = tuple(None if rng.random() < 0.25 else int(rng.integers(1, 6)) for _ in range(d))
        kw = dict(output_size=sizes if d > 1 and rng.random() < 0.7 else (sizes[0] or 1))
        if kind == "adaptive_max":
            kw["return_indices"] = bool(rng.random() < 0.5)
    call = lambda f, lib, x: getattr(f, name)(x, **kw)  # noqa: E731
    return f"{name}({x.shape}, {kw})", name.split("_pool")[0], call, [x], grad


def draw_unpool(rng):
    d = int(rng.integers(1, 4))
    kernel, stride = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    padding = int(rng.integers(0, kernel // 2 + 1))
    x = rng.standard_normal([1, 2, *(int(rng.integers(kernel, 7)) for _ in range(d))])
    values, indices = getattr(TF, f"max_pool{d}d")(
        torch.tensor(x), kernel, stride, padding, return_indices=True
    )
    default = [(o - 1) * stride - 2 * padding + kernel for o in values.shape[2:]]
    size = [n + int(rng.integers(0, stride + (1 if rng.random() < 0.8 else 3))) for n in default]
    if rng.random() < 0.3:
        size = [1, 2, *size]
    name = f"max_unpool{d}d"

    def call(f, lib, v, i):
        return getattr(f, name)(v, i, kernel, stride, padding, output_size=size)

    return (
        f"{name}({values.shape}, k={kernel}, s={stride}, p={padding}, {size})",
        name,
        call,
        [values.numpy(), indices.numpy()],
    )


def draw_pad(rng):
    nd = int(rng.integers(1, 6))
    x = rng.standard_normal([int(rng.integers(1, 5)) for _ in range(nd)])
    mode = str(rng.choice(["constant", "reflect", "replicate", "circular"]))
    pairs = (
        int(rng.integers(1, nd + 1)) if mode == "constant" else int(rng.integers(1, min(nd, 3) + 1))
    )
    pads = [int(rng.integers(-2, 4)) for _ in range(2 * pairs)]
    sizes = x.shape[::-1]
    if mode == "circular":  # crops that leave less than the pad: torch reads uninitialized memory
        pads = [max(p, 0) for p in pads]
    if mode == "reflect" and any(
        sizes[i] + pads[2 * i] + pads[2 * i + 1] <= 0 for i in range(pairs) if i < len(sizes)
    ):
        pads = [abs(p) for p in pads]
    kw = dict(mode=mode)
    if mode == "constant" and rng.random() < 0.5:
        kw["value"] = float(rng.choice([0.5, -1.0, 2.0]))
    call = lambda f, lib, x: f.pad(x, tuple(pads), **kw)  # noqa: E731
    return f"pad({x.shape}, {pads}, {kw})", "pad", call, [x]


def draw_interpolate(rng):
    d = int(rng.integers(1, 4))
    x = rng.standard_normal(
        [
            int(rng.integers(1, 3)),
            int(rng.integers(1, 3)),
            *(int(rng.integers(1, 6)) for _ in range(d)),
        ]
    )
    modes = ["nearest", "nearest-exact", "area", {1: "linear", 2: "bilinear", 3: "trilinear"}[d]]
    modes += ["bicubic"] if d == 2 else []
    mode = (
        str(rng.choice(modes + ["bilinear", "linear"]))
        if rng.random() < 0.1
        else str(rng.choice(modes))
    )
    kw = dict(mode=mode)
    if rng.random() < 0.5:
        kw["size"] = (
            int(rng.integers(1, 9))
            if rng.random() < 0.4
            else tuple(int(rng.integers(1, 9)) for _ in range(d))
        )
        if rng.random() < 0.1:  # refused with a size
            kw["recompute_scale_factor"] = True
    else:
        if rng.random() < 0.5:
            kw["scale_factor"] = float(rng.choice([0.5, 1.5, 2.0, 3.0, 0.7, 1.0, 2.5]))
        else:
            kw["scale_factor"] = tuple(float(rng.choice([0.5, 1.5, 2.0, 1.7])) for _ in range(d))
        if rng.random() < 0.4:
            kw["recompute_scale_factor"] = bool(rng.random() < 0.5)
    if mode in ("linear", "bilinear", "bicubic", "trilinear") and rng.random() < 0.6:
        kw["align_corners"] = bool(rng.random() < 0.5)
    if mode in ("bilinear", "bicubic") and rng.random() < 0.4:
        plain = (
            TF.interpolate(torch.tensor(x), **kw)
            if "recompute_scale_factor" not in kw or "size" not in kw
            else None
        )
        # (torch's antialiased kernels go wrong with an axis of size 1: left out)
        if plain is not None and min(x.shape[2:]) > 1 and min(plain.shape[2:]) > 1:
            kw["antialias"] = True
    call = lambda f, lib, x: f.interpolate(x, **kw)  # noqa: E731
    # an output dim of size 0 (area with a small scale) has no backward in torch
    grad = True
    if mode == "area" and not ("size" in kw and "recompute_scale_factor" in kw):
        grad = all(n > 0 for n in TF.interpolate(torch.tensor(x), **kw).shape)
    return f"interpolate({x.shape}, {kw})", "interpolate", call, [x], grad


def draw_grid(rng):
    d = int(rng.choice([2, 3]))
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    out = [int(rng.integers(1, 5)) for _ in range(d)]
    if rng.random() < 0.5:
        theta = rng.standard_normal([n, d, d + 1])
        size = [n, c, *out]
        corners = bool(rng.random() < 0.5)
        call = lambda f, lib, t: f.affine_grid(t, size, align_corners=corners)  # noqa: E731
        return f"affine_grid({theta.shape}, {size}, {corners})", "affine_grid", call, [theta]
    x = rng.standard_normal([n, c, *(int(rng.integers(1, 6)) for _ in range(d))])
    grid = rng.uniform(-1.3, 1.3, [n, *out, d])
    kw = dict(
        mode=str(rng.choice(["bilinear", "nearest"] + (["bicubic"] if d == 2 else []))),
        padding_mode=str(rng.choice(["zeros", "border", "reflection"])),
        align_corners=bool(rng.random() < 0.5),
    )
    call = lambda f, lib, x, g: f.grid_sample(x, g, **kw)  # noqa: E731
    return f"grid_sample({x.shape}, {grid.shape}, {kw})", "grid_sample", call, [x, grid]


def draw_fold(rng):
    kernel = (
        int(rng.integers(1, 4))
        if rng.random() < 0.5
        else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    )
    stride = (
        int(rng.integers(1, 3))
        if rng.random() < 0.5
        else (int(rng.integers(1, 3)), int(rng.integers(1, 4)))
    )
    kw = dict(dilation=int(rng.integers(1, 3)), padding=int(rng.integers(0, 2)), stride=stride)
    lead = [] if rng.random() < 0.3 else [2]
    if rng.random() < 0.5:
        x = rng.standard_normal(
            [*lead, int(rng.integers(1, 3)), int(rng.integers(1, 6)), int(rng.integers(1, 6))]
        )
        call = lambda f, lib, x: f.unfold(x, kernel, **kw)  # noqa: E731
        return f"unfold({x.shape}, {kernel}, {kw})", "unfold", call, [x]
    blocks = TF.unfold(torch.zeros(1, 2, 5, 6), kernel, **kw).shape
    y = rng.standard_normal([*lead, *blocks[1:]])
    size = (5, 6) if rng.random() < 0.7 else (int(rng.integers(1, 7)), int(rng.integers(1, 7)))
    call = lambda f, lib, y: f.fold(y, size, kernel, **kw)  # noqa: E731
    return f"fold({y.shape}, {size}, {kernel}, {kw})", "fold", call, [y]


def draw_shuffle(rng):
    r = int(rng.integers(1, 4))
    lead = [int(rng.integers(1, 3))] * int(rng.integers(0, 3))
    if rng.random() < 0.5:
        c = int(rng.integers(1, 3)) * (r * r if rng.random() < 0.85 else 1)
        x = rng.standard_normal([*lead, c, int(rng.integers(1, 4)), int(rng.integers(1, 4))])
        call = lambda f, lib, x: f.pixel_shuffle(x, r)  # noqa: E731
        return f"pixel_shuffle({x.shape}, {r})", "pixel_shuffle", call, [x]
    odd = 1 if rng.random() < 0.1 else 0
    x = rng.standard_normal(
        [
            *lead,
            int(rng.integers(1, 3)),
            r * int(rng.integers(1, 3)) + odd,
            r * int(rng.integers(1, 3)),
        ]
    )
    call = lambda f, lib, x: f.pixel_unshuffle(x, r)  # noqa: E731
    return f"pixel_unshuffle({x.shape}, {r})", "pixel_unshuffle", call, [x]


def draw_embedding(rng):
    rows, width = int(rng.integers(2, 7)), int(rng.integers(1, 5))
    weight = rng.standard_normal([rows, width])
    indices = rng.integers(
        0, rows, size=[int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
    )
    if rng.random() < 0.1:
        indices = indices + rows  # out of range
    kw = {}
    if rng.random() < 0.5:
        kw["padding_idx"] = int(rng.integers(-rows, rows))
    if rng.random() < 0.5:
        kw["scale_grad_by_freq"] = True
    if rng.random() < 0.35:  # the weight's rows renormalized in place: compare it too
        kw.update(
            max_norm=float(rng.choice([0.5, 1.0, 2.0])),
            norm_type=float(rng.choice([1.0, 2.0, 3.0])),
        )

        def renormed(f, lib, i, w):
            w = w.detach().clone()
            return f.embedding(i, w, **kw), w

        return (
            f"embedding({indices.shape}, {weight.shape}, {kw})",
            "embedding",
            renormed,
            [indices, weight],
            False,
        )
    call = lambda f, lib, i, w: f.embedding(i, w, **kw)  # noqa: E731
    return f"embedding({indices.shape}, {weight.shape}, {kw})", "embedding", call, [indices, weight]


def draw_embedding_bag(rng):
    rows, width = int(rng.integers(2, 7)), int(rng.integers(1, 4))
    weight = rng.standard_normal([rows, width])
    kw = dict(mode=str(rng.choice(["sum", "mean", "max"])))
    if rng.random() < 0.5:
        indices = rng.integers(0, rows, size=(int(rng.integers(1, 4)), int(rng.integers(1, 4))))
        arrays = [indices, weight]
    else:
        indices = rng.integers(0, rows, size=int(rng.integers(0, 7)))
        offsets = np.sort(rng.integers(0, len(indices) + 1, size=int(rng.integers(1, 4))))
        offsets[0] = 0 if rng.random() < 0.95 else offsets[0] + 1
        if rng.random() < 0.3 and len(offsets) > 1:
            kw["include_last_offset"] = True
            offsets[-1] = len(indices)
        arrays = [indices, weight, offsets.astype(np.int64)]
    if rng.random() < 0.4:
        kw["padding_idx"] = int(rng.integers(0, rows))
    weighted = kw["mode"] == "sum" and rng.random() < 0.5
    if weighted:
        arrays.append(rng.standard_normal(indices.shape))

    def call(f, lib, i, w, *rest):
        offsets = rest[0] if len(rest) == 2 or (len(rest) == 1 and not weighted) else None
        samples = rest[-1] if weighted else None
        return f.embedding_bag(i, w, offsets, per_sample_weights=samples, **kw)

    return f"embedding_bag({[a.shape for a in arrays]}, {kw})", "embedding_bag", call, arrays


def draw_normalization(rng):
    choice = rng.random()
    if choice < 0.4:
        nd = int(rng.integers(1, 4))
        x = rng.standard_normal([int(rng.integers(1, 4)) for _ in range(nd)])
        if rng.random() < 0.2:
            x[...] = 0.0
        kw = dict(
            p=float(rng.choice([1.0, 2.0, 3.0, 0.5, np.inf])),
            dim=int(rng.integers(-nd, nd)),
            eps=float(rng.choice([1e-12, 0.1])),
        )
        call = lambda f, lib, x: f.normalize(x, **kw)  # noqa: E731
        return f"normalize({x.shape}, {kw})", "normalize", call, [x]
    if choice < 0.75:
        nd = int(rng.integers(2, 6))
        x = rng.standard_normal(
            [
                int(rng.integers(1, 3)),
                int(rng.integers(1, 6)),
                *(int(rng.integers(1, 4)) for _ in range(nd - 2)),
            ]
        )
        kw = dict(
            size=int(rng.integers(1, 6)),
            alpha=float(rng.choice([1e-4, 0.5])),
            beta=float(rng.choice([0.75, 1.0])),
            k=float(rng.choice([1.0, 2.0])),
        )
        call = lambda f, lib, x: f.local_response_norm(x, **kw)  # noqa: E731
        return f"local_response_norm({x.shape}, {kw})", "local_response_norm", call, [x]
    indices = rng.integers(
        0, 5, size=[int(rng.integers(0, 4)) for _ in range(int(rng.integers(0, 3)))]
    )
    classes = int(rng.choice([-1, 5, 6, 3]))
    call = lambda f, lib, i: f.one_hot(i, classes)  # noqa: E731
    return f"one_hot({indices.shape}, {classes})", "one_hot", call, [indices], False


def draw_dtype(rng):
    """An op of the area on a dtype other than float64: the dtypes torch takes, or refuses."""
    dtype = str(rng.choice(["int64", "int32", "uint8", "bool", "float32", "int16"]))
    x = (np.abs(rng.standard_normal((1, 4, 4, 4))) * 3).astype(dtype)
    ops = {
        "max_pool2d": lambda f, lib, x: f.max_pool2d(x, 2, return_indices=True),
        "max_pool3d": lambda f, lib, x: f.max_pool3d(x, 2, 1, 1),
        "max_pool1d": lambda f, lib, x: f.max_pool1d(x[0], 2),
        "avg_pool2d": lambda f, lib, x: f.avg_pool2d(x, 2),
        "adaptive_avg_pool2d": lambda f, lib, x: f.adaptive_avg_pool2d(x, 3),
        "pad": lambda f, lib, x: f.pad(
            x, (1, 1), mode=str(rng.choice(["constant", "reflect", "replicate", "circular"]))
        ),
        "interpolate": lambda f, lib, x: f.interpolate(
            x, scale_factor=2, mode=str(rng.choice(["nearest", "bilinear", "area"]))
        ),
        "pixel_shuffle": lambda f, lib, x: f.pixel_shuffle(x, 2),
        "unfold": lambda f, lib, x: f.unfold(x, 2),
        "normalize": lambda f, lib, x: f.normalize(x),
        "one_hot": lambda f, lib, x: f.one_hot(x),
        "dropout": lambda f, lib, x: f.dropout(
            x, float(rng.choice([0.0, 0.5, 1.0])), training=bool(rng.random() < 0.3)
        ),
        "dropout2d": lambda f, lib, x: f.dropout2d(x, 0.5, training=False),
        "alpha_dropout": lambda f, lib, x: f.alpha_dropout(
            x, float(rng.choice([0.0, 1.0])), training=True
        ),
    }
    op = str(rng.choice(sorted(ops)))
    state = rng.bit_generator.state

    def call(f, lib, x):  # the same draws inside the op for torch and ours
        rng.bit_generator.state = state
        return ops[op](f, lib, x)

    return f"{op}[{dtype}]", op, call, [x], False


FAMILIES = {
    "conv": (draw_conv, 16),
    "conv_module": (draw_conv_module, 8),
    "pool": (draw_pool, 20),
    "unpool": (draw_unpool, 5),
    "pad": (draw_pad, 30),
    "interpolate": (draw_interpolate, 30),
    "grid": (draw_grid, 20),
    "fold": (draw_fold, 14),
    "shuffle": (draw_shuffle, 14),
    "embedding": (draw_embedding, 20),
    "embedding_bag": (draw_embedding_bag, 24),
    "normalization": (draw_normalization, 20),
    "dtype": (draw_dtype, 30),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_random_functional_calls_match_torch(family):
    torch.manual_seed(54)
    rg.manual_seed(54)
    draw, count = FAMILIES[family]
    rng = np.random.default_rng(5400 + sorted(FAMILIES).index(family))
    for _ in range(count):
        name, op, call, arrays, *grad = draw(rng)
        compare(name, op, call, arrays, grad[0] if grad else True)
