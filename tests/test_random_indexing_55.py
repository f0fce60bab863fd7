"""Random indexing, scatter/gather and selection programs against PyTorch, round 55.

What the earlier rounds (47's keys and index functions, 52's sorting and sets) draw little:

* index functions with index tensors of every integer dtype (int64, int32, int16, int8 and
  uint8), on int32, uint8 and bool inputs as well as floats: ``index_select``, ``gather``,
  ``take_along_dim``, ``scatter`` (a tensor, a number, ``reduce="add"``/``"multiply"``, a
  ``src`` larger than the index), ``scatter_add``, ``scatter_reduce`` and ``index_reduce``
  (every reduction, ``include_self`` both ways), ``index_add/copy/fill``, ``take``,
  ``put``/``put_`` (``accumulate``), ``index_put_``, with indices past the end now and then;
* keys mixing ints, slices, ``None`` and ``...`` with index tensors of those dtypes, NumPy
  arrays (int8/int16/int32/uint8) and lists, byte and bool masks, read and written
  (``x[key] = value`` and ``+=``) with a scalar, a broadcasting value, a one-element value or
  a value of another dtype;
* chains of two or three selections (sorts, ``topk``, ``kthvalue``, ``median``, ``cummax``,
  ``gather`` of an ``argsort``, scatters of gathered values, ``index_reduce`` of selected
  slices, ``put``, ``index_put_``, masked writes, ``where`` with number branches) on data with
  ties, differentiated in float64.

Each program runs in torch and in retrograd: the values, dtypes and shapes of what it returns
and the float64 gradients of a weighted sum of them must agree; where torch raises (in the
forward or in the backward), retrograd must raise a ``RetrogradError`` (an ``IndexError`` where
torch's is one) and leave its input unchanged and usable. The inner backend and the
checkpointing strategy are the suite's (``RETROGRAD_INNER``, ``RETROGRAD_CHECKPOINTING``).
Left out: ``index_copy``/``put``/``index_put_`` with repeated indices and no accumulation
(torch's order of writes is unspecified) and ``take_along_dim`` past the end (torch's CPU
kernel reads out of bounds).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

INDEX_DTYPES = ["int64", "int32", "int16", "int8", "uint8"]


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Data with ties (small integers) half the time."""
    if dtype == "bool":
        return np.asarray(rng.random(shape) > 0.5)
    if dtype == "uint8":
        return np.asarray(rng.integers(0, 4, shape).astype(dtype))
    if dtype.startswith("int"):
        return np.asarray(rng.integers(-3, 4, shape).astype(dtype))
    if dtype == "complex64":
        return np.asarray((rng.standard_normal(shape) + 1j).astype(dtype))
    if rng.random() < 0.5:
        return np.asarray(rng.integers(-2, 3, shape).astype(dtype))
    return np.asarray(rng.standard_normal(shape).astype(dtype))


# -- running both libraries ----------------------------------------------------------------------
def _flat(out) -> list:
    if isinstance(out, tuple | list):
        return [t for part in out for t in _flat(part)]
    return [out]


def _numpy(t) -> tuple[np.ndarray, str]:
    return t.detach().numpy().copy(), str(t.dtype).replace("torch.", "")


