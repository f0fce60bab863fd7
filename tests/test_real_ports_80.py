"""Real-port tests, continued (the harness: ``tests/real_ports.py``): dense prediction and
self-supervised learning, as programs written here in the style of six research code bases,
each run under torch and, ported, under retrograd from the same weights and draws.

- Self-supervised monocular depth in the style of monodepth2: axis-angle poses to 4x4
  transforms by item assignment into ``torch.zeros`` (``rot[:, i, j] = ...``, ``T[:, :3, 3,
  None] = t``, ``t *= -1`` on a clone), reflection-padded convolutions over NumPy-integer
  channel counts, back-projection through ``nn.Parameter(..., requires_grad=False)`` pixel grids
  (float32 grids joined to float64 ones), projection with ``pix[..., 0] /= w - 1`` in place on a
  permuted view, SSIM by ``nn.AvgPool2d``, edge-aware smoothness with ``*=``; decoders over
  ``OrderedDict``s of tuple keys, ``F.grid_sample(padding_mode='border')``, bilinear and
  nearest ``F.interpolate``, auto-masking by ``torch.min(..., dim=1)`` after ``randn``
  tie-breaking noise; ``Adam``, ``StepLR``; a dataset of tuple-keyed dicts through the
  ``DataLoader``; float64 throughout.
- Supervised contrastive learning in the style of SupContrast: ``import torch.backends.cudnn as
  cudnn``, ``torch.cat(torch.unbind(features, dim=1), dim=0)``, ``torch.eq(labels,
  labels.T)``, ``torch.scatter(torch.ones_like(mask), 1, ..., 0)``, ``torch.where(x < 1e-6, 1,
  x)``, two NumPy-jittered views, warmup and cosine learning rates; SupCon and SimCLR.
- A heatmap pose estimator in the style of Simple Baselines: a joint-weighted MSE by the
  legacy ``nn.MSELoss(size_average=True)`` over ``split(1, 1)`` maps, a ``ConvTranspose2d``
  head with ``nn.init`` normal/constant, Gaussian targets zeroed for joints off the map, a meta
  dict of strings and arrays collated, PCK accuracy in NumPy, ``MultiStepLR`` stepped first.
- VICReg-style training: a gather ``torch.autograd.Function`` returning a tuple (one process,
  ``dist`` a stand-in), variance and covariance terms (``var``, ``off_diagonal(...).pow_(2)``),
  a LARS ``optim.Optimizer`` subclass (``p.grad``, ``dp.add(p, alpha=)``, nested
  ``torch.where``, ``self.state[p]``), a disabled ``GradScaler`` and ``torch.autocast('cpu',
  enabled=False)``; float64.
- A PSPNet-style segmenter: pyramid pooling by ``nn.AdaptiveAvgPool2d`` bins 1, 2, 3 and 6 on a
  3x3 map, ``F.interpolate(mode='bilinear', align_corners=True)`` of logits and of labels,
  an auxiliary loss in training, ``x.max(1)[1]``, ``CrossEntropyLoss(ignore_index=255)``, SGD
  over ``dict(params=module.parameters(), lr=...)`` groups, poly decay, IoU by
  ``np.histogram``.
- MoCo v3-style training: ``del encoder.fc`` and new projector MLPs ending in
  ``nn.BatchNorm1d(d, affine=False)``, momentum-encoder parameters with ``requires_grad =
  False`` handed to SGD (which leaves them alone), ``param.data = param.data * m + ...`` under
  ``no_grad``, an all-gather, ``torch.einsum('nc,mc->nm', [q, k])``, ``Tensor.cuda``,
  ``torch.cuda.amp.autocast(True)`` and a ``GradScaler`` on the CPU; float64. The distributed
  calls are patched to a world of one.

The float64 programs would drift in float32: their optimizers' large steps carry the rounding
of gradients that nearly cancel. The defect found: ``import torch.backends.cudnn as cudnn``
failed (``retrograd.backends.cudnn`` was a namespace, not a submodule;
``test_backends_flags_import_as_torch_modules`` checks it directly).
"""

from __future__ import annotations

import contextlib
import sys
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

