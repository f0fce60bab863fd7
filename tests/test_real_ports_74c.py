"""Real ports, round 74 (the harness: ``tests/real_ports.py``): stereo matching, a program
written here in the style of the PSMNet and GwcNet training scripts (a shared 2-D feature
extractor, a 4-D cost volume over candidate disparities, 3-D convolutional aggregation in a
stacked hourglass, soft-argmin disparity regression, a masked smooth-L1 loss over several
outputs), trained on synthetic rectified pairs whose left view is the right view warped by a
known disparity, run under torch and, ported, under retrograd from the same weights and draws,
every record compared.

It reaches:

- the data: a right image of random texture (``torch.rand`` smoothed by ``F.avg_pool2d`` with
  ``padding=`` and ``count_include_pad=False``), a piecewise disparity map (``torch.where``
  over column thresholds, a band beyond ``maxdisp`` by ``torch.full_like``, masked out of the
  loss), the left view by ``F.grid_sample`` of the right one at ``x - d`` (a base grid of
  ``torch.meshgrid(..., indexing="ij")``, ``torch.stack(..., dim=-1)``, normalised to ``[-1,
  1]``, ``padding_mode="border"``, ``align_corners=True``);
- the model: ``convbn`` and ``convbn_3d`` helpers returning ``nn.Sequential`` (``nn.Conv2d``/
  ``nn.Conv3d`` without bias, ``nn.BatchNorm2d``/``nn.BatchNorm3d``), the concatenation volume
  of PSMNet (``new_zeros`` of ``[B, 2C, D, H, W]``, slice assignment per disparity
  ``volume[:, :C, i, :, i:] = ref[:, :, :, i:]`` against ``tar[:, :, :, :-i]``), the group-wise
  correlation volume of GwcNet (``(fea1 * fea2).view([B, G, C // G, H, W]).mean(dim=2)``,
  ``new_zeros`` filled per disparity), both concatenated by ``torch.cat(..., 1)`` and made
  ``.contiguous()``; an hourglass of strided ``nn.Conv3d`` and ``nn.ConvTranspose3d(...,
  output_padding=1)`` with ``F.relu(..., inplace=True)`` skips; the classifier's cost
  upsampled by ``F.interpolate(cost, [maxdisp, H, W], mode="trilinear", align_corners=False)``,
  ``torch.squeeze(cost, 1)``, ``F.softmax`` over disparities, the regression ``torch.sum(x *
  disp_values, 1, keepdim=False)`` over ``torch.arange(0, maxdisp, dtype=x.dtype,
  device=x.device).view(1, maxdisp, 1, 1)``; ``kaiming``-style fills by ``normal_(0,
  math.sqrt(2. / n))`` over ``kernel_size[0] * kernel_size[1] * ... * out_channels`` (overwritten
  by torch's weights), ``fill_(1)``/``zero_()`` of the norms;
- the loss: ``mask = (disp_gt < maxdisp) & (disp_gt > 0)``, ``mask.detach_()``, weights
  ``[0.5, 0.7, 1.0]`` over three outputs, ``F.smooth_l1_loss(disp_est[mask], disp_gt[mask],
  reduction="mean")``, the sum of a list by ``sum(all_losses)``;
- metrics under ``torch.no_grad()``: EPE as ``F.l1_loss(..., reduction="mean")`` over the mask,
  the 1-, 2- and 3-pixel errors ``torch.mean(((E > thres) & mask).float())`` with ``E = (D_est -
  D_gt).abs()``, D1 of KITTI by ``(E > 3) & (E / D_gt.abs() > 0.05)``; the cost volume's
  ``argmax`` disparity compared as integers;
- training: ``Adam(betas=(0.9, 0.999))`` with the learning rate set per epoch by a loop over
  ``optimizer.param_groups`` (``adjust_learning_rate``), ``model.train()``/``model.eval()`` with
  the eval branch returning the last output only; the checkpoint through ``torch.save`` of
  ``{"epoch", "state_dict", "train_loss"}`` to a buffer and ``load_state_dict`` into a fresh
  model, evaluated again.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
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

STEREO_SOURCE = """import io
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def convbn(in_planes, out_planes, kernel_size, stride, pad, dilation):
    return nn.Sequential(nn.Conv2d(in_planes, out_planes, kernel_size=kernel_size,
                                   stride=stride, padding=dilation if dilation > 1 else pad,
                                   dilation=dilation, bias=False),
                         nn.BatchNorm2d(out_planes))


