"""Real ports, round 73 (the harness: ``tests/real_ports.py``): keypoint estimation from
heatmaps, a program written here in the style of the PyTorch pose-estimation baselines (a
strided convolutional backbone and a deconvolution head in the manner of SimpleBaseline, its
Gaussian target heatmaps with target weights for keypoints outside the image, the per-joint
``JointsMSELoss``, ``get_max_preds`` with the quarter-pixel refinement toward the higher
neighbour, flip testing with the joints' left/right swap and a one-pixel shift, PCK) and of
integral pose regression (a soft-argmax over the heatmap by ``softmax`` and expected
coordinates, trained with a masked L1 on the coordinates); two configurations (``heatmap``,
``integral``), each run under torch and, ported, under retrograd from the same weights and
draws, every record compared.

It reaches:

- the data: keypoints ``torch.rand(b, k, 2) * 18 - 1``, images rendered as sums of Gaussian
  blobs on ``torch.meshgrid(..., indexing="xy")`` grids (broadcast with ``[:, :, None, None]``),
  visibility by ``((kp >= 0) & (kp < 16)).all(dim=-1)``, heatmap targets at stride 2 multiplied
  by target weights ``visible.float().unsqueeze(-1)``;
- the network: ``nn.Conv2d(stride=2)``, ``nn.BatchNorm2d``, ``nn.ReLU(inplace=True)``,
  ``nn.ConvTranspose2d(..., 4, stride=2, padding=1, bias=False)``, a ``1 x 1`` final layer with
  ``nn.init.normal_(std=0.001)`` and ``nn.init.constant_`` of its bias (then torch's weights);
- ``JointsMSELoss``: ``reshape((b, k, -1)).split(1, 1)``, per-joint ``squeeze()``, ``.mul``
  by ``target_weight[:, idx]`` in a ``nn.MSELoss(reduction="mean")``;
- decoding under ``torch.no_grad()``: ``torch.max(dim=2)``, ``idx.repeat(1, 1, 2).float()``,
  ``%`` and ``torch.floor`` into columns of an index tensor assigned in place
  (``preds[:, :, 0] = ...``), ``maxvals.gt(0.0)``, ``preds *= pred_mask``; the refinement by
  ``F.pad`` and ``gather`` of the neighbours at flattened indices, ``torch.sign``, ``clamp``;
- soft-argmax: ``F.softmax(beta * hm.flatten(2), dim=-1).view_as(hm)``, ``torch.einsum(
  "bkhw,w->bk", ...)`` with ``torch.arange(..., dtype=torch.float32)``, the marginals by
  ``sum(dim=3)``, ``torch.stack(..., dim=-1)``, ``F.l1_loss(reduction="none")`` masked;
- flip testing: ``torch.flip(x, dims=[3])``, the joints swapped by fancy indexing with a
  permutation list, the shift ``flipped[:, :, :, 1:] = flipped.clone()[:, :, :, 0:-1]``, the
  average ``(output + flipped) * 0.5``; an upsampled view by ``F.interpolate(mode="bilinear",
  align_corners=False)``, its peaks by ``argmax`` of ``flatten(2)`` or ``amax(dim=(2, 3))``;
- PCK by ``torch.linalg.norm`` of coordinate errors, ``(dist < thr) & visible`` and a
  ``clamp(min=1)`` count; training with ``Adam`` and a ``LambdaLR`` warm-up, ``clip_grad_norm_``;
  ``state_dict`` (BatchNorm's running statistics too) through ``torch.save``/``torch.load``.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``clip_grad_norm_(grads, ...)``, ``optimizer.step(grads)``).
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

POSE_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F

NUM_JOINTS, IMAGE, STRIDE = 3, 16, 2
HEATMAP = IMAGE // STRIDE
FLIP_PERMUTATION = [1, 0, 2]


def gaussian_maps(centers, size, sigmas):
    xs, ys = torch.meshgrid(torch.arange(size, dtype=torch.float32),
                            torch.arange(size, dtype=torch.float32), indexing="xy")
    dx = xs[None, None] - centers[:, :, 0][:, :, None, None]
    dy = ys[None, None] - centers[:, :, 1][:, :, None, None]
    return torch.exp(-(dx ** 2 + dy ** 2) / (2 * sigmas[None, :, None, None] ** 2))


def make_batch(b):
    kp = torch.rand(b, NUM_JOINTS, 2) * 18 - 1
    blobs = gaussian_maps(kp, IMAGE, torch.tensor([1.0, 1.5, 2.0]))
    amplitude = torch.tensor([1.0, 2.0, 3.0])[None, :, None, None]
    images = (amplitude * blobs).sum(dim=1, keepdim=True) + 0.05 * torch.randn(b, 1, IMAGE, IMAGE)
    visible = ((kp >= 0) & (kp < IMAGE)).all(dim=-1)
    target = gaussian_maps(kp / STRIDE, HEATMAP, torch.full((NUM_JOINTS,), 1.0))
    target_weight = visible.float().unsqueeze(-1)
    return images, target * target_weight[..., None], target_weight, kp, visible


class PoseNet(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(2 * width), nn.ReLU(inplace=True))
        self.deconv = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(width), nn.ReLU(inplace=True))
        self.final_layer = nn.Conv2d(width, NUM_JOINTS, kernel_size=1)
        nn.init.normal_(self.final_layer.weight, std=0.001)
        nn.init.constant_(self.final_layer.bias, 0)

    def forward(self, x):
        return self.final_layer(self.deconv(self.backbone(x)))


class JointsMSELoss(nn.Module):
    def __init__(self, use_target_weight=True):
        super().__init__()
        self.criterion = nn.MSELoss(reduction="mean")
        self.use_target_weight = use_target_weight

    def forward(self, output, target, target_weight):
        batch_size, num_joints = output.size(0), output.size(1)
        heatmaps_pred = output.reshape((batch_size, num_joints, -1)).split(1, 1)
        heatmaps_gt = target.reshape((batch_size, num_joints, -1)).split(1, 1)
        loss = 0
        for idx in range(num_joints):
            heatmap_pred = heatmaps_pred[idx].squeeze()
            heatmap_gt = heatmaps_gt[idx].squeeze()
            if self.use_target_weight:
                loss += 0.5 * self.criterion(heatmap_pred.mul(target_weight[:, idx]),
                                             heatmap_gt.mul(target_weight[:, idx]))
            else:
                loss += 0.5 * self.criterion(heatmap_pred, heatmap_gt)
        return loss / num_joints


def soft_argmax(heatmaps, beta=4.0):
    b, k, h, w = heatmaps.shape
    heat = F.softmax(beta * heatmaps.flatten(2), dim=-1).view_as(heatmaps)
    x = torch.einsum("bkhw,w->bk", heat, torch.arange(w, dtype=torch.float32))
    y = (heat.sum(dim=3) * torch.arange(h, dtype=torch.float32)).sum(-1)
    return torch.stack([x, y], dim=-1)


def get_max_preds(batch_heatmaps):
    b, k, h, w = batch_heatmaps.shape
    heatmaps_reshaped = batch_heatmaps.reshape((b, k, -1))
    maxvals, idx = torch.max(heatmaps_reshaped, dim=2)
    maxvals, idx = maxvals.unsqueeze(-1), idx.unsqueeze(-1)
    preds = idx.repeat(1, 1, 2).float()
    preds[:, :, 0] = preds[:, :, 0] % w
    preds[:, :, 1] = torch.floor(preds[:, :, 1] / w)
    pred_mask = maxvals.gt(0.0).repeat(1, 1, 2).float()
    preds *= pred_mask
    return preds, maxvals


def refine(preds, heatmaps):
    b, k, h, w = heatmaps.shape
    padded = F.pad(heatmaps, (1, 1, 1, 1)).flatten(2)
    px, py = preds[..., 0].long() + 1, preds[..., 1].long() + 1

    def at(x, y):
        return padded.gather(2, (y * (w + 2) + x).unsqueeze(-1)).squeeze(-1)

    diff = torch.stack([at(px + 1, py) - at(px - 1, py), at(px, py + 1) - at(px, py - 1)], -1)
    return (preds + torch.sign(diff) * 0.25).clamp(0, w - 1)


def decode(heatmaps):
    if MODEL == "integral":
        return soft_argmax(heatmaps)
    preds, _ = get_max_preds(heatmaps)
    return refine(preds, heatmaps)


def flip_test(model, images):
    output = model(images)
    flipped = model(torch.flip(images, dims=[3]))
    flipped = torch.flip(flipped, dims=[3])[:, FLIP_PERMUTATION]
    flipped[:, :, :, 1:] = flipped.clone()[:, :, :, 0:-1]
    return (output + flipped) * 0.5


def pck(pred, kp, visible, thr=1.0):
    dist = torch.linalg.norm(pred * STRIDE - kp, dim=-1)
    hits = (dist < thr * STRIDE) & visible
    return hits.sum().float() / visible.sum().clamp(min=1)


images, target, target_weight, kp, visible = make_batch(8)
val = make_batch(4)
record.append([visible.sum().item(), images.mean().item()])

model = PoseNet()
initialize(model)
criterion = JointsMSELoss(use_target_weight=True)
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))

for step in range(6):
    model.train()
    output = model(images)
    if MODEL == "integral":
        coords = soft_argmax(output)
        err = F.l1_loss(coords, kp / STRIDE, reduction="none") * target_weight
        loss = err.sum() / target_weight.sum().clamp(min=1) + criterion(output, target,
                                                                           target_weight)
    else:
        loss = criterion(output, target, target_weight)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), scheduler.get_last_lr()[0]])
    record.append(params_of(model))
    print("step {} loss {:.5f}".format(step, loss.item()))

model.eval()
v_images, v_target, v_weight, v_kp, v_visible = val
with torch.no_grad():
    heat = model(v_images)
    record.append([criterion(heat, v_target, v_weight).item()])
    averaged = flip_test(model, v_images)
    record.append(averaged.numpy().copy())
    for h in (heat, averaged):
        pred = decode(h)
        record.append(pred.numpy().copy())
        record.append([pck(pred, v_kp, v_visible).item()])
    upsampled = F.interpolate(heat, scale_factor=STRIDE, mode="bilinear", align_corners=False)
    record.append(upsampled.numpy().copy())
    if MODEL == "heatmap":  # (the integral model's maps are flat enough for near ties)
        record.append(upsampled.flatten(2).argmax(dim=-1).tolist())
    else:
        record.append(upsampled.amax(dim=(2, 3)).numpy().copy())

buffer = io.BytesIO()
torch.save(model.state_dict(), buffer)
buffer.seek(0)
restored = PoseNet()
restored.load_state_dict(torch.load(buffer))
restored.eval()
with torch.no_grad():
    record.append([criterion(restored(v_images), v_target, v_weight).item()])
    record.append(restored.backbone[1].running_var.numpy().copy())
"""

POSE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 1.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("model", ["heatmap", "integral"])
def test_keypoint_heatmaps_as_torch(capsys, model):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        POSE_SOURCE,
        POSE_STEPS,
        capsys,
        7303,
        initialize=initializer(),
        params_of=params_of,
        MODEL=model,
    )
    assert len(theirs) == 1 + 2 * 6 + 10
    assert theirs[-2][0] == pytest.approx(theirs[13][0], rel=1e-6)  # restored as trained
    assert their_log == our_log and their_log.count("\n") == 6
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
