"""Generators of round 33 of the differential fuzzer against PyTorch (``tests/test_fuzz33.py``):
values and gradients of the primitive tensor ops at special points.

A draw is ``(description, program, operands, order, signs)``: ``program(lib, *tensors)`` runs
on ``torch`` and on ``retrograd`` alike, ``operands`` are ``(array, dtype, requires_grad)``.
Both libraries must agree on raising or not, and on every output's dtype, shape and values:
the same NaNs, the same infinities (with their signs), and, where ``signs`` says so, the same
sign of every zero. The first derivatives (of a weighted sum of the outputs, taken without
``create_graph``, as torch's cheaper first-order forms run) are compared always; with
``order == 2`` the derivatives of a weighted sum of those first derivatives too (taken with
``create_graph=True``, the first ones compared again there).

Inputs come from special points: 0.0, -0.0, +-1, +-inf, NaN, domain edges (log(0), sqrt(0),
acos(+-1), atanh(+-1), pow(0, 0), pow(0, negative), pow(negative, non-integer)), ties between
operands, subnormals and huge values, in float32 and float64. Families:

- ``unary``: every differentiable elementwise op of the ``rg`` namespace and the Tensor methods
  (exp .. atanh, sigmoid, erf, erfinv, lgamma, digamma, polygamma, ``special.*``,
  ``logit(eps=)``, ``nan_to_num``, ``sinc``, the Bessel functions ``i0``/``i1``/``i0e``/``i1e``,
  ``pow`` with scalar exponents and scalar bases, ``clamp`` with scalar bounds, ...);
- ``binary``: the two-operand ones with broadcasting (``pow``, ``atan2``, ``hypot``, ``fmod``,
  ``remainder``, ``copysign``, ``maximum``/``minimum``/``fmax``/``fmin``, ``xlogy``, ``clamp``
  with tensor bounds, ``where``, ``lerp``, ``addcmul``/``addcdiv``, ``logaddexp``, ...);
- ``reduction``: max/min/amax/amin with ties, norms of zero vectors for p in {0, 1, 2, inf,
  -inf, 0.5, 3}, prod with one and two zeros, std/var with a correction and one element,
  logsumexp with infinite entries, cumprod with zeros, cummax/cummin ties, (nan)median ties,
  dist;
- ``second_order``: second derivatives of the smooth ops, at points where they are smooth
  (tiny and huge values included).

Left out, as torch defines no one answer or as torch's own artifacts (see the CHANGELOG):

- the sign of a zero chosen among tied ``0.0`` and ``-0.0`` (``maximum``/``minimum``/``clamp``
  with tensor bounds, ``lerp`` at weight 1, the selections of reductions): torch's vectorized
  loop returns the second operand, its scalar loop the first, by the element's position;
- second derivatives at the points where an op is not smooth (a zero base of ``pow``, the
  edges of ``logit``'s domain, the kinks of ``abs``/``clamp``/norms at zero, infinities): torch
  differentiates its first-derivative formula there, whose masked ``0 * inf`` terms are NaN;
- NaN through the activations whose backward kernel's scalar and vectorized loops disagree
  (``hardtanh``: the incoming gradient or 0, by the tensor's size);
- ``cumprod`` and the p-norms through an infinity or NaN next to a zero (round 21's note);
- ``addcdiv``'s gradient in ``tensor2`` where ``tensor2 * tensor2`` under- or overflows
  (torch's ``-g v t1 / (t2 t2)``, retrograd's ``-(g v t1 / t2) / t2``): ``tensor2`` is
  drawn untracked;
- the mean of ``std_mean``/``var_mean`` over infinities (torch's Welford update makes NaN
  where ``mean`` is the infinity);
- gradients of ``bessel_j0``/``bessel_j1``/``spherical_bessel_j0`` (torch has none: an
  extension of retrograd's);
- ``mvlgamma`` below its domain (torch 2.13 no longer checks it; retrograd refuses, as its
  tests require).
"""

from __future__ import annotations

import math

import numpy as np

import retrograd as rg

INF, NAN = math.inf, math.nan


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _torch():
    import torch

    return torch


