"""Real-style PyTorch programs on retrograd, continued (the harness: ``tests/real_ports.py``):
Fourier Neural Operators in 1-d and 3-d, trained a few steps, small, against torch's run of the
same code from the same weights.

- Programs written here in the style of zongyi-li/fourier_neural_operator (``fourier_1d.py``,
  ``fourier_3d.py`` and the ``utilities3.py`` helpers), sharing a unit-Gaussian normaliser
  (``torch.mean(x, 0)``, ``torch.std(x, 0)``), a relative Lp loss (``torch.norm(...,
  self.p, 1)`` of ``reshape(n, -1)``, summed) and a parameter count that counts a complex
  weight twice (``reduce(operator.mul, list(p.size() + (2,) if p.is_complex() else
  p.size()))``).
- 1-d, on Burgers-like data: spectral layers with complex weights
  (``nn.Parameter(scale * torch.rand(..., dtype=torch.cfloat))``), ``torch.fft.rfft``, the
  spectrum written into ``torch.zeros(..., dtype=torch.cfloat)`` by slice assignment of
  ``torch.einsum("bix,iox->box")`` of complex tensors, ``torch.fft.irfft(out_ft, n=...)``;
  1 x 1 ``nn.Conv1d`` MLPs with ``F.gelu``; a grid by ``torch.tensor(np.linspace(...),
  dtype=torch.float).reshape(...).repeat([...])``; ``Adam(..., weight_decay=1e-4)`` on the
  complex parameters with ``CosineAnnealingLR`` stepped every batch (``get_last_lr``);
  ``DataLoader(TensorDataset(...), shuffle=False)``; evaluation under ``torch.no_grad()`` and
  ``pred[index] = out``.
- 3-d, on Navier-Stokes-like data in space-time: four complex weights per layer over the
  corners of ``torch.fft.rfftn(x, dim=[-3, -2, -1])`` and ``torch.fft.irfftn(out_ft,
  s=(...))``, ``F.pad(x, [0, pad])`` of the time axis and ``x[..., :-pad]``, 1 x 1
  ``nn.Conv3d``, inputs ``reshape(n, S, S, 1, T_in).repeat([1, 1, 1, T, 1])`` and normalised,
  the loss of the decoded prediction, ``print`` of a ``Size``.

The data are random arrays of the datasets' layouts, made by the test; the loaders keep their
order (``shuffle=True`` would draw each library's own). ``initialize(model)`` gives the port
torch's initial weights. The lines a port changes: the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

PRELUDE = """
import operator
from functools import reduce

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


class Standardizer:
    # per-position mean and spread over the training set
    def __init__(self, data, eps=1e-5):
        self.mean, self.std, self.eps = torch.mean(data, 0), torch.std(data, 0), eps

    def encode(self, x):
        return (x - self.mean) / (self.std + self.eps)

    def decode(self, x):
        return x * (self.std + self.eps) + self.mean


class RelativeLp:
    def __init__(self, p=2, average=False):
        self.p, self.average = p, average

    def __call__(self, pred, truth):
        n = pred.size()[0]
        gap = torch.norm(pred.reshape(n, -1) - truth.reshape(n, -1), self.p, 1)
        scale = torch.norm(truth.reshape(n, -1), self.p, 1)
        ratios = gap / scale
        return torch.mean(ratios) if self.average else torch.sum(ratios)


def count_params(model):
    # a complex weight counts as two reals
    return sum(
        reduce(operator.mul, list(w.size() + (2,) if w.is_complex() else w.size()))
        for w in model.parameters()
    )


def pointwise(dims, cin, cout, hidden):
    conv = nn.Conv1d if dims == 1 else nn.Conv3d
    return nn.Sequential(conv(cin, hidden, 1), nn.GELU(), conv(hidden, cout, 1))
"""

FNO1D_SOURCE = (
    PRELUDE
    + """

class Fourier1d(nn.Module):
    def __init__(self, channels, modes):
        super().__init__()
        self.modes = modes
        self.weight = nn.Parameter(
            (1 / channels**2) * torch.rand(channels, channels, modes, dtype=torch.cfloat)
        )

    def forward(self, x):
        spectrum = torch.fft.rfft(x)
        bins = x.size(-1) // 2 + 1
        shape = (x.shape[0], self.weight.shape[1], bins)
        mixed = torch.zeros(shape, dtype=torch.cfloat, device=x.device)
        low = spectrum[:, :, : self.modes]
        mixed[:, :, : self.modes] = torch.einsum("bix,iox->box", low, self.weight)
        return torch.fft.irfft(mixed, n=x.size(-1))


