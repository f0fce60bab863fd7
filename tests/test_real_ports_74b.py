"""Real ports, round 74 (the harness: ``tests/real_ports.py``): image inpainting with partial
convolutions, a program written here in the style of the NVIDIA partialconv layer and the
PConv-UNet reimplementations (Liu et al. 2018: a convolution renormalised by the share of valid
pixels under its window, a mask that grows through the network; the loss of valid and hole L1,
perceptual and style terms over a frozen feature extractor, total variation over the hole's
border), trained on synthetic images with holes, run under torch and, ported, under retrograd
from the same weights and draws, every record compared.

It reaches:

- the layer: a ``PartialConv2d(nn.Conv2d)`` subclass taking ``*args, **kwargs`` and calling
  ``super().forward``, a mask updater of ones kept by ``register_buffer(..., persistent=False)``
  (single- or multi-channel), the window size from ``shape[1] * shape[2] * shape[3]``, the
  mask's own ``F.conv2d`` under ``torch.no_grad()`` with the layer's ``stride``/``padding``/
  ``dilation``, ``slide_winsize / (update_mask + 1e-8)``, ``torch.clamp(update_mask, 0, 1)``,
  ``torch.mul`` of ratio and mask, the bias taken out and put back by ``self.bias.view(1, -1,
  1, 1)``, a cached mask reused while ``tuple(input.shape)`` is unchanged, ``.type()``
  compared and ``.to(input)`` of the updater;
- the network: a PConv-UNet of ``nn.ModuleDict`` stages (``nn.BatchNorm2d``, ``F.relu``,
  ``nn.LeakyReLU(0.2)``), the decoder's ``F.interpolate(scale_factor=2, mode="nearest")`` of
  image and mask, ``torch.cat`` of skip features and of skip masks along ``dim=1``, the
  encoder's batch norms frozen by a ``train(mode=True)`` override that calls ``eval()`` on
  ``named_modules`` chosen by name, ``requires_grad_(False)`` of their affine parameters;
- the holes: rectangles by slice assignment into ``torch.ones``, irregular holes by
  ``torch.rand(...) > p`` grown by ``-F.max_pool2d(-mask, 3, 1, 1)`` (erosion of the valid
  region), ``expand(-1, 3, -1, -1)`` to the image's channels, ``masked_fill`` of the holes;
- the loss: ``F.l1_loss`` of ``(1 - mask) * output`` and ``mask * output``, the composite
  ``mask * input + (1 - mask) * output``, a frozen three-stage feature extractor (an
  ``nn.Sequential`` sliced by ``list(...)[a:b]``, inputs normalised by ``sub_``/``div_`` of
  ImageNet statistics as ``view(1, 3, 1, 1)`` buffers), Gram matrices by ``torch.bmm(feat,
  feat.transpose(1, 2)) / (ch * h * w)`` and by ``torch.einsum("bchw,bdhw->bcd", ...)``, total
  variation over the hole's one-pixel dilation (``F.conv2d`` of the hole with a 3x3 ones
  kernel ``> 0``, ``[:, :, :, :-1]`` and ``[:, :, :-1, :]`` differences, ``torch.mean(torch.abs
  (...))``), the loss terms in a dict weighted by a dict of coefficients;
- training: ``Adam`` over ``filter(lambda p: p.requires_grad, ...)``, ``MultiStepLR``, a
  ``clip_grad_norm_``; the checkpoint through ``torch.save`` of ``{"model", "optimizer",
  "scheduler", "step"}`` to a buffer and ``load_state_dict`` into a fresh model (whose
  non-persistent updater buffers must not be in the ``state_dict``); evaluation under
  ``torch.no_grad()``: PSNR of the holes by ``10 * torch.log10(1 / mse)`` per image,
  ``.clamp_(0, 1)`` in place, the grown masks' fill ratio.

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

PCONV_SOURCE = """import io

import torch
import torch.nn as nn
import torch.nn.functional as F


