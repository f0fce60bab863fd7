"""Real ports of programs that import torchvision (the harness: ``tests/real_ports.py``),
written here in the style of PyTorch's MNIST example and its CIFAR-10 tutorial:

- an MNIST classifier: ``from torchvision import datasets, transforms as T``,
  ``T.Compose([T.ToTensor(), T.Normalize((m,), (s,))])``, ``datasets.MNIST(root, train=True,
  download=True, transform=...)`` and ``train=False`` over gzipped and plain IDX files written under
  ``tmp_path``, ``torch.utils.data.DataLoader`` with ``**kwargs``, ``torch.device("cpu")`` and
  ``.to(device)``, a conv ``nn.Sequential`` trunk with ``nn.Dropout``, ``torch.flatten``,
  ``F.log_softmax``, ``Adadelta`` with ``StepLR`` (``lr_scheduler.StepLR``),
  a progress line over ``len(loader.dataset)``/``len(loader)``, and an evaluation by
  ``F.nll_loss(..., reduction="sum").item()`` and ``guess.eq(target.view_as(guess)).sum()
  .item()``;
- a CIFAR-10 classifier: ``torchvision.datasets.CIFAR10(root=..., train=..., download=True,
  transform=...)`` over the python batches written under ``tmp_path``, ``next(iter(loader))``,
  ``torchvision.utils.make_grid`` and the ``grid / 2 + 0.5``, ``np.transpose(..., (1, 2, 0))``
  display arithmetic, a tuple of class names indexed by 0-d label tensors, a conv/pool/linear
  net with ``CrossEntropyLoss`` and ``SGD(momentum=0.9)``, and per-class counts from
  ``torch.max(outputs, 1)`` over ``zip`` of tensors.

torchvision is not installed beside this torch, so the torch run imports a stand-in written
here with torch and NumPy (:func:`torchvision_stand_in`: torchvision's documented arithmetic,
not retrograd's code); the port imports ``retrograd.vision``. The runs use few images, dropout
0 and no shuffling (each library draws its own masks and orders); the port changes the imports
and the gradient lines (``backward()`` returns the gradients, ``step`` takes them).
"""

from __future__ import annotations

import gzip
import math
import pickle
import struct
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from real_ports import assert_records_agree, initializer, port, run_source

pytest.importorskip("PIL")

import retrograd as rg


def torchvision_stand_in() -> SimpleNamespace:
    """torchvision's ToTensor, Normalize, Compose, MNIST, CIFAR10 and make_grid, by hand in torch
    (what their documentation says they compute)."""

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

        def __call__(self, x):
            for t in self.transforms:
                x = t(x)
            return x

    class ToTensor:
        def __call__(self, pic):
            array = np.asarray(pic)
            array = array[:, :, None] if array.ndim == 2 else array
            return torch.from_numpy(array.transpose(2, 0, 1).copy()).float() / 255

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = torch.tensor(mean), torch.tensor(std)

        def __call__(self, x):
            return (x - self.mean[:, None, None]) / self.std[:, None, None]

    def read_idx(path):
        data = path.read_bytes()
        data = gzip.decompress(data) if path.suffix == ".gz" else data
        ndim = data[3]
        shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
        return np.frombuffer(data[4 + 4 * ndim :], dtype=np.uint8).reshape(shape)

    class MNIST(torch.utils.data.Dataset):
        def __init__(self, root, train=True, download=False, transform=None):
            prefix = "train" if train else "t10k"
            raw = Path(root) / "MNIST" / "raw"
            self.data = read_idx(raw / f"{prefix}-images-idx3-ubyte.gz")
            self.targets = read_idx(raw / f"{prefix}-labels-idx1-ubyte").astype(np.int64)
            self.transform = transform

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            return self.transform(self.data[i]), int(self.targets[i])

    class CIFAR10(torch.utils.data.Dataset):
        def __init__(self, root, train=True, download=False, transform=None):
            names = [f"data_batch_{k}" for k in range(1, 6)] if train else ["test_batch"]
            folder = Path(root) / "cifar-10-batches-py"
            entries = [pickle.loads((folder / n).read_bytes(), encoding="latin1") for n in names]
            self.data = (
                np.vstack([e["data"] for e in entries]).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
            )
            self.targets = [t for e in entries for t in e["labels"]]
            self.transform = transform

        def __len__(self):
            return len(self.data)

        def __getitem__(self, i):
            return self.transform(self.data[i]), self.targets[i]

    def make_grid(images, nrow=8, padding=2):
        n, c, h, w = images.shape
        columns, rows = min(nrow, n), math.ceil(n / min(nrow, n))
        grid = torch.zeros(c, rows * (h + padding) + padding, columns * (w + padding) + padding)
        for k in range(n):
            y, x = divmod(k, columns)
            top, left = y * (h + padding) + padding, x * (w + padding) + padding
            grid[:, top : top + h, left : left + w] = images[k]
        return grid

    transforms = SimpleNamespace(Compose=Compose, ToTensor=ToTensor, Normalize=Normalize)
    datasets = SimpleNamespace(MNIST=MNIST, CIFAR10=CIFAR10)
    return SimpleNamespace(
        transforms=transforms, datasets=datasets, utils=SimpleNamespace(make_grid=make_grid)
    )


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    payload = header + array.astype(np.uint8).tobytes()
    if compress:
        path, payload = path.with_name(path.name + ".gz"), gzip.compress(payload)
    path.write_bytes(payload)


