# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
the original Stochastic Weight Averaging code (timgaripov/swa), trained against torch's run of
the same code from the same weights and images.

- ``utils.py`` whole: ``adjust_learning_rate``; ``save_checkpoint`` (``torch.save`` of a dict of
  the epoch, both state dicts, ``swa_n`` and the optimizer's state into ``checkpoint-%d.pt``);
  ``train_epoch``/``eval`` over ``torch.autograd.Variable`` inputs with
  ``output.data.max(1, keepdim=True)[1]`` and ``pred.eq(target_var.data.view_as(pred))``;
  ``moving_average`` by ``param1.data *= (1.0 - alpha)`` then ``param1.data += param2.data *
  alpha``; ``bn_update``: ``model.apply`` of lambdas testing ``issubclass(module.__class__,
  torch.nn.modules.batchnorm._BatchNorm)``, the running statistics replaced by
  ``torch.zeros_like``/``torch.ones_like`` assignments, every BatchNorm's ``momentum`` set to
  ``b / (n + b)`` for a cumulative average over one pass, and restored from a dict keyed by
  module;
- ``models/preresnet.py``'s ``PreResNet`` (depth 8: one pre-activation ``BasicBlock`` per
  stage, ``out += residual``, a 1x1 ``downsample``, ``AvgPool2d(8)``; its ``Bottleneck``,
  for depths of 44 and more, left out) with its
  ``m.weight.data.normal_(0, math.sqrt(2. / n))`` initialization (then torch's weights given to
  both runs);
- ``train.py``'s loop: the piecewise-linear ``schedule(epoch)`` toward ``swa_lr``, SGD with
  momentum and weight decay, the SWA collection every ``swa_c_epochs`` from ``swa_start``,
  ``bn_update`` then ``eval`` of the averaged model, checkpoints every ``save_freq`` epochs, and
  a second run resuming from one (``torch.load``, ``load_state_dict`` of the model, the SWA
  model and the optimizer, ``swa_n``).