DEPTH_SOURCE = """
import collections

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.utils.data import Dataset, DataLoader


def disparity_to_depth(disp, near, far):
    scaled = 1 / far + (1 / near - 1 / far) * disp
    return scaled, 1 / scaled


def pose_matrix(axisangle, translation, invert=False):
    # Rodrigues' formula for a (B, 1, 3) axis-angle, then the translation, as 4x4 transforms
    angle = torch.norm(axisangle, 2, 2, True)
    axis = axisangle / (angle + 1e-7)
    cos, sin = torch.cos(angle), torch.sin(angle)
    x, y, z = (axis[..., i].unsqueeze(1) for i in range(3))
    outer = [[x * x, x * y, x * z], [y * x, y * y, y * z], [z * x, z * y, z * z]]
    cross = [[0, -z, y], [z, 0, -x], [-y, x, 0]]
    rot = torch.zeros((axisangle.shape[0], 4, 4)).to(device=axisangle.device)
    for i in range(3):
        for j in range(3):
            entry = (1 - cos) * outer[i][j] + sin * cross[i][j] + (cos if i == j else 0)
            rot[:, i, j] = torch.squeeze(entry)
    rot[:, 3, 3] = 1
    t = translation.clone()
    if invert:
        rot = rot.transpose(1, 2)
        t *= -1
    shift = torch.zeros(t.shape[0], 4, 4).to(device=t.device)
    for d in range(4):
        shift[:, d, d] = 1
    shift[:, :3, 3, None] = t.contiguous().view(-1, 3, 1)
    return torch.matmul(rot, shift) if invert else torch.matmul(shift, rot)


class PadConv(nn.Module):
    # reflection padding keeps the borders of a depth map from darkening
    def __init__(self, c_in, c_out, act=True):
        super().__init__()
        self.pad, self.conv = nn.ReflectionPad2d(1), nn.Conv2d(int(c_in), int(c_out), 3)
        self.act = nn.ELU(inplace=True) if act else nn.Identity()

    def forward(self, x):
        return self.act(self.conv(self.pad(x)))


class Backproject(nn.Module):
    def __init__(self, batch, h, w):
        super().__init__()
        self.batch = batch
        grid = np.stack(np.meshgrid(range(w), range(h), indexing='xy'), axis=0).astype(np.float32)
        self.grid = nn.Parameter(torch.from_numpy(grid), requires_grad=False)
        self.ones = nn.Parameter(torch.ones(batch, 1, h * w), requires_grad=False)
        pixels = torch.unsqueeze(torch.stack([self.grid[0].view(-1), self.grid[1].view(-1)], 0), 0)
        pixels = torch.cat([pixels.repeat(batch, 1, 1), self.ones], 1)
        self.pixels = nn.Parameter(pixels, requires_grad=False)

    def forward(self, depth, K_inv):
        rays = torch.matmul(K_inv[:, :3, :3], self.pixels)
        return torch.cat([depth.view(self.batch, 1, -1) * rays, self.ones], 1)


class Project(nn.Module):
    def __init__(self, batch, h, w, eps=1e-7):
        super().__init__()
        self.batch, self.h, self.w, self.eps = batch, h, w, eps

    def forward(self, points, K, pose):
        cam = torch.matmul(torch.matmul(K, pose)[:, :3, :], points)
        pix = cam[:, :2, :] / (cam[:, 2, :].unsqueeze(1) + self.eps)
        pix = pix.view(self.batch, 2, self.h, self.w).permute(0, 2, 3, 1)
        pix[..., 0] /= self.w - 1  # in place on the permuted view
        pix[..., 1] /= self.h - 1
        return (pix - 0.5) * 2


class SSIMDistance(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool, self.pad = nn.AvgPool2d(3, 1), nn.ReflectionPad2d(1)

    def forward(self, x, y):
        x, y = self.pad(x), self.pad(y)
        mx, my = self.pool(x), self.pool(y)
        vx, vy = self.pool(x ** 2) - mx ** 2, self.pool(y ** 2) - my ** 2
        cxy = self.pool(x * y) - mx * my
        c1, c2 = 0.01 ** 2, 0.03 ** 2
        ssim = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx ** 2 + my ** 2 + c1) * (vx + vy + c2))
        return torch.clamp((1 - ssim) / 2, 0, 1)


def edge_aware_smoothness(disp, img):
    dx = torch.abs(disp[:, :, :, :-1] - disp[:, :, :, 1:])
    dy = torch.abs(disp[:, :, :-1, :] - disp[:, :, 1:, :])
    dx *= torch.exp(-torch.mean(torch.abs(img[:, :, :, :-1] - img[:, :, :, 1:]), 1, keepdim=True))
    dy *= torch.exp(-torch.mean(torch.abs(img[:, :, :-1, :] - img[:, :, 1:, :]), 1, keepdim=True))
    return dx.mean() + dy.mean()


class Encoder(nn.Module):
    def __init__(self, frames=1):
        super().__init__()
        self.channels = np.array([4, 4, 8, 8, 8])
        c_in, self.stages = 3 * frames, nn.ModuleList()
        for c in self.channels:
            stage = nn.Sequential(nn.Conv2d(c_in, int(c), 3, 2, 1), nn.ReLU(inplace=True))
            self.stages.append(stage)
            c_in = int(c)

    def forward(self, x):
        x, features = (x - 0.45) / 0.225, []
        for stage in self.stages:
            x = stage(x)
            features.append(x)
        return features


class DispDecoder(nn.Module):
    def __init__(self, enc, scales):
        super().__init__()
        self.scales, dec = scales, np.array([4, 4, 8, 8, 8])
        self.convs = collections.OrderedDict()
        for i in range(4, -1, -1):
            self.convs[('up', i, 0)] = PadConv(enc[-1] if i == 4 else dec[i + 1], dec[i])
            self.convs[('up', i, 1)] = PadConv(dec[i] + (enc[i - 1] if i > 0 else 0), dec[i])
        for s in scales:
            self.convs[('disp', s)] = PadConv(dec[s], 1, act=False)
        self.layers = nn.ModuleList(self.convs.values())

    def forward(self, features):
        out, x = {}, features[-1]
        for i in range(4, -1, -1):
            x = [F.interpolate(self.convs[('up', i, 0)](x), scale_factor=2, mode='nearest')]
            if i > 0:
                x.append(features[i - 1])
            x = self.convs[('up', i, 1)](torch.cat(x, 1))
            if i in self.scales:
                out[('disp', i)] = torch.sigmoid(self.convs[('disp', i)](x))
        return out


class PoseDecoder(nn.Module):
    def __init__(self, enc, width=8):
        super().__init__()
        self.convs = collections.OrderedDict()
        self.convs['squeeze'] = nn.Conv2d(int(enc[-1]), width, 1)
        self.convs[('pose', 0)] = nn.Conv2d(width, width, 3, 1, 1)
        self.convs[('pose', 1)] = nn.Conv2d(width, 12, 1)
        self.layers = nn.ModuleList(self.convs.values())

    def forward(self, features):
        x = torch.relu(self.convs['squeeze'](features[-1]))
        x = self.convs[('pose', 1)](torch.relu(self.convs[('pose', 0)](x)))
        x = 0.01 * x.mean(3).mean(2).view(-1, 2, 1, 6)
        return x[..., :3], x[..., 3:]


class Clips(Dataset):
    # each item: the frames -1, 0, 1 at four scales and the intrinsics at each scale
    def __init__(self, clips, K, size):
        self.clips, self.K, self.size = clips, K, size

    def __len__(self):
        return len(self.clips)

    def __getitem__(self, index):
        item = {}
        for f, image in self.clips[index].items():
            for s in range(4):
                c, h, w = image.shape
                small = image.reshape(c, h >> s, 1 << s, w >> s, 1 << s).mean((2, 4))
                item[('color', f, s)] = item[('color_aug', f, s)] = torch.from_numpy(small)
        for s in range(4):
            K = self.K.copy()
            K[:2, :] *= self.size >> s
            item[('K', s)] = torch.from_numpy(K)
            item[('inv_K', s)] = torch.from_numpy(np.linalg.pinv(K))
        return item


def train(clips, K, size, record, batch=2, epochs=2, scales=(0, 1, 2, 3)):
    models = {'encoder': Encoder(), 'pose_encoder': Encoder(frames=2)}
    models['depth'] = DispDecoder(models['encoder'].channels, scales)
    models['pose'] = PoseDecoder(models['pose_encoder'].channels)
    params = []
    for model in models.values():
        initialize(model)
        params += list(model.parameters())
    optimizer = optim.Adam(params, 1e-3)
    scheduler = optim.lr_scheduler.StepLR(optimizer, 1, 0.1)
    data = Clips(clips, K, size)
    loader = DataLoader(data, batch, False, num_workers=0, pin_memory=True, drop_last=True)
    ssim = SSIMDistance()
    backproject, project = Backproject(batch, size, size), Project(batch, size, size)

    def photometric(pred, target):
        l1 = torch.abs(target - pred).mean(1, True)
        return 0.85 * ssim(pred, target).mean(1, True) + 0.15 * l1

    for epoch in range(epochs):
        for model in models.values():
            model.train()
        for inputs in loader:
            inputs = {k: v.to(torch.device('cpu')) for k, v in inputs.items()}
            outputs = models['depth'](models['encoder'](inputs['color_aug', 0, 0]))
            for f in (-1, 1):
                pair = [inputs['color_aug', f, 0], inputs['color_aug', 0, 0]][::-f]  # in time order
                axisangle, translation = models['pose'](models['pose_encoder'](torch.cat(pair, 1)))
                outputs['T', f] = pose_matrix(axisangle[:, 0], translation[:, 0], invert=f < 0)
            target, total, parts = inputs['color', 0, 0], 0, {}
            for s in scales:
                disp = F.interpolate(
                    outputs['disp', s], [size, size], mode='bilinear', align_corners=False)
                _, depth = disparity_to_depth(disp, 0.1, 100.0)
                points = backproject(depth, inputs['inv_K', 0])
                warped = []
                for f in (-1, 1):
                    where = project(points, inputs['K', 0], outputs['T', f])
                    source = inputs['color', f, 0]
                    warped.append(F.grid_sample(source, where, padding_mode='border'))
                reprojection = torch.cat([photometric(w, target) for w in warped], 1)
                unmoved = [photometric(inputs['color', f, 0], target) for f in (-1, 1)]
                identity = torch.cat(unmoved, 1)
                identity += torch.randn(identity.shape, device=identity.device) * 1e-5  # break ties
                best, choice = torch.min(torch.cat((identity, reprojection), dim=1), dim=1)
                if s == 0:
                    outputs['moved'] = (choice > identity.shape[1] - 1).float()
                d = outputs['disp', s]
                normalised = d / (d.mean(2, True).mean(3, True) + 1e-7)
                smooth = edge_aware_smoothness(normalised, inputs['color', 0, s])
                parts[f'loss/{s}'] = best.mean() + 1e-3 * smooth / (2 ** s)
                total += parts[f'loss/{s}']
            parts['loss'] = total / len(scales)
            optimizer.zero_grad()
            parts['loss'].backward()
            optimizer.step()
            record.append({k: v.item() for k, v in parts.items()})
            record.append(outputs['moved'].numpy().copy())
            record.append(outputs['T', -1].detach().numpy().copy())
        scheduler.step()
        for name, model in models.items():
            state = model.state_dict()
            record.append({name: t.detach().numpy().copy() for name, t in state.items()})
"""

