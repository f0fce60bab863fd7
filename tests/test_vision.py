"""retrograd.vision against torchvision's documented behaviour: torchvision is not installed
beside this torch, so expected values come from torch ops doing torchvision's arithmetic
(F.interpolate with antialias, conv2d, pad), from PIL, or by hand."""

from __future__ import annotations

import colorsys
import gzip
import pickle
import struct

import numpy as np
import pytest

import retrograd as rg
import retrograd.vision as torchvision
from retrograd.vision import datasets, ops, transforms
from retrograd.vision.transforms import functional as VF  # noqa: N812 (torchvision's F)

torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")


@pytest.fixture(autouse=True)
def _global_generator_restored():
    """The transforms draw from the global generator, and tests seed it: its state is put back."""
    state = rg.get_rng_state()
    yield
    rg.set_rng_state(state)


def image_u8(seed: int = 0, shape=(3, 12, 17)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


def image_f32(seed: int = 0, shape=(3, 12, 17)) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


# ---- conversions ------------------------------------------------------------------------------


def test_to_tensor_scales_a_pil_image_and_an_hwc_ndarray_to_chw_float():
    hwc = image_u8(1, (5, 7, 3))
    expected = hwc.transpose(2, 0, 1).astype(np.float32) / 255
    for source in (Image.fromarray(hwc), hwc):
        out = transforms.ToTensor()(source)
        assert out.dtype == rg.float32 and out.shape == (3, 5, 7)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)
    gray = transforms.ToTensor()(Image.fromarray(hwc[:, :, 0]))
    assert gray.shape == (1, 5, 7)
    # a float ndarray is transposed, not scaled (torchvision's rule)
    floats = np.full((2, 2, 1), 3.0, dtype=np.float64)
    assert transforms.ToTensor()(floats).numpy().tolist() == [[[3.0, 3.0], [3.0, 3.0]]]


def test_pil_to_tensor_keeps_uint8_and_to_pil_image_round_trips():
    hwc = image_u8(2, (4, 6, 3))
    tensor = transforms.PILToTensor()(Image.fromarray(hwc))
    assert tensor.dtype == rg.uint8
    np.testing.assert_array_equal(tensor.numpy(), hwc.transpose(2, 0, 1))
    back = transforms.ToPILImage()(tensor)
    assert back.mode == "RGB"
    np.testing.assert_array_equal(np.array(back), hwc)
    # a float tensor is multiplied by 255 and truncated (torchvision's pic.mul(255).byte())
    single = transforms.ToPILImage()(rg.tensor([[[0.5, 1.0]]]))
    assert single.mode == "L" and np.array(single).tolist() == [[127, 255]]


def test_to_tensor_refuses_other_inputs_clearly():
    with pytest.raises(rg.InvalidArgumentError, match="PIL Image or ndarray"):
        transforms.ToTensor()([1, 2, 3])
    with pytest.raises(rg.ShapeError, match="2 or 3 dimensional"):
        transforms.ToTensor()(np.zeros((1, 2, 3, 4), dtype=np.uint8))


# ---- normalize, resize, crops ----------------------------------------------------------------


def test_normalize_subtracts_the_mean_and_divides_by_the_std_per_channel():
    data = image_f32(3)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    out = transforms.Normalize(mean, std)(rg.from_numpy(data.copy()))
    expected = (torch.from_numpy(data) - torch.tensor(mean)[:, None, None]) / torch.tensor(std)[
        :, None, None
    ]
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6)
    with pytest.raises(rg.InvalidArgumentError, match="std evaluated to zero"):
        transforms.Normalize([0.0], [0.0])(rg.from_numpy(data.copy()))
    with pytest.raises(rg.InvalidArgumentError, match="float tensor"):
        transforms.Normalize([0.0], [1.0])(rg.from_numpy(image_u8()))


def test_resize_of_a_float_tensor_is_torchs_antialiased_bilinear_interpolation():
    data = image_f32(4, (3, 20, 30))
    out = transforms.Resize((9, 13))(rg.from_numpy(data.copy()))
    expected = torch.nn.functional.interpolate(
        torch.from_numpy(data)[None],
        size=(9, 13),
        mode="bilinear",
        align_corners=False,
        antialias=True,
    )[0]
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_resize_by_an_int_matches_the_smaller_edge_and_keeps_the_aspect_ratio():
    tall = rg.zeros(3, 40, 30)
    assert transforms.Resize(15)(tall).shape == (3, 20, 15)  # 40 * 15 / 30 = 20
    wide = rg.zeros(3, 30, 45)
    assert transforms.Resize(20)(wide).shape == (3, 20, 30)
    assert transforms.Resize(20, max_size=25)(wide).shape == (3, 16, 25)
    pil = Image.fromarray(np.zeros((30, 45, 3), dtype=np.uint8))
    assert transforms.Resize(20)(pil).size == (30, 20)  # PIL's size is (w, h)


def test_resize_of_a_uint8_tensor_rounds_back_to_uint8():
    data = image_u8(5, (3, 16, 16))
    out = transforms.Resize((8, 8), antialias=False)(rg.from_numpy(data.copy()))
    expected = (
        torch.nn.functional.interpolate(
            torch.from_numpy(data).float()[None], size=(8, 8), mode="bilinear", align_corners=False
        )[0]
        .round()
        .to(torch.uint8)
    )
    assert out.dtype == rg.uint8
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


def test_resize_of_a_pil_image_is_pils_resize_with_bilinear_by_default():
    hwc = image_u8(6, (20, 24, 3))
    out = transforms.Resize((10, 7))(Image.fromarray(hwc))
    expected = Image.fromarray(hwc).resize((7, 10), Image.BILINEAR)
    np.testing.assert_array_equal(np.array(out), np.array(expected))


