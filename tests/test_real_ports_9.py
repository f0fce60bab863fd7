"""Real ports, continued (the harness: ``tests/real_ports.py``): programs written here in the
style of the PyTorch transfer-learning tutorial (with fine-tuning and SWA added) and of
PyTorch-GAN's WGAN-GP, run under torch and, ported, under retrograd from the same weights.

- Fine-tuning a small pretrained backbone loaded from a state dict: every parameter frozen by
  ``requires_grad = False``, ``model.fc`` replaced (``in_features``), SGD over
  ``model.fc.parameters()``, ``StepLR``, train/val phases under
  ``torch.set_grad_enabled(phase == "train")``, ``torch.sum(preds == labels.data)``,
  ``corrects.double() / n``, the best weights kept by ``copy.deepcopy(model.state_dict())``
  and loaded back; then the last block unfrozen and given its own group by
  ``add_param_group``, BatchNorm kept in eval by ``model.apply(...)`` on
  ``m.__class__.__name__.find("BatchNorm")``, and SWA: ``AveragedModel``, ``SWALR``
  (``anneal_epochs``) and ``update_bn`` over a loader of images;
- a WGAN with gradient penalty: layer lists from a helper unpacked into ``nn.Sequential``,
  ``nn.BatchNorm1d(n, 0.8)`` (0.8 is the eps, positionally), ``LeakyReLU(inplace=True)``,
  ``Tensor = torch.FloatTensor`` called on NumPy draws and as ``Tensor(n, 1).fill_(1.0)``,
  ``autograd.Variable(..., requires_grad=False)``, ``imgs.type(Tensor)``, the penalty through
  ``autograd.grad(outputs=, inputs=, grad_outputs=, create_graph=True, retain_graph=True,
  only_inputs=True)`` and ``grads.norm(2, dim=1)``, and a generator step every ``n_critic``
  critic steps.

Both run unchanged but for the gradient lines (and ``import torch.autograd as autograd``).
"""

from __future__ import annotations

import numpy as np
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, state_of

# -- fine-tuning a pretrained backbone, then SWA ---------------------------------------------------
TRANSFER_SOURCE = """
import copy
import time
from torch.optim import lr_scheduler as schedules
from torch.optim.swa_utils import SWALR, AveragedModel

def conv_bn_relu(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )

class SmallNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = conv_bn_relu(3, 6)
        self.block = conv_bn_relu(6, 6)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(6, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.block(self.stem(x))), 1))

def run_epochs(model, loss_fn, opt, sched, loaders, sizes, epochs=2):
    started = time.time()
    best_state, best_acc, log = copy.deepcopy(model.state_dict()), 0.0, []
    for _ in range(epochs):
        for phase in ("train", "val"):
            model.train() if phase == "train" else model.eval()
            total_loss, corrects = 0.0, 0
            for x, labels in loaders[phase]:
                opt.zero_grad()
                with torch.set_grad_enabled(phase == "train"):  # no graph for validation
                    out = model(x)
                    _, preds = torch.max(out, 1)
                    loss = loss_fn(out, labels)
                    if phase == "train":
                        loss.backward()
                        opt.step()
                total_loss += loss.item() * x.size(0)
                corrects += torch.sum(preds == labels.data)
            if phase == "train":
                sched.step()
            acc = corrects.double() / sizes[phase]
            log.append([total_loss / sizes[phase], acc.item()])
            if phase == "val" and acc > best_acc:
                best_acc, best_state = acc, copy.deepcopy(model.state_dict())
        log.append({n: p.detach().numpy().copy() for n, p in model.named_parameters()})
    model.load_state_dict(best_state)
    return model, log

def freeze_batch_norm(m):
    if m.__class__.__name__.find("BatchNorm") != -1:
        m.eval()

def main(pretrained, loaders, sizes):
    net = SmallNet()
    net.load_state_dict(pretrained)
    for p in net.parameters():
        p.requires_grad = False
    width = net.fc.in_features
    net.fc = nn.Linear(width, 2)  # a new head, the only trainable part
    with torch.no_grad():
        net.fc.weight.copy_(torch.linspace(-0.3, 0.3, 2 * width).view(2, width))
        net.fc.bias.zero_()
    loss_fn = nn.CrossEntropyLoss()
    opt = optim.SGD(net.fc.parameters(), lr=0.01, momentum=0.9)
    sched = schedules.StepLR(opt, step_size=1, gamma=0.1)
    net, log = run_epochs(net, loss_fn, opt, sched, loaders, sizes)
    # fine-tune the last block too, at its own rate, its batch statistics left as they are
    for p in net.block.parameters():
        p.requires_grad = True
    opt.add_param_group({"params": net.block.parameters(), "lr": 1e-3})
    averaged = AveragedModel(net)
    swa_sched = SWALR(opt, swa_lr=0.005, anneal_epochs=1)
    for _ in range(2):
        for x, labels in loaders["train"]:
            net.train()
            net.apply(freeze_batch_norm)
            opt.zero_grad()
            loss = loss_fn(net(x), labels)
            loss.backward()
            opt.step()
            log.append(loss.item())
        averaged.update_parameters(net)
        swa_sched.step()
        log.append([group["lr"] for group in opt.param_groups])
    torch.optim.swa_utils.update_bn(loaders["images"], averaged)
    state = averaged.state_dict()  # the averages, their count, and the refreshed BN statistics
    log.append({k: np.asarray(v.numpy(), dtype=np.float64).copy() for k, v in state.items()})
    return log
"""

TRANSFER_STEP = [
    (
        "                        loss.backward()\n                        opt.step()",
        "                        grads = loss.backward()\n                        opt.step(grads)",
    ),
    (
        "            loss.backward()\n            opt.step()",
        "            grads = loss.backward()\n            opt.step(grads)",
    ),
]


