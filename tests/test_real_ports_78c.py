"""Real ports, round 78 (the harness: ``tests/real_ports.py``): reservoir computing, a program
written here in the style of the echo state network libraries for PyTorch (EchoTorch, the
reservoirpy-like ``Reservoir``/``Ridge`` pair): a fixed sparse random reservoir scaled to a
spectral radius, leaky-integrator states over a batch of windows of a Mackey-Glass series, a
linear readout fitted in closed form by ridge regression, then fine-tuned by gradient descent,
and a closed-loop (generative) forecast; four configurations (a readout by
``torch.linalg.solve``, one by ``torch.linalg.lstsq`` of the Tikhonov-augmented system, a deep
reservoir of two layers, an online readout by recursive least squares), each run under torch
and, ported, under retrograd from the same draws, every record compared.

It reaches:

- the series: a Mackey-Glass delay equation integrated into a ``torch.zeros`` tensor by index
  assignments ``x[t + 1] = ...`` reading ``x[t - tau]``, sliding windows by
  ``series.unfold(0, size, step)``, ``[:, :-1, None]`` inputs and ``[:, 1:, None]`` targets;
- the reservoir: ``torch.rand(n, n) * 2 - 1`` weights, a sparsity mask ``torch.rand(n, n) <
  density`` applied by ``w[~mask] = 0.0``, the spectral radius ``torch.linalg.eigvals(w)
  .abs().max()`` (complex eigenvalues), ``w *= spectral_radius / rho`` in place, the input and
  bias weights kept by ``register_buffer``, ``F.linear`` of the input, ``h @ self.w.t()``, the
  leaky update ``(1 - a) * h + a * torch.tanh(...)`` over time steps, ``torch.stack(...,
  dim=1)``; a deep reservoir feeding each layer's states to the next, the states joined by
  ``torch.cat(..., dim=-1)``, layers in ``nn.ModuleList``;
- the ridge readout in float64 (``.double()``): a washout ``states[:, washout:]`` flattened by
  ``reshape(-1, n)``, a bias column by ``torch.ones``, ``XTX.diagonal().add_(ridge)`` (an
  in-place write through a diagonal view), ``torch.linalg.solve``, or ``torch.linalg.lstsq(...)
  .solution`` of ``torch.cat`` with ``math.sqrt(ridge) * torch.eye(n, dtype=...)``; the
  weights copied into an ``nn.Linear`` under ``torch.no_grad()`` by ``weight.copy_(W[1:].t())``
  and ``bias.copy_(W[0])``; or an online readout by recursive least squares (FORCE-style:
  rows of ``zip(X, Y)``, ``torch.mv``, ``torch.dot``, ``w += torch.outer(k, e)``, the chained
  in-place ``P.sub_(torch.outer(k, Px)).div_(forgetting)``);
- the fine-tuning: the readout, fitted on the first windows, adapted to all of them (the
  reservoir frozen, its states computed under ``torch.no_grad()``) by ``Adam`` with
  ``ExponentialLR`` on ``F.mse_loss``;
- evaluation under ``torch.no_grad()``: the NRMSE ``torch.sqrt(F.mse_loss(...)) /
  target.std()``, a closed-loop forecast that warms the reservoir on a window and feeds each
  prediction back (``unsqueeze``, the last states carried across calls), the
  ``state_dict`` (buffers and readout) saved by ``torch.save`` to a buffer and loaded into a
  fresh model by ``load_state_dict``, whose one-step predictions are compared.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

ESN_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def mackey_glass(n, tau=8, beta=0.2, gamma=0.1, power=10, x0=1.2):
    x = torch.zeros(n + tau)
    x[:tau + 1] = x0
    for t in range(tau, n + tau - 1):
        delayed = x[t - tau]
        x[t + 1] = x[t] + beta * delayed / (1 + delayed ** power) - gamma * x[t]
    return x[tau:]


class Reservoir(nn.Module):
    def __init__(self, input_dim, units, spectral_radius=0.9, leak_rate=0.3, input_scaling=0.5,
                 density=0.3, bias_scaling=0.1):
        super().__init__()
        self.units = units
        self.leak_rate = leak_rate
        w = torch.rand(units, units) * 2 - 1
        mask = torch.rand(units, units) < density
        w[~mask] = 0.0
        rho = torch.linalg.eigvals(w).abs().max()
        w *= spectral_radius / rho
        self.register_buffer("w", w)
        self.register_buffer("w_in", (torch.rand(units, input_dim) * 2 - 1) * input_scaling)
        self.register_buffer("bias", (torch.rand(units) * 2 - 1) * bias_scaling)

    def step(self, u, h):
        pre = F.linear(u, self.w_in) + h @ self.w.t() + self.bias
        return (1 - self.leak_rate) * h + self.leak_rate * torch.tanh(pre)

    def forward(self, u, h=None):
        if h is None:
            h = torch.zeros(u.shape[0], self.units)
        states = []
        for t in range(u.shape[1]):
            h = self.step(u[:, t], h)
            states.append(h)
        return torch.stack(states, dim=1)


class EchoStateNetwork(nn.Module):
    def __init__(self, input_dim=1, units=(24,), output_dim=1):
        super().__init__()
        self.reservoirs = nn.ModuleList()
        for i, n in enumerate(units):
            self.reservoirs.append(Reservoir(input_dim if i == 0 else units[i - 1], n,
                                             leak_rate=0.3 + 0.2 * i))
        self.readout = nn.Linear(sum(units), output_dim)

    def states(self, u, hs=None):
        layers, last = [], []
        x = u
        for i, reservoir in enumerate(self.reservoirs):
            x = reservoir(x, None if hs is None else hs[i])
            layers.append(x)
            last.append(x[:, -1])
        return torch.cat(layers, dim=-1), last

    def forward(self, u):
        return self.readout(self.states(u)[0])


def ridge_readout(states, targets, ridge, washout):
    n = states.shape[-1]
    X = states[:, washout:].reshape(-1, n).double()
    Y = targets[:, washout:].reshape(-1, targets.shape[-1]).double()
    X = torch.cat([torch.ones(X.shape[0], 1, dtype=X.dtype), X], dim=1)
    if SOLVER == "lstsq":
        X_aug = torch.cat([X, math.sqrt(ridge) * torch.eye(n + 1, dtype=X.dtype)], dim=0)
        Y_aug = torch.cat([Y, torch.zeros(n + 1, Y.shape[1], dtype=Y.dtype)], dim=0)
        return torch.linalg.lstsq(X_aug, Y_aug).solution
    XTX = X.t() @ X
    XTX.diagonal().add_(ridge)
    return torch.linalg.solve(XTX, X.t() @ Y)


def rls_readout(states, targets, washout, delta=1.0, forgetting=0.995):
    n = states.shape[-1] + 1
    X = states[:, washout:].reshape(-1, n - 1).double()
    Y = targets[:, washout:].reshape(-1, targets.shape[-1]).double()
    X = torch.cat([torch.ones(X.shape[0], 1, dtype=X.dtype), X], dim=1)
    P = torch.eye(n, dtype=torch.float64) / delta
    w = torch.zeros(n, Y.shape[1], dtype=torch.float64)
    for x, y in zip(X, Y):
        Px = torch.mv(P, x)
        k = Px / (forgetting + torch.dot(x, Px))
        e = y - x @ w
        w += torch.outer(k, e)
        P.sub_(torch.outer(k, Px)).div_(forgetting)
    return w


def nrmse(prediction, target):
    return torch.sqrt(F.mse_loss(prediction, target)) / target.std()


@torch.no_grad()
def closed_loop(model, warmup, horizon):
    _, hs = model.states(warmup)
    u = warmup[:, -1]
    outputs = []
    for _ in range(horizon):
        y = model.readout(torch.cat(hs, dim=-1))
        outputs.append(y)
        u = y
        hs = model.states(u.unsqueeze(1), hs)[1]
    return torch.stack(outputs, dim=1)


series = mackey_glass(150)
series = (series - series.mean()) / series.std()
windows = series[:120].unfold(0, 31, 6)
inputs, targets = windows[:, :-1, None], windows[:, 1:, None]
test_window = series[120:]
washout = 6

units = (16, 12) if SOLVER == "deep" else (24,)
model = EchoStateNetwork(units=units)
record.append([r.w.abs().sum().item() for r in model.reservoirs])
with torch.no_grad():
    states, _ = model.states(inputs)
if SOLVER == "rls":
    W = rls_readout(states[:4], targets[:4], washout)
else:
    W = ridge_readout(states[:10], targets[:10], 1e-4, washout)
with torch.no_grad():
    model.readout.weight.copy_(W[1:].t())
    model.readout.bias.copy_(W[0])
    fitted = model.readout(states[:10, washout:])
    fit_error = nrmse(fitted, targets[:10, washout:])
record.append(W.squeeze(1).numpy().copy())
record.append([fit_error.item()])
print(f"ridge readout: nrmse {fit_error.item():.4f}")

optimizer = torch.optim.Adam(model.readout.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.8)
for epoch in range(4):
    model.train()
    optimizer.zero_grad()
    prediction = model.readout(states[:, washout:])
    loss = F.mse_loss(prediction, targets[:, washout:])
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), scheduler.get_last_lr()[0]])
    record.append(params_of(model.readout))
print(f"fine-tuned: loss {loss.item():.4f}")

model.eval()
with torch.no_grad():
    test_in, test_target = test_window[:-1].view(1, -1, 1), test_window[1:].view(1, -1, 1)
    one_step = model(test_in)
    record.append([nrmse(one_step[:, washout:], test_target[:, washout:]).item()])
generated = closed_loop(model, test_in[:, :12], 6)
record.append(generated.flatten().numpy().copy())
record.append([nrmse(generated.squeeze(0), test_target[0, 11:17]).item()])

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = EchoStateNetwork(units=units)
restored.load_state_dict(torch.load(buffer))
restored.eval()
with torch.no_grad():
    record.append(restored(test_in)[0, -5:, 0].numpy().copy())
print(f"restored {sorted(restored.state_dict())}")
"""

ESN_STEPS = [
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


@pytest.mark.parametrize("solver", ["solve", "lstsq", "deep", "rls"])
def test_echo_state_network_ridge_readout_as_torch(capsys, solver):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ESN_SOURCE, ESN_STEPS, capsys, 7803, params_of=params_of, SOLVER=solver
    )
    assert len(theirs) == 3 + 2 * 4 + 4
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
