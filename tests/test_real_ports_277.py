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
of the same code from the same weights, in float64; and W-MSE's ``Whitening2d`` layer (its
whitening matrix by ``torch.cholesky`` and ``torch.triangular_solve``) trained in float32.

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


WMSE_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.functional import conv2d


class Whitening2d(nn.Module):
    def __init__(self, num_features, momentum=0.01, track_running_stats=True, eps=0):
        super(Whitening2d, self).__init__()
        self.num_features = num_features
        self.momentum = momentum
        self.track_running_stats = track_running_stats
        self.eps = eps

        if self.track_running_stats:
            self.register_buffer(
                "running_mean", torch.zeros([1, self.num_features, 1, 1])
            )
            self.register_buffer("running_variance", torch.eye(self.num_features))

    def forward(self, x):
        x = x.unsqueeze(2).unsqueeze(3)
        m = x.mean(0).view(self.num_features, -1).mean(-1).view(1, -1, 1, 1)
        if not self.training and self.track_running_stats:  # for inference
            m = self.running_mean
        xn = x - m

        T = xn.permute(1, 0, 2, 3).contiguous().view(self.num_features, -1)
        f_cov = torch.mm(T, T.permute(1, 0)) / (T.shape[-1] - 1)

        eye = torch.eye(self.num_features).type(f_cov.type())

        if not self.training and self.track_running_stats:  # for inference
            f_cov = self.running_variance

        f_cov_shrinked = (1 - self.eps) * f_cov + self.eps * eye

        inv_sqrt = torch.triangular_solve(
            eye, torch.cholesky(f_cov_shrinked), upper=False
        )[0]
        inv_sqrt = inv_sqrt.contiguous().view(
            self.num_features, self.num_features, 1, 1
        )

        decorrelated = conv2d(xn, inv_sqrt)

        if self.training and self.track_running_stats:
            self.running_mean = torch.add(
                self.momentum * m.detach(),
                (1 - self.momentum) * self.running_mean,
                out=self.running_mean,
            )
            self.running_variance = torch.add(
                self.momentum * f_cov.detach(),
                (1 - self.momentum) * self.running_variance,
                out=self.running_variance,
            )

        return decorrelated.squeeze(2).squeeze(2)


def norm_mse_loss(x0, x1):
    x0 = F.normalize(x0)
    x1 = F.normalize(x1)
    return 2 - 2 * (x0 * x1).sum(dim=-1).mean()


class WMSE(nn.Module):
    def __init__(self, emb=4, w_size=16, w_iter=1):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, emb))
        self.whitening = Whitening2d(emb, eps=0, track_running_stats=False)
        self.loss_f = norm_mse_loss
        self.w_iter = w_iter
        self.w_size = w_size
        self.num_pairs = 1

    def forward(self, samples):
        bs = len(samples[0])
        h = [self.backbone(x) for x in samples]
        h = self.head(torch.cat(h))
        loss = 0
        for _ in range(self.w_iter):
            z = torch.empty_like(h)
            perm = torch.randperm(bs).view(-1, self.w_size)
            for idx in perm:
                for i in range(len(samples)):
                    z[idx + i * bs] = self.whitening(h[idx + i * bs])
            for i in range(len(samples) - 1):
                for j in range(i + 1, len(samples)):
                    x0 = z[i * bs: (i + 1) * bs]
                    x1 = z[j * bs: (j + 1) * bs]
                    loss += self.loss_f(x0, x1)
        loss /= self.w_iter * self.num_pairs
        return loss


model = WMSE()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step, (view1, view2) in enumerate(batches):
    optimizer.zero_grad()
    loss = model([torch.tensor(view1, dtype=torch.float32), torch.tensor(view2, dtype=torch.float32)])
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in model.state_dict().items()})

white = Whitening2d(4, momentum=0.1)
feats = torch.tensor(features, dtype=torch.float32)
out = white(feats)
record.append((out.T @ out / (out.shape[0] - 1)).detach().numpy())
record.append(white.running_variance.numpy())
white.eval()
record.append(white(feats).detach().numpy())
"""

WMSE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.nn.functional",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.nn.functional",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_wmse_whitening_by_cholesky_and_triangular_solve_trains_as_torch(capsys):
    """W-MSE (htdt/self-supervised, ``methods/whitening.py`` and ``methods/w_mse.py``): the
    ``Whitening2d`` layer (the deprecated ``torch.cholesky`` and ``torch.triangular_solve`` for
    ``Sigma^-1/2``, ``eye.type(f_cov.type())``, a 1x1 ``conv2d`` by the whitening matrix, the
    running statistics by ``torch.add(..., out=self.running_mean)``), the whitened batches by
    ``torch.randperm(bs).view(-1, w_size)`` written into ``torch.empty_like(h)`` by index, and
    the normalized MSE loss, trained by Adam. ``torch.randperm`` draws from each library's own
    generator: with ``w_size == bs`` there is one slice, all the rows, whose whitening (mean and
    covariance) is the same in any order, so ``z`` is the same in both runs."""
    rng = np.random.default_rng(27702)
    base = rng.standard_normal((3, 16, 6))
    batches = [
        (b + 0.1 * rng.standard_normal(b.shape), b + 0.1 * rng.standard_normal(b.shape))
        for b in base
    ]
    mixing = rng.standard_normal((4, 4))
    (theirs, ours), _ = runs_with_draws(
        WMSE_SOURCE, WMSE_STEPS, capsys, 27702, batches=batches,
        features=rng.standard_normal((32, 4)) @ mixing, initialize=initializer(),
    )  # fmt: skip
    # the biases before the head's BatchNorm1d and before the whitening (which centres) have no
    # true gradient: Adam follows the rounding noise there (and the running mean follows them)
    noise = ("backbone.2.bias", "head.0.bias", "head.1.running_mean", "head.3.bias")
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=noise)
    np.testing.assert_allclose(theirs[-3], np.eye(4), atol=1e-4)  # whitened: unit covariance
