"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of pytorch/tutorials' beginner tutorials, run on small fake data against torch's run of
the same program from the same weights and draws.

- A glyph classifier refactored stage by stage, in the style of "What is torch.nn really?":
  hand-made weights (``requires_grad_()``, ``torch.zeros(n, requires_grad=True)``) updated by
  ``W -= W.grad * lr`` under ``torch.no_grad()`` and ``W.grad.zero_()``, a hand-written
  log-softmax and ``-logp[range(n), target].mean()``, an argmax accuracy, then
  ``F.cross_entropy``, a module of ``nn.Parameter``s stepped by hand with ``zero_grad()``,
  ``nn.Linear`` with ``optim.SGD``, a ``TensorDataset`` sliced like a tensor,
  ``DataLoader(shuffle=True)`` with a validation ``sum(...)`` under ``no_grad``,
  ``loss_batch``/``fit`` with ``zip(*[...])`` and ``np.multiply``, a convnet reshaping with
  ``view(-1, 1, 8, 8)`` and ``view(-1, xb.size(1))`` after ``F.avg_pool2d``, a ``Lambda``
  module in an ``nn.Sequential`` with ``nn.AvgPool2d`` and then ``nn.AdaptiveAvgPool2d(1)``, a
  loader wrapper with ``__len__``/``__iter__``, ``torch.device`` and ``model.to(dev)``;
- autograd basics in the style of the autograd tutorials: ``binary_cross_entropy_with_logits``,
  ``grad_fn`` and ``is_leaf``, ``requires_grad`` under ``no_grad`` and after ``detach()``,
  ``out.backward(seed, retain_graph=True)`` twice (accumulated: here the sum
  of the two returned ``Gradients``) and after ``grad.zero_()`` (here a fresh backward),
  ``backward(gradient=...)``, one momentum-SGD step of a small convnet, frozen parameters
  (``requires_grad = False``) with a replaced head trained alone, and ``retain_grad()`` on a
  non-leaf;
- a small LeNet in the style of the blitz's neural networks tutorial: ``print(net)``,
  ``out.backward(torch.randn(1, 10))``, ``loss.grad_fn.next_functions[0][0]`` walked two
  steps, the manual ``f.data.sub_(f.grad.data * lr)`` and an ``optim.SGD`` step;
- forward-mode AD in the style of the forward-AD tutorial: ``fwAD.dual_level()``,
  ``make_dual``/``unpack_dual`` (``.tangent is tangent``), duals set on a module by
  ``delattr``/``setattr`` and passed through ``functional_call``, a custom ``Function`` with
  a ``jvp`` and no ``backward`` checked by ``gradcheck(..., check_forward_ad=True,
  check_backward_ad=False, ...)``, and ``torch.func.jvp`` with tuples, a
  ``functools.partial`` and a dict of parameters.

The lines a port changes: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``p.grad(grads)``, ``optimizer.step(grads)``). The regressions guarded:
there was no ``torch.autograd.forward_ad`` (and ``gradcheck`` refused
``check_forward_ad=True``); it now computes tangents by the double-backward trick. And
``grad_fn`` was a plain string, so ``loss.grad_fn.next_functions`` failed; it is now a node
with torch's ``name()`` and ``next_functions``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)


@pytest.fixture
def shared_permutations(monkeypatch):
    """``DataLoader(shuffle=True)`` of both libraries permuting by one seeded stream (each
    library's ``randperm`` draws from its own generator otherwise)."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed)

        def randperm(n, generator=None, **_):
            return lib.tensor(rng.permutation(n), dtype=lib.int64)

        if lib is torch:
            monkeypatch.setattr(torch, "randperm", randperm)
        else:
            monkeypatch.setattr(rg_sampler, "randperm", randperm)

    return for_lib


# -- a glyph classifier refactored stage by stage -------------------------------------------------
GLYPHS_SOURCE = """
import math
import numpy as np
import torch

# the data arrive as NumPy arrays: turn them all into tensors at once
xs_tr, ys_tr, xs_va, ys_va = map(torch.tensor, (xs_tr, ys_tr, xs_va, ys_va))
rows, pixels = xs_tr.shape
classes, batch, lr = 4, 6, 0.3
print(xs_tr.shape, ys_tr.min(), ys_tr.max())

