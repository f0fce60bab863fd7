"""Real-port tests, continued (the harness: ``tests/real_ports.py``): optimizers written on
top of ``torch.optim.Optimizer``, as programs written here in the style of three small
repositories, each training a small classifier against torch's run of the same code.

- Sharpness-aware minimization in the style of davda54/sam: ``super().__init__(params,
  defaults)`` then a base optimizer built from the wrapper's own ``param_groups`` (whose extra
  keys it keeps), ``self.param_groups = self.base_optimizer.param_groups``,
  ``self.defaults.update(...)``; the ascent under ``@torch.no_grad()`` with the gradient norm
  by ``torch.norm(torch.stack([(... * p.grad).norm(p=2).to(device) ...]), p=2)``, ``self.state[p]
  ['start'] = p.data.clone()``, ``scale.to(p)`` and ``p.add_``; the descent putting the weights
  back by ``p.data = self.state[p]['start']`` before the base step; ``step(closure)`` wrapping
  the closure by ``torch.enable_grad()(closure)``; ``load_state_dict`` re-pointing the base
  optimizer's groups. Driven both ways (the two passes written out, and a closure), SAM with
  SGD and momentum, ASAM (``adaptive=True``) with Adam, and resumed from a state dict.
- LAMB in the style of cybertronai/pytorch-lamb: ``grad = p.grad.data``, ``grad.is_sparse``,
  ``state['step']`` a Python int, moments by ``mul_().add_(grad, alpha=)`` and
  ``addcmul_(grad, grad, value=)``, the trust ratio from ``p.data.pow(2).sum().sqrt().clamp(0,
  10)`` with ``if w_norm == 0 or step_norm == 0`` on 0-d tensors, 0-d tensors kept in the state,
  and ``p.data.add_(step, alpha=-lr * trust)`` whose ``alpha`` is a 0-d tensor.
- Lookahead in the style of alphadl/lookahead.pytorch: see its test.

The ports change the gradient lines only: the optimizers read ``p.grad(grads)`` from the
gradients they are handed, and a closure returns its gradients with its loss.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SAM_SOURCE = """
import torch


class SharpnessAware(torch.optim.Optimizer):
    # a step in two passes: climb rho along the gradient (times |w| when adaptive), take the
    # gradient there, then step the base optimizer from where the climb started
    def __init__(self, params, base, rho=0.05, adaptive=False, **kwargs):
        if rho < 0.0:
            raise ValueError(f'rho must not be negative: {rho}')
        super().__init__(params, dict(rho=rho, adaptive=adaptive, **kwargs))
        inner = self.base_optimizer = base(self.param_groups, **kwargs)
        self.param_groups = inner.param_groups  # one list of groups for both
        self.defaults.update(inner.defaults)

    def gradient_norm(self):
        device = self.param_groups[0]['params'][0].device
        parts = [((torch.abs(p) if g['adaptive'] else 1.0) * p.grad).norm(p=2).to(device)
                 for g in self.param_groups for p in g['params'] if p.grad is not None]
        return torch.norm(torch.stack(parts), p=2)

    @torch.no_grad()
    def ascend(self, zero_grad=False):
        norm = self.gradient_norm()
        for g in self.param_groups:
            scale = g['rho'] / (norm + 1e-12)
            for p in g['params']:
                if p.grad is not None:
                    self.state[p]['start'] = p.data.clone()
                    p.add_((torch.pow(p, 2) if g['adaptive'] else 1.0) * p.grad * scale.to(p))
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def descend(self, zero_grad=False):
        for g in self.param_groups:
            for p in g['params']:
                if p.grad is not None:
                    p.data = self.state[p]['start']
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def step(self, closure=None):
        if closure is None:
            raise ValueError('sharpness-aware steps take a closure')
        closure = torch.enable_grad()(closure)
        self.ascend(zero_grad=True)
        closure()
        self.descend()

    def load_state_dict(self, saved):
        super().load_state_dict(saved)
        inner = self.base_optimizer
        inner.param_groups = self.param_groups  # the loaded groups, shared again


def build(params):
    if adaptive:
        return SharpnessAware(params, torch.optim.Adam, rho=2.0, adaptive=True, lr=0.01,
                              betas=(0.8, 0.99))
    return SharpnessAware(params, torch.optim.SGD, lr=0.1, momentum=0.9)


def new_model():
    model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
    initialize(model)
    return model


def note(loss, model, optimizer):
    first = optimizer.state[model[0].weight]
    moments = {k: v.numpy().copy() for k, v in first.items() if k != 'step'}
    record.extend([loss.item(), params_of(model), moments])


model = new_model()
optimizer = build(model.parameters())
record.append({'rho', 'adaptive', 'lr', 'params'} <= set(optimizer.param_groups[0]))
for epoch in range(2):
    for x, y in data:
        if written_out:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.ascend(zero_grad=True)
            again = F.cross_entropy(model(x), y)
            again.backward()
            optimizer.descend(zero_grad=True)
        else:
            def closure():
                inner = F.cross_entropy(model(x), y)
                inner.backward()
                return inner

            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step(closure)
            optimizer.zero_grad()
        note(loss, model, optimizer)

