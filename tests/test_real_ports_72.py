# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_71.py`` (the
harness: ``tests/real_ports.py``):

- TimesNet as thuml/Time-Series-Library writes it (``models/TimesNet.py``'s ``FFT_for_Period``,
  ``TimesBlock`` and ``Model``; ``layers/Conv_Blocks.py``'s ``Inception_Block_V1``;
  ``layers/Embed.py``'s ``PositionalEmbedding``, ``TokenEmbedding``, ``FixedEmbedding``,
  ``TemporalEmbedding`` and ``DataEmbedding``; ``exp_long_term_forecasting.py``'s step), small:
  periods found by ``torch.fft.rfft`` and ``torch.topk`` of ``abs(xf).mean(0).mean(-1)`` with
  ``frequency_list[0] = 0`` written in place, the indices taken to NumPy (``x.shape[1] //
  top_list``) and used to index ``abs(xf).mean(-1)[:, top_list]``, the series zero-padded to a
  multiple of each period and reshaped to 2-d by NumPy integers, an Inception block of
  ``Conv2d``s averaged by ``torch.stack(res_list, dim=-1).mean(-1)``, the periods weighted by
  ``F.softmax(period_weight, dim=1).unsqueeze(1).unsqueeze(1).repeat(1, T, N, 1)``, a circular
  ``Conv1d`` token embedding, sinusoidal position and fixed temporal embeddings
  (``nn.Parameter(w, requires_grad=False)`` as an embedding's weight), the non-stationary
  normalisation by ``torch.var(..., unbiased=False)``; imputation (``exp_imputation.py``'s
  random mask by ``mask[mask <= args.mask_rate] = 0``, ``batch_x.masked_fill(mask == 0, 0)``,
  ``torch.sum(x_enc, dim=1) / torch.sum(mask == 1, dim=1)``, ``x_enc /= stdev`` in place, the
  loss over ``outputs[mask == 0]``), anomaly detection, and the classification head over a
  padding mask.
- SASRec as pmixer/SASRec.pytorch writes it (``model.py``'s ``PointWiseFeedForward`` and
  ``SASRec`` with its timeline mask; ``main.py``'s training loop; ``utils.py``'s ``evaluate``):
  ``torch.nn.Embedding(item_num + 1, ..., padding_idx=0)``, ``torch.LongTensor`` of NumPy
  sequences, ``seqs *= self.item_emb.embedding_dim ** 0.5``, positions by ``np.tile`` masked by
  ``poss *= (log_seqs != 0)``, ``~torch.BoolTensor(log_seqs == 0)`` multiplied in, the causal
  ``~torch.tril(torch.ones((tl, tl), dtype=torch.bool))`` mask of a sequence-first
  ``nn.MultiheadAttention``, ``outputs += inputs`` in place, ``xavier_normal_`` over every
  parameter inside ``try/except``, ``weight.data[0, :] = 0``, ``BCEWithLogitsLoss`` over the
  positions ``np.where(pos != 0)`` gives, ``loss += args.l2_emb * torch.norm(param)``, Adam, and
  ``predict``'s ranks by ``-logits`` and ``argsort().argsort()`` under ``torch.no_grad()``.
- BinaryNet as itayhubara/BinaryNet.pytorch writes it (``models/binarized_modules.py``'s
  ``Binarize`` and ``BinarizeLinear``; ``main_mnist.py``'s ``Net`` and ``train``), small: the
  activations binarized through ``input.data=Binarize(input.data)`` (the graph kept: the
  gradient passes straight through), the latent weights kept on the parameter as
  ``self.weight.org`` and the binary ones written by ``self.weight.data=Binarize(...)``,
  ``out += self.bias.view(1, -1).expand_as(out)``, the latent weights restored by
  ``p.data.copy_(p.org)`` before the step and clipped by ``p.org.copy_(p.data.clamp_(-1,1))``
  after it.
- XNOR-Net as jiecaoyu/XNOR-Net-PyTorch writes it (``models/nin.py``'s ``BinActive`` and
  ``BinConv2d``; ``util.py``'s ``BinOp``; ``main.py``'s loop), small: a ``torch.autograd.Function``
  with ``ctx.save_for_backward`` returning two outputs, its backward zeroing by
  ``grad_input[input.ge(1)] = 0``; the weights mean-centred, clamped, saved and binarized by
  ``.data =`` assignments; ``m[weight.lt(-1.0)] = 0`` into an expanded tensor; the binary
  gradient written by ``self.target_modules[index].grad.data = ...``; one parameter group
  per parameter.
- BinaryConnect with straight-through estimators: ``grad_input[input.abs() > 1] = 0`` in a
  custom ``Function`` and the weights by ``w + (w.sign() - w).detach()``, the latent weights
  clipped by ``p.data.clamp_(-1, 1)`` after each SGD step.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


def _runs(source, steps, **names):
    """The records of ``source`` under torch and of its port under retrograd (torch's initial
    weights loaded into the port's modules by ``initialize``)."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            source
            if lib is torch
            else port(source, steps).replace("from torch.", "from retrograd.")
        )
        shared = {
            k.removeprefix("make_"): v(lib) if k.startswith("make_") else v
            for k, v in names.items()
        }
        with SharedDraws(lib, 7200):
            run_source(text, lib, record=record, initialize=initialize, **shared)
        records.append(record)
    return records


TIMESNET_SOURCE = """
import math
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.fft


# -- layers/Embed.py ---------------------------------------------------------------------------------
class PositionalEmbedding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super(PositionalEmbedding, self).__init__()
        # Compute the positional encodings once in log space.
        pe = torch.zeros(max_len, d_model).float()
        pe.require_grad = False

        position = torch.arange(0, max_len).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float()
                    * -(math.log(10000.0) / d_model)).exp()

        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)

        pe = pe.unsqueeze(0)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return self.pe[:, :x.size(1)]


class TokenEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(TokenEmbedding, self).__init__()
        padding = 1 if torch.__version__ >= '1.5.0' else 2
        self.tokenConv = nn.Conv1d(in_channels=c_in, out_channels=d_model,
                                   kernel_size=3, padding=padding, padding_mode='circular', bias=False)
        for m in self.modules():
            if isinstance(m, nn.Conv1d):
                nn.init.kaiming_normal_(
                    m.weight, mode='fan_in', nonlinearity='leaky_relu')

    def forward(self, x):
        x = self.tokenConv(x.permute(0, 2, 1)).transpose(1, 2)
        return x


class FixedEmbedding(nn.Module):
    def __init__(self, c_in, d_model):
        super(FixedEmbedding, self).__init__()

        w = torch.zeros(c_in, d_model).float()
        w.require_grad = False

        position = torch.arange(0, c_in).float().unsqueeze(1)
        div_term = (torch.arange(0, d_model, 2).float()
                    * -(math.log(10000.0) / d_model)).exp()

        w[:, 0::2] = torch.sin(position * div_term)
        w[:, 1::2] = torch.cos(position * div_term)

        self.emb = nn.Embedding(c_in, d_model)
        self.emb.weight = nn.Parameter(w, requires_grad=False)

    def forward(self, x):
        return self.emb(x).detach()


class TemporalEmbedding(nn.Module):
    def __init__(self, d_model, embed_type='fixed', freq='h'):
        super(TemporalEmbedding, self).__init__()

        minute_size = 4
        hour_size = 24
        weekday_size = 7
        day_size = 32
        month_size = 13

        Embed = FixedEmbedding if embed_type == 'fixed' else nn.Embedding
        if freq == 't':
            self.minute_embed = Embed(minute_size, d_model)
        self.hour_embed = Embed(hour_size, d_model)
        self.weekday_embed = Embed(weekday_size, d_model)
        self.day_embed = Embed(day_size, d_model)
        self.month_embed = Embed(month_size, d_model)

    def forward(self, x):
        x = x.long()
        minute_x = self.minute_embed(x[:, :, 4]) if hasattr(
            self, 'minute_embed') else 0.
        hour_x = self.hour_embed(x[:, :, 3])
        weekday_x = self.weekday_embed(x[:, :, 2])
        day_x = self.day_embed(x[:, :, 1])
        month_x = self.month_embed(x[:, :, 0])

        return hour_x + weekday_x + day_x + month_x + minute_x


class TimeFeatureEmbedding(nn.Module):
    def __init__(self, d_model, embed_type='timeF', freq='h'):
        super(TimeFeatureEmbedding, self).__init__()

        freq_map = {'h': 4, 't': 5, 's': 6,
                    'm': 1, 'a': 1, 'w': 2, 'd': 3, 'b': 3}
        d_inp = freq_map[freq]
        self.embed = nn.Linear(d_inp, d_model, bias=False)

    def forward(self, x):
        return self.embed(x)


class DataEmbedding(nn.Module):
    def __init__(self, c_in, d_model, embed_type='fixed', freq='h', dropout=0.1):
        super(DataEmbedding, self).__init__()

        self.value_embedding = TokenEmbedding(c_in=c_in, d_model=d_model)
        self.position_embedding = PositionalEmbedding(d_model=d_model)
        self.temporal_embedding = TemporalEmbedding(d_model=d_model, embed_type=embed_type,
                                                    freq=freq) if embed_type != 'timeF' else TimeFeatureEmbedding(
            d_model=d_model, embed_type=embed_type, freq=freq)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        if x_mark is None:
            x = self.value_embedding(x) + self.position_embedding(x)
        else:
            x = self.value_embedding(
                x) + self.temporal_embedding(x_mark) + self.position_embedding(x)
        return self.dropout(x)


# -- layers/Conv_Blocks.py ---------------------------------------------------------------------------
class Inception_Block_V1(nn.Module):
    def __init__(self, in_channels, out_channels, num_kernels=6, init_weight=True):
        super(Inception_Block_V1, self).__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.num_kernels = num_kernels
        kernels = []
        for i in range(self.num_kernels):
            kernels.append(nn.Conv2d(in_channels, out_channels, kernel_size=2 * i + 1, padding=i))
        self.kernels = nn.ModuleList(kernels)
        if init_weight:
            self._initialize_weights()

    def _initialize_weights(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode='fan_out', nonlinearity='relu')
                if m.bias is not None:
                    nn.init.constant_(m.bias, 0)

    def forward(self, x):
        res_list = []
        for i in range(self.num_kernels):
            res_list.append(self.kernels[i](x))
        res = torch.stack(res_list, dim=-1).mean(-1)
        return res


# -- models/TimesNet.py ------------------------------------------------------------------------------
def FFT_for_Period(x, k=2):
    # [B, T, C]
    xf = torch.fft.rfft(x, dim=1)
    # find period by amplitudes
    frequency_list = abs(xf).mean(0).mean(-1)
    frequency_list[0] = 0
    _, top_list = torch.topk(frequency_list, k)
    top_list = top_list.detach().cpu().numpy()
    period = x.shape[1] // top_list
    return period, abs(xf).mean(-1)[:, top_list]


class TimesBlock(nn.Module):
    def __init__(self, configs):
        super(TimesBlock, self).__init__()
        self.seq_len = configs.seq_len
        self.pred_len = configs.pred_len
        self.k = configs.top_k
        # parameter-efficient design
        self.conv = nn.Sequential(
            Inception_Block_V1(configs.d_model, configs.d_ff,
                               num_kernels=configs.num_kernels),
            nn.GELU(),
            Inception_Block_V1(configs.d_ff, configs.d_model,
                               num_kernels=configs.num_kernels)
        )

    def forward(self, x):
        B, T, N = x.size()
        period_list, period_weight = FFT_for_Period(x, self.k)

        res = []
        for i in range(self.k):
            period = period_list[i]
            # padding
            if (self.seq_len + self.pred_len) % period != 0:
                length = (
                                 ((self.seq_len + self.pred_len) // period) + 1) * period
                padding = torch.zeros([x.shape[0], (length - (self.seq_len + self.pred_len)), x.shape[2]]).to(x.device)
                out = torch.cat([x, padding], dim=1)
            else:
                length = (self.seq_len + self.pred_len)
                out = x
            # reshape
            out = out.reshape(B, length // period, period,
                              N).permute(0, 3, 1, 2).contiguous()
            # 2D conv: from 1d Variation to 2d Variation
            out = self.conv(out)
            # reshape back
            out = out.permute(0, 2, 3, 1).reshape(B, -1, N)
            res.append(out[:, :(self.seq_len + self.pred_len), :])
        res = torch.stack(res, dim=-1)
        # adaptive aggregation
        period_weight = F.softmax(period_weight, dim=1)
        period_weight = period_weight.unsqueeze(
            1).unsqueeze(1).repeat(1, T, N, 1)
        res = torch.sum(res * period_weight, -1)
        # residual connection
        res = res + x
        return res


class Model(nn.Module):
    \"\"\"
    Paper link: https://openreview.net/pdf?id=ju_Uqw384Oq
    \"\"\"

    def __init__(self, configs):
        super(Model, self).__init__()
        self.configs = configs
        self.task_name = configs.task_name
        self.seq_len = configs.seq_len
        self.label_len = configs.label_len
        self.pred_len = configs.pred_len
        self.model = nn.ModuleList([TimesBlock(configs)
                                    for _ in range(configs.e_layers)])
        self.enc_embedding = DataEmbedding(configs.enc_in, configs.d_model, configs.embed, configs.freq,
                                           configs.dropout)
        self.layer = configs.e_layers
        self.layer_norm = nn.LayerNorm(configs.d_model)
        if self.task_name == 'long_term_forecast' or self.task_name == 'short_term_forecast':
            self.predict_linear = nn.Linear(
                self.seq_len, self.pred_len + self.seq_len)
            self.projection = nn.Linear(
                configs.d_model, configs.c_out, bias=True)
        if self.task_name == 'imputation' or self.task_name == 'anomaly_detection':
            self.projection = nn.Linear(
                configs.d_model, configs.c_out, bias=True)
        if self.task_name == 'classification':
            self.act = F.gelu
            self.dropout = nn.Dropout(configs.dropout)
            self.projection = nn.Linear(
                configs.d_model * configs.seq_len, configs.num_class)

    def forecast(self, x_enc, x_mark_enc, x_dec, x_mark_dec):
        # Normalization from Non-stationary Transformer
        means = x_enc.mean(1, keepdim=True).detach()
        x_enc = x_enc.sub(means)
        stdev = torch.sqrt(
            torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x_enc = x_enc.div(stdev)

        # embedding
        enc_out = self.enc_embedding(x_enc, x_mark_enc)  # [B,T,C]
        enc_out = self.predict_linear(enc_out.permute(0, 2, 1)).permute(
            0, 2, 1)  # align temporal dimension
        # TimesNet
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))
        # project back
        dec_out = self.projection(enc_out)

        # De-Normalization from Non-stationary Transformer
        dec_out = dec_out.mul(
            (stdev[:, 0, :].unsqueeze(1).repeat(
                1, self.pred_len + self.seq_len, 1)))
        dec_out = dec_out.add(
            (means[:, 0, :].unsqueeze(1).repeat(
                1, self.pred_len + self.seq_len, 1)))
        return dec_out

    def imputation(self, x_enc, x_mark_enc, x_dec, x_mark_dec, mask):
        # Normalization from Non-stationary Transformer
        means = torch.sum(x_enc, dim=1) / torch.sum(mask == 1, dim=1)
        means = means.unsqueeze(1).detach()
        x_enc = x_enc.sub(means)
        x_enc = x_enc.masked_fill(mask == 0, 0)
        stdev = torch.sqrt(torch.sum(x_enc * x_enc, dim=1) /
                           torch.sum(mask == 1, dim=1) + 1e-5)
        stdev = stdev.unsqueeze(1).detach()
        x_enc /= stdev

        # embedding
        enc_out = self.enc_embedding(x_enc, x_mark_enc)  # [B,T,C]
        # TimesNet
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))
        # project back
        dec_out = self.projection(enc_out)

        # De-Normalization from Non-stationary Transformer
        dec_out = dec_out.mul(
            (stdev[:, 0, :].unsqueeze(1).repeat(
                1, self.pred_len + self.seq_len, 1)))
        dec_out = dec_out.add(
            (means[:, 0, :].unsqueeze(1).repeat(
                1, self.pred_len + self.seq_len, 1)))
        return dec_out

    def anomaly_detection(self, x_enc):
        # Normalization from Non-stationary Transformer
        means = x_enc.mean(1, keepdim=True).detach()
        x_enc = x_enc.sub(means)
        stdev = torch.sqrt(
            torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x_enc = x_enc.div(stdev)

        # embedding
        enc_out = self.enc_embedding(x_enc, None)  # [B,T,C]
        # TimesNet
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))
        # project back
        dec_out = self.projection(enc_out)

        # De-Normalization from Non-stationary Transformer
        dec_out = dec_out.mul(
            (stdev[:, 0, :].unsqueeze(1).repeat(
                1, self.pred_len + self.seq_len, 1)))
        dec_out = dec_out.add(
            (means[:, 0, :].unsqueeze(1).repeat(
                1, self.pred_len + self.seq_len, 1)))
        return dec_out

    def classification(self, x_enc, x_mark_enc):
        # embedding
        enc_out = self.enc_embedding(x_enc, None)  # [B,T,C]
        # TimesNet
        for i in range(self.layer):
            enc_out = self.layer_norm(self.model[i](enc_out))

        # Output
        # the output transformer encoder/decoder embeddings don't include non-linearity
        output = self.act(enc_out)
        output = self.dropout(output)
        # zero-out padding embeddings
        output = output * x_mark_enc.unsqueeze(-1)
        # (batch_size, seq_length * d_model)
        output = output.reshape(output.shape[0], -1)
        output = self.projection(output)  # (batch_size, num_classes)
        return output

    def forward(self, x_enc, x_mark_enc, x_dec, x_mark_dec, mask=None):
        if self.task_name == 'long_term_forecast' or self.task_name == 'short_term_forecast':
            dec_out = self.forecast(x_enc, x_mark_enc, x_dec, x_mark_dec)
            return dec_out[:, -self.pred_len:, :]  # [B, L, D]
        if self.task_name == 'imputation':
            dec_out = self.imputation(
                x_enc, x_mark_enc, x_dec, x_mark_dec, mask)
            return dec_out  # [B, L, D]
        if self.task_name == 'anomaly_detection':
            dec_out = self.anomaly_detection(x_enc)
            return dec_out  # [B, L, D]
        if self.task_name == 'classification':
            dec_out = self.classification(x_enc, x_mark_enc)
            return dec_out  # [B, N]
        return None


