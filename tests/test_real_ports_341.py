"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
DeepONet, data-driven and physics-informed, small.

- A program written here in the style of the DeepONet notebooks (JohnCSu/DeepONet_Pytorch_Demo)
  learning the antiderivative operator. The data: random Chebyshev series (``np.random.rand``
  coefficients, ``chebval``) under ``np.random.seed``, targets by
  ``scipy.integrate.cumulative_trapezoid(..., initial=0)`` and ``np.interp``, ``torch.tensor``
  of a list of arrays with ``dtype=torch.float32``, ``unsqueeze``, a ``Dataset`` subclass read
  by a ``DataLoader``. The network: an MLP whose ``activation`` attribute is ``torch.tanh`` and
  whose ``nn.ModuleList`` holds its input layer twice over (as an attribute and in the list:
  one parameter under two state-dict keys), a DeepONet ``fc(trunk(y) * branch(u))``
  broadcasting the branch's ``[B, 1, M]`` against the trunk's ``[B, N, M]`` into a
  ``Linear(..., bias=False)``; trained by ``Adam`` (``from torch.optim import Adam``) and
  ``StepLR`` stepped every batch (``get_last_lr``), evaluated under ``torch.no_grad()`` on
  ``sin(a x)`` through ``net.cpu()``; ``print`` of shapes.
- The physics-informed operator: ``vmap(vmap(jacrev(with_aux(net), has_aux=True), (0,
  None)), 0)`` over the module itself (its parameters closed over, not passed), the derivative
  in the query point matched to the input function and the initial condition read from the
  auxiliary outputs, and ``loss.backward()`` through ``jacrev`` into the parameters.

Compared against torch: every loss, the evaluation errors, the Jacobians and values of the
batched ``jacrev`` and the weights after each fit, and the printed log. The loaders keep their
order (``shuffle=True`` would draw each library's own); ``initialize(...)`` gives the port
torch's initial weights. The lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

DEEPONET_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from numpy.polynomial import chebyshev
from scipy import integrate
from torch.func import jacrev, vmap
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset


def chebyshev_inputs(count, sensors, degree, scale):
    grid = np.linspace(-1, 1, sensors)
    return np.stack([
        chebyshev.chebval(grid, scale * 2 * (np.random.rand(degree + 1) - 0.5))
        for _ in range(count)
    ])


def antiderivative_data(count, sensors, queries, lo=0.0, hi=2.0, degree=6, scale=4.0, seed=7):
    np.random.seed(seed)
    fs = chebyshev_inputs(count, sensors, degree, scale)
    at = np.linspace(lo, hi, sensors)
    where = np.tile(np.linspace(lo, hi, queries), (count, 1))
    # integrate on the sensor grid, then read the integral at the query points
    integrals = [
        np.interp(q, at, integrate.cumulative_trapezoid(f, at, initial=0.0))
        for q, f in zip(where, fs)
    ]
    where = torch.tensor(where, dtype=torch.float32).unsqueeze(-1)
    fs = torch.tensor(fs, dtype=torch.float32).unsqueeze(1)
    return where, fs, torch.tensor(integrals, dtype=torch.float32).unsqueeze(-1)


class Triples(Dataset):
    def __init__(self, where, fs, integrals):
        self.where, self.fs, self.integrals = where, fs, integrals

    def __len__(self):
        return self.where.shape[0]

    def __getitem__(self, i):
        return self.where[i], self.fs[i], self.integrals[i]


class Tower(nn.Module):
    def __init__(self, n_in, n_out, width, depth):
        super().__init__()
        self.first = nn.Linear(n_in, width)
        self.last = nn.Linear(width, n_out)
        self.activation = torch.tanh
        self.stack = nn.ModuleList([self.first, *[nn.Linear(width, width) for _ in range(depth)]])

    def forward(self, x):
        for layer in self.stack:
            x = self.activation(layer(x))
        return self.last(x)


class OperatorNet(nn.Module):
    def __init__(self, sensors, latent, width=10):
        super().__init__()
        self.branch = Tower(sensors, latent, width, 1)
        self.trunk = Tower(1, latent, width, 1)
        self.fc = nn.Linear(latent, 1, bias=False)

    def forward(self, where, f):
        # where: [B, N, 1], f: [B, 1, sensors] -> [B, N, 1]
        return self.fc(self.trunk(where) * self.branch(f))


sensors = 10
grid = torch.linspace(0, 2, sensors)
probe_f = torch.sin(3 * grid).unsqueeze(0).unsqueeze(1)
probe_at = grid.unsqueeze(0).unsqueeze(-1)
probe_truth = (1 - torch.cos(3 * grid)) / 3
print(probe_f.shape, probe_at.shape)


def probe_error(net):
    with torch.no_grad():
        return float((net.cpu()(probe_at, probe_f).squeeze() - probe_truth).pow(2).mean())


# --- data-driven fit --------------------------------------------------------------------
loader = DataLoader(Triples(*antiderivative_data(6, sensors, 7)), batch_size=3, shuffle=False)
net = OperatorNet(sensors, latent=8)
initialize(net)
optimiser = Adam(net.parameters(), lr=5e-3)
schedule = torch.optim.lr_scheduler.StepLR(optimiser, 2, 0.9)
for epoch in range(2):
    for where, f, target in loader:
        loss = (net(where, f) - target).pow(2).mean()
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        schedule.step()
        record.append(float(loss))
    error = probe_error(net)
    lr = schedule.get_last_lr()[0]
    print(f"epoch {epoch}: lr {lr:.3e} loss {float(loss):.3e} error {error:.3e}")
    record.append(error)
record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})


