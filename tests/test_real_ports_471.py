# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
"fast is better than free" adversarial training as locuslab/fast_adversarial writes it for
CIFAR-10 (``CIFAR10/utils.py``, ``train_fgsm.py`` and ``train_free.py``, the pre-activation ResNet
of ``preact_resnet.py``), trained a few steps on small random images, against torch's run of
the same code from the same weights and draws, in float64 (the steps are ``torch.sign`` of input
gradients, which float32 rounding flips where a gradient is near zero).

What it exercises: the per-channel bounds ``mu``/``std`` as ``torch.tensor(cifar10_mean).view(3,
1, 1)`` and ``clamp(X, lower, upper)`` written as ``torch.max(torch.min(X, upper_limit),
lower_limit)`` with tensor bounds that broadcast (``lower_limit - X``, ``-epsilon``); the random
start ``delta[:, i, :, :].uniform_(-epsilon[i][0][0].item(), epsilon[0][0][0].item())`` (in place
through a view); ``delta.data = ...`` and ``delta.requires_grad = True`` on a plain tensor;
``delta.grad.detach()`` and ``delta.grad.zero_()``; ``delta.data[:X.size(0)] = ...`` and
``delta.data[index[0], :, :, :] = d`` with ``index = torch.where(output.max(1)[1] == y)``;
``max_delta[all_loss >= max_loss] = delta.detach()[all_loss >= max_loss]`` and
``torch.max(max_loss, all_loss)``; ``F.cross_entropy(..., reduction='none')``; SGD with momentum
and weight decay under ``lr_scheduler.CyclicLR(step_size_up=lr_steps / 2, ...)`` stepped every
batch and read by ``scheduler.get_lr()[0]``; free training's ``delta`` kept across replays with
its gradient zeroed in place; ``evaluate_pgd``/``evaluate_standard`` under ``torch.no_grad()``.

The data is a stand-in for CIFAR-10 (random 32x32 images and labels, normalised as
``get_loaders`` normalises them: one batch of two for FGSM training, two for free training;
``uniform_`` draws from the harness's ``SharedFills``); the ResNet is narrower (widths 4 to 32, one block a
stage); the stand-in for apex's ``amp`` is ``O0`` with ``loss_scale='1.0'`` (``scale_loss``
yields the loss itself); the log lines go to ``print`` (``logger.info`` of the same arguments).
Dropped: ``.cuda()``, the output directory and ``torch.save``. The lines changed for the port: the
``import`` lines and the gradient lines (``grads = scaled_loss.backward()``, ``delta.grad(grads)``,
``opt.step(grads)``; ``delta.grad.zero_()`` goes: the gradients are a value).
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedFills, assert_records_agree, initializer, port, run_source