# -- running and comparing ---------------------------------------------------------------------
def _to_numpy(x) -> tuple[np.ndarray, str]:
    torch = _torch()
    if isinstance(x, torch.Tensor) and x._is_zerotensor():  # (torch's symbolic zero gradient)
        x = torch.zeros(x.shape, dtype=x.dtype)
    if isinstance(x, torch.Tensor | rg.Tensor):
        return x.detach().numpy(), str(x.dtype).replace("torch.", "")
    return np.asarray(x), type(x).__name__


def _flatten(out) -> list:
    if isinstance(out, tuple | list):
        return [item for o in out for item in _flatten(o)]
    return [out]


def _weights(lib, rng, like):
    return lib.tensor(rng.uniform(0.5, 1.5, tuple(like.shape)), dtype=like.dtype)


def run(lib, program, operands, create_graph: bool):
    """The outputs, first derivatives and (with ``create_graph``) second derivatives of
    ``program`` on ``lib``, as NumPy, or the error it raised."""
    try:
        tensors = []
        for array, dtype, grad in operands:
            t = lib.tensor(array, dtype=getattr(lib, dtype))
            tensors.append(t.requires_grad_(True) if grad else t)
        items = _flatten(program(lib, *tensors))
        leaves = [t for t, (_, _, grad) in zip(tensors, operands) if grad]
        result = {"out": [_to_numpy(o) for o in items]}
        rng = np.random.default_rng(7)
        tracked = [o for o in items if isinstance(o, lib.Tensor) and o.requires_grad]
        if not leaves or not tracked:
            return result, None
        loss = sum((o * _weights(lib, rng, o)).sum() for o in tracked)
        grads = lib.autograd.grad(loss, leaves, allow_unused=True, create_graph=create_graph)
        grads = [lib.zeros_like(lf) if g is None else g for g, lf in zip(grads, leaves)]
        result["grad"] = [_to_numpy(g) for g in grads]
        second = [g for g in grads if create_graph and g.requires_grad]
        if second:
            penalty = sum((g * _weights(lib, rng, g)).sum() for g in second)
            hessian = lib.autograd.grad(penalty, leaves, allow_unused=True)
            hessian = [lib.zeros_like(lf) if h is None else h for h, lf in zip(hessian, leaves)]
            result["grad2"] = [_to_numpy(h) for h in hessian]
        return result, None
    except Exception as e:  # either library's refusal is a result here
        return None, e


_TOLERANCE = {"float32": 2e-5, "float64": 1e-9}


def _close(got, want, what: str, signs: bool, loose: bool) -> None:
    (g, gdt), (w, wdt) = got, want
    if gdt != wdt:
        raise Mismatch(f"{what}: dtype {gdt} != torch's {wdt}")
    if g.shape != w.shape:
        raise Mismatch(f"{what}: shape {g.shape} != torch's {w.shape}")
    if w.dtype.kind != "f":
        if not np.array_equal(g, w):
            raise Mismatch(f"{what}: values\n{g}\n!= torch's\n{w}")
        return
    bad = np.isnan(g) != np.isnan(w)
    both = ~np.isnan(g) & ~np.isnan(w)
    infinite = both & (np.isinf(g) | np.isinf(w))
    bad |= infinite & (g != w)
    finite = both & ~infinite
    tol = _TOLERANCE.get(wdt, 1e-3) * (50 if loose else 1)
    with np.errstate(over="ignore", invalid="ignore"):
        bad |= finite & ~(np.abs(g - w) <= tol * (1 + np.abs(w)))
    if signs:
        bad |= both & (w == 0) & (g == 0) & (np.signbit(g) != np.signbit(w))
    if bad.any():
        where = np.argwhere(bad)[:4].tolist()
        raise Mismatch(f"{what}: at {where} retrograd's {g[bad][:4]} != torch's {w[bad][:4]}")


