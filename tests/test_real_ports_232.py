"""Real ports, continued (the harness: ``tests/real_ports.py``): a single-shot detector's data
code written in tensor ops, here in the style of amdegroot/ssd.pytorch (its box utilities,
prior boxes, L2 normalisation, multibox loss, test-time detection and head layout):

- box utilities: corner form, intersections by ``expand``ed ``torch.min``/``torch.max``, the
  IoU matrix, the bipartite assignment with ``index_fill_`` and ``squeeze_``s,
  ``gt_of_prior[prior_of_gt[g]] = g``, ``classes[gt_iou < threshold] = 0`` and ``loc_out[row]
  = ...`` into uninitialized ``torch.Tensor``/``torch.LongTensor`` buffers, offsets to and from
  priors (``boxes[:, :2] -= ...`` in place), a log-sum-exp over ``x.data.max()``, and the
  hand-written NMS with ``boxes.new()`` buffers filled by ``torch.index_select(..., out=)``,
  ``resize_as_`` and ``iou.le(overlap)``;
- prior boxes by ``itertools.product``, ``torch.Tensor(values).view(-1, 4)`` and
  ``clamp_(max=1, min=0)``; an L2 normalisation with an ``nn.Parameter(torch.Tensor(n))``
  set by ``nn.init.constant_``; the multibox loss with hard negative mining by a double
  ``sort``, the masks joined by adding bool tensors ``(pos_c + neg_c).gt(0)``, ``Variable``
  and the legacy ``size_average=False`` (the mining loss viewed per image before
  ``mining[pos] = 0``); the detector (per-class NMS written into ``out[i, c, :count]``, the
  rank-masked ``fill_``); the head layout (``permute(0, 2, 3, 1).contiguous()``,
  ``torch.cat([o.view(o.size(0), -1) for o in locs], 1)``) on a small strided-convolution base,
  trained with SGD and momentum.

The lines changed: the gradient lines (``grads = loss.backward()``, ``optimizer.step(grads)``);
the program imports nothing of torch's (``Variable`` is ``torch.autograd.Variable``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import (
    assert_records_agree,
    initializer,
    port,
    run_source,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

SSD_SOURCE = """
import itertools
import math

Variable = torch.autograd.Variable

cfg = dict(
    num_classes=3,  # background and two object classes
    feature_maps=[4, 2],
    min_dim=32,
    steps=[8, 16],
    min_sizes=[8, 16],
    max_sizes=[16, 28],
    aspect_ratios=[[2], [2, 3]],
    variance=[0.1, 0.2],
    clip=True,
)


# -- box arithmetic, matching and suppression --
def corners(boxes):
    "(cx, cy, w, h) -> (x0, y0, x1, y1)"
    return torch.cat((boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2), 1)


def overlap_area(a, b):
    "(A, 4) and (B, 4) corner boxes -> (A, B) intersection areas (both expanded to (A, B, 2))."
    shape = (a.size(0), b.size(0), 2)
    hi = torch.min(a[:, 2:].unsqueeze(1).expand(*shape), b[:, 2:].unsqueeze(0).expand(*shape))
    lo = torch.max(a[:, :2].unsqueeze(1).expand(*shape), b[:, :2].unsqueeze(0).expand(*shape))
    side = torch.clamp(hi - lo, min=0)
    return side[:, :, 0] * side[:, :, 1]


def iou_matrix(a, b):
    inter = overlap_area(a, b)
    area_a = ((a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])).unsqueeze(1).expand_as(inter)
    area_b = ((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])).unsqueeze(0).expand_as(inter)
    return inter / (area_a + area_b - inter)


def to_offsets(gt, priors, variances):
    "Matched corner boxes as the regression targets relative to their priors."
    centre = ((gt[:, :2] + gt[:, 2:]) / 2 - priors[:, :2]) / (variances[0] * priors[:, 2:])
    size = torch.log((gt[:, 2:] - gt[:, :2]) / priors[:, 2:]) / variances[1]
    return torch.cat([centre, size], 1)


def from_offsets(offsets, priors, variances):
    "Predicted offsets back to corner boxes (written in place, half the size off the centre)."
    boxes = torch.cat(
        (
            priors[:, :2] + offsets[:, :2] * variances[0] * priors[:, 2:],
            priors[:, 2:] * torch.exp(offsets[:, 2:] * variances[1]),
        ),
        1,
    )
    boxes[:, :2] -= boxes[:, 2:] / 2  # the corner, from the centre
    boxes[:, 2:] += boxes[:, :2]
    return boxes


