"""Real ports, round 68 (the harness: ``tests/real_ports.py``): symbolic regression with torch
parameters in two programs, the first written here in the style of the public EQL / EQL-division
implementations (an equation-learner network of unary and product units with a thresholded
division output, trained in three phases: unregularised, L1, then pruned by fixed masks and
polished by L-BFGS), in float64 as such fits run, against torch's run of the same program from
the same weights and draws.

- the layers: ``F.linear`` of ``self.linear.weight * self.weight_mask`` with masks kept by
  ``register_buffer``; unary units by a list of callables over column slices ``z[:, i]``
  stacked by ``torch.stack(..., dim=1)``, product units by ``z[:, u:].view(-1, n, 2).prod(dim=-1)``
  and ``torch.cat``; the division output ``torch.where(den > theta, num / den_safe, 0)`` with the
  safe denominator by a second ``torch.where`` and the penalty ``F.relu(theta - den).sum()``;
- the data: ``torch.rand(..., dtype=torch.float64)`` on an interval and beyond it for
  extrapolation, the target by ``torch.sin``, products and a quotient, a little noise;
- training: ``Adam`` with a ``LambdaLR`` warm-up, the L1 penalty ``sum(p.abs().sum() ...)`` over
  the weights named in ``named_parameters`` ending in ``weight``, the division threshold
  ``1 / sqrt(t + 1)``; pruning by ``mask.copy_((w.abs() > threshold).double())`` and
  ``w.data.mul_(mask)`` under ``no_grad``; then ``LBFGS(line_search_fn='strong_wolfe')`` with
  a closure;
- evaluation under ``torch.no_grad()``: interpolation and extrapolation errors, the active
  units by ``nonzero()``, the surviving weights counted by ``count_nonzero``, a formula
  printed from the output layer's rounded coefficients, the ``state_dict`` (masks included)
  round trip by ``torch.save`` to a buffer and ``torch.load``.

The second, sparse identification of nonlinear dynamics in the style of pysindy
written in torch (the Lorenz system integrated by a fixed-step RK4 in float64, derivatives by
central differences, by ``torch.gradient(..., spacing=dt, dim=0)`` and at time stamps,
even and uneven (``spacing=(times,)``, ``edge_order=2``), a polynomial library
from ``itertools.combinations_with_replacement`` by ``x[:, list(c)].prod(dim=1)``, STLSQ by
``torch.linalg.lstsq(...).solution`` then ridge solves by ``torch.linalg.solve`` written back by
``xi[small] = 0.0`` and ``xi[big, k] = ...``, the equations printed), then the same library
fitted by ``Adam`` and ``ExponentialLR`` with a sequentially thresholded mask buffer
(``amax(dim=0)`` column scales, ``mask.mul_`` under ``no_grad``) and the discovered system
replayed by RK4 under ``no_grad``.

The lines changed for the port: the ``import`` lines and the gradient lines (the closure
returns the gradients with the loss).

The regression guarded (``tests/test_ports68_fixes.py``): ``gradient`` refused coordinate
tensors as ``spacing`` ("coordinate tensors are not supported").
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

EQL_SOURCE = """
import io

import torch
import torch.nn as nn
import torch.nn.functional as F

UNARY = [
    ("id", lambda z: z),
    ("sin", torch.sin),
    ("cos", torch.cos),
    ("sig", torch.sigmoid),
]


class EqlLayer(nn.Module):
    def __init__(self, in_features, n_products=2):
        super().__init__()
        self.n_unary = len(UNARY)
        self.n_products = n_products
        width = self.n_unary + 2 * n_products
        self.out_features = self.n_unary + n_products
        self.linear = nn.Linear(in_features, width)
        self.register_buffer("weight_mask", torch.ones(width, in_features, dtype=torch.float64))

    def forward(self, x):
        z = F.linear(x, self.linear.weight * self.weight_mask, self.linear.bias)
        unary = torch.stack([f(z[:, i]) for i, (_, f) in enumerate(UNARY)], dim=1)
        products = z[:, self.n_unary:].view(-1, self.n_products, 2).prod(dim=-1)
        return torch.cat([unary, products], dim=1)


