# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the Interaction Network of higgsfield/interaction_network_pytorch (``Interaction
Network.ipynb``'s code cells, with ``Physics_Engine.py``'s n-body ``gen``), trained a few
batches against torch's run of the same code from the same weights and batches.

What it exercises: one-hot receiver and sender relation matrices filled in NumPy and wrapped as
``Variable(torch.FloatTensor(...))`` (float64 arrays into float32 tensors),
``sender_relations.permute(0, 2, 1).bmm(objects)`` to gather each edge's objects and
``receiver_relations.bmm(effects)`` to sum the effects on each receiver, the relational and
object MLPs over ``x.view(-1, input_size)`` (the last ReLU of the relational model included),
``Variable(torch.FloatTensor(target)).view(-1, 2)``, ``nn.MSELoss()`` and the default
``optim.Adam``; then the rollout the notebook's video cell makes, stepping the positions by the
predicted velocities under ``torch.no_grad()``.

The physics engine's ``total_state`` is small; ``USE_CUDA = False`` (no GPU here); the
plotting cells are left out; ``np.sqrt(loss.data[0])``, which modern torch refuses (``invalid
index of a 0-dim tensor``), reads ``loss.item()``. ``initialize(...)`` gives the port torch's
initial weights. The lines changed: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import random
from math import cos, pi, radians, sin

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

# -- Physics_Engine.py (NumPy only: the data both runs share) -------------------------------------
total_state = 40
fea_num = 5
G = 10**5
diff_t = 0.001


def init(total_state, n_body, fea_num, orbit):
    data = np.zeros((total_state, n_body, fea_num), dtype=float)
    if orbit:
        data[0][0][0] = 100
        data[0][0][1:5] = 0.0
        for i in range(1, n_body):
            data[0][i][0] = np.random.rand() * 8.98 + 0.02
            distance = np.random.rand() * 90.0 + 10.0
            theta = np.random.rand() * 360
            theta_rad = pi / 2 - radians(theta)
            data[0][i][1] = distance * cos(theta_rad)
            data[0][i][2] = distance * sin(theta_rad)
            data[0][i][3] = (
                -1
                * data[0][i][2]
                / norm(data[0][i][1:3])
                * (G * data[0][0][0] / norm(data[0][i][1:3]) ** 2)
                * distance
                / 1000
            )
            data[0][i][4] = (
                data[0][i][1]
                / norm(data[0][i][1:3])
                * (G * data[0][0][0] / norm(data[0][i][1:3]) ** 2)
                * distance
                / 1000
            )
    else:
        for i in range(n_body):
            data[0][i][0] = np.random.rand() * 8.98 + 0.02
            distance = np.random.rand() * 90.0 + 10.0
            theta = np.random.rand() * 360
            theta_rad = pi / 2 - radians(theta)
            data[0][i][1] = distance * cos(theta_rad)
            data[0][i][2] = distance * sin(theta_rad)
            data[0][i][3] = np.random.rand() * 6.0 - 3.0
            data[0][i][4] = np.random.rand() * 6.0 - 3.0
    return data


def norm(x):
    return np.sqrt(np.sum(x**2))


def get_f(reciever, sender):
    diff = sender[1:3] - reciever[1:3]
    distance = norm(diff)
    if distance < 1:
        distance = 1
    return G * reciever[0] * sender[0] / (distance**3) * diff


def calc(cur_state, n_body):
    next_state = np.zeros((n_body, fea_num), dtype=float)
    f_mat = np.zeros((n_body, n_body, 2), dtype=float)
    f_sum = np.zeros((n_body, 2), dtype=float)
    acc = np.zeros((n_body, 2), dtype=float)
    for i in range(n_body):
        for j in range(i + 1, n_body):
            if j != i:
                f = get_f(cur_state[i][:3], cur_state[j][:3])
                f_mat[i, j] += f
                f_mat[j, i] -= f
        f_sum[i] = np.sum(f_mat[i], axis=0)
        acc[i] = f_sum[i] / cur_state[i][0]
        next_state[i][0] = cur_state[i][0]
        next_state[i][3:5] = cur_state[i][3:5] + acc[i] * diff_t
        next_state[i][1:3] = cur_state[i][1:3] + next_state[i][3:5] * diff_t
    return next_state


def gen(n_body, orbit):
    # initialization on just first state
    data = init(total_state, n_body, fea_num, orbit)
    for i in range(1, total_state):
        data[i] = calc(data[i - 1], n_body)
    return data


