"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of cure-lab/SCINet (the sample-convolution-and-interaction forecaster with its ETTh
experiment), run under torch and, ported, under retrograd from the same weights and draws.

Its surface: the series split by ``x[:, ::2, :]``/``x[:, 1::2, :]``; interaction branches of
``ReplicationPad1d``/``Conv1d``/in-place ``LeakyReLU``/``Dropout``/``Conv1d``/``Tanh`` and the
scaling by ``torch.exp``; a recursive tree zipping the halves back by ``unsqueeze``/``cat``;
two stacks joined by a ``Conv1d`` over ``cat((res, x), dim=1)``; a sinusoidal position
encoding from a ``register_buffer`` added in place (``x += pe[:, :, :-1]`` when the channels
are odd); reversible instance normalisation (``torch.var(unbiased=False)``, ``x /= stdev``, the
learned affine undone at the output); the model printed and made ``.double()``; a ``Dataset``
subclass with a scaler using ``torch.from_numpy(mean).type_as(data).to(data.device)``,
``DataLoader(shuffle=True, drop_last=True)``, ``nn.L1Loss`` of both stacks, ``np.average`` of
a list of detached 0-d tensors, ``SummaryWriter`` scalars, early stopping saving the best
``state_dict``, a ``0.95 ** epoch`` learning rate written into ``param_groups``, a checkpoint
dict saved and read back by ``torch.load(f, map_location=lambda storage, loc: storage)``, the
best weights reloaded, normed and denormed test metrics; ``torch.manual_seed``,
``torch.cuda.manual_seed_all`` and the ``torch.backends.cudnn`` flags.

The table is a synthetic seven-column one in ETTh1's layout; dropout is 0; ``DataLoader``'s
shuffle permutes by one shared stream; the weights are torch's (``initialize``). The port
changes the import lines and the gradient lines.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.utils.data.sampler as rg_sampler
from real_ports import (
    assert_records_agree,
    global_streams_restored,  # noqa: F401 (a fixture: the program seeds torch)
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
)

