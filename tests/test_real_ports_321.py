# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs that import torchvision, ported to retrograd (the harness:
``tests/real_ports.py``):

- pytorch/examples ``mnist/main.py``: ``transforms.Compose([transforms.ToTensor(),
  transforms.Normalize((0.1307,), (0.3081,))])``, ``datasets.MNIST('../data', train=True,
  download=True, transform=transform)`` and ``train=False``, ``torch.utils.data.DataLoader``
  with ``**train_kwargs``, the two-conv ``Net``, ``Adadelta`` with ``StepLR``, ``train`` and
  ``test`` as written (``F.nll_loss(..., reduction='sum').item()``, ``pred.eq(target.view_as
  (pred)).sum().item()``), on 28 x 28 IDX files written under ``tmp_path``;
- the CIFAR-10 tutorial (pytorch/tutorials ``beginner_source/blitz/cifar10_tutorial.py``):
  ``torchvision.datasets.CIFAR10(root=..., train=True, download=True, transform=transform)``
  over the python batches written under ``tmp_path``, ``torchvision.utils.make_grid(images)``
  and the tutorial's ``imshow`` arithmetic (``img / 2 + 0.5``, ``np.transpose(npimg, (1, 2,
  0))``), the ``Net`` of ``conv1``/``pool``/``conv2``/``fc1..3``, ``CrossEntropyLoss`` and
  ``SGD(momentum=0.9)``, and the per-class accuracy loop.

torchvision is not installed beside this torch, so the torch run imports a stand-in written
here with torch and NumPy (:func:`torchvision_stand_in`: torchvision's documented arithmetic,
not retrograd's code); the port imports ``retrograd.vision``. Changed for the test: the scale
(few images, one or two epochs), dropout 0 and ``shuffle`` off (each library draws its own
masks and orders), and the gradient lines (``backward()`` returns the gradients, ``step``
takes them).
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
from torchvision import datasets, transforms
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.0)
        self.dropout2 = nn.Dropout(0.0)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        record.append(loss.item())
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    record.append([test_loss, correct])


def main():
    args = SimpleNamespace(batch_size=8, test_batch_size=10, epochs=2, lr=1.0, gamma=0.7, log_interval=2)
    device = torch.device("cpu")
    train_kwargs = {'batch_size': args.batch_size}
    test_kwargs = {'batch_size': args.test_batch_size}

    transform=transforms.Compose([
        transforms.ToTensor(),
        transforms.Normalize((0.1307,), (0.3081,))
        ])
    dataset1 = datasets.MNIST(data_root, train=True, download=True,
                       transform=transform)
    dataset2 = datasets.MNIST(data_root, train=False,
                       transform=transform)
    train_loader = torch.utils.data.DataLoader(dataset1,**train_kwargs)
    test_loader = torch.utils.data.DataLoader(dataset2, **test_kwargs)

    model = Net().to(device)
    initialize(model)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()


main()
"""

MNIST_STEPS = [
    (
        "from torchvision import datasets, transforms",
        "from retrograd.vision import datasets, transforms",
    ),
    ("        optimizer.zero_grad()\n", ""),
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
                "from torchvision import datasets, transforms",
                "datasets, transforms = torchvision.datasets, torchvision.transforms",
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
    assert "Train Epoch: 2 [16/32 (50%)]" in capsys.readouterr().out


CIFAR_SOURCE = """
import torchvision
import torchvision.transforms as transforms

transform = transforms.Compose(
    [transforms.ToTensor(),
     transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])

batch_size = 4

trainset = torchvision.datasets.CIFAR10(root=data_root, train=True,
                                        download=True, transform=transform)
trainloader = torch.utils.data.DataLoader(trainset, batch_size=batch_size,
                                          shuffle=False, num_workers=0)

testset = torchvision.datasets.CIFAR10(root=data_root, train=False,
                                       download=True, transform=transform)
testloader = torch.utils.data.DataLoader(testset, batch_size=batch_size,
                                         shuffle=False, num_workers=0)

classes = ('plane', 'car', 'bird', 'cat',
           'deer', 'dog', 'frog', 'horse', 'ship', 'truck')


def imshow(img):
    img = img / 2 + 0.5     # unnormalize
    npimg = img.numpy()
    record.append(np.transpose(npimg, (1, 2, 0)))


# get some random training images
dataiter = iter(trainloader)
images, labels = next(dataiter)

# show images
imshow(torchvision.utils.make_grid(images))
record.append(' '.join(f'{classes[labels[j]]:5s}' for j in range(batch_size)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1) # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


net = Net()
initialize(net)

criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)

for epoch in range(2):  # loop over the dataset multiple times

    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        # get the inputs; data is a list of [inputs, labels]
        inputs, labels = data

        # zero the parameter gradients
        optimizer.zero_grad()

        # forward + backward + optimize
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()

        # print statistics
        running_loss += loss.item()
        record.append(loss.item())

correct_pred = {classname: 0 for classname in classes}
total_pred = {classname: 0 for classname in classes}

# again no gradients needed
with torch.no_grad():
    for data in testloader:
        images, labels = data
        outputs = net(images)
        _, predictions = torch.max(outputs, 1)
        # collect the correct predictions for each class
        for label, prediction in zip(labels, predictions):
            if label == prediction:
                correct_pred[classes[label]] += 1
            total_pred[classes[label]] += 1

record.append([correct_pred[c] for c in classes] + [total_pred[c] for c in classes])
"""

CIFAR_STEPS = [
    (
        "import torchvision\nimport torchvision.transforms as transforms",
        "import retrograd.vision as torchvision\nimport retrograd.vision.transforms as transforms",
    ),
    ("        optimizer.zero_grad()\n", ""),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
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
                "import torchvision\nimport torchvision.transforms as transforms",
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
