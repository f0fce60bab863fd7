"""Real ports, continued (the harness: ``tests/real_ports.py``): a program written here in the
style of huyanxin/DeepComplexCRN (DCCRN, a deep complex convolution recurrent network for
speech enhancement), run under torch and, ported, under retrograd from the same weights and
draws.

Its surface: an STFT as ``F.conv1d`` of Fourier kernels (``np.fft.rfft(np.eye(N))`` times
scipy's ``get_window("hann")``, the inverse's by ``np.linalg.pinv``) held by
``register_buffer``, magnitudes and ``torch.atan2`` phases; its inverse as
``F.conv_transpose1d`` divided by the overlapped squared window (a ``conv_transpose1d`` of
``window.repeat`` against an identity buffer); complex convolutions (causal ``F.pad``) and
transposed convolutions on ``torch.chunk`` halves, a complex LSTM from real and imaginary
parts, ``complex_cat``; a complex batch norm with uninitialised ``torch.Tensor(n)``
parameters filled in place, running statistics by ``lerp_``, ``num_batches_tracked += 1``,
the 2x2 whitening through the deprecated ``torch.addcmul(input, -1, t1, t2)`` and an
``extra_repr`` formatted from ``self.__dict__``; ``PReLU``; the E mask (``tanh`` of the mask
magnitude, its ``atan2`` phase added), ``torch.clamp_`` of the waveform, two weight-decay
parameter groups for ``SGD`` with momentum, an SI-SNR loss, the printed structure and
parameter count (``p.size()`` iterated), and a run in eval mode.

SGD, not Adam: Adam would move the biases that the batch norms cancel by the rounding noise of
their zero gradients. The noisy speech is a chirp plus ``torch.randn(...).clamp_(-1, 1)``
noise drawn from one shared stream; the weights are torch's (``initialize``). The port changes
the import lines and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import pytest
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
    state_of,
)

DCCRN_SOURCE = """
import numpy as np
import torch
from scipy import signal
from torch import nn
from torch.nn import functional as F


def fourier_kernels(win, fft, inverse=False):
    window = signal.get_window("hann", win, fftbins=True)
    basis = np.fft.rfft(np.eye(fft))[:win]
    kernel = np.concatenate([basis.real, basis.imag], 1).T  # [fft + 2, win]
    if inverse:
        kernel = np.linalg.pinv(kernel).T  # synthesis kernels
    kernel = (kernel * window)[:, None, :].astype(np.float32)
    return torch.from_numpy(kernel), torch.from_numpy(window[None, :, None].astype(np.float32))


class ConvSTFT(nn.Module):
    def __init__(self, win, hop, fft):
        super().__init__()
        self.win, self.hop, self.bins = win, hop, fft // 2 + 1
        self.register_buffer("weight", fourier_kernels(win, fft)[0])

    def forward(self, wav):
        if wav.dim() == 2:
            wav = torch.unsqueeze(wav, 1)
        wav = F.pad(wav, [self.win - self.hop, self.win - self.hop])
        spec = F.conv1d(wav, self.weight, stride=self.hop)
        re, im = spec[:, : self.bins, :], spec[:, self.bins :, :]
        return torch.sqrt(re**2 + im**2), torch.atan2(im, re)


class ConvISTFT(nn.Module):
    def __init__(self, win, hop, fft):
        super().__init__()
        self.win, self.hop = win, hop
        kernel, window = fourier_kernels(win, fft, inverse=True)
        self.register_buffer("weight", kernel)
        self.register_buffer("window", window)
        self.register_buffer("frames", torch.eye(win)[:, None, :])

    def forward(self, spec):
        wav = F.conv_transpose1d(spec, self.weight, stride=self.hop)
        overlap = self.window.repeat(1, 1, spec.size(-1)) ** 2
        norm = F.conv_transpose1d(overlap, self.frames, stride=self.hop)
        cut = self.win - self.hop
        return (wav / (norm + 1e-8))[..., cut:-cut]


def complex_cat(parts, dim):
    halves = [torch.chunk(p, 2, dim) for p in parts]
    real = torch.cat([h[0] for h in halves], dim)
    return torch.cat([real, torch.cat([h[1] for h in halves], dim)], dim)


