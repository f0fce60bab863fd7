# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
pytorch/tutorials' beginner tutorials, run on small fake data against torch's run of the same
code from the same weights and draws.

- "What is torch.nn really?" (``beginner_source/nn_tutorial.py``), every refactoring step:
  the hand-made ``weights.requires_grad_()`` and ``torch.zeros(10, requires_grad=True)``
  updated by ``weights -= weights.grad * lr`` under ``torch.no_grad()``, the hand-written
  ``log_softmax`` and ``nll`` (``-input[range(target.shape[0]), target].mean()``),
  ``accuracy``, ``F.cross_entropy``, ``Mnist_Logistic`` with ``nn.Parameter`` and then
  ``nn.Linear``, ``optim.SGD``, ``TensorDataset`` sliced ``train_ds[i*bs : i*bs+bs]``,
  ``DataLoader(shuffle=True)``, ``loss_batch``/``fit``/``get_data`` with ``zip(*[...])`` of
  ``(loss.item(), len(xb))`` and ``np.multiply``, ``Mnist_CNN`` (``xb.view(-1, 1, 28, 28)``,
  ``F.avg_pool2d(xb, 4)``, ``xb.view(-1, xb.size(1))``), the ``Lambda`` module in an
  ``nn.Sequential``, ``WrappedDataLoader`` and ``nn.AdaptiveAvgPool2d(1)``, ``model.to(dev)``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


@pytest.fixture
def shared_permutations(monkeypatch):
    """``DataLoader(shuffle=True)`` of both libraries permuting by one seeded stream (each
    library's ``randperm`` draws from its own generator otherwise)."""
    streams = {}

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed)

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        streams[lib.__name__] = randperm
        if lib is torch:
            monkeypatch.setattr(torch, "randperm", randperm)
        else:
            monkeypatch.setattr(rg_sampler, "randperm", randperm)

    return for_lib


