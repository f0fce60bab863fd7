"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of TRADES (yaodongyu/TRADES: adversarial training by the KL divergence and a PGD
white-box evaluation) and of Co-teaching (two networks trained on each other's small-loss rows
under noisy labels).

- TRADES style, in float64 (the first KL gradients are near 1e-7, where float32 rounding
  flips their signs): ``nn.KLDivLoss(size_average=False)`` (the legacy reduction keyword);
  ``torch.autograd.grad(kl, [x_adv])[0]`` on an input made a leaf by ``requires_grad_()``
  under ``torch.enable_grad()`` in ``model.eval()``; ``torch.sign(grad.detach())`` steps
  projected by ``torch.min(torch.max(x, lo), hi)`` and ``torch.clamp``; ``Variable(...,
  requires_grad=False/True)``; a PGD loop rebuilding its input each step with an
  ``optim.SGD([x])`` used only to zero the input's gradient, ``x.grad.data.sign()`` and
  ``out.data.max(1)[1] != y.data``; ``super(Class, self).__init__()``, ``model.double()``,
  SGD with momentum and weight decay over a conv net with ``BatchNorm2d``.
- Co-teaching style: ``F.cross_entropy(..., reduce=False)`` (the legacy keyword);
  ``np.argsort`` of a tensor's ``.data`` and a tensor indexed by the NumPy index array it
  returns; a top-k precision by ``output.topk(k, 1, True, True)``, ``.t()``,
  ``eq(target.view(1, -1).expand_as(pred))``, ``reshape(-1).float().sum(0, keepdim=True)``
  and ``mul_``, accumulated into a Python number and read by ``float``; an epoch schedule
  writing ``param_group['lr']`` and ``param_group['betas']`` of two Adam optimisers;
  ``indexes.cpu().numpy().transpose()``.

Both runs start from torch's weights and the same draws. Only the imports and the gradient
lines differ (``grads = loss.backward()`` given to ``step``; the input's gradient read as
``x.grad(grads)``).
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

ADVERSARIAL_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
from torch import autograd
from torch.nn import functional as F


class TinyConvNet(nn.Module):
    def __init__(self, classes=4):
        super(TinyConvNet, self).__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(4, 6, 3), nn.BatchNorm2d(6), nn.ReLU(),
        )
        self.head = nn.Linear(6 * 2 * 2, classes)

    def forward(self, images):
        return self.head(self.body(images).view(-1, 6 * 2 * 2))


def image_norms(batch):
    return batch.view(len(batch), -1).pow(2).sum(1).sqrt()


def kl_adversary(net, clean, eps, alpha, steps):
    kl_sum = nn.KLDivLoss(size_average=False)
    net.eval()  # attack against the running batch-norm statistics
    adv = clean.detach() + 0.001 * torch.randn(clean.shape).detach()
    for _ in range(steps):
        adv.requires_grad_()
        with torch.enable_grad():
            div = kl_sum(F.log_softmax(net(adv), dim=1), F.softmax(net(clean), dim=1))
        g = autograd.grad(div, [adv])[0]
        adv = adv.detach() + alpha * torch.sign(g.detach())
        adv = torch.min(torch.max(adv, clean - eps), clean + eps)
        adv = torch.clamp(adv, 0.0, 1.0)
    net.train()
    return autograd.Variable(adv, requires_grad=False)


def robust_objective(net, clean, labels, eps, alpha, steps, beta):
    adv = kl_adversary(net, clean, eps, alpha, steps)
    kl_sum = nn.KLDivLoss(size_average=False)
    natural = F.cross_entropy(net(clean), labels)
    boundary = kl_sum(F.log_softmax(net(adv), dim=1), F.softmax(net(clean), dim=1))
    return natural + beta * boundary / len(clean)


def pgd_error_counts(net, images, labels, eps=0.03, alpha=0.01, steps=3):
    wrong = (net(images).data.max(1)[1] != labels.data).float().sum()
    x = autograd.Variable(images.data, requires_grad=True)
    for _ in range(steps):
        zeroer = optim.SGD([x], lr=1e-3)  # only here to clear x's gradient
        zeroer.zero_grad()
        with torch.enable_grad():
            loss = nn.CrossEntropyLoss()(net(x), labels)
        loss.backward()
        stepped = x.data + alpha * x.grad.data.sign()
        delta = torch.clamp(stepped - images.data, -eps, eps)
        x = autograd.Variable(torch.clamp(images.data + delta, 0, 1.0), requires_grad=True)
    wrong_adv = (net(x).data.max(1)[1] != labels.data).float().sum()
    return wrong, wrong_adv, x


net = TinyConvNet()
initialize(net)
net.double()
opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=2e-4)
for images, labels in batches:
    images, labels = torch.tensor(images), torch.tensor(labels)
    opt.zero_grad()
    loss = robust_objective(net, images, labels, eps=0.05, alpha=0.01, steps=2, beta=6.0)
    loss.backward()
    opt.step()
    record += [loss.item(), params_of(net), image_norms(images).detach().numpy()]

