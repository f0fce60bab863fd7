"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of spectral-clustering and graph-embedding code in torch (Laplacian eigenmaps, an
eigengap objective, SpectralNet's orthonormalizing output) and of W-MSE's whitening layer
(htdt/self-supervised), run under torch and, ported, under retrograd from the same weights.

- Spectral methods in float64: a Gaussian affinity by ``torch.cdist`` with its diagonal
  removed by ``torch.diag(torch.diag(A))``, the symmetric normalized Laplacian through
  ``torch.diag(d.pow(-0.5))``, ``torch.linalg.eigh`` values and vectors and their gradients
  (distinct eigenvalues), ``torch.linalg.eigvalsh`` (of ``torch.cov(X.T)`` too), eigenvector
  signs fixed by indexing with a tensor and a ``range`` (``torch.sign(v[peak, range(k)])``),
  ``F.normalize(p=2, dim=1)``, ``nn.Linear(..., dtype=torch.float64)``; an eigengap trained
  by Adam; an output orthonormalized by ``torch.linalg.cholesky`` and ``torch.inverse(L).t()``
  trained on ``torch.trace(Y.T @ L @ Y)`` by SGD;
- W-MSE in float32: a whitening layer using the deprecated ``torch.cholesky`` and
  ``torch.triangular_solve(eye, L, upper=False)[0]``, ``eye.type(cov.type())``, a 1x1
  ``conv2d`` imported ``from torch.nn.functional``, ``permute(...).contiguous().view``,
  ``torch.mm``, running statistics by ``torch.add(..., out=self.running_mean)`` used in eval
  mode; two views whitened in chunks ``torch.randperm(n).view(-1, chunk)`` written into
  ``torch.empty_like(h)`` by index; ``nn.BatchNorm1d``; a normalized MSE trained by Adam.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``; ``M.grad`` read from ``grads``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SPECTRAL_SOURCE = """
import torch
from torch import nn
from torch.nn import functional as F


def gaussian_affinity(pts, width=1.0):
    sq = torch.cdist(pts, pts) ** 2
    aff = torch.exp(-sq / (2 * width**2))
    return aff - torch.diag(torch.diag(aff))  # no self-loops


def sym_laplacian(aff):
    inv_root_deg = torch.diag(aff.sum(dim=1).pow(-0.5))
    n = aff.shape[0]
    return torch.eye(n, dtype=aff.dtype) - inv_root_deg @ aff @ inv_root_deg


def embed(pts, dims):
    vals, vecs = torch.linalg.eigh(sym_laplacian(gaussian_affinity(pts)))
    coords = vecs[:, 1 : dims + 1]  # skip the trivial eigenvector
    # fix each eigenvector's sign: its largest-magnitude entry positive
    peak = coords.abs().argmax(dim=0)
    coords = coords * torch.sign(coords[peak, range(dims)])
    return vals, F.normalize(coords, p=2, dim=1)


pts = torch.tensor(pts_np, dtype=torch.float64)
vals, coords = embed(pts, 2)
record.append(vals.numpy())
record.append(coords.numpy())
record.append(torch.linalg.eigvalsh(torch.cov(pts.T)).numpy())

# learn a linear map of the points that widens the gap after the third eigenvalue
warp = nn.Linear(3, 3, bias=False, dtype=torch.float64)
initialize(warp)
opt = torch.optim.Adam(warp.parameters(), lr=0.03)
for it in range(6):
    opt.zero_grad()
    spectrum = torch.linalg.eigvalsh(sym_laplacian(gaussian_affinity(warp(pts), width=1.5)))
    gap = spectrum[3] - spectrum[2]
    objective = 0.02 * (warp.weight**2).sum() - gap
    objective.backward()
    opt.step()
    record.append(objective.item())
    if it % 2 == 0:
        print(f"{it}: gap={gap.item():.5f}")
record.append(warp.weight.detach().numpy())


class OrthoHead(nn.Module):
    # SpectralNet-like output: Y = Y_raw @ W with W = sqrt(m) * chol(Y_raw^T Y_raw)^-T,
    # W refreshed only when asked
    def __init__(self, k):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(3, 6, dtype=torch.float64), nn.Tanh(), nn.Linear(6, k, dtype=torch.float64)
        )

    def forward(self, x, refresh=True):
        raw = self.body(x)
        if refresh:
            chol = torch.linalg.cholesky(raw.T @ raw)
            self.ortho = torch.inverse(chol).t() * math.sqrt(raw.shape[0])
        return raw @ self.ortho


head = OrthoHead(3)
initialize(head)
aff = gaussian_affinity(pts)
unnormalized = torch.diag(aff.sum(1)) - aff
opt = torch.optim.SGD(head.parameters(), lr=0.02)
for it in range(5):
    opt.zero_grad()
    Y = head(pts)
    smoothness = torch.trace(Y.T @ unnormalized @ Y) / pts.shape[0] ** 2
    smoothness.backward()
    opt.step()
    record.append(smoothness.item())
with torch.no_grad():
    Y = head(pts, refresh=False)
record.append((Y.T @ Y / pts.shape[0]).numpy())

# eigenvector gradients (distinct eigenvalues): a loss on the top two eigenvectors
M = torch.tensor(m_np, dtype=torch.float64, requires_grad=True)
vals, vecs = torch.linalg.eigh(M @ M.T)
crit = vals[-1] + vecs[:, -2:].pow(4).sum()
crit.backward()
record.append(M.grad.numpy())
"""

SPECTRAL_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "    objective.backward()\n    opt.step()",
        "    grads = objective.backward()\n    opt.step(grads)",
    ),
    (
        "    smoothness.backward()\n    opt.step()",
        "    grads = smoothness.backward()\n    opt.step(grads)",
    ),
    (
        "crit.backward()\nrecord.append(M.grad.numpy())",
        "grads = crit.backward()\nrecord.append(M.grad(grads).numpy())",
    ),
]


