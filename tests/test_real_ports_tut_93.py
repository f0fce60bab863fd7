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
  ``nn.Sequential``, ``WrappedDataLoader`` and ``nn.AdaptiveAvgPool2d(1)``, ``model.to(dev)``;
- the autograd tutorials (``basics/autogradqs_tutorial.py``, ``blitz/autograd_tutorial.py``):
  ``binary_cross_entropy_with_logits``, ``grad_fn`` and ``is_leaf``, ``requires_grad`` under
  ``no_grad`` and after ``detach()``, ``out.backward(torch.ones_like(out),
  retain_graph=True)`` twice (the accumulated gradient: here the sum of the two returned
  ``Gradients``) and after ``inp.grad.zero_()`` (here a fresh backward),
  ``Q.backward(gradient=external_grad)``, frozen parameters (``param.requires_grad = False``)
  with a new ``fc`` trained alone, and ``retain_grad()`` on a non-leaf;
- the blitz's neural networks tutorial (``blitz/neural_networks_tutorial.py``): the LeNet,
  ``out.backward(torch.randn(1, 10))``, ``loss.grad_fn.next_functions[0][0]`` walked two steps,
  the manual ``f.data.sub_(f.grad.data * learning_rate)`` and ``optim.SGD``;
- "Forward-mode Automatic Differentiation" (``intermediate_source/forward_ad_usage.py``):
  ``fwAD.dual_level()``, ``make_dual``/``unpack_dual`` (``.tangent is tangent``), duals set on a
  module by ``delattr``/``setattr`` and passed through ``functional_call``, a custom
  ``Function`` with a ``jvp`` staticmethod and no ``backward``, ``gradcheck(...,
  check_forward_ad=True, check_backward_ad=False, ...)``, and ``torch.func.jvp`` with a
  ``functools.partial`` and with a dict of parameters.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``p.grad(grads)``, ``optimizer.step(grads)``). The defects found: there was no
