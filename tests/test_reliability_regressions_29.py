# ruff: noqa: N803  (L and F: torch or retrograd and its nn.functional, one case code for both)
"""One test per defect found by round 29 of the reliability sweep
(``tests/test_reliability_sweep_29.py``: composite functions at extreme inputs against torch).

The half-precision ones run on the torch inner backend whatever the suite's choice
(``RETROGRAD_INNER``): the NumPy backend does not hold float16 or bfloat16.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812 (torch's name)

import retrograd as rg
import retrograd.nn.functional as RF  # noqa: N812 (torch's name)

HALF = ["float16", "bfloat16"]
INF = np.inf


@pytest.fixture
def torch_inner():
    with rg.use_backend(rg.Autodiff(rg.TorchBackend("cpu"))):
        yield


def _pair(values, dtype):
    """The same half-precision values in torch and in retrograd."""
    array = np.asarray(values, dtype=np.float32)
    return torch.tensor(array).to(getattr(torch, dtype)), rg.tensor(array).to(getattr(rg, dtype))


def _numpy(t) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        return t.detach().float().numpy()
    return t.float().numpy()


def test_float16_binary_cross_entropy_of_probabilities_0_and_1_is_torch_s_finite_loss(
    torch_inner,
):
    # float16's eps (1e-12) rounds to 0: x (1 - x) < eps was never true at x = 0 or 1, and
    # the gradient's stand-in slope was 0 / 0; the loss (not only its gradient) was NaN
    probs, labels = [0.0, 1.0, 0.0, 1.0, 0.5], [0.0, 1.0, 1.0, 0.0, 1.0]
    t_x, r_x = _pair(probs, "float16")
    t_y, r_y = _pair(labels, "float16")
    expected = TF.binary_cross_entropy(t_x, t_y, reduction="none")
    r_x = r_x.require_grad()
    losses = RF.binary_cross_entropy(r_x, r_y, reduction="none")
    np.testing.assert_allclose(_numpy(losses), _numpy(expected), rtol=1e-3)  # [0 0 100 100 ln 2]
    total = RF.binary_cross_entropy(r_x, r_y)
    assert np.isfinite(total.item()) and total.item() == pytest.approx(40.1386, rel=1e-3)
    grad = _numpy(r_x.grad(total.backward()))
    # float32's slope (x - y) / max(x (1 - x), 1e-12), saturated to float16's range, over 5
    # (torch's float16 gradient there is NaN, 0 / 0, and -inf, inf)
    np.testing.assert_allclose(grad[:4], [0.0, 0.0, -65504.0 / 5, 65504.0 / 5], rtol=1e-3)
    assert grad[4] == pytest.approx(-0.4, rel=1e-3)


@pytest.mark.parametrize("dtype", HALF)
def test_rms_norm_default_eps_of_half_input_is_float32_s_as_torch_s(torch_inner, dtype):
    # torch computes a half-precision rms_norm in float32 and takes float32's epsilon
    # (1.19e-7) for eps=None; retrograd took the half dtype's own (9.8e-4 for float16, 7.8e-3
    # for bfloat16), and activations of ~1e-3 came out ~25x too small
    values = [[1e-3, -2e-3, 1e-3, 5e-4], [1e-4, 1e-4, 1e-4, 1e-4]]
    t_x, r_x = _pair(values, dtype)
    t_x.requires_grad_()
    r_x = r_x.require_grad()
    expected = TF.rms_norm(t_x, (4,))
    got = RF.rms_norm(r_x, (4,))
    np.testing.assert_allclose(_numpy(got), _numpy(expected), rtol=1e-2)
    assert _numpy(got)[0, 0] == pytest.approx(0.771, rel=1e-2)  # x / sqrt(mean(x^2) + 1.19e-7)
    expected.float().sum().backward()
    grad = r_x.grad(got.float().sum().backward())
    np.testing.assert_allclose(_numpy(grad), _numpy(t_x.grad), rtol=2e-2, atol=1.0)
    module = rg.nn.RMSNorm(4).to(getattr(rg, dtype))
    np.testing.assert_allclose(_numpy(module(r_x)), _numpy(expected), rtol=1e-2)


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, F, x: L.linalg.vector_norm(x, dim=1),
        lambda L, F, x: x.norm(dim=1),
        lambda L, F, x: F.normalize(x),
        lambda L, F, x: F.pairwise_distance(x, x * 0),
    ],
    ids=["vector_norm", "Tensor.norm", "normalize", "pairwise_distance"],
)
def test_float16_norm_of_a_small_vector_is_accumulated_in_float32(torch_inner, fn):
    # the squares of entries under ~2.4e-4 flush to 0 in float16: a vector of 1e-4s had norm
    # 0 (torch accumulates in float32: 2e-4), and normalize gave inf for 0.5
    values = [[1e-4, 1e-4, 1e-4, 1e-4], [1e-3, -2e-3, 1e-3, 5e-4]]
    t_x, r_x = _pair(values, "float16")
    t_x.requires_grad_()
    r_x = r_x.require_grad()
    expected = fn(torch, TF, t_x)
    got = fn(rg, RF, r_x)
    assert got.dtype == "float16"
    np.testing.assert_allclose(_numpy(got), _numpy(expected), rtol=1e-3)
    assert np.all(np.isfinite(_numpy(got))) and np.all(_numpy(got)[0] != 0)
    expected.float().sum().backward()
    grad = r_x.grad(got.float().sum().backward())
    np.testing.assert_allclose(_numpy(grad), _numpy(t_x.grad), rtol=1e-2, atol=1e-2)


def test_logsumexp_gradient_beside_a_positive_infinity_is_torch_s_zero():
    # a +inf entry made the shift 0: exp of the finite entries over ~88 overflowed, and their
    # gradient exp(x) / sum was inf / inf = NaN where torch's exp(x - inf) is 0
    values = np.array([[-INF, 1e4, INF, 0.0], [100.0, 89.0, 0.0, -INF]], np.float32)
    reference = torch.tensor(values, requires_grad=True)
    expected = torch.logsumexp(reference, 1)
    expected.sum().backward()
    x = rg.tensor(values).require_grad()
    out = rg.logsumexp(x, 1)
    grad = x.grad(out.sum().backward()).numpy()
    np.testing.assert_array_equal(out.numpy()[0], np.inf)
    np.testing.assert_allclose(out.numpy()[1], expected.detach().numpy()[1], rtol=1e-6)
    np.testing.assert_array_equal(np.isnan(grad), np.isnan(reference.grad.numpy()))
    np.testing.assert_allclose(grad[0, [0, 1, 3]], [0.0, 0.0, 0.0])  # torch's; NaN at the +inf
    np.testing.assert_allclose(grad[1], reference.grad.numpy()[1], rtol=1e-5, atol=1e-7)
