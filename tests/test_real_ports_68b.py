"""Real ports, round 68 (the harness: ``tests/real_ports.py``): learned optimizers, a program
written here in the style of the public "learning to learn by gradient descent by gradient
descent" re-implementations (a coordinate-wise two-layer LSTM optimizer meta-trained by Adam
through unrolled optimizations of random quadratics, with truncated backpropagation through
time), against torch's run of the same program from the same weights and draws.

- the optimizee: a batch of quadratics ``||W theta - y||^2`` by ``torch.einsum('bij,bj->bi',
  W, theta)``; its gradient by ``torch.autograd.grad(loss, theta, retain_graph=True)`` (the
  paper's first-order meta-gradient: the gradient detached, the graph kept for the meta-loss)
  and, once, by ``create_graph=True`` (the second-order meta-gradient, compared with the
  first-order one);
- the optimizer network: gradient preprocessing (``log(|g|) / p`` and ``sign(g)`` where
  ``|g| >= e^-p``, else ``(-1, e^p g)``, by a float mask of ``>=`` and ``torch.cat`` on a new
  last axis), an ``nn.ModuleList`` of ``nn.LSTMCell`` over every coordinate as a batch, its
  hidden state a list of ``(h, c)`` tuples, the output ``nn.Linear`` scaled in place under
  ``no_grad`` (``mul_``, ``zero_``);
- meta-training: the unroll's losses by ``torch.stack`` and their weighted mean, the truncation
  by ``theta.detach().requires_grad_()`` and detached states, ``Adam``, ``StepLR``,
  ``clip_grad_norm_``;
- evaluation under ``torch.no_grad()`` (the optimizee's gradient taken inside
  ``torch.enable_grad()``) against hand-written SGD and momentum (``mul_(mu).add_(grad)``) on
  fresh problems; the ``state_dict`` round trip by ``torch.save`` to a buffer and
  ``torch.load`` into a fresh network by ``load_state_dict``.

And a second program, a per-coordinate MLP learned optimizer in the shape of the small fully
connected ones (features: parameter, gradient and momenta at three decays kept in a
``register_buffer``, normalised by ``torch.rsqrt`` of their second moment over a tuple of
axes; the output ``unbind(-1)`` into a direction and a log-magnitude), meta-trained by
``Adam`` and ``CosineAnnealingLR`` on tiny classifiers called by
``torch.func.functional_call`` with dicts of parameters, truncated every three steps; then
applied under ``no_grad`` against ``torch.optim.Adam`` on a fresh task, its result loaded by
``parameters_to_vector``/``vector_to_parameters`` and checked against ``functional_call``.

The lines changed for the port: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

L2O_SOURCE = """
import io

import torch
import torch.nn as nn
import torch.nn.functional as F


def preprocess_gradients(grad, p=10.0):
    # (log|g| / p, sign g) where |g| >= e^-p, else (-1, e^p g): Andrychowicz et al., appendix A
    grad = grad.unsqueeze(-1)
    big = (grad.abs() >= math.exp(-p)).float()
    log_part = torch.log(grad.abs() + 1e-8) / p
    first = big * log_part + (1 - big) * -1
    second = big * torch.sign(grad) + (1 - big) * math.exp(p) * grad
    return torch.cat((first, second), dim=-1)


class LSTMOptimizer(nn.Module):
    def __init__(self, preproc=True, hidden_size=10, num_layers=2, output_scale=0.1):
        super(LSTMOptimizer, self).__init__()
        self.preproc = preproc
        self.hidden_size = hidden_size
        input_size = 2 if preproc else 1
        self.cells = nn.ModuleList(
            [nn.LSTMCell(input_size if i == 0 else hidden_size, hidden_size)
             for i in range(num_layers)])
        self.output = nn.Linear(hidden_size, 1)
        self.output_scale = output_scale
        with torch.no_grad():
            self.output.weight.mul_(0.1)
            self.output.bias.zero_()

    def init_state(self, n):
        return [(torch.zeros(n, self.hidden_size), torch.zeros(n, self.hidden_size))
                for _ in self.cells]

    def forward(self, grad, state):
        x = preprocess_gradients(grad) if self.preproc else grad.unsqueeze(-1)
        new_state = []
        for cell, (h, c) in zip(self.cells, state):
            h, c = cell(x, (h, c))
            new_state.append((h, c))
            x = h
        return self.output(x).squeeze(-1) * self.output_scale, new_state


class QuadraticProblems:
    def __init__(self, batch, dim):
        self.W = torch.randn(batch, dim, dim)
        self.y = torch.randn(batch, dim)
        self.theta0 = torch.randn(batch, dim) * 0.5

    def loss(self, theta):
        residual = torch.einsum('bij,bj->bi', self.W, theta) - self.y
        return (residual ** 2).sum(dim=-1).mean()


