# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines, blank lines with spaces)
"""Real PyTorch programs built on torchvision's API, ported to retrograd (the harness:
``tests/real_ports.py``).

- torchvision's classification reference (pytorch/vision ``references/classification``):
  ``transforms.py`` as written (``RandomMixup`` and ``RandomCutmix``: ``F.one_hot(...).to(
  dtype=batch.dtype)``, ``batch.roll(1, 0)``, the ratio drawn by ``torch._sample_dirichlet(
  torch.tensor([alpha, alpha]))``, ``mul_``/``add_`` chains in place, torchvision's
  ``F.get_dimensions`` of the batch, ``int(torch.clamp(r_x - r_w_half, min=0))`` of one-element
  tensors and the box pasted by ``batch[:, :, y1:y2, x1:x2] = batch_rolled[...]``);
  ``train.py``'s ``torchvision.transforms.RandomChoice(mixup_transforms)`` inside its
  ``collate_fn`` over ``default_collate``, its loss (``nn.CrossEntropyLoss(label_smoothing=...)``
  of the mixed soft targets) and step; ``utils.py``'s ``accuracy`` (``target.max(dim=1)[1]`` of
  soft targets, ``output.topk(maxk, 1, True, True)``, ``correct[:k].flatten().sum(dtype=
  torch.float32)`` under ``torch.inference_mode()``). The ImageNet folder is replaced by a
  ``TensorDataset`` of small images with a ``classes`` list, read through a
  ``SequentialSampler`` (train.py's ``RandomSampler`` draws from torch's own generator) and a
  small convolutional model in place of ``torchvision.models.get_model``.

torchvision is not installed beside this torch: the torch run's ``torchvision`` is a stand-in
written here (``get_dimensions`` and ``RandomChoice`` as torchvision's code computes them).
``torch.rand``/``randint``/``_sample_dirichlet`` draw from one NumPy stream in both runs
(:class:`SharedDraws`), Python's ``random`` (``RandomChoice``) is seeded alike.
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

REFERENCE_SOURCE = '''
import math
from typing import Tuple

import torch
from torch import Tensor
from torchvision.transforms import functional as F


class RandomMixup(torch.nn.Module):
    """Randomly apply Mixup to the provided batch and targets.
    The class implements the data augmentations as described in the paper
    `"mixup: Beyond Empirical Risk Minimization" <https://arxiv.org/abs/1710.09412>`_.

    Args:
        num_classes (int): number of classes used for one-hot encoding.
        p (float): probability of the batch being transformed. Default value is 0.5.
        alpha (float): hyperparameter of the Beta distribution used for mixup.
            Default value is 1.0.
        inplace (bool): boolean to make this transform inplace. Default set to False.
    """

    def __init__(self, num_classes: int, p: float = 0.5, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()

        if num_classes < 1:
            raise ValueError(
                f"Please provide a valid positive value for the num_classes. Got num_classes={num_classes}"
            )

        if alpha <= 0:
            raise ValueError("Alpha param can't be zero.")

        self.num_classes = num_classes
        self.p = p
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, batch: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Args:
            batch (Tensor): Float tensor of size (B, C, H, W)
            target (Tensor): Integer tensor of size (B, )

        Returns:
            Tensor: Randomly transformed batch.
        """
        if batch.ndim != 4:
            raise ValueError(f"Batch ndim should be 4. Got {batch.ndim}")
        if target.ndim != 1:
            raise ValueError(f"Target ndim should be 1. Got {target.ndim}")
        if not batch.is_floating_point():
            raise TypeError(f"Batch dtype should be a float tensor. Got {batch.dtype}.")
        if target.dtype != torch.int64:
            raise TypeError(f"Target dtype should be torch.int64. Got {target.dtype}")

        if not self.inplace:
            batch = batch.clone()
            target = target.clone()

        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)

        if torch.rand(1).item() >= self.p:
            return batch, target

        # It's faster to roll the batch by one instead of shuffling it to create image pairs
        batch_rolled = batch.roll(1, 0)
        target_rolled = target.roll(1, 0)

        # Implemented as on mixup paper, page 3.
        lambda_param = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        batch_rolled.mul_(1.0 - lambda_param)
        batch.mul_(lambda_param).add_(batch_rolled)

        target_rolled.mul_(1.0 - lambda_param)
        target.mul_(lambda_param).add_(target_rolled)

        return batch, target

    def __repr__(self) -> str:
        s = (
            f"{self.__class__.__name__}("
            f"num_classes={self.num_classes}"
            f", p={self.p}"
            f", alpha={self.alpha}"
            f", inplace={self.inplace}"
            f")"
        )
        return s


