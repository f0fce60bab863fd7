# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 79 (the harness: ``tests/real_ports.py``): speech enhancement with complex
masks, a program written here in the style of sweetcocoa/DeepComplexUNetPyTorch (the Deep
Complex U-Net of Choi et al.: complex convolutions as pairs of real ones over a trailing
real/imaginary axis, a U-Net of strided complex convolutions and transposed convolutions with
skip concatenation, a mask applied to the noisy spectrum, the waveform back by the inverse STFT,
and the weighted SDR loss), on complex tensors as its later forks write it, trained a few steps
on synthetic noisy tones under torch and, ported, under retrograd from the same weights and
draws, every record compared; three masks: the bounded-tanh polar mask, the unbounded complex
ratio mask, and a bounded real magnitude mask. It runs in float64 (``model.double()``, the
batches ``.double()``, complex128 spectra): the convolution biases a batch norm cancels have a
true gradient of 0, and in float32 Adam's first steps follow its rounding noise.

It reaches:

- the transforms: ``torch.stft(..., window=self.window, return_complex=True)`` of a batch,
  ``torch.view_as_real(...).permute(0, 3, 1, 2).unsqueeze(1)`` to ``[B, 1, F, T, 2]``, and
  back by ``torch.view_as_complex(x.squeeze(1).permute(0, 2, 3, 1).contiguous())`` into
  ``torch.istft(..., length=n)``; the window held by ``register_buffer`` from
  ``torch.hann_window(n_fft)``;
- complex layers: ``ComplexConv2d``/``ComplexConvTranspose2d`` computing ``conv_re(x[..., 0])
  - conv_im(x[..., 1])`` and ``conv_re(x[..., 1]) + conv_im(x[..., 0])`` stacked by
  ``torch.stack(..., dim=-1)`` (``output_padding`` on the transposed ones), a naive complex
  batch norm (``BatchNorm2d`` per part), ``nn.LeakyReLU`` per part, encoders kept in a list
  for the skips, ``torch.cat([p, xs[...]], dim=1)``, ``nn.init.xavier_uniform_`` over
  ``self.modules()`` of ``Conv2d``/``ConvTranspose2d``;
- the masks: bounded tanh (``torch.complex(re, im)``, ``mask.abs()``, ``mask.angle()``,
  ``torch.tanh`` of the magnitude, ``torch.polar(mag * spec.abs(), spec.angle() +
  mask.angle())``), the complex ratio mask ``spec * mask``, and a sigmoid magnitude mask
  times the complex spectrum; ``(mask_real ** 2 + mask_imag ** 2) ** 0.5`` in the bounded
  form's record;
- the loss: ``wsdr_fn`` (``flatten(1)``, ``torch.norm(true, p=2, dim=1)``, the energy ratio
  ``a``) and SI-SNR for the evaluation (``torch.sum(..., dim=-1, keepdim=True)``,
  ``10 * torch.log10``); ``Adam`` with ``clip_grad_norm_``; ``torch.no_grad()`` evaluation
  of the improvement over the noisy input.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, given to ``clip_grad_norm_`` and ``optimizer.step``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

