"""Random programs against PyTorch, round 38: the corners earlier generators reach least.

Five families of programs, drawn by hypothesis and written once against a library handle
``lib`` (``torch`` or ``retrograd``), run in both libraries:

- ``views``: chains of views of a non-leaf (slices with steps and negative bounds, integer
  and negative indices, transpose/permute/movedim, diagonal, unfold, narrow, as_strided,
  expand, squeeze/unsqueeze) written in place (``t[idx] = v``, ``+=``, ``masked_fill_``,
  ``index_put_`` with ``accumulate``, ``copy_``, ``clamp_``, ``addcmul_``...), several
  rounds, then read through the base and the views;
- ``indexing``: advanced indexing mixed with slices, ``None`` and ``...``, boolean masks and
  int32/int64 index tensors with negative values, read and written (``index_put_``);
- ``promotion``: binary ops and their in-place forms across
  bool/uint8/int8/int16/int32/int64/float16/bfloat16/float32/float64 tensors, 0-d tensors and
  Python numbers: the result dtype must be torch's;
- ``ordering``: scans (cumsum, cumprod over zeros, logcumsumexp, cummax/cummin over ties) and
  sort/topk/kthvalue/median/mode/msort over ties (and NaN where torch defines the result);
- ``second``: random smooth compositions differentiated twice (``create_graph=True``).

Every program must agree with torch on raising or not (retrograd raising a ``RetrogradError``
where torch raises), on every output's dtype, shape and values (exact for integer and bool,
tight tolerances for floats), on the operands afterwards and on the float64 gradients; and it
runs under every checkpointing strategy, whose results must be bit-identical to
NoCheckpointing's. The inner backend is the suite's (``RETROGRAD_INNER``).
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import retrograd as rg
from backends import inner_backend, on_torch

torch = pytest.importorskip("torch")


def _examples(count: int) -> int:
    """``count``, times ``FUZZ38_SCALE`` (a longer hunt than the suite's)."""
    return count * int(os.environ.get("FUZZ38_SCALE", "1"))


STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget-1": lambda: rg.BudgetCheckpointing(1),
    "budget-512": lambda: rg.BudgetCheckpointing(512),
}

# torch's refusals that retrograd does not share by design (API.md section 10: a saved value
# is never changed by a later in-place op, and a view of several outputs may be written)
TORCH_ONLY_REFUSALS = (
    "modified by an inplace operation",
    "returns multiple views",
    "its base or another view",
)

# retrograd's refusal to write through a view whose elements overlap (unfold windows, as_strided
# with small strides), where torch writes them in an order it leaves open
OVERLAP_REFUSAL = "refers to a single memory location"


class Mismatch(AssertionError):  # noqa: N818 (read as "a mismatch with torch")
    """retrograd and torch disagree."""


# -- running a program in one library ------------------------------------------------------------
def _as_numpy(x) -> tuple[np.ndarray, str]:
    if isinstance(x, torch.Tensor | rg.Tensor):
        dtype = str(x.dtype).replace("torch.", "")
        x = x.detach()
        # NumPy has no bfloat16: half precision compared in float64, which holds it exactly
        return (x.double() if dtype in ("float16", "bfloat16") else x).numpy().copy(), dtype
    if isinstance(x, bool | int | float):
        return np.asarray(x), type(x).__name__
    raise TypeError(f"unexpected output {type(x).__name__}")


def _flatten(out) -> list:
    if isinstance(out, tuple | list):
        return [item for o in out for item in _flatten(o)]
    return [out]


def run(lib, program, operands, order: int) -> tuple[dict | None, BaseException | None]:
    """``program``'s outputs, its operands afterwards and the derivatives of a weighted sum of
    its float64 outputs (``order`` 1), and of a penalty on those (``order`` 2), as NumPy; or
    the error it raised."""
    try:
        tensors = []
        for array, dtype, grad in operands:
            t = lib.tensor(array, dtype=getattr(lib, dtype))
            tensors.append(t.requires_grad_(True) if grad else t)
        items = _flatten(program(lib, *tensors))
        leaves = [t for t, (_, _, grad) in zip(tensors, operands) if grad]
        result = {"out": [_as_numpy(o) for o in items]}
        result["after"] = [_as_numpy(t) for t, (_, _, grad) in zip(tensors, operands) if not grad]
        if order == 0 or not leaves:
            return result, None
        rng = np.random.default_rng(38)
        loss = None
        for o in items:
            if isinstance(o, lib.Tensor) and o.requires_grad and o.dtype == lib.float64:
                term = (o * lib.tensor(rng.standard_normal(tuple(o.shape)))).sum()
                loss = term if loss is None else loss + term
        if loss is None:
            return result, None
        grads = lib.autograd.grad(loss, leaves, allow_unused=True, create_graph=order > 1)
        grads = [lib.zeros_like(lf) if g is None else g for g, lf in zip(grads, leaves)]
        result["grad"] = [_as_numpy(g) for g in grads]
        penalty = None
        for g in grads if order > 1 else ():
            if g.requires_grad:
                term = (g * lib.tensor(rng.standard_normal(tuple(g.shape)))).sum() + (g * g).sum()
                penalty = term if penalty is None else penalty + term
        if penalty is not None:
            second = lib.autograd.grad(penalty, leaves, allow_unused=True)
            second = [lib.zeros_like(lf) if h is None else h for h, lf in zip(second, leaves)]
            result["grad2"] = [_as_numpy(h) for h in second]
        return result, None
    except Exception as e:  # either library's refusal is a result here
        return None, e


TOLERANCE = {"float16": 1e-3, "bfloat16": 8e-3, "float32": 2e-6}


