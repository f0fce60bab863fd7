"""The Euclidean norm (``linalg.vector_norm``, ``Tensor.norm``, ``matrix_norm('fro')``) as one op
of the op table, ``norm2``, whose rule is torch's ``norm_backward`` for ``p = 2``.

Until 7 December the norm was composed of ``|x|``, squares, a sum and a root, plus a term that
gave a zero vector torch's NaN second derivative; its graph held ``|x|`` beside ``x``, twice
what torch saves (``x`` and the norm). Written as torch's rule, op for op, the second
derivative at a zero vector is torch's NaN with no extra term.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")

ROWS, COLS = 64, 256


def test_the_norm_holds_its_input_and_its_result_as_torch_saves():
    a = np.random.default_rng(0).standard_normal((ROWS, COLS)).astype(np.float32)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        x = rg.tensor(a).require_grad()
        base = ((x * 2.0) * 1.5).sum().backward().peak_bytes
        normed = (rg.linalg.vector_norm(x * 2.0, dim=1) * 1.5).sum().backward().peak_bytes
    # x * 2 (held by the norm's rule; the products by numbers read nothing) and the norm of
    # its 64 rows: what torch's pack hook sees (x and the result). The composition held 2x
    assert (base, normed) == (0, 4 * ROWS * COLS + 4 * ROWS)
    # and what torch saves, measured
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    h = torch.tensor(a, requires_grad=True) * 2.0
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.linalg.vector_norm(h, dim=1)
    assert sum(saved.values()) == 4 * ROWS * COLS + 4 * ROWS


def _derivatives(lib, array, dim, keepdim):
    x = lib.tensor(array, requires_grad=True)
    y = lib.linalg.vector_norm(x, 2, dim=dim, keepdim=keepdim)
    w = lib.tensor(np.linspace(0.5, 1.5, y.numel()).reshape(tuple(y.shape)))
    (g,) = lib.autograd.grad((y * w).sum(), x, create_graph=True)
    v = lib.tensor(np.random.default_rng(2).standard_normal(tuple(x.shape)))
    (h,) = lib.autograd.grad((g * v).sum(), x)
    return [t.detach().numpy() for t in (y, g, h)]


@pytest.mark.parametrize(
    ("dim", "keepdim"), [(None, False), (1, False), (-1, True), ((0, 2), False), ((1, 2), True)]
)
def test_values_and_two_derivatives_are_torchs_at_zero_vectors_and_special_values(dim, keepdim):
    a = np.random.default_rng(1).standard_normal((3, 4, 5))
    a[1] = 0.0  # zero vectors along every dim: the gradient 0, the second derivative NaN
    a[0, :, 2] = 0.0
    a[2, 1, 1] = np.inf
    a[2, 3, 4] = np.nan
    tiny = a * 1e-170  # squares underflow to 0: a zero norm of non-zero entries
    for array in (a, tiny):
        want = _derivatives(torch, array, dim, keepdim)
        got = _derivatives(rg, array, dim, keepdim)
        for name, w, g in zip(("value", "gradient", "second derivative"), want, got):
            assert w.shape == g.shape, name
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=name)
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-300, err_msg=name)


def test_the_norm_of_a_zero_vector_has_a_zero_gradient_unless_the_incoming_one_is_not_finite():
    for lib in (torch, rg):
        x = lib.tensor(np.zeros((2, 3)), requires_grad=True)
        y = lib.linalg.vector_norm(x, dim=1)
        (g,) = lib.autograd.grad(y, x, lib.tensor([1.0, np.inf]))
        assert g.numpy()[0].tolist() == [0.0] * 3
        assert np.isnan(g.numpy()[1]).all()
