# ruff: noqa: E501  (the port steps replacing the script's lines run past 100 columns)
"""Real ports, round 78 (the harness: ``tests/real_ports.py``): one-class anomaly detection, a
program written here in the style of lukasruff/Deep-SVDD-PyTorch (a bias-free LeNet-type
encoder mapping the normal class into a hypersphere around a centre ``c``, pretrained as the
encoder of an autoencoder, trained by the one-class or the soft-boundary objective with a
radius ``R`` set from a quantile of the distances, and scored by the distance to ``c``), on
small synthetic images with anomalies of another pattern; three configurations (one-class and
soft-boundary after pretraining, one-class from a random encoder), each run under torch and,
ported, under retrograd from the same weights and draws, every record compared.

It reaches:

- the data: images from ``torch.rand`` with a bright square or a stripe pattern written by
  slice assignment, global contrast normalization per image (``x - x.mean(dim=(1, 2, 3),
  keepdim=True)``, the mean of ``torch.abs`` as the l1 scale) and a min-max scaling by
  ``amin``/``amax``; ``TensorDataset`` of images, labels and ``torch.arange`` indices under
  ``DataLoader(batch_size=8, shuffle=False)``;
- the networks: ``nn.Conv2d(..., bias=False, padding=1)``, ``nn.BatchNorm2d(eps=1e-04,
  affine=False)``, ``nn.MaxPool2d(2, 2)``, ``F.leaky_relu``, ``x.view(x.size(0), -1)``,
  ``nn.Linear(..., bias=False)``; the decoder ``x.view(n, c, 2, 2)``, ``F.interpolate(
  scale_factor=2)``, ``nn.ConvTranspose2d(..., bias=False, padding=1)``, ``torch.sigmoid``;
- pretraining: the reconstruction error ``torch.sum((outputs - inputs) ** 2, dim=tuple(range(1,
  outputs.dim())))``, ``Adam(weight_decay=1e-6, amsgrad=True)``, ``MultiStepLR``; the
  encoder's weights taken from the autoencoder by a dict comprehension over ``state_dict()``
  keys, ``net_dict.update`` and ``load_state_dict``;
- the centre: ``c += torch.sum(outputs, dim=0)`` under ``torch.no_grad()``, ``c /=
  n_samples``, and the near-zero coordinates pushed to ``+-eps`` by ``c[(abs(c) < eps) & (c <
  0)] = -eps`` (the builtin ``abs`` of a tensor, ``&`` of boolean masks);
- training: the distance ``torch.sum((outputs - c) ** 2, dim=1)``, the soft-boundary loss
  ``R ** 2 + (1 / nu) * torch.mean(torch.max(torch.zeros_like(scores), scores))``, the radius
  after the warm-up epochs by ``R.data = torch.tensor(np.quantile(np.sqrt(dist.clone().data
  .cpu().numpy()), 1 - nu))``;
- testing under ``torch.no_grad()``: the scores, an AUC by the rank-sum statistic (a double
  ``torch.argsort``, boolean indexing of ranks by ``labels == 1``), lists of
  ``zip(idx.tolist(), labels.tolist(), scores.tolist())``; the model saved as ``{"R": R.cpu()
  .data.numpy().tolist(), "c": c.cpu().data.numpy().tolist(), "net_dict": ...}`` by
  ``torch.save`` to a buffer and loaded back into a fresh encoder, whose scores are compared.

The lines changed for the port: the ``import`` lines and the gradient lines (``grads =
loss.backward()``, ``optimizer.step(grads)``).
"""

from __future__ import annotations

import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (an autouse fixture: every draw seeded)
)

