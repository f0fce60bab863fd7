# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
three self-supervised methods of facebookresearch, their models, losses, optimizers and
training steps as written, a small convolutional backbone standing in for torchvision's
ResNet-50 / ViT (with the ``fc`` the programs replace), one process (``torch.distributed``'s
``all_reduce`` of one rank is the identity: a stand-in ``dist`` namespace):

- Barlow Twins (facebookresearch/barlowtwins ``main.py``): the projector of ``Linear(bias=
  False)``/``BatchNorm1d``/``ReLU(inplace=True)`` built from ``args.projector.split('-')``,
  ``nn.BatchNorm1d(sizes[-1], affine=False)``, the cross-correlation ``self.bn(z1).T @
  self.bn(z2)`` divided in place (``c.div_``), ``torch.diagonal(c).add_(-1).pow_(2).sum()`` (in
  place on a diagonal view), ``off_diagonal`` by ``x.flatten()[:-1].view(n - 1, n + 1)[:,
  1:].flatten()``, the ``LARS`` optimizer subclassing ``optim.Optimizer`` (a function kept in
  the param groups as a filter, ``self.state[p]`` filled on first use, ``torch.where`` of
  ``torch.norm``s, ``mu.mul_(...).add_(dp)``, ``p.add_(mu, alpha=-g['lr'])`` under
  ``@torch.no_grad()``), built with ``lr=0`` and driven by ``adjust_learning_rate``'s warm-up
  and cosine into two groups (weights and ``param.ndim == 1``);
- SimSiam (facebookresearch/simsiam ``simsiam/builder.py``, ``main_simsiam.py``): the encoder's
  ``fc`` wrapped into a 3-layer projector around the old ``self.encoder.fc``,
  ``self.encoder.fc[6].bias.requires_grad = False``, ``nn.CosineSimilarity(dim=1)``, the
  symmetric loss on ``z.detach()``, SGD over groups carrying an extra ``'fix_lr'`` key that
  ``adjust_learning_rate`` reads, and ``AverageMeter``/``ProgressMeter`` of the log;
- DINO (facebookresearch/dino ``main_dino.py``, ``utils.py``, ``vision_transformer.py``):
  ``MultiCropWrapper`` (``torch.cumsum(torch.unique_consecutive(torch.tensor([inp.shape[-1]
  ...]), return_counts=True)[1], 0)``, the list of crops sliced by 0-d tensors, outputs
  concatenated onto ``torch.empty(0)``), ``DINOHead`` (``trunc_normal_``, ``nn.GELU``,
  ``F.normalize(x, dim=-1, p=2)``, ``nn.utils.weight_norm`` of a bias-free ``Linear`` with
  ``weight_g.data.fill_(1)`` and ``weight_g.requires_grad = False``), ``DINOLoss`` (a
  ``center`` buffer reassigned in ``@torch.no_grad()`` ``update_center``, the teacher
  temperature read from a NumPy schedule, student and teacher chunks crossed), the
  ``get_params_groups``/``cosine_scheduler`` (NumPy ``float64`` learning rates and weight
  decays written into ``param_groups``), ``clip_gradients`` (``p.grad.data.norm(2)``,
  ``p.grad.data.mul_(clip_coef)``), ``cancel_gradients_last_layer`` (``p.grad = None``), AdamW
  and the teacher's EMA ``param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)``.

The ports change the gradient lines only (``LARS.step`` and the DINO utilities read
``p.grad(grads)``; ``p.grad = None`` is ``p.grad_remove(grads)``).