def _close(got, want, what: str) -> None:
    (g, gdt), (w, wdt) = got, want
    if gdt != wdt:
        raise Mismatch(f"{what}: dtype {gdt} != torch's {wdt}")
    if g.shape != w.shape:
        raise Mismatch(f"{what}: shape {g.shape} != torch's {w.shape}")
    if w.dtype.kind not in "fc":
        if not np.array_equal(g, w):
            raise Mismatch(f"{what}: values\n{g}\n!= torch's\n{w}")
        return
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        raise Mismatch(f"{what}: NaN in other places\n{g}\n!= torch's\n{w}")
    tol = TOLERANCE.get(wdt, 1e-9)
    try:
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
    except AssertionError as e:
        raise Mismatch(f"{what}: {e}") from None


def compare(want, want_error, got, error, label: str) -> str:
    if want_error is not None:
        if any(text in str(want_error) for text in TORCH_ONLY_REFUSALS):
            return "skip"
        if error is None:
            raise Mismatch(f"{label}torch raises {want_error!r}; retrograd returns")
        if not isinstance(error, rg.RetrogradError):
            raise Mismatch(f"{label}bare {type(error).__name__}: {error}") from error
        return "raise"
    if error is not None and OVERLAP_REFUSAL in str(error):
        return "skip"
    if error is not None:
        raise Mismatch(f"{label}retrograd raises {type(error).__name__}: {error}") from error
    for key in ("out", "after", "grad", "grad2"):
        w, g = want.get(key), got.get(key)
        if w is None or g is None:
            # a derivative constant zero in one graph and absent from the other's
            if any(np.any(a) for a, _ in (w or g or [])):
                raise Mismatch(
                    f"{label}{key}: torch has {w is not None}, retrograd {g is not None}"
                )
            continue
        if len(g) != len(w):
            raise Mismatch(f"{label}{key}: {len(g)} items != torch's {len(w)}")
        for k, (gi, wi) in enumerate(zip(g, w)):
            _close(gi, wi, f"{label}{key} {k}")
    return "ok"


def check(program, operands, order: int) -> str:
    """``program`` against torch under every checkpointing strategy, each bit-identical to
    NoCheckpointing's."""
    want, want_error = run(torch, program, operands, order)
    baseline = None
    outcome = "ok"
    for label, make in STRATEGIES.items():
        with rg.use_backend(rg.Autodiff(inner_backend(), make())):
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
    return outcome


# -- family 1: chains of views written in place --------------------------------------------------
def _view_step(draw, shape: tuple[int, ...]):
    """A view op applicable to ``shape``: ``(description, fn(lib, t), shape after)``."""
    rank = len(shape)
    kinds = ["slice", "index", "unsqueeze", "as_strided_ok"]
    if rank >= 2:
        kinds += ["transpose", "permute", "diagonal", "movedim"]
    if rank >= 1:
        kinds += ["narrow", "unfold", "flip_read"] if max(shape) >= 2 else ["narrow"]
    if 1 in shape:
        kinds += ["squeeze", "expand"]
    kind = draw(st.sampled_from(kinds))
    if kind == "slice" and rank:
        d = draw(st.integers(0, rank - 1))
        n = shape[d]
        start = draw(st.integers(-n - 1, n))
        stop = draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
        step = draw(st.integers(1, 3))
        key = (slice(None),) * d + (slice(start, stop, step),)
        size = len(range(*slice(start, stop, step).indices(n)))
        return f"[{key}]", lambda lib, t: t[key], shape[:d] + (size,) + shape[d + 1 :]
    if kind == "index" and rank and min(shape) >= 1:
        d = draw(st.integers(0, rank - 1))
        i = draw(st.integers(-shape[d], shape[d] - 1))
        key = (slice(None),) * d + (i,)
        return f"[{key}]", lambda lib, t: t[key], shape[:d] + shape[d + 1 :]
    if kind == "transpose":
        a, b = draw(st.permutations(range(rank)))[:2]
        a, b = a - rank * draw(st.booleans()), b
        return (
            f".transpose({a}, {b})",
            lambda lib, t: t.transpose(a, b),
            tuple(np.swapaxes(np.empty(shape), a, b).shape),
        )
    if kind == "permute":
        perm = tuple(draw(st.permutations(range(rank))))
        return f".permute{perm}", lambda lib, t: t.permute(*perm), tuple(shape[p] for p in perm)
    if kind == "movedim":
        a, b = draw(st.integers(-rank, rank - 1)), draw(st.integers(-rank, rank - 1))
        after = np.moveaxis(np.empty(shape), a, b).shape
        return f".movedim({a}, {b})", lambda lib, t: t.movedim(a, b), after
    if kind == "diagonal":
        d1, d2 = draw(st.permutations(range(rank)))[:2]
        offset = draw(st.integers(-2, 2))
        after = np.diagonal(np.empty(shape), offset, d1, d2).shape
        return (
            f".diagonal({offset}, {d1}, {d2})",
            lambda lib, t: t.diagonal(offset, d1, d2),
            after,
        )
    if kind == "narrow" and rank:
        d = draw(st.integers(0, rank - 1))
        start = draw(st.integers(0, shape[d]))
        length = draw(st.integers(0, shape[d] - start))
        start_arg = start - shape[d] if start < shape[d] and draw(st.booleans()) else start
        return (
            f".narrow({d}, {start_arg}, {length})",
            lambda lib, t: t.narrow(d, start_arg, length),
            shape[:d] + (length,) + shape[d + 1 :],
        )
    if kind == "unfold":
        d = draw(st.sampled_from([i for i in range(rank) if shape[i] >= 2]))
        size = draw(st.integers(1, shape[d]))
        step = draw(st.integers(1, 3))
        count = (shape[d] - size) // step + 1
        return (
            f".unfold({d}, {size}, {step})",
            lambda lib, t: t.unfold(d, size, step),
            shape[:d] + (count,) + shape[d + 1 :] + (size,),
        )
    if kind == "squeeze":
        d = draw(st.sampled_from([i for i in range(rank) if shape[i] == 1]))
        return f".squeeze({d})", lambda lib, t: t.squeeze(d), shape[:d] + shape[d + 1 :]
    if kind == "expand":
        d = draw(st.sampled_from([i for i in range(rank) if shape[i] == 1]))
        after = shape[:d] + (3,) + shape[d + 1 :]
        return f".expand{after}", lambda lib, t: t.expand(*after), after
    if kind == "as_strided_ok" and rank and all(shape):
        # a window of the view's own elements: as_strided on the contiguous copy would be
        # storage-relative; on a view torch reads the storage, so keep to a contiguous base
        return None
    if kind == "flip_read":
        # not a view: a copy, so that writes after it leave the base alone
        d = draw(st.integers(0, rank - 1))
        return f".flip({d})", lambda lib, t: t.flip(d), shape
    d = draw(st.integers(-rank - 1, rank))
    after = list(shape)
    after.insert(d if d >= 0 else rank + 1 + d, 1)
    return f".unsqueeze({d})", lambda lib, t: t.unsqueeze(d), tuple(after)


