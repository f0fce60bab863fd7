"""Generators of round 28 of the differential fuzzer against PyTorch (``tests/test_fuzz28.py``).

Each generator draws ``(description, program, operands, order)``: ``program(lib, *tensors)``
runs on ``torch`` and on ``retrograd`` alike, ``operands`` are ``(array, dtype, requires_grad)``
and ``order`` says how far to differentiate (0: values only, 1: the gradient of a weighted sum
of the float outputs, 2: also the gradient of a penalty on that gradient, taken with
``create_graph=True``). Both libraries must agree on raising or not, and on every output's
dtype, shape and values (NaNs in the same places), the operands after the program, and the
derivatives.

Angles: ordering and selection ops over ties, NaN, infinities and empty dims (sort, topk,
unique and unique_consecutive with every flag, kthvalue, (nan)median, quantiles with every
interpolation, cumulative extrema, searchsorted); integer and boundary values through
division, remainders, powers, shifts and bitwise ops, in place too; second derivatives of
random smooth chains under every checkpointing strategy (bit-identical to NoCheckpointing's);
chains of views written in place through views and bases; gradient penalties (the gradient
of a penalty on ``autograd.grad(..., create_graph=True)``) through random stacks of
``nn.functional`` layers with parameters, under every strategy.

Left out, as differences torch does not define: the order of ties in torch's unstable
sort of more than 16 values (libstdc++'s introsort), ``mode`` over NaN (its sort's comparator is
no ordering there), gradients of ``unique`` (torch has none), torch's
version-counter errors (API.md section 10: retrograd never keeps a stale saved value).
"""

from __future__ import annotations

import math

import numpy as np

import retrograd as rg


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _torch():
    import torch

    return torch


def _to_numpy(x) -> tuple[np.ndarray, str]:
    torch = _torch()
    if isinstance(x, torch.Tensor | rg.Tensor):
        dtype = str(x.dtype).replace("torch.", "")
        x = x.detach()
        # (NumPy has no bfloat16: half precision compared in float64, which holds it exactly)
        return (x.double() if dtype in ("float16", "bfloat16") else x).numpy(), dtype
    return np.asarray(x), type(x).__name__


def _flatten(out) -> list:
    if isinstance(out, tuple | list):
        return [item for o in out for item in _flatten(o)]
    return [out]


# (torch refuses these, as version-counter and multiple-view errors; retrograd keeps every
# saved value and lets such views be written, API.md section 10)
_TORCH_ONLY_REFUSALS = (
    "modified by an inplace operation",
    "returns multiple views",
    "its base or another view",
)


def run(lib, program, operands, order: int):
    """``program``'s outputs, operands afterwards and derivatives on ``lib`` (as NumPy), or
    the error it raised."""
    try:
        tensors = []
        for array, dtype, grad in operands:
            t = lib.tensor(array, dtype=getattr(lib, dtype))
            tensors.append(t.requires_grad_(True) if grad else t)
        items = _flatten(program(lib, *tensors))
        leaves = [t for t, (_, _, grad) in zip(tensors, operands) if grad]
        result = {"out": [_to_numpy(o) for o in items], "after": [_to_numpy(t) for t in tensors]}
        if order == 0 or not leaves:
            return result, None
        rng = np.random.default_rng(7)
        loss = None
        for o in items:
            if isinstance(o, lib.Tensor) and o.requires_grad and o.dtype == lib.float64:
                term = (o * lib.tensor(rng.standard_normal(tuple(o.shape)))).sum()
                loss = term if loss is None else loss + term
        if loss is None:
            return result, None
        grads = lib.autograd.grad(loss, leaves, allow_unused=True, create_graph=order > 1)
        grads = [lib.zeros_like(lf) if g is None else g for g, lf in zip(grads, leaves)]
        result["grad"] = [_to_numpy(g) for g in grads]
        penalty = None
        for g in grads if order > 1 else ():
            if g.requires_grad:
                term = (g * lib.tensor(rng.standard_normal(tuple(g.shape)))).sum() + (g * g).sum()
                penalty = term if penalty is None else penalty + term
        if penalty is not None:
            second = lib.autograd.grad(penalty, leaves, allow_unused=True)
            second = [lib.zeros_like(lf) if h is None else h for h, lf in zip(second, leaves)]
            result["grad2"] = [_to_numpy(h) for h in second]
        return result, None
    except Exception as e:  # either library's refusal is a result here
        return None, e


