"""Random calls on edge inputs against PyTorch, round 83.

Each seeded case draws one call of a differentiable function -- elementwise math (unary, and
binary with broadcasting and Python numbers on either side), reductions with ``dim`` (an int,
a tuple, none) and ``keepdim``, the matmul family, ``cat``/``stack``/``split``/``chunk``,
``gather``/``scatter``/``scatter_add``/``index_select``/``index_add``, ``sort``/``topk``/
``cummax``/``kthvalue``, ``softmax``/``log_softmax`` (``dtype=``), vector and matrix norms,
``F.normalize``, ``layer_norm``, the pointwise losses, ``conv1d``/``conv2d``, max and average
pooling, ``interpolate`` and ``pad`` -- and runs it on torch 2.13 and on retrograd from the same
NumPy inputs. What rounds 49 (scalars), 53 (shapes) and 61 (views) draw little is drawn here:
*edge inputs* to every op --

* size-0 dims in any position and 0-d tensors;
* inputs that are views of a leaf: a transpose, a slice with a step, an ``expand`` (stride 0),
  a ``flip``, an ``as_strided`` window and an ``unfold``; gradients are taken at the leaf;
* values from a pool of NaN, +-inf, -0.0, subnormals of the dtype, huge values and ties;
* int64, int32 and bool inputs where torch promotes them, float32 beside float64, and Python
  ints, floats and bools as operands.

Compared: the number, dtypes and shapes of the results, their values (NaN positions, infinities,
the sign of a zero; float32 within float rounding), and the gradients at every float leaf for a
random upstream gradient (NaN positions too). Where torch raises, retrograd must raise an error
of its hierarchy (API.md section 7), of torch's class where that is an ``IndexError``,
``TypeError`` or ``ValueError`` (a ``ShapeError`` for torch's "Dimension out of range"
``IndexError``), and the leaves must stay usable: a backward through them runs after.

Left out where torch's behaviour is its kernels' accident or bug, or a difference this round
left (each marked where the generator avoids it; see the round's CHANGELOG entry): torch's
float32 ``layer_norm`` variance overflowing to NaN and float64 norms whose variance overflows;
``var``/``std``/``logsumexp`` of ``dim=()``; out-of-range ``take_along_dim`` indices;
mixed-dtype ``addmm``/``bmm`` of empty products; bool matrix products; zero input channels of
a convolution; infinities in ``scatter_reduce`` ``amax``/``amin``/``prod``; extreme entries
of p-norms other than 1, 2 and inf; signs of zero of float32 ``gelu``, ``maximum``/
``minimum`` ties, ``addmm`` and ``cross_entropy`` with probabilities; float32 tolerances
widened where two float32 kernels cancel differently (bicubic weights, convolutions).

``RETROGRAD_FUZZ83_SEEDS=N`` runs N seeds by hand, from ``RETROGRAD_FUZZ83_FIRST``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


FLOATS = ("float32", "float64")
INTS = ("int64", "int32")
ALL = (*FLOATS, *INTS, "bool")


# -- drawing inputs ----------------------------------------------------------------------------
def _specials(dtype: str, huge: bool = True) -> list[float]:
    tiny = 1e-45 if dtype == "float32" else 5e-324
    big = 3e38 if dtype == "float32" else 1e308
    pool = [np.nan, np.inf, -np.inf, -0.0, 0.0, tiny, -tiny, 1.0, -1.0, 0.5]
    return [*pool, big, -big] if huge else pool


def _values(rng, shape: tuple[int, ...], dtype: str, edge: float, huge: bool = True):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in INTS:
        return rng.integers(-4, 5, shape).astype(dtype)
    values = np.round(rng.normal(size=shape) * 1.5, 2)
    if edge and values.size:
        pool = _specials(dtype, huge)
        mask = rng.random(shape) < edge
        picks = np.array(pool)[rng.integers(0, len(pool), shape)]
        values = np.where(mask, picks, values)
    return np.asarray(values, dtype=dtype)


@dataclass
class Input:
    """A tensor drawn for both libraries: a leaf of ``base`` values made into a view of
    ``shape`` by ``layout``."""

    dtype: str
    shape: tuple[int, ...]
    layout: str
    base: np.ndarray
    view: Callable  # (lib, leaf) -> the op's input
    grad: bool

    def text(self) -> str:
        return f"{self.dtype}{list(self.shape)}~{self.layout}"


def _input(rng, shape, dtype, edge=0.15, layout=None, grad=True, huge=True) -> Input:
    shape = tuple(shape)
    nd = len(shape)
    layouts = ["plain", "plain", "transpose", "step", "expand", "flip", "strided", "unfold"]
    layout = layout or str(rng.choice(layouts))
    base_shape = shape

    def view(lib, t):
        return t

    if layout == "transpose" and nd >= 2:
        i, j = sorted(int(v) for v in rng.choice(nd, 2, replace=False))
        base_shape = list(shape)
        base_shape[i], base_shape[j] = shape[j], shape[i]

        def view(lib, t):
            return t.transpose(i, j)

    elif layout == "step" and nd >= 1:
        d = int(rng.integers(nd))
        step = int(rng.integers(2, 4))
        base_shape = list(shape)
        base_shape[d] = shape[d] * step
        key = (slice(None),) * d + (slice(None, None, step),)

        def view(lib, t):
            return t[key]

    elif layout == "expand" and nd >= 1:
        base_shape = [1 if rng.random() < 0.6 else n for n in shape]
        lead = int(rng.integers(0, 2)) if nd >= 2 and base_shape[0] == 1 else 0
        base_shape = base_shape[lead:]

        def view(lib, t):
            return t.expand(*shape)

    elif layout == "flip" and nd >= 1:
        dims = sorted({int(v) for v in rng.integers(0, nd, int(rng.integers(1, nd + 1)))})

        def view(lib, t):
            return t.flip(dims)

    elif layout == "strided" and nd >= 1:
        # a window of a flat leaf: strides of a contiguous layout, stretched (no overlap)
        strides, size = [], 1
        for n in reversed(shape):
            strides.insert(0, size)
            size *= max(n, 1) + int(rng.integers(0, 2))
        offset = int(rng.integers(0, 3))
        base_shape = [offset + size]
        strides = tuple(strides)

        def view(lib, t):
            return t.as_strided(shape, strides, offset)

    elif layout == "unfold" and nd >= 2 and shape[-2] > 0 and shape[-1] > 0:
        # the last dim the windows of an unfold along dim -2 (overlapping when step < size)
        step = int(rng.integers(1, 3))
        size = shape[-1]
        base_shape = list(shape[:-1])
        base_shape[-1] = (shape[-2] - 1) * step + size

        def view(lib, t):
            return t.unfold(nd - 2, size, step)

    else:
        layout = "plain"
    base = _values(rng, tuple(base_shape), dtype, edge, huge)
    return Input(dtype, shape, layout, base, view, grad and dtype in FLOATS)


def _shape(rng, nd=None, low=0, high=4, zero=0.12) -> tuple[int, ...]:
    nd = int(rng.integers(0, 4)) if nd is None else nd
    return tuple(
        0 if rng.random() < zero else int(rng.integers(max(low, 1), high)) for _ in range(nd)
    )


def _dtype(rng, choices=FLOATS) -> str:
    return str(rng.choice(choices))


def _dim(rng, nd: int) -> int:
    n = max(nd, 1)
    return int(rng.integers(-n, n))


def _broadcast_shape(rng, shape) -> tuple[int, ...]:
    """A shape that broadcasts with ``shape`` (fewer dims, ones), or rarely one that does not."""
    drop = int(rng.integers(0, len(shape) + 1))
    out = [1 if rng.random() < 0.3 else n for n in shape[drop:]]
    if out and rng.random() < 0.05:
        out[0] += 1  # (torch refuses it)
    return tuple(out)


# -- the calls ---------------------------------------------------------------------------------
@dataclass
class Call:
    text: str
    inputs: list[Input]
    run: Callable  # (lib, *tensors) -> a tensor, a tuple of them, or a number
    tolerance: float = 1.0  # a multiple of the dtype's tolerance
    zeros: bool = True  # whether the signs of zero results are compared


DRAWS: dict[str, Callable] = {}


def draw(name):
    def register(fn):
        DRAWS[name] = fn
        return fn

    return register


UNARY = {
    "exp": lambda lib, x: lib.exp(x), "log": lambda lib, x: lib.log(x),
    "sqrt": lambda lib, x: lib.sqrt(x), "abs": lambda lib, x: lib.abs(x),
    "neg": lambda lib, x: -x, "sin": lambda lib, x: lib.sin(x),
    "tanh": lambda lib, x: lib.tanh(x), "sigmoid": lambda lib, x: lib.sigmoid(x),
    "relu": lambda lib, x: lib.relu(x), "reciprocal": lambda lib, x: lib.reciprocal(x),
    "rsqrt": lambda lib, x: lib.rsqrt(x), "expm1": lambda lib, x: lib.expm1(x),
    "log1p": lambda lib, x: lib.log1p(x), "floor": lambda lib, x: lib.floor(x),
    "sign": lambda lib, x: lib.sign(x), "square": lambda lib, x: lib.square(x),
    "erf": lambda lib, x: lib.erf(x), "atan": lambda lib, x: lib.atan(x),
    "sinh": lambda lib, x: lib.sinh(x), "log2": lambda lib, x: lib.log2(x),
    "asin": lambda lib, x: lib.asin(x), "cosh": lambda lib, x: lib.cosh(x),
    "trunc": lambda lib, x: lib.trunc(x), "frac": lambda lib, x: lib.frac(x),
    "softplus": lambda lib, x: lib.nn.functional.softplus(x),
    "gelu": lambda lib, x: lib.nn.functional.gelu(x),
    "silu": lambda lib, x: lib.nn.functional.silu(x),
    "elu": lambda lib, x: lib.nn.functional.elu(x),
    "leaky_relu": lambda lib, x: lib.nn.functional.leaky_relu(x, 0.1),
    "hardtanh": lambda lib, x: lib.nn.functional.hardtanh(x),
    "logsigmoid": lambda lib, x: lib.nn.functional.logsigmoid(x),
    "nan_to_num": lambda lib, x: lib.nan_to_num(x),
    "clamp": lambda lib, x: lib.clamp(x, -1.0, 2),
    "clamp_min": lambda lib, x: x.clamp(min=0),
    "pow2": lambda lib, x: x**2, "pow_half": lambda lib, x: x**0.5,
    "pow_neg": lambda lib, x: x**-1.5, "rpow": lambda lib, x: 2.0**x,
    "sum_all": lambda lib, x: x.sum(),
}  # fmt: skip


@draw("unary")
def _unary(rng):
    name = str(rng.choice(sorted(UNARY)))
    # (no huge values to square: torch's gradient is (g * 2) * x in its float32 vectorized
    # loop, g * (2 * x) elsewhere, so inf or finite by layout; round 33 took the first)
    huge = name not in ("square", "pow2")
    dtype = _dtype(rng, ALL if rng.random() < 0.25 else FLOATS)
    x = _input(rng, _shape(rng), dtype, edge=0.3, huge=huge)
    # (torch's float32 gelu kernel makes -0.0 and negative subnormals +0.0, its float64 one
    # keeps -0.0: an accident of its vectorized loop)
    # (float32 kernels of erf, gelu and the like differ by up to 1.5e-5 relative in their tails)
    return Call(
        name,
        [x],
        UNARY[name],
        tolerance=5.0,
        zeros=not (name == "gelu" and x.dtype == "float32"),
    )


BINARY = {
    "add": lambda lib, a, b: a + b, "sub": lambda lib, a, b: a - b,
    "mul": lambda lib, a, b: a * b, "div": lambda lib, a, b: a / b,
    "pow": lambda lib, a, b: lib.pow(a, b), "maximum": lambda lib, a, b: lib.maximum(a, b),
    "minimum": lambda lib, a, b: lib.minimum(a, b), "atan2": lambda lib, a, b: lib.atan2(a, b),
    "hypot": lambda lib, a, b: lib.hypot(a, b), "fmod": lambda lib, a, b: lib.fmod(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "fmax": lambda lib, a, b: lib.fmax(a, b), "fmin": lambda lib, a, b: lib.fmin(a, b),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=2),
    "where": lambda lib, a, b: lib.where(a > b, a, b),
    "lerp": lambda lib, a, b: lib.lerp(a, b, 0.3),
    "addcmul": lambda lib, a, b: lib.addcmul(a, a, b, value=0.5),
}  # fmt: skip
SCALARS = [2, -1, 0, 2.5, -0.0, 0.0, 1e-300, float("inf"), float("nan"), True, 3e38]


@draw("binary")
def _binary(rng):
    name = str(rng.choice(sorted(BINARY)))
    shape = _shape(rng)
    dtypes = ALL if rng.random() < 0.3 else FLOATS
    # (no specials for fmod/remainder: torch's vectorized loop is NaN at a subnormal divisor,
    # its scalar tail exact; round 56 left it)
    edge = 0.0 if name in ("fmod", "remainder") else 0.3
    a = _input(rng, shape, _dtype(rng, dtypes), edge=edge)
    form = str(rng.choice(["tensor", "tensor", "scalar", "rscalar", "zero_d"]))
    if form in ("scalar", "rscalar") and name not in ("where", "lerp", "addcmul", "xlogy",
                                                        "maximum", "minimum", "fmax", "fmin",
                                                        "atan2", "hypot", "copysign"):  # fmt: skip
        s = SCALARS[int(rng.integers(len(SCALARS)))]
        fn = BINARY[name]
        if form == "scalar":
            return Call(f"{name}(x, {s!r})", [a], lambda lib, x: fn(lib, x, s))
        if name in ("add", "sub", "mul", "div", "pow"):
            return Call(f"{name}({s!r}, x)", [a], lambda lib, x: fn(lib, s, x))
    other = () if form == "zero_d" else _broadcast_shape(rng, shape)
    if rng.random() < 0.5:
        a, b = a, _input(rng, other, _dtype(rng, dtypes), edge=edge)
    else:
        a, b = _input(rng, other, _dtype(rng, dtypes), edge=edge), a
    # (the sign of a zero among tied 0.0 and -0.0 of maximum/minimum: round 33 left it)
    tie = name in ("maximum", "minimum", "fmax", "fmin")
    return Call(name, [a, b], BINARY[name], zeros=not tie)


def _dims_arg(rng, nd):
    roll = rng.random()
    if roll < 0.15:
        return None
    if roll < 0.35 and nd >= 2:
        k = int(rng.integers(1, nd + 1))
        return tuple(int(d) - nd * int(rng.integers(2)) for d in rng.choice(nd, k, replace=False))
    if roll < 0.4:
        return ()
    return _dim(rng, nd)


REDUCTIONS = {
    "sum": lambda lib, x, d, k: x.sum(d, keepdim=k) if d is not None else x.sum(),
    "mean": lambda lib, x, d, k: x.mean(d, keepdim=k) if d is not None else x.mean(),
    "nansum": lambda lib, x, d, k: lib.nansum(x, d, keepdim=k) if d is not None else x.nansum(),
    "amax": lambda lib, x, d, k: lib.amax(x, d if d is not None else (), keepdim=k),
    "amin": lambda lib, x, d, k: lib.amin(x, d if d is not None else (), keepdim=k),
    "logsumexp": lambda lib, x, d, k: lib.logsumexp(
        x, d if d is not None else tuple(range(x.ndim)), keepdim=k
    ),
    "var": lambda lib, x, d, k: lib.var(x, d, keepdim=k),
    "std": lambda lib, x, d, k: lib.std(x, d, correction=0, keepdim=k),
    "vector_norm": lambda lib, x, d, k: lib.linalg.vector_norm(x, 2, d, keepdim=k),
    "norm1": lambda lib, x, d, k: lib.linalg.vector_norm(x, 1, d, keepdim=k),
    "norm_inf": lambda lib, x, d, k: lib.linalg.vector_norm(x, float("inf"), d, keepdim=k),
    "norm_3": lambda lib, x, d, k: lib.linalg.vector_norm(x, 3, d, keepdim=k),
    "norm_0": lambda lib, x, d, k: lib.linalg.vector_norm(x, 0, d, keepdim=k),
    "count_nonzero": lambda lib, x, d, k: lib.count_nonzero(x, d),
    "all": lambda lib, x, d, k: lib.all(x, d, keepdim=k) if d is not None else x.all(),
    "any": lambda lib, x, d, k: lib.any(x, d, keepdim=k) if d is not None else x.any(),
    "sum_dtype": lambda lib, x, d, k: x.sum(d, keepdim=k, dtype=lib.float64)
    if d is not None else x.sum(dtype=lib.float64),
}  # fmt: skip
DIM_ONLY = {
    "prod": lambda lib, x, d, k: lib.prod(x, d, keepdim=k),
    "max": lambda lib, x, d, k: lib.max(x, d, keepdim=k),
    "min": lambda lib, x, d, k: lib.min(x, d, keepdim=k),
    "median": lambda lib, x, d, k: lib.median(x, d, keepdim=k),
    "argmax": lambda lib, x, d, k: lib.argmax(x, d, keepdim=k),
    "argmin": lambda lib, x, d, k: lib.argmin(x, d, keepdim=k),
    "cumsum": lambda lib, x, d, k: lib.cumsum(x, d),
    "cumprod": lambda lib, x, d, k: lib.cumprod(x, d),
    "logcumsumexp": lambda lib, x, d, k: lib.logcumsumexp(x, d),
    "cummax": lambda lib, x, d, k: lib.cummax(x, d),
    "cummin": lambda lib, x, d, k: lib.cummin(x, d),
    "sort": lambda lib, x, d, k: lib.sort(x, d, descending=k, stable=True),
    "argsort": lambda lib, x, d, k: lib.argsort(x, dim=d, descending=k, stable=True),
    "softmax": lambda lib, x, d, k: lib.softmax(x, d),
    "log_softmax": lambda lib, x, d, k: lib.log_softmax(x, d),
    "softmax_f64": lambda lib, x, d, k: lib.nn.functional.softmax(x, d, dtype=lib.float64),
    "log_softmax_f64": lambda lib, x, d, k: lib.nn.functional.log_softmax(x, d, dtype=lib.float64),
    "normalize": lambda lib, x, d, k: lib.nn.functional.normalize(x, dim=d),
    "prod_all": lambda lib, x, d, k: lib.prod(x),
    "max_all": lambda lib, x, d, k: x.max(),
    "min_all": lambda lib, x, d, k: x.min(),
    "median_all": lambda lib, x, d, k: x.median(),
}  # fmt: skip


@draw("reduction")
def _reduction(rng):
    shape = _shape(rng)
    nd = len(shape)
    dtypes = ALL if rng.random() < 0.3 else FLOATS
    keep = bool(rng.random() < 0.5)
    if rng.random() < 0.5:
        name = str(rng.choice(sorted(REDUCTIONS)))
        d = _dims_arg(rng, nd)
        if d == () and name in ("var", "std", "logsumexp"):
            # (torch's var/std of dim=() reduce everything, but their backward divides by
            # the count of no dims: gradients infinite or wrong, a torch bug, ours right;
            # its logsumexp of dim=() refuses an expanded input, "output with shape []
            # doesn't match the broadcast shape [1]")
            d = None
        fn = REDUCTIONS[name]
    else:
        name = str(rng.choice(sorted(DIM_ONLY)))
        # (an out-of-range dim only of a non-empty tensor: torch's cummin/cummax of an empty
        # one return without checking it)
        d = _dim(rng, nd) if rng.random() < 0.95 or 0 in shape else nd + 1
        fn = DIM_ONLY[name]
    # (no specials for a p-norm of p=3: over dims of size 1 torch's norm_backward overflows
    # its powers to NaN at huge, subnormal, infinite and NaN entries; ours is |x|'s)
    edge = float(rng.choice([0.0, 0.2, 0.5])) if name != "norm_3" else 0.0
    # (no expanded input to median: torch's median along a dim of an input whose strides
    # are all 0 reads past it, a denormal garbage value that changes from run to run)
    layout = "plain" if name == "median" else None
    # (no huge values to var/std: torch's strided reduction of [-1e308, -1e308] is 0, its
    # contiguous one inf, as ours)
    huge = name not in ("var", "std")
    if nd == 0 and "norm" in name and isinstance(d, int):
        # (torch's norm of a 0-d tensor along dim 0 squares it, 0 at a subnormal, where
        # along no dim it is |x|, as ours always)
        edge = 0.0
    x = _input(rng, shape, _dtype(rng, dtypes), edge=edge, layout=layout, huge=huge)
    return Call(f"{name}(dim={d}, keepdim={keep})", [x], lambda lib, t: fn(lib, t, d, keep))


@draw("selection")
def _selection(rng):
    shape = _shape(rng, nd=int(rng.integers(0, 4)))
    nd = len(shape)
    x = _input(rng, shape, _dtype(rng, FLOATS if rng.random() < 0.8 else ALL), edge=0.3)
    d = _dim(rng, nd)
    size = shape[d] if nd else 1
    kind = str(rng.choice(["topk", "kthvalue", "topk_small"]))
    k = int(rng.integers(0, size + 2)) if kind != "kthvalue" else int(rng.integers(1, size + 2))
    if kind.startswith("topk"):
        largest = bool(rng.random() < 0.5)
        return Call(f"topk(k={k}, dim={d}, largest={largest})", [x],
                    lambda lib, t: lib.topk(t, k, d, largest=largest, sorted=True))  # fmt: skip
    keep = bool(rng.random() < 0.5)
    return Call(f"kthvalue(k={k}, dim={d}, keepdim={keep})", [x],
                lambda lib, t: lib.kthvalue(t, k, d, keepdim=keep))  # fmt: skip


@draw("matmul")
def _matmul(rng):
    n, m, p, b = (0 if rng.random() < 0.15 else int(rng.integers(1, 4)) for _ in range(4))
    # (no bool: torch's kernels refuse it, but for an empty product, which it returns)
    dtypes = FLOATS if rng.random() < 0.8 else (*FLOATS, *INTS)
    da = _dtype(rng, dtypes)
    db = da if rng.random() < 0.8 else _dtype(rng, dtypes)
    kind = str(rng.choice(["matmul", "mm", "bmm", "mv", "dot", "outer", "einsum", "addmm",
                           "baddbmm", "linear", "tensordot", "matmul_1d", "vdot"]))  # fmt: skip
    # (no huge values: a float32 sum of products that overflows is inf or NaN by the kernel's
    # order, NumPy's BLAS against torch's; matrix products and convolutions alike)
    edge = float(rng.choice([0.0, 0.1]))
    if kind in ("addmm", "baddbmm") or 0 in (n, m, p, b):
        # (one float dtype: torch refuses mixed dtypes, and float factors of integer tensors,
        # but not for an empty product, which it returns; and a beta of 0 with an empty
        # product gives torch +0.0 where alpha * 0 is -0.0 for a negative alpha: signs left)
        da = db = _dtype(rng)
    if kind == "matmul":
        sa = (b,) * int(rng.integers(0, 2)) + (n, m)
        sb = (1,) * int(rng.integers(0, 2)) + (m if rng.random() < 0.95 else m + 1, p)
        shapes = [sa, sb]
        fn = lambda lib, x, y: lib.matmul(x, y)  # noqa: E731
    elif kind == "matmul_1d":
        shapes = [(m,), (b, m, p)] if rng.random() < 0.5 else [(b, n, m), (m,)]
        fn = lambda lib, x, y: x @ y  # noqa: E731
    elif kind == "mm":
        shapes = [(n, m), (m, p)]
        fn = lambda lib, x, y: lib.mm(x, y)  # noqa: E731
    elif kind == "bmm":
        shapes = [(b, n, m), (b, m, p)]
        fn = lambda lib, x, y: lib.bmm(x, y)  # noqa: E731
    elif kind == "mv":
        shapes = [(n, m), (m,)]
        fn = lambda lib, x, y: lib.mv(x, y)  # noqa: E731
    elif kind in ("dot", "vdot"):
        shapes = [(m,), (m,)]
        fn = (
            (lambda lib, x, y: lib.dot(x, y))
            if kind == "dot"
            else (lambda lib, x, y: lib.vdot(x, y))
        )
    elif kind == "outer":
        shapes = [(n,), (p,)]
        fn = lambda lib, x, y: lib.outer(x, y)  # noqa: E731
    elif kind == "einsum":
        shapes = [(b, n, m), (m, p)]
        fn = lambda lib, x, y: lib.einsum("bnm,mp->bpn", x, y)  # noqa: E731
    elif kind == "addmm":
        shapes = [(n, m), (m, p)]
        c = _input(rng, _broadcast_shape(rng, (n, p)), da, edge, huge=False)
        beta, alpha = float(rng.choice([0.0, 1.0, 0.5])), float(rng.choice([1.0, -2.0]))
        inputs = [
            c,
            _input(rng, shapes[0], da, edge, huge=False),
            _input(rng, shapes[1], db, edge, huge=False),
        ]
        return Call(f"addmm(beta={beta}, alpha={alpha})", inputs,
                    lambda lib, c, x, y: lib.addmm(c, x, y, beta=beta, alpha=alpha),
                    zeros=False)  # fmt: skip
    elif kind == "baddbmm":
        shapes = [(b, n, m), (b, m, p)]
        c = _input(rng, _broadcast_shape(rng, (b, n, p)), da, edge, huge=False)
        inputs = [
            c,
            _input(rng, shapes[0], da, edge, huge=False),
            _input(rng, shapes[1], db, edge, huge=False),
        ]
        return Call("baddbmm(beta=0.5)", inputs,
                    lambda lib, c, x, y: lib.baddbmm(c, x, y, beta=0.5))  # fmt: skip
    elif kind == "linear":
        shapes = [(b, n, m), (p, m)]
        bias = _input(rng, (p,), db, edge, huge=False) if rng.random() < 0.5 else None
        inputs = [
            _input(rng, shapes[0], da, edge, huge=False),
            _input(rng, shapes[1], db, edge, huge=False),
        ]
        if bias is None:
            return Call(
                "linear", inputs, lambda lib, x, w: lib.nn.functional.linear(x, w), zeros=False
            )
        return Call("linear(bias)", [*inputs, bias],
                    lambda lib, x, w, c: lib.nn.functional.linear(x, w, c),
                    zeros=False)  # fmt: skip
    else:  # tensordot
        shapes = [(b, n, m), (m, n, p)]
        fn = lambda lib, x, y: lib.tensordot(x, y, dims=([1, 2], [1, 0]))  # noqa: E731
    inputs = [
        _input(rng, shapes[0], da, edge, huge=False),
        _input(rng, shapes[1], db, edge, huge=False),
    ]
    # (the sign of a zero sum of products is the BLAS kernel's: torch's einsum gives -0.0
    # where NumPy's and torch's other products give +0.0)
    return Call(kind, inputs, fn, zeros=False)


@draw("join")
def _join(rng):
    shape = _shape(rng, nd=int(rng.integers(0, 4)))
    nd = len(shape)
    dtypes = FLOATS if rng.random() < 0.7 else ALL
    kind = str(rng.choice(["cat", "stack", "split", "chunk", "split_sizes", "unbind", "hstack"]))
    d = _dim(rng, nd)
    if kind in ("cat", "stack", "hstack"):
        count = int(rng.integers(1, 4))
        inputs = []
        for _ in range(count):
            s = list(shape)
            if kind == "cat" and nd and rng.random() < 0.6:
                s[d] = int(rng.integers(0, 3))
            if rng.random() < 0.05 and nd:  # (a mismatch torch refuses)
                s[int(rng.integers(nd))] += 1
            inputs.append(_input(rng, s, _dtype(rng, dtypes), edge=0.1))
        if kind == "stack":
            d = int(rng.integers(-nd - 1, nd + 1))
        fn = getattr(torch, kind)  # (its name)
        return Call(f"{kind}(dim={d})" if kind != "hstack" else kind, inputs,
                    (lambda lib, *ts: getattr(lib, fn.__name__)(ts, dim=d)) if kind != "hstack"
                    else (lambda lib, *ts: lib.hstack(ts)))  # fmt: skip
    x = _input(rng, shape, _dtype(rng, dtypes), edge=0.1)
    size = shape[d] if nd else 0
    if kind == "split":
        n = int(rng.integers(1, 4))
        return Call(f"split({n}, dim={d})", [x], lambda lib, t: lib.split(t, n, dim=d))
    if kind == "split_sizes":
        sizes = []
        left = size
        while left > 0:
            sizes.append(int(rng.integers(0, left + 1)))
            left -= sizes[-1]
        sizes.append(0) if rng.random() < 0.3 else None
        if rng.random() < 0.05:
            sizes.append(1)
        return Call(f"split({sizes}, dim={d})", [x], lambda lib, t: t.split(sizes, dim=d))
    if kind == "chunk":
        n = int(rng.integers(1, 5))
        return Call(f"chunk({n}, dim={d})", [x], lambda lib, t: lib.chunk(t, n, dim=d))
    return Call(f"unbind(dim={d})", [x], lambda lib, t: lib.unbind(t, dim=d))


@draw("index")
def _index(rng):
    shape = _shape(rng, nd=int(rng.integers(1, 4)))
    nd = len(shape)
    d = _dim(rng, nd)
    size = shape[d]
    x = _input(rng, shape, _dtype(rng, FLOATS if rng.random() < 0.8 else ALL), edge=0.2)
    kind = str(rng.choice(["gather", "scatter", "scatter_add", "index_select", "index_add",
                           "take_along_dim", "scatter_reduce", "index_fill"]))  # fmt: skip
    bad = rng.random() < 0.05
    high = size + (2 if bad else 0)

    def index_values(n_shape):
        if high == 0:
            return np.zeros(n_shape, dtype="int64")
        return rng.integers(-high if bad else 0, high, n_shape).astype("int64")

    if kind == "take_along_dim":
        bad, high = False, size  # (torch's take_along_dim reads out of bounds unchecked)
    if kind in ("index_select", "index_add", "index_fill"):
        n = int(rng.integers(0, 4))
        idx = index_values((n,)) if high else np.zeros((0,), "int64")
        if kind == "index_select":
            return Call(f"index_select(dim={d}, {idx.tolist()})", [x],
                        lambda lib, t: lib.index_select(t, d, lib.tensor(idx)))  # fmt: skip
        if kind == "index_fill":
            return Call(f"index_fill(dim={d}, {idx.tolist()})", [x],
                        lambda lib, t: t.index_fill(d, lib.tensor(idx), -0.0))  # fmt: skip
        src_shape = list(shape)
        src_shape[d] = n
        src = _input(rng, src_shape, x.dtype, edge=0.2)
        alpha = float(rng.choice([1.0, -0.5]))
        return Call(f"index_add(dim={d}, {idx.tolist()}, alpha={alpha})", [x, src],
                    lambda lib, t, s: t.index_add(d, lib.tensor(idx), s, alpha=alpha))  # fmt: skip
    idx_shape = tuple(int(rng.integers(0, n + 1)) for n in shape)
    if kind == "gather" or kind == "take_along_dim":
        idx_shape = list(shape)
        idx_shape[d] = int(rng.integers(0, 4))
        idx = index_values(tuple(idx_shape)) if high else np.zeros(idx_shape, "int64")
        if kind == "gather":
            return Call(f"gather(dim={d}, {idx_shape})", [x],
                        lambda lib, t: lib.gather(t, d, lib.tensor(idx)))  # fmt: skip
        return Call(f"take_along_dim(dim={d}, {idx_shape})", [x],
                    lambda lib, t: lib.take_along_dim(t, lib.tensor(idx), d))  # fmt: skip
    # scatter family: index no larger than src; unique positions for scatter (torch leaves
    # the order of duplicate writes open)
    src = _input(rng, idx_shape, x.dtype, edge=0.2)
    if kind == "scatter":
        idx = np.zeros(idx_shape, "int64")
        if size and idx.size:
            axis = d % nd
            perm = np.argsort(
                rng.random((*idx_shape[:axis], size, *idx_shape[axis + 1 :])), axis=axis
            )
            idx = np.take(perm, range(idx_shape[axis]), axis=axis).astype("int64")
        if bad and idx.size:
            idx.flat[0] = size + 1
        return Call(f"scatter(dim={d}, {idx_shape})", [x, src],
                    lambda lib, t, s: lib.scatter(t, d, lib.tensor(idx), s))  # fmt: skip
    idx = index_values(idx_shape) if high else np.zeros(idx_shape, "int64")
    if kind == "scatter_add":
        return Call(f"scatter_add(dim={d}, {idx_shape})", [x, src],
                    lambda lib, t, s: lib.scatter_add(t, d, lib.tensor(idx), s))  # fmt: skip
    reduce = str(rng.choice(["sum", "prod", "mean", "amax", "amin"]))
    if reduce in ("amax", "amin", "prod"):
        # (no specials: retrograd's amax/amin rule gives an infinite winner no gradient,
        # torch's its share; torch's prod gradient is NaN at some zeros where ours is
        # finite; left)
        x = _input(rng, shape, x.dtype, edge=0.0)
        src = _input(rng, idx_shape, x.dtype, edge=0.0)
    include = bool(rng.random() < 0.5)
    return Call(f"scatter_reduce(dim={d}, {idx_shape}, {reduce}, include_self={include})",
                [x, src], lambda lib, t, s: lib.scatter_reduce(t, d, lib.tensor(idx), s, reduce,
                                                               include_self=include))  # fmt: skip


LOSSES = ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits",
          "kl_div", "soft_margin_loss", "poisson_nll_loss"]  # fmt: skip


@draw("loss")
def _loss(rng):
    shape = _shape(rng)
    dtype = _dtype(rng)
    name = str(rng.choice([*LOSSES, "cross_entropy", "nll_loss", "cross_entropy_probs"]))
    reduction = str(rng.choice(["mean", "sum", "none"]))
    edge = float(rng.choice([0.0, 0.2]))
    if name in LOSSES:
        x = _input(rng, shape, dtype, edge)
        other = shape if rng.random() < 0.9 else _broadcast_shape(rng, shape)
        y = _input(
            rng, other, dtype if rng.random() < 0.9 else _dtype(rng), edge, grad=rng.random() < 0.5
        )
        return Call(f"{name}({reduction})", [x, y],
                    lambda lib, a, b: getattr(lib.nn.functional, name)(
                        a, b, reduction=reduction))  # fmt: skip
    n, c = (0 if rng.random() < 0.15 else int(rng.integers(1, 4))), int(rng.integers(1, 4))
    extra = _shape(rng, nd=int(rng.integers(0, 2)), zero=0.1)
    x = _input(rng, (n, c, *extra), dtype, edge)
    if name == "cross_entropy_probs":
        y = _input(rng, (n, c, *extra), dtype, 0.0, grad=False)
        smoothing = float(rng.choice([0.0, 0.1]))
        # (torch negates its sum of y * log_softmax(x): a zero loss is -0.0, ours +0.0; left)
        return Call(f"cross_entropy(probs, {reduction}, ls={smoothing})", [x, y],
                    lambda lib, a, b: lib.nn.functional.cross_entropy(
                        a, b.softmax(1), reduction=reduction, label_smoothing=smoothing),
                    zeros=False)  # fmt: skip
    target = rng.integers(0, c, (n, *extra)).astype("int64")
    ignore = -100 if rng.random() < 0.6 else int(rng.integers(0, c))
    if name == "nll_loss":
        return Call(f"nll_loss({reduction}, ignore={ignore})", [x],
                    lambda lib, a: lib.nn.functional.nll_loss(
                        a, lib.tensor(target), reduction=reduction,
                        ignore_index=ignore))  # fmt: skip
    return Call(f"cross_entropy({reduction}, ignore={ignore})", [x],
                lambda lib, a: lib.nn.functional.cross_entropy(
                    a, lib.tensor(target), reduction=reduction, ignore_index=ignore))  # fmt: skip


@draw("norm")
def _norm(rng):
    shape = _shape(rng, nd=int(rng.integers(1, 4)))
    # (float64 only: float32 norms of near-constant rows (an expanded input) differ between
    # two float32 kernels by far more than float rounding; round 74 compares them)
    dtype = "float64"
    # (no huge values: retrograd's NumPy layer norm takes a float32 row's moments in float64,
    # torch's in float32, whose variance overflows to NaN at 3e38 where ours is finite; a
    # float64 variance that overflows is NaN in torch's layer norm (Welford's updates) and
    # in torch's composed rms_norm gradient (inf * 0), 0 in ours; left)
    edge = float(rng.choice([0.0, 0.2]))
    x = _input(rng, shape, dtype, edge=edge, huge=False)
    kind = str(rng.choice(["layer_norm", "matrix_norm", "rms_norm", "norm_p"]))
    if kind == "layer_norm":
        if x.layout == "expand":
            # (no constant rows: the NumPy kernel's float64 mean of three equal values can be
            # an ulp off them, 2e-15 after scaling where torch's Welford mean gives 0; left)
            x = _input(rng, shape, dtype, edge=edge, layout="plain", huge=False)
        k = int(rng.integers(1, len(shape) + 1))
        normalized = shape[-k:]
        affine = bool(rng.random() < 0.5)
        inputs = [x]
        if affine:
            inputs += [_input(rng, normalized, dtype, 0.0), _input(rng, normalized, dtype, 0.0)]
        # (the sign of a zero output: (x - mean) of a row of one -0.0; left)
        return Call(f"layer_norm({normalized}, affine={affine})", inputs,
                    lambda lib, t, *wb: lib.nn.functional.layer_norm(
                        t, normalized, *wb), zeros=False)  # fmt: skip
    if kind == "rms_norm":
        normalized = shape[-1:]
        return Call(f"rms_norm({normalized})", [x],
                    lambda lib, t: lib.nn.functional.rms_norm(t, normalized))  # fmt: skip
    if kind == "matrix_norm" and len(shape) >= 2:
        ord_ = rng.choice(["fro", 1, -1, float("inf")])
        ord_ = ord_.item() if hasattr(ord_, "item") else ord_
        return Call(f"matrix_norm({ord_!r})", [x], lambda lib, t: lib.linalg.matrix_norm(t, ord_))
    p = float(rng.choice([1.0, 2.0, 0.5, 3.0]))
    d = _dim(rng, len(shape))
    if p not in (1.0, 2.0):  # (as norm_3 of the reductions)
        x = _input(rng, shape, dtype, edge=0.0)
    return Call(f"norm(p={p}, dim={d})", [x], lambda lib, t: t.norm(p=p, dim=d))


@draw("conv")
def _conv(rng):
    dims = int(rng.integers(1, 3))
    n = 0 if rng.random() < 0.15 else int(rng.integers(1, 3))
    groups = int(rng.choice([1, 1, 2]))
    # (no zero input channels: torch's output then has no output channels either, left in
    # round 24)
    cin = groups * int(rng.integers(1, 3))
    cout = groups * int(rng.integers(1, 3))
    k = tuple(int(rng.integers(1, 4)) for _ in range(dims))
    spatial = tuple(int(rng.integers(0 if rng.random() < 0.1 else 1, 6)) for _ in range(dims))
    stride = int(rng.integers(1, 3))
    padding = rng.choice([0, 1, "same", "valid"])
    padding = padding.item() if hasattr(padding, "item") else str(padding)
    if padding == "same":
        stride = 1
    dilation = int(rng.integers(1, 3))
    dtype = _dtype(rng)
    batched = rng.random() < 0.85
    xs = (n, cin, *spatial) if batched else (cin, *spatial)
    x = _input(rng, xs, dtype, edge=float(rng.choice([0.0, 0.1])), huge=False)
    w = _input(rng, (cout, cin // groups, *k), dtype, 0.0)
    inputs = [x, w]
    bias = rng.random() < 0.5
    if bias:
        inputs.append(_input(rng, (cout,), dtype, 0.0))
    name = f"conv{dims}d"
    # (float32 sums of products cancel: two kernels' orders differ by 2e-5 relative)
    text = f"{name}(stride={stride}, padding={padding!r}, dilation={dilation}, groups={groups})"
    return Call(text,
                inputs, lambda lib, t, wt, *b: getattr(lib.nn.functional, name)(
                    t, wt, b[0] if b else None, stride=stride, padding=padding,
                    dilation=dilation, groups=groups), tolerance=10.0)  # fmt: skip


@draw("pool")
def _pool(rng):
    dims = int(rng.integers(1, 3))
    n, c = (0 if rng.random() < 0.1 else int(rng.integers(1, 3))), int(rng.integers(1, 3))
    spatial = tuple(int(rng.integers(0 if rng.random() < 0.05 else 1, 6)) for _ in range(dims))
    batched = rng.random() < 0.8
    shape = (n, c, *spatial) if batched else (c, *spatial)
    # (no huge values: a float32 window sum that overflows depends on the kernel's order,
    # torch's own differing between layouts)
    x = _input(rng, shape, _dtype(rng), edge=float(rng.choice([0.0, 0.3])), huge=False)
    kind = str(rng.choice(["max", "avg", "adaptive_avg", "adaptive_max", "lp"]))
    k = int(rng.integers(1, 4))
    stride = rng.choice([None, 1, 2])
    stride = None if stride is None else int(stride)
    padding = int(rng.integers(0, 2)) if k > 1 else 0
    ceil = bool(rng.random() < 0.3)
    if kind == "max":
        name = f"max_pool{dims}d"
        indices = bool(rng.random() < 0.3)
        return Call(f"{name}({k}, {stride}, {padding}, ceil={ceil}, indices={indices})", [x],
                    lambda lib, t: getattr(lib.nn.functional, name)(
                        t, k, stride, padding, ceil_mode=ceil, return_indices=indices))  # fmt: skip
    if kind == "avg":
        name = f"avg_pool{dims}d"
        include = bool(rng.random() < 0.5)
        return Call(f"{name}({k}, {stride}, {padding}, ceil={ceil}, include={include})", [x],
                    lambda lib, t: getattr(lib.nn.functional, name)(
                        t, k, stride, padding, ceil_mode=ceil,
                        count_include_pad=include))  # fmt: skip
    if kind == "lp":
        name = f"lp_pool{dims}d"
        p = float(rng.choice([1.0, 2.0, 3.0]))
        return Call(f"{name}({p}, {k}, {stride}, ceil={ceil})", [x],
                    lambda lib, t: getattr(lib.nn.functional, name)(
                        t, p, k, stride, ceil))  # fmt: skip
    out = tuple(int(rng.integers(1, 4)) for _ in range(dims))
    name = f"{kind}_pool{dims}d"
    if kind == "adaptive_max":
        # (no NaN: torch's adaptive max pool takes a window's last NaN, ours its first; left)
        x = _input(rng, shape, x.dtype, edge=0.0)
    return Call(f"{name}({out})", [x], lambda lib, t: getattr(lib.nn.functional, name)(t, out))


@draw("resize")
def _resize(rng):
    dims = int(rng.integers(1, 3))
    n, c = (0 if rng.random() < 0.1 else int(rng.integers(1, 3))), int(rng.integers(1, 3))
    spatial = tuple(int(rng.integers(1, 5)) for _ in range(dims))
    # (no huge values: a float32 window sum that overflows depends on the kernel's order)
    # (no specials where an axis has one element or for bicubic: torch's linear upsampling of
    # one element keeps an infinity, ours is NaN (inf * 0); NumPy's bicubic is NaN near
    # infinities where torch's is finite; left)
    edge = 0.0 if 1 in spatial else float(rng.choice([0.0, 0.2]))
    x = _input(rng, (n, c, *spatial), _dtype(rng), edge=edge, huge=False)
    if rng.random() < 0.5:
        modes = ["nearest", "linear" if dims == 1 else "bilinear", "nearest-exact", "area"]
        if dims == 2:
            modes.append("bicubic")
        mode = str(rng.choice(modes))
        if mode == "bicubic":
            x = _input(rng, (n, c, *spatial), x.dtype, edge=0.0)
        align = bool(rng.random() < 0.5) if mode in ("linear", "bilinear", "bicubic") else None
        # (float32 weights cancel: two float32 kernels differ by 4e-5 relative in bicubic,
        # 3e-8 absolute around a zero in linear; "area" is an adaptive average whose zero
        # signs are its window order's)
        tolerance = 10.0
        if rng.random() < 0.5:
            size = tuple(int(rng.integers(1, 6)) for _ in range(dims))
            return Call(f"interpolate(size={size}, {mode}, align={align})", [x],
                        lambda lib, t: lib.nn.functional.interpolate(
                            t, size=size, mode=mode, align_corners=align),
                        tolerance=tolerance, zeros=mode != "area")  # fmt: skip
        scale = float(rng.choice([0.5, 1.5, 2.0, 3.0]))
        return Call(f"interpolate(scale={scale}, {mode}, align={align})", [x],
                    lambda lib, t: lib.nn.functional.interpolate(
                        t, scale_factor=scale, mode=mode, align_corners=align),
                    tolerance=tolerance, zeros=mode != "area")  # fmt: skip
    mode = str(rng.choice(["constant", "reflect", "replicate", "circular"]))
    pads = tuple(int(rng.integers(-1 if mode == "constant" else 0, 3)) for _ in range(2 * dims))
    value = float(rng.choice([0.0, -0.0, 1.5, float("nan")]))
    kwargs = {"value": value} if mode == "constant" else {}
    return Call(f"pad({pads}, {mode}, {kwargs})", [x],
                lambda lib, t: lib.nn.functional.pad(t, pads, mode=mode, **kwargs))  # fmt: skip


# -- running and comparing ---------------------------------------------------------------------
def _np(t) -> np.ndarray:
    return t.detach().numpy().copy()


def _dt(t) -> str:
    return str(t.dtype).replace("torch.", "").replace("retrograd.", "")


def _flat(out) -> list:
    if isinstance(out, (list, tuple)):
        return [v for item in out for v in _flat(item)]
    return [out]


def _close(
    where: str,
    got: np.ndarray,
    want: np.ndarray,
    dtype: str,
    scale: float,
    zeros: bool,
    gradient: bool = False,
):
    if got.shape != want.shape:
        raise Mismatch(f"{where}: shape {got.shape}, torch {want.shape}")
    if want.dtype.kind not in "fc":
        if not np.array_equal(got, want):
            raise Mismatch(f"{where}: {got.tolist()}, torch {want.tolist()}")
        return
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    if not np.array_equal(nan_got, nan_want):
        raise Mismatch(f"{where}: NaN at {np.argwhere(nan_got ^ nan_want)[:4].tolist()}: "
                       f"{got[nan_got ^ nan_want][:4]}, "
                       f"torch {want[nan_got ^ nan_want][:4]}")  # fmt: skip
    inf = np.isinf(want) | np.isinf(got)
    if not np.array_equal(got[inf], want[inf]):
        raise Mismatch(f"{where}: infinities {got[inf][:6]}, torch {want[inf][:6]}")
    ok = ~(nan_want | inf)
    rtol = (1e-5 if dtype == "float32" else 1e-10) * scale
    # (values within the dtype's subnormals of each other agree: torch's float32 log1p of
    # -1e-45 is 0)
    tiny = np.finfo(want.dtype).tiny if want.dtype.kind == "f" else 1e-300
    largest = float(np.abs(want[ok]).max(initial=0.0))
    # a gradient's rounding is relative to the terms it sums, not to its value (a layer norm
    # of two elements: exactly 0, float32's 4e-8)
    atol = max(rtol * (max(largest, 1.0) * 1e-2 if gradient else largest * 1e-3), tiny)
    np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=atol, err_msg=where)
    if zeros:
        zero = ok & (want == 0) & (got == 0)
        if not np.array_equal(np.signbit(got[zero]), np.signbit(want[zero])):
            raise Mismatch(f"{where}: signs of zero {got[zero][:6]}, torch {want[zero][:6]}")


def _expected_error(where: str, error: Exception, theirs: Exception) -> None:
    if not isinstance(error, rg.RetrogradError):
        raise Mismatch(f"{where}: {error!r} is outside the hierarchy, torch raised {theirs!r}")
    if isinstance(theirs, IndexError) and (
        str(theirs).startswith("Dimension ") or "dim -1 or 0 for scalar" in str(theirs)
    ):
        if not isinstance(error, rg.ShapeError):
            raise Mismatch(f"{where}: {error!r}, torch's {theirs!r} (a ShapeError expected)")
    elif isinstance(theirs, (IndexError, TypeError, ValueError)) and not isinstance(
        error, type(theirs)
    ):
        raise Mismatch(f"{where}: {error!r} is no {type(theirs).__name__}: torch's {theirs!r}")


def _leaves(lib, call: Call):
    leaves = []
    for spec in call.inputs:
        t = lib.tensor(spec.base, dtype=getattr(lib, spec.dtype))
        if spec.grad:
            t.requires_grad_()
        leaves.append(t)
    return leaves


def _run(seed: int) -> None:
    rng = np.random.default_rng(seed)
    family = str(rng.choice(sorted(DRAWS)))
    call = DRAWS[family](rng)
    # a float64 result of a float32 input carries float32's rounding (each library's float32
    # kernel rounds its own way): compared within float32's tolerance
    single = any(spec.dtype == "float32" for spec in call.inputs)
    where = f"seed {seed}: {call.text} of {[s.text() for s in call.inputs]}"
    results = {}
    for lib in (torch, rg):
        leaves = _leaves(lib, call)
        try:
            views = [spec.view(lib, t) for spec, t in zip(call.inputs, leaves)]
        except Exception as error:  # a view itself refused (compared below too)
            results[lib] = (leaves, None, error)
            continue
        try:
            results[lib] = (leaves, call.run(lib, *views), None)
        except Exception as error:  # (compared below)
            results[lib] = (leaves, None, error)
    (leaves_t, out_t, err_t), (leaves, out, err) = results[torch], results[rg]
    if err_t is not None:
        if err is None:
            raise Mismatch(f"{where}: retrograd returned, torch raised {err_t!r}")
        _expected_error(where, err, err_t)
        _still_usable(where, leaves)
        return
    if err is not None:
        raise Mismatch(f"{where}: retrograd raised {err!r}, torch returned") from err
    outs_t, outs = _flat(out_t), _flat(out)
    if len(outs_t) != len(outs):
        raise Mismatch(f"{where}: {len(outs)} results, torch {len(outs_t)}")
    for k, (a, b) in enumerate(zip(outs, outs_t)):
        if not isinstance(b, torch.Tensor):
            if a != b and not (a != a and b != b):
                raise Mismatch(f"{where} result {k}: {a!r}, torch {b!r}")
            continue
        if not isinstance(a, rg.Tensor):
            raise Mismatch(f"{where} result {k}: {type(a).__name__}, torch a tensor")
        if _dt(a) != _dt(b) or tuple(a.shape) != tuple(b.shape):
            raise Mismatch(f"{where} result {k}: {_dt(a)}{list(a.shape)}, torch "
                           f"{_dt(b)}{list(b.shape)}")  # fmt: skip
        if a.requires_grad != b.requires_grad:
            raise Mismatch(f"{where} result {k}: requires_grad {a.requires_grad}, torch's "
                           f"{b.requires_grad}")  # fmt: skip
        kind = "float32" if single else _dt(b)
        _close(f"{where} result {k}", _np(a), _np(b), kind, call.tolerance, zeros=call.zeros)
    # gradients of the float results for a random upstream gradient
    pairs = [(a, b) for a, b in zip(outs, outs_t)
             if isinstance(b, torch.Tensor) and b.requires_grad]  # fmt: skip
    wrt = [k for k, spec in enumerate(call.inputs) if spec.grad]
    if not pairs or not wrt:
        return
    ups = [np.round(rng.normal(size=tuple(b.shape)), 2).astype(_dt(b)) for _, b in pairs]
    try:
        grads_t = torch.autograd.grad(
            [b for _, b in pairs],
            [leaves_t[k] for k in wrt],
            [torch.tensor(u) for u in ups],
            allow_unused=True,
        )
    except RuntimeError:  # (torch's adaptive pools' backward refuses an empty gradient that
        return  # its forward made: not compared)
    grads = rg.autograd.grad([a for a, _ in pairs], [leaves[k] for k in wrt],
                             [rg.tensor(u) for u in ups], allow_unused=True)  # fmt: skip
    for k, g_t, g in zip(wrt, grads_t, grads):
        want = (
            np.zeros(call.inputs[k].base.shape, call.inputs[k].dtype) if g_t is None else _np(g_t)
        )
        got = np.zeros_like(want) if g is None else _np(g)
        if g is not None and _dt(g) != call.inputs[k].dtype:
            raise Mismatch(f"{where}: gradient {k} is {_dt(g)}")
        kind = "float32" if single else call.inputs[k].dtype
        _close(f"{where} gradient {k}", got, want, kind, call.tolerance * 10,
               zeros=False, gradient=True)  # fmt: skip


def _still_usable(where: str, leaves: list) -> None:
    floats = [t for t in leaves if t.requires_grad]
    if not floats:
        return
    total = sum((t * 2.0).sum() for t in floats)
    grads = rg.autograd.grad([total], floats)
    for t, g in zip(floats, grads):
        if not np.array_equal(_np(g), np.full(tuple(t.shape), 2.0, _dt(t))):
            raise Mismatch(f"{where}: a leaf's graph after the refusal gives {_np(g)}")


SEEDS = int(os.environ.get("RETROGRAD_FUZZ83_SEEDS", "0"))
FIRST = int(os.environ.get("RETROGRAD_FUZZ83_FIRST", "830000"))


@pytest.mark.parametrize("block", range(3))
def test_edge_inputs_as_torch(block: int) -> None:
    for seed in range(830_000 + 80 * block, 830_000 + 80 * (block + 1)):
        _run(seed)


@pytest.mark.skipif(not SEEDS, reason="a longer hunt by hand: RETROGRAD_FUZZ83_SEEDS=N")
def test_hunt() -> None:
    failures = []
    for seed in range(FIRST, FIRST + SEEDS):
        try:
            _run(seed)
        except Exception as error:  # (collected, reported together)
            failures.append(f"{type(error).__name__}: {str(error)[:600]}")
    assert not failures, "\n".join(failures)