class ComplexConv(nn.Module):
    # channels are [real | imag]; (5, 2) kernels over (frequency, time), causal in time
    def __init__(self, cin, cout, transpose=False):
        super().__init__()
        self.transpose = transpose
        if transpose:
            make = lambda: nn.ConvTranspose2d(cin // 2, cout // 2, (5, 2), (2, 1), (2, 0), (1, 0))
        else:
            make = lambda: nn.Conv2d(cin // 2, cout // 2, (5, 2), (2, 1), (2, 0))
        self.wr, self.wi = make(), make()

    def forward(self, x):
        if not self.transpose:
            x = F.pad(x, [1, 0, 0, 0])
        xr, xi = torch.chunk(x, 2, 1)
        return torch.cat([self.wr(xr) - self.wi(xi), self.wr(xi) + self.wi(xr)], 1)


class ComplexNorm(nn.Module):
    # whitens each (real, imag) channel pair by the inverse square root of its 2x2 covariance
    def __init__(self, channels, eps=1e-5, momentum=0.1):
        super().__init__()
        self.pairs, self.eps, self.momentum = channels // 2, eps, momentum
        self.Wrr, self.Wri, self.Wii, self.Br, self.Bi = (
            nn.Parameter(torch.Tensor(self.pairs)) for _ in range(5)
        )
        for name, fill in (("Mr", 0), ("Mi", 0), ("Vrr", 1), ("Vri", 0), ("Vii", 1)):
            self.register_buffer(name, torch.full((self.pairs,), float(fill)))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.Wrr.data.fill_(1)
        self.Wii.data.fill_(1)
        self.Wri.data.uniform_(-0.9, 0.9)
        self.Br.data.zero_()
        self.Bi.data.zero_()

    def extra_repr(self):
        return "{pairs}, eps={eps}, momentum={momentum}".format(**self.__dict__)

    def forward(self, x):
        xr, xi = torch.chunk(x, 2, 1)
        shape = [1, self.pairs, 1, 1]

        def reduce(t):
            for d in (3, 2, 0):
                t = t.mean(d, keepdim=True)
            return t

        if self.training:
            self.num_batches_tracked += 1
            mr, mi = reduce(xr), reduce(xi)
            self.Mr.lerp_(mr.squeeze(), self.momentum)
            self.Mi.lerp_(mi.squeeze(), self.momentum)
        else:
            mr, mi = self.Mr.view(shape), self.Mi.view(shape)
        xr, xi = xr - mr, xi - mi
        if self.training:
            vrr, vri, vii = reduce(xr * xr), reduce(xr * xi), reduce(xi * xi)
            for buf, v in ((self.Vrr, vrr), (self.Vri, vri), (self.Vii, vii)):
                buf.lerp_(v.squeeze(), self.momentum)
        else:
            vrr, vri, vii = self.Vrr.view(shape), self.Vri.view(shape), self.Vii.view(shape)
        vrr, vii = vrr + self.eps, vii + self.eps
        s = torch.addcmul(vrr * vii, -1, vri, vri).sqrt()  # sqrt of the determinant
        inv = (s * (vrr + vii + 2 * s).sqrt()).reciprocal()
        urr, uii, uri = (s + vii) * inv, (s + vrr) * inv, -vri * inv
        wrr, wri, wii = self.Wrr.view(shape), self.Wri.view(shape), self.Wii.view(shape)
        yr = (wrr * urr + wri * uri) * xr + (wrr * uri + wri * uii) * xi + self.Br.view(shape)
        yi = (wri * urr + wii * uri) * xr + (wri * uri + wii * uii) * xi + self.Bi.view(shape)
        return torch.cat([yr, yi], 1)


class ComplexLSTM(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.re, self.im = nn.LSTM(size, size), nn.LSTM(size, size)

    def forward(self, parts):
        xr, xi = parts
        return [self.re(xr)[0] - self.im(xi)[0], self.im(xr)[0] + self.re(xi)[0]]


class Enhancer(nn.Module):
    def __init__(self, win, hop, fft, channels, complex_lstm, complex_bn):
        super().__init__()
        self.stft, self.istft = ConvSTFT(win, hop, fft), ConvISTFT(win, hop, fft)
        self.complex_lstm = complex_lstm
        norm = ComplexNorm if complex_bn else nn.BatchNorm2d
        sizes = [2, *channels]
        self.encoder = nn.ModuleList(
            nn.Sequential(ComplexConv(a, b), norm(b), nn.PReLU()) for a, b in zip(sizes, sizes[1:])
        )
        self.decoder = nn.ModuleList()  # mirrors the encoder
        for a, b in reversed(list(zip(sizes, sizes[1:]))):
            layers = [ComplexConv(2 * b, a, transpose=True)]
            if a != 2:
                layers += [norm(a), nn.PReLU()]
            self.decoder.append(nn.Sequential(*layers))
        width = channels[-1] * (fft // 2) // 2 ** len(channels)
        self.rnn = ComplexLSTM(width // 2) if complex_lstm else nn.LSTM(width, width)

    def forward(self, wav):
        mags, phase = self.stft(wav)
        x = torch.stack([mags * torch.cos(phase), mags * torch.sin(phase)], 1)[:, :, 1:]
        skips = []
        for layer in self.encoder:
            x = layer(x)
            skips.append(x)
        B, C, Q, T = x.size()
        seq = x.permute(3, 0, 1, 2)  # time first
        if self.complex_lstm:
            half = C // 2
            parts = [seq[:, :, :half].reshape(T, B, -1), seq[:, :, half:].reshape(T, B, -1)]
            r, i = self.rnn(parts)
            seq = torch.cat([r.reshape(T, B, C // 2, Q), i.reshape(T, B, C // 2, Q)], 2)
        else:
            seq = self.rnn(seq.reshape(T, B, C * Q))[0].reshape(T, B, C, Q)
        x = seq.permute(1, 2, 3, 0)
        for layer in self.decoder:
            x = layer(complex_cat([x, skips.pop()], 1))[..., 1:]
        mr, mi = F.pad(x[:, 0], [0, 0, 1, 0]), F.pad(x[:, 1], [0, 0, 1, 0])  # the DC bin back
        mask_mag = (mr**2 + mi**2) ** 0.5
        mask_phase = torch.atan2(mi / (mask_mag + 1e-8), mr / (mask_mag + 1e-8))
        est_mag, est_phase = torch.tanh(mask_mag) * mags, phase + mask_phase
        spec = torch.cat([est_mag * torch.cos(est_phase), est_mag * torch.sin(est_phase)], 1)
        out = torch.squeeze(self.istft(spec), 1)
        return spec, torch.clamp_(out, -1, 1)

    def param_groups(self, decay):
        named = list(self.named_parameters())
        return [
            {"params": [p for n, p in named if "bias" not in n], "weight_decay": decay},
            {"params": [p for n, p in named if "bias" in n], "weight_decay": 0.0},
        ]


def neg_si_snr(est, ref, eps=1e-8):
    dot = lambda a, b: torch.sum(a * b, -1, keepdim=True)
    target = dot(est, ref) / (dot(ref, ref) + eps) * ref
    noise = est - target
    return -torch.mean(10 * torch.log10(dot(target, target) / (dot(noise, noise) + eps) + eps))


def describe(model):
    total = 0
    for name, p in model.named_parameters():
        print(name, p.size())
        count = 1
        for d in p.size():
            count *= d
        total += count
    print(model)
    print("[*] Parameter Size: {}".format(total))


noise = torch.randn([4, length]).clamp_(-1, 1)
noisy = 0.5 * clean + 0.2 * noise
model = Enhancer(32, 8, 32, channels=[4, 8], complex_lstm=complex_lstm, complex_bn=complex_bn)
initialize(model)
describe(model)
opt = torch.optim.SGD(model.param_groups(1e-5), lr=0.05, momentum=0.9)
for step in range(3):
    opt.zero_grad()
    _, enhanced = model(noisy)
    loss = neg_si_snr(enhanced, clean)
    loss.backward()
    opt.step()
    print(step, loss.item())
    record.append(loss.item())
    record.append(params_of(model))
model.eval()
with torch.no_grad():
    _, enhanced = model(noisy)
    mags, phase = ConvSTFT(32, 8, 32)(enhanced)
    arrays = dict(out=enhanced.numpy(), mags=mags.numpy(), phase=phase.numpy())
    record.append({**arrays, **state_of(model)})
    print(neg_si_snr(enhanced, clean).item())
"""

DCCRN_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


@pytest.mark.parametrize("complex_lstm, complex_bn", [(True, True), (False, False)])
def test_dccrn_trains_on_noisy_speech_as_torch(capsys, complex_lstm, complex_bn):
    torch.manual_seed(0)
    np.random.seed(0)
    length = 128
    t = np.arange(length) / 8000.0
    chirp = 0.6 * np.sin(2 * np.pi * (300 + 2000 * t) * t)
    initialize, records, logs = initializer(), [], []
    for lib in (torch, rg):
        text = DCCRN_SOURCE if lib is torch else ported_imports(port(DCCRN_SOURCE, DCCRN_STEPS))
        record = []
        with SharedDraws(lib, 423):
            run_source(
                text,
                lib,
                length=length,
                complex_lstm=complex_lstm,
                complex_bn=complex_bn,
                record=record,
                params_of=params_of,
                state_of=state_of,
                initialize=initialize,
                clean=lib.tensor(np.stack([chirp, chirp[::-1], -chirp, chirp]), dtype=lib.float32),
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)
    assert "[*] Parameter Size:" in logs[0]
    structure = slice(None, -1 - 3)  # (the losses printed after it: the records)
    ours = logs[1].replace("retrograd.Size", "torch.Size")  # (each library's ``Size`` repr)
    assert ours.splitlines()[structure] == logs[0].splitlines()[structure]