def _close(got, want, what: str) -> None:
    (g, gdt), (w, wdt) = got, want
    if gdt != wdt:
        raise Mismatch(f"{what}: dtype {gdt} != torch's {wdt}")
    if g.shape != w.shape:
        raise Mismatch(f"{what}: shape {g.shape} != torch's {w.shape}")
    if w.dtype.kind != "f":
        if not np.array_equal(g, w):
            raise Mismatch(f"{what}: values\n{g}\n!= torch's\n{w}")
        return
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        raise Mismatch(f"{what}: NaN positions differ\n{g}\n!= torch's\n{w}")
    rtol = {"float32": 2e-5, "float16": 1e-3, "bfloat16": 8e-3}.get(wdt, 1e-7)
    try:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True)
    except AssertionError as e:
        raise Mismatch(f"{what}: {e}") from None


def _all_zero(items) -> bool:
    return all(not np.any(a) for a, _ in items)


def compare(torch_result, torch_error, result, error, label: str = "") -> str:
    if torch_error is not None:
        if any(text in str(torch_error) for text in _TORCH_ONLY_REFUSALS):
            return "skip"
        if error is None:
            raise Mismatch(f"{label}torch raises {torch_error!r}; retrograd returns")
        if not isinstance(error, rg.RetrogradError):
            raise Mismatch(f"{label}bare error {type(error).__name__}: {error}")
        return "raise"
    if error is not None:
        raise Mismatch(f"{label}retrograd raises {type(error).__name__}: {error}") from error
    for key in ("out", "after", "grad", "grad2"):
        want, got = torch_result.get(key), result.get(key)
        if want is None or got is None:
            # a derivative that is constant zero in one library's graph and untracked in
            # the other's (everything overwritten, a locally linear formula)
            if not _all_zero(want or got or []):
                raise Mismatch(
                    f"{label}{key}: torch has {want is not None}, retrograd {got is not None}"
                )
            continue
        if len(got) != len(want):
            raise Mismatch(f"{label}{key}: {len(got)} items != torch's {len(want)}")
        for k, (g, w) in enumerate(zip(got, want)):
            _close(g, w, f"{label}{key} {k}")
    return "ok"


STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget-1": lambda: rg.BudgetCheckpointing(1),
    "budget-256": lambda: rg.BudgetCheckpointing(256),
}


def check(draw, strategies: bool = False) -> str:
    """One draw against torch (and, with ``strategies``, under every checkpointing strategy,
    each bit-identical to NoCheckpointing's)."""
    _, program, operands, order = draw
    torch = _torch()
    want, want_error = run(torch, program, operands, order)
    if not strategies:
        got, error = run(rg, program, operands, order)
        return compare(want, want_error, got, error)
    inner = rg.current_backend().inner
    baseline = None
    for label, make in STRATEGIES.items():
        with rg.use_backend(rg.Autodiff(inner, make())):
            got, error = run(rg, program, operands, order)
        outcome = compare(want, want_error, got, error, f"{label}: ")
        if outcome != "ok":
            return outcome
        if baseline is None:
            baseline = got
            continue
        for key, items in baseline.items():
            for k, ((b, _), (g, _)) in enumerate(zip(items, got.get(key, []))):
                if not np.array_equal(b, g, equal_nan=True):
                    raise Mismatch(f"{label}: {key} {k} not bit-identical to NoCheckpointing's")
    return "ok"


# -- ordering and selection ----------------------------------------------------------------------
_ORDER_POOL = [0.0, -0.0, 1.0, 1.0, 2.0, -1.0, math.nan, math.inf, -math.inf, 0.5]


def _order_array(rng, dtype, shape, nan=True):
    if dtype == "int64":
        return rng.integers(-2, 3, size=shape).astype(np.int64)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    n = int(np.prod(shape)) if shape else 1
    a = np.array([_ORDER_POOL[i] for i in rng.integers(len(_ORDER_POOL), size=n)]).reshape(shape)
    if not nan or rng.random() < 0.4:
        a = np.where(np.isnan(a), 0.25, a)
    return a


