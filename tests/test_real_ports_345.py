"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a latent ODE trained on noisy spirals, checkpointed, resumed and extrapolated, small, against
torch's run of the same code from the same weights and draws.

- A program written here in the style of rtqichen/torchdiffeq's ``examples/latent_ode.py``:
  spirals drawn with ``numpy.random`` (``multinomial``, ``rand``, ``randn``), an RNN encoder run
  backwards in time (``reversed(range(...))``), a reparameterised ``z0`` from
  ``torch.randn(size).to(device)``, a latent vector field of ``nn.ELU(inplace=True)`` between
  linear layers integrated forward by ``odeint(func, z0, ts).permute(1, 0, 2)`` (differentiated
  through every solver step) and decoded through ``nn.ReLU(inplace=True)``; the ELBO by a
  Gaussian log-density with ``torch.from_numpy(np.array([2 * np.pi])).float().to(x.device)``,
  ``torch.zeros(pred.size()).to(device) + noise_std`` and a KL against ``prior_mean =
  prior_logvar = torch.zeros(...)`` (one tensor under two names); ``torch.device('cuda:0' if
  torch.cuda.is_available() else 'cpu')``; a ``__main__`` block whose training ends by
  ``KeyboardInterrupt`` into a checkpoint of state dicts, the optimizer's state, tensors and
  NumPy arrays through ``torch.save``, read back by ``torch.load(..., weights_only=False)`` on
  the second run; ``'{:.4f}'.format`` of a running average; extrapolation under
  ``torch.no_grad()`` forwards and backwards in time (a decreasing time grid) and
  ``torch.flip(..., dims=[0])``.