# -- exp/exp_long_term_forecasting.py's and exp_classification.py's steps -----------------------------
def train_forecast(args, batches):
    model = Model(args).float()
    initialize(model)
    model_optim = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    model.train()
    for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(batches):
        model_optim.zero_grad()
        batch_x = batch_x.float()
        batch_y = batch_y.float()
        batch_x_mark = batch_x_mark.float()
        batch_y_mark = batch_y_mark.float()

        # decoder input
        dec_inp = torch.zeros_like(batch_y[:, -args.pred_len:, :]).float()
        dec_inp = torch.cat([batch_y[:, :args.label_len, :], dec_inp], dim=1).float()

        outputs = model(batch_x, batch_x_mark, dec_inp, batch_y_mark)

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, -args.pred_len:, f_dim:]
        batch_y = batch_y[:, -args.pred_len:, f_dim:]
        loss = criterion(outputs, batch_y)
        record.append(loss.item())

        loss.backward()
        model_optim.step()
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def train_imputation(args, batches):
    model = Model(args).float()
    initialize(model)
    model_optim = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    model.train()
    for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(batches):
        model_optim.zero_grad()

        batch_x = batch_x.float()
        batch_x_mark = batch_x_mark.float()

        # random mask
        B, T, N = batch_x.shape
        mask = torch.rand((B, T, N))
        mask[mask <= args.mask_rate] = 0  # masked
        mask[mask > args.mask_rate] = 1  # remained
        inp = batch_x.masked_fill(mask == 0, 0)

        outputs = model(inp, batch_x_mark, None, None, mask)

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, :, f_dim:]

        # add support for MS
        batch_x = batch_x[:, :, f_dim:]
        mask = mask[:, :, f_dim:]

        loss = criterion(outputs[mask == 0], batch_x[mask == 0])
        record.append(loss.item())

        loss.backward()
        model_optim.step()
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def train_anomaly_detection(args, batches):
    model = Model(args).float()
    initialize(model)
    model_optim = torch.optim.Adam(model.parameters(), lr=args.learning_rate)
    criterion = nn.MSELoss()
    model.train()
    for i, (batch_x, batch_y, batch_x_mark, batch_y_mark) in enumerate(batches):
        model_optim.zero_grad()

        batch_x = batch_x.float()

        outputs = model(batch_x, None, None, None)

        f_dim = -1 if args.features == 'MS' else 0
        outputs = outputs[:, :, f_dim:]
        loss = criterion(outputs, batch_x)
        record.append(loss.item())

        loss.backward()
        model_optim.step()
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})


