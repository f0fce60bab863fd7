"""Real ports, continued (the harness: ``tests/real_ports.py``): two object detectors' losses
and post-processing, written here in the style of facebookresearch/detr (its box utilities,
Hungarian matcher, set criterion and the minimal detector of its demo notebook) and of
eriklindernoren/PyTorch-YOLOv3 (its detection layer, target assignment and merging NMS):

- DETR: a small CNN standing in for ResNet-50 under ``nn.Transformer``, learned row and column
  positions by ``unsqueeze(0).repeat(H, 1, 1)``, ``torch.rand`` queries; ``unbind(-1)`` box
  conversions, the generalized IoU with ``[:, None, :2]`` broadcasting, the Hungarian matcher
  under ``@torch.no_grad()`` (``flatten(0, 1).softmax(-1)``, ``-prob[:, labels]``,
  ``torch.cdist(p=1)``, ``cost.view(n, q, -1).cpu()``, SciPy's ``linear_sum_assignment`` of
  ``cost.split(sizes, -1)`` pieces, ``torch.as_tensor(i, dtype=torch.int64)``), the
  criterion's ``register_buffer("empty_weight")``, ``classes[where] = matched`` with ``where``
  a pair of index tensors from ``torch.full_like(q, k)``, ``F.cross_entropy(logits.transpose(1,
  2), classes, self.empty_weight)``, ``torch.diag`` of the GIoU matrix, the cardinality error,
  auxiliary losses keyed ``k + f"_{layer}"``, ``scores.topk(k, 1, True, True)`` in the
  accuracy, the weighted sum ``sum(parts[k] * weights[k] for k in parts.keys() if k in
  weights)``, AdamW over two parameter groups with ``StepLR`` and ``clip_grad_norm_``, and the
  demo's confident-box selection (``prob.max(-1).values > threshold`` indexing
  ``out["pred_boxes"][0, keep]``);
- YOLOv3 on a small convolutional head: ``torch.arange(g).repeat(g, 1).t().view([1, 1, g,
  g]).type(torch.FloatTensor)``, ``FloatTensor`` of a list of tuples and of a ``torch.Size``
  (uninitialized, then every channel written from ``x.data``), ``x.new(x.shape)``,
  ``BoolTensor(nB, nA, nG, nG).fill_(0)``, writes through four index tensors (``obj[b, best,
  gj, gi] = 1``), a 0-d tensor, a boolean mask and two 0-d tensors mixed in ``noobj[b[t],
  per_anchor > ignore_thres, gj[t], gi[t]] = 0``, a fifth index in ``tcls[b, best, gj, gi,
  labels] = 1``, ``b, labels = target[:, :2].long().t()`` (unpacking rows), ``ious.max(0)``,
  ``nn.BCELoss`` and ``nn.MSELoss`` on masked selections, the metrics, and the merging NMS
  (``rows[(-score).argsort()]``, ``max(1, keepdim=True)``, ``while dets.size(0)``,
  ``dets[same, 4:5]``, ``dets[0, :4] = ...``, ``dets[~same]``, ``boxes += [dets[0]]``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import retrograd as rg
from real_ports import assert_records_agree, both

# -- DETR ------------------------------------------------------------------------------------------
# (``HungarianMatcher``, ``SetCriterion``, ``MLP``, ``box_cxcywh_to_xyxy``, ``train`` and the
# loss names are also used by tests/test_real_ports_32.py, which trains the full DETR with them)
DETR_SOURCE = """
# -- box arithmetic --
def box_area(b):
    return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])


def box_cxcywh_to_xyxy(boxes):
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def box_xyxy_to_cxcywh(boxes):
    x0, y0, x1, y1 = boxes.unbind(-1)
    return torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], dim=-1)


def pairwise_iou(a, b):
    "IoU and union of every box of a (N, 4) with every box of b (M, 4): two (N, M)."
    top_left = torch.max(a[:, None, :2], b[:, :2])
    bottom_right = torch.min(a[:, None, 2:], b[:, 2:])
    side = (bottom_right - top_left).clamp(min=0)
    inter = side[:, :, 0] * side[:, :, 1]
    union = box_area(a)[:, None] + box_area(b) - inter
    return inter / union, union


