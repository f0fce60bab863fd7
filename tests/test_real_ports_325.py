"""Real ports, continued (the harness: ``tests/real_ports.py``): an LSTNet-style forecaster
(convolution, recurrent and recurrent-skip components plus a linear autoregressive highway),
a program written here in the style of laiguokun/LSTNet (its model, data utility, clipping
optimizer wrapper and train/evaluate driver), trained on sensor series read from a CSV file.

The surface it exercises: ``nn.Conv2d(1, c, kernel_size=(k, m))`` over the window,
``torch.squeeze(c, 3)``, a sequence-first ``nn.GRU`` over ``c.permute(2, 0, 1).contiguous()``,
the skip GRU over ``c[:, :, -pt * skip:]`` regrouped by ``view``/``permute(2, 0, 3, 1)`` into
``pt`` steps of ``batch * skip`` sequences, the highway ``nn.Linear(hw, 1)`` over the last
steps, ``F.sigmoid``/``F.tanh`` held as attributes, ``nn.Dropout(p=...)``; ``np.loadtxt`` of an
open file, per-sensor max scaling, windows cut by item assignment ``X[i, :, :] =
torch.from_numpy(...)`` into ``torch.zeros((n, w, m))``, ``torch.from_numpy(...).float()``,
``expand``, ``torch.autograd.Variable``, batches by ``torch.randperm`` or
``torch.LongTensor(range(n))`` indexing, the ``std() * np.sqrt(...)`` and mean-absolute
baselines (printed: the logs must be equal, tensor reprs included); the gradient norm by
``math.pow(p.grad.data.norm(), 2)`` and the in-place shrinkage ``grad.data.mul_``, ``Adam``;
``nn.L1Loss(size_average=False)``/``nn.MSELoss(size_average=False)`` on rescaled outputs,
``math.sqrt(...) / data.rse`` (a float over a 0-d tensor) formatted by ``'{:5.4f}'.format``,
the per-sensor correlation in NumPy from ``predict.data.cpu().numpy()``.

Regressions guarded: the legacy ``size_average=False`` reductions, ``format`` of 0-d tensors,
``math.pow``/``math.sqrt`` of 0-d tensors, float64 NumPy windows assigned into float32 rows.
The lines changed: the ``import`` lines and the gradient lines (the wrapper's ``step`` takes the
gradients: ``p.grad(grads)``, ``grad_replace`` for the shrinkage). The weights are torch's
(``initialize``); dropout is 0; ``torch.randperm`` draws one shared stream in both runs.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, params_of, port, run_source

LSTNET_SOURCE = """
import math

import numpy as np
import torch
import torch.nn as nn
from torch import optim
from torch.autograd import Variable as V
from torch.nn import functional as F


class SkipNet(nn.Module):
    def __init__(self, cfg, sensors):
        super(SkipNet, self).__init__()
        self.window, self.m = cfg.window, sensors
        self.conv_ch, self.skip = cfg.conv_channels, cfg.skip
        self.periods = int((cfg.window - cfg.kernel) / cfg.skip)  # whole skip periods seen
        self.hw = cfg.highway
        self.conv = nn.Conv2d(1, cfg.conv_channels, kernel_size=(cfg.kernel, sensors))
        self.gru = nn.GRU(cfg.conv_channels, cfg.rnn_hidden)
        self.skip_gru = nn.GRU(cfg.conv_channels, cfg.skip_hidden)
        self.drop = nn.Dropout(p=cfg.dropout)
        self.mix = nn.Linear(cfg.rnn_hidden + cfg.skip * cfg.skip_hidden, sensors)
        self.highway = nn.Linear(cfg.highway, 1)
        self.squash = F.sigmoid if cfg.squash == "sigmoid" else F.tanh

    def forward(self, x):
        n = x.size(0)
        feats = torch.squeeze(F.relu(self.conv(x.view(-1, 1, self.window, self.m))), 3)
        feats = self.drop(feats)  # (n, channels, steps)
        _, last = self.gru(feats.permute(2, 0, 1).contiguous())
        recent = self.drop(torch.squeeze(last, 0))
        # the same phase of each period becomes one sequence: n * skip of them
        tail = feats[:, :, int(-self.periods * self.skip) :].contiguous()
        tail = tail.view(n, self.conv_ch, self.periods, self.skip).permute(2, 0, 3, 1)
        tail = tail.contiguous().view(self.periods, n * self.skip, self.conv_ch)
        _, periodic = self.skip_gru(tail)
        periodic = self.drop(periodic.view(n, -1))
        out = self.mix(torch.cat((recent, periodic), 1))
        linear = x[:, -self.hw :, :].permute(0, 2, 1).contiguous().view(-1, self.hw)
        return self.squash(out + self.highway(linear).view(-1, self.m))


