"""Real ports, continued (the harness: ``tests/real_ports.py``): image generators written here
in the style of four public projects, trained a few steps each on torch and, ported, on
retrograd from the same weights and draws:

- a VQGAN in the style of CompVis/taming-transformers: a codebook quantiser (distances by
  ``|v|^2 + |e|^2 - 2 v.e``, ``argmin``, the one-hot ``scatter_(1, index, 1)`` into
  ``torch.zeros(...).to(z)`` times the codebook, the commitment loss, the straight-through
  ``z + (q - z).detach()``, the perplexity), encode/decode, a ``training_step`` by optimizer
  index and its last layer, Adam with ``betas=(0.5, 0.9)``; a loss balancing its adversarial
  term by ``torch.autograd.grad(nll, last_layer, retain_graph=True)`` (``torch.norm``,
  ``torch.clamp``), its ``try ... except RuntimeError`` when validating under ``no_grad``, a
  warm-up gate, hinge and softplus critic losses; a PatchGAN critic built with ``.apply`` of a
  class-name initialiser (``nn.init.normal_``/``constant_`` on ``.data``), a
  ``functools.partial`` BatchNorm or ``ActNorm`` (its data-dependent first forward writing
  ``.data.copy_``, the ``uint8`` ``initialized`` buffer read by ``.item()`` and set by
  ``fill_``); an LPIPS-like distance (buffers from ``torch.Tensor([...])[None, :, None, None]``,
  dropout + 1x1 heads, unit-normalised features, ``mean([2, 3], keepdim=True)``, an in-place
  ``+=`` sum, a frozen feature net split by ``add_module`` into ``Sequential`` stages returning
  a ``namedtuple``); GroupNorm/swish ResBlocks, a downsampler padding by
  ``F.pad(x, (0, 1, 0, 1))``, a nearest ``interpolate`` upsampler; images through
  ``permute(...).to(memory_format=torch.contiguous_format).float()``.
- an SRGAN in the style of leftthomas/SRGAN: BatchNorm/``nn.PReLU`` residual blocks,
  ``nn.PixelShuffle`` upsampling, a sigmoid critic over ``nn.AdaptiveAvgPool2d``, a content
  loss over frozen features (``requires_grad = False``) with ``nn.MSELoss`` and a total
  variation term by ``torch.pow`` of shifted slices; the critic step by
  ``d_loss.backward(retain_graph=True)`` on the generator's graph, then a fresh generator step;
  module ``zero_grad``.
- an ESRGAN step in the style of xinntao/BasicSR: dense blocks (``torch.cat`` of every earlier
  output, ``x5 * 0.2 + x``) in RRDBs stacked through ``functools.partial``, kaiming weights
  scaled by ``m.weight.data *= 0.1``, an adversarial loss on ``torch.empty_like(x).fill_``
  targets under ``nn.BCEWithLogitsLoss``, the relativistic (``ragan``) losses, the critic frozen
  by ``p.requires_grad = False`` during the generator step, L1 feature loss on features
  normalised by ``mean``/``std`` buffers (``torch.Tensor(...).view(...).to(torch.device("cpu"))``).
- a ControlNet in the style of lllyasviel/ControlNet on a toy UNet: the locked encoder under
  ``torch.no_grad()`` then ``h += control.pop()``, a trainable copy of the encoder made by
  ``copy.deepcopy``, a hint encoder and zero convolutions (``p.detach().zero_()``), AdamW over
  the branch (and the UNet's decoder when not ``SD_LOCKED``); ResBlocks optionally
  checkpointed by an ``autograd.Function`` that saves ``torch.is_autocast_enabled()``,
  ``torch.get_autocast_gpu_dtype()`` and ``torch.is_autocast_cache_enabled()`` and whose
  backward re-runs under ``torch.enable_grad()`` and ``torch.cuda.amp.autocast(**kwargs)``
  on ``view_as`` copies, then ``torch.autograd.grad(..., allow_unused=True)``; sinusoidal
  timestep embeddings, ``GroupNorm32``'s ``.float()``/``.type(x.dtype)``, ``torch.cumprod``
  noise schedule indexed by drawn timesteps.

The lines changed: the ``import`` lines and the gradient lines (``loss.backward()`` returns the
gradients, ``step`` takes them). The regression guarded (a focused test in
``test_realports29_fixes.py``): there was no ``torch.is_autocast_cache_enabled`` (nor
``set_autocast_cache_enabled``, ``clear_autocast_cache``), so the checkpointed ``ResBlock``
failed on its first forward.
"""

from __future__ import annotations

import numpy as np
import pytest

from real_ports import (
    assert_records_agree,
    initializer,
    params_of,
    runs_with_draws,
    seeded_draws,  # noqa: F401 (autouse: each test from fixed seeds)
)

