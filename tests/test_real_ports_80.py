# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
dense prediction and self-supervised learning, as their repositories write them, small.

- monodepth2 as nianticlabs/monodepth2 writes it (``layers.py`` whole but for its unused
  helpers: ``disp_to_depth``, ``transformation_from_parameters``/``rot_from_axisangle``/
  ``get_translation_matrix`` by item assignment into ``torch.zeros``, ``Conv3x3`` with
  ``nn.ReflectionPad2d`` over NumPy-integer channel counts, ``BackprojectDepth`` with its
  ``nn.Parameter(..., requires_grad=False)`` pixel grids, ``Project3D`` with
  ``pix_coords[..., 0] /= self.width - 1`` in place on a permuted view, ``SSIM`` of
  ``nn.AvgPool2d``, ``get_smooth_loss``; ``networks/depth_decoder.py`` and ``pose_decoder.py``
  over ``OrderedDict``s of tuple keys; ``trainer.py``'s ``predict_poses``,
  ``generate_images_pred`` (``F.grid_sample(..., padding_mode="border")``, bilinear
  ``F.interpolate`` of each scale's disparity), ``compute_reprojection_loss`` and
  ``compute_losses`` with the auto-masking's ``torch.min(combined, dim=1)`` after ``randn``
  tie-breaking noise), its ``Adam`` and ``StepLR``, fed by ``mono_dataset.py``'s dict of tuple
  keys through the ``DataLoader``; a five-stage strided encoder for the ResNet, 64x64 frames.
- SupContrast as HobbitLong/SupContrast writes it (``losses.py``'s ``SupConLoss``: ``torch.cat(
  torch.unbind(features, dim=1), dim=0)``, ``torch.scatter(torch.ones_like(mask), 1, ...,
  0)``, ``torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)``; ``util.py``'s
  ``TwoCropTransform``, ``AverageMeter``, warmup and cosine learning rates; ``main_supcon.py``'s
  ``set_loader``/``set_model``/``train``/``main``), SupCon and SimCLR, a small encoder for
  ``resnet_big``'s ResNet, NumPy crops and flips for torchvision's transforms.