def test_laplacian_eigenmaps_eigengap_and_spectralnet_trace_loss_as_torch(capsys):
    rng = np.random.default_rng(27701)
    centres = np.array([[0.0, 0.0, 0.0], [2.5, 0.0, 0.5], [0.0, 2.5, -0.5]])
    pts = np.concatenate([c + 0.4 * rng.standard_normal((5, 3)) for c in centres])
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SPECTRAL_SOURCE, SPECTRAL_STEPS, capsys, 27701, pts_np=pts,
        m_np=rng.standard_normal((4, 4)), initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-6, atol=1e-8)
    assert our_log == their_log


WMSE_SOURCE = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.functional import conv2d as conv1x1


class BatchWhitener(nn.Module):
    # maps a batch of vectors to zero mean and identity covariance with the inverse Cholesky
    # factor of its covariance, applied as a 1x1 convolution
    def __init__(self, dim, momentum=0.05, shrink=0.0, keep_stats=True):
        super().__init__()
        self.dim, self.momentum, self.shrink, self.keep_stats = dim, momentum, shrink, keep_stats
        if keep_stats:
            self.register_buffer("running_mean", torch.zeros([1, dim, 1, 1]))
            self.register_buffer("running_cov", torch.eye(dim))

    def forward(self, rows):
        x = rows.unsqueeze(2).unsqueeze(3)  # (n, dim, 1, 1): an image batch for the conv
        use_running = self.keep_stats and not self.training
        mean = x.mean(0).view(self.dim, -1).mean(-1).view(1, -1, 1, 1)
        if use_running:
            mean = self.running_mean
        centred = x - mean
        flat = centred.permute(1, 0, 2, 3).contiguous().view(self.dim, -1)
        cov = torch.mm(flat, flat.permute(1, 0)) / (flat.shape[-1] - 1)
        eye = torch.eye(self.dim).type(cov.type())
        if use_running:
            cov = self.running_cov
        cov = (1 - self.shrink) * cov + self.shrink * eye
        inv_chol = torch.triangular_solve(eye, torch.cholesky(cov), upper=False)[0]
        out = conv1x1(centred, inv_chol.contiguous().view(self.dim, self.dim, 1, 1))
        if self.keep_stats and self.training:
            keep = 1 - self.momentum
            new_mean, new_cov = self.momentum * mean.detach(), self.momentum * cov.detach()
            self.running_mean = torch.add(new_mean, keep * self.running_mean, out=self.running_mean)
            self.running_cov = torch.add(new_cov, keep * self.running_cov, out=self.running_cov)
        return out.squeeze(2).squeeze(2)


def cosine_mse(a, b):
    return 2 - 2 * (F.normalize(a) * F.normalize(b)).sum(dim=-1).mean()


class TwoViewWhitened(nn.Module):
    def __init__(self, out_dim=3, chunk=10):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(5, 10), nn.ReLU(), nn.Linear(10, 6))
        self.projector = nn.Sequential(
            nn.Linear(6, 10), nn.BatchNorm1d(10), nn.ReLU(), nn.Linear(10, out_dim)
        )
        self.whiten = BatchWhitener(out_dim, keep_stats=False)
        self.chunk = chunk

    def forward(self, views):
        n = len(views[0])
        emb = self.projector(torch.cat([self.encoder(v) for v in views]))
        white = torch.empty_like(emb)
        # whiten each view in random chunks of rows
        for rows in torch.randperm(n).view(-1, self.chunk):
            for v in range(len(views)):
                white[rows + v * n] = self.whiten(emb[rows + v * n])
        return cosine_mse(white[:n], white[n:])


net = TwoViewWhitened()
initialize(net)
opt = torch.optim.Adam(net.parameters(), lr=5e-3)
for first, second in view_pairs:
    opt.zero_grad()
    pair = [torch.tensor(first, dtype=torch.float32), torch.tensor(second, dtype=torch.float32)]
    loss = net(pair)
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append({name: t.detach().numpy() for name, t in net.state_dict().items()})

whitener = BatchWhitener(3, momentum=0.2)
batch = torch.tensor(batch_np, dtype=torch.float32)
white = whitener(batch)
record.append((white.T @ white / (white.shape[0] - 1)).detach().numpy())
record.append(whitener.running_cov.numpy())
whitener.eval()
record.append(whitener(batch[:5]).detach().numpy())
"""

WMSE_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_wmse_whitening_by_cholesky_and_triangular_solve_trains_as_torch(capsys):
    """``torch.randperm`` draws from each library's own generator: with ``chunk == n`` there
    is one chunk, all the rows, whose whitening (mean and covariance) is the same in any
    order, so the whitened batch is the same in both runs."""
    rng = np.random.default_rng(27702)
    clean = rng.standard_normal((2, 10, 5))
    view_pairs = [
        (c + 0.1 * rng.standard_normal(c.shape), c + 0.1 * rng.standard_normal(c.shape))
        for c in clean
    ]
    (theirs, ours), _ = runs_with_draws(
        WMSE_SOURCE, WMSE_STEPS, capsys, 27702, view_pairs=view_pairs,
        batch_np=rng.standard_normal((20, 3)) @ rng.standard_normal((3, 3)),
        initialize=initializer(),
    )  # fmt: skip
    # the biases before the projector's BatchNorm1d and before the whitening (which centres)
    # have no true gradient: Adam follows the rounding noise there (the running mean too)
    noise = ("encoder.2.bias", "projector.0.bias", "projector.1.running_mean", "projector.3.bias")
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=noise)
    np.testing.assert_allclose(theirs[-3], np.eye(3), atol=1e-4)  # whitened: unit covariance