def compare(want, want_error, got, error, label: str, signs: bool) -> str:
    if want_error is not None:
        if error is None:
            raise Mismatch(f"{label}torch raises {want_error!r}; retrograd returns")
        if not isinstance(error, rg.RetrogradError):
            raise Mismatch(f"{label}bare error {type(error).__name__}: {error}")
        return "raise"
    if error is not None:
        raise Mismatch(f"{label}retrograd raises {type(error).__name__}: {error}") from error
    for key in ("out", "grad", "grad2"):
        w, g = want.get(key), got.get(key)
        if w is None or g is None:
            if any(np.any(a) for a, _ in (w or g or [])):
                raise Mismatch(
                    f"{label}{key}: torch has {w is not None}, retrograd {g is not None}"
                )
            continue
        if len(g) != len(w):
            raise Mismatch(f"{label}{key}: {len(g)} items != torch's {len(w)}")
        for k, (gi, wi) in enumerate(zip(g, w)):
            # (second derivatives of float32 formulas differ by the order of their roundings)
            _close(gi, wi, f"{label}{key} {k}", signs and key == "out", key == "grad2")
    return "ok"


def check(draw) -> str:
    """One draw against torch: first derivatives as a first-order backward takes them, then,
    for ``order == 2``, all again under ``create_graph=True`` with the second ones."""
    _, program, operands, order, signs = draw
    torch = _torch()
    outcome = compare(
        *run(torch, program, operands, False), *run(rg, program, operands, False), "", signs
    )
    if order == 2 and outcome == "ok":
        outcome = compare(
            *run(torch, program, operands, True),
            *run(rg, program, operands, True),
            "create_graph: ",
            signs,
        )
    return outcome


# -- the special points ------------------------------------------------------------------------
_COMMON = [0.0, -0.0, 1.0, -1.0, INF, -INF, NAN, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 1.5, -2.5]
_EDGES = [0.1, -0.1, 1e-6, 0.999, -0.999, 20.0, -20.0, 100.0, -100.0, 1e4]
_EXTREMES = {
    "float32": [1e-40, -1e-40, 1e-30, 3e38, -3e38],
    "float64": [5e-324, -5e-324, 1e-310, 1e-200, 1e308, -1e308],
}
#: smooth points of the second-order draws: finite, off every op's kinks and poles
_SMOOTH = [0.25, -0.25, 0.5, -0.75, 0.9, 1.5, -1.5, 2.5, 3.0, -3.5, 7.0, 1e-3, -1e-3, 30.0]


def _special_points(rng, dtype: str, shape: tuple[int, ...], exclude=()) -> np.ndarray:
    pool = [p for p in _COMMON + _EDGES + _EXTREMES[dtype] if not _excluded(p, exclude)]
    n = int(np.prod(shape)) if shape else 1
    return np.array([pool[i] for i in rng.integers(len(pool), size=n)]).reshape(shape)


def _excluded(p: float, exclude) -> bool:
    for rule in exclude:
        if rule == "nan" and math.isnan(p):
            return True
        if rule == "inf" and math.isinf(p):
            return True
        if rule == "huge" and abs(p) > 1e30:
            return True
        if rule == "tiny" and p != 0 and abs(p) < 1e-20:
            return True
        if rule == "-0" and p == 0 and math.copysign(1.0, p) < 0:
            return True
    return False


def _smooth_points(rng, shape, low=-INF, high=INF) -> np.ndarray:
    pool = [p for p in _SMOOTH if low < p < high]
    n = int(np.prod(shape)) if shape else 1
    return np.array([pool[i] for i in rng.integers(len(pool), size=n)]).reshape(shape)


def _shape(rng) -> tuple[int, ...]:
    return ((), (5,), (2, 3), (7,), (3, 1, 2))[int(rng.integers(5))]


def _dtype(rng) -> str:
    return "float64" if rng.random() < 0.6 else "float32"


# -- unary ---------------------------------------------------------------------------------------
def _call(name: str):
    space, _, function = name.rpartition(".")
    return lambda lib, x: getattr(getattr(lib, space) if space else lib, function)(x)


def _method(name: str, *args, **kwargs):
    return lambda lib, x: getattr(x, name)(*args, **kwargs)