What stands in: CIFAR-10 by 32x32 random images with random labels (no shuffling: each
library's sampler would draw its own order), argparse by a namespace, tabulate by a small
formatter. The ``.cuda()`` lines are dropped (a CPU run). The port changes the import lines and
the gradient lines; ``initialize`` gives it torch's initial weights.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

SWA_SOURCE = '''
import os
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F
import math
import tqdm


# -- utils.py ---------------------------------------------------------------------------------
def adjust_learning_rate(optimizer, lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    return lr


def save_checkpoint(dir, epoch, **kwargs):
    state = {
        'epoch': epoch,
    }
    state.update(kwargs)
    filepath = os.path.join(dir, 'checkpoint-%d.pt' % epoch)
    torch.save(state, filepath)


def train_epoch(loader, model, criterion, optimizer):
    loss_sum = 0.0
    correct = 0.0

    model.train()

    for i, (input, target) in enumerate(tqdm.tqdm(loader)):
        input_var = torch.autograd.Variable(input)
        target_var = torch.autograd.Variable(target)

        output = model(input_var)
        loss = criterion(output, target_var)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        loss_sum += loss.item() * input.size(0)
        pred = output.data.max(1, keepdim=True)[1]
        correct += pred.eq(target_var.data.view_as(pred)).sum().item()

    return {
        'loss': loss_sum / len(loader.dataset),
        'accuracy': correct / len(loader.dataset) * 100.0,
    }


def eval(loader, model, criterion):
    loss_sum = 0.0
    correct = 0.0

    model.eval()

    for i, (input, target) in enumerate(loader):
        input_var = torch.autograd.Variable(input)
        target_var = torch.autograd.Variable(target)

        output = model(input_var)
        loss = criterion(output, target_var)

        loss_sum += loss.item() * input.size(0)
        pred = output.data.max(1, keepdim=True)[1]
        correct += pred.eq(target_var.data.view_as(pred)).sum().item()

    return {
        'loss': loss_sum / len(loader.dataset),
        'accuracy': correct / len(loader.dataset) * 100.0,
    }


def moving_average(net1, net2, alpha=1):
    for param1, param2 in zip(net1.parameters(), net2.parameters()):
        param1.data *= (1.0 - alpha)
        param1.data += param2.data * alpha


def _check_bn(module, flag):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        flag[0] = True


def check_bn(model):
    flag = [False]
    model.apply(lambda module: _check_bn(module, flag))
    return flag[0]


def reset_bn(module):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        module.running_mean = torch.zeros_like(module.running_mean)
        module.running_var = torch.ones_like(module.running_var)


def _get_momenta(module, momenta):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        momenta[module] = module.momentum


def _set_momenta(module, momenta):
    if issubclass(module.__class__, torch.nn.modules.batchnorm._BatchNorm):
        module.momentum = momenta[module]


def bn_update(loader, model):
    """
        BatchNorm buffers update (if any).
        Performs 1 epochs to estimate buffers average using train dataset.

        :param loader: train dataset loader for buffers average estimation.
        :param model: model being update
        :return: None
    """
    if not check_bn(model):
        return
    model.train()
    momenta = {}
    model.apply(reset_bn)
    model.apply(lambda module: _get_momenta(module, momenta))
    n = 0
    for input, _ in loader:
        input_var = torch.autograd.Variable(input)
        b = input_var.data.size(0)

        momentum = b / (n + b)
        for module in momenta.keys():
            module.momentum = momentum

        model(input_var)
        n += b

    model.apply(lambda module: _set_momenta(module, momenta))


# -- models/preresnet.py ----------------------------------------------------------------------
def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.bn1(x)
        out = self.relu(out)
        out = self.conv1(out)

        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual

        return out


class PreResNet(nn.Module):

    def __init__(self, num_classes=10, depth=110):
        super(PreResNet, self).__init__()
        if depth >= 44:
            assert (depth - 2) % 9 == 0, 'depth should be 9n+2'
            n = (depth - 2) // 9
            block = Bottleneck
        else:
            assert (depth - 2) % 6 == 0, 'depth should be 6n+2'
            n = (depth - 2) // 6
            block = BasicBlock


        self.inplanes = 16
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1,
                               bias=False)
        self.layer1 = self._make_layer(block, 16, n)
        self.layer2 = self._make_layer(block, 32, n, stride=2)
        self.layer3 = self._make_layer(block, 64, n, stride=2)
        self.bn = nn.BatchNorm2d(64 * block.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.BatchNorm2d):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
            )

        layers = list()
        layers.append(block(self.inplanes, planes, stride, downsample))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes))

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)

        x = self.layer1(x)  # 32x32
        x = self.layer2(x)  # 16x16
        x = self.layer3(x)  # 8x8
        x = self.bn(x)
        x = self.relu(x)

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        x = self.fc(x)

        return x


class PreResNet8:  # (the repository's PreResNet110, shallower)
    base = PreResNet
    args = list()
    kwargs = {'depth': 8}


# -- train.py ---------------------------------------------------------------------------------
utils = types.SimpleNamespace(**globals())  # (import utils: the functions above)
torch.manual_seed(args.seed)

print('Using model %s' % args.model)
model_cfg = PreResNet8

train_set = torch.utils.data.TensorDataset(torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,)))
train_set.targets = [int(t) for t in train_set.tensors[1]]
test_set = torch.utils.data.TensorDataset(torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,)))
loaders = {
    'train': torch.utils.data.DataLoader(
        train_set,
        batch_size=args.batch_size,
        shuffle=False,
        num_workers=args.num_workers,
        pin_memory=True
    ),
    'test': torch.utils.data.DataLoader(
        test_set,
        batch_size=args.batch_size,
        shuffle=False,
        num_workers=args.num_workers,
        pin_memory=True
    )
}
num_classes = max(train_set.targets) + 1

print('Preparing model')
model = model_cfg.base(*model_cfg.args, num_classes=num_classes, **model_cfg.kwargs)
initialize(model)

if args.swa:
    print('SWA training')
    swa_model = model_cfg.base(*model_cfg.args, num_classes=num_classes, **model_cfg.kwargs)
    initialize(swa_model)
    swa_n = 0
else:
    print('SGD training')


def schedule(epoch):
    t = (epoch) / (args.swa_start if args.swa else args.epochs)
    lr_ratio = args.swa_lr / args.lr_init if args.swa else 0.01
    if t <= 0.5:
        factor = 1.0
    elif t <= 0.9:
        factor = 1.0 - (1.0 - lr_ratio) * (t - 0.5) / 0.4
    else:
        factor = lr_ratio
    return args.lr_init * factor


criterion = F.cross_entropy
optimizer = torch.optim.SGD(
    model.parameters(),
    lr=args.lr_init,
    momentum=args.momentum,
    weight_decay=args.wd
)

start_epoch = 0
if args.resume is not None:
    print('Resume training from %s' % args.resume)
    checkpoint = torch.load(args.resume)
    start_epoch = checkpoint['epoch']
    model.load_state_dict(checkpoint['state_dict'])
    optimizer.load_state_dict(checkpoint['optimizer'])
    if args.swa:
        swa_state_dict = checkpoint['swa_state_dict']
        if swa_state_dict is not None:
            swa_model.load_state_dict(swa_state_dict)
        swa_n_ckpt = checkpoint['swa_n']
        if swa_n_ckpt is not None:
            swa_n = swa_n_ckpt

columns = ['ep', 'lr', 'tr_loss', 'tr_acc', 'te_loss', 'te_acc', 'time']
if args.swa:
    columns = columns[:-1] + ['swa_te_loss', 'swa_te_acc'] + columns[-1:]
    swa_res = {'loss': None, 'accuracy': None}

utils.save_checkpoint(
    args.dir,
    start_epoch,
    state_dict=model.state_dict(),
    swa_state_dict=swa_model.state_dict() if args.swa else None,
    swa_n=swa_n if args.swa else None,
    optimizer=optimizer.state_dict()
)

for epoch in range(start_epoch, args.epochs):
    time_ep = time.time()

    lr = schedule(epoch)
    utils.adjust_learning_rate(optimizer, lr)
    train_res = utils.train_epoch(loaders['train'], model, criterion, optimizer)
    if epoch == 0 or epoch % args.eval_freq == args.eval_freq - 1 or epoch == args.epochs - 1:
        test_res = utils.eval(loaders['test'], model, criterion)
    else:
        test_res = {'loss': None, 'accuracy': None}

    if args.swa and (epoch + 1) >= args.swa_start and (epoch + 1 - args.swa_start) % args.swa_c_epochs == 0:
        utils.moving_average(swa_model, model, 1.0 / (swa_n + 1))
        swa_n += 1
        if epoch == 0 or epoch % args.eval_freq == args.eval_freq - 1 or epoch == args.epochs - 1:
            utils.bn_update(loaders['train'], swa_model)
            swa_res = utils.eval(loaders['test'], swa_model, criterion)
        else:
            swa_res = {'loss': None, 'accuracy': None}

    if (epoch + 1) % args.save_freq == 0:
        utils.save_checkpoint(
            args.dir,
            epoch + 1,
            state_dict=model.state_dict(),
            swa_state_dict=swa_model.state_dict() if args.swa else None,
            swa_n=swa_n if args.swa else None,
            optimizer=optimizer.state_dict()
        )

    time_ep = time.time() - time_ep
    values = [epoch + 1, lr, train_res['loss'], train_res['accuracy'], test_res['loss'], test_res['accuracy'], time_ep]
    if args.swa:
        values = values[:-1] + [swa_res['loss'], swa_res['accuracy']] + values[-1:]
    record.append([v for v in values[:-1] if v is not None])
    record.append({k: v.detach().numpy().copy() for k, v in swa_model.state_dict().items()})
    table = tabulate.tabulate([values], columns, tablefmt='simple', floatfmt='8.4f')
    if epoch % 40 == 0:
        table = table.split('\\n')
        table = '\\n'.join([table[1]] + table)
    else:
        table = table.split('\\n')[2]
    print(table)

if args.epochs % args.save_freq != 0:
    utils.save_checkpoint(
        args.dir,
        args.epochs,
        state_dict=model.state_dict(),
        swa_state_dict=swa_model.state_dict() if args.swa else None,
        swa_n=swa_n if args.swa else None,
        optimizer=optimizer.state_dict()
    )
'''

SWA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class _Tabulate:
    """tabulate's ``tabulate(rows, headers, tablefmt='simple', floatfmt=...)``: a header line, a
    rule and one line per row (``None`` printed empty)."""

    @staticmethod
    def tabulate(rows, headers, tablefmt="simple", floatfmt="g"):
        def cell(v):
            return "" if v is None else format(v, floatfmt) if isinstance(v, float) else str(v)

        lines = [" ".join(f"{h:>10}" for h in headers), " ".join("-" * 10 for _ in headers)]
        lines += [" ".join(f"{cell(v):>10}" for v in row) for row in rows]
        return "\n".join(lines)


def test_swa_original_training_with_bn_update_and_resume_matches_torch(capsys, tmp_path):
    """Three epochs with checkpoints every two, then a run resumed from ``checkpoint-2.pt`` that
    trains to epoch four: the records (the table rows, the SWA model's state after every epoch)
    agree with torch's."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        text = SWA_SOURCE if lib is torch else port(SWA_SOURCE, SWA_STEPS)
        record = []
        folder = tmp_path / lib.__name__
        folder.mkdir()
        runs = [
            dict(epochs=3, resume=None),
            dict(epochs=3, resume=str(folder / "checkpoint-2.pt")),
        ]
        for run in runs:
            with SharedDraws(lib, 43001):  # (the same images in both runs of a library)
                args = argparse.Namespace(
                    dir=str(folder), model="PreResNet8", batch_size=2, num_workers=0,
                    save_freq=2, eval_freq=2, lr_init=0.1, momentum=0.9, wd=1e-4, swa=True,
                    swa_start=2, swa_lr=0.05, swa_c_epochs=1, seed=1, **run,
                )  # fmt: skip
                run_source(
                    text, lib, args=args, record=record, initialize=initialize,
                    tabulate=_Tabulate,
                )  # fmt: skip
        records.append(record)
        logs.append(capsys.readouterr().out)  # (tqdm's bars go to stderr)
    theirs, ours = records
    assert sorted(p.name for p in (tmp_path / "torch").iterdir()) == [
        "checkpoint-0.pt", "checkpoint-2.pt", "checkpoint-3.pt",
    ]  # fmt: skip
    assert sorted(p.name for p in (tmp_path / "retrograd").iterdir()) == sorted(
        p.name for p in (tmp_path / "torch").iterdir()
    )
    assert "Resume training from" in logs[0] and "Resume training from" in logs[1]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=1e-5)