def _source(lib, w, shape):
    """``shape``'s worth of the source leaf ``w`` (64 elements), differentiable."""
    n = int(np.prod(shape)) if shape else 1
    return (w[:n] * 1.5).reshape(shape)


def _write_step(draw, shape: tuple[int, ...], seed: int):
    """An in-place write into a view of ``shape``: ``(description, fn(lib, view, w))``."""
    rng = np.random.default_rng(seed)
    kinds = ["iadd", "mul_", "clamp_", "copy_", "masked_fill_", "setitem", "index_put_acc", "zero_"]
    kinds += ["addcmul_", "sub_alpha", "div_", "setitem_scalar", "lerp_", "exp_"]
    kinds += ["self_mul", "shifted_add", "base_copy", "pow_", "sigmoid_", "fill_0d"]
    kind = draw(st.sampled_from(kinds))
    if kind == "self_mul":
        return "mul_(v)", lambda lib, v, w: v.mul_(v)
    if kind == "pow_":
        return "abs_().pow_(1.5)", lambda lib, v, w: v.abs_().add_(0.1).pow_(1.5)
    if kind == "sigmoid_":
        return "sigmoid_()", lambda lib, v, w: v.sigmoid_()
    if kind == "fill_0d":
        return "fill_(w[3])", lambda lib, v, w: v.fill_(w[3])
    if kind == "shifted_add" and shape and shape[0] >= 2:
        # partly overlapping source and target: torch refuses

        def shifted_add(lib, v, w):
            # (through a view that is not contiguous torch does not check, and reads what
            # it has written: an order it leaves open; the source is a copy there)
            v[1:] += v[:-1] if v.is_contiguous() else v[:-1].clone()
            return v

        return "v[1:] += v[:-1]", shifted_add
    if kind == "base_copy" and shape and shape[0] >= 2:
        # the source a copy of another part of the same view: reads before the write

        def base_copy(lib, v, w):
            v[:1] = v[-1:].clone() * 2.0
            return v

        return "v[:1] = v[-1:].clone() * 2", base_copy
    if kind == "iadd":

        def iadd(lib, v, w):
            v += _source(lib, w, shape)
            return v

        return "+= w", iadd
    if kind == "mul_":
        return "mul_(w)", lambda lib, v, w: v.mul_(_source(lib, w, shape))
    if kind == "div_":
        return "div_(w^2+1)", lambda lib, v, w: v.div_(_source(lib, w, shape) ** 2 + 1.0)
    if kind == "exp_":
        return "mul_(0.3).exp_()", lambda lib, v, w: v.mul_(0.3).exp_()
    if kind == "clamp_":
        lo, hi = sorted(rng.uniform(-1, 1, 2).round(2))
        return f"clamp_({lo}, {hi})", lambda lib, v, w: v.clamp_(float(lo), float(hi))
    if kind == "copy_":
        return "copy_(w)", lambda lib, v, w: v.copy_(_source(lib, w, shape))
    if kind == "zero_":
        return "zero_()", lambda lib, v, w: v.zero_()
    if kind == "addcmul_":
        return "addcmul_(w, w, value=0.5)", lambda lib, v, w: v.addcmul_(
            _source(lib, w, shape), _source(lib, w, shape), value=0.5
        )
    if kind == "sub_alpha":
        return "sub_(w, alpha=2)", lambda lib, v, w: v.sub_(_source(lib, w, shape), alpha=2)
    if kind == "lerp_":
        return "lerp_(w, 0.25)", lambda lib, v, w: v.lerp_(_source(lib, w, shape), 0.25)
    mask = rng.random(shape) < 0.5
    if kind == "masked_fill_":
        value = round(float(rng.uniform(-2, 2)), 2)
        return f"masked_fill_(mask, {value})", lambda lib, v, w: v.masked_fill_(
            lib.tensor(mask), value
        )
    if kind == "setitem" and shape:
        count = int(mask.sum())

        def setitem(lib, v, w):
            v[lib.tensor(mask)] = _source(lib, w, (count,))
            return v

        return "v[mask] = w", setitem
    if kind == "setitem_scalar" and shape:
        d = draw(st.integers(0, len(shape) - 1))
        if shape[d] == 0:
            return "zero_()", lambda lib, v, w: v.zero_()
        i = draw(st.integers(-shape[d], shape[d] - 1))
        key = (slice(None),) * d + (i,)

        def setitem_scalar(lib, v, w):
            v[key] = -0.5
            return v

        return f"v[{key}] = -0.5", setitem_scalar
    if kind == "index_put_acc" and shape and shape[0]:
        index = rng.integers(-shape[0], shape[0], size=int(rng.integers(1, 5)))
        dtype = draw(st.sampled_from(["int64", "int32"]))
        values_shape = (len(index),) + shape[1:]
        accumulate = draw(st.booleans())
        if not accumulate:
            index = np.unique(index % shape[0])  # repeated writes without accumulate: any order
            values_shape = (len(index),) + shape[1:]

        def index_put(lib, v, w):
            idx = lib.tensor(index, dtype=getattr(lib, dtype))
            return v.index_put_((idx,), _source(lib, w, values_shape), accumulate=accumulate)

        return f"index_put_([{index.tolist()}] {dtype}, accumulate={accumulate})", index_put
    return "add_(1.0)", lambda lib, v, w: v.add_(1.0)