#: name: (program, what its draws leave out, the open interval of its smooth points or None
#: for no second-order draws)
UNARY: dict = {}
for _name in [
    "exp",
    "log",
    "log1p",
    "expm1",
    "sqrt",
    "rsqrt",
    "abs",
    "sign",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "sigmoid",
    "erf",
    "erfc",
    "erfinv",
    "lgamma",
    "digamma",
    "reciprocal",
    "frac",
    "trunc",
    "round",
    "floor",
    "ceil",
    "neg",
    "square",
    "exp2",
    "log2",
    "log10",
    "sgn",
    "deg2rad",
    "rad2deg",
    "i0",
    "nan_to_num",
    "sinc",
    "logit",
    "relu",
    "special.expit",
    "special.erfcx",
    "special.ndtr",
    "special.log_ndtr",
    "special.ndtri",
    "special.i0e",
    "special.i1",
    "special.i1e",
    "special.entr",
    "special.gammaln",
    "special.psi",
    "special.sinc",
    "special.exp2",
    "special.expm1",
    "special.log1p",
    "special.logit",
    "special.erfinv",
]:
    UNARY[_name] = (_call(_name), (), (-INF, INF))
# the smooth interiors of the ops with a restricted domain (second-order draws)
for _name, _interval in {
    "log": (0, INF),
    "log2": (0, INF),
    "log10": (0, INF),
    "log1p": (-1, INF),
    "special.log1p": (-1, INF),
    "sqrt": (0, INF),
    "rsqrt": (0, INF),
    "asin": (-1, 1),
    "acos": (-1, 1),
    "atanh": (-1, 1),
    "acosh": (1, INF),
    "erfinv": (-1, 1),
    "special.erfinv": (-1, 1),
    "special.ndtri": (0, 1),
    "logit": (0, 1),
    "special.logit": (0, 1),
    "special.entr": (0, INF),
    "lgamma": (0, INF),
    "special.gammaln": (0, INF),
    "digamma": (0, INF),
    "special.psi": (0, INF),
    "reciprocal": (0, INF),
    "tan": (-1, 1),
    # (torch differentiates its formula: NaN at 0 itself, 0 / 0)
    "sinc": (0.1, INF),
    "special.sinc": (0.1, INF),
    # (their slopes i1(x) / x lose their digits near 0 in float32, differently in each)
    "special.i1": (0.1, INF),
    "special.i1e": (0.1, INF),
    "i0": (0.1, INF),
    "special.i0e": (0.1, INF),
}.items():
    UNARY[_name] = (UNARY[_name][0], (), _interval)
# kinks and steps: first derivatives only
for _name in [
    "abs",
    "sign",
    "frac",
    "trunc",
    "round",
    "floor",
    "ceil",
    "sgn",
    "nan_to_num",
    "relu",
]:
    UNARY[_name] = (UNARY[_name][0], (), None)
UNARY["relu"] = (UNARY["relu"][0], ("nan",), None)
# (torch's float32 logit backward is +inf at -0.0 and, with eps, NaN at NaN in its vectorized
# loop, -inf and 0 in its scalar one)
for _name in ("logit", "special.logit"):
    UNARY[_name] = (UNARY[_name][0], ("nan", "-0"), UNARY[_name][2])
