"""Real ports built on torchvision's API (the harness: ``tests/real_ports.py``): a program
written here in the style of torchvision's classification reference scripts (mixup/cutmix
batch transforms, the training loop, the top-k accuracy helper).

- batch transforms as ``torch.nn.Module`` subclasses sharing their checks (``ndim``,
  ``is_floating_point()``, ``dtype != torch.int64``: ``ValueError``/``TypeError`` with our
  messages), ``clone()`` unless in place, one-hot targets by ``F.one_hot(...).to(
  dtype=batch.dtype)``, partners by ``batch.roll(1, 0)``, the ratio drawn by
  ``torch._sample_dirichlet(torch.tensor([a, a]))``, in-place ``mul_(...).add_(...)`` chains;
  the cut box from torchvision's ``F.get_dimensions``, ``torch.randint(W, (1,))`` and
  ``int(torch.clamp(centre - half, min=0))`` of one-element tensors, pasted by
  ``batch[:, :, y0:y1, x0:x1] = partner[...]``;
- ``torchvision.transforms.RandomChoice`` of the two inside a ``collate_fn`` over
  ``default_collate``, a ``DataLoader`` with a ``SequentialSampler``, ``num_workers=0`` and
  ``pin_memory=True`` over a ``TensorDataset`` given a ``classes`` list;
  ``nn.CrossEntropyLoss(label_smoothing=...)`` of the soft targets, SGD with momentum and
  weight decay, a small conv/BatchNorm model;
- the accuracy helper under ``torch.inference_mode()``: ``target.max(dim=1)[1]`` of soft
  targets, ``output.topk(k, 1, True, True)``, ``.t()``, ``eq(target[None])`` and
  ``hits[:k].flatten().sum(dtype=torch.float32)``.

torchvision is not installed beside this torch: the torch run's ``torchvision`` is a stand-in
written here (``get_dimensions`` and ``RandomChoice``). ``torch.rand``/``randint``/
``_sample_dirichlet`` draw from one NumPy stream in both runs (:class:`SharedDraws`), Python's
``random`` (``RandomChoice``) is seeded alike.
"""

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tests.real_ports import (
    SharedDraws,
    assert_records_agree,
    initializer,
    port,
    ported_imports,
    run_source,
)

import retrograd as rg

AUGMENT_SOURCE = '''
import math
from typing import Tuple

import torch
from torch import Tensor
import torchvision.transforms.functional as F


class PairMixer(torch.nn.Module):
    """Blends each image of a batch with its neighbour (the batch rolled by one)."""

    def __init__(self, classes: int, p: float = 0.5, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        if classes < 1 or alpha <= 0:
            raise ValueError(f"need classes >= 1 and alpha > 0, got {classes} and {alpha}")
        self.classes, self.p, self.alpha, self.inplace = classes, p, alpha, inplace

    def forward(self, images: Tensor, labels: Tensor) -> Tuple[Tensor, Tensor]:
        if images.ndim != 4 or labels.ndim != 1:
            shapes = f"{images.ndim}-d and {labels.ndim}-d"
            raise ValueError(f"expected images (B, C, H, W) and labels (B,), got {shapes}")
        if not images.is_floating_point() or labels.dtype != torch.int64:
            kinds = f"{images.dtype} and {labels.dtype}"
            raise TypeError(f"expected float images and int64 labels, got {kinds}")
        if not self.inplace:
            images, labels = images.clone(), labels.clone()
        labels = torch.nn.functional.one_hot(labels, num_classes=self.classes)
        labels = labels.to(dtype=images.dtype)
        skip = torch.rand(1).item() >= self.p
        if skip:
            return images, labels
        share = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        share = self.mix(images, images.roll(1, 0), share)
        partner = labels.roll(1, 0).mul_(1.0 - share)
        labels.mul_(share).add_(partner)
        return images, labels


class Mixup(PairMixer):
    def mix(self, batch, partner, share):
        batch.mul_(share).add_(partner.mul_(1.0 - share))
        return share


class Cutmix(PairMixer):
    def mix(self, batch, partner, share):
        _, height, width = F.get_dimensions(batch)
        cx, cy = torch.randint(width, (1,)), torch.randint(height, (1,))
        side = 0.5 * math.sqrt(1.0 - share)  # the box covers about 1 - share of the image
        half_w, half_h = int(side * width), int(side * height)
        x0, x1 = int(torch.clamp(cx - half_w, min=0)), int(torch.clamp(cx + half_w, max=width))
        y0, y1 = int(torch.clamp(cy - half_h, min=0)), int(torch.clamp(cy + half_h, max=height))
        batch[:, :, y0:y1, x0:x1] = partner[:, :, y0:y1, x0:x1]
        return 1.0 - (x1 - x0) * (y1 - y0) / (width * height)


def topk_accuracy(logits, target, ks=(1,)):
    with torch.inference_mode():
        if target.ndim == 2:  # mixed soft labels: score against the larger share
            target = target.max(dim=1)[1]
        _, best = logits.topk(max(ks), 1, True, True)
        hits = best.t().eq(target[None])
        scale = 100.0 / target.size(0)
        return [hits[:k].flatten().sum(dtype=torch.float32) * scale for k in ks]
'''

