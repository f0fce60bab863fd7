"""Random programs over the whole tensor API: gradients equal PyTorch's (float64) and are
bit-identical under both checkpointing strategies.

Every step maps the running ``[2, 3, 4]`` value to a new ``[2, 3, 4]`` value, but through the
shape-changing machinery (reductions broadcast back, batched matmuls, permutes and reshapes,
gather/scatter/select with fixed random indices, slicing and slice assignment, unfold, chunk,
stack, cat, sort, cumulative ops, cross products...), mixing in a second operand from a pool
of leaves of broadcastable shapes. Each step's output is squashed by a scaled tanh, so that
long chains of products stay finite. The loss is a weighted sum of every step's output.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import retrograd as rg
from backends import inner_backend
from nn_testing import assert_leaf_gradients_match, assert_strategies_identical

SHAPE = (2, 3, 4)
# Leaves: three of the running shape and three that broadcast against it.
LEAF_SHAPES = [SHAPE, SHAPE, SHAPE, (3, 1), (4,), (2, 1, 4)]
GATHER = np.random.default_rng(5).integers(0, 4, SHAPE)  # indices into the last dim
SELECT = np.array([2, 0, 2])  # rows of dim 1, one repeated
SCATTER = np.random.default_rng(6).integers(0, 3, (2, 2, 4))  # into dim 1


def _torch():
    import torch

    return torch


def steps(rg_api: bool):
    """name -> fn(x, y): ``x`` the running value, ``y`` a leaf (any of LEAF_SHAPES)."""
    if rg_api:
        idx = lambda a: rg.tensor(a)  # noqa: E731
        cat, stack = rg.cat, rg.stack
    else:
        torch = _torch()
        idx = torch.tensor
        cat, stack = torch.cat, torch.stack

    def pick(rg_fn, torch_fn):
        return rg_fn if rg_api else torch_fn

    return {
        # broadcasting arithmetic with the other operand
        "add": lambda x, y: x + y,
        "mul": lambda x, y: x * y * 0.7,
        "div": lambda x, y: x / (y * y + 1.0),
        "pow": lambda x, y: (x * x + 0.5) ** (y * 0.3),
        "atan2": lambda x, y: pick(lambda: x.atan2(y + 2.0), lambda: x.atan2(y + 2.0))(),
        "where": lambda x, y: pick(
            lambda: x.mask_where(x.greater(y), y * 2.0),
            lambda: _torch().where(x > y, y * 2.0, x),
        )(),
        "clamp": lambda x, y: x.clamp(-0.7, 0.8) + y * 0.1,
        # reductions broadcast back
        "sum_dim": lambda x, y: x + pick(lambda: x.sum_dim(1), lambda: x.sum(1, keepdim=True))(),
        "mean_dim": lambda x, y: x * pick(lambda: x.mean_dim(2), lambda: x.mean(2, keepdim=True))(),
        "max_dim": lambda x, y: (
            x - pick(lambda: x.max_dim(0), lambda: x.max(0, keepdim=True).values)()
        ),
        "min_dim": lambda x, y: (
            x * pick(lambda: x.min_dim(2), lambda: x.min(2, keepdim=True).values)()
        ),
        "var": lambda x, y: x * x.var(2, keepdim=True),
        "prod_dim": lambda x, y: (
            x
            + pick(
                lambda: (x * 0.5 + 1.0).prod_dim(1), lambda: (x * 0.5 + 1.0).prod(1, keepdim=True)
            )()
        ),
        "max_all": lambda x, y: x * x.max() - x.min(),
        "norm": lambda x, y: x / (x.square().sum() + 1.0).sqrt(),
        # matmul and shape round trips
        "matmul": lambda x, y: (
            (x @ pick(lambda: x.transpose(), lambda: x.transpose(-1, -2))()) @ x * 0.2
        ),
        "permute_reshape": lambda x, y: pick(
            lambda: x.permute((2, 0, 1)).reshape((2, 3, 4)),
            lambda: x.permute(2, 0, 1).reshape(2, 3, 4),
        )(),
        "flatten": lambda x, y: pick(
            lambda: x.flatten(1, 2).flip((1,)).reshape((2, 3, 4)),
            lambda: x.flatten(1, 2).flip((1,)).reshape(2, 3, 4),
        )(),
        "expand": lambda x, y: (
            x
            + pick(
                lambda: x.sum_dim(0).expand((2, 3, 4)),
                lambda: x.sum(0, keepdim=True).expand(2, 3, 4),
            )()
        ),
        "repeat": lambda x, y: (
            x
            * pick(
                lambda: x.narrow(1, 1, 1).repeat_dim(1, 3),
                lambda: x.narrow(1, 1, 1).repeat(1, 3, 1),
            )()
        ),
        "unsqueeze": lambda x, y: (
            pick(
                lambda: x.unsqueeze_dim(0).squeeze_dim(0).swap_dims(0, 1).swap_dims(0, 1),
                lambda: x.unsqueeze(0).squeeze(0).transpose(0, 1).transpose(0, 1),
            )()
            * 1.5
        ),
        "stack": lambda x, y: pick(
            lambda: stack([x, x.sin()], 0).sum_dim(0).squeeze_dim(0),
            lambda: stack([x, x.sin()], 0).sum(0),
        )(),
        "chunk_cat": lambda x, y: pick(
            lambda: cat(list(reversed(x.chunk(2, 2))), 2),
            lambda: cat(list(reversed(x.chunk(2, 2))), 2),
        )(),
        "split_cat": lambda x, y: pick(
            lambda: cat([s * float(k + 1) for k, s in enumerate(x.split([1, 2], 1))], 1),
            lambda: cat([s * float(k + 1) for k, s in enumerate(x.split([1, 2], 1))], 1),
        )(),
        "unfold": lambda x, y: pick(
            lambda: cat([x.unfold(2, 2, 2).sum_dim(-1).squeeze_dim(-1)] * 2, 2),
            lambda: cat([x.unfold(2, 2, 2).sum(-1)] * 2, 2),
        )(),
        # indexing
        "index": lambda x, y: pick(
            lambda: cat([x[:, :, 1:], x[:, :, ::3][..., :1]], 2),
            lambda: cat([x[:, :, 1:], x[:, :, ::3][..., :1]], 2),
        )(),
        "gather": lambda x, y: x.gather(2, idx(GATHER)) * 2.0 + x,
        "select": lambda x, y: pick(
            lambda: x.select(1, idx(SELECT)), lambda: x.index_select(1, idx(SELECT))
        )(),
        "select_assign": lambda x, y: pick(
            lambda: x.select_assign(1, idx(np.array([0, 2])), x.narrow(1, 0, 2) * 3.0),
            lambda: x.index_add(1, idx(np.array([0, 2])), x.narrow(1, 0, 2) * 3.0),
        )(),
        "scatter": lambda x, y: pick(
            lambda: x.scatter(1, idx(SCATTER), x.narrow(1, 0, 2).exp() * 0.3, "add"),
            lambda: x.scatter_add(1, idx(SCATTER), x.narrow(1, 0, 2).exp() * 0.3),
        )(),
        "slice_assign": lambda x, y: pick(
            lambda: x.slice_assign([(0, 2), (1, 3)], x.narrow(1, 0, 2).tanh()),
            lambda: torch_slice_assign(x),
        )(),
        # order statistics and cumulative ops
        "sort": lambda x, y: x.sort(2).values,
        "sort_desc": lambda x, y: x.sort(1, descending=True).values,
        "topk": lambda x, y: cat([x.topk(2, 2).values, x.narrow(2, 0, 2)], 2),
        "cumsum": lambda x, y: x.cumsum(2) * 0.5,
        "cumprod": lambda x, y: (x * 0.5 + 1.0).cumprod(1),
        # the method: API.md's values (retrograd), torch's (values, indices) pair
        "cummax": lambda x, y: x.cummax(2) if isinstance(x, rg.Tensor) else x.cummax(2).values,
        # elementwise math
        "cross": lambda x, y: pick(lambda: x.cross(x.cos(), 1), lambda: x.cross(x.cos(), dim=1))(),
        "softmax": lambda x, y: x.softmax(1) + x.log_softmax(-1) * 0.1,
        "erf": lambda x, y: pick(lambda: x.erf(), lambda: x.erf())() + x.sigmoid(),
        "hyperbolic": lambda x, y: (x * 0.5).sinh() + (x * 0.5).cosh() - x.tanh(),
        "inverse_trig": lambda x, y: (
            (x.tanh() * 0.9).asin() + (x.tanh() * 0.9).acos() * 0.5 + x.atan()
        ),
        "log1p": lambda x, y: (x.abs() + 0.1).log1p() + (x.square() + 1.0).log(),
        "recip": lambda x, y: (
            (x.square() + 0.5).reciprocal() if not rg_api else (x.square() + 0.5).recip()
        ),
        "softplus": lambda x, y: pick(
            lambda: x.softplus() - x.silu() + x.gelu() + x.leaky_relu(0.1),
            lambda: torch_softplus_mix(x),
        )(),
        # shifted: remainder jumps at multiples of 0.7, and a value that cancels exactly
        # (a cross product of clamped ties) is 0 here and a rounding error of either sign in
        # torch, whose cross product fuses a multiply-add (1e-17: 0 against 0.7 after the jump)
        "remainder": lambda x, y: (
            pick(lambda: (x + 0.1234).remainder(0.7), lambda: _torch().remainder(x + 0.1234, 0.7))()
            + x
        ),
    }


def torch_slice_assign(x):
    out = x.clone()
    out[0:2, 1:3] = x.narrow(1, 0, 2).tanh()
    return out


def torch_softplus_mix(x):
    nnf = _torch().nn.functional
    return nnf.softplus(x) - nnf.silu(x) + nnf.gelu(x) + nnf.leaky_relu(x, 0.1)


NAMES = sorted(steps(True))
programs = st.lists(
    st.tuples(st.sampled_from(NAMES), st.integers(0, len(LEAF_SHAPES) - 1)),
    min_size=1,
    max_size=8,
)


def evaluate(program, leaves, weights, api_steps):
    x = leaves[0]
    loss = None
    for (name, other), weight in zip(program, weights):
        # squashed into (-2, 2) after every step, so that chains of products stay finite
        x = (api_steps[name](x, leaves[other]) * 0.5).tanh() * 2.0
        term = (x * weight).sum()
        loss = term if loss is None else loss + term
    return loss


def retrograd_gradients(program, arrays, weights, strategy):
    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        leaves = [rg.tensor(a).require_grad() for a in arrays]
        loss = evaluate(program, leaves, [rg.tensor(w) for w in weights], steps(True))
        grads = loss.backward()
        values = [leaf.grad(grads) for leaf in leaves]
        return float(loss.item()), [None if v is None else v.numpy() for v in values]


@settings(max_examples=150, deadline=None)
@given(program=programs, seed=st.integers(0, 2**31 - 1))
def test_random_tensor_programs_match_torch_and_strategies(program, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    # Values spread apart so that sorts, maxima and cummax have no near ties.
    arrays = [
        rng.permutation(int(np.prod(s))).reshape(s) * 0.13 - 1.1 + rng.uniform(0, 0.01, s)
        for s in LEAF_SHAPES
    ]
    weights = [rng.uniform(-1, 1, SHAPE) for _ in program]
    value, plain = retrograd_gradients(program, arrays, weights, rg.NoCheckpointing())
    _, balanced = retrograd_gradients(program, arrays, weights, rg.BalancedCheckpointing())
    assert_strategies_identical(plain, balanced)

    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    loss = evaluate(program, leaves, [torch.tensor(w) for w in weights], steps(False))
    loss.backward()
    assert np.isfinite(value)
    np.testing.assert_allclose(value, loss.item(), rtol=1e-9, atol=1e-9)
    assert_leaf_gradients_match(plain, leaves, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("strategy", [rg.NoCheckpointing(), rg.BalancedCheckpointing()])
def test_large_masked_programs_match_torch(strategy):
    """Arrays past the size where masked selects run on the bits (4096 elements), with
    negative zeros, infinities masked away, and ties at the relu threshold."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    x_array = rng.standard_normal((4, 8, 16, 16))
    x_array[0, 0, 0, :8] = -0.0
    x_array[1, 1, 1, :8] = 0.0
    other = rng.standard_normal((4, 8, 16, 16))
    seed = rng.standard_normal((4, 8, 16, 16))

    def program(x, y, api):
        if api == "rg":
            h = x.relu() + x.clamp(-0.5, 0.5) + x.leaky_relu(0.2)
            h = h.mask_where(x.greater(y), y * 3.0).mask_fill(y.lower_elem(-1.5), 0.25)
            return h * (x / y.abs().clamp_min(0.2)).mask_fill(y.abs().lower_elem(1e-9), 0.0)
        nnf = torch.nn.functional
        h = torch.relu(x) + x.clamp(-0.5, 0.5) + nnf.leaky_relu(x, 0.2)
        h = torch.where(x > y, y * 3.0, h).masked_fill(y < -1.5, 0.25)
        return h * (x / y.abs().clamp_min(0.2)).masked_fill(y.abs() < 1e-9, 0.0)

    with rg.use_backend(rg.Autodiff(inner_backend(), strategy)):
        x, y = rg.tensor(x_array).require_grad(), rg.tensor(other).require_grad()
        out = program(x, y, "rg")
        grads = (out * rg.tensor(seed)).sum().backward()
        ours = [out.numpy(), x.grad(grads).numpy(), y.grad(grads).numpy()]
    tx, ty = torch.tensor(x_array, requires_grad=True), torch.tensor(other, requires_grad=True)
    tout = program(tx, ty, "torch")
    (tout * torch.tensor(seed)).sum().backward()
    np.testing.assert_array_equal(ours[0], tout.detach().numpy())  # elementwise: exact
    for got, expected in zip(ours[1:], [tx.grad, ty.grad]):  # sums of several contributions
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-12, atol=1e-13)
