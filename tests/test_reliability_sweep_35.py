"""Reliability sweep 35, over the surfaces added last: sparse COO tensors, the global and
``rg.Generator`` random streams, ``retrograd.vision`` (transforms, datasets over damaged files,
``vision.io`` over damaged images), autocast, the profiler and ``distributed.checkpoint``. Each
heading names a defect found, its tests failing on the code before the fix; a few tests keep
what the sweep found right (a state ``get_state`` gave, seeds at the ends of torch's range,
einops' own errors, ``rg.load`` of damaged files and ``rg.save`` on a full disk). Expected behaviour
comes from torch where torch has one (whether it raises, and the built-in class its error is),
from torchvision's documented checks where it is torchvision's (not installed here), and from
API.md section 7 otherwise: the hierarchy's error naming the op and the values at fault, and the
tensors, files and streams involved left usable."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import retrograd as rg

SPARSE_INDICES = [[0, 1], [1, 0]]


def sparse_pair():
    ours = rg.sparse_coo_tensor(SPARSE_INDICES, [1.0, 2.0], (2, 2))
    theirs = torch.sparse_coo_tensor(SPARSE_INDICES, [1.0, 2.0], (2, 2))
    return ours, theirs


# == sparse: a size of floats, a str or negative extents ==========================================
@pytest.mark.parametrize(
    ("size", "error", "words"),
    [
        ("ab", rg.DTypeError, "size"),  # int("a") failed: a bare ValueError
        ((2.5, 2), rg.DTypeError, "2.5"),  # accepted as (2, 2); torch refuses the float
        ((-2, 2), rg.InvalidArgumentError, "non-negative"),  # said "found index 1"
    ],
    ids=["str", "float", "negative"],
)
def test_a_sparse_size_that_is_not_one_of_extents_is_refused_by_name(size, error, words):
    with pytest.raises((TypeError, RuntimeError)):
        torch.sparse_coo_tensor(SPARSE_INDICES, [1.0, 2.0], size)
    with pytest.raises(error, match=words) as caught:
        rg.sparse_coo_tensor(SPARSE_INDICES, [1.0, 2.0], size)
    assert "sparse_coo_tensor" in str(caught.value)
    with pytest.raises(rg.InvalidArgumentError, match=r"sparse\.FloatTensor: size"):
        rg.sparse.FloatTensor(-2, 3)
    ours, theirs = sparse_pair()  # the good form still builds what torch builds
    np.testing.assert_array_equal(ours.to_dense().numpy(), theirs.to_dense().numpy())


def test_sparse_addmm_names_itself_and_the_shapes_when_mat_does_not_expand():
    ours, theirs = sparse_pair()
    with pytest.raises(RuntimeError):
        torch.sparse.addmm(torch.ones(3, 3), theirs, torch.ones(2, 2))
    with pytest.raises(rg.ShapeError, match=r"sparse\.addmm: mat of shape \[3, 3\]"):
        rg.sparse.addmm(rg.ones(3, 3), ours, rg.ones(2, 2))
    for bias in ([1.0, -1.0], [[1.0, -1.0]]):  # what expands still adds, as torch's
        expected = torch.sparse.addmm(torch.tensor(bias), theirs, torch.ones(2, 2))
        got = rg.sparse.addmm(rg.tensor(bias), ours, rg.ones(2, 2))
        np.testing.assert_allclose(got.numpy(), expected.numpy())


def test_sparse_sum_reads_its_dtype_as_a_dtype_and_sizes_past_int64_are_refused():
    ours, theirs = sparse_pair()
    with pytest.raises(TypeError):
        torch.sparse.sum(theirs, dtype="banana")
    # "to: device: unknown device type 'banana'": the dtype was handed to .to() as it came
    with pytest.raises(rg.DTypeError, match=r"sparse\.sum: unknown dtype 'banana'"):
        rg.sparse.sum(ours, dtype="banana")
    assert rg.sparse.sum(ours, dtype=rg.float64).dtype == rg.float64
    with pytest.raises(TypeError, match="Overflow"):
        torch.sparse_coo_tensor([[0]], [1.0], (2**63,))
    with pytest.raises(rg.DTypeError, match="overflows int64") as caught:
        rg.sparse_coo_tensor([[0]], [1.0], (2**63,))  # accepted
    assert isinstance(caught.value, rg.ShapeError)  # (ArgumentTypeError: a ValueError too)


def test_a_vector_times_a_sparse_matrix_is_torchs_matmul_with_its_gradients():
    # refused ("expects a dense matrix"), where torch's matmul takes the vector
    rows, weights = [[0, 1, 1], [1, 0, 1]], [3.0, 5.0]

    def product(library, vector, values):
        matrix = library.sparse_coo_tensor(rows, values, (2, 2))
        return ((vector @ matrix) * library.tensor(weights, dtype=library.float64)).sum()

    vector = rg.tensor([1.0, -2.0], dtype=rg.float64).requires_grad_()
    values = rg.tensor([1.0, 2.0, 3.0], dtype=rg.float64).requires_grad_()
    grads = product(rg, vector, values).backward()
    theirs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in
              ([1.0, -2.0], [1.0, 2.0, 3.0])]  # fmt: skip
    product(torch, *theirs).backward()
    for ours, reference in zip((vector, values), theirs, strict=True):
        np.testing.assert_allclose(np.asarray(ours.grad(grads)), reference.grad.numpy())
    # finite differences of the same function, in float64
    base = [np.array([1.0, -2.0]), np.array([1.0, 2.0, 3.0])]
    for which, ours in enumerate((vector, values)):
        numeric = []
        for k in range(base[which].size):
            shifted = [b.copy() for b in base]
            shifted[which][k] += 1e-6
            up = product(rg, *(rg.tensor(b, dtype=rg.float64) for b in shifted)).item()
            shifted[which][k] -= 2e-6
            down = product(rg, *(rg.tensor(b, dtype=rg.float64) for b in shifted)).item()
            numeric.append((up - down) / 2e-6)
        np.testing.assert_allclose(np.asarray(ours.grad(grads)), numeric, rtol=1e-6)
    with pytest.raises(rg.ShapeError, match="matmul"):
        rg.ones(3, dtype=rg.float64) @ rg.sparse_coo_tensor(rows, values.detach(), (2, 2))


def test_sparse_coo_tensor_reads_dtype_as_a_dtype_and_requires_grad_as_a_bool():
    with pytest.raises(TypeError):
        torch.sparse_coo_tensor([[0]], [1.0], (2,), dtype="banana")
    # "to: device: unknown device type 'banana'": the dtype went to .to() as it came
    with pytest.raises(rg.DTypeError, match="sparse_coo_tensor: unknown dtype 'banana'"):
        rg.sparse_coo_tensor([[0]], [1.0], (2,), dtype="banana")
    with pytest.raises(TypeError):
        torch.sparse_coo_tensor([[0]], [1.0], (2,), requires_grad="yes")
    with pytest.raises(rg.DTypeError, match="sparse_coo_tensor: requires_grad must be a bool"):
        rg.sparse_coo_tensor([[0]], [1.0], (2,), requires_grad="yes")  # accepted
    assert rg.sparse_coo_tensor([[0]], [1.0], (2,), dtype="float64").dtype == rg.float64


# == Generator: garbage states and seeds out of range ============================================
@pytest.mark.parametrize(
    ("words", "error"),
    [
        ([-1] * 10, rg.InvalidArgumentError),  # a bare OverflowError from NumPy
        ([2**40] * 10, rg.InvalidArgumentError),  # a bare OverflowError
        ([0] * 10, rg.InvalidArgumentError),  # accepted: every later draw was 0.0
        ("float", rg.DTypeError),  # torch: "RNG state must be a torch.ByteTensor"
        ("list", rg.DTypeError),  # torch: TypeError
    ],
    ids=["negative", "over-32-bits", "zeros", "float-tensor", "list"],
)
def test_generator_set_state_refuses_a_damaged_state_and_keeps_its_stream(words, error):
    generator = rg.Generator().manual_seed(5)
    expected = rg.rand(3, generator=rg.Generator().manual_seed(5)).tolist()
    if isinstance(words, list):
        state = rg.tensor(words)
    else:
        state = rg.zeros(10) if words == "float" else [1, 2, 3]
    with pytest.raises(error, match=r"Generator\.set_state"):
        generator.set_state(state)
    assert rg.rand(3, generator=generator).tolist() == expected  # the stream is where it was
    with pytest.raises(error, match="set_rng_state"):
        rg.set_rng_state(rg.tensor(words + [0, 0]) if isinstance(words, list) else state)


def test_a_state_get_state_gave_still_restores_the_stream():
    generator = rg.Generator().manual_seed(11)
    saved = generator.get_state()
    first = rg.rand(4, generator=generator).tolist()
    generator.set_state(saved)
    assert rg.rand(4, generator=generator).tolist() == first
    before = rg.get_rng_state()
    drawn = rg.rand(2).tolist()
    rg.set_rng_state(before)
    assert rg.rand(2).tolist() == drawn


@pytest.mark.parametrize("seed", [2**64, 2**70, -(2**63) - 1])
def test_a_seed_outside_64_bits_is_refused_as_torch_refuses_it(seed):
    # it wrapped: manual_seed(2**64) seeded 0, the stream of manual_seed(0)
    with pytest.raises(ValueError, match="Overflow"):
        torch.Generator().manual_seed(seed)
    with pytest.raises(rg.InvalidArgumentError, match=f"Generator.manual_seed: seed {seed}"):
        rg.Generator().manual_seed(seed)
    state = rg.get_rng_state()
    try:
        with pytest.raises(rg.InvalidArgumentError, match="64-bit"):
            rg.manual_seed(seed)
        assert rg.get_rng_state().tolist() == state.tolist()
    finally:
        rg.set_rng_state(state)


def test_seeds_at_the_ends_of_torchs_range_are_taken_as_torch_takes_them():
    for seed in (2**64 - 1, -(2**63), -1):
        assert rg.Generator().manual_seed(seed).initial_seed() == (
            torch.Generator().manual_seed(seed).initial_seed()
        )


def test_a_generator_takes_the_global_streams_state_and_the_stream_a_generators():
    # torch's states have one form: g.set_state(torch.get_rng_state()) copies the global
    # stream into a generator; here the two lengths (10 and 12 words) were refused
    state = rg.get_rng_state()
    try:
        rg.manual_seed(5)
        generator = rg.Generator()
        generator.set_state(rg.get_rng_state())
        assert rg.rand(3, generator=generator).tolist() == rg.rand(3).tolist()
        assert generator.initial_seed() == 5
        rg.set_rng_state(rg.Generator().manual_seed(9).get_state())
        assert rg.rand(2).tolist() == rg.rand(2, generator=rg.Generator().manual_seed(9)).tolist()
        assert rg.initial_seed() == 5  # the stream's own seed, which a generator's state lacks
    finally:
        rg.set_rng_state(state)


def test_cuda_seeds_and_fork_rng_devices_are_read_as_torch_reads_them_without_a_gpu():
    # ignored without a GPU, where torch reads int(seed) first
    for seed in ("a", None):
        with pytest.raises((ValueError, TypeError)):
            torch.cuda.manual_seed_all(seed)
        with pytest.raises(rg.InvalidArgumentError, match=r"cuda\.manual_seed_all: expected"):
            rg.cuda.manual_seed_all(seed)
    with pytest.raises(TypeError):
        torch.random.fork_rng(devices=5).__enter__()
    with pytest.raises(rg.DTypeError, match="fork_rng: devices must be iterable"):
        rg.random.fork_rng(devices=5).__enter__()
    rg.cuda.manual_seed_all(3)
    with rg.random.fork_rng(devices=[]):
        rg.rand(1)


# == vision transforms: arguments of the wrong type, unsafe casts =================================
def vision_functional():
    from retrograd.vision.transforms import functional

    return functional


@pytest.mark.parametrize(
    "call",
    [
        lambda f, x: f.resize(x, "4"),  # '/' of str and int inside: a bare TypeError
        lambda f, x: f.resize(x, 4.5),  # resized to 4: torchvision "Size should be int or ..."
        lambda f, x: f.pad(x, "1"),  # int("a") inside: a bare ValueError for "a"
        lambda f, x: f.pad(x, 1.5),  # padded by 1: torchvision "inappropriate padding arg"
        lambda f, x: f.adjust_brightness(x, "2"),  # '<' of str and int: a bare TypeError
        lambda f, x: f.adjust_hue(x, [0.1]),
        lambda f, x: f.rotate(x, "90"),  # math.radians("90"): a bare TypeError
    ],
    ids=["resize-str", "resize-float", "pad-str", "pad-float", "brightness", "hue", "rotate"],
)
def test_a_transform_argument_of_the_wrong_type_is_a_type_error_of_the_hierarchy(call):
    F = vision_functional()  # noqa: N806 (torchvision's name)
    image = rg.rand(3, 6, 6)
    before = image.numpy().copy()
    with pytest.raises(rg.DTypeError) as caught:
        call(F, image)
    assert str(caught.value).split(":")[0] in (
        "resize", "pad", "adjust_brightness", "adjust_hue", "rotate"
    )  # fmt: skip
    np.testing.assert_array_equal(image.numpy(), before)
    assert F.resize(image, 3).shape == (3, 3, 3) and F.pad(image, 1).shape == (3, 8, 8)


def test_normalize_names_itself_for_a_mean_or_std_that_is_not_numbers():
    F = vision_functional()  # noqa: N806
    image = rg.rand(3, 4, 4)
    for mean in ("abc", [0.5, "a", 0.5]):  # named "tensor: cannot make a tensor ... <U3"
        with pytest.raises(rg.DTypeError, match="normalize: mean should hold numbers"):
            F.normalize(image, mean, [0.5] * 3)
    expected = (image.numpy() - 0.5) / 0.25
    np.testing.assert_allclose(F.normalize(image, (0.5,) * 3, [0.25] * 3).numpy(), expected)


@pytest.mark.parametrize(
    ("source", "target"), [("float32", "int32"), ("float32", "int64"), ("float64", "int64")]
)
def test_convert_image_dtype_refuses_the_casts_torchvision_calls_unsafe(source, target):
    # 1.0 scaled to the integer's maximum does not fit the float: the result was garbage
    # (int64 values of 8e18 for a float32 image in [0, 1))
    F = vision_functional()  # noqa: N806
    image = rg.rand(1, 2, 2, dtype=source)
    with pytest.raises(rg.InvalidArgumentError, match=f"{source}.*{target}.*safely"):
        F.convert_image_dtype(image, getattr(rg, target))
    with pytest.raises(rg.DTypeError, match="convert_image_dtype: unknown dtype"):
        F.convert_image_dtype(image, "banana")
    as_bytes = F.convert_image_dtype(rg.tensor([[[0.0, 0.5, 1.0]]], dtype=source), rg.uint8)
    assert as_bytes.tolist() == [[[0, 127, 255]]]  # torchvision's x * (255 + 1 - 1e-3)


def test_adjust_contrast_refuses_an_image_of_two_channels_as_torchvision():
    F = vision_functional()  # noqa: N806
    with pytest.raises(rg.ShapeError, match=r"adjust_contrast: .*got 2 \(shape \[2, 4, 4\]\)"):
        F.adjust_contrast(rg.rand(2, 4, 4), 0.5)
    assert F.adjust_contrast(rg.rand(1, 4, 4), 0.5).shape == (1, 4, 4)


def test_transform_classes_refuse_bad_arguments_when_built():
    from retrograd.vision import transforms as T  # noqa: N812

    image = rg.rand(3, 8, 8)
    with pytest.raises(rg.DTypeError, match="Compose: transforms must be iterable"):
        T.Compose(5)  # list(5) inside: a bare TypeError
    with pytest.raises(rg.DTypeError, match="Compose: each of transforms must be callable"):
        T.Compose([T.Normalize([0.5], [0.5]), rg.ones(2)])
    with pytest.raises(rg.DTypeError, match="RandomHorizontalFlip: p should be a number"):
        T.RandomHorizontalFlip(p="0.5")  # the draw's '<' failed at the first image
    with pytest.raises(rg.InvalidArgumentError, match=r"RandomResizedCrop: ratio .* positive"):
        T.RandomResizedCrop(4, ratio=(-1.0, 0.5))  # math.log(-1): "math domain error"
    # torchvision's RandomErasing checks, each with its kind of error
    with pytest.raises(rg.InvalidArgumentError, match="between 0 and 1, got 2"):
        T.RandomErasing(p=2)
    with pytest.raises(rg.InvalidArgumentError, match="should be 'random'"):
        T.RandomErasing(value="banana")  # rg.tensor("banana") failed at the first image
    with pytest.raises(rg.InvalidArgumentError, match="scale should be between 0 and 1"):
        T.RandomErasing(scale=(0.1, 2.0))
    with pytest.raises(rg.ShapeError, match=r"RandomErasing: value holds 2 values .* 3 channels"):
        T.RandomErasing(p=1.0, value=[0.0, 1.0])(image)
    assert T.Compose([T.RandomHorizontalFlip(0.0), T.Resize(4)])(image).shape == (3, 4, 4)
    assert T.RandomErasing(p=1.0, value=[0.0, 0.5, 1.0])(image).shape == (3, 8, 8)


# == vision.io: damaged images, bad modes, bad encoder settings ==================================
def png_and_jpeg(tmp_path):
    pytest.importorskip("PIL.Image")
    from retrograd.vision import io as vision_io

    image = rg.arange(3 * 8 * 8).reshape(3, 8, 8).remainder(251).to(rg.uint8)
    vision_io.write_png(image, tmp_path / "good.png")
    vision_io.write_jpeg(image, tmp_path / "good.jpg")
    return vision_io, image


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # a bare OSError "image file is truncated"
        lambda data: data[:8] + b"x" * 100,  # PNG's magic, then garbage
        lambda data: b"",
    ],
    ids=["truncated", "garbage-after-magic", "empty"],
)
@pytest.mark.parametrize("suffix", ["png", "jpg"])
def test_reading_a_damaged_image_is_a_damaged_file_error_naming_it(tmp_path, damage, suffix):
    from retrograd.errors import DamagedFileError

    vision_io, _ = png_and_jpeg(tmp_path)
    good = tmp_path / f"good.{suffix}"
    damaged = tmp_path / f"damaged.{suffix}"
    damaged.write_bytes(damage(good.read_bytes()))
    with pytest.raises(DamagedFileError, match=re.escape(f"read_image: {damaged}")) as caught:
        vision_io.read_image(damaged)
    assert isinstance(caught.value, OSError)  # what PIL raised: except OSError still catches
    with pytest.raises(DamagedFileError, match="decode_image"):
        vision_io.decode_image(vision_io.read_file(damaged))
    assert vision_io.read_image(good).shape == (3, 8, 8)


def test_read_image_modes_and_write_settings_are_checked_before_any_file_is_touched(tmp_path):
    vision_io, image = png_and_jpeg(tmp_path)
    path = tmp_path / "good.png"
    with pytest.raises(rg.InvalidArgumentError, match="read_image: unknown mode 'banana'"):
        vision_io.read_image(path, mode="banana")  # a bare KeyError
    with pytest.raises(rg.DTypeError, match="read_image: mode"):
        vision_io.read_image(path, mode=7)
    assert vision_io.read_image(path, mode="gray").shape == (1, 8, 8)
    before = path.read_bytes()
    refusals = [
        (lambda: vision_io.write_png(image, path, compression_level=42), rg.InvalidArgumentError),
        (lambda: vision_io.write_jpeg(image, path, quality=0), rg.InvalidArgumentError),
        (lambda: vision_io.write_jpeg(image, path, quality=500), rg.InvalidArgumentError),
        (lambda: vision_io.write_jpeg(image.float(), path), rg.DTypeError),  # PIL's TypeError
        (lambda: vision_io.write_png(image[:, :0], path), rg.ShapeError),  # PIL's ValueError
    ]
    for write, error in refusals:
        with pytest.raises(error, match=r"write_(png|jpeg)"):
            write()
        assert path.read_bytes() == before  # the old file, whole


def test_a_full_disk_while_writing_an_image_leaves_the_old_file_whole(tmp_path, monkeypatch):
    # PIL wrote into the file itself: a full disk left a truncated image in its place
    import errno
    import os

    vision_io, image = png_and_jpeg(tmp_path)
    path = tmp_path / "good.png"
    before = path.read_bytes()

    def no_space(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space") as caught:
        vision_io.write_png(rg.zeros(3, 8, 8, dtype=rg.uint8), path)
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert path.read_bytes() == before  # the old file whole, and no temporary one beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.jpg", "good.png"]
    assert vision_io.read_image(path).tolist() == image.tolist()


# == vision.datasets over damaged files ===========================================================
def test_an_unreadable_image_in_an_image_folder_names_its_file_and_spares_the_others(tmp_path):
    from retrograd.errors import DamagedFileError
    from retrograd.vision import datasets

    png_and_jpeg(tmp_path)
    good = (tmp_path / "good.png").read_bytes()
    for label, data in (("cat", good), ("dog", good[:40])):
        (tmp_path / "root" / label).mkdir(parents=True)
        (tmp_path / "root" / label / "x.png").write_bytes(data)
    folder = datasets.ImageFolder(tmp_path / "root")
    with pytest.raises(DamagedFileError, match=r"dog/x\.png") as caught:
        folder[1]  # PIL's bare OSError "Truncated File Read"
    assert isinstance(caught.value, OSError)  # a skip-the-bad-file loop's except still works
    image, label = folder[0]
    assert image.size == (8, 8) and label == 0
    with pytest.raises(rg.IndexOutOfRangeError, match=r"ImageFolder: index 5 .* 2 items"):
        folder[5]  # a list's bare IndexError


def write_cifar(root, batch: object, meta: object = None) -> None:
    import pickle

    folder = root / "cifar-10-batches-py"
    folder.mkdir(exist_ok=True)
    (folder / "test_batch").write_bytes(pickle.dumps(batch))
    if meta is not None:
        (folder / "batches.meta").write_bytes(
            meta if isinstance(meta, bytes) else pickle.dumps(meta)
        )


def cifar_batch(count: int = 4, **changes: object) -> dict:
    return {"data": np.zeros((count, 3072), np.uint8), "labels": list(range(count)), **changes}


@pytest.mark.parametrize(
    ("batch", "meta", "words"),
    [
        (cifar_batch(labels=[1, 2]), None, "4 images and 2 labels"),  # 4 items, 2 targets
        (cifar_batch(labels=["a"] * 4), None, "each a class number"),  # int("a"): ValueError
        (cifar_batch(labels=[0, 1, 2, None]), None, "each a class number"),  # int(None)
        ({"data": np.zeros((4, 3072), np.uint8)}, None, "no 'labels'"),  # 4 items, 0 targets
        (cifar_batch(data=np.full((4, 3072), 300.0)), None, "float64"),  # cast to uint8: 44
        (cifar_batch(), b"\x80\x04garbage", "meta file"),  # a bare UnpicklingError
        (cifar_batch(), {"names": ["a"]}, "meta file"),  # a bare KeyError 'label_names'
    ],
    ids=[
        "label-count",
        "str-labels",
        "none-label",
        "no-labels",
        "float-data",
        "meta-garbage",
        "meta-key",
    ],
)
def test_a_damaged_cifar_batch_or_meta_file_is_refused_naming_the_file(
    tmp_path, batch, meta, words
):
    from retrograd.errors import DamagedFileError
    from retrograd.vision import datasets

    write_cifar(tmp_path, batch, meta)
    with pytest.raises(DamagedFileError, match=words) as caught:
        datasets.CIFAR10(tmp_path, train=False)
    assert "cifar-10-batches-py" in str(caught.value)


def test_a_whole_cifar_batch_still_loads(tmp_path):
    from retrograd.vision import datasets

    write_cifar(tmp_path, cifar_batch(labels=[3, 1, 4, 1]), {"label_names": list("abcdefghij")})
    data = datasets.CIFAR10(tmp_path, train=False)
    assert len(data) == 4 and data.targets == [3, 1, 4, 1] and data.classes[3] == "d"
    with pytest.raises(rg.IndexOutOfRangeError, match="CIFAR10: index -5"):
        data[-5]


def test_an_idx_file_whose_header_claims_more_than_any_file_holds_is_refused(tmp_path):
    # 2**31 x 2**31 x 2**31 bytes: the int64 product wrapped to 0, which matched the file's
    # empty body, and the reshape failed with a bare ValueError
    from retrograd.errors import DamagedFileError
    from retrograd.vision.idx import read_idx

    path = tmp_path / "images-idx3-ubyte"
    path.write_bytes(bytes([0, 0, 8, 3]) + (2**31).to_bytes(4, "big") * 3)
    with pytest.raises(DamagedFileError, match=r"shape \[2147483648, 2147483648, 2147483648\]"):
        read_idx(path)
    path.write_bytes(bytes([0, 0, 8, 3, 0, 0, 0, 4]))  # a header cut short
    with pytest.raises(DamagedFileError, match="needs 16 bytes, the file has 8"):
        read_idx(path)


def test_fake_data_refuses_a_negative_size_and_a_bad_image_size():
    from retrograd.vision import datasets

    with pytest.raises(rg.InvalidArgumentError, match="FakeData: size"):
        datasets.FakeData(size=-1)  # len() then failed with Python's ValueError
    with pytest.raises(rg.InvalidArgumentError, match="FakeData: image_size"):
        datasets.FakeData(image_size=5)  # len(5): a bare TypeError
    with pytest.raises(rg.InvalidArgumentError, match="FakeData: num_classes"):
        datasets.FakeData(num_classes=0)


# == autocast: flags that are not bools ==========================================================
def torch_autocast_nesting() -> int:
    depth = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    return depth


@pytest.mark.parametrize(
    ("keyword", "value"),
    [("enabled", "False"), ("enabled", 1), ("enabled", np.bool_(True)), ("cache_enabled", "no")],
)
def test_autocast_flags_must_be_bools_as_in_torch(keyword, value):
    # bool("False") is True: autocast was turned on by enabled="False"
    enabled, dtype = torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")
    cache, nesting = torch.is_autocast_cache_enabled(), torch_autocast_nesting()
    try:
        with pytest.raises(TypeError):
            torch.autocast("cpu", **{keyword: value}).__enter__()
    finally:  # torch's __enter__ fails halfway, leaving its autocast on: put it back
        torch.set_autocast_enabled("cpu", enabled)
        torch.set_autocast_dtype("cpu", dtype)
        torch.set_autocast_cache_enabled(cache)
        for _ in range(torch_autocast_nesting() - nesting):
            torch.autocast_decrement_nesting()
    with pytest.raises(rg.DTypeError, match=f"autocast: {keyword} must be a bool"):
        rg.autocast("cpu", **{keyword: value})
    assert not rg.is_autocast_enabled("cpu")
    with rg.autocast("cpu", enabled=False, cache_enabled=None):
        assert not rg.is_autocast_enabled("cpu")


def test_autocast_as_a_decorator_refuses_what_cannot_be_called():
    with pytest.raises(TypeError, match="callable"):
        torch.autocast("cpu")(5)
    with pytest.raises(rg.DTypeError, match="autocast: the function it decorates must be"):
        rg.autocast("cpu")(5)  # accepted: the "function" failed when called


# == profiler: activities, record_function names, row_limit ======================================
def test_profile_refuses_activities_torch_finds_no_valid_one_in():
    from retrograd.profiler import ProfilerActivity, profile

    for activities in (["CPU"], []):
        with pytest.raises(AssertionError, match="No valid profiler activities"):
            torch.profiler.profile(activities=activities).__enter__()
        with pytest.raises(rg.InvalidArgumentError, match="profile: no valid profiler activities"):
            profile(activities=activities)  # recorded anyway
    with profile(activities=[ProfilerActivity.CPU]) as recording:
        rg.ones(2).add(1)
    assert any("add" in row.key for row in recording.key_averages())


def test_record_function_refuses_a_name_that_is_not_a_str():
    from retrograd.profiler import record_function

    with pytest.raises(RuntimeError, match="str"):
        torch.profiler.record_function(5).__enter__()
    with pytest.raises(rg.DTypeError, match="record_function: name must be a str, got 5"):
        record_function(5)


def test_a_profiler_schedule_of_counts_that_are_not_numbers_is_refused_by_name():
    with pytest.raises(TypeError):
        torch.profiler.schedule(wait="1", warmup=0, active=1)
    with pytest.raises(rg.DTypeError, match="schedule: wait must be a number of steps"):
        rg.profiler.schedule(wait="1", warmup=0, active=1)  # Python's bare TypeError
    plan = rg.profiler.schedule(wait=1, warmup=0, active=1)
    assert [plan(step).name for step in range(2)] == ["NONE", "RECORD_AND_SAVE"]


@pytest.mark.parametrize("row_limit", [-1, None, 2, 0])
def test_table_row_limit_counts_rows_as_torchs_does(row_limit):
    # torch shows every row unless the count reaches row_limit: rows[:-1] dropped the last
    from retrograd.profiler import profile

    with profile() as recording:
        rg.ones(2).add(1).mul(2).sum()
    averages = recording.key_averages()
    keys = [row.key for row in averages]
    table = averages.table(row_limit=row_limit).splitlines()
    shown = [line for line in table if any(line.startswith(f"{key} ") for key in keys)]
    assert len(keys) >= 3
    assert len(shown) == (len(keys) if row_limit in (-1, None) else min(len(keys), row_limit))


# == distributed.checkpoint: a file for a folder, a path of another type, damaged metadata =======
def saved_checkpoint(folder):
    import retrograd.distributed.checkpoint as dcp

    dcp.save({"w": rg.arange(4.0), "hyper": (1, 2), "step": 3}, checkpoint_id=folder)
    return dcp


def test_a_checkpoint_id_that_is_a_file_or_not_a_path_is_refused_by_name(tmp_path):
    dcp = saved_checkpoint(tmp_path / "ckpt")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("kept")
    state = {"w": rg.zeros(4)}
    with pytest.raises(rg.InvalidArgumentError, match=r"load: checkpoint_id .* is a file"):
        dcp.load(state, checkpoint_id=a_file)  # a bare NotADirectoryError of ".metadata"
    with pytest.raises(rg.InvalidArgumentError, match=r"load: checkpoint_id .* is a file"):
        dcp.load(state, storage_reader=dcp.FileSystemReader(a_file))
    with pytest.raises(rg.InvalidArgumentError, match=r"save: checkpoint_id .* is a file"):
        dcp.save(state, checkpoint_id=a_file)  # a bare FileExistsError from mkdir
    with pytest.raises(rg.DTypeError, match="save: checkpoint_id must be a folder's path"):
        dcp.save(state, checkpoint_id=5)  # a bare TypeError from Path(5)
    assert a_file.read_text() == "kept" and state["w"].tolist() == [0.0] * 4
    dcp.load(state, checkpoint_id=tmp_path / "ckpt")
    assert state["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_damaged_plain_value_in_the_metadata_is_refused_before_anything_is_loaded(tmp_path):
    import json

    folder = tmp_path / "ckpt"
    dcp = saved_checkpoint(folder)
    metadata = json.loads((folder / ".metadata").read_text())
    metadata["plain"]["hyper"] = {"__tuple__": 5}
    (folder / ".metadata").write_text(json.dumps(metadata))
    state = {"w": rg.zeros(4), "hyper": None, "step": 0}
    with pytest.raises(rg.InvalidArgumentError, match="metadata is damaged"):
        dcp.load(state, checkpoint_id=folder)  # a bare TypeError: 'int' is not iterable
    assert state == {"w": state["w"], "hyper": None, "step": 0} and state["w"].sum().item() == 0


# == einops: bad patterns fail as with torch's tensors, and leave the tensor usable ===============
def test_a_bad_einops_pattern_raises_einops_error_as_for_torch_and_spares_the_graph():
    einops = pytest.importorskip("einops")
    ours = rg.arange(6.0).reshape(2, 3).requires_grad_()
    for pattern, sizes in (("a b -> a c", {}), ("a (b c) -> a b c", {"c": 2}), ("a b -> (a b", {})):
        with pytest.raises(einops.EinopsError):
            einops.rearrange(torch.ones(2, 3), pattern, **sizes)
        with pytest.raises(einops.EinopsError, match="rearrange"):
            einops.rearrange(ours * 2, pattern, **sizes)
    with pytest.raises(RuntimeError):
        einops.einsum(torch.ones(2, 3), torch.ones(4, 5), "a b, b c -> a c")
    with pytest.raises(rg.ShapeError, match="einsum: subscript 'b' has sizes 3 and 4"):
        einops.einsum(ours, rg.ones(4, 5), "a b, b c -> a c")
    grads = einops.rearrange(ours * 2, "a b -> b a").sum().backward()
    assert np.asarray(ours.grad(grads)).tolist() == [[2.0] * 3] * 2


# == rg.load / rg.save: damaged files, refused globals, a full disk ==============================
def test_damaged_and_hostile_files_are_refused_and_a_full_disk_keeps_the_old_file(
    tmp_path, monkeypatch
):
    import errno
    import os
    import pickle

    path = tmp_path / "model.pt"
    rg.save({"w": rg.arange(3.0)}, path)
    data = path.read_bytes()
    damaged = tmp_path / "damaged.pt"
    for broken in (data[: len(data) // 2], b"XXXX" + data[4:], b""):
        damaged.write_bytes(broken)
        with pytest.raises((RuntimeError, EOFError, UnicodeDecodeError)):
            torch.load(damaged)
        with pytest.raises(rg.InvalidArgumentError, match=re.escape(f"load: '{damaged}'")):
            rg.load(damaged)
    hostile = tmp_path / "hostile.pt"
    torch.save({"s": slice(1, 2)}, hostile)  # a global outside weights_only's allow-list
    with pytest.raises(pickle.UnpicklingError):
        torch.load(hostile)
    with pytest.raises(rg.InvalidArgumentError, match=r"builtins\.slice is not allowed"):
        rg.load(hostile)

    def no_space(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        rg.save({"w": rg.ones(1000)}, path)
    monkeypatch.undo()
    assert path.read_bytes() == data and rg.load(path)["w"].tolist() == [0.0, 1.0, 2.0]


def test_pil_paths_of_the_transforms_name_their_op_rather_than_pils_errors():
    pytest.importorskip("PIL.Image")
    F = vision_functional()  # noqa: N806
    picture = F.to_pil_image(rg.zeros(3, 8, 8, dtype=rg.uint8))
    for size in (0, [-1, 4]):  # PIL's bare "height and width must be > 0"
        with pytest.raises(rg.ShapeError, match=r"resize: size must be positive"):
            F.resize(picture, size)
        with pytest.raises(rg.ShapeError, match=r"resize: size must be positive"):
            F.resize(rg.rand(3, 8, 8), size)
    with pytest.raises(rg.DTypeError, match="erase: img should be a Tensor"):
        F.erase(picture, 0, 0, 1, 1, 0)  # 'Image' object has no attribute 'clone'
    with pytest.raises(rg.InvalidArgumentError, match="to_pil_image: mode 'L'"):
        F.to_pil_image(rg.rand(3, 4, 4), mode="L")  # PIL's bare "Invalid mode for data type"
    assert F.resize(picture, 4).size == (4, 4)


def no_space(descriptor):
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def test_save_image_and_the_profilers_exports_keep_the_old_file_on_a_full_disk(
    tmp_path, monkeypatch
):
    # PIL and open() wrote into the file itself: a full disk left it truncated
    import os

    pytest.importorskip("PIL.Image")
    from retrograd.profiler import profile
    from retrograd.vision.utils import save_image

    image, trace = tmp_path / "grid.png", tmp_path / "trace.json"
    save_image(rg.rand(2, 3, 4, 4), image)
    with profile() as recording:
        rg.ones(2).add(1)
    recording.export_chrome_trace(trace)
    before = {path: path.read_bytes() for path in (image, trace)}
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        save_image(rg.rand(2, 3, 8, 8), image)
    with pytest.raises(OSError, match="No space"):
        recording.export_chrome_trace(trace)
    monkeypatch.undo()
    assert {path: path.read_bytes() for path in (image, trace)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid.png", "trace.json"]
    with pytest.raises(rg.InvalidArgumentError, match="save_image: cannot tell an image format"):
        save_image(rg.rand(3, 4, 4), tmp_path / "grid.unknown")  # PIL's bare ValueError
    assert not (tmp_path / "grid.unknown").exists()


def test_dataset_roots_and_transforms_of_the_wrong_type_are_refused_when_built(tmp_path):
    from retrograd.vision import datasets

    for dataset in (datasets.MNIST, datasets.CIFAR10, datasets.ImageFolder):
        # os.scandir(5) read file descriptor 5 as the folder; Path(None) a bare TypeError
        for root in (None, 5):
            with pytest.raises(rg.DTypeError, match=f"{dataset.__name__}: root must be"):
                dataset(root)
    (tmp_path / "cat").mkdir()
    (tmp_path / "cat" / "x.png").write_bytes(b"")
    with pytest.raises(rg.DTypeError, match="ImageFolder: transform must be callable"):
        datasets.ImageFolder(tmp_path, transform=5)  # "'int' object is not callable" per item
    with pytest.raises(rg.DTypeError, match="DatasetFolder: loader must be callable"):
        datasets.DatasetFolder(tmp_path, loader=5, extensions=(".png",))
    assert len(datasets.ImageFolder(tmp_path)) == 1


def test_dcp_state_dict_helpers_refuse_what_is_not_a_model_an_optimizer_or_their_state():
    from retrograd.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_state_dict,
        set_optimizer_state_dict,
    )

    model = rg.nn.Linear(2, 2)
    optimizer = rg.optim.Adam(model.parameters())
    with pytest.raises(rg.DTypeError, match="model must be a Module, got int"):
        get_model_state_dict(5)  # 'int' object has no attribute 'state_dict'
    with pytest.raises(rg.DTypeError, match="optimizers must be optimizers, got int"):
        get_state_dict(model, 5)  # 'int' object has no attribute 'state'
    for damaged in ({"state": 5, "param_groups": 3}, {"state": {}, "param_groups": [5]}):
        with pytest.raises(rg.InvalidArgumentError, match="optim_state_dict is damaged"):
            set_optimizer_state_dict(model, optimizer, damaged)  # a bare TypeError
    model_state, optim_state = get_state_dict(model, optimizer)
    set_optimizer_state_dict(model, optimizer, optim_state)
    assert optimizer.param_groups[0]["lr"] == 0.001 and set(model_state) == {"weight", "bias"}


def test_vision_ops_name_themselves_for_bad_thresholds_sizes_and_output_sizes():
    from retrograd.vision import ops

    boxes = rg.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 2.0, 2.0]])
    rois, image = rg.tensor([[0.0, 0.0, 0.0, 2.0, 2.0]]), rg.rand(1, 1, 4, 4)
    with pytest.raises(rg.DTypeError, match="nms: iou_threshold should be a number"):
        ops.nms(boxes, rg.ones(2), "0.5")  # NumPy's bare UFuncTypeError
    with pytest.raises(rg.InvalidArgumentError, match="roi_align: output_size must be positive"):
        ops.roi_align(image, rois, 0)  # a bare OverflowError ("float infinity")
    with pytest.raises(rg.DTypeError, match="roi_pool: output_size should be an int"):
        ops.roi_pool(image, rois, 2.5)  # 'float' object is not subscriptable
    with pytest.raises(rg.ShapeError, match=r"clip_boxes_to_image: size should be \(height"):
        ops.clip_boxes_to_image(boxes, (1,))  # a bare unpacking ValueError
    assert ops.nms(boxes, rg.tensor([1.0, 2.0]), 0.2).tolist() == [1]
    assert ops.roi_align(image, rois, (2, 3)).shape == (1, 1, 2, 3)