SHAPES = [(4, 5), (3, 4, 5), (2, 3, 4), (6,), (1, 4, 3), (3, 1, 4)]


@st.composite
def view_programs(draw):
    shape = draw(st.sampled_from(SHAPES))
    rounds = []
    for _ in range(draw(st.integers(1, 3))):
        as_strided = draw(st.booleans()) and draw(st.booleans())
        chain, current = [], shape
        if as_strided:
            # as_strided of the contiguous base: a window of its storage whose elements do
            # not overlap (torch writes overlapping ones in an order it leaves open; retrograd
            # refuses those writes)
            numel = int(np.prod(shape))
            size = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
            inner_stride = draw(st.integers(1, 3))
            outer_stride = size[1] * inner_stride + draw(st.integers(0, 2))
            stride = (outer_stride, inner_stride)
            if draw(st.booleans()):  # column-major
                stride = (inner_stride, size[0] * inner_stride + draw(st.integers(0, 2)))
            span = (size[0] - 1) * stride[0] + (size[1] - 1) * stride[1]
            offset = draw(st.integers(0, max(0, numel - 1 - span)))
            if span + offset < numel:
                chain.append(
                    (
                        f".as_strided({size}, {stride}, {offset})",
                        lambda lib, t, a=(size, stride, offset): t.as_strided(*a),
                        size,
                    )
                )
                current = size
        for _ in range(draw(st.integers(0 if chain else 1, 3))):
            step = _view_step(draw, current)
            if step is None:
                continue
            chain.append(step)
            current = step[2]
        write = _write_step(draw, current, draw(st.integers(0, 2**16)))
        read = draw(st.booleans())
        rounds.append((chain, write, read))
    through_leaf_view = draw(st.booleans())
    return shape, rounds, through_leaf_view


def _describe_views(shape, rounds, through_leaf_view) -> str:
    lines = [f"base = x{shape} * 1 ({'a view of x' if through_leaf_view else 'a copy'})"]
    for chain, (write_text, _), read in rounds:
        views = "".join(text for text, _, _ in chain)
        lines.append(f"v = base{views}; v.{write_text}" + ("; read v.sin()" if read else ""))
    return "\n".join(lines)


def _view_program(shape, rounds, through_leaf_view):
    def program(lib, x, w):
        base = x.clone() if not through_leaf_view else (x * 1.0).view(shape)
        outputs, views = [], []
        for chain, (_, write), read in rounds:
            v = base
            for _, view, _ in chain:
                v = view(lib, v)
            views.append(v)
            # the layout torch gives the view: what decides whether later views are views
            # (not of an empty one, nor of size-1 dimensions: torch's strides there follow
            # each op's own formula, and mean nothing)
            if v.numel():
                strides = [s for s, n in zip(v.stride(), v.shape) if n > 1]
                layout = [*strides, v.storage_offset(), int(v.is_contiguous())]
                outputs.append(lib.tensor(layout, dtype=lib.int64))
            v = write(lib, v, w)
            if read:
                outputs.append(v.sin())
        # every view, read after all the writes: each must see the later writes to its base
        return outputs + views + [base]

    return program


@settings(max_examples=_examples(45), deadline=None, suppress_health_check=list(HealthCheck))
@given(view_programs(), st.integers(0, 2**16))
def test_views_written_in_place_match_torch(drawn, seed):
    shape, rounds, through_leaf_view = drawn
    rng = np.random.default_rng(seed)
    operands = [
        (rng.standard_normal(shape).round(3), "float64", True),
        (rng.uniform(-1, 1, 64).round(3), "float64", True),
    ]
    program = _view_program(shape, rounds, through_leaf_view)
    try:
        check(program, operands, order=1)
    except Mismatch as e:
        raise Mismatch(f"{_describe_views(shape, rounds, through_leaf_view)}\n{e}") from None


