"""Real ports, continued (the harness: ``tests/real_ports.py``): two adversarial trainings
written here in the style of public repositories, each run on torch and, ported, on retrograd
from the same weights and draws (in float64), every record compared.

- CycleGAN in the style of junyanz/pytorch-CycleGAN-and-pix2pix, small: norm layers as
  ``functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)`` (or
  ``BatchNorm2d``) with ``type(norm) == functools.partial`` and ``norm.func ==
  nn.InstanceNorm2d`` deciding the conv biases, ``ReflectionPad2d``,
  ``ConvTranspose2d(output_padding=1)``, ``nn.ReLU(True)`` and ``nn.LeakyReLU(0.2, True)``,
  weights initialized over the nets by class name (``init.normal_(m.weight.data, 0.0,
  gain)``), an adversarial loss with ``register_buffer`` of ``torch.tensor(1.0)`` labels
  ``expand_as`` the prediction (LSGAN's ``MSELoss`` or vanilla's ``BCEWithLogitsLoss``), a pool
  of past fakes by ``torch.unsqueeze(images.data, 1)`` with Python's ``random``, two Adams over
  ``itertools.chain`` of two nets' parameters, the discriminators frozen by
  ``param.requires_grad = False`` during the generators' step, both discriminators' gradients
  summed before one step, and a linear-decay ``LambdaLR``.
- DANN in the style of fungtion/DANN: the gradient reversal layer as a
  ``torch.autograd.Function`` (``ctx.alpha``, ``x.view_as(x)``, ``grad.neg() * ctx.alpha`` and
  ``None`` for ``alpha``, applied with a NumPy float), ``nn.Sequential()`` grown by
  ``add_module``, ``images.expand(n, 3, 28, 28)`` of one-channel images, ``Dropout2d``,
  ``net.zero_grad()``, the ``alpha`` schedule ``2.0 / (1.0 + np.exp(-10 * p)) - 1``,
  ``torch.zeros(n).long()`` domain labels, and the evaluation's ``hits.data.numpy() * 1.0 /
  seen``.

The ports change the gradient lines; CycleGAN's two discriminators' gradients are summed
(``grads_D + grads``), where torch sums them into ``.grad``.
"""

from __future__ import annotations

import contextlib
import types

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree
from test_real_ports_15 import _run

