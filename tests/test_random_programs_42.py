"""Random programs against PyTorch, round 42: in-place writes through views and indexing.

A program takes a float64 leaf ``x`` and a float64 leaf ``w`` (whose slices are the values
written), builds a base from ``x`` (a copy, a product, a tensor that does not require grad, or
``x`` itself), then runs rounds of: a chain of views of the base or of an earlier view (basic
indexing with steps, negative bounds, ``...`` and ``None``; ``view``/``reshape``/``flatten``,
``transpose``/``permute``/``movedim``/``mT``, ``narrow``/``select``, ``unfold``, ``expand``,
``diagonal``, ``as_strided``, ``squeeze``/``unsqueeze``, an element of
``unbind``/``split``/``chunk``, the in-place ``transpose_``/``unsqueeze_``/``squeeze_``, ``.data``
(then with values outside the graph)), an in-place write into it (``add_`` ``mul_`` ``clamp_``
``copy_`` ``fill_`` ``zero_`` ``masked_fill_`` ``index_add_`` ``index_copy_`` ``index_fill_``
``scatter_`` ``scatter_add_`` ``scatter_reduce_`` ``index_reduce_`` ``put_``
``masked_scatter_`` ``index_put_`` with ``accumulate`` and repeated indices, ``+=``/``*=``,
``t[key] = value`` with ints, slices, bool masks, int tensors, ``...`` and ``None``; values that
are Python numbers, constants, 0-d tensors and broadcast tensors that require grad), maybe
under ``no_grad``, and maybe a read of the view by a later op. Every view and the base are read
after all the writes (each must see every write to its storage), and the float64 gradients of a
weighted sum of all outputs with respect to ``x`` and ``w`` must be torch's; so must each
view's layout (strides, storage offset, contiguity), whether each output requires grad, and
whether each in-place op returned its tensor.

Where torch refuses:
- a write into a leaf that requires grad or into a view of one, a write through a view made
  under ``no_grad`` with grad on, overlapping writes, bad indices: retrograd must raise an
  error of the API.md section 7 hierarchy;
- "modified by an inplace operation" (torch's version counter): API.md section 10 says a
  value saved for backward is never changed by a later in-place op, so retrograd must give the
  gradients of the same program in which every op works on copies (torch runs that program);
- a write into an output of ``unbind``/``split``/``chunk`` that requires grad: retrograd may
  refuse (its own error), or must act as the same program written with ``select``/``narrow``.

The inner backend and the checkpointing strategy are the suite's (``RETROGRAD_INNER``,
``RETROGRAD_CHECKPOINTING``); programs also run under ``BudgetCheckpointing(4096)``, whose
results must be bit-identical. ``FUZZ42_SCALE`` multiplies the example counts for a longer hunt.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retrograd as rg
from backends import checkpointing, inner_backend

torch = pytest.importorskip("torch")


def _examples(count: int) -> int:
    return count * int(os.environ.get("FUZZ42_SCALE", "1"))


FUZZ = settings(
    deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)

# torch's refusals where the contract lets retrograd compute the program's functional meaning
VERSION_ERROR = "modified by an inplace operation"
MULTIPLE_VIEWS = "returns multiple views"
# torch refuses to read a view made under no_grad whose storage was written since: the view
# is an ordinary tensor that does not require grad here
NO_GRAD_VIEW_READ = "its base or another view of its base has been modified"
# retrograd's refusal to write through a view whose elements overlap, where torch writes them
# in an order it leaves open
OVERLAP_REFUSAL = "refers to a single memory location"

W_SIZE = 96


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


# -- drawing a program ---------------------------------------------------------------------------
SHAPES = [(3, 4), (2, 3, 4), (5,), (2, 1, 3), (4, 2), (3, 3)]


def _factorizations(n: int) -> list[tuple[int, ...]]:
    shapes = [(n,)]
    shapes += [(a, n // a) for a in range(1, n + 1) if n % a == 0]
    shapes += [(a, b, n // a // b) for a in (1, 2) for b in (1, 2, 3) if n % (a * b) == 0]
    return shapes


def _draw_view(draw, shape: tuple[int, ...], first: bool, on_new_view: bool):
    """A view op for ``shape``: ``(op, new shape)``, or None where none fits."""
    rank = len(shape)
    kinds = ["slice", "index", "unsqueeze", "reshape", "view", "flatten", "ellipsis"]
    if rank >= 1 and shape[0] >= 1:
        kinds += ["narrow", "select", "unbind", "split", "chunk", "unfold"]
    if rank >= 2:
        kinds += ["transpose", "permute", "movedim", "diagonal", "mT"]
    if 1 in shape:
        kinds += ["squeeze", "expand"]
    if first and rank:
        kinds += ["as_strided"]
    if on_new_view:  # (in place on a view the chain made: the base keeps its shape)
        kinds += ["transpose_", "unsqueeze_"] + (["squeeze_"] if 1 in shape else [])
    # (not detach(): retrograd's keeps a leaf's requires_grad, Burn's rule, API.md section 3)
    kinds += ["data"]
    kind = draw(st.sampled_from(kinds))
    if kind == "data":
        return (kind,), shape
    if kind == "transpose_" and rank >= 2:
        a, b = draw(st.permutations(range(rank)))[:2]
        return ("transpose_", a, b), tuple(np.swapaxes(np.empty(shape), a, b).shape)
    if kind == "unsqueeze_":
        d = draw(st.integers(-rank - 1, rank))
        after = list(shape)
        after.insert(d if d >= 0 else rank + 1 + d, 1)
        return ("unsqueeze_", d), tuple(after)
    if kind == "squeeze_":
        d = draw(st.sampled_from([i for i in range(rank) if shape[i] == 1]))
        return ("squeeze_", d), shape[:d] + shape[d + 1 :]
    d = draw(st.integers(0, rank - 1)) if rank else 0
    n = shape[d] if rank else 1
    if kind == "slice" and rank:
        start = draw(st.integers(-n - 1, n))
        stop = draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
        step = draw(st.sampled_from([1, 1, 2, 3]))
        size = len(range(*slice(start, stop, step).indices(n)))
        return ("getitem", (slice(None),) * d + (slice(start, stop, step),)), (
            shape[:d] + (size,) + shape[d + 1 :]
        )
    if kind == "index" and rank and n:
        i = draw(st.integers(-n, n - 1))
        return ("getitem", (slice(None),) * d + (i,)), shape[:d] + shape[d + 1 :]
    if kind == "ellipsis" and rank and shape[-1]:
        choice = draw(st.sampled_from(["int", "step", "none"]))
        if choice == "int":
            i = draw(st.integers(-shape[-1], shape[-1] - 1))
            return ("getitem", (Ellipsis, i)), shape[:-1]
        if choice == "step":
            size = len(range(0, shape[-1], 2))
            return ("getitem", (Ellipsis, slice(None, None, 2))), shape[:-1] + (size,)
        return ("getitem", (None, Ellipsis, None)), (1, *shape, 1)
    if kind == "select" and rank and n:
        i = draw(st.integers(-n, n - 1))
        return ("select", d, i), shape[:d] + shape[d + 1 :]
    if kind == "narrow" and rank:
        start = draw(st.integers(0, n))
        length = draw(st.integers(0, n - start))
        return ("narrow", d, start, length), shape[:d] + (length,) + shape[d + 1 :]
    if kind == "unbind" and rank and n:
        i = draw(st.integers(-n, n - 1))
        return ("unbind", d, i), shape[:d] + shape[d + 1 :]
    if kind == "split" and rank and n:
        size = draw(st.integers(1, n))
        pieces = -(-n // size)
        i = draw(st.integers(0, pieces - 1))
        length = min(size, n - i * size)
        return ("split", d, size, i), shape[:d] + (length,) + shape[d + 1 :]
    if kind == "chunk" and rank and n:
        chunks = draw(st.integers(1, n))
        size = -(-n // chunks)
        pieces = -(-n // size)
        i = draw(st.integers(0, pieces - 1))
        length = min(size, n - i * size)
        return ("chunk", d, chunks, i), shape[:d] + (length,) + shape[d + 1 :]
    if kind == "unfold" and rank and n:
        size = draw(st.integers(1, n))
        # mostly windows that do not overlap: writes through overlapping ones are refused
        step = draw(st.sampled_from([size, size, size + 1, 1]))
        count = (n - size) // step + 1
        return ("unfold", d, size, step), shape[:d] + (count,) + shape[d + 1 :] + (size,)
    if kind == "transpose":
        a, b = draw(st.permutations(range(rank)))[:2]
        return ("transpose", a - rank, b), tuple(np.swapaxes(np.empty(shape), a, b).shape)
    if kind == "permute":
        perm = tuple(draw(st.permutations(range(rank))))
        return ("permute", perm), tuple(shape[p] for p in perm)
    if kind == "movedim":
        a, b = draw(st.integers(-rank, rank - 1)), draw(st.integers(-rank, rank - 1))
        return ("movedim", a, b), np.moveaxis(np.empty(shape), a, b).shape
    if kind == "mT":
        return ("mT",), shape[:-2] + (shape[-1], shape[-2])
    if kind == "diagonal":
        d1, d2 = draw(st.permutations(range(rank)))[:2]
        offset = draw(st.integers(-2, 2))
        return ("diagonal", offset, d1, d2), np.diagonal(np.empty(shape), offset, d1, d2).shape
    if kind == "squeeze":
        d = draw(st.sampled_from([i for i in range(rank) if shape[i] == 1]))
        return ("squeeze", d), shape[:d] + shape[d + 1 :]
    if kind == "expand":
        d = draw(st.sampled_from([i for i in range(rank) if shape[i] == 1]))
        after = shape[:d] + (2,) + shape[d + 1 :]
        return ("expand", after), after
    if kind in ("reshape", "view"):
        numel = int(np.prod(shape))
        target = draw(st.sampled_from(_factorizations(numel)))
        if len(target) > 1 and draw(st.booleans()):
            arg = (-1, *target[1:])
        else:
            arg = target
        return (kind, arg), target
    if kind == "flatten":
        return ("flatten",), (int(np.prod(shape)),)
    if kind == "as_strided" and all(shape):
        numel = int(np.prod(shape))
        size = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        inner = draw(st.integers(1, 2))
        stride = (size[1] * inner + draw(st.integers(0, 1)), inner)
        span = (size[0] - 1) * stride[0] + (size[1] - 1) * stride[1]
        if span >= numel:
            return None
        offset = draw(st.integers(0, numel - 1 - span))
        return ("as_strided", size, stride, offset), size
    d = draw(st.integers(-rank - 1, rank))
    after = list(shape)
    after.insert(d if d >= 0 else rank + 1 + d, 1)
    return ("unsqueeze", d), tuple(after)


def _draw_value(draw, shape: tuple[int, ...], rng, allow_number: bool = True):
    """A value to write over ``shape``: a Python number, a constant, a 0-d slice of ``w``, or
    a slice of ``w`` of ``shape`` or of a shape that broadcasts to it."""
    kinds = ["grad", "grad", "const", "grad0d", "broadcast"]
    if allow_number:
        kinds.append("number")
    kind = draw(st.sampled_from(kinds))
    if kind == "number":
        return ("number", round(float(rng.uniform(-2, 2)), 2))
    if kind == "grad0d":
        return ("grad", (), int(rng.integers(0, W_SIZE)))
    if kind == "const":
        return ("const", rng.uniform(-2, 2, shape).round(2))
    if kind == "broadcast" and shape:
        cut = int(rng.integers(0, len(shape) + 1))
        target = tuple(1 if rng.random() < 0.4 else s for s in shape[cut:])
        return ("grad", target, int(rng.integers(0, W_SIZE)))
    return ("grad", tuple(shape), int(rng.integers(0, W_SIZE)))


def _constant_values(item, rng):
    """``item`` (a write, or a part of one) with each slice of ``w`` made a constant."""
    if isinstance(item, tuple) and item and item[0] == "grad":
        return ("const", rng.uniform(-2, 2, item[1]).round(2))
    if isinstance(item, tuple):
        return tuple(_constant_values(part, rng) for part in item)
    if isinstance(item, list):
        return [_constant_values(part, rng) for part in item]
    return item


def _unique(rng, n: int, count: int) -> np.ndarray:
    return rng.permutation(n)[: min(count, n)]


def _draw_write(draw, shape: tuple[int, ...], rng):
    """An in-place write into a view of ``shape``."""
    rank = len(shape)
    kinds = ["add_", "mul_", "clamp_", "copy_", "fill_", "zero_", "masked_fill_", "setitem"]
    kinds += ["setitem", "setitem", "sub_", "iadd", "imul", "masked_scatter_", "from_base"]
    if rank and all(shape):
        kinds += ["index_add_", "index_copy_", "index_fill_", "scatter_", "scatter_add_"]
        kinds += ["index_put_", "index_put_", "index_put_mask", "scatter_reduce", "put_"]
        kinds += ["index_reduce_"]
    kind = draw(st.sampled_from(kinds))
    d = int(rng.integers(0, rank)) if rank else 0
    n = shape[d] if rank else 1
    index_dtype = draw(st.sampled_from(["int64", "int64", "int32"]))
    if kind in ("add_", "sub_"):
        alpha = draw(st.sampled_from([None, 2.0, -0.5]))
        return (kind, _draw_value(draw, shape, rng), alpha)
    if kind == "mul_":
        return ("mul_", _draw_value(draw, shape, rng))
    if kind == "clamp_":
        lo, hi = sorted(rng.uniform(-1.5, 1.5, 2).round(2))
        form = draw(st.sampled_from(["both", "min", "max"]))
        return (
            "clamp_",
            float(lo) if form != "max" else None,
            float(hi) if form != "min" else None,
        )
    if kind == "copy_":
        return ("copy_", _draw_value(draw, shape, rng, allow_number=False))
    if kind == "fill_":
        value = _draw_value(draw, (), rng)
        return ("fill_", value if value[0] != "const" else ("number", 0.25))
    if kind == "zero_":
        return ("zero_",)
    if kind == "masked_fill_":
        cut = int(rng.integers(0, rank + 1))
        mask = rng.random(shape[cut:]) < 0.5
        value = _draw_value(draw, (), rng)
        return ("masked_fill_", mask, value if value[0] != "const" else ("number", -1.0))
    if kind == "index_add_":
        index = rng.integers(-n if index_dtype == "never" else 0, n, size=int(rng.integers(1, 5)))
        src_shape = shape[:d] + (len(index),) + shape[d + 1 :]
        alpha = draw(st.sampled_from([1, 2.0]))
        return ("index_add_", d, index, index_dtype, ("grad", src_shape, 7), alpha)
    if kind == "index_copy_":
        index = _unique(rng, n, int(rng.integers(1, 4)))
        src_shape = shape[:d] + (len(index),) + shape[d + 1 :]
        return ("index_copy_", d, index, index_dtype, _draw_value(draw, src_shape, rng, False))
    if kind == "index_fill_":
        value = _draw_value(draw, (), rng)
        value = value if value[0] != "const" else ("number", 3.0)
        # (negative indices only with a number: torch's backward for a tensor value refuses
        # them, index_select's check)
        index = rng.integers(-n if value[0] == "number" else 0, n, size=int(rng.integers(1, 4)))
        return ("index_fill_", d, index, index_dtype, value)
    if kind in ("scatter_", "scatter_add_"):
        # an index of a shape no larger than the view's, unique along d for scatter_ (where
        # repeated targets are written in an order torch leaves open)
        idx_shape = tuple(int(rng.integers(1, s + 1)) for s in shape)
        index = np.stack(
            [_unique(rng, n, idx_shape[d]) for _ in range(int(np.prod(idx_shape)) // idx_shape[d])]
        )
        index = np.moveaxis(index.reshape(*idx_shape[:d], *idx_shape[d + 1 :], idx_shape[d]), -1, d)
        if kind == "scatter_add_":
            index = rng.integers(0, n, size=idx_shape)
        # (src no larger than the index: torch's backward gives its gradient the index's shape)
        src_shape = idx_shape
        if kind == "scatter_" and draw(st.booleans()):
            return ("scatter_value", d, index, round(float(rng.uniform(-2, 2)), 2))
        return (kind, d, index, ("grad", src_shape, int(rng.integers(0, 8))))
    if kind in ("iadd", "imul"):
        return (kind, _draw_value(draw, shape, rng))
    if kind == "masked_scatter_":
        mask = rng.random(shape) < 0.5
        return ("masked_scatter_", mask, ("grad", (int(mask.sum()) + 1,), int(rng.integers(0, 40))))
    if kind == "from_base":
        # another part of the same base written in: a copy (torch refuses a source that
        # overlaps the target in part)
        return ("from_base", draw(st.booleans()))
    if kind == "index_put_mask":
        mask = rng.random(shape[:1]) < 0.5
        value = _draw_value(draw, (int(mask.sum()), *shape[1:]), rng, allow_number=False)
        return ("index_put_mask", mask, value, draw(st.booleans()))
    if kind == "scatter_reduce":
        idx_shape = tuple(int(rng.integers(1, s + 1)) for s in shape)
        index = rng.integers(0, n, size=idx_shape)
        reduce = draw(st.sampled_from(["sum", "prod", "mean", "amax", "amin"]))
        include_self = draw(st.booleans())
        return ("scatter_reduce_", d, index, ("grad", idx_shape, 11), reduce, include_self)
    if kind == "index_reduce_":
        index = rng.integers(0, n, size=int(rng.integers(1, 5)))
        src_shape = shape[:d] + (len(index),) + shape[d + 1 :]
        reduce = draw(st.sampled_from(["prod", "mean", "amax", "amin"]))
        include_self = draw(st.booleans())
        return ("index_reduce_", d, index, ("grad", src_shape, 5), reduce, include_self)
    if kind == "put_":
        numel = int(np.prod(shape))
        accumulate = draw(st.booleans())
        count = int(rng.integers(1, 5))
        if accumulate:
            index = rng.integers(-numel, numel, size=count)
        else:
            index = _unique(rng, numel, count)
        return ("put_", index, ("grad", (len(index),), 21), accumulate)
    if kind == "index_put_":
        accumulate = draw(st.booleans())
        count = int(rng.integers(1, 5))
        two = rank >= 2 and draw(st.booleans())
        if accumulate:
            first = rng.integers(-shape[0], shape[0], size=count)
            second = rng.integers(-shape[1], shape[1], size=count) if two else None
        elif two:
            flat = _unique(rng, shape[0] * shape[1], count)
            first, second = flat // shape[1], flat % shape[1]
        else:
            first, second = _unique(rng, shape[0], count), None
        indices = [first] if second is None else [first, second]
        rest = shape[len(indices) :]
        value = _draw_value(draw, (len(first), *rest), rng, allow_number=False)
        return ("index_put_", indices, index_dtype, value, accumulate)
    return ("setitem", *_draw_key(draw, shape, rng), index_dtype)


def _draw_key(draw, shape: tuple[int, ...], rng):
    """``t[key] = value``: a key of ints, slices, ``...`` and ``None`` with at most one index
    tensor or mask (whose result shape NumPy gives as torch does), and a value for it."""
    items, dim = [], 0
    advanced = False
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["int", "slice", "none", "ellipsis", "tensor", "mask"]))
        if kind == "none":
            items.append(("none",))
            continue
        if kind == "ellipsis":
            if any(i[0] == "ellipsis" for i in items):
                continue
            items.append(("ellipsis",))
            dim = len(shape) - sum(1 for i in items if i[0] in ("int", "slice", "tensor"))
            continue
        if dim >= len(shape):
            break
        n = shape[dim]
        if kind == "int" and n:
            items.append(("int", int(rng.integers(-n, n))))
        elif kind == "tensor" and n and not advanced:
            advanced = True
            items.append(
                ("tensor", _unique(rng, n, int(rng.integers(1, 4))) - n * (rng.random() < 0.5))
            )
        elif kind == "mask" and not advanced:
            advanced = True
            items.append(("mask", rng.random(n) < 0.5))
        else:
            start = int(rng.integers(-n - 1, n + 1))
            items.append(("slice", slice(start, None, int(rng.integers(1, 3)))))
        dim += 1
    if any(i[0] == "ellipsis" for i in items) and dim > len(shape):
        items = [i for i in items if i[0] != "ellipsis"]
    key = tuple(_key_item(np, i, None) for i in items)
    try:
        target = np.empty(shape)[key].shape
    except IndexError:
        target = ()
    return items, _draw_value(draw, target, rng)


def _key_item(lib, item, index_dtype):
    kind = item[0]
    if kind == "int":
        return item[1]
    if kind == "slice":
        return item[1]
    if kind == "none":
        return None
    if kind == "ellipsis":
        return Ellipsis
    if lib is np:
        return item[1]
    if kind == "mask":
        return lib.tensor(item[1])
    return lib.tensor(item[1], dtype=getattr(lib, index_dtype))


@st.composite
def programs(draw):
    shape = draw(st.sampled_from(SHAPES))
    base = draw(st.sampled_from(["clone", "mul", "plain", "plain", "leaf", "leaf_nograd"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    rounds = []
    shapes = [shape]  # the base's, then each round's view
    outside = [False]  # whether each is reached through .data
    for r in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(shapes) - 1)) if draw(st.booleans()) else 0
        chain, current = [], shapes[start]
        for _ in range(draw(st.integers(0, 3))):
            step = _draw_view(draw, current, not chain and start == 0, bool(chain))
            if step is not None:
                chain.append(step[0])
                current = tuple(step[1])
        write = _draw_write(draw, current, rng)
        detached = ("data",) in chain or outside[start]
        if detached:
            # through .data, values outside the graph only (p.data's use): torch records a
            # value that requires grad on the .data tensor and its views, a corner left out
            write = ("zero_",) if write[0] == "from_base" else _constant_values(write, rng)
        outside.append(detached)
        if base == "leaf_nograd":  # writes into the leaf, mostly under no_grad
            no_grad = r == 0 or draw(st.integers(0, 7)) > 0
        else:
            no_grad = draw(st.integers(0, 9)) == 0
        read = draw(st.sampled_from([None, None, "sin", "square_sum", "exp_mean", "cumsum"]))
        rounds.append((start, chain, write, no_grad, read))
        shapes.append(current)
    finale = draw(st.sampled_from(["tanh", "matmul", "none"]))
    # before some rounds, the leaf w (the values' source) written under no_grad: whole, or
    # through a view of it; its gradient sums over the values it had
    w_writes = {
        r: draw(st.sampled_from(["mul_", "slice_add_", "setitem"]))
        for r in range(len(rounds))
        if draw(st.integers(0, 5)) == 0
    }
    return shape, base, rounds, finale, w_writes


W_WRITES = {
    "mul_": lambda w: w.mul_(0.75),
    "slice_add_": lambda w: w[::3].add_(0.5),
    "setitem": lambda w: w.__setitem__(slice(10, 40, 2), -0.25),
}


def describe(shape, base, rounds, finale, w_writes=None) -> str:
    lines = [f"x{shape}, base: {base}"]
    for r, (start, chain, write, no_grad, read) in enumerate(rounds):
        if r in (w_writes or {}):
            lines.append(f"with no_grad: w {w_writes[r]}")
        origin = "base" if start == 0 else f"v{start - 1}"
        views = "".join(f".{op[0]}{op[1:]}" for op in chain)
        grad = "with no_grad: " if no_grad else ""
        lines.append(f"v{r} = {origin}{views}; {grad}v{r}.{write[0]}{write[1:]}; read {read}")
    lines.append(f"finale: {finale}")
    return "\n".join(lines)


# -- running a program ---------------------------------------------------------------------------
def _apply_view(lib, t, op, plain: bool):
    """``op`` on ``t``; ``plain`` writes the multi-output views as single views (the program
    torch runs where it refuses to write into an output of ``unbind``/``split``/``chunk``)."""
    name, args = op[0], op[1:]
    if name == "getitem":
        return t[args[0]]
    if name == "unbind":
        d, i = args
        return t.select(d, i) if plain else t.unbind(d)[i]
    if name == "split":
        d, size, i = args
        if plain:
            return t.narrow(d, i * size, min(size, t.shape[d] - i * size))
        return t.split(size, d)[i]
    if name == "chunk":
        d, chunks, i = args
        if plain:
            size = -(-t.shape[d] // chunks)
            return t.narrow(d, i * size, min(size, t.shape[d] - i * size))
        return t.chunk(chunks, d)[i]
    if name == "mT":
        return t.mT
    if name == "data":
        return t.data
    if name in ("reshape", "view"):
        return getattr(t, name)(*args[0])
    if name == "expand":
        return t.expand(*args[0])
    if name == "permute":
        return t.permute(*args[0])
    return getattr(t, name)(*args)


def _value(lib, spec, w):
    kind = spec[0]
    if kind == "number":
        return spec[1]
    if kind == "const":
        return lib.tensor(spec[1], dtype=lib.float64)
    _, shape, start = spec
    n = int(np.prod(shape)) if shape else 1
    start = min(start, W_SIZE - n)
    return (w[start : start + n] * 1.5 + 0.25).reshape(shape)


def _write(lib, v, write, w, base):
    """``write`` on ``v``; returns what the in-place op returned."""
    name = write[0]
    if name in ("add_", "sub_"):
        value = _value(lib, write[1], w)
        return (
            getattr(v, name)(value) if write[2] is None else getattr(v, name)(value, alpha=write[2])
        )
    if name == "mul_":
        return v.mul_(_value(lib, write[1], w))
    if name == "clamp_":
        return v.clamp_(min=write[1], max=write[2])
    if name == "copy_":
        return v.copy_(_value(lib, write[1], w))
    if name == "fill_":
        return v.fill_(_value(lib, write[1], w))
    if name == "zero_":
        return v.zero_()
    if name == "masked_fill_":
        return v.masked_fill_(lib.tensor(write[1]), _value(lib, write[2], w))
    if name in ("index_add_", "index_copy_", "index_fill_"):
        d, index, dtype, value = write[1:5]
        idx = lib.tensor(index, dtype=getattr(lib, dtype))
        if name == "index_add_":
            return v.index_add_(d, idx, _value(lib, value, w), alpha=write[5])
        return getattr(v, name)(d, idx, _value(lib, value, w))
    if name in ("scatter_", "scatter_add_"):
        d, index, value = write[1:]
        return getattr(v, name)(d, lib.tensor(index, dtype=lib.int64), _value(lib, value, w))
    if name == "scatter_value":
        d, index, value = write[1:]
        return v.scatter_(d, lib.tensor(index, dtype=lib.int64), value)
    if name == "index_put_":
        indices, dtype, value, accumulate = write[1:]
        idx = tuple(lib.tensor(i, dtype=getattr(lib, dtype)) for i in indices)
        return v.index_put_(idx, _value(lib, value, w), accumulate=accumulate)
    if name == "iadd":
        v += _value(lib, write[1], w)
        return v
    if name == "imul":
        v *= _value(lib, write[1], w)
        return v
    if name == "masked_scatter_":
        return v.masked_scatter_(lib.tensor(write[1]), _value(lib, write[2], w))
    if name == "from_base":
        if not write[1]:
            return v.copy_(base.sum() * 0.1)
        flipped = (base.flip(0) if base.ndim else base).reshape(-1)
        return v.copy_(flipped[: v.numel()].reshape(v.shape) * 0.5)
    if name == "index_put_mask":
        mask, value, accumulate = write[1:]
        return v.index_put_((lib.tensor(mask),), _value(lib, value, w), accumulate=accumulate)
    if name in ("scatter_reduce_", "index_reduce_"):
        d, index, value, reduce, include_self = write[1:]
        method = getattr(v, name)
        return method(
            d,
            lib.tensor(index, dtype=lib.int64),
            _value(lib, value, w),
            reduce,
            include_self=include_self,
        )
    if name == "put_":
        index, value, accumulate = write[1:]
        return v.put_(
            lib.tensor(index, dtype=lib.int64), _value(lib, value, w), accumulate=accumulate
        )
    items, value, dtype = write[1:]
    v[tuple(_key_item(lib, i, dtype) for i in items)] = _value(lib, value, w)
    return v


READS = {
    "sin": lambda t: t.sin(),
    "square_sum": lambda t: (t * t).sum(),
    "exp_mean": lambda t: t.exp().mean(),
    "cumsum": lambda t: t.cumsum(0) if t.ndim else t * 2.0,
}


def _as_numpy(t) -> np.ndarray:
    return np.array(t.detach().numpy(), dtype=np.float64 if t.is_floating_point() else None)


def execute(lib, program, x_data, w_data, safe: bool):
    """``program`` in ``lib``: its outputs, identities and gradients as NumPy, or its error.
    ``safe`` runs every op on copies (where torch's version counter refuses the program) and
    writes the outputs of multi-output views as single views."""
    _, base_kind, rounds, finale, *rest = program
    w_writes = rest[0] if rest else {}
    try:
        x = lib.tensor(x_data, dtype=lib.float64).requires_grad_(True)
        w = lib.tensor(w_data, dtype=lib.float64).requires_grad_(True)
        if base_kind == "clone":
            base = x.clone()
        elif base_kind == "mul":
            base = x * 1.0
        elif base_kind == "plain":
            base = lib.tensor(x_data * 0.5, dtype=lib.float64)
        else:
            base = x
        views, outputs, identities, layouts = [base], [], [], []
        for r, (start, chain, write, no_grad, read) in enumerate(rounds):
            if r in w_writes:
                with lib.no_grad():
                    W_WRITES[w_writes[r]](w)
            with lib.no_grad() if no_grad else contextlib.nullcontext():
                v = views[start]
                for op in chain:
                    v = _apply_view(lib, v, op, plain=safe)
                if v.numel() and not safe:
                    # the layout torch gives the view: what decides whether later reshapes are
                    # views (strides of size-1 dimensions mean nothing)
                    strides = [s for s, n in zip(v.stride(), v.shape) if n > 1]
                    layouts.append([*strides, v.storage_offset(), int(v.is_contiguous())])
                if safe:
                    copy = v.clone()
                    _write(lib, copy, write, w, base)
                    v.copy_(copy)
                else:
                    returned = _write(lib, v, write, w, base)
                    identities.append(returned is v)
                # (a view made under no_grad is read there too: torch refuses to read it in
                # grad mode once it or its base has been written)
                if no_grad:
                    outputs.append(v.clone())
                if no_grad and read is not None:
                    outputs.append(READS[read](v))
            views.append(v)
            if read is not None and not no_grad:
                outputs.append(READS[read](v.clone() if safe else v))
        finals = [base.clone() if safe else base]
        if finale == "tanh":
            finals.append(finals[0].tanh())
        elif finale == "matmul" and base.ndim >= 1:
            flat = finals[0].reshape(-1)
            finals.append(flat @ (flat + 1.0))
        finals.append(x * 1.0)  # x itself, in case a write under no_grad changed it
        if w_writes:
            finals.append(w * 1.0)
        made_with_grad = [v for v, r in zip(views[1:], rounds) if not r[3]]
        items = outputs + finals + made_with_grad
        result = {
            "out": [_as_numpy(t) for t in items],
            "shapes": [tuple(t.shape) for t in items],
            "grad_flags": [bool(t.requires_grad) for t in items],
            "identities": identities,
            "layouts": layouts,
        }
        rng = np.random.default_rng(42)
        loss = None
        for t in items:
            if t.requires_grad:
                term = (t * lib.tensor(rng.standard_normal(tuple(t.shape)))).sum()
                loss = term if loss is None else loss + term
        if loss is not None:
            grads = lib.autograd.grad(loss, [x, w], allow_unused=True)
            result["grad"] = [
                np.zeros(np.shape(a)) if g is None else _as_numpy(g)
                for g, a in zip(grads, (x_data, w_data))
            ]
        return result, None
    except Exception as e:  # either library's refusal is a result here
        return None, e


def _compare(want, got, label: str, safe: bool) -> None:
    for key in ("shapes", "identities", "grad_flags", "layouts"):
        if key in ("identities", "layouts") and safe:
            continue
        if key == "grad_flags" and safe:
            continue
        if want[key] != got[key]:
            raise Mismatch(f"{label}{key}: {got[key]} != torch's {want[key]}")
    for key in ("out", "grad"):
        w, g = want.get(key), got.get(key)
        if w is None and g is None:
            continue
        if w is None or g is None:
            raise Mismatch(f"{label}{key}: torch has {w is not None}, retrograd {g is not None}")
        for k, (gi, wi) in enumerate(zip(g, w)):
            if gi.dtype.kind != "f" or wi.dtype.kind != "f":
                same = gi.dtype == wi.dtype and np.array_equal(gi, wi)
            else:
                same = gi.shape == wi.shape and np.allclose(
                    gi, wi, rtol=1e-9, atol=1e-9, equal_nan=True
                )
            if not same:
                raise Mismatch(f"{label}{key} {k}:\n{gi}\n!= torch's\n{wi}")


def _through_data(program) -> bool:
    return any(("data",) in chain for _, chain, *_ in program[2])


def _expanded(program) -> bool:
    return any(op[0] == "expand" for _, chain, *_ in program[2] for op in chain)


def check(program, x_data, w_data) -> str:
    want, want_error = execute(torch, program, x_data, w_data, safe=False)
    safe = False
    may_refuse = False
    if want_error is not None and OVERLAP_REFUSAL in str(want_error) and _expanded(program):
        # torch's autograd refuses a recorded write into an expanded view even where it
        # writes each element once (``e[idx, 0] = v``, v requiring grad), which it accepts
        # unrecorded; retrograd accepts both: its result is not checked here
        got, error = execute(rg, program, x_data, w_data, safe=False)
        if error is None:
            return "skip"
    if _through_data(program) or (
        want_error is not None
        and (VERSION_ERROR in str(want_error) or MULTIPLE_VIEWS in str(want_error))
    ):
        # (torch's values saved for backward see a later write through .data, its version
        # counter ignoring it; retrograd's never change, API.md section 10: the program on
        # copies gives its meaning)
        may_refuse = MULTIPLE_VIEWS in str(want_error)
        safe = True
        want, want_error = execute(torch, program, x_data, w_data, safe=True)
        if want_error is not None and OVERLAP_REFUSAL in str(want_error):
            # (the copy written back whole into an expanded view: refused, whether torch
            # took the program or refused it for a version or multiple-views reason)
            return "skip"
    if want_error is not None and NO_GRAD_VIEW_READ in str(want_error):
        return "skip"
    strategies = [("suite", checkpointing())]
    if not isinstance(strategies[0][1], rg.BudgetCheckpointing):
        strategies.append(("budget-4096", rg.BudgetCheckpointing(4096)))
    baseline = None
    for label, strategy in strategies:
        with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
            got, error = execute(rg, program, x_data, w_data, safe=False)
        label = f"{label}: "
        if want_error is not None:
            if error is None:
                raise Mismatch(f"{label}torch raises {want_error!r}; retrograd returns")
            if not isinstance(error, rg.RetrogradError):
                raise Mismatch(f"{label}bare {type(error).__name__}: {error}") from error
            return "raise"
        if error is not None:
            if OVERLAP_REFUSAL in str(error) or (
                may_refuse and isinstance(error, rg.RetrogradError)
            ):
                return "refused"
            raise Mismatch(f"{label}retrograd raises {type(error).__name__}: {error}") from error
        _compare(want, got, label, safe)
        if baseline is None:
            baseline = got
            continue
        for key in ("out", "grad"):
            for k, (b, g) in enumerate(zip(baseline.get(key, []), got.get(key, []))):
                if not np.array_equal(b, g, equal_nan=True):
                    raise Mismatch(f"{label}{key} {k} not bit-identical to the suite strategy's")
    return "safe" if safe else "ok"


@settings(FUZZ, max_examples=_examples(300))
@given(programs(), st.integers(0, 2**16))
def test_writes_through_views_match_torch(program, seed):
    rng = np.random.default_rng(seed)
    x_data = rng.standard_normal(program[0]).round(3)
    w_data = rng.uniform(-1, 1, W_SIZE).round(3)
    try:
        check(program, x_data, w_data)
    except Mismatch as e:
        raise Mismatch(f"{describe(*program)}\n{e}") from None


def test_the_check_catches_a_wrong_value_gradient_layout_or_missing_refusal():
    program = (
        (3, 4),
        "clone",
        [(0, [("getitem", (slice(None), slice(1, None, 2)))], ("mul_", ("grad", (3, 2), 5)),
          False, "sin")],
        "tanh",
    )  # fmt: skip
    rng = np.random.default_rng(0)
    x_data, w_data = rng.standard_normal((3, 4)), rng.uniform(-1, 1, W_SIZE)
    assert check(program, x_data, w_data) == "ok"
    want, _ = execute(torch, program, x_data, w_data, safe=False)
    for key, change in [
        ("out", lambda r: r["out"][0].__iadd__(1e-6)),
        ("grad", lambda r: r["grad"][1].__imul__(1.0 + 1e-6)),
        ("layouts", lambda r: r["layouts"][0].__setitem__(0, 99)),
        ("grad_flags", lambda r: r["grad_flags"].__setitem__(0, False)),
    ]:
        got, _ = execute(torch, program, x_data, w_data, safe=False)
        change(got)
        with pytest.raises(Mismatch, match=key):
            _compare(want, got, "", safe=False)
    # a write into a leaf that requires grad: torch refuses, and so must retrograd
    leaf = ((3, 4), "leaf", [(0, [], ("zero_",), False, None)], "none")
    assert check(leaf, x_data, w_data) == "raise"