def generalized_iou(a, b):
    "IoU minus the share of the enclosing box that the union leaves empty, (N, M)."
    assert (a[:, 2:] >= a[:, :2]).all() and (b[:, 2:] >= b[:, :2]).all()
    iou, union = pairwise_iou(a, b)
    side = (torch.max(a[:, None, 2:], b[:, 2:]) - torch.min(a[:, None, :2], b[:, :2])).clamp(min=0)
    hull = side[:, :, 0] * side[:, :, 1]
    return iou - (hull - union) / hull


@torch.no_grad()
def top_k_accuracy(scores, labels, topk=(1,)):
    "Percent of rows whose label is among the k best scores, for each k."
    if labels.numel() == 0:
        return [torch.zeros([], device=scores.device)]
    _, best = scores.topk(max(topk), 1, True, True)
    hit = best.t().eq(labels.view(1, -1).expand_as(best.t()))
    return [hit[:k].view(-1).float().sum(0).mul_(100.0 / labels.size(0)) for k in topk]


# -- matching predictions to targets --
class HungarianMatcher(nn.Module):  # (named as test_real_ports_32 calls it)
    "A one-to-one assignment of queries to target boxes minimising a weighted cost."

    def __init__(self, cost_class=1.0, cost_bbox=1.0, cost_giou=1.0):
        super().__init__()
        assert cost_class or cost_bbox or cost_giou, "at least one cost must count"
        self.w_class, self.w_box, self.w_giou = cost_class, cost_bbox, cost_giou

    @torch.no_grad()
    def forward(self, outputs, wanted):
        n_images, n_queries = outputs["pred_logits"].shape[:2]
        prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)  # (images * queries, classes)
        pred = outputs["pred_boxes"].flatten(0, 1)
        labels = torch.cat([t["labels"] for t in wanted])
        boxes = torch.cat([t["boxes"] for t in wanted])
        cost = (
            self.w_class * -prob[:, labels]
            + self.w_box * torch.cdist(pred, boxes, p=1)
            + self.w_giou * -generalized_iou(box_cxcywh_to_xyxy(pred), box_cxcywh_to_xyxy(boxes))
        )
        cost = cost.view(n_images, n_queries, -1).cpu()
        per_image = cost.split([len(t["boxes"]) for t in wanted], -1)
        pairs = [linear_sum_assignment(block[k]) for k, block in enumerate(per_image)]
        return [
            (torch.as_tensor(q, dtype=torch.int64), torch.as_tensor(t, dtype=torch.int64))
            for q, t in pairs
        ]


