# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
two object detectors' losses and post-processing, as their repositories write them:

- DETR (facebookresearch/detr ``util/box_ops.py``, ``models/matcher.py``, ``SetCriterion`` and
  ``MLP`` of ``models/detr.py``, ``accuracy`` of ``util/misc.py``) over the minimal DETR of its
  ``detr_demo`` notebook (``DETRdemo``: ``nn.Transformer`` on a ``conv`` of a small backbone
  standing in for ResNet-50, learned ``row_embed``/``col_embed`` positions by ``unsqueeze(0)
  .repeat(H, 1, 1)``, ``torch.rand`` queries), small: ``unbind(-1)`` box conversions, the
  generalized IoU with ``[:, None, :2]`` broadcasting, the Hungarian matcher under
  ``@torch.no_grad()`` (``flatten(0, 1).softmax(-1)``, ``-out_prob[:, tgt_ids]``,
  ``torch.cdist(p=1)``, ``C.view(bs, num_queries, -1).cpu()``, SciPy's
  ``linear_sum_assignment`` of ``C.split(sizes, -1)`` pieces, ``torch.as_tensor(i,
  dtype=torch.int64)``), the criterion's ``register_buffer('empty_weight')``,
  ``target_classes[idx] = target_classes_o`` with ``idx`` a pair of index tensors from
  ``torch.full_like(src, i)``, ``F.cross_entropy(src_logits.transpose(1, 2), target_classes,
  self.empty_weight)``, ``torch.diag`` of the GIoU matrix, the cardinality error, auxiliary
  losses keyed ``k + f'_{i}'``, ``output.topk(maxk, 1, True, True)`` in ``accuracy``, the
  weighted sum ``sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in
  weight_dict)`` and the demo's ``detect`` (``probas.max(-1).values > 0.7`` indexing
  ``outputs['pred_boxes'][0, keep]``);