INTERACTION_NETWORK_SOURCE = """
import os
import random
import time

import numpy as np

import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F
from torch.autograd import Variable
from torch.utils.data import Dataset, DataLoader

USE_CUDA = False

n_objects  = 5 # number of planets(nodes)
object_dim = 5 # features: mass, x coordinate, y coordinate, speed on x-axis, speed on y-axis

n_relations  = n_objects * (n_objects - 1) # number of edges in fully connected graph
relation_dim = 1

effect_dim = 100 #effect's vector size

data = gen(n_objects, True)

def get_batch(data, batch_size):
    rand_idx  = [random.randint(0, len(data) - 2) for _ in range(batch_size)]
    label_idx = [idx + 1 for idx in rand_idx]

    batch_data = data[rand_idx]
    label_data = data[label_idx]

    objects = batch_data[:,:,:5]


    #receiver_relations, sender_relations - onehot encoding matrices
    #each column indicates the receiver and sender object’s index

    receiver_relations = np.zeros((batch_size, n_objects, n_relations), dtype=float);
    sender_relations   = np.zeros((batch_size, n_objects, n_relations), dtype=float);

    cnt = 0
    for i in range(n_objects):
        for j in range(n_objects):
            if(i != j):
                receiver_relations[:, i, cnt] = 1.0
                sender_relations[:, j, cnt]   = 1.0
                cnt += 1

    #There is no relation info in solar system task, just fill with zeros
    relation_info = np.zeros((batch_size, n_relations, relation_dim))
    target = label_data[:,:,3:]

    objects            = Variable(torch.FloatTensor(objects))
    sender_relations   = Variable(torch.FloatTensor(sender_relations))
    receiver_relations = Variable(torch.FloatTensor(receiver_relations))
    relation_info      = Variable(torch.FloatTensor(relation_info))
    target             = Variable(torch.FloatTensor(target)).view(-1, 2)

    if USE_CUDA:
        objects            = objects.cuda()
        sender_relations   = sender_relations.cuda()
        receiver_relations = receiver_relations.cuda()
        relation_info      = relation_info.cuda()
        target             = target.cuda()

    return objects, sender_relations, receiver_relations, relation_info, target

class RelationalModel(nn.Module):
    def __init__(self, input_size, output_size, hidden_size):
        super(RelationalModel, self).__init__()

        self.output_size = output_size

        self.layers = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, output_size),
            nn.ReLU()
        )

    def forward(self, x):
        '''
        Args:
            x: [batch_size, n_relations, input_size]
        Returns:
            [batch_size, n_relations, output_size]
        '''
        batch_size, n_relations, input_size = x.size()
        x = x.view(-1, input_size)
        x = self.layers(x)
        x = x.view(batch_size, n_relations, self.output_size)
        return x

class ObjectModel(nn.Module):
    def __init__(self, input_size, hidden_size):
        super(ObjectModel, self).__init__()

        self.layers = nn.Sequential(
            nn.Linear(input_size, hidden_size),
            nn.ReLU(),
            nn.Linear(hidden_size, 2), #speedX and speedY
        )

    def forward(self, x):
        '''
        Args:
            x: [batch_size, n_objects, input_size]
        Returns:
            [batch_size * n_objects, 2] speedX and speedY
        '''
        input_size = x.size(2)
        x = x.view(-1, input_size)
        return self.layers(x)

class InteractionNetwork(nn.Module):
    def __init__(self, n_objects, object_dim, n_relations, relation_dim, effect_dim):
        super(InteractionNetwork, self).__init__()

        self.relational_model = RelationalModel(2*object_dim + relation_dim, effect_dim, 150)
        self.object_model     = ObjectModel(object_dim + effect_dim, 100)

    def forward(self, objects, sender_relations, receiver_relations, relation_info):
        senders   = sender_relations.permute(0, 2, 1).bmm(objects)
        receivers = receiver_relations.permute(0, 2, 1).bmm(objects)
        effects = self.relational_model(torch.cat([senders, receivers, relation_info], 2))
        effect_receivers = receiver_relations.bmm(effects)
        predicted = self.object_model(torch.cat([objects, effect_receivers], 2))
        return predicted

interaction_network = InteractionNetwork(n_objects, object_dim, n_relations, relation_dim, effect_dim)
initialize(interaction_network)

if USE_CUDA:
    interaction_network = interaction_network.cuda()

optimizer = optim.Adam(interaction_network.parameters())
criterion = nn.MSELoss()

n_epoch = 2
batches_per_epoch = 3

losses = []
for epoch in range(n_epoch):
    for _ in range(batches_per_epoch):
        objects, sender_relations, receiver_relations, relation_info, target = get_batch(data, 30)
        predicted = interaction_network(objects, sender_relations, receiver_relations, relation_info)
        loss = criterion(predicted, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(np.sqrt(loss.item()))

    print('Epoch %s RMS Error %s' % (epoch, np.sqrt(np.mean(losses[-100:]))))
record.append(losses)
record.append({k: v.detach().numpy() for k, v in interaction_network.state_dict().items()})

# the video cell's rollout: positions stepped by the predicted velocities
with torch.no_grad():
    state = torch.FloatTensor(data[:1])
    _, sender_relations, receiver_relations, relation_info, _ = get_batch(data, 1)
    for step in range(4):
        velocity = interaction_network(state, sender_relations, receiver_relations, relation_info)
        state = torch.cat([state[:, :, :1], state[:, :, 1:3] + velocity[None] * 0.001, velocity[None]], 2)
        record.append(state.numpy())
"""

INTERACTION_NETWORK_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_interaction_network_learns_n_body_velocities_as_torch(capsys):
    initialize, records, logs = initializer(), [], []
    # torch's initial weights, which the port loads, the same whatever ran before on the
    # worker: a few of L-BFGS's or Adam's trajectories from other weights part by more
    # than the tolerance (rounding that a line search's branch or a long fit amplifies)
    torch.manual_seed(346)
    for lib in (torch, rg):
        record = []
        np.random.seed(346)
        random.seed(346)
        text = (
            INTERACTION_NETWORK_SOURCE
            if lib is torch
            else port(INTERACTION_NETWORK_SOURCE, INTERACTION_NETWORK_STEPS)
        )
        text = text.replace("from torch.", "from retrograd.") if lib is rg else text
        run_source(text, lib, record=record, initialize=initialize, gen=gen)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert len(logs[1].splitlines()) == len(logs[0].splitlines()) == 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
