# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_68.py`` (the
harness: ``tests/real_ports.py``):

- HiFi-GAN as jik876/hifi-gan writes it (``models.py``'s ``ResBlock1``, ``ResBlock2``,
  ``Generator``, ``DiscriminatorP``, ``MultiPeriodDiscriminator``, ``DiscriminatorS``,
  ``MultiScaleDiscriminator``, ``feature_loss``, ``discriminator_loss`` and
  ``generator_loss``; ``utils.py``'s ``init_weights``, ``get_padding``, ``save_checkpoint`` and
  ``load_checkpoint``; ``meldataset.py``'s ``mel_spectrogram``; ``train.py``'s loop and
  validation; ``inference.py``'s ``remove_weight_norm`` and int16 audio), tiny: the channel
  counts, kernel sizes and periods as the repository has them divided down (``80`` mels, ``512``
  upsampling channels, ``32..1024`` discriminator channels become 8, 8 and 4..32; the grouped
  convolutions keep their groups), ``ConvTranspose1d`` upsampling, ``weight_norm`` on every
  convolution and ``init_weights`` writing ``m.weight.data.normal_`` after it (a write the next
  forward recomputes over, in torch as here), ``spectral_norm`` on the first scale
  discriminator (its power iteration's ``u`` carried across the forward passes), the periods'
  reflect ``F.pad`` and ``x.view(b, c, t // self.period, self.period)``, ``AvgPool1d(4, 2,
  padding=2)``, the mel spectrogram through ``torch.stft`` (in its real form,
  ``return_complex=False``: retrograd has no complex tensors) and ``torch.sqrt(spec.pow(2)
  .sum(-1)+(1e-9))``, the slaney mel basis (librosa's, computed here in NumPy), two ``AdamW``
  with ``ExponentialLR`` and the losses' format strings ``'{:4.3f}'.format(loss_gen_all)``.
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


def librosa_mel_fn(sr, n_fft, n_mels=128, fmin=0.0, fmax=None):
    """librosa.filters.mel (slaney mel scale, slaney normalisation) in NumPy: the constant
    that ``meldataset.py`` converts with ``torch.from_numpy(mel).float()``."""
    fmax = sr / 2.0 if fmax is None else fmax

    def hz_to_mel(f):
        f = np.asanyarray(f, dtype=np.float64)
        linear = f / (200.0 / 3)
        logstep = np.log(6.4) / 27.0
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / logstep, linear)

    def mel_to_hz(m):
        logstep = np.log(6.4) / 27.0
        return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), m * (200.0 / 3))

    fftfreqs = np.linspace(0, sr / 2.0, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    weights = np.zeros((n_mels, 1 + n_fft // 2))
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels]))[:, None]
    return weights.astype(np.float32)