# -- What is torch.nn really? -----------------------------------------------------------------------
NN_REALLY_SOURCE = """
import math
import numpy as np
import torch

x_train, y_train, x_valid, y_valid = map(
    torch.tensor, (x_train, y_train, x_valid, y_valid)
)
n, c = x_train.shape
print(x_train, y_train)
print(x_train.shape)
print(y_train.min(), y_train.max())

weights = torch.randn(784, 10) / math.sqrt(784)
weights.requires_grad_()
bias = torch.zeros(10, requires_grad=True)

def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)

def model(xb):
    return log_softmax(xb @ weights + bias)

bs = 8  # batch size

xb = x_train[0:bs]  # a mini-batch from x
preds = model(xb)  # predictions
preds[0], preds.shape
print(preds[0], preds.shape)

def nll(input, target):
    return -input[range(target.shape[0]), target].mean()

loss_func = nll

yb = y_train[0:bs]
print(loss_func(preds, yb))

def accuracy(out, yb):
    preds = torch.argmax(out, dim=1)
    return (preds == yb).float().mean()

print(accuracy(preds, yb))
record.append(loss_func(preds, yb).item())
record.append(accuracy(preds, yb).item())

lr = 0.5  # learning rate
epochs = 2  # how many epochs to train for

for epoch in range(epochs):
    for i in range((n - 1) // bs + 1):
        #         set_trace()
        start_i = i * bs
        end_i = start_i + bs
        xb = x_train[start_i:end_i]
        yb = y_train[start_i:end_i]
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        with torch.no_grad():
            weights -= weights.grad * lr
            bias -= bias.grad * lr
            weights.grad.zero_()
            bias.grad.zero_()

print(loss_func(model(xb), yb), accuracy(model(xb), yb))
record.append(loss_func(model(xb), yb).item())
record.append({"weights": weights.detach().numpy().copy(), "bias": bias.detach().numpy().copy()})

import torch.nn.functional as F

loss_func = F.cross_entropy

def model(xb):
    return xb @ weights + bias

print(loss_func(model(xb), yb), accuracy(model(xb), yb))
record.append(loss_func(model(xb), yb).item())

from torch import nn

class Mnist_Logistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = nn.Parameter(torch.randn(784, 10) / math.sqrt(784))
        self.bias = nn.Parameter(torch.zeros(10))

    def forward(self, xb):
        return xb @ self.weights + self.bias

model = Mnist_Logistic()
print(loss_func(model(xb), yb))

def fit():
    for epoch in range(epochs):
        for i in range((n - 1) // bs + 1):
            start_i = i * bs
            end_i = start_i + bs
            xb = x_train[start_i:end_i]
            yb = y_train[start_i:end_i]
            pred = model(xb)
            loss = loss_func(pred, yb)

            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= p.grad * lr
                model.zero_grad()

fit()
print(loss_func(model(xb), yb))
record.append(loss_func(model(xb), yb).item())
record.append(params_of(model))

class Mnist_Logistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(784, 10)

    def forward(self, xb):
        return self.lin(xb)

model = Mnist_Logistic()
initialize(model)
print(loss_func(model(xb), yb))
fit()
print(loss_func(model(xb), yb))
record.append(params_of(model))

from torch import optim

def get_model():
    model = Mnist_Logistic()
    initialize(model)
    return model, optim.SGD(model.parameters(), lr=lr)

model, opt = get_model()
print(loss_func(model(xb), yb))

for epoch in range(epochs):
    for i in range((n - 1) // bs + 1):
        start_i = i * bs
        end_i = start_i + bs
        xb = x_train[start_i:end_i]
        yb = y_train[start_i:end_i]
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

print(loss_func(model(xb), yb))
record.append(params_of(model))

from torch.utils.data import TensorDataset

train_ds = TensorDataset(x_train, y_train)

model, opt = get_model()

for epoch in range(epochs):
    for i in range((n - 1) // bs + 1):
        xb, yb = train_ds[i * bs: i * bs + bs]
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

print(loss_func(model(xb), yb))
record.append(params_of(model))

from torch.utils.data import DataLoader

train_ds = TensorDataset(x_train, y_train)
train_dl = DataLoader(train_ds, batch_size=bs)

model, opt = get_model()

for epoch in range(epochs):
    for xb, yb in train_dl:
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

print(loss_func(model(xb), yb))
record.append(params_of(model))

train_ds = TensorDataset(x_train, y_train)
train_dl = DataLoader(train_ds, batch_size=bs, shuffle=True)

valid_ds = TensorDataset(x_valid, y_valid)
valid_dl = DataLoader(valid_ds, batch_size=bs * 2)

model, opt = get_model()

for epoch in range(epochs):
    model.train()
    for xb, yb in train_dl:
        pred = model(xb)
        loss = loss_func(pred, yb)

        loss.backward()
        opt.step()
        opt.zero_grad()

    model.eval()
    with torch.no_grad():
        valid_loss = sum(loss_func(model(xb), yb) for xb, yb in valid_dl)

    print(epoch, valid_loss / len(valid_dl))
    record.append((valid_loss / len(valid_dl)).item())

def loss_batch(model, loss_func, xb, yb, opt=None):
    loss = loss_func(model(xb), yb)

    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()

    return loss.item(), len(xb)

def fit(epochs, model, loss_func, opt, train_dl, valid_dl):
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            loss_batch(model, loss_func, xb, yb, opt)

        model.eval()
        with torch.no_grad():
            losses, nums = zip(
                *[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl]
            )
        val_loss = np.sum(np.multiply(losses, nums)) / np.sum(nums)

        print(epoch, val_loss)
        record.append(val_loss)

def get_data(train_ds, valid_ds, bs):
    return (
        DataLoader(train_ds, batch_size=bs, shuffle=True),
        DataLoader(valid_ds, batch_size=bs * 2),
    )

train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
model, opt = get_model()
fit(epochs, model, loss_func, opt, train_dl, valid_dl)
record.append(params_of(model))

class Mnist_CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

    def forward(self, xb):
        xb = xb.view(-1, 1, 28, 28)
        xb = F.relu(self.conv1(xb))
        xb = F.relu(self.conv2(xb))
        xb = F.relu(self.conv3(xb))
        xb = F.avg_pool2d(xb, 4)
        return xb.view(-1, xb.size(1))

lr = 0.1

model = Mnist_CNN()
initialize(model)
opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)

fit(epochs, model, loss_func, opt, train_dl, valid_dl)
record.append(params_of(model))

class Lambda(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, x):
        return self.func(x)


def preprocess(x):
    return x.view(-1, 1, 28, 28)

model = nn.Sequential(
    Lambda(preprocess),
    nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.AvgPool2d(4),
    Lambda(lambda x: x.view(x.size(0), -1)),
)
initialize(model)

opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)

fit(epochs, model, loss_func, opt, train_dl, valid_dl)
record.append(params_of(model))

def preprocess(x, y):
    return x.view(-1, 1, 28, 28), y


class WrappedDataLoader:
    def __init__(self, dl, func):
        self.dl = dl
        self.func = func

    def __len__(self):
        return len(self.dl)

    def __iter__(self):
        for b in self.dl:
            yield (self.func(*b))

train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
train_dl = WrappedDataLoader(train_dl, preprocess)
valid_dl = WrappedDataLoader(valid_dl, preprocess)

model = nn.Sequential(
    nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    Lambda(lambda x: x.view(x.size(0), -1)),
)
initialize(model)

opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
fit(epochs, model, loss_func, opt, train_dl, valid_dl)
record.append(params_of(model))

print(torch.cuda.is_available())
dev = torch.device(
    "cuda") if torch.cuda.is_available() else torch.device("cpu")

def preprocess(x, y):
    return x.view(-1, 1, 28, 28).to(dev), y.to(dev)

train_dl, valid_dl = get_data(train_ds, valid_ds, bs)
train_dl = WrappedDataLoader(train_dl, preprocess)
valid_dl = WrappedDataLoader(valid_dl, preprocess)

model.to(dev)
opt = optim.SGD(model.parameters(), lr=lr, momentum=0.9)
fit(epochs, model, loss_func, opt, train_dl, valid_dl)
record.append(params_of(model))
"""

