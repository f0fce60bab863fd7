# ruff: noqa: E501  (the embedded script and the port steps replacing its lines run past 100 columns)
"""Real ports, round 79 (the harness: ``tests/real_ports.py``): speaker verification, a program
written here in the style of TaoRuijie/ECAPA-TDNN (its ``model.py``, ``loss.py``,
``ECAPAModel.py`` and ``tools.py``), with torchaudio's ``MelSpectrogram`` written out in torch
ops as torchaudio's ``Spectrogram`` and ``MelScale`` compute it: an ECAPA-TDNN of Res2Net
bottlenecks with squeeze-excitation and attentive statistics pooling, trained a few steps with
an additive angular margin softmax on synthetic speakers, then scored on verification trials by
the cosine of full-utterance and five-chunk embeddings, with the equal error rate and minDCF;
under torch and, ported, under retrograd from the same weights and draws, every record compared;
once with SpecAugment-style masking in training, once without and with the state saved and
loaded back between the epochs. The model runs in float64 (``model.double()`` after its Adam
took the parameters, the waveforms ``.double()``): in float32 the biases whose true gradient
is zero (those a ``BatchNorm1d`` or the softmax over time cancels) take Adam's first steps
from the rounding noise of their gradients, ±lr either way.

It reaches:

- the front end: ``PreEmphasis`` by ``register_buffer('flipped_filter', torch.FloatTensor([-c,
  1.]).unsqueeze(0).unsqueeze(0))``, ``F.pad(input, (1, 0), 'reflect')`` and ``F.conv1d``;
  the spectrogram packing the batch by ``reshape(-1, shape[-1])``, ``torch.stft(...,
  window=torch.hamming_window(win), center=True, pad_mode="reflect", return_complex=True)``,
  unpacked by ``reshape(shape[:-1] + spec.shape[-2:])``, ``abs().pow(2.0)``; the HTK mel
  filterbank (``math.log10``, ``10 ** (m_pts / 2595.0)``, ``torch.max(zero, torch.min(down,
  up))`` against a ``torch.zeros(1)``) and ``torch.matmul(spec.transpose(-1, -2), fb)
  .transpose(-1, -2)``; ``+ 1e-6``, ``log()``, mean removal under ``torch.no_grad()``;
- ``FbankAug``: attributes set before ``super().__init__()``, widths and positions by
  ``torch.randint(lo, hi, (batch, 1), device=...)`` (the high bound ``max(1, D -
  mask_len.max())``, an int against a 0-d tensor), the band mask by ``(pos <= arange) *
  (arange < pos + len)`` and ``any(dim=1)``, ``x.masked_fill_(mask, 0.0)``,
  ``x.view(*original_size)``;
- the network: ``Bottle2neck`` with ``int(math.floor(planes / scale))`` widths, dilated
  ``Conv1d`` with ``padding=math.floor(kernel_size / 2) * dilation``, ``torch.split(out,
  width, 1)`` summed into the next split and ``torch.cat`` grown in a loop, ``SEModule``
  (``nn.AdaptiveAvgPool1d(1)``, 1x1 ``Conv1d``, ``nn.Sigmoid``), ``out += residual``; the
  multi-layer aggregation by ``torch.cat((x1, x2, x3), dim=1)``; attentive statistics pooling
  (``torch.mean(x, dim=2, keepdim=True).repeat(1, 1, t)``, ``torch.sqrt(torch.var(x, dim=2,
  keepdim=True).clamp(min=1e-4))``, ``nn.Softmax(dim=2)`` weights, ``torch.sum(x * w, dim=2)``,
  ``((...) - mu ** 2).clamp(min=1e-4)``), ``BatchNorm1d`` and ``Linear``;
- ``AAMsoftmax``: ``torch.nn.Parameter(torch.FloatTensor(n, d), requires_grad=True)`` filled
  by ``nn.init.xavier_normal_(..., gain=1)``, ``F.linear(F.normalize(x),
  F.normalize(self.weight))``, ``torch.sqrt((1.0 - torch.mul(c, c)).clamp(0, 1))``,
  ``torch.where((cosine - th) > 0, phi, cosine - mm)``, a one-hot by ``torch.zeros_like`` and
  ``scatter_(1, label.view(-1, 1), 1)``, ``nn.CrossEntropyLoss``; ``accuracy`` by
  ``topk(maxk, 1, True, True)``, ``pred.t()``, ``eq(target.view(1, -1).expand_as(pred))``,
  ``correct[:k].view(-1).float().sum(0, keepdim=True)`` and ``mul_(100.0 / batch_size)``;
- training: ``Adam(..., weight_decay=2e-5)``, ``StepLR`` stepped with an explicit epoch
  (``scheduler.step(epoch - 1)``, torch's deprecated closed form), ``torch.LongTensor(labels)``
  of a NumPy array, ``nloss.detach().cpu().numpy()`` summed; the checkpoint by
  ``torch.save(self.state_dict(), ...)`` and ``load_parameters``' ``self_state[name]
  .copy_(param)`` with the ``"module."`` prefix stripped;
- evaluation: ``torch.FloatTensor(numpy.stack(...))``, NumPy ``'wrap'`` padding and
  ``numpy.linspace`` chunk starts, ``F.normalize(p=2, dim=1)``, ``torch.mean(torch.matmul(e1,
  e2.T))``, scores as ``.detach().cpu().numpy()`` sorted by ``operator.itemgetter``, the EER
  from the ROC written in NumPy, ``ComputeErrorRates`` and ``ComputeMinDcf``.

Found and fixed (``tests/test_ports79_fixes.py``): the schedule stepped before the optimizer's
first step raised torch's "Detected call of `lr_scheduler.step()` before `optimizer.step()`"
warning under torch and nothing under retrograd.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
nloss.backward()``; ``self.optim.step(grads)``).
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

ECAPA_SOURCE = """import io
import operator
from operator import itemgetter