``torch.autograd.forward_ad`` (and ``gradcheck`` refused ``check_forward_ad=True``); it is
now there, computing tangents by the double-backward trick. And ``grad_fn`` was a plain string,
so ``loss.grad_fn.next_functions`` failed; it is now a node (still that string) with torch's
``name()`` and ``next_functions``.
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
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def test_what_is_torch_nn_really_every_step_trains_as_torch(capsys, shared_permutations):
    rng = np.random.default_rng(9301)
    data = {
        "x_train": (rng.uniform(0, 1, (16, 784)) * (rng.uniform(0, 1, (16, 784)) < 0.1)).astype(
            np.float32
        ),
        "y_train": rng.integers(0, 10, 16),
        "x_valid": (rng.uniform(0, 1, (8, 784)) * (rng.uniform(0, 1, (8, 784)) < 0.1)).astype(
            np.float32
        ),
        "y_valid": rng.integers(0, 10, 8),
    }
    shared_permutations(torch, 9301)
    shared_permutations(rg, 9301)
    (theirs, ours), _ = runs_with_draws(
        NN_REALLY_SOURCE,
        NN_REALLY_STEPS,
        capsys,
        9301,
        initialize=initializer(),
        params_of=params_of,
        **data,
    )
    assert len(theirs) == 28
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- the autograd tutorials -------------------------------------------------------------------------
AUTOGRAD_SOURCE = """
import torch

# basics/autogradqs_tutorial.py
x = torch.ones(5)  # input tensor
y = torch.zeros(3)  # expected output
w = torch.randn(5, 3, requires_grad=True)
b = torch.randn(3, requires_grad=True)
z = torch.matmul(x, w)+b
loss = torch.nn.functional.binary_cross_entropy_with_logits(z, y)

print(f"Gradient function for z = {z.grad_fn}")
print(f"Gradient function for loss = {loss.grad_fn}")
record.append([z.grad_fn is None, loss.grad_fn is None, w.grad_fn is None, w.is_leaf, z.is_leaf])

loss.backward()
print(w.grad)
print(b.grad)
record.append(w.grad.numpy().copy())
record.append(b.grad.numpy().copy())

z = torch.matmul(x, w)+b
print(z.requires_grad)
record.append(z.requires_grad)

with torch.no_grad():
    z = torch.matmul(x, w)+b
print(z.requires_grad)
record.append(z.requires_grad)

z = torch.matmul(x, w)+b
z_det = z.detach()
print(z_det.requires_grad)
record.append(z_det.requires_grad)

inp = torch.eye(4, 5, requires_grad=True)
out = (inp+1).pow(2).t()
out.backward(torch.ones_like(out), retain_graph=True)
print(f"First call\\n{inp.grad}")
record.append(inp.grad.numpy().copy())
out.backward(torch.ones_like(out), retain_graph=True)
print(f"\\nSecond call\\n{inp.grad}")
record.append(inp.grad.numpy().copy())
inp.grad.zero_()
out.backward(torch.ones_like(out), retain_graph=True)
print(f"\\nCall after zeroing gradients\\n{inp.grad}")
record.append(inp.grad.numpy().copy())

# blitz/autograd_tutorial.py (a small convnet for resnet18)
model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))
initialize(model)
data = torch.rand(1, 3, 8, 8)
labels = torch.rand(1, 10)

prediction = model(data) # forward pass
loss = (prediction - labels).sum()
loss.backward() # backward pass

optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
optim.step() #gradient descent
record.append(params_of(model))

a = torch.tensor([2., 3.], requires_grad=True)
b = torch.tensor([6., 4.], requires_grad=True)
Q = 3*a**3 - b**2
external_grad = torch.tensor([1., 1.])
Q.backward(gradient=external_grad)
# check if collected gradients are correct
print(9*a**2 == a.grad)
print(-2*b == b.grad)
record.append((9*a**2 == a.grad).tolist() + (-2*b == b.grad).tolist())

x = torch.rand(5, 5)
y = torch.rand(5, 5)
z = torch.rand((5, 5), requires_grad=True)

a = x + y
print(f"Does `a` require gradients?: {a.requires_grad}")
b = x + z
print(f"Does `b` require gradients?: {b.requires_grad}")
record.append([a.requires_grad, b.requires_grad])

from torch import nn, optim

class TinyResNet(nn.Module):  # (torchvision's resnet18 in the tutorial: its last layer is fc)
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 1000)

    def forward(self, x):
        return self.fc(torch.flatten(self.avgpool(self.conv1(x).relu()), 1))

model = TinyResNet()
initialize(model)
# Freeze all the parameters in the network
for param in model.parameters():
    param.requires_grad = False
model.fc = nn.Linear(4, 10)
initialize(model.fc)
# Optimize only the classifier
optimizer = optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
for step in range(2):
    optimizer.zero_grad()
    loss = ((model(data) - labels) ** 2).mean()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
record.append(params_of(model))

# a non-leaf's gradient kept by retain_grad(), and requires_grad_()
h = torch.rand(3, 2).requires_grad_()
hidden = h.exp()
hidden.retain_grad()
(hidden * hidden).sum().backward()
record.append([hidden.retains_grad, h.retains_grad])
record.append(hidden.grad.numpy().copy())
record.append(h.grad.numpy().copy())
"""

