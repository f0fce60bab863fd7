"""Defects the torchvision-script ports of round 59 exposed: ``torchvision.ops`` had no
``sigmoid_focal_loss`` (RetinaNet's and DETR-style heads' classification loss) and no
``FeaturePyramidNetwork``/``LastLevelMaxPool`` (every detection backbone's neck). The expected
values come from torchvision's own code for them, written out here in torch (torchvision is not
installed beside this torch)."""

from collections import OrderedDict

import numpy as np
import pytest
import torch

import retrograd as rg
import retrograd.vision as torchvision


def torch_sigmoid_focal_loss(inputs, targets, alpha=0.25, gamma=2, reduction="none"):
    # torchvision/ops/focal_loss.py, as written
    p = torch.sigmoid(inputs)
    ce_loss = torch.nn.functional.binary_cross_entropy_with_logits(
        inputs, targets, reduction="none"
    )
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    if reduction == "mean":
        loss = loss.mean()
    elif reduction == "sum":
        loss = loss.sum()
    return loss


@pytest.mark.parametrize(
    ("alpha", "gamma", "reduction"), [(0.25, 2, "none"), (-1, 1.5, "mean"), (0.5, 0, "sum")]
)
def test_sigmoid_focal_loss_matches_torchvision_with_gradients(alpha, gamma, reduction):
    torch.manual_seed(0)
    logits = torch.randn(6, 5, dtype=torch.float64) * 3
    targets = (torch.rand(6, 5, dtype=torch.float64) > 0.7).to(torch.float64)
    torch_logits = logits.clone().requires_grad_(True)
    expected = torch_sigmoid_focal_loss(torch_logits, targets, alpha, gamma, reduction)
    expected.sum().backward()

    ours = rg.tensor(logits.numpy(), requires_grad=True)
    loss = torchvision.ops.sigmoid_focal_loss(
        ours, rg.tensor(targets.numpy()), alpha=alpha, gamma=gamma, reduction=reduction
    )
    np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    grads = loss.sum().backward()
    np.testing.assert_allclose(
        ours.grad(grads).numpy(), torch_logits.grad.numpy(), rtol=1e-9, atol=1e-12
    )


def test_sigmoid_focal_loss_bad_input_is_named():
    logits = rg.zeros(3, 2)
    with pytest.raises(rg.InvalidArgumentError, match=r"sigmoid_focal_loss.*'average'"):
        torchvision.ops.sigmoid_focal_loss(logits, rg.zeros(3, 2), reduction="average")
    with pytest.raises(rg.ShapeError, match=r"sigmoid_focal_loss.*\[3, 2\] and \[3\]"):
        torchvision.ops.sigmoid_focal_loss(logits, rg.zeros(3))


class TorchFPN(torch.nn.Module):
    """torchvision/ops/feature_pyramid_network.py's forward with norm_layer=None (each block a
    Sequential holding one Conv2d, as Conv2dNormActivation builds it) and LastLevelMaxPool."""

    def __init__(self, in_channels_list, out_channels):
        super().__init__()
        conv = torch.nn.Conv2d
        self.inner_blocks = torch.nn.ModuleList(
            torch.nn.Sequential(conv(c, out_channels, 1, padding=0)) for c in in_channels_list
        )
        self.layer_blocks = torch.nn.ModuleList(
            torch.nn.Sequential(conv(out_channels, out_channels, 3, padding=1))
            for _ in in_channels_list
        )

    def forward(self, x):
        names = list(x.keys())
        x = list(x.values())
        last_inner = self.inner_blocks[-1](x[-1])
        results = [self.layer_blocks[-1](last_inner)]
        for idx in range(len(x) - 2, -1, -1):
            inner_lateral = self.inner_blocks[idx](x[idx])
            feat_shape = inner_lateral.shape[-2:]
            inner_top_down = torch.nn.functional.interpolate(
                last_inner, size=feat_shape, mode="nearest"
            )
            last_inner = inner_lateral + inner_top_down
            results.insert(0, self.layer_blocks[idx](last_inner))
        names.append("pool")
        results.append(torch.nn.functional.max_pool2d(results[-1], 1, 2, 0))
        return OrderedDict(zip(names, results))