# stage 1: bare tensors, our own log-softmax and negative log-likelihood
W = torch.randn(pixels, classes) / math.sqrt(pixels)
W.requires_grad_()
bias = torch.zeros(classes, requires_grad=True)

def log_probs(z):
    return z - z.exp().sum(-1).log().unsqueeze(-1)

def neg_log_lik(logp, target):
    return -logp[range(target.shape[0]), target].mean()

def hit_rate(scores, target):
    return (torch.argmax(scores, dim=1) == target).float().mean()

def glyph_net(xb):
    return log_probs(xb @ W + bias)

first = glyph_net(xs_tr[:batch])
record.append([neg_log_lik(first, ys_tr[:batch]).item(), hit_rate(first, ys_tr[:batch]).item()])
for k in range((rows - 1) // batch + 1):
    xb, yb = xs_tr[k * batch:(k + 1) * batch], ys_tr[k * batch:(k + 1) * batch]
    loss = neg_log_lik(glyph_net(xb), yb)
    loss.backward()
    with torch.no_grad():
        W -= W.grad * lr
        bias -= bias.grad * lr
        W.grad.zero_()
        bias.grad.zero_()
record.append({"W": W.detach().numpy().copy(), "bias": bias.detach().numpy().copy()})

# stage 2: the library's loss; the parameters held by a module, still stepped by hand
from torch.nn import functional as F
from torch import nn

class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.randn(pixels, classes) / math.sqrt(pixels))
        self.bias = nn.Parameter(torch.zeros(classes))

    def forward(self, xb):
        return xb @ self.W + self.bias

net = Affine()
record.append(F.cross_entropy(net(xs_tr), ys_tr).item())
for k in range((rows - 1) // batch + 1):
    xb, yb = xs_tr[k * batch:(k + 1) * batch], ys_tr[k * batch:(k + 1) * batch]
    loss = F.cross_entropy(net(xb), yb)
    loss.backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= p.grad * lr
        net.zero_grad()
record.append(params_of(net))

# stage 3: nn.Linear, an optimizer, and a dataset sliced like a tensor
from torch import optim
from torch.utils.data import DataLoader, TensorDataset

def fresh_linear():
    model = nn.Linear(pixels, classes)
    initialize(model)
    opt = optim.SGD(model.parameters(), lr=lr)
    return model, opt

train_ds, valid_ds = TensorDataset(xs_tr, ys_tr), TensorDataset(xs_va, ys_va)
net, opt = fresh_linear()
for k in range((rows - 1) // batch + 1):
    xb, yb = train_ds[k * batch: k * batch + batch]
    loss = F.cross_entropy(net(xb), yb)
    loss.backward()
    opt.step()
    opt.zero_grad()
record.append(params_of(net))

# stage 4: shuffled training batches and a validation pass without gradients
train_dl = DataLoader(train_ds, batch_size=batch, shuffle=True)
valid_dl = DataLoader(valid_ds, batch_size=batch + 2)
net, opt = fresh_linear()
net.train()
for xb, yb in train_dl:
    loss = F.cross_entropy(net(xb), yb)
    loss.backward()
    opt.step()
    opt.zero_grad()
net.eval()
with torch.no_grad():
    total = sum(F.cross_entropy(net(xb), yb) for xb, yb in valid_dl)
record.append((total / len(valid_dl)).item())

# stage 5: the loop factored out; validation loss weighted by batch size
def loss_batch(model, xb, yb, opt=None):
    loss = F.cross_entropy(model(xb), yb)
    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item(), len(xb)

def fit(epochs, model, opt, train_dl, valid_dl):
    for epoch in range(epochs):
        model.train()
        for xb, yb in train_dl:
            loss_batch(model, xb, yb, opt)
        model.eval()
        with torch.no_grad():
            losses, sizes = zip(*[loss_batch(model, xb, yb) for xb, yb in valid_dl])
        record.append(np.sum(np.multiply(losses, sizes)) / np.sum(sizes))
        print(epoch, record[-1])

# stage 6: a convnet over the 8x8 glyphs, reshaping inside forward
class GlyphCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, kernel_size=3, stride=2, padding=1)
        self.c2 = nn.Conv2d(6, classes, kernel_size=3, stride=2, padding=1)

    def forward(self, flat):
        h = F.relu(self.c1(flat.view(-1, 1, 8, 8)))
        h = F.avg_pool2d(F.relu(self.c2(h)), 2)
        return h.view(-1, h.size(1))

cnn = GlyphCNN()
initialize(cnn)
fit(2, cnn, optim.SGD(cnn.parameters(), lr=0.1, momentum=0.9), train_dl, valid_dl)
record.append(params_of(cnn))

# stage 7: the same net as a Sequential, the reshapes done by Lambda layers
class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)