TRAIN_SOURCE = """
import torchvision
from torch.utils.data.dataloader import default_collate as stack_samples

data = make_dataset(torch)
opts = SimpleNamespace(mixup=0.2, cutmix=1.0, smoothing=0.1, batch=4, lr=0.1)
n_classes = len(data.classes)
pick = torchvision.transforms.RandomChoice(
    [Mixup(n_classes, p=1.0, alpha=opts.mixup), Cutmix(n_classes, p=1.0, alpha=opts.cutmix)]
)


def mix_batch(samples):
    return pick(*stack_samples(samples))


loader = torch.utils.data.DataLoader(
    data, batch_size=opts.batch, sampler=torch.utils.data.SequentialSampler(data),
    num_workers=0, pin_memory=True, collate_fn=mix_batch,
)
net = make_model(torch, n_classes)
initialize(net)
criterion = nn.CrossEntropyLoss(label_smoothing=opts.smoothing)
sgd = torch.optim.SGD(net.parameters(), lr=opts.lr, momentum=0.9, weight_decay=1e-4)
net.train()
for i, (images, soft) in enumerate(loader):
    if i == 0:
        record.append({"images": images.numpy(), "soft": soft.numpy()})
    logits = net(images)
    loss = criterion(logits, soft)
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    top1, top3 = topk_accuracy(logits, soft, ks=(1, 3))
    record.append([loss.item(), top1.item(), top3.item()])
record.append({name: t.detach().numpy().copy() for name, t in net.state_dict().items()})
"""

STEPS = [
    ("import torch\nfrom torch import Tensor", "from torch import Tensor"),
    (
        "import torchvision.transforms.functional as F",
        "import retrograd.vision.transforms.functional as F",
    ),
    ("import torchvision\n", "import retrograd.vision as torchvision\n"),
    ("    sgd.zero_grad()\n", ""),
    ("    loss.backward()\n    sgd.step()", "    grads = loss.backward()\n    sgd.step(grads)"),
]


def torchvision_stand_in() -> SimpleNamespace:
    """The two torchvision names the torch run needs: ``get_dimensions`` of an image tensor
    (``[channels, height, width]``) and ``RandomChoice`` (one of its transforms, picked by
    Python's ``random``)."""

    def get_dimensions(image):
        return [1 if image.ndim == 2 else image.shape[-3], *image.shape[-2:]]

    class RandomChoice:
        def __init__(self, options, p=None):
            self.options, self.weights = options, p

        def __call__(self, *inputs):
            return random.choices(self.options, weights=self.weights)[0](*inputs)

    functional = SimpleNamespace(get_dimensions=get_dimensions)
    return SimpleNamespace(
        transforms=SimpleNamespace(functional=functional, RandomChoice=RandomChoice)
    )


def make_dataset(lib):
    rng = np.random.default_rng(450)
    labels = np.arange(12) % 4
    images = rng.normal(size=(12, 3, 8, 6)).astype(np.float32)
    images[np.arange(12), labels % 3] += 1.0 + labels[:, None, None] / 2
    dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
    dataset.classes = ["ant", "bee", "cat", "dog"]
    return dataset


def make_model(lib, classes):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(6, classes),
    )


def _torch_text(source: str) -> str:
    return source.replace(
        "import torchvision.transforms.functional as F",
        "F = torchvision.transforms.functional",
    ).replace("import torchvision\n", "")


def test_mixup_cutmix_training_trains_as_torch():
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        random.seed(450)
        draws = np.random.default_rng(450)

        def sample_dirichlet(concentration, generator=None, lib=lib, draws=draws):
            alpha = np.asarray(concentration.numpy(), np.float64)
            return lib.tensor(draws.dirichlet(alpha), dtype=concentration.dtype)

        shared = {
            "record": record,
            "initialize": initialize,
            "SimpleNamespace": SimpleNamespace,
            "make_dataset": make_dataset,
            "make_model": make_model,
        }
        source = AUGMENT_SOURCE + TRAIN_SOURCE
        if lib is torch:
            source = _torch_text(source)
            shared["torchvision"] = torchvision_stand_in()
        else:
            source = ported_imports(port(source, STEPS))
        saved = lib._sample_dirichlet
        lib._sample_dirichlet = sample_dirichlet
        try:
            with SharedDraws(lib, 450):
                run_source(source, lib, **shared)
        finally:
            lib._sample_dirichlet = saved
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 1 + 3 + 1
    random.seed(450)  # RandomChoice's picks of the 3 batches: both mixup (0) and cutmix (1) ran
    assert {random.choices([0, 1])[0] for _ in range(3)} == {0, 1}
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_batch_transforms_refuse_bad_batches(lib):
    if lib is rg:
        source = ported_imports(port(AUGMENT_SOURCE, STEPS[:2]))
    else:
        source = AUGMENT_SOURCE.replace("import torchvision.transforms.functional as F", "F = None")
    names = run_source(source, lib)
    mixup = names["Mixup"](3, p=1.0)
    with pytest.raises(TypeError, match=r"int64 labels, got .*float32 and .*int32"):
        mixup(lib.zeros(2, 3, 4, 4), lib.zeros(2, dtype=lib.int32))
    with pytest.raises(ValueError, match=r"got 3-d and 1-d"):
        mixup(lib.zeros(3, 4, 4), lib.zeros(2, dtype=lib.int64))
