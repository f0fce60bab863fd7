# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- CycleGAN (github.com/junyanz/pytorch-CycleGAN-and-pix2pix ``models/networks.py``,
  ``models/cycle_gan_model.py``, ``util/image_pool.py``, the ``BaseModel`` methods it uses),
  small: norm layers as ``functools.partial(nn.InstanceNorm2d, affine=False,
  track_running_stats=False)`` (or ``BatchNorm2d``) with ``type(norm_layer) ==
  functools.partial`` and ``norm_layer.func == nn.InstanceNorm2d`` deciding the conv biases,
  ``ReflectionPad2d``, ``ConvTranspose2d(output_padding=1)``, ``nn.ReLU(True)`` and
  ``nn.LeakyReLU(0.2, True)``, ``init_weights`` applied over the nets by class name
  (``init.normal_(m.weight.data, 0.0, gain)``), ``GANLoss`` with ``register_buffer`` of
  ``torch.tensor(1.0)`` labels ``expand_as`` the prediction (LSGAN's ``MSELoss`` or vanilla's
  ``BCEWithLogitsLoss``), the ``ImagePool`` of ``torch.unsqueeze(image.data, 0)`` with Python's
  ``random``, two Adams over ``itertools.chain`` of two nets' parameters, the discriminators
  frozen by ``param.requires_grad = False`` during the generators' step, both discriminators'
  gradients summed before one step, and the linear-decay ``LambdaLR``.

- DANN (github.com/fungtion/DANN ``models/functions.py``, ``models/model.py``, ``main.py``,
  ``test.py``): the gradient reversal layer as a ``torch.autograd.Function`` (``ctx.alpha``,
  ``x.view_as(x)``, ``grad_output.neg() * ctx.alpha`` and ``None`` for ``alpha``, applied with
  a NumPy float), ``nn.Sequential()`` grown by ``add_module``, ``input_data.expand(n, 3, 28,
  28)`` of one-channel images, ``Dropout2d``, ``my_net.zero_grad()``, the ``alpha`` schedule
  ``2. / (1. + np.exp(-10 * p)) - 1``, ``torch.zeros(batch_size).long()`` domain labels, and the
  test loop's ``n_correct.data.numpy() * 1.0 / n_total``.

The ports change the gradient lines; CycleGAN's two discriminators' gradients are summed
(``self.grads_D + grads``), where torch sums them into ``.grad``. Both ran unchanged otherwise.
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
import functools
import itertools
import random
from torch.nn import init
from torch.optim import lr_scheduler


class Identity(nn.Module):
    def forward(self, x):
        return x


def get_norm_layer(norm_type='instance'):
    """Return a normalization layer

    Parameters:
        norm_type (str) -- the name of the normalization layer: batch | instance | none

    For BatchNorm, we use learnable affine parameters and track running statistics (mean/stddev).
    For InstanceNorm, we do not use learnable affine parameters. We do not track running statistics.
    """
    if norm_type == 'batch':
        norm_layer = functools.partial(nn.BatchNorm2d, affine=True, track_running_stats=True)
    elif norm_type == 'instance':
        norm_layer = functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)
    elif norm_type == 'none':
        def norm_layer(x):
            return Identity()
    else:
        raise NotImplementedError('normalization layer [%s] is not found' % norm_type)
    return norm_layer


def get_scheduler(optimizer, opt):
    """Return a learning rate scheduler
    """
    if opt.lr_policy == 'linear':
        def lambda_rule(epoch):
            lr_l = 1.0 - max(0, epoch + opt.epoch_count - opt.n_epochs) / float(opt.n_epochs_decay + 1)
            return lr_l
        scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lambda_rule)
    elif opt.lr_policy == 'step':
        scheduler = lr_scheduler.StepLR(optimizer, step_size=opt.lr_decay_iters, gamma=0.1)
    elif opt.lr_policy == 'plateau':
        scheduler = lr_scheduler.ReduceLROnPlateau(optimizer, mode='min', factor=0.2, threshold=0.01, patience=5)
    elif opt.lr_policy == 'cosine':
        scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=opt.n_epochs, eta_min=0)
    else:
        return NotImplementedError('learning rate policy [%s] is not implemented', opt.lr_policy)
    return scheduler