VQGAN_SOURCE = '''
# A toy VQGAN trained as taming-transformers trains one: per batch, an autoencoder step and a
# discriminator step, each from its own forward, under a perceptual + adversarial loss whose
# adversarial weight is balanced by the gradients at the decoder's last layer.
import functools
import collections

import torch

FeatureMaps = collections.namedtuple("FeatureMaps", "low high")


def swish(x):
    return x * torch.sigmoid(x)


def groupnorm(width):
    return torch.nn.GroupNorm(num_groups=2, num_channels=width, eps=1e-6, affine=True)


class Codebook(nn.Module):
    """Snaps each latent vector to its nearest code; the gradient passes straight through."""

    def __init__(self, n_codes, code_dim, beta):
        super().__init__()
        self.n_codes, self.code_dim, self.beta = n_codes, code_dim, beta
        self.embedding = nn.Embedding(n_codes, code_dim)
        self.embedding.weight.data.uniform_(-1.0 / n_codes, 1.0 / n_codes)

    def forward(self, z):
        z = z.permute(0, 2, 3, 1).contiguous()  # channels last
        vectors = z.view(-1, self.code_dim)
        book = self.embedding.weight
        # |v - e|^2 expanded: |v|^2 + |e|^2 - 2 v.e
        sq_dist = (
            torch.sum(vectors**2, dim=1, keepdim=True)
            + torch.sum(book**2, dim=1)
            - 2 * torch.matmul(vectors, book.t())
        )
        nearest = torch.argmin(sq_dist, dim=1).unsqueeze(1)
        onehot = torch.zeros(nearest.shape[0], self.n_codes).to(z)
        onehot.scatter_(1, nearest, 1)
        quantized = torch.matmul(onehot, book).view(z.shape)
        codebook_term = torch.mean((quantized.detach() - z) ** 2)
        commitment_term = torch.mean((quantized - z.detach()) ** 2)
        vq_loss = codebook_term + self.beta * commitment_term
        quantized = z + (quantized - z).detach()
        usage = torch.mean(onehot, dim=0)
        perplexity = torch.exp(-torch.sum(usage * torch.log(usage + 1e-10)))
        return quantized.permute(0, 3, 1, 2).contiguous(), vq_loss, (perplexity, onehot, nearest)


class ActNorm(nn.Module):
    """Channel-wise affine map set, on its first training batch, to whiten that batch."""

    def __init__(self, width):
        super().__init__()
        self.loc = nn.Parameter(torch.zeros(1, width, 1, 1))
        self.scale = nn.Parameter(torch.ones(1, width, 1, 1))
        self.register_buffer("initialized", torch.tensor(0, dtype=torch.uint8))

    def _fit(self, x):
        with torch.no_grad():
            per_channel = x.permute(1, 0, 2, 3).contiguous().view(x.shape[1], -1)
            centre = per_channel.mean(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            spread = per_channel.std(1).unsqueeze(1).unsqueeze(2).unsqueeze(3).permute(1, 0, 2, 3)
            self.loc.data.copy_(-centre)
            self.scale.data.copy_(1 / (spread + 1e-6))

    def forward(self, x):
        flat = len(x.shape) == 2
        if flat:
            x = x[:, :, None, None]
        if self.initialized.item() == 0 and self.training:
            self._fit(x)
            self.initialized.fill_(1)
        y = self.scale * (x + self.loc)
        return y.squeeze(-1).squeeze(-1) if flat else y


def init_gan_weights(module):
    kind = module.__class__.__name__
    if kind.find("Conv") != -1:
        nn.init.normal_(module.weight.data, 0.0, 0.02)
    elif kind.find("BatchNorm") != -1:
        nn.init.normal_(module.weight.data, 1.0, 0.02)
        nn.init.constant_(module.bias.data, 0)


class PatchCritic(nn.Module):
    """A PatchGAN critic: one logit per overlapping patch."""

    def __init__(self, in_ch, width, depth, actnorm):
        super().__init__()
        norm = ActNorm if actnorm else functools.partial(nn.BatchNorm2d, momentum=0.1)
        if isinstance(norm, functools.partial):
            with_bias = norm.func != nn.BatchNorm2d
        else:
            with_bias = norm != nn.BatchNorm2d
        layers = [nn.Conv2d(in_ch, width, 4, stride=2, padding=1), nn.LeakyReLU(0.2, True)]
        mult = 1
        for i in range(1, depth + 1):
            prev, mult = mult, min(2**i, 8)
            stride = 2 if i < depth else 1
            cin, cout = width * prev, width * mult
            conv = nn.Conv2d(cin, cout, 4, stride=stride, padding=1, bias=with_bias)
            layers.append(conv)
            layers.append(norm(width * mult))
            layers.append(nn.LeakyReLU(0.2, True))
        layers.append(nn.Conv2d(width * mult, 1, 4, stride=1, padding=1))
        self.main = nn.Sequential(*layers)

    def forward(self, x):
        return self.main(x)


class Rescale(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("shift", torch.Tensor([-0.03, -0.088, -0.188])[None, :, None, None])
        self.register_buffer("scale", torch.Tensor([0.458, 0.448, 0.45])[None, :, None, None])

    def forward(self, x):
        return (x - self.shift) / self.scale


class LinearHead(nn.Module):
    """A 1x1 convolution (after dropout) weighing the channels of one feature map."""

    def __init__(self, width):
        super().__init__()
        weigh = nn.Conv2d(width, 1, 1, stride=1, padding=0, bias=False)
        self.model = nn.Sequential(nn.Dropout(), weigh)


class FrozenFeatures(torch.nn.Module):
    """Pretrained-style features cut into two stages, never trained."""

    def __init__(self):
        super().__init__()
        trunk = feature_trunk()
        self.stage1 = torch.nn.Sequential()
        self.stage2 = torch.nn.Sequential()
        for i in range(len(trunk)):
            (self.stage1 if i < 2 else self.stage2).add_module(str(i), trunk[i])
        for p in self.parameters():
            p.requires_grad = False

    def forward(self, x):
        low = self.stage1(x)
        return FeatureMaps(low, self.stage2(low))


def unit_norm(x, eps=1e-10):
    return x / (torch.sqrt(torch.sum(x**2, dim=1, keepdim=True)) + eps)


def spatial_mean(x):
    return x.mean([2, 3], keepdim=True)


class PerceptualDistance(nn.Module):
    """LPIPS-like: compares unit-normalised features, weighted per channel and averaged."""

    def __init__(self):
        super().__init__()
        self.rescale = Rescale()
        self.features = FrozenFeatures()
        self.heads = nn.ModuleList([LinearHead(w) for w in WIDTHS])
        for p in self.parameters():
            p.requires_grad = False

    def forward(self, a, b):
        fa, fb = self.features(self.rescale(a)), self.features(self.rescale(b))
        total = None
        for k, head in enumerate(self.heads):
            gap = (unit_norm(fa[k]) - unit_norm(fb[k])) ** 2
            term = spatial_mean(head.model(gap))
            if total is None:
                total = term
            else:
                total += term
        return total


def warmup_gate(weight, step, start, value=0.0):
    return value if step < start else weight


def hinge_loss(real, fake):
    return 0.5 * (torch.mean(F.relu(1.0 - real)) + torch.mean(F.relu(1.0 + fake)))


def softplus_loss(real, fake):
    return 0.5 * (torch.mean(F.softplus(-real)) + torch.mean(F.softplus(fake)))


class VQGANLoss(nn.Module):
    def __init__(self, disc_start, disc_depth, disc_width, actnorm, critic_loss, vq_weight=1.0):
        super().__init__()
        self.perceptual = PerceptualDistance().eval()
        self.critic = PatchCritic(3, disc_width, disc_depth, actnorm).apply(init_gan_weights)
        self.disc_start = disc_start
        self.vq_weight = vq_weight
        self.critic_loss = {"hinge": hinge_loss, "vanilla": softplus_loss}[critic_loss]
        print(f"VQGAN loss with a {critic_loss} critic")

    def balance(self, nll, adv, last_layer):
        # the adversarial term gets as large a gradient at the last layer as the rest
        g_nll = torch.autograd.grad(nll, last_layer, retain_graph=True)[0]
        g_adv = torch.autograd.grad(adv, last_layer, retain_graph=True)[0]
        ratio = torch.norm(g_nll) / (torch.norm(g_adv) + 1e-4)
        return torch.clamp(ratio, 0.0, 1e4).detach()

    def forward(self, vq_loss, x, xrec, which, step, last_layer, tag):
        l1 = torch.abs(x.contiguous() - xrec.contiguous())
        perceptual = self.perceptual(x.contiguous(), xrec.contiguous())
        nll = torch.mean(l1 + perceptual)
        gate = warmup_gate(1.0, step, self.disc_start)
        if which == 0:
            adv = -torch.mean(self.critic(xrec.contiguous()))
            try:
                weight = self.balance(nll, adv, last_layer)
            except RuntimeError:  # no graph: validation under no_grad
                assert not self.training
                weight = torch.tensor(0.0)
            total = nll + weight * gate * adv + self.vq_weight * vq_loss.mean()
            return total, {
                f"{tag}/total": total.clone().detach().mean(),
                f"{tag}/vq": vq_loss.detach().mean(),
                f"{tag}/nll": nll.detach().mean(),
                f"{tag}/perceptual": perceptual.detach().mean(),
                f"{tag}/weight": weight.detach(),
                f"{tag}/gate": torch.tensor(gate),
                f"{tag}/adv": adv.detach().mean(),
            }
        real = self.critic(x.contiguous().detach())
        fake = self.critic(xrec.contiguous().detach())
        d_loss = gate * self.critic_loss(real, fake)
        return d_loss, {
            f"{tag}/critic": d_loss.clone().detach().mean(),
            f"{tag}/real": real.detach().mean(),
            f"{tag}/fake": fake.detach().mean(),
        }


class ResBlock(nn.Module):
    def __init__(self, cin, cout, dropout=0.0):
        super().__init__()
        self.norm1, self.conv1 = groupnorm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = groupnorm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.drop = nn.Dropout(dropout)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv1(swish(self.norm1(x)))
        h = self.conv2(self.drop(swish(self.norm2(h))))
        return (x if self.skip is None else self.skip(x)) + h


class Down(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, stride=2, padding=0)

    def forward(self, x):
        # pad right and bottom only: torch's conv pads symmetrically
        return self.conv(F.pad(x, (0, 1, 0, 1), mode="constant", value=0))


class Up(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class Encoder(nn.Module):
    def __init__(self, ch, z_ch):
        super().__init__()
        stem = nn.Conv2d(3, ch, 3, padding=1)
        self.body = nn.Sequential(stem, ResBlock(ch, 2 * ch), Down(2 * ch))
        self.norm_out, self.conv_out = groupnorm(2 * ch), nn.Conv2d(2 * ch, z_ch, 3, padding=1)

    def forward(self, x):
        return self.conv_out(swish(self.norm_out(self.body(x))))


class Decoder(nn.Module):
    def __init__(self, ch, z_ch):
        super().__init__()
        stem = nn.Conv2d(z_ch, 2 * ch, 3, padding=1)
        self.body = nn.Sequential(stem, ResBlock(2 * ch, ch), Up(ch))
        self.norm_out, self.conv_out = groupnorm(ch), nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, z):
        return self.conv_out(swish(self.norm_out(self.body(z))))


class VQGAN(nn.Module):
    def __init__(self, ch, z_ch, n_codes, code_dim, loss_kwargs):
        super().__init__()
        self.encoder, self.decoder = Encoder(ch, z_ch), Decoder(ch, z_ch)
        self.codebook = Codebook(n_codes, code_dim, beta=0.25)
        self.pre_quant = nn.Conv2d(z_ch, code_dim, 1)
        self.post_quant = nn.Conv2d(code_dim, z_ch, 1)
        self.loss = VQGANLoss(**loss_kwargs)
        self.step = 0

    def encode(self, x):
        return self.codebook(self.pre_quant(self.encoder(x)))

    def decode(self, q):
        return self.decoder(self.post_quant(q))

    def forward(self, x):
        q, vq_loss, _ = self.encode(x)
        return self.decode(q), vq_loss

    @staticmethod
    def images(batch):
        x = batch["image"]
        if x.dim() == 3:  # a grey batch: add its channel
            x = x[..., None]
        return x.permute(0, 3, 1, 2).to(memory_format=torch.contiguous_format).float()

    def last_layer(self):
        return self.decoder.conv_out.weight  # where the losses are balanced

    def training_step(self, batch, which):
        x = self.images(batch)
        xrec, vq_loss = self(x)
        loss, log = self.loss(vq_loss, x, xrec, which, self.step, self.last_layer(), "train")
        self.log(log)
        return loss

    def validate(self, batch):
        x = self.images(batch)
        xrec, vq_loss = self(x)
        for which in (0, 1):
            self.log(self.loss(vq_loss, x, xrec, which, self.step, self.last_layer(), "val")[1])

    def optimizers(self, lr):
        parts = (self.encoder, self.decoder, self.codebook, self.pre_quant, self.post_quant)
        generator = [p for part in parts for p in part.parameters()]
        return (
            torch.optim.Adam(generator, lr=lr, betas=(0.5, 0.9)),
            torch.optim.Adam(self.loss.critic.parameters(), lr=lr, betas=(0.5, 0.9)),
        )

    def log(self, values):
        record.append({k: v.item() for k, v in values.items()})


WIDTHS = [4, 6]


def feature_trunk():  # stands in for a pretrained VGG's first layers
    relu = lambda: nn.ReLU(inplace=True)
    trunk = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), relu(), nn.MaxPool2d(2),  # (a pooled second stage)
        nn.Conv2d(4, 6, 3, padding=1), relu(),
    )
    initialize(trunk)
    return trunk


loss_kwargs = dict(disc_start=2, disc_depth=1, disc_width=4)
loss_kwargs.update(actnorm=USE_ACTNORM, critic_loss=CRITIC_LOSS)
model = VQGAN(ch=4, z_ch=4, n_codes=6, code_dim=3, loss_kwargs=loss_kwargs)
initialize(model)
opt_g, opt_d = model.optimizers(lr=1e-3)
data = [{"image": torch.rand(2, 8, 8, 3) * 2 - 1} for _ in range(3)]
for batch in data:
    model.train()
    model.loss.perceptual.eval()  # its dropout stays off: no draws of its own
    for which, opt in ((0, opt_g), (1, opt_d)):
        loss = model.training_step(batch, which)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.step += 1
    record.append(params_of(model))  # every weight after the step
    kept = ("running", "initialized")
    state = model.state_dict()
    record.append({k: v.numpy().copy() for k, v in state.items() if any(s in k for s in kept)})
model.eval()
with torch.no_grad():
    model.validate(data[0])
    _, _, (perplexity, onehot, nearest) = model.encode(model.images(data[1]))
record.append(float(perplexity))
record.append(nearest.numpy().copy())
record.append(onehot.sum(0).numpy().copy())
'''

