"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of nnzhan/Graph-WaveNet (the spatial-temporal traffic forecaster: its model, trainer,
utilities and training script), run under torch and, ported, under retrograd from the same
weights and draws.

Its surface: graph diffusion by ``torch.einsum("ncvl,vw->ncwl", (x, A))`` (operands in a
tuple), the powers of each support concatenated and mixed by a 1x1 ``Conv2d``; an adaptive
adjacency ``softmax(relu(mm(e1, e2)))`` of node embeddings held as ``nn.Parameter(torch.randn(
...).to(device), requires_grad=True).to(device)``, with ``torch.svd`` factors of a support
(square-root-scaled, through ``torch.diag``) as the other start; gated dilated convolutions
``tanh(f) * sigmoid(g)``, a skip sum cropped to the last steps behind a ``try`` that fails on
the integer ``0``, the residual crop and ``BatchNorm2d``; the left pad by
``nn.functional.pad``, the transposed output scaled back by a scaler holding NumPy scalars,
a masked MAE as the loss (the missing readings zeroed through ``labels != 0``, ``mask /=
torch.mean(mask)`` and ``torch.where(torch.isnan(...), torch.zeros_like(...), ...)``),
``torch.nn.utils.clip_grad_norm_``, ``Adam`` with weight decay; a padding, shuffling loader
over NumPy arrays, scipy.sparse double-transition supports read from a pickle, ``.npz``
splits, ``torch.Tensor(x).transpose(1, 3)`` batches, a ``torch.save`` per epoch and the best
one reloaded by ``torch.load`` for per-horizon test metrics.

The sensors are synthetic (daily speed waves with missing zero readings) written as
``.npz`` and pickle files; the weights are torch's (``initialize``); NumPy's global stream
(``shuffle``) and the drawn node embeddings are seeded alike in both runs. The port changes the
import lines and the gradient lines.
"""

from __future__ import annotations

import pickle
import re

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
)

GRAPH_WAVENET_SOURCE = """
import os
import pickle

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn
from torch.nn import functional as F


# -- data ------------------------------------------------------------------------------------
class Batches:
    # numpy windows in fixed-size batches; the last one is filled up with copies of the end
    def __init__(self, x, y, size):
        extra = (size - len(x) % size) % size
        self.x = np.concatenate([x, np.repeat(x[-1:], extra, axis=0)])
        self.y = np.concatenate([y, np.repeat(y[-1:], extra, axis=0)])
        self.size = size

    def shuffle(self):
        order = np.random.permutation(len(self.x))
        self.x, self.y = self.x[order], self.y[order]

    def __iter__(self):
        for i in range(0, len(self.x), self.size):
            yield self.x[i : i + self.size], self.y[i : i + self.size]


class Scaler:
    def __init__(self, mean, spread):
        self.mean, self.std = mean, spread  # numpy float64 scalars

    def transform(self, a):
        return (a - self.mean) / self.std

    def inverse_transform(self, a):
        return a * self.std + self.mean


def random_walk(adj):
    adj = sp.coo_matrix(adj)
    inv = np.power(np.array(adj.sum(1)).flatten(), -1.0)
    inv[np.isinf(inv)] = 0.0
    return sp.diags(inv).dot(adj).astype(np.float32).todense()


def masked_mae(pred, truth):
    mask = (truth != 0).float()
    mask /= torch.mean(mask)
    mask = torch.where(torch.isnan(mask), torch.zeros_like(mask), mask)  # no reading at all
    err = torch.abs(pred - truth) * mask
    return torch.mean(torch.where(torch.isnan(err), torch.zeros_like(err), err))


def masked_rmse(pred, truth):
    mask = (truth != 0).float()
    mask = mask / torch.mean(mask)
    return torch.sqrt(torch.mean((pred - truth) ** 2 * mask))


# -- model -----------------------------------------------------------------------------------
class Diffusion(nn.Module):
    def __init__(self, c_in, c_out, n_supports, hops=2):
        super().__init__()
        self.hops = hops
        self.mix = nn.Conv2d((hops * n_supports + 1) * c_in, c_out, kernel_size=(1, 1))

    def forward(self, x, supports):
        parts = [x]
        for A in supports:
            h = x
            for _ in range(self.hops):
                h = torch.einsum("ncvl,vw->ncwl", (h, A)).contiguous()
                parts.append(h)
        return self.mix(torch.cat(parts, dim=1))


