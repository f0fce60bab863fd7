# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
knowledge distillation as HobbitLong/RepDistiller writes it, a CIFAR ResNet student taught by a
saved teacher, against torch's run of the same code from the same weights and images.

- ``distiller_zoo/KD.py``'s ``DistillKL``: ``F.kl_div(p_s, p_t, size_average=False) *
  (self.T**2) / y_s.shape[0]`` of ``F.log_softmax(y_s/self.T, dim=1)`` against
  ``F.softmax(y_t/self.T, dim=1)`` (torch's deprecated ``size_average`` form, a sum);
  ``distiller_zoo/FitNet.py``'s ``HintLoss`` (``nn.MSELoss``) through ``models/util.py``'s
  ``ConvReg`` (a ``kernel_size=(1+s_H-t_H, 1+s_W-t_W)`` tuple); ``distiller_zoo/AT.py``'s
  ``Attention`` (``F.normalize(f.pow(self.p).mean(1).view(f.size(0), -1))`` and
  ``F.adaptive_avg_pool2d`` where the sizes differ), summed by ``sum(loss_group)``;
- ``models/resnet.py``'s CIFAR ``ResNet`` returning ``(out, preact)`` from each stage's last
  block (``x, f1_pre = self.layer1(x)`` through ``nn.Sequential``), the features list of
  ``is_feat=True``, ``nn.ReLU(inplace=True)``, ``kaiming_normal_(mode='fan_out')``, its depth
  and widths narrowed (``resnet8``: 4..8 channels, ``resnet14`` teacher: 4..16);
- ``helper/util.py``'s ``AverageMeter``, ``accuracy`` (``output.topk(maxk, 1, True, True)``,
  ``pred.t()``, ``pred.eq(target.view(1, -1).expand_as(pred))``, ``correct[:k].contiguous()
  .view(-1).float().sum(0, keepdim=True)``, ``mul_(100.0 / batch_size)``) and
  ``adjust_learning_rate`` (``np.sum(epoch > np.asarray(opt.lr_decay_epochs))``);
- ``helper/loops.py``'s ``train_distill`` (every module ``train()``, the teacher ``eval()``,
  its features under ``torch.no_grad()`` and ``[f.detach() for f in feat_t]``, ``loss =
  opt.gamma * loss_cls + opt.alpha * loss_div + opt.beta * loss_kd`` with ``loss_kd = 0`` for
  plain KD) and ``validate``;
- ``train_student.py``'s ``main``: ``get_teacher_name`` and ``load_teacher`` (``torch.load(
  model_path)['model']``), shapes probed by ``torch.randn(2, 3, 32, 32)`` in ``eval()``,
  ``nn.ModuleList`` ``module_list``/``trainable_list``/``criterion_list``, ``optim.SGD(
  trainable_list.parameters(), ...)`` before the teacher is appended, the epoch routine.

The teacher checkpoint is written by the program with ``torch.save({'model': ...})`` (a stand-in
for ``train_teacher.py``); the dataset is a few synthetic CIFAR-shaped batches yielding
``(input, target, index)`` as ``is_instance=True`` does; tensorboard's logger records what it is
given; the best/regular checkpoint saving is left out. The lines changed: the ``import`` lines and
the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, port, run_source