DEPTH_STEPS = [
    ("            parts['loss'].backward()\n", "            grads = parts['loss'].backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
]


@contextlib.contextmanager
def default_dtype(lib, dtype):
    """``lib.set_default_dtype(dtype)`` for the block (the program's ``torch.zeros`` poses then
    have the dtype of its float64 images)."""
    saved = lib.get_default_dtype()
    lib.set_default_dtype(dtype)
    try:
        yield
    finally:
        lib.set_default_dtype(saved)


def test_monodepth2_trains_by_view_synthesis_as_torch():
    rng = np.random.default_rng(8001)
    # three frames of a smooth scene (a shifted pattern plus a little noise), 64x64 pixels
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32) / 64
    clips = []
    for _ in range(2):
        phase = rng.uniform(0, 2 * np.pi, 3)
        clip = {}
        for i in (-1, 0, 1):
            image = np.stack([0.5 + 0.4 * np.sin(6 * (xx + 0.03 * i) + 4 * yy + p) for p in phase])
            clip[i] = image + 0.02 * rng.standard_normal(image.shape)
        clips.append(clip)
    intrinsics = np.array([[0.58, 0, 0.5, 0], [0, 1.92, 0.5, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEPTH_SOURCE if lib is torch else ported_imports(port(DEPTH_SOURCE, DEPTH_STEPS))
        names = run_source(text, lib, initialize=initialize)
        with SharedDraws(lib, 8002), default_dtype(lib, lib.float64):
            names["train"](clips, intrinsics, 64, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


SUPCON_SOURCE = """
import math

import numpy as np
import torch
import torch.backends.cudnn as backends_cudnn
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F


class SupervisedContrastiveLoss(nn.Module):
    # features (batch, views, dim), L2-normalised; with labels: SupCon, without: SimCLR
    def __init__(self, temperature=0.07):
        super().__init__()
        self.tau = temperature

    def forward(self, features, labels=None):
        device = torch.device('cuda') if features.is_cuda else torch.device('cpu')
        batch, views = features.shape[0], features.shape[1]
        if labels is None:
            same = torch.eye(batch, dtype=torch.float32).to(device)
        else:
            column = labels.contiguous().view(-1, 1)
            same = torch.eq(column, column.T).float().to(device)
        every = torch.cat(torch.unbind(features, dim=1), dim=0)
        logits = torch.div(torch.matmul(every, every.T), self.tau)
        biggest, _ = torch.max(logits, dim=1, keepdim=True)
        logits = logits - biggest.detach()
        same = same.repeat(views, views)
        diagonal = torch.arange(batch * views).view(-1, 1).to(device)
        not_self = torch.scatter(torch.ones_like(same), 1, diagonal, 0)
        same = same * not_self
        log_prob = logits - torch.log((torch.exp(logits) * not_self).sum(1, keepdim=True))
        positives = same.sum(1)
        positives = torch.where(positives < 1e-6, 1, positives)
        mean_log_prob = (same * log_prob).sum(1) / positives
        return -(self.tau / 0.07) * mean_log_prob.view(views, batch).mean()


class Encoder(nn.Module):
    def __init__(self, feat_dim=6):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
            nn.AdaptiveAvgPool2d((1, 1)))
        self.head = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, feat_dim))

    def forward(self, x):
        return F.normalize(self.head(torch.flatten(self.body(x), 1)), dim=1)


class TwoViews:
    def __init__(self, augment):
        self.augment = augment

    def __call__(self, x):
        return [self.augment(x) for _ in range(2)]


def jitter(image):
    # a random 6x6 crop padded back to 8x8, flipped half the time
    top, left = np.random.randint(0, 3, size=2)
    out = np.zeros_like(image)
    out[:, top:top + 6, left:left + 6] = image[:, top:top + 6, left:left + 6]
    if np.random.rand() < 0.5:
        out = out[:, :, ::-1]
    out = np.ascontiguousarray(out)  # the flip's negative stride
    return torch.from_numpy(out)


class Pictures(torch.utils.data.Dataset):
    def __init__(self, pixels, labels, augment):
        self.pixels, self.labels, self.augment = pixels, labels, augment

    def __len__(self):
        return len(self.pixels)

    def __getitem__(self, i):
        return self.augment(self.pixels[i]), int(self.labels[i])


class Mean:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, value, n=1):
        self.sum, self.count = self.sum + value * n, self.count + n

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def set_lr(optimizer, lr):
    for group in optimizer.param_groups:
        group['lr'] = lr


def main(opt, record):
    pictures = Pictures(opt.images, opt.targets, TwoViews(jitter))
    loader = torch.utils.data.DataLoader(
        pictures, batch_size=opt.batch_size, shuffle=True, num_workers=0, pin_memory=True)
    model, criterion = Encoder(), SupervisedContrastiveLoss(temperature=opt.temp)
    initialize(model)
    if torch.cuda.is_available():
        backends_cudnn.benchmark = True
    optimizer = optim.SGD(model.parameters(), lr=opt.lr, momentum=0.9, weight_decay=1e-4)
    for epoch in range(opt.epochs):
        # cosine decay, after a linear warmup through the first epoch
        set_lr(optimizer, opt.lr * 0.5 * (1 + math.cos(math.pi * (epoch + 1) / opt.epochs)))
        model.train()
        meter = Mean()
        for idx, (views, labels) in enumerate(loader):
            if epoch == 0:
                progress = (idx + 1) / len(loader)
                set_lr(optimizer, 0.01 + progress * (opt.lr - 0.01))
            images = torch.cat([views[0], views[1]], dim=0)
            bsz = labels.shape[0]
            first, second = torch.split(model(images), [bsz, bsz], dim=0)
            features = torch.cat([first.unsqueeze(1), second.unsqueeze(1)], dim=1)
            loss = criterion(features, labels if opt.method == 'SupCon' else None)
            meter.update(loss.item(), bsz)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            lr = optimizer.param_groups[0]['lr']
            print('epoch {} [{}/{}] loss {:.3f} ({:.3f}) lr {:.4f}'.format(
                epoch + 1, idx + 1, len(loader), meter.sum / meter.count, meter.avg, lr))
        record.append(meter.avg)
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

SUPCON_STEPS = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.backends.cudnn as", "import retrograd.backends.cudnn as"),
    (
        "import torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
]


@pytest.mark.parametrize("method", ["SupCon", "SimCLR"])
def test_supcon_trains_two_crops_with_the_supervised_contrastive_loss_as_torch(
    method, capsys, monkeypatch
):
    rng = np.random.default_rng(8003)
    opt = types.SimpleNamespace(
        images=rng.uniform(0, 1, (8, 3, 8, 8)).astype(np.float32),
        targets=rng.integers(0, 3, 8), batch_size=4, temp=0.5, lr=0.05, epochs=2, method=method,
    )  # fmt: skip
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = SUPCON_SOURCE if lib is torch else ported_imports(port(SUPCON_SOURCE, SUPCON_STEPS))
        # the loader's shuffle: one seeded stream of permutations for both samplers
        shuffle = np.random.default_rng(8004)
        monkeypatch.setattr(
            sys.modules["retrograd.utils.data.sampler"] if lib is rg else torch,
            "randperm",
            lambda n, generator=None, lib=lib, shuffle=shuffle: lib.tensor(shuffle.permutation(n)),
        )
        np.random.seed(8004)  # the crops' and flips' draws
        run_source(text, lib, initialize=initialize)["main"](opt, record)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_backends_flags_import_as_torch_modules():
    """``import torch.backends.cudnn as cudnn`` (SupContrast's, and most classic training
    scripts') failed: ``retrograd.backends`` is a module whose ``cudnn`` was a namespace, not
    an importable submodule."""
    names = {}
    exec(
        "import retrograd.backends.cudnn as cudnn\n"
        "import retrograd.backends.cuda\n"
        "from retrograd.backends.mps import is_available\n"
        "from retrograd.backends import cudnn as same\n",
        names,
    )
    cudnn = names["cudnn"]
    assert cudnn is rg.backends.cudnn is names["same"]
    assert names["is_available"]() is torch.backends.mps.is_available() is False
    saved = cudnn.benchmark
    try:
        cudnn.benchmark = True
        assert rg.backends.cudnn.benchmark is True
    finally:
        cudnn.benchmark = saved
    assert names["retrograd"].backends.cuda is rg.backends.cuda
    assert hasattr(rg.backends.cuda.matmul, "allow_tf32")


POSE_SOURCE = """
import numpy as np
import torch
import torch.nn as nn


class WeightedHeatmapLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.mse = nn.MSELoss(size_average=True)  # the legacy spelling of reduction='mean'

    def forward(self, output, target, weight):
        b, joints = output.size(0), output.size(1)
        preds = output.reshape((b, joints, -1)).split(1, 1)
        truths = target.reshape((b, joints, -1)).split(1, 1)
        total = 0
        for j in range(joints):
            w = weight[:, j]
            total += 0.5 * self.mse(preds[j].squeeze().mul(w), truths[j].squeeze().mul(w))
        return total / joints


def argmax_joints(heatmaps):
    b, joints, _, w = heatmaps.shape
    flat = heatmaps.reshape((b, joints, -1))
    idx, peak = np.argmax(flat, 2).reshape((b, joints, 1)), np.amax(flat, 2).reshape((b, joints, 1))
    coords = np.tile(idx, (1, 1, 2)).astype(np.float32)
    coords[:, :, 0], coords[:, :, 1] = coords[:, :, 0] % w, np.floor(coords[:, :, 1] / w)
    return coords * np.tile(np.greater(peak, 0.0), (1, 1, 2)).astype(np.float32), peak


def pck(output, target, threshold=0.5):
    # the share of joints found within `threshold` of a tenth of the map's size
    pred, _ = argmax_joints(output)
    truth, _ = argmax_joints(target)
    scale = np.array([output.shape[3], output.shape[2]]) / 10
    dists = np.full((pred.shape[1], pred.shape[0]), -1.0, dtype=np.float32)
    for n in range(pred.shape[0]):
        for c in range(pred.shape[1]):
            if truth[n, c, 0] > 1 and truth[n, c, 1] > 1:
                dists[c, n] = np.linalg.norm(pred[n, c] / scale - truth[n, c] / scale)
    found = [(d[d != -1] < threshold).mean() for d in dists if (d != -1).any()]
    return (np.mean(found) if found else 0.0), len(found), pred


class DeconvPose(nn.Module):
    def __init__(self, joints=3, width=8):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width, momentum=0.1),
            nn.ReLU(inplace=True), nn.Conv2d(width, width, 3, 2, 1), nn.ReLU(inplace=True))
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(
                width, width, kernel_size=4, stride=2, padding=1, output_padding=0, bias=False),
            nn.BatchNorm2d(width, momentum=0.1), nn.ReLU(inplace=True))
        self.final = nn.Conv2d(width, joints, kernel_size=1, stride=1, padding=0)
        for m in self.deconv.modules():
            if isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1.0)
                nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, std=1e-3)
        nn.init.normal_(self.final.weight, std=1e-3)
        nn.init.constant_(self.final.bias, 0)

    def forward(self, x):
        return self.final(self.deconv(self.backbone(x)))


