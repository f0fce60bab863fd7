# ruff: noqa: E501  (the embedded scripts and the port steps replacing their import lines run past 100 columns)
"""Programs written here in the style of five research repositories and of likelihood fits,
each run under torch and, ported, under retrograd from the same weights and draws (the
harness: ``tests/real_ports.py``; continued from ``tests/test_real_ports_63.py``):

- a surrogate-gradient spiking network in the style of fzenke/spytorch: a
  ``torch.autograd.Function`` with a class attribute ``scale``, ``out[v > 0] = 1.0`` on
  ``torch.zeros_like``, a fast-sigmoid ``backward``, ``Spike.apply``, weights from
  ``torch.empty(..., requires_grad=True)`` and ``torch.nn.init.normal_`` (overwritten with
  shared values), ``torch.einsum("abc,cd->abd", (inputs, w))`` with a tuple of operands, a
  detached reset, leaky integrate-and-fire loops stacked by ``torch.stack(..., dim=1)``,
  ``torch.max(trace, 1)``, ``nn.LogSoftmax``/``nn.NLLLoss`` with spike-count penalties, and
  Adam over plain tensors; input spikes from ``torch.rand`` (one seeded stream in both runs).
- AdaIN style transfer in the style of naoto0804/pytorch-AdaIN: ``nn.ReflectionPad2d((1, 1,
  1, 1))``, ``nn.Upsample(scale_factor=2, mode="nearest")``, ``MaxPool2d(...,
  ceil_mode=True)``, stages sliced from ``list(encoder.children())``, a frozen encoder
  (``param.requires_grad = False``, ``assert target.requires_grad is False``),
  ``feat.view(n, c, -1).var(dim=2)``, ``.expand(size)`` of ``torch.Size`` values, and a style
  blend started from ``torch.FloatTensor(1, c, h, w).zero_()``.
- a DeepSDF-like auto-decoder in the style of facebookresearch/DeepSDF: layers made by
  ``setattr(..., nn.utils.weight_norm(nn.Linear(...)))`` and found by ``getattr``, the input
  concatenated back at a skip layer, ``nn.Embedding(..., max_norm=...)`` codes renormalized by
  the lookups, ``torch.nn.init.normal_(codes.weight.data, ...)``, two Adam groups with step
  schedules written into ``param_groups``, ``torch.chunk`` of samples and of
  ``scene.unsqueeze(-1).repeat(1, n).view(-1)``, gradients accumulated over the chunks
  (ported as a sum of ``Gradients``), ``torch.clamp``, ``L1Loss(reduction="sum")``, the code
  penalty ``torch.sum(torch.norm(codes, dim=1))``, and ``clip_grad_norm_`` of the decoder only.
- a relation network in the style of kimhc6028/relational-networks, binary and ternary:
  coordinates in ``torch.FloatTensor(bs, 4, 2)`` filled by ``.data.copy_(torch.from_numpy(...))``
  of a float64 array, ``Variable``, every pair and triple of objects by
  ``torch.unsqueeze``/``repeat``/``torch.cat`` over 4-d and 5-d tensors, inputs written by
  ``.data.resize_(size).copy_(values)``, ``output.data.max(1)[1]``,
  ``pred.eq(target.data).cpu().sum()`` and ``hits * 100.0 / len(target)``.
- DeepDream in the style of eriklindernoren/PyTorch-Deep-Dream over a small VGG
  ``features``: ``Variable(torch.FloatTensor(image), requires_grad=True)``, ``norm()``
  ascended with the step ``lr / np.abs(image.grad.data.numpy()).mean()``, ``image.data +=``,
  ``image.data = keep_in_range(image.data)`` with ``image_tensor[0, c] = torch.clamp(...)``,
  octaves by ``scipy.ndimage.zoom``, and ``print(model)``.
- likelihood fits from the distributions' boundary values: a policy gradient of a Bernoulli
  policy whose head starts at zero (every logit 0), a Dirichlet fitted from ``torch.ones``, a
  Gamma from shape 1, and a binomial GLM from zero weights under LBFGS.

Regressions guarded: at a zero logit, ``Bernoulli.log_prob``/``entropy``,
``ContinuousBernoulli.log_prob``, ``Binomial.log_prob`` and ``Geometric.entropy`` took
one-sided gradients of ``clamp(min=0) + log1p(exp(-|x|))`` (``-value`` where torch's is
``sigmoid(0) - value``), so a policy started from zero logits trained differently from its
first step; and ``Gamma``/``Chi2``/``Beta``/``Dirichlet.log_prob`` cut the gradient of
``xlogy(c - 1, x)`` at a concentration of exactly 1, so a fit from ``torch.ones`` got a wrong
first gradient.
"""