REPDISTILLER_SOURCE = '''
import time
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# distiller_zoo/KD.py
class DistillKL(nn.Module):
    """KL divergence for KD"""
    def __init__(self, T):
        super(DistillKL, self).__init__()
        self.T = T

    def forward(self, y_s, y_t):
        p_s = F.log_softmax(y_s/self.T, dim=1)
        p_t = F.softmax(y_t/self.T, dim=1)
        loss = F.kl_div(p_s, p_t, size_average=False) * (self.T**2) / y_s.shape[0]
        return loss


# distiller_zoo/FitNet.py
class HintLoss(nn.Module):
    """regression loss from hints"""
    def __init__(self):
        super(HintLoss, self).__init__()
        self.crit = nn.MSELoss()

    def forward(self, f_s, f_t):
        loss = self.crit(f_s, f_t)
        return loss


# distiller_zoo/AT.py
class Attention(nn.Module):
    """attention transfer loss"""
    def __init__(self, p=2):
        super(Attention, self).__init__()
        self.p = p

    def forward(self, g_s, g_t):
        return [self.at_loss(f_s, f_t) for f_s, f_t in zip(g_s, g_t)]

    def at_loss(self, f_s, f_t):
        s_H, t_H = f_s.shape[2], f_t.shape[2]
        if s_H > t_H:
            f_s = F.adaptive_avg_pool2d(f_s, (t_H, t_H))
        elif s_H < t_H:
            f_t = F.adaptive_avg_pool2d(f_t, (s_H, s_H))
        else:
            pass
        return (self.at(f_s) - self.at(f_t)).pow(2).mean()

    def at(self, f):
        return F.normalize(f.pow(self.p).mean(1).view(f.size(0), -1))


# models/util.py
class ConvReg(nn.Module):
    """Convolutional regression for FitNet"""
    def __init__(self, s_shape, t_shape, use_relu=True):
        super(ConvReg, self).__init__()
        self.use_relu = use_relu
        s_N, s_C, s_H, s_W = s_shape
        t_N, t_C, t_H, t_W = t_shape
        if s_H == 2 * t_H:
            self.conv = nn.Conv2d(s_C, t_C, kernel_size=3, stride=2, padding=1)
        elif s_H * 2 == t_H:
            self.conv = nn.ConvTranspose2d(s_C, t_C, kernel_size=4, stride=2, padding=1)
        elif s_H >= t_H:
            self.conv = nn.Conv2d(s_C, t_C, kernel_size=(1+s_H-t_H, 1+s_W-t_W))
        else:
            raise NotImplemented('student size {}, teacher size {}'.format(s_H, t_H))
        self.bn = nn.BatchNorm2d(t_C)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.conv(x)
        if self.use_relu:
            return self.relu(self.bn(x))
        else:
            return self.bn(x)


# models/resnet.py
def conv3x3(in_planes, out_planes, stride=1):
    """3x3 convolution with padding"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride,
                     padding=1, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None, is_last=False):
        super(BasicBlock, self).__init__()
        self.is_last = is_last
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        residual = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            residual = self.downsample(x)

        out += residual
        preact = out
        out = F.relu(out)
        if self.is_last:
            return out, preact
        else:
            return out


class ResNet(nn.Module):

    def __init__(self, depth, num_filters, block_name='BasicBlock', num_classes=10):
        super(ResNet, self).__init__()
        # Model type specifies number of layers for CIFAR-10 model
        if block_name.lower() == 'basicblock':
            assert (depth - 2) % 6 == 0, 'When use basicblock, depth should be 6n+2, e.g. 20, 32, 44, 56, 110, 1202'
            n = (depth - 2) // 6
            block = BasicBlock
        else:
            raise ValueError('block_name shoule be Basicblock or Bottleneck')

        self.inplanes = num_filters[0]
        self.conv1 = nn.Conv2d(3, num_filters[0], kernel_size=3, padding=1,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(num_filters[0])
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, num_filters[1], n)
        self.layer2 = self._make_layer(block, num_filters[2], n, stride=2)
        self.layer3 = self._make_layer(block, num_filters[3], n, stride=2)
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(num_filters[3] * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion,
                          kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )

        layers = list([])
        layers.append(block(self.inplanes, planes, stride, downsample, is_last=(blocks == 1)))
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            layers.append(block(self.inplanes, planes, is_last=(i == blocks-1)))

        return nn.Sequential(*layers)

    def forward(self, x, is_feat=False, preact=False):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)  # 32x32
        f0 = x

        x, f1_pre = self.layer1(x)  # 32x32
        f1 = x
        x, f2_pre = self.layer2(x)  # 16x16
        f2 = x
        x, f3_pre = self.layer3(x)  # 8x8
        f3 = x

        x = self.avgpool(x)
        x = x.view(x.size(0), -1)
        f4 = x
        x = self.fc(x)

        if is_feat:
            if preact:
                return [f0, f1_pre, f2_pre, f3_pre, f4], x
            else:
                return [f0, f1, f2, f3, f4], x
        else:
            return x


def resnet8(**kwargs):
    return ResNet(8, [4, 4, 8, 8], 'basicblock', **kwargs)


def resnet14(**kwargs):
    return ResNet(14, [4, 8, 8, 16], 'basicblock', **kwargs)


model_dict = {
    'resnet8': resnet8,
    'resnet14': resnet14,
}


# helper/util.py
def adjust_learning_rate(epoch, opt, optimizer):
    """Sets the learning rate to the initial LR decayed by decay rate every steep step"""
    steps = np.sum(epoch > np.asarray(opt.lr_decay_epochs))
    if steps > 0:
        new_lr = opt.learning_rate * (opt.lr_decay_rate ** steps)
        for param_group in optimizer.param_groups:
            param_group['lr'] = new_lr


class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].contiguous().view(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


# helper/loops.py
def train_distill(epoch, train_loader, module_list, criterion_list, optimizer, opt):
    """One epoch distillation"""
    # set modules as train()
    for module in module_list:
        module.train()
    # set teacher as eval()
    module_list[-1].eval()

    criterion_cls = criterion_list[0]
    criterion_div = criterion_list[1]
    criterion_kd = criterion_list[2]

    model_s = module_list[0]
    model_t = module_list[-1]

    batch_time = AverageMeter()
    data_time = AverageMeter()
    losses = AverageMeter()
    top1 = AverageMeter()
    top5 = AverageMeter()

    end = time.time()
    for idx, data in enumerate(train_loader):
        if opt.distill in ['contrast']:
            input, target, index, contrast_idx = data
        else:
            input, target, index = data
        data_time.update(time.time() - end)

        input = input.float()
        if torch.cuda.is_available():
            input = input.cuda()
            target = target.cuda()
            index = index.cuda()

        # ===================forward=====================
        preact = False
        if opt.distill in ['abound']:
            preact = True
        feat_s, logit_s = model_s(input, is_feat=True, preact=preact)
        with torch.no_grad():
            feat_t, logit_t = model_t(input, is_feat=True, preact=preact)
            feat_t = [f.detach() for f in feat_t]

        # cls + kl div
        loss_cls = criterion_cls(logit_s, target)
        loss_div = criterion_div(logit_s, logit_t)

        # other kd beyond KL divergence
        if opt.distill == 'kd':
            loss_kd = 0
        elif opt.distill == 'hint':
            f_s = module_list[1](feat_s[opt.hint_layer])
            f_t = feat_t[opt.hint_layer]
            loss_kd = criterion_kd(f_s, f_t)
        elif opt.distill == 'attention':
            g_s = feat_s[1:-1]
            g_t = feat_t[1:-1]
            loss_group = criterion_kd(g_s, g_t)
            loss_kd = sum(loss_group)
        else:
            raise NotImplementedError(opt.distill)

        loss = opt.gamma * loss_cls + opt.alpha * loss_div + opt.beta * loss_kd

        acc1, acc5 = accuracy(logit_s, target, topk=(1, 5))
        losses.update(loss.item(), input.size(0))
        top1.update(acc1[0], input.size(0))
        top5.update(acc5[0], input.size(0))

        # ===================backward=====================
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # ===================meters=====================
        batch_time.update(time.time() - end)
        end = time.time()

        # print info
        if idx % opt.print_freq == 0:
            print('Epoch: [{0}][{1}/{2}]\\t'
                  'Time {batch_time.val:.3f} ({batch_time.avg:.3f})\\t'
                  'Data {data_time.val:.3f} ({data_time.avg:.3f})\\t'
                  'Loss {loss.val:.4f} ({loss.avg:.4f})\\t'
                  'Acc@1 {top1.val:.3f} ({top1.avg:.3f})\\t'
                  'Acc@5 {top5.val:.3f} ({top5.avg:.3f})'.format(
                epoch, idx, len(train_loader), batch_time=batch_time,
                data_time=data_time, loss=losses, top1=top1, top5=top5))
            sys.stdout.flush()

    print(' * Acc@1 {top1.avg:.3f} Acc@5 {top5.avg:.3f}'
          .format(top1=top1, top5=top5))

    return top1.avg, losses.avg


def validate(val_loader, model, criterion, opt):
    """validation"""
    batch_time = AverageMeter()
    losses = AverageMeter()
    top1 = AverageMeter()
    top5 = AverageMeter()

    # switch to evaluate mode
    model.eval()

    with torch.no_grad():
        end = time.time()
        for idx, (input, target) in enumerate(val_loader):

            input = input.float()
            if torch.cuda.is_available():
                input = input.cuda()
                target = target.cuda()

            # compute output
            output = model(input)
            loss = criterion(output, target)

            # measure accuracy and record loss
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            losses.update(loss.item(), input.size(0))
            top1.update(acc1[0], input.size(0))
            top5.update(acc5[0], input.size(0))

            # measure elapsed time
            batch_time.update(time.time() - end)
            end = time.time()

            if idx % opt.print_freq == 0:
                print('Test: [{0}/{1}]\\t'
                      'Time {batch_time.val:.3f} ({batch_time.avg:.3f})\\t'
                      'Loss {loss.val:.4f} ({loss.avg:.4f})\\t'
                      'Acc@1 {top1.val:.3f} ({top1.avg:.3f})\\t'
                      'Acc@5 {top5.val:.3f} ({top5.avg:.3f})'.format(
                       idx, len(val_loader), batch_time=batch_time, loss=losses,
                       top1=top1, top5=top5))

        print(' * Acc@1 {top1.avg:.3f} Acc@5 {top5.avg:.3f}'
              .format(top1=top1, top5=top5))

    return top1.avg, top5.avg, losses.avg


# train_student.py
def get_teacher_name(model_path):
    """parse teacher name"""
    segments = model_path.split('/')[-2].split('_')
    if segments[0] != 'wrn':
        return segments[0]
    else:
        return segments[0] + '_' + segments[1] + '_' + segments[2]


def load_teacher(model_path, n_cls):
    print('==> loading teacher model')
    model_t = get_teacher_name(model_path)
    model = model_dict[model_t](num_classes=n_cls)
    model.load_state_dict(torch.load(model_path)['model'])
    print('==> done')
    return model


def main():
    best_acc = 0

    opt = parse_option()

    # dataloader
    n_cls = 10

    # model
    model_t = load_teacher(opt.path_t, n_cls)
    model_s = model_dict[opt.model_s](num_classes=n_cls)
    initialize(model_s)

    data = torch.randn(2, 3, 32, 32)
    model_t.eval()
    model_s.eval()
    feat_t, _ = model_t(data, is_feat=True)
    feat_s, _ = model_s(data, is_feat=True)

    module_list = nn.ModuleList([])
    module_list.append(model_s)
    trainable_list = nn.ModuleList([])
    trainable_list.append(model_s)

    criterion_cls = nn.CrossEntropyLoss()
    criterion_div = DistillKL(opt.kd_T)
    if opt.distill == 'kd':
        criterion_kd = DistillKL(opt.kd_T)
    elif opt.distill == 'hint':
        criterion_kd = HintLoss()
        regress_s = ConvReg(feat_s[opt.hint_layer].shape, feat_t[opt.hint_layer].shape)
        initialize(regress_s)
        module_list.append(regress_s)
        trainable_list.append(regress_s)
    elif opt.distill == 'attention':
        criterion_kd = Attention()
    else:
        raise NotImplementedError(opt.distill)

    criterion_list = nn.ModuleList([])
    criterion_list.append(criterion_cls)    # classification loss
    criterion_list.append(criterion_div)    # KL divergence loss, original knowledge distillation
    criterion_list.append(criterion_kd)     # other knowledge distillation loss

    # optimizer
    optimizer = optim.SGD(trainable_list.parameters(),
                          lr=opt.learning_rate,
                          momentum=opt.momentum,
                          weight_decay=opt.weight_decay)

    # append teacher after optimizer to avoid weight_decay
    module_list.append(model_t)

    # validate teacher accuracy
    teacher_acc, _, _ = validate(val_loader, model_t, criterion_cls, opt)
    print('teacher accuracy: ', teacher_acc)
    record.append(float(teacher_acc))

    # routine
    for epoch in range(1, opt.epochs + 1):

        adjust_learning_rate(epoch, opt, optimizer)
        print("==> training...")

        time1 = time.time()
        train_acc, train_loss = train(epoch, train_loader, module_list, criterion_list, optimizer, opt)
        time2 = time.time()
        print('epoch {}, total time {:.2f}'.format(epoch, time2 - time1))

        logger.log_value('train_acc', train_acc, epoch)
        logger.log_value('train_loss', train_loss, epoch)

        test_acc, tect_acc_top5, test_loss = validate(val_loader, model_s, criterion_cls, opt)

        logger.log_value('test_acc', test_acc, epoch)
        logger.log_value('test_loss', test_loss, epoch)
        logger.log_value('test_acc_top5', tect_acc_top5, epoch)

        # save the best model
        if test_acc > best_acc:
            best_acc = test_acc

        record.append([float(train_acc), train_loss, float(test_acc), float(tect_acc_top5), test_loss, optimizer.param_groups[0]['lr']])
        record.append(params_of(*trainable_list))

    print('best accuracy:', best_acc)


# train_teacher.py, in short: the teacher's checkpoint
teacher = model_dict['resnet14'](num_classes=10)
initialize(teacher)
torch.save({'epoch': 240, 'model': teacher.state_dict()}, teacher_path)
train = train_distill
main()
'''