def ordering(rng):
    nd = int(rng.integers(0, 4))
    low = 0 if rng.random() < 0.15 else 1
    shape = tuple(int(s) for s in rng.integers(low, 4, size=nd))
    dtype = str(rng.choice(["float64", "float64", "float64", "int64", "bool", "float32"]))
    d = int(rng.integers(-nd, nd)) if nd else int(rng.choice([0, -1]))
    size = shape[d] if nd else 1
    flag = lambda: bool(rng.integers(2))  # noqa: E731
    nan = True
    kind = int(rng.integers(0, 14))
    if kind == 0:
        stable, descending = flag(), flag()
        fn = lambda lib, x: lib.sort(x, dim=d, descending=descending, stable=stable)  # noqa: E731
        desc = f"sort(dim={d}, descending={descending}, stable={stable})"
    elif kind == 1:
        k, largest, ordered = int(rng.integers(1 if nd == 0 else 0, size + 2)), flag(), flag()
        fn = lambda lib, x: lib.topk(x, k, dim=d, largest=largest, sorted=ordered)  # noqa: E731
        desc = f"topk({k}, dim={d}, largest={largest}, sorted={ordered})"
    elif kind == 2:
        ordered, inverse, counts = flag(), flag(), flag()
        if flag():
            fn = lambda lib, x: lib.unique(  # noqa: E731
                x, sorted=ordered, return_inverse=inverse, return_counts=counts
            )
            desc = f"unique(sorted={ordered}, return_inverse={inverse}, return_counts={counts})"
        else:  # (slices holding NaN have no order in torch's sort of them)
            nan = False
            fn = lambda lib, x: lib.unique(  # noqa: E731
                x, return_inverse=inverse, return_counts=counts, dim=d
            )
            desc = f"unique(return_inverse={inverse}, return_counts={counts}, dim={d})"
    elif kind == 3:
        inverse, counts, dd = flag(), flag(), (None if flag() else d)
        fn = lambda lib, x: lib.unique_consecutive(  # noqa: E731
            x, return_inverse=inverse, return_counts=counts, dim=dd
        )
        desc = f"unique_consecutive(return_inverse={inverse}, return_counts={counts}, dim={dd})"
    elif kind == 4:
        k, keepdim = int(rng.integers(0, size + 2)), flag()
        fn = lambda lib, x: lib.kthvalue(x, k, dim=d, keepdim=keepdim)  # noqa: E731
        desc = f"kthvalue({k}, dim={d}, keepdim={keepdim})"
    elif kind in (5, 6):
        name, keepdim = ("median", "nanmedian")[kind - 5], flag()
        if flag():
            fn = lambda lib, x: getattr(lib, name)(x)  # noqa: E731
            desc = f"{name}()"
        else:
            fn = lambda lib, x: getattr(lib, name)(x, dim=d, keepdim=keepdim)  # noqa: E731
            desc = f"{name}(dim={d}, keepdim={keepdim})"
    elif kind == 7:  # (over numbers: see the module's note)
        nan, keepdim = False, flag()
        fn = lambda lib, x: lib.mode(x, dim=d, keepdim=keepdim)  # noqa: E731
        desc = f"mode(dim={d}, keepdim={keepdim})"
    elif kind == 8:
        stable, descending = flag(), flag()
        fn = lambda lib, x: lib.argsort(x, dim=d, descending=descending, stable=stable)  # noqa: E731
        desc = f"argsort(dim={d}, descending={descending}, stable={stable})"
    elif kind == 9:
        name = str(rng.choice(["amax", "amin", "max", "min", "argmax", "argmin", "aminmax"]))
        keepdim = flag()
        if flag():
            fn = lambda lib, x: getattr(lib, name)(x)  # noqa: E731
            desc = f"{name}()"
        else:
            fn = lambda lib, x: getattr(lib, name)(x, dim=d, keepdim=keepdim)  # noqa: E731
            desc = f"{name}(dim={d}, keepdim={keepdim})"
    elif kind == 10:
        name = str(rng.choice(["cummax", "cummin", "cumsum", "cumprod"]))
        fn = lambda lib, x: getattr(lib, name)(x, dim=d)  # noqa: E731
        desc = f"{name}(dim={d})"
    elif kind == 11:
        q = float(rng.choice([0.0, 0.5, 0.25, 1.0, 0.9]))
        how = str(rng.choice(["linear", "lower", "higher", "midpoint", "nearest"]))
        # (over 16 values torch's unstable sort, libstdc++'s introsort, orders ties its
        # own way, and the gradient follows it: flattened only below that)
        small = int(np.prod(shape)) <= 16
        name, dd = str(rng.choice(["quantile", "nanquantile"])), (None if small and flag() else d)
        fn = lambda lib, x: getattr(lib, name)(x, q, dim=dd, interpolation=how)  # noqa: E731
        desc = f"{name}({q}, dim={dd}, interpolation={how!r})"
    elif kind == 12:
        name, keepdim = str(rng.choice(["nansum", "nanmean", "logsumexp", "std", "var"])), flag()
        nan = nd > 0  # (torch's gradient of var of a 0-d NaN is inf, of 0-d 1.0 NaN)
        fn = lambda lib, x: getattr(lib, name)(x, dim=d, keepdim=keepdim)  # noqa: E731
        desc = f"{name}(dim={d}, keepdim={keepdim})"
    else:
        edges = np.sort(np.where(np.isnan(e := _order_array(rng, "float64", (4,))), 3.0, e))
        edges = edges[: int(rng.integers(0, 5))]
        right = flag()
        dtype = "float64" if dtype in ("int64", "bool") else dtype
        fn = lambda lib, x: lib.searchsorted(  # noqa: E731
            lib.tensor(edges, dtype=x.dtype), x, right=right
        )
        desc = f"searchsorted({edges.tolist()}, right={right})"
    grad = dtype == "float64" and "unique" not in desc
    operands = [(_order_array(rng, dtype, shape, nan), dtype, grad)]
    return f"{desc} of {dtype}{list(shape)}", fn, operands, int(grad)


