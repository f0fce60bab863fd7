# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
optimizers written on top of ``torch.optim.Optimizer`` as their repositories write them, each
training a small classifier against torch's run of the same code:

- SAM and ASAM as davda54/sam writes them (``sam.py``): ``super().__init__(params, defaults)``
  then ``self.base_optimizer = base_optimizer(self.param_groups, **kwargs)`` (an SGD built from
  the wrapper's own groups, whose extra keys ``rho``/``adaptive`` it keeps) and
  ``self.param_groups = self.base_optimizer.param_groups``, ``self.defaults.update(...)``;
  ``first_step`` under ``@torch.no_grad()``: the gradient norm by ``torch.norm(torch.stack([
  ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device) ...]),
  p=2)``, ``self.state[p]["old_p"] = p.data.clone()``, ``e_w = (torch.pow(p, 2) if
  group["adaptive"] else 1.0) * p.grad * scale.to(p)`` and ``p.add_(e_w)``; ``second_step``
  putting the weights back by ``p.data = self.state[p]["old_p"]`` before the base optimizer's
  step; ``step(closure)`` wrapping the closure by ``torch.enable_grad()(closure)``; and
  ``load_state_dict`` re-pointing ``base_optimizer.param_groups``. Driven both ways its README
  shows: the two passes written out (``first_step(zero_grad=True)``, ``second_step(
  zero_grad=True)``) and ``optimizer.step(closure)``; SAM with SGD and momentum, ASAM
  (``adaptive=True, rho=2.0``) with Adam; the state dict saved mid-training into a fresh
  model and optimizer that carry on.
- LAMB as cybertronai/pytorch-lamb writes it (``pytorch_lamb/lamb.py``): ``grad = p.grad.data``,
  ``grad.is_sparse``, ``state['step']`` a Python int, the moments by ``mul_(beta1).add_(grad,
  alpha=1 - beta1)`` and ``addcmul_(grad, grad, value=1 - beta2)``, the trust ratio from
  ``p.data.pow(2).sum().sqrt().clamp(0, 10)`` and ``adam_step.pow(2).sum().sqrt()`` with
  ``if weight_norm == 0 or adam_norm == 0`` on 0-d tensors, the 0-d tensors kept in the state
  (``state['trust_ratio']``), and the update ``p.data.add_(adam_step, alpha=-step_size *
  trust_ratio)``, whose ``alpha`` is a 0-d tensor (torch takes it as its number); with weight
  decay, and with ``adam=True`` (trust ratio 1).

The lines changed: the ``import`` lines; the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``), and, as the gradients are a value here and not an attribute, the
optimizers' own: ``p.grad`` is ``p.grad(grads)``, ``first_step``/``second_step``/``step``/
``_grad_norm`` take the gradients they read (``first_step(self, grads, zero_grad=False)``),
the base optimizer's step is given the second pass's (``self.base_optimizer.step(grads)``),
and a closure returns its gradients with its loss (``loss, grads = closure()``). The training
loops are written for the test, as the READMEs use the optimizers.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