FAST_ADVERSARIAL_SOURCE = """
# -- preact_resnet.py --------------------------------------------------------------------------
import torch
import torch.nn as nn
import torch.nn.functional as F


class PreActBlock(nn.Module):
    '''Pre-activation version of the BasicBlock.'''
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super(PreActBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)

        if stride != 1 or in_planes != self.expansion*planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion*planes, kernel_size=1, stride=stride, bias=False)
            )

    def forward(self, x):
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if hasattr(self, 'shortcut') else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        out += shortcut
        return out


class PreActResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10):
        super(PreActResNet, self).__init__()
        self.in_planes = 4

        self.conv1 = nn.Conv2d(3, 4, kernel_size=3, stride=1, padding=1, bias=False)
        self.layer1 = self._make_layer(block, 4, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 8, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 16, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 32, num_blocks[3], stride=2)
        self.bn = nn.BatchNorm2d(32 * block.expansion)
        self.linear = nn.Linear(32*block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1]*(num_blocks-1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.conv1(x)
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.relu(self.bn(out))
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        out = self.linear(out)
        return out


def PreActResNet18():
    model = PreActResNet(PreActBlock, [1,1,1,1])
    initialize(model)
    return model


# -- utils.py ----------------------------------------------------------------------------------
cifar10_mean = (0.4914, 0.4822, 0.4465)
cifar10_std = (0.2471, 0.2435, 0.2616)

mu = torch.tensor(cifar10_mean).view(3,1,1)
std = torch.tensor(cifar10_std).view(3,1,1)

upper_limit = ((1 - mu)/ std)
lower_limit = ((0 - mu)/ std)


def clamp(X, lower_limit, upper_limit):
    return torch.max(torch.min(X, upper_limit), lower_limit)


def attack_pgd(model, X, y, epsilon, alpha, attack_iters, restarts, opt=None):
    max_loss = torch.zeros(y.shape[0])
    max_delta = torch.zeros_like(X)
    for zz in range(restarts):
        delta = torch.zeros_like(X)
        for i in range(len(epsilon)):
            delta[:, i, :, :].uniform_(-epsilon[i][0][0].item(), epsilon[0][0][0].item())
        delta.data = clamp(delta, lower_limit - X, upper_limit - X)
        delta.requires_grad = True
        for _ in range(attack_iters):
            output = model(X + delta)
            index = torch.where(output.max(1)[1] == y)
            if len(index[0]) == 0:
                break
            loss = F.cross_entropy(output, y)
            if opt is not None:
                with amp.scale_loss(loss, opt) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            grad = delta.grad.detach()
            d = delta[index[0], :, :, :]
            g = grad[index[0], :, :, :]
            d = clamp(d + alpha * torch.sign(g), -epsilon, epsilon)
            d = clamp(d, lower_limit - X[index[0], :, :, :], upper_limit - X[index[0], :, :, :])
            delta.data[index[0], :, :, :] = d
            delta.grad.zero_()
        all_loss = F.cross_entropy(model(X+delta), y, reduction='none').detach()
        max_delta[all_loss >= max_loss] = delta.detach()[all_loss >= max_loss]
        max_loss = torch.max(max_loss, all_loss)
    return max_delta


def evaluate_pgd(test_loader, model, attack_iters, restarts):
    epsilon = (8 / 255.) / std
    alpha = (2 / 255.) / std
    pgd_loss = 0
    pgd_acc = 0
    n = 0
    model.eval()
    for i, (X, y) in enumerate(test_loader):
        pgd_delta = attack_pgd(model, X, y, epsilon, alpha, attack_iters, restarts)
        with torch.no_grad():
            output = model(X + pgd_delta)
            loss = F.cross_entropy(output, y)
            pgd_loss += loss.item() * y.size(0)
            pgd_acc += (output.max(1)[1] == y).sum().item()
            n += y.size(0)
    return pgd_loss/n, pgd_acc/n


def evaluate_standard(test_loader, model):
    test_loss = 0
    test_acc = 0
    n = 0
    model.eval()
    with torch.no_grad():
        for i, (X, y) in enumerate(test_loader):
            output = model(X)
            loss = F.cross_entropy(output, y)
            test_loss += loss.item() * y.size(0)
            test_acc += (output.max(1)[1] == y).sum().item()
            n += y.size(0)
    return test_loss/n, test_acc/n


# -- train_fgsm.py's main ----------------------------------------------------------------------
def main_fgsm(args):
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed(args.seed)

    train_loader, test_loader = get_loaders(args.data_dir, args.batch_size)

    epsilon = (args.epsilon / 255.) / std
    alpha = (args.alpha / 255.) / std
    pgd_alpha = (2 / 255.) / std

    model = PreActResNet18()
    model.train()

    opt = torch.optim.SGD(model.parameters(), lr=args.lr_max, momentum=args.momentum, weight_decay=args.weight_decay)
    amp_args = dict(opt_level=args.opt_level, loss_scale=args.loss_scale, verbosity=False)
    if args.opt_level == 'O2':
        amp_args['master_weights'] = args.master_weights
    model, opt = amp.initialize(model, opt, **amp_args)
    criterion = nn.CrossEntropyLoss()

    if args.delta_init == 'previous':
        delta = torch.zeros(args.batch_size, 3, 32, 32)

    lr_steps = args.epochs * len(train_loader)
    if args.lr_schedule == 'cyclic':
        scheduler = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=args.lr_min, max_lr=args.lr_max,
            step_size_up=lr_steps / 2, step_size_down=lr_steps / 2)
    elif args.lr_schedule == 'multistep':
        scheduler = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[lr_steps / 2, lr_steps * 3 / 4], gamma=0.1)

    # Training
    prev_robust_acc = 0.
    logger.info('Epoch \\t Seconds \\t LR \\t \\t Train Loss \\t Train Acc')
    for epoch in range(args.epochs):
        train_loss = 0
        train_acc = 0
        train_n = 0
        for i, (X, y) in enumerate(train_loader):
            if i == 0:
                first_batch = (X, y)
            if args.delta_init != 'previous':
                delta = torch.zeros_like(X)
            if args.delta_init == 'random':
                for i in range(len(epsilon)):
                    delta[:, i, :, :].uniform_(-epsilon[i][0][0].item(), epsilon[0][0][0].item())
                delta.data = clamp(delta, lower_limit - X, upper_limit - X)
            delta.requires_grad = True
            output = model(X + delta[:X.size(0)])
            loss = F.cross_entropy(output, y)
            with amp.scale_loss(loss, opt) as scaled_loss:
                scaled_loss.backward()
            grad = delta.grad.detach()
            delta.data = clamp(delta + alpha * torch.sign(grad), -epsilon, epsilon)
            delta.data[:X.size(0)] = clamp(delta[:X.size(0)], lower_limit - X, upper_limit - X)
            delta = delta.detach()
            output = model(X + delta[:X.size(0)])
            loss = criterion(output, y)
            opt.zero_grad()
            with amp.scale_loss(loss, opt) as scaled_loss:
                scaled_loss.backward()
            opt.step()
            train_loss += loss.item() * y.size(0)
            train_acc += (output.max(1)[1] == y).sum().item()
            train_n += y.size(0)
            scheduler.step()
            record.append(state_of(model))
        if args.early_stop:
            # Check current PGD robustness of model using random minibatch
            X, y = first_batch
            pgd_delta = attack_pgd(model, X, y, epsilon, pgd_alpha, 5, 1, opt)
            with torch.no_grad():
                output = model(clamp(X + pgd_delta[:X.size(0)], lower_limit, upper_limit))
            robust_acc = (output.max(1)[1] == y).sum().item() / y.size(0)
            record.append(pgd_delta.numpy())
            if robust_acc - prev_robust_acc < -0.2:
                break
            prev_robust_acc = robust_acc
            best_state_dict = copy.deepcopy(model.state_dict())
        lr = scheduler.get_lr()[0]
        logger.info('%d \\t %.1f \\t \\t %.4f \\t %.4f \\t %.4f',
            epoch, 0.0, lr, train_loss/train_n, train_acc/train_n)
    if not args.early_stop:
        best_state_dict = model.state_dict()

    # Evaluation
    model_test = PreActResNet18()
    model_test.load_state_dict(best_state_dict)
    model_test.float()
    model_test.double()  # (the test runs in float64: see the docstring)
    model_test.eval()

    pgd_loss, pgd_acc = evaluate_pgd(test_loader, model_test, 3, 2)
    test_loss, test_acc = evaluate_standard(test_loader, model_test)

    logger.info('Test Loss \\t Test Acc \\t PGD Loss \\t PGD Acc')
    logger.info('%.4f \\t \\t %.4f \\t %.4f \\t %.4f', test_loss, test_acc, pgd_loss, pgd_acc)
    record.append([pgd_loss, pgd_acc, test_loss, test_acc])


# -- train_free.py's main ----------------------------------------------------------------------
def main_free(args):
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed(args.seed)

    train_loader, test_loader = get_loaders(args.data_dir, args.batch_size)

    epsilon = (args.epsilon / 255.) / std

    model = PreActResNet18()
    model.train()

    opt = torch.optim.SGD(model.parameters(), lr=args.lr_max, momentum=args.momentum, weight_decay=args.weight_decay)
    amp_args = dict(opt_level=args.opt_level, loss_scale=args.loss_scale, verbosity=False)
    if args.opt_level == 'O2':
        amp_args['master_weights'] = args.master_weights
    model, opt = amp.initialize(model, opt, **amp_args)
    criterion = nn.CrossEntropyLoss()

    delta = torch.zeros(args.batch_size, 3, 32, 32)
    delta.requires_grad = True

    lr_steps = args.epochs * len(train_loader) * args.minibatch_replays
    if args.lr_schedule == 'cyclic':
        scheduler = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=args.lr_min, max_lr=args.lr_max,
            step_size_up=lr_steps / 2, step_size_down=lr_steps / 2)
    elif args.lr_schedule == 'multistep':
        scheduler = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[lr_steps / 2, lr_steps * 3 / 4], gamma=0.1)

    # Training
    logger.info('Epoch \\t Seconds \\t LR \\t \\t Train Loss \\t Train Acc')
    for epoch in range(args.epochs):
        train_loss = 0
        train_acc = 0
        train_n = 0
        for i, (X, y) in enumerate(train_loader):
            for _ in range(args.minibatch_replays):
                output = model(X + delta[:X.size(0)])
                loss = criterion(output, y)
                opt.zero_grad()
                with amp.scale_loss(loss, opt) as scaled_loss:
                    scaled_loss.backward()
                grad = delta.grad.detach()
                delta.data = clamp(delta + epsilon * torch.sign(grad), -epsilon, epsilon)
                delta.data[:X.size(0)] = clamp(delta[:X.size(0)], lower_limit - X, upper_limit - X)
                opt.step()
                delta.grad.zero_()
                scheduler.step()
            train_loss += loss.item() * y.size(0)
            train_acc += (output.max(1)[1] == y).sum().item()
            train_n += y.size(0)
            record.append(state_of(model))
            record.append(delta.detach().numpy().copy())
        lr = scheduler.get_lr()[0]
        logger.info('%d \\t %.1f \\t \\t %.4f \\t %.4f \\t %.4f',
            epoch, 0.0, lr, train_loss/train_n, train_acc/train_n)
"""

