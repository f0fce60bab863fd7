"""Real ports, round 77 (the harness: ``tests/real_ports.py``): sparse recovery by unrolled
optimisation (compressed sensing), a program written here in the style of the public LISTA,
LISTA-CPSS and ALISTA code (learned ISTA networks recovering sparse codes from few noisy
measurements, against ISTA and FISTA), run under torch and, ported, under retrograd from the
same weights and draws, every record compared; once as Gregor and LeCun's LISTA (shared
weights), once as LISTA-CPSS (coupled weights per layer with support selection).

It reaches:

- the problem: a Gaussian sensing matrix with unit columns by ``torch.linalg.norm(A, dim=0,
  keepdim=True)``, sparse codes ``torch.randn(...) * (torch.rand(...) < p)`` (a float times a
  bool mask), measurements at a given SNR (``10 ** (snr_db / 10)``, ``torch.sqrt``);
- ISTA and FISTA under ``@torch.no_grad()`` in float64 (``.double()``): the Lipschitz constant
  ``torch.linalg.matrix_norm(A, ord=2) ** 2``, ``F.softshrink(..., lambd=float(...))``, the
  momentum sequence, ``zeros``/``clone``;
- LISTA: ``nn.Linear(bias=False)`` layers set under ``torch.no_grad()`` by
  ``weight.copy_(A.T / L)`` and ``torch.eye(n) - A.T @ A / L``, ``L`` from
  ``torch.linalg.svdvals``, per-layer thresholds ``nn.Parameter(torch.full(...))`` indexed by
  layer, the soft threshold ``torch.sign(x) * torch.clamp(torch.abs(x) - theta, min=0.0)``,
  thresholds kept non-negative by ``clamp_(min=0.0)`` in place under ``no_grad``;
- LISTA-CPSS: a registered buffer, ``nn.ParameterList`` of matrices and of 0-d thresholds
  (``torch.tensor(float)``), zipped in the forward, ``torch.einsum("mn,bn->bm", ...)``, support
  selection by ``v.abs().topk(k, dim=1)`` and ``torch.zeros_like(v, dtype=torch.bool).scatter_(1,
  index, True)``, ``&=`` with a comparison, ``torch.where(trusted, v, soft(v))``;
- training: per-layer losses ``F.mse_loss(reduction="sum")`` normalised and ``torch.stack``ed,
  weighted by ``torch.linspace``, minibatches by ``torch.arange(...) % n``, ``Adam`` with
  ``MultiStepLR``; the checkpoint through ``torch.save`` of ``{"arch", "state_dict",
  "n_layers"}`` to a buffer, ``torch.load``, a class chosen from it, ``load_state_dict``;
- evaluation under ``torch.no_grad()``: NMSE in dB by ``torch.log10``, support F1 by
  ``torch.logical_and`` and ``clamp(min=1)``, the codes as a sparse COO tensor by
  ``to_sparse()`` (``_nnz()``, ``coalesce().indices()``, ``torch.sparse.mm``),
  ``torch.count_nonzero`` (whole and ``dim=1``), the mutual coherence by ``torch.triu(...,
  diagonal=1).max()``, ``torch.linalg.cond``; the oracle least squares on each true support by
  ``nonzero().squeeze(1)`` column selection, ``torch.linalg.lstsq(...).solution`` and an
  integer-index assignment ``oracle[i, cols] = ...``; the ``torch.linalg.pinv`` estimate.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

from itertools import pairwise

import pytest

from real_ports import (
    assert_records_agree,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

LISTA_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def soft_threshold(x, theta):
    return torch.sign(x) * torch.clamp(torch.abs(x) - theta, min=0.0)


def make_problem(m, n):
    A = torch.randn(m, n) / math.sqrt(m)
    A = A / torch.linalg.norm(A, dim=0, keepdim=True)
    return A


def sample_codes(batch, n, p=0.15, snr_db=30.0):
    support = torch.rand(batch, n) < p
    x = torch.randn(batch, n) * support
    return x, support


def measure(A, x, snr_db=30.0):
    y = x @ A.T
    signal_power = y.pow(2).mean(dim=1, keepdim=True)
    noise_std = torch.sqrt(signal_power / 10 ** (snr_db / 10))
    return y + noise_std * torch.randn(y.shape)


@torch.no_grad()
def ista(A, y, lam, n_iter=50, fast=False):
    L = torch.linalg.matrix_norm(A, ord=2) ** 2
    x = torch.zeros(y.shape[0], A.shape[1], dtype=y.dtype)
    z, t = x.clone(), 1.0
    for _ in range(n_iter):
        grad = (z @ A.T - y) @ A
        x_new = F.softshrink(z - grad / L, lambd=float(lam / L))
        if fast:
            t_new = (1 + math.sqrt(1 + 4 * t * t)) / 2
            z = x_new + ((t - 1) / t_new) * (x_new - x)
            t = t_new
        else:
            z = x_new
        x = x_new
    return x


class LISTA(nn.Module):
    # Gregor & LeCun: x_{t+1} = eta(W_e y + S x_t, theta_t), W_e and S shared over the layers
    def __init__(self, A, n_layers, lam=0.1):
        super().__init__()
        m, n = A.shape
        self.n_layers = n_layers
        L = float(torch.linalg.svdvals(A)[0] ** 2)
        self.We = nn.Linear(m, n, bias=False)
        self.S = nn.Linear(n, n, bias=False)
        self.theta = nn.Parameter(torch.full((n_layers,), lam / L))
        with torch.no_grad():
            self.We.weight.copy_(A.T / L)
            self.S.weight.copy_(torch.eye(n) - A.T @ A / L)

    def forward(self, y):
        b = self.We(y)
        x = soft_threshold(b, self.theta[0])
        outputs = [x]
        for t in range(1, self.n_layers):
            x = soft_threshold(b + self.S(x), self.theta[t])
            outputs.append(x)
        return outputs


class LISTA_CPSS(nn.Module):
    # coupled weights x_{t+1} = eta_ss(x_t + W_t^T (y - A x_t)), with support selection
    def __init__(self, A, n_layers, lam=0.1, p_ss=5.0, max_p=30.0):
        super().__init__()
        m, n = A.shape
        self.register_buffer("A", A.clone())
        L = float(torch.linalg.svdvals(A)[0] ** 2)
        self.W = nn.ParameterList([nn.Parameter(A.clone() / L) for _ in range(n_layers)])
        self.theta = nn.ParameterList([nn.Parameter(torch.tensor(lam / L))
                                       for _ in range(n_layers)])
        self.percent = [min(p_ss * (t + 1), max_p) for t in range(n_layers)]

    def shrink_ss(self, v, theta, percent):
        k = int(v.shape[1] * percent / 100)
        if k == 0:
            return soft_threshold(v, theta)
        _, index = v.abs().topk(k, dim=1)
        trusted = torch.zeros_like(v, dtype=torch.bool).scatter_(1, index, True)
        trusted &= v.abs() > theta
        return torch.where(trusted, v, soft_threshold(v, theta))

    def forward(self, y):
        x = torch.zeros(y.shape[0], self.A.shape[1], dtype=y.dtype)
        outputs = []
        for W, theta, percent in zip(self.W, self.theta, self.percent):
            residual = y - torch.einsum("mn,bn->bm", self.A, x)
            x = self.shrink_ss(x + residual @ W, theta, percent)
            outputs.append(x)
        return outputs


def nmse_db(x_hat, x):
    err = (x_hat - x).pow(2).sum(dim=1)
    return 10 * torch.log10(err.sum() / x.pow(2).sum())


def support_f1(x_hat, support, tol=1e-2):
    found = x_hat.abs() > tol
    tp = torch.logical_and(found, support).sum().float()
    precision = tp / found.sum().clamp(min=1)
    recall = tp / support.sum().clamp(min=1)
    return (2 * precision * recall / (precision + recall).clamp(min=1e-12)).item()


m, n, n_layers = 8, 16, 5
A = make_problem(m, n)
x_train, s_train = sample_codes(64, n)
y_train = measure(A, x_train)
x_test, s_test = sample_codes(32, n)
y_test = measure(A, x_test)
record.append(A.numpy().copy())

model = LISTA(A, n_layers) if ARCH == "lista" else LISTA_CPSS(A, n_layers)
record.append(params_of(model))
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[4, 7], gamma=0.3)
layer_weights = torch.linspace(0.2, 1.0, n_layers)

for step in range(8):
    idx = torch.arange(step * 16, step * 16 + 16) % len(x_train)
    x, y = x_train[idx], y_train[idx]
    outputs = model(y)
    per_layer = torch.stack([F.mse_loss(o, x, reduction="sum") / x.pow(2).sum() for o in outputs])
    loss = (layer_weights * per_layer).sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if ARCH == "lista":
        with torch.no_grad():
            model.theta.clamp_(min=0.0)
    else:
        with torch.no_grad():
            for theta in model.theta:
                theta.clamp_(min=0.0)
    record.append([loss.item()] + per_layer.tolist() + [scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print(f"step {step} loss {loss.item():.4f} last {per_layer[-1].item():.4f}")

stream = io.BytesIO()
torch.save({"arch": ARCH, "state_dict": model.state_dict(), "n_layers": n_layers}, stream)
stream.seek(0)
checkpoint = torch.load(stream)
restored = (LISTA if checkpoint["arch"] == "lista" else LISTA_CPSS)(A, checkpoint["n_layers"])
restored.load_state_dict(checkpoint["state_dict"])
restored.eval()
with torch.no_grad():
    x_hat = restored(y_test)
    record.append([nmse_db(o, x_test).item() for o in x_hat])
    record.append(x_hat[-1].numpy().copy())
    record.append([support_f1(x_hat[-1], s_test)])
    codes = x_hat[-1].to_sparse()
    record.append([codes._nnz(), int(torch.count_nonzero(x_hat[-1]))])
    record.append(torch.count_nonzero(x_hat[-1], dim=1).numpy().copy())
    record.append(codes.coalesce().indices().tolist())
    record.append(torch.sparse.mm(codes, A.T).numpy().copy())
    gram = A.T @ A
    record.append([torch.triu(gram.abs(), diagonal=1).max().item(),
                   torch.linalg.matrix_norm(A, ord=2).item(), torch.linalg.cond(A).item()])
    baseline = ista(A.double(), y_test.double(), lam=0.05, n_iter=40)
    fast = ista(A.double(), y_test.double(), lam=0.05, n_iter=40, fast=True)
    record.append([nmse_db(baseline, x_test.double()).item(),
                   nmse_db(fast, x_test.double()).item()])
    record.append(fast.numpy().copy())
    # the oracle: least squares on the true support, sample by sample
    oracle = torch.zeros_like(x_test)
    for i in range(4):
        cols = s_test[i].nonzero().squeeze(1)
        if cols.numel() == 0:
            continue
        sol = torch.linalg.lstsq(A[:, cols], y_test[i].unsqueeze(1)).solution
        oracle[i, cols] = sol.squeeze(1)
    record.append(oracle[:4].numpy().copy())
    pinv = torch.linalg.pinv(A)
    record.append((y_test @ pinv.T).numpy().copy())
    record.append([int(s_test.sum()), len(checkpoint["state_dict"])])
"""

LISTA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("arch", ["lista", "cpss"])
def test_learned_ista_as_torch(capsys, arch):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        LISTA_SOURCE,
        LISTA_STEPS,
        capsys,
        7703,
        params_of=params_of,
        ARCH=arch,
    )
    assert len(theirs) == 2 + 2 * 8 + 13
    assert their_log == our_log and their_log.count("\n") == 8
    layer_nmse = theirs[18]
    assert all(a > b for a, b in pairwise(layer_nmse))  # each layer refines
    ista_nmse, fista_nmse = theirs[26]
    assert fista_nmse < ista_nmse < 0.0
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
