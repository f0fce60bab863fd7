# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
image generators trained as their repositories train them, a few steps each, against torch's
run of the same code from the same weights and draws:

- VQGAN as CompVis/taming-transformers writes it: ``VectorQuantizer``
  (``taming/modules/vqvae/quantize.py``: distances by ``z^2 + e^2 - 2 e z``, ``argmin``, the
  one-hot ``min_encodings.scatter_(1, min_encoding_indices, 1)`` times the codebook, the
  commitment loss, the straight-through ``z + (z_q - z).detach()``, the perplexity), ``VQModel``
  (``taming/models/vqgan.py``: ``encode``/``decode``, ``training_step`` by ``optimizer_idx``,
  ``get_last_layer``, Adam with ``betas=(0.5, 0.9)``), ``VQLPIPSWithDiscriminator``
  (``taming/modules/losses/vqperceptual.py``: ``calculate_adaptive_weight`` by
  ``torch.autograd.grad(nll_loss, last_layer, retain_graph=True)``, its ``try ... except
  RuntimeError`` in validation, ``adopt_weight``, ``hinge_d_loss``/``vanilla_d_loss``),
  ``NLayerDiscriminator`` with ``weights_init`` and ``ActNorm`` (its data-dependent first
  forward, the ``uint8`` ``initialized`` buffer), and LPIPS's structure (``ScalingLayer``,
  ``NetLinLayer``, ``normalize_tensor``, ``spatial_average``, a frozen ``vgg16`` sliced in
  ``Sequential``s) around a tiny stand-in for VGG's pretrained features. The encoder and
  decoder are tiny stand-ins of taming's ``Encoder``/``Decoder`` (``ResnetBlock``,
  ``Normalize``, ``nonlinearity``, ``Downsample``'s ``F.pad(x, (0, 1, 0, 1))``,
  ``Upsample``'s nearest ``interpolate``), the loop a stand-in for Lightning's (each
  ``optimizer_idx`` its own forward, ``zero_grad``/``backward``/``step``).
- SRGAN as leftthomas/SRGAN writes it (``model.py``: ``ResidualBlock``, ``UpsampleBLock`` with
  ``nn.PixelShuffle`` and ``nn.PReLU``, the sigmoid ``Discriminator``; ``loss.py``:
  ``GeneratorLoss`` over a frozen ``loss_network`` whose parameters have
  ``requires_grad = False``, ``TVLoss``; ``train.py``'s ``d_loss.backward(retain_graph=True)``
  then the generator step).
- ESRGAN as xinntao/BasicSR writes it (``RRDBNet_arch.py``: ``ResidualDenseBlock_5C`` with
  ``x5 * 0.2 + x``, ``RRDB``, ``make_layer``, ``initialize_weights`` scaling kaiming weights by
  0.1; ``loss.py``'s ``GANLoss`` with ``torch.empty_like(input).fill_``; ``SRGAN_model.py``'s
  ``optimize_parameters`` with the relativistic ``ragan`` losses, ``p.requires_grad = False``
  on the discriminator during the generator step, and ``VGGFeatureExtractor`` with its
  ``mean``/``std`` buffers).
- ControlNet as lllyasviel/ControlNet writes it (``cldm/cldm.py``: ``ControlledUnetModel``
  running the locked encoder under ``torch.no_grad()`` then ``h += control.pop()``,
  ``ControlNet`` with ``input_hint_block``, ``make_zero_conv``, ``zero_module``, the trainable
  copy of the encoder made by ``copy.deepcopy``, ``configure_optimizers`` with ``sd_locked``),
  ``ldm/modules/diffusionmodules/util.py``'s ``checkpoint`` and ``CheckpointFunction`` (saving
  ``torch.is_autocast_cache_enabled()``; backward re-runs under ``torch.enable_grad()`` and
  ``torch.cuda.amp.autocast(**ctx.gpu_autocast_kwargs)``, then ``torch.autograd.grad(...,
  allow_unused=True)``), on a tiny UNet written for the test (``TimestepEmbedSequential``,
  ``timestep_embedding``, ``ResBlock`` with ``use_checkpoint``).

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns the
gradients, ``step`` takes them). The defect found (a focused test in
``test_realports29_fixes.py``): there was no ``torch.is_autocast_cache_enabled`` (nor
``set_autocast_cache_enabled``, ``clear_autocast_cache``), so ControlNet's checkpointed
``ResBlock`` failed on its first forward.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

