# ruff: noqa: E501  (the programs are kept as their authors wrote them)
"""Real PyTorch programs ported to retrograd, continued (the harness: ``tests/real_ports.py``):

- SAGAN as heykeetae/Self-Attention-GAN writes it (``spectral.py``, ``sagan_models.py`` and the
  step of ``trainer.py``), narrower (``conv_dim=8``; the attention widths the models hard-code,
  128/64 and 256/512, follow it), ``.cuda()`` left out: the hand-written ``SpectralNorm``
  wrapper that takes a layer's weight apart (``del self.module._parameters[self.name]``,
  ``register_parameter(self.name + "_u", ...)`` of ``Parameter(w.data.new(height).normal_(0, 1),
  requires_grad=False)``, ``u.data = l2normalize(...)``) and before every forward runs the power
  iteration on ``.data`` (``torch.mv(torch.t(w.view(height,-1).data), u.data)``) and puts the
  normalized weight back as a plain attribute, ``setattr(self.module, self.name, w /
  sigma.expand_as(w))`` with ``sigma = u.dot(w.view(height, -1).mv(v))``, read by the wrapped
  ``Conv2d``/``ConvTranspose2d``'s own ``forward``; ``Self_Attn`` (``torch.bmm`` of 1x1-conv
  projections, ``nn.Softmax(dim=-1)``, ``self.gamma = nn.Parameter(torch.zeros(1))``); the
  generator and discriminator built from lists into ``nn.Sequential(*layer1)``,
  ``int(np.log2(self.imsize)) - 3``; Adam over ``filter(lambda p: p.requires_grad, ...)`` with
  betas as a list; the hinge loss by ``torch.nn.ReLU()(1.0 - d_out_real).mean()`` and the
  WGAN-GP variant (``torch.rand(...).expand_as``, ``Variable(..., requires_grad=True)``,
  ``torch.autograd.grad(outputs=out, inputs=interpolated, grad_outputs=torch.ones(out.size()),
  retain_graph=True, create_graph=True, only_inputs=True)[0]``), ``reset_grad``.

``torch.randn`` and ``torch.rand`` draw from one seeded NumPy stream in both runs; the models run
in float64 (several parameters have a zero gradient: conv biases before a BatchNorm, the keys'
biases, whose Adam steps would follow float32 rounding noise).

One deliberate difference shows (API.md section 10: a value saved for backward is never changed
by a later write): the discriminator runs twice (real, then fake images) before ``d_loss.backward()``,
and the second run's power iteration replaces ``u.data`` and ``v.data``. torch's autograd saved
``u`` and ``v`` (for ``sigma``) by reference, and a ``.data`` assignment swaps their storage
without bumping the version counter, so torch's backward of the first run reads the second run's
``u`` and ``v``: not the derivative of the loss it computed (``sigma`` itself was computed from the
first run's vectors). retrograd differentiates what was computed. The torch run is given
``u.clone()`` and ``v.clone()`` in ``sigma`` (the same values forward) so that it does too;
``test_a_data_swap_after_the_forward_leaves_the_saved_value`` pins the difference on its own.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import retrograd as rg
from real_ports import assert_records_agree, both, run_source

SAGAN_SOURCE = """
from torch.autograd import Variable
from torch.nn import Parameter


def l2normalize(v, eps=1e-12):
    return v / (v.norm() + eps)


