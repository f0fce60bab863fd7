"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of clcarwin/focal_loss_pytorch, NegatioN/OnlineMiningTripletLoss, milesial/Pytorch-UNet,
timm's ``ModelEmaV2`` and mistralai/mistral-src's mixture of experts, each in a small training
loop checked against torch:

- a focal loss: ``F.log_softmax(x)`` without a dim (torch's implicit dim 1), segmentation
  logits by ``view(N, C, -1).transpose(1, 2).contiguous().view(-1, C)``, ``gather(1, t)``,
  ``autograd.Variable(log_p.data.exp())``, ``alpha.type() != x.data.type()`` then ``type_as``,
  ``alpha.gather(0, t.data.view(-1))``, ``(1 - p) ** gamma``; ``alpha`` a float, a list or None;
- online triplet mining: distances from ``torch.diag`` of the Gram matrix, ``d[d < 0] = 0``,
  ``d.eq(0).float()`` and the ``1e-16`` guard around ``torch.sqrt``; boolean masks from
  ``torch.eye(..., device=).bool()``, ``~`` and ``&`` of ``unsqueeze``d masks; the batch-hard
  loss (``max(1, keepdim=True)``, ``min``, ``t[t < 0] = 0``) and the batch-all loss
  (``t[t > 1e-16].size(0)``, ``mask.sum().float()``);
- a Dice loss and segmentation step: ``sum(dim=(-1, -2))`` or ``(-1, -2, -3)``,
  ``torch.where(total == 0, overlap, total)``, ``flatten(0, 1)``, ``F.one_hot(m,
  k).permute(0, 3, 1, 2).float()``, ``loss += dice_loss(...)`` after ``CrossEntropyLoss`` (or
  ``BCEWithLogitsLoss`` on ``squeeze(1)`` for one class), ``.to(device=, dtype=,
  memory_format=torch.channels_last)``, RMSprop with ``momentum`` and ``foreach=True``,
  ``ReduceLROnPlateau(opt, "max", patience=0)``, a disabled ``torch.cuda.amp.GradScaler`` and
  ``torch.autocast(..., enabled=False)``, ``scaler.unscale_`` and ``clip_grad_norm_``,
  ``zero_grad(set_to_none=True)``, an ``@torch.inference_mode()`` validation of
  ``(F.sigmoid(x) > 0.5).float()`` or ``F.one_hot(x.argmax(dim=1), k)`` scored on ``[:, 1:]``;
- a model weight average: ``deepcopy(net)`` in ``eval()``, ``mine.copy_(rule(mine, live))``
  over ``zip`` of both ``state_dict().values()`` under ``no_grad`` (BatchNorm's running
  statistics and its int64 ``num_batches_tracked`` included), ``forward(*inputs, **options)``;
- a sparse mixture of experts: ``torch.topk`` of router logits, ``F.softmax(w, dim=1,
  dtype=torch.float).to(x.dtype)``, ``rows, slot = torch.where(chosen == e)``, ``out[rows] +=
  mix[rows, slot, None] * expert(x[rows])``, a SwiGLU feed-forward, an RMS norm by
  ``torch.rsqrt`` on ``x.float()`` then ``type_as``, a ``dataclasses`` config.

Only the gradient lines differ in the ports (the scaler's lines take the gradients, as in
``test_real_ports_8.py``); no defect was found. The one-class validation fails in torch too (a
``[N, 1, H, W]`` prediction against ``[N, H, W]`` masks): that run validates on no batches.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both


def run_model(source, step, build, go, dtype=None):
    theirs, ours = both(source, step)
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        model = build(names)
        if dtype == "float64":
            model = model.double()
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        records.append(go(names, lib, model))
    return records


TRAIN_SOURCE = """
def fit(net, loss_fn, batches, lr=0.05):
    log = []
    opt = optim.Adam(net.parameters(), lr=lr)
    for inputs, targets in batches:
        loss = loss_fn(net(inputs), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append(loss.item())
    log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""

TRAIN_STEP = [
    (
        "        loss.backward()\n        opt.step()",
        "        grads = loss.backward()\n        opt.step(grads)",
    ),
]

# -- focal loss ------------------------------------------------------------------------------------
FOCAL_SOURCE = (
    """
from torch import autograd


class Focal(nn.Module):
    # cross-entropy scaled down where the model is already confident
    def __init__(self, gamma=0, alpha=None, mean=True):
        super().__init__()
        self.gamma, self.mean = gamma, mean
        if isinstance(alpha, (float, int)):
            alpha = torch.Tensor([alpha, 1 - alpha])
        elif isinstance(alpha, list):
            alpha = torch.Tensor(alpha)
        self.alpha = alpha

    def forward(self, logits, labels):
        if logits.dim() > 2:  # N, C, H, W -> N * H * W, C
            n, c = logits.size(0), logits.size(1)
            logits = logits.view(n, c, -1).transpose(1, 2).contiguous().view(-1, c)
        labels = labels.view(-1, 1)
        log_p = F.log_softmax(logits).gather(1, labels).view(-1)  # the implicit dim: 1
        p = autograd.Variable(log_p.data.exp())
        if self.alpha is not None:
            if self.alpha.type() != logits.data.type():
                self.alpha = self.alpha.type_as(logits.data)
            log_p = log_p * autograd.Variable(self.alpha.gather(0, labels.data.view(-1)))
        per_item = -((1 - p) ** self.gamma) * log_p
        return per_item.mean() if self.mean else per_item.sum()
"""
    + TRAIN_SOURCE
)


@pytest.mark.parametrize(
    ("alpha", "classes", "mean"),
    [(0.25, 2, True), ([0.2, 0.3, 0.5], 3, False), (None, 3, True)],
)
def test_focal_loss_training_matches_torch(alpha, classes, mean):
    rng = np.random.default_rng(classes)
    batches = [
        (rng.standard_normal((2, 3, 3, 3)), rng.integers(0, classes, (2, 3, 3))) for _ in range(3)
    ]

    def go(names, lib, model):
        criterion = names["Focal"](gamma=2, alpha=alpha, mean=mean)
        data = [(lib.tensor(x, dtype=lib.float32), lib.tensor(y)) for x, y in batches]
        return names["fit"](model, criterion, data)

    records = run_model(
        FOCAL_SOURCE, TRAIN_STEP, lambda n: n["nn"].Conv2d(3, classes, 3, padding=1), go
    )
    assert_records_agree(records[1], records[0], rtol=2e-5, atol=1e-6)


# -- online triplet mining -------------------------------------------------------------------------
TRIPLET_SOURCE = """
def distance_matrix(emb, squared=False):
    gram = torch.matmul(emb, emb.t())
    norms = torch.diag(gram)
    d = norms.unsqueeze(0) - 2.0 * gram + norms.unsqueeze(1)
    d[d < 0] = 0  # rounding can dip below zero
    if squared:
        return d
    zero = d.eq(0).float()
    return (1.0 - zero) * torch.sqrt(d + zero * 1e-16)  # sqrt's gradient is infinite at 0


def not_self(labels):
    return ~torch.eye(labels.size(0), device=labels.device).bool()


def same_label(labels):
    return labels.unsqueeze(0) == labels.unsqueeze(1)


def hardest_loss(labels, emb, margin, squared=False):
    d = distance_matrix(emb, squared)
    pos_mask = (same_label(labels) & not_self(labels)).float()
    hardest_pos, _ = (pos_mask * d).max(1, keepdim=True)
    row_max, _ = d.max(1, keepdim=True)
    neg_mask = (~same_label(labels)).float()
    hardest_neg, _ = (d + row_max * (1.0 - neg_mask)).min(1, keepdim=True)
    per_anchor = hardest_pos - hardest_neg + margin
    per_anchor[per_anchor < 0] = 0
    return per_anchor.mean()


def all_triplets_loss(labels, emb, margin, squared=False):
    d = distance_matrix(emb, squared)
    distinct = not_self(labels)
    valid = distinct.unsqueeze(2) & distinct.unsqueeze(1) & distinct.unsqueeze(0)
    same = same_label(labels)
    valid = valid & same.unsqueeze(2) & ~same.unsqueeze(1)  # a~p same label, a~n not
    cube = valid.float() * (d.unsqueeze(2) - d.unsqueeze(1) + margin)
    cube[cube < 0] = 0
    n_active = cube[cube > 1e-16].size(0)
    share = n_active / (valid.sum().float() + 1e-16)
    return cube.sum() / (n_active + 1e-16), share


def train_embedding(net, batches, hard, squared, margin=1.0):
    log = []
    opt = optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for x, labels in batches:
        emb = net(x)
        if hard:
            loss = hardest_loss(labels, emb, margin, squared=squared)
        else:
            loss, share = all_triplets_loss(labels, emb, margin, squared=squared)
            log.append(share.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append(loss.item())
    log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""


@pytest.mark.parametrize(
    ("hard", "squared"), [(True, False), (True, True), (False, False), (False, True)]
)
def test_online_triplet_mining_matches_torch(hard, squared):
    rng = np.random.default_rng(int(hard) * 2 + int(squared))
    batches = [(rng.standard_normal((8, 5)), rng.integers(0, 3, 8)) for _ in range(3)]

    def go(names, lib, model):
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        return names["train_embedding"](model, data, hard, squared)

    def build(names):
        nn = names["nn"]
        return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))

    records = run_model(TRIPLET_SOURCE, TRAIN_STEP, build, go, dtype="float64")
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-12)


