"""Round 16 of the differential fuzzer against PyTorch: what rounds 1-15 draw little from. Each
generator takes a ``numpy`` generator and returns a :class:`fuzz12_cases.Trial` written once
against a namespace ``lib`` (``torch`` or ``retrograd``); :func:`fuzz14_cases.check` runs it on
both and raises :class:`fuzz_cases.Mismatch` on the first difference in raising or not, dtype,
shape or value.

- ``activations``: the activation family (sigmoid, SiLU, tanh, ReLU, GELU in both
  approximations, Mish, Hardswish, Softplus with ``beta``/``threshold``, ELU/SELU/CELU,
  LogSigmoid, and their neighbours) on float32 tensors of 65,536 elements or more (the
  compiled loops of the NumPy backend) and small ones, contiguous, transposed and
  channels-last, with NaN, infinities, huge, tiny (subnormal) and signed-zero entries: values
  and gradients, and second derivatives on float64;
- ``softmax``: ``softmax``/``log_softmax``/``softmin`` over every dimension of large and small
  tensors in the same layouts, rows masked with ``-inf`` (some wholly), ``dtype=``, and the
  same special values;
- ``losses``: ``cross_entropy`` over vocabularies of thousands of classes (``label_smoothing``,
  ``ignore_index``, class weights, probability targets, every reduction) and ``nll_loss`` over
  K spatial dimensions, float32 and float64;
- ``norm_stats``: ``BatchNorm``/``InstanceNorm`` in 1-3 dimensions, ``GroupNorm``,
  ``LayerNorm`` and ``RMSNorm`` with affine off and on, ``momentum=None``,
  ``track_running_stats=False``, several training steps then evaluation: outputs, gradients,
  running statistics and ``num_batches_tracked`` after every step;
- ``reductions``: sum/mean/prod/nansum/nanmean/amax/amin/logsumexp/norm/var/std/count_nonzero/
  all/any and the cumulative ops with ``dtype=``, ``keepdim`` and tuples of dims over int64,
  bool, float32 and float64 inputs, large and small;
- ``ordering``: sort/argsort (stable)/topk/kthvalue/max/min/argmax/argmin/cummax/cummin/
  median/unique/msort/maximum/fmax over ties, NaN and infinities, large and small;
- ``index_reduce``: ``index_reduce`` (prod/mean/amax/amin, ``include_self``),
  ``scatter_reduce``, ``index_add`` with ``alpha`` and ``scatter_add`` with repeated indices
  and ties, on large and small tensors, with out-of-range indices that must raise.

Known differences are left out of the draws and named where they are.
"""

from __future__ import annotations

import math

import numpy as np

from fuzz12_cases import Trial, _leaves, _pick
from fuzz14_cases import _grads, _weight_fn, check

__all__ = ["GENERATORS", "check"]

GENERATORS: dict = {}

BIG = 1 << 16  # the size from which the NumPy backend's compiled loops run


def gen(name):
    def register(fn):
        GENERATORS[name] = fn
        return fn

    return register


def _trial(name, body, weight, rtol=1e-9, second=False, reference64=False):
    """body(lib) -> (results, leaves); the results, then the gradients of their float ones
    (and with ``second``, the gradient of a weighted sum of those gradients). With
    ``reference64``, torch's float64 results are rounded to float32: body computes torch's
    side in float64 (see :func:`_softmax`)."""

    def fn(lib):
        out = _fn(lib)
        if reference64 and lib.__name__ == "torch":
            out = [o.float() if isinstance(o, lib.Tensor) else o for o in out]
        return out

    def _fn(lib):
        results, leaves = body(lib)
        results = _leaves(results)
        tensors = [r for r in results if isinstance(r, lib.Tensor)]
        if not second:
            grads = _grads(lib, tensors, leaves, weight)
            return [*results, *grads]
        outs = [o for o in tensors if o.requires_grad]
        total = sum((o * lib.tensor(weight(tuple(o.shape)), dtype=o.dtype)).sum() for o in outs)
        grads = lib.autograd.grad(total, leaves, create_graph=True)
        gsum = sum((g * lib.tensor(weight(tuple(g.shape)), dtype=g.dtype)).sum() for g in grads)
        if not gsum.requires_grad:  # (piecewise linear: retrograd's graph ends, torch's not)
            return [*results, *grads, *[lib.zeros_like(x) for x in leaves]]
        second_grads = lib.autograd.grad(gsum, leaves, allow_unused=True)
        second_grads = [lib.zeros_like(x) if g is None else g for g, x in zip(second_grads, leaves)]
        return [*results, *grads, *second_grads]

    return Trial(name, fn, rtol=rtol)