seq = nn.Sequential(
    Lambda(lambda x: x.view(-1, 1, 8, 8)),
    nn.Conv2d(1, 6, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(6, classes, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.AvgPool2d(2),
    Lambda(lambda t: t.view(t.size(0), -1)),
)
initialize(seq)
fit(1, seq, optim.SGD(seq.parameters(), lr=0.1, momentum=0.9), train_dl, valid_dl)
record.append(params_of(seq))

# stage 8: the loaders reshape and move each batch; any input size through adaptive pooling
dev = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")

class Mapped:
    def __init__(self, loader, fn):
        self.loader, self.fn = loader, fn

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for item in self.loader:
            yield self.fn(*item)

def as_images(x, y):
    return x.view(-1, 1, 8, 8).to(dev), y.to(dev)

seq = nn.Sequential(
    nn.Conv2d(1, 6, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.Conv2d(6, classes, kernel_size=3, stride=2, padding=1),
    nn.ReLU(),
    nn.AdaptiveAvgPool2d(1),
    Lambda(lambda t: t.view(t.size(0), -1)),
)
initialize(seq)
seq.to(dev)
sgd = optim.SGD(seq.parameters(), lr=0.1, momentum=0.9)
fit(1, seq, sgd, Mapped(train_dl, as_images), Mapped(valid_dl, as_images))
record.append(params_of(seq))
"""

GLYPHS_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "    loss.backward()\n    with torch.no_grad():\n        W -= W.grad * lr\n"
        "        bias -= bias.grad * lr\n        W.grad.zero_()\n        bias.grad.zero_()\n",
        "    grads = loss.backward()\n    with torch.no_grad():\n        W -= W.grad(grads) * lr\n"
        "        bias -= bias.grad(grads) * lr\n",
    ),
    (
        "    loss.backward()\n    with torch.no_grad():\n        for p in net.parameters():\n"
        "            p -= p.grad * lr\n",
        "    grads = loss.backward()\n    with torch.no_grad():\n"
        "        for p in net.parameters():\n            p -= p.grad(grads) * lr\n",
    ),
    ("loss.backward()\n    opt.step()\n", "grads = loss.backward()\n    opt.step(grads)\n"),
    (
        "loss.backward()\n        opt.step()\n",
        "grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def test_glyph_classifier_every_stage_trains_as_torch(capsys, shared_permutations):
    rng = np.random.default_rng(9301)

    def glyphs(n):
        return (rng.uniform(0, 1, (n, 64)) * (rng.uniform(0, 1, (n, 64)) < 0.3)).astype(np.float32)

    data = {
        "xs_tr": glyphs(12),
        "ys_tr": rng.integers(0, 4, 12),
        "xs_va": glyphs(10),
        "ys_va": rng.integers(0, 4, 10),
    }
    shared_permutations(torch, 9301)
    shared_permutations(rg, 9301)
    (theirs, ours), _ = runs_with_draws(
        GLYPHS_SOURCE,
        GLYPHS_STEPS,
        capsys,
        9301,
        initialize=initializer(),
        params_of=params_of,
        **data,
    )
    assert len(theirs) == 13
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


# -- autograd basics ------------------------------------------------------------------------------
AUTOGRAD_SOURCE = """
import torch

# a two-output logistic unit: which tensors carry a grad_fn, which are leaves
feats = torch.ones(4)
target = torch.tensor([0.0, 1.0])
w = torch.randn(4, 2, requires_grad=True)
b = torch.randn(2, requires_grad=True)
logits = torch.matmul(feats, w) + b
loss = F.binary_cross_entropy_with_logits(logits, target)
print("logits from", logits.grad_fn, "loss from", loss.grad_fn)
record.append([logits.grad_fn is None, loss.grad_fn is None, w.grad_fn is None])
record.append([w.is_leaf, logits.is_leaf])
loss.backward()
record.extend([w.grad.numpy().copy(), b.grad.numpy().copy()])

# no tracking under no_grad, nor for a detached result
with torch.no_grad():
    untracked = torch.matmul(feats, w) + b
detached = (torch.matmul(feats, w) + b).detach()
tracked = torch.matmul(feats, w) + b
record.append([tracked.requires_grad, untracked.requires_grad, detached.requires_grad])

# a vector-Jacobian product on a retained graph: gradients pile up until zeroed
m = torch.eye(3, 4, requires_grad=True)
out = (m * 2 - 1).pow(3).t()
seed = torch.ones_like(out)
out.backward(seed, retain_graph=True)
record.append(m.grad.numpy().copy())
out.backward(seed, retain_graph=True)
record.append(m.grad.numpy().copy())
m.grad.zero_()
out.backward(seed, retain_graph=True)
record.append(m.grad.numpy().copy())

# a vector output given its upstream gradient explicitly
u = torch.tensor([1.0, -2.0], requires_grad=True)
v = torch.tensor([0.5, 3.0], requires_grad=True)
P = u ** 2 * v - 4 * v
P.backward(gradient=torch.tensor([1.0, 1.0]))
record.append((2 * u * v == u.grad).tolist())
record.append((u ** 2 - 4 == v.grad).tolist())

a = torch.rand(3, 3)
c = torch.rand((3, 3), requires_grad=True)
record.append([(a + a).requires_grad, (a + c).requires_grad])

# one momentum-SGD step of a small convnet
from torch import nn, optim

images = torch.rand(2, 3, 6, 6)
goals = torch.rand(2, 5)
net = nn.Sequential(
    nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 5)
)
initialize(net)
loss = (net(images) - goals).sum()
loss.backward()
sgd = optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
sgd.step()
record.append(params_of(net))

# fine-tuning: a frozen backbone, only the replaced head learns
class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Conv2d(3, 4, 3)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 7)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x).relu()), 1))