import numpy
import torch
import torch.nn as nn
import torch.nn.functional as F


# -- torchaudio's Spectrogram and MelScale, as its functional module computes them -------------
def melscale_fbanks(n_freqs, f_min, f_max, n_mels, sample_rate):
    all_freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    m_min = 2595.0 * math.log10(1.0 + (f_min / 700.0))
    m_max = 2595.0 * math.log10(1.0 + (f_max / 700.0))
    m_pts = torch.linspace(m_min, m_max, n_mels + 2)
    f_pts = 700.0 * (10 ** (m_pts / 2595.0) - 1.0)
    # create filterbank
    f_diff = f_pts[1:] - f_pts[:-1]  # (n_filter + 1)
    slopes = f_pts.unsqueeze(0) - all_freqs.unsqueeze(1)  # (n_freqs, n_filter + 2)
    zero = torch.zeros(1)
    down_slopes = (-1.0 * slopes[:, :-2]) / f_diff[:-1]  # (n_freqs, n_filter)
    up_slopes = slopes[:, 2:] / f_diff[1:]  # (n_freqs, n_filter)
    fb = torch.max(zero, torch.min(down_slopes, up_slopes))
    return fb


class MelSpectrogram(torch.nn.Module):
    __constants__ = ["sample_rate", "n_fft", "win_length", "hop_length", "pad", "n_mels", "f_min"]

    def __init__(self, sample_rate=16000, n_fft=400, win_length=None, hop_length=None, f_min=0.0,
                 f_max=None, pad=0, n_mels=128, window_fn=torch.hann_window, power=2.0,
                 center=True, pad_mode="reflect"):
        super(MelSpectrogram, self).__init__()
        self.sample_rate = sample_rate
        self.n_fft = n_fft
        self.win_length = win_length if win_length is not None else n_fft
        self.hop_length = hop_length if hop_length is not None else self.win_length // 2
        self.pad = pad
        self.power = power
        self.n_mels = n_mels
        self.f_max = f_max
        self.f_min = f_min
        self.center = center
        self.pad_mode = pad_mode
        window = window_fn(self.win_length)
        self.register_buffer("window", window)
        fb = melscale_fbanks(n_fft // 2 + 1, self.f_min, self.f_max, self.n_mels, self.sample_rate)
        self.register_buffer("fb", fb)

    def spectrogram(self, waveform):
        if self.pad > 0:
            waveform = torch.nn.functional.pad(waveform, (self.pad, self.pad), "constant")
        # pack batch
        shape = waveform.size()
        waveform = waveform.reshape(-1, shape[-1])
        spec_f = torch.stft(
            input=waveform,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            window=self.window,
            center=self.center,
            pad_mode=self.pad_mode,
            normalized=False,
            onesided=True,
            return_complex=True,
        )
        # unpack batch
        spec_f = spec_f.reshape(shape[:-1] + spec_f.shape[-2:])
        return spec_f.abs().pow(self.power)

    def forward(self, waveform):
        specgram = self.spectrogram(waveform)
        mel_specgram = torch.matmul(specgram.transpose(-1, -2), self.fb).transpose(-1, -2)
        return mel_specgram


# -- model.py ---------------------------------------------------------------------------------
class SEModule(nn.Module):
    def __init__(self, channels, bottleneck=128):
        super(SEModule, self).__init__()
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool1d(1),
            nn.Conv1d(channels, bottleneck, kernel_size=1, padding=0),
            nn.ReLU(),
            # nn.BatchNorm1d(bottleneck), # I remove this layer
            nn.Conv1d(bottleneck, channels, kernel_size=1, padding=0),
            nn.Sigmoid(),
            )

    def forward(self, input):
        x = self.se(input)
        return input * x


