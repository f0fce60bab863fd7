"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
three self-supervised methods, written here in the style of facebookresearch's repositories
(their models, losses, optimizers and training steps), a small residual CNN standing in for
torchvision's ResNet-50 / ViT (with the ``fc`` the programs replace), one process
(``torch.distributed``'s ``all_reduce`` of one rank is the identity: a stand-in ``dist``
namespace):

- Barlow Twins in the style of facebookresearch/barlowtwins: the projector of ``Linear(bias=
  False)``/``BatchNorm1d``/``ReLU(inplace=True)`` built from ``args.projector.split('-')``,
  ``nn.BatchNorm1d(widths[-1], affine=False)``, the cross-correlation ``self.bn(z1).T @
  self.bn(z2)`` divided in place (``c.div_``), ``torch.diagonal(c).add_(-1).pow_(2).sum()`` (in
  place on a diagonal view), the off-diagonal view by ``flat[:-1].view(n - 1, n + 1)[:,
  1:].flatten()``, a ``LARS`` optimizer subclassing ``optim.Optimizer`` (a function kept in the
  param groups as a filter, ``self.state[p]`` filled on first use, ``torch.where`` of
  ``torch.norm``s, ``mu.mul_(...).add_(update)``, ``p.add_(mu, alpha=-lr)`` under
  ``@torch.no_grad()``), built with ``lr=0`` and driven by a warm-up and cosine schedule into two
  groups (weights and ``param.ndim == 1``);
- SimSiam in the style of facebookresearch/simsiam: the encoder's ``fc`` wrapped into a 3-layer
  projector around the old ``self.encoder.fc``, ``self.encoder.fc[6].bias.requires_grad =
  False``, ``nn.CosineSimilarity(dim=1)``, the symmetric loss on ``z.detach()``, SGD over groups
  carrying an extra ``'fix_lr'`` key that the schedule reads, and a meter's ``str`` in the log;
- DINO in the style of facebookresearch/dino: a multi-crop wrapper
  (``torch.cumsum(torch.unique_consecutive(torch.tensor([crop.shape[-1] ...]),
  return_counts=True)[1], 0)``, the list of crops sliced by 0-d tensors, outputs concatenated
  onto ``torch.empty(0)``), the head (``trunc_normal_``, ``nn.GELU``, ``F.normalize(x, dim=-1,
  p=2)``, ``nn.utils.weight_norm`` of a bias-free ``Linear`` with ``weight_g.data.fill_(1)`` and
  ``weight_g.requires_grad = False``), the loss (a ``center`` buffer reassigned in
  ``@torch.no_grad()`` ``update_center``, the teacher temperature read from a NumPy schedule,
  student and teacher chunks crossed), parameter groups without decay for biases and norms and
  cosine schedules (NumPy ``float64`` learning rates and weight decays written into
  ``param_groups``), per-parameter gradient clipping (``p.grad.data.norm(2)``,
  ``p.grad.data.mul_(coef)``), the last layer's gradients dropped in the first epoch
  (``p.grad = None``), AdamW and the teacher's EMA ``p_t.data.mul_(m).add_((1 - m) *
  p_s.detach().data)``.

The ports change the gradient lines only (``LARS.step`` and the DINO utilities read
``p.grad(grads)``; ``p.grad = None`` is ``p.grad_remove(grads)``).

The defect found: ``Optimizer.state`` was a plain dict, so LARS's ``state = self.state[p]``
raised ``KeyError`` on its first step; it is now a ``defaultdict(dict)`` as torch's (also after
``load_state_dict``). SimSiam and DINO ran unchanged.
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