def test_center_crop_rounds_the_offsets_and_pads_with_zeros_when_larger():
    data = image_u8(7, (3, 10, 11))
    out = transforms.CenterCrop(4)(rg.from_numpy(data.copy()))
    # top = round((10 - 4) / 2) = 3, left = round((11 - 4) / 2) = round(3.5) = 4
    np.testing.assert_array_equal(out.numpy(), data[:, 3:7, 4:8])
    grown = transforms.CenterCrop((12, 13))(rg.from_numpy(data.copy()))
    expected = np.zeros((3, 12, 13), dtype=np.uint8)
    expected[:, 1:11, 1:12] = data
    np.testing.assert_array_equal(grown.numpy(), expected)
    pil = transforms.CenterCrop(4)(Image.fromarray(data.transpose(1, 2, 0)))
    np.testing.assert_array_equal(np.array(pil), data[:, 3:7, 4:8].transpose(1, 2, 0))


@pytest.mark.parametrize(
    ("mode", "torch_mode"),
    [("constant", "constant"), ("edge", "replicate"), ("reflect", "reflect")],
)
def test_pad_takes_left_top_right_bottom_and_torchvisions_mode_names(mode, torch_mode):
    data = image_f32(8, (2, 5, 6))
    out = transforms.Pad((1, 2, 3, 4), padding_mode=mode)(rg.from_numpy(data.copy()))
    expected = torch.nn.functional.pad(torch.from_numpy(data)[None], (1, 3, 2, 4), mode=torch_mode)
    np.testing.assert_array_equal(out.numpy(), expected[0].numpy())


def test_pad_symmetric_repeats_the_edge_pixel_and_fill_sets_the_constant():
    row = rg.tensor([[[1.0, 2.0, 3.0]]])
    assert transforms.Pad((2, 0), padding_mode="symmetric")(row).numpy().tolist() == [
        [[2.0, 1.0, 1.0, 2.0, 3.0, 3.0, 2.0]]
    ]
    assert transforms.Pad((1, 0), fill=9)(row).numpy().tolist() == [[[9.0, 1.0, 2.0, 3.0, 9.0]]]


def test_random_crop_draws_top_then_left_from_the_global_generator():
    data = image_u8(9, (1, 10, 12))
    rg.manual_seed(5)
    out = transforms.RandomCrop((4, 5))(rg.from_numpy(data.copy()))
    rg.manual_seed(5)
    top = int(rg.randint(0, 10 - 4 + 1, size=(1,)).item())
    left = int(rg.randint(0, 12 - 5 + 1, size=(1,)).item())
    np.testing.assert_array_equal(out.numpy(), data[:, top : top + 4, left : left + 5])


def test_random_crop_pads_first_and_pads_if_needed():
    small = rg.ones(1, 3, 3)
    out = transforms.RandomCrop(5, pad_if_needed=True)(small)
    assert out.shape == (1, 5, 5) and float(out.sum()) == 9.0
    padded = transforms.RandomCrop(7, padding=2)(small)
    assert padded.shape == (1, 7, 7) and float(padded.sum()) == 9.0
    with pytest.raises(rg.InvalidArgumentError, match="larger than input image size"):
        transforms.RandomCrop(5)(small)


def test_random_flips_follow_p_and_flip_the_right_axis():
    data = rg.from_numpy(image_u8(10, (3, 4, 5)))
    np.testing.assert_array_equal(
        transforms.RandomHorizontalFlip(p=1.0)(data).numpy(), data.numpy()[:, :, ::-1]
    )
    np.testing.assert_array_equal(
        transforms.RandomVerticalFlip(p=1.0)(data).numpy(), data.numpy()[:, ::-1, :]
    )
    assert transforms.RandomHorizontalFlip(p=0.0)(data) is data
    pil = Image.fromarray(data.numpy().transpose(1, 2, 0))
    flipped = transforms.RandomHorizontalFlip(p=1.0)(pil)
    np.testing.assert_array_equal(np.array(flipped), np.array(pil)[:, ::-1])


def test_random_resized_crop_is_reproducible_under_a_seed_and_falls_back_to_the_centre():
    data = rg.from_numpy(image_f32(11, (3, 30, 40)))
    crop = transforms.RandomResizedCrop(16)
    rg.manual_seed(3)
    first = crop(data)
    rg.manual_seed(3)
    second = crop(data)
    assert first.shape == (3, 16, 16)
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    # an area fraction above 1 never fits: the centre crop of the widest allowed ratio, 4/3:
    # in_ratio 40/30 = 4/3 lies within (3/4, 4/3), so the whole image
    assert transforms.RandomResizedCrop.get_params(data, (2.0, 2.0), (3 / 4, 4 / 3)) == (
        0,
        0,
        30,
        40,
    )
    wide = rg.zeros(3, 10, 40)  # in_ratio 4 > 4/3: h = 10, w = round(10 * 4/3) = 13
    assert transforms.RandomResizedCrop.get_params(wide, (2.0, 2.0), (3 / 4, 4 / 3)) == (
        0,
        13,
        10,
        13,
    )


# ---- colour ---------------------------------------------------------------------------------


def test_grayscale_is_itu_601_luma_truncated_to_the_dtype():
    data = image_u8(12, (3, 4, 4))
    out = transforms.Grayscale(num_output_channels=3)(rg.from_numpy(data.copy()))
    r, g, b = (torch.from_numpy(data[k]).float() for k in range(3))
    luma = (0.2989 * r + 0.587 * g + 0.114 * b).to(torch.uint8)
    assert out.shape == (3, 4, 4)
    for channel in range(3):
        np.testing.assert_array_equal(out.numpy()[channel], luma.numpy())
    pil = transforms.Grayscale()(Image.fromarray(data.transpose(1, 2, 0)))
    assert pil.mode == "L"


