"""Real ports, continued (the harness: ``tests/real_ports.py``): an energy-based model trained
by contrastive divergence with SGLD samples, a program written here in the style of the UvA
deep learning course's energy-model tutorial (phlippe/uvadlc_notebooks: a Swish CNN scoring
images, a replay buffer of MCMC samples, a Lightning module with its callbacks), one training
step, a validation pass and an outlier score, then a short generation.

The surface it exercises: Langevin dynamics on the input (``p.requires_grad = False`` over the
model's parameters, ``x.requires_grad = True`` on a buffer batch, ``noise.normal_(0, 0.005)``
into a buffer tensor, ``x.data.add_(noise.data)``, ``x.data.clamp_(min=-1.0, max=1.0)``, the
gradient of ``-model(x)``'s sum with respect to the images clamped in place through ``.data``
and applied by ``x.data.add_(-step_size * ...)``, ``model.train(was_training)``); the replay
buffer (``torch.rand((1,) + shape) * 2 - 1`` examples, ``np.random.binomial``,
``random.choices`` of tensors joined by ``torch.cat``, ``list(x.to(torch.device("cpu"))
.chunk(n, dim=0)) + buffer``), ``torch.stack(steps, dim=0)``; the CNN (``Conv2d(...,
padding=4)`` on 28x28 digits, ``nn.Flatten``, ``.squeeze(dim=-1)``); the training step's
``real.add_(noise).clamp_(...)`` on a loaded batch, ``.chunk(2, dim=0)`` of the energies, the
regularised contrastive-divergence loss; ``Adam`` with ``betas=(beta1, 0.999)`` and ``beta1 =
0.0``, ``StepLR(optimizer, 1, gamma=0.97)``; ``torch.rand_like(real) * 2 - 1``;
``torch.no_grad()`` around the outlier score; ``torch.utils.data.DataLoader(drop_last=True)``.

Regressions guarded: in-place ``.data`` updates of a leaf input between backward passes,
``requires_grad`` toggled on parameters and restored, ``normal_`` into an existing tensor.
Stand-ins: PyTorch Lightning is a small trainer loop written for the test in Lightning's order
(``training_step``, ``zero_grad``, backward, ``clip_grad_norm_``, ``step``; the scheduler
stepped each epoch; ``self.log`` and ``save_hyperparameters`` of a minimal
``LightningModule``); MNIST is 8 random 28x28 images in ``[-1, 1]``; ``noise.normal_`` and
``torch.rand_like`` draw, as ``torch.rand`` and ``torch.randn`` do, from one seeded stream in
both runs; NumPy's and Python's global streams are seeded alike. The lines changed for the
port: the ``import`` lines and the gradient lines (``grads = energy.sum().backward()`` and
``x.grad(grads)``, without the ``detach_``/``zero_`` of the gradient: retrograd's backward
returns fresh gradients; ``grads = loss.backward()``, ``clip_grad_norm_(grads, ...)``,
``optimizer.step(grads)``).
"""

from __future__ import annotations

import inspect
import random
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import SharedDraws, assert_records_agree, initializer, port, run_source

