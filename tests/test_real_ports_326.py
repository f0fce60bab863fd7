# ruff: noqa: E501, W291  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
FEDformer's frequency-enhanced blocks, trained through complex parameters.

- thuml/Time-Series-Library's ``layers/FourierCorrelation.py`` as written:
  ``get_frequency_modes`` (``np.random.shuffle`` of the candidate frequencies);
  ``FourierBlock`` (a complex ``nn.Parameter`` from ``torch.rand(..., dtype=torch.cfloat)``
  scaled by a float, ``torch.fft.rfft`` over time, a ``torch.zeros(..., dtype=torch.cfloat)``
  spectrum filled mode by mode by item assignment from ``torch.einsum("bhi,hio->bho", ...)``
  of complex operands, ``torch.fft.irfft(out_ft, n=...)``); ``FourierCrossAttention``
  (complex ``einsum``s ``"bhex,bhey->bhxy"``/``"bhxy,bhey->bhex"``/``"bhex,heox->bhox"``, the
  complex ``tanh`` activation, or ``torch.softmax(abs(xqk_ft))`` back to complex by
  ``torch.complex(x, torch.zeros_like(x))``, the spectrum divided by two ints);
- both driven by a small encoder-decoder (residuals, ``LayerNorm``) trained on a drawn
  series with ``F.mse_loss`` and ``Adam``, which steps the complex weights.

The lines changed: the ``import`` lines and the gradient lines. The weights are torch's
(``initialize``); the random modes come from NumPy's global stream, seeded alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

