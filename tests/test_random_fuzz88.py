"""Random programs over API.md section 2's Burn names, under every checkpointing strategy.

Each program is a random composition of Burn's tensor methods with their keyword options
(``powf powf_scalar remainder remainder_scalar recip swap_dims permute flip repeat_dim
squeeze_dim unsqueeze_dim narrow slice (steps, negative steps and negative bounds) slice_assign
select select_assign(update=) gather scatter(update=) mask_where mask_fill sum_dim mean_dim
prod_dim max_dim min_dim var max_dim_with_indices min_dim_with_indices cummin cummax
sort_with_indices topk unfold cross(other, d) clamp clamp_min clamp_max is_nan is_inf
equal_elem greater_elem lower_elem greater_equal_elem lower_equal_elem expand flatten chunk
split``) over edge shapes: size-0 and size-1 dimensions, 0-d tensors, negative dims wherever a
dim is taken, second operands of fewer dimensions (broadcasting), non-contiguous operands
(after ``permute``, ``swap_dims``, ``flip``, strided slices), float32 and float64, int64 index
tensors with repeated indices, values on a half-integer grid (ties for max/sort/cummax/clamp).

The program is drawn while it runs on torch 2.13 (the reference: its shapes decide which
arguments are valid, a call torch refuses must be refused by retrograd with an error of API.md
section 7's hierarchy). It then runs on retrograd under NoCheckpointing, BalancedCheckpointing
and BudgetCheckpointing(256) on the suite's inner backend: every value, and the gradient of
every leaf under a random weighting of every finite float value, equals torch's (float64 to
1e-9, float32 to a few ulp of the values' scale), and is bit-identical across the strategies.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, given, note, settings
from hypothesis import strategies as st

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")

#: every program builds its backends with each strategy it names
pytestmark = pytest.mark.own_checkpointing("each program runs under the three strategies")

STRATEGIES = {
    "none": rg.NoCheckpointing,
    "balanced": rg.BalancedCheckpointing,
    "budget": lambda: rg.BudgetCheckpointing(256),
}

#: ``FUZZ88_EXAMPLES=2000`` explores (random, not derandomized); CI runs the fixed examples
EXPLORE = int(os.environ.get("FUZZ88_EXAMPLES", "0"))

FUZZ = settings(
    derandomize=not EXPLORE,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    **({"phases": [Phase.generate]} if EXPLORE else {}),
)

TOLERANCES = {"float64": dict(rtol=1e-9, atol=1e-11), "float32": dict(rtol=2e-5, atol=2e-6)}

MAX_STEPS = 10


# -- drawing ---------------------------------------------------------------------------------
def _dim(data, ndim: int, label: str = "dim") -> int:
    """A dim of an ``ndim``-d tensor, negative half the time."""
    if data.draw(st.integers(0, 24), label=f"{label} out of range") == 0:  # a refusal
        return data.draw(st.sampled_from([ndim, -ndim - 1]), label=label)
    d = data.draw(st.integers(0, ndim - 1), label=label)
    return d - ndim if data.draw(st.booleans(), label=f"{label} negative") else d


def _size(shape, d: int) -> int:
    """The size of dim ``d`` of ``shape``; 1 for a dim out of range (that torch refuses)."""
    return shape[d] if -len(shape) <= d < len(shape) else 1


def _shape(data, max_ndim: int = 4) -> tuple[int, ...]:
    ndim = data.draw(st.integers(0, max_ndim), label="ndim")
    sizes = st.sampled_from([0, 1, 1, 2, 2, 3, 3, 4])
    return tuple(data.draw(sizes, label="size") for _ in range(ndim))


def _fewer_dims(data, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: a suffix of it, some sizes set to 1."""
    keep = data.draw(st.integers(0, len(shape)), label="operand ndim")
    suffix = shape[len(shape) - keep :]
    return tuple(1 if data.draw(st.booleans(), label="to 1") else n for n in suffix)


def _array(data, shape: tuple[int, ...]) -> np.ndarray:
    seed = data.draw(st.integers(0, 2**32 - 1), label="values seed")
    rng = np.random.default_rng([seed, len(_DRAWN)])  # (shrunk seeds of 0 stay distinct)
    _DRAWN.append(shape)
    values = rng.uniform(-2.0, 2.0, shape)
    if data.draw(st.booleans(), label="on a half grid"):  # ties for max, sort, cummax, clamp
        values = np.round(values * 2) / 2
    return values


#: the arrays drawn for the program being drawn (their count salts the next one's seed)
_DRAWN: list = []