SCINET_SOURCE = """
import math
import os

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils import tensorboard
from torch.utils.data import DataLoader, Dataset

SEQ, PRED, CHANNELS, LEVELS = 16, 8, 7, 2


def branch(ch, k=5, p=0.0):
    pad = (k - 1) // 2 + 1  # the second convolution (k=3) takes the extra 2 back
    return nn.Sequential(
        nn.ReplicationPad1d((pad, pad)), nn.Conv1d(ch, ch, kernel_size=k),
        nn.LeakyReLU(negative_slope=0.01, inplace=True), nn.Dropout(p),
        nn.Conv1d(ch, ch, kernel_size=3), nn.Tanh(),
    )


class Exchange(nn.Module):
    # even and odd halves scale each other, then trade residuals
    def __init__(self, ch):
        super().__init__()
        self.phi, self.psi, self.upd, self.pred = branch(ch), branch(ch), branch(ch), branch(ch)

    def forward(self, x):
        even, odd = x[:, ::2, :].permute(0, 2, 1), x[:, 1::2, :].permute(0, 2, 1)
        d = odd.mul(torch.exp(self.phi(even)))
        c = even.mul(torch.exp(self.psi(odd)))
        return (c + self.upd(d)).permute(0, 2, 1), (d - self.pred(c)).permute(0, 2, 1)


class Tree(nn.Module):
    def __init__(self, ch, level):
        super().__init__()
        self.block = Exchange(ch)
        self.halves = nn.ModuleList([Tree(ch, level - 1) for _ in range(2)]) if level else None

    def forward(self, x):
        even, odd = self.block(x)
        if self.halves is not None:
            even, odd = self.halves[0](even), self.halves[1](odd)
        pairs = zip(even.permute(1, 0, 2), odd.permute(1, 0, 2))  # time first
        steps = [t.unsqueeze(0) for pair in pairs for t in pair]
        return torch.cat(steps, 0).permute(1, 0, 2)


class TwoStack(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.first, self.second = Tree(ch, LEVELS - 1), Tree(ch, LEVELS - 1)
        self.head1 = nn.Conv1d(SEQ, PRED, kernel_size=1, bias=False)
        self.head2 = nn.Conv1d(SEQ + PRED, PRED, kernel_size=1, bias=False)
        self.pe_width = ch + ch % 2
        half = self.pe_width // 2
        step = math.log(10000.0) / max(half - 1, 1)
        self.register_buffer("inv_freq", torch.exp(torch.arange(half, dtype=torch.float32) * -step))
        self.gain = nn.Parameter(torch.ones(1, 1, ch))
        self.shift = nn.Parameter(torch.zeros(1, 1, ch))

    def encoding(self, x):
        t = torch.arange(x.size()[1], dtype=torch.float32, device=x.device).unsqueeze(1)
        angles = t * self.inv_freq.unsqueeze(0)
        signal = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
        signal = F.pad(signal, (0, 0, 0, self.pe_width % 2))
        return signal.view(1, x.size(1), self.pe_width)

    def undo(self, y, mean, std):
        return (y - self.shift) / (self.gain + 1e-10) * std + mean

    def forward(self, x):
        pe = self.encoding(x)
        if pe.shape[2] > x.shape[2]:
            x += pe[:, :, :-1]
        else:
            x += pe
        print("(reversible norm)\\r", end="")
        mean = x.mean(1, keepdim=True).detach()
        x = x - mean
        std = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x /= std
        x = x * self.gain + self.shift
        res = x
        x = self.first(x)
        x += res
        mid = self.head1(x)
        x = torch.cat((res, mid), dim=1)
        res = x
        x = self.second(x)
        x += res
        return self.undo(self.head2(x), mean, std), self.undo(mid, mean, std)


class Scaler:
    def fit(self, a):
        self.mean, self.std = a.mean(0), a.std(0)

    def inverse(self, a):
        if torch.is_tensor(a):
            mean = torch.from_numpy(self.mean).type_as(a).to(a.device)
            std = torch.from_numpy(self.std).type_as(a).to(a.device)
            return a * std + mean
        return a * self.std + self.mean


class Windows(Dataset):
    def __init__(self, table, part):
        n = len(table)
        starts, ends = [0, n * 12 // 20 - SEQ, n * 16 // 20 - SEQ], [n * 12 // 20, n * 16 // 20, n]
        self.scaler = Scaler()
        self.scaler.fit(table[: ends[0]])
        self.data = ((table - self.scaler.mean) / self.scaler.std)[starts[part] : ends[part]]

    def __len__(self):
        return len(self.data) - SEQ - PRED + 1

    def __getitem__(self, i):
        return self.data[i : i + SEQ], self.data[i + SEQ : i + SEQ + PRED]


def errors(pred, true):
    mae = np.mean(np.abs(pred - true))
    mse = np.mean((pred - true) ** 2)
    return mae, mse, np.sqrt(mse)


class Stopper:
    def __init__(self, patience, folder):
        self.patience, self.folder = patience, folder
        self.best, self.bad, self.stop = None, 0, False

    def __call__(self, loss, model):
        if self.best is None or loss < self.best:
            before = np.inf if self.best is None else self.best
            print(f"valid loss {before:.6f} -> {loss:.6f}, saved")
            self.best, self.bad = loss, 0
            torch.save(model.state_dict(), os.path.join(self.folder, "best.pth"))
        else:
            self.bad += 1
            self.stop = self.bad >= self.patience


torch.manual_seed(1234)
torch.cuda.manual_seed_all(1234)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False  # same kernels every run

model = TwoStack(CHANNELS)
print(model)
model = model.double()
initialize(model)
sets = [Windows(table, part) for part in range(3)]
train_loader = DataLoader(sets[0], batch_size=8, shuffle=True, drop_last=True)
eval_loaders = [DataLoader(d, batch_size=8, shuffle=False, drop_last=True) for d in sets[1:]]
folder = "checkpoints/scinet"
os.makedirs(folder, exist_ok=True)
writer = tensorboard.SummaryWriter("runs/scinet")
opt = optim.Adam(model.parameters(), lr=0.005)
l1 = nn.L1Loss()
stopper = Stopper(3, folder)


def evaluate(data, loader):
    model.eval()
    losses, preds, trues = [], [], []
    for x, y in loader:
        out, mid = model(x.double())
        y = y.double()
        y = y.detach().cpu()
        losses.append(l1(out.detach().cpu(), y) + l1(mid.detach().cpu(), y))
        preds.append(out.detach().cpu().numpy())
        trues.append(y.detach().cpu().numpy())
    preds, trues = np.concatenate(preds), np.concatenate(trues)
    normed = errors(preds, trues)
    scaled = errors(data.scaler.inverse(preds), data.scaler.inverse(trues))
    print("normed mae {:.4f} mse {:.4f} rmse {:.4f}".format(*normed), end=" | ")
    print("denormed mae {:.4f}".format(scaled[0]))
    return np.average(losses), normed, scaled


for epoch in range(2):
    model.train()
    losses = []
    for x, y in train_loader:
        opt.zero_grad()
        out, mid = model(x.double())
        y = y.double()
        loss = l1(out, y) + l1(mid, y)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    valid_loss = evaluate(sets[1], eval_loaders[0])[0]
    writer.add_scalar("train_loss", np.average(losses), global_step=epoch)
    writer.add_scalar("valid_loss", valid_loss, global_step=epoch)
    record.append([np.average(losses), valid_loss])
    record.append(params_of(model))
    stopper(valid_loss, model)
    if stopper.stop:
        break
    lr = 0.005 * 0.95 ** (epoch + 1)
    for group in opt.param_groups:
        group["lr"] = lr
writer.close()

torch.save(dict(epoch=epoch, lr=lr, model=model.state_dict()), os.path.join(folder, "last.bin"))
with open(os.path.join(folder, "last.bin"), "rb") as f:
    saved = torch.load(f, map_location=lambda storage, loc: storage)
assert saved["epoch"] == epoch and saved["lr"] == lr
model.load_state_dict(torch.load(os.path.join(folder, "best.pth")))
_, normed, scaled = evaluate(sets[2], eval_loaders[1])
record.append([*normed, *scaled])
"""

