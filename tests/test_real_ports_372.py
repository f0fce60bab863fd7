"""Real ports, continued (the harness: ``tests/real_ports.py``): conditional flow matching, a
program written here in the style of the torchcfm library and its examples (8 Gaussians to
moons, small), against torch's run of the same text from the same weights and draws: the
independent, exact-OT, target (Lipman) and variance-preserving paths trained with Adam and
sampled by Euler steps of a ``f(t, x)`` field, a Schrodinger bridge with a flow and a score
network (``score_weight``, ``with_noise=True``) sampled by Euler-Maruyama, and action matching
through the input gradient of a scalar action; each sample scored by an exact Wasserstein
distance.

What it exercises: ``torch.rand(len(x0)).type_as(x0)``, ``t.reshape(-1, *[1] * (x.dim() - 1))``,
``isinstance(t, float)``, ``torch.cos(math.pi / 2 * t)``, ``torch.sqrt(t * (1 - t)) * sigma``;
the OT plan from ``torch.cdist(x0, x1) ** 2`` and ``cost.detach().cpu().numpy()``,
``np.random.choice`` over the flattened plan, ``np.divmod`` and ``x0[i], x1[j]`` indexed by
NumPy integer arrays; ``nn.Sequential`` of ``SELU``s; ``x.requires_grad_(True)`` and
``torch.autograd.grad(torch.sum(action(x)), x, create_graph=True)`` sliced ``[:, :-1]`` and
trained through the second derivative; ``t.repeat(n)[:, None]`` of a 0-d time from
``torch.linspace``, ``len(t.shape) == len(y.shape)``, ``torch.ones_like(t) *
torch.ones_like(y)``, ``torch.full``; ``Adam`` with a positional learning rate over two
networks' parameters.

Stand-ins: ``pot`` (POT) is a small module of ``unif``, ``emd`` and ``emd2`` (the exact plan of
two uniform batches of one size is an assignment: scipy's ``linear_sum_assignment``); the
samplers ``sample_8gaussians``/``sample_moons`` draw their points from NumPy's seeded stream.
The port changes the imports and the gradient lines (``grads = loss.backward()``,
``opt.step(grads)``).
"""

from __future__ import annotations

import types

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from real_ports import assert_records_agree, initializer, runs_with_draws