def init_weights(net, init_type='normal', init_gain=0.02):
    """Initialize network weights.
    """
    def init_func(m):  # define the initialization function
        classname = m.__class__.__name__
        if hasattr(m, 'weight') and (classname.find('Conv') != -1 or classname.find('Linear') != -1):
            if init_type == 'normal':
                init.normal_(m.weight.data, 0.0, init_gain)
            elif init_type == 'xavier':
                init.xavier_normal_(m.weight.data, gain=init_gain)
            elif init_type == 'kaiming':
                init.kaiming_normal_(m.weight.data, a=0, mode='fan_in')
            elif init_type == 'orthogonal':
                init.orthogonal_(m.weight.data, gain=init_gain)
            else:
                raise NotImplementedError('initialization method [%s] is not implemented' % init_type)
            if hasattr(m, 'bias') and m.bias is not None:
                init.constant_(m.bias.data, 0.0)
        elif classname.find('BatchNorm2d') != -1:  # BatchNorm Layer's weight is not a matrix; only normal distribution applies.
            init.normal_(m.weight.data, 1.0, init_gain)
            init.constant_(m.bias.data, 0.0)

    print('initialize network with %s' % init_type)
    net.apply(init_func)  # apply the initialization function <init_func>


class GANLoss(nn.Module):
    """Define different GAN objectives.
    """

    def __init__(self, gan_mode, target_real_label=1.0, target_fake_label=0.0):
        super(GANLoss, self).__init__()
        self.register_buffer('real_label', torch.tensor(target_real_label))
        self.register_buffer('fake_label', torch.tensor(target_fake_label))
        self.gan_mode = gan_mode
        if gan_mode == 'lsgan':
            self.loss = nn.MSELoss()
        elif gan_mode == 'vanilla':
            self.loss = nn.BCEWithLogitsLoss()
        elif gan_mode in ['wgangp']:
            self.loss = None
        else:
            raise NotImplementedError('gan mode %s not implemented' % gan_mode)

    def get_target_tensor(self, prediction, target_is_real):
        if target_is_real:
            target_tensor = self.real_label
        else:
            target_tensor = self.fake_label
        return target_tensor.expand_as(prediction)

    def __call__(self, prediction, target_is_real):
        if self.gan_mode in ['lsgan', 'vanilla']:
            target_tensor = self.get_target_tensor(prediction, target_is_real)
            loss = self.loss(prediction, target_tensor)
        elif self.gan_mode == 'wgangp':
            if target_is_real:
                loss = -prediction.mean()
            else:
                loss = prediction.mean()
        return loss


class ResnetGenerator(nn.Module):
    """Resnet-based generator that consists of Resnet blocks between a few downsampling/upsampling operations.
    """

    def __init__(self, input_nc, output_nc, ngf=64, norm_layer=nn.BatchNorm2d, use_dropout=False, n_blocks=6, padding_type='reflect'):
        assert(n_blocks >= 0)
        super(ResnetGenerator, self).__init__()
        if type(norm_layer) == functools.partial:
            use_bias = norm_layer.func == nn.InstanceNorm2d
        else:
            use_bias = norm_layer == nn.InstanceNorm2d

        model = [nn.ReflectionPad2d(3),
                 nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                 norm_layer(ngf),
                 nn.ReLU(True)]

        n_downsampling = 2
        for i in range(n_downsampling):  # add downsampling layers
            mult = 2 ** i
            model += [nn.Conv2d(ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=1, bias=use_bias),
                      norm_layer(ngf * mult * 2),
                      nn.ReLU(True)]

        mult = 2 ** n_downsampling
        for i in range(n_blocks):       # add ResNet blocks

            model += [ResnetBlock(ngf * mult, padding_type=padding_type, norm_layer=norm_layer, use_dropout=use_dropout, use_bias=use_bias)]

        for i in range(n_downsampling):  # add upsampling layers
            mult = 2 ** (n_downsampling - i)
            model += [nn.ConvTranspose2d(ngf * mult, int(ngf * mult / 2),
                                         kernel_size=3, stride=2,
                                         padding=1, output_padding=1,
                                         bias=use_bias),
                      norm_layer(int(ngf * mult / 2)),
                      nn.ReLU(True)]
        model += [nn.ReflectionPad2d(3)]
        model += [nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0)]
        model += [nn.Tanh()]

        self.model = nn.Sequential(*model)

    def forward(self, input):
        """Standard forward"""
        return self.model(input)