SCINET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        loss.backward()\n        opt.step()\n",
        "        grads = loss.backward()\n        opt.step(grads)\n",
    ),
]


def ett_table(seed: int, rows: int = 80) -> np.ndarray:
    """Seven positive columns of hourly loads and an oil temperature, ETTh1's layout."""
    rng = np.random.default_rng(seed)
    hours = np.arange(rows)[:, None]
    daily = np.sin(2 * np.pi * hours / 24 + rng.uniform(0, 6, 7))
    return 10 + 3 * daily + 0.5 * np.cos(2 * np.pi * hours / 12) + rng.normal(0, 0.3, (rows, 7))


@pytest.mark.usefixtures("global_streams_restored")
def test_scinet_trains_and_tests_on_ett_as_torch(capsys, monkeypatch, tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    table = ett_table(422)
    initialize, records, logs = initializer(), [], []
    for lib in (torch, rg):
        rng = np.random.default_rng(422)

        def randperm(n, generator=None, _lib=lib, _rng=rng, **_):
            return _lib.tensor(_rng.permutation(n), dtype=_lib.int64)

        monkeypatch.setattr(torch if lib is torch else rg_sampler, "randperm", randperm)
        for flag in ("benchmark", "deterministic"):  # (the program sets them)
            monkeypatch.setattr(lib.backends.cudnn, flag, getattr(lib.backends.cudnn, flag))
        (tmp_path / lib.__name__).mkdir()
        monkeypatch.chdir(tmp_path / lib.__name__)
        text = SCINET_SOURCE if lib is torch else ported_imports(port(SCINET_SOURCE, SCINET_STEPS))
        record = []
        with warnings.catch_warnings():
            run_source(
                text, lib, table=table, record=record, params_of=params_of, initialize=initialize
            )
        monkeypatch.undo()
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
    assert "(reversible norm)" in logs[0] and "denormed mae" in logs[0]
    assert logs[1] == logs[0]