SAM_SOURCE = """
import torch


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, adaptive=False, **kwargs):
        assert rho >= 0.0, f"Invalid rho, should be non-negative: {rho}"

        defaults = dict(rho=rho, adaptive=adaptive, **kwargs)
        super(SAM, self).__init__(params, defaults)

        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups
        self.defaults.update(self.base_optimizer.defaults)

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grad_norm = self._grad_norm()
        for group in self.param_groups:
            scale = group["rho"] / (grad_norm + 1e-12)

            for p in group["params"]:
                if p.grad is None: continue
                self.state[p]["old_p"] = p.data.clone()
                e_w = (torch.pow(p, 2) if group["adaptive"] else 1.0) * p.grad * scale.to(p)
                p.add_(e_w)  # climb to the local maximum "w + e(w)"

        if zero_grad: self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None: continue
                p.data = self.state[p]["old_p"]  # get back to "w" from "w + e(w)"

        self.base_optimizer.step()  # do the actual "sharpness-aware" update

        if zero_grad: self.zero_grad()

    @torch.no_grad()
    def step(self, closure=None):
        assert closure is not None, "Sharpness Aware Minimization requires closure, but it was not provided"
        closure = torch.enable_grad()(closure)  # the closure should do a full forward-backward pass

        self.first_step(zero_grad=True)
        closure()
        self.second_step()

    def _grad_norm(self):
        shared_device = self.param_groups[0]["params"][0].device  # put everything on the same device, in case of model parallelism
        norm = torch.norm(
                    torch.stack([
                        ((torch.abs(p) if group["adaptive"] else 1.0) * p.grad).norm(p=2).to(shared_device)
                        for group in self.param_groups for p in group["params"]
                        if p.grad is not None
                    ]),
                    p=2
               )
        return norm

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self.base_optimizer.param_groups = self.param_groups


def make_model():
    model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    initialize(model)
    return model


def record_step(loss, model, optimizer):
    record.append(loss.item())
    record.append(params_of(model))
    record.append({k: v.numpy().copy() for k, v in optimizer.state[model[0].weight].items() if k != "step"})


model = make_model()
if adaptive:
    optimizer = SAM(model.parameters(), torch.optim.Adam, rho=2.0, adaptive=True, lr=0.01, betas=(0.8, 0.99))
else:
    optimizer = SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
record.append([k for k in ("rho", "adaptive", "lr", "params") if k in optimizer.param_groups[0]])
for epoch in range(2):
    for input, output in data:
        if written_out:
            # first forward-backward pass
            loss = F.cross_entropy(model(input), output)  # use this loss for any training statistics
            loss.backward()
            optimizer.first_step(zero_grad=True)

            # second forward-backward pass
            F.cross_entropy(model(input), output).backward()  # make sure to do a full forward pass
            optimizer.second_step(zero_grad=True)
        else:
            def closure():
                loss = F.cross_entropy(model(input), output)
                loss.backward()
                return loss

            loss = F.cross_entropy(model(input), output)
            loss.backward()
            optimizer.step(closure)
            optimizer.zero_grad()
        record_step(loss, model, optimizer)

saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
resumed = make_model()
resumed.load_state_dict(saved["model"])
if adaptive:
    optimizer = SAM(resumed.parameters(), torch.optim.Adam, rho=2.0, adaptive=True, lr=0.01, betas=(0.8, 0.99))
else:
    optimizer = SAM(resumed.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
optimizer.load_state_dict(saved["optimizer"])
assert optimizer.base_optimizer.param_groups is optimizer.param_groups
for input, output in data:
    loss = F.cross_entropy(resumed(input), output)
    loss.backward()
    optimizer.first_step(zero_grad=True)
    F.cross_entropy(resumed(input), output).backward()
    optimizer.second_step(zero_grad=True)
    record_step(loss, resumed, optimizer)
"""

SAM_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "    def first_step(self, zero_grad=False):",
        "    def first_step(self, grads, zero_grad=False):",
    ),
    ("        grad_norm = self._grad_norm()", "        grad_norm = self._grad_norm(grads)"),
    (
        "    def second_step(self, zero_grad=False):",
        "    def second_step(self, grads, zero_grad=False):",
    ),
    ("        self.base_optimizer.step()  # do", "        self.base_optimizer.step(grads)  # do"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    (
        "        self.first_step(zero_grad=True)\n        closure()\n        self.second_step()",
        "        self.first_step(grads, zero_grad=True)\n        _, grads = closure()\n        self.second_step(grads)",
    ),
    ("    def _grad_norm(self):", "    def _grad_norm(self, grads):"),
    ("p.grad", "p.grad(grads)"),
    (
        "            loss.backward()\n            optimizer.first_step(zero_grad=True)",
        "            grads = loss.backward()\n            optimizer.first_step(grads, zero_grad=True)",
    ),
    (
        "            F.cross_entropy(model(input), output).backward()  # make sure to do a full forward pass\n            optimizer.second_step(zero_grad=True)",
        "            grads = F.cross_entropy(model(input), output).backward()  # make sure to do a full forward pass\n            optimizer.second_step(grads, zero_grad=True)",
    ),
    (
        "                loss.backward()\n                return loss\n",
        "                grads = loss.backward()\n                return loss, grads\n",
    ),
    (
        "            loss.backward()\n            optimizer.step(closure)",
        "            grads = loss.backward()\n            optimizer.step(grads, closure)",
    ),
    (
        "    loss.backward()\n    optimizer.first_step(zero_grad=True)\n    F.cross_entropy(resumed(input), output).backward()\n    optimizer.second_step(zero_grad=True)",
        "    grads = loss.backward()\n    optimizer.first_step(grads, zero_grad=True)\n    grads = F.cross_entropy(resumed(input), output).backward()\n    optimizer.second_step(grads, zero_grad=True)",
    ),
]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


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
    assert theirs[0] == ["rho", "adaptive", "lr", "params"]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