REPDISTILLER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "import torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


class Logger:
    def __init__(self):
        self.values = []

    def log_value(self, name, value, step):
        self.values.append((name, float(value), step))


@pytest.mark.parametrize("distill", ["kd", "hint", "attention"])
def test_repdistiller_trains_a_student_as_torch(tmp_path, capsys, distill):
    torch.manual_seed(361)  # torch's initial weights, which the port loads
    rng = np.random.default_rng(361)
    train_batches = [
        (
            rng.standard_normal((4, 3, 32, 32)).astype(np.float32),
            rng.integers(0, 10, 4),
            np.arange(4 * i, 4 * i + 4),
        )
        for i in range(2)
    ]
    val_batches = [(rng.standard_normal((4, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 4))]
    opt = SimpleNamespace(
        distill=distill,
        model_s="resnet8",
        kd_T=4,
        gamma=0.1,
        alpha=0.9,
        beta=0.0 if distill == "kd" else 100.0,
        hint_layer=2,
        learning_rate=0.05,
        momentum=0.9,
        weight_decay=5e-4,
        lr_decay_epochs=[1],
        lr_decay_rate=0.1,
        epochs=2,
        print_freq=100,
    )
    initialize, records, loggers = initializer(), [], []
    for lib in (torch, rg):
        folder = tmp_path / lib.__name__ / "resnet14_vanilla"
        folder.mkdir(parents=True)
        opt.path_t = str(folder / "ckpt_epoch_240.pth")
        record, logger = [], Logger()
        text = (
            REPDISTILLER_SOURCE if lib is torch else port(REPDISTILLER_SOURCE, REPDISTILLER_STEPS)
        )
        run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            params_of=params_of,
            parse_option=lambda: opt,
            logger=logger,
            teacher_path=opt.path_t,
            train_loader=[tuple(lib.tensor(a) for a in batch) for batch in train_batches],
            val_loader=[tuple(lib.tensor(a) for a in batch) for batch in val_batches],
        )
        records.append(record)
        loggers.append(logger.values)
        capsys.readouterr()
    theirs, ours = records
    assert len(theirs) == 1 + 2 * 2
    assert theirs[-2][-1] == pytest.approx(0.005)
    assert [v[0::2] for v in loggers[1]] == [v[0::2] for v in loggers[0]]
    np.testing.assert_allclose(
        [v[1] for v in loggers[1]], [v[1] for v in loggers[0]], rtol=1e-4, atol=1e-5
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
