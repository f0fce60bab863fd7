"""Burn's clone-invariance tests (``crates/burn-backend-tests/tests/tensor/clone_invariance.rs``,
tracel-ai/burn at 2c06be351006851d42fdb6df16b976f4a82d9747; ``burn-tensor/src/tests`` before
the move): an op must not change its inputs, and gives the same result on an input that is
shared (Burn's clone) as on one it owns (Burn's in-place path). Here every op is functional
(API.md section 2), so each case runs the op on tensors another name still holds, checks that
they keep their values, and compares the result with the op on fresh tensors of the same data,
under every checkpointing strategy on the chosen inner backend. Burn's inputs: a random
``[32, 32]`` float tensor (integers in [0, 50) for the int cases) for unary ops, two ``[32,
32]`` tensors of ones for binary ones."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from test_burn_ports import backend  # noqa: F401 (the autouse fixture: every strategy)

INDICES = [1, 2, 0, 5]


def _ones_indices(t):
    return rg.ones(t.shape, dtype="int64")


# ops both kinds share: (name, fn); the scalars are Burn's
COMMON_UNARY = {
    "add_scalar": lambda t: t.add_scalar(2),
    "sub_scalar": lambda t: t.sub_scalar(2),
    "mul_scalar": lambda t: t.mul_scalar(2),
    "neg": lambda t: t.neg(),
    "sum_dim": lambda t: t.sum_dim(1),
    "sum": lambda t: t.sum().unsqueeze_dim(0),
    "clamp": lambda t: t.clamp(-2, 2),
    "clamp_min": lambda t: t.clamp_min(-2),
    "clamp_max": lambda t: t.clamp_max(2),
    "abs": lambda t: t.abs(),
    "swap_dims": lambda t: t.swap_dims(0, 1),
    "transpose": lambda t: t.transpose(),
    "slice": lambda t: t.slice([(0, 12), (12, 24)]),
    "argmax": lambda t: t.argmax(0),
    "argmin": lambda t: t.argmin(0),
    "max": lambda t: t.max().unsqueeze_dim(0),
    "min": lambda t: t.min().unsqueeze_dim(0),
    "max_dim": lambda t: t.max_dim(1),
    "max_dim_with_indices": lambda t: t.max_dim_with_indices(1)[0],
    "min_dim_with_indices": lambda t: t.min_dim_with_indices(1)[0],
    "min_dim": lambda t: t.min_dim(1),
    "repeat": lambda t: t.reshape((1, 32, 32)).repeat_dim(0, 4).reshape((4 * 32, 32)),
    "reshape": lambda t: t.reshape((t.numel(), 1)),
    "gather": lambda t: t.gather(0, _ones_indices(t)),
    "select": lambda t: t.select(0, rg.tensor(INDICES)),
    "mask_fill": lambda t: t.mask_fill(t.greater_elem(0.5), 77),
}
FLOAT_UNARY = {
    **COMMON_UNARY,
    "div_scalar": lambda t: t.div_scalar(2.0),
    "powf_scalar": lambda t: t.powf_scalar(2.0),
    "square": lambda t: t.square(),
    "sqrt": lambda t: t.sqrt(),
    "exp": lambda t: t.exp(),
    "mean_dim": lambda t: t.mean_dim(1),
    "mean": lambda t: t.mean().unsqueeze_dim(0),
    "cos": lambda t: t.cos(),
    "sin": lambda t: t.sin(),
    "tan": lambda t: t.tan(),
    "log": lambda t: t.log(),
    "log1p": lambda t: t.log1p(),
    "erf": lambda t: t.erf(),
    "equal_elem": lambda t: t.equal_elem(0.5),
    "not_equal_elem": lambda t: t.not_equal_elem(0.5),
    "greater_elem": lambda t: t.greater_elem(0.5),
    "greater_equal_elem": lambda t: t.greater_equal_elem(0.5),
    "lower_elem": lambda t: t.lower_elem(0.5),
    "lower_equal_elem": lambda t: t.lower_equal_elem(0.5),
    "softmax": lambda t: F.softmax(t, 1),
    "log_softmax": lambda t: F.log_softmax(t, 1),
    "sigmoid": lambda t: t.sigmoid(),
    "log_sigmoid": lambda t: t.log_sigmoid(),
    "relu": lambda t: t.relu(),
    "gelu": lambda t: t.gelu(),
    "mish": lambda t: F.mish(t),
    "silu": lambda t: t.silu(),
    "softplus": lambda t: F.softplus(t, 1.0),
    "tanh": lambda t: t.tanh(),
}
INT_UNARY = {
    **COMMON_UNARY,
    # Burn's int div_scalar and mean divide in integers; torch's (API.md's) ``/`` of an int
    # tensor is a float division, and ``mean`` takes floats: these two run as floor divisions
    "div_scalar": lambda t: t.div(2, rounding_mode="floor"),
    "mean_dim": lambda t: t.sum_dim(1).div(32, rounding_mode="floor"),
    "mean": lambda t: t.sum().div(t.numel(), rounding_mode="floor").unsqueeze_dim(0),
    "equal_elem": lambda t: t.equal_elem(25),
    "not_equal_elem": lambda t: t.not_equal_elem(25),
    "greater_elem": lambda t: t.greater_elem(25),
    "greater_equal_elem": lambda t: t.greater_equal_elem(25),
    "lower_elem": lambda t: t.lower_elem(25),
    "lower_equal_elem": lambda t: t.lower_equal_elem(25),
}
COMMON_BINARY = {
    "add": lambda a, b: a.add(b),
    "sub": lambda a, b: a.sub(b),
    "mul": lambda a, b: a.mul(b),
    "equal": lambda a, b: a.equal(b),
    "greater": lambda a, b: a.greater(b),
    "greater_equal": lambda a, b: a.greater_equal(b),
    "lower": lambda a, b: a.lower(b),
    "lower_equal": lambda a, b: a.lower_equal(b),
    "cat": lambda a, b: rg.cat([a.reshape((1, 32, 32)), b.reshape((1, 32, 32))], 0).reshape(
        (64, 32)
    ),
    "scatter": lambda a, b: a.scatter(0, _ones_indices(a), b, update="add"),
    "slice_assign": lambda a, b: a.slice_assign([(0, 12), (12, 24)], b.slice([(12, 24), (0, 12)])),
    "mask_where": lambda a, b: a.mask_where(a.greater_elem(0.5), b),
    "select_assign": lambda a, b: a.select_assign(
        0, rg.tensor(INDICES), b.select(0, rg.tensor(INDICES)), update="add"
    ),
}
FLOAT_BINARY = {
    **COMMON_BINARY,
    "div": lambda a, b: a.div(b),
    "matmul": lambda a, b: a.matmul(b),
}
INT_BINARY = {
    **COMMON_BINARY,
    "div": lambda a, b: a.div(b, rounding_mode="floor"),
    "not_equal": lambda a, b: a.not_equal(b),
}


def unary_input(kind):
    rng = np.random.default_rng(7)
    if kind == "float":
        return rng.random((32, 32), dtype=np.float32)
    return rng.uniform(0.0, 50.0, (32, 32)).astype(np.int64)


def assert_invariant(op, arrays):
    shared = [rg.tensor(a) for a in arrays]
    out = np.asarray(op(*shared))
    for tensor, array in zip(shared, arrays):
        np.testing.assert_array_equal(np.asarray(tensor), array)  # the input is unchanged
    owned = np.asarray(op(*[rg.tensor(a.copy()) for a in arrays]))
    np.testing.assert_allclose(out, owned, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", list(FLOAT_UNARY))
def test_float_unary(name):
    assert_invariant(FLOAT_UNARY[name], [unary_input("float")])


@pytest.mark.parametrize("name", list(INT_UNARY))
def test_int_unary(name):
    assert_invariant(INT_UNARY[name], [unary_input("int")])


@pytest.mark.parametrize("name", list(FLOAT_BINARY))
def test_float_binary(name):
    assert_invariant(FLOAT_BINARY[name], [np.ones((32, 32), np.float32)] * 2)


@pytest.mark.parametrize("name", list(INT_BINARY))
def test_int_binary(name):
    assert_invariant(INT_BINARY[name], [np.ones((32, 32), np.int64)] * 2)


@pytest.mark.parametrize("name", ["add_scalar", "exp", "softmax", "slice", "mask_fill"])
def test_float_unary_tracked(name):
    # the same under autodiff: a tracked input is left as it was, and its gradient flows
    data = unary_input("float")
    x = rg.tensor(data).require_grad()
    out = FLOAT_UNARY[name](x)
    grads = out.sum().backward()
    np.testing.assert_array_equal(np.asarray(x), data)
    assert x.grad(grads) is not None
    np.testing.assert_allclose(np.asarray(out), np.asarray(FLOAT_UNARY[name](rg.tensor(data))))