def convbn_3d(in_planes, out_planes, kernel_size, stride, pad):
    return nn.Sequential(nn.Conv3d(in_planes, out_planes, kernel_size=kernel_size,
                                   padding=pad, stride=stride, bias=False),
                         nn.BatchNorm3d(out_planes))


def disparity_regression(x, maxdisp):
    assert len(x.shape) == 4
    disp_values = torch.arange(0, maxdisp, dtype=x.dtype, device=x.device)
    disp_values = disp_values.view(1, maxdisp, 1, 1)
    return torch.sum(x * disp_values, 1, keepdim=False)


def build_concat_volume(refimg_fea, targetimg_fea, maxdisp):
    B, C, H, W = refimg_fea.shape
    volume = refimg_fea.new_zeros([B, 2 * C, maxdisp, H, W])
    for i in range(maxdisp):
        if i > 0:
            volume[:, :C, i, :, i:] = refimg_fea[:, :, :, i:]
            volume[:, C:, i, :, i:] = targetimg_fea[:, :, :, :-i]
        else:
            volume[:, :C, i, :, :] = refimg_fea
            volume[:, C:, i, :, :] = targetimg_fea
    volume = volume.contiguous()
    return volume


def groupwise_correlation(fea1, fea2, num_groups):
    B, C, H, W = fea1.shape
    assert C % num_groups == 0
    channels_per_group = C // num_groups
    cost = (fea1 * fea2).view([B, num_groups, channels_per_group, H, W]).mean(dim=2)
    assert cost.shape == (B, num_groups, H, W)
    return cost


def build_gwc_volume(refimg_fea, targetimg_fea, maxdisp, num_groups):
    B, C, H, W = refimg_fea.shape
    volume = refimg_fea.new_zeros([B, num_groups, maxdisp, H, W])
    for i in range(maxdisp):
        if i > 0:
            volume[:, :, i, :, i:] = groupwise_correlation(refimg_fea[:, :, :, i:],
                                                           targetimg_fea[:, :, :, :-i],
                                                           num_groups)
        else:
            volume[:, :, i, :, :] = groupwise_correlation(refimg_fea, targetimg_fea, num_groups)
    volume = volume.contiguous()
    return volume