net.eval()
first_images, first_labels = map(torch.tensor, batches[0])
wrong, wrong_adv, x_adv = pgd_error_counts(net, first_images, first_labels)
record += [wrong.item(), wrong_adv.item(), x_adv.detach().numpy()]
"""

ADVERSARIAL_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("    loss.backward()\n    opt.step()", "    grads = loss.backward()\n    opt.step(grads)"),
    (
        "        loss.backward()\n        stepped = x.data + alpha * x.grad.data.sign()",
        "        grads = loss.backward()\n"
        "        stepped = x.data + alpha * x.grad(grads).data.sign()",
    ),
]


def test_kl_adversarial_training_and_pgd_evaluation_as_torch(capsys):
    rng = np.random.default_rng(25101)
    batches = [(rng.uniform(size=(6, 1, 8, 8)), rng.integers(0, 4, 6)) for _ in range(2)]
    (theirs, ours), _ = runs_with_draws(
        ADVERSARIAL_SOURCE, ADVERSARIAL_STEPS, capsys, 25101, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-11)
    # the attack moved the inputs to the edge of the epsilon ball somewhere
    assert np.abs(theirs[-1] - batches[0][0]).max() > 0.02


CO_TEACHING_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


class Classifier(nn.Module):
    def __init__(self):
        super(Classifier, self).__init__()
        self.hidden = nn.Linear(10, 24)
        self.out = nn.Linear(24, 6)

    def forward(self, x):
        return self.out(F.relu(self.hidden(x.view(-1, 10))))


def precision_at(logits, labels, ks=(1,)):
    probs = F.softmax(logits, dim=1)
    _, top = probs.topk(max(ks), 1, True, True)
    top = top.t()
    hits = top.eq(labels.view(1, -1).expand_as(top))
    scale = 100.0 / labels.size(0)
    return [hits[:k].reshape(-1).float().sum(0, keepdim=True).mul_(scale) for k in ks]


def swap_small_loss_rows(logits_a, logits_b, labels, drop, rows, clean_mask):
    # each network ranks the rows by its own loss; its peer learns from the easiest ones
    order_a = np.argsort(F.cross_entropy(logits_a, labels, reduce=False).data)
    order_b = np.argsort(F.cross_entropy(logits_b, labels, reduce=False).data)
    ranked = F.cross_entropy(logits_a, labels, reduce=False)[order_a]
    keep = int((1 - drop) * len(ranked))
    purity_a = np.sum(clean_mask[rows[order_a[:keep]]]) / float(keep)
    purity_b = np.sum(clean_mask[rows[order_b[:keep]]]) / float(keep)
    easy_a, easy_b = order_a[:keep], order_b[:keep]
    loss_a = F.cross_entropy(logits_a[easy_b], labels[easy_b])
    loss_b = F.cross_entropy(logits_b[easy_a], labels[easy_a])
    return torch.sum(loss_a) / keep, torch.sum(loss_b) / keep, purity_a, purity_b, keep


epochs, base_lr = 3, 0.01
lr_plan = [base_lr, base_lr / 2, base_lr / 4]
beta1_plan = [0.9, 0.5, 0.1]
drop_plan = np.full(epochs, 0.25)
drop_plan[:2] = np.linspace(0, 0.25, 2)


def set_epoch(optimizer, epoch):
    for group in optimizer.param_groups:
        group['lr'] = lr_plan[epoch]
        group['betas'] = (beta1_plan[epoch], 0.999)


def run_epoch(loader, epoch, nets, opts):
    correct_a = correct_b = 0
    steps, purities = 0, []
    for images, labels, indexes in loader:
        rows = indexes.cpu().numpy().transpose()
        images, labels = torch.tensor(images), torch.tensor(labels)
        logits_a, logits_b = nets[0](images), nets[1](images)
        correct_a += precision_at(logits_a, labels, ks=(1, 3))[0]
        correct_b += precision_at(logits_b, labels, ks=(1, 3))[0]
        steps += 1
        loss_a, loss_b, pa, pb, keep = swap_small_loss_rows(
            logits_a, logits_b, labels, drop_plan[epoch], rows, clean_mask)
        purities.append(100 * (pa + pb) / 2)
        opts[0].zero_grad()
        loss_a.backward()
        opts[0].step()
        opts[1].zero_grad()
        loss_b.backward()
        opts[1].step()
        record.append([loss_a.item(), loss_b.item(), float(pa), float(pb), keep])
    return float(correct_a) / steps, float(correct_b) / steps, purities


nets = [Classifier(), Classifier()]
opts = []
for net in nets:
    initialize(net)
    opts.append(torch.optim.Adam(net.parameters(), lr=base_lr))
for epoch in range(epochs):
    for net, opt in zip(nets, opts):
        net.train()
        set_epoch(opt, epoch)
    acc_a, acc_b, purities = run_epoch(
        [(x, y, torch.tensor(rows)) for x, y, rows in batches], epoch, nets, opts)
    record.append((acc_a, acc_b, float(np.mean(purities))))
    record.append(params_of(*nets))
"""

CO_TEACHING_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss_a.backward()\n        opts[0].step()",
        "        grads_a = loss_a.backward()\n        opts[0].step(grads_a)",
    ),
    (
        "        loss_b.backward()\n        opts[1].step()",
        "        grads_b = loss_b.backward()\n        opts[1].step(grads_b)",
    ),
]


def test_co_teaching_trains_two_networks_on_each_others_small_loss_rows_as_torch(capsys):
    rng = np.random.default_rng(25102)
    n = 30
    clean = rng.integers(0, 6, n)
    noisy = np.where(rng.uniform(size=n) < 0.3, rng.integers(0, 6, n), clean)
    features = (rng.standard_normal((n, 10)) + clean[:, None] * 0.5).astype(np.float32)
    order = rng.permutation(n)
    batches = [
        (features[order[k : k + 10]], noisy[order[k : k + 10]], order[k : k + 10])
        for k in range(0, n, 10)
    ]
    (theirs, ours), _ = runs_with_draws(
        CO_TEACHING_SOURCE, CO_TEACHING_STEPS, capsys, 25102, batches=batches,
        clean_mask=noisy == clean, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    # the later epochs forget rows: fewer than a whole batch is kept
    assert min(r[4] for r in theirs if isinstance(r, list)) < 10
