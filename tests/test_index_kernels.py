"""NumPy's compiled embedding gradient (``select_add`` of rows, :mod:`retrograd.backend.
compiled_index`) against NumPy's sort-and-``reduceat`` path bit for bit (runs of every length
around NumPy's pairwise-sum blocks, negative indices, signed zeros, NaN and infinities),
against torch's ``index_add``, and an embedding's gradient on it by finite differences. NaN
stays NaN, of either sign (which NaN of two an addition keeps is the compiler's choice)."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from retrograd.autograd import gradcheck
from retrograd.backend import compiled_index, numpy_backend
from retrograd.nn import functional as F  # noqa: N812

pytestmark = pytest.mark.numpy_only

NUMPY = rg.NumpyBackend()


def both_paths(monkeypatch, x, indices, values):
    """``select_add`` with the compiled loop forced at every size (checking that it ran), and
    with NumPy's sort-and-``reduceat`` path."""
    calls, loop = [], compiled_index.index_add_rows

    def spy(*args):
        calls.append(1)
        return loop(*args)

    monkeypatch.setattr(numpy_backend, "COMPILED_INDEX_MIN_SIZE", 0)
    with monkeypatch.context() as patch:
        patch.setattr(compiled_index, "index_add_rows", spy)
        compiled = NUMPY.select_add(x, indices, values, 0)
    assert calls == [1]
    monkeypatch.setattr(numpy_backend, "COMPILED_INDEX_MIN_SIZE", 1 << 62)
    return compiled, NUMPY.select_add(x, indices, values, 0)


def assert_same_bits(a, b):
    """Equal bits, NaN aside: NaN where the other has NaN (of either sign: which NaN an
    addition of two keeps is the compiler's choice, NumPy's C as Numba's)."""
    nan = np.isnan(a)
    np.testing.assert_array_equal(nan, np.isnan(b))
    kind = np.dtype(f"u{a.itemsize}")
    np.testing.assert_array_equal(a.view(kind)[~nan], b.view(kind)[~nan])


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # inf - inf, on purpose
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "rows, count, width",
    [(65, 2048, 128), (3, 700, 5), (1, 1100, 3), (40, 64, 1), (2, 9000, 2)],
)
def test_the_compiled_rows_add_gives_reduceats_bits(monkeypatch, rows, count, width, dtype):
    rng = np.random.default_rng(count + width)
    indices = rng.integers(-rows, rows, count)  # negative ones count from the end
    if rows > 2:
        indices[: count // 3] = 1  # one long run: past 8 and 128 rows (pairwise halves)
    scales = 10.0 ** rng.uniform(-4, 4, (count, 1))
    values = (rng.standard_normal((count, width)) * scales).astype(dtype)
    values.flat[:6] = [np.nan, -0.0, np.inf, -np.inf, 0.0, -0.0]
    for x in (np.zeros((rows, width), dtype), rng.standard_normal((rows, width)).astype(dtype)):
        compiled, numpy_path = both_paths(monkeypatch, x, indices, values)
        assert_same_bits(compiled, numpy_path)
        assert compiled.dtype == x.dtype and compiled.shape == x.shape


def test_signed_zeros_sum_as_reduceat_does(monkeypatch):
    """Runs of -0.0 only: a run of one keeps its -0.0, longer runs as NumPy's sums give them,
    and adding into -0.0 rows."""
    indices = np.repeat(np.arange(4), [1, 2, 9, 200])
    values = np.full((indices.size, 2), -0.0, np.float32)
    x = np.full((4, 2), -0.0, np.float32)
    compiled, numpy_path = both_paths(monkeypatch, x, indices, values)
    assert_same_bits(compiled, numpy_path)


def test_an_index_out_of_range_is_reported_and_the_target_untouched(monkeypatch):
    monkeypatch.setattr(numpy_backend, "COMPILED_INDEX_MIN_SIZE", 0)
    x = np.zeros((3, 4), np.float32)
    with pytest.raises(IndexError):
        NUMPY.select_add(x, np.array([0, 5] * 40), np.ones((80, 4), np.float32), 0)
    assert not x.any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_compiled_rows_add_matches_torch_index_add(monkeypatch, dtype):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(numpy_backend, "COMPILED_INDEX_MIN_SIZE", 0)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((65, 16)).astype(dtype)
    indices = rng.integers(0, 65, 2048)
    values = rng.standard_normal((2048, 16)).astype(dtype)
    ours = NUMPY.select_add(x, indices, values, 0)
    theirs = torch.from_numpy(x.copy()).index_add_(
        0, torch.from_numpy(indices), torch.from_numpy(values)
    )
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=tolerance, atol=tolerance)


def test_an_embeddings_gradient_on_the_loop_matches_finite_differences(monkeypatch):
    monkeypatch.setattr(numpy_backend, "COMPILED_INDEX_MIN_SIZE", 0)
    calls, loop = [], compiled_index.index_add_rows
    monkeypatch.setattr(compiled_index, "index_add_rows", lambda *a: (calls.append(1), loop(*a))[1])
    rng = np.random.default_rng(7)
    with rg.use_backend(rg.Autodiff(rg.NumpyBackend())):
        weight = rg.tensor(rng.standard_normal((5, 3))).require_grad()
        indices = rg.tensor(rng.integers(0, 5, 80))
        scale = rg.tensor(rng.standard_normal((80, 3)))
        assert gradcheck(lambda w: (F.embedding(indices, w) * scale).sum(), (weight,))
    assert calls