HIFI_GAN_SOURCE = """
import itertools
import os
import torch
import torch.nn.functional as F
import torch.nn as nn
from torch.nn import Conv1d, ConvTranspose1d, AvgPool1d, Conv2d
from torch.nn.utils import weight_norm, remove_weight_norm, spectral_norm
from torch.utils.data import DataLoader


# utils.py
def init_weights(m, mean=0.0, std=0.01):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(mean, std)


def get_padding(kernel_size, dilation=1):
    return int((kernel_size*dilation - dilation)/2)


def load_checkpoint(filepath, device):
    assert os.path.isfile(filepath)
    print("Loading '{}'".format(os.path.basename(filepath)))
    checkpoint_dict = torch.load(filepath, map_location=device)
    print("Complete.")
    return checkpoint_dict


def save_checkpoint(filepath, obj):
    print("Saving checkpoint to {}".format(os.path.basename(filepath)))
    torch.save(obj, filepath)
    print("Complete.")


# meldataset.py
MAX_WAV_VALUE = 32768.0


def dynamic_range_compression_torch(x, C=1, clip_val=1e-5):
    return torch.log(torch.clamp(x, min=clip_val) * C)


def spectral_normalize_torch(magnitudes):
    output = dynamic_range_compression_torch(magnitudes)
    return output


mel_basis = {}
hann_window = {}


def mel_spectrogram(y, n_fft, num_mels, sampling_rate, hop_size, win_size, fmin, fmax, center=False):
    if torch.min(y) < -1.:
        print('min value is ', torch.min(y))
    if torch.max(y) > 1.:
        print('max value is ', torch.max(y))

    global mel_basis, hann_window
    if fmax not in mel_basis:
        mel = librosa_mel_fn(sampling_rate, n_fft, num_mels, fmin, fmax)
        mel_basis[str(fmax)+'_'+str(y.device)] = torch.from_numpy(mel).float().to(y.device)
        hann_window[str(y.device)] = torch.hann_window(win_size).to(y.device)

    y = torch.nn.functional.pad(y.unsqueeze(1), (int((n_fft-hop_size)/2), int((n_fft-hop_size)/2)), mode='reflect')
    y = y.squeeze(1)

    spec = torch.stft(y, n_fft, hop_length=hop_size, win_length=win_size, window=hann_window[str(y.device)],
                      center=center, pad_mode='reflect', normalized=False, onesided=True, return_complex=False)

    spec = torch.sqrt(spec.pow(2).sum(-1)+(1e-9))

    spec = torch.matmul(mel_basis[str(fmax)+'_'+str(y.device)], spec)
    spec = spectral_normalize_torch(spec)

    return spec


class MelDataset(torch.utils.data.Dataset):
    def __init__(self, audios, segment_size, n_fft, num_mels, hop_size, win_size, sampling_rate, fmin, fmax, fmax_loss=None):
        self.audios = audios
        self.segment_size = segment_size
        self.sampling_rate = sampling_rate
        self.n_fft = n_fft
        self.num_mels = num_mels
        self.hop_size = hop_size
        self.win_size = win_size
        self.fmin = fmin
        self.fmax = fmax
        self.fmax_loss = fmax_loss

    def __getitem__(self, index):
        audio = self.audios[index]
        audio = torch.FloatTensor(audio)
        audio = audio.unsqueeze(0)

        mel = mel_spectrogram(audio, self.n_fft, self.num_mels,
                              self.sampling_rate, self.hop_size, self.win_size, self.fmin, self.fmax,
                              center=False)

        mel_loss = mel_spectrogram(audio, self.n_fft, self.num_mels,
                                   self.sampling_rate, self.hop_size, self.win_size, self.fmin, self.fmax_loss,
                                   center=False)

        return (mel.squeeze(), audio.squeeze(0), str(index), mel_loss.squeeze())

    def __len__(self):
        return len(self.audios)


# models.py
LRELU_SLOPE = 0.1


class ResBlock1(torch.nn.Module):
    def __init__(self, h, channels, kernel_size=3, dilation=(1, 3, 5)):
        super(ResBlock1, self).__init__()
        self.h = h
        self.convs1 = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[0],
                               padding=get_padding(kernel_size, dilation[0]))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[1],
                               padding=get_padding(kernel_size, dilation[1]))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[2],
                               padding=get_padding(kernel_size, dilation[2])))
        ])
        self.convs1.apply(init_weights)

        self.convs2 = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                               padding=get_padding(kernel_size, 1))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                               padding=get_padding(kernel_size, 1))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=1,
                               padding=get_padding(kernel_size, 1)))
        ])
        self.convs2.apply(init_weights)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c1(xt)
            xt = F.leaky_relu(xt, LRELU_SLOPE)
            xt = c2(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for l in self.convs1:
            remove_weight_norm(l)
        for l in self.convs2:
            remove_weight_norm(l)


class ResBlock2(torch.nn.Module):
    def __init__(self, h, channels, kernel_size=3, dilation=(1, 3)):
        super(ResBlock2, self).__init__()
        self.h = h
        self.convs = nn.ModuleList([
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[0],
                               padding=get_padding(kernel_size, dilation[0]))),
            weight_norm(Conv1d(channels, channels, kernel_size, 1, dilation=dilation[1],
                               padding=get_padding(kernel_size, dilation[1])))
        ])
        self.convs.apply(init_weights)

    def forward(self, x):
        for c in self.convs:
            xt = F.leaky_relu(x, LRELU_SLOPE)
            xt = c(xt)
            x = xt + x
        return x

    def remove_weight_norm(self):
        for l in self.convs:
            remove_weight_norm(l)


class Generator(torch.nn.Module):
    def __init__(self, h):
        super(Generator, self).__init__()
        self.h = h
        self.num_kernels = len(h.resblock_kernel_sizes)
        self.num_upsamples = len(h.upsample_rates)
        self.conv_pre = weight_norm(Conv1d(8, h.upsample_initial_channel, 7, 1, padding=3))
        resblock = ResBlock1 if h.resblock == '1' else ResBlock2

        self.ups = nn.ModuleList()
        for i, (u, k) in enumerate(zip(h.upsample_rates, h.upsample_kernel_sizes)):
            self.ups.append(weight_norm(
                ConvTranspose1d(h.upsample_initial_channel//(2**i), h.upsample_initial_channel//(2**(i+1)),
                                k, u, padding=(k-u)//2)))

        self.resblocks = nn.ModuleList()
        for i in range(len(self.ups)):
            ch = h.upsample_initial_channel//(2**(i+1))
            for j, (k, d) in enumerate(zip(h.resblock_kernel_sizes, h.resblock_dilation_sizes)):
                self.resblocks.append(resblock(h, ch, k, d))

        self.conv_post = weight_norm(Conv1d(ch, 1, 7, 1, padding=3))
        self.ups.apply(init_weights)
        self.conv_post.apply(init_weights)

    def forward(self, x):
        x = self.conv_pre(x)
        for i in range(self.num_upsamples):
            x = F.leaky_relu(x, LRELU_SLOPE)
            x = self.ups[i](x)
            xs = None
            for j in range(self.num_kernels):
                if xs is None:
                    xs = self.resblocks[i*self.num_kernels+j](x)
                else:
                    xs += self.resblocks[i*self.num_kernels+j](x)
            x = xs / self.num_kernels
        x = F.leaky_relu(x)
        x = self.conv_post(x)
        x = torch.tanh(x)

        return x

    def remove_weight_norm(self):
        print('Removing weight norm...')
        for l in self.ups:
            remove_weight_norm(l)
        for l in self.resblocks:
            l.remove_weight_norm()
        remove_weight_norm(self.conv_pre)
        remove_weight_norm(self.conv_post)


class DiscriminatorP(torch.nn.Module):
    def __init__(self, period, kernel_size=5, stride=3, use_spectral_norm=False):
        super(DiscriminatorP, self).__init__()
        self.period = period
        norm_f = weight_norm if use_spectral_norm == False else spectral_norm
        self.convs = nn.ModuleList([
            norm_f(Conv2d(1, 4, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(4, 8, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(8, 16, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(16, 32, (kernel_size, 1), (stride, 1), padding=(get_padding(5, 1), 0))),
            norm_f(Conv2d(32, 32, (kernel_size, 1), 1, padding=(2, 0))),
        ])
        self.conv_post = norm_f(Conv2d(32, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, x):
        fmap = []

        # 1d to 2d
        b, c, t = x.shape
        if t % self.period != 0: # pad first
            n_pad = self.period - (t % self.period)
            x = F.pad(x, (0, n_pad), "reflect")
            t = t + n_pad
        x = x.view(b, c, t // self.period, self.period)

        for l in self.convs:
            x = l(x)
            x = F.leaky_relu(x, LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        x = torch.flatten(x, 1, -1)

        return x, fmap


class MultiPeriodDiscriminator(torch.nn.Module):
    def __init__(self):
        super(MultiPeriodDiscriminator, self).__init__()
        self.discriminators = nn.ModuleList([
            DiscriminatorP(2),
            DiscriminatorP(3),
            DiscriminatorP(5),
            DiscriminatorP(7),
            DiscriminatorP(11),
        ])

    def forward(self, y, y_hat):
        y_d_rs = []
        y_d_gs = []
        fmap_rs = []
        fmap_gs = []
        for i, d in enumerate(self.discriminators):
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)

        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class DiscriminatorS(torch.nn.Module):
    def __init__(self, use_spectral_norm=False):
        super(DiscriminatorS, self).__init__()
        norm_f = weight_norm if use_spectral_norm == False else spectral_norm
        self.convs = nn.ModuleList([
            norm_f(Conv1d(1, 16, 15, 1, padding=7)),
            norm_f(Conv1d(16, 16, 41, 2, groups=4, padding=20)),
            norm_f(Conv1d(16, 32, 41, 2, groups=16, padding=20)),
            norm_f(Conv1d(32, 32, 41, 4, groups=16, padding=20)),
            norm_f(Conv1d(32, 32, 41, 4, groups=16, padding=20)),
            norm_f(Conv1d(32, 32, 41, 1, groups=16, padding=20)),
            norm_f(Conv1d(32, 32, 5, 1, padding=2)),
        ])
        self.conv_post = norm_f(Conv1d(32, 1, 3, 1, padding=1))

    def forward(self, x):
        fmap = []
        for l in self.convs:
            x = l(x)
            x = F.leaky_relu(x, LRELU_SLOPE)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        x = torch.flatten(x, 1, -1)

        return x, fmap


class MultiScaleDiscriminator(torch.nn.Module):
    def __init__(self):
        super(MultiScaleDiscriminator, self).__init__()
        self.discriminators = nn.ModuleList([
            DiscriminatorS(use_spectral_norm=True),
            DiscriminatorS(),
            DiscriminatorS(),
        ])
        self.meanpools = nn.ModuleList([
            AvgPool1d(4, 2, padding=2),
            AvgPool1d(4, 2, padding=2)
        ])

    def forward(self, y, y_hat):
        y_d_rs = []
        y_d_gs = []
        fmap_rs = []
        fmap_gs = []
        for i, d in enumerate(self.discriminators):
            if i != 0:
                y = self.meanpools[i-1](y)
                y_hat = self.meanpools[i-1](y_hat)
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            fmap_rs.append(fmap_r)
            y_d_gs.append(y_d_g)
            fmap_gs.append(fmap_g)

        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            loss += torch.mean(torch.abs(rl - gl))

    return loss*2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    r_losses = []
    g_losses = []
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
        r_loss = torch.mean((1-dr)**2)
        g_loss = torch.mean(dg**2)
        loss += (r_loss + g_loss)
        r_losses.append(r_loss.item())
        g_losses.append(g_loss.item())

    return loss, r_losses, g_losses


def generator_loss(disc_outputs):
    loss = 0
    gen_losses = []
    for dg in disc_outputs:
        l = torch.mean((1-dg)**2)
        gen_losses.append(l)
        loss += l

    return loss, gen_losses


# train.py
def train(a, h, audios):
    device = torch.device('cpu')
    generator = Generator(h).to(device)
    mpd = MultiPeriodDiscriminator().to(device)
    msd = MultiScaleDiscriminator().to(device)
    initialize(generator)
    initialize(mpd)
    initialize(msd)

    steps = 0
    last_epoch = -1

    optim_g = torch.optim.AdamW(generator.parameters(), h.learning_rate, betas=[h.adam_b1, h.adam_b2])
    optim_d = torch.optim.AdamW(itertools.chain(msd.parameters(), mpd.parameters()),
                                h.learning_rate, betas=[h.adam_b1, h.adam_b2])

    scheduler_g = torch.optim.lr_scheduler.ExponentialLR(optim_g, gamma=h.lr_decay, last_epoch=last_epoch)
    scheduler_d = torch.optim.lr_scheduler.ExponentialLR(optim_d, gamma=h.lr_decay, last_epoch=last_epoch)

    trainset = MelDataset(audios[:4], h.segment_size, h.n_fft, h.num_mels,
                          h.hop_size, h.win_size, h.sampling_rate, h.fmin, h.fmax, fmax_loss=h.fmax_for_loss)
    train_loader = DataLoader(trainset, num_workers=h.num_workers, shuffle=False,
                              batch_size=h.batch_size, pin_memory=True, drop_last=True)
    validset = MelDataset(audios[4:], h.segment_size, h.n_fft, h.num_mels,
                          h.hop_size, h.win_size, h.sampling_rate, h.fmin, h.fmax, fmax_loss=h.fmax_for_loss)
    validation_loader = DataLoader(validset, num_workers=1, shuffle=False, batch_size=1, pin_memory=True, drop_last=True)

    generator.train()
    mpd.train()
    msd.train()
    for epoch in range(max(0, last_epoch), a.training_epochs):
        print("Epoch: {}".format(epoch+1))

        for i, batch in enumerate(train_loader):
            x, y, _, y_mel = batch
            x = torch.autograd.Variable(x.to(device, non_blocking=True))
            y = torch.autograd.Variable(y.to(device, non_blocking=True))
            y_mel = torch.autograd.Variable(y_mel.to(device, non_blocking=True))
            y = y.unsqueeze(1)

            y_g_hat = generator(x)
            y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate, h.hop_size, h.win_size,
                                          h.fmin, h.fmax_for_loss)

            optim_d.zero_grad()

            # MPD
            y_df_hat_r, y_df_hat_g, _, _ = mpd(y, y_g_hat.detach())
            loss_disc_f, losses_disc_f_r, losses_disc_f_g = discriminator_loss(y_df_hat_r, y_df_hat_g)

            # MSD
            y_ds_hat_r, y_ds_hat_g, _, _ = msd(y, y_g_hat.detach())
            loss_disc_s, losses_disc_s_r, losses_disc_s_g = discriminator_loss(y_ds_hat_r, y_ds_hat_g)

            loss_disc_all = loss_disc_s + loss_disc_f

            loss_disc_all.backward()
            optim_d.step()

            # Generator
            optim_g.zero_grad()

            # L1 Mel-Spectrogram Loss
            loss_mel = F.l1_loss(y_mel, y_g_hat_mel) * 45

            y_df_hat_r, y_df_hat_g, fmap_f_r, fmap_f_g = mpd(y, y_g_hat)
            y_ds_hat_r, y_ds_hat_g, fmap_s_r, fmap_s_g = msd(y, y_g_hat)
            loss_fm_f = feature_loss(fmap_f_r, fmap_f_g)
            loss_fm_s = feature_loss(fmap_s_r, fmap_s_g)
            loss_gen_f, losses_gen_f = generator_loss(y_df_hat_g)
            loss_gen_s, losses_gen_s = generator_loss(y_ds_hat_g)
            loss_gen_all = loss_gen_s + loss_gen_f + loss_fm_s + loss_fm_f + loss_mel

            loss_gen_all.backward()
            optim_g.step()

            # STDOUT logging
            if steps % a.stdout_interval == 0:
                with torch.no_grad():
                    mel_error = F.l1_loss(y_mel, y_g_hat_mel).item()

                print('Steps : {:d}, Gen Loss Total : {:4.3f}, Mel-Spec. Error : {:4.3f}'.
                      format(steps, loss_gen_all, mel_error))
            record.append([loss_disc_all.item(), loss_gen_all.item(), loss_mel.item(), loss_fm_f.item(), loss_fm_s.item()]
                          + losses_disc_f_r + losses_disc_f_g + losses_disc_s_r + losses_disc_s_g
                          + [l.item() for l in losses_gen_f + losses_gen_s])

            # checkpointing
            if steps % a.checkpoint_interval == 0 and steps != 0:
                checkpoint_path = "{}/g_{:08d}".format(a.checkpoint_path, steps)
                save_checkpoint(checkpoint_path,
                                {'generator': generator.state_dict()})
                checkpoint_path = "{}/do_{:08d}".format(a.checkpoint_path, steps)
                save_checkpoint(checkpoint_path,
                                {'mpd': mpd.state_dict(),
                                 'msd': msd.state_dict(),
                                 'optim_g': optim_g.state_dict(), 'optim_d': optim_d.state_dict(), 'steps': steps,
                                 'epoch': epoch})

            # Validation
            if steps % a.validation_interval == 0:  # and steps != 0:
                generator.eval()
                val_err_tot = 0
                with torch.no_grad():
                    for j, batch in enumerate(validation_loader):
                        x, y, _, y_mel = batch
                        y_g_hat = generator(x.to(device))
                        y_mel = torch.autograd.Variable(y_mel.to(device, non_blocking=True))
                        y_g_hat_mel = mel_spectrogram(y_g_hat.squeeze(1), h.n_fft, h.num_mels, h.sampling_rate,
                                                      h.hop_size, h.win_size,
                                                      h.fmin, h.fmax_for_loss)
                        val_err_tot += F.l1_loss(y_mel, y_g_hat_mel).item()

                    val_err = val_err_tot / (j+1)
                    print('validation mel error {:4.3f}'.format(val_err))
                    record.append(val_err)

                generator.train()

            steps += 1

        scheduler_g.step()
        scheduler_d.step()
        record.append([optim_g.param_groups[0]['lr'], optim_d.param_groups[0]['lr']])

    for module in (generator, mpd, msd):
        record.append({k: v.detach().numpy().copy() for k, v in module.state_dict().items()})
    return generator


# inference.py
def inference(a, h, mels):
    generator = Generator(h).to(torch.device('cpu'))

    state_dict_g = load_checkpoint(a.checkpoint_file, torch.device('cpu'))
    generator.load_state_dict(state_dict_g['generator'])

    generator.eval()
    with torch.no_grad():
        before = generator(torch.FloatTensor(mels[0]).unsqueeze(0))
    generator.remove_weight_norm()
    record.append(sorted(k for k in generator.state_dict()))
    with torch.no_grad():
        for i, mel in enumerate(mels):
            x = torch.FloatTensor(mel).unsqueeze(0)
            y_g_hat = generator(x)
            audio = y_g_hat.squeeze()
            audio = audio * MAX_WAV_VALUE
            audio = audio.cpu().numpy().astype('int16')
            record.append(audio.astype('float64'))
        record.append((y_g_hat - before).abs().max().item() < 1e-5)
"""

