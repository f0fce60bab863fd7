# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
speech separation in the time domain.

- Dual-Path RNN as JusperLee/Dual-Path-RNN-Pytorch writes it: ``model/model_rnn.py`` (the
  docstrings of classes left out; ``GlobalLayerNorm`` by ``torch.mean(x, (1, 2),
  keepdim=True)``, ``CumulativeLayerNorm`` subclassing ``nn.LayerNorm`` and calling
  ``super().forward`` between transposes, ``nn.GroupNorm(1, dim)``, the ``Conv1d`` encoder of
  stride ``kernel_size//2``, the ``Decoder`` subclassing ``nn.ConvTranspose1d`` with its
  ``torch.squeeze``, ``Dual_RNN_Block``'s intra- and inter-chunk RNNs built by ``getattr(nn,
  rnn_type)(..., batch_first=True, bidirectional=True)`` over ``permute(...).contiguous()
  .view(...)``, ``_padding``'s ``torch.Tensor(torch.zeros(B, N, gap)).type(input.type())``,
  ``_Segmentation``'s half-overlapping chunks and ``_over_add``, ``torch.chunk`` then
  ``torch.stack`` of the speakers, ``nn.PReLU``, a 1 x 1 ``nn.Conv2d``), ``model/loss.py``
  (SI-SNR by ``torch.norm(mat, dim=-1, keepdim=...)`` and ``torch.log10``, the
  permutation-invariant ``Loss`` by ``itertools.permutations`` and ``torch.max(..., dim=0)``),
  ``utils/util.py``'s ``check_parameters``, ``trainer/trainer_Dual_RNN.py``'s ``Trainer``
  (``train``: ``clip_grad_norm_`` and ``param_groups[0]['lr']`` in its messages;
  ``validation`` under ``torch.no_grad()``; ``save_checkpoint`` of the model's and the
  optimizer's state dicts) and ``train_rnn.py``'s ``make_optimizer`` (``getattr(torch.optim,
  name)``) and ``ReduceLROnPlateau``; driven by the test through ``Trainer.run``'s loop
  (its ``torch.cuda.device`` block and loss plot left out) on drawn two-speaker mixtures.

Changed for the test: the scale, ``ReduceLROnPlateau``'s ``verbose=True`` (torch 2.13 no
longer takes it), the ``sys.path`` lines and the module imports, and the import and gradient
lines; the weights of torch's run are loaded into the port's.
"""

from __future__ import annotations

import pytest

from real_ports import assert_records_agree, initializer, params_of, runs_with_draws

DPRNN_SOURCE = r'''import torch.nn.functional as F
from torch import nn
import torch

import warnings

warnings.filterwarnings('ignore')

class GlobalLayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-05, elementwise_affine=True):
        super(GlobalLayerNorm, self).__init__()
        self.dim = dim
        self.eps = eps
        self.elementwise_affine = elementwise_affine

        if self.elementwise_affine:
            self.weight = nn.Parameter(torch.ones(self.dim, 1))
            self.bias = nn.Parameter(torch.zeros(self.dim, 1))
        else:
            self.register_parameter('weight', None)
            self.register_parameter('bias', None)

    def forward(self, x):
        # x = N x C x L
        # N x 1 x 1
        # cln: mean,var N x 1 x L
        # gln: mean,var N x 1 x 1
        if x.dim() != 3:
            raise RuntimeError("{} accept 3D tensor as input".format(
                self.__name__))

        mean = torch.mean(x, (1, 2), keepdim=True)
        var = torch.mean((x-mean)**2, (1, 2), keepdim=True)
        # N x C x L
        if self.elementwise_affine:
            x = self.weight*(x-mean)/torch.sqrt(var+self.eps)+self.bias
        else:
            x = (x-mean)/torch.sqrt(var+self.eps)
        return x


class CumulativeLayerNorm(nn.LayerNorm):
    def __init__(self, dim, elementwise_affine=True):
        super(CumulativeLayerNorm, self).__init__(
            dim, elementwise_affine=elementwise_affine)

    def forward(self, x):
        # x: N x C x L
        # N x L x C
        x = torch.transpose(x, 1, 2)
        # N x L x C == only channel norm
        x = super().forward(x)
        # N x C x L
        x = torch.transpose(x, 1, 2)
        return x


def select_norm(norm, dim):
    if norm == 'gln':
        return GlobalLayerNorm(dim, elementwise_affine=True)
    if norm == 'cln':
        return CumulativeLayerNorm(dim, elementwise_affine=True)
    if norm == 'ln':
        return nn.GroupNorm(1, dim)
    else:
        return nn.BatchNorm1d(dim)

class Encoder(nn.Module):
    def __init__(self, kernel_size=2, out_channels=64):
        super(Encoder, self).__init__()
        self.conv1d = nn.Conv1d(in_channels=1, out_channels=out_channels,
                                kernel_size=kernel_size, stride=kernel_size//2, groups=1)

    def forward(self, x):
        # B x T -> B x 1 x T
        x = torch.unsqueeze(x, dim=1)
        # B x 1 x T -> B x C x T_out
        x = self.conv1d(x)
        x = F.relu(x)
        return x


class Decoder(nn.ConvTranspose1d):
    def __init__(self, *args, **kwargs):
        super(Decoder, self).__init__(*args, **kwargs)

    def forward(self, x):
        """
        x: [B, N, L]
        """
        if x.dim() not in [2, 3]:
            raise RuntimeError("{} accept 3/4D tensor as input".format(
                self.__name__))
        x = super().forward(x if x.dim() == 3 else torch.unsqueeze(x, 1))

        if torch.squeeze(x).dim() == 1:
            x = torch.squeeze(x, dim=1)
        else:
            x = torch.squeeze(x)
        return x


class Dual_RNN_Block(nn.Module):
    def __init__(self, out_channels,
                 hidden_channels, rnn_type='LSTM', norm='ln',
                 dropout=0, bidirectional=False, num_spks=2):
        super(Dual_RNN_Block, self).__init__()
        # RNN model
        self.intra_rnn = getattr(nn, rnn_type)(
            out_channels, hidden_channels, batch_first=True, dropout=dropout, bidirectional=bidirectional)
        self.inter_rnn = getattr(nn, rnn_type)(
            out_channels, hidden_channels, batch_first=True, dropout=dropout, bidirectional=bidirectional)
        # Norm
        self.intra_norm = select_norm(norm, out_channels)
        self.inter_norm = select_norm(norm, out_channels)
        # Linear
        self.intra_linear = nn.Linear(
            hidden_channels*2 if bidirectional else hidden_channels, out_channels)
        self.inter_linear = nn.Linear(
            hidden_channels*2 if bidirectional else hidden_channels, out_channels)


    def forward(self, x):
        """
           x: [B, N, K, S]
           out: [Spks, B, N, K, S]
        """
        B, N, K, S = x.shape
        # intra RNN
        # [BS, K, N]
        intra_rnn = x.permute(0, 3, 2, 1).contiguous().view(B*S, K, N)
        # [BS, K, H]
        intra_rnn, _ = self.intra_rnn(intra_rnn)
        # [BS, K, N]
        intra_rnn = self.intra_linear(intra_rnn)
        # [BS, N, K]
        intra_rnn = intra_rnn.permute(0, 2, 1).contiguous()
        intra_rnn = self.intra_norm(intra_rnn)
        # [B, S, N, K]
        intra_rnn = intra_rnn.view(B, S, N, K)
        # [B, N, K, S]
        intra_rnn = intra_rnn.permute(0, 2, 3, 1).contiguous()
        intra_rnn = intra_rnn + x

        # inter RNN
        # [BK, S, N]
        inter_rnn = intra_rnn.permute(0, 2, 3, 1).contiguous().view(B*K, S, N)
        # [BK, S, H]
        inter_rnn, _ = self.inter_rnn(inter_rnn)
        # [BK, S, N]
        inter_rnn = self.inter_linear(inter_rnn)
        # [BK, N, S]
        inter_rnn = inter_rnn.permute(0, 2, 1).contiguous()
        inter_rnn = self.inter_norm(inter_rnn)
        # [B, K, N, S]
        inter_rnn = inter_rnn.view(B, K, N, S)
        # [B, N, K, S]
        inter_rnn = inter_rnn.permute(0, 2, 1, 3).contiguous()
        out = inter_rnn + intra_rnn

        return out


class Dual_Path_RNN(nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels,
                 rnn_type='LSTM', norm='ln', dropout=0,
                 bidirectional=False, num_layers=4, K=200, num_spks=2):
        super(Dual_Path_RNN, self).__init__()
        self.K = K
        self.num_spks = num_spks
        self.num_layers = num_layers
        self.norm = select_norm(norm, in_channels)
        self.conv1d = nn.Conv1d(in_channels, out_channels, 1)

        self.dual_rnn = nn.ModuleList([])
        for i in range(num_layers):
            self.dual_rnn.append(Dual_RNN_Block(out_channels, hidden_channels,
                                     rnn_type=rnn_type, norm=norm, dropout=dropout,
                                     bidirectional=bidirectional))

        self.conv2d = nn.Conv2d(
            out_channels, out_channels*num_spks, kernel_size=1)
        self.end_conv1x1 = nn.Conv1d(out_channels, in_channels, 1)
        self.prelu = nn.PReLU()
        self.activation = nn.Sigmoid()

    def forward(self, x):
        """
           x: [B, N, L]

        """
        # [B, N, L]
        x = self.norm(x)
        # [B, N, L]
        x = self.conv1d(x)
        # [B, N, K, S]
        x, gap = self._Segmentation(x, self.K)
        # [B, N*spks, K, S]
        for i in range(self.num_layers):
            x = self.dual_rnn[i](x)
        x = self.prelu(x)
        x = self.conv2d(x)
        # [B, N*spks, L]
        x = self._over_add(x, gap)
        # [spks, B, N, L]
        x = torch.chunk(x, self.num_spks, dim=1)
        x = torch.stack(x, dim=0)
        # [spks*B, N, L]
        spks, B, N, L = x.shape
        x = x.view(spks*B, N, L)
        x = self.end_conv1x1(x)
        # [spks, B, N, L]
        _, N, L = x.shape
        x = x.view(spks, B, N, L)
        x = self.activation(x)

        return x

    def _Sequential(self, out_channels, hidden_channels,
                    rnn_type='LSTM', norm='ln', dropout=0,
                    bidirectional=False, num_layers=4):
        block_list = [Dual_RNN_Block(out_channels, hidden_channels,
                                     rnn_type='LSTM', norm='ln', dropout=0,
                                     bidirectional=False) for i in range(num_layers)]
        return nn.Sequential(*block_list)

    def _padding(self, input, K):
        """
           padding the audio times
           K: chunks of length
           P: hop size
           input: [B, N, L]
        """
        B, N, L = input.shape
        P = K // 2
        gap = K - (P + L % K) % K
        if gap > 0:
            pad = torch.Tensor(torch.zeros(B, N, gap)).type(input.type())
            input = torch.cat((input, pad), dim=2)

        pad = torch.Tensor(torch.zeros(B, N, P)).type(input.type())
        input = torch.cat((pad, input, pad), dim=2)

        return input, gap

    def _Segmentation(self, input, K):
        """
           the segmentation stage splits
           K: chunks of length
           P: hop size
           input: [B, N, L]
           output: [B, N, K, S]
        """
        B, N, L = input.shape
        P = K // 2
        input, gap = self._padding(input, K)
        # [B, N, K, S]
        input1 = input[:, :, :-P].contiguous().view(B, N, -1, K)
        input2 = input[:, :, P:].contiguous().view(B, N, -1, K)
        input = torch.cat((input1, input2), dim=3).view(
            B, N, -1, K).permute(0, 1, 3, 2).contiguous()

        return input, gap

    def _over_add(self, input, gap):
        """
           Merge sequence
           input: [B, N, K, S]
           gap: padding length
           output: [B, N, L]
        """
        B, N, K, S = input.shape
        P = K // 2
        # [B, N, S, K]
        input = input.transpose(2, 3).contiguous().view(B, N, -1, K * 2)

        input = input[:, :, :, :K].contiguous().view(B, N, -1)[:, :, P:]*2
        # [B, N, L]
        if gap > 0:
            input = input[:, :, :-gap]

        return input

class Dual_RNN_model(nn.Module):
    def __init__(self, in_channels, out_channels, hidden_channels,
                 kernel_size=2, rnn_type='LSTM', norm='ln', dropout=0,
                 bidirectional=False, num_layers=4, K=200, num_spks=2):
        super(Dual_RNN_model,self).__init__()
        self.encoder = Encoder(kernel_size=kernel_size,out_channels=in_channels)
        self.separation = Dual_Path_RNN(in_channels, out_channels, hidden_channels,
                 rnn_type=rnn_type, norm=norm, dropout=dropout,
                 bidirectional=bidirectional, num_layers=num_layers, K=K, num_spks=num_spks)
        self.decoder = Decoder(in_channels=in_channels, out_channels=1, kernel_size=kernel_size, stride=kernel_size//2)
        self.num_spks = num_spks

    def forward(self, x):
        """
           x: [B, L]
        """
        # [B, N, L]
        e = self.encoder(x)
        # [spks, B, N, L]
        s = self.separation(e)
        # [B, N, L] -> [B, L]
        out = [s[i]*e for i in range(self.num_spks)]
        audio = [self.decoder(out[i]) for i in range(self.num_spks)]
        return audio

# model/loss.py
import torch
from itertools import permutations

def sisnr(x, s, eps=1e-8):
    """
    calculate training loss
    input:
          x: separated signal, N x S tensor
          s: reference signal, N x S tensor
    Return:
          sisnr: N tensor
    """

    def l2norm(mat, keepdim=False):
        return torch.norm(mat, dim=-1, keepdim=keepdim)

    if x.shape != s.shape:
        raise RuntimeError(
            "Dimention mismatch when calculate si-snr, {} vs {}".format(
                x.shape, s.shape))
    x_zm = x - torch.mean(x, dim=-1, keepdim=True)
    s_zm = s - torch.mean(s, dim=-1, keepdim=True)
    t = torch.sum(
        x_zm * s_zm, dim=-1,
        keepdim=True) * s_zm / (l2norm(s_zm, keepdim=True)**2 + eps)
    return 20 * torch.log10(eps + l2norm(t) / (l2norm(x_zm - t) + eps))


def Loss(ests, egs):
    # spks x n x S
    refs = egs
    num_spks = len(refs)

    def sisnr_loss(permute):
        # for one permute
        return sum(
            [sisnr(ests[s], refs[t])
             for s, t in enumerate(permute)]) / len(permute)
             # average the value

    # P x N
    N = egs[0].size(0)
    sisnr_mat = torch.stack(
        [sisnr_loss(p) for p in permutations(range(num_spks))])
    max_perutt, _ = torch.max(sisnr_mat, dim=0)
    # si-snr
    return -torch.sum(max_perutt) / N


# utils/util.py
def check_parameters(net):
    """
        Returns module parameters. Mb
    """
    parameters = sum(param.numel() for param in net.parameters())
    return parameters / 10**6

# trainer/trainer_Dual_RNN.py
import time
import logging
import torch
import os


class Trainer(object):
    def __init__(self, train_dataloader, val_dataloader, Dual_RNN,  optimizer, scheduler, opt):
        super(Trainer).__init__()
        self.train_dataloader = train_dataloader
        self.val_dataloader = val_dataloader
        self.scheduler = scheduler
        self.num_spks = opt['num_spks']
        self.cur_epoch = 0
        self.total_epoch = opt['train']['epoch']
        self.early_stop = opt['train']['early_stop']

        self.print_freq = opt['logger']['print_freq']
        # setup_logger(opt['logger']['name'], opt['logger']['path'],
        #             screen=opt['logger']['screen'], tofile=opt['logger']['tofile'])
        self.logger = logging.getLogger(opt['logger']['name'])
        self.checkpoint = opt['train']['path']
        self.name = opt['name']

        if opt['train']['gpuid']:
            self.logger.info('Load Nvida GPU .....')
            self.device = torch.device(
                'cuda:{}'.format(opt['train']['gpuid'][0]))
            self.gpuid = opt['train']['gpuid']
            self.dualrnn = Dual_RNN.to(self.device)
            self.logger.info(
                'Loading Dual-Path-RNN parameters: {:.3f} Mb'.format(check_parameters(self.dualrnn)))
        else:
            self.logger.info('Load CPU ...........')
            self.device = torch.device('cpu')
            self.dualrnn = Dual_RNN.to(self.device)
            self.logger.info(
                'Loading Dual-Path-RNN parameters: {:.3f} Mb'.format(check_parameters(self.dualrnn)))

        if opt['resume']['state']:
            ckp = torch.load(opt['resume']['path'], map_location='cpu')
            self.cur_epoch = ckp['epoch']
            self.logger.info("Resume from checkpoint {}: epoch {:.3f}".format(
                opt['resume']['path'], self.cur_epoch))
            self.dualrnn = Dual_RNN.load_state_dict(
                ckp['model_state_dict']).to(self.device)
            self.optimizer = optimizer.load_state_dict(ckp['optim_state_dict'])
        else:
            self.dualrnn = Dual_RNN.to(self.device)
            self.optimizer = optimizer

        if opt['optim']['clip_norm']:
            self.clip_norm = opt['optim']['clip_norm']
            self.logger.info(
                "Gradient clipping by {}, default L2".format(self.clip_norm))
        else:
            self.clip_norm = 0

    def train(self, epoch):
        self.logger.info(
            'Start training from epoch: {:d}, iter: {:d}'.format(epoch, 0))
        self.dualrnn.train()
        num_batchs = len(self.train_dataloader)
        total_loss = 0.0
        num_index = 1
        start_time = time.time()
        for mix, ref in self.train_dataloader:
            mix = mix.to(self.device)
            ref = [ref[i].to(self.device) for i in range(self.num_spks)]
            self.optimizer.zero_grad()

            if self.gpuid:
                out = torch.nn.parallel.data_parallel(self.dualrnn,mix,device_ids=self.gpuid)
                #out = self.dualrnn(mix)
            else:
                out = self.dualrnn(mix)

            l = Loss(out, ref)
            epoch_loss = l
            total_loss += epoch_loss.item()
            epoch_loss.backward()

            if self.clip_norm:
                torch.nn.utils.clip_grad_norm_(
                    self.dualrnn.parameters(), self.clip_norm)

            self.optimizer.step()
            if num_index % self.print_freq == 0:
                message = '<epoch:{:d}, iter:{:d}, lr:{:.3e}, loss:{:.3f}>'.format(
                    epoch, num_index, self.optimizer.param_groups[0]['lr'], total_loss/num_index)
                self.logger.info(message)
            num_index += 1
        end_time = time.time()
        total_loss = total_loss/num_index
        message = 'Finished *** <epoch:{:d}, iter:{:d}, lr:{:.3e}, loss:{:.3f}, Total time:{:.3f} min> '.format(
            epoch, num_index, self.optimizer.param_groups[0]['lr'], total_loss, (end_time-start_time)/60)
        self.logger.info(message)
        return total_loss

    def validation(self, epoch):
        self.logger.info(
            'Start Validation from epoch: {:d}, iter: {:d}'.format(epoch, 0))
        self.dualrnn.eval()
        num_batchs = len(self.val_dataloader)
        num_index = 1
        total_loss = 0.0
        start_time = time.time()
        with torch.no_grad():
            for mix, ref in self.val_dataloader:
                mix = mix.to(self.device)
                ref = [ref[i].to(self.device) for i in range(self.num_spks)]
                self.optimizer.zero_grad()

                if self.gpuid:
                    #model = torch.nn.DataParallel(self.dualrnn)
                    #out = model(mix)
                    out = torch.nn.parallel.data_parallel(self.dualrnn,mix,device_ids=self.gpuid)
                else:
                    out = self.dualrnn(mix)

                l = Loss(out, ref)
                epoch_loss = l
                total_loss += epoch_loss.item()
                if num_index % self.print_freq == 0:
                    message = '<epoch:{:d}, iter:{:d}, lr:{:.3e}, loss:{:.3f}>'.format(
                        epoch, num_index, self.optimizer.param_groups[0]['lr'], total_loss/num_index)
                    self.logger.info(message)
                num_index += 1
        end_time = time.time()
        total_loss = total_loss/num_index
        message = 'Finished *** <epoch:{:d}, iter:{:d}, lr:{:.3e}, loss:{:.3f}, Total time:{:.3f} min> '.format(
            epoch, num_index, self.optimizer.param_groups[0]['lr'], total_loss, (end_time-start_time)/60)
        self.logger.info(message)
        return total_loss

    def save_checkpoint(self, epoch, best=True):
        """
           save model
           best: the best model
        """
        os.makedirs(os.path.join(self.checkpoint, self.name), exist_ok=True)
        torch.save({
            'epoch': epoch,
            'model_state_dict': self.dualrnn.state_dict(),
            'optim_state_dict': self.optimizer.state_dict()
        },
            os.path.join(self.checkpoint, self.name, '{0}.pt'.format('best' if best else 'last')))


# train_rnn.py
from torch.optim.lr_scheduler import ReduceLROnPlateau


def make_optimizer(params, opt):
    optimizer = getattr(torch.optim, opt['optim']['name'])
    if opt['optim']['name'] == 'Adam':
        optimizer = optimizer(
            params, lr=opt['optim']['lr'], weight_decay=opt['optim']['weight_decay'])
    else:
        optimizer = optimizer(params, lr=opt['optim']['lr'], weight_decay=opt['optim']
                              ['weight_decay'], momentum=opt['optim']['momentum'])

    return optimizer

# the test's driver: train_rnn.py's train() with the options it would parse, two-speaker
# mixtures drawn in place of the data loaders, then Trainer.run()'s loop without its plot
opt = {
    'name': 'DPRNN', 'num_spks': 2,
    'Dual_Path_RNN': {'in_channels': 12, 'out_channels': 8, 'hidden_channels': 6, 'kernel_size': 4,
                      'rnn_type': rnn_type, 'norm': norm, 'dropout': 0, 'bidirectional': True,
                      'num_layers': 2, 'K': 10, 'num_spks': 2},
    'optim': {'name': optim_name, 'lr': 1e-3, 'momentum': 0.9, 'weight_decay': 1e-5, 'clip_norm': 5},
    'scheduler': {'factor': 0.5, 'patience': 0, 'min_lr': 1e-8},
    'train': {'epoch': 2, 'early_stop': 10, 'path': checkpoint_dir, 'gpuid': []},
    'resume': {'state': False, 'path': ''},
    'logger': {'name': 'DPRNN', 'print_freq': 1},
}
Dual_Path_RNN = Dual_RNN_model(**opt['Dual_Path_RNN'])
initialize(Dual_Path_RNN)
record.append(check_parameters(Dual_Path_RNN))
optimizer = make_optimizer(Dual_Path_RNN.parameters(), opt)

def draw_batches(count):
    batches = []
    for _ in range(count):
        refs = [torch.randn(2, 90), 0.5 * torch.randn(2, 90)]
        batches.append((refs[0] + refs[1], refs))
    return batches

train_dataloader, val_dataloader = draw_batches(2), draw_batches(1)
scheduler = ReduceLROnPlateau(
    optimizer, mode='min',
    factor=opt['scheduler']['factor'],
    patience=opt['scheduler']['patience'],
    min_lr=opt['scheduler']['min_lr'])
trainer = Trainer(train_dataloader, val_dataloader, Dual_Path_RNN, optimizer, scheduler, opt)
trainer.gpuid = opt['train']['gpuid']  # run() reads it; __init__ sets it only on a GPU
trainer.save_checkpoint(trainer.cur_epoch, best=False)
best_loss = trainer.validation(trainer.cur_epoch)
record.append(best_loss)
while trainer.cur_epoch < trainer.total_epoch:
    trainer.cur_epoch += 1
    t_loss = trainer.train(trainer.cur_epoch)
    v_loss = trainer.validation(trainer.cur_epoch)
    trainer.scheduler.step(v_loss)
    if v_loss < best_loss:
        best_loss = v_loss
        trainer.save_checkpoint(trainer.cur_epoch, best=True)
    record.append([t_loss, v_loss, optimizer.param_groups[0]['lr']])
record.append(params_of(Dual_Path_RNN))
out = Dual_Path_RNN(val_dataloader[0][0])
record.append([o.detach().numpy() for o in out])
'''

DPRNN_STEPS = [
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch.optim.lr_scheduler import", "from retrograd.optim.lr_scheduler import"),
    (
        "            self.optimizer.zero_grad()\n\n            if self.gpuid:",
        "\n            if self.gpuid:",
    ),
    ("            epoch_loss.backward()\n", "            grads = epoch_loss.backward()\n"),
    (
        "                torch.nn.utils.clip_grad_norm_(\n                    self.dualrnn.parameters(), self.clip_norm)\n\n            self.optimizer.step()",
        "                torch.nn.utils.clip_grad_norm_(\n                    grads, self.dualrnn.parameters(), self.clip_norm)\n\n            self.optimizer.step(grads)",
    ),
]


@pytest.mark.parametrize(
    "norm, rnn_type, optim_name", [("gln", "GRU", "SGD"), ("cln", "LSTM", "Adam")]
)
def test_dual_path_rnn_trains_validates_and_checkpoints_as_torch(
    capsys, tmp_path, norm, rnn_type, optim_name
):
    """Two epochs of the Dual-Path RNN trainer (validation before and after each,
    ``ReduceLROnPlateau`` on the validation loss): the parameter count, the losses and
    learning rates, the weights after training and the two separated signals."""
    (theirs, ours), _ = runs_with_draws(
        DPRNN_SOURCE, DPRNN_STEPS, capsys, 33201, initialize=initializer(), params_of=params_of,
        norm=norm, rnn_type=rnn_type, optim_name=optim_name, checkpoint_dir=str(tmp_path),
    )  # fmt: skip
    assert (tmp_path / "DPRNN" / "last.pt").exists()
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
