"""A linear layer's bias and the GELU after it in one pass in a captured step
(:mod:`retrograd.capture.linear`, ``compiled.bias_gelu_float32``): bit for bit the calls
(``linear``, ``reshape``, ``gelu``), against torch's linear + GELU, and in a captured MLP
equal to the eager step; the calls stay where the pass does not apply."""

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
    (fused,) = capture_linear.fuse_linear_gelu(calls, meta, later=set())
    assert fused[2] == "linear_gelu" and fused[5] == (4, 5)
    got = fused[1](*[values[p] if kind == "s" else p for kind, p in fused[3]])
    for a, b in zip(got, values[4:]):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    # the product read after the calls, or by another call in between: the calls stay
    assert capture_linear.fuse_linear_gelu(calls, meta, later={3}) == calls
    calls, meta, _ = _recorded(reader=True)
    assert capture_linear.fuse_linear_gelu(calls, meta, later=set()) == calls


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