VQGAN_SOURCE = '''
import copy
from collections import namedtuple

import torch


# taming/modules/vqvae/quantize.py
class VectorQuantizer(nn.Module):
    """
    see https://github.com/MishaLaskin/vqvae/blob/d761a999e2267766400dc646d82d3ac3657771d4/models/quantizer.py
    ____________________________________________
    Discretization bottleneck part of the VQ-VAE.
    Inputs:
    - n_e : number of embeddings
    - e_dim : dimension of embedding
    - beta : commitment cost used in loss term, beta * ||z_e(x)-sg[e]||^2
    _____________________________________________
    """

    # NOTE: this class contains a bug regarding beta; see VectorQuantizer2 for
    # a fix and use legacy=False to apply that fix. VectorQuantizer2 can be
    # used wherever VectorQuantizer has been used before and is additionally
    # more efficient.
    def __init__(self, n_e, e_dim, beta):
        super(VectorQuantizer, self).__init__()
        self.n_e = n_e
        self.e_dim = e_dim
        self.beta = beta

        self.embedding = nn.Embedding(self.n_e, self.e_dim)
        self.embedding.weight.data.uniform_(-1.0 / self.n_e, 1.0 / self.n_e)

    def forward(self, z):
        """
        Inputs the output of the encoder network z and maps it to a discrete
        one-hot vector that is the index of the closest embedding vector e_j
        z (continuous) -> z_q (discrete)
        z.shape = (batch, channel, height, width)
        quantization pipeline:
            1. get encoder input (B,C,H,W)
            2. flatten input to (B*H*W,C)
        """
        # reshape z -> (batch, height, width, channel) and flatten
        z = z.permute(0, 2, 3, 1).contiguous()
        z_flattened = z.view(-1, self.e_dim)
        # distances from z to embeddings e_j (z - e)^2 = z^2 + e^2 - 2 e * z

        d = torch.sum(z_flattened ** 2, dim=1, keepdim=True) + \\
            torch.sum(self.embedding.weight**2, dim=1) - 2 * \\
            torch.matmul(z_flattened, self.embedding.weight.t())

        ## could possible replace this here
        # #\\start...
        # find closest encodings
        min_encoding_indices = torch.argmin(d, dim=1).unsqueeze(1)

        min_encodings = torch.zeros(
            min_encoding_indices.shape[0], self.n_e).to(z)
        min_encodings.scatter_(1, min_encoding_indices, 1)

        # dtype min encodings: torch.float32
        # min_encodings shape: torch.Size([2048, 512])
        # min_encoding_indices.shape: torch.Size([2048, 1])

        # get quantized latent vectors
        z_q = torch.matmul(min_encodings, self.embedding.weight).view(z.shape)
        #.........\\end

        # with:
        # .........\\start
        #min_encoding_indices = torch.argmin(d, dim=1)
        #z_q = self.embedding(min_encoding_indices)
        # ......\\end......... (TODO)

        # compute loss for embedding
        loss = torch.mean((z_q.detach()-z)**2) + self.beta * \\
            torch.mean((z_q - z.detach()) ** 2)

        # preserve gradients
        z_q = z + (z_q - z).detach()

        # perplexity
        e_mean = torch.mean(min_encodings, dim=0)
        perplexity = torch.exp(-torch.sum(e_mean * torch.log(e_mean + 1e-10)))

        # reshape back to match original input shape
        z_q = z_q.permute(0, 3, 1, 2).contiguous()

        return z_q, loss, (perplexity, min_encodings, min_encoding_indices)


# taming/modules/discriminator/model.py
class ActNorm(nn.Module):
    def __init__(self, num_features, logdet=False, affine=True,
                 allow_reverse_init=False):
        assert affine
        super().__init__()
        self.logdet = logdet
        self.loc = nn.Parameter(torch.zeros(1, num_features, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, num_features, 1, 1))
        self.allow_reverse_init = allow_reverse_init

        self.register_buffer('initialized', torch.tensor(0, dtype=torch.uint8))

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

    def forward(self, input, reverse=False):
        if reverse:
            return self.reverse(input)
        if len(input.shape) == 2:
            input = input[:,:,None,None]
            squeeze = True
        else:
            squeeze = False

        _, _, height, width = input.shape

        if self.training and self.initialized.item() == 0:
            self.initialize(input)
            self.initialized.fill_(1)

        h = self.scale * (input + self.loc)

        if squeeze:
            h = h.squeeze(-1).squeeze(-1)

        if self.logdet:
            log_abs = torch.log(torch.abs(self.scale))
            logdet = height*width*torch.sum(log_abs)
            logdet = logdet * torch.ones(input.shape[0]).to(input)
            return h, logdet

        return h


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class NLayerDiscriminator(nn.Module):
    """Defines a PatchGAN discriminator as in Pix2Pix
        --> see https://github.com/junyanz/pytorch-CycleGAN-and-pix2pix/blob/master/models/networks.py
    """
    def __init__(self, input_nc=3, ndf=64, n_layers=3, use_actnorm=False):
        """Construct a PatchGAN discriminator
        Parameters:
            input_nc (int)  -- the number of channels in input images
            ndf (int)       -- the number of filters in the last conv layer
            n_layers (int)  -- the number of conv layers in the discriminator
            norm_layer      -- normalization layer
        """
        super(NLayerDiscriminator, self).__init__()
        if not use_actnorm:
            norm_layer = nn.BatchNorm2d
        else:
            norm_layer = ActNorm
        if type(norm_layer) == functools.partial:  # no need to use bias as BatchNorm2d has affine parameters
            use_bias = norm_layer.func != nn.BatchNorm2d
        else:
            use_bias = norm_layer != nn.BatchNorm2d

        kw = 4
        padw = 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        nf_mult_prev = 1
        for n in range(1, n_layers):  # gradually increase the number of filters
            nf_mult_prev = nf_mult
            nf_mult = min(2 ** n, 8)
            sequence += [
                nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=use_bias),
                norm_layer(ndf * nf_mult),
                nn.LeakyReLU(0.2, True)
            ]

        nf_mult_prev = nf_mult
        nf_mult = min(2 ** n_layers, 8)
        sequence += [
            nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=use_bias),
            norm_layer(ndf * nf_mult),
            nn.LeakyReLU(0.2, True)
        ]

        sequence += [
            nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]  # output 1 channel prediction map
        self.main = nn.Sequential(*sequence)

    def forward(self, input):
        """Standard forward."""
        return self.main(input)


# taming/modules/losses/lpips.py (vgg16's pretrained features: a tiny stand-in, below)
class LPIPS(nn.Module):
    # Learned perceptual metric
    def __init__(self, use_dropout=True):
        super().__init__()
        self.scaling_layer = ScalingLayer()
        self.chns = CHNS  # vg16 features
        self.net = vgg16(pretrained=True, requires_grad=False)
        self.lin0 = NetLinLayer(self.chns[0], use_dropout=use_dropout)
        self.lin1 = NetLinLayer(self.chns[1], use_dropout=use_dropout)
        for param in self.parameters():
            param.requires_grad = False

    def forward(self, input, target):
        in0_input, in1_input = (self.scaling_layer(input), self.scaling_layer(target))
        outs0, outs1 = self.net(in0_input), self.net(in1_input)
        feats0, feats1, diffs = {}, {}, {}
        lins = [self.lin0, self.lin1]
        for kk in range(len(self.chns)):
            feats0[kk], feats1[kk] = normalize_tensor(outs0[kk]), normalize_tensor(outs1[kk])
            diffs[kk] = (feats0[kk] - feats1[kk]) ** 2

        res = [spatial_average(lins[kk].model(diffs[kk]), keepdim=True) for kk in range(len(self.chns))]
        val = res[0]
        for l in range(1, len(self.chns)):
            val += res[l]
        return val


class ScalingLayer(nn.Module):
    def __init__(self):
        super(ScalingLayer, self).__init__()
        self.register_buffer('shift', torch.Tensor([-.030, -.088, -.188])[None, :, None, None])
        self.register_buffer('scale', torch.Tensor([.458, .448, .450])[None, :, None, None])

    def forward(self, inp):
        return (inp - self.shift) / self.scale


class NetLinLayer(nn.Module):
    """ A single linear layer which does a 1x1 conv """
    def __init__(self, chn_in, chn_out=1, use_dropout=False):
        super(NetLinLayer, self).__init__()
        layers = [nn.Dropout(), ] if (use_dropout) else []
        layers += [nn.Conv2d(chn_in, chn_out, 1, stride=1, padding=0, bias=False), ]
        self.model = nn.Sequential(*layers)


class vgg16(torch.nn.Module):
    def __init__(self, requires_grad=False, pretrained=True):
        super(vgg16, self).__init__()
        vgg_pretrained_features = pretrained_features()
        self.slice1 = torch.nn.Sequential()
        self.slice2 = torch.nn.Sequential()
        self.N_slices = 2
        for x in range(2):
            self.slice1.add_module(str(x), vgg_pretrained_features[x])
        for x in range(2, 5):
            self.slice2.add_module(str(x), vgg_pretrained_features[x])
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h = self.slice1(X)
        h_relu1_2 = h
        h = self.slice2(h)
        h_relu2_2 = h
        vgg_outputs = namedtuple("VggOutputs", ['relu1_2', 'relu2_2'])
        out = vgg_outputs(h_relu1_2, h_relu2_2)
        return out


def normalize_tensor(x,eps=1e-10):
    norm_factor = torch.sqrt(torch.sum(x**2,dim=1,keepdim=True))
    return x/(norm_factor+eps)


def spatial_average(x, keepdim=True):
    return x.mean([2,3],keepdim=keepdim)


# taming/modules/losses/vqperceptual.py
def adopt_weight(weight, global_step, threshold=0, value=0.):
    if global_step < threshold:
        weight = value
    return weight


def hinge_d_loss(logits_real, logits_fake):
    loss_real = torch.mean(F.relu(1. - logits_real))
    loss_fake = torch.mean(F.relu(1. + logits_fake))
    d_loss = 0.5 * (loss_real + loss_fake)
    return d_loss


def vanilla_d_loss(logits_real, logits_fake):
    d_loss = 0.5 * (
        torch.mean(torch.nn.functional.softplus(-logits_real)) +
        torch.mean(torch.nn.functional.softplus(logits_fake)))
    return d_loss


class VQLPIPSWithDiscriminator(nn.Module):
    def __init__(self, disc_start, codebook_weight=1.0, pixelloss_weight=1.0,
                 disc_num_layers=3, disc_in_channels=3, disc_factor=1.0, disc_weight=1.0,
                 perceptual_weight=1.0, use_actnorm=False, disc_conditional=False,
                 disc_ndf=64, disc_loss="hinge"):
        super().__init__()
        assert disc_loss in ["hinge", "vanilla"]
        self.codebook_weight = codebook_weight
        self.pixel_weight = pixelloss_weight
        self.perceptual_loss = LPIPS().eval()
        self.perceptual_weight = perceptual_weight

        self.discriminator = NLayerDiscriminator(input_nc=disc_in_channels,
                                                 n_layers=disc_num_layers,
                                                 use_actnorm=use_actnorm,
                                                 ndf=disc_ndf
                                                 ).apply(weights_init)
        self.discriminator_iter_start = disc_start
        if disc_loss == "hinge":
            self.disc_loss = hinge_d_loss
        elif disc_loss == "vanilla":
            self.disc_loss = vanilla_d_loss
        else:
            raise ValueError(f"Unknown GAN loss '{disc_loss}'.")
        print(f"VQLPIPSWithDiscriminator running with {disc_loss} loss.")
        self.disc_factor = disc_factor
        self.discriminator_weight = disc_weight
        self.disc_conditional = disc_conditional

    def calculate_adaptive_weight(self, nll_loss, g_loss, last_layer=None):
        if last_layer is not None:
            nll_grads = torch.autograd.grad(nll_loss, last_layer, retain_graph=True)[0]
            g_grads = torch.autograd.grad(g_loss, last_layer, retain_graph=True)[0]
        else:
            nll_grads = torch.autograd.grad(nll_loss, self.last_layer[0], retain_graph=True)[0]
            g_grads = torch.autograd.grad(g_loss, self.last_layer[0], retain_graph=True)[0]

        d_weight = torch.norm(nll_grads) / (torch.norm(g_grads) + 1e-4)
        d_weight = torch.clamp(d_weight, 0.0, 1e4).detach()
        d_weight = d_weight * self.discriminator_weight
        return d_weight

    def forward(self, codebook_loss, inputs, reconstructions, optimizer_idx,
                global_step, last_layer=None, cond=None, split="train"):
        rec_loss = torch.abs(inputs.contiguous() - reconstructions.contiguous())
        if self.perceptual_weight > 0:
            p_loss = self.perceptual_loss(inputs.contiguous(), reconstructions.contiguous())
            rec_loss = rec_loss + self.perceptual_weight * p_loss
        else:
            p_loss = torch.tensor([0.0])

        nll_loss = rec_loss
        #nll_loss = torch.sum(nll_loss) / nll_loss.shape[0]
        nll_loss = torch.mean(nll_loss)

        # now the GAN part
        if optimizer_idx == 0:
            # generator update
            if cond is None:
                assert not self.disc_conditional
                logits_fake = self.discriminator(reconstructions.contiguous())
            else:
                assert self.disc_conditional
                logits_fake = self.discriminator(torch.cat((reconstructions.contiguous(), cond), dim=1))
            g_loss = -torch.mean(logits_fake)

            try:
                d_weight = self.calculate_adaptive_weight(nll_loss, g_loss, last_layer=last_layer)
            except RuntimeError:
                assert not self.training
                d_weight = torch.tensor(0.0)

            disc_factor = adopt_weight(self.disc_factor, global_step, threshold=self.discriminator_iter_start)
            loss = nll_loss + d_weight * disc_factor * g_loss + self.codebook_weight * codebook_loss.mean()

            log = {"{}/total_loss".format(split): loss.clone().detach().mean(),
                   "{}/quant_loss".format(split): codebook_loss.detach().mean(),
                   "{}/nll_loss".format(split): nll_loss.detach().mean(),
                   "{}/rec_loss".format(split): rec_loss.detach().mean(),
                   "{}/p_loss".format(split): p_loss.detach().mean(),
                   "{}/d_weight".format(split): d_weight.detach(),
                   "{}/disc_factor".format(split): torch.tensor(disc_factor),
                   "{}/g_loss".format(split): g_loss.detach().mean(),
                   }
            return loss, log

        if optimizer_idx == 1:
            # second pass for discriminator update
            if cond is None:
                logits_real = self.discriminator(inputs.contiguous().detach())
                logits_fake = self.discriminator(reconstructions.contiguous().detach())
            else:
                logits_real = self.discriminator(torch.cat((inputs.contiguous().detach(), cond), dim=1))
                logits_fake = self.discriminator(torch.cat((reconstructions.contiguous().detach(), cond), dim=1))

            disc_factor = adopt_weight(self.disc_factor, global_step, threshold=self.discriminator_iter_start)
            d_loss = disc_factor * self.disc_loss(logits_real, logits_fake)

            log = {"{}/disc_loss".format(split): d_loss.clone().detach().mean(),
                   "{}/logits_real".format(split): logits_real.detach().mean(),
                   "{}/logits_fake".format(split): logits_fake.detach().mean()
                   }
            return d_loss, log


# taming/modules/diffusionmodules/model.py (tiny: one level down, one up)
def nonlinearity(x):
    # swish
    return x*torch.sigmoid(x)


def Normalize(in_channels):
    return torch.nn.GroupNorm(num_groups=2, num_channels=in_channels, eps=1e-6, affine=True)


class Downsample(nn.Module):
    def __init__(self, in_channels, with_conv):
        super().__init__()
        self.with_conv = with_conv
        if self.with_conv:
            # no asymmetric padding in torch conv, must do it ourselves
            self.conv = torch.nn.Conv2d(in_channels,
                                        in_channels,
                                        kernel_size=3,
                                        stride=2,
                                        padding=0)

    def forward(self, x):
        if self.with_conv:
            pad = (0,1,0,1)
            x = torch.nn.functional.pad(x, pad, mode="constant", value=0)
            x = self.conv(x)
        else:
            x = torch.nn.functional.avg_pool2d(x, kernel_size=2, stride=2)
        return x


class Upsample(nn.Module):
    def __init__(self, in_channels, with_conv):
        super().__init__()
        self.with_conv = with_conv
        if self.with_conv:
            self.conv = torch.nn.Conv2d(in_channels,
                                        in_channels,
                                        kernel_size=3,
                                        stride=1,
                                        padding=1)

    def forward(self, x):
        x = torch.nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
        if self.with_conv:
            x = self.conv(x)
        return x


class ResnetBlock(nn.Module):
    def __init__(self, *, in_channels, out_channels=None, conv_shortcut=False,
                 dropout, temb_channels=512):
        super().__init__()
        self.in_channels = in_channels
        out_channels = in_channels if out_channels is None else out_channels
        self.out_channels = out_channels
        self.use_conv_shortcut = conv_shortcut

        self.norm1 = Normalize(in_channels)
        self.conv1 = torch.nn.Conv2d(in_channels,
                                     out_channels,
                                     kernel_size=3,
                                     stride=1,
                                     padding=1)
        self.norm2 = Normalize(out_channels)
        self.dropout = torch.nn.Dropout(dropout)
        self.conv2 = torch.nn.Conv2d(out_channels,
                                     out_channels,
                                     kernel_size=3,
                                     stride=1,
                                     padding=1)
        if self.in_channels != self.out_channels:
            self.nin_shortcut = torch.nn.Conv2d(in_channels,
                                                out_channels,
                                                kernel_size=1,
                                                stride=1,
                                                padding=0)

    def forward(self, x, temb=None):
        h = x
        h = self.norm1(h)
        h = nonlinearity(h)
        h = self.conv1(h)

        h = self.norm2(h)
        h = nonlinearity(h)
        h = self.dropout(h)
        h = self.conv2(h)

        if self.in_channels != self.out_channels:
            x = self.nin_shortcut(x)

        return x+h


class Encoder(nn.Module):
    def __init__(self, *, ch, out_ch, in_channels, z_channels, dropout=0.0, **ignore_kwargs):
        super().__init__()
        self.conv_in = torch.nn.Conv2d(in_channels, ch, kernel_size=3, stride=1, padding=1)
        self.block = ResnetBlock(in_channels=ch, out_channels=2*ch, dropout=dropout)
        self.down = Downsample(2*ch, True)
        self.norm_out = Normalize(2*ch)
        self.conv_out = torch.nn.Conv2d(2*ch, z_channels, kernel_size=3, stride=1, padding=1)

    def forward(self, x):
        h = self.down(self.block(self.conv_in(x)))
        h = self.norm_out(h)
        h = nonlinearity(h)
        h = self.conv_out(h)
        return h


class Decoder(nn.Module):
    def __init__(self, *, ch, out_ch, in_channels, z_channels, dropout=0.0, **ignore_kwargs):
        super().__init__()
        self.conv_in = torch.nn.Conv2d(z_channels, 2*ch, kernel_size=3, stride=1, padding=1)
        self.block = ResnetBlock(in_channels=2*ch, out_channels=ch, dropout=dropout)
        self.up = Upsample(ch, True)
        self.norm_out = Normalize(ch)
        self.conv_out = torch.nn.Conv2d(ch, out_ch, kernel_size=3, stride=1, padding=1)

    def forward(self, z):
        h = self.up(self.block(self.conv_in(z)))
        h = self.norm_out(h)
        h = nonlinearity(h)
        h = self.conv_out(h)
        return h


# taming/models/vqgan.py (a plain nn.Module here: Lightning's loop is below)
class VQModel(nn.Module):
    def __init__(self,
                 ddconfig,
                 lossconfig,
                 n_embed,
                 embed_dim,
                 image_key="image",
                 ):
        super().__init__()
        self.image_key = image_key
        self.encoder = Encoder(**ddconfig)
        self.decoder = Decoder(**ddconfig)
        self.loss = VQLPIPSWithDiscriminator(**lossconfig)
        self.quantize = VectorQuantizer(n_embed, embed_dim, beta=0.25)
        self.quant_conv = torch.nn.Conv2d(ddconfig["z_channels"], embed_dim, 1)
        self.post_quant_conv = torch.nn.Conv2d(embed_dim, ddconfig["z_channels"], 1)
        self.global_step = 0

    def encode(self, x):
        h = self.encoder(x)
        h = self.quant_conv(h)
        quant, emb_loss, info = self.quantize(h)
        return quant, emb_loss, info

    def decode(self, quant):
        quant = self.post_quant_conv(quant)
        dec = self.decoder(quant)
        return dec

    def forward(self, input):
        quant, diff, _ = self.encode(input)
        dec = self.decode(quant)
        return dec, diff

    def get_input(self, batch, k):
        x = batch[k]
        if len(x.shape) == 3:
            x = x[..., None]
        x = x.permute(0, 3, 1, 2).to(memory_format=torch.contiguous_format)
        return x.float()

    def training_step(self, batch, batch_idx, optimizer_idx):
        x = self.get_input(batch, self.image_key)
        xrec, qloss = self(x)

        if optimizer_idx == 0:
            # autoencode
            aeloss, log_dict_ae = self.loss(qloss, x, xrec, optimizer_idx, self.global_step,
                                            last_layer=self.get_last_layer(), split="train")

            self.log_dict(log_dict_ae)
            return aeloss

        if optimizer_idx == 1:
            # discriminator
            discloss, log_dict_disc = self.loss(qloss, x, xrec, optimizer_idx, self.global_step,
                                            last_layer=self.get_last_layer(), split="train")
            self.log_dict(log_dict_disc)
            return discloss

    def validation_step(self, batch, batch_idx):
        x = self.get_input(batch, self.image_key)
        xrec, qloss = self(x)
        aeloss, log_dict_ae = self.loss(qloss, x, xrec, 0, self.global_step,
                                            last_layer=self.get_last_layer(), split="val")

        discloss, log_dict_disc = self.loss(qloss, x, xrec, 1, self.global_step,
                                            last_layer=self.get_last_layer(), split="val")
        rec_loss = log_dict_ae["val/rec_loss"]
        self.log_dict(log_dict_ae)
        self.log_dict(log_dict_disc)
        return self.log_dict

    def configure_optimizers(self):
        lr = self.learning_rate
        opt_ae = torch.optim.Adam(list(self.encoder.parameters())+
                                  list(self.decoder.parameters())+
                                  list(self.quantize.parameters())+
                                  list(self.quant_conv.parameters())+
                                  list(self.post_quant_conv.parameters()),
                                  lr=lr, betas=(0.5, 0.9))
        opt_disc = torch.optim.Adam(self.loss.discriminator.parameters(),
                                    lr=lr, betas=(0.5, 0.9))
        return [opt_ae, opt_disc], []

    def get_last_layer(self):
        return self.decoder.conv_out.weight

    def log_dict(self, log):
        record.append({k: v.item() for k, v in log.items()})


# -- the tiny pretrained features and the loop, written for the test --
CHNS = [4, 6]


def pretrained_features():
    features = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, padding=1), nn.ReLU(inplace=True),
    )
    initialize(features)
    return features


ddconfig = dict(ch=4, out_ch=3, in_channels=3, z_channels=4)
lossconfig = dict(disc_start=2, disc_num_layers=1, disc_in_channels=3, disc_ndf=4,
                  use_actnorm=args.use_actnorm, disc_loss=args.disc_loss, codebook_weight=1.0)
model = VQModel(ddconfig, lossconfig, n_embed=6, embed_dim=3)
initialize(model)
model.learning_rate = 1e-3
(opt_ae, opt_disc), _ = model.configure_optimizers()
batches = [{"image": torch.rand(2, 8, 8, 3) * 2 - 1} for _ in range(3)]
for batch_idx, batch in enumerate(batches):
    model.train()
    model.loss.perceptual_loss.eval()  # LPIPS's dropout off: its draws are torch's own
    for optimizer_idx, optimizer in enumerate((opt_ae, opt_disc)):
        loss = model.training_step(batch, batch_idx, optimizer_idx)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.global_step += 1
    record.append(params_of(model))
    record.append({k: v.numpy().copy() for k, v in model.state_dict().items() if "running" in k or "initialized" in k})
with torch.no_grad():
    model.eval()
    model.validation_step(batches[0], 0)
    _, _, (perplexity, min_encodings, min_encoding_indices) = model.encode(model.get_input(batches[1], "image"))
record.append(perplexity.item())
record.append(min_encoding_indices.numpy().copy())
record.append(min_encodings.sum(0).numpy().copy())
'''

STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


@pytest.mark.parametrize(("use_actnorm", "disc_loss"), [(True, "hinge"), (False, "vanilla")])
def test_taming_vqgan_trains_as_torch(capsys, use_actnorm, disc_loss):
    import functools
    import types

    args = types.SimpleNamespace(use_actnorm=use_actnorm, disc_loss=disc_loss)
    (theirs, ours), logs = runs_with_draws(
        VQGAN_SOURCE,
        STEPS,
        capsys,
        8701,
        initialize=initializer(),
        params_of=params_of,
        args=args,
        functools=functools,
    )
    assert logs[0] == logs[1] == f"VQLPIPSWithDiscriminator running with {disc_loss} loss.\n"
    # 3 steps of (2 logs, params, buffers), the validation's 2 logs, 3 samples
    assert len(theirs) == 3 * 4 + 2 + 3
    # before disc_start the adaptive weight is computed but not used; after it, both are
    assert theirs[0]["train/disc_factor"] == 0.0 and theirs[-5]["val/d_weight"] == 0.0
    assert theirs[8]["train/disc_factor"] == 1.0 and theirs[8]["train/d_weight"] > 0
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


SRGAN_SOURCE = """
import math

import torch
from torch import nn


# leftthomas/SRGAN model.py
class Generator(nn.Module):
    def __init__(self, scale_factor):
        upsample_block_num = int(math.log(scale_factor, 2))

        super(Generator, self).__init__()
        self.block1 = nn.Sequential(
            nn.Conv2d(3, C, kernel_size=9, padding=4),
            nn.PReLU()
        )
        self.block2 = ResidualBlock(C)
        self.block3 = ResidualBlock(C)
        self.block7 = nn.Sequential(
            nn.Conv2d(C, C, kernel_size=3, padding=1),
            nn.BatchNorm2d(C)
        )
        block8 = [UpsampleBLock(C, 2) for _ in range(upsample_block_num)]
        block8.append(nn.Conv2d(C, 3, kernel_size=9, padding=4))
        self.block8 = nn.Sequential(*block8)

    def forward(self, x):
        block1 = self.block1(x)
        block2 = self.block2(block1)
        block3 = self.block3(block2)
        block7 = self.block7(block3)
        block8 = self.block8(block1 + block7)

        return (torch.tanh(block8) + 1) / 2


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, C, kernel_size=3, padding=1),
            nn.LeakyReLU(0.2),

            nn.Conv2d(C, C, kernel_size=3, stride=2, padding=1),
            nn.BatchNorm2d(C),
            nn.LeakyReLU(0.2),

            nn.Conv2d(C, 2 * C, kernel_size=3, padding=1),
            nn.BatchNorm2d(2 * C),
            nn.LeakyReLU(0.2),

            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(2 * C, 4 * C, kernel_size=1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(4 * C, 1, kernel_size=1)
        )

    def forward(self, x):
        batch_size = x.size(0)
        return torch.sigmoid(self.net(x).view(batch_size))


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super(ResidualBlock, self).__init__()
        self.conv1 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.prelu = nn.PReLU()
        self.conv2 = nn.Conv2d(channels, channels, kernel_size=3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        residual = self.conv1(x)
        residual = self.bn1(residual)
        residual = self.prelu(residual)
        residual = self.conv2(residual)
        residual = self.bn2(residual)

        return x + residual


class UpsampleBLock(nn.Module):
    def __init__(self, in_channels, up_scale):
        super(UpsampleBLock, self).__init__()
        self.conv = nn.Conv2d(in_channels, in_channels * up_scale ** 2, kernel_size=3, padding=1)
        self.pixel_shuffle = nn.PixelShuffle(up_scale)
        self.prelu = nn.PReLU()

    def forward(self, x):
        x = self.conv(x)
        x = self.pixel_shuffle(x)
        x = self.prelu(x)
        return x


# leftthomas/SRGAN loss.py (vgg16(pretrained=True).features: a tiny stand-in)
class GeneratorLoss(nn.Module):
    def __init__(self):
        super(GeneratorLoss, self).__init__()
        vgg = vgg16(pretrained=True)
        loss_network = nn.Sequential(*list(vgg.features)[:31]).eval()
        for param in loss_network.parameters():
            param.requires_grad = False
        self.loss_network = loss_network
        self.mse_loss = nn.MSELoss()
        self.tv_loss = TVLoss()

    def forward(self, out_labels, out_images, target_images):
        # Adversarial Loss
        adversarial_loss = torch.mean(1 - out_labels)
        # Perception Loss
        perception_loss = self.mse_loss(self.loss_network(out_images), self.loss_network(target_images))
        # Image Loss
        image_loss = self.mse_loss(out_images, target_images)
        # TV Loss
        tv_loss = self.tv_loss(out_images)
        return image_loss + 0.001 * adversarial_loss + 0.006 * perception_loss + 2e-8 * tv_loss


class TVLoss(nn.Module):
    def __init__(self, tv_loss_weight=1):
        super(TVLoss, self).__init__()
        self.tv_loss_weight = tv_loss_weight

    def forward(self, x):
        batch_size = x.size()[0]
        h_x = x.size()[2]
        w_x = x.size()[3]
        count_h = self.tensor_size(x[:, :, 1:, :])
        count_w = self.tensor_size(x[:, :, :, 1:])
        h_tv = torch.pow((x[:, :, 1:, :] - x[:, :, :h_x - 1, :]), 2).sum()
        w_tv = torch.pow((x[:, :, :, 1:] - x[:, :, :, :w_x - 1]), 2).sum()
        return self.tv_loss_weight * 2 * (h_tv / count_h + w_tv / count_w) / batch_size

    @staticmethod
    def tensor_size(t):
        return t.size()[1] * t.size()[2] * t.size()[3]


# -- the tiny pretrained VGG and the data, written for the test --
C = 4


class vgg16:
    def __init__(self, pretrained):
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
            nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(inplace=True),
        )
        initialize(self.features)


netG = Generator(UPSCALE_FACTOR)
netD = Discriminator()
generator_criterion = GeneratorLoss()
initialize(netG)
initialize(netD)
optimizerG = optim.Adam(netG.parameters())
optimizerD = optim.Adam(netD.parameters())
train_loader = [(torch.rand(2, 3, 4, 4), torch.rand(2, 3, 8, 8)) for _ in range(2)]

# leftthomas/SRGAN train.py
for epoch in range(1, NUM_EPOCHS + 1):
    running_results = {'batch_sizes': 0, 'd_loss': 0, 'g_loss': 0, 'd_score': 0, 'g_score': 0}

    netG.train()
    netD.train()
    for data, target in train_loader:
        g_update_first = True
        batch_size = data.size(0)
        running_results['batch_sizes'] += batch_size

        ############################
        # (1) Update D network: maximize D(x)-1-D(G(z))
        ###########################
        real_img = target
        z = data
        fake_img = netG(z)

        netD.zero_grad()
        real_out = netD(real_img).mean()
        fake_out = netD(fake_img).mean()
        d_loss = 1 - real_out + fake_out
        d_loss.backward(retain_graph=True)
        optimizerD.step()

        ############################
        # (2) Update G network: minimize 1-D(G(z)) + Perception Loss + Image Loss + TV Loss
        ###########################
        netG.zero_grad()
        ## The two lines below are added to prevent runetime error in Google Colab ##
        fake_img = netG(z)
        fake_out = netD(fake_img).mean()
        ##
        g_loss = generator_criterion(fake_out, fake_img, real_img)
        g_loss.backward()

        fake_img = netG(z)
        fake_out = netD(fake_img).mean()


        optimizerG.step()

        # loss for current batch before optimization
        running_results['g_loss'] += g_loss.item() * batch_size
        running_results['d_loss'] += d_loss.item() * batch_size
        running_results['d_score'] += real_out.item() * batch_size
        running_results['g_score'] += fake_out.item() * batch_size

        print('[%d/%d] Loss_D: %.4f Loss_G: %.4f D(x): %.4f D(G(z)): %.4f' % (
            epoch, NUM_EPOCHS, running_results['d_loss'] / running_results['batch_sizes'],
            running_results['g_loss'] / running_results['batch_sizes'],
            running_results['d_score'] / running_results['batch_sizes'],
            running_results['g_score'] / running_results['batch_sizes']))
        record.append(dict(running_results))
        record.append(params_of(netG, netD))
    netG.eval()
    with torch.no_grad():
        sr = netG(train_loader[0][0])
    record.append(sr.numpy().copy())
    record.append(params_of(generator_criterion))
"""

