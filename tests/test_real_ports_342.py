"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
a Navier-Stokes physics-informed network, small, against torch's run of the same code from the
same weights.

- A program written here in the style of Computational Domain's PINN scripts (Raissi et al.'s
  cylinder wake learned from scattered velocities): coordinates as ``torch.tensor(X,
  dtype=torch.float32, requires_grad=True)``, ``net(torch.hstack((x, y, t)))``, the stream
  function and pressure by ``out[:, 0:1]``, velocities and the momentum residuals by
  ``torch.autograd.grad(f, x, grad_outputs=torch.ones_like(f), create_graph=True)[0]``
  (third derivatives of the network), ``nn.MSELoss()`` against ``torch.zeros((n, 1))``,
  ``torch.optim.LBFGS(..., history_size=50, tolerance_grad=1e-05, tolerance_change=0.5 *
  np.finfo(float).eps, line_search_fn="strong_wolfe")`` stepped with a bound method as the
  closure (which prints ``'{:0.6f}'.format(loss)`` of a 0-d tensor), ``torch.save`` of the
  network's state dict and ``torch.load`` back into a fresh one, ``net.eval()`` and
  ``p.data.cpu().numpy()`` of the pressure on the test grid; the data by
  ``scipy.io.loadmat``, ``np.tile``, ``flatten()[:, None]`` and ``np.random.choice(...,
  replace=False)``.

The data file (``cylinder_wake.mat``) is written by the test with ``scipy.io.savemat`` in the
keys and layout of the dataset (``U_star`` N x 2 x T, ``p_star``, ``t``, ``X_star``), for a
small grid. Compared against torch: the four losses of every closure call, the pressure and
residuals on the test grid after reloading, and the printed log's first line. The lines a port
changes: the ``import`` lines and the gradient lines (``backward()`` returns the gradients and
the closure returns them with the loss).
"""

from __future__ import annotations

import numpy as np
import scipy.io
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

NAVIER_STOKES_SOURCE = """
import numpy as np
import scipy.io
import torch
import torch.nn as nn

VISCOSITY = 0.01


def d(f, wrt):
    # df/dwrt, kept differentiable for the next order
    return torch.autograd.grad(f, wrt, grad_outputs=torch.ones_like(f), create_graph=True)[0]


def as_input(a, grad=False):
    return torch.tensor(a, dtype=torch.float32, requires_grad=grad)


class WakeModel:
    def __init__(self, x, y, t, u, v, width=12):
        self.x, self.y, self.t = as_input(x, True), as_input(y, True), as_input(t, True)
        self.u, self.v = as_input(u), as_input(v)
        self.zero = torch.zeros((self.x.shape[0], 1))
        layers = [nn.Linear(3, width), nn.Tanh()]
        for _ in range(2):
            layers += [nn.Linear(width, width), nn.Tanh()]
        self.net = nn.Sequential(*layers, nn.Linear(width, 2))
        initialize(self.net)
        self.criterion = nn.MSELoss()
        self.optimizer = torch.optim.LBFGS(
            self.net.parameters(), lr=1, max_iter=5, max_eval=8, history_size=50,
            tolerance_grad=1e-05, tolerance_change=0.5 * np.finfo(float).eps,
            line_search_fn="strong_wolfe",
        )
        self.calls = 0

    def fields(self, x, y, t):
        out = self.net(torch.hstack((x, y, t)))
        psi, p = out[:, 0:1], out[:, 1:2]
        u, v = d(psi, y), -1.0 * d(psi, x)  # divergence-free by construction
        u_x, u_y, v_x, v_y = d(u, x), d(u, y), d(v, x), d(v, y)
        lap_u = d(u_x, x) + d(u_y, y)
        lap_v = d(v_x, x) + d(v_y, y)
        f = d(u, t) + u * u_x + v * u_y + d(p, x) - VISCOSITY * lap_u
        g = d(v, t) + u * v_x + v * v_y + d(p, y) - VISCOSITY * lap_v
        return u, v, p, f, g

    def loss_closure(self):
        self.optimizer.zero_grad()
        u, v, _, f, g = self.fields(self.x, self.y, self.t)
        parts = [
            self.criterion(u, self.u), self.criterion(v, self.v),
            self.criterion(f, self.zero), self.criterion(g, self.zero),
        ]
        loss = parts[0] + parts[1] + parts[2] + parts[3]
        loss.backward()
        self.calls += 1
        print("call {}: loss {:0.6f}".format(self.calls, loss))
        record.append([part.item() for part in parts])
        return loss

    def fit(self):
        self.net.train()
        self.optimizer.step(self.loss_closure)


