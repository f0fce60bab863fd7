"""The engine's in-place gradient sums: a split's pieces add their gradients into one buffer
(``slice_accumulate``), a third contribution is added into the sum the second one made
(``accumulate``), and nothing a rule returned or a caller holds is ever written into."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")

rng = np.random.default_rng(3)


def _split_model(module, x):
    y = x * 2.0
    a, b, c = y.split(2, 1) if module is rg else y.split(2, dim=1)
    return (a * 1.0).sum() + (b * b).sum() + (c * 3.0).sum() + (y * y).sum()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_split_pieces_sum_into_one_buffer_and_match_torch(dtype, monkeypatch):
    calls = []
    inner = type(inner_backend())
    kernel = inner.slice_accumulate
    monkeypatch.setattr(
        inner,
        "slice_accumulate",
        lambda self, *args: calls.append(1) or kernel(self, *args),
    )
    array = rng.standard_normal((3, 6)).astype(dtype)
    x = rg.tensor(array).require_grad()
    grads = _split_model(rg, x).backward()
    t = torch.tensor(array, requires_grad=True)
    _split_model(torch, t).backward()
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(x.grad(grads).numpy(), t.grad.numpy(), rtol=tolerance)
    assert len(calls) >= 2  # the pieces after the first went into the sum
    assert not grads.owned and not grads.in_place  # nothing held once backward is done


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_in_place_sums_are_bit_identical_to_new_arrays(dtype):
    """``create_graph=True`` never sums in place (its gradients are recorded values)."""
    array = rng.standard_normal((4, 6)).astype(dtype)
    results = []
    for create_graph in (False, True):
        x = rg.tensor(array).require_grad()
        grads = _split_model(rg, x).backward(create_graph=create_graph)
        results.append(x.grad(grads).numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_sums_never_write_into_a_gradient_another_node_holds():
    """``z = y + y`` hands z's gradient itself to y twice; y's later contributions (a split's
    pieces, another product) must go into a sum of y's own, not into z's retained gradient."""
    x = rg.tensor(rng.standard_normal((2, 4))).require_grad()
    y = x * 1.0
    z = y + y
    z.retain_grad()
    a, b = y.split(2, 1)
    loss = z.sum() + (a * 3.0).sum() + (b * 5.0).sum() + (y * 7.0).sum()
    grads = loss.backward()
    np.testing.assert_array_equal(z.grad(grads).numpy(), np.ones((2, 4)))
    assert not grads.owned
    expected = 2.0 + np.array([3.0, 3.0, 5.0, 5.0]) + 7.0
    np.testing.assert_array_equal(x.grad(grads).numpy(), np.broadcast_to(expected, (2, 4)))


@pytest.mark.parametrize("dim", [0, 1])
def test_select_add_of_many_indices_sums_each_run(dim):
    """The NumPy kernel's sorted path (64 indices or more, negative ones wrapping) against
    np.add.at, element by element."""
    x = rng.standard_normal((7, 9))
    before = x.copy()
    size = x.shape[dim]
    indices = rng.integers(-size, size, 200)
    shape = [7, 9]
    shape[dim] = 200
    values = rng.standard_normal(shape)
    expected = x.copy()
    np.add.at(expected, (slice(None),) * dim + (indices,), values)
    ours = rg.NumpyBackend().select_add(x, indices, values, dim)
    np.testing.assert_allclose(ours, expected, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(x, before)  # x is not written into


def test_a_leaf_gradient_is_summed_into_new_arrays(monkeypatch):
    """A leaf's gradient, which hooks may take as soon as it is final, is never added into:
    each sum of its contributions is a new array."""
    calls = []
    kernel = rg.NumpyBackend.accumulate
    monkeypatch.setattr(
        rg.NumpyBackend, "accumulate", lambda self, *args: calls.append(1) or kernel(self, *args)
    )
    w = rg.tensor(rng.standard_normal((3, 3))).require_grad()
    grads = ((w * 2.0).sum() + (w * w).sum() + (w * 3.0).sum()).backward()
    np.testing.assert_allclose(w.grad(grads).numpy(), 5.0 + 2 * w.numpy(), rtol=1e-15)
    assert not calls and not grads.owned
