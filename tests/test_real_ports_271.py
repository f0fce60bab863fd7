"""Real ports, continued (the harness: ``tests/real_ports.py``): k-means followed by a
Gaussian mixture fitted by EM, a program written here in the style of the kmeans_pytorch and
gmm-torch packages, against torch's run of the same text on the same points (3 clusters of
2-D points, a few EM rounds, full and diagonal covariances).

What it exercises: ``X[indices]`` by a NumPy index array from ``np.random.choice``;
``torch.device("cpu")`` and ``.to(device)``; broadcast distances by ``unsqueeze``;
``torch.argmin(..., dim=1)``; ``torch.nonzero(...).squeeze()`` and ``torch.index_select``; a
row assignment ``centres[c] = ...``; a 0-d tensor formatted by an f-string spec
(``{shift ** 2:0.6f}``); ``torch.nn.Parameter(..., requires_grad=False)`` and
``torch.Tensor(1, k, 1).fill_`` on a parameter; ``torch.eye(...).reshape(...).repeat(...)``;
``torch.inverse`` of a ``(1, k, d, d)`` batch and ``torch.linalg.cholesky``/``torch.diagonal``
of its blocks; ``log_det[c] = ...`` into ``torch.empty(size=...)`` and ``quad[:, c, :] = ...``
of ``mm`` products; ``np.log`` mixed with tensors; ``torch.rsqrt``; ``torch.logsumexp``;
outer products by ``unsqueeze(-1).matmul(unsqueeze(-2))``; ``param.data = ...`` updates and a
revert to the saved ``.data``; name-mangled ``__private`` methods; ``torch.isinf`` /
``torch.isnan`` of a 0-d tensor; ``torch.max(..., 1)[1].type(torch.LongTensor)``; a BIC.

The port changes the import line only (no gradients are taken).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

KMEANS_GMM_SOURCE = """
import numpy as np
import torch
from math import pi


def kmeans(points, k, tol=1e-4, device=torch.device("cpu")):
    print(f"k-means on {device}")
    points = points.float().to(device)
    centres = points[np.random.choice(len(points), k, replace=False)]
    step = 0
    while True:
        gaps = ((points.unsqueeze(1) - centres.unsqueeze(0)) ** 2.0).sum(dim=-1).squeeze()
        owner = torch.argmin(gaps, dim=1)
        before = centres.clone()
        for c in range(k):
            members = torch.nonzero(owner == c).squeeze().to(device)
            centres[c] = torch.index_select(points, 0, members).mean(dim=0)
        shift = torch.sum(torch.sqrt(torch.sum((centres - before) ** 2, dim=1)))
        step += 1
        print(f"step {step} moved {shift ** 2:0.6f}")  # a 0-d tensor under a format spec
        record.append(float(shift**2))
        if shift**2 < tol:
            return owner.cpu(), centres.cpu()


