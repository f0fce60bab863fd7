# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 79 (the harness: ``tests/real_ports.py``): a neural vocoder, a program
written here in the style of r9y9/wavenet_vocoder (its ``conv.py``, ``modules.py``,
``wavenet.py``, ``mixture.py``, nnmnkwii's mu-law functions and ``train.py``'s loss, schedule and
moving average): a WaveNet of gated dilated causal convolutions under weight normalisation,
locally conditioned on mel-like features upsampled by transposed 2-d convolutions, trained a few
steps, its parameters averaged, then generated from sample by sample through linearized
convolutions with input buffers; under torch and, ported, under retrograd from the same weights
and draws, every record compared; once with mu-law quantized input and a masked 256-way
cross entropy (sampling by ``np.random.choice``), once with scalar input and a discretized
mixture of logistics (sampling by ``uniform_`` draws).

It reaches:

- mu-law companding on tensors through nnmnkwii's dispatch (``np.isscalar``, ``x.sign()``,
  ``x.log1p()``, ``np.log1p(mu)``, ``x.long()``, ``x.float()``), ``F.one_hot(...).transpose(1,
  2).float()``;
- the layers: a ``nn.Conv1d`` subclass calling ``self.register_backward_hook`` in its
  constructor, ``weight.data.normal_(mean=0, std=std)``, ``bias.data.zero_()`` and
  ``nn.utils.weight_norm``; ``nn.ConvTranspose2d`` with ``(k, s)`` kernels, ``stride=(1, s)``
  and ``padding=(p, 0)`` filled by ``weight.data.fill_(1.0 / k)`` under weight norm, with
  ``nn.ReLU(inplace=True)``; a gated residual block (causal trim ``x[:, :, :residual.size(-1)]``,
  ``x.split(x.size(1) // 2, dim=1)``, ``torch.tanh(a) * torch.sigmoid(b)``, ``(x + residual) *
  math.sqrt(0.5)``), skips accumulated in place (``skips += h``, ``skips *= math.sqrt(0.5)``);
- the losses: ``sequence_mask`` by ``torch.arange(0, max_len)`` of a 0-d tensor,
  ``.expand_as``, ``(... < ...).float()``; a spatial ``nn.CrossEntropyLoss(reduction='none')``
  on ``y_hat.unsqueeze(-1)[:, :, :-1, :]`` against ``(B, T, 1)`` targets; the discretized
  logistic mixture (``torch.clamp(..., min=log_scale_min)``, ``F.softplus``, ``(cdf_delta >
  1e-5).float()`` selections, ``np.log`` of a constant, ``F.log_softmax(logit_probs, -1)``,
  ``log_sum_exp`` by ``torch.max(x, dim=axis)`` twice) with ``reduce=False``;
- training: ``Adam(betas=..., eps=..., weight_decay=0.0)``, the learning rate set through
  ``param_group['lr']`` by a step decay, ``clip_grad_norm_``, an ``ExponentialMovingAverage`` of
  ``param.data`` clones (``self.shadow[name] -= (1.0 - decay) * delta``), the averaged model by
  ``load_state_dict(model.state_dict())`` then ``param.data = shadow.clone()``;
- generation: ``make_generation_fast_`` applying ``nn.utils.remove_weight_norm`` to every module
  and passing over the ``ValueError`` of those without it; ``incremental_forward`` running each
  module's ``_forward_pre_hooks.values()``, the weight linearized by ``transpose(1, 2)
  .contiguous().view(out, -1)``, ``input.data.new(bsz, n, c)``, ``zero_()``, the buffer shifted
  by ``self.input_buffer[:, :-1, :] = self.input_buffer[:, 1:, :].clone()`` and appended by
  ``[:, -1, :] =``, dilation by ``[:, 0::dilation, :].contiguous()``, ``F.linear`` of
  ``input.view(bsz, -1)``; teacher-forced incremental outputs checked against the parallel
  forward; free generation by ``np.random.choice(np.arange(C), p=x.view(-1).data.cpu().numpy())``
  then ``x.zero_()`` and ``x[:, sample] = 1.0``, or by ``sample_from_discretized_mix_logistic``
  (``logit_probs.data.new(size).uniform_(1e-5, 1.0 - 1e-5)``, Gumbel ``max(dim=-1)``,
  ``to_one_hot`` by ``torch.FloatTensor(tensor.size() + (n,)).zero_()`` and ``scatter_``, a
  nested ``torch.clamp``); ``torch.stack(outputs).transpose(0, 1).transpose(1, 2)``.

Found and fixed (``tests/test_ports79_fixes.py``): ``nn.utils.weight_norm`` gave no
``FutureWarning`` where torch deprecates it at every call.

Dropout is 0 (the libraries draw dropout masks from different generators). The lines changed
for the port: the ``import`` lines and the gradient lines (``grads = loss.backward()``, given to
``clip_grad_norm_`` and ``optimizer.step``).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    SharedDraws,
    SharedFills,
    assert_records_agree,
    initializer,
    params_of,
    port,
    ported_imports,
    run_source,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

WAVENET_SOURCE = """import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


# -- nnmnkwii/preprocessing/generic.py ----------------------------------------------------------
def _sign(x):
    isnumpy = isinstance(x, np.ndarray)
    isscalar = np.isscalar(x)
    return np.sign(x) if (isnumpy or isscalar) else x.sign()


def _log1p(x):
    isnumpy = isinstance(x, np.ndarray)
    isscalar = np.isscalar(x)
    return np.log1p(x) if (isnumpy or isscalar) else x.log1p()


def _abs(x):
    isnumpy = isinstance(x, np.ndarray)
    isscalar = np.isscalar(x)
    return np.abs(x) if (isnumpy or isscalar) else x.abs()


def _asint(x):
    # ugly wrapper to support torch/numpy arrays
    isnumpy = isinstance(x, np.ndarray)
    isscalar = np.isscalar(x)
    return x.astype(int) if isnumpy else int(x) if isscalar else x.long()


def _asfloat(x):
    # ugly wrapper to support torch/numpy arrays
    isnumpy = isinstance(x, np.ndarray)
    isscalar = np.isscalar(x)
    return x.astype(np.float32) if isnumpy else float(x) if isscalar else x.float()


def mulaw(x, mu=256):
    return _sign(x) * _log1p(mu * _abs(x)) / _log1p(mu)


def inv_mulaw(y, mu=256):
    return _sign(y) * (1.0 / mu) * ((1.0 + mu)**_abs(y) - 1.0)


def mulaw_quantize(x, mu=256):
    y = mulaw(x, mu)
    # scale [-1, 1] to [0, mu]
    return _asint((y + 1) / 2 * mu)


def inv_mulaw_quantize(y, mu=256):
    # [0, m) to [-1, 1]
    y = 2 * _asfloat(y) / mu - 1
    return inv_mulaw(y, mu)


# -- wavenet_vocoder/conv.py ---------------------------------------------------------------------
class Conv1dIncremental(nn.Conv1d):
    \"\"\"Extended nn.Conv1d for incremental dilated convolutions
    \"\"\"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.clear_buffer()
        self._linearized_weight = None
        self.register_backward_hook(self._clear_linearized_weight)

    def incremental_forward(self, input):
        # input: (B, T, C)
        if self.training:
            raise RuntimeError('incremental_forward only supports eval mode')

        # run forward pre hooks (e.g., weight norm)
        for hook in self._forward_pre_hooks.values():
            hook(self, input)

        # reshape weight
        weight = self._get_linearized_weight()
        kw = self.kernel_size[0]
        dilation = self.dilation[0]

        bsz = input.size(0)  # input: bsz x len x dim
        if kw > 1:
            input = input.data
            if self.input_buffer is None:
                self.input_buffer = input.new(bsz, kw + (kw - 1) * (dilation - 1), input.size(2))
                self.input_buffer.zero_()
            else:
                # shift buffer
                self.input_buffer[:, :-1, :] = self.input_buffer[:, 1:, :].clone()
            # append next input
            self.input_buffer[:, -1, :] = input[:, -1, :]
            input = self.input_buffer
            if dilation > 1:
                input = input[:, 0::dilation, :].contiguous()
        output = F.linear(input.view(bsz, -1), weight, self.bias)
        return output.view(bsz, 1, -1)

    def clear_buffer(self):
        self.input_buffer = None

    def _get_linearized_weight(self):
        if self._linearized_weight is None:
            kw = self.kernel_size[0]
            # nn.Conv1d
            if self.weight.size() == (self.out_channels, self.in_channels, kw):
                weight = self.weight.transpose(1, 2).contiguous()
            else:
                # fairseq.modules.conv_tbc.ConvTBC
                weight = self.weight.transpose(2, 1).transpose(1, 0).contiguous()
            assert weight.size() == (self.out_channels, kw, self.in_channels)
            self._linearized_weight = weight.view(self.out_channels, -1)
        return self._linearized_weight

    def _clear_linearized_weight(self, *args):
        self._linearized_weight = None


# -- wavenet_vocoder/modules.py ------------------------------------------------------------------
def Conv1d(in_channels, out_channels, kernel_size, dropout=0, std_mul=4.0, **kwargs):
    m = Conv1dIncremental(in_channels, out_channels, kernel_size, **kwargs)
    std = math.sqrt((std_mul * (1.0 - dropout)) / (m.kernel_size[0] * in_channels))
    m.weight.data.normal_(mean=0, std=std)
    m.bias.data.zero_()
    return nn.utils.weight_norm(m)


def ConvTranspose2d(in_channels, out_channels, kernel_size,
                    weight_normalization=True, **kwargs):
    freq_axis_kernel_size = kernel_size[0]
    m = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, **kwargs)
    m.weight.data.fill_(1.0 / freq_axis_kernel_size)
    m.bias.data.zero_()
    if weight_normalization:
        return nn.utils.weight_norm(m)
    else:
        return m


def Conv1d1x1(in_channels, out_channels, bias=True, weight_normalization=True):
    \"\"\"1-by-1 convolution layer
    \"\"\"
    if weight_normalization:
        assert bias
        return Conv1d(in_channels, out_channels, kernel_size=1, padding=0,
                      dilation=1, bias=bias, std_mul=1.0)
    else:
        return Conv1dIncremental(in_channels, out_channels, kernel_size=1, padding=0,
                                 dilation=1, bias=bias)


def _conv1x1_forward(conv, x, is_incremental):
    \"\"\"Conv1x1 forward
    \"\"\"
    if is_incremental:
        x = conv.incremental_forward(x)
    else:
        x = conv(x)
    return x


class ResidualConv1dGLU(nn.Module):
    \"\"\"Residual dilated conv1d + Gated linear unit
    \"\"\"

    def __init__(self, residual_channels, gate_channels, kernel_size,
                 skip_out_channels=None,
                 cin_channels=-1, gin_channels=-1,
                 dropout=1 - 0.95, padding=None, dilation=1, causal=True,
                 bias=True, weight_normalization=True, *args, **kwargs):
        super(ResidualConv1dGLU, self).__init__()
        self.dropout = dropout
        if skip_out_channels is None:
            skip_out_channels = residual_channels
        if padding is None:
            # no future time stamps available
            if causal:
                padding = (kernel_size - 1) * dilation
            else:
                padding = (kernel_size - 1) // 2 * dilation
        self.causal = causal

        if weight_normalization:
            assert bias
            self.conv = Conv1d(residual_channels, gate_channels, kernel_size,
                               padding=padding, dilation=dilation,
                               bias=bias, std_mul=1.0, *args, **kwargs)
        else:
            self.conv = Conv1dIncremental(residual_channels, gate_channels, kernel_size,
                                          padding=padding, dilation=dilation,
                                          bias=bias, *args, **kwargs)

        # local conditioning
        if cin_channels > 0:
            self.conv1x1c = Conv1d1x1(cin_channels, gate_channels,
                                      bias=bias,
                                      weight_normalization=weight_normalization)
        else:
            self.conv1x1c = None

        # global conditioning
        if gin_channels > 0:
            self.conv1x1g = Conv1d1x1(gin_channels, gate_channels, bias=bias,
                                      weight_normalization=weight_normalization)
        else:
            self.conv1x1g = None

        # conv output is split into two groups
        gate_out_channels = gate_channels // 2
        self.conv1x1_out = Conv1d1x1(gate_out_channels, residual_channels,
                                     bias=bias,
                                     weight_normalization=weight_normalization)
        self.conv1x1_skip = Conv1d1x1(gate_out_channels, skip_out_channels,
                                      bias=bias,
                                      weight_normalization=weight_normalization)

    def forward(self, x, c=None, g=None):
        return self._forward(x, c, g, False)

    def incremental_forward(self, x, c=None, g=None):
        return self._forward(x, c, g, True)

    def _forward(self, x, c, g, is_incremental):
        residual = x
        x = F.dropout(x, p=self.dropout, training=self.training)
        if is_incremental:
            splitdim = -1
            x = self.conv.incremental_forward(x)
        else:
            splitdim = 1
            x = self.conv(x)
            # remove future time steps
            x = x[:, :, :residual.size(-1)] if self.causal else x

        a, b = x.split(x.size(splitdim) // 2, dim=splitdim)

        # local conditioning
        if c is not None:
            assert self.conv1x1c is not None
            c = _conv1x1_forward(self.conv1x1c, c, is_incremental)
            ca, cb = c.split(c.size(splitdim) // 2, dim=splitdim)
            a, b = a + ca, b + cb

        # global conditioning
        if g is not None:
            assert self.conv1x1g is not None
            g = _conv1x1_forward(self.conv1x1g, g, is_incremental)
            ga, gb = g.split(g.size(splitdim) // 2, dim=splitdim)
            a, b = a + ga, b + gb

        x = torch.tanh(a) * torch.sigmoid(b)

        # For skip connection
        s = _conv1x1_forward(self.conv1x1_skip, x, is_incremental)

        # For residual connection
        x = _conv1x1_forward(self.conv1x1_out, x, is_incremental)

        x = (x + residual) * math.sqrt(0.5)
        return x, s

    def clear_buffer(self):
        for c in [self.conv, self.conv1x1_out, self.conv1x1_skip,
                  self.conv1x1c, self.conv1x1g]:
            if c is not None:
                c.clear_buffer()


# -- wavenet_vocoder/mixture.py ------------------------------------------------------------------
def log_sum_exp(x):
    \"\"\" numerically stable log_sum_exp implementation that prevents overflow \"\"\"
    # TF ordering
    axis = len(x.size()) - 1
    m, _ = torch.max(x, dim=axis)
    m2, _ = torch.max(x, dim=axis, keepdim=True)
    return m + torch.log(torch.sum(torch.exp(x - m2), dim=axis))


def discretized_mix_logistic_loss(y_hat, y, num_classes=256,
                                  log_scale_min=-7.0, reduce=True):
    assert y_hat.dim() == 3
    assert y_hat.size(1) % 3 == 0
    nr_mix = y_hat.size(1) // 3

    # (B x T x C)
    y_hat = y_hat.transpose(1, 2)

    # unpack parameters. (B, T, num_mixtures) x 3
    logit_probs = y_hat[:, :, :nr_mix]
    means = y_hat[:, :, nr_mix:2 * nr_mix]
    log_scales = torch.clamp(y_hat[:, :, 2 * nr_mix:3 * nr_mix], min=log_scale_min)

    # B x T x 1 -> B x T x num_mixtures
    y = y.expand_as(means)

    centered_y = y - means
    inv_stdv = torch.exp(-log_scales)
    plus_in = inv_stdv * (centered_y + 1. / (num_classes - 1))
    cdf_plus = torch.sigmoid(plus_in)
    min_in = inv_stdv * (centered_y - 1. / (num_classes - 1))
    cdf_min = torch.sigmoid(min_in)

    # log probability for edge case of 0 (before scaling)
    # equivalent: torch.log(F.sigmoid(plus_in))
    log_cdf_plus = plus_in - F.softplus(plus_in)

    # log probability for edge case of 255 (before scaling)
    # equivalent: (1 - F.sigmoid(min_in)).log()
    log_one_minus_cdf_min = -F.softplus(min_in)

    # probability for all other cases
    cdf_delta = cdf_plus - cdf_min

    mid_in = inv_stdv * centered_y
    # log probability in the center of the bin, to be used in extreme cases
    # (not actually used in our code)
    log_pdf_mid = mid_in - log_scales - 2. * F.softplus(mid_in)

    inner_inner_cond = (cdf_delta > 1e-5).float()

    inner_inner_out = inner_inner_cond * \\
        torch.log(torch.clamp(cdf_delta, min=1e-12)) + \\
        (1. - inner_inner_cond) * (log_pdf_mid - np.log((num_classes - 1) / 2))
    inner_cond = (y > 0.999).float()
    inner_out = inner_cond * log_one_minus_cdf_min + (1. - inner_cond) * inner_inner_out
    cond = (y < -0.999).float()
    log_probs = cond * log_cdf_plus + (1. - cond) * inner_out

    log_probs = log_probs + F.log_softmax(logit_probs, -1)

    if reduce:
        return -torch.sum(log_sum_exp(log_probs))
    else:
        return -log_sum_exp(log_probs).unsqueeze(-1)


def to_one_hot(tensor, n, fill_with=1.):
    # we perform one hot encore with respect to the last axis
    one_hot = torch.FloatTensor(tensor.size() + (n,)).zero_()
    if tensor.is_cuda:
        one_hot = one_hot.cuda()
    one_hot.scatter_(len(tensor.size()), tensor.unsqueeze(-1), fill_with)
    return one_hot


def sample_from_discretized_mix_logistic(y, log_scale_min=-7.0):
    assert y.size(1) % 3 == 0
    nr_mix = y.size(1) // 3

    # B x T x C
    y = y.transpose(1, 2)
    logit_probs = y[:, :, :nr_mix]

    # sample mixture indicator from softmax
    temp = logit_probs.data.new(logit_probs.size()).uniform_(1e-5, 1.0 - 1e-5)
    temp = logit_probs.data - torch.log(- torch.log(temp))
    _, argmax = temp.max(dim=-1)

    # (B, T) -> (B, T, nr_mix)
    one_hot = to_one_hot(argmax, nr_mix)
    # select logistic parameters
    means = torch.sum(y[:, :, nr_mix:2 * nr_mix] * one_hot, dim=-1)
    log_scales = torch.clamp(torch.sum(
        y[:, :, 2 * nr_mix:3 * nr_mix] * one_hot, dim=-1), min=log_scale_min)
    # sample from logistic & clip to interval
    # we don't actually round to the nearest 8bit value when sampling
    u = means.data.new(means.size()).uniform_(1e-5, 1.0 - 1e-5)
    x = means + torch.exp(log_scales) * (torch.log(u) - torch.log(1. - u))

    x = torch.clamp(torch.clamp(x, min=-1.), max=1.)

    return x


# -- wavenet_vocoder/wavenet.py ------------------------------------------------------------------
def receptive_field_size(total_layers, num_cycles, kernel_size,
                         dilation=lambda x: 2**x):
    assert total_layers % num_cycles == 0
    layers_per_cycle = total_layers // num_cycles
    dilations = [dilation(i % layers_per_cycle) for i in range(total_layers)]
    return (kernel_size - 1) * sum(dilations) + 1


class WaveNet(nn.Module):
    def __init__(self, out_channels=256, layers=20, stacks=2,
                 residual_channels=512,
                 gate_channels=512,
                 skip_out_channels=512,
                 kernel_size=3, dropout=1 - 0.95,
                 cin_channels=-1, gin_channels=-1, n_speakers=None,
                 weight_normalization=True,
                 upsample_conditional_features=False,
                 upsample_scales=None,
                 freq_axis_kernel_size=3,
                 scalar_input=False,
                 ):
        super(WaveNet, self).__init__()
        self.scalar_input = scalar_input
        self.out_channels = out_channels
        self.cin_channels = cin_channels
        assert layers % stacks == 0
        layers_per_stack = layers // stacks
        if scalar_input:
            self.first_conv = Conv1d1x1(1, residual_channels)
        else:
            self.first_conv = Conv1d1x1(out_channels, residual_channels)

        self.conv_layers = nn.ModuleList()
        for layer in range(layers):
            dilation = 2**(layer % layers_per_stack)
            conv = ResidualConv1dGLU(
                residual_channels, gate_channels,
                kernel_size=kernel_size,
                skip_out_channels=skip_out_channels,
                bias=True,  # magenda uses bias, but musyoku doesn't
                dilation=dilation, dropout=dropout,
                cin_channels=cin_channels,
                gin_channels=gin_channels,
                weight_normalization=weight_normalization)
            self.conv_layers.append(conv)
        self.last_conv_layers = nn.ModuleList([
            nn.ReLU(inplace=True),
            Conv1d1x1(skip_out_channels, skip_out_channels,
                      weight_normalization=weight_normalization),
            nn.ReLU(inplace=True),
            Conv1d1x1(skip_out_channels, out_channels,
                      weight_normalization=weight_normalization),
        ])

        if upsample_conditional_features:
            self.upsample_conv = nn.ModuleList()
            for s in upsample_scales:
                freq_axis_padding = (freq_axis_kernel_size - 1) // 2
                convt = ConvTranspose2d(1, 1, (freq_axis_kernel_size, s),
                                        padding=(freq_axis_padding, 0),
                                        dilation=1, stride=(1, s),
                                        weight_normalization=weight_normalization)
                self.upsample_conv.append(convt)
                # assuming we use [0, 1] scaled features
                # this should avoid non-negative upsampling output
                self.upsample_conv.append(nn.ReLU(inplace=True))
        else:
            self.upsample_conv = None

        self.receptive_field = receptive_field_size(layers, stacks, kernel_size)

    def local_conditioning_enabled(self):
        return self.cin_channels > 0

    def forward(self, x, c=None, g=None, softmax=False):
        B, _, T = x.size()

        if c is not None and self.upsample_conv is not None:
            # B x 1 x C x T
            c = c.unsqueeze(1)
            for f in self.upsample_conv:
                c = f(c)
            # B x C x T
            c = c.squeeze(1)
            assert c.size(-1) == x.size(-1)

        # Feed data to network
        x = self.first_conv(x)
        skips = None
        for f in self.conv_layers:
            x, h = f(x, c, None)
            if skips is None:
                skips = h
            else:
                skips += h
                skips *= math.sqrt(0.5)

        x = skips
        for f in self.last_conv_layers:
            x = f(x)

        x = F.softmax(x, dim=1) if softmax else x

        return x

    def incremental_forward(self, initial_input=None, c=None, g=None,
                            T=100, test_inputs=None,
                            tqdm=lambda x: x, softmax=True, quantize=True,
                            log_scale_min=-7.0):
        self.clear_buffer()
        B = 1

        # Note: shape should be **(B x T x C)**, not (B x C x T) opposed to
        # batch forward due to linealized convolution
        if test_inputs is not None:
            if self.scalar_input:
                if test_inputs.size(1) == 1:
                    test_inputs = test_inputs.transpose(1, 2).contiguous()
            else:
                if test_inputs.size(1) == self.out_channels:
                    test_inputs = test_inputs.transpose(1, 2).contiguous()

            B = test_inputs.size(0)
            if T is None:
                T = test_inputs.size(1)
            else:
                T = max(T, test_inputs.size(1))
        # cast to int in case of numpy.int64...
        T = int(T)

        # Local conditioning
        if c is not None and self.upsample_conv is not None:
            assert c is not None
            # B x 1 x C x T
            c = c.unsqueeze(1)
            for f in self.upsample_conv:
                c = f(c)
            # B x C x T
            c = c.squeeze(1)
            assert c.size(-1) == T
        if c is not None and c.size(-1) == T:
            c = c.transpose(1, 2).contiguous()

        outputs = []
        if initial_input is None:
            if self.scalar_input:
                initial_input = torch.zeros(B, 1, 1)
            else:
                initial_input = torch.zeros(B, 1, self.out_channels)
                initial_input[:, :, 127] = 1  # TODO: is this ok?
            # https://github.com/pytorch/pytorch/issues/584#issuecomment-275169567
            if next(self.parameters()).is_cuda:
                initial_input = initial_input.cuda()
        else:
            if initial_input.size(1) == self.out_channels:
                initial_input = initial_input.transpose(1, 2).contiguous()

        current_input = initial_input

        for t in tqdm(range(T)):
            if test_inputs is not None and t < test_inputs.size(1):
                current_input = test_inputs[:, t, :].unsqueeze(1)
            else:
                if t > 0:
                    current_input = outputs[-1]

            # Conditioning features for single time step
            ct = None if c is None else c[:, t, :].unsqueeze(1)
            gt = None

            x = current_input
            x = self.first_conv.incremental_forward(x)
            skips = None
            for f in self.conv_layers:
                x, h = f.incremental_forward(x, ct, gt)
                skips = h if skips is None else (skips + h) * math.sqrt(0.5)
            x = skips
            for f in self.last_conv_layers:
                try:
                    x = f.incremental_forward(x)
                except AttributeError:
                    x = f(x)

            # Generate next input by sampling
            if self.scalar_input:
                x = sample_from_discretized_mix_logistic(
                    x.view(B, -1, 1), log_scale_min=log_scale_min)
            else:
                x = F.softmax(x.view(B, -1), dim=1) if softmax else x.view(B, -1)
                if quantize:
                    sample = np.random.choice(
                        np.arange(self.out_channels), p=x.view(-1).data.cpu().numpy())
                    x.zero_()
                    x[:, sample] = 1.0
            outputs += [x.data]
        # T x B x C
        outputs = torch.stack(outputs)
        # B x C x T
        outputs = outputs.transpose(0, 1).transpose(1, 2).contiguous()

        self.clear_buffer()
        return outputs

    def clear_buffer(self):
        self.first_conv.clear_buffer()
        for f in self.conv_layers:
            f.clear_buffer()
        for f in self.last_conv_layers:
            try:
                f.clear_buffer()
            except AttributeError:
                pass

    def make_generation_fast_(self):
        def remove_weight_norm(m):
            try:
                nn.utils.remove_weight_norm(m)
            except ValueError:  # this module didn't have weight norm
                return
        self.apply(remove_weight_norm)


# -- train.py ------------------------------------------------------------------------------------
def sequence_mask(sequence_length, max_len=None):
    if max_len is None:
        max_len = sequence_length.data.max()
    batch_size = sequence_length.size(0)
    seq_range = torch.arange(0, max_len).long()
    seq_range_expand = seq_range.unsqueeze(0).expand(batch_size, max_len)
    if sequence_length.is_cuda:
        seq_range_expand = seq_range_expand.cuda()
    seq_length_expand = sequence_length.unsqueeze(1) \\
        .expand_as(seq_range_expand)
    return (seq_range_expand < seq_length_expand).float()


class ExponentialMovingAverage(object):
    def __init__(self, decay):
        self.decay = decay
        self.shadow = {}

    def register(self, name, val):
        self.shadow[name] = val.clone()

    def update(self, name, x):
        assert name in self.shadow
        update_delta = self.shadow[name] - x
        self.shadow[name] -= (1.0 - self.decay) * update_delta


class MaskedCrossEntropyLoss(nn.Module):
    def __init__(self):
        super(MaskedCrossEntropyLoss, self).__init__()
        self.criterion = nn.CrossEntropyLoss(reduction='none')

    def forward(self, input, target, lengths=None, mask=None, max_len=None):
        if lengths is None and mask is None:
            raise RuntimeError("Should provide either lengths or mask")

        # (B, T, 1)
        if mask is None:
            mask = sequence_mask(lengths, max_len).unsqueeze(-1)

        # (B, T, D)
        mask_ = mask.expand_as(target)
        losses = self.criterion(input, target)
        return ((losses * mask_).sum()) / mask_.sum()


class DiscretizedMixturelogisticLoss(nn.Module):
    def __init__(self):
        super(DiscretizedMixturelogisticLoss, self).__init__()

    def forward(self, input, target, lengths=None, mask=None, max_len=None):
        if lengths is None and mask is None:
            raise RuntimeError("Should provide either lengths or mask")

        # (B, T, 1)
        if mask is None:
            mask = sequence_mask(lengths, max_len).unsqueeze(-1)

        # (B, T, 1)
        mask_ = mask.expand_as(target)

        losses = discretized_mix_logistic_loss(
            input, target, num_classes=256, log_scale_min=-7.0, reduce=False)
        assert losses.size() == target.size()
        return ((losses * mask_).sum()) / mask_.sum()


def step_learning_rate_decay(init_lr, global_step, anneal_rate=0.98, anneal_interval=2):
    return init_lr * anneal_rate ** (global_step // anneal_interval)


def build_model():
    return WaveNet(out_channels=OUT_CHANNELS, layers=4, stacks=2, residual_channels=8,
                   gate_channels=16, skip_out_channels=8, kernel_size=3, dropout=0.0,
                   cin_channels=CIN, upsample_conditional_features=CIN > 0,
                   upsample_scales=[2, 2], freq_axis_kernel_size=3, scalar_input=SCALAR)


# -- synthetic utterances and the loop -----------------------------------------------------------
quantize_channels, hop, T = 256, 4, 32
lengths = torch.tensor([32, 24])
t = torch.arange(T).float()
audio = 0.6 * torch.sin(2 * math.pi * torch.tensor([[0.05], [0.11]]) * t) + 0.1 * torch.randn(2, T)
audio = audio * sequence_mask(lengths, T)
mel = torch.rand(2, 5, T // hop)

if SCALAR:
    x = audio.unsqueeze(1)
    target = audio.unsqueeze(-1)
else:
    quantized = mulaw_quantize(audio, quantize_channels - 1)
    x = F.one_hot(quantized, quantize_channels).transpose(1, 2).float()
    target = quantized.unsqueeze(-1)
record.append(target.numpy().copy())

model = build_model()
initialize(model)
criterion = DiscretizedMixturelogisticLoss() if SCALAR else MaskedCrossEntropyLoss()
optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=0.0)
ema = ExponentialMovingAverage(0.9)
for name, param in model.named_parameters():
    if param.requires_grad:
        ema.register(name, param.data)

mask = sequence_mask(lengths, max_len=T).unsqueeze(-1)
c = mel if CIN > 0 else None
for global_step in range(3):
    model.train()
    current_lr = step_learning_rate_decay(2e-3, global_step)
    for param_group in optimizer.param_groups:
        param_group['lr'] = current_lr
    optimizer.zero_grad()
    y_hat = model(x, c=c)
    if SCALAR:
        loss = criterion(y_hat[:, :, :-1], target[:, 1:, :], mask=mask[:, 1:, :])
    else:
        y_hat = y_hat.unsqueeze(-1)
        loss = criterion(y_hat[:, :, :-1, :], target[:, 1:, :], mask=mask[:, 1:, :])
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    for name, param in model.named_parameters():
        if name in ema.shadow:
            ema.update(name, param.data)
    print("step {}: loss {:.4f} lr {:.6f}".format(global_step, float(loss.item()), current_lr))
    record.append([loss.item(), float(grad_norm), current_lr])
    record.append(params_of(model))

# the averaged model, made fast for generation
averaged_model = build_model()
averaged_model.load_state_dict(model.state_dict())
for name, param in averaged_model.named_parameters():
    if name in ema.shadow:
        param.data = ema.shadow[name].clone()
averaged_model.eval()
averaged_model.make_generation_fast_()
record.append(state_of(averaged_model))

with torch.no_grad():
    one = x[:1, :, :16]
    c1 = None if c is None else c[:1, :, :4]
    parallel = averaged_model(one, c=c1, softmax=not SCALAR)
    incremental = averaged_model.incremental_forward(
        c=c1, T=16, test_inputs=one, softmax=not SCALAR, quantize=False)
    if SCALAR:
        # the teacher-forced samples of the mixture, drawn alike in both runs
        record.append(incremental.numpy().copy())
    else:
        assert torch.allclose(incremental, parallel, atol=1e-5)
        record.append(incremental.numpy().copy())
    generated = averaged_model.incremental_forward(
        c=None if c is None else c[1:, :, :3], T=12, softmax=True, quantize=True)
if SCALAR:
    waveform = generated.view(-1)
else:
    waveform = inv_mulaw_quantize(generated.max(1)[1].view(-1).long(), quantize_channels - 1)
record.append(waveform.numpy().copy())
"""

WAVENET_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\nfrom retrograd.nn import functional as F\n",
    ),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("clip_grad_norm_(model.parameters(), 1.0)", "clip_grad_norm_(grads, model.parameters(), 1.0)"),
    ("    optimizer.step()\n", "    optimizer.step(grads)\n"),
]


