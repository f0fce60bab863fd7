# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the PCA module of Flower's federated-PCA baseline (``PcaModule``: centring, ``torch.pca_lowrank``
or ``torch.linalg.svd`` by its ``low_rank``/``full_svd`` flags, the components kept as a
``Parameter``, ``project_lower_dim``/``project_back`` and the reconstruction loss), the
classic PCA-by-SVD helper (``H = I - 11^T/n`` centring with ``torch.svd``, explained variance),
and a probabilistic PCA (Tipping & Bishop) fitted by Adam on its negative marginal likelihood
(``C = W W^T + sigma^2 I`` through ``torch.linalg.slogdet`` and ``torch.linalg.solve``, the
posterior mean through ``torch.linalg.inv``), against torch's run of the same code on the same
data and the same draws (``pca_lowrank``'s random sketch draws from the shared stream).

What it exercises: ``torch.pca_lowrank(X, q=..., center=False, niter=...)`` and
``torch.svd_lowrank``; ``torch.linalg.svd(full_matrices=False)`` / ``torch.svd``'s ``V``;
``torch.mm(H.double(), X.double())``; ``torch.linalg.slogdet(...)[1]`` /
``torch.logdet`` / ``torch.linalg.solve`` / ``torch.linalg.inv`` gradients in float64;
``torch.trace``; ``F.softplus`` for the noise; ``Parameter(..., requires_grad=False)``.
Singular vectors are compared up to sign (as torch's docs allow), through their projector.

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


PCA_SOURCE = """
from typing import Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn.parameter import Parameter


class PcaModule(nn.Module):
    def __init__(self, low_rank: bool = False, full_svd: bool = False, rank_estimation: int = 6) -> None:
        super().__init__()
        self.low_rank = low_rank
        self.full_svd = full_svd
        self.rank_estimation = rank_estimation
        self.principal_components: Parameter
        self.singular_values: Parameter
        self.data_mean: Tensor

    def forward(self, X: Tensor, center_data: bool) -> Tuple[Tensor, Tensor]:
        X_prime = self.prepare_data_forward(X, center_data)
        if self.low_rank:
            U, S, V = torch.pca_lowrank(X_prime, q=self.rank_estimation, center=False, niter=4)
            return S, V
        else:
            U, S, Vh = torch.linalg.svd(X_prime, full_matrices=self.full_svd)
            return S, Vh.T

    def prepare_data_forward(self, X: Tensor, center_data: bool) -> Tensor:
        if center_data:
            self.data_mean = torch.mean(X, dim=0)
            X = X - self.data_mean
        return X

    def set_principal_components(self, principal_components: Tensor, singular_values: Tensor) -> None:
        self.principal_components = Parameter(principal_components, requires_grad=False)
        self.singular_values = Parameter(singular_values, requires_grad=False)

    def project_lower_dim(self, X: Tensor, k: Optional[int] = None, center_data: bool = False) -> Tensor:
        if center_data:
            X = X - torch.mean(X, dim=0)
        if k is None:
            k = self.principal_components.size(1)
        return torch.matmul(X, self.principal_components[:, :k])

    def project_back(self, X_lower_dim: Tensor, add_mean: bool = False) -> Tensor:
        k = X_lower_dim.size(1)
        X = torch.matmul(X_lower_dim, self.principal_components[:, :k].T)
        if add_mean:
            X = X + self.data_mean
        return X

    def compute_reconstruction_error(self, X: Tensor, k: Optional[int] = None) -> float:
        X_prime = X - self.data_mean
        X_lower = self.project_lower_dim(X_prime, k)
        X_rec = self.project_back(X_lower)
        return torch.linalg.norm(X_prime - X_rec).item() ** 2 / X.size(0)

    def compute_cumulative_explained_variance(self) -> float:
        return (torch.sum(self.singular_values**2) / torch.sum(self.singular_values**2)).item()

    def compute_explained_variance_ratio(self, k: int) -> float:
        return (torch.sum(self.singular_values[:k] ** 2) / torch.sum(self.singular_values**2)).item()


def PCA_svd(X, k, center=True):
    n = X.size()[0]
    ones = torch.ones(n).view([n, 1])
    h = ((1/n) * torch.mm(ones, ones.t())) if center else torch.zeros(n*n).view([n, n])
    H = torch.eye(n) - h
    X_center = torch.mm(H.double(), X.double())
    u, s, v = torch.svd(X_center)
    components = v[:, :k]
    explained_variance = torch.mul(s[:k], s[:k]) / (n - 1)
    return components, explained_variance


def projector(V):
    return (V @ V.T).detach().numpy()


X = torch.tensor(data, dtype=torch.float32)
for low_rank, full_svd in ((False, False), (False, True), (True, False)):
    pca = PcaModule(low_rank=low_rank, full_svd=full_svd, rank_estimation=4)
    S, V = pca(X, center_data=True)
    pca.set_principal_components(V, S)
    record.append(S[:4].detach().numpy())
    record.append(projector(pca.principal_components[:, :3]))
    record.append(pca.compute_reconstruction_error(X, k=2))
    record.append(pca.compute_explained_variance_ratio(2))
    record.append(pca.project_back(pca.project_lower_dim(X, k=3, center_data=True), add_mean=True).abs().sum().item())
    record.append(sorted(name for name, _ in pca.named_parameters()))

components, explained_variance = PCA_svd(X, 3)
record.append(projector(components))
record.append(explained_variance.numpy())

U, S, V = torch.svd_lowrank(X.double(), q=5, niter=3)
record.append(S.numpy())
record.append(projector(U[:, :3]))


class PPCA(nn.Module):
    def __init__(self, d, q):
        super().__init__()
        self.W = nn.Parameter(torch.randn(d, q, dtype=torch.float64) * 0.1)
        self.raw_sigma = nn.Parameter(torch.zeros((), dtype=torch.float64))

    def sigma2(self):
        return nn.functional.softplus(self.raw_sigma) + 1e-4

    def covariance(self):
        d = self.W.shape[0]
        return self.W @ self.W.T + self.sigma2() * torch.eye(d, dtype=torch.float64)

    def forward(self, Y):
        n, d = Y.shape
        C = self.covariance()
        S = Y.T @ Y / n
        sign, logabsdet = torch.linalg.slogdet(C)
        return 0.5 * n * (d * math.log(2 * math.pi) + logabsdet + torch.trace(torch.linalg.solve(C, S)))

    def posterior_mean(self, Y):
        q = self.W.shape[1]
        M = self.W.T @ self.W + self.sigma2() * torch.eye(q, dtype=torch.float64)
        return Y @ self.W @ torch.linalg.inv(M).T


Y = torch.tensor(data, dtype=torch.float64)
Y = Y - Y.mean(0)
ppca = PPCA(Y.shape[1], 2)
optimizer = torch.optim.Adam(ppca.parameters(), lr=0.05)
for step in range(25):
    optimizer.zero_grad()
    loss = ppca(Y)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(projector(torch.linalg.qr(ppca.W)[0]))
record.append(ppca.sigma2().item())
record.append(torch.logdet(ppca.covariance()).item())
record.append(ppca.posterior_mean(Y).abs().mean().item())
"""

PCA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("from torch import Tensor\n", "from retrograd import Tensor\n"),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_flower_pca_module_svd_pca_and_probabilistic_pca_as_torch(capsys):
    rng = np.random.default_rng(27201)
    latent = rng.standard_normal((40, 2))
    mixing = rng.standard_normal((2, 7))
    data = latent @ mixing * np.array(
        [3.0, 2.0, 1.5, 1.0, 1.0, 0.5, 0.5]
    ) + 0.3 * rng.standard_normal((40, 7))
    (theirs, ours), _ = runs_with_draws(PCA_SOURCE, PCA_STEPS, capsys, 27201, data=data)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    assert theirs[-5] < theirs[-29]  # the marginal likelihood fit lowered the loss
