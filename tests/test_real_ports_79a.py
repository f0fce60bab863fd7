# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 79 (the harness: ``tests/real_ports.py``): speech recognition by CTC, a
program written here in the style of NVIDIA NeMo's QuartzNet/Jasper recipe (its
``FilterbankFeatures`` front end with ``normalize_batch``, ``SpecAugment``, the
``JasperBlock``/``MaskedConv1d`` encoder, ``ConvASRDecoder``, the ``CTCLoss`` subclass, the
``Novograd`` optimizer under a warmup-cosine ``_LRScheduler`` and greedy CTC decoding scored by
word error rate), trained a few steps on synthetic tone "speech" under torch and, ported, under
retrograd from the same weights and draws, every record compared; three configurations:
per-feature normalisation with NeMo's ``mean_batch`` reduction, all-feature normalisation with
torch's ``mean`` reduction and Novograd's AMSGrad, and the ``none`` reduction with Novograd's
layer-wise update clipping (``luc``).

It reaches:

- the features: ``torch.hann_window(n, periodic=False)`` from a dict of window functions
  registered as a buffer; a Slaney mel filterbank written with torch ops (``torch.linspace``,
  boolean-mask writes ``mels[log_t] = ...``, ``torch.diff``, ``torch.minimum``, ``torch.clamp``,
  ``weights *= enorm.unsqueeze(1)``); ``torch.floor_divide`` of the lengths and
  ``.to(dtype=torch.long)``; ``F.pad(x.unsqueeze(1), ..., "reflect")`` for the exact padding;
  the dither ``x += dither * torch.randn_like(x)`` in place on the caller's batch; the
  pre-emphasis by ``torch.cat((x[:, 0].unsqueeze(1), x[:, 1:] - preemph * x[:, :-1]), dim=1)``;
  ``torch.stft(..., return_complex=True, pad_mode="constant")`` under
  ``torch.amp.autocast(x.device.type, enabled=False)``, ``torch.view_as_real`` and
  ``torch.sqrt(x.pow(2).sum(-1) + guard)``, ``x.pow(mag_power)``, ``torch.matmul`` of the
  filterbank, ``torch.log(x + guard)``; ``normalize_batch`` per feature (``torch.where(mask,
  x, 0.0).sum(axis=2)``, ``masked_fill(x_std.isnan(), 0.0)``, ``x_std += CONSTANT``) and over
  all features (``x_mean[i] = x[i, :, :seq_len[i].item()].mean()``); the pad mask by
  ``mask.repeat(x.size(0), 1) >= seq_len.unsqueeze(1)`` and ``.type(torch.bool)``;
  ``pad_to`` by ``nn.functional.pad(x, (0, n), value=...)``;
- ``SpecAugment`` under ``@torch.no_grad()``: frequency and time bands from a seeded
  ``random.Random`` written by ``input_spec[idx, a:b, :] = mask_value``;
- the encoder: ``MaskedConv1d`` masking its input by ``torch.arange(max_len).expand(len(lens),
  max_len) >= lens.unsqueeze(1)`` and ``masked_fill``, its lengths by ``torch.div(...,
  rounding_mode='trunc')``; time-channel separable convolutions (a depthwise ``Conv1d(...,
  groups=in_channels, dilation=...)`` and a pointwise one), ``BatchNorm1d(eps=1e-3,
  momentum=0.1)``, ``GroupShuffle`` (``view``/``torch.transpose``/``contiguous``), a squeeze-
  excite of the masked mean, ``nn.Hardtanh(min_val=0.0, max_val=20.0)`` and ``nn.Dropout``,
  residual 1x1 branches, dense residual panes (``xs + [out]``), blocks chained by
  ``nn.Sequential`` over ``([x], lens)`` tuples, ``self.apply(lambda x: init_weights(x,
  mode=...))`` with ``xavier_uniform_``/``kaiming_uniform_(nonlinearity="relu")`` and
  ``running_var.fill_(1)``/``num_batches_tracked.zero_()``;
- the head and loss: ``F.log_softmax(conv(x).transpose(1, 2), dim=-1)``; a ``nn.CTCLoss``
  subclass calling ``super().forward(log_probs=..., targets=..., input_lengths=...,
  target_lengths=...)`` on ``log_probs.transpose(1, 0)`` with ``zero_infinity=True`` and a
  utterance whose transcript cannot fit its frames, then ``torch.mean`` for ``mean_batch``;
- Novograd as an ``Optimizer`` subclass: ``torch.zeros([]).to(device)`` state,
  ``grad.norm().pow(2)``, ``if exp_avg_sq == 0`` on a 0-d tensor, ``copy_``, ``mul_(...).add_(
  ..., alpha=...)``, ``torch.max(a, b, out=a)``, ``grad.div_(denom)``, ``p.data.add_(exp_avg,
  alpha=-luc_factor)`` with a 0-d tensor ``alpha`` from ``min`` of a tensor and a float;
  ``__setstate__``; a ``_LRScheduler`` subclass with keyword-only arguments reading
  ``self._get_lr_called_within_step``;
