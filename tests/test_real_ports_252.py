# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
continual learning. Elastic weight consolidation as moskomule/ewc.pytorch writes it
(``utils.py``'s ``EWC`` with its diagonal Fisher from squared gradients of single-sample
losses, ``ewc_train`` and the ``demo.ipynb`` loop over permuted tasks) and A-GEM as the GEM
code base writes its gradient buffers (``store_grad``/``overwrite_grad`` of
facebookresearch/GradientEpisodicMemory ``model/gem.py``) with mammoth's ``agem.py``
``project`` and ``observe``, each trained over three tasks against torch's run of the same
code from the same weights and draws.

What it exercises: ``deepcopy`` of a dict of parameters; ``p.data.zero_()`` on the copies;
``precision_matrices[n].data += p.grad.data ** 2 / len(self.dataset)``; ``Variable(t)``
behind ``torch.cuda.is_available()``; ``output.max(1)[1].view(-1)``; ``loss += _loss.sum()``
from ``loss = 0``; ``random.sample`` of tensors; ``grads[begin: end].copy_(param.grad.data
.view(-1))`` writing through a slice of a flat buffer; ``torch.dot``; ``dot_prod.item() < 0``;
``param.grad.data.copy_(this_grad)`` overwriting a gradient the optimizer then applies;
``np.sum(grad_dims[:count + 1])`` as a slice end; ``torch.Tensor(sum(self.grad_dims))``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``;
``p.grad`` read from ``grads``, which ``store_grad``/``overwrite_grad`` are given;
``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


EWC_SOURCE = """
from copy import deepcopy

import torch
from torch import nn
from torch.nn import functional as F
from torch.autograd import Variable
import torch.utils.data


def variable(t: torch.Tensor, use_cuda=True, **kwargs):
    if torch.cuda.is_available() and use_cuda:
        t = t.cuda()
    return Variable(t, **kwargs)


class EWC(object):
    def __init__(self, model: nn.Module, dataset: list):

        self.model = model
        self.dataset = dataset

        self.params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        self._means = {}
        self._precision_matrices = self._diag_fisher()

        for n, p in deepcopy(self.params).items():
            self._means[n] = variable(p.data)

    def _diag_fisher(self):
        precision_matrices = {}
        for n, p in deepcopy(self.params).items():
            p.data.zero_()
            precision_matrices[n] = variable(p.data)

        self.model.eval()
        for input in self.dataset:
            self.model.zero_grad()
            input = variable(input)
            output = self.model(input).view(1, -1)
            label = output.max(1)[1].view(-1)
            loss = F.nll_loss(F.log_softmax(output, dim=1), label)
            loss.backward()

            for n, p in self.model.named_parameters():
                precision_matrices[n].data += p.grad.data ** 2 / len(self.dataset)

        precision_matrices = {n: p for n, p in precision_matrices.items()}
        return precision_matrices

    def penalty(self, model: nn.Module):
        loss = 0
        for n, p in model.named_parameters():
            _loss = self._precision_matrices[n] * (p - self._means[n]) ** 2
            loss += _loss.sum()
        return loss


def normal_train(model: nn.Module, optimizer: torch.optim, data_loader: torch.utils.data.DataLoader):
    model.train()
    epoch_loss = 0
    for input, target in data_loader:
        input, target = variable(input), variable(target)
        optimizer.zero_grad()
        output = model(input)
        loss = F.cross_entropy(output, target)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
    return epoch_loss / len(data_loader)


def ewc_train(model: nn.Module, optimizer: torch.optim, data_loader: torch.utils.data.DataLoader,
              ewc: EWC, importance: float):
    model.train()
    epoch_loss = 0
    for input, target in data_loader:
        input, target = variable(input), variable(target)
        optimizer.zero_grad()
        output = model(input)
        loss = F.cross_entropy(output, target) + importance * ewc.penalty(model)
        epoch_loss += loss.item()
        loss.backward()
        optimizer.step()
    return epoch_loss / len(data_loader)


def test(model: nn.Module, data_loader: torch.utils.data.DataLoader):
    model.eval()
    correct = 0
    for input, target in data_loader:
        input, target = variable(input), variable(target)
        output = model(input)
        correct += (F.softmax(output, dim=1).max(dim=1)[1] == target).data.sum()
    return correct.item() / len(data_loader.dataset)


class MLP(nn.Module):
    def __init__(self, hidden_size=24):
        super(MLP, self).__init__()
        self.fc1 = nn.Linear(12, hidden_size)
        self.fc2 = nn.Linear(hidden_size, hidden_size)
        self.fc3 = nn.Linear(hidden_size, 4)

    def forward(self, input):
        x = F.relu(self.fc1(input))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


class Loader(list):
    dataset = property(lambda self: [row for x, _ in self for row in x])


train_loader = [Loader((torch.tensor(x), torch.tensor(y)) for x, y in task) for task in tasks]
test_loader = train_loader
epochs, lr, importance, sample_size = 2, 1e-2, 100, 6

model = MLP()
initialize(model)
optimizer = torch.optim.SGD(params=model.parameters(), lr=lr)

loss, acc, ewc = {}, {}, {}
for task in range(len(tasks)):
    loss[task] = []
    acc[task] = []

    if task == 0:
        for _ in range(epochs):
            loss[task].append(normal_train(model, optimizer, train_loader[task]))
            acc[task].append(test(model, test_loader[task]))
    else:
        old_tasks = []
        for sub_task in range(task):
            old_tasks = old_tasks + train_loader[sub_task].dataset
        old_tasks = random.sample(old_tasks, k=sample_size)
        for _ in range(epochs):
            ewc_ = EWC(model, old_tasks)
            record.append({n: m.detach().numpy() for n, m in ewc_._precision_matrices.items()})
            loss[task].append(ewc_train(model, optimizer, train_loader[task], ewc_, importance))
            for sub_task in range(task + 1):
                acc[sub_task].append(test(model, test_loader[sub_task]))
    record.append(loss[task])
    record.append([acc[t] for t in range(task + 1)])
    record.append(params_of(model))
"""

