# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the Navier-Stokes physics-informed network of Computational Domain's PINN videos
(``navier_stokes.py``: the cylinder wake of Raissi et al. learned from scattered velocities),
small, against torch's run of the same code from the same weights.

What it exercises: ``torch.tensor(X, dtype=torch.float32, requires_grad=True)`` coordinates,
``self.net(torch.hstack((x, y, t)))``, the stream function and pressure by ``res[:, 0:1]``,
velocities as ``torch.autograd.grad(psi, y, grad_outputs=torch.ones_like(psi),
create_graph=True)[0]`` and the momentum residuals through third derivatives of the network,
``nn.MSELoss()`` against ``torch.zeros((n, 1))``, ``torch.optim.LBFGS(...,
history_size=50, tolerance_grad=1e-05, tolerance_change=0.5 * np.finfo(float).eps,
line_search_fn="strong_wolfe")`` stepped with the class's ``closure`` method (which prints
``'{:0.6f}'.format(self.ls)`` of a 0-d tensor), ``torch.save(pinn.net.state_dict(),
'model.pt')`` and ``torch.load`` back into a fresh network, ``pinn.net.eval()`` and
``p_out.data.cpu().numpy()`` of the pressure on the test grid.

The data file (``cylinder_wake.mat``) is written by the test with ``scipy.io.savemat`` in the
keys and shapes of the original (``U_star`` N x 2 x T, ``p_star``, ``t``, ``X_star``), for a
small grid; the script's commented-out training block is run; ``N_train``, ``max_iter`` and
``max_eval`` are small; the plotting and the animation are left out. The lines changed: the
``import`` lines and the gradient lines (``self.ls.backward()`` returns the gradients and the
closure returns them with the loss).
"""

from __future__ import annotations

import numpy as np
import scipy.io
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

NAVIER_STOKES_SOURCE = """
\"\"\"
@author: Computational Domain
\"\"\"

import torch
import torch.nn as nn
import numpy as np
import scipy.io

nu = 0.01

class NavierStokes():
    def __init__(self, X, Y, T, u, v):

        self.x = torch.tensor(X, dtype=torch.float32, requires_grad=True)
        self.y = torch.tensor(Y, dtype=torch.float32, requires_grad=True)
        self.t = torch.tensor(T, dtype=torch.float32, requires_grad=True)

        self.u = torch.tensor(u, dtype=torch.float32)
        self.v = torch.tensor(v, dtype=torch.float32)

        #null vector to test against f and g:
        self.null = torch.zeros((self.x.shape[0], 1))

        # initialize network:
        self.network()

        self.optimizer = torch.optim.LBFGS(self.net.parameters(), lr=1, max_iter=12, max_eval=15,
                                           history_size=50, tolerance_grad=1e-05, tolerance_change=0.5 * np.finfo(float).eps,
                                           line_search_fn="strong_wolfe")

        self.mse = nn.MSELoss()

        #loss
        self.ls = 0

        #iteration number
        self.iter = 0

    def network(self):

        self.net = nn.Sequential(
            nn.Linear(3, 20), nn.Tanh(),
            nn.Linear(20, 20), nn.Tanh(),
            nn.Linear(20, 20), nn.Tanh(),
            nn.Linear(20, 20), nn.Tanh(),
            nn.Linear(20, 2))
        initialize(self.net)

    def function(self, x, y, t):

        res = self.net(torch.hstack((x, y, t)))
        psi, p = res[:, 0:1], res[:, 1:2]

        u = torch.autograd.grad(psi, y, grad_outputs=torch.ones_like(psi), create_graph=True)[0] #retain_graph=True,
        v = -1.*torch.autograd.grad(psi, x, grad_outputs=torch.ones_like(psi), create_graph=True)[0]

        u_x = torch.autograd.grad(u, x, grad_outputs=torch.ones_like(u), create_graph=True)[0]
        u_xx = torch.autograd.grad(u_x, x, grad_outputs=torch.ones_like(u_x), create_graph=True)[0]
        u_y = torch.autograd.grad(u, y, grad_outputs=torch.ones_like(u), create_graph=True)[0]
        u_yy = torch.autograd.grad(u_y, y, grad_outputs=torch.ones_like(u_y), create_graph=True)[0]
        u_t = torch.autograd.grad(u, t, grad_outputs=torch.ones_like(u), create_graph=True)[0]

        v_x = torch.autograd.grad(v, x, grad_outputs=torch.ones_like(v), create_graph=True)[0]
        v_xx = torch.autograd.grad(v_x, x, grad_outputs=torch.ones_like(v_x), create_graph=True)[0]
        v_y = torch.autograd.grad(v, y, grad_outputs=torch.ones_like(v), create_graph=True)[0]
        v_yy = torch.autograd.grad(v_y, y, grad_outputs=torch.ones_like(v_y), create_graph=True)[0]
        v_t = torch.autograd.grad(v, t, grad_outputs=torch.ones_like(v), create_graph=True)[0]

        p_x = torch.autograd.grad(p, x, grad_outputs=torch.ones_like(p), create_graph=True)[0]
        p_y = torch.autograd.grad(p, y, grad_outputs=torch.ones_like(p), create_graph=True)[0]

        f = u_t + u * u_x + v * u_y + p_x - nu * (u_xx + u_yy)
        g = v_t + u * v_x + v * v_y + p_y - nu * (v_xx + v_yy)

        return u, v, p, f, g

    def closure(self):
        # reset gradients to zero:
        self.optimizer.zero_grad()

        # u, v, p, g and f predictions:
        u_prediction, v_prediction, p_prediction, f_prediction, g_prediction = self.function(self.x, self.y, self.t)

        # calculate losses
        u_loss = self.mse(u_prediction, self.u)
        v_loss = self.mse(v_prediction, self.v)
        f_loss = self.mse(f_prediction, self.null)
        g_loss = self.mse(g_prediction, self.null)
        self.ls = u_loss + v_loss + f_loss +g_loss

        # derivative with respect to net's weights:
        self.ls.backward()

        self.iter += 1
        if not self.iter % 1:
            print('Iteration: {:}, Loss: {:0.6f}'.format(self.iter, self.ls))
        record.append([u_loss.item(), v_loss.item(), f_loss.item(), g_loss.item()])

        return self.ls

    def train(self):

        # training loop
        self.net.train()
        self.optimizer.step(self.closure)

