# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
three more of pytorch/tutorials' first recipes, run under torch and ported, from the same
weights and draws:

- "Defining a Neural Network in PyTorch" (``recipes_source/recipes/defining_a_neural_network.py``):
  the MNIST ``Net`` (``super(Net, self).__init__()`` with two-space indents, ``nn.Dropout2d``
  after ``max_pool2d`` and, on a 2-d input, after ``fc1``: torch's deprecation warning for it),
  ``print(my_nn)`` (the module's repr, compared line for line), ``torch.rand((1, 1, 28, 28))``
  and ``my_nn(random_data)``; the result's log-probabilities compared in ``eval()`` mode too;
- "What is a state_dict in PyTorch" (``what_is_state_dict.py``): the CIFAR ``Net``,
  ``optim.SGD(net.parameters(), lr=0.001, momentum=0.9)``, ``net.state_dict()[param_tensor]
  .size()`` and ``optimizer.state_dict()[var_name]`` printed in loops;
- "Saving and loading models across devices in PyTorch" (``save_load_across_devices.py``),
  on the CPU: ``torch.load(PATH, map_location=device)`` with ``torch.device('cpu')``, ``'cpu'``,
  a ``lambda storage, loc: storage`` and a ``{'cuda:0': 'cpu'}`` map, ``model.to(device)``, and
  ``torch.nn.DataParallel`` (its ``module.``-prefixed state dict, ``net.module.state_dict()``
  saved and loaded into a plain ``Net``).

The lines changed: the ``import`` lines. Found and left: the optimizers' zero defaults print as
``0.0`` where torch's are the int ``0`` (equal values; the records compare them equal).
"""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, runs_with_draws, state_of


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


DEFINING_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
      super(Net, self).__init__()
      self.conv1 = nn.Conv2d(1, 32, 3, 1)
      self.conv2 = nn.Conv2d(32, 64, 3, 1)
      self.dropout1 = nn.Dropout2d(0.25)
      self.dropout2 = nn.Dropout2d(0.5)
      self.fc1 = nn.Linear(9216, 128)
      self.fc2 = nn.Linear(128, 10)

    # x represents our data
    def forward(self, x):
      # Pass data through conv1
      x = self.conv1(x)
      # Use the rectified-linear activation function over x
      x = F.relu(x)

      x = self.conv2(x)
      x = F.relu(x)

      # Run max pooling over x
      x = F.max_pool2d(x, 2)
      # Pass data through dropout1
      x = self.dropout1(x)
      # Flatten x with start_dim=1
      x = x.flatten(start_dim=1)
      # Pass data through fc1
      x = self.fc1(x)
      x = F.relu(x)
      x = self.dropout2(x)
      x = self.fc2(x)

      # Apply softmax to x
      output = F.log_softmax(x, dim=1)
      return output

# Equates to one random 28x28 image
random_data = torch.rand((1, 1, 28, 28))

my_nn = Net()
initialize(my_nn)
print(my_nn)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = my_nn(random_data)
print (result)
record.append(str(my_nn).splitlines())
record.append([list(result.shape), float(result.exp().sum())])
record.append(sorted({str(w.category.__name__) for w in caught if "dropout2d" in str(w.message)}))
my_nn.eval()
record.append(my_nn(random_data).detach().numpy().copy())
"""

STATE_DICT_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(-1, 16 * 5 * 5)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

net = Net()
initialize(net)
print(net)

optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)

# Print model's state_dict
print("Model's state_dict:")
for param_tensor in net.state_dict():
    print(param_tensor, "\\t", net.state_dict()[param_tensor].size())
    record.append([param_tensor, list(net.state_dict()[param_tensor].size())])

print()

# Print optimizer's state_dict
print("Optimizer's state_dict:")
for var_name in optimizer.state_dict():
    print(var_name, "\\t", optimizer.state_dict()[var_name])
record.append(list(optimizer.state_dict()))
record.append(str(optimizer.state_dict()["param_groups"] == [{'lr': 0.001, 'momentum': 0.9, 'dampening': 0, 'weight_decay': 0, 'nesterov': False, 'maximize': False, 'foreach': None, 'differentiable': False, 'fused': None, 'params': list(range(10))}]))
record.append(str(optimizer.state_dict()["state"]))
"""

ACROSS_DEVICES_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F

class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.flatten(start_dim=1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x

net = Net()
initialize(net)
print(net)

# Specify a path to save to
PATH = "model.pt"

# Save
torch.save(net.state_dict(), PATH)

# Load
device = torch.device('cpu')
model = Net()
model.load_state_dict(torch.load(PATH, map_location=device))
record.append(state_of(model))

for location in ('cpu', lambda storage, loc: storage, {'cuda:0': 'cpu'}):
    model = Net()
    model.load_state_dict(torch.load(PATH, map_location=location))
    model.to(device)
    record.append(state_of(model))

x = torch.randn(2, 3, 32, 32)
net = torch.nn.DataParallel(net)
record.append(list(net.state_dict())[:3])
record.append(net(x).detach().numpy().copy())

# Save
torch.save(net.module.state_dict(), PATH)
model = Net()
keys = model.load_state_dict(torch.load(PATH))
record.append([list(keys.missing_keys), list(keys.unexpected_keys)])
record.append(model(x).detach().numpy().copy())
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
]


def test_defining_a_neural_network_recipe_prints_and_runs_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        DEFINING_SOURCE,
        [STEPS[0], STEPS[1], STEPS[3]],
        capsys,
        26701,
        initialize=initializer(),
        warnings=warnings,
    )
    assert theirs[0][0] == "Net(" and "  (dropout1): Dropout2d(p=0.25, inplace=False)" in theirs[0]
    assert ours[0] == theirs[0]  # the module's repr, line for line
    assert theirs[1][0] == [1, 10] and ours[1][0] == [1, 10]
    assert ours[1][1] == pytest.approx(1.0, abs=1e-5)
    assert ours[2] == theirs[2] == ["UserWarning"]  # dropout2d on fc1's 2-d output
    assert_records_agree(ours[3:], theirs[3:], rtol=1e-4, atol=1e-5)


def test_what_is_a_state_dict_recipe_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        STATE_DICT_SOURCE, STEPS, capsys, 26702, initialize=initializer()
    )
    assert theirs[0] == ["conv1.weight", [6, 3, 5, 5]] and theirs[-2] == "True"
    assert ours == theirs
    assert our_log.splitlines()[:9] == their_log.splitlines()[:9]  # print(net)


def test_saving_and_loading_across_devices_recipe_on_the_cpu_as_torch(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (theirs, ours), _ = runs_with_draws(
        ACROSS_DEVICES_SOURCE, STEPS, capsys, 26703, initialize=initializer(), state_of=state_of
    )
    assert theirs[4] == ["module.conv1.weight", "module.conv1.bias", "module.conv2.weight"]
    assert theirs[6] == [[], []]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(theirs[7], theirs[5], rtol=1e-6)
