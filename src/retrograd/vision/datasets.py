"""torchvision.datasets over retrograd: MNIST, FashionMNIST, KMNIST, CIFAR10/100 read from the
standard files under ``root`` (nothing is downloaded), FakeData, ImageFolder/DatasetFolder."""

from __future__ import annotations

import numbers
import os
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import (
    DamagedFileError,
    DTypeError,
    IndexOutOfRangeError,
    InvalidArgumentError,
    check_callable,
    check_count,
)
from ..utils.data import Dataset
from . import _lib as rg
from .idx import read_idx

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class _ArraysOnly(pickle.Unpickler):
    """CIFAR's python batches hold dicts, lists, strings and NumPy arrays (and NumPy scalars,
    in a batch a script wrote from a dataset's labels): every other global a file names is
    refused, so that a damaged or hostile file runs nothing (torchvision's ``pickle.load``
    would run whatever it names). ``_codecs.encode`` is how Python 3 writes bytes (an array's
    buffer) at protocol 2, the protocol of the original batches: it only encodes a string."""

    _ALLOWED = frozenset({
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    })  # fmt: skip

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a CIFAR batch")


def _item_index(name: str, index: Any, length: int) -> int:
    """``index`` (negative ones from the end) as a position among ``length`` items, or the
    hierarchy's ``IndexError`` naming the dataset (a list's or NumPy's bare one before)."""
    if isinstance(index, bool) or not hasattr(type(index), "__index__"):
        raise DTypeError(f"{name}: index should be an int, got {index!r}")
    position = int(index) + length if int(index) < 0 else int(index)
    if not 0 <= position < length:
        raise IndexOutOfRangeError(f"{name}: index {index} out of range for {length} items")
    return position


def _unpickled(path: Path, dataset: str) -> Any:
    """The CIFAR pickle at ``path`` (arrays, lists, dicts and strings only), or the
    :class:`DamagedFileError` naming it."""
    try:
        with open(path, "rb") as handle:
            return _ArraysOnly(handle, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError,
            ImportError, IndexError, KeyError, MemoryError) as error:  # fmt: skip
        raise DamagedFileError(
            f"{path}: not a {dataset} file (damaged or truncated: {type(error).__name__}: {error})"
        ) from None


def _folder_root(dataset: str, root: Any) -> None:
    """Refuse a ``root`` that is not a folder's path (``None``, an int: ``os.scandir(5)``
    read file descriptor 5 as the folder) with a ``DTypeError`` naming the dataset."""
    if not isinstance(root, str | os.PathLike):
        raise DTypeError(f"{dataset}: root must be a folder's path (a str or a Path), got {root!r}")


def _no_download(name: str, folder: Path, files: list[str]) -> FileNotFoundError:
    return FileNotFoundError(
        f"{name}: dataset not found in {folder} (expected {', '.join(files)}); retrograd "
        "downloads nothing (download=True cannot fetch it): place the files there yourself"
    )


class VisionDataset(Dataset):
    """root, transform, target_transform and transforms, as torchvision's base class."""

    def __init__(
        self,
        root: Any = None,
        transforms: Callable | None = None,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
    ) -> None:
        for name, function in (
            ("transforms", transforms),
            ("transform", transform),
            ("target_transform", target_transform),
        ):
            if function is not None:  # here, not as "'int' object is not callable" per item
                check_callable(type(self).__name__, function, name)
        self.root = os.path.expanduser(root) if isinstance(root, (str, os.PathLike)) else root
        if transforms is not None and (transform is not None or target_transform is not None):
            raise InvalidArgumentError(
                "Only transforms or transform/target_transform can be passed as argument"
            )
        self.transform, self.target_transform = transform, target_transform
        self.transforms = transforms

    def _apply(self, img: Any, target: Any) -> tuple[Any, Any]:
        if self.transforms is not None:
            return self.transforms(img, target)
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