# -- integers and boundary values ----------------------------------------------------------------
_INTS = [0, 1, -1, 2, -2, 3, -3, 7, -7, 63, 64, -64, 2**62, -(2**63), 2**63 - 1]
_FLOATS = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 3.0, -3.0, math.inf, -math.inf, math.nan, 0.5, 7.0]
_DTYPES = ["int64", "int64", "bool", "float64", "float32"]


def _boundary_array(rng, dtype, shape):
    n = int(np.prod(shape)) if shape else 1
    if dtype == "int64":
        small = rng.integers(-5, 6, size=n)
        big = np.array([_INTS[i] for i in rng.integers(len(_INTS), size=n)], dtype=np.int64)
        return np.where(rng.random(n) < 0.3, big, small).astype(np.int64).reshape(shape)
    if dtype == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    return np.array([_FLOATS[i] for i in rng.integers(len(_FLOATS), size=n)]).reshape(shape)


def _number(rng):
    kind = int(rng.integers(4))
    if kind == 0:
        return int(rng.choice([0, 1, -1, 2, -3, 64, -2]))
    if kind == 1:
        return float(rng.choice([0.0, -0.0, 1.5, -2.0, math.inf, math.nan]))
    if kind == 2:
        return bool(rng.integers(2))
    return int(rng.integers(-4, 5))


def _shift_in_place(a, b, left):
    c = a
    if left:
        c <<= b
    else:
        c >>= b
    return a


_BINARY = {
    "floor_divide": lambda lib, a, b: lib.floor_divide(a, b),
    "div_floor": lambda lib, a, b: lib.div(a, b, rounding_mode="floor"),
    "div_trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "true_divide": lambda lib, a, b: lib.true_divide(a, b),
    "remainder": lambda lib, a, b: lib.remainder(a, b),
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "pow": lambda lib, a, b: lib.pow(a, b),
    "float_power": lambda lib, a, b: lib.float_power(a, b),
    "<<": lambda lib, a, b: a << b,
    ">>": lambda lib, a, b: a >> b,
    "bitwise_and": lambda lib, a, b: lib.bitwise_and(a, b),
    "bitwise_or": lambda lib, a, b: lib.bitwise_or(a, b),
    "bitwise_xor": lambda lib, a, b: lib.bitwise_xor(a, b),
    "//": lambda lib, a, b: a // b,
    "%": lambda lib, a, b: a % b,
    "**": lambda lib, a, b: a**b,
    "reflected **": lambda lib, a, b: b**a,
    "reflected //": lambda lib, a, b: b // a,
    "reflected %": lambda lib, a, b: b % a,
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "atan2": lambda lib, a, b: lib.atan2(a, b),
    "clamp(min=)": lambda lib, a, b: lib.clamp(a, min=b),
    "clamp(max=)": lambda lib, a, b: lib.clamp(a, max=b),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "add_(alpha=2)": lambda lib, a, b: a.add_(b, alpha=2),
    "sub_": lambda lib, a, b: a.sub_(b),
    "mul_": lambda lib, a, b: a.mul_(b),
    "div_": lambda lib, a, b: a.div_(b),
    "div_(floor)": lambda lib, a, b: a.div_(b, rounding_mode="floor"),
    "remainder_": lambda lib, a, b: a.remainder_(b),
    "fmod_": lambda lib, a, b: a.fmod_(b),
    "pow_": lambda lib, a, b: a.pow_(b),
    "floor_divide_": lambda lib, a, b: a.floor_divide_(b),
    "<<=": lambda lib, a, b: _shift_in_place(a, b, True),
    ">>=": lambda lib, a, b: _shift_in_place(a, b, False),
    "&=": lambda lib, a, b: a.__iand__(b),
    "^=": lambda lib, a, b: a.__ixor__(b),
    "clamp_(min=)": lambda lib, a, b: a.clamp_(min=b),
}


