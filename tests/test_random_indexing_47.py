"""Random indexing programs against PyTorch, round 47.

Drawn keys mix the basic forms (ints, negative ints, slices with steps, ``None``, ``...``) with
the advanced ones the earlier rounds draw less: NumPy arrays and nested lists of several
dimensions that broadcast against int tensors, 0-d index tensors, empty index tensors, bool
masks of partial rank and Python bools. Each key is read (values, dtype, shape and the float64
gradient, duplicates included) and written (``x[key] = value`` with a broadcasting value, a
scalar or a value of another dtype, ``x[key] += v``, ``index_put_`` with ``accumulate``) on
inputs that are transposed or strided views, of float32, float64, int64, bool and complex64.
A second family draws the index functions (``index_select``, ``gather``, ``scatter*``,
``take``, ``take_along_dim``, ``put``, ``index_add/copy/fill``, ``masked_select/scatter``,
``nonzero``, ``argwhere``) on shapes with size-0 and size-1 dimensions. Where torch raises,
retrograd must raise a ``RetrogradError`` and leave its input usable.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "int64", "bool", "complex64"]


def _array(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype == "int64":
        return rng.integers(-5, 6, shape).astype(np.int64)
    if dtype == "complex64":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    return rng.standard_normal(shape).astype(dtype)


def _numpy(x) -> tuple[np.ndarray, str]:
    return x.detach().numpy().copy(), str(x.dtype).replace("torch.", "")


def _view(lib, t, how: str):
    """``t`` as the same values through a transposed or strided view."""
    if how == "transposed" and t.ndim >= 2:
        return t.transpose(0, 1).contiguous().transpose(0, 1)
    if how == "strided" and t.ndim >= 1:
        doubled = lib.cat([t, t], 0)
        return doubled[: t.shape[0]] if t.shape[0] else t
    return t


# -- drawing keys --------------------------------------------------------------------------------
def _draw_key(rng: np.random.Generator, shape: tuple[int, ...]) -> list:
    """A key for a tensor of ``shape`` as a list of parts: ("int", i), ("slice", s),
    ("none",), ("ellipsis",), ("tensor", array), ("numpy", array), ("list", nested list),
    ("mask", bool array covering some dims), ("bool", b). Advanced parts broadcast."""
    parts: list = []
    dim = 0
    used_ellipsis = False
    adv_shape = tuple(int(n) for n in rng.integers(1, 3, rng.integers(0, 3)))
    while dim < len(shape) and rng.random() < 0.8:
        size = shape[dim]
        kind = rng.choice(
            [
                "int",
                "slice",
                "none",
                "ellipsis",
                "tensor",
                "numpy",
                "list",
                "mask",
                "zerod",
                "empty",
                "bool",
            ]
        )
        if kind == "int" and size:
            parts.append(("int", int(rng.integers(-size, size))))
            dim += 1
        elif kind == "slice":
            step = int(rng.choice([1, 1, 2, 3]))
            start = int(rng.integers(-size - 1, size + 1)) if rng.random() < 0.5 else None
            stop = int(rng.integers(-size - 1, size + 2)) if rng.random() < 0.5 else None
            parts.append(("slice", slice(start, stop, step)))
            dim += 1
        elif kind == "none":
            parts.append(("none",))
        elif kind == "ellipsis" and not used_ellipsis:
            used_ellipsis = True
            skipped = int(rng.integers(0, len(shape) - dim + 1))
            parts.append(("ellipsis",))
            dim += skipped
        elif kind in ("tensor", "numpy", "list") and size:
            values = rng.integers(-size, size, adv_shape).astype(np.int64)
            parts.append((kind, values if kind != "list" else values.tolist()))
            dim += 1
        elif kind == "zerod" and size:
            parts.append(("tensor", np.array(rng.integers(-size, size), dtype=np.int64)))
            dim += 1
        elif kind == "empty":
            parts.append(("tensor", np.zeros((0,), np.int64)))
            dim += 1
        elif kind == "mask":
            rank = int(rng.integers(1, len(shape) - dim + 1))
            parts.append(("mask", rng.random(shape[dim : dim + rank]) > 0.4))
            dim += rank
        elif kind == "bool":
            parts.append(("bool", bool(rng.random() < 0.7)))
    return parts


def _key(lib, parts: list) -> tuple:
    out = []
    for part in parts:
        kind = part[0]
        if kind in ("int", "slice", "bool"):
            out.append(part[1])
        elif kind == "none":
            out.append(None)
        elif kind == "ellipsis":
            out.append(Ellipsis)
        elif kind in ("tensor", "mask"):
            out.append(lib.tensor(part[1]))
        else:  # numpy arrays and lists go in as they are
            out.append(part[1])
    return tuple(out)


def _describe(parts: list) -> str:
    return repr(
        [p if p[0] not in ("tensor", "numpy", "mask") else (p[0], p[1].tolist()) for p in parts]
    )


# -- running both libraries ----------------------------------------------------------------------
def _run(lib, program, operands: list, grad: bool):
    """``program``'s output, and the gradient of a weighted sum of it with respect to the first
    operand (float64 only), as NumPy; or the error it raised, and the first operand after it."""
    tensors = [lib.tensor(a) for a in operands]
    if grad:
        tensors[0].requires_grad_(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = program(lib, *tensors)
    except Exception as error:
        return None, error, tensors[0]
    result = {"out": _numpy(out)}
    if grad and out.requires_grad:
        weights = np.random.default_rng(47).standard_normal(tuple(out.shape))
        (g,) = lib.autograd.grad((out * lib.tensor(weights)).sum(), [tensors[0]], allow_unused=True)
        result["grad"] = _numpy(lib.zeros_like(tensors[0]) if g is None else g)
    return result, None, tensors[0]


def _compare(program, operands: list, what: str, grad: bool = False) -> None:
    expected, torch_error, _ = _run(torch, program, operands, grad)
    got, error, first = _run(rg, program, operands, grad)
    if torch_error is not None:
        assert error is not None, f"{what}: torch raised {torch_error!r}, retrograd returned"
        assert isinstance(error, rg.RetrogradError), f"{what}: {error!r} is no RetrogradError"
        # the input stays usable: read, and differentiated if it can be
        assert np.array_equal(first.detach().numpy(), operands[0]), what
        if first.requires_grad:
            (g,) = rg.autograd.grad((first * 2).sum(), [first])
            np.testing.assert_allclose(g.numpy(), 2.0, err_msg=what)
        return
    assert error is None, f"{what}: retrograd raised {error!r}, torch returned"
    for key, (want, want_dtype) in expected.items():
        have, have_dtype = got[key]
        assert have_dtype == want_dtype, f"{what} {key}: dtype {have_dtype}, torch {want_dtype}"
        assert have.shape == want.shape, f"{what} {key}: shape {have.shape}, torch {want.shape}"
        tol = 1e-5 if want_dtype in ("float32", "complex64") else 1e-10
        np.testing.assert_allclose(have, want, rtol=tol, atol=tol, err_msg=f"{what} {key}")


# -- family 1: reading and writing drawn keys ----------------------------------------------------
def _draw_value(rng: np.random.Generator, region: tuple[int, ...], dtype: str):
    """A value to write into a region of shape ``region``: a scalar, a tensor broadcasting to
    it (of the tensor's dtype or float32/int64), or one of a wrong shape."""
    kind = rng.choice(["scalar", "same", "broadcast", "other_dtype", "wrong"])
    if kind == "scalar":
        return ("scalar", 2 if dtype in ("int64", "bool") or rng.random() < 0.5 else 1.5)
    if kind == "broadcast" and region:
        return ("tensor", _array(rng, region[-1:], dtype))
    if kind == "other_dtype":
        return ("tensor", _array(rng, region, "float32" if dtype != "float32" else "int64"))
    if kind == "wrong":
        return ("tensor", _array(rng, (len(region) + 5,), dtype))
    return ("tensor", _array(rng, region, dtype))


def _write_program(parts: list, how: str, value, mode: str):
    def program(lib, x):
        y = _view(lib, x.clone(), how)
        y = y * 1 if y.requires_grad else y  # (a leaf is not written in place)
        key = _key(lib, parts)
        v = value[1] if value[0] == "scalar" else lib.tensor(value[1])
        if mode == "set":
            y[key] = v
        elif mode == "iadd":
            y[key] += v
        else:  # index_put_, tensors only, accumulating
            indices = tuple(k for k in key if isinstance(k, lib.Tensor))
            y.index_put_(indices, v if isinstance(v, lib.Tensor) else lib.tensor(v), True)
        return y

    return program


@pytest.mark.parametrize("seed", range(6))
def test_drawn_keys_match_torch(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(4700 + seed)
    for case in range(40):
        shape = tuple(int(n) for n in rng.integers(0, 4, rng.integers(1, 4)))
        shape = tuple(n if rng.random() < 0.85 else 1 for n in shape)
        dtype = str(rng.choice(DTYPES))
        x = _array(rng, shape, dtype)
        parts = _draw_key(rng, shape)
        how = str(rng.choice(["plain", "transposed", "strided"]))
        what = f"seed {seed} case {case}: {dtype}{list(shape)} {how} key {_describe(parts)}"
        grad = dtype == "float64"
        _compare(
            lambda lib, t, how=how, parts=parts: _view(lib, t, how)[_key(lib, parts)],
            [x],
            "read " + what,
            grad,
        )
        try:
            region = tuple(torch.tensor(x)[_key(torch, parts)].shape)
        except Exception:
            region = (1,)
        value = _draw_value(rng, region, dtype)
        mode = str(rng.choice(["set", "iadd", "index_put_acc"]))
        if mode == "index_put_acc" and not any(p[0] in ("tensor", "mask") for p in parts):
            mode = "set"
        if mode == "iadd" and dtype == "bool":
            mode = "set"
        _compare(_write_program(parts, how, value, mode), [x], f"{mode} {value[0]} " + what, grad)


# -- family 2: the index functions ---------------------------------------------------------------
def _draw_function(rng: np.random.Generator, shape: tuple[int, ...], dtype: str):
    """A program calling one index function on a tensor of ``shape``, and its extra operands."""
    ndim = len(shape)
    d = int(rng.integers(-ndim, ndim))
    n = shape[d]
    # an index past the end (not into an empty tensor, whose indices torch does not check)
    bad = rng.random() < 0.1 and 0 not in shape
    high = n + 2 if bad else max(n, 1)

    def ints(size) -> np.ndarray:
        if n or bad:
            return rng.integers(-n if bad else 0, high, size).astype(np.int64)
        return np.zeros(size, np.int64)

    along = list(shape)
    along[d] = int(rng.integers(0, 4)) if n else 0
    index = ints(tuple(along))
    name = str(
        rng.choice(
            [
                "index_select",
                "gather",
                "take_along_dim",
                "scatter",
                "scatter_value",
                "scatter_add",
                "scatter_reduce",
                "take",
                "put",
                "index_add",
                "index_copy",
                "index_fill",
                "masked_select",
                "masked_scatter",
                "nonzero",
                "nonzero_tuple",
                "argwhere",
            ]
        )
    )
    numeric = dtype != "bool"
    if name == "index_select":
        i = ints((int(rng.integers(0, 5)),))
        return name, lambda lib, t: t.index_select(d, lib.tensor(i)), []
    if name == "gather":
        return name, lambda lib, t: t.gather(d, lib.tensor(index)), []
    if name == "take_along_dim" and not bad:  # (torch's CPU kernel reads past the end)
        return name, lambda lib, t: lib.take_along_dim(t, lib.tensor(index), dim=d), []
    if name == "scatter":
        return (
            name,
            lambda lib, t, s: t.scatter(d, lib.tensor(index), s),
            [_array(rng, index.shape, dtype)],
        )
    if name == "scatter_value":
        return name, lambda lib, t: t.scatter(d, lib.tensor(index), 2), []
    if name == "scatter_add" and numeric:
        return (
            name,
            lambda lib, t, s: t.scatter_add(d, lib.tensor(index), s),
            [_array(rng, index.shape, dtype)],
        )
    if name == "scatter_reduce" and numeric and dtype != "complex64":
        reduce = str(rng.choice(["sum", "prod", "mean", "amax", "amin"]))
        include = bool(rng.random() < 0.5)
        source = _array(rng, index.shape, dtype)
        return (
            f"{name} {reduce} include_self={include}",
            lambda lib, t, s: t.scatter_reduce(
                d, lib.tensor(index), s, reduce, include_self=include
            ),
            [source],
        )
    flat = int(np.prod(shape))
    if name == "take":
        i = (
            rng.integers(-flat, flat + (2 if bad else 0), (2, 2)).astype(np.int64)
            if flat
            else np.zeros(0, np.int64)
        )
        return name, lambda lib, t: lib.take(t, lib.tensor(i)), []
    if name == "put" and flat:
        i = rng.integers(-flat, flat, (2, 2)).astype(np.int64)
        accumulate = numeric and bool(rng.random() < 0.5)
        return (
            name,
            lambda lib, t, s: t.put(lib.tensor(i), s, accumulate=accumulate),
            [_array(rng, (2, 2), dtype)],
        )
    if name in ("index_add", "index_copy", "index_fill") and n:
        i = rng.permutation(n)[: int(rng.integers(1, n + 1))].astype(np.int64)
        if name == "index_add" and numeric:
            i = np.concatenate([i, i[:1]])  # a duplicate, whose sources add up
        if bad:
            i[0] = n
        size = list(shape)
        size[d] = len(i)
        source = _array(rng, tuple(size), dtype)
        if name == "index_add" and numeric:
            return name, lambda lib, t, s: t.index_add(d, lib.tensor(i), s, alpha=2), [source]
        if name == "index_copy":
            return name, lambda lib, t, s: t.index_copy(d, lib.tensor(i), s), [source]
        return name, lambda lib, t: t.index_fill(d, lib.tensor(i), -1), []
    mask = rng.random(shape[int(rng.integers(0, ndim)) :]) > 0.5  # broadcast from the right
    if name == "masked_scatter":
        return (
            name,
            lambda lib, t, s: t.masked_scatter(lib.tensor(mask), s),
            [_array(rng, (flat + 1,), dtype)],
        )
    if name == "nonzero":
        return name, lambda lib, t: t.nonzero(), []
    if name == "nonzero_tuple":
        return (
            name,
            lambda lib, t: (
                lib.stack(t.nonzero(as_tuple=True)) if ndim else t.nonzero(as_tuple=True)[0]
            ),
            [],
        )
    if name == "argwhere":
        return name, lambda lib, t: lib.argwhere(t), []
    return "masked_select", lambda lib, t: t.masked_select(lib.tensor(mask)), []


@pytest.mark.parametrize("seed", range(6))
def test_index_functions_match_torch(seed: int) -> None:
    np.random.seed(seed)
    torch.manual_seed(seed)
    rng = np.random.default_rng(47000 + seed)
    for case in range(30):
        shape = tuple(int(rng.choice([0, 1, 2, 3, 4])) for _ in range(rng.integers(1, 4)))
        dtype = str(rng.choice(DTYPES))
        how = str(rng.choice(["plain", "transposed", "strided"]))
        name, function, extra = _draw_function(rng, shape, dtype)
        what = f"seed {seed} case {case}: {name} on {dtype}{list(shape)} {how}"

        def program(lib, t, *others, function=function, how=how):
            return function(lib, _view(lib, t, how), *others)

        _compare(program, [_array(rng, shape, dtype), *extra], what, grad=dtype == "float64")