def test_brightness_contrast_saturation_blend_as_torchvision():
    data = image_f32(13, (3, 6, 5))
    t = torch.from_numpy(data)
    gray = 0.2989 * t[0] + 0.587 * t[1] + 0.114 * t[2]
    x = rg.from_numpy(data.copy())
    np.testing.assert_allclose(
        VF.adjust_brightness(x, 1.3).numpy(), (1.3 * t).clamp(0, 1).numpy(), rtol=1e-6
    )
    mean = gray.mean()
    np.testing.assert_allclose(
        VF.adjust_contrast(x, 0.6).numpy(),
        (0.6 * t + 0.4 * mean).clamp(0, 1).numpy(),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        VF.adjust_saturation(x, 1.7).numpy(),
        (1.7 * t + (1 - 1.7) * gray[None]).clamp(0, 1).numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def test_adjust_hue_rotates_the_hue_as_colorsys_does():
    data = image_f32(14, (3, 3, 4))
    out = VF.adjust_hue(rg.from_numpy(data.copy()), 0.2).numpy()
    for i in range(3):
        for j in range(4):
            h, s, v = colorsys.rgb_to_hsv(*data[:, i, j].tolist())
            expected = colorsys.hsv_to_rgb((h + 0.2) % 1.0, s, v)
            np.testing.assert_allclose(out[:, i, j], expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.InvalidArgumentError, match="hue_factor"):
        VF.adjust_hue(rg.from_numpy(data), 0.7)


def test_color_jitter_is_reproducible_and_changes_the_image():
    data = rg.from_numpy(image_f32(15, (3, 8, 8)))
    jitter = transforms.ColorJitter(0.4, 0.4, 0.4, 0.1)
    rg.manual_seed(1)
    first = jitter(data)
    rg.manual_seed(1)
    second = jitter(data)
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    assert not np.allclose(first.numpy(), data.numpy())
    assert transforms.ColorJitter().brightness is None
    with pytest.raises(rg.InvalidArgumentError, match="hue"):
        transforms.ColorJitter(hue=0.8)


def test_gaussian_blur_is_a_reflect_padded_depthwise_conv_with_torchvisions_kernel():
    data = image_f32(16, (3, 9, 11))
    out = VF.gaussian_blur(rg.from_numpy(data.copy()), [5, 3], [1.1, 0.7])

    def kernel(size, sigma):
        x = torch.linspace(-(size - 1) * 0.5, (size - 1) * 0.5, size)
        pdf = torch.exp(-0.5 * (x / sigma).pow(2))
        return pdf / pdf.sum()

    k2d = torch.mm(kernel(3, 0.7)[:, None], kernel(5, 1.1)[None, :])
    padded = torch.nn.functional.pad(torch.from_numpy(data)[None], [2, 2, 1, 1], mode="reflect")
    expected = torch.nn.functional.conv2d(padded, k2d.expand(3, 1, 3, 5), groups=3)[0]
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(rg.InvalidArgumentError, match="odd"):
        transforms.GaussianBlur(4)


def test_rotation_by_90_degrees_is_counter_clockwise_as_pil():
    data = np.arange(25, dtype=np.uint8).reshape(1, 5, 5)
    out = VF.rotate(rg.from_numpy(data.copy()), 90.0)
    np.testing.assert_array_equal(out.numpy()[0], np.rot90(data[0]))
    pil = VF.rotate(Image.fromarray(data[0]), 90.0)
    np.testing.assert_array_equal(np.array(pil), np.rot90(data[0]))


def test_compose_chains_and_lambda_applies_a_function():
    pipeline = transforms.Compose(
        [
            transforms.ToTensor(),
            transforms.Lambda(lambda x: x * 2),
            transforms.Normalize([1.0], [2.0]),
        ]
    )
    out = pipeline(np.full((2, 2, 1), 255, dtype=np.uint8))
    np.testing.assert_allclose(out.numpy(), np.full((1, 2, 2), 0.5))
    assert "Normalize" in repr(pipeline)


# ---- datasets -------------------------------------------------------------------------------


def write_idx(path, array: np.ndarray, compress: bool = False) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(
        struct.pack(">I", n) for n in array.shape
    )
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        path = path.with_name(path.name + ".gz")
        payload = gzip.compress(payload)
    path.write_bytes(payload)


def test_mnist_reads_the_idx_files_under_root_mnist_raw(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    images = np.random.default_rng(0).integers(0, 256, (6, 28, 28), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5, 9], dtype=np.uint8)
    write_idx(raw / "train-images-idx3-ubyte", images, compress=True)
    write_idx(raw / "train-labels-idx1-ubyte", labels)
    data = datasets.MNIST(
        str(tmp_path),
        train=True,
        download=True,
        transform=transforms.Compose(
            [transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))]
        ),
    )
    assert len(data) == 6
    assert data.data.dtype == rg.uint8 and data.data.shape == (6, 28, 28)
    assert data.targets.dtype == rg.int64 and (data.targets == 1).sum().item() == 2
    np.testing.assert_allclose((data.data.float() / 255).numpy(), images / 255, rtol=1e-6)
    image, label = data[2]
    assert label == 4 and image.shape == (1, 28, 28)
    np.testing.assert_allclose(
        image.numpy()[0], (images[2] / 255 - 0.1307) / 0.3081, rtol=1e-5, atol=1e-6
    )
    with pytest.raises(FileNotFoundError, match="place the files"):
        datasets.MNIST(str(tmp_path), train=False, download=True)
    data.data, data.targets = data.data[3:], data.targets[3:]  # a subset, as scripts take it
    assert len(data) == 3 and data[0][1] == 1