def test_data_assignment_keeps_the_gradient_and_shares_the_values():
    """davda54/sam's ``second_step``: ``p.data = old_p`` after the backward, then the step.
    torch's ``.grad`` survives the assignment (the step used to find no gradient and leave
    ``p`` as it was), and ``p`` and ``old_p`` are one storage from then on (the step's update
    shows in ``old_p``; a write into ``old_p`` shows in ``p``)."""
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


LAMB_SOURCE = '''
import torch
from torch.optim import Optimizer


class Lamb(Optimizer):
    r"""Implements Lamb algorithm.

    It has been proposed in `Large Batch Optimization for Deep Learning: Training BERT in 76 minutes`_.

    Arguments:
        params (iterable): iterable of parameters to optimize or dicts defining
            parameter groups
        lr (float, optional): learning rate (default: 1e-3)
        betas (Tuple[float, float], optional): coefficients used for computing
            running averages of gradient and its square (default: (0.9, 0.999))
        eps (float, optional): term added to the denominator to improve
            numerical stability (default: 1e-8)
        weight_decay (float, optional): weight decay (L2 penalty) (default: 0)
        adam (bool, optional): always use trust ratio = 1, which turns this into
            Adam. Useful for comparison purposes.

    .. _Large Batch Optimization for Deep Learning: Training BERT in 76 minutes:
        https://arxiv.org/abs/1904.00962
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6,
                 weight_decay=0, adam=False):
        if not 0.0 <= lr:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not 0.0 <= eps:
            raise ValueError("Invalid epsilon value: {}".format(eps))
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError("Invalid beta parameter at index 0: {}".format(betas[0]))
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError("Invalid beta parameter at index 1: {}".format(betas[1]))
        defaults = dict(lr=lr, betas=betas, eps=eps,
                        weight_decay=weight_decay)
        self.adam = adam
        super(Lamb, self).__init__(params, defaults)

    def step(self, closure=None):
        """Performs a single optimization step.

        Arguments:
            closure (callable, optional): A closure that reevaluates the model
                and returns the loss.
        """
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError('Lamb does not support sparse gradients, consider SparseAdam instad.')

                state = self.state[p]

                # State initialization
                if len(state) == 0:
                    state['step'] = 0
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state['exp_avg_sq'] = torch.zeros_like(p.data)

                exp_avg, exp_avg_sq = state['exp_avg'], state['exp_avg_sq']
                beta1, beta2 = group['betas']

                state['step'] += 1

                # Decay the first and second moment running average coefficient
                # m_t
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                # v_t
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

                # Paper v3 does not use debiasing.
                # bias_correction1 = 1 - beta1 ** state['step']
                # bias_correction2 = 1 - beta2 ** state['step']
                # Apply bias to lr to avoid broadcast.
                step_size = group['lr'] # * math.sqrt(bias_correction2) / bias_correction1

                weight_norm = p.data.pow(2).sum().sqrt().clamp(0, 10)

                adam_step = exp_avg / exp_avg_sq.sqrt().add(group['eps'])
                if group['weight_decay'] != 0:
                    adam_step.add_(p.data, alpha=group['weight_decay'])

                adam_norm = adam_step.pow(2).sum().sqrt()
                if weight_norm == 0 or adam_norm == 0:
                    trust_ratio = 1
                else:
                    trust_ratio = weight_norm / adam_norm
                state['weight_norm'] = weight_norm
                state['adam_norm'] = adam_norm
                state['trust_ratio'] = trust_ratio
                if self.adam:
                    trust_ratio = 1

                p.data.add_(adam_step, alpha=-step_size * trust_ratio)

        return loss


# -- the training loop (written for the test): a zero-initialised bias takes trust ratio 1 --
model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
initialize(model)
nn.init.zeros_(model[2].bias)
optimizer = Lamb(model.parameters(), lr=0.02, weight_decay=weight_decay, betas=(.9, .999), adam=adam)
for epoch in range(3):
    for input, output in data:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(input), output)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(params_of(model))
        state = optimizer.state[model[0].weight]
        record.append([state['step'], float(state['trust_ratio']), float(state['weight_norm']), float(state['adam_norm'])])
'''

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
from collections import defaultdict