MNIST_SOURCE = """
from torch.optim import lr_scheduler
from torchvision import datasets, transforms as T


class DigitNet(nn.Module):
    def __init__(self, drop=0.0):
        super(DigitNet, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, 1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, 1), nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.drop = nn.Dropout(drop)
        self.hidden = nn.Linear(16 * 12 * 12, 32)
        self.out = nn.Linear(32, 10)

    def forward(self, x):
        x = torch.flatten(self.drop(self.features(x)), 1)
        x = self.drop(F.relu(self.hidden(x)))
        return F.log_softmax(self.out(x), dim=1)


def run_epoch(model, device, loader, optimizer, epoch, every):
    model.train()
    for i, (images, digits) in enumerate(loader):
        images, digits = images.to(device), digits.to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(images), digits)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        if i % every == 0:
            done = f"{i * len(images)}/{len(loader.dataset)} ({100.0 * i / len(loader):.0f}%)"
            print(f"epoch {epoch} [{done}] loss {loss.item():.6f}")


def evaluate(model, device, loader):
    model.eval()
    total_loss, hits = 0.0, 0
    with torch.no_grad():
        for images, digits in loader:
            images, digits = images.to(device), digits.to(device)
            log_probs = model(images)
            total_loss += F.nll_loss(log_probs, digits, reduction="sum").item()
            guess = log_probs.argmax(dim=1, keepdim=True)
            hits += guess.eq(digits.view_as(guess)).sum().item()
    record.append([total_loss / len(loader.dataset), hits])


device = torch.device("cpu")
prep = T.Compose([T.ToTensor(), T.Normalize((0.1307,), (0.3081,))])
train_set = datasets.MNIST(data_root, train=True, download=True, transform=prep)
test_set = datasets.MNIST(data_root, train=False, transform=prep)
loader_args = {"batch_size": 8}
train_loader = torch.utils.data.DataLoader(train_set, **loader_args)
test_loader = torch.utils.data.DataLoader(test_set, batch_size=10)

model = DigitNet().to(device)
initialize(model)
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scheduler = lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
for epoch in range(1, 3):
    run_epoch(model, device, train_loader, optimizer, epoch, every=2)
    evaluate(model, device, test_loader)
    scheduler.step()
"""