def _indices(data, count: int, bound: int, unique: bool = False) -> np.ndarray:
    """``count`` int64 indices in ``[0, bound)``: repeats likely unless ``unique``."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="indices seed")
    rng = np.random.default_rng(seed)
    if unique:
        return rng.permutation(bound)[:count].astype(np.int64)
    return rng.integers(0, max(bound, 1), count).astype(np.int64)


class Program:
    """Steps recorded as they run on torch: leaves (tracked float inputs), constants (int64
    index tensors) and ops, each op a pair of functions (retrograd's, torch's) of its operands'
    values, or an op torch refused (``refused`` holds torch's error)."""

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.steps: list[tuple] = []
        self.torch_values: list = []
        self.torch_leaves: list = []
        self.index_constants: set[int] = set()

    def leaf(self, array: np.ndarray, dtype: str | None = None) -> int:
        dtype = dtype or self.dtype
        value = torch.tensor(array, dtype=getattr(torch, dtype), requires_grad=True)
        self.steps.append(("leaf", array, dtype))
        self.torch_leaves.append(value)
        self.torch_values.append(value)
        return len(self.torch_values) - 1

    def constant(self, array: np.ndarray, index: bool = True) -> int:
        """An untracked tensor: an int64 index (``index``), or an int64 program value."""
        self.steps.append(("constant", array))
        self.torch_values.append(torch.tensor(array))
        if index:
            self.index_constants.add(len(self.torch_values) - 1)
        return len(self.torch_values) - 1

    def op(self, name: str, operands: list[int], ours, theirs) -> list[int]:
        """Runs ``theirs`` on the operands' torch values; the indices of its outputs (none when
        torch refused the call)."""
        args = [self.torch_values[i] for i in operands]
        try:
            out = theirs(*args)
        except (RuntimeError, IndexError, ValueError) as error:
            self.steps.append(("refused", name, operands, ours, error))
            event(f"refused {name.split('(')[0]}")
            note(f"{name}: torch refused: {error}")
            return []
        outs = list(out) if isinstance(out, tuple) else [out]
        self.steps.append(("op", name, operands, ours, len(outs)))
        event(name.split("(")[0])
        first = len(self.torch_values)
        self.torch_values.extend(outs)
        shapes = [tuple(o.shape) for o in outs]
        note(f"v{first}.. = {name}{tuple(f'v{i}' for i in operands)} -> {shapes}")
        return list(range(first, len(self.torch_values)))

    def floats(self) -> list[int]:
        return [i for i, v in enumerate(self.torch_values) if v.is_floating_point()]

    def ints(self) -> list[int]:
        """Int64 values (index constants are left out: they are not program values)."""
        return [
            i
            for i, v in enumerate(self.torch_values)
            if v.dtype == torch.int64 and i not in self.index_constants
        ]

    def masks(self) -> list[int]:
        return [i for i, v in enumerate(self.torch_values) if v.dtype == torch.bool]


def _ranges(data, shape):
    """Burn ``slice`` ranges over some leading dims, and torch's equivalent of each (a
    function of the tensor and the dim); ``(start, end)`` pairs and slices with steps
    (negative steps walk the range backwards), negative bounds counting from the end."""
    count = data.draw(st.integers(0, len(shape)), label="ranges")
    ours, theirs = [], []
    for n in shape[:count]:
        start = data.draw(st.integers(0, n), label="start")
        end = data.draw(st.integers(start, n), label="end")
        step = data.draw(st.sampled_from([1, 1, 2, 3, -1, -2]), label="step")
        ours_start = start - n if start < n and data.draw(st.booleans(), label="neg") else start
        ours_end = end - n if 0 < end < n and data.draw(st.booleans(), label="neg") else end
        if step == 1 and data.draw(st.booleans(), label="pair"):
            ours.append((ours_start, ours_end))
        else:
            ours.append(slice(ours_start, ours_end, step))
        theirs.append((start, end, step))
    return ours, theirs


def _torch_view(x, ranges):
    """torch's view of Burn's ``ranges`` (``(start, end, step)`` each, bounds normalized) with
    positive steps, and the dims a negative step walks backwards (to flip)."""
    index, flipped = [], []
    for d, (start, end, step) in enumerate(ranges):
        if step < 0 and end > start:  # the elements end-1, end-1-|step|, ... from the smallest
            start = end - 1 - (end - 1 - start) // -step * -step
            flipped.append(d)
        index.append(slice(start, end, abs(step)))
    return x[tuple(index)], flipped


def _torch_slice(x, ranges):
    view, flipped = _torch_view(x, ranges)
    return view.flip(flipped) if flipped else view


def _region(shape, ranges):
    sizes = tuple(len(range(0, end - start, abs(step))) for start, end, step in ranges)
    return sizes + tuple(shape[len(ranges) :])


def _promoted(a, v, *between):
    """``a``, ``between``, ``v``, the two tensors cast to their promoted dtype: Burn's
    ``select_assign``, ``scatter(update=)`` and ``slice_assign`` promote a source of another
    float dtype (CHANGELOG: "Index writes refuse another dtype"), torch's index writes refuse
    it."""
    common = torch.promote_types(a.dtype, v.dtype)
    return (a.to(common), *between, v.to(common))


#: the families an int64 operand takes (Burn's int tensors: no float-only op, no write of a
#: float source into an int tensor)
INT_FAMILIES = [
    "layout",
    "shape",
    "slice",
    "select",
    "gather",
    "mask",
    "reduce",
    "with_indices",
    "cumulative",
    "sort",
    "topk",
    "unfold",
    "clamp",
    "more",
]


def _draw_step(data, p: Program) -> None:
    ints = p.ints()
    on_int = bool(ints) and data.draw(st.integers(0, 4), label="int operand") == 0
    i = data.draw(st.sampled_from(ints if on_int else p.floats()), label="operand")
    x = p.torch_values[i]
    shape, n = tuple(x.shape), x.ndim
    family = data.draw(
        st.sampled_from(
            INT_FAMILIES
            if on_int
            else [
                "elementwise",
                "binary",
                "layout",
                "layout",
                "shape",
                "slice",
                "slice_assign",
                "select",
                "select_assign",
                "gather",
                "scatter",
                "mask",
                "reduce",
                "reduce",
                "with_indices",
                "cumulative",
                "sort",
                "topk",
                "unfold",
                "cross",
                "clamp",
                "more",
                "more",
            ]
        ),
        label="family",
    )
    if family == "elementwise":
        kind = data.draw(
            st.sampled_from(["powf_scalar", "remainder_scalar", "recip", "abs_exp", "square"])
        )
        if kind == "powf_scalar":
            power = data.draw(st.sampled_from([0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 1.5, -2.5]))
            if power in (1.0, 2.0, 3.0, 0.0):
                p.op(
                    f"powf_scalar({power})",
                    [i],
                    lambda a: a.powf_scalar(power),
                    lambda a: a.pow(power),
                )
            else:
                p.op(
                    f"(|.| + 0.25).powf_scalar({power})",
                    [i],
                    lambda a: (a.abs() + 0.25).powf_scalar(power),
                    lambda a: (a.abs() + 0.25).pow(power),
                )
        elif kind == "remainder_scalar":
            divisor = data.draw(st.sampled_from([1.5, -2.0, 0.75, 1.0]))
            p.op(
                f"remainder_scalar({divisor})",
                [i],
                lambda a: a.remainder_scalar(divisor),
                lambda a: torch.remainder(a, divisor),
            )
        elif kind == "recip":
            p.op(
                "(|.| + 0.25).recip()",
                [i],
                lambda a: (a.abs() + 0.25).recip(),
                lambda a: (a.abs() + 0.25).reciprocal(),
            )
        elif kind == "abs_exp":
            p.op(
                "abs().neg().exp()",
                [i],
                lambda a: a.abs().neg().exp(),
                lambda a: a.abs().neg().exp(),
            )
        else:
            p.op("square", [i], lambda a: a.square(), lambda a: a.square())
    elif family == "binary":
        kind = data.draw(st.sampled_from(["add", "sub", "mul", "div", "powf", "remainder"]))
        # (a float32 exponent of a float64 base: torch's base gradient computes exponent - 1
        # in float32, 1e-7 off the exact one retrograd computes; not compared)
        other = _binary_operand(data, p, shape, mixed_ok=kind != "powf")
        if kind == "div":
            p.op(
                "div(|.| + 0.5)",
                [i, other],
                lambda a, b: a.div(b.abs() + 0.5),
                lambda a, b: a / (b.abs() + 0.5),
            )
        elif kind == "powf":
            p.op(
                "(|.| + 0.25).powf",
                [i, other],
                lambda a, b: (a.abs() + 0.25).powf(b),
                lambda a, b: (a.abs() + 0.25).pow(b),
            )
        elif kind == "remainder":
            p.op(
                "remainder(|.| + 0.5)",
                [i, other],
                lambda a, b: a.remainder(b.abs() + 0.5),
                lambda a, b: torch.remainder(a, b.abs() + 0.5),
            )
        else:
            p.op(
                kind, [i, other], lambda a, b: getattr(a, kind)(b), lambda a, b: getattr(a, kind)(b)
            )
    elif family == "layout":
        if n == 0:
            p.op("unsqueeze_dim(0)", [i], lambda a: a.unsqueeze_dim(0), lambda a: a.unsqueeze(0))
            return
        kind = data.draw(st.sampled_from(["swap_dims", "permute", "flip", "strided"]))
        if kind == "swap_dims":
            a_, b_ = _dim(data, n), _dim(data, n)
            p.op(
                f"swap_dims({a_}, {b_})",
                [i],
                lambda a: a.swap_dims(a_, b_),
                lambda a: a.transpose(a_, b_),
            )
        elif kind == "permute":
            order = data.draw(st.permutations(range(n)))
            order = [d - n if data.draw(st.booleans()) else d for d in order]
            p.op(f"permute({order})", [i], lambda a: a.permute(order), lambda a: a.permute(order))
        elif kind == "flip":
            dims = sorted({_dim(data, n) % n for _ in range(data.draw(st.integers(1, n)))})
            dims = [d - n if data.draw(st.booleans()) else d for d in dims]
            p.op(f"flip({dims})", [i], lambda a: a.flip(dims), lambda a: a.flip(dims))
        else:
            d = data.draw(st.integers(0, n - 1))
            step = data.draw(st.integers(2, 3))
            index = (slice(None),) * d + (slice(None, None, step),)
            p.op(f"[{d}: ::{step}]", [i], lambda a: a[index], lambda a: a[index])
    elif family == "shape":
        kind = data.draw(
            st.sampled_from(
                [
                    "repeat_dim",
                    "squeeze_dim",
                    "unsqueeze_dim",
                    "narrow",
                    "expand",
                    "flatten",
                    "chunk",
                    "split",
                ]
            )
        )
        if kind == "unsqueeze_dim" or n == 0:
            d = data.draw(st.integers(-(n + 1), n))
            p.op(f"unsqueeze_dim({d})", [i], lambda a: a.unsqueeze_dim(d), lambda a: a.unsqueeze(d))
        elif kind == "repeat_dim":
            d, times = _dim(data, n), data.draw(st.integers(0, 3))
            reps = [times if k == d % n else 1 for k in range(n)]
            p.op(
                f"repeat_dim({d}, {times})",
                [i],
                lambda a: a.repeat_dim(d, times),
                lambda a: a.repeat(reps) if -n <= d < n else a.sum(d),  # (sum refuses d)
            )
        elif kind == "squeeze_dim":
            ones = [k for k in range(n) if shape[k] == 1]
            if not ones:
                return
            d = data.draw(st.sampled_from(ones))
            d = d - n if data.draw(st.booleans()) else d
            p.op(f"squeeze_dim({d})", [i], lambda a: a.squeeze_dim(d), lambda a: a.squeeze(d))
        elif kind == "narrow":
            d = _dim(data, n)
            size = _size(shape, d)
            start = data.draw(st.integers(0, size))
            length = data.draw(st.integers(0, size - start))
            p.op(
                f"narrow({d}, {start}, {length})",
                [i],
                lambda a: a.narrow(d, start, length),
                lambda a: a.narrow(d, start, length),
            )
        elif kind == "expand":
            lead = data.draw(st.sampled_from([(), (2,), (0,), (1, 3)]))
            target = lead + tuple(
                data.draw(st.sampled_from([2, 3])) if s == 1 and data.draw(st.booleans()) else s
                for s in shape
            )
            p.op(f"expand({target})", [i], lambda a: a.expand(target), lambda a: a.expand(target))
        elif kind == "flatten":
            start = _dim(data, n)
            end = data.draw(st.integers(start % n, n - 1))
            end = end - n if data.draw(st.booleans()) else end
            p.op(
                f"flatten({start}, {end})",
                [i],
                lambda a: a.flatten(start, end),
                lambda a: a.flatten(start, end),
            )
        else:
            d = _dim(data, n)
            if kind == "chunk":
                count = data.draw(st.integers(1, 3))
                p.op(
                    f"chunk({count}, {d})",
                    [i],
                    lambda a: tuple(a.chunk(count, d)),
                    lambda a: tuple(a.chunk(count, d)),
                )
            else:
                size = data.draw(st.integers(1, 3))
                p.op(
                    f"split({size}, {d})",
                    [i],
                    lambda a: tuple(a.split(size, d)),
                    lambda a: tuple(a.split(size, d)),
                )
    elif family == "slice":
        ours, theirs = _ranges(data, shape)
        p.op(f"slice({ours})", [i], lambda a: a.slice(ours), lambda a: _torch_slice(a, theirs))
    elif family == "slice_assign":
        ours, theirs = _ranges(data, shape)
        region = _region(shape, theirs)
        values = p.leaf(_array(data, _fewer_dims(data, region)))

        def torch_slice_assign(a, v):
            a, v = _promoted(a, v)
            out = a.clone()
            view, flipped = _torch_view(out, theirs)
            v = v.expand(region)
            view.copy_(v.flip(flipped) if flipped else v)
            return out

        p.op(
            f"slice_assign({ours})",
            [i, values],
            lambda a, v: a.slice_assign(ours, v),
            torch_slice_assign,
        )
    elif family in ("select", "select_assign"):
        if n == 0:
            _draw_scalar_index(data, p, i, family)
            return
        d = _dim(data, n)
        size = _size(shape, d)
        update = data.draw(st.sampled_from(["add", "assign"]))
        unique = family == "select_assign" and update == "assign"
        count = data.draw(st.integers(0, size if unique else 4)) if size else 0
        idx = p.constant(_indices(data, count, size, unique))
        if family == "select":
            p.op(
                f"select({d})",
                [i, idx],
                lambda a, k: a.select(d, k),
                lambda a, k: a.index_select(d, k),
            )
            return
        values_shape = list(shape)
        values_shape[d % n] = count
        values = p.leaf(_array(data, tuple(values_shape)))
        if update == "add":
            theirs = lambda a, k, v: torch.index_add(*_promoted(a, v, d, k))  # noqa: E731
        else:
            theirs = lambda a, k, v: torch.index_copy(*_promoted(a, v, d, k))  # noqa: E731
        p.op(
            f"select_assign({d}, update={update})",
            [i, idx, values],
            lambda a, k, v: a.select_assign(d, k, v, update=update),
            theirs,
        )
    elif family in ("gather", "scatter"):
        if n == 0:
            _draw_scalar_index(data, p, i, family)
            return
        d = _dim(data, n)
        update = data.draw(st.sampled_from(["add", "assign"]))
        unique = family == "scatter" and update == "assign"
        index_shape = [data.draw(st.integers(0, s)) for s in shape]
        along = _size(shape, d)
        index_shape[d % n] = (
            data.draw(st.integers(0, along)) if unique else data.draw(st.integers(0, 4))
        )
        if along == 0:
            index_shape[d % n] = 0
        count = int(np.prod(index_shape))
        if (
            unique and count and -n <= d < n
        ):  # distinct targets along d in each line: a permutation's prefix
            moved = np.moveaxis(np.zeros(index_shape, np.int64), d, -1)
            flat = moved.reshape(-1, moved.shape[-1])
            for row in range(flat.shape[0]):
                flat[row] = _indices(data, flat.shape[1], along, unique=True)
            index = np.moveaxis(flat.reshape(moved.shape), -1, d)
        elif unique:
            index = np.zeros(index_shape, np.int64)
        else:
            index = _indices(data, count, along).reshape(index_shape)
        idx = p.constant(np.ascontiguousarray(index))
        if family == "gather":
            p.op(
                f"gather({d})",
                [i, idx],
                lambda a, k: a.gather(d, k),
                lambda a, k: torch.gather(a, d, k),
            )
            return
        values = p.leaf(_array(data, tuple(index_shape)))
        if update == "add":
            theirs = lambda a, k, v: torch.scatter_add(*_promoted(a, v, d, k))  # noqa: E731
        else:
            theirs = lambda a, k, v: torch.scatter(*_promoted(a, v, d, k))  # noqa: E731
        p.op(
            f"scatter({d}, update={update})",
            [i, idx, values],
            lambda a, k, v: a.scatter(d, k, v, update=update),
            theirs,
        )
    elif family == "mask":
        mask = _mask(data, p, shape)
        if data.draw(st.booleans(), label="mask_fill"):
            fill = data.draw(st.sampled_from([0, -2, 3] if on_int else [0.0, -1.5, 3.0]))
            p.op(
                f"mask_fill({fill})",
                [i, mask],
                lambda a, m: a.mask_fill(m, fill),
                lambda a, m: a.masked_fill(m, fill),
            )
        else:
            values = _binary_operand(data, p, shape)
            p.op(
                "mask_where",
                [i, mask, values],
                lambda a, m, v: a.mask_where(m, v),
                lambda a, m, v: torch.where(m, v, a),
            )
    elif family == "reduce":
        if n == 0:
            return
        d = _dim(data, n)
        # (an int mean_dim is a float mean here, where torch refuses and Burn divides ints:
        # test_burn_tensor_ports_4's documented departure)
        kinds = ["sum", "prod", "max", "min", "var"] + ([] if on_int else ["mean"])
        kind = data.draw(st.sampled_from(kinds))
        if kind == "var":
            p.op(f"var({d})", [i], lambda a: a.var(d), lambda a: a.var(d))
        elif kind in ("max", "min"):
            p.op(
                f"{kind}_dim({d})",
                [i],
                lambda a: getattr(a, f"{kind}_dim")(d),
                lambda a: getattr(a, kind)(d, keepdim=True).values,
            )
        else:
            p.op(
                f"{kind}_dim({d})",
                [i],
                lambda a: getattr(a, f"{kind}_dim")(d),
                lambda a: getattr(a, kind)(d, keepdim=True),
            )
    elif family == "with_indices":
        if n == 0:
            return
        d = _dim(data, n)
        kind = data.draw(st.sampled_from(["max", "min"]))
        p.op(
            f"{kind}_dim_with_indices({d})",
            [i],
            lambda a: tuple(getattr(a, f"{kind}_dim_with_indices")(d)),
            lambda a: tuple(getattr(a, kind)(d, keepdim=True)),
        )
    elif family == "cumulative":
        if n == 0:
            return
        d = _dim(data, n)
        if not -n <= d < n and x.numel() == 0:  # (torch's cummin/cummax check no dim then)
            return
        kind = data.draw(st.sampled_from(["cummin", "cummax"]))
        p.op(
            f"{kind}({d})",
            [i],
            lambda a: tuple(getattr(a, kind)(d)),
            lambda a: tuple(getattr(torch, kind)(a, d)),
        )
    elif family == "sort":
        if n == 0:
            return
        d = _dim(data, n)
        descending = data.draw(st.booleans())
        p.op(
            f"sort_with_indices({d}, descending={descending})",
            [i],
            lambda a: tuple(a.sort_with_indices(d, descending=descending)),
            lambda a: tuple(torch.sort(a, dim=d, descending=descending, stable=True)),
        )
    elif family == "topk":
        if n == 0:
            return
        d = _dim(data, n)
        k = data.draw(st.integers(0, _size(shape, d)))
        p.op(
            f"topk({k}, {d})",
            [i],
            lambda a: a.topk(k, d).values,
            lambda a: torch.topk(a, k, d).values,
        )
    elif family == "unfold":
        if n == 0:
            return
        d = _dim(data, n)
        size = data.draw(st.integers(0, _size(shape, d)))
        step = data.draw(st.integers(1, 3))
        p.op(
            f"unfold({d}, {size}, {step})",
            [i],
            lambda a: a.unfold(d, size, step),
            lambda a: a.unfold(d, size, step),
        )
    elif family == "cross":
        threes = [k for k in range(n) if shape[k] == 3]
        if not threes:
            return
        d = data.draw(st.sampled_from(threes))
        d = d - n if data.draw(st.booleans()) else d
        # (not x with itself: its exact zeros are rounding noise in torch's float32 kernel,
        # whose ties a later max/sort breaks differently)
        other = _binary_operand(data, p, shape, keep=[d % n], besides=i)

        # (torch's linalg.cross broadcasts operands of one ndim; Burn's and API.md's cross
        # takes an operand of fewer dims too)
        def theirs(a, b):
            return torch.linalg.cross(a, b.reshape((1,) * (n - b.ndim) + b.shape), dim=d)

        with torch.no_grad():
            probe = theirs(x, p.torch_values[other].to(x.dtype))
        if bool((probe.abs() < 1e-6).any()):  # parallel operands (equal values, a sorted
            return  # copy): torch's zeros are rounding noise, whose ties a sort breaks its way
        p.op(f"cross(other, {d})", [i, other], lambda a, b: a.cross(b, d), theirs)
    elif family == "more":
        _draw_more(data, p, i, shape, on_int)
    elif family == "clamp":
        grid = [-1, 0, 1, 2] if on_int else [-1.0, -0.5, 0.0, 0.5, 1.0]
        kind = data.draw(st.sampled_from(["clamp_min", "clamp_max", "clamp"]))
        if kind == "clamp":
            low = data.draw(st.sampled_from(grid))
            high = data.draw(st.sampled_from([g for g in grid if g >= low]))
            p.op(
                f"clamp({low}, {high})",
                [i],
                lambda a: a.clamp(low, high),
                lambda a: a.clamp(low, high),
            )
        else:
            bound = data.draw(st.sampled_from(grid))
            keyword = "min" if kind == "clamp_min" else "max"
            p.op(
                f"{kind}({bound})",
                [i],
                lambda a: getattr(a, kind)(bound),
                lambda a: a.clamp(**{keyword: bound}),
            )


def _draw_scalar_index(data, p: Program, i: int, family: str) -> None:
    """An index op on a 0-d tensor: torch's rules (dim 0 or -1, the one value seen as [1];
    ``index_select``/``index_add`` take an index of one entry, ``gather``/``scatter_add`` of
    any count); ``"add"`` updates only (an assign of repeated indices has no one answer)."""
    d = data.draw(st.sampled_from([0, -1]))
    index_shape = data.draw(st.sampled_from([(1,), (2,), ()]))
    idx = p.constant(np.zeros(index_shape, np.int64))
    if family == "select":
        p.op(
            f"select({d}) of 0-d",
            [i, idx],
            lambda a, k: a.select(d, k),
            lambda a, k: torch.index_select(a, d, k),
        )
    elif family == "gather":
        p.op(
            f"gather({d}) of 0-d",
            [i, idx],
            lambda a, k: a.gather(d, k),
            lambda a, k: torch.gather(a, d, k),
        )
    elif family == "select_assign":
        values = p.leaf(_array(data, ()))
        p.op(
            f"select_assign({d}) of 0-d",
            [i, idx, values],
            lambda a, k, v: a.select_assign(d, k, v, update="add"),
            lambda a, k, v: torch.index_add(*_promoted(a, v, d, k)),
        )
    else:
        values = p.leaf(_array(data, index_shape))
        p.op(
            f"scatter({d}) of 0-d",
            [i, idx, values],
            lambda a, k, v: a.scatter(d, k, v, update="add"),
            lambda a, k, v: torch.scatter_add(*_promoted(a, v, d, k)),
        )


def _draw_more(data, p: Program, i: int, shape, on_int: bool) -> None:
    """The other section 2 names: argmax/argmin, sort/argsort, cumsum/cumprod, whole-tensor
    reductions, cat/stack, reshape, transpose, int entries of slice, select of one index,
    gather by Burn's keyword, mask_fill with a non-finite value, clamp with min above max."""
    n = len(shape)
    float_only = {"mask_fill_nonfinite", "clamp_crossed"}
    kind = data.draw(
        st.sampled_from(
            [
                "argmax",
                "argmin",
                "sort",
                "argsort",
                "cumsum",
                "cumprod",
                "whole",
                "cat",
                "stack",
                "reshape",
                "transpose",
                "slice_int",
                "select_int",
                "gather_keyword",
                "mask_fill_nonfinite",
                "clamp_crossed",
            ]
        ).filter(lambda kind: not (on_int and kind in float_only)),
        label="more",
    )
    if kind in ("cat", "stack"):
        dtype = p.torch_values[i].dtype
        others = [
            k
            for k in p.floats() + p.ints()
            if tuple(p.torch_values[k].shape) == tuple(shape) and p.torch_values[k].dtype == dtype
        ]
        parts = [i] + [
            data.draw(st.sampled_from(others)) for _ in range(data.draw(st.integers(0, 2)))
        ]
        top = n if kind == "cat" else n + 1
        if top == 0:
            return
        d = _dim(data, top)
        if kind == "cat":
            p.op(
                f"cat(dim={d})",
                parts,
                lambda *a: rg.cat(list(a), d),
                lambda *a: torch.cat(list(a), d),
            )
        else:
            p.op(
                f"stack(dim={d})",
                parts,
                lambda *a: rg.stack(list(a), d),
                lambda *a: torch.stack(list(a), d),
            )
        return
    if kind == "whole":
        reduce = data.draw(st.sampled_from(["sum", "mean", "prod", "max", "min"]))
        p.op(f"{reduce}()", [i], lambda a: getattr(a, reduce)(), lambda a: getattr(a, reduce)())
        return
    if kind == "reshape":
        p.op("reshape(-1)", [i], lambda a: a.reshape((-1,)), lambda a: a.reshape(-1))
        return
    if kind == "mask_fill_nonfinite":
        mask = _mask(data, p, shape)
        fill = data.draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
        p.op(
            f"mask_fill({fill})",
            [i, mask],
            lambda a, m: a.mask_fill(m, fill),
            lambda a, m: a.masked_fill(m, fill),
        )
        return
    if kind == "clamp_crossed":  # torch's: every element is max when min > max
        p.op("clamp(0.5, -0.5)", [i], lambda a: a.clamp(0.5, -0.5), lambda a: a.clamp(0.5, -0.5))
        return
    if n == 0:
        return
    if kind == "transpose":
        if n < 2:
            return
        p.op("transpose()", [i], lambda a: a.transpose(), lambda a: a.transpose(-2, -1))
        return
    d = _dim(data, n)
    if kind in ("argmax", "argmin"):
        p.op(f"{kind}({d})", [i], lambda a: getattr(a, kind)(d), lambda a: getattr(a, kind)(d))
    elif kind == "sort":
        descending = data.draw(st.booleans())
        p.op(
            f"sort({d}, descending={descending})",
            [i],
            lambda a: a.sort(d, descending=descending).values,
            lambda a: torch.sort(a, dim=d, descending=descending, stable=True).values,
        )
    elif kind == "argsort":
        descending = data.draw(st.booleans())
        p.op(
            f"argsort({d}, descending={descending})",
            [i],
            lambda a: a.argsort(d, descending=descending),
            lambda a: torch.sort(a, dim=d, descending=descending, stable=True).indices,
        )
    elif kind in ("cumsum", "cumprod"):
        p.op(f"{kind}({d})", [i], lambda a: getattr(a, kind)(d), lambda a: getattr(a, kind)(d))
    elif kind == "slice_int":
        d %= n  # (slice takes no dim)
        if _size(shape, d) == 0:
            return
        k = data.draw(st.integers(-_size(shape, d), _size(shape, d) - 1))
        ranges = [slice(None)] * d + [k]
        p.op(
            f"slice({ranges})",
            [i],
            lambda a: a.slice(ranges),
            lambda a: a.narrow(d, k % _size(shape, d), 1),
        )
    elif kind == "select_int":
        if _size(shape, d) == 0:
            return
        k = data.draw(st.integers(-_size(shape, d), _size(shape, d) - 1))
        p.op(f"select({d}, {k})", [i], lambda a: a.select(d, k), lambda a: a.select(d, k))
    else:  # gather with Burn's keyword, indices of another length along d
        if _size(shape, d) == 0:
            return
        index_shape = list(shape)
        index_shape[d % n] = data.draw(st.integers(0, 4))
        index = _indices(data, int(np.prod(index_shape)), _size(shape, d)).reshape(index_shape)
        idx = p.constant(index)
        p.op(
            f"gather({d}, indices=)",
            [i, idx],
            lambda a, k: a.gather(d, indices=k),
            lambda a, k: torch.gather(a, d, k),
        )


def _binary_operand(data, p: Program, shape, keep=(), besides=None, mixed_ok=True) -> int:
    """A second operand for ``shape``: a value of that shape, or a new leaf of fewer dims
    (sizes in ``keep``, counted from the front of ``shape``, are never broadcast)."""
    same = [
        k
        for k in p.floats()
        if tuple(p.torch_values[k].shape) == tuple(shape)
        and k != besides
        and (mixed_ok or p.torch_values[k].dtype == getattr(torch, p.dtype))
    ]
    if same and data.draw(st.booleans(), label="existing operand"):
        return data.draw(st.sampled_from(same))
    operand = list(_fewer_dims(data, shape))
    offset = len(shape) - len(operand)
    for k in keep:  # cross: the size-3 dim stays, and is present
        if k < offset:
            operand = list(shape[k:offset]) + operand
            offset = k
        operand[k - offset] = shape[k]
    other_dtype = "float32" if p.dtype == "float64" else "float64"
    mixed = mixed_ok and data.draw(st.sampled_from([False, False, False, True]), label="mixed")
    return p.leaf(_array(data, tuple(operand)), other_dtype if mixed else None)


def _mask(data, p: Program, shape) -> int:
    """A bool mask that broadcasts against ``shape``: a comparison of a value or a new leaf."""
    masks = [k for k in p.masks() if _broadcasts(tuple(p.torch_values[k].shape), shape)]
    if masks and data.draw(st.booleans(), label="existing mask"):
        return data.draw(st.sampled_from(masks))
    source = _binary_operand(data, p, shape)
    kind = data.draw(
        st.sampled_from(
            [
                "equal_elem",
                "greater_elem",
                "lower_elem",
                "greater_equal_elem",
                "lower_equal_elem",
                "is_nan",
                "is_inf",
            ]
        )
    )
    if kind in ("is_nan", "is_inf"):
        torch_name = kind.replace("_", "")
        return p.op(
            kind, [source], lambda a: getattr(a, kind)(), lambda a: getattr(torch, torch_name)(a)
        )[0]
    value = data.draw(st.sampled_from([0.0, 0.5, -1.0]))
    torch_name = {
        "equal_elem": "eq",
        "greater_elem": "gt",
        "lower_elem": "lt",
        "greater_equal_elem": "ge",
        "lower_equal_elem": "le",
    }[kind]
    return p.op(
        f"{kind}({value})",
        [source],
        lambda a: getattr(a, kind)(value),
        lambda a: getattr(a, torch_name)(value),
    )[0]


def _broadcasts(small, shape) -> bool:
    if len(small) > len(shape):
        return False
    return all(s in (1, n) for s, n in zip(small[::-1], shape[::-1]))


def _draw_program(data, dtype: str) -> Program:
    p = Program(dtype)
    _DRAWN.clear()
    for _ in range(data.draw(st.integers(1, 2), label="leaves")):
        p.leaf(_array(data, _shape(data)))
    if data.draw(st.booleans(), label="an int64 input"):  # on a grid of few values: ties
        p.constant(np.round(_array(data, _shape(data)) * 1.5).astype(np.int64), index=False)
    for _ in range(data.draw(st.integers(2, MAX_STEPS), label="steps")):
        _draw_step(data, p)
    return p


# -- running on retrograd and comparing ------------------------------------------------------
def _weights(p: Program, seed: int) -> dict[int, np.ndarray]:
    """A random weight for every finite float value torch computed (not the leaves)."""
    rng = np.random.default_rng(seed)
    leaves = {i for i, step in enumerate(_value_steps(p)) if step[0] == "leaf"}
    weights = {}
    for k in p.floats():
        value = p.torch_values[k]
        if k in leaves or not bool(torch.isfinite(value).all()):
            continue
        weights[k] = rng.uniform(-1, 1, tuple(value.shape))
    return weights


def _value_steps(p: Program) -> list[tuple]:
    """Each value's step (an op with several outputs once per output)."""
    out = []
    for step in p.steps:
        if step[0] in ("leaf", "constant"):
            out.append(step)
        elif step[0] == "op":
            out.extend([step] * step[4])
    return out


def _run_retrograd(p: Program, strategy: str, weights):
    with rg.use_backend(rg.Autodiff(inner_backend(), STRATEGIES[strategy]())):
        values, leaves = [], []
        for step in p.steps:
            if step[0] == "leaf":
                leaf = rg.tensor(step[1].astype(step[2])).require_grad()
                leaves.append(leaf)
                values.append(leaf)
            elif step[0] == "constant":
                values.append(rg.tensor(step[1]))
            elif step[0] == "refused":
                _, name, operands, ours, error = step
                try:
                    ours(*[values[k] for k in operands])
                except rg.RetrogradError as refusal:
                    if "Dimension out of range" in str(error):  # API.md section 7
                        assert isinstance(refusal, rg.ShapeError), f"{name}: {refusal!r}"
                else:
                    pytest.fail(f"{name}: retrograd did not refuse what torch did ({error!r})")
            else:
                _, name, operands, ours, count = step
                out = ours(*[values[k] for k in operands])
                outs = list(out) if isinstance(out, tuple) else [out]
                assert len(outs) == count, name
                values.extend(outs)
        loss = None
        for k, w in weights.items():
            term = (values[k] * rg.tensor(w.astype(p.dtype))).sum()
            loss = term if loss is None else loss + term
        grads = None if loss is None else loss.backward()
        results = [v.numpy() for v in values]
        gradients = [
            None if grads is None or (g := leaf.grad(grads)) is None else g.numpy()
            for leaf in leaves
        ]
        return results, gradients


def _torch_gradients(p: Program, weights):
    loss = None
    for k, w in weights.items():
        value = p.torch_values[k]
        term = (value * torch.tensor(w, dtype=value.dtype)).sum()
        loss = term if loss is None else loss + term
    if loss is None or not loss.requires_grad:
        return [None] * len(p.torch_leaves)
    return list(torch.autograd.grad(loss, p.torch_leaves, allow_unused=True))


def _check(p: Program, seed: int) -> None:
    weights = _weights(p, seed)
    expected_grads = _torch_gradients(p, weights)
    tolerance = TOLERANCES[p.dtype]
    runs = {name: _run_retrograd(p, name, weights) for name in STRATEGIES}
    values, gradients = runs["none"]
    for name, (other_values, other_gradients) in runs.items():
        for k, (a, b) in enumerate(zip(values, other_values)):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), (
                f"value v{k} differs between none and {name}"
            )
        for k, (a, b) in enumerate(zip(gradients, other_gradients)):
            assert (a is None and b is None) or np.array_equal(a, b, equal_nan=True), (
                f"gradient of leaf {k} differs between none and {name}"
            )
    for k, (ours, theirs) in enumerate(zip(values, p.torch_values)):
        expected = theirs.detach().numpy()
        assert ours.shape == expected.shape, f"v{k}: shape {ours.shape} != {expected.shape}"
        assert str(ours.dtype) == str(expected.dtype), f"v{k}: dtype {ours.dtype}"
        if expected.dtype.kind == "f":
            scale = tolerance["atol"] * max(1.0, float(np.nanmax(np.abs(expected), initial=0)))
            np.testing.assert_allclose(
                ours,
                expected,
                rtol=tolerance["rtol"],
                atol=scale,
                equal_nan=True,
                err_msg=f"value v{k}",
            )
        else:
            np.testing.assert_array_equal(ours, expected, err_msg=f"value v{k}")
    for k, (ours, theirs) in enumerate(zip(gradients, expected_grads)):
        if theirs is None:
            assert ours is None or not np.any(ours), f"leaf {k}: gradient where torch has none"
            continue
        expected = theirs.detach().numpy()
        assert ours is not None, f"leaf {k}: no gradient, torch's is {expected}"
        scale = tolerance["atol"] * max(1.0, float(np.nanmax(np.abs(expected), initial=0)))
        np.testing.assert_allclose(
            ours,
            expected,
            rtol=tolerance["rtol"],
            atol=scale,
            equal_nan=True,
            err_msg=f"gradient of leaf {k}",
        )