wake = scipy.io.loadmat("cylinder_wake.mat")
velocity, pressure = wake["U_star"], wake["p_star"]  # N x 2 x T, N x T
times, points = wake["t"], wake["X_star"]  # T x 1, N x 2
n_points, n_times = points.shape[0], times.shape[0]

columns = {
    "x": np.tile(points[:, 0:1], (1, n_times)),
    "y": np.tile(points[:, 1:2], (1, n_times)),
    "t": np.tile(times, (1, n_points)).T,
    "u": velocity[:, 0, :],
    "v": velocity[:, 1, :],
}
flat = {name: grid.flatten()[:, None] for name, grid in columns.items()}
picked = np.random.choice(n_points * n_times, 16, replace=False)
train = [flat[name][picked, :] for name in ("x", "y", "t", "u", "v")]

model = WakeModel(*train)
model.fit()
torch.save(model.net.state_dict(), "wake.pt")

reloaded = WakeModel(*train)
reloaded.net.load_state_dict(torch.load("wake.pt"))
reloaded.net.eval()
grid_x = as_input(points[:, 0:1], True)
grid_y = as_input(points[:, 1:2], True)
for moment in (0.0, 1.0):
    grid_t = as_input(np.full((n_points, 1), moment), True)
    _, _, p, f, g = reloaded.fields(grid_x, grid_y, grid_t)
    record.append(np.reshape(p.data.cpu().numpy(), (5, 6)))
    record.append(np.hstack([f.detach().numpy(), g.detach().numpy()]))
"""

NAVIER_STOKES_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        return loss\n", "        return loss, grads\n"),
]


def _cylinder_wake(path) -> None:
    """A ``cylinder_wake.mat`` of the original's keys and layout on a 6 x 5 grid, 4 times: a
    travelling wave of the stream function's velocities and a pressure."""
    xs, ys = np.meshgrid(np.linspace(1.0, 8.0, 6), np.linspace(-2.0, 2.0, 5))
    X_star = np.stack([xs.ravel(), ys.ravel()], 1)  # noqa: N806 (the file's key)
    t = np.linspace(0.0, 1.5, 4)[:, None]
    phase = X_star[:, 0:1] - 0.8 * t.T
    u = 1.0 + 0.1 * np.cos(phase) * np.cos(X_star[:, 1:2])
    v = 0.1 * np.sin(phase) * np.sin(X_star[:, 1:2])
    scipy.io.savemat(
        path / "cylinder_wake.mat",
        {"U_star": np.stack([u, v], 1), "p_star": -0.5 * (u**2 + v**2), "t": t, "X_star": X_star},
    )


def test_navier_stokes_pinn_by_strong_wolfe_lbfgs_saved_and_reloaded_as_torch(
    capsys, monkeypatch, tmp_path
):
    _cylinder_wake(tmp_path)
    monkeypatch.chdir(tmp_path)
    initialize, records, logs = initializer(), [], []
    # torch's initial weights, which the port loads, the same whatever ran before on the
    # worker: a few of L-BFGS's or Adam's trajectories from other weights part by more
    # than the tolerance (rounding that a line search's branch or a long fit amplifies)
    torch.manual_seed(342)
    for lib in (torch, rg):
        record = []
        np.random.seed(342)
        text = (
            NAVIER_STOKES_SOURCE
            if lib is torch
            else port(NAVIER_STOKES_SOURCE, NAVIER_STOKES_STEPS)
        )
        run_source(text, lib, record=record, initialize=initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(theirs) > 6  # the line search evaluated the closure more than once per step
    assert logs[1].splitlines()[0] == logs[0].splitlines()[0]
    assert_records_agree(ours, theirs, rtol=2e-3, atol=2e-5)