EWC_STEPS = [
    ("import torch\nfrom torch import nn", "import retrograd as torch\nfrom retrograd import nn"),
    ("import torch.utils.data\n", "import retrograd.utils.data\n"),
    (
        "            loss.backward()\n\n            for n, p in self.model.named_parameters():\n                precision_matrices[n].data += p.grad.data",
        "            grads = loss.backward()\n\n            for n, p in self.model.named_parameters():\n                precision_matrices[n].data += p.grad(grads).data",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def _permuted_tasks(rng, n_tasks, n_rows, batch):
    """Three 4-class tasks on the same 12 features, each a fixed permutation of them."""
    centres = rng.standard_normal((4, 12)) * 1.5
    labels = rng.integers(0, 4, n_rows)
    features = (centres[labels] + rng.standard_normal((n_rows, 12))).astype(np.float32)
    tasks = []
    for _ in range(n_tasks):
        permuted = features[:, rng.permutation(12)]
        tasks.append(
            [(permuted[k : k + batch], labels[k : k + batch]) for k in range(0, n_rows, batch)]
        )
    return tasks


def test_ewc_consolidates_each_task_with_a_diagonal_fisher_as_torch(capsys):
    rng = np.random.default_rng(25201)
    tasks = _permuted_tasks(rng, 3, 32, 8)
    (theirs, ours), _ = runs_with_draws(
        EWC_SOURCE, EWC_STEPS, capsys, 25201, tasks=tasks, random=random,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-6)
    # the Fisher diagonals are not all zero, and the penalty is in play (importance 100)
    assert max(float(np.abs(v).max()) for v in theirs[3].values()) > 1e-4


AGEM_SOURCE = '''
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def store_grad(params, grads, grad_dims):
    """
        This stores parameter gradients of past tasks.
        pp: parameters
        grads: gradients
        grad_dims: list with number of parameters per layers
    """
    # store the gradients
    grads.fill_(0.0)
    count = 0
    for param in params():
        if param.grad is not None:
            begin = 0 if count == 0 else sum(grad_dims[:count])
            end = np.sum(grad_dims[:count + 1])
            grads[begin: end].copy_(param.grad.data.view(-1))
        count += 1


def overwrite_grad(params, newgrad, grad_dims):
    """
        This is used to overwrite the gradients with a new gradient
        vector, whenever violations occur.
        pp: parameters
        newgrad: corrected gradient
        grad_dims: list storing number of parameters at each layer
    """
    count = 0
    for param in params():
        if param.grad is not None:
            begin = 0 if count == 0 else sum(grad_dims[:count])
            end = sum(grad_dims[:count + 1])
            this_grad = newgrad[begin: end].contiguous().view(
                param.grad.data.size())
            param.grad.data.copy_(this_grad)
        count += 1


def project(gxy: torch.Tensor, ger: torch.Tensor) -> torch.Tensor:
    corr = torch.dot(gxy, ger) / torch.dot(ger, ger)
    return gxy - corr * ger


class Buffer:
    """Reservoir sampling, as mammoth's buffer (the examples and labels kept as lists)."""

    def __init__(self, buffer_size):
        self.buffer_size = buffer_size
        self.num_seen_examples = 0
        self.examples, self.labels = [], []

    def is_empty(self):
        return self.num_seen_examples == 0

    def add_data(self, examples, labels):
        for i in range(examples.shape[0]):
            if self.num_seen_examples < self.buffer_size:
                index = self.num_seen_examples
            else:
                index = np.random.randint(0, self.num_seen_examples + 1)
                index = index if index < self.buffer_size else -1
            self.num_seen_examples += 1
            if index >= 0 and index < len(self.examples):
                self.examples[index], self.labels[index] = examples[i], labels[i]
            elif index >= 0:
                self.examples.append(examples[i])
                self.labels.append(labels[i])

    def get_data(self, size):
        choice = np.random.choice(len(self.examples), size=min(size, len(self.examples)), replace=False)
        return torch.stack([self.examples[c] for c in choice]), torch.stack([self.labels[c] for c in choice])


class AGem(nn.Module):
    NAME = 'agem'

    def __init__(self, backbone, loss, lr, buffer_size, minibatch_size):
        super(AGem, self).__init__()
        self.net = backbone
        self.loss = loss
        self.opt = torch.optim.SGD(self.net.parameters(), lr=lr)
        self.minibatch_size = minibatch_size

        self.buffer = Buffer(buffer_size)
        self.grad_dims = []
        for param in self.parameters():
            self.grad_dims.append(param.data.numel())
        self.grad_xy = torch.Tensor(np.sum(self.grad_dims))
        self.grad_er = torch.Tensor(np.sum(self.grad_dims))

    def end_task(self, examples, labels):
        self.buffer.add_data(examples=examples, labels=labels)

    def observe(self, inputs, labels):

        self.zero_grad()
        p = self.net.forward(inputs)
        loss = self.loss(p, labels)
        loss.backward()

        if not self.buffer.is_empty():
            store_grad(self.parameters, self.grad_xy, self.grad_dims)

            buf_inputs, buf_labels = self.buffer.get_data(self.minibatch_size)
            self.net.zero_grad()
            buf_outputs = self.net.forward(buf_inputs)
            penalty = self.loss(buf_outputs, buf_labels)
            penalty.backward()
            store_grad(self.parameters, self.grad_er, self.grad_dims)

            dot_prod = torch.dot(self.grad_xy, self.grad_er)
            if dot_prod.item() < 0:
                g_tilde = project(gxy=self.grad_xy, ger=self.grad_er)
                overwrite_grad(self.parameters, g_tilde, self.grad_dims)
            else:
                overwrite_grad(self.parameters, self.grad_xy, self.grad_dims)

        self.opt.step()

        return loss.item()


backbone = nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 4))
initialize(backbone)
model = AGem(backbone, F.cross_entropy, lr=0.2, buffer_size=12, minibatch_size=6)
projected = 0
for task in tasks:
    for x, y in task:
        inputs, labels = torch.tensor(x), torch.tensor(y)
        record.append(model.observe(inputs, labels))
        if not model.buffer.is_empty():
            record.append([model.grad_xy.numpy().copy(), model.grad_er.numpy().copy()])
            projected += int(torch.dot(model.grad_xy, model.grad_er).item() < 0)
    record.append(params_of(model))
    model.end_task(inputs, labels)
record.append(projected)
'''

AGEM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    (
        "def store_grad(params, grads, grad_dims):",
        "def store_grad(params, grads, grad_dims, gradients):",
    ),
    (
        "def overwrite_grad(params, newgrad, grad_dims):",
        "def overwrite_grad(params, newgrad, grad_dims, gradients):",
    ),
    ("        if param.grad is not None:", "        if param.grad(gradients) is not None:"),
    ("param.grad.data", "param.grad(gradients).data"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    (
        "            store_grad(self.parameters, self.grad_xy, self.grad_dims)",
        "            store_grad(self.parameters, self.grad_xy, self.grad_dims, grads)",
    ),
    (
        "            penalty.backward()\n            store_grad(self.parameters, self.grad_er, self.grad_dims)",
        "            grads = penalty.backward()\n            store_grad(self.parameters, self.grad_er, self.grad_dims, grads)",
    ),
    (
        "overwrite_grad(self.parameters, g_tilde, self.grad_dims)",
        "overwrite_grad(self.parameters, g_tilde, self.grad_dims, grads)",
    ),
    (
        "overwrite_grad(self.parameters, self.grad_xy, self.grad_dims)",
        "overwrite_grad(self.parameters, self.grad_xy, self.grad_dims, grads)",
    ),
    ("        self.opt.step()", "        self.opt.step(grads)"),
]


def test_agem_projects_the_gradient_on_the_memory_gradient_as_torch(capsys):
    rng = np.random.default_rng(25202)
    tasks = _permuted_tasks(rng, 3, 24, 6)
    (theirs, ours), _ = runs_with_draws(
        AGEM_SOURCE, AGEM_STEPS, capsys, 25202, tasks=tasks,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-6)
    assert theirs[-1] > 0  # some steps conflicted with the memory and were projected