def test_cifar10_reads_the_python_batches(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rows = np.random.default_rng(1).integers(0, 256, (2, 3072), dtype=np.uint8)
    with open(folder / "test_batch", "wb") as handle:
        pickle.dump({"data": rows, "labels": [7, 2]}, handle)
    with open(folder / "batches.meta", "wb") as handle:
        pickle.dump({"label_names": [f"c{k}" for k in range(10)]}, handle)
    data = datasets.CIFAR10(str(tmp_path), train=False, transform=transforms.PILToTensor())
    image, label = data[1]
    assert label == 2 and data.classes[7] == "c7"
    np.testing.assert_array_equal(image.numpy(), rows[1].reshape(3, 32, 32))


def test_fake_data_gives_the_same_item_each_time_and_image_folder_reads_classes(tmp_path):
    fake = datasets.FakeData(
        size=4, image_size=(3, 6, 5), num_classes=3, transform=transforms.ToTensor()
    )
    image, label = fake[1]
    again, _ = fake[1]
    assert image.shape == (3, 6, 5) and 0 <= int(label) < 3
    np.testing.assert_array_equal(image.numpy(), again.numpy())
    with pytest.raises(IndexError):
        fake[4]
    for name, value in (("cat", 10), ("dog", 200)):
        (tmp_path / name).mkdir()
        Image.fromarray(np.full((4, 4, 3), value, dtype=np.uint8)).save(tmp_path / name / "a.png")
    folder = datasets.ImageFolder(str(tmp_path), transform=transforms.PILToTensor())
    assert folder.classes == ["cat", "dog"] and len(folder) == 2
    image, label = folder[1]
    assert label == 1 and int(image[0, 0, 0]) == 200


# ---- utils ----------------------------------------------------------------------------------


def test_make_grid_tiles_with_padding_and_repeats_one_channel():
    images = rg.from_numpy(np.arange(3 * 4, dtype=np.float32).reshape(3, 1, 2, 2))
    grid = torchvision.utils.make_grid(images, nrow=2, padding=1, pad_value=-1.0).numpy()
    # two columns, two rows: (2 + 1) * 2 + 1 = 7 on each side
    assert grid.shape == (3, 7, 7)
    np.testing.assert_array_equal(grid[0, 1:3, 1:3], [[0, 1], [2, 3]])
    np.testing.assert_array_equal(grid[2, 1:3, 4:6], [[4, 5], [6, 7]])
    np.testing.assert_array_equal(grid[1, 4:6, 1:3], [[8, 9], [10, 11]])
    assert (grid[:, 4:6, 4:6] == -1).all() and (grid[:, 0, :] == -1).all()
    normalized = torchvision.utils.make_grid(images, normalize=True, padding=0, nrow=3).numpy()
    assert normalized.min() == 0.0 and normalized.max() == 1.0


def test_save_image_writes_a_png_of_the_grid(tmp_path):
    images = rg.from_numpy(np.linspace(0, 1, 2 * 3 * 2 * 2, dtype=np.float32).reshape(2, 3, 2, 2))
    torchvision.utils.save_image(images, tmp_path / "grid.png", padding=0)
    saved = np.array(Image.open(tmp_path / "grid.png"))
    expected = np.clip(images.numpy() * 255 + 0.5, 0, 255).astype(np.uint8)
    assert saved.shape == (2, 4, 3)
    np.testing.assert_array_equal(saved[:, :2], expected[0].transpose(1, 2, 0))


# ---- ops ------------------------------------------------------------------------------------


def test_box_iou_and_generalized_iou_by_hand():
    a = rg.tensor([[0.0, 0.0, 2.0, 2.0]])
    b = rg.tensor([[1.0, 1.0, 3.0, 3.0], [4.0, 4.0, 5.0, 5.0]])
    np.testing.assert_allclose(ops.box_iou(a, b).numpy(), [[1 / 7, 0.0]], rtol=1e-6)
    # enclosing boxes: 9 and 25; unions 7 and 5
    np.testing.assert_allclose(
        ops.generalized_box_iou(a, b).numpy(), [[1 / 7 - 2 / 9, 0.0 - 20 / 25]], rtol=1e-6
    )
    np.testing.assert_allclose(ops.box_area(b).numpy(), [4.0, 1.0])


def test_generalized_box_iou_loss_gradient_matches_torch_autograd():
    rng = np.random.default_rng(17)
    corners = rng.random((4, 2)) * 4
    boxes1 = np.concatenate([corners, corners + 1 + rng.random((4, 2))], 1)
    boxes2 = boxes1 + rng.normal(0, 0.5, (4, 4))
    boxes2[:, 2:] = np.maximum(boxes2[:, 2:], boxes2[:, :2] + 0.1)
    ours = rg.tensor(boxes1, dtype=rg.float64, requires_grad=True)
    loss = ops.generalized_box_iou_loss(ours, rg.tensor(boxes2, dtype=rg.float64), reduction="sum")
    grads = loss.backward()
    theirs = torch.tensor(boxes1, requires_grad=True)
    t1, t2 = theirs, torch.tensor(boxes2)
    x1, y1, x2, y2 = t1.unbind(-1)
    a1, b1, a2, b2 = t2.unbind(-1)
    inter = (torch.min(x2, a2) - torch.max(x1, a1)).clamp(min=0) * (
        torch.min(y2, b2) - torch.max(y1, b1)
    ).clamp(min=0)
    union = (x2 - x1) * (y2 - y1) + (a2 - a1) * (b2 - b1) - inter
    enclosing = (torch.max(x2, a2) - torch.min(x1, a1)) * (torch.max(y2, b2) - torch.min(y1, b1))
    expected = (1 - (inter / (union + 1e-7) - (enclosing - union) / (enclosing + 1e-7))).sum()
    expected.backward()
    np.testing.assert_allclose(float(loss), float(expected.detach()), rtol=1e-10)
    np.testing.assert_allclose(ours.grad(grads).numpy(), theirs.grad.numpy(), rtol=1e-8, atol=1e-10)
    assert rg.autograd.gradcheck(
        lambda b: ops.generalized_box_iou_loss(b, rg.tensor(boxes2, dtype=rg.float64)),
        (rg.tensor(boxes1, dtype=rg.float64, requires_grad=True),),
    )


def test_nms_keeps_by_score_and_batched_nms_keeps_categories_apart():
    boxes = rg.tensor(
        [
            [0.0, 0.0, 10.0, 10.0],
            [1.0, 1.0, 11.0, 11.0],
            [20.0, 20.0, 30.0, 30.0],
            [0.0, 0.0, 9.0, 10.0],
        ]
    )
    scores = rg.tensor([0.9, 0.95, 0.5, 0.3])
    # box 1 (0.95) first; box 0 overlaps it with IoU 81/119 = 0.68 > 0.5; box 3 with 0.58
    assert ops.nms(boxes, scores, 0.5).tolist() == [1, 2]
    assert ops.nms(boxes, scores, 0.7).tolist() == [1, 0, 2]
    categories = rg.tensor([0, 1, 0, 1])
    assert ops.batched_nms(boxes, scores, categories, 0.5).tolist() == [1, 0, 2]
    with pytest.raises(rg.ShapeError, match="nms"):
        ops.nms(boxes, rg.tensor([1.0]), 0.5)


def test_box_convert_round_trips_between_formats():
    boxes = rg.tensor([[1.0, 2.0, 5.0, 8.0]])
    assert ops.box_convert(boxes, "xyxy", "xywh").tolist() == [[1.0, 2.0, 4.0, 6.0]]
    assert ops.box_convert(boxes, "xyxy", "cxcywh").tolist() == [[3.0, 5.0, 4.0, 6.0]]
    back = ops.box_convert(ops.box_convert(boxes, "xyxy", "cxcywh"), "cxcywh", "xyxy")
    assert back.tolist() == boxes.tolist()
    with pytest.raises(rg.InvalidArgumentError, match="formats"):
        ops.box_convert(boxes, "xyxy", "yxyx")


def test_frozen_batch_norm_is_eval_batch_norm_and_drops_num_batches_tracked():
    rng = np.random.default_rng(18)
    x = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)
    stats = {
        k: rng.random(3).astype(np.float32) + 0.5
        for k in ("weight", "bias", "running_mean", "running_var")
    }
    layer = ops.FrozenBatchNorm2d(3)
    layer.load_state_dict(
        {**{k: rg.from_numpy(v) for k, v in stats.items()}, "num_batches_tracked": rg.tensor(3)}
    )
    expected = torch.nn.functional.batch_norm(
        torch.from_numpy(x),
        torch.from_numpy(stats["running_mean"]),
        torch.from_numpy(stats["running_var"]),
        torch.from_numpy(stats["weight"]),
        torch.from_numpy(stats["bias"]),
        training=False,
        eps=1e-5,
    )
    np.testing.assert_allclose(
        layer(rg.from_numpy(x)).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6
    )
    assert list(layer.parameters()) == []