TORCHCFM_SOURCE = """
import math

import numpy as np
import torch


def match_time(t, x):
    # a per-sample time shaped to broadcast against x; a float time stays a float
    if isinstance(t, float):
        return t
    trailing = [1] * (x.dim() - 1)
    return t.reshape(-1, *trailing)


def ot_pairs(x0, x1):
    # resample the minibatch's pairs from the exact OT plan of squared distances
    cost = torch.cdist(x0, x1) ** 2
    plan = pot.emd(pot.unif(x0.shape[0]), pot.unif(x1.shape[0]), cost.detach().cpu().numpy())
    weights = plan.flatten() / plan.sum()
    picks = np.random.choice(plan.shape[0] * plan.shape[1], p=weights, size=x0.shape[0])
    i, j = np.divmod(picks, plan.shape[1])
    return x0[i], x1[j]


def w_distance(a, b, power=2):
    cost = torch.cdist(a, b)
    cost = cost**2 if power == 2 else cost
    value = pot.emd2(pot.unif(a.shape[0]), pot.unif(b.shape[0]), cost.detach().cpu().numpy())
    return math.sqrt(value) if power == 2 else value


class Path:
    # straight lines between independent pairs, with constant noise sigma
    def __init__(self, sigma=0.0, pairing=None):
        self.sigma, self.pairing = sigma, pairing

    def mean(self, x0, x1, t):
        t = match_time(t, x0)
        return t * x1 + (1 - t) * x0

    def std(self, t):
        return self.sigma

    def velocity(self, x0, x1, t, xt):
        return x1 - x0

    def draw(self, x0, x1, with_noise=False):
        if self.pairing is not None:
            x0, x1 = self.pairing(x0, x1)
        t = torch.rand(len(x0)).type_as(x0)
        noise = torch.randn_like(x0)
        xt = self.mean(x0, x1, t) + match_time(self.std(t), x0) * noise
        ut = self.velocity(x0, x1, t, xt)
        return (t, xt, ut, noise) if with_noise else (t, xt, ut)

    def score_weight(self, t):
        return 2 * self.std(t) / (self.sigma**2 + 1e-8)


class TargetPath(Path):
    # from N(0, 1) at t = 0 to N(x1, sigma) at t = 1
    def mean(self, x0, x1, t):
        return match_time(t, x1) * x1

    def std(self, t):
        return 1 - t + self.sigma * t

    def velocity(self, x0, x1, t, xt):
        t, shrink = match_time(t, x1), 1 - self.sigma
        return (x1 - shrink * xt) / (1 - shrink * t)


class TrigPath(Path):
    # variance preserving: a quarter turn from x0 to x1
    def mean(self, x0, x1, t):
        angle = math.pi / 2 * match_time(t, x0)
        return torch.cos(angle) * x0 + torch.sin(angle) * x1

    def velocity(self, x0, x1, t, xt):
        angle = math.pi / 2 * match_time(t, x0)
        return math.pi / 2 * (torch.cos(angle) * x1 - torch.sin(angle) * x0)


class BridgePath(Path):
    # Schrodinger bridge: Brownian-bridge noise between OT-paired ends
    def std(self, t):
        return torch.sqrt(t * (1 - t)) * self.sigma

    def velocity(self, x0, x1, t, xt):
        t = match_time(t, x0)
        ratio = (1 - 2 * t) / (2 * t * (1 - t) + 1e-8)
        return ratio * (xt - self.mean(x0, x1, t)) + x1 - x0


def mlp(inputs, outputs, width=32):
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, width), torch.nn.SELU(),
        torch.nn.Linear(width, width), torch.nn.SELU(),
        torch.nn.Linear(width, outputs),
    )


class ActionGradient(torch.nn.Module):
    # the velocity is the gradient in x of a scalar action (the time input, last, dropped)
    def __init__(self, action):
        super().__init__()
        self.action = action

    def forward(self, xt):
        xt = xt.requires_grad_(True)
        (g,) = torch.autograd.grad(torch.sum(self.action(xt)), xt, create_graph=True)
        return g[:, :-1]


class TimeField(torch.nn.Module):
    # f(t, x) with a 0-d time, as ODE solvers call it
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, t, x):
        return self.net(torch.cat([x, t.repeat(x.shape[0])[:, None]], 1))


class BridgeSDE(torch.nn.Module):
    noise_type, sde_type = "diagonal", "ito"

    def __init__(self, flow, score, reverse=False):
        super().__init__()
        self.flow, self.score, self.reverse = flow, score, reverse

    def f(self, t, y):
        t = 1 - t if self.reverse else t
        column = t if len(t.shape) == len(y.shape) else t.repeat(y.shape[0])[:, None]
        inputs = torch.cat([y, column], 1)
        return (-1 if self.reverse else 1) * self.flow(inputs) + self.score(inputs)

    def g(self, t, y):
        return torch.ones_like(y) * torch.ones_like(t)


def euler_ode(field, x, times):
    path = [x]
    for a, b in zip(times[:-1], times[1:]):
        x = x + (b - a) * field(a, x)
        path.append(x)
    return torch.stack(path)


def euler_maruyama(sde, y, times, dt):
    path = [y]
    for a, b in zip(times[:-1], times[1:]):
        t = a
        while t < b - 1e-6:
            h = min(dt, float(b - t))
            kick = math.sqrt(h) * torch.randn_like(y)
            y = y + h * sde.f(t, y) + sde.g(t, y) * kick
            t = t + h
        path.append(y)
    return torch.stack(path)


sigma, batch = 0.1, 32
reference = sample_moons(64)

for path in (Path(sigma), Path(sigma, pairing=ot_pairs), TargetPath(sigma), TrigPath(sigma)):
    net = mlp(3, 2)
    initialize(net)
    opt = torch.optim.Adam(net.parameters())
    for _ in range(3):
        opt.zero_grad()
        t, xt, ut = path.draw(sample_8gaussians(batch), sample_moons(batch))
        loss = torch.mean((net(torch.cat([xt, t[:, None]], dim=-1)) - ut) ** 2)
        loss.backward()
        opt.step()
        record.append(loss.item())
    with torch.no_grad():
        flow = euler_ode(TimeField(net), sample_8gaussians(64), torch.linspace(0, 1, 5))
    record.append(flow.numpy())
    record.append(w_distance(flow[-1], reference))
    record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})

# a flow and a score network on the bridge, sampled as an SDE
flow_net, score_net = mlp(3, 2), mlp(3, 2)
initialize(flow_net)
initialize(score_net)
opt = torch.optim.Adam(list(flow_net.parameters()) + list(score_net.parameters()), 1e-3)
bridge = BridgePath(sigma, pairing=ot_pairs)
for _ in range(3):
    opt.zero_grad()
    t, xt, ut, noise = bridge.draw(sample_8gaussians(batch), sample_moons(batch), with_noise=True)
    inputs = torch.cat([xt, t[:, None]], dim=-1)
    flow_loss = torch.mean((flow_net(inputs) - ut) ** 2)
    score_loss = torch.mean((bridge.score_weight(t)[:, None] * score_net(inputs) + noise) ** 2)
    loss = flow_loss + score_loss
    loss.backward()
    opt.step()
    record.append([float(flow_loss), float(score_loss)])
with torch.no_grad():
    sde = BridgeSDE(flow_net, score_net)
    sde_path = euler_maruyama(sde, sample_8gaussians(64), torch.linspace(0, 1, 3), dt=0.25)
    per_row_time = torch.full((64, 1), 0.25)
    back_drift = BridgeSDE(flow_net, score_net, reverse=True).f(per_row_time, sample_moons(64))
record.append(sde_path.numpy())
record.append(back_drift.numpy())
record.append(w_distance(sde_path[-1], reference, power=1))

# action matching: trained through the second derivative of the action
action = mlp(3, 1)
initialize(action)
field = ActionGradient(action)
opt = torch.optim.Adam(field.parameters(), 1e-2)
plain = Path(sigma)
for _ in range(3):
    opt.zero_grad()
    t, xt, ut = plain.draw(sample_8gaussians(batch), sample_moons(batch))
    loss = torch.mean((field(torch.cat([xt, t[:, None]], dim=-1)) - ut) ** 2)
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append({name: w.detach().numpy() for name, w in action.state_dict().items()})
"""