class Joints(torch.utils.data.Dataset):
    def __init__(self, images, joints, visible, image=32, heatmap=16, sigma=1):
        self.images, self.joints, self.visible = images, joints, visible
        self.image, self.heatmap, self.sigma = image, heatmap, sigma

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        target, weight = self.targets(self.joints[i], self.visible[i])
        meta = dict(image='frame_%03d.png' % i, joints=self.joints[i], joints_vis=self.visible[i],
                    score=1)
        arrays = self.images[i], target, weight
        return (*map(torch.from_numpy, arrays), meta)

    def targets(self, joints, visible):
        weight = visible[:, :1].astype(np.float32).copy()
        maps = np.zeros((len(joints), self.heatmap, self.heatmap), dtype=np.float32)
        reach, stride = 3 * self.sigma, self.image / self.heatmap
        ys, xs = np.mgrid[0:self.heatmap, 0:self.heatmap]
        for j, (x, y, _) in enumerate(joints):
            cx, cy = int(x / stride + 0.5), int(y / stride + 0.5)
            if min(cx, cy) - reach >= self.heatmap or max(cx, cy) + reach < 0:
                weight[j] = 0  # off the map
                continue
            if weight[j] > 0.5:
                near = (np.abs(xs - cx) <= reach) & (np.abs(ys - cy) <= reach)
                maps[j] = near * np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * self.sigma ** 2))
        return maps, weight


