# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
adversarial training as TRADES writes it (yaodongyu/TRADES ``trades.py``'s ``trades_loss``
with its L-inf inner maximisation of the KL divergence, and ``pgd_attack_cifar10.py``'s
``_pgd_whitebox`` evaluation), trained a few steps on a small CNN, against torch's run of the
same code from the same weights and draws, in float64 (the first KL gradients are near 1e-7,
where float32 rounding flips their signs). The ``.cuda()`` calls are dropped (a CPU run).

What it exercises: ``nn.KLDivLoss(size_average=False)`` (the legacy reduction keyword);
``torch.autograd.grad(loss_kl, [x_adv])[0]`` on an input made a leaf by ``requires_grad_()``
under ``torch.enable_grad()`` in ``model.eval()``; ``torch.sign(grad.detach())`` steps;
``torch.min(torch.max(x_adv, x_natural - epsilon), x_natural + epsilon)`` and ``torch.clamp``;
``Variable(..., requires_grad=True)`` rebuilt each PGD step with an ``optim.SGD([X_pgd])``
used only to zero the input's gradient; ``out.data.max(1)[1] != y.data``.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
given to ``optimizer.step``; ``X_pgd.grad`` read from them).
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


TRADES_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
import torch.optim as optim


def squared_l2_norm(x):
    flattened = x.view(x.unsqueeze(0).shape[0], -1)
    return (flattened ** 2).sum(1)


def l2_norm(x):
    return squared_l2_norm(x).sqrt()


def trades_loss(model,
                x_natural,
                y,
                optimizer,
                step_size=0.003,
                epsilon=0.031,
                perturb_steps=10,
                beta=1.0,
                distance='l_inf'):
    # define KL-loss
    criterion_kl = nn.KLDivLoss(size_average=False)
    model.eval()
    batch_size = len(x_natural)
    # generate adversarial example
    x_adv = x_natural.detach() + 0.001 * torch.randn(x_natural.shape).detach()
    if distance == 'l_inf':
        for _ in range(perturb_steps):
            x_adv.requires_grad_()
            with torch.enable_grad():
                loss_kl = criterion_kl(F.log_softmax(model(x_adv), dim=1),
                                       F.softmax(model(x_natural), dim=1))
            grad = torch.autograd.grad(loss_kl, [x_adv])[0]
            x_adv = x_adv.detach() + step_size * torch.sign(grad.detach())
            x_adv = torch.min(torch.max(x_adv, x_natural - epsilon), x_natural + epsilon)
            x_adv = torch.clamp(x_adv, 0.0, 1.0)
    else:
        x_adv = torch.clamp(x_adv, 0.0, 1.0)
    model.train()

    x_adv = Variable(torch.clamp(x_adv, 0.0, 1.0), requires_grad=False)
    # zero gradient
    optimizer.zero_grad()
    # calculate robust loss
    logits = model(x_natural)
    loss_natural = F.cross_entropy(logits, y)
    loss_robust = (1.0 / batch_size) * criterion_kl(F.log_softmax(model(x_adv), dim=1),
                                                    F.softmax(model(x_natural), dim=1))
    loss = loss_natural + beta * loss_robust
    return loss


def _pgd_whitebox(model,
                  X,
                  y,
                  epsilon=0.031,
                  num_steps=4,
                  step_size=0.01):
    out = model(X)
    err = (out.data.max(1)[1] != y.data).float().sum()
    X_pgd = Variable(X.data, requires_grad=True)
    for _ in range(num_steps):
        opt = optim.SGD([X_pgd], lr=1e-3)
        opt.zero_grad()

        with torch.enable_grad():
            loss = nn.CrossEntropyLoss()(model(X_pgd), y)
        loss.backward()
        eta = step_size * X_pgd.grad.data.sign()
        X_pgd = Variable(X_pgd.data + eta, requires_grad=True)
        eta = torch.clamp(X_pgd.data - X.data, -epsilon, epsilon)
        X_pgd = Variable(X.data + eta, requires_grad=True)
        X_pgd = Variable(torch.clamp(X_pgd, 0, 1.0), requires_grad=True)
    err_pgd = (model(X_pgd).data.max(1)[1] != y.data).float().sum()
    return err, err_pgd, X_pgd