# -- Dice loss and a segmentation training step in the style of Pytorch-UNet -----------------------
UNET_SOURCE = """
from torch import Tensor


def soft_dice(pred: Tensor, truth: Tensor, whole_batch: bool = False, eps: float = 1e-6):
    assert pred.size() == truth.size()
    assert pred.dim() == 3 or not whole_batch
    dims = (-1, -2, -3) if whole_batch and pred.dim() != 2 else (-1, -2)
    overlap = 2 * (pred * truth).sum(dim=dims)
    total = pred.sum(dim=dims) + truth.sum(dim=dims)
    total = torch.where(total == 0, overlap, total)  # two empty masks agree perfectly
    return ((overlap + eps) / (total + eps)).mean()


def soft_dice_per_class(pred: Tensor, truth: Tensor, whole_batch: bool = False, eps: float = 1e-6):
    return soft_dice(pred.flatten(0, 1), truth.flatten(0, 1), whole_batch, eps)


def dice_loss(pred: Tensor, truth: Tensor, per_class: bool = False):
    score = soft_dice_per_class if per_class else soft_dice
    return 1 - score(pred, truth, whole_batch=True)


class PixelNet(nn.Module):
    def __init__(self, n_channels, n_classes, width=4):
        super().__init__()
        self.n_channels, self.n_classes = n_channels, n_classes
        self.body = nn.Sequential(
            nn.Conv2d(n_channels, width, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        )
        self.head = nn.Conv2d(width, n_classes, kernel_size=1)

    def forward(self, x):
        return self.head(self.body(x))


def as_inputs(batch, device):
    img = batch["image"].to(device=device, dtype=torch.float32, memory_format=torch.channels_last)
    return img, batch["mask"].to(device=device, dtype=torch.long)


@torch.inference_mode()
def validate(net, loader, device, amp):
    net.eval()
    score = 0
    with torch.autocast(device.type, enabled=amp):
        for batch in loader:
            img, truth = as_inputs(batch, device)
            logits = net(img)
            if net.n_classes == 1:
                score += soft_dice((F.sigmoid(logits) > 0.5).float(), truth, whole_batch=False)
            else:
                k = net.n_classes
                truth = F.one_hot(truth, k).permute(0, 3, 1, 2).float()
                guess = F.one_hot(logits.argmax(dim=1), k).permute(0, 3, 1, 2).float()
                score += soft_dice_per_class(guess[:, 1:], truth[:, 1:])  # background left out
    net.train()
    return score / max(len(loader), 1)


def train_segmenter(net, device, train_loader, val_loader, epochs=2, lr=1e-3, amp=False, clip=1.0):
    log = []
    opt = optim.RMSprop(net.parameters(), lr=lr, weight_decay=1e-8, momentum=0.9, foreach=True)
    plateau = optim.lr_scheduler.ReduceLROnPlateau(opt, "max", patience=0)
    scaler = torch.cuda.amp.GradScaler(enabled=amp)
    pixel_loss = nn.CrossEntropyLoss() if net.n_classes > 1 else nn.BCEWithLogitsLoss()
    for epoch in range(epochs):
        net.train()
        running = 0
        for batch in train_loader:
            img, truth = as_inputs(batch, device)
            assert img.shape[1] == net.n_channels, f"expected {net.n_channels} channels"
            with torch.autocast(device.type, enabled=amp):
                logits = net(img)
                if net.n_classes == 1:
                    loss = pixel_loss(logits.squeeze(1), truth.float())
                    loss += dice_loss(F.sigmoid(logits.squeeze(1)), truth.float())
                else:
                    loss = pixel_loss(logits, truth)
                    onehot = F.one_hot(truth, net.n_classes).permute(0, 3, 1, 2).float()
                    loss += dice_loss(F.softmax(logits, dim=1).float(), onehot, per_class=True)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
            scaler.step(opt)
            scaler.update()
            running += loss.item()
            log.append(loss.item())
        val = validate(net, val_loader, device, amp)
        plateau.step(val)
        log.append([float(val), opt.param_groups[0]["lr"], running])
    log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""

UNET_STEP = [
    (
        "            scaler.scale(loss).backward()\n"
        "            scaler.unscale_(opt)\n"
        "            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)\n"
        "            scaler.step(opt)",
        "            grads = scaler.scale(loss).backward()\n"
        "            scaler.unscale_(opt, grads)\n"
        "            torch.nn.utils.clip_grad_norm_(grads, net.parameters(), clip)\n"
        "            scaler.step(opt, grads)",
    )
]


@pytest.mark.parametrize("n_classes", [1, 2, 3])
def test_dice_segmentation_training_step_matches_torch(capsys, n_classes):
    rng = np.random.default_rng(30 + n_classes)
    train = [
        (rng.standard_normal((2, 3, 5, 5)), rng.integers(0, max(n_classes, 2), (2, 5, 5)))
        for _ in range(2)
    ]
    val = [
        (rng.standard_normal((2, 3, 5, 5)), rng.integers(0, max(n_classes, 2), (2, 5, 5)))
        for _ in range(2)
    ]
    if n_classes == 1:
        # the one-class validation compares a [N, 1, H, W] prediction with a [N, H, W] mask,
        # which the Dice size assertion refuses in torch as well: no validation batches
        val = []

    def go(names, lib, model):
        def loader(batches):
            return [
                {"image": lib.tensor(x, dtype=lib.float32), "mask": lib.tensor(y)}
                for x, y in batches
            ]

        return names["train_segmenter"](model, lib.device("cpu"), loader(train), loader(val))

    records = run_model(UNET_SOURCE, UNET_STEP, lambda n: n["PixelNet"](3, n_classes), go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


# -- a model EMA in the style of timm's ModelEmaV2 -------------------------------------------------
EMA_SOURCE = """
from copy import deepcopy