def boundary(rng):
    name = list(_BINARY)[int(rng.integers(len(_BINARY)))]
    fn = _BINARY[name]
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(0, 3))))
    dtype = _DTYPES[int(rng.integers(len(_DTYPES)))]
    operands = [(_boundary_array(rng, dtype, shape), dtype, False)]
    kind = int(rng.integers(3))
    if kind == 0:
        number = _number(rng)
        return (
            f"{name}({dtype}{list(shape)}, {number!r})",
            lambda lib, a: fn(lib, a, number),
            operands,
            0,
        )
    other_shape = shape[int(rng.integers(len(shape) + 1)) :] if kind == 1 else ()
    other = _DTYPES[int(rng.integers(len(_DTYPES)))]
    operands.append((_boundary_array(rng, other, other_shape), other, False))
    desc = f"{name}({dtype}{list(shape)}, {other}{list(other_shape)})"
    return desc, fn, operands, 0


# -- second derivatives of smooth chains, under every strategy -----------------------------------
def _write_through_a_view(lib, x):
    y = x * 1.0
    y[..., :1].mul_(2.0).add_(x[..., :1].sin())
    return y * x


def _square(x):
    return x.ndim >= 2 and x.shape[-1] == x.shape[-2]


_SMOOTH = {
    "exp": lambda lib, x: x.exp(),
    "tanh": lambda lib, x: x.tanh(),
    "sin": lambda lib, x: x.sin(),
    "cube": lambda lib, x: x**3,
    "softplus": lambda lib, x: lib.nn.functional.softplus(x),
    "gelu(tanh)": lambda lib, x: lib.nn.functional.gelu(x, approximate="tanh"),
    "silu": lambda lib, x: lib.nn.functional.silu(x),
    "elu": lambda lib, x: lib.nn.functional.elu(x),
    "celu": lambda lib, x: lib.nn.functional.celu(x, 0.7),
    "mish": lambda lib, x: lib.nn.functional.mish(x),
    "logsigmoid": lambda lib, x: lib.nn.functional.logsigmoid(x),
    "softmax": lambda lib, x: x.softmax(-1),
    "log_softmax": lambda lib, x: x.log_softmax(-1),
    "rsqrt": lambda lib, x: (x * x + 0.5).rsqrt(),
    "reciprocal": lambda lib, x: (x * x + 1).reciprocal(),
    "erf": lambda lib, x: x.erf(),
    "pow(1.5)": lambda lib, x: (x * x + 1).pow(1.5),
    "1.7**x": lambda lib, x: lib.pow(1.7, x),
    "abs*x": lambda lib, x: x.abs() * x,
    "cumsum": lambda lib, x: x.cumsum(-1),
    "cumprod": lambda lib, x: x.cumprod(-1),
    "logsumexp": lambda lib, x: x.logsumexp(-1, keepdim=True) + x,
    "var": lambda lib, x: x - x.var(-1, keepdim=True) if x.shape[-1] > 1 else x,
    "prod": lambda lib, x: x * x.prod(-1, keepdim=True),
    "max": lambda lib, x: x * x.max(-1, keepdim=True).values,
    "transpose": lambda lib, x: x.transpose(-1, -2) if x.ndim >= 2 else x,
    "flip": lambda lib, x: x.flip(-1),
    "[..., ::2]": lambda lib, x: x[..., ::2],
    "expand": lambda lib, x: x.unsqueeze(0).expand(2, *x.shape).sum(0),
    "rms_norm": lambda lib, x: lib.nn.functional.rms_norm(x, x.shape[-1:]),
    "clamp*x": lambda lib, x: x.clamp(-0.7, 0.8) * x,
    "where": lambda lib, x: lib.where(x > 0, x * x, x.exp()),
    "x@x.T": lambda lib, x: x @ x.transpose(-1, -2) if x.ndim >= 2 else x * x.sum(),
    "unfold": lambda lib, x: x.unfold(-1, 2, 1).sum(-1) if x.shape[-1] >= 2 else x,
    "diagonal": lambda lib, x: x.diagonal(0, -2, -1) if x.ndim >= 2 else x,
    "sort*x": lambda lib, x: x.sort(-1).values * x,
    "cummax*x": lambda lib, x: x.cummax(-1).values * x,
    "clone.mul_": lambda lib, x: x.clone().mul_(x).add_(1),
    "write through a view": _write_through_a_view,
    "inv": lambda lib, x: (
        lib.linalg.inv(x + 3 * lib.eye(x.shape[-1], dtype=x.dtype)) if _square(x) else x
    ),
    "atan2": lambda lib, x: lib.atan2(x, x * x + 1),
    "lerp": lambda lib, x: lib.lerp(x, x * x, x.sigmoid()),
    "xlogy": lambda lib, x: lib.xlogy(x, x * x + 1),
    "addcdiv": lambda lib, x: lib.addcdiv(x, x, x * x + 1, value=0.5),
    "huber": lambda lib, x: lib.nn.functional.huber_loss(x, x * 0.5, reduction="none", delta=0.4),
    "glu": lambda lib, x: lib.nn.functional.glu(x, -1) if x.shape[-1] % 2 == 0 else x,
}
_PAIRS = {
    "+": lambda lib, a, b: a + b,
    "*": lambda lib, a, b: a * b,
    "/": lambda lib, a, b: a / (b * b + 1),
    "maximum*": lambda lib, a, b: lib.maximum(a, b) * a,
    "**": lambda lib, a, b: (a * a + 1) ** b,
}