def train_classification(args, batches):
    model = Model(args).float()
    initialize(model)
    model_optim = torch.optim.RAdam(model.parameters(), lr=args.learning_rate)
    criterion = nn.CrossEntropyLoss()
    model.train()
    for i, (batch_x, label, padding_mask) in enumerate(batches):
        model_optim.zero_grad()

        batch_x = batch_x.float()
        padding_mask = padding_mask.float()

        outputs = model(batch_x, padding_mask, None, None)
        loss = criterion(outputs, label.long().squeeze(-1))
        record.append(loss.item())

        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=4.0)
        model_optim.step()
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

TIMESNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.fft\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.fft\n",
    ),
    # retrograd's __version__ is its own (0.1.0), see test_real_ports_55
    ("padding = 1 if torch.__version__ >= '1.5.0' else 2", "padding = 1"),
    # no complex tensors in retrograd (API.md): the spectrum as its real and imaginary parts,
    # its amplitude ``abs(xf)`` as their hypotenuse
    (
        "    xf = torch.fft.rfft(x, dim=1)\n    # find period by amplitudes\n    frequency_list = abs(xf).mean(0).mean(-1)\n",
        "    xf_re, xf_im = torch.signal.rfft(x, 1)\n    amplitude = torch.sqrt(xf_re ** 2 + xf_im ** 2)\n    # find period by amplitudes\n    frequency_list = amplitude.mean(0).mean(-1)\n",
    ),
    (
        "    return period, abs(xf).mean(-1)[:, top_list]",
        "    return period, amplitude.mean(-1)[:, top_list]",
    ),
    (
        "        loss.backward()\n        model_optim.step()\n",
        "        grads = loss.backward()\n        model_optim.step(grads)\n",
    ),
    (
        "        loss.backward()\n        nn.utils.clip_grad_norm_(model.parameters(), max_norm=4.0)\n        model_optim.step()\n",
        "        grads = loss.backward()\n        nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=4.0)\n        model_optim.step(grads)\n",
    ),
]


