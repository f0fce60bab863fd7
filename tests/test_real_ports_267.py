"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of pytorch/tutorials' first recipes (defining a network, what a ``state_dict`` is, saving
and loading across devices), run under torch and ported, from the same weights and draws:

- a small digit classifier defined the recipe way: ``super(DigitNet, self).__init__()`` in a
  two-space-indented class, ``nn.Dropout2d`` after ``F.max_pool2d`` and again on the 2-d
  output of a linear layer (torch's UserWarning for that), ``flatten(start_dim=1)``,
  ``F.log_softmax(x, dim=1)``, ``print(model)`` (the repr compared line for line),
  ``torch.rand((1, 1, 12, 12))`` with a tuple size, the output in ``eval()`` mode compared;
- a small colour-image network's ``state_dict`` and checkpoints: ``nn.MaxPool2d`` by keywords
  as a module, ``x.view(-1, n)``, ``optim.SGD(..., lr=..., momentum=0.9)``, ``net.state_dict()[key]
  .size()`` and ``optimizer.state_dict()[key]`` printed in loops, the optimizer's
  ``param_groups`` compared with torch's full default group; ``torch.save`` of the state dict
  and ``torch.load(path, map_location=...)`` with a ``torch.device('cpu')``, ``'cpu'``, a
  ``lambda storage, loc: storage`` and a ``{'cuda:0': 'cpu'}`` map, ``model.to(device)``,
  ``nn.DataParallel`` (its ``module.``-prefixed keys) and ``net.module.state_dict()`` saved and
  loaded into a plain network, the ``missing_keys``/``unexpected_keys`` of the load.

The lines changed: the ``import`` lines. Found and left: the optimizers' zero defaults print as
``0.0`` where torch's are the int ``0`` (equal values; the records compare them equal).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
    state_of,
)

DIGITS_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F

class DigitNet(nn.Module):
  def __init__(self):
    super(DigitNet, self).__init__()
    self.conv_a = nn.Conv2d(1, 8, 3, 1)
    self.conv_b = nn.Conv2d(8, 16, 3, 1)
    self.drop_maps = nn.Dropout2d(0.2)
    self.drop_hidden = nn.Dropout2d(0.4)
    self.hidden = nn.Linear(16 * 4 * 4, 32)
    self.head = nn.Linear(32, 10)

  def forward(self, image):
    h = F.relu(self.conv_a(image))
    h = F.max_pool2d(F.relu(self.conv_b(h)), 2)
    h = self.drop_maps(h)
    h = F.relu(self.hidden(h.flatten(start_dim=1)))
    # a 2-d input to Dropout2d: torch warns and drops whole rows of features
    h = self.drop_hidden(h)
    return F.log_softmax(self.head(h), dim=1)

classifier = DigitNet()
initialize(classifier)
print(classifier)
image = torch.rand((1, 1, 12, 12))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter('always')
    log_probs = classifier(image)
record.append(str(classifier).splitlines())
record.append([list(log_probs.shape), float(log_probs.exp().sum())])
record.append(sorted({w.category.__name__ for w in seen if "dropout2d" in str(w.message)}))
classifier.eval()
record.append(classifier(image).detach().numpy().copy())
"""

CHECKPOINT_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F

class TinyCifar(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Conv2d(3, 4, 3)
        self.second = nn.Conv2d(4, 8, 3)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.fc = nn.Linear(8 * 2 * 2, 16)
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.first(x)))
        x = self.pool(F.relu(self.second(x)))
        x = x.view(-1, 8 * 2 * 2)
        return self.out(F.relu(self.fc(x)))

net = TinyCifar()
initialize(net)
print(net)
sgd = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

print("parameters and buffers:")
for key in net.state_dict():
    print(key, net.state_dict()[key].size())
    record.append([key, list(net.state_dict()[key].size())])
print("optimizer:")
for key in sgd.state_dict():
    print(key, sgd.state_dict()[key])
record.append(list(sgd.state_dict()))
default_group = {'lr': 0.01, 'momentum': 0.9, 'dampening': 0, 'weight_decay': 0,
                 'nesterov': False, 'maximize': False, 'foreach': None,
                 'differentiable': False, 'fused': None, 'params': list(range(8))}
record.append(str(sgd.state_dict()["param_groups"] == [default_group]))
record.append(str(sgd.state_dict()["state"]))

checkpoint = "tiny_cifar.pth"
torch.save(net.state_dict(), checkpoint)
cpu = torch.device('cpu')
for where in (cpu, 'cpu', lambda storage, loc: storage, {'cuda:0': 'cpu'}):
    restored = TinyCifar()
    restored.load_state_dict(torch.load(checkpoint, map_location=where))
    restored.to(cpu)
    record.append(state_of(restored))

batch = torch.randn(2, 3, 14, 14)
wrapped = nn.DataParallel(net)
record.append(list(wrapped.state_dict())[:2])
record.append(wrapped(batch).detach().numpy().copy())
torch.save(wrapped.module.state_dict(), checkpoint)
plain = TinyCifar()
report = plain.load_state_dict(torch.load(checkpoint))
record.append([list(report.missing_keys), list(report.unexpected_keys)])
record.append(plain(batch).detach().numpy().copy())
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
]


def test_recipe_style_network_prints_and_runs_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        DIGITS_SOURCE,
        STEPS[:2],
        capsys,
        26701,
        initialize=initializer(),
        warnings=warnings,
    )
    assert (
        theirs[0][0] == "DigitNet("
        and "  (drop_maps): Dropout2d(p=0.2, inplace=False)" in theirs[0]
    )
    assert ours[0] == theirs[0]  # the module's repr, line for line
    assert theirs[1][0] == [1, 10] and ours[1][0] == [1, 10]
    assert ours[1][1] == pytest.approx(1.0, abs=1e-5)
    assert ours[2] == theirs[2] == ["UserWarning"]  # Dropout2d on the linear layer's output
    assert_records_agree(ours[3:], theirs[3:], rtol=1e-4, atol=1e-5)


def test_state_dict_and_checkpoints_across_devices_as_torch(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        CHECKPOINT_SOURCE, STEPS, capsys, 26702, initialize=initializer(), state_of=state_of
    )
    assert theirs[0] == ["first.weight", [4, 3, 3, 3]] and theirs[9] == "True"
    assert theirs[10] == "{}" and theirs[15] == ["module.first.weight", "module.first.bias"]
    assert theirs[17] == [[], []]
    assert ours[:11] == theirs[:11]
    assert_records_agree(ours[11:], theirs[11:], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(theirs[18], theirs[16], rtol=1e-6)
    assert our_log.splitlines()[:7] == their_log.splitlines()[:7]  # print(net)