VQGAN_STEPS = [
    ("\nimport torch\n", "\nimport retrograd as torch\n"),
    ("        loss.backward()\n        opt.step()\n", "        opt.step(loss.backward())\n"),
]


@pytest.mark.parametrize(("use_actnorm", "critic_loss"), [(True, "hinge"), (False, "vanilla")])
def test_vqgan_trains_as_torch(capsys, use_actnorm, critic_loss):
    (theirs, ours), logs = runs_with_draws(
        VQGAN_SOURCE,
        VQGAN_STEPS,
        capsys,
        8701,
        initialize=initializer(),
        params_of=params_of,
        USE_ACTNORM=use_actnorm,
        CRITIC_LOSS=critic_loss,
    )
    assert logs[0] == logs[1] == f"VQGAN loss with a {critic_loss} critic\n"
    # 3 steps of (2 logs, params, buffers), the validation's 2 logs, 3 samples
    assert len(theirs) == 3 * 4 + 2 + 3
    # before disc_start the balancing weight is computed but gated off; after it, both count
    assert theirs[0]["train/gate"] == 0.0 and theirs[-5]["val/weight"] == 0.0
    assert theirs[8]["train/gate"] == 1.0 and theirs[8]["train/weight"] > 0
    # ActNorm's uint8 flag is a buffer, set by its first training forward
    flags = [v for k, v in theirs[3].items() if k.endswith("initialized")]
    assert flags == ([1] if use_actnorm else [])
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)