class _TimesNetArgs:
    task_name = "long_term_forecast"
    seq_len = 10
    label_len = 4
    pred_len = 4
    top_k = 2
    d_model = 4
    d_ff = 6
    num_kernels = 2
    e_layers = 1
    enc_in = 2
    c_out = 2
    embed = "fixed"
    freq = "h"
    dropout = 0.0
    mask_rate = 0.25
    features = "M"
    learning_rate = 0.01
    num_class = 3


def _calendar(rng, batch, length):
    """Time features as the data loaders' ``timeenc=0`` stamps: month, day, weekday, hour."""
    return np.stack(
        [
            rng.integers(1, 13, (batch, length)),
            rng.integers(1, 32, (batch, length)),
            rng.integers(0, 7, (batch, length)),
            rng.integers(0, 24, (batch, length)),
        ],
        axis=-1,
    ).astype(np.float32)


@pytest.mark.parametrize("task", ["long_term_forecast", "imputation", "anomaly_detection"])
def test_timesnet_trains_as_torch(task):
    rng = np.random.default_rng(7201)
    args = _TimesNetArgs()
    args.task_name = task
    train = "train_forecast" if task == "long_term_forecast" else f"train_{task}"
    if task != "long_term_forecast":
        args.pred_len = 0
    t = np.arange(args.seq_len + args.pred_len)
    batches = []
    steps = 3 if task == "long_term_forecast" else 2
    for _ in range(steps):
        phase = rng.uniform(0, 6, (3, 1, 2))
        series = np.sin(2 * np.pi * t[None, :, None] / 5 + phase) + 0.5 * np.cos(
            2 * np.pi * t[None, :, None] / 3 + phase
        )
        series = (series + 0.1 * rng.standard_normal(series.shape)).astype(np.float32)
        x, y = series[:, : args.seq_len], series[:, args.seq_len - args.label_len :]
        marks = _calendar(rng, 3, args.seq_len + args.pred_len)
        batches.append((x, y, marks[:, : args.seq_len], marks[:, args.seq_len - args.label_len :]))
    theirs, ours = _runs(
        TIMESNET_SOURCE
        + f"\n{train}(args, [tuple(torch.from_numpy(a) for a in b) for b in batches])\n",
        TIMESNET_STEPS,
        args=args,
        batches=batches,
    )
    assert len(theirs) == steps + 1
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


def test_timesnet_classification_trains_as_torch():
    rng = np.random.default_rng(7202)
    args = _TimesNetArgs()
    args.task_name = "classification"
    args.seq_len, args.pred_len = 9, 0
    batches = []
    for _ in range(2):
        x = rng.standard_normal((4, args.seq_len, 2)).astype(np.float32)
        lengths = rng.integers(5, args.seq_len + 1, 4)
        padding_mask = (np.arange(args.seq_len)[None, :] < lengths[:, None]).astype(np.float32)
        label = rng.integers(0, 3, (4, 1))
        batches.append((x * padding_mask[..., None], label, padding_mask))
    theirs, ours = _runs(
        TIMESNET_SOURCE
        + "\ntrain_classification(args, [tuple(torch.from_numpy(a) for a in b) for b in batches])\n",
        TIMESNET_STEPS,
        args=args,
        batches=batches,
    )
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