def main(images, joints, visible, record):
    model = DeconvPose()
    initialize(model)
    criterion = WeightedHeatmapLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [1], 0.1)
    data = Joints(images, joints, visible)
    loader = torch.utils.data.DataLoader(data, batch_size=2, shuffle=False)
    for epoch in range(2):
        scheduler.step()  # stepped first, as the older recipes do
        model.train()
        for batch, target, weight, meta in loader:
            output = model(batch)
            loss = criterion(output, target, weight)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            found, truth = output.detach().cpu().numpy(), target.detach().cpu().numpy()
            accuracy, counted, pred = pck(found, truth)
            record.append(loss.item())
            record.append(np.array([accuracy, counted]))
            record.append(pred * 4)
            record.append(meta['image'])
            shown = meta['joints'] * meta['joints_vis']
            record.append(shown.numpy())
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

POSE_STEPS = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
]


def test_simple_baselines_pose_trains_on_joint_heatmaps_as_torch():
    rng = np.random.default_rng(8005)
    images = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    joints = np.concatenate([rng.uniform(2, 30, (4, 3, 2)), np.zeros((4, 3, 1))], axis=2)
    joints = joints.astype(np.float32)
    joints[1, 2, :2] = (-20, 5)  # out of the image: its weight is zeroed
    visible = np.ones((4, 3, 3), dtype=np.float32)
    visible[2, 0] = 0  # not visible
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = POSE_SOURCE if lib is torch else ported_imports(port(POSE_SOURCE, POSE_STEPS))
        run_source(text, lib, initialize=initialize)["main"](images, joints, visible, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


VICREG_SOURCE = """
import math

import torch
from torch import nn, optim
from torch.nn import functional as F


class GatherAll(torch.autograd.Function):
    # every process's batch, gradients summed back to each one's own slice
    @staticmethod
    def forward(ctx, x):
        out = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(out, x)
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        stacked = torch.stack(grads)
        dist.all_reduce(stacked)
        return stacked[dist.get_rank()]


def off_diagonal(m):
    n = m.shape[0]
    return m.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


def mlp(spec, width_in):
    sizes = [width_in] + [int(s) for s in spec.split('-')]
    layers = []
    for a, b in zip(sizes[:-2], sizes[1:-1]):
        layers += [nn.Linear(a, b), nn.BatchNorm1d(b), nn.ReLU(True)]
    return nn.Sequential(*layers, nn.Linear(sizes[-2], sizes[-1], bias=False))


class VICReg(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten())
        self.projector = mlp(args.mlp, 8)
        self.dim = int(args.mlp.split('-')[-1])

    def forward(self, a, b):
        x, y = self.projector(self.backbone(a)), self.projector(self.backbone(b))
        invariance = F.mse_loss(x, y)
        x, y = torch.cat(GatherAll.apply(x), dim=0), torch.cat(GatherAll.apply(y), dim=0)
        x, y = x - x.mean(dim=0), y - y.mean(dim=0)
        std_x, std_y = torch.sqrt(x.var(dim=0) + 0.0001), torch.sqrt(y.var(dim=0) + 0.0001)
        variance = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2
        n = self.args.batch_size - 1
        covariance = sum(off_diagonal((t.T @ t) / n).pow_(2).sum().div(self.dim) for t in (x, y))
        a = self.args
        return a.sim_coeff * invariance + a.std_coeff * variance + a.cov_coeff * covariance


def is_bias_or_norm(p):
    return p.ndim == 1


class LARS(optim.Optimizer):
    # SGD with momentum whose step is scaled per tensor by eta * |w| / |update|
    def __init__(self, params, lr, weight_decay=0, momentum=0.9, eta=0.001, skip_decay=None,
                 skip_scaling=None):
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, eta=eta,
                        skip_decay=skip_decay, skip_scaling=skip_scaling)
        super().__init__(params, defaults=defaults)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group['params']:
                dp = p.grad
                if dp is None:
                    continue
                if group['skip_decay'] is None or not group['skip_decay'](p):
                    dp = dp.add(p, alpha=group['weight_decay'])
                if group['skip_scaling'] is None or not group['skip_scaling'](p):
                    w_norm, d_norm = torch.norm(p), torch.norm(dp)
                    one = torch.ones_like(w_norm)
                    ratio = torch.where(d_norm > 0, group['eta'] * w_norm / d_norm, one)
                    trust = torch.where(w_norm > 0.0, ratio, one)
                    dp = dp.mul(trust)
                state = self.state[p]
                if 'mu' not in state:
                    state['mu'] = torch.zeros_like(p)
                state['mu'].mul_(group['momentum']).add_(dp)
                p.add_(state['mu'], alpha=-group['lr'])


def schedule(args, steps_per_epoch, step, warmup_epochs=2):
    base = args.base_lr * args.batch_size / 256
    total, warm = args.epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    if step < warm:
        return base * step / warm
    q = 0.5 * (1 + math.cos(math.pi * (step - warm) / (total - warm)))
    return base * q + base * 0.001 * (1 - q)


def main_worker(args, loader, record):
    model = VICReg(args)
    initialize(model)
    optimizer = LARS(model.parameters(), lr=0, weight_decay=args.wd, skip_decay=is_bias_or_norm,
                     skip_scaling=is_bias_or_norm)
    scaler = torch.cuda.amp.GradScaler(init_scale=1.0, enabled=False)
    for epoch in range(args.epochs):
        for step, ((x, y), _labels) in enumerate(loader, start=len(loader) * epoch):
            lr = schedule(args, len(loader), step)
            for group in optimizer.param_groups:
                group['lr'] = lr
            optimizer.zero_grad()
            with torch.autocast('cpu', enabled=False):
                loss = model.forward(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            record.append([loss.item(), lr])
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
        record.append({i: s['mu'].numpy().copy() for i, s in enumerate(optimizer.state.values())})
"""

VICREG_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    def step(self):\n", "    def step(self, grads):\n"),
    ("                dp = p.grad\n", "                dp = p.grad(grads)\n"),
    (
        "            scaler.scale(loss).backward()\n            scaler.step(optimizer)\n",
        "            grads = scaler.scale(loss).backward()\n"
        "            scaler.step(optimizer, grads)\n",
    ),
]