CYCLEGAN_SOURCE = '''
# Unpaired image-to-image translation in the CycleGAN style: two ResNet generators (A->B,
# B->A), two PatchGAN discriminators, cycle and identity losses, pools of past fakes, a
# linearly decaying learning rate.
import functools
import itertools
import random
from torch.nn import init
from torch.optim.lr_scheduler import LambdaLR


def norm_factory(kind):
    if kind == "batch":
        return functools.partial(nn.BatchNorm2d, affine=True, track_running_stats=True)
    if kind == "instance":
        return functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)
    raise ValueError(kind)


def convs_need_bias(norm):
    # an affine batch norm supplies the shift; a non-affine instance norm does not
    if type(norm) == functools.partial:
        return norm.func == nn.InstanceNorm2d
    return norm == nn.InstanceNorm2d


def linear_decay(optimizer, opt):
    def factor(epoch):
        past = max(0, epoch + opt.epoch_count - opt.n_epochs)
        return 1.0 - past / float(opt.n_epochs_decay + 1)

    return LambdaLR(optimizer, lr_lambda=factor)


def initialize(net, gain=0.02):
    def visit(m):
        kind = m.__class__.__name__
        if hasattr(m, "weight") and (kind.find("Conv") != -1 or kind.find("Linear") != -1):
            init.normal_(m.weight.data, 0.0, gain)
            if getattr(m, "bias", None) is not None:
                init.zeros_(m.bias.data)
        elif kind.find("BatchNorm2d") != -1:
            init.normal_(m.weight.data, 1.0, gain)
            init.zeros_(m.bias.data)

    net.apply(visit)


class AdversarialLoss(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.register_buffer("real_label", torch.tensor(1.0))
        self.register_buffer("fake_label", torch.tensor(0.0))
        self.criterion = {"lsgan": nn.MSELoss, "vanilla": nn.BCEWithLogitsLoss}[mode]()

    def __call__(self, prediction, is_real):
        label = self.real_label if is_real else self.fake_label
        return self.criterion(prediction, label.expand_as(prediction))


class Residual(nn.Module):
    def __init__(self, dim, norm, bias):
        super().__init__()
        def padded_conv():
            return [nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, bias=bias), norm(dim)]

        self.conv_block = nn.Sequential(*padded_conv(), nn.ReLU(True), *padded_conv())

    def forward(self, x):
        return x + self.conv_block(x)


class ResidualGenerator(nn.Module):
    def __init__(self, n_in, n_out, width, norm, n_blocks=2):
        super().__init__()
        bias = convs_need_bias(norm)
        layers = [nn.ReflectionPad2d(3), nn.Conv2d(n_in, width, kernel_size=7, bias=bias)]
        layers += [norm(width), nn.ReLU(True)]
        for k in (1, 2):  # two stride-2 downsamplings, doubling the channels
            c = width * 2 ** (k - 1)
            down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1, bias=bias)
            layers += [down, norm(2 * c), nn.ReLU(True)]
        layers += [Residual(4 * width, norm, bias) for _ in range(n_blocks)]
        for k in (2, 1):  # and back up
            c = width * 2**k
            up = nn.ConvTranspose2d(c, c // 2, 3, stride=2, padding=1, output_padding=1, bias=bias)
            layers += [up, norm(c // 2), nn.ReLU(True)]
        layers += [nn.ReflectionPad2d(3), nn.Conv2d(width, n_out, kernel_size=7), nn.Tanh()]
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class PatchDiscriminator(nn.Module):
    def __init__(self, n_in, width, norm):
        super().__init__()
        bias = convs_need_bias(norm)
        layers = [nn.Conv2d(n_in, width, 4, stride=2, padding=1), nn.LeakyReLU(0.2, True)]
        for stride, (a, b) in zip((2, 1), [(1, 2), (2, 4)]):
            conv = nn.Conv2d(width * a, width * b, 4, stride=stride, padding=1, bias=bias)
            layers += [conv, norm(width * b), nn.LeakyReLU(0.2, True)]
        layers.append(nn.Conv2d(width * 4, 1, 4, stride=1, padding=1))  # a map of patch scores
        self.model = nn.Sequential(*layers)

    def forward(self, x):
        return self.model(x)


class FakePool:
    """Past generated images: half the time a batch entry is swapped for an older one."""

    def __init__(self, size):
        self.size, self.stored = size, []

    def query(self, images):
        if self.size == 0:
            return images
        out = []
        for image in torch.unsqueeze(images.data, 1):  # batches of one, off the graph
            if len(self.stored) < self.size:
                self.stored.append(image)
                out.append(image)
            elif random.uniform(0, 1) > 0.5:
                k = random.randint(0, self.size - 1)
                out.append(self.stored[k].clone())
                self.stored[k] = image
            else:
                out.append(image)
        return torch.cat(out, 0)


class CycleGAN:
    def __init__(self, opt, G_AB, G_BA, D_B, D_A):
        self.opt, self.G_AB, self.G_BA, self.D_B, self.D_A = opt, G_AB, G_BA, D_B, D_A
        self.pool_A, self.pool_B = FakePool(opt.pool_size), FakePool(opt.pool_size)
        self.adversarial, self.l1 = AdversarialLoss(opt.gan_mode), torch.nn.L1Loss()
        def adam(a, b):
            both = itertools.chain(a.parameters(), b.parameters())
            return torch.optim.Adam(both, lr=opt.lr, betas=(opt.beta1, 0.999))

        self.opt_G, self.opt_D = adam(G_AB, G_BA), adam(D_B, D_A)
        self.schedulers = [linear_decay(o, opt) for o in (self.opt_G, self.opt_D)]
        self.losses = {}

    def freeze_discriminators(self, frozen):
        for net in (self.D_B, self.D_A):
            for p in net.parameters():
                p.requires_grad = not frozen

    def generator_loss(self, real_A, real_B):
        o = self.opt
        fake_B, fake_A = self.G_AB(real_A), self.G_BA(real_B)
        terms = {
            "G_A": self.adversarial(self.D_B(fake_B), True),
            "G_B": self.adversarial(self.D_A(fake_A), True),
            "cycle_A": self.l1(self.G_BA(fake_B), real_A) * o.lambda_A,
            "cycle_B": self.l1(self.G_AB(fake_A), real_B) * o.lambda_B,
            "idt_A": self.l1(self.G_AB(real_B), real_B) * o.lambda_B * o.lambda_identity,
            "idt_B": self.l1(self.G_BA(real_A), real_A) * o.lambda_A * o.lambda_identity,
        }
        self.losses.update(terms)
        return sum(terms.values()), fake_A, fake_B

    def discriminator_loss(self, D, real, fake):
        # least squares (or logistic) on real images against pooled fakes, halved
        loss = (self.adversarial(D(real), True) + self.adversarial(D(fake.detach()), False)) * 0.5
        return loss

    def train_step(self, real_A, real_B):
        self.freeze_discriminators(True)
        self.opt_G.zero_grad()
        loss_G, fake_A, fake_B = self.generator_loss(real_A, real_B)
        loss_G.backward()
        self.opt_G.step()

        self.freeze_discriminators(False)
        self.opt_D.zero_grad()
        for name, D, real, pool, fake in (("D_A", self.D_B, real_B, self.pool_B, fake_B),
                                          ("D_B", self.D_A, real_A, self.pool_A, fake_A)):
            loss_D = self.discriminator_loss(D, real, pool.query(fake))
            loss_D.backward()  # the two discriminators' gradients add up in .grad
            self.losses[name] = loss_D
        self.opt_D.step()

    def end_epoch(self):
        before = self.opt_G.param_groups[0]["lr"]
        for schedule in self.schedulers:
            schedule.step()
        print("learning rate %.7f -> %.7f" % (before, self.opt_G.param_groups[0]["lr"]))


def build(opt):
    norm = norm_factory(opt.norm)
    nets = [
        ResidualGenerator(opt.input_nc, opt.output_nc, opt.ngf, norm),
        ResidualGenerator(opt.output_nc, opt.input_nc, opt.ngf, norm),
        PatchDiscriminator(opt.output_nc, opt.ndf, norm),
        PatchDiscriminator(opt.input_nc, opt.ndf, norm),
    ]
    for net in nets:
        initialize(net, gain=opt.init_gain)
    return nets


def main(opt, nets, dataset):
    gan = CycleGAN(opt, *nets)
    order = ["D_A", "G_A", "cycle_A", "idt_A", "D_B", "G_B", "cycle_B", "idt_B"]
    log = []
    last = opt.n_epochs + opt.n_epochs_decay
    for epoch in range(opt.epoch_count, last + 1):
        for pair in dataset:
            gan.train_step(pair["A"], pair["B"])
            log.append([float(gan.losses[name]) for name in order])
        gan.end_epoch()
        log.append(gan.opt_D.param_groups[0]["lr"])
    for net in nets:
        log.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return log
'''