DCUNET_SOURCE = """import torch
import torch.nn as nn


# -- complex_nn.py ---------------------------------------------------------------------------
class ComplexConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, stride=1, padding=0, **kwargs):
        super().__init__()
        self.conv_re = nn.Conv2d(in_channel, out_channel, kernel_size, stride=stride, padding=padding, **kwargs)
        self.conv_im = nn.Conv2d(in_channel, out_channel, kernel_size, stride=stride, padding=padding, **kwargs)

    def forward(self, x):  # shpae of x : [batch,channel,axis1,axis2,2]
        real = self.conv_re(x[..., 0]) - self.conv_im(x[..., 1])
        imaginary = self.conv_re(x[..., 1]) + self.conv_im(x[..., 0])
        output = torch.stack((real, imaginary), dim=-1)
        return output


class ComplexConvTranspose2d(nn.Module):
    def __init__(self, in_channel, out_channel, kernel_size, stride=1, padding=0, output_padding=0, **kwargs):
        super().__init__()
        self.tconv_re = nn.ConvTranspose2d(in_channel, out_channel, kernel_size=kernel_size, stride=stride,
                                           padding=padding, output_padding=output_padding, **kwargs)
        self.tconv_im = nn.ConvTranspose2d(in_channel, out_channel, kernel_size=kernel_size, stride=stride,
                                           padding=padding, output_padding=output_padding, **kwargs)

    def forward(self, x):  # shpae of x : [batch,channel,axis1,axis2,2]
        real = self.tconv_re(x[..., 0]) - self.tconv_im(x[..., 1])
        imaginary = self.tconv_re(x[..., 1]) + self.tconv_im(x[..., 0])
        output = torch.stack((real, imaginary), dim=-1)
        return output


class ComplexBatchNorm2d(nn.Module):
    def __init__(self, num_features, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True, **kwargs):
        super().__init__()
        self.bn_re = nn.BatchNorm2d(num_features=num_features, momentum=momentum, affine=affine, eps=eps,
                                    track_running_stats=track_running_stats, **kwargs)
        self.bn_im = nn.BatchNorm2d(num_features=num_features, momentum=momentum, affine=affine, eps=eps,
                                    track_running_stats=track_running_stats, **kwargs)

    def forward(self, x):
        real = self.bn_re(x[..., 0])
        imag = self.bn_im(x[..., 1])
        output = torch.stack((real, imag), dim=-1)
        return output


# -- unet.py ---------------------------------------------------------------------------------
class Encoder(nn.Module):
    def __init__(self, in_channels=1, out_channels=4, kernel_size=(3, 3), stride=(2, 1), padding=(1, 1)):
        super().__init__()
        self.conv = ComplexConv2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride, padding=padding)
        self.bn = ComplexBatchNorm2d(out_channels)
        self.relu = nn.LeakyReLU(inplace=True)

    def forward(self, x):
        x = self.conv(x)
        x = self.bn(x)
        x = self.relu(x)
        return x


class Decoder(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size=(3, 3), stride=(2, 1), padding=(1, 1),
                 output_padding=(0, 0), last_layer=False):
        super().__init__()
        self.transconv = ComplexConvTranspose2d(in_channels, out_channels, kernel_size=kernel_size, stride=stride,
                                                padding=padding, output_padding=output_padding)
        self.bn = ComplexBatchNorm2d(num_features=out_channels)
        self.relu = nn.LeakyReLU(inplace=True)
        self.last_layer = last_layer

    def forward(self, x):
        x = self.transconv(x)
        if not self.last_layer:
            x = self.bn(x)
            x = self.relu(x)
        return x


class DCUnet(nn.Module):
    def __init__(self, n_fft=64, hop_length=16, mask_type="bounded_tanh"):
        super().__init__()
        self.n_fft = n_fft
        self.hop_length = hop_length
        self.mask_type = mask_type
        self.register_buffer("window", torch.hann_window(n_fft))
        self.encoders = nn.ModuleList([Encoder(1, 4), Encoder(4, 8)])
        self.decoders = nn.ModuleList([
            Decoder(8, 4),
            Decoder(8, 1, last_layer=True),
        ])
        self.model_length = len(self.decoders)
        for m in self.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                nn.init.xavier_uniform_(m.weight)

    def stft(self, wav):
        spec = torch.stft(wav, n_fft=self.n_fft, hop_length=self.hop_length, window=self.window,
                          return_complex=True)
        return spec

    def istft(self, spec, length):
        return torch.istft(spec, n_fft=self.n_fft, hop_length=self.hop_length, window=self.window,
                           length=length)

    def forward(self, wav):
        spec = self.stft(wav)  # [B, F, T] complex
        x = torch.view_as_real(spec).permute(0, 3, 1, 2).unsqueeze(1)  # [B, 1, 2, F, T]
        x = x.permute(0, 1, 3, 4, 2)  # [B, 1, F, T, 2]
        xs = []
        for i, encoder in enumerate(self.encoders):
            xs.append(x)
            x = encoder(x)
        p = x
        for i, decoder in enumerate(self.decoders):
            p = decoder(p)
            if i == self.model_length - 1:
                break
            p = torch.cat([p, xs[self.model_length - 1 - i]], dim=1)

        mask_real, mask_imag = p[:, 0, ..., 0], p[:, 0, ..., 1]
        if self.mask_type == "bounded_tanh":
            mask = torch.complex(mask_real, mask_imag)
            mask_mag = torch.tanh(mask.abs())
            est = torch.polar(mask_mag * spec.abs(), spec.angle() + mask.angle())
            self.last_mask_mag = (mask_real ** 2 + mask_imag ** 2) ** 0.5
        elif self.mask_type == "unbounded":
            mask = torch.view_as_complex(torch.stack([mask_real, mask_imag], dim=-1).contiguous())
            est = spec * mask
            self.last_mask_mag = mask.abs()
        else:
            mask_mag = torch.sigmoid(mask_real)
            est = spec * mask_mag
            self.last_mask_mag = mask_mag
        return self.istft(est, wav.size(-1))


# -- train.py --------------------------------------------------------------------------------
def wsdr_fn(x_, y_pred_, y_true_, eps=1e-8):
    # to time-domain waveform
    y_pred = y_pred_.flatten(1)
    y_true = y_true_.flatten(1)
    x = x_.flatten(1)

    def sdr_fn(true, pred, eps=1e-8):
        num = torch.sum(true * pred, dim=1)
        den = torch.norm(true, p=2, dim=1) * torch.norm(pred, p=2, dim=1)
        return -(num / (den + eps))

    # true and estimated noise
    z_true = x - y_true
    z_pred = x - y_pred

    a = torch.sum(y_true**2, dim=1) / (torch.sum(y_true**2, dim=1) + torch.sum(z_true**2, dim=1) + eps)
    wSDR = a * sdr_fn(y_true, y_pred) + (1 - a) * sdr_fn(z_true, z_pred)
    return torch.mean(wSDR)


def si_snr(estimate, reference, eps=1e-8):
    estimate = estimate - estimate.mean(dim=-1, keepdim=True)
    reference = reference - reference.mean(dim=-1, keepdim=True)
    projection = torch.sum(estimate * reference, dim=-1, keepdim=True) * reference / (
        torch.sum(reference ** 2, dim=-1, keepdim=True) + eps)
    noise = estimate - projection
    return 10 * torch.log10(torch.sum(projection ** 2, dim=-1) / (torch.sum(noise ** 2, dim=-1) + eps))


def make_batch(n, length=320):
    t = torch.arange(length).double() / 4000
    freqs = 200.0 + 600.0 * torch.rand(n, 2).double()
    clean = 0.5 * torch.sin(2 * math.pi * freqs[:, :1] * t) + 0.3 * torch.sin(2 * math.pi * freqs[:, 1:] * t)
    noisy = clean + 0.3 * torch.randn(n, length).double()
    return noisy, clean


model = DCUnet(mask_type=MASK)
initialize(model)
model = model.double()
optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
for step in range(3):
    model.train()
    noisy, clean = make_batch(4)
    optimizer.zero_grad()
    estimate = model(noisy)
    loss = wsdr_fn(noisy, estimate, clean)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    print(f"step {step} wSDR {loss.item():.4f}")
    record.append([loss.item(), norm.item()])
    record.append(model.last_mask_mag.detach().numpy().copy())
    record.append(params_of(model))

model.eval()
with torch.no_grad():
    noisy, clean = make_batch(3)
    estimate = model(noisy)
    improvement = si_snr(estimate, clean) - si_snr(noisy, clean)
record.append(estimate.numpy().copy())
record.append(improvement.numpy().copy())
"""

DCUNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("clip_grad_norm_(model.parameters(), 5.0)", "clip_grad_norm_(grads, model.parameters(), 5.0)"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


@pytest.mark.parametrize("mask", ["bounded_tanh", "unbounded", "sigmoid_magnitude"])
def test_deep_complex_unet_enhancement_as_torch(capsys, mask):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        DCUNET_SOURCE,
        DCUNET_STEPS,
        capsys,
        7941,
        initialize=initializer(),
        params_of=params_of,
        MASK=mask,
    )
    assert len(theirs) == 3 * 3 + 2
    assert their_log == our_log and their_log.count("wSDR") == 3
    assert_records_agree(ours, theirs, rtol=1e-6, atol=1e-8)