UNARY.update(
    {
        "logit(eps=1e-6)": (lambda lib, x: lib.logit(x, eps=1e-6), ("nan", "-0"), None),
        "logit(eps=0)": (lambda lib, x: lib.logit(x, eps=0.0), ("nan", "-0"), None),
        "special.logit(eps=0.25)": (
            lambda lib, x: lib.special.logit(x, eps=0.25),
            ("nan", "-0"),
            None,
        ),
        "nan_to_num(1.5, 2, -3)": (
            lambda lib, x: lib.nan_to_num(x, nan=1.5, posinf=2.0, neginf=-3.0),
            (),
            None,
        ),
        "polygamma(1)": (lambda lib, x: lib.polygamma(1, x), (), (0, INF)),
        "polygamma(2)": (lambda lib, x: lib.polygamma(2, x), (), (0, INF)),
        "round(decimals=2)": (_method("round", decimals=2), (), None),
        "clamp(-1, 1)": (lambda lib, x: lib.clamp(x, -1.0, 1.0), (), None),
        "clamp(min=0.5)": (lambda lib, x: lib.clamp(x, min=0.5), (), None),
        "clamp(max=-0.5)": (lambda lib, x: lib.clamp(x, max=-0.5), (), None),
        "clamp(min=nan)": (lambda lib, x: lib.clamp(x, min=NAN), (), None),
        "clamp(1, -1)": (lambda lib, x: lib.clamp(x, 1.0, -1.0), (), None),
        "clip(-0.0, 0.0)": (lambda lib, x: lib.clip(x, -0.0, 0.0), (), None),
        "xlogy(x, x)": (lambda lib, x: lib.xlogy(x, x), (), (0, INF)),
        "xlogy(x, 2)": (lambda lib, x: lib.xlogy(x, 2.0), (), (-INF, INF)),
        "xlogy(x, 0)": (lambda lib, x: lib.xlogy(x, 0.0), (), None),
        "xlogy(0, x)": (lambda lib, x: lib.xlogy(0.0, x), (), None),
        "special.xlog1py(x, x)": (lambda lib, x: lib.special.xlog1py(x, x), (), (0, INF)),
        "maximum(x, x)": (lambda lib, x: lib.maximum(x, x), (), None),
        "minimum(x, x)": (lambda lib, x: lib.minimum(x, x), (), None),
        "fmax(x, x)": (lambda lib, x: lib.fmax(x, x), (), None),
        "logaddexp(x, x)": (lambda lib, x: lib.logaddexp(x, x), (), (-INF, INF)),
        "logaddexp2(x, x)": (lambda lib, x: lib.logaddexp2(x, x), (), (-INF, INF)),
        "copysign(x, -0.0)": (lambda lib, x: lib.copysign(x, -0.0), (), None),
        "copysign(x, x)": (lambda lib, x: lib.copysign(x, x), (), None),
        "fmod(x, 2)": (lambda lib, x: lib.fmod(x, 2.0), (), None),
        "remainder(x, -2)": (lambda lib, x: lib.remainder(x, -2.0), (), None),
        "fmod(x, 0)": (lambda lib, x: lib.fmod(x, 0.0), (), None),
        "remainder(x, 0)": (lambda lib, x: lib.remainder(x, 0.0), (), None),
        "lerp(x, x, 0.5)": (lambda lib, x: lib.lerp(x, x, 0.5), (), None),
        "where(x > 0, log(x), x)": (lambda lib, x: lib.where(x > 0, lib.log(x), x), (), None),
    }
)
for _p in (0.0, -0.0, 0.5, -0.5, 1.0, 2.0, 3.0, -1.0, -2.0, 1.5, -1.5, 0.3, 2.5, INF, -INF, NAN):
    _smooth = (0, INF) if _p == _p and _p not in (0.0, INF, -INF) else None
    UNARY[f"pow(x, {_p})"] = ((lambda p: lambda lib, x: lib.pow(x, p))(_p), (), _smooth)
    UNARY[f"x ** {_p}"] = ((lambda p: lambda lib, x: x**p)(_p), (), _smooth)
    UNARY[f"float_power(x, {_p})"] = (
        (lambda p: lambda lib, x: lib.float_power(x, p))(_p),
        (),
        _smooth,
    )
    # (a zero base: torch's second derivative is NaN through its masked log(0) term)
    _smooth_base = (-INF, INF) if _p == _p and _p > 0 and _p != INF else None
    UNARY[f"{_p} ** x"] = ((lambda p: lambda lib, x: p**x)(_p), (), _smooth_base)


def unary(rng):
    name = sorted(UNARY)[int(rng.integers(len(UNARY)))]
    program, exclude, interval = UNARY[name]
    dtype = _dtype(rng)
    if interval is not None and rng.random() < 0.3:
        low, high = interval
        operand = _smooth_points(rng, _shape(rng), low, high)
        return (f"{name} at smooth points", program, [(operand, dtype, True)], 2, True)
    operand = _special_points(rng, dtype, _shape(rng), exclude)
    return (name, program, [(operand, dtype, True)], 1, True)


