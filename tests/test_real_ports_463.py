# ruff: noqa: E501  (the programs are kept as their authors wrote them: long lines)
"""Real PyTorch WGAN-GP ported to retrograd (the harness: ``tests/real_ports.py``).

- caogang/wgan-gp ``gan_toy.py`` (8 gaussians, as written but for sizes): ``Generator`` and
  ``Discriminator`` of ``nn.ReLU(True)`` (in place), ``weights_init`` by ``classname.find(
  'Linear')`` and ``m.weight.data.normal_(0.0, 0.02)``, the 8-gaussians generator of
  ``np.random.randn`` and ``random.choice``, ``calc_gradient_penalty`` (``alpha.expand(
  real_data.size())``, ``autograd.Variable(interpolates, requires_grad=True)``,
  ``autograd.grad(outputs=..., inputs=..., grad_outputs=torch.ones(disc_interpolates.size()),
  create_graph=True, retain_graph=True, only_inputs=True)[0]``, ``gradients.norm(2, dim=1)``);
  the critic's gradients accumulated over three backwards (``D_real.backward(mone)``,
  ``D_fake.backward(one)``, ``gradient_penalty.backward()``) before one Adam step (the port sums
  the returned ``Gradients``), ``autograd.Variable(noise, volatile=True)``, ``autograd.Variable(
  netG(...).data)``, ``p.requires_grad = False`` over the critic for the generator's step, and
  ``D_cost.cpu().data.numpy()`` handed to ``tflib.plot``.

Changed in both runs, as the script does not run on Python 3 and today's torch otherwise:
``data.next()`` is ``next(data)``, and ``one = torch.FloatTensor([1])`` is ``torch.tensor(1,
dtype=torch.float)`` (torch refuses a ``[1]`` gradient for a 0-d output, as retrograd does);
``DIM``, ``BATCH_SIZE`` and ``ITERS`` are smaller, ``use_cuda`` is off, the plotting imports
are left out, ``tflib.plot`` is a recorder. Both runs start from torch's weights, and
draw ``torch.rand``/``randn`` from one stream.
"""

import random
import sys
import types

import numpy as np
import pytest
import torch
from tests.real_ports import (
    SharedDraws,
    assert_records_agree,
    global_streams_restored,  # noqa: F401  (a fixture)
    initializer,
    port,
    ported_imports,
    run_source,
)

import retrograd as rg