SRGAN_STEPS = [
    (
        "\nimport torch\nfrom torch import nn\n",
        "\nimport retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        d_loss.backward(retain_graph=True)\n        optimizerD.step()\n",
        "        d_grads = d_loss.backward(retain_graph=True)\n        optimizerD.step(d_grads)\n",
    ),
    ("        g_loss.backward()\n", "        g_grads = g_loss.backward()\n"),
    ("        optimizerG.step()\n", "        optimizerG.step(g_grads)\n"),
]


def test_leftthomas_srgan_trains_as_torch(capsys):
    (theirs, ours), logs = runs_with_draws(
        SRGAN_SOURCE,
        SRGAN_STEPS,
        capsys,
        8702,
        initialize=initializer(),
        params_of=params_of,
        UPSCALE_FACTOR=2,
        NUM_EPOCHS=1,
    )
    assert len(theirs) == 2 * 2 + 2
    assert logs[0].count("\n") == 2
    # a convolution's bias just before a BatchNorm has no true gradient (Adam follows noise)
    before_batch_norm = [
        *(f"0.block{i}.conv{j}.bias" for i in (2, 3) for j in (1, 2)),
        "0.block7.0.bias",
        "1.net.2.bias",
        "1.net.5.bias",
    ]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=before_batch_norm)
    # the frozen loss network never moved
    assert all(np.array_equal(v, theirs[-1][k]) for k, v in ours[-1].items())