def test_model_blocks_have_torchvisions_keys_and_stochastic_depth_rules():
    block = ops.Conv2dNormActivation(3, 8, kernel_size=3, stride=2)
    assert sorted(block.state_dict()) == [
        "0.weight",
        "1.bias",
        "1.num_batches_tracked",
        "1.running_mean",
        "1.running_var",
        "1.weight",
    ]
    assert block(rg.zeros(1, 3, 8, 8)).shape == (1, 8, 4, 4)
    se = ops.SqueezeExcitation(8, 2)
    assert sorted(se.state_dict()) == ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight"]
    x = rg.ones(4, 3)
    assert ops.stochastic_depth(x, 0.5, "row", training=False) is x
    dropped = ops.stochastic_depth(x, 0.5, "row").numpy()
    assert set(np.unique(dropped).tolist()) <= {0.0, 2.0}
    assert all(len(set(row.tolist())) == 1 for row in dropped)
    with pytest.raises(rg.InvalidArgumentError, match="mode"):
        ops.StochasticDepth(0.1, "column")(x)


# ---- models ---------------------------------------------------------------------------------


def test_resnet18_loads_a_torch_resnet18_state_dict_and_computes_the_same(resnet_torch_module):
    theirs = resnet_torch_module.eval()
    ours = torchvision.models.resnet18(num_classes=10).eval()
    state = {k: rg.from_numpy(v.detach().numpy().copy()) for k, v in theirs.state_dict().items()}
    ours.load_state_dict(state)
    x = np.random.default_rng(19).normal(size=(2, 3, 32, 32)).astype(np.float32)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(
        ours(rg.from_numpy(x)).detach().numpy(), expected, rtol=1e-4, atol=1e-4
    )


def test_model_builders_refuse_pretrained_weights():
    with pytest.raises(rg.InvalidArgumentError, match="downloads no pretrained weights"):
        torchvision.models.resnet18(weights="IMAGENET1K_V1")
    with pytest.raises(rg.InvalidArgumentError, match="downloads no pretrained weights"):
        torchvision.models.vgg11(pretrained=True)
    assert len(torchvision.models.resnet50(num_classes=3).state_dict()) == 320