class Operator1d(nn.Module):
    def __init__(self, modes, width, depth=2):
        super().__init__()
        self.lift = nn.Linear(2, width)
        self.spectral = nn.ModuleList([Fourier1d(width, modes) for _ in range(depth)])
        self.mixers = nn.ModuleList([pointwise(1, width, width, width) for _ in range(depth)])
        self.skips = nn.ModuleList([nn.Conv1d(width, width, 1) for _ in range(depth)])
        self.head = pointwise(1, width, 1, 2 * width)

    def forward(self, u0):
        b, n = u0.shape[0], u0.shape[1]
        grid = torch.tensor(np.linspace(0, 1, n), dtype=torch.float).reshape(1, n, 1)
        x = self.lift(torch.cat((u0, grid.repeat([b, 1, 1]).to(u0.device)), dim=-1))
        x = x.permute(0, 2, 1)
        for k, (spec, mix, skip) in enumerate(zip(self.spectral, self.mixers, self.skips)):
            x = mix(spec(x)) + skip(x)
            if k < len(self.spectral) - 1:
                x = F.gelu(x)
        return self.head(x).permute(0, 2, 1)


n_train, n_test, batch, every = 4, 2, 2, 8
inputs, targets = burgers_a[:, ::every], burgers_u[:, ::every]
points = inputs.shape[1]
train = torch.utils.data.TensorDataset(
    inputs[:n_train].reshape(n_train, points, 1), targets[:n_train]
)
test_x, test_y = inputs[-n_test:].reshape(n_test, points, 1), targets[-n_test:]
train_loader = torch.utils.data.DataLoader(train, batch_size=batch, shuffle=False)

model = Operator1d(modes=4, width=6)
initialize(model)
print(count_params(model))
epochs = 2
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
steps = epochs * len(train_loader)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
relative = RelativeLp()
for epoch in range(epochs):
    model.train()
    for x, y in train_loader:
        optimizer.zero_grad()
        out = model(x).view(batch, -1)
        mse = F.mse_loss(out, y.view(batch, -1), reduction="mean")
        loss = relative(out, y.view(batch, -1))
        loss.backward()
        optimizer.step()
        scheduler.step()
        record.append([mse.item(), loss.item(), scheduler.get_last_lr()[0]])
    model.eval()
    with torch.no_grad():
        score = relative(model(test_x).view(n_test, -1), test_y).item() / n_test
    print(epoch, score)
    record.append(score)

pred = torch.zeros(test_y.shape)
with torch.no_grad():
    for index in range(n_test):
        pred[index] = model(test_x[index : index + 1]).view(-1)
record.append(pred.numpy())
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})
"""
)

GRADIENT_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("from torch.nn import functional as F\n", "from retrograd.nn import functional as F\n"),
    ("        optimizer.zero_grad()\n", ""),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


def _runs(source, steps, capsys, **data):
    """The records and logs of ``source`` under torch and of its port under retrograd, the
    port given torch's initial weights by ``initialize(model)`` (both runs from seeded global
    streams)."""
    initialize, records, logs = initializer(), [], []
    torch.manual_seed(0)
    rg.manual_seed(0)
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, steps)
        arrays = {
            name: lib.tensor(value, dtype=lib.float32) if isinstance(value, np.ndarray) else value
            for name, value in data.items()
        }
        run_source(text, lib, record=record, initialize=initialize, **arrays)
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


def test_fno_1d_trains_on_burgers_as_torch(capsys):
    rng = np.random.default_rng(340)
    grid = np.linspace(0, 2 * np.pi, 128)
    burgers_a = np.sin(grid[None] * rng.integers(1, 4, (6, 1))) + 0.2 * rng.standard_normal((6, 1))
    burgers_u = 0.8 * np.roll(burgers_a, 5, axis=1) + 0.05 * rng.standard_normal((6, 128))
    (theirs, ours), (their_log, our_log) = _runs(
        FNO1D_SOURCE, GRADIENT_STEPS, capsys, burgers_a=burgers_a, burgers_u=burgers_u
    )
    assert our_log.splitlines()[0] == their_log.splitlines()[0]  # count_params, complex as 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)


FNO3D_SOURCE = (
    PRELUDE
    + """