SASREC_SOURCE = """
import numpy as np
import torch


class PointWiseFeedForward(torch.nn.Module):
    def __init__(self, hidden_units, dropout_rate):

        super(PointWiseFeedForward, self).__init__()

        self.conv1 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=dropout_rate)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(hidden_units, hidden_units, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=dropout_rate)

    def forward(self, inputs):
        outputs = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        outputs = outputs.transpose(-1, -2) # as Conv1D requires (N, C, Length)
        outputs += inputs
        return outputs

# pls use the following self-made multihead attention layer
# in case your pytorch version is below 1.16 or for other reasons
# https://github.com/pmixer/TiSASRec.pytorch/blob/master/model.py

class SASRec(torch.nn.Module):
    def __init__(self, user_num, item_num, args):
        super(SASRec, self).__init__()

        self.user_num = user_num
        self.item_num = item_num
        self.dev = args.device

        # TODO: loss += args.l2_emb for regularizing embedding vectors during training
        # https://stackoverflow.com/questions/42704283/adding-l1-l2-regularization-in-pytorch
        self.item_emb = torch.nn.Embedding(self.item_num+1, args.hidden_units, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(args.maxlen+1, args.hidden_units, padding_idx=0)
        self.emb_dropout = torch.nn.Dropout(p=args.dropout_rate)

        self.attention_layernorms = torch.nn.ModuleList() # to be Q for self-attention
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()

        self.last_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)

        for _ in range(args.num_blocks):
            new_attn_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)
            self.attention_layernorms.append(new_attn_layernorm)

            new_attn_layer =  torch.nn.MultiheadAttention(args.hidden_units,
                                                            args.num_heads,
                                                            args.dropout_rate)
            self.attention_layers.append(new_attn_layer)

            new_fwd_layernorm = torch.nn.LayerNorm(args.hidden_units, eps=1e-8)
            self.forward_layernorms.append(new_fwd_layernorm)

            new_fwd_layer = PointWiseFeedForward(args.hidden_units, args.dropout_rate)
            self.forward_layers.append(new_fwd_layer)

            # self.pos_sigmoid = torch.nn.Sigmoid()
            # self.neg_sigmoid = torch.nn.Sigmoid()

    def log2feats(self, log_seqs): # TODO: fp64 and int64 as default in python, trim?
        seqs = self.item_emb(torch.LongTensor(log_seqs).to(self.dev))
        seqs *= self.item_emb.embedding_dim ** 0.5
        poss = np.tile(np.arange(1, log_seqs.shape[1] + 1), [log_seqs.shape[0], 1])
        # TODO: directly do tensor = torch.arange(1, xxx, device='cuda') to save extra overheads
        poss *= (log_seqs != 0)
        seqs += self.pos_emb(torch.LongTensor(poss).to(self.dev))
        seqs = self.emb_dropout(seqs)

        timeline_mask = torch.BoolTensor(log_seqs == 0).to(self.dev)
        seqs *= ~timeline_mask.unsqueeze(-1) # broadcast in last dim

        tl = seqs.shape[1] # time dim len for enforce causality
        attention_mask = ~torch.tril(torch.ones((tl, tl), dtype=torch.bool, device=self.dev))

        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs)
            mha_outputs, _ = self.attention_layers[i](Q, seqs, seqs,
                                            attn_mask=attention_mask)
                                            # need_weights=False) this arg do not work?
            seqs = Q + mha_outputs
            seqs = torch.transpose(seqs, 0, 1)

            seqs = self.forward_layernorms[i](seqs)
            seqs = self.forward_layers[i](seqs)
            seqs *=  ~timeline_mask.unsqueeze(-1)

        log_feats = self.last_layernorm(seqs) # (U, T, C) -> (U, -1, C)

        return log_feats

    def forward(self, user_ids, log_seqs, pos_seqs, neg_seqs): # for training
        log_feats = self.log2feats(log_seqs) # user_ids hasn't been used yet

        pos_embs = self.item_emb(torch.LongTensor(pos_seqs).to(self.dev))
        neg_embs = self.item_emb(torch.LongTensor(neg_seqs).to(self.dev))

        pos_logits = (log_feats * pos_embs).sum(dim=-1)
        neg_logits = (log_feats * neg_embs).sum(dim=-1)

        # pos_pred = self.pos_sigmoid(pos_logits)
        # neg_pred = self.neg_sigmoid(neg_logits)

        return pos_logits, neg_logits # pos_pred, neg_pred

    def predict(self, user_ids, log_seqs, item_indices): # for inference
        log_feats = self.log2feats(log_seqs) # user_ids hasn't been used yet

        final_feat = log_feats[:, -1, :] # only use last QKV classifier, a waste

        item_embs = self.item_emb(torch.LongTensor(item_indices).to(self.dev)) # (U, I, C)

        logits = item_embs.matmul(final_feat.unsqueeze(-1)).squeeze(-1)

        # preds = self.pos_sigmoid(logits) # rank same item list for different users

        return logits # preds # (U, I)


def evaluate(model, users, seqs, item_lists):
    NDCG = 0.0
    HT = 0.0
    valid_user = 0.0
    ranks = []
    for u, seq, item_idx in zip(users, seqs, item_lists):
        predictions = -model.predict(*[np.array(l) for l in [[u], [seq], item_idx]])
        predictions = predictions[0] # - for 1st argsort DESC

        rank = predictions.argsort().argsort()[0].item()
        ranks.append(rank)

        valid_user += 1

        if rank < 10:
            NDCG += 1 / np.log2(rank + 2)
            HT += 1
    return NDCG / valid_user, HT / valid_user, ranks


def main(args, usernum, itemnum, batches, eval_users, eval_seqs, eval_items):
    model = SASRec(usernum, itemnum, args).to(args.device) # no ReLU activation in original SASRec implementation?

    for name, param in model.named_parameters():
        try:
            torch.nn.init.xavier_normal_(param.data)
        except:
            pass # just ignore those failed init layers

    model.pos_emb.weight.data[0, :] = 0
    model.item_emb.weight.data[0, :] = 0
    initialize(model)

    model.train() # enable model training

    bce_criterion = torch.nn.BCEWithLogitsLoss() # torch.nn.BCELoss()
    adam_optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))

    for epoch in range(1, args.num_epochs + 1):
        for step, (u, seq, pos, neg) in enumerate(batches):
            u, seq, pos, neg = np.array(u), np.array(seq), np.array(pos), np.array(neg)
            pos_logits, neg_logits = model(u, seq, pos, neg)
            pos_labels, neg_labels = torch.ones(pos_logits.shape, device=args.device), torch.zeros(neg_logits.shape, device=args.device)
            # print("\\neye ball check raw_logits:"); print(pos_logits); print(neg_logits) # check pos_logits > 0, neg_logits < 0
            adam_optimizer.zero_grad()
            indices = np.where(pos != 0)
            loss = bce_criterion(pos_logits[indices], pos_labels[indices])
            loss += bce_criterion(neg_logits[indices], neg_labels[indices])
            for param in model.item_emb.parameters(): loss += args.l2_emb * torch.norm(param)
            loss.backward()
            adam_optimizer.step()
            record.append(loss.item())
            print("loss in epoch {} iteration {}: {}".format(epoch, step, round(loss.item(), 4))) # expected 0.4~0.6 after init few epochs

        model.eval()
        with torch.no_grad():
            t_test = evaluate(model, eval_users, eval_seqs, eval_items)
        record.append(list(t_test[:2]))
        record.append(t_test[2])
        model.train()
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

SASREC_STEPS = [
    ("import numpy as np\nimport torch\n", "import numpy as np\nimport retrograd as torch\n"),
    (
        "            loss.backward()\n            adam_optimizer.step()\n",
        "            grads = loss.backward()\n            adam_optimizer.step(grads)\n",
    ),
]


class _SasRecArgs:
    device = "cpu"
    hidden_units = 8
    num_heads = 2
    num_blocks = 2
    dropout_rate = 0.0
    maxlen = 6
    lr = 0.01
    l2_emb = 0.001
    num_epochs = 2


def _sequences(rng, users, itemnum, maxlen):
    """``WarpSampler``'s batches: each user's history left-padded with 0, the next items as
    positives and unseen items as negatives."""
    seq = np.zeros((len(users), maxlen), dtype=np.int64)
    pos = np.zeros_like(seq)
    neg = np.zeros_like(seq)
    for row in range(len(users)):
        length = rng.integers(2, maxlen + 2)
        history = rng.integers(1, itemnum + 1, length)
        take = min(length - 1, maxlen)
        seq[row, maxlen - take :] = history[-take - 1 : -1]
        pos[row, maxlen - take :] = history[-take:]
        neg[row, maxlen - take :] = rng.integers(1, itemnum + 1, take)
    return seq, pos, neg


def test_sasrec_trains_and_ranks_as_torch(capsys):
    rng = np.random.default_rng(7203)
    args = _SasRecArgs()
    usernum, itemnum = 10, 12
    batches = []
    for _ in range(2):
        users = rng.integers(1, usernum + 1, 4)
        batches.append((users, *_sequences(rng, users, itemnum, args.maxlen)))
    eval_users = [1, 2]
    eval_seqs, _, _ = _sequences(rng, eval_users, itemnum, args.maxlen)
    eval_items = [list(rng.permutation(np.arange(1, itemnum + 1))[:5]) for _ in eval_users]
    records = []
    initialize = initializer()
    logs = []
    for lib in (torch, rg):
        record = []
        text = SASREC_SOURCE if lib is torch else port(SASREC_SOURCE, SASREC_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["main"](args, usernum, itemnum, batches, eval_users, eval_seqs, eval_items)
        records.append(record)
        logs.append(capsys.readouterr().out)
    theirs, ours = records
    assert logs[1] == logs[0]
    assert "loss in epoch 2 iteration 1" in logs[0]
    # The keys' biases have no gradient (a softmax over the keys does not see a shift common
    # to all of them), so Adam's steps on them follow the rounding noise: only the queries'
    # and values' thirds of ``in_proj_bias`` are compared.
    for state in (theirs[-1], ours[-1]):
        for name in [k for k in state if k.endswith("in_proj_bias")]:
            query, _, value = np.split(state.pop(name), 3)
            state[name + ".query"], state[name + ".value"] = query, value
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)


BINARYNET_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.autograd import Variable
from torch.autograd import Function


# -- models/binarized_modules.py -------------------------------------------------------------------
def Binarize(tensor,quant_mode='det'):
    if quant_mode=='det':
        return tensor.sign()
    else:
        return tensor.add_(1).div_(2).add_(torch.rand(tensor.size()).add(-0.5)).clamp_(0,1).round().mul_(2).add_(-1)


class BinarizeLinear(nn.Linear):

    def __init__(self, *kargs, **kwargs):
        super(BinarizeLinear, self).__init__(*kargs, **kwargs)

    def forward(self, input):

        if input.size(1) != 784:
            input.data=Binarize(input.data)
        if not hasattr(self.weight,'org'):
            self.weight.org=self.weight.data.clone()
        self.weight.data=Binarize(self.weight.org)
        out = nn.functional.linear(input, self.weight)
        if not self.bias is None:
            self.bias.org=self.bias.data.clone()
            out += self.bias.view(1, -1).expand_as(out)

        return out


# -- main_mnist.py (widths scaled down, dropout off) ----------------------------------------------
class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.infl_ratio=3
        self.fc1 = BinarizeLinear(784, 2*self.infl_ratio)
        self.htanh1 = nn.Hardtanh()
        self.bn1 = nn.BatchNorm1d(2*self.infl_ratio)
        self.fc2 = BinarizeLinear(2*self.infl_ratio, 2*self.infl_ratio)
        self.htanh2 = nn.Hardtanh()
        self.bn2 = nn.BatchNorm1d(2*self.infl_ratio)
        self.fc3 = BinarizeLinear(2*self.infl_ratio, 2*self.infl_ratio)
        self.htanh3 = nn.Hardtanh()
        self.bn3 = nn.BatchNorm1d(2*self.infl_ratio)
        self.fc4 = nn.Linear(2*self.infl_ratio, 10)
        self.logsoftmax=nn.LogSoftmax(dim=1)
        self.drop=nn.Dropout(0.0)

    def forward(self, x):
        x = x.view(-1, 28*28)
        x = self.fc1(x)
        x = self.bn1(x)
        x = self.htanh1(x)
        x = self.fc2(x)
        x = self.bn2(x)
        x = self.htanh2(x)
        x = self.fc3(x)
        x = self.drop(x)
        x = self.bn3(x)
        x = self.htanh3(x)
        x = self.fc4(x)
        return self.logsoftmax(x)


model = Net()
initialize(model)
criterion = nn.CrossEntropyLoss()
optimizer = optim.Adam(model.parameters(), lr=args.lr)


def train(epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = Variable(data), Variable(target)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)

        if epoch%40==0:
            optimizer.param_groups[0]['lr']=optimizer.param_groups[0]['lr']*0.1

        optimizer.zero_grad()
        loss.backward()
        for p in list(model.parameters()):
            if hasattr(p,'org'):
                p.data.copy_(p.org)
        optimizer.step()
        for p in list(model.parameters()):
            if hasattr(p,'org'):
                p.org.copy_(p.data.clamp_(-1,1))
        record.append(loss.item())
        record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
        record.append({name: p.org.numpy().copy() for name, p in model.named_parameters() if hasattr(p, 'org')})


for epoch in range(1, 3):
    train(epoch)
"""