class WaveNetGraph(nn.Module):
    def __init__(self, device, nodes, supports, width, horizon, in_dim=2, blocks=2, layers=3):
        super().__init__()
        self.supports = supports
        self.e1 = nn.Parameter(torch.randn(nodes, 6).to(device), requires_grad=True).to(device)
        self.e2 = nn.Parameter(torch.randn(6, nodes).to(device), requires_grad=True).to(device)
        self.start = nn.Conv2d(in_dim, width, kernel_size=(1, 1))
        self.filters, self.gates = nn.ModuleList(), nn.ModuleList()
        self.skips, self.graphs, self.norms = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        self.reach = 1
        for _ in range(blocks):
            for d in (2**i for i in range(layers)):
                self.filters.append(nn.Conv2d(width, width, kernel_size=(1, 2), dilation=d))
                self.gates.append(nn.Conv2d(width, width, kernel_size=(1, 2), dilation=d))
                self.skips.append(nn.Conv2d(width, 8 * width, kernel_size=(1, 1)))
                self.graphs.append(Diffusion(width, width, len(supports) + 1))
                self.norms.append(nn.BatchNorm2d(width))
                self.reach += d
        self.head = nn.Sequential(
            nn.ReLU(), nn.Conv2d(8 * width, 16 * width, (1, 1)), nn.ReLU(),
            nn.Conv2d(16 * width, horizon, (1, 1)),
        )

    def forward(self, x):
        if x.size(3) < self.reach:
            x = nn.functional.pad(x, (self.reach - x.size(3), 0, 0, 0))
        x = self.start(x)
        learned = F.softmax(F.relu(torch.mm(self.e1, self.e2)), dim=1)
        supports = self.supports + [learned]
        skip = 0
        for i in range(len(self.filters)):
            res = x
            x = torch.tanh(self.filters[i](res)) * torch.sigmoid(self.gates[i](res))
            s = self.skips[i](x)
            try:
                skip = skip[:, :, :, -s.size(3) :]
            except TypeError:  # still the integer 0 on the first layer
                skip = 0
            skip = s + skip
            x = self.graphs[i](x, supports)
            x = self.norms[i](x + res[:, :, :, -x.size(3) :])
        return self.head(skip)


# -- training --------------------------------------------------------------------------------
device = torch.device("cpu")
with open("graph.pkl", "rb") as f:
    _, _, adj = pickle.load(f)
supports = [torch.tensor(m).to(device) for m in (random_walk(adj), random_walk(adj.T))]
u, sv, v = torch.svd(supports[0])
left = torch.mm(u[:, :3], torch.diag(sv[:3] ** 0.5))
right = torch.mm(torch.diag(sv[:3] ** 0.5), v[:, :3].t())
record.append((left @ right).numpy())  # the rank-3 part: the same whatever the signs

splits = {k: dict(np.load(os.path.join("sensors", k + ".npz"))) for k in ("train", "val", "test")}
scaler = Scaler(splits["train"]["x"][..., 0].mean(), splits["train"]["x"][..., 0].std())
for part in splits.values():
    part["x"][..., 0] = scaler.transform(part["x"][..., 0])
loaders = {k: Batches(v["x"], v["y"], 8) for k, v in splits.items()}

model = WaveNetGraph(device, adj.shape[0], supports, width=4, horizon=12).to(device)
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=0.01)


def predict(x):
    x = torch.Tensor(x).to(device).transpose(1, 3)
    return scaler.inverse_transform(model(nn.functional.pad(x, (1, 0, 0, 0))).transpose(1, 3))


