# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
dense prediction and self-supervised learning.

- monodepth2 (TODO)
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
    K = np.array([[0.58, 0, 0.5, 0], [0, 1.92, 0.5, 0], [0, 0, 1, 0], [0, 0, 0, 1]])
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        opt = types.SimpleNamespace(
            height=64, width=64, scales=[0, 1, 2, 3], frame_ids=[0, -1, 1], min_depth=0.1,
            max_depth=100.0, use_stereo=False, pose_model_input="pairs", num_layers=18,
            pose_model_type="separate_resnet", learning_rate=1e-3, scheduler_step_size=1,
            batch_size=2, num_workers=0, num_epochs=2, v1_multiscale=False, no_ssim=False,
            disable_automasking=False, avg_reprojection=False, disparity_smoothness=1e-3, K=K,
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
            lambda n, generator=None, lib=lib: lib.tensor(shuffle.permutation(n)),
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
