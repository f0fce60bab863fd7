"""The softmax op and its gradient: the compiled float32 rows of the NumPy backend
(``backend/compiled_softmax.py``), the ``softmax_backward`` protocol op, and torch's values.

The compiled loops take the last dimension of large C-contiguous float32 arrays; they round
``exp`` and the row sums differently from NumPy's passes, so values and gradients are held to
float64 (the exact results, to float32 rounding) as closely as torch's float32 kernels are, and
edge rows (masked keys, a row of ``-inf``, NaN, ``+inf``) to torch's values exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from backends import inner_backend
from retrograd.backend import compiled_softmax, numpy_backend

#: [batch, heads, queries, keys]: a masked attention's scores, large enough for the loops
SCORES = (4, 4, 64, 64)


def _scores(seed=0, masked=True, shape=SCORES):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    if masked:
        x[..., np.triu(np.ones(shape[-2:], bool), 1)] = -np.inf
    return x, rng.standard_normal(shape).astype(np.float32)


def make_backend(checkpointing=None):
    return rg.Autodiff(inner_backend(), checkpointing=checkpointing)


def _spy(monkeypatch):
    """Count the calls of the compiled loops."""
    calls = []
    for name in ("softmax_rows", "softmax_backward_rows"):
        kernel = getattr(compiled_softmax, name)
        monkeypatch.setattr(
            compiled_softmax, name, lambda *a, _k=kernel, _n=name: calls.append(_n) or _k(*a)
        )
    return calls


def _torch_reference(x, g, dim, dtype=torch.float64):
    xt = torch.tensor(x, dtype=dtype, requires_grad=True)
    out = torch.softmax(xt, dim)
    (grad,) = torch.autograd.grad(out, xt, torch.tensor(g, dtype=dtype))
    return out.detach().numpy(), grad.numpy()


def _ours(x, g, dim, backend=None):
    t = rg.tensor(x, backend=backend).require_grad()
    out = t.softmax(dim)
    grads = (out * rg.tensor(g, backend=backend)).sum().backward()
    return out.numpy(), t.grad(grads).numpy()


@pytest.mark.numpy_only("the NumPy backend's compiled loops")
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("masked", [True, False])
def test_compiled_rows_are_as_close_to_float64_as_torch_float32(monkeypatch, seed, masked):
    calls = _spy(monkeypatch)
    x, g = _scores(seed, masked)
    out, grad = _ours(x, g, -1, rg.Autodiff(rg.NumpyBackend()))
    assert calls == ["softmax_rows", "softmax_backward_rows"]
    exact_out, exact_grad = _torch_reference(x, g, -1)
    torch_out, torch_grad = _torch_reference(x, g, -1, torch.float32)
    assert out.dtype == grad.dtype == np.float32
    for ours, theirs, exact in ((out, torch_out, exact_out), (grad, torch_grad, exact_grad)):
        ours_error = np.abs(ours - exact).max()
        torch_error = np.abs(theirs - exact).max()
        assert ours_error <= max(2 * torch_error, 4 * np.finfo(np.float32).eps), (
            ours_error,
            torch_error,
        )
    if masked:  # keys after the query's own position: exact zeros, and no gradient
        hidden = np.broadcast_to(np.triu(np.ones(SCORES[-2:], bool), 1), SCORES)
        assert not out[hidden].any() and not grad[hidden].any()


@pytest.mark.numpy_only("the NumPy backend's compiled loops")
@pytest.mark.parametrize(
    "shape, dtype, dim",
    [
        ((4, 4, 64, 64), np.float64, -1),  # float64: NumPy's passes
        ((4, 4, 64, 64), np.float32, 2),  # not the last dimension
        ((4, 64), np.float32, -1),  # small: Numba is not loaded for it
    ],
)
def test_other_softmaxes_stay_numpy(monkeypatch, shape, dtype, dim):
    calls = _spy(monkeypatch)
    x, g = _scores(masked=False, shape=shape)
    out, grad = _ours(x.astype(dtype), g.astype(dtype), dim, rg.Autodiff(rg.NumpyBackend()))
    assert calls == []
    exact_out, exact_grad = _torch_reference(x.astype(dtype), g.astype(dtype), dim)
    # float32: a few ulp of the row sums' cancellation (the gradient's dot product)
    tolerance = 1e-13 if dtype == np.float64 else 4e-6
    np.testing.assert_allclose(out, exact_out, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(grad, exact_grad, rtol=tolerance, atol=tolerance)


@pytest.mark.numpy_only("the NumPy backend's compiled loops")
def test_a_transposed_view_is_not_taken_as_rows(monkeypatch):
    calls = _spy(monkeypatch)
    x, _ = _scores(masked=False)
    view = np.swapaxes(x, -1, -2)  # not C-contiguous
    out = numpy_backend.NumpyBackend().softmax(view, view.ndim - 1)
    assert calls == []
    np.testing.assert_allclose(out, torch.softmax(torch.tensor(view), -1).numpy(), atol=1e-6)


def test_edge_rows_are_torchs():
    """A row of NaN, of ``+inf``, or of ``-inf`` only gives NaN; ``-inf`` among finite values
    gives zeros; huge values do not overflow: in the loops' rows as in NumPy's."""
    width = 256  # 256 rows of 256: the compiled loops on the NumPy backend
    x = np.random.default_rng(3).standard_normal((width, width)).astype(np.float32)
    x[0, 5] = np.nan
    x[1, 7] = np.inf
    x[2, :] = -np.inf
    x[3, 10:] = -np.inf
    x[4, :] = np.float32(3e38)
    x[5, 3] = np.float32(-3e38)
    g = np.ones_like(x)
    expected = torch.softmax(torch.tensor(x), -1).numpy()
    expected_grad = torch.autograd.grad(
        torch.softmax(t := torch.tensor(x, requires_grad=True), -1), t, torch.tensor(g)
    )[0].numpy()
    out, grad = _ours(x, g, -1, make_backend())
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.isnan(grad), np.isnan(expected_grad))
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-6)
    assert out[3, 10:].tolist() == [0.0] * (width - 10)


def test_softmax_backward_of_each_backend_is_the_protocols():
    """The backend's own ``softmax_backward`` against the protocol's default (composed of its
    primitives), on float64 rows and on another dimension."""
    backend = inner_backend()
    rng = np.random.default_rng(1)
    for shape, dim in (((300, 300), 1), ((300, 300), 0), ((5, 6, 7), 1)):
        x = backend.from_data(rng.standard_normal(shape), None, None)
        g = backend.from_data(rng.standard_normal(shape), None, None)
        out = backend.softmax(x, dim)
        ours = backend.to_numpy(backend.softmax_backward(g, out, dim))
        default = backend.to_numpy(
            rg.backend.protocol.Backend.softmax_backward(backend, g, out, dim)
        )
        np.testing.assert_allclose(ours, default, rtol=1e-12, atol=1e-15)


def test_second_derivative_through_softmax_backward():
    """The rule calls ``softmax_backward``, whose default is recorded on the autodiff backend:
    it differentiates again (float64, against torch)."""
    backend = make_backend()
    rng = np.random.default_rng(2)
    x_np, w_np = rng.standard_normal((6, 300)), rng.standard_normal((6, 300))
    x = rg.tensor(x_np, backend=backend).require_grad()
    (gx,) = rg.autograd.grad(
        (x.softmax(-1) * rg.tensor(w_np, backend=backend)).sum(), [x], create_graph=True
    )
    (ggx,) = rg.autograd.grad((gx * gx).sum(), [x])
    xt = torch.tensor(x_np, requires_grad=True)
    (gt,) = torch.autograd.grad(
        (xt.softmax(-1) * torch.tensor(w_np)).sum(), [xt], create_graph=True
    )
    (ggt,) = torch.autograd.grad((gt * gt).sum(), [xt])
    np.testing.assert_allclose(gx.numpy(), gt.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ggx.numpy(), ggt.numpy(), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("masked", [True, False])
def test_recomputed_softmax_gives_forwards_bits(masked):
    """A masked attention written out under a budget that evicts and recomputes the softmax:
    the same gradients, bit for bit, as NoCheckpointing."""
    x, _ = _scores(4, masked=False, shape=(8, 96, 32))  # scores of 8 x 96 x 96: compiled
    w = np.random.default_rng(5).standard_normal((32, 32)).astype(np.float32) / 6
    mask = np.triu(np.ones((96, 96), bool), 1)

    def step(checkpointing):
        backend = make_backend(checkpointing)
        weight = rg.tensor(w, backend=backend).require_grad()
        h = rg.tensor(x, backend=backend)
        for _ in range(3):
            q = h @ weight
            att = q @ q.swap_dims(1, 2)
            if masked:
                att = att.mask_fill(rg.tensor(mask, backend=backend), float("-inf"))
            h = h + (att.softmax(-1) @ q).tanh()
        grads = (h * h).sum().backward()
        return weight.grad(grads).numpy(), grads.recomputed_ops

    full, _ = step(rg.NoCheckpointing())
    budget, recomputed = step(rg.BudgetCheckpointing(4096))
    assert recomputed > 0
    np.testing.assert_array_equal(budget, full)
