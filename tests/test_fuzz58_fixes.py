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
- A second derivative through an op whose backward torch does not differentiate
  (``hardsigmoid``, ``ctc_loss``, ``multi_margin_loss``, ``multilabel_margin_loss``,
  ``embedding_bag``, ``pdist``, ``cdist`` off its matrix-product route) was computed; torch
  raises "derivative for ... is not implemented", and retrograd now raises ``AutodiffError``
  naming the op, its first derivative unchanged.
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
    x_data = np.array([[[0.0, -0.5, 1.0], [0.0, 0.0, -1.0]], [[0.5, 0.0, -0.25], [1.5, -2.0, 0.0]]])
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


_ONCE_DIFFERENTIABLE = {
    "hardsigmoid": lambda lib, x: lib.nn.functional.hardsigmoid(x * 3.0),
    "ctc_loss": lambda lib, x: lib.nn.functional.ctc_loss(
        lib.nn.functional.log_softmax(x.reshape(5, 1, 3), -1),
        lib.tensor([[1, 2]]),
        lib.tensor([5]),
        lib.tensor([2]),
    ),
    "multi_margin_loss": lambda lib, x: lib.nn.functional.multi_margin_loss(
        x, lib.tensor([0, 3, 2])
    ),
    "multilabel_margin_loss": lambda lib, x: lib.nn.functional.multilabel_margin_loss(
        x, lib.tensor([[0, 3, -1, 0, 0], [1, -1, 0, 0, 0], [4, 2, 1, -1, 0]])
    ),
    "embedding_bag": lambda lib, x: lib.nn.functional.embedding_bag(
        lib.tensor([0, 2, 2, 1]), x, lib.tensor([0, 2]), mode="mean"
    ),
    "pdist": lambda lib, x: lib.nn.functional.pdist(x),
    "cdist": lambda lib, x: lib.cdist(x[:2], x[1:], p=1.0),
}
_X = np.array(
    [[0.3, -0.7, 1.1, 0.5, -1.2], [0.9, 0.2, -0.4, 1.3, -0.6], [-0.8, 0.6, 0.1, -1.1, 0.7]]
)


@pytest.mark.parametrize("name", sorted(_ONCE_DIFFERENTIABLE))
def test_second_derivative_refused_where_torch_refuses_it(name) -> None:
    f = _ONCE_DIFFERENTIABLE[name]
    grads = {}
    for lib in (torch, rg):
        x = lib.tensor(_X, requires_grad=True)
        out = f(lib, x)
        (g,) = lib.autograd.grad((out * out).sum(), (x,), create_graph=True)
        grads[lib] = _numpy(g)
        second = (g * g).sum()
        if lib is torch:
            with pytest.raises((RuntimeError, NotImplementedError), match="not implemented"):
                torch.autograd.grad(second, (x,))
        else:
            with pytest.raises(rg.AutodiffError, match=name):
                rg.autograd.grad(second, (x,), retain_graph=True)
            # the graph stays usable: the first derivative again, without a second
            (again,) = rg.autograd.grad((f(rg, x) ** 2).sum(), (x,))
            np.testing.assert_allclose(again.numpy(), grads[torch], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grads[rg], grads[torch], rtol=1e-10, atol=1e-12)


def test_cdist_on_its_matrix_product_route_differentiates_twice() -> None:
    # torch takes matrix products for p = 2 above 25 rows (or when asked): no refusal there
    rng = np.random.default_rng(0)
    x_data, y_data = rng.standard_normal((30, 3)), rng.standard_normal((4, 3))
    results = []
    for lib in (torch, rg):
        x = lib.tensor(x_data, requires_grad=True)
        d = lib.cdist(x, lib.tensor(y_data))
        (g,) = lib.autograd.grad((d * d).sum(), (x,), create_graph=True)
        (h,) = lib.autograd.grad((g * g).sum(), (x,))
        results.append(_numpy(h))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-8, atol=1e-10)
