"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of geotorch and of the PyTorch parametrizations tutorial, fitting a rotation four ways
and running Riemannian SGD on a Stiefel manifold, under torch and, ported, under retrograd
from the same weights.

- Hand-written parametrizations registered on a ``nn.Linear`` with
  ``parametrize.register_parametrization``: a skew-symmetric map (``A.triu(1)``,
  ``A - A.transpose(-1, -2)``) chained with ``torch.matrix_exp`` (and its gradient), with a
  ``right_inverse`` through ``torch.linalg.solve`` so that assigning ``layer.weight = Q``
  stores an unconstrained original; a QR retraction with the sign fix
  ``Q * torch.diagonal(R, dim1=-2, dim2=-1).sign().unsqueeze(-2)`` (``torch.linalg.qr``'s
  gradient); a Cayley map solving against a registered identity buffer;
- ``torch.nn.utils.parametrizations.orthogonal`` with each ``orthogonal_map``
  (``matrix_exp``, ``cayley``, ``householder``), ``parametrize.is_parametrized``,
  ``parametrize.cached()``, ``layer.parametrizations.weight.original``, SGD with momentum;
- Riemannian SGD by hand under ``torch.no_grad``: the tangent projection
  ``G - X sym(X^T G)``, a QR retraction with ``torch.sign(torch.diag(R))``, ``X.copy_``,
  ``torch.trace``, and the orthogonality error ``torch.linalg.matrix_norm(X.mT @ X - I)``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``; ``X.grad`` read from ``grads``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

ROTATIONS_SOURCE = """
import torch
import torch.nn as nn
from torch.nn.utils import parametrizations, parametrize

N = 4


class SkewPart(nn.Module):
    # keeps the strict upper triangle; the lower one mirrors it with a minus sign
    def forward(self, M):
        upper = M.triu(1)
        return upper - upper.transpose(-1, -2)

    def right_inverse(self, S):
        return S.triu(1)


class ExpMap(nn.Module):
    def forward(self, S):
        return torch.matrix_exp(S)

    def right_inverse(self, R):
        # a rotation close to I: invert the Cayley transform, close enough to the log there
        eye = torch.eye(R.shape[-1], dtype=R.dtype)
        return 2 * torch.linalg.solve(eye + R, R - eye)


class SignedQR(nn.Module):
    # Q of a QR factorization made unique by giving R a positive diagonal
    def forward(self, M):
        Q, R = torch.linalg.qr(M)
        signs = torch.diagonal(R, dim1=-2, dim2=-1).sign()
        return Q * signs.unsqueeze(-2)


class Cayley(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("eye", torch.eye(n))

    def forward(self, S):
        return torch.linalg.solve(self.eye - S, self.eye + S)


def off_orthogonal(W):
    eye = torch.eye(W.shape[-1], dtype=W.dtype)
    return torch.linalg.matrix_norm(W.mT @ W - eye).item()


def constrained(kind):
    layer = nn.Linear(N, N, bias=False)
    initialize(layer)
    if kind == "skew_exp":
        parametrize.register_parametrization(layer, "weight", SkewPart())
        parametrize.register_parametrization(layer, "weight", ExpMap())
    elif kind == "qr":
        parametrize.register_parametrization(layer, "weight", SignedQR())
    elif kind == "skew_cayley":
        parametrize.register_parametrization(layer, "weight", SkewPart())
        parametrize.register_parametrization(layer, "weight", Cayley(N))
    else:
        layer = parametrizations.orthogonal(layer, orthogonal_map=kind)
    return layer


points = torch.tensor(points_np, dtype=torch.float32)
rotated = torch.tensor(rotated_np, dtype=torch.float32)
fitted = {}
for kind in ("skew_exp", "qr", "skew_cayley", "matrix_exp", "cayley", "householder"):
    layer = constrained(kind)
    record.append([kind, sorted(name for name, _ in layer.named_parameters())])
    starts_orthogonal = off_orthogonal(layer.weight.detach()) < 1e-5
    record.append(parametrize.is_parametrized(layer) and starts_orthogonal)
    opt = torch.optim.SGD(layer.parameters(), lr=0.3, momentum=0.6)
    for it in range(5):
        opt.zero_grad()
        misfit = (layer(points) - rotated).pow(2).sum(dim=1).mean()
        misfit.backward()
        opt.step()
        record.append(misfit.item())
    with parametrize.cached():
        record.append(torch.cat([layer.weight, layer(points[:3])]).detach().numpy())
    fitted[kind] = layer
    print(kind, round(misfit.item(), 3))

# setting the weight runs right_inverse down the chain: the original is skew's preimage
start = SignedQR()(torch.tensor(near_identity_np, dtype=torch.float32))
fitted["skew_exp"].weight = start
record.append(fitted["skew_exp"].weight.detach().numpy())
record.append(fitted["skew_exp"].parametrizations.weight.original.detach().numpy())

# maximize trace(X^T C X) over 5x2 orthonormal frames: project, step, retract
frame = torch.linalg.qr(torch.tensor(frame_np, dtype=torch.float64))[0].requires_grad_()
C = torch.tensor(cov_np, dtype=torch.float64)
for it in range(8):
    objective = -torch.trace(frame.T @ C @ frame)
    objective.backward()
    with torch.no_grad():
        G = frame.grad
        tangent = G - frame @ (frame.T @ G + G.T @ frame) / 2
        Q, R = torch.linalg.qr(frame - 0.04 * tangent)
        frame.copy_(Q * torch.sign(torch.diag(R)))
    frame.grad = None
    record.append(objective.item())
record.append(off_orthogonal(frame.detach()))
record.append((frame @ frame.T).detach().numpy())
"""

ROTATIONS_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        misfit.backward()\n        opt.step()",
        "        grads = misfit.backward()\n        opt.step(grads)",
    ),
    ("    objective.backward()\n", "    grads = objective.backward()\n"),
    ("        G = frame.grad\n", "        G = frame.grad(grads)\n"),
    ("    frame.grad = None\n", ""),
]


def test_orthogonal_parametrizations_and_stiefel_sgd_as_torch(capsys):
    rng = np.random.default_rng(27501)
    rotation = np.linalg.qr(rng.standard_normal((4, 4)))[0]
    points = rng.standard_normal((10, 4))
    half = rng.standard_normal((5, 5))
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ROTATIONS_SOURCE, ROTATIONS_STEPS, capsys, 27501, points_np=points,
        rotated_np=points @ rotation.T,
        near_identity_np=np.eye(4) + 0.1 * rng.standard_normal((4, 4)),
        frame_np=rng.standard_normal((5, 2)), cov_np=half @ half.T, initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    assert our_log == their_log
