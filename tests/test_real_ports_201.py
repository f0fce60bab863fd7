"""Real-port tests (the harness: ``tests/real_ports.py``): audio, speech and sequence models,
each trained a few steps against torch's run of the same program from the same weights and
draws. Every program is written here in the style of the project it names (none is copied
from it).

- a Conv-TasNet written here in the style of kaituoxu/Conv-TasNet (a ``Conv1d`` encoder with 50%
  overlap, a temporal conv net of residual blocks with depthwise ``Conv1d(..., groups=...)``, a
  right trim for the causal form, ``PReLU``, gLN/cLN/BatchNorm; overlap-add by
  ``torch.arange(...).unfold``, ``frames.new_tensor(...)`` and ``index_add_``; SI-SNR with PIT:
  ``est *= keep``, ``ref.new_tensor(list(permutations(...)))``, a one-hot by ``scatter_``,
  ``torch.einsum('bij,pij->bp', [a, b])`` over a list, ``best /= c``, a reorder by element
  assignment), trained with ``clip_grad_norm_``, in float64.
- an RNN-T written here in the style of Loren Lugosch's transducer tutorial (a 3-layer
  bidirectional ``GRU`` encoder, a ``GRUCell`` predictor started from ``torch.stack([h0] *
  batch)``, a joint network; the forward algorithm written into ``alpha[:, t, u]`` slot by slot
  with ``torch.gather`` and ``torch.logsumexp(torch.stack([...]), dim=0)``, checked against the
  brute-force sum over every alignment by ``nll_loss(input=..., target=..., reduction="sum")``;
  greedy decoding by ``max(-1)[1].item()``).
- a waveform U-Net written here in the style of facebookresearch/demucs v2 (a decorator keeping
  the constructor's arguments, a bidirectional LSTM over time, the initial conv weights divided
  in place by ``weight.data /= ...``, ``Conv1d`` + ``GLU(dim=1)`` rewrites, ``ConvTranspose1d``
  decoders inserted at the front, centre-trimmed skips, ``valid_length``; augmentations by random
  sign, channel swap, shift and stem shuffling through ``gather`` and ``argsort`` of
  ``th.rand``; a gradient norm summed from ``p.grad.data.norm() ** 2``).
- a speech front end written here in the style of torchaudio's functional and transforms
  modules (a power spectrogram by ``torch.stft(..., return_complex=True)`` over a batch packed by
  ``reshape`` and unpacked by ``torch.Size`` concatenation, the ``normalized="window"`` division
  of the complex spectrum in place, a mel filterbank with the Slaney mel scale written through
  ``hz[upper] = ...`` and Slaney's area norm ``bank *= ...``, an orthonormal DCT built by
  ``basis[0] *= ...``, decibels with a per-item ``top_db`` floor by ``amax(dim=(-3, -2, -1))``,
  deltas by a grouped ``conv1d`` over replicate padding, an iid SpecAugment band mask by
  ``masked_fill`` of ``torch.rand``-drawn bands; modules registering their windows and matrices
  as buffers, with ``torch._C._log_api_usage_once`` and ``torch.jit.isinstance``; a Hamming
  window through ``wkwargs={"periodic": False}`` and a log-mel MFCC), feeding a keyword
  spotter, and the loss's gradient with respect to the waveform through the STFT.
- an SRU written here in the style of asappresearch/sru 2.x's Python path (the recurrence written
  into ``h[t, :, di, :]`` in both directions, ``reset_parameters`` scaling
  ``self.weight.data.view(...)`` slices in place, the ``scale_x`` buffer set by ``.data[0] =``,
  a projection, a packed input turned into ``mask_pad`` by ``torch.ByteTensor``, the
  ``nn_rnn_compatible_return`` state layout, a ``__repr__`` by ``format(**vars(self))``), under a
  tied character language model trained by truncated BPTT with AdamW over decay/no-decay groups.
- a Listen, Attend and Spell model written here in the style of kaituoxu/Listen-Attend-Spell
  (rows padded by ``rows[0].new(...).fill_``, a packed LSTM listener with ``total_length``, an
  ``LSTMCell`` speller with dot-product attention by ``bmm``, ``F.cross_entropy(...,
  reduction='elementwise_mean')``, a beam search whose hypotheses are sorted by 0-d tensor
  scores), trained with ``math.isnan`` of the clipped gradient norm.
- a QRNN written here in the style of salesforce/pytorch-qrnn (a CPU forget-mult recurrence, a
  layer with ``window=2`` and ``save_prev_x``, eval-mode zoneout ``f *= 1 - zoneout``,
  ``Variable``, ``f.data.new(...).bernoulli_``), run once, then under a tied character
  language model with ``reset()`` and truncated BPTT by ``detach``.
- fairseq-style pieces written here (positions by ``cumsum`` of the non-padding mask, a
  ``-inf`` fill through float, ``log_softmax(..., dtype=torch.float32)``, sinusoidal positions
  over ``torch.onnx.operators.shape_as_tensor``'s 0-d sizes, a label-smoothed NLL with
  ``masked_fill_`` of the padding, beam candidates by ``lprobs[:, ::beam, :]``, ``topk``,
  ``fmod`` and ``torch.div(..., rounding_mode="trunc")``, a grown ``triu`` future mask) in a tied
  one-layer LM trained under an inverse-sqrt warmup, then a batched beam search keeping its
  buffers as fairseq's older generator did (``torch.gather(..., out=tokens.view(bsz, beam,
  -1)[:, :, step + 1])``, ``masked_select(..., mask=...)``, ``topk(..., largest=False)`` over
  the active order).

Defects found and fixed (each with a test in ``tests/test_realports37_fixes.py``):
``torch.jit.isinstance`` and ``torch._C._log_api_usage_once`` were missing (torchaudio calls
both), and so was ``torch.onnx.operators`` (fairseq); the losses refused torch's legacy
``reduction='elementwise_mean'``, which torch still reads as ``'mean'`` with a deprecation
warning; ``out=`` of ``gather``/``index_select``/``masked_select`` and the arithmetic was
refused, where fairseq's older beam search writes its buffers with it.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
given to ``clip_grad_norm_`` and ``optimizer.step``, and ``p.grad(grads)`` where a program reads
a gradient).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

IMPORTS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
]

CONV_TASNET_SOURCE = r"""import itertools
import math
import torch
import torch.nn as nn

F = nn.functional

EPS = 1e-8


def overlap_add(frames, hop):
    # [..., n_frames, frame_len] -> [..., (n_frames - 1) * hop + frame_len], summing overlaps
    lead = frames.size()[:-2]
    n_frames, frame_len = frames.size()[-2:]
    piece = math.gcd(frame_len, hop)  # split frames into pieces that tile the output exactly
    pieces_per_frame, hop_pieces = frame_len // piece, hop // piece
    out_pieces = (hop * (n_frames - 1) + frame_len) // piece
    where = torch.arange(0, out_pieces).unfold(0, pieces_per_frame, hop_pieces)
    where = frames.new_tensor(where).long().contiguous().view(-1)
    out = frames.new_zeros(*lead, out_pieces, piece)
    out.index_add_(-2, where, frames.view(*lead, -1, piece))
    return out.view(*lead, -1)


class GlobalNorm(nn.Module):  # gLN: statistics over channels and time
    def __init__(self, channels):
        super().__init__()
        self.gamma = nn.Parameter(torch.Tensor(1, channels, 1))
        self.beta = nn.Parameter(torch.Tensor(1, channels, 1))
        self.gamma.data.fill_(1)
        self.beta.data.zero_()

    def forward(self, y):
        mean = y.mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)
        var = torch.pow(y - mean, 2).mean(dim=1, keepdim=True).mean(dim=2, keepdim=True)
        return self.gamma * (y - mean) / torch.pow(var + EPS, 0.5) + self.beta


class ChannelNorm(GlobalNorm):  # cLN: statistics over channels, per time step
    def forward(self, y):
        mean = torch.mean(y, dim=1, keepdim=True)
        var = torch.var(y, dim=1, keepdim=True, unbiased=False)
        return self.gamma * (y - mean) / torch.pow(var + EPS, 0.5) + self.beta


def make_norm(kind, channels):
    return {"gLN": GlobalNorm, "cLN": ChannelNorm}.get(kind, nn.BatchNorm1d)(channels)


class TrimRight(nn.Module):  # drop the right padding of a causal convolution
    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return x[:, :, : -self.n].contiguous()


def conv_block(bottleneck, hidden, kernel, dilation, norm, causal):
    pad = (kernel - 1) * dilation if causal else (kernel - 1) * dilation // 2
    depthwise = [
        nn.Conv1d(
            hidden,
            hidden,
            kernel,
            stride=1,
            padding=pad,
            dilation=dilation,
            groups=hidden,
            bias=False,
        )
    ]
    if causal:
        depthwise.append(TrimRight(pad))
    return nn.Sequential(
        nn.Conv1d(bottleneck, hidden, 1, bias=False),
        nn.PReLU(),
        make_norm(norm, hidden),
        *depthwise,
        nn.PReLU(),
        make_norm(norm, hidden),
        nn.Conv1d(hidden, bottleneck, 1, bias=False),
    )