tuned = Backbone()
initialize(tuned)
for param in tuned.parameters():
    param.requires_grad = False
tuned.fc = nn.Linear(4, 5)
initialize(tuned.fc)
opt = optim.SGD(tuned.parameters(), lr=1e-2, momentum=0.9)
for _ in range(2):
    opt.zero_grad()
    loss = ((tuned(images) - goals) ** 2).mean()
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(params_of(tuned))

# an intermediate result keeps its gradient only when asked to
h = torch.rand(2, 3).requires_grad_()
act = h.sigmoid()
act.retain_grad()
(act ** 3).sum().backward()
record.append([act.retains_grad, h.retains_grad])
record.extend([act.grad.numpy().copy(), h.grad.numpy().copy()])
"""

AUTOGRAD_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "loss.backward()\nrecord.extend([w.grad.numpy().copy(), b.grad.numpy().copy()])\n",
        "grads = loss.backward()\n"
        "record.extend([w.grad(grads).numpy().copy(), b.grad(grads).numpy().copy()])\n",
    ),
    # gradients are values: the second call's accumulation is the sum of the two, and zeroing
    # is starting anew
    (
        "out.backward(seed, retain_graph=True)\nrecord.append(m.grad.numpy().copy())\n"
        "out.backward(seed, retain_graph=True)\nrecord.append(m.grad.numpy().copy())\n"
        "m.grad.zero_()\nout.backward(seed, retain_graph=True)\n"
        "record.append(m.grad.numpy().copy())\n",
        "grads = out.backward(seed, retain_graph=True)\n"
        "record.append(m.grad(grads).numpy().copy())\n"
        "grads = grads + out.backward(seed, retain_graph=True)\n"
        "record.append(m.grad(grads).numpy().copy())\n"
        "grads = out.backward(seed, retain_graph=True)\n"
        "record.append(m.grad(grads).numpy().copy())\n",
    ),
    (
        "P.backward(gradient=torch.tensor([1.0, 1.0]))\n"
        "record.append((2 * u * v == u.grad).tolist())\n"
        "record.append((u ** 2 - 4 == v.grad).tolist())\n",
        "grads = P.backward(gradient=torch.tensor([1.0, 1.0]))\n"
        "record.append((2 * u * v == u.grad(grads)).tolist())\n"
        "record.append((u ** 2 - 4 == v.grad(grads)).tolist())\n",
    ),
    ("loss.backward()\nsgd = ", "grads = loss.backward()\nsgd = "),
    ("sgd.step()\n", "sgd.step(grads)\n"),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
    (
        "(act ** 3).sum().backward()\nrecord.append([act.retains_grad, h.retains_grad])\n"
        "record.extend([act.grad.numpy().copy(), h.grad.numpy().copy()])\n",
        "grads = (act ** 3).sum().backward()\nrecord.append([act.retains_grad, h.retains_grad])\n"
        "record.extend([act.grad(grads).numpy().copy(), h.grad(grads).numpy().copy()])\n",
    ),
]


def test_autograd_basics_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        AUTOGRAD_SOURCE, AUTOGRAD_STEPS, capsys, 9302, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 18
    assert theirs[:2] == [[False, False, True], [True, False]]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


# -- a small LeNet: walking the graph from loss.grad_fn -------------------------------------------
LENET_SOURCE = """
import torch
import torch.nn as nn
from torch.nn import functional as F