ESRGAN_SOURCE = """
import functools
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init


# codes/models/modules/module_util.py
def initialize_weights(net_l, scale=1):
    if not isinstance(net_l, list):
        net_l = [net_l]
    for net in net_l:
        for m in net.modules():
            if isinstance(m, nn.Conv2d):
                init.kaiming_normal_(m.weight, a=0, mode='fan_in')
                m.weight.data *= scale  # for residual block
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.Linear):
                init.kaiming_normal_(m.weight, a=0, mode='fan_in')
                m.weight.data *= scale
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):
                init.constant_(m.weight, 1)
                init.constant_(m.bias.data, 0.0)


def make_layer(block, n_layers):
    layers = []
    for _ in range(n_layers):
        layers.append(block())
    return nn.Sequential(*layers)


# codes/models/modules/RRDBNet_arch.py
class ResidualDenseBlock_5C(nn.Module):
    def __init__(self, nf=64, gc=32, bias=True):
        super(ResidualDenseBlock_5C, self).__init__()
        # gc: growth channel, i.e. intermediate channels
        self.conv1 = nn.Conv2d(nf, gc, 3, 1, 1, bias=bias)
        self.conv2 = nn.Conv2d(nf + gc, gc, 3, 1, 1, bias=bias)
        self.conv3 = nn.Conv2d(nf + 2 * gc, gc, 3, 1, 1, bias=bias)
        self.conv4 = nn.Conv2d(nf + 3 * gc, gc, 3, 1, 1, bias=bias)
        self.conv5 = nn.Conv2d(nf + 4 * gc, nf, 3, 1, 1, bias=bias)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

        # initialization
        initialize_weights([self.conv1, self.conv2, self.conv3, self.conv4, self.conv5], 0.1)

    def forward(self, x):
        x1 = self.lrelu(self.conv1(x))
        x2 = self.lrelu(self.conv2(torch.cat((x, x1), 1)))
        x3 = self.lrelu(self.conv3(torch.cat((x, x1, x2), 1)))
        x4 = self.lrelu(self.conv4(torch.cat((x, x1, x2, x3), 1)))
        x5 = self.conv5(torch.cat((x, x1, x2, x3, x4), 1))
        return x5 * 0.2 + x


class RRDB(nn.Module):
    \'\'\'Residual in Residual Dense Block\'\'\'

    def __init__(self, nf, gc=32):
        super(RRDB, self).__init__()
        self.RDB1 = ResidualDenseBlock_5C(nf, gc)
        self.RDB2 = ResidualDenseBlock_5C(nf, gc)
        self.RDB3 = ResidualDenseBlock_5C(nf, gc)

    def forward(self, x):
        out = self.RDB1(x)
        out = self.RDB2(out)
        out = self.RDB3(out)
        return out * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, in_nc, out_nc, nf, nb, gc=32):
        super(RRDBNet, self).__init__()
        RRDB_block_f = functools.partial(RRDB, nf=nf, gc=gc)

        self.conv_first = nn.Conv2d(in_nc, nf, 3, 1, 1, bias=True)
        self.RRDB_trunk = make_layer(RRDB_block_f, nb)
        self.trunk_conv = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        #### upsampling
        self.upconv1 = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.HRconv = nn.Conv2d(nf, nf, 3, 1, 1, bias=True)
        self.conv_last = nn.Conv2d(nf, out_nc, 3, 1, 1, bias=True)

        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        fea = self.conv_first(x)
        trunk = self.trunk_conv(self.RRDB_trunk(fea))
        fea = fea + trunk

        fea = self.lrelu(self.upconv1(F.interpolate(fea, scale_factor=2, mode='nearest')))
        out = self.conv_last(self.lrelu(self.HRconv(fea)))

        return out


# codes/models/modules/loss.py
class GANLoss(nn.Module):
    def __init__(self, gan_type, real_label_val=1.0, fake_label_val=0.0):
        super(GANLoss, self).__init__()
        self.gan_type = gan_type.lower()
        self.real_label_val = real_label_val
        self.fake_label_val = fake_label_val

        if self.gan_type == 'gan' or self.gan_type == 'ragan':
            self.loss = nn.BCEWithLogitsLoss()
        elif self.gan_type == 'lsgan':
            self.loss = nn.MSELoss()
        elif self.gan_type == 'wgan-gp':

            def wgan_loss(input, target):
                # target is boolean
                return -1 * input.mean() if target else input.mean()

            self.loss = wgan_loss
        else:
            raise NotImplementedError('GAN type [{:s}] is not found'.format(self.gan_type))

    def get_target_label(self, input, target_is_real):
        if self.gan_type == 'wgan-gp':
            return target_is_real
        if target_is_real:
            return torch.empty_like(input).fill_(self.real_label_val)
        else:
            return torch.empty_like(input).fill_(self.fake_label_val)

    def forward(self, input, target_is_real):
        target_label = self.get_target_label(input, target_is_real)
        loss = self.loss(input, target_label)
        return loss


# codes/models/modules/discriminator_vgg_arch.py (torchvision's pretrained vgg19: a tiny stand-in)
class VGGFeatureExtractor(nn.Module):
    def __init__(self, feature_layer=34, use_bn=False, use_input_norm=True,
                 device=torch.device('cpu')):
        super(VGGFeatureExtractor, self).__init__()
        self.use_input_norm = use_input_norm
        model = vgg19(pretrained=True)
        if self.use_input_norm:
            mean = torch.Tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1).to(device)
            # [0.485 - 1, 0.456 - 1, 0.406 - 1] if input in range [-1, 1]
            std = torch.Tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1).to(device)
            # [0.229 * 2, 0.224 * 2, 0.225 * 2] if input in range [-1, 1]
            self.register_buffer('mean', mean)
            self.register_buffer('std', std)
        self.features = nn.Sequential(*list(model.features.children())[:(feature_layer + 1)])
        # No need to BP to variable
        for k, v in self.features.named_parameters():
            v.requires_grad = False

    def forward(self, x):
        # Assume input range is [0, 1]
        if self.use_input_norm:
            x = (x - self.mean) / self.std
        output = self.features(x)
        return output


class vgg19:
    def __init__(self, pretrained):
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2),
            nn.Conv2d(4, 4, 3, padding=1),
        )
        initialize(self.features)


class Discriminator(nn.Module):
    def __init__(self, in_nc, nf):
        super(Discriminator, self).__init__()
        self.conv0_0 = nn.Conv2d(in_nc, nf, 3, 1, 1, bias=True)
        self.conv0_1 = nn.Conv2d(nf, nf, 4, 2, 1, bias=False)
        self.bn0_1 = nn.BatchNorm2d(nf, affine=True)
        self.linear1 = nn.Linear(nf * 4 * 4, 8)
        self.linear2 = nn.Linear(8, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        fea = self.lrelu(self.conv0_0(x))
        fea = self.lrelu(self.bn0_1(self.conv0_1(fea)))
        fea = fea.view(fea.size(0), -1)
        fea = self.lrelu(self.linear1(fea))
        out = self.linear2(fea)
        return out


# codes/models/SRGAN_model.py (optimize_parameters)
class SRGANModel:
    def __init__(self, train_opt):
        self.netG = RRDBNet(3, 3, nf=4, nb=1, gc=2)
        self.netD = Discriminator(3, 4)
        self.netF = VGGFeatureExtractor(feature_layer=3, use_bn=False, use_input_norm=True)
        self.netF.eval()
        initialize(self.netG)
        initialize(self.netD)
        self.cri_pix = nn.L1Loss()
        self.l_pix_w = train_opt['pixel_weight']
        self.cri_fea = nn.L1Loss()
        self.l_fea_w = train_opt['feature_weight']
        self.cri_gan = GANLoss(train_opt['gan_type'], 1.0, 0.0)
        self.l_gan_w = train_opt['gan_weight']
        self.D_update_ratio = train_opt['D_update_ratio'] if train_opt['D_update_ratio'] else 1
        self.D_init_iters = train_opt['D_init_iters'] if train_opt['D_init_iters'] else 0
        self.opt = {'train': train_opt}

        # optimizers
        # G
        wd_G = train_opt['weight_decay_G'] if train_opt['weight_decay_G'] else 0
        optim_params = []
        for k, v in self.netG.named_parameters():  # can optimize for a part of the model
            if v.requires_grad:
                optim_params.append(v)
        self.optimizer_G = torch.optim.Adam(optim_params, lr=train_opt['lr_G'],
                                            weight_decay=wd_G,
                                            betas=(train_opt['beta1_G'], train_opt['beta2_G']))
        # D
        wd_D = train_opt['weight_decay_D'] if train_opt['weight_decay_D'] else 0
        self.optimizer_D = torch.optim.Adam(self.netD.parameters(), lr=train_opt['lr_D'],
                                            weight_decay=wd_D,
                                            betas=(train_opt['beta1_D'], train_opt['beta2_D']))
        self.log_dict = OrderedDict()

    def feed_data(self, data, need_GT=True):
        self.var_L = data['LQ']  # LQ
        if need_GT:
            self.var_H = data['GT']  # GT
            input_ref = data['ref'] if 'ref' in data else data['GT']
            self.var_ref = input_ref

    def optimize_parameters(self, step):
        # G
        for p in self.netD.parameters():
            p.requires_grad = False

        self.optimizer_G.zero_grad()
        self.fake_H = self.netG(self.var_L)

        l_g_total = 0
        if step % self.D_update_ratio == 0 and step > self.D_init_iters:
            if self.cri_pix:  # pixel loss
                l_g_pix = self.l_pix_w * self.cri_pix(self.fake_H, self.var_H)
                l_g_total += l_g_pix
            if self.cri_fea:  # feature loss
                real_fea = self.netF(self.var_H).detach()
                fake_fea = self.netF(self.fake_H)
                l_g_fea = self.l_fea_w * self.cri_fea(fake_fea, real_fea)
                l_g_total += l_g_fea

            pred_g_fake = self.netD(self.fake_H)
            if self.opt['train']['gan_type'] == 'gan':
                l_g_gan = self.l_gan_w * self.cri_gan(pred_g_fake, True)
            elif self.opt['train']['gan_type'] == 'ragan':
                pred_d_real = self.netD(self.var_ref).detach()
                l_g_gan = self.l_gan_w * (
                    self.cri_gan(pred_d_real - torch.mean(pred_g_fake), False) +
                    self.cri_gan(pred_g_fake - torch.mean(pred_d_real), True)) / 2
            l_g_total += l_g_gan

            l_g_total.backward()
            self.optimizer_G.step()

        # D
        for p in self.netD.parameters():
            p.requires_grad = True

        self.optimizer_D.zero_grad()
        l_d_total = 0
        pred_d_real = self.netD(self.var_ref)
        pred_d_fake = self.netD(self.fake_H.detach())  # detach to avoid BP to G
        if self.opt['train']['gan_type'] == 'gan':
            l_d_real = self.cri_gan(pred_d_real, True)
            l_d_fake = self.cri_gan(pred_d_fake, False)
            l_d_total = l_d_real + l_d_fake
        elif self.opt['train']['gan_type'] == 'ragan':
            l_d_real = self.cri_gan(pred_d_real - torch.mean(pred_d_fake), True)
            l_d_fake = self.cri_gan(pred_d_fake - torch.mean(pred_d_real), False)
            l_d_total = (l_d_real + l_d_fake) / 2

        l_d_total.backward()
        self.optimizer_D.step()

        # set log
        if step % self.D_update_ratio == 0 and step > self.D_init_iters:
            if self.cri_pix:
                self.log_dict['l_g_pix'] = l_g_pix.item()
            if self.cri_fea:
                self.log_dict['l_g_fea'] = l_g_fea.item()
            self.log_dict['l_g_gan'] = l_g_gan.item()

        self.log_dict['l_d_real'] = l_d_real.item()
        self.log_dict['l_d_fake'] = l_d_fake.item()
        self.log_dict['D_real'] = torch.mean(pred_d_real.detach())
        self.log_dict['D_fake'] = torch.mean(pred_d_fake.detach())


model = SRGANModel(train_opt)
for current_step in range(3):
    model.feed_data({'LQ': torch.rand(2, 3, 4, 4), 'GT': torch.rand(2, 3, 8, 8)})
    model.optimize_parameters(current_step)
    record.append({k: float(v) for k, v in model.log_dict.items()})
    record.append(float(model.log_dict['D_real'] - model.log_dict['D_fake']))
    record.append(params_of(model.netG, model.netD))
    record.append([name for name, p in model.netD.named_parameters() if not p.requires_grad])
    record.append([name for name, p in model.netF.named_parameters() if p.requires_grad])
"""