BINARYNET_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    (
        "        loss.backward()\n        for p in list(model.parameters()):\n            if hasattr(p,'org'):\n                p.data.copy_(p.org)\n        optimizer.step()\n",
        "        grads = loss.backward()\n        for p in list(model.parameters()):\n            if hasattr(p,'org'):\n                p.data.copy_(p.org)\n        optimizer.step(grads)\n",
    ),
]


class _BinaryNetArgs:
    lr = 0.01


def _mnist_like(rng, batches, batch_size):
    return [
        (
            rng.uniform(0, 1, (batch_size, 1, 28, 28)).astype(np.float32),
            rng.integers(0, 10, batch_size),
        )
        for _ in range(batches)
    ]


def test_binarynet_with_latent_weights_trains_as_torch():
    rng = np.random.default_rng(7204)
    data = _mnist_like(rng, 2, 7)
    theirs, ours = _runs(
        BINARYNET_SOURCE,
        BINARYNET_STEPS,
        args=_BinaryNetArgs(),
        make_train_loader=lambda lib: [
            (lib.tensor(x), lib.tensor(y, dtype=lib.int64)) for x, y in data
        ],
    )
    assert len(theirs) == 3 * 4
    # (the biases of the binarized layers are followed by batch normalisation, which takes
    # any constant out: their true gradient is zero, and Adam's steps follow the rounding)
    biases = ("fc1.bias", "fc2.bias", "fc3.bias")
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=biases)


