"""Random programs against PyTorch, round 56: ``torch.special`` and elementwise math at extremes.

Each test draws, from a seeded NumPy generator, ops of ``rg.special`` (the erf family, gamma
family, Bessel functions, ndtr family, logit/expit/entr/sinc, round with decimals, softmax with
``dtype=``) and elementwise binaries (``xlogy xlog1py zeta nextafter copysign hypot logaddexp
logaddexp2 fmod remainder float_power true_divide floor_divide ldexp``) applied to tensors whose
elements come from a pool of extremes: 0, -0, +-inf, NaN, subnormals, huge and tiny values,
poles and the ends of each domain. Inputs are float32/float64, int64 and bool (torch's result
dtypes), and on the torch backend float16/bfloat16 (values as torch rounds them). It compares
values, dtypes and shapes; whether a call raises (retrograd with a ``RetrogradError`` naming the
op, the operands usable afterwards); and float64 gradients against torch's autograd, or against
central differences for the Bessel functions torch cannot differentiate.

Left out as torch's quirks rather than semantics: ``fmod``/``remainder`` by a subnormal or of a
quotient that overflows (torch's vectorized loop is NaN there, its scalar tail exact), and the
Hurwitz zeta of an exponent so large that ``x * (x + 1)`` overflows (NaN from cephes' series).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import backends
import retrograd as rg

torch = pytest.importorskip("torch")

POOL = (
    0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.5, 3.0, 1e-310, -1e-310, 1e-30, 1e300, -1e300,
    50.0, -50.0, 800.0, 0.999999, -0.999999, 1e-7, math.inf, -math.inf, math.nan,
)  # fmt: skip
TAME = (0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.5, 3.0, 1e-30, 50.0, -50.0, math.inf, math.nan)

UNARY = [
    "erf",
    "erfc",
    "erfinv",
    "erfcx",
    "gammaln",
    "digamma",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "modified_bessel_i0",
    "modified_bessel_i1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
    "spherical_bessel_j0",
    "ndtr",
    "ndtri",
    "log_ndtr",
    "sinc",
    "entr",
    "expit",
    "logit",
    "expm1",
    "exp2",
    "log1p",
]
#: the ones torch differentiates; the others are checked by central differences
NO_TORCH_GRAD = {name for name in UNARY if "bessel" in name}
#: sinc's gradient near 0 cancels in both libraries' formulas, differently rounded (torch
#: divides pi x cos(pi x) - sin(pi x) by pi x^2; retrograd differentiates sin(pi x) / (pi x))
GRAD_RTOL = {"sinc": 1e-2}
BINARY = [
    "xlogy",
    "xlog1py",
    "zeta",
    "nextafter",
    "copysign",
    "hypot",
    "logaddexp",
    "logaddexp2",
    "fmod",
    "remainder",
    "float_power",
    "true_divide",
    "floor_divide",
    "atan2",
    "fmax",
    "fmin",
]


def _lib_op(lib, name):
    special = torch.special if lib is torch else rg.special
    return getattr(special, name, None) or getattr(lib, name)


def _torch_backend() -> rg.Autodiff:
    return rg.Autodiff(rg.TorchBackend("cpu"))


def _ours(values: np.ndarray, dtype: str) -> rg.Tensor:
    backend = _torch_backend() if dtype in ("float16", "bfloat16") else None
    return rg.tensor(values, dtype=rg.float64, backend=backend).to(getattr(rg, dtype))


def _theirs(values: np.ndarray, dtype: str) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).to(getattr(torch, dtype))


def _run(call):
    try:
        return call(), None
    except Exception as error:
        return None, error


def _agree(where: str, ours, theirs, rtol: float) -> None:
    assert str(ours.dtype) == str(theirs.dtype)[6:], f"{where}: {ours.dtype} vs {theirs.dtype}"
    assert tuple(ours.shape) == tuple(theirs.shape), f"{where}: shape"
    mine = ours.detach().cast("float64").numpy() if ours.is_floating_point() else ours.numpy()
    expected = theirs.detach().double().numpy() if theirs.is_floating_point() else theirs.numpy()
    np.testing.assert_allclose(mine, expected, rtol=rtol, atol=rtol * 1e-3, equal_nan=True)
    if ours.is_floating_point():  # signed zeros too
        zeros = expected == 0
        assert (np.signbit(mine[zeros]) == np.signbit(expected[zeros])).all(), f"{where}: -0"


def _compare(where: str, rg_call, torch_call, operands, rtol: float) -> None:
    theirs, torch_error = _run(torch_call)
    ours, our_error = _run(rg_call)
    if torch_error is not None or our_error is not None:
        assert (torch_error is None) == (our_error is None), (
            f"{where}: torch {torch_error!r}, retrograd {our_error!r}"
        )
        assert isinstance(our_error, rg.RetrogradError), f"{where}: {our_error!r}"
        for operand in operands:  # still usable after the failure
            operand.sum().item()
        return
    _agree(where, ours, theirs, rtol)


RTOL = {"float64": 1e-9, "float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def _dtypes() -> tuple[str, ...]:
    return ("float64", "float32", "int64", "bool") + (
        ("float16", "bfloat16") if backends.on_torch() else ()
    )


@pytest.mark.parametrize("seed", range(4))
def test_unary_special_at_extremes_match_torch(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(5600 + seed)
    for name in rng.choice(UNARY, size=12, replace=False):
        dtype = str(rng.choice(_dtypes()))
        shape = tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(0, 3))))
        values = rng.choice(POOL, size=shape)
        if dtype in ("int64", "bool"):
            values = rng.integers(-3, 4, size=shape).astype(np.float64)
            values = values != 0 if dtype == "bool" else values
        x, t = _ours(np.asarray(values, np.float64), dtype), _theirs(values, dtype)
        rtol = RTOL.get(dtype, 1e-6)  # (an int or bool input gives float32)
        _compare(
            f"{name}({dtype}{list(shape)})",
            lambda x=x, name=name: _lib_op(rg, name)(x),
            lambda t=t, name=name: _lib_op(torch, name)(t),
            (x,),
            rtol,
        )
    # the ones with a parameter
    x64 = rg.tensor(np.array(POOL), dtype=rg.float64)
    t64 = torch.tensor(POOL, dtype=torch.float64)
    n = int(rng.integers(0, 4))
    _compare(f"polygamma({n})", lambda: rg.special.polygamma(n, x64),
             lambda: torch.special.polygamma(n, t64), (x64,), 1e-9)  # fmt: skip
    eps = float(rng.choice([1e-6, 0.25, 0.6, -0.1]))
    _compare(f"logit(eps={eps})", lambda: rg.special.logit(x64, eps=eps),
             lambda: torch.special.logit(t64, eps=eps), (x64,), 1e-9)  # fmt: skip
    decimals = int(rng.integers(-3, 4))
    _compare(f"round(decimals={decimals})", lambda: rg.special.round(x64, decimals=decimals),
             lambda: torch.special.round(t64, decimals=decimals), (x64,), 1e-12)  # fmt: skip
    p = int(rng.integers(1, 4))
    _compare(f"multigammaln(p={p})", lambda: rg.special.multigammaln(x64, p),
             lambda: torch.special.multigammaln(t64, p), (x64,), 1e-9)  # fmt: skip
    rows = rng.choice(POOL, size=(3, 4))
    xr, tr = rg.tensor(rows, dtype=rg.float32), torch.tensor(rows, dtype=torch.float32)
    for fn in ("softmax", "log_softmax"):
        _compare(fn, lambda fn=fn: getattr(rg.special, fn)(xr, 1, dtype=rg.float64),
                 lambda fn=fn: getattr(torch.special, fn)(tr, 1, dtype=torch.float64),
                 (xr,), 1e-6)  # fmt: skip
    _compare("logsumexp", lambda: rg.special.logsumexp(xr, 1),
             lambda: torch.special.logsumexp(tr, 1), (xr,), 2e-6)  # fmt: skip


def _binary_operands(rng, name: str, dtype: str, shape):
    pool = TAME if name in ("fmod", "remainder", "zeta") else POOL
    if dtype in ("int64", "bool"):
        a = rng.integers(-4, 5, size=shape).astype(np.float64)
        b = rng.integers(-2, 3, size=shape[-1:]).astype(np.float64)
        return (a != 0, b != 0) if dtype == "bool" else (a, b)
    return rng.choice(pool, size=shape), rng.choice(pool, size=shape[-1:])


@pytest.mark.parametrize("seed", range(3))
def test_binary_math_at_extremes_match_torch(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(5650 + seed)
    for name in rng.choice(BINARY, size=10, replace=False):
        dtype = str(rng.choice(_dtypes()))
        shape = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        a, b = _binary_operands(rng, name, dtype, shape)
        x, y = _ours(np.asarray(a, np.float64), dtype), _ours(np.asarray(b, np.float64), dtype)
        t, u = _theirs(a, dtype), _theirs(b, dtype)
        _compare(
            f"{name}({dtype}{list(shape)})",
            lambda x=x, y=y, name=name: _lib_op(rg, name)(x, y),
            lambda t=t, u=u, name=name: _lib_op(torch, name)(t, u),
            (x, y),
            RTOL.get(dtype, 1e-6),
        )
        if dtype in ("float64", "float32", "int64"):  # a Python number on the right
            number = float(rng.choice(TAME[:9])) if dtype != "int64" else int(rng.integers(-2, 3))
            _compare(
                f"{name}({dtype}, {number!r})",
                lambda x=x, name=name, number=number: _lib_op(rg, name)(x, number),
                lambda t=t, name=name, number=number: _lib_op(torch, name)(t, number),
                (x,),
                RTOL.get(dtype, 1e-6),
            )


def _central_difference(fn, values: np.ndarray, step: float = 1e-6) -> np.ndarray:
    up = fn(rg.tensor(values + step, dtype=rg.float64)).numpy()
    down = fn(rg.tensor(values - step, dtype=rg.float64)).numpy()
    return (up - down) / (2 * step)


@pytest.mark.parametrize("seed", range(2))
def test_float64_gradients_at_boundaries_match_torch(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(5680 + seed)
    for name in rng.choice(UNARY, size=10, replace=False):
        values = np.array(rng.choice(POOL, size=8))
        ours = rg.tensor(values, dtype=rg.float64, requires_grad=True)
        out = _lib_op(rg, name)(ours)
        grad = ours.grad((out * out.isfinite().cast("float64")).sum().backward())
        if name in NO_TORCH_GRAD:  # torch has none: central differences at moderate points
            points = rng.uniform(0.3, 4.0, size=6) * rng.choice([-1.0, 1.0], size=6)
            if name.startswith(("modified_bessel_k", "scaled_modified_bessel_k", "bessel_y")):
                points = np.abs(points)
            leaf = rg.tensor(points, dtype=rg.float64, requires_grad=True)
            analytic = leaf.grad(_lib_op(rg, name)(leaf).sum().backward()).numpy()
            numeric = _central_difference(_lib_op(rg, name), points)
            np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-7, err_msg=name)
            continue
        leaf = torch.tensor(values, dtype=torch.float64, requires_grad=True)
        result = _lib_op(torch, name)(leaf)
        (result * result.isfinite().double()).sum().backward()
        np.testing.assert_allclose(
            grad.numpy(),
            leaf.grad.numpy(),
            rtol=GRAD_RTOL.get(name, 1e-7),
            atol=1e-12,
            equal_nan=True,
            err_msg=name,
        )
    for name in ("xlogy", "xlog1py", "hypot", "logaddexp", "logaddexp2", "float_power", "atan2"):
        a, b = rng.choice(POOL, size=6), rng.choice(POOL, size=6)
        x = rg.tensor(a, dtype=rg.float64, requires_grad=True)
        y = rg.tensor(b, dtype=rg.float64, requires_grad=True)
        grads = _lib_op(rg, name)(x, y).sum().backward()
        t = torch.tensor(a, dtype=torch.float64, requires_grad=True)
        u = torch.tensor(b, dtype=torch.float64, requires_grad=True)
        _lib_op(torch, name)(t, u).sum().backward()
        for mine, theirs in ((x.grad(grads), t.grad), (y.grad(grads), u.grad)):
            np.testing.assert_allclose(
                mine.numpy(), theirs.numpy(), rtol=1e-7, atol=1e-12, equal_nan=True, err_msg=name
            )