ESRGAN_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.nn.init as init\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.nn.init as init\n",
    ),
    (
        "            l_g_total.backward()\n            self.optimizer_G.step()\n",
        "            self.optimizer_G.step(l_g_total.backward())\n",
    ),
    (
        "        l_d_total.backward()\n        self.optimizer_D.step()\n",
        "        self.optimizer_D.step(l_d_total.backward())\n",
    ),
]


def test_basicsr_esrgan_trains_as_torch(capsys):
    train_opt = {
        "pixel_weight": 1e-2,
        "feature_weight": 1.0,
        "gan_type": "ragan",
        "gan_weight": 5e-3,
        "D_update_ratio": 1,
        "D_init_iters": 0,
        "lr_G": 1e-3,
        "weight_decay_G": 0,
        "beta1_G": 0.9,
        "beta2_G": 0.99,
        "lr_D": 1e-3,
        "weight_decay_D": 0,
        "beta1_D": 0.9,
        "beta2_D": 0.99,
    }
    (theirs, ours), _ = runs_with_draws(
        ESRGAN_SOURCE,
        ESRGAN_STEPS,
        capsys,
        8703,
        initialize=initializer(),
        params_of=params_of,
        train_opt=train_opt,
    )
    assert len(theirs) == 3 * 5
    assert list(theirs[0]) == ["l_d_real", "l_d_fake", "D_real", "D_fake"]  # step 0: D only
    assert list(theirs[5]) == [
        "l_d_real",
        "l_d_fake",
        "D_real",
        "D_fake",
        "l_g_pix",
        "l_g_fea",
        "l_g_gan",
    ]
    assert theirs[3] == [] and theirs[4] == []
    # the relativistic losses see D's outputs only by differences: its last bias (so the raw
    # D_real and D_fake, recorded as their difference) and the biases of units that the
    # leaky ReLU passes on one side for every sample have no true gradient
    shift_invariant = ["1.linear1.bias", "1.linear2.bias", "D_real", "D_fake"]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=shift_invariant)


