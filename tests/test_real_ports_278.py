# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
entropic optimal transport in the log domain as dfdazac/wassdistance writes it
(``SinkhornDistance``: the batched cost matrix ``_cost_matrix``, ``mu``/``nu`` by
``torch.empty(...).fill_(1.0 / n).squeeze()``, the ``u``/``v`` updates through
``torch.logsumexp(self.M(C, u, v), dim=-1)``, the ``err.item() < thresh`` stop, the transport
plan ``pi = torch.exp(self.M(C, U, V))`` and the ``reduction``), used as a loss to move a point
cloud by Adam (a Wasserstein gradient flow) and to train a small generator, plus the
hand-written ``log_sum_exp``/``log_sinkhorn`` variant with ``log_v`` only, against torch's run of
the same code on the same clouds from the same weights.

What it exercises: ``x.unsqueeze(-2) - y.unsqueeze(-3)`` then ``torch.sum(torch.abs(.) ** p, -1)``;
``torch.logsumexp(..., dim=-1)`` of a ``.transpose(-2, -1)`` and its gradient; a Python loop
with a data-dependent ``break``; ``(u - u1).abs().sum(-1).mean()``; ``torch.log(mu + 1e-8)``;
batched clouds ``(N, P, D)``; ``u.max(dim=dim, keepdim=True)`` unpacked as ``u_max, __``;
``torch.zeros(M.size()[1]).to(M.device)``.

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


