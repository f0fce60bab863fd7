"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the continual-learning code bases (moskomule/ewc.pytorch, the GEM code of
facebookresearch/GradientEpisodicMemory and mammoth's A-GEM), each trained over permuted
tasks against torch's run of the same program from the same weights and draws.

- elastic weight consolidation: a diagonal Fisher from squared gradients of one-sample losses
  (``deepcopy`` of a dict of parameters, ``p.data.zero_()`` on the copies,
  ``fisher[n].data += p.grad.data ** 2 / len(samples)``), ``Variable(t)`` behind
  ``torch.cuda.is_available()``, labels by ``out.max(1)[1].view(-1)``, a penalty grown by
  ``penalty += term.sum()`` from ``penalty = 0``, ``random.sample`` of tensors, and accuracy by
  ``(F.softmax(...).max(dim=1)[1] == y).data.sum()``;
- A-GEM: gradients packed into a flat buffer made by ``torch.Tensor(n)`` and ``fill_(0.0)``
  through slices (``flat[start:stop].copy_(p.grad.data.view(-1))``, with ``np.sum(sizes[:i +
  1])`` as a slice end), ``torch.dot`` and ``.item() < 0``, the projected vector written back by
  ``p.grad.data.copy_(...)`` into the gradient the optimizer then applies, and a reservoir
  memory sampled by ``np.random`` and stacked by ``torch.stack``.