from __future__ import annotations

import argparse
import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SNN_SOURCE = """
import torch
import torch.nn as nn
import numpy as np

n_in, n_hid, n_out, n_t, batch = 10, 8, 2, 10, 6
dt, tau_syn, tau_mem = 1e-3, 5e-3, 10e-3
syn_decay = float(np.exp(-dt / tau_syn))
mem_decay = float(np.exp(-dt / tau_mem))

# Poisson-like input: each input fires with probability rate * dt per step
x_data = torch.zeros((batch, n_t, n_in), dtype=torch.float)
x_data[torch.rand((batch, n_t, n_in)) < 60 * dt] = 1.0
y_data = torch.tensor(1 * (np.random.rand(batch) < 0.5))

w1 = torch.empty((n_in, n_hid), dtype=torch.float, requires_grad=True)
torch.nn.init.normal_(w1, mean=0.0, std=7 * (1 - mem_decay) / np.sqrt(n_in))
w2 = torch.empty((n_hid, n_out), dtype=torch.float, requires_grad=True)
torch.nn.init.normal_(w2, mean=0.0, std=7 * (1 - mem_decay) / np.sqrt(n_hid))
print("init done")


class Spike(torch.autograd.Function):
    # Heaviside forward, fast-sigmoid surrogate derivative backward
    scale = 100.0

    @staticmethod
    def forward(ctx, v):
        ctx.save_for_backward(v)
        fired = torch.zeros_like(v)
        fired[v > 0] = 1.0
        return fired

    @staticmethod
    def backward(ctx, upstream):
        (v,) = ctx.saved_tensors
        return upstream.clone() / (Spike.scale * torch.abs(v) + 1.0) ** 2


spike = Spike.apply


def simulate(inputs):
    drive = torch.einsum("abc,cd->abd", (inputs, w1))
    syn = torch.zeros((batch, n_hid))
    mem = torch.zeros((batch, n_hid))
    mems, spikes = [], []
    for t in range(n_t):
        out = spike(mem - 1.0)
        reset = out.detach()  # no gradient through the reset
        syn, mem = syn_decay * syn + drive[:, t], (mem_decay * mem + syn) * (1.0 - reset)
        mems.append(mem)
        spikes.append(out)
    spikes = torch.stack(spikes, dim=1)
    drive2 = torch.einsum("abc,cd->abd", (spikes, w2))
    flt, readout, trace = torch.zeros((batch, n_out)), torch.zeros((batch, n_out)), []
    for t in range(n_t):
        readout = mem_decay * readout + flt
        flt = syn_decay * flt + drive2[:, t]
        trace.append(readout)
    return torch.stack(trace, dim=1), spikes


def train(x, y, lr=1e-3, epochs=10):
    opt = torch.optim.Adam([w1, w2], lr=lr, betas=(0.9, 0.999))
    log_softmax, nll = nn.LogSoftmax(dim=1), nn.NLLLoss()
    history = []
    for epoch in range(epochs):
        trace, spikes = simulate(x)
        peak, _ = torch.max(trace, 1)
        activity = 1e-4 * torch.sum(spikes) + 1e-5 * torch.mean(torch.sum(torch.sum(spikes, dim=0), dim=0) ** 2)
        loss_val = nll(log_softmax(peak), y) + activity
        opt.zero_grad()
        loss_val.backward()
        opt.step()
        history.append(loss_val.item())
        record.append(float(spikes.sum()))
    return history


def accuracy(x, y):
    trace, _ = simulate(x)
    _, guess = torch.max(torch.max(trace, 1)[0], 1)
    return np.mean((y == guess).detach().cpu().numpy())
"""

SNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss_val.backward()\n        opt.step()\n",
        "        grads = loss_val.backward()\n        opt.step(grads)\n",
    ),
]


def test_surrogate_gradient_snn_trains_as_torch(capsys):
    rng = np.random.default_rng(6401)
    w1 = (rng.standard_normal((10, 8)) * 0.7).astype(np.float32)
    w2 = (rng.standard_normal((8, 2)) * 0.5).astype(np.float32)
    records, logs = [], []
    for lib in (torch, rg):
        record = []
        np.random.seed(6401)
        text = SNN_SOURCE if lib is torch else port(SNN_SOURCE, SNN_STEPS)
        with SharedDraws(lib, 6401):
            names = run_source(text, lib, record=record)
        # (torch's and retrograd's ``normal_`` draw different numbers: both start from these)
        with lib.no_grad():
            names["w1"].copy_(lib.tensor(w1))
            names["w2"].copy_(lib.tensor(w2))
        record.append(names["train"](names["x_data"], names["y_data"], lr=2e-2, epochs=4))
        record.append(float(names["accuracy"](names["x_data"], names["y_data"])))
        record.append(
            {"w1": names["w1"].detach().numpy().copy(), "w2": names["w2"].detach().numpy().copy()}
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] == "init done\n"
    assert records[0][0] > 0  # the hidden layer spikes
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


