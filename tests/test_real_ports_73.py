# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued from ``tests/test_real_ports_72.py`` (the
harness: ``tests/real_ports.py``), exercising uint8 and int32 tensors as image code does:

- a hand-written image pipeline as torchvision-free training scripts write it: uint8 HWC
  images from NumPy by ``torch.from_numpy(img).permute(2, 0, 1).contiguous()``, random crops
  after ``F.pad(..., mode="reflect")`` of the uint8 image, ``torch.flip`` under a seeded
  ``torch.Generator``, a ``Dataset``/``DataLoader`` with ``default_collate`` giving uint8
  batches converted by ``.float().div(255)`` and normalized per channel by broadcasting, a small
  CNN trained on them, and the test set cached as a uint8 tensor by ``torch.save``/``torch.load``.
"""

from __future__ import annotations

import random

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


IMAGE_PIPELINE_SOURCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import Dataset, DataLoader
from torch.utils.data.dataloader import default_collate

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def to_tensor(img):
    # HWC uint8 (as PIL/cv2 give it) to CHW uint8
    return torch.from_numpy(img).permute(2, 0, 1).contiguous()


class Normalize:
    def __init__(self, mean, std):
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)

    def __call__(self, x):
        return (x - self.mean) / self.std


class RandomCrop:
    def __init__(self, size, padding, generator):
        self.size = size
        self.padding = padding
        self.generator = generator

    def __call__(self, img):
        p = self.padding
        img = F.pad(img.unsqueeze(0), (p, p, p, p), mode="reflect").squeeze(0)
        h, w = img.shape[-2:]
        i = torch.randint(0, h - self.size + 1, size=(1,), generator=self.generator).item()
        j = torch.randint(0, w - self.size + 1, size=(1,), generator=self.generator).item()
        return img[:, i : i + self.size, j : j + self.size]


class RandomHorizontalFlip:
    def __init__(self, p, generator):
        self.p = p
        self.generator = generator

    def __call__(self, img):
        if torch.rand(1, generator=self.generator) < self.p:
            return torch.flip(img, dims=[-1])
        return img


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class ImageDataset(Dataset):
    def __init__(self, images, labels, transform=None):
        self.images = images
        self.labels = labels
        self.transform = transform

    def __len__(self):
        return len(self.images)

    def __getitem__(self, idx):
        img = to_tensor(self.images[idx])
        if self.transform is not None:
            img = self.transform(img)
        return img, int(self.labels[idx])


class Net(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


def train(images, labels, test_images, path, epochs=2):
    g = torch.Generator()
    g.manual_seed(0)
    normalize = Normalize(MEAN, STD)
    transform = Compose([RandomCrop(8, padding=2, generator=g), RandomHorizontalFlip(0.5, generator=g)])
    train_set = ImageDataset(images, labels, transform=transform)
    loader = DataLoader(train_set, batch_size=4, shuffle=False, collate_fn=default_collate)

    model = Net()
    initialize(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    criterion = nn.CrossEntropyLoss()

    for epoch in range(epochs):
        model.train()
        for batch, (x, y) in enumerate(loader):
            assert x.dtype == torch.uint8
            record.append(x.numpy().astype(np.int64))
            x = normalize(x.float().div(255))
            optimizer.zero_grad()
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            optimizer.step()
            record.append(loss.item())
        record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})

    # the test set goes to disk as one uint8 tensor, as a preprocessing script caches it
    cached = torch.stack([to_tensor(img) for img in test_images])
    torch.save({"images": cached, "mean": torch.tensor(MEAN)}, path)
    loaded = torch.load(path)
    assert loaded["images"].dtype == torch.uint8
    record.append(loaded["images"].numpy().astype(np.int64))
    model.eval()
    with torch.no_grad():
        x = normalize(loaded["images"].float() / 255)
        logits = model(x)
        record.append(logits.numpy().copy())
        pred = logits.argmax(dim=1)
        record.append(pred.numpy().astype(np.int64))
        # per-image brightness statistic straight from the bytes
        record.append(loaded["images"].sum(dim=(1, 2, 3)).numpy())
"""

IMAGE_PIPELINE_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.nn.functional as F\n",
    ),
    (
        "            loss.backward()\n            optimizer.step()\n",
        "            grads = loss.backward()\n            optimizer.step(grads)\n",
    ),
]


def test_uint8_image_pipeline_feeds_a_cnn_as_torch(tmp_path):
    rng = np.random.default_rng(7301)
    images = rng.integers(0, 256, (8, 8, 8, 3), dtype=np.uint8)
    labels = rng.integers(0, 3, 8)
    test_images = rng.integers(0, 256, (3, 8, 8, 3), dtype=np.uint8)
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = (
            IMAGE_PIPELINE_SOURCE
            if lib is torch
            else port(IMAGE_PIPELINE_SOURCE, IMAGE_PIPELINE_STEPS).replace(
                "from torch.", "from retrograd."
            )
        )
        names = run_source(text, lib, record=record, initialize=initialize)
        with SharedDraws(lib, 7301):
            names["train"](images, labels, test_images, str(tmp_path / f"{lib.__name__}.pt"))
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_resizes_uint8_images_and_masks_by_nearest_as_torch(mode):
    # segmentation scripts resize uint8 label masks (and images) with mode="nearest"
    rng = np.random.default_rng(7302)
    cases = [
        ((1, 3, 5, 7), {"size": (8, 4)}),
        ((2, 1, 3, 4), {"scale_factor": 2}),
        ((1, 2, 5), {"scale_factor": 1.5}),
        ((1, 1, 2, 3, 3), {"size": (3, 5, 2)}),
    ]
    for shape, how in cases:
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        expected = torch.nn.functional.interpolate(torch.from_numpy(image), mode=mode, **how)
        got = rg.nn.functional.interpolate(rg.from_numpy(image), mode=mode, **how)
        assert got.dtype == rg.uint8
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    # torch has no uint8 kernel for the linear modes of a 3-d input, nor int64 ones at all
    with pytest.raises(rg.errors.DTypeError, match="interpolate"):
        rg.nn.functional.interpolate(rg.zeros(1, 1, 3, dtype=rg.uint8), size=5, mode="linear")
    with pytest.raises(rg.errors.DTypeError, match="interpolate"):
        rg.nn.functional.interpolate(rg.zeros(1, 1, 3, dtype=rg.int64), size=5, mode=mode)


def test_a_size_joined_with_a_tuple_is_a_size_the_legacy_constructors_read_as_a_shape():
    # pixel-cnn-pp's ``to_one_hot``: ``torch.FloatTensor(tensor.size() + (n,)).zero_()``
    for lib in (torch, rg):
        size = lib.zeros(2, 3).size()
        assert isinstance(size + (4,), lib.Size)
        assert isinstance((1,) + size, lib.Size)
        assert isinstance(size * 2, lib.Size) and isinstance(size[1:], lib.Size)
        assert tuple(size + (lib.tensor(4), True)) == (2, 3, 4, 1)
        assert lib.FloatTensor(size + (4,)).zero_().shape == (2, 3, 4)
        assert lib.FloatTensor(size[:1]).shape == (2,)
        with pytest.raises(TypeError, match="Size"):
            size + (2.5,)