- YOLOv3 as eriklindernoren/PyTorch-YOLOv3 wrote it (``models.py``'s ``YOLOLayer``,
  ``utils/utils.py``'s ``build_targets``, ``bbox_iou``, ``bbox_wh_iou``, ``xywh2xyxy``,
  ``non_max_suppression``), on a small convolutional head: ``torch.arange(g).repeat(g,
  1).t().view([1, 1, g, g]).type(FloatTensor)``, ``FloatTensor`` of a list of tuples and of a
  ``torch.Size`` (uninitialized, then every channel written from ``x.data``), ``BoolTensor(nB,
  nA, nG, nG).fill_(0)``, writes through four index tensors (``obj_mask[b, best_n, gj, gi] =
  1``), a 0-d tensor, a boolean mask and two 0-d tensors mixed in ``noobj_mask[b[i],
  anchor_ious > ignore_thres, gj[i], gi[i]] = 0``, a fifth index in ``tcls[b, best_n, gj, gi,
  target_labels] = 1``, ``b, target_labels = target[:, :2].long().t()`` (unpacking rows),
  ``ious.max(0)``, ``nn.BCELoss`` and ``nn.MSELoss`` on masked selections, the metrics, and the
  merging NMS (``image_pred[(-score).argsort()]``, ``max(1, keepdim=True)``, ``while
  detections.size(0)``, ``detections[invalid, 4:5]``, ``detections[0, :4] = ...``,
  ``detections[~invalid]``, ``keep_boxes += [detections[0]]``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linear_sum_assignment

import retrograd as rg
from real_ports import assert_records_agree, both

# -- DETR -------------------------------------------------------------------------------------------
DETR_SOURCE = """
# util/box_ops.py
def box_area(boxes):  # torchvision.ops.boxes.box_area
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])


def box_cxcywh_to_xyxy(x):
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h),
         (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def box_xyxy_to_cxcywh(x):
    x0, y0, x1, y1 = x.unbind(-1)
    b = [(x0 + x1) / 2, (y0 + y1) / 2,
         (x1 - x0), (y1 - y0)]
    return torch.stack(b, dim=-1)


# modified from torchvision to also return the union
def box_iou(boxes1, boxes2):
    area1 = box_area(boxes1)
    area2 = box_area(boxes2)

    lt = torch.max(boxes1[:, None, :2], boxes2[:, :2])  # [N,M,2]
    rb = torch.min(boxes1[:, None, 2:], boxes2[:, 2:])  # [N,M,2]

    wh = (rb - lt).clamp(min=0)  # [N,M,2]
    inter = wh[:, :, 0] * wh[:, :, 1]  # [N,M]

    union = area1[:, None] + area2 - inter

    iou = inter / union
    return iou, union


def generalized_box_iou(boxes1, boxes2):
    \"\"\"
    Generalized IoU from https://giou.stanford.edu/

    The boxes should be in [x0, y0, x1, y1] format

    Returns a [N, M] pairwise matrix, where N = len(boxes1)
    and M = len(boxes2)
    \"\"\"
    # degenerate boxes gives inf / nan results
    # so do an early check
    assert (boxes1[:, 2:] >= boxes1[:, :2]).all()
    assert (boxes2[:, 2:] >= boxes2[:, :2]).all()
    iou, union = box_iou(boxes1, boxes2)

    lt = torch.min(boxes1[:, None, :2], boxes2[:, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[:, 2:])

    wh = (rb - lt).clamp(min=0)  # [N,M,2]
    area = wh[:, :, 0] * wh[:, :, 1]

    return iou - (area - union) / area


# util/misc.py
@torch.no_grad()
def accuracy(output, target, topk=(1,)):
    \"\"\"Computes the precision@k for the specified values of k\"\"\"
    if target.numel() == 0:
        return [torch.zeros([], device=output.device)]
    maxk = max(topk)
    batch_size = target.size(0)

    _, pred = output.topk(maxk, 1, True, True)
    pred = pred.t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))

    res = []
    for k in topk:
        correct_k = correct[:k].view(-1).float().sum(0)
        res.append(correct_k.mul_(100.0 / batch_size))
    return res


# models/matcher.py
class HungarianMatcher(nn.Module):
    def __init__(self, cost_class: float = 1, cost_bbox: float = 1, cost_giou: float = 1):
        super().__init__()
        self.cost_class = cost_class
        self.cost_bbox = cost_bbox
        self.cost_giou = cost_giou
        assert cost_class != 0 or cost_bbox != 0 or cost_giou != 0, "all costs cant be 0"

    @torch.no_grad()
    def forward(self, outputs, targets):
        bs, num_queries = outputs["pred_logits"].shape[:2]

        # We flatten to compute the cost matrices in a batch
        out_prob = outputs["pred_logits"].flatten(0, 1).softmax(-1)  # [batch_size * num_queries, num_classes]
        out_bbox = outputs["pred_boxes"].flatten(0, 1)  # [batch_size * num_queries, 4]

        # Also concat the target labels and boxes
        tgt_ids = torch.cat([v["labels"] for v in targets])
        tgt_bbox = torch.cat([v["boxes"] for v in targets])

        # Compute the classification cost. Contrary to the loss, we don't use the NLL,
        # but approximate it in 1 - proba[target class].
        # The 1 is a constant that doesn't change the matching, it can be ommitted.
        cost_class = -out_prob[:, tgt_ids]

        # Compute the L1 cost between boxes
        cost_bbox = torch.cdist(out_bbox, tgt_bbox, p=1)

        # Compute the giou cost betwen boxes
        cost_giou = -generalized_box_iou(box_cxcywh_to_xyxy(out_bbox), box_cxcywh_to_xyxy(tgt_bbox))

        # Final cost matrix
        C = self.cost_bbox * cost_bbox + self.cost_class * cost_class + self.cost_giou * cost_giou
        C = C.view(bs, num_queries, -1).cpu()

        sizes = [len(v["boxes"]) for v in targets]
        indices = [linear_sum_assignment(c[i]) for i, c in enumerate(C.split(sizes, -1))]
        return [(torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)) for i, j in indices]


# models/detr.py
class SetCriterion(nn.Module):
    def __init__(self, num_classes, matcher, weight_dict, eos_coef, losses):
        super().__init__()
        self.num_classes = num_classes
        self.matcher = matcher
        self.weight_dict = weight_dict
        self.eos_coef = eos_coef
        self.losses = losses
        empty_weight = torch.ones(self.num_classes + 1)
        empty_weight[-1] = self.eos_coef
        self.register_buffer('empty_weight', empty_weight)

    def loss_labels(self, outputs, targets, indices, num_boxes, log=True):
        assert 'pred_logits' in outputs
        src_logits = outputs['pred_logits']

        idx = self._get_src_permutation_idx(indices)
        target_classes_o = torch.cat([t["labels"][J] for t, (_, J) in zip(targets, indices)])
        target_classes = torch.full(src_logits.shape[:2], self.num_classes,
                                    dtype=torch.int64, device=src_logits.device)
        target_classes[idx] = target_classes_o

        loss_ce = F.cross_entropy(src_logits.transpose(1, 2), target_classes, self.empty_weight)
        losses = {'loss_ce': loss_ce}

        if log:
            # TODO this should probably be a separate loss, not hacked in this one here
            losses['class_error'] = 100 - accuracy(src_logits[idx], target_classes_o)[0]
        return losses

    @torch.no_grad()
    def loss_cardinality(self, outputs, targets, indices, num_boxes):
        pred_logits = outputs['pred_logits']
        device = pred_logits.device
        tgt_lengths = torch.as_tensor([len(v["labels"]) for v in targets], device=device)
        # Count the number of predictions that are NOT "no-object" (which is the last class)
        card_pred = (pred_logits.argmax(-1) != pred_logits.shape[-1] - 1).sum(1)
        card_err = F.l1_loss(card_pred.float(), tgt_lengths.float())
        losses = {'cardinality_error': card_err}
        return losses

    def loss_boxes(self, outputs, targets, indices, num_boxes):
        assert 'pred_boxes' in outputs
        idx = self._get_src_permutation_idx(indices)
        src_boxes = outputs['pred_boxes'][idx]
        target_boxes = torch.cat([t['boxes'][i] for t, (_, i) in zip(targets, indices)], dim=0)

        loss_bbox = F.l1_loss(src_boxes, target_boxes, reduction='none')

        losses = {}
        losses['loss_bbox'] = loss_bbox.sum() / num_boxes

        loss_giou = 1 - torch.diag(generalized_box_iou(
            box_cxcywh_to_xyxy(src_boxes),
            box_cxcywh_to_xyxy(target_boxes)))
        losses['loss_giou'] = loss_giou.sum() / num_boxes
        return losses

    def _get_src_permutation_idx(self, indices):
        # permute predictions following indices
        batch_idx = torch.cat([torch.full_like(src, i) for i, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for (src, _) in indices])
        return batch_idx, src_idx

    def _get_tgt_permutation_idx(self, indices):
        # permute targets following indices
        batch_idx = torch.cat([torch.full_like(tgt, i) for i, (_, tgt) in enumerate(indices)])
        tgt_idx = torch.cat([tgt for (_, tgt) in indices])
        return batch_idx, tgt_idx

    def get_loss(self, loss, outputs, targets, indices, num_boxes, **kwargs):
        loss_map = {
            'labels': self.loss_labels,
            'cardinality': self.loss_cardinality,
            'boxes': self.loss_boxes,
        }
        assert loss in loss_map, f'do you really want to compute {loss} loss?'
        return loss_map[loss](outputs, targets, indices, num_boxes, **kwargs)

    def forward(self, outputs, targets):
        outputs_without_aux = {k: v for k, v in outputs.items() if k != 'aux_outputs'}

        # Retrieve the matching between the outputs of the last layer and the targets
        indices = self.matcher(outputs_without_aux, targets)

        # Compute the average number of target boxes accross all nodes, for normalization purposes
        num_boxes = sum(len(t["labels"]) for t in targets)
        num_boxes = torch.as_tensor([num_boxes], dtype=torch.float, device=next(iter(outputs.values())).device)
        num_boxes = torch.clamp(num_boxes / 1, min=1).item()

        # Compute all the requested losses
        losses = {}
        for loss in self.losses:
            losses.update(self.get_loss(loss, outputs, targets, indices, num_boxes))

        # In case of auxiliary losses, we repeat this process with the output of each intermediate layer.
        if 'aux_outputs' in outputs:
            for i, aux_outputs in enumerate(outputs['aux_outputs']):
                indices = self.matcher(aux_outputs, targets)
                for loss in self.losses:
                    if loss == 'masks':
                        # Intermediate masks losses are too costly to compute, we ignore them.
                        continue
                    kwargs = {}
                    if loss == 'labels':
                        # Logging is enabled only for the last layer
                        kwargs = {'log': False}
                    l_dict = self.get_loss(loss, aux_outputs, targets, indices, num_boxes, **kwargs)
                    l_dict = {k + f'_{i}': v for k, v in l_dict.items()}
                    losses.update(l_dict)

        return losses


class MLP(nn.Module):
    \"\"\" Very simple multi-layer perceptron (also called FFN)\"\"\"

    def __init__(self, input_dim, hidden_dim, output_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        h = [hidden_dim] * (num_layers - 1)
        self.layers = nn.ModuleList(nn.Linear(n, k) for n, k in zip([input_dim] + h, h + [output_dim]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = F.relu(layer(x)) if i < self.num_layers - 1 else layer(x)
        return x


# the detr_demo notebook's DETRdemo, a small backbone for resnet50()
class Backbone(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = nn.Conv2d(width, width, 3, padding=1)
        self.layer2 = nn.Conv2d(width, width, 3, padding=1)
        self.layer3 = nn.Conv2d(width, width, 3, padding=1)
        self.layer4 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.fc = nn.Linear(2 * width, 10)


class DETRdemo(nn.Module):
    def __init__(self, num_classes, hidden_dim=256, nheads=8,
                 num_encoder_layers=6, num_decoder_layers=6, width=8, num_queries=100):
        super().__init__()

        # create ResNet-50 backbone
        self.backbone = Backbone(width)
        del self.backbone.fc

        # create conversion layer
        self.conv = nn.Conv2d(2 * width, hidden_dim, 1)

        # create a default PyTorch transformer
        self.transformer = nn.Transformer(
            hidden_dim, nheads, num_encoder_layers, num_decoder_layers,
            dim_feedforward=2 * hidden_dim, dropout=0.0)

        # prediction heads, one extra class for predicting non-empty slots
        # note that in baseline DETR linear_bbox layer is 3-layer MLP
        self.linear_class = nn.Linear(hidden_dim, num_classes + 1)
        self.linear_bbox = MLP(hidden_dim, hidden_dim, 4, 3)

        # output positional encodings (object queries)
        self.query_pos = nn.Parameter(torch.rand(num_queries, hidden_dim))

        # spatial positional encodings
        # note that in baseline DETR we use sine positional encodings
        self.row_embed = nn.Parameter(torch.rand(50, hidden_dim // 2))
        self.col_embed = nn.Parameter(torch.rand(50, hidden_dim // 2))

    def forward(self, inputs):
        # propagate inputs through ResNet-50 up to avg-pool layer
        x = self.backbone.conv1(inputs)
        x = self.backbone.bn1(x)
        x = self.backbone.relu(x)
        x = self.backbone.maxpool(x)

        x = self.backbone.layer1(x)
        x = self.backbone.layer2(x)
        x = self.backbone.layer3(x)
        x = self.backbone.layer4(x)

        # convert from 2048 to 256 feature planes for the transformer
        h = self.conv(x)

        # construct positional encodings
        H, W = h.shape[-2:]
        pos = torch.cat([
            self.col_embed[:W].unsqueeze(0).repeat(H, 1, 1),
            self.row_embed[:H].unsqueeze(1).repeat(1, W, 1),
        ], dim=-1).flatten(0, 1).unsqueeze(1)

        # propagate through the transformer
        h = self.transformer(pos + 0.1 * h.flatten(2).permute(2, 0, 1),
                             self.query_pos.unsqueeze(1)).transpose(0, 1)

        # finally project transformer outputs to class labels and bounding boxes
        return {'pred_logits': self.linear_class(h),
                'pred_boxes': self.linear_bbox(h).sigmoid()}


def rescale_bboxes(out_bbox, size):
    img_w, img_h = size
    b = box_cxcywh_to_xyxy(out_bbox)
    b = b * torch.tensor([img_w, img_h, img_w, img_h], dtype=torch.float32)
    return b


def detect(img, size, model, threshold=0.7):
    outputs = model(img)

    # keep only predictions with 0.7+ confidence
    probas = outputs['pred_logits'].softmax(-1)[0, :, :-1]
    keep = probas.max(-1).values > threshold

    # convert boxes from [0; 1] to image scales
    bboxes_scaled = rescale_bboxes(outputs['pred_boxes'][0, keep], size)
    return probas[keep], bboxes_scaled


def train(model, criterion, batches, lr=1e-3):
    records = []
    param_dicts = [
        {"params": [p for n, p in model.named_parameters() if "backbone" not in n and p.requires_grad]},
        {
            "params": [p for n, p in model.named_parameters() if "backbone" in n and p.requires_grad],
            "lr": lr / 10,
        },
    ]
    optimizer = torch.optim.AdamW(param_dicts, lr=lr, weight_decay=1e-4)
    lr_scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2)
    model.train()
    criterion.train()
    for samples, targets in batches:
        outputs = model(samples)
        loss_dict = criterion(outputs, targets)
        weight_dict = criterion.weight_dict
        losses = sum(loss_dict[k] * weight_dict[k] for k in loss_dict.keys() if k in weight_dict)
        records.append({k: v.item() for k, v in loss_dict.items()})
        optimizer.zero_grad()
        losses.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        lr_scheduler.step()
        records.append(losses.item())
    records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    return records
"""

DETR_STEP = [
    (
        "        losses.backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)\n        optimizer.step()",
        "        grads = losses.backward()\n        torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 0.1)\n        optimizer.step(grads)",
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
        model = names["DETRdemo"](
            3, hidden_dim=16, nheads=2, num_encoder_layers=1, num_decoder_layers=2, num_queries=5
        )
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
            probas, boxes = names["detect"](batches[1][0], (640, 480), model, threshold=0.2)
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
        giou = names["generalized_box_iou"](
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


# -- YOLOv3 -----------------------------------------------------------------------------------------
YOLO_SOURCE = """
def to_cpu(tensor):
    return tensor.detach().cpu()


def xywh2xyxy(x):
    y = x.new(x.shape)
    y[..., 0] = x[..., 0] - x[..., 2] / 2
    y[..., 1] = x[..., 1] - x[..., 3] / 2
    y[..., 2] = x[..., 0] + x[..., 2] / 2
    y[..., 3] = x[..., 1] + x[..., 3] / 2
    return y


def bbox_wh_iou(wh1, wh2):
    wh2 = wh2.t()
    w1, h1 = wh1[0], wh1[1]
    w2, h2 = wh2[0], wh2[1]
    inter_area = torch.min(w1, w2) * torch.min(h1, h2)
    union_area = (w1 * h1 + 1e-16) + w2 * h2 - inter_area
    return inter_area / union_area


def bbox_iou(box1, box2, x1y1x2y2=True):
    \"\"\"
    Returns the IoU of two bounding boxes
    \"\"\"
    if not x1y1x2y2:
        # Transform from center and width to exact coordinates
        b1_x1, b1_x2 = box1[:, 0] - box1[:, 2] / 2, box1[:, 0] + box1[:, 2] / 2
        b1_y1, b1_y2 = box1[:, 1] - box1[:, 3] / 2, box1[:, 1] + box1[:, 3] / 2
        b2_x1, b2_x2 = box2[:, 0] - box2[:, 2] / 2, box2[:, 0] + box2[:, 2] / 2
        b2_y1, b2_y2 = box2[:, 1] - box2[:, 3] / 2, box2[:, 1] + box2[:, 3] / 2
    else:
        # Get the coordinates of bounding boxes
        b1_x1, b1_y1, b1_x2, b1_y2 = box1[:, 0], box1[:, 1], box1[:, 2], box1[:, 3]
        b2_x1, b2_y1, b2_x2, b2_y2 = box2[:, 0], box2[:, 1], box2[:, 2], box2[:, 3]

    # get the corrdinates of the intersection rectangle
    inter_rect_x1 = torch.max(b1_x1, b2_x1)
    inter_rect_y1 = torch.max(b1_y1, b2_y1)
    inter_rect_x2 = torch.min(b1_x2, b2_x2)
    inter_rect_y2 = torch.min(b1_y2, b2_y2)
    # Intersection area
    inter_area = torch.clamp(inter_rect_x2 - inter_rect_x1 + 1, min=0) * torch.clamp(
        inter_rect_y2 - inter_rect_y1 + 1, min=0
    )
    # Union Area
    b1_area = (b1_x2 - b1_x1 + 1) * (b1_y2 - b1_y1 + 1)
    b2_area = (b2_x2 - b2_x1 + 1) * (b2_y2 - b2_y1 + 1)

    iou = inter_area / (b1_area + b2_area - inter_area + 1e-16)

    return iou


def non_max_suppression(prediction, conf_thres=0.5, nms_thres=0.4):
    \"\"\"
    Removes detections with lower object confidence score than 'conf_thres' and performs
    Non-Maximum Suppression to further filter detections.
    Returns detections with shape:
        (x1, y1, x2, y2, object_conf, class_score, class_pred)
    \"\"\"

    # From (center x, center y, width, height) to (x1, y1, x2, y2)
    prediction[..., :4] = xywh2xyxy(prediction[..., :4])
    output = [None for _ in range(len(prediction))]
    for image_i, image_pred in enumerate(prediction):
        # Filter out confidence scores below threshold
        image_pred = image_pred[image_pred[:, 4] >= conf_thres]
        # If none are remaining => process next image
        if not image_pred.size(0):
            continue
        # Object confidence times class confidence
        score = image_pred[:, 4] * image_pred[:, 5:].max(1)[0]
        # Sort by it
        image_pred = image_pred[(-score).argsort()]
        class_confs, class_preds = image_pred[:, 5:].max(1, keepdim=True)
        detections = torch.cat((image_pred[:, :5], class_confs.float(), class_preds.float()), 1)
        # Perform non-maximum suppression
        keep_boxes = []
        while detections.size(0):
            large_overlap = bbox_iou(detections[0, :4].unsqueeze(0), detections[:, :4]) > nms_thres
            label_match = detections[0, -1] == detections[:, -1]
            # Indices of boxes with lower confidence scores, large IOUs and matching labels
            invalid = large_overlap & label_match
            weights = detections[invalid, 4:5]
            # Merge overlapping bboxes by order of confidence
            detections[0, :4] = (weights * detections[invalid, :4]).sum(0) / weights.sum()
            keep_boxes += [detections[0]]
            detections = detections[~invalid]
        if keep_boxes:
            output[image_i] = torch.stack(keep_boxes)

    return output


def build_targets(pred_boxes, pred_cls, target, anchors, ignore_thres):

    BoolTensor = torch.cuda.BoolTensor if pred_boxes.is_cuda else torch.BoolTensor
    FloatTensor = torch.cuda.FloatTensor if pred_boxes.is_cuda else torch.FloatTensor

    nB = pred_boxes.size(0)
    nA = pred_boxes.size(1)
    nC = pred_cls.size(-1)
    nG = pred_boxes.size(2)

    # Output tensors
    obj_mask = BoolTensor(nB, nA, nG, nG).fill_(0)
    noobj_mask = BoolTensor(nB, nA, nG, nG).fill_(1)
    class_mask = FloatTensor(nB, nA, nG, nG).fill_(0)
    iou_scores = FloatTensor(nB, nA, nG, nG).fill_(0)
    tx = FloatTensor(nB, nA, nG, nG).fill_(0)
    ty = FloatTensor(nB, nA, nG, nG).fill_(0)
    tw = FloatTensor(nB, nA, nG, nG).fill_(0)
    th = FloatTensor(nB, nA, nG, nG).fill_(0)
    tcls = FloatTensor(nB, nA, nG, nG, nC).fill_(0)

    # Convert to position relative to box
    target_boxes = target[:, 2:6] * nG
    gxy = target_boxes[:, :2]
    gwh = target_boxes[:, 2:]
    # Get anchors with best iou
    ious = torch.stack([bbox_wh_iou(anchor, gwh) for anchor in anchors])
    best_ious, best_n = ious.max(0)
    # Separate target values
    b, target_labels = target[:, :2].long().t()
    gx, gy = gxy.t()
    gw, gh = gwh.t()
    gi, gj = gxy.long().t()
    # Set masks
    obj_mask[b, best_n, gj, gi] = 1
    noobj_mask[b, best_n, gj, gi] = 0

    # Set noobj mask to zero where iou exceeds ignore threshold
    for i, anchor_ious in enumerate(ious.t()):
        noobj_mask[b[i], anchor_ious > ignore_thres, gj[i], gi[i]] = 0

    # Coordinates
    tx[b, best_n, gj, gi] = gx - gx.floor()
    ty[b, best_n, gj, gi] = gy - gy.floor()
    # Width and height
    tw[b, best_n, gj, gi] = torch.log(gw / anchors[best_n][:, 0] + 1e-16)
    th[b, best_n, gj, gi] = torch.log(gh / anchors[best_n][:, 1] + 1e-16)
    # One-hot encoding of label
    tcls[b, best_n, gj, gi, target_labels] = 1
    # Compute label correctness and iou at best anchor
    class_mask[b, best_n, gj, gi] = (pred_cls[b, best_n, gj, gi].argmax(-1) == target_labels).float()
    iou_scores[b, best_n, gj, gi] = bbox_iou(pred_boxes[b, best_n, gj, gi], target_boxes, x1y1x2y2=False)

    tconf = obj_mask.float()
    return iou_scores, class_mask, obj_mask, noobj_mask, tx, ty, tw, th, tcls, tconf


class YOLOLayer(nn.Module):
    \"\"\"Detection layer\"\"\"

    def __init__(self, anchors, num_classes, img_dim=416):
        super(YOLOLayer, self).__init__()
        self.anchors = anchors
        self.num_anchors = len(anchors)
        self.num_classes = num_classes
        self.ignore_thres = 0.5
        self.mse_loss = nn.MSELoss()
        self.bce_loss = nn.BCELoss()
        self.obj_scale = 1
        self.noobj_scale = 100
        self.metrics = {}
        self.img_dim = img_dim
        self.grid_size = 0  # grid size

    def compute_grid_offsets(self, grid_size, cuda=True):
        self.grid_size = grid_size
        g = self.grid_size
        FloatTensor = torch.cuda.FloatTensor if cuda else torch.FloatTensor
        self.stride = self.img_dim / self.grid_size
        # Calculate offsets for each grid
        self.grid_x = torch.arange(g).repeat(g, 1).view([1, 1, g, g]).type(FloatTensor)
        self.grid_y = torch.arange(g).repeat(g, 1).t().view([1, 1, g, g]).type(FloatTensor)
        self.scaled_anchors = FloatTensor([(a_w / self.stride, a_h / self.stride) for a_w, a_h in self.anchors])
        self.anchor_w = self.scaled_anchors[:, 0:1].view((1, self.num_anchors, 1, 1))
        self.anchor_h = self.scaled_anchors[:, 1:2].view((1, self.num_anchors, 1, 1))

    def forward(self, x, targets=None, img_dim=None):

        # Tensors for cuda support
        FloatTensor = torch.cuda.FloatTensor if x.is_cuda else torch.FloatTensor
        LongTensor = torch.cuda.LongTensor if x.is_cuda else torch.LongTensor
        ByteTensor = torch.cuda.ByteTensor if x.is_cuda else torch.ByteTensor

        self.img_dim = img_dim
        num_samples = x.size(0)
        grid_size = x.size(2)

        prediction = (
            x.view(num_samples, self.num_anchors, self.num_classes + 5, grid_size, grid_size)
            .permute(0, 1, 3, 4, 2)
            .contiguous()
        )

        # Get outputs
        x = torch.sigmoid(prediction[..., 0])  # Center x
        y = torch.sigmoid(prediction[..., 1])  # Center y
        w = prediction[..., 2]  # Width
        h = prediction[..., 3]  # Height
        pred_conf = torch.sigmoid(prediction[..., 4])  # Conf
        pred_cls = torch.sigmoid(prediction[..., 5:])  # Cls pred.

        # If grid size does not match current we compute new offsets
        if grid_size != self.grid_size:
            self.compute_grid_offsets(grid_size, cuda=x.is_cuda)

        # Add offset and scale with anchors
        pred_boxes = FloatTensor(prediction[..., :4].shape)
        pred_boxes[..., 0] = x.data + self.grid_x
        pred_boxes[..., 1] = y.data + self.grid_y
        pred_boxes[..., 2] = torch.exp(w.data) * self.anchor_w
        pred_boxes[..., 3] = torch.exp(h.data) * self.anchor_h

        output = torch.cat(
            (
                pred_boxes.view(num_samples, -1, 4) * self.stride,
                pred_conf.view(num_samples, -1, 1),
                pred_cls.view(num_samples, -1, self.num_classes),
            ),
            -1,
        )

        if targets is None:
            return output, 0
        else:
            iou_scores, class_mask, obj_mask, noobj_mask, tx, ty, tw, th, tcls, tconf = build_targets(
                pred_boxes=pred_boxes,
                pred_cls=pred_cls,
                target=targets,
                anchors=self.scaled_anchors,
                ignore_thres=self.ignore_thres,
            )

            # Loss : Mask outputs to ignore non-existing objects (except with conf. loss)
            loss_x = self.mse_loss(x[obj_mask], tx[obj_mask])
            loss_y = self.mse_loss(y[obj_mask], ty[obj_mask])
            loss_w = self.mse_loss(w[obj_mask], tw[obj_mask])
            loss_h = self.mse_loss(h[obj_mask], th[obj_mask])
            loss_conf_obj = self.bce_loss(pred_conf[obj_mask], tconf[obj_mask])
            loss_conf_noobj = self.bce_loss(pred_conf[noobj_mask], tconf[noobj_mask])
            loss_conf = self.obj_scale * loss_conf_obj + self.noobj_scale * loss_conf_noobj
            loss_cls = self.bce_loss(pred_cls[obj_mask], tcls[obj_mask])
            total_loss = loss_x + loss_y + loss_w + loss_h + loss_conf + loss_cls

            # Metrics
            cls_acc = 100 * class_mask[obj_mask].mean()
            conf_obj = pred_conf[obj_mask].mean()
            conf_noobj = pred_conf[noobj_mask].mean()
            conf50 = (pred_conf > 0.5).float()
            iou50 = (iou_scores > 0.5).float()
            iou75 = (iou_scores > 0.75).float()
            detected_mask = conf50 * class_mask * tconf
            precision = torch.sum(iou50 * detected_mask) / (conf50.sum() + 1e-16)
            recall50 = torch.sum(iou50 * detected_mask) / (obj_mask.sum() + 1e-16)
            recall75 = torch.sum(iou75 * detected_mask) / (obj_mask.sum() + 1e-16)

            self.metrics = {
                "loss": to_cpu(total_loss).item(),
                "x": to_cpu(loss_x).item(),
                "y": to_cpu(loss_y).item(),
                "w": to_cpu(loss_w).item(),
                "h": to_cpu(loss_h).item(),
                "conf": to_cpu(loss_conf).item(),
                "cls": to_cpu(loss_cls).item(),
                "cls_acc": to_cpu(cls_acc).item(),
                "recall50": to_cpu(recall50).item(),
                "recall75": to_cpu(recall75).item(),
                "precision": to_cpu(precision).item(),
                "conf_obj": to_cpu(conf_obj).item(),
                "conf_noobj": to_cpu(conf_noobj).item(),
                "grid_size": grid_size,
            }

            return output, total_loss


class TinyYolo(nn.Module):
    def __init__(self, anchors, num_classes, img_dim):
        super().__init__()
        n_out = len(anchors) * (num_classes + 5)
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8, momentum=0.9, eps=1e-5),
            nn.LeakyReLU(0.1), nn.Conv2d(8, n_out, 3, stride=2, padding=1))
        self.yolo = YOLOLayer(anchors, num_classes, img_dim)
        self.img_size = img_dim

    def forward(self, x, targets=None):
        img_dim = x.shape[2]
        return self.yolo(self.body(x), targets, img_dim)


def train(model, batches, conf_thres, nms_thres):
    records = []
    optimizer = torch.optim.Adam(model.parameters())
    for imgs, targets in batches:
        model.train()
        outputs, loss = model(imgs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        records.append(dict(model.yolo.metrics))
        model.eval()
        with torch.no_grad():
            outputs, _ = model(imgs)
            outputs = non_max_suppression(outputs, conf_thres=conf_thres, nms_thres=nms_thres)
        records.append([o.numpy() if o is not None else np.zeros((0, 7)) for o in outputs])
    records.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
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
        model = names["TinyYolo"]([(3, 4), (6, 5), (9, 10)], 3, 16)
        if initial is None:
            initial = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
        else:
            model.load_state_dict({k: rg.tensor(v) for k, v in initial.items()})
        data = [
            (lib.tensor(x, dtype=lib.float32), lib.tensor(t, dtype=lib.float32)) for x, t in batches
        ]
        records.append(names["train"](model, data, conf_thres=0.45, nms_thres=0.3))
    # the detections kept are the same boxes (in the same order) in both runs
    for mine, reference in zip(records[1][1::2], records[0][1::2]):
        if isinstance(reference, list):
            assert [m.shape for m in mine] == [r.shape for r in reference]
    assert any(r.shape[0] > 0 for r in records[0][1]), "the NMS keeps some boxes"

    def flat(recs):
        return [np.concatenate([a.ravel() for a in r]) if isinstance(r, list) else r for r in recs]

    assert_records_agree(flat(records[1]), flat(records[0]), rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("x1y1x2y2", [True, False])
def test_yolov3_bbox_iou_gradients_match_torch(x1y1x2y2):
    theirs, ours = both(YOLO_SOURCE, [])
    rng = np.random.default_rng(11)
    a = rng.uniform(1, 5, (4, 4)) + np.array([0, 0, 5, 5])
    b = rng.uniform(1, 5, (4, 4)) + np.array([0, 0, 5, 5])
    results = []
    for lib, names in ((torch, theirs), (rg, ours)):
        x = lib.tensor(a, dtype=lib.float64, requires_grad=True)
        iou = names["bbox_iou"](x, lib.tensor(b, dtype=lib.float64), x1y1x2y2=x1y1x2y2)
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
