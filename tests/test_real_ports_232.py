# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a single-shot detector's data code written in tensor ops.

- amdegroot/ssd.pytorch as it writes it: ``layers/box_utils.py`` (``point_form``,
  ``intersect`` by ``expand``ed ``torch.min``/``torch.max``, ``jaccard``, ``match`` with its
  bipartite ``index_fill_`` and ``squeeze_``s, ``best_truth_idx[best_prior_idx[j]] = j``,
  ``conf[best_truth_overlap < threshold] = 0`` and ``loc_t[idx] = loc`` into uninitialized
  ``torch.Tensor``/``torch.LongTensor`` buffers, ``encode``/``decode``, ``log_sum_exp`` over
  ``x.data.max()``, the hand-written ``nms`` with ``boxes.new()`` buffers filled by
  ``torch.index_select(..., out=)``, ``resize_as_`` and ``IoU.le(overlap)``);
  ``layers/functions/prior_box.py``'s ``PriorBox`` (``itertools.product``, ``torch.Tensor(mean)
  .view(-1, 4)``, ``clamp_(max=1, min=0)``); ``layers/modules/l2norm.py``; ``layers/modules/
  multibox_loss.py``'s ``MultiBoxLoss`` with hard negative mining by a double ``sort``, the
  masks joined by adding bool tensors ``(pos_idx+neg_idx).gt(0)``, ``Variable`` and the legacy
  ``size_average=False`` (with the repository's well-known fix of viewing ``loss_c`` per image
  before ``loss_c[pos] = 0``, which torch >= 0.4 needs); ``layers/functions/detection.py``'s
  ``Detect`` (per-class ``nms`` written into ``output[i, cl, :count]``, the rank-masked
  ``fill_``); ``ssd.py``'s head layout (``permute(0, 2, 3, 1).contiguous()``, ``torch.cat([o
  .view(o.size(0), -1) for o in loc], 1)``) on a small strided-convolution base (VGG's 512-1024
  channels left out), trained by ``train.py``'s loop with SGD and momentum.

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
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
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