def test_fine_tuning_with_unfreezing_and_swa_matches_torch():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((9, 3, 6, 6)), rng.integers(0, 2, 9)
    x_val, y_val = rng.standard_normal((6, 3, 6, 6)), rng.integers(0, 2, 6)
    theirs, ours = both(TRANSFER_SOURCE, TRANSFER_STEP)
    torch.manual_seed(0)
    pretrained = state_of(theirs["SmallNet"]())
    records = []
    for lib, names in ((torch, theirs), (rg, ours)):
        f32 = lib.float32
        loaders = {
            "train": [
                (lib.tensor(x[i : i + 3], dtype=f32), lib.tensor(y[i : i + 3]))
                for i in range(0, 9, 3)
            ],
            "val": [
                (lib.tensor(x_val[i : i + 3], dtype=f32), lib.tensor(y_val[i : i + 3]))
                for i in range(0, 6, 3)
            ],
            "images": [lib.tensor(x[i : i + 3], dtype=f32) for i in range(0, 9, 3)],
        }
        state = {k: lib.tensor(v) for k, v in pretrained.items()}
        records.append(names["main"](state, loaders, {"train": 9, "val": 6}))
    assert_records_agree(records[1], records[0], rtol=1e-5, atol=1e-6)


# -- a WGAN with gradient penalty ------------------------------------------------------------------
WGAN_SOURCE = """
from torch import autograd

shape = (1, 4, 4)
noise_dim = 6
cuda = torch.cuda.is_available()
Tensor = torch.FloatTensor if not cuda else torch.cuda.FloatTensor

def dense(n_in, n_out, norm=True):
    layers = [nn.Linear(n_in, n_out)]
    if norm:
        layers.append(nn.BatchNorm1d(n_out, 0.8))
    return layers + [nn.LeakyReLU(0.2, inplace=True)]

class Maker(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            *dense(noise_dim, 12, norm=False), *dense(12, 24),
            nn.Linear(24, int(np.prod(shape))), nn.Tanh(),
        )

    def forward(self, z):
        out = self.net(z)
        return out.view(out.shape[0], *shape)

class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        pixels = int(np.prod(shape))
        layers = dense(pixels, 24, norm=False) + dense(24, 12, norm=False)
        self.net = nn.Sequential(*layers, nn.Linear(12, 1))

    def forward(self, img):
        return self.net(img.view(img.shape[0], -1))

def penalty(critic, real, fake, rng):
    # (|grad of the critic at points between real and fake| - 1)^2: keeps it 1-Lipschitz
    mix = Tensor(rng.random((real.size(0), 1, 1, 1)))
    between = (mix * real + (1 - mix) * fake).requires_grad_(True)
    scores = critic(between)
    ones = autograd.Variable(Tensor(real.shape[0], 1).fill_(1.0), requires_grad=False)
    grads = autograd.grad(
        outputs=scores, inputs=between, grad_outputs=ones,
        create_graph=True, retain_graph=True, only_inputs=True,
    )[0]
    return ((grads.view(grads.size(0), -1).norm(2, dim=1) - 1) ** 2).mean()

def train(maker, critic, loader, rng, epochs=2, n_critic=2, weight=10):
    opt_m = torch.optim.Adam(maker.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_c = torch.optim.Adam(critic.parameters(), lr=2e-3, betas=(0.5, 0.999))
    log = []
    for _ in range(epochs):
        for i, (imgs, _) in enumerate(loader):
            real = autograd.Variable(imgs.type(Tensor))
            opt_c.zero_grad()
            z = autograd.Variable(Tensor(rng.normal(0, 1, (imgs.shape[0], noise_dim))))
            fake = maker(z)
            gp = penalty(critic, real.data, fake.data, rng)
            c_loss = torch.mean(critic(fake)) - torch.mean(critic(real)) + weight * gp
            c_loss.backward()
            opt_c.step()
            opt_m.zero_grad()
            if i % n_critic == 0:  # the maker learns once per n_critic critic steps
                m_loss = -torch.mean(critic(maker(z)))
                m_loss.backward()
                opt_m.step()
                log.append([c_loss.item(), m_loss.item(), gp.item()])
    named = list(maker.named_parameters()) + list(critic.named_parameters())
    log.append({n: p.detach().numpy().copy() for n, p in named})
    return log
"""

WGAN_STEP = [
    (
        "            c_loss.backward()\n            opt_c.step()",
        "            c_grads = c_loss.backward()\n            opt_c.step(c_grads)",
    ),
    (
        "                m_loss.backward()\n                opt_m.step()",
        "                m_grads = m_loss.backward()\n                opt_m.step(m_grads)",
    ),
]


def test_wgan_with_gradient_penalty_matches_torch():
    theirs, ours = both(WGAN_SOURCE, WGAN_STEP)
    torch.manual_seed(0)
    maker, critic = theirs["Maker"](), theirs["Critic"]()
    initial = (state_of(maker), state_of(critic))
    records = []
    for lib, names in ((torch, theirs), (rg, ours)):
        if lib is rg:
            maker, critic = names["Maker"](), names["Critic"]()
            maker.load_state_dict(initial[0])
            critic.load_state_dict(initial[1])
        images = np.random.default_rng(1).standard_normal((4, 1, 4, 4))
        data = [(lib.tensor(images, dtype=lib.float32), None) for _ in range(4)]
        records.append(names["train"](maker, critic, data, np.random.default_rng(2)))
    assert_records_agree(records[1], records[0], rtol=1e-4, atol=1e-5)