import torch
from torch.optim.optimizer import Optimizer


class Lookahead(Optimizer):
    def __init__(self, optimizer, k=5, alpha=0.5):
        self.optimizer = optimizer
        self.k = k
        self.alpha = alpha
        self.param_groups = self.optimizer.param_groups
        self.state = defaultdict(dict)
        self.fast_state = self.optimizer.state
        for group in self.param_groups:
            group["counter"] = 0

    def update(self, group):
        for fast in group["params"]:
            param_state = self.state[fast]
            if "slow_param" not in param_state:
                param_state["slow_param"] = torch.zeros_like(fast.data)
                param_state["slow_param"].copy_(fast.data)
            slow = param_state["slow_param"]
            slow += (fast.data - slow) * self.alpha
            fast.data.copy_(slow)

    def update_lookahead(self):
        for group in self.param_groups:
            self.update(group)

    def step(self, closure=None):
        loss = self.optimizer.step(closure)
        for group in self.param_groups:
            if group["counter"] == 0:
                self.update(group)
            group["counter"] += 1
            if group["counter"] >= self.k:
                group["counter"] = 0
        return loss

    def state_dict(self):
        fast_state_dict = self.optimizer.state_dict()
        slow_state = {
            (id(k) if isinstance(k, torch.Tensor) else k): v
            for k, v in self.state.items()
        }
        fast_state = fast_state_dict["state"]
        param_groups = fast_state_dict["param_groups"]
        return {
            "fast_state": fast_state,
            "slow_state": slow_state,
            "param_groups": param_groups,
        }

    def add_param_group(self, param_group):
        param_group["counter"] = 0
        self.optimizer.add_param_group(param_group)


# -- the loop (written for the test): Adam inside, a head added as a new group mid-run --
body = nn.Sequential(nn.Linear(5, 8), nn.Tanh())
head = nn.Linear(8, 3)
initialize(body)
initialize(head)
base_optimizer = torch.optim.Adam(body.parameters(), lr=0.05)
optimizer = Lookahead(base_optimizer, k=3, alpha=0.5)
for epoch in range(3):
    if epoch == 1:
        optimizer.add_param_group({"params": head.parameters(), "lr": 0.02})
    for input, output in data:
        body.zero_grad()  # (torch's Optimizer.zero_grad reads self.defaults, which this one lacks)
        head.zero_grad()
        features = body(input)
        logits = head(features) if epoch >= 1 else features[:, :3]
        loss = F.cross_entropy(logits, output)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(params_of(body, head))
        record.append([group["counter"] for group in optimizer.param_groups])
saved = optimizer.state_dict()
record.append(sorted(saved))
record.append([[group["counter"], group["lr"], group["params"]] for group in saved["param_groups"]])
record.append({f"{i}.{k}": np.array(v) for i, state in saved["fast_state"].items() for k, v in state.items()})  # (retrograd's: NumPy copies, by design)
record.append(sorted(len(state) for state in saved["slow_state"].values()))
"""

LOOKAHEAD_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("from torch.optim.optimizer import", "from retrograd.optim.optimizer import"),
    ("    def step(self, closure=None):", "    def step(self, grads, closure=None):"),
    ("self.optimizer.step(closure)", "self.optimizer.step(grads)"),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_lookahead_with_counters_in_the_groups_trains_as_torch():
    """alphadl/lookahead.pytorch's ``Lookahead`` (``lookahead.py``): an ``Optimizer`` subclass
    that never calls ``super().__init__``, sharing the inner optimizer's ``param_groups`` (its
    ``counter`` kept in each group), the slow weights by ``slow += (fast.data - slow) *
    self.alpha`` and ``fast.data.copy_(slow)``, ``add_param_group`` through the inner
    optimizer, and ``state_dict`` keyed by ``id(k) if isinstance(k, torch.Tensor)``."""
    theirs, ours = _records(LOOKAHEAD_SOURCE, LOOKAHEAD_STEPS, 8503)
    assert len(theirs) == 3 * 3 * 3 + 4
    assert theirs[-4] == ["fast_state", "param_groups", "slow_state"]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