- The solver is a fixed-step RK4 ``odeint`` written here too (``functools.partial`` binds its
  method and step size where the script would import torchdiffeq's), integrating a decreasing
  grid as the increasing grid of the reversed field, as torchdiffeq does.

Compared against torch: the parameters after every iteration, the extrapolations and the
sample trajectory, the logs' last lines, and each library's checkpoint read by the other. The
lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import random
import types

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, params_of, port, run_source

SOLVER_SOURCE = """
import math

import torch


def rk4_odeint(func, y0, t, method="rk4", options=None):
    # y(t[k]) for each k, by classical RK4 steps no longer than options["step_size"]
    assert method == "rk4"
    if float(t[0]) > float(t[-1]):  # run a decreasing grid as the reversed field forwards
        return rk4_odeint(lambda s, y: -func(-s, y), y0, -t, method, options)
    longest = options["step_size"]
    states, y = [y0], y0
    for k in range(len(t) - 1):
        start, span = t[k], t[k + 1] - t[k]
        pieces = max(1, math.ceil(float(span) / longest))
        h = span / pieces
        for i in range(pieces):
            s = start + i * h
            k1 = func(s, y)
            k2 = func(s + h / 2, y + h / 2 * k1)
            k3 = func(s + h / 2, y + h / 2 * k2)
            k4 = func(s + h, y + h * k3)
            y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        states.append(y)
    return torch.stack(states)
"""

LATENT_ODE_SOURCE = """
import functools
import os

import numpy as np
import numpy.random as npr
import torch
import torch.nn as nn
import torch.optim as optim

odeint = functools.partial(rk4_odeint, method="rk4", options=dict(step_size=0.3))


def spirals(count, total, seen, stop, noise, b):
    # clockwise and counter-clockwise spirals; each sample a noisy window of one of them
    ts = np.linspace(0.0, stop, num=total)
    inward = stop + 1.0 - ts
    radius = b * 50.0 / inward
    cw = np.stack([radius * np.cos(inward) - 5.0, radius * np.sin(inward)], 1)
    ccw = np.stack([b * ts * np.cos(ts) + 5.0, b * ts * np.sin(ts)], 1)
    full, windows = [], []
    for _ in range(count):
        starts = total - 2 * seen  # not too near either end
        first = np.argmax(npr.multinomial(1, [1.0 / starts] * starts)) + seen
        path = ccw if npr.rand() > 0.5 else cw
        full.append(path)
        windows.append(path[first : first + seen] + noise * npr.randn(seen, 2))
    return np.stack(full), np.stack(windows), ts, ts[:seen]


class Field(nn.Module):
    def __init__(self, latent, hidden):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(latent, hidden), nn.ELU(inplace=True),
            nn.Linear(hidden, hidden), nn.ELU(inplace=True),
            nn.Linear(hidden, latent),
        )
        self.evaluations = 0

    def forward(self, t, z):
        self.evaluations += 1
        return self.net(z)


class Encoder(nn.Module):
    def __init__(self, latent, obs, hidden, batch):
        super().__init__()
        self.hidden, self.batch = hidden, batch
        self.step = nn.Linear(obs + hidden, hidden)
        self.out = nn.Linear(hidden, 2 * latent)

    def forward(self, x, h):
        h = torch.tanh(self.step(torch.cat((x, h), dim=1)))
        return self.out(h), h

    def start(self):
        return torch.zeros(self.batch, self.hidden)


def decoder(latent, obs, hidden):
    return nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, obs))


class Smoothed:
    def __init__(self, momentum=0.9):
        self.momentum, self.avg = momentum, None

    def update(self, value):
        if self.avg is None:
            self.avg = value
        else:
            self.avg = self.momentum * self.avg + (1 - self.momentum) * value


def gaussian_log_density(x, mean, logvar):
    log_two_pi = torch.log(torch.from_numpy(np.array([2.0 * np.pi])).float().to(x.device))
    return -0.5 * (log_two_pi + logvar + (x - mean) ** 2.0 / torch.exp(logvar))


def gaussian_kl(mu_q, lv_q, mu_p, lv_p):
    spread = (torch.exp(lv_q) + (mu_q - mu_p) ** 2.0) / (2.0 * torch.exp(lv_p))
    return 0.5 * (lv_p - lv_q) + spread - 0.5


def posterior_sample(encoder, windows, latent):
    h = encoder.start().to(device)
    for t in reversed(range(windows.size(1))):  # read the window from its end
        out, h = encoder(windows[:, t, :], h)
    mean, logvar = out[:, :latent], out[:, latent:]
    return torch.randn(mean.size()).to(device) * torch.exp(0.5 * logvar) + mean, mean, logvar


if __name__ == "__main__":
    latent, count, noise = 3, 4, 0.3
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    full, windows, ts, seen_ts = spirals(count, 30, 6, stop=6 * np.pi, noise=noise, b=0.3)
    full = torch.from_numpy(full).float().to(device)
    windows = torch.from_numpy(windows).float().to(device)
    seen_ts = torch.from_numpy(seen_ts).float().to(device)

    field = Field(latent, 12).to(device)
    encoder = Encoder(latent, 2, 10, count).to(device)
    dec = decoder(latent, 2, 12).to(device)
    for module in (field, encoder, dec):
        initialize(module)
    trained = [*field.parameters(), *dec.parameters(), *encoder.parameters()]
    optimizer = optim.Adam(trained, lr=args.lr)
    elbo = Smoothed()

    os.makedirs(args.train_dir, exist_ok=True)
    saved = os.path.join(args.train_dir, "latest.pt")
    if os.path.exists(saved):
        state = torch.load(saved, weights_only=False)  # (it holds NumPy arrays)
        field.load_state_dict(state["field"])
        encoder.load_state_dict(state["encoder"])
        dec.load_state_dict(state["decoder"])
        optimizer.load_state_dict(state["optimizer"])
        full, windows, ts, seen_ts = state["full"], state["windows"], state["ts"], state["seen_ts"]
        print("resumed from {}".format(saved))

    try:
        for it in range(1, args.iterations + 1):
            optimizer.zero_grad()
            z0, q_mean, q_logvar = posterior_sample(encoder, windows, latent)
            pred = dec(odeint(field, z0, seen_ts).permute(1, 0, 2))
            noise_logvar = 2.0 * torch.log(torch.zeros(pred.size()).to(device) + noise)
            fit = gaussian_log_density(windows, pred, noise_logvar).sum(-1).sum(-1)
            prior_mean = prior_logvar = torch.zeros(z0.size()).to(device)
            kl = gaussian_kl(q_mean, q_logvar, prior_mean, prior_logvar).sum(-1)
            loss = torch.mean(kl - fit, dim=0)
            loss.backward()
            optimizer.step()
            elbo.update(-loss.item())
            record.append(params_of(field, encoder, dec))
            print("iteration {}: smoothed elbo {:.4f}".format(it, elbo.avg))
        raise KeyboardInterrupt  # (stopped here, as a user would stop it)
    except KeyboardInterrupt:
        torch.save({
            "field": field.state_dict(), "encoder": encoder.state_dict(),
            "decoder": dec.state_dict(), "optimizer": optimizer.state_dict(),
            "full": full, "windows": windows, "ts": ts, "seen_ts": seen_ts,
        }, saved)
        print("saved {}".format(saved))
    print("stopped after {} iterations".format(it))

    with torch.no_grad():
        z0 = posterior_sample(encoder, windows, latent)[0][0]
        ahead = torch.from_numpy(np.linspace(0.0, 2.0 * np.pi, num=7)).float().to(device)
        behind = torch.from_numpy(np.linspace(-np.pi, 0.0, num=7)[::-1].copy()).float().to(device)
        future = dec(odeint(field, z0, ahead))
        past = torch.flip(dec(odeint(field, z0, behind)), dims=[0])
    record.append(future.cpu().numpy())
    record.append(past.cpu().numpy())
    record.append(windows[0].cpu().numpy())
"""

LATENT_ODE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]