FAST_ADVERSARIAL_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    (
        "                    scaled_loss.backward()\n            else:\n                loss.backward()\n            grad = delta.grad.detach()",
        "                    grads = scaled_loss.backward()\n            else:\n                grads = loss.backward()\n            grad = delta.grad(grads).detach()",
    ),
    (
        "            delta.data[index[0], :, :, :] = d\n            delta.grad.zero_()\n",
        "            delta.data[index[0], :, :, :] = d\n",
    ),
    (
        "                scaled_loss.backward()\n            grad = delta.grad.detach()",
        "                grads = scaled_loss.backward()\n            grad = delta.grad(grads).detach()",
    ),
    (
        "                scaled_loss.backward()\n            opt.step()",
        "                grads = scaled_loss.backward()\n            opt.step(grads)",
    ),
    (
        "                    scaled_loss.backward()\n                grad = delta.grad.detach()",
        "                    grads = scaled_loss.backward()\n                grad = delta.grad(grads).detach()",
    ),
    (
        "                opt.step()\n                delta.grad.zero_()\n",
        "                opt.step(grads)\n",
    ),
]


class Amp:
    """apex's ``amp`` at ``opt_level='O0'`` and ``loss_scale='1.0'``: FP32 (here the default
    dtype) and an unscaled loss."""

    def initialize(self, model, opt, **_):
        return model, opt

    @contextlib.contextmanager
    def scale_loss(self, loss, opt):
        yield loss