# -- family 2: advanced indexing -----------------------------------------------------------------
@st.composite
def index_keys(draw):
    """A shape and an index key of mixed items, as a recipe ``(kind, payload)`` per item."""
    shape = draw(st.sampled_from([(4, 5, 3), (3, 4), (5,), (2, 3, 4, 2)]))
    items, dim = [], 0
    ellipsis = False
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    for _ in range(draw(st.integers(1, 4))):
        if dim >= len(shape):
            break
        n = shape[dim]
        kind = draw(
            st.sampled_from(["int", "slice", "none", "ellipsis", "tensor", "list", "mask", "mask2"])
        )
        if kind == "int":
            items.append(("int", int(rng.integers(-n, n))))
            dim += 1
        elif kind == "slice":
            step = int(rng.integers(1, 4))
            start = int(rng.integers(-n - 1, n + 1))
            stop = None if rng.random() < 0.3 else int(rng.integers(-n - 1, n + 2))
            items.append(("slice", (start, stop, step)))
            dim += 1
        elif kind == "none":
            items.append(("none", None))
        elif kind == "ellipsis" and not ellipsis:
            ellipsis = True
            items.append(("ellipsis", None))
            dim = len(shape) - sum(1 for k, _ in items if k not in ("none", "ellipsis"))
            dim = max(dim, 0)
            # the items after ``...`` index the trailing dims: keep counting from where
            # they start
            rest = draw(st.integers(0, 1))
            dim = len(shape) - rest
        elif kind == "tensor":
            index_shape = [(3,), (2, 2), (1,), ()][int(rng.integers(0, 4))]
            index = rng.integers(-n, n, size=index_shape)
            dtype = ["int64", "int32"][int(rng.integers(0, 2))]
            items.append(("tensor", (index, dtype)))
            dim += 1
        elif kind == "list":
            items.append(("list", rng.integers(-n, n, size=2).tolist()))
            dim += 1
        elif kind == "mask":
            items.append(("mask", rng.random(n) < 0.5))
            dim += 1
        elif kind == "mask2" and dim + 1 < len(shape):
            items.append(("mask", rng.random((n, shape[dim + 1])) < 0.5))
            dim += 2
    return shape, items


def _key(lib, items):
    key = []
    for kind, payload in items:
        if kind == "int":
            key.append(payload)
        elif kind == "slice":
            key.append(slice(*payload))
        elif kind == "none":
            key.append(None)
        elif kind == "ellipsis":
            key.append(Ellipsis)
        elif kind == "tensor":
            index, dtype = payload
            key.append(lib.tensor(index, dtype=getattr(lib, dtype)))
        elif kind == "list":
            key.append(list(payload))
        else:
            key.append(lib.tensor(payload))
    return tuple(key)


@settings(max_examples=_examples(45), deadline=None, suppress_health_check=list(HealthCheck))
@given(index_keys(), st.sampled_from(["get", "set", "set_scalar", "put_acc"]), st.integers(0, 99))
def test_advanced_indexing_matches_torch(drawn, mode, seed):
    shape, items = drawn
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).round(3)

    def program(lib, x, w):
        key = _key(lib, items)
        if mode == "get":
            return x[key] * 2.0
        y = x * 1.0
        target = y[key]
        if mode == "set_scalar":
            y[key] = 7.5
            return y
        values = (w[: target.numel()] * 3.0).reshape(tuple(target.shape))
        if mode == "set":
            y[key] = values
            return [y, target]
        tensors = [k for k in key if isinstance(k, lib.Tensor) and k.dtype != lib.bool]
        if len(tensors) != len(key) or not tensors:
            y[key] += values
            return y
        shape_of = lib.broadcast_shapes(*(tuple(t.shape) for t in tensors))
        values = (w[: int(np.prod(shape_of))] * 3.0).reshape(shape_of + tuple(y.shape[len(key) :]))
        return y.index_put_(tuple(tensors), values, accumulate=True)

    operands = [(x, "float64", True), (rng.uniform(-1, 1, 256).round(3), "float64", True)]
    try:
        check(program, operands, order=1)
    except Mismatch as e:
        raise Mismatch(f"x{shape}[{items}] ({mode})\n{e}") from None