ADAIN_SOURCE = """
import torch
import torch.nn as nn


def channel_stats(feat, eps=1e-5):
    n, c = feat.size()[:2]
    var = feat.view(n, c, -1).var(dim=2) + eps
    return feat.view(n, c, -1).mean(dim=2).view(n, c, 1, 1), var.sqrt().view(n, c, 1, 1)


def adain(content, style):
    size = content.size()
    s_mean, s_std = channel_stats(style)
    c_mean, c_std = channel_stats(content)
    normalized = (content - c_mean.expand(size)) / c_std.expand(size)
    return normalized * s_std.expand(size) + s_mean.expand(size)


encoder = nn.Sequential(
    nn.Conv2d(3, 3, 1),
    nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(3, 4, 3), nn.ReLU(),
    nn.MaxPool2d(2, 2, 0, ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(4, 6, 3), nn.ReLU(),
    nn.MaxPool2d(2, 2, 0, ceil_mode=True),
    nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(6, 8, 3), nn.ReLU(),
)

decoder = nn.Sequential(
    nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(8, 6, 3), nn.ReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(6, 4, 3), nn.ReLU(),
    nn.Upsample(scale_factor=2, mode="nearest"),
    nn.ReflectionPad2d((1, 1, 1, 1)), nn.Conv2d(4, 3, 3),
)


class StyleNet(nn.Module):
    def __init__(self, enc, dec):
        super().__init__()
        parts = list(enc.children())
        self.stage1, self.stage2, self.stage3 = nn.Sequential(*parts[:4]), nn.Sequential(*parts[4:8]), nn.Sequential(*parts[8:])
        self.decoder = dec
        self.mse = nn.MSELoss()
        for stage in (self.stage1, self.stage2, self.stage3):
            for param in stage.parameters():
                param.requires_grad = False

    def features(self, x):
        feats = []
        for stage in (self.stage1, self.stage2, self.stage3):
            x = stage(x)
            feats.append(x)
        return feats

    def stat_loss(self, out, target):
        assert target.requires_grad is False
        o_mean, o_std = channel_stats(out)
        t_mean, t_std = channel_stats(target)
        return self.mse(o_mean, t_mean) + self.mse(o_std, t_std)

    def forward(self, content, style, weight=1.0):
        style_feats = self.features(style)
        content_feat = self.features(content)[-1]
        t = weight * adain(content_feat, style_feats[-1]) + (1 - weight) * content_feat
        out_feats = self.features(self.decoder(t))
        loss_c = self.mse(out_feats[-1], t.detach())
        loss_s = sum(self.stat_loss(o, s.detach()) for o, s in zip(out_feats, style_feats))
        return loss_c, loss_s


def set_lr(optimizer, step):
    for group in optimizer.param_groups:
        group["lr"] = args.lr / (1.0 + args.lr_decay * step)


def blend_styles(content, styles, weights):
    feat = encoder(content)
    style_feats = encoder(styles)
    _, c, h, w = feat.size()
    mixed = torch.FloatTensor(1, c, h, w).zero_().to(device)
    mixed_all = adain(feat.expand(styles.size(0), c, h, w), style_feats)
    for i, weight in enumerate(weights):
        mixed = mixed + weight * mixed_all[i : i + 1]
    return decoder(mixed)


def main(contents, styles, probe_content, probe_style):
    initialize(encoder)
    initialize(decoder)
    net = StyleNet(encoder, decoder).to(device)
    net.train()
    optimizer = torch.optim.Adam(net.decoder.parameters(), lr=args.lr)
    for step in range(args.max_iter + 1):
        set_lr(optimizer, step)
        loss_c, loss_s = net(next(contents).to(device), next(styles).to(device))
        loss = args.content_weight * loss_c + args.style_weight * loss_s
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append([loss_c.item(), loss_s.item(), loss.item()])
        print("step", step, "lr", optimizer.param_groups[0]["lr"])
    with torch.no_grad():
        styles_pair = torch.cat([probe_style, probe_style.flip(3)])
        record.append(blend_styles(probe_content, styles_pair, [0.3, 0.7]).numpy().copy())
    record.append({name: t.numpy().copy() for name, t in decoder.state_dict().items()})
"""