def unroll(opt_net, problems, theta, state, steps, second_order=False):
    losses = []
    for _ in range(steps):
        loss = problems.loss(theta)
        grad, = torch.autograd.grad(loss, theta, retain_graph=True, create_graph=second_order)
        if not second_order:
            grad = grad.detach()
        update, state = opt_net(grad.reshape(-1), state)
        theta = theta + update.view_as(theta)
        losses.append(loss)
    return torch.stack(losses), theta, state


def evaluate(step_fn, problems, steps):
    theta = problems.theta0.clone()
    losses = []
    for t in range(steps):
        with torch.enable_grad():
            theta.requires_grad_(True)
            loss = problems.loss(theta)
            grad, = torch.autograd.grad(loss, theta)
        theta = step_fn(theta.detach(), grad, t)
        losses.append(loss.item())
    return losses


batch, dim, unroll_len, optim_steps = 4, 5, 4, 12
opt_net = LSTMOptimizer()
initialize(opt_net)
meta_opt = torch.optim.Adam(opt_net.parameters(), lr=3e-3)
scheduler = torch.optim.lr_scheduler.StepLR(meta_opt, step_size=3, gamma=0.5)
weights = torch.linspace(0.5, 1.0, unroll_len)

# the first- and second-order meta-gradients of one unroll
probe = QuadraticProblems(batch, dim)
meta = []
for second_order in (False, True):
    theta = probe.theta0.clone().requires_grad_(True)
    losses, _, _ = unroll(opt_net, probe, theta, opt_net.init_state(batch * dim), unroll_len,
                          second_order=second_order)
    meta.append(torch.autograd.grad(losses.sum(), list(opt_net.parameters())))
record.append([g.norm().item() for g in meta[0]])
record.append([(a - b).abs().max().item() > 0 for a, b in zip(*meta)])