class feature_extraction(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.firstconv = nn.Sequential(convbn(3, width, 3, 2, 1, 1), nn.ReLU(inplace=True),
                                       convbn(width, width, 3, 1, 1, 1), nn.ReLU(inplace=True))
        self.layer1 = nn.Sequential(convbn(width, width, 3, 1, 1, 2), nn.ReLU(inplace=True))
        self.lastconv = nn.Conv2d(2 * width, 2 * width, kernel_size=1, padding=0, stride=1,
                                  bias=False)

    def forward(self, x):
        output = self.firstconv(x)
        output_l1 = self.layer1(output)
        gwc_feature = torch.cat((output, output_l1), dim=1)
        return {"gwc_feature": gwc_feature, "concat_feature": self.lastconv(gwc_feature)}


class hourglass(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.conv1 = nn.Sequential(convbn_3d(in_channels, in_channels * 2, 3, 2, 1),
                                   nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(convbn_3d(in_channels * 2, in_channels * 2, 3, 1, 1),
                                   nn.ReLU(inplace=True))
        self.conv6 = nn.Sequential(
            nn.ConvTranspose3d(in_channels * 2, in_channels, 3, padding=1, output_padding=1,
                               stride=2, bias=False),
            nn.BatchNorm3d(in_channels))
        self.redir1 = convbn_3d(in_channels, in_channels, kernel_size=1, stride=1, pad=0)

    def forward(self, x):
        conv1 = self.conv1(x)
        conv2 = self.conv2(conv1)
        conv6 = F.relu(self.conv6(conv2) + self.redir1(x), inplace=True)
        return conv6


class GwcNet(nn.Module):
    def __init__(self, maxdisp, width=4, num_groups=4, concat_channels=3):
        super().__init__()
        self.maxdisp = maxdisp
        self.num_groups = num_groups
        self.concat_channels = concat_channels
        self.feature_extraction = feature_extraction(width)
        self.concat = nn.Sequential(convbn(2 * width, concat_channels, 1, 1, 0, 1))
        c = num_groups + 2 * concat_channels
        self.dres0 = nn.Sequential(convbn_3d(c, 4, 3, 1, 1), nn.ReLU(inplace=True),
                                   convbn_3d(4, 4, 3, 1, 1), nn.ReLU(inplace=True))
        self.dres1 = hourglass(4)
        self.dres2 = hourglass(4)
        self.classif0 = nn.Sequential(convbn_3d(4, 4, 3, 1, 1), nn.ReLU(inplace=True),
                                      nn.Conv3d(4, 1, kernel_size=3, padding=1, stride=1,
                                                bias=False))
        self.classif1 = nn.Sequential(convbn_3d(4, 4, 3, 1, 1), nn.ReLU(inplace=True),
                                      nn.Conv3d(4, 1, kernel_size=3, padding=1, stride=1,
                                                bias=False))
        self.classif2 = nn.Sequential(convbn_3d(4, 4, 3, 1, 1), nn.ReLU(inplace=True),
                                      nn.Conv3d(4, 1, kernel_size=3, padding=1, stride=1,
                                                bias=False))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, nn.Conv3d):
                n = m.kernel_size[0] * m.kernel_size[1] * m.kernel_size[2] * m.out_channels
                m.weight.data.normal_(0, math.sqrt(2. / n))
            elif isinstance(m, (nn.BatchNorm2d, nn.BatchNorm3d)):
                m.weight.data.fill_(1)
                m.bias.data.zero_()

    def regress(self, cost, H, W):
        cost = F.interpolate(cost, [self.maxdisp, H, W], mode="trilinear", align_corners=False)
        cost = torch.squeeze(cost, 1)
        pred = F.softmax(cost, dim=1)
        return disparity_regression(pred, self.maxdisp), cost

    def forward(self, left, right):
        features_left = self.feature_extraction(left)
        features_right = self.feature_extraction(right)
        D = self.maxdisp // 2
        gwc_volume = build_gwc_volume(features_left["gwc_feature"],
                                      features_right["gwc_feature"], D, self.num_groups)
        concat_left = self.concat(features_left["concat_feature"])
        concat_right = self.concat(features_right["concat_feature"])
        concat_volume = build_concat_volume(concat_left, concat_right, D)
        volume = torch.cat((gwc_volume, concat_volume), 1)
        cost0 = self.dres0(volume)
        out1 = self.dres1(cost0)
        out2 = self.dres2(out1)
        H, W = left.size(2), left.size(3)
        if self.training:
            pred0, _ = self.regress(self.classif0(cost0), H, W)
            pred1, _ = self.regress(self.classif1(out1), H, W)
            pred2, _ = self.regress(self.classif2(out2), H, W)
            return [pred0, pred1, pred2]
        pred2, cost2 = self.regress(self.classif2(out2), H, W)
        return [pred2], cost2


def model_loss(disp_ests, disp_gt, mask):
    weights = [0.5, 0.7, 1.0]
    all_losses = []
    for disp_est, weight in zip(disp_ests, weights):
        all_losses.append(weight * F.smooth_l1_loss(disp_est[mask], disp_gt[mask],
                                                    reduction="mean"))
    return sum(all_losses)


def EPE_metric(D_est, D_gt, mask):
    D_est, D_gt = D_est[mask], D_gt[mask]
    return F.l1_loss(D_est, D_gt, reduction="mean")


def Thres_metric(D_est, D_gt, mask, thres):
    E = torch.abs(D_gt - D_est)
    err_mask = (E > thres) & mask
    return torch.mean(err_mask.float())


def D1_metric(D_est, D_gt, mask):
    D_est, D_gt = D_est[mask], D_gt[mask]
    E = torch.abs(D_gt - D_est)
    err_mask = (E > 3) & (E / D_gt.abs() > 0.05)
    return torch.mean(err_mask.float())


def make_pair(n, H, W, maxdisp):
    right = F.avg_pool2d(torch.rand(n, 3, H, W), 3, stride=1, padding=1,
                         count_include_pad=False)
    cols = torch.arange(W, dtype=torch.float32).view(1, 1, W).expand(n, H, W)
    near = torch.rand(n, 1, 1) * (maxdisp - 4) + 2
    far = torch.rand(n, 1, 1) * 2 + 1
    disp = torch.where(cols > W // 2, near, far)
    disp = torch.where(cols >= W - 3, torch.full_like(disp, maxdisp + 1.5), disp)
    ys, xs = torch.meshgrid(torch.arange(H, dtype=torch.float32),
                            torch.arange(W, dtype=torch.float32), indexing="ij")
    x_src = xs.unsqueeze(0) - disp
    grid = torch.stack((2.0 * x_src / (W - 1) - 1.0,
                        (2.0 * ys / (H - 1) - 1.0).unsqueeze(0).expand(n, H, W)), dim=-1)
    left = F.grid_sample(right, grid, mode="bilinear", padding_mode="border",
                         align_corners=True)
    return left, right, disp


def adjust_learning_rate(optimizer, epoch, base_lr):
    lr = base_lr if epoch < 2 else base_lr * 0.5
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


MAXDISP = 8
model = GwcNet(MAXDISP, num_groups=GROUPS)
initialize(model)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.999))
pairs = [make_pair(2, 8, 16, MAXDISP), make_pair(2, 8, 16, MAXDISP)]
record.append(pairs[0][2].numpy().copy())

for epoch in range(4):
    lr = adjust_learning_rate(optimizer, epoch, 1e-2)
    model.train()
    imgL, imgR, disp_gt = pairs[epoch % 2]
    mask = (disp_gt < MAXDISP) & (disp_gt > 0)
    mask.detach_()
    disp_ests = model(imgL, imgR)
    loss = model_loss(disp_ests, disp_gt, mask)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    record.append([loss.item(), lr] + [EPE_metric(d.detach(), disp_gt, mask).item()
                                       for d in disp_ests])
    record.append(params_of(model))
    print("Epoch {} train loss = {:.3f}".format(epoch, loss.item()))

model.eval()
with torch.no_grad():
    imgL, imgR, disp_gt = make_pair(2, 8, 16, MAXDISP)
    mask = (disp_gt < MAXDISP) & (disp_gt > 0)
    (disp_est,), cost = model(imgL, imgR)
    record.append(disp_est.numpy().copy())
    record.append([EPE_metric(disp_est, disp_gt, mask).item(),
                   D1_metric(disp_est, disp_gt, mask).item()]
                  + [Thres_metric(disp_est, disp_gt, mask, t).item() for t in (1.0, 2.0, 3.0)])

buffer = io.BytesIO()
torch.save({"epoch": 4, "state_dict": model.state_dict(), "train_loss": loss.item()}, buffer)
buffer.seek(0)
state_dict = torch.load(buffer)
restored = GwcNet(MAXDISP, num_groups=GROUPS)
restored.load_state_dict(state_dict["state_dict"])
restored.eval()
with torch.no_grad():
    (again,), cost_again = restored(imgL, imgR)
    record.append([state_dict["epoch"], (again - disp_est).abs().max().item() < 1e-5])
    record.append(cost_again.numpy().copy())
"""

STEREO_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n    optimizer.step()\n",
        "    grads = loss.backward()\n    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("groups", [2, 4])
def test_gwcnet_stereo_matching_as_torch(capsys, groups):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        STEREO_SOURCE,
        STEREO_STEPS,
        capsys,
        7402,
        initialize=initializer(),
        params_of=params_of,
        GROUPS=groups,
    )
    assert len(theirs) == 1 + 2 * 4 + 4
    assert their_log == our_log and their_log.count("\n") == 4
    assert theirs[-2] == [4, True]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