def second_order(rng):
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 4))))
    shapes = [shape]
    if rng.random() < 0.5:
        other = list(shape[int(rng.integers(0, len(shape) + 1)) :])
        if other and rng.random() < 0.3:
            other[int(rng.integers(len(other)))] = 1
        shapes.append(tuple(other))
    operands = [(rng.uniform(-1.5, 1.5, s), "float64", True) for s in shapes]
    steps = []
    for _ in range(int(rng.integers(2, 6))):
        if len(shapes) == 2 and rng.random() < 0.3:
            steps.append((str(rng.choice(list(_PAIRS))), bool(rng.integers(2))))
        else:
            steps.append((str(rng.choice(list(_SMOOTH))), None))

    def program(lib, *leaves):
        x = leaves[0]
        for name, first in steps:
            if first is None:
                x = _SMOOTH[name](lib, x)
            else:
                a, b = (x, leaves[1]) if first else (leaves[1], x)
                x = _PAIRS[name](lib, a, b)
        return x

    return " > ".join(name for name, _ in steps) + f" of {shapes}", program, operands, 2


# -- views written in place ------------------------------------------------------------------------
_VIEWS = [
    ("transpose(0, -1)", lambda v: v.ndim >= 2, lambda v: v.transpose(0, -1)),
    ("narrow", lambda v: v.ndim and v.shape[-1] >= 2, lambda v: v.narrow(-1, 1, v.shape[-1] - 1)),
    ("[::2]", lambda v: v.ndim and v.shape[0] >= 2, lambda v: v[::2]),
    ("[-1]", lambda v: v.ndim >= 1, lambda v: v[-1]),
    ("unfold", lambda v: v.ndim and v.shape[-1] >= 2, lambda v: v.unfold(-1, 1, 2)),
    ("diagonal", lambda v: v.ndim >= 2, lambda v: v.diagonal(0, 0, 1)),
    ("view(-1)", lambda v: v.ndim >= 1 and v.is_contiguous(), lambda v: v.view(-1)),
    ("unsqueeze", lambda v: True, lambda v: v.unsqueeze(0)),
    ("select", lambda v: v.ndim >= 2, lambda v: v.select(1, 0)),
    ("permute", lambda v: v.ndim == 3, lambda v: v.permute(2, 0, 1)),
    ("[..., :1]", lambda v: v.ndim >= 1, lambda v: v[..., :1]),
    ("movedim", lambda v: v.ndim >= 2, lambda v: v.movedim(0, 1)),
    ("squeeze", lambda v: True, lambda v: v.squeeze()),
    ("T", lambda v: v.ndim == 2, lambda v: v.T),
    ("[None]", lambda v: True, lambda v: v[None, ...]),
]