# -- family 3: dtype promotion -------------------------------------------------------------------
DTYPES = [
    "bool",
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
]
BINARY = {
    "add": lambda lib, a, b: a + b,
    "sub": lambda lib, a, b: a - b,
    "mul": lambda lib, a, b: a * b,
    "truediv": lambda lib, a, b: a / b,
    "floordiv": lambda lib, a, b: a // b,
    "mod": lambda lib, a, b: a % b,
    "pow": lambda lib, a, b: a**b,
    "maximum": lambda lib, a, b: lib.maximum(a, b),
    "minimum": lambda lib, a, b: lib.minimum(a, b),
    "eq": lambda lib, a, b: a == b,
    "lt": lambda lib, a, b: a < b,
    "where": lambda lib, a, b: lib.where(a > 1, a, b),
    "and": lambda lib, a, b: a & b,
    "xor": lambda lib, a, b: a ^ b,
    "atan2": lambda lib, a, b: lib.atan2(a, b),
    "fmod": lambda lib, a, b: lib.fmod(a, b),
    "clamp": lambda lib, a, b: lib.clamp(a, min=b),
    "copysign": lambda lib, a, b: lib.copysign(a, b),
    "iadd": lambda lib, a, b: a.add_(b),
    "imul": lambda lib, a, b: a.mul_(b),
    "isub": lambda lib, a, b: a.sub_(b),
    "idiv": lambda lib, a, b: a.div_(b),
    "ifloordiv": lambda lib, a, b: a.floor_divide_(b),
    "iclamp": lambda lib, a, b: a.clamp_(min=b),
    "ifill": lambda lib, a, b: a.masked_fill_(lib.tensor([True, False, True]), b),
    "add_alpha": lambda lib, a, b: lib.add(a, b, alpha=2),
    "rsub": lambda lib, a, b: lib.rsub(a, b),
    "ne": lambda lib, a, b: a != b,
    "ge": lambda lib, a, b: lib.ge(a, b),
    "or": lambda lib, a, b: a | b,
    "lshift": lambda lib, a, b: a << b,
    "true_divide": lambda lib, a, b: lib.true_divide(a, b),
    "floor_divide": lambda lib, a, b: lib.floor_divide(a, b),
    "div_trunc": lambda lib, a, b: lib.div(a, b, rounding_mode="trunc"),
    "hypot": lambda lib, a, b: lib.hypot(a, b),
    "logaddexp": lambda lib, a, b: lib.logaddexp(a, b),
    "xlogy": lambda lib, a, b: lib.xlogy(a, b),
    "float_power": lambda lib, a, b: lib.float_power(a, b),
    "heaviside": lambda lib, a, b: lib.heaviside(a, b),
    "where_scalar": lambda lib, a, b: lib.where(a > 1, b, 0),
    "lerp_op": lambda lib, a, b: lib.lerp(a, b, 0.5),
    "result_type": lambda lib, a, b: lib.zeros(1, dtype=lib.result_type(a, b)),
    "cat": lambda lib, a, b: lib.cat([a.reshape(-1), b.reshape(-1)]),
    "stack_like": lambda lib, a, b: lib.stack([a, lib.ones_like(a) * b]),
    "ipow": lambda lib, a, b: a.pow_(b),
    "iremainder": lambda lib, a, b: a.remainder_(b),
    "ior": lambda lib, a, b: a.__ior__(b),
    "itruediv_op": lambda lib, a, b: a.__itruediv__(b),
    "icopy": lambda lib, a, b: a.copy_(b),
    "isetitem": lambda lib, a, b: a.__setitem__(0, b) or a,
    "ilerp": lambda lib, a, b: a.lerp_(b, 0.5),
    "addcmul_op": lambda lib, a, b: lib.addcmul(a, a, b, value=2),
    "addcdiv_op": lambda lib, a, b: lib.addcdiv(a, b, b, value=2),
}
UNARY = {
    "neg": lambda lib, a: -a,
    "abs": lambda lib, a: a.abs(),
    "sqrt": lambda lib, a: a.sqrt(),
    "sum": lambda lib, a: a.sum(),
    "prod": lambda lib, a: a.prod(),
    "cumsum": lambda lib, a: a.cumsum(-1),
    "cumprod": lambda lib, a: a.cumprod(-1),
    "mean": lambda lib, a: a.mean(),
    "sign": lambda lib, a: a.sign(),
    "square": lambda lib, a: a.square(),
    "reciprocal": lambda lib, a: a.reciprocal(),
    "exp": lambda lib, a: a.exp(),
    "sigmoid": lambda lib, a: a.sigmoid(),
    "floor": lambda lib, a: a.floor(),
    "round": lambda lib, a: a.round(),
    "invert": lambda lib, a: ~a,
    "logical_not": lambda lib, a: lib.logical_not(a),
    "max": lambda lib, a: a.max(),
    "argmax": lambda lib, a: a.argmax(),
    "amax": lambda lib, a: a.amax(-1),
    "sort": lambda lib, a: a.sort(stable=True),
    "cummax": lambda lib, a: a.cummax(-1),
    "clamp_int": lambda lib, a: a.clamp(1, 3),
    "clamp_float": lambda lib, a: a.clamp(min=1.5),
    "pow_int": lambda lib, a: a**2,
    "pow_float": lambda lib, a: a**0.5,
    "rpow": lambda lib, a: 2**a,
    "mul_bool": lambda lib, a: a * True,
    "add_0d_float": lambda lib, a: a + lib.tensor(1.5),
    "add_0d_int": lambda lib, a: a + lib.tensor(2),
    "mul_0d_double": lambda lib, a: a * lib.tensor(2.0, dtype=lib.float64),
    "std": lambda lib, a: a.std(),
    "norm": lambda lib, a: a.norm(),
    "softmax": lambda lib, a: a.softmax(-1),
    "to_float_sum": lambda lib, a: a.sum(dtype=lib.float32),
    "nansum": lambda lib, a: a.nansum(),
    "trunc_div_scalar": lambda lib, a: a.div(2, rounding_mode="floor"),
    "bitwise_not": lambda lib, a: a.bitwise_not(),
    "count_nonzero": lambda lib, a: a.count_nonzero(),
    "unique": lambda lib, a: a.unique(),
    "bincount": lambda lib, a: a.reshape(-1).bincount(),
    "where_self": lambda lib, a: lib.where(a > 1, a, 1.5),
    "isin": lambda lib, a: lib.isin(a, a[..., :1]),
    "topk": lambda lib, a: a.reshape(-1).topk(1).values,
    "diff": lambda lib, a: lib.diff(a.reshape(-1)),
}


@st.composite
def promotion_operands(draw):
    def operand():
        form = draw(st.sampled_from(["tensor", "scalar0d", "int", "float", "bool"]))
        if form in ("int", "float", "bool"):
            return (form, None)
        return (form, draw(st.sampled_from(DTYPES)))

    left, right = operand(), operand()
    if left[1] is None and right[1] is None:  # two numbers: Python's arithmetic, not ours
        right = ("scalar0d", draw(st.sampled_from(DTYPES)))
    return left, right, draw(st.integers(0, 2**16))