SRGAN_SOURCE = """
# A small SRGAN in the style of leftthomas/SRGAN: a PReLU residual generator with
# pixel-shuffle upsampling, a sigmoid critic, and a content loss over frozen features.
import math

import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.PReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width),
        )

    def forward(self, x):
        return x + self.body(x)


class ShuffleUp(nn.Module):
    def __init__(self, width, factor):
        super().__init__()
        self.conv = nn.Conv2d(width, width * factor**2, 3, padding=1)
        self.shuffle = nn.PixelShuffle(factor)
        self.act = nn.PReLU()

    def forward(self, x):
        return self.act(self.shuffle(self.conv(x)))


class SRGenerator(nn.Module):
    def __init__(self, scale, width, n_blocks=2):
        super().__init__()
        self.head = nn.Sequential(nn.Conv2d(3, width, 9, padding=4), nn.PReLU())
        self.blocks = nn.Sequential(*[Residual(width) for _ in range(n_blocks)])
        self.fuse = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width))
        ups = [ShuffleUp(width, 2) for _ in range(int(math.log(scale, 2)))]
        self.tail = nn.Sequential(*ups, nn.Conv2d(width, 3, 9, padding=4))

    def forward(self, lr):
        h = self.head(lr)
        out = self.tail(h + self.fuse(self.blocks(h)))
        return (torch.tanh(out) + 1) / 2  # into [0, 1]


class SRCritic(nn.Module):
    def __init__(self, width):
        super().__init__()
        act = lambda: nn.LeakyReLU(0.2)
        self.features = nn.Sequential(  # 2x down, then wider
            nn.Conv2d(3, width, 3, padding=1), act(),
            nn.Conv2d(width, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), act(),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), act(),
        )
        self.classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(1),
            nn.Conv2d(2 * width, 4 * width, 1), act(),
            nn.Conv2d(4 * width, 1, 1),
        )

    def forward(self, img):
        n = img.size(0)
        return torch.sigmoid(self.classifier(self.features(img)).view(n))


class TotalVariation(nn.Module):
    def __init__(self, weight=1.0):
        super().__init__()
        self.weight = weight

    @staticmethod
    def numel(t):
        c, h, w = t.size()[1], t.size()[2], t.size()[3]
        return c * h * w

    def forward(self, x):
        n, rows, cols = x.size()[0], x.size()[2], x.size()[3]
        dy = torch.pow(x[:, :, 1:, :] - x[:, :, : rows - 1, :], 2).sum()
        dx = torch.pow(x[:, :, :, 1:] - x[:, :, :, : cols - 1], 2).sum()
        per_pixel = dy / self.numel(x[:, :, 1:, :]) + dx / self.numel(x[:, :, :, 1:])
        return self.weight * 2 * per_pixel / n


class ContentLoss(nn.Module):
    def __init__(self, feature_net):
        super().__init__()
        self.features = nn.Sequential(*list(feature_net)[:5]).eval()
        for p in self.features.parameters():
            p.requires_grad = False
        self.mse = nn.MSELoss()
        self.tv = TotalVariation()

    def forward(self, judged, sr, hr):
        adversarial = torch.mean(1 - judged)
        perceptual = self.mse(self.features(sr), self.features(hr))
        return self.mse(sr, hr) + 1e-3 * adversarial + 6e-3 * perceptual + 2e-8 * self.tv(sr)


def pretrained_features():  # a tiny stand-in for VGG's convolutional trunk
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2))
    net.append(nn.Conv2d(4, 4, 3, padding=1))
    net.append(nn.ReLU(inplace=True))
    initialize(net)
    return net


G, D = SRGenerator(SCALE, width=4), SRCritic(width=4)
content = ContentLoss(pretrained_features())
initialize(G)
initialize(D)
opt_g, opt_d = optim.Adam(G.parameters()), optim.Adam(D.parameters())
pairs = [(torch.rand(2, 3, 4, 4), torch.rand(2, 3, 4 * SCALE, 4 * SCALE)) for _ in range(2)]

for epoch in range(1, EPOCHS + 1):
    G.train()
    D.train()
    totals = dict(seen=0, d_loss=0.0, g_loss=0.0, d_real=0.0, d_fake=0.0)
    for lr_img, hr_img in pairs:
        n = lr_img.size(0)
        totals["seen"] += n
        # critic: push D(hr) up and D(G(lr)) down; the graph through G is kept
        sr_img = G(lr_img)
        D.zero_grad()
        d_real = D(hr_img).mean()
        d_fake = D(sr_img).mean()
        d_loss = 1 - d_real + d_fake
        d_loss.backward(retain_graph=True)  # kept, as in SRGAN
        opt_d.step()
        # generator: a fresh forward through the updated critic
        G.zero_grad()
        sr_img = G(lr_img)
        d_fake = D(sr_img).mean()
        g_loss = content(d_fake, sr_img, hr_img)
        g_loss.backward()
        opt_g.step()
        batch = dict(d_loss=d_loss, g_loss=g_loss, d_real=d_real, d_fake=d_fake)
        for key, value in batch.items():
            totals[key] += value.item() * n
        seen = totals["seen"]
        print("epoch %d/%d  D %.4f  G %.4f  D(hr) %.4f  D(sr) %.4f" % (
            epoch, EPOCHS, totals["d_loss"] / seen, totals["g_loss"] / seen,
            totals["d_real"] / seen, totals["d_fake"] / seen))
        record.append(dict(totals))
        record.append(params_of(G, D))
    G.eval()
    with torch.no_grad():
        record.append(G(pairs[0][0]).numpy().copy())
    record.append(params_of(content))
"""

