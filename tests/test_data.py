"""Data sets: IDX files, the MNIST loader and its errors, the digits split."""

from __future__ import annotations

import numpy as np
import pytest

from retrograd.app import data

pytestmark = pytest.mark.backend_independent("data files to NumPy arrays, no tensor")


def write_mnist(folder, train=30, test=10, gz=False, size=28, seed=0):
    """Small MNIST-format files: uint8 images [N, size, size] and uint8 labels."""
    rng = np.random.default_rng(seed)
    suffix = ".gz" if gz else ""
    arrays = {
        "train_images": rng.integers(0, 256, (train, size, size), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (test, size, size), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, test, dtype=np.uint8),
    }
    for key, array in arrays.items():
        data.write_idx(folder / (data.MNIST_FILES[key] + suffix), array)
    return arrays


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_round_trip(tmp_path, dtype, gz):
    array = (np.arange(24).reshape(2, 3, 4) - 5).astype(dtype)
    if dtype == np.uint8:
        array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.idx" + (".gz" if gz else ""))
    data.write_idx(path, array)
    loaded = data.read_idx(path)
    assert loaded.dtype == array.dtype and loaded.shape == array.shape
    np.testing.assert_array_equal(loaded, array)


def test_idx_header_is_the_standard_one(tmp_path):
    path = tmp_path / "labels"
    data.write_idx(path, np.array([7, 2], dtype=np.uint8))
    assert path.read_bytes() == bytes([0, 0, 0x08, 1, 0, 0, 0, 2, 7, 2])


def test_idx_errors(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        data.read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(bytes([0, 0, 0x08, 1, 0, 0, 0, 5, 1, 2]))
    with pytest.raises(ValueError, match="shape \\[5\\]"):
        data.read_idx(short)


@pytest.mark.parametrize("gz", [False, True])
def test_load_mnist(tmp_path, gz):
    arrays = write_mnist(tmp_path, gz=gz)
    dataset = data.load_mnist(tmp_path)
    assert dataset.train_images.shape == (30, 1, 28, 28)
    assert dataset.train_images.dtype == np.float32
    assert dataset.test_labels.dtype == np.int64
    np.testing.assert_allclose(
        dataset.train_images[:, 0], arrays["train_images"] / 255.0, rtol=1e-6
    )
    np.testing.assert_array_equal(dataset.test_labels, arrays["test_labels"])
    assert dataset.train_images.min() >= 0.0 and dataset.train_images.max() <= 1.0


def test_load_mnist_names_every_missing_file(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-images-idx3-ubyte").unlink()
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError) as error:
        data.load_mnist(tmp_path)
    message = str(error.value)
    assert "missing" in message and str(tmp_path) in message
    missing = message.split("missing in")[1].split("(expected")[0]
    assert "train-labels-idx1-ubyte" in missing and "t10k-images-idx3-ubyte" in missing
    assert "train-images-idx3-ubyte" not in missing
    for name in data.MNIST_FILES.values():  # the expected names are all spelled out
        assert name in message


def test_load_mnist_rejects_disagreeing_files(tmp_path):
    write_mnist(tmp_path)
    data.write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(3, dtype=np.uint8))
    with pytest.raises(ValueError, match="train files disagree"):
        data.load_mnist(tmp_path)


def test_digits_split_is_fixed_and_stratified():
    pytest.importorskip("sklearn")
    first, second = data.load_digits(), data.load_digits()
    assert first.train_images.shape == (1437, 1, 8, 8) and first.test_images.shape == (360, 1, 8, 8)
    np.testing.assert_array_equal(first.test_labels, second.test_labels)
    assert first.train_images.max() == 1.0 and first.train_images.dtype == np.float32
    counts = np.bincount(first.test_labels, minlength=10)
    assert counts.min() >= 35  # every class held out in proportion
    limited = first.limited(100, 20)
    assert len(limited.train_labels) == 100 and len(limited.test_labels) == 20