ADAIN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_adain_style_transfer_trains_as_torch(capsys):
    rng = np.random.default_rng(6402)
    contents = rng.uniform(size=(3, 2, 3, 8, 8)).astype(np.float32)
    styles = rng.uniform(size=(3, 2, 3, 8, 8)).astype(np.float32)
    test_content = rng.uniform(size=(1, 3, 8, 8)).astype(np.float32)
    test_style = rng.uniform(size=(1, 3, 8, 8)).astype(np.float32)
    args = argparse.Namespace(
        lr=1e-3, lr_decay=5e-5, max_iter=2, style_weight=10.0, content_weight=1.0
    )
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = ADAIN_SOURCE if lib is torch else port(ADAIN_SOURCE, ADAIN_STEPS)
        names = run_source(
            text, lib, record=record, initialize=initialize, args=args, device=lib.device("cpu")
        )
        names["main"](
            iter([lib.tensor(c) for c in contents]),
            iter([lib.tensor(s) for s in styles]),
            lib.tensor(test_content),
            lib.tensor(test_style),
        )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


DEEPSDF_SOURCE = """
import torch
import torch.nn as nn


class SDFDecoder(nn.Module):
    # an MLP on [code, xyz]; the input is concatenated back before layer `skip_at`
    def __init__(self, code_dim, widths, skip_at):
        super().__init__()
        sizes = [code_dim + 3] + widths + [1]
        self.n_layers, self.skip_at = len(sizes) - 1, skip_at
        for i in range(self.n_layers):
            width_out = sizes[i + 1] - (code_dim + 3 if i + 1 == skip_at else 0)
            setattr(self, "fc" + str(i), nn.utils.weight_norm(nn.Linear(sizes[i], width_out)))
        self.act = nn.ReLU()
        self.out_act = nn.Tanh()

    def forward(self, inputs):
        x = inputs
        for i in range(self.n_layers):
            if i == self.skip_at:
                x = torch.cat([x, inputs], 1)
            x = getattr(self, "fc" + str(i))(x)
            if i < self.n_layers - 1:
                x = self.act(x)
        return self.out_act(x)


class StepSchedule:
    def __init__(self, start, every, factor):
        self.start, self.every, self.factor = start, every, factor

    def at(self, epoch):
        return self.start * self.factor ** (epoch // self.every)


def train(cfg, dataset, epochs):
    decoder = SDFDecoder(cfg["code"], [8, 8, 8], skip_at=2)
    initialize(decoder)
    codes = nn.Embedding(len(dataset), cfg["code"], max_norm=cfg["code_bound"])
    torch.nn.init.normal_(codes.weight.data, 0.0, 1.0 / cfg["code"])
    initialize(codes)
    schedules = [StepSchedule(0.005, 2, 0.5), StepSchedule(0.01, 2, 0.5)]
    optimizer = torch.optim.Adam([
        {"params": decoder.parameters(), "lr": schedules[0].at(0)},
        {"params": codes.parameters(), "lr": schedules[1].at(0)},
    ])
    l1 = nn.L1Loss(reduction="sum")
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, shuffle=False)
    clamp = cfg["clamp"]
    for epoch in range(epochs):
        decoder.train()
        for group, schedule in zip(optimizer.param_groups, schedules):
            group["lr"] = schedule.at(epoch)
        for samples, scene in loader:
            per_scene = samples.shape[1]
            samples = samples.reshape(-1, 4)
            total = samples.shape[0]
            xyz, target = samples[:, 0:3], torch.clamp(samples[:, 3].unsqueeze(1), -clamp, clamp)
            owners = torch.chunk(scene.unsqueeze(-1).repeat(1, per_scene).view(-1), 2)
            xyz, target = torch.chunk(xyz, 2), torch.chunk(target, 2)
            optimizer.zero_grad()
            epoch_loss = 0.0
            for part in range(2):
                batch_codes = codes(owners[part])
                pred = torch.clamp(decoder(torch.cat([batch_codes, xyz[part]], dim=1)), -clamp, clamp)
                part_loss = l1(pred, target[part]) / total
                part_loss = part_loss + cfg["reg"] * torch.sum(torch.norm(batch_codes, dim=1)) / total
                part_loss.backward()
                epoch_loss += part_loss.item()
            torch.nn.utils.clip_grad_norm_(decoder.parameters(), 0.5)
            optimizer.step()
            record.append(epoch_loss)
        print("epoch", epoch, "mean code norm {:.5f}".format(torch.mean(torch.norm(codes.weight.data.detach(), dim=1)).item()))
    record.append({name: t.detach().numpy().copy() for name, t in decoder.state_dict().items()})
    record.append(codes.weight.detach().numpy().copy())
"""