N_train = 30

data = scipy.io.loadmat('cylinder_wake.mat')

U_star = data['U_star']  # N x 2 x T
P_star = data['p_star']  # N x T
t_star = data['t']  # T x 1
X_star = data['X_star']  # N x 2

N = X_star.shape[0]
T = t_star.shape[0]

x_test = X_star[:, 0:1]
y_test = X_star[:, 1:2]
p_test = P_star[:, 0:1]
u_test = U_star[:, 0:1, 0]
t_test = np.ones((x_test.shape[0], x_test.shape[1]))

# Rearrange Data
XX = np.tile(X_star[:, 0:1], (1, T))  # N x T
YY = np.tile(X_star[:, 1:2], (1, T))  # N x T
TT = np.tile(t_star, (1, N)).T  # N x T

UU = U_star[:, 0, :]  # N x T
VV = U_star[:, 1, :]  # N x T
PP = P_star  # N x T

x = XX.flatten()[:, None]  # NT x 1
y = YY.flatten()[:, None]  # NT x 1
t = TT.flatten()[:, None]  # NT x 1

u = UU.flatten()[:, None]  # NT x 1
v = VV.flatten()[:, None]  # NT x 1
p = PP.flatten()[:, None]  # NT x 1

# Training Data
idx = np.random.choice(N * T, N_train, replace=False)
x_train = x[idx, :]
y_train = y[idx, :]
t_train = t[idx, :]
u_train = u[idx, :]
v_train = v[idx, :]

pinn = NavierStokes(x_train, y_train, t_train, u_train, v_train)

pinn.train()

torch.save(pinn.net.state_dict(), 'model.pt')

pinn = NavierStokes(x_train, y_train, t_train, u_train, v_train)
pinn.net.load_state_dict(torch.load('model.pt'))
pinn.net.eval()

x_test = torch.tensor(x_test, dtype=torch.float32, requires_grad=True)
y_test = torch.tensor(y_test, dtype=torch.float32, requires_grad=True)
t_test = torch.tensor(t_test, dtype=torch.float32, requires_grad=True)

u_out, v_out, p_out, f_out, g_out = pinn.function(x_test, y_test, t_test)

u_plot = p_out.data.cpu().numpy()
u_plot = np.reshape(u_plot, (5, 6))
record.append(u_plot)
for i in range(3):
    u_out, v_out, p_out, f_out, g_out = pinn.function(x_test, y_test, i*t_test)
    u_plot = p_out.data.cpu().numpy()
    u_plot = np.reshape(u_plot, (5, 6))
    record.append(u_plot)
    record.append(np.hstack([f_out.detach().numpy(), g_out.detach().numpy()]))
"""

NAVIER_STOKES_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("        self.ls.backward()\n", "        grads = self.ls.backward()\n"),
    ("        return self.ls\n", "        return self.ls, grads\n"),
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