# The backbone standing in for torchvision's: a small residual CNN ending in ``avgpool`` + ``fc``
BACKBONE_SOURCE = """
class TinyResNet(nn.Module):
    # a stem convolution and one residual block, pooled, then ResNet's classifier `fc`
    def __init__(self, num_classes=10, width=8, zero_init_residual=False):
        super().__init__()
        self.stem = nn.Conv2d(3, width, kernel_size=3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(width)
        self.block = nn.Conv2d(width, width, kernel_size=3, padding=1, bias=False)
        self.block_bn = nn.BatchNorm2d(width)
        if zero_init_residual:  # the residual branch starts as nothing: the block is the identity
            nn.init.constant_(self.block_bn.weight, 0)
        self.avgpool = nn.AdaptiveAvgPool2d(output_size=(1, 1))
        self.fc = nn.Linear(in_features=width, out_features=num_classes)

    def forward(self, x):
        h = F.relu(self.stem_bn(self.stem(x)))
        h = F.relu(h + self.block_bn(self.block(h)))
        return self.fc(torch.flatten(self.avgpool(h), 1))
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
def set_learning_rates(args, optimizer, loader, step):
    # a linear warm-up over 10 epochs, then a cosine down to a thousandth of the base rate
    total, warmup = args.epochs * len(loader), 10 * len(loader)
    base = args.batch_size / 256
    if step < warmup:
        lr = base * step / warmup
    else:
        q = 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))
        lr = base * q + base * 0.001 * (1 - q)
    weights, biases = optimizer.param_groups
    weights['lr'] = lr * args.learning_rate_weights
    biases['lr'] = lr * args.learning_rate_biases


def off_diagonal(x):
    # a view of the entries off the diagonal of a square matrix, flattened
    n, m = x.shape
    assert n == m
    flat = x.flatten()
    return flat[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class BarlowTwins(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        backbone = TinyResNet(zero_init_residual=True)
        backbone.fc = nn.Identity()  # features, not classes
        self.backbone = backbone
        widths = [8] + [int(w) for w in args.projector.split('-')]
        blocks = []  # Linear-BN-ReLU blocks, then a Linear
        for a, b in zip(widths[:-2], widths[1:-1]):
            blocks += [nn.Linear(a, b, bias=False), nn.BatchNorm1d(b), nn.ReLU(inplace=True)]
        blocks.append(nn.Linear(widths[-2], widths[-1], bias=False))
        self.projector = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm1d(widths[-1], affine=False)  # standardises each embedding feature

    def forward(self, y1, y2):
        z1, z2 = (self.projector(self.backbone(y)) for y in (y1, y2))
        c = self.bn(z1).T @ self.bn(z2)  # the cross-correlation of the two views' features
        c.div_(self.args.batch_size)
        torch.distributed.all_reduce(c)  # summed over the ranks
        # in place on views of c: first its diagonal, then the rest
        invariance = torch.diagonal(c).add_(-1).pow_(2).sum()
        redundancy = off_diagonal(c).pow_(2).sum()
        return invariance + self.args.lambd * redundancy


class LARS(optim.Optimizer):
    # SGD with momentum, each weight matrix's update scaled to eta * |w| / |update|
    def __init__(self, params, lr, momentum=0.9, eta=0.001, weight_decay=0,
                 lars_adaptation_filter=None, weight_decay_filter=None):
        super().__init__(params, dict(
            lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta,
            weight_decay_filter=weight_decay_filter, lars_adaptation_filter=lars_adaptation_filter,
        ))

    @staticmethod
    def applies(exclude, p):
        return exclude is None or not exclude(p)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group['params']:
                update = p.grad
                if update is None:
                    continue
                if self.applies(group['weight_decay_filter'], p):
                    update = update.add(p, alpha=group['weight_decay'])
                if self.applies(group['lars_adaptation_filter'], p):
                    w_norm, u_norm = torch.norm(p), torch.norm(update)
                    one = torch.ones_like(w_norm)
                    trust = torch.where(u_norm > 0, group['eta'] * w_norm / u_norm, one)
                    update = update.mul(torch.where(w_norm > 0., trust, one))
                state = self.state[p]  # an empty dict the first time
                if 'mu' not in state:
                    state['mu'] = torch.zeros_like(p)
                state['mu'].mul_(group['momentum']).add_(update)
                p.add_(state['mu'], alpha=-group['lr'])


def bias_or_norm(p):
    return p.ndim == 1


def pretrain(model, loader, args):
    log = []
    weights = [p for p in model.parameters() if p.ndim != 1]
    biases = [p for p in model.parameters() if p.ndim == 1]
    # lr=0: the schedule sets each group's rate before every step
    optimizer = LARS([{'params': weights}, {'params': biases}], lr=0,
                     weight_decay=args.weight_decay, weight_decay_filter=bias_or_norm,
                     lars_adaptation_filter=bias_or_norm)
    for epoch in range(args.epochs):
        for step, ((view1, view2), _) in enumerate(loader, start=epoch * len(loader)):
            set_learning_rates(args, optimizer, loader, step)
            optimizer.zero_grad()
            loss = model.forward(view1, view2)
            loss.backward()
            optimizer.step()
            log.append([group['lr'] for group in optimizer.param_groups] + [loss.item()])
    log.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
    log.append({str(index): s['mu'] for index, s in optimizer.state_dict()['state'].items()})
    return log
"""
)

