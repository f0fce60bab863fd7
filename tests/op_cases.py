"""The table of differentiable ops the gradient tests run: each with a retrograd function, the
same function in PyTorch, input shapes (broadcasting ones included) and an input domain away
from the points where the op is not differentiable."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import retrograd as rg


@dataclass
class Case:
    name: str
    fn: Callable[..., Any]
    torch_fn: Callable[..., Any] | None
    shapes: tuple[tuple[int, ...], ...]
    low: float = -2.0
    high: float = 2.0
    #: inputs built by a custom generator instead of uniform values (for ties, ints, ...)
    make: Callable[[np.random.Generator], list[np.ndarray]] | None = None
    #: positions of inputs that are not differentiable (indices, masks)
    constant: tuple[int, ...] = ()
    tags: tuple[str, ...] = field(default=())

    def inputs(self, rng: np.random.Generator, dtype=np.float64) -> list[np.ndarray]:
        if self.make is not None:
            return [a.astype(dtype) if a.dtype.kind == "f" else a for a in self.make(rng)]
        return [rng.uniform(self.low, self.high, size=s).astype(dtype) for s in self.shapes]


def _away_from_integers(rng, shape):
    return (rng.integers(-3, 3, size=shape) + rng.uniform(0.2, 0.8, size=shape)).astype(np.float64)


def _distinct(rng, shape):
    """Values far apart from each other (no ties for max/sort)."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.37 - n * 0.15 + rng.uniform(-0.05, 0.05, n)).reshape(shape)


def _index(rng, shape, high):
    return rng.integers(0, high, size=shape).astype(np.int64)


def _t():
    import torch

    return torch


CASES: list[Case] = []


def case(name, fn, torch_fn, *shapes, **options):
    CASES.append(Case(name, fn, torch_fn, shapes, **options))


# -- elementwise binary, broadcasting ---------------------------------------------------------
for shapes in [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((1,), (2, 3))]:
    tag = "x".join(map(str, shapes[0])) + "_" + "x".join(map(str, shapes[1]))
    case(f"add_{tag}", lambda a, b: a + b, lambda a, b: a + b, *shapes)
    case(f"sub_{tag}", lambda a, b: a - b, lambda a, b: a - b, *shapes)
    case(f"mul_{tag}", lambda a, b: a * b, lambda a, b: a * b, *shapes)
    case(f"div_{tag}", lambda a, b: a / b, lambda a, b: a / b, *shapes, low=0.5, high=2.0)
    case(f"powf_{tag}", lambda a, b: a.powf(b), lambda a, b: a.pow(b), *shapes, low=0.5, high=2.0)
    case(
        f"atan2_{tag}",
        lambda a, b: a.atan2(b),
        lambda a, b: _t().atan2(a, b),
        *shapes,
        low=0.3,
        high=2.0,
    )
    case(
        f"hypot_{tag}",
        lambda a, b: a.hypot(b),
        lambda a, b: _t().hypot(a, b),
        *shapes,
        low=0.3,
        high=2.0,
    )
case(
    "remainder",
    lambda a, b: a.remainder(b),
    lambda a, b: _t().remainder(a, b),
    (3, 4),
    (3, 4),
    make=lambda r: [_away_from_integers(r, (3, 4)) * 1.7, r.uniform(0.7, 1.3, (3, 4))],
)