class Bottle2neck(nn.Module):

    def __init__(self, inplanes, planes, kernel_size=None, dilation=None, scale=8):
        super(Bottle2neck, self).__init__()
        width       = int(math.floor(planes / scale))
        self.conv1  = nn.Conv1d(inplanes, width*scale, kernel_size=1)
        self.bn1    = nn.BatchNorm1d(width*scale)
        self.nums   = scale -1
        convs       = []
        bns         = []
        num_pad = math.floor(kernel_size/2)*dilation
        for i in range(self.nums):
            convs.append(nn.Conv1d(width, width, kernel_size=kernel_size, dilation=dilation, padding=num_pad))
            bns.append(nn.BatchNorm1d(width))
        self.convs  = nn.ModuleList(convs)
        self.bns    = nn.ModuleList(bns)
        self.conv3  = nn.Conv1d(width*scale, planes, kernel_size=1)
        self.bn3    = nn.BatchNorm1d(planes)
        self.relu   = nn.ReLU()
        self.width  = width
        self.se     = SEModule(planes, bottleneck=SE_BOTTLENECK)

    def forward(self, x):
        residual = x
        out = self.conv1(x)
        out = self.relu(out)
        out = self.bn1(out)

        spx = torch.split(out, self.width, 1)
        for i in range(self.nums):
          if i==0:
            sp = spx[i]
          else:
            sp = sp + spx[i]
          sp = self.convs[i](sp)
          sp = self.relu(sp)
          sp = self.bns[i](sp)
          if i==0:
            out = sp
          else:
            out = torch.cat((out, sp), 1)
        out = torch.cat((out, spx[self.nums]),1)

        out = self.conv3(out)
        out = self.relu(out)
        out = self.bn3(out)

        out = self.se(out)
        out += residual
        return out


class PreEmphasis(torch.nn.Module):

    def __init__(self, coef: float = 0.97):
        super().__init__()
        self.coef = coef
        self.register_buffer(
            'flipped_filter', torch.FloatTensor([-self.coef, 1.]).unsqueeze(0).unsqueeze(0)
        )

    def forward(self, input):
        input = input.unsqueeze(1)
        input = F.pad(input, (1, 0), 'reflect')
        return F.conv1d(input, self.flipped_filter).squeeze(1)