NN_REALLY_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("from torch import optim\n", "from retrograd import optim\n"),
    (
        "        loss.backward()\n        with torch.no_grad():\n            weights -= weights.grad * lr\n            bias -= bias.grad * lr\n            weights.grad.zero_()\n            bias.grad.zero_()\n",
        "        grads = loss.backward()\n        with torch.no_grad():\n            weights -= weights.grad(grads) * lr\n            bias -= bias.grad(grads) * lr\n",
    ),
    (
        "            loss.backward()\n            with torch.no_grad():\n                for p in model.parameters():\n                    p -= p.grad * lr\n                model.zero_grad()\n",
        "            grads = loss.backward()\n            with torch.no_grad():\n                for p in model.parameters():\n                    p -= p.grad(grads) * lr\n                model.zero_grad()\n",
    ),
    ("        loss.backward()\n        opt.step()\n", "        grads = loss.backward()\n        opt.step(grads)\n"),
]


def test_what_is_torch_nn_really_every_step_trains_as_torch(capsys, shared_permutations):
    rng = np.random.default_rng(9301)
    data = {
        "x_train": (rng.uniform(0, 1, (16, 784)) * (rng.uniform(0, 1, (16, 784)) < 0.1)).astype(np.float32),
        "y_train": rng.integers(0, 10, 16),
        "x_valid": (rng.uniform(0, 1, (8, 784)) * (rng.uniform(0, 1, (8, 784)) < 0.1)).astype(np.float32),
        "y_valid": rng.integers(0, 10, 8),
    }
    shared_permutations(torch, 9301)
    shared_permutations(rg, 9301)
    (theirs, ours), _ = runs_with_draws(
        NN_REALLY_SOURCE, NN_REALLY_STEPS, capsys, 9301, initialize=initializer(), params_of=params_of, **data
    )
    assert len(theirs) == 28
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