def assign(threshold, gt, priors, variances, labels, loc_out, conf_out, row):
    "Each prior gets its best ground truth; each ground truth keeps its best prior."
    ious = iou_matrix(gt, corners(priors))  # (objects, priors)
    _, prior_of_gt = ious.max(1, keepdim=True)
    gt_iou, gt_of_prior = ious.max(0, keepdim=True)
    gt_of_prior.squeeze_(0)
    gt_iou.squeeze_(0)
    prior_of_gt.squeeze_(1)
    gt_iou.index_fill_(0, prior_of_gt, 2)  # above any threshold
    for g in range(prior_of_gt.size(0)):
        gt_of_prior[prior_of_gt[g]] = g
    classes = labels[gt_of_prior] + 1  # 0 is the background
    classes[gt_iou < threshold] = 0
    loc_out[row] = to_offsets(gt[gt_of_prior], priors, variances)
    conf_out[row] = classes


def stable_lse(x):
    top = x.data.max()  # one constant for the whole batch
    return torch.log(torch.sum(torch.exp(x - top), 1, keepdim=True)) + top


def suppress(boxes, scores, overlap=0.5, top_k=200):
    "Greedy NMS over the top_k scores: indices kept (best first) and their count."
    keep = scores.new(scores.size(0)).zero_().long()  # indices into boxes
    if boxes.numel() == 0:
        return keep
    x0, y0, x1, y1 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    area = torch.mul(x1 - x0, y1 - y0)
    _, order = scores.sort(0)  # ascending: the best is last
    order = order[-top_k:]
    ox0, oy0, ox1, oy1 = boxes.new(), boxes.new(), boxes.new(), boxes.new()
    w, h = boxes.new(), boxes.new()
    count = 0
    while order.numel() > 0:
        best = order[-1]
        keep[count] = best
        count += 1
        if order.size(0) == 1:
            break
        order = order[:-1]
        torch.index_select(x0, 0, order, out=ox0)
        torch.index_select(y0, 0, order, out=oy0)
        torch.index_select(x1, 0, order, out=ox1)
        torch.index_select(y1, 0, order, out=oy1)
        ox0, oy0 = torch.clamp(ox0, min=x0[best]), torch.clamp(oy0, min=y0[best])
        ox1, oy1 = torch.clamp(ox1, max=x1[best]), torch.clamp(oy1, max=y1[best])
        w.resize_as_(ox1)
        h.resize_as_(oy1)
        w, h = torch.clamp(ox1 - ox0, min=0.0), torch.clamp(oy1 - oy0, min=0.0)
        inter = w * h
        iou = inter / (torch.index_select(area, 0, order) - inter + area[best])
        order = order[iou.le(overlap)]
    return keep, count


# -- priors --
class Priors:
    "Default boxes in (cx, cy, w, h), two square ones and two per extra aspect ratio a cell."

    def __init__(self, cfg):
        self.size, self.maps, self.steps = cfg["min_dim"], cfg["feature_maps"], cfg["steps"]
        self.min_sizes, self.max_sizes = cfg["min_sizes"], cfg["max_sizes"]
        self.ratios, self.clip = cfg["aspect_ratios"], cfg["clip"]
        self.variance = cfg["variance"] or [0.1]
        if any(v <= 0 for v in self.variance):
            raise ValueError("variances must be positive")

    def forward(self):
        values = []
        for k, cells in enumerate(self.maps):
            per_side = self.size / self.steps[k]
            small = self.min_sizes[k] / self.size
            large = math.sqrt(small * self.max_sizes[k] / self.size)
            for row, col in itertools.product(range(cells), repeat=2):
                cx, cy = (col + 0.5) / per_side, (row + 0.5) / per_side
                values += [cx, cy, small, small, cx, cy, large, large]
                for r in self.ratios[k]:
                    values += [cx, cy, small * math.sqrt(r), small / math.sqrt(r)]
                    values += [cx, cy, small / math.sqrt(r), small * math.sqrt(r)]
        out = torch.Tensor(values).view(-1, 4)
        if self.clip:
            out.clamp_(max=1, min=0)
        return out