class PartialConv2d(nn.Conv2d):
    def __init__(self, *args, multi_channel=False, return_mask=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.multi_channel = multi_channel
        self.return_mask = return_mask
        if self.multi_channel:
            ones = torch.ones(self.out_channels, self.in_channels, *self.kernel_size)
        else:
            ones = torch.ones(1, 1, *self.kernel_size)
        self.register_buffer("weight_mask_updater", ones, persistent=False)
        shape = self.weight_mask_updater.shape
        self.slide_winsize = shape[1] * shape[2] * shape[3]
        self.last_size = (None, None, None, None)
        self.update_mask = None
        self.mask_ratio = None

    def forward(self, input, mask_in=None):
        assert len(input.shape) == 4
        if mask_in is not None or self.last_size != tuple(input.shape):
            self.last_size = tuple(input.shape)
            with torch.no_grad():
                if self.weight_mask_updater.type() != input.type():
                    self.weight_mask_updater = self.weight_mask_updater.to(input)
                if mask_in is None:
                    if self.multi_channel:
                        mask = torch.ones(input.shape[0], input.shape[1], input.shape[2],
                                          input.shape[3]).to(input)
                    else:
                        mask = torch.ones(1, 1, input.shape[2], input.shape[3]).to(input)
                else:
                    mask = mask_in
                self.update_mask = F.conv2d(mask, self.weight_mask_updater, bias=None,
                                            stride=self.stride, padding=self.padding,
                                            dilation=self.dilation, groups=1)
                self.mask_ratio = self.slide_winsize / (self.update_mask + 1e-8)
                self.update_mask = torch.clamp(self.update_mask, 0, 1)
                self.mask_ratio = torch.mul(self.mask_ratio, self.update_mask)
        raw_out = super().forward(torch.mul(input, mask_in) if mask_in is not None else input)
        if self.bias is not None:
            bias_view = self.bias.view(1, self.out_channels, 1, 1)
            output = torch.mul(raw_out - bias_view, self.mask_ratio) + bias_view
            output = torch.mul(output, self.update_mask)
        else:
            output = torch.mul(raw_out, self.mask_ratio)
        if self.return_mask:
            return output, self.update_mask
        return output


class PCBActiv(nn.Module):
    def __init__(self, in_ch, out_ch, bn=True, sample="none-3", activ="relu", bias=False):
        super().__init__()
        if sample == "down-5":
            self.conv = PartialConv2d(in_ch, out_ch, 5, 2, 2, bias=bias, multi_channel=True)
        elif sample == "down-3":
            self.conv = PartialConv2d(in_ch, out_ch, 3, 2, 1, bias=bias, multi_channel=True)
        else:
            self.conv = PartialConv2d(in_ch, out_ch, 3, 1, 1, bias=bias, multi_channel=True)
        if bn:
            self.bn = nn.BatchNorm2d(out_ch)
        if activ == "relu":
            self.activation = nn.ReLU()
        elif activ == "leaky":
            self.activation = nn.LeakyReLU(negative_slope=0.2)

    def forward(self, input, input_mask):
        h, h_mask = self.conv(input, input_mask)
        if hasattr(self, "bn"):
            h = self.bn(h)
        if hasattr(self, "activation"):
            h = self.activation(h)
        return h, h_mask


class PConvUNet(nn.Module):
    def __init__(self, layer_size=3, input_channels=3, width=6, upsampling_mode="nearest"):
        super().__init__()
        self.freeze_enc_bn = False
        self.upsampling_mode = upsampling_mode
        self.layer_size = layer_size
        self.stages = nn.ModuleDict()
        self.stages["enc_1"] = PCBActiv(input_channels, width, bn=False, sample="down-5")
        self.stages["enc_2"] = PCBActiv(width, 2 * width, sample="down-3")
        self.stages["enc_3"] = PCBActiv(2 * width, 2 * width, sample="down-3")
        self.stages["dec_3"] = PCBActiv(4 * width, 2 * width, activ="leaky")
        self.stages["dec_2"] = PCBActiv(3 * width, width, activ="leaky")
        self.stages["dec_1"] = PCBActiv(width + input_channels, input_channels, bn=False,
                                        activ=None, bias=True)

    def forward(self, input, input_mask):
        h_dict, h_mask_dict = {"h_0": input}, {"h_0": input_mask}
        h_key_prev = "h_0"
        for i in range(1, self.layer_size + 1):
            h_key = "h_{:d}".format(i)
            h_dict[h_key], h_mask_dict[h_key] = self.stages["enc_{:d}".format(i)](
                h_dict[h_key_prev], h_mask_dict[h_key_prev])
            h_key_prev = h_key
        h_key = "h_{:d}".format(self.layer_size)
        h, h_mask = h_dict[h_key], h_mask_dict[h_key]
        for i in range(self.layer_size, 0, -1):
            enc_h_key = "h_{:d}".format(i - 1)
            h = F.interpolate(h, scale_factor=2, mode=self.upsampling_mode)
            h_mask = F.interpolate(h_mask, scale_factor=2, mode="nearest")
            h = torch.cat([h, h_dict[enc_h_key]], dim=1)
            h_mask = torch.cat([h_mask, h_mask_dict[enc_h_key]], dim=1)
            h, h_mask = self.stages["dec_{:d}".format(i)](h, h_mask)
        return h, h_mask

    def train(self, mode=True):
        super().train(mode)
        if self.freeze_enc_bn:
            for name, module in self.named_modules():
                if isinstance(module, nn.BatchNorm2d) and "enc" in name:
                    module.eval()
        return self


class VGG16FeatureExtractor(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        layers = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU(inplace=True),
                  nn.MaxPool2d(2, 2),
                  nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(inplace=True),
                  nn.MaxPool2d(2, 2),
                  nn.Conv2d(2 * width, 2 * width, 3, padding=1), nn.ReLU(inplace=True)]
        features = nn.Sequential(*layers)
        self.enc_1 = nn.Sequential(*list(features.children())[:2])
        self.enc_2 = nn.Sequential(*list(features.children())[2:5])
        self.enc_3 = nn.Sequential(*list(features.children())[5:8])
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        for i in range(3):
            for param in getattr(self, "enc_{:d}".format(i + 1)).parameters():
                param.requires_grad = False

    def forward(self, image):
        results = [image.clone().sub_(self.mean).div_(self.std)]
        for i in range(3):
            func = getattr(self, "enc_{:d}".format(i + 1))
            results.append(func(results[-1]))
        return results[1:]


def gram_matrix(feat):
    (b, ch, h, w) = feat.size()
    feat = feat.view(b, ch, h * w)
    feat_t = feat.transpose(1, 2)
    return torch.bmm(feat, feat_t) / (ch * h * w)


def gram_einsum(feat):
    b, ch, h, w = feat.shape
    return torch.einsum("bchw,bdhw->bcd", feat, feat) / (ch * h * w)


def dilation_holes(hole_mask):
    b, ch, h, w = hole_mask.shape
    dilation_conv = torch.ones((ch, ch, 3, 3))
    output_mask = F.conv2d(hole_mask, dilation_conv, padding=1)
    return (output_mask > 0).float()


def total_variation_loss(image, mask):
    hole_mask = 1 - mask
    dilated_holes = dilation_holes(hole_mask)
    colomns_in_Pset = dilated_holes[:, :, :, 1:] * dilated_holes[:, :, :, :-1]
    rows_in_Pset = dilated_holes[:, :, 1:, :] * dilated_holes[:, :, :-1, :]
    loss = torch.mean(torch.abs(colomns_in_Pset * (image[:, :, :, 1:] - image[:, :, :, :-1])))
    loss = loss + torch.mean(torch.abs(rows_in_Pset * (image[:, :, 1:, :]
                                                       - image[:, :, :-1, :])))
    return loss


class InpaintingLoss(nn.Module):
    def __init__(self, extractor):
        super().__init__()
        self.l1 = nn.L1Loss()
        self.extractor = extractor

    def forward(self, input, mask, output, gt):
        loss_dict = {}
        output_comp = mask * input + (1 - mask) * output
        loss_dict["hole"] = self.l1((1 - mask) * output, (1 - mask) * gt)
        loss_dict["valid"] = self.l1(mask * output, mask * gt)
        feat_output_comp = self.extractor(output_comp)
        feat_output = self.extractor(output)
        feat_gt = self.extractor(gt)
        loss_dict["prc"] = 0.0
        for i in range(3):
            loss_dict["prc"] += self.l1(feat_output[i], feat_gt[i])
            loss_dict["prc"] += self.l1(feat_output_comp[i], feat_gt[i])
        loss_dict["style"] = 0.0
        for i in range(3):
            gram = gram_matrix if i % 2 == 0 else gram_einsum
            loss_dict["style"] += self.l1(gram(feat_output[i]), gram(feat_gt[i]))
            loss_dict["style"] += self.l1(gram(feat_output_comp[i]), gram(feat_gt[i]))
        loss_dict["tv"] = total_variation_loss(output_comp, mask)
        return loss_dict


LAMBDA_DICT = {"valid": 1.0, "hole": 6.0, "tv": 0.1, "prc": 0.05, "style": 120.0}


def smooth_images(n, size=16):
    yy = torch.linspace(-1, 1, size).view(1, 1, size, 1)
    xx = torch.linspace(-1, 1, size).view(1, 1, 1, size)
    freq = torch.rand(n, 3, 1, 1) * 3 + 1
    phase = torch.rand(n, 3, 1, 1) * 6.28
    img = 0.5 + 0.4 * torch.sin(freq * xx + phase) * torch.cos(freq * yy - phase)
    return img.clamp(0, 1)


def rectangle_masks(n, size=16):
    mask = torch.ones(n, 1, size, size)
    for i in range(n):
        top, left = 2 + 3 * (i % 3), 1 + 4 * (i % 2)
        mask[i, :, top:top + 6, left:left + 7] = 0.0
    return mask


def irregular_masks(n, size=16, p=0.9):
    valid = (torch.rand(n, 1, size, size) < p).float()
    valid = -F.max_pool2d(-valid, 3, 1, 1)
    return valid


def make_batch(n, kind):
    gt = smooth_images(n)
    mask = rectangle_masks(n) if kind == "rect" else irregular_masks(n)
    mask = mask.expand(-1, 3, -1, -1).contiguous()
    image = gt.masked_fill(mask == 0, 1.0)
    return image, mask, gt


def evaluate(model, image, mask, gt):
    model.eval()
    with torch.no_grad():
        output, _ = model(image, mask)
        output_comp = (mask * image + (1 - mask) * output).clamp_(0, 1)
        hole = 1 - mask
        mse = ((output_comp - gt) ** 2 * hole).sum(dim=(1, 2, 3)) / hole.sum(dim=(1, 2, 3))
        psnr = 10 * torch.log10(1.0 / mse)
    model.train()
    return output_comp, psnr


model = PConvUNet(width=WIDTH)
initialize(model)
extractor = VGG16FeatureExtractor()
initialize(extractor)
criterion = InpaintingLoss(extractor)
optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=2e-3)
scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 3], gamma=0.5)
record.append(sorted(model.state_dict().keys()) == sorted(
    k for k in model.state_dict().keys() if "updater" not in k))