for epoch in range(6):
    problems = QuadraticProblems(batch, dim)
    theta = problems.theta0.clone().requires_grad_(True)
    state = opt_net.init_state(batch * dim)
    epoch_losses = []
    for k in range(optim_steps // unroll_len):
        losses, theta, state = unroll(opt_net, problems, theta, state, unroll_len)
        meta_loss = (losses * weights).sum() / weights.sum()
        meta_opt.zero_grad()
        meta_loss.backward()
        torch.nn.utils.clip_grad_norm_(opt_net.parameters(), 1.0)
        meta_opt.step()
        theta = theta.detach().requires_grad_()
        state = [(h.detach(), c.detach()) for h, c in state]
        epoch_losses.append(meta_loss.item())
    scheduler.step()
    record.append(epoch_losses)
    print("epoch {} lr {:.5f} final {:.4f}".format(epoch, scheduler.get_last_lr()[0],
                                                  problems.loss(theta).item()))

record.append(params_of(opt_net))

buffer = io.BytesIO()
torch.save(opt_net.state_dict(), buffer)
buffer.seek(0)
restored = LSTMOptimizer()
restored.load_state_dict(torch.load(buffer))
restored.eval()

test = QuadraticProblems(batch, dim)
holder = {"state": restored.init_state(batch * dim)}


def learned_step(theta, grad, t):
    with torch.no_grad():
        update, holder["state"] = restored(grad.reshape(-1), holder["state"])
        return theta + update.view_as(theta)


velocity = {"v": torch.zeros(batch, dim)}


def momentum_step(theta, grad, t, lr=0.01, mu=0.9):
    velocity["v"].mul_(mu).add_(grad)
    return theta - lr * velocity["v"]


learned = evaluate(learned_step, test, 10)
sgd = evaluate(lambda theta, grad, t: theta - 0.01 * grad, test, 10)
momentum = evaluate(momentum_step, test, 10)
record.append(learned)
record.append(sgd)
record.append(momentum)
record.append([learned[-1] < learned[0], len(holder["state"]), holder["state"][0][0].shape[0]])
"""

L2O_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        meta_loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(opt_net.parameters(), 1.0)\n"
        "        meta_opt.step()\n",
        "        grads = meta_loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, opt_net.parameters(), 1.0)\n"
        "        meta_opt.step(grads)\n",
    ),
]


def test_lstm_learned_optimizer_meta_trains_as_torch(capsys):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        L2O_SOURCE, L2O_STEPS, capsys, 6801, initialize=initializer(), params_of=params_of
    )
    assert len(theirs) == 2 + 6 + 1 + 4
    assert all(theirs[1])  # the second-order terms change every meta-gradient
    assert their_log == our_log and their_log.count("\n") == 6
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


MLP_LOPT_SOURCE = """
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call
from torch.nn.utils import parameters_to_vector, vector_to_parameters


class MLPLOpt(nn.Module):
    # a per-coordinate MLP on (parameter, gradient, momenta at three decays), the features
    # normalised by their second moment over each tensor, the output a direction and a
    # log-magnitude: the shape of the small fully connected learned optimizers
    def __init__(self, hidden=8, decays=(0.5, 0.9, 0.99), step_mult=0.01, exp_mult=0.01):
        super().__init__()
        self.register_buffer("decays", torch.tensor(decays))
        self.net = nn.Sequential(nn.Linear(2 + len(decays), hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        self.step_mult = step_mult
        self.exp_mult = exp_mult

    def init_state(self, params):
        return {name: torch.zeros(*p.shape, self.decays.numel()) for name, p in params.items()}

    def forward(self, params, grads, state):
        new_params, new_state = {}, {}
        for (name, p), g in zip(params.items(), grads):
            m = state[name] * self.decays + (1 - self.decays) * g.unsqueeze(-1)
            feats = torch.cat([p.unsqueeze(-1), g.unsqueeze(-1), m], dim=-1)
            axes = tuple(range(p.dim()))
            feats = feats * torch.rsqrt(feats.pow(2).mean(dim=axes, keepdim=True) + 1e-6)
            direction, magnitude = self.net(feats).unbind(-1)
            step = direction * torch.exp(magnitude * self.exp_mult) * self.step_mult
            new_params[name] = p - step
            new_state[name] = m
        return new_params, new_state


def optimizee():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


centres = torch.randn(3, 4) * 1.5


def task_batch(n=24):
    y = torch.randint(0, 3, (n,))
    return centres[y] + torch.randn(n, 4), y


def task_loss(net, params, batch):
    x, y = batch
    return F.cross_entropy(functional_call(net, params, (x,)), y)


lopt = MLPLOpt()
initialize(lopt)
meta_opt = torch.optim.Adam(lopt.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(meta_opt, T_max=4)
for task in range(4):
    net = optimizee()
    initialize(net)
    params = {k: v.detach().requires_grad_() for k, v in net.named_parameters()}
    state = lopt.init_state(params)
    batch = task_batch()
    metrics = []
    for truncation in range(2):
        losses = []
        for inner in range(3):
            loss = task_loss(net, params, batch)
            grads = torch.autograd.grad(loss, list(params.values()), retain_graph=True)
            params, state = lopt(params, [g.detach() for g in grads], state)
            losses.append(loss)
        meta_loss = torch.stack(losses).mean() + task_loss(net, params, batch)
        meta_opt.zero_grad()
        meta_loss.backward()
        torch.nn.utils.clip_grad_norm_(lopt.parameters(), 3.0)
        meta_opt.step()
        params = {k: v.detach().requires_grad_() for k, v in params.items()}
        state = {k: v.detach() for k, v in state.items()}
        metrics.append(meta_loss.item())
    scheduler.step()
    record.append(metrics)

record.append({k: v.detach().numpy().copy() for k, v in lopt.state_dict().items()})

# the learned optimizer against Adam on a fresh task, the learned one applied under no_grad
trained = copy.deepcopy(lopt)
net = optimizee()
initialize(net)
baseline = copy.deepcopy(net)
params = {k: v.detach().clone() for k, v in net.named_parameters()}
state = trained.init_state(params)
batch = task_batch()
learned_curve = []
for step in range(6):
    with torch.enable_grad():
        params = {k: v.requires_grad_() for k, v in params.items()}
        loss = task_loss(net, params, batch)
        grads = torch.autograd.grad(loss, list(params.values()))
    with torch.no_grad():
        params, state = trained(params, grads, state)
        params = {k: v.detach() for k, v in params.items()}
    learned_curve.append(loss.item())

adam = torch.optim.Adam(baseline.parameters(), lr=1e-2)
adam_curve = []
for step in range(6):
    loss = F.cross_entropy(baseline(batch[0]), batch[1])
    adam.zero_grad()
    loss.backward()
    adam.step()
    adam_curve.append(loss.item())
record.append(learned_curve)
record.append(adam_curve)

flat = parameters_to_vector(params.values())
vector_to_parameters(flat, net.parameters())
with torch.no_grad():
    direct = net(batch[0])
    functional = functional_call(net, params, (batch[0],))
    record.append([flat.numel(), torch.equal(direct, functional)])
    record.append(direct.numpy().copy())
"""

MLP_LOPT_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "        meta_loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(lopt.parameters(), 3.0)\n"
        "        meta_opt.step()\n",
        "        meta_grads = meta_loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(meta_grads, lopt.parameters(), 3.0)\n"
        "        meta_opt.step(meta_grads)\n",
    ),
    (
        "    loss.backward()\n    adam.step()\n",
        "    adam_grads = loss.backward()\n    adam.step(adam_grads)\n",
    ),
]


def test_mlp_learned_optimizer_on_a_functional_optimizee_as_torch(capsys):
    (theirs, ours), _ = runs_with_draws(
        MLP_LOPT_SOURCE, MLP_LOPT_STEPS, capsys, 6806, initialize=initializer()
    )
    assert len(theirs) == 4 + 1 + 2 + 2
    assert theirs[-2] == [4 * 8 + 8 + 8 * 3 + 3, True]  # the flat vector loads back exactly
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