# -- the set loss --
class SetCriterion(nn.Module):  # (named as test_real_ports_32 calls it)
    def __init__(self, num_classes, matcher, weight_dict, eos_coef, losses):  # (its arguments)
        super().__init__()
        self.num_classes, self.matcher = num_classes, matcher
        self.weight_dict, self.losses = weight_dict, losses
        class_weight = torch.ones(num_classes + 1)
        class_weight[-1] = eos_coef  # the "no object" class counts less
        self.register_buffer("empty_weight", class_weight)

    @staticmethod
    def matched_queries(indices):
        "(image index, query index) of every matched query: a pair of index tensors."
        image = torch.cat([torch.full_like(q, k) for k, (q, _) in enumerate(indices)])
        return image, torch.cat([q for q, _ in indices])

    def labels_loss(self, outputs, targets, indices, n_boxes, log=True):
        logits = outputs["pred_logits"]
        where = self.matched_queries(indices)
        matched = torch.cat([t["labels"][j] for t, (_, j) in zip(targets, indices)])
        classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64)
        classes[where] = matched
        out = {"loss_ce": F.cross_entropy(logits.transpose(1, 2), classes, self.empty_weight)}
        if log:
            out["class_error"] = 100 - top_k_accuracy(logits[where], matched)[0]
        return out

    @torch.no_grad()
    def cardinality_loss(self, outputs, targets, indices, n_boxes):
        logits = outputs["pred_logits"]
        predicted = (logits.argmax(-1) != logits.shape[-1] - 1).sum(1)  # not "no object"
        wanted = torch.as_tensor([len(t["labels"]) for t in targets], device=logits.device)
        return {"cardinality_error": F.l1_loss(predicted.float(), wanted.float())}

    def boxes_loss(self, outputs, targets, indices, n_boxes):
        pred = outputs["pred_boxes"][self.matched_queries(indices)]
        gold = torch.cat([t["boxes"][j] for t, (_, j) in zip(targets, indices)], dim=0)
        l1 = F.l1_loss(pred, gold, reduction="none").sum() / n_boxes
        giou = torch.diag(generalized_iou(box_cxcywh_to_xyxy(pred), box_cxcywh_to_xyxy(gold)))
        return {"loss_bbox": l1, "loss_giou": (1 - giou).sum() / n_boxes}

    def compute(self, name, outputs, targets, indices, n_boxes, **kwargs):
        fns = {"labels": self.labels_loss, "cardinality": self.cardinality_loss,
               "boxes": self.boxes_loss}
        return fns[name](outputs, targets, indices, n_boxes, **kwargs)

    def forward(self, outputs, targets):  # -> a dict of named losses
        final = {k: v for k, v in outputs.items() if k != "aux_outputs"}
        indices = self.matcher(final, targets)
        n_boxes = torch.as_tensor([sum(len(t["labels"]) for t in targets)], dtype=torch.float)
        n_boxes = torch.clamp(n_boxes, min=1).item()
        losses = {}
        for name in self.losses:
            losses.update(self.compute(name, outputs, targets, indices, n_boxes))
        for layer, aux in enumerate(outputs.get("aux_outputs", [])):
            indices = self.matcher(aux, targets)  # each decoder layer is matched anew
            for name in self.losses:
                extra = {"log": False} if name == "labels" else {}
                found = self.compute(name, aux, targets, indices, n_boxes, **extra)
                losses.update({k + f"_{layer}": v for k, v in found.items()})
        return losses


class MLP(nn.Module):
    "Linear layers with ReLUs between them."

    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):  # as DETR calls it
        super().__init__()
        widths = [input_dim] + [hidden_dim] * (num_layers - 1) + [output_dim]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


# -- a minimal detector: a small CNN, nn.Transformer, learned positions and queries --
class TinyBackbone(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        self.stages = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1),
            nn.Conv2d(width, width, 3, padding=1),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1),
        )

    def forward(self, x):
        return self.stages(self.stem(x))


