"""``maximum`` and ``minimum`` as ops of the op table (autodiff/ops.py) whose rules read both
operands, against torch, and what their graphs hold.

They were ten tensor ops each (``tensor/compositions.extremum``): masks and copies that
``mask_where`` read as untracked inputs, which a memory budget held as backups for good. One
``maximum(x * 1.0, t).sum()`` of 256x256 float32 held 786,432 bytes under a budget of half
NoCheckpointing's peak (262,144), in every step (7 December). Their values are the
composite's, bit for bit (the backend's default composes the same arithmetic).
"""

from __future__ import annotations

import numpy as np
import pytest

import retrograd as rg
from backends import inner_backend

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, 2.0, np.inf, -np.inf, np.nan, 3.0, 3.0, -2.5, 1e-40]
SHAPES = [((13, 13), (13, 13)), ((13, 13), (1, 13)), ((13, 1), (13, 13)), ((4, 5), (5,))]


def _operands(dtype, shapes, rng):
    values = np.array(SPECIAL, dtype=dtype)
    if shapes[0] == shapes[1]:  # every pair of special values
        return np.meshgrid(values, values, indexing="ij")
    return [rng.choice(values, size=shape).astype(dtype) for shape in shapes]


@pytest.mark.parametrize("kind", ["maximum", "minimum"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shapes", SHAPES)
def test_values_and_gradients_are_torchs(kind, dtype, shapes):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    a, b = _operands(dtype, shapes, rng)
    with rg.use_backend(rg.Autodiff(inner_backend())):
        x, y = rg.tensor(a).requires_grad_(), rg.tensor(b).requires_grad_()
        out = getattr(rg, kind)(x, y)
        weights = rng.standard_normal(out.shape).astype(dtype)
        gx, gy = rg.autograd.grad((out * rg.tensor(weights)).sum(), [x, y])
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    expected = getattr(torch, kind)(tx, ty)
    tgx, tgy = torch.autograd.grad((expected * torch.tensor(weights)).sum(), [tx, ty])
    # (-0 beside +0 is a tie: torch's sign there depends on the element's place in its
    # vectorized loop; ours is +0)
    assert np.array_equal(out.numpy(), expected.detach().numpy(), equal_nan=True)
    for mine, theirs in ((gx, tgx), (gy, tgy)):
        if shapes[0] == shapes[1]:  # one term per element: torch's bits
            assert np.array_equal(mine.numpy(), theirs.numpy(), equal_nan=True)
        else:  # summed over the broadcast dimensions, in the backend's order: up to 13
            # terms of about 1, so a few float32 roundings apart (6.7e-8 measured)
            atol = 1e-6 if dtype == "float32" else 1e-14
            np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-6, atol=atol)


@pytest.mark.own_checkpointing("compares NoCheckpointing with a budget of its own")
@pytest.mark.parametrize("kind", ["maximum", "minimum"])
def test_a_budget_holds_no_more_than_no_checkpointing(kind):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)

    def step(backend):
        h = rg.tensor(a, backend=backend).requires_grad_() * 1.0
        t = rg.tensor(b, backend=backend)
        return getattr(rg, kind)(h, t).sum().backward().peak_bytes

    plain = step(rg.Autodiff(inner_backend()))
    assert plain == 2 * a.nbytes  # its rules read both operands, as torch's
    budget = rg.Autodiff(inner_backend(), checkpointing=rg.BudgetCheckpointing(plain // 2))
    held = [step(budget) for _ in range(3)]
    assert max(held) <= plain, (held, plain)  # (3x plain before)
