"""Programs written here in the style of the collaborative-filtering tutorials (matrix
factorization of a ratings table), run under torch and, ported, under retrograd from the same
ratings, factors and weights (the harness: ``tests/real_ports.py``): alternating least squares
solved per row by ``torch.linalg.solve`` and, as a ridge-augmented system, by
``torch.linalg.lstsq``, then a biased embedding factorization trained by SGD.

What it exercises: boolean-mask indexing ``R[row, seen[row]]`` and ``other[seen[row]]``;
``torch.linalg.solve`` of the regularized normal equations ``F.T @ F + reg * I``;
``torch.linalg.lstsq(A, b).solution`` of a tall stacked system, of a batch of them (with
``.residuals``), and its gradient through a residual loss; ``torch.linalg.matrix_rank``; a
masked RMSE ``torch.sqrt(((approx - R)[seen] ** 2).mean())``; ``nn.Embedding`` factors and
biases initialised by ``.weight.data.uniform_`` and then replaced by loaded weights;
``torch.nonzero(seen, as_tuple=True)`` for the training pairs; ``F.mse_loss``.

The port changes the ``import`` lines and the gradient lines (``grads = loss.backward()`` given
to ``optimizer.step``; the least-squares gradient read from ``grads``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

RECOMMENDER_SOURCE = """
import torch
from torch import nn
from torch.nn import functional as F

REG = 0.1


def masked_rmse(left, right, R, seen):
    approx = left @ right.T
    return torch.sqrt(((approx - R)[seen] ** 2).mean()).item()


def refit_by_solve(R, seen, other):
    # each row's factors: ridge regression on the columns it rated
    rank = other.shape[1]
    eye = torch.eye(rank, dtype=other.dtype)
    fitted = torch.zeros(R.shape[0], rank, dtype=other.dtype)
    for row in range(R.shape[0]):
        F_row = other[seen[row]]
        gram = F_row.T @ F_row + REG * eye
        fitted[row] = torch.linalg.solve(gram, F_row.T @ R[row, seen[row]])
    return fitted


def refit_by_lstsq(R, seen, other):
    # the same ridge problem, written as least squares on [F; sqrt(reg) I]
    rank = other.shape[1]
    penalty = math.sqrt(REG) * torch.eye(rank, dtype=other.dtype)
    solutions = []
    for row in range(R.shape[0]):
        system = torch.cat([other[seen[row]], penalty], dim=0)
        rhs = torch.cat([R[row, seen[row]], torch.zeros(rank, dtype=other.dtype)])
        solutions.append(torch.linalg.lstsq(system, rhs[:, None]).solution[:, 0])
    return torch.stack(solutions)


R = torch.tensor(ratings).to(torch.float64)
seen = torch.tensor(observed)
users_a = torch.tensor(users0, dtype=torch.float64)
items_a = torch.tensor(items0, dtype=torch.float64)
users_b, items_b = users_a.clone(), items_a.clone()
for sweep in range(3):
    users_a = refit_by_solve(R, seen, items_a)
    items_a = refit_by_solve(R.T, seen.T, users_a)
    users_b = refit_by_lstsq(R, seen, items_b)
    items_b = refit_by_lstsq(R.T, seen.T, users_b)
    err = masked_rmse(users_a, items_a, R, seen)
    print(f"sweep {sweep}: rmse {err:.6f} vs {masked_rmse(users_b, items_b, R, seen):.6f}")
    record.append(err)
    record.append((users_b @ items_b.T).numpy())
record.append((users_a @ items_a.T).numpy())
record.append(int(torch.linalg.matrix_rank(users_a @ items_a.T)))

# the gradient of a least-squares fit with respect to its design matrix
X = torch.tensor(design, dtype=torch.float64, requires_grad=True)
y = torch.tensor(targets, dtype=torch.float64)
coef = torch.linalg.lstsq(X, y).solution
misfit = (X @ coef - y).pow(2).sum()
misfit.backward()
record.append(coef.detach().numpy())
record.append(X.grad.numpy())
scales = torch.tensor([0.5, 3.0], dtype=torch.float64).view(2, 1, 1)
stacked = torch.linalg.lstsq(X.detach().expand(2, -1, -1) * scales, y.expand(2, -1, -1))
record.append(stacked.solution.numpy())
record.append(stacked.residuals.numpy())


class BiasedFactorizer(nn.Module):
    def __init__(self, num_users, num_items, dim=2):
        super().__init__()
        self.user_vec = nn.Embedding(num_users, dim)
        self.item_vec = nn.Embedding(num_items, dim)
        self.user_offset = nn.Embedding(num_users, 1)
        self.item_offset = nn.Embedding(num_items, 1)
        for table in (self.user_vec, self.item_vec):
            table.weight.data.uniform_(-0.1, 0.1)

    def forward(self, who, what):
        dot = (self.user_vec(who) * self.item_vec(what)).sum(dim=1, keepdim=True)
        score = dot + self.user_offset(who) + self.item_offset(what)
        return score.squeeze()


who, what = torch.nonzero(seen, as_tuple=True)
stars = R[who, what].float()
net = BiasedFactorizer(R.shape[0], R.shape[1])
initialize(net)
sgd = torch.optim.SGD(net.parameters(), lr=0.4)
for epoch in range(8):
    sgd.zero_grad()
    loss = F.mse_loss(net(who, what), stars)
    loss.backward()
    sgd.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
"""

RECOMMENDER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("misfit.backward()\n", "grads = misfit.backward()\n"),
    ("record.append(X.grad.numpy())", "record.append(X.grad(grads).numpy())"),
    ("    loss.backward()\n    sgd.step()", "    grads = loss.backward()\n    sgd.step(grads)"),
]


def test_als_by_solve_and_lstsq_then_embedding_factorization_as_torch(capsys):
    rng = np.random.default_rng(2741)
    ratings = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 5))
    ratings += 0.05 * rng.standard_normal((6, 5))
    observed = rng.uniform(size=(6, 5)) < 0.7
    observed[:, 0] = observed[0, :] = True  # every user and item rated at least once
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        RECOMMENDER_SOURCE,
        RECOMMENDER_STEPS,
        capsys,
        2741,
        ratings=ratings,
        observed=observed,
        users0=rng.standard_normal((6, 2)),
        items0=rng.standard_normal((5, 2)),
        design=rng.standard_normal((6, 3)),
        targets=rng.standard_normal((6, 2)),
        initialize=initializer(),
    )
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-7)
    assert our_log == their_log
    assert theirs[-2] < theirs[-9]  # the SGD loss went down