def _run(lib, program, operands: list, grad: bool):
    """``program``'s outputs and the float64 gradients of a weighted sum of them with respect
    to its float64 operands, as NumPy (``"backward"`` holding the error a backward raised);
    or the error the program raised. The operand tensors come back too."""
    tensors = [lib.tensor(a) for a in operands]
    if grad:
        for t in tensors:
            if t.dtype == lib.float64:
                t.requires_grad_(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            outs = _flat(program(lib, *tensors))
    except Exception as error:
        return None, error, tensors
    result: dict = {f"out{k}": _numpy(o) for k, o in enumerate(outs)}
    tracked = [o for o in outs if o.requires_grad]
    leaves = [t for t in tensors if t.requires_grad]
    if tracked and leaves:
        total = sum(
            (o * lib.tensor(np.random.default_rng(55 + k).standard_normal(tuple(o.shape)))).sum()
            for k, o in enumerate(tracked)
        )
        try:
            grads = lib.autograd.grad(total, leaves, allow_unused=True)
        except Exception as error:
            result["backward"] = error
            return result, None, tensors
        for k, (g, t) in enumerate(zip(grads, leaves)):
            result[f"grad{k}"] = _numpy(lib.zeros_like(t) if g is None else g)
    return result, None, tensors


def _check_refusal(what: str, torch_error: Exception, error: Exception | None) -> None:
    assert error is not None, f"{what}: torch raised {torch_error!r}, retrograd did not"
    assert isinstance(error, rg.RetrogradError), f"{what}: {error!r} is no RetrogradError"
    if isinstance(torch_error, IndexError):
        assert isinstance(error, IndexError), f"{what}: {error!r}, torch {torch_error!r}"
    assert str(error), what


def _compare(program, operands: list, what: str, grad: bool) -> None:
    expected, torch_error, _ = _run(torch, program, operands, grad)
    got, error, tensors = _run(rg, program, operands, grad)
    if torch_error is not None:
        _check_refusal(what, torch_error, error)
        first = tensors[0]
        assert np.array_equal(first.detach().numpy(), operands[0], equal_nan=True), what
        if first.requires_grad:  # still usable in a graph
            (g,) = rg.autograd.grad((first * 2).sum(), [first])
            np.testing.assert_array_equal(g.numpy(), 2.0, err_msg=what)
        return
    assert error is None, f"{what}: retrograd raised {error!r}, torch returned"
    if "backward" in expected:
        _check_refusal(what + " (backward)", expected["backward"], got.get("backward"))
        expected = {k: v for k, v in expected.items() if k != "backward"}
        got = {k: v for k, v in got.items() if k.startswith("out")}
    assert "backward" not in got, f"{what}: retrograd's backward raised {got['backward']!r}"
    assert set(got) == set(expected), f"{what}: {sorted(got)}, torch {sorted(expected)}"
    for key, (want, want_dtype) in expected.items():
        have, have_dtype = got[key]
        assert have_dtype == want_dtype, f"{what} {key}: dtype {have_dtype}, torch {want_dtype}"
        assert have.shape == want.shape, f"{what} {key}: shape {have.shape}, torch {want.shape}"
        tol = 1e-5 if want_dtype in ("float32", "complex64") else 1e-9
        np.testing.assert_allclose(have, want, rtol=tol, atol=tol, err_msg=f"{what} {key}")


# -- family 1: index functions with index tensors of every integer dtype -------------------------
FUNCTIONS = [
    "index_select",
    "gather",
    "take_along_dim",
    "scatter",
    "scatter_value",
    "scatter_keyword",
    "scatter_add",
    "scatter_reduce",
    "index_add",
    "index_copy",
    "index_fill",
    "index_reduce",
    "take",
    "put",
    "index_put_",
]


def _draw_function(rng: np.random.Generator, shape: tuple[int, ...], dtype: str):
    """``(description, program, extra operands)`` calling one index function."""
    ndim = len(shape)
    d = int(rng.integers(-ndim, ndim))
    n = shape[d]
    index_dtype = str(rng.choice(INDEX_DTYPES, p=[0.4, 0.25, 0.1, 0.1, 0.15]))
    bad = rng.random() < 0.1
    name = str(rng.choice(FUNCTIONS))

    def ints(size, low: int) -> np.ndarray:
        low = 0 if index_dtype == "uint8" else low
        return rng.integers(low, n + (2 if bad else 0), size).astype(index_dtype)

    along = list(shape)
    along[d] = int(rng.integers(1, 4))
    along = tuple(along)
    what = f"{name} dim {d} {index_dtype} index"
    if name == "index_select":
        i = ints((int(rng.integers(0, 5)),), 0)
        return f"{what} {i.tolist()}", lambda lib, t: t.index_select(d, lib.tensor(i)), []
    if name == "gather":
        i = ints(along, 0)
        return f"{what} {i.tolist()}", lambda lib, t: t.gather(d, lib.tensor(i)), []
    if name == "take_along_dim":
        i = ints(along, -n).clip(-n, n - 1).astype(index_dtype)  # (never past the end)
        program = lambda lib, t: lib.take_along_dim(t, lib.tensor(i), dim=d)  # noqa: E731
        return f"{what} {i.tolist()}", program, []
    if name.startswith("scatter"):
        # a src larger than the index along dim (its leading part is read): one that does not
        # broadcast against the index (where it does, torch's prod backward gives the unread
        # part a gradient of its broadcast formula; ours gives it none)
        larger = rng.random() < 0.2
        if larger:
            along = tuple(max(k, 2) if j == d % ndim else k for j, k in enumerate(along))
        i = ints(along, 0)
        src = _array(
            rng, tuple(k + int(larger and j == d % ndim) for j, k in enumerate(along)), dtype
        )
        what = f"{what} {i.tolist()} src {list(src.shape)}"
        if name == "scatter":
            return what, lambda lib, t, s: t.scatter(d, lib.tensor(i), s), [src]
        if name == "scatter_value":
            value = 1.5 if dtype.startswith("float") else 2
            return f"{what} {value}", lambda lib, t: t.scatter(d, lib.tensor(i), value), []
        if name == "scatter_keyword":
            reduce = str(rng.choice(["add", "multiply"]))

            def keyword(lib, t, s):
                return (t * 1 if t.requires_grad else t.clone()).scatter_(
                    d, lib.tensor(i), s, reduce=reduce
                )

            return f"{what} reduce={reduce}", keyword, [src]
        if name == "scatter_add":
            return what, lambda lib, t, s: t.scatter_add(d, lib.tensor(i), s), [src]
        reduce = str(rng.choice(["sum", "prod", "mean", "amax", "amin"]))
        include = bool(rng.random() < 0.5)

        def reduced(lib, t, s):
            return t.scatter_reduce(d, lib.tensor(i), s, reduce, include_self=include)

        return f"{what} {reduce} include_self={include}", reduced, [src]
    if name.startswith("index_"):
        i = ints((int(rng.integers(1, n + 2)),), -n)
        if name == "index_copy" and not bad:  # (no repeats: torch's order is unspecified)
            i = rng.permutation(n)[: int(rng.integers(1, n + 1))].astype(index_dtype)
        if name == "index_put_":
            d, n = 0, shape[0]
            i = ints((3,), -n)
            accumulate = bool(rng.random() < 0.5)
            if not accumulate and not bad:
                i = rng.permutation(n)[: min(3, n)].astype(index_dtype)
            value = _array(rng, shape[1:] if rng.random() < 0.5 else (len(i), *shape[1:]), dtype)

            def put_rows(lib, t, v):
                y = t * 1 if t.requires_grad else t.clone()
                return y.index_put_((lib.tensor(i),), v, accumulate=accumulate)

            return f"{what} {i.tolist()} accumulate={accumulate}", put_rows, [value]
        region = list(shape)
        region[d] = len(i)
        src = _array(rng, tuple(region), dtype)
        what = f"{what} {i.tolist()}"
        if name == "index_add":
            alpha = int(rng.choice([1, 2]))
            return what, lambda lib, t, s: t.index_add(d, lib.tensor(i), s, alpha=alpha), [src]
        if name == "index_copy":
            return what, lambda lib, t, s: t.index_copy(d, lib.tensor(i), s), [src]
        if name == "index_fill":
            value = -1 if rng.random() < 0.5 else 2.5
            return f"{what} {value}", lambda lib, t: t.index_fill(d, lib.tensor(i), value), []
        reduce = str(rng.choice(["prod", "mean", "amax", "amin"]))
        include = bool(rng.random() < 0.5)

        def index_reduced(lib, t, s):
            return t.index_reduce(d, lib.tensor(i), s, reduce, include_self=include)

        return f"{what} {reduce} include_self={include}", index_reduced, [src]
    flat = int(np.prod(shape))
    low = 0 if index_dtype == "uint8" else -flat
    i = rng.integers(low, flat + (2 if bad else 0), (3,)).astype(index_dtype)
    if name == "take":
        return f"take {index_dtype} {i.tolist()}", lambda lib, t: lib.take(t, lib.tensor(i)), []
    accumulate = bool(rng.random() < 0.5)
    if not accumulate and not bad:
        i = rng.permutation(flat)[: min(3, flat)].astype(index_dtype)
    src = _array(rng, (len(i),), dtype)
    return (
        f"put {index_dtype} {i.tolist()} accumulate={accumulate}",
        lambda lib, t, s: t.put(lib.tensor(i), s, accumulate=accumulate),
        [src],
    )


@pytest.mark.parametrize("seed", range(4))
def test_index_functions_with_every_index_dtype(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(5500 + seed)
    for case in range(40):
        shape = tuple(int(n) for n in rng.integers(1, 4, rng.integers(1, 4)))
        dtype = str(rng.choice(["float64", "float32", "int64", "int32", "uint8", "bool"]))
        name, program, extra = _draw_function(rng, shape, dtype)
        what = f"seed {seed} case {case}: {name} on {dtype}{list(shape)}"
        _compare(program, [_array(rng, shape, dtype), *extra], what, dtype == "float64")


# -- family 2: keys with index tensors, arrays and masks of several dtypes ------------------------
def _draw_key(rng: np.random.Generator, shape: tuple[int, ...]) -> list:
    """A key as parts: ("int", i), ("slice", s), ("none",), ("ellipsis",), (kind, array) with
    kind an index dtype ("int64"... a tensor), "np_<dtype>" (a NumPy array), "list", "byte"
    (a uint8 mask tensor), "np_byte" (a uint8 array) or "mask" (a bool mask of some dims)."""
    parts: list = []
    dim = 0
    used_ellipsis = False
    broadcast = tuple(int(n) for n in rng.integers(1, 3, rng.integers(0, 3)))
    while dim < len(shape) and rng.random() < 0.85:
        n = shape[dim]
        kind = str(rng.choice(["int", "slice", "none", "ellipsis", "adv", "adv", "adv", "mask"]))
        if kind == "int":
            parts.append(("int", int(rng.integers(-n, n))))
            dim += 1
        elif kind == "slice":
            start = int(rng.integers(-n - 1, n + 1)) if rng.random() < 0.5 else None
            parts.append(("slice", slice(start, None, int(rng.choice([1, 2])))))
            dim += 1
        elif kind == "none":
            parts.append(("none",))
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            parts.append(("ellipsis",))
            dim += int(rng.integers(0, len(shape) - dim + 1))
        elif kind == "adv":
            form = str(
                rng.choice(["int64", "int32", "int16", "list", "np_int8", "np_int32", "byte"])
            )
            if form == "byte":
                form = str(rng.choice(["byte", "np_byte"]))
                parts.append((form, (rng.random((n,)) > 0.5).astype(np.uint8)))
            else:
                high = n + (2 if rng.random() < 0.05 else 0)
                parts.append((form, rng.integers(-n, high, broadcast)))
            dim += 1
        elif kind == "mask":
            rank = int(rng.integers(1, len(shape) - dim + 1))
            parts.append(("mask", rng.random(shape[dim : dim + rank]) > 0.4))
            dim += rank
    return parts


def _key(lib, parts: list) -> tuple:
    out: list = []
    for part in parts:
        kind = part[0]
        if kind in ("int", "slice"):
            out.append(part[1])
        elif kind == "none":
            out.append(None)
        elif kind == "ellipsis":
            out.append(Ellipsis)
        elif kind in ("mask", "byte"):
            out.append(lib.tensor(part[1]))
        elif kind == "np_byte":
            out.append(part[1])
        elif kind == "list":
            out.append(part[1].tolist())
        elif kind.startswith("np_"):
            out.append(part[1].astype(kind[3:]))
        else:
            out.append(lib.tensor(part[1].astype(kind)))
    return tuple(out)


def _describe(parts: list) -> str:
    return repr([(p[0], p[1].tolist()) if isinstance(p[-1], np.ndarray) else p for p in parts])


def _draw_value(rng: np.random.Generator, region: tuple[int, ...], dtype: str):
    kind = str(rng.choice(["scalar", "same", "broadcast", "one", "other_dtype"]))
    if kind == "scalar":
        return kind, [1, 2.5, True, -1][int(rng.integers(0, 4))]
    if kind == "broadcast" and region:
        return kind, _array(rng, region[-1:], dtype)
    if kind == "one":
        return kind, _array(rng, (1,) * int(rng.integers(0, 3)), dtype)
    if kind == "other_dtype":
        other = str(rng.choice(["float32", "float64", "int64", "int32", "bool", "complex64"]))
        return f"{kind} {other}", _array(rng, region, other)
    return kind, _array(rng, region, dtype)


@pytest.mark.parametrize("seed", range(4))
def test_keys_of_mixed_index_dtypes_read_and_written(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(55000 + seed)
    for case in range(40):
        shape = tuple(int(n) for n in rng.integers(1, 4, rng.integers(1, 4)))
        dtype = str(rng.choice(["float64", "float32", "int64", "int32", "bool", "uint8"]))
        x = _array(rng, shape, dtype)
        parts = _draw_key(rng, shape)
        what = f"seed {seed} case {case}: {dtype}{list(shape)} key {_describe(parts)}"
        grad = dtype == "float64"
        _compare(lambda lib, t, parts=parts: t[_key(lib, parts)], [x], "read " + what, grad)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                region = tuple(torch.tensor(x)[_key(torch, parts)].shape)
        except Exception:
            region = (1,)
        kind, value = _draw_value(rng, region, dtype)
        mode = "set" if dtype == "bool" or rng.random() < 0.6 else "iadd"

        def write(lib, t, *given, parts=parts, value=value, mode=mode):
            y = t * 1 if t.requires_grad else t.clone()
            v = given[0] if given else value
            if mode == "set":
                y[_key(lib, parts)] = v
            else:
                y[_key(lib, parts)] += v
            return y

        operands = [x, value] if isinstance(value, np.ndarray) else [x]
        _compare(write, operands, f"{mode} {kind} {what}", grad)


# -- family 3: chains of selections, differentiated ----------------------------------------------
def _draw_step(rng: np.random.Generator, shape: tuple[int, ...]):
    """``(description, step)``: one selection applied to a float64 tensor of ``shape``."""
    ndim = len(shape)
    d = int(rng.integers(0, ndim))
    n = shape[d]
    kind = str(
        rng.choice(
            [
                "take",
                "mask",
                "sort",
                "topk",
                "kthvalue",
                "median",
                "cummax",
                "argsort_gather",
                "gather",
                "scatter",
                "index",
                "put",
                "index_put_",
                "setitem",
                "where",
                "masked_scatter",
            ]
        )
    )
    if kind == "take":
        i = rng.integers(-n, n, (int(rng.integers(1, 4)),))
        key = (slice(None),) * d + (i.tolist(),)
        return f"[{key}]", lambda lib, t: t[key]
    if kind == "mask":
        m = rng.random(shape[:1]) > 0.3
        m[0] = True
        return f"[mask {m.tolist()}]", lambda lib, t: t[lib.tensor(m)]
    if kind == "sort":
        descending = bool(rng.random() < 0.5)
        return f"sort({d}, {descending})", lambda lib, t: t.sort(
            dim=d, descending=descending, stable=True
        )[0]
    if kind == "topk":
        k = int(rng.integers(1, n + 1))
        largest = bool(rng.random() < 0.5)
        return f"topk({k}, {d}, {largest})", lambda lib, t: t.topk(k, dim=d, largest=largest)[0]
    if kind == "kthvalue":
        k = int(rng.integers(1, n + 1))
        return f"kthvalue({k}, {d})", lambda lib, t: t.kthvalue(k, dim=d, keepdim=True)[0]
    if kind == "median":
        return f"median({d})", lambda lib, t: t.median(dim=d, keepdim=True)[0]
    if kind == "cummax":
        return f"cummax({d})", lambda lib, t: t.cummax(dim=d)[0]
    if kind == "argsort_gather":
        return f"gather argsort({d})", lambda lib, t: t.gather(d, t.argsort(dim=d, stable=True))
    if kind == "gather":
        along = list(shape)
        along[d] = int(rng.integers(1, 4))
        i = rng.integers(-n, n, along)
        return f"take_along_dim({i.tolist()}, {d})", lambda lib, t: lib.take_along_dim(
            t, lib.tensor(i), dim=d
        )
    if kind == "scatter":
        along = list(shape)
        along[d] = int(rng.integers(1, 4))
        i = rng.integers(0, n, along)
        reduce = str(rng.choice(["add", "assign", "sum", "mean", "amax", "amin", "prod"]))
        include = bool(rng.random() < 0.5)

        def scattered(lib, t):
            index = lib.tensor(i)
            src = t.gather(d, index) * 2 + 1
            if reduce == "add":
                return t.scatter_add(d, index, src)
            if reduce == "assign":
                return t.scatter(d, index, src)
            return t.scatter_reduce(d, index, src, reduce, include_self=include)

        return f"scatter {reduce} {include} {i.tolist()} at {d}", scattered
    if kind == "index":
        i = rng.integers(0, n, (int(rng.integers(1, 4)),))
        how = str(rng.choice(["add", "copy", "fill", "prod", "mean", "amax", "amin"]))
        include = bool(rng.random() < 0.5)
        if how == "copy":
            i = rng.permutation(n)[: int(rng.integers(1, n + 1))]

        def indexed(lib, t):
            index = lib.tensor(i, dtype=lib.int32 if how == "add" else lib.int64)
            src = t.index_select(d, index).flip(d) * 3
            if how == "add":
                return t.index_add(d, index, src, alpha=0.5)
            if how == "copy":
                return t.index_copy(d, index, src)
            if how == "fill":
                return t.index_fill(d, index, -2.0)
            return t.index_reduce(d, index, src, how, include_self=include)

        return f"index_{how} {include} {i.tolist()} at {d}", indexed
    flat = int(np.prod(shape))
    if kind == "put":
        accumulate = bool(rng.random() < 0.5)
        i = rng.integers(-flat, flat, (min(3, flat),)) if accumulate else rng.permutation(flat)[:3]
        return f"put {i.tolist()} {accumulate}", lambda lib, t: t.put(
            lib.tensor(i), t.reshape(-1)[: len(i)].exp(), accumulate=accumulate
        )
    if kind == "index_put_":
        accumulate = bool(rng.random() < 0.5)
        rows = shape[0]
        i = rng.integers(-rows, rows, (2,)) if accumulate else rng.permutation(rows)[:2]

        def put_rows(lib, t):
            y = t * 1
            return y.index_put_((lib.tensor(i),), t[0].sin(), accumulate=accumulate)

        return f"index_put_ {i.tolist()} {accumulate}", put_rows
    if kind == "setitem":
        i = rng.integers(-n, n, (2,))
        how = str(rng.choice(["scalar", "row", "same"]))

        def written(lib, t):
            y = t * 1
            key = (slice(None),) * d + (lib.tensor(i, dtype=lib.int32),)
            if how == "scalar":
                y[key] = 0.5
            elif how == "row":
                y[key] = t[key][..., -1:].cos()
            else:
                y[key] = t[key] * t[key]
            return y

        return f"setitem {how} {i.tolist()} at {d}", written
    m = rng.random(shape) > 0.5
    if kind == "where":
        number = [0.5, 2, -1.5][int(rng.integers(0, 3))]
        return (
            f"where {number}",
            lambda lib, t: (
                lib.where(lib.tensor(m), t, number) * lib.where(lib.tensor(~m), t.exp(), t)
            ),
        )
    return "masked_scatter", lambda lib, t: t.masked_scatter(lib.tensor(m), t.flip(0) * 2)


@pytest.mark.parametrize("seed", range(3))
def test_chains_of_selections_differentiated(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(550000 + seed)
    for case in range(30):
        shape = tuple(int(n) for n in rng.integers(1, 4, rng.integers(1, 4)))
        x = (
            rng.integers(-2, 3, shape).astype(np.float64)  # ties
            if rng.random() < 0.5
            else rng.standard_normal(shape)
        )
        steps, names = [], []
        current = torch.tensor(x)
        for _ in range(int(rng.integers(1, 4))):
            name, step = _draw_step(rng, tuple(current.shape))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                current = step(torch, current)
            steps.append(step)
            names.append(name)
            if current.ndim == 0 or current.numel() == 0:
                break

        def program(lib, t, steps=steps):
            for step in steps:
                t = step(lib, t)
            return t

        _compare(program, [x], f"seed {seed} case {case}: {names} on {list(shape)}", True)