CYCLEGAN_STEP = [
    (
        "        loss_G.backward()\n        self.opt_G.step()",
        "        grads = loss_G.backward()\n        self.opt_G.step(grads)",
    ),
    (
        "        self.opt_D.zero_grad()\n",
        "        self.opt_D.zero_grad()\n        grads_D = None\n",
    ),
    (
        "            loss_D.backward()  # the two discriminators' gradients add up in .grad\n",
        "            grads = loss_D.backward()\n"
        "            grads_D = grads if grads_D is None else grads_D + grads\n",
    ),
    ("        self.opt_D.step()", "        self.opt_D.step(grads_D)"),
]


@pytest.mark.parametrize(("gan_mode", "norm"), [("lsgan", "instance"), ("vanilla", "batch")])
def test_cyclegan_training_matches_torch(monkeypatch, capsys, gan_mode, norm):
    opt = types.SimpleNamespace(
        input_nc=3, output_nc=3, ngf=4, ndf=4, norm=norm, no_dropout=True, init_type="normal",
        init_gain=0.02, pool_size=2, gan_mode=gan_mode, lr=2e-3, beta1=0.5, lr_policy="linear",
        epoch_count=1, n_epochs=1, n_epochs_decay=1, direction="AtoB", lambda_identity=0.5,
        lambda_A=10.0, lambda_B=10.0,
    )  # fmt: skip
    rng = np.random.default_rng(50)
    images = rng.uniform(-1, 1, (3, 2, 1, 3, 16, 16))

    def go(names, lib, models):
        dataset = [{"A": lib.tensor(a), "B": lib.tensor(b)} for a, b in images]
        return names["main"](opt, list(models), dataset)

    # float64: Adam's first steps move each weight by about lr whatever its gradient's size,
    # so in float32 the weights whose gradients are rounding noise would wander apart
    with default_float64():
        records = _run(
            monkeypatch,
            CYCLEGAN_SOURCE,
            CYCLEGAN_STEP,
            51,
            lambda names: tuple(names["build"](opt)),
            go,
        )
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-8, skip=_cancelled_biases(norm))