class ResnetBlock(nn.Module):
    """Define a Resnet block"""

    def __init__(self, dim, padding_type, norm_layer, use_dropout, use_bias):
        super(ResnetBlock, self).__init__()
        self.conv_block = self.build_conv_block(dim, padding_type, norm_layer, use_dropout, use_bias)

    def build_conv_block(self, dim, padding_type, norm_layer, use_dropout, use_bias):
        conv_block = []
        p = 0
        if padding_type == 'reflect':
            conv_block += [nn.ReflectionPad2d(1)]
        elif padding_type == 'replicate':
            conv_block += [nn.ReplicationPad2d(1)]
        elif padding_type == 'zero':
            p = 1
        else:
            raise NotImplementedError('padding [%s] is not implemented' % padding_type)

        conv_block += [nn.Conv2d(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim), nn.ReLU(True)]
        if use_dropout:
            conv_block += [nn.Dropout(0.5)]

        p = 0
        if padding_type == 'reflect':
            conv_block += [nn.ReflectionPad2d(1)]
        elif padding_type == 'replicate':
            conv_block += [nn.ReplicationPad2d(1)]
        elif padding_type == 'zero':
            p = 1
        else:
            raise NotImplementedError('padding [%s] is not implemented' % padding_type)
        conv_block += [nn.Conv2d(dim, dim, kernel_size=3, padding=p, bias=use_bias), norm_layer(dim)]

        return nn.Sequential(*conv_block)

    def forward(self, x):
        """Forward function (with skip connections)"""
        out = x + self.conv_block(x)  # add skip connections
        return out


class NLayerDiscriminator(nn.Module):
    """Defines a PatchGAN discriminator"""

    def __init__(self, input_nc, ndf=64, n_layers=3, norm_layer=nn.BatchNorm2d):
        super(NLayerDiscriminator, self).__init__()
        if type(norm_layer) == functools.partial:  # no need to use bias as BatchNorm2d has affine parameters
            use_bias = norm_layer.func == nn.InstanceNorm2d
        else:
            use_bias = norm_layer == nn.InstanceNorm2d

        kw = 4
        padw = 1
        sequence = [nn.Conv2d(input_nc, ndf, kernel_size=kw, stride=2, padding=padw), nn.LeakyReLU(0.2, True)]
        nf_mult = 1
        nf_mult_prev = 1
        for n in range(1, n_layers):  # gradually increase the number of filters
            nf_mult_prev = nf_mult
            nf_mult = min(2 ** n, 8)
            sequence += [
                nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=2, padding=padw, bias=use_bias),
                norm_layer(ndf * nf_mult),
                nn.LeakyReLU(0.2, True)
            ]

        nf_mult_prev = nf_mult
        nf_mult = min(2 ** n_layers, 8)
        sequence += [
            nn.Conv2d(ndf * nf_mult_prev, ndf * nf_mult, kernel_size=kw, stride=1, padding=padw, bias=use_bias),
            norm_layer(ndf * nf_mult),
            nn.LeakyReLU(0.2, True)
        ]

        sequence += [nn.Conv2d(ndf * nf_mult, 1, kernel_size=kw, stride=1, padding=padw)]  # output 1 channel prediction map
        self.model = nn.Sequential(*sequence)

    def forward(self, input):
        """Standard forward."""
        return self.model(input)