# -- with Python scalars, reflected operators ------------------------------------------------
case("add_scalar", lambda a: a.add_scalar(1.5), lambda a: a + 1.5, (3, 4))
case("sub_scalar", lambda a: a.sub_scalar(1.5), lambda a: a - 1.5, (3, 4))
case("mul_scalar", lambda a: a.mul_scalar(-2.5), lambda a: a * -2.5, (3, 4))
case("div_scalar", lambda a: a.div_scalar(3.0), lambda a: a / 3.0, (3, 4))
case("powf_scalar", lambda a: a.powf_scalar(2.5), lambda a: a**2.5, (3, 4), low=0.5)
case("powf_scalar_int", lambda a: a.powf_scalar(3.0), lambda a: a**3.0, (3, 4))
case(
    "remainder_scalar",
    lambda a: a.remainder_scalar(0.75),
    lambda a: _t().remainder(a, 0.75),
    (3, 4),
    make=lambda r: [r.integers(-4, 4, (3, 4)) * 0.75 + r.uniform(0.1, 0.6, (3, 4))],
)
case("rsub", lambda a: 2.0 - a, lambda a: 2.0 - a, (3, 4))
case("rdiv", lambda a: 2.0 / a, lambda a: 2.0 / a, (3, 4), low=0.5)
case("rpow", lambda a: 1.7**a, lambda a: 1.7**a, (3, 4))
case(
    "rmod",
    lambda a: 2.5 % a,
    lambda a: _t().remainder(_t().full_like(a, 2.5), a),
    (3, 4),
    low=0.7,
    high=1.1,
)
case("neg_operator", lambda a: -a, lambda a: -a, (3, 4))

# -- unary ------------------------------------------------------------------------------------
for name, low, high in [
    ("exp", -2, 2),
    ("expm1", -2, 2),
    ("log", 0.2, 3),
    ("log1p", -0.5, 3),
    ("sqrt", 0.2, 3),
    ("square", -2, 2),
    ("sin", -3, 3),
    ("cos", -3, 3),
    ("tan", -1.2, 1.2),
    ("sinh", -2, 2),
    ("cosh", -2, 2),
    ("tanh", -2, 2),
    ("asin", -0.9, 0.9),
    ("acos", -0.9, 0.9),
    ("atan", -3, 3),
    ("asinh", -3, 3),
    ("acosh", 1.2, 3),
    ("atanh", -0.9, 0.9),
    ("erf", -2.5, 2.5),
    ("sigmoid", -4, 4),
    ("neg", -2, 2),
]:
    case(
        name,
        lambda a, name=name: getattr(a, name)(),
        lambda a, name=name: getattr(a, name)(),
        (3, 4),
        low=low,
        high=high,
    )
case("recip", lambda a: a.recip(), lambda a: a.reciprocal(), (3, 4), low=0.3, high=2)
case("abs", lambda a: a.abs(), lambda a: a.abs(), (3, 4), make=lambda r: [_distinct(r, (3, 4))])
for name in ("sign", "round", "floor", "ceil", "trunc"):
    case(
        name,
        lambda a, name=name: getattr(a, name)(),
        lambda a, name=name: getattr(a, name)(),
        (3, 4),
        make=lambda r: [_away_from_integers(r, (3, 4))],
    )
case(
    "clamp",
    lambda a: a.clamp(-0.5, 0.7),
    lambda a: a.clamp(-0.5, 0.7),
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4)) / 3],
)
case(
    "clamp_min",
    lambda a: a.clamp_min(0.1),
    lambda a: a.clamp(min=0.1),
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4)) / 3],
)
case(
    "clamp_max",
    lambda a: a.clamp_max(0.1),
    lambda a: a.clamp(max=0.1),
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4)) / 3],
)
# Rounding to float32 is not smooth at finite-difference scale: checked against PyTorch only.
case(
    "cast_f32_f64",
    lambda a: a.cast("float32").cast("float64") * a,
    lambda a: a.float().double() * a,
    (3, 4),
    tags=("rounds",),
)