CONTROLNET_SOURCE = '''
import copy
import math

import torch
import torch as th
import torch.nn as nn


# ldm/modules/diffusionmodules/util.py
def conv_nd(dims, *args, **kwargs):
    """
    Create a 1D, 2D, or 3D convolution module.
    """
    if dims == 1:
        return nn.Conv1d(*args, **kwargs)
    elif dims == 2:
        return nn.Conv2d(*args, **kwargs)
    elif dims == 3:
        return nn.Conv3d(*args, **kwargs)
    raise ValueError(f"unsupported dimensions: {dims}")


def linear(*args, **kwargs):
    """
    Create a linear module.
    """
    return nn.Linear(*args, **kwargs)


def zero_module(module):
    """
    Zero out the parameters of a module and return it.
    """
    for p in module.parameters():
        p.detach().zero_()
    return module


def normalization(channels):
    """
    Make a standard normalization layer.
    :param channels: number of input channels.
    :return: an nn.Module for normalization.
    """
    return GroupNorm32(2, channels)


def checkpoint(func, inputs, params, flag):
    """
    Evaluate a function without caching intermediate activations, allowing for
    reduced memory at the expense of extra compute in the backward pass.
    :param func: the function to evaluate.
    :param inputs: the argument sequence to pass to `func`.
    :param params: a sequence of parameters `func` depends on but does not
                   explicitly take as arguments.
    :param flag: if False, disable gradient checkpointing.
    """
    if flag:
        args = tuple(inputs) + tuple(params)
        return CheckpointFunction.apply(func, len(inputs), *args)
    else:
        return func(*inputs)


class CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function, length, *args):
        ctx.run_function = run_function
        ctx.input_tensors = list(args[:length])
        ctx.input_params = list(args[length:])
        ctx.gpu_autocast_kwargs = {"enabled": torch.is_autocast_enabled(),
                                   "dtype": torch.get_autocast_gpu_dtype(),
                                   "cache_enabled": torch.is_autocast_cache_enabled()}
        with torch.no_grad():
            output_tensors = ctx.run_function(*ctx.input_tensors)
        return output_tensors

    @staticmethod
    def backward(ctx, *output_grads):
        ctx.input_tensors = [x.detach().requires_grad_(True) for x in ctx.input_tensors]
        with torch.enable_grad(), \\
                torch.cuda.amp.autocast(**ctx.gpu_autocast_kwargs):
            # Fixes a bug where the first op in run_function modifies the
            # Tensor storage in place, which is not allowed for detach()'d
            # Tensors.
            shallow_copies = [x.view_as(x) for x in ctx.input_tensors]
            output_tensors = ctx.run_function(*shallow_copies)
        input_grads = torch.autograd.grad(
            output_tensors,
            ctx.input_tensors + ctx.input_params,
            output_grads,
            allow_unused=True,
        )
        del ctx.input_tensors
        del ctx.input_params
        del output_tensors
        return (None, None) + input_grads


class GroupNorm32(nn.GroupNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


def timestep_embedding(timesteps, dim, max_period=10000, repeat_only=False):
    """
    Create sinusoidal timestep embeddings.
    :param timesteps: a 1-D Tensor of N indices, one per batch element.
                      These may be fractional.
    :param dim: the dimension of the output.
    :param max_period: controls the minimum frequency of the embeddings.
    :return: an [N x dim] Tensor of positional embeddings.
    """
    if not repeat_only:
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
        ).to(device=timesteps.device)
        args = timesteps[:, None].float() * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    else:
        embedding = repeat(timesteps, 'b -> b d', d=dim)
    return embedding


# ldm/modules/diffusionmodules/openaimodel.py (tiny: one ResBlock a level)
class TimestepBlock(nn.Module):
    """
    Any module where forward() takes timestep embeddings as a second argument.
    """

    def forward(self, x, emb):
        """
        Apply the module to `x` given `emb` timestep embeddings.
        """


class TimestepEmbedSequential(nn.Sequential, TimestepBlock):
    """
    A sequential module that passes timestep embeddings to the children that
    support it as an extra input.
    """

    def forward(self, x, emb, context=None):
        for layer in self:
            if isinstance(layer, TimestepBlock):
                x = layer(x, emb)
            else:
                x = layer(x)
        return x


class ResBlock(TimestepBlock):
    def __init__(self, channels, emb_channels, dropout, out_channels=None, dims=2, use_checkpoint=USE_CHECKPOINT):
        super().__init__()
        self.use_checkpoint = use_checkpoint
        self.channels = channels
        self.emb_channels = emb_channels
        self.dropout = dropout
        self.out_channels = out_channels or channels

        self.in_layers = nn.Sequential(
            normalization(channels),
            nn.SiLU(),
            conv_nd(dims, channels, self.out_channels, 3, padding=1),
        )
        self.emb_layers = nn.Sequential(
            nn.SiLU(),
            linear(emb_channels, self.out_channels),
        )
        self.out_layers = nn.Sequential(
            normalization(self.out_channels),
            nn.SiLU(),
            nn.Dropout(p=dropout),
            zero_module(
                conv_nd(dims, self.out_channels, self.out_channels, 3, padding=1)
            ),
        )
        if self.out_channels == channels:
            self.skip_connection = nn.Identity()
        else:
            self.skip_connection = conv_nd(dims, channels, self.out_channels, 1)

    def forward(self, x, emb):
        """
        Apply the block to a Tensor, conditioned on a timestep embedding.
        :param x: an [N x C x ...] Tensor of features.
        :param emb: an [N x emb_channels] Tensor of timestep embeddings.
        :return: an [N x C x ...] Tensor of outputs.
        """
        return checkpoint(
            self._forward, (x, emb), self.parameters(), self.use_checkpoint
        )

    def _forward(self, x, emb):
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)
        while len(emb_out.shape) < len(h.shape):
            emb_out = emb_out[..., None]
        h = h + emb_out
        h = self.out_layers(h)
        return self.skip_connection(x) + h


class Downsample(nn.Module):
    def __init__(self, channels, use_conv, dims=2, out_channels=None, padding=1):
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.op = conv_nd(dims, self.channels, self.out_channels, 3, stride=2, padding=padding)

    def forward(self, x):
        assert x.shape[1] == self.channels
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, channels, use_conv, dims=2, out_channels=None, padding=1):
        super().__init__()
        self.channels = channels
        self.out_channels = out_channels or channels
        self.conv = conv_nd(dims, self.channels, self.out_channels, 3, padding=padding)

    def forward(self, x):
        assert x.shape[1] == self.channels
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        return self.conv(x)


class UNetModel(nn.Module):
    def __init__(self, in_channels, model_channels, out_channels, dropout=0, dims=2):
        super().__init__()
        self.model_channels = model_channels
        self.dtype = th.float32
        time_embed_dim = model_channels * 4
        self.time_embed = nn.Sequential(
            linear(model_channels, time_embed_dim),
            nn.SiLU(),
            linear(time_embed_dim, time_embed_dim),
        )
        ch = model_channels
        self.input_blocks = nn.ModuleList(
            [
                TimestepEmbedSequential(conv_nd(dims, in_channels, ch, 3, padding=1)),
                TimestepEmbedSequential(ResBlock(ch, time_embed_dim, dropout, out_channels=ch)),
                TimestepEmbedSequential(Downsample(ch, True, dims=dims)),
                TimestepEmbedSequential(ResBlock(ch, time_embed_dim, dropout, out_channels=2 * ch)),
            ]
        )
        self.middle_block = TimestepEmbedSequential(
            ResBlock(2 * ch, time_embed_dim, dropout),
        )
        self.output_blocks = nn.ModuleList(
            [
                TimestepEmbedSequential(ResBlock(4 * ch, time_embed_dim, dropout, out_channels=2 * ch)),
                TimestepEmbedSequential(ResBlock(3 * ch, time_embed_dim, dropout, out_channels=2 * ch), Upsample(2 * ch, True, dims=dims)),
                TimestepEmbedSequential(ResBlock(3 * ch, time_embed_dim, dropout, out_channels=ch)),
                TimestepEmbedSequential(ResBlock(2 * ch, time_embed_dim, dropout, out_channels=ch)),
            ]
        )
        self.out = nn.Sequential(
            normalization(ch),
            nn.SiLU(),
            zero_module(conv_nd(dims, ch, out_channels, 3, padding=1)),
        )


# cldm/cldm.py
class ControlledUnetModel(UNetModel):
    def forward(self, x, timesteps=None, context=None, control=None, only_mid_control=False, **kwargs):
        hs = []
        with torch.no_grad():
            t_emb = timestep_embedding(timesteps, self.model_channels, repeat_only=False)
            emb = self.time_embed(t_emb)
            h = x.type(self.dtype)
            for module in self.input_blocks:
                h = module(h, emb, context)
                hs.append(h)
            h = self.middle_block(h, emb, context)

        if control is not None:
            h += control.pop()

        for i, module in enumerate(self.output_blocks):
            if only_mid_control or control is None:
                h = torch.cat([hs.pop(), h], dim=1)
            else:
                h = torch.cat([hs.pop() + control.pop(), h], dim=1)
            h = module(h, emb, context)

        h = h.type(x.dtype)
        return self.out(h)


class ControlNet(nn.Module):
    def __init__(self, unet, hint_channels, model_channels, dims=2):
        super().__init__()
        self.dims = dims
        self.model_channels = model_channels
        self.dtype = th.float32
        # the trainable copy of the locked encoder
        self.time_embed = copy.deepcopy(unet.time_embed)
        self.input_blocks = copy.deepcopy(unet.input_blocks)
        self.middle_block = copy.deepcopy(unet.middle_block)
        self.zero_convs = nn.ModuleList([self.make_zero_conv(model_channels)])

        self.input_hint_block = TimestepEmbedSequential(
            conv_nd(dims, hint_channels, 4, 3, padding=1),
            nn.SiLU(),
            conv_nd(dims, 4, 4, 3, padding=1),
            nn.SiLU(),
            zero_module(conv_nd(dims, 4, model_channels, 3, padding=1))
        )

        for ch in (model_channels, model_channels, 2 * model_channels):
            self.zero_convs.append(self.make_zero_conv(ch))

        self.middle_block_out = self.make_zero_conv(2 * model_channels)

    def make_zero_conv(self, channels):
        return TimestepEmbedSequential(zero_module(conv_nd(self.dims, channels, channels, 1, padding=0)))

    def forward(self, x, hint, timesteps, context, **kwargs):
        t_emb = timestep_embedding(timesteps, self.model_channels, repeat_only=False)
        emb = self.time_embed(t_emb)

        guided_hint = self.input_hint_block(hint, emb, context)

        outs = []

        h = x.type(self.dtype)
        for module, zero_conv in zip(self.input_blocks, self.zero_convs):
            if guided_hint is not None:
                h = module(h, emb, context)
                h += guided_hint
                guided_hint = None
            else:
                h = module(h, emb, context)
            outs.append(zero_conv(h, emb, context))

        h = self.middle_block(h, emb, context)
        outs.append(self.middle_block_out(h, emb, context))

        return outs


# -- the model and the loop (ControlLDM.apply_model, configure_optimizers), written for the test --
diffusion_model = ControlledUnetModel(in_channels=2, model_channels=4, out_channels=2)
initialize(diffusion_model)
control_model = ControlNet(diffusion_model, hint_channels=3, model_channels=4)
initialize(control_model)
# the copy is its own: zeroing it leaves the locked model as it was
record.append(all(p is not q for p, q in zip(control_model.input_blocks.parameters(), diffusion_model.input_blocks.parameters())))
control_scales = [1.0] * 5

sd_locked = SD_LOCKED
lr = 1e-3
params = list(control_model.parameters())
if not sd_locked:
    params += list(diffusion_model.output_blocks.parameters())
    params += list(diffusion_model.out.parameters())
opt = torch.optim.AdamW(params, lr=lr)

alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-2, 0.2, 10), dim=0)
for step in range(2):
    x_start = torch.randn(2, 2, 4, 4)
    hint = torch.rand(2, 3, 4, 4)
    t = torch.randint(0, 10, (2,))
    noise = torch.randn_like(x_start)
    a = alphas_cumprod[t].view(-1, 1, 1, 1)
    x_noisy = a.sqrt() * x_start + (1 - a).sqrt() * noise
    control = control_model(x=x_noisy, hint=hint, timesteps=t, context=None)
    control = [c * scale for c, scale in zip(control, control_scales)]
    model_output = diffusion_model(x=x_noisy, timesteps=t, context=None, control=control, only_mid_control=False)
    loss = torch.nn.functional.mse_loss(model_output, noise)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(control_model, diffusion_model))
'''