@pytest.mark.parametrize(
    ("name", "parameters", "entries"),
    [
        ("resnet18", 11_689_512, 122),
        ("resnet50", 25_557_032, 320),
        ("mobilenet_v2", 3_504_872, 314),
    ],
)
def test_models_have_torchvisions_documented_parameter_counts(name, parameters, entries):
    """The counts of torchvision's model table (num_params), and its state-dict lengths."""
    model = getattr(torchvision.models, name)()
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert len(model.state_dict()) == entries
    if name == "mobilenet_v2":
        assert model.eval()(rg.zeros(1, 3, 32, 32)).shape == (1, 1000)


@pytest.fixture(scope="module")
def resnet_torch_module():
    """torchvision's resnet18 built with torch (benchmarks/cnn_models.py's port of it)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cnn_models.py"
    spec = importlib.util.spec_from_file_location("benchmarks_cnn_models_vision", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.random.fork_rng(), torch.no_grad():  # (torch's global generator left as found)
        torch.manual_seed(0)
        model = module.make_resnet18(torch, torch.nn, torch.nn.functional, num_classes=10)
        # statistics other than the initial 0/1, so BN's eval arithmetic counts
        for name, buffer in model.named_buffers():
            if name.endswith("running_mean"):
                buffer.normal_(0, 0.1)
            elif name.endswith("running_var"):
                buffer.uniform_(0.5, 1.5)
    return model


def roi_align_reference(x, rois, pooled, scale, sampling_ratio, aligned):
    """torchvision's CPU roi_align kernel (roi_align_kernel.cpp), one sample at a time."""
    _, channels, height, width = x.shape
    out = np.zeros((len(rois), channels, pooled, pooled))

    def sample(plane, y, xx):
        if y < -1.0 or y > height or xx < -1.0 or xx > width:
            return 0.0
        y, xx = max(y, 0.0), max(xx, 0.0)
        y_low, x_low = int(y), int(xx)
        if y_low >= height - 1:
            y_high = y_low = height - 1
            y = float(y_low)
        else:
            y_high = y_low + 1
        if x_low >= width - 1:
            x_high = x_low = width - 1
            xx = float(x_low)
        else:
            x_high = x_low + 1
        ly, lx = y - y_low, xx - x_low
        hy, hx = 1 - ly, 1 - lx
        return (
            hy * hx * plane[y_low, x_low]
            + hy * lx * plane[y_low, x_high]
            + ly * hx * plane[y_high, x_low]
            + ly * lx * plane[y_high, x_high]
        )

    offset = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois):
        sw, sh = x1 * scale - offset, y1 * scale - offset
        rw, rh = x2 * scale - offset - sw, y2 * scale - offset - sh
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / pooled, rw / pooled
        gh = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rh / pooled))
        gw = sampling_ratio if sampling_ratio > 0 else int(np.ceil(rw / pooled))
        count = max(gh * gw, 1)
        for c in range(channels):
            for ph in range(pooled):
                for pw in range(pooled):
                    total = 0.0
                    for iy in range(gh):
                        y = sh + ph * bh + (iy + 0.5) * bh / gh
                        for ix in range(gw):
                            xx = sw + pw * bw + (ix + 0.5) * bw / gw
                            total += sample(x[int(b), c], y, xx)
                    out[k, c, ph, pw] = total / count
    return out


@pytest.mark.parametrize(("sampling_ratio", "aligned"), [(-1, False), (2, True), (-1, True)])
def test_roi_align_matches_torchvisions_kernel_and_has_gradients(sampling_ratio, aligned):
    rng = np.random.default_rng(20)
    x = rng.normal(size=(2, 3, 9, 11))
    rois = np.array([[0, 1.2, 0.5, 7.9, 6.3], [1, -1.5, 2.0, 4.0, 10.5], [1, 3.0, 3.0, 3.2, 3.1]])
    expected = roi_align_reference(x, rois, 3, 0.8, sampling_ratio, aligned)
    ours = rg.tensor(x, dtype=rg.float64, requires_grad=True)
    out = ops.roi_align(ours, rg.tensor(rois, dtype=rg.float64), 3, 0.8, sampling_ratio, aligned)
    np.testing.assert_allclose(out.detach().numpy(), expected, rtol=1e-10, atol=1e-12)
    # the list form: one [L, 4] tensor per image
    listed = ops.roi_align(
        ours.detach(),
        [rg.tensor(rois[:1, 1:]), rg.tensor(rois[1:, 1:])],
        3,
        0.8,
        sampling_ratio,
        aligned,
    )
    np.testing.assert_allclose(listed.numpy(), expected, rtol=1e-10, atol=1e-12)
    if sampling_ratio != 2:  # (one gradient check suffices: the same gather serves all three)
        return
    assert rg.autograd.gradcheck(
        lambda t: ops.roi_align(
            t, rg.tensor(rois, dtype=rg.float64), 2, 0.8, sampling_ratio, aligned
        ),
        (rg.tensor(x[:, :1, :5, :6], dtype=rg.float64, requires_grad=True),),
    )


