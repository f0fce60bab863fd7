# ruff: noqa: E501, N806  (the programs are kept in their authors' manner: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
sparse Gaussian processes written by hand, in the manner of GPyTorch's ``ApproximateGP``
without GPyTorch.

- a stochastic variational deep-kernel GP (SVGP, Hensman et al.): an ``nn.Sequential``
  feature extractor under an RBF kernel whose lengthscale and outputscale are kept
  unconstrained and mapped by ``F.softplus``; learnable inducing points; the whitened
  variational posterior ``q(u) = MultivariateNormal(m, scale_tril=L)`` with ``L =
  transform_to(constraints.lower_cholesky)(raw)``; ``torch.linalg.cholesky`` of ``Kzz +
  jitter * I``, ``torch.linalg.solve_triangular(..., upper=False)``, the marginal ``Normal``
  of ``f(x)`` by ``(A ** 2).sum(0)`` and ``(L.mT @ A) ** 2``; the ELBO of minibatches scaled
  by ``N / B`` with ``kl_divergence(q(u), MultivariateNormal(zeros, scale_tril=eye))``;
  prediction with ``Normal(mu, var.sqrt()).cdf`` / ``icdf`` credible bands.
- the FITC / subset-of-regressors marginal likelihood as ``LowRankMultivariateNormal(zeros,
  cov_factor=Kxz @ Lzz^-T, cov_diag=noise + diag residual)``, trained by ``Adam``, with its
  ``entropy``, ``variance`` and ``log_prob`` against the exact GP's
  ``MultivariateNormal(zeros, covariance_matrix=K + noise * I)`` and
  ``torch.logdet`` / ``torch.cholesky_solve``.

The minibatch order comes from ``torch.randperm`` of one seeded stream in both runs. The
lines changed: the imports and the gradient lines.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


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
import torch.nn.functional as F
from torch.distributions import MultivariateNormal, LowRankMultivariateNormal, Normal, kl_divergence, constraints, transform_to


class RBFKernel(nn.Module):
    def __init__(self):
        super().__init__()
        self.raw_lengthscale = nn.Parameter(torch.tensor(0.))
        self.raw_outputscale = nn.Parameter(torch.tensor(0.))

    @property
    def lengthscale(self):
        return F.softplus(self.raw_lengthscale)

    @property
    def outputscale(self):
        return F.softplus(self.raw_outputscale)

    def forward(self, x1, x2, diag=False):
        if diag:
            return self.outputscale * torch.ones(x1.shape[0], dtype=x1.dtype)
        x1_, x2_ = x1 / self.lengthscale, x2 / self.lengthscale
        sq = (x1_ ** 2).sum(-1, keepdim=True) - 2 * x1_ @ x2_.mT + (x2_ ** 2).sum(-1)
        return self.outputscale * torch.exp(-0.5 * sq.clamp_min(0))


class SVDKGP(nn.Module):
    def __init__(self, inducing_points, feature_dim):
        super().__init__()
        self.feature_extractor = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, feature_dim))
        self.kernel = RBFKernel()
        self.inducing_points = nn.Parameter(inducing_points.clone())
        m = inducing_points.shape[0]
        self.variational_mean = nn.Parameter(torch.zeros(m))
        self.raw_variational_chol = nn.Parameter(torch.eye(m) * 0.5)
        self.raw_noise = nn.Parameter(torch.tensor(-1.))
        self.jitter = 1e-4

    @property
    def noise(self):
        return F.softplus(self.raw_noise) + 1e-4

    def variational_chol(self):
        return transform_to(constraints.lower_cholesky)(self.raw_variational_chol)

    def forward(self, x):
        z = self.inducing_points
        h = self.feature_extractor(x)
        Kzz = self.kernel(z, z) + self.jitter * torch.eye(z.shape[0])
        Lzz = torch.linalg.cholesky(Kzz)
        Kzx = self.kernel(z, h)
        A = torch.linalg.solve_triangular(Lzz, Kzx, upper=False)
        S_chol = self.variational_chol()
        mean = A.mT @ self.variational_mean
        var = self.kernel(h, h, diag=True) - (A ** 2).sum(0) + ((S_chol.mT @ A) ** 2).sum(0)
        return Normal(mean, var.clamp_min(1e-8).sqrt())

    def kl(self):
        m = self.variational_mean.shape[0]
        q_u = MultivariateNormal(self.variational_mean, scale_tril=self.variational_chol())
        p_u = MultivariateNormal(torch.zeros(m), scale_tril=torch.eye(m))
        return kl_divergence(q_u, p_u)

    def elbo(self, x, y, num_data):
        f = self(x)
        noise = self.noise
        expected_log_lik = -0.5 * torch.log(2 * math.pi * noise) - ((y - f.mean) ** 2 + f.variance) / (2 * noise)
        return expected_log_lik.sum() * (num_data / x.shape[0]) - self.kl()