class MixtureEM(torch.nn.Module):
    # a Gaussian mixture fitted by expectation-maximization; x is kept as (n, 1, d)
    def __init__(self, k, d, covariance="full", eps=1e-6, means=None):
        super(MixtureEM, self).__init__()
        self.k, self.d, self.covariance, self.eps = k, d, covariance, eps
        self.score = -np.inf
        start = means if means is not None else torch.randn(1, k, d)
        self.mu = torch.nn.Parameter(start, requires_grad=False)
        if covariance == "full":
            eye = torch.eye(d).reshape(1, 1, d, d).repeat(1, k, 1, 1)
            self.var = torch.nn.Parameter(eye, requires_grad=False)
        else:
            self.var = torch.nn.Parameter(torch.ones(1, k, d), requires_grad=False)
        self.pi = torch.nn.Parameter(torch.Tensor(1, k, 1), requires_grad=False).fill_(1.0 / k)

    def _log_gauss(self, x):
        diff = x - self.mu  # (n, k, d)
        if self.covariance == "diag":
            prec = torch.rsqrt(self.var)
            quad = torch.sum(diff**2 * prec**2, dim=2, keepdim=True)
            half_log_det = torch.sum(torch.log(prec), dim=2, keepdim=True)
            return -0.5 * (self.d * np.log(2.0 * pi) + quad) + half_log_det
        precision = torch.inverse(self.var)
        log_det = torch.empty(size=(self.k,))
        quad = torch.zeros(x.shape[0], self.k, 1)
        for c in range(self.k):
            chol = torch.linalg.cholesky(precision[0, c])
            log_det[c] = 2 * torch.log(torch.diagonal(chol)).sum()
            row = diff[:, c, :]
            quad[:, c, :] = (row.mm(precision[0, c]) * row).sum(dim=1, keepdim=True)
        return -0.5 * (self.d * np.log(2.0 * pi) - log_det.unsqueeze(-1) + quad)

    def _weighted(self, x):
        return self._log_gauss(x) + torch.log(self.pi)

    def __score(self, x, mean=True):
        per_point = torch.logsumexp(self._weighted(x), dim=1)
        return per_point.mean() if mean else torch.squeeze(per_point)

    def __em_round(self, x):
        log_resp = self._weighted(x)
        resp = torch.exp(log_resp - torch.logsumexp(log_resp, dim=1, keepdim=True))
        mass = torch.sum(resp, dim=0, keepdim=True) + self.eps
        mu = torch.sum(resp * x, dim=0, keepdim=True) / mass
        diff = x - mu
        if self.covariance == "full":
            outer = diff.unsqueeze(-1).matmul(diff.unsqueeze(-2))
            var = torch.sum(outer * resp.unsqueeze(-1), dim=0, keepdim=True) / mass.unsqueeze(-1)
            var = var + torch.eye(self.d) * self.eps
        else:
            var = torch.sum(resp * diff * diff, dim=0, keepdim=True) / mass + self.eps
        self.pi.data = mass / x.shape[0]
        self.mu.data = mu
        self.var.data = var

    def fit(self, x, rounds=100, delta=1e-3):
        x = x.unsqueeze(1) if len(x.size()) == 2 else x
        for _ in range(rounds):
            previous, old_mu, old_var = self.score, self.mu.data, self.var.data
            self.__em_round(x)
            self.score = self.__score(x)
            if torch.isinf(self.score.abs()) or torch.isnan(self.score):
                raise RuntimeError("the log-likelihood diverged")
            record.append(self.score.item())
            if self.score - previous <= delta:
                # no real gain: keep the previous means and covariances
                self.mu.data, self.var.data = old_mu, old_var
                break

    def predict(self, x, soft=False):
        weighted = self._weighted(x.unsqueeze(1) if len(x.size()) == 2 else x)
        if soft:
            p = torch.exp(weighted)
            return torch.squeeze(p / p.sum(1, keepdim=True))
        return torch.squeeze(torch.max(weighted, 1)[1].type(torch.LongTensor))

    def bic(self, x):
        x = x.unsqueeze(1) if len(x.size()) == 2 else x
        n = x.shape[0]
        n_params = self.d * self.k + self.d + self.k - 1
        return -2.0 * self.__score(x, mean=False).mean() * n + n_params * np.log(n)


data = torch.from_numpy(points).float()
labels, centres = kmeans(data, 3, device=torch.device("cpu"))
record.append(labels.numpy().tolist())
record.append(centres.numpy())
for covariance in ("full", "diag"):
    gmm = MixtureEM(3, 2, covariance=covariance, means=centres.unsqueeze(0))
    gmm.fit(data, rounds=6)
    for p in (gmm.mu, gmm.var, gmm.pi):
        record.append(p.data.numpy())
    record.append(gmm.predict(data).numpy().tolist())
    record.append(gmm.predict(data, soft=True).numpy())
    record.append(float(gmm.bic(data)))
"""

KMEANS_GMM_STEPS = [("import torch\nfrom math", "import retrograd as torch\nfrom math")]


def test_kmeans_pytorch_then_gmm_torch_em_as_torch(capsys):
    rng = np.random.default_rng(27101)
    centres = np.array([[0.0, 0.0], [3.0, 0.5], [0.5, 3.0]])
    points = np.concatenate([c + 0.6 * rng.standard_normal((20, 2)) for c in centres])
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        KMEANS_GMM_SOURCE, KMEANS_GMM_STEPS, capsys, 27101, points=points
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    # the float32 centre shifts agree to rounding, compared in the records
    assert our_log.split("moved")[0] == their_log.split("moved")[0]
    assert [line.split(" moved")[0] for line in our_log.splitlines()] == [
        line.split(" moved")[0] for line in their_log.splitlines()
    ]
    assert "step 4 moved" in their_log
    # each mixture stops at a round without real gain (reverting it) before its sixth round
    assert len(theirs) == 4 + 2 + 2 * (4 + 3 + 3)