AUTOGRAD_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("from torch import nn, optim\n", "from retrograd import nn, optim\n"),
    ("loss.backward()\nprint(w.grad)\nprint(b.grad)\nrecord.append(w.grad.numpy().copy())\nrecord.append(b.grad.numpy().copy())\n",
     "grads = loss.backward()\nprint(w.grad(grads))\nprint(b.grad(grads))\nrecord.append(w.grad(grads).numpy().copy())\nrecord.append(b.grad(grads).numpy().copy())\n"),
    # gradients are values: the second call's accumulation is a sum of the two, and zeroing
    # is starting anew
    ('out.backward(torch.ones_like(out), retain_graph=True)\nprint(f"First call\\n{inp.grad}")\nrecord.append(inp.grad.numpy().copy())\n',
     'grads = out.backward(torch.ones_like(out), retain_graph=True)\nprint(f"First call\\n{inp.grad(grads)}")\nrecord.append(inp.grad(grads).numpy().copy())\n'),
    ('out.backward(torch.ones_like(out), retain_graph=True)\nprint(f"\\nSecond call\\n{inp.grad}")\nrecord.append(inp.grad.numpy().copy())\ninp.grad.zero_()\n',
     'grads = grads + out.backward(torch.ones_like(out), retain_graph=True)\nprint(f"\\nSecond call\\n{inp.grad(grads)}")\nrecord.append(inp.grad(grads).numpy().copy())\n'),
    ('out.backward(torch.ones_like(out), retain_graph=True)\nprint(f"\\nCall after zeroing gradients\\n{inp.grad}")\nrecord.append(inp.grad.numpy().copy())\n',
     'grads = out.backward(torch.ones_like(out), retain_graph=True)\nprint(f"\\nCall after zeroing gradients\\n{inp.grad(grads)}")\nrecord.append(inp.grad(grads).numpy().copy())\n'),
    ("loss.backward() # backward pass\n\noptim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)\noptim.step() #gradient descent\n",
     "grads = loss.backward() # backward pass\n\noptim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)\noptim.step(grads) #gradient descent\n"),
    ("Q.backward(gradient=external_grad)\n# check if collected gradients are correct\nprint(9*a**2 == a.grad)\nprint(-2*b == b.grad)\nrecord.append((9*a**2 == a.grad).tolist() + (-2*b == b.grad).tolist())\n",
     "grads = Q.backward(gradient=external_grad)\n# check if collected gradients are correct\nprint(9*a**2 == a.grad(grads))\nprint(-2*b == b.grad(grads))\nrecord.append((9*a**2 == a.grad(grads)).tolist() + (-2*b == b.grad(grads)).tolist())\n"),
    ("    loss.backward()\n    optimizer.step()\n", "    grads = loss.backward()\n    optimizer.step(grads)\n"),
    ("(hidden * hidden).sum().backward()\nrecord.append([hidden.retains_grad, h.retains_grad])\nrecord.append(hidden.grad.numpy().copy())\nrecord.append(h.grad.numpy().copy())\n",
     "grads = (hidden * hidden).sum().backward()\nrecord.append([hidden.retains_grad, h.retains_grad])\nrecord.append(hidden.grad(grads).numpy().copy())\nrecord.append(h.grad(grads).numpy().copy())\n"),
]  # fmt: skip


def test_autograd_tutorials_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        AUTOGRAD_SOURCE, AUTOGRAD_STEPS, capsys, 9302, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 18
    assert theirs[0] == [False, False, True, True, False]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- the blitz's neural networks tutorial: walking the graph from loss.grad_fn ---------------------
NEURAL_NETWORKS_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):

    def __init__(self):
        super(Net, self).__init__()
        # 1 input image channel, 6 output channels, 5x5 square convolution
        # kernel
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        # an affine operation: y = Wx + b
        self.fc1 = nn.Linear(16 * 5 * 5, 120)  # 5*5 from image dimension
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, input):
        # Convolution layer C1: 1 input image channel, 6 output channels,
        # 5x5 square convolution, it uses RELU activation function, and
        # outputs a Tensor with size (N, 6, 28, 28), where N is the size of the batch
        c1 = F.relu(self.conv1(input))
        # Subsampling layer S2: 2x2 grid, purely functional,
        # this layer does not have any parameter, and outputs a (N, 6, 14, 14) Tensor
        s2 = F.max_pool2d(c1, (2, 2))
        # Convolution layer C3: 6 input channels, 16 output channels,
        # 5x5 square convolution, it uses RELU activation function, and
        # outputs a (N, 16, 10, 10) Tensor
        c3 = F.relu(self.conv2(s2))
        # Subsampling layer S4: 2x2 grid, purely functional,
        # this layer does not have any parameter, and outputs a (N, 16, 5, 5) Tensor
        s4 = F.max_pool2d(c3, 2)
        # Flatten operation: purely functional, outputs a (N, 400) Tensor
        s4 = torch.flatten(s4, 1)
        # Fully connected layer F5: (N, 400) Tensor input,
        # and outputs a (N, 120) Tensor, it uses RELU activation function
        f5 = F.relu(self.fc1(s4))
        # Fully connected layer F6: (N, 120) Tensor input,
        # and outputs a (N, 84) Tensor, it uses RELU activation function
        f6 = F.relu(self.fc2(f5))
        # Gaussian layer OUTPUT: (N, 84) Tensor input, and
        # outputs a (N, 10) Tensor
        output = self.fc3(f6)
        return output


net = Net()
initialize(net)
print(net)

params = list(net.parameters())
print(len(params))
print(params[0].size())  # conv1's .weight
record.append([len(params)] + list(params[0].size()))

input = torch.randn(1, 1, 32, 32)
out = net(input)
print(out)
record.append(out.detach().numpy().copy())

