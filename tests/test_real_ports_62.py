# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_61.py`` (the
harness: ``tests/real_ports.py``):

- WaveNet as golbin/WaveNet writes it (``wavenet/networks.py``, ``wavenet/model.py``; its
  residual blocks held in an ``nn.ModuleList`` where it keeps a plain list, which leaves them
  out of ``parameters()``), on two short mu-law encoded waves with 16 quantization channels:
  torchaudio's ``mu_law_encoding``/``mu_law_decoding`` (``torch.sign``, ``torch.log1p`` of a
  0-d ``torch.tensor(mu)``, ``.to(torch.int64)``), ``one_hot_encode`` by NumPy fancy
  assignment, the kernel-2 ``CausalConv1d`` with ``output[:, :, :-1]``, dilated convolutions
  (dilations 1, 2, 4, twice), the gated ``Tanh``/``Sigmoid`` residual blocks with ``output +=
  input_cut`` and skips cut by ``skip[:, :, -skip_size:]``, ``torch.stack`` of the skips summed
  by ``torch.sum(..., dim=0)``, ``DensNet``'s softmax fed to ``CrossEntropyLoss`` (as written),
  ``outputs.view(-1, self.in_channels)`` of a ``.transpose(1, 2).contiguous()``, Adam, the
  sample-by-sample generation loop by ``argmax`` and ``F.one_hot``, and its
  ``InputSizeError`` message.
- the Perceiver of lucidrains/perceiver-pytorch (``perceiver_pytorch/perceiver_pytorch.py``),
  small, under a classification loop on 4x4 random images with masks, with and without
  ``weight_tie_layers`` (the ``cache_fn`` closure handing the same modules to every layer
  past the first: tied parameters listed once): ``fourier_encode`` with ``scales[(*((None,) *
  (len(x.shape) - 1)), Ellipsis)]``, ``torch.meshgrid(..., indexing='ij')``, ``PreNorm`` with a
  context norm through ``kwargs.update``, ``GEGLU``, ``einsum('b i d, b j d -> b i j')``,
  ``sim.masked_fill_(~mask, -torch.finfo(sim.dtype).max)``, ``b, *axis, _, device, dtype =
  *data.shape, data.device, data.dtype`` and ``return_embeddings``, with einops'
  ``rearrange``/``repeat`` and its ``Reduce`` layer as written.
- MLP-Mixer and gMLP as lucidrains writes them (``mlp_mixer_pytorch.py``,
  ``g_mlp_pytorch.py``): the Mixer's token mixing by ``partial(nn.Conv1d, kernel_size = 1)``
  over the patches, AdamW and ``CrossEntropyLoss(label_smoothing=0.1)``; gMLP as a causal
  language model with the tiny attention (``attn_dim``), two heads, ``shift_tokens`` (``F.pad(t,
  (0, 0, amount, -amount))`` cropping by a negative pad), the spatial gating unit's
  ``nn.init.uniform_`` weights, ``triu_(1).bool()`` masks, ``einsum('b h n d, h m n -> b h m
  d')``, and the circulant-matrix variant (``F.pad``, einops' ``repeat``,
  ``weight[:, :-dim_seq].reshape(h, dim_seq, 2 * dim_seq - 1)``), with ``act = nn.Tanh()``.
- Glow as rosinality/glow-pytorch writes it (``model.py``, ``train.py`` less its data and
  image saving), small (4x4 images, two blocks of two flows, coupling networks of 8 filters
  where it has 512), with the LU-decomposed 1x1 convolution and affine coupling and with the
  plain ``InvConv2d`` and additive coupling: ``ActNorm``'s data-dependent initialization
  under ``torch.no_grad()`` (``flatten.std(1)``, ``self.loc.data.copy_(-mean)``,
  ``self.initialized.fill_(1)``), ``InvConv2dLU`` built from ``scipy.linalg.qr``/``lu`` and
  ``torch.from_numpy`` buffers, ``torch.qr``, ``torch.slogdet(...double())[1].float()``,
  ``.inverse()`` in ``reverse``, ``ZeroConv2d``'s ``F.pad(input, [1, 1, 1, 1], value=1)``,
  the squeeze by ``view``/``permute``/``contiguous().view``, ``self.flows[::-1]`` and
  ``self.blocks[::-1]`` of ``ModuleList``s, ``calc_loss``, the ``n_bits`` dequantization with
  ``torch.rand_like``, sampling from ``torch.randn`` latents at temperature 0.7 and a
  reconstruction from the model's own latents. The draws (``randn``, ``rand_like``) come from
  one seeded stream in both runs.