DEEPSDF_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            optimizer.zero_grad()\n",
        "            optimizer.zero_grad()\n            grads = None\n",
    ),
    (
        "                part_loss.backward()\n",
        "                part_grads = part_loss.backward()\n                grads = part_grads if grads is None else grads + part_grads\n",
    ),
    (
        "torch.nn.utils.clip_grad_norm_(decoder.parameters(), 0.5)",
        "torch.nn.utils.clip_grad_norm_(grads, decoder.parameters(), 0.5)",
    ),
    ("            optimizer.step()\n", "            optimizer.step(grads)\n"),
]


def test_deepsdf_auto_decoder_trains_as_torch(capsys):
    rng = np.random.default_rng(6403)
    num_scenes, samples = 4, 6
    xyz = rng.uniform(-1, 1, size=(num_scenes, samples, 3))
    radii = rng.uniform(0.3, 0.8, size=(num_scenes, 1))
    sdf = np.linalg.norm(xyz, axis=2) - radii  # spheres, some samples past the clamp
    sdf_samples = np.concatenate([xyz, sdf[..., None]], axis=2).astype(np.float32)
    # (a small code bound, so that max_norm renormalizes codes in the lookups)
    cfg = {"code": 4, "code_bound": 0.4, "clamp": 0.3, "reg": 1e-1}
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = DEEPSDF_SOURCE if lib is torch else port(DEEPSDF_SOURCE, DEEPSDF_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        dataset = lib.utils.data.TensorDataset(lib.tensor(sdf_samples), lib.arange(num_scenes))
        names["train"](cfg, dataset, 3)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


RELATION_NETWORK_SOURCE = """
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn import functional as F
from torch.autograd import Variable as V


class RelationNet(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.ternary = args.relation_type == "ternary"
        self.conv = nn.Sequential(
            nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
            nn.Conv2d(4, 4, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
            nn.Conv2d(4, 4, 3, stride=2, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
        )
        group = 3 if self.ternary else 2
        self.g = nn.Sequential(nn.Linear(group * 6 + 5, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
        self.f1, self.f2 = nn.Linear(16, 16), nn.Linear(16, 10)
        # each object's (x, y) cell position, written once as a float64 array
        cells = np.array([[i // 2, i % 2] for i in range(4)], dtype=np.float64) - 0.5
        self.coords = V(torch.FloatTensor(args.batch_size, 4, 2))
        self.coords.data.copy_(torch.from_numpy(np.broadcast_to(cells, (args.batch_size, 4, 2)).copy()))
        self.optimizer = optim.Adam(params=self.parameters(), lr=args.lr)

    def forward(self, img, question):
        x = self.conv(img)
        b, c, h, w = x.size()
        objects = torch.cat([x.view(b, c, h * w).permute(0, 2, 1), self.coords], 2)
        n = h * w
        if self.ternary:
            q = torch.unsqueeze(torch.unsqueeze(torch.unsqueeze(question, 1), 2), 3).repeat(1, n, n, n, 1)
            a = torch.unsqueeze(torch.unsqueeze(objects, 1), 2).repeat(1, n, n, 1, 1)
            bb = torch.unsqueeze(torch.unsqueeze(objects, 1), 3).repeat(1, n, 1, n, 1)
            cc = torch.unsqueeze(torch.unsqueeze(objects, 2), 3).repeat(1, 1, n, n, 1)
            tuples = torch.cat([a, bb, cc, q], 4).view(b * n * n * n, -1)
        else:
            q = torch.unsqueeze(torch.unsqueeze(question, 1), 2).repeat(1, n, n, 1)
            left = torch.unsqueeze(objects, 1).repeat(1, n, 1, 1)
            right = torch.unsqueeze(objects, 2).repeat(1, 1, n, 1)
            tuples = torch.cat([left, right, q], 3).view(b * n * n, -1)
        summed = self.g(tuples).view(b, -1, 16).sum(1)
        x = F.dropout(F.relu(self.f1(summed)), p=0.0)
        return F.log_softmax(self.f2(x), dim=1)

    def train_on(self, img, question, target):
        self.optimizer.zero_grad()
        output = self(img, question)
        loss = F.nll_loss(output, target)
        loss.backward()
        self.optimizer.step()
        pred = output.data.max(1)[1]
        hits = pred.eq(target.data).cpu().sum()
        return hits * 100.0 / len(target), loss


input_img = torch.FloatTensor(4, 3, 20, 20)
input_qst = torch.FloatTensor(4, 5)
label = torch.LongTensor(4)


def load(batch):
    img = torch.from_numpy(np.stack([item[0] for item in batch]))
    qst = torch.from_numpy(np.stack([item[1] for item in batch]))
    ans = torch.from_numpy(np.array([item[2] for item in batch]))
    for target, values in ((input_img, img), (input_qst, qst), (label, ans)):
        target.data.resize_(values.size()).copy_(values)


def main(relational, plain, relational_eval, plain_eval):
    model = RelationNet(args)
    initialize(model)
    for epoch in range(args.epochs):
        random.shuffle(relational)
        random.shuffle(plain)
        model.train()
        for data in (relational, plain):
            for start in range(0, len(data), args.batch_size):
                load(data[start : start + args.batch_size])
                accuracy, loss = model.train_on(input_img, input_qst, label)
                record.append([float(accuracy), loss.item()])
        model.eval()
        for data in (relational_eval, plain_eval):
            load(data)
            with torch.no_grad():
                output = model(input_img, input_qst)
            print("epoch", epoch, "test accuracy", float(output.data.max(1)[1].eq(label.data).cpu().sum()) * 100.0 / len(label))
    record.append({name: t.detach().numpy().copy() for name, t in model.state_dict().items()})
"""

RELATION_NETWORK_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
]