HIFI_GAN_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\nimport torch.nn as nn\nfrom torch.nn import Conv1d, ConvTranspose1d, AvgPool1d, Conv2d\nfrom torch.nn.utils import weight_norm, remove_weight_norm, spectral_norm\nfrom torch.utils.data import DataLoader\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nimport retrograd.nn as nn\nfrom retrograd.nn import Conv1d, ConvTranspose1d, AvgPool1d, Conv2d\nfrom retrograd.nn.utils import weight_norm, remove_weight_norm, spectral_norm\nfrom retrograd.utils.data import DataLoader\n",
    ),
    (
        "            loss_disc_all.backward()\n            optim_d.step()\n",
        "            grads = loss_disc_all.backward()\n            optim_d.step(grads)\n",
    ),
    (
        "            loss_gen_all.backward()\n            optim_g.step()\n",
        "            grads = loss_gen_all.backward()\n            optim_g.step(grads)\n",
    ),
]


class _HifiGanConfig:
    resblock = "1"
    num_gpus = 0
    batch_size = 2
    learning_rate = 0.01
    adam_b1 = 0.8
    adam_b2 = 0.99
    lr_decay = 0.9
    upsample_rates = (2, 2)
    upsample_kernel_sizes = (4, 4)
    upsample_initial_channel = 8
    resblock_kernel_sizes = (3, 5)
    resblock_dilation_sizes = ((1, 3, 5), (1, 3, 5))
    segment_size = 64
    num_mels = 8
    n_fft = 32
    hop_size = 4
    win_size = 32
    sampling_rate = 2000
    fmin = 0
    fmax = 1000
    fmax_for_loss = None
    num_workers = 0


