# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
optimization on the orthogonal group and the Stiefel manifold four ways, as geotorch and the
PyTorch parametrizations tutorial write them: a geotorch-style ``Skew`` + ``MatrixExp``
parametrization registered on a ``nn.Linear`` with ``parametrize.register_parametrization``
(``right_inverse`` included, assigning an orthogonal weight), a ``QRRetraction`` one with the
sign fix ``Q * sign(diag(R))``, ``torch.nn.utils.parametrizations.orthogonal`` with each
``orthogonal_map`` (``matrix_exp``, ``cayley``, ``householder``), and Riemannian SGD written by
hand (the tangent projection ``G - X sym(X^T G)`` then a QR retraction, under ``torch.no_grad``)
on a Procrustes problem, against torch's run of the same code from the same weights.

What it exercises: ``torch.matrix_exp`` and its gradient; ``A.triu(1)``/``A - A.mT``;
``torch.linalg.qr`` gradient and ``torch.diagonal(R, dim1=-2, dim2=-1).sign().unsqueeze(-2)``;
``torch.linalg.solve`` for the Cayley map; ``parametrize.is_parametrized``,
``parametrize.cached()``, ``model.parametrizations.weight.original``; assigning
``layer.weight = Q`` through ``right_inverse``; ``torch.linalg.matrix_norm(X.mT @ X - I)``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``
given to ``optimizer.step``; ``X.grad`` read from ``grads``).
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


STIEFEL_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.utils.parametrize as parametrize
from torch.nn.utils.parametrizations import orthogonal


class Skew(nn.Module):
    def forward(self, X):
        A = X.triu(1)
        return A - A.transpose(-1, -2)

    def right_inverse(self, A):
        return A.triu(1)


class MatrixExponential(nn.Module):
    def forward(self, X):
        return torch.matrix_exp(X)

    def right_inverse(self, Q):
        # the principal logarithm of a rotation near the identity, by the Cayley transform's inverse
        I = torch.eye(Q.shape[-1], dtype=Q.dtype)
        return 2 * torch.linalg.solve(I + Q, Q - I)


class QRRetraction(nn.Module):
    def forward(self, X):
        Q, R = torch.linalg.qr(X)
        return Q * torch.diagonal(R, dim1=-2, dim2=-1).sign().unsqueeze(-2)


class CayleyMap(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("Id", torch.eye(n))

    def forward(self, X):
        # (I + X)(I - X)^{-1}
        return torch.linalg.solve(self.Id - X, self.Id + X)


def procrustes_loss(layer, x, y):
    return ((layer(x) - y) ** 2).mean()


def orthogonality_error(W):
    I = torch.eye(W.shape[-1], dtype=W.dtype)
    return torch.linalg.matrix_norm(W.mT @ W - I).item()


inputs = torch.tensor(x_data, dtype=torch.float32)
targets = torch.tensor(y_data, dtype=torch.float32)

layers = {}
layer = nn.Linear(5, 5, bias=False)
initialize(layer)
parametrize.register_parametrization(layer, "weight", Skew())
parametrize.register_parametrization(layer, "weight", MatrixExponential())
layers["exp"] = layer

layer = nn.Linear(5, 5, bias=False)
initialize(layer)
parametrize.register_parametrization(layer, "weight", QRRetraction())
layers["qr"] = layer

layer = nn.Linear(5, 5, bias=False)
initialize(layer)
parametrize.register_parametrization(layer, "weight", Skew())
parametrize.register_parametrization(layer, "weight", CayleyMap(5))
layers["cayley_tutorial"] = layer

for orthogonal_map in ("matrix_exp", "cayley", "householder"):
    layer = nn.Linear(5, 5, bias=False)
    initialize(layer)
    layers[orthogonal_map] = orthogonal(layer, orthogonal_map=orthogonal_map)

for name, layer in layers.items():
    record.append(parametrize.is_parametrized(layer))
    record.append(sorted(k for k, _ in layer.named_parameters()))
    record.append(orthogonality_error(layer.weight.detach()) < 1e-5)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.2, momentum=0.5)
    for step in range(12):
        optimizer.zero_grad()
        loss = procrustes_loss(layer, inputs, targets)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    with parametrize.cached():
        record.append(layer.weight.detach().numpy())
        record.append(layer(inputs).detach().numpy())
    print(f"{name}: loss {loss.item():.4f}")

# assigning an orthogonal matrix goes through right_inverse
Q = QRRetraction()(torch.tensor(q_data, dtype=torch.float32))
layers["exp"].weight = Q @ torch.linalg.matrix_exp(torch.zeros(5, 5))
record.append(layers["exp"].weight.detach().numpy())
record.append(layers["exp"].parametrizations.weight.original.detach().numpy())

# Riemannian SGD on the Stiefel manifold St(6, 3) by hand
X = torch.linalg.qr(torch.tensor(stiefel0, dtype=torch.float64))[0].requires_grad_()
M = torch.tensor(stiefel_target, dtype=torch.float64)
for step in range(20):
    loss = -torch.trace(X.T @ M @ X)
    loss.backward()
    with torch.no_grad():
        G = X.grad
        sym = 0.5 * (X.T @ G + G.T @ X)
        riemannian_grad = G - X @ sym
        Y = X - 0.05 * riemannian_grad
        Q, R = torch.linalg.qr(Y)
        X.copy_(Q * torch.sign(torch.diag(R)))
        X.grad.zero_()
    record.append(loss.item())
record.append(orthogonality_error(X.detach()))
record.append((X @ X.T).detach().numpy())
"""

STIEFEL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.utils.parametrize as parametrize\nfrom torch.nn.",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.utils.parametrize as parametrize\nfrom torch.nn.",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
    (
        "    loss.backward()\n    with torch.no_grad():\n        G = X.grad\n",
        "    grads = loss.backward()\n    with torch.no_grad():\n        G = X.grad(grads)\n",
    ),
    ("        X.grad.zero_()\n", ""),
]


def test_orthogonal_parametrizations_and_stiefel_sgd_as_torch(capsys):
    rng = np.random.default_rng(27501)
    rotation = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    x_data = rng.standard_normal((16, 5))
    symmetric = rng.standard_normal((6, 6))
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        STIEFEL_SOURCE, STIEFEL_STEPS, capsys, 27501, x_data=x_data, y_data=x_data @ rotation.T,
        q_data=np.eye(5) + 0.1 * rng.standard_normal((5, 5)), stiefel0=rng.standard_normal((6, 3)),
        stiefel_target=symmetric + symmetric.T, initialize=initializer(),
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    assert our_log == their_log