_SOLVER_STEPS = [("import torch\n", "import retrograd as torch\n")]


def _odeint(lib):
    """The fixed-step solver made over ``lib``."""
    text = SOLVER_SOURCE if lib is torch else port(SOLVER_SOURCE, _SOLVER_STEPS)
    return run_source(text, lib)["rk4_odeint"]


def test_torchdiffeq_latent_ode_trains_checkpoints_resumes_and_extrapolates_as_torch(
    capsys, tmp_path
):
    """Each library runs the script twice in its own directory: three iterations that
    store a checkpoint, then one more that loads it (the states, the optimizer's state and the
    data) and stores it again."""
    records, logs = [[], []], [[], []]
    for iterations in (3, 1):
        for run, lib in enumerate((torch, rg)):
            args = types.SimpleNamespace(
                iterations=iterations, lr=0.01, train_dir=str(tmp_path / f"run{run}")
            )
            record, log = _single_run(lib, args, capsys)
            records[run] += record
            logs[run].append(log.replace(f"run{run}", "run"))
    theirs, ours = records
    # the printed ELBOs (sums over every point, hundreds) differ in their last digits
    assert [log.splitlines()[-2:] for log in logs[1]] == [log.splitlines()[-2:] for log in logs[0]]
    assert logs[1][1].startswith("resumed from") and logs[0][1].startswith("resumed from")
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    # each library reads the other's checkpoint: the same states and arrays
    torch_file = rg.load(tmp_path / "run0" / "latest.pt", weights_only=False)
    retrograd_file = torch.load(tmp_path / "run1" / "latest.pt", weights_only=False)
    assert sorted(torch_file) == sorted(retrograd_file)
    for name in ("field", "encoder", "decoder"):
        for key, value in retrograd_file[name].items():
            np.testing.assert_allclose(
                torch_file[name][key].numpy(), value.numpy(), rtol=1e-4, atol=1e-6
            )
    np.testing.assert_array_equal(torch_file["ts"], retrograd_file["ts"])


def _single_run(lib, args, capsys):
    """One library's run of the script with its own ``args``: the records and the log."""
    record = []
    np.random.seed(345)
    random.seed(345)
    text = LATENT_ODE_SOURCE if lib is torch else port(LATENT_ODE_SOURCE, LATENT_ODE_STEPS)
    with SharedDraws(lib, 345):
        run_source(
            text, lib, record=record, initialize=_INITIALIZE, params_of=params_of, args=args,
            rk4_odeint=_odeint(lib), __name__="__main__",
        )  # fmt: skip
    return record, capsys.readouterr().out


def _initialize(module):
    """torch's initial weights for the port's modules, in the order made, in each of the
    two phases (both runs of a phase make the three modules afresh)."""
    states = _INITIAL_STATES
    if isinstance(module, torch.nn.Module):
        states.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
    else:
        module.load_state_dict(states.pop(0))


_INITIAL_STATES: list = []
_INITIALIZE = _initialize
