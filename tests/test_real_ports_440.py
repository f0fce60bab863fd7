# ruff: noqa: E501, W291  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):
metric and contrastive learning written by hand in plain torch.

- TinyZeaMays/CircleLoss: ``circle_loss.py`` whole (``NormLinear``, ``CircleLossLikeCE``,
  ``convert_label_to_similarity``, ``CircleLossBackward``) and ``mnist_example_metric.py``'s
  ``Model`` and training loop. It exercises ``Tensor`` annotations, ``torch.clamp_min``/``clamp_max``
  of detached similarities, ``label_matrix += eye_label`` on an int matrix, boolean indexing by
  ``label_matrix.eq(1)``, ``gather``/``scatter_`` with ``src=``, ``torch.ones_like(..., device=,
  dtype=)``, and above all the loss's own backward: ``sp.backward(gradient=..., retain_graph=True)``
  then ``sn.backward(gradient=...)`` through one shared graph (the two seeded backwards summed).
- Spijkervet/SimCLR: ``simclr/modules/nt_xent.py``'s ``NT_Xent`` (one process: ``world_size=1``),
  ``simclr/simclr.py``'s ``SimCLR`` (its encoder's ``fc`` replaced by ``Identity``), and the first
  ``main.py``'s hand-made ``calc_loss`` (advanced-index assignment ``masks[mask_diag, mask_diag] =
  0.0``, ``sim /= args.temperature``), trained with Adam as ``main.py`` does.

The datasets (MNIST, STL10 with its augmentations) are small synthetic tensors with the same
interface; the lines changed for the port are the ``import`` lines and the gradient lines.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, initializer, port, run_source

RG_IMPORTS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("from torch import nn, Tensor\n", "from retrograd import nn, Tensor\n"),
]


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
    np.random.seed(0)
    rg.seed(0)


# -- TinyZeaMays/CircleLoss ----------------------------------------------------------------------------
CIRCLE_SOURCE = '''
from typing import Tuple

import torch
from torch import nn, Tensor


class NormLinear(nn.Linear):
    def __init__(self, in_features: int, out_features: int) -> None:
        super(NormLinear, self).__init__(in_features, out_features, bias=False)

    def forward(self, inp: Tensor) -> Tensor:
        return nn.functional.linear(nn.functional.normalize(inp),
                                    nn.functional.normalize(self.weight))


class CircleLossLikeCE(nn.Module):
    def __init__(self, m: float, gamma: float) -> None:
        super(CircleLossLikeCE, self).__init__()
        self.m = m
        self.gamma = gamma
        self.loss = nn.CrossEntropyLoss()

    def forward(self, inp: Tensor, label: Tensor) -> Tensor:
        a = torch.clamp_min(inp + self.m, min=0).detach()
        src = torch.clamp_min(
            - inp.gather(dim=1, index=label.unsqueeze(1)) + 1 + self.m,
            min=0,
        ).detach()
        a.scatter_(dim=1, index=label.unsqueeze(1), src=src)

        sigma = torch.ones_like(inp, device=inp.device, dtype=inp.dtype) * self.m
        src = torch.ones_like(label.unsqueeze(1), dtype=inp.dtype, device=inp.device) - self.m
        sigma.scatter_(dim=1, index=label.unsqueeze(1), src=src)

        return self.loss(a * (inp - sigma) * self.gamma, label)


def convert_label_to_similarity(feature: Tensor, label: Tensor) -> Tuple[Tensor, Tensor]:
    similarity_matrix = feature @ feature.transpose(1, 0)
    label_matrix = (label.unsqueeze(1) == label.unsqueeze(0)).int()

    eye_label = torch.eye(label_matrix.shape[0], dtype=label_matrix.dtype, device=label_matrix.device)
    label_matrix += eye_label

    similarity_matrix = similarity_matrix.view(-1)
    label_matrix = label_matrix.view(-1)
    return similarity_matrix[label_matrix.eq(1)], similarity_matrix[label_matrix.eq(0)]


class CircleLossBackward(nn.Module):
    def __init__(self, m: float, gamma: float) -> None:
        super(CircleLossBackward, self).__init__()
        self.m = m
        self.gamma = gamma

    def forward(self, sp: Tensor, sn: Tensor) -> Tensor:
        ap = torch.clamp_min(- sp.detach() + 1 + self.m, min=0.)
        an = torch.clamp_min(sn.detach() + self.m, min=0.)

        sigma_p = 1 - self.m
        sigma_n = self.m

        logit_p = - ap * (sp - sigma_p) * self.gamma
        logit_n = an * (sn - sigma_n) * self.gamma

        loss = torch.log(1 + torch.clamp_max(torch.exp(logit_n).sum() * torch.exp(logit_p).sum(), max=1e38))
        z = - torch.exp(- loss) + 1

        """
        Eq. 10:
        sp.backward(gradient=z * (- ap) * torch.softmax(- logit_p, dim=0) * self.gamma, retain_graph=True)
        I modified to 
        sp.backward(gradient=z * (- ap) * torch.softmax(logit_p, dim=0) * self.gamma, retain_graph=True)
        """

        sp.backward(gradient=z * (- ap) * torch.softmax(logit_p, dim=0) * self.gamma, retain_graph=True)
        sn.backward(gradient=z * an * torch.softmax(logit_n, dim=0) * self.gamma)

        return loss.detach()


# -- mnist_example_metric.py --
from torch.optim import SGD


class Model(nn.Module):
    def __init__(self) -> None:
        super(Model, self).__init__()
        self.feature_extractor = nn.Sequential(
            nn.Conv2d(in_channels=1, out_channels=8, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(in_channels=8, out_channels=16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
            nn.Conv2d(in_channels=16, out_channels=32, kernel_size=3),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=2),
        )

    def forward(self, inp: Tensor) -> Tensor:
        feature = self.feature_extractor(inp).mean(dim=[2, 3])
        return nn.functional.normalize(feature)


def main(train_loader, val_loader, record, initialize):
    model = Model()
    initialize(model)
    optimizer = SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_backward = CircleLossBackward(m=0.25, gamma=80)

    for img, label in train_loader:
        model.zero_grad()
        pred = model(img)
        record.append(loss_backward(*convert_label_to_similarity(pred, label)).item())
        optimizer.step()

    tp = 0
    fn = 0
    fp = 0
    thresh = 0.9
    for img, label in val_loader:
        pred = model(img)
        gt_label = label[0] == label[1]
        pred_label = torch.sum(pred[0] * pred[1]) > thresh
        if gt_label and pred_label:
            tp += 1
        elif gt_label and not pred_label:
            fn += 1
        elif not gt_label and pred_label:
            fp += 1

    record.append([tp, fn, fp])
    record.append({name: p.detach().numpy().copy() for name, p in model.named_parameters()})
'''