TORCHCFM_STEPS = [
    ("import numpy as np\nimport torch\n", "import numpy as np\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
    (
        "    loss.backward()\n    opt.step()\n",
        "    grads = loss.backward()\n    opt.step(grads)\n",
    ),
]


def ot_stand_in():
    """The part of POT (``import ot as pot``) that the exact sampler and ``wasserstein`` use."""

    def emd(a, b, cost, **_):
        rows, cols = linear_sum_assignment(cost)
        plan = np.zeros_like(cost, dtype=np.float64)
        plan[rows, cols] = a[rows]
        return plan

    def emd2(a, b, cost, **kwargs):
        return float((emd(a, b, cost) * cost).sum())

    return types.SimpleNamespace(unif=lambda n: np.ones(n) / n, emd=emd, emd2=emd2)


def make_sample_8gaussians(lib):
    centers = np.array(
        [(1, 0), (-1, 0), (0, 1), (0, -1)]
        + [(a / np.sqrt(2), b / np.sqrt(2)) for a in (1, -1) for b in (1, -1)]
    )

    def sample_8gaussians(n):  # eight Gaussians on a circle of radius 5, variance 0.1
        which = np.random.randint(0, 8, n)
        noise = np.random.standard_normal((n, 2)) * np.sqrt(np.sqrt(0.1))
        return lib.tensor(centers[which] * 5 + noise, dtype=lib.float32)

    return sample_8gaussians


def make_sample_moons(lib):
    def sample_moons(n):  # two moons, noise 0.2, scaled by 3 and shifted by -1
        angle = np.random.uniform(0, np.pi, n)
        upper = np.random.randint(0, 2, n).astype(bool)
        x = np.where(upper, np.cos(angle), 1 - np.cos(angle))
        y = np.where(upper, np.sin(angle), 0.5 - np.sin(angle))
        points = np.stack([x, y], 1) + np.random.standard_normal((n, 2)) * 0.2
        return lib.tensor(points * 3 - 1, dtype=lib.float32)

    return sample_moons


def test_torchcfm_matchers_sf2m_and_action_matching_train_and_sample_as_torch(capsys):
    torch.manual_seed(372)
    records, logs = runs_with_draws(
        TORCHCFM_SOURCE,
        TORCHCFM_STEPS,
        capsys,
        372,
        initialize=initializer(),
        pot=ot_stand_in(),
        make_sample_8gaussians=make_sample_8gaussians,
        make_sample_moons=make_sample_moons,
    )
    theirs, ours = records
    assert logs[1] == logs[0] == ""
    assert len(theirs) == 4 * (3 + 3) + 3 + 3 + 3 + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