XNOR_SOURCE = '''
import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


# -- models/nin.py (BinActive as a static autograd.Function, as torch >= 1.3 requires; the
# network small, its max pooling ahead of the binarized layers, which sum an odd number of
# +-1 terms: their outputs take few values, and a tie in a pooling window or a sum of exactly
# 0 (main.py zeroes the biases) at a ReLU is broken by each library's rounding its own way) ---
class BinActive(torch.autograd.Function):
    """
    Binarize the input activations and calculate the mean across channel dimension.
    """
    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        size = input.size()
        mean = torch.mean(input.abs(), 1, keepdim=True)
        input = input.sign()
        return input, mean

    @staticmethod
    def backward(ctx, grad_output, grad_output_mean):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input.ge(1)] = 0
        grad_input[input.le(-1)] = 0
        return grad_input


class BinConv2d(nn.Module):
    def __init__(self, input_channels, output_channels,
            kernel_size=-1, stride=-1, padding=-1, dropout=0):
        super(BinConv2d, self).__init__()
        self.layer_type = 'BinConv2d'
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dropout_ratio = dropout

        self.bn = nn.BatchNorm2d(input_channels, eps=1e-4, momentum=0.1, affine=True)
        self.bn.weight.data = self.bn.weight.data.zero_().add(1.0)
        if dropout!=0:
            self.dropout = nn.Dropout(dropout)
        self.conv = nn.Conv2d(input_channels, output_channels,
                kernel_size=kernel_size, stride=stride, padding=padding)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        x = self.bn(x)
        x, mean = BinActive.apply(x)
        if self.dropout_ratio!=0:
            x = self.dropout(x)
        x = self.conv(x)
        x = self.relu(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.xnor = nn.Sequential(
                nn.Conv2d(3, 5, kernel_size=3, stride=1, padding=1),
                nn.BatchNorm2d(5, eps=1e-4, momentum=0.1, affine=False),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
                BinConv2d(5, 5, kernel_size=1, stride=1, padding=0),
                BinConv2d(5, 4, kernel_size=1, stride=1, padding=0),
                nn.BatchNorm2d(4, eps=1e-4, momentum=0.1, affine=False),
                nn.Conv2d(4, 10, kernel_size=1, stride=1, padding=0),
                nn.ReLU(inplace=True),
                nn.AvgPool2d(kernel_size=3, stride=1, padding=0),
                )

    def forward(self, x):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d) or isinstance(m, nn.BatchNorm1d):
                if hasattr(m.weight, 'data'):
                    m.weight.data.clamp_(min=0.01)
        x = self.xnor(x)
        x = x.view(x.size(0), 10)
        return x


# -- util.py ---------------------------------------------------------------------------------------
class BinOp():
    def __init__(self, model):
        # count the number of Conv2d
        count_Conv2d = 0
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                count_Conv2d = count_Conv2d + 1

        start_range = 1
        end_range = count_Conv2d-2
        self.bin_range = numpy.linspace(start_range,
                end_range, end_range-start_range+1)\\
                        .astype('int').tolist()
        self.num_of_params = len(self.bin_range)
        self.saved_params = []
        self.target_params = []
        self.target_modules = []
        index = -1
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                index = index + 1
                if index in self.bin_range:
                    tmp = m.weight.data.clone()
                    self.saved_params.append(tmp)
                    self.target_modules.append(m.weight)

    def binarization(self):
        self.meancenterConvParams()
        self.clampConvParams()
        self.save_params()
        self.binarizeConvParams()

    def meancenterConvParams(self):
        for index in range(self.num_of_params):
            s = self.target_modules[index].data.size()
            negMean = self.target_modules[index].data.mean(1, keepdim=True).\\
                    mul(-1).expand_as(self.target_modules[index].data)
            self.target_modules[index].data = self.target_modules[index].data.add(negMean)

    def clampConvParams(self):
        for index in range(self.num_of_params):
            self.target_modules[index].data = \\
                    self.target_modules[index].data.clamp(-1.0, 1.0)

    def save_params(self):
        for index in range(self.num_of_params):
            self.saved_params[index].copy_(self.target_modules[index].data)

    def binarizeConvParams(self):
        for index in range(self.num_of_params):
            n = self.target_modules[index].data[0].nelement()
            s = self.target_modules[index].data.size()
            if len(s) == 4:
                m = self.target_modules[index].data.norm(1, 3, keepdim=True)\\
                        .sum(2, keepdim=True).sum(1, keepdim=True).div(n)
            elif len(s) == 2:
                m = self.target_modules[index].data.norm(1, 1, keepdim=True).div(n)
            self.target_modules[index].data = \\
                    self.target_modules[index].data.sign().mul(m.expand(s))

    def restore(self):
        for index in range(self.num_of_params):
            self.target_modules[index].data.copy_(self.saved_params[index])

    def updateBinaryGradWeight(self):
        for index in range(self.num_of_params):
            weight = self.target_modules[index].data
            n = weight[0].nelement()
            s = weight.size()
            if len(s) == 4:
                m = weight.norm(1, 3, keepdim=True)\\
                        .sum(2, keepdim=True).sum(1, keepdim=True).div(n).expand(s)
            elif len(s) == 2:
                m = weight.norm(1, 1, keepdim=True).div(n).expand(s)
            m[weight.lt(-1.0)] = 0
            m[weight.gt(1.0)] = 0
            # m = m.add(1.0/n).mul(1.0-1.0/s[1]).mul(n)
            # self.target_modules[index].grad.data = \\
            #         self.target_modules[index].grad.data.mul(m)
            m = m.mul(self.target_modules[index].grad.data)
            m_add = weight.sign().mul(self.target_modules[index].grad.data)
            if len(s) == 4:
                m_add = m_add.sum(3, keepdim=True)\\
                        .sum(2, keepdim=True).sum(1, keepdim=True).div(n).expand(s)
            elif len(s) == 2:
                m_add = m_add.sum(1, keepdim=True).div(n).expand(s)
            m_add = m_add.mul(weight.sign())
            self.target_modules[index].grad.data = m.add(m_add).mul(1.0-1.0/s[1]).mul(n)
            self.target_modules[index].grad.data = self.target_modules[index].grad.data.mul(1e+4)


# -- main.py ---------------------------------------------------------------------------------------
model = Net()
for m in model.modules():
    if isinstance(m, nn.Conv2d):
        m.weight.data.normal_(0, 0.05)
        m.bias.data.zero_()
initialize(model)

base_lr = float(args.lr)
param_dict = dict(model.named_parameters())
params = []

for key, value in param_dict.items():
    params += [{'params':[value], 'lr': base_lr,
        'weight_decay':0.00001}]

optimizer = optim.Adam(params, lr=0.10,weight_decay=0.00001)
criterion = nn.CrossEntropyLoss()
bin_op = BinOp(model)


def train(epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(trainloader):
        # process the weights including binarization
        bin_op.binarization()

        # forwarding
        optimizer.zero_grad()
        output = model(data)

        # backwarding
        loss = criterion(output, target)
        loss.backward()

        # restore weights
        bin_op.restore()
        bin_op.updateBinaryGradWeight()

        optimizer.step()
        record.append(loss.item())
        record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})


for epoch in range(1, 3):
    train(epoch)
'''

