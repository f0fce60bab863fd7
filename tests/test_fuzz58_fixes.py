"""Regressions found by the round-58 random programs of higher-order gradients.

- ``prelu``'s second and third derivatives at ``x == 0`` were not torch's: torch's first
  derivative takes the weight's branch there (``x > 0`` fails) but the derivatives of its
  backward kernel (``_prelu_kernel_backward``) take the positive branch (``x >= 0``): the
  upstream gradient passes to the backward's ``grad`` whole, and nothing reaches ``x`` or the
  weight. retrograd composed ``x * factor``, whose backward's derivative in ``grad`` at 0 is
  the weight; it is now an op of the table with backward ops of their own.
- ``linalg.det``'s gradient under ``create_graph`` was 0 at an exactly singular matrix (torch's
  recorded backward gives the adjugate there), and its second derivatives were wrong at any
  matrix with repeated singular values (``2 I``, a permutation: the SVD it differentiated
  through has no derivative there); the recorded backward is now torch's (a solve where
  ``|det| >= 100 eps``, the SVD's adjugate elsewhere).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _numpy(t):
    return None if t is None else t.detach().numpy().copy()


def _prelu_derivatives(lib, x_data, w_data, weight_tracked):
    """The gradient, a Hessian-vector product and a third derivative of a program whose
    prelu sits at 0 in places and whose upstream gradient depends on ``x``."""
    x = lib.tensor(x_data, requires_grad=True)
    w = lib.tensor(w_data, requires_grad=weight_tracked)
    y = lib.nn.functional.prelu(x, w)
    loss = (y.sin() * (x * 0.5 + 1.0)).sum() + (y * y * x).sum()
    inputs = (x, w) if weight_tracked else (x,)
    grads = lib.autograd.grad(loss, inputs, create_graph=True)
    v = lib.tensor(np.linspace(-1.0, 1.0, x_data.size).reshape(x_data.shape))
    probe = sum((g * g).sum() for g in grads) + (grads[0] * v).sum()
    second = lib.autograd.grad(probe, inputs, create_graph=True)
    third = lib.autograd.grad(sum((s.tanh() * s).sum() for s in second), inputs)
    return [_numpy(t) for t in (*grads, *second, *third)]


@pytest.mark.parametrize("weight_tracked", [True, False], ids=["weight_tracked", "weight_const"])
@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "one_weight"])
def test_prelu_higher_derivatives_at_zero_match_torch(weight_tracked, per_channel) -> None:
    x_data = np.array(
        [[[0.0, -0.5, 1.0], [0.0, 0.0, -1.0]], [[0.5, 0.0, -0.25], [1.5, -2.0, 0.0]]]
    )
    w_data = np.array([0.25, -0.7]) if per_channel else np.array([0.3])
    want = _prelu_derivatives(torch, x_data, w_data, weight_tracked)
    got = _prelu_derivatives(rg, x_data, w_data, weight_tracked)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_prelu_hvp_at_zero_matches_finite_differences_away_from_the_kink() -> None:
    # away from 0 the op is smooth: the Hessian-vector product agrees with central
    # differences of the first gradient (its values, not only torch's)
    x_data = np.array([[0.3, -0.8, 1.1], [-0.4, 0.9, -1.3]])
    w = rg.tensor([0.2, -0.6, 0.45], dtype="float64")

    def gradient(data, create_graph=False):
        x = rg.tensor(data, requires_grad=True)
        y = rg.nn.functional.prelu(x, w)
        loss = (y.sin() * x).sum()
        (g,) = rg.autograd.grad(loss, (x,), create_graph=create_graph)
        return x, g

    v = np.array([[0.5, -1.0, 0.25], [1.0, 0.3, -0.7]])
    x, g = gradient(x_data, create_graph=True)
    (hvp,) = rg.autograd.grad((g * rg.tensor(v)).sum(), (x,))
    eps = 1e-6
    fd = (gradient(x_data + eps * v)[1].numpy() - gradient(x_data - eps * v)[1].numpy()) / (2 * eps)
    np.testing.assert_allclose(hvp.numpy(), fd, rtol=1e-6, atol=1e-8)


def _det_derivatives(lib, a_data, v_data):
    a = lib.tensor(a_data, requires_grad=True)
    d = lib.linalg.det(a)
    (g,) = lib.autograd.grad((d**3).sum() + d.sum(), (a,), create_graph=True)
    (h,) = lib.autograd.grad((g * lib.tensor(v_data)).sum(), (a,), create_graph=True)
    (t,) = lib.autograd.grad((h * h).sum(), (a,))
    return [_numpy(x) for x in (g, h, t)]


@pytest.mark.parametrize(
    "matrix",
    [
        2.0 * np.eye(3),
        np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]),
        np.stack([np.eye(3) * 0.5, np.array([[1.0, 2.0, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 1.0]])]),
    ],
    ids=["2I", "permutation", "batch_with_singular"],
)
def test_det_recorded_backward_matches_torch(matrix) -> None:
    rng = np.random.default_rng(3)
    v = rng.standard_normal(matrix.shape)
    want = _det_derivatives(torch, matrix, v)
    got = _det_derivatives(rg, matrix, v)
    # (the third derivative at an exactly singular matrix goes through the SVD's derivative,
    # which torch forms otherwise: the first two are compared there)
    count = 2 if matrix.ndim == 3 else 3
    for g, w in zip(got[:count], want[:count]):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-9)


def test_det_first_order_gradient_at_a_singular_matrix_stays_zero() -> None:
    # without create_graph torch's backward solves with g det(A): 0 where det(A) is 0
    a_data = np.array([[1.0, 2.0], [2.0, 4.0]])
    a = rg.tensor(a_data, requires_grad=True)
    (g,) = rg.autograd.grad(rg.linalg.det(a), (a,))
    t = torch.tensor(a_data, requires_grad=True)
    (tg,) = torch.autograd.grad(torch.linalg.det(t), (t,))
    np.testing.assert_array_equal(g.numpy(), tg.numpy())