def _cancelled_biases(norm):
    """The biases of the convolutions an InstanceNorm2d(affine=False) follows: the norm takes
    out every constant per channel, so their true gradient is 0 and Adam follows the rounding
    noise (the BatchNorm nets have no such biases)."""
    if norm != "instance":
        return []
    generator = [1, 4, 7, 12, 15] + [f"{b}.conv_block.{c}" for b in (10, 11) for c in (1, 5)]
    discriminator = [2, 5]
    return [f"model.{i}.bias" for i in generator + discriminator]


@contextlib.contextmanager
def default_float64():
    saved = torch.get_default_dtype(), rg.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    rg.set_default_dtype(rg.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(saved[0])
        rg.set_default_dtype(saved[1])


# -- DANN ------------------------------------------------------------------------------------------
DANN_SOURCE = """
# Domain-adversarial training (DANN) of a digit classifier: a shared feature extractor, a
# label head, and a domain head behind a gradient reversal layer whose strength ramps up.
from torch import autograd


class GradReverse(autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad.neg() * ctx.alpha, None


def sequential(**layers):
    seq = nn.Sequential()
    for name, layer in layers.items():
        seq.add_module(name, layer)
    return seq


class DomainAdversarialNet(nn.Module):
    def __init__(self, width=16, hidden=32):
        super().__init__()
        self.width = width
        self.features = sequential(
            conv1=nn.Conv2d(3, width, kernel_size=5), bn1=nn.BatchNorm2d(width),
            pool1=nn.MaxPool2d(2), relu1=nn.ReLU(True),
            conv2=nn.Conv2d(width, width, kernel_size=5), bn2=nn.BatchNorm2d(width),
            drop=nn.Dropout2d(), pool2=nn.MaxPool2d(2), relu2=nn.ReLU(True),
        )
        n_flat = width * 4 * 4
        self.label_head = sequential(
            fc1=nn.Linear(n_flat, hidden), bn1=nn.BatchNorm1d(hidden), relu1=nn.ReLU(True),
            drop=nn.Dropout(), fc2=nn.Linear(hidden, hidden), bn2=nn.BatchNorm1d(hidden),
            relu2=nn.ReLU(True), out=nn.Linear(hidden, 10), log_softmax=nn.LogSoftmax(dim=1),
        )
        self.domain_head = sequential(
            fc1=nn.Linear(n_flat, hidden), bn1=nn.BatchNorm1d(hidden), relu1=nn.ReLU(True),
            out=nn.Linear(hidden, 2), log_softmax=nn.LogSoftmax(dim=1),
        )

    def forward(self, images, alpha):
        # grey source digits are broadcast to the target's three channels
        images = images.expand(images.data.shape[0], 3, 28, 28)
        f = self.features(images).view(-1, self.width * 4 * 4)
        return self.label_head(f), self.domain_head(GradReverse.apply(f, alpha))


def accuracy(net, batches):
    net = net.eval()
    hits, seen = 0, 0
    with torch.no_grad():
        for images, labels in batches:
            guess = net(images, alpha=0)[0].data.max(1, keepdim=True)[1]
            hits += guess.eq(labels.data.view_as(guess)).cpu().sum()
            seen += len(labels)
    return hits.data.numpy() * 1.0 / seen


def main(net, source, target, n_epochs=2, lr=1e-3):
    log = []
    optimizer = optim.Adam(net.parameters(), lr=lr)
    nll = torch.nn.NLLLoss()
    steps = min(len(source), len(target))
    for epoch in range(n_epochs):
        for i, ((s_img, s_label), (t_img, _)) in enumerate(zip(source, target)):
            progress = (i + epoch * steps) / n_epochs / steps
            alpha = 2.0 / (1.0 + np.exp(-10 * progress)) - 1  # a NumPy float, 0 -> 1
            net.zero_grad()
            s_class, s_domain = net(s_img, alpha=alpha)
            label_loss = nll(s_class, s_label)
            source_domain_loss = nll(s_domain, torch.zeros(len(s_label)).long())
            _, t_domain = net(t_img, alpha=alpha)
            target_domain_loss = nll(t_domain, torch.ones(len(t_img)).long())
            total = label_loss + source_domain_loss + target_domain_loss
            total.backward()
            optimizer.step()
            log.append([label_loss.data.cpu().numpy(), source_domain_loss.data.cpu().numpy(),
                        target_domain_loss.data.cpu().item()])
        net.train()
    log.append(float(accuracy(net, target)))
    log.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return log
"""

DANN_STEP = [
    (
        "            total.backward()\n            optimizer.step()",
        "            grads = total.backward()\n            optimizer.step(grads)",
    )
]


def test_dann_with_a_gradient_reversal_function_matches_torch(monkeypatch):
    rng = np.random.default_rng(70)
    source = [(rng.uniform(0, 1, (2, 1, 28, 28)), rng.integers(0, 10, 2)) for _ in range(2)]
    target = [(rng.uniform(0, 1, (2, 3, 28, 28)), rng.integers(0, 10, 2)) for _ in range(2)]

    def go(names, lib, models):
        def loader(batches):
            return [(lib.tensor(x), lib.tensor(y)) for x, y in batches]

        return names["main"](models[0], loader(source), loader(target))

    # float64, as CycleGAN's: in float32 the convolutions' weights whose gradients are
    # rounding noise take Adam steps of either sign
    with default_float64():
        records = _run(
            monkeypatch,
            DANN_SOURCE,
            DANN_STEP,
            71,
            lambda names: (names["DomainAdversarialNet"](),),
            go,
        )
    # the biases before each BatchNorm are taken out by it: their true gradient is 0
    cancelled = [
        "features.conv1.bias", "features.conv2.bias", "label_head.fc1.bias",
        "label_head.fc2.bias", "domain_head.fc1.bias",
    ]  # fmt: skip
    cancelled += [
        name.replace("conv", "bn").replace("fc", "bn").replace(".bias", ".running_mean")
        for name in cancelled
    ]
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-8, skip=cancelled)