SPECIALS = (math.nan, math.inf, -math.inf, 3.0e38, -3.0e38, 1e-40, -1e-40, -0.0, 0.0, 88.0,
            -88.0, 100.0, -104.0, 20.0, -20.0, 9.0, -9.0)  # fmt: skip


def _values(rng, n, scale, specials):
    a = rng.standard_normal(n) * scale
    if specials:
        k = int(rng.integers(1, 9))
        at = rng.integers(0, n, size=k)
        a[at] = [SPECIALS[int(i)] for i in rng.integers(len(SPECIALS), size=k)]
    return a


class Big:
    """A leaf of ``shape`` read as contiguous, transposed or channels-last."""

    def __init__(self, rng, shape, dtype, layout, scale=3.0, specials=False):
        self.shape, self.dtype, self.layout = tuple(shape), dtype, layout
        if layout == "T":
            base = self.shape[:-2] + (self.shape[-1], self.shape[-2])
        elif layout == "channels_last":
            base = (self.shape[0], *self.shape[2:], self.shape[1])
        else:
            base = self.shape
        n = int(np.prod(base))
        self.array = _values(rng, n, scale, specials).reshape(base)

    def make(self, lib, grad=True, dtype=None):
        """(the leaf, its view); ``dtype`` instead of the drawn one"""
        leaf = lib.tensor(self.array, dtype=getattr(lib, dtype or self.dtype), requires_grad=grad)
        if self.layout == "T":
            return leaf, leaf.transpose(-1, -2)
        if self.layout == "channels_last":
            return leaf, leaf.movedim(-1, 1)
        return leaf, leaf

    def __repr__(self):
        return f"{self.dtype}{list(self.shape)}:{self.layout}"


def _big_shape(rng, rank_min=2):
    """A shape of rank 2-4 with 65,536 elements or more, or a small one."""
    if rng.random() < 0.25:
        return tuple(int(v) for v in rng.integers(1, 5, size=int(rng.integers(rank_min, 5))))
    return _pick(rng, (256, 256), (64, 1025), (2, 4, 64, 128), (3, 8, 48, 64), (1, 16, 64, 64),
                 (4, 17, 1000), (2, 2, 16384), (65536, 1), (1, 65537), (8, 9, 30, 31))  # fmt: skip


def _layout(rng, shape):
    kinds = ["plain", "plain"] + (["T"] if len(shape) >= 2 else [])
    kinds += ["channels_last"] if len(shape) == 4 else []
    return _pick(rng, *kinds)


# ---- activations -------------------------------------------------------------------------

ACTIVATIONS = {
    "sigmoid": lambda lib, f, x: x.sigmoid(),
    "silu": lambda lib, f, x: f.silu(x),
    "tanh": lambda lib, f, x: x.tanh(),
    "relu": lambda lib, f, x: f.relu(x),
    "gelu": lambda lib, f, x: f.gelu(x),
    "gelu_tanh": lambda lib, f, x: f.gelu(x, approximate="tanh"),
    "mish": lambda lib, f, x: f.mish(x),
    "hardswish": lambda lib, f, x: f.hardswish(x),
    "hardsigmoid": lambda lib, f, x: f.hardsigmoid(x),
    "softplus": lambda lib, f, x: f.softplus(x),
    "softplus_beta": lambda lib, f, x: f.softplus(x, beta=2.5, threshold=4.0),
    "softplus_small_beta": lambda lib, f, x: f.softplus(x, beta=0.5, threshold=30.0),
    "elu": lambda lib, f, x: f.elu(x, alpha=0.7),
    "selu": lambda lib, f, x: f.selu(x),
    "celu": lambda lib, f, x: f.celu(x, alpha=1.3),
    "logsigmoid": lambda lib, f, x: f.logsigmoid(x),
    "leaky_relu": lambda lib, f, x: f.leaky_relu(x, 0.2),
    "softsign": lambda lib, f, x: f.softsign(x),
    "relu6": lambda lib, f, x: f.relu6(x),
    "hardtanh": lambda lib, f, x: f.hardtanh(x, -0.5, 2.0),
    "tanhshrink": lambda lib, f, x: f.tanhshrink(x),
    "sigmoid_mul": lambda lib, f, x: x * x.sigmoid(),
    "tanh_": lambda lib, f, x: (x * 1).tanh_(),
    "sigmoid_": lambda lib, f, x: (x * 1).sigmoid_(),
    "silu_module": lambda lib, f, x: lib.nn.SiLU()(x),
    "erf": lambda lib, f, x: x.erf(),
    "exp": lambda lib, f, x: x.exp(),
    "log1p_abs": lambda lib, f, x: x.abs().log1p(),
}