CONTROLNET_STEPS = [
    (
        "\nimport torch\nimport torch as th\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd as th\nimport retrograd.nn as nn\n",
    ),
    ("    loss.backward()\n    opt.step()\n", "    opt.step(loss.backward())\n"),
]


@pytest.mark.parametrize(("sd_locked", "use_checkpoint"), [(False, True), (True, False)])
def test_controlnet_trains_its_copy_as_torch(capsys, sd_locked, use_checkpoint):
    (theirs, ours), _ = runs_with_draws(
        CONTROLNET_SOURCE,
        CONTROLNET_STEPS,
        capsys,
        8704,
        initialize=initializer(),
        params_of=params_of,
        SD_LOCKED=sd_locked,
        USE_CHECKPOINT=use_checkpoint,
    )
    assert theirs[0] is True and ours[0] is True
    assert len(theirs) == 1 + 2 * 2
    # the locked encoder never moves; unlocked, the decoder does
    before, after = theirs[2], theirs[-1]
    assert all(
        np.array_equal(before[k], after[k]) for k in before if k.startswith("1.input_blocks")
    )
    moved = [
        k
        for k in before
        if k.startswith("1.output_blocks") and not np.array_equal(before[k], after[k])
    ]
    assert bool(moved) is not sd_locked
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