class SpectralNorm(nn.Module):
    def __init__(self, module, name='weight', power_iterations=1):
        super(SpectralNorm, self).__init__()
        self.module = module
        self.name = name
        self.power_iterations = power_iterations
        if not self._made_params():
            self._make_params()

    def _update_u_v(self):
        u = getattr(self.module, self.name + "_u")
        v = getattr(self.module, self.name + "_v")
        w = getattr(self.module, self.name + "_bar")

        height = w.data.shape[0]
        for _ in range(self.power_iterations):
            v.data = l2normalize(torch.mv(torch.t(w.view(height,-1).data), u.data))
            u.data = l2normalize(torch.mv(w.view(height,-1).data, v.data))

        # sigma = torch.dot(u.data, torch.mv(w.view(height,-1).data, v.data))
        sigma = u.dot(w.view(height, -1).mv(v))
        setattr(self.module, self.name, w / sigma.expand_as(w))

    def _made_params(self):
        try:
            u = getattr(self.module, self.name + "_u")
            v = getattr(self.module, self.name + "_v")
            w = getattr(self.module, self.name + "_bar")
            return True
        except AttributeError:
            return False


    def _make_params(self):
        w = getattr(self.module, self.name)

        height = w.data.shape[0]
        width = w.view(height, -1).data.shape[1]

        u = Parameter(w.data.new(height).normal_(0, 1), requires_grad=False)
        v = Parameter(w.data.new(width).normal_(0, 1), requires_grad=False)
        u.data = l2normalize(u.data)
        v.data = l2normalize(v.data)
        w_bar = Parameter(w.data)

        del self.module._parameters[self.name]

        self.module.register_parameter(self.name + "_u", u)
        self.module.register_parameter(self.name + "_v", v)
        self.module.register_parameter(self.name + "_bar", w_bar)


    def forward(self, *args):
        self._update_u_v()
        return self.module.forward(*args)