# -- binary ------------------------------------------------------------------------------------
def _binary_call(name):
    space, _, function = name.rpartition(".")
    return lambda lib, x, y: getattr(getattr(lib, space) if space else lib, function)(x, y)


#: name: (program, compares the signs of zeros, the smooth interval of both operands or None)
BINARY: dict = {
    name: (_binary_call(name), True, None)
    for name in [
        "add",
        "sub",
        "mul",
        "div",
        "pow",
        "atan2",
        "hypot",
        "fmod",
        "remainder",
        "copysign",
        "fmax",
        "fmin",
        "xlogy",
        "float_power",
        "logaddexp",
        "logaddexp2",
        "special.xlog1py",
        "special.xlogy",
        "true_divide",
    ]
}
BINARY.update(
    {
        "maximum": (_binary_call("maximum"), False, None),
        "minimum": (_binary_call("minimum"), False, None),
        "clamp(x, y, y + 1)": (lambda lib, x, y: lib.clamp(x, y, y + 1), False, None),
        "clamp(x, min=y)": (lambda lib, x, y: lib.clamp(x, min=y), False, None),
        "clamp(x, max=y)": (lambda lib, x, y: lib.clamp(x, max=y), False, None),
        "clip(x, y, y - 1)": (lambda lib, x, y: lib.clip(x, y, y - 1), False, None),
        "where(x > y, x, y)": (lambda lib, x, y: lib.where(x > y, x, y), True, None),
        "lerp(x, y, x)": (lambda lib, x, y: lib.lerp(x, y, x), False, None),
        "lerp(x, x + 1, y)": (lambda lib, x, y: lib.lerp(x, x + 1, y), False, None),
        "lerp(x, y, 0.75)": (lambda lib, x, y: lib.lerp(x, y, 0.75), False, None),
        "lerp(x, y, 0.25)": (lambda lib, x, y: lib.lerp(x, y, 0.25), True, None),
        "addcmul(x, y, x, value=0.5)": (
            lambda lib, x, y: lib.addcmul(x, y, x, value=0.5),
            True,
            (-INF, INF),
        ),
        # (tensor2 untracked: see the module's note)
        "addcdiv(x, y, |y| + 1, value=-2)": (
            lambda lib, x, y: lib.addcdiv(x, y, y.detach().abs() + 1, value=-2.0),
            True,
            (-INF, INF),
        ),
        "addcdiv(x, y, x.detach())": (
            lambda lib, x, y: lib.addcdiv(x, y, x.detach()),
            True,
            None,
        ),
        "y - x": (lambda lib, x, y: y - x, True, (-INF, INF)),
        "x * y * x": (lambda lib, x, y: x * y * x, True, (-INF, INF)),
    }
)
for _name, _interval in {
    "add": (-INF, INF),
    "sub": (-INF, INF),
    "mul": (-INF, INF),
    "div": (0, INF),
    "pow": (0, INF),
    "float_power": (0, INF),
    "atan2": (0, INF),
    "hypot": (0, INF),
    "xlogy": (0, INF),
    "logaddexp": (-INF, INF),
    "logaddexp2": (-INF, INF),
}.items():
    BINARY[_name] = (BINARY[_name][0], BINARY[_name][1], _interval)
#: the operand shapes: equal, broadcast both ways, a 0-d one
_BINARY_SHAPES = [((4,), (4,)), ((3, 1), (4,)), ((2,), (3, 2)), ((), (5,)), ((2, 3), ())]
#: the pairs of special points the draws favour (ties, a zero base, ...)
_PAIRS = [(0.0, 0.0), (0.0, -0.0), (-0.0, 0.0), (0.0, -1.0), (-2.0, 0.5), (INF, INF), (1.0, NAN)]