checkpoint = {'model': model.state_dict(), 'optimizer': optimizer.state_dict()}
model = new_model()
model.load_state_dict(checkpoint['model'])
optimizer = build(model.parameters())
optimizer.load_state_dict(checkpoint['optimizer'])
assert optimizer.param_groups is optimizer.base_optimizer.param_groups
for x, y in data:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.ascend(zero_grad=True)
    again = F.cross_entropy(model(x), y)
    again.backward()
    optimizer.descend(zero_grad=True)
    note(loss, model, optimizer)
"""

SAM_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("    def gradient_norm(self):", "    def gradient_norm(self, grads):"),
    ("        norm = self.gradient_norm()", "        norm = self.gradient_norm(grads)"),
    ("    def ascend(self, zero_grad=False):", "    def ascend(self, grads, zero_grad=False):"),
    ("    def descend(self, zero_grad=False):", "    def descend(self, grads, zero_grad=False):"),
    ("        self.base_optimizer.step()\n", "        self.base_optimizer.step(grads)\n"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    (
        "        self.ascend(zero_grad=True)\n        closure()\n        self.descend()",
        "        self.ascend(grads, zero_grad=True)\n        _, grads = closure()\n"
        "        self.descend(grads)",
    ),
    ("p.grad", "p.grad(grads)"),
    ("loss.backward()\n", "grads = loss.backward()\n"),
    ("again.backward()\n", "grads = again.backward()\n"),
    ("optimizer.ascend(zero_grad=True)", "optimizer.ascend(grads, zero_grad=True)"),
    ("optimizer.descend(zero_grad=True)", "optimizer.descend(grads, zero_grad=True)"),
    (
        "                inner.backward()\n                return inner\n",
        "                grads = inner.backward()\n                return inner, grads\n",
    ),
    ("            optimizer.step(closure)", "            optimizer.step(grads, closure)"),
]


def _batches(seed):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 3, 6)) for _ in range(3)
    ]


def _records(source, steps, seed, **names):
    batches = _batches(seed)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, steps)
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        run_source(
            text,
            lib,
            record=record,
            data=data,
            initialize=initialize,
            params_of=params_of,
            **names,
        )
        records.append(record)
    return records


@pytest.mark.parametrize(
    ("adaptive", "written_out"), [(False, True), (False, False), (True, True), (True, False)]
)
def test_sam_trains_as_torch(adaptive, written_out):
    theirs, ours = _records(SAM_SOURCE, SAM_STEPS, 8501, adaptive=adaptive, written_out=written_out)
    assert len(theirs) == 1 + 3 * 9
    assert theirs[0] is True  # the extra keys kept in the groups
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_data_assignment_keeps_the_gradient_and_shares_the_values():
    """Weights put back by ``p.data = start`` between the backward and the step (SAM's
    second pass) keep their gradient in torch (retrograd's step used to find none and leave
    ``p`` alone), and ``p`` and ``start`` share one storage from then on: the step's update
    shows in ``start``, and a write into ``start`` shows in ``p``."""
    results = []
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.tensor([1.0, -2.0, 0.5]))
        optimizer = lib.optim.SGD([p], lr=0.1, momentum=0.9)
        old_p = p.data.clone()
        with lib.no_grad():
            p.add_(lib.tensor([0.25, 0.5, -1.0]))
        loss = (p * p * p).sum()
        grads = loss.backward()
        with lib.no_grad():
            p.data = old_p
        gradient = p.grad if lib is torch else p.grad(grads)
        results.append([gradient.numpy().copy()])
        optimizer.step() if lib is torch else optimizer.step(grads)
        results[-1] += [p.detach().numpy().copy(), old_p.numpy().copy()]
        old_p.mul_(2.0)
        results[-1].append(p.detach().numpy().copy())
    for mine, reference in zip(results[1], results[0]):
        np.testing.assert_allclose(mine, reference, rtol=1e-6)


LAMB_SOURCE = """
import torch
from torch.optim import Optimizer as Base