class SmallLeNet(nn.Module):
    # two conv/pool stages, then three fully connected layers, for 1x16x16 images

    def __init__(self):
        super(SmallLeNet, self).__init__()
        self.conv_a = nn.Conv2d(1, 4, 3)  # 14x14, pooled to 7x7
        self.conv_b = nn.Conv2d(4, 8, 3)  # 5x5, pooled to 2x2
        self.fc_a = nn.Linear(8 * 2 * 2, 24)
        self.fc_b = nn.Linear(24, 12)
        self.head = nn.Linear(12, 10)

    def forward(self, img):
        h = F.max_pool2d(F.relu(self.conv_a(img)), (2, 2))
        h = F.max_pool2d(F.relu(self.conv_b(h)), 2)
        h = torch.flatten(h, 1)
        h = F.relu(self.fc_a(h))
        h = F.relu(self.fc_b(h))
        return self.head(h)


net = SmallLeNet()
initialize(net)
print(net)
weights = list(net.parameters())
record.append([len(weights)] + list(weights[0].size()))

img = torch.randn(1, 1, 16, 16)
scores = net(img)
record.append(scores.detach().numpy().copy())
net.zero_grad()
scores.backward(torch.randn(1, 10))

mse = nn.MSELoss()
goal = torch.randn(10).view(1, -1)
loss = mse(net(img), goal)
record.append(loss.item())
# back from the loss: the MSE node, the head's node, and one of that node's inputs
print(loss.grad_fn)
print(loss.grad_fn.next_functions[0][0])
print(loss.grad_fn.next_functions[0][0].next_functions[0][0])

net.zero_grad()
loss.backward()
record.append(net.conv_a.bias.grad.numpy().copy())

lr = 0.01
for f in net.parameters():
    f.data.sub_(f.grad.data * lr)
record.append(params_of(net))

import torch.optim as optim

opt = optim.SGD(net.parameters(), lr=lr)
opt.zero_grad()
loss = mse(net(img), goal)
loss.backward()
opt.step()
record.append(params_of(net))
"""

LENET_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("scores.backward(torch.randn(1, 10))\n", "grads = scores.backward(torch.randn(1, 10))\n"),
    (
        "net.zero_grad()\nloss.backward()\nrecord.append(net.conv_a.bias.grad.numpy().copy())\n",
        "net.zero_grad()\ngrads = loss.backward()\n"
        "record.append(net.conv_a.bias.grad(grads).numpy().copy())\n",
    ),
    ("    f.data.sub_(f.grad.data * lr)\n", "    f.data.sub_(f.grad(grads).data * lr)\n"),
    ("loss.backward()\nopt.step()\n", "grads = loss.backward()\nopt.step(grads)\n"),
]


def test_small_lenet_walks_grad_fn_and_trains_as_torch(capsys):
    (theirs, ours), logs = runs_with_draws(
        LENET_SOURCE,
        LENET_STEPS,
        capsys,
        9303,
        initialize=initializer(),
        params_of=params_of,
    )
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


# -- forward-mode automatic differentiation -------------------------------------------------------
FORWARD_AD_SOURCE = """
import functools
import torch
from torch.autograd import forward_ad as fwAD
import torch.nn as nn
from torch.func import functional_call as call_with