net.zero_grad()
out.backward(torch.randn(1, 10))

output = net(input)
target = torch.randn(10)  # a dummy target, for example
target = target.view(1, -1)  # make it the same shape as output
criterion = nn.MSELoss()

loss = criterion(output, target)
print(loss)
record.append(loss.item())

print(loss.grad_fn)  # MSELoss
print(loss.grad_fn.next_functions[0][0])  # Linear
print(loss.grad_fn.next_functions[0][0].next_functions[0][0])  # ReLU

net.zero_grad()     # zeroes the gradient buffers of all parameters

print('conv1.bias.grad before backward')
print(net.conv1.bias.grad)

loss.backward()

print('conv1.bias.grad after backward')
print(net.conv1.bias.grad)
record.append(net.conv1.bias.grad.numpy().copy())

learning_rate = 0.01
for f in net.parameters():
    f.data.sub_(f.grad.data * learning_rate)
record.append(params_of(net))

import torch.optim as optim

# create your optimizer
optimizer = optim.SGD(net.parameters(), lr=0.01)

# in your training loop:
optimizer.zero_grad()   # zero the gradient buffers
output = net(input)
loss = criterion(output, target)
loss.backward()
optimizer.step()    # Does the update
record.append(params_of(net))
"""

NEURAL_NETWORKS_STEPS = [
    ("\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
     "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("net.zero_grad()\nout.backward(torch.randn(1, 10))\n", "net.zero_grad()\ngrads = out.backward(torch.randn(1, 10))\n"),
    # no gradient exists before a backward returns one
    ("print(net.conv1.bias.grad)\n\nloss.backward()\n", "\ngrads = loss.backward()\n"),
    ("print(net.conv1.bias.grad)\nrecord.append(net.conv1.bias.grad.numpy().copy())\n",
     "print(net.conv1.bias.grad(grads))\nrecord.append(net.conv1.bias.grad(grads).numpy().copy())\n"),
    ("    f.data.sub_(f.grad.data * learning_rate)\n", "    f.data.sub_(f.grad(grads).data * learning_rate)\n"),
    ("loss.backward()\noptimizer.step()    # Does the update\n", "grads = loss.backward()\noptimizer.step(grads)    # Does the update\n"),
]  # fmt: skip


def test_neural_networks_tutorial_walks_grad_fn_and_trains_as_torch(capsys):
    (theirs, ours), logs = runs_with_draws(
        NEURAL_NETWORKS_SOURCE, NEURAL_NETWORKS_STEPS, capsys, 9303, initialize=initializer(),
        params_of=params_of,
    )  # fmt: skip
    assert len(theirs) == 6
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-6)
    assert "Backward" in logs[1]


def _structure(node, depth):
    """A grad_fn's graph to ``depth`` as nested lists: ``None`` for an untracked input,
    ``"leaf"`` for a leaf's AccumulateGrad, a list of its inputs' structures otherwise."""
    if node is None:
        return None
    if "AccumulateGrad" in node.name():
        return "leaf"
    if depth == 0:
        return "node"
    return [_structure(next_node, depth - 1) for next_node, _ in node.next_functions]


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_grad_fn_next_functions_walk_the_graph_as_torch(lib):
    x = lib.tensor([[1.0, 2.0]])
    w = lib.tensor([[0.5], [-1.0]], requires_grad=True)
    y = ((x @ w).exp() * w.sum()).tanh()
    assert _structure(y.grad_fn, 4) == [[[[None, "leaf"]], ["leaf"]]]
    assert isinstance(y.grad_fn.name(), str) and w.grad_fn is None
    assert x.mul(2).grad_fn is None


# -- forward-mode automatic differentiation ---------------------------------------------------------
FORWARD_AD_SOURCE = """
import torch
import torch.autograd.forward_ad as fwAD

primal = torch.randn(10, 10)
tangent = torch.randn(10, 10)

def fn(x, y):
    return x ** 2 + y ** 2

