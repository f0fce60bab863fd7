"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of the GP-from-scratch tutorials: a Gaussian process whose log-hyperparameters are fitted
by the negative log marginal likelihood with Adam in float64, its posterior predicted under
``@torch.no_grad()``, then a kernel ridge fit and a Nystroem feature map, against torch's run of
the same program on the same points.

Surface: ``torch.cdist(a, b, p=2).pow(2)`` and its gradient where a distance is zero (the
diagonal of ``K(x, x)``); ``torch.linalg.cholesky`` of ``K + noise * I``;
``torch.cholesky_solve(y, L)`` (lower, the default) with gradients to both arguments;
``torch.linalg.solve_triangular(L, k, upper=False)`` for the predictive variance;
``torch.diagonal(L).log().sum()`` for ``log|K| / 2``; ``nn.Parameter(torch.tensor(0.0,
dtype=torch.float64))``; ``torch.linalg.solve``; ``torch.linalg.eigh`` with ``clamp_min`` and
``rsqrt`` of the eigenvalues; ``torch.linalg.cholesky_ex`` and its ``info``.

Only the import lines and the gradient lines differ in the port.
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

GP_SOURCE = """
import math
import torch
import torch.nn as nn

f64 = torch.float64


def squared_exponential(a, b, log_ell, log_scale):
    # a zero distance sits on the diagonal of K(x, x): its gradient must stay finite
    sq = torch.cdist(a / log_ell.exp(), b / log_ell.exp(), p=2).pow(2)
    return log_scale.exp() * (-0.5 * sq).exp()


class GPRegressor(nn.Module):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y.unsqueeze(-1)
        self.log_ell = nn.Parameter(torch.tensor(0.0, dtype=f64))
        self.log_scale = nn.Parameter(torch.tensor(0.0, dtype=f64))
        self.log_noise = nn.Parameter(torch.tensor(-1.5, dtype=f64))

    def chol(self):
        gram = squared_exponential(self.x, self.x, self.log_ell, self.log_scale)
        eye = torch.eye(len(self.x), dtype=f64)
        return torch.linalg.cholesky(gram + self.log_noise.exp() * eye)

    def nll(self):
        L = self.chol()
        weights = torch.cholesky_solve(self.y, L)
        fit = 0.5 * (self.y * weights).sum()
        half_logdet = torch.diagonal(L).log().sum()
        n = len(self.x)
        return (fit + half_logdet) / n + 0.5 * math.log(2 * math.pi)

    @torch.no_grad()
    def posterior(self, xq):
        L = self.chol()
        cross = squared_exponential(self.x, xq, self.log_ell, self.log_scale)
        mu = cross.T @ torch.cholesky_solve(self.y, L)
        v = torch.linalg.solve_triangular(L, cross, upper=False)
        return mu.squeeze(-1), self.log_scale.exp() - v.pow(2).sum(dim=0)


x = torch.tensor(xs, dtype=f64)
y = torch.tensor(ys, dtype=f64)
gp = GPRegressor(x, y)
opt = torch.optim.Adam(gp.parameters(), lr=0.08)
for step in range(15):
    opt.zero_grad()
    loss = gp.nll()
    loss.backward()
    opt.step()
    record.append(loss.item())
    if step % 5 == 4:
        print(f"step {step + 1:2d}  nll {loss.item():.4f}  ell {gp.log_ell.exp().item():.3f}")
record.append({k: v.detach().numpy() for k, v in gp.named_parameters()})
grid = torch.linspace(-2.5, 2.5, 6, dtype=f64)[:, None]
mu, var = gp.posterior(grid)
record.extend([mu.numpy(), var.numpy()])

# kernel ridge in closed form, then a Nystroem map on every fourth point
gamma, lam = 0.7, 0.05
rbf = lambda a, b: torch.exp(-gamma * torch.cdist(a, b) ** 2)
coef = torch.linalg.solve(rbf(x, x) + lam * torch.eye(len(x), dtype=f64), y)
record.append((rbf(grid, x) @ coef).numpy())
anchors = x[::4]
lam_k, vec_k = torch.linalg.eigh(rbf(anchors, anchors))
feats = rbf(x, anchors) @ vec_k @ torch.diag(lam_k.clamp_min(1e-9).rsqrt()) @ vec_k.T
normal = feats.T @ feats + lam * torch.eye(feats.shape[1], dtype=f64)
ridge = torch.linalg.solve(normal, feats.T @ y)
record.append((feats @ ridge).numpy())
_, info = torch.linalg.cholesky_ex(normal)
record.append(int(info))
"""

GP_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_gp_marginal_likelihood_and_kernel_ridge_as_torch(capsys):
    rng = np.random.default_rng(27301)
    xs = rng.uniform(-3, 3, (16, 1))
    ys = np.cos(1.5 * xs[:, 0]) + 0.1 * rng.standard_normal(16)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        GP_SOURCE, GP_STEPS, capsys, 27301, xs=xs, ys=ys
    )
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
    assert our_log == their_log
    assert theirs[14] < theirs[0]