EBM_SOURCE = """
import random

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils import data

device = torch.device("cpu") if not torch.cuda.is_available() else torch.device("cuda:0")


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class Scorer(nn.Module):
    # image -> scalar score (minus the energy): 28 (padded to 32) -> 16 -> 8 -> 4 -> 2
    def __init__(self, width=16):
        super().__init__()
        chans = [1, width // 2, width, 2 * width, 2 * width]
        layers = []
        for i, (a, b) in enumerate(zip(chans, chans[1:])):
            k, pad = (5, 4) if i == 0 else (3, 1)
            layers += [nn.Conv2d(a, b, kernel_size=k, stride=2, padding=pad), Swish()]
        layers += [nn.Flatten(), nn.Linear(8 * width, 2 * width), Swish(), nn.Linear(2 * width, 1)]
        self.layers = nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x).squeeze(dim=-1)


def langevin(net, x, steps, step_size, keep_steps=False):
    # SGLD on the images only: the weights are frozen for the walk
    was_training = net.training
    net.eval()
    for p in net.parameters():
        p.requires_grad = False
    x.requires_grad = True
    jitter = torch.randn(x.shape, device=x.device)  # reused each step
    trail = []
    for _ in range(steps):
        jitter.normal_(0, 0.005)
        x.data.add_(jitter.data)
        x.data.clamp_(min=-1.0, max=1.0)
        energy = -net(x)
        energy.sum().backward()
        x.grad.data.clamp_(-0.03, 0.03)
        x.data.add_(-step_size * x.grad.data)
        x.grad.detach_()
        x.grad.zero_()
        x.data.clamp_(min=-1.0, max=1.0)
        if keep_steps:
            trail.append(x.clone().detach())
    for p in net.parameters():
        p.requires_grad = True
    net.train(was_training)
    return torch.stack(trail, dim=0) if keep_steps else x


class ReplayBuffer:
    def __init__(self, net, shape, batch, capacity=8192):
        self.net, self.shape, self.batch, self.capacity = net, shape, batch, capacity
        self.items = [torch.rand((1,) + shape) * 2 - 1 for _ in range(batch)]

    def draw(self, steps, step_size=10):
        fresh = np.random.binomial(self.batch, 0.05)  # mostly old chains, a few restarts
        noise = torch.rand((fresh,) + self.shape) * 2 - 1
        old = torch.cat(random.choices(self.items, k=self.batch - fresh), dim=0)
        x = langevin(self.net, torch.cat([noise, old], dim=0).detach().to(device), steps, step_size)
        self.items = list(x.to(torch.device("cpu")).chunk(self.batch, dim=0)) + self.items
        self.items = self.items[: self.capacity]
        return x


class EnergyModel(pl.LightningModule):
    def __init__(self, img_shape, batch_size, alpha=0.1, lr=1e-4, beta1=0.0, **net_args):
        super().__init__()
        self.save_hyperparameters()
        self.net = Scorer(**net_args)
        self.buffer = ReplayBuffer(self.net, img_shape, batch_size)

    def forward(self, x):
        return self.net(x)

    def configure_optimizers(self) -> tuple:
        # no momentum: the loss surface moves with the weights
        betas = (self.hparams.beta1, 0.999)
        opt = optim.Adam(self.parameters(), lr=self.hparams.lr, betas=betas)
        return [opt], [optim.lr_scheduler.StepLR(opt, 1, gamma=0.97)]

    def scores(self, real, fake):
        return self.net(torch.cat([real, fake], dim=0)).chunk(2, dim=0)

    def training_step(self, batch, index):
        real, _ = batch
        real.add_(torch.randn_like(real) * 0.005).clamp_(min=-1.0, max=1.0)
        fake = self.buffer.draw(steps=sgld_steps)
        on_real, on_fake = self.scores(real, fake)
        penalty = self.hparams.alpha * (on_real**2 + on_fake**2).mean()
        gap = on_fake.mean() - on_real.mean()
        for name, value in [("loss", penalty + gap), ("penalty", penalty), ("gap", gap)]:
            self.log(name, value)
        self.log("real_score", on_real.mean())
        self.log("fake_score", on_fake.mean())
        return penalty + gap

    def validation_step(self, batch, index):
        real, _ = batch
        on_real, on_fake = self.scores(real, torch.rand_like(real) * 2 - 1)
        self.log("val_gap", on_fake.mean() - on_real.mean())
        self.log("val_fake", on_fake.mean())
        self.log("val_real", on_real.mean())


class Dreams(pl.Callback):
    def __init__(self, count, steps):
        super().__init__()
        self.count, self.steps = count, steps

    def generate(self, module):
        module.eval()
        start = torch.rand((self.count,) + module.hparams["img_shape"]).to(module.device) * 2 - 1
        walk = langevin(module.net, start, self.steps, 10, keep_steps=True)
        module.train()
        return walk


class Outliers(pl.Callback):
    def __init__(self, count):
        super().__init__()
        self.count = count

    def on_epoch_end(self, trainer, module):
        with torch.no_grad():
            module.eval()
            noise = torch.rand((self.count,) + module.hparams["img_shape"]).to(module.device)
            score = module.net(noise * 2 - 1.0).mean()
            module.train()
        epoch = trainer.current_epoch
        trainer.logger.experiment.add_scalar("noise_score", score, global_step=epoch)


# -- the test's stand-in for Trainer(gradient_clip_val=0.1).fit: one epoch of one batch --
model = EnergyModel(img_shape=(1, 28, 28), batch_size=4, lr=1e-4, beta1=0.0, width=16)
initialize(model)
optimizers, schedulers = model.configure_optimizers()
optimizer, scheduler = optimizers[0], schedulers[0]
loader = data.DataLoader(mnist, batch_size=4, shuffle=False, drop_last=True)
board = types.SimpleNamespace(add_scalar=lambda tag, v, global_step: logged.append((tag, v.item())))
trainer = types.SimpleNamespace(current_epoch=0, logger=types.SimpleNamespace(experiment=board))
model.train()
loss = model.training_step(next(iter(loader)), 0)
optimizer.zero_grad()
loss.backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)
optimizer.step()
scheduler.step()
model.eval()
with torch.no_grad():
    model.validation_step(next(iter(loader)), 0)
Outliers(8).on_epoch_end(trainer, model)
record.append([tag for tag, _ in logged])
record.append([v for _, v in logged])
record.append({name: t.detach().numpy() for name, t in model.state_dict().items()})
record.append(torch.cat(model.buffer.items).detach().numpy())
record.append(Dreams(4, 12).generate(model).numpy())
record.append([w.requires_grad for w in model.parameters()] + [model.training])
"""