MNIST_STEPS = [
    (
        "from torchvision import datasets, transforms as T",
        "from retrograd.vision import datasets, transforms as T",
    ),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def test_pytorch_examples_mnist_main_runs_on_retrograd_vision(tmp_path, capsys):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(321)
    labels = rng.integers(0, 10, 40)
    # digits as bright squares at a place of their own, so the net has something to learn
    images = rng.integers(0, 60, (40, 28, 28))
    for k, label in enumerate(labels):
        images[k, 2 + 2 * label : 8 + 2 * label, 4:20] += 190
    write_idx(raw / "train-images-idx3-ubyte", images[:32], compress=True)
    write_idx(raw / "train-labels-idx1-ubyte", labels[:32])
    write_idx(raw / "t10k-images-idx3-ubyte", images[32:], compress=True)
    write_idx(raw / "t10k-labels-idx1-ubyte", labels[32:])
    initialize = initializer()
    records = []
    for lib, source, vision in (
        (torch, MNIST_SOURCE, torchvision_stand_in()),
        (rg, port(MNIST_SOURCE, MNIST_STEPS), None),
    ):
        record = []
        shared = {"record": record, "initialize": initialize, "SimpleNamespace": SimpleNamespace}
        shared["data_root"] = str(tmp_path)
        if vision is not None:  # the torch run's ``from torchvision import ...``
            source = source.replace(
                "from torchvision import datasets, transforms as T",
                "datasets, T = torchvision.datasets, torchvision.transforms",
            )
            shared["torchvision"] = vision
        if lib is rg:
            source = source.replace("from torch.", "from retrograd.")
        with torch.random.fork_rng():  # torch's weights drawn from a fixed seed, torch's state kept
            torch.manual_seed(0)
            run_source(source, lib, **shared)
        records.append(record)
    ours, theirs = records[1], records[0]
    assert len(theirs) == 2 * 4 + 2
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
    assert "epoch 2 [16/32 (50%)]" in capsys.readouterr().out


CIFAR_SOURCE = """
import torchvision
from torchvision import transforms

to_input = transforms.Compose(
    [transforms.ToTensor(), transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))]
)
train_data = torchvision.datasets.CIFAR10(
    root=data_root, train=True, download=True, transform=to_input
)
test_data = torchvision.datasets.CIFAR10(
    root=data_root, train=False, download=True, transform=to_input
)
train_batches = torch.utils.data.DataLoader(train_data, batch_size=4, shuffle=False, num_workers=0)
test_batches = torch.utils.data.DataLoader(test_data, batch_size=4, shuffle=False, num_workers=0)
names = ("plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")

# a peek at the first batch: one grid image, back in [0, 1], in height-width-channel order
first_images, first_labels = next(iter(train_batches))
grid = torchvision.utils.make_grid(first_images) / 2 + 0.5
record.append(np.transpose(grid.numpy(), (1, 2, 0)))
record.append(" ".join(f"{names[first_labels[k]]:6s}" for k in range(len(first_labels))))


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.c1 = nn.Conv2d(3, 6, 5)
        self.c2 = nn.Conv2d(6, 12, 5)
        self.f1 = nn.Linear(12 * 5 * 5, 64)
        self.f2 = nn.Linear(64, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.c1(x)))
        x = self.pool(F.relu(self.c2(x)))
        return self.f2(F.relu(self.f1(torch.flatten(x, 1))))


net = SmallConvNet()
initialize(net)
loss_fn = nn.CrossEntropyLoss()
sgd = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
for epoch in range(2):
    for step, (inputs, targets) in enumerate(train_batches, 0):
        sgd.zero_grad()
        loss = loss_fn(net(inputs), targets)
        loss.backward()
        sgd.step()
        record.append(loss.item())

right = {name: 0 for name in names}
seen = dict.fromkeys(names, 0)
with torch.no_grad():
    for inputs, targets in test_batches:
        _, guesses = torch.max(net(inputs), 1)
        for target, guess in zip(targets, guesses):
            seen[names[target]] += 1  # a 0-d tensor indexing a tuple
            if target == guess:
                right[names[target]] += 1
record.append([right[n] for n in names] + [seen[n] for n in names])
"""

CIFAR_STEPS = [
    (
        "import torchvision\nfrom torchvision import transforms",
        "import retrograd.vision as torchvision\nfrom retrograd.vision import transforms",
    ),
    (
        "        loss.backward()\n        sgd.step()",
        "        grads = loss.backward()\n        sgd.step(grads)",
    ),
]


def test_cifar10_tutorial_runs_on_retrograd_vision(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(3210)
    for name, count in [*((f"data_batch_{k}", 4) for k in range(1, 6)), ("test_batch", 8)]:
        labels = rng.integers(0, 10, count).tolist()
        data = rng.integers(0, 256, (count, 3072), dtype=np.uint8)
        (folder / name).write_bytes(pickle.dumps({"data": data, "labels": labels}))
    initialize = initializer()
    records = []
    for lib, source in ((torch, CIFAR_SOURCE), (rg, port(CIFAR_SOURCE, CIFAR_STEPS))):
        record = []
        shared = {"record": record, "initialize": initialize, "data_root": str(tmp_path)}
        if lib is torch:
            source = source.replace(
                "import torchvision\nfrom torchvision import transforms",
                "transforms = torchvision.transforms",
            )
            shared["torchvision"] = torchvision_stand_in()
        with torch.random.fork_rng():  # torch's weights drawn from a fixed seed, torch's state kept
            torch.manual_seed(0)
            run_source(source, lib, **shared)
        records.append(record)
    ours, theirs = records[1], records[0]
    assert len(theirs) == 2 + 2 * 5 + 1
    assert ours[0].shape == (36, 138, 3)  # four 32 x 32 images in a row, padding 2
    assert_records_agree(ours, theirs, rtol=1e-4, atol=1e-5)