# -- the scaled L2 normalisation of the first source map --
class ChannelL2Norm(nn.Module):
    def __init__(self, channels, scale):
        super().__init__()
        self.eps = 1e-10
        self.weight = nn.Parameter(torch.Tensor(channels))
        nn.init.constant_(self.weight, scale)

    def forward(self, x):
        x = torch.div(x, x.pow(2).sum(dim=1, keepdim=True).sqrt() + self.eps)
        return self.weight.unsqueeze(0).unsqueeze(2).unsqueeze(3).expand_as(x) * x


# -- the loss: smooth L1 on matched priors, cross entropy with 3:1 hard negatives --
class MultiBoxLoss(nn.Module):  # (named as SSD names it)
    def __init__(self, num_classes, threshold, neg_pos):
        super().__init__()
        self.num_classes, self.threshold, self.neg_pos = num_classes, threshold, neg_pos
        self.variance = cfg["variance"]

    def forward(self, predictions, targets):  # (loc, conf, priors), one (k, 5) per image
        loc, conf, priors = predictions
        n = loc.size(0)
        priors = priors[: loc.size(1), :]
        n_priors = priors.size(0)
        loc_t = torch.Tensor(n, n_priors, 4)  # uninitialised: every row is written
        conf_t = torch.LongTensor(n, n_priors)
        for row in range(n):
            gt, labels = targets[row][:, :-1].data, targets[row][:, -1].data
            assign(self.threshold, gt, priors.data, self.variance, labels, loc_t, conf_t, row)
        loc_t, conf_t = Variable(loc_t, requires_grad=False), Variable(conf_t, requires_grad=False)

        pos = conf_t > 0
        pos_loc = pos.unsqueeze(pos.dim()).expand_as(loc)
        loss_l = F.smooth_l1_loss(
            loc[pos_loc].view(-1, 4), loc_t[pos_loc].view(-1, 4), size_average=False
        )

        flat = conf.view(-1, self.num_classes)
        mining = (stable_lse(flat) - flat.gather(1, conf_t.view(-1, 1))).view(n, -1)
        mining[pos] = 0  # positives are not candidates for the negatives
        _, by_loss = mining.sort(1, descending=True)
        _, rank = by_loss.sort(1)
        n_pos = pos.long().sum(1, keepdim=True)
        neg = rank < torch.clamp(self.neg_pos * n_pos, max=pos.size(1) - 1).expand_as(rank)

        pos_c = pos.unsqueeze(2).expand_as(conf)
        neg_c = neg.unsqueeze(2).expand_as(conf)
        picked = conf[(pos_c + neg_c).gt(0)].view(-1, self.num_classes)
        loss_c = F.cross_entropy(picked, conf_t[(pos + neg).gt(0)], size_average=False)

        total = n_pos.data.sum()
        loss_l /= total
        loss_c /= total
        return loss_l, loss_c


# -- test-time decoding --
class Detector:
    def __init__(self, num_classes, top_k, conf_thresh, nms_thresh):
        if nms_thresh <= 0:
            raise ValueError("the NMS threshold must be positive")
        self.num_classes, self.top_k = num_classes, top_k
        self.conf_thresh, self.nms_thresh = conf_thresh, nms_thresh
        self.variance = cfg["variance"]

    def forward(self, loc, conf, priors):
        n = loc.size(0)
        out = torch.zeros(n, self.num_classes, self.top_k, 5)
        per_class = conf.view(n, priors.size(0), self.num_classes).transpose(2, 1)
        for i in range(n):
            boxes_i = from_offsets(loc[i], priors, self.variance)
            scores_i = per_class[i].clone()
            for c in range(1, self.num_classes):  # class 0 is the background
                above = scores_i[c].gt(self.conf_thresh)
                scores = scores_i[c][above]
                if scores.size(0) == 0:
                    continue
                boxes = boxes_i[above.unsqueeze(1).expand_as(boxes_i)].view(-1, 4)
                ids, count = suppress(boxes, scores, self.nms_thresh, self.top_k)
                kept = ids[:count]
                out[i, c, :count] = torch.cat((scores[kept].unsqueeze(1), boxes[kept]), 1)
        flat = out.contiguous().view(n, -1, 5)
        _, order = flat[:, :, 0].sort(1, descending=True)
        _, rank = order.sort(1)
        flat[(rank < self.top_k).unsqueeze(-1).expand_as(flat)].fill_(0)  # (a copy: no effect)
        return out


