"""Real ports, continued (the harness: ``tests/real_ports.py``): FEDformer-style
frequency-enhanced blocks trained through complex parameters, a program written here in the
style of thuml/Time-Series-Library's Fourier layers (a spectral mixing block and a spectral
cross attention inside a small encoder-decoder forecaster).

The surface it exercises: random frequency modes chosen by ``np.random.shuffle`` of a list;
a complex ``nn.Parameter`` from ``scale * torch.rand(..., dtype=torch.cfloat)``;
``torch.fft.rfft(x, dim=-1)``; a ``torch.zeros(..., device=..., dtype=torch.cfloat)`` spectrum
filled mode by mode by item assignment from ``torch.einsum("bhi,hio->bho", ...)`` of complex
operands; ``torch.fft.irfft(spectrum, n=...)``; complex ``einsum``s ``"bhex,bhey->bhxy"``,
``"bhxy,bhey->bhex"`` and ``"bhex,heox->bhox"``; the complex ``tanh``, or
``torch.softmax(abs(scores), dim=-1)`` made complex again by ``torch.complex(x,
torch.zeros_like(x))``; a complex spectrum divided by two ints; ``super(Class,
self).__init__()``; residuals and ``LayerNorm``; ``nn.functional.mse_loss`` and ``Adam``
stepping the complex weights (both parts compared).

Regressions guarded: gradients through item assignment of complex einsum results, complex
``tanh``/``abs``/``torch.complex`` and ``rfft``/``irfft(n=)``, Adam on complex parameters.
The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``); the random modes come from NumPy's global stream, seeded alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

FOURIER_SOURCE = """
import numpy as np
import torch
import torch.nn as nn

HEADS = 4


def pick_modes(length, count, shuffle=True):
    # which rfft bins a block keeps: a random few, or the lowest
    bins = list(range(length // 2))
    if shuffle:
        np.random.shuffle(bins)
    return sorted(bins[: min(count, length // 2)])


def complex_weight(n_in, n_out, modes):
    scale = 1 / (n_in * n_out)
    shape = (HEADS, n_in // HEADS, n_out // HEADS, modes)
    return nn.Parameter(scale * torch.rand(*shape, dtype=torch.cfloat))


class SpectralMixer(nn.Module):
    # FFT over time, a per-mode complex linear map, inverse FFT
    def __init__(self, width, length, modes):
        super(SpectralMixer, self).__init__()
        self.bins = pick_modes(length, modes)
        print("mixer bins {}".format(self.bins))
        self.w = complex_weight(width, width, len(self.bins))

    def forward(self, x):  # x: [B, L, H, E]
        B, L, H, E = x.shape
        spec = torch.fft.rfft(x.permute(0, 2, 3, 1), dim=-1)
        mixed = torch.zeros(B, H, E, L // 2 + 1, device=x.device, dtype=torch.cfloat)
        for slot, k in enumerate(self.bins):
            mixed[:, :, :, slot] = torch.einsum("bhi,hio->bho", spec[:, :, :, k], self.w[..., slot])
        return torch.fft.irfft(mixed, n=L)  # [B, H, E, L]


class SpectralCrossAttention(nn.Module):
    def __init__(self, width, len_q, len_kv, modes, activation="tanh"):
        super(SpectralCrossAttention, self).__init__()
        self.width, self.activation = width, activation
        self.bins_q = pick_modes(len_q, modes)
        self.bins_kv = pick_modes(len_kv, modes)
        print("cross bins q={} kv={}".format(self.bins_q, self.bins_kv))
        self.w = complex_weight(width, width, len(self.bins_q))

    def gather(self, x, bins):
        spec = torch.fft.rfft(x.permute(0, 2, 3, 1), dim=-1)
        kept = torch.zeros(*spec.shape[:3], len(bins), device=x.device, dtype=torch.cfloat)
        for slot, k in enumerate(bins):
            kept[:, :, :, slot] = spec[:, :, :, k]
        return kept

    def forward(self, q, kv):
        B, L, H, E = q.shape
        fq, fk = self.gather(q, self.bins_q), self.gather(kv, self.bins_kv)
        scores = torch.einsum("bhex,bhey->bhxy", fq, fk)
        if self.activation == "tanh":
            scores = scores.tanh()
        else:  # softmax of the magnitudes, back to a complex tensor
            scores = torch.softmax(abs(scores), dim=-1)
            scores = torch.complex(scores, torch.zeros_like(scores))
        attended = torch.einsum("bhxy,bhey->bhex", scores, fk)
        projected = torch.einsum("bhex,heox->bhox", attended, self.w)
        full = torch.zeros(B, H, E, L // 2 + 1, device=q.device, dtype=torch.cfloat)
        for slot, k in enumerate(self.bins_q):
            full[:, :, :, k] = projected[:, :, :, slot]
        return torch.fft.irfft(full / self.width / self.width, n=L)


class Forecaster(nn.Module):
    def __init__(self, width, past, ahead, modes, activation):
        super().__init__()
        self.width, self.past, self.ahead = width, past, ahead
        self.embed = nn.Linear(2, width)
        self.mixer = SpectralMixer(width, past, modes)
        self.cross = SpectralCrossAttention(width, ahead, past, modes, activation)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 2)

    def split(self, x):
        return self.embed(x).view(x.shape[0], x.shape[1], HEADS, self.width // HEADS)

    def forward(self, past, prompt):
        enc = self.split(past)
        enc = enc + self.mixer(enc).permute(0, 3, 1, 2)
        dec = self.split(prompt)
        dec = dec + self.cross(dec, enc).permute(0, 3, 1, 2)
        return self.head(self.norm(dec.reshape(dec.shape[0], self.ahead, self.width)))


model = Forecaster(8, 16, 8, modes=3, activation=activation)
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
series = torch.tensor(series_values)  # [B, 24, 2]
past, future = series[:, :16], series[:, 16:]
prompt = torch.cat([past[:, -4:], torch.zeros_like(future[:, :4])], dim=1)
for step in range(3):
    loss = nn.functional.mse_loss(model(past, prompt), future)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record += [loss.item(), params_of(model)]
"""

FOURIER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    opt.step()\n",
        "    grads = loss.backward()\n    opt.step(grads)\n",
    ),
]


def params_with_parts(*modules):
    """:func:`params_of` with each complex array as its real and imaginary parts (which the
    float comparison would otherwise drop)."""
    return {
        name: np.stack([value.real, value.imag]) if np.iscomplexobj(value) else value
        for name, value in params_of(*modules).items()
    }


@pytest.mark.parametrize("activation", ["tanh", "softmax"])
def test_fourier_blocks_train_as_torch(capsys, activation):
    rng = np.random.default_rng(326)
    t = np.arange(24)[None, :, None]
    series = np.sin(2 * np.pi * t / np.array([6.0, 8.0]) + rng.uniform(0, 6, (3, 1, 2)))
    series = (series + 0.1 * rng.standard_normal((3, 24, 2))).astype(np.float32)
    (theirs, ours), logs = runs_with_draws(
        FOURIER_SOURCE, FOURIER_STEPS, capsys, 3260,
        activation=activation, series_values=series, initialize=initializer(),
        params_of=params_with_parts,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert "mixer bins [" in logs[0] and "cross bins q=[" in logs[0]
    assert theirs[1]["0.cross.w"].shape == (2, 4, 2, 2, 3)  # complex: both parts compared
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