class Self_Attn(nn.Module):
    \"\"\" Self attention Layer\"\"\"
    def __init__(self,in_dim,activation):
        super(Self_Attn,self).__init__()
        self.chanel_in = in_dim
        self.activation = activation

        self.query_conv = nn.Conv2d(in_channels = in_dim , out_channels = in_dim//8 , kernel_size= 1)
        self.key_conv = nn.Conv2d(in_channels = in_dim , out_channels = in_dim//8 , kernel_size= 1)
        self.value_conv = nn.Conv2d(in_channels = in_dim , out_channels = in_dim , kernel_size= 1)
        self.gamma = nn.Parameter(torch.zeros(1))

        self.softmax  = nn.Softmax(dim=-1) #
    def forward(self,x):
        \"\"\"
            inputs :
                x : input feature maps( B X C X W X H)
            returns :
                out : self attention value + input feature
                attention: B X N X N (N is Width*Height)
        \"\"\"
        m_batchsize,C,width ,height = x.size()
        proj_query  = self.query_conv(x).view(m_batchsize,-1,width*height).permute(0,2,1) # B X CX(N)
        proj_key =  self.key_conv(x).view(m_batchsize,-1,width*height) # B X C x (*W*H)
        energy =  torch.bmm(proj_query,proj_key) # transpose check
        attention = self.softmax(energy) # BX (N) X (N)
        proj_value = self.value_conv(x).view(m_batchsize,-1,width*height) # B X C X N

        out = torch.bmm(proj_value,attention.permute(0,2,1) )
        out = out.view(m_batchsize,C,width,height)

        out = self.gamma*out + x
        return out,attention


class Generator(nn.Module):
    \"\"\"Generator.\"\"\"

    def __init__(self, batch_size, image_size=64, z_dim=100, conv_dim=64):
        super(Generator, self).__init__()
        self.imsize = image_size
        layer1 = []
        layer2 = []
        layer3 = []
        last = []

        repeat_num = int(np.log2(self.imsize)) - 3
        mult = 2 ** repeat_num # 8
        layer1.append(SpectralNorm(nn.ConvTranspose2d(z_dim, conv_dim * mult, 4)))
        layer1.append(nn.BatchNorm2d(conv_dim * mult))
        layer1.append(nn.ReLU())

        curr_dim = conv_dim * mult

        layer2.append(SpectralNorm(nn.ConvTranspose2d(curr_dim, int(curr_dim / 2), 4, 2, 1)))
        layer2.append(nn.BatchNorm2d(int(curr_dim / 2)))
        layer2.append(nn.ReLU())

        curr_dim = int(curr_dim / 2)

        layer3.append(SpectralNorm(nn.ConvTranspose2d(curr_dim, int(curr_dim / 2), 4, 2, 1)))
        layer3.append(nn.BatchNorm2d(int(curr_dim / 2)))
        layer3.append(nn.ReLU())

        if self.imsize == 64:
            layer4 = []
            curr_dim = int(curr_dim / 2)
            layer4.append(SpectralNorm(nn.ConvTranspose2d(curr_dim, int(curr_dim / 2), 4, 2, 1)))
            layer4.append(nn.BatchNorm2d(int(curr_dim / 2)))
            layer4.append(nn.ReLU())
            self.l4 = nn.Sequential(*layer4)
            curr_dim = int(curr_dim / 2)

        self.l1 = nn.Sequential(*layer1)
        self.l2 = nn.Sequential(*layer2)
        self.l3 = nn.Sequential(*layer3)

        last.append(nn.ConvTranspose2d(curr_dim, 3, 4, 2, 1))
        last.append(nn.Tanh())
        self.last = nn.Sequential(*last)

        self.attn1 = Self_Attn( conv_dim * 2, 'relu')
        self.attn2 = Self_Attn( conv_dim,  'relu')

    def forward(self, z):
        z = z.view(z.size(0), z.size(1), 1, 1)
        out=self.l1(z)
        out=self.l2(out)
        out=self.l3(out)
        out,p1 = self.attn1(out)
        out=self.l4(out)
        out,p2 = self.attn2(out)
        out=self.last(out)

        return out, p1, p2


class Discriminator(nn.Module):
    \"\"\"Discriminator, Auxiliary Classifier.\"\"\"

    def __init__(self, batch_size=64, image_size=64, conv_dim=64):
        super(Discriminator, self).__init__()
        self.imsize = image_size
        layer1 = []
        layer2 = []
        layer3 = []
        last = []

        layer1.append(SpectralNorm(nn.Conv2d(3, conv_dim, 4, 2, 1)))
        layer1.append(nn.LeakyReLU(0.1))

        curr_dim = conv_dim

        layer2.append(SpectralNorm(nn.Conv2d(curr_dim, curr_dim * 2, 4, 2, 1)))
        layer2.append(nn.LeakyReLU(0.1))
        curr_dim = curr_dim * 2

        layer3.append(SpectralNorm(nn.Conv2d(curr_dim, curr_dim * 2, 4, 2, 1)))
        layer3.append(nn.LeakyReLU(0.1))
        curr_dim = curr_dim * 2

        if self.imsize == 64:
            layer4 = []
            layer4.append(SpectralNorm(nn.Conv2d(curr_dim, curr_dim * 2, 4, 2, 1)))
            layer4.append(nn.LeakyReLU(0.1))
            self.l4 = nn.Sequential(*layer4)
            curr_dim = curr_dim*2
        self.l1 = nn.Sequential(*layer1)
        self.l2 = nn.Sequential(*layer2)
        self.l3 = nn.Sequential(*layer3)

        last.append(nn.Conv2d(curr_dim, 1, 4))
        self.last = nn.Sequential(*last)

        self.attn1 = Self_Attn(conv_dim * 4, 'relu')
        self.attn2 = Self_Attn(conv_dim * 8, 'relu')

    def forward(self, x):
        out = self.l1(x)
        out = self.l2(out)
        out = self.l3(out)
        out,p1 = self.attn1(out)
        out=self.l4(out)
        out,p2 = self.attn2(out)
        out=self.last(out)

        return out.squeeze(), p1, p2


def tensor2var(x, grad=False):
    return Variable(x, requires_grad=grad)


class Trainer(object):
    def __init__(self, G, D, config):
        self.G, self.D = G, D
        self.adv_loss = config.adv_loss
        self.z_dim = config.z_dim
        self.lambda_gp = config.lambda_gp
        self.g_lr, self.d_lr = config.g_lr, config.d_lr
        self.beta1, self.beta2 = config.beta1, config.beta2
        self.g_optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, self.G.parameters()), self.g_lr, [self.beta1, self.beta2])
        self.d_optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, self.D.parameters()), self.d_lr, [self.beta1, self.beta2])

    def reset_grad(self):
        self.d_optimizer.zero_grad()
        self.g_optimizer.zero_grad()

    def step(self, real_images):
        # ================== Train D ================== #
        self.D.train()
        self.G.train()

        # Compute loss with real images
        # dr1, dr2, df1, df2, gf1, gf2 are attention scores
        real_images = tensor2var(real_images)
        d_out_real,dr1,dr2 = self.D(real_images)
        if self.adv_loss == 'wgan-gp':
            d_loss_real = - torch.mean(d_out_real)
        elif self.adv_loss == 'hinge':
            d_loss_real = torch.nn.ReLU()(1.0 - d_out_real).mean()

        # apply Gumbel Softmax
        z = tensor2var(torch.randn(real_images.size(0), self.z_dim))
        fake_images,gf1,gf2 = self.G(z)
        d_out_fake,df1,df2 = self.D(fake_images)

        if self.adv_loss == 'wgan-gp':
            d_loss_fake = d_out_fake.mean()
        elif self.adv_loss == 'hinge':
            d_loss_fake = torch.nn.ReLU()(1.0 + d_out_fake).mean()


        # Backward + Optimize
        d_loss = d_loss_real + d_loss_fake
        self.reset_grad()
        d_loss.backward()
        self.d_optimizer.step()


        if self.adv_loss == 'wgan-gp':
            # Compute gradient penalty
            alpha = torch.rand(real_images.size(0), 1, 1, 1).expand_as(real_images)
            interpolated = Variable(alpha * real_images.data + (1 - alpha) * fake_images.data, requires_grad=True)
            out,_,_ = self.D(interpolated)

            grad = torch.autograd.grad(outputs=out,
                                       inputs=interpolated,
                                       grad_outputs=torch.ones(out.size()),
                                       retain_graph=True,
                                       create_graph=True,
                                       only_inputs=True)[0]

            grad = grad.view(grad.size(0), -1)
            grad_l2norm = torch.sqrt(torch.sum(grad ** 2, dim=1))
            d_loss_gp = torch.mean((grad_l2norm - 1) ** 2)

            # Backward + Optimize
            d_loss = self.lambda_gp * d_loss_gp

            self.reset_grad()
            d_loss.backward()
            self.d_optimizer.step()

        # ================== Train G and gumbel ================== #
        # Create random noise
        z = tensor2var(torch.randn(real_images.size(0), self.z_dim))
        fake_images,_,_ = self.G(z)

        # Compute loss with fake images
        g_out_fake,_,_ = self.D(fake_images)  # batch x n
        if self.adv_loss == 'wgan-gp':
            g_loss_fake = - g_out_fake.mean()
        elif self.adv_loss == 'hinge':
            g_loss_fake = - g_out_fake.mean()

        self.reset_grad()
        g_loss_fake.backward()
        self.g_optimizer.step()
        return [d_loss_real.item(), d_loss_fake.item(), g_loss_fake.item(), d_loss.item(),
                gf1.detach().numpy(), dr2.detach().numpy()]
