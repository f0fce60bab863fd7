"""Generators of round 31 of the differential fuzzer against PyTorch (``tests/test_fuzz31.py``):
how real code CALLS the names it uses most (``shared/torch_surface/names.tsv``).

Each generator draws ``(description, program, operands)``: ``program(lib, *tensors)`` runs on
``torch`` and on ``retrograd`` alike and ``operands`` are ``(array, dtype, requires_grad)``.
The calling conventions drawn: positional against keyword arguments (``dim=``, ``keepdim=``,
``dtype=``, ``input=``), negative dims, dims as ints, tuples and lists, Python int, float and
bool numbers, NumPy scalars and arrays, and 0-d tensors as operands on either side, method
form against function form, varargs shapes against tuples and lists (``view``, ``permute``,
``repeat``, ``expand``, ``zeros``, ``new_zeros``), the aliases (``absolute``, ``clip``,
``multiply``, ``true_divide``, ``greater``, ``swapaxes``, ``concat``, ``arctan2``, ...),
tensor attributes (``.T``, ``.mT``, ``.shape``, ``.ndim``, ``.is_leaf``, ``grad_fn is
None``, ``.device``, ``.dtype``) and the ``*_like``/``new_*`` families with ``dtype=`` and
``requires_grad=``. Both libraries must agree on raising or not and on every output's type,
dtype, shape and values, and on the gradients (float64 operands) of a weighted sum of the
float64 outputs.

Left out, as torch's quirks rather than meanings (each counted, not failed, by ``check``):
forms torch's argument parser refuses with a ``TypeError`` that retrograd accepts as a Pythonic
extra (API.md: "Add Pythonic extras freely": ``torch.flip(x, 0)``, ``logical_and(x, True)``,
``fmax(x, 2)``, ``true_divide(x, y, rounding_mode=...)``, ``var(x, unbiased=True,
keepdim=True)`` without a dim, ``argsort(x, 0, True, stable=True)``); a NumPy array beside an
operator (NumPy's operator takes over: torch fails for a tensor that requires grad or for a
comparison); ``np.bool_`` scalars (torch reads them as floats: ``int64 + np.bool_(True)`` is
float32); torch's missing derivatives ("derivative for aten::floor_divide / remainder /
scatter is not implemented": retrograd differentiates them); torch failing inside itself
(``True ** x``'s "INTERNAL ASSERT FAILED", the gradient of ``x ** bool_tensor``,
``group_norm`` with a bias and no weight); ``x.detach().requires_grad`` (API.md section 3 keeps
Burn's rule: the detached leaf requires grad iff ``x`` did); ``half()`` (NumpyBackend has no
float16); ``out=`` other than ``arange``'s (retrograd refuses it, "tensors are values here");
``x.type()``'s class-name string and ``str(x.device)`` (retrograd names its devices
``cpu:0``; ``device.type`` is compared).
"""

from __future__ import annotations

import math
import operator

import numpy as np

import retrograd as rg


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _torch():
    import torch

    return torch


OMIT = object()


class D:
    """A dtype named once for both libraries."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


class T:
    """A tensor built inside the program (an index, a mask, a second operand)."""

    def __init__(self, array, dtype: str, grad: bool = False) -> None:
        self.array, self.dtype, self.grad = np.asarray(array), dtype, grad

    def __repr__(self) -> str:
        return f"T{self.array.shape}:{self.dtype}"


class NP:
    """A NumPy scalar or array operand, handed to both libraries unchanged."""

    def __init__(self, value) -> None:
        self.value = value

    def __repr__(self) -> str:
        v = self.value
        return f"np.{type(v).__name__}{getattr(v, 'shape', '')}:{getattr(v, 'dtype', '')}"


def resolve(lib, v):
    if isinstance(v, D):
        return getattr(lib, v.name)
    if isinstance(v, T):
        t = lib.tensor(v.array.copy(), dtype=getattr(lib, v.dtype))
        return t.requires_grad_(True) if v.grad else t
    if isinstance(v, NP):
        return v.value.copy() if isinstance(v.value, np.ndarray) else v.value
    if isinstance(v, tuple):
        return tuple(resolve(lib, u) for u in v)
    if isinstance(v, list):
        return [resolve(lib, u) for u in v]
    return v


def _lib_namespace(lib, where: str):
    if where == "F":
        return lib.nn.functional
    if where == "special":
        return lib.special
    if where == "linalg":
        return lib.linalg
    return lib


def call(lib, style: str, name: str, x, params, where: str = "lib", input_name: str = "input"):
    """``name`` called on ``x`` with ``params`` (``[(name, value, keyword_only)]`` in torch's
    order; the first ``style[1]`` of the leading non-keyword-only ones positional)."""
    kind, n_positional = style
    args, kwargs = [], {}
    for k, (pname, value, kw_only) in enumerate(params):
        if value is OMIT:
            n_positional = min(n_positional, k)
            continue
        value = resolve(lib, value)
        if k < n_positional and not kw_only:
            args.append(value)
        else:
            kwargs[pname] = value
    if kind == "method":
        return getattr(x, name)(*args, **kwargs)
    fn = getattr(_lib_namespace(lib, where), name)
    if kind == "input_kw":
        return fn(**{input_name: x}, **kwargs) if not args else fn(x, *args, **kwargs)
    return fn(x, *args, **kwargs)


def describe_call(style, name, params, where="lib") -> str:
    kind, n_positional = style
    shown = []
    for k, (pname, value, kw_only) in enumerate(params):
        if value is OMIT:
            n_positional = min(n_positional, k)
            continue
        shown.append(f"{value!r}" if k < n_positional and not kw_only else f"{pname}={value!r}")
    head = "x." if kind == "method" else f"{where}."
    first = [] if kind == "method" else ["input=x" if kind == "input_kw" else "x"]
    return f"{head}{name}({', '.join(first + shown)})"


# -- results -----------------------------------------------------------------------------------
def normalize(out):
    """A library-neutral picture of a result: types, dtypes, shapes and values."""
    torch = _torch()
    if isinstance(out, torch.Tensor | rg.Tensor):
        dtype = str(out.dtype).replace("torch.", "")
        a = out.detach()
        if getattr(a, "_is_zerotensor", lambda: False)():  # (torch's lazily zero gradients)
            a = torch.zeros(a.shape, dtype=a.dtype)
        a = (a.double() if dtype in ("float16", "bfloat16") else a).numpy()
        return ("tensor", dtype, tuple(out.shape), a, bool(out.requires_grad))
    if isinstance(out, torch.dtype | rg.dtype):
        return ("dtype", str(out).replace("torch.", "").replace("retrograd.", ""))
    if isinstance(out, torch.device | rg.Device):
        return ("device", out.type)
    if isinstance(out, torch.Size | rg.Size):
        return ("size", tuple(int(s) for s in out))
    if isinstance(out, np.ndarray):
        return ("ndarray", str(out.dtype), out.shape, out)
    if isinstance(out, tuple | list):
        return ("list" if isinstance(out, list) else "tuple", [normalize(o) for o in out])
    if isinstance(out, bool | int | float | str | type(None) | np.generic):
        return (type(out).__name__, out)
    return ("other", type(out).__name__)


def _same(got, want, where: str) -> None:
    if got[0] != want[0]:
        raise Mismatch(f"{where}: {got[0]} {got[1:]!r:.200} != torch's {want[0]} {want[1:]!r:.200}")
    kind = want[0]
    if kind in ("tuple", "list"):
        if len(got[1]) != len(want[1]):
            raise Mismatch(f"{where}: {len(got[1])} items != torch's {len(want[1])}")
        for k, (g, w) in enumerate(zip(got[1], want[1])):
            _same(g, w, f"{where}[{k}]")
        return
    if kind in ("tensor", "ndarray"):
        for label, k in (("dtype", 1), ("shape", 2)):
            if got[k] != want[k]:
                raise Mismatch(f"{where}: {label} {got[k]} != torch's {want[k]}")
        if kind == "tensor" and got[4] != want[4]:
            raise Mismatch(f"{where}: requires_grad {got[4]} != torch's {want[4]}")
        g, w = got[3], want[3]
        if w.dtype.kind not in "fc":
            if not np.array_equal(g, w):
                raise Mismatch(f"{where}: values\n{g}\n!= torch's\n{w}")
            return
        # (float64 at 1e-6: torch's pow backward takes ``exponent - 1`` in a float32 exponent)
        rtol = {"float32": 2e-5, "float16": 1e-3, "bfloat16": 8e-3}.get(got[1], 1e-6)
        if not np.allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True):
            raise Mismatch(f"{where}: values\n{g}\n!= torch's\n{w}")
        return
    g, w = got[1], want[1]
    if isinstance(w, float) and math.isnan(w):
        if not (isinstance(g, float) and math.isnan(g)):
            raise Mismatch(f"{where}: {g!r} != torch's nan")
        return
    if kind == "float" and isinstance(g, float):
        if not math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-7):
            raise Mismatch(f"{where}: {g!r} != torch's {w!r}")
        return
    if g != w:
        raise Mismatch(f"{where}: {g!r} != torch's {w!r}")


def _flatten(out) -> list:
    if isinstance(out, tuple | list):
        return [item for o in out for item in _flatten(o)]
    return [out]


def run(lib, program, operands):
    """``program``'s normalized outputs and the gradients of a weighted sum of its float64
    outputs with respect to the operands that require grad, or the error it raised."""
    try:
        tensors = []
        for array, dtype, grad in operands:
            t = lib.tensor(np.array(array), dtype=getattr(lib, dtype))
            tensors.append(t.requires_grad_(True) if grad else t)
        out = program(lib, *tensors)
        result = {"out": normalize(out)}
        leaves = [t for t, (_, _, grad) in zip(tensors, operands) if grad]
        rng = np.random.default_rng(31)
        loss = None
        for o in _flatten(out):
            if isinstance(o, lib.Tensor) and o.requires_grad and o.dtype == lib.float64:
                weights = lib.tensor(rng.standard_normal(tuple(o.shape)))
                term = (o * weights).sum()
                loss = term if loss is None else loss + term
        if loss is not None and leaves:
            grads = lib.autograd.grad(loss, leaves, allow_unused=True)
            grads = [lib.zeros_like(lf) if g is None else g for g, lf in zip(grads, leaves)]
            result["grad"] = normalize(list(grads))
        return result, None
    except Exception as e:  # either library's refusal is a result here
        return None, e


def _torch_parser_refusal(error) -> bool:
    """torch's argument parser refusing a form that names an accepted meaning."""
    text = str(error)
    return isinstance(error, TypeError) and (
        "must be tuple of ints, not int" in text
        or ("(position" in text and "must be" in text)
        or "received an invalid combination of arguments" in text
        or "must be Tensor, not" in text
        or "missing 1 required positional arguments" in text
        or "positional arguments but" in text
        or "got an unexpected keyword argument" in text
    )


