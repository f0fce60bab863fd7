"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of ditschuk/pytorch-tsmixer (TSMixer, the all-MLP multivariate forecaster, and its
sinusoid-fitting test), run under torch and, ported, under retrograd from the same weights.

Its surface: a ``nn.BatchNorm1d`` subclass normalising ``time * channels`` features reached by
``reshape(N, -1, 1)`` and ``super().forward`` (a ``ValueError`` for other than 3-D input);
feature mixing with the norm before or after (``nn.Identity`` otherwise) and an identity or
linear shortcut; time mixing over the permuted series; an ``nn.Sequential`` of mixer layers
and a temporal projection; the activation by ``getattr(F, name)`` and the norm chosen by name
(``nn.LayerNorm((time, channels))``); annotations under ``from __future__ import annotations``
with ``Tensor``, ``Callable`` and ``type[nn.Module]``; a fit of phase-shifted sinusoids
(``map(torch.Tensor, ...)`` of NumPy windows, ``nn.MSELoss``, ``Adam``) and an eval-mode
forecast.

Each sample's sinusoid has a phase of its own (identical samples leave each batch norm a zero
variance, whose gradients are rounding noise that Adam follows); dropout is 0 (each library
draws its own masks); the weights are torch's (``initialize``). The port changes the import
lines and the gradient lines.
"""

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
)

TSMIXER_SOURCE = """from __future__ import annotations  # annotations stay strings

from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional as F


class SeriesBatchNorm(nn.BatchNorm1d):
    # batch statistics per (step, channel) cell, as Keras' BatchNormalization over (T, C)
    def __init__(self, shape: tuple[int, int]):
        steps, channels = shape
        super().__init__(steps * channels)
        self.shape = shape

    def forward(self, series: Tensor) -> Tensor:
        if series.ndim != 3:
            raise ValueError(f"expected (batch, time, channels), got {series.ndim} dimensions")
        y = super().forward(series.reshape(series.shape[0], -1, 1))
        return y.reshape(series.shape[0], *self.shape)


def swap(x: Tensor) -> Tensor:
    return x.permute(0, 2, 1)


class ChannelMix(nn.Module):
    def __init__(self, steps: int, c_in: int, c_out: int, hidden: int, act: Callable,
                 norm: type[nn.Module], norm_first: bool, p: float):
        super().__init__()
        self.pre = norm((steps, c_in)) if norm_first else nn.Identity()
        self.post = nn.Identity() if norm_first else norm((steps, c_out))
        self.shortcut = nn.Linear(c_in, c_out) if c_in != c_out else nn.Identity()
        self.up, self.down = nn.Linear(c_in, hidden), nn.Linear(hidden, c_out)
        self.act, self.drop = act, nn.Dropout(p)

    def forward(self, series: Tensor) -> Tensor:
        h = self.drop(self.down(self.drop(self.act(self.up(self.pre(series))))))
        return self.post(self.shortcut(series) + h)


class StepMix(nn.Module):
    def __init__(self, steps: int, channels: int, act: Callable, norm: type[nn.Module], p: float):
        super().__init__()
        self.mix, self.norm = nn.Linear(steps, steps), norm((steps, channels))
        self.act, self.drop = act, nn.Dropout(p)

    def forward(self, series: Tensor) -> Tensor:
        return self.norm(series + swap(self.drop(self.act(self.mix(swap(series))))))


class Mixer(nn.Module):
    def __init__(self, steps: int, horizon: int, channels: int, blocks: int = 2, act: str = "relu",
                 norm: str = "batch", norm_first: bool = True, hidden: int = 32, p: float = 0.1):
        super().__init__()
        assert norm in ("batch", "layer"), norm
        act_fn, norm_cls = getattr(F, act), SeriesBatchNorm if norm == "batch" else nn.LayerNorm
        self.blocks = nn.Sequential(*[
            nn.Sequential(StepMix(steps, channels, act_fn, norm_cls, p),
                          ChannelMix(steps, channels, channels, hidden, act_fn, norm_cls,
                                     norm_first, p))
            for _ in range(blocks - 1)
        ])
        self.project = nn.Linear(steps, horizon)

    def forward(self, series: Tensor) -> Tensor:
        return swap(self.project(swap(self.blocks(series))))


try:
    SeriesBatchNorm((4, 1))(torch.zeros(4))
except ValueError as e:
    record.append(str(e))

lookback, horizon = 30, 6
model = Mixer(lookback, horizon, 1, **options)
initialize(model)
grid = np.linspace(0, 2 * np.pi, lookback + horizon)
waves = np.sin(grid + phases)[..., None]  # (samples, time, 1)
history, target = map(torch.Tensor, (waves[:, :lookback], waves[:, lookback:]))
mse = nn.MSELoss()
opt = torch.optim.Adam(model.parameters(), lr=0.01)
for epoch in range(20):
    opt.zero_grad()
    loss = mse(model(history), target)
    loss.backward()
    opt.step()
    record.append(loss.item())
record.append(params_of(model))  # the trained weights
model.eval()
with torch.no_grad():
    record.append(model(history).numpy())
"""

TSMIXER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


@pytest.mark.parametrize(
    "options",
    [
        {"norm": "batch", "norm_first": True, "blocks": 2},
        {"norm": "layer", "norm_first": False, "blocks": 3, "act": "gelu"},
    ],
)
def test_tsmixer_fits_sinusoids_as_torch(options):
    torch.manual_seed(0)
    np.random.seed(0)
    phases = np.random.default_rng(424).uniform(0, 2 * np.pi, (48, 1))
    initialize, records = initializer(), []
    for lib in (torch, rg):
        text = (
            TSMIXER_SOURCE if lib is torch else ported_imports(port(TSMIXER_SOURCE, TSMIXER_STEPS))
        )
        record = []
        run_source(
            text,
            lib,
            options={**options, "p": 0.0, "hidden": 16},
            phases=phases,
            record=record,
            params_of=params_of,
            initialize=initialize,
        )
        records.append(record)
    assert "got 1 dimensions" in records[0][0]
    assert records[0][20] < records[0][1] / 4  # (the sinusoids are being fitted)
    # With the layer norm after the mixing, a bias of the one-channel ``down`` layer shifts
    # every element that ``LayerNorm((time, channels))`` normalises alike: no gradient of the
    # loss reaches it, so Adam moves it by rounding noise
    cancelled = (
        [name for name in records[0][-2] if name.endswith("1.down.bias")]
        if options["norm"] == "layer" and not options["norm_first"]
        else []
    )
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5, skip=cancelled)