class DivisionOutput(nn.Module):
    def __init__(self, in_features, out_features=1):
        super().__init__()
        self.linear = nn.Linear(in_features, 2 * out_features)
        self.register_buffer("weight_mask",
                             torch.ones(2 * out_features, in_features, dtype=torch.float64))

    def forward(self, x, theta):
        z = F.linear(x, self.linear.weight * self.weight_mask, self.linear.bias)
        num, den = z[:, 0::2], z[:, 1::2]
        valid = den > theta
        den_safe = torch.where(valid, den, torch.ones_like(den))
        out = torch.where(valid, num / den_safe, torch.zeros_like(num))
        penalty = F.relu(theta - den).sum()
        return out, penalty


class EQL(nn.Module):
    def __init__(self, in_features, depth=2):
        super().__init__()
        layers = []
        width = in_features
        for _ in range(depth):
            layers.append(EqlLayer(width))
            width = layers[-1].out_features
        self.hidden = nn.ModuleList(layers)
        self.output = DivisionOutput(width)

    def forward(self, x, theta=1e-4):
        for layer in self.hidden:
            x = layer(x)
        return self.output(x, theta)

    def l1(self):
        return sum(p.abs().sum() for name, p in self.named_parameters() if name.endswith("weight"))

    def prune(self, threshold):
        with torch.no_grad():
            for module in [*self.hidden, self.output]:
                w = module.linear.weight
                module.weight_mask.copy_((w.abs() > threshold).double())
                w.data.mul_(module.weight_mask)

    def formula(self, digits=2):
        w = self.output.linear.weight * self.output.weight_mask
        b = self.output.linear.bias
        products = ["mul%d" % i for i in range(self.hidden[-1].n_products)]
        names = [name for name, _ in UNARY] + products

        def combo(row, bias):
            terms = ["{:+.{}f}*{}".format(c, digits, n) for c, n in zip(row.tolist(), names)
                     if round(c, digits) != 0]
            return " ".join(terms + ["{:+.{}f}".format(bias, digits)])

        return "({}) / ({})".format(combo(w[0], b[0].item()), combo(w[1], b[1].item()))


def target(x):
    return (torch.sin(math.pi * x[:, 0]) + x[:, 1] * x[:, 2]) / (x[:, 2] ** 2 + 1.0)


def sample(n, lo, hi):
    return lo + (hi - lo) * torch.rand(n, 3, dtype=torch.float64)


x_train = sample(64, -1.0, 1.0)
y_train = target(x_train)[:, None] + 0.01 * torch.randn(64, 1, dtype=torch.float64)
x_extra = sample(32, 1.0, 1.5)
y_extra = target(x_extra)[:, None]

model = EQL(3).double()
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
warmup = 4
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: min(1.0, (t + 1) / warmup))
t1, t2, t3, reg = 8, 16, 22, 1e-2
for t in range(t3):
    if t == t2:
        model.prune(0.15)
        masks = [m.weight_mask for m in [*model.hidden, model.output]]
        record.append([int(torch.count_nonzero(mask)) for mask in masks])
    theta = 1.0 / math.sqrt(t + 1)
    pred, penalty = model(x_train, theta)
    mse = F.mse_loss(pred, y_train)
    loss = mse + penalty
    if t1 <= t < t2:
        loss = loss + reg * model.l1()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), mse.item(), penalty.item(), scheduler.get_last_lr()[0]])
    if t % 7 == 0:
        print("step {:2d} mse {:.5f} penalty {:.4f}".format(t, mse.item(), penalty.item()))

polish = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=6, line_search_fn="strong_wolfe")
calls = []