SVDD_SOURCE = """import io

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def global_contrast_normalization(x, scale="l1"):
    x = x - x.mean(dim=(1, 2, 3), keepdim=True)
    x_scale = torch.mean(torch.abs(x), dim=(1, 2, 3), keepdim=True)
    return x / x_scale


def make_images(n, anomalous):
    x = torch.rand(n, 1, 8, 8) * 0.3
    if anomalous:
        x[:, :, :, 1::3] += 0.8
    else:
        x[:, :, 2:6, 2:6] += 0.8
    return global_contrast_normalization(x)


class TinyLeNet(nn.Module):
    def __init__(self, rep_dim=8):
        super().__init__()
        self.rep_dim = rep_dim
        self.pool = nn.MaxPool2d(2, 2)
        self.conv1 = nn.Conv2d(1, 4, 3, bias=False, padding=1)
        self.bn1 = nn.BatchNorm2d(4, eps=1e-04, affine=False)
        self.conv2 = nn.Conv2d(4, 2, 3, bias=False, padding=1)
        self.bn2 = nn.BatchNorm2d(2, eps=1e-04, affine=False)
        self.fc1 = nn.Linear(2 * 2 * 2, self.rep_dim, bias=False)

    def forward(self, x):
        x = self.conv1(x)
        x = self.pool(F.leaky_relu(self.bn1(x)))
        x = self.conv2(x)
        x = self.pool(F.leaky_relu(self.bn2(x)))
        x = x.view(x.size(0), -1)
        return self.fc1(x)


class TinyLeNetAutoencoder(TinyLeNet):
    def __init__(self, rep_dim=8):
        super().__init__(rep_dim)
        self.deconv1 = nn.ConvTranspose2d(2, 4, 3, bias=False, padding=1)
        self.bn3 = nn.BatchNorm2d(4, eps=1e-04, affine=False)
        self.deconv2 = nn.ConvTranspose2d(4, 1, 3, bias=False, padding=1)

    def forward(self, x):
        x = super().forward(x)
        x = x.view(x.size(0), int(self.rep_dim / 4), 2, 2)
        x = F.interpolate(F.leaky_relu(x), scale_factor=2)
        x = self.deconv1(x)
        x = F.interpolate(F.leaky_relu(self.bn3(x)), scale_factor=2)
        x = self.deconv2(x)
        return torch.sigmoid(x)


def pretrain(ae_net, train_loader, n_epochs=3, lr=0.01):
    optimizer = torch.optim.Adam(ae_net.parameters(), lr=lr, weight_decay=1e-6, amsgrad=True)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2], gamma=0.1)
    ae_net.train()
    for epoch in range(n_epochs):
        loss_epoch, n_batches = 0.0, 0
        for data in train_loader:
            inputs, _, _ = data
            optimizer.zero_grad()
            outputs = ae_net(inputs)
            scores = torch.sum((outputs - inputs) ** 2, dim=tuple(range(1, outputs.dim())))
            loss = torch.mean(scores)
            loss.backward()
            optimizer.step()
            loss_epoch += loss.item()
            n_batches += 1
        scheduler.step()
        record.append([loss_epoch / n_batches, scheduler.get_last_lr()[0]])
    record.append(params_of(ae_net))
    return ae_net


def init_network_weights_from_pretraining(net, ae_net):
    net_dict = net.state_dict()
    ae_net_dict = ae_net.state_dict()
    ae_net_dict = {k: v for k, v in ae_net_dict.items() if k in net_dict}
    net_dict.update(ae_net_dict)
    net.load_state_dict(net_dict)


def init_center_c(train_loader, net, eps=0.1):
    n_samples = 0
    c = torch.zeros(net.rep_dim)
    net.eval()
    with torch.no_grad():
        for data in train_loader:
            inputs, _, _ = data
            outputs = net(inputs)
            n_samples += outputs.shape[0]
            c += torch.sum(outputs, dim=0)
    c /= n_samples
    c[(abs(c) < eps) & (c < 0)] = -eps
    c[(abs(c) < eps) & (c > 0)] = eps
    return c


def get_radius(dist, nu):
    return np.quantile(np.sqrt(dist.clone().data.cpu().numpy()), 1 - nu)


def train(net, train_loader, c, R, objective, nu, n_epochs=4, warm_up_n_epochs=1):
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=1e-6)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[3], gamma=0.1)
    net.train()
    for epoch in range(n_epochs):
        loss_epoch, n_batches = 0.0, 0
        for data in train_loader:
            inputs, _, _ = data
            optimizer.zero_grad()
            outputs = net(inputs)
            dist = torch.sum((outputs - c) ** 2, dim=1)
            if objective == "soft-boundary":
                scores = dist - R ** 2
                loss = R ** 2 + (1 / nu) * torch.mean(torch.max(torch.zeros_like(scores), scores))
            else:
                loss = torch.mean(dist)
            loss.backward()
            optimizer.step()
            if objective == "soft-boundary" and epoch >= warm_up_n_epochs:
                R.data = torch.tensor(get_radius(dist, nu))
            loss_epoch += loss.item()
            n_batches += 1
        scheduler.step()
        record.append([loss_epoch / n_batches, R.item(), scheduler.get_last_lr()[0]])
        record.append(params_of(net))
        print(f"  Epoch {epoch + 1}/{n_epochs}\\t Loss: {loss_epoch / n_batches:.4f}")
    return net


def roc_auc(labels, scores):
    ranks = torch.argsort(torch.argsort(scores)).double() + 1
    n_pos = int((labels == 1).sum())
    n_neg = labels.numel() - n_pos
    return ((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


def test(net, test_loader, c, R, objective):
    idx_label_score = []
    net.eval()
    with torch.no_grad():
        for data in test_loader:
            inputs, labels, idx = data
            outputs = net(inputs)
            dist = torch.sum((outputs - c) ** 2, dim=1)
            scores = dist - R ** 2 if objective == "soft-boundary" else dist
            idx_label_score += list(zip(idx.tolist(), labels.tolist(), scores.tolist()))
    _, labels, scores = zip(*idx_label_score)
    return roc_auc(torch.tensor(labels), torch.tensor(scores)), np.array(scores)


x_train = make_images(24, anomalous=False)
x_test = torch.cat([make_images(8, anomalous=False), make_images(8, anomalous=True)])
y_test = torch.cat([torch.zeros(8, dtype=torch.int64), torch.ones(8, dtype=torch.int64)])
lo, hi = x_train.amin(), x_train.amax()
x_train, x_test = (x_train - lo) / (hi - lo), (x_test - lo) / (hi - lo)
train_set = TensorDataset(x_train, torch.zeros(24, dtype=torch.int64), torch.arange(24))
test_set = TensorDataset(x_test, y_test, torch.arange(16))
train_loader = DataLoader(train_set, batch_size=8, shuffle=False)
test_loader = DataLoader(test_set, batch_size=8, shuffle=False)

objective, nu = OBJECTIVE, 0.1
net = TinyLeNet()
initialize(net)
if PRETRAIN:
    ae_net = TinyLeNetAutoencoder()
    initialize(ae_net)
    ae_net = pretrain(ae_net, train_loader)
    init_network_weights_from_pretraining(net, ae_net)
c = init_center_c(train_loader, net)
R = torch.tensor(0.0)
record.append(c.numpy().copy())
net = train(net, train_loader, c, R, objective, nu)
auc, scores = test(net, test_loader, c, R, objective)
record.append([auc, R.item()])
record.append(scores)
print(f"Test set AUC: {100.0 * auc:.2f}%")

buffer = io.BytesIO()
torch.save({"R": R.cpu().data.numpy().tolist(), "c": c.cpu().data.numpy().tolist(),
            "net_dict": net.state_dict()}, buffer)
buffer.seek(0)
model_dict = torch.load(buffer, weights_only=False)
restored = TinyLeNet()
restored.load_state_dict(model_dict["net_dict"])
restored_auc, restored_scores = test(restored, test_loader, torch.tensor(model_dict["c"]),
                                     torch.tensor(model_dict["R"]), objective)
record.append([restored_auc, model_dict["R"]])
record.append(restored_scores)
"""