class Fourier3d(nn.Module):
    # the low modes of the two full axes sit at both ends of the spectrum: four corners
    def __init__(self, channels, modes):
        super().__init__()
        self.modes = modes
        scale = 1 / channels**2
        shape = (channels, channels, modes, modes, modes)
        self.corners = nn.ParameterList(
            [nn.Parameter(scale * torch.rand(*shape, dtype=torch.cfloat)) for _ in range(4)]
        )

    def forward(self, x):
        m = self.modes
        spectrum = torch.fft.rfftn(x, dim=[-3, -2, -1])
        bins = x.size(-1) // 2 + 1
        out = torch.zeros(*x.shape[:-1], bins, dtype=torch.cfloat, device=x.device)
        rows, cols = (slice(None, m), slice(-m, None)), (slice(None, m), slice(-m, None))
        corners = [(r, c) for c in cols for r in rows]
        for weight, (r, c) in zip(self.corners, corners):
            block = spectrum[:, :, r, c, :m]
            out[:, :, r, c, :m] = torch.einsum("bixyz,ioxyz->boxyz", block, weight)
        return torch.fft.irfftn(out, s=(x.size(-3), x.size(-2), x.size(-1)))


class Operator3d(nn.Module):
    def __init__(self, steps_in, modes, width, depth=2, pad=2):
        super().__init__()
        self.pad = pad
        self.lift = nn.Linear(steps_in + 3, width)
        self.layers = nn.ModuleList()
        for _ in range(depth):
            spectral, mixer = Fourier3d(width, modes), pointwise(3, width, width, width)
            self.layers.append(nn.ModuleList([spectral, mixer, nn.Conv3d(width, width, 1)]))
        self.head = pointwise(3, width, 1, 4 * width)

    @staticmethod
    def coordinates(shape):
        b, sizes = shape[0], shape[1:4]
        axes = []
        for k, n in enumerate(sizes):
            view = [1, 1, 1, 1, 1]
            view[k + 1] = n
            reps = [b, *sizes, 1]
            reps[k + 1] = 1
            line = torch.tensor(np.linspace(0, 1, n), dtype=torch.float)
            axes.append(line.reshape(view).repeat(reps))
        return torch.cat(axes, dim=-1)

    def forward(self, a):
        x = self.lift(torch.cat((a, self.coordinates(a.shape).to(a.device)), dim=-1))
        x = F.pad(x.permute(0, 4, 1, 2, 3), [0, self.pad])  # time is not periodic
        for k, (spec, mix, skip) in enumerate(self.layers):
            x = mix(spec(x)) + skip(x)
            if k < len(self.layers) - 1:
                x = F.gelu(x)
        x = x[..., : -self.pad]
        return self.head(x).permute(0, 2, 3, 4, 1)


n_train, n_test, batch, size, t_in, t_out = 4, 2, 2, 6, 3, 3
seen = ns_u[:, ::sub, ::sub, :t_in]
future = ns_u[:, ::sub, ::sub, t_in : t_in + t_out]
train_a, test_a = seen[:n_train], seen[-n_test:]
train_u, test_u = future[:n_train], future[-n_test:]
print(train_u.shape)
a_norm, u_norm = Standardizer(train_a), Standardizer(train_u)
# the inputs are constant along the predicted time axis
train_a = a_norm.encode(train_a).reshape(n_train, size, size, 1, t_in)
train_a = train_a.repeat([1, 1, 1, t_out, 1])
test_a = a_norm.encode(test_a).reshape(n_test, size, size, 1, t_in).repeat([1, 1, 1, t_out, 1])
train_u = u_norm.encode(train_u)
loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(train_a, train_u), batch_size=batch, shuffle=False
)

model = Operator3d(t_in, modes=2, width=4)
initialize(model)
print(count_params(model))
epochs = 2
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs * len(loader))
relative = RelativeLp()
for epoch in range(epochs):
    model.train()
    for x, y in loader:
        optimizer.zero_grad()
        out = model(x).view(batch, size, size, t_out)
        mse = F.mse_loss(out, y, reduction="mean")
        loss = relative(u_norm.decode(out).view(batch, -1), u_norm.decode(y).view(batch, -1))
        loss.backward()
        optimizer.step()
        scheduler.step()
        record.append([mse.item(), loss.item()])
    model.eval()
    with torch.no_grad():
        pred = u_norm.decode(model(test_a).view(n_test, size, size, t_out))
        score = relative(pred, test_u).item() / n_test
    print(epoch, score)
    record.append(score)
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})
"""
)


def test_fno_3d_trains_on_navier_stokes_in_space_time_as_torch(capsys):
    rng = np.random.default_rng(3403)
    ns_u = rng.standard_normal((6, 12, 12, 6)).cumsum(-1) * 0.1
    (theirs, ours), (their_log, our_log) = _runs(
        FNO3D_SOURCE, GRADIENT_STEPS, capsys, ns_u=ns_u, sub=2
    )
    assert (
        our_log.replace("retrograd.Size", "torch.Size").splitlines()[:2]
        == their_log.splitlines()[:2]
    )
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-6)