SRGAN_STEPS = [
    (
        "\nimport torch\nfrom torch import nn\n",
        "\nimport retrograd as torch\nfrom retrograd import nn\n",
    ),
    (
        "        d_loss.backward(retain_graph=True)  # kept, as in SRGAN\n        opt_d.step()\n",
        "        opt_d.step(d_loss.backward(retain_graph=True))\n",
    ),
    (
        "        g_loss.backward()\n        opt_g.step()\n",
        "        opt_g.step(g_loss.backward())\n",
    ),
]


def test_srgan_trains_as_torch(capsys):
    (theirs, ours), logs = runs_with_draws(
        SRGAN_SOURCE,
        SRGAN_STEPS,
        capsys,
        8702,
        initialize=initializer(),
        params_of=params_of,
        SCALE=2,
        EPOCHS=1,
    )
    assert len(theirs) == 2 * 2 + 2
    assert logs[0].count("\n") == 2 and logs[0] == logs[1]
    # a convolution's bias just before a BatchNorm has no true gradient (Adam follows noise)
    before_batch_norm = [
        *(f"0.blocks.{i}.body.{j}.bias" for i in (0, 1) for j in (0, 3)),
        "0.fuse.0.bias",
        "1.features.2.bias",
        "1.features.5.bias",
    ]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=before_batch_norm)
    # the frozen feature network never moved
    assert all(np.array_equal(v, theirs[-1][k]) for k, v in ours[-1].items())