class SmallCNN(nn.Module):
    def __init__(self, num_classes=4):
        super(SmallCNN, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 6, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2, 2),
            nn.Conv2d(6, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
        )
        self.classifier = nn.Sequential(nn.Linear(8 * 2 * 2, 16), nn.ReLU(), nn.Linear(16, num_classes))

    def forward(self, input):
        features = self.features(input)
        logits = self.classifier(features.view(-1, 8 * 2 * 2))
        return logits


model = SmallCNN()
initialize(model)
model.double()  # the first KL gradients are ~1e-7: float32 rounding would flip their signs
optimizer = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=2e-4)

for batch_idx, (data, target) in enumerate(batches):
    data, target = torch.tensor(data), torch.tensor(target)
    optimizer.zero_grad()
    loss = trades_loss(model=model,
                       x_natural=data,
                       y=target,
                       optimizer=optimizer,
                       step_size=0.01,
                       epsilon=0.05,
                       perturb_steps=3,
                       beta=6.0)
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
    record.append(l2_norm(data).detach().numpy())

model.eval()
X, y = torch.tensor(batches[0][0]), torch.tensor(batches[0][1])
err, err_pgd, X_pgd = _pgd_whitebox(model, X, y)
record.append(err.item())
record.append(err_pgd.item())
record.append(X_pgd.detach().numpy())
"""

TRADES_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.autograd import Variable\nimport torch.optim as optim",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.autograd import Variable\nimport retrograd.optim as optim",
    ),
    (
        "    loss.backward()\n    optimizer.step()",
        "    grads = loss.backward()\n    optimizer.step(grads)",
    ),
    (
        "        loss.backward()\n        eta = step_size * X_pgd.grad.data.sign()",
        "        grads = loss.backward()\n        eta = step_size * X_pgd.grad(grads).data.sign()",
    ),
]


def test_trades_adversarial_training_and_pgd_whitebox_as_torch(capsys):
    rng = np.random.default_rng(25101)
    batches = [(rng.uniform(size=(6, 1, 8, 8)), rng.integers(0, 4, 6)) for _ in range(3)]
    (theirs, ours), _ = runs_with_draws(
        TRADES_SOURCE, TRADES_STEPS, capsys, 25101, batches=batches,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-9, atol=1e-11)
    # the attack moved the inputs to the edge of the epsilon ball somewhere
    assert np.abs(theirs[-1] - batches[0][0]).max() > 0.02


CO_TEACHING_SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import numpy as np


# Loss functions
def loss_coteaching(y_1, y_2, t, forget_rate, ind, noise_or_not):
    loss_1 = F.cross_entropy(y_1, t, reduce = False)
    ind_1_sorted = np.argsort(loss_1.data)
    loss_1_sorted = loss_1[ind_1_sorted]

    loss_2 = F.cross_entropy(y_2, t, reduce = False)
    ind_2_sorted = np.argsort(loss_2.data)
    loss_2_sorted = loss_2[ind_2_sorted]

    remember_rate = 1 - forget_rate
    num_remember = int(remember_rate * len(loss_1_sorted))

    pure_ratio_1 = np.sum(noise_or_not[ind[ind_1_sorted[:num_remember]]])/float(num_remember)
    pure_ratio_2 = np.sum(noise_or_not[ind[ind_2_sorted[:num_remember]]])/float(num_remember)

    ind_1_update=ind_1_sorted[:num_remember]
    ind_2_update=ind_2_sorted[:num_remember]
    # exchange
    loss_1_update = F.cross_entropy(y_1[ind_2_update], t[ind_2_update])
    loss_2_update = F.cross_entropy(y_2[ind_1_update], t[ind_1_update])

    return torch.sum(loss_1_update)/num_remember, torch.sum(loss_2_update)/num_remember, pure_ratio_1, pure_ratio_2


def accuracy(logit, target, topk=(1,)):
    """Computes the precision@k for the specified values of k"""
    output = F.softmax(logit, dim=1)
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


class MLPNet(nn.Module):
    def __init__(self):
        super(MLPNet, self).__init__()
        self.fc1 = nn.Linear(10, 32)
        self.fc2 = nn.Linear(32, 6)

    def forward(self, x):
        x = x.view(-1, 10)
        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return x


learning_rate = 0.01
forget_rate = 0.2
num_gradual = 2
exponent = 1
n_epoch = 3
epoch_decay_start = 1
mom1 = 0.9
mom2 = 0.1
alpha_plan = [learning_rate] * n_epoch
beta1_plan = [mom1] * n_epoch
for i in range(epoch_decay_start, n_epoch):
    alpha_plan[i] = float(n_epoch - i) / (n_epoch - epoch_decay_start) * learning_rate
    beta1_plan[i] = mom2


def adjust_learning_rate(optimizer, epoch):
    for param_group in optimizer.param_groups:
        param_group['lr']=alpha_plan[epoch]
        param_group['betas']=(beta1_plan[epoch], 0.999) # Only change beta1


rate_schedule = np.ones(n_epoch)*forget_rate
rate_schedule[:num_gradual] = np.linspace(0, forget_rate**exponent, num_gradual)


def train(train_loader, epoch, model1, optimizer1, model2, optimizer2):
    pure_ratio_1_list=[]
    pure_ratio_2_list=[]
    train_total=0
    train_correct=0
    train_total2=0
    train_correct2=0

    for i, (images, labels, indexes) in enumerate(train_loader):
        ind=indexes.cpu().numpy().transpose()
        images = torch.tensor(images)
        labels = torch.tensor(labels)

        # Forward + Backward + Optimize
        logits1=model1(images)
        prec1, _ = accuracy(logits1, labels, topk=(1, 5))
        train_total+=1
        train_correct+=prec1

        logits2 = model2(images)
        prec2, _ = accuracy(logits2, labels, topk=(1, 5))
        train_total2+=1
        train_correct2+=prec2
        loss_1, loss_2, pure_ratio_1, pure_ratio_2 = loss_coteaching(logits1, logits2, labels, rate_schedule[epoch], ind, noise_or_not)
        pure_ratio_1_list.append(100*pure_ratio_1)
        pure_ratio_2_list.append(100*pure_ratio_2)

        optimizer1.zero_grad()
        loss_1.backward()
        optimizer1.step()
        optimizer2.zero_grad()
        loss_2.backward()
        optimizer2.step()
        record.append([loss_1.item(), loss_2.item(), float(pure_ratio_1), float(pure_ratio_2)])

    train_acc1=float(train_correct)/float(train_total)
    train_acc2=float(train_correct2)/float(train_total2)
    return train_acc1, train_acc2, pure_ratio_1_list, pure_ratio_2_list


cnn1 = MLPNet()
initialize(cnn1)
optimizer1 = torch.optim.Adam(cnn1.parameters(), lr=learning_rate)
cnn2 = MLPNet()
initialize(cnn2)
optimizer2 = torch.optim.Adam(cnn2.parameters(), lr=learning_rate)

for epoch in range(n_epoch):
    cnn1.train()
    adjust_learning_rate(optimizer1, epoch)
    cnn2.train()
    adjust_learning_rate(optimizer2, epoch)
    loader = [(x, y, torch.tensor(ix)) for x, y, ix in batches]
    train_acc1, train_acc2, pure_ratio_1_list, pure_ratio_2_list=train(loader, epoch, cnn1, optimizer1, cnn2, optimizer2)
    record.append([train_acc1, train_acc2, float(np.mean(pure_ratio_1_list)), float(np.mean(pure_ratio_2_list))])
    record.append(params_of(cnn1, cnn2))
'''

CO_TEACHING_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F",
    ),
    (
        "        loss_1.backward()\n        optimizer1.step()",
        "        grads_1 = loss_1.backward()\n        optimizer1.step(grads_1)",
    ),
    (
        "        loss_2.backward()\n        optimizer2.step()",
        "        grads_2 = loss_2.backward()\n        optimizer2.step(grads_2)",
    ),
]


def test_co_teaching_trains_two_networks_on_each_others_small_loss_rows_as_torch(capsys):
    rng = np.random.default_rng(25102)
    n = 40
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
        noise_or_not=noisy == clean, initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
    # the later epochs forget rows: the remembered fraction is not the whole batch
    assert any(r[2] != 100 * np.mean(noisy == clean) for r in theirs if isinstance(r, list))