CIRCLE_STEPS = [
    *RG_IMPORTS,
    ("from torch.optim import SGD\n", "from retrograd.optim import SGD\n"),
    (
        "        sp.backward(gradient=z * (- ap) * torch.softmax(logit_p, dim=0) * self.gamma, retain_graph=True)\n"
        "        sn.backward(gradient=z * an * torch.softmax(logit_n, dim=0) * self.gamma)\n",
        "        self.grads = sp.backward(gradient=z * (- ap) * torch.softmax(logit_p, dim=0) * self.gamma, retain_graph=True)\n"
        "        self.grads = self.grads + sn.backward(gradient=z * an * torch.softmax(logit_n, dim=0) * self.gamma)\n",
    ),
    ("        optimizer.step()\n", "        optimizer.step(loss_backward.grads)\n"),
]


def _mnist_like(lib, rng, n, batch_size, shuffle):
    images = rng.random((n, 1, 28, 28)).astype(np.float32)
    labels = rng.integers(0, 3, n)
    images += labels[:, None, None, None].astype(np.float32) * 0.3  # a class signal to learn
    dataset = lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels))
    return lib.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)


def test_circle_loss_trains_through_its_own_two_seeded_backwards_as_torch():
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        record = []
        text = CIRCLE_SOURCE if lib is torch else port(CIRCLE_SOURCE, CIRCLE_STEPS)
        names = run_source(text, lib)
        rng = np.random.default_rng(0)
        train = _mnist_like(lib, rng, 32, 16, False)  # (unshuffled: one order in both runs)
        val = _mnist_like(lib, rng, 8, 2, False)
        names["main"](train, val, record, initialize)
        records.append(record)
    assert len(records[0]) == 2 + 2
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)


def test_circle_loss_like_ce_and_norm_linear_train_as_torch():
    """``CircleLossLikeCE`` over ``NormLinear``'s cosine logits (its class-level form, which
    ``mnist_example_classify.py`` trains), a few SGD steps."""
    records = []
    initialize = initializer()
    for lib in (torch, rg):
        names = run_source(
            CIRCLE_SOURCE if lib is torch else port(CIRCLE_SOURCE, CIRCLE_STEPS), lib
        )
        rng = np.random.default_rng(1)
        x = lib.tensor(rng.standard_normal((12, 6)).astype(np.float32))
        y = lib.tensor(rng.integers(0, 4, 12))
        head = names["NormLinear"](6, 4)
        initialize(head)
        criterion = names["CircleLossLikeCE"](m=0.25, gamma=64)
        optimizer = lib.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
        record = []
        for _ in range(4):
            loss = criterion(head(x), y)
            optimizer.zero_grad()
            if lib is torch:
                loss.backward()
                optimizer.step()
            else:
                optimizer.step(loss.backward())
            record.append(loss.item())
        record.append({"weight": head.weight.detach().numpy().copy()})
        records.append(record)
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