Defects found and fixed: ``torch.qr(A, some)``, ``torch.svd(A, some, compute_uv)`` and
``torch.lu_solve(b, LU_data, LU_pivots)`` (deprecated in torch, still there and in real code:
Glow's ``InvConv2d`` calls ``torch.qr``) were missing, and their ``Tensor`` methods too
(``AttributeError``): they are ``rg.linalg``'s factorizations in torch's old forms now.

ActNorm's ``torch.tensor(0, dtype=torch.uint8)`` flag runs as written since retrograd has uint8
tensors (4 December; it was ported as int64 before): only the gradient lines and imports
change.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    """Torch's initial weights (which both runs start from) and the programs' draws from
    fixed seeds."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


GRADIENT_STEPS = [
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def run_both(source, steps, call, **names):
    """The records of ``source`` run under torch and of its port under retrograd, each given
    ``initialize`` (torch's weights in both) and the other ``names``; ``call(names, lib)``
    drives the program."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, steps)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        namespace = run_source(text, lib, record=record, initialize=initialize, **names)
        call(namespace, lib)
        records.append(record)
    return records


# -- WaveNet ----------------------------------------------------------------------------------------
WAVENET_SOURCE = '''
import torch
import torch.nn.functional as F


# -- torchaudio/functional/functional.py --
def mu_law_encoding(x, quantization_channels):
    mu = quantization_channels - 1.0
    if not x.is_floating_point():
        x = x.to(torch.float)
    mu = torch.tensor(mu, dtype=x.dtype)
    x_mu = torch.sign(x) * torch.log1p(mu * torch.abs(x)) / torch.log1p(mu)
    x_mu = ((x_mu + 1) / 2 * mu + 0.5).to(torch.int64)
    return x_mu


def mu_law_decoding(x_mu, quantization_channels):
    mu = quantization_channels - 1.0
    if not x_mu.is_floating_point():
        x_mu = x_mu.to(torch.float)
    mu = torch.tensor(mu, dtype=x_mu.dtype)
    x = ((x_mu) / mu) * 2 - 1.0
    x = torch.sign(x) * (torch.exp(torch.abs(x) * torch.log1p(mu)) - 1.0) / mu
    return x


# -- wavenet/networks.py --
class DilatedCausalConv1d(torch.nn.Module):
    """Dilated Causal Convolution for WaveNet"""
    def __init__(self, channels, dilation=1):
        super(DilatedCausalConv1d, self).__init__()

        self.conv = torch.nn.Conv1d(channels, channels,
                                    kernel_size=2, stride=1,  # Fixed for WaveNet
                                    dilation=dilation,
                                    padding=0,  # Fixed for WaveNet dilation
                                    bias=False)  # Fixed for WaveNet but not sure

    def init_weights_for_test(self):
        for m in self.modules():
            if isinstance(m, torch.nn.Conv1d):
                m.weight.data.fill_(1)

    def forward(self, x):
        output = self.conv(x)

        return output


class CausalConv1d(torch.nn.Module):
    """Causal Convolution for WaveNet"""
    def __init__(self, in_channels, out_channels):
        super(CausalConv1d, self).__init__()

        # padding=1 for same size(length) between input and output for causal convolution
        self.conv = torch.nn.Conv1d(in_channels, out_channels,
                                    kernel_size=2, stride=1, padding=1,
                                    bias=False)  # Fixed for WaveNet but not sure

    def init_weights_for_test(self):
        for m in self.modules():
            if isinstance(m, torch.nn.Conv1d):
                m.weight.data.fill_(1)

    def forward(self, x):
        output = self.conv(x)

        # remove last value for causal convolution
        return output[:, :, :-1]


class ResidualBlock(torch.nn.Module):
    def __init__(self, res_channels, skip_channels, dilation):
        """
        Residual block
        :param res_channels: number of residual channel for input, output
        :param skip_channels: number of skip channel for output
        :param dilation:
        """
        super(ResidualBlock, self).__init__()

        self.dilated = DilatedCausalConv1d(res_channels, dilation=dilation)
        self.conv_res = torch.nn.Conv1d(res_channels, res_channels, 1)
        self.conv_skip = torch.nn.Conv1d(res_channels, skip_channels, 1)

        self.gate_tanh = torch.nn.Tanh()
        self.gate_sigmoid = torch.nn.Sigmoid()

    def forward(self, x, skip_size):
        """
        :param x:
        :param skip_size: The last output size for loss and prediction
        :return:
        """
        output = self.dilated(x)

        # PixelCNN gate
        gated_tanh = self.gate_tanh(output)
        gated_sigmoid = self.gate_sigmoid(output)
        gated = gated_tanh * gated_sigmoid

        # Residual network
        output = self.conv_res(gated)
        input_cut = x[:, :, -output.size(2):]
        output += input_cut

        # Skip connection
        skip = self.conv_skip(gated)
        skip = skip[:, :, -skip_size:]

        return output, skip


class ResidualStack(torch.nn.Module):
    def __init__(self, layer_size, stack_size, res_channels, skip_channels):
        """
        Stack residual blocks by layer and stack size
        :param layer_size: integer, 10 = layer[dilation=1, dilation=2, 4, 8, 16, 32, 64, 128, 256, 512]
        :param stack_size: integer, 5 = stack[layer1, layer2, layer3, layer4, layer5]
        :param res_channels: number of residual channel for input, output
        :param skip_channels: number of skip channel for output
        :return:
        """
        super(ResidualStack, self).__init__()

        self.layer_size = layer_size
        self.stack_size = stack_size

        self.res_blocks = torch.nn.ModuleList(self.stack_res_block(res_channels, skip_channels))

    @staticmethod
    def _residual_block(res_channels, skip_channels, dilation):
        block = ResidualBlock(res_channels, skip_channels, dilation)

        if torch.cuda.device_count() > 1:
            block = torch.nn.DataParallel(block)

        if torch.cuda.is_available():
            block.cuda()

        return block

    def build_dilations(self):
        dilations = []

        # 5 = stack[layer1, layer2, layer3, layer4, layer5]
        for s in range(0, self.stack_size):
            # 10 = layer[dilation=1, dilation=2, 4, 8, 16, 32, 64, 128, 256, 512]
            for l in range(0, self.layer_size):
                dilations.append(2 ** l)

        return dilations

    def stack_res_block(self, res_channels, skip_channels):
        """
        Prepare dilated convolution blocks by layer and stack size
        :return:
        """
        res_blocks = []
        dilations = self.build_dilations()

        for dilation in dilations:
            block = self._residual_block(res_channels, skip_channels, dilation)
            res_blocks.append(block)

        return res_blocks

    def forward(self, x, skip_size):
        """
        :param x:
        :param skip_size: The last output size for loss and prediction
        :return:
        """
        output = x
        skip_connections = []

        for res_block in self.res_blocks:
            # output is the next input
            output, skip = res_block(output, skip_size)
            skip_connections.append(skip)

        return torch.stack(skip_connections)


class DensNet(torch.nn.Module):
    def __init__(self, channels):
        """
        The last network of WaveNet
        :param channels: number of channels for input and output
        :return:
        """
        super(DensNet, self).__init__()

        self.conv1 = torch.nn.Conv1d(channels, channels, 1)
        self.conv2 = torch.nn.Conv1d(channels, channels, 1)

        self.relu = torch.nn.ReLU()
        self.softmax = torch.nn.Softmax(dim=1)

    def forward(self, x):
        output = self.relu(x)
        output = self.conv1(output)
        output = self.relu(output)
        output = self.conv2(output)

        output = self.softmax(output)

        return output


class WaveNet(torch.nn.Module):
    def __init__(self, layer_size, stack_size, in_channels, res_channels):
        """
        Stack residual blocks by layer and stack size
        :param layer_size: integer, 10 = layer[dilation=1, dilation=2, 4, 8, 16, 32, 64, 128, 256, 512]
        :param stack_size: integer, 5 = stack[layer1, layer2, layer3, layer4, layer5]
        :param in_channels: number of channels for input data. skip channel is same as input channel
        :param res_channels: number of residual channel for input, output
        :return:
        """
        super(WaveNet, self).__init__()

        self.receptive_fields = self.calc_receptive_fields(layer_size, stack_size)

        self.causal = CausalConv1d(in_channels, res_channels)

        self.res_stack = ResidualStack(layer_size, stack_size, res_channels, in_channels)

        self.densnet = DensNet(in_channels)

    @staticmethod
    def calc_receptive_fields(layer_size, stack_size):
        layers = [2 ** i for i in range(0, layer_size)] * stack_size
        num_receptive_fields = np.sum(layers)

        return int(num_receptive_fields)

    def calc_output_size(self, x):
        output_size = int(x.size(2)) - self.receptive_fields

        self.check_input_size(x, output_size)

        return output_size

    def check_input_size(self, x, output_size):
        if output_size < 1:
            raise InputSizeError(int(x.size(2)), self.receptive_fields, output_size)

    def forward(self, x):
        """
        The size of timestep(3rd dimention) has to be bigger than receptive fields
        :param x: Tensor[batch, timestep, channels]
        :return: Tensor[batch, timestep, channels]
        """
        output = x.transpose(1, 2)

        output_size = self.calc_output_size(output)

        output = self.causal(output)

        skip_connections = self.res_stack(output, output_size)

        output = torch.sum(skip_connections, dim=0)

        output = self.densnet(output)

        return output.transpose(1, 2).contiguous()


class InputSizeError(Exception):
    def __init__(self, input_size, receptive_fields, output_size):

        message = 'Input size has to be larger than receptive_fields\\n'
        message += 'Input size: {0}, Receptive fields size: {1}, Output size: {2}'.format(
            input_size, receptive_fields, output_size)

        super(InputSizeError, self).__init__(message)


# -- wavenet/model.py (the optimizer and loss as it writes them; its softmax output fed to
#    CrossEntropyLoss, as written) --
class Model:
    def __init__(self, layer_size=10, stack_size=5, in_channels=256, res_channels=512, lr=0.002):
        self.layer_size = layer_size
        self.stack_size = stack_size
        self.in_channels = in_channels
        self.res_channels = res_channels
        self.lr = lr

        self.net = WaveNet(self.layer_size, self.stack_size, self.in_channels, self.res_channels)
        initialize(self.net)

        self.receptive_fields = self.net.receptive_fields

        self.loss = self._loss()
        self.optimizer = self._optimizer()

    @staticmethod
    def _loss():
        loss = torch.nn.CrossEntropyLoss()

        if torch.cuda.is_available():
            loss = loss.cuda()

        return loss

    def _optimizer(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.lr)

    def train(self, inputs, targets):
        """
        Train 1 time
        :param inputs: Tensor[batch, timestep, channels]
        :param targets: Torch tensor [batch, timestep, channels]
        :return: float loss
        """
        outputs = self.net(inputs)

        loss = self.loss(outputs.view(-1, self.in_channels),
                         targets.long().view(-1))

        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

        return loss.item()

    def generate(self, inputs):
        """
        Generate 1 time
        :param inputs: Tensor[batch, timestep, channels]
        :return: Tensor[batch, timestep, channels]
        """
        outputs = self.net(inputs)

        return outputs


def one_hot_encode(data, channels=256):
    one_hot = np.zeros((data.size, channels), dtype=float)
    one_hot[np.arange(data.size), data.ravel()] = 1

    return one_hot


def main(audio, steps):
    channels = 16
    wavenet = Model(layer_size=3, stack_size=2, in_channels=channels, res_channels=8, lr=0.01)
    quantized = mu_law_encoding(torch.from_numpy(audio), channels)
    record.append(quantized.numpy().copy())
    record.append(mu_law_decoding(quantized, channels).numpy().copy())
    inputs = torch.from_numpy(one_hot_encode(quantized.numpy(), channels).reshape(audio.shape[0], audio.shape[1], channels)).float()
    targets = quantized[:, wavenet.receptive_fields + 1:].contiguous()
    for step in range(steps):
        record.append(wavenet.train(inputs[:, :-1], targets))
    record.append({name: p.detach().numpy().copy() for name, p in wavenet.net.named_parameters()})

    # generation, one sample at a time, each fed back as a one-hot (argmax of the softmax)
    with torch.no_grad():
        window = inputs[:1, -(wavenet.receptive_fields + 1):]
        generated = []
        for _ in range(4):
            probabilities = wavenet.generate(window)[:, -1]
            sample = probabilities.argmax(dim=-1)
            generated.append(sample.item())
            window = torch.cat([window[:, 1:], F.one_hot(sample, channels).float().unsqueeze(1)], dim=1)
        record.append(generated)
        record.append(mu_law_decoding(torch.tensor(generated), channels).numpy().copy())
    try:
        wavenet.net(inputs[:, :wavenet.receptive_fields])
    except InputSizeError as error:
        record.append(str(error))
'''


WAVENET_STEPS = [
    (
        "        loss.backward()\n        self.optimizer.step()\n",
        "        grads = loss.backward()\n        self.optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\n",
    ),
]


def test_wavenet_trains_as_torch():
    rng = np.random.default_rng(6201)
    t = np.linspace(0, 1, 24, dtype=np.float32)
    audio = (0.6 * np.sin(2 * np.pi * 3 * t) + 0.1 * rng.standard_normal((2, 24))).astype(
        np.float32
    )
    records = run_both(
        WAVENET_SOURCE,
        WAVENET_STEPS,
        lambda names, lib: names["main"](audio, 4),
    )
    assert "Receptive fields size: 14" in records[0][-1]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- Perceiver ----------------------------------------------------------------------------------------
PERCEIVER_SOURCE = """
from math import pi, log
from functools import wraps

import torch
from torch import nn, einsum
import torch.nn.functional as F


from einops import rearrange, repeat
from einops.layers.torch import Reduce


# -- perceiver_pytorch/perceiver_pytorch.py --
def exists(val):
    return val is not None

def default(val, d):
    return val if exists(val) else d

def cache_fn(f):
    cache = dict()
    @wraps(f)
    def cached_fn(*args, _cache = True, key = None, **kwargs):
        if not _cache:
            return f(*args, **kwargs)
        nonlocal cache
        if key in cache:
            return cache[key]
        result = f(*args, **kwargs)
        cache[key] = result
        return result
    return cached_fn

def fourier_encode(x, max_freq, num_bands = 4):
    x = x.unsqueeze(-1)
    device, dtype, orig_x = x.device, x.dtype, x

    scales = torch.linspace(1., max_freq / 2, num_bands, device = device, dtype = dtype)
    scales = scales[(*((None,) * (len(x.shape) - 1)), Ellipsis)]

    x = x * scales * pi
    x = torch.cat([x.sin(), x.cos()], dim = -1)
    x = torch.cat((x, orig_x), dim = -1)
    return x

# helper classes

class PreNorm(nn.Module):
    def __init__(self, dim, fn, context_dim = None):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(context_dim) if exists(context_dim) else None

    def forward(self, x, **kwargs):
        x = self.norm(x)

        if exists(self.norm_context):
            context = kwargs['context']
            normed_context = self.norm_context(context)
            kwargs.update(context = normed_context)

        return self.fn(x, **kwargs)

class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim = -1)
        return x * F.gelu(gates)

class FeedForward(nn.Module):
    def __init__(self, dim, mult = 4, dropout = 0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult * 2),
            GEGLU(),
            nn.Linear(dim * mult, dim),
            nn.Dropout(dropout)
        )

    def forward(self, x):
        return self.net(x)

class Attention(nn.Module):
    def __init__(self, query_dim, context_dim = None, heads = 8, dim_head = 64, dropout = 0.):
        super().__init__()
        inner_dim = dim_head * heads
        context_dim = default(context_dim, query_dim)

        self.scale = dim_head ** -0.5
        self.heads = heads

        self.to_q = nn.Linear(query_dim, inner_dim, bias = False)
        self.to_kv = nn.Linear(context_dim, inner_dim * 2, bias = False)

        self.dropout = nn.Dropout(dropout)
        self.to_out = nn.Linear(inner_dim, query_dim)

    def forward(self, x, context = None, mask = None):
        h = self.heads

        q = self.to_q(x)
        context = default(context, x)
        k, v = self.to_kv(context).chunk(2, dim = -1)

        q, k, v = map(lambda t: rearrange(t, 'b n (h d) -> (b h) n d', h = h), (q, k, v))

        sim = einsum('b i d, b j d -> b i j', q, k) * self.scale

        if exists(mask):
            mask = rearrange(mask, 'b ... -> b (...)')
            max_neg_value = -torch.finfo(sim.dtype).max
            mask = repeat(mask, 'b j -> (b h) () j', h = h)
            sim.masked_fill_(~mask, max_neg_value)

        # attention, what we cannot get enough of
        attn = sim.softmax(dim = -1)
        attn = self.dropout(attn)

        out = einsum('b i j, b j d -> b i d', attn, v)
        out = rearrange(out, '(b h) n d -> b n (h d)', h = h)
        return self.to_out(out)

# main class

class Perceiver(nn.Module):
    def __init__(
        self,
        *,
        num_freq_bands,
        depth,
        max_freq,
        input_channels = 3,
        input_axis = 2,
        num_latents = 512,
        latent_dim = 512,
        cross_heads = 1,
        latent_heads = 8,
        cross_dim_head = 64,
        latent_dim_head = 64,
        num_classes = 1000,
        attn_dropout = 0.,
        ff_dropout = 0.,
        weight_tie_layers = False,
        fourier_encode_data = True,
        self_per_cross_attn = 1,
        final_classifier_head = True
    ):
        super().__init__()
        self.input_axis = input_axis
        self.max_freq = max_freq
        self.num_freq_bands = num_freq_bands

        self.fourier_encode_data = fourier_encode_data
        fourier_channels = (input_axis * ((num_freq_bands * 2) + 1)) if fourier_encode_data else 0
        input_dim = fourier_channels + input_channels

        self.latents = nn.Parameter(torch.randn(num_latents, latent_dim))

        get_cross_attn = lambda: PreNorm(latent_dim, Attention(latent_dim, input_dim, heads = cross_heads, dim_head = cross_dim_head, dropout = attn_dropout), context_dim = input_dim)
        get_cross_ff = lambda: PreNorm(latent_dim, FeedForward(latent_dim, dropout = ff_dropout))
        get_latent_attn = lambda: PreNorm(latent_dim, Attention(latent_dim, heads = latent_heads, dim_head = latent_dim_head, dropout = attn_dropout))
        get_latent_ff = lambda: PreNorm(latent_dim, FeedForward(latent_dim, dropout = ff_dropout))

        get_cross_attn, get_cross_ff, get_latent_attn, get_latent_ff = map(cache_fn, (get_cross_attn, get_cross_ff, get_latent_attn, get_latent_ff))

        self.layers = nn.ModuleList([])
        for i in range(depth):
            should_cache = i > 0 and weight_tie_layers
            cache_args = {'_cache': should_cache}

            self_attns = nn.ModuleList([])

            for block_ind in range(self_per_cross_attn):
                self_attns.append(nn.ModuleList([
                    get_latent_attn(**cache_args, key = block_ind),
                    get_latent_ff(**cache_args, key = block_ind)
                ]))

            self.layers.append(nn.ModuleList([
                get_cross_attn(**cache_args),
                get_cross_ff(**cache_args),
                self_attns
            ]))

        self.to_logits = nn.Sequential(
            Reduce('b n d -> b d', 'mean'),
            nn.LayerNorm(latent_dim),
            nn.Linear(latent_dim, num_classes)
        ) if final_classifier_head else nn.Identity()

    def forward(
        self,
        data,
        mask = None,
        return_embeddings = False
    ):
        b, *axis, _, device, dtype = *data.shape, data.device, data.dtype
        assert len(axis) == self.input_axis, 'input data must have the right number of axis'

        if self.fourier_encode_data:
            # calculate fourier encoded positions in the range of [-1, 1], for all axis

            axis_pos = list(map(lambda size: torch.linspace(-1., 1., steps=size, device=device, dtype=dtype), axis))
            pos = torch.stack(torch.meshgrid(*axis_pos, indexing = 'ij'), dim = -1)
            enc_pos = fourier_encode(pos, self.max_freq, self.num_freq_bands)
            enc_pos = rearrange(enc_pos, '... n d -> ... (n d)')
            enc_pos = repeat(enc_pos, '... -> b ...', b = b)

            data = torch.cat((data, enc_pos), dim = -1)

        # concat to channels of data and flatten axis

        data = rearrange(data, 'b ... d -> b (...) d')

        x = repeat(self.latents, 'n d -> b n d', b = b)

        # layers

        for cross_attn, cross_ff, self_attns in self.layers:
            x = cross_attn(x, context = data, mask = mask) + x
            x = cross_ff(x) + x

            for self_attn, self_ff in self_attns:
                x = self_attn(x) + x
                x = self_ff(x) + x

        # allow for fetching embeddings

        if return_embeddings:
            return x

        # to logits

        return self.to_logits(x)


# -- the README's model, smaller, under a plain classification loop --
def main(images, labels, masks, steps, weight_tie_layers):
    model = Perceiver(
        input_channels = 3,          # number of channels for each token of the input
        input_axis = 2,              # number of axis for input data (2 for images, 3 for video)
        num_freq_bands = 3,          # number of freq bands, with original value (2 * K + 1)
        max_freq = 4.,               # maximum frequency, hyperparameter depending on how fine the data is
        depth = 3,                   # depth of net. The shape of the final attention mechanism will be:
                                     #   depth * (cross attention -> self_per_cross_attn * self attention)
        num_latents = 4,             # number of latents, or induced set points, or centroids. different papers giving it different names
        latent_dim = 8,              # latent dimension
        cross_heads = 1,             # number of heads for cross attention. paper said 1
        latent_heads = 2,            # number of heads for latent self attention, 8
        cross_dim_head = 4,          # number of dimensions per cross attention head
        latent_dim_head = 4,         # number of dimensions per latent self attention head
        num_classes = 3,             # output number of classes
        attn_dropout = 0.,
        ff_dropout = 0.,
        weight_tie_layers = weight_tie_layers,   # whether to weight tie layers (optional, as indicated in the diagram)
        fourier_encode_data = True,  # whether to auto-fourier encode the data, using the input_axis given. defaults to True, but can be turned off if you are fourier encoding the data yourself
        self_per_cross_attn = 2      # number of self attention blocks per cross attention
    )
    initialize(model)
    record.append(len(list(model.parameters())))
    record.append(list(model.state_dict()))
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(steps):
        model.train()
        optimizer.zero_grad()
        logits = model(images, mask=masks)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    model.eval()
    with torch.no_grad():
        record.append(model(images).numpy().copy())
        record.append(model(images, return_embeddings=True).numpy().copy())
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
"""

PERCEIVER_STEPS = [
    (
        "from math import pi, log\nfrom functools import wraps\n\nimport torch\nfrom torch import nn, einsum\nimport torch.nn.functional as F\n",
        "from math import pi, log\nfrom functools import wraps\n\nimport retrograd as torch\nfrom retrograd import nn, einsum\nimport retrograd.nn.functional as F\n",
    ),
    ("from einops.layers.torch import Reduce", "from einops.layers.retrograd import Reduce"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("weight_tie_layers", [False, True])
def test_perceiver_trains_as_torch(weight_tie_layers):
    rng = np.random.default_rng(6202)
    images = rng.standard_normal((3, 4, 4, 3)).astype(np.float32)
    labels = rng.integers(0, 3, 3)
    masks = rng.uniform(size=(3, 4, 4)) > 0.3
    masks[:, 0, 0] = True

    def call(names, lib):
        names["main"](
            lib.tensor(images), lib.tensor(labels), lib.tensor(masks), 4, weight_tie_layers
        )

    records = run_both(PERCEIVER_SOURCE, PERCEIVER_STEPS, call)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


# -- MLP-Mixer and gMLP -----------------------------------------------------------------------------
MIXER_SOURCE = """
from functools import partial

import torch
from torch import nn, einsum
import torch.nn.functional as F


from einops import rearrange, repeat
from einops.layers.torch import Rearrange, Reduce


# -- mlp_mixer_pytorch/mlp_mixer_pytorch.py (lucidrains/mlp-mixer-pytorch) --
pair = lambda x: x if isinstance(x, tuple) else (x, x)

class PreNormResidual(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.fn(self.norm(x)) + x

def FeedForward(dim, expansion_factor = 4, dropout = 0., dense = nn.Linear):
    inner_dim = int(dim * expansion_factor)
    return nn.Sequential(
        dense(dim, inner_dim),
        nn.GELU(),
        nn.Dropout(dropout),
        dense(inner_dim, dim),
        nn.Dropout(dropout)
    )

def MLPMixer(*, image_size, channels, patch_size, dim, depth, num_classes, expansion_factor = 4, expansion_factor_token = 0.5, dropout = 0.):
    image_h, image_w = pair(image_size)
    assert (image_h % patch_size) == 0 and (image_w % patch_size) == 0, 'image must be divisible by patch size'
    num_patches = (image_h // patch_size) * (image_w // patch_size)
    chan_first, chan_last = partial(nn.Conv1d, kernel_size = 1), nn.Linear

    return nn.Sequential(
        Rearrange('b c (h p1) (w p2) -> b (h w) (p1 p2 c)', p1 = patch_size, p2 = patch_size),
        nn.Linear((patch_size ** 2) * channels, dim),
        *[nn.Sequential(
            PreNormResidual(dim, FeedForward(num_patches, expansion_factor, dropout, chan_first)),
            PreNormResidual(dim, FeedForward(dim, expansion_factor_token, dropout, chan_last))
        ) for _ in range(depth)],
        nn.LayerNorm(dim),
        Reduce('b n c -> b c', 'mean'),
        nn.Linear(dim, num_classes)
    )


# -- g_mlp_pytorch/g_mlp_pytorch.py (lucidrains/g-mlp-pytorch) --
def exists(val):
    return val is not None

def pair(val):
    return (val, val) if not isinstance(val, tuple) else val

def dropout_layers(layers, prob_survival):
    if prob_survival == 1:
        return layers

    num_layers = len(layers)
    to_drop = torch.zeros(num_layers).uniform_(0., 1.) > prob_survival

    # make sure at least one layer makes it
    if all(to_drop):
        rand_index = randrange(num_layers)
        to_drop[rand_index] = False

    layers = [layer for (layer, drop) in zip(layers, to_drop) if not drop]
    return layers

def shift(t, amount, mask = None):
    if amount == 0:
        return t
    return F.pad(t, (0, 0, amount, -amount), value = 0.)

# helper classes

class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x

class PreShiftTokens(nn.Module):
    def __init__(self, shifts, fn):
        super().__init__()
        self.fn = fn
        self.shifts = tuple(shifts)

    def forward(self, x, **kwargs):
        if self.shifts == (0,):
            return self.fn(x, **kwargs)

        shifts = self.shifts
        segments = len(shifts)
        feats_per_shift = x.shape[-1] // segments
        splitted = x.split(feats_per_shift, dim = -1)
        segments_to_shift, rest = splitted[:segments], splitted[segments:]
        segments_to_shift = list(map(lambda args: shift(*args), zip(segments_to_shift, shifts)))
        x = torch.cat((*segments_to_shift, *rest), dim = -1)
        return self.fn(x, **kwargs)

class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.fn = fn
        self.norm = nn.LayerNorm(dim)

    def forward(self, x, **kwargs):
        x = self.norm(x)
        return self.fn(x, **kwargs)

class Attention(nn.Module):
    def __init__(self, dim_in, dim_out, dim_inner, causal = False):
        super().__init__()
        self.scale = dim_inner ** -0.5
        self.causal = causal

        self.to_qkv = nn.Linear(dim_in, dim_inner * 3, bias = False)
        self.to_out = nn.Linear(dim_inner, dim_out)

    def forward(self, x):
        device = x.device
        q, k, v = self.to_qkv(x).chunk(3, dim = -1)
        sim = einsum('b i d, b j d -> b i j', q, k) * self.scale

        if self.causal:
            mask = torch.ones(sim.shape[-2:], device = device).triu(1).bool()
            sim.masked_fill_(mask[None, ...], -torch.finfo(q.dtype).max)

        attn = sim.softmax(dim = -1)
        out = einsum('b i j, b j d -> b i d', attn, v)
        return self.to_out(out)

class SpatialGatingUnit(nn.Module):
    def __init__(
        self,
        dim,
        dim_seq,
        causal = False,
        act = nn.Identity(),
        heads = 1,
        init_eps = 1e-3,
        circulant_matrix = False
    ):
        super().__init__()
        dim_out = dim // 2
        self.heads = heads
        self.causal = causal
        self.norm = nn.LayerNorm(dim_out)

        self.act = act

        # parameters

        if circulant_matrix:
            self.circulant_pos_x = nn.Parameter(torch.ones(heads, dim_seq))
            self.circulant_pos_y = nn.Parameter(torch.ones(heads, dim_seq))

        self.circulant_matrix = circulant_matrix
        shape = (heads, dim_seq,) if circulant_matrix else (heads, dim_seq, dim_seq)
        weight = torch.zeros(shape)

        self.weight = nn.Parameter(weight)
        init_eps /= dim_seq
        nn.init.uniform_(self.weight, -init_eps, init_eps)

        self.bias = nn.Parameter(torch.ones(heads, dim_seq))

    def forward(self, x, gate_res = None):
        device, n, h = x.device, x.shape[1], self.heads

        res, gate = x.chunk(2, dim = -1)
        gate = self.norm(gate)

        weight, bias = self.weight, self.bias

        if self.circulant_matrix:
            # build the circulant matrix

            dim_seq = weight.shape[-1]
            weight = F.pad(weight, (0, dim_seq), value = 0)
            weight = repeat(weight, '... n -> ... (r n)', r = dim_seq)
            weight = weight[:, :-dim_seq].reshape(h, dim_seq, 2 * dim_seq - 1)
            weight = weight[:, :, (dim_seq - 1):]

            # give circulant matrix absolute position awareness

            pos_x, pos_y = self.circulant_pos_x, self.circulant_pos_y
            weight = weight * rearrange(pos_x, 'h i -> h i ()') * rearrange(pos_y, 'h j -> h () j')

        if self.causal:
            weight, bias = weight[:, :n, :n], bias[:, :n]
            mask = torch.ones(weight.shape[-2:], device = device).triu_(1).bool()
            mask = rearrange(mask, 'i j -> () i j')
            weight = weight.masked_fill(mask, 0.)

        gate = rearrange(gate, 'b n (h d) -> b h n d', h = h)

        gate = einsum('b h n d, h m n -> b h m d', gate, weight)
        gate = gate + rearrange(bias, 'h n -> () h n ()')

        gate = rearrange(gate, 'b h n d -> b n (h d)')

        if exists(gate_res):
            gate = gate + gate_res

        return self.act(gate) * res

class gMLPBlock(nn.Module):
    def __init__(
        self,
        *,
        dim,
        dim_ff,
        seq_len,
        heads = 1,
        attn_dim = None,
        causal = False,
        act = nn.Identity(),
        circulant_matrix = False
    ):
        super().__init__()
        self.proj_in = nn.Sequential(
            nn.Linear(dim, dim_ff),
            nn.GELU()
        )

        self.attn = Attention(dim, dim_ff // 2, attn_dim, causal) if exists(attn_dim) else None

        self.sgu = SpatialGatingUnit(dim_ff, seq_len, causal, act, heads, circulant_matrix = circulant_matrix)
        self.proj_out = nn.Linear(dim_ff // 2, dim)

    def forward(self, x):
        gate_res = self.attn(x) if exists(self.attn) else None
        x = self.proj_in(x)
        x = self.sgu(x, gate_res = gate_res)
        x = self.proj_out(x)
        return x

# main classes

class gMLP(nn.Module):
    def __init__(
        self,
        *,
        num_tokens = None,
        dim,
        depth,
        seq_len,
        heads = 1,
        ff_mult = 4,
        attn_dim = None,
        prob_survival = 1.,
        causal = False,
        circulant_matrix = False,
        shift_tokens = 0,
        act = nn.Identity()
    ):
        super().__init__()
        assert (dim % heads) == 0, 'dimension must be divisible by number of heads'

        dim_ff = dim * ff_mult
        self.seq_len = seq_len
        self.prob_survival = prob_survival

        self.to_embed = nn.Embedding(num_tokens, dim) if exists(num_tokens) else nn.Identity()

        token_shifts = tuple(range(0 if causal else -shift_tokens, shift_tokens + 1))
        self.layers = nn.ModuleList([Residual(PreNorm(dim, PreShiftTokens(token_shifts, gMLPBlock(dim = dim, heads = heads, dim_ff = dim_ff, seq_len = seq_len, attn_dim = attn_dim, causal = causal, act = act, circulant_matrix = circulant_matrix)))) for i in range(depth)])

        self.to_logits = nn.Sequential(
            nn.LayerNorm(dim),
            nn.Linear(dim, num_tokens)
        ) if exists(num_tokens) else nn.Identity()

    def forward(self, x):
        x = self.to_embed(x)
        layers = self.layers if not self.training else dropout_layers(self.layers, self.prob_survival)
        out = nn.Sequential(*layers)(x)
        return self.to_logits(out)


# -- the training loops: the Mixer as an image classifier, gMLP as a causal language model --
def train_mixer(images, labels, steps):
    model = MLPMixer(
        image_size = (4, 6),
        channels = 3,
        patch_size = 2,
        dim = 8,
        depth = 2,
        num_classes = 3
    )
    initialize(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    for step in range(steps):
        optimizer.zero_grad()
        loss = criterion(model(images), labels)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})


def train_gmlp(tokens, steps, **options):
    model = gMLP(
        num_tokens = 7,
        dim = 8,
        depth = 2,
        seq_len = tokens.shape[1] - 1,
        causal = True,
        **options
    )
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(steps):
        model.train()
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:])
        loss.backward()
        optimizer.step()
        record.append(loss.item())
    model.eval()
    with torch.no_grad():
        record.append(model(tokens[:, :-1]).argmax(dim=-1).tolist())
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
"""

MIXER_STEPS = [
    (
        "from functools import partial\n\nimport torch\nfrom torch import nn, einsum\nimport torch.nn.functional as F\n",
        "from functools import partial\n\nimport retrograd as torch\nfrom retrograd import nn, einsum\nimport retrograd.nn.functional as F\n",
    ),
    (
        "from einops.layers.torch import Rearrange, Reduce",
        "from einops.layers.retrograd import Rearrange, Reduce",
    ),
    *GRADIENT_STEPS,
]


def test_mlp_mixer_and_gmlp_train_as_torch():
    rng = np.random.default_rng(6203)
    images = rng.standard_normal((3, 3, 4, 6)).astype(np.float32)
    labels = rng.integers(0, 3, 3)
    tokens = rng.integers(0, 7, (2, 7))

    def call(names, lib):
        names["train_mixer"](lib.tensor(images), lib.tensor(labels), 3)
        names["train_gmlp"](lib.tensor(tokens), 3, heads=2, attn_dim=4, shift_tokens=1)
        names["train_gmlp"](lib.tensor(tokens), 3, circulant_matrix=True, act=names["nn"].Tanh())

    records = run_both(MIXER_SOURCE, MIXER_STEPS, call)
    # the token-mixing convolutions' output biases add one value per patch along the features,
    # which the next block's LayerNorm removes: their true gradient is zero, and Adam's steps
    # follow each library's rounding noise
    skip = ("2.0.fn.3.bias", "3.0.fn.3.bias")
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=skip)


# -- Glow -------------------------------------------------------------------------------------------
GLOW_SOURCE = """
import torch
from torch import nn
from torch.nn import functional as F
from math import log, pi, exp
import numpy as np
from scipy import linalg as la

logabs = lambda x: torch.log(torch.abs(x))


# -- model.py (rosinality/glow-pytorch) --
class ActNorm(nn.Module):
    def __init__(self, in_channel, logdet=True):
        super().__init__()

        self.loc = nn.Parameter(torch.zeros(1, in_channel, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, in_channel, 1, 1))

        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))
        self.logdet = logdet

    def initialize(self, input):
        with torch.no_grad():
            flatten = input.permute(1, 0, 2, 3).contiguous().view(input.shape[1], -1)
            mean = (
                flatten.mean(1)
                .unsqueeze(1)
                .unsqueeze(2)
                .unsqueeze(3)
                .permute(1, 0, 2, 3)
            )
            std = (
                flatten.std(1)
                .unsqueeze(1)
                .unsqueeze(2)
                .unsqueeze(3)
                .permute(1, 0, 2, 3)
            )

            self.loc.data.copy_(-mean)
            self.scale.data.copy_(1 / (std + 1e-6))

    def forward(self, input):
        _, _, height, width = input.shape

        if self.initialized.item() == 0:
            self.initialize(input)
            self.initialized.fill_(1)

        log_abs = logabs(self.scale)

        logdet = height * width * torch.sum(log_abs)

        if self.logdet:
            return self.scale * (input + self.loc), logdet

        else:
            return self.scale * (input + self.loc)

    def reverse(self, output):
        return output / self.scale - self.loc


class InvConv2d(nn.Module):
    def __init__(self, in_channel):
        super().__init__()

        weight = torch.randn(in_channel, in_channel)
        q, _ = torch.qr(weight)
        weight = q.unsqueeze(2).unsqueeze(3)
        self.weight = nn.Parameter(weight)

    def forward(self, input):
        _, _, height, width = input.shape

        out = F.conv2d(input, self.weight)
        logdet = (
            height * width * torch.slogdet(self.weight.squeeze().double())[1].float()
        )

        return out, logdet

    def reverse(self, output):
        return F.conv2d(
            output, self.weight.squeeze().inverse().unsqueeze(2).unsqueeze(3)
        )


class InvConv2dLU(nn.Module):
    def __init__(self, in_channel):
        super().__init__()

        weight = np.random.randn(in_channel, in_channel)
        q, _ = la.qr(weight)
        w_p, w_l, w_u = la.lu(q.astype(np.float32))
        w_s = np.diag(w_u)
        w_u = np.triu(w_u, 1)
        u_mask = np.triu(np.ones_like(w_u), 1)
        l_mask = u_mask.T

        w_p = torch.from_numpy(w_p)
        w_l = torch.from_numpy(w_l)
        w_s = torch.from_numpy(w_s)
        w_u = torch.from_numpy(w_u)

        self.register_buffer("w_p", w_p)
        self.register_buffer("u_mask", torch.from_numpy(u_mask))
        self.register_buffer("l_mask", torch.from_numpy(l_mask))
        self.register_buffer("s_sign", torch.sign(w_s))
        self.register_buffer("l_eye", torch.eye(l_mask.shape[0]))
        self.w_l = nn.Parameter(w_l)
        self.w_s = nn.Parameter(logabs(w_s))
        self.w_u = nn.Parameter(w_u)

    def forward(self, input):
        _, _, height, width = input.shape

        weight = self.calc_weight()

        out = F.conv2d(input, weight)
        logdet = height * width * torch.sum(self.w_s)

        return out, logdet

    def calc_weight(self):
        weight = (
            self.w_p
            @ (self.w_l * self.l_mask + self.l_eye)
            @ ((self.w_u * self.u_mask) + torch.diag(self.s_sign * torch.exp(self.w_s)))
        )

        return weight.unsqueeze(2).unsqueeze(3)

    def reverse(self, output):
        weight = self.calc_weight()

        return F.conv2d(output, weight.squeeze().inverse().unsqueeze(2).unsqueeze(3))


class ZeroConv2d(nn.Module):
    def __init__(self, in_channel, out_channel, padding=1):
        super().__init__()

        self.conv = nn.Conv2d(in_channel, out_channel, 3, padding=0)
        self.conv.weight.data.zero_()
        self.conv.bias.data.zero_()
        self.scale = nn.Parameter(torch.zeros(1, out_channel, 1, 1))

    def forward(self, input):
        out = F.pad(input, [1, 1, 1, 1], value=1)
        out = self.conv(out)
        out = out * torch.exp(self.scale * 3)

        return out


class AffineCoupling(nn.Module):
    def __init__(self, in_channel, filter_size=512, affine=True):
        super().__init__()

        self.affine = affine

        self.net = nn.Sequential(
            nn.Conv2d(in_channel // 2, filter_size, 3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(filter_size, filter_size, 1),
            nn.ReLU(inplace=True),
            ZeroConv2d(filter_size, in_channel if self.affine else in_channel // 2),
        )

        self.net[0].weight.data.normal_(0, 0.05)
        self.net[0].bias.data.zero_()

        self.net[2].weight.data.normal_(0, 0.05)
        self.net[2].bias.data.zero_()

    def forward(self, input):
        in_a, in_b = input.chunk(2, 1)

        if self.affine:
            log_s, t = self.net(in_a).chunk(2, 1)
            # s = torch.exp(log_s)
            s = F.sigmoid(log_s + 2)
            # out_a = s * in_a + t
            out_b = (in_b + t) * s

            logdet = torch.sum(torch.log(s).view(input.shape[0], -1), 1)

        else:
            net_out = self.net(in_a)
            out_b = in_b + net_out
            logdet = None

        return torch.cat([in_a, out_b], 1), logdet

    def reverse(self, output):
        out_a, out_b = output.chunk(2, 1)

        if self.affine:
            log_s, t = self.net(out_a).chunk(2, 1)
            # s = torch.exp(log_s)
            s = F.sigmoid(log_s + 2)
            # in_a = (out_a - t) / s
            in_b = out_b / s - t

        else:
            net_out = self.net(out_a)
            in_b = out_b - net_out

        return torch.cat([out_a, in_b], 1)


class Flow(nn.Module):
    def __init__(self, in_channel, affine=True, conv_lu=True):
        super().__init__()

        self.actnorm = ActNorm(in_channel)

        if conv_lu:
            self.invconv = InvConv2dLU(in_channel)

        else:
            self.invconv = InvConv2d(in_channel)

        self.coupling = AffineCoupling(in_channel, affine=affine)

    def forward(self, input):
        out, logdet = self.actnorm(input)
        out, det1 = self.invconv(out)
        out, det2 = self.coupling(out)

        logdet = logdet + det1
        if det2 is not None:
            logdet = logdet + det2

        return out, logdet

    def reverse(self, output):
        input = self.coupling.reverse(output)
        input = self.invconv.reverse(input)
        input = self.actnorm.reverse(input)

        return input


def gaussian_log_p(x, mean, log_sd):
    return -0.5 * log(2 * pi) - log_sd - 0.5 * (x - mean) ** 2 / torch.exp(2 * log_sd)


def gaussian_sample(eps, mean, log_sd):
    return mean + torch.exp(log_sd) * eps


class Block(nn.Module):
    def __init__(self, in_channel, n_flow, split=True, affine=True, conv_lu=True):
        super().__init__()

        squeeze_dim = in_channel * 4

        self.flows = nn.ModuleList()
        for i in range(n_flow):
            self.flows.append(Flow(squeeze_dim, affine=affine, conv_lu=conv_lu))

        self.split = split

        if split:
            self.prior = ZeroConv2d(in_channel * 2, in_channel * 4)

        else:
            self.prior = ZeroConv2d(in_channel * 4, in_channel * 8)

    def forward(self, input):
        b_size, n_channel, height, width = input.shape
        squeezed = input.view(b_size, n_channel, height // 2, 2, width // 2, 2)
        squeezed = squeezed.permute(0, 1, 3, 5, 2, 4)
        out = squeezed.contiguous().view(b_size, n_channel * 4, height // 2, width // 2)

        logdet = 0

        for flow in self.flows:
            out, det = flow(out)
            logdet = logdet + det

        if self.split:
            out, z_new = out.chunk(2, 1)
            mean, log_sd = self.prior(out).chunk(2, 1)
            log_p = gaussian_log_p(z_new, mean, log_sd)
            log_p = log_p.view(b_size, -1).sum(1)

        else:
            zero = torch.zeros_like(out)
            mean, log_sd = self.prior(zero).chunk(2, 1)
            log_p = gaussian_log_p(out, mean, log_sd)
            log_p = log_p.view(b_size, -1).sum(1)
            z_new = out

        return out, logdet, log_p, z_new

    def reverse(self, output, eps=None, reconstruct=False):
        input = output

        if reconstruct:
            if self.split:
                input = torch.cat([output, eps], 1)

            else:
                input = eps

        else:
            if self.split:
                mean, log_sd = self.prior(input).chunk(2, 1)
                z = gaussian_sample(eps, mean, log_sd)
                input = torch.cat([output, z], 1)

            else:
                zero = torch.zeros_like(input)
                # zero = F.pad(zero, [1, 1, 1, 1], value=1)
                mean, log_sd = self.prior(zero).chunk(2, 1)
                z = gaussian_sample(eps, mean, log_sd)
                input = z

        for flow in self.flows[::-1]:
            input = flow.reverse(input)

        b_size, n_channel, height, width = input.shape

        unsqueezed = input.view(b_size, n_channel // 4, 2, 2, height, width)
        unsqueezed = unsqueezed.permute(0, 1, 4, 2, 5, 3)
        unsqueezed = unsqueezed.contiguous().view(
            b_size, n_channel // 4, height * 2, width * 2
        )

        return unsqueezed


class Glow(nn.Module):
    def __init__(
        self, in_channel, n_flow, n_block, affine=True, conv_lu=True
    ):
        super().__init__()

        self.blocks = nn.ModuleList()
        n_channel = in_channel
        for i in range(n_block - 1):
            self.blocks.append(Block(n_channel, n_flow, affine=affine, conv_lu=conv_lu))
            n_channel *= 2
        self.blocks.append(Block(n_channel, n_flow, split=False, affine=affine))

    def forward(self, input):
        log_p_sum = 0
        logdet = 0
        out = input
        z_outs = []

        for block in self.blocks:
            out, det, log_p, z_new = block(out)
            z_outs.append(z_new)
            logdet = logdet + det

            if log_p is not None:
                log_p_sum = log_p_sum + log_p

        return log_p_sum, logdet, z_outs

    def reverse(self, z_list, reconstruct=False):
        for i, block in enumerate(self.blocks[::-1]):
            if i == 0:
                input = block.reverse(z_list[-1], z_list[-1], reconstruct=reconstruct)

            else:
                input = block.reverse(input, z_list[-(i + 1)], reconstruct=reconstruct)

        return input


# -- train.py, less its data loading and image saving --
def calc_z_shapes(n_channel, input_size, n_flow, n_block):
    z_shapes = []

    for i in range(n_block - 1):
        input_size //= 2
        n_channel *= 2

        z_shapes.append((n_channel, input_size, input_size))

    input_size //= 2
    z_shapes.append((n_channel * 4, input_size, input_size))

    return z_shapes


def calc_loss(log_p, logdet, image_size, n_bins):
    # log_p = calc_log_p([z_list])
    n_pixel = image_size * image_size * 3

    loss = -log(n_bins) * n_pixel
    loss = loss + logdet + log_p

    return (
        (-loss / (log(2) * n_pixel)).mean(),
        (log_p / (log(2) * n_pixel)).mean(),
        (logdet / (log(2) * n_pixel)).mean(),
    )


def train(args, model, optimizer, dataset):
    n_bins = 2.0 ** args.n_bits

    z_sample = []
    z_shapes = calc_z_shapes(3, args.img_size, args.n_flow, args.n_block)
    for z in z_shapes:
        z_new = torch.randn(args.n_sample, *z) * args.temp
        z_sample.append(z_new)

    for i in range(args.iter):
        image, _ = next(dataset)
        image = image * 255

        if args.n_bits < 8:
            image = torch.floor(image / 2 ** (8 - args.n_bits))

        image = image / n_bins - 0.5

        if i == 0:
            with torch.no_grad():
                log_p, logdet, _ = model(
                    image + torch.rand_like(image) / n_bins
                )

                continue

        else:
            log_p, logdet, _ = model(image + torch.rand_like(image) / n_bins)

        logdet = logdet.mean()

        loss, log_p, log_det = calc_loss(log_p, logdet, args.img_size, n_bins)
        model.zero_grad()
        loss.backward()
        # warmup_lr = args.lr * min(1, i * batch_size / (50000 * 10))
        warmup_lr = args.lr
        optimizer.param_groups[0]["lr"] = warmup_lr
        optimizer.step()

        print(
            f"Loss: {loss.item():.5f}; logP: {log_p.item():.5f}; logdet: {log_det.item():.5f}; lr: {warmup_lr:.7f}"
        )
        record.append([loss.item(), log_p.item(), log_det.item()])

    with torch.no_grad():
        record.append(model.reverse(z_sample).numpy().copy())
        # a reconstruction from the latents of the last batch
        log_p, logdet, z_outs = model(image)
        record.append(model.reverse(z_outs, reconstruct=True).numpy().copy())
        record.append(image.numpy().copy())
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
    record.append({name: b.numpy().copy() for name, b in model.named_buffers()})


def main(images, affine, conv_lu):
    args = Args(iter=4, n_flow=2, n_block=2, lr=1e-3, img_size=4, temp=0.7, n_sample=2, n_bits=5)
    model = Glow(3, args.n_flow, args.n_block, affine=affine, conv_lu=conv_lu)
    initialize(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    dataset = iter([(image, 0) for image in images])
    train(args, model, optimizer, dataset)
"""

GLOW_STEPS = [
    (
        "import torch\nfrom torch import nn\nfrom torch.nn import functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\nfrom retrograd.nn import functional as F\n",
    ),
    (
        "        loss.backward()\n        # warmup_lr",
        "        grads = loss.backward()\n        # warmup_lr",
    ),
    ("        optimizer.step()\n", "        optimizer.step(grads)\n"),
]


class _Args:
    def __init__(self, **options):
        self.__dict__.update(options)


@pytest.mark.parametrize("affine, conv_lu", [(True, True), (False, False)])
def test_glow_trains_as_torch(affine, conv_lu, capsys):
    from real_ports import SharedDraws

    images = np.random.default_rng(6204).uniform(size=(4, 2, 3, 4, 4)).astype(np.float32)
    records, logs = [], []
    initialize = initializer()
    # (the filter size of the coupling networks, 512 as written, made 8 in both runs)
    source = GLOW_SOURCE.replace("filter_size=512", "filter_size=8")
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, GLOW_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize, Args=_Args)
        saved_rand_like = lib.rand_like
        with SharedDraws(lib, 6204):  # (and rand_like from its rand)
            lib.rand_like = lambda t, lib=lib: lib.rand(*t.shape, dtype=t.dtype)
            try:
                names["main"]([lib.tensor(x) for x in images], affine, conv_lu)
            finally:
                lib.rand_like = saved_rand_like
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[0].count("Loss:") == 3
    # the reconstructions undo scales of 1/std up to ~100 in float32: each 2e-5 from the image
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-4)


def test_regression_deprecated_qr_svd_and_lu_solve_are_torchs():
    """``torch.qr`` (Glow's ``InvConv2d``), ``torch.svd`` and ``torch.lu_solve``, deprecated
    in torch but still in it and in real code, were missing (``AttributeError``): they are
    ``rg.linalg``'s factorizations in torch's old forms (``svd``'s ``V``, not ``Vh``)."""
    rng = np.random.default_rng(6205)
    a = rng.standard_normal((2, 4, 3))
    square = rng.standard_normal((2, 3, 3))
    b = rng.standard_normal((2, 3, 2))
    weights = [rng.standard_normal(shape) for shape in ((2, 4, 3), (2, 3, 3), (2, 3))]
    results = []
    for lib in (torch, rg):
        x = lib.tensor(a).requires_grad_()
        m = lib.tensor(square).requires_grad_()
        q, r = lib.qr(x)
        q_full, r_full = x.qr(some=False)
        u, s, v = lib.svd(x)
        u_full, _, v_full = x.svd(some=False)
        u_none, s_none, v_none = lib.svd(x, compute_uv=False)
        lu, pivots = m.lu()
        solution = lib.lu_solve(lib.tensor(b), lu, pivots)
        # sign-invariant losses of the factors: Q R, U diag(S) V^T, S
        loss = (
            ((q @ r) * lib.tensor(weights[0])).sum()
            + (r.abs() * lib.tensor(weights[1])).sum()
            + ((u * s.unsqueeze(-2)) @ v.transpose(-2, -1) * lib.tensor(weights[0])).sum()
            + (s_none * lib.tensor(weights[2])).sum()
            + (solution**2).sum()
        )
        values = [
            q.abs(),
            r.abs(),
            q_full.shape,
            r_full.abs(),
            u.abs(),
            s,
            v.abs(),
            u_full.shape,
            v_full.abs(),
            u_none,
            s_none,
            v_none,
            solution,
        ]
        if lib is torch:
            loss.backward()
            gradients = [x.grad, m.grad]
        else:
            grads = loss.backward()
            gradients = [x.grad(grads), m.grad(grads)]
        results.append(
            [
                tuple(v) if isinstance(v, tuple | torch.Size) else np.asarray(v.detach().numpy())
                for v in values
            ]
            + [np.asarray(g.numpy()) for g in gradients]
        )
        assert type(lib.qr(x)).__name__ == "qr" and type(lib.svd(x)).__name__ == "svd"
    for mine, theirs in zip(results[1], results[0]):
        if isinstance(theirs, tuple):
            assert mine == theirs
        else:
            np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-10)