BARLOW_STEP = [
    ("    def step(self):\n", "    def step(self, grads):\n"),
    ("                update = p.grad\n", "                update = p.grad(grads)\n"),
    (
        "            loss.backward()\n            optimizer.step()",
        "            grads = loss.backward()\n            optimizer.step(grads)",
    ),
]


def test_barlow_twins_with_lars_matches_torch(monkeypatch):
    args = types.SimpleNamespace(
        epochs=2, batch_size=4, projector="12-12-16", lambd=0.0051, weight_decay=1e-6,
        learning_rate_weights=0.2, learning_rate_biases=0.0048,
    )  # fmt: skip
    rng = np.random.default_rng(100)
    batches = [
        ((rng.standard_normal((4, 3, 6, 6)), rng.standard_normal((4, 3, 6, 6))), None)
        for _ in range(3)
    ]

    def go(names, lib, model):
        loader = [((lib.tensor(a), lib.tensor(b)), y) for (a, b), y in batches]
        # warm-up over 10 epochs as written: 2 epochs stay in it; a shorter one reaches the cosine
        return names["pretrain"](model, loader, args)

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
    + """
class SimSiam(nn.Module):
    # one encoder with a 3-layer projector, a 2-layer predictor; the targets are stop-gradient
    def __init__(self, make_encoder, dim=2048, pred_dim=512):
        super().__init__()
        self.encoder = make_encoder(zero_init_residual=True, num_classes=dim)
        width = self.encoder.fc.weight.shape[1]
        classifier = self.encoder.fc
        self.encoder.fc = nn.Sequential(
            nn.Linear(width, width, bias=False), nn.BatchNorm1d(width), nn.ReLU(inplace=True),
            nn.Linear(width, width, bias=False), nn.BatchNorm1d(width), nn.ReLU(inplace=True),
            classifier, nn.BatchNorm1d(dim, affine=False),
        )
        # the old classifier's bias feeds a BatchNorm: it would learn nothing, so it is frozen
        self.encoder.fc[6].bias.requires_grad = False
        self.predictor = nn.Sequential(
            nn.Linear(dim, pred_dim, bias=False), nn.BatchNorm1d(pred_dim), nn.ReLU(inplace=True),
            nn.Linear(pred_dim, dim),
        )

    def forward(self, x1, x2):
        z1, z2 = self.encoder(x1), self.encoder(x2)
        return self.predictor(z1), self.predictor(z2), z1.detach(), z2.detach()


class Meter:
    def __init__(self, label, fmt=':f'):
        self.name, self.fmt = label, fmt
        self.val = self.avg = self.total = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.total += val * n
        self.count += n
        self.avg = self.total / self.count

    def __str__(self):
        return ('{name} {val' + self.fmt + '} ({avg' + self.fmt + '})').format(**vars(self))


def train_epoch(loader, model, criterion, optimizer, epoch, args, log):
    losses = Meter('Loss', ':.4f')
    width = len(str(len(loader)))
    model.train()
    for i, (views, _) in enumerate(loader):
        p1, p2, z1, z2 = model(x1=views[0], x2=views[1])
        # the negative cosine similarity, symmetrised
        loss = -0.5 * (criterion(p1, z2).mean() + criterion(p2, z1).mean())
        losses.update(loss.item(), views[0].size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i % args.print_freq == 0:
            print('\\t'.join([f'Epoch: [{epoch}][{i:{width}d}/{len(loader)}]', str(losses)]))
        log.append([loss.item(), losses.avg])
        log.append(str(losses))


def cosine_lr(optimizer, init_lr, epoch, args):
    lr = init_lr * 0.5 * (1. + math.cos(math.pi * epoch / args.epochs))
    for group in optimizer.param_groups:
        # a group may ask to keep its initial rate (the predictor's, with fix_pred_lr)
        group['lr'] = init_lr if group.get('fix_lr', False) else lr


def run_simsiam(model, loader, args):
    log = []
    init_lr = args.lr * args.batch_size / 256  # the linear scaling rule
    similarity = nn.CosineSimilarity(dim=1)
    if args.fix_pred_lr:
        params = [dict(params=model.encoder.parameters(), fix_lr=False),
                  dict(params=model.predictor.parameters(), fix_lr=True)]
    else:
        params = model.parameters()
    optimizer = torch.optim.SGD(
        params, init_lr, momentum=args.momentum, weight_decay=args.weight_decay
    )
    epochs = range(args.start_epoch, args.epochs)  # start_epoch > 0: a resumed run
    for epoch in epochs:
        cosine_lr(optimizer, init_lr, epoch, args)
        train_epoch(loader, model, similarity, optimizer, epoch, args, log)
        log.append([group['lr'] for group in optimizer.param_groups])
    log.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
    return log
"""
)