class Residual(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body = body

    def forward(self, x):
        return x + self.body(x)


class TasNet(nn.Module):
    def __init__(
        self,
        filters,
        win,
        bottleneck,
        hidden,
        kernel,
        blocks,
        repeats,
        speakers,
        norm="gLN",
        causal=False,
        mask="relu",
    ):
        super().__init__()
        self.win, self.speakers, self.mask = win, speakers, mask
        self.encode = nn.Conv1d(1, filters, kernel_size=win, stride=win // 2, bias=False)
        tcn = [
            Residual(conv_block(bottleneck, hidden, kernel, 2**b, norm, causal))
            for _ in range(repeats)
            for b in range(blocks)
        ]
        self.separate = nn.Sequential(
            ChannelNorm(filters),
            nn.Conv1d(filters, bottleneck, 1, bias=False),
            *tcn,
            nn.Conv1d(bottleneck, speakers * filters, 1, bias=False),
        )
        self.decode = nn.Linear(filters, win, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_normal_(p)

    def forward(self, mix):
        w = F.relu(self.encode(torch.unsqueeze(mix, 1)))  # [M, N, K]
        m, n, k = w.size()
        score = self.separate(w).view(m, self.speakers, n, k)
        masks = F.softmax(score, dim=1) if self.mask == "softmax" else F.relu(score)
        frames = self.decode(torch.transpose(torch.unsqueeze(w, 1) * masks, 2, 3))
        est = overlap_add(frames, self.win // 2)
        return F.pad(est, (0, mix.size(-1) - est.size(-1)))


def si_snr_pit(ref, est, lengths):
    # scale-invariant SNR of the best speaker permutation, padding masked out
    b, c, t = ref.size()
    keep = ref.new_ones((b, 1, t))
    for i in range(b):
        keep[i, :, lengths[i] :] = 0
    est *= keep
    count = lengths.view(-1, 1, 1).float()
    ref0 = (ref - torch.sum(ref, dim=2, keepdim=True) / count) * keep
    est0 = est - torch.sum(est, dim=2, keepdim=True) / count
    est0 *= keep
    r, e = torch.unsqueeze(ref0, dim=1), torch.unsqueeze(est0, dim=2)  # [B, 1, C, T], [B, C, 1, T]
    proj = torch.sum(e * r, dim=3, keepdim=True) * r / (torch.sum(r**2, dim=3, keepdim=True) + EPS)
    ratio = torch.sum(proj**2, dim=3) / (torch.sum((e - proj) ** 2, dim=3) + EPS)
    pair = 10 * torch.log10(ratio + EPS)  # [B, C, C]
    perms = ref.new_tensor(list(itertools.permutations(range(c))), dtype=torch.long)
    one_hot = ref.new_zeros((*perms.size(), c)).scatter_(2, torch.unsqueeze(perms, 2), 1)
    per_perm = torch.einsum("bij,pij->bp", [pair, one_hot])
    best_idx = torch.argmax(per_perm, dim=1)
    best, _ = torch.max(per_perm, dim=1, keepdim=True)
    best /= c
    return best, perms, best_idx


def reorder(est, perms, best_idx):
    chosen = torch.index_select(perms, dim=0, index=best_idx)
    out = torch.zeros_like(est)
    for i in range(est.size(0)):
        for j in range(est.size(1)):
            out[i, j] = est[i, chosen[i][j]]
    return out


n = 120
lengths = [120, 100, 92]
t = np.arange(n) / 8000.0
clean = np.zeros((3, 2, n), dtype=np.float32)
for i, valid in enumerate(lengths):
    clean[i, 0, :valid] = np.sin(2 * np.pi * (250 + 120 * i) * t[:valid])
    clean[i, 1, :valid] = 0.4 * np.sign(np.sin(2 * np.pi * (650 - 40 * i) * t[:valid]))
for norm, causal, mask in (("gLN", False, "relu"), ("cLN", True, "softmax"), ("BN", False, "relu")):
    model = TasNet(12, 8, 6, 10, 3, 2, 2, 2, norm=norm, causal=causal, mask=mask)
    model.double()
    initialize(model)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.0)
    model.train()
    for step in range(3):
        ref = torch.tensor(clean, dtype=torch.float64)
        mix = ref.sum(dim=1)
        est = model(mix)
        snr, perms, best_idx = si_snr_pit(ref, est, torch.tensor(lengths))
        loss = 0 - torch.mean(snr)
        adam.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5)
        adam.step()
        record.extend(
            [
                [loss.item()],
                snr.detach().numpy().copy(),
                reorder(est, perms, best_idx).detach().numpy().copy(),
            ]
        )
    record.append(params_of(model.encode, model.separate, model.decode))
    model.eval()
    with torch.no_grad():
        record.append(model(mix).numpy().copy())
"""

DEMUCS_SOURCE = r"""import functools
import math
import torch as th
from torch import nn


def remember_args(init):
    # keep the constructor's arguments, so that a checkpoint can rebuild the model
    @functools.wraps(init)
    def wrapped(self, *args, **kwargs):
        self._init_args_kwargs = args, kwargs
        init(self, *args, **kwargs)

    return wrapped


def trim_to(x, reference):
    # centre-crop the last axis to `reference`'s length (an odd surplus goes on the right)
    target = reference.size(-1) if hasattr(reference, "size") else reference
    extra = x.size(-1) - target
    if extra < 0:
        raise ValueError(f"cannot trim {x.size(-1)} samples to {target}")
    return x[..., extra // 2 : -(extra - extra // 2)] if extra else x


class TimeBLSTM(nn.Module):
    def __init__(self, width, depth=1):
        super().__init__()
        self.rnn = nn.LSTM(
            input_size=width, hidden_size=width, num_layers=depth, bidirectional=True
        )
        self.merge = nn.Linear(2 * width, width)

    def forward(self, x):  # (batch, channels, time) <-> (time, batch, channels)
        return self.merge(self.rnn(x.permute(2, 0, 1))[0]).permute(1, 2, 0)


def shrink_init(model, reference):
    # divide every conv's initial weights by sqrt(std / reference): calmer early training
    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
            factor = (m.weight.std().detach() / reference) ** 0.5
            m.weight.data /= factor
            if m.bias is not None:
                m.bias.data /= factor


class WaveUNet(nn.Module):
    @remember_args
    def __init__(
        self,
        sources,
        audio_channels=2,
        channels=4,
        depth=2,
        kernel=8,
        stride=4,
        context=3,
        growth=2.0,
        lstm_layers=1,
        rescale=0.1,
        normalize=False,
    ):
        super().__init__()
        self.sources, self.audio_channels = sources, audio_channels
        self.kernel, self.stride, self.context, self.depth = kernel, stride, context, depth
        self.normalize = normalize
        self.encoder, self.decoder = nn.ModuleList(), nn.ModuleList()
        c_in = audio_channels
        for level in range(depth):
            self.encoder.append(
                nn.Sequential(
                    nn.Conv1d(c_in, channels, kernel, stride),
                    nn.ReLU(),
                    nn.Conv1d(channels, 2 * channels, 1),
                    nn.GLU(dim=1),
                )
            )
            c_out = c_in if level > 0 else len(sources) * audio_channels
            up = [
                nn.Conv1d(channels, 2 * channels, context),
                nn.GLU(dim=1),
                nn.ConvTranspose1d(channels, c_out, kernel, stride),
            ]
            if level > 0:
                up.append(nn.ReLU())
            self.decoder.insert(0, nn.Sequential(*up))  # the deepest decoder runs first
            c_in, channels = channels, int(growth * channels)
        self.lstm = TimeBLSTM(c_in, lstm_layers) if lstm_layers else None
        if rescale:
            shrink_init(self, rescale)

    def valid_length(self, n):
        # the input length that leaves no sample over in any strided convolution
        for _ in range(self.depth):
            n = max(1, math.ceil((n - self.kernel) / self.stride) + 1) + self.context - 1
        for _ in range(self.depth):
            n = (n - 1) * self.stride + self.kernel
        return int(n)

    def forward(self, mix):
        mean, std = 0, 1
        if self.normalize:
            mono = mix.mean(1, keepdim=True)
            mean, std = mono.mean(-1, keepdim=True), mono.std(-1, keepdim=True)
        x = (mix - mean) / (1e-5 + std)
        skips = []
        for down in self.encoder:
            x = down(x)
            skips.append(x)
        if self.lstm:
            x = self.lstm(x)
        for up in self.decoder:
            x = up(x + trim_to(skips.pop(-1), x))
        x = x * std + mean
        return x.view(x.size(0), len(self.sources), self.audio_channels, x.size(-1))


class RandomShift(nn.Module):
    def __init__(self, shift):
        super().__init__()
        self.shift = shift

    def forward(self, wav):
        b, s, c, t = wav.size()
        keep = t - self.shift
        if not self.training:
            return wav[..., :keep]
        start = th.randint(self.shift, [b, s, 1, 1], device=wav.device).expand(-1, -1, c, -1)
        return wav.gather(3, th.arange(keep, device=wav.device) + start)


class SwapChannels(nn.Module):
    def forward(self, wav):
        b, s, c, t = wav.size()
        if not (self.training and c == 2):
            return wav
        first = th.randint(2, (b, s, 1, 1), device=wav.device).expand(-1, -1, -1, t)
        return th.cat([wav.gather(2, first), wav.gather(2, 1 - first)], dim=2)


class RandomSign(nn.Module):
    def forward(self, wav):
        b, s = wav.size()[:2]
        if self.training:
            sign = th.randint(2, (b, s, 1, 1), device=wav.device, dtype=th.float32)
            wav = wav * (2 * sign - 1)
        return wav


class ShuffleStems(nn.Module):
    # new mixtures: each source slot draws its stem from another track of the same group
    def __init__(self, group=4):
        super().__init__()
        self.group = group

    def forward(self, wav):
        b, s, c, t = wav.size()
        if not self.training:
            return wav
        g = self.group or b
        if b % g != 0:
            raise ValueError(f"a batch of {b} does not split into groups of {g}")
        wav = wav.view(b // g, g, s, c, t)
        order = th.argsort(th.rand(b // g, g, s, 1, 1, device=wav.device), dim=1)
        return wav.gather(1, order.expand(-1, -1, -1, c, t)).view(b, s, c, t)


names = ["drums", "bass", "other", "vocals"]
model = WaveUNet(names, audio_channels=2, channels=4, depth=2, lstm_layers=1)
initialize(model)
args, kwargs = model._init_args_kwargs
record.append(list(args))
n = model.valid_length(200)
shift = 16
augment = nn.Sequential(RandomSign(), SwapChannels(), RandomShift(shift), ShuffleStems(group=2))
l1 = nn.L1Loss()
opt = th.optim.Adam(model.parameters(), lr=3e-4)
batches = np.random.default_rng(8).standard_normal((3, 4, 5, 2, n + shift)).astype(np.float32) * 0.3
model.train()
augment.train()
for batch in batches:
    stems = augment(th.from_numpy(batch)[:, 1:])  # (the first slot: the mixture, unused)
    estimate = model(stems.sum(dim=1))
    loss = l1(estimate, trim_to(stems, estimate))
    loss.backward()
    total = 0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.data.norm() ** 2
    opt.step()
    opt.zero_grad()
    record.append([loss.item(), (total**0.5).item()])
record.append(params_of(model))  # after the three steps
model.eval()
with th.no_grad():
    record.append(model(th.from_numpy(batches[0, :, 0])).numpy().copy())
"""

FRONT_END_SOURCE = r"""import math
import warnings
from typing import Optional, Union

import torch
from torch import Tensor, nn

# A speech front end written in the style of torchaudio: functionals first, thin modules over
# them, then a small keyword spotter trained on synthetic tones.


def _norm_flags(normalized: Union[str, bool]):
    # (divide the STFT by sqrt(n_fft), divide the spectrum by the window's energy)
    if torch.jit.isinstance(normalized, bool):
        return False, bool(normalized)
    if torch.jit.isinstance(normalized, str) and normalized in ("frame_length", "window"):
        return normalized == "frame_length", normalized == "window"
    raise ValueError(f"unsupported normalization {normalized!r}")


def stft_power(
    audio: Tensor,
    window: Tensor,
    n_fft: int,
    hop: int,
    win_length: int,
    power: Optional[float] = 2.0,
    normalized: Union[str, bool] = False,
    pad: int = 0,
    center: bool = True,
    pad_mode: str = "reflect",
) -> Tensor:
    if pad:
        audio = torch.nn.functional.pad(audio, (pad, pad), "constant")
    by_frame, by_window = _norm_flags(normalized)
    lead = audio.size()
    flat = audio.reshape(-1, lead[-1])  # any leading dims become one batch for torch.stft
    z = torch.stft(
        input=flat,
        n_fft=n_fft,
        hop_length=hop,
        win_length=win_length,
        window=window,
        center=center,
        pad_mode=pad_mode,
        normalized=by_frame,
        onesided=True,
        return_complex=True,
    )
    z = z.reshape(lead[:-1] + z.shape[-2:])
    if by_window:
        z /= window.pow(2.0).sum().sqrt()
    if power is None:
        return z
    mag = z.abs()
    return mag if power == 1.0 else mag.pow(power)


# mel scales: HTK's log curve, or Slaney's (linear to 1 kHz, logarithmic above)
SLANEY_STEP_HZ = 200.0 / 3
SLANEY_KNEE_HZ = 1000.0
SLANEY_LOG_STEP = math.log(6.4) / 27.0


def hz_to_mel(hz: float, scale: str = "htk") -> float:
    if scale == "htk":
        return 2595.0 * math.log10(1.0 + hz / 700.0)
    if hz < SLANEY_KNEE_HZ:
        return hz / SLANEY_STEP_HZ
    return SLANEY_KNEE_HZ / SLANEY_STEP_HZ + math.log(hz / SLANEY_KNEE_HZ) / SLANEY_LOG_STEP


def mel_to_hz(mel: Tensor, scale: str = "htk") -> Tensor:
    if scale == "htk":
        return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)
    hz = SLANEY_STEP_HZ * mel
    knee = SLANEY_KNEE_HZ / SLANEY_STEP_HZ
    upper = mel >= knee  # the logarithmic part, overwritten through a boolean mask
    hz[upper] = SLANEY_KNEE_HZ * torch.exp(SLANEY_LOG_STEP * (mel[upper] - knee))
    return hz


def mel_filterbank(
    n_bins: int,
    lo: float,
    hi: float,
    n_mels: int,
    rate: int,
    norm: Optional[str] = None,
    scale: str = "htk",
) -> Tensor:
    bin_hz = torch.linspace(0, rate // 2, n_bins)
    edges = mel_to_hz(torch.linspace(hz_to_mel(lo, scale), hz_to_mel(hi, scale), n_mels + 2), scale)
    width = edges[1:] - edges[:-1]
    dist = edges.unsqueeze(0) - bin_hz.unsqueeze(1)  # [bin, edge]
    rising = -dist[:, :-2] / width[:-1]
    falling = dist[:, 2:] / width[1:]
    bank = torch.max(torch.zeros(1), torch.min(rising, falling))
    if norm == "slaney":  # equal area per filter
        bank *= (2.0 / (edges[2:] - edges[:-2])).unsqueeze(0)
    if (bank.max(dim=0).values == 0.0).any():
        warnings.warn("a mel filter is empty: fewer mels or a longer FFT")
    return bank


def dct_matrix(n_out: int, n_in: int, norm: Optional[str] = "ortho") -> Tensor:
    grid = torch.arange(float(n_in))
    order = torch.arange(float(n_out)).unsqueeze(1)
    basis = torch.cos(math.pi / float(n_in) * (grid + 0.5) * order)  # [n_out, n_in]
    if norm == "ortho":
        basis[0] *= 1.0 / math.sqrt(2.0)
        basis *= math.sqrt(2.0 / float(n_in))
    else:
        basis *= 2.0
    return basis.t()


def to_decibels(
    x: Tensor, scale: float, floor: float, ref_db: float, top_db: Optional[float] = None
) -> Tensor:
    db = scale * torch.log10(torch.clamp(x, min=floor))
    db -= scale * ref_db
    if top_db is None:
        return db
    shape = db.size()
    per_item = db.reshape(-1, shape[-3] if db.dim() > 2 else 1, shape[-2], shape[-1])
    ceiling = per_item.amax(dim=(-3, -2, -1)) - top_db  # clip each item to top_db below its peak
    return torch.max(per_item, ceiling.view(-1, 1, 1, 1)).reshape(shape)


def deltas(feats: Tensor, width: int = 5, mode: str = "replicate") -> Tensor:
    half = (width - 1) // 2
    shape = feats.size()
    rows = torch.nn.functional.pad(feats.reshape(1, -1, shape[-1]), (half, half), mode=mode)
    taps = torch.arange(-half, half + 1, 1, device=feats.device, dtype=feats.dtype)
    taps = taps.repeat(rows.shape[1], 1, 1)  # one slope filter per row
    norm = 2 * sum(i * i for i in range(1, half + 1))
    return (torch.nn.functional.conv1d(rows, taps, groups=rows.shape[1]) / norm).reshape(shape)


def random_band_mask(
    spec: Tensor, widest: int, axis: int, fill: float = 0.0, p: float = 1.0
) -> Tensor:
    # SpecAugment: every (item, channel) gets its own band [start, start + width) on `axis`
    nd = spec.dim()
    length = spec.size(axis)
    if p < 1.0:
        widest = min(widest, int(length * p))
    if widest < 1:
        return spec
    width = torch.rand(spec.shape[: nd - 2], device=spec.device, dtype=spec.dtype) * widest
    start = torch.rand(spec.shape[: nd - 2], device=spec.device, dtype=spec.dtype) * (
        length - width
    )
    lo = start.long()[..., None, None]
    hi = (start.long() + width.long())[..., None, None]
    pos = torch.arange(0, length, device=spec.device, dtype=spec.dtype)
    moved = spec.transpose(axis, -1)
    moved = moved.masked_fill((pos >= lo) & (pos < hi), fill)
    return moved.transpose(axis, -1)


class Spectrogram(nn.Module):
    def __init__(
        self,
        n_fft=400,
        win_length=None,
        hop_length=None,
        pad=0,
        window_fn=torch.hann_window,
        power=2.0,
        normalized=False,
        wkwargs=None,
    ):
        super().__init__()
        torch._C._log_api_usage_once("frontend.Spectrogram")
        self.n_fft, self.pad, self.power, self.normalized = n_fft, pad, power, normalized
        self.win_length = win_length or n_fft
        self.hop_length = hop_length or self.win_length // 2
        self.register_buffer("window", window_fn(self.win_length, **(wkwargs or {})))

    def forward(self, audio):
        return stft_power(
            audio,
            self.window,
            self.n_fft,
            self.hop_length,
            self.win_length,
            self.power,
            self.normalized,
            self.pad,
        )


class MelSpectrogram(nn.Module):
    def __init__(
        self,
        sample_rate=16000,
        n_fft=400,
        n_mels=128,
        f_min=0.0,
        f_max=None,
        norm=None,
        mel_scale="htk",
        **stft_kwargs,
    ):
        super().__init__()
        torch._C._log_api_usage_once("frontend.MelSpectrogram")
        self.n_mels = n_mels
        self.stft = Spectrogram(n_fft=n_fft, **stft_kwargs)
        bank = mel_filterbank(
            n_fft // 2 + 1,
            f_min,
            f_max or float(sample_rate // 2),
            n_mels,
            sample_rate,
            norm,
            mel_scale,
        )
        self.register_buffer("fb", bank)

    def forward(self, audio):
        power = self.stft(audio)  # [..., freq, time]
        return torch.matmul(power.transpose(-1, -2), self.fb).transpose(-1, -2)


class MFCC(nn.Module):
    def __init__(self, sample_rate=16000, n_mfcc=40, log_mels=False, top_db=80.0, melkwargs=None):
        super().__init__()
        self.mel = MelSpectrogram(sample_rate=sample_rate, **(melkwargs or {}))
        self.log_mels, self.top_db = log_mels, top_db
        self.register_buffer("dct_mat", dct_matrix(n_mfcc, self.mel.n_mels, "ortho"))

    def forward(self, audio):
        mel = self.mel(audio)
        if self.log_mels:
            mel = torch.log(mel + 1e-6)
        else:
            mel = to_decibels(mel, 10.0, 1e-10, math.log10(1.0), self.top_db)
        return torch.matmul(mel.transpose(-1, -2), self.dct_mat).transpose(-1, -2)


class BandMask(nn.Module):
    def __init__(
        self, widest, axis, p=1.0
    ):  # axis 1: frequency, 2: time (of [channel, freq, time])
        super().__init__()
        self.widest, self.axis, self.p = widest, axis, p

    def forward(self, spec):
        return random_band_mask(spec, self.widest, self.axis + spec.dim() - 3, p=self.p)


class Spotter(nn.Module):
    def __init__(self, n_mfcc=10, n_words=3):
        super().__init__()
        mel = {
            "n_fft": 64,
            "hop_length": 32,
            "n_mels": 16,
            "f_min": 20.0,
            "mel_scale": "slaney",
            "norm": "slaney",
        }
        self.mfcc = MFCC(sample_rate=8000, n_mfcc=n_mfcc, melkwargs=mel)
        self.specaug = torch.nn.Sequential(BandMask(3, 1), BandMask(5, 2, p=0.5))
        self.conv = torch.nn.Conv1d(2 * n_mfcc, 12, 3, padding=1)
        self.out = torch.nn.Linear(12, n_words)

    def forward(self, audio):
        x = self.mfcc(audio)  # [batch, 1, n_mfcc, frames]
        if self.training:
            x = self.specaug(x)
        x = torch.cat([x, deltas(x)], dim=2).squeeze(1)
        x = (x - x.mean(dim=-1, keepdim=True)) / (x.std(dim=-1, keepdim=True) + 1e-5)
        return self.out(torch.relu(self.conv(x)).mean(dim=-1))


torch.set_default_dtype(torch.double)  # dB and per-utterance norms: float64
rate, n = 8000, 2048
ts = np.arange(n) / rate
tones = np.stack(
    [(0.4 + 0.15 * k) * np.sin(2 * np.pi * (250 + 450 * (k % 3)) * ts + k) for k in range(6)]
)
audio = torch.tensor(tones[:, None])
words = torch.tensor([k % 3 for k in range(6)])

z = Spectrogram(n_fft=64, hop_length=16, normalized="window", power=None)(audio[:2])
record.append(z.abs().numpy().copy())
hamming = MelSpectrogram(
    sample_rate=rate,
    n_fft=64,
    n_mels=8,
    pad=8,
    window_fn=torch.hamming_window,
    wkwargs={"periodic": False},
)
record.append(hamming(audio[:2]).numpy().copy())
record.append(
    mel_filterbank(33, 0.0, 4000.0, 10, rate, norm="slaney", scale="slaney").numpy().copy()
)
record.append(
    MFCC(sample_rate=rate, n_mfcc=6, log_mels=True, melkwargs={"n_fft": 64, "n_mels": 12})(
        audio[:2]
    )
    .numpy()
    .copy()
)

net = Spotter()
initialize(net)
adam = torch.optim.Adam(net.parameters(), lr=1e-2)
net.train()
for step in range(3):
    loss = torch.nn.functional.cross_entropy(net(audio), words)
    adam.zero_grad()
    loss.backward()
    adam.step()
    record.append([loss.item()])
record.append(params_of(net))

# which way to nudge the audio to raise the loss: the gradient back through the STFT
net.eval()
probe = torch.tensor(tones[:, None]).requires_grad_()
loss = torch.nn.functional.cross_entropy(net(probe), words)
loss.backward()
record.append(probe.grad.numpy().copy())
torch.set_default_dtype(torch.float)
"""


SRU_SOURCE = r"""import math
import warnings
import torch
import torch.nn as nn


def sru_recurrence(
    u, x, weight_c, bias, c0, use_tanh, d, bidirectional, skip, scale_x, mask_c=None, mask_pad=None
):
    # the SRU's cell state and output, one time step at a time (no compiled kernel here)
    warnings.warn("C++ kernel for SRU CPU inference is not available: the Python loop runs")
    dirs = 2 if bidirectional else 1
    steps = x.size(0) if x.dim() == 3 else 1
    batch = x.size(-2)
    k = u.size(-1) // d // dirs
    pad = mask_pad.view(steps, batch, 1).float() if mask_pad is not None else None
    u = u.contiguous().view(steps, batch, dirs, d, k)
    w_forget, w_reset = weight_c.view(2, dirs, d)
    b_forget, b_reset = bias.view(2, dirs, d)
    if not skip:
        highway = None
    elif k == 3:  # the input itself, rescaled
        highway = x.view(steps, batch, dirs, d)
        highway = highway * scale_x if scale_x is not None else highway
    else:  # a fourth projection, when the widths differ
        highway = u[..., 3]
    h = x.new_zeros(steps, batch, dirs, d)
    c_start = x.new_zeros(size=(batch, dirs, d)) if c0 is None else c0.view(batch, dirs, d)
    finals = []
    for di in range(dirs):
        order = range(steps) if di == 0 else range(steps - 1, -1, -1)
        keep = 1 if mask_c is None else mask_c.view(batch, dirs, d)[:, di, :]
        c = c_start[:, di, :]
        cand = u[:, :, di, :, 0].chunk(steps)
        f_in = (u[:, :, di, :, 1] + b_forget[di]).chunk(steps)
        r_in = (u[:, :, di, :, 2] + b_reset[di]).chunk(steps)
        wf, wr = w_forget[di].expand(batch, d), w_reset[di].expand(batch, d)
        hw = highway[:, :, di, :].chunk(steps) if highway is not None else None
        for t in order:
            f = (f_in[t] + c * wf).sigmoid()
            r = (r_in[t] + c * wr).sigmoid()
            c_next = cand[t] + (c - cand[t]) * f
            if pad is not None:  # a padded step keeps the previous state
                c_next = c_next * (1 - pad[t]) + c * pad[t]
            c = c_next
            g = c.tanh() if use_tanh else c
            out = hw[t] + (g - hw[t]) * keep * r if hw is not None else g * keep * r
            if pad is not None:
                out = out * (1 - pad[t])
            h[t, :, di, :] = out
        finals.append(c.view(batch, d))
    return h.view(steps, batch, -1), torch.stack(finals, dim=1).view(batch, -1)


class SRUCell(nn.Module):
    def __init__(
        self,
        n_in,
        hidden,
        dropout=0.0,
        rnn_dropout=0.0,
        bidirectional=False,
        n_proj=0,
        use_tanh=False,
        highway_bias=0.0,
        skip=True,
        layer_norm=False,
        rescale=True,
    ):
        super().__init__()
        self.n_in, self.hidden = n_in, hidden
        self.n_out = 2 * hidden if bidirectional else hidden
        self.dropout, self.rnn_dropout, self.bidirectional = dropout, rnn_dropout, bidirectional
        self.skip, self.highway_bias, self.rescale, self.use_tanh = (
            skip,
            highway_bias,
            rescale,
            use_tanh,
        )
        self.n_proj = n_proj if 0 < n_proj < min(n_in, self.n_out) else 0
        self.n_mat = 4 if skip and n_in != self.n_out else 3
        if self.n_proj:
            self.weight_proj = nn.Parameter(torch.Tensor(n_in, self.n_proj))
        self.weight = nn.Parameter(torch.Tensor(self.n_proj or n_in, self.n_out * self.n_mat))
        self.weight_c = nn.Parameter(torch.Tensor(2 * self.n_out))
        self.bias = nn.Parameter(torch.Tensor(2 * self.n_out))
        self.register_buffer("scale_x", torch.FloatTensor([0]))
        self.layer_norm = nn.LayerNorm(n_in) if layer_norm else None
        self.reset_parameters()

    def reset_parameters(self):
        self.bias.data.zero_()
        self.bias.data[self.n_out :].zero_().add_(self.highway_bias)  # the reset gates' bias
        highway_scale = (1 + math.exp(self.highway_bias) * 2) ** 0.5
        self.scale_x.data[0] = highway_scale if self.rescale and self.skip else 1
        rows = self.weight.size(0)
        self.weight.data.uniform_(-((3.0 / rows) ** 0.5), (3.0 / rows) ** 0.5)
        if self.n_proj:
            edge = (3.0 / self.weight_proj.size(0)) ** 0.5
            self.weight_proj.data.uniform_(-edge, edge)
        w = self.weight.data.view(rows, -1, self.hidden, self.n_mat)  # scaled in place, by views
        if self.dropout > 0:
            w[:, :, :, 0].mul_((1 - self.dropout) ** 0.5)
        if self.rnn_dropout > 0:
            w.mul_((1 - self.rnn_dropout) ** 0.5)
        if self.layer_norm:
            w.mul_(0.1)
        if self.rescale and self.skip and self.n_mat == 4:
            w[:, :, :, 3].mul_(highway_scale)
        self.weight_c.data.uniform_(-(3.0**0.5), 3.0**0.5)
        w[:, :, :, 1].mul_(0.5**0.5)
        w[:, :, :, 2].mul_(0.5**0.5)
        self.weight_c.data.mul_(math.sqrt(0.5))

    def dropout_mask(self, size, p):
        return self.bias.data.new(*size).bernoulli_(1 - p).div_(1 - p)

    def forward(self, x, c0=None, mask_pad=None):
        if x.dim() not in (2, 3):
            raise ValueError("the input must be 2- or 3-dimensional")
        batch = x.size(-2)
        if c0 is None:
            c0 = x.new_zeros(batch, self.n_out)
        residual = x
        if self.layer_norm:
            x = self.layer_norm(x)
        if self.training and self.rnn_dropout > 0:
            x = x * self.dropout_mask((batch, x.size(-1)), self.rnn_dropout).expand_as(x)
        flat = x if x.dim() == 2 else x.contiguous().view(-1, self.n_in)
        u = flat.mm(self.weight_proj).mm(self.weight) if self.n_proj else flat.mm(self.weight)
        mask_c = None
        if self.training and self.dropout > 0:
            mask_c = self.dropout_mask((batch, self.n_out), self.dropout)
        return sru_recurrence(
            u,
            residual,
            self.weight_c,
            self.bias,
            c0,
            self.use_tanh,
            self.hidden,
            self.bidirectional,
            self.skip,
            self.scale_x if self.rescale else None,
            mask_c,
            mask_pad,
        )

    def extra_repr(self):
        parts = ["{n_in}, {hidden}"]
        if self.n_proj:
            parts.append("n_proj={n_proj}")
        if self.bidirectional:
            parts.append("bidirectional=True")
        if self.highway_bias:
            parts.append("highway_bias={highway_bias}")
        parts.append("rescale={rescale}")
        if self.layer_norm:
            parts.append("layer_norm=True")
        return ", ".join(parts).format(**vars(self))

    def __repr__(self):
        return "{}({})".format(type(self).__name__, self.extra_repr())


class SRU(nn.Module):
    def __init__(
        self,
        n_in,
        hidden,
        num_layers=2,
        dropout=0.0,
        rnn_dropout=0.0,
        bidirectional=False,
        projection_size=0,
        use_tanh=False,
        layer_norm=False,
        highway_bias=0.0,
        rescale=False,
        nn_rnn_compatible_return=False,
    ):
        super().__init__()
        self.hidden, self.num_layers = hidden, num_layers
        self.dirs = 2 if bidirectional else 1
        self.n_out = hidden * self.dirs
        self.compat = nn_rnn_compatible_return
        self.rnn_lst = nn.ModuleList(
            [
                SRUCell(
                    n_in if i == 0 else self.n_out,
                    hidden,
                    dropout=dropout if i + 1 < num_layers else 0.0,
                    rnn_dropout=rnn_dropout,
                    bidirectional=bidirectional,
                    n_proj=projection_size,
                    use_tanh=use_tanh,
                    highway_bias=highway_bias,
                    layer_norm=layer_norm,
                    rescale=rescale,
                )
                for i in range(num_layers)
            ]
        )

    def forward(self, x, c0=None, mask_pad=None):
        packed = isinstance(x, nn.utils.rnn.PackedSequence)
        if packed:
            x, lengths = nn.utils.rnn.pad_packed_sequence(x)
            longest = lengths.max().item()
            rows = [[0] * n + [1] * (longest - n) for n in lengths.tolist()]
            mask_pad = torch.ByteTensor(rows).to(x.device).transpose(0, 1).contiguous()
        if x.dim() != 3:
            raise ValueError("expected (length, batch, features)")
        if c0 is None:
            starts = [x.data.new(x.size(1), self.n_out).zero_()] * self.num_layers
        else:
            starts = [s.squeeze(0) for s in c0.chunk(self.num_layers, 0)]
        finals = []
        for layer, start in zip(self.rnn_lst, starts):
            x, c = layer(x, start, mask_pad=mask_pad)
            finals.append(c)
        if packed:
            x = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
        state = torch.stack(finals)
        if self.compat:  # (layers * directions, batch, hidden), as nn.LSTM lays its state out
            b = state.size(1)
            state = (
                state.view(self.num_layers, b, self.dirs, self.hidden).transpose(1, 2).contiguous()
            )
            state = state.view(self.num_layers * self.dirs, b, self.hidden)
        return x, state


class CharLM(nn.Module):
    def __init__(self, vocab, width, depth, dropout, highway_bias):
        super().__init__()
        self.width, self.depth = width, depth
        self.dropout = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab, width)
        self.rnn = SRU(
            width,
            width,
            depth,
            dropout=dropout,
            highway_bias=highway_bias,
            rescale=True,
            layer_norm=True,
        )
        self.out = nn.Linear(width, vocab)
        self.out.weight = self.embed.weight  # tied
        for p in list(self.embed.parameters()) + list(self.out.parameters()):
            if p.dim() > 1:
                edge = (3.0 / p.size(0)) ** 0.5
                p.data.uniform_(-edge, edge)
            else:
                p.data.zero_()

    def forward(self, ids, state):
        h, state = self.rnn(self.dropout(self.embed(ids)), state)
        h = self.dropout(h)
        return self.out(h.view(-1, h.size(2))), state

    def zero_state(self, batch):
        return next(self.parameters()).data.new(self.depth, batch, self.width).zero_()


corpus = "pack my box with five dozen liquor jugs " * 3
chars = sorted(set(corpus))
ids = torch.LongTensor([chars.index(ch) for ch in corpus])
bptt, streams = 6, 4
ids = ids[: (ids.size(0) // streams) * streams].view(streams, -1).t().contiguous()
model = CharLM(len(chars), 12, 2, dropout=0.0, highway_bias=-2.0)
initialize(model)
first = model.rnn.rnn_lst[0]
record.extend([[repr(first)], first.scale_x.numpy().copy()])
record.append([sum(1 for _ in model.parameters()), len(model.state_dict())])
plain = ["bias", "weight_c", "layer_norm"]
named = list(model.named_parameters())
opt = torch.optim.AdamW(
    [
        {"params": [p for n, p in named if not any(k in n for k in plain)], "weight_decay": 0.01},
        {"params": [p for n, p in named if any(k in n for k in plain)], "weight_decay": 0.0},
    ],
    lr=3e-3,
)
ce = nn.CrossEntropyLoss(reduction="sum")
state = model.zero_state(streams)
model.train()
for start in range(0, 3 * bptt, bptt):
    x, y = ids[start : start + bptt], ids[start + 1 : start + 1 + bptt].view(-1)
    state = state.detach()  # truncated backpropagation through time
    model.zero_grad()
    logits, state = model(x, state)
    loss = ce(logits, y) / x.size(1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)
    opt.step()
    record.append([loss.item()])
record.append(params_of(model.embed, model.rnn, model.out))

# a bidirectional projected SRU over a packed batch (padding masked), the nn.LSTM-style state,
# dropout only in the initial rescaling (eval mode)
encoder = SRU(
    5,
    4,
    num_layers=2,
    dropout=0.2,
    rnn_dropout=0.1,
    bidirectional=True,
    projection_size=3,
    use_tanh=True,
    nn_rnn_compatible_return=True,
)
initialize(encoder)
encoder.eval()
seqs = torch.tensor(
    np.random.default_rng(4).standard_normal((7, 3, 5)), dtype=torch.float32, requires_grad=True
)
out, state = encoder(
    nn.utils.rnn.pack_padded_sequence(seqs, torch.tensor([7, 5, 3]), enforce_sorted=False)
)
out, _ = nn.utils.rnn.pad_packed_sequence(out)
total = out.pow(2).sum() + state.sum()
total.backward()
record.extend(
    [out.detach().numpy().copy(), state.detach().numpy().copy(), seqs.grad.numpy().copy()]
)
record.append({name: w.grad.numpy().copy() for name, w in encoder.named_parameters()})
"""

LISTEN_ATTEND_SPELL_SOURCE = r"""import torch
import torch.nn as nn
from torch.nn.utils import rnn as rnn_utils

F = nn.functional

IGNORE = -1  # the target padding


def pad_rows(rows, value):
    longest = max(r.size(0) for r in rows)
    out = rows[0].new(len(rows), longest, *rows[0].size()[1:]).fill_(value)
    for i, r in enumerate(rows):
        out[i, : r.size(0)] = r
    return out


class Listener(nn.Module):
    def __init__(self, n_in, hidden, layers):
        super().__init__()
        self.rnn = nn.LSTM(n_in, hidden, layers, batch_first=True, dropout=0.0, bidirectional=False)

    def forward(self, feats, lengths):
        packed = rnn_utils.pack_padded_sequence(feats, lengths, batch_first=True)
        out, state = self.rnn(packed)
        out, _ = rnn_utils.pad_packed_sequence(out, batch_first=True, total_length=feats.size(1))
        return out, state


def attend(query, memory):
    # dot-product attention: query (N x 1 x H) over memory (N x T x H)
    n, steps = query.size(0), memory.size(1)
    weights = F.softmax(torch.bmm(query, memory.transpose(1, 2)).view(-1, steps), dim=1)
    weights = weights.view(n, -1, steps)
    return torch.bmm(weights, memory), weights


class Speller(nn.Module):
    def __init__(self, vocab, emb, hidden, layers, sos, eos):
        super().__init__()
        self.vocab, self.hidden, self.sos, self.eos = vocab, hidden, sos, eos
        self.embed = nn.Embedding(vocab, emb)
        self.cells = nn.ModuleList()
        self.cells += [nn.LSTMCell(emb + hidden, hidden)]
        for _ in range(1, layers):
            self.cells += [nn.LSTMCell(hidden, hidden)]
        self.out = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.Tanh(), nn.Linear(hidden, vocab))

    def blank_state(self, memory, size=None):
        return memory.new_zeros(memory.size(0), size or self.hidden)

    def step(self, token_emb, context, hs, cs, memory):
        x = torch.cat((token_emb, context), dim=1)
        hs, cs = list(hs), list(cs)
        for k, cell in enumerate(self.cells):
            hs[k], cs[k] = cell(x if k == 0 else hs[k - 1], (hs[k], cs[k]))
        context = attend(hs[-1].unsqueeze(dim=1), memory)[0].squeeze(dim=1)
        return self.out(torch.cat((hs[-1], context), dim=1)), context, hs, cs

    def forward(self, targets, memory):
        labels = [t[t != IGNORE] for t in targets]
        sos, eos = labels[0].new([self.sos]), labels[0].new([self.eos])
        fed = pad_rows([torch.cat([sos, y], dim=0) for y in labels], self.eos)
        wanted = pad_rows([torch.cat([y, eos], dim=0) for y in labels], IGNORE)
        hs = [self.blank_state(memory) for _ in self.cells]
        cs = [self.blank_state(memory) for _ in self.cells]
        context = self.blank_state(memory, memory.size(2))
        emb, logits = self.embed(fed), []
        for t in range(fed.size(1)):
            out, context, hs, cs = self.step(emb[:, t, :], context, hs, cs, memory)
            logits.append(out)
        logits = torch.stack(logits, dim=1).view(-1, self.vocab)
        # the pre-1.0 spelling of reduction='mean', still read (with a warning)
        return F.cross_entropy(
            logits, wanted.view(-1), ignore_index=IGNORE, reduction='elementwise_mean'
        )

    def beam_search(self, memory, chars, beam, nbest, max_len):
        memory = memory.unsqueeze(0)
        token = memory.new_zeros(1).long()
        start = {
            'score': 0.0,
            'seq': [self.sos],
            'h': [self.blank_state(memory) for _ in self.cells],
            'c': [self.blank_state(memory) for _ in self.cells],
            'ctx': self.blank_state(memory, memory.size(2)),
        }
        alive, ended = [start], []
        for i in range(max_len):
            grown = []
            for hyp in alive:
                token[0] = hyp['seq'][i]
                out, ctx, hs, cs = self.step(
                    self.embed(token), hyp['ctx'], hyp['h'], hyp['c'], memory
                )
                best, ids = torch.topk(F.log_softmax(out, dim=1), beam, dim=1)
                for j in range(beam):
                    # scores stay 0-d tensors: sorted by their values
                    grown.append(
                        {
                            'score': hyp['score'] + best[0, j],
                            'seq': hyp['seq'] + [int(ids[0, j])],
                            'h': hs[:],
                            'c': cs[:],
                            'ctx': ctx[:],
                        }
                    )
                grown = sorted(grown, key=lambda h: h['score'], reverse=True)[:beam]
            if i == max_len - 1:
                for hyp in grown:
                    hyp['seq'].append(self.eos)
            alive = [h for h in grown if h['seq'][-1] != self.eos]
            ended += [h for h in grown if h['seq'][-1] == self.eos]
            if not alive:
                print('all hypotheses ended')
                break
            print(
                'alive: ' + ', '.join(''.join(chars[int(c)] for c in h['seq'][1:]) for h in alive)
            )
        return sorted(ended, key=lambda h: h['score'], reverse=True)[: min(len(ended), nbest)]


chars = ["<sos>", "<eos>", "a", "b", "c", "d"]
rng = np.random.default_rng(12)
feats = torch.tensor(rng.standard_normal((3, 8, 6)), dtype=torch.float32)
lengths = torch.tensor([8, 6, 5])
targets = torch.tensor([[2, 3, 4, 5], [3, 3, 2, IGNORE], [5, 4, IGNORE, IGNORE]])
listener = Listener(6, 8, 2)
speller = Speller(len(chars), 5, 8, 2, sos=0, eos=1)
model = nn.ModuleDict({"listener": listener, "speller": speller})
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
model.train()
for step in range(3):
    loss = speller(targets, listener(feats, lengths)[0])
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5)
    if math.isnan(norm):
        print('NaN gradient norm: the step is skipped')
    else:
        opt.step()
    record.append([loss.item(), float(norm)])
record.append(params_of(listener, speller))
model.eval()
with torch.no_grad():
    for k in range(2):
        memory = listener(feats[k, : lengths[k]].unsqueeze(0), lengths[k : k + 1])[0][0]
        found = speller.beam_search(memory, chars, beam=3, nbest=2, max_len=4)
        record.append([[int(c) for c in h['seq']] for h in found])
        record.append([float(h['score']) for h in found])
"""


CONV_TASNET_STEPS = [
    IMPORTS[0],
    IMPORTS[1],
    (
        "        loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5)\n"
        "        adam.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=5)\n"
        "        adam.step(grads)\n",
    ),
]


def test_conv_tasnet_trains_with_si_snr_pit_as_torch(capsys):
    """gLN non-causal with ReLU masks, cLN causal (``Chomp1d``) with softmax masks, and batch
    norm, each three steps from torch's weights: losses, the best permutations' SI-SNRs, the
    reordered estimates, the parameters and the eval-mode separation agree."""
    (theirs, ours), _ = runs_with_draws(
        CONV_TASNET_SOURCE, CONV_TASNET_STEPS, capsys, 20101,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
    losses = [record[0] for record in theirs[0:33:11]]
    assert all(np.isfinite(losses))


TRANSDUCER_SOURCE = r"""import itertools
import string
import torch

BLANK = 0  # the null label: "advance one input frame"
WIDTH = 16


class FrameEncoder(torch.nn.Module):
    def __init__(self, n_symbols):
        super().__init__()
        self.embed = torch.nn.Embedding(n_symbols, WIDTH)
        self.rnn = torch.nn.GRU(
            input_size=WIDTH,
            hidden_size=WIDTH,
            num_layers=3,
            batch_first=True,
            bidirectional=True,
            dropout=0.1,
        )
        self.proj = torch.nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        return self.proj(self.rnn(self.embed(x))[0])


class LabelPredictor(torch.nn.Module):
    # a GRU cell over the labels emitted so far, started from a learned state
    def __init__(self, n_labels):
        super().__init__()
        self.embed = torch.nn.Embedding(n_labels, WIDTH)
        self.cell = torch.nn.GRUCell(input_size=WIDTH, hidden_size=WIDTH)
        self.proj = torch.nn.Linear(WIDTH, WIDTH)
        self.h0 = torch.nn.Parameter(torch.randn(WIDTH))

    def step(self, label, h):
        h = self.cell.forward(self.embed(label), h)
        return self.proj(h), h

    def forward(self, y):
        b, n = y.shape
        h = torch.stack([self.h0] * b).to(y.device)
        outs = []
        for u in range(n + 1):  # one more output than labels: the state after the last
            prev = torch.tensor([BLANK] * b, device=y.device) if u == 0 else y[:, u - 1]
            out, h = self.step(prev, h)
            outs.append(out)
        return torch.stack(outs, dim=1)


class Joint(torch.nn.Module):
    def __init__(self, n_labels):
        super().__init__()
        self.out = torch.nn.Linear(WIDTH, n_labels)

    def forward(self, frames, labels):
        return self.out(torch.nn.functional.relu(frames + labels))


class RNNT(torch.nn.Module):
    def __init__(self, n_symbols, n_labels):
        super().__init__()
        self.encoder, self.predictor = FrameEncoder(n_symbols), LabelPredictor(n_labels)
        self.joint = Joint(n_labels)
        self.device = "cuda:0" if torch.cuda.is_available() else "cpu"
        self.to(self.device)

    def log_likelihood(self, logp, T, U, y):
        # the forward algorithm over the (frame, label) lattice, one slot at a time
        b, t_max, u_max = logp.shape[0], logp.shape[1], logp.shape[2] - 1
        alpha = torch.zeros(b, t_max, u_max + 1, device=self.device)
        for t in range(t_max):
            for u in range(u_max + 1):
                if u > 0:
                    emit = torch.gather(
                        logp[:, t, u - 1], dim=1, index=y[:, u - 1].view(-1, 1)
                    ).reshape(-1)
                    from_left = alpha[:, t, u - 1] + emit
                if t == 0:
                    alpha[:, t, u] = 0.0 if u == 0 else from_left
                elif u == 0:
                    alpha[:, t, u] = alpha[:, t - 1, u] + logp[:, t - 1, 0, BLANK]
                else:
                    from_above = alpha[:, t - 1, u] + logp[:, t - 1, u, BLANK]
                    alpha[:, t, u] = torch.logsumexp(torch.stack([from_above, from_left]), dim=0)
        ends = [alpha[i, T[i] - 1, U[i]] + logp[i, T[i] - 1, U[i], BLANK] for i in range(b)]
        return torch.stack(ends)

    def lattice_logp(self, x, y):
        frames, labels = self.encoder.forward(x), self.predictor.forward(y)
        return self.joint.forward(frames.unsqueeze(2), labels.unsqueeze(1)).log_softmax(3)

    def loss(self, x, y, T, U):
        return -self.log_likelihood(self.lattice_logp(x, y), T, U, y).mean()

    def path_logp(self, frames, labels, T, U, path, y):
        # one alignment: 0 = advance a frame (emit blank), 1 = emit the next label
        t = u = 0
        slots, emitted = [], []
        for move in path:
            slots.append((t, u))
            emitted.append(BLANK if move == 0 else y[u])
            t, u = (t + 1, u) if move == 0 else (t, u + 1)
        slots.append((T - 1, U))
        emitted.append(BLANK)
        logp = self.joint.forward(
            frames[[s[0] for s in slots]], labels[[s[1] for s in slots]]
        ).log_softmax(1)
        target = torch.tensor(emitted).long().to(self.device)
        return -torch.nn.functional.nll_loss(input=logp, target=target, reduction="sum")

    def greedy(self, x, T, longest=200):
        frames, found = self.encoder.forward(x), []
        for i in range(len(x)):
            t, labels, h = 0, [BLANK], self.predictor.h0.unsqueeze(0)
            while t < T[i] and len(labels) <= longest:
                g, h = self.predictor.step(torch.tensor([labels[-1]], device=x.device), h)
                best = self.joint.forward(frames[i, t], g).max(-1)[1].item()
                if best == BLANK:
                    t += 1
                else:
                    labels.append(best)
            found.append(labels[1:])
        return found


def to_ids(s):
    return [string.ascii_lowercase.index(c) + 1 for c in s]


def to_text(ids):
    return "".join(string.ascii_lowercase[i - 1] for i in ids)


def padded(pairs):
    xs, ys = [to_ids(a) for a, _ in pairs], [to_ids(b) for _, b in pairs]
    T, U = [len(v) for v in xs], [len(v) for v in ys]
    x = torch.stack([torch.tensor(v + [BLANK] * (max(T) - len(v))) for v in xs])
    y = torch.stack([torch.tensor(v + [BLANK] * (max(U) - len(v))) for v in ys])
    return x, y, torch.tensor(T), torch.tensor(U)


def squeeze_repeats(word):  # the task: the input with runs of a letter collapsed
    return "".join(ch for k, ch in enumerate(word) if k == 0 or ch != word[k - 1])


words = ["book", "oops", "aab", "zzzt", "moo", "bee"]
pairs = [(w, squeeze_repeats(w)) for w in words]
model = RNNT(n_symbols=27, n_labels=27)
initialize(model)
opt = torch.optim.Adam(model.parameters(), lr=0.0003)

# the lattice's sum equals the brute-force sum over every alignment of the first pair
x, y, T, U = padded(pairs[:4])
model.eval()
frames, labels = model.encoder.forward(x), model.predictor.forward(y)
n_t, n_u = T[0].item(), U[0].item()
paths = sorted(set(itertools.permutations([0] * (n_t - 1) + [1] * n_u)))
each = [model.path_logp(frames[0], labels[0], n_t, n_u, p, y[0]) for p in paths]
record.append([torch.stack(each).logsumexp(0).item()])
record.append([model.log_likelihood(model.lattice_logp(x, y), T, U, y)[0].item()])

model.train()
model.encoder.rnn.dropout = 0.0  # the two runs' dropout masks would differ
for start in range(3):
    x, y, T, U = padded(pairs[start : start + 3])
    loss = model.loss(x, y, T, U)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.extend([[loss.item()], params_of(model)])
model.eval()
with torch.no_grad():
    x, y, T, U = padded(pairs[3:])
    record.append([to_text(found) for found in model.greedy(x, T)])
"""

TRANSDUCER_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("    loss.backward()\n    opt.step()\n", "    grads = loss.backward()\n    opt.step(grads)\n"),
]


def test_transducer_rnnt_loss_trains_and_decodes_as_torch(capsys):
    """The forward algorithm written slot by slot into the lattice equals the log of the sum
    over every alignment in both runs; three Adam steps and the greedy decoding agree with
    torch's."""
    (theirs, ours), _ = runs_with_draws(
        TRANSDUCER_SOURCE, TRANSDUCER_STEPS, capsys, 20102,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)
    for run in (theirs, ours):
        np.testing.assert_allclose(run[0], run[1], rtol=1e-5)


DEMUCS_STEPS = [
    ("import torch as th\n", "import retrograd as th\n"),
    ("from torch import nn\n", "from retrograd import nn\n"),
    ("    loss.backward()\n", "    grads = loss.backward()\n"),
    ("p.grad is not None", "p.grad(grads) is not None"),
    ("p.grad.data.norm()", "p.grad(grads).data.norm()"),
    ("    opt.step()\n", "    opt.step(grads)\n"),
]


def test_demucs_trains_on_augmented_stems_as_torch(capsys):
    """``capture_init``'s saved arguments, three L1 steps on stems flipped, shifted and
    remixed by the shared draws (losses and summed gradient norms), the parameters and the
    eval-mode separation agree with torch's."""
    (theirs, ours), _ = runs_with_draws(
        DEMUCS_SOURCE, DEMUCS_STEPS, capsys, 20103,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert theirs[0] == [["drums", "bass", "other", "vocals"]]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


FRONT_END_STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import Tensor, nn\n", "from retrograd import Tensor, nn\n"),
    (
        "    loss.backward()\n    adam.step()\n",
        "    grads = loss.backward()\n    adam.step(grads)\n",
    ),
    (
        "loss.backward()\nrecord.append(probe.grad.numpy()",
        "grads = loss.backward()\nrecord.append(probe.grad(grads).numpy()",
    ),
]


def test_torchaudio_style_mfcc_front_end_and_spec_augment_train_a_keyword_spotter_as_torch(capsys):
    """The complex spectrogram's magnitude, a Hamming-window mel spectrogram, the Slaney
    filterbank, a log-mel MFCC, three Adam steps of the MFCC + deltas + SpecAugment spotter
    (float64: the dB scale and per-utterance normalization amplify float32 rounding into Adam's
    steps), and the gradient with respect to the waveform agree with torch's."""
    try:
        (theirs, ours), _ = runs_with_draws(
            FRONT_END_SOURCE, FRONT_END_STEPS, capsys, 20104,
            initialize=initializer(), params_of=params_of,
        )  # fmt: skip
    finally:  # the program sets float64 as the default and back; a failure must not leak it
        for lib in (torch, rg):
            lib.set_default_dtype(lib.float32)
    assert_records_agree(ours, theirs, rtol=1e-7, atol=1e-9)
    assert np.abs(theirs[-1]).max() > 0


SRU_STEPS = [
    IMPORTS[0],
    IMPORTS[1],
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=5.0)\n"
        "    opt.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=5.0)\n"
        "    opt.step(grads)\n",
    ),
    ("total.backward()", "grads = total.backward()"),
    ("seqs.grad.numpy()", "seqs.grad(grads).numpy()"),
    ("w.grad.numpy()", "w.grad(grads).numpy()"),
]


@pytest.mark.filterwarnings("ignore:C\\+\\+ kernel for SRU")
def test_sru_language_model_and_packed_bidirectional_sru_as_torch(capsys):
    """The cell's repr, its ``scale_x`` buffer, the tied model's parameter and state counts,
    three truncated-BPTT steps and the parameters after them; a bidirectional projected SRU
    over a packed batch: outputs, states and the gradients of the input and parameters."""
    (theirs, ours), _ = runs_with_draws(
        SRU_SOURCE, SRU_STEPS, capsys, 20105, initialize=initializer(), params_of=params_of
    )
    assert theirs[0] == ["SRUCell(12, 12, highway_bias=-2.0, rescale=True, layer_norm=True)"]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


LISTEN_ATTEND_SPELL_STEPS = [
    IMPORTS[0],
    IMPORTS[1],
    (
        "    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5)\n",
        "    grads = loss.backward()\n"
        "    norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 5)\n",
    ),
    ("        opt.step()\n", "        opt.step(grads)\n"),
]


@pytest.mark.filterwarnings("ignore:reduction='elementwise_mean' is deprecated")
def test_listen_attend_spell_trains_and_beam_searches_as_torch(capsys):
    """Four steps (losses, gradient norms, parameters), then ``recognize_beam``'s n-best
    hypotheses and scores for two utterances, and its printed progress, as torch's."""
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        LISTEN_ATTEND_SPELL_SOURCE, LISTEN_ATTEND_SPELL_STEPS, capsys, 20106,
        initialize=initializer(), params_of=params_of,
    )  # fmt: skip
    assert "alive: " in their_log and our_log == their_log
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


QRNN_SOURCE = r"""import torch
from torch import nn
from torch.autograd import Variable as V


def forget_mult(f, x, h0=None):
    # h_t = f_t * x_t + (1 - f_t) * h_{t-1}, one time step at a time (the CPU path)
    steps, gates = [], f.split(1, dim=0)
    h = h0
    for t, fx in enumerate((f * x).split(1, dim=0)):
        if h is not None:
            fx = fx + (1 - gates[t]) * h
        h = fx.view(fx.size()[1:])
        steps.append(h)
    return torch.stack(steps)


class QRNNLayer(nn.Module):
    # gates from a width-1 or width-2 convolution over time, then the forget-mult recurrence
    def __init__(self, n_in, n_hidden=None, save_prev_x=False, zoneout=0.0, window=1):
        super().__init__()
        assert window in (1, 2), "windows of 1 or 2 steps only"
        self.window, self.zoneout, self.save_prev_x = window, zoneout, save_prev_x
        self.n_hidden = n_hidden or n_in
        self.prev_x = None
        self.gates = nn.Linear(window * n_in, 3 * self.n_hidden)

    def reset(self):
        self.prev_x = None  # a new sequence: forget the last step of the previous batch

    def forward(self, x, h0=None):
        steps, batch, _ = x.size()
        src = x
        if self.window == 2:
            before = [self.prev_x if self.prev_x is not None else x[:1, :, :] * 0]
            if len(x) > 1:
                before.append(x[:-1, :, :])
            src = torch.cat([x, torch.cat(before, 0)], 2)
        z, f, o = self.gates(src).view(steps, batch, 3 * self.n_hidden).chunk(3, dim=2)
        z, f = torch.nn.functional.tanh(z), torch.nn.functional.sigmoid(f)
        if self.zoneout:
            if self.training:
                keep = V(f.data.new(*f.size()).bernoulli_(1 - self.zoneout), requires_grad=False)
                f = f * keep
            else:
                f *= 1 - self.zoneout  # the expected value of the training-time mask
        c = forget_mult(f.contiguous(), z.contiguous(), h0)
        if self.save_prev_x and self.window == 2:
            self.prev_x = V(x[-1:, :, :].data, requires_grad=False)
        return torch.nn.functional.sigmoid(o) * c, c[-1:, :, :]


class QRNN(nn.Module):
    def __init__(self, n_in, n_hidden, num_layers=1, dropout=0.0, **layer_args):
        super().__init__()
        self.layers = nn.ModuleList(
            [
                QRNNLayer(n_in if i == 0 else n_hidden, n_hidden, **layer_args)
                for i in range(num_layers)
            ]
        )
        self.num_layers, self.dropout = num_layers, dropout

    def reset(self):
        for layer in self.layers:
            layer.reset()

    def forward(self, x, hidden=None):
        last = []
        for depth, layer in enumerate(self.layers):
            x, h = layer(x, None if hidden is None else hidden[depth])
            last.append(h)
            if self.dropout and depth < self.num_layers - 1:
                x = torch.nn.functional.dropout(
                    x, p=self.dropout, training=self.training, inplace=False
                )
        return x, torch.cat(last, 0).view(self.num_layers, *last[0].size()[-2:])


# a two-layer QRNN run once in eval mode
steps, batch, width = 7, 2, 5
x = torch.autograd.Variable(torch.rand(steps, batch, width), requires_grad=True)
qrnn = QRNN(width, 8, num_layers=2, dropout=0.4, window=2, save_prev_x=True, zoneout=0.25)
initialize(qrnn)
qrnn.eval()
out, h = qrnn(x)
record.extend([out.detach().numpy().copy(), h.detach().numpy().copy()])
saved = qrnn.layers[0].prev_x
record.extend([[saved.requires_grad], list(saved.shape)])
qrnn.reset()
record.append([qrnn.layers[0].prev_x is None])


class CharLM(nn.Module):
    # embedding -> QRNN -> decoder tied to the embedding
    def __init__(self, vocab, width, depth):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.rnn = QRNN(width, width, num_layers=depth, save_prev_x=True, window=2)
        self.decoder = nn.Linear(width, vocab)
        self.decoder.weight = self.embed.weight
        self.embed.weight.data.uniform_(-0.1, 0.1)
        self.decoder.bias.data.fill_(0.0)
        self.width, self.depth = width, depth

    def forward(self, ids, hidden):
        out, hidden = self.rnn(self.embed(ids), hidden)
        flat = self.decoder(out.view(out.size(0) * out.size(1), out.size(2)))
        return flat.view(out.size(0), out.size(1), flat.size(1)), hidden

    def zero_state(self, batch):
        w = next(self.parameters()).data
        return V(w.new(self.depth, batch, self.width).zero_())


def detach_state(h):
    # truncated BPTT: keep the values, drop the history
    return h.detach() if isinstance(h, torch.Tensor) else tuple(detach_state(v) for v in h)


corpus = "she sells sea shells on the sea shore "
vocab = sorted(set(corpus))
ids = torch.LongTensor([vocab.index(ch) for ch in corpus])
columns = ids.size(0) // 3
stream = ids.narrow(0, 0, columns * 3).view(3, -1).t().contiguous()  # (time, 3 streams)
lm = CharLM(len(vocab), 8, 2)
initialize(lm)
sgd = torch.optim.SGD(lm.parameters(), lr=2.0, weight_decay=1.2e-6)
ce = nn.CrossEntropyLoss()
lm.train()
for epoch in range(2):
    lm.rnn.reset()
    state = lm.zero_state(3)
    for t in range(0, stream.size(0) - 1, 5):
        targets = stream[t + 1 : t + 6].view(-1)
        inputs = stream[t : t + 5][: len(targets) // 3]
        state = detach_state(state)
        sgd.zero_grad()
        logits, state = lm(inputs, state)
        loss = ce(logits.view(-1, len(vocab)), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(lm.parameters(), 0.25)
        sgd.step()
        record.append([loss.item()])
record.append(params_of(lm))
"""

QRNN_STEPS = [
    (
        "import torch\nfrom torch import nn\n",
        "import retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        loss.backward()\n        torch.nn.utils.clip_grad_norm_(lm.parameters(), 0.25)\n"
        "        sgd.step()\n",
        "        grads = loss.backward()\n"
        "        torch.nn.utils.clip_grad_norm_(grads, lm.parameters(), 0.25)\n"
        "        sgd.step(grads)\n",
    ),
]


def test_qrnn_and_its_tied_language_model_train_as_torch(capsys):
    """A two-layer QRNN in eval mode (zoneout scaling the forget gates in place, the saved
    ``prev_x``), then two epochs of a tied QRNN character language model with SGD."""
    (theirs, ours), _ = runs_with_draws(
        QRNN_SOURCE, QRNN_STEPS, capsys, 20107, initialize=initializer(), params_of=params_of
    )
    assert theirs[2:5] == [[False], [1, 2, 5], [True]]
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6)


FAIRSEQ_SOURCE = r"""import math
from typing import Optional
import torch
import torch.nn as nn
import torch.onnx.operators

F = nn.functional


def positions_of(tokens, pad: int):
    # 1-based positions after `pad` for real tokens, `pad` itself for padding
    real = tokens.ne(pad).int()
    return (torch.cumsum(real, dim=1).type_as(real) * real).long() + pad


def neg_inf_like(t):
    return t.float().fill_(float("-inf")).type_as(t)  # through float: half precision too


class SinusoidalPositions(nn.Module):
    def __init__(self, dim, pad, rows=1024):
        super().__init__()
        self.dim, self.pad = dim, pad
        self.register_buffer("weights", SinusoidalPositions.table(rows, dim, pad), persistent=False)

    @staticmethod
    def table(rows: int, dim: int, pad: Optional[int] = None):
        half = dim // 2
        rates = torch.exp(torch.arange(half, dtype=torch.float) * -(math.log(10000) / (half - 1)))
        angles = torch.arange(rows, dtype=torch.float).unsqueeze(1) * rates.unsqueeze(0)
        t = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(rows, -1)
        if dim % 2 == 1:
            t = torch.cat([t, torch.zeros(rows, 1)], dim=1)
        if pad is not None:
            t[pad, :] = 0  # padding gets no position signal
        return t

    def forward(self, tokens):
        size = torch.onnx.operators.shape_as_tensor(tokens)  # 0-d sizes, traceable
        bsz, length = size[0], size[1]
        needed = self.pad + 1 + length
        if needed > self.weights.size(0):
            self.weights = SinusoidalPositions.table(needed, self.dim, self.pad).to(self.weights)
        where = positions_of(tokens, self.pad)
        return self.weights.index_select(0, where.view(-1)).view(bsz, length, -1).detach()


def smoothed_nll(lprobs, target, eps, ignore_index):
    target = target.unsqueeze(-1)
    nll = -lprobs.gather(dim=-1, index=target)
    spread = -lprobs.sum(dim=-1, keepdim=True)
    padding = target.eq(ignore_index)
    nll.masked_fill_(padding, 0.0)
    spread.masked_fill_(padding, 0.0)
    nll, spread = nll.sum(), spread.sum()
    eps_i = eps / (lprobs.size(-1) - 1)
    return (1.0 - eps - eps_i) * nll + eps_i * spread, nll


def beam_candidates(step, lprobs, scores, beam):
    bsz, _, vocab = lprobs.size()
    if step == 0:
        lprobs = lprobs[:, ::beam, :].contiguous()  # every beam is the same: use the first
    else:
        so_far = scores[:, :, step - 1].unsqueeze(-1)
        lprobs = lprobs + so_far
    flat = lprobs.view(bsz, -1)
    best, where = torch.topk(flat, k=min(2 * beam, flat.size(1) - 1))
    return best, where.fmod(vocab), torch.div(where, vocab, rounding_mode="trunc")


class OneLayerLM(nn.Module):
    # a pre-norm decoder layer, time-major inside, output tied to the input embedding
    def __init__(self, vocab, pad, dim=16, heads=2):
        super().__init__()
        self.pad = pad
        self.embed = nn.Embedding(vocab, dim, padding_idx=pad)
        nn.init.normal_(self.embed.weight, mean=0, std=dim**-0.5)
        nn.init.constant_(self.embed.weight[pad], 0)
        self.scale = math.sqrt(dim)
        self.positions = SinusoidalPositions(dim, pad, rows=8)
        self.self_attn = nn.MultiheadAttention(dim, heads, dropout=0.0)
        self.attn_norm, self.ffn_norm = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.up, self.down = nn.Linear(dim, 2 * dim), nn.Linear(2 * dim, dim)
        self._future = torch.empty(0)

    def future_mask(self, x):
        n = x.size(0)
        if self._future.size(0) < n:  # grown on demand, kept between calls
            self._future = torch.triu(neg_inf_like(torch.zeros([n, n])), 1)
        self._future = self._future.to(x)
        return self._future[:n, :n]

    def forward(self, tokens):
        x = self.scale * self.embed(tokens)
        x += self.positions(tokens)
        x = x.transpose(0, 1)
        h = self.attn_norm(x)
        h, _ = self.self_attn(
            query=h,
            key=h,
            value=h,
            key_padding_mask=tokens.eq(self.pad),
            need_weights=False,
            attn_mask=self.future_mask(h),
        )
        x = x + h
        x = x + self.down(F.relu(self.up(self.ffn_norm(x))))
        return F.linear(x.transpose(0, 1), self.embed.weight)

    def log_probs(self, logits):
        return F.log_softmax(logits, dim=-1, dtype=torch.float32)


pad, eos, bos = 1, 2, 0
vocab = ["<s>", "<pad>", "</s>", "w", "x", "y", "z"]
lines = [[3, 4, 5], [4, 4, 6, 3], [6, 5], [5, 3, 4, 6, 6]]
width = max(len(s) for s in lines) + 1
inputs = torch.full((len(lines), width), pad, dtype=torch.long)
target = torch.full((len(lines), width), pad, dtype=torch.long)
for i, s in enumerate(lines):
    inputs[i, : len(s) + 1] = torch.tensor([eos] + s)  # eos doubles as the start symbol
    target[i, : len(s) + 1] = torch.tensor([*s, eos])
n_tokens = target.ne(pad).sum().item()

model = OneLayerLM(len(vocab), pad)
initialize(model)
no_decay = ["bias", "norm.weight"]
named = list(model.named_parameters())
opt = torch.optim.Adam(
    [
        {
            "params": [p for n, p in named if not any(k in n for k in no_decay)],
            "weight_decay": 0.01,
        },
        {"params": [p for n, p in named if any(k in n for k in no_decay)], "weight_decay": 0.0},
    ],
    lr=5e-3,
    betas=(0.9, 0.98),
    eps=1e-8,
)
warmup, start_lr, peak = 3, 1e-7, 5e-3


def inverse_sqrt(n):  # linear warmup, then decay as 1 / sqrt(updates)
    if n < warmup:
        return (start_lr + n * (peak - start_lr) / warmup) / peak
    return warmup**0.5 * n**-0.5


schedule = torch.optim.lr_scheduler.LambdaLR(opt, inverse_sqrt)
model.train()
for update in range(4):
    lprobs = model.log_probs(model(inputs))
    loss, nll = smoothed_nll(lprobs.view(-1, lprobs.size(-1)), target.view(-1), 0.1, pad)
    opt.zero_grad()
    (loss / n_tokens).backward()
    opt.step()
    schedule.step()
    bits = n_tokens * math.log(2)
    record.append([loss.item() / bits, nll.item() / bits, schedule.get_last_lr()[0]])
trained = params_of(model)
record.append(trained)

# a batched beam search keeping its buffers as fairseq's older generator did
model.eval()
bsz, beam, steps = 2, 3, 5
with torch.no_grad():
    tokens = torch.zeros(bsz * beam, steps + 2).long().fill_(pad)
    tokens[:, 0] = eos
    scores = torch.zeros(bsz * beam, steps + 1).float()
    row_base = (torch.arange(0, bsz) * beam).unsqueeze(1).type_as(tokens)
    cand_rank = torch.arange(0, 2 * beam).type_as(tokens)
    done = [[] for _ in range(bsz)]
    for step in range(steps):
        lprobs = model.log_probs(model(tokens[:, : step + 1]))[:, -1, :]
        lprobs[lprobs != lprobs] = torch.tensor(-math.inf).to(lprobs)  # NaN guard
        lprobs[:, pad] = -math.inf
        lprobs[:, bos] = -math.inf
        if step == steps - 1:  # the last step may only end
            lprobs[:, :eos] = lprobs[:, eos + 1 :] = -math.inf
        cand_scores, cand_tokens, cand_beams = beam_candidates(
            step, lprobs.view(bsz, -1, len(vocab)), scores.view(bsz, beam, -1)[:, :, :step], beam
        )
        cand_rows = cand_beams.add(row_base)
        ended = cand_tokens.eq(eos) & cand_scores.ne(-math.inf)
        ended_rows = torch.masked_select(cand_rows[:, :beam], mask=ended[:, :beam])
        if ended_rows.numel() > 0:
            ended_scores = torch.masked_select(cand_scores[:, :beam], mask=ended[:, :beam])
            for row, score in zip(ended_rows.tolist(), ended_scores.tolist()):
                done[row // beam].append(
                    (round(score / (step + 1), 5), tokens[row, 1 : step + 1].tolist() + [eos])
                )
        # keep the best `beam` candidates that did not end: ended ones sort after every other
        order = torch.add(ended.type_as(cand_rank) * 2 * beam, cand_rank[: ended.size(1)])
        _, keep = torch.topk(order, k=beam, dim=1, largest=False)
        kept_rows = torch.gather(cand_rows, dim=1, index=keep).view(-1)
        tokens[:, : step + 1] = torch.index_select(tokens[:, : step + 1], dim=0, index=kept_rows)
        torch.gather(cand_tokens, dim=1, index=keep, out=tokens.view(bsz, beam, -1)[:, :, step + 1])
        if step > 0:
            scores[:, :step] = torch.index_select(scores[:, :step], dim=0, index=kept_rows)
        torch.gather(cand_scores, dim=1, index=keep, out=scores.view(bsz, beam, -1)[:, :, step])
record.extend([tokens.numpy().copy(), scores.numpy().copy()])
for sent in range(bsz):
    record.append(repr(sorted(done[sent], key=lambda h: -h[0])[:2]))
"""

FAIRSEQ_STEPS = [
    IMPORTS[0],
    IMPORTS[1],
    ("import torch.onnx.operators\n", "import retrograd.onnx.operators\n"),
    (
        "    (loss / n_tokens).backward()\n    opt.step()\n",
        "    grads = (loss / n_tokens).backward()\n    opt.step(grads)\n",
    ),
]


def test_fairseq_label_smoothed_lm_and_beam_search_with_out_buffers_as_torch(capsys):
    """Four updates of the label-smoothed loss under the inverse-sqrt warmup (loss and nll in
    bits, the learning rate), the parameters after them, then the batched beam search's token
    and score buffers, written through views by ``out=``, and the finished hypotheses."""
    (theirs, ours), _ = runs_with_draws(
        FAIRSEQ_SOURCE, FAIRSEQ_STEPS, capsys, 20108, initialize=initializer(), params_of=params_of
    )
    # the key projection's bias has no true gradient (a softmax ignores a constant added to
    # every score), so Adam's steps on it follow the rounding noise: its query and value
    # thirds are compared alone
    bias = "0.self_attn.in_proj_bias"
    assert_records_agree(ours, theirs, rtol=1e-5, atol=1e-6, skip={bias})
    for part in (slice(0, 16), slice(32, 48)):
        np.testing.assert_allclose(ours[4][bias][part], theirs[4][bias][part], rtol=1e-5, atol=1e-6)
    assert "[(" in theirs[-1]