# -- the network: a small strided base, one extra stage, a loc and a conf head per source --
class TinySSD(nn.Module):
    def __init__(self, phase, num_classes, boxes_per_cell=(4, 6)):
        super().__init__()
        self.phase, self.num_classes = phase, num_classes
        with torch.no_grad():
            self.priors = Variable(Priors(cfg).forward())
        relu = lambda: nn.ReLU(inplace=True)
        self.base = nn.ModuleList([
            nn.Conv2d(3, 8, 3, stride=4, padding=1),
            relu(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            relu(),
            nn.Conv2d(16, 16, 3, padding=1),
            relu(),
        ])
        self.norm = ChannelL2Norm(16, 20)
        self.extras = nn.ModuleList([nn.Conv2d(16, 8, 1), nn.Conv2d(8, 16, 3, stride=2, padding=1)])
        head = lambda per_box: nn.ModuleList(
            [nn.Conv2d(16, k * per_box, 3, padding=1) for k in boxes_per_cell]
        )
        self.loc, self.conf = head(4), head(num_classes)
        if phase == "test":
            self.softmax = nn.Softmax(dim=-1)  # class scores at test time
            self.detector = Detector(num_classes, 10, 0.01, 0.45)

    def forward(self, x):
        for layer in self.base[:4]:
            x = layer(x)
        sources = [self.norm(x)]
        for layer in self.base[4:]:
            x = layer(x)
        for k, layer in enumerate(self.extras):
            x = F.relu(layer(x), inplace=True)
            if k % 2 == 1:
                sources.append(x)
        locs = [head(s).permute(0, 2, 3, 1).contiguous() for s, head in zip(sources, self.loc)]
        confs = [c(s).permute(0, 2, 3, 1).contiguous() for s, c in zip(sources, self.conf)]
        loc = torch.cat([o.view(o.size(0), -1) for o in locs], 1).view(x.size(0), -1, 4)
        conf = torch.cat([o.view(o.size(0), -1) for o in confs], 1)
        conf = conf.view(x.size(0), -1, self.num_classes)
        if self.phase == "test":
            priors = self.priors.type(type(x.data))
            return self.detector.forward(loc, self.softmax(conf), priors)
        return loc, conf, self.priors


def train(images, annotations, record, initialize):  # four SGD steps
    net = TinySSD("train", cfg["num_classes"])
    initialize(net)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-2, momentum=0.9, weight_decay=5e-4)
    criterion = MultiBoxLoss(cfg["num_classes"], 0.5, 3)
    net.train()
    for step in range(4):
        first = 2 * (step % 2)
        batch = torch.tensor(images[first : first + 2])
        targets = [torch.tensor(a) for a in annotations[first : first + 2]]
        optimizer.zero_grad()
        loss_l, loss_c = criterion(net(batch), targets)
        loss = loss_l + loss_c
        loss.backward()
        optimizer.step()
        record.append([t.item() for t in (loss_l, loss_c)])
    record.append({name: t.detach().numpy() for name, t in net.state_dict().items()})


def detect(images, state_dict, record):
    net = TinySSD("test", cfg["num_classes"])
    net.load_state_dict({k: torch.tensor(v) for k, v in state_dict.items()})
    net.eval()
    with torch.no_grad():
        record.append(net(torch.tensor(images[:2])).numpy())
    record.append(net.priors.numpy())
"""

SSD_STEPS = [
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
        program["detect"](images, records[0][4] if records else record[4], record)
        # boxes of equal scores (a source map whose features the ReLU zeroed gives each of its
        # locations the bias alone) come out of ``scores.sort(0)`` in an order torch leaves
        # open (it is not a stable sort): each class's kept boxes are compared as a set
        record[5] = _rows_in_order(record[5])
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
    detections = records[0][-2]
    assert (detections[:, 1:, :, 0] > 0).any()  # some boxes survive the suppression


NMS_SOURCE = SSD_SOURCE.split("# -- priors --")[0]


def test_ssd_pytorch_nms_keeps_what_torch_keeps():
    rng = np.random.default_rng(2321)
    corners = rng.uniform(0, 0.6, (40, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(0.1, 0.4, (40, 2))], 1).astype(
        np.float32
    )
    scores = rng.permutation(40).astype(np.float32) / 40
    kept = []
    for lib in (torch, rg):
        suppress = run_source(NMS_SOURCE, lib)["suppress"]
        keep, count = suppress(lib.tensor(boxes), lib.tensor(scores), 0.3, 25)
        kept.append((keep.numpy().tolist(), count))
    assert kept[1] == kept[0]
    assert 1 < kept[0][1] < 25