def _in_place(rng):
    c = float(np.round(rng.uniform(-2, 2), 2))
    return [
        (f"add_({c})", lambda v, x: v.add_(c)),
        (f"mul_({c})", lambda v, x: v.mul_(c)),
        ("clamp_(-0.5, 0.7)", lambda v, x: v.clamp_(-0.5, 0.7)),
        ("zero_", lambda v, x: v.zero_()),
        (f"fill_({c})", lambda v, x: v.fill_(c)),
        ("mul_(x[0])", lambda v, x: v.mul_(x.reshape(-1)[0])),
        ("copy_(2 sin)", lambda v, x: v.copy_(v.sin() * 2)),
        (f"masked_fill_(>0, {c})", lambda v, x: v.masked_fill_(v > 0, c)),
        ("[...] = v*v", lambda v, x: v.__setitem__(Ellipsis, v * v)),
        ("add_(self)", lambda v, x: v.add_(v)),
        ("addcmul_", lambda v, x: v.addcmul_(v, v, value=0.5)),
        ("exp_", lambda v, x: v.exp_()),
        ("div_(2)", lambda v, x: v.div_(2.0)),
    ][int(rng.integers(13))]


def view_writes(rng):
    shape = tuple(int(s) for s in rng.integers(1, 4, size=int(rng.integers(1, 4))))
    array = rng.uniform(-1.5, 1.5, shape)
    dtype = "float64" if rng.random() < 0.85 else str(rng.choice(["float32", "int64"]))
    if dtype == "int64":
        array = np.round(array * 3).astype(np.int64)
    plan = []
    for _ in range(int(rng.integers(1, 5))):
        target = str(rng.choice(["view", "view", "base", "new view"]))
        chain = [int(i) for i in rng.integers(len(_VIEWS), size=int(rng.integers(1, 4)))]
        plan.append((target, chain, *_in_place(rng)))
    leaf_base = rng.random() < 0.3

    def program(lib, x):
        base = x.clone() if leaf_base else x * 1.0
        view, reads = base, []
        for target, chain, _, write in plan:
            view = base if target == "new view" else view
            for i in chain:
                _, fits, take = _VIEWS[i]
                view = take(view) if fits(view) else view
            write(base if target == "base" else view, x)
            reads.append(view * 1)
        return [base, view, *reads]

    desc = f"{dtype}{list(shape)}: " + "; ".join(
        f"{t} {[_VIEWS[i][0] for i in c]}.{w}" for t, c, w, _ in plan
    )
    order = (2 if rng.random() < 0.3 else 1) if dtype == "float64" else 0
    return desc, program, [(array, dtype, dtype == "float64")], order


# -- gradient penalties through nn.functional layers, under every strategy -----------------------
def _nnf(lib):
    return lib.nn.functional