def binary(rng):
    name = sorted(BINARY)[int(rng.integers(len(BINARY)))]
    program, signs, interval = BINARY[name]
    dtype = _dtype(rng)
    shape_x, shape_y = _BINARY_SHAPES[int(rng.integers(len(_BINARY_SHAPES)))]
    if interval is not None and rng.random() < 0.3:
        low, high = interval
        x = _smooth_points(rng, shape_x, low, high)
        y = _smooth_points(rng, shape_y, low, high)
        return (f"{name} at smooth points", program, [(x, dtype, True), (y, dtype, True)], 2, True)
    x = _special_points(rng, dtype, shape_x)
    y = _special_points(rng, dtype, shape_y)
    if shape_x == shape_y and rng.random() < 0.5:  # ties and the favoured pairs
        for i in range(x.size):
            if rng.random() < 0.5:
                x.flat[i], y.flat[i] = _PAIRS[int(rng.integers(len(_PAIRS)))]
            elif rng.random() < 0.3:
                y.flat[i] = x.flat[i]
    grads = (bool(rng.random() < 0.85), bool(rng.random() < 0.85))
    operands = [(x, dtype, grads[0]), (y, dtype, grads[1])]
    return (name, program, operands, 1, signs)


# -- reductions ----------------------------------------------------------------------------------
_ROWS = [
    [0.0, 0.0, 0.0, 0.0],
    [0.0, -0.0, 0.0, -0.0],
    [1.0, 2.0, 2.0, -1.0],
    [3.0, 0.0, 2.0, 1.0],
    [0.0, 2.0, 0.0, 5.0],
    [INF, 1.0, INF, -INF],
    [-INF, -INF, -INF, -INF],
    [NAN, 1.0, 2.0, NAN],
    [1.0, 1.0, 1.0, 1.0],
    [-2.0, 0.5, -2.0, 0.5],
    [1e-300, -1e-300, 0.0, 1e-310],
    [1e300, 1e300, -1e300, 1.0],
    [-1.0, -0.0, 0.0, 4.0],
    [2.0, 3.0, 0.5, -1.5],
]
#: the rows the draws of each reduction leave out (see the module's note), by index
_NO_INFINITE = (5, 6, 7, 11)


def _norm(p):
    return lambda lib, x, d: lib.linalg.vector_norm(x, ord=p, dim=d)


#: name: (program(lib, x, dim), the row indices left out)
REDUCTIONS: dict = {}
for _p in (0, 1, 2, INF, -INF, 0.5, 3, -1):
    REDUCTIONS[f"vector_norm(ord={_p})"] = (_norm(_p), _NO_INFINITE if _p not in (1, 2) else ())
    REDUCTIONS[f"norm(p={_p})"] = (
        (lambda p: lambda lib, x, d: x.norm(p=p, dim=d))(_p),
        _NO_INFINITE if _p not in (1, 2) else (),
    )
    if _p != 0:  # (torch's dist backward fails at p = 0: "Expected a proper Tensor")
        REDUCTIONS[f"dist(p={_p})"] = (
            (lambda p: lambda lib, x, d: lib.dist(x, x.flip(0) * 0.5, p))(_p),
            _NO_INFINITE,
        )
