"""Random programs against PyTorch, round 52: reductions, scans and sorting.

Six families, each drawn from a seeded NumPy generator (one seed per test):

* moments: ``var``/``std``/``var_mean``/``std_mean`` (``correction=``, ``unbiased=``) and
  ``quantile``/``nanquantile`` (every interpolation, a number or a q tensor of the input's
  dtype) over int, negative, tuple and list dims with ``keepdim``, on data holding ties, NaN and
  infinities;
* selections with ties: ``max``/``min``/``median``/``nanmedian``/``mode``/``kthvalue``/
  ``topk``/``sort`` (stable)/``argsort``/``cummax``/``cummin``/``argmax``/``argmin``
  (values and torch's choice of index);
* scans and sums with ``dtype=``: ``cumsum``/``cumprod``/``logcumsumexp``/``sum``/``prod``/
  ``nansum``/``mean`` and ``diff`` (``n``, ``prepend``/``append``) of int, bool and float input;
* sets and bins: ``unique`` (``dim``, inverse, counts), ``unique_consecutive``, ``bincount``
  (weights, minlength, empty input), ``histc``, ``searchsorted``/``bucketize`` (``right``,
  ``side``, ``sorter``, ``out_int32``);
* refusals: out-of-range dims, ``k`` past the size, reductions of size-0 dims that have no
  identity, wrong q/sorter dtypes; retrograd raises a ``RetrogradError`` naming the op where
  torch raises, and the input stays usable;
* float64 gradients of the differentiable ones on data with ties (torch's subgradient choice).

retrograd must agree with torch on whether a call raises and on the values, dtypes and shapes of
what it returns. The inner backend and the checkpointing strategy are the suite's
(``RETROGRAD_INNER``, ``RETROGRAD_CHECKPOINTING``). Left out, as undefined or torch quirks:
``searchsorted`` on unsorted sequences, ``unique(dim=)`` of NaN slices (torch's order is its sort
kernel's), ``keepdim=`` without ``dim`` (torch's parser refuses it), and float-to-int casts of
infinities.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype)[6:], tuple(value.shape), value.detach().numpy())
    if isinstance(value, rg.Tensor):
        return ("tensor", str(value.dtype), tuple(value.shape), value.detach().numpy())
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _compare(what: str, got: Any, want: Any) -> None:
    if isinstance(want, tuple) and want[0] == "tensor":
        if not (isinstance(got, tuple) and got[:3] == want[:3]):
            raise Mismatch(f"{what}: got {got[:3] if isinstance(got, tuple) else got!r}, "
                           f"torch {want[:3]}")  # fmt: skip
        ours, theirs = got[3], want[3]
        if theirs.dtype.kind == "f":
            np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6, err_msg=what)
        elif not np.array_equal(ours, theirs):
            raise Mismatch(f"{what}: got {ours.tolist()}, torch {theirs.tolist()}")
    elif isinstance(want, list):
        if not (isinstance(got, list) and len(got) == len(want)):
            raise Mismatch(f"{what}: got {got!r}, torch {want!r}")
        for i, (a, b) in enumerate(zip(got, want, strict=True)):
            _compare(f"{what}[{i}]", a, b)
    elif got != want:
        raise Mismatch(f"{what}: got {got!r}, torch {want!r}")


def _to(lib: Any, value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy()) if lib is torch else rg.tensor(value.copy())
    if isinstance(value, dict):
        return {k: _to(lib, v) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("dtype:"):
        return getattr(lib, value[6:])
    return value


def _agree(name: str, *args: Any, **kwargs: Any) -> None:
    """``lib.name(*args, **kwargs)`` of both: the same result, or both raise."""
    what = f"{name}{tuple(getattr(a, 'shape', a) for a in args)} {kwargs}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch: degrees of freedom <= 0)
        try:
            theirs = [_to(torch, a) for a in args]
            want = _plain(getattr(torch, name)(*theirs, **_to(torch, kwargs)))
        except (RuntimeError, IndexError, ValueError, TypeError):
            want = None
    ours = [_to(rg, a) for a in args]
    try:
        got = _plain(getattr(rg, name)(*ours, **_to(rg, kwargs)))
    except rg.RetrogradError as error:
        if want is not None:
            raise Mismatch(f"{what}: raised {error!r}, torch returned") from error
        assert name.split("_")[0] in str(error).lower() or name in str(error), (what, error)
        for tensor in ours:  # usable after the refusal
            if isinstance(tensor, rg.Tensor):
                tensor.sum().numpy()
        return
    if want is None:
        raise Mismatch(f"{what}: returned {got!r}, torch raises")
    _compare(what, got, want)


def _data(rng: np.random.Generator, shape: tuple, dtype: str, specials: bool = False) -> Any:
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype in ("int64", "int32", "uint8", "int8"):
        return rng.integers(0, 4, shape).astype(dtype)
    data = rng.integers(-2, 3, shape).astype(dtype)  # (small ints: ties)
    if specials and data.size:
        for _ in range(rng.integers(1, 3)):
            data.flat[rng.integers(0, data.size)] = rng.choice([np.inf, -np.inf, np.nan])
    return data


def _dims(rng: np.random.Generator, ndim: int) -> list:
    dims: list = [None, *range(-ndim, ndim)]
    if ndim >= 2:
        dims += [(0, -1), [ndim - 1, 0]]
    return [dims[i] for i in rng.permutation(len(dims))[:3]]


_SHAPES = ((), (4,), (2, 3), (3, 1, 2), (2, 0))


def test_moments_and_quantiles_agree_with_torch() -> None:
    rng = np.random.default_rng(5201)
    for shape in _SHAPES:
        for dtype in ("float32", "float64"):
            x = _data(rng, shape, dtype, specials=bool(rng.integers(0, 2)))
            for dim in _dims(rng, len(shape)):
                at = {} if dim is None else {"dim": dim, "keepdim": bool(rng.integers(0, 2))}
                correction = int(rng.integers(0, 3))
                for name in ("var", "std", "var_mean", "std_mean"):
                    _agree(name, x, correction=correction, **at)
                if dim is not None:
                    _agree("var_mean", x, dim, unbiased=False, keepdim=at["keepdim"])
                if isinstance(dim, tuple | list):
                    continue
                interpolation = str(
                    rng.choice(["linear", "lower", "higher", "midpoint", "nearest"])
                )
                q = rng.choice([0.0, 0.3, 0.5, 1.0])
                q_tensor = np.array([0.25, q, 0.9], dtype=dtype)
                for name in ("quantile", "nanquantile"):
                    _agree(name, x, float(q), interpolation=interpolation, **at)
                    _agree(name, x, q_tensor, interpolation=interpolation, **at)


def test_selections_with_ties_agree_with_torch() -> None:
    rng = np.random.default_rng(5202)
    for shape in _SHAPES:
        for dtype in rng.permutation(["float32", "float64", "int64", "bool"])[:2].tolist():
            x = _data(rng, shape, dtype, specials=dtype == "float64")
            for dim in range(-len(shape), len(shape)):
                keepdim = bool(rng.integers(0, 2))
                for name in ("max", "min", "median", "nanmedian", "mode", "argmax", "argmin"):
                    _agree(name, x, dim, keepdim)
                for name in ("cummax", "cummin", "msort"):
                    _agree(name, *((x,) if name == "msort" else (x, dim)))
                _agree("sort", x, dim=dim, descending=bool(rng.integers(0, 2)), stable=True)
                _agree("argsort", x, dim=dim, descending=bool(rng.integers(0, 2)), stable=True)
                k = int(rng.integers(0, 4))
                _agree("topk", x, k, dim, bool(rng.integers(0, 2)))
                _agree("kthvalue", x, k, dim, keepdim)
            for name in ("max", "min", "median", "argmax", "argmin", "aminmax"):
                _agree(name, x)


def test_scans_and_sums_with_dtype_agree_with_torch() -> None:
    rng = np.random.default_rng(5203)
    for shape in _SHAPES[1:]:
        for dtype in rng.permutation(["float32", "float64", "int32", "uint8", "bool"])[:3].tolist():
            x = _data(rng, shape, dtype)
            for dim in range(-len(shape), len(shape)):
                into = f"dtype:{rng.choice(['float64', 'int64', 'float32'])}"
                for name in ("cumsum", "cumprod", "sum", "prod", "nansum"):
                    _agree(name, x, dim, dtype=into)
                _agree("cumsum", x, dim)
                _agree("logcumsumexp", x, dim)
                _agree("mean", x, dim, dtype="dtype:float64")
                edge = tuple(1 if i == dim % len(shape) else s for i, s in enumerate(shape))
                extra = _data(rng, edge, str(rng.choice(["float32", "int64", dtype])))
                _agree("diff", x, n=int(rng.integers(0, 3)), dim=dim, prepend=extra)
                _agree("diff", x, dim=dim, append=extra)
            for name in ("sum", "prod", "all", "any", "count_nonzero", "mean", "amax"):
                _agree(name, x)


def test_sets_and_bins_agree_with_torch() -> None:
    rng = np.random.default_rng(5204)
    for shape in ((0,), (5,), (2, 3), (3, 1, 2)):
        for dtype in ("float32", "float64", "int64", "uint8"):
            x = _data(rng, shape, dtype)
            for dim in (None, *range(len(shape))):
                _agree("unique", x, return_inverse=True, return_counts=True, dim=dim)
                _agree("unique_consecutive", x, return_inverse=True, return_counts=True, dim=dim)
            if dtype in ("int64", "uint8") and len(shape) == 1:
                weights = _data(rng, shape, str(rng.choice(["float32", "float64", "int64"])))
                _agree("bincount", x, minlength=int(rng.integers(0, 7)))
                _agree("bincount", x, weights=weights, minlength=int(rng.integers(0, 7)))
            if dtype.startswith("float"):
                low = float(rng.integers(-3, 1))
                _agree("histc", x, bins=int(rng.integers(1, 5)), min=low, max=low + 3.0)
                _agree("histc", x, bins=3)
            boundaries = np.sort(_data(rng, (5,), dtype))
            right = bool(rng.integers(0, 2))
            _agree("bucketize", x, boundaries, right=right, out_int32=bool(rng.integers(0, 2)))
            _agree("searchsorted", boundaries, x, side="right" if right else "left")
            shuffled = rng.permutation(boundaries)
            sorter = np.argsort(shuffled, kind="stable")
            _agree("searchsorted", shuffled, x, sorter=sorter, right=right)
            if len(shape) == 2:  # one sorted row per row of values
                _agree("searchsorted", np.sort(_data(rng, (2, 4), dtype), axis=1), x)


def test_refusals_agree_with_torch_and_leave_tensors_usable() -> None:
    rng = np.random.default_rng(5205)
    x = _data(rng, (2, 3), "float64")
    empty = np.zeros((2, 0), np.float64)
    for name in ("sum", "amax", "cumsum", "sort", "max", "median", "logsumexp", "std"):
        _agree(name, x, 2)
        _agree(name, x, -3)
    for name in ("amax", "amin", "max", "min", "argmax", "median", "mode", "kthvalue"):
        args = (1,) if name == "kthvalue" else ()
        _agree(name, empty, *args, dim=1)
        _agree(name, empty, *args, dim=0)
    for name in ("sum", "prod", "logsumexp", "mean", "all", "count_nonzero", "cumsum"):
        _agree(name, empty, 1)
    _agree("topk", x, 4, 1)
    _agree("kthvalue", x, 0, 1)
    _agree("kthvalue", x, 4, 1)
    _agree("quantile", x, np.array([0.5], np.float32))
    _agree("quantile", x, 1.5)
    _agree("quantile", x.astype(np.int64), 0.5)
    _agree("quantile", x, 0.5, interpolation="cubic")
    _agree("searchsorted", np.arange(3.0), x, sorter=np.arange(3, dtype=np.int32))
    _agree("searchsorted", np.arange(3.0), x, sorter=np.arange(2))
    _agree("bincount", np.array([-1, 2]))
    _agree("bincount", x)
    _agree("histc", x, bins=0)
    _agree("histc", x.astype(np.int64))
    _agree("unique", x, dim=2)
    _agree("diff", x, dim=0, prepend=np.zeros((3, 3)))


def _gradients_agree(what: str, data: np.ndarray, op: Any) -> None:
    x_t = torch.tensor(data, requires_grad=True)
    outs_t = op(torch, x_t)
    outs_t = [o for o in (outs_t if isinstance(outs_t, tuple) else (outs_t,))
              if o.dtype.is_floating_point]  # fmt: skip
    weights = [np.random.default_rng(len(what)).standard_normal(tuple(o.shape)) for o in outs_t]
    (grad_t,) = torch.autograd.grad(
        sum((o * torch.tensor(w)).sum() for o, w in zip(outs_t, weights, strict=True)), x_t
    )
    x_r = rg.tensor(data, requires_grad=True)
    outs_r = op(rg, x_r)
    outs_r = [o for o in (outs_r if isinstance(outs_r, tuple) else (outs_r,))
              if o.is_floating_point()]  # fmt: skip
    loss = sum((o * rg.tensor(w)).sum() for o, w in zip(outs_r, weights, strict=True))
    (grad_r,) = rg.autograd.grad(loss, x_r)
    np.testing.assert_allclose(grad_r.numpy(), grad_t.numpy(), atol=1e-9, err_msg=what)


_GRADIENT_OPS = {
    "amax": lambda lib, x, d: lib.amax(x, dim=d),
    "max": lambda lib, x, d: lib.max(x, d),
    "median": lambda lib, x, d: lib.median(x, d),
    "nanmedian": lambda lib, x, d: lib.nanmedian(x, d),
    "mode": lambda lib, x, d: lib.mode(x, d),
    "kthvalue": lambda lib, x, d: lib.kthvalue(x, 2, d),
    "topk": lambda lib, x, d: lib.topk(x, 2, d, largest=False),
    "sort": lambda lib, x, d: lib.sort(x, dim=d, stable=True),
    "cummax": lambda lib, x, d: lib.cummax(x, d),
    "cumprod": lambda lib, x, d: lib.cumprod(x, d),
    "logcumsumexp": lambda lib, x, d: lib.logcumsumexp(x, d),
    "logsumexp": lambda lib, x, d: lib.logsumexp(x, d),
    "prod": lambda lib, x, d: lib.prod(x, d),
    "std_mean": lambda lib, x, d: lib.std_mean(x, d),
    "var_mean": lambda lib, x, d: lib.var_mean(x, d, correction=0),
    "quantile": lambda lib, x, d: lib.quantile(x, 0.4, d, interpolation="midpoint"),
    "nanquantile": lambda lib, x, d: lib.nanquantile(x, 0.7, d),
    "diff": lambda lib, x, d: lib.diff(x, 2, d),
    "amin_all": lambda lib, x, d: lib.amin(x),
    "median_all": lambda lib, x, d: lib.median(x),
}


def test_float64_gradients_with_ties_agree_with_torch() -> None:
    rng = np.random.default_rng(5206)
    for name, op in _GRADIENT_OPS.items():
        for shape in ((4,), (3, 3)):
            data = rng.integers(-1, 2, shape).astype(np.float64)  # ties and zeros
            dim = int(rng.integers(-len(shape), len(shape)))
            _gradients_agree(
                f"{name} {shape} dim={dim}", data, lambda lib, x, op=op, dim=dim: op(lib, x, dim)
            )
