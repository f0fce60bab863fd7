"""The divisor's gradient of ``x / y`` is torch's ``div_tensor_other_backward``,
``-grad * ((x / y) / y)``, to the bit, and holds what torch saves: both operands, not the
quotient.

Until 7 December the rule was ``-(grad * out) / y``: the same value rounded in another order
(a third of float32 and float64 elements one ulp off torch's), and it held the quotient, which
``F.normalize`` (``x / norm``) holds beside ``x`` that the norm's rule already holds: twice
what torch saves.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_both_gradients_of_a_division_are_torchs_to_the_bit(dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 50)).astype(dtype)
    # the same shapes: a broadcast divisor's gradient is then summed, in NumPy's order of
    # summation on the NumPy backend, not torch's
    b = (rng.standard_normal((40, 50)) + 3.0).astype(dtype)
    c = rng.standard_normal((40, 50)).astype(dtype)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((ta / tb) * torch.tensor(c)).sum().backward()
    with rg.use_backend(rg.Autodiff(inner_backend())):
        x, y = rg.tensor(a).require_grad(), rg.tensor(b).require_grad()
        grads = ((x / y) * rg.tensor(c)).sum().backward()
        np.testing.assert_array_equal(x.grad(grads).numpy(), ta.grad.numpy())
        np.testing.assert_array_equal(y.grad(grads).numpy(), tb.grad.numpy())


def test_the_divisor_gradient_and_its_derivative_match_torch_and_finite_differences():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)) + 3.0
    v = rng.standard_normal((3, 4))

    def derivatives(lib):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        (gy,) = lib.autograd.grad((x / y).sum(), y, create_graph=True)
        second = lib.autograd.grad((gy * lib.tensor(v)).sum(), (x, y))
        return [t.detach().numpy() for t in (gy, *second)]

    want, got = derivatives(torch), derivatives(rg)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)
    # the first derivative in y against central differences of sum(a / y)
    eps = 1e-6
    numeric = ((a / (b + eps)) - (a / (b - eps))) / (2 * eps)
    np.testing.assert_allclose(got[0], numeric, rtol=1e-7)


def test_normalize_holds_what_torch_saves():
    rows, cols = 64, 256
    a = np.random.default_rng(2).standard_normal((rows, cols)).astype(np.float32)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        x = rg.tensor(a).require_grad()
        base = ((x * 2.0) * 1.5).sum().backward().peak_bytes
        held = (rg.nn.functional.normalize(x * 2.0, dim=1) * 1.5).sum().backward().peak_bytes
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    h = torch.tensor(a, requires_grad=True) * 2.0
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        torch.nn.functional.normalize(h, dim=1)
    # x * 2 (read by the norm's rule and the division's), the norm and its clamped copy (one
    # column each): torch saves the same. The quotient was held beside them until 7 December
    assert sum(saved.values()) == 4 * rows * cols + 2 * 4 * rows
    assert (base, held) == (0, sum(saved.values()))