class ImagePool():
    """This class implements an image buffer that stores previously generated images.
    """

    def __init__(self, pool_size):
        self.pool_size = pool_size
        if self.pool_size > 0:  # create an empty pool
            self.num_imgs = 0
            self.images = []

    def query(self, images):
        if self.pool_size == 0:  # if the buffer size is 0, do nothing
            return images
        return_images = []
        for image in images:
            image = torch.unsqueeze(image.data, 0)
            if self.num_imgs < self.pool_size:   # if the buffer is not full; keep inserting current images to the buffer
                self.num_imgs = self.num_imgs + 1
                self.images.append(image)
                return_images.append(image)
            else:
                p = random.uniform(0, 1)
                if p > 0.5:  # by 50% chance, the buffer will return a previously stored image, and insert the current image into the buffer
                    random_id = random.randint(0, self.pool_size - 1)  # randint is inclusive
                    tmp = self.images[random_id].clone()
                    self.images[random_id] = image
                    return_images.append(tmp)
                else:       # by another 50% chance, the buffer will return the current image
                    return_images.append(image)
        return_images = torch.cat(return_images, 0)   # collect all the images and return
        return return_images


class CycleGANModel():
    def __init__(self, opt, netG_A, netG_B, netD_A, netD_B):
        self.opt = opt
        self.isTrain = True
        self.netG_A, self.netG_B, self.netD_A, self.netD_B = netG_A, netG_B, netD_A, netD_B
        if self.isTrain:
            self.fake_A_pool = ImagePool(opt.pool_size)  # create image buffer to store previously generated images
            self.fake_B_pool = ImagePool(opt.pool_size)  # create image buffer to store previously generated images
            # define loss functions
            self.criterionGAN = GANLoss(opt.gan_mode)  # define GAN loss.
            self.criterionCycle = torch.nn.L1Loss()
            self.criterionIdt = torch.nn.L1Loss()
            # initialize optimizers; schedulers will be automatically created by function <BaseModel.setup>.
            self.optimizer_G = torch.optim.Adam(itertools.chain(self.netG_A.parameters(), self.netG_B.parameters()), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizer_D = torch.optim.Adam(itertools.chain(self.netD_A.parameters(), self.netD_B.parameters()), lr=opt.lr, betas=(opt.beta1, 0.999))
            self.optimizers = [self.optimizer_G, self.optimizer_D]
            self.schedulers = [get_scheduler(optimizer, opt) for optimizer in self.optimizers]

    def set_input(self, input):
        AtoB = self.opt.direction == 'AtoB'
        self.real_A = input['A' if AtoB else 'B']
        self.real_B = input['B' if AtoB else 'A']

    def forward(self):
        """Run forward pass; called by both functions <optimize_parameters> and <test>."""
        self.fake_B = self.netG_A(self.real_A)  # G_A(A)
        self.rec_A = self.netG_B(self.fake_B)   # G_B(G_A(A))
        self.fake_A = self.netG_B(self.real_B)  # G_B(B)
        self.rec_B = self.netG_A(self.fake_A)   # G_A(G_B(B))

    def backward_D_basic(self, netD, real, fake):
        # Real
        pred_real = netD(real)
        loss_D_real = self.criterionGAN(pred_real, True)
        # Fake
        pred_fake = netD(fake.detach())
        loss_D_fake = self.criterionGAN(pred_fake, False)
        # Combined loss and calculate gradients
        loss_D = (loss_D_real + loss_D_fake) * 0.5
        loss_D.backward()
        return loss_D

    def backward_D_A(self):
        """Calculate GAN loss for discriminator D_A"""
        fake_B = self.fake_B_pool.query(self.fake_B)
        self.loss_D_A = self.backward_D_basic(self.netD_A, self.real_B, fake_B)

    def backward_D_B(self):
        """Calculate GAN loss for discriminator D_B"""
        fake_A = self.fake_A_pool.query(self.fake_A)
        self.loss_D_B = self.backward_D_basic(self.netD_B, self.real_A, fake_A)

    def backward_G(self):
        """Calculate the loss for generators G_A and G_B"""
        lambda_idt = self.opt.lambda_identity
        lambda_A = self.opt.lambda_A
        lambda_B = self.opt.lambda_B
        # Identity loss
        if lambda_idt > 0:
            # G_A should be identity if real_B is fed: ||G_A(B) - B||
            self.idt_A = self.netG_A(self.real_B)
            self.loss_idt_A = self.criterionIdt(self.idt_A, self.real_B) * lambda_B * lambda_idt
            # G_B should be identity if real_A is fed: ||G_B(A) - A||
            self.idt_B = self.netG_B(self.real_A)
            self.loss_idt_B = self.criterionIdt(self.idt_B, self.real_A) * lambda_A * lambda_idt
        else:
            self.loss_idt_A = 0
            self.loss_idt_B = 0

        # GAN loss D_A(G_A(A))
        self.loss_G_A = self.criterionGAN(self.netD_A(self.fake_B), True)
        # GAN loss D_B(G_B(B))
        self.loss_G_B = self.criterionGAN(self.netD_B(self.fake_A), True)
        # Forward cycle loss || G_B(G_A(A)) - A||
        self.loss_cycle_A = self.criterionCycle(self.rec_A, self.real_A) * lambda_A
        # Backward cycle loss || G_A(G_B(B)) - B||
        self.loss_cycle_B = self.criterionCycle(self.rec_B, self.real_B) * lambda_B
        # combined loss and calculate gradients
        self.loss_G = self.loss_G_A + self.loss_G_B + self.loss_cycle_A + self.loss_cycle_B + self.loss_idt_A + self.loss_idt_B
        self.loss_G.backward()

    def optimize_parameters(self):
        """Calculate losses, gradients, and update network weights; called in every training iteration"""
        # forward
        self.forward()      # compute fake images and reconstruction images.
        # G_A and G_B
        self.set_requires_grad([self.netD_A, self.netD_B], False)  # Ds require no gradients when optimizing Gs
        self.optimizer_G.zero_grad()  # set G_A and G_B's gradients to zero
        self.backward_G()             # calculate gradients for G_A and G_B
        self.optimizer_G.step()       # update G_A and G_B's weights
        # D_A and D_B
        self.set_requires_grad([self.netD_A, self.netD_B], True)
        self.optimizer_D.zero_grad()   # set D_A and D_B's gradients to zero
        self.backward_D_A()      # calculate gradients for D_A
        self.backward_D_B()      # calculate graidents for D_B
        self.optimizer_D.step()  # update D_A and D_B's weights

    def set_requires_grad(self, nets, requires_grad=False):
        """Set requies_grad=Fasle for all the networks to avoid unnecessary computations
        """
        if not isinstance(nets, list):
            nets = [nets]
        for net in nets:
            if net is not None:
                for param in net.parameters():
                    param.requires_grad = requires_grad

    def update_learning_rate(self):
        """Update learning rates for all the networks; called at the end of every epoch"""
        old_lr = self.optimizers[0].param_groups[0]['lr']
        for scheduler in self.schedulers:
            if self.opt.lr_policy == 'plateau':
                scheduler.step(self.metric)
            else:
                scheduler.step()

        lr = self.optimizers[0].param_groups[0]['lr']
        print('learning rate %.7f -> %.7f' % (old_lr, lr))

    def get_current_losses(self):
        return [float(getattr(self, 'loss_' + name)) for name in ['D_A', 'G_A', 'cycle_A', 'idt_A', 'D_B', 'G_B', 'cycle_B', 'idt_B']]


def build(opt):
    norm = get_norm_layer(opt.norm)
    nets = [
        ResnetGenerator(opt.input_nc, opt.output_nc, opt.ngf, norm_layer=norm, use_dropout=not opt.no_dropout, n_blocks=2),
        ResnetGenerator(opt.output_nc, opt.input_nc, opt.ngf, norm_layer=norm, use_dropout=not opt.no_dropout, n_blocks=2),
        NLayerDiscriminator(opt.output_nc, opt.ndf, n_layers=2, norm_layer=norm),
        NLayerDiscriminator(opt.input_nc, opt.ndf, n_layers=2, norm_layer=norm),
    ]
    for net in nets:
        init_weights(net, opt.init_type, init_gain=opt.init_gain)
    return nets


def main(opt, nets, dataset):
    model = CycleGANModel(opt, *nets)
    records = []
    for epoch in range(opt.epoch_count, opt.n_epochs + opt.n_epochs_decay + 1):
        for i, data in enumerate(dataset):
            model.set_input(data)
            model.optimize_parameters()
            records.append(model.get_current_losses())
        model.update_learning_rate()
        records.append(model.optimizers[1].param_groups[0]['lr'])
    for net in nets:
        records.append({n: v.detach().numpy().copy() for n, v in net.state_dict().items()})
    return records
'''

CYCLEGAN_STEP = [
    ("        self.loss_G.backward()\n", "        self.grads_G = self.loss_G.backward()\n"),
    (
        "        self.optimizer_G.step()       #",
        "        self.optimizer_G.step(self.grads_G)       #",
    ),
    (
        "        loss_D.backward()\n",
        "        grads = loss_D.backward()\n        self.grads_D = grads if self.grads_D is None else self.grads_D + grads\n",
    ),
    (
        "        self.optimizer_D.zero_grad()   #",
        "        self.grads_D = None\n        self.optimizer_D.zero_grad()   #",
    ),
    ("        self.optimizer_D.step()  #", "        self.optimizer_D.step(self.grads_D)  #"),
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
from torch.autograd import Function

class ReverseLayerF(Function):

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha

        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output):
        output = grad_output.neg() * ctx.alpha

        return output, None

class CNNModel(nn.Module):

    def __init__(self):
        super(CNNModel, self).__init__()
        self.feature = nn.Sequential()
        self.feature.add_module('f_conv1', nn.Conv2d(3, 64, kernel_size=5))
        self.feature.add_module('f_bn1', nn.BatchNorm2d(64))
        self.feature.add_module('f_pool1', nn.MaxPool2d(2))
        self.feature.add_module('f_relu1', nn.ReLU(True))
        self.feature.add_module('f_conv2', nn.Conv2d(64, 50, kernel_size=5))
        self.feature.add_module('f_bn2', nn.BatchNorm2d(50))
        self.feature.add_module('f_drop1', nn.Dropout2d())
        self.feature.add_module('f_pool2', nn.MaxPool2d(2))
        self.feature.add_module('f_relu2', nn.ReLU(True))

        self.class_classifier = nn.Sequential()
        self.class_classifier.add_module('c_fc1', nn.Linear(50 * 4 * 4, 100))
        self.class_classifier.add_module('c_bn1', nn.BatchNorm1d(100))
        self.class_classifier.add_module('c_relu1', nn.ReLU(True))
        self.class_classifier.add_module('c_drop1', nn.Dropout())
        self.class_classifier.add_module('c_fc2', nn.Linear(100, 100))
        self.class_classifier.add_module('c_bn2', nn.BatchNorm1d(100))
        self.class_classifier.add_module('c_relu2', nn.ReLU(True))
        self.class_classifier.add_module('c_fc3', nn.Linear(100, 10))
        self.class_classifier.add_module('c_softmax', nn.LogSoftmax(dim=1))

        self.domain_classifier = nn.Sequential()
        self.domain_classifier.add_module('d_fc1', nn.Linear(50 * 4 * 4, 100))
        self.domain_classifier.add_module('d_bn1', nn.BatchNorm1d(100))
        self.domain_classifier.add_module('d_relu1', nn.ReLU(True))
        self.domain_classifier.add_module('d_fc2', nn.Linear(100, 2))
        self.domain_classifier.add_module('d_softmax', nn.LogSoftmax(dim=1))

    def forward(self, input_data, alpha):
        input_data = input_data.expand(input_data.data.shape[0], 3, 28, 28)
        feature = self.feature(input_data)
        feature = feature.view(-1, 50 * 4 * 4)
        reverse_feature = ReverseLayerF.apply(feature, alpha)
        class_output = self.class_classifier(feature)
        domain_output = self.domain_classifier(reverse_feature)

        return class_output, domain_output

def test(net, dataloader):
    net = net.eval()
    n_total = 0
    n_correct = 0
    with torch.no_grad():
        for t_img, t_label in dataloader:
            class_output, _ = net(input_data=t_img, alpha=0)
            pred = class_output.data.max(1, keepdim=True)[1]
            n_correct += pred.eq(t_label.data.view_as(pred)).cpu().sum()
            n_total += len(t_label)
    return n_correct.data.numpy() * 1.0 / n_total

def main(my_net, dataloader_source, dataloader_target, n_epoch=2, lr=1e-3):
    records = []
    optimizer = optim.Adam(my_net.parameters(), lr=lr)

    loss_class = torch.nn.NLLLoss()
    loss_domain = torch.nn.NLLLoss()

    for p in my_net.parameters():
        p.requires_grad = True

    # training
    for epoch in range(n_epoch):

        len_dataloader = min(len(dataloader_source), len(dataloader_target))
        data_source_iter = iter(dataloader_source)
        data_target_iter = iter(dataloader_target)

        for i in range(len_dataloader):

            p = float(i + epoch * len_dataloader) / n_epoch / len_dataloader
            alpha = 2. / (1. + np.exp(-10 * p)) - 1

            # training model using source data
            data_source = next(data_source_iter)
            s_img, s_label = data_source

            my_net.zero_grad()
            batch_size = len(s_label)

            domain_label = torch.zeros(batch_size).long()

            class_output, domain_output = my_net(input_data=s_img, alpha=alpha)
            err_s_label = loss_class(class_output, s_label)
            err_s_domain = loss_domain(domain_output, domain_label)

            # training model using target data
            data_target = next(data_target_iter)
            t_img, _ = data_target

            batch_size = len(t_img)

            domain_label = torch.ones(batch_size).long()

            _, domain_output = my_net(input_data=t_img, alpha=alpha)
            err_t_domain = loss_domain(domain_output, domain_label)
            err = err_t_domain + err_s_domain + err_s_label
            err.backward()
            optimizer.step()

            records.append([err_s_label.data.cpu().numpy(), err_s_domain.data.cpu().numpy(), err_t_domain.data.cpu().item()])
        my_net.train()
    records.append(float(test(my_net, dataloader_target)))
    records.append({n: v.detach().numpy().copy() for n, v in my_net.state_dict().items()})
    return records
"""

DANN_STEP = [
    (
        "            err.backward()\n            optimizer.step()",
        "            grads = err.backward()\n            optimizer.step(grads)",
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

    # float64, as CycleGAN's: in float32 the 64-channel convolutions' weights whose gradients
    # are rounding noise take Adam steps of either sign
    with default_float64():
        records = _run(
            monkeypatch, DANN_SOURCE, DANN_STEP, 71, lambda names: (names["CNNModel"](),), go
        )
    # the biases before each BatchNorm are taken out by it: their true gradient is 0
    cancelled = [
        "feature.f_conv1.bias", "feature.f_conv2.bias", "class_classifier.c_fc1.bias",
        "class_classifier.c_fc2.bias", "domain_classifier.d_fc1.bias",
    ]  # fmt: skip
    cancelled += [
        name.replace("conv", "bn").replace("fc", "bn").replace(".bias", ".running_mean")
        for name in cancelled
    ]
    assert_records_agree(records[1], records[0], rtol=1e-6, atol=1e-8, skip=cancelled)
