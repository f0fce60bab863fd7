"""A program written here in the style of quark0/darts (differentiable architecture search with
the second-order architecture gradient), run under torch and, ported, under retrograd from the
same weights and draws (the harness: ``tests/real_ports.py``): a small supernet of two search
cells whose edges mix five candidate ops by softmaxed architecture weights, searched for two
epochs of one batch on 6x6 inputs.

What it exercises: architecture weights as ``Variable(1e-3 * torch.randn(...),
requires_grad=True)`` kept outside ``parameters()`` and copied into a fresh twin network by
``mine.data.copy_(theirs.data)``; ``torch.autograd.grad`` of a loss with respect to
``net.parameters()`` and to a list of non-parameter leaves; flattening by ``torch.cat([t.view(-1)
for t in ts])``; the momentum buffers read by ``opt.state[p]["momentum_buffer"]`` in a ``try``
that catches the ``KeyError`` of the first step; the virtual step ``theta.sub(buf + grad,
alpha=eta)`` sliced back by ``theta[start:start + size].view(p.size())`` with ``np.prod`` sizes,
merged by ``state.update`` and loaded by ``load_state_dict``; the finite-difference
Hessian-vector product with ``p.data.add_(v, alpha=eps)`` for a 0-d tensor ``eps`` and
``(a - b).div_(2 * eps)``; ``g.data.sub_(h.data, alpha=eta)`` on a gradient; the architecture
gradient installed by ``a.grad = Variable(g.data)`` for Adam (``betas``, ``weight_decay``);
``nn.utils.clip_grad_norm`` (the deprecated name); SGD with momentum and weight decay under
``CosineAnnealingLR`` read by ``get_last_lr()``; the candidate ops: a zero op ``x.mul(0.)``,
``nn.Identity``, ``MaxPool2d`` and ``AvgPool2d(count_include_pad=False)`` each followed by
``BatchNorm2d(affine=False)``, a depthwise-separable ``Conv2d(groups=ch)``; mixing by
``sum(w * op(x) for ...)``.

The port changes the ``import`` lines and the gradient lines (``grads = loss.backward()``;
``.grad`` read from ``grads``; ``a.grad = ...`` as ``a.grad_replace(grads, ...)``; the
gradients given to both optimizers and ``clip_grad_norm``).
"""

from __future__ import annotations

import numpy as np

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