EBM_STEPS = [
    (
        "import torch\nimport torch.nn as nn\nimport torch.optim as optim\n"
        "from torch.utils import data\n",
        "import retrograd as torch\nimport retrograd.nn as nn\nimport retrograd.optim as optim\n"
        "from retrograd.utils import data\n",
    ),
    (
        "        energy.sum().backward()\n        x.grad.data.clamp_(-0.03, 0.03)\n"
        "        x.data.add_(-step_size * x.grad.data)\n"
        "        x.grad.detach_()\n        x.grad.zero_()\n",
        "        grads = energy.sum().backward()\n        x.grad(grads).data.clamp_(-0.03, 0.03)\n"
        "        x.data.add_(-step_size * x.grad(grads).data)\n",
    ),
    (
        "loss.backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.1)\n"
        "optimizer.step()\n",
        "grads = loss.backward()\n"
        "torch.nn.utils.clip_grad_norm_(grads, model.parameters(), max_norm=0.1)\n"
        "optimizer.step(grads)\n",
    ),
]


def lightning_stand_in(lib, logged):
    """The part of ``pytorch_lightning`` the notebook's module uses: ``save_hyperparameters``
    (the ``__init__`` arguments as ``hparams``, by attribute and by key), ``log`` (kept as
    numbers), ``device``; ``Callback`` a plain base."""

    class LightningModule(lib.nn.Module):
        def save_hyperparameters(self):
            caller = inspect.currentframe().f_back
            arguments = inspect.getargvalues(caller)
            values = {name: arguments.locals[name] for name in arguments.args[1:]}
            values.update(arguments.locals.get(arguments.keywords, {}))
            self.hparams = HParams(values)

        def log(self, name, value):
            logged.append((name, float(value.detach())))

        @property
        def device(self):
            return lib.device("cpu")

    class Callback:
        pass

    return types.SimpleNamespace(LightningModule=LightningModule, Callback=Callback)


class HParams(dict):
    """Lightning's ``AttributeDict``: keys read as attributes too."""

    def __getattr__(self, name):
        return self[name]


@pytest.fixture
def shared_in_place_draws(monkeypatch):
    """``Tensor.normal_`` and ``rand_like`` of a library drawing from a seeded stream (each
    library's own generator otherwise)."""

    def for_lib(lib, seed):
        rng = np.random.default_rng(seed + 1)

        def normal_(self, mean=0.0, std=1.0, *, generator=None):
            drawn = lib.tensor(rng.normal(mean, std, tuple(self.shape)), dtype=self.dtype)
            with lib.no_grad():
                self.copy_(drawn)
            return self

        def rand_like(t, **_):
            return lib.tensor(rng.uniform(size=tuple(t.shape)), dtype=t.dtype)

        monkeypatch.setattr(lib.Tensor, "normal_", normal_)
        monkeypatch.setattr(lib, "rand_like", rand_like)

    return for_lib


def test_uvadlc_energy_model_trains_by_sgld_and_generates_as_torch(capsys, shared_in_place_draws):
    initialize, records = initializer(), []
    images = np.random.default_rng(374).uniform(-1, 1, (8, 1, 28, 28)).astype(np.float32)
    labels = np.arange(8) % 10
    torch.manual_seed(374)
    for lib in (torch, rg):
        record, logged = [], []
        np.random.seed(374)
        random.seed(374)
        text = EBM_SOURCE if lib is torch else port(EBM_SOURCE, EBM_STEPS)
        shared_in_place_draws(lib, 374)
        with SharedDraws(lib, 374):
            run_source(
                text,
                lib,
                record=record,
                logged=logged,
                initialize=initialize,
                types=types,
                pl=lightning_stand_in(lib, logged),
                mnist=lib.utils.data.TensorDataset(lib.tensor(images), lib.tensor(labels)),
                sgld_steps=30,
            )
        records.append(record)
    theirs, ours = records
    assert capsys.readouterr().out == ""
    assert theirs[0] == ["loss", "penalty", "gap", "real_score", "fake_score"] + [
        "val_gap",
        "val_fake",
        "val_real",
        "noise_score",
    ]
    # requires_grad restored after MCMC, training mode too
    assert theirs[-1] == [True] * 12 + [True]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