ESRGAN_SOURCE = """
# An ESRGAN training step in the style of xinntao/BasicSR: an RRDB generator, a relativistic
# GAN loss, an L1 feature loss on frozen, input-normalised features, the critic frozen by
# requires_grad while the generator steps.
import functools
import collections

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.nn import init


def scaled_kaiming_(modules, scale=1.0):
    for module in modules:
        for m in module.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                init.kaiming_normal_(m.weight, a=0, mode="fan_in")
                m.weight.data *= scale  # small residual branches train more stably
                if m.bias is not None:
                    m.bias.data.zero_()
            elif isinstance(m, nn.BatchNorm2d):  # the identity map
                init.constant_(m.weight, 1)
                init.constant_(m.bias.data, 0.0)  # through .data too


def stack(make, count):
    return nn.Sequential(*[make() for _ in range(count)])


class DenseBlock(nn.Module):
    # five convolutions, each seeing the input and every earlier output
    def __init__(self, width, growth):
        super().__init__()
        self.convs = nn.ModuleList(
            nn.Conv2d(width + i * growth, growth if i < 4 else width, 3, 1, 1) for i in range(5)
        )
        self.act = nn.LeakyReLU(negative_slope=0.2, inplace=True)
        scaled_kaiming_(list(self.convs), 0.1)

    def forward(self, x):
        seen = [x]
        for conv in self.convs[:4]:
            seen.append(self.act(conv(torch.cat(seen, 1))))
        return self.convs[4](torch.cat(seen, 1)) * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, width, growth):
        super().__init__()
        self.dense = nn.Sequential(*[DenseBlock(width, growth) for _ in range(3)])

    def forward(self, x):
        return self.dense(x) * 0.2 + x


class RRDBGenerator(nn.Module):
    def __init__(self, width, n_blocks, growth):
        super().__init__()
        self.first = nn.Conv2d(3, width, 3, 1, 1)
        self.trunk = stack(functools.partial(RRDB, width=width, growth=growth), n_blocks)
        self.after_trunk = nn.Conv2d(width, width, 3, 1, 1)
        self.up = nn.Conv2d(width, width, 3, 1, 1)
        self.hr = nn.Conv2d(width, width, 3, 1, 1)
        self.last = nn.Conv2d(width, 3, 3, 1, 1)
        self.act = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, x):
        feat = self.first(x)
        feat = feat + self.after_trunk(self.trunk(feat))
        feat = self.act(self.up(F.interpolate(feat, scale_factor=2, mode="nearest")))
        return self.last(self.act(self.hr(feat)))


class AdversarialLoss(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        if kind in ("gan", "ragan"):
            self.criterion = nn.BCEWithLogitsLoss()
        elif kind == "lsgan":
            self.criterion = nn.MSELoss()
        else:
            raise NotImplementedError(kind)

    def forward(self, logits, is_real):
        target = torch.empty_like(logits).fill_(1.0 if is_real else 0.0)
        return self.criterion(logits, target)


class FeatureL1Net(nn.Module):
    def __init__(self, last_layer, device=torch.device("cpu")):
        super().__init__()
        # ImageNet statistics, as (1, 3, 1, 1) buffers
        for name, values in (("mean", [0.485, 0.456, 0.406]), ("std", [0.229, 0.224, 0.225])):
            self.register_buffer(name, torch.Tensor(values).view(1, 3, 1, 1).to(device))
        trunk = pretrained_trunk()
        self.features = nn.Sequential(*list(trunk.children())[: last_layer + 1])
        for _, p in self.features.named_parameters():
            p.requires_grad = False

    def forward(self, img):
        return self.features((img - self.mean) / self.std)


def pretrained_trunk():  # a tiny stand-in for VGG19's features
    trunk = nn.Sequential()
    for i, layer in enumerate([nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(True), nn.MaxPool2d(2, 2)]):
        trunk.add_module(str(i), layer)
    trunk.add_module("3", nn.Conv2d(4, 4, 3, padding=1))
    trunk.add_module("4", nn.ReLU(True))
    initialize(trunk)
    return trunk


class Critic(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.conv_a = nn.Conv2d(3, width, 3, 1, 1)
        self.conv_b = nn.Conv2d(width, width, 4, 2, 1, bias=False)
        self.norm_b = nn.BatchNorm2d(width, affine=True)
        self.fc1, self.fc2 = nn.Linear(width * 16, 8), nn.Linear(8, 1)
        self.act = nn.LeakyReLU(negative_slope=0.2, inplace=True)

    def forward(self, img):
        h = self.act(self.norm_b(self.conv_b(self.act(self.conv_a(img)))))
        return self.fc2(self.act(self.fc1(h.view(h.size(0), -1))))


class SRTrainer:
    def __init__(self, cfg):
        self.cfg = cfg
        self.G = RRDBGenerator(width=4, n_blocks=1, growth=2)
        self.D = Critic(4)
        self.F = FeatureL1Net(last_layer=3)
        self.F.eval()
        initialize(self.G)
        initialize(self.D)
        self.pixel_loss, self.feature_loss = nn.L1Loss(), nn.L1Loss()
        self.gan_loss = AdversarialLoss(cfg["gan_type"])
        self.d_every = cfg["d_every"] or 1
        self.d_warmup = cfg["d_warmup"] or 0
        trainable = [p for _, p in self.G.named_parameters() if p.requires_grad]
        hyper = dict(lr=cfg["lr"], weight_decay=cfg["wd"] or 0, betas=(0.9, 0.99))
        self.opt_G = torch.optim.Adam(trainable, **hyper)
        self.opt_D = torch.optim.Adam(self.D.parameters(), **hyper)
        self.log = collections.OrderedDict()

    def set_critic_trainable(self, flag):
        for p in self.D.parameters():
            p.requires_grad = flag

    def relativistic(self, mine, other, is_real):
        return self.gan_loss(mine - torch.mean(other), is_real)

    def train_step(self, step, lq, gt):
        cfg = self.cfg
        self.set_critic_trainable(False)
        self.opt_G.zero_grad()
        self.sr = self.G(lq)
        generator_steps = step % self.d_every == 0 and step > self.d_warmup
        if generator_steps:
            g_total = 0
            g_pix = cfg["w_pixel"] * self.pixel_loss(self.sr, gt)
            g_total += g_pix
            g_fea = cfg["w_feature"] * self.feature_loss(self.F(self.sr), self.F(gt).detach())
            g_total += g_fea
            fake_logits = self.D(self.sr)
            if cfg["gan_type"] == "ragan":
                real_logits = self.D(gt).detach()
                g_gan = (self.relativistic(real_logits, fake_logits, False)
                         + self.relativistic(fake_logits, real_logits, True)) / 2
            else:
                g_gan = self.gan_loss(fake_logits, True)
            g_gan = cfg["w_gan"] * g_gan
            g_total += g_gan
            g_total.backward()
            self.opt_G.step()

        self.set_critic_trainable(True)
        self.opt_D.zero_grad()
        real_logits = self.D(gt)
        fake_logits = self.D(self.sr.detach())  # no gradient into G
        if cfg["gan_type"] == "ragan":
            d_real = self.relativistic(real_logits, fake_logits, True)
            d_fake = self.relativistic(fake_logits, real_logits, False)
            d_total = (d_real + d_fake) / 2
        else:
            d_real, d_fake = self.gan_loss(real_logits, True), self.gan_loss(fake_logits, False)
            d_total = d_real + d_fake
        d_total.backward()
        self.opt_D.step()

        self.log["d_real"], self.log["d_fake"] = d_real.item(), d_fake.item()
        self.log["D(hr)"] = torch.mean(real_logits.detach())
        self.log["D(sr)"] = torch.mean(fake_logits.detach())
        if generator_steps:
            self.log.update(g_pix=g_pix.item(), g_fea=g_fea.item(), g_gan=g_gan.item())


trainer = SRTrainer(cfg)
for step in range(3):
    trainer.train_step(step, torch.rand(2, 3, 4, 4), torch.rand(2, 3, 8, 8))
    record.append({k: float(v) for k, v in trainer.log.items()})
    record.append(float(trainer.log["D(hr)"] - trainer.log["D(sr)"]))
    record.append(params_of(trainer.G, trainer.D))
    record.append([name for name, p in trainer.D.named_parameters() if not p.requires_grad])
    record.append([name for name, p in trainer.F.named_parameters() if p.requires_grad])
"""

ESRGAN_STEPS = [
    (
        "\nimport torch\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd.nn as nn\n",
    ),
    (
        "            g_total.backward()\n            self.opt_G.step()\n",
        "            self.opt_G.step(g_total.backward())\n",
    ),
    (
        "        d_total.backward()\n        self.opt_D.step()\n",
        "        self.opt_D.step(d_total.backward())\n",
    ),
]