def test_relation_network_trains_as_torch(capsys):
    rng = np.random.default_rng(6404)

    def dataset(n):
        return [
            (
                rng.uniform(size=(3, 20, 20)).astype(np.float32),
                rng.integers(0, 2, 5).astype(np.float32),
                int(rng.integers(0, 10)),
            )
            for _ in range(n)
        ]

    rel_train, norel_train, rel_test, norel_test = dataset(4), dataset(4), dataset(4), dataset(4)
    records, logs = [], []
    initialize = initializer()
    for relation_type in ("binary", "ternary"):
        args = argparse.Namespace(
            batch_size=4,
            lr=1e-3,
            epochs=2 if relation_type == "binary" else 1,  # (a ternary pass is 4x the pairs)
            relation_type=relation_type,
        )
        for lib in (torch, rg):
            record = []
            random.seed(6404)
            text = RELATION_NETWORK_SOURCE
            text = text if lib is torch else port(text, RELATION_NETWORK_STEPS)
            text = text if lib is torch else text.replace("from torch.", "from retrograd.")
            names = run_source(
                text, lib, record=record, initialize=initialize, args=args, random=random
            )
            names["main"](list(rel_train), list(norel_train), rel_test, norel_test)
            records.append(record)
            logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and logs[3] == logs[2]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
    assert_records_agree(records[3], records[2], rtol=1e-4, atol=1e-5)


DEEP_DREAM_SOURCE = """
import numpy as np
import scipy.ndimage as nd
import torch
import torch.nn as nn
from torch.autograd import Variable as Var

MEAN = np.array([0.485, 0.456, 0.406])
STD = np.array([0.229, 0.224, 0.225])


def keep_in_range(image_tensor):
    # clamp each channel to the values a [0, 1] pixel takes after normalization
    for ch in range(3):
        m, s = MEAN[ch], STD[ch]
        image_tensor[0, ch] = torch.clamp(image_tensor[0, ch], -m / s, (1 - m) / s)
    return image_tensor


def ascend(image, model, steps, lr):
    image = Var(torch.FloatTensor(image), requires_grad=True)
    for _ in range(steps):
        model.zero_grad()
        activation = model(image)
        loss = activation.norm()
        loss.backward()
        scale = np.abs(image.grad.data.cpu().numpy()).mean()
        image.data += (lr / scale) * image.grad.data
        image.data = keep_in_range(image.data)
        image.grad.data.zero_()
        record.append(loss.item())
    return image.data.cpu().numpy()


def dream(image, model, steps, lr, scale, octaves):
    pyramid = [image]
    for _ in range(octaves - 1):
        pyramid.append(nd.zoom(pyramid[-1], (1, 1, 1 / scale, 1 / scale), order=1))
    detail = np.zeros_like(pyramid[-1])
    for level in reversed(pyramid):
        if detail.shape != level.shape:
            factors = np.array(level.shape) / np.array(detail.shape)
            detail = nd.zoom(detail, factors, order=1)
        dreamed = ascend(level + detail, model, steps, lr)
        detail = dreamed - level
    return dreamed


def main(image, args):
    net = Features()
    initialize(net)
    layers = list(net.features.children())
    model = nn.Sequential(*layers[: args.at_layer + 1])
    print(model)
    start = preprocess(image).unsqueeze(0).cpu().data.numpy()
    out = dream(start, model, args.iterations, args.lr, args.octave_scale, args.num_octaves)
    record.append(out)
"""