class _HifiGanArgs:
    training_epochs = 1
    stdout_interval = 1
    checkpoint_interval = 1
    validation_interval = 2


def test_hifi_gan_trains_and_infers_as_torch(capsys, tmp_path):
    rng = np.random.default_rng(6901)
    audios = [0.9 * np.tanh(rng.standard_normal(64)).astype(np.float32) for _ in range(5)]
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = HIFI_GAN_SOURCE if lib is torch else port(HIFI_GAN_SOURCE, HIFI_GAN_STEPS)
        names = run_source(
            text, lib, record=record, initialize=initialize, librosa_mel_fn=librosa_mel_fn
        )
        args = _HifiGanArgs()
        args.checkpoint_path = str(tmp_path / lib.__name__)
        (tmp_path / lib.__name__).mkdir()
        names["train"](args, _HifiGanConfig(), audios)
        args.checkpoint_file = f"{args.checkpoint_path}/g_00000001"
        mels = [
            names["mel_spectrogram"](lib.tensor(audio[None]), 32, 8, 2000, 4, 32, 0, 1000)
            .squeeze(0)
            .numpy()
            for audio in audios[:2]
        ]
        names["inference"](args, _HifiGanConfig(), mels)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert "Removing weight norm..." in logs[0] and "validation mel error" in logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "options",
    [
        dict(n_fft=16, hop_length=4, win_length=12, center=True, pad_mode="reflect", onesided=True),
        dict(n_fft=8, center=False, normalized=True, onesided=False),
        dict(n_fft=10, hop_length=3, center=True, pad_mode="constant"),
        dict(n_fft=9, hop_length=2, win_length=5, pad_mode="replicate"),
        dict(n_fft=6, hop_length=5, pad_mode="circular", normalized=True),
    ],
)
def test_stft_real_form_gives_torch_s_values_and_gradients(options):
    """HiFi-GAN's mel spectrogram calls ``torch.stft``; retrograd had none (an
    ``AttributeError``). Its real form (``return_complex=False``) matches torch's values and the
    gradients reaching the signal and the window."""
    rng = np.random.default_rng(6902)
    signal = rng.standard_normal((2, 37)).astype(np.float32)
    window = np.hanning(options.get("win_length", options["n_fft"])).astype(np.float32)
    upstream = None
    results = []
    for lib in (torch, rg):
        x = lib.tensor(signal)
        w = lib.tensor(window)
        x, w = (
            (x.requires_grad_(), w.requires_grad_())
            if lib is torch
            else (x.require_grad(), w.require_grad())
        )
        spectrum = lib.stft(x, window=w, return_complex=False, **options)
        if upstream is None:
            upstream = rng.standard_normal(tuple(spectrum.shape)).astype(np.float32)
        loss = (spectrum * lib.tensor(upstream)).sum()
        if lib is torch:
            loss.backward()
            grads = [x.grad, w.grad]
        else:
            gradients = loss.backward()
            grads = [x.grad(gradients), w.grad(gradients)]
        results.append([spectrum.detach().numpy()] + [g.numpy() for g in grads])
    for ours, theirs in zip(results[1], results[0]):
        assert ours.shape == theirs.shape
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    one_dimensional = rg.stft(rg.tensor(signal[0]), 8, return_complex=False)
    assert (
        one_dimensional.shape == torch.stft(torch.tensor(signal[0]), 8, return_complex=False).shape
    )