# All forward AD computation must be performed in the context of
# a ``dual_level`` context. All dual tensors created in such a context
# will have their tangents destroyed upon exit. This is to ensure that
# if the output or intermediate results of this computation are reused
# in a future forward AD computation, their tangents (which are associated
# with this computation) won't be confused with tangents from the later
# computation.
with fwAD.dual_level():
    # To create a dual tensor we associate a tensor, which we call the
    # primal with another tensor of the same size, which we call the tangent.
    # If the layout of the tangent is different from that of the primal,
    # The values of the tangent are copied into a new tensor with the same
    # metadata as the primal. Otherwise, the tangent itself is used as-is.
    #
    # It is also important to note that the dual tensor created by
    # ``make_dual`` is a view of the primal.
    dual_input = fwAD.make_dual(primal, tangent)
    assert fwAD.unpack_dual(dual_input).tangent is tangent

    # To demonstrate the case where the copy of the tangent happens,
    # we pass in a tangent with a layout different from that of the primal
    dual_input_alt = fwAD.make_dual(primal, tangent.T)
    assert fwAD.unpack_dual(dual_input_alt).tangent is not tangent

    # Tensors that do not have an associated tangent are automatically
    # considered to have a zero-filled tangent of the same shape.
    plain_tensor = torch.randn(10, 10)
    dual_output = fn(dual_input, plain_tensor)

    # Unpacking the dual returns a ``namedtuple`` with ``primal`` and ``tangent``
    # as attributes
    jvp = fwAD.unpack_dual(dual_output).tangent
    record.append(jvp.numpy().copy())

assert fwAD.unpack_dual(dual_output).tangent is None

import torch.nn as nn

model = nn.Linear(5, 5)
initialize(model)
input = torch.randn(16, 5)

params = {name: p for name, p in model.named_parameters()}
tangents = {name: torch.rand_like(p) for name, p in params.items()}

with fwAD.dual_level():
    for name, p in params.items():
        delattr(model, name)
        setattr(model, name, fwAD.make_dual(p, tangents[name]))

    out = model(input)
    jvp = fwAD.unpack_dual(out).tangent
    record.append(jvp.detach().numpy().copy())

from torch.func import functional_call

# We need a fresh module because the functional call requires the
# the model to have parameters registered.
model = nn.Linear(5, 5)
initialize(model)

dual_params = {}
with fwAD.dual_level():
    for name, p in params.items():
        # Using the same ``tangents`` from the above section
        dual_params[name] = fwAD.make_dual(p, tangents[name])
    out = functional_call(model, dual_params, input)
    jvp = fwAD.unpack_dual(out).tangent
    record.append(jvp.detach().numpy().copy())

# Check our results
assert torch.allclose(jvp, (input @ tangents['weight'].T) + tangents['bias'])

class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, foo):
        result = torch.exp(foo)
        # Tensors stored in ``ctx`` can be used in the subsequent forward grad
        # computation.
        ctx.result = result
        return result

    @staticmethod
    def jvp(ctx, gI):
        gO = gI * ctx.result
        # If the tensor stored in`` ctx`` will not also be used in the backward pass,
        # one can manually free it using ``del``
        del ctx.result
        return gO

fn = Fn.apply

primal = torch.randn(10, 10, dtype=torch.double, requires_grad=True)
tangent = torch.randn(10, 10)

with fwAD.dual_level():
    dual_input = fwAD.make_dual(primal, tangent)
    dual_output = fn(dual_input)
    jvp = fwAD.unpack_dual(dual_output).tangent
    record.append(jvp.detach().numpy().copy())

# It is important to use ``autograd.gradcheck`` to verify that your
# custom autograd Function computes the gradients correctly. By default,
# ``gradcheck`` only checks the backward-mode (reverse-mode) AD gradients. Specify
# ``check_forward_ad=True`` to also check forward grads. If you did not
# implement the backward formula for your function, you can also tell ``gradcheck``
# to skip the tests that require backward-mode AD by specifying
# ``check_backward_ad=False``, ``check_undefined_grad=False``, and
# ``check_batched_grad=False``.
torch.autograd.gradcheck(Fn.apply, (primal,), check_forward_ad=True,
                         check_backward_ad=False, check_undefined_grad=False,
                         check_batched_grad=False)

import torch.func as ft

primal0 = torch.randn(10, 10)
tangent0 = torch.randn(10, 10)
primal1 = torch.randn(10, 10)
tangent1 = torch.randn(10, 10)

def fn(x, y):
    return x ** 2 + y ** 2

