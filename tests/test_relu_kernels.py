"""NumPy's compiled ReLU and ReLU gradient (:mod:`retrograd.backend.compiled_relu`) against
the NumPy formulas, bit for bit: NaN, signed zeros and infinities, float32 and float64, in
every memory layout (each result laid out as its input), and mixed layouts (NumPy's path)."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd.backend import compiled_relu, numpy_backend

pytestmark = pytest.mark.numpy_only

RNG = np.random.default_rng(31)
NUMPY = rg.NumpyBackend()
SPECIALS = [np.nan, -0.0, 0.0, np.inf, -np.inf, -np.nan, 1e-45, -1e-45]

LAYOUTS = {
    "C": lambda a: a,
    "channels-last": lambda a: np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1),
    "F": np.asfortranarray,
    "strided": lambda a: np.repeat(a, 2, axis=-1)[..., ::2],
}


def values(dtype):
    x = RNG.integers(-2, 3, (3, 5, 6, 7)).astype(dtype)
    x.flat[: len(SPECIALS)] = SPECIALS
    x.flat[-len(SPECIALS) :] = SPECIALS
    return x


def bits(a):
    return a.view(np.dtype(f"u{a.itemsize}"))


def both_paths(monkeypatch, fn, loop, dense):
    """``fn()`` with the compiled loops forced at every size, and with NumPy's formulas;
    checks that the compiled ``loop`` ran exactly when the arrays are ``dense``."""
    calls, compiled_loop = [], getattr(compiled_relu, loop)

    def spy(*args):
        calls.append(1)
        return compiled_loop(*args)

    monkeypatch.setattr(numpy_backend, "COMPILED_RELU_MIN_SIZE", 0)
    with monkeypatch.context() as patch:
        patch.setattr(compiled_relu, loop, spy)
        compiled = fn()
    assert bool(calls) == dense
    monkeypatch.setattr(numpy_backend, "COMPILED_RELU_MIN_SIZE", 1 << 62)
    return compiled, fn()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_compiled_relu_gives_numpys_bits_and_layout(layout, dtype, monkeypatch):
    x = LAYOUTS[layout](values(dtype))
    dense = layout != "strided"
    compiled, numpy = both_paths(monkeypatch, lambda: NUMPY.relu(x), "relu_flat", dense)
    np.testing.assert_array_equal(bits(compiled), bits(numpy))
    assert compiled.dtype == numpy.dtype
    if layout != "strided":  # np.maximum lays a strided input out C-contiguous
        assert compiled.strides == x.strides
    assert compiled.strides == numpy.strides


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("out_layout", LAYOUTS)
@pytest.mark.parametrize("grad_layout", LAYOUTS)
def test_the_compiled_relu_backward_gives_numpys_bits(grad_layout, out_layout, dtype, monkeypatch):
    out = LAYOUTS[out_layout](values(dtype))
    grad = RNG.standard_normal(out.shape).astype(dtype)
    grad.flat[3 : 3 + len(SPECIALS)] = SPECIALS
    grad = LAYOUTS[grad_layout](grad)
    dense = grad_layout == out_layout != "strided"
    compiled, numpy = both_paths(
        monkeypatch, lambda: NUMPY.relu_backward(grad, out), "relu_backward_flat", dense
    )
    np.testing.assert_array_equal(bits(compiled), bits(numpy))
    assert compiled.dtype == dtype
    if grad_layout != "strided":  # the result keeps the gradient's layout
        assert compiled.strides == grad.strides
