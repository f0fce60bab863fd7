# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
spectral methods whose losses go through ``torch.linalg.eigh``, as the spectral-clustering and
graph-embedding code in torch writes them: Laplacian eigenmaps (a Gaussian affinity by
``torch.cdist``, the symmetric normalized Laplacian ``I - D^-1/2 W D^-1/2``, the embedding from
the eigenvectors of its smallest eigenvalues, row-normalized), a learned metric trained on the
eigengap loss (``evals[k] - evals[k - 1]`` maximized through ``eigh``), a trace loss
``torch.trace(Y.T @ L @ Y)`` with the orthogonality penalty of SpectralNet's last layer (its
``Y = Y_tilde @ L^-T`` by ``torch.linalg.cholesky`` and ``torch.inverse``), and the
``torch.lobpcg``-free eigen-decomposition of a covariance with ``eigvalsh``, against torch's run
of the same code from the same weights, in float64.

What it exercises: ``torch.linalg.eigh(L)`` (``UPLO='L'``) values and vectors and their
gradients (distinct eigenvalues), ``torch.linalg.eigvalsh``; ``torch.diag(d.pow(-0.5))``;
``evecs[:, :k]`` with the sign fixed by the largest entry (``torch.sign(evecs[idx, range(k)])``);
``F.normalize(p=2, dim=1)``; ``torch.linalg.cholesky(Y.T @ Y)`` then ``torch.inverse(L).t()``;
``torch.trace``; ``nn.Linear(..., dtype=torch.float64)``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
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


SPECTRAL_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def affinity(X, sigma=1.0):
    D = torch.cdist(X, X) ** 2
    W = torch.exp(-D / (2 * sigma ** 2))
    W = W - torch.diag(torch.diag(W))
    return W


def normalized_laplacian(W):
    d = W.sum(dim=1)
    D_inv_sqrt = torch.diag(d.pow(-0.5))
    return torch.eye(W.shape[0], dtype=W.dtype) - D_inv_sqrt @ W @ D_inv_sqrt


def laplacian_eigenmaps(X, k, sigma=1.0):
    L = normalized_laplacian(affinity(X, sigma))
    evals, evecs = torch.linalg.eigh(L)
    embedding = evecs[:, 1:k + 1]
    idx = embedding.abs().argmax(dim=0)
    embedding = embedding * torch.sign(embedding[idx, range(k)])
    return evals, F.normalize(embedding, p=2, dim=1)


X = torch.tensor(points, dtype=torch.float64)
evals, emb = laplacian_eigenmaps(X, 2)
record.append(evals.numpy())
record.append(emb.numpy())
record.append(torch.linalg.eigvalsh(torch.cov(X.T)).numpy())


class Metric(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d, bias=False, dtype=torch.float64)

    def forward(self, X):
        return self.proj(X)


metric = Metric(X.shape[1])
initialize(metric)
optimizer = torch.optim.Adam(metric.parameters(), lr=0.02)
k = 3
for step in range(15):
    optimizer.zero_grad()
    L = normalized_laplacian(affinity(metric(X), sigma=1.5))
    evals = torch.linalg.eigvalsh(L)
    eigengap = evals[k] - evals[k - 1]
    loss = -eigengap + 0.01 * metric.proj.weight.pow(2).sum()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    if step % 5 == 0:
        print(f"step {step}: eigengap {eigengap.item():.5f}")
record.append({k_: v.detach().numpy() for k_, v in metric.state_dict().items()})


class SpectralNetOutput(nn.Module):
    def __init__(self, d, k):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(d, 8, dtype=torch.float64), nn.Tanh(), nn.Linear(8, k, dtype=torch.float64))

    def forward(self, x, should_update_orth_weights=True):
        Y_tilde = self.fc(x)
        if should_update_orth_weights:
            m = Y_tilde.shape[0]
            L = torch.linalg.cholesky(Y_tilde.T @ Y_tilde)
            self.orthonorm_weights = torch.inverse(L).t() * math.sqrt(m)
        return Y_tilde @ self.orthonorm_weights


net = SpectralNetOutput(X.shape[1], 3)
initialize(net)
W = affinity(X, sigma=1.0)
Lap = torch.diag(W.sum(1)) - W
optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
for step in range(12):
    optimizer.zero_grad()
    Y = net(X)
    loss = torch.trace(Y.T @ Lap @ Y) / (X.shape[0] ** 2)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
with torch.no_grad():
    Y = net(X, should_update_orth_weights=False)
record.append((Y.T @ Y / X.shape[0]).numpy())

# the eigenvector gradient: a loss on the leading eigenvectors of a learnable symmetric matrix
A = torch.tensor(sym, dtype=torch.float64, requires_grad=True)
evals, evecs = torch.linalg.eigh(A @ A.T)
top = evecs[:, -2:]
loss = (top.pow(4)).sum() + evals[-1]
loss.backward()
record.append(A.grad.numpy())
"""

SPECTRAL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
    (
        "loss.backward()\nrecord.append(A.grad.numpy())",
        "grads = loss.backward()\nrecord.append(A.grad(grads).numpy())",
    ),
]


def test_laplacian_eigenmaps_eigengap_and_spectralnet_trace_loss_as_torch(capsys):
    rng = np.random.default_rng(27701)
    centres = np.array([[0.0, 0.0, 0.0], [2.5, 0.0, 0.5], [0.0, 2.5, -0.5]])
    points = np.concatenate([c + 0.4 * rng.standard_normal((8, 3)) for c in centres])
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SPECTRAL_SOURCE, SPECTRAL_STEPS, capsys, 27701, points=points,
        sym=rng.standard_normal((5, 5)), initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-6, atol=1e-8)
    assert our_log == their_log
