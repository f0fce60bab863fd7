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

The lines changed for the port: the ``import`` lines and the gradient lines.
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