def test_feature_pyramid_network_matches_torchvision_with_gradients():
    # torchvision's path for the extra blocks, as scripts import them
    from retrograd.vision.ops.feature_pyramid_network import LastLevelMaxPool
    from retrograd.vision.ops.focal_loss import sigmoid_focal_loss

    assert sigmoid_focal_loss is torchvision.ops.sigmoid_focal_loss
    rg.manual_seed(0)
    torch.manual_seed(0)
    fpn = torchvision.ops.FeaturePyramidNetwork([3, 5, 4], 6, extra_blocks=LastLevelMaxPool())
    keys = list(fpn.state_dict())
    assert keys == [
        f"{kind}_blocks.{i}.0.{p}"
        for kind in ("inner", "layer")
        for i in range(3)
        for p in ("weight", "bias")
    ]
    # torchvision's initialization: kaiming_uniform_(a=1) weights (bound sqrt(3 / fan_in)),
    # zero biases
    weight = fpn.inner_blocks[1][0].weight.numpy()
    assert np.abs(weight).max() <= np.sqrt(3 / 5) and np.abs(weight).max() > 0.5 * np.sqrt(3 / 5)
    assert all(not fpn.state_dict()[k].numpy().any() for k in keys if k.endswith("bias"))

    reference = TorchFPN([3, 5, 4], 6).double()
    fpn = fpn.double()
    for key, value in fpn.state_dict().items():
        reference.state_dict()[key].copy_(torch.from_numpy(value.numpy().copy()))
        reference.state_dict()[key].add_(0.1 if key.endswith("bias") else 0.0)
    fpn.load_state_dict({k: rg.tensor(v.numpy()) for k, v in reference.state_dict().items()})

    shapes = {"c3": (2, 3, 8, 7), "c4": (2, 5, 4, 4), "c5": (2, 4, 2, 2)}
    arrays = {name: torch.randn(*shape, dtype=torch.float64) for name, shape in shapes.items()}
    torch_inputs = OrderedDict((k, v.clone().requires_grad_(True)) for k, v in arrays.items())
    ours = OrderedDict((k, rg.tensor(v.numpy(), requires_grad=True)) for k, v in arrays.items())
    expected = reference(torch_inputs)
    out = fpn(ours)
    assert isinstance(out, OrderedDict) and list(out) == ["c3", "c4", "c5", "pool"]
    for name in out:
        np.testing.assert_allclose(out[name].numpy(), expected[name].detach().numpy(), rtol=1e-10)
    sum(((i + 1) * v.square()).sum() for i, v in enumerate(expected.values())).backward()
    grads = sum(((i + 1) * v.square()).sum() for i, v in enumerate(out.values())).backward()
    for name in shapes:
        np.testing.assert_allclose(
            ours[name].grad(grads).numpy(), torch_inputs[name].grad.numpy(), rtol=1e-9, atol=1e-12
        )
    weight = fpn.layer_blocks[0][0].weight
    np.testing.assert_allclose(
        weight.grad(grads).numpy(), reference.layer_blocks[0][0].weight.grad.numpy(), rtol=1e-9
    )


def test_feature_pyramid_network_bad_input_is_named():
    fpn = torchvision.ops.FeaturePyramidNetwork([3, 5], 4)
    with pytest.raises(rg.InvalidArgumentError, match=r"FeaturePyramidNetwork.*2 feature maps"):
        fpn([rg.zeros(1, 3, 4, 4), rg.zeros(1, 5, 2, 2)])
    with pytest.raises(rg.InvalidArgumentError, match="in_channels=0"):
        torchvision.ops.FeaturePyramidNetwork([0, 5], 4)