class MNIST(VisionDataset):
    """MNIST from ``root/MNIST/raw`` (or ``root/MNIST``, or ``root``): the four IDX files, plain
    or .gz. Items are (PIL image mode L, int label), as torchvision's; ``data`` (uint8
    [N, H, W]) and ``targets`` (int64 [N]) are tensors."""

    classes: ClassVar[list[str]] = [
        f"{d} - {w}"
        for d, w in enumerate(
            ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
        )
    ]
    _files: ClassVar[dict[bool, tuple[str, str]]] = {
        True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
        False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
    }

    def __init__(
        self,
        root: Any,
        train: bool = True,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        download: bool = False,
    ) -> None:
        _folder_root(type(self).__name__, root)
        super().__init__(root, transform=transform, target_transform=target_transform)
        self.train = train
        names = self._files[bool(train)]
        folders = [
            Path(root) / type(self).__name__ / "raw",
            Path(root) / type(self).__name__,
            Path(root),
        ]
        for folder in folders:
            paths = [self._find(folder, name) for name in names]
            if all(p is not None for p in paths):
                break
        else:
            raise _no_download(type(self).__name__, folders[0], list(names))
        images = read_idx(paths[0])
        labels = read_idx(paths[1]).astype(np.int64)
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            # a file of the other kind under an image or label file's name, or one of another
            # split: the files, not the arguments, are at fault
            raise DamagedFileError(
                f"{type(self).__name__}: {paths[0]} holds images {list(images.shape)} and "
                f"{paths[1]} labels {list(labels.shape)}, which disagree (expected [N, H, W] "
                "and [N]): a damaged or misnamed file"
            )
        # tensors, as torchvision's (scripts take ``data.float() / 255``, ``targets == k``)
        self.data = rg.from_numpy(np.ascontiguousarray(images, dtype=np.uint8))
        self.targets = rg.from_numpy(labels)

    @staticmethod
    def _find(folder: Path, name: str) -> Path | None:
        for stem in (name, name.replace("-idx", ".idx")):
            for suffix in ("", ".gz"):
                if (folder / f"{stem}{suffix}").is_file():
                    return folder / f"{stem}{suffix}"
        return None

    @property
    def class_to_idx(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from PIL import Image

        # read from ``data`` and ``targets`` each time: scripts replace them (a subset)
        img = Image.fromarray(np.ascontiguousarray(self.data[index].numpy()), mode="L")
        return self._apply(img, int(self.targets[index]))


class FashionMNIST(MNIST):
    classes: ClassVar[list[str]] = [
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ]


class KMNIST(MNIST):
    classes: ClassVar[list[str]] = ["o", "ki", "su", "tsu", "na", "ha", "ma", "ya", "re", "wo"]


class CIFAR10(VisionDataset):
    """CIFAR-10 from ``root/cifar-10-batches-py`` (the python pickles). Items are (PIL RGB
    image, int label)."""

    base_folder = "cifar-10-batches-py"
    train_list: ClassVar[list[str]] = [f"data_batch_{k}" for k in range(1, 6)]
    test_list: ClassVar[list[str]] = ["test_batch"]
    meta_file, label_key = "batches.meta", "labels"
    meta_key = "label_names"

    def __init__(
        self,
        root: Any,
        train: bool = True,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        download: bool = False,
    ) -> None:
        _folder_root(type(self).__name__, root)
        super().__init__(root, transform=transform, target_transform=target_transform)
        self.train = train
        folder = Path(root) / self.base_folder
        names = self.train_list if train else self.test_list
        if not all((folder / name).is_file() for name in names):
            raise _no_download(type(self).__name__, folder, names)
        data, targets = [], []
        for name in names:
            images, labels = self._batch(folder / name)
            data.append(images)
            targets.extend(labels)
        self.data = np.vstack(data).transpose(0, 2, 3, 1)
        self.targets = targets
        meta = folder / self.meta_file
        if meta.is_file():
            entry = _unpickled(meta, f"{type(self).__name__} meta")
            classes = entry.get(self.meta_key) if isinstance(entry, dict) else None
            if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
                raise DamagedFileError(
                    f"{meta}: not a {type(self).__name__} meta file (damaged: no list of "
                    f"class names under {self.meta_key!r})"
                )
            self.classes = classes
        else:
            self.classes = []
        self.class_to_idx = {name: i for i, name in enumerate(self.classes)}

    def _batch(self, path: Path) -> tuple[np.ndarray, list[int]]:
        """A batch's images [N, 3, 32, 32] and its N labels, each checked: a damaged batch
        (images of another size, labels missing, of another count or not class numbers) is
        the :class:`DamagedFileError` naming it, not a dataset whose items disagree."""
        dataset = type(self).__name__
        entry = _unpickled(path, f"{dataset} batch")
        if not isinstance(entry, dict) or "data" not in entry:
            raise DamagedFileError(f"{path}: not a {dataset} batch (damaged: no 'data' entry)")
        raw = np.asarray(entry["data"])
        if raw.dtype != np.uint8 or raw.size % 3072:
            raise DamagedFileError(
                f"{path}: not a {dataset} batch (damaged: 'data' is {raw.dtype} of shape "
                f"{list(raw.shape)}, not uint8 rows of 3072 bytes)"
            )
        images = raw.reshape(-1, 3, 32, 32)
        labels = entry.get(self.label_key)
        if labels is None or isinstance(labels, str | bytes | dict):
            raise DamagedFileError(f"{path}: not a {dataset} batch (no {self.label_key!r} list)")
        labels = list(labels)
        if len(labels) != len(images) or not all(
            isinstance(label, int | np.integer) and not isinstance(label, bool) and label >= 0
            for label in labels
        ):
            raise DamagedFileError(
                f"{path}: not a {dataset} batch (damaged: {len(images)} images and "
                f"{len(labels)} labels, which must be as many, each a class number)"
            )
        return images, [int(label) for label in labels]

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from PIL import Image

        index = _item_index(type(self).__name__, index, len(self.data))
        img = Image.fromarray(self.data[index])
        return self._apply(img, self.targets[index])


class CIFAR100(CIFAR10):
    base_folder = "cifar-100-python"
    train_list: ClassVar[list[str]] = ["train"]
    test_list: ClassVar[list[str]] = ["test"]
    meta_file, label_key, meta_key = "meta", "fine_labels", "fine_label_names"


class FakeData(VisionDataset):
    """``size`` random images (PIL, from a generator seeded by ``random_offset + index``, so an
    item is the same each time) of ``image_size`` (C, H, W) with random labels (0-d int64
    tensors)."""

    def __init__(
        self,
        size: int = 1000,
        image_size: tuple[int, int, int] = (3, 224, 224),
        num_classes: int = 10,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        random_offset: int = 0,
    ) -> None:
        super().__init__(None, transform=transform, target_transform=target_transform)
        check_count("FakeData", num_classes, "num_classes")
        if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 0:
            raise InvalidArgumentError(f"FakeData: size should be a non-negative int, got {size!r}")
        if (
            not isinstance(image_size, Sequence)
            or len(image_size) != 3
            or image_size[0] not in (1, 3, 4)
        ):
            raise InvalidArgumentError(
                f"FakeData: image_size is (C, H, W) with C in 1, 3, 4, got {image_size}"
            )
        self.size, self.num_classes = int(size), int(num_classes)
        self.image_size, self.random_offset = tuple(image_size), int(random_offset)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        from .transforms import functional as F  # noqa: N812 (torchvision's name)

        index = _item_index("FakeData", index, self.size)
        generator = rg.Generator().manual_seed(index + self.random_offset)
        img = rg.randn(*self.image_size, generator=generator)
        # a 0-d tensor, as torchvision's ``randint(...)[0]``
        target = rg.randint(0, self.num_classes, size=(1,), generator=generator)[0]
        img = F.to_pil_image(img)
        return self._apply(img, target)


def has_file_allowed_extension(filename: str, extensions: Any) -> bool:
    return filename.lower().endswith(
        extensions if isinstance(extensions, str) else tuple(extensions)
    )


def is_image_file(filename: str) -> bool:
    return has_file_allowed_extension(filename, IMG_EXTENSIONS)


def find_classes(directory: Any) -> tuple[list[str], dict[str, int]]:
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    if not classes:
        raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
    return classes, {name: i for i, name in enumerate(classes)}


def make_dataset(
    directory: Any,
    class_to_idx: dict[str, int],
    extensions: Any = None,
    is_valid_file: Callable | None = None,
    allow_empty: bool = False,
):
    directory = os.path.expanduser(directory)
    if (extensions is None) == (is_valid_file is None):
        raise InvalidArgumentError(
            "Both extensions and is_valid_file cannot be None or not None at the same time"
        )
    check = is_valid_file or (lambda name: has_file_allowed_extension(name, extensions))
    instances = []
    for target_class in sorted(class_to_idx):
        folder = os.path.join(directory, target_class)
        if not os.path.isdir(folder):
            continue
        for root, _, names in sorted(os.walk(folder, followlinks=True)):
            for name in sorted(names):
                path = os.path.join(root, name)
                if check(path):
                    instances.append((path, class_to_idx[target_class]))
    if not instances and not allow_empty:
        raise FileNotFoundError(
            f"Found no valid file for the classes {sorted(class_to_idx)} in {directory}. "
            f"Supported extensions are: {extensions}"
        )
    return instances


def pil_loader(path: str) -> Any:
    """The image at ``path`` as a PIL RGB image; a damaged or truncated one is the
    :class:`DamagedFileError` naming it (an ``OSError``, as PIL's own error was)."""
    from PIL import Image

    from .io import _failure_text, decode_failures

    with open(path, "rb") as handle:
        try:
            return Image.open(handle).convert("RGB")
        except decode_failures() as error:
            raise DamagedFileError(
                f"pil_loader: {path} is not a decodable image: damaged, truncated or of a "
                f"format PIL does not read ({_failure_text(error)})"
            ) from None


default_loader = pil_loader


class DatasetFolder(VisionDataset):
    """root/class_x/xxx.ext -> (loader(path), class index), classes sorted by name."""

    def __init__(
        self,
        root: Any,
        loader: Callable,
        extensions: Any = None,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        is_valid_file: Callable | None = None,
        allow_empty: bool = False,
    ) -> None:
        _folder_root(type(self).__name__, root)
        check_callable(type(self).__name__, loader, "loader")
        super().__init__(root, transform=transform, target_transform=target_transform)
        classes, class_to_idx = self.find_classes(self.root)
        samples = make_dataset(self.root, class_to_idx, extensions, is_valid_file, allow_empty)
        self.loader, self.extensions = loader, extensions
        self.classes, self.class_to_idx = classes, class_to_idx
        self.samples = samples
        self.targets = [s[1] for s in samples]

    def find_classes(self, directory: Any) -> tuple[list[str], dict[str, int]]:
        return find_classes(directory)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        path, target = self.samples[_item_index(type(self).__name__, index, len(self.samples))]
        return self._apply(self.loader(path), target)


class ImageFolder(DatasetFolder):
    def __init__(
        self,
        root: Any,
        transform: Callable | None = None,
        target_transform: Callable | None = None,
        loader: Callable = default_loader,
        is_valid_file: Callable | None = None,
        allow_empty: bool = False,
    ) -> None:
        super().__init__(
            root,
            loader,
            IMG_EXTENSIONS if is_valid_file is None else None,
            transform=transform,
            target_transform=target_transform,
            is_valid_file=is_valid_file,
            allow_empty=allow_empty,
        )
        self.imgs = self.samples
