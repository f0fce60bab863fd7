"""A layer norm's backward and the residual add after it, as one call in a captured step
(:mod:`retrograd.capture.norm`, ``compiled_norm.layer_norm_backward_rows`` with an addend):
bit for bit the two calls, against torch's layer-norm gradient and by finite differences in
float64, and in a captured pre-norm block equal to the eager step."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.backend.numpy_backend import NumpyBackend
from retrograd.capture import norm as capture_norm

pytestmark = pytest.mark.numpy_only("the rewrite is of the NumPy backend's calls")

BACKEND = NumpyBackend()


def _case(shape, dtype, weighted, seed=0):
    rng = np.random.default_rng(seed)
    width = shape[-1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    weight = rng.standard_normal(width).astype(dtype) if weighted else np.zeros(0, dtype)
    bias = rng.standard_normal(width).astype(dtype) if weighted else np.zeros(0, dtype)
    _, stats = BACKEND.layer_norm(x, weight, bias, 1e-5)
    grad = rng.standard_normal(shape).astype(dtype)
    residual = rng.standard_normal(shape).astype(dtype)
    residual.reshape(-1)[:3] = [-0.0, 0.0, -0.0]
    return grad, x, weight, stats, residual


def _fused(first, grad, x, weight, stats, residual):
    return capture_norm.layer_norm_backward_add(
        BACKEND.layer_norm_backward, BACKEND.add, first, grad, x, weight, stats, 1e-5, residual
    )


def _bits(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(16, 128, 128), (3, 37, 384), (5, 7), (40, 1), (33, 100)])
def test_the_fused_kernel_gives_the_two_calls_bits(shape, dtype, weighted, first):
    grad, x, weight, stats, residual = _case(shape, dtype, weighted)
    dx, dweight, dbias = BACKEND.layer_norm_backward(grad, x, weight, stats, 1e-5)
    expected = BACKEND.add(residual, dx) if first else BACKEND.add(dx, residual)
    got = _fused(first, grad, x, weight, stats, residual)
    assert got[0].base is None  # its own memory, as the add's result
    for a, b in zip(got, (expected, dweight, dbias)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_where_the_compiled_kernel_does_not_apply_the_two_calls_run():
    grad, x, weight, stats, residual = _case((6, 5), np.float32, True)
    grad = grad.astype(np.float64)  # mixed dtypes: NumPy's layer norm, then the add
    dx, dweight, dbias = BACKEND.layer_norm_backward(grad, x, weight, stats, 1e-5)
    got = _fused(True, grad, x, weight, stats, residual)
    for a, b in zip(got, (BACKEND.add(residual, dx), dweight, dbias)):
        np.testing.assert_array_equal(a, b)


def test_the_fused_gradient_matches_torch():
    torch = pytest.importorskip("torch")
    grad, x, weight, stats, residual = _case((4, 9, 16), np.float64, True, seed=1)
    got, dweight, dbias = _fused(True, grad, x, weight, stats, residual)
    tx = torch.from_numpy(x).requires_grad_()
    tw = torch.from_numpy(weight).requires_grad_()
    tb = torch.zeros(16, dtype=torch.float64, requires_grad=True)
    out = torch.nn.functional.layer_norm(tx, (16,), tw, tb, 1e-5)
    out.backward(torch.from_numpy(grad))
    np.testing.assert_allclose(got, residual + tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dweight, tw.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dbias, tb.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_the_fused_gradient_matches_finite_differences():
    grad, x, weight, stats, residual = _case((3, 6), np.float64, True, seed=2)
    got, _, _ = _fused(False, grad, x, weight, stats, residual)

    def objective(value):
        out, _ = BACKEND.layer_norm(value, weight, np.zeros(6), 1e-5)
        return float(np.sum(out * grad))

    numerical = np.zeros_like(x)
    step = 1e-6
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        numerical[index] = (objective(up) - objective(down)) / (2 * step)
    np.testing.assert_allclose(got - residual, numerical, rtol=1e-6, atol=1e-7)


def _recorded():
    """A layer norm's backward and its residual add, as recorded calls, with metadata."""
    grad, x, weight, stats, residual = _case((4, 8), np.float32, True)
    values = [grad, x, weight, stats, residual]
    dx, dweight, dbias = BACKEND.layer_norm_backward(grad, x, weight, stats, 1e-5)
    values += [dx, dweight, dbias, BACKEND.add(residual, dx)]
    meta = [(np.ndarray, v.shape, v.dtype, v.strides) for v in values]
    args = [("s", 0), ("s", 1), ("s", 2), ("s", 3), ("c", 1e-5)]
    calls = [
        ("call", BACKEND.layer_norm_backward, "layer_norm_backward", args, {}, (5, 6, 7)),
        ("call", BACKEND.add, "add", [("s", 4), ("s", 5)], {}, 8),
    ]
    return calls, meta, values


def test_the_rewrite_and_where_it_does_not_apply():
    calls, meta, values = _recorded()
    (fused,) = capture_norm.fuse_layer_norm_backward_add(calls, meta, later=set())
    assert fused[2] == "layer_norm_backward_add" and fused[5] == (8, 6, 7)
    out = fused[1](*[values[p] if kind == "s" else p for kind, p in fused[3]])
    np.testing.assert_array_equal(out[0], values[8])
    # dx read after the calls, or by another call: both calls stay
    assert capture_norm.fuse_layer_norm_backward_add(calls, meta, later={5}) == calls
    reader = ("call", BACKEND.neg, "neg", [("s", 5)], {}, 9)
    meta.append(meta[5])
    assert capture_norm.fuse_layer_norm_backward_add([*calls, reader], meta, set())[:2] == calls


class Block(nn.Module):
    """Two pre-norm residual layers (a transformer block's shape of gradient sums)."""

    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(16), nn.LayerNorm(16)
        self.fc_1, self.fc_2 = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        x = x + self.fc_1(self.ln_1(x)).tanh()
        x = x + self.fc_2(self.ln_2(x)).tanh()
        return x.square().mean()


def test_a_captured_pre_norm_block_equals_the_eager_step_bit_for_bit():
    rg.seed(0)
    eager, replayed = Block(), Block()
    replayed.load_state_dict(eager.state_dict())
    rng = np.random.default_rng(4)
    batches = [rg.tensor(rng.standard_normal((6, 5, 16)).astype(np.float32)) for _ in range(3)]

    def step_for(model):
        opt = optim.AdamW(model, lr=1e-2)

        def step(x):
            loss = model(x)
            opt.step(loss.backward())
            return loss

        return step, opt

    eager_step, _ = step_for(eager)
    expected = [eager_step(x).numpy() for x in batches]
    replayed_step, opt = step_for(replayed)
    captured = rg.capture(replayed_step, batches[0], state=[opt])
    assert captured.code.count("layer_norm_backward_add") >= 1
    got = [captured.result.numpy()] + [captured(x).numpy() for x in batches[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), replayed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name