class MiniDETR(nn.Module):
    def __init__(self, num_classes, hidden=256, heads=8, enc_layers=6, dec_layers=6, width=8,
                 queries=100):
        super().__init__()
        self.backbone = TinyBackbone(width)
        self.proj = nn.Conv2d(2 * width, hidden, 1)
        self.transformer = nn.Transformer(hidden, heads, enc_layers, dec_layers,
                                          dim_feedforward=2 * hidden, dropout=0.0)
        self.classify = nn.Linear(hidden, num_classes + 1)  # + "no object"
        self.box = MLP(hidden, hidden, 4, 3)
        self.queries = nn.Parameter(torch.rand(queries, hidden))
        self.rows = nn.Parameter(torch.rand(50, hidden // 2))
        self.cols = nn.Parameter(torch.rand(50, hidden // 2))

    def forward(self, images):
        feats = self.proj(self.backbone(images))
        H, W = feats.shape[-2:]
        pos = torch.cat(
            [
                self.cols[:W].unsqueeze(0).repeat(H, 1, 1),
                self.rows[:H].unsqueeze(1).repeat(1, W, 1),
            ],
            dim=-1,
        ).flatten(0, 1).unsqueeze(1)  # (H * W, 1, hidden)
        src = pos + 0.1 * feats.flatten(2).permute(2, 0, 1)
        h = self.transformer(src, self.queries.unsqueeze(1)).transpose(0, 1)
        return {"pred_logits": self.classify(h), "pred_boxes": self.box(h).sigmoid()}


def to_pixels(boxes, size):
    w, h = size
    return box_cxcywh_to_xyxy(boxes) * torch.tensor([w, h, w, h], dtype=torch.float32)


def confident_boxes(image, size, model, threshold=0.7):
    out = model(image)
    prob = out["pred_logits"].softmax(-1)[0, :, :-1]
    keep = prob.max(-1).values > threshold
    return prob[keep], to_pixels(out["pred_boxes"][0, keep], size)


def train(model, criterion, batches, lr=1e-3):  # (the name test_real_ports_32 calls)
    records = []
    head = [p for n, p in model.named_parameters() if "backbone" not in n and p.requires_grad]
    body = [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad]
    optimizer = torch.optim.AdamW(
        [{"params": head}, {"params": body, "lr": lr / 10}], lr=lr, weight_decay=1e-4
    )
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 2)
    model.train()
    criterion.train()
    weights = criterion.weight_dict
    for images, targets in batches:
        parts = criterion(model(images), targets)
        loss = sum(parts[k] * weights[k] for k in parts.keys() if k in weights)
        records.append({k: v.item() for k, v in parts.items()})
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)
        optimizer.step()
        schedule.step()
        records.append(loss.item())
    records.append({k: w.detach().numpy().copy() for k, w in model.named_parameters()})
    return records
"""

DETR_STEP = [
    ("        loss.backward()\n", "        grads = loss.backward()\n"),
    (
        "clip_grad_norm_(model.parameters(), max_norm",
        "clip_grad_norm_(grads, model.parameters(), max_norm",
    ),
    (
        "        optimizer.step()\n        schedule",
        "        optimizer.step(grads)\n        schedule",
    ),
]


def test_detr_matcher_criterion_and_training_match_torch():
    theirs, ours = both(DETR_SOURCE, DETR_STEP, linear_sum_assignment=linear_sum_assignment)
    rng = np.random.default_rng(28)
    images = [rng.standard_normal((1, 3, 32, 32)) for _ in range(4)]
    targets = []
    for k in range(4):
        n = 1 + k % 3
        centers = rng.uniform(0.25, 0.75, (n, 2))
        sizes = rng.uniform(0.1, 0.4, (n, 2))
        targets.append((rng.integers(0, 3, n), np.concatenate([centers, sizes], 1)))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        model = names["MiniDETR"](3, hidden=16, heads=2, enc_layers=1, dec_layers=2, queries=5)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        matcher = names["HungarianMatcher"](cost_class=1, cost_bbox=5, cost_giou=2)
        weight_dict = {"loss_ce": 1, "loss_bbox": 5, "loss_giou": 2}
        criterion = names["SetCriterion"](
            3, matcher, weight_dict, eos_coef=0.1, losses=["labels", "boxes", "cardinality"]
        )
        batches = [
            (
                lib.tensor(img, dtype=lib.float32),
                [
                    {
                        "labels": lib.tensor(labels, dtype=lib.int64),
                        "boxes": lib.tensor(boxes, dtype=lib.float32),
                    }
                ],
            )
            for img, (labels, boxes) in zip(images, targets)
        ]
        record = names["train"](model, criterion, batches)
        # the matching itself, and the auxiliary losses over the decoder's first layer
        outputs = model(batches[0][0])
        two = [batches[0][1][0], batches[2][1][0]]
        both_outputs = {k: lib.cat([v, v.flip(1)]) for k, v in outputs.items()}
        record.append([[i.tolist(), j.tolist()] for i, j in matcher(both_outputs, two)])
        aux = dict(both_outputs, aux_outputs=[{k: v * 0.9 for k, v in both_outputs.items()}])
        record.append({k: v.item() for k, v in criterion(aux, two).items()})
        model.eval()
        with lib.no_grad():
            probas, boxes = names["confident_boxes"](
                batches[1][0], (640, 480), model, threshold=0.2
            )
        record.extend([probas.numpy(), boxes.numpy()])
        # the key projection's bias has a zero gradient (the softmax over keys ignores a
        # constant added to every key): AdamW's steps there follow rounding noise; compare the
        # query and value parts only
        for name, value in record[-5].items():
            if name.endswith("in_proj_bias"):
                record[-5][name] = np.concatenate([value[:16], value[32:]])
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=2e-4, atol=2e-5)


def test_detr_generalized_box_iou_matches_torch_in_float64():
    theirs, ours = both(DETR_SOURCE, [], linear_sum_assignment=linear_sum_assignment)
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.uniform(0, 1, (5, 2)), rng.uniform(0.1, 0.5, (5, 2))], 1)
    b = np.concatenate([rng.uniform(0, 1, (3, 2)), rng.uniform(0.1, 0.5, (3, 2))], 1)
    results = []
    for lib, names in ((torch, theirs), (rg, ours)):
        x = lib.tensor(a, dtype=lib.float64, requires_grad=True)
        y = lib.tensor(b, dtype=lib.float64)
        giou = names["generalized_iou"](
            names["box_cxcywh_to_xyxy"](x), names["box_cxcywh_to_xyxy"](y)
        )
        back = names["box_xyxy_to_cxcywh"](names["box_cxcywh_to_xyxy"](x))
        loss = (giou * lib.arange(15, dtype=lib.float64).view(5, 3)).sum()
        if lib is torch:
            loss.backward()
            grad = x.grad.numpy()
        else:
            grad = x.grad(loss.backward()).numpy()
        results.append([giou.detach().numpy(), back.detach().numpy(), grad])
    assert_records_agree(results[1], results[0], rtol=1e-10, atol=1e-12)


# -- YOLOv3 ----------------------------------------------------------------------------------------
YOLO_SOURCE = """
def centre_to_corners(boxes):
    "(..., 4) centre/size boxes to corners, written into a tensor made by boxes.new."
    out = boxes.new(boxes.shape)
    half_w, half_h = boxes[..., 2] / 2, boxes[..., 3] / 2
    out[..., 0] = boxes[..., 0] - half_w
    out[..., 1] = boxes[..., 1] - half_h
    out[..., 2] = boxes[..., 0] + half_w
    out[..., 3] = boxes[..., 1] + half_h
    return out


def anchor_iou(anchor, wh):
    "IoU of one anchor's (w, h) with each (w, h) row of wh, both boxes centred together."
    w, h = wh.t()
    inter = torch.min(anchor[0], w) * torch.min(anchor[1], h)
    return inter / (anchor[0] * anchor[1] + 1e-16 + w * h - inter)


def box_iou(a, b, corners=True):
    "Row-by-row IoU of two (N, 4) sets, in pixel units (the +1 of inclusive pixel boxes)."
    if corners:
        ax0, ay0, ax1, ay1 = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
        bx0, by0, bx1, by1 = b[:, 0], b[:, 1], b[:, 2], b[:, 3]
    else:
        ax0, ax1 = a[:, 0] - a[:, 2] / 2, a[:, 0] + a[:, 2] / 2
        ay0, ay1 = a[:, 1] - a[:, 3] / 2, a[:, 1] + a[:, 3] / 2
        bx0, bx1 = b[:, 0] - b[:, 2] / 2, b[:, 0] + b[:, 2] / 2
        by0, by1 = b[:, 1] - b[:, 3] / 2, b[:, 1] + b[:, 3] / 2
    iw = torch.clamp(torch.min(ax1, bx1) - torch.max(ax0, bx0) + 1, min=0)
    ih = torch.clamp(torch.min(ay1, by1) - torch.max(ay0, by0) + 1, min=0)
    inter = iw * ih
    area_a = (ax1 - ax0 + 1) * (ay1 - ay0 + 1)
    area_b = (bx1 - bx0 + 1) * (by1 - by0 + 1)
    return inter / (area_a + area_b - inter + 1e-16)


def merge_nms(pred, conf_thres=0.5, nms_thres=0.4):
    "Per image: (x0, y0, x1, y1, objectness, class score, class) rows, overlapping ones merged."
    pred[..., :4] = centre_to_corners(pred[..., :4])
    kept = [None] * len(pred)
    for k, rows in enumerate(pred):
        rows = rows[rows[:, 4] >= conf_thres]
        if not rows.size(0):
            continue
        score = rows[:, 4] * rows[:, 5:].max(1)[0]
        rows = rows[(-score).argsort()]
        best_score, best_class = rows[:, 5:].max(1, keepdim=True)
        dets = torch.cat((rows[:, :5], best_score.float(), best_class.float()), 1)
        boxes = []
        while dets.size(0):
            same = box_iou(dets[0, :4].unsqueeze(0), dets[:, :4]) > nms_thres
            same = same & (dets[0, -1] == dets[:, -1])
            w = dets[same, 4:5]
            # the first box becomes the objectness-weighted mean of the boxes it absorbs
            dets[0, :4] = (w * dets[same, :4]).sum(0) / w.sum()
            boxes += [dets[0]]
            dets = dets[~same]
        if boxes:
            kept[k] = torch.stack(boxes)
    return kept


def assign_targets(pred_boxes, pred_cls, target, anchors, ignore_thres):
    "Which cell and anchor answers for each target, and what it should predict there."
    nB, nA, nG = pred_boxes.size(0), pred_boxes.size(1), pred_boxes.size(2)
    nC = pred_cls.size(-1)
    shape = (nB, nA, nG, nG)
    obj = torch.BoolTensor(*shape).fill_(0)
    noobj = torch.BoolTensor(*shape).fill_(1)
    cls_hit = torch.FloatTensor(*shape).fill_(0)
    ious_at = torch.FloatTensor(*shape).fill_(0)
    tx, ty, tw, th = [torch.FloatTensor(*shape).fill_(0) for _ in range(4)]
    tcls = torch.FloatTensor(nB, nA, nG, nG, nC).fill_(0)

    boxes = target[:, 2:6] * nG  # in grid cells
    xy, wh = boxes[:, :2], boxes[:, 2:]
    ious = torch.stack([anchor_iou(a, wh) for a in anchors])  # (anchors, targets)
    _, best = ious.max(0)
    b, labels = target[:, :2].long().t()
    gx, gy = xy.t()
    gi, gj = xy.long().t()
    obj[b, best, gj, gi] = 1
    noobj[b, best, gj, gi] = 0
    for t, per_anchor in enumerate(ious.t()):  # other anchors that fit well are not negatives
        noobj[b[t], per_anchor > ignore_thres, gj[t], gi[t]] = 0
    tx[b, best, gj, gi] = gx - gx.floor()
    ty[b, best, gj, gi] = gy - gy.floor()
    tw[b, best, gj, gi] = torch.log(wh[:, 0] / anchors[best][:, 0] + 1e-16)
    th[b, best, gj, gi] = torch.log(wh[:, 1] / anchors[best][:, 1] + 1e-16)
    tcls[b, best, gj, gi, labels] = 1
    cls_hit[b, best, gj, gi] = (pred_cls[b, best, gj, gi].argmax(-1) == labels).float()
    ious_at[b, best, gj, gi] = box_iou(pred_boxes[b, best, gj, gi], boxes, corners=False)
    return ious_at, cls_hit, obj, noobj, tx, ty, tw, th, tcls, obj.float()


class DetectionHead(nn.Module):
    "Decodes (B, anchors * (5 + classes), G, G) into boxes; with targets, also the YOLO loss."

    def __init__(self, anchors, num_classes, image_size=416):
        super().__init__()
        self.anchors, self.num_anchors, self.num_classes = anchors, len(anchors), num_classes
        self.ignore_thres, self.obj_scale, self.noobj_scale = 0.5, 1, 100
        self.mse, self.bce = nn.MSELoss(), nn.BCELoss()
        self.img_dim, self.grid = image_size, 0
        self.metrics = {}

    def set_grid(self, g):
        self.grid, self.stride = g, self.img_dim / g
        cells = torch.arange(g).repeat(g, 1)
        self.cx = cells.view([1, 1, g, g]).type(torch.FloatTensor)
        self.cy = cells.t().view([1, 1, g, g]).type(torch.FloatTensor)
        scaled = [(w / self.stride, h / self.stride) for w, h in self.anchors]
        self.anchors_in_cells = torch.FloatTensor(scaled)
        self.aw = self.anchors_in_cells[:, 0:1].view((1, self.num_anchors, 1, 1))
        self.ah = self.anchors_in_cells[:, 1:2].view((1, self.num_anchors, 1, 1))

    def forward(self, x, targets=None, img_dim=None):  # img_dim: the input's size
        self.img_dim = img_dim
        n, g = x.size(0), x.size(2)
        p = x.view(n, self.num_anchors, self.num_classes + 5, g, g)
        p = p.permute(0, 1, 3, 4, 2).contiguous()  # (n, anchors, g, g, 5 + classes)
        sx, sy = torch.sigmoid(p[..., 0]), torch.sigmoid(p[..., 1])
        w, h = p[..., 2], p[..., 3]
        conf, cls = torch.sigmoid(p[..., 4]), torch.sigmoid(p[..., 5:])
        if g != self.grid:
            self.set_grid(g)
        boxes = torch.FloatTensor(p[..., :4].shape)  # uninitialised, every channel written below
        boxes[..., 0] = sx.data + self.cx
        boxes[..., 1] = sy.data + self.cy
        boxes[..., 2] = torch.exp(w.data) * self.aw
        boxes[..., 3] = torch.exp(h.data) * self.ah
        flat_cls = cls.view(n, -1, self.num_classes)
        out = torch.cat((boxes.view(n, -1, 4) * self.stride, conf.view(n, -1, 1), flat_cls), -1)
        if targets is None:
            return out, 0
        ious, cls_hit, obj, noobj, tx, ty, tw, th, tcls, tconf = assign_targets(
            boxes, cls, targets, self.anchors_in_cells, self.ignore_thres
        )
        parts = {
            "x": self.mse(sx[obj], tx[obj]),
            "y": self.mse(sy[obj], ty[obj]),
            "w": self.mse(w[obj], tw[obj]),
            "h": self.mse(h[obj], th[obj]),
            "conf": self.obj_scale * self.bce(conf[obj], tconf[obj])
            + self.noobj_scale * self.bce(conf[noobj], tconf[noobj]),
            "cls": self.bce(cls[obj], tcls[obj]),
        }
        loss = sum(parts.values())
        confident = (conf > 0.5).float()
        found = confident * cls_hit * tconf
        hits50, hits75 = (ious > 0.5).float() * found, (ious > 0.75).float() * found
        self.metrics = {"loss": loss.detach().cpu().item()}
        self.metrics.update({k: v.detach().cpu().item() for k, v in parts.items()})
        self.metrics.update(
            cls_acc=(100 * cls_hit[obj].mean()).item(),
            recall50=(hits50.sum() / (obj.sum() + 1e-16)).item(),
            recall75=(hits75.sum() / (obj.sum() + 1e-16)).item(),
            precision=(hits50.sum() / (confident.sum() + 1e-16)).item(),
            conf_obj=conf[obj].mean().item(),
            conf_noobj=conf[noobj].mean().item(),
            grid_size=g,
        )
        return out, loss


class SmallYolo(nn.Module):
    def __init__(self, anchors, num_classes, image_size):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(8, momentum=0.9, eps=1e-5),
            nn.LeakyReLU(0.1),
            nn.Conv2d(8, len(anchors) * (num_classes + 5), 3, stride=2, padding=1),
        )
        self.head = DetectionHead(anchors, num_classes, image_size)

    def forward(self, images, targets=None):
        return self.head(self.body(images), targets, images.shape[2])


def fit(model, batches, conf_thres, nms_thres):
    records = []
    optimizer = torch.optim.Adam(model.parameters())  # the defaults
    for images, targets in batches:
        model.train()
        _, loss = model(images, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        records.append(dict(model.head.metrics))
        model.eval()
        with torch.no_grad():
            found = merge_nms(model(images)[0], conf_thres=conf_thres, nms_thres=nms_thres)
        records.append([d.numpy() if d is not None else np.zeros((0, 7)) for d in found])
    records.append({k: w.detach().numpy().copy() for k, w in model.named_parameters()})
    return records
"""

YOLO_STEP = [
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_yolov3_targets_losses_and_nms_match_torch():
    theirs, ours = both(YOLO_SOURCE, YOLO_STEP)
    rng = np.random.default_rng(280)
    batches = []
    for _ in range(3):
        imgs = rng.standard_normal((2, 3, 16, 16))
        rows = []
        for b in range(2):
            for _ in range(2):
                rows.append(
                    [b, rng.integers(0, 3), *rng.uniform(0.1, 0.9, 2), *rng.uniform(0.1, 0.5, 2)]
                )
        batches.append((imgs, np.array(rows)))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        model = names["SmallYolo"]([(3, 4), (6, 5), (9, 10)], 3, 16)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        data = [
            (lib.tensor(x, dtype=lib.float32), lib.tensor(t, dtype=lib.float32)) for x, t in batches
        ]
        records.append(names["fit"](model, data, conf_thres=0.45, nms_thres=0.3))
    # the detections kept are the same boxes (in the same order) in both runs
    for mine, reference in zip(records[1][1::2], records[0][1::2]):
        if isinstance(reference, list):
            assert [m.shape for m in mine] == [r.shape for r in reference]
    assert any(r.shape[0] > 0 for r in records[0][1]), "the NMS keeps some boxes"

    def flat(recs):
        return [np.concatenate([a.ravel() for a in r]) if isinstance(r, list) else r for r in recs]

    assert_records_agree(flat(records[1]), flat(records[0]), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("corners", [True, False])
def test_yolov3_bbox_iou_gradients_match_torch(corners):
    theirs, ours = both(YOLO_SOURCE, [])
    rng = np.random.default_rng(11)
    a = rng.uniform(1, 5, (4, 4)) + np.array([0, 0, 5, 5])
    b = rng.uniform(1, 5, (4, 4)) + np.array([0, 0, 5, 5])
    results = []
    for lib, names in ((torch, theirs), (rg, ours)):
        x = lib.tensor(a, dtype=lib.float64, requires_grad=True)
        iou = names["box_iou"](x, lib.tensor(b, dtype=lib.float64), corners=corners)
        loss = (iou * lib.tensor([1.0, -2.0, 3.0, 0.5], dtype=lib.float64)).sum()
        grad = loss.backward() if lib is rg else (loss.backward(), x.grad)[1]
        results.append([iou.detach().numpy(), (x.grad(grad) if lib is rg else grad).numpy()])
    assert_records_agree(results[1], results[0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "args",
    [(), (2, 3), ((4, 5),), ([1.0, 2.5],), "shape", "size"],
    ids=["empty", "sizes", "tuple-data", "list-data", "shape", "size"],
)
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_legacy_new_and_shape_sizes_match_torch(args, dtype):
    """``x.new(...)`` (refused before) makes what torch's makes in ``x``'s dtype: sizes or a
    ``Size`` a tensor of that shape, a tuple or list the data; ``x.shape`` and ``x.size()`` are
    ``Size``s, so ``FloatTensor(x.shape)`` is a shape where ``FloatTensor((2, 3))`` is data."""
    made = []
    for lib in (torch, rg):
        x = lib.zeros(2, 3, dtype=getattr(lib, dtype))
        given = (x.shape,) if args == "shape" else (x.size(),) if args == "size" else args
        y = x.new(*given)
        legacy = lib.FloatTensor(*given) if given else lib.FloatTensor()
        made.append((y.shape, str(y.dtype).split(".")[-1], legacy.shape, str(legacy.dtype)))
        if given and given[0] != (4, 5) and given[0] != [1.0, 2.5]:
            y.fill_(1)
        made.append(np.asarray(y.numpy(), dtype=np.float64).tolist())
        assert isinstance(x.shape, tuple) and isinstance(x.size(), lib.Size)
    (t_shape, t_dtype, t_legacy, _), t_values, (r_shape, r_dtype, r_legacy, _), r_values = made
    assert tuple(r_shape) == tuple(t_shape) and r_dtype == t_dtype
    assert tuple(r_legacy) == tuple(t_legacy) and r_values == t_values
