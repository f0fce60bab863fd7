"""Random programs of views, aliasing and in-place writes against PyTorch, round 61.

What the earlier rounds (38's and 42's views written in place, 47's and 55's keys) draw little:
programs that run in lockstep on twin tensors, torch's and retrograd's, and after every step
compare *every* tensor taken so far (each alias of the storage written, and values computed
from them): values, shapes, dtypes, strides, ``is_contiguous()``, ``requires_grad`` and
``is_leaf``, and whether an op returned its input. A step is

* a view: ``view``/``reshape`` to a random factorization, ``flatten``, ``unflatten``,
  ``transpose`` (the same dimension twice too), ``permute``, ``mT``, ``t()``, ``movedim``,
  ``expand`` (to the same shape too), ``narrow``, ``select``, slices with steps, ``None`` and
  ``...``, ``unbind``/``split``/``chunk`` pieces, ``diagonal``, ``squeeze``/``unsqueeze``,
  ``unfold``, ``as_strided``, ``detach()``;
* an in-place write: arithmetic with broadcasting operands and ``alpha``, ``div_`` with
  ``rounding_mode``, ``clamp_`` (numbers and a tensor bound), ``pow_``, ``lerp_``,
  ``addcmul_``, ``copy_`` from other dtypes, ``fill_``/``zero_``, ``masked_fill_``,
  ``index_add_``/``index_copy_``/``index_fill_``, ``scatter_``/``scatter_add_``/
  ``scatter_reduce_``, ``put_``, ``t[key] = v`` and ``t[key] += v`` with ints, slices, lists,
  ``None``, ``...`` and masks, ``out=``, and the in-place shape ops ``t_``/``transpose_``/
  ``squeeze_``/``unsqueeze_``;
* a value computed from a tensor (saved for backward, so a later write must not change it);

on a leaf that requires grad, a tensor computed from one, or a tensor outside the graph; then
the float64 gradient of a weighted sum of every tensor. A second family writes into tensors of
every dtype (int, bool, float32) with operands of every dtype, through ``.data``, under
``no_grad``, after ``requires_grad_()``/``detach()``. Where torch raises, retrograd must raise
a ``RetrogradError`` (a ``RuntimeError`` where torch's refusal is about memory layout or an
in-place result's dtype) and leave every tensor as it was.

The contract's differences from torch, left alone here: ``detach()`` of a leaf that requires
grad requires grad (Burn's rule, API.md section 3); a value saved for backward is never
modified, so torch's "modified by an inplace operation" never arises (API.md section 10); a
write through overlapping unfold/as_strided windows, which torch makes in an order it leaves
open, is refused; and torch's refusal to *use* a ``split``/``unbind`` piece once its base was
written (retrograd uses its current value).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

#: torch's refusals the contract lets retrograd compute (module docstring)
VERSION_ERROR = "modified by an inplace operation"
STALE_PIECE = "its base or another view of its base has been modified"
#: retrograd's refusal of a write torch makes in an order it leaves open
OVERLAP_REFUSAL = "single memory location"
#: torch's RuntimeErrors that retrograd raises as RuntimeErrors too
RUNTIME_REFUSALS = ("can't be cast", "single memory location", "view size is not compatible")


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


def _np(t) -> np.ndarray:
    return t.detach().numpy().copy()


def _dtype(t) -> str:
    return str(t.dtype).replace("torch.", "").replace("retrograd.", "")


def _check_refusal(log: list[str], torch_error: Exception, error: Exception | None) -> None:
    where = "\n".join(log)
    if error is None:
        raise Mismatch(f"{where}\ntorch raised {torch_error!r}, retrograd did not")
    if not isinstance(error, rg.RetrogradError):
        raise Mismatch(f"{where}\n{error!r} is no RetrogradError (torch: {torch_error!r})")
    for cls in (IndexError, TypeError):
        if isinstance(torch_error, cls) and not isinstance(error, cls):
            raise Mismatch(f"{where}\n{error!r}, torch {torch_error!r}")
    text = str(torch_error)
    if any(part in text for part in RUNTIME_REFUSALS) and not isinstance(error, RuntimeError):
        raise Mismatch(f"{where}\n{error!r} is no RuntimeError, as torch's {torch_error!r}")


# -- drawing views ---------------------------------------------------------------------------
def _factorization(rng: np.random.Generator, n: int) -> tuple[int, ...]:
    dims: list[int] = []
    rest = n
    while rest > 1 and len(dims) < 3:
        d = int(rng.choice([k for k in range(2, rest + 1) if rest % k == 0]))
        dims.append(d)
        rest //= d
    if rest > 1:
        dims.append(rest)
    if n == 0:
        dims = [0]
    if dims and rng.random() < 0.3:
        dims[int(rng.integers(len(dims)))] = -1
    return tuple(dims)


def _whole(lib, t):
    return t.view(-1)


def _draw_view(rng: np.random.Generator, shape: tuple[int, ...]):
    """``(description, view(lib, t))``."""
    nd = len(shape)
    kinds = ["view", "reshape", "flatten", "unsqueeze", "detach", "slice", "expand", "movedim"]
    if nd:
        kinds += ["narrow", "select", "unbind", "split", "chunk", "squeeze", "unfold", "none"]
    if nd >= 2:
        kinds += ["transpose", "permute", "mT", "diagonal", "unflatten"]
    if nd == 2:
        kinds.append("t")
    kinds.append("as_strided")
    kind = str(rng.choice(kinds))
    if kind in ("view", "reshape"):
        new = _factorization(rng, int(np.prod(shape)))
        return f"{kind}{new}", lambda lib, t: getattr(t, kind)(new)
    if kind == "flatten":
        if not nd:
            return "flatten()", lambda lib, t: t.flatten()
        s = int(rng.integers(nd))
        e = int(rng.integers(s, nd))
        return f"flatten({s}, {e})", lambda lib, t: t.flatten(s, e)
    if kind == "unsqueeze":
        d = int(rng.integers(-nd - 1, nd + 1))
        return f"unsqueeze({d})", lambda lib, t: t.unsqueeze(d)
    if kind == "detach":
        return "detach()", lambda lib, t: t.detach()
    if kind == "movedim":
        if not nd:
            return "view(-1)", _whole
        a, b = (int(v) for v in rng.integers(nd, size=2))
        return f"movedim({a}, {b})", lambda lib, t: t.movedim(a, b)
    if kind == "slice":
        if not nd:
            return "[...]", lambda lib, t: t[...]
        key: list = []
        for s in shape:
            if rng.random() < 0.3:
                key.append(slice(None))
            else:
                a = int(rng.integers(-s - 1, s + 1))
                b = int(rng.integers(-s - 1, s + 2))
                step = int(rng.integers(1, 4))
                key.append(slice(a if rng.random() < 0.7 else None, b, step))
        if rng.random() < 0.3:
            key = key[: int(rng.integers(1, nd + 1))]
            if rng.random() < 0.5:
                key = [Ellipsis, *key[1:]]
        k = tuple(key)
        return f"[{k}]", lambda lib, t: t[k]
    if kind == "none":
        d = int(rng.integers(nd + 1))
        k = (slice(None),) * d + (None,)
        if rng.random() < 0.5 and shape[0]:
            k = (None, int(rng.integers(shape[0])))
        return f"[{k}]", lambda lib, t: t[k]
    if kind == "expand":
        new = tuple(3 if s == 1 and rng.random() < 0.7 else s for s in shape)
        if rng.random() < 0.5 or not new:  # (``expand()`` with no size: torch's TypeError)
            new = (2, *new)
        return f"expand{new}", lambda lib, t: t.expand(*new)
    if kind == "narrow":
        d = int(rng.integers(nd))
        start = int(rng.integers(0, shape[d] + 1))
        length = int(rng.integers(0, shape[d] - start + 1))
        return f"narrow({d}, {start}, {length})", lambda lib, t: t.narrow(d, start, length)
    if kind in ("select", "unbind", "split", "chunk"):
        d = int(rng.integers(nd))
        if not shape[d]:
            return "view(-1)", _whole
        if kind == "select":
            i = int(rng.integers(-shape[d], shape[d]))
            return f"select({d}, {i})", lambda lib, t: t.select(d, i)
        if kind == "unbind":
            i = int(rng.integers(shape[d]))
            return f"unbind({d})[{i}]", lambda lib, t: t.unbind(d)[i]
        k = int(rng.integers(1, shape[d] + 1))
        step = k if kind == "split" else -(-shape[d] // k)  # (chunk: k pieces of ceil(n / k))
        pieces = len(range(0, shape[d], step))
        i = int(rng.integers(pieces))
        return f"{kind}({k}, {d})[{i}]", lambda lib, t: getattr(t, kind)(k, d)[i]
    if kind == "squeeze":
        if rng.random() < 0.3:
            return "squeeze()", lambda lib, t: t.squeeze()
        d = int(rng.integers(nd))
        return f"squeeze({d})", lambda lib, t: t.squeeze(d)
    if kind == "unfold":
        d = int(rng.integers(nd))
        size = int(rng.integers(0, shape[d] + 1))
        step = int(rng.integers(1, 3))
        return f"unfold({d}, {size}, {step})", lambda lib, t: t.unfold(d, size, step)
    if kind == "transpose":
        a, b = (int(v) for v in rng.integers(-nd, nd, size=2))
        return f"transpose({a}, {b})", lambda lib, t: t.transpose(a, b)
    if kind == "permute":
        order = tuple(int(v) for v in rng.permutation(nd))
        return f"permute{order}", lambda lib, t: t.permute(*order)
    if kind == "mT":
        return "mT", lambda lib, t: t.mT
    if kind == "t":
        return "t()", lambda lib, t: t.t()
    if kind == "diagonal":
        a, b = (int(v) for v in rng.choice(nd, 2, replace=False))
        offset = int(rng.integers(-2, 3))
        return f"diagonal({offset}, {a}, {b})", lambda lib, t: t.diagonal(offset, a, b)
    if kind == "unflatten":
        d = int(rng.integers(nd))
        size = shape[d]
        k = int(rng.choice([k for k in range(1, size + 1) if size % k == 0] or [1]))
        sizes = (k, -1) if size else (1, 0)
        return f"unflatten({d}, {sizes})", lambda lib, t: t.unflatten(d, sizes)
    n = int(np.prod(shape))  # as_strided, within a contiguous copy's elements
    if n < 2:
        return "view(-1)", _whole
    size = (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
    stride = (int(rng.integers(0, 3)), 1)
    if (size[0] - 1) * stride[0] + size[1] - 1 >= n:
        size = (1, 1)
    return f"contiguous().as_strided{size}{stride}", lambda lib, t: t.contiguous().as_strided(
        size, stride
    )


# -- drawing writes --------------------------------------------------------------------------
def _values(rng: np.random.Generator, shape: tuple[int, ...], low=-2.0, high=2.0) -> np.ndarray:
    return np.round(rng.uniform(low, high, shape), 2)


def _broadcasting(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple[int, ...]:
    small = tuple(1 if rng.random() < 0.3 else s for s in shape)
    return small[int(rng.integers(0, len(shape) + 1)) :] if rng.random() < 0.3 else small


def _draw_key(rng: np.random.Generator, shape: tuple[int, ...]) -> tuple:
    if not shape:
        return (Ellipsis,)
    if rng.random() < 0.15:
        return (rng.random(shape) < 0.5,)  # a mask
    key: list = []
    for s in shape:
        r = rng.random()
        if r < 0.4 or not s:
            key.append(slice(None))
        elif r < 0.6:
            key.append(int(rng.integers(-s, s)))
        elif r < 0.75 and not any(isinstance(k, list) for k in key):
            key.append([int(v) for v in rng.choice(s, min(s, 2), replace=False)])
        elif r < 0.85:
            key += [None, slice(None)]
        else:
            key.append(slice(int(rng.integers(0, s)), None, int(rng.integers(1, 3))))
    if rng.random() < 0.2:
        key = [Ellipsis, *key[1:]]
    return tuple(key)


def _lib_key(lib, key: tuple) -> tuple:
    return tuple(lib.tensor(k) if isinstance(k, np.ndarray) else k for k in key)


def _draw_write(rng: np.random.Generator, shape: tuple[int, ...]):
    """``(description, write(lib, t))``."""
    nd = len(shape)
    kinds = ["add_", "sub_", "mul_", "div_", "clamp_", "clamp_tensor", "pow_", "copy_",
             "copy_cast", "fill_", "zero_", "masked_fill_", "setitem", "iadd_key", "out",
             "neg_", "sigmoid_", "lerp_", "addcmul_"]  # fmt: skip
    if nd:
        kinds += ["index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_add_",
                  "scatter_reduce_", "put_", "squeeze_", "unsqueeze_"]  # fmt: skip
    if nd >= 2:
        kinds.append("transpose_")
    if nd == 2:
        kinds.append("t_")
    kind = str(rng.choice(kinds))
    small = _broadcasting(rng, shape)
    operand = _values(rng, small)
    if kind in ("add_", "sub_", "mul_"):
        alpha = 0.5 if kind != "mul_" and rng.random() < 0.3 else None
        number = rng.random() < 0.2
        extra = {} if alpha is None else {"alpha": alpha}

        def arithmetic(lib, t):
            return getattr(t, kind)(1.5 if number else lib.tensor(operand), **extra)

        return f"{kind}({'1.5' if number else small}, {extra})", arithmetic
    if kind == "div_":
        divisor = _values(rng, small, 0.5, 2.0) * np.where(rng.random(small) < 0.5, -1, 1)
        mode = rng.choice([None, "floor", "trunc"])
        mode = None if mode is None else str(mode)
        return f"div_({small}, rounding_mode={mode})", lambda lib, t: t.div_(
            lib.tensor(divisor), rounding_mode=mode
        )
    if kind == "clamp_":
        low, high = float(rng.uniform(-1, 0)), float(rng.uniform(0, 1))
        return f"clamp_({low}, {high})", lambda lib, t: t.clamp_(low, high)
    if kind == "clamp_tensor":
        bound = _values(rng, small, -1.0, 0.0)
        return f"clamp_(min={small})", lambda lib, t: t.clamp_(min=lib.tensor(bound))
    if kind == "pow_":
        return "pow_(2)", lambda lib, t: t.pow_(2)
    if kind == "copy_":
        return f"copy_({small})", lambda lib, t: t.copy_(lib.tensor(operand))
    if kind == "copy_cast":
        dtype = str(rng.choice(["float32", "int64", "int32", "bool"]))
        source = operand > 0 if dtype == "bool" else (operand * 2).astype(dtype)
        return f"copy_({small} {dtype})", lambda lib, t: t.copy_(lib.tensor(source))
    if kind == "fill_":
        value = float(rng.choice([0.5, -2.0, 3.0]))
        if rng.random() < 0.3:
            return f"fill_(tensor({value}))", lambda lib, t: t.fill_(lib.tensor(value))
        return f"fill_({value})", lambda lib, t: t.fill_(value)
    if kind == "zero_":
        return "zero_()", lambda lib, t: t.zero_()
    if kind in ("neg_", "sigmoid_"):
        return f"{kind}()", lambda lib, t: getattr(t, kind)()
    if kind == "masked_fill_":
        mask = rng.random(small) < 0.5
        return f"masked_fill_({small})", lambda lib, t: t.masked_fill_(lib.tensor(mask), -1.25)
    if kind == "lerp_":
        return f"lerp_({small}, 0.3)", lambda lib, t: t.lerp_(lib.tensor(operand), 0.3)
    if kind == "addcmul_":
        other = _values(rng, small)
        return f"addcmul_({small})", lambda lib, t: t.addcmul_(
            lib.tensor(operand), lib.tensor(other), value=0.5
        )
    if kind in ("setitem", "iadd_key"):
        key = _draw_key(rng, shape)
        region = tuple(torch.zeros(shape)[_lib_key(torch, key)].shape)
        if rng.random() < 0.3:
            value = float(rng.uniform(-2, 2))
        else:
            value = _values(rng, region[1:] if region and rng.random() < 0.4 else region)

        def assign(lib, t):
            v = value if isinstance(value, float) else lib.tensor(value)
            k = _lib_key(lib, key)
            if kind == "setitem":
                t[k] = v
            else:
                t[k] += v
            return t

        sign = "=" if kind == "setitem" else "+="
        return f"[{key}] {sign} {np.shape(value)}", assign
    if kind == "out":
        return f"add(t.detach() * 2, {small}, out=t)", lambda lib, t: lib.add(
            t.detach() * 2, lib.tensor(operand), out=t
        )
    if kind in ("index_add_", "index_copy_", "index_fill_"):
        d = int(rng.integers(nd))
        size = shape[d]
        count = int(rng.integers(0, size + 1))
        if kind == "index_add_":
            index = rng.integers(0, max(size, 1), count)
        else:
            index = rng.permutation(size)[:count]
        source = _values(rng, (*shape[:d], count, *shape[d + 1 :]))
        if kind == "index_fill_":
            return f"index_fill_({d}, {index.tolist()})", lambda lib, t: t.index_fill_(
                d, lib.tensor(index), 0.75
            )
        return f"{kind}({d}, {index.tolist()})", lambda lib, t: getattr(t, kind)(
            d, lib.tensor(index), lib.tensor(source)
        )
    if kind in ("scatter_", "scatter_add_", "scatter_reduce_"):
        d = int(rng.integers(nd))
        index_shape = tuple(int(rng.integers(0, s + 1)) for s in shape)
        if kind == "scatter_":  # distinct positions along d (torch's order is unspecified)
            index = np.zeros(index_shape, dtype=np.int64)
            moved = np.moveaxis(index, d, -1)
            for position in np.ndindex(moved.shape[:-1]):
                moved[position] = rng.permutation(shape[d])[: index_shape[d]]
            index = np.moveaxis(moved, -1, d).copy()
        else:
            index = rng.integers(0, max(shape[d], 1), index_shape)
        source = _values(rng, index_shape)
        if kind == "scatter_reduce_":
            reduce = str(rng.choice(["sum", "prod", "mean", "amax", "amin"]))
            include = bool(rng.random() < 0.5)
            return f"scatter_reduce_({d}, {index_shape}, {reduce}, {include})", (
                lambda lib, t: t.scatter_reduce_(
                    d, lib.tensor(index), lib.tensor(source), reduce, include_self=include
                )
            )
        return f"{kind}({d}, {index_shape})", lambda lib, t: getattr(t, kind)(
            d, lib.tensor(index), lib.tensor(source)
        )
    if kind == "put_":
        n = int(np.prod(shape))
        count = int(rng.integers(0, n + 1))
        accumulate = bool(rng.random() < 0.5)
        index = rng.integers(-n, n, count) if accumulate and n else rng.permutation(n)[:count]
        source = _values(rng, (count,))
        return f"put_({index.tolist()}, accumulate={accumulate})", lambda lib, t: t.put_(
            lib.tensor(index), lib.tensor(source), accumulate=accumulate
        )
    if kind == "squeeze_":
        d = int(rng.integers(nd))
        return f"squeeze_({d})", lambda lib, t: t.squeeze_(d)
    if kind == "unsqueeze_":
        d = int(rng.integers(-nd - 1, nd + 1))
        return f"unsqueeze_({d})", lambda lib, t: t.unsqueeze_(d)
    if kind == "t_":
        return "t_()", lambda lib, t: t.t_()
    a, b = (int(v) for v in rng.integers(-nd, nd, size=2))  # transpose_
    return f"transpose_({a}, {b})", lambda lib, t: t.transpose_(a, b)


COMPUTED = {
    "exp": lambda lib, t: t.exp(),
    "square": lambda lib, t: t * t,
    "sin": lambda lib, t: t.sin(),
    "sigmoid": lambda lib, t: t.sigmoid(),
    "clone": lambda lib, t: t.clone(),
}


# -- running a program in lockstep -------------------------------------------------------------
def _call(lib, step, t):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return step(lib, t), None
    except Exception as error:
        return None, error


def _compare_all(log: list[str], tensors: list, strides: bool) -> None:
    """Every twin alike; a torch piece whose base was written since (torch refuses to read
    its graph) is dropped."""
    kept = []
    for theirs, ours, detached in tensors:
        try:
            theirs.grad_fn  # noqa: B018 (torch refuses a stale split piece here)
        except RuntimeError as error:
            assert STALE_PIECE in str(error), error
            continue
        kept.append((theirs, ours, detached))
    tensors[:] = kept
    for j, (theirs, ours, detached) in enumerate(tensors):
        where = "\n".join(log) + f"\nafter it, v{j}:"
        facts = {
            "shape": (tuple(ours.shape), tuple(theirs.shape)),
            "dtype": (_dtype(ours), _dtype(theirs)),
            "is_contiguous": (ours.is_contiguous(), theirs.is_contiguous()),
        }
        if strides and theirs.numel() > 1:
            facts["stride"] = (tuple(ours.stride()), tuple(theirs.stride()))
        if not detached:  # (Burn's detach: module docstring)
            facts["requires_grad"] = (ours.requires_grad, theirs.requires_grad)
            facts["is_leaf"] = (ours.is_leaf, theirs.is_leaf)
        for name, (have, want) in facts.items():
            if have != want:
                raise Mismatch(f"{where} {name} {have}, torch {want}")
        if not np.allclose(_np(ours), _np(theirs), rtol=1e-9, atol=1e-9, equal_nan=True):
            raise Mismatch(f"{where} values\n{_np(ours)}\ntorch\n{_np(theirs)}")


def _views_program(seed: int, steps: int = 8) -> None:
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(1, 4))))
    data = _values(rng, shape)
    mode = str(rng.choice(["computed", "computed", "outside", "leaf"]))
    leaf_t = torch.tensor(data, requires_grad=mode != "outside")
    leaf = rg.tensor(data, requires_grad=mode != "outside")
    first = (leaf_t * 1, leaf * 1) if mode == "computed" else (leaf_t, leaf)
    tensors = [(*first, False)]
    log = [f"seed {seed}: {mode} {shape}"]
    for _ in range(steps):
        i = int(rng.integers(len(tensors)))
        theirs, ours, detached = tensors[i]
        r = rng.random()
        if r < 0.45:
            what, (text, step) = "view", _draw_view(rng, tuple(theirs.shape))
        elif r < 0.9:
            what, (text, step) = "write", _draw_write(rng, tuple(theirs.shape))
        else:
            name = str(rng.choice(sorted(COMPUTED)))
            what, (text, step) = "computed", (name, COMPUTED[name])
        log.append(f"  v{i}.{text}" if what == "write" else f"  v{len(tensors)} = v{i}.{text}")
        expected, torch_error = _call(torch, step, theirs)
        got, error = _call(rg, step, ours)
        if torch_error is not None:
            _check_refusal(log, torch_error, error)
            log[-1] += f"  # {type(torch_error).__name__}"
        elif error is not None:
            if OVERLAP_REFUSAL in str(error) and isinstance(error, rg.RetrogradError):
                return  # (torch wrote in an order it leaves open: the twins part here)
            raise Mismatch("\n".join(log) + f"\nretrograd raised {error!r}, torch did not")
        elif (expected is theirs) != (got is ours):
            raise Mismatch("\n".join(log) + f"\nreturned its input: {got is ours}, torch's not")
        elif what != "write":
            tensors.append((expected, got, detached or text == "detach()"))
        _compare_all(log, tensors, strides=True)
    if mode == "outside":
        return
    weights = [_values(rng, tuple(t.shape), -1.0, 1.0) for t, _, _ in tensors]

    def loss(lib, side: int):
        terms = [
            (pair[side] * lib.tensor(w)).sum()
            for pair, w in zip(tensors, weights)
            if pair[0].requires_grad and pair[0].is_floating_point() and not pair[2]
        ]
        return sum(terms[1:], terms[0]) if terms else None

    try:
        total_t = loss(torch, 0)
        if total_t is None:
            return
        (expected,) = torch.autograd.grad(total_t, [leaf_t], allow_unused=True)
    except RuntimeError as torch_error:
        if VERSION_ERROR in str(torch_error) or STALE_PIECE in str(torch_error):
            return
        try:  # (a fill through an expanded view: torch's backward refuses it)
            rg.autograd.grad(loss(rg, 1), [leaf], allow_unused=True)
        except RuntimeError as error:
            _check_refusal([*log, "backward"], torch_error, error)
            return
        raise Mismatch("\n".join(log) + f"\nbackward: torch raised {torch_error!r}") from None
    (got,) = rg.autograd.grad(loss(rg, 1), [leaf], allow_unused=True)
    if (expected is None) != (got is None):
        raise Mismatch("\n".join(log) + f"\ngradient {got}, torch {expected}")
    if expected is not None:
        np.testing.assert_allclose(_np(got), _np(expected), rtol=1e-9, atol=1e-9, err_msg=log)


@pytest.mark.parametrize("block", range(4))
def test_views_and_writes_in_lockstep_with_torch(block: int) -> None:
    torch.manual_seed(61)
    for seed in range(610_000 + 12 * block, 610_000 + 12 * (block + 1)):
        _views_program(seed)


# -- family 2: dtypes, .data, no_grad, requires_grad_ ------------------------------------------
DTYPES = ["float64", "float32", "int64", "int32", "bool", "uint8"]


def _typed(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith(("int", "uint")):  # (no zero: torch's integer division by zero
        # writes part of the tensor before it raises)
        return rng.choice([1, 2, 3] if dtype == "uint8" else [-2, -1, 1, 2, 3], shape).astype(dtype)
    return np.round(rng.uniform(-2, 2, shape), 2).astype(dtype)


TYPED_WRITES = ["add_", "sub_", "mul_", "div_", "floor", "trunc", "copy_", "remainder_",
                "bitwise_and_", "lerp_", "fill_float", "fill_int", "fill_bool", "clamp_", "pow_",
                "masked_fill_", "setitem", "iadd", "itruediv", "ifloordiv", "imul", "abs_",
                "sqrt_", "round_", "neg_", "out", "data", "no_grad", "requires_grad_"]  # fmt: skip


def _draw_typed_write(rng: np.random.Generator, shape: tuple[int, ...], dtype: str):
    nd = len(shape)
    other_dtype = str(rng.choice(DTYPES))
    operand = _typed(rng, shape[int(rng.integers(0, nd + 1)) :], other_dtype)
    kind = str(rng.choice(TYPED_WRITES))
    text = f"{kind}({other_dtype}{operand.shape})"

    def tensor(lib):
        return lib.tensor(operand)

    if kind in ("add_", "sub_", "mul_", "div_", "copy_", "remainder_", "bitwise_and_"):
        return text, lambda lib, t: getattr(t, kind)(tensor(lib))
    if kind in ("floor", "trunc"):
        return text, lambda lib, t: t.div_(tensor(lib), rounding_mode=kind)
    if kind == "lerp_":
        return text, lambda lib, t: t.lerp_(tensor(lib), 0.5)
    if kind.startswith("fill_"):
        value = {"fill_float": 2.5, "fill_int": 3, "fill_bool": True}[kind]
        return f"fill_({value!r})", lambda lib, t: t.fill_(value)
    if kind == "clamp_":
        return "clamp_(-1, 1)", lambda lib, t: t.clamp_(-1, 1)
    if kind == "pow_":
        return "pow_(2)", lambda lib, t: t.pow_(2)
    if kind == "masked_fill_":
        mask = rng.random(shape) < 0.5
        return "masked_fill_(mask, -1.5)", lambda lib, t: t.masked_fill_(lib.tensor(mask), -1.5)
    if kind == "setitem":
        return f"[...] = {text}", lambda lib, t: t.__setitem__(Ellipsis, tensor(lib))
    if kind in ("iadd", "itruediv", "ifloordiv", "imul"):

        def augmented(lib, t):
            if kind == "iadd":
                t += tensor(lib)
            elif kind == "imul":
                t *= 2
            elif kind == "itruediv":
                t /= 2
            else:
                t //= 2
            return t

        return text, augmented
    if kind in ("abs_", "sqrt_", "round_", "neg_"):
        return f"{kind}()", lambda lib, t: getattr(t, kind)()
    if kind == "out":
        return f"mul(t, {text}, out=t)", lambda lib, t: lib.mul(t.detach(), tensor(lib), out=t)
    if kind == "data":  # (same shape and dtype: module docstring of the fixes)
        fresh = _typed(rng, shape, dtype)

        def set_data(lib, t):
            t.data = lib.tensor(fresh)
            return t

        return ".data = fresh", set_data
    if kind == "no_grad":

        def under_no_grad(lib, t):
            with lib.no_grad():
                t.mul_(2)
            return t

        return "no_grad: mul_(2)", under_no_grad
    return "requires_grad_()", lambda lib, t: t.requires_grad_()


def _typed_program(seed: int, steps: int = 6) -> None:
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3))))
    dtype = str(rng.choice(DTYPES))
    data = _typed(rng, shape, dtype)
    grad = dtype.startswith("float") and rng.random() < 0.6
    leaf_t, leaf = torch.tensor(data, requires_grad=grad), rg.tensor(data, requires_grad=grad)
    computed = grad and rng.random() < 0.6
    tensors = [(leaf_t * 1, leaf * 1, False) if computed else (leaf_t, leaf, False)]
    log = [f"seed {seed}: {dtype}{shape} requires_grad={grad} computed={computed}"]
    for _ in range(steps):
        i = int(rng.integers(len(tensors)))
        theirs, ours, _ = tensors[i]
        if rng.random() < 0.2 and theirs.dim():
            text, step = "view(-1)[1:]", lambda lib, t: t.view(-1)[1:]
        else:
            text, step = _draw_typed_write(rng, tuple(theirs.shape), _dtype(theirs))
            if text == "requires_grad_()" and i:
                continue  # (on the first tensor only: a view made a leaf of a detached one is
                # left: torch refuses its writes, retrograd takes them)
        log.append(f"  v{i}.{text}")
        expected, torch_error = _call(torch, step, theirs)
        got, error = _call(rg, step, ours)
        if torch_error is not None:
            _check_refusal(log, torch_error, error)
            log[-1] += f"  # {type(torch_error).__name__}"
        elif error is not None:
            raise Mismatch("\n".join(log) + f"\nretrograd raised {error!r}, torch did not")
        elif (expected is theirs) != (got is ours):
            raise Mismatch("\n".join(log) + f"\nreturned its input: {got is ours}, torch's not")
        elif expected is not None and expected is not theirs:  # (``t[...] = v`` gives None)
            tensors.append((expected, got, False))
        _compare_all(log, tensors, strides=False)


@pytest.mark.parametrize("block", range(2))
def test_writes_of_every_dtype_in_lockstep_with_torch(block: int) -> None:
    torch.manual_seed(61)
    for seed in range(620_000 + 40 * block, 620_000 + 40 * (block + 1)):
        _typed_program(seed)