def _runs(source, steps, capsys, seed, **names):
    """The records and logs under torch and under retrograd, ``randn``/``rand`` and
    ``uniform_`` drawn from one seeded stream each (the same in both runs), NumPy's global
    stream (``np.random.choice``) seeded alike."""
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        torch.manual_seed(0)
        np.random.seed(seed)
        random.seed(seed)
        text = source if lib is torch else ported_imports(port(source, steps))
        with SharedDraws(lib, seed), SharedFills(lib, seed + 1):
            run_source(
                text, lib, record=record, initialize=initialize, params_of=params_of, **names
            )
        records.append(record)
        logs.append(capsys.readouterr().out)
    return records, logs


@pytest.mark.parametrize(
    "scalar, out_channels, cin", [(False, 256, 5), (True, 6, -1)], ids=["mulaw_256", "mol"]
)
def test_wavenet_vocoder_as_torch(capsys, scalar, out_channels, cin):
    from real_ports import state_of

    (theirs, ours), (their_log, our_log) = _runs(
        WAVENET_SOURCE,
        WAVENET_STEPS,
        capsys,
        7931,
        state_of=state_of,
        SCALAR=scalar,
        OUT_CHANNELS=out_channels,
        CIN=cin,
    )
    assert len(theirs) == 1 + 3 * 2 + 3
    assert their_log == our_log and their_log.count("step") == 3
    # a weight-normalised 1x1 convolution of one input channel has norms over one element
    # (weight = g * sign(v)): the true gradient of its v is 0, and Adam's first steps follow
    # the rounding noise, differently in each library
    skip = ("0.first_conv.weight_v",) if scalar else ()
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=skip)