def test_esrgan_trains_as_torch(capsys):
    cfg = {
        "gan_type": "ragan",
        "w_pixel": 1e-2,
        "w_feature": 1.0,
        "w_gan": 5e-3,
        "d_every": 1,
        "d_warmup": 0,
        "lr": 1e-3,
        "wd": 0,
    }
    (theirs, ours), _ = runs_with_draws(
        ESRGAN_SOURCE,
        ESRGAN_STEPS,
        capsys,
        8703,
        initialize=initializer(),
        params_of=params_of,
        cfg=cfg,
    )
    assert len(theirs) == 3 * 5
    assert list(theirs[0]) == ["d_real", "d_fake", "D(hr)", "D(sr)"]  # step 0: the critic only
    assert list(theirs[5]) == ["d_real", "d_fake", "D(hr)", "D(sr)", "g_pix", "g_fea", "g_gan"]
    assert theirs[3] == [] and theirs[4] == []
    # the relativistic losses see D's outputs only by differences: its last bias (so the raw
    # D(hr) and D(sr), recorded as their difference) and the biases of units that the leaky
    # ReLU passes on one side for every sample have no true gradient
    shift_invariant = ["1.fc1.bias", "1.fc2.bias", "D(hr)", "D(sr)"]
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5, skip=shift_invariant)


CONTROLNET_SOURCE = '''
# ControlNet in the style of lllyasviel/ControlNet on a toy latent-diffusion UNet: a trainable
# copy of the UNet's encoder reads a hint image and adds its features, through zero-initialised
# 1x1 convolutions, to the skips of the locked UNet; ResBlocks may recompute their activations
# in the backward pass (gradient checkpointing by a custom autograd.Function).
import copy
import math

import torch
import torch as th
import torch.nn as nn


def conv_nd(dims, *args, **kw):
    layers = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
    if dims not in layers:
        raise ValueError(f"no {dims}-d convolution")
    return layers[dims](*args, **kw)


def linear(*args, **kw):
    return nn.Linear(*args, **kw)


def zero_module(module):
    """``module`` with every parameter set to zero (it starts as a no-op branch)."""
    for p in module.parameters():
        p.detach().zero_()
    return module


class GroupNorm32(torch.nn.GroupNorm):
    # normalise in float32 whatever the activations' dtype
    def forward(self, x):
        y = super().forward(x.float())
        return y.type(x.dtype)


def normalization(width):
    return GroupNorm32(2, width)


class Recompute(torch.autograd.Function):
    """Runs ``fn`` without keeping its graph; the backward pass runs it again under grad."""

    @staticmethod
    def forward(ctx, fn, n_inputs, *args):
        ctx.fn = fn
        ctx.inputs = list(args[:n_inputs])
        ctx.params = list(args[n_inputs:])
        ctx.autocast = {
            "enabled": torch.is_autocast_enabled(),
            "dtype": torch.get_autocast_gpu_dtype(),  # (CUDA's; unused on CPU)
            "cache_enabled": torch.is_autocast_cache_enabled(),
        }
        with torch.no_grad():
            return fn(*ctx.inputs)

    @staticmethod
    def backward(ctx, *grad_out):
        inputs = [x.detach().requires_grad_(True) for x in ctx.inputs]
        with torch.enable_grad(), torch.cuda.amp.autocast(**ctx.autocast):
            # views, so that an in-place first op of fn does not touch a detached leaf
            out = ctx.fn(*[x.view_as(x) for x in inputs])
        grads = torch.autograd.grad(out, inputs + ctx.params, grad_out, allow_unused=True)
        del ctx.inputs, ctx.params
        return (None, None) + grads


def checkpoint(fn, inputs, params, enabled):
    if not enabled:
        return fn(*inputs)
    return Recompute.apply(fn, len(inputs), *(tuple(inputs) + tuple(params)))


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    exponent = -math.log(max_period) * torch.arange(start=0, end=half, dtype=torch.float32) / half
    freqs = torch.exp(exponent).to(device=t.device)
    angles = t[:, None].float() * freqs[None]
    emb = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    if dim % 2:  # an odd width gets a zero column
        emb = torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)
    return emb


class TimestepBlock(torch.nn.Module):
    """A block whose forward also takes the timestep embedding."""


class EmbedSequential(nn.Sequential, TimestepBlock):
    def forward(self, x, emb, context=None):  # (no cross-attention here)
        for layer in self:
            x = layer(x, emb) if isinstance(layer, TimestepBlock) else layer(x)
        return x


class ResBlock(TimestepBlock):  # conditioned on the timestep
    def __init__(self, cin, emb_dim, cout=None, dropout=0.0, dims=2):
        super().__init__()
        cout = cout or cin
        self.use_checkpoint = USE_CHECKPOINT
        conv_in = conv_nd(dims, cin, cout, 3, padding=1)
        self.in_layers = nn.Sequential(normalization(cin), nn.SiLU(), conv_in)
        self.emb_layers = nn.Sequential(nn.SiLU(), linear(emb_dim, cout))
        self.out_layers = torch.nn.Sequential(
            normalization(cout), nn.SiLU(), nn.Dropout(p=dropout),
            zero_module(conv_nd(dims, cout, cout, 3, padding=1)),
        )
        self.skip = nn.Identity() if cout == cin else conv_nd(dims, cin, cout, 1)

    def forward(self, x, emb):
        return checkpoint(self._forward, (x, emb), self.parameters(), self.use_checkpoint)

    def _forward(self, x, emb):
        h = self.in_layers(x)
        e = self.emb_layers(emb).type(h.dtype)
        while len(e.shape) < len(h.shape):
            e = e[..., None]
        return self.skip(x) + self.out_layers(h + e)


class Downsample(nn.Module):
    def __init__(self, width, dims=2):
        super().__init__()
        self.width = width
        self.op = conv_nd(dims, width, width, 3, stride=2, padding=1)

    def forward(self, x):
        assert x.shape[1] == self.width
        return self.op(x)


class Upsample(nn.Module):
    def __init__(self, width, dims=2):
        super().__init__()
        self.width = width
        self.conv = conv_nd(dims, width, width, 3, padding=1)

    def forward(self, x):
        assert x.shape[1] == self.width
        return self.conv(nn.functional.interpolate(x, scale_factor=2, mode="nearest"))


class TinyUNet(nn.Module):
    def __init__(self, cin, ch, cout, dims=2):
        super().__init__()
        self.ch, self.dtype = ch, th.float32
        emb = 4 * ch
        self.time_embed = nn.Sequential(linear(ch, emb), nn.SiLU(), linear(emb, emb))
        self.input_blocks = nn.ModuleList([
            EmbedSequential(conv_nd(dims, cin, ch, 3, padding=1)),
            EmbedSequential(ResBlock(ch, emb)),
            EmbedSequential(Downsample(ch, dims)),
            EmbedSequential(ResBlock(ch, emb, 2 * ch)),
        ])
        self.middle_block = EmbedSequential(ResBlock(2 * ch, emb))
        # each decoder block takes the matching skip, concatenated on channels
        self.output_blocks = nn.ModuleList([
            EmbedSequential(ResBlock(4 * ch, emb, 2 * ch)),
            EmbedSequential(ResBlock(3 * ch, emb, 2 * ch), Upsample(2 * ch, dims)),
            EmbedSequential(ResBlock(3 * ch, emb, ch)),
            EmbedSequential(ResBlock(2 * ch, emb, ch)),
        ])
        conv_out = zero_module(conv_nd(dims, ch, cout, 3, padding=1))
        self.out = nn.Sequential(normalization(ch), nn.SiLU(), conv_out)


class ControlledUNet(TinyUNet):
    def forward(self, x, t, control=None, mid_only=False):
        skips = []
        with torch.no_grad():  # the locked encoder
            emb = self.time_embed(timestep_embedding(t, self.ch))
            h = x.type(self.dtype)
            for block in self.input_blocks:
                h = block(h, emb)
                skips.append(h)
            h = self.middle_block(h, emb)
        if control is not None:
            h += control.pop()
        for block in self.output_blocks:
            skip = skips.pop()
            if control is not None and not mid_only:
                skip = skip + control.pop()
            h = block(torch.cat([skip, h], dim=1), emb)
        return self.out(h.type(x.dtype))


class ControlBranch(nn.Module):
    def __init__(self, unet, hint_ch, ch, dims=2):
        super().__init__()
        self.ch, self.dims, self.dtype = ch, dims, th.float32
        # a trainable copy of the UNet's encoder, starting from its weights
        for name in ("time_embed", "input_blocks", "middle_block"):
            setattr(self, name, copy.deepcopy(getattr(unet, name)))
        self.hint_encoder = EmbedSequential(
            conv_nd(dims, hint_ch, 4, 3, padding=1), nn.SiLU(),
            conv_nd(dims, 4, 4, 3, padding=1), nn.SiLU(),
            zero_module(conv_nd(dims, 4, ch, 3, padding=1)),
        )
        self.zero_convs = nn.ModuleList([self.zero_conv(w) for w in (ch, ch, ch, 2 * ch)])
        self.middle_out = self.zero_conv(2 * ch)

    def zero_conv(self, width):
        return EmbedSequential(zero_module(conv_nd(self.dims, width, width, 1, padding=0)))

    def forward(self, x, hint, t):
        emb = self.time_embed(timestep_embedding(t, self.ch))
        hint = self.hint_encoder(hint, emb)
        outs, h = [], x.type(self.dtype)
        for block, zero_conv in zip(self.input_blocks, self.zero_convs):
            h = block(h, emb)
            if hint is not None:  # the hint joins after the first block only
                h += hint
                hint = None
            outs.append(zero_conv(h, emb))
        h = self.middle_block(h, emb)
        outs.append(self.middle_out(h, emb))
        return outs


unet = ControlledUNet(cin=2, ch=4, cout=2)
initialize(unet)
control_net = ControlBranch(unet, hint_ch=3, ch=4)
initialize(control_net)
# the copy owns its parameters: training it leaves the locked encoder alone
pairs = zip(control_net.input_blocks.parameters(), unet.input_blocks.parameters())
record.append(all(a is not b for a, b in pairs))
scales = [1.0] * 5

trained = list(control_net.parameters())
if not SD_LOCKED:  # also tune the UNet's decoder
    trained += [*unet.output_blocks.parameters(), *unet.out.parameters()]
opt = torch.optim.AdamW(trained, lr=1e-3)

alpha_bar = torch.cumprod(1 - torch.linspace(1e-2, 0.2, 10), dim=0)
for _ in range(2):
    latents, hint = torch.randn(2, 2, 4, 4), torch.rand(2, 3, 4, 4)
    t = torch.randint(0, len(alpha_bar), (2,))
    noise = torch.randn_like(latents)
    a = alpha_bar[t].view(-1, 1, 1, 1)
    noisy = a.sqrt() * latents + (1 - a).sqrt() * noise
    control = [c * s for c, s in zip(control_net(noisy, hint, t), scales)]
    loss = torch.nn.functional.mse_loss(unet(noisy, t, control=control), noise)
    opt.zero_grad()
    loss.backward()
    opt.step()
    record.append(loss.item())
    record.append(params_of(control_net, unet))
'''

