"""Random calls of the less-used tensor functions against PyTorch, round 75: every option.

Each seed draws a few calls -- ``tril_indices``/``triu_indices`` (``offset``, ``dtype``),
``cartesian_prod``, ``combinations`` (``r``, ``with_replacement``), ``block_diag``, ``kron``,
``cdist`` (``p`` of 0, 1, 2, inf and fractions, every ``compute_mode``), ``pdist``, ``histc``,
``histogram`` (``bins`` an integer or edges, ``range``, ``weight``, ``density``), ``bincount``
(``weights``, ``minlength``), ``diag_embed``/``diagonal``/``diagflat`` (``offset``, ``dim1``,
``dim2``), ``tensordot`` (``dims`` an integer or a pair of lists), ``einsum``'s corner forms
(ellipses, a repeated index, the sublist format, the output order), ``rot90``, ``roll``,
``vander``, ``trapezoid``/``cumulative_trapezoid`` (``x=`` and ``dx=``), ``diff`` (``n``,
``prepend``, ``append``), ``gradient`` (``spacing`` a scalar, a list of scalars or of
coordinates, ``dim``, ``edge_order``), ``logcumsumexp``, ``renorm``, ``cross``/
``linalg.cross``, ``atleast_1d/2d/3d``, ``meshgrid`` (``indexing``), ``broadcast_tensors``,
``broadcast_shapes``, ``cov``/``corrcoef`` (``correction``, ``fweights``, ``aweights``),
``cummax``/``cummin``, ``aminmax`` and ``nanmean``/``nansum``/``nanmedian`` -- in float32,
float64 or int64, with bad options now and then, and runs each on torch and on retrograd from
the same inputs.

The values, their shapes and dtypes are compared (within a tolerance of the dtype; integers
exactly), and in float64 the gradients of the sum of the float outputs in every float input
of a differentiable op; where torch raises, retrograd must raise an instance of torch's
exception class.

Left out, each where it is drawn, because torch 2.13 is wrong there: the gradient of
``vander`` (its backward fails, "modified by an inplace operation", or crashes the process)
and of ``pdist`` of an empty input (a crash), decreasing ``histogram`` edges and ``gradient``
coordinates of another length than their dimension (taken, with garbage results), ``cov``
weights of a single observation (torch writes in place into an input that requires grad, or
multiplies float32 by float64, and refuses). torch's matrix-product ``cdist`` (p = 2, above 25
rows or when asked) loses digits to cancellation near a distance of 0: its squared distances
are compared, and its gradients at 1e-6. An empty leaf's gradient may be ``None`` (torch's is
an empty tensor).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg
from test_random_69 import Mismatch, _close, compare_gradients

torch = pytest.importorskip("torch")

#: relative tolerance per dtype (of the largest value + 1): the two libraries sum the same
#: terms in other orders
TOL = {"float32": 2e-5, "float64": 1e-10}


class Leaf:
    """An array given to both libraries as a tensor (a leaf that requires grad when ``grad``)."""

    def __init__(self, array: np.ndarray, grad: bool = False):
        self.array, self.grad = array, grad

    def __repr__(self) -> str:
        return f"{self.array.dtype}{list(self.array.shape)}{'*' if self.grad else ''}"


def _make(lib, value, leaves):
    if isinstance(value, Leaf):
        t = lib.tensor(value.array.copy())
        if value.grad:
            t.requires_grad_(True)
            leaves.append(t)
        return t
    if isinstance(value, list):
        return [_make(lib, v, leaves) for v in value]
    if isinstance(value, tuple):
        return tuple(_make(lib, v, leaves) for v in value)
    if value == "dtype:int32":
        return lib.int32
    if value == "dtype:int64":
        return lib.int64
    if value == "dtype:float32":
        return lib.float32
    if value == "dtype:bool":
        return lib.bool
    return value


class Call:
    """``lib.<path>(*args, **kwargs)`` (``path`` dotted: ``linalg.cross``), or, where
    ``method``, ``args[0].<path>(*args[1:], **kwargs)``."""

    def __init__(self, path, args, kwargs=None, method=False, squares=False):
        self.path, self.args, self.kwargs, self.method = path, args, kwargs or {}, method
        self.squares = squares

    def __repr__(self) -> str:
        if self.method:
            return f"{self.args[0]}.{self.path}({self.args[1:]}, {self.kwargs})"
        return f"torch.{self.path}({self.args}, {self.kwargs})"


# -- the draws ---------------------------------------------------------------------------------
def _dtype(rng, ints=True):
    if ints and _rare(rng):
        return "bool"
    choices = ["float32", "float64", "float64"] + ["int64"] * ints
    return str(rng.choice(choices))


def _x(rng, shape, dtype, grad=True):
    """A leaf: standard normal floats (a gradient wanted in float64), or small integers."""
    if dtype == "int64":
        return Leaf(rng.integers(-4, 5, size=shape).astype(np.int64))
    if dtype == "bool":
        return Leaf(rng.random(shape) < 0.5)
    return Leaf(rng.standard_normal(shape).astype(dtype), grad and dtype == "float64")


def _shape(rng, lo=0, hi=3, size=(1, 4)):
    return tuple(int(s) for s in rng.integers(size[0], size[1], size=int(rng.integers(lo, hi + 1))))


def _rare(rng, p=0.05):
    return bool(rng.random() < p)


def draw_tri_indices(rng):
    name = str(rng.choice(["tril_indices", "triu_indices"]))
    row, col = int(rng.integers(0, 6)), int(rng.integers(0, 6))
    if _rare(rng):
        row = -1  # torch refuses
    args = [row, col]
    kwargs: dict = {}
    if rng.random() < 0.7:
        offset = int(rng.integers(-6, 7))
        if rng.random() < 0.5:
            args.append(offset)
        else:
            kwargs["offset"] = offset
    if rng.random() < 0.3:
        kwargs["dtype"] = str(
            rng.choice(["dtype:int32", "dtype:int64", "dtype:float32", "dtype:bool"])
        )
    return Call(name, args, kwargs)


def _vector(rng, dtype, n=None, grad=True):
    return _x(rng, (int(rng.integers(0, 4)) if n is None else n,), dtype, grad)


def draw_cartesian_prod(rng):
    dtype = _dtype(rng)
    tensors = [_vector(rng, dtype) for _ in range(int(rng.integers(1, 4)))]
    if _rare(rng):
        tensors[0] = _x(rng, (2, 2), dtype)  # not 1-d: torch refuses
    if _rare(rng, 0.1):
        tensors[-1] = _vector(rng, _dtype(rng))  # perhaps two dtypes
    return Call("cartesian_prod", tensors)


def draw_combinations(rng):
    dtype = _dtype(rng)
    x = _vector(rng, dtype, int(rng.integers(0, 6)))
    if _rare(rng):
        x = _x(rng, (2, 3), dtype)  # torch refuses
    kwargs: dict = {}
    if rng.random() < 0.8:
        kwargs["r"] = int(rng.integers(0, 5)) if not _rare(rng) else -1
    if rng.random() < 0.5:
        kwargs["with_replacement"] = bool(rng.random() < 0.5)
    return Call("combinations", [x], kwargs)


def draw_block_diag(rng):
    dtype = _dtype(rng)
    tensors = [
        _x(rng, _shape(rng, 0, 2, (0, 4)), dtype if rng.random() < 0.85 else _dtype(rng))
        for _ in range(int(rng.integers(0, 4)))
    ]
    if _rare(rng) and tensors:
        tensors[0] = _x(rng, (1, 2, 2), dtype)  # 3-d: torch refuses
    return Call("block_diag", tensors)


def draw_kron(rng):
    dtype = _dtype(rng)
    a = _x(rng, _shape(rng, 0, 3), dtype)
    b = _x(rng, _shape(rng, 0, 3), dtype if rng.random() < 0.85 else _dtype(rng))
    return Call("kron", [a, b], method=rng.random() < 0.2)


def _p(rng):
    return float(rng.choice([0.0, 1.0, 2.0, np.inf, 0.5, 1.5, 3.0]))


MODES = [
    "use_mm_for_euclid_dist_if_necessary",
    "use_mm_for_euclid_dist",
    "donot_use_mm_for_euclid_dist",
]


def draw_cdist(rng):
    dtype = _dtype(rng, ints=False)
    if _rare(rng):
        dtype = "int64"
    batch = _shape(rng, 0, 2, (1, 3))
    p, r, m = (int(v) for v in rng.integers(0, 5, size=3))
    if rng.random() < 0.3:  # tall: torch's mm path for p=2 takes over above 25 rows
        p = int(rng.integers(24, 30))
    if m == 0:
        m = 1
    x1 = _x(rng, (*batch, p, m), dtype)
    x2 = _x(rng, (*batch, r, m), dtype)
    if _rare(rng):
        x2 = _x(rng, (*batch, r, m + 1), dtype)  # torch refuses
    if rng.random() < 0.2 and batch:
        x2 = _x(rng, (1, r, m), dtype)  # broadcast batch
    kwargs: dict = {}
    if rng.random() < 0.8:
        kwargs["p"] = _p(rng) if not _rare(rng) else -1.0
    if rng.random() < 0.5:
        kwargs["compute_mode"] = str(rng.choice(MODES))
        if _rare(rng, 0.03):
            kwargs["compute_mode"] = "fast"
    # torch's matrix-product route (p = 2, above 25 rows or when asked) computes
    # sqrt(|x|^2 + |y|^2 - 2 x.y): a distance near 0 loses sqrt(eps |x|^2) to cancellation
    # (torch 0 for retrograd's 1.5e-4 in float32, seed 5380), retrograd takes the
    # differences: the squared distances are compared there
    mode = kwargs.get("compute_mode", MODES[0])
    squares = kwargs.get("p", 2.0) == 2.0 and (
        mode == MODES[1] or (mode == MODES[0] and max(p, r) > 25)
    )
    return Call("cdist", [x1, x2], kwargs, squares=squares)


def draw_pdist(rng):
    dtype = _dtype(rng, ints=False)
    n, m = int(rng.integers(0, 5)), int(rng.integers(1, 4))
    # (no gradient of an empty input: torch 2.13's backward crashes the process there)
    x = _x(rng, (n, m), dtype, grad=n > 0)
    if _rare(rng):
        x = _x(rng, (2, n, m), dtype)  # torch refuses
    args = [x]
    if rng.random() < 0.8:
        args.append(_p(rng) if not _rare(rng) else -1.0)
    return Call("nn.functional.pdist", args)


def draw_histc(rng):
    dtype = _dtype(rng, ints=False)
    if _rare(rng):
        dtype = "int64"
    x = _x(rng, _shape(rng, 1, 2, (0, 8)), dtype, grad=False)
    if dtype != "int64" and x.array.size and rng.random() < 0.1:
        x.array[0] = np.nan  # (not counted)
    kwargs: dict = {}
    if rng.random() < 0.8:
        kwargs["bins"] = int(rng.integers(1, 7)) if not _rare(rng) else 0
    if rng.random() < 0.6:
        lo = float(rng.choice([-1.0, -0.5, 0.0, 0.0]))
        hi = float(rng.choice([0.0, 0.5, 1.0, 2.0]))
        if _rare(rng):
            lo, hi = 1.0, -1.0  # torch refuses
        kwargs["min"], kwargs["max"] = lo, hi
    return Call("histc", [x], kwargs, method=rng.random() < 0.2)


def draw_histogram(rng):
    dtype = _dtype(rng, ints=False)
    x = _x(rng, _shape(rng, 1, 2, (0, 8)), dtype, grad=False)
    kwargs: dict = {}
    if rng.random() < 0.5:
        # (increasing: torch 2.13 takes decreasing edges without a word, its counts garbage)
        edges = np.sort(rng.standard_normal(int(rng.integers(2, 6)))).astype(dtype)
        kwargs["bins"] = Leaf(edges)
        if _rare(rng):
            kwargs["range"] = (-1.0, 1.0)  # with edges: torch refuses
    else:
        kwargs["bins"] = int(rng.integers(1, 6))
        if rng.random() < 0.5:
            kwargs["range"] = (float(rng.choice([-1.0, 0.0])), float(rng.choice([0.5, 1.0])))
    if rng.random() < 0.4:
        kwargs["weight"] = Leaf(rng.random(x.array.shape).astype(dtype))
    if rng.random() < 0.4:
        kwargs["density"] = bool(rng.random() < 0.6)
    return Call("histogram", [x], kwargs)


def draw_bincount(rng):
    x = rng.integers(0, 6, size=int(rng.integers(0, 7))).astype(np.int64)
    if _rare(rng) and x.size:
        x[0] = -1  # torch refuses
    xl = Leaf(x)
    if _rare(rng):
        xl = Leaf(x.astype(np.float32))  # torch refuses
    if _rare(rng):
        xl = Leaf(x.astype(bool))  # torch refuses
    if _rare(rng):
        xl = Leaf(x.astype(np.int32))
    kwargs: dict = {}
    if rng.random() < 0.4:
        w = rng.standard_normal(x.shape)
        if rng.random() < 0.5:
            w = w.astype(np.float32)
        if _rare(rng):
            w = rng.standard_normal(x.size + 1)  # torch refuses
        kwargs["weights"] = Leaf(w)
    if rng.random() < 0.5:
        kwargs["minlength"] = int(rng.integers(0, 9)) if not _rare(rng) else -1
    return Call("bincount", [xl], kwargs)


def _dims_pair(rng, ndim):
    d1, d2 = (int(d) for d in rng.choice(np.arange(-ndim, ndim), size=2, replace=False))
    return d1, d2


def draw_diag(rng):
    dtype = _dtype(rng)
    name = str(rng.choice(["diag_embed", "diagonal", "diagflat"]))
    kwargs: dict = {}
    if rng.random() < 0.7:
        kwargs["offset"] = int(rng.integers(-3, 4))
    if name == "diagflat":
        return Call(name, [_x(rng, _shape(rng, 0, 3), dtype)], kwargs)
    shape = _shape(rng, 1 if name == "diag_embed" else 2, 3, (0, 4))
    x = _x(rng, shape, dtype)
    out_ndim = len(shape) + (name == "diag_embed")
    if rng.random() < 0.6:
        kwargs["dim1"], kwargs["dim2"] = _dims_pair(rng, out_ndim)
        if _rare(rng):
            kwargs["dim2"] = kwargs["dim1"]  # torch refuses
    return Call(name, [x], kwargs, method=rng.random() < 0.25)


def draw_tensordot(rng):
    # (not bool: torch 2.13 takes some bool contractions to one element, refusing the others
    # as its matrix product does, "addmm_impl_cpu_" not implemented for 'Bool')
    dtype = _dtype(rng)
    dtype = "int64" if dtype == "bool" else dtype
    k = int(rng.integers(0, 3))
    contracted = [int(s) for s in rng.integers(1, 4, size=k)]
    a_free = list(_shape(rng, 0, 2))
    b_free = list(_shape(rng, 0, 2))
    if rng.random() < 0.5:
        a, b = _x(rng, (*a_free, *contracted), dtype), _x(rng, (*contracted, *b_free), dtype)
        dims = k
        if _rare(rng):
            dims = k + 1 if k + 1 <= min(len(a_free), len(b_free)) + k else -1
    else:
        # permuted contracted dimensions, named by lists (negative indices too)
        na, nb = len(a_free) + k, len(b_free) + k
        pa = [int(i) for i in rng.permutation(na)]
        pb = [int(i) for i in rng.permutation(nb)]
        a_shape, b_shape = [0] * na, [0] * nb
        for i, s in enumerate(a_free + contracted):
            a_shape[pa[i]] = s
        for i, s in enumerate(contracted + b_free):
            b_shape[pb[i]] = s
        da = [pa[len(a_free) + j] for j in range(k)]
        db = [pb[j] for j in range(k)]
        if rng.random() < 0.3:
            da = [d - na for d in da]
        a, b = _x(rng, tuple(a_shape), dtype), _x(rng, tuple(b_shape), dtype)
        dims = (da, db)
        if _rare(rng) and k:
            dims = (da, db[:-1])  # torch refuses
    return Call("tensordot", [a, b], {"dims": dims})


EINSUM = [
    # (equation, operand shapes by letter)
    "ii->i",
    "ii",
    "ii->",
    "iij->ji",
    "ij->ji",
    "ij->",
    "ij",
    "ji",
    "i,i->",
    "i,j->ij",
    "i,j->ji",
    "ij,jk->ik",
    "ij,jk",
    "ij,kj->ki",
    "bij,bjk->bik",
    "...ij,...jk->...ik",
    "...ij->...ji",
    "...ii->...i",
    "i...->...",
    "...,...->...",
    "bi,bi->b",
    "ij,ij,ij->i",
    "iji->j",
    "ii,i->i",
    "a...b,b...->a...",
    "Ab,bC->AC",
    "ij,j->i",
    "...i,...i->...",
    "i,i",
]


def _einsum_shapes(rng, eq):
    lhs = eq.split("->")[0]
    size = {c: int(rng.integers(1, 4)) for c in "abcdefghijklmnopqrstuvwxyzAC"}
    ell = _shape(rng, 0, 2)
    shapes = []
    for term in lhs.split(","):
        shape = []
        for part in term.replace("...", ".").split(" "):
            for c in part:
                shape.extend(ell if c == "." else [size[c]])
        shapes.append(tuple(shape))
    return shapes


def draw_einsum(rng):
    dtype = _dtype(rng)
    eq = str(rng.choice(EINSUM))
    shapes = _einsum_shapes(rng, eq)
    ops = [_x(rng, s, dtype) for s in shapes]
    if _rare(rng) and shapes[0]:
        ops[0] = _x(rng, (*shapes[0][:-1], shapes[0][-1] + 1), dtype)  # perhaps refused
    if (rng.random() < 0.3 and "..." not in eq) or rng.random() < 0.1:
        # the sublist format: letters as integers, ... as Ellipsis
        lhs, _, rhs = eq.partition("->")

        def sub(term):
            out = []
            for part in term.replace("...", ".").split(" "):
                out.extend(
                    Ellipsis if c == "." else "abcdefghijklmnopqrstuvwxyzAC".index(c) for c in part
                )
            return out

        args: list = []
        for term, op in zip(lhs.split(","), ops):
            args.extend([op, sub(term)])
        if "->" in eq:
            args.append(sub(rhs))
        return Call("einsum", args)
    if rng.random() < 0.3:
        return Call("einsum", [eq.replace(",", " , ").replace("->", " -> "), ops])
    return Call("einsum", [eq, *ops])


def draw_rot90(rng):
    dtype = _dtype(rng)
    x = _x(rng, _shape(rng, 2, 4, (0, 4)), dtype)
    ndim = x.array.ndim
    args = [x]
    if rng.random() < 0.8:
        args.append(int(rng.integers(-5, 6)))
        if rng.random() < 0.7:
            dims = list(_dims_pair(rng, ndim))
            if _rare(rng):
                dims = [dims[0], dims[0]]  # torch refuses
            if _rare(rng):
                dims = [0]  # torch refuses
            args.append(dims)
    return Call("rot90", args, method=rng.random() < 0.2)


def draw_roll(rng):
    dtype = _dtype(rng)
    x = _x(rng, _shape(rng, 0, 3, (0, 5)), dtype)
    ndim = x.array.ndim
    u = rng.random()
    kwargs: dict = {}
    if u < 0.3 or ndim == 0:
        args = [x, int(rng.integers(-7, 8))]  # no dims: the flat roll
    elif u < 0.6:
        args = [x, int(rng.integers(-7, 8)), int(rng.integers(-ndim, ndim))]
    else:
        k = int(rng.integers(1, ndim + 1))
        dims = [int(d) for d in rng.integers(-ndim, ndim, size=k)]  # repeats too
        shifts = [int(s) for s in rng.integers(-7, 8, size=k)]
        if _rare(rng):
            shifts = shifts + [1]  # torch refuses
        args = [x]
        kwargs = {"shifts": tuple(shifts), "dims": tuple(dims)}
    return Call("roll", args, kwargs, method=rng.random() < 0.2)


def draw_vander(rng):
    dtype = _dtype(rng)
    # (no gradient: torch 2.13's backward of vander fails, "modified by an inplace
    # operation", or crashes the process)
    x = _vector(rng, dtype, int(rng.integers(0, 5)), grad=False)
    if _rare(rng):
        x = _x(rng, (2, 2), dtype, grad=False)  # torch refuses
    kwargs: dict = {}
    if rng.random() < 0.6:
        kwargs["N"] = int(rng.integers(0, 6)) if not _rare(rng) else -1
    if rng.random() < 0.5:
        kwargs["increasing"] = bool(rng.random() < 0.5)
    return Call("vander", [x], kwargs)


def draw_trapezoid(rng):
    dtype = _dtype(rng)
    name = str(rng.choice(["trapezoid", "cumulative_trapezoid", "trapz"]))
    shape = _shape(rng, 1, 3, (0, 5))
    y = _x(rng, shape, dtype)
    ndim = len(shape)
    dim = int(rng.integers(-ndim, ndim))
    kwargs: dict = {}
    args = [y]
    u = rng.random()
    if u < 0.35:
        n = shape[dim]
        if rng.random() < 0.5:
            xs = np.sort(rng.standard_normal(n)).astype(dtype if dtype != "int64" else "float64")
        else:
            xs = np.sort(rng.standard_normal(shape), axis=dim).astype(
                dtype if dtype != "int64" else "float64"
            )
        if _rare(rng) and n:
            xs = xs[..., :-1] if xs.ndim == 1 else xs.reshape(-1)[1:]  # torch refuses
        if rng.random() < 0.5 or name == "trapz":
            args.append(Leaf(xs, xs.dtype == np.float64 and y.grad))
        else:
            kwargs["x"] = Leaf(xs, xs.dtype == np.float64 and y.grad)
    elif u < 0.7:
        dx = float(rng.choice([0.5, 2.0, -1.0, 3]))
        if rng.random() < 0.3 and name == "trapz":
            dx = int(rng.integers(1, 4))
        kwargs["dx"] = dx
    if rng.random() < 0.7:
        kwargs["dim"] = dim
    return Call(name, args, kwargs)


def draw_diff(rng):
    dtype = _dtype(rng)
    shape = _shape(rng, 1, 3, (0, 5))
    x = _x(rng, shape, dtype)
    ndim = len(shape)
    dim = int(rng.integers(-ndim, ndim))
    kwargs: dict = {}
    if rng.random() < 0.7:
        kwargs["n"] = int(rng.integers(0, 5)) if not _rare(rng) else -1
    if rng.random() < 0.7:
        kwargs["dim"] = dim
    used = kwargs.get("dim", -1)
    for key in ("prepend", "append"):
        if rng.random() < 0.35:
            s = list(shape)
            s[used] = int(rng.integers(0, 3))
            if _rare(rng):
                s = s + [2]  # torch refuses
            if rng.random() < 0.15 and ndim == 1:
                s = []  # a 0-d prepend/append: refused by torch
            kwargs[key] = _x(rng, tuple(s), dtype)
    return Call("diff", [x], kwargs, method=rng.random() < 0.2)


def draw_gradient(rng):
    # (not bool: torch refuses bool subtraction with a RuntimeError, retrograd's sub with a
    # DTypeError, a TypeError: a difference of the elementwise ops, left to their round)
    dtype = _dtype(rng, ints=True)
    dtype = "int64" if dtype == "bool" else dtype
    shape = _shape(rng, 1, 3, (1, 6))
    x = _x(rng, shape, dtype)
    ndim = len(shape)
    kwargs: dict = {}
    dims = list(range(ndim))
    if rng.random() < 0.5:
        if rng.random() < 0.5:
            d = int(rng.integers(-ndim, ndim))
            kwargs["dim"] = d
            dims = [d]
        else:
            k = int(rng.integers(1, ndim + 1))
            dims = [int(d) for d in rng.choice(ndim, size=k, replace=False)]
            kwargs["dim"] = dims
    u = rng.random()
    if u < 0.25:
        kwargs["spacing"] = float(rng.choice([0.5, 2.0, -1.5]))
    elif u < 0.45:
        kwargs["spacing"] = [float(rng.choice([0.5, 2.0, 3.0])) for _ in dims]
    elif u < 0.65:
        coord_dtype = dtype if dtype != "int64" else "float64"
        # (as long as their dimensions: torch 2.13 takes other lengths and returns garbage)
        kwargs["spacing"] = [
            Leaf(np.cumsum(rng.random(shape[d]) + 0.2).astype(coord_dtype)) for d in dims
        ]
    if rng.random() < 0.5:
        kwargs["edge_order"] = int(rng.choice([1, 2])) if not _rare(rng) else 3
    return Call("gradient", [x], kwargs)


def draw_logcumsumexp(rng):
    dtype = _dtype(rng, ints=False)
    if _rare(rng):
        dtype = "int64"
    x = _x(rng, _shape(rng, 0, 3, (0, 5)), dtype)
    if dtype != "int64" and x.array.size and rng.random() < 0.3:
        flat = x.array.reshape(-1)
        flat[rng.integers(0, flat.size)] = float(rng.choice([-np.inf, np.inf]))
        x.grad = False  # (the gradient through infinities: not compared)
    ndim = max(x.array.ndim, 1)
    return Call("logcumsumexp", [x, int(rng.integers(-ndim, ndim))], method=rng.random() < 0.2)


def draw_renorm(rng):
    dtype = _dtype(rng, ints=False)
    if _rare(rng):
        dtype = "int64"
    x = _x(rng, _shape(rng, 1, 3, (1, 4)), dtype)
    ndim = x.array.ndim
    p = float(rng.choice([1.0, 2.0, 3.0, 0.5, np.inf])) if not _rare(rng) else -1.0
    maxnorm = float(rng.choice([0.5, 1.0, 5.0, 100.0])) if not _rare(rng) else -1.0
    return Call("renorm", [x, p, int(rng.integers(-ndim, ndim)), maxnorm])


def draw_cross(rng):
    dtype = _dtype(rng)
    name = str(rng.choice(["cross", "linalg.cross"]))
    shape = list(_shape(rng, 0, 2, (1, 4)))
    pos = int(rng.integers(0, len(shape) + 1))
    shape.insert(pos, 3)
    a_shape, b_shape = list(shape), list(shape)
    if rng.random() < 0.3:
        b_shape = [1 if (i != pos and rng.random() < 0.5) else s for i, s in enumerate(shape)]
    if _rare(rng):
        a_shape[pos] = 2  # torch refuses
    a, b = _x(rng, tuple(a_shape), dtype), _x(rng, tuple(b_shape), dtype)
    kwargs: dict = {}
    ndim = len(shape)
    if rng.random() < 0.7 or name == "cross":
        dim = pos if rng.random() < 0.5 else pos - ndim
        if name == "cross" and rng.random() < 0.3 and 3 in shape[:pos]:
            dim = None  # torch.cross without dim: its first dimension of size 3
        if dim is not None:
            kwargs["dim"] = dim
    elif pos != ndim - 1:
        pass  # linalg.cross's dim=-1 may not be 3: then refused
    return Call(name, [a, b], kwargs)


def draw_atleast(rng):
    dtype = _dtype(rng)
    name = f"atleast_{int(rng.integers(1, 4))}d"
    xs = [_x(rng, _shape(rng, 0, 4, (0, 3)), dtype) for _ in range(int(rng.integers(1, 4)))]
    u = rng.random()
    if u < 0.4:
        return Call(name, [xs[0]])
    if u < 0.7:
        return Call(name, xs)
    return Call(name, [xs])


def draw_meshgrid(rng):
    dtype = _dtype(rng)
    xs = [_vector(rng, dtype) for _ in range(int(rng.integers(1, 4)))]
    if _rare(rng, 0.1):
        xs[-1] = _vector(rng, _dtype(rng))  # perhaps two dtypes
    if rng.random() < 0.2:
        xs[0] = _x(rng, (), dtype)  # 0-d: allowed
    kwargs = {"indexing": str(rng.choice(["ij", "xy"]))} if rng.random() < 0.8 else {}
    if _rare(rng, 0.03):
        kwargs["indexing"] = "yx"
    if rng.random() < 0.3:
        return Call("meshgrid", [xs], kwargs)
    return Call("meshgrid", xs, kwargs)


def _broadcastable(rng, n):
    full = _shape(rng, 0, 3, (0, 4))
    shapes = []
    for _ in range(n):
        k = int(rng.integers(0, len(full) + 1))
        tail = full[len(full) - k :]
        shapes.append(tuple(1 if rng.random() < 0.3 else s for s in tail))
    if _rare(rng, 0.1) and shapes[0]:
        shapes[0] = (*shapes[0][:-1], shapes[0][-1] + 2)  # perhaps refused
    return shapes


def draw_broadcast(rng):
    dtype = _dtype(rng)
    shapes = _broadcastable(rng, int(rng.integers(1, 4)))
    if rng.random() < 0.4:
        args = [int(s[0]) if len(s) == 1 and rng.random() < 0.5 else s for s in shapes]
        return Call("broadcast_shapes", args)
    return Call(
        "broadcast_tensors",
        [_x(rng, s, dtype if rng.random() < 0.85 else _dtype(rng)) for s in shapes],
    )


def draw_cov(rng):
    dtype = _dtype(rng)
    name = str(rng.choice(["cov", "corrcoef"]))
    shape = _shape(rng, 1, 2, (1, 6)) if rng.random() < 0.3 else _shape(rng, 2, 2, (1, 6))
    x = _x(rng, shape, dtype)
    if _rare(rng):
        x = _x(rng, (2, 2, 2), dtype)  # torch refuses
    kwargs: dict = {}
    n = shape[-1]
    # (weights of a single observation: torch 2.13 writes in place into the input that
    # requires grad there, or multiplies float32 by float64, and refuses: not drawn)
    if name == "cov" and n > 1:
        if rng.random() < 0.5:
            kwargs["correction"] = int(rng.integers(0, 3))
        if rng.random() < 0.35:
            fw = rng.integers(0, 4, size=n).astype(np.int64)
            if rng.random() < 0.2:
                fw = fw.astype(np.int32)
            if _rare(rng):
                fw = fw.astype(np.float64)  # torch refuses
            if _rare(rng) and n:
                fw[0] = -1
            kwargs["fweights"] = Leaf(fw)
        if rng.random() < 0.35:
            aw = (rng.random(n) + 0.1).astype(dtype if dtype != "int64" else "float64")
            if _rare(rng) and n:
                aw[0] = -1.0
            kwargs["aweights"] = Leaf(aw, aw.dtype == np.float64 and x.grad)
    return Call(name, [x], kwargs, method=rng.random() < 0.2)


def draw_cumext(rng):
    dtype = _dtype(rng)
    name = str(rng.choice(["cummax", "cummin"]))
    x = _x(rng, _shape(rng, 0, 3, (0, 5)), dtype)
    if dtype != "int64":
        # ties (of which the last index is taken) and now and then a NaN
        x.array = np.round(x.array).astype(dtype)
        if x.array.size and rng.random() < 0.2:
            x.array.reshape(-1)[rng.integers(0, x.array.size)] = np.nan
            x.grad = False
        x.grad = x.grad and dtype == "float64"
    ndim = max(x.array.ndim, 1)
    return Call(name, [x, int(rng.integers(-ndim, ndim))], method=rng.random() < 0.2)


def draw_aminmax(rng):
    dtype = _dtype(rng)
    x = _x(rng, _shape(rng, 0, 3, (0, 5)), dtype, grad=False)
    kwargs: dict = {}
    ndim = max(x.array.ndim, 1)
    if rng.random() < 0.6:
        kwargs["dim"] = int(rng.integers(-ndim, ndim))
    if rng.random() < 0.5:
        kwargs["keepdim"] = bool(rng.random() < 0.5)
    return Call("aminmax", [x], kwargs, method=rng.random() < 0.2)


def draw_nan_reduction(rng):
    dtype = _dtype(rng, ints=False)
    if _rare(rng, 0.1):
        dtype = "int64"
    name = str(rng.choice(["nanmean", "nansum", "nanmedian"]))
    x = _x(rng, _shape(rng, 0, 3, (0, 5)), dtype)
    if dtype != "int64" and x.array.size:
        mask = rng.random(x.array.shape) < 0.3
        x.array = np.where(mask, np.nan, x.array).astype(dtype)
    kwargs: dict = {}
    ndim = max(x.array.ndim, 1)
    if rng.random() < 0.6:
        if name != "nanmedian" and rng.random() < 0.3 and x.array.ndim >= 2:
            kwargs["dim"] = (0, -1)
        else:
            kwargs["dim"] = int(rng.integers(-ndim, ndim))
        if rng.random() < 0.5:
            kwargs["keepdim"] = bool(rng.random() < 0.5)
    if name != "nanmedian" and rng.random() < 0.2:
        kwargs["dtype"] = str(rng.choice(["dtype:float32", "dtype:int64"]))
        if kwargs["dtype"] == "dtype:int64":
            x.grad = False  # (torch's autograd refuses an int result of a float input)
    return Call(name, [x], kwargs, method=rng.random() < 0.2)


DRAWS = [
    draw_tri_indices, draw_cartesian_prod, draw_combinations, draw_block_diag, draw_kron,
    draw_cdist, draw_cdist, draw_pdist, draw_histc, draw_histogram, draw_bincount, draw_diag,
    draw_diag, draw_tensordot, draw_einsum, draw_einsum, draw_rot90, draw_roll, draw_vander,
    draw_trapezoid, draw_diff, draw_gradient, draw_logcumsumexp, draw_renorm, draw_cross,
    draw_atleast, draw_meshgrid, draw_broadcast, draw_cov, draw_cumext, draw_aminmax,
    draw_nan_reduction,
]  # fmt: skip


# -- running one call on both ------------------------------------------------------------------
def _resolve(lib, path):
    obj = lib
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _run(lib, call: Call):
    leaves: list = []
    args = [_make(lib, a, leaves) for a in call.args]
    kwargs = {k: _make(lib, v, leaves) for k, v in call.kwargs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if call.method:
            out = getattr(args[0], call.path)(*args[1:], **kwargs)
        else:
            out = _resolve(lib, call.path)(*args, **kwargs)
    return out, leaves


def _flat(out):
    """The tensors of an output (nested tuples, lists, named tuples), and its other values."""
    if isinstance(out, (tuple, list)) and type(out).__name__ != "Size":
        tensors, others = [], [type(out).__name__ if isinstance(out, list) else "tuple"]
        for o in out:
            t, v = _flat(o)
            tensors += t
            others += v
        return tensors, others
    if hasattr(out, "dtype") and hasattr(out, "shape"):
        return [out], ["T"]
    return [], [tuple(out) if type(out).__name__ == "Size" else out]


def _grads(lib, tensors, leaves):
    floats = [o for o in tensors if o.dtype.is_floating_point and o.requires_grad]
    if floats and leaves and all(str(t.dtype).endswith("float64") for t in leaves):
        total = sum(o.sum() for o in floats)
        return lib.autograd.grad(total, leaves, allow_unused=True)
    return None


def _dtype_name(t):
    return str(t.dtype).rpartition(".")[2]


def _refused(log, call, error):
    try:
        _run(rg, call)
    except Exception as mine:
        if not isinstance(mine, type(error)):
            raise Mismatch(
                f"{log}\nraised {type(mine).__name__}: {mine}\ntorch: "
                f"{type(error).__name__}: {error}"
            ) from mine
        return
    raise Mismatch(f"{log}\nretrograd accepted; torch raised {type(error).__name__}: {error}")


def check_one(rng, log_prefix=""):
    draw = DRAWS[int(rng.integers(len(DRAWS)))]
    call = draw(rng)
    log = f"{log_prefix}{call}"
    try:
        out, leaves = _run(torch, call)
    except Exception as error:  # torch refuses: so must retrograd, with torch's class
        _refused(log, call, error)
        return
    expected, expected_other = _flat(out)
    expected_grads = _grads(torch, expected, leaves)
    try:
        out, leaves = _run(rg, call)
        outs, other = _flat(out)
        grads = _grads(rg, outs, leaves) if expected_grads is not None else None
    except Exception as mine:
        raise Mismatch(f"{log}\nretrograd raised {type(mine).__name__}: {mine}") from mine
    if other != expected_other:
        raise Mismatch(f"{log}\nstructure {other} vs torch's {expected_other}")
    for i, (o, e) in enumerate(zip(outs, expected, strict=True)):
        if _dtype_name(o) != _dtype_name(e):
            raise Mismatch(f"{log}\noutput {i}: dtype {o.dtype} vs torch's {e.dtype}")
        if e.dtype.is_floating_point and call.squares:
            _close(log, f"output {i} squared", o * o, e * e, TOL[_dtype_name(e)])
        elif e.dtype.is_floating_point:
            _close(log, f"output {i}", o, e, TOL[_dtype_name(e)])
        elif tuple(o.shape) != tuple(e.shape) or not np.array_equal(o.numpy(), e.numpy()):
            raise Mismatch(f"{log}\noutput {i} differs\n{o.numpy()}\n{e.numpy()}")
    if expected_grads is not None and not all(e is None or not e.numel() for e in expected_grads):
        # (torch's matrix-product cdist differentiates its cancelled distances: 2.5e-8 off
        # retrograd's exact gradient at seed 6205; 1e-6 there)
        tol = 1e-6 if call.squares else TOL["float64"]
        names = range(len(expected_grads))
        compare_gradients(log, names, grads, expected_grads, tol, empty_may_be_none=True)


CALLS_PER_SEED = 12


@pytest.mark.parametrize("seed", range(60))
def test_random_tensor_functions_against_torch(seed):
    rng = np.random.default_rng([75, seed])
    for i in range(CALLS_PER_SEED):
        check_one(rng, f"seed {seed} call {i}: ")