def _values(rng, dtype, shape):
    """Small positive values (no division by zero, no overflow) and some ties."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    array = rng.integers(1, 5, size=shape).astype(np.float64)
    if dtype.startswith("float") or dtype == "bfloat16":
        array = array + rng.choice([0.0, 0.5, 0.25], size=shape)
    return array


@settings(max_examples=_examples(120), deadline=None, suppress_health_check=list(HealthCheck))
@given(promotion_operands(), st.sampled_from(sorted(BINARY)))
def test_dtype_promotion_matches_torch(drawn, op):
    left, right, seed = drawn
    half = ("float16", "bfloat16")
    if not on_torch() and (left[1] in half or right[1] in half):
        return  # the NumPy backend has no half precision (a clear DTypeError, tested elsewhere)
    rng = np.random.default_rng(seed)
    operands, makers = [], []
    for form, dtype in (left, right):
        if form == "int":
            value = int(rng.integers(1, 4))
            makers.append(lambda lib, ts, v=value: v)
        elif form == "float":
            value = float(rng.choice([0.5, 1.5, 2.0, 3.25]))
            makers.append(lambda lib, ts, v=value: v)
        elif form == "bool":
            value = bool(rng.random() < 0.5)
            makers.append(lambda lib, ts, v=value: v)
        else:
            shape = (3,) if form == "tensor" else ()
            k = len(operands)
            operands.append((_values(rng, dtype, shape), dtype, False))
            makers.append(lambda lib, ts, k=k: ts[k])

    def program(lib, *tensors):
        a, b = (make(lib, tensors) for make in makers)
        first_a_tensor = op.startswith("i") or op in ("where", "clamp", "copysign", "atan2", "fmod")
        if first_a_tensor and not isinstance(a, lib.Tensor):
            a = lib.tensor(a)  # the ops whose first operand must be a tensor
        if op in ("cat", "heaviside", "logaddexp", "hypot"):  # (tensors only, in torch)
            a, b = (v if isinstance(v, lib.Tensor) else lib.tensor(v) for v in (a, b))
        return BINARY[op](lib, a, b)

    try:
        check(program, operands, order=0)
    except Mismatch as e:
        raise Mismatch(f"{op}({left}, {right}) seed {seed}\n{e}") from None


# -- family 4: scans, sorting and selection over ties --------------------------------------------
ORDERING = {
    "cumsum": (lambda lib, x, d: x.cumsum(d), True),
    "cumprod": (lambda lib, x, d: x.cumprod(d), True),
    "logcumsumexp": (lambda lib, x, d: x.logcumsumexp(d), False),
    "cummax": (lambda lib, x, d: x.cummax(d), True),
    "cummin": (lambda lib, x, d: x.cummin(d), True),
    "sort_stable": (lambda lib, x, d: x.sort(dim=d, stable=True), True),
    "sort_desc_stable": (lambda lib, x, d: x.sort(dim=d, descending=True, stable=True), True),
    "msort": (lambda lib, x, d: lib.msort(x.transpose(0, d) if x.ndim else x), True),
    "topk_values": (lambda lib, x, d: x.topk(min(2, x.shape[d]), d).values, True),
    "topk_smallest_values": (
        lambda lib, x, d: x.topk(min(2, x.shape[d]), d, largest=False, sorted=True).values,
        True,
    ),
    "kthvalue": (lambda lib, x, d: x.kthvalue(max(1, x.shape[d] // 2), d, keepdim=True), True),
    "median_dim": (lambda lib, x, d: x.median(d), True),
    "median": (lambda lib, x, d: x.median(), True),
    "nanmedian_dim": (lambda lib, x, d: x.nanmedian(d), True),
    "mode": (lambda lib, x, d: x.mode(d), False),
    "argsort_stable": (lambda lib, x, d: x.argsort(dim=d, stable=True), True),
    "amax_ties": (lambda lib, x, d: x.amax(d), True),
    "max_dim": (lambda lib, x, d: x.max(d), True),
    "logsumexp": (lambda lib, x, d: x.logsumexp(d), False),
    "cumsum_then_cumprod": (lambda lib, x, d: (x.cumsum(d) * 0.5).cumprod(d), True),
    "sort_then_cumprod": (lambda lib, x, d: x.sort(dim=d, stable=True).values.cumprod(d), True),
    "cummax_then_logcumsumexp": (lambda lib, x, d: x.cummax(d).values.logcumsumexp(d), False),
    "quantile": (lambda lib, x, d: x.quantile(0.3, dim=d, keepdim=True), True),
    "nanquantile": (lambda lib, x, d: x.nanquantile(0.5, dim=d), True),
    "amin_ties": (lambda lib, x, d: x.amin(d, keepdim=True), True),
    "aminmax": (lambda lib, x, d: lib.aminmax(x, dim=d), True),
    "searchsorted_sorted": (
        lambda lib, x, d: lib.searchsorted(x.sort(-1).values, x.sort(-1).values[..., :2]),
        False,
    ),
}
# whose indices (and so whose gradients) torch leaves open over ties: values only there
TIE_OPEN = {"mode", "median_dim", "median", "nanmedian_dim", "kthvalue", "max_dim"}


@settings(max_examples=_examples(80), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(ORDERING)),
    st.sampled_from([(4,), (3, 5), (2, 3, 4)]),
    st.integers(0, 2**16),
    st.booleans(),
)
def test_scans_and_ordering_over_ties_match_torch(op, shape, seed, with_nan):
    rng = np.random.default_rng(seed)
    fn, nan_ok = ORDERING[op]
    pool = [0.0, 0.0, 1.0, 1.0, -1.0, 2.0, 0.5, -2.0]
    if with_nan and nan_ok and op not in ("mode",):
        pool = pool + [math.nan, math.inf, -math.inf]
    elif with_nan and op != "mode":
        pool = pool + [math.inf, -math.inf]
    x = rng.choice(pool, size=shape)
    d = int(rng.integers(-len(shape), len(shape)))
    tie_open = op in TIE_OPEN and len(np.unique(x)) < x.size
    differentiate = not tie_open

    def program(lib, x):
        out = _flatten(fn(lib, x, d))
        if tie_open:  # the values alone: which of the tied indices torch picks is open
            return [o for o in out if o.dtype != lib.int64]
        return out

    try:
        check(program, [(x, "float64", differentiate)], order=1 if differentiate else 0)
    except Mismatch as e:
        raise Mismatch(f"{op} dim {d} of\n{x}\n{e}") from None


# -- family 5: second derivatives of random compositions -----------------------------------------
SMOOTH = {
    "sin": lambda lib, a, b: a.sin(),
    "tanh_mul": lambda lib, a, b: a.tanh() * b,
    "exp_small": lambda lib, a, b: (a * 0.3).exp(),
    "softplus": lambda lib, a, b: lib.nn.functional.softplus(a),
    "sigmoid_div": lambda lib, a, b: a.sigmoid() / (b * b + 1.0),
    "matmul": lambda lib, a, b: a @ b.transpose(-1, -2) @ a * 0.2,
    "logsumexp": lambda lib, a, b: a - a.logsumexp(-1, keepdim=True),
    "softmax": lambda lib, a, b: a.softmax(-1) * b,
    "cumprod": lambda lib, a, b: (a * 0.5 + 1.0).cumprod(-1),
    "cumsum_t": lambda lib, a, b: a.transpose(-1, -2).cumsum(-1).transpose(-1, -2),
    "norm": lambda lib, a, b: a / (a.norm(dim=-1, keepdim=True) + 1.0),
    "pow": lambda lib, a, b: (a * a + 0.5) ** (b * 0.3),
    "slice_write": lambda lib, a, b: _slice_write(a, b),
    "index_put": lambda lib, a, b: (a * 1.0).index_put_(
        (lib.tensor([0, -1, 0]),), b[:3] * a[1], accumulate=True
    ),
    "masked": lambda lib, a, b: lib.where(a > b, a * b, a.square()),
    "unfold_sum": lambda lib, a, b: a + a.unfold(-1, 2, 1).prod(-1).sum(-1, keepdim=True),
    "diag_write": lambda lib, a, b: _diagonal_write(a, b),
    "lerp": lambda lib, a, b: a.lerp(b, a.sigmoid()),
    "var": lambda lib, a, b: a * a.var(-1, keepdim=True),
    "logcumsumexp": lambda lib, a, b: a.logcumsumexp(-1),
    "gelu_tanh": lambda lib, a, b: lib.nn.functional.gelu(a, approximate="tanh") + b,
    "as_strided_write": lambda lib, a, b: _as_strided_write(a, b),
    "sort_mul": lambda lib, a, b: a.sort(dim=-1).values * b,
    "cummax_mul": lambda lib, a, b: a.cummax(0).values * b.exp(),
    "kthvalue": lambda lib, a, b: a * a.kthvalue(2, -1, keepdim=True).values,
    "flip_t": lambda lib, a, b: a.flip(0) * b.t().flip(1).t(),
    "masked_fill_": lambda lib, a, b: (a * b).masked_fill_(a > 0.5, 0.25) + a.square(),
    "index_put_dupes": lambda lib, a, b: (a * 1.0).index_put_(
        (lib.tensor([1, 1, -1], dtype=lib.int32), lib.tensor([0, 0, 2])),
        b[0, :3] * a[2, :3],
        accumulate=True,
    ),
    "unfold_write": lambda lib, a, b: _unfold_write(a, b),
    "addcdiv_": lambda lib, a, b: (a * 1.0).addcdiv_(b, a.square() + 1.0, value=0.5),
}


def _as_strided_write(a, b):
    y = a * 1.0
    y.as_strided((2, 2), (4, 1), 1).mul_(b[:2, :2].sigmoid())
    return y


def _unfold_write(a, b):
    y = a * 1.0
    y.unfold(1, 2, 2).mul_(b.unfold(1, 2, 2).cos())
    return y


def _slice_write(a, b):
    y = a * 1.0
    y[:, ::2] *= b[:, ::2]
    y[-1] = b[0].tanh()
    return y


def _diagonal_write(a, b):
    y = a * b
    y.diagonal().mul_(a.diagonal().cos())
    return y


@settings(max_examples=_examples(30), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(st.tuples(st.sampled_from(sorted(SMOOTH)), st.booleans()), min_size=1, max_size=5),
    st.integers(0, 2**16),
)
def test_second_derivatives_of_random_compositions_match_torch(steps, seed):
    rng = np.random.default_rng(seed)
    operands = [(rng.uniform(-1, 1, (3, 4)).round(3), "float64", True) for _ in range(2)]

    def program(lib, a, b):
        outputs = []
        for name, swap in steps:
            left, right = (b, a) if swap else (a, b)
            a = SMOOTH[name](lib, left, right).tanh() * 1.5
            outputs.append(a)
        return outputs

    try:
        check(program, operands, order=2)
    except Mismatch as e:
        raise Mismatch(f"{steps} seed {seed}\n{e}") from None


@settings(max_examples=_examples(80), deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(DTYPES), st.sampled_from(sorted(UNARY)), st.integers(0, 2**16), st.booleans()
)
def test_unary_dtypes_match_torch(dtype, op, seed, zero_d):
    if not on_torch() and dtype in ("float16", "bfloat16"):
        return  # the NumPy backend has no half precision
    rng = np.random.default_rng(seed)
    array = _values(rng, dtype, () if zero_d else (2, 3))

    def program(lib, a):
        return UNARY[op](lib, a)

    try:
        check(program, [(array, dtype, False)], order=0)
    except Mismatch as e:
        raise Mismatch(f"{op}({dtype}{'' if zero_d else ' (2, 3)'}) seed {seed}\n{e}") from None


def test_the_check_catches_a_gradient_or_dtype_that_differs_from_torchs():
    """The harness is no test that cannot fail: a value off by 1e-4, a second derivative
    that differs, and a result dtype that differs are each reported."""
    operands = [(np.linspace(-1, 1, 12).reshape(3, 4), "float64", True)] * 2

    def off_value(lib, a, b):
        return (a * (1.0001 if lib is rg else 1.0)).sin()

    def off_second(lib, a, b):
        return a.square() if lib is rg else a.square() + (a.detach() * 0 + 1) * a

    def off_dtype(lib, a, b):
        return (a > 0).to(lib.int32 if lib is rg else lib.int64)

    for program, order in ((off_value, 1), (off_second, 2), (off_dtype, 0)):
        with pytest.raises(Mismatch):
            check(program, operands, order)
