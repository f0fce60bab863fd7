"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of MAML on sine regression (the from-scratch form over a list of weights, and the form
with ``torch.func.functional_call``), run under torch and, ported, under retrograd.

Its surface: an ``nn.Sequential`` of an ``OrderedDict``, a forward over an explicit list of
weights (``F.linear(x, w[i], w[i + 1])``), two inner steps of
``torch.autograd.grad(loss, weights, create_graph=True)`` with fast weights
``w - inner_lr * g`` (from the second step on, tensors of the graph, not leaves),
``OrderedDict(model.named_parameters())`` rebuilt from ``zip(fast.items(), grads)``, the meta
loss summed from ``0`` over tasks, and Adam on the meta-gradients; second order and first
order (``create_graph=False``).

The regressions guarded: ``autograd.grad`` took gradients with respect to leaves (and
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
import collections
from torch.func import functional_call as call_with

class Regressor(nn.Module):
    def __init__(self, hidden=8):
        super().__init__()
        self.net = nn.Sequential(collections.OrderedDict([
            ("inp", nn.Linear(1, hidden)), ("act1", nn.Tanh()),
            ("mid", nn.Linear(hidden, hidden)), ("act2", nn.Tanh()),
            ("out", nn.Linear(hidden, 1)),
        ]))

    def forward(self, x):
        return self.net(x)

    def with_weights(self, x, w):
        # the same network, its weights given as a list (inp.weight, inp.bias, mid..., out...)
        for i in (0, 2):
            x = torch.tanh(F.linear(x, w[i], w[i + 1]))
        return F.linear(x, w[4], w[5])

def sine_task(rng, shots):
    amp, phase = rng.uniform(0.5, 3.0), rng.uniform(0, np.pi)
    xs = rng.uniform(-4, 4, (2 * shots, 1))
    x = torch.tensor(xs, dtype=torch.double)
    y = torch.tensor(amp * np.sin(xs + phase), dtype=torch.double)
    return (x[:shots], y[:shots]), (x[shots:], y[shots:])  # support set, query set

def adapted_loss(model, support, query, lr, steps, first_order, functional):
    (xs, ys), (xq, yq) = support, query
    if functional:
        fast = collections.OrderedDict(list(model.named_parameters()))
        for _ in range(steps):
            inner = F.mse_loss(call_with(model, fast, (xs,)), ys)
            grads = torch.autograd.grad(inner, fast.values(), create_graph=not first_order)
            stepped = ((name, w - lr * g) for (name, w), g in zip(fast.items(), grads))
            fast = collections.OrderedDict(stepped)
        return F.mse_loss(call_with(model, fast, (xq,)), yq)
    weights = [w for w in model.parameters()]
    for _ in range(steps):
        inner = F.mse_loss(model.with_weights(xs, weights), ys)
        grads = torch.autograd.grad(inner, weights, create_graph=not first_order)
        weights = [w - lr * g for w, g in zip(weights, grads)]
    return F.mse_loss(model.with_weights(xq, weights), yq)

def main(state=None, first_order=False, functional=True, meta_steps=3):
    model = Regressor().double()
    if state is not None:
        model.load_state_dict(state)
    start = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(7)
    log = []
    for _ in range(meta_steps):
        tasks = [sine_task(rng, 4) for _ in range(2)]
        meta_loss = 0
        for support, query in tasks:
            task_loss = adapted_loss(model, support, query, 0.02, 2, first_order, functional)
            meta_loss = meta_loss + task_loss
        meta_loss = meta_loss / float(len(tasks))
        meta_opt.zero_grad()
        meta_loss.backward()
        meta_opt.step()
        log.append(meta_loss.item())
        log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return start, log
"""

MAML_STEP = [
    (
        "        meta_loss.backward()\n        meta_opt.step()",
        "        meta_grads = meta_loss.backward()\n        meta_opt.step(meta_grads)",
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
    initial, expected = theirs["main"](None, first_order, True, meta_steps=2)
    checkpointing = (
        rg.BalancedCheckpointing() if strategy == "balanced" else rg.BudgetCheckpointing("1KB")
    )
    with rg.use_backend(rg.Autodiff(rg.current_backend().inner, checkpointing=checkpointing)):
        _, got = ours["main"](initial, first_order, True, meta_steps=2)
    assert_records_agree(got, expected, rtol=1e-9, atol=1e-11)
