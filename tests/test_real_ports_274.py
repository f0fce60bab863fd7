# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
collaborative filtering by matrix factorization three ways, as the recommender tutorials
write them in torch: alternating least squares with one ``torch.linalg.solve`` per user and
per item on the observed entries (the regularized normal equations), the same by
``torch.linalg.lstsq`` of a stacked ridge system (``driver="gelsd"``/default, ``.solution``),
and a ``MatrixFactorization`` module with ``nn.Embedding`` factors and biases trained by SGD
on the observed ratings with an ``F.mse_loss``, against torch's run of the same code on the
same ratings from the same initial factors.

What it exercises: boolean-mask indexing ``R[u, mask[u]]`` and ``V[mask[u]]``; ``torch.linalg.
solve`` of ``A.T @ A + lam * I``; ``torch.linalg.lstsq(A, b).solution`` on a tall stacked
system and a batch of them, and its gradient; ``torch.linalg.matrix_rank``; ``rmse`` by
``torch.sqrt(((pred - R)[mask] ** 2).mean())``; ``nn.Embedding`` with ``.weight.data.uniform_``
replaced by loaded weights; ``torch.nonzero(mask, as_tuple=True)``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``; ``torch.linalg.lstsq``'s gradient read from ``grads``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


ALS_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def rmse(U, V, R, mask):
    pred = U @ V.T
    return torch.sqrt(((pred - R)[mask] ** 2).mean()).item()


def als_step(R, mask, fixed, lam):
    n, k = R.shape[0], fixed.shape[1]
    out = torch.zeros(n, k, dtype=fixed.dtype)
    for u in range(n):
        V_u = fixed[mask[u]]
        r_u = R[u, mask[u]]
        A = V_u.T @ V_u + lam * torch.eye(k, dtype=fixed.dtype)
        b = V_u.T @ r_u
        out[u] = torch.linalg.solve(A, b)
    return out


def als_lstsq_step(R, mask, fixed, lam):
    n, k = R.shape[0], fixed.shape[1]
    rows = []
    for u in range(n):
        V_u = fixed[mask[u]]
        r_u = R[u, mask[u]]
        A = torch.cat([V_u, math.sqrt(lam) * torch.eye(k, dtype=fixed.dtype)], dim=0)
        b = torch.cat([r_u, torch.zeros(k, dtype=fixed.dtype)]).unsqueeze(-1)
        rows.append(torch.linalg.lstsq(A, b).solution.squeeze(-1))
    return torch.stack(rows)


R = torch.tensor(ratings, dtype=torch.float64)
mask = torch.tensor(observed)
U = torch.tensor(u0, dtype=torch.float64)
V = torch.tensor(v0, dtype=torch.float64)
U2, V2 = U.clone(), V.clone()
for it in range(4):
    U = als_step(R, mask, V, 0.1)
    V = als_step(R.T, mask.T, U, 0.1)
    U2 = als_lstsq_step(R, mask, V2, 0.1)
    V2 = als_lstsq_step(R.T, mask.T, U2, 0.1)
    print(f"iter {it}: train rmse {rmse(U, V, R, mask):.6f} / {rmse(U2, V2, R, mask):.6f}")
    record.append(rmse(U, V, R, mask))
    record.append((U @ V.T).numpy())
    record.append((U2 @ V2.T).numpy())
record.append(int(torch.linalg.matrix_rank(U @ V.T)))

A = torch.tensor(design, dtype=torch.float64, requires_grad=True)
b = torch.tensor(targets, dtype=torch.float64)
x = torch.linalg.lstsq(A, b).solution
residual = (A @ x - b).pow(2).sum()
residual.backward()
record.append(x.detach().numpy())
record.append(A.grad.numpy())
batch = torch.linalg.lstsq(A.detach().expand(2, -1, -1) * torch.tensor([1.0, 2.0], dtype=torch.float64).view(2, 1, 1), b.expand(2, -1, -1))
record.append(batch.solution.numpy())
record.append(batch.residuals.numpy())


class MatrixFactorization(nn.Module):
    def __init__(self, n_users, n_items, n_factors=3):
        super().__init__()
        self.user_factors = nn.Embedding(n_users, n_factors)
        self.item_factors = nn.Embedding(n_items, n_factors)
        self.user_bias = nn.Embedding(n_users, 1)
        self.item_bias = nn.Embedding(n_items, 1)
        self.user_factors.weight.data.uniform_(0, 0.05)
        self.item_factors.weight.data.uniform_(0, 0.05)

    def forward(self, user, item):
        pred = self.user_bias(user) + self.item_bias(item)
        pred += (self.user_factors(user) * self.item_factors(item)).sum(dim=1, keepdim=True)
        return pred.squeeze()


users, items = torch.nonzero(mask, as_tuple=True)
values = R[users, items].float()
model = MatrixFactorization(R.shape[0], R.shape[1])
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
for epoch in range(15):
    optimizer.zero_grad()
    prediction = model(users, items)
    loss = F.mse_loss(prediction, values)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})
"""

ALS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    ("residual.backward()\n", "grads = residual.backward()\n"),
    ("record.append(A.grad.numpy())", "record.append(A.grad(grads).numpy())"),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_als_by_solve_and_lstsq_and_embedding_factorization_as_torch(capsys):
    rng = np.random.default_rng(27401)
    truth = rng.standard_normal((8, 2)) @ rng.standard_normal((2, 6))
    ratings = truth + 0.05 * rng.standard_normal((8, 6))
    observed = rng.uniform(size=(8, 6)) < 0.7
    observed[:, 0] = observed[0, :] = True  # no empty rows or columns
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ALS_SOURCE, ALS_STEPS, capsys, 27401, ratings=ratings, observed=observed,
        u0=rng.standard_normal((8, 2)), v0=rng.standard_normal((6, 2)),
        design=rng.standard_normal((7, 3)), targets=rng.standard_normal((7, 2)),
        initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-7)
    assert our_log == their_log
    assert theirs[-2] < theirs[-16]  # the SGD loss went down