@settings(FUZZ, max_examples=EXPLORE or 120)
@given(data=st.data(), dtype=st.sampled_from(["float64", "float32"]))
def test_burn_names_random_programs(data, dtype):
    program = _draw_program(data, dtype)
    _check(program, data.draw(st.integers(0, 2**32 - 1), label="weights seed"))


# -- what the programs found, as fixed cases ---------------------------------------------------
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("dim", [2, -1, 1, -2])
def test_cross_with_an_operand_of_fewer_dims(strategy, dim):
    """``x.cross(other, d)`` with ``other`` of fewer dims (aligned at the end, as broadcasting
    aligns it) and ``d`` counted from the front: the check of the size-3 dimension read
    ``other``'s dim ``d - other.ndim`` (its first for [2, 2, 3] x [1, 3], d=2) and refused."""
    rng = np.random.default_rng(88)
    shape, other_shape = ((2, 2, 3), (1, 3)) if dim in (2, -1) else ((2, 3, 2), (3, 1))
    a, b = rng.normal(size=shape), rng.normal(size=other_shape)
    weight = rng.normal(size=shape)
    ta, tb = (torch.tensor(v, requires_grad=True) for v in (a, b))
    expected = torch.linalg.cross(ta, tb[None], dim=dim)
    (expected * torch.tensor(weight)).sum().backward()
    with rg.use_backend(rg.Autodiff(inner_backend(), STRATEGIES[strategy]())):
        x, y = rg.tensor(a).require_grad(), rg.tensor(b).require_grad()
        out = x.cross(y, dim)
        grads = (out * rg.tensor(weight)).sum().backward()
    np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(x.grad(grads).numpy(), ta.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.grad(grads).numpy(), tb.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("update", ["add", "assign"])
def test_select_assign_of_a_0d_tensor_takes_a_0d_index(strategy, update):
    """``select_assign`` of a 0-d tensor at a 0-d index (torch's ``index_add``/``index_copy``
    take it, and retrograd's did, and ``select`` did): was a ``ShapeError`` ("indices must be
    1-d, got shape []")."""
    ta = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    tv = torch.tensor(-1.25, dtype=torch.float64, requires_grad=True)
    kernel = torch.index_add if update == "add" else torch.index_copy
    expected = kernel(ta, -1, torch.tensor(0), tv)
    (expected * 3.0).backward()
    with rg.use_backend(rg.Autodiff(inner_backend(), STRATEGIES[strategy]())):
        x, v = rg.tensor(2.5, dtype="float64").require_grad(), rg.tensor(-1.25, dtype="float64")
        v = v.require_grad()
        out = x.select_assign(-1, rg.tensor(0), v, update=update)
        grads = (out * 3.0).backward()
    assert out.shape == () and out.item() == expected.item()
    assert x.grad(grads).item() == ta.grad.item()
    assert v.grad(grads).item() == tv.grad.item()