FOURIER_SOURCE = '''
import numpy as np
import torch
import torch.nn as nn


def get_frequency_modes(seq_len, modes=64, mode_select_method='random'):
    """
    get modes on frequency domain:
    'random' means sampling randomly;
    'else' means sampling the lowest modes;
    """
    modes = min(modes, seq_len // 2)
    if mode_select_method == 'random':
        index = list(range(0, seq_len // 2))
        np.random.shuffle(index)
        index = index[:modes]
    else:
        index = list(range(0, modes))
    index.sort()
    return index


class FourierBlock(nn.Module):
    """
    Fourier layers
    """
    def __init__(self, in_channels, out_channels, seq_len, modes=0, mode_select_method='random'):
        super(FourierBlock, self).__init__()
        print('fourier enhanced block used!')
        """
        1D Fourier block. It performs representation learning on frequency domain, 
        it does FFT, linear transform, and Inverse FFT.    
        """
        # get modes on frequency domain
        self.index = get_frequency_modes(seq_len, modes=modes, mode_select_method=mode_select_method)
        print('modes={}, index={}'.format(modes, self.index))

        self.scale = (1 / (in_channels * out_channels))
        self.weights1 = nn.Parameter(
            self.scale * torch.rand(8, in_channels // 8, out_channels // 8, len(self.index), dtype=torch.cfloat))

    # Complex multiplication
    def compl_mul1d(self, input, weights):
        # (batch, in_channel, x ), (in_channel, out_channel, x) -> (batch, out_channel, x)
        return torch.einsum("bhi,hio->bho", input, weights)

    def forward(self, q, k, v, mask):
        # size = [B, L, H, E]
        B, L, H, E = q.shape
        x = q.permute(0, 2, 3, 1)
        # Compute Fourier coefficients
        x_ft = torch.fft.rfft(x, dim=-1)
        # Perform Fourier neural operations
        out_ft = torch.zeros(B, H, E, L // 2 + 1, device=x.device, dtype=torch.cfloat)
        for wi, i in enumerate(self.index):
            if i >= x_ft.shape[3] or wi >= out_ft.shape[3]:
                continue
            out_ft[:, :, :, wi] = self.compl_mul1d(x_ft[:, :, :, i], self.weights1[:, :, :, wi])
        # Return to time domain
        x = torch.fft.irfft(out_ft, n=x.size(-1))
        return (x, None)


class FourierCrossAttention(nn.Module):
    """
    Fourier Cross Former
    """
    def __init__(self, in_channels, out_channels, seq_len_q, seq_len_kv, modes=64, mode_select_method='random',
                 activation='tanh', policy=0):
        super(FourierCrossAttention, self).__init__()
        print(' fourier enhanced cross attention used!')
        """
        1D Fourier Cross Attention layer. It does FFT, linear transform, attention mechanism and Inverse FFT.    
        """
        self.activation = activation
        self.in_channels = in_channels
        self.out_channels = out_channels
        # get modes for queries and keys (& values) on frequency domain
        self.index_q = get_frequency_modes(seq_len_q, modes=modes, mode_select_method=mode_select_method)
        self.index_kv = get_frequency_modes(seq_len_kv, modes=modes, mode_select_method=mode_select_method)

        print('modes_q={}, index_q={}'.format(len(self.index_q), self.index_q))
        print('modes_kv={}, index_kv={}'.format(len(self.index_kv), self.index_kv))

        self.scale = (1 / (in_channels * out_channels))
        self.weights1 = nn.Parameter(
            self.scale * torch.rand(8, in_channels // 8, out_channels // 8, len(self.index_q), dtype=torch.cfloat))

    # Complex multiplication
    def compl_mul1d(self, input, weights):
        # (batch, in_channel, x ), (in_channel, out_channel, x) -> (batch, out_channel, x)
        return torch.einsum("bhi,hio->bho", input, weights)

    def forward(self, q, k, v, mask):
        # size = [B, L, H, E]
        B, L, H, E = q.shape
        xq = q.permute(0, 2, 3, 1)  # size = [B, H, E, L]
        xk = k.permute(0, 2, 3, 1)
        xv = v.permute(0, 2, 3, 1)

        # Compute Fourier coefficients
        xq_ft_ = torch.zeros(B, H, E, len(self.index_q), device=xq.device, dtype=torch.cfloat)
        xq_ft = torch.fft.rfft(xq, dim=-1)
        for i, j in enumerate(self.index_q):
            if j >= xq_ft.shape[3]:
                continue
            xq_ft_[:, :, :, i] = xq_ft[:, :, :, j]
        xk_ft_ = torch.zeros(B, H, E, len(self.index_kv), device=xq.device, dtype=torch.cfloat)
        xk_ft = torch.fft.rfft(xk, dim=-1)
        for i, j in enumerate(self.index_kv):
            if j >= xk_ft.shape[3]:
                continue
            xk_ft_[:, :, :, i] = xk_ft[:, :, :, j]

        # perform attention mechanism on frequency domain
        xqk_ft = (torch.einsum("bhex,bhey->bhxy", xq_ft_, xk_ft_))
        if self.activation == 'tanh':
            xqk_ft = xqk_ft.tanh()
        elif self.activation == 'softmax':
            xqk_ft = torch.softmax(abs(xqk_ft), dim=-1)
            xqk_ft = torch.complex(xqk_ft, torch.zeros_like(xqk_ft))
        else:
            raise Exception('{} actiation function is not implemented'.format(self.activation))
        xqkv_ft = torch.einsum("bhxy,bhey->bhex", xqk_ft, xk_ft_)
        xqkvw = torch.einsum("bhex,heox->bhox", xqkv_ft, self.weights1)
        out_ft = torch.zeros(B, H, E, L // 2 + 1, device=xq.device, dtype=torch.cfloat)
        for i, j in enumerate(self.index_q):
            if i >= xqkvw.shape[3] or j >= out_ft.shape[3]:
                continue
            out_ft[:, :, :, j] = xqkvw[:, :, :, i]
        # Return to time domain
        out = torch.fft.irfft(out_ft / self.in_channels / self.out_channels, n=xq.size(-1))
        return (out, None)

# a small encoder-decoder around the two blocks (eight heads, as their weights' leading 8
# requires), trained to forecast a drawn series
class FrequencyForecaster(nn.Module):
    def __init__(self, d_model, enc_len, dec_len, modes, activation):
        super().__init__()
        self.d_model, self.enc_len, self.dec_len = d_model, enc_len, dec_len
        self.embed = nn.Linear(3, d_model)
        self.self_block = FourierBlock(d_model, d_model, enc_len, modes=modes)
        self.cross = FourierCrossAttention(d_model, d_model, dec_len, enc_len, modes=modes, activation=activation)
        self.norm = nn.LayerNorm(d_model)
        self.out = nn.Linear(d_model, 3)

    def forward(self, enc_x, dec_x):
        B = enc_x.shape[0]
        e = self.embed(enc_x).view(B, self.enc_len, 8, self.d_model // 8)
        s, _ = self.self_block(e, e, e, None)  # [B, H, E, L]
        e = e + s.permute(0, 3, 1, 2)
        d = self.embed(dec_x).view(B, self.dec_len, 8, self.d_model // 8)
        c, _ = self.cross(d, e, e, None)
        h = self.norm((d + c.permute(0, 3, 1, 2)).reshape(B, self.dec_len, self.d_model))
        return self.out(h)


model = FrequencyForecaster(16, 24, 12, modes=4, activation=activation)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
series = torch.tensor(series_values)  # [B, 36, 3]
enc_x, target = series[:, :24], series[:, 24:]
dec_x = torch.cat([enc_x[:, -6:], torch.zeros_like(target[:, :6])], dim=1)
for step in range(3):
    loss = nn.functional.mse_loss(model(enc_x, dec_x), target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append(loss.item())
    record.append(params_of(model))
'''

FOURIER_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
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
    t = np.arange(36)[None, :, None]
    series = np.sin(2 * np.pi * t / np.array([6.0, 9.0, 12.0]) + rng.uniform(0, 6, (4, 1, 3)))
    series = (series + 0.1 * rng.standard_normal((4, 36, 3))).astype(np.float32)
    (theirs, ours), logs = runs_with_draws(
        FOURIER_SOURCE, FOURIER_STEPS, capsys, 3260,
        activation=activation, series_values=series, initialize=initializer(), params_of=params_with_parts,
    )  # fmt: skip
    assert logs[0] == logs[1]
    assert "modes=4, index=[" in logs[0] and "modes_kv=4, index_kv=[" in logs[0]
    assert theirs[1]["0.cross.weights1"].shape == (2, 8, 2, 2, 4)  # complex: both parts compared
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
