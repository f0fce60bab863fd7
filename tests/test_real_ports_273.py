# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
kernel ridge regression and a GP whose hyperparameters are fitted by the marginal likelihood,
as the GP-from-scratch tutorials write them in torch (an RBF kernel by ``torch.cdist``,
``torch.linalg.cholesky`` of ``K + noise I``, ``torch.cholesky_solve`` for ``alpha``,
``torch.linalg.solve_triangular`` for the predictive variance, ``log|K|`` from the Cholesky
diagonal), Adam on the log-hyperparameters in float64, then a closed-form kernel ridge fit
by ``torch.linalg.solve`` and a Nystroem approximation by ``torch.linalg.eigh``, against
torch's run of the same code on the same points.

What it exercises: ``torch.cdist(x1, x2, p=2).pow(2)`` and its gradient (with a zero distance
on the diagonal); ``torch.cholesky_solve(y, L)`` (``upper=False``) and its gradients with
respect to both; ``torch.linalg.solve_triangular(L, k, upper=False)``;
``torch.diagonal(L).log().sum()``; ``torch.linalg.eigh`` with ``clamp_min`` on the eigenvalues
and ``rsqrt``; ``nn.Parameter(torch.tensor(0.0, dtype=torch.float64))``;
``torch.linalg.cholesky_ex``'s ``info``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


GP_SOURCE = """
import math
import torch
import torch.nn as nn


class RBFKernel(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_lengthscale = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))
        self.log_outputscale = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))

    def forward(self, x1, x2):
        dist = torch.cdist(x1 / self.log_lengthscale.exp(), x2 / self.log_lengthscale.exp(), p=2).pow(2)
        return self.log_outputscale.exp() * torch.exp(-0.5 * dist)


class ExactGP(nn.Module):
    def __init__(self, train_x, train_y):
        super().__init__()
        self.train_x = train_x
        self.train_y = train_y
        self.kernel = RBFKernel()
        self.log_noise = nn.Parameter(torch.tensor(-2.0, dtype=torch.float64))

    def neg_log_marginal_likelihood(self):
        n = self.train_x.shape[0]
        K = self.kernel(self.train_x, self.train_x) + self.log_noise.exp() * torch.eye(n, dtype=torch.float64)
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve(self.train_y.unsqueeze(-1), L)
        data_fit = 0.5 * (self.train_y.unsqueeze(-1) * alpha).sum()
        complexity = torch.diagonal(L).log().sum()
        return (data_fit + complexity + 0.5 * n * math.log(2 * math.pi)) / n

    @torch.no_grad()
    def predict(self, test_x):
        n = self.train_x.shape[0]
        K = self.kernel(self.train_x, self.train_x) + self.log_noise.exp() * torch.eye(n, dtype=torch.float64)
        L = torch.linalg.cholesky(K)
        k_star = self.kernel(self.train_x, test_x)
        alpha = torch.cholesky_solve(self.train_y.unsqueeze(-1), L)
        mean = (k_star.T @ alpha).squeeze(-1)
        v = torch.linalg.solve_triangular(L, k_star, upper=False)
        var = self.kernel.log_outputscale.exp() - (v * v).sum(0)
        return mean, var


train_x = torch.tensor(xs, dtype=torch.float64)
train_y = torch.tensor(ys, dtype=torch.float64)
test_x = torch.linspace(-3, 3, 9, dtype=torch.float64).unsqueeze(-1)
model = ExactGP(train_x, train_y)
optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
for i in range(30):
    optimizer.zero_grad()
    loss = model.neg_log_marginal_likelihood()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    if i % 10 == 0:
        print('Iter %d/%d - Loss: %.3f   lengthscale: %.3f   noise: %.3f' % (
            i + 1, 30, loss.item(), model.kernel.log_lengthscale.exp().item(), model.log_noise.exp().item()))
record.append({name: p.detach().numpy() for name, p in model.named_parameters()})
mean, var = model.predict(test_x)
record.append(mean.numpy())
record.append(var.numpy())


def kernel_ridge(X, y, lam, gamma):
    K = torch.exp(-gamma * torch.cdist(X, X) ** 2)
    alpha = torch.linalg.solve(K + lam * torch.eye(X.shape[0], dtype=X.dtype), y)
    return alpha


def nystroem_features(X, landmarks, gamma):
    K_mm = torch.exp(-gamma * torch.cdist(landmarks, landmarks) ** 2)
    K_nm = torch.exp(-gamma * torch.cdist(X, landmarks) ** 2)
    evals, evecs = torch.linalg.eigh(K_mm)
    evals = evals.clamp_min(1e-10)
    return K_nm @ evecs @ torch.diag(evals.rsqrt()) @ evecs.T


alpha = kernel_ridge(train_x, train_y, 0.1, 0.5)
K_test = torch.exp(-0.5 * torch.cdist(test_x, train_x) ** 2)
record.append((K_test @ alpha).numpy())
Phi = nystroem_features(train_x, train_x[::3], 0.5)
w = torch.linalg.solve(Phi.T @ Phi + 0.1 * torch.eye(Phi.shape[1], dtype=torch.float64), Phi.T @ train_y)
record.append((Phi @ w).numpy())
L, info = torch.linalg.cholesky_ex(Phi.T @ Phi)
record.append(int(info))
"""

GP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_exact_gp_by_cholesky_solve_and_kernel_ridge_as_torch(capsys):
    rng = np.random.default_rng(27301)
    xs = rng.uniform(-3, 3, (24, 1))
    ys = np.sin(2 * xs[:, 0]) + 0.1 * rng.standard_normal(24)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        GP_SOURCE, GP_STEPS, capsys, 27301, xs=xs, ys=ys
    )
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
    assert our_log == their_log
    assert theirs[29] < theirs[0]