The defect found: ``Optimizer.state`` was a plain dict, so LARS's ``param_state =
self.state[p]`` raised ``KeyError`` on its first step; it is now a ``defaultdict(dict)`` as
torch's (also after ``load_state_dict``). SimSiam and DINO ran unchanged.
"""

from __future__ import annotations

import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both
from test_real_ports_17 import default_float64

# The backbone standing in for torchvision's: a small CNN ending in ``avgpool`` + ``fc``
BACKBONE_SOURCE = """
class SmallNet(nn.Module):
    def __init__(self, num_classes=10, zero_init_residual=False, width=8):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        if zero_init_residual:
            nn.init.constant_(self.bn2.weight, 0)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(x + self.bn2(self.conv2(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)
"""

DIST_STANDIN = types.SimpleNamespace(all_reduce=lambda t: t, get_world_size=lambda: 1)


def run_program(monkeypatch, source, step, seed, build, go, **shared):
    records, initial = [], None
    for lib in (torch, rg):
        names = both(source, step, **shared)[0 if lib is torch else 1]
        torch.manual_seed(0)
        random.seed(seed)
        np.random.seed(seed)
        model = build(names)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        records.append(go(names, lib, model))
    return records


# -- Barlow Twins ----------------------------------------------------------------------------------
BARLOW_SOURCE = (
    BACKBONE_SOURCE
    + """
def adjust_learning_rate(args, optimizer, loader, step):
    max_steps = args.epochs * len(loader)
    warmup_steps = 10 * len(loader)
    base_lr = args.batch_size / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    optimizer.param_groups[0]['lr'] = lr * args.learning_rate_weights
    optimizer.param_groups[1]['lr'] = lr * args.learning_rate_biases


def off_diagonal(x):
    # return a flattened view of the off-diagonal elements of a square matrix
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class BarlowTwins(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.backbone = SmallNet(zero_init_residual=True)
        self.backbone.fc = nn.Identity()

        # projector
        sizes = [8] + list(map(int, args.projector.split('-')))
        layers = []
        for i in range(len(sizes) - 2):
            layers.append(nn.Linear(sizes[i], sizes[i + 1], bias=False))
            layers.append(nn.BatchNorm1d(sizes[i + 1]))
            layers.append(nn.ReLU(inplace=True))
        layers.append(nn.Linear(sizes[-2], sizes[-1], bias=False))
        self.projector = nn.Sequential(*layers)

        # normalization layer for the representations z1 and z2
        self.bn = nn.BatchNorm1d(sizes[-1], affine=False)

    def forward(self, y1, y2):
        z1 = self.projector(self.backbone(y1))
        z2 = self.projector(self.backbone(y2))

        # empirical cross-correlation matrix
        c = self.bn(z1).T @ self.bn(z2)

        # sum the cross-correlation matrix between all gpus
        c.div_(self.args.batch_size)
        torch.distributed.all_reduce(c)

        on_diag = torch.diagonal(c).add_(-1).pow_(2).sum()
        off_diag = off_diagonal(c).pow_(2).sum()
        loss = on_diag + self.args.lambd * off_diag
        return loss


class LARS(optim.Optimizer):
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001,
                 weight_decay_filter=None, lars_adaptation_filter=None):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum,
                        eta=eta, weight_decay_filter=weight_decay_filter,
                        lars_adaptation_filter=lars_adaptation_filter)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                dp = p.grad

                if dp is None:
                    continue

                if g['weight_decay_filter'] is None or not g['weight_decay_filter'](p):
                    dp = dp.add(p, alpha=g['weight_decay'])

                if g['lars_adaptation_filter'] is None or not g['lars_adaptation_filter'](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(param_norm > 0.,
                                    torch.where(update_norm > 0,
                                                (g['eta'] * param_norm / update_norm), one), one)
                    dp = dp.mul(q)

                param_state = self.state[p]
                if 'mu' not in param_state:
                    param_state['mu'] = torch.zeros_like(p)
                mu = param_state['mu']
                mu.mul_(g['momentum']).add_(dp)

                p.add_(mu, alpha=-g['lr'])


def exclude_bias_and_norm(p):
    return p.ndim == 1


def main_worker(model, loader, args):
    records = []
    param_weights = []
    param_biases = []
    for param in model.parameters():
        if param.ndim == 1:
            param_biases.append(param)
        else:
            param_weights.append(param)
    parameters = [{'params': param_weights}, {'params': param_biases}]
    optimizer = LARS(parameters, lr=0, weight_decay=args.weight_decay,
                     weight_decay_filter=exclude_bias_and_norm,
                     lars_adaptation_filter=exclude_bias_and_norm)
    start_epoch = 0
    for epoch in range(start_epoch, args.epochs):
        for step, ((y1, y2), _) in enumerate(loader, start=epoch * len(loader)):
            adjust_learning_rate(args, optimizer, loader, step)
            optimizer.zero_grad()
            loss = model.forward(y1, y2)
            loss.backward()
            optimizer.step()
            stats = dict(epoch=epoch, step=step,
                         lr_weights=optimizer.param_groups[0]['lr'],
                         lr_biases=optimizer.param_groups[1]['lr'],
                         loss=loss.item())
            records.append([stats['lr_weights'], stats['lr_biases'], stats['loss']])
    records.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    records.append({str(k): v['mu'] for k, v in optimizer.state_dict()['state'].items()})
    return records
"""
)

BARLOW_STEP = [
    ("    def step(self):\n", "    def step(self, grads):\n"),
    ("                dp = p.grad\n", "                dp = p.grad(grads)\n"),
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    ),
]


def test_barlow_twins_with_lars_matches_torch(monkeypatch):
    args = types.SimpleNamespace(epochs=2, batch_size=4, projector="12-12-16", lambd=0.0051, weight_decay=1e-6, learning_rate_weights=0.2, learning_rate_biases=0.0048)  # fmt: skip
    rng = np.random.default_rng(100)
    batches = [
        ((rng.standard_normal((4, 3, 6, 6)), rng.standard_normal((4, 3, 6, 6))), None)
        for _ in range(3)
    ]

    def go(names, lib, model):
        loader = [((lib.tensor(a), lib.tensor(b)), y) for (a, b), y in batches]
        # warm-up over 10 epochs as written: 2 epochs stay in it; a shorter one reaches the cosine
        return names["main_worker"](model, loader, args)

    with default_float64(), monkeypatch.context() as patch:
        # one rank: torch.distributed's all_reduce is the identity (retrograd's is collective)
        patch.setattr(torch.distributed, "all_reduce", lambda t: t)
        patch.setattr(rg.distributed, "all_reduce", lambda t: t, raising=False)
        records = run_program(
            monkeypatch, BARLOW_SOURCE, BARLOW_STEP, 101, lambda n: n["BarlowTwins"](args), go
        )
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


def test_optimizer_state_is_a_defaultdict_of_dicts_as_torch_s():
    """LARS's ``self.state[p]`` before any step: an empty dict, kept (torch's
    ``defaultdict(dict)``); state_dict then numbers it as torch does."""
    for lib in (torch, rg):
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.1)
        assert opt.state[p] == {}
        opt.state[p]["mu"] = lib.zeros(2)
        assert list(opt.state_dict()["state"]) == [0]
    # and after load_state_dict
    opt.load_state_dict(opt.state_dict())
    q = rg.nn.Parameter(rg.ones(3))
    assert opt.state[q] == {}


# -- SimSiam ---------------------------------------------------------------------------------------
SIMSIAM_SOURCE = (
    BACKBONE_SOURCE
    + '''
class SimSiam(nn.Module):
    """
    Build a SimSiam model.
    """
    def __init__(self, base_encoder, dim=2048, pred_dim=512):
        """
        dim: feature dimension (default: 2048)
        pred_dim: hidden dimension of the predictor (default: 512)
        """
        super(SimSiam, self).__init__()

        # create the encoder
        # num_classes is the output fc dimension, zero-initialize last BNs
        self.encoder = base_encoder(num_classes=dim, zero_init_residual=True)

        # build a 3-layer projector
        prev_dim = self.encoder.fc.weight.shape[1]
        self.encoder.fc = nn.Sequential(nn.Linear(prev_dim, prev_dim, bias=False),
                                        nn.BatchNorm1d(prev_dim),
                                        nn.ReLU(inplace=True), # first layer
                                        nn.Linear(prev_dim, prev_dim, bias=False),
                                        nn.BatchNorm1d(prev_dim),
                                        nn.ReLU(inplace=True), # second layer
                                        self.encoder.fc,
                                        nn.BatchNorm1d(dim, affine=False)) # output layer
        self.encoder.fc[6].bias.requires_grad = False # hack: not use bias as it is followed by BN

        # build a 2-layer predictor
        self.predictor = nn.Sequential(nn.Linear(dim, pred_dim, bias=False),
                                        nn.BatchNorm1d(pred_dim),
                                        nn.ReLU(inplace=True), # hidden layer
                                        nn.Linear(pred_dim, dim)) # output layer

    def forward(self, x1, x2):
        """
        Input:
            x1: first views of images
            x2: second views of images
        Output:
            p1, p2, z1, z2: predictors and targets of the network
            See Sec. 3 of https://arxiv.org/abs/2011.10566 for detailed notations
        """

        # compute features for one view
        z1 = self.encoder(x1) # NxC
        z2 = self.encoder(x2) # NxC

        p1 = self.predictor(z1) # NxC
        p2 = self.predictor(z2) # NxC

        return p1, p2, z1.detach(), z2.detach()


class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self, name, fmt=':f'):
        self.name = name
        self.fmt = fmt
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

    def __str__(self):
        fmtstr = '{name} {val' + self.fmt + '} ({avg' + self.fmt + '})'
        return fmtstr.format(**self.__dict__)


class ProgressMeter(object):
    def __init__(self, num_batches, meters, prefix=""):
        self.batch_fmtstr = self._get_batch_fmtstr(num_batches)
        self.meters = meters
        self.prefix = prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr.format(batch)]
        entries += [str(meter) for meter in self.meters]
        print('\\t'.join(entries))

    def _get_batch_fmtstr(self, num_batches):
        num_digits = len(str(num_batches // 1))
        fmt = '{:' + str(num_digits) + 'd}'
        return '[' + fmt + '/' + fmt.format(num_batches) + ']'


def train(train_loader, model, criterion, optimizer, epoch, args, records):
    losses = AverageMeter('Loss', ':.4f')
    progress = ProgressMeter(
        len(train_loader),
        [losses],
        prefix="Epoch: [{}]".format(epoch))

    # switch to train mode
    model.train()

    for i, (images, _) in enumerate(train_loader):
        # compute output and loss
        p1, p2, z1, z2 = model(x1=images[0], x2=images[1])
        loss = -(criterion(p1, z2).mean() + criterion(p2, z1).mean()) * 0.5

        losses.update(loss.item(), images[0].size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if i % args.print_freq == 0:
            progress.display(i)
        records.append([loss.item(), losses.avg])
        records.append(str(losses))


def adjust_learning_rate(optimizer, init_lr, epoch, args):
    """Decay the learning rate based on schedule"""
    cur_lr = init_lr * 0.5 * (1. + math.cos(math.pi * epoch / args.epochs))
    for param_group in optimizer.param_groups:
        if 'fix_lr' in param_group and param_group['fix_lr']:
            param_group['lr'] = init_lr
        else:
            param_group['lr'] = cur_lr


def main_worker(model, train_loader, args):
    records = []
    # infer learning rate before changing batch size
    init_lr = args.lr * args.batch_size / 256
    criterion = nn.CosineSimilarity(dim=1)

    if args.fix_pred_lr:
        optim_params = [{'params': model.encoder.parameters(), 'fix_lr': False},
                        {'params': model.predictor.parameters(), 'fix_lr': True}]
    else:
        optim_params = model.parameters()

    optimizer = torch.optim.SGD(optim_params, init_lr,
                                momentum=args.momentum,
                                weight_decay=args.weight_decay)

    for epoch in range(args.start_epoch, args.epochs):
        adjust_learning_rate(optimizer, init_lr, epoch, args)

        # train for one epoch
        train(train_loader, model, criterion, optimizer, epoch, args, records)
        records.append([g['lr'] for g in optimizer.param_groups])
    records.append({n: v.detach().numpy().copy() for n, v in model.state_dict().items()})
    return records
'''
)

SIMSIAM_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize("fix_pred_lr", [True, False])
def test_simsiam_matches_torch(monkeypatch, capsys, fix_pred_lr):
    args = types.SimpleNamespace(lr=0.05 * 256 / 4, batch_size=4, momentum=0.9, weight_decay=1e-4, fix_pred_lr=fix_pred_lr, start_epoch=0, epochs=2, print_freq=1)  # fmt: skip
    rng = np.random.default_rng(102)
    batches = [
        ([rng.standard_normal((4, 3, 6, 6)), rng.standard_normal((4, 3, 6, 6))], None)
        for _ in range(2)
    ]

    def go(names, lib, model):
        loader = [([lib.tensor(a), lib.tensor(b)], y) for (a, b), y in batches]
        return names["main_worker"](model, loader, args)

    with default_float64():
        records = run_program(
            monkeypatch, SIMSIAM_SOURCE, SIMSIAM_STEP, 103,
            lambda n: n["SimSiam"](n["SmallNet"], dim=12, pred_dim=6), go,
        )  # fmt: skip
    # the projector's two hidden Linear layers feed BatchNorms: no biases there; the output
    # Linear's bias is frozen by the program itself
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


# -- DINO ------------------------------------------------------------------------------------------
DINO_SOURCE = (
    BACKBONE_SOURCE
    + '''
import sys
from torch.nn.init import trunc_normal_


def cosine_scheduler(base_value, final_value, epochs, niter_per_ep, warmup_epochs=0, start_warmup_value=0):
    warmup_schedule = np.array([])
    warmup_iters = warmup_epochs * niter_per_ep
    if warmup_epochs > 0:
        warmup_schedule = np.linspace(start_warmup_value, base_value, warmup_iters)

    iters = np.arange(epochs * niter_per_ep - warmup_iters)
    schedule = final_value + 0.5 * (base_value - final_value) * (1 + np.cos(np.pi * iters / len(iters)))

    schedule = np.concatenate((warmup_schedule, schedule))
    assert len(schedule) == epochs * niter_per_ep
    return schedule


def clip_gradients(model, clip):
    norms = []
    for name, p in model.named_parameters():
        if p.grad is not None:
            param_norm = p.grad.data.norm(2)
            norms.append(param_norm.item())
            clip_coef = clip / (param_norm + 1e-6)
            if clip_coef < 1:
                p.grad.data.mul_(clip_coef)
    return norms


def cancel_gradients_last_layer(epoch, model, freeze_last_layer):
    if epoch >= freeze_last_layer:
        return
    for n, p in model.named_parameters():
        if "last_layer" in n:
            p.grad = None


def get_params_groups(model):
    regularized = []
    not_regularized = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        # we do not regularize biases nor Norm parameters
        if name.endswith(".bias") or len(param.shape) == 1:
            not_regularized.append(param)
        else:
            regularized.append(param)
    return [{'params': regularized}, {'params': not_regularized, 'weight_decay': 0.}]


class MultiCropWrapper(nn.Module):
    """
    Perform forward pass separately on each resolution input.
    The inputs corresponding to a single resolution are clubbed and single
    forward is run on the same resolution inputs. Hence we do several
    forward passes = number of different resolutions used. We then
    concatenate all the output features and run the head forward on these
    concatenated features.
    """
    def __init__(self, backbone, head):
        super(MultiCropWrapper, self).__init__()
        # disable layers dedicated to ImageNet labels classification
        backbone.fc, backbone.head = nn.Identity(), nn.Identity()
        self.backbone = backbone
        self.head = head

    def forward(self, x):
        # convert to list
        if not isinstance(x, list):
            x = [x]
        idx_crops = torch.cumsum(torch.unique_consecutive(
            torch.tensor([inp.shape[-1] for inp in x]),
            return_counts=True,
        )[1], 0)
        start_idx, output = 0, torch.empty(0).to(x[0].device)
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(x[start_idx: end_idx]))
            # The output is a tuple with XCiT model. See:
            # https://github.com/facebookresearch/xcit/blob/master/xcit.py#L404-L405
            if isinstance(_out, tuple):
                _out = _out[0]
            # accumulate outputs
            output = torch.cat((output, _out))
            start_idx = end_idx
        # Run the head forward on the concatenated features.
        return self.head(output)


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, use_bn=False, norm_last_layer=True, nlayers=3, hidden_dim=2048, bottleneck_dim=256):
        super().__init__()
        nlayers = max(nlayers, 1)
        if nlayers == 1:
            self.mlp = nn.Linear(in_dim, bottleneck_dim)
        else:
            layers = [nn.Linear(in_dim, hidden_dim)]
            if use_bn:
                layers.append(nn.BatchNorm1d(hidden_dim))
            layers.append(nn.GELU())
            for _ in range(nlayers - 2):
                layers.append(nn.Linear(hidden_dim, hidden_dim))
                if use_bn:
                    layers.append(nn.BatchNorm1d(hidden_dim))
                layers.append(nn.GELU())
            layers.append(nn.Linear(hidden_dim, bottleneck_dim))
            self.mlp = nn.Sequential(*layers)
        self.apply(self._init_weights)
        self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        if norm_last_layer:
            self.last_layer.weight_g.requires_grad = False

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.mlp(x)
        x = nn.functional.normalize(x, dim=-1, p=2)
        x = self.last_layer(x)
        return x


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, warmup_teacher_temp, teacher_temp,
                 warmup_teacher_temp_epochs, nepochs, student_temp=0.1,
                 center_momentum=0.9):
        super().__init__()
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.ncrops = ncrops
        self.register_buffer("center", torch.zeros(1, out_dim))
        # we apply a warm up for the teacher temperature because
        # a too high temperature makes the training instable at the beginning
        self.teacher_temp_schedule = np.concatenate((
            np.linspace(warmup_teacher_temp,
                        teacher_temp, warmup_teacher_temp_epochs),
            np.ones(nepochs - warmup_teacher_temp_epochs) * teacher_temp
        ))

    def forward(self, student_output, teacher_output, epoch):
        """
        Cross-entropy between softmax outputs of the teacher and student networks.
        """
        student_out = student_output / self.student_temp
        student_out = student_out.chunk(self.ncrops)

        # teacher centering and sharpening
        temp = self.teacher_temp_schedule[epoch]
        teacher_out = F.softmax((teacher_output - self.center) / temp, dim=-1)
        teacher_out = teacher_out.detach().chunk(2)

        total_loss = 0
        n_loss_terms = 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    # we skip cases where student and teacher operate on the same view
                    continue
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        self.update_center(teacher_output)
        return total_loss

    @torch.no_grad()
    def update_center(self, teacher_output):
        """
        Update center used for teacher output.
        """
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True)
        dist.all_reduce(batch_center)
        batch_center = batch_center / (len(teacher_output) * dist.get_world_size())

        # ema update
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def build(args):
    student = SmallNet(width=8)
    teacher = SmallNet(width=8)
    embed_dim = 8
    student = MultiCropWrapper(student, DINOHead(
        embed_dim,
        args.out_dim,
        use_bn=args.use_bn_in_head,
        norm_last_layer=args.norm_last_layer,
        nlayers=3, hidden_dim=10, bottleneck_dim=6,
    ))
    teacher = MultiCropWrapper(
        teacher,
        DINOHead(embed_dim, args.out_dim, args.use_bn_in_head, nlayers=3, hidden_dim=10, bottleneck_dim=6),
    )
    return nn.ModuleList([student, teacher])


def train_dino(pair, data_loader, args):
    records = []
    student, teacher = pair
    teacher_without_ddp = teacher
    # teacher and student start with the same weights
    teacher_without_ddp.load_state_dict(student.state_dict())
    # there is no backpropagation through the teacher, so no need for gradients
    for p in teacher.parameters():
        p.requires_grad = False

    dino_loss = DINOLoss(
        args.out_dim,
        args.local_crops_number + 2,  # total number of crops = 2 global crops + local_crops_number
        args.warmup_teacher_temp,
        args.teacher_temp,
        args.warmup_teacher_temp_epochs,
        args.epochs,
    )

    params_groups = get_params_groups(student)
    optimizer = torch.optim.AdamW(params_groups)  # to use with ViTs
    fp16_scaler = None

    lr_schedule = cosine_scheduler(
        args.lr * (args.batch_size_per_gpu * 1) / 256.,  # linear scaling rule
        args.min_lr,
        args.epochs, len(data_loader),
        warmup_epochs=args.warmup_epochs,
    )
    wd_schedule = cosine_scheduler(
        args.weight_decay,
        args.weight_decay_end,
        args.epochs, len(data_loader),
    )
    # momentum parameter is increased to 1. during training with a cosine schedule
    momentum_schedule = cosine_scheduler(args.momentum_teacher, 1,
                                         args.epochs, len(data_loader))

    for epoch in range(0, args.epochs):
        for it, (images, _) in enumerate(data_loader):
            # update weight decay and learning rate according to their schedule
            it = len(data_loader) * epoch + it  # global training iteration
            for i, param_group in enumerate(optimizer.param_groups):
                param_group["lr"] = lr_schedule[it]
                if i == 0:  # only the first group is regularized
                    param_group["weight_decay"] = wd_schedule[it]

            # teacher and student forward passes + compute dino loss
            with torch.cuda.amp.autocast(fp16_scaler is not None):
                teacher_output = teacher(images[:2])  # only the 2 global views pass through the teacher
                student_output = student(images)
                loss = dino_loss(student_output, teacher_output, epoch)

            if not math.isfinite(loss.item()):
                print("Loss is {}, stopping training".format(loss.item()), force=True)
                sys.exit(1)

            # student update
            optimizer.zero_grad()
            param_norms = None
            if fp16_scaler is None:
                loss.backward()
                if args.clip_grad:
                    param_norms = clip_gradients(student, args.clip_grad)
                cancel_gradients_last_layer(epoch, student,
                                            args.freeze_last_layer)
                optimizer.step()

            # EMA update for the teacher
            with torch.no_grad():
                m = momentum_schedule[it]  # momentum parameter
                for param_q, param_k in zip(student.parameters(), teacher_without_ddp.parameters()):
                    param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)

            records.append([loss.item(), optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["weight_decay"]])
            records.append(param_norms)
            records.append(dino_loss.center.numpy().copy())
    for net in (student, teacher):
        records.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return records
'''
)

DINO_STEP = [
    (
        "        if p.grad is not None:\n            param_norm = p.grad.data.norm(2)",
        "        if p.grad(grads) is not None:\n            param_norm = p.grad(grads).data.norm(2)",
    ),
    (
        "                p.grad.data.mul_(clip_coef)",
        "                p.grad(grads).data.mul_(clip_coef)",
    ),
    ("def clip_gradients(model, clip):", "def clip_gradients(grads, model, clip):"),
    (
        "def cancel_gradients_last_layer(epoch, model, freeze_last_layer):",
        "def cancel_gradients_last_layer(grads, epoch, model, freeze_last_layer):",
    ),
    ("            p.grad = None", "            p.grad_remove(grads)"),
    ("                loss.backward()\n", "                grads = loss.backward()\n"),
    ("clip_gradients(student, args.clip_grad)", "clip_gradients(grads, student, args.clip_grad)"),
    (
        "cancel_gradients_last_layer(epoch, student,",
        "cancel_gradients_last_layer(grads, epoch, student,",
    ),
    ("                optimizer.step()", "                optimizer.step(grads)"),
]


@pytest.mark.parametrize("norm_last_layer", [True, False])
def test_dino_matches_torch(monkeypatch, capsys, norm_last_layer):
    args = types.SimpleNamespace(
        out_dim=16, use_bn_in_head=False, norm_last_layer=norm_last_layer, local_crops_number=2,
        warmup_teacher_temp=0.04, teacher_temp=0.07, warmup_teacher_temp_epochs=1, epochs=2,
        lr=0.0005 * 256 / 2, batch_size_per_gpu=2, min_lr=1e-6, warmup_epochs=1, weight_decay=0.04,
        weight_decay_end=0.4, momentum_teacher=0.9, clip_grad=0.5, freeze_last_layer=1,
    )  # fmt: skip
    rng = np.random.default_rng(104)
    crops = [[rng.standard_normal((2, 3, 8, 8)) for _ in range(2)] + [rng.standard_normal((2, 3, 4, 4)) for _ in range(2)] for _ in range(2)]  # fmt: skip

    def go(names, lib, pair):
        loader = [([lib.tensor(c) for c in batch], None) for batch in crops]
        return names["train_dino"](pair, loader, args)

    with default_float64():
        records = run_program(
            monkeypatch,
            DINO_SOURCE,
            DINO_STEP,
            105,
            lambda n: n["build"](args),
            go,
            dist=DIST_STANDIN,
        )
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-9)