class RandomCutmix(torch.nn.Module):
    """Randomly apply Cutmix to the provided batch and targets.
    The class implements the data augmentations as described in the paper
    `"CutMix: Regularization Strategy to Train Strong Classifiers with Localizable Features"
    <https://arxiv.org/abs/1905.04899>`_.

    Args:
        num_classes (int): number of classes used for one-hot encoding.
        p (float): probability of the batch being transformed. Default value is 0.5.
        alpha (float): hyperparameter of the Beta distribution used for cutmix.
            Default value is 1.0.
        inplace (bool): boolean to make this transform inplace. Default set to False.
    """

    def __init__(self, num_classes: int, p: float = 0.5, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError("Please provide a valid positive value for the num_classes.")
        if alpha <= 0:
            raise ValueError("Alpha param can't be zero.")

        self.num_classes = num_classes
        self.p = p
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, batch: Tensor, target: Tensor) -> Tuple[Tensor, Tensor]:
        """
        Args:
            batch (Tensor): Float tensor of size (B, C, H, W)
            target (Tensor): Integer tensor of size (B, )

        Returns:
            Tensor: Randomly transformed batch.
        """
        if batch.ndim != 4:
            raise ValueError(f"Batch ndim should be 4. Got {batch.ndim}")
        if target.ndim != 1:
            raise ValueError(f"Target ndim should be 1. Got {target.ndim}")
        if not batch.is_floating_point():
            raise TypeError(f"Batch dtype should be a float tensor. Got {batch.dtype}.")
        if target.dtype != torch.int64:
            raise TypeError(f"Target dtype should be torch.int64. Got {target.dtype}")

        if not self.inplace:
            batch = batch.clone()
            target = target.clone()

        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)

        if torch.rand(1).item() >= self.p:
            return batch, target

        # It's faster to roll the batch by one instead of shuffling it to create image pairs
        batch_rolled = batch.roll(1, 0)
        target_rolled = target.roll(1, 0)

        # Implemented as on cutmix paper, page 12 (with minor corrections on typos).
        lambda_param = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        _, H, W = F.get_dimensions(batch)

        r_x = torch.randint(W, (1,))
        r_y = torch.randint(H, (1,))

        r = 0.5 * math.sqrt(1.0 - lambda_param)
        r_w_half = int(r * W)
        r_h_half = int(r * H)

        x1 = int(torch.clamp(r_x - r_w_half, min=0))
        y1 = int(torch.clamp(r_y - r_h_half, min=0))
        x2 = int(torch.clamp(r_x + r_w_half, max=W))
        y2 = int(torch.clamp(r_y + r_h_half, max=H))

        batch[:, :, y1:y2, x1:x2] = batch_rolled[:, :, y1:y2, x1:x2]
        lambda_param = float(1.0 - (x2 - x1) * (y2 - y1) / (W * H))

        target_rolled.mul_(1.0 - lambda_param)
        target.mul_(lambda_param).add_(target_rolled)

        return batch, target

    def __repr__(self) -> str:
        s = (
            f"{self.__class__.__name__}("
            f"num_classes={self.num_classes}"
            f", p={self.p}"
            f", alpha={self.alpha}"
            f", inplace={self.inplace}"
            f")"
        )
        return s


# utils.py
def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.inference_mode():
        maxk = max(topk)
        batch_size = target.size(0)
        if target.ndim == 2:
            target = target.max(dim=1)[1]

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target[None])

        res = []
        for k in topk:
            correct_k = correct[:k].flatten().sum(dtype=torch.float32)
            res.append(correct_k * (100.0 / batch_size))
        return res


# train.py
import torchvision
from torch.utils.data.dataloader import default_collate

dataset = make_dataset(torch)
dataset_test = dataset
args = SimpleNamespace(mixup_alpha=0.2, cutmix_alpha=1.0, label_smoothing=0.1, batch_size=4, lr=0.1, momentum=0.9, weight_decay=1e-4, workers=0)
train_sampler = torch.utils.data.SequentialSampler(dataset)

collate_fn = None
num_classes = len(dataset.classes)
mixup_transforms = []
if args.mixup_alpha > 0.0:
    mixup_transforms.append(RandomMixup(num_classes, p=1.0, alpha=args.mixup_alpha))
if args.cutmix_alpha > 0.0:
    mixup_transforms.append(RandomCutmix(num_classes, p=1.0, alpha=args.cutmix_alpha))