SINKHORN_SOURCE = """
import torch
import torch.nn as nn


class SinkhornDistance(nn.Module):
    def __init__(self, eps, max_iter, reduction='none'):
        super(SinkhornDistance, self).__init__()
        self.eps = eps
        self.max_iter = max_iter
        self.reduction = reduction

    def forward(self, x, y):
        # The Sinkhorn algorithm takes as input three variables :
        C = self._cost_matrix(x, y)  # Wasserstein cost function
        x_points = x.shape[-2]
        y_points = y.shape[-2]
        if x.dim() == 2:
            batch_size = 1
        else:
            batch_size = x.shape[0]

        # both marginals are fixed with equal weights
        mu = torch.empty(batch_size, x_points, dtype=torch.float,
                         requires_grad=False).fill_(1.0 / x_points).squeeze()
        nu = torch.empty(batch_size, y_points, dtype=torch.float,
                         requires_grad=False).fill_(1.0 / y_points).squeeze()

        u = torch.zeros_like(mu)
        v = torch.zeros_like(nu)
        # To check if algorithm terminates because of threshold
        # or max iterations reached
        actual_nits = 0
        # Stopping criterion
        thresh = 1e-1

        # Sinkhorn iterations
        for i in range(self.max_iter):
            u1 = u  # useful to check the update
            u = self.eps * (torch.log(mu+1e-8) - torch.logsumexp(self.M(C, u, v), dim=-1)) + u
            v = self.eps * (torch.log(nu+1e-8) - torch.logsumexp(self.M(C, u, v).transpose(-2, -1), dim=-1)) + v
            err = (u - u1).abs().sum(-1).mean()

            actual_nits += 1
            if err.item() < thresh:
                break

        U, V = u, v
        # Transport plan pi = diag(a)*K*diag(b)
        pi = torch.exp(self.M(C, U, V))
        # Sinkhorn distance
        cost = torch.sum(pi * C, dim=(-2, -1))
        self.actual_nits = actual_nits

        if self.reduction == 'mean':
            cost = cost.mean()
        elif self.reduction == 'sum':
            cost = cost.sum()

        return cost, pi, C

    def M(self, C, u, v):
        "Modified cost for logarithmic updates"
        "$M_{ij} = (-c_{ij} + u_i + v_j) / \\\\epsilon$"
        return (-C + u.unsqueeze(-1) + v.unsqueeze(-2)) / self.eps

    @staticmethod
    def _cost_matrix(x, y, p=2):
        "Returns the matrix of $|x_i-y_j|^p$."
        x_col = x.unsqueeze(-2)
        y_lin = y.unsqueeze(-3)
        C = torch.sum((torch.abs(x_col - y_lin)) ** p, -1)
        return C

    @staticmethod
    def ave(u, u1, tau):
        "Barycenter subroutine, used by kinetic acceleration through extrapolation."
        return tau * u + (1 - tau) * u1


def log_sum_exp(u: torch.Tensor, dim: int):
    # Reduce log sum exp along axis
    u_max, __ = u.max(dim=dim, keepdim=True)
    log_sum_exp_u = torch.log(torch.exp(u - u_max).sum(dim)) + u_max.sum(dim)
    return log_sum_exp_u


def log_sinkhorn(M: torch.Tensor, reg: float, num_iters: int):
    # Initialize dual variable v (u is implicitly defined in the loop)
    log_v = torch.zeros(M.size()[1]).to(M.device)  # ==torch.log(torch.ones(m.size()[1]))

    # Exponentiate the pairwise distance matrix
    log_K = -M / reg

    # Main loop
    for i in range(num_iters):
        # Match r marginals
        log_u = - log_sum_exp(log_K + log_v[None, :], 1)

        # Match c marginals
        log_v = - log_sum_exp(log_u[:, None] + log_K, 0)

    # Compute optimal plan, cost, return everything
    log_P = log_u[:, None] + log_K + log_v[None, :]
    return log_P


sinkhorn = SinkhornDistance(eps=0.1, max_iter=100, reduction=None)
x = torch.tensor(cloud_a, dtype=torch.float)
y = torch.tensor(cloud_b, dtype=torch.float)
dist, P, C = sinkhorn(x, y)
print("Sinkhorn distance: {:.3f}".format(dist.item()))
record.append(dist.item())
record.append(P.numpy())
record.append(sinkhorn.actual_nits)

# batched clouds
batched = SinkhornDistance(eps=0.1, max_iter=100, reduction='mean')
xb = torch.tensor(batch_a, dtype=torch.float)
yb = torch.tensor(batch_b, dtype=torch.float)
dist, P, C = batched(xb, yb)
record.append(dist.item())
record.append(P.numpy())

# a Wasserstein gradient flow: the source cloud moved by Adam on the Sinkhorn cost
sinkhorn = SinkhornDistance(eps=0.05, max_iter=50, reduction=None)
source = torch.tensor(cloud_a, dtype=torch.float, requires_grad=True)
optimizer = torch.optim.Adam([source], lr=0.05)
for step in range(10):
    optimizer.zero_grad()
    loss, _, _ = sinkhorn(source, y)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(sinkhorn.actual_nits)
record.append(source.detach().numpy())

# a generator trained on the Sinkhorn loss
generator = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 2))
initialize(generator)
optimizer = torch.optim.Adam(generator.parameters(), lr=1e-2)
sinkhorn = SinkhornDistance(eps=0.1, max_iter=30, reduction='mean')
z = torch.tensor(noise, dtype=torch.float)
for step in range(8):
    optimizer.zero_grad()
    loss, _, _ = sinkhorn(generator(z).unsqueeze(0), y.unsqueeze(0))
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append({k: v.detach().numpy() for k, v in generator.state_dict().items()})

M = SinkhornDistance._cost_matrix(x, y)
log_P = log_sinkhorn(M, 0.1, 50)
record.append(log_P.exp().sum(0).numpy())
record.append((log_P.exp() * M).sum().item())
"""

SINKHORN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
]


def test_wassdistance_sinkhorn_flow_and_generator_as_torch(capsys):
    rng = np.random.default_rng(27801)
    cloud_a = rng.standard_normal((12, 2))
    cloud_b = rng.standard_normal((10, 2)) * 0.5 + np.array([1.5, -0.5])
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SINKHORN_SOURCE, SINKHORN_STEPS, capsys, 27801, cloud_a=cloud_a, cloud_b=cloud_b,
        batch_a=rng.standard_normal((3, 6, 2)), batch_b=rng.standard_normal((3, 5, 2)) + 1.0,
        noise=rng.standard_normal((16, 2)), initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
    assert our_log == their_log
    assert theirs[23] < theirs[5]  # the flow lowered the transport cost