# -- activations ------------------------------------------------------------------------------
case("relu", lambda a: a.relu(), lambda a: a.relu(), (3, 4), make=lambda r: [_distinct(r, (3, 4))])
case("gelu", lambda a: a.gelu(), lambda a: _t().nn.functional.gelu(a), (3, 4), low=-4, high=4)
case("silu", lambda a: a.silu(), lambda a: _t().nn.functional.silu(a), (3, 4), low=-4, high=4)
case("softplus", lambda a: a.softplus(), lambda a: _t().nn.functional.softplus(a), (3, 4))
case(
    "softplus_beta",
    lambda a: a.softplus(2.0),
    lambda a: _t().nn.functional.softplus(a, 2.0),
    (3, 4),
)
case(
    "log_sigmoid",
    lambda a: a.log_sigmoid(),
    lambda a: _t().nn.functional.logsigmoid(a),
    (3, 4),
    low=-5,
    high=5,
)
case(
    "leaky_relu",
    lambda a: a.leaky_relu(0.1),
    lambda a: _t().nn.functional.leaky_relu(a, 0.1),
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case("softmax", lambda a: a.softmax(1), lambda a: a.softmax(1), (3, 4))
case("softmax_dim0", lambda a: a.softmax(0), lambda a: a.softmax(0), (3, 4))
case("log_softmax", lambda a: a.log_softmax(-1), lambda a: a.log_softmax(-1), (2, 3, 4))

# -- linear algebra ---------------------------------------------------------------------------
case("matmul", lambda a, b: a @ b, lambda a, b: a @ b, (3, 4), (4, 2))
case("matmul_batched", lambda a, b: a @ b, lambda a, b: a @ b, (2, 3, 4), (2, 4, 2))
case("matmul_broadcast", lambda a, b: a @ b, lambda a, b: a @ b, (2, 1, 3, 4), (3, 4, 2))
case("matmul_vector", lambda a, b: a @ b, lambda a, b: a @ b, (3, 4), (4,))
case("matmul_vector_left", lambda a, b: a @ b, lambda a, b: a @ b, (4,), (2, 4, 3))
case(
    "cross", lambda a, b: a.cross(b, 1), lambda a, b: _t().linalg.cross(a, b, dim=1), (2, 3), (2, 3)
)
case(
    "cross_broadcast",
    lambda a, b: a.cross(b, -1),
    lambda a, b: _t().linalg.cross(a, b.expand_as(a), dim=-1),
    (4, 3),
    (3,),
)

# -- reductions -------------------------------------------------------------------------------
case("sum", lambda a: a.sum(), lambda a: a.sum(), (3, 4))
case("mean", lambda a: a.mean(), lambda a: a.mean(), (3, 4))
case("prod", lambda a: a.prod(), lambda a: a.prod(), (2, 3), low=0.5, high=1.5)
case(
    "prod_with_zero",
    lambda a: a.prod(),
    lambda a: a.prod(),
    (2, 3),
    make=lambda r: [np.array([[1.5, 0.0, -2.0], [0.5, 1.2, 3.0]])],
)
case(
    "prod_with_two_zeros",
    lambda a: a.prod(),
    lambda a: a.prod(),
    (2, 3),
    make=lambda r: [np.array([[1.5, 0.0, -2.0], [0.5, 0.0, 3.0]])],
)
case("sum_dim", lambda a: a.sum_dim(1), lambda a: a.sum(1, keepdim=True), (3, 4))
case("mean_dim", lambda a: a.mean_dim(0), lambda a: a.mean(0, keepdim=True), (3, 4))
case(
    "prod_dim",
    lambda a: a.prod_dim(1),
    lambda a: a.prod(1, keepdim=True),
    (3, 4),
    low=0.5,
    high=1.5,
)
case(
    "prod_dim_zeros",
    lambda a: a.prod_dim(0),
    lambda a: a.prod(0, keepdim=True),
    (3, 2),
    make=lambda r: [np.array([[0.0, 2.0], [3.0, 0.0], [1.5, 0.0]])],
)
case("max", lambda a: a.max(), lambda a: a.max(), (3, 4), make=lambda r: [_distinct(r, (3, 4))])
case("min", lambda a: a.min(), lambda a: a.min(), (3, 4), make=lambda r: [_distinct(r, (3, 4))])
case(
    "max_dim",
    lambda a: a.max_dim(1),
    lambda a: a.max(1, keepdim=True).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case(
    "min_dim",
    lambda a: a.min_dim(0),
    lambda a: a.min(0, keepdim=True).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case(
    "max_dim_with_indices",
    lambda a: a.max_dim_with_indices(-1)[0],
    lambda a: a.max(-1, keepdim=True).values,
    (2, 3, 4),
    make=lambda r: [_distinct(r, (2, 3, 4))],
)
case("var", lambda a: a.var(1), lambda a: a.var(1), (3, 4))
case("var_keepdim", lambda a: a.var(1, keepdim=True), lambda a: a.var(1, keepdim=True), (3, 4))
case("var_all", lambda a: a.var(), lambda a: a.var(), (3, 4))
case("std", lambda a: a.std(0), lambda a: a.std(0), (3, 4))
case(
    "var_dims_unbiased_false",
    lambda a: a.var((0, 2), unbiased=False),
    lambda a: a.var((0, 2), unbiased=False),
    (2, 3, 4),
)
case("cumsum", lambda a: a.cumsum(1), lambda a: a.cumsum(1), (3, 4))
case("cumprod", lambda a: a.cumprod(1), lambda a: a.cumprod(1), (3, 4), low=0.5, high=1.5)
case(
    "cumprod_zeros",
    lambda a: a.cumprod(1),
    lambda a: a.cumprod(1),
    (2, 4),
    make=lambda r: [np.array([[1.5, 0.0, -2.0, 0.7], [0.0, 1.2, 0.0, 3.0]])],
)
case(
    "cummax",
    lambda a: a.cummax(1),  # API.md's method: the values
    lambda a: a.cummax(1).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case(
    "cummin",
    lambda a: a.cummin(0),
    lambda a: a.cummin(0).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case(
    "sort",
    lambda a: a.sort(1).values,
    lambda a: a.sort(1).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case(
    "sort_descending",
    lambda a: a.sort(0, descending=True).values,
    lambda a: a.sort(0, descending=True).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)
case(
    "topk",
    lambda a: a.topk(2, 1).values,
    lambda a: a.topk(2, 1).values,
    (3, 4),
    make=lambda r: [_distinct(r, (3, 4))],
)

# -- shape ------------------------------------------------------------------------------------
case(
    "reshape",
    lambda a: a.reshape((4, -1)) * a.reshape((4, 3)),
    lambda a: a.reshape(4, 3) ** 2,
    (3, 4),
)
case("transpose", lambda a: a.transpose(), lambda a: a.transpose(-1, -2), (2, 3, 4))
case("swap_dims", lambda a: a.swap_dims(0, 2), lambda a: a.transpose(0, 2), (2, 3, 4))
case("permute", lambda a: a.permute((2, 0, 1)), lambda a: a.permute(2, 0, 1), (2, 3, 4))
case("flip", lambda a: a.flip((0, 2)), lambda a: a.flip((0, 2)), (2, 3, 4))
case("expand", lambda a: a.expand((2, 3, 4)), lambda a: a.expand(2, 3, 4), (3, 1))
case("repeat_dim", lambda a: a.repeat_dim(1, 3), lambda a: a.repeat(1, 3), (2, 3))
case(
    "squeeze_unsqueeze",
    lambda a: a.unsqueeze_dim(-1).squeeze_dim(2).unsqueeze_dim(0),
    lambda a: a.unsqueeze(0),
    (3, 4),
)
case("flatten", lambda a: a.flatten(1, 2), lambda a: a.flatten(1, 2), (2, 3, 4))
case("narrow", lambda a: a.narrow(1, 1, 2), lambda a: a.narrow(1, 1, 2), (3, 4))
case(
    "chunk",
    lambda a: a.chunk(2, 1)[1] * a.chunk(2, 1)[0],
    lambda a: a.chunk(2, 1)[1] * a.chunk(2, 1)[0],
    (3, 4),
)
case(
    "split",
    lambda a: rg.cat(a.split(3, 0)[::-1], 0),
    lambda a: _t().cat(a.split(3, 0)[::-1], 0),
    (5, 2),
)
case("unfold", lambda a: a.unfold(1, 3, 2), lambda a: a.unfold(1, 3, 2), (2, 7))
case("cat", lambda a, b: rg.cat([a, b, a], 1), lambda a, b: _t().cat([a, b, a], 1), (2, 3), (2, 2))
case(
    "stack", lambda a, b: rg.stack([a, b], -1), lambda a, b: _t().stack([a, b], -1), (2, 3), (2, 3)
)
case("getitem", lambda a: a[1:, None, ::2, 1], lambda a: a[1:, None, ::2, 1], (3, 4, 2))
case(
    "getitem_ellipsis",
    lambda a: a[..., 0] * a[0, ...].sum(),
    lambda a: a[..., 0] * a[0, ...].sum(),
    (2, 3),
)
case("slice", lambda a: a.slice([(1, 3), slice(0, 4, 2)]), lambda a: a[1:3, 0:4:2], (3, 4))
case(
    "slice_assign",
    lambda a, b: a.slice_assign([(0, 2), (1, 3)], b),
    lambda a, b: _slice_assign_torch(a, b),
    (3, 4),
    (2, 2),
)

# -- indexing ---------------------------------------------------------------------------------
case(
    "gather",
    lambda a, i: a.gather(1, rg.tensor(i, dtype="int64")),
    lambda a, i: a.gather(1, _t().tensor(i)),
    (3, 4),
    (3, 5),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), _index(r, (3, 5), 4)],
    constant=(1,),
)
case(
    "scatter_add",
    lambda a, i, v: a.scatter(1, rg.tensor(i, dtype="int64"), v, "add"),
    lambda a, i, v: a.scatter_add(1, _t().tensor(i), v),
    (3, 4),
    (3, 2),
    (3, 2),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), _index(r, (3, 2), 4), r.uniform(-2, 2, (3, 2))],
    constant=(1,),
)
case(
    "scatter_assign",
    lambda a, i, v: a.scatter(1, rg.tensor(i, dtype="int64"), v, "assign"),
    lambda a, i, v: a.scatter(1, _t().tensor(i), v),
    (3, 4),
    (3, 2),
    (3, 2),
    make=lambda r: [
        r.uniform(-2, 2, (3, 4)),
        np.array([[0, 2], [3, 1], [1, 0]]),
        r.uniform(-2, 2, (3, 2)),
    ],
    constant=(1,),
)
case(
    "select",
    lambda a, i: a.select(0, rg.tensor(i, dtype="int64")),
    lambda a, i: a.index_select(0, _t().tensor(i)),
    (3, 4),
    (5,),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), _index(r, (5,), 3)],
    constant=(1,),
)
case(
    "select_assign_add",
    lambda a, i, v: a.select_assign(1, rg.tensor(i, dtype="int64"), v, "add"),
    lambda a, i, v: a.index_add(1, _t().tensor(i), v),
    (3, 4),
    (3,),
    (3, 3),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), np.array([2, 0, 2]), r.uniform(-2, 2, (3, 3))],
    constant=(1,),
)
case(
    "select_assign_assign",
    lambda a, i, v: a.select_assign(1, rg.tensor(i, dtype="int64"), v, "assign"),
    lambda a, i, v: a.index_copy(1, _t().tensor(i), v),
    (3, 4),
    (2,),
    (3, 2),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), np.array([3, 0]), r.uniform(-2, 2, (3, 2))],
    constant=(1,),
)
case(
    "mask_where",
    lambda a, m, v: a.mask_where(rg.tensor(m, dtype="bool"), v),
    lambda a, m, v: _t().where(_t().tensor(m), v, a),
    (3, 4),
    (3, 4),
    (4,),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), r.uniform(size=(3, 4)) > 0.5, r.uniform(-2, 2, (4,))],
    constant=(1,),
)
case(
    "mask_fill",
    lambda a, m: a.mask_fill(rg.tensor(m, dtype="bool"), 3.5),
    lambda a, m: a.masked_fill(_t().tensor(m), 3.5),
    (3, 4),
    (4,),
    make=lambda r: [r.uniform(-2, 2, (3, 4)), np.array([True, False, True, False])],
    constant=(1,),
)


def _slice_assign_torch(a, b):
    out = a.clone()
    out[0:2, 1:3] = b
    return out