# --- physics-informed fit: d/dy G(u)(y) = u(y), G(u)(0) = 0 -------------------------------
def with_aux(module):
    def both(*args):
        value = module(*args)
        return value, value

    return both


def pointwise_jacobian(module):
    # over batch, then over query points (the function u is shared by a sample's queries)
    per_query = vmap(jacrev(with_aux(module), has_aux=True), (0, None))
    return vmap(per_query, 0)


pino = OperatorNet(sensors, latent=8)
initialize(pino)
jac = pointwise_jacobian(pino)
d_out, values = jac(torch.rand((2, 5, 1)), torch.rand((2, 1, sensors)))
print(d_out.shape, values.shape)
record.append(d_out.detach().numpy())
record.append(values.detach().numpy())

triples = Triples(*antiderivative_data(6, sensors, sensors, seed=8))
loader = DataLoader(triples, batch_size=3, shuffle=False)
optimiser = Adam(pino.parameters())
schedule = torch.optim.lr_scheduler.StepLR(optimiser, 2, 0.9)
for epoch in range(2):
    for where, f, _ in loader:
        d_out, values = jac(where, f)
        physics = (d_out.squeeze() - f.squeeze()).pow(2).mean()
        start = values[:, 0].squeeze().pow(2).mean()
        loss = 10 * physics + start
        loss.backward()
        optimiser.step()
        optimiser.zero_grad()
        schedule.step()
        record.append([float(physics), float(start)])
    print(f"epoch {epoch}: physics {float(physics):.3e} start {float(start):.3e}")
    record.append(probe_error(pino))
record.append({k: v.detach().numpy() for k, v in pino.state_dict().items()})
"""

DEEPONET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch.func import", "from retrograd.func import"),
    ("from torch.optim import", "from retrograd.optim import"),
    ("from torch.utils.data import", "from retrograd.utils.data import"),
    (
        "        loss.backward()\n        optimiser.step()\n",
        "        grads = loss.backward()\n        optimiser.step(grads)\n",
    ),
]


def test_deeponet_data_driven_and_physics_informed_by_vmap_of_jacrev_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    # torch's initial weights, which the port loads, the same whatever ran before on the
    # worker: a few of L-BFGS's or Adam's trajectories from other weights part by more
    # than the tolerance (rounding that a line search's branch or a long fit amplifies)
    torch.manual_seed(341)
    for lib in (torch, rg):
        record = []
        np.random.seed(341)
        text = DEEPONET_SOURCE if lib is torch else port(DEEPONET_SOURCE, DEEPONET_STEPS)
        with SharedDraws(lib, 341):  # torch.rand: one stream for both runs
            run_source(text, lib, record=record, initialize=initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1].replace("retrograd.Size", "torch.Size") == logs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