SVDD_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
        "from torch.utils.data import DataLoader, TensorDataset\n",
        "import retrograd as torch\nimport retrograd.nn as nn\n"
        "import retrograd.nn.functional as F\nfrom retrograd.utils.data import DataLoader, TensorDataset\n",
    ),
    (
        "            loss = torch.mean(scores)\n            loss.backward()\n            optimizer.step()\n",
        "            loss = torch.mean(scores)\n            grads = loss.backward()\n"
        "            optimizer.step(grads)\n",
    ),
    (
        "                loss = torch.mean(dist)\n            loss.backward()\n            optimizer.step()\n",
        "                loss = torch.mean(dist)\n            grads = loss.backward()\n"
        "            optimizer.step(grads)\n",
    ),
]


@pytest.mark.parametrize(
    "objective, pretrain",
    [("one-class", True), ("soft-boundary", True), ("one-class", False)],
)
def test_deep_svdd_as_torch(capsys, objective, pretrain):
    (theirs, ours), (their_log, our_log) = runs_with_draws(
        SVDD_SOURCE,
        SVDD_STEPS,
        capsys,
        7804,
        initialize=initializer(),
        params_of=params_of,
        OBJECTIVE=objective,
        PRETRAIN=pretrain,
    )
    assert len(theirs) == (4 if pretrain else 0) + 1 + 2 * 4 + 4
    assert their_log == our_log and their_log.count("\n") == 5
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