class LayerwiseAdam(Base):
    # Adam's direction, each tensor's step scaled by |w| / |direction| (LAMB, no debiasing)
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0, adam=False):
        if lr < 0.0 or eps < 0.0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f'bad settings: lr={lr}, eps={eps}, betas={betas}')
        self.adam = adam  # a trust ratio of 1 throughout: plain Adam without bias correction
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for settings in self.param_groups:
            b1, b2 = settings['betas']
            for p in settings['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError('sparse gradients are not supported')
                state = self.state[p]
                if not state:
                    state['step'] = 0
                    state['m'], state['v'] = torch.zeros_like(p.data), torch.zeros_like(p.data)
                state['step'] += 1
                state['m'].mul_(b1).add_(grad, alpha=1 - b1)
                state['v'].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                direction = state['m'] / state['v'].sqrt().add(settings['eps'])
                if settings['weight_decay']:
                    direction.add_(p.data, alpha=settings['weight_decay'])
                w_norm = p.data.pow(2).sum().sqrt().clamp(0, 10)
                d_norm = direction.pow(2).sum().sqrt()
                trust = 1 if w_norm == 0 or d_norm == 0 else w_norm / d_norm
                state['w_norm'], state['d_norm'], state['trust'] = w_norm, d_norm, trust
                if self.adam:
                    trust = 1
                p.data.add_(direction, alpha=-settings['lr'] * trust)
        return loss


model = nn.Sequential(nn.Linear(5, 6), nn.Tanh(), nn.Linear(6, 3))
initialize(model)
nn.init.zeros_(model[2].bias)  # a zero weight norm: that tensor's trust ratio is 1
optimizer = LayerwiseAdam(model.parameters(), lr=0.02, weight_decay=weight_decay, adam=adam)
for epoch in range(3):
    for x, y in data:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        first = optimizer.state[model[0].weight]
        numbers = [first['step']] + [float(first[k]) for k in ('trust', 'w_norm', 'd_norm')]
        record.extend([loss.item(), params_of(model), numbers])
"""

LAMB_STEPS = [
    ("\nimport torch\nfrom torch.optim", "\nimport retrograd as torch\nfrom retrograd.optim"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("p.grad", "p.grad(grads)"),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize(("weight_decay", "adam"), [(0.01, False), (0.0, True)])
def test_lamb_trains_as_torch(weight_decay, adam):
    theirs, ours = _records(LAMB_SOURCE, LAMB_STEPS, 8502, weight_decay=weight_decay, adam=adam)
    assert len(theirs) == 3 * 3 * 3
    assert theirs[-3] < theirs[0]  # the loss fell
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


LOOKAHEAD_SOURCE = """
import collections

import torch
from torch.optim.optimizer import Optimizer as Base


class SlowFast(Base):
    # every k steps of the inner optimizer, the slow weights move alpha of the way to the fast
    # ones and the fast weights restart from them; never calls Optimizer.__init__
    def __init__(self, inner, k=5, alpha=0.5):
        self.inner, self.k, self.alpha = inner, k, alpha
        self.param_groups = inner.param_groups
        self.state = collections.defaultdict(dict)
        for g in self.param_groups:
            g['counter'] = 0

    def sync(self, group):
        for fast in group['params']:
            if 'slow' not in self.state[fast]:
                self.state[fast]['slow'] = torch.zeros_like(fast.data)
                self.state[fast]['slow'].copy_(fast.data)
            slow = self.state[fast]['slow']
            slow += self.alpha * (fast.data - slow)
            fast.data.copy_(slow)

    def step(self, closure=None):
        loss = self.inner.step(closure)
        for g in self.param_groups:
            if g['counter'] == 0:
                self.sync(g)
            g['counter'] = (g['counter'] + 1) % self.k
        return loss

    def state_dict(self):
        inner = self.inner.state_dict()
        slow = {(id(key) if isinstance(key, torch.Tensor) else key): value
                for key, value in self.state.items()}
        return {'fast_state': inner['state'], 'slow_state': slow,
                'param_groups': inner['param_groups']}

    def add_param_group(self, group):
        group['counter'] = 0
        self.inner.add_param_group(group)


body, head = nn.Sequential(nn.Linear(5, 8), nn.Tanh()), nn.Linear(8, 3)
initialize(body)
initialize(head)
optimizer = SlowFast(torch.optim.Adam(body.parameters(), lr=0.05), k=3, alpha=0.5)
for epoch in range(3):
    if epoch == 1:  # a head joins as a group of its own
        optimizer.add_param_group({'params': head.parameters(), 'lr': 0.02})
    for x, y in data:
        body.zero_grad()
        head.zero_grad()
        features = body(x)
        loss = F.cross_entropy(head(features) if epoch else features[:, :3], y)
        loss.backward()
        optimizer.step()
        counters = [g['counter'] for g in optimizer.param_groups]
        record.extend([loss.item(), params_of(body, head), counters])
snapshot = optimizer.state_dict()
record.append(sorted(snapshot))
record.append([[g['counter'], g['lr'], g['params']] for g in snapshot['param_groups']])
fast = snapshot['fast_state']
record.append({f'{i}.{k}': np.array(v) for i, s in fast.items() for k, v in s.items()})
record.append(sorted(len(s) for s in snapshot['slow_state'].values()))
"""

LOOKAHEAD_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("from torch.optim.optimizer import", "from retrograd.optim.optimizer import"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("self.inner.step(closure)", "self.inner.step(grads)"),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_lookahead_with_counters_in_the_groups_trains_as_torch():
    """A Lookahead optimizer in the style of alphadl/lookahead.pytorch: an ``Optimizer``
    subclass that never calls ``super().__init__`` and shares its inner optimizer's
    ``param_groups`` (a ``counter`` in each), slow weights by ``slow += (fast.data - slow) *
    alpha`` and ``fast.data.copy_(slow)``, ``add_param_group`` through the inner optimizer, a
    ``state_dict`` keyed by ``id(key) if isinstance(key, torch.Tensor)``."""
    theirs, ours = _records(LOOKAHEAD_SOURCE, LOOKAHEAD_STEPS, 8503)
    assert len(theirs) == 3 * 3 * 3 + 4
    assert theirs[-4] == ["fast_state", "param_groups", "slow_state"]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