DARTS_SOURCE = """
import numpy as np
import torch
from torch import nn
from torch.autograd import Variable  # the deprecated wrapper older search code uses
from torch.nn import functional as F

CANDIDATES = ["zero", "identity", "max3", "avg3", "sep3"]


class Zero(nn.Module):
    def forward(self, x):
        return x.mul(0.)


def candidate(name, ch):
    if name == "zero":
        return Zero()
    if name == "identity":
        return nn.Identity()
    if name == "max3":
        pool = nn.MaxPool2d(3, stride=1, padding=1)
    elif name == "avg3":
        pool = nn.AvgPool2d(3, stride=1, padding=1, count_include_pad=False)
    else:  # depthwise then pointwise
        return nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(ch, ch, 3, padding=1, groups=ch, bias=False),
            nn.Conv2d(ch, ch, 1, bias=False),
            nn.BatchNorm2d(ch, affine=False),
        )
    return nn.Sequential(pool, nn.BatchNorm2d(ch, affine=False))


class MixedEdge(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.ops = nn.ModuleList([candidate(name, ch) for name in CANDIDATES])

    def forward(self, x, mix):
        return sum(w * op(x) for w, op in zip(mix, self.ops))


def squeeze(c_in, c_out):
    conv = nn.Conv2d(c_in, c_out, 1, bias=False)
    return nn.Sequential(nn.ReLU(), conv, nn.BatchNorm2d(c_out, affine=False))


class SearchCell(nn.Module):
    # two inputs, one intermediate node fed by an edge from each
    def __init__(self, in_a, in_b, ch):
        super().__init__()
        self.prep_a = squeeze(in_a, ch)
        self.prep_b = squeeze(in_b, ch)
        self.edges = nn.ModuleList([MixedEdge(ch), MixedEdge(ch)])

    def forward(self, a, b, mix):
        inputs = [self.prep_a(a), self.prep_b(b)]
        node = sum(edge(h, mix[i]) for i, (edge, h) in enumerate(zip(self.edges, inputs)))
        return torch.cat([inputs[1], node], dim=1)


class Supernet(nn.Module):
    def __init__(self, criterion, ch=2, classes=3):
        super().__init__()
        self.criterion, self.ch, self.classes = criterion, ch, classes
        stem_conv = nn.Conv2d(1, 2 * ch, 3, padding=1, bias=False)
        self.stem = nn.Sequential(stem_conv, nn.BatchNorm2d(2 * ch))
        self.cell_a = SearchCell(2 * ch, 2 * ch, ch)
        self.cell_b = SearchCell(2 * ch, 2 * ch, ch)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(2 * ch, classes)
        self.alpha_a = Variable(1e-3 * torch.randn(2, len(CANDIDATES)), requires_grad=True)
        self.alpha_b = Variable(1e-3 * torch.randn(2, len(CANDIDATES)), requires_grad=True)

    def arch(self):
        return [self.alpha_a, self.alpha_b]

    def twin(self):
        other = Supernet(self.criterion, self.ch, self.classes)
        for mine, theirs in zip(other.arch(), self.arch()):
            mine.data.copy_(theirs.data)
        return other

    def forward(self, x):
        s = self.stem(x)
        a = self.cell_a(s, s, F.softmax(self.alpha_a, dim=-1))
        b = self.cell_b(s, a, F.softmax(self.alpha_b, dim=-1))
        pooled = self.pool(b)
        return self.head(pooled.view(pooled.size(0), -1))

    def loss(self, x, y):
        return self.criterion(self(x), y)


def flat(tensors):
    return torch.cat([t.view(-1) for t in tensors])


class ArchSearch:
    def __init__(self, net, hp):
        self.net, self.hp = net, hp
        self.opt = torch.optim.Adam(
            net.arch(), lr=hp.arch_lr, betas=(0.5, 0.999), weight_decay=hp.arch_wd
        )

    def from_flat(self, theta):
        other = self.net.twin()
        state = self.net.state_dict()
        pieces, start = {}, 0
        for name, p in self.net.named_parameters():
            size = np.prod(p.size())
            pieces[name] = theta[start:start + size].view(p.size())
            start += size
        assert start == len(theta)
        state.update(pieces)
        other.load_state_dict(state)
        return other

    def lookahead(self, x, y, eta, w_opt):
        # the weights after one virtual SGD step, in a new network
        theta = flat(self.net.parameters()).data
        try:
            buf = flat(w_opt.state[p]["momentum_buffer"] for p in self.net.parameters())
            buf = buf.mul_(self.hp.momentum)
        except KeyError:  # no buffers before the first real step
            buf = torch.zeros_like(theta)
        grad = flat(torch.autograd.grad(self.net.loss(x, y), self.net.parameters())).data
        return self.from_flat(theta.sub(buf + grad + self.hp.wd * theta, alpha=eta))

    def hessian_vector(self, vec, x, y, r=1e-2):
        eps = r / flat(vec).norm()
        params = list(self.net.parameters())
        for p, v in zip(params, vec):
            p.data.add_(v, alpha=eps)
        up = torch.autograd.grad(self.net.loss(x, y), self.net.arch())
        for p, v in zip(params, vec):
            p.data.sub_(v, alpha=2 * eps)
        down = torch.autograd.grad(self.net.loss(x, y), self.net.arch())
        for p, v in zip(params, vec):
            p.data.add_(v, alpha=eps)
        return [(a - b).div_(2 * eps) for a, b in zip(up, down)]

    def step(self, x_fit, y_fit, x_val, y_val, eta, w_opt):
        self.opt.zero_grad()
        ahead = self.lookahead(x_fit, y_fit, eta, w_opt)
        ahead.loss(x_val, y_val).backward()
        d_alpha = [a.grad for a in ahead.arch()]
        d_weights = [p.grad.data for p in ahead.parameters()]
        for g, h in zip(d_alpha, self.hessian_vector(d_weights, x_fit, y_fit)):
            g.data.sub_(h.data, alpha=eta)
        for a, g in zip(self.net.arch(), d_alpha):
            if a.grad is None:
                a.grad = Variable(g.data)
            else:
                a.grad.data.copy_(g.data)
        self.opt.step()


class hp:
    lr, lr_min, momentum, wd = 0.05, 0.001, 0.9, 3e-4
    arch_lr, arch_wd, clip, epochs = 0.03, 1e-3, 5.0, 2


cross_entropy = nn.CrossEntropyLoss()
net = Supernet(cross_entropy)
initialize(net)
w_opt = torch.optim.SGD(net.parameters(), hp.lr, momentum=hp.momentum, weight_decay=hp.wd)
schedule = torch.optim.lr_scheduler.CosineAnnealingLR(
    w_opt, float(hp.epochs), eta_min=hp.lr_min
)
search = ArchSearch(net, hp)
x_fit, y_fit = torch.tensor(fit_batch[0]), torch.tensor(fit_batch[1])
x_val, y_val = torch.tensor(val_batch[0]), torch.tensor(val_batch[1])
for epoch in range(hp.epochs):
    net.train()
    eta = schedule.get_last_lr()[0]
    search.step(x_fit, y_fit, x_val, y_val, eta, w_opt)
    w_opt.zero_grad()
    loss = net.loss(x_fit, y_fit)
    loss.backward()
    nn.utils.clip_grad_norm(net.parameters(), hp.clip)
    w_opt.step()
    schedule.step()
    record.append(loss.item())
    record.append([a.detach().numpy().copy() for a in net.arch()])
    record.append(F.softmax(net.alpha_b, dim=-1).detach().numpy())
    record.append(params_of(net))
"""