val_history = []
for epoch in range(2):
    model.train()
    loaders["train"].shuffle()
    for x, y in loaders["train"]:
        truth = torch.unsqueeze(torch.Tensor(y).to(device).transpose(1, 3)[:, 0, :, :], dim=1)
        opt.zero_grad()
        loss = masked_mae(predict(x), truth)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5)
        opt.step()
        print("iter loss {:.4f}".format(loss.item()))
        record.append([loss.item(), masked_rmse(predict(x), truth).item()])
    model.eval()
    with torch.no_grad():
        val = np.mean([
            masked_mae(predict(x), torch.Tensor(y).transpose(1, 3)[:, :1]).item()
            for x, y in loaders["val"]
        ])
    val_history.append(val)
    record.append(params_of(model))
    torch.save(model.state_dict(), "garage/epoch_{}.pth".format(epoch))

best = int(np.argmin(val_history))
model.load_state_dict(torch.load("garage/epoch_{}.pth".format(best)))
model.eval()
truth = torch.Tensor(splits["test"]["y"]).transpose(1, 3)[:, 0, :, :]
with torch.no_grad():
    out = torch.cat([predict(x).squeeze() for x, _ in loaders["test"]], dim=0)[: truth.size(0)]
scores = []
for h in range(12):  # one row per step ahead
    pair = out[:, :, h], truth[:, :, h]
    scores.append([masked_mae(*pair).item(), masked_rmse(*pair).item()])
print("horizon 12 test MAE {:.4f}".format(scores[-1][0]))
record.append(out.numpy())
record.append(np.array(scores))
"""

GRAPH_WAVENET_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 5)\n"
        "        opt.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 5)\n"
        "        opt.step(grads)\n",
    ),
]


def write_sensors(root, seed: int, nodes: int = 5) -> None:
    """Traffic files for a few sensors: ``{train,val,test}.npz`` of 12-step windows
    (speed, time of day) and the ``adj_mx.pkl`` of a ring of roads with a shortcut."""
    rng = np.random.default_rng(seed)
    steps = 56
    tod = (np.arange(steps) % 24) / 24.0
    speed = 55 + 12 * np.sin(2 * np.pi * tod[:, None] + rng.uniform(0, 6, nodes))
    speed = speed + rng.normal(0, 2, (steps, nodes))
    speed[rng.uniform(size=speed.shape) < 0.04] = 0.0  # missing readings
    series = np.stack([speed, np.broadcast_to(tod[:, None], speed.shape)], axis=-1)
    starts = np.arange(0, steps - 24)
    x = np.stack([series[s : s + 12] for s in starts])
    y = np.stack([series[s + 12 : s + 24] for s in starts])
    (root / "sensors").mkdir()
    for name, part in (("train", slice(0, 16)), ("val", slice(16, 24)), ("test", slice(24, 30))):
        np.savez(root / "sensors" / f"{name}.npz", x=x[part], y=y[part])
    adj = np.eye(nodes) + 0.5 * np.roll(np.eye(nodes), 1, axis=1)
    adj[0, nodes // 2] = 0.3
    ids = [str(i) for i in range(nodes)]
    with open(root / "graph.pkl", "wb") as f:
        pickle.dump((ids, {k: i for i, k in enumerate(ids)}, adj.astype(np.float32)), f)


def test_graph_wavenet_trains_and_tests_as_torch(capsys, monkeypatch, tmp_path):
    """The node embeddings are drawn (one stream in both runs); ``weight_decay`` is 0.01 so
    that the biases of the graph convolutions, which ``BatchNorm2d`` cancels (no gradient of
    the loss), move by their decay, not by rounding noise."""
    torch.manual_seed(0)
    initialize, records, logs = initializer(), [], []
    for lib in (torch, rg):
        np.random.seed(7)
        run_dir = tmp_path / lib.__name__
        (run_dir / "garage").mkdir(parents=True)
        write_sensors(run_dir, 420)
        monkeypatch.chdir(run_dir)
        text = GRAPH_WAVENET_SOURCE
        if lib is rg:
            text = ported_imports(port(text, GRAPH_WAVENET_STEPS))
        record = []
        with SharedDraws(lib, 420):
            run_source(text, lib, record=record, params_of=params_of, initialize=initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
    assert "horizon 12 test MAE" in logs[0]
    assert re.sub(r"[0-9.]+", "-", logs[1]) == re.sub(r"[0-9.]+", "-", logs[0])
