"""Programs written here in the style of Flower's federated-PCA baseline (a PCA module whose
components are kept as a frozen ``Parameter``), of the classic PCA-by-SVD helper and of a
probabilistic PCA (Tipping & Bishop) fitted by Adam, run under torch and, ported, under
retrograd on the same data and draws (the harness: ``tests/real_ports.py``; ``pca_lowrank``'s
random sketch draws from the shared stream).

What they exercise: ``torch.pca_lowrank(X, q=..., center=False, niter=...)`` and
``torch.svd_lowrank``; ``torch.linalg.svd(full_matrices=...)`` with ``Vh.T`` and
``torch.svd``'s ``V``; centring by ``H = I - 11^T/n`` through ``torch.mm(H.double(),
X.double())``; ``Parameter(..., requires_grad=False)`` set after construction (annotated
attributes, ``named_parameters``); ``torch.linalg.norm`` of the reconstruction;
``torch.linalg.slogdet(...)[1]``, ``torch.logdet``, ``torch.linalg.solve`` and
``torch.linalg.inv`` gradients in float64, ``torch.trace``, ``F.softplus`` for the noise,
``torch.linalg.qr`` of the loadings. Singular vectors are compared up to sign (as torch's docs
allow), through their projector.

The port changes the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the tests seed every stream)
    runs_with_draws,
)


@pytest.fixture(autouse=True)
def _seeded(global_streams_restored):  # noqa: F811 (the fixture imported above)
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


PCA_SOURCE = """
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn import parameter


class ClientPca(nn.Module):
    # one client's PCA: the server later averages the frozen components
    components: parameter.Parameter
    spectrum: parameter.Parameter
    centre: Tensor

    def __init__(self, sketch: bool = False, full: bool = False, sketch_rank: int = 5) -> None:
        super().__init__()
        self.sketch, self.full, self.sketch_rank = sketch, full, sketch_rank

    def forward(self, rows: Tensor, centred: bool = True) -> tuple[Tensor, Tensor]:
        if centred:
            self.centre = rows.mean(dim=0)
            rows = rows - self.centre
        if self.sketch:
            _, sv, right = torch.pca_lowrank(rows, q=self.sketch_rank, center=False, niter=3)
            return sv, right
        _, sv, vh = torch.linalg.svd(rows, full_matrices=self.full)
        return sv, vh.T

    def freeze(self, right: Tensor, sv: Tensor) -> None:
        self.components = parameter.Parameter(right, requires_grad=False)
        self.spectrum = parameter.Parameter(sv, requires_grad=False)

    def encode(self, rows: Tensor, k: Optional[int] = None) -> Tensor:
        k = self.components.size(1) if k is None else k
        return torch.matmul(rows - self.centre, self.components[:, :k])

    def decode(self, codes: Tensor) -> Tensor:
        basis = self.components[:, : codes.size(1)]
        return torch.matmul(codes, basis.T) + self.centre

    def mean_sq_residual(self, rows: Tensor, k: int) -> float:
        residual = rows - self.decode(self.encode(rows, k))
        return torch.linalg.norm(residual).item() ** 2 / rows.size(0)

    def kept_variance(self, k: int) -> float:
        energy = self.spectrum**2
        return (energy[:k].sum() / energy.sum()).item()


def centred_svd_pca(rows, k):
    n = rows.size(0)
    ones = torch.ones(n, 1)
    centring = torch.eye(n) - torch.mm(ones, ones.t()) / n
    centred = torch.mm(centring.double(), rows.double())
    _, sv, v = torch.svd(centred)
    return v[:, :k], sv[:k] * sv[:k] / (n - 1)


def proj(basis):
    return (basis @ basis.T).detach().numpy()


rows = torch.tensor(data, dtype=torch.float32)
for sketch, full in ((False, True), (True, False), (False, False)):
    client = ClientPca(sketch=sketch, full=full)
    sv, right = client(rows)
    client.freeze(right, sv)
    record.append(sv[:3].detach().numpy())
    record.append(proj(client.components[:, :2]))
    record.append(client.mean_sq_residual(rows, 2))
    record.append(client.kept_variance(1))
    record.append([name for name, _ in client.named_parameters()])

basis, variances = centred_svd_pca(rows, 2)
record += [proj(basis), variances.numpy()]
left, sv, _ = torch.svd_lowrank(rows.double(), q=4, niter=2)
record += [sv.numpy(), proj(left[:, :2])]


class ProbabilisticPca(nn.Module):
    def __init__(self, dim, latent):
        super().__init__()
        self.loadings = nn.Parameter(0.1 * torch.randn(dim, latent, dtype=torch.float64))
        self.noise_raw = nn.Parameter(torch.tensor(0.0, dtype=torch.float64))

    def noise(self):
        return F.softplus(self.noise_raw) + 1e-4

    def cov(self):
        eye = torch.eye(self.loadings.shape[0], dtype=torch.float64)
        return self.loadings @ self.loadings.T + self.noise() * eye

    def forward(self, obs):
        # negative log marginal likelihood of centred observations
        n, d = obs.shape
        cov = self.cov()
        scatter = obs.T @ obs / n
        logdet = torch.linalg.slogdet(cov)[1]
        fit = torch.trace(torch.linalg.solve(cov, scatter))
        return 0.5 * n * (d * math.log(2 * math.pi) + logdet + fit)

    def latent_mean(self, obs):
        q = self.loadings.shape[1]
        m = self.loadings.T @ self.loadings + self.noise() * torch.eye(q, dtype=torch.float64)
        return obs @ self.loadings @ torch.linalg.inv(m).T


obs = torch.tensor(data, dtype=torch.float64)
obs = obs - obs.mean(0)
model = ProbabilisticPca(obs.shape[1], 2)
optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
for step in range(15):
    optimizer.zero_grad()
    loss = model(obs)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(proj(torch.linalg.qr(model.loadings)[0]))
record += [model.noise().item(), torch.logdet(model.cov()).item()]
record.append(model.latent_mean(obs).abs().mean().item())
"""

PCA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    ("from torch import Tensor\n", "from retrograd import Tensor\n"),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_flower_pca_module_svd_pca_and_probabilistic_pca_as_torch(capsys):
    rng = np.random.default_rng(272)
    factors = rng.standard_normal((30, 2)) @ rng.standard_normal((2, 6))
    data = factors * np.array([2.5, 2.0, 1.0, 1.0, 0.6, 0.4]) + 0.2 * rng.standard_normal((30, 6))
    (theirs, ours), _ = runs_with_draws(PCA_SOURCE, PCA_STEPS, capsys, 272, data=data)
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    assert theirs[-5] < theirs[-19]  # the marginal likelihood fit lowered the loss