DARTS_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        ahead.loss(x_val, y_val).backward()\n",
        "        grads = ahead.loss(x_val, y_val).backward()\n",
    ),
    ("[a.grad for a in ahead", "[a.grad(grads) for a in ahead"),
    ("[p.grad.data for p in ahead", "[p.grad(grads).data for p in ahead"),
    (
        "            if a.grad is None:\n"
        "                a.grad = Variable(g.data)\n"
        "            else:\n"
        "                a.grad.data.copy_(g.data)\n"
        "        self.opt.step()",
        "            if a.grad(grads) is None:\n"
        "                a.grad_replace(grads, Variable(g.data))\n"
        "            else:\n"
        "                a.grad(grads).data.copy_(g.data)\n"
        "        self.opt.step(grads)",
    ),
    (
        "    loss.backward()\n    nn.utils.clip_grad_norm(net.parameters(), hp.clip)\n"
        "    w_opt.step()",
        "    grads = loss.backward()\n"
        "    nn.utils.clip_grad_norm(grads, net.parameters(), hp.clip)\n"
        "    w_opt.step(grads)",
    ),
]


def test_darts_second_order_search_as_torch(capsys):
    rng = np.random.default_rng(2531)

    def batch():
        return rng.standard_normal((4, 1, 6, 6)).astype(np.float32), rng.integers(0, 3, 4)

    (theirs, ours), _ = runs_with_draws(
        DARTS_SOURCE,
        DARTS_STEPS,
        capsys,
        2531,
        fit_batch=batch(),
        val_batch=batch(),
        initialize=initializer(),
        params_of=params_of,
    )
    assert_records_agree(ours, theirs, rtol=5e-4, atol=5e-6)
    # the architecture weights moved from their 1e-3 draws
    assert np.abs(theirs[-3][1]).max() > 1e-2