_LAYERS = {
    "conv1d": (
        lambda rng, channels: (rng.standard_normal((channels, channels, 3)) * 0.3,),
        lambda lib, x, w: _nnf(lib).conv1d(x, w, padding=1),
    ),
    "conv1d_stride": (
        lambda rng, channels: (rng.standard_normal((channels, channels, 2)) * 0.3,),
        lambda lib, x, w: _nnf(lib).conv1d(x, w, stride=2, padding=1),
    ),
    "conv1d_dil_groups": (
        lambda rng, channels: (rng.standard_normal((channels, 1, 3)) * 0.3,),
        lambda lib, x, w: _nnf(lib).conv1d(x, w, padding=2, dilation=2, groups=x.shape[1]),
    ),
    "convt1d": (
        lambda rng, channels: (rng.standard_normal((channels, channels, 3)) * 0.3,),
        lambda lib, x, w: _nnf(lib).conv_transpose1d(x, w, stride=2, padding=1, output_padding=1)[
            ..., : x.shape[-1]
        ],
    ),
    "linear": (
        lambda rng, channels: (
            rng.standard_normal((channels, channels)) * 0.3,
            rng.standard_normal(channels) * 0.1,
        ),
        lambda lib, x, w, b: _nnf(lib).linear(x.transpose(1, 2), w, b).transpose(1, 2),
    ),
    "tanh": (lambda rng, channels: (), lambda lib, x: x.tanh()),
    "softplus": (lambda rng, channels: (), lambda lib, x: _nnf(lib).softplus(x, beta=2.0)),
    "gelu": (lambda rng, channels: (), lambda lib, x: _nnf(lib).gelu(x)),
    "elu": (lambda rng, channels: (), lambda lib, x: _nnf(lib).elu(x)),
    "leaky": (lambda rng, channels: (), lambda lib, x: _nnf(lib).leaky_relu(x, 0.1)),
    "silu": (lambda rng, channels: (), lambda lib, x: _nnf(lib).silu(x)),
    "layer_norm": (
        lambda rng, channels: (rng.standard_normal(1) + 1, rng.standard_normal(1)),
        lambda lib, x, w, b: _nnf(lib).layer_norm(
            x, x.shape[-1:], w.expand(x.shape[-1]), b.expand(x.shape[-1])
        ),
    ),
    "group_norm": (
        lambda rng, channels: (rng.standard_normal(channels) + 1, rng.standard_normal(channels)),
        lambda lib, x, w, b: _nnf(lib).group_norm(x, 1, w, b),
    ),
    "instance_norm": (lambda rng, channels: (), lambda lib, x: _nnf(lib).instance_norm(x)),
    "batch_norm_train": (
        lambda rng, channels: (rng.standard_normal(channels) + 1, rng.standard_normal(channels)),
        lambda lib, x, w, b: _nnf(lib).batch_norm(x, None, None, w, b, training=True),
    ),
    "avg_pool": (
        lambda rng, channels: (),
        lambda lib, x: _nnf(lib).avg_pool1d(x, 2, 1, padding=1, count_include_pad=False),
    ),
    "max_pool": (lambda rng, channels: (), lambda lib, x: _nnf(lib).max_pool1d(x, 2, 1)),
    "lp_pool": (
        lambda rng, channels: (),
        lambda lib, x: _nnf(lib).lp_pool1d(x * x + 0.1, 2, 2) if x.shape[-1] >= 2 else x,
    ),
    "adaptive_avg": (lambda rng, channels: (), lambda lib, x: _nnf(lib).adaptive_avg_pool1d(x, 3)),
    "softmax": (lambda rng, channels: (), lambda lib, x: _nnf(lib).softmax(x, 1)),
    "log_softmax": (lambda rng, channels: (), lambda lib, x: _nnf(lib).log_softmax(x, -1)),
    "interp_linear": (
        lambda rng, channels: (),
        lambda lib, x: _nnf(lib).interpolate(x, scale_factor=2, mode="linear", align_corners=False),
    ),
    "pad_reflect": (
        lambda rng, channels: (),
        lambda lib, x: _nnf(lib).pad(x, (1, 1), mode="reflect") if x.shape[-1] >= 2 else x,
    ),
    "pad_replicate": (
        lambda rng, channels: (),
        lambda lib, x: _nnf(lib).pad(x, (2, 1), mode="replicate"),
    ),
    "dropout0": (lambda rng, channels: (), lambda lib, x: _nnf(lib).dropout(x, 0.0)),
    "glu": (lambda rng, channels: (), lambda lib, x: _nnf(lib).glu(lib.cat([x, x * 0.5], 1), 1)),
    "rms_norm": (
        lambda rng, channels: (rng.standard_normal(1) + 1,),
        lambda lib, x, w: _nnf(lib).rms_norm(x, x.shape[-1:], w.expand(x.shape[-1])),
    ),
    "cumsum": (lambda rng, channels: (), lambda lib, x: x.cumsum(-1)),
}


def gradient_penalty(rng):
    batch, channels, width = (
        int(rng.integers(1, 3)),
        int(rng.integers(1, 3)),
        int(rng.integers(2, 6)),
    )
    x = rng.standard_normal((batch, channels, width))
    names = [str(n) for n in rng.choice(list(_LAYERS), size=int(rng.integers(2, 5)))]
    params, spans = [], []
    for n in names:
        p = _LAYERS[n][0](rng, channels)
        spans.append((len(params), len(p)))
        params += list(p)
    kind = str(rng.choice(["gp", "gp_sum", "double"]))

    def program(lib, x, *ps):
        def net(inp):
            h = inp
            for n, (s, k) in zip(names, spans):
                h = _LAYERS[n][1](lib, h, *ps[s : s + k])
            return h

        out = net(x)
        (g,) = lib.autograd.grad(out.square().sum(), x, create_graph=True)
        if kind == "gp":
            pen = ((g.flatten(1).norm(dim=1) - 1.0) ** 2).mean()
        elif kind == "gp_sum":
            pen = (g * g).sum() + out.mean()
        else:
            pen = (g.sin() * x).sum()
        return pen

    specs = [(x, "float64", True)] + [
        (np.asarray(p, dtype=np.float64), "float64", True) for p in params
    ]
    return " > ".join(names) + f" {kind} of x{(batch, channels, width)}", program, specs, 1


GENERATORS = {
    "ordering": ordering,
    "boundary": boundary,
    "second_order": second_order,
    "view_writes": view_writes,
    "gradient_penalty": gradient_penalty,
}