SSD_SOURCE = """
from itertools import product as product
from math import sqrt as sqrt

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
from torch.autograd import Variable

cfg = {
    'num_classes': 3,
    'feature_maps': [4, 2],
    'min_dim': 32,
    'steps': [8, 16],
    'min_sizes': [8, 16],
    'max_sizes': [16, 28],
    'aspect_ratios': [[2], [2, 3]],
    'variance': [0.1, 0.2],
    'clip': True,
    'name': 'TINY',
}


# -- layers/box_utils.py ----------------------------------------------------------------
def point_form(boxes):
    \"\"\" Convert prior_boxes to (xmin, ymin, xmax, ymax)
    representation for comparison to point form ground truth data.
    Args:
        boxes: (tensor) center-size default boxes from priorbox layers.
    Return:
        boxes: (tensor) Converted xmin, ymin, xmax, ymax form of boxes.
    \"\"\"
    return torch.cat((boxes[:, :2] - boxes[:, 2:]/2,     # xmin, ymin
                     boxes[:, :2] + boxes[:, 2:]/2), 1)  # xmax, ymax


def intersect(box_a, box_b):
    \"\"\" We resize both tensors to [A,B,2] without new malloc:
    [A,2] -> [A,1,2] -> [A,B,2]
    [B,2] -> [1,B,2] -> [A,B,2]
    Then we compute the area of intersect between box_a and box_b.
    \"\"\"
    A = box_a.size(0)
    B = box_b.size(0)
    max_xy = torch.min(box_a[:, 2:].unsqueeze(1).expand(A, B, 2),
                       box_b[:, 2:].unsqueeze(0).expand(A, B, 2))
    min_xy = torch.max(box_a[:, :2].unsqueeze(1).expand(A, B, 2),
                       box_b[:, :2].unsqueeze(0).expand(A, B, 2))
    inter = torch.clamp((max_xy - min_xy), min=0)
    return inter[:, :, 0] * inter[:, :, 1]


def jaccard(box_a, box_b):
    \"\"\"Compute the jaccard overlap of two sets of boxes.\"\"\"
    inter = intersect(box_a, box_b)
    area_a = ((box_a[:, 2]-box_a[:, 0]) *
              (box_a[:, 3]-box_a[:, 1])).unsqueeze(1).expand_as(inter)  # [A,B]
    area_b = ((box_b[:, 2]-box_b[:, 0]) *
              (box_b[:, 3]-box_b[:, 1])).unsqueeze(0).expand_as(inter)  # [A,B]
    union = area_a + area_b - inter
    return inter / union  # [A,B]


def match(threshold, truths, priors, variances, labels, loc_t, conf_t, idx):
    \"\"\"Match each prior box with the ground truth box of the highest jaccard
    overlap, encode the bounding boxes, then return the matched indices
    corresponding to both confidence and location preds.\"\"\"
    # jaccard index
    overlaps = jaccard(
        truths,
        point_form(priors)
    )
    # (Bipartite Matching)
    # [1,num_objects] best prior for each ground truth
    best_prior_overlap, best_prior_idx = overlaps.max(1, keepdim=True)
    # [1,num_priors] best ground truth for each prior
    best_truth_overlap, best_truth_idx = overlaps.max(0, keepdim=True)
    best_truth_idx.squeeze_(0)
    best_truth_overlap.squeeze_(0)
    best_prior_idx.squeeze_(1)
    best_prior_overlap.squeeze_(1)
    best_truth_overlap.index_fill_(0, best_prior_idx, 2)  # ensure best prior
    # TODO refactor: index  best_prior_idx with long tensor
    # ensure every gt matches with its prior of max overlap
    for j in range(best_prior_idx.size(0)):
        best_truth_idx[best_prior_idx[j]] = j
    matches = truths[best_truth_idx]          # Shape: [num_priors,4]
    conf = labels[best_truth_idx] + 1         # Shape: [num_priors]
    conf[best_truth_overlap < threshold] = 0  # label as background
    loc = encode(matches, priors, variances)
    loc_t[idx] = loc    # [num_priors,4] encoded offsets to learn
    conf_t[idx] = conf  # [num_priors] top class label for each prior


def encode(matched, priors, variances):
    \"\"\"Encode the variances from the priorbox layers into the ground truth boxes
    we have matched (based on jaccard overlap) with the prior boxes.\"\"\"

    # dist b/t match center and prior's center
    g_cxcy = (matched[:, :2] + matched[:, 2:])/2 - priors[:, :2]
    # encode variance
    g_cxcy /= (variances[0] * priors[:, 2:])
    # match wh / prior wh
    g_wh = (matched[:, 2:] - matched[:, :2]) / priors[:, 2:]
    g_wh = torch.log(g_wh) / variances[1]
    # return target for smooth_l1_loss
    return torch.cat([g_cxcy, g_wh], 1)  # [num_priors,4]


# Adapted from https://github.com/Hakuyume/chainer-ssd
def decode(loc, priors, variances):
    \"\"\"Decode locations from predictions using priors to undo
    the encoding we did for offset regression at train time.\"\"\"

    boxes = torch.cat((
        priors[:, :2] + loc[:, :2] * variances[0] * priors[:, 2:],
        priors[:, 2:] * torch.exp(loc[:, 2:] * variances[1])), 1)
    boxes[:, :2] -= boxes[:, 2:] / 2
    boxes[:, 2:] += boxes[:, :2]
    return boxes


def log_sum_exp(x):
    \"\"\"Utility function for computing log_sum_exp while determining
    This will be used to determine unaveraged confidence loss across
    all examples in a batch.
    Args:
        x (Variable(tensor)): conf_preds from conf layers
    \"\"\"
    x_max = x.data.max()
    return torch.log(torch.sum(torch.exp(x-x_max), 1, keepdim=True)) + x_max


# Original author: Francisco Massa:
# https://github.com/fmassa/object-detection.torch
# Ported to PyTorch by Max deGroot (02/01/2017)
def nms(boxes, scores, overlap=0.5, top_k=200):
    \"\"\"Apply non-maximum suppression at test time to avoid detecting too many
    overlapping bounding boxes for a given object.\"\"\"

    keep = scores.new(scores.size(0)).zero_().long()
    if boxes.numel() == 0:
        return keep
    x1 = boxes[:, 0]
    y1 = boxes[:, 1]
    x2 = boxes[:, 2]
    y2 = boxes[:, 3]
    area = torch.mul(x2 - x1, y2 - y1)
    v, idx = scores.sort(0)  # sort in ascending order
    # I = I[v >= 0.01]
    idx = idx[-top_k:]  # indices of the top-k largest vals
    xx1 = boxes.new()
    yy1 = boxes.new()
    xx2 = boxes.new()
    yy2 = boxes.new()
    w = boxes.new()
    h = boxes.new()

    # keep = torch.Tensor()
    count = 0
    while idx.numel() > 0:
        i = idx[-1]  # index of current largest val
        # keep.append(i)
        keep[count] = i
        count += 1
        if idx.size(0) == 1:
            break
        idx = idx[:-1]  # remove kept element from view
        # load bboxes of next highest vals
        torch.index_select(x1, 0, idx, out=xx1)
        torch.index_select(y1, 0, idx, out=yy1)
        torch.index_select(x2, 0, idx, out=xx2)
        torch.index_select(y2, 0, idx, out=yy2)
        # store element-wise max with next highest score
        xx1 = torch.clamp(xx1, min=x1[i])
        yy1 = torch.clamp(yy1, min=y1[i])
        xx2 = torch.clamp(xx2, max=x2[i])
        yy2 = torch.clamp(yy2, max=y2[i])
        w.resize_as_(xx2)
        h.resize_as_(yy2)
        w = xx2 - xx1
        h = yy2 - yy1
        # check sizes of xx1 and xx2.. after each iteration
        w = torch.clamp(w, min=0.0)
        h = torch.clamp(h, min=0.0)
        inter = w*h
        # IoU = i / (area(a) + area(b) - i)
        rem_areas = torch.index_select(area, 0, idx)  # load remaining areas)
        union = (rem_areas - inter) + area[i]
        IoU = inter/union  # store result in iou
        # keep only elements with an IoU <= overlap
        idx = idx[IoU.le(overlap)]
    return keep, count


# -- layers/functions/prior_box.py ------------------------------------------------------
class PriorBox(object):
    \"\"\"Compute priorbox coordinates in center-offset form for each source
    feature map.
    \"\"\"
    def __init__(self, cfg):
        super(PriorBox, self).__init__()
        self.image_size = cfg['min_dim']
        # number of priors for feature map location (either 4 or 6)
        self.num_priors = len(cfg['aspect_ratios'])
        self.variance = cfg['variance'] or [0.1]
        self.feature_maps = cfg['feature_maps']
        self.min_sizes = cfg['min_sizes']
        self.max_sizes = cfg['max_sizes']
        self.steps = cfg['steps']
        self.aspect_ratios = cfg['aspect_ratios']
        self.clip = cfg['clip']
        self.version = cfg['name']
        for v in self.variance:
            if v <= 0:
                raise ValueError('Variances must be greater than 0')

    def forward(self):
        mean = []
        for k, f in enumerate(self.feature_maps):
            for i, j in product(range(f), repeat=2):
                f_k = self.image_size / self.steps[k]
                # unit center x,y
                cx = (j + 0.5) / f_k
                cy = (i + 0.5) / f_k

                # aspect_ratio: 1
                # rel size: min_size
                s_k = self.min_sizes[k]/self.image_size
                mean += [cx, cy, s_k, s_k]

                # aspect_ratio: 1
                # rel size: sqrt(s_k * s_(k+1))
                s_k_prime = sqrt(s_k * (self.max_sizes[k]/self.image_size))
                mean += [cx, cy, s_k_prime, s_k_prime]

                # rest of aspect ratios
                for ar in self.aspect_ratios[k]:
                    mean += [cx, cy, s_k*sqrt(ar), s_k/sqrt(ar)]
                    mean += [cx, cy, s_k/sqrt(ar), s_k*sqrt(ar)]
        # back to torch land
        output = torch.Tensor(mean).view(-1, 4)
        if self.clip:
            output.clamp_(max=1, min=0)
        return output


# -- layers/modules/l2norm.py -----------------------------------------------------------
class L2Norm(nn.Module):
    def __init__(self,n_channels, scale):
        super(L2Norm,self).__init__()
        self.n_channels = n_channels
        self.gamma = scale or None
        self.eps = 1e-10
        self.weight = nn.Parameter(torch.Tensor(self.n_channels))
        self.reset_parameters()

    def reset_parameters(self):
        init.constant_(self.weight,self.gamma)

    def forward(self, x):
        norm = x.pow(2).sum(dim=1, keepdim=True).sqrt()+self.eps
        #x /= norm
        x = torch.div(x,norm)
        out = self.weight.unsqueeze(0).unsqueeze(2).unsqueeze(3).expand_as(x) * x
        return out


# -- layers/modules/multibox_loss.py ----------------------------------------------------
class MultiBoxLoss(nn.Module):
    \"\"\"SSD Weighted Loss Function\"\"\"

    def __init__(self, num_classes, overlap_thresh, prior_for_matching,
                 bkg_label, neg_mining, neg_pos, neg_overlap, encode_target,
                 use_gpu=True):
        super(MultiBoxLoss, self).__init__()
        self.use_gpu = use_gpu
        self.num_classes = num_classes
        self.threshold = overlap_thresh
        self.background_label = bkg_label
        self.encode_target = encode_target
        self.use_prior_for_matching = prior_for_matching
        self.do_neg_mining = neg_mining
        self.negpos_ratio = neg_pos
        self.neg_overlap = neg_overlap
        self.variance = cfg['variance']

    def forward(self, predictions, targets):
        \"\"\"Multibox Loss\"\"\"
        loc_data, conf_data, priors = predictions
        num = loc_data.size(0)
        priors = priors[:loc_data.size(1), :]
        num_priors = (priors.size(0))
        num_classes = self.num_classes

        # match priors (default boxes) and ground truth boxes
        loc_t = torch.Tensor(num, num_priors, 4)
        conf_t = torch.LongTensor(num, num_priors)
        for idx in range(num):
            truths = targets[idx][:, :-1].data
            labels = targets[idx][:, -1].data
            defaults = priors.data
            match(self.threshold, truths, defaults, self.variance, labels,
                  loc_t, conf_t, idx)
        if self.use_gpu:
            loc_t = loc_t.cuda()
            conf_t = conf_t.cuda()
        # wrap targets
        loc_t = Variable(loc_t, requires_grad=False)
        conf_t = Variable(conf_t, requires_grad=False)

        pos = conf_t > 0
        num_pos = pos.sum(dim=1, keepdim=True)

        # Localization Loss (Smooth L1)
        # Shape: [batch,num_priors,4]
        pos_idx = pos.unsqueeze(pos.dim()).expand_as(loc_data)
        loc_p = loc_data[pos_idx].view(-1, 4)
        loc_t = loc_t[pos_idx].view(-1, 4)
        loss_l = F.smooth_l1_loss(loc_p, loc_t, size_average=False)

        # Compute max conf across batch for hard negative mining
        batch_conf = conf_data.view(-1, self.num_classes)
        loss_c = log_sum_exp(batch_conf) - batch_conf.gather(1, conf_t.view(-1, 1))

        # Hard Negative Mining
        loss_c = loss_c.view(num, -1)
        loss_c[pos] = 0  # filter out pos boxes for now
        _, loss_idx = loss_c.sort(1, descending=True)
        _, idx_rank = loss_idx.sort(1)
        num_pos = pos.long().sum(1, keepdim=True)
        num_neg = torch.clamp(self.negpos_ratio*num_pos, max=pos.size(1)-1)
        neg = idx_rank < num_neg.expand_as(idx_rank)

        # Confidence Loss Including Positive and Negative Examples
        pos_idx = pos.unsqueeze(2).expand_as(conf_data)
        neg_idx = neg.unsqueeze(2).expand_as(conf_data)
        conf_p = conf_data[(pos_idx+neg_idx).gt(0)].view(-1, self.num_classes)
        targets_weighted = conf_t[(pos+neg).gt(0)]
        loss_c = F.cross_entropy(conf_p, targets_weighted, size_average=False)

        # Sum of losses: L(x,c,l,g) = (Lconf(x,c) + Lloc(x,c,l,g)) / N

        N = num_pos.data.sum()
        loss_l /= N
        loss_c /= N
        return loss_l, loss_c


# -- layers/functions/detection.py ------------------------------------------------------
class Detect(object):
    \"\"\"At test time, Detect is the final layer of SSD.\"\"\"
    def __init__(self, num_classes, bkg_label, top_k, conf_thresh, nms_thresh):
        self.num_classes = num_classes
        self.background_label = bkg_label
        self.top_k = top_k
        # Parameters used in nms.
        self.nms_thresh = nms_thresh
        if nms_thresh <= 0:
            raise ValueError('nms_threshold must be non negative.')
        self.conf_thresh = conf_thresh
        self.variance = cfg['variance']

    def forward(self, loc_data, conf_data, prior_data):
        num = loc_data.size(0)  # batch size
        num_priors = prior_data.size(0)
        output = torch.zeros(num, self.num_classes, self.top_k, 5)
        conf_preds = conf_data.view(num, num_priors,
                                    self.num_classes).transpose(2, 1)

        # Decode predictions into bboxes.
        for i in range(num):
            decoded_boxes = decode(loc_data[i], prior_data, self.variance)
            # For each class, perform nms
            conf_scores = conf_preds[i].clone()

            for cl in range(1, self.num_classes):
                c_mask = conf_scores[cl].gt(self.conf_thresh)
                scores = conf_scores[cl][c_mask]
                if scores.size(0) == 0:
                    continue
                l_mask = c_mask.unsqueeze(1).expand_as(decoded_boxes)
                boxes = decoded_boxes[l_mask].view(-1, 4)
                # idx of highest scoring and non-overlapping boxes per class
                ids, count = nms(boxes, scores, self.nms_thresh, self.top_k)
                output[i, cl, :count] = \\
                    torch.cat((scores[ids[:count]].unsqueeze(1),
                               boxes[ids[:count]]), 1)
        flt = output.contiguous().view(num, -1, 5)
        _, idx = flt[:, :, 0].sort(1, descending=True)
        _, rank = idx.sort(1)
        flt[(rank < self.top_k).unsqueeze(-1).expand_as(flt)].fill_(0)
        return output


# -- ssd.py's head over a small base ----------------------------------------------------
class SSD(nn.Module):
    def __init__(self, phase, size, base, extras, head, num_classes):
        super(SSD, self).__init__()
        self.phase = phase
        self.num_classes = num_classes
        self.cfg = cfg
        self.priorbox = PriorBox(self.cfg)
        with torch.no_grad():
            self.priors = Variable(self.priorbox.forward())
        self.size = size

        # SSD network
        self.vgg = nn.ModuleList(base)
        # Layer learns to scale the l2 normalized features from conv4_3
        self.L2Norm = L2Norm(16, 20)
        self.extras = nn.ModuleList(extras)

        self.loc = nn.ModuleList(head[0])
        self.conf = nn.ModuleList(head[1])

        if phase == 'test':
            self.softmax = nn.Softmax(dim=-1)
            self.detect = Detect(num_classes, 0, 10, 0.01, 0.45)

    def forward(self, x):
        sources = list()
        loc = list()
        conf = list()

        # apply vgg up to conv4_3 relu
        for k in range(4):
            x = self.vgg[k](x)

        s = self.L2Norm(x)
        sources.append(s)

        # apply vgg up to fc7
        for k in range(4, len(self.vgg)):
            x = self.vgg[k](x)

        # apply extra layers and cache source layer outputs
        for k, v in enumerate(self.extras):
            x = F.relu(v(x), inplace=True)
            if k % 2 == 1:
                sources.append(x)

        # apply multibox head to source layers
        for (x, l, c) in zip(sources, self.loc, self.conf):
            loc.append(l(x).permute(0, 2, 3, 1).contiguous())
            conf.append(c(x).permute(0, 2, 3, 1).contiguous())

        loc = torch.cat([o.view(o.size(0), -1) for o in loc], 1)
        conf = torch.cat([o.view(o.size(0), -1) for o in conf], 1)
        if self.phase == "test":
            output = self.detect.forward(
                loc.view(loc.size(0), -1, 4),                   # loc preds
                self.softmax(conf.view(conf.size(0), -1,
                             self.num_classes)),                # conf preds
                self.priors.type(type(x.data))                  # default boxes
            )
        else:
            output = (
                loc.view(loc.size(0), -1, 4),
                conf.view(conf.size(0), -1, self.num_classes),
                self.priors
            )
        return output


def build_ssd(phase, size=32, num_classes=3):
    base = [nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(inplace=True)]
    extras = [nn.Conv2d(16, 8, 1), nn.Conv2d(8, 16, 3, stride=2, padding=1)]
    mbox = [4, 6]
    head = ([nn.Conv2d(16, mbox[0] * 4, 3, padding=1), nn.Conv2d(16, mbox[1] * 4, 3, padding=1)],
            [nn.Conv2d(16, mbox[0] * num_classes, 3, padding=1),
             nn.Conv2d(16, mbox[1] * num_classes, 3, padding=1)])
    return SSD(phase, size, base, extras, head, num_classes)


# -- train.py ---------------------------------------------------------------------------
def train(images, annotations, record, initialize):
    ssd_net = build_ssd('train', cfg['min_dim'], cfg['num_classes'])
    net = ssd_net
    initialize(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9,
                                weight_decay=5e-4)
    criterion = MultiBoxLoss(cfg['num_classes'], 0.5, True, 0, True, 3, 0.5,
                             False, False)
    net.train()
    for iteration in range(4):
        batch = iteration % 2
        images_b = torch.tensor(images[batch * 2:batch * 2 + 2])
        targets = [torch.tensor(ann) for ann in annotations[batch * 2:batch * 2 + 2]]
        out = net(images_b)
        # backprop
        optimizer.zero_grad()
        loss_l, loss_c = criterion(out, targets)
        loss = loss_l + loss_c
        loss.backward()
        optimizer.step()
        record.append([loss_l.item(), loss_c.item()])
    record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})


def test(images, state_dict, record):
    test_net = build_ssd('test', cfg['min_dim'], cfg['num_classes'])
    test_net.load_state_dict({k: torch.tensor(v) for k, v in state_dict.items()})
    test_net.eval()
    with torch.no_grad():
        detections = test_net(torch.tensor(images[:2]))
    record.append(detections.numpy())
    record.append(test_net.priors.numpy())
"""