@gen("activations")
def _activations(rng):
    op = str(_pick(rng, *ACTIVATIONS))
    shape = _big_shape(rng)
    dtype = "float32" if rng.random() < 0.8 else "float64"
    specials = rng.random() < 0.5
    x = Big(rng, shape, dtype, _layout(rng, shape), float(_pick(rng, 1.0, 3.0, 30.0)), specials)
    if op in ("elu", "selu", "celu", "hardtanh", "relu6", "hardswish"):
        # torch's gradient at NaN differs between its vectorized loop and the scalar loop over
        # the last elements (a float32 tensor of 8 elements or fewer, float64 of 7): ELU's is
        # NaN or the positive side's slope, hardtanh's 0 or 1, hardswish's NaN or 1. It
        # depends on where the NaN lies, so NaN is left out (retrograd's is the scalar loop's)
        x.array[np.isnan(x.array)] = -0.0
    if op == "hardswish" and dtype == "float32":
        # torch's float32 hardswish overflows to inf above 5.7e37 (x * 6 / 6); it is x there
        x.array = np.clip(x.array, -1e37, 1e37)
    # second derivatives on small float64 inputs without special values
    second = dtype == "float64" and not specials and np.prod(shape) < 4096 and rng.random() < 0.7
    second = second and op != "hardsigmoid"  # (torch has no hardsigmoid_backward derivative)
    rtol = 1e-9 if dtype == "float64" else 2e-5
    if op == "celu" and dtype == "float64":
        rtol = 1e-7  # (torch's gradient is exp(x / alpha) to 4e-9 only: fuzz15_cases' layers)

    def body(lib):
        leaf, view = x.make(lib)
        return [ACTIVATIONS[op](lib, lib.nn.functional, view)], [leaf]

    return _trial(f"{op} {x} specials={specials} second={second}", body, _weight_fn(rng),
                  rtol=rtol, second=second)  # fmt: skip


# ---- softmax family ----------------------------------------------------------------------


@gen("softmax")
def _softmax(rng):
    op = str(
        _pick(rng, "softmax", "log_softmax", "softmin", "softmax_method", "log_softmax_method")
    )
    shape = _big_shape(rng, 1)
    dtype = "float32" if rng.random() < 0.8 else "float64"
    specials = rng.random() < 0.3
    x = Big(rng, shape, dtype, _layout(rng, shape), float(_pick(rng, 1.0, 5.0, 40.0)), specials)
    dim = int(rng.integers(-len(shape), len(shape)))
    mask_kind = _pick(rng, None, None, "random", "causal", "rows")
    mask = None
    if mask_kind == "random":
        mask = rng.random(shape) < 0.3
    elif mask_kind == "causal" and len(shape) >= 2:
        mask = np.broadcast_to(np.triu(np.ones(shape[-2:], dtype=bool), 1), shape)
    elif mask_kind == "rows":  # some rows along dim wholly masked
        keep = rng.random(shape[:dim] + (1,) + shape[dim:][1:] if dim >= 0 else shape) < 0.5
        mask = np.broadcast_to(rng.random(_row_shape(shape, dim)) < 0.2, shape) | (
            keep & (rng.random(shape) < 0.1)
        )
    out_dtype = _pick(rng, None, None, None, "float64", "float32")
    second = dtype == "float64" and not specials and np.prod(shape) < 4096 and rng.random() < 0.6
    # Over thousands of float32 elements torch's float32 kernels lose more than retrograd's
    # (log_softmax over 65,536: torch's values 6e-5 off, its gradients 5e-3; retrograd's 3e-6
    # and 4e-6): there the reference is torch's float64, rounded to float32.
    reference64 = dtype == "float32" and out_dtype != "float64" and shape[dim] >= 1024

    def body(lib):
        f = lib.nn.functional
        leaf, view = x.make(
            lib, dtype="float64" if reference64 and lib.__name__ == "torch" else None
        )
        if mask is not None:
            view = view.masked_fill(lib.tensor(np.ascontiguousarray(mask)), -math.inf)
        kw = {} if out_dtype is None else {"dtype": getattr(lib, out_dtype)}
        if reference64 and lib.__name__ == "torch":
            kw = {}
        if op == "softmax":
            out = f.softmax(view, dim, **kw)
        elif op == "log_softmax":
            out = f.log_softmax(view, dim, **kw)
        elif op == "softmin":
            out = f.softmin(view, dim, **kw)
        elif op == "softmax_method":
            out = view.softmax(dim, **kw)
        else:
            out = view.log_softmax(dim, **kw)
        return [out], [leaf]

    return _trial(
        f"{op} {x} dim={dim} mask={mask_kind} dtype={out_dtype} specials={specials}",
        body,
        _weight_fn(rng),
        rtol=1e-9 if dtype == "float64" and out_dtype != "float32" else 2e-5,
        second=second,
        reference64=reference64,
    )