def blend(a, b):
    return a.sin() * b + a ** 3

x = torch.randn(4, 3)
dx = torch.randn(4, 3)
other = torch.randn(3, 4)
with fwAD.dual_level():
    dual = fwAD.make_dual(x, dx)
    assert fwAD.unpack_dual(dual).tangent is dx
    # a tangent laid out unlike its primal (a transposed view) is copied
    assert fwAD.unpack_dual(fwAD.make_dual(x, other.T)).tangent is not other
    y = torch.randn(4, 3)  # no tangent: it counts as zero
    out = blend(dual, y)
    record.append(fwAD.unpack_dual(out).tangent.numpy().copy())
assert fwAD.unpack_dual(out).tangent is None  # gone with the level

# a layer's output moved along a direction in its parameters
layer = nn.Linear(3, 2)
initialize(layer)
inputs = torch.randn(6, 3)
params = dict(layer.named_parameters())
directions = {name: torch.rand_like(p) for name, p in params.items()}
with fwAD.dual_level():
    for key, p in params.items():
        delattr(layer, key)
        setattr(layer, key, fwAD.make_dual(p, directions[key]))
    record.append(fwAD.unpack_dual(layer(inputs)).tangent.detach().numpy().copy())

# the same without touching the module: functional_call on a fresh one
layer = nn.Linear(3, 2)
initialize(layer)
with fwAD.dual_level():
    duals = {name: fwAD.make_dual(p, directions[name]) for name, p in params.items()}
    along = fwAD.unpack_dual(call_with(layer, duals, inputs)).tangent
    record.append(along.detach().numpy().copy())
assert torch.allclose(along, inputs @ directions["weight"].T + directions["bias"], atol=1e-6)

# a custom op that only knows its forward derivative
class Sine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        ctx.slope = torch.cos(t)  # kept for jvp, dropped there
        return torch.sin(t)

    @staticmethod
    def jvp(ctx, dt):
        out = dt * ctx.slope
        del ctx.slope
        return out

x64 = torch.randn(3, 3, dtype=torch.double, requires_grad=True)
with fwAD.dual_level():
    d = fwAD.make_dual(x64, torch.randn(3, 3))
    record.append(fwAD.unpack_dual(Sine.apply(d)).tangent.detach().numpy().copy())
torch.autograd.gradcheck(Sine.apply, (x64,), check_forward_ad=True, check_backward_ad=False,
                         check_undefined_grad=False, check_batched_grad=False)

# the functional API: tuples of primals and tangents, a partial, a dict of parameters
import torch.func as ft

p0, p1, t0, t1 = [torch.randn(4, 3) for _ in range(4)]
_, jv = ft.jvp(blend, (p0, p1), (t0, t1))
record.append(jv.numpy().copy())
_, jv = ft.jvp(functools.partial(blend, b=p1), (p0,), (t0,))
record.append(jv.numpy().copy())

layer = nn.Linear(3, 2)
initialize(layer)
weights = dict(layer.named_parameters())
steps = [torch.rand_like(p) for p in layer.parameters()]

def run_layer(ws, xs):
    return torch.func.functional_call(layer, ws, xs)

_, jv = ft.jvp(lambda ws: run_layer(ws, inputs), (weights,), (dict(zip(weights, steps)),))
record.append(jv.detach().numpy().copy())
"""

FORWARD_AD_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.func as ft\n", "import retrograd.func as ft\n"),
]


def test_forward_mode_ad_as_torch(capsys, monkeypatch):
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