SSD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.nn.init as init\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.nn.init as init\n",
    ),
    ("from torch.autograd import Variable", "from retrograd.autograd import Variable"),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def _annotations(rng):
    annotations = []
    for n_objects in (2, 1, 3, 2):
        corners = rng.uniform(0.05, 0.55, (n_objects, 2))
        sizes = rng.uniform(0.2, 0.45, (n_objects, 2))
        labels = rng.integers(0, 2, (n_objects, 1))
        annotations.append(np.concatenate([corners, corners + sizes, labels], 1).astype(np.float32))
    return annotations


def _rows_in_order(detections):
    """``detections[i, cl]``'s rows (score, box) sorted by score, then by the box, rounded so
    that the rounding of either run does not reorder them."""
    ordered = detections.copy()
    for i in range(detections.shape[0]):
        for cl in range(detections.shape[1]):
            rows = detections[i, cl]
            keys = np.round(rows, 4)
            ordered[i, cl] = rows[np.lexsort(keys.T[::-1])]
    return ordered


def test_ssd_pytorch_multibox_loss_trains_and_detects_as_torch(capsys):
    rng = np.random.default_rng(2320)
    images = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    annotations = _annotations(rng)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = SSD_SOURCE if lib is torch else port(SSD_SOURCE, SSD_STEPS)
        program = run_source(text, lib)
        program["train"](images, annotations, record, initialize)
        # the detector of torch's trained weights in both runs: the scores of the barely
        # trained classes lie close, and the rounding of each run's own training reorders them
        program["test"](images, records[0][4] if records else record[4], record)
        # boxes of equal scores (a source map whose features the ReLU zeroed gives each of its
        # locations the bias alone) come out of ``scores.sort(0)`` in an order torch leaves
        # open (it is not a stable sort): each class's kept boxes are compared as a set
        record[5] = _rows_in_order(record[5])
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
    detections = records[0][-2]
    assert (detections[:, 1:, :, 0] > 0).any()  # some boxes survive the suppression


NMS_SOURCE = SSD_SOURCE.split("# -- layers/functions/prior_box.py")[0]


def test_ssd_pytorch_nms_keeps_what_torch_keeps():
    rng = np.random.default_rng(2321)
    corners = rng.uniform(0, 0.6, (40, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(0.1, 0.4, (40, 2))], 1).astype(
        np.float32
    )
    scores = rng.permutation(40).astype(np.float32) / 40
    kept = []
    for lib in (torch, rg):
        text = NMS_SOURCE if lib is torch else port(NMS_SOURCE, SSD_STEPS[:2])
        keep, count = run_source(text, lib)["nms"](lib.tensor(boxes), lib.tensor(scores), 0.3, 25)
        kept.append((keep.numpy().tolist(), count))
    assert kept[1] == kept[0]
    assert 1 < kept[0][1] < 25