"""

SAGAN_STEP = [
    (
        "        d_loss.backward()\n        self.d_optimizer.step()\n\n\n",
        "        grads = d_loss.backward()\n        self.d_optimizer.step(grads)\n\n\n",
    ),
    (
        "            d_loss.backward()\n            self.d_optimizer.step()",
        "            grads = d_loss.backward()\n            self.d_optimizer.step(grads)",
    ),
    (
        "        g_loss_fake.backward()\n        self.g_optimizer.step()",
        "        grads = g_loss_fake.backward()\n        self.g_optimizer.step(grads)",
    ),
]


# torch's run differentiates the sigma it computed (see the module docstring)
TORCH_SAVES_BY_VALUE = (
    "sigma = u.dot(w.view(height, -1).mv(v))",
    "sigma = u.clone().dot(w.view(height, -1).mv(v.clone()))",
)


def test_a_data_swap_after_the_forward_leaves_the_saved_value():
    """``y = (w * u).sum()``, then ``u.data = ...`` before ``backward``: the gradient of ``w`` is
    the ``u`` that ``y`` was computed from (retrograd); torch's reads the swapped-in value."""
    old, new = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    grads = []
    for lib in (torch, rg):
        w = lib.tensor([0.5, -1.0, 2.0], dtype=lib.float64, requires_grad=True)
        u = lib.nn.Parameter(lib.tensor(old, dtype=lib.float64), requires_grad=False)
        y = (w * u).sum()
        u.data = lib.tensor(new, dtype=lib.float64)
        if lib is torch:
            y.backward()
            grads.append(w.grad.numpy())
        else:
            grads.append(w.grad(y.backward()).numpy())
    np.testing.assert_array_equal(grads[0], new)  # torch: the swapped-in value
    np.testing.assert_array_equal(grads[1], old)  # retrograd: the value y was computed from


