# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_60.py`` (the
harness: ``tests/real_ports.py``):

- the Lovász losses of bermanmaxim/LovaszSoftmax (``pytorch/lovasz_losses.py`` whole, as it
  stands) under the training of its demo notebooks (``demo_binary.ipynb``,
  ``demo_multiclass.ipynb``; a small convolutional net on random images, in float64): the
  ``lovasz_grad`` of ``gt_sorted.float().cumsum(0)`` with ``jaccard[1:p] = jaccard[1:p] -
  jaccard[0:-1]``, ``torch.sort(errors, dim=0, descending=True)`` and ``labels[perm]``,
  ``torch.dot(F.relu(errors_sorted), Variable(grad))``, ``probas[valid.nonzero().squeeze()]``
  of the pixels not ignored (label 255), ``classes='present'``, ``'all'`` and a list, the
  sigmoid case (``probas.dim() == 3``), the generator ``mean`` with ``ifilterfalse(isnan,
  ...)``, ``StableBCELoss`` by ``torch.nn.modules.Module``, and the ``iou``/``iou_binary``
  metrics by ``&``/``|`` of masks and ``float(intersection)``.
- ArcFace, CosFace and SphereFace as ronghuaiyang/arcface-pytorch writes them
  (``models/metrics.py``'s ``ArcMarginProduct``, ``AddMarginProduct``, ``SphereProduct``,
  ``models/focal_loss.py``) under ``train.py``'s loop (a small backbone for ``resnet_face18``,
  random features for the faces): ``Parameter(torch.FloatTensor(out, in))`` filled by
  ``nn.init.xavier_uniform_`` and the deprecated ``xavier_uniform``, ``F.linear(F.normalize(
  input), F.normalize(self.weight))``, ``torch.where(cosine > self.th, phi, cosine - self.mm)``,
  ``one_hot.scatter_(1, label.view(-1, 1).long(), 1)``, ``output *= self.s``, the Chebyshev
  ``mlambda`` lambdas, ``Variable(cos_theta.data.acos())``, ``((-1.0) ** k)`` of a tensor,
  ``torch.norm(input, 2, 1)``, the overridden ``__repr__``, SGD over two parameter groups with
  ``StepLR`` stepped first, and the accuracy by ``np.argmax`` of ``output.data.cpu().numpy()``.
  The one-hot tensors are made with ``device='cuda'`` as written: both runs make them on the CPU
  (the harness's one change to the program, in both).
- torchvision's DeepLabV3 (``models/segmentation/deeplabv3.py``'s ``ASPPConv``,
  ``ASPPPooling``, ``ASPP``, ``DeepLabHead``; ``fcn.py``'s ``FCNHead``; ``_utils.py``'s
  ``_SimpleSegmentationModel`` and ``models/_utils.py``'s ``IntermediateLayerGetter``) over a
  small dilated backbone, trained by the segmentation reference's loop (``references/
  segmentation/train.py``'s ``criterion``, parameter groups with the auxiliary head's ``lr *
  10``, ``PolynomialLR``, ``torch.cuda.amp.autocast(enabled=False)``, and ``evaluate`` with
  ``utils.py``'s ``ConfusionMatrix``: ``torch.bincount(inds, minlength=n**2)``,
  ``torch.inference_mode()``, ``self.mat += ...``), in float64: the ``nn.Sequential`` subclass
  iterating ``for mod in self`` in its own ``forward``, ``F.interpolate(..., mode="bilinear",
  align_corners=False)``, ``OrderedDict`` outputs, ``ignore_index=255``. Its dropouts are set to
  ``p = 0`` (their masks are each library's own).
- CBAM and BAM as Jongchan/attention-module writes them (``MODELS/cbam.py``, ``bam.py``,
  ``model_resnet.py``'s CIFAR ``ResNet``, one block a stage) under a few SGD steps of
  ``train_imagenet.py``'s loop: the channel gate over ``'avg'``, ``'max'``, ``'lp'`` and
  ``'lse'`` pools (``F.lp_pool2d``, ``logsumexp_2d``), ``F.sigmoid(...).unsqueeze(2).unsqueeze(
  3).expand_as(x)``, ``ChannelPool``'s ``torch.max(x,1)[0]``, ``nn.Sequential.add_module``
  with ``'gate_c_fc_%d'%i`` names, and the initialization that writes through the state dict:
  ``init.kaiming_normal(self.state_dict()[key], mode='fan_out')`` and
  ``self.state_dict()[key][...] = 0`` (the fix below).

Defects found and fixed: ``model.state_dict()[key][...] = 0`` wrote only into the copy (a
state-dict value's NumPy item assignment did not reach the module, where torch's state-dict
tensors share its storage); ``nn.init`` refused a state-dict value (``'StateValue' object has no
attribute 'backend'``): both now write through to the parameter or buffer.

The lines changed: the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``)
and the ``import`` lines naming ``torch``.
"""

from __future__ import annotations

import re

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

GRADIENT_STEPS = [
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def run_both(source, steps, **names):
    """The records of ``source`` run under torch and of its port under retrograd, each given
    ``initialize`` (torch's weights in both) and the other ``names``."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = source if lib is torch else port(source, steps)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        run_source(text, lib, record=record, initialize=initialize, **names)
        records.append(record)
    return records


# -- the Lovász losses ------------------------------------------------------------------------------------
LOVASZ_SOURCE = '''
# -- pytorch/lovasz_losses.py --
"""
Lovasz-Softmax and Jaccard hinge loss in PyTorch
Maxim Berman 2018 ESAT-PSI KU Leuven (MIT License)
"""

from __future__ import print_function, division

import torch
from torch.autograd import Variable
import torch.nn.functional as F
import numpy as np
try:
    from itertools import  ifilterfalse
except ImportError: # py3k
    from itertools import  filterfalse as ifilterfalse


def lovasz_grad(gt_sorted):
    """
    Computes gradient of the Lovasz extension w.r.t sorted errors
    See Alg. 1 in paper
    """
    p = len(gt_sorted)
    gts = gt_sorted.sum()
    intersection = gts - gt_sorted.float().cumsum(0)
    union = gts + (1 - gt_sorted).float().cumsum(0)
    jaccard = 1. - intersection / union
    if p > 1: # cover 1-pixel case
        jaccard[1:p] = jaccard[1:p] - jaccard[0:-1]
    return jaccard


def iou_binary(preds, labels, EMPTY=1., ignore=None, per_image=True):
    """
    IoU for foreground class
    binary: 1 foreground, 0 background
    """
    if not per_image:
        preds, labels = (preds,), (labels,)
    ious = []
    for pred, label in zip(preds, labels):
        intersection = ((label == 1) & (pred == 1)).sum()
        union = ((label == 1) | ((pred == 1) & (label != ignore))).sum()
        if not union:
            iou = EMPTY
        else:
            iou = float(intersection) / float(union)
        ious.append(iou)
    iou = mean(ious)    # mean accross images if per_image
    return 100 * iou


def iou(preds, labels, C, EMPTY=1., ignore=None, per_image=False):
    """
    Array of IoU for each (non ignored) class
    """
    if not per_image:
        preds, labels = (preds,), (labels,)
    ious = []
    for pred, label in zip(preds, labels):
        iou = []    
        for i in range(C):
            if i != ignore: # The ignored label is sometimes among predicted classes (ENet - CityScapes)
                intersection = ((label == i) & (pred == i)).sum()
                union = ((label == i) | ((pred == i) & (label != ignore))).sum()
                if not union:
                    iou.append(EMPTY)
                else:
                    iou.append(float(intersection) / float(union))
        ious.append(iou)
    ious = [mean(iou) for iou in zip(*ious)] # mean accross images if per_image
    return 100 * np.array(ious)


# --------------------------- BINARY LOSSES ---------------------------


def lovasz_hinge(logits, labels, per_image=True, ignore=None):
    """
    Binary Lovasz hinge loss
      logits: [B, H, W] Variable, logits at each pixel (between -\\\\infty and +\\\\infty)
      labels: [B, H, W] Tensor, binary ground truth masks (0 or 1)
      per_image: compute the loss per image instead of per batch
      ignore: void class id
    """
    if per_image:
        loss = mean(lovasz_hinge_flat(*flatten_binary_scores(log.unsqueeze(0), lab.unsqueeze(0), ignore))
                          for log, lab in zip(logits, labels))
    else:
        loss = lovasz_hinge_flat(*flatten_binary_scores(logits, labels, ignore))
    return loss


def lovasz_hinge_flat(logits, labels):
    """
    Binary Lovasz hinge loss
      logits: [P] Variable, logits at each prediction (between -\\\\infty and +\\\\infty)
      labels: [P] Tensor, binary ground truth labels (0 or 1)
      ignore: label to ignore
    """
    if len(labels) == 0:
        # only void pixels, the gradients should be 0
        return logits.sum() * 0.
    signs = 2. * labels.float() - 1.
    errors = (1. - logits * Variable(signs))
    errors_sorted, perm = torch.sort(errors, dim=0, descending=True)
    perm = perm.data
    gt_sorted = labels[perm]
    grad = lovasz_grad(gt_sorted)
    loss = torch.dot(F.relu(errors_sorted), Variable(grad))
    return loss


def flatten_binary_scores(scores, labels, ignore=None):
    """
    Flattens predictions in the batch (binary case)
    Remove labels equal to 'ignore'
    """
    scores = scores.view(-1)
    labels = labels.view(-1)
    if ignore is None:
        return scores, labels
    valid = (labels != ignore)
    vscores = scores[valid]
    vlabels = labels[valid]
    return vscores, vlabels


class StableBCELoss(torch.nn.modules.Module):
    def __init__(self):
         super(StableBCELoss, self).__init__()
    def forward(self, input, target):
         neg_abs = - input.abs()
         loss = input.clamp(min=0) - input * target + (1 + neg_abs.exp()).log()
         return loss.mean()


def binary_xloss(logits, labels, ignore=None):
    """
    Binary Cross entropy loss
      logits: [B, H, W] Variable, logits at each pixel (between -\\\\infty and +\\\\infty)
      labels: [B, H, W] Tensor, binary ground truth masks (0 or 1)
      ignore: void class id
    """
    logits, labels = flatten_binary_scores(logits, labels, ignore)
    loss = StableBCELoss()(logits, Variable(labels.float()))
    return loss


# --------------------------- MULTICLASS LOSSES ---------------------------


def lovasz_softmax(probas, labels, classes='present', per_image=False, ignore=None):
    """
    Multi-class Lovasz-Softmax loss
      probas: [B, C, H, W] Variable, class probabilities at each prediction (between 0 and 1).
              Interpreted as binary (sigmoid) output with outputs of size [B, H, W].
      labels: [B, H, W] Tensor, ground truth labels (between 0 and C - 1)
      classes: 'all' for all, 'present' for classes present in labels, or a list of classes to average.
      per_image: compute the loss per image instead of per batch
      ignore: void class labels
    """
    if per_image:
        loss = mean(lovasz_softmax_flat(*flatten_probas(prob.unsqueeze(0), lab.unsqueeze(0), ignore), classes=classes)
                          for prob, lab in zip(probas, labels))
    else:
        loss = lovasz_softmax_flat(*flatten_probas(probas, labels, ignore), classes=classes)
    return loss


def lovasz_softmax_flat(probas, labels, classes='present'):
    """
    Multi-class Lovasz-Softmax loss
      probas: [P, C] Variable, class probabilities at each prediction (between 0 and 1)
      labels: [P] Tensor, ground truth labels (between 0 and C - 1)
      classes: 'all' for all, 'present' for classes present in labels, or a list of classes to average.
    """
    if probas.numel() == 0:
        # only void pixels, the gradients should be 0
        return probas * 0.
    C = probas.size(1)
    losses = []
    class_to_sum = list(range(C)) if classes in ['all', 'present'] else classes
    for c in class_to_sum:
        fg = (labels == c).float() # foreground for class c
        if (classes == 'present' and fg.sum() == 0):
            continue
        if C == 1:
            if len(classes) > 1:
                raise ValueError('Sigmoid output possible only with 1 class')
            class_pred = probas[:, 0]
        else:
            class_pred = probas[:, c]
        errors = (Variable(fg) - class_pred).abs()
        errors_sorted, perm = torch.sort(errors, 0, descending=True)
        perm = perm.data
        fg_sorted = fg[perm]
        losses.append(torch.dot(errors_sorted, Variable(lovasz_grad(fg_sorted))))
    return mean(losses)


def flatten_probas(probas, labels, ignore=None):
    """
    Flattens predictions in the batch
    """
    if probas.dim() == 3:
        # assumes output of a sigmoid layer
        B, H, W = probas.size()
        probas = probas.view(B, 1, H, W)
    B, C, H, W = probas.size()
    probas = probas.permute(0, 2, 3, 1).contiguous().view(-1, C)  # B * H * W, C = P, C
    labels = labels.view(-1)
    if ignore is None:
        return probas, labels
    valid = (labels != ignore)
    vprobas = probas[valid.nonzero().squeeze()]
    vlabels = labels[valid]
    return vprobas, vlabels

def xloss(logits, labels, ignore=None):
    """
    Cross entropy loss
    """
    return F.cross_entropy(logits, Variable(labels), ignore_index=255)


# --------------------------- HELPER FUNCTIONS ---------------------------
def isnan(x):
    return x != x


def mean(l, ignore_nan=False, empty=0):
    """
    nanmean compatible with generators.
    """
    l = iter(l)
    if ignore_nan:
        l = ifilterfalse(isnan, l)
    try:
        n = 1
        acc = next(l)
    except StopIteration:
        if empty == 'raise':
            raise ValueError('Empty mean')
        return empty
    for n, v in enumerate(l, 2):
        acc += v
    if n == 1:
        return acc
    return acc / n


# -- the demo notebooks' training (demo_binary.ipynb, demo_multiclass.ipynb), smaller --
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels):
        super(Model, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, out_channels, 1)

    def forward(self, x):
        return self.conv2(F.relu(self.conv1(x)))


def train_binary(images, labels, steps):
    m = Model(3, 1)
    initialize(m)
    optimizer = torch.optim.Adam(m.parameters(), lr=0.05)
    for it in range(steps):
        out = m(images).squeeze(1)
        loss = lovasz_hinge(out, labels, ignore=255) + lovasz_hinge(out, labels, per_image=False) + binary_xloss(out, labels, ignore=255)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(iou_binary((out > 0).long(), labels, ignore=255))
        record.append(iou_binary((out > 0).long(), labels, ignore=255, per_image=False))


def train_multiclass(images, labels, steps):
    m = Model(3, 4)
    initialize(m)
    optimizer = torch.optim.Adam(m.parameters(), lr=0.05)
    for it in range(steps):
        out = m(images)
        probas = F.softmax(out, dim=1)
        loss = lovasz_softmax(probas, labels, ignore=255)
        loss = loss + lovasz_softmax(probas, labels, classes='all', per_image=True, ignore=255)
        loss = loss + lovasz_softmax(probas, labels, classes=[1, 3])
        loss = loss + lovasz_softmax(torch.sigmoid(out[:, 2]), (labels == 2).long(), classes=[1])
        loss = loss + 0.1 * xloss(out, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        record.append(iou(out.argmax(1), labels, C=4, ignore=255))
        record.append(iou(out.argmax(1), labels, C=4, ignore=255, per_image=True))
        record.append(mean([1.0, float('nan'), 3.0], ignore_nan=True))
    record.append({name: p.detach().numpy().copy() for name, p in m.named_parameters()})
'''

LOVASZ_STEPS = [
    *GRADIENT_STEPS,
    ("import torch\nfrom torch.autograd import Variable\nimport torch.nn.functional as F\n",
     "import retrograd as torch\nfrom retrograd.autograd import Variable\nimport retrograd.nn.functional as F\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    # retrograd's Tensor.nonzero() keeps Burn's list of per-dimension indices (an earlier
    # design decision, CHANGELOG): torch's [count, ndim] form is asked for by name
    ("probas[valid.nonzero().squeeze()]", "probas[valid.nonzero(as_tuple=False).squeeze()]"),
]


def test_lovasz_losses_train_as_torch():
    rng = np.random.default_rng(1501)
    images = rng.standard_normal((2, 3, 6, 6))
    labels = rng.integers(0, 4, (2, 6, 6))
    labels[0][labels[0] == 3] = 1  # class 3 only in the second image ("present" per image)
    labels[:, 0, :2] = 255  # void pixels
    binary = (images[:, 0] + 0.3 * rng.standard_normal((2, 6, 6)) > 0).astype(np.int64)
    binary[1, 2:4, 1] = 255
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = LOVASZ_SOURCE if lib is torch else port(LOVASZ_SOURCE, LOVASZ_STEPS)
        names = run_source(text, lib, record=record, initialize=initialize)
        names["train_binary"](lib.tensor(images, dtype=lib.float32), lib.tensor(binary), 4)
        names["train_multiclass"](lib.tensor(images, dtype=lib.float32), lib.tensor(labels), 4)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)


# -- ArcFace, CosFace, SphereFace -----------------------------------------------------------------------
ARCFACE_SOURCE = '''
# -- models/metrics.py --
from __future__ import print_function
from __future__ import division
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Parameter
import math


class ArcMarginProduct(nn.Module):
    r"""Implement of large margin arc distance: :
        Args:
            in_features: size of each input sample
            out_features: size of each output sample
            s: norm of input feature
            m: margin

            cos(theta + m)
        """
    def __init__(self, in_features, out_features, s=30.0, m=0.50, easy_margin=False):
        super(ArcMarginProduct, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.s = s
        self.m = m
        self.weight = Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)

        self.easy_margin = easy_margin
        self.cos_m = math.cos(m)
        self.sin_m = math.sin(m)
        self.th = math.cos(math.pi - m)
        self.mm = math.sin(math.pi - m) * m

    def forward(self, input, label):
        # --------------------------- cos(theta) & phi(theta) ---------------------------
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        sine = torch.sqrt((1.0 - torch.pow(cosine, 2)).clamp(0, 1))
        phi = cosine * self.cos_m - sine * self.sin_m
        if self.easy_margin:
            phi = torch.where(cosine > 0, phi, cosine)
        else:
            phi = torch.where(cosine > self.th, phi, cosine - self.mm)
        # --------------------------- convert label to one-hot ---------------------------
        # one_hot = torch.zeros(cosine.size(), requires_grad=True, device='cuda')
        one_hot = torch.zeros(cosine.size(), device='cuda')
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        # -------------torch.where(out_i = {x_i if condition_i else y_i) -------------
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)  # you can use torch.where if your torch.__version__ is 0.4
        output *= self.s
        # print(output)

        return output


class AddMarginProduct(nn.Module):
    r"""Implement of large margin cosine distance: :
    Args:
        in_features: size of each input sample
        out_features: size of each output sample
        s: norm of input feature
        m: margin
        cos(theta) - m
    """

    def __init__(self, in_features, out_features, s=30.0, m=0.40):
        super(AddMarginProduct, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.s = s
        self.m = m
        self.weight = Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform_(self.weight)

    def forward(self, input, label):
        # --------------------------- cos(theta) & phi(theta) ---------------------------
        cosine = F.linear(F.normalize(input), F.normalize(self.weight))
        phi = cosine - self.m
        # --------------------------- convert label to one-hot ---------------------------
        one_hot = torch.zeros(cosine.size(), device='cuda')
        # one_hot = one_hot.cuda() if cosine.is_cuda else one_hot
        one_hot.scatter_(1, label.view(-1, 1).long(), 1)
        # -------------torch.where(out_i = {x_i if condition_i else y_i) -------------
        output = (one_hot * phi) + ((1.0 - one_hot) * cosine)  # you can use torch.where if your torch.__version__ is 0.4
        output *= self.s
        # print(output)

        return output

    def __repr__(self):
        return self.__class__.__name__ + '(' \\
               + 'in_features=' + str(self.in_features) \\
               + ', out_features=' + str(self.out_features) \\
               + ', s=' + str(self.s) \\
               + ', m=' + str(self.m) + ')'


class SphereProduct(nn.Module):
    r"""Implement of large margin cosine distance: :
    Args:
        in_features: size of each input sample
        out_features: size of each output sample
        m: margin
        cos(m*theta)
    """
    def __init__(self, in_features, out_features, m=4):
        super(SphereProduct, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.m = m
        self.base = 1000.0
        self.gamma = 0.12
        self.power = 1
        self.LambdaMin = 5.0
        self.iter = 0
        self.weight = Parameter(torch.FloatTensor(out_features, in_features))
        nn.init.xavier_uniform(self.weight)

        # duplication formula
        self.mlambda = [
            lambda x: x ** 0,
            lambda x: x ** 1,
            lambda x: 2 * x ** 2 - 1,
            lambda x: 4 * x ** 3 - 3 * x,
            lambda x: 8 * x ** 4 - 8 * x ** 2 + 1,
            lambda x: 16 * x ** 5 - 20 * x ** 3 + 5 * x
        ]

    def forward(self, input, label):
        # lambda = max(lambda_min,base*(1+gamma*iteration)^(-power))
        self.iter += 1
        self.lamb = max(self.LambdaMin, self.base * (1 + self.gamma * self.iter) ** (-1 * self.power))

        # --------------------------- cos(theta) & phi(theta) ---------------------------
        cos_theta = F.linear(F.normalize(input), F.normalize(self.weight))
        cos_theta = cos_theta.clamp(-1, 1)
        cos_m_theta = self.mlambda[self.m](cos_theta)
        theta = Variable(cos_theta.data.acos())
        k = (self.m * theta / 3.14159265).floor()
        phi_theta = ((-1.0) ** k) * cos_m_theta - 2 * k
        NormOfFeature = torch.norm(input, 2, 1)

        # --------------------------- convert label to one-hot ---------------------------
        one_hot = torch.zeros(cos_theta.size())
        one_hot = one_hot.cuda() if cos_theta.is_cuda else one_hot
        one_hot.scatter_(1, label.view(-1, 1), 1)

        # --------------------------- Calculate output ---------------------------
        output = (one_hot * (phi_theta - cos_theta) / (1 + self.lamb)) + cos_theta
        output *= NormOfFeature.view(-1, 1)

        return output

    def __repr__(self):
        return self.__class__.__name__ + '(' \\
               + 'in_features=' + str(self.in_features) \\
               + ', out_features=' + str(self.out_features) \\
               + ', m=' + str(self.m) + ')'


# -- models/focal_loss.py --
class FocalLoss(nn.Module):

    def __init__(self, gamma=0, eps=1e-7):
        super(FocalLoss, self).__init__()
        self.gamma = gamma
        self.eps = eps
        self.ce = torch.nn.CrossEntropyLoss()

    def forward(self, input, target):
        logp = self.ce(input, target)
        p = torch.exp(-logp)
        loss = (1 - p) ** self.gamma * logp
        return loss.mean()


# -- train.py's loop (a small backbone for resnet_face18, its time and speed in the log) --
from torch.utils import data
from torch.optim.lr_scheduler import StepLR
import numpy as np
import time


class Backbone(nn.Module):
    def __init__(self, n_in, n_feature):
        super(Backbone, self).__init__()
        self.fc1 = nn.Linear(n_in, 16)
        self.bn1 = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, n_feature)

    def forward(self, x):
        return self.fc2(F.relu(self.bn1(self.fc1(x))))


def train(opt, trainloader):
    device = torch.device("cpu")
    if opt.loss == 'focal_loss':
        criterion = FocalLoss(gamma=2)
    else:
        criterion = torch.nn.CrossEntropyLoss()

    model = Backbone(opt.n_in, 8)

    if opt.metric == 'add_margin':
        metric_fc = AddMarginProduct(8, opt.num_classes, s=30, m=0.35)
    elif opt.metric == 'arc_margin':
        metric_fc = ArcMarginProduct(8, opt.num_classes, s=30, m=0.5, easy_margin=opt.easy_margin)
    elif opt.metric == 'sphere':
        metric_fc = SphereProduct(8, opt.num_classes, m=4)
    else:
        metric_fc = nn.Linear(8, opt.num_classes)

    # view_model(model, opt.input_shape)
    print(model)
    print(metric_fc)
    initialize(model)
    initialize(metric_fc)
    model.to(device)
    metric_fc.to(device)

    if opt.optimizer == 'sgd':
        optimizer = torch.optim.SGD([{'params': model.parameters()}, {'params': metric_fc.parameters()}],
                                    lr=opt.lr, weight_decay=opt.weight_decay)
    else:
        optimizer = torch.optim.Adam([{'params': model.parameters()}, {'params': metric_fc.parameters()}],
                                     lr=opt.lr, weight_decay=opt.weight_decay)
    scheduler = StepLR(optimizer, step_size=opt.lr_step, gamma=0.1)

    start = time.time()
    for i in range(opt.max_epoch):
        scheduler.step()

        model.train()
        for ii, data in enumerate(trainloader):
            data_input, label = data
            data_input = data_input.to(device)
            label = label.to(device).long()
            feature = model(data_input)
            output = metric_fc(feature, label)
            loss = criterion(output, label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            iters = i * len(trainloader) + ii

            if iters % opt.print_freq == 0:
                output = output.data.cpu().numpy()
                output = np.argmax(output, axis=1)
                label = label.data.cpu().numpy()
                # print(output)
                # print(label)
                acc = np.mean((output == label).astype(int))
                speed = opt.print_freq / (time.time() - start)
                time_str = time.asctime(time.localtime(time.time()))
                print('{} train epoch {} iter {} {} iters/s loss {} acc {}'.format(time_str, i, ii, speed, loss.item(), acc))

                start = time.time()
            record.append(loss.item())
        record.append({name: p.detach().numpy().copy() for name, p in list(model.named_parameters()) + list(metric_fc.named_parameters())})
'''

ARCFACE_STEPS = [
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
]


class Config:
    """config/config.py's ``Config``, the options the loop reads (small sizes)."""

    def __init__(self, **options):
        self.loss, self.easy_margin, self.optimizer = "focal_loss", False, "sgd"
        self.num_classes, self.n_in, self.lr, self.lr_step, self.weight_decay = 5, 6, 0.1, 2, 5e-4
        self.max_epoch, self.print_freq = 3, 2
        self.__dict__.update(options)


def _arcface_data(lib, rng):
    x = rng.standard_normal((12, 6)).astype(np.float32)
    y = rng.integers(0, 5, 12)
    dataset = lib.utils.data.TensorDataset(lib.tensor(x), lib.tensor(y))
    return lib.utils.data.DataLoader(dataset, batch_size=4, shuffle=False)


def test_arcface_margins_train_as_torch(capsys):
    options = [
        {"metric": "arc_margin"},
        {"metric": "arc_margin", "easy_margin": True, "loss": "ce"},
        {"metric": "add_margin", "optimizer": "adam", "lr": 0.01},
        {"metric": "sphere", "loss": "ce"},
    ]  # (its "linear" metric, an nn.Linear called with the labels too, fails in torch as well)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        source = ARCFACE_SOURCE.replace("device='cuda'", "device='cpu'")  # both, on the CPU
        text = source if lib is torch else port(source, ARCFACE_STEPS)
        text = text if lib is torch else text.replace("from torch.", "from retrograd.")
        names = run_source(text, lib, record=record, initialize=initialize)
        names["Variable"] = lib.autograd.Variable  # metrics.py uses it without importing it
        for i, option in enumerate(options):
            names["train"](Config(**option), _arcface_data(lib, np.random.default_rng(i)))
        records.append(record)
        out = capsys.readouterr().out
        logs.append(re.sub(r".* train epoch (.*) \S+ iters/s", r"(time) train epoch \1 (speed) iters/s", out))
    assert logs[0].count("train epoch") == 4 * 5
    mine, theirs = logs[1].splitlines(), logs[0].splitlines()
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs):  # the losses in the log to float32's spread, the rest exactly
        pattern = r"loss (\S+) acc"
        assert re.sub(pattern, "", a) == re.sub(pattern, "", b)
        if "loss" in b:
            np.testing.assert_allclose(float(re.search(pattern, a)[1]), float(re.search(pattern, b)[1]), rtol=1e-5)
    # fc1.bias comes before a batch norm, which removes it: its true gradient is 0, and Adam's
    # steps (add_margin's) follow the rounding noise of each library
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5, skip=("fc1.bias",))
