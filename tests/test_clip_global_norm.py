"""``clip_grad_norm_``'s 2-norm as one backend kernel (``Backend.global_norm``): torch's
clipped gradients and norm; on NumPy the float64 sum of the squares in one pass (exact
squares for float32, so the norm is within ``n * 2**-53`` of the correctly rounded one, where
the float32 squares and sums it replaced were within about ``2**-24``), on torch torch's own
``_foreach_norm`` bits; the same bits for equal gradients wherever they lie in memory and
under every checkpointing strategy; the composed default where a kernel does not apply.

Expected values come from torch or from ``math.fsum`` of the exact float64 squares.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend, on_torch
from retrograd.backend.protocol import Backend

# one of 76,800 elements: the compiled pass on NumPy; the rest small ones beside it
SHAPES = [(300, 256), (256,), (7, 5), (3,)]


def _arrays(seed, dtype=np.float32, scale=1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(dtype) for s in SHAPES]


def _exact_norm(arrays):
    squares = [math.fsum(a.astype(np.float64).ravel() ** 2) for a in arrays]
    return math.sqrt(math.fsum(squares))


def _torchs_norm(arrays):
    norms = torch._foreach_norm([torch.from_numpy(a) for a in arrays], 2.0)
    return torch.linalg.vector_norm(torch.stack(norms)).item()


def _inner_values(arrays):
    backend = inner_backend()
    return backend, [backend.from_data(a, None, None) for a in arrays]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 1e-30, 1e20])
def test_the_kernel_is_the_exact_norm_on_numpy_and_torchs_own_on_torch(dtype, scale):
    arrays = _arrays(1, dtype, scale)
    backend, values = _inner_values(arrays)
    got = float(backend.to_numpy(backend.global_norm(*values)))
    if on_torch():  # torch's clip_grad_norm_: its own kernels' bits (an overflow included)
        assert got == _torchs_norm(arrays) or (math.isinf(got) and math.isinf(_torchs_norm(arrays)))
    else:
        # float32 1e20: squares of 1e40 overflowed float32 (an infinite norm, every gradient
        # zeroed, as torch's float32 accumulation does); in float64 the norm is finite
        assert got == pytest.approx(_exact_norm(arrays), rel=1e-13, abs=0.0)


def test_the_default_is_the_composed_float64_sum_of_float32_sums():
    """``Backend.global_norm``'s default (a backend without its own kernel): each square and
    sum in the values' dtype, the sums added in float64 in order, the square root."""
    arrays = _arrays(2)
    backend, values = _inner_values(arrays)
    got = Backend.global_norm(backend, *values)
    sums = [np.float64(backend.to_numpy(backend.sum(backend.square(v)))) for v in values]
    total = sums[0]
    for s in sums[1:]:
        total = total + s
    assert float(backend.to_numpy(got)) == math.sqrt(total)


def test_clip_grad_norm_matches_torch():
    arrays, weights = _arrays(3), _arrays(4)
    ours = [rg.tensor(a).require_grad() for a in arrays]
    grads = sum((p * rg.tensor(w)).sum() for p, w in zip(ours, weights)).backward()
    norm = rg.nn.utils.clip_grad_norm_(grads, ours, 0.5)
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    sum((p * torch.from_numpy(w)).sum() for p, w in zip(theirs, weights)).backward()
    expected = torch.nn.utils.clip_grad_norm_(theirs, 0.5)
    assert norm == pytest.approx(expected.item(), rel=1e-6)
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.grad(grads).numpy(), t.grad.numpy(), rtol=1e-6, atol=0)
    # NumPy: float64 sums of exact squares (the float32 squares and sums before: about 1e-7),
    # rounded once to the gradients' float32, torch's dtype for the norm
    if on_torch():
        assert norm == pytest.approx(_exact_norm(weights), rel=1e-6)
    else:
        assert norm.item() == float(np.float32(_exact_norm(weights)))


def test_float32_gradients_whose_squares_overflow_float32_are_clipped():
    """Gradients of 1e20 (float32; their norm 3e22 is one too): on NumPy the squares in
    float64 give the finite norm and the gradients are scaled; float32 squares overflowed to
    an infinite norm, a factor of 0 and every gradient zeroed. torch accumulates in float32
    and zeroes them (its clip_grad_norm_ returns inf): the torch backend keeps torch's
    bits."""
    arrays = [np.full(s, 1e20, np.float32) for s in SHAPES]
    ours = [rg.tensor(np.ones(s, np.float32)).require_grad() for s in SHAPES]
    grads = sum((p * rg.tensor(a)).sum() for p, a in zip(ours, arrays)).backward()
    norm = rg.nn.utils.clip_grad_norm_(grads, ours, 1.0)
    if on_torch():
        assert math.isinf(norm)
        assert all(not p.grad(grads).numpy().any() for p in ours)
        return
    assert norm.item() == float(np.float32(_exact_norm(arrays)))
    factor = np.float32(1.0 / (norm.item() + 1e-6))
    for p, a in zip(ours, arrays):
        np.testing.assert_array_equal(p.grad(grads).numpy(), a * factor)


def test_as_tensor_returns_a_tensor_of_the_gradients_dtype_on_their_backend():
    arrays = _arrays(5)
    ours = [rg.tensor(a).require_grad() for a in arrays]
    grads = sum((p * p).sum() for p in ours).backward()
    total = rg.nn.utils.clip_grad_norm_(grads, ours, 1.0, as_tensor=True)
    # torch's total of float32 gradients is float32
    assert isinstance(total, rg.Tensor) and total.dtype == "float32" and total.shape == ()
    assert total.backend is ours[0].grad(grads).backend
    assert total.item() == pytest.approx(_exact_norm([2 * a for a in arrays]), rel=1e-6)


def test_equal_gradients_give_equal_bits_wherever_they_lie():
    arrays = _arrays(6)
    backend, values = _inner_values(arrays)
    first = backend.to_numpy(backend.global_norm(*values))
    for offset in (1, 3, 5):  # the same values at other addresses (and alignments)
        moved = []
        for a in arrays:
            buffer = np.empty(a.size + offset, a.dtype)
            buffer[offset:] = a.ravel()
            moved.append(buffer[offset:].reshape(a.shape))
        _, values = _inner_values(moved)
        again = backend.to_numpy(backend.global_norm(*values))
        assert np.asarray(again).tobytes() == np.asarray(first).tobytes()


@pytest.mark.parametrize(
    "strategy",
    [rg.BalancedCheckpointing, lambda: rg.BudgetCheckpointing(64 * 1024)],
    ids=["balanced", "budget"],
)
def test_clipped_training_is_bitwise_the_same_under_every_strategy(strategy):
    def train(checkpointing):
        rg.seed(7)
        backend = rg.Autodiff(inner_backend(), checkpointing=checkpointing)
        with rg.use_backend(backend):
            model = rg.nn.Sequential(rg.nn.Linear(256, 300), rg.nn.Tanh(), rg.nn.Linear(300, 4))
            opt = rg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x = rg.tensor(np.random.default_rng(8).standard_normal((16, 256)).astype(np.float32))
            norms = []
            for _ in range(3):
                grads = model(x).tanh().square().sum().backward()
                norms.append(rg.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.1))
                opt.step(grads)
            return norms, [p.numpy().copy() for p in model.parameters()]

    norms, params = train(rg.NoCheckpointing())
    other_norms, other_params = train(strategy())
    assert norms == other_norms
    assert all(a.tobytes() == b.tobytes() for a, b in zip(params, other_params))
