"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
an Interaction Network learning n-body velocities, trained a few batches against torch's run of
the same code from the same weights and batches.

- A program written here in the style of the interaction-network notebooks
  (higgsfield/interaction_network_pytorch): one-hot receiver and sender relation matrices
  filled in NumPy and wrapped as ``Variable(torch.FloatTensor(...))`` (float64 arrays into
  float32 tensors), ``senders.permute(0, 2, 1).bmm(objects)`` to gather each edge's objects and
  ``receivers.bmm(effects)`` to sum the effects on each receiver, relational and object MLPs
  over ``x.view(-1, size)`` (the relational one ending in a ReLU),
  ``Variable(torch.FloatTensor(target)).view(-1, 2)``, ``nn.MSELoss()`` and the default
  ``optim.Adam``, batches drawn by ``random.randint``; then a rollout stepping the positions
  by the predicted velocities under ``torch.no_grad()``.

The orbits come from a small NumPy gravity simulation written in the test (the data both runs
share). Compared against torch: the RMS errors, the weights after training, the rollout and the
log's length. ``initialize(...)`` gives the port torch's initial weights. The lines a port
changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import random

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


def simulate_orbits(bodies: int, steps: int, rng: np.random.Generator) -> np.ndarray:
    """``steps`` states of ``bodies`` bodies, each row (mass, x, y, vx, vy): a heavy body at
    rest at the origin and light ones on near-circular orbits, stepped by semi-implicit Euler
    under softened gravity."""
    strength, dt = 1e5, 1e-3
    state = np.zeros((bodies, 5))
    state[0, 0] = 100.0
    radius = rng.uniform(10.0, 100.0, bodies - 1)
    angle = rng.uniform(0.0, 2 * np.pi, bodies - 1)
    state[1:, 0] = rng.uniform(0.02, 9.0, bodies - 1)
    state[1:, 1], state[1:, 2] = radius * np.cos(angle), radius * np.sin(angle)
    speed = np.sqrt(strength * state[0, 0] / radius) / 1000  # (scaled down)
    state[1:, 3], state[1:, 4] = -speed * np.sin(angle), speed * np.cos(angle)
    states = [state.copy()]
    for _ in range(steps - 1):
        offsets = state[None, :, 1:3] - state[:, None, 1:3]  # [i, j]: from i to j
        dist = np.maximum(np.linalg.norm(offsets, axis=-1), 1.0)
        np.fill_diagonal(dist, np.inf)
        pull = strength * state[None, :, 0, None] * offsets / dist[..., None] ** 3
        state[:, 3:5] += pull.sum(axis=1) * dt
        state[:, 1:3] += state[:, 3:5] * dt
        states.append(state.copy())
    return np.stack(states)


INTERACTION_NETWORK_SOURCE = """
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.autograd import Variable  # (a no-op wrapper in modern torch)

bodies, features, effect_size = orbits.shape[1], 5, 16
edges = bodies * (bodies - 1)  # every ordered pair


def relation_matrices(batch):
    to_receiver = np.zeros((batch, bodies, edges))
    from_sender = np.zeros((batch, bodies, edges))
    pairs = [(r, s) for r in range(bodies) for s in range(bodies) if r != s]
    for e, (r, s) in enumerate(pairs):
        to_receiver[:, r, e] = 1.0
        from_sender[:, s, e] = 1.0
    return to_receiver, from_sender


def sample(orbits, batch):
    picks = [random.randint(0, len(orbits) - 2) for _ in range(batch)]
    now, then = orbits[picks], orbits[[p + 1 for p in picks]]
    to_receiver, from_sender = relation_matrices(batch)
    edge_info = np.zeros((batch, edges, 1))  # no per-edge attributes here
    wrap = lambda a: Variable(torch.FloatTensor(a))
    velocity = Variable(torch.FloatTensor(then[:, :, 3:])).view(-1, 2)
    return wrap(now), wrap(from_sender), wrap(to_receiver), wrap(edge_info), velocity


def mlp(sizes, last_relu):
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*(layers if last_relu else layers[:-1]))


class InteractionNet(nn.Module):
    def __init__(self, hidden=24):
        super().__init__()
        self.relation = mlp([2 * features + 1, hidden, hidden, effect_size], last_relu=True)
        self.update = mlp([features + effect_size, hidden, 2], last_relu=False)

    def forward(self, objects, from_sender, to_receiver, edge_info):
        batch = objects.size(0)
        senders = from_sender.permute(0, 2, 1).bmm(objects)
        receivers = to_receiver.permute(0, 2, 1).bmm(objects)
        pairs = torch.cat([senders, receivers, edge_info], 2)
        effects = self.relation(pairs.view(-1, pairs.size(2))).view(batch, edges, effect_size)
        incoming = to_receiver.bmm(effects)  # the effects summed on each receiver
        combined = torch.cat([objects, incoming], 2)
        return self.update(combined.view(-1, combined.size(2)))


net = InteractionNet()
initialize(net)
optimizer = optim.Adam(net.parameters())
criterion = nn.MSELoss()
errors = []
for epoch in range(2):
    for _ in range(2):
        objects, from_sender, to_receiver, edge_info, velocity = sample(orbits, 10)
        loss = criterion(net(objects, from_sender, to_receiver, edge_info), velocity)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        errors.append(np.sqrt(loss.item()))
    print("epoch %d: rms %.4f" % (epoch, np.sqrt(np.mean(errors))))
record.append(errors)
record.append({name: t.detach().numpy() for name, t in net.state_dict().items()})

with torch.no_grad():
    state = torch.FloatTensor(orbits[:1])
    _, from_sender, to_receiver, edge_info, _ = sample(orbits, 1)
    for _ in range(3):
        moved = net(state, from_sender, to_receiver, edge_info)[None]
        state = torch.cat([state[:, :, :1], state[:, :, 1:3] + 0.001 * moved, moved], 2)
        record.append(state.numpy())
"""

INTERACTION_NETWORK_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    ("from torch.autograd import", "from retrograd.autograd import"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_interaction_network_learns_n_body_velocities_as_torch(capsys):
    orbits = simulate_orbits(4, 30, np.random.default_rng(346))
    initialize, records, logs = initializer(), [], []
    torch.manual_seed(346)  # torch's initial weights, which the port loads
    for lib in (torch, rg):
        record = []
        random.seed(346)
        text = (
            INTERACTION_NETWORK_SOURCE
            if lib is torch
            else port(INTERACTION_NETWORK_SOURCE, INTERACTION_NETWORK_STEPS)
        )
        run_source(text, lib, record=record, initialize=initialize, orbits=orbits)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(logs[1].splitlines()) == len(logs[0].splitlines()) == 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