class WeightAverage(nn.Module):
    # a frozen copy whose whole state (buffers too) trails the live model's
    def __init__(self, net, decay=0.999, device=None):
        super().__init__()
        self.module = deepcopy(net)
        self.module.eval()
        self.decay, self.device = decay, device
        if device is not None:
            self.module.to(device=device)

    def _blend(self, net, rule):
        with torch.no_grad():
            pairs = zip(self.module.state_dict().values(), net.state_dict().values())
            for mine, live in pairs:
                if self.device is not None:
                    live = live.to(device=self.device)
                mine.copy_(rule(mine, live))

    def update(self, net):
        self._blend(net, lambda old, new: self.decay * old + (1.0 - self.decay) * new)

    def set(self, net):
        self._blend(net, lambda old, new: new)

    def forward(self, *inputs, **options):
        return self.module(*inputs, **options)


def train_with_average(net, batches, probe):
    log = []
    avg = WeightAverage(net, decay=0.8, device="cpu")
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    xent = nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(batches):
        net.train()
        loss = xent(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        (avg.set if i == 0 else avg.update)(net)
        log.append(loss.item())
        with torch.no_grad():
            log.append(avg(probe).numpy().copy())
    log.append({k: v.detach().numpy().copy() for k, v in avg.state_dict().items()})
    log.append({k: v.detach().numpy().copy() for k, v in net.state_dict().items()})
    return log
"""


def test_model_weight_average_matches_torch():
    rng = np.random.default_rng(40)
    batches = [(rng.standard_normal((4, 5)), rng.integers(0, 3, 4)) for _ in range(3)]
    probe = rng.standard_normal((3, 5))

    def build(names):
        nn = names["nn"]
        return nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))

    def go(names, lib, model):
        data = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        return names["train_with_average"](model, data, lib.tensor(probe))

    records = run_model(EMA_SOURCE, TRAIN_STEP, build, go, dtype="float64")
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)


# -- a sparse mixture of experts in the style of mistral-src ---------------------------------------
MOE_SOURCE = """
import dataclasses


@dataclasses.dataclass
class RoutingConfig:
    experts: int
    per_token: int


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class RootMeanSquareNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()  # normalise in float32 whatever the input dtype
        scaled = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return scaled.type_as(x) * self.scale


class SparseExperts(nn.Module):
    def __init__(self, dim, hidden, cfg):
        super().__init__()
        self.cfg = cfg
        self.router = nn.Linear(dim, cfg.experts, bias=False)
        self.experts = nn.ModuleList([SwiGLU(dim, hidden) for _ in range(cfg.experts)])

    def forward(self, tokens):
        top, chosen = torch.topk(self.router(tokens), self.cfg.per_token)
        mix = F.softmax(top, dim=1, dtype=torch.float).to(tokens.dtype)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(chosen == e)
            out[rows] += mix[rows, slot, None] * expert(tokens[rows])
        return out


class RoutedClassifier(nn.Module):
    def __init__(self, dim, hidden, cfg):
        super().__init__()
        self.norm = RootMeanSquareNorm(dim, eps=1e-5)
        self.moe = SparseExperts(dim, hidden, cfg)
        self.out = nn.Linear(dim, 4)

    def forward(self, x):
        return self.out(x + self.moe(self.norm(x)))
"""


@pytest.mark.parametrize("per_token", [1, 2])
def test_sparse_mixture_of_experts_matches_torch(per_token):
    rng = np.random.default_rng(50 + per_token)
    batches = [(rng.standard_normal((6, 8)), rng.integers(0, 4, 6)) for _ in range(3)]

    def go(names, lib, model):
        data = [(lib.tensor(x, dtype=lib.float32), lib.tensor(y)) for x, y in batches]
        return names["fit"](model, names["nn"].CrossEntropyLoss(), data, lr=0.01)

    def build(names):
        cfg = names["RoutingConfig"](experts=4, per_token=per_token)
        return names["RoutedClassifier"](8, 12, cfg)

    records = run_model(MOE_SOURCE + TRAIN_SOURCE, TRAIN_STEP, build, go)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