def test_sample_dirichlet_and_standard_gamma_draw_as_torch():
    # torchvision's mixup/cutmix draw their ratio by torch._sample_dirichlet, a private name
    # retrograd lacked; the draws differ from torch's stream, their law is torch's
    rg.manual_seed(0)
    concentration = rg.tensor([[0.2, 0.2], [2.0, 6.0]], dtype=rg.float64).repeat(2000, 1)
    drawn = rg._sample_dirichlet(concentration)
    expected_shape = torch._sample_dirichlet(torch.ones(4000, 2, dtype=torch.float64)).shape
    assert tuple(drawn.shape) == tuple(expected_shape) and drawn.dtype == rg.float64
    values = drawn.numpy()
    np.testing.assert_allclose(values.sum(-1), 1.0, rtol=1e-12)
    assert (values > 0).all()
    # Dirichlet means alpha / sum(alpha): 0.5 and 0.25 (standard errors about 0.01)
    np.testing.assert_allclose(values[0::2, 0].mean(), 0.5, atol=0.04)
    np.testing.assert_allclose(values[1::2, 0].mean(), 0.25, atol=0.02)
    gamma = rg._standard_gamma(rg.full((4000,), 3.0)).numpy()
    assert gamma.dtype == np.float32 and abs(gamma.mean() - 3.0) < 0.15
    with pytest.raises(rg.DTypeError, match=r"_sample_dirichlet.*int64"):
        rg._sample_dirichlet(rg.tensor([1, 2]))
    # a 0-d concentration is a one-point simplex, as torch draws it
    assert rg._sample_dirichlet(rg.tensor(1.0)).item() == pytest.approx(1.0)


def test_multi_scale_roi_align_pools_each_box_from_its_fpn_level():
    # torchvision's docstring example: feat1 at 1/8, feat3 at 1/32 of a 512 image, so levels
    # 3..5; each box's level is floor(4 + log2(sqrt(area) / 224) + 1e-6) clamped to [3, 5],
    # counted from 3, and indexes the list of the named maps as torchvision's loop does: level
    # 1 pools from feat3, a box of level 2 has no map and stays zero
    from retrograd.vision.ops.poolers import MultiScaleRoIAlign

    np.random.seed(0)
    rg.manual_seed(0)
    features = {
        "feat1": rg.tensor(np.random.rand(2, 3, 64, 64), requires_grad=True),
        "feat2": rg.tensor(np.random.rand(2, 3, 32, 32)),
        "feat3": rg.tensor(np.random.rand(2, 3, 16, 16), requires_grad=True),
    }
    corners = [np.random.rand(k, 2) * 200 for k in (3, 3)]
    sizes = [
        np.array([[10.0, 20.0], [300.0, 250.0], [120.0, 90.0]]),
        np.array([[40.0, 30.0], [500.0, 400.0], [1000.0, 900.0]]),
    ]
    boxes = [rg.tensor(np.concatenate([c, c + s], 1)) for c, s in zip(corners, sizes, strict=True)]
    pooler = MultiScaleRoIAlign(["feat1", "feat3"], 3, sampling_ratio=2)
    out = pooler(features, boxes, [(512, 512), (480, 500)])
    assert tuple(out.shape) == (6, 3, 3, 3) and pooler.scales == [0.125, 0.03125]

    areas = np.concatenate([s.prod(1) for s in sizes])
    levels = np.clip(np.floor(4 + np.log2(np.sqrt(areas) / 224) + 1e-6), 3, 5) - 3
    np.testing.assert_array_equal(levels, [0, 1, 0, 0, 1, 2])
    maps, scales = [features["feat1"], features["feat3"]], [0.125, 0.03125]
    image_of = [0, 0, 0, 1, 1, 1]
    every = [b.numpy() for b in boxes]
    rows = np.concatenate(every)
    assert not out[5].numpy().any()
    for k, level in enumerate(levels.astype(int)[:5]):
        roi = rg.tensor([[0.0, *rows[k]]])
        feature = maps[level][image_of[k] : image_of[k] + 1]
        expected = torchvision.ops.roi_align(feature, roi, 3, scales[level], sampling_ratio=2)
        np.testing.assert_allclose(out[k].numpy(), expected[0].numpy(), rtol=1e-12)
    grads = (out * out).sum().backward()
    assert np.abs(features["feat1"].grad(grads).numpy()).sum() > 0
    assert np.abs(features["feat3"].grad(grads).numpy()).sum() > 0
    with pytest.raises(rg.InvalidArgumentError, match=r"MultiScaleRoIAlign.*featmap_names"):
        pooler({"other": features["feat2"]}, boxes, [(512, 512)])