# Here is a basic example to compute the JVP of the above function.
# The ``jvp(func, primals, tangents)`` returns ``func(*primals)`` as well as the
# computed Jacobian-vector product (JVP). Each primal must be associated with a tangent of the same shape.
primal_out, tangent_out = ft.jvp(fn, (primal0, primal1), (tangent0, tangent1))
record.append(tangent_out.numpy().copy())

# ``functorch.jvp`` requires every primal to be associated with a tangent.
# If we only want to associate certain inputs to `fn` with tangents,
# then we'll need to create a new function that captures inputs without tangents:
primal = torch.randn(10, 10)
tangent = torch.randn(10, 10)
y = torch.randn(10, 10)

import functools
new_fn = functools.partial(fn, y=y)
primal_out, tangent_out = ft.jvp(new_fn, (primal,), (tangent,))
record.append(tangent_out.numpy().copy())

model = nn.Linear(5, 5)
initialize(model)
input = torch.randn(16, 5)
tangents = tuple([torch.rand_like(p) for p in model.parameters()])

# Given a ``torch.nn.Module``, ``ft.functional_call`` extracts the state
# (``params`` and buffers) and returns a functional version of the model that
# can be invoked like a function.
params = dict(model.named_parameters())

def func(params, input):
    return torch.func.functional_call(model, params, input)

primal_out, tangent_out = ft.jvp(lambda p: func(p, input), (params,), ({k: t for k, t in zip(params, tangents)},))
record.append(tangent_out.detach().numpy().copy())
"""

FORWARD_AD_STEPS = [
    ("\nimport torch\nimport torch.autograd.forward_ad as fwAD\n",
     "\nimport retrograd as torch\nimport retrograd.autograd.forward_ad as fwAD\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.func as ft\n", "import retrograd.func as ft\n"),
    # the tangent is summed in another order (two backward passes): float32 rounding, which
    # the default atol of 1e-8 does not allow near zero
    ("assert torch.allclose(jvp, (input @ tangents['weight'].T) + tangents['bias'])",
     "assert torch.allclose(jvp, (input @ tangents['weight'].T) + tangents['bias'], atol=1e-6)"),
]  # fmt: skip


def test_forward_mode_ad_tutorial_as_torch(capsys, monkeypatch):
    for lib in (torch, rg):  # rand_like drawing the same numbers in both runs
        rng = np.random.default_rng(9304)
        monkeypatch.setattr(
            lib,
            "rand_like",
            lambda t, lib=lib, rng=rng: lib.tensor(rng.uniform(size=tuple(t.shape)), dtype=t.dtype),
        )
    (theirs, ours), _ = runs_with_draws(
        FORWARD_AD_SOURCE, FORWARD_AD_STEPS, capsys, 9304, initialize=initializer()
    )
    assert len(theirs) == 7
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-5)


def test_forward_ad_refusals_and_a_wrong_jvp_caught_by_gradcheck():
    import retrograd.autograd.forward_ad as fwAD  # noqa: N812 (the tutorial's name)

    x = rg.tensor([1.0, 2.0], dtype="float64")
    with pytest.raises(rg.AutodiffError, match="make_dual: no dual level"):
        fwAD.make_dual(x, rg.ones(2, dtype="float64"))
    with fwAD.dual_level():
        with pytest.raises(
            rg.ShapeError, match=r"make_dual: the tangent has shape \[3\], expected \[2\]"
        ):
            fwAD.make_dual(x, rg.ones(3, dtype="float64"))
        dual = fwAD.make_dual(x, rg.tensor([1.0, -1.0], dtype="float64"))
        # sin's derivative at the primal times the tangent, by hand
        expected = np.cos([1.0, 2.0]) * np.array([1.0, -1.0])
        np.testing.assert_allclose(fwAD.unpack_dual(dual.sin()).tangent.numpy(), expected)
        assert fwAD.unpack_dual(rg.ones(2)).tangent is None  # no dual reaches it
    assert fwAD.unpack_dual(dual).tangent is None

    class WrongJvp(rg.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def jvp(ctx, tangent):
            (t,) = ctx.saved_tensors
            return tangent * t  # (2 * t * tangent is right)

    leaf = rg.tensor([0.5, 1.5], dtype="float64").require_grad()
    with pytest.raises(rg.autograd.GradcheckError, match="forward AD"):
        rg.autograd.gradcheck(
            WrongJvp.apply, (leaf,), check_forward_ad=True, check_backward_ad=False
        )