def test_roi_pool_takes_the_max_of_each_bin_by_hand():
    x = rg.from_numpy(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    # the whole image in 2 x 2 bins: the max of each quarter
    out = ops.roi_pool(x, rg.tensor([[0.0, 0.0, 0.0, 3.0, 3.0]]), 2)
    assert out.numpy().tolist() == [[[[5.0, 7.0], [13.0, 15.0]]]]
    # a box at (1, 1)-(2, 2) in 1 bin: max of rows 1..2, columns 1..2
    assert ops.RoIPool(1, 1.0)(x, [rg.tensor([[1.0, 1.0, 2.0, 2.0]])]).numpy().ravel().tolist() == [
        10.0
    ]
    with pytest.raises(rg.ShapeError, match="roi_pool"):
        ops.roi_pool(x, rg.tensor([[0.0, 1.0, 2.0, 3.0]]), 2)


def test_bad_input_raises_the_api_errors_naming_the_transform(tmp_path):
    x = rg.rand(3, 8, 8)
    with pytest.raises(rg.InvalidArgumentError, match="PIL Image or a Tensor"):
        transforms.Resize(4)([1, 2])
    with pytest.raises(rg.ShapeError, match="resize"):
        transforms.Resize(4)(rg.rand(5))
    with pytest.raises(rg.ShapeError, match="normalize: mean has 2 values"):
        transforms.Normalize([0.5, 0.5], [0.5, 0.5])(x)
    with pytest.raises(rg.InvalidArgumentError, match="non-negative"):
        VF.crop(x, 0, 0, -2, 3)
    with pytest.raises(rg.InvalidArgumentError, match="RandomCrop: size"):
        transforms.RandomCrop(-2)
    with pytest.raises(rg.InvalidArgumentError, match="degrees"):
        transforms.RandomRotation("a")
    with pytest.raises(rg.InvalidArgumentError, match="padding"):
        transforms.Pad((1, 2, 3))
    with pytest.raises(rg.ShapeError, match="make_grid"):
        torchvision.utils.make_grid(rg.rand(1, 2, 3, 4, 5))
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "test_batch").write_bytes(b"garbage")
    with pytest.raises(rg.InvalidArgumentError, match="damaged or truncated"):
        datasets.CIFAR10(str(tmp_path), train=False)
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-images-idx3-ubyte").write_bytes(
        b"\x00\x00\x08\x03" + b"\x00\x00\x00\x02" * 3 + b"abc"
    )
    write_idx(raw / "train-labels-idx1-ubyte", np.array([1, 2], dtype=np.uint8))
    with pytest.raises(rg.InvalidArgumentError, match="damaged or truncated"):
        datasets.MNIST(str(tmp_path))
    # the tensor is still usable afterwards
    assert transforms.Resize(4)(x).shape == (3, 4, 4)


def test_pil_images_through_pad_blur_brightness_and_hue():
    hwc = image_u8(21, (6, 7, 3))
    pil = Image.fromarray(hwc)
    padded = np.array(transforms.Pad((1, 2), fill=(9, 8, 7))(pil))
    assert padded.shape == (10, 9, 3)
    assert padded[0, 0].tolist() == [9, 8, 7] and (padded[2:8, 1:8] == hwc).all()
    # torchvision blurs a PIL image as the uint8 tensor of it, and converts back
    blurred = np.array(VF.gaussian_blur(pil, 3, 0.8))
    expected = VF.gaussian_blur(transforms.PILToTensor()(pil), 3, 0.8).numpy().transpose(1, 2, 0)
    np.testing.assert_array_equal(blurred, expected)
    # PIL's brightness is a blend with black (ImageEnhance.Brightness)
    brighter = np.array(VF.adjust_brightness(pil, 1.5))
    black = Image.new("RGB", pil.size, 0)
    np.testing.assert_array_equal(brighter, np.array(Image.blend(black, pil, 1.5)))
    shifted = VF.adjust_hue(pil, 0.25)
    assert shifted.mode == "RGB" and shifted.size == pil.size
    assert VF.adjust_hue(pil.convert("L"), 0.25).mode == "L"


def test_draw_bounding_boxes_outlines_each_box_in_its_colour():
    image = rg.zeros(3, 8, 8, dtype=rg.uint8)
    drawn = torchvision.utils.draw_bounding_boxes(
        image, rg.tensor([[1, 1, 5, 4]]), colors="red", width=1
    ).numpy()
    assert drawn.dtype == np.uint8 and drawn.shape == (3, 8, 8)
    assert drawn[:, 1, 1].tolist() == [255, 0, 0] and drawn[:, 4, 5].tolist() == [255, 0, 0]
    assert drawn[:, 2, 2].tolist() == [0, 0, 0]  # inside: not filled
    with pytest.raises(rg.InvalidArgumentError, match="uint8"):
        torchvision.utils.draw_bounding_boxes(rg.zeros(3, 8, 8), rg.tensor([[1, 1, 5, 4]]))


def test_a_seeded_augmentation_pipeline_over_fake_data_in_a_data_loader_repeats_itself():
    from retrograd.utils.data import DataLoader

    pipeline = transforms.Compose(
        [
            transforms.RandomCrop(8, padding=2),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        ]
    )
    data = datasets.FakeData(size=6, image_size=(3, 8, 8), num_classes=4, transform=pipeline)
    runs = []
    for _ in range(2):
        rg.manual_seed(7)
        runs.append([(x.numpy(), y.numpy()) for x, y in DataLoader(data, batch_size=4)])
    assert [x.shape for x, _ in runs[0]] == [(4, 3, 8, 8), (2, 3, 8, 8)]
    assert runs[0][0][1].dtype == np.int64
    for (x0, y0), (x1, y1) in zip(*runs):
        np.testing.assert_array_equal(x0, x1)
        np.testing.assert_array_equal(y0, y1)
    assert runs[0][0][0].min() >= -1.0 and runs[0][0][0].max() <= 1.0