def closure():
    polish.zero_grad()
    pred, penalty = model(x_train, 1e-4)
    loss = F.mse_loss(pred, y_train) + penalty
    loss.backward()
    calls.append(loss.item())
    return loss


for _ in range(2):
    polish.step(closure)
with torch.no_grad():  # the pruned weights stay pruned
    for m in [*model.hidden, model.output]:
        m.linear.weight.mul_(m.weight_mask)
record.append(calls)
record.append(params_of(model))

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = EQL(3).double()
restored.load_state_dict(torch.load(buffer))
restored.eval()
with torch.no_grad():
    inter, _ = restored(x_train)
    extra, extra_penalty = restored(x_extra)
    record.append([F.mse_loss(inter, y_train).item(), F.mse_loss(extra, y_extra).item(),
                   extra_penalty.item()])
    record.append([layer.weight_mask.any(dim=1).nonzero().flatten().tolist()
                   for layer in restored.hidden])
    record.append([inter.dtype == torch.float64,
                   torch.equal(restored.output.weight_mask, model.output.weight_mask)])
    record.append(extra.numpy().copy())
print(restored.formula())
"""

EQL_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
    ("    loss.backward()\n    calls.append", "    grads = loss.backward()\n    calls.append"),
    ("    return loss\n", "    return loss, grads\n"),
]


def test_eql_symbolic_regression_trains_prunes_and_polishes_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        EQL_SOURCE, EQL_STEPS, capsys, 6803, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 1 + 22 + 2 + 4
    assert 0 < sum(theirs[16]) < 24 + 48 + 12  # the pruning kept some weights, not all
    assert their_log == our_log and their_log.count("\n") == 5
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)


SINDY_SOURCE = """
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F


