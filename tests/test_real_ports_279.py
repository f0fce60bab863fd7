# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
programs that differentiate through determinants, inverses and matrix norms: a determinantal
point process fitted by its log-likelihood (``torch.logdet(L[Y][:, Y]) - torch.logdet(L + I)``
with ``L = V V^T``, as the DPP-learning tutorials write it), R2-D2's differentiable ridge-
regression head (Bertinetto et al.: ``W = X^T (X X^T + lambda I)^{-1} Y`` by ``torch.inverse``,
the base learner trained through it, episode by episode), an extreme-learning-machine readout
by ``torch.linalg.pinv`` with the hidden layer trained through it, a full-matrix linear flow
with its ``torch.slogdet`` log-Jacobian, and the orthogonality / nuclear / spectral-norm
regularizers of the regularization tutorials (``torch.norm(W.T @ W - I, p='fro')``,
``torch.linalg.matrix_norm(W, 'nuc')``, ``torch.linalg.matrix_norm(W, 2)``,
``torch.linalg.cond``), against torch's run of the same code from the same weights.

What it exercises: gradients of ``torch.logdet``, ``torch.det``, ``torch.slogdet`` (its
``(sign, logabsdet)`` pair), ``torch.inverse``, ``torch.linalg.inv_ex``, ``torch.linalg.pinv``
(``rcond``/``hermitian=False``), ``torch.linalg.matrix_norm`` (``'fro'``, ``'nuc'``, ``2``,
``-2``), ``torch.norm(p='fro')``, ``torch.linalg.cond``; boolean selection ``L[Y][:, Y]`` by an
index list; a ``Distribution``-free Gaussian log-density.

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


DETERMINANTS_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


# -- a DPP fitted by maximum likelihood
N, K = 6, 3
V = nn.Parameter(torch.tensor(v0, dtype=torch.float64))
optimizer = torch.optim.Adam([V], lr=0.05)
for epoch in range(15):
    optimizer.zero_grad()
    L = V @ V.T + 1e-3 * torch.eye(N, dtype=torch.float64)
    log_normalizer = torch.logdet(L + torch.eye(N, dtype=torch.float64))
    nll = 0
    for Y in subsets:
        nll = nll - (torch.logdet(L[Y][:, Y]) - log_normalizer)
    nll = nll / len(subsets)
    nll.backward()
    optimizer.step()
    record.append(nll.item())
record.append(V.detach().numpy())
record.append(torch.det(V @ V.T + torch.eye(N, dtype=torch.float64)).item())


# -- R2-D2's ridge-regression head
class R2D2Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.lambda_ = nn.Parameter(torch.tensor(0.0))
        self.scale = nn.Parameter(torch.tensor(1.0))

    def forward(self, support, support_y_onehot, query):
        n = support.shape[0]
        lam = self.lambda_.exp()
        W = support.t() @ torch.inverse(support @ support.t() + lam * torch.eye(n)) @ support_y_onehot
        return self.scale * query @ W


encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 12))
head = R2D2Head()
initialize(encoder)
optimizer = torch.optim.Adam(list(encoder.parameters()) + list(head.parameters()), lr=1e-2)
for episode, (sx, sy, qx, qy) in enumerate(episodes):
    support = encoder(torch.tensor(sx, dtype=torch.float32))
    query = encoder(torch.tensor(qx, dtype=torch.float32))
    onehot = F.one_hot(torch.tensor(sy), 3).float()
    logits = head(support, onehot, query)
    loss = F.cross_entropy(logits, torch.tensor(qy))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    acc = (logits.argmax(1) == torch.tensor(qy)).float().mean()
    record.append(loss.item())
    print(f"episode {episode}: loss {loss.item():.4f} acc {acc.item():.3f}")
record.append({k: v.detach().numpy() for k, v in head.state_dict().items()})