class FbankAug(nn.Module):

    def __init__(self, freq_mask_width = (0, 8), time_mask_width = (0, 10)):
        self.time_mask_width = time_mask_width
        self.freq_mask_width = freq_mask_width
        super().__init__()

    def mask_along_axis(self, x, dim):
        original_size = x.shape
        batch, fea, time = x.shape
        if dim == 1:
            D = fea
            width_range = self.freq_mask_width
        else:
            D = time
            width_range = self.time_mask_width

        mask_len = torch.randint(width_range[0], width_range[1], (batch, 1), device=x.device).unsqueeze(2)
        mask_pos = torch.randint(0, max(1, D - mask_len.max()), (batch, 1), device=x.device).unsqueeze(2)
        arange = torch.arange(D, device=x.device).view(1, 1, -1)
        mask = (mask_pos <= arange) * (arange < (mask_pos + mask_len))
        mask = mask.any(dim=1)

        if dim == 1:
            mask = mask.unsqueeze(2)
        else:
            mask = mask.unsqueeze(1)

        x = x.masked_fill_(mask, 0.0)
        return x.view(*original_size)

    def forward(self, x):
        x = self.mask_along_axis(x, dim=2)
        x = self.mask_along_axis(x, dim=1)
        return x


class ECAPA_TDNN(nn.Module):

    def __init__(self, C):

        super(ECAPA_TDNN, self).__init__()

        self.torchfbank = torch.nn.Sequential(
            PreEmphasis(),
            MelSpectrogram(sample_rate=SR, n_fft=128, win_length=100, hop_length=40,
                           f_min=20, f_max=SR // 2 - 100, window_fn=torch.hamming_window, n_mels=N_MELS),
            )

        self.specaug = FbankAug(freq_mask_width=(0, 4), time_mask_width=(0, 5)) # Spec augmentation

        self.conv1  = nn.Conv1d(N_MELS, C, kernel_size=5, stride=1, padding=2)
        self.relu   = nn.ReLU()
        self.bn1    = nn.BatchNorm1d(C)
        self.layer1 = Bottle2neck(C, C, kernel_size=3, dilation=2, scale=8)
        self.layer2 = Bottle2neck(C, C, kernel_size=3, dilation=3, scale=8)
        self.layer3 = Bottle2neck(C, C, kernel_size=3, dilation=4, scale=8)
        # I fixed the shape of the output from MFA layer, that is close to the setting from ECAPA paper.
        self.layer4 = nn.Conv1d(3*C, MFA, kernel_size=1)
        self.attention = nn.Sequential(
            nn.Conv1d(3 * MFA, 16, kernel_size=1),
            nn.ReLU(),
            nn.BatchNorm1d(16),
            nn.Tanh(), # I add this layer
            nn.Conv1d(16, MFA, kernel_size=1),
            nn.Softmax(dim=2),
            )
        self.bn5 = nn.BatchNorm1d(2 * MFA)
        self.fc6 = nn.Linear(2 * MFA, EMBED)
        self.bn6 = nn.BatchNorm1d(EMBED)


    def forward(self, x, aug):
        with torch.no_grad():
            x = self.torchfbank(x)+1e-6
            x = x.log()
            x = x - torch.mean(x, dim=-1, keepdim=True)
            if aug == True:
                x = self.specaug(x)

        x = self.conv1(x)
        x = self.relu(x)
        x = self.bn1(x)

        x1 = self.layer1(x)
        x2 = self.layer2(x+x1)
        x3 = self.layer3(x+x1+x2)

        x = self.layer4(torch.cat((x1,x2,x3),dim=1))
        x = self.relu(x)

        t = x.size()[-1]

        global_x = torch.cat((x,torch.mean(x,dim=2,keepdim=True).repeat(1,1,t), torch.sqrt(torch.var(x,dim=2,keepdim=True).clamp(min=1e-4)).repeat(1,1,t)), dim=1)

        w = self.attention(global_x)

        mu = torch.sum(x * w, dim=2)
        sg = torch.sqrt( ( torch.sum((x**2) * w, dim=2) - mu**2 ).clamp(min=1e-4) )

        x = torch.cat((mu,sg),1)
        x = self.bn5(x)
        x = self.fc6(x)
        x = self.bn6(x)

        return x


# -- tools.py ---------------------------------------------------------------------------------
def accuracy(output, target, topk=(1,)):
    maxk = max(topk)
    batch_size = target.size(0)
    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    res = []
    for k in topk:
        correct_k = correct[:k].view(-1).float().sum(0, keepdim=True)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


def tuneThresholdfromScore(scores, labels, target_fa, target_fr = None):
    # the ROC as sklearn's roc_curve gives it (thresholds from the highest score down)
    scores, labels = numpy.asarray(scores, dtype=numpy.float64), numpy.asarray(labels)
    order = numpy.argsort(-scores, kind="mergesort")
    tps = numpy.cumsum(labels[order]) / labels.sum()
    fps = numpy.cumsum(1 - labels[order]) / (1 - labels).sum()
    fpr, tpr = numpy.r_[0.0, fps], numpy.r_[0.0, tps]
    fnr = 1 - tpr
    idxE = numpy.nanargmin(numpy.absolute((fnr - fpr)))
    eer = max(fpr[idxE], fnr[idxE]) * 100
    return None, eer, fpr, fnr


def ComputeErrorRates(scores, labels):
      # Sort the scores from smallest to largest, and also get the corresponding
      # indexes of the sorted scores.  We will treat the sorted scores as the
      # thresholds at which the the error-rates are evaluated.
      sorted_indexes, thresholds = zip(*sorted(
          [(index, threshold) for index, threshold in enumerate(scores)],
          key=itemgetter(1)))
      sorted_labels = []
      labels = [labels[i] for i in sorted_indexes]
      fnrs = []
      fprs = []

      # At the end of this loop, fnrs[i] is the number of errors made by
      # incorrectly rejecting scores less than thresholds[i]. And, fprs[i]
      # is the total number of times that we have correctly accepted scores
      # greater than thresholds[i].
      for i in range(0, len(labels)):
          if i == 0:
              fnrs.append(labels[i])
              fprs.append(1 - labels[i])
          else:
              fnrs.append(fnrs[i-1] + labels[i])
              fprs.append(fprs[i-1] + 1 - labels[i])
      fnrs_norm = sum(labels)
      fprs_norm = len(labels) - fnrs_norm

      # Now divide by the total number of false negative errors to
      # obtain the false positive rates across all thresholds
      fnrs = [x / float(fnrs_norm) for x in fnrs]

      # Divide by the total number of corret positives to get the
      # true positive rate.  Subtract these quantities from 1 to
      # get the false positive rates.
      fprs = [1 - x / float(fprs_norm) for x in fprs]
      return fnrs, fprs, thresholds


def ComputeMinDcf(fnrs, fprs, thresholds, p_target, c_miss, c_fa):
    min_c_det = float("inf")
    min_c_det_threshold = thresholds[0]
    for i in range(0, len(fnrs)):
        # See Equation (2).  it is a weighted sum of false negative
        # and false positive errors.
        c_det = c_miss * fnrs[i] * p_target + c_fa * fprs[i] * (1 - p_target)
        if c_det < min_c_det:
            min_c_det = c_det
            min_c_det_threshold = thresholds[i]
    # See Equations (3) and (4).  Now we normalize the cost.
    c_def = min(c_miss * p_target, c_fa * (1 - p_target))
    min_dcf = min_c_det / c_def
    return min_dcf, min_c_det_threshold


# -- loss.py ----------------------------------------------------------------------------------
class AAMsoftmax(nn.Module):
    def __init__(self, n_class, m, s):

        super(AAMsoftmax, self).__init__()
        self.m = m
        self.s = s
        self.weight = torch.nn.Parameter(torch.FloatTensor(n_class, EMBED), requires_grad=True)
        self.ce = nn.CrossEntropyLoss()
        nn.init.xavier_normal_(self.weight, gain=1)
        self.cos_m = math.cos(self.m)
        self.sin_m = math.sin(self.m)
        self.th = math.cos(math.pi - self.m)
        self.mm = math.sin(math.pi - self.m) * self.m

    def forward(self, x, label=None):

        cosine = F.linear(F.normalize(x), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.mul(cosine, cosine)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        phi = torch.where((cosine - self.th) > 0, phi, cosine - self.mm)
        one_hot = torch.zeros_like(cosine)
        one_hot.scatter_(1, label.view(-1, 1), 1)
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)
        output = output * self.s

        loss = self.ce(output, label)
        prec1 = accuracy(output.detach(), label.detach(), topk=(1,))[0]

        return loss, prec1


# -- ECAPAModel.py ----------------------------------------------------------------------------
class ECAPAModel(nn.Module):
    def __init__(self, lr, lr_decay, C, n_class, m, s, test_step, **kwargs):
        super(ECAPAModel, self).__init__()
        ## ECAPA-TDNN
        self.speaker_encoder = ECAPA_TDNN(C = C)
        ## Classifier
        self.speaker_loss    = AAMsoftmax(n_class = n_class, m = m, s = s)

        self.optim           = torch.optim.Adam(self.parameters(), lr = lr, weight_decay = 2e-5)
        self.scheduler       = torch.optim.lr_scheduler.StepLR(self.optim, step_size = test_step, gamma=lr_decay)
        print(" Model para number = %.2f"%(sum(param.numel() for param in self.speaker_encoder.parameters()) / 1024 / 1024))

    def train_network(self, epoch, loader):
        self.train()
        ## Update the learning rate based on the current epcoh
        self.scheduler.step(epoch - 1)
        index, top1, loss = 0, 0, 0
        lr = self.optim.param_groups[0]['lr']
        for num, (data, labels) in enumerate(loader, start = 1):
            self.zero_grad()
            labels            = torch.LongTensor(labels)
            speaker_embedding = self.speaker_encoder.forward(data.double(), aug = AUG)
            nloss, prec       = self.speaker_loss.forward(speaker_embedding, labels)
            nloss.backward()
            self.optim.step()
            index += len(labels)
            top1 += prec
            loss += nloss.detach().cpu().numpy()
            record.append([nloss.item(), prec.item(), lr])
            record.append(params_of(self))
            print("[%2d] Lr: %5f, Training: %.2f%%, " %(epoch, lr, 100 * (num / len(loader))) + \\
            " Loss: %.3f, ACC: %2.2f%% \\r" %(loss/(num), top1/index*len(labels)))
        return loss/num, lr, top1/index*len(labels)

    def eval_network(self, eval_list, eval_audio):
        self.eval()
        files = []
        embeddings = {}
        lines = eval_list
        for line in lines:
            files.append(line.split()[1])
            files.append(line.split()[2])
        setfiles = list(set(files))
        setfiles.sort()

        max_audio = 20 * 40 + 60
        for idx, file in enumerate(setfiles):
            audio = eval_audio[file]
            # Full utterance
            data_1 = torch.FloatTensor(numpy.stack([audio],axis=0)).double()

            # Spliited utterance matrix
            if audio.shape[0] <= max_audio:
                shortage = max_audio - audio.shape[0]
                audio = numpy.pad(audio, (0, shortage), 'wrap')
            feats = []
            startframe = numpy.linspace(0, audio.shape[0]-max_audio, num=5)
            for asf in startframe:
                feats.append(audio[int(asf):int(asf)+max_audio])
            feats = numpy.stack(feats, axis = 0).astype(numpy.float64)
            data_2 = torch.FloatTensor(feats).double()
            # Speaker embeddings
            with torch.no_grad():
                embedding_1 = self.speaker_encoder.forward(data_1, aug = False)
                embedding_1 = F.normalize(embedding_1, p=2, dim=1)
                embedding_2 = self.speaker_encoder.forward(data_2, aug = False)
                embedding_2 = F.normalize(embedding_2, p=2, dim=1)
            embeddings[file] = [embedding_1, embedding_2]
        scores, labels  = [], []

        for line in lines:
            embedding_11, embedding_12 = embeddings[line.split()[1]]
            embedding_21, embedding_22 = embeddings[line.split()[2]]
            # Compute the scores
            score_1 = torch.mean(torch.matmul(embedding_11, embedding_21.T)) # higher is positive
            score_2 = torch.mean(torch.matmul(embedding_12, embedding_22.T))
            score = (score_1 + score_2) / 2
            score = score.detach().cpu().numpy()
            scores.append(score)
            labels.append(int(line.split()[0]))

        # Coumpute EER and minDCF
        EER = tuneThresholdfromScore(scores, labels, [1, 0.1])[1]
        fnrs, fprs, thresholds = ComputeErrorRates(scores, labels)
        minDCF, _ = ComputeMinDcf(fnrs, fprs, thresholds, 0.05, 1, 1)

        return EER, minDCF, scores

    def save_parameters(self, path):
        torch.save(self.state_dict(), path)

    def load_parameters(self, path):
        self_state = self.state_dict()
        loaded_state = torch.load(path)
        for name, param in loaded_state.items():
            origname = name
            if name not in self_state:
                name = name.replace("module.", "")
                if name not in self_state:
                    print("%s is not in the model."%origname)
                    continue
            if self_state[name].size() != loaded_state[origname].size():
                print("Wrong parameter length: %s, model: %s, loaded: %s"%(origname, self_state[name].size(), loaded_state[origname].size()))
                continue
            self_state[name].copy_(param)


# -- synthetic speakers and the run -----------------------------------------------------------
SR, N_MELS, MFA, EMBED, SE_BOTTLENECK = 4000, 20, 48, 24, 8
F0 = [140.0, 230.0, 330.0]
rng = numpy.random.RandomState(79)


def utterance(speaker, n):
    t = numpy.arange(n) / SR
    f0 = F0[speaker] * (1 + 0.03 * rng.randn())
    wave = sum(numpy.sin(2 * numpy.pi * k * f0 * t + rng.rand()) / k for k in range(1, 5))
    return (0.3 * wave + 0.05 * rng.randn(n)).astype(numpy.float32)


def make_loader(n_batches, batch_size):
    loader = []
    for _ in range(n_batches):
        labels = rng.randint(0, len(F0), batch_size)
        data = torch.FloatTensor(numpy.stack([utterance(s, 800) for s in labels]))
        loader.append((data, labels))
    return loader


model = ECAPAModel(lr=0.01, lr_decay=0.9, C=16, n_class=len(F0), m=0.2, s=30, test_step=1)
initialize(model)
model.double()  # after the optimizer took the parameters: they change dtype in place
for epoch in range(1, 3):
    loss, lr, acc = model.train_network(epoch=epoch, loader=make_loader(1, 8))
    record.append([float(loss), lr, float(acc)])
    if RELOAD:
        buffer = io.BytesIO()
        model.save_parameters(buffer)
        buffer.seek(0)
        fresh = ECAPAModel(lr=0.01, lr_decay=0.9, C=16, n_class=len(F0), m=0.2, s=30, test_step=1).double()
        fresh.load_parameters(buffer)
        record.append(params_of(fresh))

eval_audio = {f"id{s}/u{k}.wav": utterance(s, 700 + 200 * k) for s in range(len(F0)) for k in range(2)}
eval_list = [f"{int(a == b)} id{a}/u0.wav id{b}/u1.wav" for a in range(len(F0)) for b in range(len(F0))]
EER, minDCF, scores = model.eval_network(eval_list=eval_list, eval_audio=eval_audio)
record.append(numpy.array(scores, dtype=numpy.float64))
record.append([EER, minDCF])
print("EER %2.2f%%, minDCF %.4f" % (EER, minDCF))
"""

ECAPA_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            nloss.backward()\n            self.optim.step()\n",
        "            grads = nloss.backward()\n            self.optim.step(grads)\n",
    ),
]


@pytest.mark.parametrize("aug, reload", [(True, False), (False, True)], ids=["specaug", "reload"])
def test_ecapa_tdnn_speaker_verification_as_torch(capsys, aug, reload):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        ECAPA_SOURCE,
        ECAPA_STEPS,
        capsys,
        7921,
        initialize=initializer(),
        params_of=params_of,
        AUG=aug,
        RELOAD=reload,
    )
    assert len(theirs) == 2 * (1 * 2 + 1 + int(reload)) + 2
    assert their_log == our_log and their_log.count("Training") == 2
    assert_records_agree(ours, theirs, rtol=1e-6, atol=1e-7)