In the ports only the import lines and the gradient lines differ (``grads = loss.backward()``,
``p.grad(grads)``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import random

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

EWC_SOURCE = """
from copy import deepcopy

import torch
from torch import autograd, nn

F = nn.functional


def as_var(t):
    if torch.cuda.is_available():
        t = t.cuda()
    return autograd.Variable(t)


class Consolidation:
    # remembers the weights after a task and how much each one mattered to it
    def __init__(self, net, samples):
        self.net, self.samples = net, samples
        named = {n: p for n, p in net.named_parameters() if p.requires_grad}
        self.anchor = {n: as_var(p.data) for n, p in deepcopy(named).items()}
        self.fisher = self.fisher_diagonal(named)

    def fisher_diagonal(self, named):
        fisher = {}
        for n, p in deepcopy(named).items():
            p.data.zero_()
            fisher[n] = as_var(p.data)
        self.net.eval()
        for x in self.samples:
            self.net.zero_grad()
            out = self.net(as_var(x)).view(1, -1)
            guess = out.max(1)[1].view(-1)
            F.nll_loss(F.log_softmax(out, dim=1), guess).backward()
            for n, p in self.net.named_parameters():
                fisher[n].data += p.grad.data ** 2 / len(self.samples)
        return fisher

    def penalty(self, net):
        penalty = 0
        for n, p in net.named_parameters():
            term = self.fisher[n] * (p - self.anchor[n]) ** 2
            penalty += term.sum()
        return penalty


def train_epoch(net, opt, batches, keeper=None, strength=0.0):
    net.train()
    total = 0.0
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(net(as_var(x)), as_var(y))
        if keeper is not None:
            loss = loss + strength * keeper.penalty(net)
        total += loss.item()
        loss.backward()
        opt.step()
    return total / len(batches)


def accuracy(net, batches):
    net.eval()
    hits = 0
    for x, y in batches:
        hits += (F.softmax(net(as_var(x)), dim=1).max(dim=1)[1] == y).data.sum()
    return hits.item() / sum(len(y) for _, y in batches)


net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
initialize(net)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
batches = [[(torch.tensor(x), torch.tensor(y)) for x, y in task] for task in tasks]
seen = []
for t, task in enumerate(batches):
    keeper = None
    if seen:
        keeper = Consolidation(net, random.sample(seen, k=5))
        record.append({n: f.detach().numpy() for n, f in keeper.fisher.items()})
    record.append(train_epoch(net, opt, task, keeper, strength=50.0))
    record.append([accuracy(net, batches[s]) for s in range(t + 1)])
    record.append(params_of(net))
    seen = seen + [row for x, _ in task for row in x]
"""

EWC_STEPS = [
    (
        "import torch\nfrom torch import autograd, nn\n",
        "import retrograd as torch\nfrom retrograd import autograd, nn\n",
    ),
    (
        "            F.nll_loss(F.log_softmax(out, dim=1), guess).backward()\n"
        "            for n, p in self.net.named_parameters():\n"
        "                fisher[n].data += p.grad.data",
        "            grads = F.nll_loss(F.log_softmax(out, dim=1), guess).backward()\n"
        "            for n, p in self.net.named_parameters():\n"
        "                fisher[n].data += p.grad(grads).data",
    ),
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]


def _permuted_tasks(rng, n_tasks, n_rows, batch):
    """3-class tasks on the same 8 features, each a fixed permutation of them."""
    centres = rng.standard_normal((3, 8)) * 1.5
    labels = rng.integers(0, 3, n_rows)
    features = (centres[labels] + rng.standard_normal((n_rows, 8))).astype(np.float32)
    tasks = []
    for _ in range(n_tasks):
        permuted = features[:, rng.permutation(8)]
        tasks.append(
            [(permuted[k : k + batch], labels[k : k + batch]) for k in range(0, n_rows, batch)]
        )
    return tasks


def test_ewc_penalises_moving_weights_the_fisher_marks_as_torch(capsys):
    rng = np.random.default_rng(25201)
    tasks = _permuted_tasks(rng, 3, 16, 8)
    (theirs, ours), _ = runs_with_draws(
        EWC_SOURCE, EWC_STEPS, capsys, 25201, tasks=tasks, random=random,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-6)
    # a Fisher diagonal is not all zero, so the penalty is in play
    assert max(float(np.abs(v).max()) for v in theirs[3].values()) > 1e-4


AGEM_SOURCE = """
import numpy as np
import torch
import torch.nn as nn

F = nn.functional


def pack_grads(params, flat, sizes):
    flat.fill_(0.0)
    for i, p in enumerate(params()):
        if p.grad is None:
            continue
        start = sum(sizes[:i])
        stop = np.sum(sizes[: i + 1])  # a NumPy integer as the slice end
        flat[start:stop].copy_(p.grad.data.view(-1))


def unpack_grads(params, flat, sizes):
    for i, p in enumerate(params()):
        if p.grad is None:
            continue
        start, stop = sum(sizes[:i]), sum(sizes[: i + 1])
        p.grad.data.copy_(flat[start:stop].contiguous().view(p.grad.data.size()))


class Reservoir:
    def __init__(self, capacity):
        self.capacity, self.seen = capacity, 0
        self.xs, self.ys = [], []

    def add(self, xs, ys):
        for x, y in zip(xs, ys):
            slot = self.seen if self.seen < self.capacity else np.random.randint(0, self.seen + 1)
            self.seen += 1
            if slot < len(self.xs):
                self.xs[slot], self.ys[slot] = x, y
            elif slot < self.capacity:
                self.xs.append(x)
                self.ys.append(y)

    def sample(self, k):
        pick = np.random.choice(len(self.xs), size=min(k, len(self.xs)), replace=False)
        return torch.stack([self.xs[i] for i in pick]), torch.stack([self.ys[i] for i in pick])


class AveragedGEM(nn.Module):
    def __init__(self, net, lr, capacity, replay):
        super().__init__()
        self.net, self.replay = net, replay
        self.opt = torch.optim.SGD(net.parameters(), lr=lr)
        self.memory = Reservoir(capacity)
        self.sizes = [p.data.numel() for p in self.parameters()]
        self.g_now = torch.Tensor(sum(self.sizes))
        self.g_mem = torch.Tensor(sum(self.sizes))
        self.projected = 0

    def step_on(self, x, y):
        self.zero_grad()
        loss = F.cross_entropy(self.net(x), y)
        loss.backward()
        if self.memory.seen:
            pack_grads(self.parameters, self.g_now, self.sizes)
            mx, my = self.memory.sample(self.replay)
            self.net.zero_grad()
            F.cross_entropy(self.net(mx), my).backward()
            pack_grads(self.parameters, self.g_mem, self.sizes)
            agreement = torch.dot(self.g_now, self.g_mem)
            if agreement.item() < 0:  # would undo the memory: drop that component
                scale = agreement / torch.dot(self.g_mem, self.g_mem)
                unpack_grads(self.parameters, self.g_now - scale * self.g_mem, self.sizes)
                self.projected += 1
            else:
                unpack_grads(self.parameters, self.g_now, self.sizes)
        self.opt.step()
        return loss.item()


net = nn.Sequential(nn.Linear(8, 12), nn.Tanh(), nn.Linear(12, 3))
initialize(net)
learner = AveragedGEM(net, lr=0.3, capacity=8, replay=4)
for task in tasks:
    for x, y in task:
        x, y = torch.tensor(x), torch.tensor(y)
        record.append(learner.step_on(x, y))
        if learner.memory.seen:
            record.append([learner.g_now.numpy().copy(), learner.g_mem.numpy().copy()])
    record.append(params_of(learner))
    learner.memory.add(x, y)
record.append(learner.projected)
"""

AGEM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("def pack_grads(params, flat, sizes):", "def pack_grads(params, flat, sizes, grads):"),
    ("def unpack_grads(params, flat, sizes):", "def unpack_grads(params, flat, sizes, grads):"),
    ("        if p.grad is None:", "        if p.grad(grads) is None:"),
    ("p.grad.data", "p.grad(grads).data"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    (
        "            F.cross_entropy(self.net(mx), my).backward()",
        "            grads = F.cross_entropy(self.net(mx), my).backward()",
    ),
    (", self.sizes)\n", ", self.sizes, grads)\n"),
    ("        self.opt.step()", "        self.opt.step(grads)"),
]


def test_agem_projects_conflicting_gradients_as_torch(capsys):
    rng = np.random.default_rng(25202)
    tasks = _permuted_tasks(rng, 3, 16, 4)
    (theirs, ours), _ = runs_with_draws(
        AGEM_SOURCE, AGEM_STEPS, capsys, 25202, tasks=tasks,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-6)
    assert theirs[-1] > 0  # some steps conflicted with the memory and were projected
