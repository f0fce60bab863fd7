"""Random op programs: gradients equal PyTorch's and are bit-identical under both strategies."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import retrograd as rg
from backends import inner_backend
from nn_testing import assert_leaf_gradients_match, assert_strategies_identical

#: every program runs on backends of its own, with and without checkpointing
pytestmark = pytest.mark.own_checkpointing("each program runs under both strategies it names")

SHAPE = (3, 4)

# name -> (arity, retrograd fn, torch fn); every op maps (3, 4) operands to a (3, 4) result.
UNARY = {
    "sin": (lambda a: a.sin(), lambda a: a.sin()),
    "tanh": (lambda a: a.tanh(), lambda a: a.tanh()),
    "sigmoid": (lambda a: a.sigmoid(), lambda a: a.sigmoid()),
    "exp_small": (lambda a: (a * 0.3).exp(), lambda a: (a * 0.3).exp()),
    "log_soft": (lambda a: (a * a + 1.0).log(), lambda a: (a * a + 1.0).log()),
    "sqrt_soft": (lambda a: (a.square() + 0.5).sqrt(), lambda a: (a.square() + 0.5).sqrt()),
    "gelu": (lambda a: a.gelu(), lambda a: _torch().nn.functional.gelu(a)),
    "silu": (lambda a: a.silu(), lambda a: _torch().nn.functional.silu(a)),
    # torch's F.softplus (linear above threshold 20) against ours; ``Tensor.softplus`` is
    # Burn's, without the linear tail, so it differs from torch's by ~1e-9 past 20
    "softplus": (
        lambda a: rg.nn.functional.softplus(a),
        lambda a: _torch().nn.functional.softplus(a),
    ),
    "relu": (lambda a: a.relu(), lambda a: a.relu()),
    "abs": (lambda a: a.abs(), lambda a: a.abs()),
    "neg_scale": (lambda a: 1.5 - 0.5 * a, lambda a: 1.5 - 0.5 * a),
    "softmax": (lambda a: a.softmax(1), lambda a: a.softmax(1)),
    "log_softmax": (lambda a: a.log_softmax(0), lambda a: a.log_softmax(0)),
    "cumsum": (lambda a: a.cumsum(1), lambda a: a.cumsum(1)),
    "center": (lambda a: a - a.mean_dim(1), lambda a: a - a.mean(1, keepdim=True)),
    "row_max": (lambda a: a * a.max_dim(1), lambda a: a * a.max(1, keepdim=True).values),
    "flip_roll": (lambda a: a.flip((1,)) + a, lambda a: a.flip((1,)) + a),
    "reshape_t": (
        lambda a: a.reshape((4, 3)).transpose().reshape((3, 4)),
        lambda a: a.reshape(4, 3).transpose(0, 1).reshape(3, 4),
    ),
    "slice_cat": (
        lambda a: rg.cat([a[:, 2:], a[:, :2] * 2.0], 1),
        lambda a: _torch().cat([a[:, 2:], a[:, :2] * 2.0], 1),
    ),
    "clamp": (lambda a: a.clamp(-0.8, 0.9), lambda a: a.clamp(-0.8, 0.9)),
}
BINARY = {
    "add": (lambda a, b: a + b, lambda a, b: a + b),
    "sub": (lambda a, b: a - b, lambda a, b: a - b),
    "mul": (lambda a, b: a * b, lambda a, b: a * b),
    "div_soft": (lambda a, b: a / (b * b + 1.0), lambda a, b: a / (b * b + 1.0)),
    "matmul_t": (lambda a, b: (a @ b.transpose()) @ b * 0.3, lambda a, b: (a @ b.T) @ b * 0.3),
    "mask_where": (
        lambda a, b: a.mask_where(a.greater(b), b),
        lambda a, b: _torch().where(a > b, b, a),
    ),
    "hypot_soft": (lambda a, b: a.hypot(b + 3.0), lambda a, b: _torch().hypot(a, b + 3.0)),
}
NAMES = sorted(UNARY) + sorted(BINARY)


def _torch():
    import torch

    return torch


programs = st.lists(
    st.tuples(st.sampled_from(NAMES), st.integers(0, 10_000), st.integers(0, 10_000)),
    min_size=1,
    max_size=12,
)


def _evaluate(program, leaves, tables, combine):
    values = list(leaves)
    for name, i, j in program:
        if name in UNARY:
            values.append(tables[0][name](values[i % len(values)]))
        else:
            values.append(tables[1][name](values[i % len(values)], values[j % len(values)]))
    return combine(values)


def _retrograd_gradients(program, arrays, weights, strategy, dtype):
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        leaves = [rg.tensor(a.astype(dtype)).require_grad() for a in arrays]
        tables = ({k: v[0] for k, v in UNARY.items()}, {k: v[0] for k, v in BINARY.items()})

        def combine(values):
            total = None
            for value, weight in zip(values[len(leaves) :], weights):
                term = (value * rg.tensor(weight.astype(dtype))).sum()
                total = term if total is None else total + term
            return total

        loss = _evaluate(program, leaves, tables, combine)
        grads = loss.backward()
        return [None if (g := leaf.grad(grads)) is None else g.numpy() for leaf in leaves]


def _gradients_identical_under_strategies(program, seed, dtype):
    """Random inputs for ``program``, its gradients under both checkpointing strategies
    asserted identical: ``(arrays, weights, gradients)``."""
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1.5, 1.5, SHAPE) for _ in range(3)]
    weights = [rng.uniform(-1, 1, SHAPE) for _ in program]
    plain = _retrograd_gradients(program, arrays, weights, rg.NoCheckpointing(), dtype)
    balanced = _retrograd_gradients(program, arrays, weights, rg.BalancedCheckpointing(), dtype)
    assert_strategies_identical(plain, balanced)
    return arrays, weights, plain


@settings(max_examples=60, deadline=None)
@given(program=programs, seed=st.integers(0, 2**31 - 1))
def test_random_programs_match_torch_and_strategies(program, seed):
    torch = pytest.importorskip("torch")
    arrays, weights, plain = _gradients_identical_under_strategies(program, seed, np.float64)

    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    tables = ({k: v[1] for k, v in UNARY.items()}, {k: v[1] for k, v in BINARY.items()})

    def combine(values):
        return sum((v * torch.tensor(w)).sum() for v, w in zip(values[3:], weights))

    _evaluate(program, leaves, tables, combine).backward()
    assert_leaf_gradients_match(plain, leaves, rtol=1e-9, atol=1e-11)


@settings(max_examples=40, deadline=None)
@given(program=programs, seed=st.integers(0, 2**31 - 1))
def test_random_programs_float32_identical_under_strategies(program, seed):
    _gradients_identical_under_strategies(program, seed, np.float32)