# torch failing inside itself on a form it documents: ``True ** x`` ("unknown ivalue tag 4"),
# the gradient of ``x ** bool_tensor`` (its backward formula subtracts 1 from the bool exponent)
_TORCH_OWN_FAILURES = ("INTERNAL ASSERT FAILED", "with a bool tensor is not supported. If you")


def check(draw) -> str:
    _, program, operands = draw
    torch = _torch()
    want, want_error = run(torch, program, operands)
    got, error = run(rg, program, operands)
    if want_error is not None:
        if error is None:
            if _torch_parser_refusal(want_error):
                return "extension"
            if "derivative for aten::" in str(want_error):
                return "no torch derivative"
            if any(text in str(want_error) for text in _TORCH_OWN_FAILURES):
                return "torch's own failure"
            raise Mismatch(f"torch raises {type(want_error).__name__}: {want_error}; rg returns")
        if not isinstance(error, rg.RetrogradError):
            raise Mismatch(f"bare error {type(error).__name__}: {error}")
        return "raise"
    if error is not None:
        raise Mismatch(f"retrograd raises {type(error).__name__}: {error}") from error
    _same(got["out"], want["out"], "out")
    if ("grad" in got) != ("grad" in want):
        raise Mismatch(f"grad: torch has {'grad' in want}, retrograd {'grad' in got}")
    if "grad" in want:
        _same(got["grad"], want["grad"], "grad")
    return "ok"


# -- draws ---------------------------------------------------------------------------------------
def _shape(rng, low=0, high=3):
    nd = int(rng.integers(low, high + 1))
    return tuple(int(rng.integers(1, 4)) for _ in range(nd))


def _values(rng, shape, kind="normal"):
    if kind == "positive":
        return rng.uniform(0.5, 2.0, size=shape)
    return np.round(rng.standard_normal(size=shape) * 2, 3) + rng.uniform(-1e-3, 1e-3, size=shape)


def _style(rng, n_params: int, kinds=("method", "function", "input_kw")):
    return (str(rng.choice(kinds)), int(rng.integers(0, n_params + 1)))


def _dim(rng, nd: int, bad: float = 0.04):
    span = max(nd, 1)
    if rng.random() < bad:
        return int(rng.choice([span, -span - 1]))
    return int(rng.integers(-span, span))


def _dims(rng, nd: int):
    """A dim as an int, a tuple or a list of distinct dims (or none)."""
    r = rng.random()
    if r < 0.35 or nd == 0:
        return _dim(rng, nd)
    k = int(rng.integers(1, nd + 1))
    picks = [int(d) for d in rng.permutation(nd)[:k]]
    picks = [d - nd if rng.random() < 0.5 else d for d in picks]
    if rng.random() < 0.05:
        picks = picks + [picks[0]]  # a repeated dim
    return tuple(picks) if r < 0.7 else picks


def _maybe(rng, value, p=0.5):
    return value if rng.random() < p else OMIT


def _scalar(rng):
    pool = [
        2,
        -3,
        0.5,
        -1.25,
        True,
        False,
        NP(np.float64(1.5)),
        NP(np.float32(-0.75)),
        NP(np.int64(3)),
    ]
    return pool[int(rng.integers(len(pool)))]


def _other(rng, shape):
    """A second operand: a tensor (same shape, broadcast, 0-d, another dtype), a Python
    number, a NumPy scalar or array."""
    r = rng.random()
    if r < 0.3:
        return _scalar(rng)
    if r < 0.4:
        return NP(_values(rng, shape[-1:] if shape else ()))
    if r < 0.55:
        return T(_values(rng, ()), str(rng.choice(["float64", "float32", "int64"])))
    sub = shape[int(rng.integers(0, len(shape) + 1)) :] if shape else ()
    dtype = str(rng.choice(["float64", "float64", "float32", "int64", "bool"]))
    vals = _values(rng, sub)
    if dtype == "int64":
        vals = np.round(vals).astype(np.int64) + 3
    if dtype == "bool":
        vals = vals > 0
    return T(vals, dtype, grad=dtype == "float64" and rng.random() < 0.5)


# -- reductions and dim ops -------------------------------------------------------------------
def _reduction_params(rng, name, nd):
    keepdim = bool(rng.random() < 0.5)
    dtype = D(str(rng.choice(["float64", "float32"])))
    multi, one = _dims(rng, nd), _dim(rng, nd)
    table = {
        "sum": [("dim", multi, 0), ("keepdim", keepdim, 0), ("dtype", _maybe(rng, dtype, 0.2), 1)],
        "mean": [("dim", multi, 0), ("keepdim", keepdim, 0), ("dtype", _maybe(rng, dtype, 0.2), 1)],
        "nansum": [("dim", multi, 0), ("keepdim", keepdim, 0)],
        "nanmean": [("dim", multi, 0), ("keepdim", keepdim, 0)],
        "prod": [("dim", one, 0), ("keepdim", keepdim, 0), ("dtype", _maybe(rng, dtype, 0.2), 1)],
        "amax": [("dim", multi, 0), ("keepdim", keepdim, 0)],
        "amin": [("dim", multi, 0), ("keepdim", keepdim, 0)],
        "max": [("dim", one, 0), ("keepdim", keepdim, 0)],
        "min": [("dim", one, 0), ("keepdim", keepdim, 0)],
        "argmax": [("dim", _maybe(rng, one, 0.8), 0), ("keepdim", keepdim, 0)],
        "argmin": [("dim", _maybe(rng, one, 0.8), 0), ("keepdim", keepdim, 0)],
        "std": [
            ("dim", _maybe(rng, multi, 0.8), 0),
            ("correction", _maybe(rng, int(rng.integers(0, 2)), 0.4), 1),
            ("keepdim", keepdim, 1),
        ],
        "var": [
            ("dim", _maybe(rng, multi, 0.8), 0),
            ("unbiased", bool(rng.random() < 0.5), 0),
            ("keepdim", keepdim, 0),
        ],
        "logsumexp": [("dim", multi, 0), ("keepdim", keepdim, 0)],
        "norm": [
            ("p", [2, 1, "fro", math.inf, 3.0][int(rng.integers(5))], 0),
            ("dim", _maybe(rng, multi, 0.7), 0),
            ("keepdim", keepdim, 0),
        ],
        "count_nonzero": [("dim", _maybe(rng, multi, 0.8), 0)],
        "median": [("dim", _maybe(rng, one, 0.8), 0), ("keepdim", keepdim, 0)],
        "cumsum": [("dim", one, 0), ("dtype", _maybe(rng, dtype, 0.2), 1)],
        "cumprod": [("dim", one, 0), ("dtype", _maybe(rng, dtype, 0.2), 1)],
        "logcumsumexp": [("dim", one, 0)],
        "cummax": [("dim", one, 0)],
        "cummin": [("dim", one, 0)],
        "softmax": [("dim", one, 0), ("dtype", _maybe(rng, dtype, 0.2), 0)],
        "log_softmax": [("dim", one, 0), ("dtype", _maybe(rng, dtype, 0.2), 0)],
        "kthvalue": [("k", 1, 0), ("dim", one, 0), ("keepdim", keepdim, 0)],
        "topk": [
            ("k", 1, 0),
            ("dim", _maybe(rng, one), 0),
            ("largest", _maybe(rng, bool(rng.random() < 0.5)), 0),
            ("sorted", _maybe(rng, True), 0),
        ],
        "sort": [
            ("dim", _maybe(rng, one), 0),
            ("descending", _maybe(rng, bool(rng.random() < 0.5)), 0),
            ("stable", _maybe(rng, True, 0.3), 1),
        ],
        "argsort": [
            ("dim", _maybe(rng, one), 0),
            ("descending", _maybe(rng, bool(rng.random() < 0.5)), 0),
            ("stable", _maybe(rng, True, 0.3), 1),
        ],
        "any": [("dim", _maybe(rng, multi, 0.8), 0), ("keepdim", keepdim, 0)],
        "all": [("dim", _maybe(rng, multi, 0.8), 0), ("keepdim", keepdim, 0)],
        "std_mean": [("dim", _maybe(rng, multi, 0.8), 0), ("keepdim", keepdim, 1)],
        "var_mean": [("dim", _maybe(rng, multi, 0.8), 0), ("keepdim", keepdim, 1)],
        "aminmax": [("dim", _maybe(rng, one, 0.6), 1), ("keepdim", keepdim, 1)],
    }
    return table[name]