- evaluation in ``eval()`` under ``torch.no_grad()``: greedy CTC decoding from
  ``argmax(dim=-1, keepdim=False)`` rows collapsed in Python, and a word error rate by edit
  distance.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``; ``step(grads)``; Novograd reading ``p.grad(grads)``).
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

QUARTZNET_SOURCE = """import random
import warnings
from functools import partial

import torch
import torch.nn as nn
from torch.optim.lr_scheduler import _LRScheduler
from torch.optim.optimizer import Optimizer

CONSTANT = 1e-5


# -- nemo/collections/asr/parts/preprocessing/features.py -------------------------------------
def hz_to_mel(freqs):
    f_min, f_sp = 0.0, 200.0 / 3
    mels = (freqs - f_min) / f_sp
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = math.log(6.4) / 27.0
    log_t = freqs >= min_log_hz
    mels[log_t] = min_log_mel + torch.log(freqs[log_t] / min_log_hz) / logstep
    return mels


def mel_to_hz(mels):
    f_min, f_sp = 0.0, 200.0 / 3
    freqs = f_min + f_sp * mels
    min_log_hz = 1000.0
    min_log_mel = (min_log_hz - f_min) / f_sp
    logstep = math.log(6.4) / 27.0
    log_t = mels >= min_log_mel
    freqs[log_t] = min_log_hz * torch.exp(logstep * (mels[log_t] - min_log_mel))
    return freqs


def mel_filters(sr, n_fft, n_mels, fmin, fmax):
    fftfreqs = torch.linspace(0, sr / 2, 1 + n_fft // 2, dtype=torch.float64)
    bounds = hz_to_mel(torch.tensor([float(fmin), float(fmax)], dtype=torch.float64))
    mel_f = mel_to_hz(torch.linspace(bounds[0].item(), bounds[1].item(), n_mels + 2, dtype=torch.float64))
    fdiff = torch.diff(mel_f)
    ramps = mel_f.unsqueeze(1) - fftfreqs.unsqueeze(0)
    lower = -ramps[:-2] / fdiff[:-1].unsqueeze(1)
    upper = ramps[2:] / fdiff[1:].unsqueeze(1)
    weights = torch.clamp(torch.minimum(lower, upper), min=0)
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    weights *= enorm.unsqueeze(1)
    return weights.float()


def normalize_batch(x, seq_len, normalize_type):
    x_mean = None
    x_std = None
    if normalize_type == "per_feature":
        batch_size = x.shape[0]
        max_time = x.shape[2]
        time_steps = torch.arange(max_time, device=x.device).unsqueeze(0).expand(batch_size, max_time)
        valid_mask = time_steps < seq_len.unsqueeze(1)
        x_mean_numerator = torch.where(valid_mask.unsqueeze(1), x, 0.0).sum(axis=2)
        x_mean_denominator = valid_mask.sum(axis=1)
        x_mean = x_mean_numerator / x_mean_denominator.unsqueeze(1)
        x_std = torch.sqrt(
            torch.sum(torch.where(valid_mask.unsqueeze(1), x - x_mean.unsqueeze(2), 0.0) ** 2, axis=2)
            / (x_mean_denominator.unsqueeze(1) - 1.0)
        )
        x_std = x_std.masked_fill(x_std.isnan(), 0.0)
        x_std += CONSTANT
        return (x - x_mean.unsqueeze(2)) / x_std.unsqueeze(2), x_mean, x_std
    elif normalize_type == "all_features":
        x_mean = torch.zeros(seq_len.shape, dtype=x.dtype, device=x.device)
        x_std = torch.zeros(seq_len.shape, dtype=x.dtype, device=x.device)
        for i in range(x.shape[0]):
            x_mean[i] = x[i, :, : seq_len[i].item()].mean()
            x_std[i] = x[i, :, : seq_len[i].item()].std()
        x_std += CONSTANT
        return (x - x_mean.view(-1, 1, 1)) / x_std.view(-1, 1, 1), x_mean, x_std
    return x, x_mean, x_std


class FilterbankFeatures(nn.Module):
    def __init__(self, sample_rate=4000, n_window_size=64, n_window_stride=16, window="hann",
                 normalize="per_feature", n_fft=None, preemph=0.97, nfilt=16, lowfreq=0,
                 highfreq=None, log=True, log_zero_guard_value=2 ** -24, dither=CONSTANT,
                 pad_to=8, exact_pad=False, pad_value=0, mag_power=2.0, use_grads=False):
        super().__init__()
        self.log_zero_guard_value = log_zero_guard_value
        self.win_length = n_window_size
        self.hop_length = n_window_stride
        self.n_fft = n_fft or 2 ** math.ceil(math.log2(self.win_length))
        self.stft_pad_amount = (self.n_fft - self.hop_length) // 2 if exact_pad else None
        self.exact_pad = exact_pad
        torch_windows = {
            'hann': torch.hann_window,
            'hamming': torch.hamming_window,
            'blackman': torch.blackman_window,
            'bartlett': torch.bartlett_window,
            'none': None,
        }
        window_fn = torch_windows.get(window, None)
        window_tensor = window_fn(self.win_length, periodic=False) if window_fn else None
        self.register_buffer("window", window_tensor)
        self.normalize = normalize
        self.log = log
        self.dither = dither
        self.nfilt = nfilt
        self.preemph = preemph
        self.pad_to = pad_to
        highfreq = highfreq or sample_rate / 2
        filterbanks = mel_filters(sample_rate, self.n_fft, nfilt, lowfreq, highfreq).unsqueeze(0)
        self.register_buffer("fb", filterbanks)
        self.pad_value = pad_value
        self.mag_power = mag_power
        self.use_grads = use_grads

    def get_seq_len(self, seq_len):
        pad_amount = self.stft_pad_amount * 2 if self.stft_pad_amount is not None else self.n_fft // 2 * 2
        seq_len = torch.floor_divide((seq_len + pad_amount - self.n_fft), self.hop_length) + 1
        return seq_len.to(dtype=torch.long)

    def stft(self, x):
        return torch.stft(
            x,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            center=False if self.exact_pad else True,
            window=self.window.to(dtype=torch.float),
            return_complex=True,
            pad_mode="constant",
        )

    def log_zero_guard_value_fn(self, x):
        return self.log_zero_guard_value

    @torch.no_grad()
    def forward(self, x, seq_len):
        seq_len = self.get_seq_len(seq_len)

        if self.stft_pad_amount is not None:
            x = torch.nn.functional.pad(
                x.unsqueeze(1), (self.stft_pad_amount, self.stft_pad_amount), "reflect"
            ).squeeze(1)

        # dither (only in training mode for eval determinism)
        if self.training and self.dither > 0:
            x += self.dither * torch.randn_like(x)

        # do preemphasis
        if self.preemph is not None:
            x = torch.cat((x[:, 0].unsqueeze(1), x[:, 1:] - self.preemph * x[:, :-1]), dim=1)

        # disable autocast to get full range of stft values
        with torch.amp.autocast(x.device.type, enabled=False):
            x = self.stft(x)

        # torch stft returns complex tensor (of shape [B,N,T]); so convert to magnitude
        guard = 0 if not self.use_grads else CONSTANT
        x = torch.view_as_real(x)
        x = torch.sqrt(x.pow(2).sum(-1) + guard)

        # get power spectrum
        if self.mag_power != 1.0:
            x = x.pow(self.mag_power)

        # dot with filterbank energies
        with torch.amp.autocast(x.device.type, enabled=False):
            x = torch.matmul(self.fb.to(x.dtype), x)

        # log features if required
        if self.log:
            x = torch.log(x + self.log_zero_guard_value_fn(x))

        # normalize if required
        if self.normalize:
            x, _, _ = normalize_batch(x, seq_len, normalize_type=self.normalize)

        # mask to zero any values beyond seq_len in batch, pad to multiple of `pad_to`
        max_len = x.size(-1)
        mask = torch.arange(max_len, device=x.device)
        mask = mask.repeat(x.size(0), 1) >= seq_len.unsqueeze(1)
        x = x.masked_fill(mask.unsqueeze(1).type(torch.bool).to(device=x.device), self.pad_value)
        del mask
        pad_to = self.pad_to
        if pad_to > 0:
            pad_amt = x.size(-1) % pad_to
            if pad_amt != 0:
                x = nn.functional.pad(x, (0, pad_to - pad_amt), value=self.pad_value)
        return x, seq_len


# -- nemo/collections/asr/modules/audio_preprocessing.py: SpecAugment -------------------------
class SpecAugment(nn.Module):
    def __init__(self, freq_masks=0, time_masks=0, freq_width=10, time_width=10, rng=None, mask_value=0.0):
        super().__init__()
        self._rng = random.Random() if rng is None else rng
        self.freq_masks = freq_masks
        self.time_masks = time_masks
        self.freq_width = freq_width
        self.time_width = time_width
        self.mask_value = mask_value

    @torch.no_grad()
    def forward(self, input_spec, length):
        batch_size, num_freq_bins, _ = input_spec.shape
        for idx in range(batch_size):
            for i in range(self.freq_masks):
                x_left = self._rng.randint(0, num_freq_bins - self.freq_width)
                w = self._rng.randint(0, self.freq_width)
                input_spec[idx, x_left : x_left + w, :] = self.mask_value
            for i in range(self.time_masks):
                time_width = self.time_width
                y_left = self._rng.randint(0, max(1, length[idx] - time_width))
                w = self._rng.randint(0, time_width)
                input_spec[idx, :, y_left : y_left + w] = self.mask_value
        return input_spec


# -- nemo/collections/asr/parts/submodules/jasper.py ------------------------------------------
def init_weights(m, mode='xavier_uniform'):
    if isinstance(m, MaskedConv1d):
        init_weights(m.conv, mode)
    if isinstance(m, (nn.Conv1d, nn.Linear)):
        if mode == 'xavier_uniform':
            nn.init.xavier_uniform_(m.weight, gain=1.0)
        elif mode == 'kaiming_uniform':
            nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")
    elif isinstance(m, nn.BatchNorm1d):
        if m.track_running_stats:
            m.running_mean.zero_()
            m.running_var.fill_(1)
            m.num_batches_tracked.zero_()
        if m.affine:
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def get_same_padding(kernel_size, stride, dilation):
    if stride > 1 and dilation > 1:
        raise ValueError("Only stride OR dilation may be greater than 1")
    return (dilation * (kernel_size - 1)) // 2


class MaskedConv1d(nn.Module):
    __constants__ = ["use_conv_mask", "real_out_channels", "heads"]

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, heads=-1, bias=False, use_mask=True):
        super(MaskedConv1d, self).__init__()
        if not (heads == -1 or groups == in_channels):
            raise ValueError("Only use heads for depthwise convolutions")
        self.real_out_channels = out_channels
        if heads != -1:
            in_channels = heads
            out_channels = heads
            groups = heads
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride,
                              padding=padding, dilation=dilation, groups=groups, bias=bias)
        self.use_mask = use_mask
        self.heads = heads
        self.same_padding = (self.conv.stride[0] == 1) and (
            2 * self.conv.padding[0] == self.conv.dilation[0] * (self.conv.kernel_size[0] - 1)
        )

    def get_seq_len(self, lens):
        if self.same_padding:
            return lens
        return (
            torch.div(
                lens + 2 * self.conv.padding[0] - self.conv.dilation[0] * (self.conv.kernel_size[0] - 1) - 1,
                self.conv.stride[0],
                rounding_mode='trunc',
            )
            + 1
        )

    def forward(self, x, lens):
        if self.use_mask:
            lens = lens.to(dtype=torch.long)
            max_len = x.size(2)
            mask = torch.arange(max_len, device=lens.device).expand(len(lens), max_len) >= lens.unsqueeze(1)
            x = x.masked_fill(mask.unsqueeze(1).to(device=x.device), 0)
            lens = self.get_seq_len(lens)

        sh = x.shape
        if self.heads != -1:
            x = x.view(-1, self.heads, sh[-1])
        out = self.conv(x)
        if self.heads != -1:
            out = out.view(sh[0], self.real_out_channels, -1)
        return out, lens


class GroupShuffle(nn.Module):
    def __init__(self, groups, channels):
        super(GroupShuffle, self).__init__()
        self.groups = groups
        self.channels_per_group = channels // groups

    def forward(self, x):
        sh = x.shape
        x = x.view(-1, self.groups, self.channels_per_group, sh[-1])
        x = torch.transpose(x, 1, 2).contiguous()
        x = x.view(-1, self.groups * self.channels_per_group, sh[-1])
        return x


class SqueezeExcite(nn.Module):
    def __init__(self, channels, reduction_ratio, activation=None):
        super(SqueezeExcite, self).__init__()
        if activation is None:
            activation = nn.ReLU(inplace=True)
        self.fc = nn.Sequential(
            nn.Linear(channels, channels // reduction_ratio, bias=False),
            activation,
            nn.Linear(channels // reduction_ratio, channels, bias=False),
        )

    def forward(self, x, lengths):
        max_len = x.shape[-1]
        mask = torch.arange(max_len, device=x.device)[None, :] >= lengths[:, None]
        y = x.masked_fill(mask.unsqueeze(1), 0.0).sum(dim=-1, keepdim=True)
        y = y / lengths.view(-1, 1, 1).to(y.dtype)
        y = y.transpose(1, -1)  # [B, 1, C]
        y = self.fc(y)  # [B, 1, C]
        y = y.transpose(1, -1)  # [B, C, 1]
        y = torch.sigmoid(y)
        return x * y, lengths


class JasperBlock(nn.Module):
    def __init__(self, inplanes, planes, repeat=3, kernel_size=11, stride=1, dilation=1,
                 dropout=0.2, activation=None, residual=True, groups=1, separable=False,
                 heads=-1, normalization="batch", norm_groups=1, residual_mode='add',
                 residual_panes=[], conv_mask=False, se=False, se_reduction_ratio=4):
        super(JasperBlock, self).__init__()
        padding_val = get_same_padding(kernel_size, stride, dilation)
        self.conv_mask = conv_mask
        self.separable = separable
        self.residual_mode = residual_mode
        self.se = se

        inplanes_loop = inplanes
        conv = nn.ModuleList()

        for _ in range(repeat - 1):
            conv.extend(
                self._get_conv_bn_layer(inplanes_loop, planes, kernel_size=kernel_size, stride=stride,
                                        dilation=dilation, padding=padding_val, groups=groups,
                                        heads=heads, separable=separable,
                                        normalization=normalization, norm_groups=norm_groups)
            )
            conv.extend(self._get_act_dropout_layer(drop_prob=dropout, activation=activation))
            inplanes_loop = planes

        conv.extend(
            self._get_conv_bn_layer(inplanes_loop, planes, kernel_size=kernel_size, stride=stride,
                                    dilation=dilation, padding=padding_val, groups=groups,
                                    heads=heads, separable=separable,
                                    normalization=normalization, norm_groups=norm_groups)
        )
        if se:
            conv.append(SqueezeExcite(planes, reduction_ratio=se_reduction_ratio, activation=activation))

        self.mconv = conv

        res_panes = residual_panes.copy()
        self.dense_residual = residual

        if residual:
            res_list = nn.ModuleList()
            if len(residual_panes) == 0:
                res_panes = [inplanes]
                self.dense_residual = False
            for ip in res_panes:
                res = nn.ModuleList(
                    self._get_conv_bn_layer(ip, planes, kernel_size=1, normalization=normalization,
                                            norm_groups=norm_groups, stride=1)
                )
                res_list.append(res)
            self.res = res_list
        else:
            self.res = None

        self.mout = nn.Sequential(*self._get_act_dropout_layer(drop_prob=dropout, activation=activation))

    def _get_conv(self, in_channels, out_channels, kernel_size=11, stride=1, dilation=1, padding=0,
                  bias=False, groups=1, heads=-1, separable=False):
        use_mask = self.conv_mask
        if use_mask:
            return MaskedConv1d(in_channels, out_channels, kernel_size, stride=stride,
                                dilation=dilation, padding=padding, bias=bias, groups=groups,
                                heads=heads, use_mask=use_mask)
        else:
            return nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride,
                             dilation=dilation, padding=padding, bias=bias, groups=groups)

    def _get_conv_bn_layer(self, in_channels, out_channels, kernel_size=11, stride=1, dilation=1,
                           padding=0, bias=False, groups=1, heads=-1, separable=False,
                           normalization="batch", norm_groups=1):
        if norm_groups == -1:
            norm_groups = out_channels

        if separable:
            layers = [
                self._get_conv(in_channels, in_channels, kernel_size, stride=stride, dilation=dilation,
                               padding=padding, bias=bias, groups=in_channels, heads=heads),
                self._get_conv(in_channels, out_channels, kernel_size=1, stride=1, dilation=1,
                               padding=0, bias=bias, groups=groups),
            ]
        else:
            layers = [
                self._get_conv(in_channels, out_channels, kernel_size, stride=stride, dilation=dilation,
                               padding=padding, bias=bias, groups=groups)
            ]

        if normalization == "group":
            layers.append(nn.GroupNorm(num_groups=norm_groups, num_channels=out_channels))
        elif normalization == "batch":
            layers.append(nn.BatchNorm1d(out_channels, eps=1e-3, momentum=0.1))
        else:
            raise ValueError(f"Normalization method ({normalization}) does not match one of [batch, group].")

        if groups > 1:
            layers.append(GroupShuffle(groups, out_channels))
        return layers

    def _get_act_dropout_layer(self, drop_prob=0.2, activation=None):
        if activation is None:
            activation = nn.Hardtanh(min_val=0.0, max_val=20.0)
        layers = [activation, nn.Dropout(p=drop_prob)]
        return layers

    def forward(self, input_):
        lens_orig = None
        xs = input_[0]
        if len(input_) == 2:
            xs, lens_orig = input_

        # compute forward convolutions
        out = xs[-1]

        lens = lens_orig
        for i, l in enumerate(self.mconv):
            # if we're doing masked convolutions, we need to pass in and
            # possibly update the sequence lengths
            if isinstance(l, (MaskedConv1d, SqueezeExcite)):
                out, lens = l(out, lens)
            else:
                out = l(out)

        # compute the residuals
        if self.res is not None:
            for i, layer in enumerate(self.res):
                res_out = xs[i]
                for j, res_layer in enumerate(layer):
                    if isinstance(res_layer, MaskedConv1d):
                        res_out, _ = res_layer(res_out, lens_orig)
                    else:
                        res_out = res_layer(res_out)

                if self.residual_mode == 'add':
                    out = out + res_out
                else:
                    out = torch.max(out, res_out)

        # compute the output
        out = self.mout(out)
        if self.res is not None and self.dense_residual:
            return xs + [out], lens

        return [out], lens


# -- nemo/collections/asr/modules/conv_asr.py -------------------------------------------------
class ConvASREncoder(nn.Module):
    def __init__(self, jasper, activation, feat_in, conv_mask=True, init_mode='xavier_uniform'):
        super().__init__()
        activation = {"relu": nn.ReLU, "hardtanh": partial(nn.Hardtanh, 0.0, 20.0)}[activation]()
        residual_panes = []
        encoder_layers = []
        for lcfg in jasper:
            dense_res = []
            if lcfg.get('residual_dense', False):
                residual_panes.append(feat_in)
                dense_res = residual_panes
            encoder_layers.append(
                JasperBlock(feat_in, lcfg['filters'], repeat=lcfg['repeat'], kernel_size=lcfg['kernel'],
                            stride=lcfg['stride'], dilation=lcfg['dilation'], dropout=lcfg['dropout'],
                            residual=lcfg['residual'], groups=lcfg.get('groups', 1),
                            separable=lcfg.get('separable', False), residual_panes=dense_res,
                            conv_mask=conv_mask, activation=activation, se=lcfg.get('se', False))
            )
            feat_in = lcfg['filters']
        self._feat_out = feat_in
        self.encoder = nn.Sequential(*encoder_layers)
        self.apply(lambda x: init_weights(x, mode=init_mode))

    def forward(self, audio_signal, length=None):
        s_input, length = self.encoder(([audio_signal], length))
        if length is None:
            return s_input[-1]
        return s_input[-1], length


class ConvASRDecoder(nn.Module):
    def __init__(self, feat_in, num_classes, init_mode="xavier_uniform", vocabulary=None):
        super().__init__()
        self.__vocabulary = vocabulary
        self._feat_in = feat_in
        # Add 1 for blank char
        self._num_classes = num_classes + 1
        self.decoder_layers = torch.nn.Sequential(
            torch.nn.Conv1d(self._feat_in, self._num_classes, kernel_size=1, bias=True)
        )
        self.apply(lambda x: init_weights(x, mode=init_mode))

    def forward(self, encoder_output):
        return torch.nn.functional.log_softmax(self.decoder_layers(encoder_output).transpose(1, 2), dim=-1)

    @property
    def vocabulary(self):
        return self.__vocabulary


# -- nemo/collections/asr/losses/ctc.py -------------------------------------------------------
class CTCLoss(nn.CTCLoss):
    def __init__(self, num_classes, zero_infinity=False, reduction='mean_batch'):
        self._blank = num_classes
        if reduction == 'mean_batch':
            ctc_reduction = 'none'
            self._apply_batch_mean = True
        elif reduction in ['sum', 'mean', 'none']:
            ctc_reduction = reduction
            self._apply_batch_mean = False
        super().__init__(blank=self._blank, reduction=ctc_reduction, zero_infinity=zero_infinity)

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        input_lengths = input_lengths.long()
        target_lengths = target_lengths.long()
        targets = targets.long()
        # here we transpose because we expect [B, T, D] while PyTorch assumes [T, B, D]
        log_probs = log_probs.transpose(1, 0)
        loss = super().forward(log_probs=log_probs, targets=targets, input_lengths=input_lengths,
                               target_lengths=target_lengths)
        if self._apply_batch_mean:
            loss = torch.mean(loss)
        return loss


# -- nemo/core/optim/novograd.py --------------------------------------------------------------
class Novograd(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.95, 0.98), eps=1e-8, weight_decay=0,
                 grad_averaging=False, amsgrad=False, luc=False, luc_trust=1e-3, luc_eps=1e-8):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, amsgrad=amsgrad)
        self.luc = luc
        self.luc_trust = luc_trust
        self.luc_eps = luc_eps
        super(Novograd, self).__init__(params, defaults)

    def __setstate__(self, state):
        super(Novograd, self).__setstate__(state)
        for group in self.param_groups:
            group.setdefault("amsgrad", False)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()

        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                if grad.is_sparse:
                    raise RuntimeError("Sparse gradients are not supported.")
                amsgrad = group["amsgrad"]
                state = self.state[p]

                # State initialization
                if not state:
                    state["step"] = 0
                    # Exponential moving average of gradient values
                    state["exp_avg"] = torch.zeros_like(p.data)
                    # Exponential moving average of squared gradient values
                    state["exp_avg_sq"] = torch.zeros([]).to(state["exp_avg"].device)
                    if amsgrad:
                        # Maintains max of all exp. moving avg. of sq. grad. values
                        state["max_exp_avg_sq"] = torch.zeros([]).to(state["exp_avg"].device)

                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                if amsgrad:
                    max_exp_avg_sq = state["max_exp_avg_sq"]
                beta1, beta2 = group["betas"]

                state["step"] += 1

                norm = grad.norm().pow(2)

                if exp_avg_sq == 0:
                    exp_avg_sq.copy_(norm)
                else:
                    exp_avg_sq.mul_(beta2).add_(norm, alpha=1.0 - beta2)

                if amsgrad:
                    # Maintains the maximum of all 2nd moment running avg. till now
                    torch.max(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
                    # Use the max. for normalizing running avg. of gradient
                    denom = max_exp_avg_sq.sqrt().add_(group["eps"])
                else:
                    denom = exp_avg_sq.sqrt().add_(group["eps"])

                grad.div_(denom)
                if group["weight_decay"] != 0:
                    grad.add_(p.data, alpha=group["weight_decay"])
                if group["grad_averaging"]:
                    grad.mul_(1 - beta1)
                exp_avg.mul_(beta1).add_(grad)

                if self.luc:
                    # Clip update so that updates are less than eta*weights
                    data_norm = torch.norm(p.data)
                    grad_norm = torch.norm(exp_avg.data)
                    luc_factor = self.luc_trust * data_norm / (grad_norm + self.luc_eps)
                    luc_factor = min(luc_factor, group["lr"])
                    p.data.add_(exp_avg, alpha=-luc_factor)
                else:
                    p.data.add_(exp_avg, alpha=-group["lr"])

        return loss


# -- nemo/core/optim/lr_scheduler.py ----------------------------------------------------------
class WarmupPolicy(_LRScheduler):
    def __init__(self, optimizer, *, warmup_steps=None, max_steps=None, min_lr=0.0, last_epoch=-1):
        self.warmup_steps = warmup_steps
        self.max_steps = max_steps
        self.min_lr = min_lr
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.", UserWarning)
        step = self.last_epoch
        if step <= self.warmup_steps and self.warmup_steps > 0:
            return self._get_warmup_lr(step)
        if step > self.max_steps:
            return [self.min_lr for _ in self.base_lrs]
        return self._get_lr(step)

    def _get_warmup_lr(self, step):
        lr_val = (step + 1) / (self.warmup_steps + 1)
        return [initial_lr * lr_val for initial_lr in self.base_lrs]


def _cosine_annealing(initial_lr, step, max_steps, min_lr):
    mult = 0.5 * (1 + math.cos(math.pi * step / max_steps))
    out_lr = (initial_lr - min_lr) * mult + min_lr
    return out_lr


class CosineAnnealing(WarmupPolicy):
    def _get_lr(self, step):
        return [
            _cosine_annealing(initial_lr=initial_lr, step=step - self.warmup_steps,
                              max_steps=self.max_steps - self.warmup_steps, min_lr=self.min_lr)
            for initial_lr in self.base_lrs
        ]


# -- greedy CTC decoding and WER ---------------------------------------------------------------
def ctc_greedy_decode(log_probs, lengths, blank_id, labels):
    predictions = log_probs.argmax(dim=-1, keepdim=False)
    hypotheses = []
    for ind in range(predictions.shape[0]):
        prediction = predictions[ind].detach().cpu().numpy().tolist()
        prediction = prediction[: lengths[ind]]
        decoded, previous = [], blank_id
        for p in prediction:
            if (p != previous or previous == blank_id) and p != blank_id:
                decoded.append(p)
            previous = p
        hypotheses.append("".join([labels[c] for c in decoded]))
    return hypotheses


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def word_error_rate(hypotheses, references):
    scores, words = 0, 0
    for h, r in zip(hypotheses, references):
        h_list, r_list = h.split(), r.split()
        words += len(r_list)
        scores += edit_distance(h_list, r_list)
    return float(scores) / words if words != 0 else float('inf')


# -- synthetic tone speech and the training loop ----------------------------------------------
LABELS = [" ", "a", "b", "c", "d"]
TONES = {" ": 0.0, "a": 300.0, "b": 550.0, "c": 800.0, "d": 1150.0}


def synthesize(transcript, sr=4000, samples_per_char=40):
    t = torch.arange(samples_per_char, dtype=torch.float32) / sr
    pieces = [0.5 * torch.sin(2 * math.pi * TONES[ch] * t) for ch in transcript]
    return torch.cat(pieces) + 0.01 * torch.randn(len(transcript) * samples_per_char)


def collate(transcripts):
    audio = [synthesize(t) for t in transcripts]
    # the last utterance is cut short: its transcript cannot fit its frames
    audio[-1] = audio[-1][:100]
    audio_len = torch.tensor([len(a) for a in audio])
    signal = torch.zeros(len(audio), int(audio_len.max()))
    for i, a in enumerate(audio):
        signal[i, : len(a)] = a
    tokens = [[LABELS.index(c) for c in t] for t in transcripts]
    tokens_len = torch.tensor([len(t) for t in tokens])
    targets = torch.zeros(len(tokens), int(tokens_len.max()), dtype=torch.long)
    for i, t in enumerate(tokens):
        targets[i, : len(t)] = torch.tensor(t)
    return signal, audio_len, targets, tokens_len


jasper = [
    dict(filters=16, repeat=1, kernel=5, stride=2, dilation=1, dropout=0.0, residual=False, separable=True),
    dict(filters=16, repeat=2, kernel=5, stride=1, dilation=1, dropout=0.0, residual=True, separable=True, se=True),
    dict(filters=16, repeat=2, kernel=3, stride=1, dilation=2, dropout=0.0, residual=True, separable=True,
         groups=2, residual_dense=True),
    dict(filters=24, repeat=1, kernel=3, stride=1, dilation=2, dropout=0.0, residual=False),
    dict(filters=24, repeat=1, kernel=1, stride=1, dilation=1, dropout=0.0, residual=False),
]

preprocessor = FilterbankFeatures(normalize=NORMALIZE, exact_pad=EXACT_PAD)
spec_augment = SpecAugment(freq_masks=1, time_masks=2, freq_width=4, time_width=3, rng=random.Random(79))
encoder = ConvASREncoder(jasper, activation="relu", feat_in=16, init_mode=INIT_MODE)
decoder = ConvASRDecoder(encoder._feat_out, num_classes=len(LABELS), vocabulary=LABELS)
initialize(encoder)
initialize(decoder)
loss_fn = CTCLoss(num_classes=len(LABELS), zero_infinity=True, reduction=REDUCTION)
params = list(encoder.parameters()) + list(decoder.parameters())
optimizer = Novograd(params, lr=0.05, betas=(0.8, 0.5), weight_decay=1e-3, **NOVOGRAD)
scheduler = CosineAnnealing(optimizer, warmup_steps=1, max_steps=4, min_lr=1e-3)

train = [["ab cd", "ba", "dca b", "abcd"], ["cab", "d da", "bb", "ca bd"], ["a bc", "dd", "cbad", "b cad"]]
for step, transcripts in enumerate(train):
    encoder.train()
    decoder.train()
    signal, signal_len, targets, targets_len = collate(transcripts)
    processed, processed_len = preprocessor(signal, signal_len)
    processed = spec_augment(input_spec=processed, length=processed_len)
    encoded, encoded_len = encoder(audio_signal=processed, length=processed_len)
    log_probs = decoder(encoder_output=encoded)
    loss = loss_fn(log_probs=log_probs, targets=targets, input_lengths=encoded_len, target_lengths=targets_len)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    record.append(signal.numpy().copy())
    record.append(processed.numpy().copy())
    record.append(encoded_len.tolist())
    record.append(loss.detach().numpy().copy())
    record.append(scheduler.get_last_lr()[0])
    record.append(params_of(encoder, decoder))
    print(f"step {step}: loss {loss.detach().mean().item():.3f} lr {scheduler.get_last_lr()[0]:.4f}")

encoder.eval()
decoder.eval()
references = ["abc", "d ab", "cc"]
with torch.no_grad():
    signal, signal_len, _, _ = collate(references + ["a"])
    processed, processed_len = preprocessor(signal, signal_len)
    encoded, encoded_len = encoder(audio_signal=processed, length=processed_len)
    log_probs = decoder(encoder_output=encoded)
    hypotheses = ctc_greedy_decode(log_probs, encoded_len, blank_id=len(LABELS), labels=LABELS)
record.append(log_probs.numpy().copy())
record.append(hypotheses)
record.append(word_error_rate(hypotheses[:3], references))
"""

QUARTZNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    ("    def step(self, closure=None):\n", "    def step(self, grads, closure=None):\n"),
    ("                if p.grad is None:\n", "                if p.grad(grads) is None:\n"),
    ("                grad = p.grad.data\n", "                grad = p.grad(grads).data\n"),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "normalize, reduction, novograd, exact_pad, init_mode",
    [
        ("per_feature", "mean_batch", {}, False, "xavier_uniform"),
        ("all_features", "mean", {"amsgrad": True}, True, "kaiming_uniform"),
        ("per_feature", "none", {"luc": True, "luc_trust": 0.05}, False, "xavier_uniform"),
    ],
    ids=["per_feature_mean_batch", "all_features_mean_amsgrad", "none_luc"],
)
def test_quartznet_ctc_with_novograd_as_torch(
    capsys, normalize, reduction, novograd, exact_pad, init_mode
):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        QUARTZNET_SOURCE.replace(
            "loss.backward()", "loss.sum().backward()" if reduction == "none" else "loss.backward()"
        ),
        QUARTZNET_STEPS
        if reduction != "none"
        else [
            (
                old.replace("loss.backward()", "loss.sum().backward()"),
                new.replace("loss.backward()", "loss.sum().backward()"),
            )
            for old, new in QUARTZNET_STEPS
        ],
        capsys,
        7911,
        initialize=initializer(),
        params_of=params_of,
        NORMALIZE=normalize,
        REDUCTION=reduction,
        NOVOGRAD=novograd,
        EXACT_PAD=exact_pad,
        INIT_MODE=init_mode,
    )
    assert len(theirs) == 3 * 6 + 3
    assert their_log == our_log and their_log.count("step") == 3
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