# -- an ELM readout by pinv, the hidden layer trained through it
hidden = nn.Linear(4, 5)
initialize(hidden)
optimizer = torch.optim.SGD(hidden.parameters(), lr=0.05)
X = torch.tensor(elm_x, dtype=torch.float32)
T = torch.tensor(elm_t, dtype=torch.float32)
for step in range(6):
    H = torch.sigmoid(hidden(X))
    beta = torch.linalg.pinv(H) @ T
    loss = F.mse_loss(H @ beta, T) + 1e-3 * beta.pow(2).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in hidden.state_dict().items()})


# -- a full-matrix linear flow: log p(x) = log N(W x + b) + log|det W|
class LinearFlow(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.W = nn.Parameter(torch.eye(d, dtype=torch.float64) + 0.1 * torch.tensor(w0, dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros(d, dtype=torch.float64))

    def forward(self, x):
        z = x @ self.W.T + self.b
        sign, logabsdet = torch.slogdet(self.W)
        log_pz = -0.5 * (z ** 2).sum(-1) - 0.5 * z.shape[-1] * math.log(2 * math.pi)
        return log_pz + logabsdet

    def inverse(self, z):
        W_inv, info = torch.linalg.inv_ex(self.W)
        return (z - self.b) @ W_inv.T


flow = LinearFlow(3)
optimizer = torch.optim.Adam(flow.parameters(), lr=0.05)
data = torch.tensor(flow_x, dtype=torch.float64)
for step in range(15):
    optimizer.zero_grad()
    loss = -flow(data).mean()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(flow.inverse(flow(data)[:, None] * 0 + data @ flow.W.T + flow.b).detach().numpy())
record.append({k: v.detach().numpy() for k, v in flow.state_dict().items()})


# -- matrix-norm regularizers
net = nn.Sequential(nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 3))
initialize(net)
optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
X = torch.tensor(reg_x, dtype=torch.float32)
y = torch.tensor(reg_y)
for step in range(8):
    optimizer.zero_grad()
    W1, W2 = net[0].weight, net[2].weight
    orth = torch.norm(W1.T @ W1 - torch.eye(5), p='fro') ** 2
    nuclear = torch.linalg.matrix_norm(W2, 'nuc')
    spectral = torch.linalg.matrix_norm(W1, 2) - torch.linalg.matrix_norm(W1, -2)
    loss = F.cross_entropy(net(X), y) + 1e-2 * orth + 1e-2 * nuclear + 1e-2 * spectral
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(torch.linalg.cond(W1.detach()).item())
record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
"""

DETERMINANTS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    (
        "    nll.backward()\n    optimizer.step()",
        "    grads = nll.backward()\n    optimizer.step(grads)",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_dpp_r2d2_elm_linear_flow_and_norm_regularizers_as_torch(capsys):
    rng = np.random.default_rng(27901)
    centres = rng.standard_normal((3, 8)) * 2

    def episode():
        sy, qy = np.repeat(np.arange(3), 2), np.repeat(np.arange(3), 3)
        return (
            centres[sy] + rng.standard_normal((6, 8)),
            sy,
            centres[qy] + rng.standard_normal((9, 8)),
            qy,
        )

    (theirs, ours), (their_log, our_log) = runs_with_draws(
        DETERMINANTS_SOURCE, DETERMINANTS_STEPS, capsys, 27901,
        v0=rng.standard_normal((6, 3)), subsets=[[0, 2], [1, 3, 5], [4], [0, 5], [2, 3, 4]],
        episodes=[episode() for _ in range(6)], elm_x=rng.standard_normal((20, 4)),
        elm_t=rng.standard_normal((20, 2)), w0=rng.standard_normal((3, 3)),
        flow_x=rng.standard_normal((30, 3)) @ np.array([[2.0, 0, 0], [0.5, 1.0, 0], [0, 0.3, 0.5]]),
        reg_x=rng.standard_normal((10, 5)), reg_y=rng.integers(0, 3, 10), initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
    assert our_log == their_log