REDUCTIONS = [
    "sum",
    "mean",
    "nansum",
    "nanmean",
    "prod",
    "amax",
    "amin",
    "max",
    "min",
    "argmax",
    "argmin",
    "std",
    "var",
    "logsumexp",
    "norm",
    "count_nonzero",
    "median",
    "cumsum",
    "cumprod",
    "logcumsumexp",
    "cummax",
    "cummin",
    "softmax",
    "log_softmax",
    "kthvalue",
    "topk",
    "sort",
    "argsort",
    "any",
    "all",
    "std_mean",
    "var_mean",
    "aminmax",
]
_FUNCTION_ONLY = {"std_mean", "var_mean"}


def reductions(rng):
    name = str(rng.choice(REDUCTIONS))
    shape = _shape(rng, 0, 3)
    params = _reduction_params(rng, name, len(shape))
    kinds = (
        ("function", "input_kw") if name in _FUNCTION_ONLY else ("method", "function", "input_kw")
    )
    if name in ("softmax", "log_softmax") and rng.random() < 0.4:
        kinds, where = ("function", "input_kw"), "F"
    else:
        where = "lib"
    style = _style(rng, len(params), kinds)
    dtype = str(rng.choice(["float64", "float64", "float64", "float32", "int64", "bool"]))
    values = _values(rng, shape)
    if dtype == "int64":
        values = np.round(values).astype(np.int64)
    if dtype == "bool":
        values = values > 0
    operands = [(values, dtype, dtype == "float64")]
    boolean = name in ("any", "all") and rng.random() < 0.5
    if name in ("count_nonzero",):
        operands = [(np.round(_values(rng, shape)).astype(np.float64), "float64", False)]

    fields = rng.random() < 0.4

    def program(lib, x):
        out = call(lib, style, name, x > 0 if boolean else x, params, where)
        if fields and isinstance(out, tuple) and hasattr(out, "indices"):
            return out.values, out.indices, out[0]  # (torch's named tuple's fields)
        return out

    desc = f"{describe_call(style, name, params, where)}{'.fields' if fields else ''}"
    desc += f" of x{shape}:{dtype}"
    return desc, program, operands


# -- shapes: varargs against tuples and lists ------------------------------------------------------
def _sizes(rng, form, sizes):
    """``sizes`` as varargs, a tuple or a list (``form``)."""
    if form == "varargs":
        return tuple(sizes)
    return (tuple(sizes),) if form == "tuple" else (list(sizes),)