class SensorWindows:
    def __init__(self, path, train_frac, valid_frac, window, horizon):
        self.window, self.horizon = window, horizon
        with open(path) as handle:
            raw = np.loadtxt(handle, delimiter=",")
        self.n, self.m = raw.shape
        self.peaks = np.abs(raw).max(axis=0)
        self.values = raw / self.peaks  # each sensor in [-1, 1]
        cut_a, cut_b = int(train_frac * self.n), int((train_frac + valid_frac) * self.n)
        self.train = self.windows(range(window + horizon - 1, cut_a))
        self.valid = self.windows(range(cut_a, cut_b))
        self.test = self.windows(range(cut_b, self.n))
        self.scale = torch.from_numpy(self.peaks).float()
        actual = self.test[1] * self.scale.expand(self.test[1].size(0), self.m)
        self.scale = V(self.scale)
        self.rse = actual.std() * np.sqrt((len(actual) - 1.0) / len(actual))
        self.rae = torch.mean(torch.abs(actual - torch.mean(actual)))

    def windows(self, ends):
        X = torch.zeros((len(ends), self.window, self.m))
        Y = torch.zeros((len(ends), self.m))
        for i, target in enumerate(ends):
            stop = target - self.horizon + 1
            X[i, :, :] = torch.from_numpy(self.values[stop - self.window : stop, :])
            Y[i, :] = torch.from_numpy(self.values[target, :])
        return [X, Y]

    def batches(self, X, Y, size, shuffle):
        order = torch.randperm(len(X)) if shuffle else torch.LongTensor(range(len(X)))
        for start in range(0, len(X), size):
            pick = order[start : start + size]
            yield V(X[pick]), V(Y[pick])


class ClippedAdam:
    def __init__(self, params, lr, max_norm):
        self.params, self.max_norm = list(params), max_norm
        self.inner = optim.Adam(self.params, lr=lr)

    def step(self):
        total = 0.0
        for p in self.params:
            total += math.pow(p.grad.data.norm(), 2)
        total = math.sqrt(total)
        shrink = self.max_norm / total if total > 0 else 1.0
        if shrink < 1:
            for p in self.params:
                p.grad.data.mul_(shrink)
        self.inner.step()
        return total


def fit_epoch(data, X, Y, model, loss_fn, opt, size):
    model.train()
    total, count = 0.0, 0
    for xb, yb in data.batches(X, Y, size, True):
        model.zero_grad()
        out = model(xb)
        scale = data.scale.expand(out.size(0), data.m)
        loss = loss_fn(out * scale, yb * scale)
        loss.backward()
        opt.step()
        total += loss.item()
        count += out.size(0) * data.m
    return total / count


def score(data, X, Y, model, size):
    model.eval()
    squared, absolute = nn.MSELoss(size_average=False), nn.L1Loss(size_average=False)
    sq = ab = 0.0
    outs, truths = [], []
    for xb, yb in data.batches(X, Y, size, False):
        out = model(xb)
        scale = data.scale.expand(out.size(0), data.m)
        sq += squared(out * scale, yb * scale).item()
        ab += absolute(out * scale, yb * scale).item()
        outs.append(out)
        truths.append(yb)
    count = len(X) * data.m
    rse = math.sqrt(sq / count) / data.rse
    rae = (ab / count) / data.rae
    guess, truth = torch.cat(outs).data.cpu().numpy(), torch.cat(truths).data.cpu().numpy()
    covariance = ((guess - guess.mean(axis=0)) * (truth - truth.mean(axis=0))).mean(axis=0)
    spread = guess.std(axis=0) * truth.std(axis=0)
    live = truth.std(axis=0) != 0
    return rse, rae, (covariance / spread)[live].mean()


