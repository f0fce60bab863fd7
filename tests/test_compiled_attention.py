"""The compiled softmax loops of float32 attention on the NumPy backend
(``backend/compiled_attention.py``).

They replace NumPy's passes over each block of scores (the causal bias, the row maximum,
``exp``, and backward's ``(dP - row) * P``) when attention has neither a mask nor dropout.
Only ``exp`` rounds differently (Numba's Cephes ``expf`` against NumPy's): the outputs, the
log-sum-exp and the three gradients agree with the NumPy path to a stated float32 tolerance,
and with float64 (the exact values, to float32 rounding) as closely as the NumPy path does.
Float32 values and gradients against torch are in tests/test_transformer_ops.py (its float32
cases without a mask run these loops).
"""

from __future__ import annotations

import numpy as np
import pytest

from retrograd.backend import compiled_attention, numpy_transformer

pytestmark = pytest.mark.numpy_only("the NumPy backend's attention kernels")

EMPTY = np.empty((0,), np.float32)

#: (batch, heads, queries, keys, head size, value size), causal
SHAPES = {
    "GPT-small heads, causal": ((4, 4, 128, 128, 32, 32), True),
    "rows in blocks, causal": ((2, 2, 150, 150, 8, 8), True),
    "causal L < S": ((1, 2, 70, 130, 4, 4), True),
    "causal L > S": ((1, 2, 130, 70, 4, 4), True),
    "plain": ((2, 3, 5, 7, 4, 6), False),
    "plain, long": ((2, 2, 90, 200, 16, 8), False),
}

#: Relative to the largest magnitude of each result: a couple of float32 ulp per probability,
#: carried through the sums of products over up to 200 keys.
TOLERANCE = 2e-6


def _arrays(shape, seed=0):
    batch, heads, length, source, e, ev = shape
    rng = np.random.default_rng(seed)

    def draw(*dims):
        return rng.standard_normal(dims).astype(np.float32)

    return (
        draw(batch, heads, length, e),
        draw(batch, heads, source, e),
        draw(batch, heads, source, ev),
        draw(batch, heads, length, ev),
    )


def _run(q, k, v, g, causal):
    kernels = numpy_transformer.NumpyTransformerKernels()
    scale = 1.0 / np.sqrt(q.shape[-1])
    out, lse = kernels.attention(q, k, v, EMPTY, EMPTY, scale, causal)
    grads = kernels.attention_backward(g, q, k, v, out, lse, EMPTY, EMPTY, scale, causal)
    return [out, lse, *grads]


def _numpy_path(monkeypatch, *arrays, causal):
    with monkeypatch.context() as patch:
        patch.setattr(numpy_transformer, "_compiled_softmax", lambda *_: None)
        return _run(*arrays, causal)


def _close(found, expected, tolerance):
    scale = np.abs(expected).max()
    return np.abs(found.astype(np.float64) - expected).max() <= tolerance * scale


@pytest.mark.parametrize("name", SHAPES)
def test_compiled_softmax_agrees_with_the_numpy_path_to_float32_rounding(name, monkeypatch):
    shape, causal = SHAPES[name]
    arrays = _arrays(shape)
    calls = []
    original = numpy_transformer._compiled_softmax

    def spy(*args):
        module = original(*args)
        calls.append(module)
        return module

    monkeypatch.setattr(numpy_transformer, "_compiled_softmax", spy)
    compiled = _run(*arrays, causal)
    assert calls and all(module is compiled_attention for module in calls)
    numpy_path = _numpy_path(monkeypatch, *arrays, causal=causal)
    for found, expected in zip(compiled, numpy_path):
        assert found.dtype == np.float32 and found.shape == expected.shape
        assert _close(found, expected.astype(np.float64), TOLERANCE)


@pytest.mark.parametrize("name", ["GPT-small heads, causal", "causal L > S", "plain, long"])
def test_compiled_softmax_is_as_close_to_float64_as_the_numpy_path(name, monkeypatch):
    """Against the same attention in float64: the compiled loops' error is the NumPy path's
    own float32 error, to within rounding luck."""
    shape, causal = SHAPES[name]
    arrays = _arrays(shape, seed=1)
    exact = _numpy_path(monkeypatch, *(a.astype(np.float64) for a in arrays), causal=causal)
    compiled = _run(*arrays, causal)
    numpy_path = _numpy_path(monkeypatch, *arrays, causal=causal)

    def error(found):
        return sum(np.sqrt(((f - e) ** 2).mean() / (e**2).mean()) for f, e in zip(found, exact))

    assert error(compiled) <= 1.25 * error(numpy_path)


def test_a_nan_query_spreads_to_what_it_reaches_as_in_torch():
    """A NaN in query 3 (causal): its output row and its ``dq`` row are NaN, and the key and
    value gradients are NaN where torch's are (``dv`` only for the keys query 3 sees: the keys
    hidden from it are exact zeros, not ``exp(NaN - inf)``)."""
    torch = pytest.importorskip("torch")
    q, k, v, g = _arrays((1, 1, 6, 6, 4, 4))
    q[0, 0, 3, 1] = np.nan
    out, _, dq, dk, dv = _run(q, k, v, g, True)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    expected.backward(torch.tensor(g))

    def nan_rows(a):
        return np.isnan(a).any(-1).ravel().tolist()

    assert nan_rows(out) == [False, False, False, True, False, False]
    for found, reference in zip((dq, dk, dv), (tq, tk, tv)):
        assert nan_rows(found) == nan_rows(reference.grad.numpy())
    assert nan_rows(dv) == [True] * 4 + [False] * 2


def test_the_compiled_loops_take_only_float32_attention_without_mask_or_dropout():
    q = np.zeros((1, 2, 4), np.float32)
    mask = np.zeros((2, 2), np.float32)
    assert numpy_transformer._compiled_softmax(q, q, q, EMPTY, EMPTY) is compiled_attention
    assert numpy_transformer._compiled_softmax(q, q, q, mask, EMPTY) is None
    assert numpy_transformer._compiled_softmax(q, q, q, EMPTY, mask) is None
    wide = q.astype(np.float64)
    assert numpy_transformer._compiled_softmax(wide, wide, wide, EMPTY, EMPTY) is None


def test_views_of_one_projection_as_a_gpt_hands_them(monkeypatch):
    """q, k, v as nanoGPT makes them (``[B, T, 3C]`` split, ``[B, T, H, E] -> [B, H, T, E]``
    views) and the gradient of an output laid out the same way: the compiled path reads the
    strided views and writes its output rows in place, agreeing with the NumPy path."""
    batch, heads, length, e = 2, 4, 96, 8
    rng = np.random.default_rng(3)
    qkv = rng.standard_normal((batch, length, 3 * heads * e)).astype(np.float32)
    q, k, v = (
        part.reshape(batch, length, heads, e).transpose(0, 2, 1, 3)
        for part in np.split(qkv, 3, axis=-1)
    )
    g = rng.standard_normal((batch, length, heads, e)).astype(np.float32).transpose(0, 2, 1, 3)
    compiled = _run(q, k, v, g, True)
    numpy_path = _numpy_path(monkeypatch, q, k, v, g, causal=True)
    assert compiled[0].transpose(0, 2, 1, 3).flags.c_contiguous  # [B, T, H, E] in memory
    for found, expected in zip(compiled, numpy_path):
        assert _close(found, expected.astype(np.float64), TOLERANCE)