SIMSIAM_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize("fix_pred_lr", [True, False])
def test_simsiam_matches_torch(monkeypatch, capsys, fix_pred_lr):
    args = types.SimpleNamespace(
        lr=0.05 * 256 / 4, batch_size=4, momentum=0.9, weight_decay=1e-4, fix_pred_lr=fix_pred_lr,
        start_epoch=0, epochs=2, print_freq=1,
    )  # fmt: skip
    rng = np.random.default_rng(102)
    batches = [
        ([rng.standard_normal((4, 3, 6, 6)), rng.standard_normal((4, 3, 6, 6))], None)
        for _ in range(2)
    ]

    def go(names, lib, model):
        loader = [([lib.tensor(a), lib.tensor(b)], y) for (a, b), y in batches]
        return names["run_simsiam"](model, loader, args)

    with default_float64():
        records = run_program(
            monkeypatch, SIMSIAM_SOURCE, SIMSIAM_STEP, 103,
            lambda n: n["SimSiam"](n["TinyResNet"], dim=12, pred_dim=6), go,
        )  # fmt: skip
    # the projector's two hidden Linear layers feed BatchNorms: no biases there; the output
    # Linear's bias is frozen by the program itself
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


# -- DINO ------------------------------------------------------------------------------------------
DINO_SOURCE = (
    BACKBONE_SOURCE
    + """
import sys
from torch.nn.init import trunc_normal_ as truncated_normal_


def cosine_schedule(base, final, epochs, iters_per_epoch, warmup_epochs=0, warmup_start=0):
    # one value per iteration: a linear warm-up, then a cosine from base to final
    warmup_iters = warmup_epochs * iters_per_epoch
    warmup = np.linspace(warmup_start, base, warmup_iters) if warmup_epochs > 0 else np.array([])
    steps = np.arange(epochs * iters_per_epoch - warmup_iters)
    cosine = final + 0.5 * (base - final) * (1 + np.cos(np.pi * steps / len(steps)))
    schedule = np.concatenate((warmup, cosine))
    assert len(schedule) == epochs * iters_per_epoch
    return schedule


def clip_gradients(model, max_norm):
    # each parameter's gradient clipped on its own; the norms before clipping returned
    norms = []
    for _, p in model.named_parameters():
        if p.grad is not None:
            norm = p.grad.data.norm(2)
            norms.append(norm.item())
            coef = max_norm / (norm + 1e-6)
            if coef < 1:
                p.grad.data.mul_(coef)
    return norms


def drop_last_layer_grads(epoch, net, freeze_epochs):
    # the head's last layer stays as it is during the first epochs
    if epoch < freeze_epochs:
        for name, param in net.named_parameters():
            if 'last_layer' in name:
                param.grad = None


def decay_groups(net):
    decayed, plain = [], []
    for name, param in net.named_parameters():
        if param.requires_grad:
            # biases and norm parameters are not decayed
            (plain if name.endswith('.bias') or len(param.shape) == 1 else decayed).append(param)
    return [{'params': decayed}, {'params': plain, 'weight_decay': 0.}]


class MultiCrop(nn.Module):
    # the crops of one resolution go through the backbone together; the head sees them all
    def __init__(self, backbone, head, /):
        super().__init__()
        # the classifiers go: the backbone yields its pooled features
        backbone.fc = backbone.head = nn.Identity()
        self.backbone, self.head = backbone, head

    def forward(self, crops):
        if not isinstance(crops, list):
            crops = [crops]
        sizes = torch.tensor([crop.shape[-1] for crop in crops])
        ends = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
        start, features = 0, torch.empty(0).to(crops[0].device)
        for end in ends:
            # a list sliced by 0-d tensors
            features = torch.cat((features, self.backbone(torch.cat(crops[start:end]))))
            start = end
        return self.head(features)


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, use_bn=False, norm_last_layer=True, nlayers=3,
                 hidden_dim=2048, bottleneck_dim=256):
        super().__init__()
        dims = [in_dim] + [hidden_dim] * (max(nlayers, 1) - 1) + [bottleneck_dim]
        layers = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(dims) - 2:  # all but the last linear layer: (a BatchNorm and) a GELU
                if use_bn:
                    layers.append(nn.BatchNorm1d(b))
                layers.append(nn.GELU())
        self.mlp = layers[0] if len(layers) == 1 else nn.Sequential(*layers)
        self.apply(self.init_linear)
        # a weight-normalised projection onto the prototypes, its scale fixed at 1
        last = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        last.weight_g.data.fill_(1)
        if norm_last_layer:
            last.weight_g.requires_grad = False
        self.last_layer = last

    @staticmethod
    def init_linear(m):
        if isinstance(m, nn.Linear):
            truncated_normal_(m.weight, std=.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        return self.last_layer(nn.functional.normalize(self.mlp(x), dim=-1, p=2))


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, temp_start, temp_final, warmup_epochs, nepochs,
                 student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.center_momentum, self.ncrops = student_temp, center_momentum, ncrops
        self.register_buffer('center', torch.zeros(1, out_dim))
        # the teacher's temperature rises at first: a sharp teacher destabilises early training
        self.teacher_temps = np.concatenate((
            np.linspace(temp_start, temp_final, warmup_epochs),
            np.ones(nepochs - warmup_epochs) * temp_final,
        ))

    def forward(self, student_logits, teacher_logits, epoch):
        student = (student_logits / self.student_temp).chunk(self.ncrops)
        temp = self.teacher_temps[epoch]  # a NumPy float64
        teacher = F.softmax((teacher_logits - self.center) / temp, dim=-1).detach().chunk(2)
        total, terms = 0, 0
        for t_view, target in enumerate(teacher):
            for s_view, logits in enumerate(student):
                if s_view == t_view:
                    continue  # the same view on both sides
                total += torch.sum(-target * F.log_softmax(logits, dim=-1), dim=-1).mean()
                terms += 1
        total /= terms
        self.update_center(teacher_logits)
        return total

    @torch.no_grad()
    def update_center(self, outputs):
        summed = torch.sum(outputs, dim=0, keepdim=True)
        dist.all_reduce(summed)
        mean = summed / (len(outputs) * dist.get_world_size())
        # a running mean of the teacher's outputs, the buffer reassigned
        self.center = self.center_momentum * self.center + (1 - self.center_momentum) * mean


def build(args):
    def head(**extra):
        return DINOHead(8, args.out_dim, use_bn=args.use_bn_in_head, nlayers=3, hidden_dim=10,
                        bottleneck_dim=6, **extra)
    student = MultiCrop(TinyResNet(width=8), head(norm_last_layer=args.norm_last_layer))
    teacher = MultiCrop(TinyResNet(width=8), head())
    return nn.ModuleList((student, teacher))


def train_dino(pair, loader, args):
    log = []
    student, teacher = pair
    teacher.load_state_dict(student.state_dict())  # the same start
    for param in teacher.parameters():
        param.requires_grad = False  # the teacher only follows the student's moving average
    criterion = DINOLoss(args.out_dim, args.local_crops_number + 2, args.warmup_teacher_temp,
                         args.teacher_temp, args.warmup_teacher_temp_epochs, args.epochs)
    optimizer = torch.optim.AdamW(decay_groups(student))
    n = len(loader)
    lrs = cosine_schedule(args.lr * args.batch_size_per_gpu / 256., args.min_lr, args.epochs, n,
                          warmup_epochs=args.warmup_epochs)
    wds = cosine_schedule(args.weight_decay, args.weight_decay_end, args.epochs, n)
    momenta = cosine_schedule(args.momentum_teacher, 1, args.epochs, n)

    for epoch in range(args.epochs):
        for i, (crops, _) in enumerate(loader):
            it = n * epoch + i
            for g, group in enumerate(optimizer.param_groups):
                group['lr'] = lrs[it]  # NumPy float64 rates and decays
                if g == 0:
                    group['weight_decay'] = wds[it]
            with torch.cuda.amp.autocast(False):
                teacher_out = teacher(crops[:2])  # the global views only
                student_out = student(crops)
                loss = criterion(student_out, teacher_out, epoch)
            value = loss.item()
            if not math.isfinite(value):
                print(f'loss {loss.item()}: stopping')
                sys.exit(1)
            optimizer.zero_grad()
            loss.backward()
            norms = clip_gradients(student, args.clip_grad) if args.clip_grad else None
            drop_last_layer_grads(epoch, student, args.freeze_last_layer)
            optimizer.step()
            with torch.no_grad():
                m = momenta[it]
                for p_s, p_t in zip(student.parameters(), teacher.parameters()):
                    p_t.data.mul_(m).add_((1 - m) * p_s.detach().data)
            first = optimizer.param_groups[0]
            log.append([loss.item(), first['lr'], first['weight_decay']])
            log.append(norms)
            log.append(criterion.center.numpy().copy())
    for half in (student, teacher):
        log.append({name: t.detach().numpy().copy() for name, t in half.state_dict().items()})
    return log
"""
)

DINO_STEP = [
    (
        "        if p.grad is not None:\n            norm = p.grad.data.norm(2)",
        "        if p.grad(grads) is not None:\n            norm = p.grad(grads).data.norm(2)",
    ),
    ("                p.grad.data.mul_(coef)", "                p.grad(grads).data.mul_(coef)"),
    ("def clip_gradients(model, max_norm):", "def clip_gradients(grads, model, max_norm):"),
    (
        "def drop_last_layer_grads(epoch, net, freeze_epochs):",
        "def drop_last_layer_grads(grads, epoch, net, freeze_epochs):",
    ),
    ("                param.grad = None", "                param.grad_remove(grads)"),
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("clip_gradients(student, args.clip_grad)", "clip_gradients(grads, student, args.clip_grad)"),
    (
        "drop_last_layer_grads(epoch, student,",
        "drop_last_layer_grads(grads, epoch, student,",
    ),
    ("            optimizer.step()", "            optimizer.step(grads)"),
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
    crops = [
        [rng.standard_normal((2, 3, 8, 8)) for _ in range(2)]  # two global views
        + [rng.standard_normal((2, 3, 4, 4)) for _ in range(2)]  # two local ones
        for _ in range(2)
    ]

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