DIST_STANDIN = types.SimpleNamespace(
    get_world_size=lambda: 1,
    get_rank=lambda: 0,
    all_gather=lambda output, x: output[0].copy_(x),
    all_reduce=lambda t: t,
)


def test_vicreg_trains_with_lars_through_the_gather_function_as_torch():
    rng = np.random.default_rng(8006)
    # (two views, label) batches of 8 images, as the loader of the two-crop transform gives them
    loader = [
        ((rng.standard_normal((8, 3, 8, 8)), rng.standard_normal((8, 3, 8, 8))), None)
        for _ in range(3)
    ]
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        args = types.SimpleNamespace(
            mlp="16-16-12", batch_size=8, base_lr=25.6, epochs=3, wd=1e-6, sim_coeff=25.0,
            std_coeff=25.0, cov_coeff=1.0,
        )  # fmt: skip
        batches = [((lib.tensor(x), lib.tensor(y)), label) for (x, y), label in loader]
        record = []
        text = VICREG_SOURCE if lib is torch else ported_imports(port(VICREG_SOURCE, VICREG_STEPS))
        names = run_source(text, lib, dist=DIST_STANDIN, initialize=initialize)
        with default_dtype(lib, lib.float64):
            names["main_worker"](args, batches, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


PSPNET_SOURCE = """
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class PyramidPooling(nn.Module):
    # the map averaged into 1x1, 2x2, 3x3 and 6x6 cells, each resized back and stacked on it
    def __init__(self, c_in, c_bin, bins):
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Sequential(nn.AdaptiveAvgPool2d(b), nn.Conv2d(c_in, c_bin, 1, bias=False),
                          nn.BatchNorm2d(c_bin), nn.ReLU(inplace=True))
            for b in bins)

    def forward(self, x):
        size = x.size()[2:]
        return torch.cat([x] + [F.interpolate(branch(x), size, mode='bilinear', align_corners=True)
                                for branch in self.branches], 1)


def block(c_in, c_out, stride=1, dilation=1):
    conv = nn.Conv2d(c_in, c_out, 3, stride, padding=dilation, dilation=dilation, bias=False)
    return nn.Sequential(conv,
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class PSPNet(nn.Module):
    def __init__(self, classes, zoom, criterion, dropout=0.0):
        super().__init__()
        self.zoom, self.criterion = zoom, criterion
        self.stem = nn.Sequential(block(3, 4, 2), block(4, 4, 2))
        self.stages = nn.Sequential(block(4, 8, 2), block(8, 8, dilation=2))
        self.ppm = PyramidPooling(8, 2, (1, 2, 3, 6))
        self.cls = nn.Sequential(block(16, 4), nn.Dropout2d(p=dropout), nn.Conv2d(4, classes, 1))
        self.aux = nn.Sequential(block(8, 4), nn.Dropout2d(p=dropout), nn.Conv2d(4, classes, 1))

    def forward(self, x, y=None):
        size = x.size()
        assert (size[2] - 1) % 8 == 0 and (size[3] - 1) % 8 == 0
        h, w = int((size[2] - 1) / 8 * self.zoom + 1), int((size[3] - 1) / 8 * self.zoom + 1)
        features = self.stages(self.stem(x))
        logits = self.cls(self.ppm(features))
        out = F.interpolate(logits, size=(h, w), mode='bilinear', align_corners=True)
        if not self.training:
            return out
        aux = F.interpolate(self.aux(features), size=(h, w), mode='bilinear', align_corners=True)
        return out.max(1)[1], self.criterion(out, y), self.criterion(aux, y)


class Running:
    def __init__(self):
        self.sum, self.count = 0, 0

    def update(self, value, n=1):
        self.sum, self.count = self.sum + value * n, self.count + n

    @property
    def avg(self):
        return self.sum / self.count


def intersection_union(pred, target, classes, ignore=255):
    pred, target = pred.reshape(-1).copy(), target.reshape(-1)
    pred[target == ignore] = ignore
    hit = pred[pred == target]
    count = lambda a: np.histogram(a, bins=classes, range=(0, classes - 1))[0]
    inter = count(hit)
    return inter, count(pred) + count(target) - inter, count(target)


def main_worker(args, loader, record):
    model = PSPNet(args.classes, args.zoom_factor, nn.CrossEntropyLoss(ignore_index=255))
    initialize(model)
    pretrained, fresh = [model.stem, model.stages], [model.ppm, model.cls, model.aux]
    groups = [dict(params=m.parameters(), lr=args.base_lr) for m in pretrained]
    groups += [dict(params=m.parameters(), lr=args.base_lr * 10) for m in fresh]
    optimizer = torch.optim.SGD(groups, lr=args.base_lr, momentum=0.9, weight_decay=1e-4)
    steps = args.epochs * len(loader)
    for epoch in range(args.epochs):
        model.train()
        loss_meter, inter_meter, union_meter = Running(), Running(), Running()
        for i, (x, y) in enumerate(loader):
            if args.zoom_factor != 8:  # the labels at the output's resolution
                h, w = (int((n - 1) / 8 * args.zoom_factor + 1) for n in y.size()[1:])
                y = F.interpolate(y.unsqueeze(1).float(), size=(h, w), mode='bilinear',
                                  align_corners=True).squeeze(1).long()
            pred, main_loss, aux_loss = model(x, y)
            loss = main_loss + 0.4 * aux_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            inter, union, _ = intersection_union(pred.numpy(), y.numpy(), args.classes)
            inter_meter.update(inter)
            union_meter.update(union)
            loss_meter.update(loss.item(), x.size(0))
            done = float(epoch * len(loader) + i + 1) / steps
            lr = args.base_lr * (1 - done) ** 0.9  # poly decay
            for k, group in enumerate(optimizer.param_groups):
                group['lr'] = lr if k < len(pretrained) else lr * 10
        iou = inter_meter.sum / (union_meter.sum + 1e-10)
        record.append([loss_meter.avg, float(np.mean(iou))])
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
        record.append(np.array([group['lr'] for group in optimizer.param_groups]))
    model.eval()
    with torch.no_grad():
        record.append(model(loader[0][0]).numpy())
"""

PSPNET_STEPS = [
    ("            loss.backward()\n", "            grads = loss.backward()\n"),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
    ("import torch\n", "import retrograd as torch\n"),
]


@pytest.mark.parametrize("zoom_factor", [8, 4])
def test_pspnet_trains_with_pyramid_pooling_and_aux_loss_as_torch(zoom_factor):
    rng = np.random.default_rng(8007)
    batches = []
    for _ in range(2):
        image = rng.standard_normal((2, 3, 17, 17)).astype(np.float32)
        label = rng.integers(0, 3, (2, 17, 17))
        label[label == 2] = 255  # ignored pixels
        batches.append((image, label))
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        args = types.SimpleNamespace(classes=2, zoom_factor=zoom_factor, base_lr=0.01, epochs=2)
        loader = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        record = []
        text = PSPNET_SOURCE if lib is torch else ported_imports(port(PSPNET_SOURCE, PSPNET_STEPS))
        run_source(text, lib, initialize=initialize)["main_worker"](args, loader, record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MOCO_SOURCE = """
import math
from functools import partial

import torch
import torch.nn as nn


class TinyResNet(nn.Module):
    def __init__(self, num_classes=10, zero_init_residual=False):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(8, num_classes, bias=True)

    def forward(self, x):
        return self.fc(self.features(x))


@torch.no_grad()
def gather_from_all(t):
    parts = [torch.ones_like(t) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(parts, t, async_op=False)
    return torch.cat(parts, dim=0)


def mlp(layers, d_in, d_hidden, d_out, last_bn=True):
    modules = []
    for i in range(layers):
        a, b = d_in if i == 0 else d_hidden, d_out if i == layers - 1 else d_hidden
        modules.append(nn.Linear(a, b, bias=False))
        if i < layers - 1:
            modules += [nn.BatchNorm1d(b), nn.ReLU(inplace=True)]
        elif last_bn:  # as SimCLR's projector, without learned scale and shift
            modules.append(nn.BatchNorm1d(b, affine=False))
    return nn.Sequential(*modules)


class MomentumContrast(nn.Module):
    def __init__(self, make_encoder, dim, mlp_dim, temperature):
        super().__init__()
        self.T = temperature
        self.base_encoder = make_encoder(num_classes=mlp_dim)
        self.momentum_encoder = make_encoder(num_classes=mlp_dim)
        width = self.base_encoder.fc.weight.shape[1]
        del self.base_encoder.fc, self.momentum_encoder.fc
        self.base_encoder.fc = mlp(2, width, mlp_dim, dim)
        self.momentum_encoder.fc = mlp(2, width, mlp_dim, dim)
        self.predictor = mlp(2, dim, mlp_dim, dim, last_bn=False)
        for base, slow in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            slow.data.copy_(base.data)
            slow.requires_grad = False  # moved only by the average

    @torch.no_grad()
    def follow(self, m):
        for base, slow in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            slow.data = slow.data * m + base.data * (1.0 - m)

    def contrast(self, q, k):
        q, k = nn.functional.normalize(q, dim=1), nn.functional.normalize(gather_from_all(k), dim=1)
        similarity = torch.einsum('nc,mc->nm', [q, k]) / self.T
        n = similarity.shape[0]
        labels = (torch.arange(n, dtype=torch.long) + n * torch.distributed.get_rank()).cuda()
        return nn.CrossEntropyLoss()(similarity, labels) * 2 * self.T

    def forward(self, x1, x2, m):
        q1, q2 = self.predictor(self.base_encoder(x1)), self.predictor(self.base_encoder(x2))
        with torch.no_grad():
            self.follow(m)
            k1, k2 = self.momentum_encoder(x1), self.momentum_encoder(x2)
        return self.contrast(q1, k2) + self.contrast(q2, k1)


def main_worker(args, loader, writer, record):
    make = partial(TinyResNet, zero_init_residual=True)
    model = MomentumContrast(make, args.dim, args.mlp_dim, args.t)
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, weight_decay=1e-6, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler(init_scale=1024.0)
    per_epoch = len(loader)
    for epoch in range(args.epochs):
        model.train()
        for i, (views, _) in enumerate(loader):
            progress = epoch + i / per_epoch
            if progress < 1:  # linear warmup, then a cosine
                lr = args.lr * progress
            else:
                lr = args.lr * 0.5 * (1.0 + math.cos(math.pi * (progress - 1) / (args.epochs - 1)))
            for group in optimizer.param_groups:
                group['lr'] = lr
            m = 1.0 - 0.5 * (1.0 + math.cos(math.pi * progress / args.epochs)) * (1.0 - args.m)
            views = [v.cuda(non_blocking=True) for v in views]
            with torch.cuda.amp.autocast(enabled=True):
                loss = model(views[0], views[1], m)
            writer.add_scalar('loss', loss.item(), epoch * per_epoch + i)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

MOCO_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            scaler.scale(loss).backward()\n            scaler.step(optimizer)\n",
        "            grads = scaler.scale(loss).backward()\n"
        "            scaler.step(optimizer, grads)\n",
    ),
]


def test_moco_v3_trains_its_momentum_encoder_as_torch(monkeypatch):
    rng = np.random.default_rng(8008)
    views = [
        (rng.standard_normal((4, 3, 8, 8)), rng.standard_normal((4, 3, 8, 8))) for _ in range(3)
    ]
    records, written = [], []
    initialize = initializer()
    for lib in (torch, rg):
        # one process: the distributed calls of a world of one
        monkeypatch.setattr(lib.distributed, "get_rank", lambda: 0)
        monkeypatch.setattr(lib.distributed, "get_world_size", lambda: 1)
        monkeypatch.setattr(
            lib.distributed, "all_gather", lambda out, t, async_op=False: out[0].copy_(t)
        )
        monkeypatch.setattr(lib.Tensor, "cuda", lambda self, *a, **k: self, raising=False)
        args = types.SimpleNamespace(dim=6, mlp_dim=12, t=1.0, lr=0.6, epochs=2, m=0.99)
        loader = [([lib.tensor(a), lib.tensor(b)], None) for a, b in views]
        record, scalars = [], []
        writer = types.SimpleNamespace(
            add_scalar=lambda name, value, step, into=scalars: into.append(value)
        )
        text = MOCO_SOURCE if lib is torch else port(MOCO_SOURCE, MOCO_STEPS)
        with default_dtype(lib, lib.float64):
            run_source(text, lib, initialize=initialize)["main_worker"](
                args, loader, writer, record
            )
        records.append(record)
        written.append(scalars)
    np.testing.assert_allclose(written[1], written[0], rtol=1e-10)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)