DEEP_DREAM_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    (
        "        loss.backward()\n        scale = np.abs(image.grad.data.cpu().numpy()).mean()\n",
        "        grads = loss.backward()\n        scale = np.abs(image.grad(grads).data.cpu().numpy()).mean()\n",
    ),
    ("(lr / scale) * image.grad.data", "(lr / scale) * image.grad(grads).data"),
    ("        image.grad.data.zero_()\n", ""),
]


def test_deep_dream_as_torch(capsys):
    rng = np.random.default_rng(6405)
    image = rng.uniform(size=(12, 12, 3)).astype(np.float32)
    args = argparse.Namespace(iterations=2, at_layer=4, lr=0.01, octave_scale=1.4, num_octaves=3)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []

        class Features(lib.nn.Module):  # a small VGG's ``features`` for torchvision's
            def __init__(self, nn=lib.nn):
                super().__init__()
                self.features = nn.Sequential(
                    nn.Conv2d(3, 4, 3, padding=1),
                    nn.ReLU(inplace=True),
                    nn.Conv2d(4, 4, 3, padding=1),
                    nn.ReLU(inplace=True),
                    nn.MaxPool2d(kernel_size=2, stride=2),
                    nn.Conv2d(4, 6, 3, padding=1),
                    nn.ReLU(inplace=True),
                )

        def preprocess(image, lib=lib):  # the ``transforms.Compose`` of ToTensor and Normalize
            tensor = lib.tensor(image.transpose(2, 0, 1).copy())
            mean = lib.tensor(np.array([0.485, 0.456, 0.406], dtype=np.float32)).view(3, 1, 1)
            std = lib.tensor(np.array([0.229, 0.224, 0.225], dtype=np.float32)).view(3, 1, 1)
            return (tensor - mean) / std

        text = DEEP_DREAM_SOURCE if lib is torch else port(DEEP_DREAM_SOURCE, DEEP_DREAM_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(
            text,
            lib,
            record=record,
            initialize=initialize,
            Features=Features,
            preprocess=preprocess,
        )
        names["main"](image, args)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0] and len(records[0]) == 7
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


FIT_BY_LIKELIHOOD_SOURCE = """
import torch
from torch import nn, optim
from torch.distributions import Bernoulli as Coin, Binomial as Counts, Dirichlet as Simplex, Gamma as Waits

tiny = float(np.finfo(np.float32).eps)


class CoinPolicy(nn.Module):
    # the head is zeroed, so every first logit is exactly 0 (a fair coin)
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def forward(self, obs):
        return self.head(self.body(obs)).squeeze(-1)


def run_policy_gradient(episodes):
    agent = CoinPolicy()
    initialize(agent)
    opt = optim.Adam(agent.parameters(), lr=1e-2)
    for obs, acts, gains in episodes:
        coin = Coin(logits=agent(obs))
        adv = torch.tensor(gains)
        adv = (adv - adv.mean()) / (adv.std() + tiny)
        objective = -(coin.log_prob(acts) * adv).sum() - 0.01 * coin.entropy().sum()
        opt.zero_grad()
        objective.backward()
        opt.step()
        record.append(objective.item())
    record.append({name: t.detach().numpy().copy() for name, t in agent.state_dict().items()})


def mle_simplex(points, steps):
    conc = nn.Parameter(torch.ones(points.shape[1]))  # the flat prior on the simplex
    opt = optim.Adam([conc], lr=0.05)
    for _ in range(steps):
        nll = -Simplex(conc).log_prob(points).mean()
        opt.zero_grad()
        nll.backward()
        opt.step()
        with torch.no_grad():
            conc.clamp_(min=1e-3)
        record.append(nll.item())
    record.append(conc.detach().numpy().copy())


def mle_waits(durations, steps):
    shape = nn.Parameter(torch.ones(()))  # shape 1: an exponential
    log_rate = nn.Parameter(torch.tensor(0.0))
    opt = optim.SGD([shape, log_rate], lr=0.05, momentum=0.9)
    for _ in range(steps):
        nll = -Waits(shape, log_rate.exp()).log_prob(durations).mean()
        opt.zero_grad()
        nll.backward()
        opt.step()
        record.append(nll.item())
    record.append([shape.item(), log_rate.item()])


def mle_counts(features, hits, n, steps):
    beta = torch.zeros(features.shape[1], requires_grad=True)  # all probabilities 1/2
    opt = optim.LBFGS([beta], lr=0.5, max_iter=4)

    def evaluate():
        opt.zero_grad()
        nll = -Counts(n, logits=features @ beta).log_prob(hits).sum()
        nll.backward()
        return nll

    for _ in range(steps):
        record.append(opt.step(evaluate).item())
    record.append(beta.detach().numpy().copy())
"""

