"""Real ports, continued (the harness: ``tests/real_ports.py``): sparse Gaussian processes,
programs written here in the style of GPyTorch's approximate-GP examples, without GPyTorch.

- a deep-kernel stochastic variational GP (Hensman et al.): an ``nn.Sequential`` feature net
  under an RBF kernel whose scale and lengthscale are stored unconstrained and mapped by
  ``F.softplus``; learnable inducing points; the whitened posterior ``q(v) =
  MultivariateNormal(m, scale_tril=L)`` with ``L = transform_to(constraints.lower_cholesky)(raw)``;
  ``torch.linalg.cholesky`` of ``Kzz + jitter * I`` and ``torch.linalg.solve_triangular(...,
  upper=False)``; the marginal ``Normal`` of ``f(x)`` from ``(A ** 2).sum(0)`` and ``(L.mT @ A)
  ** 2``; a minibatch ELBO scaled by ``N / B`` with ``kl_divergence`` against
  ``MultivariateNormal(zeros, scale_tril=eye)``; minibatches from ``torch.randperm(n).split(b)``;
  ``state_dict``; a predictive ``Normal`` read by ``icdf`` (credible band), ``cdf`` (PIT values)
  and ``log_prob`` under ``torch.no_grad()`` after ``model.eval()``.
- the FITC marginal likelihood as ``LowRankMultivariateNormal(zeros, cov_factor=Kxz Lzz^-T,
  cov_diag=noise + diagonal residual)`` in float64, trained by ``Adam``, then its ``log_prob``,
  ``entropy`` and ``variance`` and ``kl_divergence`` against the exact GP's
  ``MultivariateNormal(zeros, covariance_matrix=K + noise * I)``, and the exact log likelihood by
  hand with ``torch.cholesky_solve`` and ``torch.logdet``.

Both runs start from torch's weights; the minibatch order comes from one seeded stream in
both. Only the imports and the gradient lines differ.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    both,
    initializer,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SPARSE_GP_SOURCE = '''
import math
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.distributions import (
    LowRankMultivariateNormal,
    MultivariateNormal,
    Normal,
    constraints,
    kl_divergence,
    transform_to,
)


def positive(raw):
    # the optimiser moves raw values freely; the model only ever sees softplus(raw) > 0
    return F.softplus(raw)


class ScaledRBF(nn.Module):
    """k(a, b) = s * exp(-|a - b|^2 / (2 l^2)) with s and l kept unconstrained."""

    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.raw_scale = nn.Parameter(torch.zeros((), dtype=dtype))
        self.raw_length = nn.Parameter(torch.zeros((), dtype=dtype))

    def forward(self, a, b):
        a = a / positive(self.raw_length)
        b = b / positive(self.raw_length)
        dist2 = a.pow(2).sum(-1, keepdim=True) + b.pow(2).sum(-1) - 2 * a @ b.mT
        return positive(self.raw_scale) * torch.exp(-dist2.clamp_min(0) / 2)

    def diag(self, a):
        return positive(self.raw_scale) * torch.ones(a.shape[0], dtype=a.dtype)


class DeepKernelSVGP(nn.Module):
    def __init__(self, z, width=12):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, width), nn.Tanh(), nn.Linear(width, z.shape[1]))
        self.kernel = ScaledRBF()
        self.z = nn.Parameter(z.clone())
        self.q_mean = nn.Parameter(torch.zeros(z.shape[0]))
        self.q_raw_tril = nn.Parameter(0.5 * torch.eye(z.shape[0]))
        self.raw_noise = nn.Parameter(torch.tensor(-1.0))

    def noise_var(self):
        return positive(self.raw_noise) + 1e-4

    def q_tril(self):
        return transform_to(constraints.lower_cholesky)(self.q_raw_tril)

    def forward(self, x):
        # whitened: u = Lzz v with q(v) = N(m, L L^T), so f(x) needs only A = Lzz^-1 Kzx
        feats = self.net(x)
        m = self.z.shape[0]
        Lzz = torch.linalg.cholesky(self.kernel(self.z, self.z) + 1e-4 * torch.eye(m))
        A = torch.linalg.solve_triangular(Lzz, self.kernel(self.z, feats), upper=False)
        explained = (A ** 2).sum(0)
        posterior = ((self.q_tril().mT @ A) ** 2).sum(0)
        var = self.kernel.diag(feats) - explained + posterior
        return Normal(A.mT @ self.q_mean, var.clamp_min(1e-8).sqrt())

    def prior_kl(self):
        m = self.q_mean.shape[0]
        q = MultivariateNormal(self.q_mean, scale_tril=self.q_tril())
        p = MultivariateNormal(torch.zeros(m), scale_tril=torch.eye(m))
        return kl_divergence(q, p)

    def neg_elbo(self, x, y, n_total):
        f = self(x)
        s2 = self.noise_var()
        # E_q[log N(y | f, s2)] in closed form, then scaled from the batch to the data set
        fit = -0.5 * torch.log(2 * math.pi * s2) - ((y - f.mean) ** 2 + f.variance) / (2 * s2)
        return (self.prior_kl() - fit.sum() * (n_total / x.shape[0])) / n_total


def fit_svgp(model, x, y, epochs, batch, log):
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(epochs):
        for idx in torch.randperm(len(x)).split(batch):
            opt.zero_grad()
            loss = model.neg_elbo(x[idx], y[idx], len(x))
            loss.backward()
            opt.step()
            log.append(loss.item())
        print(f"epoch {epoch}: -elbo/n {loss.item():.4f}, noise {model.noise_var().item():.4f}")
    log.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def credible_band(model, x, y, log):
    model.eval()
    with torch.no_grad():
        f = model(x)
        y_dist = Normal(f.mean, (f.variance + model.noise_var()).sqrt())
        lo, hi = y_dist.icdf(torch.tensor(0.05)), y_dist.icdf(torch.tensor(0.95))
        inside = ((y >= lo) & (y <= hi)).float().mean()
        log.append({
            "mean": f.mean.numpy(), "lo": lo.numpy(), "hi": hi.numpy(), "inside": inside.numpy(),
            "pit": y_dist.cdf(y).numpy(), "nlpd": -y_dist.log_prob(y).mean().numpy(),
        })


class InducingPointGP(nn.Module):
    """FITC: y ~ N(0, Q + diag(K - Q) + s2 I) with Q = Kxz Kzz^-1 Kzx of rank m."""

    def __init__(self, z):
        super().__init__()
        self.kernel = ScaledRBF(z.dtype)
        self.z = nn.Parameter(z.clone())
        self.log_s2 = nn.Parameter(torch.full((), -2.0, dtype=z.dtype))

    def low_rank(self, x):
        m = self.z.shape[0]
        jittered = self.kernel(self.z, self.z) + 1e-6 * torch.eye(m, dtype=x.dtype)
        chol = torch.linalg.cholesky(jittered)
        factor = torch.linalg.solve_triangular(chol, self.kernel(self.z, x), upper=False).mT
        gap = (self.kernel.diag(x) - factor.pow(2).sum(-1)).clamp_min(0)
        return LowRankMultivariateNormal(
            x.new_zeros(x.shape[0]), cov_factor=factor, cov_diag=gap + self.log_s2.exp()
        )

    def full(self, x):
        n = x.shape[0]
        cov = self.kernel(x, x) + self.log_s2.exp() * torch.eye(n, dtype=x.dtype)
        return MultivariateNormal(torch.zeros(n, dtype=x.dtype), covariance_matrix=cov)


def fit_fitc(model, x, y, steps, log):
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(steps):
        opt.zero_grad()
        nll = -model.low_rank(x).log_prob(y) / len(y)
        nll.backward()
        opt.step()
        log.append(nll.item())
    with torch.no_grad():
        approx, exact = model.low_rank(x), model.full(x)
        cov = exact.covariance_matrix
        alpha = torch.cholesky_solve(y[:, None], torch.linalg.cholesky(cov))[:, 0]
        manual = -0.5 * (y.dot(alpha) + torch.logdet(cov) + len(y) * math.log(2 * math.pi))
        log.append({
            "approx": approx.log_prob(y).numpy(), "exact": exact.log_prob(y).numpy(),
            "manual": manual.numpy(), "approx_entropy": approx.entropy().numpy(),
            "exact_entropy": exact.entropy().numpy(), "approx_var": approx.variance.numpy(),
            "kl_to_exact": kl_divergence(approx, exact).numpy(),
            "flat": torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy(),
        })
'''

SPARSE_GP_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "            loss.backward()\n            opt.step()\n",
        "            grads = loss.backward()\n            opt.step(grads)\n",
    ),
    (
        "        nll.backward()\n        opt.step()\n",
        "        grads = nll.backward()\n        opt.step(grads)\n",
    ),
]


def _curve(seed, n):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-3, 3, (n, 1)), axis=0)
    y = np.sin(2 * x[:, 0]) + 0.3 * x[:, 0] + 0.1 * rng.standard_normal(n)
    return x, y


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


def test_deep_kernel_svgp_trains_and_predicts_as_torch(capsys):
    x, y = _curve(2240, 40)
    x_test, y_test = _curve(2241, 10)
    records, logs = [], []
    initialize = initializer()
    for lib, names in zip((torch, rg), both(SPARSE_GP_SOURCE, SPARSE_GP_STEPS), strict=True):
        record = []
        z = np.linspace(-2, 2, 5)[:, None] * [1.0, -0.5]
        model = names["DeepKernelSVGP"](lib.tensor(z, dtype=lib.float32))
        initialize(model)
        with SharedRandperm(lib, 2242):
            names["fit_svgp"](
                model,
                lib.tensor(x, dtype=lib.float32),
                lib.tensor(y, dtype=lib.float32),
                3,
                16,
                record,
            )
        names["credible_band"](
            model,
            lib.tensor(x_test, dtype=lib.float32),
            lib.tensor(y_test, dtype=lib.float32),
            record,
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_fitc_low_rank_marginal_likelihood_trains_as_torch():
    x, y = _curve(2243, 24)
    records = []
    for lib, names in zip((torch, rg), both(SPARSE_GP_SOURCE, SPARSE_GP_STEPS), strict=True):
        record = []
        model = names["InducingPointGP"](lib.tensor(np.linspace(-2.5, 2.5, 4)[:, None]))
        names["fit_fitc"](model, lib.tensor(x), lib.tensor(y), 20, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-9)
