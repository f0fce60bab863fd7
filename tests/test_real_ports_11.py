# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- MAML on sine regression (the from-scratch form, and with ``torch.func.functional_call``):
  an ``nn.Sequential`` of an ``OrderedDict``, an ``argforward`` over a list of weights,
  two inner steps of ``torch.autograd.grad(loss, weights, create_graph=True)`` with fast
  weights ``w - inner_lr * g`` (from the second step on, tensors of the graph, not leaves),
  ``OrderedDict(model.named_parameters())`` rebuilt from ``zip(fast.items(), grads)``, the
  meta loss summed from ``0`` over tasks, and Adam on the meta-gradients; second order and
  first order (``create_graph=False``).

The defects found: ``autograd.grad`` took gradients with respect to leaves (and
``retain_grad()`` tensors) only; torch takes any tensor of the graph, so the second inner step
failed. And it walked (and, without ``retain_graph``, consumed) the whole graph below its
inputs, down to the leaves, where torch's engine stops at the inputs: first-order MAML
(``create_graph=False``) then found the fast weights' graph consumed at the meta backward.
The backward now walks toward the inputs only (``Tensor.backward(inputs=)``, torch's keyword),
and keeps the gradients of non-leaf inputs for that backward.
"""

from __future__ import annotations

import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both

MAML_SOURCE = """
from collections import OrderedDict
from torch.func import functional_call

class SineModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(OrderedDict([
            ('l1', nn.Linear(1, 16)),
            ('relu1', nn.ReLU()),
            ('l2', nn.Linear(16, 16)),
            ('relu2', nn.ReLU()),
            ('l3', nn.Linear(16, 1)),
        ]))
    def forward(self, x):
        return self.net(x)
    def argforward(self, x, weights):
        x = F.linear(x, weights[0], weights[1])
        x = F.relu(x)
        x = F.linear(x, weights[2], weights[3])
        x = F.relu(x)
        x = F.linear(x, weights[4], weights[5])
        return x

def sample_task(rng, k):
    amplitude = rng.uniform(0.1, 5.0)
    phase = rng.uniform(0, np.pi)
    xs = rng.uniform(-5, 5, (2 * k, 1))
    ys = amplitude * np.sin(xs + phase)
    x = torch.tensor(xs, dtype=torch.float64)
    y = torch.tensor(ys, dtype=torch.float64)
    return x[:k], y[:k], x[k:], y[k:]

def maml_step(model, meta_optimizer, tasks, inner_lr, inner_steps, first_order, use_functional_call):
    meta_loss = 0
    for x_s, y_s, x_q, y_q in tasks:
        if use_functional_call:
            fast = OrderedDict(model.named_parameters())
            for _ in range(inner_steps):
                loss = F.mse_loss(functional_call(model, fast, (x_s,)), y_s)
                grads = torch.autograd.grad(loss, fast.values(), create_graph=not first_order)
                fast = OrderedDict((name, p - inner_lr * g) for ((name, p), g) in zip(fast.items(), grads))
            meta_loss = meta_loss + F.mse_loss(functional_call(model, fast, (x_q,)), y_q)
        else:
            weights = list(model.parameters())
            for _ in range(inner_steps):
                loss = F.mse_loss(model.argforward(x_s, weights), y_s)
                grads = torch.autograd.grad(loss, weights, create_graph=not first_order)
                weights = [w - inner_lr * g for w, g in zip(weights, grads)]
            meta_loss = meta_loss + F.mse_loss(model.argforward(x_q, weights), y_q)
    meta_loss = meta_loss / len(tasks)
    meta_optimizer.zero_grad()
    meta_loss.backward()
    meta_optimizer.step()
    return meta_loss.item()

def main(state=None, first_order=False, use_functional_call=True, steps=3):
    model = SineModel().double()
    if state is not None:
        model.load_state_dict(state)
    init = {k: np.array(v.numpy() if hasattr(v, 'numpy') else v, copy=True) for k, v in model.state_dict().items()}
    meta_optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    records = []
    for step in range(steps):
        tasks = [sample_task(rng, 5) for _ in range(3)]
        records.append(maml_step(model, meta_optimizer, tasks, 0.01, 2, first_order, use_functional_call))
        records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return init, records
"""

MAML_STEP = [
    (
        "    meta_loss.backward()\n    meta_optimizer.step()",
        "    meta_grads = meta_loss.backward()\n    meta_optimizer.step(meta_grads)",
    )
]


@pytest.mark.parametrize("first_order", [False, True])
@pytest.mark.parametrize("use_functional_call", [True, False])
def test_maml_matches_torch(use_functional_call, first_order):
    theirs, ours = both(MAML_SOURCE, MAML_STEP)
    torch.manual_seed(0)
    initial, expected = theirs["main"](None, first_order, use_functional_call)
    _, got = ours["main"](initial, first_order, use_functional_call)
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)


def test_autograd_grad_with_respect_to_a_tensor_of_the_graph_as_torch_s():
    results = []
    for lib in (torch, rg):
        w = lib.tensor([1.0, -2.0, 0.5], dtype=lib.float64, requires_grad=True)
        fast = w * 3.0 - 1.0  # not a leaf
        loss = (fast**2).sum() + (w * fast).sum()
        g_fast, g_w = lib.autograd.grad(loss, (fast, w), create_graph=True)
        again = lib.autograd.grad((g_fast * g_w).sum(), w)[0]
        results.append((g_fast.tolist(), g_w.tolist(), again.tolist(), fast.retains_grad))
    assert results[1] == results[0]


def test_backward_toward_some_inputs_gives_only_theirs_as_torch_s():
    """torch's ``inputs=``: the gradients of those tensors (a leaf or not), none for the rest."""
    results = []
    for lib in (torch, rg):
        w = lib.tensor([0.5, -0.25], dtype=lib.float64, requires_grad=True)
        v = lib.tensor([2.0, 1.0], dtype=lib.float64, requires_grad=True)
        hidden = (w * 3.0).exp()
        loss = (hidden * hidden * v).sum()
        if lib is torch:
            loss.backward(inputs=[hidden, v])
            results.append((hidden.grad.tolist(), v.grad.tolist(), w.grad is None))
        else:
            grads = loss.backward(inputs=[hidden, v])
            results.append(
                (hidden.grad(grads).tolist(), v.grad(grads).tolist(), w.grad(grads) is None)
            )
    assert results[1] == results[0]
    assert results[0][2]


@pytest.mark.parametrize("first_order", [False, True])
@pytest.mark.parametrize("strategy", ["balanced", "budget"])
def test_maml_under_recomputing_checkpointing_strategies(strategy, first_order):
    """The backward toward the fast weights reads (and may recompute) only what its steps
    need; the values below them stay for the meta backward under every strategy."""
    theirs, ours = both(MAML_SOURCE, MAML_STEP)
    torch.manual_seed(0)
    initial, expected = theirs["main"](None, first_order, True, steps=2)
    checkpointing = (
        rg.BalancedCheckpointing() if strategy == "balanced" else rg.BudgetCheckpointing("1KB")
    )
    with rg.use_backend(rg.Autodiff(rg.current_backend().inner, checkpointing=checkpointing)):
        _, got = ours["main"](initial, first_order, True, steps=2)
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)