if mixup_transforms:
    mixupcutmix = torchvision.transforms.RandomChoice(mixup_transforms)

    def collate_fn(batch):
        return mixupcutmix(*default_collate(batch))

data_loader = torch.utils.data.DataLoader(
    dataset,
    batch_size=args.batch_size,
    sampler=train_sampler,
    num_workers=args.workers,
    pin_memory=True,
    collate_fn=collate_fn,
)

model = make_model(torch, num_classes)
initialize(model)
criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)

for epoch in range(2):
    model.train()
    for i, (image, target) in enumerate(data_loader):
        if epoch == 0 and i == 0:
            record.append({"image": image.numpy(), "target": target.numpy()})
        output = model(image)
        loss = criterion(output, target)

        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        record.append([loss.item(), acc1.item(), acc5.item()])
    record.append({k: v.detach().numpy().copy() for k, v in model.state_dict().items()})
'''

STEPS = [
    ("import torch\nfrom torch import Tensor", "from torch import Tensor"),
    (
        "from torchvision.transforms import functional as F",
        "from retrograd.vision.transforms import functional as F",
    ),
    ("import torchvision\n", "import retrograd.vision as torchvision\n"),
    ("        optimizer.zero_grad()\n", ""),
    (
        "        loss.backward()\n        optimizer.step()",
        "        grads = loss.backward()\n        optimizer.step(grads)",
    ),
]


def torchvision_stand_in() -> SimpleNamespace:
    """torchvision's ``transforms.functional.get_dimensions`` of a tensor and its
    ``transforms.RandomChoice``, as torchvision's code computes them, in torch."""

    def get_dimensions(img):
        channels = 1 if img.ndim == 2 else img.shape[-3]
        return [channels, img.shape[-2], img.shape[-1]]

    class RandomChoice:
        def __init__(self, transforms, p=None):
            self.transforms, self.p = transforms, p

        def __call__(self, *args):
            t = random.choices(self.transforms, weights=self.p)[0]
            return t(*args)

    functional = SimpleNamespace(get_dimensions=get_dimensions)
    return SimpleNamespace(
        transforms=SimpleNamespace(functional=functional, RandomChoice=RandomChoice)
    )


def make_dataset(lib):
    rng = np.random.default_rng(450)
    labels = np.arange(16) % 6
    images = rng.normal(size=(16, 3, 12, 10)).astype(np.float32)
    images[np.arange(16), labels % 3, :, :] += 1.0 + labels[:, None, None] / 3
    dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
    dataset.classes = [f"class{k}" for k in range(6)]
    return dataset


def make_model(lib, num_classes):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, num_classes),
    )


def test_classification_reference_mixup_cutmix_trains_as_torch():
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
        if lib is torch:
            source = REFERENCE_SOURCE.replace(
                "from torchvision.transforms import functional as F",
                "F = torchvision.transforms.functional",
            ).replace("import torchvision\n", "")
            shared["torchvision"] = torchvision_stand_in()
        else:
            source = ported_imports(port(REFERENCE_SOURCE, STEPS))
        saved = lib._sample_dirichlet
        lib._sample_dirichlet = sample_dirichlet
        try:
            with SharedDraws(lib, 450):
                run_source(source, lib, **shared)
        finally:
            lib._sample_dirichlet = saved
        records.append(record)
    theirs, ours = records
    assert len(theirs) == 1 + 2 * (4 + 1)
    random.seed(450)  # RandomChoice's picks of the 8 batches: both mixup (0) and cutmix (1) ran
    assert {random.choices([0, 1])[0] for _ in range(8)} == {0, 1}
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("lib", [torch, rg], ids=["torch", "retrograd"])
def test_reference_transforms_refuse_bad_batches_as_written(lib):
    source = REFERENCE_SOURCE.split("# utils.py")[0]
    if lib is rg:
        source = ported_imports(port(source, STEPS[:2]))
    else:
        source = source.replace("from torchvision.transforms import functional as F", "F = None")
    names = run_source(source, lib)
    mixup = names["RandomMixup"](3, p=1.0)
    with pytest.raises(TypeError, match=r"Target dtype should be torch\.int64"):
        mixup(lib.zeros(2, 3, 4, 4), lib.zeros(2, dtype=lib.int32))
    with pytest.raises(ValueError, match=r"Batch ndim should be 4\. Got 3"):
        mixup(lib.zeros(3, 4, 4), lib.zeros(2, dtype=lib.int64))
