"""Second and third derivatives of activations at the points where their recorded backward
changes branch, against torch 2.13 (float64).

``log_sigmoid``'s backward, recorded under ``create_graph``, took ``exp(-|x|)`` through
``abs``, whose derivative at 0 is 0: its second derivative at 0 was 0 where it is -1/4, and a
Hessian-vector product through ``binary_cross_entropy_with_logits`` (which reads
``log_sigmoid``) was wrong by up to 18% (CI117, ``test_random_higher_order_58``). ``softplus``
at ``x * beta == threshold`` takes the smooth branch, and torch's double backward is 0 there
(its mask is ``x * beta < threshold``); ours was the smooth branch's derivative.
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg

torch = pytest.importorskip("torch")

POINTS = [-20.0, -1.0, -0.5, -1e-300, 0.0, 1e-300, 0.5, 1.0, 2.5, 20.0]


def _derivatives(lib, function):
    x = lib.tensor(POINTS, dtype=lib.float64, requires_grad=True)
    v = lib.tensor(np.linspace(0.3, 1.7, len(POINTS)), dtype=lib.float64)
    total = (function(lib, x) * v).sum()
    found = []
    for order in range(3):
        (total,) = lib.autograd.grad(total, (x,), create_graph=order < 2)
        found.append(total.detach().numpy().copy())
        total = (total * v).sum()
    return found


FUNCTIONS = {
    "logsigmoid": lambda lib, x: lib.nn.functional.logsigmoid(x),
    "softplus": lambda lib, x: lib.nn.functional.softplus(x),
    "softplus_beta_threshold": lambda lib, x: lib.nn.functional.softplus(x, 2.0, 5.0),
    "bce_with_logits_pos_weight": lambda lib, x: lib.nn.functional.binary_cross_entropy_with_logits(
        x, (x * 0.5).sigmoid(), pos_weight=lib.tensor([1.5], dtype=lib.float64), reduction="none"
    ),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_first_three_derivatives_at_branch_points_are_torchs(name):
    want = _derivatives(torch, FUNCTIONS[name])
    got = _derivatives(rg, FUNCTIONS[name])
    for order, (g, w) in enumerate(zip(got, want), start=1):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-15, err_msg=f"order {order}")