def _row_shape(shape, dim):
    shape = list(shape)
    shape[dim] = 1
    return tuple(shape)


# ---- losses over large vocabularies ------------------------------------------------------


@gen("losses")
def _losses(rng):
    kind = _pick(rng, "ce", "ce", "ce_probs", "nll")
    dtype = "float32" if rng.random() < 0.7 else "float64"
    big = rng.random() < 0.7
    classes = int(_pick(rng, 4096, 8192, 5000, 32768)) if big else int(rng.integers(1, 6))
    batch = int(_pick(rng, 1, 3, 8, 16)) if big else int(rng.integers(1, 4))
    spatial = () if big or rng.random() < 0.5 else _shape(rng, 1, 3)
    if kind == "ce_probs" and big:
        batch = min(batch, 3)
    shape = (batch, classes, *spatial)
    unbatched = not spatial and rng.random() < 0.1
    logits = rng.standard_normal(shape) * float(_pick(rng, 1.0, 5.0, 30.0))
    target = rng.integers(0, classes, size=(batch, *spatial))
    ignore = _pick(rng, -100, 0, 1, 2)
    if rng.random() < 0.5:  # some targets ignored
        flat = target.reshape(-1)
        flat[rng.random(flat.size) < 0.3] = ignore if ignore >= 0 else -100
    if rng.random() < 0.05:  # out of range: both refuse
        target.reshape(-1)[0] = classes + 1
    probs = rng.dirichlet(np.ones(classes), size=(batch, *spatial))
    probs = np.moveaxis(probs, -1, 1)
    weight = rng.uniform(0.2, 2.0, classes) if rng.random() < 0.4 else None
    smoothing = float(_pick(rng, 0.0, 0.0, 0.1, 0.35))
    reduction = _pick(rng, "mean", "sum", "none")
    channels_last = len(spatial) == 2 and rng.random() < 0.5

    def body(lib):
        f = lib.nn.functional
        x = lib.tensor(logits, dtype=getattr(lib, dtype), requires_grad=True)
        view = x
        if channels_last:
            view = x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
        w = None if weight is None else lib.tensor(weight, dtype=x.dtype)
        if kind == "ce_probs":
            t = lib.tensor(probs, dtype=x.dtype)
            if unbatched:
                view, t = view[0], t[0]
            out = f.cross_entropy(view, t, weight=w, label_smoothing=smoothing,
                                  reduction=reduction)  # fmt: skip
        else:
            t = lib.tensor(target)
            if unbatched:
                view, t = view[0], t[0]
            if kind == "ce":
                out = f.cross_entropy(view, t, weight=w, ignore_index=ignore,
                                      label_smoothing=smoothing, reduction=reduction)  # fmt: skip
            else:
                out = f.nll_loss(f.log_softmax(view, 1 if not unbatched else 0), t, weight=w,
                                 ignore_index=ignore, reduction=reduction)  # fmt: skip
        return [out], [x]

    return _trial(
        f"{kind} {dtype}{list(shape)} unbatched={unbatched} weight={weight is not None} "
        f"ignore={ignore} smoothing={smoothing} reduction={reduction} "
        f"channels_last={channels_last}",
        body,
        _weight_fn(rng),
        rtol=1e-8 if dtype == "float64" else 1e-4,
    )