REDUCTIONS.update(
    {
        "max(dim)": (lambda lib, x, d: lib.max(x, dim=d), ()),
        "min(dim, keepdim)": (lambda lib, x, d: lib.min(x, dim=d, keepdim=True), ()),
        "max()": (lambda lib, x, d: lib.max(x), ()),
        "min()": (lambda lib, x, d: x.min(), ()),
        "amax": (lambda lib, x, d: lib.amax(x, dim=d), ()),
        "amin": (lambda lib, x, d: lib.amin(x, dim=d), ()),
        "amax(all)": (lambda lib, x, d: lib.amax(x, dim=(0, 1)), ()),
        "aminmax": (lambda lib, x, d: lib.aminmax(x, dim=d), ()),
        "prod(dim)": (lambda lib, x, d: lib.prod(x, dim=d), _NO_INFINITE),
        "prod()": (lambda lib, x, d: lib.prod(x), _NO_INFINITE),
        "std(dim)": (lambda lib, x, d: lib.std(x, dim=d), _NO_INFINITE),
        "var(dim, correction=0)": (lambda lib, x, d: lib.var(x, dim=d, correction=0), _NO_INFINITE),
        "std(one element)": (lambda lib, x, d: lib.std(x[:1], dim=0), _NO_INFINITE),
        "var(one element, correction=0)": (
            lambda lib, x, d: lib.var(x[:, :1], dim=1, correction=0),
            _NO_INFINITE,
        ),
        "var(correction=2)": (lambda lib, x, d: lib.var(x, dim=d, correction=2), _NO_INFINITE),
        "std_mean(dim)": (lambda lib, x, d: lib.std_mean(x, dim=d)[0], _NO_INFINITE),
        "var_mean(correction=0)": (
            lambda lib, x, d: lib.var_mean(x, dim=d, correction=0),
            _NO_INFINITE,
        ),
        "logsumexp": (lambda lib, x, d: lib.logsumexp(x, dim=d), ()),
        "logsumexp(all)": (lambda lib, x, d: lib.logsumexp(x, dim=(0, 1)), ()),
        "cumprod": (lambda lib, x, d: lib.cumprod(x, dim=d), _NO_INFINITE),
        "cummax": (lambda lib, x, d: lib.cummax(x, dim=d), ()),
        "cummin": (lambda lib, x, d: lib.cummin(x, dim=d), ()),
        "median(dim)": (lambda lib, x, d: lib.median(x, dim=d), ()),
        "median()": (lambda lib, x, d: lib.median(x), ()),
        "nanmedian(dim)": (lambda lib, x, d: lib.nanmedian(x, dim=d), ()),
        "nanmedian()": (lambda lib, x, d: lib.nanmedian(x), ()),
        "sum": (lambda lib, x, d: lib.sum(x, dim=d), ()),
        "mean": (lambda lib, x, d: lib.mean(x, dim=d), ()),
        "nansum": (lambda lib, x, d: lib.nansum(x, dim=d), ()),
        "nanmean": (lambda lib, x, d: lib.nanmean(x, dim=d), ()),
        "softmax": (lambda lib, x, d: lib.softmax(x, dim=d), ()),
        "log_softmax": (lambda lib, x, d: lib.log_softmax(x, dim=d), ()),
    }
)


def reduction(rng):
    name = sorted(REDUCTIONS)[int(rng.integers(len(REDUCTIONS)))]
    program, left_out = REDUCTIONS[name]
    rows = [i for i in range(len(_ROWS)) if i not in left_out]
    picked = [rows[int(i)] for i in rng.integers(len(rows), size=int(rng.integers(1, 4)))]
    dtype = _dtype(rng)
    x = np.array([_ROWS[i] for i in picked])
    if rng.random() < 0.5:  # the rows' columns shuffled (ties elsewhere)
        x = x[:, rng.permutation(4)]
    d = int(rng.integers(-2, 2))
    description = f"{name} over rows {picked}, dim {d}"
    # (which of tied 0.0 and -0.0 a selection returns: see the module's note)
    return (description, lambda lib, t: program(lib, t, d), [(x, dtype, True)], 1, False)


# -- second derivatives --------------------------------------------------------------------------
def second_order(rng):
    """A smooth unary or binary op at its smooth points, second derivatives included."""
    if rng.random() < 0.6:
        smooth = sorted(name for name, entry in UNARY.items() if entry[2] is not None)
        name = smooth[int(rng.integers(len(smooth)))]
        program, _, (low, high) = UNARY[name]
        x = _smooth_points(rng, _shape(rng), low, high)
        return (name, program, [(x, _dtype(rng), True)], 2, True)
    smooth = sorted(name for name, entry in BINARY.items() if entry[2] is not None)
    name = smooth[int(rng.integers(len(smooth)))]
    program, _, (low, high) = BINARY[name]
    shape_x, shape_y = _BINARY_SHAPES[int(rng.integers(len(_BINARY_SHAPES)))]
    x, y = _smooth_points(rng, shape_x, low, high), _smooth_points(rng, shape_y, low, high)
    dtype = _dtype(rng)
    return (name, program, [(x, dtype, True), (y, dtype, True)], 2, True)


GENERATORS = {
    "unary": unary,
    "binary": binary,
    "reduction": reduction,
    "second_order": second_order,
}