def _view_sizes(rng, shape):
    n = int(np.prod(shape)) if shape else 1
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    a = int(rng.choice(divisors))
    sizes = [a, n // a]
    if rng.random() < 0.3:
        sizes = [n]
    if rng.random() < 0.5:
        sizes[int(rng.integers(len(sizes)))] = -1
    if rng.random() < 0.05:
        sizes = [n + 1]  # a shape of the wrong size
    return sizes


def shapes(rng):
    shape = _shape(rng, 1, 3)
    nd = len(shape)
    form = str(rng.choice(["varargs", "tuple", "list"]))
    kind = str(rng.choice(SHAPE_OPS))
    x_grad = True
    if kind in ("view", "reshape"):
        sizes = _sizes(rng, form, _view_sizes(rng, shape))
        if rng.random() < 0.3 and form != "varargs":

            def program(lib, x):
                return lib.reshape(x, *sizes) if kind == "reshape" else x.view(*sizes)

            desc = f"{kind}(x, {sizes})"
        else:

            def program(lib, x):
                return getattr(x, kind)(*sizes)

            desc = f"x.{kind}(*{sizes})"
    elif kind == "permute":
        perm = [int(d) - (nd if rng.random() < 0.4 else 0) for d in rng.permutation(nd)]
        sizes = _sizes(rng, form, perm)
        fn = rng.random() < 0.3 and form != "varargs"

        def program(lib, x):
            return lib.permute(x, *sizes) if fn else x.permute(*sizes)

        desc = f"{'permute(x, ' if fn else 'x.permute('}*{sizes})"
    elif kind in ("expand", "repeat", "tile"):
        extra = int(rng.integers(0, 2))
        target = []
        for s in (1,) * extra + shape:
            if kind == "expand":
                target.append(int(rng.choice([-1, s, 3])) if s == 1 else int(rng.choice([-1, s])))
            else:
                target.append(int(rng.integers(1, 3)))
        if kind == "tile" and rng.random() < 0.4:
            target = target[1:] or target  # fewer reps than dims: tile pads with ones
        sizes = _sizes(rng, form, target)
        fn = kind == "tile" and form != "varargs" and rng.random() < 0.5

        def program(lib, x):
            return lib.tile(x, *sizes) if fn else getattr(x, kind)(*sizes)

        desc = f"{'tile(x, ' if fn else f'x.{kind}('}*{sizes})"
    elif kind == "flip":
        dims = _dims(rng, nd)
        if isinstance(dims, int):
            dims = (dims,)
        sizes = _sizes(rng, form, list(dims))
        fn = form != "varargs" and rng.random() < 0.4

        def program(lib, x):
            return lib.flip(x, *sizes) if fn else x.flip(*sizes)

        desc = f"{'flip(x, ' if fn else 'x.flip('}*{sizes})"
    elif kind in ("transpose", "swapaxes", "swapdims"):
        params = [("dim0", _dim(rng, nd), 0), ("dim1", _dim(rng, nd), 0)]
        if kind != "transpose":
            params = [("axis0" if kind == "swapaxes" else "dim0", params[0][1], 0)] + [
                ("axis1" if kind == "swapaxes" else "dim1", params[1][1], 0)
            ]
        style = _style(rng, 2)

        def program(lib, x):
            return call(lib, style, kind, x, params)

        desc = describe_call(style, kind, params)
    elif kind in ("movedim", "moveaxis"):
        k = int(rng.integers(1, nd + 1))
        src = [int(d) for d in rng.permutation(nd)[:k]]
        dst = [int(d) - (nd if rng.random() < 0.4 else 0) for d in rng.permutation(nd)[:k]]
        if k == 1 and rng.random() < 0.5:
            src, dst = src[0], dst[0]
        elif rng.random() < 0.5:
            src, dst = tuple(src), tuple(dst)
        params = [("source", src, 0), ("destination", dst, 0)]
        style = _style(rng, 2)

        def program(lib, x):
            return call(lib, style, kind, x, params)

        desc = describe_call(style, kind, params)
    else:
        params = _shape_params(rng, kind, shape)
        style = _style(rng, len(params), SHAPE_KINDS.get(kind, ("method", "function", "input_kw")))

        def program(lib, x):
            return call(lib, style, kind, x, params)

        desc = describe_call(style, kind, params)
    return f"{desc} of x{shape}", program, [(_values(rng, shape), "float64", x_grad)]


SHAPE_KINDS = {
    "t": ("method", "function"),
    "contiguous": ("method",),
    "unflatten": ("method", "function", "input_kw"),
    "ravel": ("method", "function"),
}


def _shape_params(rng, kind, shape):
    nd = len(shape)
    one = _dim(rng, nd)
    if kind == "squeeze":
        squeezable = [d for d, s in enumerate(shape) if s == 1]
        dim = _dims(rng, nd)
        if squeezable and rng.random() < 0.5:
            dim = squeezable[0] - (nd if rng.random() < 0.5 else 0)
        return [("dim", _maybe(rng, dim, 0.8), 0)]
    if kind == "unsqueeze":
        return [("dim", int(rng.integers(-nd - 1, nd + 1)), 0)]
    if kind == "flatten":
        return [("start_dim", _maybe(rng, _dim(rng, nd)), 0), ("end_dim", _maybe(rng, -1), 0)]
    if kind == "unflatten":
        s = shape[one % nd] if -nd <= one < nd else 1
        sizes = (s, 1) if rng.random() < 0.5 else (-1, 1)
        sizes = list(sizes) if rng.random() < 0.3 else sizes
        return [("dim", one, 0), ("sizes", sizes, 0)]
    if kind == "chunk":
        return [("chunks", int(rng.integers(1, 4)), 0), ("dim", _maybe(rng, one, 0.7), 0)]
    if kind == "split":
        size = shape[one % nd] if -nd <= one < nd else 2
        sections = int(rng.integers(1, 3))
        if rng.random() < 0.4:
            first = int(rng.integers(0, size + 1))
            sections = [first, size - first]
            sections = tuple(sections) if rng.random() < 0.5 else sections
        return [("split_size_or_sections", sections, 0), ("dim", _maybe(rng, one, 0.7), 0)]
    if kind == "tensor_split":
        sections = int(rng.integers(1, 4)) if rng.random() < 0.5 else [1]
        return [("sections" if isinstance(sections, int) else "indices", sections, 0)] + [
            ("dim", _maybe(rng, one, 0.7), 0)
        ]
    if kind == "unbind":
        return [("dim", _maybe(rng, one, 0.7), 0)]
    if kind == "narrow":
        size = shape[one % nd] if -nd <= one < nd else 1
        start = int(rng.integers(-size, size))
        return [("dim", one, 0), ("start", start, 0), ("length", 1, 0)]
    if kind == "select":
        size = shape[one % nd] if -nd <= one < nd else 1
        return [
            ("dim", one, 0),
            ("index", int(rng.integers(-size, size + (rng.random() < 0.05))), 0),
        ]
    if kind == "roll":
        if rng.random() < 0.3:
            return [("shifts", int(rng.integers(-3, 4)), 0)]
        dims = _dims(rng, nd)
        shifts = (
            int(rng.integers(-3, 4))
            if isinstance(dims, int)
            else tuple(int(s) for s in rng.integers(-3, 4, size=len(dims)))
        )
        return [("shifts", shifts, 0), ("dims", dims, 0)]
    if kind in ("tril", "triu"):
        return [("diagonal", _maybe(rng, int(rng.integers(-2, 3))), 0)]
    if kind == "diagonal":
        return [
            ("offset", _maybe(rng, int(rng.integers(-1, 2))), 0),
            ("dim1", _maybe(rng, _dim(rng, nd)), 0),
            ("dim2", _maybe(rng, _dim(rng, nd)), 0),
        ]
    if kind == "rot90":
        return [("k", _maybe(rng, int(rng.integers(-2, 4))), 0), ("dims", _maybe(rng, [0, -1]), 0)]
    return []


SHAPE_OPS = [
    "view",
    "reshape",
    "permute",
    "expand",
    "repeat",
    "tile",
    "flip",
    "transpose",
    "swapaxes",
    "swapdims",
    "movedim",
    "moveaxis",
    "squeeze",
    "unsqueeze",
    "flatten",
    "unflatten",
    "chunk",
    "split",
    "tensor_split",
    "unbind",
    "narrow",
    "select",
    "roll",
    "tril",
    "triu",
    "diagonal",
    "rot90",
    "t",
    "contiguous",
    "ravel",
]


# -- binary ops: operands on either side, aliases, method against function against operator --------
BINARY = {
    # name: (function names, operator, keyword-only extras)
    "add": (["add"], "__add__", "alpha"),
    "sub": (["sub", "subtract"], "__sub__", "alpha"),
    "mul": (["mul", "multiply"], "__mul__", None),
    "div": (["div", "divide", "true_divide"], "__truediv__", "rounding_mode"),
    "floor_divide": (["floor_divide"], "__floordiv__", None),
    "pow": (["pow", "float_power"], "__pow__", None),
    "remainder": (["remainder"], "__mod__", None),
    "fmod": (["fmod"], None, None),
    "atan2": (["atan2", "arctan2"], None, None),
    "hypot": (["hypot"], None, None),
    "maximum": (["maximum", "fmax"], None, None),
    "minimum": (["minimum", "fmin"], None, None),
    "eq": (["eq"], "__eq__", None),
    "ne": (["ne", "not_equal"], "__ne__", None),
    "lt": (["lt", "less"], "__lt__", None),
    "le": (["le", "less_equal"], "__le__", None),
    "gt": (["gt", "greater"], "__gt__", None),
    "ge": (["ge", "greater_equal"], "__ge__", None),
    "logical_and": (["logical_and"], None, None),
    "logical_or": (["logical_or"], None, None),
    "xlogy": (["xlogy"], None, None),
    "copysign": (["copysign"], None, None),
    "matmul": (["matmul"], "__matmul__", None),
    "isclose": (["isclose"], None, None),
    "dist": (["dist"], None, None),
}


def binary(rng):
    family = str(rng.choice(sorted(BINARY)))
    names, operator_name, extra = BINARY[family]
    name = str(rng.choice(names))
    shape = _shape(rng, 0, 2)
    other = _other(rng, shape)
    if family == "matmul":
        other = T(_values(rng, shape[-1:] + (2,)[: len(shape) - 1]), "float64", grad=True)
    x_dtype = str(rng.choice(["float64", "float64", "float32", "int64"]))
    x_vals = _values(rng, shape)
    if x_dtype == "int64":
        x_vals = np.round(x_vals).astype(np.int64) + 2
    kwargs = {}
    if extra == "alpha" and rng.random() < 0.4:
        kwargs["alpha"] = [2, 0.5, -1][int(rng.integers(3))]
    if extra == "rounding_mode" and rng.random() < 0.4:
        kwargs["rounding_mode"] = [None, "trunc", "floor"][int(rng.integers(3))]
    forms = ["method", "function", "other_kw"]
    # (a NumPy array beside an operator is left out: NumPy's operator takes over, and torch
    # fails inside it for a tensor that requires grad or for a comparison)
    if operator_name and not (isinstance(other, NP) and isinstance(other.value, np.ndarray)):
        forms += ["operator", "reflected"]
    if family in ("add", "sub", "mul", "div", "pow", "atan2", "maximum", "minimum", "remainder"):
        forms += ["number_first"]
    form = str(rng.choice(forms))

    def program(lib, x):
        y = resolve(lib, other)
        if form == "method":
            return getattr(x, name)(y, **kwargs)
        if form == "function":
            return getattr(lib, name)(x, y, **kwargs)
        if form == "other_kw":
            return getattr(lib, name)(x, other=y, **kwargs)
        if form == "operator":
            if kwargs:
                return getattr(lib, name)(x, y, **kwargs)
            return getattr(operator, operator_name.strip("_"))(x, y)
        if form == "reflected":
            op = operator_name
            return {
                "__add__": lambda: y + x,
                "__sub__": lambda: y - x,
                "__mul__": lambda: y * x,
                "__truediv__": lambda: y / x,
                "__floordiv__": lambda: y // x,
                "__pow__": lambda: y**x,
                "__mod__": lambda: y % x,
                "__eq__": lambda: y == x,
                "__ne__": lambda: y != x,
                "__lt__": lambda: y < x,
                "__le__": lambda: y <= x,
                "__gt__": lambda: y > x,
                "__ge__": lambda: y >= x,
                "__matmul__": lambda: x @ y,
            }[op]()
        # a Python number first in the function form (torch.pow(2, x), torch.add(2, x)...)
        number = y if not isinstance(y, lib.Tensor | np.ndarray) else 2.5
        return getattr(lib, name)(number, x, **kwargs)

    desc = f"{form} {name}{kwargs or ''}(x{shape}:{x_dtype}, {other!r})"
    return desc, program, [(x_vals, x_dtype, x_dtype == "float64")]


# -- unary ops and their aliases ---------------------------------------------------------------
UNARY = {
    "abs": ["abs", "absolute"],
    "neg": ["neg", "negative"],
    "sigmoid": ["sigmoid", "F.sigmoid", "special.expit"],
    "tanh": ["tanh", "F.tanh"],
    "relu": ["relu", "F.relu"],
    "exp": ["exp", "special.exp2", "exp2"],
    "log": ["log", "log2", "log10", "log1p"],
    "sqrt": ["sqrt", "rsqrt"],
    "trig": ["sin", "cos", "tan"],
    "acos": ["acos", "arccos"],
    "asin": ["asin", "arcsin"],
    "atan": ["atan", "arctan"],
    "trunc": ["trunc", "fix"],
    "clip": ["clamp", "clip"],
    "square": ["square", "reciprocal"],
    "sign": ["sign", "sgn", "signbit"],
    "erf": ["erf", "special.erf", "erfinv", "special.erfinv"],
    "round": ["round", "floor", "ceil", "frac"],
    "expm1": ["expm1", "special.expm1"],
    "logit": ["logit", "special.logit"],
    "sinc": ["sinc", "special.sinc"],
    "nan_to_num": ["nan_to_num"],
    "isnan": ["isnan", "isinf", "isfinite", "isreal"],
    "deg2rad": ["deg2rad", "rad2deg"],
}


def unary(rng):
    family = str(rng.choice(sorted(UNARY)))
    full = str(rng.choice(UNARY[family]))
    where, name = full.split(".") if "." in full else ("lib", full)
    shape = _shape(rng, 0, 2)
    kind = "positive" if family in ("log", "sqrt") else "normal"
    vals = _values(rng, shape, kind)
    if family in ("acos", "asin", "erf", "logit"):
        vals = np.clip(vals, -0.9, 0.9) if family != "logit" else rng.uniform(0.1, 0.9, shape)
        if full.startswith("erfinv") or full.endswith("erfinv"):
            vals = np.clip(vals, -0.9, 0.9)
    params = []
    if name in ("clamp", "clip"):
        lo = [-0.5, OMIT, -1, T(-0.25, "float64"), NP(np.float64(-0.3))][int(rng.integers(5))]
        hi = [0.5, OMIT, 2, T(np.full(shape[-1:], 0.4), "float64")][int(rng.integers(4))]
        params = [("min", lo, 0), ("max", hi, 0)]
    elif name == "round" and rng.random() < 0.4:
        params = [("decimals", int(rng.integers(0, 3)), 1)]
    elif name == "logit" and rng.random() < 0.4:
        params = [("eps", 0.2, 0)]
    elif name == "nan_to_num":
        vals = vals.copy()
        if vals.size:
            vals.flat[0] = np.nan
        params = [("nan", _maybe(rng, 0.5), 0), ("posinf", _maybe(rng, 9.0), 0)]
    elif name == "relu" and where == "F":
        params = [("inplace", _maybe(rng, False), 0)]
    kinds = ("function", "input_kw") if where != "lib" else ("method", "function", "input_kw")
    if name in ("exp2",) or name == "fix":
        kinds = ("method", "function") if where == "lib" else kinds
    style = _style(rng, len(params), kinds)
    dtype = str(rng.choice(["float64", "float64", "float32", "int64"]))
    if dtype == "int64":
        vals = np.round(vals).astype(np.int64)

    def program(lib, x):
        return call(lib, style, name, x, params, where)

    desc = f"{describe_call(style, name, params, where)} of x{shape}:{dtype}"
    return desc, program, [(vals, dtype, dtype == "float64")]


# -- nn.functional with positional against keyword arguments ------------------------------------
def functional(rng):
    name = str(rng.choice(sorted(FUNCTIONAL)))
    params, operands = FUNCTIONAL[name](rng)
    style = _style(rng, len(params), ("function", "input_kw"))

    def program(lib, x, *rest):
        resolved = [(p, rest[v.index] if isinstance(v, Operand) else v, k) for p, v, k in params]
        return call(lib, style, name, x, resolved, "F")

    shapes = [np.shape(a) for a, _, _ in operands]
    return f"{describe_call(style, name, params, 'F')} of {shapes}", program, operands


class Operand:
    """The ``index``-th operand after ``x`` (a weight, a target) passed as an argument."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"operand{self.index + 1}"


def _act(extras):
    def draw(rng):
        shape = _shape(rng, 1, 3)
        params = [(p, _maybe(rng, v), kw) for p, v, kw in extras(rng)]
        return params, [(_values(rng, shape), "float64", True)]

    return draw


def _loss(kind):
    def draw(rng):
        n, c = int(rng.integers(1, 4)), int(rng.integers(2, 4))
        red = _maybe(rng, str(rng.choice(["mean", "sum", "none"])))
        x = (_values(rng, (n, c)), "float64", True)
        if kind == "class":
            target = (rng.integers(0, c, size=n), "int64", False)
            extra = [("weight", OMIT, 0), ("size_average", OMIT, 0), ("ignore_index", OMIT, 0)]
            extra[2] = ("ignore_index", _maybe(rng, 0, 0.3), 0)
            extra += [("reduce", OMIT, 0), ("reduction", red, 0)]
            return [("target", Operand(0), 0)] + extra, [x, target]
        if kind == "bce":
            target = (rng.uniform(0, 1, size=(n, c)), "float64", False)
            pos = _maybe(rng, Operand(1), 0.3)
            ops = [x, target] + ([(rng.uniform(0.5, 2, size=(c,)), "float64", False)])
            return [
                ("target", Operand(0), 0),
                ("weight", OMIT, 0),
                ("size_average", OMIT, 0),
                ("reduce", OMIT, 0),
                ("reduction", red, 0),
                ("pos_weight", pos, 0),
            ], ops
        target = (_values(rng, (n, c)), "float64", bool(rng.random() < 0.5))
        extra = []
        if kind == "smooth":
            extra = [("beta", _maybe(rng, 0.5), 1)]
        if kind == "huber":
            extra = [("delta", _maybe(rng, 0.5), 1)]
        params = [
            ("target", Operand(0), 0),
            ("size_average", OMIT, 0),
            ("reduce", OMIT, 0),
            ("reduction", red, 0),
        ]
        return params + extra, [x, target]

    return draw


def _cross_entropy(rng):
    n, c = int(rng.integers(1, 4)), int(rng.integers(2, 4))
    probs = rng.random() < 0.3
    x = (_values(rng, (n, c)), "float64", True)
    target = (
        (rng.dirichlet(np.ones(c), size=n), "float64", False)
        if probs
        else (rng.integers(0, c, size=n), "int64", False)
    )
    params = [
        ("target", Operand(0), 0),
        ("weight", _maybe(rng, Operand(1), 0.3), 0),
        ("size_average", OMIT, 0),
        ("ignore_index", _maybe(rng, 1, 0.2) if not probs else OMIT, 0),
        ("reduce", OMIT, 0),
        ("reduction", _maybe(rng, str(rng.choice(["mean", "sum", "none"]))), 0),
        ("label_smoothing", _maybe(rng, 0.1, 0.3), 0),
    ]
    return params, [x, target, (rng.uniform(0.5, 2, size=c), "float64", False)]


def _layer_norm(rng):
    shape = _shape(rng, 1, 3)
    k = int(rng.integers(1, len(shape) + 1))
    normalized = shape[-k:]
    form = [normalized, list(normalized), normalized[-1] if k == 1 else normalized]
    ns = form[int(rng.integers(3))]
    w = (_values(rng, normalized), "float64", True)
    b = (_values(rng, normalized), "float64", True)
    params = [
        ("normalized_shape", ns, 0),
        ("weight", _maybe(rng, Operand(0)), 0),
        ("bias", _maybe(rng, Operand(1)), 0),
        ("eps", _maybe(rng, 1e-3), 0),
    ]
    return params, [(_values(rng, shape), "float64", True), w, b]


def _rms_norm(rng):
    params, ops = _layer_norm(rng)
    return [params[0], params[1], ("eps", _maybe(rng, 1e-3), 0)], ops[:2]


def _group_norm(rng):
    c = int(rng.choice([2, 4]))
    groups = int(rng.choice([1, 2]))
    x = (_values(rng, (2, c, 3)), "float64", True)
    w = (_values(rng, (c,)), "float64", True)
    weight = _maybe(rng, Operand(0))
    # (torch fails inside on a bias without a weight: "tensor does not have a device")
    params = [
        ("num_groups", groups, 0),
        ("weight", weight, 0),
        ("bias", _maybe(rng, Operand(1)) if weight is not OMIT else OMIT, 0),
        ("eps", _maybe(rng, 1e-3), 0),
    ]
    return params, [x, w, (_values(rng, (c,)), "float64", True)]


def _linear(rng):
    n_in, n_out = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    lead = _shape(rng, 0, 2)
    params = [("weight", Operand(0), 0), ("bias", _maybe(rng, Operand(1)), 0)]
    return params, [
        (_values(rng, lead + (n_in,)), "float64", True),
        (_values(rng, (n_out, n_in)), "float64", True),
        (_values(rng, (n_out,)), "float64", True),
    ]


def _pair(rng, value):
    r = rng.random()
    return value if r < 0.4 else (value, value) if r < 0.8 else [value, value]


def _pool(kind):
    def draw(rng):
        h, w = int(rng.integers(2, 5)), int(rng.integers(2, 5))
        x = (_values(rng, (1, 2, h, w) if rng.random() < 0.7 else (2, h, w)), "float64", True)
        if kind.startswith("adaptive"):
            size = [1, 2, (1, 2), [2, 1], (None, 2)][int(rng.integers(5))]
            return [("output_size", size, 0)], [x]
        params = [
            ("kernel_size", _pair(rng, 2), 0),
            ("stride", _maybe(rng, _pair(rng, 1)), 0),
            ("padding", _maybe(rng, _pair(rng, int(rng.integers(0, 2)))), 0),
        ]
        if kind == "max":
            params += [
                ("dilation", _maybe(rng, 1, 0.2), 0),
                ("ceil_mode", _maybe(rng, True, 0.3), 0),
                ("return_indices", _maybe(rng, True, 0.3), 0),
            ]
        else:
            params += [
                ("ceil_mode", _maybe(rng, True, 0.3), 0),
                ("count_include_pad", _maybe(rng, False, 0.3), 0),
            ]
        return params, [x]

    return draw


def _conv2d(rng):
    c_in, c_out = 2, int(rng.choice([2, 4]))
    groups = int(rng.choice([1, 2]))
    x = (_values(rng, (1, c_in, 4, 4)), "float64", True)
    w = (_values(rng, (c_out, c_in // groups, 2, 2)), "float64", True)
    padding = [0, 1, (1, 0), "same", "valid", [0, 1]][int(rng.integers(6))]
    params = [
        ("weight", Operand(0), 0),
        ("bias", _maybe(rng, Operand(1)), 0),
        ("stride", _maybe(rng, _pair(rng, 1) if padding == "same" else _pair(rng, 2)), 0),
        ("padding", _maybe(rng, padding), 0),
        ("dilation", _maybe(rng, _pair(rng, 1)), 0),
        ("groups", _maybe(rng, groups), 0),
    ]
    return params, [x, w, (_values(rng, (c_out,)), "float64", True)]


def _pad(rng):
    shape = _shape(rng, 1, 3)
    k = int(rng.integers(1, len(shape) + 1))
    pad = [int(p) for p in rng.integers(0, 3, size=2 * k)]
    pad = tuple(pad) if rng.random() < 0.5 else pad
    mode = _maybe(rng, "constant", 0.3)
    return [("pad", pad, 0), ("mode", mode, 0), ("value", _maybe(rng, 1.5), 0)], [
        (_values(rng, shape), "float64", True)
    ]


def _normalize(rng):
    shape = _shape(rng, 1, 3)
    params = [
        ("p", _maybe(rng, [1, 2.0, 3][int(rng.integers(3))]), 0),
        ("dim", _maybe(rng, _dim(rng, len(shape))), 0),
        ("eps", _maybe(rng, 1e-6), 0),
    ]
    return params, [(_values(rng, shape), "float64", True)]


def _one_hot(rng):
    n = int(rng.integers(1, 5))
    idx = rng.integers(0, 3, size=n)
    return [("num_classes", _maybe(rng, int(rng.choice([-1, 3, 4]))), 0)], [(idx, "int64", False)]


def _softmax(rng):
    shape = _shape(rng, 1, 3)
    params = [
        ("dim", _dim(rng, len(shape)), 0),
        ("_stacklevel", OMIT, 0),
        ("dtype", _maybe(rng, D("float64"), 0.2), 0),
    ]
    return params, [(_values(rng, shape), "float64", True)]


def _interpolate(rng):
    x = (_values(rng, (1, 2, 2, 3)), "float64", True)
    if rng.random() < 0.5:
        size, scale = [3, (4, 3), [2, 6]][int(rng.integers(3))], OMIT
    else:
        size, scale = OMIT, [2, 2.0, (2, 1.5), [1.5, 2]][int(rng.integers(4))]
    mode = _maybe(rng, str(rng.choice(["nearest", "bilinear"])))
    align = _maybe(rng, False, 0.3) if mode == "bilinear" else OMIT
    params = [
        ("size", size, 0),
        ("scale_factor", scale, 0),
        ("mode", mode, 0),
        ("align_corners", align, 0),
    ]
    return params, [x]


def _sdpa(rng):
    q = (_values(rng, (1, 2, 3, 4)), "float64", True)
    k = (_values(rng, (1, 2, 3, 4)), "float64", True)
    v = (_values(rng, (1, 2, 3, 4)), "float64", True)
    params = [
        ("key", Operand(0), 0),
        ("value", Operand(1), 0),
        ("attn_mask", OMIT, 0),
        ("dropout_p", _maybe(rng, 0.0), 0),
        ("is_causal", _maybe(rng, True), 0),
        ("scale", _maybe(rng, 0.5, 0.3), 1),
    ]
    return params, [q, k, v]


def _cosine(rng):
    shape = (2, 3)
    params = [("x2", Operand(0), 0), ("dim", _maybe(rng, int(rng.choice([0, 1, -1]))), 0)]
    params += [("eps", _maybe(rng, 1e-6), 0)]
    return params, [(_values(rng, shape), "float64", True), (_values(rng, (3,)), "float64", True)]


def _dropout(rng):
    params = [
        ("p", _maybe(rng, 0.0, 0.7), 0),
        ("training", _maybe(rng, False, 0.6), 0),
        ("inplace", _maybe(rng, False, 0.3), 0),
    ]
    if params[0][1] is OMIT or params[1][1] is OMIT:
        params[0] = ("p", 0.0, 0)
    return params, [(_values(rng, _shape(rng, 1, 2)), "float64", True)]


def _glu(rng):
    return [("dim", _maybe(rng, -1), 0)], [(_values(rng, (2, 4)), "float64", True)]


FUNCTIONAL = {
    "relu": _act(lambda r: [("inplace", False, 0)]),
    "relu6": _act(lambda r: [("inplace", False, 0)]),
    "gelu": _act(lambda r: [("approximate", str(r.choice(["none", "tanh"])), 1)]),
    "silu": _act(lambda r: [("inplace", False, 0)]),
    "softplus": _act(lambda r: [("beta", 2.0, 0), ("threshold", 1.0, 0)]),
    "leaky_relu": _act(lambda r: [("negative_slope", 0.2, 0), ("inplace", False, 0)]),
    "elu": _act(lambda r: [("alpha", 0.7, 0), ("inplace", False, 0)]),
    "hardtanh": _act(lambda r: [("min_val", -0.5, 0), ("max_val", 0.8, 0)]),
    "logsigmoid": _act(lambda r: []),
    "mish": _act(lambda r: [("inplace", False, 0)]),
    "hardswish": _act(lambda r: [("inplace", False, 0)]),
    "tanh": _act(lambda r: []),
    "sigmoid": _act(lambda r: []),
    "softsign": _act(lambda r: []),
    "celu": _act(lambda r: [("alpha", 1.5, 0), ("inplace", False, 0)]),
    "selu": _act(lambda r: [("inplace", False, 0)]),
    "mse_loss": _loss("plain"),
    "l1_loss": _loss("plain"),
    "smooth_l1_loss": _loss("smooth"),
    "huber_loss": _loss("huber"),
    "nll_loss": _loss("class"),
    "binary_cross_entropy_with_logits": _loss("bce"),
    "cross_entropy": _cross_entropy,
    "layer_norm": _layer_norm,
    "rms_norm": _rms_norm,
    "group_norm": _group_norm,
    "linear": _linear,
    "avg_pool2d": _pool("avg"),
    "max_pool2d": _pool("max"),
    "adaptive_avg_pool2d": _pool("adaptive_avg"),
    "adaptive_max_pool2d": _pool("adaptive_max"),
    "conv2d": _conv2d,
    "pad": _pad,
    "normalize": _normalize,
    "one_hot": _one_hot,
    "softmax": _softmax,
    "log_softmax": _softmax,
    "interpolate": _interpolate,
    "scaled_dot_product_attention": _sdpa,
    "cosine_similarity": _cosine,
    "dropout": _dropout,
    "glu": _glu,
}


# -- creation: varargs against tuples, dtype and requires_grad keywords ------------------------
def creation(rng):
    kind = str(rng.choice(CREATION))
    shape = _shape(rng, 0, 3)
    form = str(rng.choice(["varargs", "tuple", "list", "size_kw"]))
    if not shape and form == "varargs":
        form = "tuple"
    dtype = _maybe(rng, D(str(rng.choice(["float64", "float32", "int64", "bool"]))), 0.4)
    grad = _maybe(rng, bool(rng.random() < 0.5), 0.4)
    if grad is True and dtype is OMIT:
        dtype = D("float64")
    kw = {"dtype": dtype, "requires_grad": grad}
    fill = [2, 1.5, True, -3, NP(np.float64(0.25))][int(rng.integers(5))]
    x_shape = _shape(rng, 0, 2)
    x_dtype = str(rng.choice(["float64", "float32", "int64"]))
    rng_size = int(rng.integers(0, 4))
    random_values = kind in ("empty", "rand", "randn", "empty_like", "rand_like", "randn_like")
    random_values |= kind in ("new_empty",)

    def kwargs(lib):
        return {k: resolve(lib, v) for k, v in kw.items() if v is not OMIT}

    def sizes():
        if form == "size_kw":
            return (), {"size": shape}
        return (shape if form == "varargs" else (shape,) if form == "tuple" else (list(shape),)), {}

    def program(lib, x):
        args, size_kw = sizes()
        k = kwargs(lib)
        if kind in ("zeros", "ones", "empty", "rand", "randn"):
            out = getattr(lib, kind)(*args, **size_kw, **k)
        elif kind == "full":
            out = lib.full(shape if form != "list" else list(shape), resolve(lib, fill), **k)
        elif kind in ("zeros_like", "ones_like", "empty_like", "rand_like", "randn_like"):
            out = getattr(lib, kind)(x, **k)
        elif kind == "full_like":
            out = lib.full_like(x, resolve(lib, fill), **k)
        elif kind in ("new_zeros", "new_ones", "new_empty"):
            out = getattr(x, kind)(*args, **size_kw, **k)
        elif kind == "new_full":
            out = x.new_full(shape if form != "list" else list(shape), resolve(lib, fill), **k)
        elif kind == "new_tensor":
            out = x.new_tensor(np.arange(3) * 0.5 if form == "tuple" else [1, 2], **k)
        elif kind == "tensor":
            data = {
                "varargs": [[1, 2], [3, 4]],
                "tuple": (1.5, 2),
                "list": [True, False],
                "size_kw": resolve(lib, fill),
            }[form]
            out = lib.tensor(data, **k)
        elif kind == "as_tensor":
            out = lib.as_tensor(
                np.arange(4, dtype=np.int32) if form == "list" else [1, 2.5],
                **{k2: v for k2, v in k.items() if k2 == "dtype"},
            )
        elif kind == "arange":
            out = {
                "varargs": lambda: lib.arange(5, **k),
                "tuple": lambda: lib.arange(1, 6, 2, **k),
                "list": lambda: lib.arange(0, 1, 0.25, **k),
                "size_kw": lambda: lib.arange(end=4, **k),
            }[form]()
        elif kind == "linspace":
            out = lib.linspace(0, 1, steps=4, **k) if form != "list" else lib.linspace(0, 1, 3)
        elif kind == "arange_out":
            target = lib.zeros(int(rng_size), dtype=getattr(lib, x_dtype))
            made = lib.arange(1, 4, out=target)
            return made is target, target
        elif kind == "legacy":
            made = {
                "varargs": lambda: lib.FloatTensor([1, 2.5]),
                "tuple": lambda: lib.LongTensor([[1, 2]]),
                "list": lambda: lib.Tensor([[1.0], [2.0]]),
                "size_kw": lambda: lib.DoubleTensor([0.5]),
            }[form]()
            return made, lib.Tensor(*shape).shape if shape else made.shape
        elif kind == "eye":
            out = lib.eye(3, **k) if form in ("varargs", "tuple") else lib.eye(2, 3, **k)
        else:
            raise AssertionError(kind)
        if random_values:
            return out.shape, out.dtype, out.requires_grad, out.is_leaf
        return out, out.is_leaf, out.grad_fn is None

    desc = f"{kind}({form} {shape}, {kw}) fill={fill!r} x{x_shape}:{x_dtype}"
    vals = _values(rng, x_shape)
    if x_dtype == "int64":
        vals = np.round(vals).astype(np.int64)
    return desc, program, [(vals, x_dtype, x_dtype == "float64" and rng.random() < 0.5)]


CREATION = [
    "arange_out",
    "legacy",
    "zeros",
    "ones",
    "empty",
    "rand",
    "randn",
    "full",
    "zeros_like",
    "ones_like",
    "empty_like",
    "rand_like",
    "randn_like",
    "full_like",
    "new_zeros",
    "new_ones",
    "new_empty",
    "new_full",
    "new_tensor",
    "tensor",
    "as_tensor",
    "arange",
    "linspace",
    "eye",
]


# -- attributes -----------------------------------------------------------------------------------
ATTRIBUTES = {
    "T": lambda lib, x: x.T,
    "mT": lambda lib, x: x.mT,
    "shape": lambda lib, x: (x.shape, x.shape[-1] if x.ndim else None, len(x.shape)),
    "size": lambda lib, x: (x.size(), x.size(-1) if x.ndim else x.size()),
    "size_kw": lambda lib, x: x.size(dim=0) if x.ndim else x.numel(),
    "ndim": lambda lib, x: (x.ndim, x.dim(), x.numel(), x.nelement()),
    "is_leaf": lambda lib, x: (x.is_leaf, (x * 2).is_leaf, x.detach().is_leaf, x[...].is_leaf),
    "grad_fn": lambda lib, x: (x.grad_fn is None, (x + 1).grad_fn is None, x.data.grad_fn is None),
    "requires_grad": lambda lib, x: (
        x.requires_grad,
        (x * 2).requires_grad,
        x.data.requires_grad,
    ),
    "device": lambda lib, x: (x.device.type, x.device == lib.device("cpu"), x.is_cpu),
    "dtype": lambda lib, x: (
        x.dtype,
        x.dtype == lib.float64,
        x.dtype.is_floating_point,
        x.is_floating_point(),
        x.element_size(),
        x.dtype.itemsize,
    ),
    "item": lambda lib, x: x.item() if x.numel() == 1 else x.tolist(),
    "tolist": lambda lib, x: x.tolist(),
    "len": lambda lib, x: len(x),
    "no_grad": lambda lib, x: _under_no_grad(lib, x),
    "to": lambda lib, x: (x.to(lib.float32), x.to("cpu"), x.to(dtype=lib.float64), x.to(x)),
    "to_device_dtype": lambda lib, x: x.to("cpu", lib.float32),
    "type": lambda lib, x: (x.type(lib.float32), x.type_as(lib.tensor([1]))),
    "type_class": lambda lib, x: (x.type(lib.FloatTensor), x.type(lib.LongTensor)),
    "type_string": lambda lib, x: (x.type("torch.DoubleTensor"), x.type(dtype=lib.int64)),
    "casts": lambda lib, x: (x.float(), x.double(), x.long(), x.int(), x.bool()),
    "detach": lambda lib, x: (
        x.detach().tolist(),
        x.detach().is_leaf,
        x.clone(),
        x.clone().detach().requires_grad_() if x.is_floating_point() else x,
    ),
    "view_as": lambda lib, x: (x.view_as(x), x.reshape_as(x), x.expand_as(x), x.type_as(x)),
    "numpy": lambda lib, x: x.detach().numpy(),
    "contiguous": lambda lib, x: (x.is_contiguous(), x.contiguous()),
    "is_tensor": lambda lib, x: (lib.is_tensor(x), lib.is_tensor(1.0), lib.numel(x)),
    "H": lambda lib, x: x.mH,
}


def _under_no_grad(lib, x):
    with lib.no_grad():
        y = x * 2
    with lib.set_grad_enabled(False):
        z = x + 1
    return y.requires_grad, z.requires_grad, lib.is_grad_enabled(), y


def attributes(rng):
    name = str(rng.choice(sorted(ATTRIBUTES)))
    shape = _shape(rng, 0, 3)
    dtype = str(rng.choice(["float64", "float64", "float32", "int64", "bool"]))
    vals = _values(rng, shape)
    if dtype == "int64":
        vals = np.round(vals).astype(np.int64)
    if dtype == "bool":
        vals = vals > 0
    grad = dtype == "float64" and rng.random() < 0.7
    return f"{name} of x{shape}:{dtype} grad={grad}", ATTRIBUTES[name], [(vals, dtype, grad)]


# -- sequences of tensors: cat/concat/concatenate, stack, einsum, meshgrid ----------------------
def sequences(rng):
    kind = str(
        rng.choice(
            ["cat", "concat", "concatenate", "stack", "hstack", "vstack"] * 2
            + [
                "einsum",
                "meshgrid",
                "broadcast_tensors",
                "where",
                "masked_fill",
                "gather",
                "index_select",
                "scatter",
            ]
            + list(MORE)
        )
    )
    indexing = kind in ("where", "masked_fill", "gather", "index_select", "scatter", *MORE)
    shape = _shape(rng, 0 if indexing else 1, 3)
    nd = len(shape)
    n = int(rng.integers(1, 4))
    operands = [(_values(rng, shape), "float64", True) for _ in range(n)]
    container = str(rng.choice(["list", "tuple"]))
    dim_value = _dim(rng, nd + (kind == "stack"))
    dim_form = str(rng.choice(["positional", "dim", "axis", "omit"]))

    def seq(ts):
        return list(ts) if container == "list" else tuple(ts)

    def program(lib, *ts):
        if kind in ("cat", "concat", "concatenate", "stack"):
            fn = getattr(lib, kind)
            if dim_form == "positional":
                return fn(seq(ts), dim_value)
            if dim_form == "omit":
                return fn(seq(ts))
            if dim_form == "axis" and kind != "concatenate":
                return fn(seq(ts), dim=dim_value)
            return fn(tensors=seq(ts), **{dim_form: dim_value})
        if kind in ("hstack", "vstack"):
            return getattr(lib, kind)(seq(ts))
        if kind == "einsum":
            a = ts[0].reshape(-1)
            b = ts[-1].reshape(-1)
            eq = "i,j->ij" if dim_form != "omit" else "i,i"
            return lib.einsum(eq, a, b) if container == "tuple" else lib.einsum(eq, [a, b])
        if kind == "meshgrid":
            vecs = [t.reshape(-1) for t in ts]
            kw = {} if dim_form == "omit" else {"indexing": "ij" if dim_form == "dim" else "xy"}
            return lib.meshgrid(*vecs, **kw) if container == "tuple" else lib.meshgrid(vecs, **kw)
        if kind == "broadcast_tensors":
            return lib.broadcast_tensors(ts[0], ts[-1][..., :1])
        x = ts[0]
        if kind in MORE:
            return MORE[kind](lib, x, ts[-1], dim_value, dim_form)
        if kind == "where":
            cond = x > 0
            other = [0.0, 1, ts[-1], lib.tensor(2.0, dtype=lib.float64)][abs(dim_value) % 4]
            if dim_form == "positional":
                return lib.where(cond, x, other)
            if dim_form == "dim":
                return lib.where(cond, other, x)
            if dim_form == "axis":
                return x.where(cond, other)
            return lib.where(cond)
        if kind == "masked_fill":
            value = [0.5, -1, lib.tensor(3.0), float("-inf")][abs(dim_value) % 4]
            mask = ts[-1] > 0
            return (
                x.masked_fill(mask, value)
                if dim_form != "dim"
                else x.masked_fill(mask=mask, value=value)
            )
        index = lib.tensor(np.zeros(shape, dtype=np.int64))
        if kind == "gather":
            if dim_form == "positional":
                return lib.gather(x, dim_value, index)
            if dim_form == "dim":
                return x.gather(dim=dim_value, index=index)
            return x.gather(dim_value, index)
        if kind == "index_select":
            idx = lib.tensor([0, 0]) if dim_form != "axis" else lib.tensor(0)
            return (
                lib.index_select(x, dim_value, idx)
                if dim_form == "positional"
                else (x.index_select(dim=dim_value, index=idx))
            )
        src = ts[-1]
        if dim_form == "positional":
            return x.scatter(dim_value, index, src)
        if dim_form == "dim":
            return lib.scatter(x, dim=dim_value, index=index, value=1.5)
        if dim_form == "axis":
            return x.scatter_add(dim_value, index, src)
        return x.scatter(dim_value, index, src, reduce="add")

    desc = f"{kind}({container} of {n} x{shape}, {dim_form}={dim_value})"
    return desc, program, operands


def _repeat_interleave(lib, x, y, dim, form):
    if form == "positional":
        return x.repeat_interleave(2, dim)
    if form == "dim":
        return lib.repeat_interleave(x, repeats=2, dim=dim)
    if form == "axis":
        return x.repeat_interleave(lib.tensor([1] * (x.shape[dim] if x.ndim else 1)), dim=dim)
    return x.repeat_interleave(3)


def _lerp(lib, x, y, dim, form):
    weight = {"positional": 0.25, "dim": y, "axis": lib.tensor(0.5, dtype=lib.float64)}
    w = weight.get(form, 1)
    return x.lerp(y, w) if form != "dim" else lib.lerp(x, end=y, weight=w)


def _addcmul(lib, x, y, dim, form):
    if form == "positional":
        return x.addcmul(y, y, value=0.5)
    if form == "dim":
        return lib.addcmul(x, y, x, value=2)
    if form == "axis":
        return lib.addcdiv(x, y, y.abs() + 1, value=-1)
    return x.addcdiv(tensor1=y, tensor2=x.abs() + 1)


def _max_pair(lib, x, y, dim, form):
    if form == "positional":
        return lib.max(x, y)
    if form == "dim":
        return lib.min(x, other=y)
    if form == "axis":
        return x.max(y)
    return lib.maximum(x, y), lib.minimum(y, x)


def _unfold(lib, x, y, dim, form):
    size = x.shape[dim] if -x.ndim <= dim < x.ndim else 1
    if form == "positional":
        return x.unfold(dim, 1, 1)
    if form == "dim":
        return x.unfold(dimension=dim, size=size, step=2)
    return x.unfold(dim, min(2, size), 1)


def _masked_select(lib, x, y, dim, form):
    mask = y > 0
    return x.masked_select(mask) if form != "dim" else lib.masked_select(x, mask=mask)


def _unique(lib, x, y, dim, form):
    # (a rounded copy outside the graph: retrograd's detach() keeps requires_grad, Burn's
    # contract in API.md, so a no_grad block makes the same tensor in both libraries)
    with lib.no_grad():
        r = lib.round(x)
    if form == "positional":
        return lib.unique(r, True, True)
    if form == "dim":
        return r.unique(sorted=True, return_counts=True)
    if form == "axis":
        return lib.unique(r, return_inverse=True, return_counts=True)
    return r.unique()


def _sort_fields(lib, x, y, dim, form):
    if form == "positional":
        out = lib.sort(x, dim, True)
    elif form == "dim":
        out = x.sort(dim=dim, descending=False)
    elif form == "axis":
        out = lib.max(x, dim=dim, keepdim=True)
    else:
        out = lib.topk(x, 1, dim=dim)
    values, indices = out
    return values, indices, out.values, out.indices


def _norm_forms(lib, x, y, dim, form):
    if form == "positional":
        return x.norm(2, dim)
    if form == "dim":
        return lib.norm(x, p=1, dim=dim, keepdim=True)
    if form == "axis":
        return lib.linalg.vector_norm(x, ord=3, dim=dim)
    return x.norm()


MORE = {
    "repeat_interleave": _repeat_interleave,
    "lerp": _lerp,
    "addcmul": _addcmul,
    "max_pair": _max_pair,
    "unfold": _unfold,
    "masked_select": _masked_select,
    "unique": _unique,
    "sort_fields": _sort_fields,
    "norm_forms": _norm_forms,
}


GENERATORS = {
    "reductions": reductions,
    "shapes": shapes,
    "binary": binary,
    "unary": unary,
    "functional": functional,
    "creation": creation,
    "attributes": attributes,
    "sequences": sequences,
}


# -- in-place methods and operators (on a clone of a leaf, gradients through the clone) ----------
def _inplace_program(kind, value, alpha, shape, mask_vals):
    def program(lib, x):
        y = x.clone()
        v = resolve(lib, value)
        nd = y.ndim
        if kind == "add_":
            out = y.add_(v) if alpha is OMIT else y.add_(v, alpha=alpha)
        elif kind == "sub_":
            out = y.sub_(v) if alpha is OMIT else y.sub_(v, alpha=alpha)
        elif kind in ("mul_", "div_", "pow_", "copy_", "fill_"):
            out = getattr(y, kind)(v)
        elif kind == "div_floor_":
            out = y.div_(v, rounding_mode="floor")
        elif kind == "clamp_":
            out = y.clamp_(min=-0.5) if alpha is OMIT else y.clamp_(-0.5, 0.5)
        elif kind == "zero_":
            out = y.zero_()
        elif kind == "masked_fill_":
            mask = lib.tensor(mask_vals)
            out = y.masked_fill_(mask, v if not isinstance(v, lib.Tensor) or v.ndim == 0 else 1.5)
        elif kind in ("sigmoid_", "tanh_", "abs_", "sqrt_", "exp_", "neg_", "relu_"):
            out = getattr(y.abs() if kind == "sqrt_" else y, kind)()
        elif kind == "iadd":
            y += v
            out = y
        elif kind == "imul":
            y *= v
            out = y
        elif kind == "isub":
            y -= v
            out = y
        elif kind == "itruediv":
            y /= v
            out = y
        elif kind == "index_add_":
            index = lib.tensor([0] * (shape[0] if nd else 1))
            source = x.detach().clone() * 2 if nd else x.reshape(1) * 2
            target = y if nd else y.reshape(1)
            if alpha is OMIT:
                out = target.index_add_(0, index, source)
            else:
                out = target.index_add_(0, index, source, alpha=alpha)
        elif kind == "scatter_":
            index = lib.zeros(shape if nd else (), dtype=lib.int64)
            out = y.scatter_(0 if nd else -1, index, 2.5)
        else:
            raise AssertionError(kind)
        return out, out is y, y, x

    return program


INPLACE = [
    "add_",
    "sub_",
    "mul_",
    "div_",
    "pow_",
    "copy_",
    "fill_",
    "div_floor_",
    "clamp_",
    "zero_",
    "masked_fill_",
    "sigmoid_",
    "tanh_",
    "abs_",
    "sqrt_",
    "exp_",
    "neg_",
    "relu_",
    "iadd",
    "imul",
    "isub",
    "itruediv",
    "index_add_",
    "scatter_",
]


def inplace(rng):
    kind = str(rng.choice(INPLACE))
    shape = _shape(rng, 0, 2)
    value = _other(rng, shape)
    if kind in ("iadd", "isub", "imul", "itruediv") and isinstance(value, NP):
        value = _scalar(rng)  # (a NumPy array beside an operator: left out, as in ``binary``)
    if kind == "fill_" and rng.random() < 0.7:
        value = _scalar(rng)
    alpha = _maybe(rng, [2, 0.5, -1][int(rng.integers(3))], 0.3)
    mask_vals = rng.random(size=shape) < 0.5
    program = _inplace_program(kind, value, alpha, shape, mask_vals)
    desc = (
        f"y = x.clone(); y.{kind}({value!r}, alpha={alpha if alpha is not OMIT else '-'}) x{shape}"
    )
    return desc, program, [(_values(rng, shape), "float64", True)]


GENERATORS["inplace"] = inplace