def test_io_reads_and_writes_png_as_uint8_chw(tmp_path):
    data = image_u8(22, (3, 5, 6))
    path = tmp_path / "a.png"
    torchvision.io.write_png(rg.from_numpy(data.copy()), str(path))
    np.testing.assert_array_equal(np.array(Image.open(path)).transpose(2, 0, 1), data)
    image = torchvision.io.read_image(str(path))
    assert image.dtype == rg.uint8
    np.testing.assert_array_equal(image.numpy(), data)
    gray = torchvision.io.read_image(str(path), torchvision.io.ImageReadMode.GRAY)
    np.testing.assert_array_equal(gray.numpy()[0], np.array(Image.open(path).convert("L")))
    decoded = torchvision.io.decode_image(torchvision.io.read_file(str(path)))
    np.testing.assert_array_equal(decoded.numpy(), data)
    with pytest.raises(rg.InvalidArgumentError, match="not a decodable image"):
        torchvision.io.decode_image(rg.zeros(10, dtype=rg.uint8))
    with pytest.raises(FileNotFoundError, match="read_image"):
        torchvision.io.read_image(str(tmp_path / "missing.png"))


def test_weight_enums_import_and_are_refused_and_their_preset_is_imagenets():
    weights = torchvision.models.ResNet18_Weights.DEFAULT
    assert weights is torchvision.models.ResNet18_Weights.IMAGENET1K_V1
    with pytest.raises(rg.InvalidArgumentError, match="downloads no pretrained weights"):
        torchvision.models.resnet18(weights=weights)
    data = image_f32(23, (3, 20, 30))
    out = weights.transforms()(rg.from_numpy(data.copy()))
    # resize the smaller edge to 256 (antialiased bilinear), centre-crop 224, normalize
    resized = torch.nn.functional.interpolate(
        torch.from_numpy(data)[None], size=(256, 384), mode="bilinear", antialias=True
    )[0]
    cropped = resized[:, 16:240, 80:304]
    mean = torch.tensor([0.485, 0.456, 0.406])[:, None, None]
    std = torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    np.testing.assert_allclose(out.numpy(), ((cropped - mean) / std).numpy(), rtol=1e-4, atol=1e-5)
    assert torchvision.models.get_model("resnet18", num_classes=3).fc.out_features == 3
    assert "mobilenet_v2" in torchvision.models.list_models()


def test_v2_transforms_take_a_sample_and_transform_its_image():
    from retrograd.vision.transforms import v2

    hwc = image_u8(24, (6, 8, 3))
    pipeline = v2.Compose(
        [
            v2.ToImage(),
            v2.RandomHorizontalFlip(p=1.0),
            v2.ToDtype(rg.float32, scale=True),
            v2.Normalize([0.5] * 3, [0.5] * 3),
        ]
    )
    expected = (hwc[:, ::-1].transpose(2, 0, 1).astype(np.float32) / 255 - 0.5) / 0.5
    alone = pipeline(Image.fromarray(hwc))
    np.testing.assert_allclose(alone.numpy(), expected, rtol=1e-6, atol=1e-6)
    image, label = pipeline(Image.fromarray(hwc), 7)
    assert label == 7
    np.testing.assert_allclose(image.numpy(), expected, rtol=1e-6, atol=1e-6)
    sample = pipeline({"image": Image.fromarray(hwc), "name": "a"})
    assert sample["name"] == "a" and sample["image"].shape == (3, 6, 8)
    assert v2.ToDtype(rg.float32)(rg.from_numpy(hwc.transpose(2, 0, 1).copy())).numpy().max() > 1


def test_pad_and_crop_of_a_tensor_carry_gradients():
    x = rg.tensor(image_f32(25, (1, 3, 4)).astype(np.float64), requires_grad=True)
    out = transforms.RandomCrop(5, padding=1, padding_mode="reflect")(x)
    grads = (out * out).sum().backward()
    expected = torch.tensor(image_f32(25, (1, 3, 4)).astype(np.float64), requires_grad=True)
    padded = torch.nn.functional.pad(expected[None], (1, 1, 1, 1), mode="reflect")[0]
    # the crop's place is drawn; recover it by matching the output in the padded image
    matches = [
        (i, j)
        for i in range(padded.shape[1] - 4)
        for j in range(padded.shape[2] - 4)
        if np.allclose(padded[:, i : i + 5, j : j + 5].detach().numpy(), out.detach().numpy())
    ]
    i, j = matches[0]
    (padded[:, i : i + 5, j : j + 5] ** 2).sum().backward()
    np.testing.assert_allclose(x.grad(grads).numpy(), expected.grad.numpy(), rtol=1e-12)


def test_to_tensor_of_binary_and_float_pil_modes():
    binary = Image.fromarray(np.array([[0, 255], [255, 0]], dtype=np.uint8)).convert("1")
    assert transforms.ToTensor()(binary).numpy().tolist() == [[[0.0, 1.0], [1.0, 0.0]]]
    floats = Image.fromarray(np.array([[0.25, 3.5]], dtype=np.float32), mode="F")
    out = transforms.ToTensor()(floats)
    assert out.dtype == rg.float32 and out.numpy().tolist() == [[[0.25, 3.5]]]  # not scaled


def test_random_choice_and_order_draw_from_pythons_random_as_torchvisions_v1():
    import random

    first, second = transforms.Lambda(lambda x: x + 1), transforms.Lambda(lambda x: x * 10)
    state = random.getstate()
    try:
        random.seed(4)
        picked = [transforms.RandomChoice([first, second], p=[0.3, 0.7])(1) for _ in range(6)]
        random.seed(4)
        expected = [random.choices([2, 10], weights=[0.3, 0.7])[0] for _ in range(6)]
        assert picked == expected
        random.seed(5)
        ordered = transforms.RandomOrder([first, second])(1)
        random.seed(5)
        order = [0, 1]
        random.shuffle(order)
        assert ordered == (20 if order == [0, 1] else 11)
    finally:
        random.setstate(state)
