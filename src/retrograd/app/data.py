"""Data sets for ``retrograd train``: scikit-learn's 8x8 digits and MNIST from IDX files.

Both come back as a :class:`Dataset` of NumPy arrays: images ``float32 [N, 1, H, W]`` scaled to
[0, 1] and labels ``int64 [N]``, split into train and test.

>>> import numpy as np, tempfile, os
>>> path = os.path.join(tempfile.mkdtemp(), "labels-idx1-ubyte")
>>> write_idx(path, np.array([3, 1, 4], dtype=np.uint8))
>>> read_idx(path).tolist()
[3, 1, 4]
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import DamagedFileError, InvalidArgumentError
from ..vision.idx import read_idx, write_idx

__all__ = [
    "MNIST_FILES",
    "Dataset",
    "load_dataset",
    "load_digits",
    "load_mnist",
    "read_idx",
    "write_idx",
]


@dataclass(frozen=True)
class Dataset:
    """Train and test images ``[N, 1, H, W]`` (float32 in [0, 1]) and labels (int64)."""

    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    classes: int = 10

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_images.shape[1:])

    def limited(self, train: int | None = None, test: int | None = None) -> Dataset:
        """The first ``train`` training and ``test`` test samples (for quick runs)."""
        return Dataset(
            self.name,
            self.train_images[:train],
            self.train_labels[:train],
            self.test_images[:test],
            self.test_labels[:test],
            self.classes,
        )


def load_digits(split_seed: int = 0, test_fraction: float = 0.2) -> Dataset:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images, no download), split into
    train (80%) and test (20%) by a stratified shuffle with ``split_seed``.

    ``retrograd train`` always uses split 0, whatever its ``--seed``: the training seed changes
    the initialization and batch order, never which images are held out.
    """
    try:
        from sklearn.datasets import load_digits as sklearn_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise ImportError(
            'the digits data set comes with scikit-learn: pip install "retrograd[examples]" '
            "(or pip install scikit-learn)"
        ) from None
    bunch = sklearn_digits()
    images = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=test_fraction, random_state=split_seed, stratify=labels
    )
    return Dataset("digits", train_x, train_y, test_x, test_y)


#: The four files of the standard MNIST distribution (each may also be gzipped, ``.gz``).
MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
#: MNIST's labels are the digits 0 to 9
MNIST_CLASSES = 10


def load_mnist(data_dir: str | os.PathLike) -> Dataset:
    """MNIST from the standard IDX files in ``data_dir`` (names in :data:`MNIST_FILES`,
    plain or ``.gz``; ``train-images.idx3-ubyte``-style names with a dot are accepted too).

    Raises ``FileNotFoundError`` naming every missing file and the names expected.
    """
    directory = Path(data_dir)
    found: dict[str, Path] = {}
    missing = []
    for key, name in MNIST_FILES.items():
        dotted = name.replace("-idx", ".idx")
        candidates = [
            directory / f"{stem}{suffix}" for stem in (name, dotted) for suffix in ("", ".gz")
        ]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            missing.append(name)
        else:
            found[key] = path
    if missing:
        expected = ", ".join(MNIST_FILES.values())
        raise FileNotFoundError(
            f"MNIST files missing in {directory}: {', '.join(missing)} "
            f"(expected the four IDX files {expected}, each optionally gzipped as .gz; "
            "download them from the MNIST distribution and pass their folder as --data-dir)"
        )
    arrays = {key: read_idx(path) for key, path in found.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DamagedFileError(
                f"MNIST {split} files disagree: {found[f'{split}_images']} holds images "
                f"{list(images.shape)} (expected [N, rows, cols]), "
                f"{found[f'{split}_labels']} labels {list(labels.shape)} (expected [N]): a "
                "damaged or misnamed file"
            )
        # found here, naming the file, rather than by the model (a linear layer of 0 inputs)
        # or the loss (a target out of range) once training runs
        if 0 in images.shape:
            raise InvalidArgumentError(
                f"{found[f'{split}_images']}: holds images of shape {list(images.shape)}: no "
                "pixels or no images (damaged, or not MNIST)"
            )
        if labels.size and not (labels.min() >= 0 and labels.max() < MNIST_CLASSES):
            bad = labels[(labels < 0) | (labels >= MNIST_CLASSES)][0]
            raise InvalidArgumentError(
                f"{found[f'{split}_labels']}: holds the label {bad}, MNIST's are 0 to "
                f"{MNIST_CLASSES - 1} (damaged, or not MNIST)"
            )

    def scaled(images: np.ndarray) -> np.ndarray:
        return (images.astype(np.float32) / 255.0)[:, None, :, :]

    return Dataset(
        "mnist",
        scaled(arrays["train_images"]),
        arrays["train_labels"].astype(np.int64),
        scaled(arrays["test_images"]),
        arrays["test_labels"].astype(np.int64),
    )


def load_dataset(name: str, data_dir: str | os.PathLike | None = None) -> Dataset:
    """``"digits"`` or ``"mnist"`` (the latter from ``data_dir``)."""
    if name == "digits":
        return load_digits()
    if name == "mnist":
        if data_dir is None:
            raise FileNotFoundError(
                "the mnist data set needs --data-dir, the folder holding "
                + ", ".join(MNIST_FILES.values())
            )
        return load_mnist(data_dir)
    raise InvalidArgumentError(f"unknown data set {name!r}; expected 'digits' or 'mnist'")
