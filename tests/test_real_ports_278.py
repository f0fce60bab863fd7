"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of dfdazac/wassdistance, entropic optimal transport in the log domain used as a loss,
run under torch and, ported, under retrograd on the same clouds from the same weights.

- A Sinkhorn module: the batched cost ``torch.sum(torch.abs(x.unsqueeze(-2) -
  y.unsqueeze(-3)) ** p, -1)`` (a static method, called on the class too), uniform marginals
  by ``torch.empty(b, n, dtype=torch.float, requires_grad=False).fill_(1 / n).squeeze()``,
  dual updates through ``torch.log(mu + 1e-8)`` and ``torch.logsumexp(..., dim=-1)`` of a
  ``.transpose(-2, -1)`` (and its gradient), a Python loop stopped by ``err.item() <
  tol`` with ``err = (u - u_prev).abs().sum(-1).mean()``, the plan ``torch.exp(...)``, the
  cost summed over ``dim=(-2, -1)`` and a ``reduction`` (``None``, ``'mean'``, ``'sum'``), on
  single and batched ``(N, P, D)`` clouds;
- a Wasserstein gradient flow (a leaf cloud ``torch.tensor(..., requires_grad=True)`` moved
  by Adam) and a small generator trained on the Sinkhorn loss;
- a hand-written stabilized log-sum-exp (``m, _ = u.max(dim=dim, keepdim=True)``,
  ``m.sum(dim)``) in a Sinkhorn loop over ``log_v`` only, started from
  ``torch.zeros(M.size()[1]).to(M.device)`` and indexed ``log_v[None, :]``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

OT_SOURCE = """
import torch
from torch import nn


class EntropicOT(nn.Module):
    # log-domain Sinkhorn between uniform point clouds; returns (cost, plan, cost matrix)
    def __init__(self, blur, iters, reduction=None, tol=0.1):
        super().__init__()
        self.blur, self.iters, self.reduction, self.tol = blur, iters, reduction, tol

    @staticmethod
    def pairwise_cost(a, b, p=2):
        return torch.sum(torch.abs(a.unsqueeze(-2) - b.unsqueeze(-3)) ** p, -1)

    @staticmethod
    def uniform(batch, n):
        weights = torch.empty(batch, n, dtype=torch.float, requires_grad=False)
        return weights.fill_(1.0 / n).squeeze()

    def scaled(self, C, f, g):
        # (f_i + g_j - C_ij) / blur: the log of the plan's entries
        return (f.unsqueeze(-1) + g.unsqueeze(-2) - C) / self.blur

    def forward(self, a, b):
        C = self.pairwise_cost(a, b)
        batch = 1 if a.dim() == 2 else a.shape[0]
        n, m = a.shape[-2], b.shape[-2]
        alpha, beta = self.uniform(batch, n), self.uniform(batch, m)
        f, g = torch.zeros_like(alpha), torch.zeros_like(beta)
        self.sweeps = 0
        for _ in range(self.iters):
            f_prev = f
            rows = self.scaled(C, f, g)
            f = f + self.blur * (torch.log(alpha + 1e-8) - torch.logsumexp(rows, dim=-1))
            cols = self.scaled(C, f, g).transpose(-2, -1)
            g = g + self.blur * (torch.log(beta + 1e-8) - torch.logsumexp(cols, dim=-1))
            self.sweeps += 1
            if (f - f_prev).abs().sum(-1).mean().item() < self.tol:
                break
        plan = torch.exp(self.scaled(C, f, g))
        cost = torch.sum(plan * C, dim=(-2, -1))
        if self.reduction == "sum":
            cost = cost.sum()
        elif self.reduction == "mean":
            cost = cost.mean()
        return cost, plan, C


def stable_lse(u, dim):
    top, _ = u.max(dim=dim, keepdim=True)
    return torch.log(torch.exp(u - top).sum(dim)) + top.sum(dim)


def plan_by_columns(M, reg, sweeps):
    log_v = torch.zeros(M.size()[1]).to(M.device)
    log_kernel = -M / reg
    for _ in range(sweeps):
        log_u = -stable_lse(log_kernel + log_v[None, :], 1)
        log_v = -stable_lse(log_u[:, None] + log_kernel, 0)
    return log_u[:, None] + log_kernel + log_v[None, :]


src = torch.tensor(src_np, dtype=torch.float)
dst = torch.tensor(dst_np, dtype=torch.float)
ot = EntropicOT(blur=0.1, iters=80)
cost, plan, _ = ot(src, dst)
print("cost {:.4f} after {} sweeps".format(cost.item(), ot.sweeps))
record.append([cost.item(), ot.sweeps])
record.append(plan.numpy())

for reduction in ("mean", "sum"):
    cost, plan, _ = EntropicOT(0.2, 60, reduction)(torch.tensor(many_src, dtype=torch.float),
                                                   torch.tensor(many_dst, dtype=torch.float))
    record.append(cost.item())
record.append(plan.numpy())

# move the source cloud itself downhill on the transport cost
moving = torch.tensor(src_np, dtype=torch.float, requires_grad=True)
ot = EntropicOT(blur=0.05, iters=20)
opt = torch.optim.Adam([moving], lr=0.1)
flow = []
for it in range(6):
    opt.zero_grad()
    loss, _, _ = ot(moving, dst)
    loss.backward()
    opt.step()
    flow.append(loss.item())
    record.append(ot.sweeps)
record.append(flow)
record.append(moving.detach().numpy())

gen = nn.Sequential(nn.Linear(2, 12), nn.ReLU(), nn.Linear(12, 2))
initialize(gen)
opt = torch.optim.Adam(gen.parameters(), lr=0.02)
ot = EntropicOT(blur=0.1, iters=15, reduction="mean")
latent = torch.tensor(latent_np, dtype=torch.float)
for it in range(5):
    opt.zero_grad()
    loss, _, _ = ot(gen(latent).unsqueeze(0), dst.unsqueeze(0))
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append({name: t.detach().numpy() for name, t in gen.state_dict().items()})

log_plan = plan_by_columns(EntropicOT.pairwise_cost(src, dst), 0.1, 30)
record.append(log_plan.exp().sum(0).numpy())
record.append((log_plan.exp() * EntropicOT.pairwise_cost(src, dst)).sum().item())
"""

OT_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_wassdistance_sinkhorn_flow_and_generator_as_torch(capsys):
    rng = np.random.default_rng(27801)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        OT_SOURCE, OT_STEPS, capsys, 27801, src_np=rng.standard_normal((9, 2)),
        dst_np=0.5 * rng.standard_normal((7, 2)) + np.array([1.5, -0.5]),
        many_src=rng.standard_normal((2, 5, 2)), many_dst=rng.standard_normal((2, 4, 2)) + 1.0,
        latent_np=rng.standard_normal((10, 2)), initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
    assert our_log == their_log
    flow = theirs[11]
    assert flow[-1] < flow[0]  # the flow lowered the transport cost