def test_stft_refuses_a_missing_return_complex():
    """A real input without ``return_complex`` is refused, as torch refuses it; bad sizes name
    the op and the values (``return_complex=True``: tests/test_complex_fft.py)."""
    signal = rg.ones((2, 20))
    with pytest.raises(RuntimeError):
        torch.stft(torch.ones(2, 20), 8)
    with pytest.raises(rg.InvalidArgumentError, match="stft: return_complex must be given"):
        rg.stft(signal, 8)
    with pytest.raises(
        rg.ShapeError, match=r"stft: expected a 1-d or 2-d input, got shape \[2, 2, 20\]"
    ):
        rg.stft(rg.ones((2, 2, 20)), 8, return_complex=False)
    with pytest.raises(rg.InvalidArgumentError, match="win_length=9, n_fft=8"):
        rg.stft(signal, 8, win_length=9, return_complex=False)
    with pytest.raises(rg.ShapeError, match="window of size win_length=8, got shape"):
        rg.stft(signal, 8, window=rg.ones(5), return_complex=False)
    with pytest.raises(rg.ShapeError, match="n_fft=32"):
        rg.stft(signal, 32, center=False, return_complex=False)
    with pytest.raises(rg.InvalidArgumentError, match="pad_mode must be"):
        rg.stft(signal, 8, pad_mode="wrap", return_complex=False)
    with pytest.raises(rg.DTypeError, match="stft: expected a float tensor, got int64"):
        rg.stft(rg.ones((2, 20), dtype=rg.int64), 8, return_complex=False)
    assert rg.stft(signal, 8, return_complex=False).shape == (2, 5, 11, 2)


def test_stft_method_and_istft_refusal_of_a_real_spectrum():
    """torch's ``y.stft(...)`` method is the function (it was an ``AttributeError``); ``istft``
    reads only complex spectra, in torch as here (a real one is refused, by name)."""
    signal = np.random.default_rng(6903).standard_normal((2, 30)).astype(np.float32)
    ours = rg.tensor(signal).stft(8, hop_length=3, return_complex=False)
    theirs = torch.tensor(signal).stft(8, hop_length=3, return_complex=False)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="complex"):
        torch.istft(theirs, 8)
    with pytest.raises(rg.DTypeError, match="istft requires a complex-valued input"):
        rg.istft(ours, 8)
