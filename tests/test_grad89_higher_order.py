"""Higher derivatives of ``det`` at singular matrices, against the exact polynomial in torch.

A sweep of the differentiable surface's first three derivatives (values, gradients,
Hessian-vector products and their derivatives, float64, at random, grid, wide and tiny points)
found ``det``'s recorded backward wrong at singular matrices: where ``|det A| < 100 eps`` it
took the adjugate through the SVD, which has no derivative where singular values repeat (the
zero matrix: the Hessian-vector product lost its off-diagonal cofactors) and whose third
derivative was off at rank ``n - 1`` (0.19 at ``[[1, 2], [2, 4]]``, where ``det`` is quadratic
and its third derivative 0). torch 2.13 is no reference there (NaN at the zero matrix, the
same wrong third derivatives), so the expected values are the derivatives torch takes of the
cofactor expansion, a polynomial, written by hand below.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")


def _cofactors(a):
    """torch's hand-written cofactor matrix of 2x2 or 3x3 matrices (``adj(A)^T``)."""
    if a.shape[-1] == 2:
        top = torch.stack([a[..., 1, 1], -a[..., 1, 0]], -1)
        bottom = torch.stack([-a[..., 0, 1], a[..., 0, 0]], -1)
        return torch.stack([top, bottom], -2)

    def rolled(p, q):
        return torch.roll(a, (-p, -q), (-2, -1))

    return rolled(1, 1) * rolled(2, 2) - rolled(1, 2) * rolled(2, 1)


def _expanded_det(a):
    return (a[..., 0, :] * _cofactors(a)[..., 0, :]).sum(-1)


def _derivatives(lib, det, matrices, seed):
    rng = np.random.default_rng(seed)
    x = lib.tensor(matrices, dtype=lib.float64, requires_grad=True)
    weight = lib.tensor(rng.uniform(0.5, 1.5, matrices.shape[:-2]), dtype=lib.float64)
    direction = lib.tensor(rng.uniform(-1.0, 1.0, matrices.shape), dtype=lib.float64)
    total = (det(x) * weight).sum()
    found = []
    for order in range(3):
        if not total.requires_grad:  # (torch's: a quadratic's third derivative is no graph)
            found.append(np.zeros(matrices.shape))
            continue
        (grad,) = lib.autograd.grad(total, (x,), create_graph=order < 2)
        found.append(grad.detach().numpy().copy())
        total = (grad * direction).sum()
    return found


SINGULAR = {
    "2x2": np.array([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]]),
    "3x3": np.array(
        [
            [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]],
            [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [-1.0, -2.0, -3.0]],
            np.zeros((3, 3)),
            np.diag([2.0, 2.0, 0.0]),
        ]
    ),
}


@pytest.mark.parametrize("name", sorted(SINGULAR))
def test_det_derivatives_at_singular_matrices_are_the_cofactor_expansions(name):
    matrices = SINGULAR[name]
    want = _derivatives(torch, _expanded_det, matrices, 0)
    got = _derivatives(rg, rg.linalg.det, matrices, 0)
    for order, (g, w) in enumerate(zip(got, want), start=1):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"order {order}")


def test_det_derivatives_in_a_batch_of_singular_and_regular_matrices():
    # the regular matrices take torch's solve, the singular ones the cofactors, in one batch
    regular = np.random.default_rng(1).uniform(-1.0, 1.0, (2, 3, 3))
    matrices = np.concatenate([SINGULAR["3x3"][:2], regular, SINGULAR["3x3"][2:]])
    want = _derivatives(torch, _expanded_det, matrices, 1)
    got = _derivatives(rg, lambda x: x.det(), matrices, 1)
    for order, (g, w) in enumerate(zip(got, want), start=1):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"order {order}")
    # torch's own values at the regular matrices, whose solve path is unchanged
    torch_own = _derivatives(torch, torch.linalg.det, regular, 2)
    ours = _derivatives(rg, rg.linalg.det, regular, 2)
    for g, w in zip(ours, torch_own):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
