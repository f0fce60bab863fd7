"""Real ports, round 69 (the harness: ``tests/real_ports.py``): Koopman autoencoders, a program
written here in the style of erichson/koopmanAE (an encoder to a low-dimensional latent space
where forward and backward linear operators advance the state, trained on reconstruction,
multi-step prediction in both directions and a consistency loss tying the two operators),
on trajectories of a damped pendulum simulated in the program, against torch's run of the
same program from the same weights and draws.

- the operators: ``nn.Linear(b, b, bias=False)`` whose weight is drawn by ``torch.randn`` and
  orthogonalised by ``torch.linalg.svd`` (``U @ Vh * init_scale`` into ``.data``), the
  backward operator set by ``torch.linalg.pinv(...).t()`` of the forward one;
- the network: encoder/decoder ``nn.Sequential``s of ``nn.Tanh`` with ``.view(-1, 1, b)``
  latents, ``x.new_zeros``, the predictions gathered in lists and ``torch.cat``'d;
- the losses: ``nn.MSELoss()`` over ``steps`` forward and ``steps_back`` backward predictions
  against ``torch.flip``'d targets, the consistency loss per ``k`` from
  ``A[:, :k] @ B[:k, :]`` and ``B[:k, :] @ A[:, :k]`` against ``torch.eye(k)``, summed by
  ``torch.sum((...) ** 2) / (2.0 * k)``;
- the data: an Euler-integrated pendulum in NumPy mapped by a fixed random matrix to higher
  dimensions, windows of ``steps + 1`` by ``torch.stack`` and ``unfold``, batches by
  ``torch.utils.data.TensorDataset``/``DataLoader(shuffle=False)``;
- training: ``optim.AdamW``, ``lr_scheduler.ExponentialLR``, ``clip_grad_norm_`` (whose
  returned norm is recorded), gradients of the consistency terms for ``epoch >= 1`` only;
- evaluation under ``torch.no_grad()``: long rollouts by ``torch.linalg.matrix_power`` of the
  operator against step-by-step application, the operator's spectral radius by
  ``torch.linalg.eigvals(...).abs().max()``, a relative error by ``torch.linalg.norm``;
  a checkpoint ``{"model": state_dict(), "opt": optimizer.state_dict()}`` round trip.

The lines changed for the port: the ``import`` lines and the gradient lines (``backward()``
returns the gradients, ``clip_grad_norm_`` and ``step`` take them).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

KOOPMAN_SOURCE = """
import io

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def gaussian_init_(n_units, std=1.0):
    sampler = torch.randn(n_units, n_units) * (std / n_units)
    return sampler


class EncoderNet(nn.Module):
    def __init__(self, m, n, b, ALPHA=1):
        super(EncoderNet, self).__init__()
        self.N = m * n
        self.tanh = nn.Tanh()
        self.fc1 = nn.Linear(self.N, 16 * ALPHA)
        self.fc2 = nn.Linear(16 * ALPHA, 16 * ALPHA)
        self.fc3 = nn.Linear(16 * ALPHA, b)

    def forward(self, x):
        x = x.view(-1, 1, self.N)
        x = self.tanh(self.fc1(x))
        x = self.tanh(self.fc2(x))
        x = self.fc3(x)
        return x


class DecoderNet(nn.Module):
    def __init__(self, m, n, b, ALPHA=1):
        super(DecoderNet, self).__init__()
        self.m, self.n, self.b = m, n, b
        self.tanh = nn.Tanh()
        self.fc1 = nn.Linear(b, 16 * ALPHA)
        self.fc2 = nn.Linear(16 * ALPHA, 16 * ALPHA)
        self.fc3 = nn.Linear(16 * ALPHA, m * n)

    def forward(self, x):
        x = x.view(-1, 1, self.b)
        x = self.tanh(self.fc1(x))
        x = self.tanh(self.fc2(x))
        x = self.tanh(self.fc3(x))
        return x.view(-1, 1, self.m, self.n)


class Dynamics(nn.Module):
    def __init__(self, b, init_scale):
        super(Dynamics, self).__init__()
        self.dynamics = nn.Linear(b, b, bias=False)
        self.dynamics.weight.data = gaussian_init_(b, std=1)
        U, _, Vh = torch.linalg.svd(self.dynamics.weight.data)
        self.dynamics.weight.data = torch.mm(U, Vh) * init_scale

    def forward(self, x):
        return self.dynamics(x)


class DynamicsBack(nn.Module):
    def __init__(self, b, omega):
        super(DynamicsBack, self).__init__()
        self.dynamics = nn.Linear(b, b, bias=False)
        self.dynamics.weight.data = torch.linalg.pinv(omega.dynamics.weight.data.t())

    def forward(self, x):
        return self.dynamics(x)


class KoopmanAE(nn.Module):
    def __init__(self, m, n, b, steps, steps_back, alpha=1, init_scale=1):
        super(KoopmanAE, self).__init__()
        self.steps = steps
        self.steps_back = steps_back
        self.encoder = EncoderNet(m, n, b, ALPHA=alpha)
        self.dynamics = Dynamics(b, init_scale)
        self.backdynamics = DynamicsBack(b, self.dynamics)
        self.decoder = DecoderNet(m, n, b, ALPHA=alpha)

    def forward(self, x, mode="forward"):
        out, out_back = [], []
        z = self.encoder(x.contiguous())
        q = z.contiguous()
        if mode == "forward":
            for _ in range(self.steps):
                q = self.dynamics(q)
                out.append(self.decoder(q))
            out.append(self.decoder(z.contiguous()))
            return out, out_back
        if mode == "backward":
            for _ in range(self.steps_back):
                q = self.backdynamics(q)
                out_back.append(self.decoder(q))
            out_back.append(self.decoder(z.contiguous()))
            return out, out_back