CONTROLNET_STEPS = [
    (
        "\nimport torch\nimport torch as th\nimport torch.nn as nn\n",
        "\nimport retrograd as torch\nimport retrograd as th\nimport retrograd.nn as nn\n",
    ),
    ("    loss.backward()\n    opt.step()\n", "    opt.step(loss.backward())\n"),
]


@pytest.mark.parametrize(("sd_locked", "use_checkpoint"), [(False, True), (True, False)])
def test_controlnet_trains_its_copy_as_torch(capsys, sd_locked, use_checkpoint):
    (theirs, ours), _ = runs_with_draws(
        CONTROLNET_SOURCE,
        CONTROLNET_STEPS,
        capsys,
        8704,
        initialize=initializer(),
        params_of=params_of,
        SD_LOCKED=sd_locked,
        USE_CHECKPOINT=use_checkpoint,
    )
    assert theirs[0] is True and ours[0] is True
    assert len(theirs) == 1 + 2 * 2
    # the locked encoder never moves; unlocked, the decoder does
    before, after = theirs[2], theirs[-1]
    assert all(
        np.array_equal(before[k], after[k]) for k in before if k.startswith("1.input_blocks")
    )
    moved = [
        k
        for k in before
        if k.startswith("1.output_blocks") and not np.array_equal(before[k], after[k])
    ]
    assert bool(moved) is not sd_locked
    assert_records_agree(ours, theirs, rtol=2e-4, atol=2e-5)
