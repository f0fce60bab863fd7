# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
a two-stage detector's second stage written in torch ops.

- ruotianluo/pytorch-faster-rcnn as it writes it: ``lib/nets/network.py``'s
  ``_crop_pool_layer`` (RoI pooling by a spatial transformer: ``rois.detach()``, the
  coordinates by strided slices ``rois[:, 1::4] / 16.0``, ``theta`` joined by ``torch.cat``
  with a ``rois.data.new(...).zero_()`` column and viewed ``(-1, 2, 3)``, ``F.affine_grid(theta,
  torch.Size(...))`` and ``F.grid_sample`` of the expanded feature map with their default
  corners, ``F.max_pool2d``) and ``_smooth_l1_loss`` (the inside/outside weights, the
  ``detach().float()`` sign mask, sums over ``sorted(dim, reverse=True)``);
  ``lib/model/bbox_transform.py``'s ``bbox_transform_inv`` (``deltas[:, 0::4]``, ``torch.cat``
  of ``unsqueeze(2)``s viewed ``(len(boxes), -1)``) and ``clip_boxes`` (``torch.stack`` of
  clamps), on a small backbone at stride 16, its head trained by SGD with momentum on
  classification and box regression, in float64 (a pooled window of equal values would
  otherwise route the gradient by each run's rounding).

The lines changed: the ``import`` lines and the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import random
import warnings

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


FASTER_RCNN_SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable


class cfg:
    POOLING_SIZE = 7


# -- lib/model/bbox_transform.py ----------------------------------------------------------
def bbox_transform_inv(boxes, deltas):
  # Input should be both tensor or both Variable and on the same device
  if len(boxes) == 0:
    return deltas.detach() * 0

  widths = boxes[:, 2] - boxes[:, 0] + 1.0
  heights = boxes[:, 3] - boxes[:, 1] + 1.0
  ctr_x = boxes[:, 0] + 0.5 * widths
  ctr_y = boxes[:, 1] + 0.5 * heights

  dx = deltas[:, 0::4]
  dy = deltas[:, 1::4]
  dw = deltas[:, 2::4]
  dh = deltas[:, 3::4]

  pred_ctr_x = dx * widths.unsqueeze(1) + ctr_x.unsqueeze(1)
  pred_ctr_y = dy * heights.unsqueeze(1) + ctr_y.unsqueeze(1)
  pred_w = torch.exp(dw) * widths.unsqueeze(1)
  pred_h = torch.exp(dh) * heights.unsqueeze(1)

  pred_boxes = torch.cat(\\
    [_.unsqueeze(2) for _ in [pred_ctr_x - 0.5 * pred_w,\\
                              pred_ctr_y - 0.5 * pred_h,\\
                              pred_ctr_x + 0.5 * pred_w,\\
                              pred_ctr_y + 0.5 * pred_h]], 2).view(len(boxes), -1)

  return pred_boxes


def clip_boxes(boxes, im_shape):
  \"\"\"
  Clip boxes to image boundaries.
  boxes must be tensor or Variable, im_shape can be anything but Variable
  \"\"\"

  if not hasattr(boxes, 'data'):
    boxes_ = boxes.numpy()

  boxes = boxes.view(boxes.size(0), -1, 4)
  boxes = torch.stack(\\
    [boxes[:,:,0].clamp(0, im_shape[1] - 1),
     boxes[:,:,1].clamp(0, im_shape[0] - 1),
     boxes[:,:,2].clamp(0, im_shape[1] - 1),
     boxes[:,:,3].clamp(0, im_shape[0] - 1)], 2).view(boxes.size(0), -1)

  return boxes


# -- lib/nets/network.py ------------------------------------------------------------------
class Network(nn.Module):
  def __init__(self):
    nn.Module.__init__(self)
    self._num_classes = 3
    self.base = nn.Sequential(
      nn.Conv2d(3, 8, 3, stride=4, padding=1), nn.ReLU(inplace=True),
      nn.Conv2d(8, 16, 3, stride=4, padding=1), nn.ReLU(inplace=True))
    self.fc7 = nn.Sequential(nn.Linear(16 * cfg.POOLING_SIZE * cfg.POOLING_SIZE, 32), nn.ReLU(True))
    self.cls_score_net = nn.Linear(32, self._num_classes)
    self.bbox_pred_net = nn.Linear(32, self._num_classes * 4)

  def _crop_pool_layer(self, bottom, rois, max_pool=True):
    # implement it using stn
    # box to affine
    # input (x1,y1,x2,y2)
    \"\"\"
    [  x2-x1             x1 + x2 - W + 1  ]
    [  -----      0      ---------------  ]
    [  W - 1                  W - 1       ]
    [                                     ]
    [           y2-y1    y1 + y2 - H + 1  ]
    [    0      -----    ---------------  ]
    [           H - 1         H - 1      ]
    \"\"\"
    rois = rois.detach()

    x1 = rois[:, 1::4] / 16.0
    y1 = rois[:, 2::4] / 16.0
    x2 = rois[:, 3::4] / 16.0
    y2 = rois[:, 4::4] / 16.0

    height = bottom.size(2)
    width = bottom.size(3)

    # affine theta
    zero = Variable(rois.data.new(rois.size(0), 1).zero_())
    theta = torch.cat([\\
      (x2 - x1) / (width - 1),
      zero,
      (x1 + x2 - width + 1) / (width - 1),
      zero,
      (y2 - y1) / (height - 1),
      (y1 + y2 - height + 1) / (height - 1)], 1).view(-1, 2, 3)

    if max_pool:
      pre_pool_size = cfg.POOLING_SIZE * 2
      grid = F.affine_grid(theta, torch.Size((rois.size(0), 1, pre_pool_size, pre_pool_size)))
      crops = F.grid_sample(bottom.expand(rois.size(0), bottom.size(1), bottom.size(2), bottom.size(3)), grid)
      crops = F.max_pool2d(crops, 2, 2)
    else:
      grid = F.affine_grid(theta, torch.Size((rois.size(0), 1, cfg.POOLING_SIZE, cfg.POOLING_SIZE)))
      crops = F.grid_sample(bottom.expand(rois.size(0), bottom.size(1), bottom.size(2), bottom.size(3)), grid)

    return crops

  def _smooth_l1_loss(self, bbox_pred, bbox_targets, bbox_inside_weights, bbox_outside_weights, sigma=1.0, dim=[1]):
    sigma_2 = sigma ** 2
    box_diff = bbox_pred - bbox_targets
    in_box_diff = bbox_inside_weights * box_diff
    abs_in_box_diff = torch.abs(in_box_diff)
    smoothL1_sign = (abs_in_box_diff < 1. / sigma_2).detach().float()
    in_loss_box = torch.pow(in_box_diff, 2) * (sigma_2 / 2.) * smoothL1_sign \\
                  + (abs_in_box_diff - (0.5 / sigma_2)) * (1. - smoothL1_sign)
    out_loss_box = bbox_outside_weights * in_loss_box
    loss_box = out_loss_box
    for i in sorted(dim, reverse=True):
      loss_box = loss_box.sum(i)
    loss_box = loss_box.mean()
    return loss_box

  def forward(self, image, rois, max_pool):
    net_conv = self.base(image)
    pool5 = self._crop_pool_layer(net_conv, rois, max_pool)
    fc7 = self.fc7(pool5.view(pool5.size(0), -1))
    cls_score = self.cls_score_net(fc7)
    cls_prob = F.softmax(cls_score, dim=1)
    bbox_pred = self.bbox_pred_net(fc7)
    return cls_score, cls_prob, bbox_pred


def train(image, rois, labels, bbox_targets, inside, outside, max_pool, record, initialize):
  net = Network().double()
  initialize(net)
  optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
  image = torch.tensor(image)
  rois = torch.tensor(rois)
  labels = torch.tensor(labels)
  bbox_targets, inside, outside = torch.tensor(bbox_targets), torch.tensor(inside), torch.tensor(outside)
  for step in range(3):
    cls_score, cls_prob, bbox_pred = net(image, rois, max_pool)
    loss_cls = F.cross_entropy(cls_score.view(-1, net._num_classes), labels)
    loss_box = net._smooth_l1_loss(bbox_pred, bbox_targets, inside, outside)
    loss = loss_cls + loss_box
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append([loss_cls.item(), loss_box.item()])
  record.append({k: v.detach().numpy() for k, v in net.state_dict().items()})
  with torch.no_grad():
    _, scores, deltas = net(image, rois, max_pool)
    boxes = rois[:, 1:5]
    pred_boxes = bbox_transform_inv(boxes, deltas)
    pred_boxes = clip_boxes(pred_boxes, image.shape[2:])
  record.append(scores.numpy())
  record.append(pred_boxes.numpy())
"""

FASTER_RCNN_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nfrom torch.autograd import Variable\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nfrom retrograd.autograd import Variable\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "max_pool", [True, False], ids=["pre-pool-then-max-pool", "crop-at-pool-size"]
)
def test_pytorch_faster_rcnn_crop_pool_head_trains_and_decodes_as_torch(max_pool):
    rng = np.random.default_rng(2340)
    image = rng.standard_normal((1, 3, 128, 128))
    corners = rng.uniform(0, 80, (6, 2))
    sizes = rng.uniform(20, 60, (6, 2))
    rois = np.concatenate([np.zeros((6, 1)), corners, np.minimum(corners + sizes, 127)], 1)
    labels = np.array([0, 1, 2, 1, 0, 2])
    bbox_targets = np.zeros((6, 12))
    inside = np.zeros((6, 12))
    for i, label in enumerate(labels):
        if label > 0:
            bbox_targets[i, 4 * label : 4 * label + 4] = rng.standard_normal(4) * 0.5
            inside[i, 4 * label : 4 * label + 4] = 1.0
    outside = (inside > 0) / 6.0
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        program = run_source(
            FASTER_RCNN_SOURCE if lib is torch else port(FASTER_RCNN_SOURCE, FASTER_RCNN_STEPS), lib
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            program["train"](
                image, rois, labels, bbox_targets, inside, outside, max_pool, record, initialize
            )
        # both warn that affine_grid and grid_sample take align_corners=False by default now
        assert any("align_corners" in str(w.message) for w in caught), lib.__name__
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-9, atol=1e-11)