def pendulum(n_traj, length, dt=0.1):
    theta = np.random.uniform(-1.5, 1.5, size=n_traj)
    omega = np.random.uniform(-0.5, 0.5, size=n_traj)
    states = []
    for _ in range(length):
        states.append(np.stack([theta, omega], axis=-1))
        omega = omega - dt * (np.sin(theta) + 0.1 * omega)
        theta = theta + dt * omega
    return np.stack(states, axis=1)  # (traj, time, 2)


steps, steps_back, m, n, b = 4, 4, 8, 1, 4
lifting = np.random.randn(2, m) / np.sqrt(2.0)
traj = torch.tensor(np.tanh(pendulum(6, 20) @ lifting), dtype=torch.float32)
windows = traj.unfold(1, steps + 1, 1).permute(0, 1, 3, 2).reshape(-1, steps + 1, m)
record.append(list(windows.shape))
dataset = TensorDataset(windows.view(-1, steps + 1, m, n))
loader = DataLoader(dataset, batch_size=16, shuffle=False)

model = KoopmanAE(m, n, b, steps, steps_back, alpha=1, init_scale=0.99)
record.append(torch.dist(torch.mm(model.dynamics.dynamics.weight.data,
                                  model.dynamics.dynamics.weight.data.t()),
                         0.99 ** 2 * torch.eye(b)).item() < 1e-4)
initialize(model)
criterion = nn.MSELoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)
lamb, nu, eta = 1.0, 1e-1, 1e-2

for epoch in range(3):
    for (data,) in loader:
        model.train()
        out, out_back = model(data[:, 0, :, :], mode="forward")
        loss_fwd, loss_identity = 0.0, 0.0
        for k in range(steps):
            if k == 0:
                loss_fwd = criterion(out[k], data[:, k + 1, :, :].unsqueeze(1))
            else:
                loss_fwd += criterion(out[k], data[:, k + 1, :, :].unsqueeze(1))
        loss_identity = criterion(out[-1], data[:, 0, :, :].unsqueeze(1)) * steps

        reversed_data = torch.flip(data, [1])
        out, out_back = model(reversed_data[:, 0, :, :], mode="backward")
        loss_bwd = 0.0
        for k in range(steps_back):
            if k == 0:
                loss_bwd = criterion(out_back[k], reversed_data[:, k + 1, :, :].unsqueeze(1))
            else:
                loss_bwd += criterion(out_back[k], reversed_data[:, k + 1, :, :].unsqueeze(1))

        A = model.dynamics.dynamics.weight
        B = model.backdynamics.dynamics.weight
        loss_consist = 0.0
        if epoch >= 1:
            K = A.shape[-1]
            for k in range(1, K + 1):
                As1 = A[:, :k]
                Bs1 = B[:k, :]
                As2 = A[:k, :]
                Bs2 = B[:, :k]
                Ik = torch.eye(k).float()
                if k == 1:
                    loss_consist = (torch.sum((torch.mm(Bs1, As1) - Ik) ** 2)
                                    + torch.sum((torch.mm(As2, Bs2) - Ik) ** 2)) / (2.0 * k)
                else:
                    loss_consist += (torch.sum((torch.mm(Bs1, As1) - Ik) ** 2)
                                     + torch.sum((torch.mm(As2, Bs2) - Ik) ** 2)) / (2.0 * k)

        loss = loss_fwd + lamb * loss_identity + nu * loss_bwd + eta * loss_consist
        optimizer.zero_grad()
        loss.backward()
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        record.append([loss.item(), loss_fwd.item(), loss_bwd.item(), float(loss_consist),
                       total.item()])
    scheduler.step()
    print("epoch {:d} loss {:.4f} lr {:.5f}".format(epoch, loss.item(),
                                                    scheduler.get_last_lr()[0]))

record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = KoopmanAE(m, n, b, steps, steps_back, alpha=1, init_scale=0.99)
restored.load_state_dict(checkpoint["model"])
restored.eval()
record.append([len(checkpoint["opt"]["state"]), checkpoint["opt"]["param_groups"][0]["lr"]])
with torch.no_grad():
    x0 = traj[:, 0, :].view(-1, 1, m)
    z = restored.encoder(x0)
    K = restored.dynamics.dynamics.weight
    horizon = 12
    stepped = z
    for _ in range(horizon):
        stepped = restored.dynamics(stepped)
    powered = z @ torch.linalg.matrix_power(K, horizon).t()
    record.append((stepped - powered).abs().max().item() < 1e-5)
    prediction = restored.decoder(powered).view(-1, m)
    truth = traj[:, horizon, :]
    error = torch.linalg.norm(prediction - truth) / torch.linalg.norm(truth)
    radius = torch.linalg.eigvals(K).abs().max()
    record.append([error.item(), radius.item()])
    record.append(prediction.numpy().copy())
"""

KOOPMAN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n"
        "        total = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)\n"
        "        optimizer.step()\n",
        "        grads = loss.backward()\n"
        "        total = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.5)\n"
        "        optimizer.step(grads)\n",
    ),
]


def test_koopman_autoencoder_trains_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        KOOPMAN_SOURCE, KOOPMAN_STEPS, capsys, 6902, initialize=initializer()
    )
    batches = 3 * 6  # 6 trajectories of 16 windows each, batches of 16
    assert theirs[0] == [96, 5, 8] and theirs[1] is True
    assert len(theirs) == 2 + batches + 1 + 1 + 1 + 2
    assert theirs[-3] is True and theirs[-4] == [14, pytest.approx(0.01 * 0.8**3)]
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