GAN_TOY_SOURCE = """
import os, sys

import random

import numpy as np

import tflib as lib
import tflib.plot

import torch
import torch.autograd as autograd
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

torch.manual_seed(1)


MODE = 'wgan-gp'  # wgan or wgan-gp
DATASET = '8gaussians'  # 8gaussians, 25gaussians, swissroll
DIM = 32  # Model dimensionality
FIXED_GENERATOR = False  # whether to hold the generator fixed at real data plus
# Gaussian noise, as in the plots in the paper
LAMBDA = .1  # Smaller lambda seems to help for toy tasks specifically
CRITIC_ITERS = 5  # How many critic iterations per generator iteration
BATCH_SIZE = 16  # Batch size
ITERS = 3  # how many generator iterations to train for
use_cuda = False

# ==================Definition Start======================

class Generator(nn.Module):

    def __init__(self):
        super(Generator, self).__init__()

        main = nn.Sequential(
            nn.Linear(2, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, 2),
        )
        self.main = main

    def forward(self, noise, real_data):
        if FIXED_GENERATOR:
            return noise + real_data
        else:
            output = self.main(noise)
            return output


class Discriminator(nn.Module):

    def __init__(self):
        super(Discriminator, self).__init__()

        main = nn.Sequential(
            nn.Linear(2, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, DIM),
            nn.ReLU(True),
            nn.Linear(DIM, 1),
        )
        self.main = main

    def forward(self, inputs):
        output = self.main(inputs)
        return output.view(-1)


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        m.weight.data.normal_(0.0, 0.02)
        m.bias.data.fill_(0)
    elif classname.find('BatchNorm') != -1:
        m.weight.data.normal_(1.0, 0.02)
        m.bias.data.fill_(0)


# Dataset iterator
def inf_train_gen():
    if DATASET == '25gaussians':

        dataset = []
        for i in range(100000 / 25):
            for x in range(-2, 3):
                for y in range(-2, 3):
                    point = np.random.randn(2) * 0.05
                    point[0] += 2 * x
                    point[1] += 2 * y
                    dataset.append(point)
        dataset = np.array(dataset, dtype='float32')
        np.random.shuffle(dataset)
        dataset /= 2.828  # stdev
        while True:
            for i in range(len(dataset) / BATCH_SIZE):
                yield dataset[i * BATCH_SIZE:(i + 1) * BATCH_SIZE]

    elif DATASET == '8gaussians':

        scale = 2.
        centers = [
            (1, 0),
            (-1, 0),
            (0, 1),
            (0, -1),
            (1. / np.sqrt(2), 1. / np.sqrt(2)),
            (1. / np.sqrt(2), -1. / np.sqrt(2)),
            (-1. / np.sqrt(2), 1. / np.sqrt(2)),
            (-1. / np.sqrt(2), -1. / np.sqrt(2))
        ]
        centers = [(scale * x, scale * y) for x, y in centers]
        while True:
            dataset = []
            for i in range(BATCH_SIZE):
                point = np.random.randn(2) * .02
                center = random.choice(centers)
                point[0] += center[0]
                point[1] += center[1]
                dataset.append(point)
            dataset = np.array(dataset, dtype='float32')
            dataset /= 1.414  # stdev
            yield dataset


def calc_gradient_penalty(netD, real_data, fake_data):
    alpha = torch.rand(BATCH_SIZE, 1)
    alpha = alpha.expand(real_data.size())
    alpha = alpha.cuda() if use_cuda else alpha

    interpolates = alpha * real_data + ((1 - alpha) * fake_data)

    if use_cuda:
        interpolates = interpolates.cuda()
    interpolates = autograd.Variable(interpolates, requires_grad=True)

    disc_interpolates = netD(interpolates)

    gradients = autograd.grad(outputs=disc_interpolates, inputs=interpolates,
                              grad_outputs=torch.ones(disc_interpolates.size()).cuda() if use_cuda else torch.ones(
                                  disc_interpolates.size()),
                              create_graph=True, retain_graph=True, only_inputs=True)[0]

    gradient_penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean() * LAMBDA
    return gradient_penalty

# ==================Definition End======================

netG = Generator()
netD = Discriminator()
netD.apply(weights_init)
netG.apply(weights_init)
print(netG)
print(netD)
initialize(netG)
initialize(netD)

if use_cuda:
    netD = netD.cuda()
    netG = netG.cuda()

optimizerD = optim.Adam(netD.parameters(), lr=1e-4, betas=(0.5, 0.9))
optimizerG = optim.Adam(netG.parameters(), lr=1e-4, betas=(0.5, 0.9))

one = torch.tensor(1, dtype=torch.float)
mone = one * -1
if use_cuda:
    one = one.cuda()
    mone = mone.cuda()

data = inf_train_gen()

for iteration in range(ITERS):
    ############################
    # (1) Update D network
    ###########################
    for p in netD.parameters():  # reset requires_grad
        p.requires_grad = True  # they are set to False below in netG update

    for iter_d in range(CRITIC_ITERS):
        _data = next(data)
        real_data = torch.Tensor(_data)
        if use_cuda:
            real_data = real_data.cuda()
        real_data_v = autograd.Variable(real_data)

        netD.zero_grad()

        # train with real
        D_real = netD(real_data_v)
        D_real = D_real.mean()
        D_real.backward(mone)

        # train with fake
        noise = torch.randn(BATCH_SIZE, 2)
        if use_cuda:
            noise = noise.cuda()
        noisev = autograd.Variable(noise, volatile=True)  # totally freeze netG
        fake = autograd.Variable(netG(noisev, real_data_v).data)
        inputv = fake
        D_fake = netD(inputv)
        D_fake = D_fake.mean()
        D_fake.backward(one)

        # train with gradient penalty
        gradient_penalty = calc_gradient_penalty(netD, real_data_v.data, fake.data)
        gradient_penalty.backward()

        D_cost = D_fake - D_real + gradient_penalty
        Wasserstein_D = D_real - D_fake
        optimizerD.step()

    if not FIXED_GENERATOR:
        ############################
        # (2) Update G network
        ###########################
        for p in netD.parameters():
            p.requires_grad = False  # to avoid computation
        netG.zero_grad()

        _data = next(data)
        real_data = torch.Tensor(_data)
        if use_cuda:
            real_data = real_data.cuda()
        real_data_v = autograd.Variable(real_data)

        noise = torch.randn(BATCH_SIZE, 2)
        if use_cuda:
            noise = noise.cuda()
        noisev = autograd.Variable(noise)
        fake = netG(noisev, real_data_v)
        G = netD(fake)
        G = G.mean()
        G.backward(mone)
        G_cost = -G
        optimizerG.step()

    # Write logs and save samples
    lib.plot.plot('tmp/' + DATASET + '/' + 'disc cost', D_cost.cpu().data.numpy())
    lib.plot.plot('tmp/' + DATASET + '/' + 'wasserstein distance', Wasserstein_D.cpu().data.numpy())
    if not FIXED_GENERATOR:
        lib.plot.plot('tmp/' + DATASET + '/' + 'gen cost', G_cost.cpu().data.numpy())
    if iteration % 100 == 99:
        lib.plot.flush()
        generate_image(_data)
    lib.plot.tick()

record(state_of(netD))
record(state_of(netG))
"""