def _draws(lib, seed):
    rng = np.random.default_rng(seed)

    def randn(*size, **kwargs):
        return lib.tensor(rng.standard_normal(size), dtype=lib.float64)

    def rand(*size, **kwargs):
        return lib.tensor(rng.uniform(size=size), dtype=lib.float64)

    return randn, rand


@pytest.mark.parametrize("adv_loss", ["hinge", "wgan-gp"])
def test_sagan_spectral_norm_and_self_attention_training_match_torch(monkeypatch, adv_loss):
    theirs = run_source(SAGAN_SOURCE.replace(*TORCH_SAVES_BY_VALUE), torch)
    _, ours = both(SAGAN_SOURCE, SAGAN_STEP)
    images = np.random.default_rng(31).uniform(-1, 1, (2, 2, 3, 64, 64))
    records, initial = [], None
    for lib, names in ((torch, theirs), (rg, ours)):
        torch.manual_seed(0)
        gen = names["Generator"](2, image_size=64, z_dim=8, conv_dim=8).double()
        disc = names["Discriminator"](2, image_size=64, conv_dim=8).double()
        # the weight became weight_bar, weight_u, weight_v (u and v not trained)
        conv = disc.l1[0].module
        assert sorted(n for n, _ in conv.named_parameters()) == [
            "bias",
            "weight_bar",
            "weight_u",
            "weight_v",
        ]
        assert not conv.weight_u.requires_grad
        if initial is None:
            for p in gen.parameters():  # the attention gammas start at zero: give them a value
                if p.dim() == 1 and p.numel() == 1:
                    p.data.fill_(0.3)
            initial = [
                {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
                for m in (gen, disc)
            ]
        else:
            for m, state in zip((gen, disc), initial):
                m.load_state_dict({k: rg.tensor(v) for k, v in state.items()})
        config = type(
            "Config",
            (),
            dict(
                adv_loss=adv_loss, z_dim=8, lambda_gp=10, g_lr=1e-3, d_lr=4e-3, beta1=0.0, beta2=0.9
            ),
        )
        randn, rand = _draws(lib, 32)
        with monkeypatch.context() as patch:
            patch.setattr(lib, "randn", randn)
            patch.setattr(lib, "rand", rand)
            trainer = names["Trainer"](gen, disc, config)
            record = [trainer.step(lib.tensor(batch, dtype=lib.float64)) for batch in images]
        flat = []
        for step in record:
            flat.extend(step)
        flat.append({n: p.detach().numpy().copy() for n, p in gen.named_parameters()})
        flat.append({n: p.detach().numpy().copy() for n, p in disc.named_parameters()})
        records.append(flat)
    assert_records_agree(records[1], records[0], rtol=1e-7, atol=1e-9)