class Logger:
    """``logger.info`` printed (the script's log file, kept for comparison)."""

    def info(self, message, *args):
        print(message % args if args else message)


def _loaders(lib, seed, batches):
    """``get_loaders``' stand-in: ``batches`` batches of random 32x32 images (and labels)
    normalised by CIFAR-10's statistics, for training and for testing."""
    rng = np.random.default_rng(seed)
    mean = np.array([0.4914, 0.4822, 0.4465])[:, None, None]
    std = np.array([0.2471, 0.2435, 0.2616])[:, None, None]

    def loader(batch_size):
        return [
            (
                lib.tensor((rng.uniform(size=(batch_size, 3, 32, 32)) - mean) / std),
                lib.tensor(rng.integers(0, 10, batch_size)),
            )
            for _ in range(batches)
        ]

    return lambda data_dir, batch_size: (loader(batch_size), loader(batch_size))


def _run(main, args, capsys, batches):
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            FAST_ADVERSARIAL_SOURCE
            if lib is torch
            else port(FAST_ADVERSARIAL_SOURCE, FAST_ADVERSARIAL_STEPS)
        )
        previous = lib.get_default_dtype()
        lib.set_default_dtype(lib.float64)
        try:
            with SharedFills(lib, 4711):
                names = run_source(
                    text,
                    lib,
                    record=record,
                    initialize=initialize,
                    amp=Amp(),
                    logger=Logger(),
                    copy=__import__("copy"),
                    get_loaders=_loaders(lib, 4712, batches),
                    state_of=lambda m: {
                        k: v.detach().numpy().copy() for k, v in m.state_dict().items()
                    },
                )
                names[main](args)
        finally:
            lib.set_default_dtype(previous)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


def _args(**changes):
    args = argparse.Namespace(
        batch_size=2,
        data_dir="../../cifar-data",
        epochs=2,
        lr_schedule="cyclic",
        lr_min=0.0,
        lr_max=0.2,
        weight_decay=5e-4,
        momentum=0.9,
        epsilon=8,
        alpha=10,
        delta_init="random",
        seed=0,
        early_stop=True,
        opt_level="O0",
        loss_scale="1.0",
        master_weights=False,
        minibatch_replays=2,
    )
    vars(args).update(changes)
    return args


def test_fast_fgsm_training_with_early_stop_pgd_as_torch(capsys):
    records, logs = _run("main_fgsm", _args(), capsys, batches=1)
    assert logs[1] == logs[0] and len(logs[0].splitlines()) == 5
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)


def test_free_adversarial_training_as_torch(capsys):
    records, logs = _run("main_free", _args(lr_max=0.04, epochs=1), capsys, batches=2)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