STEPS = [
    ("import torch\n", "import retrograd as torch\n"),
    ("import torch.autograd as autograd\n", "import retrograd.autograd as autograd\n"),
    ("import torch.nn as nn\n", "import retrograd.nn as nn\n"),
    ("import torch.nn.functional as F\n", "import retrograd.nn.functional as F\n"),
    ("import torch.optim as optim\n", "import retrograd.optim as optim\n"),
    ("        netD.zero_grad()\n", ""),
    ("        netG.zero_grad()\n", ""),
    ("        D_real.backward(mone)", "        grads = D_real.backward(mone)"),
    ("        D_fake.backward(one)", "        grads = grads + D_fake.backward(one)"),
    ("        gradient_penalty.backward()", "        grads = grads + gradient_penalty.backward()"),
    ("        optimizerD.step()", "        optimizerD.step(grads)"),
    ("        G.backward(mone)", "        grads = G.backward(mone)"),
    ("        optimizerG.step()", "        optimizerG.step(grads)"),
]


def state_of(model):
    return {k: np.array(v.detach().numpy(), copy=True) for k, v in model.state_dict().items()}


@pytest.mark.usefixtures("global_streams_restored")
def test_caogang_wgan_gp_toy_trains_as_torch(capsys, monkeypatch):
    torch.manual_seed(0)
    initialize = initializer()
    records = []
    for lib in (torch, rg):
        record = []
        np.random.seed(463)
        random.seed(463)
        plot = types.ModuleType("tflib.plot")
        plot.plot = lambda name, value, record=record: record.append((name, float(value)))
        plot.flush = plot.tick = lambda: None
        tflib = types.ModuleType("tflib")
        tflib.plot = plot
        monkeypatch.setitem(sys.modules, "tflib", tflib)
        monkeypatch.setitem(sys.modules, "tflib.plot", plot)
        source = GAN_TOY_SOURCE if lib is torch else ported_imports(port(GAN_TOY_SOURCE, STEPS))
        with SharedDraws(lib, 463):
            run_source(
                source,
                lib,
                record=record.append,
                initialize=initialize,
                state_of=state_of,
            )
        records.append(record)
    capsys.readouterr()
    theirs, ours = records
    assert [r[0] for r in ours[:-2]] == [r[0] for r in theirs[:-2]]
    assert_records_agree(
        [r[1] for r in ours[:-2]], [r[1] for r in theirs[:-2]], rtol=1e-4, atol=1e-6
    )
    assert_records_agree(ours[-2:], theirs[-2:], rtol=1e-4, atol=1e-6)
