"""A linear layer's epilogue in one pass in a captured step (:mod:`retrograd.capture.linear`):
its bias and the GELU after it (``compiled.bias_gelu_float32``), or its bias and the residual
add after it (``compiled.bias_residual_rows``). Bit for bit the calls (``linear``,
``reshape``, ``gelu`` or ``add``), against torch, and in captured steps equal to the eager
step; the calls stay where the pass does not apply."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd import nn, optim
from retrograd.backend.numpy_backend import NumpyBackend
from retrograd.capture import linear as capture_linear

pytestmark = pytest.mark.numpy_only("the rewrite is of the NumPy backend's calls")

BACKEND = NumpyBackend()
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 30.0, -30.0, 1e-30]


def _operands(shape, width, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    weight = (rng.standard_normal((width, shape[-1])) * 2).astype(dtype)
    bias = rng.standard_normal(width).astype(dtype)
    bias[: min(len(SPECIAL), width)] = SPECIAL[:width]  # specials reach the GELU
    return x, weight, bias


def _bits(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


def _fused(x, weight, bias, shape):
    return capture_linear.linear_gelu(
        BACKEND.linear, BACKEND.reshape, BACKEND.gelu, shape, x, weight, bias
    )


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf, on purpose
@pytest.mark.parametrize(
    "shape, width, reshaped",
    [((2048, 128), 512, (16, 128, 512)), ((3, 5, 7), 9, None), ((33, 16), 1, (3, 11, 1))],
)
def test_the_fused_pass_gives_the_calls_bits(shape, width, reshaped):
    x, weight, bias = _operands(shape, width)
    product = BACKEND.linear(x, weight, bias)
    if reshaped is not None:
        product = BACKEND.reshape(product, reshaped)
    expected = (product, BACKEND.gelu(product))
    got = _fused(x, weight, bias, reshaped)
    for a, b in zip(got, expected):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf * 0 in erfc's formula
def test_float64_runs_the_calls():
    x, weight, bias = _operands((6, 4), 5, np.float64)
    product, out = _fused(x, weight, bias, (2, 3, 5))
    expected = BACKEND.reshape(BACKEND.linear(x, weight, bias), (2, 3, 5))
    np.testing.assert_array_equal(product, expected)
    np.testing.assert_array_equal(out, BACKEND.gelu(expected))


def test_the_fused_pass_matches_torch():
    torch = pytest.importorskip("torch")
    x, weight, bias = _operands((64, 32), 48, seed=1)
    bias = np.random.default_rng(2).standard_normal(48).astype(np.float32)
    product, out = _fused(x, weight, bias, None)
    theirs = torch.nn.functional.linear(*(torch.from_numpy(a) for a in (x, weight, bias)))
    np.testing.assert_allclose(product, theirs.numpy(), rtol=1e-5, atol=1e-5)
    gelu = torch.nn.functional.gelu(theirs).numpy()
    np.testing.assert_allclose(out, gelu, rtol=1e-5, atol=2e-5)


def _recorded(reader=False):
    x, weight, bias = _operands((8, 6), 4)
    product = BACKEND.linear(x, weight, bias)
    viewed = BACKEND.reshape(product, (2, 4, 4))
    values = [x, weight, bias, product, viewed, BACKEND.gelu(viewed)]
    meta = [(np.ndarray, v.shape, v.dtype, v.strides) for v in values]
    calls = [
        ("call", BACKEND.linear, "linear", [("s", 0), ("s", 1), ("s", 2)], {}, 3),
        ("call", BACKEND.reshape, "reshape", [("s", 3), ("c", (2, 4, 4))], {}, 4),
        ("call", BACKEND.gelu, "gelu", [("s", 4)], {}, 5),
    ]
    if reader:
        calls.insert(1, ("call", BACKEND.neg, "neg", [("s", 3)], {}, 6))
        meta.append(meta[3])
    return calls, meta, values


def test_the_rewrite_and_where_it_does_not_apply():
    calls, meta, values = _recorded()
    (fused,) = capture_linear.fuse_linear_epilogues(calls, meta, later=set())
    assert fused[2] == "linear_gelu" and fused[5] == (4, 5)
    got = fused[1](*[values[p] if kind == "s" else p for kind, p in fused[3]])
    for a, b in zip(got, values[4:]):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    # the product read after the calls, or by another call in between: the calls stay
    assert capture_linear.fuse_linear_epilogues(calls, meta, later={3}) == calls
    calls, meta, _ = _recorded(reader=True)
    assert capture_linear.fuse_linear_epilogues(calls, meta, later=set()) == calls


def test_a_captured_gelu_mlp_equals_the_eager_step_bit_for_bit():
    rg.seed(0)

    def make():
        return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))

    eager, replayed = make(), make()
    replayed.load_state_dict(eager.state_dict())
    rng = np.random.default_rng(4)
    batches = [rg.tensor(rng.standard_normal((6, 5, 16)).astype(np.float32)) for _ in range(3)]

    def step_for(model):
        opt = optim.AdamW(model, lr=1e-2)

        def step(x):
            loss = model(x).square().mean()
            opt.step(loss.backward())
            return loss

        return step, opt

    eager_step, _ = step_for(eager)
    expected = [eager_step(x).numpy() for x in batches]
    replayed_step, opt = step_for(replayed)
    captured = rg.capture(replayed_step, batches[0], state=[opt])
    assert "linear_gelu" in captured.code
    got = [captured.result.numpy()] + [captured(x).numpy() for x in batches[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), replayed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def _linear_add_calls(x, weight, bias, residual, shape):
    product = BACKEND.linear(x, weight, bias)
    if shape is not None:
        product = BACKEND.reshape(product, shape)
    return product


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "shape, width, reshaped",
    [((2048, 512), 128, (16, 128, 128)), ((3, 5, 7), 9, None), ((33, 16), 1, (3, 11, 1))],
)
def test_the_residual_pass_gives_the_calls_bits(shape, width, reshaped, dtype, first):
    x, weight, bias = _operands(shape, width, dtype)
    bias[:2] = [-0.0, 0.0][: bias.size]
    product = _linear_add_calls(x, weight, bias, None, reshaped)
    residual = np.random.default_rng(3).standard_normal(product.shape).astype(dtype)
    residual.reshape(-1)[:2] = -0.0
    expected = BACKEND.add(residual, product) if first else BACKEND.add(product, residual)
    got = capture_linear.linear_add(
        BACKEND.linear, BACKEND.reshape, BACKEND.add, first, reshaped, x, weight, bias, residual
    )
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert got.base is None  # its own memory, as the add's result
    np.testing.assert_array_equal(_bits(got), _bits(expected))
    if reshaped is not None:  # a target with -1 in it
        target = (-1, *reshaped[1:])
        again = capture_linear.linear_add(
            BACKEND.linear, BACKEND.reshape, BACKEND.add, first, target, x, weight, bias, residual
        )
        np.testing.assert_array_equal(_bits(again), _bits(expected))


def test_a_strided_residual_runs_the_calls():
    x, weight, bias = _operands((6, 4), 5)
    residual = np.random.default_rng(5).standard_normal((5, 6)).astype(np.float32).T
    got = capture_linear.linear_add(
        BACKEND.linear, BACKEND.reshape, BACKEND.add, True, None, x, weight, bias, residual
    )
    np.testing.assert_array_equal(got, residual + BACKEND.linear(x, weight, bias))


def test_the_residual_pass_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    x, weight, bias, residual = (
        rng.standard_normal(shape).astype(np.float32)
        for shape in ((64, 32), (48, 32), 48, (64, 48))
    )
    got = capture_linear.linear_add(
        BACKEND.linear, BACKEND.reshape, BACKEND.add, True, None, x, weight, bias, residual
    )
    theirs = torch.from_numpy(residual) + torch.nn.functional.linear(
        *(torch.from_numpy(a) for a in (x, weight, bias))
    )
    np.testing.assert_allclose(got, theirs.numpy(), rtol=1e-5, atol=1e-5)


class Residual(nn.Module):
    """Pre-norm residual layers ending in a linear layer (a transformer block's ``x + c_proj
    (...)``), and one whose sum is also read elsewhere."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.fc, self.proj = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        x = x + self.proj(self.fc(self.ln(x)).tanh())
        return (x + self.proj(self.fc(x).relu())).square().mean()


def test_a_captured_residual_layer_equals_the_eager_step_bit_for_bit():
    rg.seed(1)
    eager, replayed = Residual(), Residual()
    replayed.load_state_dict(eager.state_dict())
    rng = np.random.default_rng(7)
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
    assert "linear_add" in captured.code
    got = [captured.result.numpy()] + [captured(x).numpy() for x in batches[1:]]
    assert all(np.array_equal(e, g) for e, g in zip(expected, got))
    for (name, p), (_, q) in zip(eager.named_parameters(), replayed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name