torch.manual_seed(cfg.seed)
data = SensorWindows(cfg.path, 0.6, 0.2, cfg.window, cfg.horizon)
print(data.rse)
model = SkipNet(cfg, data.m)
initialize(model)
print("parameters: %d" % sum([p.nelement() for p in model.parameters()]))
opt = ClippedAdam(model.parameters(), cfg.lr, cfg.clip)
for epoch in range(1, cfg.epochs + 1):
    train_loss = fit_epoch(data, *data.train, model, nn.L1Loss(size_average=False), opt, cfg.batch)
    rse, rae, corr = score(data, *data.valid, model, cfg.batch)
    line = "epoch {:2d} train {:5.4f} valid rse {:5.4f} rae {:5.4f} corr {:5.4f}"
    print(line.format(epoch, train_loss, rse, rae, corr))
    record += [[train_loss, float(rse), float(rae), float(corr)], params_of(model)]
rse, rae, corr = score(data, *data.test, model, cfg.batch)
print("test rse {:5.4f} rae {:5.4f} corr {:5.4f}".format(rse, rae, corr))
record.append([float(rse), float(rae), float(corr)])
"""

LSTNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch import optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd import optim\n",
    ),
    ("    def step(self):\n", "    def step(self, grads):\n"),
    ("math.pow(p.grad.data.norm(), 2)", "math.pow(p.grad(grads).data.norm(), 2)"),
    (
        "                p.grad.data.mul_(shrink)\n",
        "                p.grad_replace(grads, p.grad(grads) * shrink)\n",
    ),
    ("        self.inner.step()\n", "        self.inner.step(grads)\n"),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def write_sensors(path, seed: int, n: int = 80) -> str:
    """Three positive sensor series (daily and half-daily cycles) as LSTNet's CSV files."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)[:, None]
    values = 5.0 + np.sin(2 * np.pi * t / 12 + np.array([0.0, 1.0, 2.0])) * np.array(
        [2.0, 1.0, 3.0]
    )
    values += np.cos(2 * np.pi * t / 6) + 0.3 * rng.standard_normal((n, 3))
    np.savetxt(path, values, delimiter=",")
    return str(path)


@pytest.mark.parametrize("output_fun", ["sigmoid", "tanh"])
def test_lstnet_trains_and_reports_as_torch(tmp_path, capsys, monkeypatch, output_fun):
    data = write_sensors(tmp_path / "sensors.txt", 325)
    cfg = argparse.Namespace(
        path=data, conv_channels=6, rnn_hidden=6, window=18, kernel=6, highway=4, clip=1.0,
        epochs=2, batch=16, dropout=0.0, seed=54321, lr=0.01, horizon=2, skip=6,
        skip_hidden=3, squash=output_fun,
    )  # fmt: skip
    initialize = initializer()
    records, logs = [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(3250)
        monkeypatch.setattr(
            lib,
            "randperm",
            lambda n, *a, lib=lib, rng=rng, **k: lib.tensor(rng.permutation(n), dtype=lib.int64),
        )
        record = []
        text = (
            LSTNET_SOURCE
            if lib is torch
            else port(LSTNET_SOURCE, LSTNET_STEPS).replace("from torch.", "from retrograd.")
        )
        with torch.random.fork_rng(), SharedDraws(lib, 3251):
            run_source(
                text, lib, record=record, cfg=cfg, initialize=initialize, params_of=params_of
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1] == logs[0]
    assert logs[0].startswith("tensor(") and "parameters: " in logs[0]
    assert len(theirs) == 2 * cfg.epochs + 1
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
