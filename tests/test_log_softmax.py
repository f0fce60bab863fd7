"""The loss kernels: log-softmax's (forward, and the fused backward ``grad - exp(out) *
sum(grad)``) against PyTorch over several blocks of rows and on another dimension, the blocked
NumPy kernels against one block and against the protocol's composed default, finite
differences and second derivatives (the composed default, recorded); gather's backward against
its composed default and PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
import retrograd.nn.functional as F  # noqa: N812
from backends import inner_backend
from nn_testing import (
    assert_second_derivatives_match_torch,
    check_finite_differences,
    compare_with_torch,
)
from retrograd.backend import numpy_transformer

torch = pytest.importorskip("torch")

rng = np.random.default_rng(17)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "dim"), [((70, 3000), 1), ((4, 6, 5), 1), ((3, 700), 0)])
def test_log_softmax_matches_torch(shape, dim, dtype):
    x = rng.standard_normal(shape) * 4
    compare_with_torch(
        lambda t: F.log_softmax(t, dim), lambda t: torch.log_softmax(t, dim), [x], dtype
    )


def test_log_softmax_finite_differences_and_second_derivatives():
    check_finite_differences(lambda t: F.log_softmax(t, 1), [rng.standard_normal((3, 5))])
    check_finite_differences(lambda t: F.log_softmax(t, 0), [rng.standard_normal((4, 3))])
    assert_second_derivatives_match_torch(
        lambda t: F.log_softmax(t, -1) * F.log_softmax(t, -1),
        lambda t: torch.log_softmax(t, -1) * torch.log_softmax(t, -1),
        [rng.standard_normal((3, 6))],
    )


@pytest.mark.numpy_only("the NumPy kernels' blocks")
def test_blocks_agree_with_one_block_and_with_the_composed_default(monkeypatch):
    from retrograd.backend.protocol import Backend

    backend = rg.NumpyBackend()
    x = rng.standard_normal((37, 50)).astype(np.float32)
    grad = rng.standard_normal((37, 50)).astype(np.float32)
    whole = backend.log_softmax(x, 1), backend.log_softmax_backward(grad, x, 1)
    monkeypatch.setattr(numpy_transformer, "LOG_SOFTMAX_BLOCK_ELEMENTS", 120)
    blocked = backend.log_softmax(x, 1), backend.log_softmax_backward(grad, x, 1)
    for a, b in zip(whole, blocked):
        assert a.dtype == np.float32
        np.testing.assert_array_equal(a, b)
    out = whole[0]
    composed = Backend.log_softmax_backward(backend, grad, out, 1)
    np.testing.assert_allclose(backend.log_softmax_backward(grad, out, 1), composed, rtol=1e-6)
    reference = x - np.log(np.exp(x.astype(np.float64)).sum(1, keepdims=True))
    np.testing.assert_allclose(out, reference, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("shape", "dim"), [((64, 10), 1), ((4, 6, 5), 0), ((3, 5, 7), -1)])
def test_torch_backend_log_softmax_backward_is_the_composed_default_and_torchs(shape, dim, dtype):
    """``TorchBackend``'s one-kernel log-softmax backward: the protocol's composition and the
    gradient torch's autograd gives, also for a gradient that is a transposed view."""
    from retrograd.backend.protocol import Backend

    backend = rg.TorchBackend("cpu")
    x = torch.from_numpy(rng.standard_normal(shape) * 3).to(dtype).requires_grad_()
    grad = (
        torch.from_numpy(rng.standard_normal(shape[::-1]))
        .to(dtype)
        .permute(*reversed(range(len(shape))))
    )
    out = torch.log_softmax(x, dim)
    (expected,) = torch.autograd.grad(out, x, grad)
    out = out.detach()
    ours = backend.log_softmax_backward(grad, out, dim)
    composed = Backend.log_softmax_backward(backend, grad, out, dim)
    assert ours.dtype == dtype and ours.shape == x.shape
    tolerance = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(ours, composed, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(ours, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_gather_backward_kernel_is_the_composed_default_and_torchs(dim):
    """``gather``'s gradient: the backend's kernel, the protocol's composition, PyTorch."""
    from retrograd.backend.protocol import Backend

    shape = (4, 5, 3)
    index_shape = tuple(n - 1 if d != dim else 6 for d, n in enumerate(shape))
    indices = rng.integers(0, shape[dim], size=index_shape)
    grad = rng.standard_normal(index_shape)
    backend = inner_backend()
    g, i = (backend.from_data(a, None, backend.default_device) for a in (grad, indices))
    ours = backend.to_numpy(backend.gather_backward(g, i, dim, shape))
    composed = backend.to_numpy(Backend.gather_backward(backend, g, i, dim, shape))
    np.testing.assert_array_equal(ours, composed)
    x = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    torch.gather(x, dim, torch.tensor(indices)).backward(torch.tensor(grad))
    np.testing.assert_allclose(ours, x.grad.numpy(), rtol=1e-12)
