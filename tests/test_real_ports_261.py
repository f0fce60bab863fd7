"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the PyTorch tutorial "Learning PyTorch with Examples": a low-order polynomial fitted to
a smooth curve, step by step, from gradients by hand to ``nn`` and ``optim``, against torch's
run of the same program from the same draws (``torch.randn(())`` for the coefficients; torch's
``nn.Linear`` weights loaded into the port).

- gradients by hand on 0-d tensors (``w -= lr * g``), ``torch.linspace(..., device=device,
  dtype=dtype)``; then a custom ``torch.autograd.Function`` with ``ctx.save_for_backward`` and
  ``ctx.saved_tensors``, coefficients made by ``torch.full((), v, device=, dtype=,
  requires_grad=True)`` and the function aliased as ``f = Fn.apply``;
- autograd on the default accelerator: ``torch.accelerator.current_accelerator().type`` behind
  ``torch.accelerator.is_available()``, ``torch.set_default_device``, ``torch.randn((),
  requires_grad=True)`` updated under ``torch.no_grad()`` from ``a.grad``, and what
  ``requires_grad``, ``is_leaf`` and ``grad_fn`` say afterwards;
- ``nn``: ``x.unsqueeze(-1).pow(p)`` with an int64 ``p``, ``nn.Sequential(nn.Linear(3, 1),
  nn.Flatten(0, 1))``, ``MSELoss(reduction='sum')``, ``model.zero_grad()`` and ``param -= lr *
  param.grad``, ``layer.weight[:, 0].item()``; then ``optim.RMSprop`` and its state-dict keys;