def _shape(rng, rmin=1, rmax=3, lo=1, hi=4):
    return tuple(int(v) for v in rng.integers(lo, hi, size=int(rng.integers(rmin, rmax + 1))))


# ---- normalization layers with their running statistics -----------------------------------


@gen("norm_stats")
def _norm_stats(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    kind = c("BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d",
             "InstanceNorm3d", "GroupNorm", "LayerNorm", "RMSNorm")  # fmt: skip
    ch = c(1, 2, 3, 4)
    batch = c(1, 2, 3)
    dtype = c("float32", "float64", "float64")
    kw: dict = {}
    if kind.startswith("BatchNorm") or kind.startswith("InstanceNorm"):
        nd = int(kind[-2])
        spatial = _shape(rng, nd - 1 if kind == "BatchNorm1d" else nd, nd, 1, 4)
        if kind == "BatchNorm1d" and rng.random() < 0.5:
            spatial = ()
        shape = (batch, ch, *spatial)
        if kind.startswith("InstanceNorm") and rng.random() < 0.2:
            shape = shape[1:]  # unbatched
        kw = dict(eps=c(1e-5, 1e-3), momentum=c(0.1, None, 0.5, 0.0, 1.0),
                  affine=c(True, False), track_running_stats=c(True, False))  # fmt: skip
        args = (ch,)
    elif kind == "GroupNorm":
        groups = c(1, 2)
        ch = groups * c(1, 2)
        shape = (batch, ch, *_shape(rng, 0, 2, 1, 4))
        kw = dict(eps=c(1e-5, 0.1), affine=c(True, False))
        args = (groups, ch)
    else:
        shape = _shape(rng, 1, 4, 1, 4)
        k = int(rng.integers(1, len(shape) + 1))
        args = (list(shape[-k:]),)
        kw = dict(elementwise_affine=c(True, False))
        if kind == "RMSNorm":
            kw["eps"] = c(None, 1e-6, 0.3)
        else:
            kw["bias"] = c(True, False)
    steps = c(1, 2, 3)
    modes = [c("train", "train", "eval") for _ in range(steps)] + ["eval"]
    inputs = [rng.standard_normal(shape) * c(1.0, 4.0) + c(0.0, 2.0) for _ in modes]

    def fn(lib):
        torch_like = lib.nn
        if lib.__name__ == "torch":
            lib.manual_seed(0)
        m = getattr(torch_like, kind)(*args, **kw)
        m = m.double() if dtype == "float64" else m
        params = list(m.parameters())
        # deterministic parameters, not the initial ones
        for k, p in enumerate(params):
            p.data = lib.tensor(np.linspace(0.5, 1.5, p.numel()).reshape(tuple(p.shape)) * (k + 1),
                                dtype=getattr(lib, dtype))  # fmt: skip
        results = []
        for mode, xa in zip(modes, inputs):
            m.train(mode == "train")
            x = lib.tensor(xa, dtype=getattr(lib, dtype), requires_grad=True)
            out = m(x)
            leaves = [x, *m.parameters()]
            w = lib.tensor(
                np.cos(np.arange(out.numel())).reshape(tuple(out.shape)), dtype=out.dtype
            )
            grads = lib.autograd.grad((out * w).sum(), leaves, allow_unused=True)
            results += [
                out,
                *[lib.zeros_like(p) if g is None else g for g, p in zip(grads, leaves)],
            ]
            for name, b in sorted(m.named_buffers()):
                results += [name, b]
        return results

    # (float32: normalizing two or three values divides rounding errors by a small deviation;
    # the gradients of both libraries are 1e-4 apart there)
    return Trial(f"{kind}{args} {kw} {dtype}{list(shape)} modes={modes}", fn,
                 rtol=1e-8 if dtype == "float64" else 1e-3)  # fmt: skip


# ---- reductions with dtype= and keepdim -----------------------------------------------------

REDUCTIONS = ("sum", "mean", "prod", "nansum", "nanmean", "amax", "amin", "logsumexp", "norm",
              "var", "std", "count_nonzero", "all", "any", "cumsum", "cumprod", "logcumsumexp",
              "sum_dtype", "prod_dtype", "cumsum_dtype", "cumprod_dtype", "mean_dtype",
              "nansum_dtype", "norm_dtype", "max_dim", "min_dim", "aminmax")  # fmt: skip


@gen("reductions")
def _reductions(rng):
    op = str(_pick(rng, *REDUCTIONS))
    shape = _big_shape(rng, 1) if rng.random() < 0.3 else _shape(rng, 0, 4, 1, 4)
    if rng.random() < 0.05 and shape:
        shape = shape[:-1] + (0,)
    dtype = str(_pick(rng, "float64", "float64", "float32", "int64", "bool"))
    nd = len(shape)
    dims = _pick(rng, None, "one", "tuple", "neg")
    if dims == "one" and nd:
        dim = int(rng.integers(0, nd))
    elif dims == "neg" and nd:
        dim = -1
    elif dims == "tuple" and nd >= 2:
        dim = tuple(
            int(d) for d in rng.choice(nd, size=int(rng.integers(1, nd + 1)), replace=False)
        )
    else:
        dim = None
    keepdim = bool(rng.random() < 0.5)
    out_dtype = str(_pick(rng, "float64", "float32", "int64"))
    if dtype.startswith("float") and out_dtype == "int64":
        # torch refuses an int result of a tensor that requires grad ("Autograd not support
        # dtype: Long"); retrograd returns it, not differentiable (a known difference)
        out_dtype = "float64"
    if dtype == "bool":
        arr = rng.random(shape) < 0.5
    elif dtype == "int64":
        arr = rng.integers(-3, 4, size=shape)
    else:
        arr = rng.standard_normal(shape)
        # (no special value into logcumsumexp: torch's gradient at an infinity is NaN,
        # exp(inf - inf), where the derivative is 1 or 0 as retrograd's; retrograd's gradient
        # of a lone NaN is 1)
        if rng.random() < 0.3 and arr.size and op != "logcumsumexp":
            # (not into var/std: with an infinite mean torch's gradient is -inf at the finite
            # entries, retrograd's NaN; the derivative is neither)
            inf_ok = op not in ("var", "std")
            special = _pick(rng, math.nan, math.inf if inf_ok else math.nan, 0.0)
            arr.reshape(-1)[rng.integers(0, arr.size, size=3)] = special
    # (Bessel's correction only without special values: where one value is reduced (no
    # degrees of freedom) torch's gradient at NaN is +-inf)
    correction = 1 if np.isfinite(arr).all() else 0
    scan_dim = dim if isinstance(dim, int) else 0
    if op.startswith(("prod", "cumprod")) and dtype.startswith("float"):
        arr = 1 + 0.01 * arr  # (products of thousands of terms near 1)
    big = arr.size >= BIG
    if big and op in ("cumprod", "cumprod_dtype") and dtype == "int64":
        arr = np.clip(arr, -1, 1)

    def body(lib):
        x = lib.tensor(arr, dtype=getattr(lib, dtype))
        if dtype.startswith("float"):
            x.requires_grad_(True)
        leaves = [x] if x.requires_grad else []
        od = getattr(lib, out_dtype)
        dk = {} if dim is None else {"dim": dim}
        k = dict(dk, keepdim=keepdim)
        out = {
            "sum": lambda: x.sum(**k) if dim is not None else x.sum(),
            "mean": lambda: x.mean(**k) if dim is not None else x.mean(),
            "prod": lambda: x.prod(scan_dim, keepdim=keepdim) if nd else x.prod(),
            "nansum": lambda: x.nansum(**k),
            "nanmean": lambda: x.nanmean(**k),
            "amax": lambda: x.amax(**k) if dim is not None else x.amax(),
            "amin": lambda: x.amin(**k) if dim is not None else x.amin(),
            "logsumexp": lambda: x.logsumexp(
                dim if dim is not None else tuple(range(nd)), keepdim=keepdim
            ),
            "norm": lambda: x.norm(dim=dim, keepdim=keepdim),
            "var": lambda: x.var(**k, correction=correction),
            "std": lambda: x.std(dim, correction=0, keepdim=keepdim),
            "count_nonzero": lambda: x.count_nonzero(**dk),
            "all": lambda: x.all(scan_dim, keepdim=keepdim) if nd else x.all(),
            "any": lambda: x.any(**k) if dim is not None else x.any(),
            "cumsum": lambda: x.cumsum(scan_dim),
            "cumprod": lambda: x.cumprod(scan_dim),
            "logcumsumexp": lambda: x.logcumsumexp(scan_dim),
            "sum_dtype": lambda: x.sum(**k, dtype=od) if dim is not None else x.sum(dtype=od),
            "prod_dtype": lambda: (
                x.prod(scan_dim, keepdim=keepdim, dtype=od) if nd else x.prod(dtype=od)
            ),
            "cumsum_dtype": lambda: x.cumsum(scan_dim, dtype=od),
            "cumprod_dtype": lambda: x.cumprod(scan_dim, dtype=od),
            "mean_dtype": lambda: x.mean(**k, dtype=od) if dim is not None else x.mean(dtype=od),
            "nansum_dtype": lambda: x.nansum(**k, dtype=od),
            "norm_dtype": lambda: lib.linalg.vector_norm(x, dim=dim, keepdim=keepdim, dtype=od),
            "max_dim": lambda: x.max(scan_dim, keepdim=keepdim) if nd else x.max(),
            "min_dim": lambda: x.min(scan_dim, keepdim=keepdim) if nd else x.min(),
            "aminmax": lambda: lib.aminmax(
                x, dim=scan_dim if dim is not None and nd else None, keepdim=keepdim
            ),
        }[op]()
        return [out], leaves

    tol = 1e-4 if "float32" in (dtype, out_dtype) or big else 1e-9
    if "float32" in (dtype, out_dtype) and big and op.startswith("cum"):
        tol = 1e-3  # (running sums of 16,384 float32 terms: rounding grows along the scan)
    return _trial(f"{op} {dtype}{list(shape)} dim={dim} keepdim={keepdim} dtype={out_dtype}",
                  body, _weight_fn(rng), rtol=tol)  # fmt: skip


# ---- ordering with ties, NaN and infinities ---------------------------------------------------

ORDERING = ("sort", "sort_desc", "argsort_stable", "argsort_stable_desc", "topk", "topk_small",
            "kthvalue", "max", "min", "argmax", "argmin", "cummax", "cummin", "median",
            "unique", "unique_dim", "msort", "maximum_nan", "fmax")  # fmt: skip


@gen("ordering")
def _ordering(rng):
    op = str(_pick(rng, *ORDERING))
    shape = _big_shape(rng, 1) if rng.random() < 0.3 else _shape(rng, 1, 3, 1, 6)
    dtype = str(_pick(rng, "float64", "float32", "int64"))
    pool = [-1.0, 0.0, -0.0, 0.5, 2.0, 2.0, -math.inf, math.inf, math.nan]
    # (no NaN into unique(dim=): torch's slice sort breaks on it, leaving equal slices apart
    # and out of order, [[1, nan, 1]] along dim 1 gives all three columns, counts [1, 1, 1])
    nan = rng.random() < 0.5 and op != "unique_dim"
    if not nan:
        pool = [v for v in pool if v == v]
    arr = np.array([pool[int(i)] for i in rng.integers(len(pool), size=int(np.prod(shape)))])
    if dtype == "int64":
        arr = np.nan_to_num(arr, nan=7, posinf=9, neginf=-9)
    arr = arr.reshape(shape)
    nd = len(shape)
    dim = int(rng.integers(-nd, nd))
    k = int(rng.integers(0, shape[dim] + 1)) if op != "topk_small" else min(1, shape[dim])
    tie_safe = op in ("sort", "sort_desc", "argsort_stable", "argsort_stable_desc",
                      "unique", "unique_dim", "maximum_nan", "fmax", "max", "min", "argmax",
                      "argmin", "cummax", "cummin")  # fmt: skip
    # (topk/kthvalue/median/msort: the element among ties whose gradient it is is torch's
    # kernel's choice (msort's sort is not stable past a few thousand rows); values only)
    other = rng.permutation(arr.reshape(-1)).reshape(shape)

    def body(lib):
        x = lib.tensor(arr, dtype=getattr(lib, dtype))
        if dtype != "int64" and tie_safe:
            x.requires_grad_(True)
        leaves = [x] if x.requires_grad else []
        out = {
            "sort": lambda: x.sort(dim=dim, stable=True),
            "sort_desc": lambda: x.sort(dim=dim, descending=True, stable=True),
            "argsort_stable": lambda: x.argsort(dim=dim, stable=True),
            "argsort_stable_desc": lambda: x.argsort(dim=dim, descending=True, stable=True),
            "topk": lambda: x.topk(k, dim, sorted=True).values,
            "topk_small": lambda: x.topk(k, dim, largest=False).values,
            "kthvalue": lambda: x.kthvalue(max(k, 1), dim).values,
            "max": lambda: x.max(dim).values,
            "min": lambda: x.min(dim).values,
            "argmax": lambda: x.argmax(dim),
            "argmin": lambda: x.argmin(dim),
            "cummax": lambda: x.cummax(dim),
            "cummin": lambda: x.cummin(dim),
            "median": lambda: x.median(dim).values,
            "unique": lambda: lib.unique(
                x.detach(), sorted=True, return_inverse=True, return_counts=True
            ),
            "unique_dim": lambda: lib.unique(x.detach(), dim=dim, return_counts=True),
            "msort": lambda: lib.msort(x),
            "maximum_nan": lambda: lib.maximum(x, lib.tensor(other, dtype=x.dtype)),
            "fmax": lambda: lib.fmax(x, lib.tensor(other, dtype=x.dtype)),
        }[op]()
        return [out], leaves

    return _trial(f"{op} {dtype}{list(shape)} dim={dim} k={k} nan={nan}", body,
                  _weight_fn(rng), rtol=1e-6)  # fmt: skip


# ---- index_reduce and scatter_reduce over large and small tensors --------------------------


@gen("index_reduce")
def _index_reduce(rng):
    c = lambda *v: _pick(rng, *v)  # noqa: E731
    form = c("index_reduce", "scatter_reduce", "index_add", "scatter_add")
    reduce = c("prod", "mean", "amax", "amin") if form == "index_reduce" else c(
        "sum", "prod", "mean", "amax", "amin")  # fmt: skip
    include_self = bool(rng.random() < 0.5)
    big = rng.random() < 0.3
    shape = (int(c(64, 256)), int(c(256, 1024))) if big else _shape(rng, 1, 3, 1, 5)
    dtype = c("float64", "float64", "float32")
    nd = len(shape)
    dim = int(rng.integers(-nd, nd))
    n_src = int(rng.integers(1, 6))
    src_shape = list(shape)
    src_shape[dim] = n_src
    index = rng.integers(0, shape[dim], size=n_src)  # duplicates likely
    if rng.random() < 0.05:
        index[0] = shape[dim]  # out of range: both refuse
    pool = [-1.0, 0.0, 0.5, 2.0, -2.0, 1.5] if not big else None
    xa = rng.choice(pool, size=shape) if pool else rng.standard_normal(shape)
    sa = rng.choice(pool, size=src_shape) if pool else rng.standard_normal(src_shape)
    scatter_index = rng.integers(0, shape[dim], size=src_shape)
    alpha = float(c(1.0, 0.5, -2.0))

    def body(lib):
        x = lib.tensor(xa, dtype=getattr(lib, dtype), requires_grad=True)
        src = lib.tensor(sa, dtype=getattr(lib, dtype), requires_grad=True)
        if form == "index_reduce":
            out = x.index_reduce(dim, lib.tensor(index), src, reduce, include_self=include_self)
        elif form == "index_add":
            out = x.index_add(dim, lib.tensor(index), src, alpha=alpha)
        elif form == "scatter_add":
            out = x.scatter_add(dim, lib.tensor(scatter_index), src)
        else:
            out = x.scatter_reduce(dim, lib.tensor(scatter_index), src, reduce,
                                   include_self=include_self)  # fmt: skip
        return [out], [x, src]

    # (amax/amin/prod among ties: torch splits the gradient evenly between equal values, as
    # retrograd; the values pool has ties on purpose)
    return _trial(
        f"{form} {reduce} include_self={include_self} {dtype}{list(shape)} dim={dim} "
        f"index={index.tolist() if form.startswith('index') else 'drawn'} alpha={alpha}",
        body,
        _weight_fn(rng),
        rtol=1e-9 if dtype == "float64" else 1e-4,
    )