def train_svgp(model, X, y, epochs, batch_size, record):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    n = X.shape[0]
    for epoch in range(epochs):
        perm = torch.randperm(n)
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            optimizer.zero_grad()
            loss = -model.elbo(X[idx], y[idx], n) / n
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        print(f"Epoch {epoch + 1} - loss {loss.item():.4f} - noise {model.noise.item():.4f}")
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def predict(model, X_test, y_test, record):
    model.eval()
    with torch.no_grad():
        f = model(X_test)
        pred = Normal(f.mean, (f.variance + model.noise).sqrt())
        lower, upper = pred.icdf(torch.tensor(0.025)), pred.icdf(torch.tensor(0.975))
        coverage = ((y_test > lower) & (y_test < upper)).float().mean()
        record.append({"mean": f.mean.numpy(), "lower": lower.numpy(), "upper": upper.numpy(),
                       "pit": pred.cdf(y_test).numpy(), "nll": -pred.log_prob(y_test).mean().numpy(),
                       "coverage": coverage.numpy()})


class FITC(nn.Module):
    def __init__(self, inducing_points):
        super().__init__()
        self.kernel = RBFKernel()
        self.inducing_points = nn.Parameter(inducing_points.clone())
        self.log_noise = nn.Parameter(torch.tensor(-2., dtype=inducing_points.dtype))

    def marginal(self, x):
        z = self.inducing_points
        Kzz = self.kernel(z, z) + 1e-6 * torch.eye(z.shape[0], dtype=z.dtype)
        Lzz = torch.linalg.cholesky(Kzz)
        W = torch.linalg.solve_triangular(Lzz, self.kernel(z, x), upper=False).mT
        residual = self.kernel(x, x, diag=True) - (W ** 2).sum(-1)
        cov_diag = self.log_noise.exp() + residual.clamp_min(0)
        return LowRankMultivariateNormal(torch.zeros(x.shape[0], dtype=x.dtype), cov_factor=W, cov_diag=cov_diag)

    def exact(self, x):
        K = self.kernel(x, x) + self.log_noise.exp() * torch.eye(x.shape[0], dtype=x.dtype)
        return MultivariateNormal(torch.zeros(x.shape[0], dtype=x.dtype), covariance_matrix=K)


def train_fitc(model, X, y, steps, record):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    for step in range(steps):
        optimizer.zero_grad()
        loss = -model.marginal(X).log_prob(y) / X.shape[0]
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    with torch.no_grad():
        approx, exact = model.marginal(X), model.exact(X)
        K = exact.covariance_matrix
        L = torch.linalg.cholesky(K)
        alpha = torch.cholesky_solve(y.unsqueeze(-1), L).squeeze(-1)
        by_hand = -0.5 * (y @ alpha) - 0.5 * torch.logdet(K) - 0.5 * X.shape[0] * math.log(2 * math.pi)
        record.append({"approx_log_prob": approx.log_prob(y).numpy(), "exact_log_prob": exact.log_prob(y).numpy(),
                       "by_hand": by_hand.numpy(), "approx_entropy": approx.entropy().numpy(),
                       "exact_entropy": exact.entropy().numpy(), "approx_variance": approx.variance.numpy(),
                       "kl": kl_divergence(approx, exact).numpy(),
                       "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()})
"""

GP_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _data(seed, n):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, (n, 1)), axis=0)
    y = np.sin(2 * X[:, 0]) + 0.3 * X[:, 0] + 0.1 * rng.standard_normal(n)
    return X, y


class SharedRandperm:
    """``torch.randperm`` of a library drawing from one seeded stream."""

    def __init__(self, lib, seed):
        self.lib, self.rng = lib, np.random.default_rng(seed)

    def __enter__(self):
        self.saved = self.lib.randperm
        self.lib.randperm = lambda n, **_: self.lib.tensor(
            self.rng.permutation(n), dtype=self.lib.int64
        )
        return self

    def __exit__(self, *exc):
        self.lib.randperm = self.saved
        return False


def test_stochastic_variational_deep_kernel_gp_trains_as_torch(capsys):
    X, y = _data(2240, 48)
    X_test, y_test = _data(2241, 10)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            GP_SOURCE
            if lib is torch
            else port(GP_SOURCE, GP_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib)
        inducing = lib.tensor(
            np.linspace(-2, 2, 6)[:, None].repeat(2, 1) * [1.0, 0.5], dtype=lib.float32
        )
        model = names["SVDKGP"](inducing, 2)
        initialize(model)
        with SharedRandperm(lib, 2242):
            names["train_svgp"](
                model,
                lib.tensor(X, dtype=lib.float32),
                lib.tensor(y, dtype=lib.float32),
                4,
                16,
                record,
            )
        names["predict"](
            model,
            lib.tensor(X_test, dtype=lib.float32),
            lib.tensor(y_test, dtype=lib.float32),
            record,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_fitc_low_rank_gp_marginal_likelihood_trains_as_torch():
    X, y = _data(2243, 30)
    records = []
    for lib in (torch, rg):
        record = []
        text = (
            GP_SOURCE
            if lib is torch
            else port(GP_SOURCE, GP_STEPS).replace("from torch.", "from retrograd.")
        )
        names = run_source(text, lib)
        model = names["FITC"](lib.tensor(np.linspace(-2.5, 2.5, 5)[:, None]))
        names["train_fitc"](model, lib.tensor(X), lib.tensor(y), 25, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-9)