def lorenz(x, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
    dx = sigma * (x[..., 1] - x[..., 0])
    dy = x[..., 0] * (rho - x[..., 2]) - x[..., 1]
    dz = x[..., 0] * x[..., 1] - beta * x[..., 2]
    return torch.stack([dx, dy, dz], dim=-1)


def rk4(f, x0, dt, n_steps):
    xs = [x0]
    x = x0
    for _ in range(n_steps):
        k1 = f(x)
        k2 = f(x + 0.5 * dt * k1)
        k3 = f(x + 0.5 * dt * k2)
        k4 = f(x + dt * k3)
        x = x + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        xs.append(x)
    return torch.stack(xs)


class PolynomialLibrary:
    def __init__(self, degree=2):
        self.degree = degree

    def fit(self, n_features):
        self.combos = [c for d in range(self.degree + 1)
                       for c in itertools.combinations_with_replacement(range(n_features), d)]
        return self

    def transform(self, x):
        cols = [torch.ones(x.shape[0], dtype=x.dtype) if not c else x[:, list(c)].prod(dim=1)
                for c in self.combos]
        return torch.stack(cols, dim=1)

    def names(self, inputs=("x", "y", "z")):
        return ["1" if not c else " ".join(inputs[i] for i in c) for c in self.combos]


def stlsq(theta, dxdt, threshold, alpha=1e-5, max_iter=10):
    # sequentially thresholded ridge regression, as pysindy's STLSQ
    xi = torch.linalg.lstsq(theta, dxdt).solution
    for _ in range(max_iter):
        small = xi.abs() < threshold
        xi[small] = 0.0
        for k in range(dxdt.shape[1]):
            big = ~small[:, k]
            if big.sum() == 0:
                continue
            a = theta[:, big]
            gram = a.T @ a + alpha * torch.eye(a.shape[1], dtype=a.dtype)
            xi[big, k] = torch.linalg.solve(gram, a.T @ dxdt[:, k])
    return xi


def equations(xi, names, digits=3):
    lines = []
    for k, lhs in enumerate(["x'", "y'", "z'"]):
        terms = ["{:.{}f} {}".format(c, digits, n) for c, n in zip(xi[:, k].tolist(), names)
                 if c != 0]
        lines.append(lhs + " = " + " + ".join(terms))
    return lines


dt = 0.005
x0 = torch.tensor([-8.0, 8.0, 27.0], dtype=torch.float64)
traj = rk4(lorenz, x0, dt, 300)
traj = traj + 1e-4 * torch.randn(*traj.shape, dtype=torch.float64)
central = (traj[2:] - traj[:-2]) / (2 * dt)
spaced = torch.gradient(traj, spacing=dt, dim=0)[0]
record.append([traj.dtype == torch.float64, (spaced[1:-1] - central).abs().max().item() < 1e-9])
record.append(spaced[[0, -1]].numpy().copy())
# the same samples at their time stamps, and a subsample at uneven times, as logged data is
times = torch.arange(traj.shape[0], dtype=torch.float64) * dt
stamped = torch.gradient(traj, spacing=(times,), dim=0, edge_order=2)[0]
keep = torch.tensor(sorted(set(range(0, 301, 3)) | set(range(1, 301, 7))))
uneven = torch.gradient(traj[keep], spacing=[times[keep]], dim=0)[0]
record.append([(stamped[1:-1] - central).abs().max().item() < 1e-9,
               (uneven - lorenz(traj[keep])).abs().max().item()])
record.append(uneven[:5].numpy().copy())

library = PolynomialLibrary(degree=2).fit(3)
names = library.names()
theta = library.transform(traj[1:-1])
xi = stlsq(theta, central, threshold=0.5)
record.append(xi.numpy().copy())
record.append((xi != 0).sum(dim=0).tolist())
for line in equations(xi, names):
    print(line)

# the same library fitted by gradient descent with a sequentially thresholded mask, as the
# SINDy autoencoder's coefficients are
scale = theta.abs().amax(dim=0)
scale[0] = 1.0
theta_n = theta / scale


class SindyCoefficients(nn.Module):
    def __init__(self, n_terms, n_states):
        super().__init__()
        self.xi = nn.Parameter(torch.zeros(n_terms, n_states, dtype=torch.float64))
        self.register_buffer("mask", torch.ones(n_terms, n_states, dtype=torch.float64))

    def forward(self, features):
        return features @ (self.xi * self.mask)


model = SindyCoefficients(theta.shape[1], 3)
optimizer = torch.optim.Adam(model.parameters(), lr=2.0)
scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.97)
target_scale = central.std(dim=0)
for step in range(30):
    pred = model(theta_n)
    loss = F.mse_loss(pred / target_scale, central / target_scale)
    loss = loss + 1e-4 * (model.xi * model.mask).abs().sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if (step + 1) % 10 == 0:
        with torch.no_grad():
            model.mask.mul_((model.xi.abs() / scale[:, None] > 0.1).double())
            model.xi.mul_(model.mask)
    record.append(loss.item())

state = {k: v.clone() for k, v in model.state_dict().items()}
restored = SindyCoefficients(theta.shape[1], 3)
restored.load_state_dict(state)
with torch.no_grad():
    learned = restored.xi * restored.mask / scale[:, None]
    record.append(learned.numpy().copy())
    record.append(restored.mask.sum(dim=0).tolist())

    def discovered(x):
        return library.transform(x.unsqueeze(0)).squeeze(0) @ xi

    replay = rk4(discovered, traj[0], dt, 40)
    record.append((replay - traj[:41]).abs().max(dim=0).values.numpy().copy())
"""

SINDY_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_sindy_discovers_the_lorenz_system_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(SINDY_SOURCE, SINDY_STEPS, capsys, 6804)
    assert len(theirs) == 6 + 30 + 3
    assert theirs[0] == [True, True] and theirs[5] == [2, 3, 2]  # Lorenz's seven terms
    assert theirs[2][0] is True
    assert their_log == our_log and their_log.count("\n") == 3
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