XNOR_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\n",
    ),
    ("    def updateBinaryGradWeight(self):", "    def updateBinaryGradWeight(self, grads):"),
    (".grad.data", ".grad(grads).data"),
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    (
        "        bin_op.updateBinaryGradWeight()\n\n        optimizer.step()\n",
        "        bin_op.updateBinaryGradWeight(grads)\n\n        optimizer.step(grads)\n",
    ),
]


class _XnorArgs:
    lr = 0.01


def test_xnor_net_with_its_binary_gradient_trains_as_torch():
    rng = np.random.default_rng(7205)
    data = [
        (rng.standard_normal((4, 3, 6, 6)).astype(np.float32), rng.integers(0, 10, 4))
        for _ in range(2)
    ]
    theirs, ours = _runs(
        XNOR_SOURCE,
        XNOR_STEPS,
        args=_XnorArgs(),
        make_trainloader=lambda lib: [
            (lib.tensor(x), lib.tensor(y, dtype=lib.int64)) for x, y in data
        ],
    )
    assert len(theirs) == 2 * 4
    # (the first convolution's bias is followed by batch normalisation: no true gradient)
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5, skip=("xnor.0.bias",))


# -- regressions ---------------------------------------------------------------------------------
def test_a_masked_fill_of_an_expanded_tensor_writes_the_shared_locations_as_torch():
    results = []
    for lib in (torch, rg):
        scale = lib.tensor([[1.0], [2.0], [3.0]])
        m = scale.expand(3, 4)
        mask = lib.tensor([[False, True, False, False], [False] * 4, [True, True, False, False]])
        # was: ShapeError "more than one element ... refers to a single memory location";
        # torch writes each selected element's location (and warns the use is deprecated)
        with pytest.warns(UserWarning):
            m[mask] = 0
        with pytest.warns(UserWarning):
            m[lib.tensor([False, True, False])] = lib.tensor(7.0)
        results.append((scale.numpy().copy(), m.numpy().copy()))
    (their_base, theirs), (our_base, ours) = results
    np.testing.assert_array_equal(our_base, their_base)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(our_base, [[0.0], [7.0], [0.0]])
    # in a graph: torch takes the write, then its backward refuses to write the gradient back
    # through the expanded view ("more than one element of the written-to tensor refers to a
    # single memory location"); ours takes it and its backward refuses as torch's
    w = rg.tensor([[1.0], [2.0]]).require_grad()
    h = w * 2.0
    h.expand(2, 3)[rg.tensor([[True, False, False], [False, False, False]])] = 0.0
    assert h.tolist() == [[0.0], [4.0]]
    with pytest.raises(rg.ShapeError, match=r"index_put_: .*single memory location"):
        (h * h).sum().backward()
    # the graph stays usable: a loss that does not go through the write differentiates
    assert w.grad((w * 3.0).sum().backward()).tolist() == [[3.0], [3.0]]
    # a write through a view of the expanded tensor that takes each element once is
    # differentiated, as torch's: the filled location is a constant, the other one 2 * w
    h = w * 2.0
    h.expand(2, 3)[0, 1] = 0.0
    assert w.grad((h * h).sum().backward()).tolist() == [[0.0], [16.0]]


def test_a_gradients_data_assigned_is_the_gradient_the_step_takes():
    w = rg.tensor([1.0, -2.0]).require_grad()
    grads = (w * w).sum().backward()
    # XNOR-Net's updateBinaryGradWeight: ``weight.grad.data = ...`` (was: the assignment
    # changed a copy, and the step took the old gradient)
    w.grad(grads).data = w.grad(grads).data.mul(10.0)
    np.testing.assert_array_equal(w.grad(grads).numpy(), [20.0, -40.0])
    rg.optim.SGD([w], lr=0.01).step(grads)
    np.testing.assert_allclose(w.detach().numpy(), [0.8, -1.6], rtol=1e-6)
    with pytest.raises(rg.ShapeError, match=r"data: a gradient .* keeps its parameter's shape"):
        w.grad(grads).data = rg.tensor([1.0])
    np.testing.assert_array_equal(w.grad(grads).numpy(), [20.0, -40.0])


STE_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class SignSTE(torch.autograd.Function):
    \"\"\"sign() forward, the straight-through estimator backward (the gradient passed where
    |x| <= 1, as BinaryNet's hardtanh gradient).\"\"\"

    @staticmethod
    def forward(ctx, input):
        ctx.save_for_backward(input)
        return input.sign()

    @staticmethod
    def backward(ctx, grad_output):
        input, = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[input.abs() > 1] = 0
        return grad_input


class BinaryLinear(nn.Linear):
    def forward(self, x):
        w = self.weight
        bw = w + (w.sign() - w).detach()  # binary weights, identity gradient to the latent ones
        scale = w.abs().mean(dim=1, keepdim=True).detach()
        return F.linear(SignSTE.apply(x), bw * scale, self.bias)


model = nn.Sequential(nn.Linear(6, 8), BinaryLinear(8, 8), nn.Hardtanh(), BinaryLinear(8, 3))
initialize(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for step in range(4):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(inputs), labels)
    loss.backward()
    optimizer.step()
    for p in model.parameters():
        p.data.clamp_(-1, 1)  # BinaryConnect's latent weights kept in [-1, 1]
    record.append(loss.item())
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
"""

STE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


def test_binary_connect_with_straight_through_estimators_trains_as_torch():
    rng = np.random.default_rng(7206)
    inputs = (2.0 * rng.standard_normal((10, 6))).astype(np.float32)
    labels = rng.integers(0, 3, 10)
    theirs, ours = _runs(
        STE_SOURCE,
        STE_STEPS,
        make_inputs=lambda lib: lib.tensor(inputs),
        make_labels=lambda lib: lib.tensor(labels, dtype=lib.int64),
    )
    assert theirs[6] < theirs[0]
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