batches = [make_batch(4, "rect"), make_batch(4, MASK_KIND)]
record.append(batches[1][1].mean().item())
for step in range(4):
    if step == 2 and FINETUNE:
        model.freeze_enc_bn = True
        model.train()
        for name, param in model.named_parameters():
            if "enc" in name and "bn" in name:
                param.requires_grad_(False)
    image, mask, gt = batches[step % 2]
    output, _ = model(image, mask)
    loss_dict = criterion(image, mask, output, gt)
    loss = 0.0
    for key, coef in LAMBDA_DICT.items():
        loss += coef * loss_dict[key]
    optimizer.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    scheduler.step()
    record.append([loss.item(), float(norm), scheduler.get_last_lr()[0]]
                  + [float(loss_dict[k]) for k in LAMBDA_DICT])
    record.append(params_of(model))
    record.append({k: v.numpy().copy() for k, v in model.state_dict().items()
                   if "running" in k})
    print("step {} hole {:.3f}".format(step, loss_dict["hole"].item()))

buffer = io.BytesIO()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "step": 4}, buffer)
buffer.seek(0)
checkpoint = torch.load(buffer)
restored = PConvUNet(width=WIDTH)
restored.load_state_dict(checkpoint["model"])
restored.freeze_enc_bn = FINETUNE
record.append([checkpoint["step"], checkpoint["scheduler"]["last_epoch"]])
test_image, test_mask, test_gt = make_batch(3, "rect")
comp, psnr = evaluate(restored, test_image, test_mask, test_gt)
record.append(comp.numpy().copy())
record.append(psnr.numpy().copy())
single = PartialConv2d(3, 2, 3, 1, 1, bias=False, return_mask=False)
initialize(single)
with torch.no_grad():
    out_first = single(test_image[:1])
    out_cached = single(test_image[:1])
record.append(out_first.numpy().copy())
record.append([(out_first == out_cached).all().item(), single.last_size[2]])
record.append(single.mask_ratio.numpy().copy())
"""

PCONV_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\n",
    ),
    (
        "    loss.backward()\n"
        "    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)\n"
        "    optimizer.step()\n",
        "    grads = loss.backward()\n"
        "    norm = torch.nn.utils.clip_grad_norm_(grads, model.parameters(), 5.0)\n"
        "    optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(("mask_kind", "finetune"), [("rect", False), ("irregular", True)])
def test_partial_conv_inpainting_as_torch(capsys, mask_kind, finetune):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        PCONV_SOURCE,
        PCONV_STEPS,
        capsys,
        7401,
        initialize=initializer(),
        params_of=params_of,
        WIDTH=6,
        MASK_KIND=mask_kind,
        FINETUNE=finetune,
    )
    assert len(theirs) == 2 + 3 * 4 + 6
    assert their_log == our_log and their_log.count("\n") == 4
    assert theirs[0] is True
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