- a module of four 0-d ``nn.Parameter`` s with a ``describe()`` of ``.item()`` s under
  ``optim.SGD``, and a dynamic module whose forward adds ``random.randint``-many higher terms
  sharing one parameter (Python's ``random`` seeded alike in both runs), SGD with momentum.

In the ports only the import lines and the gradient lines differ (``grads = loss.backward()``,
``a.grad(grads)``, ``optimizer.step(grads)``; torch's ``a.grad = None`` resets dropped: each
backward returns fresh gradients).
"""

from __future__ import annotations

import torch

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

# -- gradients by hand, then a custom autograd Function ------------------------------------------
HAND_SOURCE = """
import math
import torch

dtype, device = torch.float, torch.device("cpu")
xs = torch.linspace(-2.0, 2.0, 400, device=device, dtype=dtype)
target = torch.cos(xs)

# y = w0 + w1 x + w2 x^2 + w3 x^3, the gradient of the squared error written out
w0, w1, w2, w3 = (torch.randn((), device=device, dtype=dtype) for _ in range(4))
lr = 2e-5
for it in range(200):
    fit = w0 + w1 * xs + w2 * xs**2 + w3 * xs**3
    err = fit - target
    if it % 50 == 49:
        sse = err.pow(2).sum().item()
        print(it, sse)
        record.append(sse)
    g = 2.0 * err
    w0 -= lr * g.sum()
    w1 -= lr * (g * xs).sum()
    w2 -= lr * (g * xs**2).sum()
    w3 -= lr * (g * xs**3).sum()
record.append([w0.item(), w1.item(), w2.item(), w3.item()])
record.append([type(w0.item()).__name__, w0.dtype == torch.float32, w0.shape == torch.Size([])])


class TaylorSine(torch.autograd.Function):
    # u - u^3 / 6, with its derivative supplied by hand
    @staticmethod
    def forward(ctx, u):
        ctx.save_for_backward(u)
        return u - u**3 / 6

    @staticmethod
    def backward(ctx, grad_out):
        (u,) = ctx.saved_tensors
        return grad_out * (1 - 0.5 * u**2)


xs = torch.linspace(-math.pi / 2, math.pi / 2, 400, device=device, dtype=dtype)
target = torch.sin(xs)
a = torch.full((), 0.1, device=device, dtype=dtype, requires_grad=True)
b = torch.full((), 0.8, device=device, dtype=dtype, requires_grad=True)
c = torch.full((), 0.05, device=device, dtype=dtype, requires_grad=True)
d = torch.full((), 0.7, device=device, dtype=dtype, requires_grad=True)
lr = 1e-4
for it in range(200):
    sine = TaylorSine.apply
    loss = (a + b * sine(c + d * xs) - target).pow(2).sum()
    if it % 50 == 49:
        print(it, loss.item())
        record.append(loss.item())
    loss.backward()
    with torch.no_grad():
        for coef in (a, b, c, d):
            coef -= lr * coef.grad
            coef.grad = None
record.append([t.item() for t in (a, b, c, d)])
"""

HAND_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    (
        "            coef -= lr * coef.grad\n            coef.grad = None\n",
        "            coef -= lr * coef.grad(grads)\n",
    ),
]


def test_polynomial_by_hand_and_by_a_custom_function_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(HAND_SOURCE, HAND_STEPS, capsys, 26101)
    assert len(theirs) == 4 + 2 + 4 + 1
    assert theirs[5] == ["float", True, True]
    assert theirs[3] < theirs[0] and theirs[9] < theirs[6]  # both fits improve
    assert_records_agree(ours[:5] + ours[6:], theirs[:5] + theirs[6:], rtol=1e-4, atol=1e-5)
    assert ours[5] == theirs[5]
    assert len(our_log.splitlines()) == len(their_log.splitlines()) == 8


# -- autograd on the default accelerator ---------------------------------------------------------
AUTOGRAD_SOURCE = """
import torch

dtype = torch.float
dev = "cpu"
if torch.accelerator.is_available():
    dev = torch.accelerator.current_accelerator().type
print(f"device: {dev}")
torch.set_default_device(dev)
xs = torch.linspace(-1, 1, 300, dtype=dtype)
target = torch.exp(xs)
a, b, c, d = (torch.randn((), dtype=dtype, requires_grad=True) for _ in range(4))
lr = 5e-4
for it in range(200):
    pred = a + b * xs + c * xs**2 + d * xs**3
    loss = (pred - target).pow(2).sum()
    if it % 50 == 49:
        record.append([loss.item()] + [t.item() for t in (a, b, c, d)])
    loss.backward()
    with torch.no_grad():
        a -= lr * a.grad
        b -= lr * b.grad
        c -= lr * c.grad
        d -= lr * d.grad
        a.grad = b.grad = c.grad = d.grad = None
torch.set_default_device(None)  # back to the CPU default
record.append([a.requires_grad, a.is_leaf, a.grad_fn is None, pred.requires_grad, dev])
"""

AUTOGRAD_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    *[(f"{v} -= lr * {v}.grad\n", f"{v} -= lr * {v}.grad(grads)\n") for v in "abcd"],
    ("        a.grad = b.grad = c.grad = d.grad = None\n", ""),
]


def test_polynomial_autograd_on_the_default_accelerator_as_torch(capsys):
    try:
        (theirs, ours), (their_log, our_log) = runs_with_draws(
            AUTOGRAD_SOURCE, AUTOGRAD_STEPS, capsys, 26102
        )
    finally:
        # torch's set_default_device caches its factory functions on first use, here the
        # harness's stand-in draws: forgotten, so later tests' torch.device blocks see torch's
        torch.utils._device._device_constructors.cache_clear()
    assert len(theirs) == 5
    assert theirs[-1] == [True, True, True, True, "cpu"]
    assert_records_agree(ours[:-1], theirs[:-1], rtol=1e-4, atol=1e-5)
    assert ours[-1] == theirs[-1]
    assert our_log == their_log == "device: cpu\n"


# -- nn, then optim ------------------------------------------------------------------------------
LAYER_SOURCE = """
import torch

xs = torch.linspace(-2.0, 2.0, 300)
target = torch.tanh(xs)
powers = torch.tensor([1, 2, 3])
features = xs.unsqueeze(-1).pow(powers)  # (300, 3), by broadcasting
sse = torch.nn.MSELoss(reduction='sum')


def cubic_layer():
    net = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
    initialize(net)
    return net


net = cubic_layer()
lr = 1e-5
for it in range(150):
    out = net(features)
    loss = sse(out, target)
    if it % 50 == 49:
        record.append(loss.item())
    net.zero_grad()
    loss.backward()
    with torch.no_grad():
        for w in net.parameters():
            w -= lr * w.grad
layer = net[0]
print(f"{layer.bias.item():.4f} + {layer.weight[:, 0].item():.4f} x + ... x^3")
record.append(params_of(net))
record.append([list(features.shape), features.dtype == torch.float32, list(out.shape)])

net = cubic_layer()
opt = torch.optim.RMSprop(net.parameters(), lr=2e-3)
for it in range(150):
    loss = sse(net(features), target)
    if it % 50 == 49:
        record.append(loss.item())
    opt.zero_grad()
    loss.backward()
    opt.step()
record.append(params_of(net))
record.append(sorted(opt.state_dict()["state"][0]))
"""

LAYER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n    with", "    grads = loss.backward()\n    with"),
    ("w -= lr * w.grad\n", "w -= lr * w.grad(grads)\n"),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
]


def test_polynomial_layer_by_hand_and_by_rmsprop_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        LAYER_SOURCE, LAYER_STEPS, capsys, 26104, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 3 + 2 + 3 + 2
    assert theirs[2] < theirs[0] and theirs[7] < theirs[5]
    exact = (4, 9)  # shapes and dtypes; the optimizer's state keys
    assert_records_agree(
        [r for i, r in enumerate(ours) if i not in exact],
        [r for i, r in enumerate(theirs) if i not in exact],
        rtol=1e-4,
        atol=1e-5,
    )
    assert [ours[i] for i in exact] == [theirs[i] for i in exact]


# -- a module of scalar parameters, and a dynamic one --------------------------------------------
MODULE_SOURCE = """
import math
import random
import torch


class Cubic(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Parameter(torch.randn(())), torch.nn.Parameter(torch.randn(()))
        self.c, self.d = torch.nn.Parameter(torch.randn(())), torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        return self.a + self.b * x + self.c * x**2 + self.d * x**3

    def describe(self):
        terms = [p.item() for p in (self.a, self.b, self.c, self.d)]
        return " + ".join(f"{w:.3f} x^{k}" for k, w in enumerate(terms))


class RandomDepth(Cubic):
    # each call adds x^4 (and sometimes x^5), all weighted by the same extra parameter
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Parameter(0.1 * torch.randn(()))

    def forward(self, x):
        y = super().forward(x)
        for k in range(4, random.randint(4, 6)):
            y = y + self.e * x**k
        return y


xs = torch.linspace(-1.5, 1.5, 300)
target = torch.sin(xs)
for poly, opt_kw in ((Cubic(), {"lr": 1e-4}), (RandomDepth(), {"lr": 1e-6, "momentum": 0.9})):
    crit = torch.nn.MSELoss(reduction="sum")
    optimizer = torch.optim.SGD(poly.parameters(), **opt_kw)
    for it in range(150):
        loss = crit(poly(xs), target)
        if it % 50 == 49:
            record.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(poly.describe())
    record.append(params_of(poly))
    record.append([[n for n, _ in poly.named_parameters()], list(poly.state_dict())])
"""

MODULE_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def test_polynomial_module_and_random_depth_module_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        MODULE_SOURCE, MODULE_STEPS, capsys, 26105, params_of=params_of
    )
    assert len(theirs) == 2 * (3 + 2)
    assert theirs[4] == [["a", "b", "c", "d"]] * 2
    assert theirs[9] == [["a", "b", "c", "d", "e"]] * 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    assert len(our_log.splitlines()) == len(their_log.splitlines()) == 2