- the Simple Baselines pose estimator of microsoft/human-pose-estimation.pytorch
  (``lib/core/loss.py``'s ``JointsMSELoss`` with the legacy ``nn.MSELoss(size_average=True)``,
  ``inference.py``'s ``get_max_preds``, ``evaluate.py``'s PCK ``accuracy``, ``pose_resnet.py``'s
  deconvolution head and ``init_weights``, ``JointsDataset.generate_target``'s Gaussian
  heatmaps and a meta dict of strings and arrays collated by the ``DataLoader``,
  ``function.py``'s ``train`` without its ``.cuda()`` calls, ``MultiStepLR``).
- VICReg as facebookresearch/vicreg writes it (``main_vicreg.py``'s ``VICReg``, ``Projector``,
  ``off_diagonal(...).pow_(2)``, ``LARS``, ``adjust_learning_rate``, the ``FullGatherLayer``
  ``autograd.Function`` returning a tuple, its training step under a disabled ``GradScaler``),
  one process (``torch.distributed`` a stand-in of world size 1), a small backbone.
- PSPNet as hszhao/semseg writes it (``model/pspnet.py``'s ``PPM`` of ``nn.AdaptiveAvgPool2d``
  bins 1, 2, 3 and 6 on a 3x3 map, ``F.interpolate(..., mode='bilinear', align_corners=True)``,
  the auxiliary head made ``if self.training``, ``x.max(1)[1]``; ``util/util.py``'s
  ``AverageMeter`` of arrays, ``poly_learning_rate`` and ``intersectionAndUnion``;
  ``tool/train.py``'s parameter groups of ``dict(params=module.parameters(), lr=...)``
  generators, ``CrossEntropyLoss(ignore_index=255)``, the target bilinearly resized for a zoom
  factor of 4): a small dilated backbone for the ResNet, dropout 0 (its masks are each
  library's own), and the NumPy ``intersectionAndUnion`` for its GPU twin, whose
  ``torch.histc`` of int64 labels torch refuses on the CPU (retrograd refuses it too).
- MoCo v3 as facebookresearch/moco-v3 writes it (``moco/builder.py``'s ``MoCo`` and
  ``MoCo_ResNet``: ``del self.base_encoder.fc, self.momentum_encoder.fc`` and new projector
  MLPs ending in ``nn.BatchNorm1d(dim2, affine=False)``, the momentum encoder's parameters set
  ``requires_grad = False`` yet handed to SGD (which leaves them, and their weight decay,
  alone), ``param_m.data = param_m.data * m + param_b.data * (1. - m)`` under ``no_grad``,
  ``concat_all_gather``, ``torch.einsum('nc,mc->nm', [q, k])``; ``main_moco.py``'s ``train``
  under ``torch.cuda.amp.autocast(True)`` (off without CUDA, in both) and a ``GradScaler``,
  cosine learning rate and momentum schedules), one process: ``torch.distributed``'s
  ``get_rank``/``get_world_size``/``all_gather`` and ``Tensor.cuda`` patched to a world of one
  on the CPU for the run, so that the builder's lines run as written.

monodepth2, VICReg and MoCo v3 run in float64 (``set_default_dtype``, and float64 data): in
float32, Adam's, LARS's and SGD's steps at their large learning rates carry the rounding of
gradients that nearly cancel (a parameter of monodepth2's pose encoder moved 5% of an Adam step
apart after two steps, MoCo v3's sixth loss 4e-5 apart; in float64 they agree to 1e-10 or
better). The lines changed: the gradient lines (``grads = loss.backward()``,
``optimizer.step(grads)``, LARS's ``step(self, grads)`` reading ``p.grad(grads)``) and the
``import`` lines. The loader's shuffle draws one stream of permutations in both runs. The defect
found: ``import torch.backends.cudnn as cudnn`` failed (``retrograd.backends`` was a module
whose ``cudnn`` was a namespace, not a submodule).
"""

from __future__ import annotations

import contextlib
import random
import sys
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    rg.seed(0)


MONODEPTH2_SOURCE = """
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


# -- layers.py ------------------------------------------------------------------------------------
def disp_to_depth(disp, min_depth, max_depth):
    \"\"\"Convert network's sigmoid output into depth prediction
    The formula for this conversion is given in the 'additional considerations'
    section of the paper.
    \"\"\"
    min_disp = 1 / max_depth
    max_disp = 1 / min_depth
    scaled_disp = min_disp + (max_disp - min_disp) * disp
    depth = 1 / scaled_disp
    return scaled_disp, depth


def transformation_from_parameters(axisangle, translation, invert=False):
    \"\"\"Convert the network's (axisangle, translation) output into a 4x4 matrix
    \"\"\"
    R = rot_from_axisangle(axisangle)
    t = translation.clone()

    if invert:
        R = R.transpose(1, 2)
        t *= -1

    T = get_translation_matrix(t)

    if invert:
        M = torch.matmul(R, T)
    else:
        M = torch.matmul(T, R)

    return M


def get_translation_matrix(translation_vector):
    \"\"\"Convert a translation vector into a 4x4 transformation matrix
    \"\"\"
    T = torch.zeros(translation_vector.shape[0], 4, 4).to(device=translation_vector.device)

    t = translation_vector.contiguous().view(-1, 3, 1)

    T[:, 0, 0] = 1
    T[:, 1, 1] = 1
    T[:, 2, 2] = 1
    T[:, 3, 3] = 1
    T[:, :3, 3, None] = t

    return T


def rot_from_axisangle(vec):
    \"\"\"Convert an axisangle rotation into a 4x4 transformation matrix
    (adapted from https://github.com/Wallacoloo/printipi)
    Input 'vec' has to be Bx1x3
    \"\"\"
    angle = torch.norm(vec, 2, 2, True)
    axis = vec / (angle + 1e-7)

    ca = torch.cos(angle)
    sa = torch.sin(angle)
    C = 1 - ca

    x = axis[..., 0].unsqueeze(1)
    y = axis[..., 1].unsqueeze(1)
    z = axis[..., 2].unsqueeze(1)

    xs = x * sa
    ys = y * sa
    zs = z * sa
    xC = x * C
    yC = y * C
    zC = z * C
    xyC = x * yC
    yzC = y * zC
    zxC = z * xC

    rot = torch.zeros((vec.shape[0], 4, 4)).to(device=vec.device)

    rot[:, 0, 0] = torch.squeeze(x * xC + ca)
    rot[:, 0, 1] = torch.squeeze(xyC - zs)
    rot[:, 0, 2] = torch.squeeze(zxC + ys)
    rot[:, 1, 0] = torch.squeeze(xyC + zs)
    rot[:, 1, 1] = torch.squeeze(y * yC + ca)
    rot[:, 1, 2] = torch.squeeze(yzC - xs)
    rot[:, 2, 0] = torch.squeeze(zxC - ys)
    rot[:, 2, 1] = torch.squeeze(yzC + xs)
    rot[:, 2, 2] = torch.squeeze(z * zC + ca)
    rot[:, 3, 3] = 1

    return rot


class ConvBlock(nn.Module):
    \"\"\"Layer to perform a convolution followed by ELU
    \"\"\"
    def __init__(self, in_channels, out_channels):
        super(ConvBlock, self).__init__()

        self.conv = Conv3x3(in_channels, out_channels)
        self.nonlin = nn.ELU(inplace=True)

    def forward(self, x):
        out = self.conv(x)
        out = self.nonlin(out)
        return out


class Conv3x3(nn.Module):
    \"\"\"Layer to pad and convolve input
    \"\"\"
    def __init__(self, in_channels, out_channels, use_refl=True):
        super(Conv3x3, self).__init__()

        if use_refl:
            self.pad = nn.ReflectionPad2d(1)
        else:
            self.pad = nn.ZeroPad2d(1)
        self.conv = nn.Conv2d(int(in_channels), int(out_channels), 3)

    def forward(self, x):
        out = self.pad(x)
        out = self.conv(out)
        return out


class BackprojectDepth(nn.Module):
    \"\"\"Layer to transform a depth image into a point cloud
    \"\"\"
    def __init__(self, batch_size, height, width):
        super(BackprojectDepth, self).__init__()

        self.batch_size = batch_size
        self.height = height
        self.width = width

        meshgrid = np.meshgrid(range(self.width), range(self.height), indexing='xy')
        self.id_coords = np.stack(meshgrid, axis=0).astype(np.float32)
        self.id_coords = nn.Parameter(torch.from_numpy(self.id_coords),
                                      requires_grad=False)

        self.ones = nn.Parameter(torch.ones(self.batch_size, 1, self.height * self.width),
                                 requires_grad=False)

        self.pix_coords = torch.unsqueeze(torch.stack(
            [self.id_coords[0].view(-1), self.id_coords[1].view(-1)], 0), 0)
        self.pix_coords = self.pix_coords.repeat(batch_size, 1, 1)
        self.pix_coords = nn.Parameter(torch.cat([self.pix_coords, self.ones], 1),
                                       requires_grad=False)

    def forward(self, depth, inv_K):
        cam_points = torch.matmul(inv_K[:, :3, :3], self.pix_coords)
        cam_points = depth.view(self.batch_size, 1, -1) * cam_points
        cam_points = torch.cat([cam_points, self.ones], 1)

        return cam_points


class Project3D(nn.Module):
    \"\"\"Layer which projects 3D points into a camera with intrinsics K and at position T
    \"\"\"
    def __init__(self, batch_size, height, width, eps=1e-7):
        super(Project3D, self).__init__()

        self.batch_size = batch_size
        self.height = height
        self.width = width
        self.eps = eps

    def forward(self, points, K, T):
        P = torch.matmul(K, T)[:, :3, :]

        cam_points = torch.matmul(P, points)

        pix_coords = cam_points[:, :2, :] / (cam_points[:, 2, :].unsqueeze(1) + self.eps)
        pix_coords = pix_coords.view(self.batch_size, 2, self.height, self.width)
        pix_coords = pix_coords.permute(0, 2, 3, 1)
        pix_coords[..., 0] /= self.width - 1
        pix_coords[..., 1] /= self.height - 1
        pix_coords = (pix_coords - 0.5) * 2
        return pix_coords


def upsample(x):
    \"\"\"Upsample input tensor by a factor of 2
    \"\"\"
    return F.interpolate(x, scale_factor=2, mode="nearest")


def get_smooth_loss(disp, img):
    \"\"\"Computes the smoothness loss for a disparity image
    The color image is used for edge-aware smoothness
    \"\"\"
    grad_disp_x = torch.abs(disp[:, :, :, :-1] - disp[:, :, :, 1:])
    grad_disp_y = torch.abs(disp[:, :, :-1, :] - disp[:, :, 1:, :])

    grad_img_x = torch.mean(torch.abs(img[:, :, :, :-1] - img[:, :, :, 1:]), 1, keepdim=True)
    grad_img_y = torch.mean(torch.abs(img[:, :, :-1, :] - img[:, :, 1:, :]), 1, keepdim=True)

    grad_disp_x *= torch.exp(-grad_img_x)
    grad_disp_y *= torch.exp(-grad_img_y)

    return grad_disp_x.mean() + grad_disp_y.mean()


class SSIM(nn.Module):
    \"\"\"Layer to compute the SSIM loss between a pair of images
    \"\"\"
    def __init__(self):
        super(SSIM, self).__init__()
        self.mu_x_pool   = nn.AvgPool2d(3, 1)
        self.mu_y_pool   = nn.AvgPool2d(3, 1)
        self.sig_x_pool  = nn.AvgPool2d(3, 1)
        self.sig_y_pool  = nn.AvgPool2d(3, 1)
        self.sig_xy_pool = nn.AvgPool2d(3, 1)

        self.refl = nn.ReflectionPad2d(1)

        self.C1 = 0.01 ** 2
        self.C2 = 0.03 ** 2

    def forward(self, x, y):
        x = self.refl(x)
        y = self.refl(y)

        mu_x = self.mu_x_pool(x)
        mu_y = self.mu_y_pool(y)

        sigma_x  = self.sig_x_pool(x ** 2) - mu_x ** 2
        sigma_y  = self.sig_y_pool(y ** 2) - mu_y ** 2
        sigma_xy = self.sig_xy_pool(x * y) - mu_x * mu_y

        SSIM_n = (2 * mu_x * mu_y + self.C1) * (2 * sigma_xy + self.C2)
        SSIM_d = (mu_x ** 2 + mu_y ** 2 + self.C1) * (sigma_x + sigma_y + self.C2)

        return torch.clamp((1 - SSIM_n / SSIM_d) / 2, 0, 1)


# -- networks/resnet_encoder.py: five stages of one strided convolution for the ResNet's -------------
class ResnetEncoder(nn.Module):
    def __init__(self, num_layers, pretrained, num_input_images=1):
        super(ResnetEncoder, self).__init__()

        self.num_ch_enc = np.array([4, 4, 8, 8, 8])  # [64, 64, 128, 256, 512] for ResNet-18
        self.stages = nn.ModuleList()
        ch = 3 * num_input_images
        for c in self.num_ch_enc:
            self.stages.append(nn.Sequential(nn.Conv2d(ch, int(c), 3, 2, 1), nn.ReLU(inplace=True)))
            ch = int(c)

    def forward(self, input_image):
        self.features = []
        x = (input_image - 0.45) / 0.225
        for stage in self.stages:
            x = stage(x)
            self.features.append(x)
        return self.features


# -- networks/depth_decoder.py --------------------------------------------------------------------
class DepthDecoder(nn.Module):
    def __init__(self, num_ch_enc, scales=range(4), num_output_channels=1, use_skips=True):
        super(DepthDecoder, self).__init__()

        self.num_output_channels = num_output_channels
        self.use_skips = use_skips
        self.upsample_mode = 'nearest'
        self.scales = scales

        self.num_ch_enc = num_ch_enc
        self.num_ch_dec = np.array([4, 4, 8, 8, 8])  # [16, 32, 64, 128, 256]

        # decoder
        self.convs = OrderedDict()
        for i in range(4, -1, -1):
            # upconv_0
            num_ch_in = self.num_ch_enc[-1] if i == 4 else self.num_ch_dec[i + 1]
            num_ch_out = self.num_ch_dec[i]
            self.convs[("upconv", i, 0)] = ConvBlock(num_ch_in, num_ch_out)

            # upconv_1
            num_ch_in = self.num_ch_dec[i]
            if self.use_skips and i > 0:
                num_ch_in += self.num_ch_enc[i - 1]
            num_ch_out = self.num_ch_dec[i]
            self.convs[("upconv", i, 1)] = ConvBlock(num_ch_in, num_ch_out)

        for s in self.scales:
            self.convs[("dispconv", s)] = Conv3x3(self.num_ch_dec[s], self.num_output_channels)

        self.decoder = nn.ModuleList(list(self.convs.values()))
        self.sigmoid = nn.Sigmoid()

    def forward(self, input_features):
        self.outputs = {}

        # decoder
        x = input_features[-1]
        for i in range(4, -1, -1):
            x = self.convs[("upconv", i, 0)](x)
            x = [upsample(x)]
            if self.use_skips and i > 0:
                x += [input_features[i - 1]]
            x = torch.cat(x, 1)
            x = self.convs[("upconv", i, 1)](x)
            if i in self.scales:
                self.outputs[("disp", i)] = self.sigmoid(self.convs[("dispconv", i)](x))

        return self.outputs


# -- networks/pose_decoder.py (256 channels narrowed to ``width``) ----------------------------------
class PoseDecoder(nn.Module):
    def __init__(self, num_ch_enc, num_input_features, num_frames_to_predict_for=None, stride=1, width=8):
        super(PoseDecoder, self).__init__()

        self.num_ch_enc = num_ch_enc
        self.num_input_features = num_input_features

        if num_frames_to_predict_for is None:
            num_frames_to_predict_for = num_input_features - 1
        self.num_frames_to_predict_for = num_frames_to_predict_for

        self.convs = OrderedDict()
        self.convs[("squeeze")] = nn.Conv2d(self.num_ch_enc[-1], width, 1)
        self.convs[("pose", 0)] = nn.Conv2d(num_input_features * width, width, 3, stride, 1)
        self.convs[("pose", 1)] = nn.Conv2d(width, width, 3, stride, 1)
        self.convs[("pose", 2)] = nn.Conv2d(width, 6 * num_frames_to_predict_for, 1)

        self.relu = nn.ReLU()

        self.net = nn.ModuleList(list(self.convs.values()))

    def forward(self, input_features):
        last_features = [f[-1] for f in input_features]

        cat_features = [self.relu(self.convs["squeeze"](f)) for f in last_features]
        cat_features = torch.cat(cat_features, 1)

        out = cat_features
        for i in range(3):
            out = self.convs[("pose", i)](out)
            if i != 2:
                out = self.relu(out)

        out = out.mean(3).mean(2)

        out = 0.01 * out.view(-1, self.num_frames_to_predict_for, 1, 6)

        axisangle = out[..., :3]
        translation = out[..., 3:]

        return axisangle, translation


# -- datasets/mono_dataset.py's __getitem__, its images given (no augmentation) -------------------
class MonoDataset(Dataset):
    def __init__(self, frames, K, height, width, frame_idxs, num_scales):
        super(MonoDataset, self).__init__()
        self.frames, self.K = frames, K
        self.height, self.width = height, width
        self.frame_idxs, self.num_scales = frame_idxs, num_scales

    def __len__(self):
        return len(self.frames)

    def __getitem__(self, index):
        inputs = {}
        for i in self.frame_idxs:
            image = self.frames[index][i]  # 3 x H x W in [0, 1]
            for scale in range(self.num_scales):
                s = 2 ** scale
                c, h, w = image.shape
                resized = image.reshape(c, h // s, s, w // s, s).mean((2, 4))
                inputs[("color", i, scale)] = torch.from_numpy(resized)
                inputs[("color_aug", i, scale)] = torch.from_numpy(resized)

        # adjusting intrinsics to match each scale in the pyramid
        for scale in range(self.num_scales):
            K = self.K.copy()

            K[0, :] *= self.width // (2 ** scale)
            K[1, :] *= self.height // (2 ** scale)

            inv_K = np.linalg.pinv(K)

            inputs[("K", scale)] = torch.from_numpy(K)
            inputs[("inv_K", scale)] = torch.from_numpy(inv_K)
        return inputs


# -- trainer.py -----------------------------------------------------------------------------------
class Trainer:
    def __init__(self, options, frames, initialize):
        self.opt = options
        self.models = {}
        self.parameters_to_train = []

        self.device = torch.device("cpu")

        self.num_scales = len(self.opt.scales)
        self.num_input_frames = len(self.opt.frame_ids)
        self.num_pose_frames = 2 if self.opt.pose_model_input == "pairs" else self.num_input_frames

        self.use_pose_net = not (self.opt.use_stereo and self.opt.frame_ids == [0])

        self.models["encoder"] = ResnetEncoder(self.opt.num_layers, False)
        self.models["encoder"].to(self.device)
        self.parameters_to_train += list(self.models["encoder"].parameters())

        self.models["depth"] = DepthDecoder(
            self.models["encoder"].num_ch_enc, self.opt.scales)
        self.models["depth"].to(self.device)
        self.parameters_to_train += list(self.models["depth"].parameters())

        self.models["pose_encoder"] = ResnetEncoder(
            self.opt.num_layers, False, num_input_images=self.num_pose_frames)
        self.models["pose_encoder"].to(self.device)
        self.parameters_to_train += list(self.models["pose_encoder"].parameters())

        self.models["pose"] = PoseDecoder(
            self.models["pose_encoder"].num_ch_enc,
            num_input_features=1,
            num_frames_to_predict_for=2)
        self.models["pose"].to(self.device)
        self.parameters_to_train += list(self.models["pose"].parameters())
        for name in ["encoder", "depth", "pose_encoder", "pose"]:
            initialize(self.models[name])

        self.model_optimizer = optim.Adam(self.parameters_to_train, self.opt.learning_rate)
        self.model_lr_scheduler = optim.lr_scheduler.StepLR(
            self.model_optimizer, self.opt.scheduler_step_size, 0.1)

        train_dataset = MonoDataset(frames, self.opt.K, self.opt.height, self.opt.width,
                                    self.opt.frame_ids, 4)
        self.train_loader = DataLoader(
            train_dataset, self.opt.batch_size, False,
            num_workers=self.opt.num_workers, pin_memory=True, drop_last=True)

        self.ssim = SSIM()
        self.ssim.to(self.device)

        self.backproject_depth = {}
        self.project_3d = {}
        for scale in self.opt.scales:
            h = self.opt.height // (2 ** scale)
            w = self.opt.width // (2 ** scale)

            self.backproject_depth[scale] = BackprojectDepth(self.opt.batch_size, h, w)
            self.backproject_depth[scale].to(self.device)

            self.project_3d[scale] = Project3D(self.opt.batch_size, h, w)
            self.project_3d[scale].to(self.device)

    def set_train(self):
        \"\"\"Convert all models to training mode
        \"\"\"
        for m in self.models.values():
            m.train()

    def train(self, record):
        \"\"\"Run the entire training pipeline
        \"\"\"
        self.epoch = 0
        self.step = 0
        for self.epoch in range(self.opt.num_epochs):
            self.run_epoch(record)

    def run_epoch(self, record):
        \"\"\"Run a single epoch of training and validation
        \"\"\"
        self.set_train()

        for batch_idx, inputs in enumerate(self.train_loader):

            outputs, losses = self.process_batch(inputs)

            self.model_optimizer.zero_grad()
            losses["loss"].backward()
            self.model_optimizer.step()

            record.append({k: v.item() for k, v in losses.items()})
            record.append(outputs["identity_selection/0"].numpy().copy())
            record.append(outputs[("cam_T_cam", 0, -1)].detach().numpy().copy())
            self.step += 1
        self.model_lr_scheduler.step()
        for name in ["encoder", "depth", "pose_encoder", "pose"]:
            record.append({k: v.detach().numpy().copy() for k, v in self.models[name].state_dict().items()})

    def process_batch(self, inputs):
        \"\"\"Pass a minibatch through the network and generate images and losses
        \"\"\"
        for key, ipt in inputs.items():
            inputs[key] = ipt.to(self.device)

        # Otherwise, we only feed the image with frame_id 0 through the depth encoder
        features = self.models["encoder"](inputs["color_aug", 0, 0])
        outputs = self.models["depth"](features)

        if self.use_pose_net:
            outputs.update(self.predict_poses(inputs, features))

        self.generate_images_pred(inputs, outputs)
        losses = self.compute_losses(inputs, outputs)

        return outputs, losses

    def predict_poses(self, inputs, features):
        \"\"\"Predict poses between input frames for monocular sequences.
        \"\"\"
        outputs = {}
        if self.num_pose_frames == 2:
            # In this setting, we compute the pose to each source frame via a
            # separate forward pass through the pose network.

            # select what features the pose network takes as input
            pose_feats = {f_i: inputs["color_aug", f_i, 0] for f_i in self.opt.frame_ids}

            for f_i in self.opt.frame_ids[1:]:
                if f_i != "s":
                    # To maintain ordering we always pass frames in temporal order
                    if f_i < 0:
                        pose_inputs = [pose_feats[f_i], pose_feats[0]]
                    else:
                        pose_inputs = [pose_feats[0], pose_feats[f_i]]

                    if self.opt.pose_model_type == "separate_resnet":
                        pose_inputs = [self.models["pose_encoder"](torch.cat(pose_inputs, 1))]
                    elif self.opt.pose_model_type == "posecnn":
                        pose_inputs = torch.cat(pose_inputs, 1)

                    axisangle, translation = self.models["pose"](pose_inputs)
                    outputs[("axisangle", 0, f_i)] = axisangle
                    outputs[("translation", 0, f_i)] = translation

                    # Invert the matrix if the frame id is negative
                    outputs[("cam_T_cam", 0, f_i)] = transformation_from_parameters(
                        axisangle[:, 0], translation[:, 0], invert=(f_i < 0))

        return outputs

    def generate_images_pred(self, inputs, outputs):
        \"\"\"Generate the warped (reprojected) color images for a minibatch.
        Generated images are saved into the `outputs` dictionary.
        \"\"\"
        for scale in self.opt.scales:
            disp = outputs[("disp", scale)]
            if self.opt.v1_multiscale:
                source_scale = scale
            else:
                disp = F.interpolate(
                    disp, [self.opt.height, self.opt.width], mode="bilinear", align_corners=False)
                source_scale = 0

            _, depth = disp_to_depth(disp, self.opt.min_depth, self.opt.max_depth)

            outputs[("depth", 0, scale)] = depth

            for i, frame_id in enumerate(self.opt.frame_ids[1:]):

                if frame_id == "s":
                    T = inputs["stereo_T"]
                else:
                    T = outputs[("cam_T_cam", 0, frame_id)]

                cam_points = self.backproject_depth[source_scale](
                    depth, inputs[("inv_K", source_scale)])
                pix_coords = self.project_3d[source_scale](
                    cam_points, inputs[("K", source_scale)], T)

                outputs[("sample", frame_id, scale)] = pix_coords

                outputs[("color", frame_id, scale)] = F.grid_sample(
                    inputs[("color", frame_id, source_scale)],
                    outputs[("sample", frame_id, scale)],
                    padding_mode="border")

                if not self.opt.disable_automasking:
                    outputs[("color_identity", frame_id, scale)] = \\
                        inputs[("color", frame_id, source_scale)]

    def compute_reprojection_loss(self, pred, target):
        \"\"\"Computes reprojection loss between a batch of predicted and target images
        \"\"\"
        abs_diff = torch.abs(target - pred)
        l1_loss = abs_diff.mean(1, True)

        if self.opt.no_ssim:
            reprojection_loss = l1_loss
        else:
            ssim_loss = self.ssim(pred, target).mean(1, True)
            reprojection_loss = 0.85 * ssim_loss + 0.15 * l1_loss

        return reprojection_loss

    def compute_losses(self, inputs, outputs):
        \"\"\"Compute the reprojection and smoothness losses for a minibatch
        \"\"\"
        losses = {}
        total_loss = 0

        for scale in self.opt.scales:
            loss = 0
            reprojection_losses = []

            if self.opt.v1_multiscale:
                source_scale = scale
            else:
                source_scale = 0

            disp = outputs[("disp", scale)]
            color = inputs[("color", 0, scale)]
            target = inputs[("color", 0, source_scale)]

            for frame_id in self.opt.frame_ids[1:]:
                pred = outputs[("color", frame_id, scale)]
                reprojection_losses.append(self.compute_reprojection_loss(pred, target))

            reprojection_losses = torch.cat(reprojection_losses, 1)

            if not self.opt.disable_automasking:
                identity_reprojection_losses = []
                for frame_id in self.opt.frame_ids[1:]:
                    pred = inputs[("color", frame_id, source_scale)]
                    identity_reprojection_losses.append(
                        self.compute_reprojection_loss(pred, target))

                identity_reprojection_losses = torch.cat(identity_reprojection_losses, 1)

                if self.opt.avg_reprojection:
                    identity_reprojection_loss = identity_reprojection_losses.mean(1, keepdim=True)
                else:
                    # save both images, and do min all at once below
                    identity_reprojection_loss = identity_reprojection_losses

            if self.opt.avg_reprojection:
                reprojection_loss = reprojection_losses.mean(1, keepdim=True)
            else:
                reprojection_loss = reprojection_losses

            if not self.opt.disable_automasking:
                # add random numbers to break ties
                identity_reprojection_loss += torch.randn(
                    identity_reprojection_loss.shape, device=self.device) * 0.00001

                combined = torch.cat((identity_reprojection_loss, reprojection_loss), dim=1)
            else:
                combined = reprojection_loss

            if combined.shape[1] == 1:
                to_optimise = combined
            else:
                to_optimise, idxs = torch.min(combined, dim=1)

            if not self.opt.disable_automasking:
                outputs["identity_selection/{}".format(scale)] = (
                    idxs > identity_reprojection_loss.shape[1] - 1).float()

            loss += to_optimise.mean()

            mean_disp = disp.mean(2, True).mean(3, True)
            norm_disp = disp / (mean_disp + 1e-7)
            smooth_loss = get_smooth_loss(norm_disp, color)

            loss += self.opt.disparity_smoothness * smooth_loss / (2 ** scale)
            total_loss += loss
            losses["loss/{}".format(scale)] = loss

        total_loss /= self.num_scales
        losses["loss"] = total_loss
        return losses
"""

MONODEPTH2_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nfrom torch.utils.data import DataLoader, Dataset\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nfrom retrograd.utils.data import DataLoader, Dataset\n",
    ),
    (
        '            losses["loss"].backward()\n            self.model_optimizer.step()\n',
        '            grads = losses["loss"].backward()\n            self.model_optimizer.step(grads)\n',
    ),
]


@contextlib.contextmanager
def default_dtype(lib, dtype):
    """``lib.set_default_dtype(dtype)`` for the block (monodepth2's ``torch.zeros`` poses then
    have the dtype of its float64 images)."""
    saved = lib.get_default_dtype()
    lib.set_default_dtype(dtype)
    try:
        yield
    finally:
        lib.set_default_dtype(saved)


def test_monodepth2_trains_by_view_synthesis_as_torch():
    rng = np.random.default_rng(8001)
    # three frames of a smooth scene (a shifted pattern plus a little noise), 64x64 pixels
    yy, xx = np.mgrid[0:64, 0:64].astype(np.float32) / 64
    frames = []
    for _ in range(4):
        phase = rng.uniform(0, 2 * np.pi, 3)
        frame = {}
        for i in (-1, 0, 1):
            image = np.stack([0.5 + 0.4 * np.sin(6 * (xx + 0.03 * i) + 4 * yy + p) for p in phase])
            noise = 0.02 * rng.standard_normal(image.shape)
            frame[i] = image + noise
        frames.append(frame)
    intrinsics = np.array([[0.58, 0, 0.5, 0], [0, 1.92, 0.5, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        opt = types.SimpleNamespace(
            height=64, width=64, scales=[0, 1, 2, 3], frame_ids=[0, -1, 1], min_depth=0.1,
            max_depth=100.0, use_stereo=False, pose_model_input="pairs", num_layers=18,
            pose_model_type="separate_resnet", learning_rate=1e-3, scheduler_step_size=1,
            batch_size=2, num_workers=0, num_epochs=2, v1_multiscale=False, no_ssim=False,
            disable_automasking=False, avg_reprojection=False, disparity_smoothness=1e-3, K=intrinsics,
        )  # fmt: skip
        record = []
        text = MONODEPTH2_SOURCE if lib is torch else port(MONODEPTH2_SOURCE, MONODEPTH2_STEPS)
        names = run_source(text, lib)
        with SharedDraws(lib, 8002), default_dtype(lib, lib.float64):
            names["Trainer"](opt, frames, initialize).train(record)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


SUPCON_SOURCE = """
from __future__ import print_function

import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.backends.cudnn as cudnn


# -- losses.py ------------------------------------------------------------------------------------
class SupConLoss(nn.Module):
    \"\"\"Supervised Contrastive Learning: https://arxiv.org/pdf/2004.11362.pdf.
    It also supports the unsupervised contrastive loss in SimCLR\"\"\"
    def __init__(self, temperature=0.07, contrast_mode='all',
                 base_temperature=0.07):
        super(SupConLoss, self).__init__()
        self.temperature = temperature
        self.contrast_mode = contrast_mode
        self.base_temperature = base_temperature

    def forward(self, features, labels=None, mask=None):
        \"\"\"Compute loss for model. If both `labels` and `mask` are None,
        it degenerates to SimCLR unsupervised loss:
        https://arxiv.org/pdf/2002.05709.pdf

        Args:
            features: hidden vector of shape [bsz, n_views, ...].
            labels: ground truth of shape [bsz].
            mask: contrastive mask of shape [bsz, bsz], mask_{i,j}=1 if sample j
                has the same class as sample i. Can be asymmetric.
        Returns:
            A loss scalar.
        \"\"\"
        device = (torch.device('cuda')
                  if features.is_cuda
                  else torch.device('cpu'))

        if len(features.shape) < 3:
            raise ValueError('`features` needs to be [bsz, n_views, ...],'
                             'at least 3 dimensions are required')
        if len(features.shape) > 3:
            features = features.view(features.shape[0], features.shape[1], -1)

        batch_size = features.shape[0]
        if labels is not None and mask is not None:
            raise ValueError('Cannot define both `labels` and `mask`')
        elif labels is None and mask is None:
            mask = torch.eye(batch_size, dtype=torch.float32).to(device)
        elif labels is not None:
            labels = labels.contiguous().view(-1, 1)
            if labels.shape[0] != batch_size:
                raise ValueError('Num of labels does not match num of features')
            mask = torch.eq(labels, labels.T).float().to(device)
        else:
            mask = mask.float().to(device)

        contrast_count = features.shape[1]
        contrast_feature = torch.cat(torch.unbind(features, dim=1), dim=0)
        if self.contrast_mode == 'one':
            anchor_feature = features[:, 0]
            anchor_count = 1
        elif self.contrast_mode == 'all':
            anchor_feature = contrast_feature
            anchor_count = contrast_count
        else:
            raise ValueError('Unknown mode: {}'.format(self.contrast_mode))

        # compute logits
        anchor_dot_contrast = torch.div(
            torch.matmul(anchor_feature, contrast_feature.T),
            self.temperature)
        # for numerical stability
        logits_max, _ = torch.max(anchor_dot_contrast, dim=1, keepdim=True)
        logits = anchor_dot_contrast - logits_max.detach()

        # tile mask
        mask = mask.repeat(anchor_count, contrast_count)
        # mask-out self-contrast cases
        logits_mask = torch.scatter(
            torch.ones_like(mask),
            1,
            torch.arange(batch_size * anchor_count).view(-1, 1).to(device),
            0
        )
        mask = mask * logits_mask

        # compute log_prob
        exp_logits = torch.exp(logits) * logits_mask
        log_prob = logits - torch.log(exp_logits.sum(1, keepdim=True))

        # compute mean of log-likelihood over positive
        # modified to handle edge cases when there is no positive pair
        # for an anchor point.
        # Edge case e.g.:-
        # features of shape: [4,1,...]
        # labels:            [0,1,1,2]
        # loss before mean:  [nan, ..., ..., nan]
        mask_pos_pairs = mask.sum(1)
        mask_pos_pairs = torch.where(mask_pos_pairs < 1e-6, 1, mask_pos_pairs)
        mean_log_prob_pos = (mask * log_prob).sum(1) / mask_pos_pairs

        # loss
        loss = - (self.temperature / self.base_temperature) * mean_log_prob_pos
        loss = loss.view(anchor_count, batch_size).mean()

        return loss


# -- networks/resnet_big.py (a small convolutional encoder for the ResNet) ------------------------
class SmallEncoder(nn.Module):
    def __init__(self, in_channel=3):
        super(SmallEncoder, self).__init__()
        self.conv1 = nn.Conv2d(in_channel, 8, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.avgpool(out)
        out = torch.flatten(out, 1)
        return out


model_dict = {
    'resnet18': [SmallEncoder, 8],  # [resnet18, 512]
}


class SupConResNet(nn.Module):
    \"\"\"backbone + projection head\"\"\"
    def __init__(self, name='resnet50', head='mlp', feat_dim=128):
        super(SupConResNet, self).__init__()
        model_fun, dim_in = model_dict[name]
        self.encoder = model_fun()
        if head == 'linear':
            self.head = nn.Linear(dim_in, feat_dim)
        elif head == 'mlp':
            self.head = nn.Sequential(
                nn.Linear(dim_in, dim_in),
                nn.ReLU(inplace=True),
                nn.Linear(dim_in, feat_dim)
            )
        else:
            raise NotImplementedError(
                'head not supported: {}'.format(head))

    def forward(self, x):
        feat = self.encoder(x)
        feat = F.normalize(self.head(feat), dim=1)
        return feat


# -- util.py --------------------------------------------------------------------------------------
class TwoCropTransform:
    \"\"\"Create two crops of the same image\"\"\"
    def __init__(self, transform):
        self.transform = transform

    def __call__(self, x):
        return [self.transform(x), self.transform(x)]


class AverageMeter(object):
    \"\"\"Computes and stores the average and current value\"\"\"
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def adjust_learning_rate(args, optimizer, epoch):
    lr = args.learning_rate
    if args.cosine:
        eta_min = lr * (args.lr_decay_rate ** 3)
        lr = eta_min + (lr - eta_min) * (
                1 + math.cos(math.pi * epoch / args.epochs)) / 2
    else:
        steps = np.sum(epoch > np.asarray(args.lr_decay_epochs))
        if steps > 0:
            lr = lr * (args.lr_decay_rate ** steps)

    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def warmup_learning_rate(args, epoch, batch_id, total_batches, optimizer):
    if args.warm and epoch <= args.warm_epochs:
        p = (batch_id + (epoch - 1) * total_batches) / \\
            (args.warm_epochs * total_batches)
        lr = args.warmup_from + p * (args.warmup_to - args.warmup_from)

        for param_group in optimizer.param_groups:
            param_group['lr'] = lr


def set_optimizer(opt, model):
    optimizer = optim.SGD(model.parameters(),
                          lr=opt.learning_rate,
                          momentum=opt.momentum,
                          weight_decay=opt.weight_decay)
    return optimizer


# -- main_supcon.py -------------------------------------------------------------------------------
class RandomCropFlip:
    \"\"\"RandomResizedCrop and RandomHorizontalFlip as a crop and a flip of an array (the
    stream is NumPy's, seeded alike in both runs)\"\"\"
    def __call__(self, x):
        i, j = np.random.randint(0, 3, size=2)
        out = x[:, i:i + 6, j:j + 6]
        if np.random.rand() < 0.5:
            out = out[:, :, ::-1]
        return torch.from_numpy(np.ascontiguousarray(out))


class ArrayDataset(torch.utils.data.Dataset):
    def __init__(self, images, targets, transform=None):
        self.images, self.targets, self.transform = images, targets, transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        img, target = self.images[index], int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        return img, target


def set_loader(opt):
    train_transform = RandomCropFlip()
    train_dataset = ArrayDataset(opt.images, opt.targets, transform=TwoCropTransform(train_transform))
    train_sampler = None
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=opt.batch_size, shuffle=(train_sampler is None),
        num_workers=opt.num_workers, pin_memory=True, sampler=train_sampler)

    return train_loader


def set_model(opt):
    model = SupConResNet(name=opt.model)
    criterion = SupConLoss(temperature=opt.temp)

    # enable synchronized Batch Normalization
    if opt.syncBN:
        model = apex.parallel.convert_syncbn_model(model)

    if torch.cuda.is_available():
        if torch.cuda.device_count() > 1:
            model.encoder = torch.nn.DataParallel(model.encoder)
        model = model.cuda()
        criterion = criterion.cuda()
        cudnn.benchmark = True

    return model, criterion


def train(train_loader, model, criterion, optimizer, epoch, opt):
    \"\"\"one epoch training\"\"\"
    model.train()

    batch_time = AverageMeter()
    data_time = AverageMeter()
    losses = AverageMeter()

    end = time.time()
    for idx, (images, labels) in enumerate(train_loader):
        data_time.update(time.time() - end)

        images = torch.cat([images[0], images[1]], dim=0)
        if torch.cuda.is_available():
            images = images.cuda(non_blocking=True)
            labels = labels.cuda(non_blocking=True)
        bsz = labels.shape[0]

        # warm-up learning rate
        warmup_learning_rate(opt, epoch, idx, len(train_loader), optimizer)

        # compute loss
        features = model(images)
        f1, f2 = torch.split(features, [bsz, bsz], dim=0)
        features = torch.cat([f1.unsqueeze(1), f2.unsqueeze(1)], dim=1)
        if opt.method == 'SupCon':
            loss = criterion(features, labels)
        elif opt.method == 'SimCLR':
            loss = criterion(features)
        else:
            raise ValueError('contrastive method not supported: {}'.
                             format(opt.method))

        # update metric
        losses.update(loss.item(), bsz)

        # SGD
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # measure elapsed time
        batch_time.update(time.time() - end)
        end = time.time()

        # print info
        if (idx + 1) % opt.print_freq == 0:
            print('Train: [{0}][{1}/{2}]\\t'
                  'loss {loss.val:.3f} ({loss.avg:.3f})'.format(
                   epoch, idx + 1, len(train_loader), loss=losses))
            sys.stdout.flush()

    return losses.avg


def main(opt, record, initialize):
    # build data loader
    train_loader = set_loader(opt)

    # build model and criterion
    model, criterion = set_model(opt)
    initialize(model)

    # build optimizer
    optimizer = set_optimizer(opt, model)

    # training routine
    for epoch in range(1, opt.epochs + 1):
        adjust_learning_rate(opt, optimizer, epoch)

        # train for one epoch
        time1 = time.time()
        loss = train(train_loader, model, criterion, optimizer, epoch, opt)
        time2 = time.time()
        print('epoch {}, total time {:.2f}'.format(epoch, 0.0))
        record.append(loss)
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

SUPCON_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport torch.optim as optim\nimport torch.backends.cudnn as cudnn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\nimport retrograd.optim as optim\nimport retrograd.backends.cudnn as cudnn\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("method", ["SupCon", "SimCLR"])
def test_supcon_trains_two_crops_with_the_supervised_contrastive_loss_as_torch(
    method, capsys, monkeypatch
):
    rng = np.random.default_rng(8003)
    images = rng.uniform(0, 1, (8, 3, 8, 8)).astype(np.float32)
    targets = rng.integers(0, 3, 8)
    records, logs = [], []
    initialize = initializer()
    for lib in (torch, rg):
        opt = types.SimpleNamespace(
            images=images, targets=targets, batch_size=4, num_workers=0, model="resnet18",
            temp=0.5, syncBN=False, learning_rate=0.05, momentum=0.9, weight_decay=1e-4,
            epochs=2, cosine=True, lr_decay_rate=0.1, warm=True, warm_epochs=1,
            warmup_from=0.01, warmup_to=0.05, method=method, print_freq=1,
        )  # fmt: skip
        record = []
        text = SUPCON_SOURCE if lib is torch else port(SUPCON_SOURCE, SUPCON_STEPS)
        # the loader's shuffle: one seeded stream of permutations for both samplers
        shuffle = np.random.default_rng(8004)
        monkeypatch.setattr(
            sys.modules["retrograd.utils.data.sampler"] if lib is rg else torch,
            "randperm",
            lambda n, generator=None, lib=lib, shuffle=shuffle: lib.tensor(shuffle.permutation(n)),
        )
        np.random.seed(8004)  # the crops' and flips' draws
        names = run_source(text, lib)
        names["main"](opt, record, initialize)
        records.append(record)
        logs.append(capsys.readouterr().out)
    assert logs[1] == logs[0]
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_backends_flags_import_as_torch_modules():
    """``import torch.backends.cudnn as cudnn`` (SupContrast's, and most classic training
    scripts') failed: ``retrograd.backends`` is a module whose ``cudnn`` was a namespace, not
    an importable submodule."""
    names = {}
    exec(
        "import retrograd.backends.cudnn as cudnn\n"
        "import retrograd.backends.cuda\n"
        "from retrograd.backends.mps import is_available\n"
        "from retrograd.backends import cudnn as same\n",
        names,
    )
    cudnn = names["cudnn"]
    assert cudnn is rg.backends.cudnn is names["same"]
    assert names["is_available"]() is torch.backends.mps.is_available() is False
    saved = cudnn.benchmark
    try:
        cudnn.benchmark = True
        assert rg.backends.cudnn.benchmark is True
    finally:
        cudnn.benchmark = saved
    assert names["retrograd"].backends.cuda is rg.backends.cuda
    assert hasattr(rg.backends.cuda.matmul, "allow_tf32")


POSE_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset

BN_MOMENTUM = 0.1


# -- lib/core/loss.py -----------------------------------------------------------------------------
class JointsMSELoss(nn.Module):
    def __init__(self, use_target_weight):
        super(JointsMSELoss, self).__init__()
        self.criterion = nn.MSELoss(size_average=True)
        self.use_target_weight = use_target_weight

    def forward(self, output, target, target_weight):
        batch_size = output.size(0)
        num_joints = output.size(1)
        heatmaps_pred = output.reshape((batch_size, num_joints, -1)).split(1, 1)
        heatmaps_gt = target.reshape((batch_size, num_joints, -1)).split(1, 1)
        loss = 0

        for idx in range(num_joints):
            heatmap_pred = heatmaps_pred[idx].squeeze()
            heatmap_gt = heatmaps_gt[idx].squeeze()
            if self.use_target_weight:
                loss += 0.5 * self.criterion(
                    heatmap_pred.mul(target_weight[:, idx]),
                    heatmap_gt.mul(target_weight[:, idx])
                )
            else:
                loss += 0.5 * self.criterion(heatmap_pred, heatmap_gt)

        return loss / num_joints


# -- lib/core/inference.py ------------------------------------------------------------------------
def get_max_preds(batch_heatmaps):
    '''
    get predictions from score maps
    heatmaps: numpy.ndarray([batch_size, num_joints, height, width])
    '''
    assert isinstance(batch_heatmaps, np.ndarray), \\
        'batch_heatmaps should be numpy.ndarray'
    assert batch_heatmaps.ndim == 4, 'batch_images should be 4-ndim'

    batch_size = batch_heatmaps.shape[0]
    num_joints = batch_heatmaps.shape[1]
    width = batch_heatmaps.shape[3]
    heatmaps_reshaped = batch_heatmaps.reshape((batch_size, num_joints, -1))
    idx = np.argmax(heatmaps_reshaped, 2)
    maxvals = np.amax(heatmaps_reshaped, 2)

    maxvals = maxvals.reshape((batch_size, num_joints, 1))
    idx = idx.reshape((batch_size, num_joints, 1))

    preds = np.tile(idx, (1, 1, 2)).astype(np.float32)

    preds[:, :, 0] = (preds[:, :, 0]) % width
    preds[:, :, 1] = np.floor((preds[:, :, 1]) / width)

    pred_mask = np.tile(np.greater(maxvals, 0.0), (1, 1, 2))
    pred_mask = pred_mask.astype(np.float32)

    preds *= pred_mask
    return preds, maxvals


# -- lib/core/evaluate.py -------------------------------------------------------------------------
def calc_dists(preds, target, normalize):
    preds = preds.astype(np.float32)
    target = target.astype(np.float32)
    dists = np.zeros((preds.shape[1], preds.shape[0]))
    for n in range(preds.shape[0]):
        for c in range(preds.shape[1]):
            if target[n, c, 0] > 1 and target[n, c, 1] > 1:
                normed_preds = preds[n, c, :] / normalize[n]
                normed_targets = target[n, c, :] / normalize[n]
                dists[c, n] = np.linalg.norm(normed_preds - normed_targets)
            else:
                dists[c, n] = -1
    return dists


def dist_acc(dists, thr=0.5):
    ''' Return percentage below threshold while ignoring values with a -1 '''
    dist_cal = np.not_equal(dists, -1)
    num_dist_cal = dist_cal.sum()
    if num_dist_cal > 0:
        return np.less(dists[dist_cal], thr).sum() * 1.0 / num_dist_cal
    else:
        return -1


def accuracy(output, target, hm_type='gaussian', thr=0.5):
    '''
    Calculate accuracy according to PCK,
    but uses ground truth heatmap rather than x,y locations
    First value to be returned is average accuracy across 'idxs',
    followed by individual accuracies
    '''
    idx = list(range(output.shape[1]))
    norm = 1.0
    if hm_type == 'gaussian':
        pred, _ = get_max_preds(output)
        target, _ = get_max_preds(target)
        h = output.shape[2]
        w = output.shape[3]
        norm = np.ones((pred.shape[0], 2)) * np.array([h, w]) / 10
    dists = calc_dists(pred, target, norm)

    acc = np.zeros((len(idx) + 1))
    avg_acc = 0
    cnt = 0

    for i in range(len(idx)):
        acc[i + 1] = dist_acc(dists[idx[i]])
        if acc[i + 1] >= 0:
            avg_acc = avg_acc + acc[i + 1]
            cnt += 1

    avg_acc = avg_acc / cnt if cnt != 0 else 0
    if cnt != 0:
        acc[0] = avg_acc
    return acc, avg_acc, cnt, pred


# -- lib/models/pose_resnet.py (the deconvolution head over a small backbone for the ResNet) -------
class PoseResNet(nn.Module):

    def __init__(self, num_joints, num_deconv_filters=(8, 8), num_deconv_kernels=(4, 4), final_conv_kernel=1):
        self.inplanes = 8
        self.deconv_with_bias = False

        super(PoseResNet, self).__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8, momentum=BN_MOMENTUM)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = nn.Conv2d(8, 8, kernel_size=3, stride=2, padding=1)

        # used for deconv layers
        self.deconv_layers = self._make_deconv_layer(
            len(num_deconv_filters),
            num_deconv_filters,
            num_deconv_kernels,
        )

        self.final_layer = nn.Conv2d(
            in_channels=num_deconv_filters[-1],
            out_channels=num_joints,
            kernel_size=final_conv_kernel,
            stride=1,
            padding=1 if final_conv_kernel == 3 else 0
        )

    def _get_deconv_cfg(self, deconv_kernel, index):
        if deconv_kernel == 4:
            padding = 1
            output_padding = 0
        elif deconv_kernel == 3:
            padding = 1
            output_padding = 1
        elif deconv_kernel == 2:
            padding = 0
            output_padding = 0

        return deconv_kernel, padding, output_padding

    def _make_deconv_layer(self, num_layers, num_filters, num_kernels):
        assert num_layers == len(num_filters), \\
            'ERROR: num_deconv_layers is different len(num_deconv_filters)'
        assert num_layers == len(num_kernels), \\
            'ERROR: num_deconv_layers is different len(num_deconv_filters)'

        layers = []
        for i in range(num_layers):
            kernel, padding, output_padding = \\
                self._get_deconv_cfg(num_kernels[i], i)

            planes = num_filters[i]
            layers.append(
                nn.ConvTranspose2d(
                    in_channels=self.inplanes,
                    out_channels=planes,
                    kernel_size=kernel,
                    stride=2,
                    padding=padding,
                    output_padding=output_padding,
                    bias=self.deconv_with_bias))
            layers.append(nn.BatchNorm2d(planes, momentum=BN_MOMENTUM))
            layers.append(nn.ReLU(inplace=True))
            self.inplanes = planes

        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.layer1(x)

        x = self.deconv_layers(x)
        x = self.final_layer(x)

        return x

    def init_weights(self, pretrained=''):
        for name, m in self.deconv_layers.named_modules():
            if isinstance(m, nn.ConvTranspose2d):
                nn.init.normal_(m.weight, std=0.001)
                if self.deconv_with_bias:
                    nn.init.constant_(m.bias, 0)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        for m in self.final_layer.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.001)
                nn.init.constant_(m.bias, 0)


# -- lib/dataset/JointsDataset.py's __getitem__ and generate_target, its images and joints given ---
class JointsDataset(Dataset):
    def __init__(self, images, joints, joints_vis, image_size, heatmap_size, sigma=1):
        self.images, self.joints, self.joints_vis = images, joints, joints_vis
        self.num_joints = joints.shape[1]
        self.image_size = np.array(image_size)
        self.heatmap_size = np.array(heatmap_size)
        self.sigma = sigma
        self.target_type = 'gaussian'
        self.use_different_joints_weight = False

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        input = torch.from_numpy(self.images[idx])
        joints = self.joints[idx]
        joints_vis = self.joints_vis[idx]

        target, target_weight = self.generate_target(joints, joints_vis)

        target = torch.from_numpy(target)
        target_weight = torch.from_numpy(target_weight)

        meta = {
            'image': 'image_%d.jpg' % idx,
            'joints': joints,
            'joints_vis': joints_vis,
            'score': 1,
        }

        return input, target, target_weight, meta

    def generate_target(self, joints, joints_vis):
        '''
        :param joints:  [num_joints, 3]
        :param joints_vis: [num_joints, 3]
        :return: target, target_weight(1: visible, 0: invisible)
        '''
        target_weight = np.ones((self.num_joints, 1), dtype=np.float32)
        target_weight[:, 0] = joints_vis[:, 0]

        assert self.target_type == 'gaussian', \\
            'Only support gaussian map now!'

        if self.target_type == 'gaussian':
            target = np.zeros((self.num_joints,
                               self.heatmap_size[1],
                               self.heatmap_size[0]),
                              dtype=np.float32)

            tmp_size = self.sigma * 3

            for joint_id in range(self.num_joints):
                feat_stride = self.image_size / self.heatmap_size
                mu_x = int(joints[joint_id][0] / feat_stride[0] + 0.5)
                mu_y = int(joints[joint_id][1] / feat_stride[1] + 0.5)
                # Check that any part of the gaussian is in-bounds
                ul = [int(mu_x - tmp_size), int(mu_y - tmp_size)]
                br = [int(mu_x + tmp_size + 1), int(mu_y + tmp_size + 1)]
                if ul[0] >= self.heatmap_size[0] or ul[1] >= self.heatmap_size[1] \\
                        or br[0] < 0 or br[1] < 0:
                    # If not, just return the image as is
                    target_weight[joint_id] = 0
                    continue

                # # Generate gaussian
                size = 2 * tmp_size + 1
                x = np.arange(0, size, 1, np.float32)
                y = x[:, np.newaxis]
                x0 = y0 = size // 2
                # The gaussian is not normalized, we want the center value to equal 1
                g = np.exp(- ((x - x0) ** 2 + (y - y0) ** 2) / (2 * self.sigma ** 2))

                # Usable gaussian range
                g_x = max(0, -ul[0]), min(br[0], self.heatmap_size[0]) - ul[0]
                g_y = max(0, -ul[1]), min(br[1], self.heatmap_size[1]) - ul[1]
                # Image range
                img_x = max(0, ul[0]), min(br[0], self.heatmap_size[0])
                img_y = max(0, ul[1]), min(br[1], self.heatmap_size[1])

                v = target_weight[joint_id]
                if v > 0.5:
                    target[joint_id][img_y[0]:img_y[1], img_x[0]:img_x[1]] = \\
                        g[g_y[0]:g_y[1], g_x[0]:g_x[1]]

        if self.use_different_joints_weight:
            target_weight = np.multiply(target_weight, self.joints_weight)

        return target, target_weight


# -- lib/core/function.py's train (its .cuda() calls left out: the runs are on the CPU) ------------
def train(train_loader, model, criterion, optimizer, record):
    model.train()
    for i, (input, target, target_weight, meta) in enumerate(train_loader):
        # compute output
        output = model(input)

        loss = criterion(output, target, target_weight)

        # compute gradient and do update step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        # measure accuracy and record loss
        _, avg_acc, cnt, pred = accuracy(output.detach().cpu().numpy(),
                                         target.detach().cpu().numpy())
        record.append(loss.item())
        record.append(np.array([avg_acc, cnt]))
        record.append(pred * 4)
        record.append(meta['image'])
        record.append(meta['joints'].numpy() * meta['joints_vis'].numpy())


def main(images, joints, joints_vis, record, initialize):
    model = PoseResNet(num_joints=joints.shape[1])
    model.init_weights()
    initialize(model)
    criterion = JointsMSELoss(use_target_weight=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [1], 0.1)
    train_dataset = JointsDataset(images, joints, joints_vis, [32, 32], [16, 16])
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=2, shuffle=False)
    for epoch in range(2):
        lr_scheduler.step()
        train(train_loader, model, criterion, optimizer, record)
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

POSE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nfrom torch.utils.data import Dataset\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nfrom retrograd.utils.data import Dataset\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


def test_simple_baselines_pose_trains_on_joint_heatmaps_as_torch():
    rng = np.random.default_rng(8005)
    images = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    joints = np.concatenate([rng.uniform(2, 30, (4, 3, 2)), np.zeros((4, 3, 1))], axis=2).astype(
        np.float32
    )
    joints[1, 2, :2] = (-20, 5)  # out of the image: its weight is zeroed
    joints_vis = np.ones((4, 3, 3), dtype=np.float32)
    joints_vis[2, 0] = 0  # not visible
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = POSE_SOURCE if lib is torch else port(POSE_SOURCE, POSE_STEPS)
        run_source(text, lib)["main"](images, joints, joints_vis, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


VICREG_SOURCE = """
import math

import torch
import torch.nn.functional as F
from torch import nn, optim


# -- main_vicreg.py -------------------------------------------------------------------------------
def adjust_learning_rate(args, optimizer, loader, step):
    max_steps = args.epochs * len(loader)
    warmup_steps = 10 * len(loader)
    base_lr = args.base_lr * args.batch_size / 256
    if step < warmup_steps:
        lr = base_lr * step / warmup_steps
    else:
        step -= warmup_steps
        max_steps -= warmup_steps
        q = 0.5 * (1 + math.cos(math.pi * step / max_steps))
        end_lr = base_lr * 0.001
        lr = base_lr * q + end_lr * (1 - q)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


class VICReg(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.num_features = int(args.mlp.split("-")[-1])
        self.backbone, self.embedding = resnet.__dict__[args.arch](
            zero_init_residual=True
        )
        self.projector = Projector(args, self.embedding)

    def forward(self, x, y):
        x = self.projector(self.backbone(x))
        y = self.projector(self.backbone(y))

        repr_loss = F.mse_loss(x, y)

        x = torch.cat(FullGatherLayer.apply(x), dim=0)
        y = torch.cat(FullGatherLayer.apply(y), dim=0)
        x = x - x.mean(dim=0)
        y = y - y.mean(dim=0)

        std_x = torch.sqrt(x.var(dim=0) + 0.0001)
        std_y = torch.sqrt(y.var(dim=0) + 0.0001)
        std_loss = torch.mean(F.relu(1 - std_x)) / 2 + torch.mean(F.relu(1 - std_y)) / 2

        cov_x = (x.T @ x) / (self.args.batch_size - 1)
        cov_y = (y.T @ y) / (self.args.batch_size - 1)
        cov_loss = off_diagonal(cov_x).pow_(2).sum().div(
            self.num_features
        ) + off_diagonal(cov_y).pow_(2).sum().div(self.num_features)

        loss = (
            self.args.sim_coeff * repr_loss
            + self.args.std_coeff * std_loss
            + self.args.cov_coeff * cov_loss
        )
        return loss


def Projector(args, embedding):
    mlp_spec = f"{embedding}-{args.mlp}"
    layers = []
    f = list(map(int, mlp_spec.split("-")))
    for i in range(len(f) - 2):
        layers.append(nn.Linear(f[i], f[i + 1]))
        layers.append(nn.BatchNorm1d(f[i + 1]))
        layers.append(nn.ReLU(True))
    layers.append(nn.Linear(f[-2], f[-1], bias=False))
    return nn.Sequential(*layers)


def exclude_bias_and_norm(p):
    return p.ndim == 1


def off_diagonal(x):
    n, m = x.shape
    assert n == m
    return x.flatten()[:-1].view(n - 1, n + 1)[:, 1:].flatten()


class LARS(optim.Optimizer):
    def __init__(
        self,
        params,
        lr,
        weight_decay=0,
        momentum=0.9,
        eta=0.001,
        weight_decay_filter=None,
        lars_adaptation_filter=None,
    ):
        defaults = dict(
            lr=lr,
            weight_decay=weight_decay,
            momentum=momentum,
            eta=eta,
            weight_decay_filter=weight_decay_filter,
            lars_adaptation_filter=lars_adaptation_filter,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            for p in g["params"]:
                dp = p.grad

                if dp is None:
                    continue

                if g["weight_decay_filter"] is None or not g["weight_decay_filter"](p):
                    dp = dp.add(p, alpha=g["weight_decay"])

                if g["lars_adaptation_filter"] is None or not g["lars_adaptation_filter"](p):
                    param_norm = torch.norm(p)
                    update_norm = torch.norm(dp)
                    one = torch.ones_like(param_norm)
                    q = torch.where(
                        param_norm > 0.0,
                        torch.where(
                            update_norm > 0, (g["eta"] * param_norm / update_norm), one
                        ),
                        one,
                    )
                    dp = dp.mul(q)

                param_state = self.state[p]
                if "mu" not in param_state:
                    param_state["mu"] = torch.zeros_like(p)
                mu = param_state["mu"]
                mu.mul_(g["momentum"]).add_(dp)

                p.add_(mu, alpha=-g["lr"])


class FullGatherLayer(torch.autograd.Function):
    \"\"\"
    Gather tensors from all process and support backward propagation
    for the gradients across processes.
    \"\"\"

    @staticmethod
    def forward(ctx, x):
        output = [torch.zeros_like(x) for _ in range(dist.get_world_size())]
        dist.all_gather(output, x)
        return tuple(output)

    @staticmethod
    def backward(ctx, *grads):
        all_gradients = torch.stack(grads)
        dist.all_reduce(all_gradients)
        return all_gradients[dist.get_rank()]


# -- resnet.py, a small stand-in: (backbone, embedding) as resnet50() returns them -----------------
def small(zero_init_residual=False):
    backbone = nn.Sequential(
        nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d((1, 1)),
        nn.Flatten(),
    )
    if zero_init_residual:
        nn.init.constant_(backbone[1].weight, 1)
    return backbone, 8


resnet = types.SimpleNamespace(small=small)


def main_worker(args, loader, record, initialize):
    model = VICReg(args)
    initialize(model)
    optimizer = LARS(
        model.parameters(),
        lr=0,
        weight_decay=args.wd,
        weight_decay_filter=exclude_bias_and_norm,
        lars_adaptation_filter=exclude_bias_and_norm,
    )
    start_epoch = 0
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    for epoch in range(start_epoch, args.epochs):
        for step, ((x, y), _) in enumerate(loader, start=epoch * len(loader)):
            lr = adjust_learning_rate(args, optimizer, loader, step)

            optimizer.zero_grad()
            with torch.autocast("cpu", enabled=False):
                loss = model.forward(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            record.append(loss.item())
            record.append(lr)
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        record.append({i: s["mu"].numpy().copy() for i, s in enumerate(optimizer.state.values())})
"""

VICREG_STEPS = [
    (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn, optim\n",
        "import retrograd as torch\nimport retrograd.nn.functional as F\nfrom retrograd import nn, optim\n",
    ),
    ("    def step(self):\n", "    def step(self, grads):\n"),
    ("                dp = p.grad\n", "                dp = p.grad(grads)\n"),
    (
        "            scaler.scale(loss).backward()\n            scaler.step(optimizer)\n",
        "            grads = scaler.scale(loss).backward()\n            scaler.step(optimizer, grads)\n",
    ),
]

DIST_STANDIN = types.SimpleNamespace(
    get_world_size=lambda: 1,
    get_rank=lambda: 0,
    all_gather=lambda output, x: output[0].copy_(x),
    all_reduce=lambda t: t,
)


def test_vicreg_trains_with_lars_through_the_gather_function_as_torch():
    rng = np.random.default_rng(8006)
    # (two views, label) batches of 8 images, as the loader of the two-crop transform gives them
    loader = [
        ((rng.standard_normal((8, 3, 8, 8)), rng.standard_normal((8, 3, 8, 8))), None)
        for _ in range(3)
    ]
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        args = types.SimpleNamespace(
            mlp="16-16-12", arch="small", batch_size=8, base_lr=25.6, epochs=3, wd=1e-6,
            sim_coeff=25.0, std_coeff=25.0, cov_coeff=1.0,
        )  # fmt: skip
        batches = [((lib.tensor(x), lib.tensor(y)), label) for (x, y), label in loader]
        record = []
        text = VICREG_SOURCE if lib is torch else port(VICREG_SOURCE, VICREG_STEPS)
        names = run_source(text, lib, dist=DIST_STANDIN, types=types)
        with default_dtype(lib, lib.float64):
            names["main_worker"](args, batches, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)


PSPNET_SOURCE = """
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


# -- util/util.py ---------------------------------------------------------------------------------
class AverageMeter(object):
    \"\"\"Computes and stores the average and current value\"\"\"
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def poly_learning_rate(base_lr, curr_iter, max_iter, power=0.9):
    \"\"\"poly learning rate policy\"\"\"
    lr = base_lr * (1 - float(curr_iter) / max_iter) ** power
    return lr


def intersectionAndUnion(output, target, K, ignore_index=255):
    # 'K' classes, output and target sizes are N or N * L or N * H * W, each value in range 0 to K - 1.
    assert (output.ndim in [1, 2, 3])
    assert output.shape == target.shape
    output = output.reshape(output.size).copy()
    target = target.reshape(target.size)
    output[np.where(target == ignore_index)[0]] = ignore_index
    intersection = output[np.where(output == target)[0]]
    area_intersection, _ = np.histogram(intersection, bins=np.arange(K+1))
    area_output, _ = np.histogram(output, bins=np.arange(K+1))
    area_target, _ = np.histogram(target, bins=np.arange(K+1))
    area_union = area_output + area_target - area_intersection
    return area_intersection, area_union, area_target


# -- model/pspnet.py (a small dilated backbone for the ResNet's layer0..layer4) ---------------------
class PPM(nn.Module):
    def __init__(self, in_dim, reduction_dim, bins):
        super(PPM, self).__init__()
        self.features = []
        for bin in bins:
            self.features.append(nn.Sequential(
                nn.AdaptiveAvgPool2d(bin),
                nn.Conv2d(in_dim, reduction_dim, kernel_size=1, bias=False),
                nn.BatchNorm2d(reduction_dim),
                nn.ReLU(inplace=True)
            ))
        self.features = nn.ModuleList(self.features)

    def forward(self, x):
        x_size = x.size()
        out = [x]
        for f in self.features:
            out.append(F.interpolate(f(x), x_size[2:], mode='bilinear', align_corners=True))
        return torch.cat(out, 1)


def stage(in_dim, out_dim, stride=1, dilation=1):
    return nn.Sequential(
        nn.Conv2d(in_dim, out_dim, kernel_size=3, stride=stride, padding=dilation, dilation=dilation, bias=False),
        nn.BatchNorm2d(out_dim),
        nn.ReLU(inplace=True),
    )


class PSPNet(nn.Module):
    def __init__(self, layers=50, bins=(1, 2, 3, 6), dropout=0.1, classes=2, zoom_factor=8, use_ppm=True, criterion=nn.CrossEntropyLoss(ignore_index=255), pretrained=True):
        super(PSPNet, self).__init__()
        assert layers in [50, 101, 152]
        assert 16 % len(bins) == 0
        assert classes > 1
        assert zoom_factor in [1, 2, 4, 8]
        self.zoom_factor = zoom_factor
        self.use_ppm = use_ppm
        self.criterion = criterion

        self.layer0 = nn.Sequential(stage(3, 4, stride=2), nn.MaxPool2d(kernel_size=3, stride=2, padding=1))
        self.layer1, self.layer2 = stage(4, 4), stage(4, 8, stride=2)
        self.layer3, self.layer4 = stage(8, 8, dilation=2), stage(8, 16, dilation=4)

        fea_dim = 16
        if use_ppm:
            self.ppm = PPM(fea_dim, int(fea_dim/len(bins)), bins)
            fea_dim *= 2
        self.cls = nn.Sequential(
            nn.Conv2d(fea_dim, 8, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(inplace=True),
            nn.Dropout2d(p=dropout),
            nn.Conv2d(8, classes, kernel_size=1)
        )
        if self.training:
            self.aux = nn.Sequential(
                nn.Conv2d(8, 8, kernel_size=3, padding=1, bias=False),
                nn.BatchNorm2d(8),
                nn.ReLU(inplace=True),
                nn.Dropout2d(p=dropout),
                nn.Conv2d(8, classes, kernel_size=1)
            )

    def forward(self, x, y=None):
        x_size = x.size()
        assert (x_size[2]-1) % 8 == 0 and (x_size[3]-1) % 8 == 0
        h = int((x_size[2] - 1) / 8 * self.zoom_factor + 1)
        w = int((x_size[3] - 1) / 8 * self.zoom_factor + 1)

        x = self.layer0(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x_tmp = self.layer3(x)
        x = self.layer4(x_tmp)
        if self.use_ppm:
            x = self.ppm(x)
        x = self.cls(x)
        if self.zoom_factor != 1:
            x = F.interpolate(x, size=(h, w), mode='bilinear', align_corners=True)

        if self.training:
            aux = self.aux(x_tmp)
            if self.zoom_factor != 1:
                aux = F.interpolate(aux, size=(h, w), mode='bilinear', align_corners=True)
            main_loss = self.criterion(x, y)
            aux_loss = self.criterion(aux, y)
            return x.max(1)[1], main_loss, aux_loss
        else:
            return x


# -- tool/train.py's main_worker and train (one process; intersectionAndUnion for its GPU twin) -----
def main_worker(args, train_loader, record, initialize):
    criterion = nn.CrossEntropyLoss(ignore_index=args.ignore_label)
    model = PSPNet(layers=args.layers, classes=args.classes, zoom_factor=args.zoom_factor, criterion=criterion, dropout=args.dropout)
    modules_ori = [model.layer0, model.layer1, model.layer2, model.layer3, model.layer4]
    modules_new = [model.ppm, model.cls, model.aux]
    initialize(model)
    params_list = []
    for module in modules_ori:
        params_list.append(dict(params=module.parameters(), lr=args.base_lr))
    for module in modules_new:
        params_list.append(dict(params=module.parameters(), lr=args.base_lr * 10))
    args.index_split = 5
    optimizer = torch.optim.SGD(params_list, lr=args.base_lr, momentum=args.momentum, weight_decay=args.weight_decay)
    for epoch in range(args.start_epoch, args.epochs):
        epoch_log = epoch + 1
        loss_train, mIoU_train, mAcc_train, allAcc_train = train(train_loader, model, optimizer, epoch, args)
        record.append([loss_train, mIoU_train, mAcc_train, allAcc_train])
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
        record.append(np.array([g['lr'] for g in optimizer.param_groups]))


def train(train_loader, model, optimizer, epoch, args):
    main_loss_meter = AverageMeter()
    aux_loss_meter = AverageMeter()
    loss_meter = AverageMeter()
    intersection_meter = AverageMeter()
    union_meter = AverageMeter()
    target_meter = AverageMeter()

    model.train()
    max_iter = args.epochs * len(train_loader)
    for i, (input, target) in enumerate(train_loader):
        if args.zoom_factor != 8:
            h = int((target.size()[1] - 1) / 8 * args.zoom_factor + 1)
            w = int((target.size()[2] - 1) / 8 * args.zoom_factor + 1)
            # 'nearest' mode doesn't support align_corners mode and 'bilinear' mode is fine for downsampling
            target = F.interpolate(target.unsqueeze(1).float(), size=(h, w), mode='bilinear', align_corners=True).squeeze(1).long()
        output, main_loss, aux_loss = model(input, target)
        if not args.multiprocessing_distributed:
            main_loss, aux_loss = torch.mean(main_loss), torch.mean(aux_loss)
        loss = main_loss + args.aux_weight * aux_loss

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        n = input.size(0)
        intersection, union, target = intersectionAndUnion(output.cpu().numpy(), target.cpu().numpy(), args.classes, args.ignore_label)
        intersection_meter.update(intersection), union_meter.update(union), target_meter.update(target)

        accuracy = sum(intersection_meter.val) / (sum(target_meter.val) + 1e-10)
        main_loss_meter.update(main_loss.item(), n)
        aux_loss_meter.update(aux_loss.item(), n)
        loss_meter.update(loss.item(), n)

        current_iter = epoch * len(train_loader) + i + 1
        current_lr = poly_learning_rate(args.base_lr, current_iter, max_iter, power=args.power)
        for index in range(0, args.index_split):
            optimizer.param_groups[index]['lr'] = current_lr
        for index in range(args.index_split, len(optimizer.param_groups)):
            optimizer.param_groups[index]['lr'] = current_lr * 10

    iou_class = intersection_meter.sum / (union_meter.sum + 1e-10)
    accuracy_class = intersection_meter.sum / (target_meter.sum + 1e-10)
    mIoU = np.mean(iou_class)
    mAcc = np.mean(accuracy_class)
    allAcc = sum(intersection_meter.sum) / (sum(target_meter.sum) + 1e-10)
    return main_loss_meter.avg, mIoU, mAcc, allAcc
"""

PSPNET_STEPS = [
    (
        "import torch\nfrom torch import nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nfrom retrograd import nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "        loss.backward()\n        optimizer.step()\n",
        "        grads = loss.backward()\n        optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize("zoom_factor", [8, 4])
def test_pspnet_trains_with_pyramid_pooling_and_aux_loss_as_torch(zoom_factor):
    rng = np.random.default_rng(8007)
    batches = []
    for _ in range(2):
        image = rng.standard_normal((2, 3, 17, 17)).astype(np.float32)
        label = rng.integers(0, 3, (2, 17, 17))
        label[label == 2] = 255  # ignored pixels
        batches.append((image, label))
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        args = types.SimpleNamespace(
            layers=50, classes=2, zoom_factor=zoom_factor, ignore_label=255, base_lr=0.01,
            momentum=0.9, weight_decay=1e-4, start_epoch=0, epochs=2, aux_weight=0.4,
            power=0.9, multiprocessing_distributed=False, dropout=0.0,
        )  # fmt: skip
        loader = [(lib.tensor(x), lib.tensor(y)) for x, y in batches]
        record = []
        text = PSPNET_SOURCE if lib is torch else port(PSPNET_SOURCE, PSPNET_STEPS)
        run_source(text, lib)["main_worker"](args, loader, record, initialize)
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


MOCOV3_SOURCE = """
import math
from functools import partial

import torch
import torch.nn as nn


# -- moco/builder.py ------------------------------------------------------------------------------
class MoCo(nn.Module):
    \"\"\"
    Build a MoCo model with a base encoder, a momentum encoder, and two MLPs
    https://arxiv.org/abs/1911.05722
    \"\"\"
    def __init__(self, base_encoder, dim=256, mlp_dim=4096, T=1.0):
        \"\"\"
        dim: feature dimension (default: 256)
        mlp_dim: hidden dimension in MLPs (default: 4096)
        T: softmax temperature (default: 1.0)
        \"\"\"
        super(MoCo, self).__init__()

        self.T = T

        # build encoders
        self.base_encoder = base_encoder(num_classes=mlp_dim)
        self.momentum_encoder = base_encoder(num_classes=mlp_dim)

        self._build_projector_and_predictor_mlps(dim, mlp_dim)

        for param_b, param_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            param_m.data.copy_(param_b.data)  # initialize
            param_m.requires_grad = False  # not update by gradient

    def _build_mlp(self, num_layers, input_dim, mlp_dim, output_dim, last_bn=True):
        mlp = []
        for l in range(num_layers):
            dim1 = input_dim if l == 0 else mlp_dim
            dim2 = output_dim if l == num_layers - 1 else mlp_dim

            mlp.append(nn.Linear(dim1, dim2, bias=False))

            if l < num_layers - 1:
                mlp.append(nn.BatchNorm1d(dim2))
                mlp.append(nn.ReLU(inplace=True))
            elif last_bn:
                # follow SimCLR's design: https://github.com/google-research/simclr/blob/master/model_util.py#L157
                # for simplicity, we further removed gamma in BN
                mlp.append(nn.BatchNorm1d(dim2, affine=False))

        return nn.Sequential(*mlp)

    def _build_projector_and_predictor_mlps(self, dim, mlp_dim):
        pass

    @torch.no_grad()
    def _update_momentum_encoder(self, m):
        \"\"\"Momentum update of the momentum encoder\"\"\"
        for param_b, param_m in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            param_m.data = param_m.data * m + param_b.data * (1. - m)

    def contrastive_loss(self, q, k):
        # normalize
        q = nn.functional.normalize(q, dim=1)
        k = nn.functional.normalize(k, dim=1)
        # gather all targets
        k = concat_all_gather(k)
        # Einstein sum is more intuitive
        logits = torch.einsum('nc,mc->nm', [q, k]) / self.T
        N = logits.shape[0]  # batch size per GPU
        labels = (torch.arange(N, dtype=torch.long) + N * torch.distributed.get_rank()).cuda()
        return nn.CrossEntropyLoss()(logits, labels) * (2 * self.T)

    def forward(self, x1, x2, m):
        \"\"\"
        Input:
            x1: first views of images
            x2: second views of images
            m: moco momentum
        Output:
            loss
        \"\"\"

        # compute features
        q1 = self.predictor(self.base_encoder(x1))
        q2 = self.predictor(self.base_encoder(x2))

        with torch.no_grad():  # no gradient
            self._update_momentum_encoder(m)  # update the momentum encoder

            # compute momentum features as targets
            k1 = self.momentum_encoder(x1)
            k2 = self.momentum_encoder(x2)

        return self.contrastive_loss(q1, k2) + self.contrastive_loss(q2, k1)


class MoCo_ResNet(MoCo):
    def _build_projector_and_predictor_mlps(self, dim, mlp_dim):
        hidden_dim = self.base_encoder.fc.weight.shape[1]
        del self.base_encoder.fc, self.momentum_encoder.fc # remove original fc layer

        # projectors
        self.base_encoder.fc = self._build_mlp(2, hidden_dim, mlp_dim, dim)
        self.momentum_encoder.fc = self._build_mlp(2, hidden_dim, mlp_dim, dim)

        # predictor
        self.predictor = self._build_mlp(2, dim, mlp_dim, dim, False)


# utils
@torch.no_grad()
def concat_all_gather(tensor):
    \"\"\"
    Performs all_gather operation on the provided tensors.
    *** Warning ***: torch.distributed.all_gather has no gradient.
    \"\"\"
    tensors_gather = [torch.ones_like(tensor)
        for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(tensors_gather, tensor, async_op=False)

    output = torch.cat(tensors_gather, dim=0)
    return output


# -- a small stand-in for torchvision's resnet50 (its ``fc`` the builder replaces) ------------------
class SmallResNet(nn.Module):
    def __init__(self, num_classes=1000, zero_init_residual=False):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = self.avgpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(x, 1))


# -- main_moco.py ---------------------------------------------------------------------------------
class AverageMeter(object):
    \"\"\"Computes and stores the average and current value\"\"\"
    def __init__(self, name, fmt=':f'):
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train(train_loader, model, optimizer, scaler, summary_writer, epoch, args):
    losses = AverageMeter('Loss', ':.4e')
    learning_rates = AverageMeter('LR', ':.4e')

    # switch to train mode
    model.train()

    iters_per_epoch = len(train_loader)
    moco_m = args.moco_m
    for i, (images, _) in enumerate(train_loader):
        # adjust learning rate and momentum coefficient per iteration
        lr = adjust_learning_rate(optimizer, epoch + i / iters_per_epoch, args)
        learning_rates.update(lr)
        if args.moco_m_cos:
            moco_m = adjust_moco_momentum(epoch + i / iters_per_epoch, args)

        # compute output
        with torch.cuda.amp.autocast(True):
            loss = model(images[0], images[1], moco_m)

        losses.update(loss.item(), images[0].size(0))
        if args.rank == 0:
            summary_writer.add_scalar("loss", loss.item(), epoch * iters_per_epoch + i)

        # compute gradient and do SGD step
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def adjust_learning_rate(optimizer, epoch, args):
    \"\"\"Decays the learning rate with half-cycle cosine after warmup\"\"\"
    if epoch < args.warmup_epochs:
        lr = args.lr * epoch / args.warmup_epochs
    else:
        lr = args.lr * 0.5 * (1. + math.cos(math.pi * (epoch - args.warmup_epochs) / (args.epochs - args.warmup_epochs)))
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    return lr


def adjust_moco_momentum(epoch, args):
    \"\"\"Adjust moco momentum based on current epoch\"\"\"
    m = 1. - 0.5 * (1. + math.cos(math.pi * epoch / args.epochs)) * (1. - args.moco_m)
    return m


def main_worker(args, train_loader, summary_writer, record, initialize):
    model = MoCo_ResNet(
        partial(SmallResNet, zero_init_residual=True),
        args.moco_dim, args.moco_mlp_dim, args.moco_t)
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), args.lr,
                                weight_decay=args.weight_decay,
                                momentum=args.momentum)
    scaler = torch.cuda.amp.GradScaler()
    for epoch in range(args.start_epoch, args.epochs):
        train(train_loader, model, optimizer, scaler, summary_writer, epoch, args)
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
"""

MOCOV3_STEPS = [
    (
        "import torch\nimport torch.nn as nn\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n",
        "        grads = scaler.scale(loss).backward()\n        scaler.step(optimizer, grads)\n",
    ),
]


def test_moco_v3_trains_its_momentum_encoder_as_torch(monkeypatch):
    rng = np.random.default_rng(8008)
    views = [
        (rng.standard_normal((4, 3, 8, 8)), rng.standard_normal((4, 3, 8, 8))) for _ in range(3)
    ]
    records, written = [], []
    initialize = initializer()
    for lib in (torch, rg):
        # one process: the distributed calls of a world of one
        monkeypatch.setattr(lib.distributed, "get_rank", lambda: 0)
        monkeypatch.setattr(lib.distributed, "get_world_size", lambda: 1)
        monkeypatch.setattr(
            lib.distributed, "all_gather", lambda out, t, async_op=False: out[0].copy_(t)
        )
        monkeypatch.setattr(lib.Tensor, "cuda", lambda self, *a, **k: self, raising=False)
        args = types.SimpleNamespace(
            moco_dim=6, moco_mlp_dim=12, moco_t=1.0, lr=0.6, weight_decay=1e-6, momentum=0.9,
            start_epoch=0, epochs=2, warmup_epochs=1, moco_m=0.99, moco_m_cos=True, rank=0,
        )  # fmt: skip
        loader = [([lib.tensor(a), lib.tensor(b)], None) for a, b in views]
        record, scalars = [], []
        writer = types.SimpleNamespace(
            add_scalar=lambda name, value, step, into=scalars: into.append(value)
        )
        text = MOCOV3_SOURCE if lib is torch else port(MOCOV3_SOURCE, MOCOV3_STEPS)
        with default_dtype(lib, lib.float64):
            run_source(text, lib)["main_worker"](args, loader, writer, record, initialize)
        records.append(record)
        written.append(scalars)
    np.testing.assert_allclose(written[1], written[0], rtol=1e-10)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-10)
