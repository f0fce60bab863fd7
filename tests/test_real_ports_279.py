"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of code that differentiates through determinants, inverses and matrix norms, run under
torch and, ported, under retrograd from the same weights: a determinantal point process fitted
by its log-likelihood (``logdet(L[Y][:, Y]) - logdet(L + I)``, ``L = V V^T``), a few-shot
ridge-regression head in the manner of R2-D2 (``W = X^T (X X^T + lambda I)^{-1} Y`` by
``torch.inverse``, the encoder trained through it episode by episode), an extreme learning
machine whose readout is ``torch.linalg.pinv`` with the hidden layer trained through it, a
full-matrix linear flow with its ``torch.slogdet`` log-Jacobian, and orthogonality, nuclear
and spectral-norm regularizers.

What it exercises: gradients of ``torch.logdet``, ``torch.det``, ``torch.slogdet`` (its
``(sign, logabsdet)`` pair), ``torch.inverse``, ``torch.linalg.inv_ex`` (``(inverse, info)``),
``torch.linalg.pinv(hermitian=False)``, ``torch.linalg.matrix_norm`` (``'nuc'``, ``2``,
``-2``), ``torch.norm(p='fro')``, ``torch.linalg.cond``; selection ``L[Y][:, Y]`` by an index
list; ``F.one_hot(...).float()``; a scalar ``nn.Parameter(torch.tensor(0.0))``; a Gaussian
log-density written out with ``math.log``.

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

LINALG_SOURCE = """
import torch
from torch import nn
from torch.nn import functional as F

f64 = torch.float64

# a DPP over 5 items with a rank-2 kernel, fitted to observed subsets
feat = nn.Parameter(torch.tensor(feat_np, dtype=f64))
opt = torch.optim.Adam([feat], lr=0.05)
eye5 = torch.eye(5, dtype=f64)
for it in range(6):
    opt.zero_grad()
    kernel = feat @ feat.T + 1e-3 * eye5
    log_z = torch.logdet(kernel + eye5)
    nll = -sum(torch.logdet(kernel[s][:, s]) - log_z for s in observed) / len(observed)
    nll.backward()
    opt.step()
    record.append(nll.item())
record.append(torch.det(feat @ feat.T + eye5).item())


class RidgeHead(nn.Module):
    # closed-form ridge regression on the support set, applied to the queries
    def __init__(self):
        super().__init__()
        self.log_lam = nn.Parameter(torch.tensor(0.0))
        self.temp = nn.Parameter(torch.tensor(1.0))

    def forward(self, sup, sup_onehot, qry):
        gram = sup @ sup.t() + self.log_lam.exp() * torch.eye(sup.shape[0])
        w = sup.t() @ torch.inverse(gram) @ sup_onehot
        return self.temp * (qry @ w)


enc = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 8))
initialize(enc)
ridge = RidgeHead()
opt = torch.optim.Adam([*enc.parameters(), *ridge.parameters()], lr=0.01)
for ep, (sx, sy, qx, qy) in enumerate(episodes):
    sy, qy = torch.tensor(sy), torch.tensor(qy)
    logits = ridge(enc(torch.tensor(sx, dtype=torch.float32)), F.one_hot(sy, 3).float(),
                   enc(torch.tensor(qx, dtype=torch.float32)))
    loss = F.cross_entropy(logits, qy)
    opt.zero_grad()
    loss.backward()
    opt.step()
    hits = (logits.argmax(1) == qy).float().mean()
    print(f"episode {ep} loss={loss.item():.4f} acc={hits.item():.2f}")
record.append({name: t.detach().numpy() for name, t in ridge.state_dict().items()})

# extreme learning machine: least-squares readout, hidden layer tuned through the pseudo-inverse
proj = nn.Linear(3, 4)
initialize(proj)
opt = torch.optim.SGD(proj.parameters(), lr=0.1)
xs, ts = torch.tensor(xs_np, dtype=torch.float32), torch.tensor(ts_np, dtype=torch.float32)
for it in range(4):
    act = torch.sigmoid(proj(xs))
    readout = torch.linalg.pinv(act, hermitian=False) @ ts
    loss = F.mse_loss(act @ readout, ts) + 1e-3 * (readout**2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(proj.weight.detach().numpy())


class AffineFlow(nn.Module):
    # z = A x + c under a standard normal base: log p(x) = log N(z) + log|det A|
    def __init__(self, dim):
        super().__init__()
        self.A = nn.Parameter(torch.eye(dim, dtype=f64) + 0.1 * torch.tensor(a_np, dtype=f64))
        self.c = nn.Parameter(torch.zeros(dim, dtype=f64))

    def log_prob(self, x):
        z = x @ self.A.T + self.c
        _, log_jac = torch.slogdet(self.A)
        log_base = -0.5 * (z * z).sum(-1) - 0.5 * z.shape[-1] * math.log(2 * math.pi)
        return log_base + log_jac

    def invert(self, z):
        A_inv, info = torch.linalg.inv_ex(self.A)
        return (z - self.c) @ A_inv.T


flow = AffineFlow(2)
opt = torch.optim.Adam(flow.parameters(), lr=0.05)
samples = torch.tensor(samples_np, dtype=f64)
for it in range(6):
    opt.zero_grad()
    loss = -flow.log_prob(samples).mean()
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(flow.invert(samples @ flow.A.T + flow.c).detach().numpy())
record.append(flow.A.detach().numpy())

clf = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3))
initialize(clf)
opt = torch.optim.SGD(clf.parameters(), lr=0.05)
xc, yc = torch.tensor(xc_np, dtype=torch.float32), torch.tensor(yc_np)
for it in range(4):
    opt.zero_grad()
    first, last = clf[0].weight, clf[2].weight
    off_orth = torch.norm(first.T @ first - torch.eye(4), p="fro") ** 2
    spread = torch.linalg.matrix_norm(first, 2) - torch.linalg.matrix_norm(first, -2)
    penalty = off_orth + torch.linalg.matrix_norm(last, "nuc") + spread
    loss = F.cross_entropy(clf(xc), yc) + 0.01 * penalty
    loss.backward()
    opt.step()
    record.append([loss.item(), torch.linalg.cond(first.detach()).item()])
record.append({name: t.detach().numpy() for name, t in clf.state_dict().items()})
"""

LINALG_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    ("    nll.backward()\n    opt.step()", "    grads = nll.backward()\n    opt.step(grads)"),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_dpp_r2d2_elm_linear_flow_and_norm_regularizers_as_torch(capsys):
    rng = np.random.default_rng(27901)
    means = 2 * rng.standard_normal((3, 6))

    def episode():
        sy, qy = np.repeat(np.arange(3), 2), np.arange(3).repeat(2)[::-1].copy()
        return (
            means[sy] + rng.standard_normal((6, 6)),
            sy,
            means[qy] + rng.standard_normal((6, 6)),
            qy,
        )

    (theirs, ours), (their_log, our_log) = runs_with_draws(
        LINALG_SOURCE, LINALG_STEPS, capsys, 27901,
        feat_np=rng.standard_normal((5, 2)), observed=[[0, 2], [1, 4], [3], [0, 3]],
        episodes=[episode() for _ in range(3)], xs_np=rng.standard_normal((12, 3)),
        ts_np=rng.standard_normal((12, 2)), a_np=rng.standard_normal((2, 2)),
        samples_np=rng.standard_normal((20, 2)) @ np.array([[1.5, 0.0], [0.6, 0.5]]),
        xc_np=rng.standard_normal((8, 4)), yc_np=rng.integers(0, 3, 8), initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
    assert our_log == their_log