FIT_BY_LIKELIHOOD_STEPS = [
    (
        "import torch\nfrom torch import nn, optim\n",
        "import retrograd as torch\nfrom retrograd import nn, optim\n",
    ),
    (
        "        objective.backward()\n        opt.step()\n",
        "        grads = objective.backward()\n        opt.step(grads)\n",
    ),
    (
        "        nll.backward()\n        opt.step()\n",
        "        grads = nll.backward()\n        opt.step(grads)\n",
    ),
    ("        nll.backward()\n        return nll\n", "        return nll\n"),
]


def test_distributions_fitted_from_their_boundaries_as_torch():
    rng = np.random.default_rng(6406)
    batches = [
        (
            rng.standard_normal((6, 4)).astype(np.float32),
            rng.integers(0, 2, 6).astype(np.float32),
            list(rng.standard_normal(6)),
        )
        for _ in range(3)
    ]
    proportions = rng.dirichlet([2.0, 1.0, 0.5], size=8).astype(np.float32)
    waits = rng.gamma(2.0, 0.5, size=10).astype(np.float32)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    trials = 5.0
    successes = rng.binomial(5, 0.3, size=8).astype(np.float32)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = FIT_BY_LIKELIHOOD_SOURCE
        text = source if lib is torch else port(source, FIT_BY_LIKELIHOOD_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record, initialize=initialize)
        names["run_policy_gradient"]([(lib.tensor(s), lib.tensor(a), r) for s, a, r in batches])
        names["mle_simplex"](lib.tensor(proportions), 4)
        names["mle_waits"](lib.tensor(waits), 4)
        names["mle_counts"](lib.tensor(x), lib.tensor(successes), trials, 2)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda lib, p: lib.distributions.Bernoulli(logits=p).log_prob(lib.tensor([0.0, 1.0, 1.0])),
        lambda lib, p: lib.distributions.Bernoulli(logits=p).entropy(),
        lambda lib, p: lib.distributions.Bernoulli(probs=p.sigmoid()).log_prob(
            lib.tensor([0.0, 1.0, 0.0])
        ),
        lambda lib, p: lib.distributions.ContinuousBernoulli(logits=p).log_prob(
            lib.tensor([0.1, 0.5, 0.9])
        ),
        lambda lib, p: lib.distributions.Binomial(4, logits=p).log_prob(
            lib.tensor([0.0, 1.0, 3.0])
        ),
        lambda lib, p: lib.distributions.Geometric(logits=p).entropy(),
        lambda lib, p: lib.distributions.Gamma(p + 1, p + 2).log_prob(lib.tensor([0.5, 1.0, 2.0])),
        lambda lib, p: lib.distributions.Chi2(2 * p + 1).log_prob(lib.tensor([0.5, 1.0, 2.0])),
        lambda lib, p: lib.distributions.Beta(p + 1, p + 1).log_prob(lib.tensor([0.2, 0.5, 0.7])),
        lambda lib, p: lib.distributions.Dirichlet(p + 1).log_prob(lib.tensor([0.2, 0.3, 0.5])),
    ],
    ids=[
        "bernoulli",
        "bernoulli_entropy",
        "bernoulli_probs",
        "continuous_bernoulli",
        "binomial",
        "geometric_entropy",
        "gamma",
        "chi2",
        "beta",
        "dirichlet",
    ],
)
def test_regression_log_densities_have_torchs_gradients_at_zero_logits_and_unit_concentrations(
    make,
):
    """torch's gradients at a logit of exactly 0 and at a concentration of exactly 1. The
    softplus written as ``clamp(min=0) + log1p(exp(-|x|))`` gave one-sided gradients at its
    kinks (``-value`` or ``k - n`` in place of ``sigmoid(logit) - value``), and
    ``xlogy(c - 1, x)`` as a ``where`` dropped its ``log(x)`` gradient when ``c == 1``."""
    theirs_p = torch.tensor([0.0, 0.0, 0.5], requires_grad=True)
    make(torch, theirs_p).sum().backward()
    ours_p = rg.tensor([0.0, 0.0, 0.5]).require_grad()
    grads = make(rg, ours_p).sum().backward()
    np.testing.assert_allclose(
        ours_p.grad(grads).numpy(), theirs_p.grad.numpy(), rtol=1e-5, atol=1e-6
    )
